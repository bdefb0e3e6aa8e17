//! Go-style durations (`metav1.Duration`): `30s`, `1h30m`, `500ms`, `1.5h`.

use std::time::Duration;

/// Parses a non-negative Go duration string. The error says what was wrong and what is allowed.
pub fn parse(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "{s:?} is not a duration; use a number with a unit (ns, us, ms, s, m, h), such as 30s, 5m or 1h30m"
        )
    };
    let text = s.strip_prefix('+').unwrap_or(s);
    if text.starts_with('-') {
        return Err(format!(
            "{s:?} is negative; durations here must be 0 or more"
        ));
    }
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if num_len == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per_unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        total += value * nanos_per_unit;
        rest = &rest[unit_len..];
    }
    if !total.is_finite() || total > u64::MAX as f64 {
        return Err(format!("{s:?} is too long"));
    }
    Ok(Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse("24h"), Ok(Duration::from_secs(86400)));
    }

    #[test]
    fn rejects_what_go_rejects_with_a_clear_message() {
        for bad in ["", "soon", "10", "1d", "h", "1h-5m"] {
            let e = parse(bad).err().unwrap_or_default();
            assert!(e.contains("is not a duration"), "{bad}: {e}");
        }
        assert!(parse("-1h").err().unwrap_or_default().contains("negative"));
    }
}

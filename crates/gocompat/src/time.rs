//! `metav1.Time`: decoded with Go's `time.Parse(time.RFC3339, s)`, written in UTC as RFC 3339
//! with whole seconds (the fraction is cut, not rounded), and `null` for the zero time
//! (0001-01-01T00:00:00Z, reached by any spelling of that instant).

/// An instant: seconds since the Unix epoch and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Instant {
    secs: i64,
    nanos: u32,
}

/// Seconds from 0001-01-01T00:00:00Z (Go's zero time) to the Unix epoch.
const ZERO_TIME_SECS: i64 = -62_135_596_800;

impl Instant {
    pub(crate) fn is_zero(self) -> bool {
        self.secs == ZERO_TIME_SECS && self.nanos == 0
    }

    /// `t.UTC().Format(time.RFC3339)`.
    pub(crate) fn rfc3339_utc(self) -> String {
        let days = self.secs.div_euclid(86_400);
        let rem = self.secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        let year = if y < 0 {
            format!("-{:04}", -y)
        } else {
            format!("{y:04}")
        };
        format!(
            "{year}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            rem / 3600,
            rem / 60 % 60,
            rem % 60
        )
    }
}

/// Go's fast RFC 3339 parser (`parseRFC3339`). Go falls back to its general layout parser for
/// what this refuses, which also accepts a few loose forms (a one-digit hour, a comma before
/// the fraction); those are refused here.
pub(crate) fn parse_rfc3339(s: &str) -> Option<Instant> {
    let b = s.as_bytes();
    if b.len() < 19 {
        return None;
    }
    let num = |from: usize, to: usize, min: i64, max: i64| -> Option<i64> {
        let part = b.get(from..to)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let v = part
            .iter()
            .fold(0i64, |acc, c| acc * 10 + i64::from(c - b'0'));
        (min..=max).contains(&v).then_some(v)
    };
    let year = num(0, 4, 0, 9999)?;
    let month = num(5, 7, 1, 12)?;
    let day = num(8, 10, 1, days_in(month, year))?;
    let hour = num(11, 13, 0, 23)?;
    let min = num(14, 16, 0, 59)?;
    let sec = num(17, 19, 0, 59)?;
    if !(b[4] == b'-' && b[7] == b'-' && b[10] == b'T' && b[13] == b':' && b[16] == b':') {
        return None;
    }
    let mut rest = &b[19..];
    let mut nanos: u32 = 0;
    if rest.len() >= 2 && rest[0] == b'.' && rest[1].is_ascii_digit() {
        let n = 1 + rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        // Go reads at most nine digits of the fraction and ignores the rest.
        let digits = &rest[1..n.min(10)];
        let mut v: u32 = digits
            .iter()
            .fold(0, |acc, c| acc * 10 + u32::from(c - b'0'));
        for _ in digits.len()..9 {
            v *= 10;
        }
        nanos = v;
        rest = &rest[n..];
    }
    let mut secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec;
    if rest != b"Z" {
        if rest.len() != 6 {
            return None;
        }
        let tz = std::str::from_utf8(rest).ok()?;
        let hh: i64 = digits2(&tz[1..3]).filter(|h| *h <= 23)?;
        let mm: i64 = digits2(&tz[4..6]).filter(|m| *m <= 59)?;
        if !((rest[0] == b'-' || rest[0] == b'+') && rest[3] == b':') {
            return None;
        }
        let offset = (hh * 60 + mm) * 60;
        secs -= if rest[0] == b'-' { -offset } else { offset };
    }
    Some(Instant { secs, nanos })
}

fn digits2(s: &str) -> Option<i64> {
    s.bytes()
        .all(|c| c.is_ascii_digit())
        .then(|| s.parse().ok())
        .flatten()
}

fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in(month: i64, year: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::parse_rfc3339;

    #[test]
    fn utc_whole_seconds() {
        let t = parse_rfc3339("2024-02-29T23:30:00.999+01:00").map(|t| t.rfc3339_utc());
        assert_eq!(t.as_deref(), Some("2024-02-29T22:30:00Z"));
        assert!(parse_rfc3339("0001-01-01T01:00:00+01:00").is_some_and(|t| t.is_zero()));
        assert!(parse_rfc3339("2023-02-29T00:00:00Z").is_none());
        let t = parse_rfc3339("0000-01-01T00:00:00+01:00").map(|t| t.rfc3339_utc());
        assert_eq!(t.as_deref(), Some("-0001-12-31T23:00:00Z"));
    }
}

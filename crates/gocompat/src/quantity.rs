//! `resource.Quantity` as Go parses and prints it (k8s.io/apimachinery v0.36.3).
//!
//! The rules, in short:
//! - A quantity is `[+-]digits[.digits]` then a suffix: a decimal SI one (`n u m "" k M G T P E`),
//!   a binary one (`Ki Mi Gi Ti Pi Ei`), or an exponent (`e3`, `E-6`, `e+2`). Leading zeros are
//!   skipped, an empty integer part counts as `0` (so `.`, `+`, `-` and `.5` all parse), and
//!   `1.G` is accepted.
//! - When the input is already canonical Go keeps the very string it was given and prints it
//!   back unchanged: a decimal or exponent value whose digits fit in 18 places, whose scale
//!   (after moving the fraction into it) is a multiple of 3 and at least nano, that does not end
//!   in `000` and does not start with `0`; or a whole binary value whose number is not a multiple
//!   of 8. That is why `+1`, `01`, `1e3` and `+1Gi` print as given, and `1e21` too.
//! - Otherwise the value is computed exactly, rounded *up* (away from zero) to a whole number of
//!   nanos, and printed as digits plus the suffix of its format: trailing zeros move into the
//!   exponent, which is then lowered to a multiple of 3 (`0.5` is `500m`, `1e100` is `10e99`).
//!   A decimal exponent with no SI suffix (above `E`) prints with no suffix at all, which is
//!   Go's behaviour: `1000E` prints `1`.
//! - Binary values print in base 1024 when they are whole numbers of at least 1024 in
//!   magnitude (`1.5Gi` is `1536Mi`); otherwise as decimal SI (`0.1Gi` is `107374182400m`,
//!   `0.5Ki` is `512`). Binary values above 2^63-1 are capped there (`8Ei`).
//! - Zero, however written, prints `0`.

use std::cmp::Ordering;
use std::fmt;

/// Why Go would refuse a quantity string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuantityError {
    /// The string does not have the shape of a quantity.
    Format,
    /// The numeric part does not parse.
    Numeric,
    /// The suffix is not one Go knows.
    Suffix,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuantityError::Format => "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            QuantityError::Numeric => "unable to parse numeric part of quantity",
            QuantityError::Suffix => "unable to parse quantity's suffix",
        })
    }
}

impl std::error::Error for QuantityError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    DecimalExponent,
    BinarySi,
    DecimalSi,
}

/// The string Go's `resource.MustParse(s).String()` returns (and, quoted, what `MarshalJSON`
/// writes), or the error `ParseQuantity` would return.
pub fn canonical(s: &str) -> Result<String, QuantityError> {
    let q = parse(s)?;
    if let Some(kept) = q.kept {
        return Ok(kept);
    }
    Ok(q.to_canonical())
}

/// A parsed quantity: `sign * digits * 10^exp`, in a format, maybe with the kept input string.
struct Quantity {
    negative: bool,
    digits: Digits,
    exp: i64,
    format: Format,
    kept: Option<String>,
}

struct Scanned<'a> {
    positive: bool,
    value: &'a str,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

/// Go's `parseQuantityString`, a hand-written scanner (it is more permissive than its regexp).
fn scan(s: &str) -> Result<Scanned<'_>, QuantityError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut out = Scanned {
        positive: true,
        value: "",
        num: "",
        denom: "",
        suffix: "",
    };
    let mut pos = 0;
    if let Some(&c) = b.first() {
        match c {
            b'-' => {
                out.positive = false;
                pos += 1;
            }
            b'+' => pos += 1,
            _ => {}
        }
    }
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        out.num = "0";
        out.value = "0";
        return Ok(out);
    }
    let start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos >= end {
        out.num = &s[start..];
        out.value = s;
        return Ok(out);
    }
    out.num = if pos == start { "0" } else { &s[start..pos] };
    if b[pos] == b'.' {
        pos += 1;
        let dstart = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos >= end {
            out.denom = &s[dstart..];
            out.value = s;
            return Ok(out);
        }
        out.denom = &s[dstart..pos];
    }
    out.value = &s[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos >= end {
        out.suffix = &s[suffix_start..];
        return Ok(out);
    }
    if b[pos] == b'-' || b[pos] == b'+' {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos >= end {
        out.suffix = &s[suffix_start..];
        return Ok(out);
    }
    Err(QuantityError::Format)
}

/// Go's suffix interpretation: (base, exponent, format).
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let dec = |e| Some((10, e, Format::DecimalSi));
    let bin = |e| Some((2, e, Format::BinarySi));
    match suffix {
        "" => dec(0),
        "n" => dec(-9),
        "u" => dec(-6),
        "m" => dec(-3),
        "k" => dec(3),
        "M" => dec(6),
        "G" => dec(9),
        "T" => dec(12),
        "P" => dec(15),
        "E" => dec(18),
        "Ki" => bin(10),
        "Mi" => bin(20),
        "Gi" => bin(30),
        "Ti" => bin(40),
        "Pi" => bin(50),
        "Ei" => bin(60),
        _ if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) => {
            // strconv.ParseInt(s, 10, 64), then truncated to int32 as Go does.
            let exp = go_parse_i64(&suffix[1..])?;
            Some((10, exp as i32, Format::DecimalExponent))
        }
        _ => None,
    }
}

/// `strconv.ParseInt(s, 10, 64)`: an optional sign, then at least one digit.
fn go_parse_i64(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok()
}

fn parse(s: &str) -> Result<Quantity, QuantityError> {
    if s.is_empty() {
        return Err(QuantityError::Format);
    }
    if s == "0" {
        return Ok(Quantity {
            negative: false,
            digits: Digits::zero(),
            exp: 0,
            format: Format::DecimalSi,
            kept: Some(s.to_string()),
        });
    }
    let sc = scan(s)?;
    let (base, exponent, format) = interpret(sc.suffix).ok_or(QuantityError::Suffix)?;
    let ndigits = (sc.num.len() + sc.denom.len()) as i64;

    // The int64 fast path, which may keep the input string.
    let (mut scale, precision, mantissa_shift) = match format {
        Format::DecimalExponent | Format::DecimalSi => (i64::from(exponent), 18 - ndigits, None),
        Format::BinarySi if sc.denom.is_empty() => {
            let k = i64::from(exponent) * 3 / 10;
            (0, 15 - sc.num.len() as i64 - k - 1, Some(exponent))
        }
        Format::BinarySi => (0, -1, Some(exponent)),
    };
    if precision >= 0 {
        scale -= sc.denom.len() as i64;
        if scale >= -9 {
            let shifted = format!("{}{}", sc.num, sc.denom);
            let value: i64 = shifted.parse().map_err(|_| QuantityError::Numeric)?;
            let product = match mantissa_shift {
                Some(e) => 1i64
                    .checked_shl(e as u32)
                    .and_then(|m| value.checked_mul(m)),
                None => Some(value),
            };
            if let Some(product) = product {
                let keep = match format {
                    Format::BinarySi => exponent % 10 == 0 && value & 0x07 != 0,
                    _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
                };
                return Ok(Quantity {
                    negative: !sc.positive && product != 0,
                    digits: Digits::from_u64(product.unsigned_abs()),
                    exp: scale,
                    format,
                    kept: keep.then(|| s.to_string()),
                });
            }
        }
    }

    // The exact (inf.Dec) path.
    let (negative, mut digits, mut exp) = parse_decimal(sc.value).ok_or(QuantityError::Numeric)?;
    if base == 10 {
        exp += i64::from(exponent);
    } else {
        digits = digits.mul_small(1u64 << exponent);
    }
    let mut format = format;
    if !digits.is_zero() && exp < -9 {
        // Round up (away from zero) to a whole number of nanos.
        digits = digits.drop_low_round_up((-9 - exp) as u64);
        exp = -9;
    }
    if format == Format::BinarySi {
        let max = Digits::from_u64(i64::MAX as u64);
        if cmp_scaled(&digits, exp, &max) == Ordering::Greater {
            digits = max;
            exp = 0;
        }
        if !digits.is_zero() && cmp_scaled(&digits, exp, &Digits::from_u64(1)) == Ordering::Less {
            format = Format::DecimalSi;
        }
    }
    Ok(Quantity {
        negative: negative && !digits.is_zero(),
        digits,
        exp,
        format,
        kept: None,
    })
}

/// inf.Dec's SetString for what the scanner returned: sign, digits and at most one '.'.
fn parse_decimal(v: &str) -> Option<(bool, Digits, i64)> {
    let (negative, rest) = match v.as_bytes().first() {
        Some(b'-') => (true, &v[1..]),
        Some(b'+') => (false, &v[1..]),
        _ => (false, v),
    };
    let (int, frac) = rest.split_once('.').unwrap_or((rest, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let all: Vec<u8> = int.bytes().chain(frac.bytes()).collect();
    if !all.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some((negative, Digits::from_ascii(&all), -(frac.len() as i64)))
}

/// Compares `digits * 10^exp` with the integer `n`.
fn cmp_scaled(digits: &Digits, exp: i64, n: &Digits) -> Ordering {
    if digits.is_zero() || n.is_zero() {
        return digits.is_zero().cmp(&n.is_zero()).reverse();
    }
    // Compare magnitudes by the position of the leading digit, then digit by digit.
    let lead = digits.0.len() as i64 + exp;
    let nlead = n.0.len() as i64;
    if lead != nlead {
        return lead.cmp(&nlead);
    }
    let len = digits.0.len().max(n.0.len());
    for i in 0..len {
        let a = digits.0.get(i).copied().unwrap_or(0);
        let b = n.0.get(i).copied().unwrap_or(0);
        if a != b {
            return a.cmp(&b);
        }
    }
    Ordering::Equal
}

impl Quantity {
    fn to_canonical(&self) -> String {
        if self.digits.is_zero() {
            return "0".to_string();
        }
        let mut format = self.format;
        let mut whole = None;
        if format == Format::BinarySi {
            if cmp_scaled(&self.digits, self.exp, &Digits::from_u64(1024)) == Ordering::Less {
                format = Format::DecimalSi;
            } else {
                let (int, exact) = self.digits.round_up_to_integer(self.exp);
                if exact {
                    whole = Some(int);
                } else {
                    format = Format::DecimalSi;
                }
            }
        }
        let sign = if self.negative { "-" } else { "" };
        if let (Format::BinarySi, Some(mut int)) = (format, whole) {
            let mut times = 0;
            while let Some(q) = int.div_exact_small(1024) {
                int = q;
                times += 1;
            }
            let suffix = match times {
                1 => "Ki",
                2 => "Mi",
                3 => "Gi",
                4 => "Ti",
                5 => "Pi",
                6 => "Ei",
                _ => "",
            };
            return format!("{sign}{int}{suffix}");
        }
        let mut digits = self.digits.clone();
        let mut exp = self.exp;
        while let Some(q) = digits.div_exact_small(10) {
            digits = q;
            exp += 1;
        }
        while exp % 3 != 0 {
            digits = digits.mul_small(10);
            exp -= 1;
        }
        let suffix = match format {
            Format::DecimalExponent if exp == 0 => String::new(),
            Format::DecimalExponent => format!("e{exp}"),
            _ => match exp {
                -9 => "n",
                -6 => "u",
                -3 => "m",
                3 => "k",
                6 => "M",
                9 => "G",
                12 => "T",
                15 => "P",
                18 => "E",
                _ => "",
            }
            .to_string(),
        };
        format!("{sign}{digits}{suffix}")
    }
}

/// A non-negative integer as decimal digits, most significant first, no leading zeros
/// (zero is the empty vector).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Digits(Vec<u8>);

impl Digits {
    fn zero() -> Self {
        Digits(Vec::new())
    }

    fn from_ascii(ascii: &[u8]) -> Self {
        let v: Vec<u8> = ascii
            .iter()
            .map(|c| c - b'0')
            .skip_while(|d| *d == 0)
            .collect();
        Digits(v)
    }

    fn from_u64(n: u64) -> Self {
        Self::from_ascii(n.to_string().as_bytes())
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn mul_small(&self, m: u64) -> Self {
        let mut out = Vec::with_capacity(self.0.len() + 20);
        let mut carry: u128 = 0;
        for &d in self.0.iter().rev() {
            let v = u128::from(d) * u128::from(m) + carry;
            out.push((v % 10) as u8);
            carry = v / 10;
        }
        while carry > 0 {
            out.push((carry % 10) as u8);
            carry /= 10;
        }
        while out.last() == Some(&0) {
            out.pop();
        }
        out.reverse();
        Digits(out)
    }

    /// `self / d` if it divides exactly and `self` is not zero.
    fn div_exact_small(&self, d: u32) -> Option<Self> {
        if self.is_zero() {
            return None;
        }
        let mut out = Vec::with_capacity(self.0.len());
        let mut rem: u64 = 0;
        for &digit in &self.0 {
            let v = rem * 10 + u64::from(digit);
            out.push((v / u64::from(d)) as u8);
            rem = v % u64::from(d);
        }
        (rem == 0).then(|| Self::from_ascii(&out.iter().map(|x| x + b'0').collect::<Vec<_>>()))
    }

    /// Drops the `n` lowest digits, adding one if any of them was not zero.
    fn drop_low_round_up(&self, n: u64) -> Self {
        let len = self.0.len() as u64;
        if n == 0 {
            return self.clone();
        }
        if n >= len {
            return if self.is_zero() {
                Digits::zero()
            } else {
                Digits(vec![1])
            };
        }
        let keep = (len - n) as usize;
        let dropped_nonzero = self.0[keep..].iter().any(|d| *d != 0);
        let mut kept = Digits(self.0[..keep].to_vec());
        if dropped_nonzero {
            kept = kept.add_one();
        }
        kept
    }

    fn add_one(&self) -> Self {
        let mut v = self.0.clone();
        let mut i = v.len();
        loop {
            if i == 0 {
                v.insert(0, 1);
                break;
            }
            i -= 1;
            if v[i] == 9 {
                v[i] = 0;
            } else {
                v[i] += 1;
                break;
            }
        }
        Digits(v)
    }

    /// `self * 10^exp` rounded up to an integer, and whether that was exact.
    fn round_up_to_integer(&self, exp: i64) -> (Self, bool) {
        if exp >= 0 {
            let mut v = self.0.clone();
            v.extend(std::iter::repeat_n(0, exp as usize));
            return (Digits(v), true);
        }
        let n = exp.unsigned_abs();
        let len = self.0.len() as u64;
        let exact = self.0[len.saturating_sub(n) as usize..]
            .iter()
            .all(|d| *d == 0);
        (self.drop_low_round_up(n), exact)
    }
}

impl fmt::Display for Digits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("0");
        }
        for d in &self.0 {
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn examples() {
        for (input, want) in [
            ("0.5", "500m"),
            ("1024Mi", "1Gi"),
            ("1e3", "1e3"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("0.1Gi", "107374182400m"),
            ("1000E", "1"),
            ("+1", "+1"),
            ("8Ei", "9223372036854775807"),
            ("1e-10", "1e-9"),
        ] {
            assert_eq!(canonical(input).as_deref(), Ok(want), "{input}");
        }
        assert!(canonical("").is_err());
        assert!(canonical("1 ").is_err());
    }
}

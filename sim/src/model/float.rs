//! INCRBYFLOAT arithmetic, exactly, for the numbers the workload produces.
//!
//! Redis parses with `strtold`, adds in C `long double` and prints with `%.17Lf` stripped of
//! trailing zeros. The model does not imitate extended precision: it computes exactly in fixed
//! point (multiples of 2^-16, magnitude below 2^44), where the long double result is exact too
//! and its printed form is the exact decimal. The workload keeps INCRBYFLOAT on keys and
//! increments that stay in that range; anything else is reported as a model limitation.

const FRAC_BITS: u32 = 16;
const LIMIT: i128 = 1 << (44 + FRAC_BITS);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Num {
    /// Value times 2^16.
    Fixed(i128),
    /// Infinity (any sum with it is an error in INCRBYFLOAT).
    Inf,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Not a number for strtold (Redis: "value is not a valid float").
    NotFloat,
    /// A number outside what the model computes exactly.
    Unsupported,
}

/// Parses like Redis's `string2ld`: the whole text must be a number, no leading space, no NaN.
pub fn parse(b: &[u8]) -> Result<Num, ParseError> {
    if b.is_empty() || b[0].is_ascii_whitespace() {
        return Err(ParseError::NotFloat);
    }
    let s = std::str::from_utf8(b).map_err(|_| ParseError::NotFloat)?;
    let (neg, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Ok(Num::Inf);
    }
    if lower.starts_with("nan") {
        return Err(ParseError::NotFloat);
    }
    if lower.starts_with("0x") {
        // strtold reads hexadecimal floats; the workload never produces them.
        return Err(ParseError::Unsupported);
    }
    // digits [. digits] [e [sign] digits], at least one mantissa digit.
    let bytes = body.as_bytes();
    let mut i = 0;
    let mut mant: u128 = 0;
    let mut digits = 0usize;
    let mut scale: i64 = 0;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        if digits < 30 {
            mant = mant * 10 + (bytes[i] - b'0') as u128;
            if mant > 0 {
                digits += 1;
            }
        } else {
            return Err(ParseError::Unsupported);
        }
        i += 1;
    }
    let int_digits = i;
    if i < bytes.len() && bytes[i] == b'.' {
        i += 1;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            if digits < 30 {
                mant = mant * 10 + (bytes[i] - b'0') as u128;
                if mant > 0 {
                    digits += 1;
                }
                scale -= 1;
            } else {
                return Err(ParseError::Unsupported);
            }
            i += 1;
        }
    }
    let frac_digits = i - int_digits - usize::from(i > int_digits);
    if int_digits == 0 && frac_digits == 0 {
        return Err(ParseError::NotFloat);
    }
    if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        let mut j = i + 1;
        let eneg = match bytes.get(j) {
            Some(b'-') => {
                j += 1;
                true
            }
            Some(b'+') => {
                j += 1;
                false
            }
            _ => false,
        };
        let start = j;
        let mut e: i64 = 0;
        while j < bytes.len() && bytes[j].is_ascii_digit() {
            e = (e * 10 + (bytes[j] - b'0') as i64).min(100_000);
            j += 1;
        }
        if j > start {
            // A valid exponent; otherwise strtold stops before the 'e' and the rest is junk.
            scale += if eneg { -e } else { e };
            i = j;
        }
    }
    if i != bytes.len() {
        return Err(ParseError::NotFloat);
    }
    // value = mant * 10^scale; in fixed point: mant * 2^16 * 10^scale, exactly.
    let mut v: u128 = mant << FRAC_BITS;
    if scale >= 0 {
        for _ in 0..scale {
            v = v.checked_mul(10).ok_or(ParseError::Unsupported)?;
            if v as i128 >= LIMIT || v > i128::MAX as u128 {
                return Err(ParseError::Unsupported);
            }
        }
    } else {
        for _ in 0..(-scale) {
            if v == 0 {
                break;
            }
            let (q, r) = (v / 10, v % 10);
            if r > 0 {
                return Err(ParseError::Unsupported);
            }
            v = q;
        }
    }
    if v > i128::MAX as u128 || v as i128 >= LIMIT {
        return Err(ParseError::Unsupported);
    }
    let v = v as i128;
    Ok(Num::Fixed(if neg { -v } else { v }))
}

/// `current + incr` as INCRBYFLOAT stores and replies it; `None` for NaN or infinity.
pub fn add(current: Num, incr: Num) -> Result<Option<String>, ParseError> {
    match (current, incr) {
        (Num::Fixed(a), Num::Fixed(b)) => {
            let s = a + b;
            if s.abs() >= LIMIT {
                return Err(ParseError::Unsupported);
            }
            Ok(Some(format(s)))
        }
        _ => Ok(None),
    }
}

/// The exact decimal form of a fixed-point value, as `%.17Lf` then trimmed prints it.
pub fn format(v: i128) -> String {
    let neg = v < 0;
    let a = v.unsigned_abs();
    let int = a >> FRAC_BITS;
    let frac = a & ((1 << FRAC_BITS) - 1);
    // frac / 2^16 = frac * 5^16 / 10^16: sixteen exact decimal digits.
    let digits = frac * 5u128.pow(FRAC_BITS);
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    s.push_str(&int.to_string());
    if digits != 0 {
        let f = format!("{digits:016}");
        s.push('.');
        s.push_str(f.trim_end_matches('0'));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Num, ParseError> {
        parse(s.as_bytes())
    }

    #[test]
    fn parses_like_strtold() {
        assert_eq!(p("1.5"), Ok(Num::Fixed(3 << 15)));
        assert_eq!(p("-0.25"), Ok(Num::Fixed(-(1 << 14))));
        assert_eq!(p("1e2"), Ok(Num::Fixed(100 << 16)));
        assert_eq!(p("2.5e-1"), Ok(Num::Fixed(1 << 14)));
        assert_eq!(p(".5"), Ok(Num::Fixed(1 << 15)));
        assert_eq!(p("5."), Ok(Num::Fixed(5 << 16)));
        assert_eq!(p("+3"), Ok(Num::Fixed(3 << 16)));
        assert_eq!(p("inf"), Ok(Num::Inf));
        assert_eq!(p("-Infinity"), Ok(Num::Inf));
        for bad in [
            "", " 1", "1 ", "abc", "nan", "1.2.3", ".", "-", "1e", "1x", "e5",
        ] {
            assert_eq!(p(bad), Err(ParseError::NotFloat), "{bad:?}");
        }
        assert_eq!(p("0.1"), Err(ParseError::Unsupported));
        assert_eq!(p("1e30"), Err(ParseError::Unsupported));
    }

    #[test]
    fn formats_like_redis() {
        let f = |a: &str, b: &str| add(p(a).unwrap(), p(b).unwrap()).unwrap();
        assert_eq!(f("10", "0.5").as_deref(), Some("10.5"));
        assert_eq!(f("0", "0").as_deref(), Some("0"));
        assert_eq!(f("-0.5", "0.5").as_deref(), Some("0"));
        assert_eq!(f("3", "-10.125").as_deref(), Some("-7.125"));
        assert_eq!(f("1e2", "2.5e-1").as_deref(), Some("100.25"));
        assert_eq!(f("inf", "1"), None);
        assert_eq!(format(1), "0.0000152587890625");
    }
}

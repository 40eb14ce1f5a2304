//! Argument parsing with Redis's exact error replies, and the shared error texts.

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const SYNTAX: &str = "ERR syntax error";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
pub const NO_SUCH_KEY: &str = "ERR no such key";
pub const INVALID_EXPIRE: &str = "ERR invalid expire time in '{}' command";

/// Parses a strict 64-bit integer as Redis's `string2ll` does (no spaces, no `+`, no leading
/// zeros, no overflow).
pub fn parse_i64(arg: &[u8]) -> Option<i64> {
    lattice_store::value::parse_canonical_i64(arg)
}

/// Parses an integer argument or answers `ERR value is not an integer or out of range`.
pub fn i64_arg(arg: &[u8]) -> Result<i64, &'static str> {
    parse_i64(arg).ok_or(NOT_INTEGER)
}

/// Parses a non-negative integer argument; `message` is the error for negatives and junk.
pub fn u64_arg(arg: &[u8], message: &'static str) -> Result<u64, &'static str> {
    match parse_i64(arg) {
        Some(n) if n >= 0 => Ok(n as u64),
        _ => Err(message),
    }
}

/// Parses a float the way Redis's `getDoubleFromObject` does: the whole argument must be a
/// number (`inf`/`-inf` allowed, NaN and surrounding spaces rejected).
pub fn parse_f64(arg: &[u8]) -> Option<f64> {
    if arg.is_empty() || arg[0].is_ascii_whitespace() || arg[arg.len() - 1].is_ascii_whitespace() {
        return None;
    }
    let s = std::str::from_utf8(arg).ok()?;
    let lower = s.to_ascii_lowercase();
    let v = match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => {
            // Rust accepts "nan", "inf" spellings and forms C's strtod rejects; screen them.
            if lower.contains("nan") || lower.contains("inf") {
                return None;
            }
            s.parse::<f64>().ok()?
        }
    };
    if v.is_nan() {
        None
    } else {
        Some(v)
    }
}

/// True when `arg` equals `word` ignoring ASCII case (option keywords).
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_like_redis() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"1e3"), Some(1000.0));
        assert_eq!(parse_f64(b"nan"), None);
        assert_eq!(parse_f64(b" 1"), None);
        assert_eq!(parse_f64(b"abc"), None);
        assert_eq!(parse_f64(b""), None);
    }
}

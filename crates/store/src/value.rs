//! Values stored under keys.
//!
//! One enum over every Redis type, so every command matches on it and a type clash is always a
//! `WRONGTYPE` decided in one place.

use std::borrow::Cow;

use crate::{Hash, List, Set, Stream, ZSet};

/// A value of any Redis type.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(Str),
    // Collections are boxed so a key holding a plain string (the common case) pays only for a
    // string: the enum stays 32 bytes instead of the largest collection's size.
    List(Box<List>),
    Hash(Box<Hash>),
    Set(Box<Set>),
    ZSet(Box<ZSet>),
    Stream(Box<Stream>),
}

impl Value {
    /// The name `TYPE` reports.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Hash(_) => "hash",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
        }
    }

    /// The name `OBJECT ENCODING` reports, chosen to match what Redis would say for the same
    /// value so that clients and tests that look at it are not surprised.
    pub fn encoding(&self) -> &'static str {
        match self {
            Value::Str(s) => s.encoding(),
            Value::List(v) => v.encoding(),
            Value::Hash(v) => v.encoding(),
            Value::Set(v) => v.encoding(),
            Value::ZSet(v) => v.encoding(),
            Value::Stream(_) => "stream",
        }
    }

    /// Approximate heap bytes held, for INFO memory and MEMORY USAGE.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Value::Str(Str::Int(_)) => 0,
            Value::Str(Str::Raw(v)) => v.capacity(),
            Value::List(v) => v.heap_bytes(),
            Value::Hash(v) => v.heap_bytes(),
            Value::Set(v) => v.heap_bytes(),
            Value::ZSet(v) => v.heap_bytes(),
            Value::Stream(v) => v.heap_bytes(),
        }
    }
}

/// Strings that look like canonical 64-bit integers are kept as integers, as Redis does: INCR
/// needs no parsing and small counters need no heap allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Str {
    Int(i64),
    Raw(Vec<u8>),
}

/// Longest string Redis stores with the `embstr` encoding.
const EMBSTR_MAX: usize = 44;

impl Str {
    /// Stores `bytes`, integer-encoded when it is the canonical decimal form of an i64.
    pub fn from_bytes(bytes: &[u8]) -> Str {
        match parse_canonical_i64(bytes) {
            Some(n) => Str::Int(n),
            None => Str::Raw(bytes.to_vec()),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Str::Int(n) => decimal_len(*n),
            Str::Raw(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of the string (allocates only for integer-encoded values).
    pub fn as_bytes(&self) -> Cow<'_, [u8]> {
        match self {
            Str::Int(n) => Cow::Owned(n.to_string().into_bytes()),
            Str::Raw(v) => Cow::Borrowed(v),
        }
    }

    /// The bytes as a mutable buffer, converting an integer to its decimal text first.
    pub fn make_raw(&mut self) -> &mut Vec<u8> {
        if let Str::Int(n) = *self {
            *self = Str::Raw(n.to_string().into_bytes());
        }
        match self {
            Str::Raw(v) => v,
            Str::Int(_) => unreachable!("converted above"),
        }
    }

    /// The value as an integer if it is one (canonical or not, as `INCR` accepts it).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Str::Int(n) => Some(*n),
            Str::Raw(v) => parse_canonical_i64(v),
        }
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Str::Int(_) => "int",
            Str::Raw(v) if v.len() <= EMBSTR_MAX => "embstr",
            Str::Raw(_) => "raw",
        }
    }
}

fn decimal_len(n: i64) -> usize {
    let mut len = if n < 0 { 2 } else { 1 };
    let mut v = n.unsigned_abs() / 10;
    while v > 0 {
        len += 1;
        v /= 10;
    }
    len
}

/// Parses the strict decimal form Redis's `string2ll` accepts: an optional `-`, no leading
/// zeros (except `0` itself), no `+`, no spaces, no overflow, at most 20 bytes.
pub fn parse_canonical_i64(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    if bytes == b"0" {
        return Some(0);
    }
    let (neg, digits) = match bytes[0] {
        b'-' => (true, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits[0] == b'0' {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    if neg {
        if v <= i64::MAX as u64 + 1 {
            Some((v as i64).wrapping_neg())
        } else {
            None
        }
    } else if v <= i64::MAX as u64 {
        Some(v as i64)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_integers() {
        assert_eq!(parse_canonical_i64(b"0"), Some(0));
        assert_eq!(parse_canonical_i64(b"-12"), Some(-12));
        assert_eq!(parse_canonical_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_canonical_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_canonical_i64(b"9223372036854775808"), None);
        assert_eq!(parse_canonical_i64(b"012"), None);
        assert_eq!(parse_canonical_i64(b"-0"), None);
        assert_eq!(parse_canonical_i64(b"+1"), None);
        assert_eq!(parse_canonical_i64(b" 1"), None);
        assert_eq!(parse_canonical_i64(b""), None);
    }

    #[test]
    fn int_strings_round_trip() {
        for s in ["0", "-1", "123456", "abc", "01", "", "9223372036854775807"] {
            let v = Str::from_bytes(s.as_bytes());
            assert_eq!(&*v.as_bytes(), s.as_bytes());
            assert_eq!(v.len(), s.len());
        }
        assert_eq!(Str::from_bytes(b"42").encoding(), "int");
        assert_eq!(Str::from_bytes(b"hello").encoding(), "embstr");
        assert_eq!(Str::from_bytes(&[b'x'; 45]).encoding(), "raw");
    }
}

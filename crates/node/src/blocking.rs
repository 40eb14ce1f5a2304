//! Blocking commands (BLPOP, BZPOPMIN, ...): parking clients until a key changes or a deadline
//! passes, on the node's clock, so they work identically under simulation.
//!
//! This module holds what a parked client is waiting for; parking itself is in
//! `crate::parking`. The mechanism is generic: a blocking command that finds nothing to serve
//! calls `Core::block` and writes no reply. The node parks the client with its request. When any
//! command reports a change to one of the keys (`Core::modified`), the parked request runs
//! again, in first-come first-served order per key; if it again finds nothing it stays parked in
//! its place. When its deadline passes, the client gets the command's timeout reply. Requests a
//! parked client pipelines behind it wait, in order, until it is released.

use bytes::Bytes;
use lattice_resp::ReplyWriter;

use crate::args::parse_f64;

/// What a blocked client receives when its timeout passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutReply {
    /// `*-1` (RESP2) / `_` (RESP3): what every blocking command answers on timeout in 7.0
    /// (BRPOPLPUSH and BLMOVE included).
    NullArray,
    /// `$-1` (RESP2) / `_` (RESP3): BRPOPLPUSH and BLMOVE inside MULTI.
    NullBulk,
    /// An integer: WAIT's count of peers that have its writes, kept current while it waits
    /// (`crate::cmd::role`).
    Integer(i64),
}

impl TimeoutReply {
    pub fn write(self, out: &mut ReplyWriter) {
        match self {
            TimeoutReply::NullArray => out.null_array(),
            TimeoutReply::NullBulk => out.null(),
            TimeoutReply::Integer(n) => out.integer(n),
        }
    }
}

/// A parked client.
#[derive(Debug)]
pub struct Blocked {
    /// The request to run again when a key changes.
    pub args: Vec<Bytes>,
    pub keys: Vec<Bytes>,
    pub deadline_ms: Option<u64>,
    pub on_timeout: TimeoutReply,
}

/// Set by `Core::block` during a handler; taken by the dispatcher afterwards.
#[derive(Debug)]
pub(crate) struct BlockRequest {
    pub keys: Vec<Bytes>,
    pub deadline_ms: Option<u64>,
    pub on_timeout: TimeoutReply,
}

/// Parses a blocking timeout in seconds (a float, 0 = forever) into an absolute deadline, with
/// Redis 7.0's errors: a value whose milliseconds do not fit a 64-bit integer (`inf`, `1e400`)
/// is reported as negative, as Redis's conversion makes it; a deadline past the 64-bit range is
/// "out of range".
pub fn parse_timeout(arg: &[u8], now_ms: u64) -> Result<Option<u64>, &'static str> {
    let Some(secs) = parse_f64(arg) else {
        return Err("ERR timeout is not a float or out of range");
    };
    let ms = (secs * 1000.0).ceil();
    if ms.is_nan() || ms < 0.0 || ms >= i64::MAX as f64 {
        return Err("ERR timeout is negative");
    }
    let ms = ms as i64;
    if ms == 0 {
        return Ok(None);
    }
    if ms > i64::MAX - now_ms as i64 {
        return Err("ERR timeout is out of range");
    }
    Ok(Some(now_ms + ms as u64))
}

#[cfg(test)]
mod tests {
    use super::parse_timeout;

    #[test]
    fn timeouts_parse_with_redis_errors() {
        assert_eq!(parse_timeout(b"0", 1000), Ok(None));
        assert_eq!(parse_timeout(b"1.5", 1000), Ok(Some(2500)));
        assert_eq!(parse_timeout(b"0.0001", 1000), Ok(Some(1001)));
        assert_eq!(parse_timeout(b"-1", 1000), Err("ERR timeout is negative"));
        assert_eq!(parse_timeout(b"inf", 1000), Err("ERR timeout is negative"));
        assert_eq!(
            parse_timeout(b"1e400", 1000),
            Err("ERR timeout is negative")
        );
        assert_eq!(
            parse_timeout(b"9223372036854775807", 1000),
            Err("ERR timeout is negative")
        );
        assert_eq!(
            parse_timeout(b"9223371000000000", 1_700_000_000_000),
            Err("ERR timeout is out of range")
        );
        assert_eq!(
            parse_timeout(b"abc", 1000),
            Err("ERR timeout is not a float or out of range")
        );
    }
}

//! Incremental parsing of client requests, following Redis 7.0's `processMultibulkBuffer` and
//! `processInlineBuffer` (networking.c) rule for rule, including their error texts.
//!
//! A request starting with `*` is a multibulk request (`*<count>\r\n` followed by `count` bulk
//! strings `$<len>\r\n<data>\r\n`); anything else is an inline request, one line split into
//! arguments the way `redis-cli` and telnet users write them (see [`split_inline`]).
//!
//! The parser is a small state machine so that a request arriving over many reads costs work
//! proportional to its size: the argument count and already complete arguments are kept between
//! calls, a pending bulk string is waited for by length alone, and the search for a line
//! terminator resumes where the previous call stopped.

use std::borrow::Cow;
use std::fmt;

use bytes::{Buf, Bytes, BytesMut};

/// Limits applied to client requests, with Redis's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest accepted bulk string (`proto-max-bulk-len`, 512 MiB by default).
    pub max_bulk_len: usize,
    /// Largest accepted multibulk count. Redis rejects anything above `INT_MAX`, and so does
    /// this parser whatever the value here.
    pub max_multibulk_len: usize,
    /// Longest accepted inline request line and `*`/`$` count line (`PROTO_INLINE_MAX_SIZE`).
    pub max_inline_len: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: i32::MAX as usize,
            max_inline_len: 64 * 1024,
        }
    }
}

/// A protocol violation by the peer.
///
/// [`message`](ProtocolError::message) (and `Display`) is the text that follows `ERR ` in the
/// reply, worded exactly as Redis 7 words it for request errors, e.g.
/// `Protocol error: invalid multibulk length`. The server replies `-ERR <message>` and closes
/// the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError {
    message: Cow<'static, str>,
}

impl ProtocolError {
    pub(crate) fn new(message: impl Into<Cow<'static, str>>) -> Self {
        ProtocolError {
            message: message.into(),
        }
    }

    /// The error text, without the `ERR ` prefix.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ProtocolError {}

const TOO_BIG_MBULK_COUNT: &str = "Protocol error: too big mbulk count string";
const INVALID_MBULK_LEN: &str = "Protocol error: invalid multibulk length";
const TOO_BIG_BULK_COUNT: &str = "Protocol error: too big bulk count string";
const INVALID_BULK_LEN: &str = "Protocol error: invalid bulk length";
const TOO_BIG_INLINE: &str = "Protocol error: too big inline request";
const UNBALANCED_QUOTES: &str = "Protocol error: unbalanced quotes in request";

/// Never reserve more argument slots than this up front: the count comes from the peer, and
/// `*2147483647\r\n` must not allocate gigabytes before a single argument has arrived.
const MAX_PREALLOC_ARGS: usize = 1024;

/// Incremental parser for client requests (one per connection).
///
/// Contract with the driver: between calls the driver only *appends* to the buffer it passes
/// to [`parse`](RequestParser::parse) (it may reserve or reallocate, but must not consume or
/// change bytes). The parser relies on this to resume a half-read request where it stopped.
#[derive(Debug)]
pub struct RequestParser {
    limits: Limits,
    /// Elements of the current multibulk request still to read; 0 when between requests.
    remaining: usize,
    /// Length of the bulk string being waited for, once its `$<len>` line has been read.
    bulk_len: Option<usize>,
    /// Arguments of the current multibulk request read so far.
    args: Vec<Bytes>,
    /// Bytes at the front of the buffer already searched, without success, for the terminator
    /// of the line being waited for. Reset whenever bytes are consumed.
    scanned: usize,
    /// Value reported by `bytes_needed_hint`, computed when `parse` last returned `Ok(None)`.
    needed: usize,
}

impl Default for RequestParser {
    fn default() -> Self {
        RequestParser::new(Limits::default())
    }
}

impl RequestParser {
    pub fn new(limits: Limits) -> Self {
        RequestParser {
            limits,
            remaining: 0,
            bulk_len: None,
            args: Vec::new(),
            scanned: 0,
            needed: 0,
        }
    }

    /// Replaces the limits (e.g. after `CONFIG SET proto-max-bulk-len`). Applies to lines and
    /// lengths read from now on; a bulk length already accepted stays accepted.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Parses the next complete request from the front of `buf`, consuming its bytes.
    ///
    /// - `Ok(Some(args))`: a command; never empty. Arguments are zero-copy slices split off
    ///   `buf` (inline arguments that contain quotes or escapes are the only ones copied).
    /// - `Ok(None)`: more bytes are needed. Bytes of a partial request may already have moved
    ///   into the parser's state; call again once more bytes have been appended.
    /// - `Err(e)`: a protocol violation. Reply `-ERR <e>` and close the connection; the parser
    ///   and buffer are not meant to be used afterwards.
    ///
    /// Empty requests (`*0\r\n`, `*-1\r\n`, an empty or blank inline line) are skipped
    /// silently, as Redis does, and parsing continues with the next request.
    pub fn parse(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        self.needed = 0;
        loop {
            if self.remaining == 0 {
                let Some(&first) = buf.first() else {
                    return Ok(None);
                };
                if first == b'*' {
                    match self.multibulk_count(buf)? {
                        Step::Wait => return Ok(None),
                        Step::Skip => continue,
                        Step::Ready => {}
                    }
                } else {
                    match self.inline(buf)? {
                        None => return Ok(None),
                        Some(args) if args.is_empty() => continue,
                        Some(args) => return Ok(Some(args)),
                    }
                }
            }

            while self.remaining > 0 {
                let len = match self.bulk_len {
                    Some(len) => len,
                    None => match self.bulk_header(buf)? {
                        Some(len) => len,
                        None => return Ok(None),
                    },
                };
                // The data is followed by CRLF; like Redis, skip those two bytes unchecked.
                let total = len.saturating_add(2);
                if buf.len() < total {
                    self.needed = total - buf.len();
                    return Ok(None);
                }
                let arg = buf.split_to(len).freeze();
                buf.advance(2);
                self.args.push(arg);
                self.bulk_len = None;
                self.remaining -= 1;
            }
            return Ok(Some(std::mem::take(&mut self.args)));
        }
    }

    /// How many more bytes the current partial request needs at least (0 if unknown), as of
    /// the last call to [`parse`](RequestParser::parse) that returned `Ok(None)`. Lets the
    /// driver `reserve` once for a large bulk string instead of growing the buffer per read.
    pub fn bytes_needed_hint(&self) -> usize {
        self.needed
    }

    /// Finds the line terminator Redis looks for in `*`/`$` lines: a `\r` with at least one
    /// byte after it (which Redis does not check is `\n`). Returns the index of the `\r`, or
    /// `None` if the line is not complete yet; errors with `too_big` if the line is already
    /// longer than the inline limit.
    fn count_line_end(
        &mut self,
        buf: &[u8],
        too_big: &'static str,
    ) -> Result<Option<usize>, ProtocolError> {
        let from = self.scanned.min(buf.len());
        match memchr::memchr(b'\r', &buf[from..]) {
            Some(i) => {
                let cr = from + i;
                if cr + 1 < buf.len() {
                    Ok(Some(cr))
                } else {
                    self.scanned = cr;
                    Ok(None)
                }
            }
            None if buf.len() > self.limits.max_inline_len => Err(ProtocolError::new(too_big)),
            None => {
                self.scanned = buf.len();
                Ok(None)
            }
        }
    }

    /// Reads the `*<count>\r\n` line that starts a multibulk request.
    fn multibulk_count(&mut self, buf: &mut BytesMut) -> Result<Step, ProtocolError> {
        let (count, cr) = match short_number_line(buf) {
            Some((n, cr)) => (n as i64, cr),
            None => {
                let Some(cr) = self.count_line_end(buf, TOO_BIG_MBULK_COUNT)? else {
                    return Ok(Step::Wait);
                };
                match string2ll(&buf[1..cr]) {
                    Some(n) if n <= i32::MAX as i64 => (n, cr),
                    _ => return Err(ProtocolError::new(INVALID_MBULK_LEN)),
                }
            }
        };
        if count > 0 && count as u64 > self.limits.max_multibulk_len as u64 {
            return Err(ProtocolError::new(INVALID_MBULK_LEN));
        }
        buf.advance(cr + 2);
        self.scanned = 0;
        if count <= 0 {
            return Ok(Step::Skip);
        }
        let count = count as usize;
        self.remaining = count;
        self.bulk_len = None;
        self.args = Vec::with_capacity(count.min(MAX_PREALLOC_ARGS));
        Ok(Step::Ready)
    }

    /// Reads a `$<len>\r\n` line inside a multibulk request.
    fn bulk_header(&mut self, buf: &mut BytesMut) -> Result<Option<usize>, ProtocolError> {
        if buf.first() == Some(&b'$') {
            if let Some((len, cr)) = short_number_line(buf) {
                if len as u64 <= self.limits.max_bulk_len as u64 {
                    buf.advance(cr + 2);
                    self.scanned = 0;
                    self.bulk_len = Some(len);
                    return Ok(Some(len));
                }
            }
        }
        let Some(cr) = self.count_line_end(buf, TOO_BIG_BULK_COUNT)? else {
            return Ok(None);
        };
        if buf[0] != b'$' {
            // Redis formats the byte with `%c`; a byte above 0x7f shows here as the Unicode
            // character with that code point.
            return Err(ProtocolError::new(format!(
                "Protocol error: expected '$', got '{}'",
                buf[0] as char
            )));
        }
        let len = match string2ll(&buf[1..cr]) {
            Some(n) if n >= 0 && n as u64 <= self.limits.max_bulk_len as u64 => n as usize,
            _ => return Err(ProtocolError::new(INVALID_BULK_LEN)),
        };
        buf.advance(cr + 2);
        self.scanned = 0;
        self.bulk_len = Some(len);
        Ok(Some(len))
    }

    /// Reads one inline request line. `Some(args)` may be empty (a blank line).
    ///
    /// Unlike Redis, whose verdict on a long line depends on how the bytes were split into
    /// reads, a line longer than `max_inline_len` is rejected even when its newline has
    /// already arrived, so the outcome never depends on chunking.
    fn inline(&mut self, buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        let from = self.scanned.min(buf.len());
        let Some(i) = memchr::memchr(b'\n', &buf[from..]) else {
            if buf.len() > self.limits.max_inline_len {
                return Err(ProtocolError::new(TOO_BIG_INLINE));
            }
            self.scanned = buf.len();
            return Ok(None);
        };
        let newline = from + i;
        if newline > self.limits.max_inline_len {
            return Err(ProtocolError::new(TOO_BIG_INLINE));
        }
        let mut line = buf.split_to(newline + 1).freeze();
        self.scanned = 0;
        line.truncate(newline);
        if line.last() == Some(&b'\r') {
            line.truncate(newline - 1);
        }
        split_inline(&line)
            .map(Some)
            .ok_or_else(|| ProtocolError::new(UNBALANCED_QUOTES))
    }
}

/// The common `*`/`$` line read in one pass: the marker, 1 to 9 digits in canonical form (no
/// leading zero unless the number is 0), a `\r` and at least one byte after it. Returns the
/// number and the index of the `\r`. Anything else (an incomplete line, a sign, a long or
/// malformed number) returns None, and the caller's general path, which scans for the line end
/// and applies `string2ll`, decides it exactly as before; for the lines accepted here both
/// paths give the same number.
#[inline]
fn short_number_line(buf: &[u8]) -> Option<(usize, usize)> {
    let digits = buf.get(1..)?;
    let mut n = 0usize;
    let mut i = 0;
    while i < 9 {
        match digits.get(i) {
            Some(&d) if d.is_ascii_digit() => {
                n = n * 10 + usize::from(d - b'0');
                i += 1;
            }
            _ => break,
        }
    }
    let cr = i + 1;
    let canonical = i == 1 || (i > 1 && digits[0] != b'0');
    (canonical && buf.get(cr) == Some(&b'\r') && cr + 1 < buf.len()).then_some((n, cr))
}

/// Outcome of reading a multibulk count line.
enum Step {
    /// The line is incomplete.
    Wait,
    /// An empty request (`*0`, `*-1`): skip it.
    Skip,
    /// Elements follow.
    Ready,
}

/// Redis's `string2ll`: a strict signed 64-bit decimal. An optional `-`, then `0` alone or a
/// non-zero digit followed by digits; no `+`, no spaces, no leading zeros, no `-0`, no overflow.
pub(crate) fn string2ll(s: &[u8]) -> Option<i64> {
    // Redis refuses anything of 21 bytes or more up front (LONG_STR_SIZE).
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        // -(i64::MIN) does not fit an i64, so compare in u64 first.
        if v > i64::MIN.unsigned_abs() {
            None
        } else {
            Some(0i64.wrapping_sub_unsigned(v))
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// C's `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Splits an inline request line into arguments exactly like Redis's `sdssplitargs`.
///
/// Arguments are separated by whitespace. A double-quoted section understands `\xHH`, `\n`,
/// `\r`, `\t`, `\b`, `\a` and `\<any>` (the character itself); a single-quoted section only
/// `\'`. A quote may open in the middle of a word (`ab"c d"` is `abc d`) and ends the word: the
/// closing quote must be followed by whitespace or the end of the line. Because Redis works on
/// a C string, a NUL byte ends the line. Returns `None` for unbalanced quotes.
///
/// Plain words are returned as zero-copy slices of `line`; only words with quotes are copied.
/// Also what a function library's `#!` metadata line is split with, as in Redis.
pub fn split_inline(line: &Bytes) -> Option<Vec<Bytes>> {
    let end = memchr::memchr(0, line).unwrap_or(line.len());
    let s = &line[..end];
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < s.len() && is_c_space(s[i]) {
            i += 1;
        }
        if i == s.len() {
            return Some(args);
        }
        let start = i;
        // Outside quotes only these four bytes end a word (plus the end of the string); `\v`
        // and `\f` are skipped between words but kept inside one, as in Redis.
        while i < s.len() && !matches!(s[i], b' ' | b'\n' | b'\r' | b'\t' | b'"' | b'\'') {
            i += 1;
        }
        match s.get(i) {
            Some(&q @ (b'"' | b'\'')) => {
                let mut word = s[start..i].to_vec();
                i = if q == b'"' {
                    double_quoted(s, i + 1, &mut word)?
                } else {
                    single_quoted(s, i + 1, &mut word)?
                };
                args.push(Bytes::from(word));
            }
            _ => args.push(line.slice(start..i)),
        }
    }
}

/// Reads a double-quoted section starting just after the opening quote; returns the index
/// just after the closing quote.
fn double_quoted(s: &[u8], mut i: usize, word: &mut Vec<u8>) -> Option<usize> {
    loop {
        let c = *s.get(i)?; // End of line: unterminated quotes.
        match c {
            b'\\'
                if s.get(i + 1) == Some(&b'x')
                    && s.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
                    && s.get(i + 3).is_some_and(u8::is_ascii_hexdigit) =>
            {
                word.push(hex_value(s[i + 2]) << 4 | hex_value(s[i + 3]));
                i += 4;
            }
            b'\\' if i + 1 < s.len() => {
                word.push(match s[i + 1] {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    other => other,
                });
                i += 2;
            }
            b'"' => return closing_quote(s, i),
            _ => {
                word.push(c);
                i += 1;
            }
        }
    }
}

/// Reads a single-quoted section starting just after the opening quote; returns the index
/// just after the closing quote.
fn single_quoted(s: &[u8], mut i: usize, word: &mut Vec<u8>) -> Option<usize> {
    loop {
        let c = *s.get(i)?; // End of line: unterminated quotes.
        match c {
            b'\\' if s.get(i + 1) == Some(&b'\'') => {
                word.push(b'\'');
                i += 2;
            }
            b'\'' => return closing_quote(s, i),
            _ => {
                word.push(c);
                i += 1;
            }
        }
    }
}

/// A closing quote at `i` must be followed by whitespace or the end of the line.
fn closing_quote(s: &[u8], i: usize) -> Option<usize> {
    match s.get(i + 1) {
        Some(&next) if !is_c_space(next) => None,
        _ => Some(i + 1),
    }
}

fn hex_value(h: u8) -> u8 {
    match h {
        b'0'..=b'9' => h - b'0',
        b'a'..=b'f' => h - b'a' + 10,
        _ => h - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &[u8]) -> Result<Vec<Vec<Bytes>>, ProtocolError> {
        let mut parser = RequestParser::default();
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(args) = parser.parse(&mut buf)? {
            out.push(args);
        }
        Ok(out)
    }

    fn err(input: &[u8]) -> String {
        parse_all(input).unwrap_err().message().to_owned()
    }

    fn args(list: &[&[u8]]) -> Vec<Bytes> {
        list.iter().map(|a| Bytes::copy_from_slice(a)).collect()
    }

    #[test]
    fn default_limits_match_redis() {
        let l = Limits::default();
        assert_eq!(l.max_bulk_len, 536_870_912);
        assert_eq!(l.max_multibulk_len, 2_147_483_647);
        assert_eq!(l.max_inline_len, 65_536);
    }

    #[test]
    fn short_number_lines_agree_with_string2ll() {
        let mut texts: Vec<String> = (0..3_000).map(|n| n.to_string()).collect();
        for t in [
            "00",
            "01",
            "-1",
            "-0",
            "+1",
            "123456789",
            "999999999",
            "1234567890",
            "",
            "1x",
        ] {
            texts.push(t.to_string());
        }
        for t in &texts {
            for tail in [&b""[..], b"\r", b"\r\n", b"\r\n$3"] {
                let mut line = b"*".to_vec();
                line.extend_from_slice(t.as_bytes());
                line.extend_from_slice(tail);
                match short_number_line(&line) {
                    Some((n, cr)) => {
                        assert_eq!(cr, 1 + t.len(), "{t:?}");
                        assert!(tail.len() >= 2, "{t:?}: taken before its line ended");
                        assert_eq!(string2ll(t.as_bytes()), Some(n as i64), "{t:?}");
                    }
                    None => assert!(
                        tail.len() < 2
                            || t.len() > 9
                            || string2ll(t.as_bytes()).is_none_or(|n| n < 0),
                        "{t:?}{tail:?} left to the general path although it is short and canonical"
                    ),
                }
            }
        }
    }

    #[test]
    fn string2ll_is_strict() {
        assert_eq!(string2ll(b"0"), Some(0));
        assert_eq!(string2ll(b"12"), Some(12));
        assert_eq!(string2ll(b"-12"), Some(-12));
        assert_eq!(string2ll(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(string2ll(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"00",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"000000000000000000001",
        ] {
            assert_eq!(string2ll(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn multibulk_request() {
        assert_eq!(
            parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").unwrap(),
            vec![args(&[b"GET", b"k"])]
        );
    }

    #[test]
    fn binary_and_empty_arguments() {
        assert_eq!(
            parse_all(b"*2\r\n$0\r\n\r\n$4\r\n\r\n\0\xff\r\n").unwrap(),
            vec![args(&[b"", b"\r\n\0\xff"])]
        );
    }

    #[test]
    fn error_invalid_multibulk_length() {
        for input in [
            &b"*99999999999\r\n"[..],
            b"*2147483648\r\n",
            b"*abc\r\n",
            b"*\r\n",
            b"*+1\r\n",
            b"*01\r\n",
            b"*-0\r\n",
            b"* 1\r\n",
        ] {
            assert_eq!(err(input), "Protocol error: invalid multibulk length");
        }
    }

    #[test]
    fn multibulk_limit_is_configurable() {
        let mut parser = RequestParser::new(Limits {
            max_multibulk_len: 2,
            ..Limits::default()
        });
        let mut buf = BytesMut::from(&b"*2\r\n$1\r\na\r\n$1\r\nb\r\n*3\r\n"[..]);
        assert_eq!(parser.parse(&mut buf).unwrap(), Some(args(&[b"a", b"b"])));
        assert_eq!(
            parser.parse(&mut buf).unwrap_err().message(),
            "Protocol error: invalid multibulk length"
        );
    }

    #[test]
    fn huge_count_does_not_preallocate() {
        let mut parser = RequestParser::default();
        let mut buf = BytesMut::from(&b"*2147483647\r\n$1\r\na\r\n"[..]);
        assert_eq!(parser.parse(&mut buf).unwrap(), None);
        assert!(parser.args.capacity() <= MAX_PREALLOC_ARGS);
    }

    #[test]
    fn error_invalid_bulk_length() {
        for input in [
            &b"*1\r\n$600000000\r\n"[..],
            b"*1\r\n$-5\r\n",
            b"*1\r\n$-1\r\n",
            b"*1\r\n$\r\n",
            b"*1\r\n$x\r\n",
            b"*1\r\n$01\r\n",
        ] {
            assert_eq!(err(input), "Protocol error: invalid bulk length");
        }
        // Exactly at the limit is fine (and waits for the data).
        let mut parser = RequestParser::default();
        let mut buf = BytesMut::from(&b"*1\r\n$536870912\r\n"[..]);
        assert_eq!(parser.parse(&mut buf).unwrap(), None);
        assert_eq!(parser.bytes_needed_hint(), 536_870_914);
    }

    #[test]
    fn error_expected_dollar() {
        assert_eq!(
            err(b"*1\r\nfoo\r\n"),
            "Protocol error: expected '$', got 'f'"
        );
        assert_eq!(
            err(b"*2\r\n$1\r\na\r\n:1\r\n"),
            "Protocol error: expected '$', got ':'"
        );
        // Redis only looks once the whole line is there.
        assert_eq!(parse_all(b"*1\r\nfoo").unwrap(), Vec::<Vec<Bytes>>::new());
    }

    #[test]
    fn error_too_big_count_strings() {
        let mut input = b"*".to_vec();
        input.extend(vec![b'1'; 70_000]);
        assert_eq!(err(&input), "Protocol error: too big mbulk count string");

        let mut input = b"*1\r\n$".to_vec();
        input.extend(vec![b'1'; 70_000]);
        assert_eq!(err(&input), "Protocol error: too big bulk count string");

        // Just under the limit, still waiting.
        let mut input = b"*".to_vec();
        input.extend(vec![b'1'; 65_535]);
        assert_eq!(parse_all(&input).unwrap(), Vec::<Vec<Bytes>>::new());
    }

    #[test]
    fn error_too_big_inline() {
        let input = vec![b'a'; 70 * 1024];
        assert_eq!(err(&input), "Protocol error: too big inline request");
        let mut input = vec![b'a'; 70 * 1024];
        input.extend_from_slice(b"\r\n");
        assert_eq!(err(&input), "Protocol error: too big inline request");
        // At the limit without a newline: wait.
        assert_eq!(
            parse_all(&vec![b'a'; 64 * 1024]).unwrap(),
            Vec::<Vec<Bytes>>::new()
        );
    }

    #[test]
    fn error_unbalanced_quotes() {
        for input in [
            &b"set \"a\r\n"[..],
            b"set 'a\r\n",
            b"set \"a\"b\r\n",
            b"set 'a'b\r\n",
            b"set \"a\\\"\r\n",
            b"set \"a\\\r\n",
            b"set \"a\0\"\r\n",
        ] {
            assert_eq!(
                err(input),
                "Protocol error: unbalanced quotes in request",
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
        // Without the newline the line is just incomplete.
        assert_eq!(parse_all(b"set \"a").unwrap(), Vec::<Vec<Bytes>>::new());
    }

    #[test]
    fn inline_requests() {
        assert_eq!(
            parse_all(b"set k \"a b\"\r\n").unwrap(),
            vec![args(&[b"set", b"k", b"a b"])]
        );
        assert_eq!(
            parse_all(b"PING\nPING\r\n").unwrap(),
            vec![args(&[b"PING"]), args(&[b"PING"])]
        );
        assert_eq!(
            parse_all(b"  get\t  k  \r\n").unwrap(),
            vec![args(&[b"get", b"k"])]
        );
    }

    #[test]
    fn inline_escapes() {
        assert_eq!(
            parse_all(b"set \"\\x41\\x4a\\x4A\" \"\\n\\r\\t\\b\\a\\\\\\\"\\q\"\r\n").unwrap(),
            vec![args(&[b"set", b"AJJ", b"\n\r\t\x08\x07\\\"q"])]
        );
        // Not a valid \x escape: the x is taken as itself.
        assert_eq!(parse_all(b"\"\\xZ1\"\n").unwrap(), vec![args(&[b"xZ1"])]);
        assert_eq!(
            parse_all(b"'it\\'s' 'a\\nb' \"\"\n").unwrap(),
            vec![args(&[b"it's", b"a\\nb", b""])]
        );
    }

    #[test]
    fn inline_quotes_inside_words() {
        assert_eq!(
            parse_all(b"ab\"c d\" e'f'\n").unwrap(),
            vec![args(&[b"abc d", b"ef"])]
        );
        // Vertical tab and form feed separate only between words.
        assert_eq!(
            parse_all(b"\x0ba\x0bb\x0c c\n").unwrap(),
            vec![args(&[b"a\x0bb\x0c", b"c"])]
        );
        // A NUL byte ends the line, as in C.
        assert_eq!(
            parse_all(b"get k\0 ignored\n").unwrap(),
            vec![args(&[b"get", b"k"])]
        );
    }

    #[test]
    fn empty_requests_are_skipped() {
        assert_eq!(
            parse_all(b"*0\r\n*1\r\n$4\r\nPING\r\n").unwrap(),
            vec![args(&[b"PING"])]
        );
        assert_eq!(
            parse_all(b"*-1\r\n\r\n   \r\n\n*-5\r\n*1\r\n$4\r\nPING\r\n").unwrap(),
            vec![args(&[b"PING"])]
        );
    }

    #[test]
    fn pipelined_requests_parse_in_order() {
        assert_eq!(
            parse_all(b"*1\r\n$4\r\nPING\r\nECHO hi\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").unwrap(),
            vec![
                args(&[b"PING"]),
                args(&[b"ECHO", b"hi"]),
                args(&[b"GET", b"k"])
            ]
        );
    }

    #[test]
    fn crlf_after_counts_and_data_is_not_checked() {
        // Redis skips the two bytes after `\r` and after bulk data without looking at them.
        assert_eq!(
            parse_all(b"*1\rX$4\r\nPINGzz").unwrap(),
            vec![args(&[b"PING"])]
        );
    }

    #[test]
    fn partial_progress_is_kept() {
        let mut parser = RequestParser::default();
        let mut buf = BytesMut::new();
        buf.extend_from_slice(b"*2\r\n$3\r\nSET\r\n$10\r\nab");
        assert_eq!(parser.parse(&mut buf).unwrap(), None);
        // The count, the first argument and the second header have been consumed.
        assert_eq!(&buf[..], b"ab");
        assert_eq!(parser.bytes_needed_hint(), 10);
        buf.extend_from_slice(b"cdefghij\r");
        assert_eq!(parser.parse(&mut buf).unwrap(), None);
        assert_eq!(parser.bytes_needed_hint(), 1);
        buf.extend_from_slice(b"\n");
        assert_eq!(
            parser.parse(&mut buf).unwrap(),
            Some(args(&[b"SET", b"abcdefghij"]))
        );
        assert!(buf.is_empty());
        assert_eq!(parser.parse(&mut buf).unwrap(), None);
        assert_eq!(parser.bytes_needed_hint(), 0);
    }

    #[test]
    fn arguments_share_the_buffer() {
        let mut parser = RequestParser::default();
        let mut buf = BytesMut::from(&b"*1\r\n$5\r\nhello\r\nget key\r\n"[..]);
        let base = buf.as_ptr() as usize;
        let end = base + buf.len();
        let a = parser.parse(&mut buf).unwrap().unwrap();
        let b = parser.parse(&mut buf).unwrap().unwrap();
        for arg in a.iter().chain(&b) {
            let p = arg.as_ptr() as usize;
            assert!(p >= base && p < end, "argument was copied");
        }
    }

    #[test]
    fn display_is_the_message() {
        let e = parse_all(b"*x\r\n").unwrap_err();
        assert_eq!(e.to_string(), "Protocol error: invalid multibulk length");
    }
}

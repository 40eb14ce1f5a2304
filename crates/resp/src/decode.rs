//! A check-then-parse decoder for every RESP2 and RESP3 frame type.
//!
//! [`decode_frame`] first walks the bytes to find where the frame ends, allocating nothing, so
//! an incomplete frame costs no allocations and consumes nothing. Only once the whole frame is
//! in the buffer is it split off (zero-copy) and turned into a [`Frame`] whose string payloads
//! are slices of the received bytes.
//!
//! Used by clients (the simulator, the differential tester, tests): an incomplete frame is
//! re-checked from its start on the next call, which is linear in what has arrived so far.

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use crate::frame::Frame;
use crate::request::ProtocolError;

/// Longest accepted bulk, verbatim or blob-error payload, and longest simple line (Redis's
/// default `proto-max-bulk-len`).
pub const MAX_BULK_LEN: usize = 512 * 1024 * 1024;
/// Largest accepted aggregate count (Redis never sends more than `INT_MAX` elements).
pub const MAX_AGGREGATE_LEN: usize = i32::MAX as usize;
/// Deepest accepted nesting of aggregates (attributes count as a level), so a hostile
/// `*1\r\n*1\r\n...` cannot overflow the stack.
pub const MAX_DEPTH: usize = 1000;
/// Longest line holding a length or an integer; anything longer cannot be a valid `i64`.
const MAX_NUMBER_LINE: usize = 32;

/// Decodes one complete frame from the front of `buf`, consuming it.
///
/// Returns `Ok(None)` if the frame is incomplete, in which case nothing is consumed. Errors
/// describe the first malformed header; the stream cannot be resynchronised after one.
pub fn decode_frame(buf: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
    let Some(end) = check(buf, 0)? else {
        return Ok(None);
    };
    let src = buf.split_to(end).freeze();
    let mut pos = 0;
    let frame = parse(&src, &mut pos)?;
    debug_assert_eq!(pos, end);
    Ok(Some(frame))
}

/// The kind of an aggregate header.
#[derive(Clone, Copy)]
enum Aggregate {
    Array,
    Map,
    Set,
    Push,
    Attribute,
}

/// A decoded header; blob payloads are ranges into the buffer.
enum Head {
    Simple(Range<usize>),
    Error(Range<usize>),
    Integer(i64),
    Bulk(Range<usize>),
    Null,
    NullArray,
    Boolean(bool),
    Double(f64),
    BigNumber(Range<usize>),
    Verbatim { format: [u8; 3], text: Range<usize> },
    Aggregate(Aggregate, usize),
}

/// Finds the end of the frame starting at `pos`, validating it on the way. `Ok(None)` if the
/// buffer ends first.
///
/// Iterative, with the nesting kept in [`Open`], so the width of a frame costs neither stack
/// nor heap and its depth at most `MAX_DEPTH` counters.
fn check(buf: &[u8], mut pos: usize) -> Result<Option<usize>, ProtocolError> {
    let mut open = Open::new();
    loop {
        let Some((head, next)) = read_head(buf, pos)? else {
            return Ok(None);
        };
        pos = next;
        if let Head::Aggregate(kind, n) = head {
            if open.depth == MAX_DEPTH {
                return Err(too_deep());
            }
            let children = child_count(kind, n);
            if children > 0 {
                open.push(children);
                continue;
            }
        }
        // A frame is complete: it fills one slot of the enclosing aggregate, which may in turn
        // be complete.
        while let Some(left) = open.innermost() {
            *left -= 1;
            if *left > 0 {
                break;
            }
            open.pop();
        }
        if open.depth == 0 {
            return Ok(Some(pos));
        }
    }
}

/// Levels of nesting [`Open`] keeps on the stack.
const INLINE_DEPTH: usize = 16;

/// Frames still expected by each open aggregate, innermost last: the first `INLINE_DEPTH`
/// levels in an array on the stack, deeper ones (rare; at most `MAX_DEPTH`) on the heap. A
/// zeroed `MAX_DEPTH` array was 8 KB of memset per call, more than decoding a short reply.
struct Open {
    inline: [u64; INLINE_DEPTH],
    deep: Vec<u64>,
    depth: usize,
}

impl Open {
    fn new() -> Open {
        Open {
            inline: [0; INLINE_DEPTH],
            deep: Vec::new(),
            depth: 0,
        }
    }

    fn push(&mut self, children: u64) {
        if self.depth < INLINE_DEPTH {
            self.inline[self.depth] = children;
        } else {
            self.deep.push(children);
        }
        self.depth += 1;
    }

    fn innermost(&mut self) -> Option<&mut u64> {
        match self.depth {
            0 => None,
            d if d <= INLINE_DEPTH => Some(&mut self.inline[d - 1]),
            _ => self.deep.last_mut(),
        }
    }

    fn pop(&mut self) {
        if self.depth > INLINE_DEPTH {
            self.deep.pop();
        }
        self.depth -= 1;
    }
}

fn too_deep() -> ProtocolError {
    ProtocolError::new(format!(
        "Protocol error: frames nested deeper than {MAX_DEPTH} levels"
    ))
}

/// Frames that follow an aggregate header: pairs for maps and attributes, and an attribute is
/// followed by the frame it annotates. `n <= i32::MAX`, so this cannot overflow.
fn child_count(kind: Aggregate, n: usize) -> u64 {
    let n = n as u64;
    match kind {
        Aggregate::Array | Aggregate::Set | Aggregate::Push => n,
        Aggregate::Map => 2 * n,
        Aggregate::Attribute => 2 * n + 1,
    }
}

/// An aggregate being built by [`parse`].
enum Partial {
    /// An array, set or push still missing `left` elements.
    Seq {
        kind: Aggregate,
        items: Vec<Frame>,
        left: usize,
    },
    /// A map or attribute still missing `left` pairs; `key` holds the key of a half-read pair.
    Pairs {
        attribute: bool,
        pairs: Vec<(Frame, Frame)>,
        key: Option<Frame>,
        left: usize,
    },
    /// An attribute whose pairs are complete, waiting for the frame it annotates.
    Annotated { attributes: Vec<(Frame, Frame)> },
}

impl Partial {
    /// Starts an aggregate of `n` elements or pairs; an empty one is returned complete.
    fn start(kind: Aggregate, n: usize) -> Result<Partial, Frame> {
        // The check pass has seen all `n` elements in the buffer, so `n` is backed by real
        // bytes (at least three per element) and safe to allocate for exactly.
        match kind {
            Aggregate::Map | Aggregate::Attribute if n > 0 => Ok(Partial::Pairs {
                attribute: matches!(kind, Aggregate::Attribute),
                pairs: Vec::with_capacity(n),
                key: None,
                left: n,
            }),
            Aggregate::Attribute => Ok(Partial::Annotated {
                attributes: Vec::new(),
            }),
            Aggregate::Map => Err(Frame::Map(Vec::new())),
            _ if n > 0 => Ok(Partial::Seq {
                kind,
                items: Vec::with_capacity(n),
                left: n,
            }),
            _ => Err(seq_frame(kind, Vec::new())),
        }
    }
}

fn seq_frame(kind: Aggregate, items: Vec<Frame>) -> Frame {
    match kind {
        Aggregate::Set => Frame::Set(items),
        Aggregate::Push => Frame::Push(items),
        _ => Frame::Array(items),
    }
}

/// Builds the frame starting at `*pos` from a buffer that [`check`] has accepted, advancing
/// `*pos` past it. Iterative, like `check`: nesting lives in a heap stack, not the call stack.
fn parse(src: &Bytes, pos: &mut usize) -> Result<Frame, ProtocolError> {
    let mut stack: Vec<Partial> = Vec::new();
    loop {
        let (head, next) = read_head(src, *pos)?
            .ok_or_else(|| ProtocolError::new("Protocol error: incomplete frame"))?;
        *pos = next;
        let mut frame = match head {
            Head::Simple(r) => Frame::Simple(src.slice(r)),
            Head::Error(r) => Frame::Error(src.slice(r)),
            Head::Integer(n) => Frame::Integer(n),
            Head::Bulk(r) => Frame::Bulk(src.slice(r)),
            Head::Null => Frame::Null,
            Head::NullArray => Frame::NullArray,
            Head::Boolean(b) => Frame::Boolean(b),
            Head::Double(d) => Frame::Double(d),
            Head::BigNumber(r) => Frame::BigNumber(src.slice(r)),
            Head::Verbatim { format, text } => Frame::Verbatim {
                format,
                text: src.slice(text),
            },
            Head::Aggregate(kind, n) => match Partial::start(kind, n) {
                Ok(partial) => {
                    if stack.len() == MAX_DEPTH {
                        return Err(too_deep());
                    }
                    stack.push(partial);
                    continue;
                }
                Err(empty) => empty,
            },
        };
        // Hand the finished frame to its parent, completing parents as they fill up.
        loop {
            let Some(parent) = stack.pop() else {
                return Ok(frame);
            };
            match parent {
                Partial::Seq {
                    kind,
                    mut items,
                    left,
                } => {
                    items.push(frame);
                    if left > 1 {
                        stack.push(Partial::Seq {
                            kind,
                            items,
                            left: left - 1,
                        });
                        break;
                    }
                    frame = seq_frame(kind, items);
                }
                Partial::Pairs {
                    attribute,
                    pairs,
                    key: None,
                    left,
                } => {
                    stack.push(Partial::Pairs {
                        attribute,
                        pairs,
                        key: Some(frame),
                        left,
                    });
                    break;
                }
                Partial::Pairs {
                    attribute,
                    mut pairs,
                    key: Some(key),
                    left,
                } => {
                    pairs.push((key, frame));
                    if left > 1 {
                        stack.push(Partial::Pairs {
                            attribute,
                            pairs,
                            key: None,
                            left: left - 1,
                        });
                        break;
                    }
                    if attribute {
                        stack.push(Partial::Annotated { attributes: pairs });
                        break;
                    }
                    frame = Frame::Map(pairs);
                }
                Partial::Annotated { attributes } => {
                    frame = Frame::Attribute {
                        attributes,
                        frame: Box::new(frame),
                    };
                }
            }
        }
    }
}

fn error(what: &str) -> ProtocolError {
    ProtocolError::new(format!("Protocol error: {what}"))
}

/// Reads the header at `pos` (and the payload, for blob types). Returns the header and the
/// position just after it, or `None` if the buffer ends first.
fn read_head(buf: &[u8], pos: usize) -> Result<Option<(Head, usize)>, ProtocolError> {
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    let start = pos + 1;
    let max_line = match kind {
        b'+' | b'-' | b',' | b'(' => MAX_BULK_LEN,
        _ => MAX_NUMBER_LINE,
    };
    let Some(cr) = find_crlf(buf, start, max_line)? else {
        return Ok(None);
    };
    let body = &buf[start..cr];
    let after = cr + 2;
    let head = match kind {
        b'+' => Head::Simple(start..cr),
        b'-' => Head::Error(start..cr),
        b':' => Head::Integer(parse_i64(body).ok_or_else(|| error("invalid integer"))?),
        b'$' | b'=' | b'!' => {
            let len = parse_i64(body).ok_or_else(|| error("invalid bulk length"))?;
            if len == -1 && kind == b'$' {
                return Ok(Some((Head::Null, after)));
            }
            let len = usize::try_from(len)
                .ok()
                .filter(|&l| l <= MAX_BULK_LEN)
                .ok_or_else(|| error("invalid bulk length"))?;
            let end = after + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(error("expected CRLF after bulk data"));
            }
            let head = match kind {
                b'$' => Head::Bulk(after..end),
                b'!' => Head::Error(after..end),
                _ => {
                    if len < 4 || buf[after + 3] != b':' {
                        return Err(error("invalid verbatim string"));
                    }
                    let mut format = [0u8; 3];
                    format.copy_from_slice(&buf[after..after + 3]);
                    Head::Verbatim {
                        format,
                        text: after + 4..end,
                    }
                }
            };
            return Ok(Some((head, end + 2)));
        }
        b'*' | b'%' | b'~' | b'>' | b'|' => {
            let n = parse_i64(body).ok_or_else(|| error("invalid aggregate length"))?;
            if n == -1 && kind == b'*' {
                return Ok(Some((Head::NullArray, after)));
            }
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= MAX_AGGREGATE_LEN)
                .ok_or_else(|| error("invalid aggregate length"))?;
            let agg = match kind {
                b'*' => Aggregate::Array,
                b'%' => Aggregate::Map,
                b'~' => Aggregate::Set,
                b'>' => Aggregate::Push,
                _ => Aggregate::Attribute,
            };
            Head::Aggregate(agg, n)
        }
        b'_' if body.is_empty() => Head::Null,
        b'_' => return Err(error("invalid null")),
        b'#' => match body {
            b"t" => Head::Boolean(true),
            b"f" => Head::Boolean(false),
            _ => return Err(error("invalid boolean")),
        },
        b',' => Head::Double(parse_double(body).ok_or_else(|| error("invalid double"))?),
        b'(' => {
            let digits = body.strip_prefix(b"-").unwrap_or(body);
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Err(error("invalid big number"));
            }
            Head::BigNumber(start..cr)
        }
        other => {
            return Err(ProtocolError::new(format!(
                "Protocol error: unknown frame type '{}'",
                other.escape_ascii()
            )))
        }
    };
    Ok(Some((head, after)))
}

/// Finds the CRLF ending the line that starts at `start`; returns the index of its `\r`.
/// `Ok(None)` if the line is incomplete; an error if it is longer than `max` (decided the same
/// way however the bytes were split into reads) or a `\r` is not followed by `\n`.
fn find_crlf(buf: &[u8], start: usize, max: usize) -> Result<Option<usize>, ProtocolError> {
    let rest = &buf[start..];
    match memchr::memchr(b'\r', rest) {
        Some(i) if i > max => Err(error("line too long")),
        Some(i) => match rest.get(i + 1) {
            Some(b'\n') => Ok(Some(start + i)),
            Some(_) => Err(error("expected CRLF")),
            None => Ok(None),
        },
        None if rest.len() > max => Err(error("line too long")),
        None => Ok(None),
    }
}

/// A decimal `i64` with an optional sign.
fn parse_i64(s: &[u8]) -> Option<i64> {
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// A RESP3 double: a decimal with optional fraction and exponent, or `inf`, `-inf`, `nan`.
fn parse_double(s: &[u8]) -> Option<f64> {
    // Rust's parser is a little more liberal (it also takes `infinity`, `NaN`, `+1`), which
    // is harmless for a client; it refuses empty text and whitespace.
    std::str::from_utf8(s).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(input: &[u8]) -> Result<Option<Frame>, ProtocolError> {
        let mut buf = BytesMut::from(input);
        let r = decode_frame(&mut buf);
        if let Ok(Some(_)) = r {
            assert!(buf.is_empty(), "trailing bytes left: {buf:?}");
        }
        r
    }

    fn ok(input: &[u8]) -> Frame {
        dec(input).unwrap().expect("complete frame")
    }

    fn err(input: &[u8]) -> String {
        dec(input).unwrap_err().message().to_owned()
    }

    #[test]
    fn decodes_every_type() {
        assert_eq!(ok(b"+OK\r\n"), Frame::Simple("OK".into()));
        assert_eq!(ok(b"-ERR bad\r\n"), Frame::Error("ERR bad".into()));
        assert_eq!(ok(b"!5\r\nERR x\r\n"), Frame::Error("ERR x".into()));
        assert_eq!(ok(b":-7\r\n"), Frame::Integer(-7));
        assert_eq!(ok(b"$3\r\na\r\n\r\n"), Frame::Bulk("a\r\n".into()));
        assert_eq!(ok(b"$-1\r\n"), Frame::Null);
        assert_eq!(ok(b"_\r\n"), Frame::Null);
        assert_eq!(ok(b"*-1\r\n"), Frame::NullArray);
        assert_eq!(ok(b"*0\r\n"), Frame::Array(vec![]));
        assert_eq!(ok(b"#t\r\n"), Frame::Boolean(true));
        assert_eq!(ok(b"#f\r\n"), Frame::Boolean(false));
        assert_eq!(ok(b",1.25\r\n"), Frame::Double(1.25));
        assert_eq!(ok(b",1e3\r\n"), Frame::Double(1000.0));
        assert_eq!(ok(b",-inf\r\n"), Frame::Double(f64::NEG_INFINITY));
        assert!(matches!(ok(b",nan\r\n"), Frame::Double(d) if d.is_nan()));
        assert_eq!(
            ok(b"(-12345678901234567890\r\n"),
            Frame::BigNumber("-12345678901234567890".into())
        );
        assert_eq!(
            ok(b"=15\r\ntxt:Some string\r\n"),
            Frame::Verbatim {
                format: *b"txt",
                text: "Some string".into()
            }
        );
        assert_eq!(
            ok(b"%2\r\n+a\r\n:1\r\n+b\r\n_\r\n"),
            Frame::Map(vec![
                (Frame::Simple("a".into()), Frame::Integer(1)),
                (Frame::Simple("b".into()), Frame::Null),
            ])
        );
        assert_eq!(
            ok(b"~2\r\n:1\r\n:2\r\n"),
            Frame::Set(vec![Frame::Integer(1), Frame::Integer(2)])
        );
        assert_eq!(
            ok(b">2\r\n+message\r\n$2\r\nhi\r\n"),
            Frame::Push(vec![
                Frame::Simple("message".into()),
                Frame::Bulk("hi".into())
            ])
        );
        assert_eq!(
            ok(b"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.1923\r\n*1\r\n:2039123\r\n"),
            Frame::Attribute {
                attributes: vec![(
                    Frame::Simple("key-popularity".into()),
                    Frame::Map(vec![(Frame::Bulk("a".into()), Frame::Double(0.1923))])
                )],
                frame: Box::new(Frame::Array(vec![Frame::Integer(2039123)])),
            }
        );
    }

    #[test]
    fn incomplete_consumes_nothing() {
        let partial = b"*2\r\n$3\r\nfoo\r\n$3\r\nba";
        let mut buf = BytesMut::from(&partial[..]);
        assert_eq!(decode_frame(&mut buf).unwrap(), None);
        assert_eq!(&buf[..], partial);
        buf.extend_from_slice(b"r\r\n+next\r\n");
        assert_eq!(
            decode_frame(&mut buf).unwrap(),
            Some(Frame::command(&[b"foo", b"bar"]))
        );
        assert_eq!(
            decode_frame(&mut buf).unwrap(),
            Some(Frame::Simple("next".into()))
        );
        assert!(buf.is_empty());
        assert_eq!(decode_frame(&mut buf).unwrap(), None);
    }

    #[test]
    fn payloads_are_zero_copy() {
        let mut buf = BytesMut::from(&b"*2\r\n$5\r\nhello\r\n=7\r\ntxt:abc\r\n"[..]);
        let base = buf.as_ptr() as usize;
        let end = base + buf.len();
        let Some(Frame::Array(items)) = decode_frame(&mut buf).unwrap() else {
            panic!("expected an array");
        };
        for item in &items {
            let p = item.as_bytes().unwrap().as_ptr() as usize;
            assert!(p >= base && p < end, "payload was copied");
        }
    }

    #[test]
    fn rejects_malformed_frames() {
        assert_eq!(err(b"?x\r\n"), "Protocol error: unknown frame type '?'");
        assert_eq!(err(b":12a\r\n"), "Protocol error: invalid integer");
        assert_eq!(err(b"$-2\r\n"), "Protocol error: invalid bulk length");
        assert_eq!(
            err(b"$536870913\r\n"),
            "Protocol error: invalid bulk length"
        );
        assert_eq!(
            err(b"$2\r\nabc\r\n"),
            "Protocol error: expected CRLF after bulk data"
        );
        assert_eq!(
            err(b"=3\r\ntxt\r\n"),
            "Protocol error: invalid verbatim string"
        );
        assert_eq!(
            err(b"=4\r\ntxt-\r\n"),
            "Protocol error: invalid verbatim string"
        );
        assert_eq!(err(b"%-1\r\n"), "Protocol error: invalid aggregate length");
        assert_eq!(
            err(b"*2147483648\r\n"),
            "Protocol error: invalid aggregate length"
        );
        assert_eq!(err(b"_x\r\n"), "Protocol error: invalid null");
        assert_eq!(err(b"#x\r\n"), "Protocol error: invalid boolean");
        assert_eq!(err(b",abc\r\n"), "Protocol error: invalid double");
        assert_eq!(err(b"(12x\r\n"), "Protocol error: invalid big number");
        assert_eq!(err(b"+a\rb\r\n"), "Protocol error: expected CRLF");
        assert_eq!(err(&[b':'; 40]), "Protocol error: line too long");
    }

    #[test]
    fn huge_counts_do_not_allocate_or_spin() {
        assert_eq!(dec(b"*2147483647\r\n:1\r\n").unwrap(), None);
        assert_eq!(dec(b"%2147483647\r\n").unwrap(), None);
        assert_eq!(dec(b"$536870912\r\n").unwrap(), None);
    }

    #[test]
    fn nesting_depth_is_limited() {
        let nested = |depth: usize| {
            let mut v = b"*1\r\n".repeat(depth);
            v.extend_from_slice(b":1\r\n");
            v
        };
        let mut f = ok(&nested(MAX_DEPTH));
        for _ in 0..MAX_DEPTH {
            let Frame::Array(mut items) = f else {
                panic!("expected an array")
            };
            f = items.pop().unwrap();
        }
        assert_eq!(f, Frame::Integer(1));
        assert!(err(&nested(MAX_DEPTH + 1)).contains("nested deeper"));
        assert!(err(&nested(100_000)).contains("nested deeper"));
    }
}

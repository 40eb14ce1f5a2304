//! The RESP3 frame model (a superset of RESP2) and its encoder.
//!
//! Frames are what clients see: the simulator, the differential tester and tests decode server
//! replies into [`Frame`]s with [`decode_frame`](crate::decode_frame) and send commands with
//! [`encode_frame`]. The server itself never builds frames for replies; it uses
//! [`ReplyWriter`](crate::ReplyWriter).

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};

use crate::write::fmt_i64;

/// One RESP2 or RESP3 value.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    /// `+text`: must not contain CR or LF.
    Simple(Bytes),
    /// `-CODE message` (also decoded from RESP3 blob errors `!len`). Without the leading `-`.
    Error(Bytes),
    /// `:n`
    Integer(i64),
    /// `$len` followed by binary-safe data.
    Bulk(Bytes),
    /// RESP3 `_`. The RESP2 null bulk string `$-1` decodes to this as well.
    Null,
    /// The RESP2 null array `*-1`.
    NullArray,
    /// `*n` followed by `n` frames.
    Array(Vec<Frame>),
    /// `#t` / `#f`
    Boolean(bool),
    /// `,d`, including `inf`, `-inf` and `nan`.
    Double(f64),
    /// `(digits`: an integer of any size, kept as its decimal text.
    BigNumber(Bytes),
    /// `=len` followed by `fmt:text`, where `fmt` is three bytes such as `txt` or `mkd`.
    Verbatim { format: [u8; 3], text: Bytes },
    /// `%n` followed by `n` key/value pairs.
    Map(Vec<(Frame, Frame)>),
    /// `~n` followed by `n` frames.
    Set(Vec<Frame>),
    /// `|n` followed by `n` key/value pairs, then the frame those attributes annotate.
    Attribute {
        attributes: Vec<(Frame, Frame)>,
        frame: Box<Frame>,
    },
    /// `>n` followed by `n` frames: out-of-band data such as pub/sub messages.
    Push(Vec<Frame>),
}

impl Frame {
    /// A command as clients send it: an array of bulk strings.
    pub fn command(args: &[&[u8]]) -> Frame {
        Frame::Array(
            args.iter()
                .map(|a| Frame::Bulk(Bytes::copy_from_slice(a)))
                .collect(),
        )
    }

    /// The payload of a string-like frame (simple string, bulk string or the text of a
    /// verbatim string); `None` for every other frame.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Frame::Simple(b) | Frame::Bulk(b) | Frame::Verbatim { text: b, .. } => Some(b),
            _ => None,
        }
    }

    /// Encodes the frame into a fresh buffer (see [`encode_frame`]).
    pub fn to_bytes(&self) -> BytesMut {
        let mut out = BytesMut::new();
        encode_frame(self, &mut out);
        out
    }
}

/// Appends the RESP encoding of `frame` to `out`.
///
/// RESP3 types are written as RESP3 (`Null` as `_`, maps as `%`, ...); the only RESP2-specific
/// form is [`Frame::NullArray`] (`*-1`). Doubles are written as `inf`, `-inf`, `nan` or the
/// shortest decimal that reads back as the same `f64`. Simple strings are written as given: the
/// caller keeps CR and LF out of them. An error holding CR or LF (which a RESP3 blob error can
/// carry) is written as a blob error, so that encoding what the decoder returned reads back
/// the same.
pub fn encode_frame(frame: &Frame, out: &mut BytesMut) {
    match frame {
        Frame::Simple(s) => line(out, b'+', s),
        Frame::Error(s) if memchr::memchr2(b'\r', b'\n', s).is_some() => blob(out, b'!', &[], s),
        Frame::Error(s) => line(out, b'-', s),
        Frame::Integer(n) => len_line(out, b':', *n),
        Frame::Bulk(data) => blob(out, b'$', &[], data),
        Frame::Null => out.extend_from_slice(b"_\r\n"),
        Frame::NullArray => out.extend_from_slice(b"*-1\r\n"),
        Frame::Array(items) => seq(out, b'*', items),
        Frame::Boolean(b) => out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
        Frame::Double(d) => {
            out.put_u8(b',');
            write_double(*d, out);
            out.extend_from_slice(b"\r\n");
        }
        Frame::BigNumber(digits) => line(out, b'(', digits),
        Frame::Verbatim { format, text } => {
            let mut prefix = [0u8; 4];
            prefix[..3].copy_from_slice(format);
            prefix[3] = b':';
            blob(out, b'=', &prefix, text);
        }
        Frame::Map(pairs) => map(out, b'%', pairs),
        Frame::Set(items) => seq(out, b'~', items),
        Frame::Attribute { attributes, frame } => {
            map(out, b'|', attributes);
            encode_frame(frame, out);
        }
        Frame::Push(items) => seq(out, b'>', items),
    }
}

fn line(out: &mut BytesMut, prefix: u8, body: &[u8]) {
    out.reserve(body.len() + 3);
    out.put_u8(prefix);
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
}

fn len_line(out: &mut BytesMut, prefix: u8, n: i64) {
    let mut digits = [0u8; 20];
    line(out, prefix, fmt_i64(n, &mut digits));
}

fn usize_line(out: &mut BytesMut, prefix: u8, n: usize) {
    len_line(out, prefix, i64::try_from(n).unwrap_or(i64::MAX));
}

/// `<prefix><len>\r\n<head><data>\r\n` where `len` counts `head` and `data`.
fn blob(out: &mut BytesMut, prefix: u8, head: &[u8], data: &[u8]) {
    out.reserve(data.len() + head.len() + 16);
    usize_line(out, prefix, head.len() + data.len());
    out.extend_from_slice(head);
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

fn seq(out: &mut BytesMut, prefix: u8, items: &[Frame]) {
    usize_line(out, prefix, items.len());
    for item in items {
        encode_frame(item, out);
    }
}

fn map(out: &mut BytesMut, prefix: u8, pairs: &[(Frame, Frame)]) {
    usize_line(out, prefix, pairs.len());
    for (k, v) in pairs {
        encode_frame(k, out);
        encode_frame(v, out);
    }
}

/// Shortest round-trip text for `d`: plain decimals for everyday magnitudes, exponent form
/// (`1e300`, `1.5e-7`) for very large or small ones so the text stays short.
fn write_double(d: f64, out: &mut BytesMut) {
    // Writing into a BytesMut cannot fail.
    let _ = if d.is_nan() {
        out.write_str("nan")
    } else if d.is_infinite() {
        out.write_str(if d > 0.0 { "inf" } else { "-inf" })
    } else if d == 0.0 || (1e-5..1e17).contains(&d.abs()) {
        write!(out, "{d}")
    } else {
        write!(out, "{d:e}")
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(f: &Frame) -> Vec<u8> {
        f.to_bytes().to_vec()
    }

    #[test]
    fn encodes_every_type() {
        assert_eq!(enc(&Frame::Simple("OK".into())), b"+OK\r\n");
        assert_eq!(enc(&Frame::Error("ERR x".into())), b"-ERR x\r\n");
        // Found by fuzzing: a blob error's CR LF must not end up inside a `-` line.
        assert_eq!(
            enc(&Frame::Error("ERR a\r\nb".into())),
            b"!8\r\nERR a\r\nb\r\n"
        );
        assert_eq!(enc(&Frame::Integer(-42)), b":-42\r\n");
        assert_eq!(enc(&Frame::Bulk("hi".into())), b"$2\r\nhi\r\n");
        assert_eq!(enc(&Frame::Bulk(Bytes::new())), b"$0\r\n\r\n");
        assert_eq!(enc(&Frame::Null), b"_\r\n");
        assert_eq!(enc(&Frame::NullArray), b"*-1\r\n");
        assert_eq!(enc(&Frame::Boolean(true)), b"#t\r\n");
        assert_eq!(enc(&Frame::Boolean(false)), b"#f\r\n");
        assert_eq!(enc(&Frame::Double(1.5)), b",1.5\r\n");
        assert_eq!(enc(&Frame::Double(3.0)), b",3\r\n");
        assert_eq!(enc(&Frame::Double(1e300)), b",1e300\r\n");
        assert_eq!(enc(&Frame::Double(f64::INFINITY)), b",inf\r\n");
        assert_eq!(enc(&Frame::Double(f64::NEG_INFINITY)), b",-inf\r\n");
        assert_eq!(enc(&Frame::Double(f64::NAN)), b",nan\r\n");
        assert_eq!(
            enc(&Frame::BigNumber("-123456789012345678901234567890".into())),
            b"(-123456789012345678901234567890\r\n"
        );
        assert_eq!(
            enc(&Frame::Verbatim {
                format: *b"txt",
                text: "Some string".into()
            }),
            b"=15\r\ntxt:Some string\r\n"
        );
        assert_eq!(
            enc(&Frame::Map(vec![(
                Frame::Simple("a".into()),
                Frame::Integer(1)
            )])),
            b"%1\r\n+a\r\n:1\r\n"
        );
        assert_eq!(
            enc(&Frame::Set(vec![Frame::Boolean(true)])),
            b"~1\r\n#t\r\n"
        );
        assert_eq!(
            enc(&Frame::Push(vec![Frame::Bulk("m".into())])),
            b">1\r\n$1\r\nm\r\n"
        );
        assert_eq!(
            enc(&Frame::Attribute {
                attributes: vec![(Frame::Simple("ttl".into()), Frame::Integer(3))],
                frame: Box::new(Frame::Array(vec![Frame::Integer(1)])),
            }),
            b"|1\r\n+ttl\r\n:3\r\n*1\r\n:1\r\n"
        );
    }

    #[test]
    fn command_helper() {
        let f = Frame::command(&[b"SET", b"k", b"v"]);
        assert_eq!(enc(&f), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
    }

    #[test]
    fn as_bytes_helper() {
        assert_eq!(Frame::Simple("a".into()).as_bytes(), Some(&b"a"[..]));
        assert_eq!(Frame::Bulk("b".into()).as_bytes(), Some(&b"b"[..]));
        let v = Frame::Verbatim {
            format: *b"txt",
            text: "c".into(),
        };
        assert_eq!(v.as_bytes(), Some(&b"c"[..]));
        assert_eq!(Frame::Integer(1).as_bytes(), None);
        assert_eq!(Frame::Error("e".into()).as_bytes(), None);
    }
}

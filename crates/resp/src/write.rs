//! Reply encoders that append RESP straight into an output buffer.
//!
//! The node writes every reply through a [`ReplyWriter`] into the connection's pending output,
//! so a pipeline of replies becomes one contiguous buffer and one write syscall, with no
//! intermediate frame values. RESP3-only types degrade to their RESP2 forms exactly as Redis 7
//! does (maps become flat arrays, booleans integers, doubles bulk strings, nulls `$-1`/`*-1`).

use bytes::{BufMut, BytesMut};

/// The protocol version a connection negotiated with `HELLO` (RESP2 until then).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

/// Appends replies for one connection. Cheap to construct: borrow the buffer per command.
pub struct ReplyWriter<'a> {
    buf: &'a mut BytesMut,
    proto: Protocol,
}

impl<'a> ReplyWriter<'a> {
    pub fn new(buf: &'a mut BytesMut, proto: Protocol) -> Self {
        ReplyWriter { buf, proto }
    }

    pub fn protocol(&self) -> Protocol {
        self.proto
    }

    /// A second writer on the same buffer (for commands run inside EXEC).
    pub fn reborrow(&mut self) -> ReplyWriter<'_> {
        ReplyWriter {
            buf: self.buf,
            proto: self.proto,
        }
    }

    /// Switches the encoding for what follows (HELLO replies in the protocol it negotiated).
    pub fn set_protocol(&mut self, proto: Protocol) {
        self.proto = proto;
    }

    /// Bytes written so far into the underlying buffer (all replies, not just this writer's).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Drops everything written after `len` (used when a queued reply must be replaced).
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }

    /// Appends bytes that are already valid RESP (a cached reply, a forwarded frame).
    pub fn raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    fn line(&mut self, prefix: u8, body: &[u8]) {
        self.buf.reserve(body.len() + 3);
        self.buf.put_u8(prefix);
        self.buf.extend_from_slice(body);
        self.buf.extend_from_slice(b"\r\n");
    }

    fn len_line(&mut self, prefix: u8, n: i64) {
        let mut tmp = itoa_buf();
        let digits = fmt_i64(n, &mut tmp);
        self.line(prefix, digits);
    }

    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    /// `+body`: the caller guarantees there is no CR or LF inside.
    pub fn simple(&mut self, body: &[u8]) {
        self.line(b'+', body);
    }

    /// `-message`: `message` carries its own code (`ERR ...`, `WRONGTYPE ...`). CR and LF are
    /// replaced by spaces, as Redis does, so a user-supplied fragment cannot break framing.
    pub fn error(&mut self, message: &[u8]) {
        self.buf.reserve(message.len() + 3);
        self.buf.put_u8(b'-');
        for &b in message {
            self.buf
                .put_u8(if b == b'\r' || b == b'\n' { b' ' } else { b });
        }
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn integer(&mut self, n: i64) {
        self.len_line(b':', n);
    }

    pub fn bulk(&mut self, data: &[u8]) {
        self.buf.reserve(data.len() + 16);
        self.len_line(b'$', data.len() as i64);
        self.buf.extend_from_slice(data);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// A bulk string holding the decimal form of `n` (e.g. GET of an integer-encoded string).
    pub fn bulk_i64(&mut self, n: i64) {
        let mut tmp = itoa_buf();
        let digits = fmt_i64(n, &mut tmp);
        self.bulk(digits);
    }

    /// The null bulk string: `$-1` in RESP2, `_` in RESP3.
    pub fn null(&mut self) {
        match self.proto {
            Protocol::Resp2 => self.buf.extend_from_slice(b"$-1\r\n"),
            Protocol::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    /// The null array: `*-1` in RESP2, `_` in RESP3.
    pub fn null_array(&mut self) {
        match self.proto {
            Protocol::Resp2 => self.buf.extend_from_slice(b"*-1\r\n"),
            Protocol::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    pub fn array_len(&mut self, n: usize) {
        self.len_line(b'*', n as i64);
    }

    /// A map of `n` pairs: `%n` in RESP3, a flat array of `2n` elements in RESP2.
    pub fn map_len(&mut self, n: usize) {
        match self.proto {
            Protocol::Resp2 => self.len_line(b'*', 2 * n as i64),
            Protocol::Resp3 => self.len_line(b'%', n as i64),
        }
    }

    /// A set of `n` elements: `~n` in RESP3, an array in RESP2.
    pub fn set_len(&mut self, n: usize) {
        match self.proto {
            Protocol::Resp2 => self.len_line(b'*', n as i64),
            Protocol::Resp3 => self.len_line(b'~', n as i64),
        }
    }

    /// An out-of-band push of `n` elements: `>n` in RESP3, an array in RESP2.
    pub fn push_len(&mut self, n: usize) {
        match self.proto {
            Protocol::Resp2 => self.len_line(b'*', n as i64),
            Protocol::Resp3 => self.len_line(b'>', n as i64),
        }
    }

    /// A double: `,d` in RESP3, a bulk string in RESP2, formatted like Redis 7.0 (`%.17g`,
    /// `inf`, `-inf`).
    pub fn double(&mut self, d: f64) {
        let mut text = Vec::with_capacity(24);
        format_double(d, &mut text);
        match self.proto {
            Protocol::Resp2 => self.bulk(&text),
            Protocol::Resp3 => self.line(b',', &text),
        }
    }

    /// A boolean: `#t`/`#f` in RESP3, `:1`/`:0` in RESP2.
    pub fn boolean(&mut self, b: bool) {
        match self.proto {
            Protocol::Resp2 => self.integer(b as i64),
            Protocol::Resp3 => self.line(b'#', if b { b"t" } else { b"f" }),
        }
    }

    /// A verbatim string (`=len\r\ntxt:...` in RESP3, a bulk string in RESP2).
    pub fn verbatim(&mut self, format: &[u8; 3], data: &[u8]) {
        match self.proto {
            Protocol::Resp2 => self.bulk(data),
            Protocol::Resp3 => {
                self.len_line(b'=', data.len() as i64 + 4);
                self.buf.extend_from_slice(format);
                self.buf.put_u8(b':');
                self.buf.extend_from_slice(data);
                self.buf.extend_from_slice(b"\r\n");
            }
        }
    }

    /// A big number (`(digits` in RESP3, a bulk string in RESP2).
    pub fn big_number(&mut self, digits: &[u8]) {
        match self.proto {
            Protocol::Resp2 => self.bulk(digits),
            Protocol::Resp3 => self.line(b'(', digits),
        }
    }
}

fn itoa_buf() -> [u8; 20] {
    [0u8; 20]
}

/// Formats `n` in decimal into the tail of `buf`, returning the digits. No allocation.
pub fn fmt_i64(n: i64, buf: &mut [u8; 20]) -> &[u8] {
    let neg = n < 0;
    let mut v = n.unsigned_abs();
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

/// Formats a double the way Redis 7.0 replies with one: `%.17g`, with `inf`, `-inf` and `nan`.
pub fn format_double(d: f64, out: &mut Vec<u8>) {
    if d.is_nan() {
        out.extend_from_slice(b"nan");
    } else if d.is_infinite() {
        out.extend_from_slice(if d > 0.0 { b"inf" } else { b"-inf" });
    } else {
        format_g(d, 17, out);
    }
}

/// C's `%.<precision>g` for finite `d`: `precision` significant digits, trailing zeros removed,
/// exponent form when the exponent is below -4 or at least `precision`.
pub fn format_g(d: f64, precision: usize, out: &mut Vec<u8>) {
    use std::io::Write;
    debug_assert!(d.is_finite() && precision >= 1);
    if d == 0.0 {
        out.extend_from_slice(if d.is_sign_negative() { b"-0" } else { b"0" });
        return;
    }
    // `{:.Ne}` rounds to N+1 significant digits exactly like printf does (round-half-even on
    // the exact binary value), which gives us the digits and the decimal exponent.
    let sci = format!("{:.*e}", precision - 1, d);
    let (mantissa, exp) = sci.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("exponent digits");
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: Vec<u8> = mantissa.bytes().filter(|b| *b != b'.').collect();
    if neg {
        out.push(b'-');
    }
    if exp < -4 || exp >= precision as i32 {
        // d.ddddde+XX with trailing zeros of the fraction removed.
        let frac = trim_zeros(&digits[1..]);
        out.push(digits[0]);
        if !frac.is_empty() {
            out.push(b'.');
            out.extend_from_slice(frac);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    } else if exp >= 0 {
        let int_len = exp as usize + 1;
        out.extend_from_slice(&digits[..int_len]);
        let frac = trim_zeros(&digits[int_len..]);
        if !frac.is_empty() {
            out.push(b'.');
            out.extend_from_slice(frac);
        }
    } else {
        out.extend_from_slice(b"0.");
        for _ in 0..(-exp - 1) {
            out.push(b'0');
        }
        out.extend_from_slice(trim_zeros(&digits));
    }
}

fn trim_zeros(d: &[u8]) -> &[u8] {
    let end = d.iter().rposition(|b| *b != b'0').map_or(0, |p| p + 1);
    &d[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g17(d: f64) -> String {
        let mut v = Vec::new();
        format_double(d, &mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn doubles_match_printf_g17() {
        assert_eq!(g17(1.5), "1.5");
        assert_eq!(g17(0.1), "0.10000000000000001");
        assert_eq!(g17(3.0), "3");
        assert_eq!(g17(-2.25), "-2.25");
        assert_eq!(g17(1e17), "1e+17");
        assert_eq!(g17(1.5e-5), "1.5e-05");
        assert_eq!(g17(0.0001), "0.0001");
        assert_eq!(g17(123456789012345678.0), "1.2345678901234568e+17");
        assert_eq!(g17(f64::INFINITY), "inf");
        assert_eq!(g17(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn resp2_and_resp3_shapes() {
        let mut b = BytesMut::new();
        let mut w = ReplyWriter::new(&mut b, Protocol::Resp2);
        w.map_len(2);
        w.null();
        w.boolean(true);
        w.integer(-42);
        w.error(b"ERR bad\r\nthing");
        assert_eq!(&b[..], b"*4\r\n$-1\r\n:1\r\n:-42\r\n-ERR bad  thing\r\n");
        let mut b = BytesMut::new();
        let mut w = ReplyWriter::new(&mut b, Protocol::Resp3);
        w.map_len(2);
        w.null();
        w.boolean(false);
        w.double(2.5);
        w.verbatim(b"txt", b"hi");
        assert_eq!(&b[..], b"%2\r\n_\r\n#f\r\n,2.5\r\n=6\r\ntxt:hi\r\n");
    }
}

//! DUMP / RESTORE payloads: a self-contained, checksummed binary form of one value.
//!
//! The payload is opaque to clients (as Redis's is), so the format is Lattice's own; RESTORE
//! also reads the payloads of Redis's DUMP, told apart by their version (module [`crate::rdb`]).
//! Layout:
//!
//! ```text
//! type: u8 | body | version: u16 LE | checksum: u64 LE
//! ```
//!
//! The checksum is CRC-64/Jones (reflected, init 0, no final xor) of everything before it,
//! version included. Inside the body a *varint* is an unsigned LEB128 number (at most 10 bytes,
//! no redundant trailing zero groups), an *int* is a zigzag-encoded varint, *bytes* is a varint
//! length followed by that many bytes and a *score* is the 8 bytes of an `f64` (LE), so `-0`,
//! the infinities and every other score come back bit for bit. Bodies by type byte:
//!
//! | type | value                   | body                                          |
//! |------|-------------------------|-----------------------------------------------|
//! | 0    | string (bytes)          | bytes                                         |
//! | 1    | string (integer)        | int                                           |
//! | 2    | list                    | varint n, n × bytes (head to tail)            |
//! | 3    | hash, listpack          | varint n, n × (bytes field, bytes value)      |
//! | 4    | hash, hashtable         | same as 3                                     |
//! | 5    | set, intset             | varint n, n × int (strictly ascending)        |
//! | 6    | set, hashtable          | varint n, n × bytes                           |
//! | 7    | sorted set, listpack    | varint n, n × (bytes member, score)           |
//! | 8    | sorted set, skiplist    | same as 7                                     |
//! | 9    | stream                  | see [`put_stream`]                            |
//!
//! Collections are written in their iteration order and rebuilt by inserting in that order, so
//! a restored value iterates exactly as the original did and keeps its encoding.
//!
//! [`restore`] never panics and allocates no more than a small multiple of its input: every
//! length is checked against the bytes that remain before anything is read or allocated.
//! Empty collections, duplicate members, NaN scores and trailing bytes are rejected, as Redis
//! rejects them when loading.

use std::fmt;

use bytes::BufMut;

use crate::hash::Limits;
use crate::rdb;
use crate::stream::{Consumer, Group, Pending, StreamId};
use crate::{Hash, List, Set, Str, Stream, Value, ZSet};

/// The version written in every payload, the only one of Lattice's own format [`restore`]
/// accepts (it also takes Redis's payloads, whose RDB versions start at 2: see [`rdb`]).
pub const FORMAT_VERSION: u16 = 1;

/// Bytes after the body: version and checksum.
const FOOTER_LEN: usize = 2 + 8;

const T_STR_RAW: u8 = 0;
const T_STR_INT: u8 = 1;
const T_LIST: u8 = 2;
const T_HASH_LISTPACK: u8 = 3;
const T_HASH_TABLE: u8 = 4;
const T_SET_INTSET: u8 = 5;
const T_SET_TABLE: u8 = 6;
const T_ZSET_LISTPACK: u8 = 7;
const T_ZSET_SKIPLIST: u8 = 8;
const T_STREAM: u8 = 9;

/// Why a payload was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpError {
    /// Too short for a footer, an unknown format version or a checksum mismatch (Redis's
    /// "DUMP payload version or checksum are wrong").
    VersionOrChecksum,
    /// The footer is right but the body does not describe a valid value (Redis's "Bad data
    /// format").
    BadFormat,
}

impl fmt::Display for DumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DumpError::VersionOrChecksum => "DUMP payload version or checksum are wrong",
            DumpError::BadFormat => "Bad data format",
        })
    }
}

impl std::error::Error for DumpError {}

// ---------------------------------------------------------------------------------------------
// CRC-64/Jones

/// The CRC-64/Jones polynomial in normal (MSB-first) form.
const CRC64_POLY: u64 = 0xad93_d235_94c9_35a9;

const fn crc64_table() -> [u64; 256] {
    let poly = CRC64_POLY.reverse_bits();
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u64;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 == 1 { (c >> 1) ^ poly } else { c >> 1 };
            bit += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static CRC64_TABLE: [u64; 256] = crc64_table();

/// CRC-64/Jones of `data` (reflected in and out, initial value 0, no final xor).
pub fn crc64(data: &[u8]) -> u64 {
    data.iter().fold(0u64, |crc, &b| {
        CRC64_TABLE[((crc ^ b as u64) & 0xff) as usize] ^ (crc >> 8)
    })
}

// ---------------------------------------------------------------------------------------------
// Encoding

fn put_varint<B: BufMut + ?Sized>(out: &mut B, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

fn put_int<B: BufMut + ?Sized>(out: &mut B, v: i64) {
    put_varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn put_len<B: BufMut + ?Sized>(out: &mut B, n: usize) {
    put_varint(out, n as u64);
}

fn put_bytes<B: BufMut + ?Sized>(out: &mut B, b: &[u8]) {
    put_len(out, b.len());
    out.put_slice(b);
}

fn put_score<B: BufMut + ?Sized>(out: &mut B, score: f64) {
    out.put_slice(&score.to_bits().to_le_bytes());
}

fn put_id<B: BufMut + ?Sized>(out: &mut B, id: StreamId) {
    put_varint(out, id.ms);
    put_varint(out, id.seq);
}

/// A stream body: varint n, n × (id, varint f, f × (bytes field, bytes value)); last id,
/// max deleted id, varint entries added; varint g, g × group. A group: bytes name, last id,
/// varint entries read + 1 (0: unknown), varint c, c × (bytes consumer, varint seen time),
/// varint p, p × (id, varint consumer index, varint delivery time, varint delivery count).
/// An id is two varints (ms, seq). Streams may be empty (consumer groups keep them alive).
fn put_stream<B: BufMut + ?Sized>(out: &mut B, st: &Stream) {
    put_len(out, st.len());
    for (id, fields) in st.iter() {
        put_id(out, id);
        put_len(out, fields.len());
        for (f, v) in fields {
            put_bytes(out, f);
            put_bytes(out, v);
        }
    }
    put_id(out, st.last_id);
    put_id(out, st.max_deleted_id);
    put_varint(out, st.entries_added);
    put_len(out, st.groups().len());
    for (name, g) in st.groups() {
        put_bytes(out, name);
        put_id(out, g.last_id);
        put_varint(out, g.entries_read.map_or(0, |n| n.saturating_add(1)));
        put_len(out, g.consumers.len());
        for (cname, c) in &g.consumers {
            put_bytes(out, cname);
            put_varint(out, c.seen_time_ms);
        }
        put_len(out, g.pel.len());
        let names: Vec<&Vec<u8>> = g.consumers.keys().collect();
        for (id, p) in &g.pel {
            put_id(out, *id);
            let at = names.binary_search(&&p.consumer).unwrap_or(0);
            put_len(out, at);
            put_varint(out, p.delivery_time_ms);
            put_varint(out, p.delivery_count);
        }
    }
}

/// Serialises `value` into a payload that [`restore`] turns back into an equal value.
pub fn dump(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + value.heap_bytes());
    put_body(&mut out, value);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Appends `value`'s type and body to `out`: a payload without the version and checksum,
/// which [`restore_body`] reads back. For containers that checksum their contents already
/// (the persistence log's frames): the byte-wise CRC-64 of the footer was most of the cost
/// of logging a small key. Generic over the buffer so the log encodes a value straight into
/// the buffer its record leaves in (ARCHITECTURE §81) while DUMP keeps its `Vec`.
pub fn put_body<B: BufMut + ?Sized>(out: &mut B, value: &Value) {
    match value {
        Value::Str(Str::Raw(b)) => {
            out.put_u8(T_STR_RAW);
            put_bytes(out, b);
        }
        Value::Str(Str::Int(n)) => {
            out.put_u8(T_STR_INT);
            put_int(out, *n);
        }
        Value::List(l) => {
            out.put_u8(T_LIST);
            put_len(out, l.len());
            for e in l.iter() {
                put_bytes(out, e);
            }
        }
        Value::Hash(h) => {
            out.put_u8(if h.is_compact() {
                T_HASH_LISTPACK
            } else {
                T_HASH_TABLE
            });
            put_len(out, h.len());
            for (f, v) in h.iter() {
                put_bytes(out, f);
                put_bytes(out, v);
            }
        }
        Value::Set(s) if s.is_intset() => {
            out.put_u8(T_SET_INTSET);
            put_len(out, s.len());
            for m in s.iter() {
                let n = crate::value::parse_canonical_i64(&m).expect("intset members are integers");
                put_int(out, n);
            }
        }
        Value::Set(s) => {
            out.put_u8(T_SET_TABLE);
            put_len(out, s.len());
            for m in s.iter() {
                put_bytes(out, &m);
            }
        }
        Value::ZSet(z) => {
            out.put_u8(if z.encoding() == "skiplist" {
                T_ZSET_SKIPLIST
            } else {
                T_ZSET_LISTPACK
            });
            put_len(out, z.len());
            for (m, s) in z.iter() {
                put_bytes(out, m);
                put_score(out, s);
            }
        }
        Value::Stream(st) => {
            out.put_u8(T_STREAM);
            put_stream(out, st);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// A cursor over the body; every read fails with `BadFormat` rather than running off the end.
struct Reader<'a> {
    buf: &'a [u8],
}

type Res<T> = Result<T, DumpError>;

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn take(&mut self, n: usize) -> Res<&'a [u8]> {
        if n > self.buf.len() {
            return Err(DumpError::BadFormat);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Res<u8> {
        Ok(self.take(1)?[0])
    }

    fn varint(&mut self) -> Res<u64> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.u8()?;
            let bits = (b & 0x7f) as u64;
            // The tenth group holds bit 63 only.
            if i == 9 && bits > 1 {
                return Err(DumpError::BadFormat);
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                // A final zero group after the first is a redundant (overlong) encoding.
                if i > 0 && b == 0 {
                    return Err(DumpError::BadFormat);
                }
                return Ok(v);
            }
        }
        Err(DumpError::BadFormat)
    }

    fn int(&mut self) -> Res<i64> {
        let z = self.varint()?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    /// A length that must fit in what is left (every counted item takes at least one byte).
    fn len(&mut self) -> Res<usize> {
        let n = self.varint()?;
        if n > self.remaining() as u64 {
            return Err(DumpError::BadFormat);
        }
        Ok(n as usize)
    }

    /// A collection's element count: positive, and each element takes at least one byte.
    fn count(&mut self) -> Res<usize> {
        match self.len()? {
            0 => Err(DumpError::BadFormat),
            n => Ok(n),
        }
    }

    fn bytes(&mut self) -> Res<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }

    fn score(&mut self) -> Res<f64> {
        let raw: [u8; 8] = self.take(8)?.try_into().map_err(|_| DumpError::BadFormat)?;
        let s = f64::from_bits(u64::from_le_bytes(raw));
        if s.is_nan() {
            return Err(DumpError::BadFormat);
        }
        Ok(s)
    }
}

/// Fails unless `ok` (a duplicate member, an unsorted intset...).
fn ensure(ok: bool) -> Res<()> {
    if ok {
        Ok(())
    } else {
        Err(DumpError::BadFormat)
    }
}

/// Checks the footer of `payload` and returns its version and the part before the footer
/// (type and body). Versions other than Lattice's own are those of Redis's RDB encoding up
/// to [`rdb::MAX_RDB_VERSION`] (what Redis 7.0 accepts); version 1 is Lattice's, which no
/// Redis since DUMP exists (2.6, RDB version 6) writes.
fn verify(payload: &[u8]) -> Res<(u16, &[u8])> {
    if payload.len() < FOOTER_LEN {
        return Err(DumpError::VersionOrChecksum);
    }
    let crc_at = payload.len() - 8;
    let version_at = crc_at - 2;
    let version = u16::from_le_bytes([payload[version_at], payload[version_at + 1]]);
    if version != FORMAT_VERSION && !(2..=rdb::MAX_RDB_VERSION).contains(&version) {
        return Err(DumpError::VersionOrChecksum);
    }
    let mut stored = [0u8; 8];
    stored.copy_from_slice(&payload[crc_at..]);
    if crc64(&payload[..crc_at]) != u64::from_le_bytes(stored) {
        return Err(DumpError::VersionOrChecksum);
    }
    Ok((version, &payload[..version_at]))
}

/// Decodes a payload made by [`dump`] (the value comes back equal to the one dumped, with
/// the same encoding and iteration order) or by Redis's DUMP (see [`rdb`]).
pub fn restore(payload: &[u8]) -> Result<Value, DumpError> {
    match verify(payload)? {
        (FORMAT_VERSION, body) => restore_body(body),
        (_, body) => rdb::restore(body),
    }
}

/// Decodes what [`put_body`] wrote (a payload without its footer), with the same checks as
/// [`restore`] but for the footer's.
pub fn restore_body(body: &[u8]) -> Result<Value, DumpError> {
    let mut r = Reader { buf: body };
    let value = match r.u8()? {
        T_STR_RAW => Value::Str(Str::Raw(r.bytes()?.to_vec())),
        T_STR_INT => Value::Str(Str::Int(r.int()?)),
        T_LIST => {
            let n = r.count()?;
            let mut l = List::new();
            for _ in 0..n {
                l.push(crate::list::End::Tail, r.bytes()?);
            }
            Value::List(Box::new(l))
        }
        t @ (T_HASH_LISTPACK | T_HASH_TABLE) => {
            // A listpack never converts while restoring; a hashtable converts at once.
            let limits = Limits {
                max_entries: if t == T_HASH_TABLE { 0 } else { usize::MAX },
                max_value: usize::MAX,
            };
            let n = r.count()?;
            let mut h = Hash::new();
            for _ in 0..n {
                let (f, v) = (r.bytes()?, r.bytes()?);
                ensure(h.insert(f, v, limits))?;
            }
            Value::Hash(Box::new(h))
        }
        T_SET_INTSET => {
            let n = r.count()?;
            let mut s = Set::new();
            let mut last: Option<i64> = None;
            for _ in 0..n {
                let v = r.int()?;
                ensure(last.is_none_or(|l| l < v))?;
                last = Some(v);
                s.insert(v.to_string().as_bytes(), usize::MAX);
            }
            Value::Set(Box::new(s))
        }
        T_SET_TABLE => {
            let n = r.count()?;
            let mut s = Set::new();
            for _ in 0..n {
                // A limit of 0 entries makes the very first insert leave the intset form.
                ensure(s.insert(r.bytes()?, 0))?;
            }
            Value::Set(Box::new(s))
        }
        t @ (T_ZSET_LISTPACK | T_ZSET_SKIPLIST) => {
            let n = r.count()?;
            let mut z = if t == T_ZSET_SKIPLIST {
                ZSet::with_hint(1, 0, 0, 0)
            } else {
                ZSet::new()
            };
            for _ in 0..n {
                let (m, s) = (r.bytes()?, r.score()?);
                ensure(z.insert(m, s).is_none())?;
            }
            Value::ZSet(Box::new(z))
        }
        T_STREAM => Value::Stream(Box::new(read_stream(&mut r)?)),
        _ => return Err(DumpError::BadFormat),
    };
    ensure(r.remaining() == 0)?;
    Ok(value)
}

fn read_id(r: &mut Reader) -> Res<StreamId> {
    Ok(StreamId::new(r.varint()?, r.varint()?))
}

/// The inverse of [`put_stream`]; entries must ascend, fields come in pairs, every pending
/// entry names an existing consumer, and the last id is not below the last entry.
fn read_stream(r: &mut Reader) -> Res<Stream> {
    let mut st = Stream::new();
    let n = r.len()?;
    let mut prev: Option<StreamId> = None;
    for _ in 0..n {
        let id = read_id(r)?;
        ensure(prev.is_none_or(|p| p < id))?;
        prev = Some(id);
        let nf = r.count()?;
        let mut fields = Vec::new();
        for _ in 0..nf {
            let f = r.bytes()?.to_vec();
            let v = r.bytes()?.to_vec();
            fields.push((f, v));
        }
        ensure(st.insert_raw(id, fields))?;
    }
    let last = read_id(r)?;
    ensure(prev.is_none_or(|p| p <= last))?;
    let max_del = read_id(r)?;
    let added = r.varint()?;
    st.set_last_id(last, Some(added), Some(max_del));
    let ng = r.len()?;
    for _ in 0..ng {
        let name = r.bytes()?.to_vec();
        let last_id = read_id(r)?;
        let entries_read = match r.varint()? {
            0 => None,
            n => Some(n - 1),
        };
        let mut g = Group {
            last_id,
            entries_read,
            ..Group::default()
        };
        let nc = r.len()?;
        let mut names = Vec::new();
        for _ in 0..nc {
            let cname = r.bytes()?.to_vec();
            let seen = r.varint()?;
            ensure(names.last().is_none_or(|p: &Vec<u8>| *p < cname))?;
            names.push(cname.clone());
            g.consumers.insert(
                cname,
                Consumer {
                    seen_time_ms: seen,
                    pel: Default::default(),
                },
            );
        }
        let np = r.len()?;
        for _ in 0..np {
            let id = read_id(r)?;
            let at = r.varint()?;
            let consumer = names.get(at as usize).ok_or(DumpError::BadFormat)?.clone();
            let delivery_time_ms = r.varint()?;
            let delivery_count = r.varint()?;
            ensure(!g.pel.contains_key(&id))?;
            g.consumers
                .get_mut(&consumer)
                .expect("listed")
                .pel
                .insert(id);
            g.pel.insert(
                id,
                Pending {
                    consumer,
                    delivery_time_ms,
                    delivery_count,
                },
            );
        }
        ensure(st.insert_group_raw(name, g))?;
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::list::End;
    use proptest::prelude::*;

    #[test]
    fn crc64_check_value() {
        // The standard check input for CRC-64/Jones (the one Redis uses).
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        assert_eq!(crc64(b""), 0);
    }

    #[test]
    fn varints() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX - 1, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            let mut r = Reader { buf: &out };
            assert_eq!(r.varint(), Ok(v));
            assert_eq!(r.remaining(), 0);
        }
        for v in [0, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            put_int(&mut out, v);
            assert_eq!(Reader { buf: &out }.int(), Ok(v));
        }
        // Overlong, overflowing and unterminated encodings.
        for bad in [
            &[0x80, 0x00][..],
            &[0xff; 10][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02][..],
            &[0x80][..],
            &[][..],
        ] {
            assert_eq!(Reader { buf: bad }.varint(), Err(DumpError::BadFormat));
        }
    }

    /// Wraps a hand-made body in a valid footer.
    fn seal(body: &[u8]) -> Vec<u8> {
        let mut out = body.to_vec();
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        let crc = crc64(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    #[test]
    fn layout_of_a_string() {
        let p = dump(&Value::Str(Str::Raw(b"bar".to_vec())));
        assert_eq!(&p[..5], &[T_STR_RAW, 3, b'b', b'a', b'r']);
        assert_eq!(&p[5..7], &[1, 0]);
        assert_eq!(p.len(), 15);
        assert_eq!(p, seal(&[T_STR_RAW, 3, b'b', b'a', b'r']));
    }

    #[test]
    fn footer_errors() {
        let good = dump(&Value::Str(Str::Int(42)));
        assert!(restore(&good).is_ok());
        assert_eq!(restore(b""), Err(DumpError::VersionOrChecksum));
        assert_eq!(restore(&good[1..]), Err(DumpError::VersionOrChecksum));
        // A version neither Lattice's nor Redis 7.0's, with a checksum that matches it, is
        // still refused (2..=10 are Redis's: see the rdb module).
        let mut other = good[..good.len() - 10].to_vec();
        other.extend_from_slice(&11u16.to_le_bytes());
        let crc = crc64(&other);
        other.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(restore(&other), Err(DumpError::VersionOrChecksum));
        assert_eq!(
            DumpError::VersionOrChecksum.to_string(),
            "DUMP payload version or checksum are wrong"
        );
        assert_eq!(DumpError::BadFormat.to_string(), "Bad data format");
    }

    #[test]
    fn bad_bodies_with_valid_footers() {
        let bad: &[&[u8]] = &[
            &[],                                                          // no type
            &[99],                                                        // unknown type
            &[T_STR_RAW, 4, b'a'],                                        // length past the end
            &[T_STR_RAW, 1, b'a', b'b'],                                  // trailing byte
            &[T_LIST, 0],                                                 // empty list
            &[T_LIST, 0xff, 0xff, 0xff, 0xff, 0x0f],                      // count past the end
            &[T_HASH_LISTPACK, 2, 1, b'f', 0, 1, b'f', 0],                // duplicate field
            &[T_SET_INTSET, 2, 2, 2],                                     // not strictly ascending
            &[T_SET_INTSET, 2, 4, 2],                                     // descending
            &[T_SET_TABLE, 2, 1, b'x', 1, b'x'],                          // duplicate member
            &[T_ZSET_SKIPLIST, 1, 1, b'm', 0, 0, 0, 0, 0, 0, 0xf8, 0x7f], // NaN score
            &[T_ZSET_LISTPACK, 1, 1, b'm', 0, 0, 0],                      // short score
        ];
        for body in bad {
            assert_eq!(restore(&seal(body)), Err(DumpError::BadFormat), "{body:?}");
        }
        // And a hand-made valid one.
        let v = restore(&seal(&[T_SET_INTSET, 2, 3, 4])).unwrap();
        let Value::Set(s) = v else { panic!() };
        assert_eq!(s.encoding(), "intset");
        let members: Vec<Vec<u8>> = s.iter().map(|m| m.into_owned()).collect();
        assert_eq!(members, vec![b"-2".to_vec(), b"2".to_vec()]);
    }

    // -- round trips ---------------------------------------------------------------------

    fn member() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            (-20i64..20).prop_map(|n| n.to_string().into_bytes()),
            any::<i64>().prop_map(|n| n.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..6),
            proptest::collection::vec(b'a'..=b'c', 60..80),
        ]
    }

    fn score() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(0.0),
            Just(-0.0),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::MIN_POSITIVE),
            Just(f64::MAX),
            (-5i32..5).prop_map(f64::from),
            any::<f64>().prop_filter("not NaN", |s| !s.is_nan()),
        ]
    }

    fn string() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i64>().prop_map(|n| Value::Str(Str::Int(n))),
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(|b| Value::Str(Str::Raw(b))),
            member().prop_map(|b| Value::Str(Str::from_bytes(&b))),
        ]
    }

    fn list() -> impl Strategy<Value = Value> {
        proptest::collection::vec((any::<bool>(), any::<bool>(), member()), 1..40).prop_map(|ops| {
            let mut l = List::new();
            for (head, pop, m) in ops {
                let end = if head { End::Head } else { End::Tail };
                if pop && l.len() > 1 {
                    l.pop(end);
                } else {
                    l.push(end, &m);
                }
            }
            Value::List(Box::new(l))
        })
    }

    fn hash() -> impl Strategy<Value = Value> {
        (
            1usize..20,
            1usize..100,
            proptest::collection::vec((any::<bool>(), member(), member()), 1..60),
        )
            .prop_map(|(max_entries, max_value, ops)| {
                let limits = Limits {
                    max_entries,
                    max_value,
                };
                let mut h = Hash::new();
                for (remove, f, v) in ops {
                    if remove && h.len() > 1 {
                        h.remove(&f);
                    } else {
                        h.insert(&f, &v, limits);
                    }
                }
                Value::Hash(Box::new(h))
            })
    }

    fn set() -> impl Strategy<Value = Value> {
        (
            1usize..30,
            proptest::collection::vec((any::<bool>(), member()), 1..60),
        )
            .prop_map(|(max_intset, ops)| {
                let mut s = Set::new();
                for (remove, m) in ops {
                    if remove && s.len() > 1 {
                        s.remove(&m);
                    } else {
                        s.insert(&m, max_intset);
                    }
                }
                Value::Set(Box::new(s))
            })
    }

    fn zset() -> impl Strategy<Value = Value> {
        (
            any::<bool>(),
            1usize..20,
            proptest::collection::vec((any::<bool>(), member(), score()), 1..60),
        )
            .prop_map(|(skiplist, max_entries, ops)| {
                let mut z = if skiplist {
                    ZSet::with_hint(1, 0, 0, 0)
                } else {
                    ZSet::new()
                };
                for (remove, m, s) in ops {
                    if remove && z.len() > 1 {
                        z.remove(&m);
                    } else {
                        z.insert(&m, s);
                        z.convert_if_needed(max_entries, 64);
                    }
                }
                Value::ZSet(Box::new(z))
            })
    }

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![string(), list(), hash(), set(), zset()]
    }

    /// Equal, same encoding, same iteration order, scores identical to the bit.
    fn assert_same(a: &Value, b: &Value) {
        assert_eq!(a, b);
        assert_eq!(a.encoding(), b.encoding());
        match (a, b) {
            (Value::Str(x), Value::Str(y)) => assert_eq!(x, y),
            (Value::List(x), Value::List(y)) => assert!(x.iter().eq(y.iter())),
            (Value::Hash(x), Value::Hash(y)) => assert!(x.iter().eq(y.iter())),
            (Value::Set(x), Value::Set(y)) => assert!(x.iter().eq(y.iter())),
            (Value::Stream(x), Value::Stream(y)) => assert_eq!(x, y),
            (Value::ZSet(x), Value::ZSet(y)) => assert!(x
                .iter()
                .map(|(m, s)| (m, s.to_bits()))
                .eq(y.iter().map(|(m, s)| (m, s.to_bits())))),
            _ => panic!("types differ"),
        }
        match b {
            Value::List(x) => x.check_invariants(),
            Value::Hash(x) => x.check_invariants(),
            Value::Set(x) => x.check_invariants(),
            Value::ZSet(x) => x.check_invariants(),
            Value::Stream(x) => x.check().unwrap(),
            Value::Str(_) => {}
        }
    }

    #[test]
    fn streams_round_trip_with_groups() {
        let mut st = Stream::new();
        for i in 1..=6u64 {
            st.add(
                StreamId::new(i, 0),
                vec![(b"f".to_vec(), i.to_string().into_bytes())],
            )
            .unwrap();
        }
        st.create_group(b"g1", StreamId::MIN, None);
        st.create_group(b"g2", StreamId::new(3, 0), Some(3));
        st.read_group_new(b"g1", b"alice", Some(2), false, 10)
            .unwrap();
        st.read_group_new(b"g1", b"bob", Some(2), false, 20)
            .unwrap();
        st.group_mut(b"g2").unwrap().create_consumer(b"idle", 5);
        st.delete(StreamId::new(2, 0));
        let v = Value::Stream(Box::new(st));
        let back = restore(&dump(&v)).unwrap();
        assert_same(&v, &back);
        // An empty stream (kept alive by a group) round trips too.
        let mut empty = Stream::new();
        empty.create_group(b"g", StreamId::MIN, None);
        let v = Value::Stream(Box::new(empty));
        assert_same(&v, &restore(&dump(&v)).unwrap());
    }

    #[test]
    fn zset_scores_bit_exact() {
        let mut z = ZSet::with_hint(1, 0, 0, 0);
        for (m, s) in [
            (&b"nz"[..], -0.0),
            (b"z", 0.0),
            (b"inf", f64::INFINITY),
            (b"ninf", f64::NEG_INFINITY),
            (b"tiny", 5e-324),
            (b"third", 1.0 / 3.0),
        ] {
            z.insert(m, s);
        }
        let v = Value::ZSet(Box::new(z));
        let back = restore(&dump(&v)).unwrap();
        assert_same(&v, &back);
        let Value::ZSet(z) = back else { panic!() };
        assert_eq!(z.score(b"nz").map(f64::to_bits), Some((-0.0f64).to_bits()));
    }

    #[test]
    fn encodings_survive() {
        let mut s = Set::new();
        s.insert(b"5", 0); // a hashtable of integers stays a hashtable
        let mut h = Hash::new();
        h.insert(b"f", b"v", Limits::default());
        let lim = Limits {
            max_entries: 0,
            max_value: 64,
        };
        let mut big = Hash::new();
        big.insert(b"f", b"v", lim);
        for v in [
            Value::Set(Box::new(s)),
            Value::Hash(Box::new(h)),
            Value::Hash(Box::new(big)),
        ] {
            assert_same(&v, &restore(&dump(&v)).unwrap());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn round_trip(v in value()) {
            let payload = dump(&v);
            let back = restore(&payload).expect("own payload restores");
            assert_same(&v, &back);
            // Deterministic: the same value always dumps to the same bytes.
            prop_assert_eq!(dump(&back), payload);
        }

        #[test]
        fn any_changed_byte_is_rejected(v in value(), pos in any::<prop::sample::Index>(), x in 1u8..=255) {
            let mut payload = dump(&v);
            let i = pos.index(payload.len());
            payload[i] ^= x;
            prop_assert!(restore(&payload).is_err());
        }

        #[test]
        fn truncation_and_extension_are_rejected(v in value(), cut in any::<prop::sample::Index>(), extra in any::<u8>()) {
            let payload = dump(&v);
            let n = cut.index(payload.len());
            prop_assert!(restore(&payload[..n]).is_err());
            let mut longer = payload.clone();
            longer.push(extra);
            prop_assert!(restore(&longer).is_err());
        }

        #[test]
        fn arbitrary_input_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = restore(&bytes);
        }

        #[test]
        fn arbitrary_body_never_panics(body in proptest::collection::vec(any::<u8>(), 0..200)) {
            // Sealed, so decoding really runs on the junk.
            if let Ok(v) = restore(&seal(&body)) {
                // Whatever decodes is a well-formed value that round-trips.
                assert_same(&v, &restore(&dump(&v)).unwrap());
            }
        }

        #[test]
        fn mutated_bodies_never_panic(v in value(), edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
            // Corrupt the body and fix up the footer so the decoder sees the damage.
            let payload = dump(&v);
            let mut body = payload[..payload.len() - FOOTER_LEN].to_vec();
            for (pos, b) in edits {
                let i = pos.index(body.len());
                body[i] = b;
            }
            if let Ok(back) = restore(&seal(&body)) {
                match back {
                    Value::List(x) => x.check_invariants(),
                    Value::Hash(x) => x.check_invariants(),
                    Value::Set(x) => x.check_invariants(),
                    Value::ZSet(x) => x.check_invariants(),
                    Value::Stream(x) => x.check().unwrap(),
                    Value::Str(_) => {}
                }
            }
        }
    }
}

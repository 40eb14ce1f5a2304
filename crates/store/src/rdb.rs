//! Reader of Redis's own DUMP payloads, so that RESTORE takes what `redis-server` DUMPs (a
//! migration path, and what Redis's test suite feeds it).
//!
//! A Redis payload has the same outer shape as Lattice's (type byte, body, RDB version u16 LE,
//! CRC-64/Jones u64 LE of everything before it); [`crate::dump::restore`] tells the two apart
//! by the version and hands the type and body of RDB versions 2..=[`MAX_RDB_VERSION`] here.
//! The body is one object in RDB encoding. What is read, by type byte:
//!
//! | type | Redis name                | what Lattice builds                          |
//! |------|---------------------------|----------------------------------------------|
//! | 0    | STRING                    | string                                       |
//! | 1    | LIST (linked list)        | list                                         |
//! | 2    | SET (hashtable)           | set, hashtable                               |
//! | 3    | ZSET (scores as text)     | sorted set, skiplist                         |
//! | 4    | HASH (hashtable)          | hash, hashtable                              |
//! | 5    | ZSET_2 (binary scores)    | sorted set, skiplist                         |
//! | 9    | HASH_ZIPMAP (Redis < 2.6)| hash, listpack                               |
//! | 10   | LIST_ZIPLIST              | list                                         |
//! | 11   | SET_INTSET                | set, intset                                  |
//! | 12   | ZSET_ZIPLIST              | sorted set, listpack                         |
//! | 13   | HASH_ZIPLIST              | hash, listpack                               |
//! | 14   | LIST_QUICKLIST (ziplists) | list                                         |
//! | 15   | STREAM_LISTPACKS (≤ 6.2)  | stream (counters derived as Redis 7.0 does)  |
//! | 16   | HASH_LISTPACK             | hash, listpack                               |
//! | 17   | ZSET_LISTPACK             | sorted set, listpack                         |
//! | 18   | LIST_QUICKLIST_2          | list                                         |
//! | 19   | STREAM_LISTPACKS_2 (7.0)  | stream                                       |
//!
//! Everything else (modules, 7.2's types 20 and 21) is "Bad data
//! format", as it is in Redis 7.0 for the types it does not know.
//!
//! Contract: never panics, and allocates no more than a small multiple of the input (every
//! length is checked against what remains; an LZF string's stated size against the most its
//! compressed bytes can expand to). Unlike Redis's default (which checks only the outer
//! shape unless `sanitize-dump-payload` is on), every inner structure is checked in full:
//! listpack and ziplist headers, entry back-lengths and terminators, sorted unique intsets,
//! duplicate members or fields, NaN scores, stream IDs in ascending order, entry and deleted
//! counts of each stream node, pending entries owned by exactly one consumer. Lattice keeps
//! invariants on its values that a half-checked one would break later, far from its cause.

use std::borrow::Cow;

use crate::dump::DumpError;
use crate::hash::Limits;
use crate::stream::{Consumer, Fields, Group, Pending, StreamId};
use crate::value::parse_canonical_i64;
use crate::{Hash, List, Set, Str, Stream, Value, ZSet};

/// The newest RDB version Redis 7.0 writes and accepts in a payload.
pub const MAX_RDB_VERSION: u16 = 10;

const STRING: u8 = 0;
const LIST: u8 = 1;
const SET: u8 = 2;
const ZSET: u8 = 3;
const HASH: u8 = 4;
const ZSET_2: u8 = 5;
const HASH_ZIPMAP: u8 = 9;
const LIST_ZIPLIST: u8 = 10;
const SET_INTSET: u8 = 11;
const ZSET_ZIPLIST: u8 = 12;
const HASH_ZIPLIST: u8 = 13;
const LIST_QUICKLIST: u8 = 14;
const STREAM_LISTPACKS: u8 = 15;
const HASH_LISTPACK: u8 = 16;
const ZSET_LISTPACK: u8 = 17;
const LIST_QUICKLIST_2: u8 = 18;
const STREAM_LISTPACKS_2: u8 = 19;

/// Quicklist 2 node containers: one element stored as is, or a listpack of elements.
const QUICKLIST_PLAIN: u64 = 1;
const QUICKLIST_PACKED: u64 = 2;

/// Stream entry flags inside a node's listpack.
const STREAM_DELETED: i64 = 1;
const STREAM_SAMEFIELDS: i64 = 2;

type Res<T> = Result<T, DumpError>;

fn bad<T>() -> Res<T> {
    Err(DumpError::BadFormat)
}

fn ensure(ok: bool) -> Res<()> {
    if ok {
        Ok(())
    } else {
        bad()
    }
}

/// Decodes the type byte and body of a Redis payload (footer already checked and removed).
pub fn restore(body: &[u8]) -> Result<Value, DumpError> {
    let mut r = Rdb { buf: body };
    let value = match r.u8()? {
        STRING => Value::Str(Str::from_bytes(&r.string()?)),
        LIST => {
            let mut l = List::new();
            for _ in 0..r.count()? {
                l.push(crate::list::End::Tail, &r.string()?);
            }
            Value::List(Box::new(l))
        }
        SET => {
            let mut s = Set::new();
            for _ in 0..r.count()? {
                // A limit of 0 entries makes the very first insert leave the intset form.
                ensure(s.insert(&r.string()?, 0))?;
            }
            Value::Set(Box::new(s))
        }
        t @ (ZSET | ZSET_2) => {
            let mut z = ZSet::with_hint(1, 0, 0, 0);
            for _ in 0..r.count()? {
                let m = r.string()?;
                let s = if t == ZSET {
                    r.text_score()?
                } else {
                    r.binary_score()?
                };
                ensure(z.insert(&m, s).is_none())?;
            }
            Value::ZSet(Box::new(z))
        }
        HASH => {
            let table = Limits {
                max_entries: 0,
                max_value: usize::MAX,
            };
            let mut h = Hash::new();
            for _ in 0..r.count()? {
                let (f, v) = (r.string()?, r.string()?);
                ensure(h.insert(&f, &v, table))?;
            }
            Value::Hash(Box::new(h))
        }
        SET_INTSET => Value::Set(Box::new(intset(&r.string()?)?)),
        LIST_ZIPLIST => {
            let mut l = List::new();
            push_all(&mut l, &ziplist(&r.string()?)?)?;
            ensure(!l.is_empty())?;
            Value::List(Box::new(l))
        }
        t @ (LIST_QUICKLIST | LIST_QUICKLIST_2) => Value::List(Box::new(quicklist(&mut r, t)?)),
        ZSET_ZIPLIST => Value::ZSet(Box::new(zset_pairs(&ziplist(&r.string()?)?)?)),
        ZSET_LISTPACK => Value::ZSet(Box::new(zset_pairs(&listpack(&r.string()?)?)?)),
        HASH_ZIPMAP => Value::Hash(Box::new(hash_pairs(&zipmap(&r.string()?)?)?)),
        HASH_ZIPLIST => Value::Hash(Box::new(hash_pairs(&ziplist(&r.string()?)?)?)),
        HASH_LISTPACK => Value::Hash(Box::new(hash_pairs(&listpack(&r.string()?)?)?)),
        t @ (STREAM_LISTPACKS | STREAM_LISTPACKS_2) => {
            Value::Stream(Box::new(stream(&mut r, t == STREAM_LISTPACKS_2)?))
        }
        _ => return bad(),
    };
    ensure(r.buf.is_empty())?;
    Ok(value)
}

// ---------------------------------------------------------------------------------------------
// The RDB stream of bytes: lengths, strings, times, raw stream IDs

/// A cursor over the body; every read fails with `BadFormat` rather than running off the end.
struct Rdb<'a> {
    buf: &'a [u8],
}

/// What a length prefix announces: a plain length, or (top bits 11) a special encoding.
enum Len {
    Plain(u64),
    Encoded(u8),
}

const ENC_INT8: u8 = 0;
const ENC_INT16: u8 = 1;
const ENC_INT32: u8 = 2;
const ENC_LZF: u8 = 3;

impl<'a> Rdb<'a> {
    fn take(&mut self, n: usize) -> Res<&'a [u8]> {
        if n > self.buf.len() {
            return bad();
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Res<u8> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Res<[u8; N]> {
        self.take(N)?.try_into().map_err(|_| DumpError::BadFormat)
    }

    /// A length prefix: 00 + 6 bits, 01 + 14 bits (big-endian), 0x80 + u32 BE, 0x81 + u64
    /// BE, or 11 + a 6-bit encoding number.
    fn len_or_encoding(&mut self) -> Res<Len> {
        let b = self.u8()?;
        Ok(match b >> 6 {
            0 => Len::Plain((b & 0x3f) as u64),
            1 => Len::Plain((((b & 0x3f) as u64) << 8) | self.u8()? as u64),
            2 => match b {
                0x80 => Len::Plain(u32::from_be_bytes(self.array()?) as u64),
                0x81 => Len::Plain(u64::from_be_bytes(self.array()?)),
                _ => return bad(),
            },
            _ => Len::Encoded(b & 0x3f),
        })
    }

    fn len(&mut self) -> Res<u64> {
        match self.len_or_encoding()? {
            Len::Plain(n) => Ok(n),
            Len::Encoded(_) => bad(),
        }
    }

    /// A length that must fit in what is left (each counted thing takes at least one byte).
    fn size(&mut self) -> Res<usize> {
        let n = self.len()?;
        ensure(n <= self.buf.len() as u64)?;
        Ok(n as usize)
    }

    /// A collection's element count: positive (Redis refuses empty keys) and within reach.
    fn count(&mut self) -> Res<usize> {
        let n = self.size()?;
        ensure(n > 0)?;
        Ok(n)
    }

    /// A string: raw bytes, a small integer (its decimal text), or LZF-compressed bytes.
    fn string(&mut self) -> Res<Cow<'a, [u8]>> {
        let n = match self.len_or_encoding()? {
            Len::Plain(n) => n,
            Len::Encoded(ENC_INT8) => return Ok(decimal(self.u8()? as i8 as i64)),
            Len::Encoded(ENC_INT16) => {
                return Ok(decimal(i16::from_le_bytes(self.array()?) as i64))
            }
            Len::Encoded(ENC_INT32) => {
                return Ok(decimal(i32::from_le_bytes(self.array()?) as i64))
            }
            Len::Encoded(ENC_LZF) => {
                let clen = self.len()?;
                let len = self.len()?;
                ensure(clen <= self.buf.len() as u64)?;
                let packed = self.take(clen as usize)?;
                return Ok(Cow::Owned(lzf_decompress(packed, len)?));
            }
            Len::Encoded(_) => return bad(),
        };
        ensure(n <= self.buf.len() as u64)?;
        Ok(Cow::Borrowed(self.take(n as usize)?))
    }

    /// A time in milliseconds: i64 LE (RDB ≥ 9; older versions wrote the host's order, which
    /// was little-endian on every machine Redis shipped payloads from). A negative time (no
    /// real clock gives one) is taken as 0.
    fn ms_time(&mut self) -> Res<u64> {
        Ok(i64::from_le_bytes(self.array()?).max(0) as u64)
    }

    /// A stream ID as 16 raw bytes: ms then seq, each u64 big-endian (so IDs sort as bytes).
    fn raw_id(&mut self) -> Res<StreamId> {
        id_from_be(self.take(16)?)
    }

    /// A stream ID as two lengths (ms, seq).
    fn len_id(&mut self) -> Res<StreamId> {
        Ok(StreamId::new(self.len()?, self.len()?))
    }

    /// Score of the old ZSET type: a length byte, then that many bytes of text; lengths 253,
    /// 254 and 255 stand for NaN, +inf and -inf.
    fn text_score(&mut self) -> Res<f64> {
        match self.u8()? {
            253 => bad(),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => parse_score(self.take(n as usize)?),
        }
    }

    fn binary_score(&mut self) -> Res<f64> {
        let s = f64::from_le_bytes(self.array()?);
        ensure(!s.is_nan())?;
        Ok(s)
    }
}

fn decimal(n: i64) -> Cow<'static, [u8]> {
    Cow::Owned(n.to_string().into_bytes())
}

fn id_from_be(b: &[u8]) -> Res<StreamId> {
    ensure(b.len() == 16)?;
    let (ms, seq) = b.split_at(8);
    let ms = u64::from_be_bytes(ms.try_into().map_err(|_| DumpError::BadFormat)?);
    let seq = u64::from_be_bytes(seq.try_into().map_err(|_| DumpError::BadFormat)?);
    Ok(StreamId::new(ms, seq))
}

/// A score written as text ("inf", "-inf", "3.5", "1e300"...); NaN and junk are refused.
fn parse_score(text: &[u8]) -> Res<f64> {
    let s = std::str::from_utf8(text).map_err(|_| DumpError::BadFormat)?;
    let v: f64 = s.parse().map_err(|_| DumpError::BadFormat)?;
    ensure(!v.is_nan())?;
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// LZF

/// The most output one input byte of LZF can stand for: a 3-byte back reference copies at
/// most 7 + 255 + 2 = 264 bytes.
const LZF_MAX_RATIO: u64 = 88;

/// Decompresses LZF data into exactly `len` bytes. The format is a sequence of runs, each
/// opened by a control byte `c`: below 32 it is a literal run of `c + 1` bytes that follow;
/// otherwise a back reference of length `(c >> 5) + 2` (when `c >> 5` is 7, one more byte
/// adds to the length) at distance `((c & 31) << 8) + next byte + 1` behind the output's end,
/// copied byte by byte so that it may overlap what it produces.
fn lzf_decompress(packed: &[u8], len: u64) -> Res<Vec<u8>> {
    ensure(len > 0 && !packed.is_empty())?;
    ensure(len <= (packed.len() as u64).saturating_mul(LZF_MAX_RATIO))?;
    let len = len as usize;
    let mut out = Vec::with_capacity(len);
    let mut i = 0;
    while i < packed.len() {
        let c = packed[i] as usize;
        i += 1;
        if c < 32 {
            let run = c + 1;
            ensure(i + run <= packed.len() && out.len() + run <= len)?;
            out.extend_from_slice(&packed[i..i + run]);
            i += run;
        } else {
            let mut run = c >> 5;
            if run == 7 {
                run += *packed.get(i).ok_or(DumpError::BadFormat)? as usize;
                i += 1;
            }
            run += 2;
            let low = *packed.get(i).ok_or(DumpError::BadFormat)? as usize;
            i += 1;
            let back = ((c & 0x1f) << 8) + low + 1;
            ensure(back <= out.len() && out.len() + run <= len)?;
            let from = out.len() - back;
            for k in 0..run {
                let b = out[from + k];
                out.push(b);
            }
        }
    }
    ensure(out.len() == len)?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Packed containers: listpack, ziplist, intset

/// One element of a listpack or ziplist: packed as an integer or as bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Elem<'a> {
    Int(i64),
    Bytes(&'a [u8]),
}

impl<'a> Elem<'a> {
    /// The element as a value's bytes (integers as their decimal text).
    fn bytes(self) -> Cow<'a, [u8]> {
        match self {
            Elem::Int(n) => decimal(n),
            Elem::Bytes(b) => Cow::Borrowed(b),
        }
    }

    /// The element as an integer (a stream node's counters and ID deltas).
    fn int(self) -> Res<i64> {
        match self {
            Elem::Int(n) => Ok(n),
            Elem::Bytes(b) => parse_canonical_i64(b).ok_or(DumpError::BadFormat),
        }
    }

    fn score(self) -> Res<f64> {
        match self {
            Elem::Int(n) => Ok(n as f64),
            Elem::Bytes(b) => parse_score(b),
        }
    }
}

/// Sign-extends the low `bits` bits of `v`.
fn signed(v: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((v << shift) as i64) >> shift
}

fn le_uint(b: &[u8]) -> u64 {
    b.iter().rev().fold(0, |acc, &x| (acc << 8) | x as u64)
}

/// Sizes a listpack back-length of `n` may take. Seven bits a byte; Redis moves to the next
/// size one value early (at 2^14 - 1, 2^21 - 1, 2^28 - 1), and the exact size is accepted
/// too, so that a writer choosing either way is read.
fn backlen_sizes(n: usize) -> [usize; 2] {
    let redis = match n {
        0..=127 => 1,
        128..=16_382 => 2,
        16_383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    };
    let exact = match n {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        2_097_152..=268_435_455 => 4,
        _ => 5,
    };
    [redis, exact]
}

/// True if `b` is the back-length `n` in `b.len()` bytes: groups of seven bits, most
/// significant first, the high bit set on every byte but the first (it is read right to
/// left, and that bit says another byte follows).
fn is_backlen(b: &[u8], n: usize) -> bool {
    let size = b.len();
    (size == 5 || n >> (7 * size) == 0)
        && b.iter().enumerate().all(|(i, &x)| {
            let group = ((n as u64) >> (7 * (size - 1 - i))) as u8 & 0x7f;
            x == group | if i > 0 { 0x80 } else { 0 }
        })
}

/// The elements of a listpack: u32 LE total bytes, u16 LE element count (65535: too many to
/// count), the elements, then 0xFF. Each element is an encoding byte with its data, then its
/// back-length (the size of encoding and data).
fn listpack(lp: &[u8]) -> Res<Vec<Elem<'_>>> {
    ensure(lp.len() >= 7)?;
    ensure(le_uint(&lp[..4]) == lp.len() as u64)?;
    let stated = le_uint(&lp[4..6]) as usize;
    let end = lp.len() - 1;
    ensure(lp[end] == 0xff)?;
    let mut out = Vec::new();
    let mut at = 6;
    while at < end {
        let start = at;
        let e = lp[at];
        let (data_at, data_len, elem_int): (usize, usize, Option<u32>) = match e {
            0x00..=0x7f => (at, 0, None),
            0x80..=0xbf => (at + 1, (e & 0x3f) as usize, None),
            0xc0..=0xdf => (at, 2, Some(13)),
            0xe0..=0xef => {
                let n = (((e & 0x0f) as usize) << 8)
                    | *lp.get(at + 1).ok_or(DumpError::BadFormat)? as usize;
                (at + 2, n, None)
            }
            0xf0 => {
                ensure(at + 5 <= end)?;
                (at + 5, le_uint(&lp[at + 1..at + 5]) as usize, None)
            }
            0xf1 => (at + 1, 2, Some(16)),
            0xf2 => (at + 1, 3, Some(24)),
            0xf3 => (at + 1, 4, Some(32)),
            0xf4 => (at + 1, 8, Some(64)),
            _ => return bad(),
        };
        let data_end = data_at.checked_add(data_len).ok_or(DumpError::BadFormat)?;
        ensure(data_end <= end)?;
        let elem = match (e, elem_int) {
            (0x00..=0x7f, _) => {
                at += 1;
                Elem::Int(e as i64)
            }
            (0xc0..=0xdf, _) => {
                at = data_end;
                Elem::Int(signed(le_uint(&[lp[start + 1], e & 0x1f]), 13))
            }
            (_, Some(bits)) => {
                at = data_end;
                Elem::Int(signed(le_uint(&lp[data_at..data_end]), bits))
            }
            _ => {
                at = data_end;
                Elem::Bytes(&lp[data_at..data_end])
            }
        };
        let entry_len = at - start;
        let size = backlen_sizes(entry_len)
            .into_iter()
            .find(|&k| at + k <= end && is_backlen(&lp[at..at + k], entry_len))
            .ok_or(DumpError::BadFormat)?;
        at += size;
        out.push(elem);
    }
    ensure(stated == 0xffff || stated == out.len())?;
    Ok(out)
}

/// The elements of a ziplist (Redis < 7.0): u32 LE total bytes, u32 LE offset of the last
/// entry, u16 LE count (65535: too many to count), the entries, then 0xFF. An entry is the
/// previous entry's size (one byte, or 0xFE and a u32 LE), an encoding with its data.
fn ziplist(zl: &[u8]) -> Res<Vec<Elem<'_>>> {
    ensure(zl.len() >= 11)?;
    ensure(le_uint(&zl[..4]) == zl.len() as u64)?;
    let tail = le_uint(&zl[4..8]) as usize;
    let stated = le_uint(&zl[8..10]) as usize;
    let end = zl.len() - 1;
    ensure(zl[end] == 0xff)?;
    let mut out = Vec::new();
    let mut at = 10;
    let mut prev_len = 0usize;
    let mut last_at = 10;
    while at < end {
        let start = at;
        let byte = |i: usize| zl.get(i).copied().ok_or(DumpError::BadFormat);
        let stated_prev = match byte(at)? {
            0xfe => {
                ensure(at + 5 <= end)?;
                at += 5;
                le_uint(&zl[at - 4..at]) as usize
            }
            0xff => return bad(),
            n => {
                at += 1;
                n as usize
            }
        };
        ensure(stated_prev == prev_len)?;
        let e = byte(at)?;
        let (data_at, data_len, int_bits) = match e {
            0x00..=0x3f => (at + 1, (e & 0x3f) as usize, None),
            0x40..=0x7f => (
                at + 2,
                (((e & 0x3f) as usize) << 8) | byte(at + 1)? as usize,
                None,
            ),
            0x80 => {
                ensure(at + 5 <= end)?;
                let n = u32::from_be_bytes([zl[at + 1], zl[at + 2], zl[at + 3], zl[at + 4]]);
                (at + 5, n as usize, None)
            }
            0xc0 => (at + 1, 2, Some(16)),
            0xd0 => (at + 1, 4, Some(32)),
            0xe0 => (at + 1, 8, Some(64)),
            0xf0 => (at + 1, 3, Some(24)),
            0xfe => (at + 1, 1, Some(8)),
            0xf1..=0xfd => (at + 1, 0, None),
            _ => return bad(),
        };
        let data_end = data_at.checked_add(data_len).ok_or(DumpError::BadFormat)?;
        ensure(data_end <= end)?;
        let elem = match (e, int_bits) {
            (0xf1..=0xfd, _) => Elem::Int((e & 0x0f) as i64 - 1),
            (_, Some(bits)) => Elem::Int(signed(le_uint(&zl[data_at..data_end]), bits)),
            _ => Elem::Bytes(&zl[data_at..data_end]),
        };
        out.push(elem);
        last_at = start;
        prev_len = data_end - start;
        at = data_end;
    }
    ensure(!out.is_empty() || tail == 10)?;
    ensure(out.is_empty() || tail == last_at)?;
    ensure(stated == 0xffff || stated == out.len())?;
    Ok(out)
}

/// The fields and values of a zipmap (hashes of Redis < 2.6): a count byte (254 and up:
/// too many to count), then entries of length, field, length, a free-space byte, value and
/// that many unused bytes, then 0xFF. A length is one byte below 254, or 254 and a u32 LE
/// (only for lengths of 254 and more).
fn zipmap(zm: &[u8]) -> Res<Vec<Elem<'_>>> {
    let mut r = Rdb { buf: zm };
    let stated = r.u8()? as usize;
    let mut out = Vec::new();
    let len = |r: &mut Rdb| -> Res<Option<usize>> {
        Ok(match r.u8()? {
            0xff => None,
            0xfe => {
                // The long form for a length the short one holds is refused, as Redis 7.0.15
                // refuses it (a corrupt payload of its suite).
                let n = u32::from_le_bytes(r.array()?) as usize;
                ensure(n >= 0xfe)?;
                Some(n)
            }
            n => Some(n as usize),
        })
    };
    while let Some(n) = len(&mut r)? {
        out.push(Elem::Bytes(r.take(n)?));
        let n = len(&mut r)?.ok_or(DumpError::BadFormat)?;
        let free = r.u8()? as usize;
        out.push(Elem::Bytes(r.take(n)?));
        r.take(free)?;
    }
    ensure(r.buf.is_empty() && (stated >= 254 || stated * 2 == out.len()))?;
    Ok(out)
}

/// An intset: u32 LE width (2, 4 or 8 bytes), u32 LE count, the integers (LE, strictly
/// ascending).
fn intset(blob: &[u8]) -> Res<Set> {
    ensure(blob.len() >= 8)?;
    let width = le_uint(&blob[..4]) as usize;
    let n = le_uint(&blob[4..8]) as usize;
    ensure(matches!(width, 2 | 4 | 8) && n > 0)?;
    ensure(n.checked_mul(width) == Some(blob.len() - 8))?;
    let mut s = Set::new();
    let mut last: Option<i64> = None;
    for chunk in blob[8..].chunks_exact(width) {
        let v = signed(le_uint(chunk), width as u32 * 8);
        ensure(last.is_none_or(|l| l < v))?;
        last = Some(v);
        s.insert(v.to_string().as_bytes(), usize::MAX);
    }
    Ok(s)
}

fn push_all(l: &mut List, elems: &[Elem]) -> Res<()> {
    for e in elems {
        l.push(crate::list::End::Tail, &e.bytes());
    }
    Ok(())
}

/// A quicklist: a count of nodes, each a packed container (a ziplist for type 14; for type
/// 18 a container kind first: a listpack, or one element as is). Empty nodes are skipped as
/// Redis skips them; an empty list is refused.
fn quicklist(r: &mut Rdb, t: u8) -> Res<List> {
    let mut l = List::new();
    for _ in 0..r.count()? {
        let kind = if t == LIST_QUICKLIST_2 {
            r.len()?
        } else {
            QUICKLIST_PACKED
        };
        let blob = r.string()?;
        // A node of no bytes is refused as Redis refuses it (even a plain one: a plain node
        // holds an element too big for a listpack, never an empty one).
        ensure(!blob.is_empty())?;
        match kind {
            QUICKLIST_PLAIN => l.push(crate::list::End::Tail, &blob),
            QUICKLIST_PACKED if t == LIST_QUICKLIST_2 => push_all(&mut l, &listpack(&blob)?)?,
            QUICKLIST_PACKED => push_all(&mut l, &ziplist(&blob)?)?,
            _ => return bad(),
        }
    }
    ensure(!l.is_empty())?;
    Ok(l)
}

/// The elements of a packed hash or sorted set two by two: there must be some, and pairs.
fn pairs<'e, 'a>(elems: &'e [Elem<'a>]) -> Res<std::slice::ChunksExact<'e, Elem<'a>>> {
    ensure(!elems.is_empty() && elems.len().is_multiple_of(2))?;
    Ok(elems.chunks_exact(2))
}

/// A packed sorted set: member, score, member, score...
fn zset_pairs(elems: &[Elem]) -> Res<ZSet> {
    let mut z = ZSet::new();
    let limits = Limits::default();
    for pair in pairs(elems)? {
        ensure(z.insert(&pair[0].bytes(), pair[1].score()?).is_none())?;
        // Bounds the quadratic cost of a long packed set; RESTORE fits the encoding after.
        z.convert_if_needed(limits.max_entries, usize::MAX);
    }
    Ok(z)
}

/// A packed hash: field, value, field, value...
fn hash_pairs(elems: &[Elem]) -> Res<Hash> {
    let mut h = Hash::new();
    let limits = Limits {
        max_value: usize::MAX,
        ..Limits::default()
    };
    for pair in pairs(elems)? {
        ensure(h.insert(&pair[0].bytes(), &pair[1].bytes(), limits))?;
    }
    Ok(h)
}

// ---------------------------------------------------------------------------------------------
// Streams

/// A stream (types 15 and 19):
///
/// ```text
/// len nodes, nodes × (string master ID: 16 bytes BE, string listpack)
/// len length, len last ms, len last seq
/// type 19 only: len first ms, first seq, max-deleted ms, max-deleted seq, len entries added
/// len groups, groups × (string name, len last ms, len last seq,
///     type 19 only: len entries read (u64::MAX: unknown),
///     len pending, pending × (raw ID, ms delivery time, len delivery count),
///     len consumers, consumers × (string name, ms seen time, len owned, owned × raw ID))
/// ```
///
/// A node's listpack starts with its master entry (live count, deleted count, field count,
/// the fields, 0) and then holds entries of: flags, ms and seq deltas from the master ID,
/// either the values of the master fields (flag SAMEFIELDS) or a field count and the pairs,
/// and finally the entry's own element count. Deleted entries (flag DELETED) stay in place.
///
/// Type 15 (Redis ≤ 6.2) has no max-deleted ID, entries-added counter nor a group's entries
/// read: as Redis 7.0 does, the first two become 0-0 and the stream's length, and each group's
/// entries read is estimated from its last delivered ID.
fn stream(r: &mut Rdb, v2: bool) -> Res<Stream> {
    let mut st = Stream::new();
    for _ in 0..r.size()? {
        let master = id_from_be(&r.string()?)?;
        let blob = r.string()?;
        stream_node(&mut st, master, &listpack(&blob)?)?;
    }
    ensure(r.len()? == st.len() as u64)?;
    let last_id = r.len_id()?;
    ensure(st.last_entry().is_none_or(|(id, _)| id <= last_id))?;
    let (max_deleted, added) = if v2 {
        let _first = r.len_id()?; // derived from the entries instead
        (r.len_id()?, r.len()?)
    } else {
        (StreamId::MIN, st.len() as u64)
    };
    st.set_last_id(last_id, Some(added), Some(max_deleted));

    for _ in 0..r.size()? {
        let name = r.string()?.into_owned();
        let last_id = r.len_id()?;
        let entries_read = if v2 {
            Some(r.len()?).filter(|&n| n != u64::MAX)
        } else {
            st.estimate_entries_read(last_id)
        };
        let mut g = Group {
            last_id,
            entries_read,
            ..Group::default()
        };
        let mut unowned = std::collections::BTreeMap::new();
        for _ in 0..r.size()? {
            let id = r.raw_id()?;
            let time = r.ms_time()?;
            let count = r.len()?;
            ensure(unowned.insert(id, (time, count)).is_none())?;
        }
        for _ in 0..r.size()? {
            let cname = r.string()?.into_owned();
            let seen_time_ms = r.ms_time()?;
            let mut c = Consumer {
                seen_time_ms,
                pel: Default::default(),
            };
            for _ in 0..r.size()? {
                let id = r.raw_id()?;
                let (delivery_time_ms, delivery_count) =
                    unowned.remove(&id).ok_or(DumpError::BadFormat)?;
                c.pel.insert(id);
                g.pel.insert(
                    id,
                    Pending {
                        consumer: cname.clone(),
                        delivery_time_ms,
                        delivery_count,
                    },
                );
            }
            ensure(g.consumers.insert(cname, c).is_none())?;
        }
        // Every pending entry has exactly one owner.
        ensure(unowned.is_empty())?;
        ensure(st.insert_group_raw(name, g))?;
    }
    Ok(st)
}

/// Appends the live entries of one node's listpack to `st`, checking its counts.
fn stream_node(st: &mut Stream, master: StreamId, elems: &[Elem]) -> Res<()> {
    let mut it = elems.iter().copied();
    let mut next = || it.next().ok_or(DumpError::BadFormat);
    let live = next()?.int()?;
    let deleted = next()?.int()?;
    let nmaster = next()?.int()?;
    ensure(live >= 0 && deleted >= 0 && live.saturating_add(deleted) > 0)?;
    ensure(nmaster >= 0 && nmaster as usize <= elems.len())?;
    let master_fields: Vec<Elem> = (0..nmaster).map(|_| next()).collect::<Res<_>>()?;
    ensure(next()?.int()? == 0)?;
    let (mut seen_live, mut seen_deleted) = (0i64, 0i64);
    let mut at = 4 + master_fields.len();
    while at < elems.len() {
        let next = |n: &mut usize| -> Res<Elem> {
            let e = elems.get(*n).copied().ok_or(DumpError::BadFormat)?;
            *n += 1;
            Ok(e)
        };
        let start = at;
        let flags = next(&mut at)?.int()?;
        ensure(flags & !(STREAM_DELETED | STREAM_SAMEFIELDS) == 0)?;
        let ms = master.ms.wrapping_add(next(&mut at)?.int()? as u64);
        let seq = master.seq.wrapping_add(next(&mut at)?.int()? as u64);
        let mut fields: Fields = Vec::new();
        if flags & STREAM_SAMEFIELDS != 0 {
            for f in &master_fields {
                fields.push((f.bytes().into_owned(), next(&mut at)?.bytes().into_owned()));
            }
        } else {
            let nf = next(&mut at)?.int()?;
            ensure(nf >= 0 && nf as usize <= elems.len())?;
            for _ in 0..nf {
                let f = next(&mut at)?.bytes().into_owned();
                fields.push((f, next(&mut at)?.bytes().into_owned()));
            }
        }
        // The entry's own element count, which lets Redis walk the listpack backwards.
        let count = next(&mut at)?.int()?;
        ensure(count == (at - start - 1) as i64)?;
        ensure(!fields.is_empty())?;
        if flags & STREAM_DELETED != 0 {
            seen_deleted += 1;
        } else {
            seen_live += 1;
            ensure(st.insert_raw(StreamId::new(ms, seq), fields))?;
        }
    }
    ensure(seen_live == live && seen_deleted == deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::{crc64, restore as restore_payload};
    use proptest::prelude::*;

    /// Wraps a type and body in Redis's footer for RDB version `ver`.
    fn seal(body: &[u8], ver: u16) -> Vec<u8> {
        let mut out = body.to_vec();
        out.extend_from_slice(&ver.to_le_bytes());
        let crc = crc64(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The payload of Redis's test "Loading from legacy (Redis <= v6.2.x, rdb_ver < 10)
    /// persistence" (unit/type/stream-cgroups), DUMPed by Redis 6.2 after: XADD x 1-0 .. 6-0
    /// data a..f, XDEL x 3-0, XGROUP CREATE x g1 0, XGROUP CREATE x g2 0, XREADGROUP GROUP g1
    /// c11 COUNT 4 STREAMS x >, XTRIM x MAXLEN = 2. Its one node is an LZF-compressed listpack.
    const LEGACY_STREAM: &[u8] = b"\x0F\x01\x10\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\xC3\x40\x4A\x40\x57\x16\x57\x00\x00\x00\x23\x00\x02\x01\x04\x01\x01\x01\x84\x64\x61\x74\x61\x05\x00\x01\x03\x01\x00\x20\x01\x03\x81\x61\x02\x04\x20\x0A\x00\x01\x40\x0A\x00\x62\x60\x0A\x00\x02\x40\x0A\x00\x63\x60\x0A\x40\x22\x01\x81\x64\x20\x0A\x40\x39\x20\x0A\x00\x65\x60\x0A\x00\x05\x40\x0A\x00\x66\x20\x0A\x00\xFF\x02\x06\x00\x02\x02\x67\x31\x05\x00\x04\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x01\x03\x63\x31\x31\x3E\xF7\x83\x43\x7A\x01\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x02\x67\x32\x00\x00\x00\x00\x09\x00\x3D\x52\xEF\x68\x67\x52\x1D\xFA";

    /// Payloads DUMPed by redis-server 7.0.15 (RDB version 10), one per encoding it writes
    /// for small values (the large ones, hashtable hashes and skiplist sets, are checked
    /// against a running redis-server: see bench/results/compat.md).
    const S_RAW: &[u8] = b"\x00\x0b\x68\x65\x6c\x6c\x6f\x20\x77\x6f\x72\x6c\x64\x0a\x00\x0b\xfc\x49\xb9\xa6\xc7\xa0\x34";
    const S_INT8: &[u8] = b"\x00\xc0\xf4\x0a\x00\x44\x74\xce\xd7\x5a\xa7\xef\x82";
    const S_INT16: &[u8] = b"\x00\xc1\xe8\x03\x0a\x00\x89\xd1\x47\x8e\xba\xc4\xb7\x64";
    const S_INT32: &[u8] = b"\x00\xc2\x60\x79\xfe\xff\x0a\x00\xa1\xca\x84\x70\xcc\x21\x6d\x9d";
    const S_BIG: &[u8] = b"\x00\x0e\x31\x32\x33\x34\x35\x36\x37\x38\x39\x30\x31\x32\x33\x34\x0a\x00\xaf\xcb\x8c\x7b\x76\xa0\x8b\x6a";
    const S_LZF: &[u8] = b"\x00\xc3\x0b\x40\xb4\x03\x61\x62\x63\x61\xe0\xa5\x02\x01\x62\x63\x0a\x00\x2b\x5b\x6b\xac\x6c\x26\xc3\x6d";
    const L_SMALL: &[u8] = b"\x12\x01\x02\xc3\x22\x40\x62\x10\x62\x00\x00\x00\x05\x00\x81\x61\x02\x01\x01\xde\xd4\x02\xe0\x46\x78\xe0\x3c\x00\x06\x48\xf4\x14\x1a\x99\xbe\x1c\x20\x5b\x01\x09\xff\x0a\x00\x2e\xaa\xf8\x86\xa1\xce\xba\x67";
    const L_NODES: &[u8] = b"\x12\x03\x02\x0f\x0f\x00\x00\x00\x04\x00\x00\x01\x01\x01\x02\x01\x03\x01\xff\x02\x0f\x0f\x00\x00\x00\x04\x00\x04\x01\x05\x01\x06\x01\x07\x01\xff\x02\x0b\x0b\x00\x00\x00\x02\x00\x08\x01\x09\x01\xff\x0a\x00\x9e\x5d\xd0\x2a\xa9\xff\xd3\x44";
    const L_PLAIN: &[u8] = b"\x12\x02\x02\xc3\x40\xf6\x80\x00\x00\x4e\x2f\x07\x2f\x4e\x00\x00\x01\x00\xf0\x20\x20\x06\x00\x79\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xff\x00\xe0\xbe\x00\x03\x01\x9c\xa5\xff\x02\x0e\x0e\x00\x00\x00\x01\x00\x85\x73\x6d\x61\x6c\x6c\x06\xff\x0a\x00\x11\xea\x02\x47\x7d\x6c\x0e\x8c";
    const H_SMALL: &[u8] = b"\x10\x1c\x1c\x00\x00\x00\x06\x00\x82\x66\x31\x03\x82\x76\x31\x03\x81\x6e\x02\x07\x01\x83\x6e\x65\x67\x04\xdf\xfb\x02\xff\x0a\x00\x65\xe3\x11\xf5\x14\x1c\xbc\xf3";
    const I_SET: &[u8] = b"\x0b\x18\x04\x00\x00\x00\x04\x00\x00\x00\xf9\xff\xff\xff\x03\x00\x00\x00\x05\x00\x00\x00\xa0\x86\x01\x00\x0a\x00\xf0\x3d\xbf\x36\xfb\x0b\xfc\x7d";
    const I_SET64: &[u8] = b"\x0b\x18\x08\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\xff\xe3\x0b\x54\x02\x00\x00\x00\x0a\x00\xa4\x3b\x5e\x34\xab\xa7\x29\xae";
    const T_SET: &[u8] =
        b"\x02\x03\x01\x61\x01\x62\xc0\x03\x0a\x00\x34\x1d\x64\x79\xb0\x7d\x48\xe5";
    const Z_SMALL: &[u8] = b"\x11\x22\x22\x00\x00\x00\x08\x00\x81\x62\x02\xdf\xfe\x02\x81\x61\x02\x83\x31\x2e\x35\x04\x81\x64\x02\x03\x01\x81\x63\x02\x83\x69\x6e\x66\x04\xff\x0a\x00\x59\xa3\xd6\x54\xd8\xf7\xee\x52";
    const X7: &[u8] = b"\x13\x01\x10\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x40\x59\x59\x00\x00\x00\x1f\x00\x03\x01\x01\x01\x02\x01\x81\x66\x02\x81\x67\x02\x00\x01\x02\x01\x00\x01\x00\x01\x81\x76\x02\x81\x77\x02\x05\x01\x03\x01\x00\x01\x01\x01\x82\x76\x32\x03\x82\x77\x32\x03\x05\x01\x00\x01\x01\x01\xdf\xff\x02\x01\x01\x85\x6f\x74\x68\x65\x72\x06\x81\x7a\x02\x06\x01\x02\x01\x02\x01\xdf\xff\x02\x82\x76\x33\x03\x82\x77\x33\x03\x05\x01\xff\x03\x03\x00\x01\x01\x01\x02\x04\x02\x03\x67\x72\x70\x03\x00\x04\x03\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\xe6\x56\x8e\x19\xa2\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\xe6\x56\x8e\x19\xa2\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00\xe6\x56\x8e\x19\xa2\x01\x00\x00\x01\x03\x05\x61\x6c\x69\x63\x65\xe6\x56\x8e\x19\xa2\x01\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x03\x62\x6f\x62\xe6\x56\x8e\x19\xa2\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00\x05\x63\x61\x72\x6f\x6c\xe6\x56\x8e\x19\xa2\x01\x00\x00\x00\x04\x67\x72\x70\x32\x03\x00\x81\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x0a\x00\x36\x4a\x58\x5a\xf5\x41\x0d\xab";

    fn id(ms: u64, seq: u64) -> StreamId {
        StreamId::new(ms, seq)
    }

    #[test]
    fn legacy_stream_payload_restores() {
        let Value::Stream(st) = restore_payload(LEGACY_STREAM).expect("restores") else {
            panic!("not a stream")
        };
        st.check().unwrap();
        let ids: Vec<StreamId> = st.iter().map(|(i, _)| i).collect();
        assert_eq!(ids, vec![id(5, 0), id(6, 0)]);
        assert_eq!(
            st.get(id(6, 0)).unwrap(),
            &vec![(b"data".to_vec(), b"f".to_vec())]
        );
        assert_eq!(st.last_id, id(6, 0));
        assert_eq!(st.max_deleted_id, StreamId::MIN);
        assert_eq!(st.entries_added, 2);
        let g1 = st.group(b"g1").unwrap();
        assert_eq!(g1.last_id, id(5, 0));
        assert_eq!(g1.entries_read, Some(1));
        assert_eq!(st.lag(g1), Some(1));
        let pending: Vec<StreamId> = g1.pel.keys().copied().collect();
        assert_eq!(pending, vec![id(1, 0), id(2, 0), id(4, 0), id(5, 0)]);
        let p = &g1.pel[&id(4, 0)];
        assert_eq!(p.consumer, b"c11");
        assert_eq!(p.delivery_count, 1);
        assert_eq!(p.delivery_time_ms, 0x017a_4383_f73e);
        assert_eq!(g1.consumers[&b"c11"[..]].pel.len(), 4);
        let g2 = st.group(b"g2").unwrap();
        assert_eq!(g2.entries_read, Some(0));
        assert_eq!(st.lag(g2), Some(2));
    }

    #[test]
    fn footer_is_checked_for_redis_versions() {
        let n = LEGACY_STREAM.len();
        // Version 11 (newer than Redis 7.0) with a matching checksum is still refused.
        let resealed = seal(&LEGACY_STREAM[..n - 10], 11);
        assert_eq!(
            restore_payload(&resealed),
            Err(DumpError::VersionOrChecksum)
        );
        assert!(restore_payload(&seal(&LEGACY_STREAM[..n - 10], 10)).is_ok());
        let mut flipped = LEGACY_STREAM.to_vec();
        flipped[n - 1] ^= 1;
        assert_eq!(restore_payload(&flipped), Err(DumpError::VersionOrChecksum));
    }

    #[test]
    fn lzf_runs_and_back_references() {
        // Literal "ab", then a back reference of length 4 at distance 2: "ababab".
        assert_eq!(
            lzf_decompress(&[1, b'a', b'b', 0x40, 1], 6).unwrap(),
            b"ababab"
        );
        // Reference before the start, output longer or shorter than stated.
        assert!(lzf_decompress(&[0x40, 0], 3).is_err());
        assert!(lzf_decompress(&[1, b'a', b'b'], 3).is_err());
        assert!(lzf_decompress(&[1, b'a', b'b'], 1).is_err());
        assert!(lzf_decompress(&[1, b'a', b'b'], 1 << 40).is_err());
    }

    #[test]
    fn listpack_elements() {
        // 7-bit 5, 13-bit -1, 6-bit string "hi", int16 -300, int64 i64::MIN.
        let mut body = vec![0x05, 0x01, 0xdf, 0xff, 0x02, 0x82, b'h', b'i', 0x03];
        body.extend_from_slice(&[0xf1, 0xd4, 0xfe, 0x03]);
        body.push(0xf4);
        body.extend_from_slice(&i64::MIN.to_le_bytes());
        body.push(9);
        let total = (6 + body.len() + 1) as u32;
        let mut lp = total.to_le_bytes().to_vec();
        lp.extend_from_slice(&5u16.to_le_bytes());
        lp.extend_from_slice(&body);
        lp.push(0xff);
        assert_eq!(
            listpack(&lp).unwrap(),
            vec![
                Elem::Int(5),
                Elem::Int(-1),
                Elem::Bytes(b"hi"),
                Elem::Int(-300),
                Elem::Int(i64::MIN)
            ]
        );
        // A wrong back-length, count or total is refused.
        let mut wrong = lp.clone();
        wrong[7] = 2;
        assert!(listpack(&wrong).is_err());
        let mut wrong = lp.clone();
        wrong[4] = 4;
        assert!(listpack(&wrong).is_err());
        assert!(listpack(&lp[..lp.len() - 1]).is_err());
    }

    #[test]
    fn zipmap_elements() {
        // Two entries, the second value with two bytes of free space after it.
        let zm = b"\x02\x01a\x02\x00xy\x01b\x01\x02z..\xff";
        let want = vec![
            Elem::Bytes(b"a"),
            Elem::Bytes(b"xy"),
            Elem::Bytes(b"b"),
            Elem::Bytes(b"z"),
        ];
        assert_eq!(zipmap(zm).unwrap(), want);
        assert!(zipmap(&zm[..zm.len() - 1]).is_err());
        assert!(zipmap(b"\x03\x01a\x01\x00b\xff").is_err()); // wrong count
                                                             // From Redis's corrupt-dump suite: a 5-byte length for a 1-byte field.
        assert!(zipmap(b"\x01\xfe\x01\x00\x00\x00a\x01\x00b\xff").is_err());
    }

    #[test]
    fn ziplist_elements() {
        // "ab", immediate 7, int16 1000.
        let entries = [
            &[0x00, 0x02, b'a', b'b'][..],
            &[0x04, 0xf8][..],
            &[0x02, 0xc0, 0xe8, 0x03][..],
        ];
        let body: Vec<u8> = entries.concat();
        let total = (10 + body.len() + 1) as u32;
        let mut zl = total.to_le_bytes().to_vec();
        zl.extend_from_slice(&(10u32 + 6).to_le_bytes());
        zl.extend_from_slice(&3u16.to_le_bytes());
        zl.extend_from_slice(&body);
        zl.push(0xff);
        assert_eq!(
            ziplist(&zl).unwrap(),
            vec![Elem::Bytes(b"ab"), Elem::Int(7), Elem::Int(1000)]
        );
        let mut wrong = zl.clone();
        wrong[14] = 3; // previous-entry size of the second entry
        assert!(ziplist(&wrong).is_err());
    }

    fn list(items: &[&[u8]]) -> Value {
        let mut l = List::new();
        for i in items {
            l.push(crate::list::End::Tail, i);
        }
        Value::List(Box::new(l))
    }

    fn set(items: &[&str]) -> Value {
        let mut s = Set::new();
        for i in items {
            s.insert(i.as_bytes(), usize::MAX);
        }
        Value::Set(Box::new(s))
    }

    #[test]
    fn redis_7_payloads() {
        let s = |b: &[u8]| Value::Str(Str::from_bytes(b));
        let mut h = Hash::new();
        for (f, v) in [("f1", "v1"), ("n", "7"), ("neg", "-5")] {
            h.insert(f.as_bytes(), v.as_bytes(), Limits::default());
        }
        let mut z = ZSet::new();
        for (m, sc) in [("b", -2.0), ("a", 1.5), ("d", 3.0), ("c", f64::INFINITY)] {
            z.insert(m.as_bytes(), sc);
        }
        let x70 = vec![b'x'; 70];
        let y = vec![b'y'; 20_000];
        let digits: Vec<String> = (0..10).map(|i| i.to_string()).collect();
        let digits: Vec<&[u8]> = digits.iter().map(|d| d.as_bytes()).collect();
        let abc = b"abc".repeat(60);
        let cases: Vec<(&[u8], Value)> = vec![
            (S_RAW, s(b"hello world")),
            (S_INT8, s(b"-12")),
            (S_INT16, s(b"1000")),
            (S_INT32, s(b"-100000")),
            (S_BIG, s(b"12345678901234")),
            (S_LZF, s(&abc)),
            (L_SMALL, list(&[b"a", b"1", b"-300", &x70, b"123456789012"])),
            (L_NODES, list(&digits)),
            (L_PLAIN, list(&[&y, b"small"])),
            (H_SMALL, Value::Hash(Box::new(h))),
            (I_SET, set(&["-7", "3", "5", "100000"])),
            (I_SET64, set(&["1", "9999999999"])),
            (T_SET, set(&["a", "b", "3"])),
            (Z_SMALL, Value::ZSet(Box::new(z))),
        ];
        for (payload, want) in cases {
            assert_eq!(restore_payload(payload).as_ref(), Ok(&want), "{want:?}");
        }
        let Ok(Value::Stream(st)) = restore_payload(X7) else {
            panic!("stream payload refused")
        };
        st.check().unwrap();
        let ids: Vec<StreamId> = st.iter().map(|(i, _)| i).collect();
        assert_eq!(ids, vec![id(1, 1), id(2, 0), id(3, 0)]);
        let pair = |f: &str, v: &str| (f.as_bytes().to_vec(), v.as_bytes().to_vec());
        assert_eq!(st.get(id(2, 0)).unwrap(), &vec![pair("other", "z")]);
        assert_eq!(
            st.get(id(3, 0)).unwrap(),
            &vec![pair("f", "v3"), pair("g", "w3")]
        );
        assert_eq!(
            (st.last_id, st.max_deleted_id, st.entries_added),
            (id(3, 0), id(1, 2), 4)
        );
        let g = st.group(b"grp").unwrap();
        assert_eq!((g.last_id, g.entries_read), (id(3, 0), Some(4)));
        assert_eq!(g.pel[&id(3, 0)].consumer, b"bob");
        assert_eq!(g.consumers[&b"alice"[..]].pel.len(), 2);
        assert!(g.consumers[&b"carol"[..]].pel.is_empty());
        let g2 = st.group(b"grp2").unwrap();
        assert_eq!((g2.last_id, g2.entries_read), (id(3, 0), None));
    }

    #[test]
    fn redis_refusals_are_refused() {
        // From Redis's corrupt-dump suite ("quicklist encoded_len is 0"): a plain node of 0
        // bytes.
        let empty_node = b"\x12\x01\x01\x00\x0a\x00\x8f\xc6\xc0\x57\x1c\x0a\xb3\x3c";
        assert_eq!(restore_payload(empty_node), Err(DumpError::BadFormat));
        // An empty ziplist as a list (Redis's corrupt_empty_keys.rdb): no empty keys.
        let empty_ziplist = [LIST_ZIPLIST, 11, 11, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0xff];
        assert_eq!(
            restore_payload(&seal(&empty_ziplist, 10)),
            Err(DumpError::BadFormat)
        );
        // A module value and a 7.2 stream: types Lattice does not read.
        for t in [7, 21] {
            let p = seal(&[t, 1, 0], 10);
            assert_eq!(restore_payload(&p), Err(DumpError::BadFormat));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn truncated_legacy_payloads_are_refused(cut in 0..LEGACY_STREAM.len()) {
            prop_assert!(restore_payload(&LEGACY_STREAM[..cut]).is_err());
            // Resealed so the reader, not the checksum, meets the cut.
            let body = &LEGACY_STREAM[..LEGACY_STREAM.len() - 10];
            let cut = cut.min(body.len() - 1);
            prop_assert_eq!(restore_payload(&seal(&body[..cut], 9)), Err(DumpError::BadFormat));
        }

        #[test]
        fn mutated_redis_payloads_never_panic(
            base in prop::sample::select(vec![
                LEGACY_STREAM, X7, L_SMALL, L_NODES, L_PLAIN, H_SMALL, I_SET, T_SET, Z_SMALL, S_LZF,
            ]),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)
        ) {
            let mut body = base[..base.len() - 10].to_vec();
            for (pos, b) in edits {
                let i = pos.index(body.len());
                body[i] = b;
            }
            // Whatever is accepted keeps its invariants.
            match restore_payload(&seal(&body, 10)) {
                Ok(Value::Stream(st)) => st.check().unwrap(),
                Ok(Value::List(l)) => { assert!(!l.is_empty()); l.check_invariants() }
                Ok(Value::Hash(h)) => h.check_invariants(),
                Ok(Value::Set(x)) => x.check_invariants(),
                Ok(Value::ZSet(z)) => z.check_invariants(),
                _ => {}
            }
        }

        #[test]
        fn arbitrary_redis_bodies_never_panic(
            t in 0u8..22, body in proptest::collection::vec(any::<u8>(), 0..120)
        ) {
            let mut b = vec![t];
            b.extend_from_slice(&body);
            let _ = restore_payload(&seal(&b, 10));
        }
    }
}

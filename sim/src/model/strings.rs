//! Strings: GET, SET (every option), SETNX, SETEX, PSETEX, MGET, MSET, MSETNX, APPEND, STRLEN,
//! GETRANGE/SUBSTR, SETRANGE, GETSET, GETDEL, GETEX, INCR/DECR/INCRBY/DECRBY, INCRBYFLOAT,
//! SETBIT, GETBIT, BITCOUNT, BITPOS, LCS — Redis 7.0 semantics, option parsing and error order
//! included.

use bytes::Bytes;
use lattice_resp::Frame;

use super::float::{self, ParseError};
use super::{
    bulk, bulk_frame, int, is, map_frame, null, ok, parse_i64, spec, Cx, Model, Spec, Value,
    NOT_FLOAT, NOT_INTEGER, SYNTAX, WRONGTYPE,
};
use crate::check::Check;

pub const SPECS: &[Spec] = &[
    spec("get", 2, get),
    spec("set", -3, set),
    spec("setnx", 3, setnx),
    spec("setex", 4, setex),
    spec("psetex", 4, psetex),
    spec("mget", -2, mget),
    spec("mset", -3, mset),
    spec("msetnx", -3, msetnx),
    spec("append", 3, append),
    spec("strlen", 2, strlen),
    spec("getrange", 4, getrange),
    spec("substr", 4, getrange),
    spec("setrange", 4, setrange),
    spec("getset", 3, getset),
    spec("getdel", 2, getdel),
    spec("getex", -2, getex),
    spec("incr", 2, incr),
    spec("decr", 2, decr),
    spec("incrby", 3, incrby),
    spec("decrby", 3, decrby),
    spec("incrbyfloat", 3, incrbyfloat),
    spec("setbit", 4, setbit),
    spec("getbit", 3, getbit),
    spec("bitcount", -2, bitcount),
    spec("bitpos", -3, bitpos),
    spec("lcs", -3, lcs),
];

/// Largest string Redis builds (`proto-max-bulk-len`, default 512 MiB).
const MAX_STRING: i128 = 512 * 1024 * 1024;

/// The string at `key`: `Ok(None)` when missing, `Err` when it holds another type.
fn read_str<'m>(m: &'m Model, key: &[u8], now_ms: u64) -> Result<Option<&'m Vec<u8>>, Check> {
    match m.db.get(key, now_ms) {
        None => Ok(None),
        Some(e) => match &e.value {
            Value::Str(s) => Ok(Some(s)),
            _ => Err(Check::err(WRONGTYPE)),
        },
    }
}

/// Stores a string value; `keep_ttl` keeps the deadline of a live key.
fn store(m: &mut Model, key: &[u8], v: Vec<u8>, keep_ttl: bool, now_ms: u64) {
    m.db.set(key, Value::Str(v), None, keep_ttl, now_ms);
}

fn get(m: &mut Model, cx: &mut Cx) -> Check {
    match read_str(m, cx.arg(1), cx.now_ms) {
        Ok(Some(s)) => bulk(s),
        Ok(None) => null(),
        Err(e) => e,
    }
}

/// Options of SET (`for_set`) and GETEX, parsed as Redis 7.0's
/// `parseExtendedStringArgumentsOrReply`: each expiry kind excludes the others but may repeat
/// (the last value wins), NX/XX/GET/KEEPTTL only for SET, PERSIST only for GETEX.
#[derive(Default)]
struct StrOpts<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    /// 0 none, 1 EX, 2 PX, 3 EXAT, 4 PXAT.
    unit: u8,
    expire: Option<&'a [u8]>,
}

fn parse_str_opts<'a>(args: &'a [Bytes], start: usize, for_set: bool) -> Option<StrOpts<'a>> {
    let mut o = StrOpts::default();
    let mut j = start;
    while j < args.len() {
        let opt = &args[j][..];
        let has_next = j + 1 < args.len();
        let other_unit = |u: u8| o.unit != 0 && o.unit != u;
        if is(opt, "nx") && !o.xx && for_set {
            o.nx = true;
        } else if is(opt, "xx") && !o.nx && for_set {
            o.xx = true;
        } else if is(opt, "get") && for_set {
            o.get = true;
        } else if is(opt, "keepttl") && !o.persist && o.unit == 0 && for_set {
            o.keepttl = true;
        } else if is(opt, "persist") && !for_set && o.unit == 0 && !o.keepttl {
            o.persist = true;
        } else if let Some(u) = ["ex", "px", "exat", "pxat"]
            .iter()
            .position(|w| is(opt, w))
            .map(|p| p as u8 + 1)
            .filter(|&u| !o.keepttl && !o.persist && !other_unit(u) && has_next)
        {
            o.unit = u;
            o.expire = Some(&args[j + 1][..]);
            j += 1;
        } else {
            return None;
        }
        j += 1;
    }
    Some(o)
}

/// Redis's `getExpireMillisecondsOrReply`: the absolute deadline in ms, or the error reply.
fn expire_ms(value: &[u8], unit: u8, now_ms: u64, cmd: &str) -> Result<i64, Check> {
    let Some(v) = parse_i64(value) else {
        return Err(Check::err(NOT_INTEGER));
    };
    let invalid = || Check::err(&format!("ERR invalid expire time in '{cmd}' command"));
    let seconds = unit == 1 || unit == 3;
    if v <= 0 || (seconds && v > i64::MAX / 1000) {
        return Err(invalid());
    }
    let mut ms = if seconds { v * 1000 } else { v };
    if unit == 1 || unit == 2 {
        ms = ms.checked_add(now_ms as i64).ok_or_else(invalid)?;
    }
    if ms <= 0 {
        return Err(invalid());
    }
    Ok(ms)
}

fn set(m: &mut Model, cx: &mut Cx) -> Check {
    let Some(o) = parse_str_opts(cx.args, 3, true) else {
        return Check::err(SYNTAX);
    };
    set_generic(m, cx, &o, "set")
}

fn set_generic(m: &mut Model, cx: &mut Cx, o: &StrOpts, cmd: &str) -> Check {
    let (key, now) = (cx.arg(1), cx.now_ms);
    let deadline = match o.expire {
        Some(v) => match expire_ms(v, o.unit, now, cmd) {
            Ok(ms) => Some(ms),
            Err(e) => return e,
        },
        None => None,
    };
    let mut old = null();
    if o.get {
        match read_str(m, key, now) {
            Ok(Some(s)) => old = bulk(s),
            Ok(None) => {}
            Err(e) => return e,
        }
    }
    let found = m.db.exists(key, now);
    if (o.nx && found) || (o.xx && !found) {
        return if o.get { old } else { null() };
    }
    let keep = o.keepttl || deadline.is_some();
    store(m, key, cx.arg(2).to_vec(), keep, now);
    if let Some(d) = deadline {
        if let Some(e) = m.db.get_mut(key, now) {
            e.deadline = Some(d.max(0) as u64);
        }
    }
    if o.get {
        old
    } else {
        ok()
    }
}

fn setnx(m: &mut Model, cx: &mut Cx) -> Check {
    if m.db.exists(cx.arg(1), cx.now_ms) {
        return int(0);
    }
    store(m, cx.arg(1), cx.arg(2).to_vec(), false, cx.now_ms);
    int(1)
}

fn setex_generic(m: &mut Model, cx: &mut Cx, unit: u8, cmd: &str) -> Check {
    let deadline = match expire_ms(cx.arg(2), unit, cx.now_ms, cmd) {
        Ok(ms) => ms as u64,
        Err(e) => return e,
    };
    let now = cx.now_ms;
    m.db.set(
        cx.arg(1),
        Value::Str(cx.arg(3).to_vec()),
        Some(deadline),
        false,
        now,
    );
    ok()
}

fn setex(m: &mut Model, cx: &mut Cx) -> Check {
    setex_generic(m, cx, 1, "setex")
}

fn psetex(m: &mut Model, cx: &mut Cx) -> Check {
    setex_generic(m, cx, 2, "psetex")
}

fn mget(m: &mut Model, cx: &mut Cx) -> Check {
    let items = cx.args[1..]
        .iter()
        .map(|k| match m.db.get(k, cx.now_ms).map(|e| &e.value) {
            Some(Value::Str(s)) => bulk_frame(s),
            Some(_) | None => Frame::Null,
        })
        .collect();
    Check::Exact(Frame::Array(items))
}

fn mset(m: &mut Model, cx: &mut Cx) -> Check {
    if cx.argc() % 2 != 1 {
        return super::arity_error("mset");
    }
    for kv in cx.args[1..].chunks(2) {
        store(m, &kv[0], kv[1].to_vec(), false, cx.now_ms);
    }
    ok()
}

fn msetnx(m: &mut Model, cx: &mut Cx) -> Check {
    if cx.argc() % 2 != 1 {
        return super::arity_error("msetnx");
    }
    if cx.args[1..]
        .chunks(2)
        .any(|kv| m.db.exists(&kv[0], cx.now_ms))
    {
        return int(0);
    }
    for kv in cx.args[1..].chunks(2) {
        store(m, &kv[0], kv[1].to_vec(), false, cx.now_ms);
    }
    int(1)
}

fn append(m: &mut Model, cx: &mut Cx) -> Check {
    let (key, now) = (cx.arg(1), cx.now_ms);
    let v = match read_str(m, key, now) {
        Err(e) => return e,
        Ok(None) => cx.arg(2).to_vec(),
        Ok(Some(s)) => {
            let mut v = s.clone();
            v.extend_from_slice(cx.arg(2));
            v
        }
    };
    let len = v.len() as i64;
    store(m, key, v, true, now);
    int(len)
}

fn strlen(m: &mut Model, cx: &mut Cx) -> Check {
    match read_str(m, cx.arg(1), cx.now_ms) {
        Ok(Some(s)) => int(s.len() as i64),
        Ok(None) => int(0),
        Err(e) => e,
    }
}

fn getrange(m: &mut Model, cx: &mut Cx) -> Check {
    let (Some(mut start), Some(mut end)) = (parse_i64(cx.arg(2)), parse_i64(cx.arg(3))) else {
        return Check::err(NOT_INTEGER);
    };
    let s = match read_str(m, cx.arg(1), cx.now_ms) {
        Ok(Some(s)) => s,
        Ok(None) => return bulk(b""),
        Err(e) => return e,
    };
    let len = s.len() as i64;
    if start < 0 && end < 0 && start > end {
        return bulk(b"");
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        return bulk(b"");
    }
    bulk(&s[start as usize..=end as usize])
}

fn string_too_long() -> Check {
    Check::err("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
}

fn setrange(m: &mut Model, cx: &mut Cx) -> Check {
    let Some(offset) = parse_i64(cx.arg(2)) else {
        return Check::err(NOT_INTEGER);
    };
    if offset < 0 {
        return Check::err("ERR offset is out of range");
    }
    let (key, val, now) = (cx.arg(1), cx.arg(3), cx.now_ms);
    let current = match read_str(m, key, now) {
        Err(e) => return e,
        Ok(c) => c.cloned(),
    };
    match &current {
        None if val.is_empty() => return int(0),
        Some(s) if val.is_empty() => return int(s.len() as i64),
        _ => {}
    }
    if offset as i128 + val.len() as i128 > MAX_STRING {
        return string_too_long();
    }
    let mut s = current.clone().unwrap_or_default();
    let end = offset as usize + val.len();
    if s.len() < end {
        s.resize(end, 0);
    }
    s[offset as usize..end].copy_from_slice(val);
    let len = s.len() as i64;
    store(m, key, s, current.is_some(), now);
    int(len)
}

fn getset(m: &mut Model, cx: &mut Cx) -> Check {
    let (key, now) = (cx.arg(1), cx.now_ms);
    let old = match read_str(m, key, now) {
        Err(e) => return e,
        Ok(Some(s)) => bulk(s),
        Ok(None) => null(),
    };
    store(m, key, cx.arg(2).to_vec(), false, now);
    old
}

fn getdel(m: &mut Model, cx: &mut Cx) -> Check {
    let (key, now) = (cx.arg(1), cx.now_ms);
    let reply = match read_str(m, key, now) {
        Err(e) => return e,
        Ok(Some(s)) => bulk(s),
        Ok(None) => return null(),
    };
    m.db.delete(key, now);
    reply
}

fn getex(m: &mut Model, cx: &mut Cx) -> Check {
    let Some(o) = parse_str_opts(cx.args, 2, false) else {
        return Check::err(SYNTAX);
    };
    let (key, now) = (cx.arg(1), cx.now_ms);
    let reply = match read_str(m, key, now) {
        Err(e) => return e,
        Ok(None) => return null(),
        Ok(Some(s)) => bulk(s),
    };
    if let Some(v) = o.expire {
        let ms = match expire_ms(v, o.unit, now, "getex") {
            Ok(ms) => ms,
            Err(e) => return e,
        };
        if (o.unit == 3 || o.unit == 4) && ms <= now as i64 {
            m.db.delete(key, now);
        } else if let Some(e) = m.db.get_mut(key, now) {
            e.deadline = Some(ms as u64);
            m.db.touch(key);
        }
    } else if o.persist {
        if let Some(e) = m.db.get_mut(key, now) {
            e.deadline = None;
        }
    }
    reply
}

fn incr_generic(m: &mut Model, cx: &mut Cx, by: i64) -> Check {
    let (key, now) = (cx.arg(1), cx.now_ms);
    let current = match read_str(m, key, now) {
        Err(e) => return e,
        Ok(None) => 0,
        Ok(Some(s)) => match parse_i64(s) {
            Some(v) => v,
            None => return Check::err(NOT_INTEGER),
        },
    };
    let Some(v) = current.checked_add(by) else {
        return Check::err("ERR increment or decrement would overflow");
    };
    store(m, key, v.to_string().into_bytes(), true, now);
    int(v)
}

fn incr(m: &mut Model, cx: &mut Cx) -> Check {
    incr_generic(m, cx, 1)
}

fn decr(m: &mut Model, cx: &mut Cx) -> Check {
    incr_generic(m, cx, -1)
}

fn incrby(m: &mut Model, cx: &mut Cx) -> Check {
    match parse_i64(cx.arg(2)) {
        Some(by) => incr_generic(m, cx, by),
        None => Check::err(NOT_INTEGER),
    }
}

fn decrby(m: &mut Model, cx: &mut Cx) -> Check {
    match parse_i64(cx.arg(2)) {
        Some(i64::MIN) => Check::err("ERR decrement would overflow"),
        Some(by) => incr_generic(m, cx, -by),
        None => Check::err(NOT_INTEGER),
    }
}

fn model_limit(what: &str, cx: &Cx) -> ! {
    panic!(
        "model limitation: {what} in {:?} (the workload should not produce this)",
        cx.args
    )
}

fn incrbyfloat(m: &mut Model, cx: &mut Cx) -> Check {
    let (key, now) = (cx.arg(1), cx.now_ms);
    let current = match read_str(m, key, now) {
        Err(e) => return e,
        Ok(None) => float::Num::Fixed(0),
        Ok(Some(s)) => match float::parse(s) {
            Ok(n) => n,
            Err(ParseError::NotFloat) => return Check::err(NOT_FLOAT),
            Err(ParseError::Unsupported) => model_limit("INCRBYFLOAT on an inexact value", cx),
        },
    };
    let incr = match float::parse(cx.arg(2)) {
        Ok(n) => n,
        Err(ParseError::NotFloat) => return Check::err(NOT_FLOAT),
        Err(ParseError::Unsupported) => model_limit("an inexact INCRBYFLOAT increment", cx),
    };
    match float::add(current, incr) {
        Ok(Some(s)) => {
            let reply = bulk(s.as_bytes());
            store(m, key, s.into_bytes(), true, now);
            reply
        }
        Ok(None) => Check::err("ERR increment would produce NaN or Infinity"),
        Err(_) => model_limit("an INCRBYFLOAT result out of exact range", cx),
    }
}

const BIT_OFFSET_ERR: &str = "ERR bit offset is not an integer or out of range";

/// Redis's `getBitOffsetFromArgument` (plain form): 0 ..= 2^32*8 - 1 with the default limit.
fn bit_offset(arg: &[u8]) -> Result<u64, Check> {
    match parse_i64(arg) {
        Some(o) if o >= 0 && ((o >> 3) as i128) < MAX_STRING => Ok(o as u64),
        _ => Err(Check::err(BIT_OFFSET_ERR)),
    }
}

fn bit_at(s: &[u8], bit: u64) -> u8 {
    let byte = (bit >> 3) as usize;
    match s.get(byte) {
        Some(b) => (b >> (7 - (bit & 7))) & 1,
        None => 0,
    }
}

fn setbit(m: &mut Model, cx: &mut Cx) -> Check {
    let offset = match bit_offset(cx.arg(2)) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let on = match parse_i64(cx.arg(3)) {
        Some(v @ (0 | 1)) => v as u8,
        _ => return Check::err("ERR bit is not an integer or out of range"),
    };
    let (key, now) = (cx.arg(1), cx.now_ms);
    let current = match read_str(m, key, now) {
        Err(e) => return e,
        Ok(c) => c.cloned(),
    };
    let existed = current.is_some();
    let mut s = current.unwrap_or_default();
    let byte = (offset >> 3) as usize;
    let grows = s.len() <= byte;
    if grows {
        s.resize(byte + 1, 0);
    }
    let old = bit_at(&s, offset);
    if existed && !grows && old == on {
        // Nothing changes, and Redis reports no modification (WATCH holds).
        return int(old as i64);
    }
    let mask = 1u8 << (7 - (offset & 7));
    if on == 1 {
        s[byte] |= mask;
    } else {
        s[byte] &= !mask;
    }
    store(m, key, s, existed, now);
    int(old as i64)
}

fn getbit(m: &mut Model, cx: &mut Cx) -> Check {
    let offset = match bit_offset(cx.arg(2)) {
        Ok(o) => o,
        Err(e) => return e,
    };
    match read_str(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(None) => int(0),
        Ok(Some(s)) => int(bit_at(s, offset) as i64),
    }
}

/// Converts a user range to inclusive bit positions over a string of `len` bytes, as BITCOUNT
/// and BITPOS do (negative indexes from the end, clamped). `None` for an empty range.
fn bit_range(start: i64, end: i64, len: usize, in_bits: bool) -> Option<(u64, u64)> {
    let total = if in_bits { len as i64 * 8 } else { len as i64 };
    let (mut s, mut e) = (start, end);
    if s < 0 {
        s += total;
    }
    if e < 0 {
        e += total;
    }
    s = s.max(0);
    e = e.max(0);
    if e >= total {
        e = total - 1;
    }
    if s > e || total == 0 {
        return None;
    }
    Some(if in_bits {
        (s as u64, e as u64)
    } else {
        (s as u64 * 8, e as u64 * 8 + 7)
    })
}

fn bitcount(m: &mut Model, cx: &mut Cx) -> Check {
    // Redis 7.0 looks the key up first: a missing key is 0 whatever the other arguments.
    let s = match read_str(m, cx.arg(1), cx.now_ms) {
        Err(e) => return e,
        Ok(None) => return int(0),
        Ok(Some(s)) => s,
    };
    let range = match cx.argc() {
        2 => None,
        4 | 5 => {
            let (Some(s), Some(e)) = (parse_i64(cx.arg(2)), parse_i64(cx.arg(3))) else {
                return Check::err(NOT_INTEGER);
            };
            let in_bits = if cx.argc() == 5 {
                if is(cx.arg(4), "bit") {
                    true
                } else if is(cx.arg(4), "byte") {
                    false
                } else {
                    return Check::err(SYNTAX);
                }
            } else {
                false
            };
            Some((s, e, in_bits))
        }
        _ => return Check::err(SYNTAX),
    };
    let bits = match range {
        None if s.is_empty() => return int(0),
        None => (0, s.len() as u64 * 8 - 1),
        Some((start, end, in_bits)) => {
            if start < 0 && end < 0 && start > end {
                return int(0);
            }
            match bit_range(start, end, s.len(), in_bits) {
                Some(r) => r,
                None => return int(0),
            }
        }
    };
    let n = (bits.0..=bits.1).filter(|&b| bit_at(s, b) == 1).count();
    int(n as i64)
}

fn bitpos(m: &mut Model, cx: &mut Cx) -> Check {
    let bit = match parse_i64(cx.arg(2)) {
        None => return Check::err(NOT_INTEGER),
        Some(b @ (0 | 1)) => b as u8,
        Some(_) => return Check::err("ERR The bit argument must be 1 or 0."),
    };
    let s = match read_str(m, cx.arg(1), cx.now_ms) {
        Err(e) => return e,
        Ok(None) => return int(if bit == 1 { -1 } else { 0 }),
        Ok(Some(s)) => s,
    };
    let argc = cx.argc();
    if argc > 6 {
        return Check::err(SYNTAX);
    }
    let mut end_given = false;
    let range = if argc == 3 {
        if s.is_empty() {
            None
        } else {
            Some((0, s.len() as u64 * 8 - 1))
        }
    } else {
        let Some(start) = parse_i64(cx.arg(3)) else {
            return Check::err(NOT_INTEGER);
        };
        let mut in_bits = false;
        if argc == 6 {
            if is(cx.arg(5), "bit") {
                in_bits = true;
            } else if is(cx.arg(5), "byte") {
                in_bits = false;
            } else {
                return Check::err(SYNTAX);
            }
        }
        let end = if argc >= 5 {
            let Some(e) = parse_i64(cx.arg(4)) else {
                return Check::err(NOT_INTEGER);
            };
            end_given = true;
            e
        } else if in_bits {
            s.len() as i64 * 8 - 1
        } else {
            s.len() as i64 - 1
        };
        bit_range(start, end, s.len(), in_bits)
    };
    let Some((lo, hi)) = range else {
        return int(-1);
    };
    match (lo..=hi).find(|&b| bit_at(s, b) == bit) {
        Some(p) => int(p as i64),
        None if bit == 1 || end_given => int(-1),
        None => int(hi as i64 + 1),
    }
}

fn lcs(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let (a, b) = match (read_str(m, cx.arg(1), now), read_str(m, cx.arg(2), now)) {
        (Ok(a), Ok(b)) => (
            a.cloned().unwrap_or_default(),
            b.cloned().unwrap_or_default(),
        ),
        _ => return Check::err("ERR The specified keys must contain string values"),
    };
    let (mut want_len, mut want_idx, mut with_len) = (false, false, false);
    let mut min_len: i64 = 0;
    let mut j = 3;
    while j < cx.argc() {
        let opt = cx.arg(j);
        let more = cx.argc() - 1 - j;
        if is(opt, "idx") {
            want_idx = true;
        } else if is(opt, "len") {
            want_len = true;
        } else if is(opt, "withmatchlen") {
            with_len = true;
        } else if is(opt, "minmatchlen") && more > 0 {
            match parse_i64(cx.arg(j + 1)) {
                Some(v) => min_len = v.max(0),
                None => return Check::err(NOT_INTEGER),
            }
            j += 1;
        } else {
            return Check::err(SYNTAX);
        }
        j += 1;
    }
    if want_idx && want_len {
        return Check::err("ERR If you want both the length and indexes, please just use IDX.");
    }
    // table[i][j]: LCS length of a[..i] and b[..j].
    let (al, bl) = (a.len(), b.len());
    let w = bl + 1;
    let mut t = vec![0u32; (al + 1) * w];
    for i in 1..=al {
        for jj in 1..=bl {
            t[i * w + jj] = if a[i - 1] == b[jj - 1] {
                t[(i - 1) * w + jj - 1] + 1
            } else {
                t[(i - 1) * w + jj].max(t[i * w + jj - 1])
            };
        }
    }
    let total = t[al * w + bl];
    if want_len {
        return int(total as i64);
    }
    // Walk back from the end: on a match take the byte; otherwise move towards the larger
    // sub-result, preferring to shorten `b` on ties. Matches on one diagonal form a range.
    let mut result = vec![0u8; total as usize];
    let mut k = total as usize;
    let mut ranges: Vec<((usize, usize), (usize, usize))> = Vec::new();
    let mut open: Option<((usize, usize), (usize, usize))> = None;
    let (mut i, mut jj) = (al, bl);
    while i > 0 && jj > 0 {
        if a[i - 1] == b[jj - 1] {
            result[k - 1] = a[i - 1];
            k -= 1;
            open = Some(match open {
                Some(((_, ae), (_, be))) => ((i - 1, ae), (jj - 1, be)),
                None => ((i - 1, i - 1), (jj - 1, jj - 1)),
            });
            i -= 1;
            jj -= 1;
            if i == 0 || jj == 0 {
                ranges.extend(open.take());
            }
        } else {
            if t[(i - 1) * w + jj] > t[i * w + jj - 1] {
                i -= 1;
            } else {
                jj -= 1;
            }
            ranges.extend(open.take());
        }
    }
    if !want_idx {
        return Check::Exact(Frame::Bulk(Bytes::from(result)));
    }
    let matches: Vec<Frame> = ranges
        .into_iter()
        .filter(|((s, e), _)| min_len == 0 || (e - s + 1) as i64 >= min_len)
        .map(|((as_, ae), (bs, be))| {
            let mut item = vec![
                Frame::Array(vec![Frame::Integer(as_ as i64), Frame::Integer(ae as i64)]),
                Frame::Array(vec![Frame::Integer(bs as i64), Frame::Integer(be as i64)]),
            ];
            if with_len {
                item.push(Frame::Integer((ae - as_ + 1) as i64));
            }
            Frame::Array(item)
        })
        .collect();
    Check::Exact(map_frame(
        cx.proto,
        vec![
            (bulk_frame(b"matches"), Frame::Array(matches)),
            (bulk_frame(b"len"), Frame::Integer(total as i64)),
        ],
    ))
}

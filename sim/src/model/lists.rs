//! Lists: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP/RPOP (with and without count), LLEN, LRANGE,
//! LINDEX, LSET, LREM, LTRIM, LINSERT, RPOPLPUSH, LMOVE — Redis 7.0 semantics: argument
//! parsing before or after the key lookup exactly as Redis does it, WRONGTYPE on other types,
//! and a list that becomes empty is deleted.

use std::collections::VecDeque;

use lattice_resp::Frame;

use super::{
    bulk, bulk_frame, int, is, null, null_array, ok, parse_i64, spec, Cx, Model, Spec, Value,
    NOT_INTEGER, SYNTAX, WRONGTYPE,
};
use crate::check::Check;

pub const SPECS: &[Spec] = &[
    spec("lpush", -3, lpush),
    spec("rpush", -3, rpush),
    spec("lpushx", -3, lpushx),
    spec("rpushx", -3, rpushx),
    spec("lpop", -2, lpop),
    spec("rpop", -2, rpop),
    spec("llen", 2, llen),
    spec("lrange", 4, lrange),
    spec("lindex", 3, lindex),
    spec("lset", 4, lset),
    spec("lrem", 4, lrem),
    spec("ltrim", 4, ltrim),
    spec("linsert", 5, linsert),
    spec("rpoplpush", 3, rpoplpush),
    spec("lmove", 5, lmove),
    spec("lpos", -3, lpos),
    spec("lmpop", -4, lmpop),
];

pub type List = VecDeque<Vec<u8>>;

fn wrongtype() -> Check {
    Check::err(WRONGTYPE)
}

/// The list at `key`: `Ok(None)` when missing, `Err` when it holds another type.
pub fn read_list<'m>(m: &'m Model, key: &[u8], now_ms: u64) -> Result<Option<&'m List>, Check> {
    match m.db.get(key, now_ms).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::List(l)) => Ok(Some(l)),
        Some(_) => Err(wrongtype()),
    }
}

fn list_mut<'m>(m: &'m mut Model, key: &[u8], now_ms: u64) -> Option<&'m mut List> {
    match m.db.get_mut(key, now_ms) {
        Some(e) => {
            e.stamp_ms = now_ms;
            match &mut e.value {
                Value::List(l) => Some(l),
                _ => None,
            }
        }
        None => None,
    }
}

/// Deletes `key` if its list is now empty (Redis never keeps an empty list).
fn drop_if_empty(m: &mut Model, key: &[u8], now_ms: u64) {
    if read_list(m, key, now_ms).is_ok_and(|l| l.is_some_and(|l| l.is_empty())) {
        m.db.delete(key, now_ms);
    }
}

/// Pushes onto `key` (which must be missing or a list), creating it; returns the new length.
pub fn push(m: &mut Model, key: &[u8], items: &[&[u8]], left: bool, now_ms: u64) -> usize {
    if !m.db.exists(key, now_ms) {
        m.db.set(key, Value::List(List::new()), None, false, now_ms);
    }
    let l = list_mut(m, key, now_ms).expect("push onto a list");
    for it in items {
        if left {
            l.push_front(it.to_vec());
        } else {
            l.push_back(it.to_vec());
        }
    }
    l.len()
}

/// Pops one element from the list at `key` (which must be a non-empty list), deleting it when
/// it becomes empty.
pub fn pop_one(m: &mut Model, key: &[u8], left: bool, now_ms: u64) -> Vec<u8> {
    let l = list_mut(m, key, now_ms).expect("pop from a list");
    let v = if left { l.pop_front() } else { l.pop_back() }.expect("non-empty list");
    drop_if_empty(m, key, now_ms);
    v
}

fn push_cmd(m: &mut Model, cx: &mut Cx, left: bool, only_existing: bool) -> Check {
    let now = cx.now_ms;
    let key = cx.arg(1);
    match read_list(m, key, now) {
        Err(e) => return e,
        Ok(None) if only_existing => return int(0),
        Ok(_) => {}
    }
    let items: Vec<&[u8]> = cx.args[2..].iter().map(|a| &a[..]).collect();
    int(push(m, key, &items, left, now) as i64)
}

fn lpush(m: &mut Model, cx: &mut Cx) -> Check {
    push_cmd(m, cx, true, false)
}

fn rpush(m: &mut Model, cx: &mut Cx) -> Check {
    push_cmd(m, cx, false, false)
}

fn lpushx(m: &mut Model, cx: &mut Cx) -> Check {
    push_cmd(m, cx, true, true)
}

fn rpushx(m: &mut Model, cx: &mut Cx) -> Check {
    push_cmd(m, cx, false, true)
}

const NOT_POSITIVE: &str = "ERR value is out of range, must be positive";

fn pop_cmd(m: &mut Model, cx: &mut Cx, left: bool) -> Check {
    let now = cx.now_ms;
    let name = if left { "lpop" } else { "rpop" };
    if cx.argc() > 3 {
        return super::arity_error(name);
    }
    let count = if cx.argc() == 3 {
        match parse_i64(cx.arg(2)) {
            Some(n) if n >= 0 => Some(n as usize),
            Some(_) => return Check::err(NOT_POSITIVE),
            None => return Check::err(NOT_POSITIVE),
        }
    } else {
        None
    };
    let key = cx.arg(1);
    let len = match read_list(m, key, now) {
        Err(e) => return e,
        Ok(None) => {
            return match count {
                Some(_) => Check::Exact(null_array(cx.proto)),
                None => null(),
            }
        }
        Ok(Some(l)) => l.len(),
    };
    match count {
        None => bulk(&pop_one(m, key, left, now)),
        Some(0) => Check::Exact(Frame::Array(vec![])),
        Some(n) => {
            let items = (0..n.min(len))
                .map(|_| bulk_frame(&pop_one(m, key, left, now)))
                .collect();
            Check::Exact(Frame::Array(items))
        }
    }
}

fn lpop(m: &mut Model, cx: &mut Cx) -> Check {
    pop_cmd(m, cx, true)
}

fn rpop(m: &mut Model, cx: &mut Cx) -> Check {
    pop_cmd(m, cx, false)
}

fn llen(m: &mut Model, cx: &mut Cx) -> Check {
    match read_list(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(l) => int(l.map_or(0, |l| l.len()) as i64),
    }
}

/// Redis's range normalisation (LRANGE, LTRIM): `None` when the range is empty.
fn norm_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let mut s = if start < 0 { start + len } else { start };
    let mut e = if end < 0 { end + len } else { end };
    if s < 0 {
        s = 0;
    }
    if s > e || s >= len {
        return None;
    }
    if e >= len {
        e = len - 1;
    }
    Some((s as usize, e as usize))
}

fn two_ints(cx: &Cx) -> Result<(i64, i64), Check> {
    match (parse_i64(cx.arg(2)), parse_i64(cx.arg(3))) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(Check::err(NOT_INTEGER)),
    }
}

fn lrange(m: &mut Model, cx: &mut Cx) -> Check {
    let (s, e) = match two_ints(cx) {
        Ok(v) => v,
        Err(e) => return e,
    };
    match read_list(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(None) => Check::Exact(Frame::Array(vec![])),
        Ok(Some(l)) => {
            let items = match norm_range(s, e, l.len()) {
                None => vec![],
                Some((s, e)) => l.range(s..=e).map(|v| bulk_frame(v)).collect(),
            };
            Check::Exact(Frame::Array(items))
        }
    }
}

fn ltrim(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let (s, e) = match two_ints(cx) {
        Ok(v) => v,
        Err(e) => return e,
    };
    let key = cx.arg(1);
    match read_list(m, key, now) {
        Err(e) => return e,
        Ok(None) => return ok(),
        Ok(Some(_)) => {}
    }
    let l = list_mut(m, key, now).expect("list");
    match norm_range(s, e, l.len()) {
        None => l.clear(),
        Some((s, e)) => {
            l.truncate(e + 1);
            l.drain(..s);
        }
    }
    m.db.touch(key);
    drop_if_empty(m, key, now);
    ok()
}

/// A list index (negative from the tail) resolved against `len`.
fn resolve(index: i64, len: usize) -> Option<usize> {
    let i = if index < 0 { index + len as i64 } else { index };
    (0..len as i64).contains(&i).then_some(i as usize)
}

fn lindex(m: &mut Model, cx: &mut Cx) -> Check {
    // Redis looks the key up before parsing the index.
    let l = match read_list(m, cx.arg(1), cx.now_ms) {
        Err(e) => return e,
        Ok(None) => return null(),
        Ok(Some(l)) => l,
    };
    let Some(index) = parse_i64(cx.arg(2)) else {
        return Check::err(NOT_INTEGER);
    };
    match resolve(index, l.len()) {
        Some(i) => bulk(&l[i]),
        None => null(),
    }
}

fn lset(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let key = cx.arg(1);
    let len = match read_list(m, key, now) {
        Err(e) => return e,
        Ok(None) => return Check::err("ERR no such key"),
        Ok(Some(l)) => l.len(),
    };
    let Some(index) = parse_i64(cx.arg(2)) else {
        return Check::err(NOT_INTEGER);
    };
    match resolve(index, len) {
        Some(i) => {
            let v = cx.arg(3).to_vec();
            list_mut(m, key, now).expect("list")[i] = v;
            m.db.touch(key);
            ok()
        }
        None => Check::err("ERR index out of range"),
    }
}

fn lrem(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let Some(count) = parse_i64(cx.arg(2)) else {
        return Check::err(NOT_INTEGER);
    };
    let key = cx.arg(1);
    match read_list(m, key, now) {
        Err(e) => return e,
        Ok(None) => return int(0),
        Ok(Some(_)) => {}
    }
    let elem = cx.arg(3).to_vec();
    let l = list_mut(m, key, now).expect("list");
    let limit = if count == 0 {
        usize::MAX
    } else {
        count.unsigned_abs() as usize
    };
    let mut removed = 0usize;
    let mut kept: Vec<Vec<u8>> = Vec::with_capacity(l.len());
    let items: Vec<Vec<u8>> = if count < 0 {
        l.drain(..).rev().collect()
    } else {
        l.drain(..).collect()
    };
    for it in items {
        if removed < limit && it == elem {
            removed += 1;
        } else {
            kept.push(it);
        }
    }
    if count < 0 {
        kept.reverse();
    }
    l.extend(kept);
    drop_if_empty(m, key, now);
    int(removed as i64)
}

fn linsert(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let after = if is(cx.arg(2), "after") {
        true
    } else if is(cx.arg(2), "before") {
        false
    } else {
        return Check::err(SYNTAX);
    };
    let key = cx.arg(1);
    match read_list(m, key, now) {
        Err(e) => return e,
        Ok(None) => return int(0),
        Ok(Some(_)) => {}
    }
    let pivot = cx.arg(3);
    let elem = cx.arg(4).to_vec();
    let l = list_mut(m, key, now).expect("list");
    match l.iter().position(|v| v[..] == *pivot) {
        None => int(-1),
        Some(p) => {
            l.insert(if after { p + 1 } else { p }, elem);
            int(l.len() as i64)
        }
    }
}

fn side(arg: &[u8]) -> Option<bool> {
    if is(arg, "left") {
        Some(true)
    } else if is(arg, "right") {
        Some(false)
    } else {
        None
    }
}

/// RPOPLPUSH and LMOVE: pop from `src`, push onto `dst` (possibly the same list).
fn move_(m: &mut Model, cx: &Cx, from_left: bool, to_left: bool) -> Check {
    let now = cx.now_ms;
    let (src, dst) = (cx.arg(1), cx.arg(2));
    match read_list(m, src, now) {
        Err(e) => return e,
        Ok(None) => return null(),
        Ok(Some(_)) => {}
    }
    if let Err(e) = read_list(m, dst, now) {
        return e;
    }
    let v = if src == dst {
        // Pop and push on the same list: never emptied in between.
        let l = list_mut(m, src, now).expect("list");
        let v = if from_left {
            l.pop_front()
        } else {
            l.pop_back()
        }
        .expect("non-empty");
        if to_left {
            l.push_front(v.clone());
        } else {
            l.push_back(v.clone());
        }
        m.db.touch(src);
        v
    } else {
        let v = pop_one(m, src, from_left, now);
        push(m, dst, &[&v], to_left, now);
        v
    };
    bulk(&v)
}

fn rpoplpush(m: &mut Model, cx: &mut Cx) -> Check {
    move_(m, cx, false, true)
}

fn lmove(m: &mut Model, cx: &mut Cx) -> Check {
    match (side(cx.arg(3)), side(cx.arg(4))) {
        (Some(f), Some(t)) => move_(m, cx, f, t),
        _ => Check::err(SYNTAX),
    }
}

/// A number in `min..` (`getRangeLongFromObjectOrReply` with a message): the message is the
/// reply both for text that is not a number and for a number out of range.
fn at_least(arg: &[u8], min: i64, msg: &str) -> Result<i64, Check> {
    match parse_i64(arg) {
        Some(n) if n >= min => Ok(n),
        _ => Err(Check::err(msg)),
    }
}

fn lpos(m: &mut Model, cx: &mut Cx) -> Check {
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0i64);
    let mut j = 3;
    while j < cx.argc() {
        let (opt, more) = (cx.arg(j), j + 1 < cx.argc());
        let parsed = if is(opt, "rank") && more {
            match parse_i64(cx.arg(j + 1)) {
                Some(0) => Err(Check::err(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the \
                     second ... or use negative to start from the end of the list",
                )),
                Some(i64::MIN) => {
                    // Redis 7.0 negates the rank to walk from the tail; -LONG_MIN overflows
                    // back to itself and the search then stops at the first match, as -1.
                    rank = -1;
                    Ok(())
                }
                Some(r) => {
                    rank = r;
                    Ok(())
                }
                None => Err(Check::err(NOT_INTEGER)),
            }
        } else if is(opt, "count") && more {
            at_least(cx.arg(j + 1), 0, "ERR COUNT can't be negative").map(|n| count = Some(n))
        } else if is(opt, "maxlen") && more {
            at_least(cx.arg(j + 1), 0, "ERR MAXLEN can't be negative").map(|n| maxlen = n)
        } else {
            Err(Check::err(SYNTAX))
        };
        if let Err(e) = parsed {
            return e;
        }
        j += 2;
    }
    let l = match read_list(m, cx.arg(1), cx.now_ms) {
        Err(e) => return e,
        Ok(None) => {
            return if count.is_some() {
                Check::Exact(Frame::Array(vec![]))
            } else {
                null()
            }
        }
        Ok(Some(l)) => l,
    };
    let elem = cx.arg(2);
    let scan = if maxlen == 0 {
        l.len()
    } else {
        (maxlen as usize).min(l.len())
    };
    let indexes: Box<dyn Iterator<Item = usize>> = if rank > 0 {
        Box::new(0..scan)
    } else {
        Box::new((l.len() - scan..l.len()).rev())
    };
    let want = match count {
        Some(0) => usize::MAX,
        Some(n) => n as usize,
        None => 1,
    };
    let found: Vec<i64> = indexes
        .filter(|&i| l[i][..] == *elem)
        .skip(rank.unsigned_abs() as usize - 1)
        .take(want)
        .map(|i| i as i64)
        .collect();
    match count {
        Some(_) => Check::Exact(Frame::Array(
            found.into_iter().map(Frame::Integer).collect(),
        )),
        None => found.first().map_or_else(null, |&i| int(i)),
    }
}

/// The shared head of LMPOP and ZMPOP: `numkeys key... WHERE [COUNT n]`. Returns the keys,
/// the side (`side` reads the word; a syntax error when it cannot, checked before the
/// count) and the count (1 when not given).
pub fn parse_mpop<'a>(
    cx: &'a Cx,
    side: fn(&[u8]) -> Option<bool>,
) -> Result<(Vec<&'a [u8]>, bool, usize), Check> {
    let numkeys = at_least(cx.arg(1), 1, "ERR numkeys should be greater than 0")? as usize;
    let where_idx = numkeys.saturating_add(2);
    if where_idx >= cx.argc() {
        return Err(Check::err(SYNTAX));
    }
    let keys = cx.args[2..where_idx].iter().map(|k| &k[..]).collect();
    let which = side(cx.arg(where_idx)).ok_or_else(|| Check::err(SYNTAX))?;
    let mut count = None;
    let mut j = where_idx + 1;
    while j < cx.argc() {
        if count.is_none() && is(cx.arg(j), "count") && j + 1 < cx.argc() {
            count =
                Some(at_least(cx.arg(j + 1), 1, "ERR count should be greater than 0")? as usize);
            j += 2;
        } else {
            return Err(Check::err(SYNTAX));
        }
    }
    Ok((keys, which, count.unwrap_or(1)))
}

fn lmpop(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let (keys, left, count) = match parse_mpop(cx, side) {
        Ok(v) => v,
        Err(e) => return e,
    };
    for key in keys {
        let len = match read_list(m, key, now) {
            Err(e) => return e,
            Ok(None) => continue,
            Ok(Some(l)) => l.len(),
        };
        let items = (0..count.min(len))
            .map(|_| bulk_frame(&pop_one(m, key, left, now)))
            .collect();
        return Check::Exact(Frame::Array(vec![bulk_frame(key), Frame::Array(items)]));
    }
    Check::Exact(null_array(cx.proto))
}

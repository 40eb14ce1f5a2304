//! Sets: SADD, SREM, SISMEMBER, SMISMEMBER, SCARD, SMEMBERS (checked in any order), SMOVE,
//! SINTER/SUNION/SDIFF and their STORE forms, SINTERCARD, SRANDMEMBER (a property) and SPOP —
//! Redis 7.0 semantics; a set that becomes empty is deleted.
//!
//! SPOP is the one random command that changes state: when it takes some but not all members,
//! the model checks the reply as a sample and leaves the removal pending; the driver hands the
//! node's reply to [`Model::settle`], which removes exactly the members popped.

use std::collections::BTreeSet;

use bytes::Bytes;

use lattice_resp::Frame;

use super::{int, parse_i64, spec, Cx, Model, Proto, Spec, Value, NOT_INTEGER, SYNTAX, WRONGTYPE};
use crate::check::Check;

pub const SPECS: &[Spec] = &[
    spec("sadd", -3, sadd),
    spec("srem", -3, srem),
    spec("sismember", 3, sismember),
    spec("scard", 2, scard),
    spec("smembers", 2, smembers),
    spec("smismember", -3, smismember),
    spec("smove", 4, smove),
    spec("sinter", -2, sinter),
    spec("sinterstore", -3, sinterstore),
    spec("sintercard", -3, sintercard),
    spec("sunion", -2, sunion),
    spec("sunionstore", -3, sunionstore),
    spec("sdiff", -2, sdiff),
    spec("sdiffstore", -3, sdiffstore),
    spec("srandmember", -2, srandmember),
    spec("spop", -2, spop),
];

pub type Set = BTreeSet<Vec<u8>>;

fn read<'m>(m: &'m Model, key: &[u8], now_ms: u64) -> Result<Option<&'m Set>, Check> {
    match m.db.get(key, now_ms).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Set(s)) => Ok(Some(s)),
        Some(_) => Err(Check::err(WRONGTYPE)),
    }
}

/// The set at `key`, created empty if missing (the caller checked the type).
fn write<'m>(m: &'m mut Model, key: &[u8], now_ms: u64) -> &'m mut Set {
    if !m.db.exists(key, now_ms) {
        m.db.set(key, Value::Set(Set::new()), None, false, now_ms);
    }
    let e = m.db.get_mut(key, now_ms).expect("live");
    e.stamp_ms = now_ms;
    match &mut e.value {
        Value::Set(s) => s,
        _ => unreachable!("type checked"),
    }
}

fn sadd(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    if let Err(e) = read(m, cx.arg(1), now) {
        return e;
    }
    let s = write(m, cx.arg(1), now);
    let n = cx.args[2..].iter().filter(|v| s.insert(v.to_vec())).count();
    int(n as i64)
}

fn srem(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let key = cx.arg(1);
    match read(m, key, now) {
        Err(e) => return e,
        Ok(None) => return int(0),
        Ok(Some(_)) => {}
    }
    let s = write(m, key, now);
    let n = cx.args[2..].iter().filter(|v| s.remove(&v[..])).count();
    if s.is_empty() {
        m.db.delete(key, now);
    }
    int(n as i64)
}

fn sismember(m: &mut Model, cx: &mut Cx) -> Check {
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(s) => int(s.is_some_and(|s| s.contains(cx.arg(2))) as i64),
    }
}

fn scard(m: &mut Model, cx: &mut Cx) -> Check {
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(s) => int(s.map_or(0, |s| s.len()) as i64),
    }
}

fn members<'a>(s: impl IntoIterator<Item = &'a Vec<u8>>, cx: &Cx) -> Check {
    Check::Members {
        items: s.into_iter().map(|v| Bytes::from(v.clone())).collect(),
        resp3: cx.proto == Proto::Resp3,
    }
}

fn smembers(m: &mut Model, cx: &mut Cx) -> Check {
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(s) => members(s.into_iter().flatten(), cx),
    }
}

fn smismember(m: &mut Model, cx: &mut Cx) -> Check {
    let s = match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => return e,
        Ok(s) => s,
    };
    let items = cx.args[2..]
        .iter()
        .map(|v| Frame::Integer(s.is_some_and(|s| s.contains(&v[..])) as i64))
        .collect();
    Check::Exact(Frame::Array(items))
}

/// SMOVE: a missing source answers 0 before either type is checked; moving within one set
/// only reports membership.
fn smove(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let (src, dst, member) = (cx.arg(1), cx.arg(2), cx.arg(3));
    if !m.db.exists(src, now) {
        return int(0);
    }
    let (present, in_dst) = match (read(m, src, now), read(m, dst, now)) {
        (Err(e), _) | (_, Err(e)) => return e,
        (Ok(s), Ok(d)) => (
            s.is_some_and(|s| s.contains(member)),
            d.is_some_and(|d| d.contains(member)),
        ),
    };
    if !present || src == dst {
        return int(present as i64);
    }
    // The source is modified; the destination only when the member is new there (a WATCH on
    // a destination that had it already survives: checked against redis-server 7.0.15).
    m.db.touch(src);
    let s = write(m, src, now);
    s.remove(member);
    if s.is_empty() {
        m.db.delete(src, now);
    }
    if !in_dst {
        m.db.touch(dst);
        write(m, dst, now).insert(member.to_vec());
    }
    int(1)
}

#[derive(Clone, Copy)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// The sets named by `keys` (a missing key is an empty set), or WRONGTYPE if any key holds
/// another type.
fn sources<'m>(m: &'m Model, keys: &[Bytes], now_ms: u64) -> Result<Vec<Option<&'m Set>>, Check> {
    keys.iter().map(|k| read(m, k, now_ms)).collect()
}

fn combine(m: &Model, keys: &[Bytes], op: Op, now_ms: u64) -> Result<Set, Check> {
    let srcs = sources(m, keys, now_ms)?;
    let empty = Set::new();
    let all: Vec<&Set> = srcs.iter().map(|s| s.unwrap_or(&empty)).collect();
    let (first, rest) = all.split_first().expect("arity guarantees a key");
    Ok(match op {
        Op::Inter => first
            .iter()
            .filter(|v| rest.iter().all(|s| s.contains(*v)))
            .cloned()
            .collect(),
        Op::Union => all.iter().flat_map(|s| s.iter()).cloned().collect(),
        Op::Diff => first
            .iter()
            .filter(|v| !rest.iter().any(|s| s.contains(*v)))
            .cloned()
            .collect(),
    })
}

fn setop(m: &Model, cx: &Cx, op: Op) -> Check {
    match combine(m, &cx.args[1..], op, cx.now_ms) {
        Err(e) => e,
        Ok(s) => members(&s, cx),
    }
}

/// The STORE forms: the result replaces the destination whatever its type (an empty result
/// deletes it); the reply is the result's size.
fn setop_store(m: &mut Model, cx: &Cx, op: Op) -> Check {
    let now = cx.now_ms;
    let result = match combine(m, &cx.args[2..], op, now) {
        Err(e) => return e,
        Ok(s) => s,
    };
    let dst = cx.arg(1);
    let n = result.len() as i64;
    if result.is_empty() {
        if m.db.delete(dst, now).is_some() {
            m.db.touch(dst);
        }
    } else {
        m.db.set(dst, Value::Set(result), None, false, now);
    }
    int(n)
}

fn sinter(m: &mut Model, cx: &mut Cx) -> Check {
    setop(m, cx, Op::Inter)
}

fn sunion(m: &mut Model, cx: &mut Cx) -> Check {
    setop(m, cx, Op::Union)
}

fn sdiff(m: &mut Model, cx: &mut Cx) -> Check {
    setop(m, cx, Op::Diff)
}

fn sinterstore(m: &mut Model, cx: &mut Cx) -> Check {
    setop_store(m, cx, Op::Inter)
}

fn sunionstore(m: &mut Model, cx: &mut Cx) -> Check {
    setop_store(m, cx, Op::Union)
}

fn sdiffstore(m: &mut Model, cx: &mut Cx) -> Check {
    setop_store(m, cx, Op::Diff)
}

/// SINTERCARD numkeys key... [LIMIT n]: unlike ZINTERCARD, the options are parsed before the
/// keys' types are checked.
fn sintercard(m: &mut Model, cx: &mut Cx) -> Check {
    let n = match parse_i64(cx.arg(1)) {
        Some(n) if n >= 1 => n,
        _ => return Check::err("ERR numkeys should be greater than 0"),
    };
    if n > (cx.argc() - 2) as i64 {
        return Check::err("ERR Number of keys can't be greater than number of args");
    }
    let n = n as usize;
    let mut limit = 0usize;
    let mut j = 2 + n;
    while j < cx.argc() {
        if !(super::is(cx.arg(j), "limit") && j + 1 < cx.argc()) {
            return Check::err(SYNTAX);
        }
        match parse_i64(cx.arg(j + 1)) {
            Some(l) if l >= 0 => limit = l as usize,
            _ => return Check::err("ERR LIMIT can't be negative"),
        }
        j += 2;
    }
    match combine(m, &cx.args[2..2 + n], Op::Inter, cx.now_ms) {
        Err(e) => e,
        Ok(s) if limit > 0 => int(s.len().min(limit) as i64),
        Ok(s) => int(s.len() as i64),
    }
}

fn pool(s: Option<&Set>) -> Vec<(Bytes, Frame)> {
    s.into_iter()
        .flatten()
        .map(|v| (Bytes::from(v.clone()), Frame::Null))
        .collect()
}

/// SRANDMEMBER key [count]: the count is parsed before the key is looked at. With a count the
/// reply is an array in both protocols (SPOP's is a set in RESP3).
fn srandmember(m: &mut Model, cx: &mut Cx) -> Check {
    if cx.argc() > 3 {
        return Check::err(SYNTAX);
    }
    let count = match cx.args.get(2).map(|c| parse_i64(c)) {
        None => None,
        Some(Some(c)) if c > i64::MIN => Some(c),
        Some(_) => return Check::err(NOT_INTEGER),
    };
    let s = match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => return e,
        Ok(s) => s,
    };
    Check::sample(pool(s), count, false, cx.proto == Proto::Resp3)
}

/// SPOP key [count]. Popping every member (or none) is deterministic; otherwise the reply is
/// checked as a sample of distinct members and the removal waits for the node's reply.
fn spop(m: &mut Model, cx: &mut Cx) -> Check {
    if cx.argc() > 3 {
        return Check::err(SYNTAX);
    }
    let count = match cx.args.get(2).map(|c| parse_i64(c)) {
        None => None,
        Some(Some(c)) if c >= 0 => Some(c),
        Some(_) => return Check::err("ERR value is out of range, must be positive"),
    };
    let now = cx.now_ms;
    let key = cx.arg(1);
    let s = match read(m, key, now) {
        Err(e) => return e,
        Ok(s) => s,
    };
    let resp3 = cx.proto == Proto::Resp3;
    let len = s.map_or(0, |s| s.len());
    if count == Some(0) || s.is_none() {
        return match count {
            None => super::null(),
            Some(_) if resp3 => Check::Exact(Frame::Set(Vec::new())),
            Some(_) => Check::Exact(Frame::Array(Vec::new())),
        };
    }
    let mut check = Check::sample(pool(s), count, false, resp3);
    if let Check::Sample { set, .. } = &mut check {
        *set = count.is_some();
    }
    m.db.touch(key);
    if count.map_or(len == 1, |c| c as usize >= len) {
        m.db.delete(key, now);
    } else {
        // Inside EXEC the commands queued after it would read the set before the removal.
        assert!(
            !cx.in_exec,
            "model limitation: a SPOP taking part of a set inside EXEC (the workload should not produce this): {:?}",
            cx.args
        );
        write(m, key, now);
        m.pending_pops.push(Bytes::copy_from_slice(key));
    }
    check
}

/// Removes what one pending SPOP took, given the reply frame to that SPOP (a member or an
/// aggregate of members); members not in the set are ignored (the reply check reports them).
pub fn settle_pop(m: &mut Model, key: &[u8], reply: &Frame, now_ms: u64) {
    let popped: Vec<&Bytes> = match reply {
        Frame::Bulk(b) => vec![b],
        Frame::Array(v) | Frame::Set(v) => v
            .iter()
            .filter_map(|f| match f {
                Frame::Bulk(b) => Some(b),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if read(m, key, now_ms).ok().flatten().is_none() {
        return;
    }
    let s = write(m, key, now_ms);
    for p in popped {
        s.remove(&p[..]);
    }
    if s.is_empty() {
        m.db.delete(key, now_ms);
    }
}

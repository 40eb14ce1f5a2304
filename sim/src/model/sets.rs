//! Sets: SADD, SREM, SISMEMBER, SCARD, SMEMBERS (checked in any order) — Redis 7.0
//! semantics; a set that becomes empty is deleted.

use std::collections::BTreeSet;

use bytes::Bytes;

use super::{int, spec, Cx, Model, Proto, Spec, Value, WRONGTYPE};
use crate::check::Check;

pub const SPECS: &[Spec] = &[
    spec("sadd", -3, sadd),
    spec("srem", -3, srem),
    spec("sismember", 3, sismember),
    spec("scard", 2, scard),
    spec("smembers", 2, smembers),
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

fn smembers(m: &mut Model, cx: &mut Cx) -> Check {
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(s) => Check::Members {
            items: s
                .into_iter()
                .flatten()
                .map(|v| Bytes::from(v.clone()))
                .collect(),
            resp3: cx.proto == Proto::Resp3,
        },
    }
}

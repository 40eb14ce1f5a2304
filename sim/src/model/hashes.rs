//! Hashes: HSET, HGET, HDEL, HLEN, HGETALL (checked in any order), HINCRBY — Redis 7.0
//! semantics; a hash that becomes empty is deleted.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::{
    arity_error, bulk, int, null, parse_i64, spec, Cx, Model, Proto, Spec, Value, NOT_INTEGER,
    WRONGTYPE,
};
use crate::check::Check;

pub const SPECS: &[Spec] = &[
    spec("hset", -4, hset),
    spec("hget", 3, hget),
    spec("hdel", -3, hdel),
    spec("hlen", 2, hlen),
    spec("hgetall", 2, hgetall),
    spec("hincrby", 4, hincrby),
];

pub type Hash = BTreeMap<Vec<u8>, Vec<u8>>;

fn read<'m>(m: &'m Model, key: &[u8], now_ms: u64) -> Result<Option<&'m Hash>, Check> {
    match m.db.get(key, now_ms).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Hash(h)) => Ok(Some(h)),
        Some(_) => Err(Check::err(WRONGTYPE)),
    }
}

/// The hash at `key`, created empty if missing (the caller checked the type).
fn write<'m>(m: &'m mut Model, key: &[u8], now_ms: u64) -> &'m mut Hash {
    if !m.db.exists(key, now_ms) {
        m.db.set(key, Value::Hash(Hash::new()), None, false, now_ms);
    }
    let e = m.db.get_mut(key, now_ms).expect("live");
    e.stamp_ms = now_ms;
    match &mut e.value {
        Value::Hash(h) => h,
        _ => unreachable!("type checked"),
    }
}

fn hset(m: &mut Model, cx: &mut Cx) -> Check {
    if cx.argc() % 2 == 1 {
        return arity_error("hset");
    }
    let now = cx.now_ms;
    if let Err(e) = read(m, cx.arg(1), now) {
        return e;
    }
    m.db.touch(cx.arg(1));
    let h = write(m, cx.arg(1), now);
    let mut added = 0;
    for pair in cx.args[2..].chunks(2) {
        if h.insert(pair[0].to_vec(), pair[1].to_vec()).is_none() {
            added += 1;
        }
    }
    int(added)
}

fn hget(m: &mut Model, cx: &mut Cx) -> Check {
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(h) => match h.and_then(|h| h.get(cx.arg(2))) {
            Some(v) => bulk(v),
            None => null(),
        },
    }
}

fn hdel(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let key = cx.arg(1);
    match read(m, key, now) {
        Err(e) => return e,
        Ok(None) => return int(0),
        Ok(Some(_)) => {}
    }
    let h = write(m, key, now);
    let n = cx.args[2..]
        .iter()
        .filter(|f| h.remove(&f[..]).is_some())
        .count();
    if h.is_empty() {
        m.db.delete(key, now);
    }
    int(n as i64)
}

fn hlen(m: &mut Model, cx: &mut Cx) -> Check {
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(h) => int(h.map_or(0, |h| h.len()) as i64),
    }
}

fn hgetall(m: &mut Model, cx: &mut Cx) -> Check {
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(h) => Check::Pairs {
            pairs: h
                .into_iter()
                .flatten()
                .map(|(k, v)| (Bytes::from(k.clone()), Bytes::from(v.clone())))
                .collect(),
            resp3: cx.proto == Proto::Resp3,
        },
    }
}

fn hincrby(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let Some(incr) = parse_i64(cx.arg(3)) else {
        return Check::err(NOT_INTEGER);
    };
    let key = cx.arg(1);
    let cur = match read(m, key, now) {
        Err(e) => return e,
        Ok(h) => h.and_then(|h| h.get(cx.arg(2))).cloned(),
    };
    let old = match cur {
        None => 0,
        Some(v) => match parse_i64(&v) {
            Some(n) => n,
            None => return Check::err("ERR hash value is not an integer"),
        },
    };
    let Some(new) = old.checked_add(incr) else {
        return Check::err("ERR increment or decrement would overflow");
    };
    write(m, key, now).insert(cx.arg(2).to_vec(), new.to_string().into_bytes());
    m.db.touch(key);
    int(new)
}

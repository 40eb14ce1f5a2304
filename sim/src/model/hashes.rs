//! Hashes: HSET, HSETNX, HMSET, HGET, HMGET, HDEL, HLEN, HSTRLEN, HEXISTS, HGETALL, HKEYS,
//! HVALS (checked in any order: Redis walks its own hash table), HINCRBY, HINCRBYFLOAT and
//! HRANDFIELD (a property: membership, size, distinctness) — Redis 7.0 semantics; a hash that
//! becomes empty is deleted.

use std::collections::BTreeMap;

use bytes::Bytes;

use lattice_resp::Frame;

use super::float::{self, ParseError};
use super::{
    arity_error, bulk, bulk_frame, int, null, ok, parse_i64, spec, Cx, Model, Proto, Spec, Value,
    NOT_FLOAT, NOT_INTEGER, WRONGTYPE,
};
use crate::check::Check;

pub const SPECS: &[Spec] = &[
    spec("hset", -4, hset),
    spec("hget", 3, hget),
    spec("hdel", -3, hdel),
    spec("hlen", 2, hlen),
    spec("hgetall", 2, hgetall),
    spec("hincrby", 4, hincrby),
    spec("hsetnx", 4, hsetnx),
    spec("hmset", -4, hmset),
    spec("hmget", -3, hmget),
    spec("hstrlen", 3, hstrlen),
    spec("hexists", 3, hexists),
    spec("hkeys", 2, hkeys),
    spec("hvals", 2, hvals),
    spec("hincrbyfloat", 4, hincrbyfloat),
    spec("hrandfield", -2, hrandfield),
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
    match set_pairs(m, cx, "hset") {
        Ok(added) => int(added),
        Err(e) => e,
    }
}

/// HMSET: HSET's work with OK for a reply.
fn hmset(m: &mut Model, cx: &mut Cx) -> Check {
    match set_pairs(m, cx, "hmset") {
        Ok(_) => ok(),
        Err(e) => e,
    }
}

/// Stores the field/value pairs of `cx.args[2..]`; the number of new fields.
fn set_pairs(m: &mut Model, cx: &mut Cx, name: &str) -> Result<i64, Check> {
    if cx.argc() % 2 == 1 {
        return Err(arity_error(name));
    }
    let now = cx.now_ms;
    read(m, cx.arg(1), now)?;
    m.db.touch(cx.arg(1));
    let h = write(m, cx.arg(1), now);
    let mut added = 0;
    for pair in cx.args[2..].chunks(2) {
        if h.insert(pair[0].to_vec(), pair[1].to_vec()).is_none() {
            added += 1;
        }
    }
    Ok(added)
}

fn hsetnx(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    match read(m, cx.arg(1), now) {
        Err(e) => return e,
        Ok(Some(h)) if h.contains_key(cx.arg(2)) => return int(0),
        Ok(_) => {}
    }
    m.db.touch(cx.arg(1));
    write(m, cx.arg(1), now).insert(cx.arg(2).to_vec(), cx.arg(3).to_vec());
    int(1)
}

fn hmget(m: &mut Model, cx: &mut Cx) -> Check {
    let h = match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => return e,
        Ok(h) => h,
    };
    let items = cx.args[2..]
        .iter()
        .map(|f| match h.and_then(|h| h.get(&f[..])) {
            Some(v) => bulk_frame(v),
            None => Frame::Null,
        })
        .collect();
    Check::Exact(Frame::Array(items))
}

/// The value of the field named by argument 2, for the one-field readers.
fn field<'m>(m: &'m Model, cx: &Cx) -> Result<Option<&'m Vec<u8>>, Check> {
    Ok(read(m, cx.arg(1), cx.now_ms)?.and_then(|h| h.get(cx.arg(2))))
}

fn hstrlen(m: &mut Model, cx: &mut Cx) -> Check {
    match field(m, cx) {
        Err(e) => e,
        Ok(v) => int(v.map_or(0, |v| v.len()) as i64),
    }
}

fn hexists(m: &mut Model, cx: &mut Cx) -> Check {
    match field(m, cx) {
        Err(e) => e,
        Ok(v) => int(v.is_some() as i64),
    }
}

/// HKEYS (`values` false) / HVALS: an array (in both protocols) in Redis's table order, so
/// checked as a multiset.
fn listing(m: &Model, cx: &Cx, values: bool) -> Check {
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(h) => Check::Unordered(
            h.into_iter()
                .flatten()
                .map(|(k, v)| Bytes::from(if values { v } else { k }.clone()))
                .collect(),
        ),
    }
}

fn hkeys(m: &mut Model, cx: &mut Cx) -> Check {
    listing(m, cx, false)
}

fn hvals(m: &mut Model, cx: &mut Cx) -> Check {
    listing(m, cx, true)
}

fn hget(m: &mut Model, cx: &mut Cx) -> Check {
    match field(m, cx) {
        Err(e) => e,
        Ok(Some(v)) => bulk(v),
        Ok(None) => null(),
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

/// The model computes HINCRBYFLOAT exactly (see `float`); the workload keeps its field's values
/// in that range, so anything else is a workload bug.
fn float_limit(what: &str, cx: &Cx) -> ! {
    panic!(
        "model limitation: {what} in {:?} (the workload should not produce this)",
        cx.args
    )
}

/// Redis checks the increment (and refuses an infinite one) before it looks at the key.
fn hincrbyfloat(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let incr = match float::parse(cx.arg(3)) {
        Ok(float::Num::Inf) => return Check::err("ERR value is NaN or Infinity"),
        Ok(n) => n,
        Err(ParseError::NotFloat) => return Check::err(NOT_FLOAT),
        Err(ParseError::Unsupported) => float_limit("an inexact HINCRBYFLOAT increment", cx),
    };
    let current = match field(m, cx) {
        Err(e) => return e,
        Ok(None) => float::Num::Fixed(0),
        Ok(Some(v)) => match float::parse(v) {
            Ok(n) => n,
            Err(ParseError::NotFloat) => return Check::err("ERR hash value is not a float"),
            Err(ParseError::Unsupported) => float_limit("HINCRBYFLOAT on an inexact value", cx),
        },
    };
    match float::add(current, incr) {
        Ok(Some(s)) => {
            let reply = bulk(s.as_bytes());
            m.db.touch(cx.arg(1));
            write(m, cx.arg(1), now).insert(cx.arg(2).to_vec(), s.into_bytes());
            reply
        }
        Ok(None) => Check::err("ERR increment would produce NaN or Infinity"),
        Err(_) => float_limit("a HINCRBYFLOAT result out of exact range", cx),
    }
}

/// HRANDFIELD key [count [WITHVALUES]]: the count is parsed before the key is looked at.
fn hrandfield(m: &mut Model, cx: &mut Cx) -> Check {
    let (count, values) = match super::random_pick_args(cx, "withvalues") {
        Ok(a) => a,
        Err(e) => return e,
    };
    let h = match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => return e,
        Ok(h) => h,
    };
    let pool: Vec<(Bytes, Frame)> = h
        .into_iter()
        .flatten()
        .map(|(f, v)| (Bytes::from(f.clone()), bulk_frame(v)))
        .collect();
    Check::sample(pool, count, values, cx.proto == Proto::Resp3)
}

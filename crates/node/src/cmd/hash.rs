//! Hash commands: HSET and friends, reads of fields, keys and values, counters, HRANDFIELD and
//! HSCAN.
//!
//! Replies, error texts and the order in which arguments, key types and limits are checked
//! follow Redis 7.0. Randomness (HRANDFIELD) comes only from the node's seeded generator.

use std::collections::BTreeSet;

use lattice_resp::Protocol;
use lattice_store::hash::{Hash, Limits};
use lattice_store::{glob_match, Value};

use crate::args::{is, parse_i64, NOT_FLOAT, NOT_INTEGER, OVERFLOW, SYNTAX};
use crate::cmd::keys::parse_cursor;
use crate::cmd::pubsub::{EVENT_HASH, EVENT_NEW};
use crate::cmd::string::float::{long_double_add, FloatError};
use crate::cmd::typed::{self, Typed};
use crate::command::{spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};

const HASH: &str = "hash";

const WDF: &[&str] = &["write", "denyoom", "fast"];
const WF: &[&str] = &["write", "fast"];
const R: &[&str] = &["readonly"];
const RF: &[&str] = &["readonly", "fast"];

// One line per command reads best as a table.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    spec("hset", -4, WDF, (1, 1, 1), HASH, "2.0.0", "Set the string value of a hash field", hset).with(Flag::LoggedAsCommand),
    spec("hmset", -4, WDF, (1, 1, 1), HASH, "2.0.0", "Set multiple hash fields to multiple values", hmset).with(Flag::LoggedAsCommand),
    spec("hsetnx", 4, WDF, (1, 1, 1), HASH, "2.0.0", "Set the value of a hash field, only if the field does not exist", hsetnx).with(Flag::LoggedAsCommand),
    spec("hget", 3, RF, (1, 1, 1), HASH, "2.0.0", "Get the value of a hash field", hget),
    spec("hmget", -3, RF, (1, 1, 1), HASH, "2.0.0", "Get the values of all the given hash fields", hmget),
    spec("hdel", -3, WF, (1, 1, 1), HASH, "2.0.0", "Delete one or more hash fields", hdel).with(Flag::LoggedAsCommand),
    spec("hlen", 2, RF, (1, 1, 1), HASH, "2.0.0", "Get the number of fields in a hash", hlen),
    spec("hstrlen", 3, RF, (1, 1, 1), HASH, "3.2.0", "Get the length of the value of a hash field", hstrlen),
    spec("hexists", 3, RF, (1, 1, 1), HASH, "2.0.0", "Determine if a hash field exists", hexists),
    spec("hkeys", 2, R, (1, 1, 1), HASH, "2.0.0", "Get all the fields in a hash", hkeys),
    spec("hvals", 2, R, (1, 1, 1), HASH, "2.0.0", "Get all the values in a hash", hvals),
    spec("hgetall", 2, R, (1, 1, 1), HASH, "2.0.0", "Get all the fields and values in a hash", hgetall),
    spec("hincrby", 4, WDF, (1, 1, 1), HASH, "2.0.0", "Increment the integer value of a hash field by the given number", hincrby).with(Flag::LoggedAsCommand).with(Flag::Increments),
    spec("hincrbyfloat", 4, WDF, (1, 1, 1), HASH, "2.6.0", "Increment the float value of a hash field by the given amount", hincrbyfloat).with(Flag::LoggedAsCommand).with(Flag::Increments),
    spec("hrandfield", -2, R, (1, 1, 1), HASH, "6.2.0", "Get one or multiple random fields from a hash", hrandfield),
    spec("hscan", -3, R, (1, 1, 1), HASH, "2.8.0", "Incrementally iterate hash fields and associated values", hscan),
];

pub(crate) use crate::cmd::typed::WrongType;

/// The listpack limits from the configuration (`hash-max-ziplist-*` are aliases).
fn limits(core: &Core) -> Limits {
    Limits {
        max_entries: core.config.encoding.hash_max_entries,
        max_value: core.config.encoding.hash_max_value,
    }
}

fn hash_in(value: &mut Value) -> Option<&mut Hash> {
    Hash::of_mut(value)
}

/// The hash at `key` for writing, created empty (and stored) when missing. The flag says
/// whether it was created; the caller must store something in it before returning.
fn write_or_create<'c>(
    core: &'c mut Core,
    key: &[u8],
    now_ms: u64,
) -> Result<(&'c mut Hash, bool), WrongType> {
    let created = match core.lookup_write(key, now_ms) {
        Some(e) => {
            if !matches!(e.value, Value::Hash(_)) {
                return Err(WrongType);
            }
            false
        }
        None => {
            core.db
                .insert(key, Value::Hash(Box::new(Hash::new())), None, now_ms);
            true
        }
    };
    let e = core.db.get_live(key, now_ms, |_| {}).expect("present");
    Ok((hash_in(&mut e.value).expect("checked above"), created))
}

/// Reports a write to the hash at `key` as `event` (and `new` when the key was created).
fn changed(core: &mut Core, key: &[u8], created: bool, event: &str) {
    if created {
        core.notify(EVENT_NEW, "new", key);
    }
    core.modified(key);
    core.notify(EVENT_HASH, event, key);
}

fn set_fields(core: &mut Core, call: &mut Call, name: &str) -> Option<usize> {
    if call.argc() % 2 == 1 {
        call.error(&format!(
            "ERR wrong number of arguments for '{name}' command"
        ));
        return None;
    }
    let lim = limits(core);
    let key = call.arg(1);
    let Ok((h, created)) = write_or_create(core, key, call.now_ms) else {
        call.wrong_type();
        return None;
    };
    let mut added = 0;
    for pair in call.args[2..].chunks_exact(2) {
        if h.insert(&pair[0], &pair[1], lim) {
            added += 1;
        }
    }
    changed(core, key, created, "hset");
    Some(added)
}

fn hset(core: &mut Core, call: &mut Call) {
    if let Some(n) = set_fields(core, call, "hset") {
        call.out.integer(n as i64);
    }
}

fn hmset(core: &mut Core, call: &mut Call) {
    if set_fields(core, call, "hmset").is_some() {
        call.ok();
    }
}

fn hsetnx(core: &mut Core, call: &mut Call) {
    let lim = limits(core);
    let key = call.arg(1);
    let (field, value) = (call.arg(2), call.arg(3));
    let Ok((h, created)) = write_or_create(core, key, call.now_ms) else {
        return call.wrong_type();
    };
    if h.contains(field) {
        return call.out.integer(0);
    }
    h.insert(field, value, lim);
    changed(core, key, created, "hset");
    call.out.integer(1);
}

fn hget(core: &mut Core, call: &mut Call) {
    match typed::read::<Hash>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(h) => match h.and_then(|h| h.get(call.arg(2))) {
            Some(v) => call.out.bulk(v),
            None => call.out.null(),
        },
    }
}

fn hmget(core: &mut Core, call: &mut Call) {
    match typed::read::<Hash>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(h) => {
            let h = h.map(|h| &*h);
            call.out.array_len(call.argc() - 2);
            for f in &call.args[2..] {
                match h.and_then(|h| h.get(f)) {
                    Some(v) => call.out.bulk(v),
                    None => call.out.null(),
                }
            }
        }
    }
}

fn hdel(core: &mut Core, call: &mut Call) {
    typed::remove_members::<Hash>(core, call, "hdel", |h, f| h.remove(f));
}

fn hlen(core: &mut Core, call: &mut Call) {
    match typed::read::<Hash>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(h) => call.out.integer(h.map_or(0, |h| h.len()) as i64),
    }
}

fn hstrlen(core: &mut Core, call: &mut Call) {
    match typed::read::<Hash>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(h) => {
            let n = h.and_then(|h| h.get(call.arg(2))).map_or(0, |v| v.len());
            call.out.integer(n as i64)
        }
    }
}

fn hexists(core: &mut Core, call: &mut Call) {
    match typed::read::<Hash>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(h) => call
            .out
            .integer(h.is_some_and(|h| h.contains(call.arg(2))) as i64),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Keys,
    Values,
    Both,
}

fn getall_generic(core: &mut Core, call: &mut Call, part: Part) {
    let h = match typed::read::<Hash>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(h) => h,
    };
    let len = h.as_ref().map_or(0, |h| h.len());
    if part == Part::Both {
        call.out.map_len(len);
    } else {
        call.out.array_len(len);
    }
    let Some(h) = h else {
        return;
    };
    for (k, v) in h.iter() {
        if part != Part::Values {
            call.out.bulk(k);
        }
        if part != Part::Keys {
            call.out.bulk(v);
        }
    }
}

fn hkeys(core: &mut Core, call: &mut Call) {
    getall_generic(core, call, Part::Keys);
}

fn hvals(core: &mut Core, call: &mut Call) {
    getall_generic(core, call, Part::Values);
}

fn hgetall(core: &mut Core, call: &mut Call) {
    getall_generic(core, call, Part::Both);
}

/// Stores `value` under `field` of the hash at `key` (created if missing) and reports it.
fn store_field(core: &mut Core, key: &[u8], field: &[u8], value: &[u8], event: &str, now_ms: u64) {
    let lim = limits(core);
    let Ok((h, created)) = write_or_create(core, key, now_ms) else {
        unreachable!("type checked by the caller");
    };
    h.insert(field, value, lim);
    changed(core, key, created, event);
}

fn hincrby(core: &mut Core, call: &mut Call) {
    let Some(incr) = parse_i64(call.arg(3)) else {
        return call.error(NOT_INTEGER);
    };
    let (key, field) = (call.arg(1), call.arg(2));
    let now_ms = call.now_ms;
    let current = match typed::write::<Hash>(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(h) => match h.and_then(|h| h.get(field)) {
            None => 0,
            Some(v) => match parse_i64(v) {
                Some(n) => n,
                None => return call.error("ERR hash value is not an integer"),
            },
        },
    };
    let Some(sum) = current.checked_add(incr) else {
        return call.error(OVERFLOW);
    };
    store_field(
        core,
        key,
        field,
        sum.to_string().as_bytes(),
        "hincrby",
        now_ms,
    );
    call.out.integer(sum);
}

fn hincrbyfloat(core: &mut Core, call: &mut Call) {
    let incr = call.arg(3);
    // The increment alone first: a number, and a finite one.
    match long_double_add(None, incr) {
        Ok(_) => {}
        Err(FloatError::NotAFloat) => return call.error(NOT_FLOAT),
        Err(FloatError::NanOrInf) => return call.error("ERR value is NaN or Infinity"),
    }
    let (key, field) = (call.arg(1), call.arg(2));
    let now_ms = call.now_ms;
    let result = match typed::write::<Hash>(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(h) => long_double_add(h.and_then(|h| h.get(field)), incr),
    };
    let value = match result {
        Ok(v) => v,
        Err(FloatError::NotAFloat) => return call.error("ERR hash value is not a float"),
        Err(FloatError::NanOrInf) => {
            return call.error("ERR increment would produce NaN or Infinity")
        }
    };
    store_field(core, key, field, &value, "hincrbyfloat", now_ms);
    call.out.bulk(&value);
}

/// A uniformly drawn index below `n` (n > 0) from the node's generator.
fn random_index(core: &mut Core, n: usize) -> usize {
    (core.random_u64() % n as u64) as usize
}

/// `count` distinct positions below `n` (count < n), uniformly chosen (Floyd's algorithm),
/// in ascending order.
fn distinct_picks(core: &mut Core, n: usize, count: usize) -> Vec<usize> {
    let mut chosen = BTreeSet::new();
    for j in n - count..n {
        let t = random_index(core, j + 1);
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    chosen.into_iter().collect()
}

fn hrandfield(core: &mut Core, call: &mut Call) {
    if call.argc() >= 3 {
        let count = match parse_i64(call.arg(2)) {
            None => return call.error(NOT_INTEGER),
            Some(i64::MIN) => return call.error(
                "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
            ),
            Some(n) => n,
        };
        if call.argc() > 4 || (call.argc() == 4 && !is(call.arg(3), "withvalues")) {
            return call.error(SYNTAX);
        }
        let withvalues = call.argc() == 4;
        if withvalues && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
            return call.error("ERR value is out of range");
        }
        return hrandfield_count(core, call, count, withvalues);
    }
    let len = match typed::read::<Hash>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.null(),
        Ok(Some(h)) => h.len(),
    };
    let i = random_index(core, len);
    let h = typed::read::<Hash>(core, call.arg(1), call.now_ms)
        .ok()
        .flatten()
        .expect("looked up above");
    let (k, _) = h.nth(i).expect("index in range");
    call.out.bulk(k);
}

fn hrandfield_count(core: &mut Core, call: &mut Call, count: i64, withvalues: bool) {
    let key = call.arg(1);
    let now_ms = call.now_ms;
    let len = match typed::read::<Hash>(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.array_len(0),
        Ok(Some(h)) => h.len(),
    };
    if count == 0 {
        return call.out.array_len(0);
    }
    let picks: Vec<usize> = if count < 0 {
        // Repeats allowed.
        let n = count.unsigned_abs() as usize;
        (0..n).map(|_| random_index(core, len)).collect()
    } else if count as u64 >= len as u64 {
        (0..len).collect()
    } else {
        distinct_picks(core, len, count as usize)
    };
    let h = typed::read::<Hash>(core, key, now_ms)
        .ok()
        .flatten()
        .expect("looked up above");
    let resp3 = call.out.protocol() == Protocol::Resp3;
    if withvalues && !resp3 {
        call.out.array_len(picks.len() * 2);
    } else {
        call.out.array_len(picks.len());
    }
    for i in picks {
        let (k, v) = h.nth(i).expect("index in range");
        if withvalues && resp3 {
            call.out.array_len(2);
        }
        call.out.bulk(k);
        if withvalues {
            call.out.bulk(v);
        }
    }
}

fn hscan(core: &mut Core, call: &mut Call) {
    let Some(cursor) = parse_cursor(call.arg(2)) else {
        return call.error("ERR invalid cursor");
    };
    let h = match typed::read::<Hash>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => {
            call.out.array_len(2);
            call.out.bulk(b"0");
            return call.out.array_len(0);
        }
        Ok(Some(h)) => h,
    };
    let mut pattern: Option<&[u8]> = None;
    let mut count: usize = 10;
    let mut i = 3;
    while i < call.argc() {
        let more = i + 1 < call.argc();
        if is(call.arg(i), "count") && more {
            match parse_i64(call.arg(i + 1)) {
                None => return call.error(NOT_INTEGER),
                Some(n) if n < 1 => return call.error(SYNTAX),
                Some(n) => count = n as usize,
            }
        } else if is(call.arg(i), "match") && more {
            pattern = Some(call.arg(i + 1)).filter(|p| *p != b"*");
        } else {
            return call.error(SYNTAX);
        }
        i += 2;
    }
    let (next, pairs) = h.scan(cursor, count);
    let pairs: Vec<(&[u8], &[u8])> = pairs
        .into_iter()
        .filter(|(k, _)| pattern.is_none_or(|p| glob_match(p, k, false)))
        .collect();
    call.out.array_len(2);
    call.out.bulk(next.to_string().as_bytes());
    call.out.array_len(pairs.len() * 2);
    for (k, v) in pairs {
        call.out.bulk(k);
        call.out.bulk(v);
    }
}

#[cfg(test)]
mod tests {
    use crate::cmd::list::testkit::*;

    #[test]
    fn set_get_delete() {
        let mut h = node();
        h.check("HSET h a 1 b 2", &int(2));
        h.check("HSET h a 10 c 3", &int(1));
        h.check(
            "HSET h a",
            &err("ERR wrong number of arguments for 'hset' command"),
        );
        h.check(
            "HMSET h a",
            &err("ERR wrong number of arguments for 'hmset' command"),
        );
        h.check("HMSET h d 4", OK);
        h.check("HSETNX h a x", &int(0));
        h.check("HSETNX h e 5", &int(1));
        h.check("HGET h a", &bulk("10"));
        h.check("HGET h zz", NIL);
        h.check("HGET nokey a", NIL);
        h.check(
            "HMGET h a zz b",
            &format!("*3\r\n{}{}{}", bulk("10"), NIL, bulk("2")),
        );
        h.check("HMGET nokey a", &format!("*1\r\n{NIL}"));
        h.check("HLEN h", &int(5));
        h.check("HSTRLEN h a", &int(2));
        h.check("HSTRLEN h zz", &int(0));
        h.check("HEXISTS h a", &int(1));
        h.check("HEXISTS h zz", &int(0));
        h.check("HKEYS h", &arr(&["a", "b", "c", "d", "e"]));
        h.check("HVALS h", &arr(&["10", "2", "3", "4", "5"]));
        h.check("HDEL h b zz", &int(1));
        h.check(
            "HGETALL h",
            &arr(&["a", "10", "c", "3", "d", "4", "e", "5"]),
        );
        h.check("HGETALL nokey", &arr(&[]));
        h.check("OBJECT ENCODING h", &bulk("listpack"));
        h.check("HDEL h a c d e zz", &int(4));
        h.check("EXISTS h", &int(0));
        h.line(1, "HELLO 3");
        h.line(1, "HSET h a 1");
        h.check("HGETALL h", &format!("%1\r\n{}{}", bulk("a"), bulk("1")));
        h.check("HGETALL nokey", "%0\r\n");
        h.line(1, "SET s v");
        for c in [
            "HSET s a b",
            "HSETNX s a b",
            "HGET s a",
            "HMGET s a",
            "HDEL s a",
            "HLEN s",
            "HSTRLEN s a",
            "HEXISTS s a",
            "HKEYS s",
            "HVALS s",
            "HGETALL s",
            "HINCRBY s a 1",
            "HINCRBYFLOAT s a 1",
            "HRANDFIELD s",
            "HRANDFIELD s 1",
            "HSCAN s 0",
        ] {
            h.check(c, WRONGTYPE);
        }
    }

    #[test]
    fn encodings_follow_the_config() {
        let mut h = node();
        h.line(1, "HSET h f v g v");
        h.check("OBJECT ENCODING h", &bulk("listpack"));
        h.line(1, &format!("HSET h f {}", "x".repeat(65)));
        h.check("OBJECT ENCODING h", &bulk("hashtable"));
        h.line(1, "HDEL h f");
        h.line(1, "HSET h f v");
        h.check("OBJECT ENCODING h", &bulk("hashtable"));
        h.line(1, "CONFIG SET hash-max-ziplist-entries 4");
        h.line(1, "HSET big a 1 b 2 c 3 d 4");
        h.check("OBJECT ENCODING big", &bulk("listpack"));
        h.line(1, "HSET big e 5");
        h.check("OBJECT ENCODING big", &bulk("hashtable"));
        h.line(1, "CONFIG SET hash-max-listpack-value 8");
        h.line(1, "HSET s tmp 0");
        h.line(1, "HINCRBYFLOAT s tmp 0.000005");
        h.check("OBJECT ENCODING s", &bulk("listpack"));
        h.line(1, "HINCRBYFLOAT s tmp 0.0000005");
        h.check("OBJECT ENCODING s", &bulk("hashtable"));
    }

    #[test]
    fn counters() {
        let mut h = node();
        h.check("HINCRBY h n 5", &int(5));
        h.check("HINCRBY h n -7", &int(-2));
        h.check(
            "HINCRBY h n x",
            &err("ERR value is not an integer or out of range"),
        );
        h.line(1, "HSET h s abc m 9223372036854775807");
        h.raw(1, &[b"HSET", b"h", b"sp", b" 1"]);
        h.check("HINCRBY h sp 1", &err("ERR hash value is not an integer"));
        h.check("HINCRBY h s 1", &err("ERR hash value is not an integer"));
        h.check(
            "HINCRBY h m 1",
            &err("ERR increment or decrement would overflow"),
        );
        h.check("HINCRBYFLOAT h f 1.23", &bulk("1.23"));
        h.check("HINCRBYFLOAT h f 0.77", &bulk("2"));
        h.check("HINCRBYFLOAT h f -0.1", &bulk("1.9"));
        h.check("HINCRBYFLOAT h n 1.5", &bulk("-0.5"));
        h.check("HINCRBYFLOAT h s 1", &err("ERR hash value is not a float"));
        h.check(
            "HINCRBYFLOAT h f abc",
            &err("ERR value is not a valid float"),
        );
        h.check(
            "HINCRBYFLOAT h f +inf",
            &err("ERR value is NaN or Infinity"),
        );
        h.check(
            "HINCRBYFLOAT nokey f +inf",
            &err("ERR value is NaN or Infinity"),
        );
        h.check("EXISTS nokey", &int(0));
        assert!(h
            .line(1, "HINCRBYFLOAT h g 1e4932")
            .starts_with("$4933\r\n1000"));
        h.check(
            "HINCRBYFLOAT h g 1e4932",
            &err("ERR increment would produce NaN or Infinity"),
        );
        h.raw(1, &[b"HSET", b"h", b"z", b"1\x002"]);
        h.check("HINCRBYFLOAT h z 1", &err("ERR hash value is not a float"));
    }

    #[test]
    fn hrandfield() {
        let mut h = node();
        h.check("HRANDFIELD nokey", NIL);
        h.check("HRANDFIELD nokey 5", &arr(&[]));
        h.check("HRANDFIELD nokey 5 WITHVALUES", &arr(&[]));
        h.check("HRANDFIELD nokey 0 foo", &err("ERR syntax error"));
        h.line(1, "HSET h a 1 b 2 c 3");
        h.check("HRANDFIELD h 0", &arr(&[]));
        h.check(
            "HRANDFIELD h x",
            &err("ERR value is not an integer or out of range"),
        );
        h.check("HRANDFIELD h -9223372036854775808", &err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"));
        h.check(
            "HRANDFIELD h -9223372036854770000 WITHVALUES",
            &err("ERR value is out of range"),
        );
        h.check("HRANDFIELD h 10", &arr(&["a", "b", "c"]));
        h.check(
            "HRANDFIELD h 3 WITHVALUES",
            &arr(&["a", "1", "b", "2", "c", "3"]),
        );
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..100 {
            seen.insert(h.line(1, "HRANDFIELD h"));
        }
        assert_eq!(seen.len(), 3);
        let r = h.line(1, "HRANDFIELD h -10");
        assert!(r.starts_with("*10\r\n"));
        let r = h.line(1, "HRANDFIELD h -10 withvalues");
        assert!(r.starts_with("*20\r\n"));
        let r = h.line(1, "HRANDFIELD h 2");
        assert!(r.starts_with("*2\r\n"));
        let picked: Vec<&str> = r.split("\r\n").skip(2).step_by(2).collect();
        assert_ne!(picked[0], picked[1]);
        h.line(1, "HELLO 3");
        let r = h.line(1, "HRANDFIELD h 2 WITHVALUES");
        assert!(r.starts_with("*2\r\n*2\r\n"), "{r}");
    }

    #[test]
    fn hscan() {
        let mut h = node();
        h.check("HSCAN nokey 0", "*2\r\n$1\r\n0\r\n*0\r\n");
        h.line(1, "HSET h a 1 b 2 bb 3");
        h.check(
            "HSCAN h 0",
            &format!(
                "*2\r\n{}{}",
                bulk("0"),
                arr(&["a", "1", "b", "2", "bb", "3"])
            ),
        );
        h.check(
            "HSCAN h 0 MATCH b* COUNT 1",
            &format!("*2\r\n{}{}", bulk("0"), arr(&["b", "2", "bb", "3"])),
        );
        h.check("HSCAN h x", &err("ERR invalid cursor"));
        h.check("HSCAN h 18446744073709551616", &err("ERR invalid cursor"));
        h.check(
            "HSCAN h -1 COUNT 1",
            &format!(
                "*2\r\n{}{}",
                bulk("0"),
                arr(&["a", "1", "b", "2", "bb", "3"])
            ),
        );
        h.check("HSCAN h 0 COUNT 0", &err("ERR syntax error"));
        h.check("HSCAN h 0 TYPE string", &err("ERR syntax error"));
        for i in 0..1000 {
            h.line(1, &format!("HSET big f{i} v{i}"));
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = "0".to_string();
        let mut calls = 0;
        loop {
            let r = h.line(1, &format!("HSCAN big {cursor} COUNT 50"));
            let parts: Vec<&str> = r.split("\r\n").collect();
            cursor = parts[2].to_string();
            for f in parts[5..].iter().step_by(4) {
                if !f.is_empty() {
                    seen.insert(f.to_string());
                }
            }
            calls += 1;
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(seen.len(), 1000);
        assert!(calls >= 20, "{calls}");
    }
}

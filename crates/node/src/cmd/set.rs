//! Set commands: SADD, SREM, SMEMBERS, SISMEMBER, SMISMEMBER, SCARD, SPOP, SRANDMEMBER, SMOVE,
//! SINTER, SINTERCARD, SINTERSTORE, SUNION, SUNIONSTORE, SDIFF, SDIFFSTORE, SSCAN.
//!
//! Replies, error texts and the order in which arguments, key types and limits are checked
//! follow Redis 7.0. Randomness (SPOP, SRANDMEMBER) comes only from the node's seeded
//! generator.

#[cfg(test)]
pub(crate) mod tests;

use std::borrow::Cow;

use bytes::Bytes;
use lattice_store::{glob_match, Set, Value};
use rand_chacha::rand_core::Rng;
use rand_chacha::ChaCha8Rng;

use crate::args::{is, parse_i64, NOT_INTEGER, SYNTAX};
use crate::cmd::keys::parse_cursor;
use crate::cmd::pubsub::{EVENT_GENERIC, EVENT_NEW, EVENT_SET};
use crate::cmd::typed;
use crate::command::{spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};

const SET: &str = "set";

const W: &[&str] = &["write", "denyoom"];
const WDF: &[&str] = &["write", "denyoom", "fast"];
const WF: &[&str] = &["write", "fast"];
const R: &[&str] = &["readonly"];
const RF: &[&str] = &["readonly", "fast"];

// One line per command reads best as a table.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    spec("sadd", -3, WDF, (1, 1, 1), SET, "1.0.0", "Add one or more members to a set", sadd).with(Flag::LoggedAsCommand),
    spec("srem", -3, WF, (1, 1, 1), SET, "1.0.0", "Remove one or more members from a set", srem).with(Flag::LoggedAsCommand),
    spec("smembers", 2, R, (1, 1, 1), SET, "1.0.0", "Get all the members in a set", smembers),
    spec("sismember", 3, RF, (1, 1, 1), SET, "1.0.0", "Determine if a given value is a member of a set", sismember),
    spec("smismember", -3, RF, (1, 1, 1), SET, "6.2.0", "Returns the membership associated with the given elements for a set", smismember),
    spec("scard", 2, RF, (1, 1, 1), SET, "1.0.0", "Get the number of members in a set", scard),
    spec("spop", -2, WF, (1, 1, 1), SET, "1.0.0", "Remove and return one or multiple random members from a set", spop),
    spec("srandmember", -2, R, (1, 1, 1), SET, "1.0.0", "Get one or multiple random members from a set", srandmember),
    spec("smove", 4, WF, (1, 2, 1), SET, "1.0.0", "Move a member from one set to another", smove),
    spec("sinter", -2, R, (1, -1, 1), SET, "1.0.0", "Intersect multiple sets", sinter),
    spec("sintercard", -3, &["readonly", "movablekeys"], (0, 0, 0), SET, "7.0.0", "Intersect multiple sets and return the cardinality of the result", sintercard),
    spec("sinterstore", -3, W, (1, -1, 1), SET, "1.0.0", "Intersect multiple sets and store the resulting set in a key", sinterstore),
    spec("sunion", -2, R, (1, -1, 1), SET, "1.0.0", "Add multiple sets", sunion),
    spec("sunionstore", -3, W, (1, -1, 1), SET, "1.0.0", "Add multiple sets and store the resulting set in a key", sunionstore),
    spec("sdiff", -2, R, (1, -1, 1), SET, "1.0.0", "Subtract multiple sets", sdiff),
    spec("sdiffstore", -3, W, (1, -1, 1), SET, "1.0.0", "Subtract multiple sets and store the resulting set in a key", sdiffstore),
    spec("sscan", -3, R, (1, 1, 1), SET, "2.8.0", "Incrementally iterate Set elements", sscan),
];

/// `getPositiveLongFromObjectOrReply` without a custom message.
pub(crate) const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";

pub(crate) use crate::cmd::typed::WrongType;

/// `set-max-intset-entries`.
pub(crate) fn max_intset_entries(core: &Core) -> usize {
    core.config.encoding.set_max_intset_entries
}

/// Replaces `dst` with `result` (or deletes it when `result` is empty), replies with the
/// cardinality and reports it as `event`, as the *STORE commands do.
fn store_result(core: &mut Core, call: &mut Call, dst: &[u8], result: Set, event: &str) {
    let now_ms = call.now_ms;
    let n = result.len();
    if n > 0 {
        let created = core
            .db
            .insert(dst, Value::Set(Box::new(result)), None, now_ms)
            .is_none();
        call.out.integer(n as i64);
        if created {
            core.notify(EVENT_NEW, "new", dst);
        }
        core.modified(dst);
        core.notify(EVENT_SET, event, dst);
    } else {
        call.out.integer(0);
        if core.exists(dst, now_ms) {
            core.db.remove(dst);
            core.modified(dst);
            core.notify(EVENT_GENERIC, "del", dst);
        }
    }
}

fn sadd(core: &mut Core, call: &mut Call) {
    let key = call.arg(1);
    let now_ms = call.now_ms;
    let max = max_intset_entries(core);
    let members = &call.args[2..];
    let (added, created) = match typed::write::<Set>(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(Some(s)) => (members.iter().filter(|m| s.insert(m, max)).count(), false),
        Ok(None) => {
            let mut s = Set::new();
            let n = members.iter().filter(|m| s.insert(m, max)).count();
            core.db.insert(key, Value::Set(Box::new(s)), None, now_ms);
            (n, true)
        }
    };
    if created {
        core.notify(EVENT_NEW, "new", key);
    }
    if added > 0 {
        core.modified(key);
        core.notify(EVENT_SET, "sadd", key);
    }
    call.out.integer(added as i64);
}

fn srem(core: &mut Core, call: &mut Call) {
    typed::remove_members::<Set>(core, call, "srem", |s, m| s.remove(m));
}

fn smembers(core: &mut Core, call: &mut Call) {
    match typed::read::<Set>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(None) => call.out.set_len(0),
        Ok(Some(s)) => {
            call.out.set_len(s.len());
            for m in s.iter() {
                call.out.bulk(&m);
            }
        }
    }
}

fn sismember(core: &mut Core, call: &mut Call) {
    let member = call.arg(2);
    match typed::read::<Set>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(s) => call
            .out
            .integer(s.is_some_and(|s| s.contains(member)) as i64),
    }
}

fn smismember(core: &mut Core, call: &mut Call) {
    match typed::read::<Set>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(s) => {
            let s = s.map(|s| &*s);
            call.out.array_len(call.argc() - 2);
            for m in &call.args[2..] {
                call.out.integer(s.is_some_and(|s| s.contains(m)) as i64);
            }
        }
    }
}

fn scard(core: &mut Core, call: &mut Call) {
    match typed::read::<Set>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(s) => call.out.integer(s.map_or(0, |s| s.len()) as i64),
    }
}

/// A uniformly drawn index below `n` (n > 0) from the node's generator.
pub(crate) fn random_index(core: &mut Core, n: usize) -> usize {
    draw(&mut core.rng, n)
}

fn spop(core: &mut Core, call: &mut Call) {
    if call.argc() > 3 {
        return call.syntax_error();
    }
    let key = call.arg(1);
    let now_ms = call.now_ms;
    if call.argc() == 3 {
        return spop_count(core, call);
    }
    let len = match typed::write::<Set>(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.null(),
        Ok(Some(s)) => s.len(),
    };
    let i = random_index(core, len);
    let Ok(Some(s)) = typed::write::<Set>(core, key, now_ms) else {
        unreachable!("looked up above")
    };
    let m = s.remove_at(i).expect("index in range");
    call.out.bulk(&m);
    typed::removed_from::<Set>(core, key, "spop");
}

fn spop_count(core: &mut Core, call: &mut Call) {
    let key = call.arg(1);
    let now_ms = call.now_ms;
    let count = match parse_i64(call.arg(2)) {
        Some(n) if n >= 0 => n as u64,
        _ => return call.error(MUST_BE_POSITIVE),
    };
    let len = match typed::write::<Set>(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.set_len(0),
        Ok(Some(s)) => s.len(),
    };
    if count == 0 {
        return call.out.set_len(0);
    }
    if count >= len as u64 {
        // Everything goes: reply with the whole set and delete the key.
        let Some(Value::Set(s)) = core.db.remove(key).map(|e| e.into_value()) else {
            unreachable!("looked up above")
        };
        call.out.set_len(s.len());
        for m in s.iter() {
            call.out.bulk(&m);
        }
        core.modified(key);
        core.notify(EVENT_SET, "spop", key);
        core.notify(EVENT_GENERIC, "del", key);
        return;
    }
    let count = count as usize;
    let mut popped = Vec::with_capacity(count);
    for n in (len - count + 1..=len).rev() {
        let i = random_index(core, n);
        let Ok(Some(s)) = typed::write::<Set>(core, key, now_ms) else {
            unreachable!("looked up above")
        };
        popped.push(s.remove_at(i).expect("index in range"));
    }
    call.out.set_len(popped.len());
    for m in &popped {
        call.out.bulk(m);
    }
    typed::removed_from::<Set>(core, key, "spop");
}

fn srandmember(core: &mut Core, call: &mut Call) {
    if call.argc() > 3 {
        return call.syntax_error();
    }
    let key = call.arg(1);
    let now_ms = call.now_ms;
    if call.argc() == 2 {
        let len = match typed::read::<Set>(core, key, now_ms) {
            Err(WrongType) => return call.wrong_type(),
            Ok(None) => return call.out.null(),
            Ok(Some(s)) => s.len(),
        };
        let i = random_index(core, len);
        let s = typed::peek::<Set>(&core.db, key).expect("looked up above");
        return call.out.bulk(&s.get(i).expect("index in range"));
    }
    let count = match parse_i64(call.arg(2)) {
        None => return call.error(NOT_INTEGER),
        Some(i64::MIN) => {
            return call.error(
                "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
            )
        }
        Some(n) => n,
    };
    let len = match typed::read::<Set>(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.array_len(0),
        Ok(Some(s)) => s.len(),
    };
    if count == 0 {
        return call.out.array_len(0);
    }
    if count < 0 {
        // Repeats allowed: streamed, since the count is the client's to choose.
        let n = count.unsigned_abs();
        call.out.array_len(n as usize);
        let s = typed::peek::<Set>(&core.db, key).expect("looked up above");
        for _ in 0..n {
            let i = draw(&mut core.rng, len);
            call.out.bulk(&s.get(i).expect("index in range"));
        }
        return;
    }
    let picks = distinct_picks(core, len, count as u64);
    let s = typed::peek::<Set>(&core.db, key).expect("looked up above");
    call.out.array_len(picks.len());
    for i in picks {
        call.out.bulk(&s.get(i).expect("index in range"));
    }
}

/// A uniformly drawn index below `n` (n > 0) from the node's generator.
pub(crate) fn draw(rng: &mut ChaCha8Rng, n: usize) -> usize {
    (rng.next_u64() % n as u64) as usize
}

/// `count` distinct positions below `len` (> 0) drawn at random, or all of them in order when
/// `count >= len`.
pub(crate) fn distinct_picks(core: &mut Core, len: usize, count: u64) -> Vec<usize> {
    if count >= len as u64 {
        return (0..len).collect();
    }
    let count = count as usize;
    if count * 3 > len {
        // Dense: a partial Fisher-Yates shuffle of all positions.
        let mut all: Vec<usize> = (0..len).collect();
        for k in 0..count {
            let j = k + random_index(core, len - k);
            all.swap(k, j);
        }
        all.truncate(count);
        all
    } else {
        // Sparse: draw until enough distinct positions.
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::with_capacity(count);
        while out.len() < count {
            let i = random_index(core, len);
            if seen.insert(i) {
                out.push(i);
            }
        }
        out
    }
}

fn smove(core: &mut Core, call: &mut Call) {
    let (src, dst, member) = (call.arg(1), call.arg(2), call.arg(3));
    let now_ms = call.now_ms;
    let src_type = core.lookup_write(src, now_ms).map(|e| e.value.type_name());
    let dst_type = core.lookup_write(dst, now_ms).map(|e| e.value.type_name());
    let Some(src_type) = src_type else {
        return call.out.integer(0);
    };
    if src_type != "set" || dst_type.is_some_and(|t| t != "set") {
        return call.wrong_type();
    }
    if src == dst {
        let s = typed::peek::<Set>(&core.db, src).expect("looked up above");
        return call.out.integer(s.contains(member) as i64);
    }
    let Ok(Some(s)) = typed::write::<Set>(core, src, now_ms) else {
        unreachable!("looked up above")
    };
    if !s.remove(member) {
        return call.out.integer(0);
    }
    typed::removed_from::<Set>(core, src, "srem");
    let max = max_intset_entries(core);
    let (added, created) = match typed::write::<Set>(core, dst, now_ms) {
        Ok(Some(d)) => (d.insert(member, max), false),
        _ => {
            let mut d = Set::new();
            d.insert(member, max);
            core.db.insert(dst, Value::Set(Box::new(d)), None, now_ms);
            (true, true)
        }
    };
    if created {
        core.notify(EVENT_NEW, "new", dst);
    }
    if added {
        core.modified(dst);
        core.notify(EVENT_SET, "sadd", dst);
    }
    call.out.integer(1);
}

/// Looks up `keys` for reading in order, as Redis's multi-set commands do: `Err` at the first
/// key of another type, otherwise whether every key exists.
fn lookup_sets(core: &mut Core, keys: &[Bytes], now_ms: u64) -> Result<bool, WrongType> {
    let mut all_present = true;
    for k in keys {
        match core
            .lookup_read(k, now_ms)
            .map(|e| matches!(e.value, Value::Set(_)))
        {
            None => all_present = false,
            Some(false) => return Err(WrongType),
            Some(true) => {}
        }
    }
    Ok(all_present)
}

/// Members of the intersection of `sets` (smallest first), in the smallest set's order,
/// at most `limit` of them (0 = no limit).
fn intersection<'a>(sets: &[&'a Set], limit: usize) -> impl Iterator<Item = Cow<'a, [u8]>> + 'a {
    let mut sorted: Vec<&'a Set> = sets.to_vec();
    sorted.sort_by_key(|s| s.len());
    let first = sorted[0];
    let rest: Vec<&'a Set> = sorted[1..].to_vec();
    let limit = if limit == 0 { usize::MAX } else { limit };
    first
        .iter()
        .filter(move |m| rest.iter().all(|s| s.contains(m)))
        .take(limit)
}

fn sinter_generic(core: &mut Core, call: &mut Call, keys: &[Bytes], dst: Option<&[u8]>) {
    let now_ms = call.now_ms;
    match lookup_sets(core, keys, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(false) => {
            return match dst {
                Some(dst) => store_result(core, call, dst, Set::new(), "sinterstore"),
                None => call.out.set_len(0),
            }
        }
        Ok(true) => {}
    }
    let sets: Vec<&Set> = keys
        .iter()
        .map(|k| typed::peek::<Set>(&core.db, k).expect("looked up above"))
        .collect();
    match dst {
        None => {
            let members: Vec<Cow<[u8]>> = intersection(&sets, 0).collect();
            call.out.set_len(members.len());
            for m in &members {
                call.out.bulk(m);
            }
        }
        Some(dst) => {
            let max = max_intset_entries(core);
            let mut result = Set::new();
            for m in intersection(&sets, 0) {
                result.insert(&m, max);
            }
            store_result(core, call, dst, result, "sinterstore");
        }
    }
}

fn sinter(core: &mut Core, call: &mut Call) {
    sinter_generic(core, call, &call.args[1..], None);
}

fn sinterstore(core: &mut Core, call: &mut Call) {
    sinter_generic(core, call, &call.args[2..], Some(call.arg(1)));
}

/// Parses a `numkeys` argument of SINTERCARD-like commands (1..=LONG_MAX, else `message`).
fn numkeys_arg(arg: &[u8], message: &'static str) -> Result<usize, &'static str> {
    match parse_i64(arg) {
        Some(n) if n >= 1 => Ok(n as usize),
        _ => Err(message),
    }
}

fn sintercard(core: &mut Core, call: &mut Call) {
    let numkeys = match numkeys_arg(call.arg(1), "ERR numkeys should be greater than 0") {
        Ok(n) => n,
        Err(e) => return call.error(e),
    };
    if numkeys > call.argc() - 2 {
        return call.error("ERR Number of keys can't be greater than number of args");
    }
    let mut limit = 0usize;
    let mut i = 2 + numkeys;
    while i < call.argc() {
        if is(call.arg(i), "limit") && i + 1 < call.argc() {
            match parse_i64(call.arg(i + 1)) {
                Some(n) if n >= 0 => limit = n as usize,
                _ => return call.error("ERR LIMIT can't be negative"),
            }
            i += 2;
        } else {
            return call.syntax_error();
        }
    }
    let keys = &call.args[2..2 + numkeys];
    match lookup_sets(core, keys, call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(false) => return call.out.integer(0),
        Ok(true) => {}
    }
    let sets: Vec<&Set> = keys
        .iter()
        .map(|k| typed::peek::<Set>(&core.db, k).expect("looked up above"))
        .collect();
    let n = intersection(&sets, limit).count();
    call.out.integer(n as i64);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Union,
    Diff,
}

fn sunion_diff_generic(
    core: &mut Core,
    call: &mut Call,
    keys: &[Bytes],
    dst: Option<&[u8]>,
    op: Op,
) {
    let now_ms = call.now_ms;
    if lookup_sets(core, keys, now_ms).is_err() {
        return call.wrong_type();
    }
    let max = max_intset_entries(core);
    let sets: Vec<Option<&Set>> = keys
        .iter()
        .map(|k| typed::peek::<Set>(&core.db, k))
        .collect();
    let mut result = Set::new();
    match op {
        Op::Union => {
            for s in sets.iter().flatten() {
                for m in s.iter() {
                    result.insert(&m, max);
                }
            }
        }
        Op::Diff => {
            if let Some(first) = sets[0] {
                let others: Vec<&Set> = sets[1..].iter().flatten().copied().collect();
                for m in first.iter() {
                    if !others.iter().any(|s| s.contains(&m)) {
                        result.insert(&m, max);
                    }
                }
            }
        }
    }
    match dst {
        None => {
            call.out.set_len(result.len());
            for m in result.iter() {
                call.out.bulk(&m);
            }
        }
        Some(dst) => {
            let event = if op == Op::Union {
                "sunionstore"
            } else {
                "sdiffstore"
            };
            store_result(core, call, dst, result, event);
        }
    }
}

fn sunion(core: &mut Core, call: &mut Call) {
    sunion_diff_generic(core, call, &call.args[1..], None, Op::Union);
}

fn sunionstore(core: &mut Core, call: &mut Call) {
    sunion_diff_generic(core, call, &call.args[2..], Some(call.arg(1)), Op::Union);
}

fn sdiff(core: &mut Core, call: &mut Call) {
    sunion_diff_generic(core, call, &call.args[1..], None, Op::Diff);
}

fn sdiffstore(core: &mut Core, call: &mut Call) {
    sunion_diff_generic(core, call, &call.args[2..], Some(call.arg(1)), Op::Diff);
}

/// Options of SSCAN/ZSCAN/HSCAN-style commands after the cursor.
pub(crate) struct ScanOpts<'a> {
    pub pattern: Option<&'a [u8]>,
    pub count: usize,
}

/// Parses `[MATCH pattern] [COUNT count]` from `args`, replying with Redis's errors.
pub(crate) fn parse_scan_opts<'a>(call: &mut Call<'a>, first: usize) -> Option<ScanOpts<'a>> {
    let mut opts = ScanOpts {
        pattern: None,
        count: 10,
    };
    let mut i = first;
    while i < call.argc() {
        let left = call.argc() - i;
        if is(call.arg(i), "count") && left >= 2 {
            match parse_i64(call.arg(i + 1)) {
                None => {
                    call.error(NOT_INTEGER);
                    return None;
                }
                Some(n) if n < 1 => {
                    call.error(SYNTAX);
                    return None;
                }
                Some(n) => opts.count = usize::try_from(n).unwrap_or(usize::MAX),
            }
            i += 2;
        } else if is(call.arg(i), "match") && left >= 2 {
            let p = call.arg(i + 1);
            opts.pattern = (p != b"*").then_some(p);
            i += 2;
        } else {
            call.syntax_error();
            return None;
        }
    }
    Some(opts)
}

/// The reply for a SCAN of a missing key.
pub(crate) fn empty_scan(call: &mut Call) {
    call.out.array_len(2);
    call.out.bulk(b"0");
    call.out.array_len(0);
}

fn sscan(core: &mut Core, call: &mut Call) {
    let Some(cursor) = parse_cursor(call.arg(2)) else {
        return call.error("ERR invalid cursor");
    };
    let key = call.arg(1);
    match typed::read::<Set>(core, key, call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return empty_scan(call),
        Ok(Some(_)) => {}
    }
    let Some(opts) = parse_scan_opts(call, 3) else {
        return;
    };
    let s = typed::peek::<Set>(&core.db, key).expect("looked up above");
    let (next, batch) = s.scan(cursor, opts.count);
    let batch: Vec<Cow<[u8]>> = batch
        .into_iter()
        .filter(|m| opts.pattern.is_none_or(|p| glob_match(p, m, false)))
        .collect();
    call.out.array_len(2);
    call.out.bulk(next.to_string().as_bytes());
    call.out.array_len(batch.len());
    for m in &batch {
        call.out.bulk(m);
    }
}

//! List commands: pushes and pops at both ends (with counts, across keys, between keys),
//! indexing, ranges, searches and edits, and the blocking pops and moves.
//!
//! Replies, error texts and the order in which arguments, key types and limits are checked
//! follow Redis 7.0. Blocking commands use the node's generic mechanism
//! ([`Core::block`]): a command that finds nothing to serve parks the client and writes no
//! reply; when one of its keys changes, the node runs the same request again. Such a retry
//! treats a source key of another type like a missing one (Redis only serves a parked client
//! from a key that holds a list), so the client stays parked instead of failing.

use bytes::Bytes;
use lattice_store::list::{End, List};
use lattice_store::Value;

use crate::args::{is, parse_i64, NOT_INTEGER, NO_SUCH_KEY};
use crate::blocking::{parse_timeout, TimeoutReply};
use crate::cmd::pubsub::{EVENT_LIST, EVENT_NEW};
use crate::cmd::typed;
use crate::command::{spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};

const LIST: &str = "list";

const W: &[&str] = &["write", "denyoom"];
const WDF: &[&str] = &["write", "denyoom", "fast"];
const WF: &[&str] = &["write", "fast"];
// Redis 7.0.15 (Debian) refuses these four in scripts (`noscript`), as it does BZPOPMIN/MAX.
const WB: &[&str] = &["write", "noscript", "blocking"];
const WDB: &[&str] = &["write", "denyoom", "noscript", "blocking"];
const R: &[&str] = &["readonly"];
const RF: &[&str] = &["readonly", "fast"];

// One line per command reads best as a table.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    spec("lpush", -3, WDF, (1, 1, 1), LIST, "1.0.0", "Prepend one or multiple elements to a list", lpush).with(Flag::LoggedAsCommand),
    spec("rpush", -3, WDF, (1, 1, 1), LIST, "1.0.0", "Append one or multiple elements to a list", rpush).with(Flag::LoggedAsCommand),
    spec("lpushx", -3, WDF, (1, 1, 1), LIST, "2.2.0", "Prepend an element to a list, only if the list exists", lpushx).with(Flag::LoggedAsCommand),
    spec("rpushx", -3, WDF, (1, 1, 1), LIST, "2.2.0", "Append an element to a list, only if the list exists", rpushx).with(Flag::LoggedAsCommand),
    spec("lpop", -2, WF, (1, 1, 1), LIST, "1.0.0", "Remove and get the first elements in a list", lpop).with(Flag::LoggedAsCommand),
    spec("rpop", -2, WF, (1, 1, 1), LIST, "1.0.0", "Remove and get the last elements in a list", rpop).with(Flag::LoggedAsCommand),
    spec("llen", 2, RF, (1, 1, 1), LIST, "1.0.0", "Get the length of a list", llen),
    spec("lrange", 4, R, (1, 1, 1), LIST, "1.0.0", "Get a range of elements from a list", lrange),
    spec("lindex", 3, R, (1, 1, 1), LIST, "1.0.0", "Get an element from a list by its index", lindex),
    spec("lset", 4, W, (1, 1, 1), LIST, "1.0.0", "Set the value of an element in a list by its index", lset).with(Flag::LoggedAsCommand),
    spec("linsert", 5, W, (1, 1, 1), LIST, "2.2.0", "Insert an element before or after another element in a list", linsert).with(Flag::LoggedAsCommand),
    spec("lrem", 4, &["write"], (1, 1, 1), LIST, "1.0.0", "Remove elements from a list", lrem).with(Flag::LoggedAsCommand),
    spec("ltrim", 4, &["write"], (1, 1, 1), LIST, "1.0.0", "Trim a list to the specified range", ltrim).with(Flag::LoggedAsCommand),
    spec("lpos", -3, R, (1, 1, 1), LIST, "6.0.6", "Return the index of matching elements on a list", lpos),
    spec("rpoplpush", 3, W, (1, 2, 1), LIST, "1.2.0", "Remove the last element in a list, prepend it to another list and return it", rpoplpush),
    spec("lmove", 5, W, (1, 2, 1), LIST, "6.2.0", "Pop an element from a list, push it to another list and return it", lmove),
    spec("lmpop", -4, &["write", "movablekeys"], (0, 0, 0), LIST, "7.0.0", "Pop elements from a list", lmpop),
    spec("blpop", -3, WB, (1, -2, 1), LIST, "2.0.0", "Remove and get the first element in a list, or block until one is available", blpop),
    spec("brpop", -3, WB, (1, -2, 1), LIST, "2.0.0", "Remove and get the last element in a list, or block until one is available", brpop),
    spec("brpoplpush", 4, WDB, (1, 2, 1), LIST, "2.2.0", "Pop an element from a list, push it to another list and return it; or block until one is available", brpoplpush),
    spec("blmove", 6, WDB, (1, 2, 1), LIST, "6.2.0", "Pop an element from a list, push it to another list and return it; or block until one is available", blmove),
    spec("blmpop", -5, &["write", "blocking", "movablekeys"], (0, 0, 0), LIST, "7.0.0", "Pop elements from a list, or block until one is available", blmpop),
];

/// `getPositiveLongFromObjectOrReply` without a custom message (any non-integer too).
const MUST_BE_POSITIVE: &str = "ERR value is out of range, must be positive";

pub(crate) use crate::cmd::typed::WrongType;

fn end_name(end: End, push: bool) -> &'static str {
    match (end, push) {
        (End::Head, true) => "lpush",
        (End::Tail, true) => "rpush",
        (End::Head, false) => "lpop",
        (End::Tail, false) => "rpop",
    }
}

/// Parses LEFT / RIGHT.
fn parse_end(arg: &[u8]) -> Option<End> {
    if is(arg, "left") {
        Some(End::Head)
    } else if is(arg, "right") {
        Some(End::Tail)
    } else {
        None
    }
}

/// True when this execution is the retry of a parked blocking command (the node runs the
/// request again while the client is still registered as blocked).
fn is_retry(core: &Core, call: &Call) -> bool {
    !call.in_exec
        && core
            .clients
            .get(&call.conn)
            .is_some_and(|c| c.blocked.is_some())
}

/// Pushes `values` at `end` of the list at `key`, creating it when `create`. Returns the new
/// length (`None`: no list and not created), after reporting the change.
fn push_into(
    core: &mut Core,
    key: &[u8],
    end: End,
    values: &[Bytes],
    create: bool,
    now_ms: u64,
) -> Result<Option<usize>, WrongType> {
    let (len, created) = match typed::write::<List>(core, key, now_ms)? {
        Some(l) => {
            for v in values {
                l.push(end, v);
            }
            (l.len(), false)
        }
        None if !create => return Ok(None),
        None => {
            let mut l = List::new();
            for v in values {
                l.push(end, v);
            }
            let len = l.len();
            core.db.insert(key, Value::List(Box::new(l)), None, now_ms);
            (len, true)
        }
    };
    if created {
        core.notify(EVENT_NEW, "new", key);
    }
    core.modified(key);
    core.notify(EVENT_LIST, end_name(end, true), key);
    Ok(Some(len))
}

fn push_generic(core: &mut Core, call: &mut Call, end: End, create: bool) {
    match push_into(core, call.arg(1), end, &call.args[2..], create, call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(len) => call.out.integer(len.unwrap_or(0) as i64),
    }
}

fn lpush(core: &mut Core, call: &mut Call) {
    push_generic(core, call, End::Head, true);
}

fn rpush(core: &mut Core, call: &mut Call) {
    push_generic(core, call, End::Tail, true);
}

fn lpushx(core: &mut Core, call: &mut Call) {
    push_generic(core, call, End::Head, false);
}

fn rpushx(core: &mut Core, call: &mut Call) {
    push_generic(core, call, End::Tail, false);
}

/// Pops up to `count` elements from `end`, in pop order.
fn pop_many(list: &mut List, end: End, count: usize) -> Vec<Vec<u8>> {
    let n = count.min(list.len());
    (0..n).filter_map(|_| list.pop(end)).collect()
}

fn pop_generic(core: &mut Core, call: &mut Call, end: End) {
    if call.argc() > 3 {
        return call.error(&format!(
            "ERR wrong number of arguments for '{}' command",
            end_name(end, false)
        ));
    }
    let count = if call.argc() == 3 {
        match parse_i64(call.arg(2)) {
            Some(n) if n >= 0 => Some(n as usize),
            _ => return call.error(MUST_BE_POSITIVE),
        }
    } else {
        None
    };
    let key = call.arg(1);
    let now_ms = call.now_ms;
    let list = match typed::write::<List>(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) if count.is_some() => return call.out.null_array(),
        Ok(None) => return call.out.null(),
        Ok(Some(l)) => l,
    };
    match count {
        Some(0) => call.out.array_len(0),
        Some(n) => {
            let popped = pop_many(list, end, n);
            call.out.array_len(popped.len());
            for v in &popped {
                call.out.bulk(v);
            }
            typed::removed_from::<List>(core, key, end_name(end, false));
        }
        None => {
            let v = list.pop(end).expect("stored lists are never empty");
            call.out.bulk(&v);
            typed::removed_from::<List>(core, key, end_name(end, false));
        }
    }
}

fn lpop(core: &mut Core, call: &mut Call) {
    pop_generic(core, call, End::Head);
}

fn rpop(core: &mut Core, call: &mut Call) {
    pop_generic(core, call, End::Tail);
}

fn llen(core: &mut Core, call: &mut Call) {
    match typed::read::<List>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(l) => call.out.integer(l.map_or(0, |l| l.len()) as i64),
    }
}

/// Redis's inclusive `start`/`end` (negative counts from the tail) clamped to a list of
/// `len`; `None` when the range is empty.
pub(crate) fn clamp_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { len + start } else { start }.max(0);
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return None;
    }
    Some((start as usize, end.min(len - 1) as usize))
}

/// An index (negative counts from the tail) into a list of `len`, if in range.
fn resolve_index(index: i64, len: usize) -> Option<usize> {
    let i = if index < 0 { len as i64 + index } else { index };
    (i >= 0 && i < len as i64).then_some(i as usize)
}

fn lrange(core: &mut Core, call: &mut Call) {
    let (Some(start), Some(end)) = (parse_i64(call.arg(2)), parse_i64(call.arg(3))) else {
        return call.error(NOT_INTEGER);
    };
    match typed::read::<List>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(None) => call.out.array_len(0),
        Ok(Some(l)) => match clamp_range(start, end, l.len()) {
            None => call.out.array_len(0),
            Some((s, e)) => {
                call.out.array_len(e - s + 1);
                for v in l.range(s, e) {
                    call.out.bulk(v);
                }
            }
        },
    }
}

fn lindex(core: &mut Core, call: &mut Call) {
    let l = match typed::read::<List>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.null(),
        Ok(Some(l)) => l,
    };
    let Some(index) = parse_i64(call.arg(2)) else {
        return call.error(NOT_INTEGER);
    };
    match resolve_index(index, l.len()).and_then(|i| l.get(i)) {
        Some(v) => call.out.bulk(v),
        None => call.out.null(),
    }
}

fn lset(core: &mut Core, call: &mut Call) {
    let key = call.arg(1);
    let l = match typed::write::<List>(core, key, call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.error(NO_SUCH_KEY),
        Ok(Some(l)) => l,
    };
    let Some(index) = parse_i64(call.arg(2)) else {
        return call.error(NOT_INTEGER);
    };
    match resolve_index(index, l.len()) {
        Some(i) => {
            l.set(i, call.arg(3));
            call.ok();
            core.modified(key);
            core.notify(EVENT_LIST, "lset", key);
        }
        None => call.error("ERR index out of range"),
    }
}

fn linsert(core: &mut Core, call: &mut Call) {
    let after = if is(call.arg(2), "after") {
        true
    } else if is(call.arg(2), "before") {
        false
    } else {
        return call.syntax_error();
    };
    let key = call.arg(1);
    let l = match typed::write::<List>(core, key, call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.integer(0),
        Ok(Some(l)) => l,
    };
    match l.position(call.arg(3)) {
        None => call.out.integer(-1),
        Some(i) => {
            l.insert(if after { i + 1 } else { i }, call.arg(4));
            call.out.integer(l.len() as i64);
            core.modified(key);
            core.notify(EVENT_LIST, "linsert", key);
        }
    }
}

fn lrem(core: &mut Core, call: &mut Call) {
    let Some(count) = parse_i64(call.arg(2)) else {
        return call.error(NOT_INTEGER);
    };
    let key = call.arg(1);
    let now_ms = call.now_ms;
    let l = match typed::write::<List>(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.integer(0),
        Ok(Some(l)) => l,
    };
    let from = if count < 0 { End::Tail } else { End::Head };
    let limit = usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX);
    let removed = l.remove_matching(call.arg(3), limit, from);
    call.out.integer(removed as i64);
    if removed > 0 {
        typed::removed_from::<List>(core, key, "lrem");
    }
}

fn ltrim(core: &mut Core, call: &mut Call) {
    let (Some(start), Some(end)) = (parse_i64(call.arg(2)), parse_i64(call.arg(3))) else {
        return call.error(NOT_INTEGER);
    };
    let key = call.arg(1);
    let now_ms = call.now_ms;
    let l = match typed::write::<List>(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.ok(),
        Ok(Some(l)) => l,
    };
    let keep = clamp_range(start, end, l.len());
    l.retain_range(keep);
    call.ok();
    typed::removed_from::<List>(core, key, "ltrim");
}

fn lpos(core: &mut Core, call: &mut Call) {
    let mut rank: i64 = 1;
    let mut count: Option<i64> = None;
    let mut maxlen: i64 = 0;
    let mut j = 3;
    while j < call.argc() {
        let opt = call.arg(j);
        let more = j + 1 < call.argc();
        if is(opt, "rank") && more {
            j += 1;
            let Some(r) = parse_i64(call.arg(j)) else {
                return call.error(NOT_INTEGER);
            };
            if r == 0 {
                return call.error("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list");
            }
            rank = r;
        } else if is(opt, "count") && more {
            j += 1;
            match parse_i64(call.arg(j)) {
                Some(n) if n >= 0 => count = Some(n),
                _ => return call.error("ERR COUNT can't be negative"),
            }
        } else if is(opt, "maxlen") && more {
            j += 1;
            match parse_i64(call.arg(j)) {
                Some(n) if n >= 0 => maxlen = n,
                _ => return call.error("ERR MAXLEN can't be negative"),
            }
        } else {
            return call.syntax_error();
        }
        j += 1;
    }
    // A negative rank searches from the tail. (Negating i64::MIN leaves it negative, so every
    // match then qualifies, as in Redis.)
    let from_tail = rank < 0;
    if from_tail {
        rank = rank.wrapping_neg();
    }
    let element = call.arg(2);
    let l = match typed::read::<List>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) if count.is_some() => return call.out.array_len(0),
        Ok(None) => return call.out.null(),
        Ok(Some(l)) => l,
    };
    let len = l.len();
    let mut found: Vec<usize> = Vec::new();
    let mut matches: i64 = 0;
    let iter: Box<dyn Iterator<Item = &[u8]>> = if from_tail {
        Box::new(l.iter().rev())
    } else {
        Box::new(l.iter())
    };
    for (scanned, v) in iter.enumerate() {
        if maxlen != 0 && scanned as i64 >= maxlen {
            break;
        }
        if v != element {
            continue;
        }
        matches += 1;
        if matches >= rank {
            found.push(if from_tail {
                len - scanned - 1
            } else {
                scanned
            });
            match count {
                None => break,
                Some(c) if c != 0 && matches.wrapping_sub(rank).wrapping_add(1) >= c => break,
                Some(_) => {}
            }
        }
    }
    match count {
        Some(_) => {
            call.out.array_len(found.len());
            for i in found {
                call.out.integer(i as i64);
            }
        }
        None => match found.first() {
            Some(&i) => call.out.integer(i as i64),
            None => call.out.null(),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Moves between lists

/// Moves one element from `src` (an existing, non-empty list) to `dst`, replying with it.
/// Fails with WRONGTYPE, changing nothing, when `dst` holds something else.
fn move_element(core: &mut Core, call: &mut Call, src: &[u8], dst: &[u8], from: End, to: End) {
    let now_ms = call.now_ms;
    if let Some(e) = core.lookup_write(dst, now_ms) {
        if !matches!(e.value, Value::List(_)) {
            return call.wrong_type();
        }
    }
    let value = match typed::write::<List>(core, src, now_ms) {
        Ok(Some(l)) => l.pop(from).expect("stored lists are never empty"),
        _ => return call.out.null(),
    };
    // Push before deleting an emptied source: with src == dst the element goes back in.
    push_into(core, dst, to, &[Bytes::from(value.clone())], true, now_ms)
        .unwrap_or_else(|_| unreachable!("destination type checked above"));
    call.out.bulk(&value);
    typed::removed_from::<List>(core, src, end_name(from, false));
}

fn lmove_generic(core: &mut Core, call: &mut Call, from: End, to: End) {
    let (src, dst) = (call.arg(1), call.arg(2));
    match typed::write::<List>(core, src, call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(None) => call.out.null(),
        Ok(Some(_)) => move_element(core, call, src, dst, from, to),
    }
}

fn rpoplpush(core: &mut Core, call: &mut Call) {
    lmove_generic(core, call, End::Tail, End::Head);
}

fn lmove(core: &mut Core, call: &mut Call) {
    let (Some(from), Some(to)) = (parse_end(call.arg(3)), parse_end(call.arg(4))) else {
        return call.syntax_error();
    };
    lmove_generic(core, call, from, to);
}

fn blmove_generic(core: &mut Core, call: &mut Call, from: End, to: End, timeout: &[u8]) {
    let deadline = match parse_timeout(timeout, call.now_ms) {
        Ok(d) => d,
        Err(e) => return call.error(e),
    };
    let retry = is_retry(core, call);
    let (src, dst) = (call.arg(1), call.arg(2));
    match typed::write::<List>(core, src, call.now_ms) {
        Err(WrongType) if !retry => call.wrong_type(),
        Ok(Some(_)) => move_element(core, call, src, dst, from, to),
        // Inside MULTI the command cannot block and answers a null bulk string; a client that
        // did block and times out gets a null array, as from every list blocking command.
        _ if call.in_exec => call.out.null(),
        _ => {
            let keys = [call.args[1].clone()];
            core.block(call, &keys, deadline, TimeoutReply::NullArray);
        }
    }
}

fn brpoplpush(core: &mut Core, call: &mut Call) {
    let timeout = call.arg(3);
    blmove_generic(core, call, End::Tail, End::Head, timeout);
}

fn blmove(core: &mut Core, call: &mut Call) {
    let (Some(from), Some(to)) = (parse_end(call.arg(3)), parse_end(call.arg(4))) else {
        return call.syntax_error();
    };
    let timeout = call.arg(5);
    blmove_generic(core, call, from, to, timeout);
}

// ---------------------------------------------------------------------------------------------
// Pops across keys

/// Outcome of looking for something to pop in several keys.
enum Popped {
    /// Replied (with the elements, or an error).
    Done,
    /// Every key was missing (or, on a retry, of another type).
    Nothing,
}

/// Pops from the first key holding a list: one element as `[key, element]` (`count` None,
/// BLPOP's shape) or up to `count` as `[key, [elements]]` (LMPOP's).
fn pop_first(
    core: &mut Core,
    call: &mut Call,
    keys: &[Bytes],
    end: End,
    count: Option<usize>,
    skip_wrong_type: bool,
) -> Popped {
    let now_ms = call.now_ms;
    for key in keys {
        let l = match typed::write::<List>(core, key, now_ms) {
            Err(WrongType) if skip_wrong_type => continue,
            Err(WrongType) => {
                call.wrong_type();
                return Popped::Done;
            }
            Ok(None) => continue,
            Ok(Some(l)) => l,
        };
        call.out.array_len(2);
        call.out.bulk(key);
        match count {
            None => {
                let v = l.pop(end).expect("stored lists are never empty");
                call.out.bulk(&v);
            }
            Some(n) => {
                let popped = pop_many(l, end, n);
                call.out.array_len(popped.len());
                for v in &popped {
                    call.out.bulk(v);
                }
            }
        }
        typed::removed_from::<List>(core, key, end_name(end, false));
        return Popped::Done;
    }
    Popped::Nothing
}

/// The keys once each, in first-mention order (a client waits once per key).
fn distinct(keys: &[Bytes]) -> Vec<Bytes> {
    let mut out: Vec<Bytes> = Vec::with_capacity(keys.len());
    for k in keys {
        if !out.contains(k) {
            out.push(k.clone());
        }
    }
    out
}

fn bpop_generic(core: &mut Core, call: &mut Call, end: End) {
    let last = call.argc() - 1;
    let deadline = match parse_timeout(call.arg(last), call.now_ms) {
        Ok(d) => d,
        Err(e) => return call.error(e),
    };
    let retry = is_retry(core, call);
    let args: &[Bytes] = call.args;
    let keys = &args[1..last];
    if let Popped::Nothing = pop_first(core, call, keys, end, None, retry) {
        let keys = distinct(keys);
        core.block(call, &keys, deadline, TimeoutReply::NullArray);
    }
}

fn blpop(core: &mut Core, call: &mut Call) {
    bpop_generic(core, call, End::Head);
}

fn brpop(core: &mut Core, call: &mut Call) {
    bpop_generic(core, call, End::Tail);
}

/// LMPOP / BLMPOP arguments after the numkeys at `numkeys_at`: (keys, end, count).
fn parse_mpop<'a>(call: &mut Call<'a>, numkeys_at: usize) -> Option<(&'a [Bytes], End, usize)> {
    let numkeys = match parse_i64(call.arg(numkeys_at)) {
        Some(n) if n >= 1 => n as usize,
        _ => {
            call.error("ERR numkeys should be greater than 0");
            return None;
        }
    };
    let where_at = match numkeys_at
        .checked_add(numkeys)
        .and_then(|n| n.checked_add(1))
    {
        Some(w) if w < call.argc() => w,
        _ => {
            call.syntax_error();
            return None;
        }
    };
    let Some(end) = parse_end(call.arg(where_at)) else {
        call.syntax_error();
        return None;
    };
    let mut count: Option<usize> = None;
    let mut j = where_at + 1;
    while j < call.argc() {
        if count.is_none() && is(call.arg(j), "count") && j + 1 < call.argc() {
            j += 1;
            match parse_i64(call.arg(j)) {
                Some(n) if n >= 1 => count = Some(n as usize),
                _ => {
                    call.error("ERR count should be greater than 0");
                    return None;
                }
            }
        } else {
            call.syntax_error();
            return None;
        }
        j += 1;
    }
    let args: &'a [Bytes] = call.args;
    Some((&args[numkeys_at + 1..where_at], end, count.unwrap_or(1)))
}

fn lmpop(core: &mut Core, call: &mut Call) {
    let Some((keys, end, count)) = parse_mpop(call, 1) else {
        return;
    };
    if let Popped::Nothing = pop_first(core, call, keys, end, Some(count), false) {
        call.out.null_array();
    }
}

fn blmpop(core: &mut Core, call: &mut Call) {
    let Some((keys, end, count)) = parse_mpop(call, 2) else {
        return;
    };
    let deadline = match parse_timeout(call.arg(1), call.now_ms) {
        Ok(d) => d,
        Err(e) => return call.error(e),
    };
    let retry = is_retry(core, call);
    if let Popped::Nothing = pop_first(core, call, keys, end, Some(count), retry) {
        let keys = distinct(keys);
        core.block(call, &keys, deadline, TimeoutReply::NullArray);
    }
}

/// A node driven through its real entry points, for the list, hash and sort tests.
#[cfg(test)]
pub(crate) mod testkit {

    pub use lattice_testkit::Harness;

    /// A node with connection 1 open, its RNG seeded with 7.
    pub fn node() -> Harness {
        let mut h = Harness::seeded(7);
        h.connect(1);
        h
    }

    pub fn bulk(s: &str) -> String {
        format!("${}\r\n{}\r\n", s.len(), s)
    }

    /// An array of bulk strings.
    pub fn arr(items: &[&str]) -> String {
        let mut out = format!("*{}\r\n", items.len());
        for i in items {
            out.push_str(&bulk(i));
        }
        out
    }

    pub fn int(n: i64) -> String {
        format!(":{n}\r\n")
    }

    pub fn err(message: &str) -> String {
        format!("-{message}\r\n")
    }

    pub const OK: &str = "+OK\r\n";
    pub const NIL: &str = "$-1\r\n";
    pub const NIL_ARRAY: &str = "*-1\r\n";
    pub const WRONGTYPE: &str =
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
}

#[cfg(test)]
mod tests {
    use super::testkit::*;

    #[test]
    fn push_pop_and_ranges() {
        let mut h = node();
        h.check("RPUSH l a b c", &int(3));
        h.check("LPUSH l x y", &int(5));
        h.check("LRANGE l 0 -1", &arr(&["y", "x", "a", "b", "c"]));
        h.check("LRANGE l -100 100", &arr(&["y", "x", "a", "b", "c"]));
        h.check("LRANGE l 3 1", &arr(&[]));
        h.check("LRANGE l 0 -6", &arr(&[]));
        h.check("LRANGE nokey 0 -1", &arr(&[]));
        h.check(
            "LRANGE l a 1",
            &err("ERR value is not an integer or out of range"),
        );
        h.check("LLEN l", &int(5));
        h.check("LINDEX l -1", &bulk("c"));
        h.check("LINDEX l 5", NIL);
        h.check("LINDEX nokey x", NIL);
        h.check(
            "LINDEX l x",
            &err("ERR value is not an integer or out of range"),
        );
        h.check("LPOP l", &bulk("y"));
        h.check("RPOP l 2", &arr(&["c", "b"]));
        h.check("LPOP l 0", &arr(&[]));
        h.check(
            "LPOP l -1",
            &err("ERR value is out of range, must be positive"),
        );
        h.check(
            "LPOP l 1 2",
            &err("ERR wrong number of arguments for 'lpop' command"),
        );
        h.check("LPOP nokey", NIL);
        h.check("LPOP nokey 0", NIL_ARRAY);
        h.check("LPOP l 10", &arr(&["x", "a"]));
        h.check("EXISTS l", &int(0));
        h.check("LPUSHX l a", &int(0));
        h.check("EXISTS l", &int(0));
        h.check("RPUSH l a", &int(1));
        h.check("RPUSHX l b c", &int(3));
        h.check("LPUSHX l z", &int(4));
        h.check("LRANGE l 0 -1", &arr(&["z", "a", "b", "c"]));
        h.check("OBJECT ENCODING l", &bulk("quicklist"));
        h.check("TYPE l", "+list\r\n");
        h.line(1, "HELLO 3");
        h.check("LPOP nokey", "_\r\n");
        h.check("LPOP nokey 1", "_\r\n");
    }

    #[test]
    fn edits() {
        let mut h = node();
        h.line(1, "RPUSH l a b c b a");
        h.check("LSET l 1 B", OK);
        h.check("LSET l -1 A", OK);
        h.check("LSET l 5 x", &err("ERR index out of range"));
        h.check("LSET nokey 0 x", &err("ERR no such key"));
        h.check(
            "LSET l x x",
            &err("ERR value is not an integer or out of range"),
        );
        h.check("LRANGE l 0 -1", &arr(&["a", "B", "c", "b", "A"]));
        h.check("LINSERT l BEFORE c x", &int(6));
        h.check("LINSERT l after c y", &int(7));
        h.check("LINSERT l after nope y", &int(-1));
        h.check("LINSERT nokey after a b", &int(0));
        h.check("LINSERT l middle c y", &err("ERR syntax error"));
        h.check("LRANGE l 0 -1", &arr(&["a", "B", "x", "c", "y", "b", "A"]));
        h.line(1, "RPUSH r x a x b x");
        h.check("LREM r -1 x", &int(1));
        h.check("LRANGE r 0 -1", &arr(&["x", "a", "x", "b"]));
        h.check("LREM r 1 x", &int(1));
        h.check("LREM r 0 x", &int(1));
        h.check("LREM r 0 nothing", &int(0));
        h.check(
            "LREM r x a",
            &err("ERR value is not an integer or out of range"),
        );
        h.check("LRANGE r 0 -1", &arr(&["a", "b"]));
        h.check("LREM r 0 a", &int(1));
        h.check("LREM r 0 b", &int(1));
        h.check("EXISTS r", &int(0));
        h.line(1, "RPUSH t 1 2 3 4 5");
        h.check("LTRIM t 1 -2", OK);
        h.check("LRANGE t 0 -1", &arr(&["2", "3", "4"]));
        h.check("LTRIM t 5 10", OK);
        h.check("EXISTS t", &int(0));
        h.check("LTRIM nokey 0 1", OK);
        h.line(1, "SET s v");
        for c in [
            "LSET s 0 x",
            "LINSERT s before a b",
            "LREM s 0 a",
            "LTRIM s 0 1",
            "LLEN s",
            "LRANGE s 0 1",
            "LPUSH s a",
            "RPOP s",
            "LINDEX s 0",
            "LPOS s a",
        ] {
            h.check(c, WRONGTYPE);
        }
    }

    #[test]
    fn lpos() {
        let mut h = node();
        h.line(1, "RPUSH l a b c 1 2 3 c c");
        h.check("LPOS l c", &int(2));
        h.check("LPOS l c RANK 2", &int(6));
        h.check("LPOS l c RANK 4", NIL);
        h.check("LPOS l c RANK -1", &int(7));
        h.check("LPOS l c RANK -2", &int(6));
        h.check("LPOS l c COUNT 0", "*3\r\n:2\r\n:6\r\n:7\r\n");
        h.check("LPOS l c COUNT 2 RANK -1", "*2\r\n:7\r\n:6\r\n");
        h.check("LPOS l c COUNT 0 MAXLEN 3 RANK -1", "*2\r\n:7\r\n:6\r\n");
        h.check("LPOS l c COUNT 0 MAXLEN 7 RANK 2", "*1\r\n:6\r\n");
        h.check("LPOS l c RANK -9223372036854775808", &int(7));
        h.check("LPOS l c RANK 0", &err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list"));
        h.check("LPOS l c COUNT -1", &err("ERR COUNT can't be negative"));
        h.check("LPOS l c COUNT x", &err("ERR COUNT can't be negative"));
        h.check("LPOS l c MAXLEN -1", &err("ERR MAXLEN can't be negative"));
        h.check("LPOS l c RANK", &err("ERR syntax error"));
        h.check("LPOS nokey c", NIL);
        h.check("LPOS nokey c COUNT 1", "*0\r\n");
    }

    #[test]
    fn moves_and_multi_pops() {
        let mut h = node();
        h.line(1, "RPUSH src a b c");
        h.check("RPOPLPUSH src dst", &bulk("c"));
        h.check("LMOVE src dst LEFT RIGHT", &bulk("a"));
        h.check("LRANGE dst 0 -1", &arr(&["c", "a"]));
        h.check("LMOVE src src left right", &bulk("b"));
        h.check("LRANGE src 0 -1", &arr(&["b"]));
        h.check("LMOVE src dst up down", &err("ERR syntax error"));
        h.check("RPOPLPUSH src dst", &bulk("b"));
        h.check("EXISTS src", &int(0));
        h.check("RPOPLPUSH src dst", NIL);
        h.line(1, "SET str x");
        h.check("RPOPLPUSH dst str", WRONGTYPE);
        h.check("LRANGE dst 0 -1", &arr(&["b", "c", "a"]));
        h.check("RPOPLPUSH str dst", WRONGTYPE);

        h.check(
            "LMPOP 2 none dst LEFT COUNT 2",
            &format!("*2\r\n{}{}", bulk("dst"), arr(&["b", "c"])),
        );
        h.check(
            "LMPOP 1 dst RIGHT",
            &format!("*2\r\n{}{}", bulk("dst"), arr(&["a"])),
        );
        h.check("LMPOP 1 dst RIGHT", NIL_ARRAY);
        h.check("LMPOP 2 str dst LEFT", WRONGTYPE);
        h.check(
            "LMPOP 0 a LEFT",
            &err("ERR numkeys should be greater than 0"),
        );
        h.check(
            "LMPOP x a LEFT",
            &err("ERR numkeys should be greater than 0"),
        );
        h.check("LMPOP 5 a LEFT", &err("ERR syntax error"));
        h.check("LMPOP 1 a MIDDLE", &err("ERR syntax error"));
        h.check(
            "LMPOP 1 a LEFT COUNT 0",
            &err("ERR count should be greater than 0"),
        );
        h.check("LMPOP 1 a LEFT COUNT 1 COUNT 1", &err("ERR syntax error"));
        h.check(
            "LMPOP 1 a",
            &err("ERR wrong number of arguments for 'lmpop' command"),
        );
    }

    #[test]
    fn blpop_serves_at_once_or_blocks_until_a_push() {
        let mut h = node();
        h.connect(2);
        h.line(1, "RPUSH l a b");
        h.check("BLPOP none l 0", &arr(&["l", "a"]));
        h.check("BRPOP l 0", &arr(&["l", "b"]));
        h.check("EXISTS l", &int(0));

        assert_eq!(h.line(2, "BLPOP l1 l2 0"), "");
        h.check("LPUSH l2 x y", &int(2));
        assert_eq!(h.take(2), arr(&["l2", "y"]));
        h.check("LRANGE l2 0 -1", &arr(&["x"]));
        h.node.check_invariants();
    }

    #[test]
    fn blpop_times_out_on_the_node_clock() {
        let mut h = node();
        h.connect(2);
        assert_eq!(h.line(2, "BLPOP l 1.5"), "");
        h.advance(1000);
        assert_eq!(h.take(2), "");
        h.advance(600);
        assert_eq!(h.take(2), NIL_ARRAY);
        // Released: a later push is not served to it.
        h.check("LPUSH l a", &int(1));
        assert_eq!(h.take(2), "");
        assert_eq!(h.line(2, "BLMOVE none dst LEFT LEFT 0.01"), "");
        h.advance(20);
        assert_eq!(h.take(2), NIL_ARRAY);
        assert_eq!(h.line(2, "BLMPOP 0.01 1 none LEFT"), "");
        h.advance(20);
        assert_eq!(h.take(2), NIL_ARRAY);
        h.check("BLPOP l -1", &err("ERR timeout is negative"));
        h.check(
            "BLPOP l x",
            &err("ERR timeout is not a float or out of range"),
        );
    }

    #[test]
    fn blocked_clients_are_served_in_order() {
        let mut h = node();
        for c in 2..=4 {
            h.connect(c);
        }
        assert_eq!(h.line(2, "BLPOP l 0"), "");
        assert_eq!(h.line(3, "BLMPOP 0 1 l RIGHT COUNT 5"), "");
        assert_eq!(h.line(4, "BLPOP l 0"), "");
        h.check("RPUSH l a b c d", &int(4));
        assert_eq!(h.take(2), arr(&["l", "a"]));
        assert_eq!(
            h.take(3),
            format!("*2\r\n{}{}", bulk("l"), arr(&["d", "c", "b"]))
        );
        assert_eq!(h.take(4), "");
        h.check("RPUSH l e", &int(1));
        assert_eq!(h.take(4), arr(&["l", "e"]));
    }

    #[test]
    fn brpoplpush_chains() {
        let mut h = node();
        h.connect(2);
        h.connect(3);
        assert_eq!(h.line(2, "BRPOPLPUSH a b 0"), "");
        assert_eq!(h.line(3, "BRPOPLPUSH b c 0"), "");
        h.check("LPUSH a data", &int(1));
        assert_eq!(h.take(2), bulk("data"));
        assert_eq!(h.take(3), bulk("data"));
        h.check("LRANGE c 0 -1", &arr(&["data"]));
        h.check("EXISTS a b", &int(0));

        // Circular: the element ends up back where it started.
        assert_eq!(h.line(2, "BRPOPLPUSH l1 l2 0"), "");
        assert_eq!(h.line(3, "BRPOPLPUSH l2 l1 0"), "");
        h.check("RPUSH l1 foo", &int(1));
        assert_eq!(h.take(2), bulk("foo"));
        assert_eq!(h.take(3), bulk("foo"));
        h.check("LRANGE l1 0 -1", &arr(&["foo"]));
        h.check("EXISTS l2", &int(0));

        // BLMOVE into a list another client waits on.
        assert_eq!(h.line(3, "BLPOP target 0"), "");
        assert_eq!(h.line(2, "BLMOVE src target RIGHT LEFT 0"), "");
        h.check("RPUSH src x", &int(1));
        assert_eq!(h.take(2), bulk("x"));
        assert_eq!(h.take(3), arr(&["target", "x"]));
        h.check("EXISTS target src", &int(0));
        h.node.check_invariants();
    }

    #[test]
    fn wrong_types_while_blocked() {
        let mut h = node();
        h.connect(2);
        h.check("SET s v", OK);
        h.check("BLPOP s 0", WRONGTYPE);
        h.check("BRPOPLPUSH s d 0", WRONGTYPE);
        // The key turning into a string does not wake the client with an error.
        assert_eq!(h.line(2, "BLPOP l 0"), "");
        h.line(1, "MULTI");
        h.line(1, "LPUSH l a");
        h.line(1, "DEL l");
        h.line(1, "SET l foo");
        h.check("EXEC", "*3\r\n:1\r\n:1\r\n+OK\r\n");
        assert_eq!(h.take(2), "");
        h.line(1, "DEL l");
        h.line(1, "LPUSH l b");
        assert_eq!(h.take(2), arr(&["l", "b"]));

        // A destination of another type fails the woken client and keeps the element.
        h.line(1, "SET target nolist");
        assert_eq!(h.line(2, "BRPOPLPUSH blist target 0"), "");
        h.check("RPUSH blist a b c", &int(3));
        assert_eq!(h.take(2), WRONGTYPE);
        h.check("LRANGE blist 0 -1", &arr(&["a", "b", "c"]));
        h.node.check_invariants();
    }

    #[test]
    fn blocking_inside_multi_does_not_block() {
        let mut h = node();
        h.line(1, "LPUSH x foo bar");
        h.line(1, "MULTI");
        h.check("BLPOP x 0", "+QUEUED\r\n");
        h.line(1, "BLPOP x 0");
        h.line(1, "BLPOP x 0");
        h.line(1, "BRPOPLPUSH x y 0");
        h.line(1, "BLMPOP 0 1 x LEFT");
        h.check(
            "EXEC",
            &format!(
                "*5\r\n{}{}{}{}{}",
                arr(&["x", "bar"]),
                arr(&["x", "foo"]),
                NIL_ARRAY,
                NIL,
                NIL_ARRAY
            ),
        );
        h.node.check_invariants();
    }

    #[test]
    fn pushes_invalidate_watch() {
        let mut h = node();
        h.connect(2);
        h.check("WATCH l", OK);
        h.line(2, "LPUSH l a");
        h.line(1, "MULTI");
        h.line(1, "LLEN l");
        h.check("EXEC", NIL_ARRAY);
        // A client still blocked changes nothing.
        h.connect(3);
        assert_eq!(h.line(3, "BRPOPLPUSH src dst 0"), "");
        h.check("WATCH dst", OK);
        h.line(1, "MULTI");
        h.line(1, "PING");
        h.check("EXEC", "*1\r\n+PONG\r\n");
        // Its push, once served, does.
        h.check("WATCH dst", OK);
        h.line(2, "LPUSH src e");
        assert_eq!(h.take(3), bulk("e"));
        h.line(1, "MULTI");
        h.line(1, "PING");
        h.check("EXEC", NIL_ARRAY);
    }

    #[test]
    fn same_key_many_times_and_moved_into_place() {
        let mut h = node();
        h.connect(2);
        assert_eq!(h.line(2, "BLPOP k1 k2 k2 k1 0"), "");
        h.line(1, "LPUSH k2 b");
        assert_eq!(h.take(2), arr(&["k2", "b"]));
        assert_eq!(h.line(2, "BLPOP foo 0"), "");
        h.line(1, "LPUSH bob abc def hij");
        h.line(1, "RENAME bob foo");
        assert_eq!(h.take(2), arr(&["foo", "hij"]));
        h.node.check_invariants();
    }
}

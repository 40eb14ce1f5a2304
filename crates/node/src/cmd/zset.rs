//! Sorted set commands: ZADD, ZINCRBY, ZREM, ZCARD, ZCOUNT, ZLEXCOUNT, ZSCORE, ZMSCORE, ZRANK,
//! ZREVRANK, the ZRANGE family (ZRANGE, ZRANGESTORE, ZREVRANGE, Z[REV]RANGEBYSCORE,
//! Z[REV]RANGEBYLEX), ZREMRANGEBYRANK/SCORE/LEX, ZPOPMIN/MAX, BZPOPMIN/MAX, ZMPOP, BZMPOP,
//! ZRANDMEMBER, ZUNION/ZINTER/ZDIFF and their STORE forms, ZINTERCARD, ZSCAN.
//!
//! Replies, error texts and the order in which arguments, key types and limits are checked
//! follow Redis 7.0. Every rank, range bound and insertion is O(log n) on the store's
//! order-statistic tree; a range reply costs O(log n + m) for m returned members.

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::BTreeMap;

use bytes::Bytes;
use lattice_resp::write::format_double;
use lattice_resp::Protocol;
use lattice_store::{glob_match, Db, Set, Value, ZSet};

use crate::args::{is, parse_f64, parse_i64, NOT_FLOAT, NOT_INTEGER};
use crate::blocking::{parse_timeout, TimeoutReply};
use crate::cmd::keys::parse_cursor;
use crate::cmd::pubsub::{EVENT_GENERIC, EVENT_NEW, EVENT_ZSET};
use crate::cmd::set::{
    distinct_picks, draw, empty_scan, parse_scan_opts, random_index, WrongType, MUST_BE_POSITIVE,
};
use crate::cmd::typed::{self, Typed};
use crate::command::{spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};

const ZSETS: &str = "sorted-set";

const W: &[&str] = &["write"];
const WD: &[&str] = &["write", "denyoom"];
const WDF: &[&str] = &["write", "denyoom", "fast"];
const WF: &[&str] = &["write", "fast"];
const R: &[&str] = &["readonly"];
const RF: &[&str] = &["readonly", "fast"];
const BLOCKING: &[&str] = &["write", "noscript", "blocking", "fast"];

// One line per command reads best as a table.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    spec("zadd", -4, WDF, (1, 1, 1), ZSETS, "1.2.0", "Add one or more members to a sorted set, or update its score if it already exists", zadd).with(Flag::LoggedAsCommand).with(Flag::IncrementsWithIncrOption),
    spec("zincrby", 4, WDF, (1, 1, 1), ZSETS, "1.2.0", "Increment the score of a member in a sorted set", zincrby).with(Flag::LoggedAsCommand).with(Flag::Increments),
    spec("zrem", -3, WF, (1, 1, 1), ZSETS, "1.2.0", "Remove one or more members from a sorted set", zrem).with(Flag::LoggedAsCommand),
    spec("zcard", 2, RF, (1, 1, 1), ZSETS, "1.2.0", "Get the number of members in a sorted set", zcard),
    spec("zcount", 4, RF, (1, 1, 1), ZSETS, "2.0.0", "Count the members in a sorted set with scores within the given values", zcount),
    spec("zlexcount", 4, RF, (1, 1, 1), ZSETS, "2.8.9", "Count the number of members in a sorted set between a given lexicographical range", zlexcount),
    spec("zscore", 3, RF, (1, 1, 1), ZSETS, "1.2.0", "Get the score associated with the given member in a sorted set", zscore),
    spec("zmscore", -3, RF, (1, 1, 1), ZSETS, "6.2.0", "Get the score associated with the given members in a sorted set", zmscore),
    spec("zrank", 3, RF, (1, 1, 1), ZSETS, "2.0.0", "Determine the index of a member in a sorted set", zrank),
    spec("zrevrank", 3, RF, (1, 1, 1), ZSETS, "2.0.0", "Determine the index of a member in a sorted set, with scores ordered from high to low", zrevrank),
    spec("zrange", -4, R, (1, 1, 1), ZSETS, "1.2.0", "Return a range of members in a sorted set", zrange),
    spec("zrangestore", -5, WD, (1, 2, 1), ZSETS, "6.2.0", "Store a range of members from sorted set into another key", zrangestore),
    spec("zrevrange", -4, R, (1, 1, 1), ZSETS, "1.2.0", "Return a range of members in a sorted set, by index, with scores ordered from high to low", zrevrange),
    spec("zrangebyscore", -4, R, (1, 1, 1), ZSETS, "1.0.5", "Return a range of members in a sorted set, by score", zrangebyscore),
    spec("zrevrangebyscore", -4, R, (1, 1, 1), ZSETS, "2.2.0", "Return a range of members in a sorted set, by score, with scores ordered from high to low", zrevrangebyscore),
    spec("zrangebylex", -4, R, (1, 1, 1), ZSETS, "2.8.9", "Return a range of members in a sorted set, by lexicographical range", zrangebylex),
    spec("zrevrangebylex", -4, R, (1, 1, 1), ZSETS, "2.8.9", "Return a range of members in a sorted set, by lexicographical range, ordered from higher to lower strings.", zrevrangebylex),
    spec("zremrangebyrank", 4, W, (1, 1, 1), ZSETS, "2.0.0", "Remove all members in a sorted set within the given indexes", zremrangebyrank).with(Flag::LoggedAsCommand),
    spec("zremrangebyscore", 4, W, (1, 1, 1), ZSETS, "1.2.0", "Remove all members in a sorted set within the given scores", zremrangebyscore).with(Flag::LoggedAsCommand),
    spec("zremrangebylex", 4, W, (1, 1, 1), ZSETS, "2.8.9", "Remove all members in a sorted set between the given lexicographical range", zremrangebylex),
    spec("zpopmin", -2, WF, (1, 1, 1), ZSETS, "5.0.0", "Remove and return members with the lowest scores in a sorted set", zpopmin),
    spec("zpopmax", -2, WF, (1, 1, 1), ZSETS, "5.0.0", "Remove and return members with the highest scores in a sorted set", zpopmax),
    spec("bzpopmin", -3, BLOCKING, (1, -2, 1), ZSETS, "5.0.0", "Remove and return the member with the lowest score from one or more sorted sets, or block until one is available", bzpopmin),
    spec("bzpopmax", -3, BLOCKING, (1, -2, 1), ZSETS, "5.0.0", "Remove and return the member with the highest score from one or more sorted sets, or block until one is available", bzpopmax),
    spec("zmpop", -4, &["write", "movablekeys"], (0, 0, 0), ZSETS, "7.0.0", "Remove and return members with scores in a sorted set", zmpop),
    spec("bzmpop", -5, &["write", "blocking", "movablekeys"], (0, 0, 0), ZSETS, "7.0.0", "Remove and return members with scores in a sorted set or block until one is available", bzmpop),
    spec("zrandmember", -2, R, (1, 1, 1), ZSETS, "6.2.0", "Get one or multiple random elements from a sorted set", zrandmember),
    spec("zunion", -3, &["readonly", "movablekeys"], (0, 0, 0), ZSETS, "6.2.0", "Add multiple sorted sets", zunion),
    spec("zinter", -3, &["readonly", "movablekeys"], (0, 0, 0), ZSETS, "6.2.0", "Intersect multiple sorted sets", zinter),
    spec("zdiff", -3, &["readonly", "movablekeys"], (0, 0, 0), ZSETS, "6.2.0", "Subtract multiple sorted sets", zdiff),
    spec("zunionstore", -4, &["write", "denyoom", "movablekeys"], (1, 1, 1), ZSETS, "2.0.0", "Add multiple sorted sets and store the resulting sorted set in a new key", zunionstore),
    spec("zinterstore", -4, &["write", "denyoom", "movablekeys"], (1, 1, 1), ZSETS, "2.0.0", "Intersect multiple sorted sets and store the resulting sorted set in a new key", zinterstore),
    spec("zdiffstore", -4, &["write", "denyoom", "movablekeys"], (1, 1, 1), ZSETS, "6.2.0", "Subtract multiple sorted sets and store the resulting sorted set in a new key", zdiffstore),
    spec("zintercard", -3, &["readonly", "movablekeys"], (0, 0, 0), ZSETS, "7.0.0", "Intersect multiple sorted sets and return the cardinality of the result", zintercard),
    spec("zscan", -3, R, (1, 1, 1), ZSETS, "2.8.0", "Incrementally iterate sorted sets elements and associated scores", zscan),
];

const NAN_RESULT: &str = "ERR resulting score is not a number (NaN)";
const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";

// ---------------------------------------------------------------------------------------------
// Lookup, limits, replies

/// The listpack limits in force. Redis's `zset-max-ziplist-*` names are aliases of the
/// `zset-max-listpack-*` ones; whichever was lowered last, the smaller value is the one the
/// caller asked for.
struct Limits {
    entries: usize,
    value: usize,
}

fn limits(core: &Core) -> Limits {
    Limits {
        entries: core.config.encoding.zset_max_entries,
        value: core.config.encoding.zset_max_value,
    }
}

fn zset_in(value: &mut Value) -> Option<&mut ZSet> {
    ZSet::of_mut(value)
}

fn peek_zset_mut<'d>(db: &'d mut Db, key: &[u8], now_ms: u64) -> Option<&'d mut ZSet> {
    db.get_live(key, now_ms, |_| {})
        .and_then(|e| zset_in(&mut e.value))
}

/// Replaces `dst` with `result` (or deletes it when `result` is empty), replies with the
/// cardinality and reports it as `event`, as the *STORE commands do.
pub(crate) fn store_result(
    core: &mut Core,
    call: &mut Call,
    dst: &[u8],
    mut result: ZSet,
    event: &str,
) {
    let now_ms = call.now_ms;
    let n = result.len();
    if n > 0 {
        let l = limits(core);
        result.convert_if_needed(l.entries, l.value);
        let created = core
            .db
            .insert(dst, Value::ZSet(Box::new(result)), None, now_ms)
            .is_none();
        call.out.integer(n as i64);
        if created {
            core.notify(EVENT_NEW, "new", dst);
        }
        core.modified(dst);
        core.notify(EVENT_ZSET, event, dst);
    } else {
        call.out.integer(0);
        if core.exists(dst, now_ms) {
            core.db.remove(dst);
            core.modified(dst);
            core.notify(EVENT_GENERIC, "del", dst);
        }
    }
}

/// Writes (member, score) pairs as Redis's range replies do: members only; or with scores,
/// flat in RESP2 and as [member, score] pairs in RESP3.
fn reply_pairs<'a>(
    call: &mut Call,
    n: usize,
    items: impl Iterator<Item = (&'a [u8], f64)>,
    withscores: bool,
) {
    let nested = withscores && call.out.protocol() == Protocol::Resp3;
    call.out
        .array_len(if withscores && !nested { 2 * n } else { n });
    for (m, s) in items {
        if nested {
            call.out.array_len(2);
        }
        call.out.bulk(m);
        if withscores {
            call.out.double(s);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing scores and ranges

/// A score or increment argument as Redis's `getDoubleFromObject` reads it: the whole argument
/// is a number, no surrounding spaces, not NaN, and no overflow to infinity or underflow to
/// zero (infinity itself may be spelled out).
pub(crate) fn parse_score(arg: &[u8]) -> Option<f64> {
    let v = parse_f64(arg).or_else(|| parse_hex_float(arg))?;
    if v.is_infinite() && !arg.iter().any(|b| b.eq_ignore_ascii_case(&b'i')) {
        return None;
    }
    if v == 0.0 {
        let mantissa = arg
            .split(|b| *b == b'e' || *b == b'E')
            .next()
            .unwrap_or(b"");
        if mantissa.iter().any(|b| (b'1'..=b'9').contains(b)) {
            return None;
        }
    }
    Some(v)
}

/// A range bound as `strtod` reads it in `zslParseRange`: leading spaces allowed, overflow to
/// infinity allowed, NaN rejected.
fn parse_bound_number(arg: &[u8]) -> Option<f64> {
    let start = arg
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(arg.len());
    let rest = &arg[start..];
    if rest.is_empty() {
        // strtod converts nothing and stops at the end: Redis accepts it as 0.
        return Some(0.0);
    }
    parse_f64(rest).or_else(|| parse_hex_float(rest))
}

/// C's hexadecimal floating-point form, which `strtod` accepts: `[+-]0x<hex>[.<hex>][p[+-]<dec>]`.
fn parse_hex_float(arg: &[u8]) -> Option<f64> {
    let (neg, rest) = match arg.first()? {
        b'-' => (true, &arg[1..]),
        b'+' => (false, &arg[1..]),
        _ => (false, arg),
    };
    let rest = rest
        .strip_prefix(b"0x")
        .or_else(|| rest.strip_prefix(b"0X"))?;
    let (mantissa, exp) = match rest.iter().position(|b| *b == b'p' || *b == b'P') {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let (int, frac) = match mantissa.iter().position(|b| *b == b'.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, &mantissa[..0]),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut v = 0.0f64;
    for &d in int.iter().chain(frac) {
        v = v * 16.0 + (d as char).to_digit(16)? as f64;
    }
    let mut e: i64 = -4 * frac.len() as i64;
    if let Some(exp) = exp {
        let text = std::str::from_utf8(exp).ok()?;
        if text.is_empty() || text.starts_with(['+', '-']) && text.len() == 1 {
            return None;
        }
        e += text.parse::<i64>().ok()?.clamp(-10_000, 10_000);
    }
    let v = v * 2f64.powi(e.clamp(-2000, 2000) as i32);
    Some(if neg { -v } else { v })
}

#[derive(Clone, Copy, Debug)]
struct ScoreRange {
    min: f64,
    max: f64,
    minex: bool,
    maxex: bool,
}

fn parse_score_bound(arg: &[u8]) -> Option<(f64, bool)> {
    match arg.strip_prefix(b"(") {
        Some(rest) => parse_bound_number(rest).map(|v| (v, true)),
        None => parse_bound_number(arg).map(|v| (v, false)),
    }
}

fn parse_score_range(min: &[u8], max: &[u8]) -> Option<ScoreRange> {
    let (min, minex) = parse_score_bound(min)?;
    let (max, maxex) = parse_score_bound(max)?;
    Some(ScoreRange {
        min,
        max,
        minex,
        maxex,
    })
}

impl ScoreRange {
    /// Ranks `lo..hi` of the members inside the range.
    fn ranks(&self, z: &ZSet) -> (usize, usize) {
        let lo = if self.minex {
            z.count_while(|_, s| s <= self.min)
        } else {
            z.count_while(|_, s| s < self.min)
        };
        let hi = if self.maxex {
            z.count_while(|_, s| s < self.max)
        } else {
            z.count_while(|_, s| s <= self.max)
        };
        (lo, hi.max(lo))
    }
}

#[derive(Clone, Copy, Debug)]
enum LexBound<'a> {
    NegInf,
    PosInf,
    Incl(&'a [u8]),
    Excl(&'a [u8]),
}

fn parse_lex_bound(arg: &[u8]) -> Option<LexBound<'_>> {
    match arg.first()? {
        b'+' if arg.len() == 1 => Some(LexBound::PosInf),
        b'-' if arg.len() == 1 => Some(LexBound::NegInf),
        b'(' => Some(LexBound::Excl(&arg[1..])),
        b'[' => Some(LexBound::Incl(&arg[1..])),
        _ => None,
    }
}

#[derive(Clone, Copy, Debug)]
struct LexRange<'a> {
    min: LexBound<'a>,
    max: LexBound<'a>,
}

fn parse_lex_range<'a>(min: &'a [u8], max: &'a [u8]) -> Option<LexRange<'a>> {
    Some(LexRange {
        min: parse_lex_bound(min)?,
        max: parse_lex_bound(max)?,
    })
}

impl LexRange<'_> {
    /// Ranks `lo..hi` of the members inside the range (meaningful when all scores are equal,
    /// as in Redis).
    fn ranks(&self, z: &ZSet) -> (usize, usize) {
        let lo = match self.min {
            LexBound::NegInf => 0,
            LexBound::PosInf => z.len(),
            LexBound::Incl(m) => z.count_while(|x, _| x < m),
            LexBound::Excl(m) => z.count_while(|x, _| x <= m),
        };
        let hi = match self.max {
            LexBound::NegInf => 0,
            LexBound::PosInf => z.len(),
            LexBound::Incl(m) => z.count_while(|x, _| x <= m),
            LexBound::Excl(m) => z.count_while(|x, _| x < m),
        };
        (lo, hi.max(lo))
    }
}

/// Redis's rank-range sanitising: negative indexes count from the end; `None` when empty.
fn rank_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let llen = len as i64;
    let mut start = if start < 0 { llen + start } else { start };
    let mut end = if end < 0 { llen + end } else { end };
    if start < 0 {
        start = 0;
    }
    if start > end || start >= llen {
        return None;
    }
    if end >= llen {
        end = llen - 1;
    }
    Some((start as usize, end as usize))
}

// ---------------------------------------------------------------------------------------------
// ZADD, ZINCRBY

#[derive(Default, Clone, Copy)]
pub(crate) struct AddFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
    pub ch: bool,
    pub incr: bool,
}

/// What adding one element did.
enum Outcome {
    Nop,
    Added(f64),
    Updated(f64),
    /// Processed without a change (same score).
    Same(f64),
}

/// Redis's `zsetAdd`: one element under the ZADD flags. `Err` when an increment gives NaN.
fn zset_add(z: &mut ZSet, member: &[u8], score: f64, f: AddFlags) -> Result<Outcome, ()> {
    match z.score(member) {
        Some(cur) => {
            if f.nx {
                return Ok(Outcome::Nop);
            }
            let new = if f.incr {
                let n = cur + score;
                if n.is_nan() {
                    return Err(());
                }
                n
            } else {
                score
            };
            if (f.lt && new >= cur) || (f.gt && new <= cur) {
                return Ok(Outcome::Nop);
            }
            if new != cur {
                z.insert(member, new);
                Ok(Outcome::Updated(new))
            } else {
                Ok(Outcome::Same(new))
            }
        }
        None => {
            if f.xx {
                return Ok(Outcome::Nop);
            }
            z.insert(member, score);
            Ok(Outcome::Added(score))
        }
    }
}

/// The option words from argument 2 on, as ZADD reads them (GEOADD, with `zadd_words` false,
/// knows only NX, XX and CH): the flags and the position of the first other argument.
pub(crate) fn parse_add_flags(call: &Call, zadd_words: bool) -> (AddFlags, usize) {
    let mut f = AddFlags::default();
    let mut idx = 2;
    while idx < call.argc() {
        let a = call.arg(idx);
        if is(a, "nx") {
            f.nx = true;
        } else if is(a, "xx") {
            f.xx = true;
        } else if is(a, "ch") {
            f.ch = true;
        } else if zadd_words && is(a, "incr") {
            f.incr = true;
        } else if zadd_words && is(a, "gt") {
            f.gt = true;
        } else if zadd_words && is(a, "lt") {
            f.lt = true;
        } else {
            break;
        }
        idx += 1;
    }
    (f, idx)
}

fn zadd(core: &mut Core, call: &mut Call) {
    let (f, idx) = parse_add_flags(call, true);
    let elements = call.argc() - idx;
    if !elements.is_multiple_of(2) || elements == 0 {
        return call.syntax_error();
    }
    if f.nx && f.xx {
        return call.error("ERR XX and NX options at the same time are not compatible");
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return call.error("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if f.incr && elements > 2 {
        return call.error("ERR INCR option supports a single increment-element pair");
    }
    let mut pairs: Vec<(f64, &[u8])> = Vec::with_capacity(elements / 2);
    for p in call.args[idx..].chunks(2) {
        match parse_score(&p[0]) {
            Some(s) => pairs.push((s, &p[1])),
            None => return call.error(NOT_FLOAT),
        }
    }
    zadd_generic(core, call, f, &pairs);
}

fn zincrby(core: &mut Core, call: &mut Call) {
    let Some(by) = parse_score(call.arg(2)) else {
        return call.error(NOT_FLOAT);
    };
    let f = AddFlags {
        incr: true,
        ..AddFlags::default()
    };
    zadd_generic(core, call, f, &[(by, call.arg(3))]);
}

pub(crate) fn zadd_generic(core: &mut Core, call: &mut Call, f: AddFlags, pairs: &[(f64, &[u8])]) {
    let key = call.arg(1);
    let now_ms = call.now_ms;
    let l = limits(core);
    let mut created = false;
    match typed::write::<ZSet>(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(Some(_)) => {}
        Ok(None) => {
            if f.xx {
                return if f.incr {
                    call.out.null()
                } else {
                    call.out.integer(0)
                };
            }
            // Like Redis 7.0, the encoding of a new set is chosen from its first member only;
            // later members convert it as they are inserted.
            let first_len = pairs.first().map_or(0, |p| p.1.len());
            let z = ZSet::with_hint(1, first_len, l.entries, l.value);
            core.db.insert(key, Value::ZSet(Box::new(z)), None, now_ms);
            created = true;
        }
    }
    let z = peek_zset_mut(&mut core.db, key, now_ms).expect("present");
    let (mut added, mut updated, mut processed) = (0i64, 0i64, 0i64);
    let mut last = 0.0;
    let mut nan = false;
    for &(score, member) in pairs {
        match zset_add(z, member, score, f) {
            Err(()) => {
                nan = true;
                break;
            }
            Ok(Outcome::Nop) => {}
            Ok(Outcome::Added(s)) => {
                added += 1;
                processed += 1;
                last = s;
            }
            Ok(Outcome::Updated(s)) => {
                updated += 1;
                processed += 1;
                last = s;
            }
            Ok(Outcome::Same(s)) => {
                processed += 1;
                last = s;
            }
        }
    }
    z.convert_if_needed(l.entries, l.value);
    let empty = z.is_empty();
    if empty {
        core.db.remove(key);
    } else if created {
        core.notify(EVENT_NEW, "new", key);
    }
    if added > 0 || updated > 0 {
        core.modified(key);
        core.notify(EVENT_ZSET, if f.incr { "zincr" } else { "zadd" }, key);
    }
    if nan {
        return call.error(NAN_RESULT);
    }
    if f.incr {
        if processed > 0 {
            call.out.double(last);
        } else {
            call.out.null();
        }
    } else {
        call.out.integer(if f.ch { added + updated } else { added });
    }
}

// ---------------------------------------------------------------------------------------------
// Single-member reads and removal

fn zrem(core: &mut Core, call: &mut Call) {
    typed::remove_members::<ZSet>(core, call, "zrem", |z, m| z.remove(m).is_some());
}

fn zcard(core: &mut Core, call: &mut Call) {
    match typed::read::<ZSet>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(z) => call.out.integer(z.map_or(0, |z| z.len()) as i64),
    }
}

fn zscore(core: &mut Core, call: &mut Call) {
    let member = call.arg(2);
    match typed::read::<ZSet>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(z) => match z.and_then(|z| z.score(member)) {
            Some(s) => call.out.double(s),
            None => call.out.null(),
        },
    }
}

fn zmscore(core: &mut Core, call: &mut Call) {
    match typed::read::<ZSet>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(z) => {
            let z = z.map(|z| &*z);
            call.out.array_len(call.argc() - 2);
            for m in &call.args[2..] {
                match z.and_then(|z| z.score(m)) {
                    Some(s) => call.out.double(s),
                    None => call.out.null(),
                }
            }
        }
    }
}

fn zrank_generic(core: &mut Core, call: &mut Call, rev: bool) {
    let member = call.arg(2);
    match typed::read::<ZSet>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(z) => {
            let rank = z.and_then(|z| {
                z.rank(member)
                    .map(|r| if rev { z.len() - 1 - r } else { r })
            });
            match rank {
                Some(r) => call.out.integer(r as i64),
                None => call.out.null(),
            }
        }
    }
}

fn zrank(core: &mut Core, call: &mut Call) {
    zrank_generic(core, call, false);
}

fn zrevrank(core: &mut Core, call: &mut Call) {
    zrank_generic(core, call, true);
}

fn zcount(core: &mut Core, call: &mut Call) {
    let Some(range) = parse_score_range(call.arg(2), call.arg(3)) else {
        return call.error(NOT_FLOAT_RANGE);
    };
    match typed::read::<ZSet>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(None) => call.out.integer(0),
        Ok(Some(z)) => {
            let (lo, hi) = range.ranks(z);
            call.out.integer((hi - lo) as i64);
        }
    }
}

fn zlexcount(core: &mut Core, call: &mut Call) {
    let Some(range) = parse_lex_range(call.arg(2), call.arg(3)) else {
        return call.error(NOT_LEX_RANGE);
    };
    match typed::read::<ZSet>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(None) => call.out.integer(0),
        Ok(Some(z)) => {
            let (lo, hi) = range.ranks(z);
            call.out.integer((hi - lo) as i64);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The ZRANGE family

#[derive(Clone, Copy, PartialEq, Eq)]
enum RangeType {
    Auto,
    Rank,
    Score,
    Lex,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Auto,
    Forward,
    Reverse,
}

/// Parsed range: the bounds as the range type reads them.
enum Bounds<'a> {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange<'a>),
}

/// Ranks to emit, in emission order: `start..end` ascending, or `end-1` down to `start`.
fn select(
    len: usize,
    bounds: &Bounds,
    z: &ZSet,
    reverse: bool,
    offset: i64,
    limit: i64,
) -> (usize, usize) {
    let (lo, hi) = match bounds {
        Bounds::Rank(start, end) => match rank_range(*start, *end, len) {
            None => return (0, 0),
            Some((s, e)) => {
                return if reverse {
                    (len - 1 - e, len - s)
                } else {
                    (s, e + 1)
                }
            }
        },
        Bounds::Score(r) => r.ranks(z),
        Bounds::Lex(r) => r.ranks(z),
    };
    if offset < 0 || limit == 0 {
        return (0, 0);
    }
    let avail = hi - lo;
    let offset = (offset as u64).min(avail as u64) as usize;
    let take = if limit < 0 {
        avail - offset
    } else {
        (limit as u64).min((avail - offset) as u64) as usize
    };
    if reverse {
        (hi - offset - take, hi - offset)
    } else {
        (lo + offset, lo + offset + take)
    }
}

/// Redis's `zrangeGenericCommand`: `src_idx` is the position of the source key; `dst` is the
/// destination of ZRANGESTORE.
fn zrange_generic(
    core: &mut Core,
    call: &mut Call,
    src_idx: usize,
    dst: Option<&[u8]>,
    mut rangetype: RangeType,
    mut direction: Direction,
) {
    let key = call.arg(src_idx);
    let (mut minidx, mut maxidx) = (src_idx + 1, src_idx + 2);
    let mut withscores = false;
    let (mut offset, mut limit) = (0i64, -1i64);
    let mut j = src_idx + 3;
    while j < call.argc() {
        let left = call.argc() - j - 1;
        let a = call.arg(j);
        if dst.is_none() && is(a, "withscores") {
            withscores = true;
        } else if is(a, "limit") && left >= 2 {
            match (parse_i64(call.arg(j + 1)), parse_i64(call.arg(j + 2))) {
                (Some(o), Some(l)) => {
                    offset = o;
                    limit = l;
                }
                _ => return call.error(NOT_INTEGER),
            }
            j += 2;
        } else if direction == Direction::Auto && is(a, "rev") {
            direction = Direction::Reverse;
        } else if rangetype == RangeType::Auto && is(a, "bylex") {
            rangetype = RangeType::Lex;
        } else if rangetype == RangeType::Auto && is(a, "byscore") {
            rangetype = RangeType::Score;
        } else {
            return call.syntax_error();
        }
        j += 1;
    }
    if direction == Direction::Auto {
        direction = Direction::Forward;
    }
    if rangetype == RangeType::Auto {
        rangetype = RangeType::Rank;
    }
    if limit != -1 && rangetype == RangeType::Rank {
        return call.error(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
    }
    if withscores && rangetype == RangeType::Lex {
        return call.error("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    let reverse = direction == Direction::Reverse;
    if reverse && rangetype != RangeType::Rank {
        std::mem::swap(&mut minidx, &mut maxidx);
    }
    let bounds = match rangetype {
        RangeType::Rank | RangeType::Auto => {
            match (parse_i64(call.arg(minidx)), parse_i64(call.arg(maxidx))) {
                (Some(s), Some(e)) => Bounds::Rank(s, e),
                _ => return call.error(NOT_INTEGER),
            }
        }
        RangeType::Score => match parse_score_range(call.arg(minidx), call.arg(maxidx)) {
            Some(r) => Bounds::Score(r),
            None => return call.error(NOT_FLOAT_RANGE),
        },
        RangeType::Lex => match parse_lex_range(call.arg(minidx), call.arg(maxidx)) {
            Some(r) => Bounds::Lex(r),
            None => return call.error(NOT_LEX_RANGE),
        },
    };
    let z = match typed::read::<ZSet>(core, key, call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => {
            return match dst {
                Some(dst) => store_result(core, call, dst, ZSet::new(), "zrangestore"),
                None => call.out.array_len(0),
            }
        }
        Ok(Some(z)) => &*z,
    };
    let (from, to) = select(z.len(), &bounds, z, reverse, offset, limit);
    let n = to - from;
    let items = || {
        let start = if reverse { to.wrapping_sub(1) } else { from };
        z.iter_at(start, reverse).take(n)
    };
    match dst {
        None => reply_pairs(call, n, items(), withscores),
        Some(dst) => {
            let mut result = ZSet::new();
            for (m, s) in items() {
                result.insert(m, s);
            }
            store_result(core, call, dst, result, "zrangestore");
        }
    }
}

fn zrange(core: &mut Core, call: &mut Call) {
    zrange_generic(core, call, 1, None, RangeType::Auto, Direction::Auto);
}

fn zrangestore(core: &mut Core, call: &mut Call) {
    zrange_generic(
        core,
        call,
        2,
        Some(call.arg(1)),
        RangeType::Auto,
        Direction::Auto,
    );
}

fn zrevrange(core: &mut Core, call: &mut Call) {
    zrange_generic(core, call, 1, None, RangeType::Rank, Direction::Reverse);
}

fn zrangebyscore(core: &mut Core, call: &mut Call) {
    zrange_generic(core, call, 1, None, RangeType::Score, Direction::Forward);
}

fn zrevrangebyscore(core: &mut Core, call: &mut Call) {
    zrange_generic(core, call, 1, None, RangeType::Score, Direction::Reverse);
}

fn zrangebylex(core: &mut Core, call: &mut Call) {
    zrange_generic(core, call, 1, None, RangeType::Lex, Direction::Forward);
}

fn zrevrangebylex(core: &mut Core, call: &mut Call) {
    zrange_generic(core, call, 1, None, RangeType::Lex, Direction::Reverse);
}

// ---------------------------------------------------------------------------------------------
// ZREMRANGEBY*

fn zremrange_generic(core: &mut Core, call: &mut Call, rangetype: RangeType) {
    let key = call.arg(1);
    let bounds = match rangetype {
        RangeType::Score => match parse_score_range(call.arg(2), call.arg(3)) {
            Some(r) => Bounds::Score(r),
            None => return call.error(NOT_FLOAT_RANGE),
        },
        RangeType::Lex => match parse_lex_range(call.arg(2), call.arg(3)) {
            Some(r) => Bounds::Lex(r),
            None => return call.error(NOT_LEX_RANGE),
        },
        _ => match (parse_i64(call.arg(2)), parse_i64(call.arg(3))) {
            (Some(s), Some(e)) => Bounds::Rank(s, e),
            _ => return call.error(NOT_INTEGER),
        },
    };
    let z = match typed::write::<ZSet>(core, key, call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.integer(0),
        Ok(Some(z)) => z,
    };
    let (from, to) = select(z.len(), &bounds, z, false, 0, -1);
    let removed = z.remove_rank_range(from, to);
    if removed > 0 {
        let event = match rangetype {
            RangeType::Score => "zremrangebyscore",
            RangeType::Lex => "zremrangebylex",
            _ => "zremrangebyrank",
        };
        typed::removed_from::<ZSet>(core, key, event);
    }
    call.out.integer(removed as i64);
}

fn zremrangebyrank(core: &mut Core, call: &mut Call) {
    zremrange_generic(core, call, RangeType::Rank);
}

fn zremrangebyscore(core: &mut Core, call: &mut Call) {
    zremrange_generic(core, call, RangeType::Score);
}

fn zremrangebylex(core: &mut Core, call: &mut Call) {
    zremrange_generic(core, call, RangeType::Lex);
}

// ---------------------------------------------------------------------------------------------
// Pops

#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Min,
    Max,
}

/// How a pop reply is shaped (Redis's `emitkey` / `use_nested_array`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum PopReply {
    /// ZPOPMIN/MAX: flat [m, s, ...], or (RESP3 with COUNT) [[m, s], ...].
    Plain { nested: bool },
    /// BZPOPMIN/MAX: [key, m, s].
    WithKey,
    /// ZMPOP/BZMPOP: [key, [[m, s], ...]].
    Nested,
}

/// Pops up to `count` members from the non-empty sorted set at `key` and replies.
fn pop_and_reply(
    core: &mut Core,
    call: &mut Call,
    key: &[u8],
    end: End,
    count: usize,
    shape: PopReply,
) {
    let z = peek_zset_mut(&mut core.db, key, call.now_ms).expect("present");
    let n = count.min(z.len());
    match shape {
        PopReply::Plain { nested: false } => call.out.array_len(2 * n),
        PopReply::Plain { nested: true } => call.out.array_len(n),
        PopReply::WithKey => {
            call.out.array_len(2 * n + 1);
            call.out.bulk(key);
        }
        PopReply::Nested => {
            call.out.array_len(2);
            call.out.bulk(key);
            call.out.array_len(n);
        }
    }
    let pair = matches!(shape, PopReply::Plain { nested: true } | PopReply::Nested);
    for _ in 0..n {
        let (m, s) = match end {
            End::Min => z.pop_min(),
            End::Max => z.pop_max(),
        }
        .expect("n members present");
        if pair {
            call.out.array_len(2);
        }
        call.out.bulk(&m);
        call.out.double(s);
    }
    typed::removed_from::<ZSet>(
        core,
        key,
        if end == End::Min {
            "zpopmin"
        } else {
            "zpopmax"
        },
    );
}

/// The first key of `keys` holding a sorted set: `Ok(None)` if none exists, `Err` at the
/// first existing key of another type (keys are looked up for writing, in order). A parked
/// client retried after a change (`retry`) skips keys of another type instead: Redis only
/// serves a blocked client from a key that became a sorted set, and otherwise leaves it
/// blocked.
fn first_zset(
    core: &mut Core,
    keys: &[Bytes],
    now_ms: u64,
    retry: bool,
) -> Result<Option<Bytes>, WrongType> {
    for k in keys {
        match core.lookup_write(k, now_ms).map(|e| &e.value) {
            None => continue,
            Some(Value::ZSet(z)) if z.is_empty() => continue,
            Some(Value::ZSet(_)) => return Ok(Some(k.clone())),
            Some(_) if retry => continue,
            Some(_) => return Err(WrongType),
        }
    }
    Ok(None)
}

/// True when the calling client is parked and this is the retry of its blocking command.
fn is_retry(core: &Core, call: &Call) -> bool {
    core.clients
        .get(&call.conn)
        .is_some_and(|c| c.blocked.is_some())
}

fn zpop_generic(core: &mut Core, call: &mut Call, end: End) {
    if call.argc() > 3 {
        return call.syntax_error();
    }
    let count = if call.argc() == 3 {
        match parse_i64(call.arg(2)) {
            Some(n) if n >= 0 => Some(n as usize),
            _ => return call.error(MUST_BE_POSITIVE),
        }
    } else {
        None
    };
    let key = match first_zset(core, &call.args[1..2], call.now_ms, false) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.array_len(0),
        Ok(Some(k)) => k,
    };
    if count == Some(0) {
        return call.out.array_len(0);
    }
    let nested = call.out.protocol() == Protocol::Resp3 && count.is_some();
    pop_and_reply(
        core,
        call,
        &key,
        end,
        count.unwrap_or(1),
        PopReply::Plain { nested },
    );
}

fn zpopmin(core: &mut Core, call: &mut Call) {
    zpop_generic(core, call, End::Min);
}

fn zpopmax(core: &mut Core, call: &mut Call) {
    zpop_generic(core, call, End::Max);
}

fn bzpop_generic(core: &mut Core, call: &mut Call, end: End) {
    let deadline = match parse_timeout(call.arg(call.argc() - 1), call.now_ms) {
        Ok(d) => d,
        Err(e) => return call.error(e),
    };
    let keys = &call.args[1..call.argc() - 1];
    let retry = is_retry(core, call);
    match first_zset(core, keys, call.now_ms, retry) {
        Err(WrongType) => call.wrong_type(),
        Ok(Some(key)) => pop_and_reply(core, call, &key, end, 1, PopReply::WithKey),
        Ok(None) => core.block(call, keys, deadline, TimeoutReply::NullArray),
    }
}

fn bzpopmin(core: &mut Core, call: &mut Call) {
    bzpop_generic(core, call, End::Min);
}

fn bzpopmax(core: &mut Core, call: &mut Call) {
    bzpop_generic(core, call, End::Max);
}

/// ZMPOP and BZMPOP: `numkeys_idx` is the position of numkeys; BZMPOP's timeout is argument 1.
fn zmpop_generic(core: &mut Core, call: &mut Call, numkeys_idx: usize, blocking: bool) {
    let numkeys = match parse_i64(call.arg(numkeys_idx)) {
        Some(n) if n >= 1 => n as usize,
        _ => return call.error("ERR numkeys should be greater than 0"),
    };
    let where_idx = numkeys_idx.saturating_add(numkeys).saturating_add(1);
    if where_idx >= call.argc() {
        return call.syntax_error();
    }
    let end = if is(call.arg(where_idx), "min") {
        End::Min
    } else if is(call.arg(where_idx), "max") {
        End::Max
    } else {
        return call.syntax_error();
    };
    let mut count: Option<usize> = None;
    let mut j = where_idx + 1;
    while j < call.argc() {
        let more = call.argc() - 1 - j;
        if count.is_none() && is(call.arg(j), "count") && more > 0 {
            j += 1;
            match parse_i64(call.arg(j)) {
                Some(n) if n >= 1 => count = Some(n as usize),
                _ => return call.error("ERR count should be greater than 0"),
            }
        } else {
            return call.syntax_error();
        }
        j += 1;
    }
    let count = count.unwrap_or(1);
    let keys = &call.args[numkeys_idx + 1..where_idx];
    let deadline = if blocking {
        match parse_timeout(call.arg(1), call.now_ms) {
            Ok(d) => Some(d),
            Err(e) => return call.error(e),
        }
    } else {
        None
    };
    let retry = blocking && is_retry(core, call);
    match first_zset(core, keys, call.now_ms, retry) {
        Err(WrongType) => call.wrong_type(),
        Ok(Some(key)) => pop_and_reply(core, call, &key, end, count, PopReply::Nested),
        Ok(None) => match deadline {
            Some(deadline) => core.block(call, keys, deadline, TimeoutReply::NullArray),
            None => call.out.null_array(),
        },
    }
}

fn zmpop(core: &mut Core, call: &mut Call) {
    zmpop_generic(core, call, 1, false);
}

fn bzmpop(core: &mut Core, call: &mut Call) {
    zmpop_generic(core, call, 2, true);
}

// ---------------------------------------------------------------------------------------------
// ZRANDMEMBER

fn zrandmember(core: &mut Core, call: &mut Call) {
    let key = call.arg(1);
    let now_ms = call.now_ms;
    if call.argc() == 2 {
        let len = match typed::read::<ZSet>(core, key, now_ms) {
            Err(WrongType) => return call.wrong_type(),
            Ok(None) => return call.out.null(),
            Ok(Some(z)) => z.len(),
        };
        let i = random_index(core, len);
        let z = typed::peek::<ZSet>(&core.db, key).expect("looked up above");
        let (m, _) = z.get_by_rank(i).expect("rank in range");
        return call.out.bulk(m);
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
    let withscores = match call.argc() {
        3 => false,
        4 if is(call.arg(3), "withscores") => {
            if !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
                return call.error("ERR value is out of range");
            }
            true
        }
        _ => return call.syntax_error(),
    };
    let len = match typed::read::<ZSet>(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.array_len(0),
        Ok(Some(z)) => z.len(),
    };
    if count == 0 {
        return call.out.array_len(0);
    }
    if count < 0 {
        // Repeats allowed: streamed, since the count is the client's to choose.
        let n = count.unsigned_abs();
        let nested = withscores && call.out.protocol() == Protocol::Resp3;
        call.out.array_len(if withscores && !nested {
            2 * n as usize
        } else {
            n as usize
        });
        let z = typed::peek::<ZSet>(&core.db, key).expect("looked up above");
        for _ in 0..n {
            let (m, s) = z
                .get_by_rank(draw(&mut core.rng, len))
                .expect("rank in range");
            if nested {
                call.out.array_len(2);
            }
            call.out.bulk(m);
            if withscores {
                call.out.double(s);
            }
        }
        return;
    }
    let picks = distinct_picks(core, len, count as u64);
    let z = typed::peek::<ZSet>(&core.db, key).expect("looked up above");
    let items = picks
        .iter()
        .map(|&r| z.get_by_rank(r).expect("rank in range"));
    reply_pairs(call, picks.len(), items, withscores);
}

// ---------------------------------------------------------------------------------------------
// ZUNION, ZINTER, ZDIFF and their STORE forms, ZINTERCARD

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// An input of a set operation: a sorted set, a plain set (every score 1), or nothing.
#[derive(Clone, Copy)]
enum Src<'a> {
    Missing,
    Set(&'a Set),
    ZSet(&'a ZSet),
}

impl<'a> Src<'a> {
    fn len(&self) -> usize {
        match self {
            Src::Missing => 0,
            Src::Set(s) => s.len(),
            Src::ZSet(z) => z.len(),
        }
    }

    fn score(&self, member: &[u8]) -> Option<f64> {
        match self {
            Src::Missing => None,
            Src::Set(s) => s.contains(member).then_some(1.0),
            Src::ZSet(z) => z.score(member),
        }
    }

    /// Members with their scores (a plain set's members score 1).
    fn iter(&self) -> Box<dyn Iterator<Item = (Cow<'a, [u8]>, f64)> + 'a> {
        match *self {
            Src::Missing => Box::new(std::iter::empty()),
            Src::Set(s) => Box::new(s.iter().map(|m| (m, 1.0))),
            Src::ZSet(z) => Box::new(z.iter().map(|(m, s)| (Cow::Borrowed(m), s))),
        }
    }
}

fn aggregate(target: &mut f64, val: f64, how: Aggregate) {
    match how {
        Aggregate::Sum => {
            *target += val;
            // inf + -inf: Redis's convention is 0.
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => {
            if val < *target {
                *target = val;
            }
        }
        Aggregate::Max => {
            if val > *target {
                *target = val;
            }
        }
    }
}

fn weighted(score: f64, weight: f64) -> f64 {
    let v = score * weight;
    if v.is_nan() {
        0.0
    } else {
        v
    }
}

/// Redis's `zunionInterDiffGenericCommand`. `numkeys_idx` is the position of numkeys;
/// `dst` the destination of the STORE forms; `card_only` is ZINTERCARD.
fn zsetop_generic(
    core: &mut Core,
    call: &mut Call,
    numkeys_idx: usize,
    dst: Option<&[u8]>,
    op: SetOp,
    card_only: bool,
) {
    let now_ms = call.now_ms;
    let Some(n) = parse_i64(call.arg(numkeys_idx)) else {
        return call.error(NOT_INTEGER);
    };
    if n < 1 {
        let name = call.arg(0).to_ascii_lowercase();
        return call.error(&format!(
            "ERR at least 1 input key is needed for '{}' command",
            String::from_utf8_lossy(&name)
        ));
    }
    let n = n as u64;
    if n > (call.argc() - numkeys_idx - 1) as u64 {
        return call.syntax_error();
    }
    let n = n as usize;
    let keys = &call.args[numkeys_idx + 1..numkeys_idx + 1 + n];
    for k in keys {
        match core.lookup_read(k, now_ms).map(|e| &e.value) {
            None | Some(Value::Set(_)) | Some(Value::ZSet(_)) => {}
            Some(_) => return call.wrong_type(),
        }
    }
    let mut weights = vec![1.0f64; n];
    let mut how = Aggregate::Sum;
    let mut withscores = false;
    let mut limit = 0usize;
    let mut j = numkeys_idx + 1 + n;
    while j < call.argc() {
        let remaining = call.argc() - j;
        let a = call.arg(j);
        if op != SetOp::Diff && !card_only && remaining > n && is(a, "weights") {
            j += 1;
            for w in weights.iter_mut() {
                match parse_score(call.arg(j)) {
                    Some(v) => *w = v,
                    None => return call.error("ERR weight value is not a float"),
                }
                j += 1;
            }
        } else if op != SetOp::Diff && !card_only && remaining >= 2 && is(a, "aggregate") {
            let v = call.arg(j + 1);
            how = if is(v, "sum") {
                Aggregate::Sum
            } else if is(v, "min") {
                Aggregate::Min
            } else if is(v, "max") {
                Aggregate::Max
            } else {
                return call.syntax_error();
            };
            j += 2;
        } else if dst.is_none() && !card_only && is(a, "withscores") {
            withscores = true;
            j += 1;
        } else if card_only && remaining >= 2 && is(a, "limit") {
            match parse_i64(call.arg(j + 1)) {
                Some(l) if l >= 0 => limit = l as usize,
                _ => return call.error("ERR LIMIT can't be negative"),
            }
            j += 2;
        } else {
            return call.syntax_error();
        }
    }
    let mut srcs: Vec<(Src, f64)> = keys
        .iter()
        .zip(&weights)
        .map(|(k, &w)| {
            let src = match core.db.get_raw(k).map(|e| &e.value) {
                Some(Value::Set(s)) => Src::Set(s),
                Some(Value::ZSet(z)) => Src::ZSet(z),
                _ => Src::Missing,
            };
            (src, w)
        })
        .collect();
    if op != SetOp::Diff {
        srcs.sort_by_key(|(s, _)| s.len());
    }
    // A reply comes from a skiplist-encoded set in Redis (a `-0` score survives); a stored
    // result is re-encoded for its size.
    let mut result = if dst.is_some() {
        ZSet::new()
    } else {
        ZSet::with_hint(usize::MAX, 0, 0, 0)
    };
    match op {
        SetOp::Inter => {
            let (first, rest) = srcs.split_first().expect("at least one source");
            let mut count = 0usize;
            for (m, s) in first.0.iter() {
                if card_only && limit > 0 && count >= limit {
                    break;
                }
                let mut score = weighted(s, first.1);
                let mut everywhere = true;
                for (src, w) in rest {
                    match src.score(&m) {
                        Some(v) => aggregate(&mut score, weighted(v, *w), how),
                        None => {
                            everywhere = false;
                            break;
                        }
                    }
                }
                if everywhere {
                    count += 1;
                    if !card_only {
                        result.insert(&m, score);
                    }
                }
            }
            if card_only {
                return call.out.integer(count as i64);
            }
        }
        SetOp::Union => {
            let mut acc: BTreeMap<Cow<[u8]>, f64> = BTreeMap::new();
            for (src, w) in &srcs {
                for (m, s) in src.iter() {
                    let v = weighted(s, *w);
                    match acc.get_mut(&*m) {
                        Some(cur) => aggregate(cur, v, how),
                        None => {
                            acc.insert(m, v);
                        }
                    }
                }
            }
            for (m, v) in acc {
                result.insert(&m, v);
            }
        }
        SetOp::Diff => {
            let (first, rest) = srcs.split_first().expect("at least one source");
            for (m, s) in first.0.iter() {
                if !rest.iter().any(|(src, _)| src.score(&m).is_some()) {
                    result.insert(&m, s);
                }
            }
        }
    }
    match dst {
        Some(dst) => {
            let event = match op {
                SetOp::Union => "zunionstore",
                SetOp::Inter => "zinterstore",
                SetOp::Diff => "zdiffstore",
            };
            store_result(core, call, dst, result, event);
        }
        None => reply_pairs(call, result.len(), result.iter(), withscores),
    }
}

fn zunion(core: &mut Core, call: &mut Call) {
    zsetop_generic(core, call, 1, None, SetOp::Union, false);
}

fn zinter(core: &mut Core, call: &mut Call) {
    zsetop_generic(core, call, 1, None, SetOp::Inter, false);
}

fn zdiff(core: &mut Core, call: &mut Call) {
    zsetop_generic(core, call, 1, None, SetOp::Diff, false);
}

fn zunionstore(core: &mut Core, call: &mut Call) {
    zsetop_generic(core, call, 2, Some(call.arg(1)), SetOp::Union, false);
}

fn zinterstore(core: &mut Core, call: &mut Call) {
    zsetop_generic(core, call, 2, Some(call.arg(1)), SetOp::Inter, false);
}

fn zdiffstore(core: &mut Core, call: &mut Call) {
    zsetop_generic(core, call, 2, Some(call.arg(1)), SetOp::Diff, false);
}

fn zintercard(core: &mut Core, call: &mut Call) {
    zsetop_generic(core, call, 1, None, SetOp::Inter, true);
}

// ---------------------------------------------------------------------------------------------
// ZSCAN

fn zscan(core: &mut Core, call: &mut Call) {
    let Some(cursor) = parse_cursor(call.arg(2)) else {
        return call.error("ERR invalid cursor");
    };
    let key = call.arg(1);
    match typed::read::<ZSet>(core, key, call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return empty_scan(call),
        Ok(Some(_)) => {}
    }
    let Some(opts) = parse_scan_opts(call, 3) else {
        return;
    };
    let z = typed::peek::<ZSet>(&core.db, key).expect("looked up above");
    let (next, batch) = z.scan(cursor, opts.count);
    let batch: Vec<(&[u8], f64)> = batch
        .into_iter()
        .filter(|(m, _)| opts.pattern.is_none_or(|p| glob_match(p, m, false)))
        .collect();
    call.out.array_len(2);
    call.out.bulk(next.to_string().as_bytes());
    call.out.array_len(2 * batch.len());
    // A small (listpack) set stores an integral score within half the i64 range as an
    // integer, and ZSCAN shows it that way; otherwise the score prints as %.17g.
    let compact = z.encoding() == "listpack";
    let mut text = Vec::with_capacity(24);
    for (m, s) in batch {
        call.out.bulk(m);
        if compact && s.fract() == 0.0 && s.abs() <= (i64::MAX / 2) as f64 {
            call.out.bulk_i64(s as i64);
        } else {
            text.clear();
            format_double(s, &mut text);
            call.out.bulk(&text);
        }
    }
}

//! Sorted sets — Redis 7.0 semantics, as documented and checked against redis-server 7.0.15:
//! ZADD (NX/XX/GT/LT/CH/INCR), ZINCRBY, ZREM, ZCARD, ZCOUNT, ZLEXCOUNT, ZSCORE, ZMSCORE, ZRANK,
//! ZREVRANK, ZRANGE (BYSCORE/BYLEX/REV/LIMIT/WITHSCORES), ZRANGESTORE, ZREVRANGE,
//! ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX, ZREMRANGEBYRANK/SCORE/LEX,
//! ZPOPMIN/ZPOPMAX, ZMPOP, ZUNION/ZINTER/ZDIFF and their STORE forms, ZINTERCARD, and ZRANDMEMBER
//! (a property: membership, size, distinctness).
//!
//! Members are ordered by score, then bytewise; a sorted set that becomes empty is deleted.
//! Scores are C doubles and so are the model's: sums and products round the same way. RESP2
//! prints a score as an integer when it is one below 2^52 in magnitude, otherwise with `%.17g`;
//! RESP3 sends a double. Two things Redis leaves open are kept out of reach by the workload and
//! asserted here: lex ranges over members with different scores (the model answers only with
//! "not an error" for reads and refuses to guess what a removal would do), and aggregates that
//! depend on the order sources are visited (SUM over more than two sources, where +inf and
//! -inf or rounding would make the order matter).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use bytes::Bytes;
use lattice_resp::Frame;

use super::{
    bulk_frame, int, is, null, parse_i64, spec, Cx, Model, Proto, Spec, Value, NOT_FLOAT,
    NOT_INTEGER, SYNTAX, WRONGTYPE,
};
use crate::check::Check;

pub const SPECS: &[Spec] = &[
    spec("zadd", -4, zadd),
    spec("zincrby", 4, zincrby),
    spec("zrem", -3, zrem),
    spec("zcard", 2, zcard),
    spec("zcount", 4, zcount),
    spec("zlexcount", 4, zlexcount),
    spec("zscore", 3, zscore),
    spec("zmscore", -3, zmscore),
    spec("zrank", 3, zrank),
    spec("zrevrank", 3, zrevrank),
    spec("zrange", -4, zrange),
    spec("zrangestore", -5, zrangestore),
    spec("zrevrange", -4, zrevrange),
    spec("zrangebyscore", -4, zrangebyscore),
    spec("zrevrangebyscore", -4, zrevrangebyscore),
    spec("zrangebylex", -4, zrangebylex),
    spec("zrevrangebylex", -4, zrevrangebylex),
    spec("zremrangebyrank", 4, zremrangebyrank),
    spec("zremrangebyscore", 4, zremrangebyscore),
    spec("zremrangebylex", 4, zremrangebylex),
    spec("zpopmin", -2, zpopmin),
    spec("zpopmax", -2, zpopmax),
    spec("zmpop", -4, zmpop),
    spec("zunion", -3, zunion),
    spec("zinter", -3, zinter),
    spec("zdiff", -3, zdiff),
    spec("zunionstore", -4, zunionstore),
    spec("zinterstore", -4, zinterstore),
    spec("zdiffstore", -4, zdiffstore),
    spec("zintercard", -3, zintercard),
    spec("zrandmember", -2, zrandmember),
];

pub type ZSet = BTreeMap<Vec<u8>, f64>;

const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";
const NOT_POSITIVE: &str = "ERR value is out of range, must be positive";
const NAN_RESULT: &str = "ERR resulting score is not a number (NaN)";

// ---- scores ----

/// A score as Redis prints it in RESP2 (`d2string`): an integer when the double is one and
/// lies strictly within ±2^52, `inf`/`-inf`, otherwise C's `%.17g`.
pub fn fmt_score(x: f64) -> String {
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    if x > -4_503_599_627_370_495.0 && x < 4_503_599_627_370_496.0 && x == x.trunc() {
        return format!("{}", x as i64);
    }
    g17(x)
}

/// C's `%.17g` for a finite double.
fn g17(x: f64) -> String {
    // 17 significant digits, correctly rounded, in scientific form: d.dddddddddddddddde±X.
    let sci = format!("{:.16e}", x);
    let (mant, exp) = sci.split_once('e').expect("scientific");
    let exp: i32 = exp.parse().expect("exponent");
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if neg { "-" } else { "" };
    if (-4..17).contains(&exp) {
        // Fixed notation with 16 - exp decimals, trailing zeros dropped.
        let s = if exp >= 0 {
            let (int_part, frac) = digits.split_at(exp as usize + 1);
            format!("{int_part}.{frac}")
        } else {
            format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
        };
        let s = s.trim_end_matches('0').trim_end_matches('.');
        format!("{sign}{s}")
    } else {
        let (first, rest) = digits.split_at(1);
        let rest = rest.trim_end_matches('0');
        let m = if rest.is_empty() {
            first.to_string()
        } else {
            format!("{first}.{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{esign}{:02}", exp.abs())
    }
}

/// A score in a reply: a bulk string in RESP2, a double in RESP3.
pub fn score_frame(proto: Proto, x: f64) -> Frame {
    match proto {
        Proto::Resp2 => bulk_frame(fmt_score(x).as_bytes()),
        Proto::Resp3 => Frame::Double(x),
    }
}

/// `strtod` on the text the workload sends: decimal numbers and the infinities. `None` when
/// it is not a number at all; hexadecimal and leading blanks are never sent.
fn strtod(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    assert!(
        !s.starts_with(|c: char| c.is_ascii_whitespace()) && !s.to_ascii_lowercase().contains("0x"),
        "model limitation: score text {s:?}"
    );
    let lower = s.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if body.starts_with("nan") {
        return None;
    }
    s.parse::<f64>().ok()
}

/// A score argument (`getDoubleFromObject`): the whole text a number, not NaN, no overflow
/// or underflow to zero.
pub fn parse_score(b: &[u8]) -> Option<f64> {
    if b.is_empty() {
        return None;
    }
    let v = strtod(b)?;
    let lower = String::from_utf8_lossy(b).to_ascii_lowercase();
    let literal_inf = lower.trim_start_matches(['+', '-']).starts_with("inf");
    if v.is_infinite() && !literal_inf {
        return None; // ERANGE overflow
    }
    if v == 0.0 {
        let mantissa = lower.split('e').next().unwrap_or("");
        if mantissa.bytes().any(|c| (b'1'..=b'9').contains(&c)) {
            return None; // ERANGE underflow
        }
    }
    Some(v)
}

/// Members in order: by score, then bytewise.
fn ordered(z: &ZSet) -> Vec<(&[u8], f64)> {
    let mut v: Vec<(&[u8], f64)> = z.iter().map(|(m, s)| (&m[..], *s)).collect();
    v.sort_by(|a, b| {
        a.1.partial_cmp(&b.1)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.0.cmp(b.0))
    });
    v
}

// ---- keys ----

fn read<'m>(m: &'m Model, key: &[u8], now_ms: u64) -> Result<Option<&'m ZSet>, Check> {
    match m.db.get(key, now_ms).map(|e| &e.value) {
        None => Ok(None),
        Some(Value::ZSet(z)) => Ok(Some(z)),
        Some(_) => Err(Check::err(WRONGTYPE)),
    }
}

/// The sorted set at `key` for writing, created empty if missing (the caller checked the
/// type); deleted again by [`settle`] if left empty.
fn write<'m>(m: &'m mut Model, key: &[u8], now_ms: u64) -> &'m mut ZSet {
    if !m.db.exists(key, now_ms) {
        m.db.set(key, Value::ZSet(ZSet::new()), None, false, now_ms);
    }
    let e = m.db.get_mut(key, now_ms).expect("live");
    e.stamp_ms = now_ms;
    match &mut e.value {
        Value::ZSet(z) => z,
        _ => unreachable!("type checked"),
    }
}

/// Deletes `key` if its sorted set is empty.
fn settle(m: &mut Model, key: &[u8], now_ms: u64) {
    if matches!(read(m, key, now_ms), Ok(Some(z)) if z.is_empty()) {
        m.db.delete(key, now_ms);
    }
}

/// Stores a computed result at `dst` (replacing whatever was there) or, empty, deletes it.
fn store(m: &mut Model, dst: &[u8], items: Vec<(Vec<u8>, f64)>, now_ms: u64) -> Check {
    let n = items.len() as i64;
    if items.is_empty() {
        m.db.delete(dst, now_ms);
    } else {
        let z: ZSet = items.into_iter().collect();
        m.db.set(dst, Value::ZSet(z), None, false, now_ms);
    }
    int(n)
}

/// A list of members, with their scores when `scores` (flat in RESP2, pairs in RESP3).
fn members_reply(proto: Proto, items: &[(&[u8], f64)], scores: bool) -> Check {
    let mut out = Vec::with_capacity(items.len() * 2);
    for (m, s) in items {
        if !scores {
            out.push(bulk_frame(m));
        } else if proto == Proto::Resp3 {
            out.push(Frame::Array(vec![bulk_frame(m), score_frame(proto, *s)]));
        } else {
            out.push(bulk_frame(m));
            out.push(score_frame(proto, *s));
        }
    }
    Check::Exact(Frame::Array(out))
}

// ---- ZADD / ZINCRBY ----

fn zadd(m: &mut Model, cx: &mut Cx) -> Check {
    let (mut nx, mut xx, mut ch, mut incr, mut gt, mut lt) =
        (false, false, false, false, false, false);
    let mut i = 2;
    while i < cx.argc() {
        let a = cx.arg(i);
        if is(a, "nx") {
            nx = true;
        } else if is(a, "xx") {
            xx = true;
        } else if is(a, "ch") {
            ch = true;
        } else if is(a, "incr") {
            incr = true;
        } else if is(a, "gt") {
            gt = true;
        } else if is(a, "lt") {
            lt = true;
        } else {
            break;
        }
        i += 1;
    }
    let rest = cx.argc() - i;
    if rest == 0 || rest % 2 == 1 {
        return Check::err(SYNTAX);
    }
    if nx && xx {
        return Check::err("ERR XX and NX options at the same time are not compatible");
    }
    if (nx && (gt || lt)) || (gt && lt) {
        return Check::err("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if incr && rest > 2 {
        return Check::err("ERR INCR option supports a single increment-element pair");
    }
    let mut pairs = Vec::with_capacity(rest / 2);
    for p in cx.args[i..].chunks(2) {
        match parse_score(&p[0]) {
            Some(s) => pairs.push((s, p[1].to_vec())),
            None => return Check::err(NOT_FLOAT),
        }
    }
    add_generic(
        m,
        cx,
        &pairs,
        Flags {
            nx,
            xx,
            gt,
            lt,
            incr,
        },
        ch,
    )
}

#[derive(Clone, Copy)]
struct Flags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    incr: bool,
}

fn add_generic(m: &mut Model, cx: &Cx, pairs: &[(f64, Vec<u8>)], f: Flags, ch: bool) -> Check {
    let (key, now) = (cx.arg(1), cx.now_ms);
    let exists = match read(m, key, now) {
        Err(e) => return e,
        Ok(z) => z.is_some(),
    };
    let (mut added, mut updated, mut processed) = (0, 0, 0);
    let mut last = 0.0;
    if exists || !f.xx {
        let z = write(m, key, now);
        for (score, member) in pairs {
            let mut score = *score;
            match z.get(member).copied() {
                Some(cur) => {
                    if f.nx {
                        continue;
                    }
                    if f.incr {
                        score += cur;
                        if score.is_nan() {
                            settle(m, key, now);
                            return Check::err(NAN_RESULT);
                        }
                    }
                    if (f.lt && score >= cur) || (f.gt && score <= cur) {
                        continue;
                    }
                    last = score;
                    processed += 1;
                    if score != cur {
                        z.insert(member.clone(), score);
                        updated += 1;
                    }
                }
                None if f.xx => {}
                None => {
                    z.insert(member.clone(), score);
                    last = score;
                    added += 1;
                    processed += 1;
                }
            }
        }
        settle(m, key, now);
        // Redis reports the key modified after any change, even when later pairs of the same
        // member restore the score (WATCH sees it).
        if added + updated > 0 {
            m.db.touch(key);
        }
    }
    if f.incr {
        if processed > 0 {
            Check::Exact(score_frame(cx.proto, last))
        } else {
            null()
        }
    } else {
        int(if ch { added + updated } else { added })
    }
}

fn zincrby(m: &mut Model, cx: &mut Cx) -> Check {
    let Some(by) = parse_score(cx.arg(2)) else {
        return Check::err(NOT_FLOAT);
    };
    let flags = Flags {
        nx: false,
        xx: false,
        gt: false,
        lt: false,
        incr: true,
    };
    add_generic(m, cx, &[(by, cx.arg(3).to_vec())], flags, false)
}

// ---- simple reads and removal ----

fn zrem(m: &mut Model, cx: &mut Cx) -> Check {
    let (key, now) = (cx.arg(1), cx.now_ms);
    match read(m, key, now) {
        Err(e) => return e,
        Ok(None) => return int(0),
        Ok(Some(_)) => {}
    }
    let z = write(m, key, now);
    let n = cx.args[2..]
        .iter()
        .filter(|v| z.remove(&v[..]).is_some())
        .count();
    settle(m, key, now);
    int(n as i64)
}

fn zcard(m: &mut Model, cx: &mut Cx) -> Check {
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(z) => int(z.map_or(0, |z| z.len()) as i64),
    }
}

fn zscore(m: &mut Model, cx: &mut Cx) -> Check {
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(z) => match z.and_then(|z| z.get(cx.arg(2))) {
            Some(s) => Check::Exact(score_frame(cx.proto, *s)),
            None => null(),
        },
    }
}

fn zmscore(m: &mut Model, cx: &mut Cx) -> Check {
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(z) => Check::Exact(Frame::Array(
            cx.args[2..]
                .iter()
                .map(|mb| match z.and_then(|z| z.get(&mb[..])) {
                    Some(s) => score_frame(cx.proto, *s),
                    None => Frame::Null,
                })
                .collect(),
        )),
    }
}

fn rank_generic(m: &mut Model, cx: &mut Cx, rev: bool) -> Check {
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(None) => null(),
        Ok(Some(z)) => {
            let o = ordered(z);
            match o.iter().position(|(mb, _)| *mb == cx.arg(2)) {
                Some(p) => int(if rev { o.len() - 1 - p } else { p } as i64),
                None => null(),
            }
        }
    }
}

fn zrank(m: &mut Model, cx: &mut Cx) -> Check {
    rank_generic(m, cx, false)
}

fn zrevrank(m: &mut Model, cx: &mut Cx) -> Check {
    rank_generic(m, cx, true)
}

// ---- ranges ----

#[derive(Clone, Copy, Debug)]
struct ScoreRange {
    min: f64,
    max: f64,
    minex: bool,
    maxex: bool,
}

impl ScoreRange {
    fn parse(min: &[u8], max: &[u8]) -> Option<ScoreRange> {
        let bound = |b: &[u8]| -> Option<(f64, bool)> {
            let (ex, text) = match b.first() {
                Some(b'(') => (true, &b[1..]),
                _ => (false, b),
            };
            let v = if text.is_empty() { 0.0 } else { strtod(text)? };
            Some((v, ex))
        };
        let (min, minex) = bound(min)?;
        let (max, maxex) = bound(max)?;
        Some(ScoreRange {
            min,
            max,
            minex,
            maxex,
        })
    }

    fn contains(&self, s: f64) -> bool {
        (if self.minex {
            s > self.min
        } else {
            s >= self.min
        }) && (if self.maxex {
            s < self.max
        } else {
            s <= self.max
        })
    }
}

/// A lex range bound: `-`, `+`, `[x` (inclusive) or `(x` (exclusive).
#[derive(Clone, Debug)]
enum Lex {
    Min,
    Max,
    Incl(Vec<u8>),
    Excl(Vec<u8>),
}

impl Lex {
    fn parse(b: &[u8]) -> Option<Lex> {
        match b.first() {
            Some(b'-') if b.len() == 1 => Some(Lex::Min),
            Some(b'+') if b.len() == 1 => Some(Lex::Max),
            Some(b'[') => Some(Lex::Incl(b[1..].to_vec())),
            Some(b'(') => Some(Lex::Excl(b[1..].to_vec())),
            _ => None,
        }
    }

    fn above_min(&self, v: &[u8]) -> bool {
        match self {
            Lex::Min => true,
            Lex::Max => false,
            Lex::Incl(x) => v >= &x[..],
            Lex::Excl(x) => v > &x[..],
        }
    }

    fn below_max(&self, v: &[u8]) -> bool {
        match self {
            Lex::Min => false,
            Lex::Max => true,
            Lex::Incl(x) => v <= &x[..],
            Lex::Excl(x) => v < &x[..],
        }
    }
}

#[derive(Clone, Debug)]
enum Range {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(Lex, Lex),
}

/// Whether every member has the same score: only then is a lex range defined.
fn uniform(z: &ZSet) -> bool {
    let mut it = z.values();
    it.next().is_none_or(|first| it.all(|s| s == first))
}

/// The ranks a ZRANGE-style `start stop` selects, as Redis documents them: negative indexes
/// count from the end (-1 is the last member); out-of-range indexes are no error: a start past
/// the end or after the stop selects nothing, a stop past the end means the last member.
/// `None` when nothing is selected. Written as a filter over the ranks, not as the node's
/// clamping arithmetic, so that the model checks the node instead of repeating it.
fn rank_span(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let from_end = |i: i64| if i < 0 { i + len as i64 } else { i };
    let (first, last) = (from_end(start), from_end(end));
    let mut picked = (0..len).filter(|&r| (first..=last).contains(&(r as i64)));
    let lo = picked.next()?;
    Some((lo, picked.next_back().unwrap_or(lo)))
}

/// The members a range selects, in reply order (`rev`: from the highest), after LIMIT.
fn select<'z>(
    z: &'z ZSet,
    range: &Range,
    rev: bool,
    limit: Option<(i64, i64)>,
) -> Vec<(&'z [u8], f64)> {
    let mut o = ordered(z);
    if rev {
        o.reverse();
    }
    let picked: Vec<(&[u8], f64)> = match range {
        Range::Rank(s, e) => match rank_span(*s, *e, o.len()) {
            None => vec![],
            Some((s, e)) => o[s..=e].to_vec(),
        },
        Range::Score(r) => o.into_iter().filter(|(_, s)| r.contains(*s)).collect(),
        Range::Lex(min, max) => o
            .into_iter()
            .filter(|(mb, _)| min.above_min(mb) && max.below_max(mb))
            .collect(),
    };
    match limit {
        None => picked,
        // A negative offset selects nothing, a negative count everything after the offset.
        Some((off, _)) if off < 0 => vec![],
        Some((off, cnt)) => {
            let it = picked.into_iter().skip(off as usize);
            if cnt < 0 {
                it.collect()
            } else {
                it.take(cnt as usize).collect()
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Auto,
    Rank,
    Score,
    Lex,
}

/// ZRANGE and its relatives: `src` the key's index, `dst` ZRANGESTORE's destination, `kind`
/// and `rev` fixed by the legacy commands (`Auto`/`None` for ZRANGE's own options).
fn range_generic(
    m: &mut Model,
    cx: &mut Cx,
    src: usize,
    dst: Option<&[u8]>,
    mut kind: Kind,
    rev: Option<bool>,
) -> Check {
    let mut withscores = false;
    let mut limit: Option<(i64, i64)> = None;
    let mut dir = rev;
    let mut j = src + 3;
    while j < cx.argc() {
        let left = cx.argc() - j - 1;
        let a = cx.arg(j);
        if dst.is_none() && is(a, "withscores") {
            withscores = true;
        } else if is(a, "limit") && left >= 2 {
            match (parse_i64(cx.arg(j + 1)), parse_i64(cx.arg(j + 2))) {
                (Some(o), Some(c)) => limit = Some((o, c)),
                _ => return Check::err(NOT_INTEGER),
            }
            j += 2;
        } else if rev.is_none() && dir.is_none() && is(a, "rev") {
            dir = Some(true);
        } else if kind == Kind::Auto && is(a, "bylex") {
            kind = Kind::Lex;
        } else if kind == Kind::Auto && is(a, "byscore") {
            kind = Kind::Score;
        } else {
            return Check::err(SYNTAX);
        }
        j += 1;
    }
    let rev = dir.unwrap_or(false);
    if kind == Kind::Auto {
        kind = Kind::Rank;
    }
    if limit.is_some_and(|(_, c)| c != -1) && kind == Kind::Rank {
        return Check::err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
    }
    if kind == Kind::Rank {
        limit = None; // Redis ignores a rank range's LIMIT with count -1.
    }
    if withscores && kind == Kind::Lex {
        return Check::err("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    let (mut lo, mut hi) = (cx.arg(src + 1), cx.arg(src + 2));
    if rev && kind != Kind::Rank {
        std::mem::swap(&mut lo, &mut hi);
    }
    let range = match kind {
        Kind::Rank => match (parse_i64(lo), parse_i64(hi)) {
            (Some(a), Some(b)) => Range::Rank(a, b),
            _ => return Check::err(NOT_INTEGER),
        },
        Kind::Score => match ScoreRange::parse(lo, hi) {
            Some(r) => Range::Score(r),
            None => return Check::err(NOT_FLOAT_RANGE),
        },
        _ => match (Lex::parse(lo), Lex::parse(hi)) {
            (Some(a), Some(b)) => Range::Lex(a, b),
            _ => return Check::err(NOT_LEX_RANGE),
        },
    };
    let now = cx.now_ms;
    let z = match read(m, cx.arg(src), now) {
        Err(e) => return e,
        Ok(z) => z,
    };
    let empty = ZSet::new();
    let z = z.unwrap_or(&empty);
    if kind == Kind::Lex && !uniform(z) {
        assert!(
            dst.is_none(),
            "model limitation: ZRANGESTORE BYLEX over mixed scores"
        );
        return Check::NotError;
    }
    let picked = select(z, &range, rev, limit);
    match dst {
        Some(d) => {
            let items = picked.into_iter().map(|(mb, s)| (mb.to_vec(), s)).collect();
            store(m, d, items, now)
        }
        None => members_reply(cx.proto, &picked, withscores),
    }
}

fn zrange(m: &mut Model, cx: &mut Cx) -> Check {
    range_generic(m, cx, 1, None, Kind::Auto, None)
}

fn zrangestore(m: &mut Model, cx: &mut Cx) -> Check {
    let dst = cx.args[1].clone();
    range_generic(m, cx, 2, Some(&dst), Kind::Auto, None)
}

fn zrevrange(m: &mut Model, cx: &mut Cx) -> Check {
    range_generic(m, cx, 1, None, Kind::Rank, Some(true))
}

fn zrangebyscore(m: &mut Model, cx: &mut Cx) -> Check {
    range_generic(m, cx, 1, None, Kind::Score, Some(false))
}

fn zrevrangebyscore(m: &mut Model, cx: &mut Cx) -> Check {
    range_generic(m, cx, 1, None, Kind::Score, Some(true))
}

fn zrangebylex(m: &mut Model, cx: &mut Cx) -> Check {
    range_generic(m, cx, 1, None, Kind::Lex, Some(false))
}

fn zrevrangebylex(m: &mut Model, cx: &mut Cx) -> Check {
    range_generic(m, cx, 1, None, Kind::Lex, Some(true))
}

fn zcount(m: &mut Model, cx: &mut Cx) -> Check {
    let Some(r) = ScoreRange::parse(cx.arg(2), cx.arg(3)) else {
        return Check::err(NOT_FLOAT_RANGE);
    };
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(z) => int(z.map_or(0, |z| z.values().filter(|s| r.contains(**s)).count()) as i64),
    }
}

fn zlexcount(m: &mut Model, cx: &mut Cx) -> Check {
    let (Some(min), Some(max)) = (Lex::parse(cx.arg(2)), Lex::parse(cx.arg(3))) else {
        return Check::err(NOT_LEX_RANGE);
    };
    match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => e,
        Ok(None) => int(0),
        Ok(Some(z)) if !uniform(z) => Check::NotError,
        Ok(Some(z)) => int(z
            .keys()
            .filter(|mb| min.above_min(mb) && max.below_max(mb))
            .count() as i64),
    }
}

fn remrange_generic(m: &mut Model, cx: &mut Cx, kind: Kind) -> Check {
    let (lo, hi) = (cx.arg(2), cx.arg(3));
    let range = match kind {
        Kind::Rank => match (parse_i64(lo), parse_i64(hi)) {
            (Some(a), Some(b)) => Range::Rank(a, b),
            _ => return Check::err(NOT_INTEGER),
        },
        Kind::Score => match ScoreRange::parse(lo, hi) {
            Some(r) => Range::Score(r),
            None => return Check::err(NOT_FLOAT_RANGE),
        },
        _ => match (Lex::parse(lo), Lex::parse(hi)) {
            (Some(a), Some(b)) => Range::Lex(a, b),
            _ => return Check::err(NOT_LEX_RANGE),
        },
    };
    let (key, now) = (cx.arg(1), cx.now_ms);
    let victims: Vec<Vec<u8>> = match read(m, key, now) {
        Err(e) => return e,
        Ok(None) => return int(0),
        Ok(Some(z)) => {
            assert!(
                kind != Kind::Lex || uniform(z),
                "model limitation: ZREMRANGEBYLEX over mixed scores"
            );
            select(z, &range, false, None)
                .into_iter()
                .map(|(mb, _)| mb.to_vec())
                .collect()
        }
    };
    let z = write(m, key, now);
    for v in &victims {
        z.remove(v);
    }
    settle(m, key, now);
    int(victims.len() as i64)
}

fn zremrangebyrank(m: &mut Model, cx: &mut Cx) -> Check {
    remrange_generic(m, cx, Kind::Rank)
}

fn zremrangebyscore(m: &mut Model, cx: &mut Cx) -> Check {
    remrange_generic(m, cx, Kind::Score)
}

fn zremrangebylex(m: &mut Model, cx: &mut Cx) -> Check {
    remrange_generic(m, cx, Kind::Lex)
}

// ---- pops ----

fn pop_generic(m: &mut Model, cx: &mut Cx, max: bool) -> Check {
    if cx.argc() > 3 {
        return Check::err(SYNTAX);
    }
    let count = if cx.argc() == 3 {
        match parse_i64(cx.arg(2)) {
            Some(n) if n >= 0 => Some(n as usize),
            _ => return Check::err(NOT_POSITIVE),
        }
    } else {
        None
    };
    let (key, now) = (cx.arg(1), cx.now_ms);
    let popped = match pop_ends(m, key, max, count.unwrap_or(1), now) {
        Err(e) => return e,
        Ok(p) => p,
    };
    // RESP3 nests member/score pairs only when a count was given.
    let nested = count.is_some() && cx.proto == Proto::Resp3;
    let mut out = Vec::with_capacity(popped.len() * 2);
    for (mb, sc) in &popped {
        if nested {
            out.push(Frame::Array(vec![
                bulk_frame(mb),
                score_frame(cx.proto, *sc),
            ]));
        } else {
            out.push(bulk_frame(mb));
            out.push(score_frame(cx.proto, *sc));
        }
    }
    Check::Exact(Frame::Array(out))
}

/// Removes up to `n` members from the low (or, `max`, the high) end of the sorted set at
/// `key`, lowest (highest) first.
fn pop_ends(
    m: &mut Model,
    key: &[u8],
    max: bool,
    n: usize,
    now: u64,
) -> Result<Vec<(Vec<u8>, f64)>, Check> {
    let popped: Vec<(Vec<u8>, f64)> = match read(m, key, now)? {
        None => vec![],
        Some(z) => {
            let mut o = ordered(z);
            if max {
                o.reverse();
            }
            o.into_iter()
                .take(n)
                .map(|(mb, s)| (mb.to_vec(), s))
                .collect()
        }
    };
    if !popped.is_empty() {
        let z = write(m, key, now);
        for (mb, _) in &popped {
            z.remove(mb);
        }
        settle(m, key, now);
    }
    Ok(popped)
}

/// ZMPOP: the first non-empty sorted set among the keys gives up to COUNT members, as
/// `[key, [[member, score], ...]]` in both protocols; a null array when all are empty.
fn zmpop(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let side = |w: &[u8]| (is(w, "max") || is(w, "min")).then(|| is(w, "max"));
    let (keys, max, count) = match super::lists::parse_mpop(cx, side) {
        Ok(v) => v,
        Err(e) => return e,
    };
    for key in keys {
        let popped = match pop_ends(m, key, max, count, now) {
            Err(e) => return e,
            Ok(p) if p.is_empty() => continue,
            Ok(p) => p,
        };
        let pairs = popped
            .iter()
            .map(|(mb, sc)| Frame::Array(vec![bulk_frame(mb), score_frame(cx.proto, *sc)]))
            .collect();
        return Check::Exact(Frame::Array(vec![bulk_frame(key), Frame::Array(pairs)]));
    }
    Check::Exact(super::null_array(cx.proto))
}

fn zpopmin(m: &mut Model, cx: &mut Cx) -> Check {
    pop_generic(m, cx, false)
}

fn zpopmax(m: &mut Model, cx: &mut Cx) -> Check {
    pop_generic(m, cx, true)
}

// ---- set operations ----

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

/// Redis's aggregation step; a NaN sum (+inf plus -inf) counts as zero.
fn aggregate(acc: f64, v: f64, how: Aggregate) -> f64 {
    match how {
        Aggregate::Sum => {
            let s = acc + v;
            if s.is_nan() {
                0.0
            } else {
                s
            }
        }
        Aggregate::Min => {
            if v < acc {
                v
            } else {
                acc
            }
        }
        Aggregate::Max => {
            if v > acc {
                v
            } else {
                acc
            }
        }
    }
}

/// A source of a set operation: a sorted set, or a plain set whose members score 1.
fn source(m: &Model, key: &[u8], now_ms: u64) -> Result<ZSet, Check> {
    match m.db.get(key, now_ms).map(|e| &e.value) {
        None => Ok(ZSet::new()),
        Some(Value::ZSet(z)) => Ok(z.clone()),
        Some(Value::Set(s)) => Ok(s.iter().map(|mb| (mb.clone(), 1.0)).collect()),
        Some(_) => Err(Check::err(WRONGTYPE)),
    }
}

/// ZUNION/ZINTER/ZDIFF and the STORE forms: `nk` the numkeys index, `dst` the destination.
fn setop_generic(m: &mut Model, cx: &mut Cx, op: SetOp, nk: usize, dst: Option<&[u8]>) -> Check {
    let name = String::from_utf8_lossy(cx.arg(0)).to_ascii_lowercase();
    let Some(n) = parse_i64(cx.arg(nk)) else {
        return Check::err(NOT_INTEGER);
    };
    if n < 1 {
        return Check::err(&format!(
            "ERR at least 1 input key is needed for '{name}' command"
        ));
    }
    if n > (cx.argc() - nk - 1) as i64 {
        return Check::err(SYNTAX);
    }
    let n = n as usize;
    let now = cx.now_ms;
    let mut srcs = Vec::with_capacity(n);
    for k in &cx.args[nk + 1..nk + 1 + n] {
        match source(m, k, now) {
            Ok(z) => srcs.push(z),
            Err(e) => return e,
        }
    }
    let mut weights = vec![1.0; n];
    let mut how = Aggregate::Sum;
    let mut withscores = false;
    let mut j = nk + 1 + n;
    while j < cx.argc() {
        let left = cx.argc() - j;
        let a = cx.arg(j);
        if op != SetOp::Diff && left > n && is(a, "weights") {
            for (w, arg) in weights.iter_mut().zip(&cx.args[j + 1..j + 1 + n]) {
                match parse_score(arg) {
                    Some(v) => *w = v,
                    None => return Check::err("ERR weight value is not a float"),
                }
            }
            j += 1 + n;
        } else if op != SetOp::Diff && left >= 2 && is(a, "aggregate") {
            let v = cx.arg(j + 1);
            how = if is(v, "sum") {
                Aggregate::Sum
            } else if is(v, "min") {
                Aggregate::Min
            } else if is(v, "max") {
                Aggregate::Max
            } else {
                return Check::err(SYNTAX);
            };
            j += 2;
        } else if dst.is_none() && is(a, "withscores") {
            withscores = true;
            j += 1;
        } else {
            return Check::err(SYNTAX);
        }
    }
    assert!(
        op != SetOp::Union && op != SetOp::Inter || how != Aggregate::Sum || n <= 2,
        "model limitation: SUM over {n} sources depends on Redis's visiting order"
    );
    let weighted = |i: usize, s: f64| {
        let v = weights[i] * s;
        if v.is_nan() {
            0.0
        } else {
            v
        }
    };
    let mut result: ZSet = ZSet::new();
    match op {
        SetOp::Union => {
            for (i, z) in srcs.iter().enumerate() {
                for (mb, s) in z {
                    let v = weighted(i, *s);
                    result
                        .entry(mb.clone())
                        .and_modify(|acc| *acc = aggregate(*acc, v, how))
                        .or_insert(v);
                }
            }
        }
        SetOp::Inter => {
            for (mb, s) in &srcs[0] {
                if srcs[1..].iter().all(|z| z.contains_key(mb)) {
                    let mut acc = weighted(0, *s);
                    for (i, z) in srcs.iter().enumerate().skip(1) {
                        acc = aggregate(acc, weighted(i, z[mb]), how);
                    }
                    result.insert(mb.clone(), acc);
                }
            }
        }
        SetOp::Diff => {
            for (mb, s) in &srcs[0] {
                if !srcs[1..].iter().any(|z| z.contains_key(mb)) {
                    result.insert(mb.clone(), *s);
                }
            }
        }
    }
    match dst {
        Some(d) => store(m, d, result.into_iter().collect(), now),
        None => members_reply(cx.proto, &ordered(&result), withscores),
    }
}

fn zunion(m: &mut Model, cx: &mut Cx) -> Check {
    setop_generic(m, cx, SetOp::Union, 1, None)
}

fn zinter(m: &mut Model, cx: &mut Cx) -> Check {
    setop_generic(m, cx, SetOp::Inter, 1, None)
}

fn zdiff(m: &mut Model, cx: &mut Cx) -> Check {
    setop_generic(m, cx, SetOp::Diff, 1, None)
}

fn store_generic(m: &mut Model, cx: &mut Cx, op: SetOp) -> Check {
    let dst = cx.args[1].clone();
    setop_generic(m, cx, op, 2, Some(&dst))
}

fn zunionstore(m: &mut Model, cx: &mut Cx) -> Check {
    store_generic(m, cx, SetOp::Union)
}

fn zinterstore(m: &mut Model, cx: &mut Cx) -> Check {
    store_generic(m, cx, SetOp::Inter)
}

fn zdiffstore(m: &mut Model, cx: &mut Cx) -> Check {
    store_generic(m, cx, SetOp::Diff)
}

fn zintercard(m: &mut Model, cx: &mut Cx) -> Check {
    let Some(n) = parse_i64(cx.arg(1)) else {
        return Check::err(NOT_INTEGER);
    };
    if n < 1 {
        return Check::err("ERR at least 1 input key is needed for 'zintercard' command");
    }
    if n > (cx.argc() - 2) as i64 {
        return Check::err(SYNTAX);
    }
    let n = n as usize;
    let now = cx.now_ms;
    // Like the other set operations: the sources' types are checked before the options.
    let mut srcs = Vec::with_capacity(n);
    for k in &cx.args[2..2 + n] {
        match source(m, k, now) {
            Ok(z) => srcs.push(z),
            Err(e) => return e,
        }
    }
    let mut limit = 0i64;
    let mut j = 2 + n;
    while j < cx.argc() {
        if is(cx.arg(j), "limit") && j + 1 < cx.argc() {
            match parse_i64(cx.arg(j + 1)) {
                Some(l) if l >= 0 => limit = l,
                _ => return Check::err("ERR LIMIT can't be negative"),
            }
            j += 2;
        } else {
            return Check::err(SYNTAX);
        }
    }
    let card = srcs[0]
        .keys()
        .filter(|mb| srcs[1..].iter().all(|z| z.contains_key(*mb)))
        .count() as i64;
    int(if limit > 0 { card.min(limit) } else { card })
}

// ---- ZRANDMEMBER ----

fn zrandmember(m: &mut Model, cx: &mut Cx) -> Check {
    let (count, scores) = match super::random_pick_args(cx, "withscores") {
        Ok(a) => a,
        Err(e) => return e,
    };
    let z = match read(m, cx.arg(1), cx.now_ms) {
        Err(e) => return e,
        Ok(z) => z,
    };
    let pool: Vec<(Bytes, Frame)> = z
        .into_iter()
        .flatten()
        .map(|(mb, s)| (Bytes::from(mb.clone()), score_frame(cx.proto, *s)))
        .collect();
    Check::sample(pool, count, scores, cx.proto == Proto::Resp3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_print_like_redis() {
        for (x, want) in [
            (1.0, "1"),
            (-3.0, "-3"),
            (0.1, "0.10000000000000001"),
            (2.5, "2.5"),
            (1e20, "1e+20"),
            (3e-5, "3.0000000000000001e-05"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (-0.0, "0"),
            (4503599627370496.0, "4503599627370496"),
            (1.5e16, "15000000000000000"),
            (123456.789, "123456.789"),
            (0.0001, "0.0001"),
        ] {
            assert_eq!(fmt_score(x), want, "{x}");
        }
    }

    #[test]
    fn score_arguments_parse_like_redis() {
        assert_eq!(parse_score(b"1e2"), Some(100.0));
        assert_eq!(parse_score(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_score(b"-Infinity"), Some(f64::NEG_INFINITY));
        for bad in ["", "nan", "abc", "1e400", "1e-400", "1.5.5", "(1"] {
            assert_eq!(parse_score(bad.as_bytes()), None, "{bad}");
        }
    }
}

//! Generic key commands: DEL, UNLINK, EXISTS, TOUCH, TYPE, KEYS, SCAN, RENAME, RENAMENX,
//! RANDOMKEY, COPY, OBJECT.

use bytes::Bytes;

use super::glob;
use super::{
    int, is, null, ok, parse_i64, simple, spec, Cx, Model, Spec, Value, NOT_INTEGER, SYNTAX,
};
use crate::check::{Check, ScanCheck};

pub const SPECS: &[Spec] = &[
    spec("del", -2, del),
    spec("unlink", -2, del),
    spec("exists", -2, exists),
    spec("touch", -2, exists),
    spec("type", 2, type_),
    spec("keys", 2, keys),
    spec("scan", -2, scan),
    spec("rename", 3, rename),
    spec("renamenx", 3, renamenx),
    spec("randomkey", 1, randomkey),
    spec("copy", -3, copy),
    spec("object|encoding", 3, object_encoding),
    spec("object|refcount", 3, object_refcount),
    spec("object|idletime", 3, object_idletime),
    spec("object|freq", 3, object_freq),
    spec("object|help", 2, help),
];

fn del(m: &mut Model, cx: &mut Cx) -> Check {
    let n = cx.args[1..]
        .iter()
        .filter(|k| m.db.delete(k, cx.now_ms).is_some())
        .count();
    int(n as i64)
}

fn exists(m: &mut Model, cx: &mut Cx) -> Check {
    let n = cx.args[1..]
        .iter()
        .filter(|k| m.db.exists(k, cx.now_ms))
        .count();
    int(n as i64)
}

fn type_(m: &mut Model, cx: &mut Cx) -> Check {
    match m.db.get(cx.arg(1), cx.now_ms) {
        Some(e) => simple(e.value.type_name()),
        None => simple("none"),
    }
}

fn keys(m: &mut Model, cx: &mut Cx) -> Check {
    let pattern = cx.arg(1);
    Check::Unordered(
        m.db.live_keys(cx.now_ms)
            .filter(|(k, _)| glob::matches(pattern, k))
            .map(|(k, _)| k.clone())
            .collect(),
    )
}

/// A SCAN iteration in progress on a connection: its filters, and the keys (with their
/// incarnation) that have existed since it started.
#[derive(Clone, Debug)]
pub struct ScanIter {
    pattern: Option<Bytes>,
    type_: Option<Bytes>,
    since_start: Vec<(Bytes, u64)>,
}

/// A SCAN cursor as Redis 7.0 reads it: `strtoul` (optional sign, a negative value wraps
/// around, empty means 0), then nothing but the end of the string, no overflow.
fn parse_cursor(c: &[u8]) -> Option<u64> {
    let c = match c.iter().position(|&b| b == 0) {
        Some(n) => &c[..n],
        None => c,
    };
    if c.is_empty() {
        return Some(0);
    }
    let (neg, digits) = match c[0] {
        b'-' => (true, &c[1..]),
        b'+' => (false, &c[1..]),
        _ => (false, c),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        v = v.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

fn scan(m: &mut Model, cx: &mut Cx) -> Check {
    let Some(cursor) = parse_cursor(cx.arg(1)) else {
        return Check::err("ERR invalid cursor");
    };
    let mut pattern: Option<Bytes> = None;
    let mut type_: Option<Bytes> = None;
    let mut i = 2;
    while i < cx.argc() {
        let more = cx.argc() - i;
        let opt = cx.arg(i);
        if is(opt, "count") && more >= 2 {
            match parse_i64(cx.arg(i + 1)) {
                None => return Check::err(NOT_INTEGER),
                Some(n) if n < 1 => return Check::err(SYNTAX),
                Some(_) => {}
            }
        } else if is(opt, "match") && more >= 2 {
            let p = cx.args[i + 1].clone();
            pattern = (&p[..] != b"*").then_some(p);
        } else if is(opt, "type") && more >= 2 {
            type_ = Some(cx.args[i + 1].clone());
        } else {
            return Check::err(SYNTAX);
        }
        i += 2;
    }
    let now = cx.now_ms;
    let live: Vec<(Bytes, u64)> =
        m.db.live_keys(now)
            .filter(|(k, _)| pattern.as_ref().is_none_or(|p| glob::matches(p, k)))
            .filter(|(_, e)| {
                type_
                    .as_ref()
                    .is_none_or(|t| t.eq_ignore_ascii_case(e.value.type_name().as_bytes()))
            })
            .map(|(k, e)| (k.clone(), e.birth))
            .collect();
    // Only a plain decimal cursor is a step of an iteration (a client continues with the
    // cursor the node returned); a signed or odd spelling is a stray SCAN.
    let tracked = cx.arg(1).iter().all(u8::is_ascii_digit);
    let st = m.conns.get_mut(&cx.conn).expect("connected");
    let must_see = if !tracked {
        None
    } else if cursor == 0 {
        st.scan = Some(ScanIter {
            pattern: pattern.clone(),
            type_: type_.clone(),
            since_start: live.clone(),
        });
        st.scan.as_ref().map(|s| &s.since_start)
    } else {
        match st.scan.as_mut() {
            Some(it) if it.pattern == pattern && it.type_ == type_ => {
                it.since_start.retain(|kb| live.contains(kb));
                Some(&it.since_start)
            }
            _ => {
                st.scan = None;
                None
            }
        }
    };
    Check::Scan(ScanCheck {
        tracked,
        cursor,
        must_see: must_see.map(|v| v.iter().map(|(k, _)| k.clone()).collect()),
        live: live.into_iter().map(|(k, _)| k).collect(),
    })
}

fn rename_generic(m: &mut Model, cx: &mut Cx, nx: bool) -> Check {
    let (src, dst, now) = (cx.arg(1), cx.arg(2), cx.now_ms);
    if !m.db.exists(src, now) {
        return Check::err("ERR no such key");
    }
    if src == dst {
        return if nx { int(0) } else { ok() };
    }
    if nx && m.db.exists(dst, now) {
        return int(0);
    }
    let entry = m.db.delete(src, now).expect("exists");
    m.db.delete(dst, now);
    m.db.put_entry(dst, entry);
    if nx {
        int(1)
    } else {
        ok()
    }
}

fn rename(m: &mut Model, cx: &mut Cx) -> Check {
    rename_generic(m, cx, false)
}

fn renamenx(m: &mut Model, cx: &mut Cx) -> Check {
    rename_generic(m, cx, true)
}

fn randomkey(m: &mut Model, cx: &mut Cx) -> Check {
    Check::RandomKey(m.db.live_keys(cx.now_ms).map(|(k, _)| k.clone()).collect())
}

fn copy(m: &mut Model, cx: &mut Cx) -> Check {
    let mut replace = false;
    let mut j = 3;
    while j < cx.argc() {
        let more = cx.argc() - 1 - j;
        if is(cx.arg(j), "replace") {
            replace = true;
        } else if is(cx.arg(j), "db") && more > 0 {
            match parse_i64(cx.arg(j + 1)) {
                None => return Check::err(NOT_INTEGER),
                Some(n) if i32::try_from(n).is_err() => return Check::err(NOT_INTEGER),
                Some(0) => {}
                // One database per node (docs/ARCHITECTURE.md).
                Some(_) => return Check::err("ERR DB index is out of range"),
            }
            j += 1;
        } else {
            return Check::err(SYNTAX);
        }
        j += 1;
    }
    let (src, dst, now) = (cx.arg(1), cx.arg(2), cx.now_ms);
    if src == dst {
        return Check::err("ERR source and destination objects are the same");
    }
    let Some(entry) = m.db.get(src, now).cloned() else {
        return int(0);
    };
    if m.db.exists(dst, now) {
        if !replace {
            return int(0);
        }
        m.db.delete(dst, now);
    }
    let mut copy = entry;
    copy.stamp_ms = now;
    m.db.put_entry(dst, copy);
    int(1)
}

fn object_encoding(m: &mut Model, cx: &mut Cx) -> Check {
    match m.db.get(cx.arg(2), cx.now_ms) {
        None => null(),
        Some(e) => match e.value {
            Value::Str(_) => Check::OneOfBulk(vec!["int", "embstr", "raw"]),
            Value::List(_) => Check::OneOfBulk(vec!["quicklist"]),
            // Both convert one way only (small to large), so either may be current.
            Value::Hash(_) => Check::OneOfBulk(vec!["listpack", "hashtable"]),
            Value::Set(_) => Check::OneOfBulk(vec!["intset", "hashtable"]),
            Value::ZSet(_) => Check::OneOfBulk(vec!["listpack", "skiplist"]),
        },
    }
}

fn object_refcount(m: &mut Model, cx: &mut Cx) -> Check {
    match m.db.get(cx.arg(2), cx.now_ms) {
        None => null(),
        // Redis reports shared small integers with INT_MAX.
        Some(_) => Check::IntRange(1, i64::MAX),
    }
}

fn object_idletime(m: &mut Model, cx: &mut Cx) -> Check {
    match m.db.get(cx.arg(2), cx.now_ms) {
        None => null(),
        // Redis shares the objects of small integers (0..9999) between keys and never
        // refreshes their access time: any idle time.
        Some(e) if matches!(&e.value, Value::Str(s) if parse_i64(s).is_some_and(|n| (0..10_000).contains(&n))) => {
            Check::IntRange(0, i64::MAX)
        }
        // Redis's LRU clock has a resolution of a second: allow one more.
        Some(e) => Check::IntRange(0, (cx.now_ms.saturating_sub(e.stamp_ms) / 1000 + 1) as i64),
    }
}

const NO_LFU: &str = "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.";

fn object_freq(m: &mut Model, cx: &mut Cx) -> Check {
    match m.db.get(cx.arg(2), cx.now_ms) {
        // Redis looks the key up before checking the policy.
        None => null(),
        Some(_) => Check::err(NO_LFU),
    }
}

pub fn help(_m: &mut Model, _cx: &mut Cx) -> Check {
    Check::NonEmpty
}

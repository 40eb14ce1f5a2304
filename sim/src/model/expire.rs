//! Expiry: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX, XX, GT, LT), TTL, PTTL, EXPIRETIME,
//! PEXPIRETIME, PERSIST. Deadlines are absolute ms on the node's clock; a key is live through
//! its deadline millisecond.

use super::{int, is, parse_i64, spec, Cx, Model, Spec, NOT_INTEGER};
use crate::check::Check;

pub const SPECS: &[Spec] = &[
    spec("expire", -3, expire),
    spec("pexpire", -3, pexpire),
    spec("expireat", -3, expireat),
    spec("pexpireat", -3, pexpireat),
    spec("ttl", 2, ttl),
    spec("pttl", 2, pttl),
    spec("expiretime", 2, expiretime),
    spec("pexpiretime", 2, pexpiretime),
    spec("persist", 2, persist),
];

fn expire(m: &mut Model, cx: &mut Cx) -> Check {
    expire_generic(m, cx, true, true, "expire")
}

fn pexpire(m: &mut Model, cx: &mut Cx) -> Check {
    expire_generic(m, cx, false, true, "pexpire")
}

fn expireat(m: &mut Model, cx: &mut Cx) -> Check {
    expire_generic(m, cx, true, false, "expireat")
}

fn pexpireat(m: &mut Model, cx: &mut Cx) -> Check {
    expire_generic(m, cx, false, false, "pexpireat")
}

/// Redis 7.0's `expireGenericCommand`: options, then the number, then overflow, then the key,
/// then the NX/XX/GT/LT conditions (a key without deadline counts as an infinite one for GT/LT),
/// then delete-if-past or set.
fn expire_generic(m: &mut Model, cx: &mut Cx, seconds: bool, relative: bool, cmd: &str) -> Check {
    // The documented options, as a set of flags: any other word is an error naming it.
    let mut flags = [false; 4];
    for opt in &cx.args[3..] {
        let Some(i) = ["nx", "xx", "gt", "lt"].iter().position(|o| is(opt, o)) else {
            return Check::err(&format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(opt)
            ));
        };
        flags[i] = true;
    }
    let [nx, xx, gt, lt] = flags;
    if nx && (xx || gt || lt) {
        return Check::err("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return Check::err("ERR GT and LT options at the same time are not compatible");
    }
    let Some(mut when) = parse_i64(cx.arg(2)) else {
        return Check::err(NOT_INTEGER);
    };
    let invalid = || Check::err(&format!("ERR invalid expire time in '{cmd}' command"));
    let now = cx.now_ms;
    if seconds {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return invalid();
        }
        when *= 1000;
    }
    if relative {
        if when > i64::MAX - now as i64 {
            return invalid();
        }
        when += now as i64;
    }
    let key = cx.arg(1);
    let Some(e) = m.db.get_mut(key, now) else {
        return int(0);
    };
    let current = e.deadline.map(|d| d as i64);
    let refused = (nx && current.is_some())
        || (xx && current.is_none())
        || (gt && current.is_none_or(|c| when <= c))
        || (lt && current.is_some_and(|c| when >= c));
    if refused {
        return int(0);
    }
    if when <= now as i64 {
        m.db.delete(key, now);
    } else {
        e.deadline = Some(when as u64);
        m.db.touch(key);
    }
    int(1)
}

/// TTL and friends; `abs`: the deadline itself rather than the time left.
fn ttl_generic(m: &mut Model, cx: &mut Cx, ms: bool, abs: bool) -> Check {
    let now = cx.now_ms;
    let Some(e) = m.db.get(cx.arg(1), now) else {
        return int(-2);
    };
    let Some(d) = e.deadline else {
        return int(-1);
    };
    let t = if abs {
        d as i64
    } else {
        (d as i64 - now as i64).max(0)
    };
    if ms {
        return int(t);
    }
    // Redis 7.0 rounds seconds to the nearest, for EXPIRETIME too.
    int((t + 500) / 1000)
}

fn ttl(m: &mut Model, cx: &mut Cx) -> Check {
    ttl_generic(m, cx, false, false)
}

fn pttl(m: &mut Model, cx: &mut Cx) -> Check {
    ttl_generic(m, cx, true, false)
}

fn expiretime(m: &mut Model, cx: &mut Cx) -> Check {
    ttl_generic(m, cx, false, true)
}

fn pexpiretime(m: &mut Model, cx: &mut Cx) -> Check {
    ttl_generic(m, cx, true, true)
}

fn persist(m: &mut Model, cx: &mut Cx) -> Check {
    match m.db.get_mut(cx.arg(1), cx.now_ms) {
        Some(e) if e.deadline.is_some() => {
            e.deadline = None;
            int(1)
        }
        _ => int(0),
    }
}

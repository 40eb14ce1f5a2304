//! Expiry commands: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, TTL, PTTL, EXPIRETIME, PEXPIRETIME,
//! PERSIST. Deadlines are absolute milliseconds on the node's clock, which is what replication
//! will ship (a relative TTL would mean something different on every replica).

use crate::args::{is, parse_i64, NOT_INTEGER};
use crate::cmd::pubsub::EVENT_GENERIC;
use crate::command::{spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};

const GENERIC: &str = "generic";

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "expire",
        -3,
        &["write", "fast"],
        (1, 1, 1),
        GENERIC,
        "1.0.0",
        "Sets the expiration time of a key in seconds.",
        expire,
    )
    .with(Flag::KeepsValue),
    spec(
        "pexpire",
        -3,
        &["write", "fast"],
        (1, 1, 1),
        GENERIC,
        "2.6.0",
        "Sets the expiration time of a key in milliseconds.",
        pexpire,
    )
    .with(Flag::KeepsValue),
    spec(
        "expireat",
        -3,
        &["write", "fast"],
        (1, 1, 1),
        GENERIC,
        "1.2.0",
        "Sets the expiration time of a key to a Unix timestamp.",
        expireat,
    )
    .with(Flag::KeepsValue),
    spec(
        "pexpireat",
        -3,
        &["write", "fast"],
        (1, 1, 1),
        GENERIC,
        "2.6.0",
        "Sets the expiration time of a key to a Unix milliseconds timestamp.",
        pexpireat,
    )
    .with(Flag::KeepsValue),
    spec(
        "ttl",
        2,
        &["readonly", "fast"],
        (1, 1, 1),
        GENERIC,
        "1.0.0",
        "Returns the expiration time in seconds of a key.",
        ttl,
    ),
    spec(
        "pttl",
        2,
        &["readonly", "fast"],
        (1, 1, 1),
        GENERIC,
        "2.6.0",
        "Returns the expiration time in milliseconds of a key.",
        pttl,
    ),
    spec(
        "expiretime",
        2,
        &["readonly", "fast"],
        (1, 1, 1),
        GENERIC,
        "7.0.0",
        "Returns the expiration time of a key as a Unix timestamp.",
        expiretime,
    ),
    spec(
        "pexpiretime",
        2,
        &["readonly", "fast"],
        (1, 1, 1),
        GENERIC,
        "7.0.0",
        "Returns the expiration time of a key as a Unix milliseconds timestamp.",
        pexpiretime,
    ),
    spec(
        "persist",
        2,
        &["write", "fast"],
        (1, 1, 1),
        GENERIC,
        "2.2.0",
        "Removes the expiration time of a key.",
        persist,
    )
    .with(Flag::KeepsValue),
];

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Millis,
}

/// Converts a user-supplied time to an absolute deadline in ms, or `None` on overflow (the
/// caller answers `invalid expire time`). `relative` adds `now_ms`.
pub fn to_deadline_ms(value: i64, unit: Unit, relative: bool, now_ms: u64) -> Option<i64> {
    let ms = match unit {
        Unit::Seconds => value.checked_mul(1000)?,
        Unit::Millis => value,
    };
    if relative {
        ms.checked_add(now_ms as i64)
    } else {
        Some(ms)
    }
}

pub fn invalid_expire(call: &mut Call, command: &str) {
    call.error(&format!("ERR invalid expire time in '{command}' command"));
}

fn expire(core: &mut Core, call: &mut Call) {
    expire_generic(core, call, Unit::Seconds, true, "expire");
}
fn pexpire(core: &mut Core, call: &mut Call) {
    expire_generic(core, call, Unit::Millis, true, "pexpire");
}
fn expireat(core: &mut Core, call: &mut Call) {
    expire_generic(core, call, Unit::Seconds, false, "expireat");
}
fn pexpireat(core: &mut Core, call: &mut Call) {
    expire_generic(core, call, Unit::Millis, false, "pexpireat");
}

/// Redis 7.0's `expireGenericCommand`, step for step: options, number, overflow, key, the
/// NX/XX/GT/LT conditions, then either an immediate delete (deadline not in the future) or
/// the new deadline.
fn expire_generic(core: &mut Core, call: &mut Call, unit: Unit, relative: bool, name: &str) {
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for opt in &call.args[3..] {
        if is(opt, "nx") {
            nx = true;
        } else if is(opt, "xx") {
            xx = true;
        } else if is(opt, "gt") {
            gt = true;
        } else if is(opt, "lt") {
            lt = true;
        } else {
            let o = String::from_utf8_lossy(opt).into_owned();
            return call.error(&format!("ERR Unsupported option {o}"));
        }
    }
    if nx && (xx || gt || lt) {
        return call.error("ERR NX and XX, GT or LT options at the same time are not compatible");
    }
    if gt && lt {
        return call.error("ERR GT and LT options at the same time are not compatible");
    }
    let Some(value) = parse_i64(call.arg(2)) else {
        return call.error(NOT_INTEGER);
    };
    let now_ms = call.now_ms;
    let Some(when) = to_deadline_ms(value, unit, relative, now_ms) else {
        return invalid_expire(call, name);
    };
    // The canary: a deliberately wrong deadline (a second early for some PEXPIRE values) that
    // the simulator's reference model must catch. Only built with `--features planted-bug`.
    #[cfg(feature = "planted-bug")]
    let when = if unit == Unit::Millis && relative && value.rem_euclid(7) == 3 {
        when - 1000
    } else {
        when
    };
    let key = call.arg(1);
    let Some(entry) = core.lookup_write(key, now_ms) else {
        return call.out.integer(0);
    };
    let current = entry.expire_at_ms().map(|t| t as i64);
    let refused = (nx && current.is_some())
        || (xx && current.is_none())
        || (gt && current.is_none_or(|c| when <= c))
        || (lt && current.is_some_and(|c| when >= c));
    if refused {
        return call.out.integer(0);
    }
    if when <= now_ms as i64 {
        core.db.remove(key);
        core.modified(key);
        core.notify(EVENT_GENERIC, "del", key);
    } else {
        core.db.set_expire(key, Some(when as u64));
        core.modified(key);
        core.notify(EVENT_GENERIC, "expire", key);
    }
    call.out.integer(1);
}

/// The deadline of a live key: `Err(-2)` when missing, `Ok(None)` when persistent.
fn deadline(core: &mut Core, key: &[u8], now_ms: u64) -> Result<Option<u64>, i64> {
    // No access recorded, as Redis's TTL family (LOOKUP_NOTOUCH).
    match core.lookup_read_untouched(key, now_ms) {
        None => Err(-2),
        Some(e) => Ok(e.expire_at_ms()),
    }
}

fn ttl_generic(core: &mut Core, call: &mut Call, unit: Unit, absolute: bool) {
    let now_ms = call.now_ms;
    let reply = match deadline(core, call.arg(1), now_ms) {
        Err(code) => code,
        Ok(None) => -1,
        Ok(Some(t)) if absolute => match unit {
            Unit::Millis => t as i64,
            // Rounded to the nearest second, as Redis does.
            Unit::Seconds => ((t + 500) / 1000) as i64,
        },
        Ok(Some(t)) => {
            let left = t.saturating_sub(now_ms) as i64;
            match unit {
                Unit::Millis => left,
                Unit::Seconds => (left + 500) / 1000,
            }
        }
    };
    call.out.integer(reply);
}

fn ttl(core: &mut Core, call: &mut Call) {
    ttl_generic(core, call, Unit::Seconds, false);
}
fn pttl(core: &mut Core, call: &mut Call) {
    ttl_generic(core, call, Unit::Millis, false);
}
fn expiretime(core: &mut Core, call: &mut Call) {
    ttl_generic(core, call, Unit::Seconds, true);
}
fn pexpiretime(core: &mut Core, call: &mut Call) {
    ttl_generic(core, call, Unit::Millis, true);
}

fn persist(core: &mut Core, call: &mut Call) {
    let key = call.arg(1);
    let had = match core.lookup_write(key, call.now_ms) {
        Some(e) => e.expire_at_ms().is_some(),
        None => false,
    };
    if had {
        core.db.set_expire(key, None);
        core.modified(key);
        core.notify(EVENT_GENERIC, "persist", key);
    }
    call.out.integer(had as i64);
}

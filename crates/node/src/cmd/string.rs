//! String commands: GET, SET and its variants, MGET/MSET, APPEND, ranges, counters, LCS, and
//! the bitmap commands (in `bits`). Replies and error texts follow Redis 7.0 exactly, including
//! the order in which arguments, key types and limits are checked.

mod bitfield;
mod bits;
pub(crate) mod float;
mod lcs;
#[cfg(test)]
mod tests;
pub(crate) mod value;

use lattice_resp::ReplyWriter;
use lattice_store::Str;

use crate::args::{parse_i64, NOT_INTEGER, OVERFLOW};
use crate::cmd::expire::{invalid_expire, to_deadline_ms, Unit};
use crate::cmd::pubsub::EVENT_GENERIC;
use crate::command::{spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};
use value::{changed, opt_is, read_str, store, write_str, WrongType};

const STRING: &str = "string";
const BITMAP: &str = "bitmap";

const W: &[&str] = &["write", "denyoom"];
const WF: &[&str] = &["write", "denyoom", "fast"];
const R: &[&str] = &["readonly"];
const RF: &[&str] = &["readonly", "fast"];

// One line per command reads best as a table.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    spec("get", 2, RF, (1, 1, 1), STRING, "1.0.0", "Get the value of a key", get),
    spec("set", -3, W, (1, 1, 1), STRING, "1.0.0", "Set the string value of a key", set),
    spec("setnx", 3, WF, (1, 1, 1), STRING, "1.0.0", "Set the value of a key, only if the key does not exist", setnx),
    spec("setex", 4, W, (1, 1, 1), STRING, "2.0.0", "Set the value and expiration of a key", setex),
    spec("psetex", 4, W, (1, 1, 1), STRING, "2.6.0", "Set the value and expiration in milliseconds of a key", psetex),
    spec("mget", -2, RF, (1, -1, 1), STRING, "1.0.0", "Get the values of all the given keys", mget),
    spec("mset", -3, W, (1, -1, 2), STRING, "1.0.1", "Set multiple keys to multiple values", mset),
    spec("msetnx", -3, W, (1, -1, 2), STRING, "1.0.1", "Set multiple keys to multiple values, only if none of the keys exist", msetnx),
    spec("append", 3, WF, (1, 1, 1), STRING, "2.0.0", "Append a value to a key", append).with(Flag::LoggedAsCommand),
    spec("strlen", 2, RF, (1, 1, 1), STRING, "2.2.0", "Get the length of the value stored in a key", strlen),
    spec("getrange", 4, R, (1, 1, 1), STRING, "2.4.0", "Get a substring of the string stored at a key", getrange),
    spec("substr", 4, R, (1, 1, 1), STRING, "1.0.0", "Get a substring of the string stored at a key", getrange),
    spec("setrange", 4, W, (1, 1, 1), STRING, "2.2.0", "Overwrite part of a string at key starting at the specified offset", setrange).with(Flag::LoggedAsCommand),
    spec("getset", 3, WF, (1, 1, 1), STRING, "1.0.0", "Set the string value of a key and return its old value", getset),
    spec("getdel", 2, &["write", "fast"], (1, 1, 1), STRING, "6.2.0", "Get the value of a key and delete the key", getdel),
    spec("getex", -2, &["write", "fast"], (1, 1, 1), STRING, "6.2.0", "Get the value of a key and optionally set its expiration", getex).with(Flag::KeepsValue),
    spec("incr", 2, WF, (1, 1, 1), STRING, "1.0.0", "Increment the integer value of a key by one", incr).with(Flag::Increments),
    spec("decr", 2, WF, (1, 1, 1), STRING, "1.0.0", "Decrement the integer value of a key by one", decr).with(Flag::Increments),
    spec("incrby", 3, WF, (1, 1, 1), STRING, "1.0.0", "Increment the integer value of a key by the given amount", incrby).with(Flag::Increments),
    spec("decrby", 3, WF, (1, 1, 1), STRING, "1.0.0", "Decrement the integer value of a key by the given number", decrby).with(Flag::Increments),
    spec("incrbyfloat", 3, WF, (1, 1, 1), STRING, "2.6.0", "Increment the float value of a key by the given amount", incrbyfloat).with(Flag::Increments),
    spec("lcs", -3, R, (1, 2, 1), STRING, "7.0.0", "Find longest common substring", lcs::lcs),
    spec("setbit", 4, W, (1, 1, 1), BITMAP, "2.2.0", "Sets or clears the bit at offset in the string value stored at key", bits::setbit),
    spec("getbit", 3, RF, (1, 1, 1), BITMAP, "2.2.0", "Returns the bit value at offset in the string value stored at key", bits::getbit),
    spec("bitcount", -2, R, (1, 1, 1), BITMAP, "2.6.0", "Count set bits in a string", bits::bitcount),
    spec("bitpos", -3, R, (1, 1, 1), BITMAP, "2.8.7", "Find first bit set or clear in a string", bits::bitpos),
    spec("bitop", -4, W, (2, -1, 1), BITMAP, "2.6.0", "Perform bitwise operations between strings", bitfield::bitop),
    spec("bitfield", -2, W, (1, 1, 1), BITMAP, "3.2.0", "Perform arbitrary bitfield integer operations on strings", bitfield::bitfield),
    spec("bitfield_ro", -2, RF, (1, 1, 1), BITMAP, "6.0.0", "Perform arbitrary bitfield integer operations on strings. Read-only variant of BITFIELD", bitfield::bitfield_ro),
];

const STRING_TOO_LONG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

fn reply_str(out: &mut ReplyWriter, s: &Str) {
    match s {
        Str::Int(n) => out.bulk_i64(*n),
        Str::Raw(v) => out.bulk(v),
    }
}

// ---------------------------------------------------------------------------------------------
// SET and friends

#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpireKind {
    Ex,
    Px,
    ExAt,
    PxAt,
}

impl ExpireKind {
    fn unit(self) -> Unit {
        match self {
            ExpireKind::Ex | ExpireKind::ExAt => Unit::Seconds,
            ExpireKind::Px | ExpireKind::PxAt => Unit::Millis,
        }
    }

    fn relative(self) -> bool {
        matches!(self, ExpireKind::Ex | ExpireKind::Px)
    }
}

/// Options of SET (and GETEX, which shares the parser with a different allowed set).
#[derive(Default)]
struct ExtOpts<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    expire: Option<(ExpireKind, &'a [u8])>,
}

/// Parses SET's options from `call.args[first..]` (`for_set`), or GETEX's. Replies with a
/// syntax error and returns `None` on any invalid or conflicting option.
fn parse_ext<'a>(call: &mut Call<'a>, first: usize, for_set: bool) -> Option<ExtOpts<'a>> {
    let mut o = ExtOpts::default();
    let mut j = first;
    while j < call.argc() {
        let opt = call.arg(j);
        let next = (j + 1 < call.argc()).then(|| call.arg(j + 1));
        let expire_kind = if opt_is(opt, "ex") {
            Some(ExpireKind::Ex)
        } else if opt_is(opt, "px") {
            Some(ExpireKind::Px)
        } else if opt_is(opt, "exat") {
            Some(ExpireKind::ExAt)
        } else if opt_is(opt, "pxat") {
            Some(ExpireKind::PxAt)
        } else {
            None
        };
        if opt_is(opt, "nx") && for_set && !o.xx {
            o.nx = true;
        } else if opt_is(opt, "xx") && for_set && !o.nx {
            o.xx = true;
        } else if opt_is(opt, "get") && for_set {
            o.get = true;
        } else if opt_is(opt, "keepttl") && for_set && !o.persist && o.expire.is_none() {
            o.keepttl = true;
        } else if opt_is(opt, "persist") && !for_set && o.expire.is_none() && !o.keepttl {
            o.persist = true;
        } else if let (Some(kind), Some(value)) = (expire_kind, next) {
            // The same expiry option may repeat (the last one counts); two different ones
            // conflict.
            let compatible = o.expire.is_none_or(|(k, _)| k == kind);
            if o.keepttl || o.persist || !compatible {
                call.syntax_error();
                return None;
            }
            o.expire = Some((kind, value));
            j += 1;
        } else {
            call.syntax_error();
            return None;
        }
        j += 1;
    }
    Some(o)
}

/// Turns an expiry argument into an absolute deadline in ms, or replies with the error
/// (`name` is the command in `invalid expire time in '<name>' command`).
fn expire_deadline(call: &mut Call, kind: ExpireKind, arg: &[u8], name: &str) -> Option<i64> {
    let Some(value) = parse_i64(arg) else {
        call.error(NOT_INTEGER);
        return None;
    };
    if value <= 0 {
        invalid_expire(call, name);
        return None;
    }
    match to_deadline_ms(value, kind.unit(), kind.relative(), call.now_ms) {
        Some(t) if t > 0 => Some(t),
        _ => {
            invalid_expire(call, name);
            None
        }
    }
}

/// How SET-like commands answer: SET says OK / nil, SETNX says 1 / 0.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SetReply {
    OkNil,
    OneZero,
}

/// Writes GET's reply for `key`; false when the key holds another type (replied WRONGTYPE).
fn get_generic(core: &mut Core, call: &mut Call, key: &[u8]) -> bool {
    match read_str(core, key, call.now_ms) {
        Err(WrongType) => {
            call.wrong_type();
            false
        }
        Ok(None) => {
            call.out.null();
            true
        }
        Ok(Some(s)) => {
            reply_str(&mut call.out, s);
            true
        }
    }
}

/// Redis's `setGenericCommand`: expiry validation, GET, the NX/XX condition, then the write.
fn set_generic(
    core: &mut Core,
    call: &mut Call,
    opts: &ExtOpts,
    value: &[u8],
    name: &str,
    reply: SetReply,
) {
    let key = call.arg(1);
    let now_ms = call.now_ms;
    let deadline = match opts.expire {
        Some((kind, arg)) => match expire_deadline(call, kind, arg, name) {
            Some(t) => Some(t as u64),
            None => return,
        },
        None => None,
    };
    if opts.get && !get_generic(core, call, key) {
        return;
    }
    let existing = core.lookup_write(key, now_ms).map(|e| e.expire_at_ms());
    let found = existing.is_some();
    if (opts.nx && found) || (opts.xx && !found) {
        if !opts.get {
            match reply {
                SetReply::OkNil => call.out.null(),
                SetReply::OneZero => call.out.integer(0),
            }
        }
        return;
    }
    let deadline = match deadline {
        Some(t) => Some(t),
        None if opts.keepttl => existing.flatten(),
        None => None,
    };
    store(core, key, Str::from_bytes(value), deadline, now_ms, "set");
    if opts.expire.is_some() {
        core.notify(EVENT_GENERIC, "expire", key);
    }
    if !opts.get {
        match reply {
            SetReply::OkNil => call.ok(),
            SetReply::OneZero => call.out.integer(1),
        }
    }
}

fn get(core: &mut Core, call: &mut Call) {
    get_generic(core, call, call.arg(1));
}

fn set(core: &mut Core, call: &mut Call) {
    let Some(opts) = parse_ext(call, 3, true) else {
        return;
    };
    set_generic(core, call, &opts, call.arg(2), "set", SetReply::OkNil);
}

fn setnx(core: &mut Core, call: &mut Call) {
    let opts = ExtOpts {
        nx: true,
        ..ExtOpts::default()
    };
    set_generic(core, call, &opts, call.arg(2), "setnx", SetReply::OneZero);
}

fn setex(core: &mut Core, call: &mut Call) {
    let opts = ExtOpts {
        expire: Some((ExpireKind::Ex, call.arg(2))),
        ..ExtOpts::default()
    };
    set_generic(core, call, &opts, call.arg(3), "setex", SetReply::OkNil);
}

fn psetex(core: &mut Core, call: &mut Call) {
    let opts = ExtOpts {
        expire: Some((ExpireKind::Px, call.arg(2))),
        ..ExtOpts::default()
    };
    set_generic(core, call, &opts, call.arg(3), "psetex", SetReply::OkNil);
}

fn getex(core: &mut Core, call: &mut Call) {
    let Some(opts) = parse_ext(call, 2, false) else {
        return;
    };
    let key = call.arg(1);
    let now_ms = call.now_ms;
    // The key is looked up before the expiry is validated: a missing key answers nil even
    // with a bad time.
    let s = match read_str(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.null(),
        Ok(Some(s)) => s,
    };
    let deadline = match opts.expire {
        Some((kind, arg)) => match expire_deadline(call, kind, arg, "getex") {
            Some(t) => Some((kind, t)),
            None => return,
        },
        None => None,
    };
    reply_str(&mut call.out, s);
    match deadline {
        Some((kind, t)) if !kind.relative() && t <= now_ms as i64 => {
            core.db.remove(key);
            core.modified(key);
            core.notify(EVENT_GENERIC, "del", key);
        }
        Some((_, t)) => {
            core.db.set_expire(key, Some(t as u64));
            core.modified(key);
            core.notify(EVENT_GENERIC, "expire", key);
        }
        None if opts.persist => {
            let had = core
                .db
                .get_raw(key)
                .is_some_and(|e| e.expire_at_ms().is_some());
            if had {
                core.db.set_expire(key, None);
                core.modified(key);
                core.notify(EVENT_GENERIC, "persist", key);
            }
        }
        None => {}
    }
}

fn getdel(core: &mut Core, call: &mut Call) {
    let key = call.arg(1);
    match read_str(core, key, call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(None) => call.out.null(),
        Ok(Some(s)) => {
            reply_str(&mut call.out, s);
            core.db.remove(key);
            core.modified(key);
            core.notify(EVENT_GENERIC, "del", key);
        }
    }
}

fn getset(core: &mut Core, call: &mut Call) {
    let key = call.arg(1);
    if !get_generic(core, call, key) {
        return;
    }
    store(
        core,
        key,
        Str::from_bytes(call.arg(2)),
        None,
        call.now_ms,
        "set",
    );
}

fn mget(core: &mut Core, call: &mut Call) {
    call.out.array_len(call.argc() - 1);
    for key in &call.args[1..] {
        match read_str(core, key, call.now_ms) {
            Ok(Some(s)) => reply_str(&mut call.out, s),
            Ok(None) | Err(WrongType) => call.out.null(),
        }
    }
}

fn mset_generic(core: &mut Core, call: &mut Call, nx: bool) {
    if call.argc().is_multiple_of(2) {
        let name = if nx { "msetnx" } else { "mset" };
        return call.error(&format!(
            "ERR wrong number of arguments for '{name}' command"
        ));
    }
    let now_ms = call.now_ms;
    if nx
        && call.args[1..]
            .chunks(2)
            .any(|kv| core.lookup_write(&kv[0], now_ms).is_some())
    {
        return call.out.integer(0);
    }
    for kv in call.args[1..].chunks(2) {
        store(core, &kv[0], Str::from_bytes(&kv[1]), None, now_ms, "set");
    }
    if nx {
        call.out.integer(1);
    } else {
        call.ok();
    }
}

fn mset(core: &mut Core, call: &mut Call) {
    mset_generic(core, call, false);
}

fn msetnx(core: &mut Core, call: &mut Call) {
    mset_generic(core, call, true);
}

// ---------------------------------------------------------------------------------------------
// Lengths and ranges

fn append(core: &mut Core, call: &mut Call) {
    let (key, tail) = (call.arg(1), call.arg(2));
    let now_ms = call.now_ms;
    let max = core.config.proto_max_bulk_len;
    match write_str(core, key, now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(None) => {
            store(core, key, Str::from_bytes(tail), None, now_ms, "append");
            call.out.integer(tail.len() as i64);
        }
        Ok(Some(s)) => {
            let total = s.len() as u64 + tail.len() as u64;
            if total > max {
                return call.error(STRING_TOO_LONG);
            }
            let v = s.make_raw();
            v.extend_from_slice(tail);
            call.out.integer(v.len() as i64);
            changed(core, key, false, "append");
        }
    }
}

fn strlen(core: &mut Core, call: &mut Call) {
    match read_str(core, call.arg(1), call.now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(None) => call.out.integer(0),
        Ok(Some(s)) => call.out.integer(s.len() as i64),
    }
}

/// GETRANGE and SUBSTR.
fn getrange(core: &mut Core, call: &mut Call) {
    let Some(start) = parse_i64(call.arg(2)) else {
        return call.error(NOT_INTEGER);
    };
    let Some(end) = parse_i64(call.arg(3)) else {
        return call.error(NOT_INTEGER);
    };
    let s = match read_str(core, call.arg(1), call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.bulk(b""),
        Ok(Some(s)) => s,
    };
    let bytes = s.as_bytes();
    match byte_range(start, end, bytes.len()) {
        Some((from, to)) => call.out.bulk(&bytes[from..=to]),
        None => call.out.bulk(b""),
    }
}

/// GETRANGE's index rules: negatives count from the end, both ends are clamped into the string,
/// and two negative indexes in the wrong order select nothing. `None` for an empty selection.
fn byte_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    if start < 0 && end < 0 && start > end {
        return None;
    }
    let mut start = if start < 0 { len + start } else { start };
    let mut end = if end < 0 { len + end } else { end };
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        return None;
    }
    Some((start as usize, end as usize))
}

fn setrange(core: &mut Core, call: &mut Call) {
    let (key, value) = (call.arg(1), call.arg(3));
    let Some(offset) = parse_i64(call.arg(2)) else {
        return call.error(NOT_INTEGER);
    };
    if offset < 0 {
        return call.error("ERR offset is out of range");
    }
    let offset = offset as u64;
    let now_ms = call.now_ms;
    let max = core.config.proto_max_bulk_len;
    let needed = offset.saturating_add(value.len() as u64);
    match write_str(core, key, now_ms) {
        Err(WrongType) => call.wrong_type(),
        // Setting nothing creates nothing, and answers the current length.
        Ok(None) if value.is_empty() => call.out.integer(0),
        Ok(Some(s)) if value.is_empty() => call.out.integer(s.len() as i64),
        _ if needed > max => call.error(STRING_TOO_LONG),
        Ok(None) => {
            let mut v = vec![0u8; needed as usize];
            v[offset as usize..].copy_from_slice(value);
            store(core, key, Str::Raw(v), None, now_ms, "setrange");
            call.out.integer(needed as i64);
        }
        Ok(Some(s)) => {
            let v = s.make_raw();
            let (offset, needed) = (offset as usize, needed as usize);
            if v.len() < needed {
                v.resize(needed, 0);
            }
            v[offset..needed].copy_from_slice(value);
            call.out.integer(v.len() as i64);
            changed(core, key, false, "setrange");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Counters

fn incr_decr(core: &mut Core, call: &mut Call, by: i64) {
    let key = call.arg(1);
    let now_ms = call.now_ms;
    let current = match write_str(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => None,
        Ok(Some(s)) => match s.as_i64() {
            Some(n) => Some(n),
            None => return call.error(NOT_INTEGER),
        },
    };
    let Some(new) = current.unwrap_or(0).checked_add(by) else {
        return call.error(OVERFLOW);
    };
    match write_str(core, key, now_ms) {
        // An existing counter keeps its time to live.
        Ok(Some(s)) => {
            *s = Str::Int(new);
            changed(core, key, false, "incrby");
        }
        _ => store(core, key, Str::Int(new), None, now_ms, "incrby"),
    }
    call.out.integer(new);
}

fn incr(core: &mut Core, call: &mut Call) {
    incr_decr(core, call, 1);
}

fn decr(core: &mut Core, call: &mut Call) {
    incr_decr(core, call, -1);
}

fn incrby(core: &mut Core, call: &mut Call) {
    match parse_i64(call.arg(2)) {
        Some(by) => incr_decr(core, call, by),
        None => call.error(NOT_INTEGER),
    }
}

fn decrby(core: &mut Core, call: &mut Call) {
    match parse_i64(call.arg(2)) {
        Some(i64::MIN) => call.error("ERR decrement would overflow"),
        Some(by) => incr_decr(core, call, -by),
        None => call.error(NOT_INTEGER),
    }
}

fn incrbyfloat(core: &mut Core, call: &mut Call) {
    let key = call.arg(1);
    let now_ms = call.now_ms;
    let result = match write_str(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => float::incr_by_float(None, call.arg(2)),
        Ok(Some(s)) => float::incr_by_float(Some(&s.as_bytes()), call.arg(2)),
    };
    let text = match result {
        Ok(text) => text,
        Err(message) => return call.error(message),
    };
    call.out.bulk(&text);
    // Stored as the text (never integer-encoded), keeping any time to live.
    match write_str(core, key, now_ms) {
        Ok(Some(s)) => {
            *s = Str::Raw(text);
            changed(core, key, false, "incrbyfloat");
        }
        _ => store(core, key, Str::Raw(text), None, now_ms, "incrbyfloat"),
    }
}

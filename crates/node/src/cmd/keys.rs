//! Generic key commands: DEL, UNLINK, EXISTS, TYPE, KEYS, SCAN, RENAME, RENAMENX, RANDOMKEY,
//! TOUCH, COPY, OBJECT.

use crate::args::{is, parse_i64, NO_SUCH_KEY, SYNTAX};
use crate::cmd::pubsub::EVENT_GENERIC;
use crate::command::{container, spec, Call};
use crate::ctx::{CommandSpec, Core};
use lattice_store::{glob_match, SLOT_COUNT};

const GENERIC: &str = "generic";

pub const COMMANDS: &[CommandSpec] = &[
    spec("del", -2, &["write"], (1, -1, 1), GENERIC, "1.0.0", "Deletes one or more keys.", del),
    spec("unlink", -2, &["write", "fast"], (1, -1, 1), GENERIC, "4.0.0", "Asynchronously deletes one or more keys.", del),
    spec("exists", -2, &["readonly", "fast"], (1, -1, 1), GENERIC, "1.0.0", "Determines whether one or more keys exist.", exists),
    spec("type", 2, &["readonly", "fast"], (1, 1, 1), GENERIC, "1.0.0", "Determines the type of value stored at a key.", type_),
    spec("keys", 2, &["readonly"], (0, 0, 0), GENERIC, "1.0.0", "Returns all key names that match a pattern.", keys),
    spec("scan", -2, &["readonly"], (0, 0, 0), GENERIC, "2.8.0", "Iterates over the key names in the database.", scan),
    spec("rename", 3, &["write"], (1, 2, 1), GENERIC, "1.0.0", "Renames a key and overwrites the destination.", rename),
    spec("renamenx", 3, &["write", "fast"], (1, 2, 1), GENERIC, "1.0.0", "Renames a key only when the target key name doesn't exist.", renamenx),
    spec("randomkey", 1, &["readonly"], (0, 0, 0), GENERIC, "1.0.0", "Returns a random key name from the database.", randomkey),
    spec("touch", -2, &["readonly", "fast"], (1, -1, 1), GENERIC, "3.2.1", "Returns the number of existing keys out of those specified after updating the time they were last accessed.", touch),
    spec("copy", -3, &["write", "denyoom"], (1, 2, 1), GENERIC, "6.2.0", "Copies the value of a key to a new key.", copy),
    container(
        "object",
        -2,
        GENERIC,
        "2.2.3",
        "A container for object introspection commands.",
        &[
            spec("object|encoding", 3, &["readonly"], (2, 2, 1), GENERIC, "2.2.3", "Returns the internal encoding of a Redis object.", object_encoding),
            spec("object|refcount", 3, &["readonly"], (2, 2, 1), GENERIC, "2.2.3", "Returns the reference count of a value of a key.", object_refcount),
            spec("object|idletime", 3, &["readonly"], (2, 2, 1), GENERIC, "2.2.3", "Returns the time since the last access to a Redis object.", object_idletime),
            spec("object|freq", 3, &["readonly"], (2, 2, 1), GENERIC, "4.0.0", "Returns the logarithmic access frequency counter of a Redis object.", object_freq),
            spec("object|help", 2, &[], (0, 0, 0), GENERIC, "6.2.0", "Returns helpful text about the different subcommands.", object_help),
        ],
    ),
];

fn del(core: &mut Core, call: &mut Call) {
    let lazy = is(&call.args[0], "unlink") || core.config.lazyfree_lazy_user_del;
    let mut n = 0;
    for key in &call.args[1..] {
        // An expired key is reclaimed by the lookup and does not count as deleted.
        if core.exists(key, call.now_ms) {
            if let Some(gone) = core.db.remove(key) {
                if lazy {
                    core.free_later(gone);
                }
            }
            core.modified(key);
            core.notify(EVENT_GENERIC, "del", key);
            n += 1;
        }
    }
    call.out.integer(n);
}

fn exists(core: &mut Core, call: &mut Call) {
    let mut n = 0;
    for key in &call.args[1..] {
        if core.lookup_read_untouched(key, call.now_ms).is_some() {
            n += 1;
        }
    }
    call.out.integer(n);
}

fn touch(core: &mut Core, call: &mut Call) {
    let mut n = 0;
    for key in &call.args[1..] {
        if core.lookup_write(key, call.now_ms).is_some() {
            n += 1;
        }
    }
    call.out.integer(n);
}

fn type_(core: &mut Core, call: &mut Call) {
    // Lazy expiry, then the type without recording an access, as Redis's TYPE
    // (LOOKUP_NOTOUCH); no hit or miss counted, as before.
    let now_ms = call.now_ms;
    core.exists(call.arg(1), now_ms);
    let name = match core.db.get_live(call.arg(1), now_ms, |_| {}) {
        Some(e) => e.value.type_name(),
        None => "none",
    };
    call.out.simple(name.as_bytes());
}

fn keys(core: &mut Core, call: &mut Call) {
    let pattern = call.arg(1);
    let all = pattern == b"*";
    let now_ms = call.now_ms;
    let matched: Vec<&[u8]> = core
        .db
        .iter()
        .filter(|e| !e.is_expired(now_ms))
        .filter(|e| all || glob_match(pattern, e.key(), false))
        .map(|e| e.key())
        .collect();
    call.out.array_len(matched.len());
    for k in matched {
        call.out.bulk(k);
    }
}

/// Parses a SCAN-family cursor as Redis 7.0 does (`strtoul`): no leading space, an optional
/// sign (a negative number wraps around), decimal digits up to a NUL byte or the end, no
/// overflow. An empty argument is cursor 0.
pub fn parse_cursor(arg: &[u8]) -> Option<u64> {
    let arg = match arg.iter().position(|&b| b == 0) {
        Some(n) => &arg[..n],
        None => arg,
    };
    if arg.is_empty() {
        return Some(0);
    }
    let (neg, digits) = match arg[0] {
        b'-' => (true, &arg[1..]),
        b'+' => (false, &arg[1..]),
        _ => (false, arg),
    };
    if digits.is_empty() || !digits.iter().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v: u64 = 0;
    for &d in digits {
        v = v.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

fn scan(core: &mut Core, call: &mut Call) {
    let Some(cursor) = parse_cursor(call.arg(1)) else {
        return call.error("ERR invalid cursor");
    };
    let mut pattern: Option<&[u8]> = None;
    let mut count: usize = 10;
    let mut type_filter: Option<&[u8]> = None;
    let mut i = 2;
    while i < call.argc() {
        if i + 1 >= call.argc() {
            return call.syntax_error();
        }
        let (opt, val) = (call.arg(i), call.arg(i + 1));
        if is(opt, "match") {
            pattern = Some(val).filter(|p| *p != b"*");
        } else if is(opt, "count") {
            match parse_i64(val) {
                Some(n) if n >= 1 => count = n as usize,
                Some(_) => return call.error(SYNTAX),
                None => return call.error(crate::args::NOT_INTEGER),
            }
        } else if is(opt, "type") {
            type_filter = Some(val);
        } else {
            return call.syntax_error();
        }
        i += 2;
    }
    // The cursor is the next slot to visit: slots never move, so a key present for the whole
    // iteration is returned at least once however the keyspace grows or shrinks meanwhile.
    let mut slot = cursor as usize;
    let mut found: Vec<Vec<u8>> = Vec::new();
    let now_ms = call.now_ms;
    // Visit whole slots until `count` keys were seen (Redis's COUNT is a hint too). Walking
    // empty slots costs a length check each, so even a sparse keyspace answers in one call.
    while slot < SLOT_COUNT && found.len() < count {
        core.db.for_each_in_slot(slot, |e| {
            if e.is_expired(now_ms) {
                return;
            }
            if pattern.is_some_and(|p| !glob_match(p, e.key(), false)) {
                return;
            }
            if type_filter.is_some_and(|t| !t.eq_ignore_ascii_case(e.value.type_name().as_bytes()))
            {
                return;
            }
            found.push(e.key().to_vec());
        });
        slot += 1;
    }
    let next = if slot >= SLOT_COUNT { 0 } else { slot };
    call.out.array_len(2);
    call.out.bulk(next.to_string().as_bytes());
    call.out.array_len(found.len());
    for k in &found {
        call.out.bulk(k);
    }
}

/// Moves `src` to `dst` keeping its deadline. Returns false when `src` does not exist.
fn move_key(core: &mut Core, src: &[u8], dst: &[u8], now_ms: u64) -> bool {
    if !core.exists(src, now_ms) {
        return false;
    }
    let entry = core.db.remove(src).expect("exists");
    let deadline = entry.expire_at_ms();
    core.db.insert(dst, entry.into_value(), deadline, now_ms);
    core.modified(src);
    core.modified(dst);
    core.notify(EVENT_GENERIC, "rename_from", src);
    core.notify(EVENT_GENERIC, "rename_to", dst);
    true
}

fn rename(core: &mut Core, call: &mut Call) {
    let (src, dst) = (call.arg(1), call.arg(2));
    if src == dst {
        return if core.exists(src, call.now_ms) {
            call.ok()
        } else {
            call.error(NO_SUCH_KEY)
        };
    }
    if move_key(core, src, dst, call.now_ms) {
        call.ok();
    } else {
        call.error(NO_SUCH_KEY);
    }
}

fn renamenx(core: &mut Core, call: &mut Call) {
    let (src, dst) = (call.arg(1), call.arg(2));
    if !core.exists(src, call.now_ms) {
        return call.error(NO_SUCH_KEY);
    }
    if src == dst || core.exists(dst, call.now_ms) {
        return call.out.integer(0);
    }
    move_key(core, src, dst, call.now_ms);
    call.out.integer(1);
}

fn randomkey(core: &mut Core, call: &mut Call) {
    // Expired keys found on the way are reclaimed; bounded so a keyspace of nothing but
    // expired keys cannot keep us here.
    for _ in 0..100 {
        let mut draws = [core.random_u64(), core.random_u64()].into_iter();
        let Some(entry) = core.db.random_entry(|| draws.next().unwrap_or(0)) else {
            return call.out.null();
        };
        if entry.is_expired(call.now_ms) {
            let key = entry.key().to_vec();
            core.exists(&key, call.now_ms);
            continue;
        }
        let key = entry.key().to_vec();
        return call.out.bulk(&key);
    }
    call.out.null();
}

fn copy(core: &mut Core, call: &mut Call) {
    let (src, dst) = (call.arg(1), call.arg(2));
    let mut replace = false;
    let mut i = 3;
    while i < call.argc() {
        if is(call.arg(i), "replace") {
            replace = true;
            i += 1;
        } else if is(call.arg(i), "db") && i + 1 < call.argc() {
            match parse_i64(call.arg(i + 1)) {
                Some(0) => {}
                Some(_) => return call.error("ERR DB index is out of range"),
                None => return call.error(crate::args::NOT_INTEGER),
            }
            i += 2;
        } else {
            return call.syntax_error();
        }
    }
    if src == dst {
        return call.error("ERR source and destination objects are the same");
    }
    let now_ms = call.now_ms;
    let Some(entry) = core.lookup_read(src, now_ms) else {
        return call.out.integer(0);
    };
    let (value, deadline) = (entry.value.clone(), entry.expire_at_ms());
    if core.exists(dst, now_ms) && !replace {
        return call.out.integer(0);
    }
    core.db.insert(dst, value, deadline, now_ms);
    core.modified(dst);
    core.notify(EVENT_GENERIC, "copy_to", dst);
    call.out.integer(1);
}

fn object_encoding(core: &mut Core, call: &mut Call) {
    match core.db.get_live(call.arg(2), call.now_ms, |_| {}) {
        Some(e) => call.out.bulk(e.value.encoding().as_bytes()),
        None => call.out.null(),
    }
}

fn object_refcount(core: &mut Core, call: &mut Call) {
    // Values are never shared between keys in Lattice.
    match core.db.get_live(call.arg(2), call.now_ms, |_| {}) {
        Some(_) => call.out.integer(1),
        None => call.out.null(),
    }
}

fn lfu_policy(core: &Core) -> bool {
    core.config.maxmemory_policy.ends_with("lfu")
}

fn object_idletime(core: &mut Core, call: &mut Call) {
    // The key first (nil when missing), then the policy, as Redis checks them.
    let Some(access_ms) = core
        .db
        .get_live(call.arg(2), call.now_ms, |_| {})
        .map(|e| e.access_ms())
    else {
        return call.out.null();
    };
    if lfu_policy(core) {
        return call.error("ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.");
    }
    // Read without touching: asking for the idle time must not reset it.
    call.out
        .integer((call.now_ms.saturating_sub(access_ms) / 1000) as i64);
}

fn object_freq(core: &mut Core, call: &mut Call) {
    let decay_min = core.config.lfu_decay_time_min;
    let Some(counter) = core
        .db
        .get_live(call.arg(2), call.now_ms, |_| {})
        .map(|e| e.lfu_counter(call.now_ms, decay_min))
    else {
        return call.out.null();
    };
    if !lfu_policy(core) {
        return call.error("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.");
    }
    // Read without touching, decayed to now, as Redis answers. A key the hot-key sketch
    // tracks (ARCHITECTURE §56) answers at least the counter of the accesses the sketch holds
    // for it: reads this node forwarded to an owner, or made before an LFU policy was set,
    // count there and not in the key's own counter, and `redis-cli --hotkeys` ranks by it.
    core.hot_keys.roll_to(call.now_ms);
    let key = call.arg(2);
    let sketched = if core.hot_keys.rate_per_s(key) > 0 {
        core.hot_keys
            .lfu_counter(key, u64::from(core.config.lfu_log_factor))
    } else {
        0
    };
    call.out.integer(i64::from(counter.max(sketched)));
}

fn object_help(_core: &mut Core, call: &mut Call) {
    const LINES: &[&str] = &[
        "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ENCODING <key>",
        "    Return the kind of internal representation used in order to store the value",
        "    associated with a <key>.",
        "FREQ <key>",
        "    Return the access frequency index of the <key>.",
        "IDLETIME <key>",
        "    Return the idle time of the <key>, that is the approximated number of",
        "    seconds elapsed since the last access to the key.",
        "REFCOUNT <key>",
        "    Return the number of references of the value associated with the specified",
        "    <key>.",
        "HELP",
        "    Print this help.",
    ];
    call.out.array_len(LINES.len());
    for l in LINES {
        call.out.simple(l.as_bytes());
    }
}

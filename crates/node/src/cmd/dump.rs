//! DUMP and RESTORE (Redis 7.0 semantics). The payload format is Lattice's own, see
//! [`lattice_store::dump`]; only its role is Redis's: an opaque, checksummed value that RESTORE
//! turns back into a key.

use lattice_store::dump::{self as payload, DumpError};
use lattice_store::hash::Limits as HashLimits;
use lattice_store::value::parse_canonical_i64;
use lattice_store::{Hash, Set, Value, ZSet};

use crate::args::{is, parse_i64, NOT_INTEGER};
use crate::cmd::pubsub::{EVENT_GENERIC, EVENT_NEW};
use crate::cmd::set::max_intset_entries;
use crate::command::{spec, Call};
use crate::ctx::{CommandSpec, Core};

const GENERIC: &str = "generic";

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "dump",
        2,
        &["readonly"],
        (1, 1, 1),
        GENERIC,
        "2.6.0",
        "Returns a serialized representation of the value stored at a key.",
        dump,
    ),
    spec(
        "restore",
        -4,
        &["write", "denyoom"],
        (1, 1, 1),
        GENERIC,
        "2.6.0",
        "Creates a key from the serialized representation of a value.",
        restore,
    ),
    // What a Redis Cluster node accepts during a slot migration; Lattice never answers -ASK,
    // but a tool that sends it gets RESTORE's behaviour.
    spec(
        "restore-asking",
        -4,
        &["write", "denyoom", "asking"],
        (1, 1, 1),
        "server",
        "3.0.0",
        "An internal command for migrating keys in a cluster.",
        restore,
    ),
];

const BUSYKEY: &str = "BUSYKEY Target key name already exists.";
const BAD_PAYLOAD: &str = "ERR DUMP payload version or checksum are wrong";
const BAD_FORMAT: &str = "ERR Bad data format";
const BAD_TTL: &str = "ERR Invalid TTL value, must be >= 0";
const BAD_IDLETIME: &str = "ERR Invalid IDLETIME value, must be >= 0";
const BAD_FREQ: &str = "ERR Invalid FREQ value, must be >= 0 and <= 255";

fn dump(core: &mut Core, call: &mut Call) {
    match core.lookup_read(call.arg(1), call.now_ms) {
        Some(e) => {
            let bytes = payload::dump(&e.value);
            call.out.bulk(&bytes);
        }
        None => call.out.null(),
    }
}

/// `RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]`,
/// checking in Redis's order: options, existing key, TTL, payload footer, payload body.
fn restore(core: &mut Core, call: &mut Call) {
    let (mut replace, mut absttl) = (false, false);
    let (mut idle_s, mut freq): (Option<i64>, Option<i64>) = (None, None);
    let mut j = 4;
    while j < call.argc() {
        let opt = call.arg(j);
        let has_value = j + 1 < call.argc();
        if is(opt, "replace") {
            replace = true;
        } else if is(opt, "absttl") {
            absttl = true;
        } else if is(opt, "idletime") && has_value && freq.is_none() {
            // IDLETIME and FREQ exclude each other: the second one is a syntax error.
            match parse_i64(call.arg(j + 1)) {
                None => return call.error(NOT_INTEGER),
                Some(v) if v < 0 => return call.error(BAD_IDLETIME),
                Some(v) => idle_s = Some(v),
            }
            j += 1;
        } else if is(opt, "freq") && has_value && idle_s.is_none() {
            match parse_i64(call.arg(j + 1)) {
                None => return call.error(NOT_INTEGER),
                Some(v) if !(0..=255).contains(&v) => return call.error(BAD_FREQ),
                Some(v) => freq = Some(v),
            }
            j += 1;
        } else {
            return call.syntax_error();
        }
        j += 1;
    }

    let key = call.arg(1);
    let now_ms = call.now_ms;
    if !replace && core.lookup_write(key, now_ms).is_some() {
        return call.error(BUSYKEY);
    }
    let ttl = match parse_i64(call.arg(2)) {
        None => return call.error(NOT_INTEGER),
        Some(t) if t < 0 => return call.error(BAD_TTL),
        Some(t) => t,
    };
    let value = match payload::restore(call.arg(3)) {
        Ok(v) => v,
        Err(DumpError::VersionOrChecksum) => return call.error(BAD_PAYLOAD),
        Err(DumpError::BadFormat) => return call.error(BAD_FORMAT),
    };
    let value = fit_encoding(core, value);

    // A TTL of 0 means no expiry; a relative one counts from now.
    let deadline = match ttl {
        0 => None,
        t if absttl => Some(t),
        t => Some(t.saturating_add(now_ms as i64)),
    };
    if deadline.is_some_and(|when| when <= now_ms as i64) {
        // Already expired: nothing is created, and REPLACE still deletes the old key.
        if replace && core.exists(key, now_ms) {
            core.db.remove(key);
            core.modified(key);
            core.notify(EVENT_GENERIC, "del", key);
        }
        return call.ok();
    }

    core.db
        .insert(key, value, deadline.map(|t| t as u64), now_ms);
    // IDLETIME backdates the access time unless an LFU policy is in force; FREQ sets the LFU
    // counter only under one (Redis's objectSetLRUOrLFU).
    let lfu = core.config.maxmemory_policy.ends_with("lfu");
    if let Some(e) = core.db.get_live(key, now_ms, |_| {}) {
        match (lfu, idle_s, freq) {
            (false, Some(idle), _) => {
                e.set_access_ms(now_ms.saturating_sub((idle as u64).saturating_mul(1000)));
            }
            (true, _, Some(f)) => e.set_lfu(now_ms, f as u8),
            _ => {}
        }
    }
    core.modified(key);
    core.notify(EVENT_NEW, "new", key);
    core.notify(EVENT_GENERIC, "restore", key);
    call.ok();
}

/// Applies the encoding decisions Redis 7.0 makes when it loads a value, under the current
/// configuration: a compact value that has too many entries is converted, and a hash table /
/// skiplist value that would fit the compact form is loaded compact. Everything else (and the
/// contents and order of what is kept) stays as dumped.
fn fit_encoding(core: &Core, value: Value) -> Value {
    match value {
        Value::Hash(h) => {
            let max_entries = core.config.encoding.hash_max_entries;
            let max_value = core.config.encoding.hash_max_value;
            let compact = if h.is_compact() {
                h.len() <= max_entries
            } else {
                h.len() <= max_entries
                    && h.iter()
                        .all(|(f, v)| f.len() <= max_value && v.len() <= max_value)
            };
            if compact == h.is_compact() {
                return Value::Hash(h);
            }
            let limits = HashLimits {
                max_entries: if compact { usize::MAX } else { 0 },
                max_value: usize::MAX,
            };
            let mut out = Hash::new();
            for (f, v) in h.iter() {
                out.insert(f, v, limits);
            }
            Value::Hash(Box::new(out))
        }
        Value::Set(s) => {
            let max = max_intset_entries(core);
            let intset = if s.is_intset() {
                s.len() <= max
            } else {
                s.len() <= max && s.iter().all(|m| parse_canonical_i64(&m).is_some())
            };
            if intset == s.is_intset() {
                return Value::Set(s);
            }
            let limit = if intset { usize::MAX } else { 0 };
            let mut out = Set::new();
            for m in s.iter() {
                out.insert(&m, limit);
            }
            Value::Set(Box::new(out))
        }
        Value::ZSet(mut z) => {
            let max_entries = core.config.encoding.zset_max_entries;
            let max_value = core.config.encoding.zset_max_value;
            if z.encoding() == "listpack" {
                z.convert_if_needed(max_entries, usize::MAX);
                return Value::ZSet(z);
            }
            let fits = z.len() <= max_entries && z.iter().all(|(m, _)| m.len() <= max_value);
            if !fits {
                return Value::ZSet(z);
            }
            let mut out = ZSet::new();
            for (m, s) in z.iter() {
                out.insert(m, s);
            }
            Value::ZSet(Box::new(out))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use lattice_testkit::{Harness, START_MS as T0};

    const OK: &[u8] = b"+OK\r\n";
    const NIL: &[u8] = b"$-1\r\n";

    fn node() -> Harness {
        Harness::with_clients(1)
    }

    /// DUMP of `key` as raw payload bytes.
    fn dump(h: &mut Harness, key: &str) -> Vec<u8> {
        let reply = h.raw(1, &[b"DUMP", key.as_bytes()]);
        let header_end = reply.iter().position(|&b| b == b'\n').expect("bulk header") + 1;
        assert_eq!(reply[0], b'$', "DUMP {key} replied {reply:?}");
        reply[header_end..reply.len() - 2].to_vec()
    }

    /// RESTORE `key` `ttl` `payload` with extra words.
    fn restore(h: &mut Harness, key: &str, ttl: &str, payload: &[u8], extra: &str) -> Vec<u8> {
        let mut args: Vec<&[u8]> = vec![b"RESTORE", key.as_bytes(), ttl.as_bytes(), payload];
        args.extend(extra.split_whitespace().map(str::as_bytes));
        h.raw(1, &args)
    }

    #[track_caller]
    fn same_reply(h: &mut Harness, a: &str, b: &str) {
        let (x, y) = (h.line(1, a), h.line(1, b));
        assert_eq!(x, y, "{a:?} vs {b:?}");
    }

    fn err(msg: &str) -> Vec<u8> {
        format!("-{msg}\r\n").into_bytes()
    }

    #[test]
    fn dump_missing_key_is_nil() {
        let mut h = node();
        h.check("DUMP nokey", NIL);
    }

    #[test]
    fn every_type_round_trips() {
        let mut h = node();
        h.line(1, "SET s hello");
        h.line(1, "SET n 12345");
        h.line(1, "RPUSH l a b c a 1 2");
        h.line(1, "HSET h f1 v1 f2 v2 f3 v3");
        h.line(1, "HDEL h f1");
        h.line(1, "SADD si 5 3 -1");
        h.line(1, "SADD ss x y 7");
        h.line(1, "ZADD z 1.5 a -inf b inf c 0 d -0 e");
        h.line(1, "ZADD zl 1 a 2 b");
        for key in ["s", "n", "l", "h", "si", "ss", "z", "zl"] {
            let p = dump(&mut h, key);
            let copy = format!("{key}-copy");
            assert_eq!(restore(&mut h, &copy, "0", &p, ""), OK, "{key}");
            same_reply(&mut h, &format!("TYPE {key}"), &format!("TYPE {copy}"));
            same_reply(
                &mut h,
                &format!("OBJECT ENCODING {key}"),
                &format!("OBJECT ENCODING {copy}"),
            );
            h.check(&format!("TTL {copy}"), b":-1\r\n");
            // A payload restores the same however often it is dumped.
            assert_eq!(dump(&mut h, &copy), p, "{key}");
        }
        same_reply(&mut h, "GET s", "GET s-copy");
        same_reply(&mut h, "GET n", "GET n-copy");
        same_reply(&mut h, "LRANGE l 0 -1", "LRANGE l-copy 0 -1");
        same_reply(&mut h, "HGETALL h", "HGETALL h-copy");
        same_reply(&mut h, "SMEMBERS si", "SMEMBERS si-copy");
        same_reply(&mut h, "SMEMBERS ss", "SMEMBERS ss-copy");
        same_reply(
            &mut h,
            "ZRANGE z 0 -1 WITHSCORES",
            "ZRANGE z-copy 0 -1 WITHSCORES",
        );
        same_reply(
            &mut h,
            "ZRANGE zl 0 -1 WITHSCORES",
            "ZRANGE zl-copy 0 -1 WITHSCORES",
        );
        h.check("OBJECT ENCODING si-copy", b"$6\r\nintset\r\n");
    }

    #[test]
    fn busykey_and_replace() {
        let mut h = node();
        h.line(1, "SET foo bar1");
        let p1 = dump(&mut h, "foo");
        h.line(1, "SET foo bar2");
        let p2 = dump(&mut h, "foo");
        assert_eq!(
            restore(&mut h, "foo", "0", &p1, ""),
            err("BUSYKEY Target key name already exists.")
        );
        // BUSYKEY is checked before the payload.
        assert_eq!(
            restore(&mut h, "foo", "0", b"...", ""),
            err("BUSYKEY Target key name already exists.")
        );
        h.check("GET foo", b"$4\r\nbar2\r\n");
        assert_eq!(restore(&mut h, "foo", "0", &p1, "REPLACE"), OK);
        h.check("GET foo", b"$4\r\nbar1\r\n");
        // REPLACE onto a key of another type, dropping its TTL.
        h.line(1, "DEL foo");
        h.line(1, "RPUSH foo x");
        h.line(1, "EXPIRE foo 100");
        assert_eq!(restore(&mut h, "foo", "0", &p2, "replace"), OK);
        h.check("GET foo", b"$4\r\nbar2\r\n");
        h.check("TTL foo", b":-1\r\n");
    }

    #[test]
    fn ttls() {
        let mut h = node();
        h.line(1, "SET foo bar");
        let p = dump(&mut h, "foo");
        h.line(1, "DEL foo");
        assert_eq!(restore(&mut h, "foo", "5000", &p, ""), OK);
        h.check("PTTL foo", b":5000\r\n");
        assert_eq!(restore(&mut h, "big", "2569591501", &p, ""), OK);
        h.check("PTTL big", b":2569591501\r\n");
        let at = (T0 + 3000).to_string();
        assert_eq!(restore(&mut h, "abs", &at, &p, "ABSTTL"), OK);
        h.check("PTTL abs", b":3000\r\n");
        h.check("PEXPIRETIME abs", format!(":{at}\r\n").as_bytes());
        // The key expires like any other.
        h.now_ms += 3001;
        h.check("GET abs", NIL);
    }

    #[test]
    fn absttl_in_the_past() {
        let mut h = node();
        h.line(1, "SET foo bar");
        let p = dump(&mut h, "foo");
        let past = (T0 - 3000).to_string();
        // Without REPLACE on a free key: OK, nothing created.
        assert_eq!(restore(&mut h, "new", &past, &p, "ABSTTL"), OK);
        h.check("EXISTS new", b":0\r\n");
        // The deadline equal to now is already past, as for EXPIREAT.
        assert_eq!(restore(&mut h, "new", &T0.to_string(), &p, "ABSTTL"), OK);
        h.check("EXISTS new", b":0\r\n");
        // With REPLACE: the old key is deleted.
        assert_eq!(restore(&mut h, "foo", &past, &p, "ABSTTL REPLACE"), OK);
        h.check("EXISTS foo", b":0\r\n");
        // Without REPLACE on an existing key: BUSYKEY still wins.
        h.line(1, "SET foo bar");
        assert_eq!(
            restore(&mut h, "foo", &past, &p, "ABSTTL"),
            err("BUSYKEY Target key name already exists.")
        );
    }

    #[test]
    fn option_and_argument_errors() {
        let mut h = node();
        h.line(1, "SET foo bar");
        let p = dump(&mut h, "foo");
        let syntax = err("ERR syntax error");
        let not_int = err("ERR value is not an integer or out of range");
        assert_eq!(restore(&mut h, "k", "0", &p, "invalid-option"), syntax);
        assert_eq!(restore(&mut h, "k", "0", &p, "IDLETIME"), syntax);
        assert_eq!(restore(&mut h, "k", "0", &p, "FREQ"), syntax);
        assert_eq!(restore(&mut h, "k", "0", &p, "IDLETIME 1 FREQ 1"), syntax);
        assert_eq!(restore(&mut h, "k", "0", &p, "FREQ 1 IDLETIME 1"), syntax);
        assert_eq!(restore(&mut h, "k", "0", &p, "IDLETIME x"), not_int);
        assert_eq!(restore(&mut h, "k", "0", &p, "FREQ x"), not_int);
        assert_eq!(
            restore(&mut h, "k", "0", &p, "IDLETIME -1"),
            err("ERR Invalid IDLETIME value, must be >= 0")
        );
        assert_eq!(
            restore(&mut h, "k", "0", &p, "FREQ 256"),
            err("ERR Invalid FREQ value, must be >= 0 and <= 255")
        );
        assert_eq!(
            restore(&mut h, "k", "0", &p, "FREQ -1"),
            err("ERR Invalid FREQ value, must be >= 0 and <= 255")
        );
        assert_eq!(restore(&mut h, "k", "x", &p, ""), not_int);
        assert_eq!(
            restore(&mut h, "k", "-1", &p, ""),
            err("ERR Invalid TTL value, must be >= 0")
        );
        // The TTL is checked before the payload.
        assert_eq!(
            restore(&mut h, "k", "-1", b"junk", ""),
            err("ERR Invalid TTL value, must be >= 0")
        );
        h.check(
            "RESTORE k 0",
            &err("ERR wrong number of arguments for 'restore' command"),
        );
        h.check("EXISTS k", b":0\r\n");
        assert_eq!(restore(&mut h, "k", "0", &p, "FREQ 255 REPLACE ABSTTL"), OK);
        assert_eq!(
            restore(&mut h, "k", "0", &p, "replace idletime 0 idletime 5"),
            OK
        );
    }

    #[test]
    fn corrupt_payloads() {
        let mut h = node();
        h.line(1, "RPUSH l a b c");
        let p = dump(&mut h, "l");
        let wrong = err("ERR DUMP payload version or checksum are wrong");
        assert_eq!(restore(&mut h, "k", "0", b"...", ""), wrong);
        assert_eq!(restore(&mut h, "k", "0", b"", ""), wrong);
        assert_eq!(restore(&mut h, "k", "0", &p[..p.len() - 1], ""), wrong);
        for i in 0..p.len() {
            let mut bad = p.clone();
            bad[i] ^= 0x20;
            assert_eq!(restore(&mut h, "k", "0", &bad, ""), wrong, "byte {i}");
        }
        // A body that passes the footer check but is not a value.
        let mut body = vec![2u8, 0];
        body.extend_from_slice(&lattice_store::dump::FORMAT_VERSION.to_le_bytes());
        let crc = lattice_store::dump::crc64(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(
            restore(&mut h, "k", "0", &body, ""),
            err("ERR Bad data format")
        );
        h.check("EXISTS k", b":0\r\n");
    }

    #[test]
    fn idletime_sets_the_access_time() {
        let mut h = node();
        h.line(1, "SET foo bar");
        let p = dump(&mut h, "foo");
        assert_eq!(restore(&mut h, "k", "0", &p, "IDLETIME 1000"), OK);
        h.check("OBJECT IDLETIME k", b":1000\r\n");
        assert_eq!(
            restore(&mut h, "k2", "0", &p, "IDLETIME 9223372036854775807"),
            OK
        );
        h.check("GET k2", b"$3\r\nbar\r\n");
    }

    #[test]
    fn restore_applies_the_configured_limits() {
        let mut h = node();
        h.line(1, "HSET h a 1 b 2 c 3");
        h.line(1, "SADD s 1 2 3");
        h.line(1, "ZADD z 1 a 2 b 3 c");
        let (ph, ps, pz) = (dump(&mut h, "h"), dump(&mut h, "s"), dump(&mut h, "z"));
        h.line(1, "CONFIG SET hash-max-listpack-entries 2");
        h.line(1, "CONFIG SET set-max-intset-entries 2");
        h.line(1, "CONFIG SET zset-max-listpack-entries 2");
        assert_eq!(restore(&mut h, "h2", "0", &ph, ""), OK);
        assert_eq!(restore(&mut h, "s2", "0", &ps, ""), OK);
        assert_eq!(restore(&mut h, "z2", "0", &pz, ""), OK);
        h.check("OBJECT ENCODING h2", b"$9\r\nhashtable\r\n");
        h.check("OBJECT ENCODING s2", b"$9\r\nhashtable\r\n");
        h.check("OBJECT ENCODING z2", b"$8\r\nskiplist\r\n");
        same_reply(&mut h, "HGETALL h", "HGETALL h2");
        same_reply(
            &mut h,
            "ZRANGE z 0 -1 WITHSCORES",
            "ZRANGE z2 0 -1 WITHSCORES",
        );
        // And back: big encodings that fit the (restored) limits load compact.
        let (ph2, ps2, pz2) = (dump(&mut h, "h2"), dump(&mut h, "s2"), dump(&mut h, "z2"));
        h.line(1, "CONFIG SET hash-max-listpack-entries 512");
        h.line(1, "CONFIG SET set-max-intset-entries 512");
        h.line(1, "CONFIG SET zset-max-listpack-entries 128");
        assert_eq!(restore(&mut h, "h3", "0", &ph2, ""), OK);
        assert_eq!(restore(&mut h, "s3", "0", &ps2, ""), OK);
        assert_eq!(restore(&mut h, "z3", "0", &pz2, ""), OK);
        h.check("OBJECT ENCODING h3", b"$8\r\nlistpack\r\n");
        h.check("OBJECT ENCODING s3", b"$6\r\nintset\r\n");
        h.check("OBJECT ENCODING z3", b"$8\r\nlistpack\r\n");
        same_reply(&mut h, "HGETALL h", "HGETALL h3");
        same_reply(&mut h, "SMEMBERS s", "SMEMBERS s3");
        same_reply(
            &mut h,
            "ZRANGE z 0 -1 WITHSCORES",
            "ZRANGE z3 0 -1 WITHSCORES",
        );
    }

    #[test]
    fn restore_touches_watched_keys() {
        let mut h = node();
        h.line(1, "SET foo bar");
        let p = dump(&mut h, "foo");
        h.line(1, "WATCH w");
        assert_eq!(restore(&mut h, "w", "0", &p, ""), OK);
        h.line(1, "MULTI");
        h.line(1, "PING");
        h.check("EXEC", b"*-1\r\n");
    }

    #[test]
    fn command_info() {
        let mut h = node();
        let text = h.line(1, "COMMAND INFO dump restore");
        assert!(text.contains("readonly"), "{text}");
        assert!(text.contains("denyoom"), "{text}");
    }
}

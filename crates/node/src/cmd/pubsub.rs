//! Pub/Sub: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, PUBSUB, and keyspace
//! notifications (`notify-keyspace-events`).
//!
//! RESP2 subscribers are restricted to pub/sub commands (enforced by the dispatcher); RESP3
//! subscribers receive messages as push frames and may run any command.

use bytes::Bytes;
use lattice_resp::ReplyWriter;
use lattice_store::glob_match;

use crate::client::ConnId;
use crate::command::{spec, Call, CommandSpec};
use crate::node::Core;

const PUBSUB: &str = "pubsub";

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "subscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        (0, 0, 0),
        PUBSUB,
        "2.0.0",
        "Listens for messages published to channels.",
        subscribe,
    ),
    spec(
        "unsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        (0, 0, 0),
        PUBSUB,
        "2.0.0",
        "Stops listening to messages posted to channels.",
        unsubscribe,
    ),
    spec(
        "psubscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        (0, 0, 0),
        PUBSUB,
        "2.0.0",
        "Listens for messages published to channels that match one or more patterns.",
        psubscribe,
    ),
    spec(
        "punsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        (0, 0, 0),
        PUBSUB,
        "2.0.0",
        "Stops listening to messages published to channels that match one or more patterns.",
        punsubscribe,
    ),
    spec(
        "publish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        (0, 0, 0),
        PUBSUB,
        "2.0.0",
        "Posts a message to a channel.",
        publish_cmd,
    ),
    CommandSpec {
        name: "pubsub",
        arity: -2,
        flags: &[],
        keys: (0, 0, 0),
        group: PUBSUB,
        summary: "A container for Pub/Sub commands.",
        since: "2.8.0",
        handler: None,
        subcommands: &[
            spec(
                "pubsub|channels",
                -2,
                &["pubsub", "loading", "stale"],
                (0, 0, 0),
                PUBSUB,
                "2.8.0",
                "Returns the active channels.",
                pubsub_channels,
            ),
            spec(
                "pubsub|numsub",
                -2,
                &["pubsub", "loading", "stale"],
                (0, 0, 0),
                PUBSUB,
                "2.8.0",
                "Returns a count of subscribers to channels.",
                pubsub_numsub,
            ),
            spec(
                "pubsub|numpat",
                2,
                &["pubsub", "loading", "stale"],
                (0, 0, 0),
                PUBSUB,
                "2.8.0",
                "Returns a count of unique pattern subscriptions.",
                pubsub_numpat,
            ),
            spec(
                "pubsub|help",
                2,
                &["loading", "stale"],
                (0, 0, 0),
                PUBSUB,
                "6.2.0",
                "Returns helpful text about the different subcommands.",
                pubsub_help,
            ),
        ],
    },
];

/// A subscriber whose unread output passes this is disconnected (Redis's default pubsub
/// client-output-buffer-limit hard limit), so one slow reader cannot exhaust memory. This
/// counts what the node still holds; output it has handed to the driver is the driver's to
/// bound (the server's event loop applies the same limit, `PUSH_BACKLOG_LIMIT_BYTES`).
const SUBSCRIBER_OUTPUT_LIMIT: usize = 32 * 1024 * 1024;

// Event classes of `notify-keyspace-events`, as bits.
pub const EVENT_KEYSPACE: u32 = 1 << 0;
pub const EVENT_KEYEVENT: u32 = 1 << 1;
pub const EVENT_GENERIC: u32 = 1 << 2;
pub const EVENT_STRING: u32 = 1 << 3;
pub const EVENT_LIST: u32 = 1 << 4;
pub const EVENT_SET: u32 = 1 << 5;
pub const EVENT_HASH: u32 = 1 << 6;
pub const EVENT_ZSET: u32 = 1 << 7;
pub const EVENT_EXPIRED: u32 = 1 << 8;
pub const EVENT_EVICTED: u32 = 1 << 9;
pub const EVENT_STREAM: u32 = 1 << 10;
pub const EVENT_KEY_MISS: u32 = 1 << 11;
pub const EVENT_MODULE: u32 = 1 << 12;
pub const EVENT_NEW: u32 = 1 << 13;
const EVENT_ALL: u32 = EVENT_GENERIC
    | EVENT_STRING
    | EVENT_LIST
    | EVENT_SET
    | EVENT_HASH
    | EVENT_ZSET
    | EVENT_EXPIRED
    | EVENT_EVICTED
    | EVENT_STREAM
    | EVENT_MODULE;

/// Parses a `notify-keyspace-events` value; `None` for an unknown class character.
pub fn parse_event_classes(s: &str) -> Option<u32> {
    let mut flags = 0;
    for c in s.chars() {
        flags |= match c {
            'A' => EVENT_ALL,
            'g' => EVENT_GENERIC,
            '$' => EVENT_STRING,
            'l' => EVENT_LIST,
            's' => EVENT_SET,
            'h' => EVENT_HASH,
            'z' => EVENT_ZSET,
            'x' => EVENT_EXPIRED,
            'e' => EVENT_EVICTED,
            'K' => EVENT_KEYSPACE,
            'E' => EVENT_KEYEVENT,
            't' => EVENT_STREAM,
            'm' => EVENT_KEY_MISS,
            'd' => EVENT_MODULE,
            'n' => EVENT_NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// The canonical text of a set of event classes, as CONFIG GET shows it (Redis's order, `A`
/// for all the type classes).
pub fn event_classes_to_string(flags: u32) -> String {
    let mut s = String::new();
    if flags & EVENT_ALL == EVENT_ALL {
        s.push('A');
    } else {
        for (bit, c) in [
            (EVENT_GENERIC, 'g'),
            (EVENT_STRING, '$'),
            (EVENT_LIST, 'l'),
            (EVENT_SET, 's'),
            (EVENT_HASH, 'h'),
            (EVENT_ZSET, 'z'),
            (EVENT_EXPIRED, 'x'),
            (EVENT_EVICTED, 'e'),
            (EVENT_STREAM, 't'),
            (EVENT_MODULE, 'd'),
        ] {
            if flags & bit != 0 {
                s.push(c);
            }
        }
    }
    // `n` is not part of `A`, so it is kept even then: the string is also what the flags are
    // read back from.
    for (bit, c) in [
        (EVENT_NEW, 'n'),
        (EVENT_KEYSPACE, 'K'),
        (EVENT_KEYEVENT, 'E'),
        (EVENT_KEY_MISS, 'm'),
    ] {
        if flags & bit != 0 {
            s.push(c);
        }
    }
    s
}

impl Core {
    /// Publishes a keyspace notification for `key` if `class` is enabled, like Redis's
    /// `notifyKeyspaceEvent(class, event, key)`. Write commands call it after each change.
    pub fn notify(&mut self, class: u32, event: &str, key: &[u8]) {
        let flags = self.config.notify_keyspace_events;
        if flags & class == 0 {
            return;
        }
        if flags & EVENT_KEYSPACE != 0 {
            let mut ch = b"__keyspace@0__:".to_vec();
            ch.extend_from_slice(key);
            self.publish(&ch, event.as_bytes());
        }
        if flags & EVENT_KEYEVENT != 0 {
            let mut ch = b"__keyevent@0__:".to_vec();
            ch.extend_from_slice(event.as_bytes());
            self.publish(&ch, key);
        }
    }

    /// Delivers `message` to subscribers of `channel` and of matching patterns; returns how
    /// many received it.
    /// PUBLISH: local subscribers now, and every peer's subscribers (replication).
    pub fn publish(&mut self, channel: &[u8], message: &[u8]) -> usize {
        if let Some(r) = self.repl.as_mut() {
            r.publish(channel, message);
        }
        self.deliver_publish(channel, message)
    }

    /// Delivers a message to this node's subscribers; returns how many received it.
    pub fn deliver_publish(&mut self, channel: &[u8], message: &[u8]) -> usize {
        let mut receivers = 0;
        let direct: Vec<ConnId> = self
            .channels
            .get(channel)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        for conn in direct {
            self.deliver(conn, |w| {
                w.push_len(3);
                w.bulk(b"message");
                w.bulk(channel);
                w.bulk(message);
            });
            receivers += 1;
        }
        let matching: Vec<(Bytes, ConnId)> = self
            .patterns
            .iter()
            .filter(|(p, _)| glob_match(p, channel, false))
            .flat_map(|(p, subs)| subs.iter().map(move |c| (p.clone(), *c)))
            .collect();
        for (pattern, conn) in matching {
            self.deliver(conn, |w| {
                w.push_len(4);
                w.bulk(b"pmessage");
                w.bulk(&pattern);
                w.bulk(channel);
                w.bulk(message);
            });
            receivers += 1;
        }
        receivers
    }

    fn deliver(&mut self, conn: ConnId, f: impl FnOnce(&mut ReplyWriter)) {
        self.write_to(conn, f);
        if self
            .clients
            .get(&conn)
            .is_some_and(|c| c.out.len() > SUBSCRIBER_OUTPUT_LIMIT)
        {
            self.close_client(conn);
        }
    }
}

fn subscription_count(core: &Core, conn: ConnId) -> i64 {
    core.clients
        .get(&conn)
        .map_or(0, |c| c.subscriptions() as i64)
}

fn subscribe_generic(core: &mut Core, call: &mut Call, pattern: bool) {
    let conn = call.conn;
    for ch in &call.args[1..] {
        let Some(c) = core.clients.get_mut(&conn) else {
            return;
        };
        let added = if pattern {
            c.patterns.insert(ch.clone())
        } else {
            c.channels.insert(ch.clone())
        };
        if added {
            let map = if pattern {
                &mut core.patterns
            } else {
                &mut core.channels
            };
            map.entry(ch.clone()).or_default().insert(conn);
        }
        let count = subscription_count(core, conn);
        let kind: &[u8] = if pattern { b"psubscribe" } else { b"subscribe" };
        confirm(core, call, kind, Some(ch), count);
    }
}

/// Writes a (un)subscribe confirmation. Redis sends these (like messages) as pushes that
/// CLIENT REPLY OFF/SKIP do not silence, in RESP2 as well as RESP3, so they go out through
/// the connection's push path instead of the command's reply.
fn confirm(core: &mut Core, call: &mut Call, kind: &[u8], name: Option<&[u8]>, count: i64) {
    core.write_to(call.conn, |w: &mut ReplyWriter| {
        w.push_len(3);
        w.bulk(kind);
        match name {
            Some(n) => w.bulk(n),
            None => w.null(),
        }
        w.integer(count);
    });
}

fn subscribe(core: &mut Core, call: &mut Call) {
    subscribe_generic(core, call, false);
}

fn psubscribe(core: &mut Core, call: &mut Call) {
    subscribe_generic(core, call, true);
}

/// Removes one subscription; true if it existed.
fn remove_subscription(core: &mut Core, conn: ConnId, name: &Bytes, pattern: bool) -> bool {
    let Some(c) = core.clients.get_mut(&conn) else {
        return false;
    };
    let removed = if pattern {
        c.patterns.remove(name)
    } else {
        c.channels.remove(name)
    };
    let map = if pattern {
        &mut core.patterns
    } else {
        &mut core.channels
    };
    if let Some(set) = map.get_mut(name) {
        set.remove(&conn);
        if set.is_empty() {
            map.remove(name);
        }
    }
    removed
}

fn unsubscribe_generic(core: &mut Core, call: &mut Call, pattern: bool) {
    let conn = call.conn;
    let kind: &[u8] = if pattern {
        b"punsubscribe"
    } else {
        b"unsubscribe"
    };
    let names: Vec<Bytes> = if call.argc() > 1 {
        call.args[1..].to_vec()
    } else {
        match core.clients.get(&conn) {
            Some(c) if pattern => c.patterns.iter().cloned().collect(),
            Some(c) => c.channels.iter().cloned().collect(),
            None => Vec::new(),
        }
    };
    if names.is_empty() {
        let count = subscription_count(core, conn);
        confirm(core, call, kind, None, count);
        return;
    }
    for name in names {
        remove_subscription(core, conn, &name, pattern);
        let count = subscription_count(core, conn);
        confirm(core, call, kind, Some(&name), count);
    }
}

fn unsubscribe(core: &mut Core, call: &mut Call) {
    unsubscribe_generic(core, call, false);
}

fn punsubscribe(core: &mut Core, call: &mut Call) {
    unsubscribe_generic(core, call, true);
}

/// Drops every subscription of `conn` without replying (disconnect, RESET).
pub fn unsubscribe_all(core: &mut Core, conn: ConnId) {
    let Some(c) = core.clients.get(&conn) else {
        return;
    };
    let channels: Vec<Bytes> = c.channels.iter().cloned().collect();
    let patterns: Vec<Bytes> = c.patterns.iter().cloned().collect();
    for ch in channels {
        remove_subscription(core, conn, &ch, false);
    }
    for p in patterns {
        remove_subscription(core, conn, &p, true);
    }
}

fn publish_cmd(core: &mut Core, call: &mut Call) {
    let n = core.publish(call.arg(1), call.arg(2));
    call.out.integer(n as i64);
}

fn pubsub_channels(core: &mut Core, call: &mut Call) {
    if call.argc() > 3 {
        return call.error("ERR wrong number of arguments for 'pubsub|channels' command");
    }
    let pattern = call.args.get(2);
    let names: Vec<&Bytes> = core
        .channels
        .keys()
        .filter(|ch| pattern.is_none_or(|p| glob_match(p, ch, false)))
        .collect();
    call.out.array_len(names.len());
    for n in names {
        call.out.bulk(n);
    }
}

fn pubsub_numsub(core: &mut Core, call: &mut Call) {
    let names = &call.args[2..];
    call.out.array_len(names.len() * 2);
    for n in names {
        call.out.bulk(n);
        call.out
            .integer(core.channels.get(n).map_or(0, |s| s.len()) as i64);
    }
}

fn pubsub_numpat(core: &mut Core, call: &mut Call) {
    call.out.integer(core.patterns.len() as i64);
}

fn pubsub_help(_core: &mut Core, call: &mut Call) {
    const LINES: &[&str] = &[
        "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CHANNELS [<pattern>]",
        "    Return the currently active channels matching a <pattern> (default: '*').",
        "NUMPAT",
        "    Return number of subscriptions to patterns.",
        "NUMSUB [<channel> ...]",
        "    Return the number of subscribers for the specified channels, excluding",
        "    pattern subscriptions(default: no channels).",
        "HELP",
        "    Print this help.",
    ];
    call.out.array_len(LINES.len());
    for l in LINES {
        call.out.simple(l.as_bytes());
    }
}

//! Pub/Sub: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, PUBSUB, and keyspace
//! notifications (`notify-keyspace-events`).
//!
//! RESP2 subscribers are restricted to pub/sub commands (enforced by the dispatcher); RESP3
//! subscribers receive messages as push frames and may run any command.

use bytes::Bytes;
use lattice_resp::ReplyWriter;
use lattice_store::glob_match;

use crate::client::ConnId;
use crate::command::{container, spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};

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
    )
    .with(Flag::AllowedWhileSubscribed),
    spec(
        "unsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        (0, 0, 0),
        PUBSUB,
        "2.0.0",
        "Stops listening to messages posted to channels.",
        unsubscribe,
    )
    .with(Flag::AllowedWhileSubscribed),
    spec(
        "psubscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        (0, 0, 0),
        PUBSUB,
        "2.0.0",
        "Listens for messages published to channels that match one or more patterns.",
        psubscribe,
    )
    .with(Flag::AllowedWhileSubscribed),
    spec(
        "punsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        (0, 0, 0),
        PUBSUB,
        "2.0.0",
        "Stops listening to messages published to channels that match one or more patterns.",
        punsubscribe,
    )
    .with(Flag::AllowedWhileSubscribed),
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
    container(
        "pubsub",
        -2,
        PUBSUB,
        "2.8.0",
        "A container for Pub/Sub commands.",
        &[
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
    ),
];

pub use crate::events::*;

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

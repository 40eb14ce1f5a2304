//! Pub/Sub: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH, PUBSUB, and keyspace
//! notifications (`notify-keyspace-events`).
//!
//! RESP2 subscribers are restricted to pub/sub commands (enforced by the dispatcher); RESP3
//! subscribers receive messages as push frames and may run any command.

use std::collections::{BTreeMap, BTreeSet};

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
    )
    // Redis flags it may-replicate (CLIENT PAUSE WRITE holds it) without showing the flag in
    // COMMAND INFO.
    .with(Flag::MayReplicate),
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
                "pubsub|shardchannels",
                -2,
                &["pubsub", "loading", "stale"],
                (0, 0, 0),
                PUBSUB,
                "7.0.0",
                "Returns the active shard channels.",
                shard_channels,
            ),
            spec(
                "pubsub|shardnumsub",
                -2,
                &["pubsub", "loading", "stale"],
                (0, 0, 0),
                PUBSUB,
                "7.0.0",
                "Returns the count of subscribers of shard channels.",
                shard_numsub,
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

/// The three kinds of subscription. They share the bookkeeping (the client's set and the
/// node's index of subscribers) and differ in their names and in what a confirmation counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Channel,
    Pattern,
    /// Sharded pub/sub (`crate::cmd::shard_pubsub`).
    Shard,
}

impl Kind {
    fn words(self) -> (&'static [u8], &'static [u8]) {
        match self {
            Kind::Channel => (b"subscribe", b"unsubscribe"),
            Kind::Pattern => (b"psubscribe", b"punsubscribe"),
            Kind::Shard => (b"ssubscribe", b"sunsubscribe"),
        }
    }

    fn of_client(self, c: &mut crate::client::Client) -> &mut BTreeSet<Bytes> {
        match self {
            Kind::Channel => &mut c.channels,
            Kind::Pattern => &mut c.patterns,
            Kind::Shard => &mut c.shard_channels,
        }
    }

    fn index(self, core: &mut Core) -> &mut BTreeMap<Bytes, BTreeSet<ConnId>> {
        match self {
            Kind::Channel => &mut core.channels,
            Kind::Pattern => &mut core.patterns,
            Kind::Shard => &mut core.shard_channels,
        }
    }

    /// What a confirmation counts, as Redis 7.0: channels and patterns together, shard
    /// channels apart.
    fn count(self, core: &Core, conn: ConnId) -> i64 {
        core.clients.get(&conn).map_or(0, |c| match self {
            Kind::Channel | Kind::Pattern => c.channels.len() + c.patterns.len(),
            Kind::Shard => c.shard_channels.len(),
        }) as i64
    }
}

pub(crate) fn subscribe_generic(core: &mut Core, call: &mut Call, kind: Kind) {
    let conn = call.conn;
    for ch in &call.args[1..] {
        let Some(c) = core.clients.get_mut(&conn) else {
            return;
        };
        if kind.of_client(c).insert(ch.clone()) {
            kind.index(core).entry(ch.clone()).or_default().insert(conn);
        }
        confirm(core, conn, kind, kind.words().0, Some(ch));
    }
}

/// Writes a (un)subscribe confirmation. Redis sends these (like messages) as pushes that
/// CLIENT REPLY OFF/SKIP do not silence, in RESP2 as well as RESP3, so they go out through
/// the connection's push path instead of the command's reply.
fn confirm(core: &mut Core, conn: ConnId, kind: Kind, word: &[u8], name: Option<&[u8]>) {
    let count = kind.count(core, conn);
    core.write_to(conn, |w: &mut ReplyWriter| {
        w.push_len(3);
        w.bulk(word);
        match name {
            Some(n) => w.bulk(n),
            None => w.null(),
        }
        w.integer(count);
    });
}

fn subscribe(core: &mut Core, call: &mut Call) {
    subscribe_generic(core, call, Kind::Channel);
}

fn psubscribe(core: &mut Core, call: &mut Call) {
    subscribe_generic(core, call, Kind::Pattern);
}

/// Removes one subscription; true if it existed.
fn remove_subscription(core: &mut Core, conn: ConnId, name: &Bytes, kind: Kind) -> bool {
    let Some(c) = core.clients.get_mut(&conn) else {
        return false;
    };
    let removed = kind.of_client(c).remove(name);
    let index = kind.index(core);
    if let Some(set) = index.get_mut(name) {
        set.remove(&conn);
        if set.is_empty() {
            index.remove(name);
        }
    }
    removed
}

/// The client's subscriptions of `kind`.
fn subscriptions_of(core: &mut Core, conn: ConnId, kind: Kind) -> Vec<Bytes> {
    core.clients
        .get_mut(&conn)
        .map(|c| kind.of_client(c).iter().cloned().collect())
        .unwrap_or_default()
}

pub(crate) fn unsubscribe_generic(core: &mut Core, call: &mut Call, kind: Kind) {
    let conn = call.conn;
    let word = kind.words().1;
    let names: Vec<Bytes> = if call.argc() > 1 {
        call.args[1..].to_vec()
    } else {
        subscriptions_of(core, conn, kind)
    };
    if names.is_empty() {
        return confirm(core, conn, kind, word, None);
    }
    for name in names {
        remove_subscription(core, conn, &name, kind);
        confirm(core, conn, kind, word, Some(&name));
    }
}

fn unsubscribe(core: &mut Core, call: &mut Call) {
    unsubscribe_generic(core, call, Kind::Channel);
}

fn punsubscribe(core: &mut Core, call: &mut Call) {
    unsubscribe_generic(core, call, Kind::Pattern);
}

/// Drops every subscription of `conn` without replying (disconnect, RESET).
pub fn unsubscribe_all(core: &mut Core, conn: ConnId) {
    for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
        for name in subscriptions_of(core, conn, kind) {
            remove_subscription(core, conn, &name, kind);
        }
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
        "SHARDCHANNELS [<pattern>]",
        "    Return the currently active shard level channels matching a <pattern> (default: '*').",
        "SHARDNUMSUB [<shardchannel> ...]",
        "    Return the number of subscribers for the specified shard level channel(s)",
        "HELP",
        "    Print this help.",
    ];
    call.out.array_len(LINES.len());
    for l in LINES {
        call.out.simple(l.as_bytes());
    }
}

fn shard_channels(core: &mut Core, call: &mut Call) {
    if call.argc() > 3 {
        return call.subcommand_syntax_error();
    }
    let pattern = call.args.get(2);
    let names: Vec<&Bytes> = core
        .shard_channels
        .keys()
        .filter(|ch| pattern.is_none_or(|p| lattice_store::glob_match(p, ch, false)))
        .collect();
    call.out.array_len(names.len());
    for n in names {
        call.out.bulk(n);
    }
}

fn shard_numsub(core: &mut Core, call: &mut Call) {
    let names = &call.args[2..];
    call.out.array_len(names.len() * 2);
    for n in names {
        call.out.bulk(n);
        call.out
            .integer(core.shard_channels.get(n).map_or(0, |s| s.len()) as i64);
    }
}

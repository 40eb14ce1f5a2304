//! Sharded pub/sub: SSUBSCRIBE, SUNSUBSCRIBE, SPUBLISH (PUBSUB SHARDCHANNELS and SHARDNUMSUB
//! are in `crate::cmd::pubsub`'s container).
//!
//! Shard channels are a namespace of their own, as in Redis 7.0: SPUBLISH reaches only
//! SSUBSCRIBE subscribers (never SUBSCRIBE's or patterns'), messages arrive as `smessage`, and
//! a (un)subscribe confirmation counts the client's shard channels only. A client with shard
//! subscriptions is in subscribed mode like any other subscriber (RESP2 clients may then only
//! run the pub/sub commands).
//!
//! In a cluster, the channel names its slot as a key does (COMMAND INFO gives the channel as
//! a key, so a client library routes it as Redis Cluster's do), and SPUBLISH goes to the
//! subscribers of every replica of the data, which here is every peer, best effort, as
//! PUBLISH does (docs/SEMANTICS.md).

use crate::client::ConnId;
use crate::cmd::pubsub::{subscribe_generic, unsubscribe_generic, Kind};
use crate::command::{spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};

const PUBSUB: &str = "pubsub";

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "ssubscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        (1, -1, 1),
        PUBSUB,
        "7.0.0",
        "Listens for messages published to shard channels.",
        ssubscribe,
    )
    .with(Flag::AllowedWhileSubscribed),
    spec(
        "sunsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        (1, -1, 1),
        PUBSUB,
        "7.0.0",
        "Stops listening to messages posted to shard channels.",
        sunsubscribe,
    )
    .with(Flag::AllowedWhileSubscribed),
    spec(
        "spublish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        (1, 1, 1),
        PUBSUB,
        "7.0.0",
        "Posts a message to a shard channel.",
        spublish,
    )
    .with(Flag::MayReplicate),
];

fn ssubscribe(core: &mut Core, call: &mut Call) {
    subscribe_generic(core, call, Kind::Shard);
}

fn sunsubscribe(core: &mut Core, call: &mut Call) {
    unsubscribe_generic(core, call, Kind::Shard);
}

fn spublish(core: &mut Core, call: &mut Call) {
    if let Some(r) = core.repl.as_mut() {
        r.publish(call.arg(1), call.arg(2), true);
    }
    let n = core.deliver_shard_publish(call.arg(1), call.arg(2));
    call.out.integer(n as i64);
}

impl Core {
    /// Delivers a shard message to this node's shard subscribers; returns how many got it.
    pub fn deliver_shard_publish(&mut self, channel: &[u8], message: &[u8]) -> usize {
        let subscribers: Vec<ConnId> = self
            .shard_channels
            .get(channel)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        for &conn in &subscribers {
            self.deliver(conn, |w| {
                w.push_len(3);
                w.bulk(b"smessage");
                w.bulk(channel);
                w.bulk(message);
            });
        }
        subscribers.len()
    }

    pub(crate) fn check_shard_invariants(&self) {
        for (ch, subs) in &self.shard_channels {
            assert!(!subs.is_empty(), "a shard channel without subscribers kept");
            for conn in subs {
                assert!(
                    self.clients
                        .get(conn)
                        .is_some_and(|c| c.shard_channels.contains(ch)),
                    "a shard subscriber that does not know it"
                );
            }
        }
        for (id, c) in self.clients.iter() {
            for ch in &c.shard_channels {
                assert!(self.shard_channels.get(ch).is_some_and(|s| s.contains(id)));
            }
        }
    }
}

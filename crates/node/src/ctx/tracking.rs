//! Client-side caching on a command's behalf: remembering what tracking clients read, and
//! telling them when it changes (the state is `crate::tracking`, the commands are
//! `crate::cmd::tracking`).
//!
//! Invalidations follow Redis 7.0: RESP3 clients get an `invalidate` push; a RESP2 client can
//! only be told through a redirect to a connection in pub/sub mode, as a message on
//! `__redis__:invalidate`. A change made by the very client that is told waits until its
//! reply has been written, so the push never splits a reply. Changes merged from peers
//! invalidate like local ones: they reach this hook through `touched_by_peer`.

use bytes::Bytes;
use lattice_resp::Protocol;

use super::Core;
use crate::client::ClientTracking;
use crate::client::ConnId;
use crate::command::{Call, Flag};
use crate::ctx::CommandSpec;
use crate::tracking::Invalidated;

/// The pub/sub channel a RESP2 redirect target receives invalidations on.
pub const INVALIDATE_CHANNEL: &[u8] = b"__redis__:invalidate";

/// Keys one eviction round may evict for each round in a row that ended over the limit.
const EVICTION_EFFORT: usize = 100;

impl Core {
    /// A client's tracking options, if it has tracking on.
    pub(crate) fn tracking_of(&self, conn: ConnId) -> Option<&ClientTracking> {
        self.clients.get(&conn)?.tracking.as_deref()
    }

    /// After a command ran for `call.conn`: a read-only command remembers its keys for the
    /// client when it tracks reads. Scripts remember their declared keys instead, once they
    /// run a read (`cmd::script`); the read-only script commands themselves do not.
    pub(crate) fn tracking_after_command(&mut self, spec: &'static CommandSpec, call: &Call) {
        if self.tracking.clients == 0
            || call.in_script
            || !spec.has(Flag::ReadOnly)
            || spec.has(Flag::PubSub)
            || matches!(spec.name, "eval_ro" | "evalsha_ro" | "fcall_ro")
        {
            return;
        }
        self.remember_keys(call.conn, spec, call.args);
    }

    /// Remembers the keys of `args` for `conn` if it tracks reads. A script that ran a read
    /// passes its own command line here: its declared keys are remembered, as Redis does.
    pub(crate) fn remember_keys(
        &mut self,
        conn: ConnId,
        spec: &'static CommandSpec,
        args: &[Bytes],
    ) {
        if !self
            .tracking_of(conn)
            .is_some_and(ClientTracking::remembers_reads)
        {
            return;
        }
        for key in crate::command::routing_keys(spec, args) {
            self.tracking.remember(key, conn);
        }
    }

    /// `key` changed (or is evicted from the table when `broadcast` is false: then it did not
    /// change, but its readers must drop it since nobody will tell them of later changes).
    pub(crate) fn tracking_invalidate(&mut self, key: &[u8], broadcast: bool) {
        let current = self.tracking.current;
        if broadcast && !self.tracking.prefixes.is_empty() {
            let by = if self.tracking.expiring {
                None
            } else {
                current
            };
            self.tracking.note_broadcast(key, by);
        }
        let Some(readers) = self.tracking.take(key) else {
            return;
        };
        for conn in readers {
            // Readers that turned tracking off, or switched to BCAST, since they read it.
            let Some(t) = self.tracking_of(conn).filter(|t| !t.bcast) else {
                continue;
            };
            if Some(conn) == current {
                if !t.noloop {
                    self.tracking
                        .pending_own
                        .push(Some(Bytes::copy_from_slice(key)));
                }
            } else {
                self.send_invalidation(conn, Invalidated::Keys(&[key]));
            }
        }
    }

    /// FLUSHALL/FLUSHDB: every tracking client is told that every key is invalid (a null in
    /// place of the keys), and the table is emptied.
    pub(crate) fn tracking_flush_all(&mut self) {
        if self.tracking.clients > 0 {
            let current = self.tracking.current;
            let tracking: Vec<ConnId> = self
                .clients
                .values()
                .filter(|c| c.tracking.is_some())
                .map(|c| c.id)
                .collect();
            for conn in tracking {
                if Some(conn) == current {
                    self.tracking.pending_own.push(None);
                } else {
                    self.send_invalidation(conn, Invalidated::All);
                }
            }
        }
        self.tracking.clear_keys();
    }

    /// Sends the invalidations the running client caused to itself, after its reply.
    pub(crate) fn tracking_send_pending(&mut self, conn: ConnId) {
        let pending = std::mem::take(&mut self.tracking.pending_own);
        for key in pending {
            match key {
                Some(k) => self.send_invalidation(conn, Invalidated::Keys(&[&k])),
                None => self.send_invalidation(conn, Invalidated::All),
            }
        }
    }

    /// Writes one invalidation message for tracking client `conn`: to its redirect target if
    /// it has one (or, if that client is gone, a `tracking-redir-broken` push to `conn` in
    /// RESP3), else to itself in RESP3. A RESP2 client without a redirect gets nothing: RESP2
    /// has no way to push to a connection that is not in pub/sub mode.
    pub(crate) fn send_invalidation(&mut self, conn: ConnId, what: Invalidated) {
        let Some(client) = self.clients.get_mut(&conn) else {
            return;
        };
        let redirect = client.tracking.as_ref().map_or(0, |t| t.redirect);
        let own_proto = client.proto;
        let target = if redirect != 0 {
            let target = ConnId(redirect);
            if !self.clients.contains_key(&target) {
                if let Some(t) = self
                    .clients
                    .get_mut(&conn)
                    .and_then(|c| c.tracking.as_mut())
                {
                    t.broken_redirect = true;
                }
                if own_proto == Protocol::Resp3 {
                    self.deliver(conn, |w| {
                        w.push_len(2);
                        w.bulk(b"tracking-redir-broken");
                        w.integer(redirect as i64);
                    });
                }
                return;
            }
            target
        } else {
            conn
        };
        let Some(t) = self.clients.get(&target) else {
            return;
        };
        let pubsub_form = if t.proto == Protocol::Resp3 {
            false
        } else if redirect != 0 && t.subscriptions() > 0 {
            true
        } else {
            return;
        };
        self.deliver(target, |w| {
            if pubsub_form {
                w.push_len(3);
                w.bulk(b"message");
                w.bulk(INVALIDATE_CHANNEL);
            } else {
                w.push_len(2);
                w.bulk(b"invalidate");
            }
            match what {
                Invalidated::Keys(keys) => {
                    w.array_len(keys.len());
                    for k in keys {
                        w.bulk(k);
                    }
                }
                Invalidated::All => w.null(),
            }
        });
    }

    /// Sends what BCAST clients are owed: per prefix, the keys changed since the last call,
    /// less (for a NOLOOP client) those it changed itself.
    pub(crate) fn tracking_broadcast(&mut self) {
        if !self.tracking.broadcast_due {
            return;
        }
        self.tracking.broadcast_due = false;
        let mut messages: Vec<(ConnId, Vec<Bytes>)> = Vec::new();
        for state in self.tracking.prefixes.values_mut() {
            if state.changed.is_empty() {
                continue;
            }
            let changed = std::mem::take(&mut state.changed);
            for &conn in &state.clients {
                let noloop = self
                    .clients
                    .get(&conn)
                    .and_then(|c| c.tracking.as_ref())
                    .is_some_and(|t| t.noloop);
                let keys: Vec<Bytes> = changed
                    .iter()
                    .filter(|(_, by)| !noloop || **by != Some(conn))
                    .map(|(k, _)| k.clone())
                    .collect();
                if !keys.is_empty() {
                    messages.push((conn, keys));
                }
            }
        }
        for (conn, keys) in messages {
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            self.send_invalidation(conn, Invalidated::Keys(&refs));
        }
    }

    /// Keeps the per-key table within `tracking-table-max-keys`: keys past it are dropped
    /// with an invalidation to their readers, as if they had changed. One round evicts at
    /// most 100 keys per round in a row that ended still over the limit, so a large excess
    /// is worked off over several rounds instead of stalling one request.
    pub(crate) fn tracking_limit(&mut self) {
        let max = self.config.tracking_table_max_keys as usize;
        if max == 0 || self.tracking.keys.len() <= max {
            self.tracking.over_limit_rounds = 0;
            return;
        }
        let effort = EVICTION_EFFORT * (self.tracking.over_limit_rounds as usize + 1);
        for _ in 0..effort {
            // A random key: the first at or after a random probe (wrapping), drawn from the
            // node's seeded generator.
            let probe = self.random_u64().to_be_bytes();
            let key = self
                .tracking
                .keys
                .range::<[u8], _>((
                    std::ops::Bound::Included(&probe[..]),
                    std::ops::Bound::Unbounded,
                ))
                .next()
                .or_else(|| self.tracking.keys.iter().next())
                .map(|(k, _)| k.clone());
            let Some(key) = key else { break };
            self.tracking_invalidate(&key, false);
            if self.tracking.keys.len() <= max {
                self.tracking.over_limit_rounds = 0;
                return;
            }
        }
        self.tracking.over_limit_rounds += 1;
    }

    /// Panics if the tables disagree with the clients' tracking options.
    pub(crate) fn check_tracking_invariants(&self) {
        self.tracking.check_invariants();
        let on = self
            .clients
            .values()
            .filter(|c| c.tracking.is_some())
            .count();
        assert_eq!(on, self.tracking.clients, "tracking clients counter");
        assert!(self.tracking.current.is_none(), "a request left as running");
        assert!(
            self.tracking.pending_own.is_empty(),
            "own invalidations left unsent"
        );
        for c in self.clients.values() {
            for p in c.tracking.iter().flat_map(|t| t.prefixes.iter()) {
                assert!(
                    self.tracking
                        .prefixes
                        .get(p)
                        .is_some_and(|s| s.clients.contains(&c.id)),
                    "BCAST client missing from its prefix"
                );
            }
        }
        for (p, s) in &self.tracking.prefixes {
            for conn in &s.clients {
                assert!(
                    self.tracking_of(*conn)
                        .is_some_and(|t| t.prefixes.contains(p)),
                    "BCAST prefix names a client not subscribed to it"
                );
            }
        }
    }

    /// Turns tracking off for `conn` (CLIENT TRACKING OFF, RESET, a closed connection).
    pub(crate) fn tracking_disable(&mut self, conn: ConnId) {
        let Some(t) = self.clients.get_mut(&conn).and_then(|c| c.tracking.take()) else {
            return;
        };
        for prefix in &t.prefixes {
            self.tracking.remove_prefix(prefix, conn);
        }
        self.tracking.clients -= 1;
    }
}

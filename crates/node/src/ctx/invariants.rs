//! The command context's invariants: the indexes of clients, parking, subscriptions and
//! watches agree with each other, and the keyspace holds its own (the replication state
//! checks itself, `crate::repl::apply`).

use super::Core;

impl Core {
    /// Panics if any invariant of the context is broken.
    pub(crate) fn check_invariants(&self) {
        self.db.check_invariants();
        self.check_context_invariants();
    }

    /// [`Core::check_invariants`] with the keyspace's part limited to the keys hashed `hashes`
    /// (what changed since the last check; see `lattice_store::Db::take_changes`).
    pub(crate) fn check_changed_invariants(&self, hashes: &[u64]) {
        self.db.check_changed(hashes);
        self.check_context_invariants();
    }

    /// Everything but the keyspace: clients, parking, subscriptions, watches, scripts. Costs
    /// what those hold, not the data.
    fn check_context_invariants(&self) {
        let core = self;
        core.scripts.libraries.check_invariants();
        for conn in &core.pending {
            if let Some(c) = core.clients.get(conn) {
                assert!(c.pending, "queued connection not flagged pending");
            }
        }
        core.clients.check_invariants();
        core.slowlog.check_invariants();
        core.timing.check_invariants();
        core.latency.check_invariants();
        core.check_wait_invariants();
        core.check_shard_invariants();
        core.check_pause_invariants();
        core.check_monitor_invariants();
        core.check_tracking_invariants();
        for (id, c) in core.clients.iter() {
            assert_eq!(*id, c.id, "client stored under another id");
            if c.pending {
                assert!(
                    core.pending.contains(id),
                    "pending connection missing from the queue"
                );
            }
            if let Some(b) = &c.blocked {
                for k in &b.keys {
                    assert!(
                        core.blocked_on.get(k).is_some_and(|q| q.contains(id)),
                        "parked client missing from its key's queue"
                    );
                }
                if let Some(d) = b.deadline_ms {
                    assert!(
                        core.block_deadlines.contains(&(d, *id)),
                        "deadline not indexed"
                    );
                }
            } else {
                assert!(
                    c.queued_requests.is_empty(),
                    "requests queued behind no block"
                );
            }
            for ch in &c.channels {
                assert!(core.channels.get(ch).is_some_and(|s| s.contains(id)));
            }
            for p in &c.patterns {
                assert!(core.patterns.get(p).is_some_and(|s| s.contains(id)));
            }
            for k in &c.watched {
                assert!(core.watched_keys.get(k).is_some_and(|s| s.contains(id)));
            }
        }
        for (key, q) in &core.blocked_on {
            assert!(!q.is_empty(), "empty parking queue kept");
            for conn in q {
                assert!(
                    core.clients
                        .get(conn)
                        .and_then(|c| c.blocked.as_ref())
                        .is_some_and(|b| b.keys.contains(key)),
                    "queue holds a client not parked on that key"
                );
            }
        }
    }
}

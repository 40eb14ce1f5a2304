//! The node side of replication: capturing local writes after each command and applying
//! merged states back to the store.

use bytes::Bytes;
use lattice_store::Value;

use super::state::{Intent, Limits};
use crate::node::Core;

impl Core {
    /// Captures every key the finished command changed (see `Core::modified`).
    pub(crate) fn capture_dirty(&mut self, intent: Intent) {
        let Some(repl) = self.repl.as_mut() else {
            return;
        };
        if repl.dirty.is_empty() {
            return;
        }
        let now_ms = self.now.as_millis();
        let keys = std::mem::take(&mut repl.dirty);
        for key in &keys {
            let entry = self.db.get_raw(key).filter(|e| !e.is_expired(now_ms));
            repl.capture(
                key,
                entry.map(|e| (&e.value, e.expire_at_ms())),
                intent,
                now_ms,
            );
        }
        if intent == Intent::Increment {
            // Merged counters are summed in a fixed order, which can differ from the command's
            // own arithmetic in the last float digit: the replicated value is the one to keep.
            for key in &keys {
                self.apply_remote(key);
            }
        }
    }

    /// FLUSHALL/FLUSHDB: an observed-remove of every key this replica knows.
    pub(crate) fn capture_flush(&mut self) {
        let now_ms = self.now.as_millis();
        if let Some(repl) = self.repl.as_mut() {
            for key in repl.keys_with_content() {
                repl.capture(&key, None, Intent::Assign, now_ms);
            }
        }
    }

    pub(crate) fn repl_limits(&self) -> Limits {
        use crate::cmd::dump::listpack_limit;
        Limits {
            hash_max_entries: listpack_limit(
                self,
                "hash-max-listpack-entries",
                "hash-max-ziplist-entries",
                128,
            ),
            hash_max_value: listpack_limit(
                self,
                "hash-max-listpack-value",
                "hash-max-ziplist-value",
                64,
            ),
            set_max_intset_entries: crate::cmd::set::max_intset_entries(self),
            zset_max_entries: listpack_limit(
                self,
                "zset-max-listpack-entries",
                "zset-max-ziplist-entries",
                128,
            ),
            zset_max_value: listpack_limit(
                self,
                "zset-max-listpack-value",
                "zset-max-ziplist-value",
                64,
            ),
        }
    }

    /// Makes the store hold what the replicated state of `key` says.
    pub(crate) fn apply_remote(&mut self, key: &Bytes) {
        let limits = self.repl_limits();
        let Some(repl) = self.repl.as_ref() else {
            return;
        };
        let (value, deadline) = match repl.state(key) {
            Some(st) => (st.materialize(&limits), st.deadline_ms()),
            None => (None, None),
        };
        let now_ms = self.now.as_millis();
        if self
            .db
            .get_raw(key)
            .is_some_and(|e| matches!(e.value, Value::Stream(_)))
        {
            // Streams are local to their node (not replicated yet): a peer's state for the key
            // must not overwrite or delete one.
            return;
        }
        let same = match (&value, self.db.get_raw(key)) {
            (None, None) => true,
            (Some(v), Some(e)) => e.expire_at_ms() == deadline && same_content(v, &e.value),
            _ => false,
        };
        if same {
            return;
        }
        match value {
            None => {
                self.db.remove(key);
            }
            Some(v) => {
                self.db.insert(key, v, deadline, now_ms);
            }
        }
        self.touched_by_peer(key);
    }

    /// Panics unless every key's store value equals its materialized replicated state.
    pub(crate) fn check_replica_invariants(&self) {
        let Some(repl) = self.repl.as_ref() else {
            return;
        };
        repl.check_invariants();
        let now_ms = self.now.as_millis();
        let limits = self.repl_limits();
        for e in self.db.iter() {
            if e.is_expired(now_ms) || matches!(e.value, Value::Stream(_)) {
                continue;
            }
            let st = repl.state(e.key()).unwrap_or_else(|| {
                panic!(
                    "key {:?} is in the store but has no replicated state",
                    String::from_utf8_lossy(e.key())
                )
            });
            let m = st.materialize(&limits);
            assert!(
                m.as_ref().is_some_and(|m| same_content(m, &e.value)),
                "store and replicated state differ for {:?}: store {:?}, state {:?}",
                String::from_utf8_lossy(e.key()),
                e.value,
                m
            );
            assert_eq!(e.expire_at_ms(), st.deadline_ms(), "deadline differs");
        }
    }
}

/// Equal contents regardless of encoding (listpack or table, intset or not).
pub fn same_content(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => x.as_bytes() == y.as_bytes(),
        (Value::List(x), Value::List(y)) => x.len() == y.len() && x.iter().eq(y.iter()),
        (Value::Hash(x), Value::Hash(y)) => {
            x.len() == y.len() && x.iter().all(|(f, v)| y.get(f) == Some(v))
        }
        (Value::Set(x), Value::Set(y)) => x.len() == y.len() && x.iter().all(|m| y.contains(&m)),
        (Value::ZSet(x), Value::ZSet(y)) => {
            x.len() == y.len()
                && x.iter().all(|(m, s)| {
                    y.score(m)
                        .is_some_and(|t| t == s || (t.is_nan() && s.is_nan()))
                })
        }
        _ => false,
    }
}

//! The node side of replication: capturing local writes after each command and applying
//! merged states back to the store.

use bytes::Bytes;
use lattice_store::{Entry, Value};

use super::hint::ChangeHint;
use super::state::{Intent, Patch};
use super::Replicator;
use crate::ctx::Core;

impl Core {
    /// Captures every key the finished command changed (see `Core::modified`). A key left
    /// holding a string is deferred to the next flush instead (see `Replicator::defer`); the
    /// caller settled deferred captures of the other intent before the command ran.
    /// `overwrote`: the command writes values, not only deadlines (`crate::command::Flag::KeepsValue`).
    pub(crate) fn capture_dirty(&mut self, intent: Intent, overwrote: bool) {
        self.capture_dirty_hinted(intent, overwrote, None);
    }

    /// [`Core::capture_dirty`] after the command `name` with `args` (name first): a command
    /// that changed only its own key passes on what its arguments say it changed there
    /// ([`ChangeHint`]), so a write to a large collection costs the change. `overwrote` as for
    /// [`Core::capture_dirty`].
    pub(crate) fn capture_after(
        &mut self,
        intent: Intent,
        overwrote: bool,
        name: &str,
        args: &[Bytes],
    ) {
        let only_key = self.repl.as_ref().is_some_and(|r| {
            r.dirty.len() == 1 && args.get(1).is_some_and(|k| r.dirty.get(0).1 == &k[..])
        });
        let hint = only_key.then(|| ChangeHint::of(name, args)).flatten();
        self.capture_dirty_hinted(intent, overwrote, hint);
    }

    fn capture_dirty_hinted(&mut self, intent: Intent, overwrote: bool, hint: Option<ChangeHint>) {
        let Some(repl) = self.repl.as_mut() else {
            return;
        };
        if repl.dirty.is_empty() {
            return;
        }
        debug_assert!(!repl.must_settle_before(intent));
        let now_ms = self.now.as_millis();
        let mut keys = Vec::new();
        // Taken out for the loop (the captures below borrow the replicator) and put back
        // emptied, so its buffers are reused by the next command.
        let mut dirty = std::mem::take(&mut repl.dirty);
        for i in 0..dirty.len() {
            let (h, key) = dirty.get(i);
            let live = self
                .db
                .get_raw_hashed(h, key)
                .filter(|e| !e.is_expired(now_ms));
            if live.is_some_and(|e| matches!(e.value, Value::Str(_))) {
                repl.defer(h, key, intent, overwrote, now_ms);
            } else {
                // Captured now: this capture covers a deferred change of the key as well (no
                // string is left to stamp, so its overwrite flag no longer matters).
                repl.undefer(key);
                keys.push((Bytes::copy_from_slice(key), overwrote));
            }
        }
        dirty.clear();
        std::mem::swap(&mut repl.dirty, &mut dirty);
        if !keys.is_empty() {
            self.capture_keys(&keys, intent, hint);
        }
    }

    /// Captures every deferred key now: before a flush, before anything that reads replicated
    /// state, and before a command whose intent differs from theirs.
    pub(crate) fn settle_captures(&mut self) {
        let Some(repl) = self.repl.as_mut() else {
            return;
        };
        if !repl.has_deferred() {
            return;
        }
        let (keys, intent) = repl.take_deferred();
        self.capture_keys(&keys, intent, None);
    }

    /// Settles the deferred capture of `key` alone, if it has one.
    pub(crate) fn settle_key(&mut self, key: &[u8]) {
        let Some(repl) = self.repl.as_mut() else {
            return;
        };
        let Some(overwrote) = repl.undefer(key) else {
            return;
        };
        let intent = repl.deferred_intent();
        self.capture_keys(&[(Bytes::copy_from_slice(key), overwrote)], intent, None);
    }

    /// `hint` is about the only key of `keys`, if given.
    fn capture_keys(&mut self, keys: &[(Bytes, bool)], intent: Intent, hint: Option<ChangeHint>) {
        let Some(repl) = self.repl.as_mut() else {
            return;
        };
        let now_ms = self.now.as_millis();
        for (key, overwrote) in keys {
            repl.capture(&mut self.db, key, false, intent, *overwrote, hint, now_ms);
        }
        if intent == Intent::Increment {
            // Merged counters are summed in a fixed order, which can differ from the command's
            // own arithmetic in the last float digit: the replicated value is the one to keep.
            for (key, _) in keys {
                self.apply_remote(key);
            }
        }
    }

    /// FLUSHALL/FLUSHDB: an observed-remove of every key this replica knows.
    pub(crate) fn capture_flush(&mut self) {
        self.settle_captures();
        let now_ms = self.now.as_millis();
        if let Some(repl) = self.repl.as_mut() {
            for key in repl.keys_with_content(&self.db) {
                repl.capture(
                    &mut self.db,
                    &key,
                    true,
                    Intent::Assign,
                    false,
                    None,
                    now_ms,
                );
            }
        }
    }

    /// Makes the store hold what the replicated state of `key` says.
    pub(crate) fn apply_remote(&mut self, key: &Bytes) {
        let limits = self.config.encoding;
        let Some(repl) = self.repl.as_mut() else {
            return;
        };
        if let Some(patch) = repl.take_patch(key) {
            if self.apply_patch(key, &patch) {
                self.touched_by_peer(key);
                return;
            }
        }
        let Some(repl) = self.repl.as_ref() else {
            return;
        };
        let Some(st) = repl.state(key, &self.db) else {
            return self.store_remote(key, None, None);
        };
        if st.value_in_store() {
            return; // the store holds it already
        }
        let (value, deadline) = (st.materialize(&limits, None), st.deadline_ms());
        self.store_remote(key, value, deadline);
    }

    /// Makes the store hold `value` with `deadline` under `key`, as a merged state says, then
    /// lets the state leave its value to the store.
    fn store_remote(&mut self, key: &Bytes, value: Option<Value>, deadline: Option<u64>) {
        let now_ms = self.now.as_millis();
        let stored = self.db.get_raw(key);
        if stored.is_some_and(|e| matches!(e.value, Value::Stream(_))) {
            // Streams are local to their node (not replicated yet): a peer's state for the key
            // must not overwrite or delete one.
            return;
        }
        let same = match (&value, stored) {
            (None, None) => true,
            (Some(v), Some(e)) => e.expire_at_ms() == deadline && same_content(v, &e.value),
            _ => false,
        };
        if !same {
            match value {
                None => {
                    self.db.remove(key);
                }
                Some(v) => {
                    self.db.insert(key, v, deadline, now_ms);
                }
            }
        }
        if let Some(repl) = self.repl.as_mut() {
            repl.value_stored(key, &mut self.db);
        }
        if !same {
            self.touched_by_peer(key);
        }
    }

    /// Updates the store value of `key` element by element after a merge (see
    /// [`super::state::KeyState::patch_for`]); false, having changed nothing, when the store
    /// does not hold the value the patch applies to (then the caller rebuilds it).
    fn apply_patch(&mut self, key: &[u8], patch: &Patch) -> bool {
        let now_ms = self.now.as_millis();
        let limits = self.config.encoding;
        let (Some(repl), Some(stored)) = (self.repl.as_ref(), self.db.get_raw(key)) else {
            return false;
        };
        let Some(st) = repl.state(key, &self.db) else {
            return false;
        };
        let fits = !stored.is_expired(now_ms)
            && stored.expire_at_ms() == st.deadline_ms()
            && matches!(
                (patch, &stored.value),
                (Patch::Fields(_), Value::Hash(_))
                    | (Patch::Members(_), Value::Set(_))
                    | (Patch::Ends { .. }, Value::List(_))
            );
        if !fits {
            return false;
        }
        let Some(entry) = self.db.get_live(key, now_ms, |_| {}) else {
            return false;
        };
        let emptied = match (patch, &mut entry.value) {
            (Patch::Fields(fields), Value::Hash(h)) => {
                let compact = lattice_store::hash::Limits {
                    max_entries: limits.hash_max_entries,
                    max_value: limits.hash_max_value,
                };
                for f in fields {
                    match st.field_value(f) {
                        Some(v) => {
                            h.insert(f, &v, compact);
                        }
                        None => {
                            h.remove(f);
                        }
                    }
                }
                h.is_empty()
            }
            (Patch::Members(members), Value::Set(s)) => {
                for m in members {
                    if st.has_member(m) {
                        s.insert(m, limits.set_max_intset_entries);
                    } else {
                        s.remove(m);
                    }
                }
                s.is_empty()
            }
            (Patch::Ends { front, back }, Value::List(l)) => {
                for v in front.iter().rev() {
                    l.push(lattice_store::list::End::Head, v);
                }
                for v in back {
                    l.push(lattice_store::list::End::Tail, v);
                }
                l.is_empty()
            }
            _ => unreachable!("checked above"),
        };
        if emptied {
            self.db.remove(key);
        }
        true
    }

    /// Panics unless every key's store value equals its materialized replicated state.
    pub(crate) fn check_replica_invariants(&self) {
        let Some(repl) = self.repl.as_ref() else {
            return;
        };
        repl.check_invariants(&self.db);
        let mut scratch = Vec::new();
        for e in self.db.iter() {
            self.check_replica_entry(repl, e, &mut scratch);
        }
    }

    /// [`Core::check_replica_invariants`] for the keys hashed `hashes` alone (sorted, each
    /// once: what the store and the replicated states report changed since the last check).
    pub(crate) fn check_replica_changed(&self, hashes: &[u64]) {
        let Some(repl) = self.repl.as_ref() else {
            return;
        };
        repl.check_changed(hashes, &self.db);
        let mut scratch = Vec::new();
        for &h in hashes {
            for e in self.db.entries_with_hash(h) {
                self.check_replica_entry(repl, e, &mut scratch);
            }
        }
    }

    /// One store entry against its replicated state: the state exists and shows the same
    /// content and deadline (or the key's capture is deferred and it holds a string).
    fn check_replica_entry(&self, repl: &Replicator, e: &Entry, scratch: &mut Vec<u8>) {
        let now_ms = self.now.as_millis();
        if e.is_expired(now_ms) || matches!(e.value, Value::Stream(_)) {
            return;
        }
        if repl.is_deferred(e.key()) {
            // Its capture is owed (at the latest at the planned flush).
            assert!(
                matches!(e.value, Value::Str(_)),
                "a deferred capture for a key that holds no string"
            );
            return;
        }
        let st = repl.state(e.key(), &self.db).unwrap_or_else(|| {
            panic!(
                "key {:?} is in the store but has no replicated state",
                String::from_utf8_lossy(e.key())
            )
        });
        let m = if st.value_in_store() {
            // Checked through the digest the state keeps, which covers the value.
            let stored = match &e.value {
                Value::Str(s) => Some(s.as_bytes().into_owned()),
                _ => None,
            };
            assert!(
                repl.digest_matches(e.key(), stored.as_deref(), &self.db, scratch),
                "store and packed state differ for {:?}: store {:?}",
                String::from_utf8_lossy(e.key()),
                e.value
            );
            stored.map(|s| Value::Str(lattice_store::Str::from_bytes(&s)))
        } else {
            st.materialize(&self.config.encoding, None)
        };
        assert!(
            m.as_ref()
                .is_some_and(|m| same_content(m, &e.value) || same_hll(m, &e.value)),
            "store and replicated state differ for {:?}: store {:?}, state {:?}",
            String::from_utf8_lossy(e.key()),
            e.value,
            m
        );
        assert_eq!(e.expire_at_ms(), st.deadline_ms(), "deadline differs");
    }
}

pub use super::state::{same_content, same_hll};

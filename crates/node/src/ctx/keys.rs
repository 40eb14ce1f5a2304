//! Key services: every command reaches the keyspace through these, so lazy expiry, hit/miss
//! counting, the modification hook (WATCH, parked clients, replication and persistence
//! capture) and the `expired` event happen the same way whatever the command.

use bytes::Bytes;
use lattice_store::Entry;

use super::Core;
use crate::client::ConnId;
use crate::events::EVENT_EXPIRED;

impl Core {
    /// Looks a key up for reading: lazy expiry, hit/miss counting, access time.
    pub fn lookup_read(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        self.lookup_counted(key, now_ms, true)
    }

    /// [`Core::lookup_read`] without recording an access (Redis's `LOOKUP_NOTOUCH`: EXISTS,
    /// TTL and its kin leave OBJECT IDLETIME and FREQ alone).
    pub fn lookup_read_untouched(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        self.lookup_counted(key, now_ms, false)
    }

    fn lookup_counted(&mut self, key: &[u8], now_ms: u64, touch: bool) -> Option<&mut Entry> {
        if self.hidden_by_pause(key, now_ms) {
            self.stats.keyspace_misses += 1;
            return None;
        }
        self.expire_if_due(key, now_ms);
        let (clock, draw) = (self.db.access_clock(), self.db.draw());
        match self.db.get_live(key, now_ms, |_| {}) {
            Some(e) => {
                self.stats.keyspace_hits += 1;
                if touch {
                    e.touch(now_ms, clock, draw);
                }
                Some(e)
            }
            None => {
                self.stats.keyspace_misses += 1;
                None
            }
        }
    }

    /// Looks a key up for writing: lazy expiry and access time, no hit/miss counting.
    pub fn lookup_write(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        if self.hidden_by_pause(key, now_ms) {
            return None;
        }
        self.expire_if_due(key, now_ms);
        let (clock, draw) = (self.db.access_clock(), self.db.draw());
        let e = self.db.get_live(key, now_ms, |_| {})?;
        e.touch(now_ms, clock, draw);
        Some(e)
    }

    /// True when `key` exists and has not expired (applies lazy expiry, counts nothing).
    pub fn exists(&mut self, key: &[u8], now_ms: u64) -> bool {
        if self.hidden_by_pause(key, now_ms) {
            return false;
        }
        self.expire_if_due(key, now_ms);
        self.db.get_raw(key).is_some()
    }

    /// While CLIENT PAUSE holds writes, a key whose deadline has passed is answered as
    /// missing but not deleted (a deletion is a write), as Redis does; the first lookup after
    /// the pause deletes it.
    fn hidden_by_pause(&self, key: &[u8], now_ms: u64) -> bool {
        self.pausing.pause.is_some()
            && self.db.next_deadline_ms().is_some_and(|d| d < now_ms)
            && self.db.get_raw(key).is_some_and(|e| e.is_expired(now_ms))
    }

    /// Lazy expiry: deletes `key` if its deadline has passed, reporting the deletion like any
    /// other change (WATCH sees it; keyspace notifications say `expired`).
    fn expire_if_due(&mut self, key: &[u8], now_ms: u64) {
        // No deadline has passed, so no key can be expired: skip hashing and probing the key
        // (the lookup that follows does that once).
        if self.db.next_deadline_ms().is_none_or(|d| d >= now_ms) {
            return;
        }
        let mut expired = false;
        let _ = self.db.get_live(key, now_ms, |_| expired = true);
        if expired {
            self.after_expiry(key);
        }
    }

    pub(crate) fn after_expiry(&mut self, key: &[u8]) {
        // The deletion is no client's change (a NOLOOP BCAST client is told of it).
        self.tracking.expiring = true;
        self.modified(key);
        self.tracking.expiring = false;
        self.notify(EVENT_EXPIRED, "expired", key);
    }

    /// Every command that changes a key — its value, its deadline or its existence — calls this
    /// once per changed key after the change, like Redis's `signalModifiedKey`. WATCH,
    /// parked blocking clients and (with replication) delta capture hang off this one hook.
    pub fn modified(&mut self, key: &[u8]) {
        if let Some(r) = self.repl.as_mut() {
            r.note_modified(key);
        }
        self.persist.note_modified(key);
        self.touched_by_peer(key);
    }

    /// A key changed by replication (a merged peer state): WATCH and parked clients see it like
    /// a local write, but it is not captured again.
    pub(crate) fn touched_by_peer(&mut self, key: &[u8]) {
        if self.tracking.watching() {
            self.tracking_invalidate(key, true);
        }
        if !self.watched_keys.is_empty() {
            if let Some(watchers) = self.watched_keys.get(key) {
                let gone = self.db.get_raw(key).is_none();
                for conn in watchers {
                    if let Some(c) = self.clients.get_mut(conn) {
                        // A key that had expired before the WATCH being reclaimed: no change.
                        if gone && c.watched_expired.remove(key) {
                            continue;
                        }
                        c.dirty_cas = true;
                    }
                }
            }
        }
        if !self.blocked_on.is_empty()
            && self.blocked_on.contains_key(key)
            && !self.ready_keys.iter().any(|k| k == key)
        {
            self.ready_keys.push(Bytes::copy_from_slice(key));
        }
    }

    /// Marks every watcher of a key that exists now as dirty (FLUSHALL/FLUSHDB, before the
    /// keys go).
    pub fn touch_all_watched(&mut self) {
        let now_ms = self.now.as_millis();
        let keys: Vec<Bytes> = self.watched_keys.keys().cloned().collect();
        for k in keys {
            if self.db.get_raw(&k).is_some_and(|e| !e.is_expired(now_ms)) {
                self.modified(&k);
            }
        }
    }

    /// Forgets every key `conn` watches and clears its dirty flag.
    pub(crate) fn unwatch_all(&mut self, conn: ConnId) {
        let Some(c) = self.clients.get_mut(&conn) else {
            return;
        };
        let keys = std::mem::take(&mut c.watched);
        c.watched_expired.clear();
        c.dirty_cas = false;
        for key in keys {
            if let Some(set) = self.watched_keys.get_mut(&key) {
                set.remove(&conn);
                if set.is_empty() {
                    self.watched_keys.remove(&key);
                }
            }
        }
    }
}

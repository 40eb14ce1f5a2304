//! One keyspace: keys partitioned into fixed hash slots, plus an index of expiry deadlines.
//!
//! Why fixed slots: a key's slot depends only on its hash, never on table size, so
//! - a SCAN cursor is simply "the next slot to visit", and it stays valid while tables grow or
//!   shrink (every key present for the whole scan is returned at least once);
//! - each slot's table is small, so growing it never stalls the node for a large rehash;
//! - anti-entropy and sharding can work slot by slot later.
//!
//! Why an ordered deadline index instead of Redis's random sampling: active expiry then removes
//! exactly the keys that are due, oldest first, with work bounded per call; it costs one ordered
//! map entry per key with a TTL.

use std::collections::BTreeMap;
use std::num::NonZeroU64;

use hashbrown::HashTable;

use crate::keyhash::key_hash;
use crate::value::Value;

/// Number of hash slots; the top `SLOT_BITS` bits of a key's hash choose its slot.
pub const SLOT_BITS: u32 = 14;
pub const SLOT_COUNT: usize = 1 << SLOT_BITS;

/// A stored key with its value and metadata.
#[derive(Debug)]
pub struct Entry {
    key: Box<[u8]>,
    pub value: Value,
    /// Absolute deadline in ms since the Unix epoch on the node's clock. Private so that every
    /// change goes through [`Db::set_expire`] and the deadline index cannot fall out of step.
    /// Stored as a non-zero integer so the option costs no space (a deadline of 0 ms, long
    /// past, is stored as 1 ms: equally past).
    deadline_ms: Option<NonZeroU64>,
    /// Last time a command read or wrote the key (OBJECT IDLETIME).
    pub access_ms: u64,
}

impl Entry {
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    pub fn expire_at_ms(&self) -> Option<u64> {
        self.deadline_ms.map(NonZeroU64::get)
    }

    /// True when the deadline has passed at `now_ms`. A key expires at its deadline exactly,
    /// as in Redis (`now > when` keeps it alive for the deadline millisecond itself).
    pub fn is_expired(&self, now_ms: u64) -> bool {
        matches!(self.expire_at_ms(), Some(t) if t < now_ms)
    }
}

fn pack(deadline_ms: Option<u64>) -> Option<NonZeroU64> {
    deadline_ms.map(|t| NonZeroU64::new(t).unwrap_or(NonZeroU64::MIN))
}

/// The deadline as it will be stored (0 becomes 1), so the index and the entry agree.
fn normalize(deadline_ms: Option<u64>) -> Option<u64> {
    pack(deadline_ms).map(NonZeroU64::get)
}

#[inline]
fn slot_of(hash: u64) -> usize {
    (hash >> (64 - SLOT_BITS)) as usize
}

/// The hash handed to a slot's table. The slot bits are the same for every key of a slot, so
/// the table must not see them in the bits it uses for buckets (low) or tags (high): an odd
/// multiplier keeps the low bits a bijection of the key hash's low bits and mixes the high ones.
#[inline]
fn table_hash(hash: u64) -> u64 {
    hash.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn rehash(entry: &Entry) -> u64 {
    table_hash(key_hash(&entry.key))
}

/// Counters the node reports in INFO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DbStats {
    pub expired_keys: u64,
}

/// A keyspace. All times are supplied by the caller.
pub struct Db {
    slots: Vec<HashTable<Entry>>,
    len: usize,
    /// (deadline ms, key hash) -> how many keys share both (a 64-bit hash collision at the same
    /// millisecond is unlikely but must not lose a deadline).
    deadlines: BTreeMap<(u64, u64), u32>,
    volatile: usize,
    stats: DbStats,
}

impl Default for Db {
    fn default() -> Self {
        Self::new()
    }
}

impl Db {
    pub fn new() -> Db {
        let mut slots = Vec::with_capacity(SLOT_COUNT);
        slots.resize_with(SLOT_COUNT, HashTable::new);
        Db {
            slots,
            len: 0,
            deadlines: BTreeMap::new(),
            volatile: 0,
            stats: DbStats::default(),
        }
    }

    /// Keys stored, including expired ones not yet reclaimed (as Redis's DBSIZE counts).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keys that carry a deadline.
    pub fn volatile_len(&self) -> usize {
        self.volatile
    }

    pub fn stats(&self) -> DbStats {
        self.stats
    }

    /// The entry for `key` whatever its deadline (no lazy expiry).
    pub fn get_raw(&self, key: &[u8]) -> Option<&Entry> {
        let h = key_hash(key);
        self.slots[slot_of(h)].find(table_hash(h), |e| &*e.key == key)
    }

    /// The live entry for `key`: an expired entry is deleted on the spot (lazy expiry) and
    /// reported absent. `on_expired` sees the entry before it goes.
    pub fn get_live(
        &mut self,
        key: &[u8],
        now_ms: u64,
        on_expired: impl FnOnce(&Entry),
    ) -> Option<&mut Entry> {
        let h = key_hash(key);
        let slot = slot_of(h);
        let expired = match self.slots[slot].find(table_hash(h), |e| &*e.key == key) {
            None => return None,
            Some(e) => e.is_expired(now_ms),
        };
        if expired {
            let entry = self.remove_hashed(key, h).expect("found above");
            self.stats.expired_keys += 1;
            on_expired(&entry);
            return None;
        }
        self.slots[slot].find_mut(table_hash(h), |e| &*e.key == key)
    }

    /// Stores `value` under `key` with `expire_at_ms`, replacing any previous entry (whose
    /// value is returned). The caller has already applied lazy expiry if it cares.
    pub fn insert(
        &mut self,
        key: &[u8],
        value: Value,
        expire_at_ms: Option<u64>,
        now_ms: u64,
    ) -> Option<Value> {
        let expire_at_ms = normalize(expire_at_ms);
        let h = key_hash(key);
        let slot = slot_of(h);
        match self.slots[slot].find_mut(table_hash(h), |e| &*e.key == key) {
            Some(entry) => {
                let old_deadline = entry.expire_at_ms();
                entry.deadline_ms = pack(expire_at_ms);
                entry.access_ms = now_ms;
                let old = std::mem::replace(&mut entry.value, value);
                self.move_deadline(h, old_deadline, expire_at_ms);
                Some(old)
            }
            None => {
                let entry = Entry {
                    key: key.into(),
                    value,
                    deadline_ms: pack(expire_at_ms),
                    access_ms: now_ms,
                };
                self.slots[slot].insert_unique(table_hash(h), entry, rehash);
                self.len += 1;
                self.move_deadline(h, None, expire_at_ms);
                None
            }
        }
    }

    /// Changes the deadline of an existing key; false when the key does not exist.
    pub fn set_expire(&mut self, key: &[u8], expire_at_ms: Option<u64>) -> bool {
        let expire_at_ms = normalize(expire_at_ms);
        let h = key_hash(key);
        let slot = slot_of(h);
        let Some(entry) = self.slots[slot].find_mut(table_hash(h), |e| &*e.key == key) else {
            return false;
        };
        let old = entry.expire_at_ms();
        entry.deadline_ms = pack(expire_at_ms);
        self.move_deadline(h, old, expire_at_ms);
        true
    }

    /// Removes `key`, returning its entry.
    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        self.remove_hashed(key, key_hash(key))
    }

    fn remove_hashed(&mut self, key: &[u8], h: u64) -> Option<Entry> {
        let slot = slot_of(h);
        let found = self.slots[slot]
            .find_entry(table_hash(h), |e| &*e.key == key)
            .ok()?;
        let (entry, _) = found.remove();
        self.len -= 1;
        self.move_deadline(h, entry.expire_at_ms(), None);
        Some(entry)
    }

    fn move_deadline(&mut self, h: u64, old: Option<u64>, new: Option<u64>) {
        if old == new {
            return;
        }
        if let Some(t) = old {
            let k = (t, h);
            let n = self.deadlines.get_mut(&k).expect("deadline indexed");
            *n -= 1;
            if *n == 0 {
                self.deadlines.remove(&k);
            }
            self.volatile -= 1;
        }
        if let Some(t) = new {
            *self.deadlines.entry((t, h)).or_insert(0) += 1;
            self.volatile += 1;
        }
    }

    /// Active expiry: deletes up to `max_keys` keys whose deadline has passed at `now_ms`,
    /// oldest deadline first, calling `on_expired` for each. Returns how many were deleted and
    /// whether more are already due (so the caller can come back sooner).
    pub fn expire_due(
        &mut self,
        now_ms: u64,
        max_keys: usize,
        mut on_expired: impl FnMut(&Entry),
    ) -> (usize, bool) {
        let mut removed = 0;
        while removed < max_keys {
            let Some((&(deadline, h), _)) = self.deadlines.first_key_value() else {
                return (removed, false);
            };
            if deadline >= now_ms {
                return (removed, false);
            }
            // Every key in this slot with this hash and this deadline is due.
            let slot = slot_of(h);
            let th = table_hash(h);
            while let Ok(found) = self.slots[slot].find_entry(th, |e| {
                e.expire_at_ms() == Some(deadline) && key_hash(&e.key) == h
            }) {
                let (entry, _) = found.remove();
                self.len -= 1;
                self.move_deadline(h, entry.expire_at_ms(), None);
                self.stats.expired_keys += 1;
                removed += 1;
                on_expired(&entry);
            }
        }
        let more = matches!(self.deadlines.first_key_value(), Some((&(d, _), _)) if d < now_ms);
        (removed, more)
    }

    /// The earliest deadline of any key, for scheduling the next expiry pass.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.deadlines.first_key_value().map(|(&(d, _), _)| d)
    }

    /// Calls `f` for every entry of `slot` (expired ones included; callers filter).
    pub fn for_each_in_slot(&self, slot: usize, mut f: impl FnMut(&Entry)) {
        for e in self.slots[slot].iter() {
            f(e);
        }
    }

    /// Number of entries in `slot`.
    pub fn slot_len(&self, slot: usize) -> usize {
        self.slots[slot].len()
    }

    /// Every entry, slot by slot (a deterministic order for a given history).
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().flat_map(|t| t.iter())
    }

    /// A pseudo-random entry chosen with the caller's random numbers: a random slot, the first
    /// non-empty slot from there, and a random entry in it. Not uniform, like Redis's.
    pub fn random_entry(&self, mut next_random: impl FnMut() -> u64) -> Option<&Entry> {
        if self.len == 0 {
            return None;
        }
        let start = (next_random() as usize) % SLOT_COUNT;
        for i in 0..SLOT_COUNT {
            let table = &self.slots[(start + i) % SLOT_COUNT];
            if !table.is_empty() {
                let n = (next_random() as usize) % table.len();
                return table.iter().nth(n);
            }
        }
        None
    }

    /// Deletes every key.
    pub fn clear(&mut self) {
        for t in &mut self.slots {
            // Replacing (not clearing) releases the memory of tables that had grown.
            *t = HashTable::new();
        }
        self.len = 0;
        self.deadlines.clear();
        self.volatile = 0;
    }

    /// Checks the structure's invariants; panics with a description on violation.
    pub fn check_invariants(&self) {
        let mut total = 0;
        let mut volatile = 0;
        for (i, t) in self.slots.iter().enumerate() {
            for e in t.iter() {
                let h = key_hash(&e.key);
                assert_eq!(slot_of(h), i, "key stored in the wrong slot");
                if let Some(d) = e.expire_at_ms() {
                    volatile += 1;
                    assert!(
                        self.deadlines.contains_key(&(d, h)),
                        "deadline of a key missing from the index"
                    );
                }
            }
            total += t.len();
        }
        assert_eq!(total, self.len, "len out of step with the tables");
        assert_eq!(volatile, self.volatile, "volatile count out of step");
        let indexed: u64 = self.deadlines.values().map(|&n| n as u64).sum();
        assert_eq!(indexed, volatile as u64, "deadline index out of step");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Str;

    fn s(v: &str) -> Value {
        Value::Str(Str::from_bytes(v.as_bytes()))
    }

    #[test]
    fn insert_get_remove() {
        let mut db = Db::new();
        assert!(db.insert(b"a", s("1"), None, 0).is_none());
        assert!(db.insert(b"a", s("2"), Some(100), 0).is_some());
        assert_eq!(db.len(), 1);
        assert_eq!(db.volatile_len(), 1);
        assert_eq!(db.get_live(b"a", 100, |_| {}).unwrap().value, s("2"));
        assert!(db.get_live(b"a", 101, |_| {}).is_none());
        assert_eq!(db.len(), 0);
        db.check_invariants();
    }

    #[test]
    fn active_expiry_is_bounded_and_ordered() {
        let mut db = Db::new();
        for i in 0..100u64 {
            db.insert(format!("k{i}").as_bytes(), s("v"), Some(i), 0);
        }
        db.insert(b"forever", s("v"), None, 0);
        let mut seen = Vec::new();
        let (n, more) = db.expire_due(50, 10, |e| seen.push(e.expire_at_ms().unwrap()));
        assert_eq!((n, more), (10, true));
        // A deadline of 0 is stored as 1 ms: equally long past.
        assert_eq!(seen, [1, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let (n, more) = db.expire_due(50, 1000, |_| {});
        assert_eq!((n, more), (40, false));
        assert_eq!(db.len(), 51);
        assert_eq!(db.next_deadline_ms(), Some(50));
        db.check_invariants();
    }

    #[test]
    fn every_key_is_in_exactly_one_slot_walk() {
        let mut db = Db::new();
        for i in 0..5000 {
            db.insert(format!("key:{i}").as_bytes(), s("v"), None, 0);
        }
        let mut count = 0;
        for slot in 0..SLOT_COUNT {
            db.for_each_in_slot(slot, |_| count += 1);
        }
        assert_eq!(count, 5000);
        db.check_invariants();
        let mut r = 7u64;
        assert!(db
            .random_entry(|| {
                r = r.wrapping_mul(6364136223846793005).wrapping_add(1);
                r
            })
            .is_some());
    }
}

//! The replicated states by key: a hash table for the lookups every replicated write makes
//! (capture, merge, store refresh, GC visit), plus a per-Merkle-leaf index of key hashes for
//! what needs order (anti-entropy reads whole leaves; FLUSHALL lists keys).
//!
//! Why not an ordered map keyed by (hash, key), which gives both at once: with 100,000 keys a
//! B-tree search walks about seven nodes, each a likely cache miss with a dozen comparisons,
//! and a replicated write searched three or four times. That was the largest single cost of a
//! replica applying random-key writes (docs/ARCHITECTURE.md §22). A hash probe costs about one
//! miss. Leaves hold about `keys / 65,536` entries, so keeping each leaf's index sorted is cheap.
//!
//! Iteration order never depends on the table's layout: ordered walks go through the leaf
//! index, sorted by (hash, key) as the ordered map was, so messages are the same on every run.
//!
//! Most keys of a replicating node hold a plain string written once, whose state is its stamp
//! alone (see `state::Packed`): such a key is kept *packed*, as its hash, stamp and digest in a
//! sorted vector per leaf, without its key bytes or a block of its own. Which key a packed
//! record belongs to is told by the store: the key's entry there carries the mark
//! (`lattice_store::Db::set_mark`), and there is at most one packed record per hash, so a key
//! whose hash another key's record already has is kept in full. A packed entry is unpacked
//! into the table whenever it is used mutably ([`KeyMap::get_mut`]), and packed again by
//! [`KeyMap::repack`] when the caller is done with it.

use std::borrow::Cow;

use bytes::Bytes;
use hashbrown::HashTable;
use lattice_store::{Changed, Changes, Db};

use super::merkle::{leaf_of, LEAVES};

/// An entry that may be reduced to a small `Copy` record while it is in the common state.
pub trait Pack: Clone {
    type Packed: Copy;
    /// The record standing for this entry, if it can be packed now.
    fn pack(&self) -> Option<Self::Packed>;
    fn unpack(p: Self::Packed) -> Self;
}

/// An entry as [`KeyMap::visit_leaf`] shows it: in the table, or a packed record.
pub enum LeafEntry<'a, E: Pack> {
    Keyed(&'a E),
    Packed(E::Packed),
}

/// One key's entry. `hash` is [`lattice_store::key_hash`] of `key`.
pub struct Slot<E> {
    pub hash: u64,
    pub key: Bytes,
    pub entry: E,
}

/// The table is split by the top `SHARD_BITS` bits of the key hash into this many tables, so
/// that growing never moves more than one small table: a single table of a million states
/// doubled in one insert, and that insert (a replica merging a delta) held the node for
/// hundreds of milliseconds.
const SHARD_BITS: u32 = 12;
const SHARDS: usize = 1 << SHARD_BITS;

fn shard_of(hash: u64) -> usize {
    (hash >> (64 - SHARD_BITS)) as usize
}

/// The hash a shard's table works with. Within a shard the top bits of the key hash are all
/// equal, and hashbrown takes its per-bucket tag from the top bits: mixing spreads them again.
fn table_hash(hash: u64) -> u64 {
    hash.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

pub struct KeyMap<E: Pack> {
    /// `SHARDS` tables (allocated on first use), a key in `tables[shard_of(hash)]`. The tables
    /// hold pointers: a table keeps up to half its buckets empty after it grows, and an empty
    /// bucket then costs 9 bytes instead of a whole slot (about 110).
    tables: Vec<HashTable<Box<Slot<E>>>>,
    /// Keys in `tables` and `packed` together.
    len: usize,
    /// Per Merkle leaf, the hashes of its keys in `tables` in ascending order (a hash appears
    /// once per key, so twice for two keys that share a 64-bit hash).
    leaves: Vec<Vec<u64>>,
    /// Per Merkle leaf, the packed keys' records by ascending hash, one per hash at most.
    packed: Vec<Vec<(u64, E::Packed)>>,
    packed_len: usize,
    /// Calls of [`KeyMap::check_invariants`] so far: its checks run on every
    /// [`DEEP_CHECK_EVERY`]th call only.
    checks: std::cell::Cell<u64>,
    /// The keys whose entries changed since the last [`KeyMap::take_changes`] (off unless
    /// asked for).
    changes: Changes,
}

/// The checks walk all 4,096 leaves and every key (the store's marks against the packed
/// records, the leaf order): after every node check they cost a simulated replicated step
/// several times over, even with few keys. On every 8th call a broken invariant is still
/// caught a few hundred steps after the change that broke it, in the same seed, and
/// `lattice-sim --check-every 1` narrows the step down.
const DEEP_CHECK_EVERY: u64 = 8;

impl<E: Pack> Default for KeyMap<E> {
    fn default() -> Self {
        KeyMap {
            tables: Vec::new(),
            len: 0,
            leaves: Vec::new(),
            packed: Vec::new(),
            packed_len: 0,
            checks: std::cell::Cell::new(0),
            changes: Changes::default(),
        }
    }
}

/// Where `hash` is or would go in a leaf's packed records.
fn packed_at<P>(leaf: &[(u64, P)], hash: u64) -> Result<usize, usize> {
    leaf.binary_search_by_key(&hash, |r| r.0)
}

impl<E: Pack> KeyMap<E> {
    pub fn len(&self) -> usize {
        self.len
    }

    /// Keys held packed.
    pub fn packed_len(&self) -> usize {
        self.packed_len
    }

    /// Heap bytes by part: (table buckets, slot blocks, key copies, leaf index, packed
    /// records), from lengths and capacities (allocator rounding left out).
    pub fn memory(&self) -> [usize; 5] {
        let buckets = self.tables.iter().map(HashTable::allocation_size).sum();
        let slots =
            self.tables.iter().map(HashTable::len).sum::<usize>() * std::mem::size_of::<Slot<E>>();
        let keys = self
            .tables
            .iter()
            .flat_map(|t| t.iter())
            .map(|s| s.key.len())
            .sum();
        let leaves = self.leaves.iter().map(|v| v.capacity() * 8).sum::<usize>()
            + self.leaves.capacity() * std::mem::size_of::<Vec<u64>>();
        let packed = self
            .packed
            .iter()
            .map(|v| v.capacity() * std::mem::size_of::<(u64, E::Packed)>())
            .sum::<usize>()
            + self.packed.capacity() * std::mem::size_of::<Vec<(u64, E::Packed)>>();
        [buckets, slots, keys, leaves, packed]
    }

    /// The packed record of `key`, if it has one (`db` tells which key a record is).
    fn packed_of(&self, hash: u64, key: &[u8], db: &Db) -> Option<(usize, usize)> {
        let leaf = self.packed.get(leaf_of(hash))?;
        let at = packed_at(leaf, hash).ok()?;
        db.was_marked(hash, key).then_some((leaf_of(hash), at))
    }

    /// The entry of `key`, unpacked into a copy when it is packed.
    pub fn get_any(&self, hash: u64, key: &[u8], db: &Db) -> Option<Cow<'_, E>> {
        if let Some(e) = self.get(hash, key) {
            return Some(Cow::Borrowed(e));
        }
        let (l, at) = self.packed_of(hash, key, db)?;
        Some(Cow::Owned(E::unpack(self.packed[l][at].1)))
    }

    /// Moves `key`'s packed record, if it has one, into the table (the mark goes).
    fn unpack_key(&mut self, hash: u64, key: &[u8], db: &mut Db) {
        if let Some(p) = self.take_packed(hash, key, db) {
            self.insert_slot(hash, key, E::unpack(p));
        }
    }

    /// Removes `key`'s packed record, if it has one, and its mark.
    fn take_packed(&mut self, hash: u64, key: &[u8], db: &mut Db) -> Option<E::Packed> {
        let (l, at) = self.packed_of(hash, key, db)?;
        let (_, p) = self.packed[l].remove(at);
        self.packed_len -= 1;
        self.len -= 1;
        if !db.set_mark(hash, key, false) || db.marked_gone() > 0 {
            db.forget_marked(key);
        }
        Some(p)
    }

    /// Runs `f` on `key`'s entry (created by `fresh` if there is none), where it is: a packed
    /// entry is worked on as an unpacked copy, and `f`'s answer (`.1`) says whether the entry
    /// may be packed afterwards (as [`KeyMap::repack`] would). A key that was packed, or was
    /// absent, and can be packed after `f` never enters the table: that round trip (a slot
    /// block and a key copy allocated, inserted in a hash table and a leaf index, then taken
    /// out again) cost a replicated write more than the change itself. The result is the same
    /// as [`KeyMap::get_or_insert_with`], `f`, then [`KeyMap::repack`] when asked.
    pub fn update<R>(
        &mut self,
        hash: u64,
        key: &[u8],
        db: &mut Db,
        fresh: impl FnOnce() -> E,
        f: impl FnOnce(&mut E, &Db) -> (R, bool),
    ) -> R {
        debug_assert_eq!(hash, lattice_store::key_hash(key));
        if let Some(e) = self.get_keyed_mut(hash, key) {
            let (r, pack) = f(e, db);
            if pack {
                self.repack(hash, key, db);
            }
            return r;
        }
        self.ensure_tables();
        self.changes.note(hash);
        if let Some((l, at)) = self.packed_of(hash, key, db) {
            let mut e = E::unpack(self.packed[l][at].1);
            let (r, pack) = f(&mut e, db);
            // What `take_packed` then `repack` would leave when the store still holds the key
            // marked (and no removed marked key is pending): the same record, in place.
            let stored_marked = db.get_raw_hashed(hash, key).is_some_and(|s| s.is_marked());
            if let Some(p) = pack.then(|| e.pack()).flatten() {
                if stored_marked && db.marked_gone() == 0 {
                    self.packed[l][at].1 = p;
                    return r;
                }
            }
            self.take_packed(hash, key, db);
            self.insert_slot(hash, key, e);
            if pack {
                self.repack(hash, key, db);
            }
            return r;
        }
        let mut e = fresh();
        let (r, pack) = f(&mut e, db);
        if let Some(p) = pack.then(|| e.pack()).flatten() {
            if self.insert_packed(hash, key, p, db) {
                return r;
            }
        }
        self.insert_slot(hash, key, e);
        r
    }

    /// Allocates the tables on first use: a node that never replicates pays nothing.
    fn ensure_tables(&mut self) {
        if self.tables.is_empty() {
            self.tables = (0..SHARDS).map(|_| HashTable::new()).collect();
            self.leaves = vec![Vec::new(); LEAVES];
            self.packed = vec![Vec::new(); LEAVES];
        }
    }

    /// Packs record `p` for `key`, which is in neither the table nor the packed records, if
    /// it can be (see [`KeyMap::mark_packed`]).
    fn insert_packed(&mut self, hash: u64, key: &[u8], p: E::Packed, db: &mut Db) -> bool {
        let Some(at) = self.mark_packed(hash, key, db) else {
            return false;
        };
        self.put_packed(hash, at, p);
        true
    }

    /// Where `key`'s record goes in its leaf's packed records, having marked the key in the
    /// store; None (nothing marked) when another key's record has its hash or the store
    /// does not hold the key (to carry the mark). The tables exist.
    fn mark_packed(&mut self, hash: u64, key: &[u8], db: &mut Db) -> Option<usize> {
        let Err(at) = packed_at(&self.packed[leaf_of(hash)], hash) else {
            return None; // another key's record has this hash
        };
        if db.marked_gone() > 0 && db.was_marked(hash, key) {
            return None; // removed marked, not yet forgotten: the mark would name it twice
        }
        db.set_mark(hash, key, true).then_some(at)
    }

    /// Inserts a record at `at` (from [`KeyMap::mark_packed`]) of its leaf.
    fn put_packed(&mut self, hash: u64, at: usize, p: E::Packed) {
        let records = &mut self.packed[leaf_of(hash)];
        if records.len() == records.capacity() {
            // A quarter more, not double: the records are most of a replicated key's bytes.
            records.reserve_exact(2.max(records.len() / 4));
        }
        records.insert(at, (hash, p));
        self.packed_len += 1;
        self.len += 1;
    }

    /// Packs `key`'s entry if it can be ([`Pack::pack`]), no other key's record has its hash
    /// and the store holds the key (to carry the mark). The caller vouches that the store holds
    /// what the packed form leaves out.
    pub fn repack(&mut self, hash: u64, key: &[u8], db: &mut Db) {
        let Some(p) = self.get(hash, key).and_then(E::pack) else {
            return;
        };
        // In the table, so the tables exist.
        if let Some(at) = self.mark_packed(hash, key, db) {
            self.remove_slot(hash, key);
            self.put_packed(hash, at, p);
        }
    }

    fn table(&self, hash: u64) -> Option<&HashTable<Box<Slot<E>>>> {
        self.tables.get(shard_of(hash))
    }

    /// The entry of `key` if it is in the table (not packed).
    pub fn get(&self, hash: u64, key: &[u8]) -> Option<&E> {
        self.table(hash)?
            .find(table_hash(hash), |s| s.hash == hash && s.key[..] == *key)
            .map(|s| &s.entry)
    }

    /// The entry of `key`, unpacked into the table if it was packed.
    pub fn get_mut(&mut self, hash: u64, key: &[u8], db: &mut Db) -> Option<&mut E> {
        self.unpack_key(hash, key, db);
        self.get_keyed_mut(hash, key)
    }

    /// The entry of `key` if it is in the table (not packed).
    pub fn get_keyed_mut(&mut self, hash: u64, key: &[u8]) -> Option<&mut E> {
        self.changes.note(hash);
        self.tables
            .get_mut(shard_of(hash))?
            .find_mut(table_hash(hash), |s| s.hash == hash && s.key[..] == *key)
            .map(|s| &mut s.entry)
    }

    /// Looks `key` up only to bring its slot (or its leaf's packed records) into cache ahead
    /// of use; changes nothing.
    pub fn prefetch(&self, hash: u64, key: &[u8]) {
        let packed = self
            .packed
            .get(leaf_of(hash))
            .and_then(|v| v.first().map(|r| r.0));
        std::hint::black_box((self.get(hash, key).is_some(), packed));
    }

    /// The entry of `key` (unpacked into the table if it was packed), created by `fresh` if
    /// there is none. `key` is cloned only then.
    pub fn get_or_insert_with(
        &mut self,
        hash: u64,
        key: &[u8],
        db: &mut Db,
        fresh: impl FnOnce() -> E,
    ) -> &mut E {
        self.get_or_insert_keyed(hash, key, db, fresh).1
    }

    /// [`KeyMap::get_or_insert_with`], also handing out the map's own copy of the key (a
    /// reference-counted clone of it costs no allocation).
    pub fn get_or_insert_keyed(
        &mut self,
        hash: u64,
        key: &[u8],
        db: &mut Db,
        fresh: impl FnOnce() -> E,
    ) -> (&Bytes, &mut E) {
        debug_assert_eq!(hash, lattice_store::key_hash(key));
        self.unpack_key(hash, key, db);
        self.insert_slot_with(hash, key, fresh)
    }

    fn insert_slot(&mut self, hash: u64, key: &[u8], entry: E) {
        let mut entry = Some(entry);
        self.insert_slot_with(hash, key, || entry.take().expect("called once"));
    }

    fn insert_slot_with(
        &mut self,
        hash: u64,
        key: &[u8],
        fresh: impl FnOnce() -> E,
    ) -> (&Bytes, &mut E) {
        self.changes.note(hash);
        self.ensure_tables();
        match self.tables[shard_of(hash)].entry(
            table_hash(hash),
            |s| s.hash == hash && s.key[..] == *key,
            |s| table_hash(s.hash),
        ) {
            hashbrown::hash_table::Entry::Occupied(o) => {
                let slot = o.into_mut();
                (&slot.key, &mut slot.entry)
            }
            hashbrown::hash_table::Entry::Vacant(v) => {
                self.len += 1;
                let leaf = &mut self.leaves[leaf_of(hash)];
                let at = leaf.partition_point(|&h| h < hash);
                leaf.insert(at, hash);
                let slot = v
                    .insert(Box::new(Slot {
                        hash,
                        key: Bytes::copy_from_slice(key),
                        entry: fresh(),
                    }))
                    .into_mut();
                (&slot.key, &mut slot.entry)
            }
        }
    }

    /// Removes `key`'s entry, packed or not.
    pub fn remove(&mut self, hash: u64, key: &[u8], db: &mut Db) -> Option<E> {
        self.unpack_key(hash, key, db);
        self.remove_slot(hash, key)
    }

    fn remove_slot(&mut self, hash: u64, key: &[u8]) -> Option<E> {
        self.changes.note(hash);
        let slot = self
            .tables
            .get_mut(shard_of(hash))?
            .find_entry(table_hash(hash), |s| s.hash == hash && s.key[..] == *key)
            .ok()?
            .remove()
            .0;
        self.len -= 1;
        let leaf = &mut self.leaves[leaf_of(hash)];
        let at = leaf.partition_point(|&h| h < hash);
        debug_assert_eq!(leaf.get(at), Some(&hash), "leaf index lost a key");
        leaf.remove(at);
        Some(slot.entry)
    }

    /// Every entry in the table, in no particular order (for counts and sums only; packed
    /// entries are plain strings, which such counts skip).
    pub fn keyed_values(&self) -> impl Iterator<Item = &E> {
        self.tables.iter().flat_map(|t| t.iter().map(|s| &s.entry))
    }

    /// Whether `leaf` holds no key, packed or not (a walk over all 65,536 leaves skips most
    /// of them this way without building their empty lists).
    pub fn leaf_is_empty(&self, leaf: usize) -> bool {
        self.leaves.get(leaf).is_none_or(Vec::is_empty)
            && self.packed.get(leaf).is_none_or(Vec::is_empty)
    }

    /// The keys of `leaf` with their entries in (hash, key) order, packed ones included (their
    /// keys read from `db`).
    pub fn leaf_entries(&self, leaf: usize, db: &Db) -> Vec<(Bytes, Cow<'_, E>)> {
        let keyed = self.leaf(leaf);
        let packed = self.packed.get(leaf).map_or(&[][..], |v| &v[..]);
        let mut out = Vec::with_capacity(keyed.len() + packed.len());
        let mut keyed = keyed.into_iter().peekable();
        for &(h, p) in packed {
            while let Some(s) = keyed.next_if(|s| s.hash < h) {
                out.push((s.key.clone(), Cow::Borrowed(&s.entry)));
            }
            let Some(key) = db.marked_key(h) else {
                debug_assert!(false, "a packed record whose key the store does not mark");
                continue;
            };
            // Keys sharing the hash are in the table: the packed one goes among them in order.
            while let Some(s) = keyed.next_if(|s| s.hash == h && s.key[..] < *key) {
                out.push((s.key.clone(), Cow::Borrowed(&s.entry)));
            }
            out.push((Bytes::copy_from_slice(key), Cow::Owned(E::unpack(p))));
        }
        out.extend(keyed.map(|s| (s.key.clone(), Cow::Borrowed(&s.entry))));
        out
    }

    /// Calls `f` with every key of `leaf` and its entry, packed ones as their records, in no
    /// particular order and without copying a key or allocating: for what does not need
    /// [`KeyMap::leaf_entries`]'s order (sums over a leaf, or whether a leaf holds a key of
    /// some slot groups). Stops early when `f` returns false; returns false then.
    pub fn visit_leaf(
        &self,
        leaf: usize,
        db: &Db,
        mut f: impl FnMut(&[u8], LeafEntry<'_, E>) -> bool,
    ) -> bool {
        if let Some(hashes) = self.leaves.get(leaf) {
            let mut last = None;
            for &h in hashes {
                // Keys sharing a hash are listed once per key: their slots are found together.
                if last == Some(h) {
                    continue;
                }
                last = Some(h);
                for s in self.tables[shard_of(h)]
                    .iter_hash(table_hash(h))
                    .filter(|s| s.hash == h)
                {
                    if !f(&s.key, LeafEntry::Keyed(&s.entry)) {
                        return false;
                    }
                }
            }
        }
        for &(h, p) in self.packed.get(leaf).map_or(&[][..], |v| &v[..]) {
            let Some(key) = db.marked_key(h) else {
                debug_assert!(false, "a packed record whose key the store does not mark");
                continue;
            };
            if !f(key, LeafEntry::Packed(p)) {
                return false;
            }
        }
        true
    }

    /// The keys of `leaf` in the table (not packed) in (hash, key) order.
    fn leaf(&self, leaf: usize) -> Vec<&Slot<E>> {
        let Some(hashes) = self.leaves.get(leaf) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(hashes.len());
        let mut i = 0;
        while i < hashes.len() {
            let h = hashes[i];
            let same = hashes[i..].iter().take_while(|&&x| x == h).count();
            let start = out.len();
            let table = &self.tables[shard_of(h)];
            out.extend(
                table
                    .iter_hash(table_hash(h))
                    .filter(|s| s.hash == h)
                    .map(|s| &**s),
            );
            debug_assert_eq!(
                out.len() - start,
                same,
                "leaf index out of step with the table"
            );
            out[start..].sort_by(|a, b| a.key.cmp(&b.key));
            i += same;
        }
        out
    }

    /// Every entry in (hash, key) order, packed ones included.
    pub fn iter_ordered<'a>(
        &'a self,
        db: &'a Db,
    ) -> impl Iterator<Item = (Bytes, Cow<'a, E>)> + 'a {
        (0..self.leaves.len()).flat_map(move |l| self.leaf_entries(l, db))
    }

    /// Starts noting which keys' entries change, for [`KeyMap::take_changes`].
    pub fn track_changes(&mut self) {
        self.changes.start();
    }

    /// The hashes of the keys whose entries may have changed since the last call (any
    /// exclusive use counts); [`Changed::Everything`] on the first call.
    pub fn take_changes(&mut self) -> Changed {
        self.changes.take()
    }

    /// Asserts that the leaf index lists exactly the table's keys, and that every packed
    /// record's key is marked in `db` (and only those). A walk over every key, so for tests
    /// and simulations rather than every step.
    pub fn check_invariants(&self, db: &Db) {
        let calls = self.checks.get();
        self.checks.set(calls + 1);
        if !calls.is_multiple_of(DEEP_CHECK_EVERY) {
            return;
        }
        let indexed: usize = self.leaves.iter().map(Vec::len).sum();
        let held: usize = self.tables.iter().map(HashTable::len).sum();
        assert_eq!(held + self.packed_len, self.len, "key count drifted");
        assert_eq!(indexed, held, "leaf index and table disagree");
        let records: usize = self.packed.iter().map(Vec::len).sum();
        assert_eq!(records, self.packed_len, "packed count drifted");
        let marked = db.iter().filter(|e| e.is_marked()).count();
        assert_eq!(
            marked + db.marked_gone(),
            records,
            "marks and packed records differ"
        );
        for l in 0..self.leaves.len() {
            self.check_leaf(l, db);
        }
        self.changes.check_invariants();
    }

    /// The part of [`KeyMap::check_invariants`] that concerns the leaves of `hashes` (sorted,
    /// as [`KeyMap::take_changes`] gives them), at a cost that follows the keys changed: the
    /// counts over all leaves and the store's marks are left to the whole walk.
    pub fn check_changed(&self, hashes: &[u64], db: &Db) {
        let mut leaves: Vec<usize> = hashes.iter().map(|&h| leaf_of(h)).collect();
        leaves.sort_unstable();
        leaves.dedup();
        for l in leaves.into_iter().filter(|&l| l < self.leaves.len()) {
            self.check_leaf(l, db);
        }
        self.changes.check_invariants();
    }

    /// One Merkle leaf: its index and packed records are sorted and hold only its hashes;
    /// every packed record's key is marked in `db` and not also in the table.
    fn check_leaf(&self, l: usize, db: &Db) {
        let records = &self.packed[l];
        assert!(
            records.windows(2).all(|w| w[0].0 < w[1].0),
            "packed records unsorted or a hash twice"
        );
        for &(h, _) in records {
            assert_eq!(leaf_of(h), l, "packed record in the wrong leaf");
            let key = db.marked_key(h).expect("a packed record's key is marked");
            assert!(
                self.get(h, key).is_none(),
                "a key both packed and in the table"
            );
        }
        let hashes = &self.leaves[l];
        assert!(
            hashes.windows(2).all(|w| w[0] <= w[1]),
            "leaf index unsorted"
        );
        assert!(
            hashes.iter().all(|&h| leaf_of(h) == l),
            "hash in the wrong leaf"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{KeyMap, LeafEntry, Pack, LEAVES};
    use lattice_store::{key_hash, Db, Str, Value};

    /// Even entries pack (to themselves).
    impl Pack for u32 {
        type Packed = u32;
        fn pack(&self) -> Option<u32> {
            self.is_multiple_of(2).then_some(*self)
        }
        fn unpack(p: u32) -> u32 {
            p
        }
    }

    fn ordered(m: &KeyMap<u32>, db: &Db) -> Vec<(u64, Vec<u8>, u32)> {
        m.iter_ordered(db)
            .map(|(k, e)| (key_hash(&k), k.to_vec(), *e))
            .collect()
    }

    /// `visit_leaf` sees exactly what `leaf_entries` lists, packed records as themselves, and
    /// stops when asked.
    #[test]
    fn a_leaf_visit_sees_every_entry_of_the_ordered_list() {
        let mut db = Db::new();
        let mut m: KeyMap<u32> = KeyMap::default();
        for i in 0..5_000u32 {
            let k = format!("k{i}").into_bytes();
            db.insert(&k, Value::Str(Str::from_bytes(b"v")), None, 0);
            *m.get_or_insert_with(key_hash(&k), &k, &mut db, || 0) += i;
            m.repack(key_hash(&k), &k, &mut db);
        }
        let mut visited = 0;
        for leaf in 0..LEAVES {
            let mut listed: Vec<(Vec<u8>, u32)> = m
                .leaf_entries(leaf, &db)
                .into_iter()
                .map(|(k, e)| (k.to_vec(), *e))
                .collect();
            let mut seen = Vec::new();
            assert!(m.visit_leaf(leaf, &db, |k, e| {
                let v = match e {
                    LeafEntry::Keyed(v) => {
                        assert!(v % 2 == 1, "an even entry is packed");
                        *v
                    }
                    LeafEntry::Packed(p) => p,
                };
                seen.push((k.to_vec(), v));
                true
            }));
            listed.sort();
            seen.sort();
            assert_eq!(seen, listed, "leaf {leaf}");
            visited += seen.len();
            if seen.len() > 1 {
                let mut calls = 0;
                assert!(!m.visit_leaf(leaf, &db, |_, _| {
                    calls += 1;
                    false
                }));
                assert_eq!(calls, 1, "a visit stops at the first false");
            }
        }
        assert_eq!(visited, 5_000);
    }

    #[test]
    fn ordered_walks_follow_hash_then_key_and_survive_removal() {
        let mut db = Db::new();
        let mut m: KeyMap<u32> = KeyMap::default();
        let keys: Vec<Vec<u8>> = (0..2_000u32)
            .map(|i| format!("k{i}").into_bytes())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            db.insert(k, Value::Str(Str::from_bytes(b"v")), None, 0);
            *m.get_or_insert_with(key_hash(k), k, &mut db, || 0) += i as u32;
            m.repack(key_hash(k), k, &mut db);
        }
        assert_eq!(m.packed_len(), keys.len() / 2, "the even ones");
        // A second insert of an existing key finds it (packed or not).
        *m.get_or_insert_with(key_hash(b"k7"), b"k7", &mut db, || 1_000) += 1;
        assert_eq!(m.get(key_hash(b"k7"), b"k7"), Some(&8));
        *m.get_or_insert_with(key_hash(b"k8"), b"k8", &mut db, || 1_000) += 2;
        assert_eq!(m.get(key_hash(b"k8"), b"k8"), Some(&10), "unpacked");
        m.repack(key_hash(b"k8"), b"k8", &mut db);
        assert_eq!(m.get(key_hash(b"k8"), b"k8"), None, "packed again");
        assert_eq!(m.get_any(key_hash(b"k8"), b"k8", &db).as_deref(), Some(&10));
        assert_eq!(m.len(), keys.len());
        m.check_invariants(&db);
        let value = |i: usize| {
            if i == 7 {
                8
            } else if i == 8 {
                10
            } else {
                i as u32
            }
        };
        let mut expected: Vec<(u64, Vec<u8>, u32)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (key_hash(k), k.clone(), value(i)))
            .collect();
        expected.sort();
        assert_eq!(ordered(&m, &db), expected);
        // Removed from the store first (as a DEL before its capture): the mark still tells.
        for k in keys.iter().step_by(3) {
            db.remove(k);
            assert!(m.remove(key_hash(k), k, &mut db).is_some());
            assert!(m.remove(key_hash(k), k, &mut db).is_none());
        }
        assert_eq!(db.marked_gone(), 0, "forgotten when their records went");
        m.check_invariants(&db);
        expected.retain(|(_, k, _)| {
            let i: usize = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
            !i.is_multiple_of(3)
        });
        assert_eq!(ordered(&m, &db), expected);
        assert!(m.get_any(key_hash(b"k0"), b"k0", &db).is_none());
        assert_eq!(m.get_mut(key_hash(b"k1"), b"k1", &mut db).copied(), Some(1));
        assert_eq!(m.get_mut(key_hash(b"k2"), b"k2", &mut db).copied(), Some(2));
        m.check_invariants(&db);
    }

    #[test]
    fn a_packed_record_stays_its_keys_while_the_store_replaces_the_key() {
        let mut db = Db::new();
        let mut m: KeyMap<u32> = KeyMap::default();
        let (a, b) = (&b"a"[..], &b"b"[..]);
        let (ha, hb) = (key_hash(a), key_hash(b));
        db.insert(a, Value::Str(Str::from_bytes(b"v")), None, 0);
        *m.get_or_insert_with(ha, a, &mut db, || 0) = 2;
        // Not packed while the store lacks the key (nothing could carry the mark).
        *m.get_or_insert_with(hb, b, &mut db, || 0) = 4;
        m.repack(hb, b, &mut db);
        m.repack(ha, a, &mut db);
        assert_eq!(m.packed_len(), 1);
        assert!(m.get(hb, b).is_some());
        m.check_invariants(&db);
        // `a` removed from the store and stored again before its record was used: still `a`'s.
        db.remove(a);
        db.insert(a, Value::Str(Str::from_bytes(b"w")), None, 0);
        assert_eq!(m.get_any(ha, a, &db).as_deref(), Some(&2));
        assert_eq!(m.get_mut(ha, a, &mut db).copied(), Some(2));
        assert_eq!(db.marked_gone(), 0);
        assert!(!db.get_raw(a).unwrap().is_marked());
        m.check_invariants(&db);
    }
}

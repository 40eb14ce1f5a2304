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

use bytes::Bytes;
use hashbrown::HashTable;

use super::merkle::{leaf_of, LEAVES};

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

pub struct KeyMap<E> {
    /// `SHARDS` tables (allocated on first use), a key in `tables[shard_of(hash)]`. The tables
    /// hold pointers: a table keeps up to half its buckets empty after it grows, and an empty
    /// bucket then costs 9 bytes instead of a whole slot (about 110).
    tables: Vec<HashTable<Box<Slot<E>>>>,
    len: usize,
    /// Per Merkle leaf, the hashes of its keys in ascending order (a hash appears once per key,
    /// so twice for two keys that share a 64-bit hash).
    leaves: Vec<Vec<u64>>,
}

impl<E> Default for KeyMap<E> {
    fn default() -> Self {
        KeyMap {
            tables: Vec::new(),
            len: 0,
            leaves: Vec::new(),
        }
    }
}

impl<E> KeyMap<E> {
    pub fn len(&self) -> usize {
        self.len
    }

    fn table(&self, hash: u64) -> Option<&HashTable<Box<Slot<E>>>> {
        self.tables.get(shard_of(hash))
    }

    pub fn get(&self, hash: u64, key: &[u8]) -> Option<&E> {
        self.table(hash)?
            .find(table_hash(hash), |s| s.hash == hash && s.key[..] == *key)
            .map(|s| &s.entry)
    }

    pub fn get_mut(&mut self, hash: u64, key: &[u8]) -> Option<&mut E> {
        self.tables
            .get_mut(shard_of(hash))?
            .find_mut(table_hash(hash), |s| s.hash == hash && s.key[..] == *key)
            .map(|s| &mut s.entry)
    }

    /// Looks `key` up only to bring its slot into cache ahead of use; changes nothing.
    pub fn prefetch(&self, hash: u64, key: &[u8]) {
        std::hint::black_box(self.get(hash, key).is_some());
    }

    /// The entry of `key`, created by `fresh` if there is none. `key` is cloned only then.
    pub fn get_or_insert_with(
        &mut self,
        hash: u64,
        key: &[u8],
        fresh: impl FnOnce() -> E,
    ) -> &mut E {
        self.get_or_insert_keyed(hash, key, fresh).1
    }

    /// [`KeyMap::get_or_insert_with`], also handing out the map's own copy of the key (a
    /// reference-counted clone of it costs no allocation).
    pub fn get_or_insert_keyed(
        &mut self,
        hash: u64,
        key: &[u8],
        fresh: impl FnOnce() -> E,
    ) -> (&Bytes, &mut E) {
        debug_assert_eq!(hash, lattice_store::key_hash(key));
        if self.tables.is_empty() {
            // Allocated on first use: a node that never replicates pays nothing.
            self.tables = (0..SHARDS).map(|_| HashTable::new()).collect();
            self.leaves = vec![Vec::new(); LEAVES];
        }
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

    pub fn remove(&mut self, hash: u64, key: &[u8]) -> Option<E> {
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

    /// Every entry, in no particular order (for counts and sums only).
    pub fn values(&self) -> impl Iterator<Item = &E> {
        self.tables.iter().flat_map(|t| t.iter().map(|s| &s.entry))
    }

    /// The keys of `leaf` in (hash, key) order.
    pub fn leaf(&self, leaf: usize) -> Vec<&Slot<E>> {
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

    /// Every entry in (hash, key) order.
    pub fn iter_ordered(&self) -> impl Iterator<Item = &Slot<E>> {
        (0..self.leaves.len()).flat_map(move |l| self.leaf(l))
    }

    /// Asserts that the leaf index lists exactly the table's keys. A walk over every leaf, so
    /// for tests rather than every simulated step.
    #[cfg(test)]
    pub fn check_invariants(&self) {
        let indexed: usize = self.leaves.iter().map(Vec::len).sum();
        let held: usize = self.tables.iter().map(HashTable::len).sum();
        assert_eq!(held, self.len, "key count drifted");
        assert_eq!(indexed, self.len, "leaf index and table disagree");
        for (l, hashes) in self.leaves.iter().enumerate() {
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
}

#[cfg(test)]
mod tests {
    use super::KeyMap;
    use lattice_store::key_hash;

    #[test]
    fn ordered_walks_follow_hash_then_key_and_survive_removal() {
        let mut m: KeyMap<u32> = KeyMap::default();
        let keys: Vec<Vec<u8>> = (0..2_000u32)
            .map(|i| format!("k{i}").into_bytes())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            *m.get_or_insert_with(key_hash(k), k, || 0) += i as u32;
        }
        // A second insert of an existing key finds it.
        *m.get_or_insert_with(key_hash(b"k7"), b"k7", || 1_000) += 1;
        assert_eq!(m.get(key_hash(b"k7"), b"k7"), Some(&8));
        assert_eq!(m.len(), keys.len());
        m.check_invariants();
        let mut expected: Vec<(u64, Vec<u8>)> =
            keys.iter().map(|k| (key_hash(k), k.clone())).collect();
        expected.sort();
        let walked: Vec<(u64, Vec<u8>)> =
            m.iter_ordered().map(|s| (s.hash, s.key.to_vec())).collect();
        assert_eq!(walked, expected);
        for k in keys.iter().step_by(3) {
            assert!(m.remove(key_hash(k), k).is_some());
            assert!(m.remove(key_hash(k), k).is_none());
        }
        m.check_invariants();
        expected.retain(|(_, k)| {
            let i: usize = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
            !i.is_multiple_of(3)
        });
        let walked: Vec<(u64, Vec<u8>)> =
            m.iter_ordered().map(|s| (s.hash, s.key.to_vec())).collect();
        assert_eq!(walked, expected);
        assert!(m.get(key_hash(b"k0"), b"k0").is_none());
        assert_eq!(m.get_mut(key_hash(b"k1"), b"k1").copied(), Some(1));
    }
}

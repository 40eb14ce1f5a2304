//! The Hash value type: a map from field to value, both byte strings.
//!
//! Fields live in a vector of pairs. A small hash (what Redis keeps as a listpack) is searched
//! linearly and keeps insertion order exactly, removals included, as a listpack does. Once it
//! outgrows the limits it gets an index (a `HashTable` of positions keyed by the fixed
//! [`key_hash`]) and removals swap the last pair into the hole, so every operation is O(1).
//! Each index entry keeps 32 bits of its field's hash next to the position, so growing the
//! index never reads the fields: rehashing them, a cache miss per field, had made the insert
//! that grew a 115k-field hash take 12 ms, a stall every pipelined client saw in its p99.
//! Iteration order is therefore a pure function of the history, never of the process.
//!
//! Scanning a large hash walks positions from the last to the first: a removal only ever moves
//! the last pair to a lower position and insertions append, so a pair present for the whole scan
//! cannot jump from the unvisited part into the visited one and is returned at least once.

use hashbrown::HashTable;

use crate::keyhash::key_hash;

/// The size limits under which a hash stays compact (Redis's `hash-max-listpack-entries` and
/// `hash-max-listpack-value`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_entries: usize,
    pub max_value: usize,
}

impl Default for Limits {
    /// Redis 7.0's defaults.
    fn default() -> Self {
        Limits {
            max_entries: 512,
            max_value: 64,
        }
    }
}

/// An index entry: a position in `pairs` and 32 bits of that pair's field hash, from which
/// the table's hash is rebuilt when it grows (see the module comment). 8 bytes, as a bare
/// position was.
#[derive(Clone, Copy, Debug)]
struct IndexEntry {
    pos: u32,
    hash32: u32,
}

/// The part of [`key_hash`] an index entry keeps.
#[inline]
fn hash32(field: &[u8]) -> u32 {
    key_hash(field) as u32
}

/// The index's 64-bit hash, from the kept 32 bits alone, spread as the keyspace's tables
/// spread theirs ([`crate::db::table_hash`]): the low bits (the bucket) stay as varied as the
/// input's and the top bits, where hashbrown takes its 7-bit tag, are filled.
#[inline]
fn index_hash(hash32: u32) -> u64 {
    crate::db::table_hash(u64::from(hash32))
}

/// [`index_hash`] of a field.
#[inline]
fn field_index_hash(field: &[u8]) -> u64 {
    index_hash(hash32(field))
}

/// Indexes the pair at `pos`. Positions are 32 bits: a hash of 4 billion fields would need
/// hundreds of gigabytes before it got there.
fn index_insert(t: &mut HashTable<IndexEntry>, field: &[u8], pos: usize) {
    let pos = u32::try_from(pos).expect("a hash holds fewer than 2^32 fields");
    let hash32 = hash32(field);
    t.insert_unique(index_hash(hash32), IndexEntry { pos, hash32 }, |e| {
        index_hash(e.hash32)
    });
}

/// A field and its value.
pub type Pair<'a> = (&'a [u8], &'a [u8]);

/// A Redis hash value.
#[derive(Clone, Default)]
pub struct Hash {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Positions in `pairs` by field; present once the hash is "hashtable"-encoded.
    index: Option<HashTable<IndexEntry>>,
    /// Sum of field and value lengths.
    bytes: usize,
}

impl std::fmt::Debug for Hash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.pairs.iter().map(|(k, v)| {
                (
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            }))
            .finish()
    }
}

impl PartialEq for Hash {
    /// Same fields with the same values, whatever the order.
    fn eq(&self, other: &Hash) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl Hash {
    pub fn new() -> Hash {
        Hash::default()
    }

    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// What OBJECT ENCODING reports.
    pub fn encoding(&self) -> &'static str {
        if self.index.is_some() {
            "hashtable"
        } else {
            "listpack"
        }
    }

    /// True while the hash is compact (Redis's listpack): small enough to be returned by HSCAN
    /// in one go.
    pub fn is_compact(&self) -> bool {
        self.index.is_none()
    }

    /// Approximate heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        let pairs = self.pairs.capacity() * std::mem::size_of::<(Vec<u8>, Vec<u8>)>();
        let index = self.index.as_ref().map_or(0, |t| {
            t.capacity() * (std::mem::size_of::<IndexEntry>() + 1)
        });
        pairs + index + self.bytes
    }

    fn find(&self, field: &[u8]) -> Option<usize> {
        match &self.index {
            Some(t) => t
                .find(field_index_hash(field), |e| {
                    self.pairs[e.pos as usize].0 == field
                })
                .map(|e| e.pos as usize),
            None => self.pairs.iter().position(|(k, _)| k == field),
        }
    }

    /// See [`crate::Db::prefetch`]: finds `field` in an indexed hash and starts fetching its
    /// value. A compact hash is left alone (its scan would cost more than it saves).
    pub fn prefetch(&self, field: &[u8]) {
        if self.index.is_some() {
            if let Some(i) = self.find(field) {
                crate::prefetch_line(self.pairs[i].1.as_ptr());
            }
        }
    }

    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        self.find(field).map(|i| self.pairs[i].1.as_slice())
    }

    pub fn contains(&self, field: &[u8]) -> bool {
        self.find(field).is_some()
    }

    /// Sets `field` to `value`; true when the field is new. Converts to the indexed form when
    /// the pair or the size goes over `limits` (never back, as in Redis).
    pub fn insert(&mut self, field: &[u8], value: &[u8], limits: Limits) -> bool {
        if self.index.is_none()
            && (field.len() > limits.max_value || value.len() > limits.max_value)
        {
            self.convert();
        }
        let created = match self.find(field) {
            Some(i) => {
                let slot = &mut self.pairs[i].1;
                self.bytes = self.bytes - slot.len() + value.len();
                slot.clear();
                slot.extend_from_slice(value);
                false
            }
            None => {
                let i = self.pairs.len();
                self.pairs.push((field.to_vec(), value.to_vec()));
                self.bytes += field.len() + value.len();
                if let Some(t) = &mut self.index {
                    index_insert(t, field, i);
                }
                true
            }
        };
        if self.index.is_none() && self.pairs.len() > limits.max_entries {
            self.convert();
        }
        created
    }

    /// Removes `field`; true when it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        let Some(i) = self.find(field) else {
            return false;
        };
        match &mut self.index {
            None => {
                let (k, v) = self.pairs.remove(i);
                self.bytes -= k.len() + v.len();
            }
            Some(t) => {
                let h = field_index_hash(field);
                if let Ok(e) = t.find_entry(h, |e| e.pos as usize == i) {
                    e.remove();
                }
                let last = self.pairs.len() - 1;
                if i != last {
                    // The last pair moves into the hole: repoint its index entry.
                    let hl = field_index_hash(&self.pairs[last].0);
                    if let Some(e) = t.find_mut(hl, |e| e.pos as usize == last) {
                        e.pos = i as u32;
                    }
                }
                let (k, v) = self.pairs.swap_remove(i);
                self.bytes -= k.len() + v.len();
            }
        }
        true
    }

    /// Builds the index: the hash stops being compact.
    fn convert(&mut self) {
        if self.index.is_some() {
            return;
        }
        let mut t = HashTable::with_capacity(self.pairs.len());
        for (i, (k, _)) in self.pairs.iter().enumerate() {
            index_insert(&mut t, k, i);
        }
        self.index = Some(t);
    }

    /// Every pair, in the hash's (deterministic) order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Pair<'_>> + '_ {
        self.pairs.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    /// The `n`th pair in iteration order (for random picks).
    pub fn nth(&self, n: usize) -> Option<Pair<'_>> {
        self.pairs.get(n).map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    /// One step of HSCAN: up to about `count` pairs from `cursor` (0 starts), and the cursor to
    /// continue from (0 when done). A compact hash is returned whole.
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<Pair<'_>>) {
        if self.index.is_none() {
            return (0, self.iter().collect());
        }
        // The cursor counts the positions not visited yet (0 = start: all of them).
        let len = self.pairs.len();
        let mut remaining = if cursor == 0 {
            len
        } else {
            (cursor as usize).min(len)
        };
        let mut out = Vec::with_capacity(count.min(remaining));
        while remaining > 0 && out.len() < count {
            remaining -= 1;
            let (k, v) = &self.pairs[remaining];
            out.push((k.as_slice(), v.as_slice()));
        }
        (remaining as u64, out)
    }
}

impl Hash {
    /// Checks the structure's invariants; panics with a description on violation.
    pub fn check_invariants(&self) {
        let bytes: usize = self.pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert_eq!(bytes, self.bytes, "hash byte count out of step");
        if let Some(t) = &self.index {
            assert_eq!(t.len(), self.pairs.len(), "index size out of step");
            for (i, (k, _)) in self.pairs.iter().enumerate() {
                let entry = t.find(field_index_hash(k), |e| self.pairs[e.pos as usize].0 == *k);
                assert_eq!(
                    entry.map(|e| (e.pos as usize, e.hash32)),
                    Some((i, hash32(k))),
                    "field indexed at the wrong position or with the wrong hash"
                );
            }
        } else {
            for (i, (k, _)) in self.pairs.iter().enumerate() {
                assert!(
                    !self.pairs[..i].iter().any(|(f, _)| f == k),
                    "field stored twice"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Limits = Limits {
        max_entries: 4,
        max_value: 8,
    };

    fn fields(h: &Hash) -> Vec<String> {
        h.iter()
            .map(|(k, _)| String::from_utf8(k.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn compact_keeps_insertion_order() {
        let mut h = Hash::new();
        for f in ["a", "b", "c"] {
            assert!(h.insert(f.as_bytes(), b"1", SMALL));
        }
        assert!(!h.insert(b"b", b"2", SMALL));
        assert!(h.remove(b"a"));
        assert!(!h.remove(b"a"));
        assert!(h.insert(b"a", b"3", SMALL));
        assert_eq!(fields(&h), ["b", "c", "a"]);
        assert_eq!(h.get(b"b"), Some(&b"2"[..]));
        assert_eq!(h.encoding(), "listpack");
        assert_eq!(h.bytes, 6);
    }

    #[test]
    fn converts_on_size_and_length() {
        let mut h = Hash::new();
        for i in 0..5 {
            h.insert(format!("f{i}").as_bytes(), b"v", SMALL);
        }
        assert_eq!(h.encoding(), "hashtable");
        let mut h = Hash::new();
        h.insert(b"f", b"123456789", SMALL);
        assert_eq!(h.encoding(), "hashtable");
        let mut h = Hash::new();
        h.insert(b"123456789", b"v", SMALL);
        assert_eq!(h.encoding(), "hashtable");
    }

    #[test]
    fn indexed_removals_keep_lookups_right() {
        let mut h = Hash::new();
        for i in 0..100 {
            h.insert(format!("f{i}").as_bytes(), format!("{i}").as_bytes(), SMALL);
        }
        for i in (0..100).step_by(3) {
            assert!(h.remove(format!("f{i}").as_bytes()));
        }
        for i in 0..100 {
            let v = h.get(format!("f{i}").as_bytes());
            if i % 3 == 0 {
                assert_eq!(v, None);
            } else {
                assert_eq!(v, Some(format!("{i}").as_bytes()));
            }
        }
        assert_eq!(h.len(), 66);
        h.check_invariants();
    }

    #[test]
    fn scan_returns_every_stable_field_despite_changes() {
        let mut h = Hash::new();
        for i in 0..200 {
            h.insert(format!("f{i}").as_bytes(), b"v", SMALL);
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = 0;
        let mut step = 0;
        loop {
            let (next, batch) = h.scan(cursor, 7);
            for (k, _) in batch {
                seen.insert(k.to_vec());
            }
            // Churn: delete fields 0..100 (the volatile ones) and add new ones as we go.
            for j in 0..3 {
                h.remove(format!("f{}", step * 3 + j).as_bytes());
                h.insert(format!("new{step}-{j}").as_bytes(), b"v", SMALL);
            }
            step += 1;
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        for i in 0..200 {
            let f = format!("f{i}");
            if h.contains(f.as_bytes()) {
                assert!(seen.contains(f.as_bytes()), "{f} missed");
            }
        }
    }
}

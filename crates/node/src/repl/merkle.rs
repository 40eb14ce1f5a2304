//! A Merkle tree over key-hash ranges, for anti-entropy.
//!
//! Leaves are the 65,536 ranges of the top 16 bits of a key's hash; each leaf's digest is the
//! wrapping sum of its keys' digests (a key digest hashes the key and its whole encoded state),
//! so a change updates one leaf in O(1) without re-reading the leaf's other keys. Interior nodes
//! have 16 children and are recomputed lazily, only along paths under changed leaves.
//!
//! Two replicas compare top-down: the root, then the 16 children of every differing node, and
//! so on, so the digests exchanged grow with (differences x depth), not with the keyspace. Only
//! the keys of differing leaves are then shipped.

use super::group_sums::GroupSums;

/// Levels below the root: 16^4 = 65,536 leaves.
pub const DEPTH: u32 = 4;
pub const FANOUT: usize = 16;
pub const LEAVES: usize = FANOUT.pow(DEPTH);
/// log2(LEAVES): a leaf is the top `LEAF_BITS` bits of a key's hash.
pub const LEAF_BITS: u32 = 16;
const _: () = assert!(1 << LEAF_BITS == LEAVES);

/// The leaf a key belongs to.
pub fn leaf_of(key_hash: u64) -> usize {
    (key_hash >> (64 - LEAF_BITS)) as usize
}

/// Number of nodes at `level` (0 = root).
pub fn width(level: u32) -> usize {
    FANOUT.pow(level)
}

pub struct Merkle {
    /// `levels[l]` holds the digests of level `l`; `levels[DEPTH]` are the leaves.
    levels: Vec<Vec<u64>>,
    /// Leaves changed since interior nodes were last recomputed, each listed once (a flag per
    /// leaf says whether it is listed): at most `LEAVES` entries however many keys changed. A
    /// push per update grew with the writes between two refreshes, and a refresh after a
    /// million merged keys sorted a million entries while holding the node.
    dirty: Vec<usize>,
    listed: Vec<bool>,
    /// Digest sums per (check span, slot group) while moves run: every change here passes
    /// through, so they can never disagree with the leaves.
    pub(super) groups: GroupSums,
}

impl Default for Merkle {
    fn default() -> Self {
        Merkle::new()
    }
}

impl Merkle {
    pub fn new() -> Merkle {
        Merkle {
            levels: (0..=DEPTH).map(|l| vec![0; width(l)]).collect(),
            dirty: Vec::new(),
            listed: vec![false; LEAVES],
            groups: GroupSums::new(LEAVES),
        }
    }

    /// Replaces `key`'s contribution to its leaf: `old` and `new` are the key's digests before
    /// and after (0 for absent).
    pub fn update(&mut self, leaf: usize, key: &[u8], old: u64, new: u64) {
        if old == new {
            return;
        }
        self.groups.update(leaf, key, old, new);
        let l = &mut self.levels[DEPTH as usize][leaf];
        *l = l.wrapping_sub(old).wrapping_add(new);
        if !self.listed[leaf] {
            self.listed[leaf] = true;
            self.dirty.push(leaf);
        }
    }

    fn refresh(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let mut nodes = std::mem::take(&mut self.dirty);
        for &leaf in &nodes {
            self.listed[leaf] = false;
        }
        for level in (0..DEPTH as usize).rev() {
            for n in &mut nodes {
                *n /= FANOUT;
            }
            nodes.sort_unstable();
            nodes.dedup();
            for &n in &nodes {
                let children = &self.levels[level + 1][n * FANOUT..(n + 1) * FANOUT];
                self.levels[level][n] = combine(children);
            }
        }
    }

    /// The digest of node `index` at `level`.
    pub fn digest(&mut self, level: u32, index: usize) -> u64 {
        self.refresh();
        self.levels[level as usize][index]
    }

    /// Heap bytes held (the levels, the dirty-leaf list and the group sums).
    pub fn heap_bytes(&self) -> usize {
        self.levels.iter().map(|l| l.capacity() * 8).sum::<usize>()
            + self.dirty.capacity() * 8
            + self.listed.capacity()
            + self.groups.heap_bytes()
    }

    pub fn root(&mut self) -> u64 {
        self.digest(0, 0)
    }
}

/// An interior digest: order-sensitive over the children, so moving a key between ranges is
/// a change. (Children are fixed positions, so this is well defined.)
fn combine(children: &[u64]) -> u64 {
    let mut bytes = [0u8; FANOUT * 8];
    for (i, c) in children.iter().enumerate() {
        bytes[i * 8..(i + 1) * 8].copy_from_slice(&c.to_le_bytes());
    }
    if children.iter().all(|c| *c == 0) {
        return 0;
    }
    lattice_store::key_hash(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_track_changes_and_cancel() {
        let mut a = Merkle::new();
        let mut b = Merkle::new();
        assert_eq!(a.root(), b.root());
        a.update(7, b"k", 0, 42);
        assert_ne!(a.root(), b.root());
        b.update(7, b"k", 0, 42);
        assert_eq!(a.root(), b.root());
        a.update(LEAVES - 1, b"k", 0, 5);
        assert_ne!(a.digest(1, FANOUT - 1), b.digest(1, FANOUT - 1));
        assert_eq!(a.digest(1, 0), b.digest(1, 0));
        a.update(LEAVES - 1, b"k", 5, 0);
        assert_eq!(a.root(), b.root());
    }
}

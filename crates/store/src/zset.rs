//! The sorted set value type.
//!
//! Two indexes over the same members: an order-statistic tree of (score, member) for ranges
//! and ranks ([`crate::ostree`]), and a hash table member → score for O(1) lookups. Both are
//! private: commands go through methods (insert, remove, rank, ranges...), so per-member
//! metadata (e.g. CRDT tags, counter state) can be added here later without touching them.

use std::cmp::Ordering;
use std::fmt;

use hashbrown::HashTable;

use crate::keyhash::key_hash;
use crate::ostree::{self, OsTree};

/// Redis's defaults for `zset-max-listpack-entries` and `zset-max-listpack-value`.
pub const DEFAULT_MAX_LISTPACK_ENTRIES: usize = 128;
pub const DEFAULT_MAX_LISTPACK_VALUE: usize = 64;

/// A (score, member) pair ordered as Redis orders sorted sets: by score, then by member bytes.
/// Scores are never NaN; `-0` and `0` compare equal, as C's `<` and `==` say.
#[derive(Clone)]
struct ZKey {
    score: f64,
    member: Box<[u8]>,
}

fn cmp_entry(score: f64, member: &[u8], other_score: f64, other_member: &[u8]) -> Ordering {
    match score.partial_cmp(&other_score) {
        Some(Ordering::Equal) | None => member.cmp(other_member),
        Some(o) => o,
    }
}

impl Ord for ZKey {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_entry(self.score, &self.member, other.score, &other.member)
    }
}

impl PartialOrd for ZKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for ZKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for ZKey {}

#[derive(Clone)]
struct Slot {
    member: Box<[u8]>,
    score: f64,
}

/// A Redis sorted set value.
#[derive(Clone, Default)]
pub struct ZSet {
    tree: OsTree<ZKey>,
    index: HashTable<Slot>,
    /// Redis keeps small sorted sets in a listpack and converts them, once and for good, to a
    /// skiplist when they outgrow the configured limits; OBJECT ENCODING reports which, and a
    /// listpack stores a score of `-0` as `0`. We track the state to report the same.
    skiplist: bool,
    /// Longest member inserted while listpack-encoded.
    longest: usize,
    member_bytes: usize,
}

impl fmt::Debug for ZSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(m, s)| (String::from_utf8_lossy(m), s)))
            .finish()
    }
}

impl PartialEq for ZSet {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .zip(other.iter())
                .all(|((m1, s1), (m2, s2))| m1 == m2 && s1 == s2)
    }
}

impl ZSet {
    pub fn new() -> ZSet {
        ZSet::default()
    }

    /// An empty sorted set that will hold about `count` members of up to `longest` bytes:
    /// skiplist-encoded from the start when that exceeds the limits (as Redis creates it).
    pub fn with_hint(count: usize, longest: usize, max_entries: usize, max_value: usize) -> ZSet {
        ZSet {
            skiplist: count > max_entries || longest > max_value,
            ..ZSet::default()
        }
    }

    pub fn len(&self) -> usize {
        self.tree.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What OBJECT ENCODING reports.
    pub fn encoding(&self) -> &'static str {
        if self.skiplist {
            "skiplist"
        } else {
            "listpack"
        }
    }

    /// Switches to the skiplist encoding if the set outgrew the listpack limits (never back).
    pub fn convert_if_needed(&mut self, max_entries: usize, max_value: usize) {
        if !self.skiplist && (self.len() > max_entries || self.longest > max_value) {
            self.skiplist = true;
        }
    }

    /// Switches to the skiplist encoding unconditionally (SORT does this, as in Redis).
    pub fn convert_to_skiplist(&mut self) {
        self.skiplist = true;
    }

    /// Approximate heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.tree.node_bytes()
            + self.index.capacity() * (std::mem::size_of::<Slot>() + 1)
            + 2 * self.member_bytes
    }

    fn hash(member: &[u8]) -> u64 {
        key_hash(member)
    }

    fn slot(&self, member: &[u8]) -> Option<&Slot> {
        self.index
            .find(Self::hash(member), |s| &*s.member == member)
    }

    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.slot(member).map(|s| s.score)
    }

    pub fn contains(&self, member: &[u8]) -> bool {
        self.slot(member).is_some()
    }

    /// Sets the score of `member` (adding it if absent); returns the previous score. `score`
    /// must not be NaN.
    pub fn insert(&mut self, member: &[u8], score: f64) -> Option<f64> {
        debug_assert!(!score.is_nan());
        // A listpack keeps scores as text without a sign on zero.
        let score = if !self.skiplist && score == 0.0 {
            0.0
        } else {
            score
        };
        let h = Self::hash(member);
        if let Some(slot) = self.index.find_mut(h, |s| &*s.member == member) {
            let old = slot.score;
            if old.to_bits() != score.to_bits() {
                slot.score = score;
                let mut key = self
                    .tree
                    .remove_by(|k| cmp_entry(k.score, &k.member, old, member))
                    .expect("indexed member is in the tree");
                key.score = score;
                self.tree.insert(key);
            }
            return Some(old);
        }
        let boxed: Box<[u8]> = member.into();
        self.index.insert_unique(
            h,
            Slot {
                member: boxed.clone(),
                score,
            },
            |s| Self::hash(&s.member),
        );
        self.tree.insert(ZKey {
            score,
            member: boxed,
        });
        self.member_bytes += member.len();
        if !self.skiplist {
            self.longest = self.longest.max(member.len());
        }
        None
    }

    /// Removes `member`, returning its score.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let h = Self::hash(member);
        let (slot, _) = self
            .index
            .find_entry(h, |s| &*s.member == member)
            .ok()?
            .remove();
        self.tree
            .remove_by(|k| cmp_entry(k.score, &k.member, slot.score, member))
            .expect("indexed member is in the tree");
        self.member_bytes -= member.len();
        Some(slot.score)
    }

    /// Removes the member of rank `rank`, returning it with its score.
    pub fn remove_at(&mut self, rank: usize) -> Option<(Box<[u8]>, f64)> {
        let key = self.tree.remove_at(rank)?;
        let h = Self::hash(&key.member);
        if let Ok(e) = self.index.find_entry(h, |s| s.member == key.member) {
            e.remove();
        }
        self.member_bytes -= key.member.len();
        Some((key.member, key.score))
    }

    /// Removes the members of ranks `start..end`; returns how many were removed.
    pub fn remove_rank_range(&mut self, start: usize, end: usize) -> usize {
        let end = end.min(self.len());
        if start == 0 && end == self.len() {
            // Everything: drop the indexes wholesale instead of member by member.
            let n = self.len();
            self.tree = OsTree::new();
            self.index = HashTable::new();
            self.member_bytes = 0;
            return n;
        }
        let mut n = 0;
        while start + n < end {
            self.remove_at(start);
            n += 1;
        }
        n
    }

    /// The lowest-ranked member and its score, removed.
    pub fn pop_min(&mut self) -> Option<(Box<[u8]>, f64)> {
        self.remove_at(0)
    }

    /// The highest-ranked member and its score, removed.
    pub fn pop_max(&mut self) -> Option<(Box<[u8]>, f64)> {
        let last = self.len().checked_sub(1)?;
        self.remove_at(last)
    }

    /// The 0-based rank of `member` in ascending order.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = self.score(member)?;
        self.tree
            .rank_by(|k| cmp_entry(k.score, &k.member, score, member))
    }

    /// The member of rank `rank` (ascending) and its score.
    pub fn get_by_rank(&self, rank: usize) -> Option<(&[u8], f64)> {
        self.tree.get(rank).map(|k| (&*k.member, k.score))
    }

    /// How many members satisfy `pred(member, score)`, which must hold for a prefix of the
    /// members in order: the rank where it starts to fail. Score and lex range bounds are
    /// located with this.
    pub fn count_while(&self, mut pred: impl FnMut(&[u8], f64) -> bool) -> usize {
        self.tree.partition_point(|k| pred(&k.member, k.score))
    }

    /// Members with their scores in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            inner: self.tree.iter(),
        }
    }

    /// Members from rank `rank` upwards, or (`rev`) from rank `rank` down to rank 0.
    pub fn iter_at(&self, rank: usize, rev: bool) -> Iter<'_> {
        Iter {
            inner: self.tree.iter_at(rank, rev),
        }
    }

    /// One step of ZSCAN. A listpack-encoded set is returned whole (as Redis does). Otherwise
    /// the cursor encodes a score: the call returns members from that score upwards, at least
    /// `count` of them and never splitting a run of equal scores, and the next cursor is the
    /// following score (0 at the end). Every member present, with an unchanged score, for the
    /// whole iteration is therefore returned at least once, however the set changes.
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<(&[u8], f64)>) {
        if !self.skiplist {
            return (0, self.iter().collect());
        }
        let start = if cursor == 0 {
            0
        } else {
            self.count_while(|_, s| score_cursor(s) < cursor)
        };
        let mut out: Vec<(&[u8], f64)> = Vec::new();
        for (m, s) in self.iter_at(start, false) {
            if out.len() >= count.max(1) && out.last().is_some_and(|&(_, last)| last != s) {
                return (score_cursor(s), out);
            }
            out.push((m, s));
        }
        (0, out)
    }

    /// Checks both indexes agree (tests, simulator).
    pub fn check_invariants(&self) {
        self.tree.check();
        assert_eq!(self.tree.len(), self.index.len(), "indexes differ in size");
        for s in self.index.iter() {
            assert!(
                self.tree
                    .rank_by(|k| cmp_entry(k.score, &k.member, s.score, &s.member))
                    .is_some(),
                "indexed member missing from the tree"
            );
        }
    }
}

/// Maps a score to a nonzero u64 preserving order (`-0` and `0` map alike), for ZSCAN cursors.
fn score_cursor(score: f64) -> u64 {
    let score = if score == 0.0 { 0.0 } else { score };
    let bits = score.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

/// Iterator over (member, score) pairs in rank order.
pub struct Iter<'a> {
    inner: ostree::Iter<'a, ZKey>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], f64);

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|k| (&*k.member, k.score))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_update_rank_remove() {
        let mut z = ZSet::new();
        assert_eq!(z.insert(b"b", 2.0), None);
        assert_eq!(z.insert(b"a", 1.0), None);
        assert_eq!(z.insert(b"c", 2.0), None);
        assert_eq!(z.rank(b"a"), Some(0));
        assert_eq!(z.rank(b"b"), Some(1));
        assert_eq!(z.rank(b"c"), Some(2));
        assert_eq!(z.insert(b"a", 3.0), Some(1.0));
        assert_eq!(z.rank(b"a"), Some(2));
        assert_eq!(
            z.iter().collect::<Vec<_>>(),
            vec![(&b"b"[..], 2.0), (&b"c"[..], 2.0), (&b"a"[..], 3.0)]
        );
        assert_eq!(z.count_while(|_, s| s < 2.5), 2);
        assert_eq!(z.remove(b"b"), Some(2.0));
        assert_eq!(z.remove(b"b"), None);
        assert_eq!(z.pop_max(), Some((b"a"[..].into(), 3.0)));
        assert_eq!(z.len(), 1);
        z.check_invariants();
    }

    #[test]
    fn encoding_is_sticky() {
        let mut z = ZSet::new();
        z.insert(b"x", -0.0);
        assert!(z.score(b"x").unwrap().is_sign_positive());
        for i in 0..200 {
            z.insert(format!("m{i}").as_bytes(), i as f64);
        }
        z.convert_if_needed(128, 64);
        assert_eq!(z.encoding(), "skiplist");
        while z.len() > 1 {
            z.pop_min();
        }
        z.convert_if_needed(128, 64);
        assert_eq!(z.encoding(), "skiplist");
        z.insert(b"y", -0.0);
        assert!(z.score(b"y").unwrap().is_sign_negative());
    }

    #[test]
    fn scan_covers_everything_without_splitting_equal_scores() {
        let mut z = ZSet::with_hint(1000, 0, 128, 64);
        for i in 0..1000 {
            z.insert(format!("m{i}").as_bytes(), (i / 7) as f64 - 50.0);
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = 0;
        loop {
            let (next, batch) = z.scan(cursor, 10);
            assert!(batch.len() >= 10 || next == 0);
            for (m, _) in batch {
                seen.insert(m.to_vec());
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        assert_eq!(seen.len(), 1000);
    }

    #[test]
    fn score_cursor_preserves_order() {
        let xs = [
            f64::NEG_INFINITY,
            -1e300,
            -1.0,
            -1e-300,
            0.0,
            1e-300,
            1.0,
            1e300,
            f64::INFINITY,
        ];
        for w in xs.windows(2) {
            assert!(score_cursor(w[0]) < score_cursor(w[1]));
        }
        assert_eq!(score_cursor(-0.0), score_cursor(0.0));
        assert!(xs.iter().all(|&x| score_cursor(x) != 0));
    }
}

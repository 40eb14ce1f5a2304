//! The set value type.
//!
//! Two representations, as in Redis 7.0: a sorted array of integers while every member is the
//! canonical decimal form of an i64 and there are few of them ("intset"), and otherwise a dense
//! array of members with a hash index member → position ("hashtable"). The dense array gives
//! O(1) membership, insertion and removal (swap with the last) and O(1) access by position,
//! which SPOP and SRANDMEMBER need to pick uniformly at random. The iteration order is the
//! array order: a pure function of the history of operations (and of the random numbers the
//! node drew), so runs replay exactly.
//!
//! The representation is private: commands go through methods, so per-member metadata (e.g.
//! CRDT add tags) can be added later without touching them.

use std::borrow::Cow;
use std::fmt;

use hashbrown::HashTable;

use crate::keyhash::key_hash;
use crate::value::parse_canonical_i64;

/// Redis's default for `set-max-intset-entries`.
pub const DEFAULT_MAX_INTSET_ENTRIES: usize = 512;

#[derive(Clone)]
enum Repr {
    /// Sorted, distinct.
    Ints(Vec<i64>),
    Table(Table),
}

#[derive(Clone, Default)]
struct Table {
    members: Vec<Box<[u8]>>,
    /// (hash of the member, its position in `members`).
    index: HashTable<(u64, usize)>,
    member_bytes: usize,
}

impl Table {
    fn find(&self, member: &[u8]) -> Option<usize> {
        let h = key_hash(member);
        self.index
            .find(h, |&(hh, i)| hh == h && &*self.members[i] == member)
            .map(|&(_, i)| i)
    }

    fn insert(&mut self, member: &[u8]) -> bool {
        let h = key_hash(member);
        let members = &self.members;
        if self
            .index
            .find(h, |&(hh, i)| hh == h && &*members[i] == member)
            .is_some()
        {
            return false;
        }
        let pos = self.members.len();
        self.members.push(member.into());
        self.index.insert_unique(h, (h, pos), |&(hh, _)| hh);
        self.member_bytes += member.len();
        true
    }

    /// Removes the member at `pos`; the last member takes its place.
    fn remove_at(&mut self, pos: usize) -> Box<[u8]> {
        let h = key_hash(&self.members[pos]);
        if let Ok(e) = self.index.find_entry(h, |&(hh, i)| hh == h && i == pos) {
            e.remove();
        }
        let last = self.members.len() - 1;
        let removed = self.members.swap_remove(pos);
        if pos != last {
            let moved = key_hash(&self.members[pos]);
            if let Some(e) = self
                .index
                .find_mut(moved, |&(hh, i)| hh == moved && i == last)
            {
                e.1 = pos;
            }
        }
        self.member_bytes -= removed.len();
        removed
    }
}

/// A Redis set value.
#[derive(Clone)]
pub struct Set {
    repr: Repr,
}

impl Default for Set {
    fn default() -> Self {
        Set {
            repr: Repr::Ints(Vec::new()),
        }
    }
}

impl fmt::Debug for Set {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(
                self.iter()
                    .map(|m| String::from_utf8_lossy(&m).into_owned()),
            )
            .finish()
    }
}

/// Equal as sets: the same members, whatever their order or representation.
impl PartialEq for Set {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|m| other.contains(&m))
    }
}

impl Set {
    /// An empty set (intset-encoded until a non-integer member arrives).
    pub fn new() -> Set {
        Set::default()
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Ints(v) => v.len(),
            Repr::Table(t) => t.members.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What OBJECT ENCODING reports (Redis 7.0: `intset` or `hashtable`).
    pub fn encoding(&self) -> &'static str {
        match self.repr {
            Repr::Ints(_) => "intset",
            Repr::Table(_) => "hashtable",
        }
    }

    /// True while intset-encoded (SSCAN returns such a set whole, as Redis does).
    pub fn is_intset(&self) -> bool {
        matches!(self.repr, Repr::Ints(_))
    }

    /// Approximate heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        match &self.repr {
            Repr::Ints(v) => v.capacity() * 8,
            Repr::Table(t) => {
                t.members.capacity() * std::mem::size_of::<Box<[u8]>>()
                    + t.index.capacity() * 17
                    + t.member_bytes
            }
        }
    }

    /// See [`crate::Db::prefetch`]: probes a table-encoded set for `member`, so the probe's
    /// memory is in cache when the command runs. An intset is left alone.
    pub fn prefetch(&self, member: &[u8]) {
        if let Repr::Table(t) = &self.repr {
            std::hint::black_box(t.find(member));
        }
    }

    pub fn contains(&self, member: &[u8]) -> bool {
        match &self.repr {
            Repr::Ints(v) => {
                parse_canonical_i64(member).is_some_and(|n| v.binary_search(&n).is_ok())
            }
            Repr::Table(t) => t.find(member).is_some(),
        }
    }

    fn as_table(&mut self) -> &mut Table {
        if let Repr::Ints(v) = &self.repr {
            let mut t = Table::default();
            for n in v {
                t.insert(n.to_string().as_bytes());
            }
            self.repr = Repr::Table(t);
        }
        match &mut self.repr {
            Repr::Table(t) => t,
            Repr::Ints(_) => unreachable!("converted above"),
        }
    }

    /// Adds `member`; false if it was already present. An intset becomes a hash table (for
    /// good) when a non-integer arrives or it grows past `max_intset_entries`.
    pub fn insert(&mut self, member: &[u8], max_intset_entries: usize) -> bool {
        if let Repr::Ints(v) = &mut self.repr {
            if let Some(n) = parse_canonical_i64(member) {
                match v.binary_search(&n) {
                    Ok(_) => return false,
                    Err(p) => {
                        if v.len() < max_intset_entries {
                            v.insert(p, n);
                            return true;
                        }
                    }
                }
            }
        }
        self.as_table().insert(member)
    }

    /// Removes `member`; false if it was absent.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match &mut self.repr {
            Repr::Ints(v) => match parse_canonical_i64(member).map(|n| v.binary_search(&n)) {
                Some(Ok(p)) => {
                    v.remove(p);
                    true
                }
                _ => false,
            },
            Repr::Table(t) => match t.find(member) {
                Some(p) => {
                    t.remove_at(p);
                    true
                }
                None => false,
            },
        }
    }

    /// The member at position `pos` (0..len) of the iteration order.
    pub fn get(&self, pos: usize) -> Option<Cow<'_, [u8]>> {
        match &self.repr {
            Repr::Ints(v) => v.get(pos).map(|n| Cow::Owned(n.to_string().into_bytes())),
            Repr::Table(t) => t.members.get(pos).map(|m| Cow::Borrowed(&**m)),
        }
    }

    /// Removes and returns the member at position `pos`.
    pub fn remove_at(&mut self, pos: usize) -> Option<Vec<u8>> {
        if pos >= self.len() {
            return None;
        }
        Some(match &mut self.repr {
            Repr::Ints(v) => v.remove(pos).to_string().into_bytes(),
            Repr::Table(t) => t.remove_at(pos).into_vec(),
        })
    }

    /// Every member, in the set's iteration order (ascending for an intset, as in Redis).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Cow<'_, [u8]>> + '_ {
        (0..self.len()).map(move |i| self.get(i).expect("position in range"))
    }

    /// One step of SSCAN. An intset is returned whole with cursor 0, as Redis does. Otherwise
    /// the cursor is a position: positions are visited from the end down to 0 (cursor 0 starts
    /// at the end), at most `count` per call. Removal moves the last member into the hole
    /// (already visited, or not yet and then visited), insertions append (after everything
    /// still to visit), so every member present for the whole iteration is returned at least
    /// once.
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<Cow<'_, [u8]>>) {
        if self.is_intset() {
            return (0, self.iter().collect());
        }
        let len = self.len() as u64;
        let mut pos = if cursor == 0 { len } else { cursor.min(len) };
        let mut out = Vec::new();
        while pos > 0 && out.len() < count.max(1) {
            pos -= 1;
            out.push(self.get(pos as usize).expect("position in range"));
        }
        (pos, out)
    }

    /// Checks the representation's invariants (tests, simulator).
    pub fn check_invariants(&self) {
        match &self.repr {
            Repr::Ints(v) => assert!(v.windows(2).all(|w| w[0] < w[1]), "intset unsorted"),
            Repr::Table(t) => {
                assert_eq!(t.members.len(), t.index.len(), "index out of step");
                for (i, m) in t.members.iter().enumerate() {
                    assert_eq!(t.find(m), Some(i), "member indexed at the wrong position");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(set: &Set) -> Vec<Vec<u8>> {
        set.iter().map(|m| m.into_owned()).collect()
    }

    #[test]
    fn intset_until_a_string_or_too_many() {
        let mut s = Set::new();
        assert!(s.insert(b"3", 512));
        assert!(s.insert(b"-1", 512));
        assert!(!s.insert(b"3", 512));
        assert_eq!(s.encoding(), "intset");
        assert_eq!(bytes(&s), vec![b"-1".to_vec(), b"3".to_vec()]);
        assert!(s.insert(b"01", 512));
        assert_eq!(s.encoding(), "hashtable");
        assert!(s.contains(b"3") && s.contains(b"01") && !s.contains(b"1"));
        assert!(s.remove(b"01"));
        assert_eq!(s.encoding(), "hashtable");
        let mut t = Set::new();
        for i in 0..3 {
            t.insert(i.to_string().as_bytes(), 2);
        }
        assert_eq!(t.encoding(), "hashtable");
        assert_eq!(t.len(), 3);
        t.check_invariants();
    }

    #[test]
    fn removal_keeps_the_index_in_step() {
        let mut s = Set::new();
        for i in 0..1000 {
            s.insert(format!("m{i}").as_bytes(), 512);
        }
        for i in (0..1000).step_by(3) {
            assert!(s.remove(format!("m{i}").as_bytes()));
        }
        s.check_invariants();
        assert_eq!(s.len(), 666);
        while !s.is_empty() {
            s.remove_at(s.len() / 2);
        }
        s.check_invariants();
    }

    #[test]
    fn scan_survives_removals() {
        let mut s = Set::new();
        for i in 0..500 {
            s.insert(format!("m{i}").as_bytes(), 512);
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut cursor = 0;
        let mut round = 0;
        loop {
            let (next, batch) = s.scan(cursor, 7);
            for m in batch {
                seen.insert(m.into_owned());
            }
            // Remove members numbered >= 400 (never required to be seen) while scanning.
            round += 1;
            s.remove(format!("m{}", 400 + round % 100).as_bytes());
            if next == 0 {
                break;
            }
            cursor = next;
        }
        for i in 0..400 {
            assert!(seen.contains(format!("m{i}").as_bytes()), "m{i} missed");
        }
    }
}

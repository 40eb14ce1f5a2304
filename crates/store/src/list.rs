//! The List value type: an ordered sequence of byte strings, double-ended.
//!
//! A ring buffer of elements: O(1) pushes and pops at both ends and O(1) access by index, O(n)
//! insertion and removal in the middle (as in Redis, whose commands that do that are O(n)
//! anyway because they first search). Everything goes through methods so that per-element
//! metadata (element ids for a replicated sequence) can be added later without touching the
//! commands.

use std::collections::VecDeque;

/// Which end of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The head (index 0, "left").
    Head,
    /// The tail (index len-1, "right").
    Tail,
}

/// A Redis list value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct List {
    items: VecDeque<Vec<u8>>,
    /// Sum of the element lengths, for memory accounting.
    bytes: usize,
}

impl List {
    pub fn new() -> List {
        List::default()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// What OBJECT ENCODING reports. Redis 7.0 stores every list as a quicklist (the listpack
    /// encoding for small lists arrived in 7.2), whatever its size.
    pub fn encoding(&self) -> &'static str {
        "quicklist"
    }

    /// Approximate heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.items.capacity() * std::mem::size_of::<Vec<u8>>() + self.bytes
    }

    /// Adds `value` at `end`.
    pub fn push(&mut self, end: End, value: &[u8]) {
        self.bytes += value.len();
        match end {
            End::Head => self.items.push_front(value.to_vec()),
            End::Tail => self.items.push_back(value.to_vec()),
        }
    }

    /// Removes and returns the element at `end`.
    pub fn pop(&mut self, end: End) -> Option<Vec<u8>> {
        let v = match end {
            End::Head => self.items.pop_front(),
            End::Tail => self.items.pop_back(),
        }?;
        self.bytes -= v.len();
        Some(v)
    }

    /// The element at `index` (0-based from the head).
    pub fn get(&self, index: usize) -> Option<&[u8]> {
        self.items.get(index).map(|v| v.as_slice())
    }

    /// Replaces the element at `index`; false when out of range.
    pub fn set(&mut self, index: usize, value: &[u8]) -> bool {
        match self.items.get_mut(index) {
            Some(slot) => {
                self.bytes = self.bytes - slot.len() + value.len();
                *slot = value.to_vec();
                true
            }
            None => false,
        }
    }

    /// Inserts `value` so that it ends up at `index` (0 ..= len).
    pub fn insert(&mut self, index: usize, value: &[u8]) {
        self.bytes += value.len();
        self.items.insert(index, value.to_vec());
    }

    /// Index of the first element equal to `value`, searching from the head.
    pub fn position(&self, value: &[u8]) -> Option<usize> {
        self.items.iter().position(|v| v.as_slice() == value)
    }

    /// Elements from the head.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &[u8]> + ExactSizeIterator + '_ {
        self.items.iter().map(|v| v.as_slice())
    }

    /// Elements `start ..= end` (indexes already clamped to the list by the caller).
    pub fn range(
        &self,
        start: usize,
        end: usize,
    ) -> impl DoubleEndedIterator<Item = &[u8]> + ExactSizeIterator + '_ {
        self.items.range(start..=end).map(|v| v.as_slice())
    }

    /// Removes up to `limit` elements equal to `value` (all of them when `limit` is 0), scanning
    /// from `from`. Returns how many were removed.
    pub fn remove_matching(&mut self, value: &[u8], limit: usize, from: End) -> usize {
        let mut removed = 0;
        let mut bytes = 0;
        let mut keep = |v: &Vec<u8>| {
            if (limit == 0 || removed < limit) && v.as_slice() == value {
                removed += 1;
                bytes += v.len();
                false
            } else {
                true
            }
        };
        match from {
            End::Head => self.items.retain(|v| keep(v)),
            End::Tail => {
                // Retain visits from the head; walk from the tail by reversing around it.
                self.items.make_contiguous().reverse();
                self.items.retain(|v| keep(v));
                self.items.make_contiguous().reverse();
            }
        }
        self.bytes -= bytes;
        removed
    }

    /// Keeps only the elements `start ..= end` (clamped by the caller); `None` empties the list.
    pub fn retain_range(&mut self, keep: Option<(usize, usize)>) {
        match keep {
            None => {
                self.items.clear();
                self.bytes = 0;
            }
            Some((start, end)) => {
                for v in self.items.drain(end + 1..) {
                    self.bytes -= v.len();
                }
                for v in self.items.drain(..start) {
                    self.bytes -= v.len();
                }
            }
        }
        if self.items.capacity() > 64 && self.items.len() < self.items.capacity() / 4 {
            self.items.shrink_to_fit();
        }
    }
}

impl List {
    /// Checks the structure's invariants; panics with a description on violation.
    pub fn check_invariants(&self) {
        let bytes: usize = self.items.iter().map(|v| v.len()).sum();
        assert_eq!(bytes, self.bytes, "list byte count out of step");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> List {
        let mut l = List::new();
        for i in items {
            l.push(End::Tail, i.as_bytes());
        }
        l
    }

    fn contents(l: &List) -> Vec<String> {
        l.iter()
            .map(|v| String::from_utf8(v.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn push_pop_both_ends() {
        let mut l = List::new();
        l.push(End::Head, b"b");
        l.push(End::Head, b"a");
        l.push(End::Tail, b"c");
        assert_eq!(contents(&l), ["a", "b", "c"]);
        assert_eq!(l.pop(End::Tail).unwrap(), b"c");
        assert_eq!(l.pop(End::Head).unwrap(), b"a");
        assert_eq!(l.len(), 1);
        assert_eq!(l.bytes, 1);
        assert_eq!(l.encoding(), "quicklist");
    }

    #[test]
    fn remove_from_either_end() {
        let mut l = list(&["x", "a", "x", "b", "x"]);
        assert_eq!(l.remove_matching(b"x", 1, End::Tail), 1);
        assert_eq!(contents(&l), ["x", "a", "x", "b"]);
        assert_eq!(l.remove_matching(b"x", 1, End::Head), 1);
        assert_eq!(contents(&l), ["a", "x", "b"]);
        assert_eq!(l.remove_matching(b"x", 0, End::Head), 1);
        assert_eq!(contents(&l), ["a", "b"]);
        assert_eq!(l.bytes, 2);
    }

    #[test]
    fn trim_and_edit() {
        let mut l = list(&["1", "2", "3", "4", "5"]);
        l.retain_range(Some((1, 3)));
        assert_eq!(contents(&l), ["2", "3", "4"]);
        assert!(l.set(1, b"three"));
        assert!(!l.set(3, b"x"));
        l.insert(0, b"0");
        assert_eq!(contents(&l), ["0", "2", "three", "4"]);
        assert_eq!(l.position(b"4"), Some(3));
        assert_eq!(l.bytes, 1 + 1 + 5 + 1);
        l.check_invariants();
        l.retain_range(None);
        assert!(l.is_empty());
        assert_eq!(l.bytes, 0);
    }
}

//! Version vectors and causal contexts.
//!
//! A *causal context* is the set of dots a replica has seen. It is stored compactly as a
//! [`VersionVector`] (for each node, every counter `1..=n` has been seen) plus a [`DotCloud`] of
//! the dots seen out of order (above a gap). [`CausalContext`] keeps this representation
//! canonical at all times: no cloud dot is covered by the vector and no cloud dot extends the
//! vector contiguously. So two contexts holding the same set of dots are structurally equal, and
//! derived equality on the CRDTs that embed them is semantic equality.

use std::collections::BTreeSet;

use crate::{Crdt, Dot, NodeId};

/// For each node, the highest counter `n` such that all of its dots `1..=n` are included.
/// Absent nodes mean 0. Never stores zero entries, so equality is structural.
///
/// A vector sorted by node rather than a map: a cluster has a handful of nodes, every replicated
/// key carries several of these, and a clone or a merge is then one small allocation and a
/// linear walk (measured with callgrind on a replicating writer: the map's node allocations
/// and frees were a tenth of its instructions).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct VersionVector {
    entries: Vec<(NodeId, u64)>,
}

impl VersionVector {
    /// The empty vector (nothing seen).
    #[must_use]
    pub fn new() -> VersionVector {
        VersionVector::default()
    }

    fn find(&self, node: NodeId) -> Result<usize, usize> {
        self.entries.binary_search_by(|(n, _)| n.cmp(&node))
    }

    /// The contiguous counter for `node` (0 if nothing seen).
    #[must_use]
    pub fn get(&self, node: NodeId) -> u64 {
        self.find(node).map_or(0, |i| self.entries[i].1)
    }

    /// Whether `dot` is covered (`1 <= dot.counter <= self[dot.node]`).
    #[must_use]
    pub fn contains(&self, dot: Dot) -> bool {
        dot.counter >= 1 && dot.counter <= self.get(dot.node)
    }

    /// Raise `node`'s entry to at least `counter` (never lowers it).
    pub fn raise(&mut self, node: NodeId, counter: u64) {
        if counter > 0 {
            match self.find(node) {
                Ok(i) => self.entries[i].1 = self.entries[i].1.max(counter),
                Err(i) => self.entries.insert(i, (node, counter)),
            }
        }
    }

    /// Issue `node`'s next dot and include it: the way a node-wide event counter is advanced.
    pub fn next_dot(&mut self, node: NodeId) -> Dot {
        let c = self.get(node) + 1;
        self.raise(node, c);
        Dot::new(node, c)
    }

    /// Pointwise maximum.
    pub fn merge(&mut self, other: &VersionVector) {
        if self.entries.len() == other.entries.len()
            && self
                .entries
                .iter()
                .zip(&other.entries)
                .all(|(a, b)| a.0 == b.0)
        {
            // The same nodes (the common case: a key's context raised to a newer GC frontier):
            // one pass, no searches or inserts.
            for (a, b) in self.entries.iter_mut().zip(&other.entries) {
                a.1 = a.1.max(b.1);
            }
            return;
        }
        if self.entries.is_empty() {
            self.entries.clone_from(&other.entries);
            return;
        }
        for &(node, c) in &other.entries {
            self.raise(node, c);
        }
    }

    /// Pointwise minimum (the dots both have seen): how a node folds acknowledgements from all
    /// replicas into a stability frontier.
    pub fn meet(&mut self, other: &VersionVector) {
        self.entries.retain_mut(|(node, c)| {
            *c = (*c).min(other.get(*node));
            *c > 0
        });
    }

    /// Whether every dot covered by `other` is covered by `self` (`self >= other` pointwise).
    #[must_use]
    pub fn dominates(&self, other: &VersionVector) -> bool {
        other.entries.iter().all(|&(node, c)| self.get(node) >= c)
    }

    /// `(node, counter)` pairs in node order.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, u64)> + '_ {
        self.entries.iter().copied()
    }

    /// Whether nothing is covered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Crdt for VersionVector {
    fn merge(&mut self, other: &Self) {
        VersionVector::merge(self, other);
    }
}

impl FromIterator<(NodeId, u64)> for VersionVector {
    fn from_iter<I: IntoIterator<Item = (NodeId, u64)>>(iter: I) -> Self {
        let mut vv = VersionVector::new();
        for (n, c) in iter {
            vv.raise(n, c);
        }
        vv
    }
}

/// A set of individual dots: the exceptions a version vector cannot express (dots seen above a
/// gap, e.g. because an earlier delta was lost or the dot belongs to another key).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DotCloud {
    dots: BTreeSet<Dot>,
}

impl DotCloud {
    /// The empty cloud.
    #[must_use]
    pub fn new() -> DotCloud {
        DotCloud::default()
    }

    /// Adds `dot`; returns whether it was new.
    pub fn insert(&mut self, dot: Dot) -> bool {
        self.dots.insert(dot)
    }

    /// Whether `dot` is in the cloud.
    #[must_use]
    pub fn contains(&self, dot: Dot) -> bool {
        self.dots.contains(&dot)
    }

    /// Dots in `(node, counter)` order.
    pub fn iter(&self) -> impl Iterator<Item = Dot> + '_ {
        self.dots.iter().copied()
    }

    /// Number of dots.
    #[must_use]
    pub fn len(&self) -> usize {
        self.dots.len()
    }

    /// Whether the cloud is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.dots.is_empty()
    }

    /// Set union.
    pub fn merge(&mut self, other: &DotCloud) {
        self.dots.extend(other.dots.iter().copied());
    }

    /// The highest counter held for `node`, if any.
    fn max_for(&self, node: NodeId) -> Option<u64> {
        self.dots
            .range(Dot::new(node, 0)..=Dot::new(node, u64::MAX))
            .next_back()
            .map(|d| d.counter)
    }

    /// How many dots are held for `node`.
    fn count_for(&self, node: NodeId) -> usize {
        self.dots
            .range(Dot::new(node, 0)..=Dot::new(node, u64::MAX))
            .count()
    }
}

/// The set of dots a replica has seen: compact vector plus dot cloud, kept canonical.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct CausalContext {
    vv: VersionVector,
    cloud: DotCloud,
}

impl CausalContext {
    /// The empty context.
    #[must_use]
    pub fn new() -> CausalContext {
        CausalContext::default()
    }

    /// The context of every dot `vv` covers (no cloud).
    #[must_use]
    pub fn from_vv(vv: &VersionVector) -> CausalContext {
        CausalContext {
            vv: vv.clone(),
            cloud: DotCloud::new(),
        }
    }

    /// A context holding exactly `dots`.
    pub fn from_dots<I: IntoIterator<Item = Dot>>(dots: I) -> CausalContext {
        // Dot by dot through `insert`, which keeps the form canonical as it goes: for the one
        // or two dots of a write's delta (the common call) that is much cheaper than
        // collecting them and rebuilding with `compact`.
        let mut cc = CausalContext::new();
        for d in dots {
            cc.insert(d);
        }
        cc
    }

    /// The contiguous part.
    #[must_use]
    pub fn vv(&self) -> &VersionVector {
        &self.vv
    }

    /// The non-contiguous part (its size is a useful metric: it is what GC bounds).
    #[must_use]
    pub fn cloud(&self) -> &DotCloud {
        &self.cloud
    }

    /// Whether `dot` has been seen.
    #[must_use]
    pub fn contains(&self, dot: Dot) -> bool {
        self.vv.contains(dot) || self.cloud.contains(dot)
    }

    /// Records `dot` as seen.
    pub fn insert(&mut self, dot: Dot) {
        debug_assert!(dot.counter >= 1, "dot counters start at 1");
        if self.vv.contains(dot) {
            return;
        }
        if dot.counter == self.vv.get(dot.node) + 1 {
            self.vv.raise(dot.node, dot.counter);
            self.compact_node(dot.node);
        } else {
            self.cloud.insert(dot);
        }
    }

    /// Set union. Costs O(size of `other` x log), not O(size of `self`): a node-wide context
    /// with a large cloud merges many small ones.
    pub fn merge(&mut self, other: &CausalContext) {
        if other.vv.is_empty() {
            // A delta's context is usually a few cloud dots (its fresh writes): inserting them
            // one by one skips the per-node canonicalization scans, the hot part of merging a
            // replicated write.
            for d in other.cloud.iter() {
                self.insert(d);
            }
            return;
        }
        self.vv.merge(&other.vv);
        self.cloud.merge(&other.cloud);
        let mut last = None;
        for node in other
            .vv
            .iter()
            .map(|(n, _)| n)
            .chain(other.cloud.iter().map(|d| d.node))
        {
            if last != Some(node) {
                self.compact_node(node);
                last = Some(node);
            }
        }
    }

    /// Canonical form for one node's dots: drop cloud dots the vector covers, absorb the chain
    /// that extends it.
    fn compact_node(&mut self, node: NodeId) {
        if self.cloud.dots.is_empty() {
            return; // nothing to drop or absorb (the common case)
        }
        let have = self.vv.get(node);
        // One covered dot at a time: no list is built (this runs for every replicated write).
        while let Some(&d) = self
            .cloud
            .dots
            .range(Dot::new(node, 0)..=Dot::new(node, have))
            .next()
        {
            self.cloud.dots.remove(&d);
        }
        let mut top = have;
        while self.cloud.dots.remove(&Dot::new(node, top + 1)) {
            top += 1;
        }
        if top > have {
            self.vv.raise(node, top);
        }
    }

    /// Re-establishes the canonical form: drops cloud dots covered by the vector and folds
    /// cloud dots that extend the vector contiguously into it. Idempotent. Every mutating
    /// method calls it, so callers only need it after building a context by hand.
    pub fn compact(&mut self) {
        let dots = std::mem::take(&mut self.cloud.dots);
        // Sorted by (node, counter): a chain `n+1, n+2, ...` is absorbed in one pass.
        for d in dots {
            let have = self.vv.get(d.node);
            if d.counter <= have {
                continue;
            }
            if d.counter == have + 1 {
                self.vv.raise(d.node, d.counter);
            } else {
                self.cloud.dots.insert(d);
            }
        }
    }

    /// Treat every dot covered by `frontier` as seen, then compact. Used by GC with the causally
    /// stable frontier: dots below it that this context lacks belong to other keys (or were
    /// delivered everywhere), so claiming them is harmless and turns the cloud into a vector.
    pub fn raise_to(&mut self, frontier: &VersionVector) {
        self.vv.merge(frontier);
        if self.cloud.is_empty() {
            return; // nothing to drop or absorb
        }
        for (node, _) in frontier.iter() {
            self.compact_node(node);
        }
    }

    /// A dot for `node` above every dot of `node` seen here. Useful when dots are numbered per
    /// key; with a node-wide counter use [`VersionVector::next_dot`] on the node's own vector.
    #[must_use]
    pub fn next_dot(&self, node: NodeId) -> Dot {
        let max = self.vv.get(node).max(self.cloud.max_for(node).unwrap_or(0));
        Dot::new(node, max + 1)
    }

    /// Whether every dot of this context is at or below `frontier` or is `extra`: the
    /// context adds nothing to `frontier` but `extra`.
    #[must_use]
    pub fn covered_by(&self, frontier: &VersionVector, extra: Option<Dot>) -> bool {
        let within = |d: Dot| d.counter <= frontier.get(d.node) || Some(d) == extra;
        self.vv.iter().all(|(node, counter)| {
            counter <= frontier.get(node)
                || extra.is_some_and(|e| {
                    e.node == node && e.counter == counter && counter == frontier.get(node) + 1
                })
        }) && self.cloud.iter().all(within)
    }

    /// The one dot of this context that `frontier` does not cover, other than `skip`:
    /// `Some(None)` when there is none, `Some(Some(d))` when `d` is the only one, None when
    /// there are more (found without listing a long range). What a compact state needs to
    /// know of a context; no allocation, as this is on the replicated write's path.
    #[must_use]
    pub fn dot_beyond(&self, frontier: &VersionVector, skip: Dot) -> Option<Option<Dot>> {
        let mut found: Option<Dot> = None;
        let mut note = |d: Dot| match found {
            Some(f) if f != d => false,
            _ => {
                found = Some(d);
                true
            }
        };
        for (node, counter) in self.vv.iter() {
            let low = frontier.get(node);
            if counter <= low {
                continue;
            }
            let skipped =
                u64::from(skip.node == node && skip.counter > low && skip.counter <= counter);
            if counter - low - skipped > 1 {
                return None;
            }
            for c in low + 1..=counter {
                let d = Dot::new(node, c);
                if d != skip && !note(d) {
                    return None;
                }
            }
        }
        for d in self.cloud.iter() {
            if d != skip && !frontier.contains(d) && !note(d) {
                return None;
            }
        }
        Some(found)
    }

    /// Whether every dot of `other` is in `self`.
    #[must_use]
    pub fn dominates(&self, other: &CausalContext) -> bool {
        let vector_covered = other.vv.iter().all(|(node, c)| {
            let have = self.vv.get(node);
            if have >= c {
                return true;
            }
            // The gap (have, c] must be entirely in our cloud; cheap reject first.
            let gap = c - have;
            (self.cloud.count_for(node) as u64) >= gap
                && (have + 1..=c).all(|k| self.cloud.contains(Dot::new(node, k)))
        });
        vector_covered && other.cloud.iter().all(|d| self.contains(d))
    }

    /// Whether no dot has been seen.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.vv.is_empty() && self.cloud.is_empty()
    }

    /// Every dot of this context, when there are at most `limit` of them (None otherwise).
    /// A delta's context names a handful of dots; a joined state's covers ranges too long to
    /// list. Small-delta joins use this to see which of the receiver's entries a delta can
    /// remove without visiting all of them.
    #[must_use]
    pub fn dots_within(&self, limit: usize) -> Option<Vec<Dot>> {
        let in_vv: u64 = self.vv.iter().map(|(_, c)| c).sum();
        if in_vv.saturating_add(self.cloud.len() as u64) > limit as u64 {
            return None;
        }
        let ranges = self
            .vv
            .iter()
            .flat_map(|(node, c)| (1..=c).map(move |k| Dot::new(node, k)));
        Some(ranges.chain(self.cloud.iter()).collect())
    }
}

impl Crdt for CausalContext {
    fn merge(&mut self, other: &Self) {
        CausalContext::merge(self, other);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(n: u32, c: u64) -> Dot {
        Dot::new(NodeId(n), c)
    }

    #[test]
    fn vector_merge_meet_dominates() {
        let a: VersionVector = [(NodeId(1), 3), (NodeId(2), 1)].into_iter().collect();
        let b: VersionVector = [(NodeId(1), 1), (NodeId(3), 4)].into_iter().collect();
        let mut j = a.clone();
        j.merge(&b);
        assert_eq!(j.get(NodeId(1)), 3);
        assert_eq!(j.get(NodeId(3)), 4);
        assert!(j.dominates(&a) && j.dominates(&b) && !a.dominates(&b));
        let mut m = a.clone();
        m.meet(&b);
        assert_eq!(m, [(NodeId(1), 1)].into_iter().collect());
        assert!(a.contains(d(1, 3)) && !a.contains(d(1, 4)) && !a.contains(d(1, 0)));
    }

    /// `dot_beyond` against a listing of every dot, on small contexts and frontiers.
    #[test]
    fn dot_beyond_finds_the_one_dot_the_frontier_lacks() {
        use proptest::prelude::*;
        let dots = proptest::collection::vec((1..4u32, 1..9u64), 0..10);
        proptest!(|(held in dots.clone(), front in proptest::collection::vec((1..4u32, 0..9u64), 0..3),
                    skip in (1..4u32, 1..9u64))| {
            let mut cc = CausalContext::new();
            for &(n, c) in &held {
                cc.insert(d(n, c));
            }
            let mut f = VersionVector::new();
            for &(n, c) in &front {
                f.raise(NodeId(n), c);
            }
            let skip = d(skip.0, skip.1);
            let want: Vec<Dot> = (1..4u32)
                .flat_map(|n| (1..9u64).map(move |c| d(n, c)))
                .filter(|&x| cc.contains(x) && !f.contains(x) && x != skip)
                .collect();
            let got = cc.dot_beyond(&f, skip);
            match want.len() {
                0 => prop_assert_eq!(got, Some(None)),
                1 => prop_assert_eq!(got, Some(Some(want[0]))),
                _ => prop_assert_eq!(got, None),
            }
        });
    }

    #[test]
    fn context_compacts_out_of_order_dots() {
        let mut cc = CausalContext::new();
        cc.insert(d(1, 3));
        cc.insert(d(1, 1));
        assert_eq!(cc.vv().get(NodeId(1)), 1);
        assert_eq!(cc.cloud().len(), 1);
        cc.insert(d(1, 2));
        assert_eq!(cc.vv().get(NodeId(1)), 3);
        assert!(cc.cloud().is_empty());
        assert_eq!(cc.next_dot(NodeId(1)), d(1, 4));
        cc.insert(d(1, 7));
        assert_eq!(cc.next_dot(NodeId(1)), d(1, 8));
    }

    #[test]
    fn from_dots_is_canonical_in_any_order() {
        // Every subset of dots 1..=5 of two nodes, in ascending and descending order: the same
        // context, holding exactly those dots, equal to the one `compact` builds.
        for mask in 0u32..1 << 10 {
            let dots: Vec<Dot> = (0..10)
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| d(1 + i / 5, 1 + u64::from(i % 5)))
                .collect();
            let up = CausalContext::from_dots(dots.iter().copied());
            let down = CausalContext::from_dots(dots.iter().rev().copied());
            let mut rebuilt = CausalContext::new();
            rebuilt.cloud.dots.extend(dots.iter().copied());
            rebuilt.compact();
            assert_eq!(up, down, "{dots:?}");
            assert_eq!(up, rebuilt, "{dots:?}");
            for n in 1..=2 {
                for c in 1..=6 {
                    assert_eq!(up.contains(d(n, c)), dots.contains(&d(n, c)), "{dots:?}");
                }
            }
        }
    }

    #[test]
    fn context_form_is_canonical() {
        let a = CausalContext::from_dots([d(1, 1), d(1, 2), d(2, 5)]);
        let mut b = CausalContext::from_dots([d(2, 5)]);
        b.merge(&CausalContext::from_dots([d(1, 2)]));
        b.merge(&CausalContext::from_dots([d(1, 1)]));
        assert_eq!(a, b);
    }

    #[test]
    fn context_dominates_with_gaps() {
        let a = CausalContext::from_dots([d(1, 1), d(1, 3), d(1, 4)]);
        let b = CausalContext::from_dots([d(1, 3)]);
        let c = CausalContext::from_dots([d(1, 1), d(1, 2)]);
        assert!(a.dominates(&b) && !b.dominates(&a) && !a.dominates(&c));
        let mut ac = a.clone();
        ac.merge(&c);
        assert!(ac.dominates(&a) && ac.dominates(&c));
        assert!(ac.cloud().is_empty());
    }

    #[test]
    fn raise_to_frontier_empties_cloud_below_it() {
        let mut cc = CausalContext::from_dots([d(1, 4), d(1, 9), d(2, 2)]);
        cc.raise_to(&[(NodeId(1), 5), (NodeId(2), 2)].into_iter().collect());
        assert_eq!(cc.cloud().iter().collect::<Vec<_>>(), vec![d(1, 9)]);
        assert_eq!(cc.vv().get(NodeId(1)), 5);
    }
}

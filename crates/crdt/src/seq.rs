//! Replicated growable array (RGA-style sequence) for Redis lists.
//!
//! # Model
//! Every element has a unique id (an [`Hlc`], which includes the issuing node) and an
//! [`Anchor`]: the element it was inserted after, or one of the two ends. The anchors form a
//! tree, and the document order is derived from the tree alone, so it does not depend on the
//! order in which replicas received the inserts:
//! - first the `Head` subtree: children of `Head` in *descending* id order, each followed by its
//!   own subtree;
//! - then the `Tail` subtree: children of `Tail` in *ascending* id order, each followed by its
//!   own subtree;
//! - the children of an element follow it in *descending* id order (depth first).
//!
//! With ids drawn from an [`crate::HlcClock`] that has observed every id the replica holds
//! ([`Rga::max_id`]), a new id is greater than all existing ones, which gives the intended
//! positions: `insert(After(x))` lands right after `x`, `push_front` (LPUSH) lands first, and
//! `push_back` (RPUSH, a child of `Tail`) lands last. Concurrent inserts at the same position
//! are all kept, ordered by id (newest first after an element or at the head, oldest first at
//! the tail). Ids that are not fresh still converge; they are only placed differently.
//!
//! Every insert also carries a fresh [`Dot`] (one per element, from the node-wide event counter)
//! and the sequence keeps the causal context of those dots, exactly like [`crate::OrSet`]: an
//! element one side lacks but whose dot it has seen was purged by GC there, and stays purged. So
//! a delayed duplicate of an old insert delta cannot resurrect a purged element.
//!
//! Removal leaves a tombstone (the element keeps its id, dot and anchor, drops its value) because
//! concurrent inserts may still anchor on it. Each element's value is an LWW register (LSET).
//! A removal beats a concurrent LSET of the same element; a removal never affects elements
//! inserted concurrently after it. An element whose anchor has not arrived yet (deltas can be
//! reordered) is kept but invisible until the anchor arrives.
//!
//! # Complexity
//! Insert/remove/set by id: O(log n). Iteration, `len` and position lookups: O(n log n) (the
//! tree is rebuilt from the id-ordered map). Merge: O(m log n) for m incoming elements.
//!
//! # GC
//! [`Crdt::gc`] purges tombstones whose removal dot is causally stable and that have no children
//! (repeatedly, so whole removed subtrees go). Under the stability contract no insert anchored
//! on such a tombstone can still be in flight, and a childless tombstone does not influence the
//! order of anything. The purged element's insert dot stays in the causal context (which the
//! frontier is also folded into, so its cloud stays bounded as for [`crate::OrSet`]).
//!
//! Bound: after GC every retained tombstone is either not yet stable or an ancestor of a live
//! element or of a retained tombstone. Queue-style use (RPUSH with LPOP, LPUSH with RPOP)
//! creates siblings under `Tail`/`Head`, so its tombstones are all purged; tombstones survive
//! only inside chains of LINSERTs that still lead to live elements.

use std::collections::BTreeMap;

use crate::{CausalContext, Crdt, Dot, Hlc, VersionVector};

/// Where an element is inserted: its parent in the anchor tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Anchor {
    /// At the front (LPUSH).
    Head,
    /// At the back (RPUSH).
    Tail,
    /// Immediately after the element with this id (LINSERT).
    After(Hlc),
}

/// Why a sequence operation was refused (the state is unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqError {
    /// The anchor element is unknown or removed (local inserts may only anchor on visible
    /// elements; that is what makes tombstone GC safe).
    AnchorNotVisible,
    /// The id or the insert dot is already used.
    DuplicateId,
    /// The target element is unknown or removed.
    NotVisible,
}

impl std::fmt::Display for SeqError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SeqError::AnchorNotVisible => "anchor element is not visible",
            SeqError::DuplicateId => "element id already used",
            SeqError::NotVisible => "element is not visible",
        })
    }
}

impl std::error::Error for SeqError {}

#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
enum Slot<V> {
    Live {
        value: V,
        ts: Hlc,
    },
    /// Tombstone. `by` is the least removal dot seen (any causally stable removal suffices for
    /// GC, so keeping one deterministic choice is enough).
    Removed {
        by: Dot,
    },
}

impl<V: Clone> Slot<V> {
    /// Join: `Live` values by LWW on `ts`, below `Removed`; removals keep the least dot.
    fn merge(&mut self, other: &Slot<V>) {
        match (&mut *self, other) {
            (Slot::Removed { by }, Slot::Removed { by: theirs }) => *by = (*by).min(*theirs),
            (Slot::Removed { .. }, Slot::Live { .. }) => {}
            (Slot::Live { .. }, Slot::Removed { .. }) => *self = other.clone(),
            (Slot::Live { ts, .. }, Slot::Live { ts: theirs, .. }) => {
                if theirs > ts {
                    *self = other.clone();
                }
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
struct Element<V> {
    /// The insert's dot: decides presence on merge (see the module docs).
    dot: Dot,
    anchor: Anchor,
    slot: Slot<V>,
}

impl<V: Clone> Element<V> {
    /// Joins another copy of the element with id `id` (ids are unique, so only the slot may
    /// differ).
    fn join_same(&mut self, id: Hlc, theirs: &Element<V>) {
        debug_assert_eq!(
            (self.dot, self.anchor),
            (theirs.dot, theirs.anchor),
            "id {id:?} reused"
        );
        self.slot.merge(&theirs.slot);
    }
}

/// A replicated sequence of `V`. See the module docs.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Rga<V> {
    elems: BTreeMap<Hlc, Element<V>>,
    /// Insert dots seen (invariant: contains every element's dot).
    cc: CausalContext,
}

impl<V> Default for Rga<V> {
    fn default() -> Self {
        Rga {
            elems: BTreeMap::new(),
            cc: CausalContext::new(),
        }
    }
}

impl<V: Clone> Rga<V> {
    /// The empty sequence.
    #[must_use]
    pub fn new() -> Rga<V> {
        Rga::default()
    }

    fn is_visible(&self, id: Hlc) -> bool {
        matches!(
            self.elems.get(&id),
            Some(Element {
                slot: Slot::Live { .. },
                ..
            })
        )
    }

    fn single(id: Hlc, elem: Element<V>) -> Rga<V> {
        let cc = CausalContext::from_dots([elem.dot]);
        Rga {
            elems: BTreeMap::from([(id, elem)]),
            cc,
        }
    }

    /// Inserts `value` at `anchor`, which must be an end or a visible element, with the fresh
    /// `id` (from the node's [`crate::HlcClock`]) and the fresh `dot` (from the node-wide event
    /// counter; one dot per element). Returns the delta (the new element).
    pub fn insert(
        &mut self,
        anchor: Anchor,
        id: Hlc,
        dot: Dot,
        value: V,
    ) -> Result<Rga<V>, SeqError> {
        if let Anchor::After(a) = anchor {
            if !self.is_visible(a) {
                return Err(SeqError::AnchorNotVisible);
            }
        }
        if self.elems.contains_key(&id) || self.cc.contains(dot) {
            return Err(SeqError::DuplicateId);
        }
        let elem = Element {
            dot,
            anchor,
            slot: Slot::Live { value, ts: id },
        };
        self.elems.insert(id, elem.clone());
        self.cc.insert(dot);
        Ok(Rga::single(id, elem))
    }

    /// Inserts right after the visible element `reference` (LINSERT AFTER; for LINSERT BEFORE
    /// pass the visible predecessor, or use [`Rga::push_front`] if there is none).
    pub fn insert_after(
        &mut self,
        reference: Hlc,
        id: Hlc,
        dot: Dot,
        value: V,
    ) -> Result<Rga<V>, SeqError> {
        self.insert(Anchor::After(reference), id, dot, value)
    }

    /// Inserts at the front (LPUSH).
    pub fn push_front(&mut self, id: Hlc, dot: Dot, value: V) -> Result<Rga<V>, SeqError> {
        self.insert(Anchor::Head, id, dot, value)
    }

    /// Inserts at the back (RPUSH).
    pub fn push_back(&mut self, id: Hlc, dot: Dot, value: V) -> Result<Rga<V>, SeqError> {
        self.insert(Anchor::Tail, id, dot, value)
    }

    /// Removes the visible element `id`; `by` is the removal's dot (from the node-wide event
    /// counter; one dot may be shared by all removals of one command). Returns the delta.
    pub fn remove(&mut self, id: Hlc, by: Dot) -> Result<Rga<V>, SeqError> {
        let elem = match self.elems.get_mut(&id) {
            Some(e) if matches!(e.slot, Slot::Live { .. }) => e,
            _ => return Err(SeqError::NotVisible),
        };
        elem.slot = Slot::Removed { by };
        Ok(Rga::single(id, elem.clone()))
    }

    /// Replaces the value of the visible element `id` (LSET) with an LWW write at `ts`; a write
    /// not newer than the current value's timestamp loses. Returns the delta.
    pub fn set(&mut self, id: Hlc, value: V, ts: Hlc) -> Result<Rga<V>, SeqError> {
        let elem = match self.elems.get_mut(&id) {
            Some(e) if matches!(e.slot, Slot::Live { .. }) => e,
            _ => return Err(SeqError::NotVisible),
        };
        let written = Element {
            dot: elem.dot,
            anchor: elem.anchor,
            slot: Slot::Live { value, ts },
        };
        elem.slot.merge(&written.slot);
        Ok(Rga::single(id, written))
    }

    /// Ids of all elements (tombstones included) in document order.
    fn order(&self) -> Vec<Hlc> {
        // Children lists come out in ascending id order because `elems` is id-ordered.
        let mut children: BTreeMap<Anchor, Vec<Hlc>> = BTreeMap::new();
        for (&id, e) in &self.elems {
            children.entry(e.anchor).or_default().push(id);
        }
        let mut out = Vec::with_capacity(self.elems.len());
        // A stack popped in document order: push the Tail children (wanted ascending) in
        // descending order, then the Head children (wanted descending) in ascending order.
        let mut stack: Vec<Hlc> = Vec::new();
        if let Some(t) = children.get(&Anchor::Tail) {
            stack.extend(t.iter().rev());
        }
        if let Some(h) = children.get(&Anchor::Head) {
            stack.extend(h.iter());
        }
        while let Some(id) = stack.pop() {
            out.push(id);
            if let Some(c) = children.get(&Anchor::After(id)) {
                stack.extend(c.iter()); // ascending pushed, so the greatest id pops first
            }
        }
        out
    }

    /// Visible `(id, value)` pairs in document order. O(n log n) to start.
    pub fn iter_visible(&self) -> impl Iterator<Item = (Hlc, &V)> + '_ {
        self.order()
            .into_iter()
            .filter_map(move |id| match &self.elems[&id].slot {
                Slot::Live { value, .. } => Some((id, value)),
                Slot::Removed { .. } => None,
            })
    }

    /// Visible ids in document order (for index-based commands: LINDEX, LSET, LRANGE, ...).
    #[must_use]
    pub fn visible_ids(&self) -> Vec<Hlc> {
        self.iter_visible().map(|(id, _)| id).collect()
    }

    /// The value of the visible element `id`.
    #[must_use]
    pub fn get(&self, id: Hlc) -> Option<&V> {
        match &self.elems.get(&id)?.slot {
            Slot::Live { value, .. } => Some(value),
            Slot::Removed { .. } => None,
        }
    }

    /// Number of visible elements (LLEN). O(n log n): orphans (anchor not yet arrived) are not
    /// visible, so this walks the tree.
    #[must_use]
    pub fn len(&self) -> usize {
        self.iter_visible().count()
    }

    /// Whether no element is visible.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        // Asked several times per replicated write of a key, so answer without ordering the
        // whole tree when possible: a live element anchored at an end is always visible, and
        // with nothing live the sequence is empty. Newest first, as old ones are the likeliest
        // tombstones. Only live elements that all hang off other elements need the full walk
        // (one of them may be an orphan whose anchor has not arrived).
        let mut any_live = false;
        for e in self.elems.values().rev() {
            if let Slot::Live { .. } = e.slot {
                if matches!(e.anchor, Anchor::Head | Anchor::Tail) {
                    return false;
                }
                any_live = true;
            }
        }
        !any_live || self.len() == 0
    }

    /// The causal context of insert dots (for metrics: `context().cloud().len()`).
    #[must_use]
    pub fn context(&self) -> &CausalContext {
        &self.cc
    }

    /// A copy without the causal context, for digests: elements and tombstones only.
    #[must_use]
    pub fn stripped(&self) -> Rga<V> {
        Rga {
            elems: self.elems.clone(),
            cc: CausalContext::new(),
        }
    }

    /// Number of tombstones held (a metric for GC).
    #[must_use]
    pub fn tombstones(&self) -> usize {
        self.elems
            .values()
            .filter(|e| matches!(e.slot, Slot::Removed { .. }))
            .count()
    }

    /// Elements held, tombstones and orphans included. O(1), unlike [`Rga::len`].
    #[must_use]
    pub fn elements_held(&self) -> usize {
        self.elems.len()
    }

    /// When merging `delta` only pushes new live elements at the ends (each anchored at the
    /// head or the tail, with an id above every id held here and a dot not seen here), the
    /// values it puts in front and at the back, each in document order; None otherwise.
    /// Lets a replica apply a list push to its copy of the list in the size of the push.
    #[must_use]
    pub fn end_pushes<'a>(&self, delta: &'a Rga<V>) -> Option<(Vec<&'a V>, Vec<&'a V>)> {
        if delta.elems.len() > crate::kernel::SMALL_DELTA_DOTS {
            return None;
        }
        let floor = self.max_elem_id();
        let mut front = Vec::new();
        let mut back = Vec::new();
        for (&id, e) in &delta.elems {
            let Slot::Live { value, .. } = &e.slot else {
                return None;
            };
            if floor.is_some_and(|f| id <= f) || self.cc.contains(e.dot) {
                return None;
            }
            match e.anchor {
                Anchor::Head => front.push(value),
                Anchor::Tail => back.push(value),
                Anchor::After(_) => return None,
            }
        }
        // No other element of `delta` reaches ours: its context holds its own dots only.
        let own: Vec<Dot> = delta.elems.values().map(|e| e.dot).collect();
        let reaches_ours = delta
            .cc
            .dots_within(crate::kernel::SMALL_DELTA_DOTS)?
            .into_iter()
            .any(|d| !own.contains(&d) && self.cc.contains(d));
        if reaches_ours {
            return None;
        }
        // Head children come in descending id order, tail children in ascending order.
        front.reverse();
        Some((front, back))
    }

    /// The greatest element id held (tombstones included). O(log n), unlike [`Rga::max_id`],
    /// which also reads every LSET timestamp: new ids only need to exceed the ids.
    #[must_use]
    pub fn max_elem_id(&self) -> Option<Hlc> {
        self.elems.keys().next_back().copied()
    }

    /// The greatest timestamp held (ids and LSET timestamps): observe it with the node's
    /// [`crate::HlcClock`] after a merge so new ids sort after every existing one.
    #[must_use]
    pub fn max_id(&self) -> Option<Hlc> {
        let ids = self.elems.keys().next_back().copied();
        let sets = self
            .elems
            .values()
            .filter_map(|e| match e.slot {
                Slot::Live { ts, .. } => Some(ts),
                Slot::Removed { .. } => None,
            })
            .max();
        ids.max(sets)
    }
}

impl<V: Clone> Rga<V> {
    /// The merge when `other` is a small delta whose context reaches none of our elements but
    /// the ones it carries (a push, pop or LSET of a long list): the same result as the general
    /// merge, in time proportional to `other`. Returns false, having changed nothing, when
    /// `other` does not qualify. Exact for the reason given at `DotKernel::join_small`: the
    /// general merge drops an element of ours only when `other`'s context holds its dot.
    fn merge_small(&mut self, other: &Self) -> bool {
        let Some(dots) = other.cc.dots_within(crate::kernel::SMALL_DELTA_DOTS) else {
            return false;
        };
        let reaches_only_carried = dots.iter().all(|&d| {
            !self.cc.contains(d)
                || other
                    .elems
                    .iter()
                    .any(|(id, e)| e.dot == d && self.elems.get(id).is_some_and(|m| m.dot == d))
        });
        if !reaches_only_carried {
            return false;
        }
        for (&id, theirs) in &other.elems {
            match self.elems.get_mut(&id) {
                Some(mine) => mine.join_same(id, theirs),
                None if !self.cc.contains(theirs.dot) => {
                    self.elems.insert(id, theirs.clone());
                }
                None => {}
            }
        }
        self.cc.merge(&other.cc);
        true
    }
}

impl<V: Clone> Crdt for Rga<V> {
    fn merge(&mut self, other: &Self) {
        if !self.merge_small(other) {
            self.merge_general(other);
        }
    }

    /// Purges childless tombstones whose removal dot is `<= stable`, repeatedly, and folds
    /// `stable` into the context.
    fn gc(&mut self, stable: &VersionVector) {
        self.gc_tombstones(stable);
    }
}

impl<V: Clone> Rga<V> {
    fn merge_general(&mut self, other: &Self) {
        // Same presence rule as the OR kernel: an element one side lacks but has seen the dot of
        // was purged there (elements are never dropped otherwise), so it stays purged.
        self.elems.retain(|id, mine| match other.elems.get(id) {
            Some(theirs) => {
                mine.join_same(*id, theirs);
                true
            }
            None => !other.cc.contains(mine.dot),
        });
        for (&id, theirs) in &other.elems {
            if !self.cc.contains(theirs.dot) {
                self.elems.insert(id, theirs.clone());
            }
        }
        self.cc.merge(&other.cc);
    }

    fn gc_tombstones(&mut self, stable: &VersionVector) {
        self.cc.raise_to(stable);
        if self.elems.is_empty() {
            return; // no tombstones to purge (most keys hold no list)
        }
        let purgeable =
            |e: &Element<V>| matches!(e.slot, Slot::Removed { by } if stable.contains(by));
        let mut child_count: BTreeMap<Hlc, usize> = BTreeMap::new();
        for e in self.elems.values() {
            if let Anchor::After(p) = e.anchor {
                *child_count.entry(p).or_default() += 1;
            }
        }
        let mut work: Vec<Hlc> = self
            .elems
            .iter()
            .filter(|(id, e)| purgeable(e) && !child_count.contains_key(id))
            .map(|(&id, _)| id)
            .collect();
        while let Some(id) = work.pop() {
            let Some(e) = self.elems.remove(&id) else {
                continue;
            };
            if let Anchor::After(p) = e.anchor {
                if let Some(n) = child_count.get_mut(&p) {
                    *n -= 1;
                    if *n == 0 {
                        child_count.remove(&p);
                        if self.elems.get(&p).is_some_and(purgeable) {
                            work.push(p);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HlcClock, NodeId};

    /// A test replica's clocks: HLC for ids, node-wide event counter for dots.
    struct N {
        clock: HlcClock,
        events: VersionVector,
    }

    impl N {
        fn new(n: u32) -> N {
            N {
                clock: HlcClock::new(NodeId(n)),
                events: VersionVector::new(),
            }
        }
        fn id(&mut self, wall: u64) -> Hlc {
            self.clock.now(wall)
        }
        fn dot(&mut self) -> Dot {
            self.events.next_dot(self.clock.node())
        }
    }

    fn values<V: Clone>(r: &Rga<V>) -> Vec<V> {
        r.iter_visible().map(|(_, v)| v.clone()).collect()
    }

    #[test]
    fn pushes_and_inserts_land_where_intended() {
        let mut n = N::new(1);
        let mut r = Rga::new();
        r.push_back(n.id(1), n.dot(), 'b').unwrap();
        r.push_back(n.id(2), n.dot(), 'c').unwrap();
        r.push_front(n.id(3), n.dot(), 'a').unwrap();
        let ids = r.visible_ids();
        r.insert_after(ids[1], n.id(4), n.dot(), 'x').unwrap();
        r.push_front(n.id(5), n.dot(), '0').unwrap();
        assert_eq!(values(&r), vec!['0', 'a', 'b', 'x', 'c']);
    }

    #[test]
    fn concurrent_inserts_are_all_kept_in_the_same_order_everywhere() {
        let (mut n1, mut n2) = (N::new(1), N::new(2));
        let mut a = Rga::new();
        let base = n1.id(10);
        a.push_back(base, n1.dot(), "base").unwrap();
        let mut b = a.clone();
        a.insert_after(base, n1.id(20), n1.dot(), "a1").unwrap();
        b.insert_after(base, n2.id(20), n2.dot(), "b1").unwrap();
        a.push_back(n1.id(21), n1.dot(), "a-end").unwrap();
        b.push_back(n2.id(21), n2.dot(), "b-end").unwrap();
        let ab = a.clone().merged(&b);
        let ba = b.merged(&a);
        assert_eq!(ab, ba);
        // Same time: node 2 has the greater id, so it comes first after `base` and last at tail.
        assert_eq!(values(&ab), vec!["base", "b1", "a1", "a-end", "b-end"]);
    }

    #[test]
    fn remove_keeps_concurrent_insert_after_it() {
        let (mut n1, mut n2) = (N::new(1), N::new(2));
        let mut a = Rga::new();
        let x = n1.id(1);
        a.push_back(x, n1.dot(), 1).unwrap();
        let mut b = a.clone();
        a.remove(x, n1.dot()).unwrap();
        b.insert_after(x, n2.id(2), n2.dot(), 2).unwrap();
        assert_eq!(values(&a.clone().merged(&b)), vec![2]);
        assert_eq!(values(&b.merged(&a)), vec![2]);
    }

    #[test]
    fn local_ops_require_visible_targets_and_fresh_ids() {
        let mut n = N::new(1);
        let mut r = Rga::new();
        let x = n.id(1);
        let dx = n.dot();
        r.push_back(x, dx, 1).unwrap();
        assert_eq!(r.push_back(x, n.dot(), 2), Err(SeqError::DuplicateId));
        assert_eq!(r.push_back(n.id(1), dx, 2), Err(SeqError::DuplicateId));
        r.remove(x, n.dot()).unwrap();
        assert_eq!(
            r.insert_after(x, n.id(2), n.dot(), 3),
            Err(SeqError::AnchorNotVisible)
        );
        assert_eq!(r.remove(x, n.dot()), Err(SeqError::NotVisible));
        assert_eq!(r.set(x, 5, n.id(3)), Err(SeqError::NotVisible));
    }

    #[test]
    fn lset_is_lww_and_loses_to_remove() {
        let (mut n1, mut n2) = (N::new(1), N::new(2));
        let mut a = Rga::new();
        let x = n1.id(1);
        a.push_back(x, n1.dot(), 0).unwrap();
        let mut b = a.clone();
        a.set(x, 1, n1.id(5)).unwrap();
        b.set(x, 2, n2.id(5)).unwrap();
        let ab = a.clone().merged(&b);
        assert_eq!(values(&ab), vec![2]);
        let mut r = a.clone();
        r.remove(x, n1.dot()).unwrap();
        assert!(b.merged(&r).is_empty());
    }

    #[test]
    fn gc_purges_queue_tombstones_and_keeps_needed_anchors() {
        let mut n = N::new(1);
        let mut r = Rga::new();
        let mut ids = Vec::new();
        for i in 0..5 {
            let id = n.id(i);
            r.push_back(id, n.dot(), i).unwrap(); // dots 1..=5
            ids.push(id);
        }
        for id in ids.iter().take(3) {
            r.remove(*id, n.dot()).unwrap(); // LPOP three: dots 6..=8
        }
        // A chain: insert after the 4th, then remove the 4th: its tombstone anchors a live child.
        let child = n.id(10);
        r.insert_after(ids[3], child, n.dot(), 99).unwrap(); // dot 9
        r.remove(ids[3], n.dot()).unwrap(); // dot 10
        let before = values(&r);
        let stale_insert = r.clone();
        r.gc(&n.events);
        assert_eq!(r.tombstones(), 1, "only the anchor of a live element stays");
        assert_eq!(values(&r), before);
        r.remove(child, n.dot()).unwrap();
        r.gc(&n.events);
        assert_eq!(
            r.tombstones(),
            0,
            "the chain goes once nothing hangs off it"
        );
        assert_eq!(values(&r), vec![4]);
        assert!(r.context().cloud().is_empty());
        // A delayed copy of old state (or of an old insert delta) does not bring anything back.
        r.merge(&stale_insert);
        assert_eq!(values(&r), vec![4]);
        assert_eq!(r.tombstones(), 0);
    }

    #[test]
    fn orphan_waits_for_its_anchor() {
        let mut n = N::new(1);
        let mut a = Rga::new();
        let d1 = a.push_back(n.id(1), n.dot(), 'x').unwrap();
        let x = a.visible_ids()[0];
        let d2 = a.insert_after(x, n.id(2), n.dot(), 'y').unwrap();
        let mut b = Rga::new().merged(&d2);
        assert!(b.is_empty());
        b.merge(&d1);
        assert_eq!(values(&b), vec!['x', 'y']);
        assert_eq!(a, b);
    }

    #[test]
    fn long_chain_does_not_overflow_the_stack() {
        let mut n = N::new(1);
        let mut r = Rga::new();
        let mut prev = n.id(0);
        r.push_back(prev, n.dot(), 0u32).unwrap();
        for i in 1..200_000u32 {
            let id = n.id(0);
            r.insert_after(prev, id, n.dot(), i).unwrap();
            prev = id;
        }
        assert_eq!(r.len(), 200_000);
    }

    proptest::proptest! {
        /// The small-delta merge gives exactly the general merge's result, on states and deltas
        /// of random histories (pushes at both ends, inserts, removals, LSETs, GC, deltas
        /// delivered in any order).
        #[test]
        fn small_delta_merge_equals_the_general_merge(
            ops in proptest::collection::vec((0u8..3, 0u8..7, proptest::prelude::any::<u16>()), 1..80)
        ) {
            let mut nodes: Vec<N> = (1..=3).map(N::new).collect();
            let mut replicas: Vec<Rga<u16>> = vec![Rga::new(); 3];
            let mut sent: Vec<Rga<u16>> = Vec::new();
            let mut wall = 0;
            for (r, kind, pick) in ops {
                let r = usize::from(r);
                wall += 1;
                let id = nodes[r].id(wall);
                let id = match replicas[r].max_elem_id() {
                    Some(m) if m >= id => Hlc { logical: m.logical + 1, ..id },
                    _ => id,
                };
                let visible = replicas[r].visible_ids();
                let target = visible.get(usize::from(pick) % visible.len().max(1)).copied();
                let delta = match (kind, target) {
                    (0, _) => replicas[r].push_front(id, nodes[r].dot(), pick).ok(),
                    (1, _) => replicas[r].push_back(id, nodes[r].dot(), pick).ok(),
                    (2, Some(t)) => replicas[r].insert_after(t, id, nodes[r].dot(), pick).ok(),
                    (3, Some(t)) => {
                        let by = nodes[r].dot();
                        replicas[r].remove(t, by).ok()
                    }
                    (4, Some(t)) => replicas[r].set(t, pick, id).ok(),
                    (5, _) => {
                        let d = if sent.is_empty() || pick % 5 == 0 {
                            replicas[usize::from(pick) % 3].clone()
                        } else {
                            sent[usize::from(pick) % sent.len()].clone()
                        };
                        let mut general = replicas[r].clone();
                        general.merge_general(&d);
                        let mut small = replicas[r].clone();
                        if small.merge_small(&d) {
                            proptest::prop_assert_eq!(&small, &general);
                        }
                        replicas[r] = general;
                        None
                    }
                    (6, _) => {
                        let stable = replicas.iter().fold(replicas[0].cc.vv().clone(), |mut m, x| {
                            m.meet(x.cc.vv());
                            m
                        });
                        replicas[r].gc_tombstones(&stable);
                        None
                    }
                    _ => None,
                };
                sent.extend(delta);
            }
        }
    }
}

//! Add-wins observed-remove set (Redis sets; sorted-set membership).
//!
//! Contract: each element carries the dots of the adds that produced it, and the set carries a
//! causal context of every dot it has seen.
//! - `add(e, dot)` tags `e` with a fresh dot and supersedes the dots of `e` this replica saw.
//! - `remove(e)` removes exactly the dots of `e` this replica has observed.
//! - Join: an element survives if one of its dots is on both sides, or on one side and unseen by
//!   the other. So an add concurrent with a remove of the same element wins (the remove could not
//!   have observed the new dot), while a remove that saw an add deletes it everywhere, and a
//!   stale replica cannot resurrect it (its dot is in the remover's context).
//!
//! Dots: each `add` needs a dot never used before, for any element (SADD of three members takes
//! three dots): a replica that has seen a dot treats an element it lacks under that dot as
//! removed.
//!
//! GC: the only removal metadata is the causal context. [`Crdt::gc`] folds the stable frontier
//! into its vector, so the dot cloud is bounded by the dots issued above the frontier.
//! Tombstones per element do not exist.

use crate::kernel::DotKernel;
use crate::{CausalContext, Crdt, Dot, VersionVector};

/// An add-wins observed-remove set of `E`.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct OrSet<E: Ord> {
    kernel: DotKernel<E, ()>,
}

impl<E: Ord> Default for OrSet<E> {
    fn default() -> Self {
        OrSet {
            kernel: DotKernel::default(),
        }
    }
}

impl<E: Ord + Clone> OrSet<E> {
    /// The empty set.
    #[must_use]
    pub fn new() -> OrSet<E> {
        OrSet::default()
    }

    /// Adds `elem` with the fresh `dot` (never used before by its node). Returns the delta: the
    /// element with `dot`, and in its context `dot` plus the element's previously observed dots.
    pub fn add(&mut self, elem: E, dot: Dot) -> OrSet<E> {
        OrSet {
            kernel: self.kernel.write(elem, dot, ()),
        }
    }

    /// Removes `elem`'s observed dots. Returns the delta (a context, no elements); empty if the
    /// element was absent.
    pub fn remove<Q>(&mut self, elem: &Q) -> OrSet<E>
    where
        E: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        OrSet {
            kernel: self.kernel.remove(elem),
        }
    }

    /// Removes every observed element (DEL of the key). Returns the delta.
    pub fn clear(&mut self) -> OrSet<E> {
        OrSet {
            kernel: self.kernel.clear(),
        }
    }

    /// Whether `elem` is present.
    #[must_use]
    pub fn contains<Q>(&self, elem: &Q) -> bool
    where
        E: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.kernel.entries.contains_key(elem)
    }

    /// Elements in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = &E> + '_ {
        self.kernel.entries.keys()
    }

    /// Number of elements.
    #[must_use]
    pub fn len(&self) -> usize {
        self.kernel.entries.len()
    }

    /// Whether there are no elements.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.kernel.entries.is_empty()
    }

    /// Whether joining `delta` can change no key of this set but the keys `delta` carries
    /// (a small delta of writes; a removal names keys by their dots alone, so it does not
    /// qualify). A replica then updates its copy of the value key by key.
    #[must_use]
    pub fn delta_changes_only_its_keys(&self, delta: &Self) -> bool {
        self.kernel.reaches_only_carried_keys(&delta.kernel)
    }

    /// The causal context (for metrics: `context().cloud().len()`).
    #[must_use]
    pub fn context(&self) -> &CausalContext {
        &self.kernel.cc
    }

    /// Elements with their supporting dots, borrowed: what a digest covers, without the
    /// causal context (contexts differ between replicas with equal contents).
    pub fn entries(&self) -> &std::collections::BTreeMap<E, crate::DotMap<()>> {
        &self.kernel.entries
    }

    /// The dots currently supporting `elem` (more than one after concurrent adds).
    pub fn dots<Q>(&self, elem: &Q) -> impl Iterator<Item = Dot> + '_
    where
        E: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.kernel
            .entries
            .get(elem)
            .into_iter()
            .flat_map(|m| m.keys().copied())
    }
}

impl<E: Ord + Clone> Crdt for OrSet<E> {
    fn merge(&mut self, other: &Self) {
        self.kernel.join(&other.kernel);
    }

    /// Folds `stable` into the context; afterwards the dot cloud holds only dots above it.
    fn gc(&mut self, stable: &VersionVector) {
        self.kernel.gc(stable);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NodeId;

    fn d(n: u32, c: u64) -> Dot {
        Dot::new(NodeId(n), c)
    }

    #[test]
    fn concurrent_add_and_remove_add_wins() {
        let mut a = OrSet::new();
        let _ = a.add("x", d(1, 1));
        let mut b = a.clone();
        let _ = a.remove("x");
        let _ = b.add("x", d(2, 1)); // concurrent re-add
        assert!(a.clone().merged(&b).contains("x"));
        assert!(b.merged(&a).contains("x"));
    }

    #[test]
    fn remove_that_saw_the_add_removes_it() {
        let mut a = OrSet::new();
        let mut b = OrSet::new();
        let _ = b.add("x", d(2, 1));
        let _ = b.add("x", d(2, 2));
        a.merge(&b);
        let _ = a.remove("x");
        assert!(!a.clone().merged(&b).contains("x"));
        assert!(
            !b.clone().merged(&a).contains("x"),
            "a stale replica must not resurrect it"
        );
    }

    #[test]
    fn concurrent_adds_keep_both_dots() {
        let mut a = OrSet::new();
        let mut b = OrSet::new();
        let _ = a.add("x", d(1, 1));
        let _ = b.add("x", d(2, 1));
        let ab = a.merged(&b);
        assert_eq!(ab.dots("x").count(), 2);
        assert_eq!(ab.len(), 1);
    }

    #[test]
    fn delta_reaches_a_replica_that_never_saw_the_element() {
        let mut a = OrSet::new();
        let d1 = a.add(7u8, d(1, 1));
        let d2 = a.remove(&7u8);
        let mut b = OrSet::new();
        b.merge(&d2); // out of order: the remove arrives first
        b.merge(&d1);
        assert!(!b.contains(&7));
        assert_eq!(b, a);
    }

    #[test]
    fn gc_empties_the_cloud_below_the_frontier() {
        let mut a = OrSet::new();
        let _ = a.add(1u8, d(1, 3)); // node-wide dots: 1 and 2 went to other keys
        let _ = a.add(2u8, d(1, 7));
        assert_eq!(a.context().cloud().len(), 2);
        a.gc(&[(NodeId(1), 5)].into_iter().collect());
        assert_eq!(a.context().cloud().len(), 1);
        assert!(a.contains(&1) && a.contains(&2));
    }
}

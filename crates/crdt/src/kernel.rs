//! The shared machinery of observed-remove types: a map `key -> {dot -> payload}` plus the
//! causal context of every dot ever seen.
//!
//! Invariant: every dot in `entries` is in `cc`. A key is present iff it has at least one dot.
//!
//! Join rule for one key's dots: a dot survives if both sides have it (its payloads are joined),
//! or one side has it and the other side's context does not contain it (the other side has not
//! seen it, so cannot have removed it). A dot one side has and the other has *seen but dropped*
//! was removed there, and stays removed. This is the add-wins observed-remove rule: a removal
//! only affects the dots it observed.
//!
//! Payloads are immutable per dot (an update writes a new dot carrying the new full value), so
//! the structure is a join-semilattice for any payload lattice.

use std::collections::BTreeMap;

use crate::{CausalContext, Crdt, Dot, DotMap, VersionVector};

#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub(crate) struct DotKernel<K: Ord, P> {
    pub(crate) entries: BTreeMap<K, DotMap<P>>,
    pub(crate) cc: CausalContext,
}

impl<K: Ord, P> Default for DotKernel<K, P> {
    fn default() -> Self {
        DotKernel {
            entries: BTreeMap::new(),
            cc: CausalContext::new(),
        }
    }
}

impl<K: Ord + Clone, P: Crdt> DotKernel<K, P> {
    /// Replace `key`'s dots with `{dot: payload}`. The delta carries the new dot and payload and,
    /// in its context, the new dot plus every dot of `key` this replica had observed (so the
    /// join removes them elsewhere too, unless concurrent dots exist there).
    pub(crate) fn write(&mut self, key: K, dot: Dot, payload: P) -> Self {
        debug_assert!(
            !self.cc.contains(dot),
            "dot {dot:?} reused: dots must be fresh"
        );
        let old = self
            .entries
            .insert(key.clone(), DotMap::single(dot, payload.clone()));
        self.cc.insert(dot);
        let cc = CausalContext::from_dots(
            std::iter::once(dot).chain(old.iter().flat_map(|m| m.keys().copied())),
        );
        DotKernel {
            entries: BTreeMap::from([(key, DotMap::single(dot, payload))]),
            cc,
        }
    }

    /// Remove `key` as observed: the delta is just the context of its dots.
    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Self
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let old = self.entries.remove(key);
        let cc = CausalContext::from_dots(old.iter().flat_map(|m| m.keys().copied()));
        DotKernel {
            entries: BTreeMap::new(),
            cc,
        }
    }

    /// Remove every observed key.
    pub(crate) fn clear(&mut self) -> Self {
        let old = std::mem::take(&mut self.entries);
        let cc = CausalContext::from_dots(old.values().flat_map(|m| m.keys().copied()));
        DotKernel {
            entries: BTreeMap::new(),
            cc,
        }
    }

    pub(crate) fn join(&mut self, other: &Self) {
        // Dots on our side: keep if the other side has them too, or has never seen them.
        self.entries.retain(|key, dots| {
            let theirs = other.entries.get(key);
            dots.retain(|dot, payload| match theirs.and_then(|t| t.get(dot)) {
                Some(p) => {
                    payload.merge(p);
                    true
                }
                None => !other.cc.contains(*dot),
            });
            !dots.is_empty()
        });
        // Dots only on their side: keep if we have never seen them. (A dot we have seen is
        // either in our entries, handled above, or was removed here.)
        for (key, dots) in &other.entries {
            for (dot, payload) in dots {
                if !self.cc.contains(*dot) {
                    self.entries
                        .entry(key.clone())
                        .or_default()
                        .insert(*dot, payload.clone());
                }
            }
        }
        self.cc.merge(&other.cc);
    }

    /// Fold the stable frontier into the context (see [`CausalContext::raise_to`]). Afterwards
    /// the dot cloud only holds dots above the frontier.
    ///
    /// Payloads are deliberately left alone: each is a frozen snapshot written at its dot, and
    /// concurrent snapshots of one key are joined when read. Raising a snapshot's own causal
    /// context (if it has one, e.g. a nested set) would make it claim to have seen, and hence
    /// removed, the elements of a concurrent snapshot. (Found by the GC property test.)
    pub(crate) fn gc(&mut self, stable: &VersionVector) {
        self.cc.raise_to(stable);
    }
}

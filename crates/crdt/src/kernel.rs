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

/// The most dots a delta's context may name for the small-delta joins
/// ([`DotKernel::join_small`], `Rga`'s merge): a command's delta names one or two per element
/// it wrote, anti-entropy states name whole ranges and take the general join.
pub(crate) const SMALL_DELTA_DOTS: usize = 64;

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

    /// Adds `{dot: payload}` to `key`'s dots, superseding none of them. The delta carries the
    /// new dot and payload, and only the new dot in its context.
    pub(crate) fn add_beside(&mut self, key: K, dot: Dot, payload: P) -> Self {
        debug_assert!(
            !self.cc.contains(dot),
            "dot {dot:?} reused: dots must be fresh"
        );
        self.entries
            .entry(key.clone())
            .and_modify(|m| {
                m.insert(dot, payload.clone());
            })
            .or_insert_with(|| DotMap::single(dot, payload.clone()));
        self.cc.insert(dot);
        DotKernel {
            entries: BTreeMap::from([(key, DotMap::single(dot, payload))]),
            cc: CausalContext::from_dots(std::iter::once(dot)),
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
        if !self.join_small(other) {
            self.join_general(other);
        }
    }

    fn join_general(&mut self, other: &Self) {
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

    /// The join when `other` is a small delta whose context reaches none of our keys but the
    /// ones it carries (a write or removal of a few fields of a large hash or set): the same
    /// result as the general join, in time proportional to `other` instead of to `self`.
    /// Returns false, having changed nothing, when `other` does not qualify.
    ///
    /// Why it is exact: the general join only drops a dot of ours that `other`'s context
    /// holds, and every dot of ours is in our context. So if each dot both contexts hold sits
    /// on one of `other`'s keys here, our other keys keep all their dots and need no visit.
    fn join_small(&mut self, other: &Self) -> bool {
        if !self.reaches_only_carried_keys(other) {
            return false;
        }
        for (key, theirs) in &other.entries {
            // Their dots we have never seen join ours; the ones we saw and dropped stay dropped.
            let fresh = theirs.iter().filter(|(d, _)| !self.cc.contains(**d));
            let mut added = DotMap::default();
            for (dot, payload) in fresh {
                added.insert(*dot, payload.clone());
            }
            match self.entries.get_mut(key) {
                Some(dots) => {
                    dots.retain(|dot, payload| match theirs.get(dot) {
                        Some(p) => {
                            payload.merge(p);
                            true
                        }
                        None => !other.cc.contains(*dot),
                    });
                    for (dot, payload) in added.iter() {
                        dots.insert(*dot, payload.clone());
                    }
                    if dots.is_empty() {
                        self.entries.remove(key);
                    }
                }
                None if !added.is_empty() => {
                    self.entries.insert(key.clone(), added);
                }
                None => {}
            }
        }
        self.cc.merge(&other.cc);
        true
    }

    /// Whether `other` is a small delta whose context holds none of our dots but those on
    /// the keys it carries: joining it changes no other key of ours.
    pub(crate) fn reaches_only_carried_keys(&self, other: &Self) -> bool {
        let Some(dots) = other.cc.dots_within(SMALL_DELTA_DOTS) else {
            return false;
        };
        dots.iter().all(|&d| {
            !self.cc.contains(d)
                || other
                    .entries
                    .keys()
                    .any(|k| self.entries.get(k).is_some_and(|m| m.get(&d).is_some()))
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NodeId;
    use proptest::prelude::*;

    type Kernel = DotKernel<u8, ()>;

    proptest! {
        /// The small-delta join gives exactly the general join's result, on states and deltas
        /// of random histories (writes, removals, GC raises, deltas delivered in any order).
        #[test]
        fn small_delta_join_equals_the_general_join(
            ops in proptest::collection::vec((0u8..3, 0u8..5, 0u8..6, any::<u16>()), 1..80)
        ) {
            let mut replicas: Vec<(Kernel, VersionVector)> =
                (0..3).map(|_| (Kernel::default(), VersionVector::new())).collect();
            let mut sent: Vec<Kernel> = Vec::new();
            for (r, kind, key, pick) in ops {
                let r = usize::from(r);
                let delta = match kind {
                    0 | 1 => {
                        let (k, counter) = &mut replicas[r];
                        let dot = counter.next_dot(NodeId(r as u32 + 1));
                        Some(k.write(key, dot, ()))
                    }
                    2 => Some(replicas[r].0.remove(&key)),
                    3 => {
                        // Deliver an earlier delta (or a whole state) to replica r.
                        let d = if sent.is_empty() || pick % 5 == 0 {
                            replicas[usize::from(key) % 3].0.clone()
                        } else {
                            sent[usize::from(pick) % sent.len()].clone()
                        };
                        let target = &mut replicas[r].0;
                        let mut general = target.clone();
                        general.join_general(&d);
                        let mut small = target.clone();
                        if small.join_small(&d) {
                            prop_assert_eq!(&small, &general);
                        }
                        *target = general;
                        None
                    }
                    _ => {
                        let stable = replicas.iter().fold(replicas[0].0.cc.vv().clone(), |mut m, x| {
                            m.meet(x.0.cc.vv());
                            m
                        });
                        replicas[r].0.gc(&stable);
                        None
                    }
                };
                sent.extend(delta);
            }
        }
    }
}

//! Dots: unique event identifiers.
//!
//! A [`Dot`] `(node, counter)` names the `counter`-th event issued by `node` (counters start at
//! 1). Dots tag additions in observed-remove types ([`crate::OrSet`], [`crate::OrMap`]) and
//! removals in [`crate::Rga`], and are what [`crate::VersionVector`] and
//! [`crate::CausalContext`] summarise.
//!
//! Recommended numbering: one counter per node shared by every key (a node-wide event counter).
//! Then a single version vector describes what a replica has seen across the whole keyspace and
//! can serve as the GC frontier (see [`crate::Crdt::gc`]). Per-key counters also work for merge
//! correctness, but then no node-wide frontier exists for GC.

use crate::NodeId;

/// The identity of one event: the `counter`-th event issued by `node`. Ordered by
/// `(node, counter)`. `counter` is at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Dot {
    /// The issuing node.
    pub node: NodeId,
    /// Position in the issuing node's event sequence, from 1.
    pub counter: u64,
}

impl Dot {
    /// Builds a dot. `counter` must be at least 1.
    #[must_use]
    pub const fn new(node: NodeId, counter: u64) -> Dot {
        Dot { node, counter }
    }
}

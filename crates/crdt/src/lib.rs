//! Conflict-free replicated data types for Lattice.
//!
//! Every type here is a *delta-state CRDT*: its states form a join-semilattice, [`Crdt::merge`]
//! is the join (commutative, associative, idempotent), and every mutating operation returns a
//! *delta*: a small value of the same type that, joined into any replica, has the effect of the
//! operation. Deltas can be shipped, lost, duplicated and reordered; joining full states
//! (anti-entropy) repairs whatever deltas did not arrive.
//!
//! The crate is pure and deterministic so that it behaves identically under the simulator and in
//! production: no IO, no clocks (wall time is passed in), no randomness, no threads, and only
//! ordered collections (`BTreeMap`/`BTreeSet`), so iteration order never depends on the process.
//!
//! | Module | Type | Used for |
//! | --- | --- | --- |
//! | [`hlc`] | [`Hlc`], [`HlcClock`] | timestamps that order writes (LWW, counter bases, list ids) |
//! | [`dot`], [`vv`] | [`Dot`], [`VersionVector`], [`DotCloud`], [`CausalContext`] | causal metadata, GC frontier |
//! | [`lww`] | [`LwwRegister`] | strings, hash fields, sorted-set scores |
//! | [`counter`] | [`Counter`] | INCR/DECR/INCRBY/INCRBYFLOAT |
//! | [`orset`] | [`OrSet`] | sets, sorted-set membership |
//! | [`ormap`] | [`OrMap`] | hashes (field -> register or counter) |
//! | [`seq`] | [`Rga`] | lists |
//!
//! Garbage collection: types that keep removal metadata implement [`Crdt::gc`], which takes the
//! *causally stable* frontier (see [`Crdt::gc`] for the exact contract the caller must meet).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod counter;
pub mod dot;
pub mod dotmap;
pub mod hlc;
mod kernel;
pub mod lww;
pub mod ormap;
pub mod orset;
pub mod seq;
pub mod vv;

pub use counter::{Counter, CounterError, CounterValue, Number};
pub use dot::Dot;
pub use dotmap::DotMap;
pub use hlc::{Hlc, HlcClock, Skew};
pub use lww::LwwRegister;
pub use ormap::OrMap;
pub use orset::OrSet;
pub use seq::{Anchor, Rga, SeqError};
pub use vv::{CausalContext, DotCloud, VersionVector};

/// Identity of a replica. Unique in the cluster and never reused: it breaks timestamp ties and
/// names the writer of dots and counter contributions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct NodeId(pub u32);

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// A state-based CRDT: a join-semilattice.
///
/// Laws (checked by property tests for every type in this crate), for reachable states:
/// - commutative: `a ⊔ b = b ⊔ a`
/// - associative: `(a ⊔ b) ⊔ c = a ⊔ (b ⊔ c)`
/// - idempotent: `a ⊔ a = a`
///
/// Mutating operations are inherent methods on each type; each returns the operation's delta
/// (`Self`), with the guarantee `op(x) = x ⊔ delta` for the replica `x` it was applied to.
pub trait Crdt: Clone {
    /// Join `other` into `self` (least upper bound).
    fn merge(&mut self, other: &Self);

    /// Consuming form of [`Crdt::merge`].
    #[must_use]
    fn merged(mut self, other: &Self) -> Self {
        self.merge(other);
        self
    }

    /// Joins an owned `other` into `self`, moving it in when `self` is the bottom element
    /// (the join of bottom and x is x): how a fresh delta is filled without cloning payloads.
    fn absorb(&mut self, other: Self)
    where
        Self: Default + PartialEq,
    {
        if *self == Self::default() {
            *self = other;
        } else {
            self.merge(&other);
        }
    }

    /// Drop metadata that is no longer needed because every replica has seen it.
    ///
    /// Contract for `stable` (the caller, i.e. the node, must guarantee it): it is a *causally
    /// stable* frontier over the node-wide event dots, meaning
    /// 1. every replica has merged every delta carrying a dot `<= stable`, and
    /// 2. every operation not `<= stable` that any replica has issued or will issue was issued
    ///    after that replica had merged everything `<= stable` (it is in their causal future).
    ///
    /// A sufficient way to compute it: collect from every replica the version vector of dots it
    /// has merged (its own counter included); their pointwise minimum `S` satisfies (1). `S`
    /// also satisfies (2) once a *later* round of acknowledgements has a pointwise minimum that
    /// dominates the pointwise maximum of the round that produced `S`.
    ///
    /// Call it on a replica's own state of an object (what the node stores per key), and take
    /// "every replica" to mean every replica of that object. Never call it on a value stored as
    /// a payload inside another CRDT: payloads are frozen snapshots (see [`OrMap`]).
    ///
    /// Types without removal metadata keep the default no-op. Each implementation documents
    /// what it drops and what it retains (the bound).
    fn gc(&mut self, _stable: &VersionVector) {}
}

/// The unit payload (used by [`OrSet`]) is the one-point lattice.
impl Crdt for () {
    fn merge(&mut self, _other: &Self) {}
}

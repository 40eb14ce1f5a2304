//! Placement for a partitioned cluster: which nodes own which of the 16384 hash slots, what
//! moves when the membership changes, and which keys are hot enough to deserve more replicas.
//!
//! Pure and deterministic (no clocks, no randomness, no unordered iteration): every node that
//! knows the same membership computes the same owners, which is what lets placement work
//! without a coordinator. The node crate decides with it; the drivers never do.

pub mod hotkeys;
pub mod keyslot;
pub mod slots;

pub use hotkeys::HotKeys;
pub use keyslot::{hash_tag, key_slot};
pub use slots::{Move, NodeId, Placement, GROUPS, SLOTS, SLOTS_PER_GROUP};

//! The one key hash every part of Lattice agrees on.
//!
//! xxh3 with its fixed default secret: stable across processes, versions and machines, which
//! slot assignment (SCAN cursors), Merkle anti-entropy digests and sharding all rely on. A
//! per-process random seed would resist hash flooding better but would make two replicas
//! disagree on where a key lives; we accept the flooding risk and bound slot sizes instead.

/// Hash of a key; the top bits choose the slot (see [`crate::db::SLOT_COUNT`]).
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

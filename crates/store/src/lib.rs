//! The keyspace of one node: what is stored and how it is found, nothing about commands.
//!
//! Pure by construction: no IO, no clocks (callers pass `now_ms`), no randomness (callers pass
//! random numbers they drew from their own seeded generator).

pub mod changes;
pub mod db;
pub mod dump;
pub mod glob;
pub mod hash;
pub mod keyhash;
pub mod list;
pub mod ostree;
pub mod rdb;
pub mod set;
pub mod stream;
pub mod value;
pub mod zset;

pub use changes::{Changed, Changes};
pub use db::{
    lfu_log_incr, store_slot_of, AccessClock, Db, DbStats, Entry, EntryBox, TableStats,
    LFU_INIT_VAL, SLOT_COUNT,
};
pub use glob::glob_match;
pub use hash::Hash;
pub use keyhash::key_hash;
pub use list::List;
pub use set::Set;
pub use stream::{Stream, StreamId};
pub use value::{Str, Value};
pub use zset::ZSet;

/// Asks the CPU to start loading the cache line at `p` (no effect on other targets): the
/// primitive behind [`Db::prefetch`].
#[inline]
pub(crate) fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults or reads memory into the program,
    // whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

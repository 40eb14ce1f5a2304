//! One keyspace: keys partitioned into fixed hash slots, plus an index of expiry deadlines.
//!
//! Why fixed slots: a key's slot depends only on its hash, never on table size, so
//! - a SCAN cursor is simply "the next slot to visit", and it stays valid while tables grow or
//!   shrink (every key present for the whole scan is returned at least once);
//! - each slot's table is small, so growing it never stalls the node for a large rehash;
//! - anti-entropy and sharding can work slot by slot later.
//!
//! Why an ordered deadline index instead of Redis's random sampling: active expiry then removes
//! exactly the keys that are due, oldest first, with work bounded per call; it costs one ordered
//! map entry per key with a TTL.

use std::alloc::{self, Layout};
use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::ptr::NonNull;

use hashbrown::HashTable;

use crate::changes::{Changed, Changes};
use crate::keyhash::key_hash;
use crate::value::{Str, Value};

/// Number of hash slots; the top `SLOT_BITS` bits of a key's hash choose its slot.
pub const SLOT_BITS: u32 = 14;
pub const SLOT_COUNT: usize = 1 << SLOT_BITS;

/// A stored key with its value and metadata, and the key's bytes after them.
///
/// Every key lives in one heap block: this header, then the key (see [`EntryBox`]). The slot
/// tables hold only 8-byte pointers to the blocks, so a table's empty buckets (hashbrown keeps
/// up to half of them empty after growing) cost 8 bytes each instead of a whole entry, and a
/// key costs one allocation for itself instead of a table entry plus a boxed key.
#[repr(C)]
pub struct Entry {
    pub value: Value,
    /// Absolute deadline in ms since the Unix epoch on the node's clock. Private so that every
    /// change goes through [`Db::set_expire`] and the deadline index cannot fall out of step.
    /// Stored as a non-zero integer so the option costs no space (a deadline of 0 ms, long
    /// past, is stored as 1 ms: equally past).
    deadline_ms: Option<NonZeroU64>,
    /// The key's access word, read as the [`Db`]'s [`AccessClock`] says, as Redis reads its
    /// 24-bit `lru` field by policy: under LRU the last time a command read or wrote the key
    /// (OBJECT IDLETIME), in whole seconds since the epoch (the resolution of Redis's LRU
    /// clock, in 4 bytes instead of 8); under LFU Redis's counter and the minute of its last
    /// decay ([`Entry::lfu_counter`]).
    access_s: u32,
    /// The key's length, or [`LONG_KEY`] when the key is at least that long and its length is
    /// in the first 8 bytes of `tail`; the top bit is the replication mark ([`MARK`]).
    key_len: u32,
    tail: [u8],
}

/// The sized part of [`Entry`], for laying out and writing a new block. `#[repr(C)]` on both
/// puts the fields at the same offsets, and the tail right after `key_len` (asserted below).
#[repr(C)]
struct Head {
    value: Value,
    deadline_ms: Option<NonZeroU64>,
    access_s: u32,
    key_len: u32,
}

const _: () = assert!(
    std::mem::size_of::<Head>() == std::mem::offset_of!(Head, key_len) + 4,
    "Head must end where Entry's tail begins"
);

/// Key lengths from here up are stored in the tail as 8 bytes (a key over 4 GiB needs a
/// proto-max-bulk-len raised past its default 512 MiB). Small under test, so the long form is
/// exercised by ordinary keys.
const LONG_KEY: u32 = if cfg!(test) { 24 } else { LEN_MASK };

/// The top bit of `key_len`: the key is marked (see [`Db::set_mark`]). A bit the block already
/// had, so marking costs no memory: a replicating node keeps the compact states of about every
/// key without their key bytes, and the mark says which stored key such a state belongs to.
const MARK: u32 = 1 << 31;
/// The bits of `key_len` that hold the length (or [`LONG_KEY`]).
const LEN_MASK: u32 = !MARK;

impl Entry {
    pub fn key(&self) -> &[u8] {
        if self.key_len & LEN_MASK == LONG_KEY {
            &self.tail[8..]
        } else {
            &self.tail
        }
    }

    pub fn expire_at_ms(&self) -> Option<u64> {
        self.deadline_ms.map(NonZeroU64::get)
    }

    /// Whether the key carries the mark (see [`Db::set_mark`]).
    pub fn is_marked(&self) -> bool {
        self.key_len & MARK != 0
    }

    /// True when the deadline has passed at `now_ms`. A key expires at its deadline exactly,
    /// as in Redis (`now > when` keeps it alive for the deadline millisecond itself).
    pub fn is_expired(&self, now_ms: u64) -> bool {
        matches!(self.expire_at_ms(), Some(t) if t < now_ms)
    }

    /// The last access, to the second below it (ms since the epoch).
    pub fn access_ms(&self) -> u64 {
        u64::from(self.access_s) * 1000
    }

    /// Records an access at `ms` (kept to the second).
    pub fn set_access_ms(&mut self, ms: u64) {
        self.access_s = seconds(ms);
    }

    /// Records a command's access at `now_ms` as `clock` keeps it: the time under LRU; under
    /// LFU the counter decayed to now, then raised with Redis's probability
    /// `1 / ((counter - 5) * log_factor + 1)`, drawn from `draw` (a uniform 64-bit number).
    pub fn touch(&mut self, now_ms: u64, clock: AccessClock, draw: u64) {
        match clock {
            AccessClock::Lru => self.set_access_ms(now_ms),
            AccessClock::Lfu {
                log_factor,
                decay_min,
            } => {
                let counter = lfu_log_incr(self.lfu_counter(now_ms, decay_min), log_factor, draw);
                self.set_lfu(now_ms, counter);
            }
        }
    }

    /// The LFU counter (the access word read as LFU data), decayed by one per `decay_min`
    /// minutes since its last decay (0: never), without recording an access: OBJECT FREQ, and
    /// what LFU eviction ranks by (the lowest goes first).
    pub fn lfu_counter(&self, now_ms: u64, decay_min: u32) -> u8 {
        let counter = (self.access_s & 0xff) as u8;
        let last_min = (self.access_s >> 8) & 0xffff;
        let now_min = lfu_minutes(now_ms);
        // The minute clock wraps at 65536 minutes (about 45 days), as Redis's does.
        let elapsed = if now_min >= last_min {
            now_min - last_min
        } else {
            0xffff - last_min + now_min
        };
        let periods = elapsed.checked_div(decay_min).unwrap_or(0);
        counter.saturating_sub(u8::try_from(periods).unwrap_or(u8::MAX))
    }

    /// Sets the LFU counter, its decay counted from `now_ms` (RESTORE ... FREQ).
    pub fn set_lfu(&mut self, now_ms: u64, counter: u8) {
        self.access_s = lfu_word(now_ms, counter);
    }

    /// Bytes this key costs: its block, what its value holds on the heap, and its share of a
    /// slot table (an 8-byte pointer and a control byte per bucket, at a typical load of 9/16).
    pub fn memory_usage(&self) -> usize {
        const TABLE_SHARE: usize = 16;
        std::mem::size_of_val(self) + self.value.heap_bytes() + TABLE_SHARE
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("value", &self.value)
            .field("deadline_ms", &self.expire_at_ms())
            .field("access_ms", &self.access_ms())
            .finish()
    }
}

fn seconds(ms: u64) -> u32 {
    u32::try_from(ms / 1000).unwrap_or(u32::MAX)
}

/// How the store keeps each key's access word: Redis keeps the last access time or the LFU
/// counter in the same 24 bits of a key, by `maxmemory-policy`; a key costs no more under
/// either. Switching reads the old words the other way until keys are accessed again, as in
/// Redis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AccessClock {
    /// The last access in seconds (every policy but the LFU ones).
    #[default]
    Lru,
    /// Redis's LFU: an 8-bit logarithmic counter (`lfu-log-factor`) and the minute of its last
    /// decay (16 bits), the counter losing one per `decay_min` minutes (`lfu-decay-time`).
    Lfu { log_factor: u32, decay_min: u32 },
}

/// The counter a new key starts with under LFU (Redis's `LFU_INIT_VAL`): a new key is not
/// evicted before it had a chance to be read.
pub const LFU_INIT_VAL: u8 = 5;

/// Minutes since the epoch, modulo 65536 (Redis's `LFUGetTimeInMinutes`).
fn lfu_minutes(now_ms: u64) -> u32 {
    ((now_ms / 60_000) & 0xffff) as u32
}

fn lfu_word(now_ms: u64, counter: u8) -> u32 {
    (lfu_minutes(now_ms) << 8) | u32::from(counter)
}

/// Redis's `LFULogIncr`: the counter grows by one with probability
/// `1 / ((counter - LFU_INIT_VAL) * log_factor + 1)` (certainly below the initial value),
/// saturating at 255; `draw` is the uniform random number deciding it.
pub fn lfu_log_incr(counter: u8, log_factor: u32, draw: u64) -> u8 {
    if counter == u8::MAX {
        return counter;
    }
    let r = draw as f64 / u64::MAX as f64;
    let base = f64::from(counter.saturating_sub(LFU_INIT_VAL));
    let p = 1.0 / (base * f64::from(log_factor) + 1.0);
    if r < p {
        counter + 1
    } else {
        counter
    }
}

/// An owned [`Entry`] behind a thin pointer: what the slot tables hold, and what
/// [`Db::remove`] hands back. Like a `Box<Entry>`, but 8 bytes instead of 16, because the
/// key's length is read from the block instead of being carried in the pointer.
pub struct EntryBox(NonNull<Head>);

// SAFETY: an EntryBox owns its block exclusively, as a Box does, and the block holds only the
// value (checked below to be Send and Sync) and plain integers and bytes.
unsafe impl Send for EntryBox {}
// SAFETY: shared access only reads, through `&Entry`.
unsafe impl Sync for EntryBox {}

const _: () = {
    const fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Value>();
};

/// The block for a tail of `tail_len` bytes: the header, then the tail, padded to the
/// header's alignment (the size `size_of_val` reports for the `Entry`).
fn block_layout(tail_len: usize) -> Layout {
    let (layout, offset) = Layout::new::<Head>()
        .extend(Layout::array::<u8>(tail_len).expect("key length fits a layout"))
        .expect("key length fits a layout");
    debug_assert_eq!(offset, std::mem::size_of::<Head>());
    layout.pad_to_align()
}

impl EntryBox {
    fn new(key: &[u8], value: Value, deadline_ms: Option<NonZeroU64>, access_s: u32) -> Self {
        let (key_len, prefix) = match u32::try_from(key.len()) {
            Ok(n) if n < LONG_KEY => (n, 0),
            _ => (LONG_KEY, 8),
        };
        let layout = block_layout(prefix + key.len());
        // SAFETY: the layout has a non-zero size (the header). Every field of the header and
        // every tail byte is written before the block is used as an Entry.
        unsafe {
            let raw = alloc::alloc(layout);
            if raw.is_null() {
                alloc::handle_alloc_error(layout);
            }
            let head = raw.cast::<Head>();
            head.write(Head {
                value,
                deadline_ms,
                access_s,
                key_len,
            });
            let tail = raw.add(std::mem::size_of::<Head>());
            if prefix > 0 {
                std::ptr::copy_nonoverlapping((key.len() as u64).to_ne_bytes().as_ptr(), tail, 8);
            }
            std::ptr::copy_nonoverlapping(key.as_ptr(), tail.add(prefix), key.len());
            EntryBox(NonNull::new_unchecked(head))
        }
    }

    /// True when this entry's key is `key`: the table's equality test, which compares the
    /// stored length before touching the bytes, as slice equality does.
    #[inline]
    fn has_key(&self, key: &[u8]) -> bool {
        let head = self.0.as_ptr();
        // SAFETY: the block is live; a short key is `key_len` bytes right after the header.
        unsafe {
            let n = (*head).key_len & LEN_MASK;
            if n == LONG_KEY {
                return self.key() == key;
            }
            n as usize == key.len()
                && std::slice::from_raw_parts(
                    head.cast::<u8>().add(std::mem::size_of::<Head>()),
                    key.len(),
                ) == key
        }
    }

    fn tail_len(&self) -> usize {
        let head = self.0.as_ptr();
        // SAFETY: the block is live and initialised (see `new`); a long key's length is in the
        // tail's first 8 bytes, which may be unaligned.
        unsafe {
            match (*head).key_len & LEN_MASK {
                LONG_KEY => {
                    let tail = head.cast::<u8>().add(std::mem::size_of::<Head>());
                    8 + tail.cast::<u64>().read_unaligned() as usize
                }
                n => n as usize,
            }
        }
    }

    /// The whole block as an `Entry`: a slice pointer over the tail, cast to the unsized
    /// struct, carries the tail's length as the `Entry`'s metadata.
    fn as_ptr(&self) -> *mut Entry {
        std::ptr::slice_from_raw_parts_mut(self.0.as_ptr().cast::<u8>(), self.tail_len())
            as *mut Entry
    }

    /// The value, the block freed.
    pub fn into_value(self) -> Value {
        let layout = block_layout(self.tail_len());
        let raw = self.0.as_ptr();
        std::mem::forget(self);
        // SAFETY: the value is moved out exactly once and the block, allocated with `layout`,
        // is freed without dropping it again.
        unsafe {
            let value = std::ptr::addr_of!((*raw).value).read();
            alloc::dealloc(raw.cast(), layout);
            value
        }
    }
}

impl std::ops::Deref for EntryBox {
    type Target = Entry;
    fn deref(&self) -> &Entry {
        // SAFETY: the block is live and initialised for as long as self is.
        unsafe { &*self.as_ptr() }
    }
}

impl std::ops::DerefMut for EntryBox {
    fn deref_mut(&mut self) -> &mut Entry {
        // SAFETY: as for deref, and `&mut self` makes the access exclusive.
        unsafe { &mut *self.as_ptr() }
    }
}

impl Drop for EntryBox {
    fn drop(&mut self) {
        let layout = block_layout(self.tail_len());
        let raw = self.0.as_ptr();
        // SAFETY: the block was allocated with this layout; the value is dropped once.
        unsafe {
            std::ptr::drop_in_place(std::ptr::addr_of_mut!((*raw).value));
            alloc::dealloc(raw.cast(), layout);
        }
    }
}

impl std::fmt::Debug for EntryBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

fn pack(deadline_ms: Option<u64>) -> Option<NonZeroU64> {
    deadline_ms.map(|t| NonZeroU64::new(t).unwrap_or(NonZeroU64::MIN))
}

/// The deadline as it will be stored (0 becomes 1), so the index and the entry agree.
fn normalize(deadline_ms: Option<u64>) -> Option<u64> {
    pack(deadline_ms).map(NonZeroU64::get)
}

#[inline]
fn slot_of(hash: u64) -> usize {
    (hash >> (64 - SLOT_BITS)) as usize
}

/// The store slot that holds `key` (the order [`Db::for_each_in_slot`] walks keys in: a
/// snapshot walking slots has passed `key` once it is past this slot).
pub fn store_slot_of(key: &[u8]) -> usize {
    slot_of(crate::key_hash(key))
}

/// The hash handed to a slot's table. The slot bits are the same for every key of a slot, so
/// the table must not see them in the bits it uses for buckets (low) or tags (high): an odd
/// multiplier keeps the low bits a bijection of the key hash's low bits and mixes the high ones.
/// A large hash's index uses it too, on the 32 hash bits its entries keep (hash.rs).
#[inline]
pub(crate) fn table_hash(hash: u64) -> u64 {
    hash.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn rehash(entry: &EntryBox) -> u64 {
    table_hash(key_hash(entry.key()))
}

/// Counters the node reports in INFO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DbStats {
    pub expired_keys: u64,
}

/// How the slot tables use their memory (for MEMORY STATS-like reports and measurements).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Slot tables that hold an allocation.
    pub tables: usize,
    /// Buckets over all tables (occupied or not).
    pub buckets: usize,
    pub entries: usize,
    /// Bytes one bucket takes in a table, besides its control byte.
    pub bucket_bytes: usize,
    /// Bytes the tables hold on the heap (buckets and control bytes).
    pub heap_bytes: usize,
}

/// A keyspace. All times are supplied by the caller.
pub struct Db {
    slots: Vec<HashTable<EntryBox>>,
    len: usize,
    /// (deadline ms, key hash) -> how many keys share both (a 64-bit hash collision at the same
    /// millisecond is unlikely but must not lose a deadline).
    deadlines: BTreeMap<(u64, u64), u32>,
    volatile: usize,
    stats: DbStats,
    /// The keys of marked entries removed since the owner of the marks last asked
    /// ([`Db::was_marked`], [`Db::forget_marked`]): a mark says which key a keyless record
    /// elsewhere belongs to, and that must stay known until the record is updated after the
    /// command that removed the key. Empty on a node that marks nothing.
    marked_gone: Vec<Box<[u8]>>,
    /// The keys changed since the last [`Db::take_changes`] (off unless asked for).
    changes: Changes,
    /// How access words are kept (the owner sets it from `maxmemory-policy`).
    clock: AccessClock,
    /// The state of the generator LFU increments draw from (xorshift64*: deterministic, so a
    /// simulated node replays its counters exactly; never zero).
    draws: u64,
}

impl Default for Db {
    fn default() -> Self {
        Self::new()
    }
}

impl Db {
    pub fn new() -> Db {
        let mut slots = Vec::with_capacity(SLOT_COUNT);
        slots.resize_with(SLOT_COUNT, HashTable::new);
        Db {
            slots,
            len: 0,
            deadlines: BTreeMap::new(),
            volatile: 0,
            stats: DbStats::default(),
            marked_gone: Vec::new(),
            changes: Changes::default(),
            clock: AccessClock::Lru,
            draws: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// How access words are kept from now on (`maxmemory-policy`, `lfu-log-factor`,
    /// `lfu-decay-time`); words already stored are read the new way, as in Redis.
    pub fn set_access_clock(&mut self, clock: AccessClock) {
        self.clock = clock;
    }

    pub fn access_clock(&self) -> AccessClock {
        self.clock
    }

    /// A uniform 64-bit number from this store's generator, for an LFU increment
    /// ([`Entry::touch`]); the caller draws before it borrows the entry from the store.
    pub fn draw(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.draws;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.draws = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Keys stored, including expired ones not yet reclaimed (as Redis's DBSIZE counts).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keys that carry a deadline.
    pub fn volatile_len(&self) -> usize {
        self.volatile
    }

    pub fn stats(&self) -> DbStats {
        self.stats
    }

    /// The entry for `key` whatever its deadline (no lazy expiry).
    pub fn get_raw(&self, key: &[u8]) -> Option<&Entry> {
        self.get_raw_hashed(key_hash(key), key)
    }

    /// [`Db::get_raw`] for a caller that already holds `h`, the key's [`key_hash`].
    pub fn get_raw_hashed(&self, h: u64, key: &[u8]) -> Option<&Entry> {
        debug_assert_eq!(h, key_hash(key));
        self.slots[slot_of(h)]
            .find(table_hash(h), |e| e.has_key(key))
            .map(|e| &**e)
    }

    /// A hint that `key` (and, in a hash or a set, `member`) is about to be used: finds the
    /// entry and asks the CPU to fetch the string value's bytes, or finds the member, without
    /// waiting for the bytes. A pipeline's keys are hinted one after another before any
    /// command runs, so their cache misses (the table probe, the entry, the value: most of a
    /// random-key GET's time) overlap instead of following one another.
    /// Changes nothing; a missing key costs only the probe.
    pub fn prefetch(&self, key: &[u8], member: Option<&[u8]>) {
        let Some(e) = self.get_raw(key) else {
            return;
        };
        match (&e.value, member) {
            (Value::Str(Str::Raw(v)), _) => crate::prefetch_line(v.as_ptr()),
            (Value::Hash(hash), Some(m)) => hash.prefetch(m),
            (Value::Set(set), Some(m)) => set.prefetch(m),
            _ => {}
        }
    }

    /// The live entry for `key`: an expired entry is deleted on the spot (lazy expiry) and
    /// reported absent. `on_expired` sees the entry before it goes.
    pub fn get_live(
        &mut self,
        key: &[u8],
        now_ms: u64,
        on_expired: impl FnOnce(&Entry),
    ) -> Option<&mut Entry> {
        let h = key_hash(key);
        let slot = slot_of(h);
        // One probe: the bucket's index stays valid until the table changes.
        let table = &mut self.slots[slot];
        let index = table.find_bucket_index(table_hash(h), |e| e.has_key(key))?;
        // The caller gets the entry to change as it likes.
        self.changes.note(h);
        let entry = table.get_bucket_entry(index).expect("index just found");
        if entry.get().is_expired(now_ms) {
            let (entry, _) = entry.remove();
            self.len -= 1;
            self.move_deadline(h, entry.expire_at_ms(), None);
            self.stats.expired_keys += 1;
            self.note_gone(&entry);
            on_expired(&entry);
            return None;
        }
        self.slots[slot].get_bucket_mut(index).map(|e| &mut **e)
    }

    /// Stores `value` under `key` with `expire_at_ms`, replacing any previous entry (whose
    /// value is returned). The caller has already applied lazy expiry if it cares.
    pub fn insert(
        &mut self,
        key: &[u8],
        value: Value,
        expire_at_ms: Option<u64>,
        now_ms: u64,
    ) -> Option<Value> {
        let expire_at_ms = normalize(expire_at_ms);
        let h = key_hash(key);
        let slot = slot_of(h);
        self.changes.note(h);
        match self.slots[slot].find_mut(table_hash(h), |e| e.has_key(key)) {
            Some(entry) => {
                let old_deadline = entry.expire_at_ms();
                entry.deadline_ms = pack(expire_at_ms);
                // An overwritten key keeps its LFU counter (the command's lookup counted the
                // access), as Redis's overwrite keeps the old object's.
                if self.clock == AccessClock::Lru {
                    entry.set_access_ms(now_ms);
                }
                let old = std::mem::replace(&mut entry.value, value);
                self.move_deadline(h, old_deadline, expire_at_ms);
                Some(old)
            }
            None => {
                let access = match self.clock {
                    AccessClock::Lru => seconds(now_ms),
                    AccessClock::Lfu { .. } => lfu_word(now_ms, LFU_INIT_VAL),
                };
                let entry = EntryBox::new(key, value, pack(expire_at_ms), access);
                self.slots[slot].insert_unique(table_hash(h), entry, rehash);
                self.len += 1;
                self.move_deadline(h, None, expire_at_ms);
                None
            }
        }
    }

    /// Changes the deadline of an existing key; false when the key does not exist.
    pub fn set_expire(&mut self, key: &[u8], expire_at_ms: Option<u64>) -> bool {
        let expire_at_ms = normalize(expire_at_ms);
        let h = key_hash(key);
        let slot = slot_of(h);
        let Some(entry) = self.slots[slot].find_mut(table_hash(h), |e| e.has_key(key)) else {
            return false;
        };
        self.changes.note(h);
        let old = entry.expire_at_ms();
        entry.deadline_ms = pack(expire_at_ms);
        self.move_deadline(h, old, expire_at_ms);
        true
    }

    /// Removes `key`, returning its entry.
    pub fn remove(&mut self, key: &[u8]) -> Option<EntryBox> {
        self.remove_hashed(key, key_hash(key))
    }

    fn remove_hashed(&mut self, key: &[u8], h: u64) -> Option<EntryBox> {
        let slot = slot_of(h);
        let found = self.slots[slot]
            .find_entry(table_hash(h), |e| e.has_key(key))
            .ok()?;
        let (entry, _) = found.remove();
        self.len -= 1;
        self.changes.note(h);
        self.move_deadline(h, entry.expire_at_ms(), None);
        self.note_gone(&entry);
        Some(entry)
    }

    /// Remembers the key of a marked entry that leaves the table.
    fn note_gone(&mut self, entry: &Entry) {
        if entry.is_marked() {
            self.marked_gone.push(entry.key().into());
        }
    }

    /// Sets or clears the mark of `key` (`h` its [`key_hash`]); false when there is no such
    /// key. The mark is kept while the key's value and deadline change and goes when the key
    /// is removed, which is then remembered until [`Db::forget_marked`] (see
    /// [`Db::was_marked`]). The store itself never reads it.
    pub fn set_mark(&mut self, h: u64, key: &[u8], on: bool) -> bool {
        debug_assert_eq!(h, key_hash(key));
        let Some(e) = self.slots[slot_of(h)].find_mut(table_hash(h), |e| e.has_key(key)) else {
            return false;
        };
        self.changes.note(h);
        let head = e.0.as_ptr();
        // SAFETY: the block is live and exclusively borrowed through the table.
        unsafe {
            if on {
                (*head).key_len |= MARK;
            } else {
                (*head).key_len &= LEN_MASK;
            }
        }
        true
    }

    /// Whether `key` is stored marked, or was removed marked since it was last forgotten (and
    /// perhaps stored again since, unmarked: the mark still names it).
    pub fn was_marked(&self, h: u64, key: &[u8]) -> bool {
        self.get_raw_hashed(h, key).is_some_and(|e| e.is_marked())
            || self.marked_gone.iter().any(|k| k[..] == *key)
    }

    /// Forgets that `key` was removed marked (the owner of the mark has taken note).
    pub fn forget_marked(&mut self, key: &[u8]) {
        if let Some(i) = self.marked_gone.iter().position(|k| k[..] == *key) {
            self.marked_gone.swap_remove(i);
        }
    }

    /// The marked key whose hash is `h`: stored, or removed since and not yet forgotten.
    /// (Whoever marks keeps at most one marked key per hash.)
    pub fn marked_key(&self, h: u64) -> Option<&[u8]> {
        let stored = self.slots[slot_of(h)]
            .iter_hash(table_hash(h))
            .find(|e| e.is_marked() && key_hash(e.key()) == h)
            .map(|e| e.key());
        stored.or_else(|| {
            self.marked_gone
                .iter()
                .find(|k| key_hash(k) == h)
                .map(|k| &k[..])
        })
    }

    /// Marked keys removed and not yet forgotten.
    pub fn marked_gone(&self) -> usize {
        self.marked_gone.len()
    }

    fn move_deadline(&mut self, h: u64, old: Option<u64>, new: Option<u64>) {
        if old == new {
            return;
        }
        if let Some(t) = old {
            let k = (t, h);
            let n = self.deadlines.get_mut(&k).expect("deadline indexed");
            *n -= 1;
            if *n == 0 {
                self.deadlines.remove(&k);
            }
            self.volatile -= 1;
        }
        if let Some(t) = new {
            *self.deadlines.entry((t, h)).or_insert(0) += 1;
            self.volatile += 1;
        }
    }

    /// Active expiry: deletes up to `max_keys` keys whose deadline has passed at `now_ms`,
    /// oldest deadline first, calling `on_expired` for each. Returns how many were deleted and
    /// whether more are already due (so the caller can come back sooner).
    pub fn expire_due(
        &mut self,
        now_ms: u64,
        max_keys: usize,
        mut on_expired: impl FnMut(&Entry),
    ) -> (usize, bool) {
        let mut removed = 0;
        while removed < max_keys {
            let Some((&(deadline, h), _)) = self.deadlines.first_key_value() else {
                return (removed, false);
            };
            if deadline >= now_ms {
                return (removed, false);
            }
            // Every key in this slot with this hash and this deadline is due.
            let slot = slot_of(h);
            let th = table_hash(h);
            while let Ok(found) = self.slots[slot].find_entry(th, |e| {
                e.expire_at_ms() == Some(deadline) && key_hash(e.key()) == h
            }) {
                let (entry, _) = found.remove();
                self.len -= 1;
                self.changes.note(h);
                self.move_deadline(h, entry.expire_at_ms(), None);
                self.stats.expired_keys += 1;
                removed += 1;
                if entry.is_marked() {
                    self.marked_gone.push(entry.key().into());
                }
                on_expired(&entry);
            }
        }
        let more = matches!(self.deadlines.first_key_value(), Some((&(d, _), _)) if d < now_ms);
        (removed, more)
    }

    /// The earliest deadline of any key, for scheduling the next expiry pass.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.deadlines.first_key_value().map(|(&(d, _), _)| d)
    }

    /// Calls `f` for every entry of `slot` (expired ones included; callers filter).
    pub fn for_each_in_slot(&self, slot: usize, mut f: impl FnMut(&Entry)) {
        for e in self.slots[slot].iter() {
            f(e);
        }
    }

    /// Number of entries in `slot`.
    pub fn slot_len(&self, slot: usize) -> usize {
        self.slots[slot].len()
    }

    /// Every entry, slot by slot (a deterministic order for a given history).
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().flat_map(|t| t.iter().map(|e| &**e))
    }

    /// A pseudo-random entry chosen with the caller's random numbers: a random slot, the first
    /// non-empty slot from there, and a random entry in it. Not uniform, like Redis's.
    pub fn random_entry(&self, mut next_random: impl FnMut() -> u64) -> Option<&Entry> {
        if self.len == 0 {
            return None;
        }
        let start = (next_random() as usize) % SLOT_COUNT;
        for i in 0..SLOT_COUNT {
            let table = &self.slots[(start + i) % SLOT_COUNT];
            if !table.is_empty() {
                let n = (next_random() as usize) % table.len();
                return table.iter().nth(n).map(|e| &**e);
            }
        }
        None
    }

    /// Deletes every key, handing the entries to the caller instead of freeing them (a
    /// FLUSHALL ASYNC frees them later, off the command's path).
    pub fn clear_taking(&mut self) -> Vec<EntryBox> {
        let mut taken = Vec::with_capacity(self.len);
        for t in &mut self.slots {
            taken.extend(t.drain());
        }
        for e in taken.iter().filter(|e| e.is_marked()) {
            self.marked_gone.push(e.key().into());
        }
        self.clear();
        taken
    }

    /// Deletes every key.
    pub fn clear(&mut self) {
        for t in &self.slots {
            for e in t.iter().filter(|e| e.is_marked()) {
                self.marked_gone.push(e.key().into());
            }
        }
        for t in &mut self.slots {
            // Replacing (not clearing) releases the memory of tables that had grown.
            *t = HashTable::new();
        }
        self.len = 0;
        self.deadlines.clear();
        self.volatile = 0;
        self.changes.note_all();
    }

    /// How the slot tables use memory.
    pub fn table_stats(&self) -> TableStats {
        let mut t = TableStats {
            bucket_bytes: std::mem::size_of::<EntryBox>(),
            entries: self.len,
            ..TableStats::default()
        };
        for table in &self.slots {
            let size = table.allocation_size();
            if size > 0 {
                t.tables += 1;
                t.heap_bytes += size;
                t.buckets += table.num_buckets();
            }
        }
        t
    }

    /// Starts noting which keys change, for [`Db::take_changes`].
    pub fn track_changes(&mut self) {
        self.changes.start();
    }

    /// The keys that may have changed since the last call (every key handed out for change
    /// counts); [`Changed::Everything`] on the first call, which starts the noting.
    pub fn take_changes(&mut self) -> Changed {
        self.changes.take()
    }

    /// Every stored entry whose key hashes to `h` (usually one at most).
    pub fn entries_with_hash(&self, h: u64) -> impl Iterator<Item = &Entry> {
        self.slots[slot_of(h)]
            .iter_hash(table_hash(h))
            .filter(move |e| key_hash(e.key()) == h)
            .map(|e| &**e)
    }

    /// Checks the structure's invariants; panics with a description on violation.
    pub fn check_invariants(&self) {
        let mut total = 0;
        let mut volatile = 0;
        for (i, t) in self.slots.iter().enumerate() {
            for e in t.iter() {
                let h = key_hash(e.key());
                assert_eq!(slot_of(h), i, "key stored in the wrong slot");
                volatile += usize::from(e.expire_at_ms().is_some());
                self.check_entry(h, e);
            }
            total += t.len();
        }
        assert_eq!(total, self.len, "len out of step with the tables");
        assert_eq!(volatile, self.volatile, "volatile count out of step");
        let indexed: u64 = self.deadlines.values().map(|&n| n as u64).sum();
        assert_eq!(indexed, volatile as u64, "deadline index out of step");
        self.changes.check_invariants();
    }

    /// The part of [`Db::check_invariants`] that concerns the keys hashed `hashes` (the ones
    /// [`Db::take_changes`] reported), at a cost that follows them rather than the keyspace.
    /// The totals (key and deadline counts) need the whole walk and are left to it.
    pub fn check_changed(&self, hashes: &[u64]) {
        for &h in hashes {
            for e in self.entries_with_hash(h) {
                self.check_entry(h, e);
            }
        }
        assert!(
            self.deadlines.len() <= self.volatile,
            "more deadlines indexed than keys that have one"
        );
        self.changes.check_invariants();
    }

    /// One stored entry (`h` its key's hash): its deadline is indexed.
    fn check_entry(&self, h: u64, e: &Entry) {
        if let Some(d) = e.expire_at_ms() {
            assert!(
                self.deadlines.contains_key(&(d, h)),
                "deadline of a key missing from the index"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Str;

    fn s(v: &str) -> Value {
        Value::Str(Str::from_bytes(v.as_bytes()))
    }

    #[test]
    fn insert_get_remove() {
        let mut db = Db::new();
        assert!(db.insert(b"a", s("1"), None, 0).is_none());
        assert!(db.insert(b"a", s("2"), Some(100), 0).is_some());
        assert_eq!(db.len(), 1);
        assert_eq!(db.volatile_len(), 1);
        assert_eq!(db.get_live(b"a", 100, |_| {}).unwrap().value, s("2"));
        assert!(db.get_live(b"a", 101, |_| {}).is_none());
        assert_eq!(db.len(), 0);
        db.check_invariants();
    }

    #[test]
    fn keys_of_every_length_round_trip_through_their_blocks() {
        // Under test, keys of LONG_KEY (24) bytes and more take the long form.
        let mut db = Db::new();
        let keys: Vec<Vec<u8>> = (0..80)
            .map(|n| (0..n).map(|i| (i * 7 + n) as u8).collect())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            db.insert(k, s(&format!("value-{i}")), Some(1_000 + i as u64), 5_999);
        }
        assert_eq!(db.len(), keys.len());
        for (i, k) in keys.iter().enumerate() {
            let e = db.get_raw(k).expect("stored");
            assert_eq!(e.key(), &k[..]);
            assert_eq!(e.value, s(&format!("value-{i}")));
            assert_eq!(e.expire_at_ms(), Some(1_000 + i as u64));
            assert_eq!(e.access_ms(), 5_000, "kept to the second");
        }
        db.check_invariants();
        for (i, k) in keys.iter().enumerate().step_by(2) {
            let e = db.remove(k).expect("stored");
            assert_eq!(e.key(), &k[..]);
            assert_eq!(e.into_value(), s(&format!("value-{i}")));
        }
        assert_eq!(db.len(), keys.len() / 2);
        db.check_invariants();
        // The rest are freed with the tables.
        db.clear();
        assert!(db.is_empty());
    }

    #[test]
    fn marks_survive_value_changes_and_are_remembered_past_removal() {
        let mut db = Db::new();
        // Short and long (test LONG_KEY = 24) keys: the mark shares the length field.
        let short = b"short".to_vec();
        let long = vec![b'l'; 40];
        for k in [&short, &long] {
            let h = key_hash(k);
            assert!(!db.set_mark(h, k, true), "no such key yet");
            db.insert(k, s("1"), None, 0);
            assert!(!db.was_marked(h, k));
            assert!(db.set_mark(h, k, true));
            db.insert(k, s("2"), Some(50), 0);
            assert!(db.set_expire(k, None));
            let e = db.get_raw(k).unwrap();
            assert!(e.is_marked());
            assert_eq!((e.key(), &e.value), (&k[..], &s("2")));
            assert_eq!(db.marked_key(h), Some(&k[..]));
        }
        let h = key_hash(&short);
        assert!(db.set_mark(h, &short, false));
        assert!(!db.was_marked(h, &short));
        assert_eq!(db.marked_key(h), None);
        assert!(db.set_mark(h, &short, true));
        db.remove(&short);
        assert_eq!(db.marked_gone(), 1);
        assert!(db.was_marked(h, &short));
        assert_eq!(db.marked_key(h), Some(&short[..]));
        // Stored again unmarked: still named by the mark until forgotten.
        db.insert(&short, s("3"), None, 0);
        assert!(db.was_marked(h, &short));
        db.forget_marked(&short);
        assert!(!db.was_marked(h, &short));
        assert_eq!(db.marked_gone(), 0);
        // Expiry and clearing remember marked keys too.
        let hl = key_hash(&long);
        db.set_expire(&long, Some(10));
        assert!(db.get_live(&long, 11, |_| {}).is_none());
        assert!(db.was_marked(hl, &long));
        db.forget_marked(&long);
        db.insert(b"m", s("x"), None, 0);
        db.set_mark(key_hash(b"m"), b"m", true);
        db.clear();
        assert!(db.was_marked(key_hash(b"m"), b"m"));
        assert!(!db.was_marked(h, &short));
        db.check_invariants();
    }

    #[test]
    fn prefetch_changes_nothing() {
        let mut db = Db::new();
        db.insert(b"raw", s(&"x".repeat(64)), Some(9_000), 1_000);
        db.insert(b"int", s("42"), None, 1_000);
        for k in [&b"raw"[..], b"int", b"missing", b""] {
            db.prefetch(k, Some(b"m"));
        }
        assert_eq!(db.len(), 2);
        let e = db.get_raw(b"raw").unwrap();
        assert_eq!(e.value, s(&"x".repeat(64)));
        assert_eq!((e.expire_at_ms(), e.access_ms()), (Some(9_000), 1_000));
        assert_eq!(db.get_raw(b"int").unwrap().value, s("42"));
        assert!(db.get_raw(b"missing").is_none());
        db.check_invariants();
    }

    #[test]
    fn lfu_counters_grow_logarithmically_and_decay_per_period() {
        let lfu = AccessClock::Lfu {
            log_factor: 10,
            decay_min: 1,
        };
        let mut db = Db::new();
        db.set_access_clock(lfu);
        let t0 = 1_000 * 60_000;
        db.insert(b"k", Value::Str(Str::from_bytes(b"v")), None, t0);
        let e = db.get_live(b"k", t0, |_| {}).unwrap();
        assert_eq!(e.lfu_counter(t0, 1), LFU_INIT_VAL);
        // At or below the initial value an access always counts; above, with probability
        // 1 / ((c - 5) * factor + 1): a draw of half the range counts at c = 5 (p = 1) but not
        // at c = 6 (p = 1/11).
        assert_eq!(lfu_log_incr(5, 10, u64::MAX / 2), 6);
        assert_eq!(lfu_log_incr(6, 10, u64::MAX / 2), 6);
        assert_eq!(lfu_log_incr(6, 10, u64::MAX / 20), 7);
        assert_eq!(lfu_log_incr(255, 0, 0), 255);
        e.touch(t0, lfu, 0);
        assert_eq!(e.lfu_counter(t0, 1), 6);
        // One per minute without access, to zero; the minute clock wraps at 65536.
        assert_eq!(e.lfu_counter(t0 + 3 * 60_000, 1), 3);
        assert_eq!(e.lfu_counter(t0 + 3 * 60_000, 2), 5);
        assert_eq!(e.lfu_counter(t0 + 60 * 60_000, 1), 0);
        assert_eq!(e.lfu_counter(t0 + 3 * 60_000, 0), 6);
        // Across the wrap Redis's formula counts one minute short: 2 minutes decay 1.
        e.set_lfu(65_535 * 60_000, 9);
        assert_eq!(e.lfu_counter(65_537 * 60_000, 1), 8);
        // An overwrite keeps the counter (the command's lookup counted the access).
        db.insert(b"k", Value::Str(Str::from_bytes(b"w")), None, t0);
        assert_eq!(
            db.get_live(b"k", t0, |_| {})
                .unwrap()
                .lfu_counter(65_537 * 60_000, 1),
            8
        );
    }

    #[test]
    fn access_time_is_kept_in_seconds() {
        let mut db = Db::new();
        db.insert(b"k", s("v"), None, 12_345);
        let e = db.get_live(b"k", 20_000, |_| {}).unwrap();
        assert_eq!(e.access_ms(), 12_000);
        e.set_access_ms(19_999);
        assert_eq!(e.access_ms(), 19_000);
        // Past the year 2106 the clock stops rather than wrapping to the epoch.
        e.set_access_ms(u64::MAX);
        assert_eq!(e.access_ms(), u64::from(u32::MAX) * 1000);
    }

    #[test]
    fn memory_usage_counts_block_value_and_table_share() {
        let mut db = Db::new();
        db.insert(b"key:000000000001", s(&"x".repeat(64)), None, 0);
        let e = db.get_raw(b"key:000000000001").unwrap();
        // 40-byte header + 16-byte key, 64 value bytes, 16 for the table.
        assert_eq!(std::mem::size_of_val(e), 56);
        assert_eq!(e.memory_usage(), 56 + 64 + 16);
        assert_eq!(std::mem::size_of::<EntryBox>(), 8);
    }

    #[test]
    fn active_expiry_is_bounded_and_ordered() {
        let mut db = Db::new();
        for i in 0..100u64 {
            db.insert(format!("k{i}").as_bytes(), s("v"), Some(i), 0);
        }
        db.insert(b"forever", s("v"), None, 0);
        let mut seen = Vec::new();
        let (n, more) = db.expire_due(50, 10, |e| seen.push(e.expire_at_ms().unwrap()));
        assert_eq!((n, more), (10, true));
        // A deadline of 0 is stored as 1 ms: equally long past.
        assert_eq!(seen, [1, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let (n, more) = db.expire_due(50, 1000, |_| {});
        assert_eq!((n, more), (40, false));
        assert_eq!(db.len(), 51);
        assert_eq!(db.next_deadline_ms(), Some(50));
        db.check_invariants();
    }

    #[test]
    fn every_key_is_in_exactly_one_slot_walk() {
        let mut db = Db::new();
        for i in 0..5000 {
            db.insert(format!("key:{i}").as_bytes(), s("v"), None, 0);
        }
        let mut count = 0;
        for slot in 0..SLOT_COUNT {
            db.for_each_in_slot(slot, |_| count += 1);
        }
        assert_eq!(count, 5000);
        db.check_invariants();
        let mut r = 7u64;
        assert!(db
            .random_entry(|| {
                r = r.wrapping_mul(6364136223846793005).wrapping_add(1);
                r
            })
            .is_some());
    }
}

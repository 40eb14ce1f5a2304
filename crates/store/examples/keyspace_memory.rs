//! Where the bytes of a keyspace go: loads N string keys shaped like the benchmark's memory test
//! (`key:%012d`, 64-byte values by default) into a `Db` and reports heap bytes per key, the
//! allocations by requested size, what glibc malloc makes of them (its 16-byte-aligned chunks
//! with an 8-byte header, at least 32 bytes), the slot tables' load, and RSS.
//!
//!     cargo run --release -p lattice-store --example keyspace_memory -- [keys] [value bytes]
//!
//! Not part of the store: an example may read /proc and count allocations, the library may not.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use lattice_store::{Db, Str, Value};

struct Counting;

static LIVE: AtomicU64 = AtomicU64::new(0);
static TRACE: AtomicBool = AtomicBool::new(false);
/// Requested size -> allocations live (made minus freed) while tracing.
static SIZES: Mutex<BTreeMap<usize, i64>> = Mutex::new(BTreeMap::new());

fn trace(size: usize, delta: i64) {
    if TRACE.swap(false, Ordering::Relaxed) {
        // The map's own allocations happen with tracing off, so they are not counted.
        *SIZES.lock().unwrap().entry(size).or_insert(0) += delta;
        TRACE.store(true, Ordering::Relaxed);
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as u64, Ordering::Relaxed);
        trace(layout.size(), 1);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        trace(layout.size(), -1);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        LIVE.fetch_add(new_size as u64, Ordering::Relaxed);
        trace(layout.size(), -1);
        trace(new_size, 1);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// glibc malloc's chunk for a request: 8 bytes of header, rounded up to 16, at least 32.
fn glibc_chunk(size: usize) -> usize {
    ((size + 8 + 15) & !15).max(32)
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let keys: usize = args.next().map_or(1_000_000, |a| a.parse().expect("keys"));
    let value_len: usize = args.next().map_or(64, |a| a.parse().expect("value bytes"));
    let value = vec![b'x'; value_len];

    let mut db = Db::new();
    let rss0 = rss_bytes();
    let live0 = LIVE.load(Ordering::Relaxed);
    // Counted net of frees, so temporaries (the formatted key) and tables that grew leave only
    // what the keyspace keeps.
    TRACE.store(true, Ordering::Relaxed);
    for i in 0..keys {
        let key = format!("key:{i:012}");
        db.insert(key.as_bytes(), Value::Str(Str::from_bytes(&value)), None, 0);
    }
    TRACE.store(false, Ordering::Relaxed);
    let live = LIVE.load(Ordering::Relaxed) - live0;
    let rss = rss_bytes().saturating_sub(rss0);
    let n = keys.max(1) as f64;

    println!("{keys} keys, {value_len}-byte values");
    println!(
        "heap (requested) bytes/key: {:.1}   RSS bytes/key: {:.1}",
        live as f64 / n,
        rss as f64 / n
    );
    println!("live allocations by requested size (count, glibc chunk, chunk bytes/key):");
    let mut chunk_total = 0usize;
    for (&size, &count) in SIZES.lock().unwrap().iter() {
        if count <= 0 {
            continue;
        }
        let chunk = glibc_chunk(size);
        chunk_total += chunk * count as usize;
        println!(
            "  {size:>10} B x {count:>9}  chunk {chunk:>10} B  {:>8.1} B/key",
            (chunk * count as usize) as f64 / n
        );
    }
    println!(
        "glibc chunk bytes/key (estimate): {:.1}",
        chunk_total as f64 / n
    );
    let t = db.table_stats();
    println!(
        "tables: {} slots, {} buckets, {} entries, load {:.2}, {} bytes per bucket, \
         table bytes/key {:.1}",
        t.tables,
        t.buckets,
        t.entries,
        t.entries as f64 / t.buckets.max(1) as f64,
        t.bucket_bytes,
        t.heap_bytes as f64 / n
    );
}

//! A global allocator that counts live heap bytes, for INFO `used_memory`.
//!
//! One relaxed atomic add per allocation and free: cheap next to the allocation itself, and it
//! gives a real figure instead of an estimate.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

pub struct CountingAlloc;

static ALLOCATED: AtomicU64 = AtomicU64::new(0);

/// Bytes currently allocated on the heap by this process.
pub fn allocated_bytes() -> u64 {
    ALLOCATED.load(Ordering::Relaxed)
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        ALLOCATED.fetch_sub(layout.size() as u64, Ordering::Relaxed);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            ALLOCATED.fetch_sub(layout.size() as u64, Ordering::Relaxed);
            ALLOCATED.fetch_add(new_size as u64, Ordering::Relaxed);
        }
        p
    }
}

/// Resident bytes above the live heap that make the trimmer return free pages to the system.
const TRIM_SLACK_BYTES: u64 = 16 << 20;
/// How often the trimmer compares the resident size with the live heap.
const TRIM_CHECK_MS: u64 = 250;
/// Change of the live heap over one check under which the process counts as quiet.
const QUIET_HEAP_CHANGE_BYTES: u64 = 1 << 20;

/// Starts a thread that hands freed heap memory back to the system (`malloc_trim`) when the
/// resident size has grown `TRIM_SLACK_BYTES` past the live heap since the last trim, and the
/// live heap has stopped moving.
///
/// Why: a replicated node's transient buffers (deltas kept for retransmission, up to 32 MiB per
/// peer, and the link queues) are freed once acknowledged, but the allocator keeps the pages,
/// so after a 1M-key load the writer stayed about 30 MB above its replicas with the same live
/// heap (bench/results/replication.md). Only when quiet: trimming under a load hands back pages
/// the allocator asks for again at once, and every one comes back as a page fault that zeroes
/// it. The check reads `/proc/self/statm` four times a second; a trim holds each allocator
/// arena for the time it takes to walk its free chunks (milliseconds at a few hundred MB).
pub fn spawn_trimmer() {
    let run = || {
        let mut gap_after_trim: Option<u64> = None;
        let mut last_heap = allocated_bytes();
        loop {
            std::thread::sleep(std::time::Duration::from_millis(TRIM_CHECK_MS));
            let Some(resident) = resident_bytes() else {
                return; // no procfs: nothing to compare with
            };
            let heap = allocated_bytes();
            let quiet = heap.abs_diff(last_heap) < QUIET_HEAP_CHANGE_BYTES;
            last_heap = heap;
            let gap = resident.saturating_sub(heap);
            if quiet && gap_after_trim.is_none_or(|base| gap >= base + TRIM_SLACK_BYTES) {
                // SAFETY: malloc_trim only returns free pages; it is thread-safe.
                unsafe { libc::malloc_trim(0) };
                let resident = resident_bytes().unwrap_or(resident);
                gap_after_trim = Some(resident.saturating_sub(allocated_bytes()));
            }
        }
    };
    let _ = std::thread::Builder::new()
        .name("heap-trim".into())
        .spawn(run);
}

/// The process's resident size in bytes, from `/proc/self/statm` (counted in pages).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system.
    let page_bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page_bytes).unwrap_or(4096))
}

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

/// Resident bytes beyond the live heap that make the trimmer return free memory to the kernel:
/// a quarter of the heap, at least this much.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_SLACK_MIN: u64 = 32 << 20;

/// Starts a thread that, every few seconds, hands glibc's free pages back to the kernel when
/// the process holds much more than its live heap (`malloc_trim`).
///
/// Why: glibc keeps freed memory in its arenas. A replicated load's peaks (a peer's 32 MiB of
/// unacknowledged deltas, the delta queue, client and link buffers) are freed once replicas
/// catch up, but the pages stayed resident: after a 200,000-key load the writer held 108 MB of
/// RSS for a 44 MB heap. `malloc_trim(0)` releases the free pages inside every arena, not only
/// at the heap's top. It runs on its own thread and only when the gap is large, so the usual
/// cost is one read of /proc/self/statm every few seconds.
pub fn spawn_trimmer() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let spawned = std::thread::Builder::new()
            .name("lattice-trim".into())
            .spawn(|| loop {
                std::thread::sleep(std::time::Duration::from_secs(5));
                let heap = allocated_bytes();
                let Some(rss) = resident_bytes() else {
                    return; // no /proc: nothing to compare with
                };
                if rss > heap + (heap / 4).max(TRIM_SLACK_MIN) {
                    // SAFETY: malloc_trim only walks and trims glibc's own arenas, under their
                    // locks; it has no preconditions.
                    unsafe {
                        libc::malloc_trim(0);
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the memory trimmer: {e}");
        }
    }
}

/// Resident bytes of this process (/proc/self/statm).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

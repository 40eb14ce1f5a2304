//! Heap bytes per key of a replicated keyspace against a standalone one: three nodes wired back
//! to back in memory, `KEYS` SETs of 64-byte values (`key:%012d`) on node 1, then every node's
//! live heap divided by the key count. Counts what the allocator was asked for (not its chunk
//! rounding), so it isolates the node's own structures from malloc's behaviour.
//!
//! It also times every call into a node during the replicated load (a batch of 1,000 client
//! SETs, one peer message, one timer tick) and prints the slowest of each kind: a call is what
//! a server runs while it holds the node, so a slow one is a stall every client sees. And each
//! node's time over all its calls per SET, against the standalone node's (CPU per write,
//! without the network).
//!
//!   cargo run --release -p lattice-node --example repl_memory [KEYS]

// A probe run by hand, outside the node: it may read the clock the node itself never reads.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lattice_node::{Config, Micros};
use lattice_testkit::{Host, START_MS};

#[path = "repl_large_values/probe.rs"]
#[allow(dead_code)] // this probe uses the timed cluster, not the measure
mod probe;
use probe::{batch, timed_cluster, CLIENT, PEER, TIMER};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}
#[global_allocator]
static A: Counting = Counting;

fn main() {
    let keys: usize = std::env::args()
        .nth(1)
        .map_or(200_000, |s| s.parse().expect("KEYS"));
    let now = Micros::from_millis(START_MS);
    let value = Bytes::from(vec![b'x'; 64]);
    let set = |k: usize| {
        vec![
            Bytes::from_static(b"SET"),
            Bytes::from(format!("key:{k:012}")),
            value.clone(),
        ]
    };
    // Standalone first.
    let base = LIVE.load(Ordering::Relaxed);
    let mut alone = Host::new(Config::default(), 1, now);
    alone.connect(now, 1);
    let mut alone_busy = Duration::ZERO;
    let mut sends = Vec::new();
    for i in 0..keys {
        let args = set(i);
        let t = Instant::now();
        alone.request(now, 1, args);
        alone.drain(now, &mut sends);
        alone_busy += t.elapsed();
        alone.take_bytes(1);
    }
    assert!(sends.is_empty(), "a standalone node sent to a peer");
    let standalone = LIVE.load(Ordering::Relaxed) - base;
    drop(alone);

    let mut c = timed_cluster();
    // Every node's invariants walk its whole keyspace: checked now and then, not per call.
    c.check_every = 10_000;
    let load = Instant::now();
    for chunk in (0..keys).collect::<Vec<_>>().chunks(1000) {
        batch(&mut c, 0, chunk.iter().map(|&k| set(k)).collect());
        c.advance(3);
    }
    let load = load.elapsed();
    for _ in 0..400 {
        c.advance(10);
    }
    let digests: Vec<u64> = c
        .members
        .iter_mut()
        .map(|t| t.host.node.replication_digest())
        .collect();
    assert!(
        digests.iter().all(|d| *d == digests[0]),
        "replicas differ: {digests:?}"
    );
    // Where each node's replication bytes are, by part (estimates from its structures).
    println!("replicated state by part, B/key (node 1, node 2, node 3):");
    let parts: Vec<Vec<(&str, usize)>> = c
        .members
        .iter()
        .map(|t| t.host.node.replication_memory())
        .collect();
    for (i, (name, _)) in parts[0].iter().enumerate() {
        let per: Vec<String> = parts
            .iter()
            .map(|p| format!("{:.1}", p[i].1 as f64 / keys as f64))
            .collect();
        println!("  {name}: {}", per.join(", "));
    }
    let timings: Vec<([Duration; 3], Duration)> =
        c.members.iter().map(|t| (t.slowest, t.busy)).collect();
    // Measure each node alone: drop the others one at a time.
    let total = LIVE.load(Ordering::Relaxed) - base;
    let mut per_node = Vec::new();
    while let Some(n) = c.members.pop() {
        let before = LIVE.load(Ordering::Relaxed);
        drop(n);
        per_node.push(before - LIVE.load(Ordering::Relaxed));
    }
    per_node.reverse();
    println!("keys: {keys}");
    println!(
        "standalone: {:.1} heap B/key",
        standalone as f64 / keys as f64
    );
    for (i, b) in per_node.iter().enumerate() {
        println!(
            "replicated node {}: {:.1} heap B/key",
            i + 1,
            *b as f64 / keys as f64
        );
    }
    println!("(all three: {:.1} B/key)", total as f64 / keys as f64);
    println!(
        "replicated load: {:.2} s for all three nodes on one thread",
        load.as_secs_f64()
    );
    let per_set_ns = |d: Duration| d.as_nanos() as f64 / keys as f64;
    println!(
        "standalone: {:.0} ns of node time per SET",
        per_set_ns(alone_busy)
    );
    for (i, (s, busy)) in timings.into_iter().enumerate() {
        println!(
            "node {}: slowest client batch {:.1} ms, peer message {:.1} ms, timer {:.1} ms; \
             {:.0} ns of node time per SET ({:.2}x standalone)",
            i + 1,
            s[CLIENT].as_secs_f64() * 1e3,
            s[PEER].as_secs_f64() * 1e3,
            s[TIMER].as_secs_f64() * 1e3,
            per_set_ns(busy),
            per_set_ns(busy) / per_set_ns(alone_busy)
        );
    }
}

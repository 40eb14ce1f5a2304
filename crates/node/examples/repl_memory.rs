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
use std::collections::VecDeque;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use lattice_node::{ConnId, Input, Micros, Node, NodeId, Output};

#[path = "repl_large_values/probe.rs"]
#[allow(dead_code)] // this probe uses only its node builder
mod probe;
use probe::node;

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
    let mut now_ms = 1_700_000_000_000u64;
    let value = Bytes::from(vec![b'x'; 64]);
    // Standalone first.
    let base = LIVE.load(Ordering::Relaxed);
    let mut alone = node(1, 1, Micros::from_millis(now_ms));
    let mut alone_busy = Duration::ZERO;
    for i in 0..keys {
        let args = vec![
            Bytes::from_static(b"SET"),
            Bytes::from(format!("key:{i:012}")),
            value.clone(),
        ];
        let t = Instant::now();
        alone.handle(
            Micros::from_millis(now_ms),
            Input::Request {
                conn: ConnId(1),
                args,
            },
        );
        while alone.poll_output().is_some() {}
        alone_busy += t.elapsed();
    }
    let standalone = LIVE.load(Ordering::Relaxed) - base;
    drop(alone);

    let mut nodes: Vec<Node> = (1..=3)
        .map(|i| node(i, 3, Micros::from_millis(now_ms)))
        .collect();
    let mut wire: VecDeque<(usize, usize, Bytes)> = VecDeque::new();
    // The slowest call per node and kind: 0 a client batch, 1 a peer message, 2 a timer; and
    // 3 the node's time over all its calls.
    let mut slowest = [[Duration::ZERO; 4]; 3];
    let mut pump = |nodes: &mut Vec<Node>, slowest: &mut [[Duration; 4]; 3], now_ms: u64| loop {
        let now = Micros::from_millis(now_ms);
        for (i, n) in nodes.iter_mut().enumerate() {
            let t = Instant::now();
            n.handle_timeout(now);
            slowest[i][2] = slowest[i][2].max(t.elapsed());
            slowest[i][3] += t.elapsed();
            while let Some(o) = n.poll_output() {
                if let Output::PeerSend { peer, data } = o {
                    wire.push_back((peer.0 as usize - 1, i, data));
                }
            }
        }
        let Some((to, from, data)) = wire.pop_front() else {
            break;
        };
        let t = Instant::now();
        let peer = NodeId(from as u32 + 1);
        nodes[to].handle(now, Input::PeerMessage { peer, data });
        slowest[to][1] = slowest[to][1].max(t.elapsed());
        slowest[to][3] += t.elapsed();
    };
    let load = Instant::now();
    for chunk in (0..keys).collect::<Vec<_>>().chunks(1000) {
        let batch: Vec<Vec<Bytes>> = chunk
            .iter()
            .map(|k| {
                vec![
                    Bytes::from_static(b"SET"),
                    Bytes::from(format!("key:{k:012}")),
                    value.clone(),
                ]
            })
            .collect();
        let t = Instant::now();
        for args in batch {
            let conn = ConnId(1);
            nodes[0].handle(Micros::from_millis(now_ms), Input::Request { conn, args });
        }
        slowest[0][0] = slowest[0][0].max(t.elapsed());
        slowest[0][3] += t.elapsed();
        now_ms += 3;
        pump(&mut nodes, &mut slowest, now_ms);
    }
    let load = load.elapsed();
    for _ in 0..400 {
        now_ms += 10;
        pump(&mut nodes, &mut slowest, now_ms);
    }
    let digests: Vec<u64> = nodes.iter_mut().map(|n| n.replication_digest()).collect();
    assert!(
        digests.iter().all(|d| *d == digests[0]),
        "replicas differ: {digests:?}"
    );
    // Where each node's replication bytes are, by part (estimates from its structures).
    println!("replicated state by part, B/key (node 1, node 2, node 3):");
    let parts: Vec<Vec<(&str, usize)>> = nodes.iter().map(|n| n.replication_memory()).collect();
    for (i, (name, _)) in parts[0].iter().enumerate() {
        let per: Vec<String> = parts
            .iter()
            .map(|p| format!("{:.1}", p[i].1 as f64 / keys as f64))
            .collect();
        println!("  {name}: {}", per.join(", "));
    }
    // Measure each node alone: drop the others one at a time.
    let total = LIVE.load(Ordering::Relaxed) - base;
    let mut per_node = Vec::new();
    while let Some(n) = nodes.pop() {
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
    for (i, s) in slowest.iter().enumerate() {
        println!(
            "node {}: slowest client batch {:.1} ms, peer message {:.1} ms, timer {:.1} ms; \
             {:.0} ns of node time per SET ({:.2}x standalone)",
            i + 1,
            s[0].as_secs_f64() * 1e3,
            s[1].as_secs_f64() * 1e3,
            s[2].as_secs_f64() * 1e3,
            per_set_ns(s[3]),
            per_set_ns(s[3]) / per_set_ns(alone_busy)
        );
    }
}

//! Heap bytes per key of a replicated keyspace against a standalone one: three nodes wired back
//! to back in memory, `KEYS` SETs of 64-byte values (`key:%012d`) on node 1, then every node's
//! live heap divided by the key count. Counts what the allocator was asked for (not its chunk
//! rounding), so it isolates the node's own structures from malloc's behaviour.
//!
//!   cargo run --release -p lattice-node --example repl_memory [KEYS]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicIsize, Ordering};

use bytes::Bytes;
use lattice_node::{Buggify, Config, ConnId, Input, Micros, Node, NodeId, Output};

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

fn node(id: u32, size: usize, now: Micros) -> Node {
    let mut config = Config::default();
    config.node_id = id;
    config.cluster_size = size;
    let mut n = Node::new(config, u64::from(id), Buggify::disabled(), now);
    n.handle(
        now,
        Input::Connected {
            conn: ConnId(1),
            peer_addr: "127.0.0.1:1".into(),
            local_addr: "127.0.0.1:2".into(),
        },
    );
    for p in 1..=size as u32 {
        if p != id {
            n.handle(now, Input::PeerUp { peer: NodeId(p) });
        }
    }
    n
}

fn main() {
    let keys: usize = std::env::args()
        .nth(1)
        .map_or(200_000, |s| s.parse().expect("KEYS"));
    let mut now_ms = 1_700_000_000_000u64;
    let value = Bytes::from(vec![b'x'; 64]);
    // Standalone first.
    let base = LIVE.load(Ordering::Relaxed);
    let mut alone = node(1, 1, Micros::from_millis(now_ms));
    for i in 0..keys {
        let args = vec![
            Bytes::from_static(b"SET"),
            Bytes::from(format!("key:{i:012}")),
            value.clone(),
        ];
        alone.handle(
            Micros::from_millis(now_ms),
            Input::Request {
                conn: ConnId(1),
                args,
            },
        );
        while alone.poll_output().is_some() {}
    }
    let standalone = LIVE.load(Ordering::Relaxed) - base;
    drop(alone);

    let mut nodes: Vec<Node> = (1..=3)
        .map(|i| node(i, 3, Micros::from_millis(now_ms)))
        .collect();
    let mut wire: VecDeque<(usize, usize, Bytes)> = VecDeque::new();
    let pump = |nodes: &mut Vec<Node>, wire: &mut VecDeque<(usize, usize, Bytes)>, now_ms: u64| loop {
        for (i, n) in nodes.iter_mut().enumerate() {
            n.handle_timeout(Micros::from_millis(now_ms));
            while let Some(o) = n.poll_output() {
                if let Output::PeerSend { peer, data } = o {
                    wire.push_back((peer.0 as usize - 1, i, data));
                }
            }
        }
        let Some((to, from, data)) = wire.pop_front() else {
            break;
        };
        nodes[to].handle(
            Micros::from_millis(now_ms),
            Input::PeerMessage {
                peer: NodeId(from as u32 + 1),
                data,
            },
        );
    };
    for (i, chunk) in (0..keys).collect::<Vec<_>>().chunks(1000).enumerate() {
        for k in chunk {
            let args = vec![
                Bytes::from_static(b"SET"),
                Bytes::from(format!("key:{k:012}")),
                value.clone(),
            ];
            nodes[0].handle(
                Micros::from_millis(now_ms),
                Input::Request {
                    conn: ConnId(1),
                    args,
                },
            );
        }
        now_ms += 3;
        let _ = i;
        pump(&mut nodes, &mut wire, now_ms);
    }
    for _ in 0..400 {
        now_ms += 10;
        pump(&mut nodes, &mut wire, now_ms);
    }
    let digests: Vec<u64> = nodes.iter_mut().map(|n| n.replication_digest()).collect();
    assert!(
        digests.iter().all(|d| *d == digests[0]),
        "replicas differ: {digests:?}"
    );
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
}
#[allow(dead_code)]
fn sizes() {
    use lattice_crdt::*;
    println!(
        "KeyState {}",
        std::mem::size_of::<lattice_node::repl::state::KeyState>()
    );
    println!(
        "OrMap<(),Reg> {}",
        std::mem::size_of::<OrMap<(), lattice_node::repl::state::Reg>>()
    );
    println!(
        "Reg {}",
        std::mem::size_of::<lattice_node::repl::state::Reg>()
    );
    println!("OrSet {}", std::mem::size_of::<OrSet<Bytes>>());
    println!("Rga {}", std::mem::size_of::<Rga<Bytes>>());
    println!("CausalContext {}", std::mem::size_of::<CausalContext>());
    println!("Lww {}", std::mem::size_of::<LwwRegister<Option<u64>>>());
}

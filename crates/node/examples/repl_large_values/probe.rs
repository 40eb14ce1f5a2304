//! The cost of one write to a large collection on each node of a replicated cluster: three
//! nodes wired back to back in memory, one key of `size` list elements / hash fields / set
//! members built on node 1, then single-element LPUSH / HSET / SADD calls on node 1. Every
//! call into a node (the client request, each peer message, each timer) is timed and added to
//! that node's account, so the writer's capture and flush and each replica's merge and store
//! update are all counted. Shared by `examples/repl_large_values` (the figures) and
//! `tests/repl_scaling.rs` (the bound).

// A probe outside the node: it may read the clock the node itself never reads.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lattice_node::{Buggify, Config, ConnId, Input, Micros, Node, NodeId, Output};

/// The collection written.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    List,
    Hash,
    Set,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::List, Kind::Hash, Kind::Set];

    /// The command adding `elements` (as fields with value "v" for a hash).
    fn command(self, elements: impl Iterator<Item = String>) -> Vec<Bytes> {
        let (name, key) = match self {
            Kind::List => ("LPUSH", "l"),
            Kind::Hash => ("HSET", "h"),
            Kind::Set => ("SADD", "s"),
        };
        let mut args = vec![Bytes::from(name), Bytes::from(key)];
        for e in elements {
            args.push(Bytes::from(e));
            if let Kind::Hash = self {
                args.push(Bytes::from_static(b"v"));
            }
        }
        args
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::List => "LPUSH",
            Kind::Hash => "HSET",
            Kind::Set => "SADD",
        }
    }
}

/// Nanoseconds of node time per write: the writer's, then each replica's.
#[derive(Clone, Copy, Debug)]
pub struct Costs {
    pub writer_ns: f64,
    pub replicas_ns: [f64; 2],
}

/// Node `id` of a `size`-node cluster (1 for a standalone node), with client connection 1
/// open and every peer link up.
pub fn node(id: u32, size: usize, now: Micros) -> Node {
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
    for p in (1..=size as u32).filter(|p| *p != id) {
        n.handle(now, Input::PeerUp { peer: NodeId(p) });
    }
    n
}

struct Cluster {
    nodes: Vec<Node>,
    now_ms: u64,
    wire: VecDeque<(usize, usize, Bytes)>,
    busy: [Duration; 3],
}

impl Cluster {
    fn new() -> Cluster {
        let now_ms = 1_700_000_000_000;
        let now = Micros::from_millis(now_ms);
        let nodes = (1..=3u32).map(|id| node(id, 3, now)).collect();
        Cluster {
            nodes,
            now_ms,
            wire: VecDeque::new(),
            busy: [Duration::ZERO; 3],
        }
    }

    fn timed(&mut self, i: usize, input: Option<Input>) {
        let now = Micros::from_millis(self.now_ms);
        let t = Instant::now();
        match input {
            Some(input) => self.nodes[i].handle(now, input),
            None => self.nodes[i].handle_timeout(now),
        }
        self.busy[i] += t.elapsed();
        while let Some(o) = self.nodes[i].poll_output() {
            if let Output::PeerSend { peer, data } = o {
                self.wire.push_back((peer.0 as usize - 1, i, data));
            }
        }
    }

    fn request(&mut self, args: Vec<Bytes>) {
        let conn = ConnId(1);
        self.timed(0, Some(Input::Request { conn, args }));
    }

    /// Moves time on by `ms`, running every node's timers and delivering every message.
    fn pump(&mut self, ms: u64) {
        self.now_ms += ms;
        loop {
            for i in 0..3 {
                self.timed(i, None);
            }
            let Some((to, from, data)) = self.wire.pop_front() else {
                break;
            };
            let peer = NodeId(from as u32 + 1);
            self.timed(to, Some(Input::PeerMessage { peer, data }));
        }
    }
}

/// Builds a `size`-element collection of `kind` on a fresh cluster, lets it replicate, then
/// times `reps` rounds of `ops` single-element writes and returns the cheapest round's cost
/// per write on each node (the cheapest, so that a round which happened to include a
/// once-a-second anti-entropy or GC step, or another process's burst, does not count).
pub fn measure(kind: Kind, size: usize, ops: usize, reps: usize) -> Costs {
    let mut c = Cluster::new();
    let mut next = 0..size;
    loop {
        let chunk: Vec<String> = next.by_ref().take(1_000).map(|i| format!("e{i}")).collect();
        if chunk.is_empty() {
            break;
        }
        c.request(kind.command(chunk.into_iter()));
        c.pump(3);
    }
    for _ in 0..300 {
        c.pump(10); // replicate, digest, collect
    }
    let mut best = [f64::INFINITY; 3];
    for rep in 0..reps {
        c.busy = [Duration::ZERO; 3];
        for op in 0..ops {
            c.request(kind.command(std::iter::once(format!("new{rep}:{op}"))));
            c.pump(1);
        }
        c.pump(5);
        for (b, spent) in best.iter_mut().zip(c.busy) {
            *b = b.min(spent.as_nanos() as f64 / ops as f64);
        }
    }
    let digests: Vec<u64> = c.nodes.iter_mut().map(|n| n.replication_digest()).collect();
    assert!(
        digests.iter().all(|d| *d == digests[0]),
        "replicas differ after the {} writes: {digests:?}",
        kind.name()
    );
    Costs {
        writer_ns: best[0],
        replicas_ns: [best[1], best[2]],
    }
}

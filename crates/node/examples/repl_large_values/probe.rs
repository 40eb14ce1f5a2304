//! The cost of one write to a large collection on each node of a replicated cluster: three
//! nodes wired back to back in memory, one key of `size` list elements / hash fields / set
//! members built on node 1, then single-element LPUSH / HSET / SADD calls on node 1. Every
//! call into a node (the client request, each peer message, each timer) is timed and added to
//! that node's account, so the writer's capture and flush and each replica's merge and store
//! update are all counted. Shared by `examples/repl_large_values` (the figures) and
//! `tests/repl_scaling.rs` (the bound).

// A probe outside the node: it may read the clock the node itself never reads.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use lattice_node::Micros;
use lattice_testkit::{Cluster, Host, Member};

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

/// A node whose every call is timed: what a server runs while it holds the node, so a slow
/// call is a stall every client of that node sees.
pub struct Timed {
    pub host: Host,
    /// The slowest call of each kind: [`CLIENT`], [`PEER`], [`TIMER`].
    pub slowest: [Duration; 3],
    /// Its time over all its calls.
    pub busy: Duration,
}

pub const CLIENT: usize = 0;
pub const PEER: usize = 1;
pub const TIMER: usize = 2;

impl Timed {
    pub fn new(host: Host) -> Timed {
        Timed {
            host,
            slowest: [Duration::ZERO; 3],
            busy: Duration::ZERO,
        }
    }

    /// Runs `f` on the host as one call of `kind`, timed.
    pub fn time<R>(&mut self, kind: usize, f: impl FnOnce(&mut Host) -> R) -> R {
        let t = Instant::now();
        let r = f(&mut self.host);
        let spent = t.elapsed();
        self.slowest[kind] = self.slowest[kind].max(spent);
        self.busy += spent;
        r
    }
}

impl Member for Timed {
    type Msg = Bytes;

    fn receive(&mut self, now: Micros, from: usize, msg: Bytes) {
        self.time(PEER, |h| h.receive(now, from, msg));
    }

    fn tick(&mut self, now: Micros) {
        self.time(TIMER, |h| h.tick(now));
    }

    fn link(&mut self, now: Micros, peer: usize, up: bool) {
        self.host.link(now, peer, up);
    }

    fn drain(&mut self, now: Micros, sends: &mut Vec<(usize, Bytes)>) {
        Member::drain(&mut self.host, now, sends);
    }

    fn size(msg: &Bytes) -> usize {
        msg.len()
    }

    fn check_invariants(&self) {
        self.host.check_invariants();
    }
}

/// A 3-node cluster of timed nodes, every link up. Invariants are checked every 1,000th call:
/// a check walks the whole keyspace, and a probe loads large ones.
pub fn timed_cluster() -> Cluster<Timed> {
    let mut c = Cluster::new(3).map(Timed::new);
    c.check_every = 1_000;
    c
}

/// A client batch of `requests` on node `i`, timed as one call; its replies are dropped.
pub fn batch(c: &mut Cluster<Timed>, i: usize, requests: Vec<Vec<Bytes>>) {
    c.on(i, |t, now| {
        t.time(CLIENT, |h| {
            for args in requests {
                h.request(now, 1, args);
            }
        })
    });
    c.members[i].host.take(1);
}

/// Builds a `size`-element collection of `kind` on a fresh cluster, lets it replicate, then
/// times `reps` rounds of `ops` single-element writes and returns the cheapest round's cost
/// per write on each node (the cheapest, so that a round which happened to include a
/// once-a-second anti-entropy or GC step, or another process's burst, does not count).
pub fn measure(kind: Kind, size: usize, ops: usize, reps: usize) -> Costs {
    let mut c = timed_cluster();
    let mut next = 0..size;
    loop {
        let chunk: Vec<String> = next.by_ref().take(1_000).map(|i| format!("e{i}")).collect();
        if chunk.is_empty() {
            break;
        }
        batch(&mut c, 0, vec![kind.command(chunk.into_iter())]);
        c.advance(3);
    }
    for _ in 0..300 {
        c.advance(10); // replicate, digest, collect
    }
    let mut best = [f64::INFINITY; 3];
    for rep in 0..reps {
        for t in &mut c.members {
            t.busy = Duration::ZERO;
        }
        for op in 0..ops {
            let write = kind.command(std::iter::once(format!("new{rep}:{op}")));
            batch(&mut c, 0, vec![write]);
            c.advance(1);
        }
        c.advance(5);
        for (b, t) in best.iter_mut().zip(&c.members) {
            *b = b.min(t.busy.as_nanos() as f64 / ops as f64);
        }
    }
    assert!(
        c.map(|t| t.host).converged(),
        "replicas differ after the {} writes",
        kind.name()
    );
    Costs {
        writer_ns: best[0],
        replicas_ns: [best[1], best[2]],
    }
}

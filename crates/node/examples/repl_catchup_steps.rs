//! How long one call into the writer takes while it ships a full transfer to an empty replica
//! (issue 16's catch-up): the step a client batch waits behind on the real server, which hands
//! the node one input at a time under its lock.
//!
//! Three nodes wired in memory: nodes 1 and 2 hold `keys` string keys (64-byte values), node 3
//! starts empty and links up; while anti-entropy ships it everything, node 1 takes one SET per
//! millisecond of node time. Every call into node 1 that is not a client request (peer
//! messages, timers) is timed, and the bytes of every message node 1 sends node 3 are counted.
//! Prints the calls' p50 / p99 / max, the largest message, and the transfer's node time.
//!
//!   cargo run --release -p lattice-node --example repl_catchup_steps [keys] [slice_keys]...
//!
//! CPU time per call, not wall time: on a loaded machine a call's wall time is mostly other
//! processes' turns on the core.

// A probe outside the node: it may read the clock the node itself never reads.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use lattice_node::{Buggify, Config, ConnId, Input, Micros, Node, NodeId, Output};

/// CPU time consumed by this thread so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn node(id: u32, slice_keys: usize, now: Micros) -> Node {
    let mut config = Config::default();
    config.node_id = id;
    config.cluster_size = 3;
    config.repl_slice_keys = slice_keys;
    let mut n = Node::new(config, u64::from(id), Buggify::disabled(), now);
    n.handle(
        now,
        Input::Connected {
            conn: ConnId(1),
            peer_addr: "127.0.0.1:1".into(),
            local_addr: "127.0.0.1:2".into(),
        },
    );
    n
}

struct Run {
    nodes: Vec<Node>,
    now_ms: u64,
    wire: VecDeque<(usize, usize, Bytes)>,
    /// Node 3 is linked (before: messages to it are not sent).
    third_up: bool,
    /// Durations of node 1's peer-message and timer calls (while `timing`).
    steps: Vec<Duration>,
    /// The longest calls: (duration, what the input was, bytes the call sent).
    longest: Vec<(Duration, String, usize)>,
    timing: bool,
    largest_to_third: usize,
    bytes_to_third: usize,
}

impl Run {
    fn call(&mut self, i: usize, input: Option<Input>) {
        let now = Micros::from_millis(self.now_ms);
        let timed = self.timing && i == 0 && !matches!(input, Some(Input::Request { .. }));
        let what = match &input {
            Some(Input::PeerMessage { peer, data }) => {
                format!("message of {} B from node {}", data.len(), peer.0)
            }
            Some(_) => "other input".to_string(),
            None => "timers".to_string(),
        };
        let t = thread_cpu();
        match input {
            Some(input) => self.nodes[i].handle(now, input),
            None => self.nodes[i].handle_timeout(now),
        }
        let took = thread_cpu() - t;
        let mut sent = 0;
        while let Some(o) = self.nodes[i].poll_output() {
            if let Output::PeerSend { peer, data } = o {
                sent += data.len();
                let to = peer.0 as usize - 1;
                if to == 2 && !self.third_up {
                    continue;
                }
                if i == 0 && to == 2 {
                    self.largest_to_third = self.largest_to_third.max(data.len());
                    self.bytes_to_third += data.len();
                }
                self.wire.push_back((to, i, data));
            }
        }
        if timed {
            self.steps.push(took);
            self.longest.push((took, what, sent));
            self.longest.sort_by_key(|l| std::cmp::Reverse(l.0));
            self.longest.truncate(5);
        }
    }

    fn set(&mut self, on: usize, key: String) {
        let args = vec![
            Bytes::from_static(b"SET"),
            Bytes::from(key),
            Bytes::from(vec![b'v'; 64]),
        ];
        self.call(
            on,
            Some(Input::Request {
                conn: ConnId(1),
                args,
            }),
        );
    }

    /// One millisecond: timers, then every message in flight.
    fn tick(&mut self) {
        self.now_ms += 1;
        let nodes = if self.third_up { 3 } else { 2 };
        for i in 0..nodes {
            self.call(i, None);
        }
        while let Some((to, from, data)) = self.wire.pop_front() {
            let peer = NodeId(from as u32 + 1);
            self.call(to, Some(Input::PeerMessage { peer, data }));
        }
    }

    fn field(&mut self, i: usize, name: &str) -> u64 {
        let args = vec![
            Bytes::from_static(b"INFO"),
            Bytes::from_static(b"replication"),
        ];
        let now = Micros::from_millis(self.now_ms);
        self.nodes[i].handle(
            now,
            Input::Request {
                conn: ConnId(1),
                args,
            },
        );
        let mut text = Vec::new();
        while let Some(o) = self.nodes[i].poll_output() {
            match o {
                Output::Write { data, .. } => text.extend_from_slice(&data),
                Output::PeerSend { peer, data } => {
                    self.wire.push_back((peer.0 as usize - 1, i, data))
                }
                _ => {}
            }
        }
        String::from_utf8_lossy(&text)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")).map(str::to_string))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }
}

fn run(keys: usize, slice_keys: usize) {
    let now_ms = 1_700_000_000_000;
    let now = Micros::from_millis(now_ms);
    let mut r = Run {
        nodes: vec![node(1, slice_keys, now), node(2, slice_keys, now)],
        now_ms,
        wire: VecDeque::new(),
        third_up: false,
        steps: Vec::new(),
        longest: Vec::new(),
        timing: false,
        largest_to_third: 0,
        bytes_to_third: 0,
    };
    for i in 0..2 {
        let other = NodeId(2 - i as u32);
        r.nodes[i].handle(now, Input::PeerUp { peer: other });
    }
    for k in 0..keys {
        r.set(0, format!("pre:{k:010}"));
        if k % 1_000 == 999 {
            r.tick();
        }
    }
    while r.field(1, "replicated_keys") < keys as u64 {
        r.tick();
    }
    // Node 3 joins empty.
    let now = Micros::from_millis(r.now_ms);
    r.nodes.push(node(3, slice_keys, now));
    r.third_up = true;
    for i in 0..3 {
        for p in (1..=3u32).filter(|p| *p != i as u32 + 1) {
            r.nodes[i].handle(now, Input::PeerUp { peer: NodeId(p) });
        }
    }
    r.timing = true;
    let start_ms = r.now_ms;
    let mut writes = 0;
    loop {
        r.set(0, format!("new:{writes:010}"));
        writes += 1;
        r.tick();
        if writes % 500 == 0 {
            for _ in 0..10 {
                r.tick(); // the last writes' deltas
            }
            let equal = r.nodes[0].replication_digest() == r.nodes[2].replication_digest();
            if r.field(2, "replicated_keys") >= (keys + writes) as u64 && equal {
                break;
            }
            assert!(
                r.now_ms - start_ms < 3_600_000,
                "no catch-up within an hour of node time"
            );
        }
    }
    let mut steps = r.steps.clone();
    steps.sort();
    let q = |p: f64| steps[((steps.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e3;
    println!(
        "keys {keys:>8}  slice_keys {slice_keys:>5}  node-1 steps {:>7}  p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  largest message to node 3 {:>7} B  node 1 sent node 3 {:>10} B  caught up after {} ms of node time",
        steps.len(),
        q(0.5),
        q(0.99),
        q(1.0),
        r.largest_to_third,
        r.bytes_to_third,
        r.now_ms - start_ms,
    );
    for (took, what, sent) in &r.longest {
        println!(
            "    {:.3} ms: {what}, sent {sent} B",
            took.as_secs_f64() * 1e3
        );
    }
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers: keys, then slice sizes"))
        .collect();
    let keys = args.first().copied().unwrap_or(100_000);
    let slices = if args.len() > 1 {
        args[1..].to_vec()
    } else {
        vec![2_048]
    };
    for s in slices {
        run(keys, s);
    }
}

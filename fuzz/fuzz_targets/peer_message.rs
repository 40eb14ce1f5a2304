//! Peer messages into a replicated node. Random bytes alone rarely get past the envelope's
//! decoder, so the input drives a two-node system instead: node 2 runs client writes and its
//! real messages travel to node 1, some delivered as they are, some with a byte flipped, some
//! replaced by raw input bytes; time advances so acknowledgements, retransmission, anti-entropy
//! and GC run too. Node 1 must never panic, and both nodes' invariants must hold after every
//! damaged message and at the end (a message from a peer is checked, never trusted).
#![no_main]

use std::collections::VecDeque;

use bytes::Bytes;
use lattice_node::{Buggify, Config, ConnId, Input, Micros, Node, NodeId, Output};
use libfuzzer_sys::fuzz_target;

const START_MS: u64 = 1_700_000_000_000;
/// Caps the work one input can ask for, so every run stays short.
const MAX_STEPS: usize = 256;

/// Writes of every replicated type; the fuzzer picks one and the key/field/value bytes.
const WRITES: &[&[&str]] = &[
    &["SET", "k", "v"],
    &["APPEND", "k", "v"],
    &["INCRBY", "k", "3"],
    &["INCRBYFLOAT", "k", "1.5"],
    &["DEL", "k"],
    &["LPUSH", "k", "v"],
    &["RPOP", "k"],
    &["LSET", "k", "0", "v"],
    &["HSET", "k", "f", "v"],
    &["HINCRBY", "k", "f", "2"],
    &["HDEL", "k", "f"],
    &["SADD", "k", "v"],
    &["SREM", "k", "v"],
    &["ZADD", "k", "1", "v"],
    &["ZINCRBY", "k", "2", "v"],
    &["ZREM", "k", "v"],
    &["PEXPIRE", "k", "50"],
    &["PERSIST", "k"],
    &["PFADD", "k", "v"],
    &["SETBIT", "k", "7", "1"],
    &["XADD", "k", "*", "f", "v"],
    &["FLUSHALL"],
];

struct Pair {
    /// `nodes[0]` is node 1 (the receiver under test), `nodes[1]` is node 2.
    nodes: [Node; 2],
    now_ms: u64,
    /// Messages in flight, per direction: `wire[0]` goes to node 1.
    wire: [VecDeque<Bytes>; 2],
}

impl Pair {
    fn new() -> Pair {
        let nodes = [1u32, 2].map(|id| {
            let mut config = Config::default();
            config.node_id = id;
            config.cluster_size = 2;
            let now = Micros::from_millis(START_MS);
            let mut node = Node::new(config, u64::from(id), Buggify::disabled(), now);
            node.handle(
                now,
                Input::Connected {
                    conn: ConnId(1),
                    peer_addr: "127.0.0.1:1".into(),
                    local_addr: "127.0.0.1:2".into(),
                },
            );
            node.handle(
                now,
                Input::PeerUp {
                    peer: NodeId(3 - id),
                },
            );
            node
        });
        let mut pair = Pair {
            nodes,
            now_ms: START_MS,
            wire: [VecDeque::new(), VecDeque::new()],
        };
        pair.drain();
        pair
    }

    fn now(&self) -> Micros {
        Micros::from_millis(self.now_ms)
    }

    fn drain(&mut self) {
        for i in 0..2 {
            while let Some(out) = self.nodes[i].poll_output() {
                if let Output::PeerSend { data, .. } = out {
                    // Bounded like a real link: beyond this the oldest message is lost,
                    // which anti-entropy must repair anyway.
                    let q = &mut self.wire[1 - i];
                    if q.len() >= 64 {
                        q.pop_front();
                    }
                    q.push_back(data);
                }
            }
        }
    }

    /// A full invariant walk costs far more than a step, so it runs after every damaged
    /// message (what the target is about) and once at the end, not after every step.
    fn check(&self) {
        for node in &self.nodes {
            node.check_invariants();
        }
    }

    fn deliver(&mut self, to: usize, data: Bytes) {
        let now = self.now();
        let peer = NodeId(if to == 0 { 2 } else { 1 });
        self.nodes[to].handle(now, Input::PeerMessage { peer, data });
        self.drain();
    }

    fn write(&mut self, on: usize, template: &[&str], key: u8, value: &[u8]) {
        let args = template
            .iter()
            .map(|a| match *a {
                "k" => Bytes::from(vec![b'k', key % 8]),
                "f" => Bytes::from(vec![b'f', key / 8 % 4]),
                "v" => Bytes::copy_from_slice(value),
                other => Bytes::copy_from_slice(other.as_bytes()),
            })
            .collect();
        let now = self.now();
        self.nodes[on].handle(
            now,
            Input::Request {
                conn: ConnId(1),
                args,
            },
        );
        self.drain();
    }

    fn advance(&mut self, ms: u64) {
        self.now_ms += ms;
        let now = self.now();
        for node in &mut self.nodes {
            if node.poll_timeout().is_some_and(|t| t <= now) {
                node.handle_timeout(now);
            }
        }
        self.drain();
    }
}

/// Reads the input front to back; running out of bytes ends the run.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn bytes(&mut self, max: usize) -> Option<&'a [u8]> {
        let n = usize::from(self.byte()?).min(max).min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Cursor(data);
    let mut pair = Pair::new();
    for _ in 0..MAX_STEPS {
        let Some(op) = input.byte() else { break };
        match op % 8 {
            0 | 1 => {
                let Some(which) = input.byte() else { break };
                let Some(key) = input.byte() else { break };
                let Some(value) = input.bytes(32) else { break };
                let on = usize::from(which & 1);
                pair.write(
                    on,
                    WRITES[usize::from(which >> 1) % WRITES.len()],
                    key,
                    value,
                );
            }
            2 | 3 => {
                let to = usize::from(op & 1);
                if let Some(msg) = pair.wire[to].pop_front() {
                    pair.deliver(to, msg);
                }
            }
            4 => {
                // A real message with one byte changed.
                let (Some(at), Some(xor)) = (input.byte(), input.byte()) else {
                    break;
                };
                if let Some(msg) = pair.wire[0].pop_front() {
                    let mut bytes = msg.to_vec();
                    if !bytes.is_empty() {
                        let i = usize::from(at) * bytes.len() / 256;
                        bytes[i] ^= xor | 1;
                    }
                    pair.deliver(0, Bytes::from(bytes));
                    pair.check();
                }
            }
            5 => {
                // A real message cut short.
                let Some(keep) = input.byte() else { break };
                if let Some(msg) = pair.wire[0].pop_front() {
                    let n = usize::from(keep) * msg.len() / 256;
                    pair.deliver(0, msg.slice(..n));
                    pair.check();
                }
            }
            6 => {
                let Some(raw) = input.bytes(255) else { break };
                pair.deliver(0, Bytes::copy_from_slice(raw));
                pair.check();
            }
            _ => {
                let Some(ms) = input.byte() else { break };
                pair.advance(u64::from(ms) * 20);
            }
        }
    }
    pair.check();
});

//! Sorted-set scaling through the whole command path (request in, reply out): one sorted set
//! grows to 1,000,000 members; at 1k, 10k, 100k and 1M members, 10,000 ZADDs of new members
//! and 10,000 ZRANKs of present ones are timed.
//!
//!     cargo run --release -p lattice-node --example zset_command_scaling
//!
//! Not part of the node: an example may read a clock, the node and its tests may not.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::time::Instant;

use bytes::Bytes;
use lattice_node::{Config, Micros};
use lattice_testkit::{Host, START_MS};

const OPS: usize = 10_000;

/// Sends one request on connection 1 and returns its reply.
fn send(node: &mut Host, args: &[&[u8]]) -> Vec<u8> {
    let now = Micros::from_millis(START_MS);
    let args = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
    node.request(now, 1, args);
    node.drain(now, &mut Vec::new());
    node.take_bytes(1)
}

fn main() {
    let now = Micros::from_millis(START_MS);
    let mut node = Host::new(Config::default(), 7, now);
    node.connect(now, 1);
    let mut x = 88172645463325252u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut n = 0usize;
    for size in [1_000usize, 10_000, 100_000, 1_000_000] {
        while n < size - OPS.min(size / 2) {
            let s = (next() % 1_000_000).to_string();
            send(
                &mut node,
                &[b"ZADD", b"z", s.as_bytes(), format!("m{n}").as_bytes()],
            );
            n += 1;
        }
        let batch: Vec<(String, String)> = (0..size - n)
            .map(|i| ((next() % 1_000_000).to_string(), format!("m{}", n + i)))
            .collect();
        let t = Instant::now();
        for (s, m) in &batch {
            send(&mut node, &[b"ZADD", b"z", s.as_bytes(), m.as_bytes()]);
        }
        let add_ns = t.elapsed().as_nanos() as f64 / batch.len() as f64;
        n = size;
        let probes: Vec<String> = (0..OPS)
            .map(|_| format!("m{}", next() % n as u64))
            .collect();
        let t = Instant::now();
        for m in &probes {
            send(&mut node, &[b"ZRANK", b"z", m.as_bytes()]);
        }
        let rank_ns = t.elapsed().as_nanos() as f64 / OPS as f64;
        println!("size {size:>9}: ZADD {add_ns:>7.0} ns/command, ZRANK {rank_ns:>7.0} ns/command");
    }
    assert_eq!(send(&mut node, &[b"ZCARD", b"z"]), b":1000000\r\n");
}

//! How a sorted set's insert and rank costs grow with its size: one set grows to 1,000,000
//! members with random scores and, at 1k, 10k, 100k and 1M members, 10,000 inserts of new
//! members (removed again, so the size is the one measured) and 10,000 rank queries of random
//! present members are timed.
//!
//!     cargo run --release -p lattice-store --example zset_scaling
//!
//! Not part of the store: an example may read a clock, the library and its tests may not.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::time::Instant;

use lattice_store::ZSet;

const OPS: usize = 10_000;

fn main() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut z = ZSet::with_hint(usize::MAX, 0, 128, 64);
    let mut members: Vec<Vec<u8>> = Vec::new();
    for size in [1_000usize, 10_000, 100_000, 1_000_000] {
        while z.len() < size {
            let m = format!("member:{}", next()).into_bytes();
            z.insert(&m, (next() % 1_000_000) as f64 / 7.0);
            members.push(m);
        }
        let probes: Vec<(Vec<u8>, f64)> = (0..OPS)
            .map(|_| {
                let m = format!("probe:{}", next()).into_bytes();
                (m, (next() % 1_000_000) as f64 / 7.0)
            })
            .collect();
        let t = Instant::now();
        for (m, s) in &probes {
            z.insert(m, *s);
        }
        let add_ns = t.elapsed().as_nanos() as f64 / OPS as f64;
        for (m, _) in &probes {
            z.remove(m);
        }
        let queries: Vec<&Vec<u8>> = (0..OPS)
            .map(|_| &members[(next() % members.len() as u64) as usize])
            .collect();
        let t = Instant::now();
        let mut sum = 0usize;
        for m in &queries {
            sum = sum.wrapping_add(z.rank(m).expect("present"));
        }
        let rank_ns = t.elapsed().as_nanos() as f64 / OPS as f64;
        std::hint::black_box(sum);
        println!(
            "size {size:>9}: ZADD (new member) {add_ns:>7.0} ns/op, ZRANK {rank_ns:>7.0} ns/op"
        );
    }
    z.check_invariants();
}

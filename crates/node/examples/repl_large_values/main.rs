//! Must the cost of replicating one write grow with the value it writes into? Prints, for
//! LPUSH / HSET / SADD of one element on a key of 10 and of 100,000 elements, the node time
//! per write on the writer and on each replica of a 3-node cluster wired in memory, and the
//! ratio of the two sizes (see `probe.rs` for what is timed).
//!
//!   cargo run --release -p lattice-node --example repl_large_values [LARGE] [OPS] [REPS] [WRITE]
//!
//! `WRITE` (LPUSH, HSET or SADD) measures that write alone.

mod probe;

fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .map_or(default, |s| s.parse().expect("a number"))
    };
    let (large, ops, reps) = (arg(1, 100_000), arg(2, 200), arg(3, 5));
    println!(
        "{:<6} {:>9} {:>12} {:>12} {:>12}",
        "write", "elements", "writer ns", "replica2 ns", "replica3 ns"
    );
    let only = std::env::args().nth(4);
    let chosen = probe::Kind::ALL.into_iter().filter(|k| {
        only.as_ref()
            .is_none_or(|o| o.eq_ignore_ascii_case(k.name()))
    });
    for kind in chosen {
        let small = probe::measure(kind, 10, ops, reps);
        let big = probe::measure(kind, large, ops, reps);
        for (size, c) in [(10, small), (large, big)] {
            println!(
                "{:<6} {:>9} {:>12.0} {:>12.0} {:>12.0}",
                kind.name(),
                size,
                c.writer_ns,
                c.replicas_ns[0],
                c.replicas_ns[1]
            );
        }
        println!(
            "{:<6} ratio {large}/10: writer {:.2}, replicas {:.2} / {:.2}",
            kind.name(),
            big.writer_ns / small.writer_ns,
            big.replicas_ns[0] / small.replicas_ns[0],
            big.replicas_ns[1] / small.replicas_ns[1]
        );
    }
}

//! Replicating one write costs the change, not the value it writes into: one LPUSH / HSET /
//! SADD on a key of 20,000 elements against one on a key of 10, on the writer and on each
//! replica. The 100,000-element figures come from `examples/repl_large_values`; this test
//! (20,000, so that the debug build runs it in seconds) holds a bound far above the measured
//! ratio (about 1) and far below what a cost proportional to the value gives (hundreds), so
//! machine noise does not fail it.

#[path = "../examples/repl_large_values/probe.rs"]
mod probe;

/// The largest ratio of per-write node time, 20,000 elements against 10, that passes.
const MAX_RATIO: f64 = 10.0;

#[test]
fn one_element_writes_cost_the_same_on_small_and_large_collections() {
    for kind in probe::Kind::ALL {
        let small = probe::measure(kind, 10, 20, 5);
        let large = probe::measure(kind, 20_000, 20, 5);
        let ratios = [
            large.writer_ns / small.writer_ns,
            large.replicas_ns[0] / small.replicas_ns[0],
            large.replicas_ns[1] / small.replicas_ns[1],
        ];
        eprintln!("{}: ratios (writer, replicas) {ratios:.2?}", kind.name());
        assert!(
            ratios.iter().all(|r| *r < MAX_RATIO),
            "{}: per-write cost at 20,000 elements / at 10 = {ratios:?} (writer, replicas); \
             small {small:?}, large {large:?}",
            kind.name()
        );
    }
}

//! Replicated string keys are kept packed (their stamps only; values and key bytes in the
//! store): anti-entropy must still ship them whole, and every node's store, marks and states
//! must agree. Three nodes wired in memory; node 3 misses every delta of a bulk load on
//! nodes 1 and 2, is repaired by anti-entropy alone, then the keys are overwritten, deleted,
//! renamed and incremented.

use lattice_testkit::Cluster;

fn key(i: usize) -> String {
    format!("key:{i:08}")
}

/// One command on node `on`, its reply left unread and its deltas on the wire.
fn run(c: &mut Cluster, on: usize, args: &[&str]) {
    c.send(on, &[args]);
}

/// Three nodes loaded with `KEYS` strings written alternately on nodes 1 and 2 while node 3
/// hears nothing (until `heal_at` keys, if given); `pause_every` keys the cluster runs for
/// `pause_ms`.
fn load_missing_node_3(heal_at: Option<usize>, pause_every: usize, pause_ms: u64) -> Cluster {
    let mut c = Cluster::new(3);
    c.step_ms = 5;
    // A check walks every node's whole keyspace and packed keys: after every input it would
    // be quadratic in the load.
    c.check_every = 100;
    c.silence(2);
    for i in 0..KEYS {
        if Some(i) == heal_at {
            c.connect_all();
        }
        run(&mut c, i % 2, &["SET", &key(i), &format!("value-{i}")]);
        if i % pause_every == 0 {
            c.advance(pause_ms);
        }
    }
    c
}

const KEYS: usize = 3_000;

/// Keys that anti-entropy ships back and forth carry the sender's applied frontier in their
/// contexts. Frontiers are applied by each node on its own schedule, so a state often arrives
/// from a node whose frontier is ahead: it must still end packed (at once, or at the next GC
/// round), not stay in general form with nothing left to collect. Before, thousands of such
/// keys stayed general for good on a quiet cluster after a repair.
#[test]
fn keys_repaired_by_anti_entropy_end_packed_on_every_node() {
    // Node 3 misses the first half, so the repair runs while writes go on and frontiers move.
    let mut c = load_missing_node_3(Some(KEYS / 2), 100, 20);
    c.converge(20_000);
    assert!(c.converged(), "anti-entropy did not repair node 3");
    // Quiet: a few GC rounds (each needs two seen-set reports from every peer).
    c.advance(10_000);
    for i in 0..3 {
        assert_eq!(c.info_field(i, "replicated_keys"), KEYS as u64);
        let general = c.info_field(i, "general_states");
        let table = c.info_field(i, "table_keys");
        let packed = c.info_field(i, "packed_keys");
        assert_eq!(
            (general, table),
            (0, 0),
            "node {}: keys outside the packed records after GC (packed {packed})",
            i + 1
        );
        assert_eq!(
            c.info_field(i, "dots_above_gc_frontier"),
            0,
            "node {}",
            i + 1
        );
    }
}

#[test]
fn packed_keys_are_repaired_whole_by_anti_entropy_and_stay_consistent() {
    let mut c = load_missing_node_3(None, 500, 5);
    c.advance(50);
    assert!(!c.converged(), "node 3 missed the load");
    c.heal(2);
    for _ in 0..200 {
        c.advance(100);
        if c.converged() {
            break;
        }
    }
    assert!(c.converged(), "anti-entropy did not repair node 3");
    for i in 0..3 {
        let keys = c.info_field(i, "replicated_keys") as usize;
        let packed = c.info_field(i, "packed_keys") as usize;
        assert_eq!(keys, KEYS, "node {}", i + 1);
        // GC has run: every key is a plain string written once, so nearly all are packed.
        assert!(
            packed * 10 >= keys * 9,
            "node {}: {packed} of {keys} packed",
            i + 1
        );
    }
    // Every kind of change to packed keys, on every node, replicated and checked.
    for i in (0..KEYS).step_by(7) {
        let on = i % 3;
        let k = key(i);
        match i % 5 {
            0 => run(&mut c, on, &["SET", &k, "again"]),
            1 => run(&mut c, on, &["DEL", &k]),
            2 => run(&mut c, on, &["RENAME", &k, &key(KEYS + i)]),
            3 => run(&mut c, on, &["APPEND", &k, "-more"]),
            _ => run(&mut c, on, &["EXPIRE", &k, "1000"]),
        }
        if i % 70 == 0 {
            c.advance(5);
        }
    }
    // Counters: a packed "10" incremented on two nodes concurrently adds up.
    run(&mut c, 0, &["SET", "counter", "10"]);
    c.advance(3_000);
    run(&mut c, 1, &["INCRBY", "counter", "5"]);
    run(&mut c, 2, &["INCR", "counter"]);
    c.advance(3_000);
    assert!(c.converged());
    c.take(0);
    assert_eq!(c.cmd(0, &["GET", "counter"]), "$2\r\n16\r\n");
}

//! maxmemory on a partitioned cluster (ARCHITECTURE §86, SEMANTICS "maxmemory and
//! eviction"): an owner evicts a key only after every other owner of its slot said it holds
//! the key as the evicting one does; the key stays on those owners, and a later write from any
//! node brings it back whole. Memory figures are planted as the server hands them in
//! (`Node::report_memory`), so each test decides when a node is over its limit.

use lattice_placement::{key_slot, Placement};
use lattice_testkit::Cluster;

const N: usize = 5;
const RF: usize = 3;

/// The node every test makes evict.
const EVICTING: usize = 0;

fn owners(key: &str) -> Vec<usize> {
    let ids: Vec<u32> = (1..=N as u32).collect();
    Placement::new(&ids, RF)
        .owners(key_slot(key.as_bytes()))
        .iter()
        .map(|&o| o as usize - 1)
        .collect()
}

/// `field` from node `i`'s `INFO everything`.
fn info(c: &mut Cluster, i: usize, field: &str) -> u64 {
    let text = c.cmd(i, &["INFO", "everything"]);
    lattice_testkit::info_field(&text, field)
}

/// Five nodes of replication factor 3 holding `n` strings of 1,000 bytes that node 0 owns
/// (`k:…`, written through other nodes), a set and a counter node 0 owns, settled long enough
/// for the GC frontier to pass every write. Returns the cluster and the string keys.
fn loaded(n: usize) -> (Cluster, Vec<String>, String, String) {
    loaded_with(n, false)
}

/// [`loaded`], with node 0 persisting (its snapshots published as the driver's manifest
/// does) when `persist`.
fn loaded_with(n: usize, persist: bool) -> (Cluster, Vec<String>, String, String) {
    let mut c = Cluster::unlinked(N, |i, config| {
        config.replication_factor = RF;
        config.announce_port = 7000 + i as u16;
    });
    c.step_ms = 20;
    if persist {
        c.members[EVICTING].publish_snapshots = true;
        c.persist(EVICTING);
    }
    c.connect_all();
    c.settle();
    let mine = |prefix: &'static str| {
        (0..)
            .map(move |x| format!("{prefix}:{x}"))
            .filter(|k| owners(k).contains(&EVICTING))
    };
    let keys: Vec<String> = mine("k").take(n).collect();
    let value = "v".repeat(1_000);
    for (x, k) in keys.iter().enumerate() {
        assert_eq!(c.cmd(x % N, &["SET", k, &value]), "+OK\r\n");
    }
    let set = mine("s").next().unwrap();
    let counter = mine("n").next().unwrap();
    c.cmd(1, &["SADD", &set, "a", "b", "c"]);
    c.cmd(2, &["INCRBY", &counter, "100"]);
    c.settle();
    c.advance(3_000);
    (c, keys, set, counter)
}

/// Every owner of each of `keys` other than the evicting node holds it (as [`loaded`] wrote
/// it).
fn others_hold(c: &mut Cluster, keys: &[String]) {
    let value = "v".repeat(1_000);
    for k in keys {
        for o in owners(k).into_iter().filter(|&o| o != EVICTING) {
            let got = c.cmd(o, &["GET", k]);
            assert_eq!(got, format!("$1000\r\n{value}\r\n"), "{k} on {o}");
        }
    }
}

/// Node `i` over its limit under `policy` for two commands `gap_ms` apart: the first asks the
/// other owners, the second evicts what they vouched for. Then back under the limit.
fn evict_on(c: &mut Cluster, i: usize, policy: &str, gap_ms: u64) {
    c.cmd(i, &["CONFIG", "SET", "maxmemory-policy", policy]);
    c.cmd(i, &["CONFIG", "SET", "maxmemory", "1000000"]);
    c.on(i, |h, _| h.node.report_memory(1_000_000_000));
    for _ in 0..40 {
        assert_eq!(c.cmd(i, &["PING"]), "+PONG\r\n");
    }
    c.advance(gap_ms);
    assert_eq!(c.cmd(i, &["PING"]), "+PONG\r\n");
    c.on(i, |h, _| h.node.report_memory(10));
}

#[test]
fn an_owner_evicts_what_the_other_owners_hold_and_they_keep_it() {
    let (mut c, keys, set, counter) = loaded(40);
    let before = c.dbsize(EVICTING);
    evict_on(&mut c, EVICTING, "allkeys-random", 200);
    let evicted = info(&mut c, EVICTING, "evicted_keys");
    assert!(evicted >= 30, "evicted {evicted}");
    assert!(info(&mut c, EVICTING, "eviction_proofs_confirmed") >= evicted);
    assert_eq!(c.dbsize(EVICTING), before - evicted as usize);
    assert_eq!(info(&mut c, EVICTING, "evicted_stubs"), evicted);
    // Many rounds later (pushes included), every other owner still holds every key, and
    // nothing came back to the evicting node.
    c.advance(5_000);
    assert_eq!(c.dbsize(EVICTING), before - evicted as usize);
    others_hold(&mut c, &keys);
    for o in owners(&set).into_iter().filter(|&o| o != EVICTING) {
        assert_eq!(c.cmd(o, &["SCARD", &set]), ":3\r\n", "node {o}");
        assert_eq!(c.cmd(o, &["GET", &counter]), "$3\r\n100\r\n", "node {o}");
    }
    assert_eq!(info(&mut c, EVICTING, "deltas_held_for_evicted"), 0);
}

#[test]
fn a_write_elsewhere_brings_the_whole_key_back() {
    let (mut c, keys, set, counter) = loaded(3);
    evict_on(&mut c, EVICTING, "allkeys-lru", 200);
    assert_eq!(c.dbsize(EVICTING), 0, "node 0 kept keys");
    let other = |k: &str| owners(k).into_iter().find(|&o| o != EVICTING).unwrap();
    c.cmd(other(&keys[1]), &["SET", &keys[1], "new"]);
    c.cmd(other(&set), &["SADD", &set, "d"]);
    c.cmd(other(&counter), &["INCR", &counter]);
    c.settle();
    c.advance(1_000);
    for o in owners(&set) {
        // The whole set, not only the added member: the evicting node took the state whole.
        assert_eq!(c.cmd(o, &["SCARD", &set]), ":4\r\n", "node {o}");
    }
    for o in owners(&counter) {
        assert_eq!(c.cmd(o, &["GET", &counter]), "$3\r\n101\r\n", "node {o}");
    }
    for o in owners(&keys[1]) {
        assert_eq!(c.cmd(o, &["GET", &keys[1]]), "$3\r\nnew\r\n", "node {o}");
    }
    assert!(info(&mut c, EVICTING, "deltas_held_for_evicted") > 0);
    assert!(info(&mut c, EVICTING, "eviction_fetches") > 0);
    // Keys nobody wrote stay evicted there.
    assert_eq!(c.cmd(EVICTING, &["EXISTS", &keys[0]]), ":0\r\n");
    assert_eq!(c.cmd(other(&keys[0]), &["EXISTS", &keys[0]]), ":1\r\n");
}

#[test]
fn a_write_on_the_evicting_owner_joins_the_others_state() {
    let (mut c, _, set, counter) = loaded(2);
    evict_on(&mut c, EVICTING, "allkeys-random", 200);
    assert_eq!(c.dbsize(EVICTING), 0);
    // Node 0 writes over keys it evicted (it sees them missing, as Redis after an eviction):
    // its increment adds to the counter's 100, its member joins the set's three.
    assert_eq!(c.cmd(EVICTING, &["INCR", &counter]), ":1\r\n");
    assert_eq!(c.cmd(EVICTING, &["SADD", &set, "x"]), ":1\r\n");
    c.settle();
    c.advance(1_000);
    for o in owners(&counter) {
        assert_eq!(c.cmd(o, &["GET", &counter]), "$3\r\n101\r\n", "node {o}");
    }
    for o in owners(&set) {
        assert_eq!(c.cmd(o, &["SCARD", &set]), ":4\r\n", "node {o}");
    }
}

#[test]
fn without_an_owners_answer_nothing_is_evicted() {
    let (mut c, keys, _, _) = loaded(10);
    // One other owner of every key is cut off: no proof can complete, so the node refuses
    // growing writes rather than evict a key that owner may lack.
    let cut = owners(&keys[0])
        .into_iter()
        .find(|&o| o != EVICTING)
        .unwrap();
    c.cut(cut);
    c.cmd(
        EVICTING,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-random"],
    );
    c.cmd(EVICTING, &["CONFIG", "SET", "maxmemory", "1000000"]);
    c.on(EVICTING, |h, _| h.node.report_memory(1_000_000_000));
    for _ in 0..5 {
        assert_eq!(c.cmd(EVICTING, &["PING"]), "+PONG\r\n");
        c.advance(100);
    }
    let evicted_keys = info(&mut c, EVICTING, "evicted_keys");
    for k in &keys {
        let held_by_cut = owners(k).contains(&cut);
        let present = c.cmd(EVICTING, &["EXISTS", k]) == ":1\r\n";
        assert!(
            present || !held_by_cut,
            "{k} evicted while owner {cut} was cut off"
        );
    }
    assert!(evicted_keys < 13, "evicted {evicted_keys}");
}

/// An owner that evicted keys, compacted its log into a snapshot and restarted on its
/// directory comes back with the same stubs (the snapshot records them), and the other owners
/// keep every key. Left out of the snapshot, the restarted owner held nothing of those keys,
/// which against the frontier it adopted read as their removal: pushes from the other owners
/// then brought back only some of them.
#[test]
fn a_restart_after_a_snapshot_taken_while_keys_were_evicted_keeps_the_stubs() {
    let (mut c, keys, set, counter) = loaded_with(10, true);
    evict_on(&mut c, EVICTING, "allkeys-random", 200);
    assert_eq!(c.dbsize(EVICTING), 0);
    let stubs = info(&mut c, EVICTING, "evicted_stubs");
    assert_eq!(stubs, 12);
    assert!(c.cmd(EVICTING, &["BGREWRITEAOF"]).starts_with('+'));
    c.advance(2_000);
    c.restart(EVICTING, true);
    c.settle();
    c.advance(5_000);
    assert_eq!(info(&mut c, EVICTING, "evicted_stubs"), stubs);
    others_hold(&mut c, &keys);
    // A write elsewhere brings an evicted key back whole, as before the restart.
    let other = owners(&set).into_iter().find(|&o| o != EVICTING).unwrap();
    c.cmd(other, &["SADD", &set, "d"]);
    c.settle();
    c.advance(1_000);
    for o in owners(&set) {
        assert_eq!(c.cmd(o, &["SCARD", &set]), ":4\r\n", "node {o}");
        assert_eq!(
            c.cmd(o, &["GET", &counter]),
            if o == EVICTING {
                "$-1\r\n"
            } else {
                "$3\r\n100\r\n"
            },
            "node {o}"
        );
    }
}

//! maxmemory on a fully replicated cluster (ARCHITECTURE §79, SEMANTICS "maxmemory and
//! eviction"): eviction is a local cache decision. The evicting replica drops the key and keeps
//! a stub of its replicated state; the other replicas keep the key, and a later write from any
//! node brings it back. Memory figures are planted as the server hands them in
//! (`Node::report_memory`), so each test decides when a node is over its limit.

use lattice_testkit::Cluster;

/// `field` from node `i`'s `INFO everything`.
fn info(c: &mut Cluster, i: usize, field: &str) -> u64 {
    let text = c.cmd(i, &["INFO", "everything"]);
    lattice_testkit::info_field(&text, field)
}

/// A three-replica cluster holding `keys` strings of 1,000 bytes (`k0`, `k1`, ...), a set `s`
/// of three members and a counter `n` at 100, settled long enough for the GC frontier to
/// pass every write (only then may a replica evict a key).
fn loaded(keys: usize) -> (Cluster, String) {
    let mut c = Cluster::new(3);
    let value = "v".repeat(1_000);
    for i in 0..keys {
        c.cmd(i % 3, &["SET", &format!("k{i}"), &value]);
    }
    c.cmd(1, &["SADD", "s", "a", "b", "c"]);
    c.cmd(2, &["INCRBY", "n", "100"]);
    c.settle();
    c.advance(3_000);
    assert!(c.converged());
    (c, value)
}

/// Node `i` evicts by `policy` before its next command: its memory figure is planted far
/// over a limit, one command runs (PING, which grows nothing), then the figure drops back
/// under the limit so that later writes run.
fn evict_on(c: &mut Cluster, i: usize, policy: &str) {
    c.cmd(i, &["CONFIG", "SET", "maxmemory-policy", policy]);
    c.cmd(i, &["CONFIG", "SET", "maxmemory", "1000000"]);
    c.on(i, |h, _| h.node.report_memory(1_000_000_000));
    assert_eq!(c.cmd(i, &["PING"]), "+PONG\r\n");
    c.on(i, |h, _| h.node.report_memory(10));
}

/// Heap bytes node `i` accounts for its keys: store entries plus replicated state.
fn key_bytes(c: &mut Cluster, i: usize) -> usize {
    c.on(i, |h, _| {
        let store: usize = h.node.stored_entries().map(|e| e.memory_usage()).sum();
        let repl: usize = h.node.replication_memory().iter().map(|(_, b)| b).sum();
        store + repl
    })
}

#[test]
fn an_evicted_key_stays_on_the_other_replicas() {
    let (mut c, value) = loaded(30);
    evict_on(&mut c, 0, "allkeys-random");
    let evicted = info(&mut c, 0, "evicted_keys");
    assert!(evicted >= 30, "evicted {evicted}");
    assert_eq!(c.dbsize(0), 0, "node 0 still holds keys");
    assert_eq!(info(&mut c, 0, "evicted_stubs"), evicted);
    // Anti-entropy runs many rounds: it neither ships the keys back nor deletes them.
    c.advance(5_000);
    assert_eq!(c.dbsize(0), 0, "anti-entropy brought evicted keys back");
    for i in 1..3 {
        assert_eq!(c.dbsize(i), 32, "node {i}");
        for k in 0..30 {
            let got = c.cmd(i, &["GET", &format!("k{k}")]);
            assert_eq!(got, format!("$1000\r\n{value}\r\n"), "node {i} k{k}");
        }
        assert_eq!(c.cmd(i, &["SCARD", "s"]), ":3\r\n", "node {i}");
        assert_eq!(c.cmd(i, &["GET", "n"]), "$3\r\n100\r\n", "node {i}");
    }
    // A read of an evicted key misses there, and nothing was replicated or unseen.
    assert_eq!(c.cmd(0, &["GET", "k3"]), "$-1\r\n");
    assert_eq!(info(&mut c, 0, "deltas_held_for_evicted"), 0);
    assert!(c.converged(), "{:?}", c.digests());
}

#[test]
fn a_later_write_elsewhere_reaches_the_evicting_replica() {
    let (mut c, _) = loaded(3);
    evict_on(&mut c, 0, "allkeys-lru");
    assert_eq!(c.dbsize(0), 0);
    c.cmd(1, &["SET", "k1", "new"]);
    c.cmd(2, &["SADD", "s", "d"]);
    c.cmd(1, &["INCR", "n"]);
    c.settle();
    c.advance(3_000);
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["GET", "k1"]), "$3\r\nnew\r\n", "node {i}");
        // The whole set, not only the added member: the evicting node took the state whole.
        assert_eq!(c.cmd(i, &["SCARD", "s"]), ":4\r\n", "node {i}");
        assert_eq!(c.cmd(i, &["GET", "n"]), "$3\r\n101\r\n", "node {i}");
    }
    assert!(info(&mut c, 0, "deltas_held_for_evicted") > 0);
    // Keys nobody wrote stay evicted there.
    assert_eq!(c.cmd(0, &["EXISTS", "k0"]), ":0\r\n");
    assert_eq!(c.cmd(1, &["EXISTS", "k0"]), ":1\r\n");
    assert!(c.converged(), "{:?}", c.digests());
}

#[test]
fn a_write_on_the_evicting_replica_joins_as_a_concurrent_one() {
    let (mut c, _) = loaded(3);
    evict_on(&mut c, 0, "allkeys-random");
    assert_eq!(c.dbsize(0), 0);
    // Node 0 writes over keys it evicted (it sees them missing, as Redis after an eviction)
    // while node 1 writes the same keys: increments add up, set adds join, the string's
    // last writer wins.
    assert_eq!(c.cmd(0, &["INCR", "n"]), ":1\r\n");
    c.cmd(1, &["INCRBY", "n", "5"]);
    assert_eq!(c.cmd(0, &["SADD", "s", "x"]), ":1\r\n");
    c.cmd(1, &["SADD", "s", "y"]);
    c.cmd(1, &["SET", "k2", "from-1"]);
    // Node 1's delta reaches node 0 (held there: k2 is evicted) before node 0 writes, so node
    // 0's clock is past node 1's stamp: node 0's write is concurrent and the later one.
    c.advance(5);
    c.cmd(0, &["SET", "k2", "from-0"]);
    c.settle();
    c.advance(5_000);
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["GET", "n"]), "$3\r\n106\r\n", "node {i}");
        assert_eq!(c.cmd(i, &["SCARD", "s"]), ":5\r\n", "node {i}");
        assert_eq!(c.cmd(i, &["GET", "k2"]), "$6\r\nfrom-0\r\n", "node {i}");
    }
    assert!(c.converged(), "{:?}", c.digests());
    // FLUSHALL on the evicting node still removes every key everywhere, evicted or not.
    c.cmd(0, &["FLUSHALL"]);
    c.settle();
    c.advance(3_000);
    for i in 0..3 {
        assert_eq!(c.dbsize(i), 0, "node {i}");
    }
}

#[test]
fn eviction_frees_the_keys_memory() {
    let (mut c, _) = loaded(300);
    let before = key_bytes(&mut c, 0);
    evict_on(&mut c, 0, "allkeys-lru");
    let after = key_bytes(&mut c, 0);
    assert!(
        info(&mut c, 0, "evicted_keys") >= 300,
        "evicted {}",
        info(&mut c, 0, "evicted_keys")
    );
    // 300 values of 1,000 bytes went; a stub costs a table slot and a key copy.
    assert!(
        after + 250_000 < before,
        "key bytes {before} before eviction, {after} after"
    );
    // The other replicas keep theirs.
    assert!(key_bytes(&mut c, 1) > 300_000);
}

#[test]
fn noeviction_still_refuses_on_a_cluster() {
    let (mut c, _) = loaded(3);
    c.cmd(0, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    c.cmd(0, &["CONFIG", "SET", "maxmemory", "1000"]);
    c.on(0, |h, _| h.node.report_memory(1_000_000));
    assert!(c.cmd(0, &["SET", "x", "1"]).starts_with("-OOM"));
    assert_eq!(info(&mut c, 0, "evicted_keys"), 0);
    assert_eq!(c.dbsize(0), 5);
}

#[test]
fn a_key_not_settled_everywhere_is_not_evicted() {
    // Written, but the GC frontier has not passed the write: another replica may not hold
    // it yet, so evicting it here could lose it.
    let mut c = Cluster::new(3);
    c.cut(2);
    c.cmd(0, &["SET", "fresh", "v"]);
    c.settle();
    evict_on(&mut c, 0, "allkeys-random");
    assert_eq!(info(&mut c, 0, "evicted_keys"), 0);
    assert_eq!(c.cmd(0, &["GET", "fresh"]), "$1\r\nv\r\n");
}

/// A node that evicted keys, compacted its log into a snapshot and restarted on its
/// directory comes back with the same stubs (the snapshot records them): nothing is shipped
/// either way, the other replicas keep every key, and a later write brings a key back. Left
/// out of the snapshot, the restarted node held nothing of those keys, which against the
/// frontier it adopts from its peers read as their removal: it never took them back.
#[test]
fn a_restart_after_a_snapshot_taken_while_keys_were_evicted_keeps_the_stubs() {
    let mut c = Cluster::new(3);
    c.members[0].publish_snapshots = true;
    c.persist(0);
    let value = "v".repeat(1_000);
    for i in 0..20 {
        c.cmd(i % 3, &["SET", &format!("k{i}"), &value]);
    }
    c.cmd(1, &["SADD", "s", "a", "b", "c"]);
    c.cmd(2, &["INCRBY", "n", "100"]);
    c.settle();
    c.advance(3_000);
    evict_on(&mut c, 0, "allkeys-random");
    assert_eq!(c.dbsize(0), 0);
    let stubs = info(&mut c, 0, "evicted_stubs");
    assert_eq!(stubs, 22);
    // A key written after the eviction, settled everywhere: the snapshot holds its state.
    c.cmd(1, &["SET", "later", "x"]);
    c.settle();
    c.advance(3_000);
    assert!(c.cmd(0, &["BGREWRITEAOF"]).starts_with('+'));
    c.advance(2_000);
    let digest = c.digest(0);
    c.restart(0, true);
    // Before any peer message is delivered (`send` delivers nothing): the directory alone
    // gave back the one key and the stubs, with their digests.
    c.send(0, &[&["DBSIZE"]]);
    assert_eq!(c.take(0), ":1\r\n");
    assert_eq!(c.digest(0), digest);
    c.settle();
    c.advance(5_000);
    assert_eq!(info(&mut c, 0, "evicted_stubs"), stubs);
    for i in 1..3 {
        for k in 0..20 {
            let got = c.cmd(i, &["GET", &format!("k{k}")]);
            assert_eq!(got, format!("$1000\r\n{value}\r\n"), "node {i} k{k}");
        }
        assert_eq!(c.cmd(i, &["SCARD", "s"]), ":3\r\n", "node {i}");
        assert_eq!(c.cmd(i, &["GET", "n"]), "$3\r\n100\r\n", "node {i}");
    }
    assert!(c.converged(), "{:?}", c.digests());
    // A write elsewhere brings an evicted key back whole, as before the restart.
    c.cmd(1, &["SADD", "s", "d"]);
    c.settle();
    c.advance(3_000);
    assert_eq!(c.cmd(0, &["SCARD", "s"]), ":4\r\n");
    assert!(c.converged(), "{:?}", c.digests());
}

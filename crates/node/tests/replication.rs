//! Replication between real nodes wired back to back (no network faults: the simulator does
//! those). Checks the user-visible rules of docs/SEMANTICS.md end to end through commands.

use lattice_testkit::Cluster;

#[test]
fn concurrent_increments_add_up() {
    let mut c = Cluster::new(3);
    for _ in 0..100 {
        for i in 0..3 {
            assert_eq!(c.cmd(i, &["INCR", "k"]).chars().next(), Some(':'));
        }
    }
    c.settle();
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["GET", "k"]), "$3\r\n300\r\n");
    }
    let d = c.digests();
    assert!(d[0] != 0 && d.iter().all(|x| *x == d[0]), "{d:?}");
}

#[test]
fn partitioned_writes_converge_by_anti_entropy() {
    let mut c = Cluster::new(3);
    c.cut(2);
    c.cmd(0, &["SADD", "s", "a"]);
    c.cmd(2, &["SADD", "s", "c"]);
    c.cmd(2, &["INCRBY", "n", "5"]);
    c.cmd(1, &["INCRBY", "n", "7"]);
    c.cmd(0, &["RPUSH", "l", "x", "y"]);
    c.cmd(2, &["HSET", "h", "f", "1"]);
    c.cmd(1, &["SET", "gone", "v"]);
    c.settle();
    c.cmd(0, &["DEL", "gone"]);
    c.advance(3_000); // deltas to node 3 were lost; retransmits give up or wait
    assert_ne!(c.cmd(2, &["SMEMBERS", "s"]), c.cmd(0, &["SMEMBERS", "s"]));
    c.heal(2);
    c.advance(5_000);
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["SCARD", "s"]), ":2\r\n", "node {i}");
        assert_eq!(c.cmd(i, &["GET", "n"]), "$2\r\n12\r\n", "node {i}");
        assert_eq!(
            c.cmd(i, &["LRANGE", "l", "0", "-1"]),
            "*2\r\n$1\r\nx\r\n$1\r\ny\r\n"
        );
        assert_eq!(c.cmd(i, &["HGET", "h", "f"]), "$1\r\n1\r\n");
        assert_eq!(c.cmd(i, &["EXISTS", "gone"]), ":0\r\n");
    }
    let d = c.digests();
    assert!(d.iter().all(|x| *x == d[0]), "{d:?}");
}

#[test]
fn lost_deltas_are_repaired_without_a_link_failure() {
    let mut c = Cluster::new(3);
    c.lossy(true);
    c.cmd(0, &["INCRBY", "n", "4"]);
    c.cmd(1, &["SADD", "s", "b"]);
    c.cmd(2, &["LPUSH", "l", "z"]);
    c.lossy(false);
    c.advance(4_000);
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["GET", "n"]), "$1\r\n4\r\n", "node {i}");
        assert_eq!(c.cmd(i, &["SMEMBERS", "s"]), "*1\r\n$1\r\nb\r\n");
        assert_eq!(c.cmd(i, &["LLEN", "l"]), ":1\r\n");
    }
}

#[test]
fn srem_leaves_a_concurrent_add_in_place() {
    let mut c = Cluster::new(2);
    c.cmd(0, &["SADD", "s", "x"]);
    c.settle();
    c.cut(1);
    c.cmd(0, &["SREM", "s", "x"]);
    c.cmd(1, &["SADD", "s", "x"]); // already present there: no new add, so SREM wins
    c.cmd(1, &["SADD", "s", "y"]);
    c.heal(1);
    c.advance(3_000);
    for i in 0..2 {
        assert_eq!(c.cmd(i, &["SMEMBERS", "s"]), "*1\r\n$1\r\ny\r\n");
    }
    // A fresh concurrent add of x survives a remove that did not see it.
    c.cut(1);
    c.cmd(0, &["SADD", "s", "x"]);
    c.settle();
    c.cmd(1, &["SADD", "s", "x"]);
    c.cmd(0, &["SREM", "s", "x"]);
    c.heal(1);
    c.advance(3_000);
    for i in 0..2 {
        assert_eq!(c.cmd(i, &["SISMEMBER", "s", "x"]), ":1\r\n", "node {i}");
    }
}

#[test]
fn expiry_replicates_and_keys_do_not_return() {
    let mut c = Cluster::new(3);
    c.cmd(0, &["SET", "k", "v", "PX", "500"]);
    c.settle();
    assert_eq!(c.cmd(1, &["GET", "k"]), "$1\r\nv\r\n");
    let ttl = c.cmd(2, &["PTTL", "k"]);
    assert!(ttl.starts_with(':') && ttl != ":-1\r\n", "{ttl}");
    c.advance(1_000);
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["EXISTS", "k"]), ":0\r\n");
    }
    c.advance(5_000);
    let d = c.digests();
    assert!(d.iter().all(|x| *x == d[0]), "{d:?}");
}

#[test]
fn publish_reaches_subscribers_on_other_nodes() {
    let mut c = Cluster::new(2);
    c.connect(1, 2);
    c.cmd_on(1, 2, &["SUBSCRIBE", "ch"]);
    c.cmd(0, &["PUBLISH", "ch", "hello"]);
    c.settle();
    let got = c.members[1].take(2);
    assert!(got.contains("hello"), "{got:?}");
}

#[test]
fn anti_entropy_ships_only_the_difference() {
    anti_entropy_difference(20_000);
}

/// The figure for the replication issue: `cargo test --release -p lattice-node --test
/// replication -- --ignored --nocapture anti_entropy_100k`.
#[test]
#[ignore]
fn anti_entropy_100k() {
    anti_entropy_difference(100_000);
}

fn anti_entropy_difference(keys: usize) {
    let mut c = Cluster::new(2);
    c.check_every = 1_000;
    c.cut(1);
    for i in 0..keys {
        let k = format!("key:{i}");
        c.cmd(0, &["SET", &k, "some-value-of-moderate-size"]);
    }
    // The full transfer: node 1 starts empty and anti-entropy ships it everything.
    c.heal(1);
    let before = c.delivered_bytes();
    let mut waited_ms = 0;
    while c.digests()[0] != c.digests()[1] {
        assert!(waited_ms < 600_000, "no convergence after {waited_ms} ms");
        c.advance(100);
        waited_ms += 100;
    }
    let full = c.delivered_bytes() - before;
    assert_eq!(c.cmd(1, &["DBSIZE"]), format!(":{keys}\r\n"));
    c.cut(1);
    for i in 0..10 {
        c.cmd(
            0,
            &["SET", &format!("key:{}", i * (keys / 10 - 3)), "changed"],
        );
    }
    c.heal(1);
    let before = c.delivered_bytes();
    c.advance(3_000);
    let repair = c.delivered_bytes() - before;
    let d = c.digests();
    assert_eq!(d[0], d[1]);
    let probe = format!("key:{}", keys / 10 - 3);
    assert_eq!(c.cmd(1, &["GET", &probe]), "$7\r\nchanged\r\n");
    eprintln!(
        "keys={keys} full transfer={full} bytes, repair of 10 differing keys={repair} bytes ({:.3}%)",
        repair as f64 * 100.0 / full as f64
    );
    assert!(repair * 100 < full, "repair {repair} vs full {full}");
}

#[test]
fn deleted_keys_are_garbage_collected_once_every_replica_has_seen_them() {
    let mut c = Cluster::new(3);
    for i in 0..50 {
        c.cmd(i % 3, &["SADD", &format!("s{i}"), "a", "b"]);
        c.cmd(i % 3, &["RPUSH", &format!("l{i}"), "a", "b", "c"]);
    }
    c.settle();
    for i in 0..50 {
        c.cmd((i + 1) % 3, &["DEL", &format!("s{i}"), &format!("l{i}")]);
    }
    c.settle();
    let info = c.cmd(0, &["INFO", "replication"]);
    assert!(info.contains("tombstones_pending_gc:100"), "{info}");
    c.advance(5_000);
    for i in 0..3 {
        let info = c.cmd(i, &["INFO", "replication"]);
        assert!(
            info.contains("tombstones_pending_gc:0\r"),
            "node {i}: {info}"
        );
        assert!(info.contains("replicated_keys:0\r"), "node {i}: {info}");
    }
    // A stale delta arriving after collection does not resurrect anything: re-deliver an old
    // state by partitioning a node that missed nothing, then writing elsewhere.
    c.cmd(0, &["SADD", "s1", "new"]);
    c.settle();
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["SMEMBERS", "s1"]), "*1\r\n$3\r\nnew\r\n");
    }
}

#[test]
fn a_local_stream_is_not_overwritten_by_a_peer() {
    let mut c = Cluster::new(2);
    c.cmd(1, &["XADD", "k", "1-1", "f", "v"]);
    c.cmd(0, &["SET", "k", "v"]);
    c.settle();
    c.advance(2_000);
    assert_eq!(c.cmd(1, &["TYPE", "k"]), "+stream\r\n");
    assert_eq!(c.cmd(1, &["XLEN", "k"]), ":1\r\n");
    assert_eq!(c.cmd(0, &["GET", "k"]), "$1\r\nv\r\n");
}

/// Node 1, cut off, sets `k` to `w`; 20 ms later node 0 (which holds `k` = `v`) runs `later`;
/// then the partition heals. Returns the cluster once it has settled.
fn after_a_concurrent_set_and(later: &[&str], reply: &str) -> Cluster {
    let mut c = Cluster::new(3);
    c.cmd(0, &["SET", "k", "v"]);
    c.settle();
    c.cut(1);
    c.cmd(1, &["SET", "k", "w"]);
    c.advance(20);
    assert_eq!(c.cmd(0, later), reply);
    c.advance(20);
    c.heal(1);
    c.advance(3_000);
    c
}

/// A `SET` of the bytes a key already holds is still a write: it must win over an older
/// concurrent `SET` made elsewhere, as its hybrid timestamp is the highest.
#[test]
fn a_later_set_of_the_same_value_wins_over_an_older_concurrent_write() {
    let mut c = after_a_concurrent_set_and(&["SET", "k", "v"], "+OK\r\n");
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["GET", "k"]), "$1\r\nv\r\n", "node {i}");
    }
}

/// `EXPIRE` changes a deadline, not the value: it does not re-stamp the string, so a
/// concurrent `SET` elsewhere still wins the value.
#[test]
fn expire_does_not_make_an_old_value_win() {
    let mut c = after_a_concurrent_set_and(&["EXPIRE", "k", "1000"], ":1\r\n");
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["GET", "k"]), "$1\r\nw\r\n", "node {i}");
    }
}

/// HLLs, bitfields and geo sets replicate through the existing rules (docs/SEMANTICS.md):
/// strings (last writer wins, bytes identical everywhere) and sorted sets (add-wins members).
#[test]
fn hll_bitfield_and_geo_values_replicate_as_strings_and_sorted_sets() {
    let mut c = Cluster::new(3);
    c.cmd(0, &["PFADD", "h", "a", "b", "c"]);
    c.cmd(
        1,
        &[
            "BITFIELD", "bf", "SET", "u8", "#1", "66", "INCRBY", "u4", "0", "5",
        ],
    );
    c.settle();
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["PFCOUNT", "h"]), ":3\r\n", "node {i}");
        assert_eq!(c.cmd(i, &["GET", "bf"]), "$2\r\nPB\r\n", "node {i}");
    }
    // PFCOUNT stores the cardinality in the string: a write that replicates too.
    c.settle();
    let hll = c.cmd(0, &["GET", "h"]);
    assert!(hll.contains("HYLL\u{1}\0\0\0\u{3}"), "{hll:?}");
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["GET", "h"]), hll, "node {i}");
    }
    // Sequential PFADDs on different nodes (each seen before the next) accumulate.
    c.cmd(1, &["PFADD", "h", "d"]);
    c.settle();
    c.cmd(2, &["PFADD", "h", "e"]);
    c.settle();
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["PFCOUNT", "h"]), ":5\r\n", "node {i}");
    }
    // Concurrent GEOADDs of different members: the union everywhere, same scores.
    c.cut(2);
    c.cmd(0, &["GEOADD", "g", "13.361389", "38.115556", "Palermo"]);
    c.cmd(2, &["GEOADD", "g", "15.087269", "37.502669", "Catania"]);
    c.heal(2);
    c.advance(5_000);
    for i in 0..3 {
        assert_eq!(
            c.cmd(i, &["GEODIST", "g", "Palermo", "Catania", "km"]),
            "$8\r\n166.2742\r\n",
            "node {i}"
        );
    }
    let d = c.digests();
    assert!(d.iter().all(|x| *x == d[0]), "{d:?}");
}

/// The issue's scenario scaled down to run in a debug build: a fifth of the keys, a fifth of
/// the missed writes (the ratio depends on both: the catch-up's bytes grow with the writes
/// missed, the full transfer's with the keys).
#[test]
fn a_replica_that_missed_writes_catches_up_with_under_1pct_of_a_full_transfer() {
    catch_up_after_missed_writes(20_000, 20);
}

/// The figure for issue 17 (must-show 5): `cargo test --release -p lattice-node --test
/// replication -- --ignored --nocapture catch_up_100k`.
#[test]
#[ignore]
fn catch_up_100k() {
    catch_up_after_missed_writes(100_000, 100);
}

/// Three replicas; the third is cut off from the start, `keys` keys are written on the first,
/// then the third comes back empty (a full transfer, from both others); it is cut off again,
/// misses `writes` writes, and comes back (what a restart on its own data looks like to
/// anti-entropy). The bytes on the third replica's links are compared, and every anti-entropy
/// step stays within its slice.
fn catch_up_after_missed_writes(keys: usize, writes: usize) {
    let mut c = Cluster::new(3);
    c.check_every = 1_000;
    c.cut(2);
    for i in 0..keys {
        c.cmd(
            0,
            &["SET", &format!("key:{i}"), "some-value-of-moderate-size"],
        );
    }
    c.settle();
    let before = c.bytes_of(2);
    c.heal(2);
    let full_ms = c.converge(600_000);
    c.settle();
    let full = c.bytes_of(2) - before;
    assert_eq!(c.cmd(2, &["DBSIZE"]), format!(":{keys}\r\n"));

    c.cut(2);
    for i in 0..writes {
        let k = format!("key:{}", (i * 7919) % keys);
        c.cmd(0, &["SET", &k, &format!("changed {i}")]);
    }
    c.settle();
    let before = c.bytes_of(2);
    c.heal(2);
    let catch_up_ms = c.converge(60_000);
    c.settle();
    let catch_up = c.bytes_of(2) - before;
    let last = writes - 1;
    let probe = format!("key:{}", (last * 7919) % keys);
    let value = format!("changed {last}");
    assert_eq!(
        c.cmd(2, &["GET", &probe]),
        format!("${}\r\n{value}\r\n", value.len())
    );
    for i in 0..3 {
        // No step of either transfer sent or merged more than a slice.
        let sent = c.info_field(i, "transfer_slice_max_keys");
        let merged = c.info_field(i, "transfer_max_states_merged");
        assert!(sent <= 512 && merged <= 512, "node {i}: {sent} {merged}");
        assert!(c.info_field(i, "transfer_slice_max_bytes") <= (64 << 10) + 1_024);
    }
    eprintln!(
        "keys={keys}: full transfer to an empty replica {full} bytes in {full_ms} ms; catch-up \
         after {writes} missed writes {catch_up} bytes in {catch_up_ms} ms ({:.3}% of full)",
        catch_up as f64 * 100.0 / full as f64
    );
    assert!(
        catch_up * 100 < full,
        "catch-up {catch_up} bytes vs full transfer {full} bytes"
    );
}

/// Issue 17, must-show 5, at node level: three replicas with `keys` keys; the third persists
/// (its records kept as its data directory). It restarts once on an empty directory (the full
/// transfer), then stops, misses `writes` writes made on the first, and restarts on its own
/// records: it recovers its replicated states and anti-entropy ships it the difference.
/// With `snapshots`, the replica's snapshots (compactions, which start whenever the log has
/// grown as large as the last snapshot and past a minimum size) are published, so its
/// directory is a snapshot taken while states were arriving plus the records after it, as
/// on a real server.
fn restart_on_own_data(keys: usize, writes: usize, check: bool, snapshots: bool) -> (u64, u64) {
    let mut c = Cluster::with(3, |_, config| {
        if snapshots {
            // The default minimum (64 MB of log) is far above what these keyspaces log: a
            // small one, and slices of a record of about 10 KB each, make compactions start
            // and end while the transfer is still arriving.
            config.auto_aof_rewrite_min_size = 16 << 10;
            config.repl_slice_keys = 128;
        }
    });
    if snapshots {
        // A hop per step: the transfer's slices arrive over many ticks, each logged as it
        // comes (with none, the whole transfer lands between two ticks, in one record).
        c.latency_ms = c.step_ms;
    }
    if !check {
        c.check_every = 1_000;
    }
    c.members[2].publish_snapshots = snapshots;
    c.persist(2);
    for i in 0..keys {
        c.cmd(
            0,
            &["SET", &format!("key:{i}"), "some-value-of-moderate-size"],
        );
    }
    c.converge(600_000);
    c.settle();

    let before = c.bytes_of(2);
    c.restart(2, false);
    c.converge(600_000);
    c.settle();
    let full = c.bytes_of(2) - before;
    assert_eq!(c.cmd(2, &["DBSIZE"]), format!(":{keys}\r\n"));
    c.advance(2_000); // its merges are logged, GC and reports settle
    if snapshots {
        let info = c.cmd(2, &["INFO", "persistence"]);
        let published = lattice_testkit::info_field(&info, "rdb_saves");
        assert!(
            published > 0,
            "no snapshot was published during the transfer"
        );
    }

    // It stops; the writes it misses land on the first replica and reach the second.
    c.cut(2);
    let stopped_with = c.digest(2);
    for i in 0..writes {
        let k = if i.is_multiple_of(2) {
            format!("missed:{i}")
        } else {
            format!("key:{}", (i * 7919) % keys)
        };
        c.cmd(0, &["SET", &k, &format!("written while down {i}")]);
    }
    c.settle();
    c.heal(2);
    let before = c.bytes_of(2);
    c.restart(2, true);
    // Before any peer message is delivered (`send` delivers nothing): the directory alone
    // gave back every state.
    assert_eq!(
        c.digest(2),
        stopped_with,
        "the restarted replica recovered the states it stopped with"
    );
    c.send(2, &[&["DBSIZE"]]);
    assert_eq!(c.take(2), format!(":{keys}\r\n"));
    // Each logged state counts once per record holding it: a snapshot and the records after
    // it may both hold a key that changed while the snapshot was being written.
    let loaded = c.info_field(2, "states_loaded");
    if snapshots {
        assert!(loaded >= keys as u64, "{loaded} states loaded");
    } else {
        assert_eq!(
            loaded, keys as u64,
            "the restarted replica recovered its states"
        );
    }
    c.converge(60_000);
    c.settle();
    let catch_up = c.bytes_of(2) - before;
    assert_eq!(
        c.cmd(2, &["DBSIZE"]),
        format!(":{}\r\n", keys + writes.div_ceil(2))
    );
    let last = writes - 1;
    let k = if last.is_multiple_of(2) {
        format!("missed:{last}")
    } else {
        format!("key:{}", (last * 7919) % keys)
    };
    let v = format!("written while down {last}");
    assert_eq!(c.cmd(2, &["GET", &k]), format!("${}\r\n{v}\r\n", v.len()));
    // Its own writes after the restart are stamped anew and win over its earlier ones.
    c.cmd(2, &["SET", "key:0", "after the restart"]);
    c.settle();
    assert_eq!(c.cmd(0, &["GET", "key:0"]), "$17\r\nafter the restart\r\n");
    eprintln!(
        "keys={keys}: restart on an empty directory received {full} bytes; restart on its own \
         data after {writes} missed writes {catch_up} bytes ({:.3}% of full)",
        catch_up as f64 * 100.0 / full as f64
    );
    (full, catch_up)
}

#[test]
fn a_restarted_replica_recovers_its_states_and_receives_only_what_it_missed() {
    let (full, catch_up) = restart_on_own_data(20_000, 20, false, false);
    assert!(catch_up * 100 < full, "catch-up {catch_up} vs full {full}");
}

/// The same on a directory of snapshots and records (compactions ran while the full transfer
/// arrived), every invariant checked after every step.
#[test]
fn a_replica_restarts_on_a_snapshot_taken_during_its_transfer() {
    restart_on_own_data(1_500, 30, true, true);
}

/// Every invariant checked after every step, on a smaller keyspace.
#[test]
fn restart_on_own_data_keeps_every_invariant() {
    restart_on_own_data(1_500, 30, true, false);
}

/// The figure: `cargo test --release -p lattice-node --test replication -- --ignored
/// --nocapture restart_100k`.
#[test]
#[ignore]
fn restart_100k() {
    let (full, catch_up) = restart_on_own_data(100_000, 100, false, false);
    assert!(catch_up * 100 < full, "catch-up {catch_up} vs full {full}");
    let (full, catch_up) = restart_on_own_data(100_000, 100, false, true);
    assert!(catch_up * 100 < full, "catch-up {catch_up} vs full {full}");
}

/// The bounded-transfer check fails when a step goes over its budget: here a replica that
/// allows 4 keys per slice receives a transfer from one that sends the default 2,048.
#[test]
#[should_panic(expected = "exceeds the bound of 4")]
fn a_slice_over_the_receivers_bound_fails_its_invariants() {
    // Never linked before the writes, so no backlog of deltas is kept for the peer (§77) and
    // what it lacks goes by an anti-entropy transfer.
    let mut c = Cluster::unlinked(2, |i, config| {
        if i == 1 {
            config.repl_slice_keys = 4;
        }
    });
    for i in 0..100 {
        c.cmd(0, &["SET", &format!("key:{i}"), "v"]);
    }
    c.connect_all();
    c.advance(1_000);
}

/// The same transfer within the bound passes, in slices of 4 keys.
#[test]
fn small_slices_still_transfer_everything() {
    let mut c = Cluster::unlinked(2, |_, config| config.repl_slice_keys = 4);
    for i in 0..100 {
        c.cmd(0, &["SET", &format!("key:{i}"), "v"]);
    }
    c.connect_all();
    c.converge(10_000);
    assert_eq!(c.cmd(1, &["DBSIZE"]), ":100\r\n");
    let max_keys = c.info_field(0, "transfer_slice_max_keys");
    assert!((1..=4).contains(&max_keys), "slices of {max_keys} keys");
}

/// Function libraries replicate as a whole set: a load on one replica reaches the others, a
/// later delete wins over the load everywhere (per-library last writer wins, deletion as a
/// tombstone), a replica cut off during both catches up through anti-entropy, and FCALL's
/// effects replicate as writes (the code is not run again on the peers).
#[test]
fn function_libraries_replicate_as_a_set() {
    let lib = "#!lua name=lib\nredis.register_function('put', function(keys, args) return redis.call('set', keys[1], args[1]) end)";
    let mut c = Cluster::new(3);
    assert_eq!(c.cmd(0, &["FUNCTION", "LOAD", lib]), "$3\r\nlib\r\n");
    c.settle();
    for i in 0..3 {
        assert!(
            c.cmd(i, &["FUNCTION", "LIST"]).contains("$3\r\nput\r\n"),
            "node {i}"
        );
    }
    assert_eq!(c.cmd(1, &["FCALL", "put", "1", "k", "v"]), "+OK\r\n");
    c.settle();
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["GET", "k"]), "$1\r\nv\r\n");
    }
    // Node 2 misses a reload and a second library while cut off...
    c.cut(2);
    let lib2 = "#!lua name=lib2\nredis.register_function('two', function() return 2 end)";
    c.cmd(0, &["FUNCTION", "LOAD", lib2]);
    c.advance(20);
    assert_eq!(c.cmd(1, &["FUNCTION", "DELETE", "lib"]), "+OK\r\n");
    c.advance(20);
    assert_eq!(
        c.cmd(2, &["FCALL", "two", "0"]),
        "-ERR Function not found\r\n"
    );
    // ... and catches up once the link is back (anti-entropy compares the sets' digests).
    c.heal(2);
    c.advance(3_000);
    let lists: Vec<String> = (0..3).map(|i| c.cmd(i, &["FUNCTION", "LIST"])).collect();
    assert!(lists.iter().all(|l| *l == lists[0]), "{lists:?}");
    assert_eq!(c.cmd(2, &["FCALL", "two", "0"]), ":2\r\n");
    assert_eq!(
        c.cmd(2, &["FCALL", "put", "1", "k", "w"]),
        "-ERR Function not found\r\n"
    );
    // Concurrent loads of the same library name: the later stamp wins on every node.
    let v = |n: u32| {
        format!("#!lua name=same\nredis.register_function('which', function() return {n} end)")
    };
    c.cmd(0, &["FUNCTION", "LOAD", &v(0)]);
    c.cmd(1, &["FUNCTION", "LOAD", &v(1)]);
    c.settle();
    c.advance(3_000);
    let got: Vec<String> = (0..3).map(|i| c.cmd(i, &["FCALL", "which", "0"])).collect();
    assert!(got.iter().all(|g| *g == got[0]), "{got:?}");
    // FLUSH removes everything everywhere.
    c.cmd(2, &["FUNCTION", "FLUSH"]);
    c.settle();
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["FUNCTION", "LIST"]), "*0\r\n");
    }
}

#[test]
fn spublish_reaches_shard_subscribers_on_other_nodes_only() {
    let mut c = Cluster::new(2);
    c.connect(1, 2);
    c.cmd_on(1, 2, &["SSUBSCRIBE", "ch"]);
    c.cmd_on(1, 2, &["SUBSCRIBE", "ch"]);
    assert_eq!(c.cmd(0, &["SPUBLISH", "ch", "hello"]), ":0\r\n");
    c.settle();
    let got = c.members[1].take(2);
    assert_eq!(got, "*3\r\n$8\r\nsmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n");
}

#[test]
fn role_is_master_everywhere_and_wait_counts_peers_that_have_the_writes() {
    let mut c = Cluster::new(3);
    c.settle();
    c.cmd(0, &["SET", "a", "1"]);
    c.cmd(0, &["SET", "b", "2"]);
    assert_eq!(c.cmd(0, &["ROLE"]), "*3\r\n$6\r\nmaster\r\n:2\r\n*0\r\n");
    assert_eq!(c.cmd(1, &["ROLE"]), "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n");
    // Nothing has been acknowledged yet: WAIT 0 answers at once, WAIT 2 parks.
    assert_eq!(c.cmd(0, &["WAIT", "0", "0"]), ":0\r\n");
    assert_eq!(c.cmd(0, &["WAIT", "2", "0"]), "");
    c.settle();
    assert_eq!(c.take(0), ":2\r\n");
    // With one peer cut off, WAIT 2 times out with the one that has the write.
    c.cut(2);
    c.cmd(0, &["SET", "c", "3"]);
    assert_eq!(c.cmd(0, &["WAIT", "2", "100"]), "");
    c.advance(50);
    assert!(!c.members[0].has_output(1));
    c.advance(100);
    assert_eq!(c.take(0), ":1\r\n");
    // Inside MULTI it answers at once.
    c.cmd(0, &["MULTI"]);
    c.cmd(0, &["WAIT", "2", "0"]);
    assert_eq!(c.cmd(0, &["EXEC"]), "*1\r\n:1\r\n");
}

/// A replica restarted on an empty directory receives a transfer that outlasts several GC
/// rounds (small slices, a hop per 10 ms step): no key may be lost, on it or on the replicas
/// that ship it. Before GC waited for the restarted replica to catch up, its frontier (raised
/// from the peers' frontiers its first states carried) covered keys it had not received yet:
/// it dropped them on arrival and shipped the removals back, and 3,000 keys became about
/// 1,600 on every replica.
#[test]
fn a_slow_transfer_to_an_empty_replica_loses_nothing() {
    let mut c = Cluster::with(3, |_, config| config.repl_slice_keys = 8);
    c.check_every = 1_000;
    let keys = 3_000;
    for i in 0..keys {
        c.cmd(0, &["SET", &format!("key:{i}"), "v"]);
    }
    c.settle();
    c.advance(3_000); // reports and GC rounds: every frontier covers the writes
                      // From here a message takes a step on the wire: each hop of the transfer costs 10 ms.
    c.latency_ms = c.step_ms;
    c.restart(2, false);
    c.converge(600_000);
    c.settle();
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["DBSIZE"]), format!(":{keys}\r\n"), "node {i}");
    }
    // Once it has caught up, GC runs on it again: deleted keys are collected everywhere.
    for i in 0..10 {
        c.cmd(0, &["DEL", &format!("key:{i}")]);
    }
    c.advance(10_000);
    for i in 0..3 {
        assert_eq!(
            c.cmd(i, &["DBSIZE"]),
            format!(":{}\r\n", keys - 10),
            "node {i}"
        );
        assert_eq!(c.info_field(i, "tombstones_pending_gc"), 0, "node {i}");
    }
}

/// `n` distinct elements named `{tag}:0` .. for one PFADD.
fn pfadd_args(key: &str, tag: &str, n: usize) -> Vec<String> {
    let mut a = vec!["PFADD".to_string(), key.to_string()];
    a.extend((0..n).map(|i| format!("{tag}:{i}")));
    a
}

fn run(c: &mut Cluster, i: usize, args: &[String]) -> String {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    c.cmd(i, &refs)
}

/// Issue 20, must-show 4: PFADDs of different elements on 3 nodes, some of them concurrent
/// during a cut (the HLL created on both sides of it, then raised on both), give every node
/// the PFCOUNT of one node that saw every add. Sparse and dense HLLs are both met: the
/// elements of one tag fit a sparse HLL, all of them do not.
#[test]
fn concurrent_pfadds_count_every_element_on_every_node() {
    let mut c = Cluster::new(3);
    let mut single = lattice_testkit::Harness::with_clients(1);
    let mut both = |c: &mut Cluster, i: usize, key: &str, tag: &str, n: usize| {
        let args = pfadd_args(key, tag, n);
        run(c, i, &args);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        single.cmd(1, &refs);
    };
    // Each (node, tag, elements) adds: with node `cut` cut off, then healed; or with none
    // cut off, each add seen everywhere before the next.
    let mut round = |c: &mut Cluster, cut: Option<usize>, adds: [(usize, &str, usize); 3]| {
        if let Some(i) = cut {
            c.cut(i);
        }
        for (i, tag, n) in adds {
            both(c, i, "h", tag, n);
            c.settle();
        }
        if let Some(i) = cut {
            c.heal(i);
            c.advance(5_000);
        }
    };
    // Created concurrently: node 2 cut off before the key exists.
    round(&mut c, Some(2), [(0, "a", 40), (2, "c", 40), (1, "b", 40)]);
    // Raised on every node, each seeing the others.
    round(&mut c, None, [(0, "d", 300), (1, "e", 300), (2, "f", 300)]);
    // Raised concurrently again, dense by now, with node 1 cut off.
    round(
        &mut c,
        Some(1),
        [(0, "g", 3_000), (1, "i", 3_000), (2, "j", 50)],
    );
    let expected = single.cmd(1, &["PFCOUNT", "h"]);
    assert!(expected.starts_with(':'), "{expected:?}");
    let n: u64 = expected[1..expected.len() - 2].parse().unwrap();
    assert!(
        (6_900..7_250).contains(&n),
        "the single node's estimate {n} of 7,070"
    );
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["PFCOUNT", "h"]), expected, "node {i}");
        assert_eq!(
            c.cmd(i, &["PFDEBUG", "ENCODING", "h"]),
            "+dense\r\n",
            "node {i}"
        );
    }
    // The registers themselves agree with the single node's.
    let regs = single.cmd(1, &["PFDEBUG", "GETREG", "h"]);
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["PFDEBUG", "GETREG", "h"]), regs, "node {i}");
    }
    c.converge(5_000);
}

/// The string rules hold for an HLL's key (docs/SEMANTICS.md): a SET concurrent with a
/// PFADD wins when it is the later assignment (the PFADD grows the HLL assigned before it), a
/// DEL concurrent with a PFADD leaves what the PFADD added (add wins), and a cached count
/// written by PFCOUNT is no write.
#[test]
fn an_hll_key_keeps_the_string_rules_for_set_and_del() {
    let mut c = Cluster::new(3);
    run(&mut c, 0, &pfadd_args("h", "a", 10));
    c.settle();
    c.cut(2);
    run(&mut c, 2, &pfadd_args("h", "b", 10));
    c.advance(10);
    c.cmd(0, &["SET", "h", "plain"]);
    c.heal(2);
    c.advance(5_000);
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["GET", "h"]), "$5\r\nplain\r\n", "node {i}");
    }
    // DEL concurrent with a PFADD: what the PFADD added survives (add wins), what the DEL saw
    // is gone (the PFADD shipped the registers that rose, not the HLL it raised them in).
    c.cmd(0, &["DEL", "h"]);
    run(&mut c, 0, &pfadd_args("h", "c", 10));
    c.settle();
    c.cut(2);
    c.cmd(0, &["DEL", "h"]);
    run(&mut c, 2, &pfadd_args("h", "d", 10));
    c.heal(2);
    c.advance(5_000);
    for i in 0..3 {
        assert_eq!(c.cmd(i, &["PFCOUNT", "h"]), ":10\r\n", "node {i}");
    }
    c.converge(5_000);
    // PFCOUNT's cached count changes the bytes, not the registers: nothing replicates.
    let before = c.delivered_bytes();
    c.cmd(1, &["PFADD", "h", "e"]);
    c.settle();
    let one_add = c.delivered_bytes() - before;
    let before = c.delivered_bytes();
    c.settle();
    let idle = c.delivered_bytes() - before;
    let before = c.delivered_bytes();
    c.cmd(1, &["PFCOUNT", "h"]);
    c.cmd(1, &["PFDEBUG", "TODENSE", "h"]);
    c.settle();
    let rewrites = c.delivered_bytes() - before;
    assert_eq!(rewrites, idle, "a PFADD shipped {one_add} bytes");
    c.converge(5_000);
}

/// Writes made while a link was down, or that were in flight when it went down, reach the peer
/// as soon as the link is back: the deltas are kept for it (bounded) and resent at once,
/// instead of waiting for an anti-entropy round, which while another peer repairs this node
/// may wait for seconds (what kept a partition of real processes from healing within 1.5 s).
#[test]
#[ignore = "the backlog kept for a down peer is off (KEEP_BACKLOG_WHILE_DOWN, ARCHITECTURE §77)"]
fn writes_made_during_a_cut_arrive_right_after_the_heal() {
    let mut c = Cluster::new(3);
    c.settle();
    c.cut(0);
    for n in 0..20 {
        c.cmd(0, &["SET", &format!("cut:{n}"), "v"]);
        c.cmd(1, &["SET", &format!("other:{n}"), "v"]);
        c.advance(100);
    }
    // Links come back one at a time, as real ones do (each redials on its own timer).
    c.set_link(0, 1, lattice_testkit::Link::Up);
    c.advance(50);
    c.set_link(0, 2, lattice_testkit::Link::Up);
    let mut waited_ms = 0;
    loop {
        // Steady writes on the majority side, as clients keep writing through a heal.
        c.cmd(1, &["INCR", "steady"]);
        c.cmd(2, &["INCR", "steady"]);
        let sizes: Vec<usize> = (0..3).map(|i| c.dbsize(i)).collect();
        if sizes.iter().all(|&s| s == 41) {
            break;
        }
        assert!(
            waited_ms < 300,
            "{sizes:?} keys {waited_ms} ms after the heal"
        );
        c.advance(10);
        waited_ms += 10;
    }
}

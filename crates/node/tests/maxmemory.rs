//! maxmemory through the node's real entry points: eviction by policy, -OOM, and what a
//! clustered node does instead. The memory figure is planted the way the server hands it in
//! (`Node::report_memory`), so each test knows exactly how far over the limit the node is.

use lattice_node::Config;
use lattice_testkit::Harness;

const USED: u64 = 10_000_000;

fn info_field(h: &mut Harness, field: &str) -> u64 {
    let info = h.cmd(2, &["INFO", "everything"]);
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO"));
    line.trim().parse().unwrap()
}

/// A node with `keys` keys (every `volatile_every`-th with a deadline), `policy`, and a
/// memory figure `over` bytes above `maxmemory`.
fn node(keys: usize, volatile_every: usize, policy: &str, over: u64) -> Harness {
    let mut h = Harness::with_clients(2);
    for i in 0..keys {
        let key = format!("k{i}");
        if volatile_every > 0 && i % volatile_every == 0 {
            h.cmd(1, &["SET", &key, "value", "EX", "1000"]);
        } else {
            h.cmd(1, &["SET", &key, "value"]);
        }
    }
    h.cmd(1, &["CONFIG", "SET", "maxmemory-policy", policy]);
    h.cmd(
        1,
        &["CONFIG", "SET", "maxmemory", &(USED - over).to_string()],
    );
    h.node.report_memory(USED);
    h
}

#[test]
fn noeviction_refuses_writes_and_serves_reads() {
    let mut h = node(10, 0, "noeviction", 1);
    assert_eq!(
        h.cmd(1, &["SET", "new", "v"]),
        "-OOM command not allowed when used memory > 'maxmemory'.\r\n"
    );
    assert_eq!(h.cmd(1, &["GET", "k1"]), "$5\r\nvalue\r\n");
    // DEL is not denyoom: it runs and frees memory.
    assert_eq!(h.cmd(1, &["DEL", "k1"]), ":1\r\n");
    assert_eq!(info_field(&mut h, "evicted_keys"), 0);
    // Under the limit again (the driver's next figure), writes run.
    h.node.report_memory(USED - 10);
    assert_eq!(h.cmd(1, &["SET", "new", "v"]), "+OK\r\n");
}

#[test]
fn allkeys_random_evicts_until_under_the_limit() {
    let mut h = node(200, 0, "allkeys-random", 2_000);
    assert_eq!(h.cmd(1, &["SET", "new", "v"]), "+OK\r\n");
    let evicted = info_field(&mut h, "evicted_keys");
    assert!(evicted > 0, "nothing evicted");
    // Keys are evicted only until the figure is under the limit: a few, not all.
    assert!(evicted < 100, "evicted {evicted}");
}

#[test]
fn volatile_policies_evict_only_keys_with_a_deadline() {
    for policy in ["volatile-random", "volatile-lru", "volatile-ttl"] {
        let mut h = node(200, 2, policy, 3_000);
        assert_eq!(h.cmd(1, &["SET", "new", "v"]), "+OK\r\n", "{policy}");
        assert!(info_field(&mut h, "evicted_keys") > 0, "{policy}");
        for i in (1..200).step_by(2) {
            let key = format!("k{i}");
            assert_eq!(
                h.cmd(1, &["EXISTS", &key]),
                ":1\r\n",
                "{policy}: {key} evicted"
            );
        }
    }
}

#[test]
fn allkeys_lru_keeps_recently_used_keys() {
    let mut h = node(100, 0, "allkeys-lru", 0);
    h.cmd(1, &["CONFIG", "SET", "maxmemory-samples", "64"]);
    h.advance(10_000);
    for i in 50..100 {
        h.cmd(1, &["GET", &format!("k{i}")]);
    }
    evict_keeping_k50_to_k99(&mut h, "recently read");
}

#[test]
fn eviction_is_announced_before_the_reply() {
    let mut h = node(20, 0, "allkeys-random", 0);
    h.cmd(1, &["HELLO", "3"]);
    h.cmd(1, &["CLIENT", "TRACKING", "on"]);
    for i in 0..20 {
        h.cmd(1, &["GET", &format!("k{i}")]);
    }
    h.node.report_memory(USED + 1);
    let out = h.cmd(1, &["GET", "nosuch"]);
    assert!(
        out.starts_with(">2\r\n$10\r\ninvalidate\r\n") && out.ends_with("_\r\n"),
        "{out:?}"
    );
}

/// A replica evicts only keys every replica holds (ARCHITECTURE §79; the cluster cases are in
/// `cluster_eviction.rs`): with nothing settled under its frontier it refuses instead.
#[test]
fn a_clustered_node_with_nothing_settled_refuses() {
    let mut config = Config::default();
    config.cluster_size = 3;
    config.replication_factor = 3;
    let mut h = Harness::with_config(config);
    h.connect(1);
    h.connect(2);
    h.cmd(1, &["CONFIG", "SET", "maxmemory-policy", "allkeys-random"]);
    h.cmd(1, &["CONFIG", "SET", "maxmemory", "1000"]);
    h.node.report_memory(2_000);
    assert!(h.cmd(1, &["SET", "k", "v"]).starts_with("-OOM"));
    h.node.report_memory(10);
    assert_eq!(h.cmd(1, &["SET", "k", "v"]), "+OK\r\n");
    // Written a moment ago: no peer is known to hold it, so it is not evicted.
    h.node.report_memory(2_000);
    assert!(h.cmd(1, &["SET", "k2", "v"]).starts_with("-OOM"));
    assert_eq!(h.cmd(1, &["EXISTS", "k"]), ":1\r\n");
    assert_eq!(info_field(&mut h, "evicted_keys"), 0);
}

/// A node with connections 1 and 2 under `allkeys-lfu`, `lfu-log-factor` `factor`.
fn lfu_node(factor: &str) -> Harness {
    let mut h = Harness::with_clients(2);
    h.cmd(1, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]);
    h.cmd(1, &["CONFIG", "SET", "lfu-log-factor", factor]);
    h
}

/// OBJECT FREQ answers what redis-server 7.0.15 answers to the same commands under
/// `allkeys-lfu`. With `lfu-log-factor 0` every access raises the counter, so the answers
/// are exact: a new key starts at 5 (LFU_INIT_VAL), reads and writes count, an overwrite
/// keeps the counter its lookup raised, EXISTS/TYPE/TTL and OBJECT itself do not count.
#[test]
fn object_freq_answers_as_redis_under_an_lfu_policy() {
    let mut h = lfu_node("0");
    let freq = |h: &mut Harness, key: &str| h.cmd(1, &["OBJECT", "FREQ", key]);
    h.cmd(1, &["SET", "x", "vv"]);
    assert_eq!(freq(&mut h, "x"), ":5\r\n");
    for _ in 0..3 {
        h.cmd(1, &["GET", "x"]);
    }
    assert_eq!(freq(&mut h, "x"), ":8\r\n");
    h.cmd(1, &["SET", "x", "ww"]);
    assert_eq!(freq(&mut h, "x"), ":9\r\n");
    h.cmd(1, &["APPEND", "x", "z"]);
    assert_eq!(freq(&mut h, "x"), ":10\r\n");
    for c in ["EXISTS", "TYPE", "TTL"] {
        h.cmd(1, &[c, "x"]);
    }
    assert_eq!(freq(&mut h, "x"), ":10\r\n");
    h.cmd(1, &["STRLEN", "x"]);
    assert_eq!(freq(&mut h, "x"), ":11\r\n");
    h.cmd(1, &["SET", "y", "vv"]);
    h.cmd(1, &["EXPIRE", "y", "100"]);
    assert_eq!(freq(&mut h, "y"), ":6\r\n");
    assert_eq!(freq(&mut h, "nosuch"), "$-1\r\n");
    // Under the default factor the first read still counts for certain (Redis: 6), and the
    // counter grows ever more slowly: 100 reads leave it far below 105.
    let mut h = lfu_node("10");
    h.cmd(1, &["SET", "x", "vv"]);
    h.cmd(1, &["GET", "x"]);
    assert_eq!(h.cmd(1, &["OBJECT", "FREQ", "x"]), ":6\r\n");
    for _ in 0..100 {
        h.cmd(1, &["GET", "x"]);
    }
    let f: u64 = h.cmd(1, &["OBJECT", "FREQ", "x"])[1..]
        .trim()
        .parse()
        .unwrap();
    assert!((7..=12).contains(&f), "{f}");
    // Not under an LFU policy: Redis's error.
    h.cmd(1, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    assert!(h
        .cmd(1, &["OBJECT", "FREQ", "x"])
        .starts_with("-ERR An LFU maxmemory policy is not selected"));
}

/// The counter loses one per `lfu-decay-time` minutes without access, and RESTORE ... FREQ
/// sets it.
#[test]
fn lfu_counters_decay_and_restore_sets_them() {
    let mut h = lfu_node("0");
    h.cmd(1, &["SET", "x", "vv"]);
    for _ in 0..10 {
        h.cmd(1, &["GET", "x"]);
    }
    assert_eq!(h.cmd(1, &["OBJECT", "FREQ", "x"]), ":15\r\n");
    h.advance(3 * 60_000);
    assert_eq!(h.cmd(1, &["OBJECT", "FREQ", "x"]), ":12\r\n");
    h.cmd(1, &["CONFIG", "SET", "lfu-decay-time", "2"]);
    assert_eq!(h.cmd(1, &["OBJECT", "FREQ", "x"]), ":14\r\n");
    h.cmd(1, &["CONFIG", "SET", "lfu-decay-time", "0"]);
    assert_eq!(h.cmd(1, &["OBJECT", "FREQ", "x"]), ":15\r\n");
    let dump = h.raw(1, &[b"DUMP", b"x"]);
    let payload = &dump[dump.iter().position(|&b| b == b'\n').unwrap() + 1..dump.len() - 2];
    h.raw(1, &[b"RESTORE", b"r", b"0", payload, b"FREQ", b"100"]);
    assert_eq!(h.cmd(1, &["OBJECT", "FREQ", "r"]), ":100\r\n");
}

#[test]
fn allkeys_lfu_keeps_frequently_used_keys_over_recently_used_ones() {
    let mut h = node(100, 0, "allkeys-lfu", 0);
    h.cmd(1, &["CONFIG", "SET", "lfu-log-factor", "0"]);
    h.cmd(1, &["CONFIG", "SET", "maxmemory-samples", "64"]);
    // The keys were written before the policy was set (their words hold access times, read
    // as counters now, as in Redis): start again with fresh counters.
    h.cmd(1, &["FLUSHALL"]);
    for i in 0..100 {
        h.cmd(1, &["SET", &format!("k{i}"), "value"]);
    }
    for _ in 0..10 {
        for i in 50..100 {
            h.cmd(1, &["GET", &format!("k{i}")]);
        }
    }
    h.advance(10_000);
    // The rarely used keys are the recently used ones (LRU would evict the others).
    for i in 0..50 {
        h.cmd(1, &["GET", &format!("k{i}")]);
    }
    evict_keeping_k50_to_k99(&mut h, "frequently read");
}

/// Puts the node about 30 keys' worth over the limit, runs a write, and checks that some key
/// went and none of `k50`..`k99` did.
fn evict_keeping_k50_to_k99(h: &mut Harness, why: &str) {
    h.node.report_memory(USED + 30 * 60);
    h.cmd(1, &["SET", "new", "v"]);
    assert!(info_field(h, "evicted_keys") > 0);
    for i in 50..100 {
        let key = format!("k{i}");
        assert_eq!(h.cmd(1, &["EXISTS", &key]), ":1\r\n", "{why} {key} evicted");
    }
}

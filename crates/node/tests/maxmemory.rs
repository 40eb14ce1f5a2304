//! maxmemory through the node's real entry points: eviction by policy, -OOM, and what a
//! clustered node does instead. The memory figure is planted the way the server hands it in
//! (`Node::report_memory`), so each test knows exactly how far over the limit the node is.

mod harness;
use harness::Harness;
use lattice_node::{Buggify, Config, Micros, Node};

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
    let mut h = Harness::new();
    h.connect(1);
    h.connect(2);
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
    // About 30 keys' worth over the limit.
    h.node.report_memory(USED + 30 * 60);
    h.cmd(1, &["SET", "new", "v"]);
    assert!(info_field(&mut h, "evicted_keys") > 0);
    for i in 50..100 {
        let key = format!("k{i}");
        assert_eq!(
            h.cmd(1, &["EXISTS", &key]),
            ":1\r\n",
            "recently read {key} evicted"
        );
    }
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

#[test]
fn a_clustered_node_refuses_instead_of_evicting() {
    let mut h = Harness::new();
    let mut config = Config::default();
    config.cluster_size = 3;
    config.replication_factor = 3;
    h.node = Node::new(
        config,
        1,
        Buggify::disabled(),
        Micros::from_millis(h.now_ms),
    );
    h.connect(1);
    h.connect(2);
    h.cmd(1, &["CONFIG", "SET", "maxmemory-policy", "allkeys-random"]);
    h.cmd(1, &["CONFIG", "SET", "maxmemory", "1000"]);
    h.node.report_memory(2_000);
    assert!(h.cmd(1, &["SET", "k", "v"]).starts_with("-OOM"));
    assert_eq!(info_field(&mut h, "evicted_keys"), 0);
}

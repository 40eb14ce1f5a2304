//! A partitioned cluster (replication factor below the member count) through the node's real
//! entry points: membership learned over the peer links, keys kept by their slots' owners
//! only, commands on other keys forwarded and their replies relayed in order, CROSSSLOT,
//! MOVED where a command cannot be forwarded, and the bounded waits when owners are gone.

use lattice_placement::{key_slot, Placement};
use lattice_testkit::{Cluster, Harness};

const N: usize = 5;
const RF: usize = 3;

/// Five nodes of replication factor 3, every link up and the membership settled.
fn net() -> Cluster {
    let mut net = Cluster::unlinked(N, |i, config| {
        config.replication_factor = RF;
        config.announce_port = 7000 + i as u16;
    });
    net.step_ms = 20;
    // Before any link is up, keyed commands are refused: the placement is unknown.
    assert_eq!(
        net.cmd(0, &["GET", "k"]),
        "-CLUSTERDOWN The cluster is down\r\n"
    );
    net.connect_all();
    net.settle();
    net
}

/// The placement every node learns: the same members, the same factor.
fn placement() -> Placement {
    let ids: Vec<u32> = (1..=N as u32).collect();
    Placement::new(&ids, RF)
}

/// The nodes (by index) that own `key`.
fn owners(key: &str) -> Vec<usize> {
    placement()
        .owners(key_slot(key.as_bytes()))
        .iter()
        .map(|&o| o as usize - 1)
        .collect()
}

/// A key of the form `prefix:n` that node `i` does not own.
fn foreign_key(i: usize, prefix: &str) -> String {
    (0..)
        .map(|n| format!("{prefix}:{n}"))
        .find(|k| !owners(k).contains(&i))
        .expect("some key is foreign")
}

#[test]
fn keys_live_on_their_owners_and_every_node_serves_every_key() {
    let mut net = net();
    let keys: Vec<String> = (0..300).map(|n| format!("key:{n}")).collect();
    for (n, k) in keys.iter().enumerate() {
        let via = n % N;
        assert_eq!(
            net.cmd(via, &["SET", k, &format!("v{n}")]),
            "+OK\r\n",
            "SET {k} via {via}"
        );
    }
    net.settle();
    // Each node holds exactly the keys of its slots.
    for i in 0..N {
        let expected = keys.iter().filter(|k| owners(k).contains(&i)).count();
        assert_eq!(net.dbsize(i), expected, "node {i}");
        assert!(expected > 300 * RF / N * 3 / 4, "node {i} holds {expected}");
    }
    // Every node answers every key.
    for (n, k) in keys.iter().enumerate() {
        let want = format!("${}\r\nv{n}\r\n", format!("v{n}").len());
        for i in 0..N {
            assert_eq!(net.cmd(i, &["GET", k]), want, "GET {k} via {i}");
        }
    }
}

#[test]
fn a_pipeline_mixing_forwarded_and_local_commands_keeps_its_order() {
    let mut net = net();
    let far = foreign_key(0, "far");
    let near = (0..)
        .map(|n| format!("near:{n}"))
        .find(|k| self::owners(k).contains(&0))
        .unwrap();
    net.send(
        0,
        &[
            &["SET", &far, "1"],
            &["INCR", &far],
            &["SET", &near, "x"],
            &["GET", &far],
            &["PING"],
            &["GET", &near],
        ],
    );
    // The local replies wait behind the forwarded ones.
    assert_eq!(net.take(0), "");
    net.deliver();
    assert_eq!(
        net.take(0),
        "+OK\r\n:2\r\n+OK\r\n$1\r\n2\r\n+PONG\r\n$1\r\nx\r\n"
    );
}

#[test]
fn keys_across_slots_are_refused_and_hash_tags_work() {
    let mut net = net();
    assert_eq!(
        net.cmd(1, &["MSET", "a", "1", "b", "2"]),
        "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    for i in 0..N {
        assert_eq!(net.cmd(i, &["MSET", "{u}a", "1", "{u}b", "2"]), "+OK\r\n");
        assert_eq!(
            net.cmd(i, &["MGET", "{u}a", "{u}b"]),
            "*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
        );
    }
    // Keyless commands run where they arrive.
    assert_eq!(net.cmd(2, &["PING"]), "+PONG\r\n");
}

#[test]
fn transactions_and_scripts_on_foreign_keys_are_redirected() {
    let mut net = net();
    let far = foreign_key(0, "tx");
    let owner = owners(&far)[0];
    let moved = format!(
        "-MOVED {} 127.0.0.1:{}\r\n",
        key_slot(far.as_bytes()),
        7000 + owner
    );
    assert_eq!(net.cmd(0, &["MULTI"]), "+OK\r\n");
    assert_eq!(net.cmd(0, &["SET", &far, "1"]), moved);
    assert!(net.cmd(0, &["EXEC"]).starts_with("-EXECABORT"));
    assert_eq!(net.cmd(0, &["EVAL", "return 1", "1", &far]), moved);
    assert_eq!(net.cmd(0, &["BLPOP", &far, "0"]), moved);
    // On an owner the same transaction runs.
    assert_eq!(net.cmd(owner, &["MULTI"]), "+OK\r\n");
    assert_eq!(net.cmd(owner, &["SET", &far, "1"]), "+QUEUED\r\n");
    assert_eq!(net.cmd(owner, &["EXEC"]), "*1\r\n+OK\r\n");
}

#[test]
fn a_read_goes_to_the_next_owner_when_the_first_is_gone_and_all_gone_is_an_error() {
    let mut net = net();
    let via = 0;
    let far = foreign_key(via, "down");
    assert_eq!(net.cmd(via, &["SET", &far, "v"]), "+OK\r\n");
    net.settle();
    let owners = owners(&far);
    let live: Vec<usize> = owners.iter().copied().filter(|&o| o != via).collect();
    // A read in flight when its owner's link drops is sent to the next owner.
    net.send(via, &[&["GET", &far]]);
    net.drop_in_flight(); // the forward is lost with the link
    net.cut(live[0]);
    net.deliver();
    assert_eq!(net.take(via), "$1\r\nv\r\n");
    // A write in flight is not repeated elsewhere: the client hears it may not have run.
    net.send(via, &[&["SET", &far, "w"]]);
    if live.len() > 1 {
        net.drop_in_flight();
        net.cut(live[1]);
        net.deliver();
        assert!(net.take(via).starts_with("-TRYAGAIN"));
    }
    // Every owner gone: refused at once, never a hang.
    for &o in &live[1..] {
        net.cut(o);
    }
    assert_eq!(
        net.cmd(via, &["GET", &far]),
        "-CLUSTERDOWN Hash slot not served\r\n"
    );
}

#[test]
fn a_forward_that_gets_no_reply_times_out() {
    let mut net = net();
    let far = foreign_key(2, "quiet");
    // Messages vanish without the links noticing.
    net.lossy(true);
    net.send(2, &[&["GET", &far], &["PING"]]);
    net.advance(4_000);
    assert_eq!(net.take(2), "");
    net.advance(1_100);
    assert_eq!(
        net.take(2),
        "-TRYAGAIN No reply from the slot's owner in time; the command may or may not have run\r\n+PONG\r\n"
    );
}

#[test]
fn cluster_commands_describe_the_placement() {
    let mut net = net();
    assert_eq!(net.cmd(0, &["CLUSTER", "KEYSLOT", "foo"]), ":12182\r\n");
    let myid = net.cmd(3, &["CLUSTER", "MYID"]);
    assert_eq!(myid, format!("$40\r\n{:040x}\r\n", 4));
    let slots = net.cmd(0, &["CLUSTER", "SLOTS"]);
    let ranges = placement().ranges().len();
    assert!(slots.starts_with(&format!("*{ranges}\r\n")), "{slots}");
    let info = net.cmd(0, &["CLUSTER", "INFO"]);
    assert!(info.contains("cluster_state:ok"), "{info}");
    assert!(info.contains("cluster_known_nodes:5"), "{info}");
    let info = net.cmd(0, &["INFO", "cluster"]);
    assert!(info.contains("cluster_enabled:1"), "{info}");
    // COUNTKEYSINSLOT counts what this node holds.
    let k = (0..)
        .map(|n| format!("c:{n}"))
        .find(|k| self::owners(k).contains(&0))
        .unwrap();
    net.cmd(0, &["SET", &k, "1"]);
    let slot = key_slot(k.as_bytes()).to_string();
    assert_eq!(net.cmd(0, &["CLUSTER", "COUNTKEYSINSLOT", &slot]), ":1\r\n");
    assert_eq!(
        net.cmd(0, &["CLUSTER", "GETKEYSINSLOT", &slot, "10"]),
        format!("*1\r\n${}\r\n{k}\r\n", k.len())
    );
    assert_eq!(
        net.cmd(0, &["CLUSTER", "COUNTKEYSINSLOT", "16384"]),
        "-ERR Invalid slot\r\n"
    );
}

#[test]
fn a_standalone_node_has_cluster_support_disabled() {
    let mut h = Harness::with_clients(1);
    h.send(1, &[&["CLUSTER", "SLOTS"], &["INFO", "cluster"]]);
    let reply = h.take(1);
    assert!(reply.starts_with("-ERR This instance has cluster support disabled\r\n"));
    assert!(reply.contains("cluster_enabled:0"));
}

/// A field of an INFO section as a number.
fn info_field(net: &mut Cluster, i: usize, section: &str, field: &str) -> u64 {
    let info = net.cmd(i, &["INFO", section]);
    let prefix = format!("{field}:");
    info.split("\r\n")
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .parse()
        .expect("a number")
}

#[test]
fn a_key_read_hard_through_a_non_owner_gets_a_copy_there_until_it_cools() {
    let mut net = net();
    for i in 0..N {
        assert_eq!(
            net.cmd(i, &["CONFIG", "SET", "hotkey-threshold", "200"]),
            "+OK\r\n"
        );
    }
    let key = foreign_key(0, "hot");
    let owners = owners(&key);
    assert_eq!(net.cmd(owners[0], &["SET", &key, "v1"]), "+OK\r\n");
    net.settle();
    // 600 reads a second through node 0 for two seconds: three times the threshold.
    for _ in 0..100 {
        for _ in 0..12 {
            assert_eq!(net.cmd(0, &["GET", &key]), "$2\r\nv1\r\n");
        }
        net.advance(20);
    }
    assert!(
        net.on(0, |h, _| h.node.holds_hot_copy(key.as_bytes())),
        "no copy taken"
    );
    // Now served from the copy: no more forwards.
    let forwarded = info_field(&mut net, 0, "cluster", "cluster_forwarded");
    let local = info_field(&mut net, 0, "hotkeys", "hotkey_local_reads");
    for _ in 0..50 {
        assert_eq!(net.cmd(0, &["GET", &key]), "$2\r\nv1\r\n");
    }
    assert_eq!(
        info_field(&mut net, 0, "cluster", "cluster_forwarded"),
        forwarded,
        "reads of a held copy were forwarded"
    );
    assert_eq!(
        info_field(&mut net, 0, "hotkeys", "hotkey_local_reads"),
        local + 50
    );
    // Every owner registered the holder; INFO shows the extra replica and the decision.
    for &o in &owners {
        assert_eq!(
            info_field(&mut net, o, "hotkeys", "hotkey_holders_added"),
            1
        );
    }
    let info = net.cmd(0, &["INFO", "hotkeys"]);
    assert!(info.contains(",served=copy,"), "{info}");
    assert!(info.contains("copy asked for"), "{info}");
    // A write goes to an owner and reaches the copy.
    assert_eq!(net.cmd(0, &["SET", &key, "v2"]), "+OK\r\n");
    net.settle();
    assert_eq!(net.cmd(0, &["GET", &key]), "$2\r\nv2\r\n");
    // OBJECT FREQ under an LFU policy ranks the hot key above a key of node 0's read once.
    let counter = (0..)
        .map(|n| format!("own:{n}"))
        .find(|k| self::owners(k).contains(&0))
        .expect("some key is node 0's");
    assert_eq!(
        net.cmd(0, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]),
        "+OK\r\n"
    );
    assert_eq!(net.cmd(0, &["SET", &counter, "1"]), "+OK\r\n");
    let freq = |net: &mut Cluster, k: &str| -> i64 {
        let r = net.cmd(0, &["OBJECT", "FREQ", k]);
        r.trim_start_matches(':')
            .trim_end()
            .parse()
            .expect("integer")
    };
    let hot = freq(&mut net, &key);
    assert!(
        hot > freq(&mut net, &counter) && hot > 5,
        "OBJECT FREQ {hot}"
    );
    // The reads stop: the copy is given back within a few seconds, the store forgets it and
    // the owners release the holder.
    net.advance(5_000);
    assert!(
        !net.on(0, |h, _| h.node.holds_hot_copy(key.as_bytes())),
        "copy kept"
    );
    assert!(net.on(0, |h, _| h.node.stored_entry(key.as_bytes()).is_none()));
    for &o in &owners {
        assert_eq!(
            info_field(&mut net, o, "hotkeys", "hotkey_holders_released"),
            1
        );
    }
    assert_eq!(
        net.cmd(0, &["GET", &key]),
        "$2\r\nv2\r\n",
        "forwarded again"
    );
}

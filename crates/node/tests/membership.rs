//! Live membership of a partitioned cluster through the node's real entry points: a node
//! joins and takes exactly its share, a node leaves (CLUSTER LEAVE) and its slots reach
//! their new owners before it lets them go, a failed node is forgotten (CLUSTER FORGET) and
//! its share is rebuilt from the other owners, writes made while slots move survive, and a
//! draining node never drops a group before its new owner acknowledged it (with
//! `--features planted-move-bug` it does, and `an_old_owner_keeps_a_group_until_the_ack`
//! fails).

use std::collections::BTreeMap;

use lattice_placement::{key_slot, Placement};
use lattice_testkit::{bulk, info_field, Cluster, Link};

/// `n` nodes that start together (replication factor `rf`) and `joiners` more that join
/// later; only the first `n` are linked.
fn net(n: usize, joiners: usize, rf: usize) -> Cluster {
    let mut net = Cluster::unlinked(n + joiners, |i, config| {
        config.replication_factor = rf;
        config.announce_port = 7100 + i as u16;
        if i < n {
            config.cluster_size = n;
        } else {
            config.join = true;
            config.cluster_size = 2;
        }
    });
    net.step_ms = 20;
    // Each input's full check walks every key: at a stride the test stays quick.
    net.check_every = 16;
    for a in 0..n {
        for b in (a + 1)..n {
            net.set_link(a, b, Link::Up);
        }
    }
    net.settle();
    net
}

/// The placement over members `ids` (node ids, from 1).
fn placement(ids: &[u32], rf: usize) -> Placement {
    Placement::new(ids, rf)
}

/// `keys` keys written through the first `via` nodes in turn, acknowledged and settled.
fn load(net: &mut Cluster, keys: usize, via: usize) -> BTreeMap<String, String> {
    let mut acked = BTreeMap::new();
    for n in 0..keys {
        let (k, v) = (format!("key:{n}"), format!("v{n}"));
        write(net, n % via, &k, &v, &mut acked);
    }
    net.settle();
    acked
}

fn cluster_info(net: &mut Cluster, i: usize) -> String {
    net.cmd(i, &["INFO", "cluster"])
}

/// Whether no node has a group to receive or to drain.
fn quiet(net: &mut Cluster, nodes: &[usize]) -> bool {
    nodes.iter().all(|&i| {
        let info = cluster_info(net, i);
        info_field(&info, "cluster_groups_incoming") == 0
            && info_field(&info, "cluster_groups_draining") == 0
    })
}

/// Writes `key` = `value` through node `via`; records it when acknowledged.
fn write(
    net: &mut Cluster,
    via: usize,
    key: &str,
    value: &str,
    acked: &mut BTreeMap<String, String>,
) {
    let mut r = net.cmd(via, &["SET", key, value]);
    // A forwarded write's reply comes a round trip later (links with latency): waited for,
    // or a write that ran would be neither acknowledged nor refused.
    let mut waited_ms = 0;
    while r.is_empty() && waited_ms < 10_000 {
        net.advance(net.step_ms);
        waited_ms += net.step_ms;
        r = net.take(via);
    }
    if r == "+OK\r\n" {
        acked.insert(key.to_string(), value.to_string());
    }
}

/// Every acknowledged write reads back through every node in `via`, and every node in
/// `nodes` holds exactly the keys `p` gives it (node index i is id i + 1).
fn check(net: &mut Cluster, acked: &BTreeMap<String, String>, nodes: &[usize], p: &Placement) {
    for (n, (k, v)) in acked.iter().enumerate() {
        let via = nodes[n % nodes.len()];
        assert_eq!(net.cmd(via, &["GET", k]), bulk(v), "{k} through node {via}");
    }
    for &i in nodes {
        let expected = acked
            .keys()
            .filter(|k| p.is_owner(i as u32 + 1, key_slot(k.as_bytes())))
            .count();
        assert_eq!(net.dbsize(i), expected, "node {i} holds exactly its keys");
    }
}

/// Moves time on until the moves end (30 s of virtual time at most), writing three keys each
/// step through the nodes in `via` (writes during the move), then lets a second pass;
/// returns the virtual milliseconds the moves took.
fn run_moves(
    net: &mut Cluster,
    nodes: &[usize],
    via: &[usize],
    acked: &mut BTreeMap<String, String>,
) -> u64 {
    let mut waited = 0;
    let mut n = 0;
    loop {
        for _ in 0..3 {
            let v = via[n % via.len()];
            write(net, v, &format!("during:{n}"), &format!("w{n}"), acked);
            n += 1;
        }
        net.advance(net.step_ms);
        waited += net.step_ms;
        if waited % 200 == 0 && quiet(net, nodes) {
            net.advance(1_000);
            return waited;
        }
        assert!(waited < 30_000, "moves not done after {waited} ms");
    }
}

#[test]
fn a_joining_node_takes_exactly_its_share_and_nothing_is_lost() {
    let mut net = net(5, 1, 3);
    let mut acked = load(&mut net, 600, 5);
    check(
        &mut net,
        &acked,
        &[0, 1, 2, 3, 4],
        &placement(&[1, 2, 3, 4, 5], 3),
    );
    // Node 6 joins: its links come up (the server dials the member it was given, which
    // gossips it to the rest, and they dial it).
    net.heal(5);
    let took = run_moves(
        &mut net,
        &[0, 1, 2, 3, 4, 5],
        &[0, 1, 2, 3, 4, 5],
        &mut acked,
    );
    let p6 = placement(&[1, 2, 3, 4, 5, 6], 3);
    check(&mut net, &acked, &[0, 1, 2, 3, 4, 5], &p6);
    let info = cluster_info(&mut net, 5);
    assert_eq!(info_field(&info, "cluster_groups_incoming"), 0);
    let share = info_field(&info, "cluster_groups_held");
    assert_eq!(
        share as usize,
        p6.slot_count(6) / 64,
        "the newcomer holds its groups"
    );
    // Only the newcomer's share moved: each of its groups had exactly one sender.
    let sent: u64 = (0..5)
        .map(|i| info_field(&cluster_info(&mut net, i), "cluster_groups_dropped"))
        .sum();
    assert_eq!(
        sent, share,
        "one old owner let go of each group the newcomer took"
    );
    eprintln!(
        "join: {took} ms of virtual time, {} keys acknowledged",
        acked.len()
    );
}

#[test]
fn a_leaving_node_drains_before_it_goes() {
    let mut net = net(6, 0, 3);
    let mut acked = load(&mut net, 600, 6);
    assert_eq!(net.cmd(2, &["CLUSTER", "LEAVE"]), "+OK\r\n");
    assert_eq!(
        net.cmd(2, &["CLUSTER", "LEAVE"]),
        "-ERR This node is already leaving the cluster\r\n"
    );
    let rest = [0, 1, 3, 4, 5];
    run_moves(
        &mut net,
        &[0, 1, 2, 3, 4, 5],
        &[0, 1, 3, 4, 5, 2],
        &mut acked,
    );
    let info = cluster_info(&mut net, 2);
    assert!(info.contains("cluster_my_status:left"), "{info}");
    assert_eq!(net.dbsize(2), 0, "the leaver dropped everything");
    let p5 = placement(&[1, 2, 4, 5, 6], 3);
    check(&mut net, &acked, &rest, &p5);
    // The leaver is gone from what clients see.
    let nodes = net.cmd(0, &["CLUSTER", "NODES"]);
    assert_eq!(nodes.matches("master").count(), 5, "{nodes}");
    // It still answers (forwarding) until it is stopped.
    assert_eq!(net.cmd(2, &["GET", "key:1"]), bulk("v1"));
}

#[test]
fn a_failed_node_is_forgotten_and_its_share_rebuilt() {
    let mut net = net(5, 0, 3);
    let mut acked = load(&mut net, 500, 5);
    net.cut(4);
    net.advance(500);
    assert_eq!(
        net.cmd(0, &["CLUSTER", "FORGET", "99"]),
        "-ERR Unknown node 99\r\n"
    );
    let id5 = format!("{:040x}", 5);
    assert_eq!(net.cmd(0, &["CLUSTER", "FORGET", &id5]), "+OK\r\n");
    let rest = [0, 1, 2, 3];
    run_moves(&mut net, &rest, &rest, &mut acked);
    let p4 = placement(&[1, 2, 3, 4], 3);
    check(&mut net, &acked, &rest, &p4);
    let nodes = net.cmd(1, &["CLUSTER", "NODES"]);
    assert!(!nodes.contains(&id5), "{nodes}");
}

/// Replication factor 1: the draining node holds the only copy. The link to one gaining
/// owner loses everything for a while: its streams go unacknowledged, so it keeps the group
/// (and restarts the stream) until the link works again.
#[test]
fn an_old_owner_keeps_a_group_until_the_ack() {
    let mut net = net(3, 0, 1);
    let mut acked = load(&mut net, 300, 3);
    net.set_link(1, 2, Link::Silent);
    assert_eq!(net.cmd(1, &["CLUSTER", "LEAVE"]), "+OK\r\n");
    net.advance(5_000);
    net.set_link(1, 2, Link::Up);
    run_moves(&mut net, &[0, 1, 2], &[0, 2], &mut acked);
    let info = cluster_info(&mut net, 1);
    assert!(info.contains("cluster_my_status:left"), "{info}");
    check(&mut net, &acked, &[0, 2], &placement(&[1, 3], 1));
}

/// A write's delta that reaches a gaining owner before the gossip of the change it was sent
/// under (the gossip held on a slow path, the delta on a fast one, as a link that reorders
/// or a lost gossip message leaves it). The holders' streams were listed before the write, so
/// they cannot bring it; the gainer must not acknowledge the delta it could not keep, and gets
/// it again once it has heard of the change (ARCHITECTURE §65). Without that it acknowledged
/// and dropped the delta, and held the group without the write (the simulator's membership
/// seed 7: an owner short of six list elements after a leave).
#[test]
fn a_delta_that_overtakes_the_gossip_of_its_change_is_not_lost() {
    // Three nodes at RF 2; node 0 (id 1) leaves, so each group it owned gains the owner that
    // did not own it. `k`: a new key of a group owned by ids 1 and `s`, gained by `r`, whose
    // Merkle leaf the streams' first window of slices passes (each slice lists 2,048 leaves
    // of an empty keyspace, 4 slices unacknowledged at most).
    let (leaver, ids) = (0, [1, 2, 3]);
    let before = placement(&ids, 2);
    let after = placement(&ids[1..], 2);
    let (k, s, r) = (0..10_000)
        .map(|n| format!("k:{n}"))
        .find_map(|k| {
            let slot = key_slot(k.as_bytes());
            let leaf = (lattice_store::key_hash(k.as_bytes()) >> 48) as usize;
            let owners = before.owners(slot);
            (owners.contains(&1) && leaf < 8_192).then(|| {
                let s = *owners.iter().find(|&&o| o != 1).expect("two owners");
                let r = *after.owners(slot).iter().find(|&&o| o != s).expect("two");
                (k, s as usize - 1, r as usize - 1)
            })
        })
        .expect("such a key");
    let mut net = net(3, 0, 2);
    // Past the anti-entropy pushes the links' coming up starts (a second later from the
    // higher id): the next is a minute away, so only the moves can bring the write.
    net.advance(2_000);
    net.latency_ms = 5;
    // What the leaver and the other owner send the gainer arrives only in a second: their
    // gossip of the leave and the first slices of their streams, listed before the write.
    let until_ms = net.now_ms + 1_000;
    net.hold(leaver, r, until_ms);
    net.hold(s, r, until_ms);
    assert_eq!(net.cmd(leaver, &["CLUSTER", "LEAVE"]), "+OK\r\n");
    net.advance(2 * net.step_ms);
    // The write's delta goes on the fast path and arrives first.
    net.hold(s, r, 0);
    assert_eq!(net.cmd(s, &["SET", &k, "v"]), "+OK\r\n");
    net.advance(4 * net.step_ms);
    net.hold(leaver, r, 0);
    let mut acked = BTreeMap::from([(k.clone(), "v".to_string())]);
    run_moves(&mut net, &[0, 1, 2], &[s], &mut acked);
    assert_eq!(
        net.cmd(r, &["GET", &k]),
        bulk("v"),
        "the gainer holds the write"
    );
    check(&mut net, &acked, &[1, 2], &after);
    let held_back = info_field(&cluster_info(&mut net, r), "cluster_move_deltas_held_back");
    assert!(held_back > 0, "the delta was held back, not dropped");
}

/// What a join ships: each key of a gained group about once, as its state, not once per
/// holder. At RF 3 the drainer streams a group to its three owners and the two that stay
/// owe the gainer a stream of it too (ARCHITECTURE §65): sent whole, that was five states
/// per gained key. The owners that have the group already are sent checks of it (a digest
/// per Merkle leaf) and only the leaves that differ (ARCHITECTURE §78).
#[test]
fn a_join_ships_each_gained_key_about_once() {
    let mut net = net(5, 1, 3);
    let acked = load(&mut net, 2_000, 5);
    let before = placement(&[1, 2, 3, 4, 5], 3);
    net.heal(5);
    let mut settled = acked.clone();
    run_moves(
        &mut net,
        &[0, 1, 2, 3, 4, 5],
        &[0, 1, 2, 3, 4, 5],
        &mut settled,
    );
    let after = placement(&[1, 2, 3, 4, 5, 6], 3);
    check(&mut net, &settled, &[0, 1, 2, 3, 4, 5], &after);
    // Key-owner pairs the join created, among the keys loaded before it (the writes during
    // the move reach the gainer as deltas, or in the streams: a little more).
    let gained: usize = acked
        .keys()
        .map(|k| {
            let slot = key_slot(k.as_bytes());
            after
                .owners(slot)
                .iter()
                .filter(|o| !before.owners(slot).contains(o))
                .count()
        })
        .sum();
    let info: Vec<String> = (0..6).map(|i| cluster_info(&mut net, i)).collect();
    let sum = |f: &str| info.iter().map(|i| info_field(i, f)).sum::<u64>();
    let (shipped, checked) = (
        sum("cluster_move_keys_sent"),
        sum("cluster_move_leaves_checked"),
    );
    eprintln!(
        "join: {gained} key-owner pairs gained, {shipped} key states shipped, {checked} leaves \
         checked, {} wanted, {} bytes moved",
        sum("cluster_move_leaves_wanted"),
        sum("cluster_move_bytes_sent"),
    );
    assert!(checked > 0, "the owners that keep a group are sent checks");
    assert!(
        (shipped as usize) < gained * 3 / 2,
        "{shipped} key states shipped for {gained} gained key-owner pairs"
    );
    // The loaded keys are plain strings: compact states, each sent in the short form with the
    // frontier once per slice (§89), where the general form took about 350 bytes (five
    // components, each with the whole frontier as its context). Only a key written during the
    // move may go in the general form.
    let short = sum("cluster_move_keys_sent_short");
    assert!(
        short * 10 >= shipped * 9,
        "{short} of {shipped} key states sent short: plain strings not sent short (§89)"
    );
}

/// A write forwarded to an owner that has just left the slot's owners (the forwarding node
/// had not heard of it yet) is refused there as not run, and the forwarding node sends it on
/// to another owner: the client sees +OK, not `-TRYAGAIN The slot moved ...` (ARCHITECTURE
/// §90). With `MAX_MOVED_RETRIES` at 0 the client gets the TRYAGAIN and this test fails.
#[test]
fn a_write_refused_by_an_old_owner_goes_on_to_another_owner() {
    // Three nodes at RF 2; node index 0 (id 1) leaves. `k`: a key whose owners are ids 1 and
    // 3, id 1 first (so node index 1, id 2, which does not own it, forwards to id 1).
    let before = placement(&[1, 2, 3], 2);
    let k = (0..10_000)
        .map(|n| format!("k:{n}"))
        .find(|k| before.owners(key_slot(k.as_bytes())) == [1, 3])
        .expect("such a key");
    let mut net = net(3, 0, 2);
    net.advance(2_000);
    net.latency_ms = 5;
    // What id 1 sends id 2 (its gossip of the leave, then its refusal) arrives only later.
    let until_ms = net.now_ms + 500;
    net.hold(0, 1, until_ms);
    assert_eq!(net.cmd(0, &["CLUSTER", "LEAVE"]), "+OK\r\n");
    net.advance(2 * net.step_ms);
    let mut acked = BTreeMap::new();
    write(&mut net, 1, &k, "v", &mut acked);
    assert_eq!(
        acked.get(&k).map(String::as_str),
        Some("v"),
        "the write through the non-owner was acknowledged"
    );
    let info = cluster_info(&mut net, 1);
    assert!(
        info_field(&info, "cluster_forward_retries") > 0,
        "the write went on after a refusal:\n{info}"
    );
    assert_eq!(
        info_field(&info, "cluster_forwarded"),
        1,
        "one command forwarded, however often it went on:\n{info}"
    );
    net.hold(0, 1, 0);
    let mut settled = acked.clone();
    run_moves(&mut net, &[0, 1, 2], &[1], &mut settled);
    for i in [1, 2] {
        assert_eq!(net.cmd(i, &["GET", &k]), bulk("v"), "{k} on node {i}");
    }
}

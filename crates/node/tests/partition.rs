//! A partitioned cluster (replication factor below the member count) through the node's real
//! entry points: membership learned over the peer links, keys kept by their slots' owners
//! only, commands on other keys forwarded and their replies relayed in order, CROSSSLOT,
//! MOVED where a command cannot be forwarded, and the bounded waits when owners are gone.

use std::collections::VecDeque;

use bytes::Bytes;
use lattice_node::{Buggify, Config, ConnId, Input, Micros, Node, NodeId, Output};
use lattice_placement::{key_slot, Placement};

const N: usize = 5;
const RF: usize = 3;

struct Net {
    nodes: Vec<Node>,
    now_ms: u64,
    /// Replies per (node, connection 1).
    replies: Vec<Vec<u8>>,
    wire: VecDeque<(usize, usize, Bytes)>,
    connected: Vec<Vec<bool>>,
    placement: Placement,
}

impl Net {
    fn new() -> Net {
        let now_ms = 1_700_000_000_000;
        let nodes = (0..N)
            .map(|i| {
                let mut config = Config::default();
                config.node_id = i as u32 + 1;
                config.cluster_size = N;
                config.replication_factor = RF;
                config.announce_port = 7000 + i as u16;
                let mut node = Node::new(
                    config,
                    i as u64,
                    Buggify::disabled(),
                    Micros::from_millis(now_ms),
                );
                node.handle(
                    Micros::from_millis(now_ms),
                    Input::Connected {
                        conn: ConnId(1),
                        peer_addr: "127.0.0.1:1".into(),
                        local_addr: "127.0.0.1:2".into(),
                    },
                );
                node
            })
            .collect();
        let ids: Vec<u32> = (1..=N as u32).collect();
        let mut net = Net {
            nodes,
            now_ms,
            replies: vec![Vec::new(); N],
            wire: VecDeque::new(),
            connected: vec![vec![true; N]; N],
            placement: Placement::new(&ids, RF),
        };
        // Before any link is up, keyed commands are refused: the placement is unknown.
        assert_eq!(
            net.cmd(0, &["GET", "k"]),
            "-CLUSTERDOWN The cluster is down\r\n"
        );
        for i in 0..N {
            for j in 0..N {
                if i != j {
                    net.nodes[i].handle(
                        Micros::from_millis(now_ms),
                        Input::PeerUp {
                            peer: NodeId(j as u32 + 1),
                        },
                    );
                }
            }
        }
        net.settle();
        net
    }

    fn drain(&mut self, i: usize) {
        while let Some(out) = self.nodes[i].poll_output() {
            match out {
                Output::Write { conn, data } => {
                    assert_eq!(conn, ConnId(1), "output for a stand-in client escaped");
                    self.replies[i].extend_from_slice(&data)
                }
                Output::PeerSend { peer, data } => {
                    let to = peer.0 as usize - 1;
                    if self.connected[i][to] {
                        self.wire.push_back((to, i, data));
                    }
                }
                _ => {}
            }
        }
        self.nodes[i].check_invariants();
    }

    fn deliver(&mut self) {
        while let Some((to, from, data)) = self.wire.pop_front() {
            self.nodes[to].handle(
                Micros::from_millis(self.now_ms),
                Input::PeerMessage {
                    peer: NodeId(from as u32 + 1),
                    data,
                },
            );
            self.drain(to);
        }
    }

    fn advance(&mut self, ms: u64) {
        let end = self.now_ms + ms;
        while self.now_ms < end {
            self.now_ms += 20;
            for i in 0..N {
                self.nodes[i].handle_timeout(Micros::from_millis(self.now_ms));
                self.drain(i);
            }
            self.deliver();
        }
    }

    fn settle(&mut self) {
        self.deliver();
        self.advance(30);
    }

    /// Sends a pipeline to node `i` without delivering anything in between.
    fn send(&mut self, i: usize, pipeline: &[&[&str]]) {
        for args in pipeline {
            let args = args
                .iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect();
            self.nodes[i].handle(
                Micros::from_millis(self.now_ms),
                Input::Request {
                    conn: ConnId(1),
                    args,
                },
            );
        }
        self.drain(i);
    }

    fn take(&mut self, i: usize) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.replies[i])).into_owned()
    }

    /// One command and its reply, with the peer traffic it causes delivered.
    fn cmd(&mut self, i: usize, args: &[&str]) -> String {
        self.send(i, &[args]);
        self.deliver();
        self.take(i)
    }

    fn owners(&self, key: &str) -> Vec<usize> {
        self.placement
            .owners(key_slot(key.as_bytes()))
            .iter()
            .map(|&o| o as usize - 1)
            .collect()
    }

    /// A key of the form `prefix:n` that node `i` does not own.
    fn foreign_key(&self, i: usize, prefix: &str) -> String {
        (0..)
            .map(|n| format!("{prefix}:{n}"))
            .find(|k| !self.owners(k).contains(&i))
            .expect("some key is foreign")
    }

    fn cut(&mut self, i: usize) {
        let now = Micros::from_millis(self.now_ms);
        for j in 0..N {
            if j != i {
                self.connected[i][j] = false;
                self.connected[j][i] = false;
                self.nodes[i].handle(
                    now,
                    Input::PeerDown {
                        peer: NodeId(j as u32 + 1),
                    },
                );
                self.nodes[j].handle(
                    now,
                    Input::PeerDown {
                        peer: NodeId(i as u32 + 1),
                    },
                );
            }
        }
        for k in 0..N {
            self.drain(k);
        }
    }
}

fn dbsize(net: &mut Net, i: usize) -> usize {
    let r = net.cmd(i, &["DBSIZE"]);
    r.trim_start_matches(':')
        .trim_end()
        .parse()
        .expect("integer")
}

#[test]
fn keys_live_on_their_owners_and_every_node_serves_every_key() {
    let mut net = Net::new();
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
        let expected = keys.iter().filter(|k| net.owners(k).contains(&i)).count();
        assert_eq!(dbsize(&mut net, i), expected, "node {i}");
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
    let mut net = Net::new();
    let far = net.foreign_key(0, "far");
    let near = (0..)
        .map(|n| format!("near:{n}"))
        .find(|k| net.owners(k).contains(&0))
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
    let mut net = Net::new();
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
    let mut net = Net::new();
    let far = net.foreign_key(0, "tx");
    let owner = net.owners(&far)[0];
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
    let mut net = Net::new();
    let via = 0;
    let far = net.foreign_key(via, "down");
    assert_eq!(net.cmd(via, &["SET", &far, "v"]), "+OK\r\n");
    net.settle();
    let owners = net.owners(&far);
    let live: Vec<usize> = owners.iter().copied().filter(|&o| o != via).collect();
    // A read in flight when its owner's link drops is sent to the next owner.
    net.send(via, &[&["GET", &far]]);
    net.wire.clear(); // the forward is lost with the link
    net.cut(live[0]);
    net.deliver();
    assert_eq!(net.take(via), "$1\r\nv\r\n");
    // A write in flight is not repeated elsewhere: the client hears it may not have run.
    net.send(via, &[&["SET", &far, "w"]]);
    if live.len() > 1 {
        net.wire.clear();
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
    let mut net = Net::new();
    let far = net.foreign_key(2, "quiet");
    // Messages vanish without the links noticing.
    for row in &mut net.connected {
        row.iter_mut().for_each(|c| *c = false);
    }
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
    let mut net = Net::new();
    assert_eq!(net.cmd(0, &["CLUSTER", "KEYSLOT", "foo"]), ":12182\r\n");
    let myid = net.cmd(3, &["CLUSTER", "MYID"]);
    assert_eq!(myid, format!("$40\r\n{:040x}\r\n", 4));
    let slots = net.cmd(0, &["CLUSTER", "SLOTS"]);
    let ranges = net.placement.ranges().len();
    assert!(slots.starts_with(&format!("*{ranges}\r\n")), "{slots}");
    let info = net.cmd(0, &["CLUSTER", "INFO"]);
    assert!(info.contains("cluster_state:ok"), "{info}");
    assert!(info.contains("cluster_known_nodes:5"), "{info}");
    let info = net.cmd(0, &["INFO", "cluster"]);
    assert!(info.contains("cluster_enabled:1"), "{info}");
    // COUNTKEYSINSLOT counts what this node holds.
    let k = (0..)
        .map(|n| format!("c:{n}"))
        .find(|k| net.owners(k).contains(&0))
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
    let mut node = Node::new(
        Config::default(),
        1,
        Buggify::disabled(),
        Micros::from_millis(1),
    );
    node.handle(
        Micros::from_millis(1),
        Input::Connected {
            conn: ConnId(1),
            peer_addr: "a".into(),
            local_addr: "b".into(),
        },
    );
    let mut reply = Vec::new();
    for args in [&["CLUSTER", "SLOTS"][..], &["INFO", "cluster"]] {
        node.handle(
            Micros::from_millis(1),
            Input::Request {
                conn: ConnId(1),
                args: args
                    .iter()
                    .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                    .collect(),
            },
        );
        while let Some(o) = node.poll_output() {
            if let Output::Write { data, .. } = o {
                reply.extend_from_slice(&data);
            }
        }
    }
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("-ERR This instance has cluster support disabled\r\n"));
    assert!(reply.contains("cluster_enabled:0"));
}

/// A field of an INFO section as a number.
fn info_field(net: &mut Net, i: usize, section: &str, field: &str) -> u64 {
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
    let mut net = Net::new();
    for i in 0..N {
        assert_eq!(
            net.cmd(i, &["CONFIG", "SET", "hotkey-threshold", "200"]),
            "+OK\r\n"
        );
    }
    let key = net.foreign_key(0, "hot");
    let owners = net.owners(&key);
    assert_eq!(net.cmd(owners[0], &["SET", &key, "v1"]), "+OK\r\n");
    net.settle();
    // 600 reads a second through node 0 for two seconds: three times the threshold.
    for _ in 0..100 {
        for _ in 0..12 {
            assert_eq!(net.cmd(0, &["GET", &key]), "$2\r\nv1\r\n");
        }
        net.advance(20);
    }
    assert!(net.nodes[0].holds_hot_copy(key.as_bytes()), "no copy taken");
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
        .find(|k| net.owners(k).contains(&0))
        .expect("some key is node 0's");
    assert_eq!(
        net.cmd(0, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]),
        "+OK\r\n"
    );
    assert_eq!(net.cmd(0, &["SET", &counter, "1"]), "+OK\r\n");
    let freq = |net: &mut Net, k: &str| -> i64 {
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
    assert!(!net.nodes[0].holds_hot_copy(key.as_bytes()), "copy kept");
    assert!(net.nodes[0].stored_entry(key.as_bytes()).is_none());
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

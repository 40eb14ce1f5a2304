//! Several adapters wired together in one process on virtual time: the same plumbing as the
//! binary and the harness (peer messages as `lattice_peer` Maelstrom messages), without
//! processes or wall-clock time, so convergence is checked deterministically.
//!
//! They rely on the node's replication (`cluster_size > 1` emitting and merging peer
//! messages), including its repair of what a partition dropped.

use lattice_maelstrom::adapter::{Adapter, Workload, PEER_TYPE};
use lattice_maelstrom::proto::Message;
use lattice_node::Micros;
use lattice_testkit::{Cluster, Member};
use serde_json::{json, Value};

/// Longest virtual time a test waits for convergence.
const CONVERGE_MS: u64 = 120_000;

/// One adapter as a cluster member: peer messages go on the kit's wire, replies to the
/// client are kept.
struct Peer {
    adapter: Adapter,
    replies: Vec<Message>,
    next_msg_id: u64,
}

/// `n1` is member 0.
fn index(id: &str) -> usize {
    id[1..].parse::<usize>().unwrap() - 1
}

impl Member for Peer {
    type Msg = Message;

    fn receive(&mut self, now: Micros, _from: usize, msg: Message) {
        let _ = self.adapter.handle_message(now, msg);
    }

    fn tick(&mut self, now: Micros) {
        if self.adapter.poll_timeout().is_some_and(|t| t <= now) {
            self.adapter.handle_timeout(now);
        }
    }

    /// Maelstrom's network has no connections to report: its partitions are silent.
    fn link(&mut self, _now: Micros, _peer: usize, _up: bool) {}

    fn drain(&mut self, _now: Micros, sends: &mut Vec<(usize, Message)>) {
        for m in self.adapter.take_outgoing() {
            if m.body_type() == PEER_TYPE {
                sends.push((index(&m.dest), m));
            } else {
                self.replies.push(m);
            }
        }
    }

    fn size(msg: &Message) -> usize {
        msg.body.to_string().len()
    }

    fn check_invariants(&self) {
        if let Some(node) = self.adapter.node() {
            node.check_invariants();
        }
    }
}

/// `n` adapters initialised as one Maelstrom cluster; messages take 2 ms, time moves 1 ms a
/// step (fine enough for the node's timers, coarse enough to be quick).
fn cluster(n: usize, workload: Workload) -> Cluster<Peer> {
    let peers = (0..n)
        .map(|_| Peer {
            adapter: Adapter::new(Some(workload), 7),
            replies: Vec::new(),
            next_msg_id: 1,
        })
        .collect();
    let mut c = Cluster::of(peers);
    c.step_ms = 1;
    c.latency_ms = 2;
    let ids: Vec<String> = (1..=n).map(|i| format!("n{i}")).collect();
    for i in 0..n {
        let r = request(
            &mut c,
            i,
            json!({"type":"init","node_id":format!("n{}", i + 1),"node_ids":ids}),
        );
        assert_eq!(r.body_type(), "init_ok");
    }
    c
}

/// A client request to `node`; the adapter answers every request at once.
fn request(c: &mut Cluster<Peer>, node: usize, mut body: Value) -> Message {
    let id = c.members[node].next_msg_id;
    c.members[node].next_msg_id += 1;
    body["msg_id"] = json!(id);
    let msg = Message {
        src: "c1".into(),
        dest: format!("n{}", node + 1),
        body,
    };
    c.on(node, |p, now| p.adapter.handle_message(now, msg).unwrap());
    let replies = &mut c.members[node].replies;
    let pos = replies
        .iter()
        .position(|r| r.in_reply_to() == Some(id))
        .expect("the adapter answers requests at once");
    replies.remove(pos)
}

fn reads(c: &mut Cluster<Peer>, field: &str) -> Vec<Value> {
    (0..c.len())
        .map(|i| request(c, i, json!({"type":"read"})).body[field].clone())
        .collect()
}

/// Advances until every node reads `want`, or panics with what they read.
fn converge_to(c: &mut Cluster<Peer>, field: &str, want: &Value) {
    let mut waited = 0;
    loop {
        let r = reads(c, field);
        if r.iter().all(|v| v == want) {
            return;
        }
        assert!(
            waited < CONVERGE_MS,
            "no convergence after {}s: want {want}, read {r:?}",
            waited / 1_000
        );
        c.advance(100);
        waited += 100;
    }
}

#[test]
fn g_set_adds_on_every_node_converge_across_a_partition() {
    let mut c = cluster(3, Workload::GSet);
    c.silence(0);
    for e in 0..30 {
        let r = request(&mut c, e % 3, json!({"type":"add","element":e}));
        assert_eq!(r.body_type(), "add_ok");
        c.advance(10);
    }
    c.heal(0);
    let all: Vec<Value> = (0..30).map(|e| json!(e)).collect();
    // The adapter lists members in canonical-text order.
    let mut want = all.clone();
    want.sort_by_key(|v| v.to_string());
    converge_to(&mut c, "value", &Value::Array(want));
}

#[test]
fn pn_counter_adds_on_every_node_sum_up() {
    let mut c = cluster(3, Workload::PnCounter);
    let mut sum = 0;
    for i in 0..60i64 {
        let d = if i % 3 == 0 { -i } else { i };
        sum += d;
        request(&mut c, (i % 3) as usize, json!({"type":"add","delta":d}));
        if i == 20 {
            c.silence(2);
        }
        if i == 40 {
            c.heal(2);
        }
        c.advance(5);
    }
    converge_to(&mut c, "value", &json!(sum));
}

#[test]
fn broadcast_messages_reach_every_node() {
    let mut c = cluster(5, Workload::Broadcast);
    for m in 0..25 {
        request(&mut c, m % 5, json!({"type":"broadcast","message":m}));
    }
    let mut want: Vec<Value> = (0..25).map(|m| json!(m)).collect();
    want.sort_by_key(|v| v.to_string());
    converge_to(&mut c, "messages", &Value::Array(want));
}

#[test]
fn nodes_of_a_cluster_are_configured_with_their_ids() {
    let c = cluster(3, Workload::GSet);
    for (i, p) in c.members.iter().enumerate() {
        let node = p.adapter.node().unwrap();
        assert_eq!(node.config().node_id, i as u32 + 1);
        assert_eq!(node.config().cluster_size, 3);
    }
}

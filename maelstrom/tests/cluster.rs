//! Several adapters wired together in one process on virtual time: the same plumbing as the
//! binary and the harness (peer messages as `lattice_peer` Maelstrom messages), without
//! processes or wall-clock time, so convergence is checked deterministically.
//!
//! They rely on the node's replication (`cluster_size > 1` emitting and merging peer
//! messages), including its repair of what a partition dropped.

use std::collections::BTreeMap;

use lattice_maelstrom::adapter::{Adapter, Workload, PEER_TYPE};
use lattice_maelstrom::proto::Message;
use lattice_node::Micros;
use serde_json::{json, Value};

/// Virtual time step: fine enough for the node's timers, coarse enough to be quick.
const TICK_US: u64 = 1_000;
/// Longest virtual time a test waits for convergence.
const CONVERGE_US: u64 = 120_000_000;

struct Cluster {
    nodes: Vec<Adapter>,
    now_us: u64,
    /// (deliver at, seq) -> message for a node
    wire: BTreeMap<(u64, u64), Message>,
    seq: u64,
    /// Node indexes cut off from the others.
    isolated: Vec<usize>,
    replies: Vec<Message>,
    next_msg_id: u64,
}

impl Cluster {
    fn new(n: usize, workload: Workload) -> Cluster {
        let mut c = Cluster {
            nodes: (0..n).map(|_| Adapter::new(Some(workload), 7)).collect(),
            now_us: 1_700_000_000_000_000,
            wire: BTreeMap::new(),
            seq: 0,
            isolated: Vec::new(),
            replies: Vec::new(),
            next_msg_id: 1,
        };
        let ids: Vec<String> = (1..=n).map(|i| format!("n{i}")).collect();
        for i in 0..n {
            let r = c.request(
                i,
                json!({"type":"init","node_id":format!("n{}", i + 1),"node_ids":ids}),
            );
            assert_eq!(r.body_type(), "init_ok");
        }
        c
    }

    fn collect(&mut self, from: usize) {
        for m in self.nodes[from].take_outgoing() {
            if m.body_type() == PEER_TYPE {
                let to: usize = m.dest[1..].parse::<usize>().unwrap() - 1;
                if self.isolated.contains(&from) != self.isolated.contains(&to) {
                    continue; // partitioned: lost
                }
                self.seq += 1;
                self.wire.insert((self.now_us + 2 * TICK_US, self.seq), m);
            } else {
                self.replies.push(m);
            }
        }
    }

    fn request(&mut self, node: usize, mut body: Value) -> Message {
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        body["msg_id"] = json!(id);
        let msg = Message {
            src: "c1".into(),
            dest: format!("n{}", node + 1),
            body,
        };
        self.nodes[node]
            .handle_message(Micros(self.now_us), msg)
            .unwrap();
        self.collect(node);
        let pos = self
            .replies
            .iter()
            .position(|r| r.in_reply_to() == Some(id))
            .expect("the adapter answers requests at once");
        self.replies.remove(pos)
    }

    fn advance(&mut self, us: u64) {
        let end = self.now_us + us;
        while self.now_us < end {
            self.now_us += TICK_US;
            while let Some(e) = self.wire.first_entry() {
                if e.key().0 > self.now_us {
                    break;
                }
                let m = e.remove();
                let to: usize = m.dest[1..].parse::<usize>().unwrap() - 1;
                let from: usize = m.src[1..].parse::<usize>().unwrap() - 1;
                if self.isolated.contains(&from) != self.isolated.contains(&to) {
                    continue;
                }
                let _ = self.nodes[to].handle_message(Micros(self.now_us), m);
                self.collect(to);
            }
            for i in 0..self.nodes.len() {
                if self.nodes[i]
                    .poll_timeout()
                    .is_some_and(|t| t.0 <= self.now_us)
                {
                    self.nodes[i].handle_timeout(Micros(self.now_us));
                    self.collect(i);
                }
            }
        }
    }

    fn reads(&mut self, field: &str) -> Vec<Value> {
        (0..self.nodes.len())
            .map(|i| self.request(i, json!({"type":"read"})).body[field].clone())
            .collect()
    }

    /// Advances until every node reads `want`, or panics with what they read.
    fn converge_to(&mut self, field: &str, want: &Value) {
        let mut waited = 0;
        loop {
            let r = self.reads(field);
            if r.iter().all(|v| v == want) {
                return;
            }
            assert!(
                waited < CONVERGE_US,
                "no convergence after {}s: want {want}, read {r:?}",
                waited / 1_000_000
            );
            self.advance(100_000);
            waited += 100_000;
        }
    }
}

#[test]
fn g_set_adds_on_every_node_converge_across_a_partition() {
    let mut c = Cluster::new(3, Workload::GSet);
    c.isolated = vec![0];
    for e in 0..30 {
        let r = c.request(e % 3, json!({"type":"add","element":e}));
        assert_eq!(r.body_type(), "add_ok");
        c.advance(10_000);
    }
    c.isolated.clear();
    let all: Vec<Value> = (0..30).map(|e| json!(e)).collect();
    // The adapter lists members in canonical-text order.
    let mut want = all.clone();
    want.sort_by_key(|v| v.to_string());
    c.converge_to("value", &Value::Array(want));
}

#[test]
fn pn_counter_adds_on_every_node_sum_up() {
    let mut c = Cluster::new(3, Workload::PnCounter);
    let mut sum = 0;
    for i in 0..60i64 {
        let d = if i % 3 == 0 { -i } else { i };
        sum += d;
        c.request((i % 3) as usize, json!({"type":"add","delta":d}));
        if i == 20 {
            c.isolated = vec![2];
        }
        if i == 40 {
            c.isolated.clear();
        }
        c.advance(5_000);
    }
    c.converge_to("value", &json!(sum));
}

#[test]
fn broadcast_messages_reach_every_node() {
    let mut c = Cluster::new(5, Workload::Broadcast);
    for m in 0..25 {
        c.request(m % 5, json!({"type":"broadcast","message":m}));
    }
    let mut want: Vec<Value> = (0..25).map(|m| json!(m)).collect();
    want.sort_by_key(|v| v.to_string());
    c.converge_to("messages", &Value::Array(want));
}

#[test]
fn nodes_of_a_cluster_are_configured_with_their_ids() {
    let c = Cluster::new(3, Workload::GSet);
    for (i, a) in c.nodes.iter().enumerate() {
        let node = a.node().unwrap();
        assert_eq!(node.config().node_id, i as u32 + 1);
        assert_eq!(node.config().cluster_size, 3);
    }
}

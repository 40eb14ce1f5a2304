//! Phases and the end of the run: the liveness checks and, in replicated mode, reading every
//! workload key on every replica for the cluster checkers.

use bytes::Bytes;
use bytes::BytesMut;
use lattice_node::{ConnId, Input, Micros};
use lattice_resp::decode_frame;

use crate::cluster::{self, NodeView};
use crate::fault::FaultClass;
use crate::trace::{escape, TraceEvent};

use super::{Ev, Phase, World};

/// How soon a membership run asks again a node that refused CLUSTER LEAVE for not knowing its
/// members yet: a few gossip round trips.
const LEAVE_RETRY_US: u64 = 50_000;

impl World {
    pub(super) fn on_phase(&mut self, p: Phase) {
        self.phase = p;
        // Every step's changes were checked after it; the full walk (the totals, and any key
        // changed behind the change journals) covers every node once more at the end: here,
        // or in replicated runs in `check_cluster`, after its reads.
        if p == Phase::End && !self.replicated {
            for n in 0..self.hosts.len() {
                self.check_node(n);
            }
        }
        match p {
            Phase::Safety => {}
            Phase::Liveness => {
                self.trace(TraceEvent::Phase("liveness"));
                self.heal_at = self.now;
                self.heal_all();
                // Partitioned, a client's command may wait for a peer message (a forward and
                // its reply), and the links are FIFO: a message sent during a latency spike,
                // or held by a clog, still arrives late after the heal and holds everything
                // sent after it on its link. Retransmitting does not help (the copy queues
                // behind it). So the liveness bound applies to requests sent once the peer
                // traffic of the faulty period has arrived.
                self.settled_at = if self.cfg.partitioned() {
                    self.now.max(self.peers.drained_at())
                } else {
                    self.now
                };
                // A clock stepped back holds still until it catches up (ARCHITECTURE §31):
                // that node's timers (retransmissions, upload retries and call timeouts, which
                // `s3-durability sync` replies wait for) resume only then, whatever was healed.
                let now = self.now;
                for h in &self.hosts {
                    self.settled_at = self.settled_at.max(h.clock.resumes_at(now));
                }
            }
            Phase::Drain => self.trace(TraceEvent::Phase("drain")),
            Phase::End => {
                self.trace(TraceEvent::Phase("end"));
                self.check_uploads_drained();
                self.check_liveness();
            }
        }
    }

    /// After the faults were healed: every node runs, every client is connected, got replies
    /// once things settled and has nothing left unanswered, every node hears from every other,
    /// and the cluster checkers pass.
    pub(super) fn check_liveness(&mut self) {
        let settle = self.heal_at + self.cfg.client_timeout_us + self.cfg.backoff_max_us;
        for n in 0..self.cfg.nodes {
            if !self.hosts[n].running() {
                return self.fail(format!("liveness: n{n} is not running after healing"));
            }
        }
        for ci in 0..self.clients.len() {
            let c = &self.clients[ci];
            let Some(id) = c.conn else {
                return self.fail(format!("liveness: client{ci} is not connected at the end"));
            };
            if let Some(p) = c.pending.front() {
                return self.fail(format!(
                    "liveness: client{ci} still waits for {} replies on c{id} at the end (oldest sent at {}.{:06})",
                    c.pending.len(),
                    p.sent_at / 1_000_000,
                    p.sent_at % 1_000_000
                ));
            }
            if c.last_reply_at < settle {
                return self.fail(format!(
                    "liveness: client{ci} got no reply after the system settled (last at {} us)",
                    c.last_reply_at
                ));
            }
            if let Some(conn) = self.conns.get(id as usize).and_then(|c| c.as_ref()) {
                if !conn.expected.is_empty() {
                    return self.fail(format!(
                        "liveness: c{id} has {} executed requests whose replies never arrived",
                        conn.expected.len()
                    ));
                }
            }
        }
        let n = self.cfg.nodes;
        for a in 0..n {
            for b in 0..n {
                if a != b && self.heartbeats[a * n + b] < self.heal_at {
                    return self.fail(format!(
                        "liveness: no peer message from n{a} reached n{b} after healing"
                    ));
                }
            }
        }
        if self.replicated {
            self.check_cluster();
        }
    }

    /// Replicated mode, end of the run: reads every workload key on every replica through a
    /// connection of its own, and runs the history's checkers over what they show.
    pub(super) fn check_cluster(&mut self) {
        let keys = cluster::keys();
        let now = self.now;
        let partitioned = self.cfg.partitioned();
        if self.cfg.leave.is_some() {
            // Once quiet, every slot group is held by all its owners and the leaver holds
            // nothing: no slot has fewer owners than configured.
            for h in 0..self.cfg.nodes {
                let node = self.hosts[h].node_mut().expect("checked: running");
                if let Some(why) = node.membership_unsettled() {
                    return self.fail(format!("membership: n{h} is not settled at the end: {why}"));
                }
            }
        }
        let mut views = Vec::new();
        for h in 0..self.cfg.nodes {
            let host = &mut self.hosts[h];
            let node_id = host.node_id();
            let t = Micros(host.clock.read(now));
            let node = host.node_mut().expect("checked: running");
            let digest = node.replication_digest();
            // Far above any id the world hands out.
            let conn = ConnId(1 << 40 | h as u64);
            node.handle(
                t,
                Input::Connected {
                    conn,
                    peer_addr: "10.9.9.9:9999".into(),
                    local_addr: format!("10.0.0.{}:6379", h + 1),
                },
            );
            let mut reads = Vec::new();
            let mut stamps = Vec::new();
            for (key, class) in &keys {
                let mut per_key = Vec::new();
                for (i, args) in cluster::probe_commands(key, *class).into_iter().enumerate() {
                    let shown: Vec<String> = args.iter().map(|a| escape(a, 40)).collect();
                    let mut buf = self.probe(h, conn, args);
                    let frame = match decode_frame(&mut buf) {
                        Ok(Some(f)) => f,
                        other => {
                            return self.fail(format!(
                                "convergence: n{h} gave no decodable reply to `{}` ({other:?})",
                                shown.join(" ")
                            ))
                        }
                    };
                    per_key.push(cluster::normalize(*class, i, frame));
                }
                reads.push(per_key);
                let node = self.hosts[h].node_mut().expect("checked: running");
                stamps.push(if *class == cluster::KeyClass::String {
                    node.string_stamp(key.as_bytes())
                } else {
                    None
                });
                let stray = node.stored_entry(key.as_bytes()).is_some()
                    && !node.holds_hot_copy(key.as_bytes());
                if partitioned && stray && !self.owns(h, key.as_bytes()) {
                    return self.fail(format!(
                        "partitioning: n{h} stores {key}, whose slot it does not own"
                    ));
                }
            }
            let node = self.hosts[h].node_mut().expect("checked: running");
            node.handle(t, Input::Closed { conn });
            let hot = node.hot_counts();
            self.stats.hot_copies += hot.copies_taken;
            self.stats.hot_local_reads += hot.local_reads;
            self.stats.hot_holders += hot.holders_added;
            node.check_invariants();
            views.push(NodeView {
                host: h,
                node_id,
                digest,
                reads,
                stamps,
            });
        }
        let alive: Vec<u32> = self.hosts.iter().map(|h| h.incarnation).collect();
        self.history.durable_from = self.hosts.iter().map(|h| h.durable_from).collect();
        if let Err(e) = self.history.check_end(&alive, &views) {
            self.fail(e);
        }
    }

    /// Whether host `h` owns `key`'s slot under the run's placement (over the nodes that did
    /// not leave).
    pub(super) fn owns(&self, h: usize, key: &[u8]) -> bool {
        let left = self.cfg.leave.map(|(n, _)| n);
        let ids: Vec<u32> = (0..self.hosts.len())
            .filter(|&i| Some(i) != left)
            .map(|i| self.hosts[i].node_id())
            .collect();
        let p = lattice_placement::Placement::new(&ids, self.cfg.replication_factor);
        p.is_owner(self.hosts[h].node_id(), lattice_placement::key_slot(key))
    }

    /// Membership runs, from the event: the node is asked to leave.
    pub(super) fn on_leave(&mut self, node: usize) {
        self.trace(TraceEvent::Process {
            node: node as u32,
            what: "leave",
        });
        let left = self.hosts[node]
            .node_mut()
            .is_some_and(|n| n.leave_cluster());
        let placed = self.hosts[node]
            .node_mut()
            .is_some_and(|n| n.cluster_placed());
        if !left && !placed && self.phase != Phase::End {
            // Not yet a complete member list (lost gossip under the peer faults): the node
            // answers CLUSTERDOWN, and an operator asks again; so does the run, every
            // `LEAVE_RETRY_US`, until the run ends.
            self.at(self.now + LEAVE_RETRY_US, Ev::Leave { node });
            return;
        }
        if !left {
            self.fail(format!("membership: n{node} refused CLUSTER LEAVE"));
        }
    }

    /// The end-of-run read of `args` on host `h` through `conn`: the run is over, so peer
    /// messages (a partitioned node forwards to an owner) are handed straight to their
    /// receivers until every node is quiet. Returns what `conn` received.
    pub(super) fn probe(&mut self, h: usize, conn: ConnId, args: Vec<Bytes>) -> BytesMut {
        let now = self.now;
        let t = Micros(self.hosts[h].clock.read(now));
        let node = self.hosts[h].node_mut().expect("checked: running");
        node.handle(t, Input::Request { conn, args });
        let mut buf = BytesMut::new();
        // Bounded: a forward and its reply, plus whatever replication the messages cause.
        for _ in 0..1_000 {
            let mut sends = Vec::new();
            for k in 0..self.hosts.len() {
                let from = self.hosts[k].node_id();
                let Some(node) = self.hosts[k].node_mut() else {
                    continue;
                };
                while let Some(out) = node.poll_output() {
                    match out {
                        lattice_node::Output::Write { conn: c, data } if k == h && c == conn => {
                            buf.extend_from_slice(&data)
                        }
                        lattice_node::Output::PeerSend { peer, data } => {
                            sends.push((peer.0, from, data))
                        }
                        _ => {}
                    }
                }
            }
            if sends.is_empty() {
                break;
            }
            for (to, from, data) in sends {
                let Some(k) = (0..self.hosts.len()).find(|&k| self.hosts[k].node_id() == to) else {
                    continue;
                };
                let t = Micros(self.hosts[k].clock.read(now));
                if let Some(node) = self.hosts[k].node_mut() {
                    node.handle(
                        t,
                        Input::PeerMessage {
                            peer: lattice_node::NodeId(from),
                            data,
                        },
                    );
                }
            }
        }
        buf
    }

    pub(super) fn finish_counts(&mut self) {
        self.history.tally();
        self.stats.acked = self.history.acked;
        self.stats.indeterminate = self.history.indeterminate;
        let s = self.peers.stats.clone();
        self.faults.add(FaultClass::PeerDrop, s.dropped);
        self.faults.add(FaultClass::PeerDuplicate, s.duplicated);
        self.faults.add(FaultClass::PeerReorder, s.reordered);
        let skewed = self
            .hosts
            .iter()
            .filter(|h| h.clock.offset_us() != 0 || h.clock.drift_ppm() != 0)
            .count();
        self.faults.add(FaultClass::ClockSkew, skewed as u64);
        let fired: u64 = self.hosts.iter().map(|h| h.buggify_fired()).sum();
        self.faults.add(FaultClass::Buggify, fired);
        self.stats.connects = self.clients.iter().map(|c| c.connects).sum();
    }
}

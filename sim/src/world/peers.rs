//! The replicas' network: peer messages under the links a TCP connection between two hosts
//! would give, link up/down events, heartbeats and the peer tick that delivers messages.

use bytes::Bytes;
use lattice_node::{Input, Micros};

use crate::process::Host;
use crate::trace::TraceEvent;

use super::{Ev, Phase, World};

/// The largest peer message a replica may hand a driver (the real driver's frame limit); a
/// bigger one is a node bug, reported as a failure.
const MAX_PEER_MESSAGE_BYTES: usize = 16 << 20;

/// Peer messages kept for a paused node (see `on_peer_tick`).
const PAUSED_INBOX_MAX: usize = 65_536;

impl World {
    /// Index of the unordered pair `{a, b}` in `pair_state` / `link_epoch`.
    pub(super) fn pair(&self, a: usize, b: usize) -> usize {
        a.min(b) * self.cfg.nodes + a.max(b)
    }

    /// Carries one `PeerSend` of host `from` to replica `to_id` over the peer network, if the
    /// driver has a link to that replica (it drops messages for replicas it never reported up,
    /// or whose link failed since). Returns whether the message entered the network.
    pub(super) fn peer_send(&mut self, from: usize, to_id: u32, data: Bytes) -> bool {
        let n = self.cfg.nodes;
        if data.len() > MAX_PEER_MESSAGE_BYTES {
            self.fail(format!(
                "n{from} sent a {} byte peer message to id{to_id}: the frame limit is {MAX_PEER_MESSAGE_BYTES}",
                data.len()
            ));
            return false;
        }
        let (to, _) = Host::host_of(to_id);
        let dropped = if !self.replicated {
            Some("not a replicated world")
        } else if to >= n || to == from {
            Some("unknown replica")
        } else if self.link_peer[from * n + to] != Some(to_id) {
            Some("no link to that replica")
        } else {
            None
        };
        self.trace(TraceEvent::PeerSend {
            from: from as u32,
            to_id,
            data: data.clone(),
            dropped,
        });
        if dropped.is_some() {
            return false;
        }
        self.stats.peer_sent += 1;
        let epoch = self.link_epoch[self.pair(from, to)];
        self.peers
            .send_tagged(&mut self.rng, &self.net, self.now, from, to, epoch, data);
        true
    }

    /// Hands a peer message to replica host `to` if the link it was sent on still stands.
    pub(super) fn peer_deliver(&mut self, from: usize, to: usize, epoch: u64, data: Bytes) {
        let pair = self.pair(from, to);
        let n = self.cfg.nodes;
        if self.link_epoch[pair] != epoch || self.pair_state[pair].is_none() {
            return;
        }
        let Some(from_id) = self.link_peer[to * n + from] else {
            return;
        };
        self.stats.peer_delivered += 1;
        self.heartbeats[from * n + to] = self.now;
        self.trace(TraceEvent::PeerRecv {
            from_id,
            node: to as u32,
            data: data.clone(),
        });
        let host = &mut self.hosts[to];
        let t = host.clock.read(self.now);
        host.router.as_mut().expect("linked hosts are up").handle(
            Micros(t),
            Input::PeerMessage {
                peer: lattice_node::NodeId(from_id),
                data,
            },
        );
        self.drain(to, None);
        self.after_node_step(to);
    }

    /// Tells running host `node` that its link to replica `peer` came up or went down.
    pub(super) fn link_event(&mut self, node: usize, peer: u32, up: bool) {
        self.trace(TraceEvent::PeerLink {
            node: node as u32,
            peer,
            up,
        });
        let host = &mut self.hosts[node];
        let t = host.clock.read(self.now);
        let peer = lattice_node::NodeId(peer);
        let input = if up {
            Input::PeerUp { peer }
        } else {
            Input::PeerDown { peer }
        };
        host.router
            .as_mut()
            .expect("running")
            .handle(Micros(t), input);
        self.drain(node, None);
        self.after_node_step(node);
    }

    /// Replicated mode: recomputes which replicas can reach each other (both up, no partition
    /// in either direction: a TCP connection needs both) and tells every running replica what
    /// changed for it, `PeerDown` for a link that failed (or whose peer restarted as a new
    /// replica) before `PeerUp` for the new one, as a real driver sees a connection fail and
    /// another come up. A paused replica learns what changed when it resumes.
    pub(super) fn sync_links(&mut self) {
        if !self.replicated {
            return;
        }
        let n = self.cfg.nodes;
        for a in 0..n {
            for b in a + 1..n {
                let ok = self.hosts[a].up()
                    && self.hosts[b].up()
                    && !self.net.blocked(a, b)
                    && !self.net.blocked(b, a);
                let st = ok.then(|| (self.hosts[a].node_id(), self.hosts[b].node_id()));
                if self.pair_state[a * n + b] != st {
                    self.pair_state[a * n + b] = st;
                    self.link_epoch[a * n + b] += 1;
                }
            }
        }
        for a in 0..n {
            if !self.hosts[a].running() {
                continue;
            }
            for b in 0..n {
                if a == b {
                    continue;
                }
                let want = self.pair_state[self.pair(a, b)].map(|_| self.hosts[b].node_id());
                let have = self.link_peer[a * n + b];
                if want == have {
                    continue;
                }
                self.link_peer[a * n + b] = want;
                if let Some(old) = have {
                    self.link_event(a, old, false);
                }
                if let Some(new) = want {
                    self.link_event(a, new, true);
                }
            }
        }
    }

    /// Nodes exchange no messages yet (replication will); the driver sends heartbeats through
    /// the peer network so that it runs under faults and the liveness phase can check that
    /// every node hears from every other once healed.
    pub(super) fn on_heartbeat(&mut self, node: usize) {
        if self.phase == Phase::End {
            return;
        }
        if self.hosts[node].running() {
            for to in 0..self.cfg.nodes {
                if to != node {
                    let mut msg = Vec::with_capacity(16);
                    msg.extend_from_slice(&(node as u64).to_le_bytes());
                    msg.extend_from_slice(&self.now.to_le_bytes());
                    self.peers.send(
                        &mut self.rng,
                        &self.net,
                        self.now,
                        node,
                        to,
                        Bytes::from(msg),
                    );
                }
            }
            self.schedule_peer_tick();
        }
        let next = self.now + self.cfg.heartbeat_us;
        self.at(next, Ev::Heartbeat { node });
    }

    pub(super) fn schedule_peer_tick(&mut self) {
        if let Some(t) = self.peers.next_due() {
            if self.peer_tick_at.is_none_or(|p| t < p) {
                self.peer_tick_at = Some(t);
                self.at(t, Ev::PeerTick);
            }
        }
    }

    pub(super) fn on_peer_tick(&mut self) {
        if self.peer_tick_at.is_some_and(|t| t <= self.now) {
            self.peer_tick_at = None;
        }
        while let Some(d) = self.peers.poll(&self.net, self.now) {
            self.trace(TraceEvent::Peer {
                from: d.from as u32,
                to: d.to as u32,
                len: d.msg.len() as u32,
            });
            let host = &mut self.hosts[d.to];
            if !host.up() {
                continue;
            }
            if host.paused {
                // Bounded like a socket buffer: a replica paused for seconds under heavy
                // traffic loses the excess, which replication must repair anyway.
                if host.inbox.len() < PAUSED_INBOX_MAX {
                    host.inbox.push((d.from, d.tag, d.msg));
                }
                continue;
            }
            if self.replicated {
                self.peer_deliver(d.from, d.to, d.tag, d.msg);
                if self.failure.is_some() {
                    return;
                }
                continue;
            }
            let n = self.cfg.nodes;
            self.heartbeats[d.from * n + d.to] = self.now;
        }
        self.schedule_peer_tick();
    }
}

//! Client byte streams: the pipes between clients and nodes, partitions holding them back,
//! and the connection table.

use bytes::Bytes;

use crate::fault::FaultClass;
use crate::net::{chunk, Pipe, Seg};

use super::{Conn, Ev, NodeSide, World};

impl World {
    pub(super) fn conn(&mut self, id: u64) -> Option<&mut Conn> {
        self.conns.get_mut(id as usize).and_then(|c| c.as_mut())
    }

    pub(super) fn pipe(&mut self, id: u64, to_node: bool) -> Option<&mut Pipe> {
        self.conn(id).map(|c| {
            if to_node {
                &mut c.to_node
            } else {
                &mut c.to_client
            }
        })
    }

    /// Makes sure a delivery event is queued for a pipe with segments.
    pub(super) fn ensure_scheduled(&mut self, id: u64, to_node: bool) {
        let now = self.now;
        let Some(p) = self.pipe(id, to_node) else {
            return;
        };
        if p.scheduled || p.parked {
            return;
        }
        if let Some(t) = p.head_time() {
            p.scheduled = true;
            self.at(t.max(now), Ev::Pipe { conn: id, to_node });
        }
    }

    /// Writes bytes into a stream: split at random boundaries, each piece after a latency,
    /// in order.
    pub(super) fn stream_write(&mut self, id: u64, to_node: bool, data: Bytes) {
        let pieces = chunk(&mut self.rng, data, self.cfg.chunk_pct);
        if pieces.len() > 1 {
            self.faults.add(FaultClass::StreamChunking, 1);
        }
        // The pieces of one write mostly arrive together (the receiver still reads and parses
        // them one at a time), sometimes spread out.
        let mut at = self.now + self.net.sample_latency(&mut self.rng, self.now);
        for (i, p) in pieces.into_iter().enumerate() {
            if i > 0 && self.rng.pct(30) {
                at += self.rng.exp(self.cfg.latency.mean_extra_us as f64 / 4.0) as u64;
            }
            if let Some(pipe) = self.pipe(id, to_node) {
                pipe.push(at, Seg::Data(p));
            }
        }
        self.ensure_scheduled(id, to_node);
    }

    pub(super) fn stream_push(&mut self, id: u64, to_node: bool, seg: Seg) {
        let at = self.now + self.net.sample_latency(&mut self.rng, self.now);
        if let Some(pipe) = self.pipe(id, to_node) {
            pipe.push(at, seg);
        }
        self.ensure_scheduled(id, to_node);
    }

    pub(super) fn on_pipe(&mut self, id: u64, to_node: bool) {
        let now = self.now;
        let Some(c) = self.conn(id) else {
            return;
        };
        let (client, node) = (c.client, c.node);
        if to_node {
            c.to_node.scheduled = false;
        } else {
            c.to_client.scheduled = false;
        }
        // A client that stopped reading takes its bytes when it reads again.
        let paused_until = self.clients[client].read_paused_until;
        if !to_node && paused_until > now {
            if let Some(p) = self.pipe(id, false) {
                p.scheduled = true;
            }
            self.at(paused_until, Ev::Pipe { conn: id, to_node });
            return;
        }
        let ch = self.client_host(client);
        let (src, dst) = if to_node { (ch, node) } else { (node, ch) };
        if self.net.blocked(src, dst) {
            if let Some(p) = self.pipe(id, to_node) {
                p.parked = true;
            }
            self.parked.push((id, to_node));
            return;
        }
        let clog = self.net.clogged_until(src, dst);
        if clog > now {
            if let Some(p) = self.pipe(id, to_node) {
                p.scheduled = true;
            }
            self.at(clog, Ev::Pipe { conn: id, to_node });
            return;
        }
        if to_node {
            if self.hosts[node].up() && self.hosts[node].paused {
                if let Some(p) = self.pipe(id, true) {
                    p.parked = true;
                }
                self.hosts[node].parked.push(id);
                return;
            }
            self.deliver_to_node(id, node);
        } else {
            self.deliver_to_client(id, client);
        }
        self.maybe_reap(id);
        self.ensure_scheduled(id, to_node);
    }

    pub(super) fn unpark(&mut self, id: u64, to_node: bool) {
        let lat = self.net.sample_latency(&mut self.rng, self.now);
        let now = self.now;
        if let Some(p) = self.pipe(id, to_node) {
            if p.parked {
                p.parked = false;
                p.scheduled = true;
                self.at(now + lat, Ev::Pipe { conn: id, to_node });
            }
        }
    }

    pub(super) fn unpark_partitioned(&mut self) {
        let parked = std::mem::take(&mut self.parked);
        for (id, to_node) in parked {
            self.unpark(id, to_node);
        }
    }

    pub(super) fn maybe_reap(&mut self, id: u64) {
        let done = self
            .conn(id)
            .is_some_and(|c| !c.client_open && c.node_side == NodeSide::Done);
        if done {
            self.conns[id as usize] = None;
        }
    }
}

pub(super) fn seg_kind(seg: &Seg) -> (&'static str, u32) {
    match seg {
        Seg::Syn => ("syn", 0),
        Seg::Data(b) => ("data", b.len() as u32),
        Seg::Fin => ("fin", 0),
        Seg::Rst => ("rst", 0),
    }
}

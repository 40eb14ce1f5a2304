//! The node and everything shared between connection tasks.
//!
//! One node state machine per process, behind a mutex. Connection tasks parse requests and do
//! all socket I/O in parallel on every core; only command execution is serialised, one lock
//! acquisition per read batch (a whole pipeline). Why, and the alternatives, are in
//! docs/ARCHITECTURE.md.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use lattice_node::{ConnId, Input, Micros, Node, NodeId, Output};
use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};

use crate::cluster::{LinkStats, PeerQueue, MAX_FRAME_BYTES};

/// What one connection task is told by whoever drains the node's outputs.
pub enum Mail {
    Write(Bytes),
    Close,
}

pub struct Host {
    pub node: Node,
    mailboxes: HashMap<ConnId, mpsc::UnboundedSender<Mail>>,
    /// The outgoing link's queue per replica, present between `PeerUp` and `PeerDown`.
    peers: BTreeMap<NodeId, PeerLink>,
    next_link_generation: u64,
    link_stats: Arc<LinkStats>,
    last_now_us: u64,
}

struct PeerLink {
    /// Tells links apart when a peer's old link is being torn down as its new one comes up.
    generation: u64,
    queue: Arc<PeerQueue>,
}

impl Host {
    pub fn new(node: Node, now: Micros, link_stats: Arc<LinkStats>) -> Host {
        Host {
            node,
            mailboxes: HashMap::new(),
            peers: BTreeMap::new(),
            next_link_generation: 1,
            link_stats,
            last_now_us: now.0,
        }
    }

    /// Routes `PeerSend`s for `peer` to `queue` from now on. None when `peer` already has an
    /// outgoing link (two seeds naming the same node); else the link's generation for
    /// `remove_peer`.
    pub fn add_peer(&mut self, peer: NodeId, queue: Arc<PeerQueue>) -> Option<u64> {
        if self.peers.contains_key(&peer) {
            return None;
        }
        let generation = self.next_link_generation;
        self.next_link_generation += 1;
        self.peers.insert(peer, PeerLink { generation, queue });
        Some(generation)
    }

    /// The outgoing queue to `peer`, for tests that feed a link without the node.
    #[cfg(test)]
    pub fn peer_queue(&self, peer: NodeId) -> Option<Arc<PeerQueue>> {
        self.peers.get(&peer).map(|l| l.queue.clone())
    }

    /// Stops routing to the link `generation` of `peer` (a no-op if a newer link replaced it).
    pub fn remove_peer(&mut self, peer: NodeId, generation: u64) {
        if self.peers.get(&peer).map(|l| l.generation) == Some(generation) {
            self.peers.remove(&peer);
        }
    }

    /// The wall clock in µs, never going backwards (the node requires monotonic time; a clock
    /// stepped back by NTP just holds still until it catches up).
    pub fn now(&mut self) -> Micros {
        let wall = wall_clock_us();
        if wall > self.last_now_us {
            self.last_now_us = wall;
        }
        Micros(self.last_now_us)
    }

    pub fn register(&mut self, conn: ConnId, mailbox: mpsc::UnboundedSender<Mail>) {
        self.mailboxes.insert(conn, mailbox);
    }

    pub fn unregister(&mut self, conn: ConnId) {
        self.mailboxes.remove(&conn);
    }

    /// Carries out every pending output. Writes for `own` are appended to `own_out` (the caller
    /// writes them after releasing the lock, in one syscall); others go to their tasks'
    /// mailboxes. Returns true when `own` must be closed after its writes.
    pub fn drain(&mut self, own: Option<ConnId>, own_out: &mut Vec<Bytes>) -> bool {
        let mut close_own = false;
        while let Some(out) = self.node.poll_output() {
            match out {
                Output::Write { conn, data } if Some(conn) == own => own_out.push(data),
                Output::Close { conn } if Some(conn) == own => close_own = true,
                Output::Write { conn, data } => {
                    if let Some(m) = self.mailboxes.get(&conn) {
                        let _ = m.send(Mail::Write(data));
                    }
                }
                Output::Close { conn } => {
                    if let Some(m) = self.mailboxes.get(&conn) {
                        let _ = m.send(Mail::Close);
                    }
                }
                Output::PeerSend { peer, data } => {
                    // Without a link (it just went down; PeerDown is on its way) or beyond the
                    // frame limit the message is dropped, and anti-entropy repairs the gap. An
                    // overflowing queue makes its writer drop the link.
                    // An empty frame is a link heartbeat; the node has nothing to say in one.
                    if data.is_empty() {
                        continue;
                    }
                    if data.len() > MAX_FRAME_BYTES {
                        tracing::error!(
                            "node emitted a {}-byte message for node {}, above the frame limit; dropped",
                            data.len(),
                            peer.0
                        );
                    }
                    let sent = data.len() <= MAX_FRAME_BYTES
                        && self.peers.get(&peer).is_some_and(|l| l.queue.push(data));
                    if !sent {
                        self.link_stats
                            .sends_dropped
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        close_own
    }

    pub fn handle(&mut self, input: Input) {
        let now = self.now();
        self.node.handle(now, input);
    }
}

pub fn wall_clock_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

pub struct Shared {
    pub host: Mutex<Host>,
    /// Wakes the timer task when a command asked for an earlier timer than it sleeps to.
    pub timer_wake: Notify,
    pub timer_deadline_us: AtomicU64,
    next_conn: AtomicU64,
    pub port: u16,
    /// Counters of the replica links (all zero on a standalone server).
    pub link_stats: Arc<LinkStats>,
}

impl Shared {
    pub fn new(host: Host, port: u16) -> Shared {
        let link_stats = host.link_stats.clone();
        Shared {
            link_stats,
            host: Mutex::new(host),
            timer_wake: Notify::new(),
            timer_deadline_us: AtomicU64::new(u64::MAX),
            next_conn: AtomicU64::new(1),
            port,
        }
    }

    pub fn next_conn_id(&self) -> ConnId {
        ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed))
    }

    /// Called with the lock held after handling inputs: if the node now wants waking earlier
    /// than the timer task plans, wake it.
    pub fn check_timer(&self, host: &Host) {
        if let Some(t) = host.node.poll_timeout() {
            if t.0 < self.timer_deadline_us.load(Ordering::Relaxed) {
                self.timer_wake.notify_one();
            }
        }
    }
}

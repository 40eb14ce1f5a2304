//! The node and everything shared between connection tasks.
//!
//! One node state machine per process, behind a mutex. The event loops (one per worker thread)
//! parse requests and do all client socket I/O in parallel; only command execution is
//! serialised, one lock acquisition per read batch (a whole pipeline). Why, and the
//! alternatives, are in docs/ARCHITECTURE.md.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use lattice_node::{ConnId, Input, Micros, Node, NodeId, Output};
use parking_lot::Mutex;

use crate::cluster::{LinkStats, PeerQueue, MAX_FRAME_BYTES};
use crate::disk::LocalDir;
use crate::event_loop::{LoopHandle, Mail, Slot};
use lattice_persist::Persister;

pub struct Host {
    pub node: Node,
    /// The event loop serving each client connection (an index into `loops`) and the
    /// connection's slot there.
    routes: HashMap<ConnId, (usize, Slot), BuildHasherDefault<IdHasher>>,
    loops: Arc<[Arc<LoopHandle>]>,
    /// The outgoing link's queue per replica, present between `PeerUp` and `PeerDown`.
    peers: BTreeMap<NodeId, PeerLink>,
    next_link_generation: u64,
    link_stats: Arc<LinkStats>,
    last_now_us: u64,
    /// Writes the node's persistence outputs to the data directory (standalone nodes).
    pub persist: Option<Persister<LocalDir>>,
    /// Wakes the object-store task when there is something to upload (a bucket configured).
    pub upload_wake: Option<Arc<tokio::sync::Notify>>,
}

struct PeerLink {
    /// Tells links apart when a peer's old link is being torn down as its new one comes up.
    generation: u64,
    queue: Arc<PeerQueue>,
}

impl Host {
    pub fn new(
        node: Node,
        now: Micros,
        link_stats: Arc<LinkStats>,
        loops: Arc<[Arc<LoopHandle>]>,
    ) -> Host {
        Host {
            node,
            routes: HashMap::default(),
            loops,
            peers: BTreeMap::new(),
            next_link_generation: 1,
            link_stats,
            last_now_us: now.0,
            persist: None,
            upload_wake: None,
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

    /// The node's time: [`clock_us`], and never behind a reading already given.
    pub fn now(&mut self) -> Micros {
        self.last_now_us = self.last_now_us.max(clock_us());
        Micros(self.last_now_us)
    }

    /// `conn` is served by event loop `loop_index`, in its `slot`, from now on.
    pub fn register(&mut self, conn: ConnId, loop_index: usize, slot: Slot) {
        self.routes.insert(conn, (loop_index, slot));
    }

    pub fn unregister(&mut self, conn: ConnId) {
        self.routes.remove(&conn);
    }

    /// Carries out every pending output. Writes for `own` are appended to `own_out` (the caller
    /// writes them after releasing the lock); others go to their event loops' inboxes, waking
    /// a loop unless it is `current_loop`, the caller itself. Returns true when `own` must be
    /// closed after its writes.
    pub fn drain(
        &mut self,
        own: Option<ConnId>,
        own_out: &mut Vec<Bytes>,
        current_loop: Option<usize>,
    ) -> bool {
        let mut close_own = false;
        let now = if self.persist.is_some() {
            self.now()
        } else {
            Micros(self.last_now_us)
        };
        loop {
            let mut any = false;
            while let Some(out) = self.node.poll_output() {
                any = true;
                let out = match self.persist.as_mut() {
                    Some(p) => match p.output(&mut self.node, now, out) {
                        Some(o) => o,
                        None => continue,
                    },
                    None => out,
                };
                close_own |= self.carry_out(out, own, own_out, current_loop, now);
            }
            // One write for the batch's records; a sync it completes releases held replies.
            if let Some(p) = self.persist.as_mut() {
                p.flush(&mut self.node, now);
            }
            if !any {
                break;
            }
        }
        if let (Some(p), Some(wake)) = (self.persist.as_ref(), self.upload_wake.as_ref()) {
            if p.upload_has_work(now) {
                wake.notify_one();
            }
        }
        close_own
    }

    /// The next object-store call the uploader wants made.
    pub fn poll_upload(&mut self, now: Micros) -> Option<lattice_persist::Call> {
        self.persist.as_mut()?.poll_call(&mut self.node, now)
    }

    /// When the uploader next wants polling, in µs of the node's clock.
    pub fn upload_timeout(&self) -> Option<u64> {
        self.persist.as_ref()?.upload_timeout()
    }

    /// An object-store call's answer.
    pub fn upload_done(&mut self, id: u64, result: Result<lattice_persist::ObjectReply, String>) {
        let now = self.now();
        if let Some(p) = self.persist.as_mut() {
            p.call_done(&mut self.node, now, id, result);
            for line in p.take_log() {
                tracing::warn!("persistence: {line}");
            }
        }
    }

    /// Carries out one output that is not the persister's.
    fn carry_out(
        &mut self,
        out: Output,
        own: Option<ConnId>,
        own_out: &mut Vec<Bytes>,
        current_loop: Option<usize>,
        now: Micros,
    ) -> bool {
        let mut close_own = false;
        {
            match out {
                Output::Write { conn, data } if Some(conn) == own => own_out.push(data),
                Output::Close { conn } if Some(conn) == own => close_own = true,
                Output::Write { conn, data } => {
                    if let Some(&(l, slot)) = self.routes.get(&conn) {
                        self.loops[l].post(Mail::Write(slot, conn, data), current_loop != Some(l));
                    }
                }
                Output::Close { conn } => {
                    if let Some(&(l, slot)) = self.routes.get(&conn) {
                        self.loops[l].post(Mail::Close(slot, conn), current_loop != Some(l));
                    }
                }
                Output::PeerSend { peer, data } => {
                    // Without a link (it just went down; PeerDown is on its way) or beyond the
                    // frame limit the message is dropped, and anti-entropy repairs the gap. An
                    // overflowing queue makes its writer drop the link.
                    // An empty frame is a link heartbeat; the node has nothing to say in one.
                    if data.is_empty() {
                        return close_own;
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
                Output::Shutdown => self.shutdown(now),
                // Without a persister (a clustered node) there is nowhere to write.
                Output::Append { .. }
                | Output::Sync { .. }
                | Output::SnapshotBegin { .. }
                | Output::SnapshotChunk { .. }
                | Output::SnapshotEnd { .. } => {}
            }
        }
        close_own
    }

    /// True when the node asked for a sync that has not been done yet.
    pub fn sync_wanted(&self) -> bool {
        self.persist.as_ref().is_some_and(|p| p.sync_wanted)
    }

    /// The group commit at the end of an event loop's turn: one sync for the records of every
    /// batch run since the last, then the replies it releases go to their loops.
    pub fn complete_sync(&mut self, current_loop: Option<usize>) {
        let now = self.now();
        if let Some(p) = self.persist.as_mut() {
            if p.sync_wanted {
                p.sync(&mut self.node, now);
            }
            for line in p.take_log() {
                tracing::warn!("persistence: {line}");
            }
        }
        self.drain(None, &mut Vec::new(), current_loop);
    }

    /// SHUTDOWN, SIGTERM, SIGINT: the log synced, then the process ends.
    pub fn shutdown(&mut self, now: Micros) -> ! {
        if let Some(p) = self.persist.as_mut() {
            while let Some(out) = self.node.poll_output() {
                let _ = p.output(&mut self.node, now, out);
            }
            match p.close(&mut self.node, now) {
                Ok(()) => tracing::info!("persistence: log synced, exiting"),
                Err(e) => tracing::error!("persistence: final sync failed: {e}"),
            }
        }
        tracing::info!("lattice-server is now ready to exit, bye bye...");
        std::process::exit(0)
    }

    pub fn handle(&mut self, input: Input) {
        let now = self.now();
        self.node.handle(now, input);
    }
}

/// The clock the node runs on and every deadline it asks for is read against, in µs: the
/// monotonic clock plus the largest offset to the wall clock seen so far. So it follows the wall
/// clock when that is set forward, and keeps running at the real rate when the wall clock is
/// set back. It used to be the wall clock held still until it caught up: a node whose clock was
/// set back 30 s fired no timer (delta flushes, retransmissions, anti-entropy) for 30 s, and its
/// writes stopped reaching its peers (found by the fault tests in jepsen/).
pub fn clock_us() -> u64 {
    static OFFSET_US: AtomicU64 = AtomicU64::new(0);
    let mono = monotonic_us();
    let wall = wall_clock_us();
    let seen = wall.saturating_sub(mono);
    let offset = OFFSET_US.fetch_max(seen, Ordering::Relaxed).max(seen);
    mono + offset
}

fn monotonic_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC always exists.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 || ts.tv_sec < 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// The wall clock in µs since the Unix epoch (0 before it). Read with `clock_gettime` directly:
/// `SystemTime::now().duration_since(..)` cost about 130 instructions per read, and the event
/// loop reads the clock twice per batch.
fn wall_clock_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_REALTIME always exists.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    if rc != 0 || ts.tv_sec < 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

pub struct Shared {
    pub host: Mutex<Host>,
    /// When the first event loop next runs the node's timers (µs of the wall clock). Written
    /// with the host lock held.
    pub timer_deadline_us: AtomicU64,
    /// The node asked for a sync: the next event loop to end its turn does it (group commit).
    pub sync_wanted: AtomicBool,
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
            timer_deadline_us: AtomicU64::new(u64::MAX),
            sync_wanted: AtomicBool::new(false),
            next_conn: AtomicU64::new(1),
            port,
        }
    }

    pub fn next_conn_id(&self) -> ConnId {
        ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed))
    }

    /// Called with the lock held after handling inputs: if the node now wants waking earlier
    /// than the timer loop plans, move its deadline, and wake it unless it is the caller
    /// (`current_loop`), which reads the deadline before it next sleeps.
    pub fn check_timer(&self, host: &Host, current_loop: Option<usize>) {
        if host.sync_wanted() {
            self.sync_wanted.store(true, Ordering::Release);
        }
        if let Some(t) = host.node.poll_timeout() {
            if t.0 < self.timer_deadline_us.load(Ordering::Acquire) {
                self.timer_deadline_us.store(t.0, Ordering::Release);
                if current_loop != Some(0) {
                    // The first loop drives the timers.
                    if let Some(timer_loop) = host.loops.first() {
                        timer_loop.wake();
                    }
                }
            }
        }
    }
}

/// Hashes connection ids, which are small sequential numbers chosen by this process (no
/// adversary picks them): one multiplication, whose high bits the table uses, instead of SipHash.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

//! The node's router behind the process-wide lock, and the syscall side of its effects.
//!
//! One node per process, owned by a [`Router`] (crates/router) behind a mutex. The event loops
//! (one per worker thread) parse requests and do all client socket I/O in parallel; only
//! command execution is serialised, one lock acquisition per read batch (a whole pipeline).
//! What the router hands back is carried out here: mail for another loop wakes that loop's
//! eventfd, peer messages go to the link queues, SHUTDOWN ends the process. Why, and the
//! alternatives, are in docs/ARCHITECTURE.md.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use lattice_node::{ConnId, Input, Micros, Node, NodeId};
use lattice_persist::{Dir as _, Persister};
use lattice_router::{Route, Router};
use parking_lot::Mutex;

use crate::cluster::{LinkStats, PeerQueue, MAX_FRAME_BYTES};
use crate::disk::LocalDir;
use crate::event_loop::{LoopHandle, Slot};

pub struct Host {
    pub router: Router<LocalDir>,
    loops: Arc<[Arc<LoopHandle>]>,
    /// The outgoing link's queue per replica, present between `PeerUp` and `PeerDown`.
    peers: BTreeMap<NodeId, PeerLink>,
    next_link_generation: u64,
    link_stats: Arc<LinkStats>,
    /// Scratch for the loops the last drain gave mail.
    to_wake: Vec<usize>,
    /// Wakes the object-store task when there is something to upload (a bucket configured).
    pub upload_wake: Option<Arc<tokio::sync::Notify>>,
    /// Where the node's `PeerDial` addresses go (the cluster's dialer task); None standalone.
    pub dial_tx: Option<tokio::sync::mpsc::UnboundedSender<String>>,
}

struct PeerLink {
    /// Tells links apart when a peer's old link is being torn down as its new one comes up.
    generation: u64,
    queue: Arc<PeerQueue>,
}

impl Host {
    /// `persist` writes the node's persistence outputs to the data directory (standalone
    /// nodes; None on a clustered node).
    pub fn new(
        node: Node,
        persist: Option<Persister<LocalDir>>,
        now: Micros,
        link_stats: Arc<LinkStats>,
        loops: Arc<[Arc<LoopHandle>]>,
    ) -> Host {
        let mut router = Router::new(node, persist, loops.len(), now);
        router.set_memory_probe(crate::alloc::allocated_bytes);
        Host {
            router,
            loops,
            peers: BTreeMap::new(),
            next_link_generation: 1,
            link_stats,
            to_wake: Vec::new(),
            upload_wake: None,
            dial_tx: None,
        }
    }

    pub fn node(&self) -> &Node {
        self.router.node()
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
        self.router.now(clock_us())
    }

    /// `conn` is served by event loop `loop_index`, in its `slot`, from now on.
    pub fn register(&mut self, conn: ConnId, loop_index: usize, slot: Slot) {
        self.router.register(conn, Route { loop_index, slot });
    }

    pub fn unregister(&mut self, conn: ConnId) {
        self.router.unregister(conn);
    }

    /// Carries out every pending output. Writes for `own` are appended to `own_out` (the caller
    /// writes them after releasing the lock); others become mail for their event loops, waking
    /// each loop unless it is `current_loop`, the caller itself. Returns true when `own` must
    /// be closed after its writes.
    pub fn drain(
        &mut self,
        own: Option<ConnId>,
        own_out: &mut Vec<Bytes>,
        current_loop: Option<usize>,
    ) -> bool {
        // The clock is read only when records may be written (their sync deadlines need it).
        let now = if self.router.persister().is_some() {
            self.now()
        } else {
            self.router.last_now()
        };
        let close_own = self.router.drain(now, own, own_out);
        self.carry_out(current_loop);
        if let (Some(p), Some(wake)) = (self.router.persister(), self.upload_wake.as_ref()) {
            if p.upload_has_work(now) {
                wake.notify_one();
            }
        }
        close_own
    }

    /// The next object-store call the uploader wants made.
    pub fn poll_upload(&mut self, now: Micros) -> Option<lattice_persist::Call> {
        let (p, node) = self.router.persister_and_node_mut()?;
        p.poll_call(node, now)
    }

    /// When the uploader next wants polling, in µs of the node's clock.
    pub fn upload_timeout(&self) -> Option<u64> {
        self.router.persister()?.upload_timeout()
    }

    /// An object-store call's answer.
    pub fn upload_done(&mut self, id: u64, result: Result<lattice_persist::ObjectReply, String>) {
        let now = self.now();
        if let Some((p, node)) = self.router.persister_and_node_mut() {
            p.call_done(node, now, id, result);
            for line in p.take_log() {
                tracing::warn!("persistence: {line}");
            }
        }
    }

    /// The syscall side of what the router handed back: loops woken for their mail, peer
    /// messages queued on their links, the process stopped after SHUTDOWN.
    pub fn carry_out(&mut self, current_loop: Option<usize>) {
        if !self.router.has_effects() {
            return;
        }
        self.router.take_loops_to_wake(&mut self.to_wake);
        for l in self.to_wake.drain(..) {
            if let Some(handle) = self.loops.get(l) {
                handle.mail_posted(current_loop != Some(l));
            }
        }
        for (peer, data) in self.router.take_peer_sends() {
            // Without a link (it just went down; PeerDown is on its way) or beyond the frame
            // limit the message is dropped, and anti-entropy repairs the gap. An overflowing
            // queue makes its writer drop the link.
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
        for addr in self.router.take_peer_dials() {
            if let Some(tx) = &self.dial_tx {
                let _ = tx.send(addr);
            }
        }
        let acl_ops = self.router.take_acl_file_ops();
        if !acl_ops.is_empty() {
            for op in acl_ops {
                let result = crate::acl_file::carry_out(&op);
                self.handle(Input::AclFileDone { result });
            }
            // The replies (and whatever the waiting clients pipelined after) go out.
            self.drain(None, &mut Vec::new(), current_loop);
        }
        if self.router.shutdown_requested() {
            let now = self.now();
            self.shutdown(now);
        }
    }

    /// True when the node asked for a sync that has not been done yet.
    pub fn sync_wanted(&self) -> bool {
        self.router.sync_wanted()
    }

    /// True when the turn's end has a sync to do, not only a write.
    pub fn sync_requested(&self) -> bool {
        self.router.sync_requested()
    }

    /// The group commit at the end of an event loop's turn (one sync for the records of every
    /// batch since the last), split around the `fdatasync` so that the caller can run it
    /// without the host lock: the records are written now, and the returned ticket and
    /// handle are what the caller syncs before [`Host::finish_sync`]. None: nothing to sync
    /// outside (no sync wanted, or it was done here because the directory itself needed
    /// one); either way what it released has been drained.
    pub fn begin_sync(
        &mut self,
        current_loop: Option<usize>,
    ) -> Option<(lattice_persist::SyncTicket, std::fs::File)> {
        let now = self.now();
        let ticket = self.router.begin_sync(now);
        let job = match ticket {
            None => None,
            Some(ticket) => {
                let handle = self
                    .router
                    .persister_and_node_mut()
                    .map(|(p, _)| p.dir_mut().handle_for_sync(&ticket.segment));
                match handle {
                    Some(Ok(Some(file))) => Some((ticket, file)),
                    // The directory needs its own sync (a new segment), or the handle could
                    // not be had: the sync is done here, under the lock, as before.
                    other => {
                        let result = match other {
                            Some(Err(e)) => Err(e),
                            _ => self
                                .router
                                .persister_and_node_mut()
                                .map_or(Ok(()), |(p, _)| p.dir_mut().sync(&ticket.segment)),
                        };
                        self.finish_sync(&ticket, result, current_loop);
                        return None;
                    }
                }
            }
        };
        for line in self.router.take_persist_log() {
            tracing::warn!("persistence: {line}");
        }
        self.drain(None, &mut Vec::new(), current_loop);
        job
    }

    /// The sync of a ticket from [`Host::begin_sync`] ended: the node hears it and the
    /// replies it held go out.
    pub fn finish_sync(
        &mut self,
        ticket: &lattice_persist::SyncTicket,
        result: std::io::Result<()>,
        current_loop: Option<usize>,
    ) {
        let now = self.now();
        for line in self.router.finish_sync(now, ticket, result) {
            tracing::warn!("persistence: {line}");
        }
        self.drain(None, &mut Vec::new(), current_loop);
    }

    /// SHUTDOWN, SIGTERM, SIGINT: the log synced, then the process ends.
    pub fn shutdown(&mut self, now: Micros) -> ! {
        match self.router.close_persistence(now) {
            Some(Ok(())) => tracing::info!("persistence: log synced, exiting"),
            Some(Err(e)) => tracing::error!("persistence: final sync failed: {e}"),
            None => {}
        }
        tracing::info!("lattice-server is now ready to exit, bye bye...");
        std::process::exit(0)
    }

    pub fn handle(&mut self, input: Input) {
        let now = self.now();
        self.router.handle(now, input);
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

/// The wall clock in µs since the Unix epoch (0 before it). Read with `clock_gettime` directly
/// rather than through `SystemTime`, whose conversions cost more than the read itself, since
/// the event loop reads the clock twice per batch.
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

/// The host behind its lock, with the longest time any thread held it (event loops, replica
/// links, the S3 uploader): every client of this process waits while the lock is held, so the
/// longest hold bounds how long the node itself kept a reply back. Reported in INFO
/// (`host_lock_longest_hold_us`), so a stall can be told from a machine short of CPU.
pub struct HostLock {
    mutex: Mutex<Host>,
    /// The longest hold since the last [`HostLock::take_longest_hold_us`], in µs.
    longest_hold_us: AtomicU64,
}

/// A hold of the host lock; records its length (to the clock's tick) when released.
pub struct HostGuard<'a> {
    guard: Option<parking_lot::MutexGuard<'a, Host>>,
    since_us: u64,
    lock: &'a HostLock,
}

/// The coarse monotonic clock in µs: a read of a value the kernel keeps (resolution one
/// scheduler tick, 1-4 ms), cheap enough to take twice per hold. The holds worth reporting are
/// milliseconds long. Callgrind, INCR at pipeline depth 1 (`scripts/callgrind.sh --tests incr
/// --appendonly no`): 5,142 instructions per request without the timing, 5,250 with the
/// precise clock, 5,196 with this one; at depth 16 no difference (3,476 / 3,471 / 3,467).
fn coarse_now_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC_COARSE exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    if rc != 0 || ts.tv_sec < 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

impl HostLock {
    pub fn new(host: Host) -> HostLock {
        HostLock {
            mutex: Mutex::new(host),
            longest_hold_us: AtomicU64::new(0),
        }
    }

    pub fn lock(&self) -> HostGuard<'_> {
        let guard = self.mutex.lock();
        HostGuard {
            guard: Some(guard),
            since_us: coarse_now_us(),
            lock: self,
        }
    }

    /// The longest hold since the last call, and starts a new period.
    pub fn take_longest_hold_us(&self) -> u64 {
        self.longest_hold_us.swap(0, Ordering::Relaxed)
    }
}

impl HostGuard<'_> {
    fn record(&self) {
        let held_us = coarse_now_us().saturating_sub(self.since_us);
        self.lock
            .longest_hold_us
            .fetch_max(held_us, Ordering::Relaxed);
    }

    /// Releases the lock to a thread waiting for it, if any (`MutexGuard::unlock_fair`).
    pub fn unlock_fair(mut self) {
        self.record();
        if let Some(g) = self.guard.take() {
            parking_lot::MutexGuard::unlock_fair(g);
        }
    }
}

impl std::ops::Deref for HostGuard<'_> {
    type Target = Host;
    fn deref(&self) -> &Host {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for HostGuard<'_> {
    fn deref_mut(&mut self) -> &mut Host {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl Drop for HostGuard<'_> {
    fn drop(&mut self) {
        if self.guard.is_some() {
            self.record();
        }
    }
}

pub struct Shared {
    pub host: HostLock,
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
            host: HostLock::new(host),
            timer_deadline_us: AtomicU64::new(u64::MAX),
            sync_wanted: AtomicBool::new(false),
            next_conn: AtomicU64::new(1),
            port,
        }
    }

    /// Hands the host the channel its node's `PeerDial` addresses go to.
    pub fn set_dial_tx(&self, tx: tokio::sync::mpsc::UnboundedSender<String>) {
        self.host.lock().dial_tx = Some(tx);
    }

    pub fn next_conn_id(&self) -> ConnId {
        ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed))
    }

    /// Called with the lock held after handling inputs: if the node now wants waking earlier
    /// than the timer loop plans, move its deadline, and wake it unless it is the caller
    /// (`current_loop`), which reads the deadline before it next sleeps.
    pub fn check_timer(&self, host: &mut Host, current_loop: Option<usize>) {
        if host.sync_wanted() {
            self.sync_wanted.store(true, Ordering::Release);
        }
        if let Some(t) = host.router.earlier_timer() {
            self.timer_deadline_us.store(t, Ordering::Release);
            if current_loop != Some(0) {
                // The first loop drives the timers.
                if let Some(timer_loop) = host.loops.first() {
                    timer_loop.wake();
                }
            }
        }
    }
}

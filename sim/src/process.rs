//! Node processes: a node state machine with its wall clock, its reference model, and what a
//! crash or a pause does to them.
//!
//! - Crash: the node value and everything volatile is dropped (there is no persistence yet, so
//!   a restarted node starts empty and its reference model is reset); its connections are
//!   reset by the world.
//! - Pause (SIGSTOP, a long GC, a VM migration): the node processes nothing; bytes for it wait
//!   in the network, its timers are deferred until it resumes.

use std::collections::BTreeSet;

use bytes::Bytes;
use lattice_node::{Buggify, Config, Input, Micros, Node, ProcessStats};
use lattice_persist::{AckMode, Persister, Start, Uploader};
use lattice_router::Router;

use crate::bucket::SimBucket;
use crate::clock::Clock;
use crate::durability::SimDisk;
use crate::model::Model;

/// A node with the router the server runs it behind (this world's nodes have no disk).
pub type NodeRouter = Router<SimDisk>;

/// Virtual time one slice of a long script takes (a slice is about a million Lua instructions:
/// a few milliseconds on a real core). Without it a script suspended between slices would run
/// in zero virtual time and never reach busy-reply-threshold.
pub const SCRIPT_SLICE_US: u64 = 2_000;

/// Replica ids of successive incarnations of one host are this far apart (more hosts than this
/// would make ids collide; worlds have at most 5 nodes).
pub const ID_STRIDE: u32 = 100;

pub struct Host {
    pub id: usize,
    /// `None` while crashed.
    pub router: Option<NodeRouter>,
    /// Event loops the node's connections are spread over, and the loop the next one joins.
    pub loops: usize,
    pub next_loop: usize,
    pub paused: bool,
    pub clock: Clock,
    pub model: Model,
    /// Connections established with the current incarnation.
    pub conns: BTreeSet<u64>,
    /// Virtual time of the pending timer event, and its generation (older events are stale).
    pub timer_at: Option<u64>,
    pub timer_gen: u64,
    /// Connections whose bytes wait for this node to resume.
    pub parked: Vec<u64>,
    /// Peer messages that arrived while paused: sender host, link epoch at sending, payload.
    pub inbox: Vec<(usize, u64, Bytes)>,
    pub incarnation: u32,
    /// Buggify firings of earlier incarnations.
    pub buggify_fired_before: u64,
    pub hz: u64,
    /// Replicas in the cluster (1: a standalone node, as in the single-node swarm).
    pub cluster_size: usize,
    /// Keys per anti-entropy slice (0: the node's default).
    pub slice_keys: usize,
    /// The `appendfsync` policy of a replica that persists (`RunConfig::repl_disk`).
    pub fsync: Option<&'static str>,
    /// Its disk while the node is down (while up, the node's persister holds it).
    pub disk: Option<SimDisk>,
    /// Its prefix in the object store and the `s3-durability` mode (`RunConfig::repl_s3`).
    pub bucket: Option<SimBucket>,
    pub s3: Option<AckMode>,
    /// The last crash took the disk with it: the next start restores from the bucket.
    pub disk_lost: bool,
    /// Writes acknowledged by this incarnation or a later one must survive every crash: each
    /// crash since kept the mode's promise (an `always` disk that survived it, or `s3-durability
    /// sync`). `u32::MAX` when the host promises nothing across a crash.
    pub durable_from: u32,
    /// Owners per slot (`Config::replication_factor`).
    pub replication_factor: usize,
    /// `hotkey-threshold`, when set (partitioned runs).
    pub hotkey_threshold: Option<u64>,
    /// Steps of this incarnation since its last full invariant check (`None`: never checked,
    /// so its next step checks).
    pub steps_unchecked: Option<u64>,
}

impl Host {
    pub fn new(id: usize, clock: Clock, hz: u64, cluster_size: usize) -> Host {
        Host {
            id,
            router: None,
            loops: 1,
            next_loop: 0,
            paused: false,
            clock,
            model: Model::new(),
            conns: BTreeSet::new(),
            timer_at: None,
            timer_gen: 0,
            parked: Vec::new(),
            inbox: Vec::new(),
            incarnation: 0,
            buggify_fired_before: 0,
            hz,
            cluster_size,
            slice_keys: 0,
            fsync: None,
            disk: None,
            bucket: None,
            s3: None,
            disk_lost: false,
            durable_from: u32::MAX,
            replication_factor: usize::MAX,
            hotkey_threshold: None,
            steps_unchecked: None,
        }
    }

    pub fn node(&self) -> Option<&Node> {
        self.router.as_ref().map(|r| r.node())
    }

    pub fn node_mut(&mut self) -> Option<&mut Node> {
        self.router.as_mut().map(|r| r.node_mut())
    }

    /// Virtual time at which the router plans to run the node's timers (None while crashed or
    /// with no timer): the plan on the node's clock, and while a script runs in slices no
    /// earlier than one slice from `now`.
    pub fn timer_due(&self, now: u64) -> Option<u64> {
        let router = self.router.as_ref()?;
        let planned_us = router.planned_timers_us();
        if planned_us == u64::MAX {
            return None;
        }
        let v = self.clock.virtual_at(planned_us, now);
        Some(if router.node().script_running() {
            v.max(now + SCRIPT_SLICE_US)
        } else {
            v
        })
    }

    /// For a driver that runs the node's timers itself, without the router (the scripted
    /// benches of blocking.rs and busy.rs): the planned deadline is the node's own.
    #[cfg(test)]
    pub fn follow_node_timer(&mut self) {
        if let Some(r) = self.router.as_mut() {
            let next_us = r.node().poll_timeout().map_or(u64::MAX, |t| t.0);
            r.plan_timers(next_us);
        }
    }

    /// The replica id of incarnation `incarnation` (1 for the first start) of host `host`.
    ///
    /// A restarted replica comes back with a new id: the node has no persistence yet, so it
    /// restarts with empty state and its operation counters back at zero. Reusing the old id
    /// would make it issue dots (node id, counter) its peers have already seen for different
    /// writes; they would take the new writes for ones they have and drop them, and counters
    /// keyed by node id would be overwritten by smaller values. A fresh id is a fresh replica.
    pub fn node_id_of(host: usize, incarnation: u32) -> u32 {
        host as u32 + 1 + ID_STRIDE * incarnation.saturating_sub(1)
    }

    /// The host and incarnation a replica id belongs to (inverse of [`Host::node_id_of`]).
    pub fn host_of(node_id: u32) -> (usize, u32) {
        let i = node_id.saturating_sub(1);
        ((i % ID_STRIDE) as usize, i / ID_STRIDE + 1)
    }

    /// This host's current replica id (meaningful while up).
    pub fn node_id(&self) -> u32 {
        Host::node_id_of(self.id, self.incarnation)
    }

    /// Starts a fresh incarnation at virtual time `virt`: empty keyspace, fresh model.
    /// A replica with a disk recovers it first (an error is the run's failure).
    pub fn start(&mut self, seed: u64, buggify_seed: u64, virt: u64) -> Result<(), String> {
        let mut config = Config::default();
        config.node_id = Host::node_id_of(self.id, self.incarnation + 1);
        config.cluster_size = self.cluster_size;
        if let Some(policy) = self.fsync {
            config.set("appendfsync", policy).expect("a valid policy");
            config.ack_after_upload = self.s3 == Some(AckMode::Sync);
            // Small, so that runs compact the log into snapshots too.
            config
                .set("auto-aof-rewrite-min-size", "65536")
                .expect("a valid size");
        }
        if self.slice_keys > 0 {
            config.repl_slice_keys = self.slice_keys;
        }
        config.replication_factor = self.replication_factor;
        if let Some(t) = self.hotkey_threshold {
            config
                .set("hotkey-threshold", &t.to_string())
                .expect("a valid threshold");
        }
        config.announce_host = format!("10.0.0.{}", self.id + 1);
        config.announce_port = 6379;
        config
            .set("hz", &self.hz.to_string())
            .expect("hz within range");
        let now = self.clock.read(virt);
        let mut node = Node::new(config, seed, Buggify::enabled(buggify_seed), Micros(now));
        node.handle(
            Micros(now),
            Input::ProcessStats(ProcessStats {
                used_memory_bytes: 1 << 20,
                rss_bytes: 2 << 20,
                cpu_user_us: 0,
                cpu_sys_us: 0,
                process_id: 1000 + self.id as u64,
                tcp_port: 6379,
                host_lock_longest_hold_us: 0,
            }),
        );
        let persister = match self.fsync {
            Some(_) => {
                // A first start (no disk yet) uploads from an empty prefix; a disk that
                // survived continues its chain; a lost one is restored from the prefix.
                let (disk, start) = match self.disk.take() {
                    Some(d) => (d, Start::LocalData),
                    None if std::mem::take(&mut self.disk_lost) => {
                        let bucket = self
                            .bucket
                            .as_mut()
                            .expect("only a bucket's host loses its disk");
                        let (plan, files) = bucket
                            .restore()
                            .map_err(|e| format!("n{}: restore from the bucket: {e}", self.id))?;
                        let start = Start::Restored {
                            base_seq: plan.snapshot.map_or(0, |s| s.0),
                            last_seq: plan.last_seq,
                        };
                        (SimDisk::restored(seed ^ 0x4449_534B, files), start)
                    }
                    None => (
                        SimDisk::new(seed ^ 0x4449_534B),
                        Start::Restored {
                            base_seq: 0,
                            last_seq: 0,
                        },
                    ),
                };
                let (mut p, _) = Persister::recover(disk, &mut node, Micros(now))
                    .map_err(|e| format!("recovery: n{} cannot load its disk: {e}", self.id))?;
                if let Some(mode) = self.s3 {
                    p.attach_uploader(
                        Uploader::new(crate::durability::upload_config(mode), start),
                        &mut node,
                    );
                }
                Some(p)
            }
            None => None,
        };
        self.router = Some(Router::new(node, persister, self.loops, Micros(now)));
        self.next_loop = 0;
        self.model = Model::new();
        self.model.config.insert("hz", self.hz.to_string());
        self.paused = false;
        self.conns.clear();
        self.parked.clear();
        self.inbox.clear();
        self.timer_at = None;
        self.timer_gen += 1;
        self.incarnation += 1;
        self.steps_unchecked = None;
        Ok(())
    }

    /// Drops the node and everything volatile (and with `lose_disk`, on a host that uploads,
    /// its disk too). Returns the connections it had.
    pub fn crash(&mut self, lose_disk: bool) -> Vec<u64> {
        if let Some(r) = self.router.take() {
            self.buggify_fired_before += r.node().buggify_fired();
            // The disk outlives the process: what was synced stays, the rest may not.
            if let Some(p) = r.into_persister() {
                let mut disk = p.into_dir();
                disk.crash();
                self.disk = Some(disk);
            }
            let lost = lose_disk && self.bucket.is_some();
            if let Some(b) = self.bucket.as_mut() {
                // A call in flight lands or not; its answer is lost with the process.
                b.crash();
            }
            if lost {
                self.disk = None;
                self.disk_lost = true;
            }
            let kept = self.s3 == Some(AckMode::Sync) || (self.fsync == Some("always") && !lost);
            if !kept {
                self.durable_from = self.incarnation + 1;
            }
        }
        self.paused = false;
        self.timer_at = None;
        self.timer_gen += 1;
        self.inbox.clear();
        self.parked.clear();
        std::mem::take(&mut self.conns).into_iter().collect()
    }

    pub fn up(&self) -> bool {
        self.router.is_some()
    }

    /// Usable right now: up and not paused.
    pub fn running(&self) -> bool {
        self.router.is_some() && !self.paused
    }

    pub fn buggify_fired(&self) -> u64 {
        self.buggify_fired_before + self.node().map_or(0, |n| n.buggify_fired())
    }
}

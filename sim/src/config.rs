//! Swarm testing: every option of a run is drawn from its seed — how many nodes and clients,
//! how long each phase lasts, latencies, which fault classes are on and how often they strike,
//! peer message fault rates, clock skew, the workload mix and the clients' pipelining.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::fault::FaultClass;
use crate::net::{Latency, PeerFaults};
use crate::rng::Rand;
use crate::workload::FAMILIES;

#[derive(Clone, Debug)]
pub struct RunConfig {
    pub seed: u64,
    pub nodes: usize,
    pub clients: usize,
    pub safety_us: u64,
    pub liveness_us: u64,
    pub drain_us: u64,
    pub latency: Latency,
    /// Percentage of stream writes split into pieces.
    pub chunk_pct: u32,
    /// Fault classes the nemesis may inject in this run.
    pub injected: BTreeSet<FaultClass>,
    pub nemesis_mean_us: u64,
    pub peer: PeerFaults,
    pub heartbeat_us: u64,
    /// Per node: wall clock offset (µs) and drift (ppm).
    pub clocks: Vec<(i64, i64)>,
    /// The node's `hz` at start.
    pub hz: u64,
    /// Weight of each workload family (index into `workload::FAMILIES`).
    pub family_weights: Vec<u32>,
    /// Largest pipeline a client sends at once, and most requests it keeps in flight.
    pub batch_max: u64,
    pub depth_max: usize,
    /// Mean pause between a client's batches; some batches go out with none.
    pub think_mean_us: u64,
    pub think_zero_pct: u32,
    pub client_timeout_us: u64,
    pub backoff_max_us: u64,
    /// Percentage of commands sent inline (telnet style) when their arguments allow it.
    pub inline_pct: u32,
    /// Percentage of commands for which the rare disruptive ones (QUIT, CLIENT KILL, FLUSH,
    /// bytes that are not RESP) may be drawn.
    pub disruptive_pct: u32,
    /// Percentage of connections a client moves to another node when it reconnects.
    pub roam_pct: u32,
    /// Event loops per node: its connections are spread over them in turn, and output for a
    /// connection on another loop travels as mail (crates/router).
    pub loops: usize,
    /// Replicated mode: every node is a replica of one cluster, the workload is the
    /// replicated one (`crate::cluster`) and the end of the run checks convergence.
    pub replicated: bool,
    /// Replicated mode: weight of each replicated operation class (`cluster::CLASSES`).
    pub repl_weights: Vec<u32>,
    /// Replicated runs: keys written into the first replica before its links come up (and
    /// before clients start), so every other replica, and every replica restarted empty
    /// later, receives them by an anti-entropy transfer. 0: none.
    pub preload_keys: usize,
    /// Replicated runs: keys per anti-entropy slice (`Config::repl_slice_keys`; 0: the
    /// node's default). Low, so that a few thousand keys take many bounded slices.
    pub slice_keys: usize,
    /// Replicated runs: every replica persists to a simulated disk with this `appendfsync`
    /// policy, and a crashed replica restarts from what its disk kept (a torn or lost tail
    /// included) instead of empty. None: replicas keep nothing across a crash.
    pub repl_disk: Option<&'static str>,
    /// Replicated runs with a disk: every replica also uploads to a simulated bucket prefix
    /// of its own under this `s3-durability` mode, the bucket's weather turns slow, failing
    /// or hanging during the faults, and a crash may lose the disk, the replica then restoring
    /// from its prefix before its peers repair the rest. None: no bucket.
    pub repl_s3: Option<lattice_persist::AckMode>,
    /// Owners per slot; below `nodes` the cluster is partitioned (`--partitioned`): clients
    /// talk to nodes that do not own their keys, which forward to an owner.
    pub replication_factor: usize,
    /// Partitioned runs: the nodes' `hotkey-threshold` (None: the node's default) and the
    /// percent of reads aimed at a few hot keys (`cluster::History::hot_read_pct`).
    pub hotkey_threshold: Option<u64>,
    pub hot_read_pct: u32,
    /// Membership runs: the node that leaves the cluster (CLUSTER LEAVE) and when.
    pub leave: Option<(usize, u64)>,
    /// A node's full invariant check runs after one in this many of its steps (1: after
    /// every step), and always on a node's first step after it starts and at the end; after
    /// every other step the node checks the keys that step changed
    /// (`Node::check_changed_invariants`). The full check walks the whole keyspace and, on a
    /// replica, materializes every key's replicated state, so its cost grows with the data
    /// while a step's does not; not part of the trace, so a seed replays the same events
    /// whatever the stride.
    pub check_every: u64,
    /// Bytes a node's socket towards a client holds unread by the client (its send buffer
    /// and the client's receive window together). Small, so that a client that stops reading,
    /// or a large reply, fills it: the node then stops reading that connection and must read
    /// it again once the client has caught up (`lattice_router::ConnFlow`).
    pub sock_buf_bytes: usize,
    /// Output other connections may pile onto a connection whose socket is full before the
    /// node closes it (`lattice_router::PUSH_LIMIT_BYTES` in the server; smaller here so that
    /// the close happens).
    pub push_limit_bytes: usize,
    /// Percentage of batches after which the client stops reading its replies for a while,
    /// and the longest such pause (well under the client timeout).
    pub slow_read_pct: u32,
    pub slow_read_max_us: u64,
}

/// `check_every` of replicated runs: every step's changes are checked after it, so the full
/// walk only adds what no single key shows (counts, marks against packed records); with
/// thousands of preloaded keys one walk costs hundreds of steps (docs/ARCHITECTURE.md,
/// "Replicated simulation: invariant checks by stride" and "... of what a step changed").
pub const REPLICATED_CHECK_EVERY: u64 = 4096;

impl RunConfig {
    pub fn from_seed(seed: u64) -> RunConfig {
        let mut r = Rand::new(seed ^ 0x5157_4A52_4D5F_4346);
        let nodes = *r.pick(&[1, 2, 3, 3, 3, 3, 4, 5]);
        let clients = r.range(2, 8) as usize;
        let safety_us = r.range(3_000_000, 10_000_000);
        let client_timeout_us = r.range(500_000, 2_500_000);
        let backoff_max_us = r.range(20_000, 400_000);
        let latency = Latency {
            min_us: r.range(20, 500),
            mean_extra_us: r.range(50, 3_000),
            spike_ppm: *r.pick(&[0, 1_000, 10_000]),
            spike_us: r.range(5_000, 100_000),
        };
        // Every class is on in most runs; a few runs have no injected faults at all.
        let injected: BTreeSet<FaultClass> = if r.pct(5) {
            BTreeSet::new()
        } else {
            FaultClass::INJECTED
                .iter()
                .copied()
                .filter(|_| r.pct(70))
                .collect()
        };
        let rate = |r: &mut Rand| {
            if r.pct(70) {
                r.range(1_000, 200_000) as u32
            } else {
                0
            }
        };
        let peer = PeerFaults {
            drop_ppm: rate(&mut r),
            dup_ppm: rate(&mut r),
            reorder_ppm: rate(&mut r),
            reorder_us: r.range(1_000, 50_000),
        };
        let skew = r.pct(80);
        let clocks = (0..nodes)
            .map(|_| {
                if skew {
                    (r.range_i(-3_000_000, 3_000_000), r.range_i(-300, 300))
                } else {
                    (0, 0)
                }
            })
            .collect();
        // Swarm over families: each is left out now and then (strings always stay).
        let family_weights = FAMILIES
            .iter()
            .enumerate()
            .map(|(i, _)| {
                if i > 0 && r.pct(15) {
                    0
                } else {
                    r.range(1, 10) as u32
                }
            })
            .collect();
        RunConfig {
            seed,
            nodes,
            clients,
            safety_us,
            // Long enough for stuck requests to time out, clients to reconnect, and work
            // to be done on fresh connections.
            liveness_us: client_timeout_us + backoff_max_us + 2_000_000,
            drain_us: 2_000_000,
            latency,
            chunk_pct: r.range(0, 60) as u32,
            injected,
            nemesis_mean_us: r.range(150_000, 1_000_000),
            peer,
            heartbeat_us: r.range(50_000, 200_000),
            clocks,
            hz: *r.pick(&[10, 10, 1, 50, 100]),
            family_weights,
            batch_max: r.range(1, 8),
            depth_max: r.range(1, 16) as usize,
            think_mean_us: r.range(200, 5_000),
            think_zero_pct: r.range(0, 60) as u32,
            client_timeout_us,
            backoff_max_us,
            inline_pct: *r.pick(&[0, 2, 10]),
            disruptive_pct: r.range(0, 60) as u32,
            roam_pct: r.range(0, 50) as u32,
            loops: r.range(1, 3) as usize,
            replicated: false,
            replication_factor: usize::MAX,
            hotkey_threshold: None,
            hot_read_pct: 0,
            leave: None,
            repl_weights: Vec::new(),
            preload_keys: 0,
            slice_keys: 0,
            repl_disk: None,
            repl_s3: None,
            check_every: 1,
            sock_buf_bytes: 0,
            push_limit_bytes: 0,
            slow_read_pct: 0,
            slow_read_max_us: 0,
        }
        .with_flow(seed)
    }

    /// The socket bounds and slow readers, drawn from a stream of their own.
    fn with_flow(mut self, seed: u64) -> RunConfig {
        let mut f = Rand::new(seed ^ 0x464C_4F57_5F42_5546);
        self.sock_buf_bytes = *f.pick(&[256, 1_024, 4_096, 65_536, 1 << 20]);
        self.push_limit_bytes =
            *f.pick(&[2_048, 16_384, 262_144, lattice_router::PUSH_LIMIT_BYTES]);
        self.slow_read_pct = *f.pick(&[0, 2, 10, 30]);
        self.slow_read_max_us = f.range(1_000, self.client_timeout_us / 4);
        self
    }

    /// A replicated run: 3-5 replicas, the replicated workload, and a drain long enough for
    /// anti-entropy to repair whatever the faults left behind. Drawn from its own stream, so a
    /// seed's replicated run is unrelated to its single-node run.
    pub fn replicated_from_seed(seed: u64) -> RunConfig {
        let mut cfg = RunConfig::from_seed(seed);
        let mut r = Rand::new(seed ^ 0x5245_504C_4943_4153);
        cfg.replicated = true;
        cfg.nodes = r.range(3, 5) as usize;
        cfg.clients = r.range(2, 3) as usize;
        // Safety phase with every fault class; kept short so that 200 seeds fit in about two
        // minutes on two cores (the drain below dominates the virtual time, not the cost).
        cfg.safety_us = r.range(1_200_000, 2_500_000);
        // Fewer, slower requests than the single-node swarm: every write becomes deltas, acks
        // and merges on every replica, which costs several times a single node's request.
        cfg.think_mean_us = r.range(6_000, 20_000);
        cfg.think_zero_pct = r.range(0, 10) as u32;
        cfg.batch_max = r.range(1, 4);
        let skew = r.pct(85);
        cfg.clocks = (0..cfg.nodes)
            .map(|_| {
                if skew {
                    (r.range_i(-2_000_000, 2_000_000), r.range_i(-300, 300))
                } else {
                    (0, 0)
                }
            })
            .collect();
        // Every client spreads its connections over the replicas.
        cfg.roam_pct = r.range(30, 100) as u32;
        // Nothing disruptive (QUIT, CLIENT KILL, FLUSHALL, garbage): the history would lose
        // track of what was sent, and FLUSHALL would void every checker.
        cfg.disruptive_pct = 0;
        cfg.repl_weights = crate::cluster::CLASSES
            .iter()
            .map(|c| match (*c, r.pct(10)) {
                (_, true) => 0,
                // Lists only grow here (pushes only, so the checker knows every element), and a
                // replica's merge costs grow with a list's length: keep them short.
                ("list", _) => u32::from(r.pct(60)),
                _ => r.range(1, 10) as u32,
            })
            .collect();
        // 30 s of virtual time without faults and without new writes: anti-entropy must bring
        // every replica to the same state, and every expiry set during the run (at most 10 s
        // ahead, clocks at most a few seconds apart) has passed on every node by then.
        cfg.drain_us = 30_000_000;
        // Drawn from a stream of their own, so the rest of a seed's run stays what it was.
        let mut t = Rand::new(seed ^ 0x4341_5443_4855_5021);
        if t.pct(40) {
            cfg.preload_keys = t.range(500, 3_000) as usize;
            cfg.slice_keys = t.range(8, 128) as usize;
        }
        if t.pct(50) {
            cfg.repl_disk = Some(*t.pick(&["always", "everysec", "no"]));
        }
        // A stream of its own again: the seeds without a bucket run as they did before.
        let mut u = Rand::new(seed ^ 0x5333_4255_434b_4554);
        if cfg.repl_disk.is_some() && u.pct(50) {
            cfg.repl_s3 = Some(if u.pct(50) {
                lattice_persist::AckMode::Sync
            } else {
                lattice_persist::AckMode::Async
            });
        }
        cfg.check_every = REPLICATED_CHECK_EVERY;
        cfg
    }

    /// A partitioned run: a replicated run with 4-5 nodes and 2..nodes-1 owners per slot, so
    /// most requests reach a node that forwards them. Crashes are left out: a restarted
    /// replica comes back under a new id, and a membership that changes is a later part of
    /// partitioning (live join and leave), not what this mode checks. The atomic expiry probe
    /// is left out too: a transaction on a key another node owns is redirected (MOVED), not
    /// run.
    pub fn partitioned_from_seed(seed: u64) -> RunConfig {
        let mut cfg = RunConfig::replicated_from_seed(seed);
        let mut r = Rand::new(seed ^ 0x5041_5254_4954_494F);
        cfg.nodes = r.range(4, 5) as usize;
        cfg.replication_factor = r.range(2, cfg.nodes as u64 - 1) as usize;
        cfg.clocks.resize(cfg.nodes, (0, 0));
        cfg.injected.remove(&FaultClass::CrashRestart);
        // Without crashes a bucket is never restored from: what it checks is not here.
        cfg.repl_s3 = None;
        // The preload writes every key into the first node, which in a partitioned cluster
        // owns only some of them (the rest would be forwarded before any link is up).
        cfg.preload_keys = 0;
        for (w, class) in cfg.repl_weights.iter_mut().zip(crate::cluster::CLASSES) {
            if *class == "expire-probe" {
                *w = 0;
            }
        }
        // Hot keys (ARCHITECTURE, "Hot keys"): off in a quarter of the seeds; otherwise a
        // threshold the workload's few hundred requests a second cross on the hot keys (the
        // sketch counts one access in 8, so its rates move in steps of 4 per second), and
        // reads leaning on those keys.
        let threshold = [0, 4, 8, 16][r.below(4) as usize];
        cfg.hotkey_threshold = Some(threshold);
        if threshold > 0 {
            cfg.hot_read_pct = r.range(30, 80) as u32;
        }
        cfg
    }

    /// A membership run (`--membership`): a partitioned run of 5 nodes, 1..=3 owners per
    /// slot, in which one node leaves (CLUSTER LEAVE) during the faults: its slot groups move
    /// to their new owners under every fault class. At the end every node must be settled
    /// (each slot group held by all its owners, the leaver holding nothing) and every key on
    /// exactly its owners among the remaining nodes; the history's checkers cover the writes.
    /// A factor of 1 leaves the leaver the only holder of its groups until they moved, which
    /// is where a move that loses data shows.
    pub fn membership_from_seed(seed: u64) -> RunConfig {
        let mut cfg = RunConfig::partitioned_from_seed(seed);
        let mut r = Rand::new(seed ^ 0x4d45_4d42_4552_5348);
        cfg.nodes = 5;
        cfg.clocks.resize(cfg.nodes, (0, 0));
        cfg.replication_factor = r.range(1, 3) as usize;
        let at = r.range(cfg.safety_us / 5, cfg.safety_us / 2);
        cfg.leave = Some((r.below(cfg.nodes as u64) as usize, at));
        cfg
    }

    pub fn partitioned(&self) -> bool {
        self.replication_factor < self.nodes
    }

    pub fn describe(&self) -> String {
        let mut s = String::new();
        if self.partitioned() {
            let _ = write!(s, "partitioned rf={} ", self.replication_factor);
            if let Some((n, at)) = self.leave {
                let _ = write!(s, "leave=n{n}@{}ms ", at / 1000);
            }
            if let Some(t) = self.hotkey_threshold {
                let _ = write!(s, "hotkey-threshold={t} hot-reads={}% ", self.hot_read_pct);
            }
        } else if self.replicated {
            s.push_str("replicated ");
        }
        if self.replicated {
            if let Some(p) = self.repl_disk {
                let _ = write!(s, "disk={p} ");
            }
            if let Some(m) = self.repl_s3 {
                let _ = write!(s, "s3={} ", m.name());
            }
            if self.preload_keys > 0 {
                let _ = write!(
                    s,
                    "preload={} slice={} ",
                    self.preload_keys, self.slice_keys
                );
            }
        }
        let _ = write!(
            s,
            "nodes={} loops={} clients={} safety={}ms liveness={}ms latency={}+~{}us chunk={}% nemesis~{}ms",
            self.nodes,
            self.loops,
            self.clients,
            self.safety_us / 1000,
            self.liveness_us / 1000,
            self.latency.min_us,
            self.latency.mean_extra_us,
            self.chunk_pct,
            self.nemesis_mean_us / 1000
        );
        let faults: Vec<&str> = self.injected.iter().map(|f| f.name()).collect();
        let _ = write!(
            s,
            " injected=[{}] peer(drop={} dup={} reorder={} ppm)",
            faults.join(","),
            self.peer.drop_ppm,
            self.peer.dup_ppm,
            self.peer.reorder_ppm
        );
        let mix: Vec<String> = if self.replicated {
            crate::cluster::CLASSES
                .iter()
                .zip(&self.repl_weights)
                .map(|(c, w)| format!("{c}={w}"))
                .collect()
        } else {
            FAMILIES
                .iter()
                .zip(&self.family_weights)
                .map(|(f, w)| format!("{}={w}", f.name))
                .collect()
        };
        let _ = write!(
            s,
            " mix=[{}] batch<={} depth<={} think~{}us timeout={}ms hz={}",
            mix.join(","),
            self.batch_max,
            self.depth_max,
            self.think_mean_us,
            self.client_timeout_us / 1000,
            self.hz
        );
        let _ = write!(
            s,
            " sockbuf={}B push-limit={}B slow-reads={}%<={}ms",
            self.sock_buf_bytes,
            self.push_limit_bytes,
            self.slow_read_pct,
            self.slow_read_max_us / 1000
        );
        s
    }
}

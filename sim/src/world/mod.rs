//! The world: an event queue in virtual time, the network, node processes, clients, the
//! nemesis, and the run's phases.
//!
//! Events are ordered by (virtual time, sequence number); the sequence number makes equal
//! times deterministic. One [`Rand`] seeded from the run's seed is the only randomness.
//!
//! Phases: a safety phase with faults on; then at `heal_at` every fault is healed (partitions,
//! clogs, paused and crashed nodes, peer message faults) and a liveness phase follows in which
//! every client must get back to work; then a drain in which clients send nothing new and every
//! outstanding request must be answered. The run ends with the liveness checks.
//!
//! The node driver: bytes the network delivers to a node go through the same `RequestParser`
//! the server uses; the requests of one delivery run as one batch through the node's
//! `lattice_router::Router`, the routing the server runs, each applied to the node's reference
//! model (same `now`) just before the node runs it. The model's expected reply is queued on the
//! connection; when the client decodes a reply from its byte stream it is checked against the
//! head of that queue. A node's connections are spread over its simulated event loops: output
//! for a connection on another loop is mail, delivered when that loop wakes a moment later.

mod checks;
mod clients;
mod faults;
mod node;
mod peers;
mod streams;
#[cfg(test)]
mod tests;
mod upload;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use bytes::{Bytes, BytesMut};
use lattice_node::{ConnId, Input, Micros};
use lattice_persist::AckMode;
use lattice_resp::RequestParser;
use lattice_router::ConnFlow;

use crate::bucket::SimBucket;
use crate::check::{Expect, ScanState, Verifier};
use crate::client::Client;
use crate::clock::Clock;
use crate::cluster::History;
use crate::config::RunConfig;
use crate::fault::FaultCounts;
use crate::net::{NetState, PeerNetwork, Pipe};
use crate::process::Host;
use crate::rng::Rand;
use crate::trace::{TraceEvent, Tracer};
use upload::UPLOAD_STEP_US;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Safety,
    Liveness,
    Drain,
    End,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    Pipe {
        conn: u64,
        to_node: bool,
    },
    NodeTimer {
        node: usize,
        gen: u64,
    },
    /// Event loop `loop_index` of incarnation `incarnation` of host `node` was woken for mail.
    LoopWake {
        node: usize,
        loop_index: usize,
        incarnation: u32,
    },
    ClientWake {
        client: usize,
    },
    /// The client read bytes of connection `conn`: its node's socket has room again.
    Writable {
        conn: u64,
    },
    PeerTick,
    Heartbeat {
        node: usize,
    },
    Nemesis,
    /// Membership runs: this node is asked to leave the cluster.
    Leave {
        node: usize,
    },
    FaultEnd {
        id: u64,
    },
    /// A replica's object-store driver: a due answer delivered, the next call started.
    Upload {
        node: usize,
    },
    Phase(Phase),
}

struct Sched {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Sched {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Sched {}
impl PartialOrd for Sched {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Sched {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Why a batch ends before the connection's buffer is used up.
enum Cut {
    /// The model settles a random outcome from the reply of the request run at this node time.
    Settle(u64),
    /// The request closes its own connection (QUIT, CLIENT KILL of itself).
    Closed,
}

/// The node side of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeSide {
    /// The connection request is still travelling.
    Pending,
    Open,
    Done,
}

/// A client connection: both byte streams, the node driver's parser, the client's decoder, and
/// the expected replies of the requests the node executed.
struct Conn {
    client: usize,
    node: usize,
    /// The node's event loop serving it (set when the node accepts it).
    loop_index: usize,
    /// Another connection killed it (CLIENT KILL): the node is done with it, though its loop
    /// may still run requests it read before the close reached it, which the node must ignore.
    killed: bool,
    addr: String,
    to_node: Pipe,
    to_client: Pipe,
    client_open: bool,
    node_side: NodeSide,
    parser: RequestParser,
    inbuf: BytesMut,
    rx: BytesMut,
    expected: VecDeque<Expect>,
    scan: ScanState,
    /// Replicated mode: history indices of the requests sent on this connection and not yet
    /// executed, in order (bytes arrive in order; a reset ends the connection).
    ops: VecDeque<u64>,
    /// The node side's output queue and reading state, as the server keeps them
    /// (`lattice_router::ConnFlow`): `inbuf` holds what a paused connection was sent.
    flow: ConnFlow,
    /// Bytes the node wrote towards the client that the client has not read yet; the node's
    /// socket takes no more than `RunConfig::sock_buf_bytes` of them.
    unread_by_client: usize,
    /// An `Ev::Writable` is queued for this connection.
    writable_queued: bool,
    /// The node closed the connection dropping output it could not deliver (pushes over the
    /// bound, or a kill while the client was not reading): its close may come before replies
    /// the model expected.
    cut_off: bool,
}

/// What ends an injected fault.
enum Active {
    Partition(Vec<(usize, usize)>),
    Crashed(usize),
    Paused(usize),
}

#[derive(Clone, Debug, Default)]
pub struct RunStats {
    /// Replies received and checked.
    pub ops: u64,
    /// Requests executed by nodes.
    pub requests: u64,
    pub events: u64,
    pub connects: u64,
    pub timeouts: u64,
    /// Full invariant checks of a node, and checks of what a step changed.
    pub invariant_checks: u64,
    pub changed_checks: u64,
    pub virtual_us: u64,
    /// Replicated mode: peer messages the replicas sent and the ones delivered to them.
    pub peer_sent: u64,
    pub peer_delivered: u64,
    /// Replicated mode: requests acknowledged, and sent without a reply (indeterminate).
    pub acked: u64,
    pub indeterminate: u64,
    /// Partitioned mode, summed over the nodes at the end: hot-key copies taken, reads served
    /// from copies, holders an owner registered (`lattice_node::HotCounts`).
    pub hot_copies: u64,
    pub hot_local_reads: u64,
    pub hot_holders: u64,
    /// Frames that answered no request (pub/sub messages and extra confirmations).
    pub pushes: u64,
    /// Connections whose node socket filled (reading paused), ones read again at once when it
    /// drained because input had waited (the wake-up), and ones closed for pushes over the
    /// bound.
    pub socket_full: u64,
    pub wakeups: u64,
    pub push_cutoffs: u64,
    /// Commands generated per workload family (index into `workload::FAMILIES`).
    pub family_commands: Vec<u64>,
}

pub struct World {
    pub cfg: RunConfig,
    /// While a request's reply settles the model (a random SPOP): the connection and the bytes
    /// the node wrote to it.
    capture: Option<(u64, BytesMut)>,
    rng: Rand,
    /// The slow readers' draws: a stream of its own, so that runs with none draw as before.
    flow_rng: Rand,
    /// Connections whose node side has output queued this step; written at the step's end,
    /// as the server writes at the end of a loop's turn.
    to_flush: Vec<u64>,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Sched>>,
    net: NetState,
    peers: PeerNetwork,
    peer_tick_at: Option<u64>,
    hosts: Vec<Host>,
    clients: Vec<Client>,
    /// Indexed by connection id (ids start at 1).
    conns: Vec<Option<Conn>>,
    pub tracer: Tracer,
    verifier: Verifier,
    /// Replicated mode: every request sent, for the end-of-run checkers.
    history: History,
    replicated: bool,
    /// `link_peer[a * n + b]`: the replica id of host `b` that host `a` was last told is
    /// reachable (`PeerUp`), or `None` after `PeerDown` / before any `PeerUp`.
    link_peer: Vec<Option<u32>>,
    /// `pair_state[a * n + b]` for `a < b`: the incarnations' ids while the two hosts can reach
    /// each other (both up, no partition either way), as a TCP connection between them would.
    pair_state: Vec<Option<(u32, u32)>>,
    /// `link_epoch[a * n + b]` for `a < b`: bumped whenever `pair_state` changes. Peer messages
    /// carry the epoch they were sent in and are dropped if it changed before they arrive: a
    /// new connection does not deliver what was in flight on the one that failed.
    link_epoch: Vec<u64>,
    pub phase: Phase,
    heal_at: u64,
    /// From when a request must be answered within the client timeout (see `on_phase`).
    settled_at: u64,
    pub faults: FaultCounts,
    active: Vec<(u64, Active)>,
    next_fault_id: u64,
    /// Streams held back by a partition: (connection, towards the node).
    parked: Vec<(u64, bool)>,
    /// Last heartbeat delivered, per (from, to).
    heartbeats: Vec<u64>,
    pub failure: Option<String>,
    pub stats: RunStats,
}

impl World {
    pub fn new(cfg: RunConfig, strict: bool, tracer: Tracer) -> World {
        let mut rng = Rand::new(cfg.seed);
        let cluster_size = if cfg.replicated { cfg.nodes } else { 1 };
        let hosts: Vec<Host> = (0..cfg.nodes)
            .map(|i| {
                let mut host = Host::new(
                    i,
                    Clock::new(cfg.clocks[i].0, cfg.clocks[i].1),
                    cfg.hz,
                    cluster_size,
                );
                host.loops = cfg.loops;
                host.replication_factor = cfg.replication_factor;
                host.hotkey_threshold = cfg.hotkey_threshold;
                host.slice_keys = cfg.slice_keys;
                host.fsync = if cfg.replicated { cfg.repl_disk } else { None };
                if host.fsync.is_some() {
                    host.s3 = cfg.repl_s3;
                    host.bucket = cfg
                        .repl_s3
                        .map(|_| SimBucket::new(cfg.seed ^ (i as u64) << 48));
                }
                if host.fsync == Some("always") || host.s3 == Some(AckMode::Sync) {
                    host.durable_from = 1;
                }
                host
            })
            .collect();
        let clients = (0..cfg.clients)
            .map(|_| Client::new(rng.below(cfg.nodes as u64) as usize))
            .collect();
        let net = NetState::new(cfg.nodes + cfg.clients, cfg.latency.clone());
        let peers = PeerNetwork::new(cfg.peer.clone());
        let n = cfg.nodes;
        World {
            capture: None,
            rng,
            flow_rng: Rand::new(cfg.seed ^ 0x534C_4F57_5245_4144),
            to_flush: Vec::new(),
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            net,
            peers,
            peer_tick_at: None,
            hosts,
            clients,
            conns: vec![None],
            tracer,
            verifier: Verifier::new(strict),
            history: History::new(cfg.partitioned()).with_hot_reads(cfg.hot_read_pct),
            replicated: cfg.replicated,
            link_peer: vec![None; n * n],
            pair_state: vec![None; n * n],
            link_epoch: vec![0; n * n],
            phase: Phase::Safety,
            heal_at: u64::MAX,
            settled_at: u64::MAX,
            faults: FaultCounts::default(),
            active: Vec::new(),
            next_fault_id: 0,
            parked: Vec::new(),
            heartbeats: vec![0; n * n],
            failure: None,
            stats: RunStats::default(),
            cfg,
        }
    }

    pub fn now(&self) -> u64 {
        self.now
    }

    pub fn known_hits(&self) -> &std::collections::BTreeMap<&'static str, u64> {
        &self.verifier.known_hits
    }

    pub fn scan_iterations(&self) -> u64 {
        self.verifier.scan_iterations
    }

    fn at(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse(Sched {
            at: at.max(self.now),
            seq: self.seq,
            ev,
        }));
    }

    fn trace(&mut self, ev: TraceEvent) {
        self.tracer.record(self.now, ev);
    }

    fn fail(&mut self, msg: String) {
        if self.failure.is_none() {
            self.failure = Some(msg);
        }
    }

    fn client_host(&self, client: usize) -> usize {
        self.cfg.nodes + client
    }

    /// Runs the whole simulation; returns with `failure` set if a check failed.
    pub fn run(&mut self) {
        self.start();
        self.run_until(u64::MAX);
        self.stats.virtual_us = self.now;
        self.finish_counts();
    }

    /// Processes events due up to `until`, stopping early on a failure or at the end.
    fn run_until(&mut self, until: u64) {
        while self.queue.peek().is_some_and(|Reverse(s)| s.at <= until) {
            let Reverse(s) = self.queue.pop().expect("peeked");
            self.now = s.at;
            self.stats.events += 1;
            self.handle(s.ev);
            if self.failure.is_some() || self.phase == Phase::End {
                break;
            }
        }
    }

    /// Starts every node, links the replicas, and schedules clients, the nemesis and the phases.
    fn start(&mut self) {
        self.trace(TraceEvent::Phase("safety"));
        for i in 0..self.hosts.len() {
            let (seed, bug) = (self.rng.next(), self.rng.next());
            if let Err(e) = self.hosts[i].start(seed, bug, 0) {
                return self.fail(e);
            }
            self.trace(TraceEvent::Process {
                node: i as u32,
                what: "start",
            });
            self.schedule_timer(i);
            // Replicas talk for themselves; the driver's heartbeats stand in for that in
            // single-node worlds only.
            if !self.replicated {
                let first = self.rng.below(self.cfg.heartbeat_us);
                self.at(first, Ev::Heartbeat { node: i });
            }
        }
        for i in 0..self.hosts.len() {
            if self.hosts[i].bucket.is_some() {
                let t = self.rng.below(UPLOAD_STEP_US);
                self.at(t, Ev::Upload { node: i });
            }
        }
        self.preload();
        self.sync_links();
        for c in 0..self.clients.len() {
            let t = self.rng.below(10_000);
            self.at(t, Ev::ClientWake { client: c });
        }
        if !self.cfg.injected.is_empty() {
            let t = self.rng.exp(self.cfg.nemesis_mean_us as f64) as u64;
            self.at(t, Ev::Nemesis);
        }
        if let Some((node, at)) = self.cfg.leave {
            self.at(at, Ev::Leave { node });
        }
        let s = self.cfg.safety_us;
        self.at(s, Ev::Phase(Phase::Liveness));
        let l = s + self.cfg.liveness_us;
        self.at(l, Ev::Phase(Phase::Drain));
        self.at(l + self.cfg.drain_us, Ev::Phase(Phase::End));
    }

    /// Writes `cfg.preload_keys` keys into the first replica before any link is up: the
    /// other replicas receive them by an anti-entropy transfer, in slices, while the clients
    /// run (and a replica restarted empty receives them again). The workload never touches
    /// them; the end-of-run digest comparison checks that every replica holds them.
    fn preload(&mut self) {
        if !self.replicated || self.cfg.preload_keys == 0 {
            return;
        }
        let t = Micros(self.hosts[0].clock.read(self.now));
        let node = self.hosts[0].node_mut().expect("just started");
        let conn = ConnId(1 << 40 | 1 << 39);
        node.handle(
            t,
            Input::Connected {
                conn,
                peer_addr: "10.9.9.8:9999".into(),
                local_addr: "10.0.0.1:6379".into(),
            },
        );
        for i in 0..self.cfg.preload_keys {
            let args = vec![
                Bytes::from_static(b"SET"),
                Bytes::from(format!("bulk:{i}")),
                Bytes::from(format!("preloaded value {i}")),
            ];
            node.handle(t, Input::Request { conn, args });
            // Replies go to a connection nobody reads; there is no peer to send to yet.
            while node.poll_output().is_some() {}
        }
        node.handle(t, Input::Closed { conn });
        while node.poll_output().is_some() {}
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Pipe { conn, to_node } => self.on_pipe(conn, to_node),
            Ev::NodeTimer { node, gen } => self.on_timer(node, gen),
            Ev::LoopWake {
                node,
                loop_index,
                incarnation,
            } => self.on_loop_wake(node, loop_index, incarnation),
            Ev::ClientWake { client } => {
                if self.clients[client].wake_at.is_some_and(|w| w <= self.now) {
                    self.clients[client].wake_at = None;
                }
                self.client_step(client);
            }
            Ev::Writable { conn } => self.on_writable(conn),
            Ev::PeerTick => self.on_peer_tick(),
            Ev::Heartbeat { node } => self.on_heartbeat(node),
            Ev::Nemesis => self.on_nemesis(),
            Ev::Leave { node } => self.on_leave(node),
            Ev::FaultEnd { id } => self.end_fault(id),
            Ev::Upload { node } => self.on_upload(node),
            Ev::Phase(p) => self.on_phase(p),
        }
        self.flush_pending();
    }
}

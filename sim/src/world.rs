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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use bytes::{Bytes, BytesMut};
use lattice_node::{ConnId, Input, Micros};
use lattice_resp::{decode_frame, Frame, Limits, RequestParser};
use lattice_router::{Mail, Route};

use crate::check::{Check, Expect, ScanState, Verifier};
use crate::client::{encode, Client, ReplyMode};
use crate::clock::{Clock, EPOCH_US};
use crate::cluster::{self, History, NodeView};
use crate::config::RunConfig;
use crate::fault::{FaultClass, FaultCounts};
use crate::net::{chunk, NetState, PeerFaults, PeerNetwork, Pipe, Seg};
use crate::process::Host;
use crate::rng::Rand;
use crate::trace::{escape, TraceEvent, Tracer};
use crate::workload::{inline_safe, Cmd, Gen, Tag, FAMILIES, PUBSUB_FAMILY, TX_FAMILY};

/// The largest peer message a replica may hand a driver (the real driver's frame limit); a
/// bigger one is a node bug, reported as a failure.
const MAX_PEER_MESSAGE_BYTES: usize = 16 << 20;

/// Peer messages kept for a paused node (see `on_peer_tick`).
const PAUSED_INBOX_MAX: usize = 65_536;

/// Virtual time between mail being posted for another event loop and that loop running (a
/// thread woken through its eventfd), at most.
const LOOP_WAKE_MAX_US: u64 = 50;

/// The loop that runs a node's timers (the server's first loop).
const TIMER_LOOP: usize = 0;

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
    PeerTick,
    Heartbeat {
        node: usize,
    },
    Nemesis,
    FaultEnd {
        id: u64,
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
    pub invariant_checks: u64,
    pub virtual_us: u64,
    /// Replicated mode: peer messages the replicas sent and the ones delivered to them.
    pub peer_sent: u64,
    pub peer_delivered: u64,
    /// Replicated mode: requests acknowledged, and sent without a reply (indeterminate).
    pub acked: u64,
    pub indeterminate: u64,
    /// Frames that answered no request (pub/sub messages and extra confirmations).
    pub pushes: u64,
    /// Commands generated per workload family (index into `workload::FAMILIES`).
    pub family_commands: Vec<u64>,
}

pub struct World {
    pub cfg: RunConfig,
    /// While a request's reply settles the model (a random SPOP): the connection and the bytes
    /// the node wrote to it.
    capture: Option<(u64, BytesMut)>,
    rng: Rand,
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
            history: History::new(cfg.partitioned()),
            replicated: cfg.replicated,
            link_peer: vec![None; n * n],
            pair_state: vec![None; n * n],
            link_epoch: vec![0; n * n],
            phase: Phase::Safety,
            heal_at: u64::MAX,
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
            self.hosts[i].start(seed, bug, 0);
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
        self.sync_links();
        for c in 0..self.clients.len() {
            let t = self.rng.below(10_000);
            self.at(t, Ev::ClientWake { client: c });
        }
        if !self.cfg.injected.is_empty() {
            let t = self.rng.exp(self.cfg.nemesis_mean_us as f64) as u64;
            self.at(t, Ev::Nemesis);
        }
        let s = self.cfg.safety_us;
        self.at(s, Ev::Phase(Phase::Liveness));
        let l = s + self.cfg.liveness_us;
        self.at(l, Ev::Phase(Phase::Drain));
        self.at(l + self.cfg.drain_us, Ev::Phase(Phase::End));
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
            Ev::PeerTick => self.on_peer_tick(),
            Ev::Heartbeat { node } => self.on_heartbeat(node),
            Ev::Nemesis => self.on_nemesis(),
            Ev::FaultEnd { id } => self.end_fault(id),
            Ev::Phase(p) => self.on_phase(p),
        }
    }

    // ---------------------------------------------------------------- streams

    fn conn(&mut self, id: u64) -> Option<&mut Conn> {
        self.conns.get_mut(id as usize).and_then(|c| c.as_mut())
    }

    fn pipe(&mut self, id: u64, to_node: bool) -> Option<&mut Pipe> {
        self.conn(id).map(|c| {
            if to_node {
                &mut c.to_node
            } else {
                &mut c.to_client
            }
        })
    }

    /// Makes sure a delivery event is queued for a pipe with segments.
    fn ensure_scheduled(&mut self, id: u64, to_node: bool) {
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
    fn stream_write(&mut self, id: u64, to_node: bool, data: Bytes) {
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

    fn stream_push(&mut self, id: u64, to_node: bool, seg: Seg) {
        let at = self.now + self.net.sample_latency(&mut self.rng, self.now);
        if let Some(pipe) = self.pipe(id, to_node) {
            pipe.push(at, seg);
        }
        self.ensure_scheduled(id, to_node);
    }

    fn on_pipe(&mut self, id: u64, to_node: bool) {
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

    fn unpark(&mut self, id: u64, to_node: bool) {
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

    fn unpark_partitioned(&mut self) {
        let parked = std::mem::take(&mut self.parked);
        for (id, to_node) in parked {
            self.unpark(id, to_node);
        }
    }

    fn maybe_reap(&mut self, id: u64) {
        let done = self
            .conn(id)
            .is_some_and(|c| !c.client_open && c.node_side == NodeSide::Done);
        if done {
            self.conns[id as usize] = None;
        }
    }

    // ---------------------------------------------------------------- node driver

    fn deliver_to_node(&mut self, id: u64, node: usize) {
        let now = self.now;
        let mut touched = false;
        while let Some(c) = self.conn(id) {
            let Some(seg) = c.to_node.pop_due(now) else {
                break;
            };
            let (kind, len) = seg_kind(&seg);
            self.trace(TraceEvent::Deliver {
                conn: id,
                to_node: true,
                kind,
                len,
            });
            match seg {
                Seg::Syn => {
                    if !self.hosts[node].up() {
                        // Connection refused.
                        if let Some(c) = self.conn(id) {
                            c.node_side = NodeSide::Done;
                        }
                        self.stream_push(id, false, Seg::Rst);
                        continue;
                    }
                    let host = &mut self.hosts[node];
                    let loop_index = host.next_loop;
                    host.next_loop = (loop_index + 1) % host.loops;
                    let addr = {
                        let c = self.conn(id).expect("checked");
                        c.node_side = NodeSide::Open;
                        c.loop_index = loop_index;
                        c.addr.clone()
                    };
                    let host = &mut self.hosts[node];
                    host.conns.insert(id);
                    host.model.connect(id, addr.clone());
                    let t = host.clock.read(now);
                    let router = host.router.as_mut().expect("up");
                    let slot = id as usize;
                    router.register(ConnId(id), Route { loop_index, slot });
                    router.handle(
                        Micros(t),
                        Input::Connected {
                            conn: ConnId(id),
                            peer_addr: addr,
                            local_addr: format!("10.0.0.{}:6379", node + 1),
                        },
                    );
                    self.drain(node, Some(id));
                    touched = true;
                }
                Seg::Data(b) => {
                    let c = self.conn(id).expect("checked");
                    if c.node_side != NodeSide::Open {
                        continue;
                    }
                    c.inbuf.extend_from_slice(&b);
                    self.parse_and_execute(id, node);
                    touched = true;
                }
                Seg::Fin | Seg::Rst => {
                    let c = self.conn(id).expect("checked");
                    if c.node_side != NodeSide::Open {
                        c.node_side = NodeSide::Done;
                        continue;
                    }
                    c.node_side = NodeSide::Done;
                    c.inbuf.clear();
                    let loop_index = c.loop_index;
                    let host = &mut self.hosts[node];
                    host.conns.remove(&id);
                    host.model.disconnect(id);
                    let t = host.clock.read(now);
                    let router = host
                        .router
                        .as_mut()
                        .expect("open connections belong to a live node");
                    router.unregister(ConnId(id));
                    router.handle(Micros(t), Input::Closed { conn: ConnId(id) });
                    self.drain_on(node, None, Some(loop_index));
                    touched = true;
                }
            }
        }
        if touched {
            self.after_node_step(node);
        }
    }

    /// Runs the invariant checker of the node a step touched (nodes a step did not touch have
    /// not changed), and re-arms its timer.
    fn after_node_step(&mut self, node: usize) {
        if let Some(r) = self.hosts[node].router.as_ref() {
            r.check_invariants();
            self.stats.invariant_checks += 1;
        }
        self.schedule_timer(node);
    }

    /// Runs everything complete in the connection's buffer as one batch (the server's read
    /// batch), ending the batch early after a request whose reply the model settles from, or
    /// that closes the connection.
    fn parse_and_execute(&mut self, id: u64, node: usize) {
        let mut commands = 0;
        loop {
            let Some(c) = self.conn(id) else {
                return;
            };
            if c.node_side != NodeSide::Open {
                c.inbuf.clear();
                return;
            }
            match c.parser.parse(&mut c.inbuf) {
                Ok(Some(args)) => {
                    if commands == 0 {
                        self.router(node).begin_batch();
                    }
                    commands += 1;
                    if let Some(cut) = self.execute(id, node, args) {
                        self.end_batch(id, node, commands, None);
                        commands = 0;
                        if let Cut::Settle(t) = cut {
                            self.settle(node, t);
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let message = e.message().to_string();
                    c.inbuf.clear();
                    if commands == 0 {
                        self.router(node).begin_batch();
                    }
                    self.protocol_error(id, node, &message);
                    self.end_batch(id, node, commands, Some(message));
                    return;
                }
            }
        }
        if commands > 0 {
            self.end_batch(id, node, commands, None);
        }
    }

    fn router(&mut self, node: usize) -> &mut crate::process::NodeRouter {
        self.hosts[node].router.as_mut().expect("up")
    }

    /// Ends the batch running for `id`: its output is carried out as the server would.
    fn end_batch(&mut self, id: u64, node: usize, commands: u64, protocol_error: Option<String>) {
        let mut own_out = Vec::new();
        let close =
            self.router(node)
                .end_batch(ConnId(id), commands, 0, protocol_error, &mut own_out);
        self.carry_out(node, Some(id), own_out, close);
    }

    /// Runs one request of the batch. Returns why the batch must end after it, if it must.
    fn execute(&mut self, id: u64, node: usize, args: Vec<Bytes>) -> Option<Cut> {
        if self.replicated {
            self.execute_replicated(id, node, args);
            return None;
        }
        let now = self.now;
        let host = &mut self.hosts[node];
        let t = host.clock.read(now);
        if self.conns[id as usize].as_ref().is_some_and(|c| c.killed) {
            self.trace(TraceEvent::Request {
                node: node as u32,
                conn: id,
                now_us: t,
                args: args.clone(),
            });
            self.router(node).request(Micros(t), ConnId(id), args);
            return None;
        }
        let applied = host.model.apply(id, t, &args);
        if applied.settle {
            self.capture = Some((id, BytesMut::new()));
        }
        self.stats.requests += 1;
        self.trace(TraceEvent::Request {
            node: node as u32,
            conn: id,
            now_us: t,
            args: args.clone(),
        });
        for p in applied.pushes {
            if let Some(pc) = self.conn(p.conn) {
                pc.expected.push_back(Expect {
                    args: args.clone(),
                    check: p.check,
                    op: None,
                    at_us: t,
                    group: p.group,
                    answers: p.answers,
                });
            }
        }
        let c = self.conn(id).expect("executing on a live connection");
        if let Some(check) = applied.reply {
            c.expected.push_back(Expect {
                args: args.clone(),
                check,
                at_us: t,
                op: None,
                group: 0,
                answers: true,
            });
        }
        let closes_self = applied.close_self || applied.kill.contains(&id);
        if applied.close_self {
            c.expected.push_back(Expect {
                args: Vec::new(),
                check: Check::Close,
                at_us: t,
                op: None,
                group: 0,
                answers: true,
            });
        }
        for v in applied.kill {
            if let Some(vc) = self.conn(v) {
                vc.killed = true;
                vc.expected.push_back(Expect {
                    args: Vec::new(),
                    check: Check::Close,
                    at_us: t,
                    op: None,
                    group: 0,
                    answers: true,
                });
            }
        }
        self.router(node).request(Micros(t), ConnId(id), args);
        if closes_self {
            // The batch ends with the connection: the node answers nothing after it.
            Some(Cut::Closed)
        } else {
            applied.settle.then_some(Cut::Settle(t))
        }
    }

    /// The model learns a random outcome (a random SPOP) from the reply the batch just wrote.
    fn settle(&mut self, node: usize, t: u64) {
        if let Some((_, mut out)) = self.capture.take() {
            // The node answers at once: its reply is the last frame it wrote to the connection.
            let mut last = None;
            while let Ok(Some(f)) = decode_frame(&mut out) {
                last = Some(f);
            }
            if let Some(f) = last {
                self.hosts[node].model.settle(&f, t);
            }
        }
    }

    /// Replicated mode: no reference model (other replicas write the same keys); the request's
    /// check comes from the history, which learns that it executed here, and for a SET, the
    /// stamp the replica gave it.
    fn execute_replicated(&mut self, id: u64, node: usize, args: Vec<Bytes>) {
        let now = self.now;
        let host = &mut self.hosts[node];
        let t = host.clock.read(now);
        let incarnation = host.incarnation;
        self.stats.requests += 1;
        self.trace(TraceEvent::Request {
            node: node as u32,
            conn: id,
            now_us: t,
            args: args.clone(),
        });
        let c = self.conn(id).expect("executing on a live connection");
        let op = c.ops.pop_front();
        let check = match op {
            Some(op) => self.history.check(op),
            None => Check::NotError,
        };
        let c = self.conn(id).expect("executing on a live connection");
        c.expected.push_back(Expect {
            args: args.clone(),
            check,
            at_us: t,
            op,
            group: 0,
            answers: true,
        });
        let set_key = op.and_then(|op| {
            self.history.executed(op, node, incarnation);
            self.history.is_set(op).map(|k| k.to_vec())
        });
        let router = self.router(node);
        router.request(Micros(t), ConnId(id), args);
        if let (Some(op), Some(key)) = (op, set_key) {
            let stamp = router.node_mut().string_stamp(&key);
            self.history.stamped(op, stamp);
        }
    }

    /// The read ended in bytes that are not RESP: the model expects the error and the close
    /// (the batch's end hands the node the error).
    fn protocol_error(&mut self, id: u64, node: usize, message: &str) {
        let t = self.hosts[node].clock.read(self.now);
        let c = self.conn(id).expect("live");
        c.expected.push_back(Expect {
            args: Vec::new(),
            check: Check::err(&format!("ERR {message}")),
            at_us: t,
            op: None,
            group: 0,
            answers: true,
        });
        c.expected.push_back(Expect {
            args: Vec::new(),
            check: Check::Close,
            at_us: t,
            op: None,
            group: 0,
            answers: true,
        });
        self.trace(TraceEvent::ProtocolError {
            node: node as u32,
            conn: id,
            message: message.to_string(),
        });
    }

    /// Carries out everything the node wants done after an input for connection `own` (None:
    /// an input of no connection's, such as a peer message).
    fn drain(&mut self, node: usize, own: Option<u64>) {
        let current = own.and_then(|id| self.conns[id as usize].as_ref().map(|c| c.loop_index));
        self.drain_on(node, own, current);
    }

    /// [`World::drain`] run by event loop `current` (None: by no loop, as the server's replica
    /// links are).
    fn drain_on(&mut self, node: usize, own: Option<u64>, current: Option<usize>) {
        let host = &mut self.hosts[node];
        let t = host.clock.read(self.now);
        let Some(router) = host.router.as_mut() else {
            return;
        };
        let mut own_out = Vec::new();
        let close = router.drain(Micros(t), own.map(ConnId), &mut own_out);
        self.carry_out_on(node, own, own_out, close, current);
    }

    fn carry_out(&mut self, node: usize, own: Option<u64>, own_out: Vec<Bytes>, close: bool) {
        let current = own.and_then(|id| self.conns[id as usize].as_ref().map(|c| c.loop_index));
        self.carry_out_on(node, own, own_out, close, current);
    }

    /// What the server's event loop `current` does with a drain's results: the own
    /// connection's output, then the loop's own mail (taken right after each batch), peer
    /// messages, and a wake-up for every other loop that got mail.
    fn carry_out_on(
        &mut self,
        node: usize,
        own: Option<u64>,
        own_out: Vec<Bytes>,
        close: bool,
        current: Option<usize>,
    ) {
        if let Some(id) = own {
            for data in own_out {
                self.write_to(node, id, data);
            }
            if close {
                self.node_close(node, id);
            }
        }
        if let Some(l) = current {
            self.take_loop_mail(node, l);
        }
        let Some(router) = self.hosts[node].router.as_mut() else {
            return;
        };
        let sends: Vec<_> = router.take_peer_sends().collect();
        let mut to_wake = Vec::new();
        router.take_loops_to_wake(&mut to_wake);
        let mut sent = false;
        for (peer, data) in sends {
            sent |= self.peer_send(node, peer.0, data);
        }
        if sent {
            self.schedule_peer_tick();
        }
        let incarnation = self.hosts[node].incarnation;
        for loop_index in to_wake {
            if Some(loop_index) == current {
                continue;
            }
            let at = self.now + self.rng.range(1, LOOP_WAKE_MAX_US);
            self.at(
                at,
                Ev::LoopWake {
                    node,
                    loop_index,
                    incarnation,
                },
            );
        }
    }

    /// Event loop `loop_index` of `node` takes its mail.
    fn take_loop_mail(&mut self, node: usize, loop_index: usize) {
        let mut mail = Vec::new();
        match self.hosts[node].router.as_mut() {
            Some(r) => r.take_mail(loop_index, &mut mail),
            None => return,
        }
        for m in mail {
            match m {
                Mail::Write { conn, data, .. } => {
                    if self.served_by(conn.0, node, loop_index) {
                        self.write_to(node, conn.0, data);
                    }
                }
                Mail::Close { conn, .. } => {
                    if self.served_by(conn.0, node, loop_index) {
                        self.node_close(node, conn.0);
                    }
                }
            }
        }
    }

    /// Mail can outlive its connection: it is for `id` only while `loop_index` of `node`
    /// still serves it.
    fn served_by(&self, id: u64, node: usize, loop_index: usize) -> bool {
        self.conns
            .get(id as usize)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| {
                c.node == node && c.loop_index == loop_index && c.node_side == NodeSide::Open
            })
    }

    fn on_loop_wake(&mut self, node: usize, loop_index: usize, incarnation: u32) {
        let host = &self.hosts[node];
        if host.incarnation != incarnation || !host.up() || host.paused {
            // A paused node's loops take their mail when it resumes.
            return;
        }
        self.take_loop_mail(node, loop_index);
        self.after_node_step(node);
    }

    /// Bytes the node wrote to connection `id`.
    fn write_to(&mut self, node: usize, id: u64, data: Bytes) {
        if let Some((_, out)) = self.capture.as_mut().filter(|c| c.0 == id) {
            out.extend_from_slice(&data);
        }
        self.trace(TraceEvent::Output {
            node: node as u32,
            conn: id,
            data: data.clone(),
        });
        if self.conn(id).is_some() {
            self.stream_write(id, false, data);
        }
    }

    /// The node closed connection `id` (after everything written before).
    fn node_close(&mut self, node: usize, id: u64) {
        self.trace(TraceEvent::NodeClose {
            node: node as u32,
            conn: id,
        });
        let host = &mut self.hosts[node];
        host.conns.remove(&id);
        host.model.disconnect(id);
        if let Some(r) = host.router.as_mut() {
            r.unregister(ConnId(id));
        }
        if let Some(c) = self.conn(id) {
            c.node_side = NodeSide::Done;
            c.inbuf.clear();
            self.stream_push(id, false, Seg::Fin);
        }
    }

    /// Re-arms the node's timer event at the router's plan, moved earlier first if the node
    /// now wants its timers sooner (the server's wake-up of its timer loop).
    fn schedule_timer(&mut self, node: usize) {
        let now = self.now;
        let host = &mut self.hosts[node];
        if !host.running() {
            return;
        }
        if let Some(r) = host.router.as_mut() {
            r.earlier_timer();
        }
        let Some(v) = host.timer_due(now) else {
            return;
        };
        if host.timer_at == Some(v) {
            return;
        }
        host.timer_at = Some(v);
        host.timer_gen += 1;
        let gen = host.timer_gen;
        self.at(v, Ev::NodeTimer { node, gen });
    }

    fn on_timer(&mut self, node: usize, gen: u64) {
        let now = self.now;
        let host = &mut self.hosts[node];
        if host.timer_gen != gen || !host.up() {
            return;
        }
        host.timer_at = None;
        if host.paused {
            return; // deferred: re-armed on resume
        }
        let t = host.clock.read(now);
        let router = host.router.as_mut().expect("up");
        let next_us = router.run_timers(Micros(t)).map_or(u64::MAX, |d| d.0);
        router.plan_timers(next_us);
        self.trace(TraceEvent::Timer {
            node: node as u32,
            now_us: t,
        });
        self.carry_out_on(node, None, Vec::new(), false, Some(TIMER_LOOP));
        self.after_node_step(node);
    }

    // ---------------------------------------------------------------- clients

    fn wake(&mut self, client: usize, at: u64) {
        let c = &mut self.clients[client];
        if c.wake_at.is_some_and(|w| w <= at) {
            return;
        }
        c.wake_at = Some(at);
        self.at(at, Ev::ClientWake { client });
    }

    /// Everything a client does when something happened or its time came: reconnect, give up
    /// on a stuck connection, send the next batch, and arrange to be woken again.
    fn client_step(&mut self, ci: usize) {
        if self.phase == Phase::End || self.failure.is_some() {
            return;
        }
        let now = self.now;
        let timeout = self.cfg.client_timeout_us;
        let Some(id) = self.clients[ci].conn else {
            let at = self.clients[ci].reconnect_at;
            if now < at {
                self.wake(ci, at);
                return;
            }
            self.connect(ci);
            return self.client_step(ci);
        };
        // Give up on a connection whose oldest request (or expected close) is stuck.
        let c = &self.clients[ci];
        let stuck_since = match c.pending.front() {
            Some(p) => Some(p.sent_at),
            None if c.closing => Some(c.next_send_at),
            None => None,
        };
        if let Some(since) = stuck_since {
            if now >= since + timeout {
                if since >= self.heal_at {
                    let what = match c.pending.front() {
                        Some(p) => format!("a request ({:?})", p.tag),
                        None => "the close it was waiting for".to_string(),
                    };
                    self.fail(format!(
                        "liveness: client{ci} on c{id} waited {} ms for {what} sent after the faults were healed",
                        timeout / 1000
                    ));
                    return;
                }
                self.clients[ci].timeouts += 1;
                self.stats.timeouts += 1;
                self.abort(id, "client-timeout");
                self.client_lost_conn(ci);
                return self.client_step(ci);
            }
        }
        let c = &self.clients[ci];
        let can_send = self.phase <= Phase::Liveness && !c.closing;
        if can_send && now >= c.next_send_at && c.pending.len() < self.cfg.depth_max {
            self.send_batch(ci, id);
            let think = if self.rng.pct(self.cfg.think_zero_pct) {
                0
            } else {
                self.rng.exp(self.cfg.think_mean_us as f64) as u64
            };
            let c = &mut self.clients[ci];
            if c.conn.is_none() {
                return self.client_step(ci);
            }
            c.next_send_at = now + think.max(1);
        }
        let c = &self.clients[ci];
        let can_send = self.phase <= Phase::Liveness && !c.closing;
        let mut want = u64::MAX;
        if let Some(p) = c.pending.front() {
            want = want.min(p.sent_at + timeout);
        } else if c.closing {
            want = want.min(c.next_send_at + timeout);
        }
        if can_send && c.pending.len() < self.cfg.depth_max {
            want = want.min(c.next_send_at);
        }
        if want != u64::MAX {
            self.wake(ci, want);
        }
    }

    fn connect(&mut self, ci: usize) {
        let nodes = self.cfg.nodes as u64;
        if self.rng.pct(self.cfg.roam_pct) {
            self.clients[ci].home = self.rng.below(nodes) as usize;
        }
        let node = self.clients[ci].home;
        let id = self.conns.len() as u64;
        let addr = format!("10.1.{}.{}:{}", ci / 250, ci % 250 + 1, 30000 + id);
        self.conns.push(Some(Conn {
            client: ci,
            node,
            loop_index: 0,
            killed: false,
            addr,
            to_node: Pipe::default(),
            to_client: Pipe::default(),
            client_open: true,
            node_side: NodeSide::Pending,
            parser: RequestParser::new(Limits::default()),
            inbuf: BytesMut::new(),
            rx: BytesMut::new(),
            expected: VecDeque::new(),
            scan: ScanState::default(),
            ops: VecDeque::new(),
        }));
        let c = &mut self.clients[ci];
        c.drop_conn();
        c.conn = Some(id);
        c.connects += 1;
        c.next_send_at = self.now;
        self.trace(TraceEvent::Connect {
            client: ci as u32,
            conn: id,
            node: node as u32,
        });
        self.stream_push(id, true, Seg::Syn);
    }

    /// The client forgets its connection and will reconnect after a backoff.
    fn client_lost_conn(&mut self, ci: usize) {
        let backoff = self.rng.range(1_000, self.cfg.backoff_max_us);
        let c = &mut self.clients[ci];
        c.drop_conn();
        c.reconnect_at = self.now + backoff;
    }

    /// Aborts a connection from the client side (timeout): in-flight bytes are lost, the node
    /// sees a reset.
    fn abort(&mut self, id: u64, why: &'static str) {
        self.trace(TraceEvent::Closed { conn: id, why });
        let Some(c) = self.conn(id) else {
            return;
        };
        c.to_node.clear();
        c.to_client.clear();
        c.client_open = false;
        match c.node_side {
            NodeSide::Pending => c.node_side = NodeSide::Done,
            NodeSide::Open => self.stream_push(id, true, Seg::Rst),
            NodeSide::Done => {}
        }
        self.maybe_reap(id);
    }

    /// Draws the next command, within what this client may send now.
    fn generate(&mut self, ci: usize, id: u64) -> Cmd {
        let mode = self.clients[ci].mode;
        if mode == ReplyMode::Off {
            return Cmd::new("CLIENT").a("REPLY").a("ON").tag(Tag::ReplyOn);
        }
        let c = &self.clients[ci];
        let in_multi = c.in_multi;
        // An open transaction is closed soon (EXEC or DISCARD come from its family).
        let fam = if in_multi && self.rng.pct(25) {
            TX_FAMILY
        } else if !c.subs.is_empty() && self.rng.pct(25) {
            // A subscriber mostly speaks pub/sub (in RESP2 nothing else runs).
            PUBSUB_FAMILY
        } else {
            self.rng.weighted(&self.cfg.family_weights)
        };
        if self.stats.family_commands.len() < FAMILIES.len() {
            self.stats.family_commands.resize(FAMILIES.len(), 0);
        }
        self.stats.family_commands[fam] += 1;
        let disruptive = self.rng.pct(self.cfg.disruptive_pct) && !in_multi;
        let client_now_ms = (EPOCH_US + self.now) / 1000;
        let addr = self
            .conns
            .get(id as usize)
            .and_then(|c| c.as_ref())
            .map(|c| c.addr.clone())
            .unwrap_or_default();
        let c = &self.clients[ci];
        let mut g = Gen {
            rng: &mut self.rng,
            client_now_ms,
            conn_id: id,
            conn_addr: &addr,
            scan_next: c.scan_next.as_ref(),
            scan_busy: c.scan_busy || in_multi,
            disruptive: disruptive && mode == ReplyMode::On,
            in_multi,
            subscribed: !c.subs.is_empty(),
            replies_on: mode == ReplyMode::On,
        };
        (FAMILIES[fam].gen)(&mut g)
    }

    fn send_batch(&mut self, ci: usize, id: u64) {
        let room = self.cfg.depth_max - self.clients[ci].pending.len();
        let n = self.rng.range(1, self.cfg.batch_max).min(room as u64);
        let mut buf = BytesMut::new();
        if self.replicated {
            // Every request goes into the history; an expiry probe's four requests always go
            // out together (so a batch may exceed the room by up to three).
            let mut sent = 0;
            while sent < n {
                let reqs = self.history.generate(&mut self.rng, &self.cfg.repl_weights);
                for (op, args) in reqs {
                    let inline = self.rng.pct(self.cfg.inline_pct) && inline_safe(&args);
                    encode(&args, inline, &mut buf);
                    self.clients[ci].sent(self.now, Tag::Plain);
                    if let Some(c) = self.conn(id) {
                        c.ops.push_back(op);
                    }
                    sent += 1;
                }
            }
            let data = buf.freeze();
            self.trace(TraceEvent::Send {
                client: ci as u32,
                conn: id,
                data: data.clone(),
            });
            self.stream_write(id, true, data);
            return;
        }
        for _ in 0..n {
            let cmd = self.generate(ci, id);
            if cmd.tag == Tag::Garbage {
                buf.extend_from_slice(&cmd.args[0]);
            } else {
                let inline = self.rng.pct(self.cfg.inline_pct) && inline_safe(&cmd.args);
                encode(&cmd.args, inline, &mut buf);
            }
            let stop = matches!(cmd.tag, Tag::Quit | Tag::Garbage);
            if cmd.tag != Tag::Garbage {
                self.clients[ci].track(&cmd.args);
            }
            self.clients[ci].sent(self.now, cmd.tag);
            if stop {
                break;
            }
        }
        let data = buf.freeze();
        self.trace(TraceEvent::Send {
            client: ci as u32,
            conn: id,
            data: data.clone(),
        });
        self.stream_write(id, true, data);
        // Now and then a client hangs up on its own (an orderly close).
        if !self.clients[ci].closing && self.rng.below(20_000) == 0 {
            self.trace(TraceEvent::Closed {
                conn: id,
                why: "client-close",
            });
            self.stream_push(id, true, Seg::Fin);
            if let Some(c) = self.conn(id) {
                c.client_open = false;
            }
            self.client_lost_conn(ci);
            self.maybe_reap(id);
        }
    }

    fn deliver_to_client(&mut self, id: u64, ci: usize) {
        let now = self.now;
        let mut touched = false;
        while let Some(c) = self.conn(id) {
            let Some(seg) = c.to_client.pop_due(now) else {
                break;
            };
            let open = c.client_open;
            let (kind, len) = seg_kind(&seg);
            self.trace(TraceEvent::Deliver {
                conn: id,
                to_node: false,
                kind,
                len,
            });
            if !open {
                continue;
            }
            touched = true;
            match seg {
                Seg::Data(b) => {
                    self.conn(id).expect("checked").rx.extend_from_slice(&b);
                    loop {
                        let c = self.conn(id).expect("checked");
                        match decode_frame(&mut c.rx) {
                            Ok(Some(frame)) => {
                                self.on_reply(ci, id, frame);
                                if self.failure.is_some() {
                                    return;
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                let rest = escape(&c.rx, 200);
                                self.fail(format!(
                                    "client{ci} c{id}: undecodable reply bytes ({e}): {rest}"
                                ));
                                return;
                            }
                        }
                    }
                }
                Seg::Fin => {
                    self.on_node_closed(ci, id);
                    if self.failure.is_some() {
                        return;
                    }
                }
                Seg::Rst => {
                    self.trace(TraceEvent::Closed {
                        conn: id,
                        why: "reset",
                    });
                    if let Some(c) = self.conn(id) {
                        c.client_open = false;
                    }
                    self.client_lost_conn(ci);
                }
                Seg::Syn => unreachable!("no SYN towards clients"),
            }
        }
        if touched {
            self.client_step(ci);
        }
    }

    fn on_reply(&mut self, ci: usize, id: u64, frame: Frame) {
        self.trace(TraceEvent::Reply {
            client: ci as u32,
            conn: id,
            frame: frame.clone(),
        });
        let c = self.conns[id as usize].as_mut().expect("live");
        let node = c.node;
        // A group's frames may come in any order: take the first of the group this one meets.
        if let Some(g) = c.expected.front().map(|e| e.group).filter(|g| *g != 0) {
            let run = c.expected.iter().take_while(|e| e.group == g).count();
            let mut scratch = ScanState::default();
            if let Some(i) = (0..run).find(|&i| {
                self.verifier
                    .verify(&c.expected[i].check, &frame, &mut scratch)
                    .is_ok()
            }) {
                let exp = c.expected.remove(i).expect("in range");
                c.expected.push_front(exp);
            }
        }
        let Some(exp) = c.expected.pop_front() else {
            let msg = format!(
                "n{node} c{id}: got {} but the node executed no request that awaits a reply",
                crate::trace::show_frame(&frame)
            );
            self.fail(msg);
            return;
        };
        // Partitioned: a keyed command may find no owner (membership not learned yet, every
        // owner cut off: CLUSTERDOWN, it did not run) or lose its owner with the command in
        // flight (TRYAGAIN: it may have run). Either may replace any reply.
        let unavailable = match &frame {
            Frame::Error(e) if self.cfg.partitioned() => {
                if e.starts_with(b"CLUSTERDOWN") {
                    Some(false)
                } else if e.starts_with(b"TRYAGAIN") {
                    Some(true)
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some(maybe_ran) = unavailable {
            if let Some(op) = exp.op {
                self.history.unavailable(op, &frame, maybe_ran);
            }
        } else if let Err(why) = self.verifier.verify(&exp.check, &frame, &mut c.scan) {
            let cmd: Vec<String> = exp.args.iter().map(|a| escape(a, 80)).collect();
            let what = if cmd.is_empty() {
                "(protocol error or close)".to_string()
            } else {
                cmd.join(" ")
            };
            self.fail(format!(
                "n{node} c{id}: reply to `{what}` (executed at node time {}.{:06}) is wrong: {why}",
                exp.at_us / 1_000_000,
                exp.at_us % 1_000_000
            ));
            return;
        }
        if let Some(op) = exp.op.filter(|_| unavailable.is_none()) {
            if let Err(why) = self.history.check_read(op, &frame) {
                let cmd: Vec<String> = exp.args.iter().map(|a| escape(a, 80)).collect();
                self.fail(format!(
                    "n{node} c{id}: reply to `{}` (executed at node time {}.{:06}) is wrong: {why}: {}",
                    cmd.join(" "),
                    exp.at_us / 1_000_000,
                    exp.at_us % 1_000_000,
                    crate::trace::show_frame(&frame)
                ));
                return;
            }
            self.history.replied(op, &frame);
        }
        self.stats.pushes += u64::from(!exp.answers);
        if !exp.answers {
            return;
        }
        let c = &mut self.clients[ci];
        let Some(p) = c.pending.pop_front() else {
            self.fail(format!(
                "client{ci} c{id}: a reply arrived but the client expected none"
            ));
            return;
        };
        if let Tag::Scan(args) = p.tag {
            c.scan_busy = false;
            c.scan_next = match &frame {
                Frame::Array(parts) => match parts.first() {
                    Some(Frame::Bulk(cur)) if &cur[..] != b"0" => Some((cur.clone(), args)),
                    _ => None,
                },
                _ => None,
            };
        }
        c.replies += 1;
        c.last_reply_at = self.now;
        self.stats.ops += 1;
    }

    /// The node closed the connection (FIN after its last bytes). Legitimate only where the
    /// model expected a close, and only once every executed request was answered.
    fn on_node_closed(&mut self, ci: usize, id: u64) {
        self.trace(TraceEvent::Closed {
            conn: id,
            why: "closed-by-node",
        });
        let c = self.conns[id as usize].as_mut().expect("live");
        let node = c.node;
        let fine = c.expected.len() == 1 && c.expected[0].check == Check::Close;
        c.client_open = false;
        if !fine {
            let rest: Vec<String> = c
                .expected
                .iter()
                .map(|e| match &e.check {
                    Check::Close => "(close)".to_string(),
                    _ => e
                        .args
                        .iter()
                        .map(|a| escape(a, 40))
                        .collect::<Vec<_>>()
                        .join(" "),
                })
                .collect();
            let msg = if c.expected.is_empty() {
                format!("n{node} c{id}: the node closed the connection for no reason")
            } else {
                format!(
                    "n{node} c{id}: the node closed the connection with these executed requests unanswered: {rest:?}"
                )
            };
            self.fail(msg);
            return;
        }
        c.expected.clear();
        self.client_lost_conn(ci);
    }

    // ---------------------------------------------------------------- peers

    /// Index of the unordered pair `{a, b}` in `pair_state` / `link_epoch`.
    fn pair(&self, a: usize, b: usize) -> usize {
        a.min(b) * self.cfg.nodes + a.max(b)
    }

    /// Carries one `PeerSend` of host `from` to replica `to_id` over the peer network, if the
    /// driver has a link to that replica (it drops messages for replicas it never reported up,
    /// or whose link failed since). Returns whether the message entered the network.
    fn peer_send(&mut self, from: usize, to_id: u32, data: Bytes) -> bool {
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
    fn peer_deliver(&mut self, from: usize, to: usize, epoch: u64, data: Bytes) {
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
    fn link_event(&mut self, node: usize, peer: u32, up: bool) {
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
    fn sync_links(&mut self) {
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
    fn on_heartbeat(&mut self, node: usize) {
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

    fn schedule_peer_tick(&mut self) {
        if let Some(t) = self.peers.next_due() {
            if self.peer_tick_at.is_none_or(|p| t < p) {
                self.peer_tick_at = Some(t);
                self.at(t, Ev::PeerTick);
            }
        }
    }

    fn on_peer_tick(&mut self) {
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

    // ---------------------------------------------------------------- faults

    fn on_nemesis(&mut self) {
        if self.phase != Phase::Safety {
            return;
        }
        let classes: Vec<FaultClass> = self.cfg.injected.iter().copied().collect();
        let class = *self.rng.pick(&classes);
        self.inject(class);
        let t = self.now + self.rng.exp(self.cfg.nemesis_mean_us as f64) as u64;
        self.at(t, Ev::Nemesis);
    }

    fn fault_duration(&mut self) -> u64 {
        self.rng.range(50_000, 3_000_000)
    }

    fn add_active(&mut self, a: Active, dur: u64) {
        let id = self.next_fault_id;
        self.next_fault_id += 1;
        self.active.push((id, a));
        self.at(self.now + dur, Ev::FaultEnd { id });
    }

    /// The blocked paths are the union of the active partitions.
    fn rebuild_partitions(&mut self) {
        self.net.heal_partitions();
        for (_, a) in &self.active {
            if let Active::Partition(pairs) = a {
                for &(x, y) in pairs {
                    self.net.block(x, y);
                }
            }
        }
    }

    fn inject(&mut self, class: FaultClass) {
        let nodes = self.cfg.nodes;
        let hosts = self.net.hosts();
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        let both = |pairs: &mut Vec<(usize, usize)>, a: &[usize], b: &[usize]| {
            for &x in a {
                for &y in b {
                    pairs.push((x, y));
                    pairs.push((y, x));
                }
            }
        };
        let desc = match class {
            FaultClass::PartitionSymmetric => {
                let (a, b): (Vec<usize>, Vec<usize>) = (0..hosts).partition(|_| self.rng.pct(50));
                both(&mut pairs, &a, &b);
                format!("partition {a:?} | {b:?}")
            }
            FaultClass::PartitionOneWay => {
                for _ in 0..self.rng.range(1, 4) {
                    let a = self.rng.below(hosts as u64) as usize;
                    let b = self.rng.below(nodes as u64) as usize;
                    let (from, to) = if self.rng.pct(50) { (a, b) } else { (b, a) };
                    if from != to {
                        pairs.push((from, to));
                    }
                }
                format!("one-way {pairs:?}")
            }
            FaultClass::PartitionIsolate => {
                let n = self.rng.below(nodes as u64) as usize;
                let others: Vec<usize> = (0..hosts).filter(|&h| h != n).collect();
                both(&mut pairs, &[n], &others);
                format!("isolate n{n}")
            }
            FaultClass::PartitionMajority => {
                let mut order: Vec<usize> = (0..nodes).collect();
                for i in (1..order.len()).rev() {
                    let j = self.rng.below(i as u64 + 1) as usize;
                    order.swap(i, j);
                }
                let minority = (nodes - 1) / 2;
                let (mut a, mut b) = (order[..minority].to_vec(), order[minority..].to_vec());
                for ci in 0..self.cfg.clients {
                    if self.rng.pct(50) {
                        a.push(nodes + ci);
                    } else {
                        b.push(nodes + ci);
                    }
                }
                both(&mut pairs, &a, &b);
                format!("minority {a:?} | majority {b:?}")
            }
            FaultClass::Clog => {
                let h = self.rng.below(hosts as u64) as usize;
                let d = self.rng.range(10_000, 2_000_000);
                self.net.clog(h, self.now + d);
                format!("clog host{h} for {}ms", d / 1000)
            }
            FaultClass::LatencySpike => {
                let d = self.fault_duration();
                self.net.slow_until = self.now + d;
                self.net.slow_factor = self.rng.range(5, 50);
                format!("latency x{} for {}ms", self.net.slow_factor, d / 1000)
            }
            FaultClass::ConnReset => {
                let open: Vec<u64> = (1..self.conns.len() as u64)
                    .filter(|&i| {
                        self.conns[i as usize]
                            .as_ref()
                            .is_some_and(|c| c.client_open)
                    })
                    .collect();
                if open.is_empty() {
                    return;
                }
                let mut victims = Vec::new();
                for _ in 0..self.rng.range(1, 3) {
                    victims.push(*self.rng.pick(&open));
                }
                victims.sort_unstable();
                victims.dedup();
                for &v in &victims {
                    self.reset_conn(v);
                }
                format!("reset {victims:?}")
            }
            FaultClass::CrashRestart => {
                let up: Vec<usize> = (0..nodes).filter(|&n| self.hosts[n].up()).collect();
                if up.is_empty() {
                    return;
                }
                let n = *self.rng.pick(&up);
                self.crash(n);
                let d = self.fault_duration();
                self.add_active(Active::Crashed(n), d);
                format!("crash n{n} for {}ms", d / 1000)
            }
            FaultClass::PauseResume => {
                let up: Vec<usize> = (0..nodes).filter(|&n| self.hosts[n].running()).collect();
                if up.is_empty() {
                    return;
                }
                let n = *self.rng.pick(&up);
                self.hosts[n].paused = true;
                self.trace(TraceEvent::Process {
                    node: n as u32,
                    what: "pause",
                });
                let d = self.fault_duration();
                self.add_active(Active::Paused(n), d);
                format!("pause n{n} for {}ms", d / 1000)
            }
            FaultClass::ClockJump => {
                let n = self.rng.below(nodes as u64) as usize;
                let mut d = self.rng.range_i(-3_000_000, 3_000_000);
                if self.replicated {
                    // Replicas' clocks stay within ±3 s of true time, so every deadline the
                    // workload sets has passed on every replica by the end of the drain.
                    let off = self.hosts[n].clock.offset_us();
                    d = (off + d).clamp(-3_000_000, 3_000_000) - off;
                }
                self.hosts[n].clock.jump(d);
                self.hosts[n].timer_at = None;
                self.schedule_timer(n);
                format!("clock n{n} steps {}ms", d / 1000)
            }
            _ => unreachable!("not injected: {class:?}"),
        };
        let partition = matches!(
            class,
            FaultClass::PartitionSymmetric
                | FaultClass::PartitionOneWay
                | FaultClass::PartitionIsolate
                | FaultClass::PartitionMajority
        );
        if partition {
            if pairs.is_empty() {
                return;
            }
            let d = self.fault_duration();
            self.add_active(Active::Partition(pairs), d);
            self.rebuild_partitions();
            self.sync_links();
        }
        self.faults.add(class, 1);
        self.trace(TraceEvent::Fault(desc));
    }

    fn end_fault(&mut self, id: u64) {
        let Some(pos) = self.active.iter().position(|(i, _)| *i == id) else {
            return;
        };
        let (_, a) = self.active.remove(pos);
        match a {
            Active::Partition(_) => {
                self.rebuild_partitions();
                self.trace(TraceEvent::Fault("partition healed".into()));
                self.unpark_partitioned();
                self.sync_links();
            }
            Active::Crashed(n) => self.restart(n),
            Active::Paused(n) => self.resume(n),
        }
    }

    /// A middlebox kills a connection: both ends see a reset, bytes in flight are lost.
    fn reset_conn(&mut self, id: u64) {
        self.trace(TraceEvent::Closed {
            conn: id,
            why: "network-reset",
        });
        let Some(c) = self.conn(id) else {
            return;
        };
        c.to_node.clear();
        c.to_client.clear();
        let (client_open, side) = (c.client_open, c.node_side);
        if side == NodeSide::Pending {
            c.node_side = NodeSide::Done;
        }
        if client_open {
            self.stream_push(id, false, Seg::Rst);
        }
        if side == NodeSide::Open {
            self.stream_push(id, true, Seg::Rst);
        }
    }

    fn crash(&mut self, n: usize) {
        self.trace(TraceEvent::Process {
            node: n as u32,
            what: "crash",
        });
        // Bytes held for a paused node now meet a dead one (connection requests are refused).
        let parked = std::mem::take(&mut self.hosts[n].parked);
        let conns = self.hosts[n].crash();
        for id in parked {
            if let Some(p) = self.pipe(id, true) {
                p.parked = false;
            }
            self.ensure_scheduled(id, true);
        }
        for id in conns {
            let Some(c) = self.conn(id) else {
                continue;
            };
            c.to_node.clear();
            c.to_client.clear();
            c.node_side = NodeSide::Done;
            c.inbuf.clear();
            if c.client_open {
                self.stream_push(id, false, Seg::Rst);
            }
            self.maybe_reap(id);
        }
        // The process is gone, and with it its side of every replica link.
        let nn = self.cfg.nodes;
        for b in 0..nn {
            self.link_peer[n * nn + b] = None;
        }
        self.sync_links();
    }

    fn restart(&mut self, n: usize) {
        if self.hosts[n].up() {
            return;
        }
        let (seed, bug) = (self.rng.next(), self.rng.next());
        let now = self.now;
        self.hosts[n].start(seed, bug, now);
        self.trace(TraceEvent::Process {
            node: n as u32,
            what: "restart",
        });
        self.schedule_timer(n);
        self.sync_links();
    }

    fn resume(&mut self, n: usize) {
        let host = &mut self.hosts[n];
        if !host.paused {
            return;
        }
        host.paused = false;
        let parked = std::mem::take(&mut host.parked);
        let inbox = std::mem::take(&mut host.inbox);
        self.trace(TraceEvent::Process {
            node: n as u32,
            what: "resume",
        });
        let nn = self.cfg.nodes;
        if self.replicated {
            // First what changed while it slept, then what arrived on links that still stand.
            self.sync_links();
            for (from, epoch, data) in inbox {
                if self.hosts[n].running() {
                    self.peer_deliver(from, n, epoch, data);
                }
            }
        } else {
            for (from, _, _) in inbox {
                self.heartbeats[from * nn + n] = self.now;
            }
        }
        for id in parked {
            if let Some(p) = self.pipe(id, true) {
                p.parked = false;
            }
            self.ensure_scheduled(id, true);
        }
        // Mail that waited for the node: every loop takes its own.
        for l in 0..self.hosts[n].loops {
            if self.hosts[n].router.as_ref().is_some_and(|r| r.has_mail(l)) {
                self.take_loop_mail(n, l);
            }
        }
        self.hosts[n].timer_at = None;
        self.schedule_timer(n);
    }

    /// Ends every fault: the liveness phase starts from a healthy system.
    fn heal_all(&mut self) {
        let active = std::mem::take(&mut self.active);
        for (_, a) in active {
            match a {
                Active::Partition(_) => {}
                Active::Crashed(n) => self.restart(n),
                Active::Paused(n) => self.resume(n),
            }
        }
        self.net.heal_partitions();
        self.net.unclog_all();
        self.net.slow_until = 0;
        self.peers.faults = PeerFaults::default();
        self.unpark_partitioned();
        self.trace(TraceEvent::Fault("heal all".into()));
        self.sync_links();
    }

    fn on_phase(&mut self, p: Phase) {
        self.phase = p;
        match p {
            Phase::Safety => {}
            Phase::Liveness => {
                self.trace(TraceEvent::Phase("liveness"));
                self.heal_at = self.now;
                self.heal_all();
            }
            Phase::Drain => self.trace(TraceEvent::Phase("drain")),
            Phase::End => {
                self.trace(TraceEvent::Phase("end"));
                self.check_liveness();
            }
        }
    }

    /// After the faults were healed: every node runs, every client is connected, got replies
    /// once things settled and has nothing left unanswered, every node hears from every other,
    /// and the cluster checkers pass.
    fn check_liveness(&mut self) {
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
    fn check_cluster(&mut self) {
        let keys = cluster::keys();
        let now = self.now;
        let partitioned = self.cfg.partitioned();
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
                if partitioned
                    && node.stored_entry(key.as_bytes()).is_some()
                    && !self.owns(h, key.as_bytes())
                {
                    return self.fail(format!(
                        "partitioning: n{h} stores {key}, whose slot it does not own"
                    ));
                }
            }
            let node = self.hosts[h].node_mut().expect("checked: running");
            node.handle(t, Input::Closed { conn });
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
        if let Err(e) = self.history.check_end(&alive, &views) {
            self.fail(e);
        }
    }

    /// Whether host `h` owns `key`'s slot under the run's placement.
    fn owns(&self, h: usize, key: &[u8]) -> bool {
        let ids: Vec<u32> = self.hosts.iter().map(|x| x.node_id()).collect();
        let p = lattice_placement::Placement::new(&ids, self.cfg.replication_factor);
        p.is_owner(ids[h], lattice_placement::key_slot(key))
    }

    /// The end-of-run read of `args` on host `h` through `conn`: the run is over, so peer
    /// messages (a partitioned node forwards to an owner) are handed straight to their
    /// receivers until every node is quiet. Returns what `conn` received.
    fn probe(&mut self, h: usize, conn: ConnId, args: Vec<Bytes>) -> BytesMut {
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

    fn finish_counts(&mut self) {
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

fn seg_kind(seg: &Seg) -> (&'static str, u32) {
    match seg {
        Seg::Syn => ("syn", 0),
        Seg::Data(b) => ("data", b.len() as u32),
        Seg::Fin => ("fin", 0),
        Seg::Rst => ("rst", 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A short run of `seed` (every phase, each much shorter); returns the digest.
    fn short_run(seed: u64) -> (String, Option<String>, RunStats) {
        let mut cfg = RunConfig::from_seed(seed);
        cfg.safety_us = 400_000;
        cfg.client_timeout_us = 300_000;
        cfg.backoff_max_us = 50_000;
        cfg.liveness_us = 800_000;
        cfg.drain_us = 400_000;
        cfg.think_mean_us = cfg.think_mean_us.max(2_000);
        cfg.clients = cfg.clients.min(3);
        let mut w = World::new(cfg, false, Tracer::new(8));
        w.run();
        (w.tracer.digest(), w.failure.clone(), w.stats.clone())
    }

    /// A short replicated run of `seed` (the drain keeps its 30 s for anti-entropy).
    fn short_replicated(seed: u64) -> World {
        short_run_of(RunConfig::replicated_from_seed(seed))
    }

    /// `cfg` with short phases, run.
    fn short_run_of(mut cfg: RunConfig) -> World {
        cfg.safety_us = 1_500_000;
        cfg.client_timeout_us = 300_000;
        cfg.backoff_max_us = 50_000;
        cfg.liveness_us = 800_000;
        cfg.clients = cfg.clients.min(3);
        let mut w = World::new(cfg, false, Tracer::new(8));
        w.run();
        w
    }

    /// How many times a peer message with exactly `payload` reached host `to`.
    fn received(w: &World, to: u32, payload: &[u8]) -> usize {
        w.tracer
            .ring_events()
            .filter(|e| matches!(e, TraceEvent::PeerRecv { node, data, .. } if *node == to && &data[..] == payload))
            .count()
    }

    /// The driver's side of replication, whatever the node does: a PeerSend to a linked replica
    /// arrives as one PeerMessage; one sent before its link failed, or to a replica the sender
    /// has no link to, never does; a restarted host comes back under a new id. (The replicas
    /// also exchange their own messages meanwhile, and must shrug off these malformed ones.)
    #[test]
    fn peer_messages_follow_the_links() {
        let mut cfg = RunConfig::replicated_from_seed(11);
        cfg.nodes = 3;
        cfg.clocks.truncate(3);
        cfg.clients = 0;
        cfg.injected.clear();
        cfg.peer = PeerFaults::default();
        let mut w = World::new(cfg, false, Tracer::new(1 << 20));
        w.start();
        let id1 = w.hosts[1].node_id();
        assert_eq!(id1, 2);
        assert_eq!(w.link_peer[1], Some(id1), "n0 was told n1 is up");
        assert!(w.peer_send(0, id1, Bytes::from_static(b"hello")));
        w.schedule_peer_tick();
        w.run_until(1_000_000);
        assert_eq!(received(&w, 1, b"hello"), 1);
        assert!(w.heartbeats[1] > 0, "n1 heard from n0");

        // In flight while the link fails and comes back: lost with the old connection.
        assert!(w.peer_send(0, id1, Bytes::from_static(b"lost")));
        w.schedule_peer_tick();
        w.net.block(0, 1);
        w.sync_links();
        assert_eq!(w.link_peer[1], None, "n0 was told n1 is down");
        assert!(!w.peer_send(0, id1, Bytes::from_static(b"no link")));
        w.net.heal_partitions();
        w.sync_links();
        assert_eq!(w.link_peer[1], Some(id1));
        w.run_until(2_000_000);
        assert_eq!(received(&w, 1, b"lost"), 0);
        assert_eq!(received(&w, 1, b"no link"), 0);

        // A crashed host's peers see the link fail; it restarts as a new replica.
        w.crash(1);
        assert_eq!(w.link_peer[1], None);
        assert!(!w.peer_send(0, id1, Bytes::from_static(b"gone")));
        w.restart(1);
        let new = w.hosts[1].node_id();
        assert_eq!(new, 102);
        assert_eq!(w.link_peer[1], Some(new));
        assert_eq!(
            w.link_peer[3],
            Some(w.hosts[0].node_id()),
            "n1 was told n0 is up"
        );
        assert!(!w.peer_send(0, id1, Bytes::from_static(b"old id")));
        assert!(w.peer_send(0, new, Bytes::from_static(b"new id")));
        w.schedule_peer_tick();
        w.run_until(3_000_000);
        assert_eq!(received(&w, 1, b"gone"), 0);
        assert_eq!(received(&w, 1, b"old id"), 0);
        assert_eq!(received(&w, 1, b"new id"), 1);
        assert_eq!(w.failure, None);
    }

    #[test]
    fn replicated_runs_replay_exactly_and_link_every_replica() {
        let a = short_replicated(4);
        let b = short_replicated(4);
        assert_eq!(
            a.tracer.digest(),
            b.tracer.digest(),
            "a seed replays exactly"
        );
        assert!(a.stats.requests > 50, "did work: {:?}", a.stats);
        // Every running replica ends linked to every other one's current incarnation.
        let n = a.cfg.nodes;
        for x in 0..n {
            for y in 0..n {
                if x != y {
                    assert_eq!(a.link_peer[x * n + y], Some(a.hosts[y].node_id()));
                }
            }
        }
    }

    /// Needs replication in the node: until replicas exchange state this fails on
    /// convergence.
    #[cfg(not(feature = "planted-bug"))]
    #[test]
    fn replicated_runs_converge() {
        for seed in 0..3 {
            let w = short_replicated(seed);
            assert_eq!(w.failure, None, "seed {seed}");
            assert!(w.stats.peer_delivered > 0, "seed {seed}: {:?}", w.stats);
            assert!(w.stats.acked > 50, "seed {seed}: {:?}", w.stats);
        }
    }

    #[cfg(feature = "planted-bug")]
    #[test]
    fn the_planted_bug_is_caught_in_replicated_mode() {
        let caught = (0..20).find_map(|seed| {
            let w = short_replicated(seed);
            w.failure.filter(|f| !f.starts_with("liveness"))
        });
        caught.expect("the canary must be caught within 20 short replicated runs");
    }

    /// A short partitioned run of `seed`.
    fn short_partitioned(seed: u64) -> World {
        short_run_of(RunConfig::partitioned_from_seed(seed))
    }

    #[cfg(not(feature = "planted-forward-bug"))]
    #[test]
    fn partitioned_runs_pass_and_forward() {
        for seed in 0..3 {
            let w = short_partitioned(seed);
            assert_eq!(w.failure, None, "seed {seed}");
            assert!(w.cfg.partitioned());
        }
    }

    #[cfg(feature = "planted-forward-bug")]
    #[test]
    fn the_planted_forward_bug_is_caught_in_partitioned_mode() {
        let caught = (0..20).find_map(|seed| short_partitioned(seed).failure);
        caught.expect("a reply relayed out of order must be caught within 20 partitioned runs");
    }

    #[cfg(not(feature = "planted-bug"))]
    #[test]
    fn runs_pass_and_replay_exactly() {
        let (a, fa, sa) = short_run(1);
        assert_eq!(fa, None);
        assert!(sa.ops > 50, "did work: {sa:?}");
        assert!(sa.invariant_checks > 0);
        assert_eq!(short_run(1).0, a, "a seed replays exactly");
        let (b, fb, _) = short_run(2);
        assert_eq!(fb, None);
        assert_ne!(a, b);
    }

    #[cfg(feature = "planted-bug")]
    #[test]
    fn the_planted_bug_is_caught() {
        let caught = (0..20).find_map(|seed| short_run(seed).1);
        let msg = caught.expect("the canary must be caught within 20 short runs");
        assert!(msg.contains("is wrong"), "{msg}");
    }

    /// Seeds of the router plant's check: the same short runs, with and without the plant.
    const ROUTER_PLANT_SEEDS: std::ops::Range<u64> = 0..12;

    /// The simulator drives the server's router (crates/router): without its planted bug
    /// these runs pass...
    #[cfg(not(any(feature = "planted-bug", feature = "planted-router-bug")))]
    #[test]
    fn router_plant_absent_runs_pass() {
        for seed in ROUTER_PLANT_SEEDS {
            assert_eq!(short_run(seed).1, None, "seed {seed}");
        }
    }

    /// ...and with it (a write for another connection on the same event loop delivered to the
    /// connection whose batch runs) the swarm catches a reply on the wrong connection.
    #[cfg(feature = "planted-router-bug")]
    #[test]
    fn router_plant_is_caught() {
        let caught: Vec<(u64, String)> = ROUTER_PLANT_SEEDS
            .filter_map(|seed| short_run(seed).1.map(|f| (seed, f)))
            .collect();
        assert!(
            !caught.is_empty(),
            "the routing plant must be caught within seeds {ROUTER_PLANT_SEEDS:?}"
        );
    }
}

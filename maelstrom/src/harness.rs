//! The harness: N copies of `lattice-maelstrom` as child processes, every message between them
//! (and between them and the clients) routed through a network this process controls, clients
//! issuing operations at a rate, a history recorded and checked.
//!
//! Network: each message is delayed by a latency drawn from a seeded RNG; node-to-node messages
//! are lost with probability `loss` and dropped while their endpoints are partitioned;
//! client messages may be lost with probability `client_loss` (which makes operations
//! indeterminate) but are never partitioned, as in Maelstrom. The nemesis alternates between a
//! healed network and a random partition (one node isolated, or a random split in two).
//!
//! Phases: init (and topology for broadcast); the workload with the nemesis; heal and let
//! in-flight operations finish or time out; for counters, g-set and broadcast, rounds of final
//! reads on every node until they agree (or the healing time runs out), the last round being
//! the one checked. Real processes and real time make a run only approximately repeatable from
//! its seed; a failing history is saved so the checker can be run on it again.

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use crate::adapter::Workload;
use crate::check::{self, Verdict};
use crate::history::{self, Call, Op, Outcome};
use crate::proto::{code, read_bounded_line, LineRead, Message, MAX_LINE_BYTES};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nemesis {
    None,
    Partition,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// The `lattice-maelstrom` binary.
    pub bin: PathBuf,
    pub workload: Workload,
    pub nodes: usize,
    pub clients: usize,
    /// Operations to issue in the workload phase.
    pub ops: usize,
    /// Operations per second, over all clients.
    pub rate: f64,
    pub nemesis: Nemesis,
    pub seed: u64,
    /// Longest workload phase, seconds; it ends earlier once `ops` were issued.
    pub time_limit_s: f64,
    /// Where failing runs keep their history and node logs.
    pub out: PathBuf,
    /// One-way latency, uniform in [min, max] milliseconds.
    pub latency_ms: (u64, u64),
    /// Node-to-node message loss probability (on top of partitions).
    pub loss: f64,
    /// Client request and reply loss probability.
    pub client_loss: f64,
    /// A client gives up waiting after this long; the operation is indeterminate.
    pub op_timeout_ms: u64,
    /// How long each nemesis state (healed or partitioned) lasts.
    pub nemesis_interval_ms: u64,
    /// Longest time after healing for the final reads to agree.
    pub heal_s: f64,
    /// lin-kv: keys in use at once.
    pub keys: usize,
    /// lin-kv: operations on a key before it is retired for a fresh one (keeps each key's
    /// history small enough for the linearizability search).
    pub ops_per_key: usize,
    /// Save the history even when the run is valid.
    pub keep_history: bool,
    /// Linearizability search steps per key before giving up.
    pub search_budget: u64,
}

impl Options {
    pub fn new(bin: PathBuf, workload: Workload) -> Options {
        Options {
            bin,
            workload,
            nodes: 1,
            clients: 5,
            ops: 1000,
            rate: 500.0,
            nemesis: Nemesis::None,
            seed: 0,
            time_limit_s: 30.0,
            out: PathBuf::from("target/maelstrom"),
            latency_ms: (0, 3),
            loss: 0.0,
            client_loss: 0.0,
            op_timeout_ms: 1000,
            nemesis_interval_ms: 1000,
            heal_s: 20.0,
            keys: 5,
            ops_per_key: 150,
            keep_history: false,
            search_budget: check::DEFAULT_SEARCH_BUDGET,
        }
    }

    /// Rejects settings that cannot make a meaningful run.
    pub fn validate(&self) -> Result<(), String> {
        if self.nodes == 0 || self.nodes > 64 {
            return Err("--nodes must be 1..=64".into());
        }
        if self.clients == 0 || self.clients > 1000 {
            return Err("--clients must be 1..=1000".into());
        }
        if !(self.rate > 0.0 && self.rate.is_finite()) {
            return Err("--rate must be positive".into());
        }
        if !(0.0..1.0).contains(&self.loss) || !(0.0..1.0).contains(&self.client_loss) {
            return Err("loss probabilities must be in [0, 1)".into());
        }
        if self.latency_ms.0 > self.latency_ms.1 {
            return Err("latency min exceeds max".into());
        }
        if self.keys == 0 || self.ops_per_key == 0 {
            return Err("--keys and --ops-per-key must be positive".into());
        }
        if self.op_timeout_ms == 0 || self.nemesis_interval_ms == 0 {
            return Err("timeouts and intervals must be positive".into());
        }
        Ok(())
    }
}

/// What a run found.
pub struct Summary {
    pub line: String,
    pub verdict: Verdict,
    pub history_path: Option<PathBuf>,
}

/// Lines from children waiting for the main loop at most; a child outrunning the harness blocks
/// on its stdout rather than growing this queue.
const EVENT_QUEUE: usize = 65_536;
/// Messages in flight in the simulated network at most; beyond this new ones are dropped (and
/// counted), which the protocols must tolerate anyway.
const MAX_IN_FLIGHT: usize = 1_000_000;
/// Longest sleep of the main loop, so deadlines are noticed promptly.
const MAX_TICK: Duration = Duration::from_millis(20);

enum Event {
    Line(usize, String),
    Closed(usize),
}

enum Delivery {
    /// (source node, or None for a client; destination node; the line)
    ToNode(Option<usize>, usize, String),
    ToClient(usize, Message),
}

struct Inflight {
    msg_id: u64,
    op: usize,
    deadline_us: u64,
}

struct Client {
    name: String,
    node: usize,
    process: u64,
    /// Final-read clients are not subject to message loss: the final reads measure the
    /// replicas, not the network.
    reliable: bool,
    inflight: Option<Inflight>,
}

struct World {
    opts: Options,
    rng: ChaCha8Rng,
    start: Instant,
    children: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
    events: mpsc::Receiver<Event>,
    queue: BTreeMap<(u64, u64), Delivery>,
    seq: u64,
    /// Partition component of each node; messages cross only within one.
    component: Vec<u8>,
    next_nemesis_us: u64,
    partitioned: bool,
    partitions: u64,
    clients: Vec<Client>,
    next_process: u64,
    next_msg_id: u64,
    history: Vec<Op>,
    /// Replies to the harness's own requests (init, topology), by msg_id.
    admin_replies: BTreeMap<u64, Message>,
    issuing: bool,
    issued: usize,
    next_issue_us: u64,
    next_element: u64,
    kv_keys: Vec<(u64, usize)>,
    next_key: u64,
    peer_sent: u64,
    peer_dropped: u64,
    exited: Vec<String>,
    problems: Vec<String>,
}

fn run_dir(opts: &Options) -> PathBuf {
    opts.out.join(format!(
        "{}-n{}-{}-seed{}",
        opts.workload.name(),
        opts.nodes,
        match opts.nemesis {
            Nemesis::None => "calm",
            Nemesis::Partition => "partition",
        },
        opts.seed
    ))
}

impl World {
    fn spawn(opts: Options) -> Result<World, String> {
        let dir = run_dir(&opts);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (tx, rx) = mpsc::sync_channel(EVENT_QUEUE);
        let mut children = Vec::new();
        let mut stdins = Vec::new();
        for i in 0..opts.nodes {
            let log = std::fs::File::create(dir.join(format!("n{}.log", i + 1)))
                .map_err(|e| format!("node log: {e}"))?;
            let mut child = Command::new(&opts.bin)
                .arg("--workload")
                .arg(opts.workload.name())
                .arg("--seed")
                .arg(opts.seed.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::from(log))
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", opts.bin.display()))?;
            let stdout = child.stdout.take().expect("stdout is piped");
            stdins.push(child.stdin.take());
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stdout);
                loop {
                    match read_bounded_line(&mut r, MAX_LINE_BYTES) {
                        Ok(LineRead::Line(l)) => {
                            if tx.send(Event::Line(i, l)).is_err() {
                                return;
                            }
                        }
                        Ok(LineRead::Bad(why)) => {
                            let _ = tx.send(Event::Line(i, format!("<bad line: {why}>")));
                        }
                        Ok(LineRead::Eof) | Err(_) => {
                            let _ = tx.send(Event::Closed(i));
                            return;
                        }
                    }
                }
            });
            children.push(child);
        }
        let mut clients = Vec::new();
        for c in 0..opts.clients {
            clients.push(Client {
                name: format!("c{}", c + 1),
                node: c % opts.nodes,
                process: c as u64,
                reliable: false,
                inflight: None,
            });
        }
        for n in 0..opts.nodes {
            clients.push(Client {
                name: format!("c{}", opts.clients + n + 1),
                node: n,
                process: (opts.clients + n) as u64,
                reliable: true,
                inflight: None,
            });
        }
        let kv_keys = (0..opts.keys as u64).map(|k| (k, 0)).collect();
        Ok(World {
            rng: ChaCha8Rng::seed_from_u64(opts.seed),
            start: Instant::now(),
            children,
            stdins,
            events: rx,
            queue: BTreeMap::new(),
            seq: 0,
            component: vec![0; opts.nodes],
            next_nemesis_us: u64::MAX,
            partitioned: false,
            partitions: 0,
            next_process: (opts.clients + opts.nodes) as u64,
            next_msg_id: 1,
            history: Vec::new(),
            admin_replies: BTreeMap::new(),
            issuing: false,
            issued: 0,
            next_issue_us: 0,
            next_element: 0,
            kv_keys,
            next_key: opts.keys as u64,
            peer_sent: 0,
            peer_dropped: 0,
            exited: Vec::new(),
            problems: Vec::new(),
            clients,
            opts,
        })
    }

    fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n.max(1)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.rng.next_u64() as f64 / u64::MAX as f64) < p
    }

    fn latency_us(&mut self) -> u64 {
        let (lo, hi) = self.opts.latency_ms;
        (lo + self.below(hi - lo + 1)) * 1000
    }

    fn enqueue(&mut self, at_us: u64, d: Delivery) {
        if self.queue.len() >= MAX_IN_FLIGHT {
            self.peer_dropped += 1;
            return;
        }
        self.seq += 1;
        self.queue.insert((at_us, self.seq), d);
    }

    fn write_to_node(&mut self, node: usize, line: &str) {
        if let Some(stdin) = self.stdins[node].as_mut() {
            let ok = stdin
                .write_all(line.as_bytes())
                .and_then(|_| stdin.write_all(b"\n"))
                .and_then(|_| stdin.flush());
            if ok.is_err() {
                self.stdins[node] = None;
            }
        }
    }

    fn node_index(&self, name: &str) -> Option<usize> {
        let n: usize = name.strip_prefix('n')?.parse().ok()?;
        (1..=self.opts.nodes).contains(&n).then(|| n - 1)
    }

    /// A line a node wrote: route it by `dest`.
    fn route_from_node(&mut self, src: usize, line: String) {
        let msg = match Message::parse(&line) {
            Ok(m) => m,
            Err(e) => {
                self.problems
                    .push(format!("n{} wrote a bad line ({e}): {line:.200}", src + 1));
                return;
            }
        };
        let now = self.now_us();
        let lat = self.latency_us();
        if let Some(dest) = self.node_index(&msg.dest) {
            self.peer_sent += 1;
            if self.chance(self.opts.loss) {
                self.peer_dropped += 1;
                return;
            }
            self.enqueue(now + lat, Delivery::ToNode(Some(src), dest, line));
        } else if msg.dest == "c0" {
            if let Some(id) = msg.in_reply_to() {
                self.admin_replies.insert(id, msg);
            }
        } else if let Some(c) = self.clients.iter().position(|c| c.name == msg.dest) {
            if !self.clients[c].reliable && self.chance(self.opts.client_loss) {
                return;
            }
            self.enqueue(now + lat, Delivery::ToClient(c, msg));
        } else {
            self.problems.push(format!(
                "n{} sent to unknown destination {:?}",
                src + 1,
                msg.dest
            ));
        }
    }

    fn deliver(&mut self, d: Delivery) {
        match d {
            Delivery::ToNode(src, dest, line) => {
                // Partitions are applied on delivery, so messages in flight when one starts are
                // cut too. Client requests (no source node) are never partitioned.
                if let Some(src) = src {
                    if self.component[src] != self.component[dest] {
                        self.peer_dropped += 1;
                        return;
                    }
                }
                self.write_to_node(dest, &line);
            }
            Delivery::ToClient(c, msg) => self.client_reply(c, msg),
        }
    }

    fn client_reply(&mut self, c: usize, msg: Message) {
        let now = self.now_us();
        let Some(inf) = self.clients[c].inflight.as_ref() else {
            return; // late reply to an op that already timed out
        };
        if msg.in_reply_to() != Some(inf.msg_id) {
            return;
        }
        let op = inf.op;
        self.clients[c].inflight = None;
        let body = &msg.body;
        let outcome = if msg.body_type() == "error" {
            let code = body.get("code").and_then(Value::as_i64).unwrap_or(-1);
            let text = body
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if code::is_definite(code) {
                Outcome::Fail { code, text }
            } else {
                Outcome::Info {
                    reason: format!("error {code}: {text}"),
                }
            }
        } else {
            let value = body.get("value").or_else(|| body.get("messages")).cloned();
            Outcome::Ok { value }
        };
        if matches!(outcome, Outcome::Info { .. }) {
            self.clients[c].process = self.next_process;
            self.next_process += 1;
        }
        let rec = &mut self.history[op];
        rec.complete_us = Some(now);
        rec.outcome = outcome;
    }

    /// Sends `call` from client `c` and records its invocation.
    fn invoke(&mut self, c: usize, call: Call, final_read: bool) {
        let now = self.now_us();
        let msg_id = self.next_msg_id;
        self.next_msg_id += 1;
        let mut body = match &call {
            Call::Read { key: Some(k) } => json!({"type": "read", "key": k}),
            Call::Read { key: None } => json!({"type": "read"}),
            Call::Write { key, value } => json!({"type": "write", "key": key, "value": value}),
            Call::Cas { key, from, to } => {
                json!({"type": "cas", "key": key, "from": from, "to": to})
            }
            Call::Add { delta } => json!({"type": "add", "delta": delta}),
            Call::AddElement { element } => json!({"type": "add", "element": element}),
            Call::Broadcast { message } => json!({"type": "broadcast", "message": message}),
        };
        body["msg_id"] = json!(msg_id);
        let client = &self.clients[c];
        let msg = Message {
            src: client.name.clone(),
            dest: format!("n{}", client.node + 1),
            body,
        };
        let op = self.history.len();
        self.history.push(Op {
            index: op,
            process: client.process,
            node: msg.dest.clone(),
            call,
            invoke_us: now,
            complete_us: None,
            outcome: Outcome::Info {
                reason: "no reply".into(),
            },
            final_read,
        });
        let node = client.node;
        let reliable = client.reliable;
        self.clients[c].inflight = Some(Inflight {
            msg_id,
            op,
            deadline_us: now + self.opts.op_timeout_ms * 1000,
        });
        if !reliable && self.chance(self.opts.client_loss) {
            return;
        }
        let lat = self.latency_us();
        self.enqueue(now + lat, Delivery::ToNode(None, node, msg.to_line()));
    }

    fn next_call(&mut self) -> Call {
        let read_share = match self.opts.workload {
            Workload::LinKv => 3, // one in three
            _ => 4,               // one in four
        };
        let workload = self.opts.workload;
        match workload {
            Workload::LinKv => {
                let slot = self.below(self.kv_keys.len() as u64) as usize;
                let key = self.kv_keys[slot].0;
                self.kv_keys[slot].1 += 1;
                if self.kv_keys[slot].1 >= self.opts.ops_per_key {
                    self.kv_keys[slot] = (self.next_key, 0);
                    self.next_key += 1;
                }
                let key = json!(key);
                match self.below(3) {
                    0 => Call::Read { key: Some(key) },
                    1 => Call::Write {
                        key,
                        value: json!(self.below(5)),
                    },
                    _ => Call::Cas {
                        key,
                        from: json!(self.below(5)),
                        to: json!(self.below(5)),
                    },
                }
            }
            _ if self.below(read_share) == 0 => Call::Read { key: None },
            Workload::GCounter => Call::Add {
                delta: 1 + self.below(5) as i64,
            },
            Workload::PnCounter => {
                let d = 1 + self.below(5) as i64;
                Call::Add {
                    delta: if self.below(2) == 0 { d } else { -d },
                }
            }
            Workload::GSet => {
                self.next_element += 1;
                Call::AddElement {
                    element: json!(self.next_element),
                }
            }
            Workload::Broadcast => {
                self.next_element += 1;
                Call::Broadcast {
                    message: json!(self.next_element),
                }
            }
        }
    }

    fn nemesis_step(&mut self, now: u64) {
        if self.opts.nemesis != Nemesis::Partition || now < self.next_nemesis_us {
            return;
        }
        self.next_nemesis_us = now + self.opts.nemesis_interval_ms * 1000;
        let n = self.opts.nodes;
        if self.partitioned || n < 2 {
            self.heal();
            return;
        }
        let mut comp = vec![0u8; n];
        if self.below(2) == 0 {
            // Isolate one node.
            comp[self.below(n as u64) as usize] = 1;
        } else {
            // A random split into two non-empty sides.
            loop {
                for c in comp.iter_mut() {
                    *c = (self.rng.next_u64() & 1) as u8;
                }
                if comp.contains(&0) && comp.contains(&1) {
                    break;
                }
            }
        }
        let sides: Vec<String> = (0..2u8)
            .map(|s| {
                (0..n)
                    .filter(|&i| comp[i] == s)
                    .map(|i| format!("n{}", i + 1))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        eprintln!(
            "  nemesis at {:.1}s: partition [{}] | [{}]",
            now as f64 / 1e6,
            sides[0],
            sides[1]
        );
        self.component = comp;
        self.partitioned = true;
        self.partitions += 1;
    }

    fn heal(&mut self) {
        if self.partitioned {
            eprintln!("  nemesis at {:.1}s: heal", self.now_us() as f64 / 1e6);
        }
        self.component = vec![0; self.opts.nodes];
        self.partitioned = false;
    }

    /// One turn of the loop: wait for input or the next deadline, then deliver what is due,
    /// time out operations, move the nemesis and issue operations.
    fn step(&mut self) {
        let now = self.now_us();
        let mut wake = now + MAX_TICK.as_micros() as u64;
        if let Some((&(at, _), _)) = self.queue.first_key_value() {
            wake = wake.min(at);
        }
        // Only worth waking for the next issue if some client is free to take it; otherwise the
        // next reply or timeout wakes the loop.
        if self.issuing
            && self.clients[..self.opts.clients]
                .iter()
                .any(|c| c.inflight.is_none())
        {
            wake = wake.min(self.next_issue_us);
        }
        for c in &self.clients {
            if let Some(inf) = &c.inflight {
                wake = wake.min(inf.deadline_us);
            }
        }
        if self.opts.nemesis == Nemesis::Partition {
            wake = wake.min(self.next_nemesis_us);
        }
        let wait = Duration::from_micros(wake.saturating_sub(now));
        let first = self.events.recv_timeout(wait);
        let mut pending = Vec::new();
        if let Ok(e) = first {
            pending.push(e);
            // Take what else is ready without blocking, bounded so deliveries are not starved.
            while pending.len() < 1024 {
                match self.events.try_recv() {
                    Ok(e) => pending.push(e),
                    Err(_) => break,
                }
            }
        }
        for e in pending {
            match e {
                Event::Line(i, l) => self.route_from_node(i, l),
                Event::Closed(i) => {
                    self.stdins[i] = None;
                    self.exited.push(format!("n{}", i + 1));
                }
            }
        }
        let now = self.now_us();
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let d = entry.remove();
            self.deliver(d);
        }
        for c in 0..self.clients.len() {
            let timed_out =
                matches!(&self.clients[c].inflight, Some(inf) if inf.deadline_us <= now);
            if timed_out {
                let inf = self.clients[c].inflight.take().expect("checked above");
                self.history[inf.op].outcome = Outcome::Info {
                    reason: "timeout".into(),
                };
                self.clients[c].process = self.next_process;
                self.next_process += 1;
            }
        }
        self.nemesis_step(now);
        if self.issuing {
            while self.next_issue_us <= now && self.issued < self.opts.ops {
                let idle: Vec<usize> = (0..self.opts.clients)
                    .filter(|&c| self.clients[c].inflight.is_none())
                    .collect();
                if idle.is_empty() {
                    // Everyone is busy: the rate is not reachable; issue when one frees up.
                    self.next_issue_us = now;
                    break;
                }
                let c = idle[self.below(idle.len() as u64) as usize];
                let call = self.next_call();
                self.invoke(c, call, false);
                self.issued += 1;
                self.next_issue_us += (1e6 / self.opts.rate) as u64;
            }
        }
    }

    /// Sends an administrative request to every node and waits for all replies.
    fn admin_all(
        &mut self,
        body: impl Fn(usize) -> Value,
        timeout: Duration,
    ) -> Result<(), String> {
        let mut ids = Vec::new();
        for n in 0..self.opts.nodes {
            let id = self.next_msg_id;
            self.next_msg_id += 1;
            let mut b = body(n);
            b["msg_id"] = json!(id);
            let m = Message {
                src: "c0".into(),
                dest: format!("n{}", n + 1),
                body: b,
            };
            self.write_to_node(n, &m.to_line());
            ids.push(id);
        }
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if ids.iter().all(|id| self.admin_replies.contains_key(id)) {
                break;
            }
            self.step();
        }
        for (n, id) in ids.iter().enumerate() {
            match self.admin_replies.get(id) {
                None => return Err(format!("n{} did not answer within {timeout:?}", n + 1)),
                Some(m) if m.body_type() == "error" => {
                    return Err(format!("n{} answered with an error: {}", n + 1, m.body))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    fn all_idle(&self) -> bool {
        self.clients.iter().all(|c| c.inflight.is_none())
    }

    fn run(&mut self) -> Result<(), String> {
        let names: Vec<String> = (1..=self.opts.nodes).map(|i| format!("n{i}")).collect();
        self.admin_all(
            |n| json!({"type": "init", "node_id": format!("n{}", n + 1), "node_ids": names}),
            Duration::from_secs(10),
        )?;
        if self.opts.workload == Workload::Broadcast {
            let topo: serde_json::Map<String, Value> = names
                .iter()
                .map(|me| {
                    let others: Vec<&String> = names.iter().filter(|n| *n != me).collect();
                    (me.clone(), json!(others))
                })
                .collect();
            self.admin_all(
                |_| json!({"type": "topology", "topology": topo}),
                Duration::from_secs(10),
            )?;
        }

        // Workload phase.
        let now = self.now_us();
        let end = now + (self.opts.time_limit_s * 1e6) as u64;
        self.issuing = true;
        self.next_issue_us = now;
        self.next_nemesis_us = now + self.opts.nemesis_interval_ms * 1000;
        while self.issued < self.opts.ops && self.now_us() < end {
            self.step();
        }
        self.issuing = false;
        // Let operations in flight finish (each is bounded by its timeout).
        while !self.all_idle() {
            self.step();
        }
        self.opts.nemesis = Nemesis::None;
        self.heal();

        if self.opts.workload != Workload::LinKv {
            self.final_reads();
        }
        Ok(())
    }

    /// Rounds of reads on every node until all agree or the healing time is over; the last
    /// round's reads are the final ones.
    fn final_reads(&mut self) {
        let healed = Instant::now();
        let heal = Duration::from_secs_f64(self.opts.heal_s);
        let first_client = self.opts.clients;
        loop {
            // Give replication a moment between rounds.
            let pause = Instant::now() + Duration::from_millis(250);
            while Instant::now() < pause {
                self.step();
            }
            let round_start = self.history.len();
            for n in 0..self.opts.nodes {
                self.invoke(first_client + n, Call::Read { key: None }, false);
            }
            while !self.all_idle() {
                self.step();
            }
            let round = &self.history[round_start..];
            let values: Vec<Option<String>> = round
                .iter()
                .map(|op| match &op.outcome {
                    Outcome::Ok { value } => value.as_ref().map(Value::to_string),
                    _ => None,
                })
                .collect();
            let agree = values.iter().all(|v| v.is_some() && *v == values[0]);
            if agree || healed.elapsed() >= heal {
                for op in &mut self.history[round_start..] {
                    op.final_read = true;
                }
                eprintln!(
                    "  final reads {} after {:.1}s of healing",
                    if agree { "agree" } else { "still DISAGREE" },
                    healed.elapsed().as_secs_f64()
                );
                return;
            }
        }
    }

    fn shutdown(&mut self) {
        for s in self.stdins.iter_mut() {
            *s = None; // EOF on stdin: the node exits
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for child in self.children.iter_mut() {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
    }
}

/// Checks a history for `workload`.
pub fn check_history(workload: Workload, ops: &[Op], search_budget: u64) -> Verdict {
    match workload {
        Workload::LinKv => check::check_lin_kv(ops, search_budget),
        Workload::GCounter | Workload::PnCounter => check::check_counter(ops),
        Workload::GSet | Workload::Broadcast => check::check_set(ops),
    }
}

/// Runs one configuration end to end and checks it.
pub fn run(opts: Options) -> Result<Summary, String> {
    opts.validate()?;
    let mut world = World::spawn(opts.clone())?;
    let started = Instant::now();
    let result = world.run();
    world.shutdown();
    let elapsed = started.elapsed().as_secs_f64();
    result?;
    let mut verdict = check_history(opts.workload, &world.history, opts.search_budget);
    if !world.exited.is_empty() {
        verdict.valid = Some(false);
        verdict
            .notes
            .push(format!("nodes exited during the run: {:?}", world.exited));
    }
    for p in world.problems.iter().take(10) {
        verdict.notes.push(format!("protocol problem: {p}"));
    }
    if !world.problems.is_empty() {
        verdict.valid = Some(false);
    }
    let h = &world.history;
    let count = |f: fn(&Op) -> bool| h.iter().filter(|o| f(o)).count();
    let ok = count(Op::is_ok);
    let info = count(Op::is_info);
    let fail = h.len() - ok - info;
    let line = format!(
        "workload={} nodes={} clients={} nemesis={} seed={} ops={} ok={} fail={} info={} \
         partitions={} peer-msgs={} peer-dropped={} elapsed={:.1}s valid?={}",
        opts.workload.name(),
        opts.nodes,
        opts.clients,
        match opts.nemesis {
            Nemesis::None => "none",
            Nemesis::Partition => "partition",
        },
        opts.seed,
        h.len(),
        ok,
        fail,
        info,
        world.partitions,
        world.peer_sent,
        world.peer_dropped,
        elapsed,
        verdict.valid_str()
    );
    let dir = run_dir(&opts);
    let mut history_path = None;
    if verdict.valid != Some(true) || opts.keep_history {
        let path = dir.join("history.jsonl");
        history::save(&path, h).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut report = line.clone();
        for n in &verdict.notes {
            report.push('\n');
            report.push_str(n);
        }
        report.push('\n');
        std::fs::write(dir.join("summary.txt"), report).map_err(|e| format!("summary.txt: {e}"))?;
        history_path = Some(path);
    } else {
        // A valid run keeps nothing: its logs would only crowd out the failures'.
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(Summary {
        line,
        verdict,
        history_path,
    })
}

/// Re-checks a saved history (the replay of a failure's verdict).
pub fn recheck(workload: Workload, path: &Path, search_budget: u64) -> Result<Verdict, String> {
    let ops = history::load(path)?;
    Ok(check_history(workload, &ops, search_budget))
}

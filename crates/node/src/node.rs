//! The state machine: inputs in, outputs out, timers asked for.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::{Bytes, BytesMut};
pub use lattice_crdt::NodeId;
use lattice_resp::{Protocol, ReplyWriter};
use lattice_store::{Db, Entry};
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::blocking::BlockRequest;
use crate::buggify::Buggify;
use crate::client::{Client, ConnId, ReplyMode};
use crate::command::{find_subcommand, Call, CommandSpec, CommandTable};
use crate::config::Config;
use crate::repl::Replicator;
use crate::stats::Stats;

/// Microseconds since the Unix epoch on this node's clock. There is no `now()`: the driver
/// passes the time in with every input and keeps it from going backwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Micros(pub u64);

impl Micros {
    pub fn from_millis(ms: u64) -> Micros {
        Micros(ms.saturating_mul(1000))
    }

    pub fn as_millis(self) -> u64 {
        self.0 / 1000
    }
}

/// Figures about the hosting process that only the driver can measure (INFO memory, cpu).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessStats {
    pub used_memory_bytes: u64,
    pub rss_bytes: u64,
    pub cpu_user_us: u64,
    pub cpu_sys_us: u64,
    pub process_id: u64,
    pub tcp_port: u64,
}

pub enum Input {
    /// A client connected. The node may refuse it (maxclients) by closing it at once.
    Connected {
        conn: ConnId,
        peer_addr: String,
        local_addr: String,
    },
    /// One parsed request; a pipeline arrives as many of these in order.
    Request { conn: ConnId, args: Vec<Bytes> },
    /// The driver's parser rejected the connection's input: reply and close.
    ProtocolError { conn: ConnId, message: String },
    /// The connection is gone (peer closed, I/O error, or after an `Output::Close`).
    Closed { conn: ConnId },
    /// Fresh process figures for INFO.
    ProcessStats(ProcessStats),
    /// The driver has an (authenticated) link to replica `peer`. From now on the node may emit
    /// [`Output::PeerSend`] for it. Repeating it for a live link is harmless.
    PeerUp { peer: NodeId },
    /// One message from `peer`: the payload of one frame (the driver strips its framing). Bytes
    /// the node cannot decode are counted and dropped, never trusted.
    PeerMessage { peer: NodeId, data: Bytes },
    /// The link to `peer` is gone. The node stops sending to it until the next `PeerUp`; what
    /// was lost in flight is repaired by anti-entropy.
    PeerDown { peer: NodeId },
    /// Every persistence record up to `seq` is durable (the answer to [`Output::Sync`], or to
    /// any sync the driver did on its own). Replies held for them are released.
    Persisted { seq: u64 },
    /// Writing or syncing records failed; the driver keeps them and retries. Under
    /// `appendfsync always` write commands are refused (MISCONF) until a `Persisted` arrives.
    PersistError { message: String },
    /// The snapshot begun by [`Output::SnapshotBegin`] is on disk and current (its size in
    /// bytes), or failed.
    SnapshotDone { result: Result<u64, String> },
    /// Recovery finished: the last record applied and what was found (for INFO). Record
    /// payloads themselves go in through [`Node::load`] before this.
    Loaded {
        last_seq: u64,
        log_bytes: u64,
        snapshot_bytes: u64,
        keys: u64,
        records: u64,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub enum Output {
    /// Bytes to write to a connection, in order: a whole pipeline's replies in one piece.
    Write {
        conn: ConnId,
        data: Bytes,
    },
    /// Close the connection after everything written before.
    Close {
        conn: ConnId,
    },
    /// One message for replica `peer`; the driver frames it (the server: 4-byte big-endian
    /// length, then the payload) and sends it in order on the peer's link. Emitted only
    /// between `PeerUp` and `PeerDown`; the driver may drop it if the link fails.
    PeerSend {
        peer: NodeId,
        data: Bytes,
    },
    /// Persistence record `seq` (one more than the previous): the new state of every key the
    /// commands since the previous record changed (encoding in `persist.rs`). `resume` marks
    /// the first record after logging was off. Emitted only after `Node::enable_persistence`.
    Append {
        seq: u64,
        data: Bytes,
        resume: bool,
    },
    /// Make every record up to `seq` durable, then answer [`Input::Persisted`] (or
    /// [`Input::PersistError`]).
    Sync {
        seq: u64,
    },
    /// A snapshot of the state from record `seq` on begins; chunks follow slot by slot while
    /// the node keeps serving, then `SnapshotEnd`. Answer with [`Input::SnapshotDone`].
    SnapshotBegin {
        seq: u64,
    },
    SnapshotChunk {
        data: Bytes,
    },
    SnapshotEnd {
        keys: u64,
    },
    /// SHUTDOWN: after carrying out every output before this one and syncing the log, stop
    /// the process.
    Shutdown,
}

/// Keys removed by one active-expiry pass at most; bounds the work of a single timer tick.
const EXPIRE_KEYS_PER_TICK: usize = 200;
/// Requests a parked (blocked) client may pipeline behind its blocking command; beyond this the
/// connection is closed rather than buffering without bound.
const MAX_QUEUED_WHILE_BLOCKED: usize = 100_000;

/// Commands a RESP2 client may send while subscribed.
const ALLOWED_WHILE_SUBSCRIBED: &[&str] = &[
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ping",
    "quit",
    "reset",
];
/// Inputs held back while a script runs (client requests before busy-reply-threshold, the
/// script caller's requests, replication messages) at most. Past it, replication messages are
/// dropped (anti-entropy repairs them) and clients sending more are closed.
const MAX_HELD_INPUTS: usize = 100_000;

/// Commands executed at once inside MULTI instead of being queued.
const RUN_INSIDE_MULTI: &[&str] = &["exec", "discard", "multi", "watch", "quit", "reset"];

/// Everything commands may touch. Split from [`Node`] so a handler can borrow it mutably while
/// the connection's output buffer is borrowed by the call.
pub struct Core {
    pub db: Db,
    pub config: Config,
    pub stats: Stats,
    pub clients: crate::client::ClientTable,
    pub rng: ChaCha8Rng,
    pub buggify: Buggify,
    pub process: ProcessStats,
    pub table: CommandTable,
    /// When the node started (ms), for INFO uptime.
    pub start_ms: u64,
    /// The latest time the node was given.
    pub now: Micros,
    /// 40 hex characters, drawn from the node's seed (INFO run_id).
    pub run_id: String,
    /// Pub/sub: channel or pattern -> subscribers, in connection order.
    pub channels: BTreeMap<Bytes, BTreeSet<ConnId>>,
    pub patterns: BTreeMap<Bytes, BTreeSet<ConnId>>,
    /// WATCHed key -> watching clients.
    pub(crate) watched_keys: BTreeMap<Bytes, BTreeSet<ConnId>>,
    /// Key -> clients parked on it, first come first served.
    pub(crate) blocked_on: BTreeMap<Bytes, VecDeque<ConnId>>,
    pub(crate) block_deadlines: BTreeSet<(u64, ConnId)>,
    /// Keys changed since parked clients were last offered them.
    ready_keys: Vec<Bytes>,
    pub(crate) block_request: Option<BlockRequest>,
    /// Clients released from blocking by a command (CLIENT UNBLOCK) whose pipelined requests
    /// must now run.
    pub(crate) released: Vec<ConnId>,
    /// Connections with output or a close pending, in the order they became pending.
    pending: VecDeque<ConnId>,
    next_cron_ms: u64,
    /// Replication state; None for a standalone node (cluster_size 1), which then keeps no
    /// CRDT metadata at all.
    pub(crate) repl: Option<Box<Replicator>>,
    /// The Lua interpreter and script cache (EVAL, SCRIPT).
    pub(crate) scripts: crate::cmd::script::Scripts,
    /// Inputs that arrived while a script runs and must wait until it ends, in arrival order
    /// (see [`Node::handle`]).
    held: VecDeque<Input>,
    /// Persistence: records, syncs, held replies, snapshots (`persist.rs`).
    pub persist: crate::persist::Persist,
}

impl Core {
    pub fn random_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// Looks a key up for reading: lazy expiry, hit/miss counting, access time.
    pub fn lookup_read(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        self.expire_if_due(key, now_ms);
        match self.db.get_live(key, now_ms, |_| {}) {
            Some(e) => {
                self.stats.keyspace_hits += 1;
                e.set_access_ms(now_ms);
                Some(e)
            }
            None => {
                self.stats.keyspace_misses += 1;
                None
            }
        }
    }

    /// Looks a key up for writing: lazy expiry and access time, no hit/miss counting.
    pub fn lookup_write(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        self.expire_if_due(key, now_ms);
        let e = self.db.get_live(key, now_ms, |_| {})?;
        e.set_access_ms(now_ms);
        Some(e)
    }

    /// True when `key` exists and has not expired (applies lazy expiry, counts nothing).
    pub fn exists(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.expire_if_due(key, now_ms);
        self.db.get_raw(key).is_some()
    }

    /// Lazy expiry: deletes `key` if its deadline has passed, reporting the deletion like any
    /// other change (WATCH sees it; keyspace notifications say `expired`).
    fn expire_if_due(&mut self, key: &[u8], now_ms: u64) {
        // No deadline has passed, so no key can be expired: skip hashing and probing the key
        // (the lookup that follows does that once).
        if self.db.next_deadline_ms().is_none_or(|d| d >= now_ms) {
            return;
        }
        let mut expired = false;
        let _ = self.db.get_live(key, now_ms, |_| expired = true);
        if expired {
            self.after_expiry(key);
        }
    }

    fn after_expiry(&mut self, key: &[u8]) {
        self.modified(key);
        self.notify(crate::cmd::pubsub::EVENT_EXPIRED, "expired", key);
    }

    /// Every command that changes a key — its value, its deadline or its existence — calls this
    /// once per changed key after the change, like Redis's `signalModifiedKey`. WATCH,
    /// parked blocking clients and (with replication) delta capture hang off this one hook.
    pub fn modified(&mut self, key: &[u8]) {
        if let Some(r) = self.repl.as_mut() {
            r.note_modified(key);
        }
        self.persist_modified(key);
        self.touched_by_peer(key);
    }

    /// A key changed by replication (a merged peer state): WATCH and parked clients see it like
    /// a local write, but it is not captured again.
    pub(crate) fn touched_by_peer(&mut self, key: &[u8]) {
        if !self.watched_keys.is_empty() {
            if let Some(watchers) = self.watched_keys.get(key) {
                let gone = self.db.get_raw(key).is_none();
                for conn in watchers {
                    if let Some(c) = self.clients.get_mut(conn) {
                        // A key that had expired before the WATCH being reclaimed: no change.
                        if gone && c.watched_expired.remove(key) {
                            continue;
                        }
                        c.dirty_cas = true;
                    }
                }
            }
        }
        if !self.blocked_on.is_empty()
            && self.blocked_on.contains_key(key)
            && !self.ready_keys.iter().any(|k| k == key)
        {
            self.ready_keys.push(Bytes::copy_from_slice(key));
        }
    }

    /// Marks every watcher of a key that exists now as dirty (FLUSHALL/FLUSHDB, before the
    /// keys go).
    pub fn touch_all_watched(&mut self) {
        let now_ms = self.now.as_millis();
        let keys: Vec<Bytes> = self.watched_keys.keys().cloned().collect();
        for k in keys {
            if self.db.get_raw(&k).is_some_and(|e| !e.is_expired(now_ms)) {
                self.modified(&k);
            }
        }
    }

    /// Appends to another connection's output (pub/sub messages, unblocked clients).
    pub fn write_to(&mut self, conn: ConnId, f: impl FnOnce(&mut ReplyWriter)) {
        if let Some(c) = self.clients.get_mut(&conn) {
            if c.closing {
                return;
            }
            let mut w = ReplyWriter::new(&mut c.out, c.proto);
            f(&mut w);
            if !c.pending {
                c.pending = true;
                self.pending.push_back(conn);
            }
        }
    }

    /// Closes a connection once its pending output is written.
    pub fn close_client(&mut self, conn: ConnId) {
        if let Some(c) = self.clients.get_mut(&conn) {
            c.closing = true;
            if !c.pending {
                c.pending = true;
                self.pending.push_back(conn);
            }
        }
    }

    /// Forgets everything a connection had registered (watches, parking, subscriptions).
    fn forget_client(&mut self, conn: ConnId) {
        self.persist_forget(conn);
        self.unpark(conn);
        crate::cmd::tx::unwatch_all(self, conn);
        crate::cmd::pubsub::unsubscribe_all(self, conn);
        self.clients.remove(&conn);
    }

    /// Queues `conn` among the connections with pending output.
    pub(crate) fn pending_push(&mut self, conn: ConnId) {
        self.pending.push_back(conn);
    }

    /// Milliseconds since the node started.
    pub fn uptime_ms(&self) -> u64 {
        self.now.as_millis().saturating_sub(self.start_ms)
    }

    /// Runs one command for `conn`, writing its reply into `out`. Applies the rules that sit
    /// between parsing and the handler: unknown commands and arity, authentication, the RESP2
    /// subscribed-mode restriction, and MULTI queueing.
    fn dispatch(&mut self, conn: ConnId, args: &[Bytes], out: &mut BytesMut, proto: Protocol) {
        let now = self.now;
        let mut call = Call::new(conn, args, now, ReplyWriter::new(out, proto));
        let in_multi = self.clients.get(&conn).is_some_and(|c| c.multi.is_some());
        match resolve(self, args) {
            Err(message) if args[0].eq_ignore_ascii_case(b"exec") => {
                self.abort_exec(&mut call, &message);
            }
            Err(message) => {
                if in_multi {
                    if let Some(m) = self.clients.get_mut(&conn).and_then(|c| c.multi.as_mut()) {
                        m.errored = true;
                    }
                }
                call.error_bytes(&message);
            }
            Ok(spec) => {
                let client = &self.clients[&conn];
                let authorized = self.config.requirepass.is_none()
                    || client.authenticated
                    || spec.flags.contains(&"no-auth");
                if !authorized {
                    call.error("NOAUTH Authentication required.");
                    self.stats.commands.entry(spec.name).rejected_calls += 1;
                    if let Some(m) = self.clients.get_mut(&conn).and_then(|c| c.multi.as_mut()) {
                        m.errored = true;
                    }
                } else if client.proto == Protocol::Resp2
                    && client.subscriptions() > 0
                    && !ALLOWED_WHILE_SUBSCRIBED.contains(&spec.name)
                {
                    let message = format!(
                        "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                        spec.name
                    );
                    if spec.name == "exec" {
                        self.abort_exec(&mut call, message.as_bytes());
                    } else {
                        if let Some(m) = self.clients.get_mut(&conn).and_then(|c| c.multi.as_mut())
                        {
                            m.errored = true;
                        }
                        call.error(&message);
                    }
                    self.stats.commands.entry(spec.name).rejected_calls += 1;
                } else if in_multi && spec.flags.contains(&"no-multi") {
                    // SAVE, SHUTDOWN...: refused while queueing, which aborts the transaction.
                    if let Some(m) = self.clients.get_mut(&conn).and_then(|c| c.multi.as_mut()) {
                        m.errored = true;
                    }
                    call.error(crate::cmd::server::NOT_IN_MULTI);
                } else if self.scripts.running.as_ref().is_some_and(|r| r.timed_out)
                    && !spec.flags.contains(&"allow-busy")
                {
                    // A script is past busy-reply-threshold: refused like Redis's
                    // rejectCommand, which also dooms a transaction being queued.
                    self.stats.commands.entry(spec.name).rejected_calls += 1;
                    let busy = crate::cmd::script::BUSY.as_bytes();
                    if spec.name == "exec" {
                        self.abort_exec(&mut call, busy);
                    } else {
                        if let Some(m) = self.clients.get_mut(&conn).and_then(|c| c.multi.as_mut())
                        {
                            m.errored = true;
                        }
                        call.error_bytes(busy);
                    }
                } else if in_multi && !RUN_INSIDE_MULTI.contains(&spec.name) {
                    if let Some(m) = self.clients.get_mut(&conn).and_then(|c| c.multi.as_mut()) {
                        m.queued.push((spec, args.to_vec()));
                    }
                    call.out.simple(b"QUEUED");
                } else {
                    self.run_handler(spec, &mut call);
                }
            }
        }
        if let Some(code) = call.error_code.take() {
            self.stats.total_error_replies += 1;
            *self.stats.errors.entry(code).or_insert(0) += 1;
        }
    }

    /// Runs a logged command during recovery (its reply only tells success from failure).
    pub(crate) fn dispatch_for_replay(&mut self, args: &[Bytes], out: &mut BytesMut) {
        self.dispatch(crate::persist::REPLAY_CONN, args, out, Protocol::Resp2);
    }

    /// A refused EXEC aborts the transaction outright, in or out of MULTI, as Redis's
    /// execCommandAbort does: `EXECABORT ... because of: <reason>`.
    fn abort_exec(&mut self, call: &mut Call, message: &[u8]) {
        let reason = message.strip_prefix(b"ERR ").unwrap_or(message);
        let mut text = b"EXECABORT Transaction discarded because of: ".to_vec();
        text.extend_from_slice(reason);
        if let Some(c) = self.clients.get_mut(&call.conn) {
            c.multi = None;
        }
        crate::cmd::tx::unwatch_all(self, call.conn);
        call.error_bytes(&text);
    }

    /// Calls the handler of `spec` and accounts for it.
    pub(crate) fn run_handler(&mut self, spec: &'static CommandSpec, call: &mut Call) {
        // Inside EXEC the connection's command stays EXEC (CLIENT INFO/LIST cmd=), as in Redis.
        if let Some(c) = self.clients.get_mut(&call.conn).filter(|_| !call.in_exec) {
            c.last_command = spec.name;
        }
        let handler = spec.handler.expect("resolve returns runnable commands");
        if spec.is_write() {
            if let Some(e) = self.persist_refuses_writes() {
                self.stats.commands.entry(spec.name).rejected_calls += 1;
                return call.error(&e);
            }
        }
        let errors_before = call.error_code.is_some();
        let intent = self
            .repl
            .as_ref()
            .map(|_| crate::repl::intent_of(spec.name, call.args));
        // Deferred captures are coalesced per intent: settle them before this command changes
        // any of their keys in another way.
        if let Some(i) = intent {
            if self.repl.as_ref().is_some_and(|r| r.must_settle_before(i)) {
                self.settle_captures();
            }
        }
        handler(self, call);
        if self.persist.active {
            self.persist_after_command(spec.name, call.args);
        }
        if let Some(intent) = intent {
            if self.repl.as_ref().is_some_and(|r| !r.dirty.is_empty()) {
                self.capture_after(intent, spec.name, call.args);
            }
        }
        self.stats.total_commands_processed += 1;
        let s = self.stats.commands.entry(spec.name);
        s.calls += 1;
        if call.failed() && !errors_before {
            s.failed_calls += 1;
        }
    }
}

/// A Lattice node.
pub struct Node {
    core: Core,
}

impl Node {
    /// A node with `config`, drawing all its randomness from `seed`, started at `now`.
    pub fn new(config: Config, seed: u64, buggify: Buggify, now: Micros) -> Node {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let run_id = (0..20)
            .map(|_| format!("{:02x}", rng.next_u64() as u8))
            .collect();
        let now_ms = now.as_millis();
        let repl = (config.cluster_size > 1).then(|| {
            Box::new(Replicator::new(
                NodeId(config.node_id),
                config.cluster_size,
                now_ms,
            ))
        });
        let core = Core {
            db: Db::new(),
            config,
            stats: Stats::default(),
            clients: crate::client::ClientTable::default(),
            rng,
            buggify,
            process: ProcessStats::default(),
            table: CommandTable::new(crate::cmd::FAMILIES),
            start_ms: now_ms,
            now,
            run_id,
            channels: BTreeMap::new(),
            patterns: BTreeMap::new(),
            watched_keys: BTreeMap::new(),
            blocked_on: BTreeMap::new(),
            block_deadlines: BTreeSet::new(),
            ready_keys: Vec::new(),
            block_request: None,
            released: Vec::new(),
            pending: VecDeque::new(),
            next_cron_ms: now_ms,
            repl,
            scripts: crate::cmd::script::Scripts::new(),
            held: VecDeque::new(),
            persist: crate::persist::Persist::default(),
        };
        Node { core }
    }

    pub fn config(&self) -> &Config {
        &self.core.config
    }

    /// Read access for drivers and checkers (state digests, INFO-like figures).
    pub fn core(&self) -> &Core {
        &self.core
    }

    pub(crate) fn core_mut(&mut self) -> &mut Core {
        &mut self.core
    }

    fn advance(&mut self, now: Micros) {
        // Drivers keep time monotonic; clamping makes a misbehaving one harmless.
        if now > self.core.now {
            self.core.now = now;
        }
    }

    /// Handles one input. While a script is suspended between slices, inputs that could
    /// observe or change the keyspace wait in arrival order until it ends, as Redis's clients
    /// wait while a script runs: client requests until the script passes busy-reply-threshold
    /// (then they are served, and refused with BUSY unless `allow-busy`), the script caller's
    /// own requests and replication messages until the end.
    pub fn handle(&mut self, now: Micros, input: Input) {
        self.advance(now);
        self.take_input(input);
    }

    fn take_input(&mut self, input: Input) {
        if self.core.scripts.running.is_some() {
            self.input_during_script(input);
        } else {
            self.apply(input);
        }
    }

    fn input_during_script(&mut self, input: Input) {
        self.check_script_threshold();
        let Some(run) = self.core.scripts.running.as_mut() else {
            return self.apply(input);
        };
        let conn = match &input {
            // No keyspace involved: served at once.
            Input::Connected { .. }
            | Input::ProcessStats(_)
            | Input::Persisted { .. }
            | Input::PersistError { .. }
            | Input::SnapshotDone { .. }
            | Input::Loaded { .. } => return self.apply(input),
            Input::Request { conn, .. }
            | Input::ProtocolError { conn, .. }
            | Input::Closed { conn } => Some(*conn),
            Input::PeerUp { .. } | Input::PeerDown { .. } | Input::PeerMessage { .. } => None,
        };
        if run.timed_out && conn.is_some_and(|c| c != run.caller) {
            return self.apply(input);
        }
        if self.core.held.len() >= MAX_HELD_INPUTS {
            match (&input, conn) {
                (Input::PeerMessage { .. }, _) => return,
                (Input::Request { .. }, Some(c)) if c == run.caller => {
                    run.close_caller = true;
                    return;
                }
                (Input::Request { .. }, Some(c)) => return self.core.close_client(c),
                _ => {}
            }
        }
        self.core.held.push_back(input);
    }

    /// Once the running script is past busy-reply-threshold on the node's clock, the client
    /// inputs held back for it are served (and mostly refused with BUSY); the caller's and the
    /// replication messages keep waiting.
    fn check_script_threshold(&mut self) {
        let now = self.core.now;
        let threshold_us = self
            .core
            .config
            .busy_reply_threshold_ms
            .saturating_mul(1000);
        let Some(run) = self.core.scripts.running.as_mut() else {
            return;
        };
        if run.timed_out || now.0.saturating_sub(run.started.0) < threshold_us {
            return;
        }
        run.timed_out = true;
        let caller = run.caller;
        for input in std::mem::take(&mut self.core.held) {
            let other_client = match &input {
                Input::Request { conn, .. }
                | Input::ProtocolError { conn, .. }
                | Input::Closed { conn } => *conn != caller,
                _ => false,
            };
            if other_client {
                self.apply(input);
            } else {
                self.core.held.push_back(input);
            }
        }
    }

    /// Runs the suspended script's next slice; when it ends, replies to its caller and lets
    /// everything held back in, in order.
    fn continue_script(&mut self) {
        self.check_script_threshold();
        let Some(done) = crate::cmd::script::continue_script(&mut self.core) else {
            return;
        };
        let core = &mut self.core;
        if done.reply.is_some() {
            let mut code = None;
            core.write_to(done.caller, |w| code = done.write(w));
            if let Some(code) = code {
                core.stats.total_error_replies += 1;
                *core.stats.errors.entry(code).or_insert(0) += 1;
            }
        }
        if done.close {
            core.close_client(done.caller);
        }
        self.serve_ready_keys();
        for conn in std::mem::take(&mut self.core.released) {
            self.run_queued(conn);
        }
        // A held request may start another long script: the rest is then held again.
        for input in std::mem::take(&mut self.core.held) {
            self.take_input(input);
        }
    }

    fn apply(&mut self, input: Input) {
        if matches!(
            input,
            Input::PeerUp { .. } | Input::PeerDown { .. } | Input::PeerMessage { .. }
        ) {
            // Peer traffic reads and merges replicated state: local writes go in first.
            self.core.settle_captures();
        }
        match input {
            Input::Connected {
                conn,
                peer_addr,
                local_addr,
            } => self.connected(conn, peer_addr, local_addr),
            Input::Request { conn, args } => {
                self.request(conn, args);
                self.serve_ready_keys();
                for conn in std::mem::take(&mut self.core.released) {
                    self.run_queued(conn);
                }
            }
            Input::ProtocolError { conn, message } => {
                let core = &mut self.core;
                core.stats.total_error_replies += 1;
                core.write_to(conn, |w| w.error(format!("ERR {message}").as_bytes()));
                core.close_client(conn);
            }
            Input::Closed { conn } => self.core.forget_client(conn),
            Input::ProcessStats(p) => self.core.process = p,
            Input::PeerUp { peer } => {
                let now_ms = self.core.now.as_millis();
                if let Some(r) = self.core.repl.as_mut() {
                    r.peer_up(peer, now_ms);
                }
            }
            Input::PeerDown { peer } => {
                if let Some(r) = self.core.repl.as_mut() {
                    r.peer_down(peer);
                }
            }
            Input::PeerMessage { peer, data } => self.peer_message(peer, &data),
            input @ (Input::Persisted { .. }
            | Input::PersistError { .. }
            | Input::SnapshotDone { .. }
            | Input::Loaded { .. }) => {
                self.core.persist_input(input);
                // A snapshot's waiters may have been answered; SHUTDOWN may follow.
                self.serve_ready_keys();
            }
        }
    }

    fn peer_message(&mut self, peer: NodeId, data: &[u8]) {
        let now_ms = self.core.now.as_millis();
        let Some(r) = self.core.repl.as_mut() else {
            return;
        };
        for effect in r.on_message(peer, data, now_ms) {
            match effect {
                crate::repl::Effect::Keys(keys) => {
                    // A message changes up to thousands of keys: each group's store entries
                    // are looked up back to back first, so their cache misses overlap (see
                    // `lattice_store::Db::prefetch`).
                    for group in keys.chunks(crate::repl::PREFETCH_GROUP) {
                        for k in group {
                            self.core.db.prefetch(k, None);
                        }
                        for k in group {
                            self.core.apply_remote(k);
                        }
                    }
                }
                crate::repl::Effect::Publish(channel, message) => {
                    self.core.deliver_publish(&channel, &message);
                }
            }
        }
        self.serve_ready_keys();
        for conn in std::mem::take(&mut self.core.released) {
            self.run_queued(conn);
        }
    }

    fn connected(&mut self, conn: ConnId, peer_addr: String, local_addr: String) {
        let core = &mut self.core;
        let now_ms = core.now.as_millis();
        core.stats.total_connections_received += 1;
        let full = core.clients.len() as u64 >= core.config.maxclients;
        core.clients
            .insert(conn, Client::new(conn, peer_addr, local_addr, now_ms));
        if full {
            core.stats.rejected_connections += 1;
            core.write_to(conn, |w| w.error(b"ERR max number of clients reached"));
            core.close_client(conn);
        }
    }

    /// Executes one request from `conn`, or queues it behind a blocking command.
    fn request(&mut self, conn: ConnId, args: Vec<Bytes>) {
        let core = &mut self.core;
        let Some(client) = core.clients.get_mut(&conn) else {
            // A request for a connection we do not know (closed, or refused): ignore it.
            return;
        };
        if client.closing || args.is_empty() {
            return;
        }
        if client.blocked.is_some() {
            if client.queued_requests.len() >= MAX_QUEUED_WHILE_BLOCKED {
                core.close_client(conn);
            } else {
                client.queued_requests.push_back(args);
            }
            return;
        }
        self.execute(conn, &args);
    }

    /// Runs `args` for `conn` into its output buffer, honouring CLIENT REPLY, and parks the
    /// client if the command asked to block.
    /// Returns true when the command asked to block.
    fn execute(&mut self, conn: ConnId, args: &[Bytes]) -> bool {
        let core = &mut self.core;
        let now_ms = core.now.as_millis();
        let Some(client) = core.clients.get_mut(&conn) else {
            return false;
        };
        client.last_interaction_ms = now_ms;
        if client.reply_mode == ReplyMode::SkipNext {
            client.reply_mode = ReplyMode::SkipThis;
        }
        let proto = client.proto;
        let mut out = std::mem::take(&mut client.out);
        let start_len = out.len();

        core.block_request = None;
        core.dispatch(conn, args, &mut out, proto);
        let blocked = match core.block_request.take() {
            Some(req) => {
                core.park(conn, args, req);
                true
            }
            None => false,
        };

        let Some(client) = core.clients.get_mut(&conn) else {
            return blocked;
        };
        // CLIENT REPLY: OFF silences every reply, SKIP the next command's; a CLIENT REPLY ON
        // inside that command switches it back on before its own +OK.
        match client.reply_mode {
            ReplyMode::Off => out.truncate(start_len),
            ReplyMode::SkipThis => {
                out.truncate(start_len);
                client.reply_mode = ReplyMode::On;
            }
            ReplyMode::On | ReplyMode::SkipNext => {}
        }
        // Anything written to this connection by the command itself (a RESP3 push for its own
        // subscription) went to the placeholder buffer; like Redis, it precedes the reply.
        let pushed = std::mem::replace(&mut client.out, out);
        if !pushed.is_empty() {
            let reply = client.out.split_off(start_len);
            client.out.extend_from_slice(&pushed);
            client.out.extend_from_slice(&reply);
        }
        if !client.out.is_empty() && !client.pending {
            client.pending = true;
            core.pending.push_back(conn);
        }
        blocked
    }

    /// Offers changed keys to parked clients, first come first served, until nothing changes.
    fn serve_ready_keys(&mut self) {
        if self.core.scripts.running.is_some() {
            // Keys a script changed are offered once it has ended, as Redis does after the
            // whole command: a parked client must not see (or pop) its half-done state.
            return;
        }
        // Each retry that succeeds consumes data; a retry can also make other keys ready
        // (BLMOVE pushes), so loop until quiet. Bounded: every successful retry releases a
        // client, and a key is only re-offered after a further change.
        while !self.core.ready_keys.is_empty() {
            let keys = std::mem::take(&mut self.core.ready_keys);
            for key in keys {
                let waiting: Vec<ConnId> = match self.core.blocked_on.get(&key) {
                    Some(q) => q.iter().copied().collect(),
                    None => continue,
                };
                for conn in waiting {
                    let Some(args) = self
                        .core
                        .clients
                        .get(&conn)
                        .and_then(|c| c.blocked.as_ref())
                        .map(|b| b.args.clone())
                    else {
                        continue;
                    };
                    let parked_again = self.execute(conn, &args);
                    if !parked_again {
                        self.core.unpark(conn);
                        self.run_queued(conn);
                    }
                }
            }
        }
    }

    /// Runs requests a released client pipelined while parked, until it parks again.
    fn run_queued(&mut self, conn: ConnId) {
        loop {
            let Some(client) = self.core.clients.get_mut(&conn) else {
                return;
            };
            if client.blocked.is_some() || client.closing {
                return;
            }
            let Some(args) = client.queued_requests.pop_front() else {
                return;
            };
            self.execute(conn, &args);
        }
    }

    /// Runs due timers: blocking timeouts, active expiry, statistics, idle-client timeouts.
    pub fn handle_timeout(&mut self, now: Micros) {
        self.advance(now);
        if self.core.scripts.running.is_some() {
            // No other timer runs in the middle of a script (Redis runs none either): expiry
            // or a blocking timeout would break its atomicity.
            return self.continue_script();
        }
        let now_ms = self.core.now.as_millis();
        self.expire_blocked(now_ms);
        self.core.persist_tick();
        self.core.settle_captures();
        if let Some(r) = self.core.repl.as_mut() {
            r.tick(now_ms);
        }
        if now_ms < self.core.next_cron_ms {
            return;
        }
        let core = &mut self.core;
        let budget = if core.buggify.fire("expire_tiny_batch") {
            1
        } else {
            EXPIRE_KEYS_PER_TICK
        };
        let mut expired: Vec<Vec<u8>> = Vec::new();
        let (_, more) = core
            .db
            .expire_due(now_ms, budget, |e| expired.push(e.key().to_vec()));
        for key in &expired {
            core.after_expiry(key);
        }
        core.capture_dirty(crate::repl::state::Intent::Assign, false);
        core.stats.sample(now_ms);
        if core.config.timeout_s > 0 {
            let limit_ms = core.config.timeout_s * 1000;
            let idle: Vec<ConnId> = core
                .clients
                .values()
                .filter(|c| c.blocked.is_none() && c.subscriptions() == 0)
                .filter(|c| now_ms.saturating_sub(c.last_interaction_ms) > limit_ms)
                .map(|c| c.id)
                .collect();
            for conn in idle {
                core.close_client(conn);
            }
        }
        let period_ms = 1000 / core.config.hz.max(1);
        core.next_cron_ms = if more { now_ms + 1 } else { now_ms + period_ms };
        if core.buggify.fire("delay_timer") {
            core.next_cron_ms += period_ms * 3;
        }
        self.serve_ready_keys();
    }

    /// Sends the timeout reply to parked clients whose deadline has passed.
    fn expire_blocked(&mut self, now_ms: u64) {
        while let Some(&(deadline, conn)) = self.core.block_deadlines.first() {
            if deadline > now_ms {
                break;
            }
            if let Some(b) = self.core.unpark(conn) {
                self.core.write_to(conn, |w| b.on_timeout.write(w));
            } else {
                self.core.block_deadlines.remove(&(deadline, conn));
            }
            self.run_queued(conn);
        }
    }

    /// The earliest time the node wants [`Node::handle_timeout`] called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Micros> {
        if self.core.scripts.running.is_some() {
            // The next slice, at once (the driver serves what arrived meanwhile first).
            return Some(self.core.now);
        }
        let cron = self.core.next_cron_ms;
        let mut next = match self.core.next_block_deadline_ms() {
            Some(d) => cron.min(d),
            None => cron,
        };
        if let Some(r) = self.core.repl.as_ref() {
            next = next.min(r.next_deadline_ms(self.core.now.as_millis()));
        }
        if self.core.snapshot_slicing() {
            // The next snapshot slice, soon (other inputs are served in between).
            next = next.min(self.core.now.as_millis() + 1);
        }
        Some(Micros::from_millis(next))
    }

    /// True while a script is suspended between slices: [`Node::poll_timeout`] then asks for
    /// the next slice at once. A driver should let other inputs in before it (the server's
    /// event loop serves the ready connections between slices), and a simulator charges the
    /// slice virtual time.
    #[must_use]
    pub fn script_running(&self) -> bool {
        self.core.scripts.running.is_some()
    }

    /// The next effect for the driver to carry out, or `None` when there is nothing to do.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        let core = &mut self.core;
        if core.persist.active && core.scripts.running.is_none() {
            core.persist_flush();
        }
        if let Some(o) = core.persist_poll() {
            return Some(o);
        }
        while let Some(conn) = core.pending.pop_front() {
            let Some(client) = core.clients.get_mut(&conn) else {
                continue;
            };
            if !client.out.is_empty() && core.persist.active && core.persist_hold(conn) {
                // Under appendfsync always a reply waits until its record is durable; a
                // closing connection is closed once its held replies are released.
                continue;
            }
            let client = core.clients.get_mut(&conn).expect("present");
            if !client.out.is_empty() {
                let mut data = client.out.split().freeze();
                if core.buggify.fire("split_write") && data.len() > 1 {
                    // Hand the driver half now and half later: exercises partial writes.
                    let rest = data.split_off(data.len() / 2);
                    client.out.extend_from_slice(&rest);
                    core.pending.push_front(conn);
                    core.stats.net_output_bytes += data.len() as u64;
                    return Some(Output::Write { conn, data });
                }
                core.stats.net_output_bytes += data.len() as u64;
                if client.closing {
                    core.pending.push_front(conn);
                } else {
                    client.pending = false;
                }
                return Some(Output::Write { conn, data });
            }
            client.pending = false;
            if client.closing {
                if client.held_replies > 0 {
                    // Closed once its held replies are released.
                    continue;
                }
                core.forget_client(conn);
                return Some(Output::Close { conn });
            }
        }
        // A script's effects go to the peers together, once it has ended.
        let now_ms = core.now.as_millis();
        if core.scripts.running.is_none()
            && core.repl.as_ref().is_some_and(|r| r.flush_ready(now_ms))
        {
            core.settle_captures();
            if let Some(r) = core.repl.as_mut() {
                r.flush(now_ms);
            }
        }
        if let Some(r) = core.repl.as_mut() {
            if let Some((peer, data)) = r.poll_send() {
                return Some(Output::PeerSend { peer, data });
            }
        }
        None
    }

    /// Charges `usec` of measured execution time to the command named `name` (the driver
    /// measures, the node only counts, so INFO commandstats has real figures without the node
    /// reading a clock).
    pub fn charge_command_time(&mut self, name: &'static str, usec: u64) {
        if let Some(s) = self.core.stats.commands.get_mut(name) {
            s.usec += usec;
        }
    }

    /// A hint that a request with `args` is about to be handled: the driver calls it for every
    /// request of a pipeline before handing any of them over, so the first key's memory is
    /// being fetched for all of them at once (see `lattice_store::Db::prefetch`), and so is the
    /// second argument's member when the key holds a hash or a set. Most commands name a key
    /// first; for the rest the hint is wasted, never wrong. Changes nothing.
    pub fn prefetch(&self, args: &[Bytes]) {
        if let Some(key) = args.get(1) {
            // HSET/HGET/SADD/SISMEMBER... name the member next.
            self.core.db.prefetch(key, args.get(2).map(|m| &m[..]));
        }
    }

    /// Name of the last command `conn` ran, for [`Node::charge_command_time`].
    pub fn last_command(&self, conn: ConnId) -> Option<&'static str> {
        self.core.clients.get(&conn).map(|c| c.last_command)
    }

    /// Digest of this replica's whole replicated state (every key's value, causal metadata,
    /// tombstones and expiry). Replicas that have exchanged everything have equal digests.
    /// Standalone nodes (cluster_size 1) keep no replicated state and answer 0.
    #[must_use]
    pub fn replication_digest(&mut self) -> u64 {
        self.core.settle_captures();
        self.core.repl.as_mut().map_or(0, |r| r.digest())
    }

    /// The hybrid timestamp `(wall_ms, logical, node_id)` of the string write that currently
    /// wins on `key` here, for checkers that verify last-writer-wins outcomes.
    #[must_use]
    pub fn string_stamp(&mut self, key: &[u8]) -> Option<lattice_crdt::Hlc> {
        self.core.settle_key(key);
        self.core.repl.as_ref()?.state(key)?.string_stamp()
    }

    /// Panics if any internal invariant is broken. Cheap enough to run after every simulated
    /// step for the keyspace sizes the simulator uses.
    pub fn check_invariants(&self) {
        let core = &self.core;
        core.db.check_invariants();
        core.check_replica_invariants();
        assert!(
            core.scripts.running.is_some() || core.held.is_empty(),
            "inputs held back with no script running"
        );
        for conn in &core.pending {
            if let Some(c) = core.clients.get(conn) {
                assert!(c.pending, "queued connection not flagged pending");
            }
        }
        core.clients.check_invariants();
        for (id, c) in core.clients.iter() {
            assert_eq!(*id, c.id, "client stored under another id");
            if c.pending {
                assert!(
                    core.pending.contains(id),
                    "pending connection missing from the queue"
                );
            }
            if let Some(b) = &c.blocked {
                for k in &b.keys {
                    assert!(
                        core.blocked_on.get(k).is_some_and(|q| q.contains(id)),
                        "parked client missing from its key's queue"
                    );
                }
                if let Some(d) = b.deadline_ms {
                    assert!(
                        core.block_deadlines.contains(&(d, *id)),
                        "deadline not indexed"
                    );
                }
            } else {
                assert!(
                    c.queued_requests.is_empty(),
                    "requests queued behind no block"
                );
            }
            for ch in &c.channels {
                assert!(core.channels.get(ch).is_some_and(|s| s.contains(id)));
            }
            for p in &c.patterns {
                assert!(core.patterns.get(p).is_some_and(|s| s.contains(id)));
            }
            for k in &c.watched {
                assert!(core.watched_keys.get(k).is_some_and(|s| s.contains(id)));
            }
        }
        for (key, q) in &core.blocked_on {
            assert!(!q.is_empty(), "empty parking queue kept");
            for conn in q {
                assert!(
                    core.clients
                        .get(conn)
                        .and_then(|c| c.blocked.as_ref())
                        .is_some_and(|b| b.keys.contains(key)),
                    "queue holds a client not parked on that key"
                );
            }
        }
    }
}

/// Finds the runnable command for `args`, or the exact Redis error.
fn resolve(core: &Core, args: &[Bytes]) -> Result<&'static CommandSpec, Vec<u8>> {
    let Some(spec) = core.table.find(&args[0]) else {
        return Err(unknown_command(args));
    };
    // A container dispatches on its subcommand; COMMAND also runs alone (no subcommand).
    let spec = if !spec.subcommands.is_empty() && (spec.handler.is_none() || args.len() >= 2) {
        if args.len() < 2 {
            return Err(
                format!("ERR wrong number of arguments for '{}' command", spec.name).into_bytes(),
            );
        }
        match find_subcommand(spec, &args[1]) {
            Some(sub) => sub,
            None => {
                return Err(format!(
                    "ERR unknown subcommand '{}'. Try {} HELP.",
                    truncate_lossy(&args[1], 128),
                    spec.name.to_ascii_uppercase()
                )
                .into_bytes())
            }
        }
    } else {
        spec
    };
    if !spec.arity_ok(args.len()) {
        return Err(
            format!("ERR wrong number of arguments for '{}' command", spec.name).into_bytes(),
        );
    }
    Ok(spec)
}

fn truncate_lossy(b: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&b[..b.len().min(max)]).into_owned()
}

/// Redis 7's wording: the name, then up to 128 bytes of quoted arguments. Like Redis's `%.*s`,
/// each piece ends at its first NUL byte; other bytes are echoed as they are.
fn unknown_command(args: &[Bytes]) -> Vec<u8> {
    fn c_str(b: &[u8], max: usize) -> &[u8] {
        let b = &b[..b.len().min(max)];
        match b.iter().position(|&c| c == 0) {
            Some(n) => &b[..n],
            None => b,
        }
    }
    let mut rest: Vec<u8> = Vec::new();
    for a in &args[1..] {
        if rest.len() >= 128 {
            break;
        }
        let room = 128 - rest.len();
        rest.push(b'\'');
        rest.extend_from_slice(c_str(a, room));
        rest.extend_from_slice(b"' ");
    }
    let mut msg = b"ERR unknown command '".to_vec();
    msg.extend_from_slice(c_str(&args[0], 128));
    msg.extend_from_slice(b"', with args beginning with: ");
    msg.extend_from_slice(&rest);
    msg
}

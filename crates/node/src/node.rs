//! The node: a thin sans-IO shell around the command context ([`crate::ctx::Core`]). Inputs
//! go in with the time ([`Node::handle`], [`Node::handle_timeout`]), effects come out
//! ([`Node::poll_output`]), and the node says when it next wants to be woken
//! ([`Node::poll_timeout`]). Here are only the routing of inputs, the order in which requests,
//! parked clients, scripts and timers run, and the invariants; what a command may do is the
//! dispatch policy's (`crate::dispatch`) and the handlers' (`crate::cmd`).

use std::collections::VecDeque;

use bytes::Bytes;
pub use lattice_crdt::NodeId;

use crate::buggify::Buggify;
use crate::client::{Client, ConnId, ReplyMode};
use crate::command::CommandTable;
use crate::config::Config;
use crate::ctx::Core;
pub use crate::io::{Input, Output, ProcessStats};
pub use crate::time::Micros;

/// Keys removed by one active-expiry pass at most; bounds the work of a single timer tick.
const EXPIRE_KEYS_PER_TICK: usize = 200;
/// Requests a parked (blocked) client may pipeline behind its blocking command; beyond this the
/// connection is closed rather than buffering without bound.
const MAX_QUEUED_WHILE_BLOCKED: usize = 100_000;

/// Inputs held back while a script runs (client requests before busy-reply-threshold, the
/// script caller's requests, replication messages) at most. Past it, replication messages are
/// dropped (anti-entropy repairs them) and clients sending more are closed.
const MAX_HELD_INPUTS: usize = 100_000;

/// A Lattice node.
pub struct Node {
    core: Core,
    /// Inputs that arrived while a script runs and must wait until it ends, in arrival order
    /// (see [`Node::handle`]).
    held: VecDeque<Input>,
    /// When the periodic work (active expiry, statistics, idle timeouts) runs next.
    next_cron_ms: u64,
}

impl Node {
    /// A node with `config`, drawing all its randomness from `seed`, started at `now`.
    pub fn new(config: Config, seed: u64, buggify: Buggify, now: Micros) -> Node {
        let table = CommandTable::new(crate::cmd::FAMILIES);
        Node {
            core: Core::new(config, table, seed, buggify, now),
            held: VecDeque::new(),
            next_cron_ms: now.as_millis(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.core.config
    }

    /// The entry stored under `key`, as it is: no lazy expiry, no statistics (checkers read
    /// recovered state with it).
    pub fn stored_entry(&self, key: &[u8]) -> Option<&lattice_store::Entry> {
        self.core.db.get_raw(key)
    }

    /// Every stored entry, in no particular order (checkers).
    pub fn stored_entries(&self) -> impl Iterator<Item = &lattice_store::Entry> {
        self.core.db.iter()
    }

    /// How many buggify faults this node has injected so far.
    pub fn buggify_fired(&self) -> u64 {
        self.core.buggify.fired()
    }

    /// True while the driver reports a persistence write or sync failure.
    pub fn persist_failing(&self) -> bool {
        self.core.persist.fault.is_some()
    }

    /// Snapshots completed since the node started.
    pub fn snapshots_taken(&self) -> u64 {
        self.core.persist.snapshots
    }

    /// Makes this node persist: it captures changes and emits persistence outputs from now
    /// on (the driver has a disk). Called once, after recovery's [`Input::Loaded`].
    pub fn enable_persistence(&mut self) {
        self.core.enable_persistence();
    }

    /// Recovery: applies one snapshot chunk or log record read back from disk, through the
    /// same code that applies RESTORE payloads. Nothing is logged for it.
    pub fn load(&mut self, now: Micros, data: &[u8]) -> Result<u64, String> {
        self.advance(now);
        self.core.load_payload(data)
    }

    /// Forgets everything a connection had registered (watches, parking, subscriptions,
    /// held replies) and the connection itself.
    fn forget_client(core: &mut Core, conn: ConnId) {
        core.persist_forget(conn);
        core.unpark(conn);
        core.unwatch_all(conn);
        crate::cmd::pubsub::unsubscribe_all(core, conn);
        core.clients.remove(&conn);
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
        if self.held.len() >= MAX_HELD_INPUTS {
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
        self.held.push_back(input);
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
        for input in std::mem::take(&mut self.held) {
            let other_client = match &input {
                Input::Request { conn, .. }
                | Input::ProtocolError { conn, .. }
                | Input::Closed { conn } => *conn != caller,
                _ => false,
            };
            if other_client {
                self.apply(input);
            } else {
                self.held.push_back(input);
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
        for input in std::mem::take(&mut self.held) {
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
            Input::Closed { conn } => Node::forget_client(&mut self.core, conn),
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
        if now_ms < self.next_cron_ms {
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
        self.next_cron_ms = if more { now_ms + 1 } else { now_ms + period_ms };
        if core.buggify.fire("delay_timer") {
            self.next_cron_ms += period_ms * 3;
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
        let cron = self.next_cron_ms;
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
                Node::forget_client(core, conn);
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
            core.scripts.running.is_some() || self.held.is_empty(),
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

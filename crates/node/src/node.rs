//! The node: a thin sans-IO shell around the command context ([`crate::ctx::Core`]). Inputs
//! go in with the time ([`Node::handle`], [`Node::handle_timeout`]), effects come out
//! ([`Node::poll_output`]), and the node says when it next wants to be woken
//! ([`Node::poll_timeout`]). Here are only the routing of inputs, the order in which requests,
//! parked clients, scripts and timers run, and the invariants; what a command may do is the
//! dispatch policy's (`crate::dispatch`) and the handlers' (`crate::cmd`).

use lattice_store::Changed;
use std::collections::VecDeque;

pub use lattice_crdt::NodeId;

mod accessors;
mod forward;
mod hot;
mod members;
mod requests;
mod scripts;

use crate::buggify::Buggify;
use crate::client::ConnId;
use crate::command::CommandTable;
use crate::config::Config;
use crate::ctx::Core;
pub use crate::io::{Input, Output, ProcessStats};
pub use crate::time::Micros;

/// Keys removed by one active-expiry pass at most; bounds the work of a single timer tick.
const EXPIRE_KEYS_PER_TICK: usize = 200;

/// A Lattice node.
pub struct Node {
    core: Core,
    /// Inputs that arrived while a script runs and must wait until it ends, in arrival order
    /// (see [`Node::handle`]).
    held: VecDeque<Input>,
    /// When the periodic work (active expiry, statistics, idle timeouts) runs next.
    next_cron_ms: u64,
    /// The time the running timer call began, when its active expiry deleted keys: the
    /// driver's [`Node::timers_done`] then makes it an `expire-cycle` latency sample.
    expire_cycle_began: Option<Micros>,
}

impl Node {
    /// A node with `config`, drawing all its randomness from `seed`, started at `now`.
    pub fn new(config: Config, seed: u64, buggify: Buggify, now: Micros) -> Node {
        let table = CommandTable::new(crate::cmd::FAMILIES);
        Node {
            core: Core::new(config, table, seed, buggify, now),
            held: VecDeque::new(),
            next_cron_ms: now.as_millis(),
            expire_cycle_began: None,
        }
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
        // Requests handed in at one time are one batch (a pipeline); anything else, or a later
        // time, ends the batch being timed at the latest time the node had.
        if !matches!(input, Input::Request { .. }) || now > self.core.now {
            self.end_timing();
        }
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
                self.release_parked();
            }
            Input::ProtocolError { conn, message } => {
                let core = &mut self.core;
                core.stats.total_error_replies += 1;
                core.write_to(conn, |w| w.error(format!("ERR {message}").as_bytes()));
                core.close_client(conn);
            }
            Input::Closed { conn } => Node::forget_client(&mut self.core, conn),
            Input::ProcessStats(p) => self.core.set_process_stats(p),
            Input::PeerUp { peer } => {
                let now_ms = self.core.now.as_millis();
                if let Some(r) = self.core.repl.as_mut() {
                    r.peer_up(peer, now_ms);
                }
                self.cluster_peer_up(peer);
            }
            Input::PeerDown { peer } => {
                if let Some(r) = self.core.repl.as_mut() {
                    r.peer_down(peer);
                }
                self.cluster_peer_down(peer);
            }
            Input::PeerMessage { peer, data } => self.peer_message(peer, &data),
            Input::AclFileDone { result } => {
                self.core.acl_file_done(result);
                self.release_parked();
            }
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
        let core = &mut self.core;
        let Some(r) = core.repl.as_mut() else {
            return;
        };
        let effects = r.on_message(peer, data, now_ms, &mut core.db);
        for effect in effects {
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
                            // A clustered node logs the merged state (the peer's change is
                            // part of what a restart must come back with), except a hot
                            // key's copy, which a restart does without (its owners keep it).
                            if self.core.repl.as_ref().is_none_or(|r| r.owns(k)) {
                                self.core.persist.note_modified(k);
                            }
                        }
                    }
                }
                crate::repl::Effect::Publish(channel, message) => {
                    self.core.deliver_publish(&channel, &message);
                }
                crate::repl::Effect::Members(m) => self.cluster_members(peer, m),
                crate::repl::Effect::MembersBehind => self.send_members(&[peer]),
                crate::repl::Effect::Forwards(m) => {
                    // Replies first: they release clients' replies here; the forwards are the
                    // peer's clients' commands, run in the order they were sent.
                    for r in m.replies {
                        self.cluster_forward_reply(peer, r);
                    }
                    for f in m.forwards {
                        self.cluster_serve_forward(peer, f);
                    }
                }
                crate::repl::Effect::Functions {
                    peer,
                    digest,
                    entries,
                } => {
                    let core = &mut self.core;
                    if crate::cmd::function::merge_remote(core, &entries) {
                        let blob = crate::cmd::function::entries_blob(core);
                        if let Some(r) = core.repl.as_mut() {
                            r.set_functions(blob);
                        }
                    }
                    if let Some(r) = core.repl.as_mut() {
                        r.functions_received(peer, digest);
                    }
                }
                crate::repl::Effect::ShardPublish(channel, message) => {
                    self.core.deliver_shard_publish(&channel, &message);
                }
                crate::repl::Effect::MoveIn(groups) => self.move_in(groups),
                crate::repl::Effect::MoveAsk(groups) => self.move_ask(peer, groups),
            }
        }
        self.moves_progress();
        if !self.core.waits.is_empty() {
            self.core.serve_waits();
        }
        self.release_parked();
    }

    /// The requests handed in since the last call (or since the node last saw a later time)
    /// were handed over completely at `now`: the driver's clock after running them. Their
    /// duration, shared evenly by the commands they ran, is what the slow log and the latency
    /// monitor record (`crate::cmd::slowlog`). A driver that never calls it gets durations of
    /// 0 (no time passed for its requests on the node's clock).
    pub fn request_done(&mut self, now: Micros) {
        self.advance(now);
        self.end_timing();
    }

    /// The timer call ([`Node::handle_timeout`]) just made was over at `now`, the driver's clock
    /// after it. If its active expiry deleted keys, its duration is a sample of the latency
    /// monitor's `expire-cycle` event when it reaches `latency-monitor-threshold`, as Redis
    /// samples its active expire cycle (freeing a large expired value is what makes one slow).
    /// The node has no clock of its own, so the whole call is timed: its other work is bounded
    /// slices. A driver that never calls it records no such samples.
    pub fn timers_done(&mut self, now: Micros) {
        self.advance(now);
        let Some(began) = self.expire_cycle_began.take() else {
            return;
        };
        let threshold_ms = self.core.config.latency_monitor_threshold_ms;
        let ms = self.core.now.0.saturating_sub(began.0) / 1000;
        if threshold_ms > 0 && ms >= threshold_ms {
            let end_s = self.core.now.0 / 1_000_000;
            self.core.latency.add("expire-cycle", end_s, ms);
        }
    }

    /// Ends the timing of the requests being timed at the node's time, unless a script they
    /// started still runs (its slices are part of its time).
    fn end_timing(&mut self) {
        if self.core.timing.begun() && self.core.scripts.running.is_none() {
            self.core.timing_end(self.core.now);
        }
    }

    /// Runs due timers: blocking timeouts, active expiry, statistics, idle-client timeouts.
    pub fn handle_timeout(&mut self, now: Micros) {
        self.end_timing();
        self.advance(now);
        if self.core.scripts.running.is_some() {
            // No other timer runs in the middle of a script (Redis runs none either): expiry
            // or a blocking timeout would break its atomicity.
            return self.continue_script();
        }
        let now_ms = self.core.now.as_millis();
        self.expire_blocked(now_ms);
        self.cluster_timeouts(now_ms);
        if self.core.pausing.pause.is_some() {
            self.core.expire_pause(now_ms);
            self.release_parked();
        }
        self.core.persist_tick();
        self.core.lazy_free.free_some();
        self.core.settle_captures();
        if let Some(r) = self.core.repl.as_mut() {
            r.tick(now_ms, &mut self.core.db);
        }
        self.moves_progress();
        self.members_tick(now_ms);
        if now_ms < self.next_cron_ms {
            return;
        }
        self.hot_tick(now_ms);
        let core = &mut self.core;
        let budget = if core.buggify.fire("expire_tiny_batch") {
            1
        } else {
            EXPIRE_KEYS_PER_TICK
        };
        let mut expired: Vec<Vec<u8>> = Vec::new();
        // Nothing is deleted while CLIENT PAUSE holds writes.
        let (_, more) = if core.writes_paused() {
            (0, false)
        } else {
            core.db
                .expire_due(now_ms, budget, |e| expired.push(e.key().to_vec()))
        };
        for key in &expired {
            core.after_expiry(key);
        }
        if !expired.is_empty() {
            self.expire_cycle_began = Some(core.now);
        }
        let core = &mut self.core;
        core.capture_dirty(crate::repl::state::Intent::Assign, false);
        core.stats.sample(now_ms);
        if core.tracking.clients > 0 {
            core.tracking_limit();
        }
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
        if let Some(d) = self.core.pause_deadline_ms() {
            next = next.min(d);
        }
        if let Some(r) = self.core.repl.as_ref() {
            next = next.min(r.next_deadline_ms(self.core.now.as_millis()));
        }
        if let Some(d) = self.cluster_next_deadline_ms() {
            next = next.min(d);
        }
        if !self.core.lazy_free.queue.is_empty() {
            // The next slice of lazy freeing, soon.
            next = next.min(self.core.now.as_millis() + 1);
        }
        if self.core.snapshot_slicing() {
            // The next snapshot slice, soon (other inputs are served in between).
            next = next.min(self.core.now.as_millis() + 1);
        }
        Some(Micros::from_millis(next))
    }

    /// The next effect for the driver to carry out, or `None` when there is nothing to do.
    #[must_use]
    pub fn poll_output(&mut self) -> Option<Output> {
        let core = &mut self.core;
        // BCAST invalidations gathered since the last drain, one message per prefix.
        core.tracking_broadcast();
        if core.persist.active && core.scripts.running.is_none() {
            core.persist_flush();
        }
        if let Some(o) = core.persist_poll() {
            return Some(o);
        }
        if let Some(op) = core.acl.file_out.pop_front() {
            return Some(Output::AclFile(op));
        }
        if let Some((peer, addr)) = core.dials.pop_front() {
            return Some(Output::PeerDial { peer, addr });
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

    /// Panics if any internal invariant is broken. Walks every key (and, on a replica,
    /// materializes every key's replicated state): see [`Node::check_changed_invariants`] for
    /// the check whose cost follows what changed.
    pub fn check_invariants(&self) {
        self.core.check_invariants();
        self.core.check_replica_invariants();
        self.check_rest();
    }

    /// [`Node::check_invariants`] limited to the keys that may have changed since the last
    /// call of this one (every key the store or the replicated states handed out for change,
    /// read by lazy expiry included), plus everything that is not per key. The first call,
    /// and any after more than `lattice_store::changes::MAX_NOTED` keys changed or the whole
    /// keyspace did, runs the full check. Returns whether it did.
    ///
    /// What it cannot see: a key changed behind both journals' backs (impossible without an
    /// exclusive borrow of the store or the state map, which is what they note), and the
    /// totals over all keys (counts, marks against packed records), which only the full
    /// check adds up: run it too, at a stride.
    pub fn check_changed_invariants(&mut self) -> bool {
        let core = &mut self.core;
        let store = core.db.take_changes();
        let states = core.repl.as_mut().map(|r| r.take_changes());
        let (Changed::Keys(mut hashes), None | Some(Changed::Keys(_))) = (store, &states) else {
            self.check_invariants();
            return true;
        };
        if let Some(Changed::Keys(more)) = states {
            hashes.extend(more);
            hashes.sort_unstable();
            hashes.dedup();
        }
        self.core.check_changed_invariants(&hashes);
        self.core.check_replica_changed(&hashes);
        self.check_rest();
        false
    }

    /// The checks of neither the keyspace nor the replicated states.
    fn check_rest(&self) {
        if let Some(c) = self.core.cluster.as_deref() {
            c.check_invariants();
        }
        assert!(
            self.core.scripts.running.is_some() || self.held.is_empty(),
            "inputs held back with no script running"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{catch_unwind, AssertUnwindSafe};

    use bytes::Bytes;
    use lattice_store::{Str, Value};

    use super::Node;
    use crate::{Buggify, Config, ConnId, Input, Micros, NodeId};

    fn replica(now: Micros) -> Node {
        let mut config = Config::default();
        config.node_id = 1;
        config.cluster_size = 2;
        let mut node = Node::new(config, 1, Buggify::disabled(), now);
        node.handle(now, Input::PeerUp { peer: NodeId(2) });
        node.handle(
            now,
            Input::Connected {
                conn: ConnId(1),
                peer_addr: "127.0.0.1:1".into(),
                local_addr: "127.0.0.1:2".into(),
            },
        );
        node
    }

    fn run(node: &mut Node, now: Micros, args: &[&str]) {
        let args = args.iter().map(|a| Bytes::copy_from_slice(a.as_bytes()));
        node.handle(
            now,
            Input::Request {
                conn: ConnId(1),
                args: args.collect(),
            },
        );
        while node.poll_output().is_some() {}
    }

    /// A key whose store value left its replicated state (a command that changed the store
    /// without its capture) fails the check of what changed, as it fails the full walk.
    #[test]
    fn the_check_of_what_changed_catches_a_store_that_left_its_state() {
        let now = Micros::from_millis(1_700_000_000_000);
        let mut node = replica(now);
        for i in 0..50 {
            run(&mut node, now, &["SADD", &format!("s{i}"), "a", "b"]);
        }
        assert!(
            node.check_changed_invariants(),
            "the first check walks everything"
        );
        run(&mut node, now, &["SADD", "s7", "c"]);
        assert!(!node.check_changed_invariants(), "then only what changed");
        let later = Micros::from_millis(1_700_000_000_100);
        run(&mut node, later, &["SET", "r", "1"]);
        // The string's capture is deferred to the next flush; the check waits for it.
        let later = Micros::from_millis(1_700_000_001_000);
        node.handle_timeout(later);
        while node.poll_output().is_some() {}
        assert!(!node.check_changed_invariants());
        for key in ["s3", "r"] {
            let e = node
                .core
                .db
                .get_live(key.as_bytes(), later.as_millis(), |_| {})
                .expect("stored");
            e.value = Value::Str(Str::from_bytes(b"changed behind replication"));
            let caught = catch_unwind(AssertUnwindSafe(|| node.check_changed_invariants()));
            assert!(caught.is_err(), "{key}: divergence not caught");
            let full = catch_unwind(AssertUnwindSafe(|| node.check_invariants()));
            assert!(full.is_err(), "{key}: the full walk catches it too");
            node.core.db.remove(key.as_bytes());
        }
    }
}

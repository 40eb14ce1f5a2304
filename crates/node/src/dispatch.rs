//! The dispatch policy: the rules that sit between a parsed request and its handler, in one
//! place, with one way to refuse.
//!
//! A request is resolved (unknown command, unknown subcommand, arity), then admitted
//! ([`Core::admission`]): authentication, the RESP2 subscribed-mode restriction, commands
//! refused inside MULTI, BUSY while a script is past busy-reply-threshold, and MULTI queueing.
//! Every refusal goes through [`Core::reject`], which does what Redis's `rejectCommand` does:
//! it dooms a transaction being queued (EXEC then answers EXECABORT), and a refused EXEC
//! aborts the transaction outright. What the handler runs inside ([`Core::run_handler`]) is
//! the same for clients, EXEC, scripts and recovery: the write refusal while persistence
//! fails, replication capture, persistence capture and the statistics.

use bytes::{Bytes, BytesMut};
use lattice_resp::{Protocol, ReplyWriter};

use crate::acl::{Denied, LogContext};
use crate::client::ConnId;
use crate::command::{find_subcommand, Call, Flag};
use crate::ctx::{CommandSpec, Core};
use crate::repl::state::Intent;

pub use crate::command::NOT_IN_MULTI;

/// Redis Cluster's reply to keys in different slots.
pub const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";
/// The reply while the placement is not known (a configured member never heard from).
pub const CLUSTER_DOWN: &str = "CLUSTERDOWN The cluster is down";
/// A forwarded write reached a node that no longer owns the slot.
pub const SLOT_MOVING: &str =
    "TRYAGAIN The slot moved to other nodes; the write did not run, retry it";

/// Redis's refusal of a write while `min-replicas-to-write` is not met.
pub const NOREPLICAS: &str = "NOREPLICAS Not enough good replicas to write.";

/// Where a request runs in a partitioned cluster.
enum Route {
    Local,
    /// A read of a hot key's copy held here (ARCHITECTURE, "Hot keys").
    LocalCopy,
    /// On an owner of this slot.
    Forward(u16),
    Refuse(Vec<u8>),
}

/// What the policy decides for a request.
enum Admission {
    /// Run the handler now.
    Run(&'static CommandSpec),
    /// Queue it in the client's transaction and answer QUEUED.
    Queue,
    /// Refuse it with this error reply.
    Reject(Rejection),
}

/// A refused request: the error, and the command it names if it was resolved (its
/// `rejected_calls` are counted, as Redis counts them).
struct Rejection {
    message: Vec<u8>,
    spec: Option<&'static CommandSpec>,
    /// An ACL refusal, for the ACL log: what was refused.
    denied: Option<Denied>,
}

impl Core {
    /// Runs one command for `conn`, writing its reply into `out`.
    pub(crate) fn dispatch(
        &mut self,
        conn: ConnId,
        args: &[Bytes],
        out: &mut BytesMut,
        proto: Protocol,
    ) {
        let mut call = Call::new(conn, args, self.now, ReplyWriter::new(out, proto));
        let admission = match resolve(self, args) {
            Ok(spec) => {
                if self.hot_keys.sample() {
                    self.count_access(conn, spec, args);
                }
                self.admission(conn, spec, args)
            }
            Err(unresolved) => Admission::Reject(Rejection {
                message: unresolved.message(args),
                spec: None,
                denied: None,
            }),
        };
        let admission = match admission {
            Admission::Run(_) | Admission::Queue if self.cluster.is_some() => {
                let Ok(spec) = resolve(self, args) else {
                    unreachable!("admitted requests resolve")
                };
                let queueing = matches!(admission, Admission::Queue);
                match self.route(conn, spec, args, queueing) {
                    Route::Local => admission,
                    Route::LocalCopy => {
                        if let Some(r) = self.repl.as_mut() {
                            r.hot.stats.local_reads += 1;
                        }
                        admission
                    }
                    Route::Forward(slot) => {
                        self.forward_request = Some(slot);
                        return;
                    }
                    Route::Refuse(message) => Admission::Reject(Rejection {
                        message,
                        spec: Some(spec),
                        denied: None,
                    }),
                }
            }
            other => other,
        };
        let admission = match admission {
            // Not for the commands recovery replays: the files are loaded whole, past
            // maxmemory if need be (as Redis loads its AOF), never refused or evicted from.
            Admission::Run(_) | Admission::Queue
                if self.config.maxmemory_bytes > 0 && conn != crate::client::REPLAY_CONN =>
            {
                let Ok(spec) = resolve(self, args) else {
                    unreachable!("admitted requests resolve")
                };
                match self.enforce_maxmemory(spec) {
                    Some(oom) => Admission::Reject(Rejection {
                        message: oom.as_bytes().to_vec(),
                        spec: Some(spec),
                        denied: None,
                    }),
                    None => admission,
                }
            }
            other => other,
        };
        let admission = match admission {
            Admission::Run(_) | Admission::Queue if !self.enough_replicas() => {
                let Ok(spec) = resolve(self, args) else {
                    unreachable!("admitted requests resolve")
                };
                if spec.is_write() {
                    Admission::Reject(Rejection {
                        message: NOREPLICAS.as_bytes().to_vec(),
                        spec: Some(spec),
                        denied: None,
                    })
                } else {
                    admission
                }
            }
            other => other,
        };
        match admission {
            Admission::Run(spec) => {
                use crate::cmd::monitor::Source;
                let monitored = !self.monitors.is_empty();
                if monitored {
                    self.feed_monitors(conn, spec, args, Source::Client, true);
                }
                self.run_handler(spec, &mut call);
                if monitored {
                    self.feed_monitors(conn, spec, args, Source::Client, false);
                }
            }
            Admission::Queue => {
                if let Some(m) = self.clients.get_mut(&conn).and_then(|c| c.multi.as_mut()) {
                    m.queued.push(args.to_vec());
                }
                call.out.simple(b"QUEUED");
            }
            Admission::Reject(rejection) => self.reject(&mut call, rejection),
        }
        if let Some(code) = call.take_error_for_stats() {
            self.stats.total_error_replies += 1;
            *self.stats.errors.entry(code).or_insert(0) += 1;
        }
    }

    /// Where a keyed request runs in a partitioned cluster (ARCHITECTURE, "A partitioned
    /// cluster"): here when this node owns its slot; forwarded to an owner otherwise. Keys in
    /// more than one slot are refused with CROSSSLOT, as Redis Cluster refuses them. What
    /// cannot be forwarded (a command queued in MULTI, a script, WATCH, a blocking command:
    /// their effect or their wait belongs to this connection) is answered with MOVED, which
    /// cluster-aware clients follow.
    fn route(
        &self,
        conn: ConnId,
        spec: &'static CommandSpec,
        args: &[Bytes],
        queueing: bool,
    ) -> Route {
        let Some(cluster) = self.cluster.as_deref() else {
            return Route::Local;
        };
        // Pub/sub (SSUBSCRIBE and SPUBLISH name channels as keys) reaches every node: served
        // where asked.
        if spec.group == "pubsub" {
            return Route::Local;
        }
        if self.clients.get(&conn).is_some_and(|c| c.via_peer) {
            // A write a peer forwards for a slot this node no longer owns (the peer had not
            // heard of a membership change): refused, because a draining node's writes must
            // all be in the stream it sends the owners before it drops the slot
            // (ARCHITECTURE, "Live membership"). The client may retry; the next try goes to
            // an owner.
            let moving = spec.is_write()
                && crate::command::routing_keys(spec, args)
                    .first()
                    .is_some_and(|k| !cluster.placed_owner(lattice_placement::key_slot(k)));
            if moving {
                return Route::Refuse(SLOT_MOVING.as_bytes().to_vec());
            }
            return Route::Local;
        }
        let keys = crate::command::routing_keys(spec, args);
        let Some(first) = keys.first() else {
            return Route::Local;
        };
        let slot = lattice_placement::key_slot(first);
        if keys[1..]
            .iter()
            .any(|k| lattice_placement::key_slot(k) != slot)
        {
            return Route::Refuse(CROSSSLOT.as_bytes().to_vec());
        }
        if cluster.placement().is_none() {
            return Route::Refuse(CLUSTER_DOWN.as_bytes().to_vec());
        }
        if cluster.owns(slot) {
            return Route::Local;
        }
        let stays_here = queueing
            || spec.has(Flag::Blocking)
            || matches!(
                spec.name,
                "watch" | "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro"
            );
        let reads_only = !spec.is_write() && spec.subcommands.is_empty() && !queueing;
        if reads_only
            && self
                .repl
                .as_ref()
                .is_some_and(|r| keys.iter().all(|k| r.hot.serves(k)))
        {
            return Route::LocalCopy;
        }
        if stays_here {
            let moved = cluster
                .moved(slot)
                .unwrap_or_else(|| CLUSTER_DOWN.to_string());
            return Route::Refuse(moved.into_bytes());
        }
        Route::Forward(slot)
    }

    /// Counts a sampled access to the command's first key in the hot-key sketch: accesses
    /// by this node's clients only (a peer's forwarded command was counted where its client
    /// is), so each node's rates are its own clients' and a copy it holds keeps the rate that
    /// made it take the copy.
    fn count_access(&mut self, conn: ConnId, spec: &'static CommandSpec, args: &[Bytes]) {
        // OBJECT reads a key's metadata without touching it (Redis's LOOKUP_NOTOUCH):
        // `redis-cli --hotkeys` asking every key's frequency must not count as accesses.
        if spec.name.starts_with("object") || self.clients.get(&conn).is_none_or(|c| c.via_peer) {
            return;
        }
        let keys = crate::command::routing_keys(spec, args);
        if let Some(first) = keys.first() {
            self.hot_keys.count(first, self.now.as_millis());
        }
    }

    /// Whether running `args` may change data or reach other clients: Redis's `write` and
    /// `may-replicate` flags, except that a script call declaring flags (a shebang, a
    /// function's `flags`) is judged by them, as Redis 7.0 replaces the command's flags with
    /// the script's: one declaring `no-writes` may neither write nor replicate (its commands
    /// are refused if they would), any other may write. This is what CLIENT PAUSE WRITE holds.
    pub(crate) fn may_replicate(&self, spec: &'static CommandSpec, args: &[Bytes]) -> bool {
        use crate::cmd::script::basics::NO_WRITES;
        match self.scripts.declared_flags(spec.name, args) {
            Some(flags) => flags & NO_WRITES == 0,
            None => spec.is_write() || spec.has(Flag::MayReplicate),
        }
    }

    /// Redis's `checkGoodReplicasStatus`: false while `min-replicas-to-write` asks for more
    /// linked peers than this node has (a node without peers has none).
    pub(crate) fn enough_replicas(&self) -> bool {
        let want = self.config.min_replicas_to_write;
        want == 0 || self.repl.as_ref().map_or(0, |r| r.linked_peers()) as u64 >= want
    }

    /// The policy for a resolved command, in Redis's order of checks.
    fn admission(&self, conn: ConnId, spec: &'static CommandSpec, args: &[Bytes]) -> Admission {
        let Some(client) = self.clients.get(&conn) else {
            return Admission::Run(spec);
        };
        let in_multi = client.multi.is_some();
        let refuse = |message: Vec<u8>| {
            Admission::Reject(Rejection {
                message,
                spec: Some(spec),
                denied: None,
            })
        };
        if !client.authenticated && !spec.has(Flag::NoAuth) && self.acl.auth_required() {
            return refuse(b"NOAUTH Authentication required.".to_vec());
        }
        if let Some(denied) = self.acl_denied(client.user.as_ref(), spec, args) {
            return Admission::Reject(Rejection {
                message: denied.message(spec.name).into_bytes(),
                spec: Some(spec),
                denied: Some(denied),
            });
        }
        if client.proto == Protocol::Resp2
            && client.subscriptions() > 0
            && !spec.has(Flag::AllowedWhileSubscribed)
        {
            return refuse(format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                spec.name
            )
            .into_bytes());
        }
        if in_multi && spec.has(Flag::NoMulti) {
            return refuse(NOT_IN_MULTI.as_bytes().to_vec());
        }
        if let Some(run) = self.scripts.running.as_ref().filter(|r| r.timed_out) {
            if !spec.has(Flag::AllowBusy) {
                return refuse(
                    crate::cmd::script::engine::busy_message(run.kind)
                        .as_bytes()
                        .to_vec(),
                );
            }
        }
        if in_multi && !spec.has(Flag::RunsInsideMulti) {
            return Admission::Queue;
        }
        Admission::Run(spec)
    }

    /// The one way a request is refused, as Redis's `rejectCommand`: counted against its
    /// command, a transaction being queued is doomed, and a refused EXEC aborts the
    /// transaction (`EXECABORT ... because of: <reason>`, as `execCommandAbort`).
    fn reject(&mut self, call: &mut Call, rejection: Rejection) {
        if let Some(spec) = rejection.spec {
            self.stats.commands.entry(spec.name).rejected_calls += 1;
            if let Some(denied) = &rejection.denied {
                let in_multi = self
                    .clients
                    .get(&call.conn)
                    .is_some_and(|c| c.multi.is_some());
                let context = if in_multi {
                    LogContext::Multi
                } else {
                    LogContext::Toplevel
                };
                self.acl_log_denied(call.conn, spec, call.args, denied, context);
            }
        }
        let client = self.clients.get_mut(&call.conn);
        if call.args[0].eq_ignore_ascii_case(b"exec") {
            if let Some(c) = client {
                c.multi = None;
            }
            self.unwatch_all(call.conn);
            let message = &rejection.message;
            let reason = message.strip_prefix(b"ERR ").unwrap_or(message);
            let mut text = b"EXECABORT Transaction discarded because of: ".to_vec();
            text.extend_from_slice(reason);
            return call.error_bytes(&text);
        }
        if let Some(m) = client.and_then(|c| c.multi.as_mut()) {
            m.errored = true;
        }
        call.error_bytes(&rejection.message);
    }

    /// Calls the handler of `spec` and accounts for it.
    pub(crate) fn run_handler(&mut self, spec: &'static CommandSpec, call: &mut Call) {
        // Inside EXEC the connection's command stays EXEC (CLIENT INFO/LIST cmd=), as in Redis.
        if let Some(c) = self.clients.get_mut(&call.conn).filter(|_| !call.in_exec) {
            c.last_command = spec.name;
            self.ran = Some(spec.name);
        }
        let handler = spec.handler.expect("resolve returns runnable commands");
        if spec.is_write() {
            if let Some(e) = self.persist_refuses_writes() {
                self.stats.commands.entry(spec.name).rejected_calls += 1;
                return call.error(&e);
            }
        }
        let errors_before = call.error_code.is_some();
        let intent = self.repl.as_ref().map(|_| intent_of(spec, call.args));
        // Deferred captures are coalesced per intent: settle them before this command changes
        // any of their keys in another way.
        if let Some(i) = intent {
            if self.repl.as_ref().is_some_and(|r| r.must_settle_before(i)) {
                self.settle_captures();
            }
            // An increment is captured as the difference from the old value, which a compact
            // string leaves to the store: keep a copy before the command changes it.
            // So is a register raise (the capture compares the registers before and after);
            // its key is the command's first (PFDEBUG's is its second argument).
            let first_key = usize::try_from(spec.keys.0).unwrap_or(0).max(1);
            if let (Intent::Increment | Intent::Registers, Some(r), Some(key)) =
                (i, self.repl.as_mut(), call.args.get(first_key))
            {
                r.keep_value(key, &mut self.db);
            }
        }
        if self.persist.snapshot.is_some() {
            self.persist_before_command(spec.has(Flag::LoggedAsCommand), call.args);
        }
        handler(self, call);
        if self.tracking.clients > 0 {
            self.tracking_after_command(spec, call);
        }
        if self.persist.active {
            self.persist_after_command(spec.has(Flag::LoggedAsCommand), call.args);
        }
        if let Some(intent) = intent {
            if self.repl.as_ref().is_some_and(|r| !r.dirty.is_empty()) {
                self.capture_after(intent, !spec.has(Flag::KeepsValue), spec.name, call.args);
            }
        }
        self.stats.total_commands_processed += 1;
        let s = self.stats.commands.entry(spec.name);
        if !self.retrying_parked {
            s.calls += 1;
        }
        if call.failed() && !errors_before {
            s.failed_calls += 1;
        }
    }
}

/// The intent of a command's numeric changes for replication (see [`Intent`]).
fn intent_of(spec: &CommandSpec, args: &[Bytes]) -> Intent {
    let increments = spec.has(Flag::Increments)
        || (spec.has(Flag::IncrementsWithIncrOption)
            && args.iter().skip(2).any(|a| a.eq_ignore_ascii_case(b"incr")));
    if increments {
        Intent::Increment
    } else if spec.has(Flag::RaisesRegisters) {
        Intent::Registers
    } else {
        Intent::Assign
    }
}

/// Why a request names no runnable command.
pub(crate) enum Unresolved {
    /// No such command.
    Command,
    /// The container exists, the subcommand does not.
    Subcommand(&'static CommandSpec),
    /// The command (or container without its subcommand) got a wrong number of arguments.
    Arity(&'static CommandSpec),
}

impl Unresolved {
    /// The exact Redis error for a client's request `args`.
    pub(crate) fn message(&self, args: &[Bytes]) -> Vec<u8> {
        match self {
            Unresolved::Command => unknown_command(args),
            Unresolved::Subcommand(container) => format!(
                "ERR unknown subcommand '{}'. Try {} HELP.",
                truncate_lossy(&args[1], 128),
                container.name.to_ascii_uppercase()
            )
            .into_bytes(),
            Unresolved::Arity(spec) => {
                format!("ERR wrong number of arguments for '{}' command", spec.name).into_bytes()
            }
        }
    }
}

/// Finds the runnable command for `args` (the command, or its subcommand for a container,
/// with an acceptable number of arguments). Clients, EXEC and scripts all resolve through it.
pub(crate) fn resolve(core: &Core, args: &[Bytes]) -> Result<&'static CommandSpec, Unresolved> {
    let spec = core.table.find(&args[0]).ok_or(Unresolved::Command)?;
    // A container dispatches on its subcommand; COMMAND also runs alone (no subcommand).
    let spec = if !spec.subcommands.is_empty() && (spec.handler.is_none() || args.len() >= 2) {
        if args.len() < 2 {
            return Err(Unresolved::Arity(spec));
        }
        find_subcommand(spec, &args[1]).ok_or(Unresolved::Subcommand(spec))?
    } else {
        spec
    };
    if !spec.arity_ok(args.len()) {
        return Err(Unresolved::Arity(spec));
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

//! Running requests: a connection's request through the dispatcher into its output buffer,
//! parking and releasing clients in blocking commands, and what a connection leaves behind
//! when it goes.

use bytes::Bytes;
use lattice_resp::ReplyWriter;

use super::Node;
use crate::client::{Client, ConnId, ReplyMode};
use crate::ctx::Core;

/// Requests a parked (blocked) client may pipeline behind its blocking command; beyond this the
/// connection is closed rather than buffering without bound.
const MAX_QUEUED_WHILE_BLOCKED: usize = 100_000;

impl Node {
    pub(super) fn connected(&mut self, conn: ConnId, peer_addr: String, local_addr: String) {
        let core = &mut self.core;
        let now_ms = core.now.as_millis();
        core.stats.total_connections_received += 1;
        let full = core.clients.len() as u64 >= core.config.maxclients;
        let mut client = Client::new(conn, peer_addr, local_addr, now_ms);
        // As Redis: a connection made while the default user needs no password is
        // authenticated for good (a password set later does not log it out).
        client.authenticated = !core.acl.auth_required();
        core.clients.insert(conn, client);
        if full {
            core.stats.rejected_connections += 1;
            core.write_to(conn, |w| w.error(b"ERR max number of clients reached"));
            core.close_client(conn);
        }
    }

    /// Executes one request from `conn`, or queues it behind a blocking command.
    pub(super) fn request(&mut self, conn: ConnId, args: Vec<Bytes>) {
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
        if self.core.pausing.pause.is_some() && self.core.pause_hold(conn, &args) {
            return;
        }
        // Timed if its command ran (not refused, not queued in MULTI: EXEC's commands are
        // noted as it runs them), and not while a script runs (a BUSY refusal is no part of
        // the script's time).
        let timed = self.core.scripts.running.is_none();
        self.core.ran = None;
        let parked = self.execute(conn, &args);
        if self.core.ran.take().is_some() && timed && !parked {
            self.core.timing_note(conn, args);
        }
    }

    /// Runs `args` for `conn` into its output buffer, honouring CLIENT REPLY, and parks the
    /// client if the command asked to block.
    /// Returns true when the command asked to block.
    pub(super) fn execute(&mut self, conn: ConnId, args: &[Bytes]) -> bool {
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
        let silent = matches!(client.reply_mode, ReplyMode::Off | ReplyMode::SkipThis);
        let mut out = std::mem::take(&mut client.out);
        let start_len = out.len();

        core.block_request = None;
        if core.tracking.clients > 0 {
            // Before the command, as Redis: evictions from the table are told at once.
            core.tracking_limit();
        }
        core.tracking.current = Some(conn);
        core.dispatch(conn, args, &mut out, proto);
        core.tracking.current = None;
        // Partitioned cluster: the command runs on an owner; its place in the reply order is
        // kept by a relay slot (node/forward.rs).
        let mut forwarded = None;
        if let Some(slot) = core.forward_request.take() {
            match self.start_forward(conn, args, slot, proto) {
                Ok(id) => forwarded = Some(id),
                Err(e) => ReplyWriter::new(&mut out, proto).error(e.as_bytes()),
            }
        }
        let core = &mut self.core;
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
        if let Some(t) = client.tracking.as_mut() {
            // CLIENT CACHING applies to the next command (or transaction) only.
            if t.caching && client.multi.is_none() && !client.last_command.starts_with("client|") {
                t.caching = false;
            }
        }
        if !core.tracking.pending_own.is_empty() {
            // Invalidations this command caused to its own client follow its reply.
            core.tracking_send_pending(conn);
        }
        let Some(client) = core.clients.get_mut(&conn) else {
            return blocked;
        };
        if let Some(last) = client.relay.back_mut() {
            // Behind a reply still awaited from an owner.
            let mine = client.out.split_off(start_len);
            last.after.extend_from_slice(&mine);
        }
        if let Some(id) = forwarded {
            client
                .relay
                .push_back(super::forward::relay_slot(id, silent));
        }
        if !client.out.is_empty() && !client.pending {
            client.pending = true;
            core.pending.push_back(conn);
        }
        blocked
    }

    /// Offers changed keys to parked clients, first come first served, until nothing changes.
    pub(super) fn serve_ready_keys(&mut self) {
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
                    self.core.ran = None;
                    self.core.retrying_parked = true;
                    let parked_again = self.execute(conn, &args);
                    self.core.retrying_parked = false;
                    if !parked_again {
                        // Logged once served, as Redis logs a blocked command.
                        if self.core.ran.take().is_some() {
                            self.core.timing_note(conn, args);
                        }
                        self.core.unpark(conn);
                        self.run_queued(conn);
                    }
                }
            }
        }
    }

    /// After anything that may have changed keys or released clients: parked clients are
    /// offered the changed keys, and clients released by a command (CLIENT UNBLOCK) run what
    /// they pipelined meanwhile.
    pub(super) fn release_parked(&mut self) {
        self.serve_ready_keys();
        for conn in std::mem::take(&mut self.core.released) {
            self.run_queued(conn);
        }
    }

    /// Runs requests a released client pipelined while parked, until it parks again.
    pub(super) fn run_queued(&mut self, conn: ConnId) {
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

    /// Sends the timeout reply to parked clients whose deadline has passed.
    pub(super) fn expire_blocked(&mut self, now_ms: u64) {
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

    /// Forgets everything a connection had registered (watches, parking, subscriptions,
    /// held replies) and the connection itself.
    pub(super) fn forget_client(core: &mut Core, conn: ConnId) {
        core.persist_forget(conn);
        core.tracking_disable(conn);
        core.unpark(conn);
        core.unwatch_all(conn);
        crate::cmd::pubsub::unsubscribe_all(core, conn);
        core.monitors.remove(&conn);
        core.clients.remove(&conn);
    }
}

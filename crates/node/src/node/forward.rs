//! A partitioned cluster in the shell: membership gossip on the peer links, commands
//! forwarded to an owner and their replies relayed in the client's reply order, and the
//! commands peers forward here (ARCHITECTURE, "A partitioned cluster").
//!
//! Reply order: a connection whose command was forwarded keeps running its later commands
//! (a pipeline is not held up by a round trip), but their replies queue behind the forwarded
//! one in the connection's `relay`; the owner's reply, when it arrives, releases everything
//! up to the next reply still awaited. So the client reads its replies in request order.

use bytes::{Bytes, BytesMut};
use lattice_resp::{Protocol, ReplyWriter};

use super::Node;
use crate::client::{Client, ConnId, RelaySlot, ReplyMode};
use crate::cluster::{
    peer_conn, Forwarded, FORWARD_TIMEOUT_MS, MAX_MOVED_RETRIES, MAX_PENDING_FORWARDS,
};
use crate::dispatch::SLOT_MOVING;
use crate::repl::{wire, Replicator};
use lattice_crdt::NodeId;

/// The reply when no owner of a slot is reachable.
pub const SLOT_NOT_SERVED: &str = "CLUSTERDOWN Hash slot not served";
const NO_REPLY: &str =
    "TRYAGAIN No reply from the slot's owner in time; the command may or may not have run";
const OWNER_LOST: &str =
    "TRYAGAIN The slot's owner went away with the command in flight; it may or may not have run";
const TOO_MANY: &str = "TRYAGAIN Too many commands waiting for their owners";

impl Node {
    /// A new link to `peer`: tell it every member we know (it learns our client address).
    pub(super) fn cluster_peer_up(&mut self, peer: NodeId) {
        let Some(c) = self.core.cluster.as_deref_mut() else {
            return;
        };
        c.up.insert(peer.0);
        // Streams to it (or asks) may be due now.
        c.next_check_ms = 0;
        self.send_members(&[peer]);
    }

    /// The link to `peer` dropped: its forwarded reads go to the next live owner; its writes
    /// (which may have run) are answered with an error.
    pub(super) fn cluster_peer_down(&mut self, peer: NodeId) {
        let Some(c) = self.core.cluster.as_deref_mut() else {
            return;
        };
        c.up.remove(&peer.0);
        for id in c.waiting_on(peer.0) {
            self.retry_or_fail(id, OWNER_LOST);
        }
    }

    fn retry_or_fail(&mut self, id: u64, error: &str) {
        let Some(c) = self.core.cluster.as_deref_mut() else {
            return;
        };
        let Some(f) = c.get(id).cloned() else {
            return;
        };
        let next = if f.write {
            None
        } else {
            c.live_owner(f.slot, Some(f.peer)).filter(|&o| o != c.me)
        };
        match next {
            Some(owner) => {
                c.redirect(id, owner);
                send_forward(self.core.repl.as_deref_mut(), c.origin, owner, id, &f);
            }
            None => {
                c.finish(id);
                c.stats.forward_failures += 1;
                let reply = error_reply(error, f.proto);
                self.relay_reply(f.conn, id, reply);
            }
        }
    }

    /// Forwards `args` (whose keys hash to `slot`, not owned here) for `conn`; returns the
    /// forward's id, or the error to answer at once.
    pub(super) fn start_forward(
        &mut self,
        conn: ConnId,
        args: &[Bytes],
        slot: u16,
        proto: Protocol,
    ) -> Result<u64, &'static str> {
        let write = self
            .core
            .table
            .find(&args[0])
            .is_some_and(|s| s.is_write() || !s.subcommands.is_empty());
        let now_ms = self.core.now.as_millis();
        let Some(c) = self.core.cluster.as_deref_mut() else {
            return Err(SLOT_NOT_SERVED);
        };
        if c.pending_len() >= MAX_PENDING_FORWARDS {
            return Err(TOO_MANY);
        }
        let Some(owner) = c.live_owner(slot, None).filter(|&o| o != c.me) else {
            return Err(SLOT_NOT_SERVED);
        };
        let f = Forwarded {
            conn,
            peer: owner,
            slot,
            args: args.to_vec(),
            proto: if proto == Protocol::Resp3 { 3 } else { 2 },
            write,
            deadline_ms: now_ms + FORWARD_TIMEOUT_MS,
            resend_ms: 0,
            copies: 0,
            moved_retries: 0,
        };
        let id = c.start(f);
        let f = c.get(id).expect("just started");
        send_forward(self.core.repl.as_deref_mut(), c.origin, owner, id, f);
        Ok(id)
    }

    /// The owner answered forward `id`.
    pub(super) fn cluster_forward_reply(&mut self, peer: NodeId, r: wire::ForwardReply) {
        let Some(c) = self.core.cluster.as_deref_mut() else {
            return;
        };
        if c.get(r.id).is_none_or(|f| f.peer != peer.0) {
            return; // answered already (timed out, or retried elsewhere)
        }
        let f = c.finish(r.id).expect("present");
        if f.moved_retries < MAX_MOVED_RETRIES && refused_as_moved(&r.reply) {
            self.forward_after_move(r.id, peer.0, f);
            return;
        }
        self.relay_reply(f.conn, r.id, r.reply);
    }

    /// Forward `id` was refused, not run, by `refuser`, which no longer owns the slot (a
    /// membership change this node had not heard of when it sent it, or one that followed):
    /// it goes on to another live owner, or runs here when this node is that owner, so that
    /// a plain client does not see the move (before this, redis-benchmark runs through a
    /// staying node stopped at `TRYAGAIN` during joins and leaves). Under a new id: the new
    /// owner may have seen forwards of later ids from this node, and must not take this one
    /// for a copy. Bounded by `MAX_MOVED_RETRIES`.
    fn forward_after_move(&mut self, id: u64, refuser: u32, f: Forwarded) {
        let now_ms = self.core.now.as_millis();
        let Some(c) = self.core.cluster.as_deref_mut() else {
            return;
        };
        c.stats.forward_retries += 1;
        let me = c.me;
        match c.live_owner(f.slot, Some(refuser)) {
            Some(owner) if owner == me => {
                // Run as a forward from this node to itself: refused again (as not run) if
                // this node does not own the slot either.
                let reply = self
                    .run_for_peer(me, &f.args, f.proto)
                    .unwrap_or_else(|| error_reply(OWNER_LOST, f.proto));
                self.relay_reply(f.conn, id, reply);
            }
            Some(owner) => {
                let conn = f.conn;
                let next = Forwarded {
                    peer: owner,
                    deadline_ms: now_ms + FORWARD_TIMEOUT_MS,
                    resend_ms: 0,
                    copies: 0,
                    moved_retries: f.moved_retries + 1,
                    ..f
                };
                let new_id = c.start_again(next);
                let sent = c.get(new_id).expect("just started");
                send_forward(self.core.repl.as_deref_mut(), c.origin, owner, new_id, sent);
                if let Some(slot) = self
                    .core
                    .clients
                    .get_mut(&conn)
                    .and_then(|cl| cl.relay.iter_mut().find(|s| s.id == id))
                {
                    slot.id = new_id;
                }
            }
            None => {
                c.stats.forward_failures += 1;
                let reply = error_reply(SLOT_MOVING, f.proto);
                self.relay_reply(f.conn, id, reply);
            }
        }
    }

    /// Fills the relay slot `id` of `conn` and releases every reply now in order.
    fn relay_reply(&mut self, conn: ConnId, id: u64, reply: Bytes) {
        let core = &mut self.core;
        let Some(client) = core.clients.get_mut(&conn) else {
            return; // the client left
        };
        let Some(slot) = client.relay.iter_mut().find(|s| s.id == id) else {
            return;
        };
        slot.reply = Some(if slot.silent { Bytes::new() } else { reply });
        while client.relay.front().is_some_and(|s| s.reply.is_some()) {
            let s = client.relay.pop_front().expect("present");
            if cfg!(feature = "planted-forward-bug") {
                client.out.extend_from_slice(&s.after);
                client.out.extend_from_slice(&s.reply.expect("ready"));
                continue;
            }
            client.out.extend_from_slice(&s.reply.expect("ready"));
            client.out.extend_from_slice(&s.after);
        }
        if !client.out.is_empty() && !client.pending {
            client.pending = true;
            core.pending.push_back(conn);
        }
    }

    /// Unanswered forwards are sent again (a lost message); those past their deadline are
    /// answered with an error.
    pub(super) fn cluster_timeouts(&mut self, now_ms: u64) {
        let (resend, expired, origin) = match self.core.cluster.as_deref_mut() {
            Some(c) => (c.due_resends(now_ms), c.expired(now_ms), c.origin),
            None => return,
        };
        for (id, peer) in resend {
            let f = self
                .core
                .cluster
                .as_deref()
                .and_then(|c| c.get(id))
                .cloned();
            if let Some(f) = f {
                send_forward(self.core.repl.as_deref_mut(), origin, peer, id, &f);
            }
        }
        for id in expired {
            if let Some(c) = self.core.cluster.as_deref_mut() {
                c.stats.forward_timeouts += 1;
                if let Some(f) = c.finish(id) {
                    let reply = error_reply(NO_REPLY, f.proto);
                    self.relay_reply(f.conn, id, reply);
                }
            }
        }
    }

    /// A peer forwards a command for a slot it believes this node owns: run it on the peer's
    /// stand-in client, in the client's protocol, and send the reply bytes back.
    pub(super) fn cluster_serve_forward(&mut self, peer: NodeId, f: wire::Forward) {
        let Some(c) = self.core.cluster.as_deref_mut() else {
            return;
        };
        if f.args.is_empty() {
            return;
        }
        if !c.first_delivery(peer.0, f.origin, f.id) {
            // A copy (resent, or duplicated on the way): it ran once; answer again if the
            // reply is still kept.
            if let Some(reply) = c.kept_reply(peer.0, f.id) {
                if let Some(r) = self.core.repl.as_mut() {
                    r.send_forward_reply(peer, wire::ForwardReply { id: f.id, reply });
                }
            }
            return;
        }
        let Some(reply) = self.run_for_peer(peer.0, &f.args, f.proto) else {
            return;
        };
        if let Some(c) = self.core.cluster.as_deref_mut() {
            c.stats.served_for_peers += 1;
            c.keep_reply(peer.0, f.id, &reply);
        }
        if let Some(r) = self.core.repl.as_mut() {
            r.send_forward_reply(peer, wire::ForwardReply { id: f.id, reply });
        }
    }

    /// Runs `args` on `peer`'s stand-in client, in the protocol the forwarding client speaks,
    /// and returns the reply's bytes (None: the stand-in is gone, so no reply is known). The
    /// stand-in refuses a write on a slot this node does not own (see `Core::route`).
    fn run_for_peer(&mut self, peer: u32, args: &[Bytes], proto: u32) -> Option<Bytes> {
        let conn = peer_conn(peer);
        let now_ms = self.core.now.as_millis();
        if !self.core.clients.contains_key(&conn) {
            let mut c = Client::new(conn, format!("peer-{peer}"), String::new(), now_ms);
            c.via_peer = true;
            c.user = None;
            self.core.clients.insert(conn, c);
        }
        let client = self.core.clients.get_mut(&conn).expect("inserted");
        client.authenticated = true;
        client.reply_mode = ReplyMode::On;
        client.proto = if proto == 3 {
            Protocol::Resp3
        } else {
            Protocol::Resp2
        };
        let before = client.out.len();
        let blocked = self.execute(conn, args);
        if blocked {
            // Never forwarded (see `Core::route`); refused rather than parked.
            self.core.unpark(conn);
        }
        let client = self.core.clients.get_mut(&conn)?;
        Some(client.out.split_off(before).freeze())
    }

    pub(super) fn cluster_next_deadline_ms(&self) -> Option<u64> {
        self.core
            .cluster
            .as_deref()
            .and_then(|c| c.next_deadline_ms())
    }
}

/// Queues forward `id` for `owner` (the first copy, or a resend).
fn send_forward(repl: Option<&mut Replicator>, origin: u64, owner: u32, id: u64, f: &Forwarded) {
    if let Some(r) = repl {
        r.send_forward(
            NodeId(owner),
            wire::Forward {
                id,
                proto: f.proto,
                args: f.args.clone(),
                origin,
            },
        );
    }
}

/// Whether a forward's reply is an old owner's refusal of a write it did not run.
fn refused_as_moved(reply: &[u8]) -> bool {
    reply.first() == Some(&b'-') && reply[1..].starts_with(SLOT_MOVING.as_bytes())
}

/// `-<error>\r\n`: the same in RESP2 and RESP3.
fn error_reply(error: &str, proto: u32) -> Bytes {
    let mut out = BytesMut::new();
    let proto = if proto == 3 {
        Protocol::Resp3
    } else {
        Protocol::Resp2
    };
    ReplyWriter::new(&mut out, proto).error(error.as_bytes());
    out.freeze()
}

/// A relay slot for a command just forwarded.
pub(super) fn relay_slot(id: u64, silent: bool) -> RelaySlot {
    RelaySlot {
        id,
        reply: None,
        silent,
        after: BytesMut::new(),
    }
}

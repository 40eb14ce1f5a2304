//! Per-connection state the node keeps.

use std::collections::{BTreeSet, VecDeque};

use bytes::{Bytes, BytesMut};
use lattice_resp::Protocol;

use crate::blocking::Blocked;

/// A connection's identity, chosen by the driver and unique for the node's lifetime. It is also
/// the id `CLIENT ID` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// The connection recovery runs logged commands on (never a real client's id); the
/// dispatcher admits its commands without maxmemory's check.
pub(crate) const REPLAY_CONN: ConnId = ConnId(u64::MAX);

/// What `CLIENT REPLY` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// Skip the reply of the next command (set by `CLIENT REPLY SKIP`).
    SkipNext,
    /// Skip the reply of the command being executed.
    SkipThis,
}

#[derive(Debug)]
pub struct Client {
    pub id: ConnId,
    pub name: Option<Bytes>,
    pub proto: Protocol,
    pub peer_addr: String,
    pub local_addr: String,
    pub created_ms: u64,
    pub last_interaction_ms: u64,
    /// Full name of the last command executed (`client|list`), for CLIENT LIST `cmd=`.
    pub last_command: &'static str,
    pub reply_mode: ReplyMode,
    pub no_evict: bool,
    /// Passed AUTH (or HELLO AUTH), or connected while the default user needed no password;
    /// only consulted while the default user needs one (or is off).
    pub authenticated: bool,
    /// The ACL user the connection runs as (`default` until AUTH); None for the node's own
    /// stand-in connections (commands a peer forwarded, recovery), which were admitted where
    /// they came from and are never checked here.
    pub user: Option<Bytes>,
    /// Replies not yet handed to the driver.
    pub out: BytesMut,
    /// Queued in the node's list of connections with pending output.
    pub(crate) pending: bool,
    /// The driver should close this connection once `out` is written.
    pub closing: bool,
    /// Replies held until their persistence record is durable (`appendfsync always`).
    pub(crate) held_replies: usize,
    /// Inside MULTI: the queued commands, and whether one was rejected (EXECABORT).
    pub multi: Option<MultiState>,
    /// Keys this client WATCHes, and whether one of them changed since.
    pub watched: Vec<Bytes>,
    /// Watched keys that had already expired (not yet reclaimed) when watched: reclaiming
    /// them is no change, as in Redis; anything else that happens to them is.
    pub watched_expired: std::collections::BTreeSet<Bytes>,
    pub dirty_cas: bool,
    /// Parked in a blocking command.
    pub blocked: Option<Blocked>,
    /// Requests that arrived while parked, run in order once released.
    pub queued_requests: VecDeque<Vec<Bytes>>,
    /// Pub/sub subscriptions.
    pub channels: BTreeSet<Bytes>,
    pub patterns: BTreeSet<Bytes>,
    /// Forwarded commands this connection waits for, in its reply order (partitioned
    /// cluster): later replies queue behind them ([`RelaySlot`]).
    pub relay: VecDeque<RelaySlot>,
    /// The stand-in client running commands a peer forwarded: they run here, never again
    /// forwarded.
    pub via_peer: bool,
    /// Sharded pub/sub subscriptions (SSUBSCRIBE).
    pub shard_channels: BTreeSet<Bytes>,
    /// CLIENT TRACKING's options while tracking is on (`crate::tracking`).
    pub tracking: Option<Box<ClientTracking>>,
    /// The connection's read buffer as the driver last reported it: bytes in it (while a
    /// batch runs, the whole batch as read) and room left in its allocation (CLIENT LIST
    /// `qbuf`, `qbuf-free`).
    pub qbuf: u64,
    pub qbuf_free: u64,
}

/// The state of a transaction being queued.
#[derive(Debug, Default)]
pub struct MultiState {
    /// The queued requests, checked (known command, arity) when they were queued.
    pub queued: Vec<Vec<Bytes>>,
    pub errored: bool,
}

impl Client {
    /// Subscribed to anything (RESP2 clients are then restricted to pub/sub commands):
    /// channels, patterns and shard channels.
    pub fn subscriptions(&self) -> usize {
        self.channels.len() + self.patterns.len() + self.shard_channels.len()
    }
}

impl Client {
    pub fn new(id: ConnId, peer_addr: String, local_addr: String, now_ms: u64) -> Client {
        Client {
            id,
            name: None,
            proto: Protocol::Resp2,
            peer_addr,
            local_addr,
            created_ms: now_ms,
            last_interaction_ms: now_ms,
            last_command: "NULL",
            reply_mode: ReplyMode::On,
            no_evict: false,
            authenticated: false,
            user: Some(Bytes::from_static(b"default")),
            out: BytesMut::new(),
            pending: false,
            closing: false,
            held_replies: 0,
            multi: None,
            watched: Vec::new(),
            watched_expired: std::collections::BTreeSet::new(),
            dirty_cas: false,
            blocked: None,
            queued_requests: VecDeque::new(),
            channels: BTreeSet::new(),
            patterns: BTreeSet::new(),
            relay: VecDeque::new(),
            via_peer: false,
            shard_channels: BTreeSet::new(),
            tracking: None,
            qbuf: 0,
            qbuf_free: 0,
        }
    }

    /// One line of CLIENT LIST / CLIENT INFO, in Redis's field order (fields we do not track
    /// report Redis's idle defaults so parsers keep working). `argv` is the request the
    /// client is running (empty for the others), for `argv-mem`.
    pub fn info_line(&self, now_ms: u64, argv: &[Bytes]) -> String {
        let age = now_ms.saturating_sub(self.created_ms) / 1000;
        let idle = now_ms.saturating_sub(self.last_interaction_ms) / 1000;
        let name = self
            .name
            .as_ref()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let mut flags = String::new();
        if self.multi.is_some() {
            flags.push('x');
        }
        if self.blocked.is_some() {
            flags.push('b');
        }
        if self.subscriptions() > 0 {
            flags.push('P');
        }
        if self.no_evict {
            flags.push('e');
        }
        if let Some(t) = &self.tracking {
            flags.push('t');
            if t.broken_redirect {
                flags.push('R');
            }
            if t.bcast {
                flags.push('B');
            }
        }
        if flags.is_empty() {
            flags.push('N');
        }
        let multi = self.multi.as_ref().map_or(-1, |m| m.queued.len() as i64);
        let args_mem = |args: &[Bytes]| -> u64 {
            args.iter()
                .map(|a| (a.len() + std::mem::size_of::<Bytes>()) as u64)
                .sum()
        };
        let argv_mem = args_mem(argv);
        let multi_mem: u64 = self.multi.as_ref().map_or(0, |m| {
            m.queued
                .iter()
                .map(|q| args_mem(q) + std::mem::size_of::<Vec<Bytes>>() as u64)
                .sum()
        });
        // What the connection holds: its record, read buffer, request, transaction and
        // replies not yet handed to the driver.
        let tot_mem = std::mem::size_of::<Client>() as u64
            + self.qbuf
            + self.qbuf_free
            + argv_mem
            + multi_mem
            + self.out.capacity() as u64;
        let resp = match self.proto {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        };
        format!(
            "id={} addr={} laddr={} fd=8 name={} age={} idle={} flags={} db=0 sub={} psub={} ssub={} multi={} qbuf={} qbuf-free={} argv-mem={} multi-mem={} rbs=0 rbp=0 obl=0 oll=0 omem={} tot-mem={} events=r cmd={} user={} redir=-1 resp={}",
            self.id.0,
            self.peer_addr,
            self.local_addr,
            name,
            age,
            idle,
            flags,
            self.channels.len(),
            self.patterns.len(),
            self.shard_channels.len(),
            multi,
            self.qbuf,
            self.qbuf_free,
            argv_mem,
            multi_mem,
            self.out.len(),
            tot_mem,
            self.last_command,
            self.user
                .as_deref()
                .map_or(std::borrow::Cow::Borrowed(""), String::from_utf8_lossy),
            resp
        )
    }
}

/// The connected clients by id. Every command looks its client up several times (reply mode,
/// output buffer, statistics, the pending queue), so lookups go to a hash table; the few
/// walks (CLIENT LIST, INFO, timeouts) go through an ordered index of ids, so what they see
/// is in id order on every run, as with the ordered map this replaces (whose searches were
/// about 300 instructions of a 4,300-instruction GET).
#[derive(Default)]
pub struct ClientTable {
    by_id: hashbrown::HashTable<(ConnId, Client)>,
    order: std::collections::BTreeSet<ConnId>,
}

/// Ids are small consecutive integers: an odd multiplier spreads them over the hash bits
/// (no seed, nothing random).
fn id_hash(id: ConnId) -> u64 {
    id.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl ClientTable {
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    pub fn contains_key(&self, id: &ConnId) -> bool {
        self.get(id).is_some()
    }

    pub fn get(&self, id: &ConnId) -> Option<&Client> {
        self.by_id
            .find(id_hash(*id), |(k, _)| k == id)
            .map(|(_, c)| c)
    }

    pub fn get_mut(&mut self, id: &ConnId) -> Option<&mut Client> {
        self.by_id
            .find_mut(id_hash(*id), |(k, _)| k == id)
            .map(|(_, c)| c)
    }

    /// Adds or replaces the client `id`; returns the one replaced.
    pub fn insert(&mut self, id: ConnId, client: Client) -> Option<Client> {
        match self
            .by_id
            .entry(id_hash(id), |(k, _)| *k == id, |(k, _)| id_hash(*k))
        {
            hashbrown::hash_table::Entry::Occupied(mut o) => {
                Some(std::mem::replace(&mut o.get_mut().1, client))
            }
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert((id, client));
                self.order.insert(id);
                None
            }
        }
    }

    pub fn remove(&mut self, id: &ConnId) -> Option<Client> {
        let (_, c) = self
            .by_id
            .find_entry(id_hash(*id), |(k, _)| k == id)
            .ok()?
            .remove()
            .0;
        self.order.remove(id);
        Some(c)
    }

    /// Every client in id order.
    pub fn iter(&self) -> impl Iterator<Item = (&ConnId, &Client)> {
        self.order
            .iter()
            .map(move |id| (id, self.get(id).expect("ordered index lists only clients")))
    }

    /// Every client in id order.
    pub fn values(&self) -> impl Iterator<Item = &Client> {
        self.iter().map(|(_, c)| c)
    }

    /// Asserts that the ordered index lists exactly the table's clients.
    pub fn check_invariants(&self) {
        assert_eq!(
            self.order.len(),
            self.by_id.len(),
            "client index out of step"
        );
        for (id, _) in &self.by_id {
            assert!(
                self.order.contains(id),
                "client missing from the ordered index"
            );
        }
    }
}

impl std::ops::Index<&ConnId> for ClientTable {
    type Output = Client;

    fn index(&self, id: &ConnId) -> &Client {
        self.get(id).expect("no client with this id")
    }
}

/// One place in a connection's reply order taken by a forwarded command: its reply once it
/// arrives, then whatever the connection's later commands answered meanwhile.
#[derive(Debug)]
pub struct RelaySlot {
    pub id: u64,
    pub reply: Option<Bytes>,
    /// CLIENT REPLY OFF/SKIP was in force: the reply is dropped when it arrives.
    pub silent: bool,
    pub after: BytesMut,
}

/// One client's tracking options (`CLIENT TRACKING ON ...`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTracking {
    /// The client that receives this client's invalidations (0: this client).
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// `CLIENT CACHING yes|no` was given for the next command (or transaction).
    pub caching: bool,
    /// The redirect target is gone (TRACKINGINFO `broken_redirect`).
    pub broken_redirect: bool,
    /// BCAST prefixes ("" for every key).
    pub prefixes: BTreeSet<Bytes>,
}

impl ClientTracking {
    /// Whether a read by this client is remembered, by OPTIN/OPTOUT and CLIENT CACHING.
    pub fn remembers_reads(&self) -> bool {
        !self.bcast && (!self.optin || self.caching) && (!self.optout || !self.caching)
    }
}

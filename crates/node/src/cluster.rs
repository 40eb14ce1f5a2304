//! A partitioned cluster's state in the node: who the members are, which of them own which
//! slots, which peer links are up, and the commands this node forwarded and still waits for.
//!
//! Ownership is derived from the membership value, never stored beside it: the placement is
//! recomputed whenever the set of known members changes (static today, from `--seeds` and the
//! `Members` gossip; live join and leave will change the same value). Until every configured
//! member is known the cluster is "down" for keyed commands (`-CLUSTERDOWN`), as a Redis
//! Cluster is while slots are unassigned: a node that guessed ownership from a partial member
//! list would take writes for slots that are not its own.
//!
//! Pure: the node feeds it link events, membership messages and the time.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use lattice_placement::Placement;

use crate::client::ConnId;

/// How long a forwarded command may wait for its owner's reply before the client gets an
/// error: a live link answers in well under a millisecond; a dead one is noticed by the link
/// layer in about 3 s (ARCHITECTURE §32) and retried or refused then; this bounds the rest.
pub const FORWARD_TIMEOUT_MS: u64 = 5_000;
/// Forwarded commands waiting for replies at most; past it a command is refused with
/// TRYAGAIN rather than queued without bound.
pub const MAX_PENDING_FORWARDS: usize = 100_000;

/// Forwarded ids remembered per peer to drop a duplicated `Forward` (a write must not run
/// twice). The link is FIFO and a duplicate follows its original closely, so a window of
/// recent ids suffices; ids at or below the window's floor count as seen.
const DEDUP_WINDOW: usize = 4_096;

/// Reply bytes kept per peer to answer a resent `Forward` whose first reply was lost.
const REPLY_CACHE_BYTES: usize = 1 << 20;
/// A forward unanswered this long is sent again to the same owner (the owner runs it once and
/// answers the copy from its reply cache): a lost message costs this, not the full timeout.
/// Not backed off: a copy costs the owner a lookup in its reply cache, and the deadline bounds
/// the copies (at most 50).
pub const FORWARD_RESEND_MS: u64 = 100;

/// Forward ids from one peer that already ran here, with their replies while they fit.
#[derive(Default)]
struct Seen {
    floor: u64,
    ids: BTreeSet<u64>,
    replies: BTreeMap<u64, Bytes>,
    reply_bytes: usize,
}

/// The connection id of the stand-in client that runs commands a peer forwarded: one per
/// peer, from the top of the id space (drivers number real connections from 1 upwards).
pub fn peer_conn(peer: u32) -> ConnId {
    ConnId(u64::MAX - u64::from(peer))
}

/// A member's client address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub host: String,
    pub port: u16,
}

/// A command forwarded to an owner, waiting for its reply.
#[derive(Clone, Debug)]
pub struct Forwarded {
    pub conn: ConnId,
    pub peer: u32,
    pub slot: u16,
    pub args: Vec<Bytes>,
    pub proto: u32,
    /// A write may have run when its owner's link dropped: it is not sent again elsewhere.
    pub write: bool,
    pub deadline_ms: u64,
    /// When it is sent again if still unanswered (set by `Cluster::start`).
    pub resend_ms: u64,
    /// Copies sent so far.
    pub copies: u32,
}

/// Counters for INFO's `cluster` section.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClusterStats {
    pub forwarded: u64,
    pub forward_retries: u64,
    pub forward_timeouts: u64,
    pub forward_failures: u64,
    pub served_for_peers: u64,
}

pub struct Cluster {
    pub me: u32,
    /// Members named by the configuration (this node included).
    pub expected: usize,
    pub rf: usize,
    pub members: BTreeMap<u32, Member>,
    /// Peers with a live link.
    pub up: BTreeSet<u32>,
    placement: Option<Placement>,
    pending: BTreeMap<u64, Forwarded>,
    deadlines: BTreeSet<(u64, u64)>,
    /// (when, id): forwards to send again if still unanswered.
    resends: BTreeSet<(u64, u64)>,
    next_id: u64,
    /// Per peer: forwards it sent that ran here (duplicate suppression; reset when its link
    /// comes up again, since a restarted peer numbers its forwards afresh).
    ran: BTreeMap<u32, Seen>,
    pub stats: ClusterStats,
}

impl Cluster {
    /// `None` unless the cluster is partitioned (`rf` below the member count): with every
    /// replica owning every slot there is nothing to route.
    pub fn new(me: u32, expected: usize, rf: usize, host: String, port: u16) -> Option<Cluster> {
        if expected <= 1 || rf >= expected {
            return None;
        }
        let mut members = BTreeMap::new();
        members.insert(me, Member { host, port });
        Some(Cluster {
            me,
            expected,
            rf: rf.max(1),
            members,
            up: BTreeSet::new(),
            placement: None,
            pending: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            resends: BTreeSet::new(),
            next_id: 1,
            ran: BTreeMap::new(),
            stats: ClusterStats::default(),
        })
    }

    /// The placement, once every configured member is known.
    pub fn placement(&self) -> Option<&Placement> {
        self.placement.as_ref()
    }

    /// Learns members; returns true when something was new (then the caller gossips the list
    /// on and hands the new placement to replication).
    pub fn learn(&mut self, members: impl IntoIterator<Item = (u32, Member)>) -> bool {
        let mut changed = false;
        for (id, m) in members {
            if id == 0 {
                continue;
            }
            match self.members.get(&id) {
                Some(old) if *old == m => {}
                // Our own address is ours to say.
                Some(_) if id == self.me => {}
                _ => {
                    self.members.insert(id, m);
                    changed = true;
                }
            }
        }
        if changed && self.members.len() >= self.expected {
            let ids: Vec<u32> = self.members.keys().copied().collect();
            self.placement = Some(Placement::new(&ids, self.rf));
        }
        changed
    }

    /// The first owner of `slot` with a live link (this node if it owns it), skipping `not`.
    pub fn live_owner(&self, slot: u16, not: Option<u32>) -> Option<u32> {
        let p = self.placement.as_ref()?;
        p.owners(slot)
            .iter()
            .copied()
            .find(|&o| Some(o) != not && (o == self.me || self.up.contains(&o)))
    }

    pub fn owns(&self, slot: u16) -> bool {
        self.placement
            .as_ref()
            .is_some_and(|p| p.is_owner(self.me, slot))
    }

    /// `MOVED <slot> <host>:<port>` naming the slot's first owner.
    pub fn moved(&self, slot: u16) -> Option<String> {
        let p = self.placement.as_ref()?;
        let first = p.owners(slot).first()?;
        let m = self.members.get(first)?;
        Some(format!("MOVED {slot} {}:{}", m.host, m.port))
    }

    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Records a forwarded command; returns its id.
    pub fn start(&mut self, f: Forwarded) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut f = f;
        f.resend_ms = f.deadline_ms - FORWARD_TIMEOUT_MS + FORWARD_RESEND_MS;
        self.deadlines.insert((f.deadline_ms, id));
        self.resends.insert((f.resend_ms, id));
        self.pending.insert(id, f);
        self.stats.forwarded += 1;
        id
    }

    /// The forwarded command `id` got its reply (or gave up): forgets it.
    pub fn finish(&mut self, id: u64) -> Option<Forwarded> {
        let f = self.pending.remove(&id)?;
        self.deadlines.remove(&(f.deadline_ms, id));
        self.resends.remove(&(f.resend_ms, id));
        Some(f)
    }

    /// Sends `id` again, to `peer`.
    pub fn redirect(&mut self, id: u64, peer: u32) {
        if let Some(f) = self.pending.get_mut(&id) {
            f.peer = peer;
            self.stats.forward_retries += 1;
        }
    }

    pub fn get(&self, id: u64) -> Option<&Forwarded> {
        self.pending.get(&id)
    }

    /// Forwarded commands waiting on `peer`.
    pub fn waiting_on(&self, peer: u32) -> Vec<u64> {
        self.pending
            .iter()
            .filter(|(_, f)| f.peer == peer)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Forwarded commands past their deadline at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> Vec<u64> {
        self.deadlines
            .iter()
            .take_while(|(d, _)| *d <= now_ms)
            .map(|(_, id)| *id)
            .collect()
    }

    pub fn next_deadline_ms(&self) -> Option<u64> {
        let resend = self.resends.first().map(|(d, _)| *d);
        let deadline = self.deadlines.first().map(|(d, _)| *d);
        resend.into_iter().chain(deadline).min()
    }

    /// Whether forward `id` from `peer` is new (then it is remembered as run).
    pub fn first_delivery(&mut self, peer: u32, id: u64) -> bool {
        let seen = self.ran.entry(peer).or_default();
        if id <= seen.floor || !seen.ids.insert(id) {
            return false;
        }
        while seen.ids.len() > DEDUP_WINDOW {
            let oldest = seen.ids.pop_first().expect("non-empty");
            seen.floor = seen.floor.max(oldest);
            if let Some(r) = seen.replies.remove(&oldest) {
                seen.reply_bytes -= r.len();
            }
        }
        true
    }

    /// Keeps the reply to forward `id` from `peer` for a resent copy (oldest dropped first).
    pub fn keep_reply(&mut self, peer: u32, id: u64, reply: &Bytes) {
        let seen = self.ran.entry(peer).or_default();
        if reply.len() > REPLY_CACHE_BYTES / 16 {
            return;
        }
        seen.reply_bytes += reply.len();
        seen.replies.insert(id, reply.clone());
        while seen.reply_bytes > REPLY_CACHE_BYTES {
            let (_, r) = seen.replies.pop_first().expect("bytes imply entries");
            seen.reply_bytes -= r.len();
        }
    }

    /// The kept reply to a forward from `peer` that already ran.
    pub fn kept_reply(&self, peer: u32, id: u64) -> Option<Bytes> {
        self.ran.get(&peer)?.replies.get(&id).cloned()
    }

    /// Forwards due for a resend at `now_ms` (each rescheduled one interval later).
    pub fn due_resends(&mut self, now_ms: u64) -> Vec<(u64, u32)> {
        let due: Vec<(u64, u64)> = self
            .resends
            .iter()
            .take_while(|(t, _)| *t <= now_ms)
            .copied()
            .collect();
        let mut out = Vec::new();
        for (t, id) in due {
            self.resends.remove(&(t, id));
            if let Some(f) = self.pending.get_mut(&id) {
                out.push((id, f.peer));
                f.copies += 1;
                f.resend_ms = now_ms + FORWARD_RESEND_MS;
                self.resends.insert((f.resend_ms, id));
            }
        }
        out
    }

    /// A new link to `peer`: it may be a new process, numbering its forwards from 1.
    pub fn link_changed(&mut self, peer: u32) {
        self.ran.remove(&peer);
    }

    pub fn check_invariants(&self) {
        assert_eq!(self.resends.len(), self.pending.len(), "forward resends");
        for (t, id) in &self.resends {
            assert_eq!(self.pending.get(id).map(|f| f.resend_ms), Some(*t));
        }
        for seen in self.ran.values() {
            assert!(
                seen.reply_bytes <= REPLY_CACHE_BYTES,
                "reply cache unbounded"
            );
            assert!(seen.ids.len() <= DEDUP_WINDOW, "dedup window unbounded");
            assert!(
                seen.ids.first().is_none_or(|&f| f > seen.floor),
                "dedup floor"
            );
        }
        assert_eq!(
            self.pending.len(),
            self.deadlines.len(),
            "forward deadlines"
        );
        for (d, id) in &self.deadlines {
            assert_eq!(self.pending.get(id).map(|f| f.deadline_ms), Some(*d));
        }
        assert!(
            self.members.contains_key(&self.me),
            "a member list without us"
        );
        if let Some(p) = &self.placement {
            assert_eq!(
                p.members().len(),
                self.members.len(),
                "placement out of date"
            );
        }
        assert!(
            self.pending.len() <= MAX_PENDING_FORWARDS,
            "unbounded forwards"
        );
    }
}

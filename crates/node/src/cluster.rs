//! A partitioned cluster's state in the node: who the members are, which of them own which
//! slots, which peer links are up, and the commands this node forwarded and still waits for.
//!
//! Ownership is derived from the membership value, never stored beside it: the placement is
//! recomputed whenever the set of `up` members changes (from `--seeds`, `--join`, `CLUSTER
//! MEET`, `CLUSTER LEAVE`, `CLUSTER FORGET` and the `Members` gossip). Until every configured
//! member is known (or, for a node that joins, until it heard a member's list) the cluster is
//! "down" for keyed commands (`-CLUSTERDOWN`), as a Redis Cluster is while slots are
//! unassigned: a node that guessed ownership from a partial member list would take writes for
//! slots that are not its own.
//!
//! Live membership (ARCHITECTURE, "Live membership"): each member's record carries a status,
//! an epoch only that member raises (a `left` record outranks every other: a tombstone gossip
//! never resurrects) and the slot groups it holds completely. Records merge by taking the
//! higher rank, a join-semilattice, so gossip in any order converges. Which groups a node
//! holds is separate from which it owns: a gaining owner holds a group once a stream of it
//! ended, a losing one ("draining") holds it until every owner acknowledged its stream.
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
    /// The peer process these ids are from (`Cluster::origin`).
    origin: u64,
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

/// A set of slot groups (of `lattice_placement::GROUPS`), a bitmap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Groups([u64; 4]);

impl Groups {
    pub fn all() -> Groups {
        Groups([u64::MAX; 4])
    }

    pub fn contains(&self, g: u16) -> bool {
        usize::from(g) < 256 && self.0[usize::from(g) / 64] & (1 << (g % 64)) != 0
    }

    pub fn insert(&mut self, g: u16) {
        if usize::from(g) < 256 {
            self.0[usize::from(g) / 64] |= 1 << (g % 64);
        }
    }

    pub fn remove(&mut self, g: u16) {
        if usize::from(g) < 256 {
            self.0[usize::from(g) / 64] &= !(1 << (g % 64));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }

    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..lattice_placement::GROUPS).filter(|&g| self.contains(g))
    }

    pub fn union(&self, other: &Groups) -> Groups {
        Groups(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }

    /// The groups of `self` not in `other`.
    pub fn without(&self, other: &Groups) -> Groups {
        Groups(std::array::from_fn(|i| self.0[i] & !other.0[i]))
    }

    /// The wire form: 32 bytes, bit g of byte g / 8.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = vec![0u8; 32];
        for g in self.iter() {
            out[usize::from(g) / 8] |= 1 << (g % 8);
        }
        Bytes::from(out)
    }

    /// Reads the wire form; bytes past 32 are ignored, missing ones read as empty.
    pub fn from_bytes(b: &[u8]) -> Groups {
        let mut out = Groups::default();
        for (i, byte) in b.iter().take(32).enumerate() {
            for bit in 0..8 {
                if byte & (1 << bit) != 0 {
                    out.insert((i * 8 + bit) as u16);
                }
            }
        }
        out
    }
}

/// Where a member stands. The order is the merge order of records with equal epochs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Owns its share of the slots.
    Up = 0,
    /// Owns nothing; streams what it holds to the owners, then turns `Left`.
    Leaving = 1,
    /// Gone (left, or forgotten): a tombstone kept so gossip cannot bring it back.
    Left = 2,
}

impl Status {
    pub fn from_wire(n: u32) -> Status {
        match n {
            1 => Status::Leaving,
            2 => Status::Left,
            _ => Status::Up,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Status::Up => "up",
            Status::Leaving => "leaving",
            Status::Left => "left",
        }
    }
}

/// A member's record: its addresses and its own account of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub host: String,
    pub port: u16,
    /// Where peers dial it (0: not said; a static cluster dials its `--seeds`).
    pub cluster_port: u16,
    pub status: Status,
    pub epoch: u64,
    /// Slot groups it holds completely.
    pub held: Groups,
}

impl Member {
    pub fn new(host: String, port: u16) -> Member {
        Member {
            host,
            port,
            cluster_port: 0,
            status: Status::Up,
            epoch: 0,
            held: Groups::default(),
        }
    }

    /// The merge rank: a tombstone first, then the member's epoch, then the status (a
    /// forget and a leave at the same epoch agree), then the held set (a total order, so
    /// the merge is a join whatever the order gossip brings records in).
    fn rank(&self) -> (bool, u64, Status, Groups) {
        (
            self.status == Status::Left,
            self.epoch,
            self.status,
            self.held,
        )
    }
}

/// What `Cluster::learn` found.
#[derive(Debug, Default)]
pub struct Learned {
    /// Some record changed: gossip the list on.
    pub changed: bool,
    /// The placement changed (or came into being): recompute moves.
    pub placement: bool,
    /// Members newly known with a cluster address (the driver dials them).
    pub dial: Vec<(u32, String)>,
    /// Members now `left` (the driver stops dialing them).
    pub gone: Vec<u32>,
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
    /// Times an old owner refused it as not run (the slot had moved), each time sent on to
    /// another owner: at most `MAX_MOVED_RETRIES`.
    pub moved_retries: u32,
}

/// A forward refused as not run by a node that no longer owns its slot goes on to another
/// owner at most this many times before the client is told to retry (`TRYAGAIN`): one change
/// moves a group once, so two retries cover a change the forwarding node has not heard of
/// yet and one more that follows it.
pub const MAX_MOVED_RETRIES: u32 = 3;

/// Counters for INFO's `cluster` section.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClusterStats {
    /// Groups this node streamed to an owner and had acknowledged, and groups it received.
    pub groups_sent: u64,
    pub groups_received: u64,
    /// Groups dropped after every owner acknowledged them.
    pub groups_dropped: u64,
    pub forwarded: u64,
    pub forward_retries: u64,
    pub forward_timeouts: u64,
    pub forward_failures: u64,
    pub served_for_peers: u64,
}

pub struct Cluster {
    pub me: u32,
    /// Members named by the configuration (this node included); 0 for a node that joins.
    pub expected: usize,
    /// The member list is complete enough to place slots (see `Cluster::learn`).
    complete: bool,
    /// Per draining group: the owners that acknowledged this node's stream of it.
    pub pushed: BTreeMap<u16, BTreeSet<u32>>,
    /// Per group this node holds: owners the placement added after it held it, owed a stream
    /// of it (see `Cluster::place`). At most 256 groups, each naming members.
    pub owe: BTreeMap<u16, BTreeSet<u32>>,
    /// Per group this node owns without holding: when it last asked a holder for it.
    pub asked_ms: BTreeMap<u16, u64>,
    /// When the moves the membership calls for are next checked (`node::members`).
    pub next_check_ms: u64,
    /// Our records changed outside a message (a command): gossip them at the next check.
    pub dirty: bool,
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
    /// This process's number, sent with every forward: a restarted process numbers its
    /// forwards from 1 again, and its owners must not take them for copies of the old
    /// process's. Not reset with a link: a link that drops and comes back to the same process
    /// can still bring a copy of a forward that ran, which must not run twice.
    pub origin: u64,
    /// Per peer: forwards it sent that ran here (duplicate suppression; reset when the peer's
    /// `origin` changes, a new process).
    ran: BTreeMap<u32, Seen>,
    pub stats: ClusterStats,
}

impl Cluster {
    /// `None` unless the cluster is partitioned (`rf` below the member count): with every
    /// replica owning every slot there is nothing to route. `join`: this node joins a
    /// running cluster (it knows no member count; it places slots once a member told it the
    /// list, and holds nothing until streams gave it its groups).
    pub fn new(
        me: u32,
        expected: usize,
        rf: usize,
        host: String,
        port: u16,
        cluster_port: u16,
        join: bool,
    ) -> Option<Cluster> {
        if !join && (expected <= 1 || rf >= expected) {
            return None;
        }
        let mut members = BTreeMap::new();
        let mut m = Member::new(host, port);
        m.cluster_port = cluster_port;
        members.insert(me, m);
        Some(Cluster {
            me,
            expected: if join { 0 } else { expected },
            complete: false,
            pushed: BTreeMap::new(),
            owe: BTreeMap::new(),
            asked_ms: BTreeMap::new(),
            next_check_ms: 0,
            dirty: false,
            rf: rf.max(1),
            members,
            up: BTreeSet::new(),
            placement: None,
            pending: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            resends: BTreeSet::new(),
            next_id: 1,
            origin: 0,
            ran: BTreeMap::new(),
            stats: ClusterStats::default(),
        })
    }

    /// The placement, once every configured member is known.
    pub fn placement(&self) -> Option<&Placement> {
        self.placement.as_ref()
    }

    /// Merges member records (a join: the higher rank wins per member; our own record is
    /// ours to say, so a higher one heard of us only raises our epoch past it).
    pub fn learn(&mut self, members: impl IntoIterator<Item = (u32, Member)>) -> Learned {
        let mut out = Learned::default();
        let mut heard_others = false;
        for (id, m) in members {
            if id == 0 {
                continue;
            }
            if id != self.me {
                heard_others = true;
            }
            match self.members.get_mut(&id) {
                Some(old) if id == self.me => {
                    if m.rank() > old.rank() && m.status != Status::Left {
                        old.epoch = m.epoch + 1;
                        out.changed = true;
                    } else if m.status == Status::Left && old.status != Status::Left {
                        // Forgotten by the cluster: a node that was told so stops owning.
                        old.status = Status::Left;
                        old.epoch = old.epoch.max(m.epoch);
                        out.changed = true;
                        out.placement = true;
                    }
                }
                Some(old) => {
                    if m.rank() > old.rank() {
                        if m.status != old.status {
                            out.placement = true;
                            if m.status == Status::Left {
                                out.gone.push(id);
                            }
                        }
                        if m.cluster_port != 0 && old.cluster_port == 0 {
                            out.dial
                                .push((id, format!("{}:{}", m.host, m.cluster_port)));
                        }
                        *old = m;
                        out.changed = true;
                    }
                }
                None => {
                    if m.status != Status::Left && m.cluster_port != 0 {
                        out.dial
                            .push((id, format!("{}:{}", m.host, m.cluster_port)));
                    }
                    if m.status == Status::Left {
                        out.gone.push(id);
                    }
                    self.members.insert(id, m);
                    out.changed = true;
                    out.placement = true;
                }
            }
        }
        if !self.complete {
            let known = self
                .members
                .values()
                .filter(|m| m.status != Status::Left)
                .count();
            self.complete = if self.expected == 0 {
                heard_others
            } else {
                known >= self.expected
            };
            if self.complete {
                out.placement = true;
                if self.expected != 0 {
                    // A configured member starts holding what it owns: the cluster is new
                    // (or this node restarts on its own data).
                    self.place();
                    let owned = self.owned();
                    let me = self.members.get_mut(&self.me).expect("self");
                    me.held = owned;
                    me.epoch += 1;
                    out.changed = true;
                }
            }
        }
        if self.complete && out.placement {
            self.place();
        }
        out
    }

    /// CLUSTER LEAVE: stop owning; the node drains and then turns `left`.
    pub fn leave(&mut self) -> Result<(), &'static str> {
        if self.placement.is_none() {
            return Err("CLUSTERDOWN The cluster is down");
        }
        if self.me().status != Status::Up {
            return Err("ERR This node is already leaving the cluster");
        }
        self.update_me(|me| me.status = Status::Leaving);
        self.dirty = true;
        self.next_check_ms = 0;
        Ok(())
    }

    /// CLUSTER FORGET: `id` becomes a tombstone.
    pub fn forget(&mut self, id: u32) -> Result<(), &'static str> {
        if id == self.me {
            return Err("ERR I tried hard but I can't forget myself...");
        }
        let Some(m) = self.members.get(&id) else {
            return Err("ERR Unknown node");
        };
        if m.status != Status::Left {
            let mut tomb = m.clone();
            tomb.status = Status::Left;
            self.learn([(id, tomb)]);
        }
        self.dirty = true;
        self.next_check_ms = 0;
        Ok(())
    }

    /// Recomputes the placement from the `up` members. Every owner a change adds to a group
    /// this node holds is owed a stream of it from here, whether this node keeps the group or
    /// drains it: a write this node ran before it heard of the change sent its delta to the
    /// old owners only, so the draining holder's stream may have passed the key before that
    /// delta reached it; only this node's own stream, started after it heard, is sure to
    /// carry the write (ARCHITECTURE §65).
    fn place(&mut self) {
        let ids: Vec<u32> = self
            .members
            .iter()
            .filter(|(_, m)| m.status == Status::Up)
            .map(|(id, _)| *id)
            .collect();
        let new = Placement::new(&ids, self.rf);
        if let (Some(old), Some(me)) = (&self.placement, self.members.get(&self.me)) {
            for g in me.held.iter() {
                let slot = g * lattice_placement::SLOTS_PER_GROUP;
                let before = old.owners(slot);
                for &o in new.owners(slot) {
                    if o != self.me && !before.contains(&o) {
                        self.owe.entry(g).or_default().insert(o);
                    }
                }
            }
        }
        self.placement = Some(new);
    }

    /// Our own record.
    pub fn me(&self) -> &Member {
        self.members.get(&self.me).expect("a member list holds us")
    }

    /// Changes our own record (raising its epoch so it wins everywhere).
    pub fn update_me(&mut self, f: impl FnOnce(&mut Member)) {
        let me = self
            .members
            .get_mut(&self.me)
            .expect("a member list holds us");
        let status = me.status;
        f(me);
        me.epoch += 1;
        if me.status != status {
            self.place_if_complete();
        }
    }

    fn place_if_complete(&mut self) {
        if self.complete {
            self.place();
        }
    }

    /// Every member record's rank as one number: the tombstone bit above the epoch, the
    /// order `Member::rank` merges by (a member changes its own record only by raising its
    /// epoch, so records of one member with equal ranks are equal). A peer that reports a
    /// higher rank of a member than ours knows a record we have not heard of.
    pub fn ranks(&self) -> BTreeMap<u32, u64> {
        self.members
            .iter()
            .map(|(&id, m)| {
                let left = u64::from(m.status == Status::Left) << 63;
                (id, left | m.epoch.min(u64::MAX >> 1))
            })
            .collect()
    }

    /// Whether a peer that sent `theirs` (its whole list) lacks a record we have: a member it
    /// does not list, or one it lists at a lower rank.
    pub fn lacks(&self, theirs: &BTreeMap<u32, Member>) -> bool {
        self.members
            .iter()
            .any(|(id, ours)| theirs.get(id).is_none_or(|t| t.rank() < ours.rank()))
    }

    /// Per live member other than us: the groups it owns and does not hold yet, by its
    /// record.
    pub fn gaining(&self) -> BTreeMap<u32, Groups> {
        let mut out = BTreeMap::new();
        let Some(p) = &self.placement else {
            return out;
        };
        for (&id, m) in self.members.iter().filter(|(&id, _)| id != self.me) {
            if m.status != Status::Up {
                continue;
            }
            let mut g = Groups::default();
            for group in (0..lattice_placement::GROUPS).filter(|&x| !m.held.contains(x)) {
                if p.is_owner(id, group * lattice_placement::SLOTS_PER_GROUP) {
                    g.insert(group);
                }
            }
            if !g.is_empty() {
                out.insert(id, g);
            }
        }
        out
    }

    /// Groups this node owns under the placement.
    pub fn owned(&self) -> Groups {
        let mut out = Groups::default();
        if let Some(p) = &self.placement {
            for g in 0..lattice_placement::GROUPS {
                if p.is_owner(self.me, g * lattice_placement::SLOTS_PER_GROUP) {
                    out.insert(g);
                }
            }
        }
        out
    }

    /// The owners of group `g`.
    pub fn group_owners(&self, g: u16) -> &[u32] {
        self.placement
            .as_ref()
            .map_or(&[], |p| p.owners(g * lattice_placement::SLOTS_PER_GROUP))
    }

    /// Members other than the owners that hold `g` (draining it), by their records.
    pub fn drainers(&self, g: u16) -> Vec<u32> {
        let owners = self.group_owners(g);
        self.members
            .iter()
            .filter(|(id, m)| {
                m.status != Status::Left && m.held.contains(g) && !owners.contains(id)
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// Per group, the members besides its owners that keep receiving its deltas (those
    /// draining it): what the replicator fans writes out to.
    pub fn extra_keepers(&self) -> BTreeMap<u16, Vec<u32>> {
        let mut out = BTreeMap::new();
        for g in 0..lattice_placement::GROUPS {
            let d = self.drainers(g);
            if !d.is_empty() {
                out.insert(g, d);
            }
        }
        out
    }

    /// Groups this node holds and no longer owns.
    pub fn draining(&self) -> Groups {
        let owned = self.owned();
        let mut out = Groups::default();
        for g in self.me().held.iter().filter(|&g| !owned.contains(g)) {
            out.insert(g);
        }
        out
    }

    /// Groups this node owns and does not hold yet.
    pub fn incoming(&self) -> Groups {
        let held = self.me().held;
        let mut out = Groups::default();
        for g in self.owned().iter().filter(|&g| !held.contains(g)) {
            out.insert(g);
        }
        out
    }

    /// Members not `left`.
    pub fn live_members(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.status != Status::Left)
            .count()
    }

    /// Whether `id` is a member that has not left.
    pub fn is_member(&self, id: u32) -> bool {
        self.members
            .get(&id)
            .is_some_and(|m| m.status != Status::Left)
    }

    /// Whether `g` is held, by its owners' records (ours for us).
    fn holds(&self, id: u32, g: u16) -> bool {
        self.members.get(&id).is_some_and(|m| m.held.contains(g))
    }

    /// The first owner of `slot` with a live link (this node if it owns it), skipping `not`.
    /// During a move an owner that holds the group is preferred, then one draining it (it
    /// still holds everything), then an owner still receiving it.
    pub fn live_owner(&self, slot: u16, not: Option<u32>) -> Option<u32> {
        let p = self.placement.as_ref()?;
        let g = Placement::group_of(slot);
        let live = |o: u32| Some(o) != not && (o == self.me || self.up.contains(&o));
        let owners = p.owners(slot);
        owners
            .iter()
            .copied()
            .find(|&o| live(o) && self.holds(o, g))
            .or_else(|| {
                self.drainers(g)
                    .into_iter()
                    .find(|&o| live(o) && o != self.me)
            })
            .or_else(|| owners.iter().copied().find(|&o| live(o)))
    }

    /// Whether the placement makes this node an owner of `slot` (held or not). False before
    /// the placement exists.
    pub fn placed_owner(&self, slot: u16) -> bool {
        self.placement
            .as_ref()
            .is_some_and(|p| p.is_owner(self.me, slot))
    }

    /// Whether a command on `slot` runs here: this node owns it and holds it, or owns it and
    /// no live member holds it better (see `live_owner`).
    pub fn owns(&self, slot: u16) -> bool {
        let Some(p) = self.placement.as_ref() else {
            return false;
        };
        if !p.is_owner(self.me, slot) {
            return false;
        }
        self.me().held.contains(Placement::group_of(slot))
            || self.live_owner(slot, None) == Some(self.me)
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
        self.stats.forwarded += 1;
        self.start_again(f)
    }

    /// [`Cluster::start`] for a command forwarded before and sent on after a refusal (counted
    /// in `forward_retries`, not again in `forwarded`).
    pub fn start_again(&mut self, f: Forwarded) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut f = f;
        f.resend_ms = f.deadline_ms - FORWARD_TIMEOUT_MS + FORWARD_RESEND_MS;
        self.deadlines.insert((f.deadline_ms, id));
        self.resends.insert((f.resend_ms, id));
        self.pending.insert(id, f);
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
        let check = self.placement.is_some().then_some(self.next_check_ms);
        resend.into_iter().chain(deadline).chain(check).min()
    }

    /// Whether forward `id` from process `origin` of `peer` is new (then it is remembered as
    /// run). A new process of the peer starts a new record.
    pub fn first_delivery(&mut self, peer: u32, origin: u64, id: u64) -> bool {
        let seen = self.ran.entry(peer).or_default();
        if seen.origin != origin {
            *seen = Seen {
                origin,
                ..Seen::default()
            };
        }
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
            let up = self
                .members
                .values()
                .filter(|m| m.status == Status::Up)
                .count();
            assert_eq!(p.members().len(), up, "placement out of date");
        }
        assert!(self.pushed.len() <= 256 && self.asked_ms.len() <= 256 && self.owe.len() <= 256);
        assert!(
            self.pending.len() <= MAX_PENDING_FORWARDS,
            "unbounded forwards"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of a forward that ran is refused for as long as its sender's process lives; a
    /// restarted sender, numbering its forwards from 1 again, is a new record. (That a link
    /// coming back keeps the record is seed 358 of the membership swarm, run by
    /// `make sim-membership`.)
    #[test]
    fn a_forward_runs_once_per_sender_process() {
        let mut c = Cluster::new(1, 3, 2, "h".into(), 1, 2, false).expect("partitioned");
        assert!(c.first_delivery(2, 7, 1));
        c.keep_reply(2, 1, &Bytes::from_static(b":22\r\n"));
        assert!(!c.first_delivery(2, 7, 1), "a copy ran again");
        assert_eq!(c.kept_reply(2, 1).as_deref(), Some(&b":22\r\n"[..]));
        assert!(c.first_delivery(2, 7, 2));
        // Peer 2 restarted: its forward 1 is new.
        assert!(c.first_delivery(2, 8, 1));
        assert!(c.kept_reply(2, 2).is_none());
        // Other peers keep their own records.
        assert!(c.first_delivery(3, 7, 1));
    }
}

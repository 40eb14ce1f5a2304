//! Slot-group moves of a partitioned cluster whose membership changes (ARCHITECTURE, "Live
//! membership"): a holder streams the states of whole slot groups to an owner in numbered,
//! acknowledged slices, between client batches; the receiver merges each slice and says so;
//! the stream is complete once its last slice is acknowledged. The node decides who streams
//! what to whom and when a group is dropped; this is the transport and the drop's sweep.
//!
//! Bounded: one stream per peer, at most `SLICE_WINDOW` slices unacknowledged, each of at most
//! `SLICE_KEYS` keys and about `SLICE_BYTES` bytes; a slice unacknowledged for
//! `SLICE_TIMEOUT_MS` starts a new stream from that slice's first key (a lost slice must not
//! end it; what the receiver acknowledged before it is merged there, and what is sent again
//! merges idempotently). Each restart doubles that timeout for the stream, up to
//! `MOVE_TIMEOUT_MAX_MS`, and an acknowledgement sets it back: a receiver slower than the
//! timeout (a loaded machine) is given the time it needs instead of a new stream every 2 s.

use std::collections::VecDeque;

use bincode::Options as _;
use bytes::Bytes;
use lattice_crdt::{NodeId, VersionVector};
use lattice_store::Db;

use super::group_sums::{group_of, row_agrees, row_sum, Cell, Row, CHECK_SPAN};
use super::keymap::LeafEntry;
use super::state::expand_move_short;
use super::wire::{Body, KeyBlob, MoveAck, MoveSlice};
use super::{key_blob, merkle, Effect, Replicator, SLICE_BYTES, SLICE_TIMEOUT_MS, SLICE_WINDOW};
use crate::cluster::Groups;

/// Merkle leaves the drop sweep visits per step at most (a leaf is a lookup even when empty).
const DROP_LEAVES_PER_STEP: usize = 4_096;
/// Keys the drop sweep removes per step at most: about a millisecond of work.
const DROP_KEYS_PER_STEP: usize = 4_096;
/// Leaves one slice build visits at most (sparse keyspaces: most leaves are empty). It bounds
/// the checks of a slice too (one per `CHECK_SPAN` leaves), and so what building it and, at
/// the receiver, comparing its checks cost: every key of the leaves is visited (its group
/// read), whichever groups move. At 8,192 leaves (an eighth of the keyspace, some 12,000 keys
/// of a node holding 100,000) a slice cost a few milliseconds on each side, and a join or a
/// leave under load held nodes in steps of 15-25 ms of CPU back to back (§90).
const MOVE_LEAVES_PER_SLICE: usize = if cfg!(feature = "wide-move-slices") {
    16_384
} else {
    2_048
};
/// Checks one slice carries at most: about 40 KiB (2 bytes of distance and 8 of digest).
const MOVE_CHECKS_PER_SLICE: usize = 4_096;

/// A stream of slot groups to one peer.
pub(super) struct MoveOut {
    stream: u64,
    groups: Groups,
    /// Of `groups`, those the receiver held when the stream opened (by its record): their
    /// keys are checked a leaf at a time by digest, and only the leaves that differ there
    /// are sent (`want`). The rest go whole.
    checked: Groups,
    /// The next Merkle leaf to list, and the keys of it already sent.
    leaf: usize,
    resume: usize,
    /// Slices not yet acknowledged, oldest first.
    inflight: VecDeque<Sent>,
    /// Slices in `inflight` that carry checks: the last slice waits for their answers.
    checking: usize,
    /// First leaves of `CHECK_SPAN` leaves to send whole (the receiver's answer to a check,
    /// or a span whose digests are stale here), at most the checks of `SLICE_WINDOW` slices.
    want: VecDeque<u32>,
    /// Where the sending of the first wanted span stands (a span can hold more keys than a
    /// slice).
    fill_at: (usize, usize),
    next_slice: u64,
    last_sent: bool,
    /// Groups asked for while this stream ran: streamed next (restarting this stream with
    /// them would send its head again, and under steady changes might never end).
    then: Groups,
    /// How long the oldest slice may go unacknowledged before the stream starts over:
    /// `SLICE_TIMEOUT_MS`, doubled at each restart up to `MOVE_TIMEOUT_MAX_MS` and back to
    /// the start once a slice is acknowledged. A fixed timeout shorter than a loaded
    /// receiver's answer restarted a join's streams 172-189 times without one completing.
    timeout_ms: u64,
}

/// The longest a move's slice waits for its acknowledgement before its stream starts over.
const MOVE_TIMEOUT_MAX_MS: u64 = 32_000;

/// A slice sent and not acknowledged yet.
struct Sent {
    slice: u64,
    at_ms: u64,
    /// Where the walk over the leaves stood before this slice, if it is a slice of the walk.
    walk: Option<(usize, usize)>,
    /// Wanted spans it sends: wanted again if the stream starts over.
    fill: Vec<u32>,
    checks: bool,
}

/// One slice's contents.
#[derive(Default)]
struct Built {
    entries: Vec<KeyBlob>,
    /// States in their short form (§89), sent with the frontier they expand with.
    short: Vec<KeyBlob>,
    bytes: usize,
    check_leaves: Vec<u32>,
    check_digests: Vec<u64>,
}

impl Built {
    /// Key states in the slice, whole or short.
    fn keys(&self) -> usize {
        self.entries.len() + self.short.len()
    }

    /// Adds a key's state, whole or (`short`) in its short form.
    fn push(&mut self, (blob, short): (KeyBlob, bool)) {
        self.bytes += blob.state.len() + blob.key.len();
        if short {
            self.short.push(blob);
        } else {
            self.entries.push(blob);
        }
    }
}

/// What a stream from one peer has delivered so far.
#[derive(Default)]
pub(super) struct MoveIn {
    stream: u64,
    /// The next slice expected; a gap (a lost slice) stops the stream's acknowledgements, so
    /// the sender times out and starts again.
    next: u64,
}

/// Counters for INFO.
#[derive(Default, Clone, Copy)]
pub struct MoveStats {
    pub streams_started: u64,
    pub streams_done: u64,
    pub streams_restarted: u64,
    pub slices_sent: u64,
    pub bytes_sent: u64,
    pub keys_sent: u64,
    pub bytes_received: u64,
    pub keys_received: u64,
    pub keys_dropped: u64,
    pub slices_refused: u64,
    /// `Deltas` messages neither merged nor acknowledged: sent under member records this
    /// replica had not heard of, with a key it did not keep (see `wire::Deltas`).
    pub deltas_held_back: u64,
    /// Leaves checked by digest instead of sent (`MoveOut::checked`).
    pub leaves_checked: u64,
    /// Checked leaves the receiver wanted (they differed there), and the keys sent for them.
    pub leaves_wanted: u64,
    pub keys_filled: u64,
    /// Of `keys_sent`, the states sent in their short form (§89).
    pub keys_sent_short: u64,
}

impl Replicator {
    /// Streams `groups` to `peer`. Groups a running stream to it does not cover are streamed
    /// once it ends.
    pub fn start_move(&mut self, peer: NodeId, groups: Groups, now_ms: u64, db: &Db) {
        if groups.is_empty() || peer == self.node {
            return;
        }
        if let Some(m) = self.moves_out.get_mut(&peer) {
            let mut more = Groups::default();
            for g in groups.iter().filter(|&g| !m.groups.contains(g)) {
                more.insert(g);
            }
            m.then = m.then.union(&more);
            return;
        }
        self.open_move(peer, groups, now_ms, db);
    }

    fn open_move(&mut self, peer: NodeId, groups: Groups, now_ms: u64, db: &Db) {
        if cfg!(feature = "planted-move-bug") {
            // The planted bug: a stream counts as delivered when it starts, so its sender
            // drops the groups before the receiver acknowledged holding them.
            self.moved.push((peer, groups));
        }
        self.next_stream += 1;
        self.move_stats.streams_started += 1;
        // Groups the receiver holds already (an owner that stays, or a gainer whose record
        // says it has them) are checked, not sent: it has most of their keys.
        let mut checked = Groups::default();
        let ours = self.node.0;
        for g in groups.iter() {
            let slot = g * lattice_placement::SLOTS_PER_GROUP;
            let owner = self
                .ownership
                .as_ref()
                .is_some_and(|p| p.is_owner(peer.0, slot));
            let gaining = self.gaining.get(&peer.0).is_some_and(|x| x.contains(g));
            if owner && !gaining && peer.0 != ours {
                checked.insert(g);
            }
        }
        self.moves_out.insert(
            peer,
            MoveOut {
                stream: self.next_stream,
                groups,
                checked,
                leaf: 0,
                resume: 0,
                inflight: VecDeque::new(),
                checking: 0,
                want: VecDeque::new(),
                fill_at: (0, 0),
                next_slice: 0,
                last_sent: false,
                then: Groups::default(),
                timeout_ms: SLICE_TIMEOUT_MS,
            },
        );
        self.pump_move(peer, now_ms, db);
    }

    /// Groups being streamed to each peer.
    pub fn moves_out(&self) -> impl Iterator<Item = (NodeId, Groups)> + '_ {
        self.moves_out.iter().map(|(p, m)| (*p, m.groups))
    }

    /// Stops every stream to `peer` (its link went down: a new link starts them again).
    pub(super) fn moves_peer_down(&mut self, peer: NodeId) {
        self.moves_out.remove(&peer);
        self.moves_in.remove(&peer);
    }

    /// The next slice of the stream to `peer`, if its window has room: wanted leaves first,
    /// then the walk over the leaves; the last slice (marked `last`) goes once the walk is
    /// done and every check is answered and its wanted leaves sent, so a receiver that takes
    /// the groups as held on it has merged everything it lacked.
    pub(super) fn pump_move(&mut self, peer: NodeId, now_ms: u64, db: &Db) {
        let up = self.peers.get(&peer).is_some_and(|p| p.up);
        let Some(m) = self.moves_out.get_mut(&peer) else {
            return;
        };
        if !up || m.last_sent || m.inflight.len() >= SLICE_WINDOW {
            return;
        }
        let (groups, checked) = (m.groups, m.checked);
        let mut fill = Vec::new();
        let mut walk = None;
        let built = if !m.want.is_empty() {
            let mut want = std::mem::take(&mut m.want);
            let mut at = m.fill_at;
            let mut built = Built::default();
            while let Some(&first) = want.front() {
                let first = first as usize;
                if !(first..first + CHECK_SPAN).contains(&at.0) {
                    at = (first, 0);
                }
                fill.push(first as u32);
                match self.span_states(first, at, checked, &mut built, db) {
                    Some(cut) => {
                        at = cut;
                        break;
                    }
                    None => {
                        want.pop_front();
                    }
                }
            }
            self.move_stats.keys_filled += built.keys() as u64;
            let m = self.moves_out.get_mut(&peer).expect("present");
            m.want = want;
            m.fill_at = at;
            built
        } else if m.leaf < merkle::LEAVES {
            let (leaf, resume) = (m.leaf, m.resume);
            walk = Some((leaf, resume));
            let (built, stale, leaf, resume) = self.walk_move(leaf, resume, groups, checked, db);
            let m = self.moves_out.get_mut(&peer).expect("present");
            m.leaf = leaf;
            m.resume = resume;
            m.want.extend(stale);
            built
        } else if m.checking > 0 {
            return; // the last slice waits for the checks' answers
        } else {
            Built::default()
        };
        let m = self.moves_out.get_mut(&peer).expect("present");
        let checks = !built.check_leaves.is_empty();
        if checks {
            m.checking += 1;
        }
        m.next_slice += 1;
        m.last_sent = m.leaf >= merkle::LEAVES && m.want.is_empty() && m.checking == 0;
        m.inflight.push_back(Sent {
            slice: m.next_slice,
            at_ms: now_ms,
            walk,
            fill,
            checks,
        });
        self.move_stats.leaves_checked += built.check_leaves.len() as u64;
        let keys = built.keys() as u64;
        let frontier = if built.short.is_empty() {
            Bytes::new()
        } else {
            Bytes::from(
                super::state::codec()
                    .serialize(&self.frontier)
                    .expect("in-memory frontiers always encode"),
            )
        };
        let msg = MoveSlice {
            stream: m.stream,
            slice: m.next_slice,
            groups: groups.to_bytes(),
            last: m.last_sent,
            entries: built.entries,
            check_groups: if checks {
                checked.to_bytes()
            } else {
                bytes::Bytes::new()
            },
            check_leaves: built.check_leaves,
            check_digests: built.check_digests,
            short_entries: built.short,
            frontier,
        };
        self.move_stats.slices_sent += 1;
        self.move_stats.keys_sent += keys;
        self.move_stats.keys_sent_short += msg.short_entries.len() as u64;
        self.stats.max_slice_keys = self.stats.max_slice_keys.max(keys);
        self.stats.max_slice_bytes = self.stats.max_slice_bytes.max(built.bytes as u64);
        let data = self.envelope(Body::MoveSlice(msg));
        self.move_stats.bytes_sent += data.len() as u64;
        self.send_ae_data(peer, data);
    }

    /// One slice of the walk from (`leaf`, `resume`): the states of the keys of `groups`
    /// not `checked`, and for each `CHECK_SPAN` leaves it enters a check of their keys in
    /// `checked` (a span with a stale digest among those is returned to be sent whole
    /// instead). Returns the slice, those spans and where the walk stands.
    fn walk_move(
        &mut self,
        mut leaf: usize,
        mut resume: usize,
        groups: Groups,
        checked: Groups,
        db: &Db,
    ) -> (Built, Vec<u32>, usize, usize) {
        let mut built = Built::default();
        let mut stale_leaves = Vec::new();
        let mut leaves = 0;
        let mut last_checked = 0;
        let sent = groups.without(&checked);
        'leaves: while leaf < merkle::LEAVES
            && leaves < MOVE_LEAVES_PER_SLICE
            && built.check_leaves.len() < MOVE_CHECKS_PER_SLICE
        {
            leaves += 1;
            let span_start = resume == 0 && leaf.is_multiple_of(CHECK_SPAN);
            if span_start && !checked.is_empty() {
                match self.span_sum(leaf, checked, db) {
                    None => stale_leaves.push(leaf as u32),
                    Some((_, 0)) => {}
                    Some((sum, _)) => {
                        built.check_leaves.push((leaf - last_checked) as u32);
                        built.check_digests.push(sum);
                        last_checked = leaf;
                    }
                }
            }
            // A span without a key of the groups sent whole is passed over at once, by its
            // row of group sums (most of a stream that only checks, or moves a few groups).
            // It still counts as its leaves toward the slice's bound, so a slice reaches no
            // further than before: with slices reaching over the whole keyspace in a few steps
            // a membership seed fails (§92, "Found").
            if span_start && (sent.is_empty() || self.span_sum(leaf, sent, db) == Some((0, 0))) {
                leaf += CHECK_SPAN;
                leaves += CHECK_SPAN - 1;
                continue;
            }
            // Most leaves hold no key this stream sends (it moves a few groups): those are
            // passed over without building their ordered list.
            if !self.leaf_sends(leaf, sent, db) {
                leaf += 1;
                resume = 0;
                continue;
            }
            let list = self.keys.leaf_entries(leaf, db);
            let mut i = resume.min(list.len());
            while i < list.len() {
                if built.bytes >= SLICE_BYTES || built.keys() >= self.slice_keys {
                    resume = i;
                    break 'leaves;
                }
                let (k, e) = &list[i];
                i += 1;
                let g = group_of(k);
                // An evicted key's stub has no state to send (§79): the group's other holders
                // stream the key.
                if e.evicted || !groups.contains(g) || checked.contains(g) {
                    continue;
                }
                built.push(key_blob(
                    k,
                    &e.state,
                    self.compact_wire.get_mut(),
                    &self.frontier,
                    db,
                    &mut self.scratch,
                    true,
                ));
            }
            leaf += 1;
            resume = 0;
        }
        (built, stale_leaves, leaf, resume)
    }

    /// Adds to `built` the states of the keys in `groups` of the `CHECK_SPAN` leaves from
    /// `first`, from (leaf, key) `at` on; stops at the slice's bounds and returns where it
    /// stopped (`None`: the span is sent).
    fn span_states(
        &mut self,
        first: usize,
        at: (usize, usize),
        groups: Groups,
        built: &mut Built,
        db: &Db,
    ) -> Option<(usize, usize)> {
        let mut resume = at.1;
        for leaf in at.0..(first + CHECK_SPAN).min(merkle::LEAVES) {
            if !self.leaf_sends(leaf, groups, db) {
                resume = 0;
                continue;
            }
            let list = self.keys.leaf_entries(leaf, db);
            for (i, (k, e)) in list.iter().enumerate().skip(resume) {
                if built.bytes >= SLICE_BYTES || built.keys() >= self.slice_keys {
                    return Some((leaf, i));
                }
                if e.evicted || !groups.contains(group_of(k)) {
                    continue;
                }
                built.push(key_blob(
                    k,
                    &e.state,
                    self.compact_wire.get_mut(),
                    &self.frontier,
                    db,
                    &mut self.scratch,
                    true,
                ));
            }
            resume = 0;
        }
        None
    }

    /// The wrapping sum of the digests of the keys in `groups` of the `CHECK_SPAN` leaves
    /// from `first`, and how many there are (at least 1 when a key without a digest may be
    /// there: see `group_sums::Cell`); `None` if one of them is stale (it cannot be compared).
    ///
    /// From the span's row of group sums (§92), built by one visit of the span's keys the
    /// first time a check needs it and kept up to date by the Merkle tree's changes after
    /// that: every stream checks every span of the keyspace, on both sides, and visiting the
    /// keys each time was the largest cost of a join or leave under load (§90, §92). A span
    /// holding a stale digest gets no row: it is summed by a visit, as the stale key may be
    /// in a group not asked for.
    fn span_sum(&mut self, first: usize, groups: Groups, db: &Db) -> Option<(u64, usize)> {
        if let Some(row) = self.merkle.groups.row(first) {
            return Some(row_sum(row, groups.iter()));
        }
        match self.span_row(first, db) {
            Some(row) => {
                let out = row_sum(&row, groups.iter());
                self.merkle.groups.insert(first, row);
                Some(out)
            }
            None => self.visit_span_sum(first, groups, db),
        }
    }

    /// Every group's sums of the span from `first`, by a visit of its keys; `None` if one of
    /// them is stale.
    fn span_row(&self, first: usize, db: &Db) -> Option<Box<Row>> {
        let mut row = Box::new([Cell::default(); lattice_placement::GROUPS as usize]);
        for leaf in first..(first + CHECK_SPAN).min(merkle::LEAVES) {
            let comparable = self.keys.visit_leaf(leaf, db, |k, e| {
                let digest = match e {
                    LeafEntry::Keyed(e) if e.digest_stale => return false,
                    LeafEntry::Keyed(e) => e.digest,
                    LeafEntry::Packed((_, digest)) => digest,
                };
                let c = &mut row[usize::from(group_of(k))];
                if digest == 0 {
                    c.zero = true;
                } else {
                    c.sum = c.sum.wrapping_add(digest);
                    c.keys += 1;
                }
                true
            });
            if !comparable {
                return None;
            }
        }
        Some(row)
    }

    /// [`Replicator::span_sum`] by a visit of the span's keys, for a span with a stale digest.
    fn visit_span_sum(&self, first: usize, groups: Groups, db: &Db) -> Option<(u64, usize)> {
        let (mut sum, mut n) = (0u64, 0);
        for leaf in first..(first + CHECK_SPAN).min(merkle::LEAVES) {
            let comparable = self.keys.visit_leaf(leaf, db, |k, e| {
                if !groups.contains(group_of(k)) {
                    return true;
                }
                let digest = match e {
                    LeafEntry::Keyed(e) if e.digest_stale => return false,
                    LeafEntry::Keyed(e) => e.digest,
                    LeafEntry::Packed((_, digest)) => digest,
                };
                sum = sum.wrapping_add(digest);
                n += 1;
                true
            });
            if !comparable {
                return None;
            }
        }
        Some((sum, n))
    }

    /// Every built row of group sums (or those of the spans of the keys hashed `hashes`)
    /// equals a visit of its span's keys.
    pub(super) fn check_group_sums(&self, db: &Db, hashes: Option<&[u64]>) {
        let spans: Option<std::collections::BTreeSet<usize>> = hashes.map(|hs| {
            hs.iter()
                .map(|&h| merkle::leaf_of(h) / CHECK_SPAN * CHECK_SPAN)
                .collect()
        });
        for (first, row) in self.merkle.groups.built() {
            if spans.as_ref().is_some_and(|s| !s.contains(&first)) {
                continue;
            }
            let fresh = self
                .span_row(first, db)
                .expect("a span with a stale digest has no row");
            assert!(
                row_agrees(row, &fresh),
                "the group sums of the span at leaf {first} differ from its keys"
            );
        }
    }

    /// Whether `leaf` holds a key of `groups` that is not evicted (a state a stream of
    /// `groups` sends), found without materializing the leaf.
    fn leaf_sends(&self, leaf: usize, groups: Groups, db: &Db) -> bool {
        !self.keys.visit_leaf(leaf, db, |k, e| {
            let evicted = matches!(e, LeafEntry::Keyed(e) if e.evicted);
            evicted || !groups.contains(group_of(k))
        })
    }

    /// From the timer: the next slice of every stream, and streams whose oldest slice went
    /// unacknowledged too long start over, from the walk's position before the oldest slice
    /// of the walk unacknowledged, with the leaves of unacknowledged fills wanted again.
    pub(super) fn tick_moves(&mut self, now_ms: u64, db: &Db) {
        let peers: Vec<NodeId> = self.moves_out.keys().copied().collect();
        for peer in peers {
            let m = self.moves_out.get_mut(&peer).expect("listed");
            if m.inflight
                .front()
                .is_some_and(|s| s.at_ms + m.timeout_ms <= now_ms)
            {
                m.timeout_ms = (m.timeout_ms * 2).min(MOVE_TIMEOUT_MAX_MS);
                self.next_stream += 1;
                m.stream = self.next_stream;
                if let Some((leaf, resume)) = m.inflight.iter().find_map(|s| s.walk) {
                    m.leaf = leaf;
                    m.resume = resume;
                }
                let mut again: Vec<u32> = m.inflight.iter().flat_map(|s| s.fill.clone()).collect();
                again.extend(m.want.drain(..));
                let mut seen = std::collections::BTreeSet::new();
                again.retain(|&l| seen.insert(l));
                m.want = again.into();
                m.fill_at = (0, 0);
                m.inflight.clear();
                m.checking = 0;
                m.next_slice = 0;
                m.last_sent = false;
                self.move_stats.streams_restarted += 1;
            }
            self.pump_move(peer, now_ms, db);
        }
    }

    /// Whether a stream has a slice ready to go (the node's next timer).
    pub(super) fn move_ready(&self) -> bool {
        self.moves_out.values().any(|m| {
            !m.last_sent
                && m.inflight.len() < SLICE_WINDOW
                && (!m.want.is_empty() || m.leaf < merkle::LEAVES || m.checking == 0)
        })
    }

    /// When the first stream whose oldest slice is unacknowledged starts over.
    pub(super) fn move_deadline_ms(&self) -> Option<u64> {
        self.moves_out
            .values()
            .filter_map(|m| m.inflight.front().map(|s| s.at_ms + m.timeout_ms))
            .min()
    }

    /// The general form of each of the slice's short states (§89), expanded with the
    /// frontier it carries; None if the frontier or a state does not read.
    fn expand_short_entries(&mut self, s: &MoveSlice) -> Option<Vec<KeyBlob>> {
        let frontier: VersionVector = super::state::codec().deserialize(&s.frontier).ok()?;
        let wire = self.compact_wire.get_mut();
        let mut out = Vec::with_capacity(s.short_entries.len());
        for b in &s.short_entries {
            expand_move_short(&b.state, wire, &frontier, &mut self.scratch)?;
            out.push(KeyBlob {
                key: b.key.clone(),
                state: Bytes::copy_from_slice(&self.scratch),
            });
        }
        Some(out)
    }

    pub(super) fn on_move_slice(
        &mut self,
        peer: NodeId,
        s: MoveSlice,
        size: usize,
        db: &mut Db,
        effects: &mut Vec<Effect>,
    ) {
        // A slice of a group this replica does not know it keeps (the sender learnt of a
        // membership change first) is not merged (its keys would be dropped as not ours) nor
        // acknowledged: the sender starts the stream over after its timeout, by when the
        // gossip that travels with it has arrived.
        let groups = Groups::from_bytes(&s.groups);
        let me = self.node.0;
        let keeps = |g: u16| {
            let slot = g * lattice_placement::SLOTS_PER_GROUP;
            self.ownership
                .as_ref()
                .is_some_and(|p| p.is_owner(me, slot))
                || self.extra_keepers.get(&g).is_some_and(|v| v.contains(&me))
        };
        if !groups.iter().all(keeps) {
            self.move_stats.slices_refused += 1;
            return;
        }
        let inn = self.moves_in.entry(peer).or_default();
        if s.stream != inn.stream {
            if s.slice != 1 {
                return; // the rest of a stream whose start we missed: it starts over
            }
            inn.stream = s.stream;
            inn.next = 1;
        }
        if s.slice != inn.next {
            return; // a gap: acknowledging would let the sender count a lost slice as held
        }
        // States sent short are expanded, into the general form the sender's would have
        // been, once the slice is known to be the next one (one out of order is dropped
        // unread); a slice whose short states do not read is refused like one of groups not
        // kept (never acknowledged unmerged), and the stream does not advance past it.
        let mut s = s;
        if !s.short_entries.is_empty() {
            let Some(expanded) = self.expand_short_entries(&s) else {
                self.move_stats.slices_refused += 1;
                return;
            };
            s.entries.extend(expanded);
        }
        self.moves_in.entry(peer).or_default().next += 1;
        self.move_stats.bytes_received += size as u64;
        self.move_stats.keys_received += s.entries.len() as u64;
        let (changed, _) = self.merge_blobs(&s.entries, false, db);
        self.stats.max_states_merged = self.stats.max_states_merged.max(s.entries.len() as u64);
        effects.push(Effect::Keys(changed));
        // Checked spans whose keys differ here (or cannot be compared) are asked for.
        let check_groups = Groups::from_bytes(&s.check_groups);
        let mut want = Vec::new();
        let mut leaf = 0usize;
        for (&d, &digest) in s.check_leaves.iter().zip(&s.check_digests) {
            leaf += d as usize;
            if leaf >= merkle::LEAVES {
                break; // not a leaf: a sender of another build; the rest is not comparable
            }
            if self.span_sum(leaf, check_groups, db).map(|(sum, _)| sum) != Some(digest) {
                want.push(leaf as u32);
            }
        }
        self.send_ae(
            peer,
            Body::MoveAck(MoveAck {
                stream: s.stream,
                slice: s.slice,
                want,
            }),
        );
        if s.last {
            effects.push(Effect::MoveIn(groups));
        }
    }

    pub(super) fn on_move_ack(&mut self, peer: NodeId, a: MoveAck, now_ms: u64, db: &Db) {
        let Some(m) = self.moves_out.get_mut(&peer) else {
            return;
        };
        if m.stream != a.stream {
            return;
        }
        let Some(at) = m.inflight.iter().position(|s| s.slice == a.slice) else {
            return;
        };
        let sent = m.inflight.remove(at).expect("found");
        m.timeout_ms = SLICE_TIMEOUT_MS;
        if sent.checks {
            m.checking -= 1;
            // At most the checks of one slice per answer, and checks go out only while the
            // window has room: bounded by `SLICE_WINDOW` slices' checks.
            self.move_stats.leaves_wanted += a.want.len() as u64;
            m.want.extend(
                a.want
                    .iter()
                    .copied()
                    .filter(|&l| (l as usize) < merkle::LEAVES)
                    .take(MOVE_CHECKS_PER_SLICE),
            );
        }
        if m.last_sent && m.inflight.is_empty() {
            let m = self.moves_out.remove(&peer).expect("present");
            self.move_stats.streams_done += 1;
            self.moved.push((peer, m.groups));
            if !m.then.is_empty() {
                self.open_move(peer, m.then, now_ms, db);
            }
            return;
        }
        self.pump_move(peer, now_ms, db);
    }

    /// Streams completed (every slice acknowledged) since the last call.
    pub fn take_moved(&mut self) -> Vec<(NodeId, Groups)> {
        std::mem::take(&mut self.moved)
    }

    /// Which groups this replica keeps besides its owned ones (`extra`: per group, the
    /// members draining it, perhaps this one), which owned groups it does not hold yet
    /// (`incoming`: merged against no GC frontier, and GC waits until they arrived), every
    /// member record's rank (`ranks`) and, per peer, the groups it owns without holding them
    /// yet (`gaining`): deltas of those carry the ranks (see `wire::Deltas`).
    pub fn set_keepers(
        &mut self,
        extra: std::collections::BTreeMap<u16, Vec<u32>>,
        incoming: Groups,
        members: std::collections::BTreeSet<u32>,
        ranks: std::collections::BTreeMap<u32, u64>,
        gaining: std::collections::BTreeMap<u32, Groups>,
    ) {
        self.member_ranks = ranks;
        self.gaining = gaining;
        self.extra_keepers = extra;
        self.incoming = incoming;
        self.gained = self.gained.union(&incoming);
        self.cluster_size = members.len().max(1);
        self.members = Some(members);
    }

    /// Starts removing the keys of `groups` (this replica stopped keeping them: the node
    /// changed the keepers first). Swept a step at a time by [`Replicator::sweep_drops`].
    pub fn drop_groups(&mut self, groups: Groups) {
        self.dropping = self.dropping.union(&groups);
        self.drop_leaf = 0;
    }

    pub fn dropping(&self) -> bool {
        !self.dropping.is_empty()
    }

    /// One step of the drop sweep: forgets the states of the dropped groups' keys this
    /// replica no longer keeps and returns them (the node removes them from the store).
    pub fn sweep_drops(&mut self, db: &mut Db) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut leaves = 0;
        while self.drop_leaf < merkle::LEAVES
            && leaves < DROP_LEAVES_PER_STEP
            && out.len() < DROP_KEYS_PER_STEP
        {
            let dropping = self.dropping;
            let none_dropped = self
                .keys
                .visit_leaf(self.drop_leaf, db, |k, _| !dropping.contains(group_of(k)));
            if none_dropped {
                // Most leaves hold no key of the dropped groups: passed over unbuilt.
                self.drop_leaf += 1;
                leaves += 1;
                continue;
            }
            let keys: Vec<Bytes> = self
                .keys
                .leaf_entries(self.drop_leaf, db)
                .into_iter()
                .map(|(k, _)| k)
                .filter(|k| {
                    let g = lattice_placement::Placement::group_of(lattice_placement::key_slot(k));
                    // A hot key's copy stays: reads are served from it until it is given
                    // back, which removes it (`forget_copy`).
                    self.dropping.contains(g) && !self.owns(k) && !self.hot.holds(k)
                })
                .collect();
            for k in keys {
                let h = lattice_store::key_hash(&k);
                if let Some(e) = self.keys.remove(h, &k, db) {
                    self.merkle.update(merkle::leaf_of(h), &k, e.digest, 0);
                }
                out.push(k);
            }
            self.drop_leaf += 1;
            leaves += 1;
        }
        if self.drop_leaf >= merkle::LEAVES {
            self.dropping = Groups::default();
            self.drop_leaf = 0;
        }
        self.move_stats.keys_dropped += out.len() as u64;
        out
    }

    /// Whether `key`'s group is one this replica gained by a move (receiving it now, or since
    /// this process started): its states are merged against no frontier (see `merge_blobs`).
    pub(super) fn gained_key(&self, key: &[u8]) -> bool {
        !self.gained.is_empty()
            && self.gained.contains(lattice_placement::Placement::group_of(
                lattice_placement::key_slot(key),
            ))
    }

    /// Whether peer `id` owns the group of `key` without holding it yet, by its record.
    pub(super) fn gaining_key(&self, id: u32, key: &[u8]) -> bool {
        !self.gaining.is_empty()
            && self.gaining.get(&id).is_some_and(|g| {
                g.contains(lattice_placement::Placement::group_of(
                    lattice_placement::key_slot(key),
                ))
            })
    }

    /// Whether a peer that sent these member ranks knew a record this replica does not (a
    /// member unknown here, or one at a higher rank than ours).
    pub(super) fn behind(&self, ids: &[u32], ranks: &[u64]) -> bool {
        ids.iter()
            .zip(ranks)
            .any(|(id, &r)| self.member_ranks.get(id).is_none_or(|&ours| ours < r))
    }

    /// Whether `id` keeps the group of `key` besides its owners (draining it).
    pub(super) fn extra_keeper(&self, id: u32, key: &[u8]) -> bool {
        !self.extra_keepers.is_empty()
            && self
                .extra_keepers
                .get(&lattice_placement::Placement::group_of(
                    lattice_placement::key_slot(key),
                ))
                .is_some_and(|v| v.contains(&id))
    }
}

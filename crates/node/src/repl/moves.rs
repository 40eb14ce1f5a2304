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
//! merges idempotently).

use std::collections::VecDeque;

use bytes::Bytes;
use lattice_crdt::NodeId;
use lattice_store::Db;

use super::wire::{Body, MoveAck, MoveSlice};
use super::{merkle, Effect, Replicator, SLICE_TIMEOUT_MS, SLICE_WINDOW};
use crate::cluster::Groups;

/// Merkle leaves the drop sweep visits per step at most (a leaf is a lookup even when empty).
const DROP_LEAVES_PER_STEP: usize = 4_096;
/// Keys the drop sweep removes per step at most: about a millisecond of work.
const DROP_KEYS_PER_STEP: usize = 4_096;
/// Leaves one slice build visits at most (sparse keyspaces: most leaves are empty).
const MOVE_LEAVES_PER_SLICE: usize = 8_192;

/// A stream of slot groups to one peer.
pub(super) struct MoveOut {
    stream: u64,
    groups: Groups,
    /// The next Merkle leaf to list, and the keys of it already sent.
    leaf: usize,
    resume: usize,
    /// (slice, sent at, the leaf and key it started from) not yet acknowledged.
    inflight: VecDeque<(u64, u64, usize, usize)>,
    next_slice: u64,
    last_sent: bool,
    /// Groups asked for while this stream ran: streamed next (restarting this stream with
    /// them would send its head again, and under steady changes might never end).
    then: Groups,
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
        self.moves_out.insert(
            peer,
            MoveOut {
                stream: self.next_stream,
                groups,
                leaf: 0,
                resume: 0,
                inflight: VecDeque::new(),
                next_slice: 0,
                last_sent: false,
                then: Groups::default(),
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

    /// The next slice of the stream to `peer`, if its window has room.
    pub(super) fn pump_move(&mut self, peer: NodeId, now_ms: u64, db: &Db) {
        let up = self.peers.get(&peer).is_some_and(|p| p.up);
        let Some(m) = self.moves_out.get_mut(&peer) else {
            return;
        };
        if !up || m.last_sent || m.inflight.len() >= SLICE_WINDOW {
            return;
        }
        let (start_leaf, start_resume, groups) = (m.leaf, m.resume, m.groups);
        let keep = |_: &Replicator, k: &Bytes| {
            groups.contains(lattice_placement::Placement::group_of(
                lattice_placement::key_slot(k),
            ))
        };
        let (entries, bytes, leaf, resume) = self.walk_slice(
            start_leaf,
            start_resume,
            self.slice_keys,
            MOVE_LEAVES_PER_SLICE,
            keep,
            db,
        );
        let m = self.moves_out.get_mut(&peer).expect("present");
        m.leaf = leaf;
        m.resume = resume;
        m.next_slice += 1;
        m.last_sent = leaf >= merkle::LEAVES;
        m.inflight
            .push_back((m.next_slice, now_ms, start_leaf, start_resume));
        let msg = MoveSlice {
            stream: m.stream,
            slice: m.next_slice,
            groups: groups.to_bytes(),
            last: m.last_sent,
            entries,
        };
        self.move_stats.slices_sent += 1;
        self.move_stats.keys_sent += msg.entries.len() as u64;
        self.stats.max_slice_keys = self.stats.max_slice_keys.max(msg.entries.len() as u64);
        self.stats.max_slice_bytes = self.stats.max_slice_bytes.max(bytes as u64);
        let data = self.envelope(Body::MoveSlice(msg));
        self.move_stats.bytes_sent += data.len() as u64;
        self.send_ae_data(peer, data);
    }

    /// From the timer: the next slice of every stream, and streams whose oldest slice went
    /// unacknowledged too long start over.
    pub(super) fn tick_moves(&mut self, now_ms: u64, db: &Db) {
        let peers: Vec<NodeId> = self.moves_out.keys().copied().collect();
        for peer in peers {
            let m = self.moves_out.get_mut(&peer).expect("listed");
            if let Some(&(_, _, leaf, resume)) = m
                .inflight
                .front()
                .filter(|&&(_, sent, _, _)| sent + SLICE_TIMEOUT_MS <= now_ms)
            {
                self.next_stream += 1;
                m.stream = self.next_stream;
                m.leaf = leaf;
                m.resume = resume;
                m.inflight.clear();
                m.next_slice = 0;
                m.last_sent = false;
                self.move_stats.streams_restarted += 1;
            }
            self.pump_move(peer, now_ms, db);
        }
    }

    /// Whether a stream has a slice ready to go (the node's next timer).
    pub(super) fn move_ready(&self) -> bool {
        self.moves_out
            .values()
            .any(|m| !m.last_sent && m.inflight.len() < SLICE_WINDOW)
    }

    /// The oldest unacknowledged slice's send time.
    pub(super) fn move_oldest_ms(&self) -> Option<u64> {
        self.moves_out
            .values()
            .filter_map(|m| m.inflight.front().map(|&(_, t, _, _)| t))
            .min()
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
        inn.next += 1;
        self.move_stats.bytes_received += size as u64;
        self.move_stats.keys_received += s.entries.len() as u64;
        let (changed, _) = self.merge_blobs(&s.entries, false, db);
        self.stats.max_states_merged = self.stats.max_states_merged.max(s.entries.len() as u64);
        effects.push(Effect::Keys(changed));
        self.send_ae(
            peer,
            Body::MoveAck(MoveAck {
                stream: s.stream,
                slice: s.slice,
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
        m.inflight.retain(|&(n, _, _, _)| n != a.slice);
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
                    self.merkle.update(merkle::leaf_of(h), e.digest, 0);
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

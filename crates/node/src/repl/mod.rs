//! Coordination-free replication: every node accepts every write, keeps a CRDT state per key
//! ([`state::KeyState`]), ships deltas of local writes to every peer, and repairs whatever
//! deltas were lost with Merkle anti-entropy ([`merkle`]).
//!
//! Pure like the rest of the node: messages go out through [`Replicator::poll_send`] (the node
//! turns them into `Output::PeerSend`), come in through [`Replicator::on_message`], and time
//! only moves when the driver says so.
//!
//! Delivery, per peer link:
//! - Local writes are captured after each command and queued, coalesced per key (a second
//!   write to a queued key merges into the queued delta). A write that leaves a string is not
//!   captured at once but deferred to the next flush (`defer`): a key written again and again
//!   (a counter, a hot string) then costs one capture per flush window instead of one per
//!   command. Why this is exact for strings, and not for collections, is in
//!   docs/ARCHITECTURE.md §17. The queue is bounded
//!   (`MAX_QUEUED_KEYS`); on overflow it is dropped and every peer is marked for anti-entropy,
//!   which ships whatever it lacks: nothing is silently lost.
//! - The queue is flushed `FLUSH_DELAY_MS` after its oldest delta was captured (or at once when
//!   it holds `FLUSH_EAGER_KEYS`): encoded once, sent to every live peer in a `Deltas` message
//!   numbered by a per-link sequence.
//! - Unacknowledged messages are resent with exponential backoff (`RTO_*`); after
//!   `MAX_RETRIES`, or when the unacknowledged bytes exceed `MAX_UNACKED_BYTES`, they are
//!   dropped and the peer is marked for anti-entropy.
//! - Deltas are joins, so loss, duplication and reordering are all harmless for convergence.
//!
//! Anti-entropy runs every `AE_INTERVAL_MS` with every live peer, and at once after a link comes
//! up or a queue overflowed: Merkle digests compared top-down, then the states of the keys in
//! differing leaves, in both directions.
//!
//! Garbage collection: each node tracks the dots it has merged (`seen`); acks carry it. Once
//! every replica has reported, the pointwise minimum is a frontier everybody has merged; it is
//! applied one round later, when the next minimum dominates the previous maximum (so writes
//! that were in flight when the frontier was measured have arrived everywhere). Applying it
//! folds contexts into a vector, purges list tombstones and forgets deleted keys.

pub(crate) mod apply;
pub mod dirty;
pub(crate) mod group_sums;
pub mod hint;
mod hold;
pub mod hot;
mod keymap;
pub mod merkle;
mod moves;
pub use moves::MoveStats;
mod outbox;
pub mod state;
pub mod wire;

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};

use bincode::Options as _;
use bytes::Bytes;
use lattice_crdt::{CausalContext, Crdt, Hlc, HlcClock, NodeId, VersionVector};
use lattice_store::{Db, Value};

use hashbrown::HashTable;

use self::hint::ChangeHint;
use self::merkle::{Merkle, DEPTH, FANOUT};
use self::state::{
    AssignStamp, Assignment, CompactWire, Delta, Full, Intent, KeyState, Patch, Stamper,
};
use self::wire::{
    Ack, Body, DeltaBatch, Deltas, Digests, Envelope, Functions, KeyBlob, Publish, SliceAck,
};

/// Keys queued before the queue is dropped in favour of anti-entropy.
const MAX_QUEUED_KEYS: usize = 100_000;
/// Bytes of states in one outgoing `Deltas` message. A receiver merges a message in one step
/// (and then refreshes its store for every key of it), holding the node for that long: at 1 MiB
/// (about 6,600 SETs of 64-byte values) a replica under a bulk load stopped answering for
/// 100-200 ms at a time on a shared machine. 64 KiB, an anti-entropy slice's size, is about
/// 400 such keys, so the per-message costs (envelope, acknowledgement, retransmission entry,
/// frame) stay small beside the merging.
const MAX_BATCH_BYTES: usize = SLICE_BYTES;
/// How long a captured delta may wait for company before it is sent: many pipelines' writes
/// share one message (and one ack) per peer, and a key written repeatedly ships once. Bounds
/// the replication lag this adds.
const FLUSH_DELAY_MS: u64 = 2;
/// Queued keys that trigger a flush without waiting.
const FLUSH_EAGER_KEYS: usize = 4_096;
/// Unacknowledged bytes kept for retransmission per peer.
const MAX_UNACKED_BYTES: usize = 32 << 20;
const RTO_INITIAL_MS: u64 = 200;
const RTO_MAX_MS: u64 = 5_000;
/// Bytes of a kept backlog resent at once when a peer's link comes back (`peer_up`): a megabyte
/// goes in one round trip without one burst filling the link's queue; the rest follows as the
/// tick's probes do.
const RESEND_BURST_BYTES: usize = 1 << 20;
/// Whether deltas are kept for a peer whose link is down and resent when it is back (ARCHITECTURE
/// §77, item 1). It was off for a session: with it on, a replica that missed 20 writes received
/// 27% of a full transfer instead of under 1%. The cause was the first cut's backlog: larger
/// than one resend burst, its tail went one message per round trip and was still unacknowledged
/// when the tree comparison had already repaired the peer, so the next heal resent it. Now a
/// backlog larger than a burst is dropped at the heal (the comparison ships those keys anyway),
/// and equal trees drop what is kept (`peer_up`, `on_digests`; ARCHITECTURE §82).
const KEEP_BACKLOG_WHILE_DOWN: bool = true;
const MAX_RETRIES: u32 = 6;
/// Period of anti-entropy with each live peer.
pub const AE_INTERVAL_MS: u64 = 1_000;
/// Partitioned: a push of the shared keys runs at least every this many anti-entropy periods
/// (the lower id of a pair starts it), until a tree per shared slot group makes periodic
/// comparison cheap again (ARCHITECTURE §44, §58). A minute: every push costs each receiver a
/// merge of every key it shares with the sender, and at 1,000,000 keys a push every 10 s kept
/// five nodes merging without a break (1,400 requests/s instead of 24,000). Pushes are
/// acknowledged transfers, and a lost slice starts another push, so the periodic one only
/// backs up what acknowledgements cannot see.
const PUSH_EVERY_ROUNDS: u32 = 60;
/// Delay before the next anti-entropy round when the last one was cut short by a bound.
const AE_FOLLOW_UP_MS: u64 = 10;
/// The `Ack` sequence number of a report that acknowledges no message.
const REPORT_ONLY_SEQ: u64 = u64::MAX;
/// Period of GC rounds. A round only compares the seen-sets already reported (a frontier is
/// applied once every replica's seen-set covers an earlier round's maximum, whatever the
/// period), so a short period costs little and lets the frontier follow writes closely: fewer
/// keys stay in the general form between rounds (ARCHITECTURE §85, from one second).
const GC_INTERVAL_MS: u64 = 100;
/// GC rounds remembered for `Replicator::gc_round`: a frontier is applied when the replicas'
/// reports trail the writer by at most this many rounds (5 s at `GC_INTERVAL_MS`).
const GC_HISTORY_ROUNDS: usize = 50;
/// Period of the report of our seen-set every live peer receives even when no deltas flow: GC
/// needs fresh reports, and a report is what tells a peer the link works again after a cut
/// (it then resends what timed out at once, see `on_message`). Four small messages a second.
const REPORT_INTERVAL_MS: u64 = 250;
/// A live peer reports at least every `REPORT_INTERVAL_MS`; hearing from it after this long
/// means it was unreachable, so it is caught up at once (see `on_message`).
const PEER_SILENCE_MS: u64 = 1_500;
/// Keys one GC step visits at most (see `Replicator::gc_sweep`): about a millisecond of work.
const GC_KEYS_PER_STEP: usize = 4_096;
/// Differing tree nodes handled per anti-entropy message; the rest are found by the next round.
const MAX_AE_NODES: usize = 4_096;
/// Bytes of key states in one anti-entropy slice. A leaf found different is not shipped in one
/// message but owed to the peer and sent a slice at a time: one slice is what one node call
/// builds on the sender and merges on the receiver (a few milliseconds), and what the server
/// hands the node per lock hold, so a transfer of a million keys runs between client batches.
pub const SLICE_BYTES: usize = 64 << 10;
/// Keys in one slice at most: with small states the per-key merge cost is what bounds a step.
pub const SLICE_KEYS: usize = crate::config::REPL_SLICE_KEYS;
/// Slices sent to one peer and not yet acknowledged, at most: the back-pressure of a transfer.
/// The next slice goes when the peer says it merged one, so a slow or busy receiver slows the
/// sender down instead of filling the link's queue (and, past its bound, losing the link).
pub(crate) const SLICE_WINDOW: usize = 4;
/// An unacknowledged slice is taken as lost after this long (its leaves still differ, and the
/// next round finds them): a lost acknowledgement must not stop the transfer for good.
pub(crate) const SLICE_TIMEOUT_MS: u64 = 2_000;
/// A peer is repairing a difference with us (see `Peer::repairing_until_ms`) until this long
/// after the last digests or states it sent that showed one.
const AE_REPAIRING_MS: u64 = 500;
/// While another peer repairs a difference with us, a round with this one waits (declined
/// or not started) for at most this long: the other peer's repair will most likely have made
/// the two agree, and the round then costs one digest. Bounded so that a peer that is always
/// busy (a long transfer, a flapping link) cannot starve the others' rounds.
const AE_DEFER_MAX_MS: u64 = 3_000;
/// How soon a deferred round is tried again.
const AE_DEFER_RETRY_MS: u64 = 100;
/// Keys remembered per peer as already equal on both sides, left out of what we owe it;
/// beyond it they are sent anyway (harmless: a merge of an equal state changes nothing).
const MAX_SKIP_KEYS: usize = 65_536;

/// Keys whose lookups are issued back to back before any of them is worked on, when a message
/// carries many: enough independent cache misses to overlap, few enough to stay in cache.
pub const PREFETCH_GROUP: usize = 16;

/// What a peer message changed, for the node to apply to the store.
pub enum Effect {
    /// These keys' states changed: re-read them into the store.
    Keys(Vec<Bytes>),
    /// A remote PUBLISH to deliver to local subscribers.
    Publish(Bytes, Bytes),
    /// The members a peer knows (partitioned clusters).
    Members(wire::Members),
    /// Commands a peer forwards to this owner, and owners' replies to commands this node
    /// forwarded.
    Forwards(wire::Forwards),
    /// A peer's whole function library set, to merge; then answer with
    /// [`Replicator::functions_received`].
    Functions {
        peer: NodeId,
        digest: u64,
        entries: Bytes,
    },
    /// A remote SPUBLISH to deliver to local shard channel subscribers.
    ShardPublish(Bytes, Bytes),
    /// A move stream's last slice arrived: this replica holds these groups now.
    MoveIn(crate::cluster::Groups),
    /// A gaining owner asks for these groups.
    MoveAsk(crate::cluster::Groups),
    /// The peer knows member records this replica does not (a `Deltas` message was held back
    /// for it): send it ours, and it answers with what we lack.
    MembersBehind,
}

struct Unacked {
    data: Bytes,
    /// When it was last transmitted.
    sent_ms: u64,
    due_ms: u64,
    rto_ms: u64,
    tries: u32,
}

/// Resends, oldest first, `p`'s unacknowledged messages up to `RESEND_BURST_BYTES`; the first
/// one beyond the budget is made due at once, so the tick probes with it.
fn resend_burst(p: &mut Peer, outbox: &mut outbox::Outbox, peer: NodeId, now_ms: u64) {
    let mut budget = RESEND_BURST_BYTES;
    for m in p.unacked.values_mut() {
        if budget < m.data.len() {
            m.due_ms = now_ms;
            break;
        }
        budget -= m.data.len();
        // Marked as retransmitted, but not counted toward `MAX_RETRIES`: only the tick's
        // backed-off probes are, or a message a peer holds back (a move it has not heard of
        // yet) would be given up on after a few link flaps, taking the whole queue with it.
        m.tries = m.tries.max(1);
        m.sent_ms = now_ms;
        m.rto_ms = RTO_INITIAL_MS;
        m.due_ms = now_ms + RTO_INITIAL_MS;
        p.retransmits += 1;
        outbox.push(peer, m.data.clone());
    }
}

#[derive(Default)]
struct Peer {
    up: bool,
    next_seq: u64,
    unacked: BTreeMap<u64, Unacked>,
    unacked_bytes: usize,
    /// The peer's reported seen-set frontier.
    seen: Option<VersionVector>,
    needs_ae: bool,
    next_ae_ms: u64,
    last_ae_ms: Option<u64>,
    last_heard_ms: Option<u64>,
    /// Bytes sent to this peer, by purpose (metrics; the anti-entropy figure is what the
    /// "repair traffic grows with the difference" claim is measured with).
    delta_bytes: u64,
    ae_bytes: u64,
    overflows: u64,
    retransmits: u64,
    /// Every byte sent to / received from this peer (all message kinds): what a catch-up costs.
    bytes_sent: u64,
    bytes_received: u64,
    /// The anti-entropy transfer to this peer (see [`Replicator::pump_transfer`]).
    transfer: Transfer,
    /// Partitioned: anti-entropy periods since the last push to this peer.
    rounds_since_push: u32,
    /// Until when this peer counts as repairing a difference with us: it sent digests that
    /// differ from ours or states (see `Replicator::defer_round`).
    repairing_until_ms: u64,
    /// Since when a round with this peer has been waiting for another peer's repair.
    deferred_since_ms: Option<u64>,
    /// The last round with this peer stopped at `MAX_AE_NODES` differences: the next one
    /// continues a repair under way, so it starts as soon as the transfer it started ends,
    /// from either side, and is never deferred (see `Replicator::hurry_ae`).
    follow_up: bool,
    /// The link is down and its backlog outgrew `MAX_UNACKED_BYTES`: no more deltas are kept
    /// for it until it is up again (anti-entropy repairs the rest then).
    backlog_dropped: bool,
}

/// What anti-entropy still has to send one peer. Bounded: leaves are listed once (at most
/// `merkle::LEAVES`), the skip list by `MAX_SKIP_KEYS`, slices in flight by `SLICE_WINDOW`.
#[derive(Default)]
struct Transfer {
    /// Leaves whose states we owe the peer, sent in leaf order.
    owed: std::collections::BTreeSet<u32>,
    /// Keys of the first owed leaf already sent (a leaf larger than a slice).
    resume: usize,
    /// Leaves whose states we ask the peer for, with our next slice (the pull half).
    want: std::collections::BTreeSet<u32>,
    /// Keys the peer holds exactly as we do (learnt from the states it sent): not sent back.
    skip: std::collections::BTreeSet<Bytes>,
    /// Slices sent and not acknowledged: (slice number, when sent).
    inflight: VecDeque<(u64, u64)>,
    next_slice: u64,
    slices_sent: u64,
    timeouts: u64,
}

impl Transfer {
    fn busy(&self) -> bool {
        !self.owed.is_empty() || !self.want.is_empty() || !self.inflight.is_empty()
    }

    /// Another slice may go now: something is owed or asked for and the window has room.
    fn ready(&self) -> bool {
        self.inflight.len() < SLICE_WINDOW && (!self.owed.is_empty() || !self.want.is_empty())
    }
}

#[derive(Clone)]
struct KeyEntry {
    state: KeyState,
    digest: u64,
    /// Listed in `gc_queue` or `gc_sweep` (so a key written many times between GC rounds is
    /// listed once).
    gc_queued: bool,
    /// `digest` (and the Merkle tree) predate the last change: the state is a large
    /// collection, digested when the tree is next read (listed in `stale_digests`).
    digest_stale: bool,
    /// The `Replicator::messages_merged` number of the last message merged into this state.
    merged_in: u32,
    /// Evicted here (ARCHITECTURE §79): the state is dropped and `digest` is the evicted
    /// state's, so anti-entropy sees this replica as still holding it; the key reads as
    /// missing. Never shipped, logged or collected.
    evicted: bool,
    /// Written here after it was evicted, and no peer's whole state merged since: the state is
    /// a fragment that lacks what the evicted one held (its contexts claim only its own dots).
    /// GC must not raise its contexts to the frontier, which would claim the evicted dots as
    /// removed; the next anti-entropy state of the key from a peer completes it.
    partial: bool,
}

/// A key whose state is a compact string with its value in the store, and that waits for no
/// GC visit or lazy digest, is kept as its stamp and digest alone (see `keymap`).
impl keymap::Pack for KeyEntry {
    type Packed = (state::Packed, u64);

    fn pack(&self) -> Option<Self::Packed> {
        if self.gc_queued || self.digest_stale || self.evicted || self.partial {
            return None;
        }
        self.state.packed().map(|p| (p, self.digest))
    }

    fn unpack((p, digest): Self::Packed) -> KeyEntry {
        KeyEntry {
            state: KeyState::unpacked(p),
            digest,
            gc_queued: false,
            digest_stale: false,
            merged_in: 0,
            evicted: false,
            partial: false,
        }
    }
}

/// The store's string under `key`, the value of a state that does not hold its own
/// ([`KeyState::value_in_store`]).
fn stored_str(db: &Db, h: u64, key: &[u8]) -> Option<Vec<u8>> {
    match &db.get_raw_hashed(h, key)?.value {
        Value::Str(s) => Some(s.as_bytes().into_owned()),
        _ => None,
    }
}

/// The store's string for `state` of `key` when the state needs it (else None, unread).
fn stored_for(db: &Db, h: u64, key: &[u8], state: &KeyState) -> Option<Vec<u8>> {
    if state.value_in_store() {
        stored_str(db, h, key)
    } else {
        None
    }
}

impl KeyEntry {
    fn fresh() -> KeyEntry {
        KeyEntry {
            state: KeyState::default(),
            digest: 0,
            gc_queued: false,
            digest_stale: false,
            merged_in: 0,
            evicted: false,
            partial: false,
        }
    }
}

/// Counters for INFO.
#[derive(Default, Clone, Copy)]
pub struct ReplStats {
    pub deltas_applied: u64,
    pub states_applied: u64,
    pub bad_messages: u64,
    pub ae_rounds: u64,
    pub gc_rounds: u64,
    pub keys_collected: u64,
    pub skew_exceeded: u64,
    /// The largest anti-entropy slice sent (keys, bytes of states) and the most states merged
    /// from one message: a transfer is done in bounded steps when these stay at most
    /// `SLICE_KEYS` / about `SLICE_BYTES` (checked by the simulator and the node tests).
    pub max_slice_keys: u64,
    pub max_slice_bytes: u64,
    pub max_states_merged: u64,
    /// States merged from the data directory at start (a restarted replica's own).
    pub states_loaded: u64,
    /// Anti-entropy rounds declined or put off because another peer was repairing the same
    /// difference (see `Replicator::defer_round`).
    pub ae_rounds_deferred: u64,
    /// Times a peer's applied GC frontier raised ours (`Replicator::adopt_frontier`).
    pub frontiers_adopted: u64,
    /// Times the deltas kept for a peer were dropped instead of resent: a backlog larger than
    /// one burst when its link came back, or any backlog once its tree equalled ours.
    pub backlogs_made_redundant: u64,
}

pub struct Replicator {
    node: NodeId,
    /// The id this process's writes are stamped with (dots, clock ties): the node id plus its
    /// incarnation (`Config::incarnation`), so a replica restarted without its state never
    /// issues a dot its peers have already seen from it.
    dot_node: NodeId,
    cluster_size: usize,
    pub hlc: HlcClock,
    /// The encoded function library set of this node and its digest (`set_functions`).
    functions: Bytes,
    functions_digest: u64,
    counter: VersionVector,
    /// Every dot merged here (own writes included).
    seen: CausalContext,
    /// The frontier last applied by GC: the context of keys that have no state here.
    frontier: VersionVector,
    /// Recent GC rounds' (min, max) of the replicas' seen frontiers, oldest first, at most
    /// `GC_HISTORY_ROUNDS` (see `gc_round`).
    gc_history: VecDeque<(VersionVector, VersionVector)>,
    next_gc_ms: u64,
    next_report_ms: u64,
    /// States by (leaf, key): anti-entropy reads whole leaves.
    keys: keymap::KeyMap<KeyEntry>,
    merkle: Merkle,
    peers: BTreeMap<NodeId, Peer>,
    /// Partitioned cluster: which members own which slots. `None`: every replica holds every
    /// key (replication factor = member count, or the membership is not known yet). With it,
    /// a key's deltas and anti-entropy states go only to the other owners of its slot, and a
    /// state received for a key this node does not own is not kept (ARCHITECTURE, "A
    /// partitioned cluster").
    ownership: Option<lattice_placement::Placement>,
    /// Until this replica's tree has equalled every peer's once since it started, it applies
    /// no GC (see `Replicator::gc_round`); the peers it has equalled so far.
    catching_up: bool,
    synced_peers: std::collections::BTreeSet<NodeId>,
    /// Keys whose state may hold collectable metadata (written or merged since they were last
    /// found fully compact): what a GC round visits.
    /// A list with a flag per entry rather than a set: queueing costs a push, not a search.
    /// May name a key twice (collected, then written again) or a key gone since: both harmless.
    gc_queue: Vec<KeyId>,
    /// Keys still to visit with the applied frontier: a GC round hands its queue over here and
    /// [`Replicator::gc_step`] works through it `GC_KEYS_PER_STEP` keys per timer tick, between
    /// client batches. Visiting a whole round's queue at once (every key written in the last
    /// second or two, a million under a bulk load) held the node for 300-700 ms.
    gc_sweep: VecDeque<KeyId>,
    /// Deltas captured since the last flush, coalesced per key, for every live peer.
    /// In capture order, with an index by key for the coalescing.
    pending: PendingDeltas,
    /// When the oldest queued delta must go out.
    flush_due_ms: Option<u64>,
    /// Keys changed by the command being executed, captured when it finishes.
    pub dirty: dirty::DirtyKeys,
    /// Keys whose last change left a string and whose capture waits for the next flush (or for
    /// anything that reads replicated state: a peer message, a timer, a digest). All were
    /// written with `deferred_intent`; a command of the other intent settles them first.
    /// With each key, whether a command in the window wrote its value (not only its deadline):
    /// such a key is stamped anew even when its value ends up equal to the captured one.
    deferred: HashTable<(Bytes, bool)>,
    deferred_intent: Intent,
    /// Deferrals ended so far (a key captured or settled), so that a reader of `deferred` can
    /// tell when a key it found deferred may no longer be (see [`Replicator::deferrals_ended`]).
    deferrals_ended: u64,
    outbox: outbox::Outbox,
    pub stats: ReplStats,
    /// Reused serialization buffer for key digests (no allocation per digest).
    scratch: Vec<u8>,
    /// Keys whose digest waits for the next read of the Merkle tree (see
    /// `KeyEntry::digest_stale`): digesting a 100,000-element hash after each HSET cost the
    /// whole hash per write; now it costs it once per anti-entropy comparison.
    stale_digests: Vec<KeyId>,
    /// For the keys the last peer message changed: how to update their store values without
    /// rebuilding them (see [`KeyState::patch_for`]); None for a key that needs a rebuild.
    /// Valid until the next message.
    patches: BTreeMap<Bytes, Option<Patch>>,
    /// Messages whose states were merged so far (wrapping; see `KeyEntry::merged_in`).
    messages_merged: u32,
    /// Keys per anti-entropy slice at most (`SLICE_KEYS` or lower, see `with_slice_keys`).
    slice_keys: usize,
    /// Partitioned: extra replicas of hot keys, as their owner and as their holder.
    pub hot: hot::HotReplicas,
    /// The frontier a hot key's copy is merged against: none (see `merge_blobs`).
    no_frontier: VersionVector,
    /// The frontier's part of a compact state's encoding, built once per frontier (a cell:
    /// states are encoded from `&self` too, for persistence).
    compact_wire: RefCell<CompactWire>,
    /// Live membership (see `moves`): per group, members besides its owners that keep it.
    extra_keepers: BTreeMap<u16, Vec<u32>>,
    /// Owned groups not held yet.
    incoming: crate::cluster::Groups,
    /// Groups ever incoming here (only grows; 256 bits): merged against no frontier for good,
    /// since a state of one of their keys can still arrive after the group is held (a stream
    /// owed by an owner that learnt of the change late, a push).
    gained: crate::cluster::Groups,
    /// Every member record's rank (`Cluster::ranks`), to tell whether a peer's `Deltas` were
    /// sent under member records this replica has not heard of yet.
    member_ranks: BTreeMap<u32, u64>,
    /// Per peer: the groups it owns and does not hold yet by its record. A `Deltas` message
    /// carrying a key of one of them carries our ranks too (see `wire::Deltas`).
    gaining: BTreeMap<u32, crate::cluster::Groups>,
    /// The members GC waits for (None: `cluster_size` peers, a static cluster).
    members: Option<std::collections::BTreeSet<u32>>,
    moves_out: BTreeMap<NodeId, moves::MoveOut>,
    moves_in: BTreeMap<NodeId, moves::MoveIn>,
    next_stream: u64,
    /// Streams completed since the node last asked.
    moved: Vec<(NodeId, crate::cluster::Groups)>,
    dropping: crate::cluster::Groups,
    drop_leaf: usize,
    pub move_stats: moves::MoveStats,
    /// Keys evicted here whose state is still the evicted stub (see `KeyEntry::evicted`).
    evicted_stubs: usize,
    /// The deadline registers of evicted keys that had one (see
    /// [`KeyState::deadline_register`]): joined back when the key's state returns.
    evicted_deadlines: BTreeMap<Bytes, lattice_crdt::LwwRegister<Option<u64>>>,
    /// Deltas of evicted keys left unmerged (and unseen) for anti-entropy to bring whole.
    pub deltas_held_for_evicted: u64,
    /// The last message merged held a delta back for an evicted key: anti-entropy with its
    /// sender is due at once.
    held_back_evicted: bool,
    /// Partitioned eviction: the owners' proofs and the stubs' fetches (`hold`, §86).
    holds: hold::HoldProofs,
}

/// Whether member `id` keeps `key`: every replica does when the cluster is not partitioned;
/// else its slot's owners, and the members still draining its group (`extra`, see `moves`).
fn keeper(
    ownership: &Option<lattice_placement::Placement>,
    extra: &BTreeMap<u16, Vec<u32>>,
    id: u32,
    key: &[u8],
) -> bool {
    let Some(p) = ownership else {
        return true;
    };
    let slot = lattice_placement::key_slot(key);
    p.is_owner(id, slot)
        || (!extra.is_empty()
            && extra
                .get(&lattice_placement::Placement::group_of(slot))
                .is_some_and(|v| v.contains(&id)))
}

/// What [`Replicator::for_each_state_in_leaf`] gives for a key: its state encoded as
/// anti-entropy ships it, or the stub of a key evicted here (ARCHITECTURE §79): its digest and
/// its deadline register (bincode; empty when it had none).
pub enum Leafed<'a> {
    State(&'a [u8]),
    Stub { digest: u64, deadline: &'a [u8] },
}

/// A key listed for a GC visit: its [`lattice_store::key_hash`] and its bytes.
type KeyId = (u64, Bytes);

/// `stored` as for [`KeyState::expand`].
fn key_digest(key: &[u8], state: &KeyState, stored: Option<&[u8]>, scratch: &mut Vec<u8>) -> u64 {
    // Never 0 for a key with contents: 0 means absent.
    state.digest(key, stored, scratch).map_or(0, |d| d | 1)
}

/// Brings `entry`'s digest and the Merkle tree up to date after its state changed, or lists
/// it for [`Replicator::refresh_digests`] when its state is a large collection. Returns
/// whether the digest may have changed (always true for a deferred one).
/// `stored` as for [`KeyState::expand`].
fn redigest(
    h: u64,
    key: &[u8],
    entry: &mut KeyEntry,
    stored: Option<&[u8]>,
    merkle: &mut Merkle,
    stale: &mut Vec<KeyId>,
    scratch: &mut Vec<u8>,
) -> bool {
    if entry.state.digest_is_costly() {
        if !entry.digest_stale {
            entry.digest_stale = true;
            stale.push((h, Bytes::copy_from_slice(key)));
            merkle.groups.forget(merkle::leaf_of(h));
        }
        return true;
    }
    entry.digest_stale = false;
    let digest = key_digest(key, &entry.state, stored, scratch);
    if digest == 0 {
        merkle.groups.zero(merkle::leaf_of(h), key);
    }
    if digest == entry.digest {
        return false;
    }
    merkle.update(merkle::leaf_of(h), key, entry.digest, digest);
    entry.digest = digest;
    true
}

impl Replicator {
    pub fn new(node: NodeId, dot_node: NodeId, cluster_size: usize, now_ms: u64) -> Replicator {
        Replicator {
            node,
            dot_node,
            cluster_size,
            hlc: HlcClock::new(dot_node),
            functions: Bytes::from_static(&[0]),
            functions_digest: lattice_store::dump::crc64(&[0]),
            counter: VersionVector::new(),
            seen: CausalContext::new(),
            frontier: VersionVector::new(),
            gc_history: VecDeque::new(),
            next_gc_ms: now_ms + GC_INTERVAL_MS,
            next_report_ms: now_ms + REPORT_INTERVAL_MS,
            keys: keymap::KeyMap::default(),
            merkle: Merkle::new(),
            peers: BTreeMap::new(),
            ownership: None,
            catching_up: true,
            synced_peers: std::collections::BTreeSet::new(),
            pending: PendingDeltas::default(),
            gc_queue: Vec::new(),
            gc_sweep: VecDeque::new(),
            flush_due_ms: None,
            dirty: dirty::DirtyKeys::default(),
            deferred: HashTable::new(),
            deferred_intent: Intent::Assign,
            deferrals_ended: 0,
            outbox: outbox::Outbox::default(),
            stats: ReplStats::default(),
            scratch: Vec::new(),
            stale_digests: Vec::new(),
            patches: BTreeMap::new(),
            messages_merged: 0,
            slice_keys: SLICE_KEYS,
            hot: hot::HotReplicas::default(),
            no_frontier: VersionVector::new(),
            compact_wire: RefCell::new(CompactWire::default()),
            extra_keepers: BTreeMap::new(),
            incoming: Default::default(),
            gained: Default::default(),
            member_ranks: BTreeMap::new(),
            gaining: BTreeMap::new(),
            members: None,
            moves_out: BTreeMap::new(),
            moves_in: BTreeMap::new(),
            next_stream: 0,
            moved: Vec::new(),
            dropping: Default::default(),
            drop_leaf: 0,
            move_stats: Default::default(),
            evicted_stubs: 0,
            evicted_deadlines: BTreeMap::new(),
            deltas_held_for_evicted: 0,
            held_back_evicted: false,
            holds: hold::HoldProofs::default(),
        }
    }

    /// Lowers the keys per anti-entropy slice (at least 1, at most `SLICE_KEYS`).
    pub fn with_slice_keys(mut self, keys: usize) -> Replicator {
        self.slice_keys = keys.clamp(1, SLICE_KEYS);
        self
    }

    /// Marks `key` as changed by the running command.
    pub fn note_modified(&mut self, key: &[u8]) {
        self.dirty.insert(key);
    }

    /// Postpones the capture of `key` (which now holds a string) to the next flush.
    /// `overwrote`: the command wrote the value, not only its deadline.
    /// `h` is `key`'s [`lattice_store::key_hash`].
    /// Precondition: nothing is deferred, or it was deferred with the same `intent`.
    pub fn defer(&mut self, h: u64, key: &[u8], intent: Intent, overwrote: bool, now_ms: u64) {
        debug_assert!(self.deferred.is_empty() || self.deferred_intent == intent);
        debug_assert_eq!(h, lattice_store::key_hash(key));
        self.deferred_intent = intent;
        match self
            .deferred
            .entry(h, |k| k.0[..] == *key, |k| lattice_store::key_hash(&k.0))
        {
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert((Bytes::copy_from_slice(key), overwrote));
            }
            hashbrown::hash_table::Entry::Occupied(mut o) => o.get_mut().1 |= overwrote,
        }
        if self.flush_due_ms.is_none() {
            self.flush_due_ms = Some(now_ms + FLUSH_DELAY_MS);
        }
    }

    /// Whether a command of `intent` must first settle the deferred captures.
    pub fn must_settle_before(&self, intent: Intent) -> bool {
        !self.deferred.is_empty() && self.deferred_intent != intent
    }

    pub fn deferred_intent(&self) -> Intent {
        self.deferred_intent
    }

    pub fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    pub fn is_deferred(&self, key: &[u8]) -> bool {
        self.deferred
            .find(lattice_store::key_hash(key), |k| k.0[..] == *key)
            .is_some()
    }

    /// Forgets a deferral because `key` is being captured now (its capture covers the deferred
    /// change too). Returns None if it was not deferred, else whether its value was written.
    pub fn undefer(&mut self, key: &[u8]) -> Option<bool> {
        if self.deferred.is_empty() {
            return None;
        }
        match self
            .deferred
            .find_entry(lattice_store::key_hash(key), |k| k.0[..] == *key)
        {
            Ok(e) => {
                self.deferrals_ended += 1;
                Some(e.remove().0 .1)
            }
            Err(_) => None,
        }
    }

    /// Grows whenever a key leaves the deferred captures: a key found deferred stays deferred
    /// while this is unchanged.
    pub fn deferrals_ended(&self) -> u64 {
        self.deferrals_ended
    }

    /// Every deferred key with its overwrite flag, in the table's order (fixed hasher: the
    /// same on every run), and the intent they were written with.
    pub fn take_deferred(&mut self) -> (Vec<(Bytes, bool)>, Intent) {
        let keys: Vec<(Bytes, bool)> = self.deferred.drain().collect();
        self.deferrals_ended += keys.len() as u64;
        (keys, self.deferred_intent)
    }

    /// The state of `key` (a copy when it is packed; `db` is the node's store).
    pub fn state(&self, key: &[u8], db: &Db) -> Option<Cow<'_, KeyState>> {
        match self.keys.get_any(lattice_store::key_hash(key), key, db)? {
            Cow::Borrowed(e) => Some(Cow::Borrowed(&e.state)),
            Cow::Owned(e) => Some(Cow::Owned(e.state)),
        }
    }

    /// After the store was made to hold what the state of `key` says: a compact string drops
    /// its own copy of the value and the key is packed when it can be.
    pub fn value_stored(&mut self, key: &[u8], db: &mut Db) {
        let h = lattice_store::key_hash(key);
        if let Some(e) = self.keys.get_keyed_mut(h, key) {
            e.state.drop_value();
            self.keys.repack(h, key, db);
        }
    }

    /// Where the replicated state's heap bytes are, by part (estimated from lengths and
    /// capacities; allocator rounding and the insides of general states left out): what a
    /// replicated key costs beside its store entry, for measurements.
    pub fn memory(&self) -> Vec<(&'static str, usize)> {
        let [buckets, slots, keys, leaves, packed] = self.keys.memory();
        let full = self
            .keys
            .keyed_values()
            .filter(|e| !e.state.is_compact_form())
            .count()
            * std::mem::size_of::<Full>();
        let merkle = self.merkle.heap_bytes();
        let pending = self.pending.heap_bytes();
        let unacked = self.peers.values().map(|p| p.unacked_bytes).sum();
        let queues = (self.gc_queue.capacity() + self.gc_sweep.capacity())
            * std::mem::size_of::<KeyId>()
            + self.deferred.capacity() * std::mem::size_of::<(Bytes, bool)>();
        vec![
            ("state table buckets", buckets),
            ("state table slots", slots),
            ("key copies", keys),
            ("general states (outer)", full),
            ("leaf index", leaves),
            ("packed records", packed),
            ("merkle tree", merkle),
            ("delta queue", pending),
            ("unacknowledged messages", unacked),
            ("gc and deferral queues", queues),
        ]
    }

    /// Whether the digest kept for `key` is the digest of its state with `stored` as the
    /// store's string (for the node's invariant check: it covers a value the state leaves to
    /// the store).
    /// `scratch`: a buffer for the digest's input (reused across calls, no allocation each).
    pub fn digest_matches(
        &self,
        key: &[u8],
        stored: Option<&[u8]>,
        db: &Db,
        scratch: &mut Vec<u8>,
    ) -> bool {
        let h = lattice_store::key_hash(key);
        let Some(e) = self.keys.get_any(h, key, db) else {
            return false;
        };
        e.digest_stale || key_digest(key, &e.state, stored, scratch) == e.digest
    }

    /// Before a command increments `key`: a compact string takes a copy of its value back
    /// from the store, which the command is about to change (the capture needs the old value
    /// to tell the increment).
    pub fn keep_value(&mut self, key: &[u8], db: &mut Db) {
        let h = lattice_store::key_hash(key);
        let needs = self
            .keys
            .get_any(h, key, db)
            .is_some_and(|e| e.state.value_in_store());
        if !needs {
            return;
        }
        let Some(v) = stored_str(db, h, key) else {
            return;
        };
        if let Some(e) = self.keys.get_mut(h, key, db) {
            e.state.keep_value(&v);
        }
    }

    /// Whether this replica may evict keys at all: one that holds every group it owns and
    /// moves none away (a stub is never streamed). A partitioned node's keys also need their
    /// other owners' proofs (`hold`, ARCHITECTURE §86).
    pub fn may_evict(&self) -> bool {
        self.ownership.is_none()
            || (self.incoming.is_empty()
                && self.extra_keepers.is_empty()
                && self.moves_out.is_empty())
    }

    /// Whether `key` may be evicted now (ARCHITECTURE §79): its state is settled under the
    /// applied frontier (every replica holds it, see [`KeyState::settled_under`]), its capture
    /// is not deferred, and its digest is current (it stays in the tree for the stub). On a
    /// partitioned node, also: every other owner said it holds the key as this node does
    /// (§86; see [`Replicator::wants_proof`] and [`Replicator::ask_holders`]).
    pub fn evictable(&self, key: &[u8], db: &Db) -> bool {
        let Some(digest) = self.settled_here(key, db) else {
            return false;
        };
        !self.partitioned() || self.proven(key, digest)
    }

    /// Evicts `key` here, which [`Replicator::evictable`] allowed: its state is dropped and a
    /// stub keeps its digest (the Merkle tree does not change, so nothing is shipped either
    /// way and no peer learns of it). The caller removes the store entry next. Returns the
    /// bytes the stub takes that the key did not before (a packed key gets a table slot).
    pub fn evict(&mut self, key: &[u8], db: &mut Db) -> usize {
        let h = lattice_store::key_hash(key);
        let was_packed = self.keys.get(h, key).is_none();
        self.holds.forget(key);
        let Some(e) = self.keys.get_mut(h, key, db) else {
            return 0;
        };
        let deadline = e.state.deadline_register();
        e.state = KeyState::default();
        e.evicted = true;
        self.evicted_stubs += 1;
        if let Some(d) = deadline {
            self.evicted_deadlines
                .insert(Bytes::copy_from_slice(key), d);
        }
        if was_packed {
            std::mem::size_of::<keymap::Slot<KeyEntry>>() + key.len()
        } else {
            0
        }
    }

    /// Keys evicted here that no write or peer state has brought back yet (INFO).
    pub fn evicted_stubs(&self) -> usize {
        self.evicted_stubs
    }

    /// Turns the stub of `key`, evicted here, into the state that claims nothing (with the
    /// evicted deadline register), for a join or a local write. `entry` is the key's.
    fn unevict(
        entry: &mut KeyEntry,
        key: &[u8],
        stubs: &mut usize,
        deadlines: &mut BTreeMap<Bytes, lattice_crdt::LwwRegister<Option<u64>>>,
    ) {
        entry.state = KeyState::claiming_nothing(deadlines.remove(key));
        entry.evicted = false;
        *stubs -= 1;
    }

    /// Records a local change of `key` (its store value and deadline now) and queues the
    /// delta for every peer. `overwrote`: a command wrote the string value, so it takes a new
    /// stamp even if the bytes are the ones already captured (a later `SET` of the same value
    /// must still win over an older concurrent write elsewhere).
    /// `hint`: what the command says it changed on `key` (see [`ChangeHint`]).
    /// The key's value and deadline are read from `db` (the node's store), live at `now_ms`;
    /// `gone`: capture the key as absent whatever the store holds (FLUSHALL, before it clears
    /// the store).
    #[allow(clippy::too_many_arguments)]
    pub fn capture(
        &mut self,
        db: &mut Db,
        key: &Bytes,
        gone: bool,
        intent: Intent,
        overwrote: bool,
        hint: Option<ChangeHint<'_>>,
        now_ms: u64,
    ) {
        let h = lattice_store::key_hash(key);
        let live = |db: &Db| {
            db.get_raw_hashed(h, key)
                .filter(|e| !gone && !e.is_expired(now_ms))
                .is_some()
        };
        if !live(db) && self.keys.get_any(h, key, db).is_none() {
            return; // nothing known, nothing to remove
        }
        let ts = self.hlc.now(now_ms);
        let (frontier, node) = (&self.frontier, self.dot_node);
        // A key of a group this replica gained is captured against no frontier, as its
        // states are merged (see `merge_blobs`): the seen-set took the group's dots as other
        // keys' skipped contexts while this node did not own it, so the frontier can cover
        // dots of the key this replica never merged (the draining holder's stream may not
        // have arrived yet). Against the frontier, a write onto a state lacking them would
        // claim to have observed them and remove them everywhere: an increment lost, an
        // element dropped (ARCHITECTURE §85).
        let write_frontier = if self.gained_key(key) {
            &self.no_frontier
        } else {
            frontier
        };
        let partitioned = self.partitioned();
        let (counter, seen) = (&mut self.counter, &mut self.seen);
        let (merkle, stale, scratch) =
            (&mut self.merkle, &mut self.stale_digests, &mut self.scratch);
        let gc_queue = &mut self.gc_queue;
        let (stubs, deadlines) = (&mut self.evicted_stubs, &mut self.evicted_deadlines);
        // A write over a stub of a partitioned node asks the other owners for the whole
        // state (§86); a fully replicated one finds it by comparing trees.
        let refetch = partitioned.then_some(&mut self.holds);
        // Deltas are queued while some peer is up or keeps a backlog (§77); without one, the
        // next anti-entropy ships the whole difference anyway.
        // `keeps_backlogs`, with `self` borrowed.
        let keeps = KEEP_BACKLOG_WHILE_DOWN && self.ownership.is_none();
        let pending = self
            .peers
            .values()
            .any(|p| p.up || (keeps && !p.backlog_dropped))
            .then_some(&mut self.pending);
        // Worked on where the entry is (`KeyMap::update`): a string key, packed before and
        // after, never enters the table. The delta is queued from inside, while the store's
        // new value is at hand: an assignment goes into the queue as its wire form.
        let queued = self.keys.update(h, key, db, KeyEntry::fresh, |entry, db| {
            let now_value = db
                .get_raw_hashed(h, key)
                .filter(|e| !gone && !e.is_expired(now_ms))
                .map(|e| (&e.value, e.expire_at_ms()));
            let new_str = match now_value {
                Some((Value::Str(s), _)) => Some(s.as_bytes()),
                _ => None,
            };
            let mut st = Stamper {
                node,
                ts,
                counter,
                issued: seen,
            };
            // A key whose deadline passed expired during the command: the store's value before
            // it was not this state's, so only the full comparison can explain the new one.
            let hint = hint.filter(|_| entry.state.deadline_ms().is_none_or(|d| d > now_ms));
            let delta = if entry.evicted && gone {
                // FLUSHALL removes what the key holds on every replica, evicted here or not:
                // the frontier covers every dot of the evicted state.
                Replicator::unevict(entry, key, stubs, deadlines);
                let removal = KeyState::removal_of_settled(frontier, &mut st);
                entry.state = KeyState::from_full(removal.clone());
                Delta::Full(Box::new(removal))
            } else if entry.evicted && now_value.is_none() {
                return (None, false); // still missing here: nothing to record
            } else {
                if entry.evicted {
                    // A write over the key this node evicted: it runs against the missing
                    // key, as in Redis, and joins on the other replicas as a write
                    // concurrent with what the key holds there (ARCHITECTURE §79).
                    Replicator::unevict(entry, key, stubs, deadlines);
                    entry.partial = true;
                    if let Some(r) = refetch {
                        r.want_whole(key);
                    }
                }
                entry
                    .state
                    .capture(write_frontier, now_value, intent, overwrote, hint, &mut st)
            };
            if delta == Delta::Unchanged {
                return (None, true); // no new metadata, nothing to send
            }
            redigest(h, key, entry, new_str.as_deref(), merkle, stale, scratch);
            // A state in compact form holds nothing GC could drop: only the others wait for it.
            if !entry.gc_queued && entry.state.may_hold_garbage() {
                entry.gc_queued = true;
                gc_queue.push((h, key.clone()));
            }
            let value = new_str.as_deref().unwrap_or_default();
            let queued = pending.map(|q| q.push(h, key, delta, value, MAX_QUEUED_KEYS));
            (queued, true)
        });
        match queued {
            None => return,
            Some(true) => {}
            Some(false) => {
                self.pending.clear();
                for p in self.peers.values_mut() {
                    p.needs_ae = true;
                    p.overflows += 1;
                }
            }
        }
        if self.flush_due_ms.is_none() {
            self.flush_due_ms = Some(now_ms + FLUSH_DELAY_MS);
        }
    }

    /// Leaves `key`'s replicated state in `out` (replacing its contents), encoded as
    /// anti-entropy ships it; false if the key has none. For persistence (a clustered node
    /// logs states).
    /// `db`: the node's store (a packed or compact string key's value is read from it).
    pub fn encode_state(&self, key: &[u8], db: &Db, out: &mut Vec<u8>) -> bool {
        let h = lattice_store::key_hash(key);
        match self.keys.get_any(h, key, db) {
            // An evicted key is not logged: a restart comes back with its last logged state.
            Some(e) if e.evicted => false,
            Some(e) => {
                let stored = stored_for(db, h, key, &e.state);
                let wire = &mut self.compact_wire.borrow_mut();
                e.state
                    .encode_into(wire, &self.frontier, stored.as_deref(), out);
                true
            }
            None => false,
        }
    }

    /// Calls `f(key, encoded state)` for every key of `leaf` (tombstones included), in
    /// order: a snapshot's slice of the replicated states.
    /// Packed keys included (their keys and values read from `db`).
    pub fn for_each_state_in_leaf(
        &mut self,
        leaf: usize,
        db: &Db,
        f: &mut dyn FnMut(&[u8], Leafed<'_>),
    ) {
        if self.keys.leaf_is_empty(leaf) {
            return;
        }
        let mut deadline = Vec::new();
        for (key, e) in self.keys.leaf_entries(leaf, db) {
            if e.evicted {
                // Its stub, as it is: encoded as a state it would read as a deletion of
                // everything the key held, and left out, a restarted node would hold nothing
                // of the key, which against the frontier it adopts claims the same.
                deadline.clear();
                if let Some(d) = self.evicted_deadlines.get(&key[..]) {
                    deadline = state::codec().serialize(d).unwrap_or_default();
                }
                f(
                    &key,
                    Leafed::Stub {
                        digest: e.digest,
                        deadline: &deadline,
                    },
                );
                continue;
            }
            let h = lattice_store::key_hash(&key);
            let stored = stored_for(db, h, &key, &e.state);
            e.state.encode_into(
                self.compact_wire.get_mut(),
                &self.frontier,
                stored.as_deref(),
                &mut self.scratch,
            );
            f(&key, Leafed::State(&self.scratch));
        }
    }

    /// Recovery: a stub of `key` as a snapshot recorded it (see [`Leafed::Stub`]): the key
    /// is evicted here again, with the digest and deadline register it had. A state already
    /// loaded for the key (a record read before this one) is left as it is.
    pub fn load_stub(
        &mut self,
        key: &Bytes,
        digest: u64,
        deadline: &[u8],
        db: &mut Db,
    ) -> Result<(), String> {
        let deadline: Option<lattice_crdt::LwwRegister<Option<u64>>> = if deadline.is_empty() {
            None
        } else {
            Some(
                state::codec()
                    .deserialize(deadline)
                    .map_err(|e| format!("a stub's deadline does not decode: {e}"))?,
            )
        };
        if digest == 0 {
            return Err("a stub without a digest".into());
        }
        let h = lattice_store::key_hash(key);
        if self.keys.get_any(h, key, db).is_some() {
            return Ok(());
        }
        let e = self.keys.get_or_insert_with(h, key, db, KeyEntry::fresh);
        e.evicted = true;
        e.digest = digest;
        self.merkle.update(merkle::leaf_of(h), key, 0, digest);
        self.evicted_stubs += 1;
        if let Some(d) = deadline {
            self.evicted_deadlines.insert(key.clone(), d);
        }
        Ok(())
    }

    /// Recovery: merges a logged state of `key` as an anti-entropy state from a peer is
    /// merged (the caller then makes the store follow). Joins, so records may come in any
    /// order and more than once.
    pub fn load_state(&mut self, key: &Bytes, blob: &[u8], db: &mut Db) -> Result<(), String> {
        let st = state::codec()
            .deserialize::<Full>(blob)
            .map_err(|e| format!("logged replicated state does not decode: {e}"))?;
        let latest = st.latest_stamp();
        // Our own earlier writes must stay older than our next ones.
        let _ = self.hlc.observe(latest, latest.wall_ms);
        let entry = [KeyBlob {
            key: key.clone(),
            state: Bytes::copy_from_slice(blob),
        }];
        let h = lattice_store::key_hash(key);
        let onto_stub = self.keys.get(h, key).is_some_and(|e| e.evicted);
        self.merge_blobs(&entry, false, db);
        if onto_stub {
            // Logged after the snapshot that recorded the stub: this node's own write over
            // it, or a peer's whole state. Taken as the former (a fragment), which is safe for
            // either: GC leaves it alone until a peer's whole state is merged again.
            if let Some(e) = self.keys.get_keyed_mut(h, key).filter(|e| !e.evicted) {
                e.partial = true;
                if self.partitioned() {
                    self.holds.want_whole(key);
                }
            }
        }
        self.stats.states_applied = self.stats.states_applied.saturating_sub(1);
        self.stats.states_loaded += 1;
        Ok(())
    }

    /// FLUSHALL: an observed-remove of every key known here.
    pub fn keys_with_content(&self, db: &Db) -> Vec<Bytes> {
        self.keys
            .iter_ordered(db)
            .filter(|(_, e)| e.digest != 0 || e.digest_stale)
            .map(|(k, _)| k)
            .collect()
    }

    fn envelope(&self, body: Body) -> Bytes {
        wire::encode(&Envelope {
            body: Some(body),
            ..self.envelope_head()
        })
    }

    /// The envelope of our next message, without its body.
    fn envelope_head(&self) -> Envelope {
        let last = self.hlc.last();
        Envelope {
            version: wire::PROTOCOL_VERSION,
            from: self.node.0,
            hlc_wall_ms: last.wall_ms,
            hlc_logical: last.logical,
            body: None,
        }
    }

    /// Sends a PUBLISH (or, `shard`, an SPUBLISH) to every live peer (best effort, like
    /// Redis Cluster's bus).
    pub fn publish(&mut self, channel: &[u8], message: &[u8], shard: bool) {
        let data = self.envelope(Body::Publish(Publish {
            channel: Bytes::copy_from_slice(channel),
            message: Bytes::copy_from_slice(message),
            shard,
        }));
        let ups: Vec<NodeId> = self.live_peers();
        for n in ups {
            self.outbox.push(n, data.clone());
        }
    }

    /// The node's function library set changed (`entries`: its encoding): every live peer
    /// receives it whole.
    pub fn set_functions(&mut self, entries: Bytes) {
        self.functions_digest = lattice_store::dump::crc64(&entries);
        self.functions = entries;
        let data = self.envelope(self.functions_body(true));
        for n in self.live_peers() {
            self.outbox.push(n, data.clone());
        }
    }

    fn functions_body(&self, full: bool) -> Body {
        Body::Functions(Functions {
            digest: self.functions_digest,
            entries: if full {
                self.functions.clone()
            } else {
                Bytes::new()
            },
            full,
        })
    }

    /// After merging a peer's set (or receiving its digest): if ours still differs from what
    /// it holds, it gets ours, so that one exchange leaves both equal.
    pub fn functions_received(&mut self, peer: NodeId, their_digest: u64) {
        if their_digest != self.functions_digest {
            let body = self.functions_body(true);
            self.send_ae(peer, body);
        }
    }

    /// How many writes this replica has stamped so far: its own entry of its version vector,
    /// which grows by one per write and which peers report back once they merged them.
    pub fn own_writes(&self) -> u64 {
        self.counter.get(self.dot_node)
    }

    /// Peers whose latest report says they have merged this replica's first `writes` writes.
    pub fn peers_having(&self, writes: u64) -> usize {
        self.peers
            .values()
            .filter(|p| {
                p.seen
                    .as_ref()
                    .is_some_and(|s| s.get(self.dot_node) >= writes)
            })
            .count()
    }

    /// Bytes kept for retransmission until peers acknowledge them (MEMORY STATS reports them
    /// where Redis reports its replication backlog).
    pub fn retained_bytes(&self) -> usize {
        self.peers.values().map(|p| p.unacked_bytes).sum()
    }

    /// Peers whose link is up (what `min-replicas-to-write` counts).
    pub fn linked_peers(&self) -> usize {
        self.live_peers().len()
    }

    /// Whether deltas are kept for peers whose link is down (see `delta_targets`).
    fn keeps_backlogs(&self) -> bool {
        KEEP_BACKLOG_WHILE_DOWN && self.ownership.is_none()
    }

    fn live_peers(&self) -> Vec<NodeId> {
        self.peers
            .iter()
            .filter(|(_, p)| p.up)
            .map(|(n, _)| *n)
            .collect()
    }

    /// The peers deltas are encoded for: the live ones, and the members whose link is down
    /// while their backlog fits in `MAX_UNACKED_BYTES`. Kept for a peer that is down, a delta
    /// reaches it as soon as its link is back (`peer_up`), where dropping it left the write to
    /// the next anti-entropy round, which may wait for another peer's repair for seconds.
    /// Partitioned, a backlog is not kept: its deltas were addressed by the placement of the
    /// moment, and after a membership change a returning peer may no longer keep those keys
    /// (it would drop and acknowledge them while the new owner never got them); the move
    /// streams and pushes repair what it missed instead.
    fn delta_targets(&self) -> Vec<NodeId> {
        self.peers
            .iter()
            .filter(|(n, p)| {
                p.up || (self.keeps_backlogs()
                    && !p.backlog_dropped
                    && self.members.as_ref().is_none_or(|m| m.contains(&n.0)))
            })
            .map(|(n, _)| *n)
            .collect()
    }

    pub fn peer_up(&mut self, peer: NodeId, now_ms: u64) {
        if peer == self.node {
            return;
        }
        let lower = self.node < peer;
        let p = self.peers.entry(peer).or_default();
        p.up = true;
        p.backlog_dropped = false;
        // Deltas kept while the link was down (see `delta_targets`) go now, in one burst: its
        // own writes reach a returning peer in a round trip, before any anti-entropy round
        // (which may wait for another peer's repair, `defer_round`). A backlog larger than a
        // burst is dropped instead: the tree comparison below ships those keys' states anyway,
        // and the part of the backlog left for the tick's probes (one message per round trip)
        // was still being resent after the comparison had repaired the peer, and again after
        // the next cut: a replica that missed 20 writes then received 27% of a full transfer.
        if p.unacked_bytes > RESEND_BURST_BYTES {
            p.unacked.clear();
            p.unacked_bytes = 0;
            self.stats.backlogs_made_redundant += 1;
        } else {
            resend_burst(p, &mut self.outbox, peer, now_ms);
        }
        // Whatever happened while the link was down is repaired by one anti-entropy round,
        // started at once by the lower id of the pair (both sides are told the link is up, and
        // two sessions would compare the trees twice and ship the difference twice: for a
        // replica that missed a few writes, the digests are most of what a catch-up costs).
        // The higher id starts one only if no round came by the next period.
        p.needs_ae = true;
        p.next_ae_ms = if lower {
            now_ms
        } else {
            now_ms + AE_INTERVAL_MS
        };
    }

    pub fn peer_down(&mut self, peer: NodeId) {
        let keeps = self.keeps_backlogs();
        if let Some(p) = self.peers.get_mut(&peer) {
            p.up = false;
            if !keeps {
                p.unacked.clear();
                p.unacked_bytes = 0;
            }
            // Unpartitioned, the unacknowledged deltas stay, and new ones are kept too (bounded
            // by `MAX_UNACKED_BYTES`): they are resent when the link is back (`peer_up`). A
            // merge is idempotent, so a delta the peer did receive costs a duplicate, nothing
            // more. Partitioned, they go (see `delta_targets`).
            p.needs_ae = true;
            // The next link starts a new round, which finds whatever is still different.
            p.transfer = Transfer::default();
        }
        self.moves_peer_down(peer);
        self.hot.peer_down(peer.0);
        self.outbox.drop_forwards(peer);
    }

    /// Turns queued deltas into messages, one encoding shared by every live peer. Called after
    /// each batch of input.
    /// Precondition: the node settled the deferred captures (they are part of the batch).
    pub fn flush(&mut self, now_ms: u64) {
        debug_assert!(self.deferred.is_empty(), "flush before settling captures");
        self.flush_due_ms = None;
        let ups: Vec<NodeId> = self.delta_targets();
        if ups.is_empty() {
            self.pending.clear();
            return;
        }
        if self.ownership.is_some() {
            self.send_fetches(None);
            return self.flush_to_owners(&ups, now_ms);
        }
        let mut k = Vec::new();
        while !self.pending.is_empty() {
            let mut writer = wire::BatchWriter::default();
            while self.pending.pop_front(&mut k, &mut self.scratch).is_some() {
                writer.push(&k, &self.scratch);
                if writer.len() >= MAX_BATCH_BYTES {
                    break;
                }
            }
            let batch = writer.finish();
            for &id in &ups {
                self.send_deltas(id, batch.clone(), false, now_ms);
            }
        }
    }

    /// One numbered `Deltas` message to `id`, kept for retransmission until acknowledged.
    /// `ranks`: the batch holds a key of a group `id` is gaining, so our member ranks go along
    /// (see `wire::Deltas`).
    fn send_deltas(&mut self, id: NodeId, batch: Bytes, ranks: bool, now_ms: u64) {
        let p = self.peers.get_mut(&id).expect("listed");
        let seq = p.next_seq;
        p.next_seq += 1;
        let (member_ids, member_ranks) = if ranks {
            self.member_ranks.iter().map(|(&i, &r)| (i, r)).unzip()
        } else {
            Default::default()
        };
        let data = self.envelope(Body::Deltas(Deltas {
            seq,
            batch,
            member_ids,
            member_ranks,
        }));
        let p = self.peers.get_mut(&id).expect("listed");
        p.delta_bytes += data.len() as u64;
        if p.unacked_bytes + data.len() > MAX_UNACKED_BYTES {
            p.unacked.clear();
            p.unacked_bytes = 0;
            p.needs_ae = true;
            p.overflows += 1;
            if !p.up {
                p.backlog_dropped = true;
                return;
            }
        }
        p.unacked_bytes += data.len();
        p.unacked.insert(
            seq,
            Unacked {
                data: data.clone(),
                sent_ms: now_ms,
                due_ms: now_ms + RTO_INITIAL_MS,
                rto_ms: RTO_INITIAL_MS,
                tries: 0,
            },
        );
        if p.up {
            self.outbox.push(id, data);
        }
    }

    /// The partitioned flush: each live peer's batch holds the queued deltas of the slots it
    /// owns; the causal contexts of the others are joined into the batch's `skipped` field, so
    /// the peer's seen-set (and with it GC) still covers every dot. Encoded per peer instead
    /// of once: a peer receives about `rf / members` of the deltas.
    fn flush_to_owners(&mut self, ups: &[NodeId], now_ms: u64) {
        let placement = self.ownership.take().expect("partitioned");
        let mut k = Vec::new();
        while !self.pending.is_empty() {
            let mut writers: Vec<(wire::BatchWriter, CausalContext)> = ups
                .iter()
                .map(|_| (wire::BatchWriter::default(), CausalContext::default()))
                .collect();
            let mut ranks = vec![false; ups.len()];
            let mut bytes = 0;
            while let Some(st) = self.pending.pop_front(&mut k, &mut self.scratch) {
                let owners = placement.owners(lattice_placement::key_slot(&k));
                for (i, id) in ups.iter().enumerate() {
                    if owners.contains(&id.0)
                        || self.hot.is_holder(&k, id.0)
                        || self.extra_keeper(id.0, &k)
                    {
                        writers[i].0.push(&k, &self.scratch);
                        ranks[i] = ranks[i] || self.gaining_key(id.0, &k);
                    } else {
                        st.merge_contexts_into(&mut writers[i].1);
                    }
                }
                bytes += self.scratch.len() + k.len();
                if bytes >= MAX_BATCH_BYTES {
                    break;
                }
            }
            for (i, (writer, skipped)) in writers.into_iter().enumerate() {
                let skipped = if skipped.is_empty() {
                    Vec::new()
                } else {
                    state::codec()
                        .serialize(&skipped)
                        .expect("in-memory contexts always encode")
                };
                let batch = writer.finish_with_skipped(&skipped);
                self.send_deltas(ups[i], batch, ranks[i], now_ms);
            }
        }
        self.ownership = Some(placement);
    }

    /// Makes this replica partitioned (`Some`) or fully replicated (`None`). Called by the
    /// node when the membership it knows changes the placement.
    pub fn set_ownership(&mut self, placement: Option<lattice_placement::Placement>) {
        if self.ownership != placement {
            // A proof is an answer of the key's owners: new owners have given none.
            self.holds.clear();
        }
        self.ownership = placement;
    }

    /// Whether this replica keeps `key` (it owns its slot, or the cluster is not partitioned).
    pub fn owns(&self, key: &[u8]) -> bool {
        keeper(&self.ownership, &self.extra_keepers, self.node.0, key)
    }

    /// Whether this replica keeps a received state of `key`: it owns it, or holds a copy of
    /// it while it is hot here.
    pub fn keeps(&self, key: &[u8]) -> bool {
        self.owns(key) || self.hot.holds(key)
    }

    /// Queues a control message (membership, forwarded commands and their replies) for a live
    /// peer: not numbered or retransmitted; the sender's timeout covers a lost one.
    pub fn send_control(&mut self, peer: NodeId, body: Body) {
        let data = self.envelope(body);
        self.outbox.push(peer, data);
    }

    /// Queues a command for `peer` to run, in the message that carries this turn's forwarding
    /// traffic to it (`outbox`).
    pub fn send_forward(&mut self, peer: NodeId, f: wire::Forward) {
        self.outbox.push_forward(peer, f);
    }

    /// Queues the reply to a command `peer` forwarded here, as [`Replicator::send_forward`].
    pub fn send_forward_reply(&mut self, peer: NodeId, r: wire::ForwardReply) {
        self.outbox.push_forward_reply(peer, r);
    }

    pub fn poll_send(&mut self) -> Option<(NodeId, Bytes)> {
        let (peer, data) = loop {
            match self.outbox.pop()? {
                (peer, outbox::Queued::Data(data)) => break (peer, data),
                (peer, outbox::Queued::Forwards(m)) => {
                    // Emptied by the link going down.
                    if m.forwards.is_empty() && m.replies.is_empty() {
                        continue;
                    }
                    break (peer, self.envelope(Body::Forwards(m)));
                }
            }
        };
        if let Some(p) = self.peers.get_mut(&peer) {
            p.bytes_sent += data.len() as u64;
        }
        Some((peer, data))
    }

    /// Whether queued deltas should go out now: the oldest has waited `FLUSH_DELAY_MS`, or
    /// enough keys are queued to fill a message.
    pub fn flush_ready(&self, now_ms: u64) -> bool {
        let queued = self.pending.len() + self.deferred.len();
        queued > 0 && (queued >= FLUSH_EAGER_KEYS || self.flush_due_ms.is_some_and(|d| d <= now_ms))
    }

    /// When [`Replicator::tick`] next has work.
    pub fn next_deadline_ms(&self, now_ms: u64) -> u64 {
        let mut next = self.next_gc_ms.min(self.next_report_ms);
        if !self.gc_sweep.is_empty() {
            // The next slice of the sweep, after the client batches waiting now.
            next = next.min(now_ms + 1);
        }
        if let Some(d) = self.flush_due_ms {
            next = next.min(d);
        }
        for p in self.peers.values().filter(|p| p.up) {
            if p.transfer.ready() || self.move_ready() {
                // The next slice, after the client batches waiting now.
                next = next.min(now_ms + 1);
            }
            next = next.min(p.next_ae_ms);
            if let Some(u) = p.unacked.values().next() {
                next = next.min(u.due_ms);
            }
            if let Some(&(_, sent)) = p.transfer.inflight.front() {
                next = next.min(sent + SLICE_TIMEOUT_MS);
            }
        }
        if let Some(due) = self.move_deadline_ms() {
            next = next.min(due);
        }
        if !self.dropping.is_empty() {
            next = next.min(now_ms + 1);
        }
        next
    }

    /// Flushes, retransmissions, anti-entropy and GC rounds that are due.
    /// `db`: the node's store (for the values of states that do not hold theirs).
    pub fn tick(&mut self, now_ms: u64, db: &mut Db) {
        // A due flush runs even with nothing queued (deferred captures that turned out to
        // change nothing): it clears the deadline, which would otherwise stay due forever.
        if self.flush_ready(now_ms) || self.flush_due_ms.is_some_and(|d| d <= now_ms) {
            self.flush(now_ms);
        }
        self.expire_holders(now_ms);
        self.holds.expire(now_ms);
        let ids: Vec<NodeId> = self.peers.keys().copied().collect();
        for id in ids {
            let p = self.peers.get_mut(&id).expect("listed");
            if !p.up {
                continue;
            }
            // Only the oldest overdue message is resent (a probe); the others wait for it.
            // A peer that is merely slow or paused then receives one duplicate per timeout
            // instead of its whole backlog again, which it would have to chew through when it
            // resumes.
            // Only the oldest message carries a live timer: the ones behind it are covered by
            // its probe, and each gets its turn as the oldest once everything before it is
            // acknowledged. So a tick and `next_deadline_ms` cost O(1), not O(unacked).
            let mut resend = None;
            let mut give_up = false;
            if let Some(u) = p.unacked.values_mut().next().filter(|u| u.due_ms <= now_ms) {
                if u.tries >= MAX_RETRIES {
                    give_up = true;
                } else {
                    u.tries += 1;
                    u.rto_ms = (u.rto_ms * 2).min(RTO_MAX_MS);
                    u.due_ms = now_ms + u.rto_ms;
                    u.sent_ms = now_ms;
                    resend = Some(u.data.clone());
                }
            }
            if give_up {
                p.unacked.clear();
                p.unacked_bytes = 0;
                p.needs_ae = true;
                p.next_ae_ms = now_ms;
                resend = None;
            }
            if let Some(data) = resend {
                p.retransmits += 1;
                self.outbox.push(id, data);
            }
            let p = self.peers.get_mut(&id).expect("listed");
            let t = &mut p.transfer;
            if t.inflight
                .front()
                .is_some_and(|&(_, sent)| sent + SLICE_TIMEOUT_MS <= now_ms)
            {
                t.inflight.clear();
                t.timeouts += 1;
                if self.ownership.is_some() {
                    // Partitioned, no tree comparison follows the transfer to find what a
                    // lost slice carried: push the shared keys again.
                    p.needs_ae = true;
                }
            }
            self.pump_transfer(id, now_ms, db);
            let p = self.peers.get_mut(&id).expect("listed");
            if p.next_ae_ms <= now_ms && p.transfer.busy() {
                // A transfer to this peer is under way: a new round now would compare trees
                // the transfer is still changing and list the same leaves again. It starts
                // when the transfer is done, and checks that nothing was left out.
                p.next_ae_ms = now_ms + AE_FOLLOW_UP_MS;
            }
            if p.next_ae_ms <= now_ms {
                // Periodic rounds are started by the lower node id only (push-pull repairs
                // both sides, two concurrent sessions would double the traffic); a link that
                // came up or a queue that overflowed starts one from either side.
                // Partitioned, the trees of two replicas cover different slots and never
                // agree, so a round ships every shared key: only the rounds a link coming up,
                // an overflow or a given-up retransmission asks for are run (delivery is
                // otherwise acknowledged and retransmitted).
                // Partitioned, a push of the shared keys still runs every
                // `PUSH_EVERY_ROUNDS` periods: a push sent into a one-way cut is lost unnoticed.
                let periodic = self.node < id
                    && (self.ownership.is_none() || {
                        p.rounds_since_push += 1;
                        p.rounds_since_push >= PUSH_EVERY_ROUNDS
                    });
                let starts = p.needs_ae || periodic || p.follow_up;
                p.needs_ae = false;
                p.next_ae_ms = now_ms + AE_INTERVAL_MS;
                if !starts {
                    continue;
                }
                if self.ownership.is_some() {
                    // Partitioned: the trees cover different slots, so instead of comparing
                    // them, every key both own is sent as a transfer (never deferred: each
                    // peer owns different slots, so no two pushes carry the same keys). The
                    // transfer's acknowledged window paces it: a push sent one slice per
                    // tick with no window filled the links faster than peers could merge,
                    // and forwards and heartbeats queued behind it for seconds.
                    p.transfer.owed.extend(0..merkle::LEAVES as u32);
                    p.rounds_since_push = 0;
                    self.stats.ae_rounds += 1;
                    continue;
                }
                if self.defer_round(id, now_ms) {
                    continue;
                }
                let p = self.peers.get_mut(&id).expect("listed");
                p.next_ae_ms = now_ms + AE_INTERVAL_MS;
                p.last_ae_ms = Some(now_ms);
                self.stats.ae_rounds += 1;
                self.refresh_digests();
                // The library set's digest rides along with every round.
                let probe = self.functions_body(false);
                self.send_ae(id, probe);
                let root = self.root_digest();
                self.send_ae(id, root);
            }
        }
        if !self.moves_out.is_empty() {
            self.tick_moves(now_ms, db);
        }
        self.merkle.groups.idle(now_ms, !self.moves_out.is_empty());
        if !self.gc_sweep.is_empty() {
            self.gc_step(db);
        }
        if now_ms >= self.next_gc_ms {
            self.next_gc_ms = now_ms + GC_INTERVAL_MS;
            self.gc_round();
        }
        if now_ms >= self.next_report_ms {
            self.next_report_ms = now_ms + REPORT_INTERVAL_MS;
            // Tell every peer what we have merged, even when no deltas flow (acks carry it
            // otherwise): GC needs fresh reports from everyone to make progress.
            let report = self.seen_report(REPORT_ONLY_SEQ);
            let ups: Vec<NodeId> = self.live_peers();
            for n in ups {
                self.outbox.push(n, report.clone());
            }
        }
    }

    /// Sends the peer the next slice of what anti-entropy owes it, if fewer than
    /// `SLICE_WINDOW` are unacknowledged. A slice holds at most `SLICE_KEYS` keys and about
    /// `SLICE_BYTES` bytes of states (one key more than that if it alone is larger), and one
    /// call sends one slice at most, so no call builds, and no receiver merges, more than
    /// that at once: the rest of the window fills from the next timer (`next_deadline_ms`
    /// asks for one a millisecond on while a slice may go), after the client batches that
    /// arrived meanwhile. Filling the window in one call made the step that started a
    /// transfer, or merged a peer's slice asking for leaves, build two slices at once.
    /// Keys `peer` does not own (a partitioned cluster) are left out, as in any push to it.
    /// `db`: the node's store, which holds the values of packed and compact string keys.
    fn pump_transfer(&mut self, peer: NodeId, now_ms: u64, db: &Db) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        let t = &mut p.transfer;
        if !p.up || !t.ready() {
            return;
        }
        let mut writer = wire::StatesWriter::default();
        let mut keys = 0;
        let mut bytes = 0;
        // A build with the planted bug ignores the bound: the simulator must notice.
        let slice_keys = if cfg!(feature = "planted-transfer-bug") {
            usize::MAX
        } else {
            self.slice_keys
        };
        'leaves: while let Some(&leaf) = t.owed.first() {
            // Packed keys have no table slot: the walk lists them from the store.
            let slots = self.keys.leaf_entries(leaf as usize, db);
            let mut i = t.resume.min(slots.len());
            while i < slots.len() {
                if bytes >= SLICE_BYTES || keys >= slice_keys {
                    t.resume = i;
                    break 'leaves;
                }
                let (key, entry) = &slots[i];
                i += 1;
                // An evicted key's stub is never shipped: encoded, it would read as a
                // deletion of everything the key held (its peers hold the key anyway).
                if entry.evicted || t.skip.contains(key) {
                    continue;
                }
                // Only an owner sends a key (a hot key's copy is not this node's to spread), to
                // a peer that keeps it.
                let owned = self.ownership.is_none()
                    || (keeper(&self.ownership, &self.extra_keepers, self.node.0, key)
                        && (keeper(&self.ownership, &self.extra_keepers, peer.0, key)
                            || self.hot.is_holder(key, peer.0)));
                if !owned {
                    continue;
                }
                let wire = self.compact_wire.get_mut();
                encode_key_state(
                    key,
                    &entry.state,
                    wire,
                    &self.frontier,
                    db,
                    &mut self.scratch,
                );
                bytes += self.scratch.len() + key.len();
                keys += 1;
                writer.push(key, &self.scratch);
            }
            t.owed.pop_first();
            t.resume = 0;
        }
        if t.owed.is_empty() {
            t.skip.clear();
        }
        let want_leaves: Vec<u32> = std::mem::take(&mut t.want).into_iter().collect();
        t.next_slice += 1;
        let slice = t.next_slice;
        t.inflight.push_back((slice, now_ms));
        t.slices_sent += 1;
        self.stats.max_slice_keys = self.stats.max_slice_keys.max(keys as u64);
        self.stats.max_slice_bytes = self.stats.max_slice_bytes.max(bytes as u64);
        let frontier: Vec<(u32, u64)> = self.frontier.iter().map(|(n, c)| (n.0, c)).collect();
        let data = writer.finish(&self.envelope_head(), &want_leaves, slice, &frontier);
        self.send_ae_data(peer, data);
    }

    /// Adds `leaves` (found different from the peer's) to what we owe it, and if `want`, to
    /// what we ask it for; then sends what the window allows.
    fn owe_leaves(&mut self, peer: NodeId, leaves: &[u32], want: bool, now_ms: u64, db: &Db) {
        let Some(p) = self.peers.get_mut(&peer).filter(|p| p.up) else {
            return; // no link to send on: the round after the next PeerUp finds them again
        };
        for &l in leaves.iter().filter(|&&l| (l as usize) < merkle::LEAVES) {
            p.transfer.owed.insert(l);
            if want {
                p.transfer.want.insert(l);
            }
        }
        self.pump_transfer(peer, now_ms, db);
    }

    fn send_ae(&mut self, peer: NodeId, body: Body) {
        let data = self.envelope(body);
        self.send_ae_data(peer, data);
    }

    fn send_ae_data(&mut self, peer: NodeId, data: Bytes) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.ae_bytes += data.len() as u64;
        }
        self.outbox.push(peer, data);
    }

    /// Takes what of a peer's applied GC frontier this node has merged as its own applied
    /// frontier. Sound because a peer applies only a frontier every replica had merged (and
    /// that stayed true a round later, see `gc_round`): the same facts hold here, whoever
    /// measured them. The part above our own seen-set is left out, so a replica that lost the
    /// tail of its log (and with it dots it once reported) never counts those as seen. Without
    /// this, a peer's state expanded with a frontier ahead of ours joins in general form.
    fn adopt_frontier(&mut self, nodes: &[u32], counters: &[u64]) {
        if nodes.len() != counters.len() {
            self.stats.bad_messages += 1;
            return;
        }
        let mut theirs: VersionVector = nodes
            .iter()
            .zip(counters)
            .map(|(n, c)| (NodeId(*n), *c))
            .collect();
        theirs.meet(self.seen.vv());
        // A replica still catching up takes no frontier from its peers, for the reason it
        // applies no GC of its own yet (`Replicator::gc_round`): its seen-set covers dots of
        // keys it has not received.
        if self.gc_held() {
            return;
        }
        if !self.frontier.dominates(&theirs) {
            self.stats.frontiers_adopted += 1;
            self.apply_gc(&theirs);
        }
    }

    /// An `Ack` of `seq` carrying our seen-set frontier.
    fn seen_report(&self, seq: u64) -> Bytes {
        let (seen_nodes, seen_counters) = self.seen.vv().iter().map(|(n, c)| (n.0, c)).unzip();
        self.envelope(Body::Ack(Ack {
            seq,
            seen_nodes,
            seen_counters,
        }))
    }

    fn own_seen(&self) -> VersionVector {
        self.seen.vv().clone()
    }

    fn gc_round(&mut self) {
        self.stats.gc_rounds += 1;
        // A replica that started without the states it once reported (empty, a lost log tail,
        // a lagging bucket) merges its peers' frontiers with the first states it receives (a
        // state's context carries its sender's frontier), so its seen-set soon covers the dots
        // of keys it has not received yet. Raised to that, its frontier would take each of
        // those keys, when it arrives, for one it removed, drop it, and ship the removal back:
        // the cluster would lose them. So it applies no GC until its tree has equalled every
        // peer's once: from then on it holds every key those dots belong to. Partitioned
        // replicas hold different slots and never equal, and keep the old rule.
        if self.gc_held() {
            self.gc_history.clear();
            return;
        }
        let members = &self.members;
        let reports: Vec<&VersionVector> = self
            .peers
            .iter()
            .filter(|(id, _)| members.as_ref().is_none_or(|m| m.contains(&id.0)))
            .filter_map(|(_, p)| p.seen.as_ref())
            .collect();
        if reports.len() + 1 < self.cluster_size {
            return; // a configured replica has not reported yet: nothing is stable
        }
        let own = self.own_seen();
        let mut min = own.clone();
        let mut max = own;
        for r in reports {
            min.meet(r);
            max.merge(r);
        }
        // The newest earlier round whose maximum every replica has now merged: its minimum is
        // applied (everything in flight when it was measured has arrived everywhere). Not
        // only the previous round's: under a steady load the replicas' reports trail the
        // writer by more than one round, and a rule that looked one round back never held
        // (a 3-node cluster taking SETs at 100,000/s applied no frontier until the load
        // ended, and every key stayed in general form).
        if let Some(i) = self.gc_history.iter().rposition(|(_, m)| min.dominates(m)) {
            let (stable, _) = self
                .gc_history
                .drain(..=i)
                .next_back()
                .expect("i is in range");
            self.apply_gc(&stable);
        }
        if self.gc_history.len() == GC_HISTORY_ROUNDS {
            // Only postpones: a later round measures a frontier at least as high.
            self.gc_history.pop_front();
        }
        self.gc_history.push_back((min, max));
    }

    /// Raises the applied frontier to `stable` and schedules a visit of every key changed since
    /// the last round. Raising it first is safe: keys not yet visited keep metadata a visit
    /// would drop, nothing more (and compact states take the new frontier at once).
    fn apply_gc(&mut self, stable: &VersionVector) {
        self.frontier.merge(stable);
        self.seen.raise_to(&self.frontier.clone());
        let queued = std::mem::take(&mut self.gc_queue);
        self.gc_sweep.extend(queued);
    }

    /// Visits up to `GC_KEYS_PER_STEP` keys of the sweep: drops their metadata below the
    /// frontier, forgets the ones that hold nothing, and lists again those that keep metadata
    /// the frontier does not cover yet.
    fn gc_step(&mut self, db: &mut Db) {
        let frontier = &self.frontier;
        for _ in 0..GC_KEYS_PER_STEP {
            let Some(id) = self.gc_sweep.pop_front() else {
                break;
            };
            let gained = self.gained_key(&id.1);
            // Listed keys wait unpacked: a packed one was visited already.
            let Some(e) = self.keys.get_keyed_mut(id.0, &id.1) else {
                continue;
            };
            if !e.gc_queued {
                continue; // listed twice; already visited
            }
            e.gc_queued = false;
            if e.evicted {
                continue; // a stub holds nothing to collect, and must keep its digest
            }
            if e.partial {
                // Raising its contexts to the frontier would claim the evicted dots removed;
                // visited again once a peer's state has completed it.
                e.gc_queued = true;
                self.gc_queue.push(id);
                continue;
            }
            if !self.hot.is_empty_held() && self.hot.holds(&id.1) {
                // A hot key's copy keeps its metadata: it is merged against no frontier (see
                // `merge_blobs`), and it is forgotten when given back.
                continue;
            }
            if gained {
                // A key of a group this replica gained keeps its metadata, as it is merged
                // against no frontier (see `merge_blobs`): the frontier took the group's dots
                // from other keys' skipped contexts while this node did not own it, so raising
                // the key's contexts to it would claim dots it never merged, and when one
                // arrives later (from an owner whose delta the streaming holder had missed) it
                // would merge as its own removal: an acknowledged element lost (ARCHITECTURE
                // §92, seed 228 with 16,384-leaf slices).
                continue;
            }
            // Digests leave contexts out, so only purged list tombstones can change one.
            let had_tombstones = e.state.tombstones() > 0;
            e.state.gc(frontier);
            if e.state.collectable(frontier) {
                let old = e.digest;
                self.keys.remove(id.0, &id.1, db);
                self.merkle.update(merkle::leaf_of(id.0), &id.1, old, 0);
                self.stats.keys_collected += 1;
                continue;
            }
            if had_tombstones && !e.digest_stale {
                let d = key_digest(&id.1, &e.state, None, &mut self.scratch);
                if d != e.digest {
                    self.merkle
                        .update(merkle::leaf_of(id.0), &id.1, e.digest, d);
                    e.digest = d;
                }
            }
            if !e.state.is_compact() || e.state.awaits_frontier() {
                // Metadata the frontier does not cover yet: the next round visits it again.
                e.gc_queued = true;
                self.gc_queue.push(id);
                continue;
            }
            // Compacted: when the store holds the same string (no stream took the key), the
            // state can leave the value to it and be packed.
            // A state that already left its value to the store (merged unchanged while it was
            // listed for this visit, see `merge_blobs`) has nothing to compare.
            let same = e.state.value_in_store()
                || e.state.is_compact_form()
                    && e.state
                        .materialize(&Default::default(), None)
                        .is_some_and(|v| {
                            db.get_raw_hashed(id.0, &id.1).is_some_and(|s| {
                                s.expire_at_ms().is_none() && state::same_content(&v, &s.value)
                            })
                        });
            if same {
                e.state.drop_value();
                self.keys.repack(id.0, &id.1, db);
            }
        }
    }

    /// Handles one message from `peer`; returns what the node must apply to its store.
    /// `db`: the node's store (for the values of states that do not hold theirs).
    pub fn on_message(
        &mut self,
        peer: NodeId,
        data: &[u8],
        now_ms: u64,
        db: &mut Db,
    ) -> Vec<Effect> {
        let env = match wire::decode(data) {
            Ok(e) if e.version == wire::PROTOCOL_VERSION && e.from == peer.0 => e,
            _ => {
                self.stats.bad_messages += 1;
                return Vec::new();
            }
        };
        let remote = Hlc::new(env.hlc_wall_ms, env.hlc_logical, peer);
        if let lattice_crdt::Skew::Exceeded { .. } = self.hlc.observe(remote, now_ms) {
            self.stats.skew_exceeded += 1;
        }
        let p = self.peers.entry(peer).or_default();
        p.bytes_received += data.len() as u64;
        let silent_ms = p.last_heard_ms.map_or(0, |t| now_ms.saturating_sub(t));
        p.last_heard_ms = Some(now_ms);
        // A message from the peer shows the link carries messages again. Our oldest message it
        // has not acknowledged, if it already timed out once (lost, most likely while the link
        // was cut), goes again now instead of at its backed-off timer (up to RTO_MAX_MS later):
        // at most once per RTO_INITIAL_MS, like a first timeout. After a partition of a second
        // this, not the next anti-entropy round, is what repairs the peer first.
        if let Some(u) = p.unacked.values_mut().next() {
            let timed_out = u.tries > 0 && now_ms.saturating_sub(u.sent_ms) >= RTO_INITIAL_MS;
            if timed_out || silent_ms >= PEER_SILENCE_MS {
                u.due_ms = now_ms;
                u.rto_ms = RTO_INITIAL_MS;
            }
        }
        if silent_ms >= PEER_SILENCE_MS {
            // Heard again after a silence (it was paused, cut off or overloaded): an
            // anti-entropy round repairs whatever was dropped.
            if p.up {
                p.needs_ae = true;
                p.next_ae_ms = now_ms;
            }
        }
        let mut effects = Vec::new();
        match env.body {
            Some(Body::Deltas(d)) => {
                // Decoded from the shared buffer: every key and state of the batch is a slice
                // of it, where decoding from a byte slice copied each into an allocation of
                // its own (two per key; on a replica under a bulk load the allocator was a
                // fifth of its time). Nothing kept beyond this message holds such a slice
                // (`merge_blobs` copies the keys it queues for GC).
                let Ok(batch) = <DeltaBatch as prost::Message>::decode(d.batch.clone()) else {
                    self.stats.bad_messages += 1;
                    return effects;
                };
                if d.member_ids.len() != d.member_ranks.len() {
                    self.stats.bad_messages += 1;
                    return effects;
                }
                if self.behind(&d.member_ids, &d.member_ranks)
                    && batch.entries.iter().any(|b| !self.keeps(&b.key))
                {
                    // The sender sent a key we do not keep under member records we have not
                    // heard of: most likely we gain its group by a change whose gossip has not
                    // reached us. Dropped and acknowledged, the write would be lost to us
                    // (the holders' streams may have passed the key before it was written);
                    // held back, the sender sends it again once we know (ARCHITECTURE §65).
                    self.move_stats.deltas_held_back += 1;
                    effects.push(Effect::MembersBehind);
                    return effects;
                }
                if !batch.skipped.is_empty() {
                    match state::codec().deserialize::<CausalContext>(&batch.skipped) {
                        Ok(cc) => self.seen.merge(&cc),
                        Err(_) => self.stats.bad_messages += 1,
                    }
                }
                let (changed, _) = self.merge_blobs(&batch.entries, true, db);
                effects.push(Effect::Keys(changed));
                if std::mem::take(&mut self.held_back_evicted) {
                    if self.partitioned() {
                        // No tree comparison runs between partitioned nodes: the key's
                        // other owners and the sender are asked for its whole state (§86).
                        self.send_fetches(Some(peer));
                    } else if let Some(p) = self.peers.get_mut(&peer).filter(|p| p.up) {
                        p.needs_ae = true;
                        p.next_ae_ms = now_ms;
                    }
                }
                let data = self.seen_report(d.seq);
                self.outbox.push(peer, data);
            }
            Some(Body::Ack(a)) => {
                let p = self.peers.entry(peer).or_default();
                if let Some(u) = p.unacked.remove(&a.seq) {
                    p.unacked_bytes -= u.data.len();
                }
                let vv: VersionVector = a
                    .seen_nodes
                    .iter()
                    .zip(a.seen_counters.iter())
                    .map(|(n, c)| (NodeId(*n), *c))
                    .collect();
                p.seen = Some(vv);
            }
            Some(Body::Digests(d)) => self.on_digests(peer, d, now_ms, db),
            Some(Body::States(s)) => {
                self.note_repairing(peer, now_ms);
                self.adopt_frontier(&s.frontier_nodes, &s.frontier_counters);
                let (changed, in_sync) = self.merge_blobs(&s.entries, false, db);
                self.stats.max_states_merged =
                    self.stats.max_states_merged.max(s.entries.len() as u64);
                effects.push(Effect::Keys(changed));
                if s.slice != 0 {
                    self.send_ae(peer, Body::SliceAck(SliceAck { slice: s.slice }));
                }
                if !s.want_leaves.is_empty() {
                    if let Some(p) = self.peers.get_mut(&peer) {
                        let skip = &mut p.transfer.skip;
                        for k in in_sync {
                            if skip.len() >= MAX_SKIP_KEYS {
                                break;
                            }
                            skip.insert(k);
                        }
                    }
                    self.owe_leaves(peer, &s.want_leaves, false, now_ms, db);
                }
            }
            Some(Body::SliceAck(a)) => {
                if let Some(p) = self.peers.get_mut(&peer) {
                    p.transfer.inflight.retain(|&(n, _)| n != a.slice);
                }
                self.pump_transfer(peer, now_ms, db);
            }
            Some(Body::Publish(p)) if p.shard => {
                effects.push(Effect::ShardPublish(p.channel, p.message))
            }
            Some(Body::Publish(p)) => effects.push(Effect::Publish(p.channel, p.message)),
            Some(Body::Members(m)) => effects.push(Effect::Members(m)),
            Some(Body::Forwards(f)) => effects.push(Effect::Forwards(f)),
            Some(Body::Functions(f)) if f.full => effects.push(Effect::Functions {
                peer,
                digest: f.digest,
                entries: f.entries,
            }),
            Some(Body::Functions(f)) => self.functions_received(peer, f.digest),
            Some(Body::Hot(h)) => self.on_hot(peer, h, now_ms, db),
            Some(Body::Hold(m)) => self.on_hold(peer, m, db),
            Some(Body::MoveSlice(m)) => self.on_move_slice(peer, m, data.len(), db, &mut effects),
            Some(Body::MoveAck(a)) => self.on_move_ack(peer, a, now_ms, db),
            Some(Body::MoveAsk(a)) => effects.push(Effect::MoveAsk(
                crate::cluster::Groups::from_bytes(&a.groups),
            )),
            None => self.stats.bad_messages += 1,
        }
        effects
    }

    /// Merges received states; returns the keys whose contents changed here and the keys that
    /// are now equal to what the sender holds (no need to send them back).
    /// Compact strings merged here hold their values until the node has made the store hold
    /// them ([`Replicator::value_stored`]), or are packed again at once when nothing changed.
    fn merge_blobs(
        &mut self,
        entries: &[KeyBlob],
        deltas: bool,
        db: &mut Db,
    ) -> (Vec<Bytes>, Vec<Bytes>) {
        let mut changed = Vec::new();
        let mut in_sync = Vec::new();
        self.patches.clear();
        self.messages_merged = self.messages_merged.wrapping_add(1);
        let hashes: Vec<u64> = entries
            .iter()
            .map(|b| lattice_store::key_hash(&b.key))
            .collect();
        for (i, b) in entries.iter().enumerate() {
            if !self.keeps(&b.key) {
                // Not ours to keep (a peer that does not know the same placement yet, a
                // state offered by anti-entropy, a delta of a hot copy given back while it
                // was on its way): its owners hold it. A delta's dots still count as seen,
                // as the contexts of a batch's `skipped` keys do, or GC would wait for them.
                if deltas {
                    match Assignment::decode(&b.state) {
                        Some(a) => self.seen.merge(&a.cc),
                        None => {
                            if let Ok(st) = state::codec().deserialize::<Full>(&b.state) {
                                st.contexts().iter().for_each(|c| self.seen.merge(c));
                            }
                        }
                    }
                }
                continue;
            }
            if i % PREFETCH_GROUP == 0 {
                // The next group's states are looked up back to back, so their cache misses
                // overlap instead of each merge waiting for its own.
                for j in i..entries.len().min(i + PREFETCH_GROUP) {
                    self.keys.prefetch(hashes[j], &entries[j].key);
                }
            }
            // The commonest delta, a string assignment, is read and joined without a `Full`.
            let incoming = match deltas.then(|| Assignment::decode(&b.state)).flatten() {
                Some(a) => Incoming::Assignment(a),
                None => match state::codec().deserialize::<Full>(&b.state) {
                    Ok(st) => Incoming::Full(Box::new(st)),
                    Err(_) => {
                        self.stats.bad_messages += 1;
                        continue;
                    }
                },
            };
            let h = hashes[i];
            if let Some(stub_digest) = self
                .keys
                .get(h, &b.key)
                .filter(|e| e.evicted)
                .map(|e| e.digest)
            {
                if deltas {
                    // A delta cannot be joined into an evicted key without the evicted value:
                    // it is left unmerged and its dots unseen (so no GC frontier passes them),
                    // and anti-entropy with its sender, due at once, brings the key's whole
                    // state, which holds the delta (ARCHITECTURE §79).
                    self.deltas_held_for_evicted += 1;
                    self.held_back_evicted = true;
                    if self.partitioned() {
                        self.holds.want_whole(&b.key);
                    }
                    continue;
                }
                if let Incoming::Full(st) = &incoming {
                    if st.digest(&b.key, &mut self.scratch).map(|d| d | 1) == Some(stub_digest) {
                        // The state evicted here: it stays evicted.
                        st.contexts().iter().for_each(|c| self.seen.merge(c));
                        in_sync.push(b.key.clone());
                        continue;
                    }
                }
                // A peer's whole state holds the evicted one (every replica merged its dots):
                // joined into the state that claims nothing, it is the key's state again.
                if let Some(e) = self.keys.get_keyed_mut(h, &b.key) {
                    Replicator::unevict(
                        e,
                        &b.key,
                        &mut self.evicted_stubs,
                        &mut self.evicted_deadlines,
                    );
                }
            }
            if deltas {
                self.stats.deltas_applied += 1;
            } else {
                self.stats.states_applied += 1;
            }
            match &incoming {
                Incoming::Assignment(a) => self.seen.merge(&a.cc),
                Incoming::Full(st) => st.contexts().iter().for_each(|c| self.seen.merge(c)),
            }
            // A hot key's copy is merged against no frontier: this node's frontier covers
            // dots of the key that reached it as other keys' skipped contexts before it held
            // the copy, so against it the copy would count elements it never received as
            // removed (ARCHITECTURE, "Hot keys"). Every state and delta arrives with its
            // sender's frontier spelled out in its contexts, so nothing is lost without it.
            // A group this replica gains is merged against no frontier either, for the same
            // reason: its seen-set took the dots of the group's keys as skipped contexts while
            // it did not own them (ARCHITECTURE, "Live membership"). Also once it holds the
            // group: a stream owed by an owner that learnt of the change late, or a push,
            // can still bring a key it never had.
            let frontier =
                if (self.hot.holds(&b.key) && !self.owns(&b.key)) || self.gained_key(&b.key) {
                    &self.no_frontier
                } else {
                    &self.frontier
                };
            let entry = self.keys.get_or_insert_with(h, &b.key, db, KeyEntry::fresh);
            let stored = stored_for(db, h, &b.key, &entry.state);
            // A delta into a large collection: the store is patched instead of rebuilt (and a
            // key merged twice in one message is rebuilt).
            let costly = deltas && entry.state.digest_is_costly();
            let patch = match &incoming {
                Incoming::Full(st) if costly => entry.state.patch_for(st),
                _ => None,
            };
            // A patch is relative to the state before this message: a key merged a second
            // time in the message (which a sender never does) is rebuilt instead.
            let again = entry.merged_in == self.messages_merged;
            entry.merged_in = self.messages_merged;
            match &incoming {
                Incoming::Assignment(a) => {
                    entry.state.merge_assignment(frontier, a, stored.as_deref())
                }
                Incoming::Full(st) => entry.state.merge(frontier, st, stored.as_deref()),
            }
            if !deltas {
                // A peer's whole state: it holds what an eviction here dropped.
                entry.partial = false;
            }
            if !entry.gc_queued && entry.state.may_hold_garbage() {
                entry.gc_queued = true;
                // A copy: the key may be a slice of a whole message (see `on_message`), which
                // would stay allocated for as long as the key waits in the queue.
                self.gc_queue.push((h, Bytes::copy_from_slice(&b.key)));
            }
            let moved = redigest(
                h,
                &b.key,
                entry,
                stored.as_deref(),
                &mut self.merkle,
                &mut self.stale_digests,
                &mut self.scratch,
            );
            let unchanged = !moved && patch.is_none();
            if !unchanged {
                changed.push(b.key.clone());
            }
            if again {
                self.patches.insert(b.key.clone(), None);
            } else if patch.is_some() {
                self.patches.insert(b.key.clone(), patch);
            }
            // Only a States message (anti-entropy) asks whether the sender holds the same.
            if let (false, Incoming::Full(st)) = (deltas, &incoming) {
                let ours = key_digest(&b.key, &entry.state, stored.as_deref(), &mut self.scratch);
                if Some(ours) == st.digest(&b.key, &mut self.scratch).map(|d| d | 1) {
                    in_sync.push(b.key.clone());
                }
            }
            if unchanged {
                // Nothing changed: the store holds this state's value already.
                entry.state.drop_value();
                self.keys.repack(h, &b.key, db);
            }
        }
        (changed, in_sync)
    }

    /// The message that starts a round (or answers one with equal roots): our root digest.
    fn root_digest(&mut self) -> Body {
        Body::Digests(Digests {
            level: 0,
            index: vec![0],
            digest: vec![self.merkle.root()],
        })
    }

    /// No GC yet: this (fully replicated) replica has not equalled every peer's tree since it
    /// started.
    fn gc_held(&self) -> bool {
        (self.catching_up && self.ownership.is_none() && self.cluster_size > 1)
            || !self.incoming.is_empty()
    }

    /// Our tree equalled `peer`'s: once it has equalled every peer's since the start, GC runs.
    fn note_synced(&mut self, peer: NodeId) {
        if !self.catching_up {
            return;
        }
        self.synced_peers.insert(peer);
        if self.synced_peers.len() + 1 >= self.cluster_size {
            self.catching_up = false;
            self.synced_peers.clear();
        }
    }

    /// `peer` showed a difference (digests that differ from ours, or states).
    fn note_repairing(&mut self, peer: NodeId, now_ms: u64) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.repairing_until_ms = now_ms + AE_REPAIRING_MS;
        }
    }

    /// Whether a round with `peer` (one it started, or one we are about to start) waits,
    /// because another live peer is repairing a difference with us right now. A replica that
    /// restarts, or comes back from a cut, hears from every peer at once, and every peer
    /// holding what it missed would otherwise compare the whole tree with it and ship the same
    /// states: the first repair usually makes it equal to the others too, and the deferred
    /// round then finds equal roots. Deferral is bounded by `AE_DEFER_MAX_MS` per peer; a
    /// deferred round is asked for again on our side (`needs_ae`), so it is never lost.
    fn defer_round(&mut self, peer: NodeId, now_ms: u64) -> bool {
        let busy_elsewhere = self.peers.iter().any(|(id, p)| {
            *id != peer && p.up && (p.repairing_until_ms > now_ms || p.transfer.busy())
        });
        let Some(p) = self.peers.get_mut(&peer) else {
            return false;
        };
        let since = *p.deferred_since_ms.get_or_insert(now_ms);
        if !busy_elsewhere || p.follow_up || now_ms >= since + AE_DEFER_MAX_MS {
            p.deferred_since_ms = None;
            p.follow_up = false;
            return false;
        }
        p.needs_ae = true;
        p.next_ae_ms = now_ms + AE_DEFER_RETRY_MS;
        self.stats.ae_rounds_deferred += 1;
        true
    }

    /// A large difference takes several rounds (each bounded): run the next one soon instead
    /// of waiting a whole interval. It continues this repair, so it is not deferred for
    /// another peer's (which under steady writes is always under way: periodic rounds find
    /// the deltas in flight), and whichever side found the bound starts it: the side that
    /// compares the leaves is the higher id when the lower one started the round. Deferred,
    /// a replica started empty next to 100,000 keys got one round of 4,096 leaves a second.
    fn hurry_ae(&mut self, peer: NodeId, now_ms: u64) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.next_ae_ms = p.next_ae_ms.min(now_ms + AE_FOLLOW_UP_MS);
            p.follow_up = true;
        }
    }

    fn on_digests(&mut self, peer: NodeId, d: Digests, now_ms: u64, db: &Db) {
        // Level 0 names its node (the root); a deeper level names parents, each followed by
        // the digests of all its children (see `wire::Digests`).
        let per_index = if d.level == 0 { 1 } else { FANOUT };
        if d.level > DEPTH || d.index.len() * per_index != d.digest.len() {
            self.stats.bad_messages += 1;
            return;
        }
        self.refresh_digests();
        if d.level == 0 && d.digest.first() == Some(&self.merkle.root()) {
            // Equal trees: nothing to repair. The initiator, when it is the lower id (periodic
            // rounds), learns it from our root in return; a root from the higher id is never
            // answered, so the exchange ends there.
            self.note_synced(peer);
            let replicated = self.ownership.is_none();
            if let Some(p) = self.peers.get_mut(&peer) {
                p.needs_ae = false;
                if replicated && !p.unacked.is_empty() {
                    // The peer's tree, as it sent it, equals ours now: it holds every state
                    // we hold, and so every delta captured before now, which is all that is
                    // kept for it. Resending them would only cost bytes: a backlog kept
                    // across a cut (§77) and half resent when the tree comparison already
                    // repaired the peer was resent again after the next cut.
                    p.unacked.clear();
                    p.unacked_bytes = 0;
                    self.stats.backlogs_made_redundant += 1;
                }
            }
            if peer < self.node {
                let root = self.root_digest();
                self.send_ae(peer, root);
            }
            return;
        }
        if d.level == 0 {
            if self.defer_round(peer, now_ms) {
                // Not answered: the peer's round ends here, ours follows later.
                return;
            }
            // The peer started a round: it repairs both sides, so ours is not needed.
            if let Some(p) = self.peers.get_mut(&peer) {
                p.needs_ae = false;
                p.follow_up = false;
            }
        }
        let width = merkle::width(d.level);
        let mut differing = Vec::new();
        let nodes = d
            .index
            .iter()
            .flat_map(|&i| (0..per_index).map(move |c| i as usize * per_index + c));
        for (i, &theirs) in nodes.zip(d.digest.iter()) {
            if i >= width {
                self.stats.bad_messages += 1;
                return;
            }
            if self.merkle.digest(d.level, i) != theirs {
                differing.push(i);
                if differing.len() >= MAX_AE_NODES {
                    self.hurry_ae(peer, now_ms);
                    break;
                }
            }
        }
        if differing.is_empty() {
            return;
        }
        self.note_repairing(peer, now_ms);
        if d.level < DEPTH {
            let level = d.level + 1;
            let mut index = Vec::new();
            let mut digest = Vec::new();
            for n in differing {
                index.push(n as u32);
                for c in n * FANOUT..(n + 1) * FANOUT {
                    digest.push(self.merkle.digest(level, c));
                }
            }
            self.send_ae(
                peer,
                Body::Digests(Digests {
                    level,
                    index,
                    digest,
                }),
            );
        } else {
            let leaves: Vec<u32> = differing.iter().map(|&l| l as u32).collect();
            self.owe_leaves(peer, &leaves, true, now_ms, db);
        }
    }

    /// Root of the Merkle tree: equal on replicas holding equal contents.
    pub fn digest(&mut self) -> u64 {
        self.refresh_digests();
        self.merkle.root()
    }

    /// Digests the keys whose digest was deferred (see `KeyEntry::digest_stale`): before
    /// anything reads the Merkle tree.
    fn refresh_digests(&mut self) {
        for (h, key) in std::mem::take(&mut self.stale_digests) {
            // Stale digests are of large collections, never packed.
            let Some(e) = self.keys.get_keyed_mut(h, &key) else {
                continue; // collected since
            };
            if !e.digest_stale {
                continue; // digested since (its state became small)
            }
            e.digest_stale = false;
            let digest = key_digest(&key, &e.state, None, &mut self.scratch);
            self.merkle
                .update(merkle::leaf_of(h), &key, e.digest, digest);
            e.digest = digest;
        }
    }

    /// How to update the store value of `key` after the last peer message (see
    /// [`KeyState::patch_for`]); None: rebuild it from the state.
    pub fn take_patch(&mut self, key: &[u8]) -> Option<Patch> {
        self.patches.remove(key).flatten()
    }

    pub fn info(&self, now_ms: u64, out: &mut String) {
        use std::fmt::Write as _;
        let up = self.peers.values().filter(|p| p.up).count();
        let tombstone_keys = self
            .keys
            .keyed_values()
            .filter(|e| e.state.is_empty() && !e.evicted)
            .count();
        let list_tombstones: usize = self.keys.keyed_values().map(|e| e.state.tombstones()).sum();
        // Keys outside the packed records, by form: a compact string still in the table waits
        // for the store to take its value (or shares its hash with a packed key); a general
        // state waits for GC to pass its dots. Both cost a table slot and a key copy, the
        // general one its `Full` besides: what keeps a replica above the packed key's bytes.
        let general_states = self
            .keys
            .keyed_values()
            .filter(|e| !e.state.is_compact_form())
            .count();
        let cloud: usize = self.seen.cloud().len();
        let _ = write!(
            out,
            "replication_mode:crdt\r\nnode_id:{}\r\ncluster_size:{}\r\npeers_connected:{}\r\nreplicated_keys:{}\r\ntombstones_pending_gc:{}\r\nlist_tombstones:{}\r\nseen_cloud_dots:{}\r\ndeltas_applied:{}\r\nstates_applied:{}\r\nbad_peer_messages:{}\r\nanti_entropy_rounds:{}\r\ngc_rounds:{}\r\nkeys_collected:{}\r\nclock_skew_exceeded:{}\r\n",
            self.node.0,
            self.cluster_size,
            up,
            self.keys.len(),
            tombstone_keys,
            list_tombstones,
            cloud,
            self.stats.deltas_applied,
            self.stats.states_applied,
            self.stats.bad_messages,
            self.stats.ae_rounds,
            self.stats.gc_rounds,
            self.stats.keys_collected,
            self.stats.skew_exceeded,
        );
        // Keys this replica evicted and still holds as stubs (ARCHITECTURE §79), and deltas
        // it left to anti-entropy because they reached such a stub.
        let _ = write!(
            out,
            "evicted_stubs:{}\r\ndeltas_held_for_evicted:{}\r\n",
            self.evicted_stubs, self.deltas_held_for_evicted
        );
        // Partitioned eviction (§86): the eviction pool, keys asked about and vouched for by
        // every other owner, and stubs' states asked for whole.
        let _ = write!(
            out,
            "eviction_pool_keys:{}\r\neviction_proofs_asked:{}\r\neviction_proofs_confirmed:{}\r\neviction_fetches:{}\r\n",
            self.holds.len(),
            self.holds.asked,
            self.holds.confirmed,
            self.holds.fetched
        );
        let _ = write!(
            out,
            "queued_keys:{}\r\ngc_sweep_pending_keys:{}\r\ngc_queued_keys:{}\r\npacked_keys:{}\r\ntable_keys:{}\r\ngeneral_states:{}\r\n",
            self.pending.len(),
            self.gc_sweep.len(),
            self.gc_queue.len(),
            self.keys.packed_len(),
            self.keys.len() - self.keys.packed_len(),
            general_states,
        );
        let sent: u64 = self.peers.values().map(|p| p.bytes_sent).sum();
        let received: u64 = self.peers.values().map(|p| p.bytes_received).sum();
        // The applied GC frontier and the dots merged here beyond it, summed over nodes: a
        // frontier that stops while writes go on is why general states pile up.
        let applied: u64 = self.frontier.iter().map(|(_, c)| c).sum();
        let seen: u64 = self.seen.vv().iter().map(|(_, c)| c).sum();
        let _ = write!(
            out,
            "gc_frontier_dots:{applied}\r\ndots_above_gc_frontier:{}\r\ngc_frontiers_adopted:{}\r\n",
            seen.saturating_sub(applied),
            self.stats.frontiers_adopted,
        );
        let _ = write!(
            out,
            "states_loaded:{}\r\nbacklogs_made_redundant:{}\r\n",
            self.stats.states_loaded, self.stats.backlogs_made_redundant
        );
        let _ = write!(
            out,
            "repl_bytes_sent:{sent}\r\nrepl_bytes_received:{received}\r\nanti_entropy_rounds_deferred:{}\r\ntransfer_slice_max_keys:{}\r\ntransfer_slice_max_bytes:{}\r\ntransfer_max_states_merged:{}\r\n",
            self.stats.ae_rounds_deferred,
            self.stats.max_slice_keys,
            self.stats.max_slice_bytes,
            self.stats.max_states_merged,
        );
        for (i, (id, p)) in self.peers.iter().enumerate() {
            let lag = p
                .last_heard_ms
                .map_or(-1, |t| now_ms.saturating_sub(t) as i64);
            let last_ae = p.last_ae_ms.map_or(-1, |t| now_ms.saturating_sub(t) as i64);
            let _ = write!(
                out,
                "peer{i}:id={},state={},last_heard_ms_ago={lag},unacked_msgs={},unacked_bytes={},last_anti_entropy_ms_ago={last_ae},delta_bytes_sent={},anti_entropy_bytes_sent={},overflows={},retransmits={},bytes_sent={},bytes_received={},transfer_owed_leaves={},transfer_inflight_slices={},transfer_slices_sent={},transfer_slice_timeouts={}\r\n",
                id.0,
                if p.up { "up" } else { "down" },
                p.unacked.len(),
                p.unacked_bytes,
                p.delta_bytes,
                p.ae_bytes,
                p.overflows,
                p.retransmits,
                p.bytes_sent,
                p.bytes_received,
                p.transfer.owed.len(),
                p.transfer.inflight.len(),
                p.transfer.slices_sent,
                p.transfer.timeouts,
            );
        }
    }

    /// `db`: the node's store, whose marks must name exactly the packed keys.
    pub fn check_invariants(&self, db: &Db) {
        self.keys.check_invariants(db);
        self.check_group_sums(db, None);
        self.check_queues();
        self.holds.check_invariants();
    }

    /// Starts noting which keys' states change, for [`Replicator::take_changes`].
    pub fn track_changes(&mut self) {
        self.keys.track_changes();
    }

    /// The hashes of the keys whose replicated states may have changed since the last call;
    /// [`lattice_store::Changed::Everything`] on the first.
    pub fn take_changes(&mut self) -> lattice_store::Changed {
        self.keys.take_changes()
    }

    /// [`Replicator::check_invariants`] for the keys hashed `hashes` (sorted, deduplicated):
    /// the key map's leaves they fall in, and every queue and bound.
    pub fn check_changed(&self, hashes: &[u64], db: &Db) {
        self.keys.check_changed(hashes, db);
        self.check_group_sums(db, Some(hashes));
        self.check_queues();
    }

    /// The delta queue, the deferred captures, the peers' buffers and transfers: bounded and
    /// consistent. Costs what they hold, not the keyspace.
    fn check_queues(&self) {
        self.hot.check_invariants();
        assert!(
            self.pending.len() <= MAX_QUEUED_KEYS,
            "delta queue over its bound"
        );
        assert!(
            self.deferred.len() <= MAX_QUEUED_KEYS,
            "deferred captures over their bound"
        );
        assert!(
            self.deferred.is_empty() || self.flush_due_ms.is_some(),
            "deferred captures with no flush planned"
        );
        self.pending.check_invariants();
        for p in self.peers.values() {
            let sum: usize = p.unacked.values().map(|u| u.data.len()).sum();
            assert_eq!(sum, p.unacked_bytes, "unacked byte count drifted");
            assert!(
                p.transfer.inflight.len() <= SLICE_WINDOW,
                "transfer window exceeded"
            );
            assert!(
                p.transfer.skip.len() <= MAX_SKIP_KEYS,
                "skip list over its bound"
            );
            assert!(
                p.up || !p.transfer.busy(),
                "a transfer to a peer that is down"
            );
        }
        // Every sender is this code: a slice over the bound, sent or merged, is a step of a
        // transfer that held the node longer than its budget.
        let bound = self.slice_keys as u64;
        assert!(
            self.stats.max_slice_keys <= bound,
            "an anti-entropy slice of {} keys exceeds the bound of {bound}",
            self.stats.max_slice_keys
        );
        assert!(
            self.stats.max_states_merged <= bound,
            "a merged anti-entropy message of {} states exceeds the bound of {bound}",
            self.stats.max_states_merged
        );
    }
}

/// A received key state: a plain string assignment read by hand, or any state in general form.
enum Incoming {
    Assignment(Assignment),
    Full(Box<Full>),
}

/// A key's whole state as anti-entropy ships it; with `short` (a move slice), a compact
/// state in its short form instead (§89), which the returned flag says.
fn key_blob(
    key: &Bytes,
    state: &KeyState,
    wire: &mut CompactWire,
    frontier: &VersionVector,
    db: &Db,
    scratch: &mut Vec<u8>,
    short: bool,
) -> (KeyBlob, bool) {
    let stored = stored_for(db, lattice_store::key_hash(key), key, state);
    let is_short = short && state.encode_move_short(stored.as_deref(), scratch);
    if !is_short {
        state.encode_into(wire, frontier, stored.as_deref(), scratch);
    }
    let blob = KeyBlob {
        key: key.clone(),
        state: Bytes::copy_from_slice(scratch),
    };
    (blob, is_short)
}

/// Leaves in `scratch` the encoding of `key`'s whole state as anti-entropy ships it.
fn encode_key_state(
    key: &[u8],
    state: &KeyState,
    wire: &mut CompactWire,
    frontier: &VersionVector,
    db: &Db,
    scratch: &mut Vec<u8>,
) {
    let stored = stored_for(db, lattice_store::key_hash(key), key, state);
    state.encode_into(wire, frontier, stored.as_deref(), scratch);
}

fn encode_state_into(st: &Full, scratch: &mut Vec<u8>) {
    scratch.clear();
    if st.encode_assignment_into(scratch) {
        return;
    }
    state::codec()
        .serialize_into(&mut *scratch, st)
        .expect("in-memory states always encode");
}

/// One queued delta: a string assignment already in its wire form (`len` bytes at `at` of
/// [`PendingDeltas::wire`], the value's copy `value_len` bytes at `value_at`), or any other
/// in general form.
enum Queued {
    Wire {
        stamp: AssignStamp,
        at: usize,
        len: usize,
        value_at: usize,
        value_len: usize,
    },
    Full(Box<Full>),
}

/// A delta taken from the queue, its encoding left in the taker's buffer: what a partitioned
/// flush still needs of it, its contexts.
enum Taken {
    Stamp(AssignStamp),
    Full(Box<Full>),
}

impl Taken {
    /// Joins the delta's causal contexts into `cc`.
    fn merge_contexts_into(&self, cc: &mut CausalContext) {
        match self {
            Taken::Stamp(s) => cc.merge(&s.context()),
            Taken::Full(f) => f.contexts().iter().for_each(|c| cc.merge(c)),
        }
    }
}

/// The wire buffer's capacity kept when the queue empties. A flush every few milliseconds
/// takes a few thousand SETs at most under a saturating load (about 100 bytes each for
/// 64-byte values), well within it; a burst of large values that grew it further gives the
/// excess back instead of holding it as resident memory for good.
const WIRE_KEEP_BYTES: usize = 1 << 20;

/// Where a queued key is in `PendingDeltas::keys`: (offset, length).
type KeyAt = (usize, usize);

/// Deltas captured since the last flush: one per key (a later capture of a queued key merges
/// into its delta), sent in capture order. A hash index finds a queued key without the
/// ordered map's search, which cost as much as the capture itself under random-key writes.
#[derive(Default)]
struct PendingDeltas {
    /// (key hash, where the key is in `keys`, delta), oldest first.
    queue: VecDeque<(u64, KeyAt, Queued)>,
    /// The queued keys, back to back (emptied with the queue): a key is copied in here rather
    /// than held as a `Bytes`, whose first clone allocated (the writer's second allocation
    /// per replicated SET, after the deferred key's own copy).
    keys: Vec<u8>,
    /// Entries taken from the front so far: `queue[i]` is entry number `popped + i`.
    popped: usize,
    /// The entry number of each queued key, hashed by its key hash.
    index: HashTable<(u64, usize)>,
    /// The wire forms of the queued assignments, back to back (emptied with the queue). An
    /// assignment coalesced with a later delta leaves its bytes here unused until then: at
    /// most one such range per queued key.
    wire: Vec<u8>,
}

impl PendingDeltas {
    fn len(&self) -> usize {
        self.queue.len()
    }

    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    fn clear(&mut self) {
        self.queue.clear();
        self.popped = 0;
        self.index.clear();
        self.clear_wire();
    }

    fn clear_wire(&mut self) {
        self.wire.clear();
        self.wire.shrink_to(WIRE_KEEP_BYTES);
        self.keys.clear();
        self.keys.shrink_to(WIRE_KEEP_BYTES);
    }

    fn key(&self, at: KeyAt) -> &[u8] {
        &self.keys[at.0..at.0 + at.1]
    }

    /// Heap bytes (the queue's entries and the wire buffer), for `Replicator::memory`.
    fn heap_bytes(&self) -> usize {
        self.queue.capacity() * std::mem::size_of::<(u64, KeyAt, Queued)>()
            + self.wire.capacity()
            + self.keys.capacity()
    }

    /// Queues `delta` for `key` (`value`: the store's string, which an assignment assigns),
    /// merging it into a queued delta of the same key. Returns false (and queues nothing)
    /// when a new key would exceed `bound` keys.
    fn push(&mut self, hash: u64, key: &[u8], delta: Delta, value: &[u8], bound: usize) -> bool {
        let (queue, popped, keys) = (&self.queue, self.popped, &self.keys);
        let found = self.index.find(hash, |&(h, n)| {
            let (at, len) = queue[n - popped].1;
            h == hash && keys[at..at + len] == *key
        });
        if let Some(&(_, n)) = found {
            // Rare: a string key's capture waits for the flush, so a key is captured twice in
            // one window only when a command of the other intent or a read of the replicated
            // state came between. Both sides in general form, joined.
            let queued = &mut self.queue[n - self.popped].2;
            match queued {
                Queued::Full(f) => f.merge(&delta.into_full(value)),
                Queued::Wire {
                    stamp,
                    value_at,
                    value_len,
                    ..
                } => {
                    let mut full = stamp.to_full(&self.wire[*value_at..*value_at + *value_len]);
                    full.merge(&delta.into_full(value));
                    *queued = Queued::Full(Box::new(full));
                }
            }
            return true;
        }
        if self.queue.len() >= bound {
            return false;
        }
        let queued = match delta {
            Delta::Assign(stamp) => {
                let at = self.wire.len();
                let value_at = stamp.encode_into(value, &mut self.wire);
                Queued::Wire {
                    stamp,
                    at,
                    len: self.wire.len() - at,
                    value_at,
                    value_len: value.len(),
                }
            }
            Delta::Full(f) => Queued::Full(f),
            Delta::Unchanged => return true,
        };
        let n = self.popped + self.queue.len();
        let key_at = (self.keys.len(), key.len());
        self.keys.extend_from_slice(key);
        self.queue.push_back((hash, key_at, queued));
        self.index.insert_unique(hash, (hash, n), |&(h, _)| h);
        true
    }

    /// The oldest queued delta: its key left in `key` and its encoding in `out` (replacing
    /// their contents).
    fn pop_front(&mut self, key: &mut Vec<u8>, out: &mut Vec<u8>) -> Option<Taken> {
        let (hash, key_at, queued) = self.queue.pop_front()?;
        key.clear();
        key.extend_from_slice(self.key(key_at));
        let n = self.popped;
        self.popped += 1;
        if let Ok(e) = self.index.find_entry(hash, |&(h, at)| h == hash && at == n) {
            e.remove();
        }
        out.clear();
        let taken = match queued {
            Queued::Wire { stamp, at, len, .. } => {
                out.extend_from_slice(&self.wire[at..at + len]);
                Taken::Stamp(stamp)
            }
            Queued::Full(f) => {
                encode_state_into(&f, out);
                Taken::Full(f)
            }
        };
        if self.queue.is_empty() {
            self.clear_wire();
        }
        Some(taken)
    }

    fn check_invariants(&self) {
        assert_eq!(
            self.index.len(),
            self.queue.len(),
            "pending index and queue disagree"
        );
        for &(h, n) in &self.index {
            let queued = n.checked_sub(self.popped).and_then(|i| self.queue.get(i));
            assert!(
                queued.is_some_and(|(qh, _, _)| *qh == h),
                "pending index points at another entry"
            );
        }
        for (_, (at, len), q) in &self.queue {
            assert!(at + len <= self.keys.len(), "a queued key past the buffer");
            if let Queued::Wire {
                at,
                len,
                value_at,
                value_len,
                ..
            } = q
            {
                assert!(
                    at <= value_at
                        && value_at + value_len <= at + len
                        && at + len <= self.wire.len(),
                    "a queued wire form past the buffer"
                );
            }
        }
    }
}

/// Hot keys (see `hot`): the owners' side of the `Hot` messages and the copies.
impl Replicator {
    /// A `Hot` message from `peer`.
    fn on_hot(&mut self, peer: NodeId, h: wire::Hot, now_ms: u64, db: &Db) {
        match h.op() {
            Some(wire::HotOp::Subscribe) => {
                let mut granted = Vec::new();
                for key in h.keys {
                    // Only an owner sends a key's deltas; a node that does not own the key
                    // (the placement it knows differs) grants nothing.
                    if self.ownership.is_none() || !self.owns(&key) {
                        continue;
                    }
                    match self
                        .hot
                        .add_holder(&key, peer.0, now_ms + hot::HOT_LEASE_MS)
                    {
                        None => continue,
                        Some(true) => {
                            self.send_hot_state(peer, &key, now_ms, db);
                            let what = format!(
                                "{} copied to node {} ({} holders)",
                                hot::shown(&key),
                                peer.0,
                                self.hot.holders_of(&key)
                            );
                            self.hot.note(now_ms, what);
                        }
                        Some(false) => {}
                    }
                    granted.push(key);
                }
                if !granted.is_empty() {
                    self.send_control(
                        peer,
                        Body::Hot(wire::Hot {
                            op: wire::HotOp::Grant as u32,
                            keys: granted,
                        }),
                    );
                }
            }
            Some(wire::HotOp::Unsubscribe) => {
                for key in h.keys {
                    if self.hot.remove_holder(&key, peer.0) {
                        let what = format!("{} given back by node {}", hot::shown(&key), peer.0);
                        self.hot.note(now_ms, what);
                    }
                }
            }
            Some(wire::HotOp::Grant) => {
                for key in h.keys {
                    self.hot.granted(peer.0, &key);
                }
            }
            None => self.stats.bad_messages += 1,
        }
    }

    /// The whole state of `key` to a new holder, as a numbered delta (retransmitted until
    /// acknowledged, like any delta); nothing for a key that holds nothing here.
    fn send_hot_state(&mut self, peer: NodeId, key: &Bytes, now_ms: u64, db: &Db) {
        let h = lattice_store::key_hash(key);
        let Some(entry) = self.keys.get_any(h, key, db).filter(|e| !e.evicted) else {
            return;
        };
        let (blob, _) = key_blob(
            key,
            &entry.state,
            self.compact_wire.get_mut(),
            &self.frontier,
            db,
            &mut self.scratch,
            false,
        );
        let mut writer = wire::BatchWriter::default();
        writer.push(key, &blob.state);
        let batch = writer.finish();
        self.send_deltas(peer, batch, false, now_ms);
    }

    /// Asks the owners for copies of (or renews) `keys`, or gives them back.
    pub fn send_hot(&mut self, owners: &[u32], op: wire::HotOp, keys: Vec<Bytes>) {
        if keys.is_empty() {
            return;
        }
        for &o in owners {
            let up = self.peers.get(&NodeId(o)).is_some_and(|p| p.up);
            if up {
                let body = Body::Hot(wire::Hot {
                    op: op as u32,
                    keys: keys.clone(),
                });
                self.send_control(NodeId(o), body);
            }
        }
    }

    /// Drops the copy of hot key `key` without replicating anything (it was never ours):
    /// forgets its state and returns true; the caller removes it from the store. A key this
    /// node owns by now (its group moved here while the copy was held) is no copy any more:
    /// it stays, state and value (removing only the value left an owner answering `none`
    /// from a state it still held: the simulator's membership runs found it).
    pub fn forget_copy(&mut self, key: &[u8], db: &mut Db) -> bool {
        if !self.hot.unhold(key) || self.owns(key) {
            return false;
        }
        let h = lattice_store::key_hash(key);
        if let Some(e) = self.keys.remove(h, key, db) {
            self.merkle.update(merkle::leaf_of(h), key, e.digest, 0);
        }
        true
    }

    /// Owner side, from the timer: leases that ran out.
    fn expire_holders(&mut self, now_ms: u64) {
        for (key, peer) in self.hot.expire(now_ms) {
            let what = format!("{} lease of node {} ran out", hot::shown(&key), peer);
            self.hot.note(now_ms, what);
        }
    }
}

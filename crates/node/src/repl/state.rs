//! One key's replicated state, and the two bridges between it and the store:
//! [`Full::capture`] turns a local command's effect into a delta, and
//! [`Full::materialize`] turns a merged state back into the value clients read.
//!
//! # Shape
//! A key's state is the product of one CRDT per Redis type plus an expiry register:
//! strings are an observed-remove map with a single entry holding a [`Reg`] (LWW bytes plus
//! counter contributions), hashes map fields to [`Reg`]s, sets are an [`OrSet`], sorted sets map
//! members to a [`Counter`] score, lists are an [`Rga`]. Products of lattices are lattices, so
//! the join is component-wise and the merge laws hold if they hold for each part (checked by the
//! property tests below). Every write takes fresh dots; DEL is an observed-remove of every
//! component.
//!
//! # Which type is visible
//! Normally only one component is non-empty. When replicas concurrently create the key with
//! different types, all components survive the join and the visible type is the non-empty one
//! whose latest write has the highest hybrid timestamp (`stamps`). The next local write to the
//! key clears, as observed-remove, every other component, so the clash heals on the first write.
//!
//! # Why capture by comparison
//! Commands run against the store with Redis's exact semantics (and replies). Afterwards
//! `capture` compares the store's new value with the state's visible value, which by invariant
//! is the value before the command, and emits the CRDT operations that explain the difference.
//! This keeps one implementation of every command; the command name only says whether a
//! numeric change is an increment (counters add up) or an assignment (last writer wins).
//! The cost is proportional to the value's size, which is fine for the values Lattice replicates
//! today; per-element hints for very large collections are left for later (docs/ARCHITECTURE.md).

use std::borrow::Cow;
use std::collections::BTreeMap;

use bincode::Options as _;
use bytes::Bytes;
use lattice_crdt::{
    CausalContext, Counter, CounterValue, Crdt, Dot, Hlc, LwwRegister, NodeId, Number, OrMap,
    OrSet, Rga, VersionVector,
};
use lattice_store::hash::Limits as HashLimits;
use lattice_store::list::End;
use lattice_store::{Hash, List, Set, Str, Value, ZSet};
use serde::{Deserialize, Serialize};

use super::hint::ChangeHint;
use crate::cmd::hll::format as hll;

mod assign_wire;
mod compact_wire;
pub use assign_wire::{AssignStamp, Assignment};
pub use compact_wire::{expand_move_short, CompactWire};

/// The types a key can hold, in a fixed order (the tie-break of equal stamps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Str = 0,
    Hash = 1,
    Set = 2,
    ZSet = 3,
    List = 4,
}

const KINDS: [Kind; 5] = [Kind::Str, Kind::Hash, Kind::Set, Kind::ZSet, Kind::List];

/// What a command did to a key's numbers: increments add up across replicas, assignments
/// replace (last writer wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    Assign,
    Increment,
    /// A HyperLogLog's registers raised (PFADD, PFMERGE) or its bytes rewritten with the same
    /// registers (PFCOUNT's cached count, PFDEBUG's dense form). The HLL keeps the stamp of the
    /// assignment it grew from (none: the least stamp, for an HLL a PFADD or PFMERGE created),
    /// so concurrent raises of one HLL meet at equal stamps and merge register by register
    /// (see [`Reg`]'s merge); a rewrite with the same registers is no write at all.
    Registers,
}

/// A string or hash field: a base written by the last winning assignment plus, per node, the
/// net increments applied on top of that base (the counter rule of `lattice_crdt::Counter`,
/// with a byte-string base so non-numeric strings are plain LWW registers).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reg {
    base_ts: Hlc,
    base: Bytes,
    parts: BTreeMap<NodeId, Part>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Part {
    /// Grows with every write by the part's node: the higher one is newer.
    seq: u64,
    int: i128,
    float: f64,
    has_float: bool,
}

impl Reg {
    fn assigned(value: Bytes, ts: Hlc) -> Reg {
        Reg {
            base_ts: ts,
            base: value,
            parts: BTreeMap::new(),
        }
    }

    /// The register after a local command left `new` in it: counters record the change as
    /// this node's increment, everything else is an assignment at `ts`.
    fn written(old: Option<Reg>, new: &[u8], intent: Intent, node: NodeId, ts: Hlc) -> Reg {
        match (intent, old) {
            (Intent::Increment, Some(mut r)) => {
                let old_value = r.value();
                increment(&mut r, &old_value, new, node, ts);
                r
            }
            (Intent::Increment, None) => {
                // The implicit base of a new counter has the least timestamp, so concurrent
                // INCRs of a missing key all count.
                let mut r = Reg::assigned(Bytes::from_static(b"0"), Hlc::ZERO);
                increment(&mut r, b"0", new, node, ts);
                r
            }
            (Intent::Registers, old) if hll::is_hll(new) => {
                let mut bytes = new.to_vec();
                // The cached count is the node's own business: stale in the replicated bytes,
                // as after any raise, so that it never tells two replicas' states apart.
                hll::invalidate_cache(&mut bytes);
                match old {
                    // Grows the HLL it was: the same base stamp, counters kept as they were.
                    Some(r) if hll::is_hll(&r.base) => Reg {
                        base_ts: r.base_ts,
                        base: Bytes::from(bytes),
                        parts: r.parts,
                    },
                    // Created by PFADD or PFMERGE: the least stamp, as a counter INCR created,
                    // so concurrent creations on several replicas all count.
                    None => Reg::assigned(Bytes::from(bytes), Hlc::ZERO),
                    // Over something else (a type clash healing): an assignment.
                    Some(_) => Reg::assigned(Bytes::from(bytes), ts),
                }
            }
            (Intent::Assign | Intent::Registers, _) => {
                Reg::assigned(Bytes::copy_from_slice(new), ts)
            }
        }
    }

    /// The bytes clients read.
    pub fn value(&self) -> Bytes {
        if self.parts.is_empty() {
            return self.base.clone();
        }
        let int_sum: i128 = self
            .parts
            .values()
            .fold(0i128, |a, p| a.saturating_add(p.int));
        let any_float = self.parts.values().any(|p| p.has_float);
        let base_int = std::str::from_utf8(&self.base)
            .ok()
            .and_then(|s| s.parse::<i64>().ok());
        match (any_float, base_int) {
            (false, Some(b)) => Bytes::from(i128::from(b).saturating_add(int_sum).to_string()),
            _ => {
                // A float result: summed in a fixed order so every replica computes the same
                // bits, printed like INCRBYFLOAT.
                let mut f = parse_f64(&self.base).unwrap_or(0.0) + int_sum as f64;
                for p in self.parts.values() {
                    if p.has_float {
                        f += p.float;
                    }
                }
                Bytes::from(format_float(f))
            }
        }
    }

    fn add(&mut self, node: NodeId, int: i128, float: Option<f64>) {
        let part = self.parts.entry(node).or_default();
        part.seq += 1;
        part.int = part.int.saturating_add(int);
        if let Some(f) = float {
            part.float += f;
            part.has_float = true;
        }
    }
}

impl Crdt for Reg {
    fn merge(&mut self, other: &Self) {
        if other.base_ts > self.base_ts {
            self.clone_from(other);
            return;
        }
        if other.base_ts < self.base_ts {
            return;
        }
        #[cfg(feature = "planted-bug")]
        if !other.parts.is_empty() {
            // Planted replication bug (canary for the checkers): adopt the other side's
            // contributions wholesale, losing increments only this side has seen.
            self.parts = other.parts.clone();
            return;
        }
        // Equal timestamps: one assignment (timestamps are unique per write) and the HLLs
        // grown from it by PFADD/PFMERGE, or the implicit zero base of a counter INCR created
        // or of an HLL PFADD created. Two different HLLs join register by register (the max
        // of each, `hll::join`); other bases keep a deterministic one. At the least stamp the
        // bases are "0" and HLLs, and "0" sorts below every HLL, so this is a join there too.
        if other.base != self.base {
            match hll::join(&self.base, &other.base) {
                Some(joined) => self.base = Bytes::from(joined),
                None if other.base > self.base => self.base = other.base.clone(),
                None => {}
            }
        }
        for (node, theirs) in &other.parts {
            let mine = self.parts.entry(*node).or_default();
            if theirs.seq > mine.seq {
                *mine = *theirs;
            }
        }
    }
}

/// Everything one replica knows about one key, in the general form: deltas, states on the
/// wire, and the stored state of any key that does not fit [`KeyState`]'s compact forms.
///
/// Serialized (for peer messages) as a presence mask followed by the components that differ
/// from their default, see the impls below.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Full {
    string: OrMap<(), Reg>,
    hash: OrMap<Bytes, Reg>,
    set: OrSet<Bytes>,
    zset: OrMap<Bytes, Counter>,
    list: Rga<Bytes>,
    /// Absolute deadline in ms (None: persistent), last writer wins.
    expiry: LwwRegister<Option<u64>>,
    /// Per kind, the greatest timestamp of a write of that kind (a max-register): picks the
    /// visible type after concurrent creations with different types.
    stamps: [Hlc; 5],
    /// Dots of writes that only remove (DEL, SREM, expiry): recorded so that "every replica has
    /// seen dot d" implies it has seen the removal too, which GC relies on.
    removals: CausalContext,
}

/// Calls `$m!(field, bit)` for every field of [`Full`] in its serialized order: the one
/// list the encoding and the decoding below share, so they cannot disagree on it.
macro_rules! key_state_fields {
    ($m:ident) => {
        $m!(string, 0);
        $m!(hash, 1);
        $m!(set, 2);
        $m!(zset, 3);
        $m!(list, 4);
        $m!(expiry, 5);
        $m!(stamps, 6);
        $m!(removals, 7);
    };
}

// A delta usually touches one component (a string write: the string, its type stamp), yet the
// derived encoding wrote all eight, each with its maps and contexts: most of a delta's bytes
// and of the varints a replica decodes per replicated write. Now a presence mask (bit `b` for
// the field listed with `b`) says which fields follow; absent ones are their defaults. A
// tuple, so bincode writes no lengths for it.
impl Serialize for Full {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple as _;
        let none = Full::default();
        let mut mask = 0u8;
        macro_rules! mark {
            ($field:ident, $bit:expr) => {
                if self.$field != none.$field {
                    mask |= 1 << $bit;
                }
            };
        }
        key_state_fields!(mark);
        let mut t = s.serialize_tuple(1 + mask.count_ones() as usize)?;
        t.serialize_element(&mask)?;
        macro_rules! put {
            ($field:ident, $bit:expr) => {
                if mask & (1 << $bit) != 0 {
                    t.serialize_element(&self.$field)?;
                }
            };
        }
        key_state_fields!(put);
        t.end()
    }
}

impl<'de> Deserialize<'de> for Full {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = Full;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a presence mask and the key state fields it names")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Full, A::Error> {
                let mask: u8 = seq
                    .next_element()?
                    .ok_or_else(|| serde::de::Error::invalid_length(0, &Fields))?;
                let mut st = Full::default();
                macro_rules! take {
                    ($field:ident, $bit:expr) => {
                        if mask & (1 << $bit) != 0 {
                            st.$field = seq.next_element()?.ok_or_else(|| {
                                serde::de::Error::invalid_length($bit + 1, &Fields)
                            })?;
                        }
                    };
                }
                key_state_fields!(take);
                Ok(st)
            }
        }
        // The most elements a state can have: the mask and all eight fields.
        d.deserialize_tuple(9, Fields)
    }
}

/// Where new dots and timestamps come from (the node's clock and event counter).
pub struct Stamper<'a> {
    pub node: NodeId,
    pub ts: Hlc,
    pub counter: &'a mut VersionVector,
    /// Every dot issued, so the node's seen-set covers its own writes.
    pub issued: &'a mut CausalContext,
}

impl Stamper<'_> {
    fn dot(&mut self) -> Dot {
        let d = self.counter.next_dot(self.node);
        self.issued.insert(d);
        d
    }
}

impl Full {
    fn is_empty_kind(&self, k: Kind) -> bool {
        match k {
            Kind::Str => self.string.is_empty(),
            Kind::Hash => self.hash.is_empty(),
            Kind::Set => self.set.is_empty(),
            Kind::ZSet => self.zset.is_empty(),
            Kind::List => self.list.is_empty(),
        }
    }

    /// Whether no component holds anything (the key is deleted; the state is a tombstone).
    pub fn is_empty(&self) -> bool {
        KINDS.iter().all(|k| self.is_empty_kind(*k))
    }

    /// The deadline in ms, if any.
    pub fn deadline_ms(&self) -> Option<u64> {
        *self.expiry.value()
    }

    /// The type clients see (ignoring expiry).
    pub fn visible_kind(&self) -> Option<Kind> {
        KINDS
            .iter()
            .copied()
            .filter(|k| !self.is_empty_kind(*k))
            .max_by_key(|k| (self.stamps[*k as usize], *k))
    }

    /// The HLC of the winning string write.
    pub fn string_stamp(&self) -> Option<Hlc> {
        self.string.get(&()).map(|r| r.base_ts)
    }

    /// The greatest stamp of any write in this state: a replica recovering its own states
    /// observes it, so its next writes order after the ones it made before a restart even if
    /// its clock went back.
    pub fn latest_stamp(&self) -> Hlc {
        self.stamps.iter().copied().max().unwrap_or_default()
    }

    /// Every dot this state has seen (for the node's seen-set).
    pub fn contexts(&self) -> [&CausalContext; 6] {
        [
            self.string.context(),
            self.hash.context(),
            self.set.context(),
            self.zset.context(),
            self.list.context(),
            &self.removals,
        ]
    }

    /// The bytes a key's digest covers, or None when the key holds nothing. Causal contexts
    /// are left out and a tombstone looks like an absent key: replicas with equal contents
    /// must have equal digests even when they garbage-collected at different times.
    /// `scratch` is a reusable buffer: the covered bytes are serialized into it and hashed in
    /// one call, which costs far less than streaming each small field into the hasher.
    pub fn digest(&self, key: &[u8], scratch: &mut Vec<u8>) -> Option<u64> {
        if self.is_empty() && self.list.tombstones() == 0 {
            return None;
        }
        scratch.clear();
        if self.hash.entries().is_empty()
            && self.set.entries().is_empty()
            && self.zset.entries().is_empty()
            && self.list.elements_held() == 0
        {
            // A string (or tombstone) alone, the common case: the same fields laid out by hand,
            // several times cheaper than going through serde.
            self.string_digest_bytes(key, scratch);
            return Some(xxhash_rust::xxh3::xxh3_64(scratch));
        }
        // Lists are cloned without their context (their elements are private to the RGA);
        // the other components are serialized borrowed.
        let list = (self.list.elements_held() > 0).then(|| self.list.stripped());
        codec()
            .serialize_into(
                &mut *scratch,
                &(
                    key,
                    self.string.entries(),
                    self.hash.entries(),
                    self.set.entries(),
                    self.zset.entries(),
                    list,
                    &self.expiry,
                    self.stamps,
                ),
            )
            .ok()?;
        Some(xxhash_rust::xxh3::xxh3_64(scratch))
    }

    /// What `digest` covers of a state with no collection component (see
    /// [`string_digest_bytes`]).
    fn string_digest_bytes(&self, key: &[u8], out: &mut Vec<u8>) {
        let groups = self.string.entries().values();
        string_digest_bytes(
            key,
            groups.map(|dots| {
                dots.iter()
                    .map(|(d, r)| (d, r.base_ts, &r.base[..], &r.parts))
            }),
            &self.expiry,
            self.stamps,
            out,
        );
    }

    /// A key with nothing here: every context is `frontier` (everything at or below it counts
    /// as seen and, since nothing is held, removed).
    fn fresh(frontier: &VersionVector) -> Full {
        let mut f = Full::default();
        if !frontier.is_empty() {
            f.gc(frontier);
        }
        f
    }

    /// The compact form this state is exactly (given `frontier`, see [`KeyState`]): `Some(None)`
    /// for nothing, `Some(Some(..))` for a plain string, `None` when it fits neither.
    fn compact_shape(&self, frontier: &VersionVector) -> Option<Option<CompactStr>> {
        self.plain_shape(Some(frontier)).map(|s| {
            s.map(|(dot, reg, over)| CompactStr {
                dot,
                ts: reg.base_ts,
                value: Some(reg.base.to_vec().into_boxed_slice()),
                over,
            })
        })
    }

    /// Whether this state has a compact form's shape and only a frontier short of its
    /// contexts keeps it general: a GC pass past them compacts it (see
    /// [`KeyState::may_hold_garbage`]).
    fn awaits_frontier(&self) -> bool {
        self.plain_shape(None).is_some()
    }

    /// [`Full::compact_shape`] without the value's copy: `Some(None)` for nothing, `Some(Some(
    /// (dot, register, over)))` for a plain string whose string context holds, beyond the
    /// frontier and its dot, at most the one dot `over` (see [`CompactStr::over`]). With
    /// `frontier` None the contexts are not checked (what the shape would be once a frontier
    /// covers them; `over` is then None).
    #[allow(clippy::type_complexity)]
    fn plain_shape(
        &self,
        frontier: Option<&VersionVector>,
    ) -> Option<Option<(Dot, &Reg, Option<Dot>)>> {
        let covered =
            |c: &CausalContext, dot: Option<Dot>| frontier.is_none_or(|f| c.covered_by(f, dot));
        let others_bare = self.hash.is_empty()
            && self.set.is_empty()
            && self.zset.is_empty()
            && self.list.is_empty()
            && self.list.elements_held() == 0
            && self.expiry == LwwRegister::default()
            && self.stamps[1..].iter().all(|h| *h == Hlc::ZERO)
            && covered(&self.removals, None)
            && covered(self.hash.context(), None)
            && covered(self.set.context(), None)
            && covered(self.zset.context(), None)
            && covered(self.list.context(), None);
        if !others_bare {
            return None;
        }
        let entries = self.string.entries();
        if entries.is_empty() {
            let bare = self.stamps[0] == Hlc::ZERO && covered(self.string.context(), None);
            return bare.then_some(None);
        }
        let mut dots = entries.values().next()?.iter();
        let (dot, reg) = dots.next()?;
        let single = dots.next().is_none() && reg.parts.is_empty() && reg.base_ts == self.stamps[0];
        if !single {
            return None;
        }
        let over = match frontier {
            None => None,
            Some(f) => self.string.context().dot_beyond(f, *dot)?,
        };
        Some(Some((*dot, reg, over)))
    }

    /// When this delta is a plain string assignment and nothing else (one dot, no counter
    /// parts, its stamp the string's type stamp, every other component and the deadline
    /// untouched): its dot and register.
    fn plain_assignment(&self) -> Option<(Dot, &Reg)> {
        let mut entries = self.string.entries().values();
        let dots = entries.next()?;
        if entries.next().is_some() || dots.len() != 1 {
            return None;
        }
        let (dot, reg) = dots.iter().next()?;
        let alone = reg.parts.is_empty()
            && reg.base_ts == self.stamps[Kind::Str as usize]
            && self.stamps[1..].iter().all(|h| *h == Hlc::ZERO)
            && KINDS[1..].iter().all(|&k| self.leaves_kind(k))
            && self.expiry == LwwRegister::default()
            && self.removals.is_empty();
        alone.then_some((*dot, reg))
    }

    /// Drops causal metadata below the stable frontier (see `lattice_crdt::Crdt::gc`).
    pub fn gc(&mut self, stable: &VersionVector) {
        self.string.gc(stable);
        self.hash.gc(stable);
        self.set.gc(stable);
        self.zset.gc(stable);
        self.list.gc(stable);
        self.removals.raise_to(stable);
    }

    /// True when the state is a tombstone all of whose dots are at or below `stable`: every
    /// replica has seen everything about this key, so the state can be forgotten and the key
    /// treated as "absent with context `stable`".
    pub fn collectable(&self, stable: &VersionVector) -> bool {
        self.is_empty()
            && self
                .contexts()
                .iter()
                .all(|c| c.cloud().is_empty() && stable.dominates(c.vv()))
            && self.list.tombstones() == 0
    }

    /// Nothing left for GC to do: no dots outside the contexts' vectors, no list tombstones,
    /// and the key has contents (a tombstoned key waits to be forgotten).
    pub fn is_compact(&self) -> bool {
        !self.is_empty()
            && self.list.tombstones() == 0
            && self.contexts().iter().all(|c| c.cloud().is_empty())
    }

    /// Whether GC may find something to drop here: the exact [`Full::is_compact`] when that is
    /// cheap, else yes (it counts a list's tombstones). For the write paths, which must not
    /// cost the size of the value; the GC visit itself asks the exact question.
    pub fn may_hold_garbage(&self) -> bool {
        self.is_empty()
            || self.list.elements_held() > 0
            || self.contexts().iter().any(|c| !c.cloud().is_empty())
    }

    /// Elements held across the collection components (list tombstones included). O(1).
    fn elements_held(&self) -> usize {
        self.hash.len() + self.set.len() + self.zset.len() + self.list.elements_held()
    }

    /// Whether component `k` of this delta is its default: it writes nothing of that type.
    fn leaves_kind(&self, k: Kind) -> bool {
        // Empty entries and an empty context: the default, without building one to compare.
        match k {
            Kind::Str => self.string.is_empty() && self.string.context().is_empty(),
            Kind::Hash => self.hash.is_empty() && self.hash.context().is_empty(),
            Kind::Set => self.set.is_empty() && self.set.context().is_empty(),
            Kind::ZSet => self.zset.is_empty() && self.zset.context().is_empty(),
            Kind::List => self.list.elements_held() == 0 && self.list.context().is_empty(),
        }
    }

    /// Tombstones held (list elements removed but not yet collected), a GC metric.
    pub fn tombstones(&self) -> usize {
        self.list.tombstones()
    }

    /// The value clients should see at `now_ms`, or None if the key is absent or expired.
    pub fn materialize(&self, limits: &Limits) -> Option<Value> {
        let kind = self.visible_kind()?;
        Some(match kind {
            Kind::Str => {
                let r = self.string.get(&())?;
                Value::Str(Str::from_bytes(&r.value()))
            }
            Kind::Hash => {
                let mut h = Hash::new();
                let compact = HashLimits {
                    max_entries: limits.hash_max_entries,
                    max_value: limits.hash_max_value,
                };
                for (f, r) in self.hash.iter() {
                    h.insert(f, &r.value(), compact);
                }
                Value::Hash(Box::new(h))
            }
            Kind::Set => {
                let mut s = Set::new();
                for m in self.set.iter() {
                    s.insert(m, limits.set_max_intset_entries);
                }
                Value::Set(Box::new(s))
            }
            Kind::ZSet => {
                let mut z = ZSet::new();
                for (m, c) in self.zset.iter() {
                    z.insert(m, score_of(&c));
                }
                z.convert_if_needed(limits.zset_max_entries, limits.zset_max_value);
                Value::ZSet(Box::new(z))
            }
            Kind::List => {
                let mut l = List::new();
                for (_, v) in self.list.iter_visible() {
                    l.push(End::Tail, v);
                }
                Value::List(Box::new(l))
            }
        })
    }

    /// Records what a local command did to this key. `now` is the store's value after the
    /// command (None: the key is gone) with its deadline; the state's visible value is what the
    /// key held before. Applies the operations here and returns them as a delta.
    /// `hint`: what the command says it changed (see [`ChangeHint`]); the capture then looks
    /// at those elements only, when they explain the new value.
    pub fn capture(
        &mut self,
        now: Option<(&Value, Option<u64>)>,
        intent: Intent,
        overwrote: bool,
        hint: Option<ChangeHint<'_>>,
        st: &mut Stamper<'_>,
    ) -> Full {
        let mut delta = Full::default();
        let ts = st.ts;
        // Streams are not replicated yet: a key holding a stream is captured as absent.
        let now = now.filter(|(v, _)| !matches!(v, Value::Stream(_)));
        let Some((value, deadline)) = now else {
            if !self.is_empty() {
                self.clear_all(&mut delta, None, st);
            }
            return delta;
        };
        let kind = kind_of(value);
        // A write clears what this replica saw of every other type (heals type clashes, and
        // replaces a value of another type as SET or SORT ... STORE do).
        self.clear_all(&mut delta, Some(kind), st);
        let mut wrote = false;
        let mut removed = false;
        match value {
            Value::Str(s) => {
                let new = s.as_bytes();
                let old = self.string.get(&()).map(|r| r.into_owned());
                // An assignment is a new stamp even of the same bytes; an increment by zero, a
                // deadline change or an HLL rewritten with the same registers (a cached count,
                // another encoding) leaves the register alone.
                let unchanged = match intent {
                    Intent::Registers => old.as_ref().is_some_and(|r| {
                        let was = r.value();
                        was[..] == new[..] || hll::same_registers(&was, &new)
                    }),
                    _ => {
                        !(overwrote && intent == Intent::Assign)
                            && old.as_ref().is_some_and(|r| r.value()[..] == new[..])
                    }
                };
                if !unchanged {
                    let dots = self.string.entries().get(&()).map_or(0, |d| d.len());
                    let part = match intent {
                        Intent::Registers => raised_part(old.as_ref(), &new, dots),
                        _ => None,
                    };
                    let dot = st.dot();
                    let d = match part {
                        Some(part) => self.string.put_beside((), part, dot),
                        None => {
                            let reg = Reg::written(old, &new, intent, st.node, ts);
                            self.string.put((), reg, dot)
                        }
                    };
                    delta.string.absorb(d);
                    wrote = true;
                }
            }
            Value::Hash(h) => {
                let mut field = |f: &[u8], now: Option<&[u8]>, this: &mut Full| {
                    this.capture_field(f, now, intent, &mut delta, st)
                };
                // The named fields first; when they account for every field, nothing else
                // changed and the comparison of the whole hash is skipped.
                let named = hint.as_ref().and_then(ChangeHint::elements);
                let hinted = named.is_some();
                for f in named.into_iter().flatten() {
                    let (w, r) = field(f, h.get(f), self);
                    wrote |= w;
                    removed |= r;
                }
                if !hinted || self.hash.len() != h.len() {
                    let gone: Vec<Bytes> = self
                        .hash
                        .keys()
                        .filter(|f| !h.contains(f))
                        .cloned()
                        .collect();
                    for f in gone {
                        let (w, r) = field(&f, None, self);
                        wrote |= w;
                        removed |= r;
                    }
                    for (f, v) in h.iter() {
                        wrote |= field(f, Some(v), self).0;
                    }
                }
            }
            Value::Set(s) => {
                let mut member = |m: &[u8], now: bool, this: &mut Full| {
                    this.capture_member(m, now, &mut delta, st)
                };
                // As for hashes: the named members, and the whole set only when they do not
                // account for it.
                let named = hint.as_ref().and_then(ChangeHint::elements);
                let hinted = named.is_some();
                for m in named.into_iter().flatten() {
                    let (w, r) = member(m, s.contains(m), self);
                    wrote |= w;
                    removed |= r;
                }
                if !hinted || self.set.len() != s.len() {
                    let gone: Vec<Bytes> = self
                        .set
                        .iter()
                        .filter(|m| !s.contains(m))
                        .cloned()
                        .collect();
                    for m in gone {
                        let (w, r) = member(&m, false, self);
                        wrote |= w;
                        removed |= r;
                    }
                    for m in s.iter() {
                        wrote |= member(&m, true, self).0;
                    }
                }
            }
            Value::ZSet(z) => {
                let gone: Vec<Bytes> = self
                    .zset
                    .keys()
                    .filter(|m| !z.contains(m))
                    .cloned()
                    .collect();
                for m in gone {
                    delta.zset.absorb(self.zset.remove(&m));
                    wrote = true;
                    removed = true;
                }
                for (m, score) in z.iter() {
                    let old = self.zset.get(m).map(|c| c.into_owned());
                    if old.as_ref().is_some_and(|c| score_of(c) == score) {
                        continue;
                    }
                    let counter = match (intent, old) {
                        (Intent::Increment, Some(mut c)) => {
                            let by = score - score_of(&c);
                            if c.incr_float(st.node, by).is_err() {
                                let _ = c.set(Number::Float(score), ts);
                            }
                            c
                        }
                        _ => {
                            let mut c = Counter::new();
                            let _ = c.set(Number::Float(score), ts);
                            c
                        }
                    };
                    let dot = st.dot();
                    delta
                        .zset
                        .absorb(self.zset.put(Bytes::copy_from_slice(m), counter, dot));
                    wrote = true;
                }
            }
            Value::List(l) => {
                let pushed = match hint {
                    Some(ChangeHint::Pushed { end, count }) if count <= l.len() => {
                        Some((end, count))
                    }
                    _ => None,
                };
                wrote |= match pushed {
                    Some((end, count)) => self.capture_push(l, end, count, &mut delta, st),
                    None => self.capture_list(l, &mut delta, st),
                };
            }
            Value::Stream(_) => {} // filtered out above
        }
        if removed {
            self.record_removal(&mut delta, st);
        }
        if wrote {
            self.stamps[kind as usize] = self.stamps[kind as usize].max(ts);
            delta.stamps[kind as usize] = ts;
        }
        if self.deadline_ms() != deadline {
            delta.expiry = self.expiry.set(deadline, ts);
        }
        delta
    }

    /// Lists: keep the common prefix and suffix, remove the old middle, insert the new middle
    /// after the prefix. Pushes and pops at either end touch only the ends.
    fn capture_list(&mut self, new: &List, delta: &mut Full, st: &mut Stamper<'_>) -> bool {
        let old: Vec<(Hlc, Bytes)> = self
            .list
            .iter_visible()
            .map(|(id, v)| (id, v.clone()))
            .collect();
        let new: Vec<&[u8]> = new.iter().collect();
        let prefix = old
            .iter()
            .zip(new.iter())
            .take_while(|(a, b)| a.1[..] == b[..])
            .count();
        let max_suffix = old.len().min(new.len()) - prefix;
        let suffix = old
            .iter()
            .rev()
            .zip(new.iter().rev())
            .take(max_suffix)
            .take_while(|(a, b)| a.1[..] == b[..])
            .count();
        let removed = &old[prefix..old.len() - suffix];
        let inserted = &new[prefix..new.len() - suffix];
        if removed.is_empty() && inserted.is_empty() {
            return false;
        }
        if !removed.is_empty() {
            let by = self.record_removal(delta, st);
            for (id, _) in removed {
                if let Ok(d) = self.list.remove(*id, by) {
                    delta.list.absorb(d);
                }
            }
        }
        // Insert the new middle in order, each after the previous one.
        let mut anchor = if prefix > 0 {
            Some(old[prefix - 1].0)
        } else {
            None
        };
        for (i, v) in inserted.iter().enumerate() {
            let id = Hlc {
                logical: st.ts.logical.wrapping_add(i as u32),
                ..st.ts
            };
            let id = self.fresh_list_id(id);
            let dot = st.dot();
            let value = Bytes::copy_from_slice(v);
            let d = match anchor {
                Some(a) => self.list.insert_after(a, id, dot, value),
                None => self.list.push_front(id, dot, value),
            };
            if let Ok(d) = d {
                delta.list.absorb(d);
                anchor = Some(id);
            }
        }
        true
    }

    /// A push the command reported (see [`ChangeHint::Pushed`]): the last `count` elements of
    /// `new` at the tail, or its first `count` at the head, inserted at that end of the RGA
    /// with fresh ids. Costs the push, not the list. The caller vouches that the key did not
    /// expire during the command, so the list before it was this state's.
    fn capture_push(
        &mut self,
        new: &List,
        end: End,
        count: usize,
        delta: &mut Full,
        st: &mut Stamper<'_>,
    ) -> bool {
        // Inserted in the order that leaves each new element where the store has it: a head
        // push lands before every element (so the last one inserted is first), a tail push
        // after every element.
        // Each end is read from that end (reversing a `take` or `skip` walks the whole list),
        // then put in insertion order: a head push inserts its last element first.
        let mut values: Vec<&[u8]> = match end {
            End::Head => new.iter().take(count).collect(),
            End::Tail => new.iter().rev().take(count).collect(),
        };
        values.reverse();
        for (i, v) in values.into_iter().enumerate() {
            let id = self.fresh_list_id(Hlc {
                logical: st.ts.logical.wrapping_add(i as u32),
                ..st.ts
            });
            let dot = st.dot();
            let value = Bytes::copy_from_slice(v);
            let d = match end {
                End::Head => self.list.push_front(id, dot, value),
                End::Tail => self.list.push_back(id, dot, value),
            };
            if let Ok(d) = d {
                delta.list.absorb(d);
            }
        }
        count > 0
    }

    /// One hash field after a local command: `now` is its value in the store (None: gone).
    /// Returns (whether anything was written, whether it was a removal).
    fn capture_field(
        &mut self,
        f: &[u8],
        now: Option<&[u8]>,
        intent: Intent,
        delta: &mut Full,
        st: &mut Stamper<'_>,
    ) -> (bool, bool) {
        let Some(v) = now else {
            if !self.hash.contains_key(f) {
                return (false, false);
            }
            delta.hash.absorb(self.hash.remove(f));
            return (true, true);
        };
        let old = self.hash.get(f).map(|r| r.into_owned());
        if old.as_ref().is_some_and(|r| r.value()[..] == *v) {
            return (false, false);
        }
        let reg = Reg::written(old, v, intent, st.node, st.ts);
        let dot = st.dot();
        delta
            .hash
            .absorb(self.hash.put(Bytes::copy_from_slice(f), reg, dot));
        (true, false)
    }

    /// One set member after a local command: `now` is whether the store's set holds it.
    /// Returns (whether anything was written, whether it was a removal).
    fn capture_member(
        &mut self,
        m: &[u8],
        now: bool,
        delta: &mut Full,
        st: &mut Stamper<'_>,
    ) -> (bool, bool) {
        match (now, self.set.contains(m)) {
            (true, false) => {
                let dot = st.dot();
                delta
                    .set
                    .absorb(self.set.add(Bytes::copy_from_slice(m), dot));
                (true, false)
            }
            (false, true) => {
                delta.set.absorb(self.set.remove(m));
                (true, true)
            }
            _ => (false, false),
        }
    }

    /// List ids must be unique and, for the RGA order, greater than every id already present.
    fn fresh_list_id(&self, candidate: Hlc) -> Hlc {
        match self.list.max_elem_id() {
            Some(max) if max >= candidate => Hlc {
                wall_ms: max.wall_ms,
                logical: max.logical.saturating_add(1),
                node: candidate.node,
            },
            _ => candidate,
        }
    }

    /// Gives a removal its own dot, so that "every replica has seen dot d" implies it has
    /// merged the removal (GC forgets whole tombstoned keys on that basis). Returns the dot.
    fn record_removal(&mut self, delta: &mut Full, st: &mut Stamper<'_>) -> Dot {
        let d = st.dot();
        self.removals.insert(d);
        delta.removals.insert(d);
        d
    }

    /// Observed-remove of every component except `keep`.
    fn clear_all(&mut self, delta: &mut Full, keep: Option<Kind>, st: &mut Stamper<'_>) {
        let mut removed = false;
        if keep != Some(Kind::Str) && !self.string.is_empty() {
            delta.string.absorb(self.string.clear());
            removed = true;
        }
        if keep != Some(Kind::Hash) && !self.hash.is_empty() {
            delta.hash.absorb(self.hash.clear());
            removed = true;
        }
        if keep != Some(Kind::Set) && !self.set.is_empty() {
            delta.set.absorb(self.set.clear());
            removed = true;
        }
        if keep != Some(Kind::ZSet) && !self.zset.is_empty() {
            delta.zset.absorb(self.zset.clear());
            removed = true;
        }
        if keep != Some(Kind::List) && !self.list.is_empty() {
            let by = self.record_removal(delta, st);
            for id in self.list.visible_ids() {
                if let Ok(d) = self.list.remove(id, by) {
                    delta.list.absorb(d);
                }
            }
        } else if removed {
            self.record_removal(delta, st);
        }
        if keep.is_none() && self.deadline_ms().is_some() {
            // A deleted key forgets its deadline: a later write starts a persistent key.
            delta.expiry = self.expiry.set(None, st.ts);
        }
    }
}

impl Crdt for Full {
    fn merge(&mut self, other: &Self) {
        self.string.merge(&other.string);
        self.hash.merge(&other.hash);
        self.set.merge(&other.set);
        self.zset.merge(&other.zset);
        self.list.merge(&other.list);
        self.expiry.merge(&other.expiry);
        for (mine, theirs) in self.stamps.iter_mut().zip(other.stamps) {
            *mine = (*mine).max(theirs);
        }
        self.removals.merge(&other.removals);
    }

    fn gc(&mut self, stable: &VersionVector) {
        Full::gc(self, stable);
    }
}

/// One key's stored state: the general [`Full`] form, or a compact form for the two states a
/// replica holds for almost every key.
///
/// # Why compact forms
/// A `Full` is a product of five CRDTs and three contexts: about 520 bytes inline, plus a
/// B-tree node (about 1 KiB, sized for eleven entries) for a string's single dot. With 100,000
/// replicated 64-byte strings that was 2,880 heap bytes per key against 142 for the store alone
/// (`cargo run --release -p lattice-node --example repl_memory`). Yet the state of a key that
/// was written once, by a plain assignment, says only: "this value, written at stamp `ts` with
/// dot `dot`; nothing else was ever seen here beyond what every replica has seen".
///
/// # What a compact form stands for
/// `Str { dot, ts, value }` is the `Full` whose string component holds `{dot: value assigned at
/// ts}`, whose type stamp for strings is `ts`, whose other components and deadline are their
/// defaults, and every one of whose causal contexts is the replicator's applied GC frontier
/// (plus `dot` for the string). `Empty` is the state of a key with nothing here: every context
/// is the frontier (`Full::fresh`). The frontier is passed in wherever the
/// full form is needed ([`KeyState::expand`]), so a compact state's contexts grow with the
/// frontier: exactly what a GC pass would do to the full form, and sound for the same reason
/// (every replica has merged every dot at or below it).
///
/// A state is compacted after every change when its full form is exactly that shape
/// ([`KeyState::compacted`]); a string overwritten while its previous dot is still above the
/// frontier stays full until the GC round that passes it (the overwritten dot must stay in the
/// context until then, or a late copy of the old write would come back).
///
/// # The value in the store
/// A compact string need not hold its value: the store holds it ([`KeyState::value_in_store`]).
/// A local write leaves it there; a merged one until the store has been brought up to date
/// ([`KeyState::drop_value`]). Whatever needs the value of such a state (its full form, its
/// digest, its wire encoding) takes the store's string for the key as `stored`. Between a
/// command and its capture the store already holds the new value, so the capture uses the new
/// value in its place: exact, because the old value of a compact string only matters to an
/// increment (the node copies it back from the store before an incrementing command runs,
/// [`KeyState::keep_value`]) and to deciding whether a deadline-only command changed nothing
/// (it never changes the value).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeyState {
    repr: Repr,
}

#[derive(Clone, Debug, Default, PartialEq)]
enum Repr {
    #[default]
    Empty,
    Str(CompactStr),
    Full(Box<Full>),
}

#[derive(Clone, Debug, PartialEq)]
struct CompactStr {
    dot: Dot,
    ts: Hlc,
    /// None: the store holds the value (see the type's doc).
    value: Option<Box<[u8]>>,
    /// The one dot beyond the frontier the string's context holds besides `dot`, if any: the
    /// write this one overwrote, while the frontier does not cover it yet. Without it a key
    /// written again within the GC lag (a second or so under load) took the general form,
    /// whose capture, merge and later compaction cost several times the compact path's
    /// (ARCHITECTURE §83). GC drops it once the frontier covers it.
    over: Option<Dot>,
}

impl CompactStr {
    /// The value: held here, or `stored`.
    fn value<'a>(&'a self, stored: Option<&'a [u8]>) -> &'a [u8] {
        match (&self.value, stored) {
            (Some(v), _) => v,
            (None, Some(v)) => v,
            (None, None) => {
                // Every caller passes the store's value where a state may lack its own; an
                // empty string here would be a wrong value, so a test or simulation fails.
                debug_assert!(false, "a compact string without its value, none passed");
                &[]
            }
        }
    }

    fn reg(&self, stored: Option<&[u8]>) -> Reg {
        Reg::assigned(Bytes::copy_from_slice(self.value(stored)), self.ts)
    }
}

/// What a local capture produced ([`KeyState::capture`]).
#[derive(Debug, PartialEq)]
pub enum Delta {
    /// The command changed nothing that replicates: no new metadata, nothing to send.
    Unchanged,
    /// A plain assignment of the store's new string, as its stamp alone: the caller encodes
    /// it with the store's bytes ([`AssignStamp::encode_into`]).
    Assign(AssignStamp),
    /// Any other delta (boxed: a `Full` is about 500 bytes, the rest a few dozen).
    Full(Box<Full>),
}

impl Delta {
    /// The delta in the general form (`value`: the store's string, for an assignment).
    pub fn into_full(self, value: &[u8]) -> Full {
        match self {
            Delta::Unchanged => Full::default(),
            Delta::Assign(a) => a.to_full(value),
            Delta::Full(f) => *f,
        }
    }
}

/// A compact string whose value is in the store, reduced to its stamp (see
/// [`KeyState::packed`]): its dot and the timestamp of its write, issued by the same node.
/// 24 bytes, so that a replicated key's own bytes stay a fraction of its store entry's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packed {
    counter: u64,
    wall_ms: u64,
    node: u32,
    logical: u32,
}

impl KeyState {
    /// The general form of this state, given the replicator's applied GC frontier. `stored`:
    /// the store's string for the key (see the type's doc), needed when
    /// [`KeyState::value_in_store`].
    pub fn expand(&self, frontier: &VersionVector, stored: Option<&[u8]>) -> Cow<'_, Full> {
        match &self.repr {
            Repr::Full(f) => Cow::Borrowed(f),
            Repr::Empty => Cow::Owned(Full::fresh(frontier)),
            Repr::Str(c) => {
                let mut f = Full::fresh(frontier);
                let reg = c.reg(stored);
                let mut cc = CausalContext::from_vv(frontier);
                if let Some(o) = c.over {
                    cc.insert(o);
                }
                f.string = OrMap::singleton((), c.dot, reg, cc);
                f.stamps[Kind::Str as usize] = c.ts;
                Cow::Owned(f)
            }
        }
    }

    /// Whether this is a compact string whose value only the store holds.
    pub fn value_in_store(&self) -> bool {
        matches!(&self.repr, Repr::Str(c) if c.value.is_none())
    }

    /// Forgets a compact string's own copy of its value: the caller has made the store hold it.
    pub fn drop_value(&mut self) {
        if let Repr::Str(c) = &mut self.repr {
            c.value = None;
        }
    }

    /// Takes a copy of the value back from the store (`stored`) into a compact string that
    /// lacks one: before a command that increments it changes the store's copy.
    pub fn keep_value(&mut self, stored: &[u8]) {
        if let Repr::Str(c) = &mut self.repr {
            if c.value.is_none() {
                c.value = Some(stored.into());
            }
        }
    }

    /// This state as its stamp alone, when it is a compact string whose value is in the store
    /// and whose timestamp was issued with its dot (as every local write's is).
    pub fn packed(&self) -> Option<Packed> {
        match &self.repr {
            Repr::Str(c) if c.value.is_none() && c.over.is_none() && c.ts.node == c.dot.node => {
                Some(Packed {
                    counter: c.dot.counter,
                    wall_ms: c.ts.wall_ms,
                    node: c.dot.node.0,
                    logical: c.ts.logical,
                })
            }
            _ => None,
        }
    }

    /// The state [`KeyState::packed`] reduced to `p`.
    pub fn unpacked(p: Packed) -> KeyState {
        let node = NodeId(p.node);
        KeyState {
            repr: Repr::Str(CompactStr {
                dot: Dot {
                    node,
                    counter: p.counter,
                },
                ts: Hlc::new(p.wall_ms, p.logical, node),
                value: None,
                over: None,
            }),
        }
    }

    /// The state holding `full`, in a compact form when it fits one (see the type's doc).
    pub fn compacted(full: Full, frontier: &VersionVector) -> KeyState {
        let repr = match full.compact_shape(frontier) {
            Some(None) => Repr::Empty,
            Some(Some(c)) => Repr::Str(c),
            None => Repr::Full(Box::new(full)),
        };
        KeyState { repr }
    }

    /// Mutable access to the full form, expanding a compact state first (`stored` as for
    /// [`KeyState::expand`]). The caller compacts again when done ([`KeyState::recompact`]).
    fn full_mut(&mut self, frontier: &VersionVector, stored: Option<&[u8]>) -> &mut Full {
        if !matches!(self.repr, Repr::Full(_)) {
            let full = self.expand(frontier, stored).into_owned();
            self.repr = Repr::Full(Box::new(full));
        }
        match &mut self.repr {
            Repr::Full(f) => f,
            _ => unreachable!("expanded above"),
        }
    }

    fn recompact(&mut self, frontier: &VersionVector) {
        if let Repr::Full(f) = &mut self.repr {
            let full = std::mem::take(&mut **f);
            *self = KeyState::compacted(full, frontier);
        }
    }

    /// Whether every dot this state holds or has seen is within `frontier` (the applied GC
    /// frontier, which every replica has merged): then every replica's state of the key
    /// contains this one, except for the deadline, which is written without a dot (see
    /// [`KeyState::deadline_register`]). A tombstone or an absent key is never settled: there
    /// is nothing to evict.
    pub fn settled_under(&self, frontier: &VersionVector) -> bool {
        match &self.repr {
            Repr::Empty => false,
            Repr::Str(c) => frontier.contains(c.dot) && c.over.is_none_or(|o| frontier.contains(o)),
            Repr::Full(f) => {
                !f.is_empty() && f.contexts().iter().all(|c| c.covered_by(frontier, None))
            }
        }
    }

    /// The deadline register of a general state when it was ever written (a compact string
    /// has none): what an evicted key keeps, since a deadline change takes no dot and a
    /// peer's state may lack it.
    pub fn deadline_register(&self) -> Option<LwwRegister<Option<u64>>> {
        match &self.repr {
            Repr::Full(f) if f.expiry != LwwRegister::default() => Some(f.expiry.clone()),
            _ => None,
        }
    }

    /// The state that claims nothing: no contents and empty contexts, unlike
    /// [`KeyState::default`], whose context is the applied frontier. What an evicted key's
    /// state becomes before anything is joined into it: joined with a peer's state it is
    /// that state, and a local write onto it is a write concurrent with whatever the key held
    /// elsewhere. `deadline`: the register the evicted state had.
    pub fn claiming_nothing(deadline: Option<LwwRegister<Option<u64>>>) -> KeyState {
        let mut f = Full::default();
        if let Some(d) = deadline {
            f.expiry = d;
        }
        KeyState {
            repr: Repr::Full(Box::new(f)),
        }
    }

    /// The delta that removes, on every replica, whatever an evicted key held (FLUSHALL on
    /// the node that evicted it): a removal whose contexts are the applied frontier, which
    /// covers every dot of the evicted state, plus a fresh removal dot. Also the state the
    /// key takes here.
    pub fn removal_of_settled(frontier: &VersionVector, st: &mut Stamper<'_>) -> Full {
        let mut f = Full::fresh(frontier);
        let mut delta = Full::fresh(frontier);
        f.record_removal(&mut delta, st);
        delta
    }

    /// A general state from `full` as it is (no compaction: the caller's contexts are exact).
    pub fn from_full(full: Full) -> KeyState {
        KeyState {
            repr: Repr::Full(Box::new(full)),
        }
    }

    /// Whether the state is held in a compact form (for INFO and tests).
    pub fn is_compact_form(&self) -> bool {
        !matches!(self.repr, Repr::Full(_))
    }

    /// Records what a local command did to this key (see [`Full::capture`]); returns the delta.
    /// A compact string's value after it is the store's (it holds none of its own), and a
    /// compact string without its value before takes the store's new one in its place (see
    /// the type's doc).
    pub fn capture(
        &mut self,
        frontier: &VersionVector,
        now: Option<(&Value, Option<u64>)>,
        intent: Intent,
        overwrote: bool,
        hint: Option<ChangeHint<'_>>,
        st: &mut Stamper<'_>,
    ) -> Delta {
        // The common write, a plain assignment of a persistent string over nothing or over a
        // compact string, is built directly: the same state and delta as the general path
        // below, without expanding into a `Full` and compacting back, and the delta as its
        // stamp (the store holds the value).
        if let (Some((Value::Str(s), None)), Intent::Assign) = (now, intent) {
            let old = match &self.repr {
                Repr::Empty => Some(None),
                Repr::Str(c) => Some(Some(c)),
                Repr::Full(_) => None,
            };
            if let Some(old) = old {
                let new = s.as_bytes();
                if let Some(c) = old {
                    if !overwrote && c.value(Some(&new[..])) == &new[..] {
                        return Delta::Unchanged;
                    }
                }
                let stamp = AssignStamp {
                    dot: st.dot(),
                    ts: st.ts,
                    overwritten: old.map(|c| c.dot),
                };
                // The old value leaves with its dot, which stays in the context until the
                // frontier covers it (so does the dot it had overwritten, if any): the result
                // is the join of the expanded old state and the delta (the old entry goes, its
                // dot named by the delta's context; the new one joins, its dot unseen here),
                // built without building either. One such dot fits the compact form.
                let unstable = |d: &Dot| !frontier.contains(*d);
                let (kept_dot, kept_over) = match old {
                    Some(c) => (Some(c.dot).filter(unstable), c.over.filter(unstable)),
                    None => (None, None),
                };
                // An old stamp above the new one (a clock set back across a restart) must
                // stay the type's stamp, as the general join keeps it: only the general form
                // holds a type stamp apart from the register's.
                let old_ts = old.map_or(Hlc::ZERO, |c| c.ts);
                let one_kept = match (kept_dot, kept_over) {
                    (Some(a), Some(b)) if a != b => None,
                    (Some(_), _) | (_, Some(_)) if old_ts > stamp.ts => None,
                    (a, b) => Some(a.or(b)),
                };
                if let Some(over) = one_kept {
                    self.repr = Repr::Str(CompactStr {
                        dot: stamp.dot,
                        ts: stamp.ts,
                        value: None,
                        over,
                    });
                } else {
                    let mut full = Full::fresh(frontier);
                    let mut cc = CausalContext::from_vv(frontier);
                    kept_dot
                        .into_iter()
                        .chain(kept_over)
                        .for_each(|d| cc.insert(d));
                    let reg = Reg::assigned(Bytes::copy_from_slice(&new), stamp.ts);
                    full.string = OrMap::singleton((), stamp.dot, reg, cc);
                    full.stamps[Kind::Str as usize] = old_ts.max(stamp.ts);
                    self.repr = Repr::Full(Box::new(full));
                }
                return Delta::Assign(stamp);
            }
        }
        // The store's new string stands in for a value the state lacks (see the type's doc).
        debug_assert!(
            !(self.value_in_store() && intent != Intent::Assign),
            "an increment or register raise of a string whose old value was not kept"
        );
        let new_str = match now {
            Some((Value::Str(s), _)) => Some(s.as_bytes()),
            _ => None,
        };
        let stand_in = new_str.as_deref().unwrap_or(&[]);
        let delta = self
            .full_mut(frontier, Some(stand_in))
            .capture(now, intent, overwrote, hint, st);
        self.recompact(frontier);
        // The store holds the new value, except after an HLL rewritten with the same
        // registers (a cached count, another encoding): that is no write, so the state keeps
        // the bytes it had (the node copied them back before the command, `keep_value`), and
        // the store's differ.
        let unchanged = delta == Full::default();
        let rewrite = intent == Intent::Registers && unchanged;
        if new_str.is_some() && !rewrite {
            self.drop_value();
        }
        if unchanged {
            Delta::Unchanged
        } else {
            Delta::Full(Box::new(delta))
        }
    }

    /// Joins `other` (a delta or a peer's state) into this state (`stored` as for
    /// [`KeyState::expand`]). A compact string result holds its value, even one that was
    /// only in the store before: the caller brings the store up to date, then drops it.
    pub fn merge(&mut self, frontier: &VersionVector, other: &Full, stored: Option<&[u8]>) {
        let compact = other.plain_assignment().and_then(|(dot, reg)| {
            self.merged_assignment(frontier, dot, reg, other.string.context())
        });
        if let Some(c) = compact {
            self.repr = Repr::Str(c);
            return;
        }
        self.full_mut(frontier, stored).merge(other);
        self.recompact(frontier);
    }

    /// [`KeyState::merge`] of a decoded plain assignment: joined compact when it can be,
    /// else in its full form.
    pub fn merge_assignment(
        &mut self,
        frontier: &VersionVector,
        a: &Assignment,
        stored: Option<&[u8]>,
    ) {
        match self.merged_assignment(frontier, a.dot, &a.reg, &a.cc) {
            Some(c) => self.repr = Repr::Str(c),
            None => self.merge(frontier, &a.to_full(), stored),
        }
    }

    /// The common replicated write, a plain string assignment arriving at a key that holds
    /// nothing here or a compact string it overwrote, joined without expanding either side
    /// into a `Full`: the compact result when the join is exactly that, else None (the
    /// general join decides). Exactness: in the full forms, the delta's dot joins because our
    /// context (the frontier, plus our string's dot) lacks it; our string's dot leaves because
    /// the delta's context holds it; the result's context is the frontier plus the new dot
    /// because ours was the frontier plus a dot it covers and the delta's adds nothing else.
    fn merged_assignment(
        &self,
        frontier: &VersionVector,
        dot: Dot,
        reg: &Reg,
        context: &CausalContext,
    ) -> Option<CompactStr> {
        if frontier.contains(dot) {
            return None;
        }
        let unstable = |d: &Dot| !frontier.contains(*d);
        let (old_ts, kept) = match &self.repr {
            Repr::Empty => (Hlc::ZERO, [None, None]),
            Repr::Str(c) => {
                // Our entry must be one the delta overwrote, and its dot one we have not
                // removed already.
                let overwritten = c.dot != dot && c.over != Some(dot) && context.contains(c.dot);
                if !overwritten {
                    return None;
                }
                (
                    c.ts,
                    [Some(c.dot).filter(unstable), c.over.filter(unstable)],
                )
            }
            Repr::Full(_) => return None,
        };
        if reg.base_ts < old_ts {
            return None;
        }
        // The join's context: the frontier, the dots ours kept beyond it, and the delta's;
        // besides `dot`, the compact form holds one more.
        let mut over = context.dot_beyond(frontier, dot)?;
        for k in kept.into_iter().flatten() {
            match over {
                Some(o) if o != k => return None,
                _ => over = Some(k),
            }
        }
        Some(CompactStr {
            dot,
            ts: reg.base_ts,
            value: Some(reg.base.to_vec().into_boxed_slice()),
            over,
        })
    }

    /// Drops causal metadata below `stable` (the new applied frontier) and compacts.
    pub fn gc(&mut self, stable: &VersionVector) {
        match &mut self.repr {
            Repr::Full(f) => {
                f.gc(stable);
                self.recompact(stable);
            }
            Repr::Str(c) if c.over.is_some_and(|o| stable.contains(o)) => c.over = None,
            _ => {}
        }
    }

    pub fn is_empty(&self) -> bool {
        match &self.repr {
            Repr::Empty => true,
            Repr::Str(_) => false,
            Repr::Full(f) => f.is_empty(),
        }
    }

    pub fn deadline_ms(&self) -> Option<u64> {
        match &self.repr {
            Repr::Full(f) => f.deadline_ms(),
            _ => None,
        }
    }

    pub fn visible_kind(&self) -> Option<Kind> {
        match &self.repr {
            Repr::Empty => None,
            Repr::Str(_) => Some(Kind::Str),
            Repr::Full(f) => f.visible_kind(),
        }
    }

    pub fn string_stamp(&self) -> Option<Hlc> {
        match &self.repr {
            Repr::Empty => None,
            Repr::Str(c) => Some(c.ts),
            Repr::Full(f) => f.string_stamp(),
        }
    }

    /// See [`Full::digest`]; a compact state digests exactly as its full form does (`stored`
    /// as for [`KeyState::expand`]).
    pub fn digest(&self, key: &[u8], stored: Option<&[u8]>, scratch: &mut Vec<u8>) -> Option<u64> {
        match &self.repr {
            Repr::Empty => None,
            Repr::Str(c) => {
                scratch.clear();
                // The register read in place (a `Reg` would copy the value to digest it).
                static NO_PARTS: BTreeMap<NodeId, Part> = BTreeMap::new();
                let mut stamps = [Hlc::ZERO; 5];
                stamps[Kind::Str as usize] = c.ts;
                string_digest_bytes(
                    key,
                    std::iter::once(std::iter::once((&c.dot, c.ts, c.value(stored), &NO_PARTS))),
                    &LwwRegister::default(),
                    stamps,
                    scratch,
                );
                Some(xxhash_rust::xxh3::xxh3_64(scratch))
            }
            Repr::Full(f) => f.digest(key, scratch),
        }
    }

    /// See [`Full::collectable`].
    pub fn collectable(&self, stable: &VersionVector) -> bool {
        match &self.repr {
            Repr::Empty => true,
            Repr::Str(_) => false,
            Repr::Full(f) => f.collectable(stable),
        }
    }

    /// See [`Full::is_compact`]: nothing left for GC to do.
    pub fn is_compact(&self) -> bool {
        match &self.repr {
            Repr::Empty => false,
            Repr::Str(c) => c.over.is_none(),
            Repr::Full(f) => f.is_compact(),
        }
    }

    pub fn tombstones(&self) -> usize {
        match &self.repr {
            Repr::Full(f) => f.tombstones(),
            _ => 0,
        }
    }

    /// See [`Full::may_hold_garbage`]; also true of a general state that a frontier covering
    /// its contexts would compact (merged from a peer whose frontier was ahead of ours, or a
    /// string overwritten before the frontier passed its old dot): with no dots outside its
    /// contexts' vectors such a state is otherwise never visited again, and stays general.
    pub fn may_hold_garbage(&self) -> bool {
        match &self.repr {
            Repr::Empty => true,
            Repr::Str(c) => c.over.is_some(),
            Repr::Full(f) => f.may_hold_garbage() || f.awaits_frontier(),
        }
    }

    /// A general state that only a frontier short of its contexts keeps from a compact form.
    pub fn awaits_frontier(&self) -> bool {
        matches!(&self.repr, Repr::Full(f) if f.awaits_frontier())
    }

    /// Whether digesting this state costs the size of a large collection, so the replicator
    /// digests it once per anti-entropy comparison instead of after every write.
    pub fn digest_is_costly(&self) -> bool {
        matches!(&self.repr, Repr::Full(f) if f.elements_held() > COSTLY_DIGEST_ELEMENTS)
    }

    /// How to bring the store's value up to date after `delta` is merged into this state,
    /// when the merge changes only what `delta` names of a hash, set or list and leaves the
    /// type and the deadline alone; None when the value must be rebuilt from the state.
    /// Asked before the merge.
    pub fn patch_for(&self, delta: &Full) -> Option<Patch> {
        let Repr::Full(f) = &self.repr else {
            return None;
        };
        let kind = f.visible_kind()?;
        let alone = KINDS
            .iter()
            .all(|&k| k == kind || (f.is_empty_kind(k) && delta.leaves_kind(k)));
        if !alone || delta.expiry != LwwRegister::default() {
            return None;
        }
        match kind {
            Kind::Hash if f.hash.delta_changes_only_its_keys(&delta.hash) => Some(Patch::Fields(
                delta.hash.entries().keys().cloned().collect(),
            )),
            Kind::Set if f.set.delta_changes_only_its_keys(&delta.set) => Some(Patch::Members(
                delta.set.entries().keys().cloned().collect(),
            )),
            Kind::List => {
                let (front, back) = f.list.end_pushes(&delta.list)?;
                Some(Patch::Ends {
                    front: front.into_iter().cloned().collect(),
                    back: back.into_iter().cloned().collect(),
                })
            }
            _ => None,
        }
    }

    /// The value clients read for hash field `f` (None: no such field, or not a hash).
    pub fn field_value(&self, f: &[u8]) -> Option<Bytes> {
        match &self.repr {
            Repr::Full(full) => full.hash.get(f).map(|r| r.value()),
            _ => None,
        }
    }

    /// Whether the set holds `m`.
    pub fn has_member(&self, m: &[u8]) -> bool {
        matches!(&self.repr, Repr::Full(full) if full.set.contains(m))
    }

    /// The value clients read (`stored` as for [`KeyState::expand`]).
    pub fn materialize(&self, limits: &Limits, stored: Option<&[u8]>) -> Option<Value> {
        match &self.repr {
            Repr::Empty => None,
            Repr::Str(c) => Some(Value::Str(Str::from_bytes(c.value(stored)))),
            Repr::Full(f) => f.materialize(limits),
        }
    }
}

/// Collection elements above which a state's digest is computed lazily (see
/// [`KeyState::digest_is_costly`]): below it a digest costs about as much as the write.
const COSTLY_DIGEST_ELEMENTS: usize = 64;

/// How a replica updates its store value after a merge (see [`KeyState::patch_for`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// Read these hash fields again from the state (a field it no longer has is deleted).
    Fields(Vec<Bytes>),
    /// Read these set members again from the state.
    Members(Vec<Bytes>),
    /// Push `front` before the first element and `back` after the last, each in list order.
    Ends { front: Vec<Bytes>, back: Vec<Bytes> },
}

/// The encoding of states on the wire and under digests: variable-length integers (most
/// lengths and counters are small, and empty components then cost a byte each), and a size
/// limit so a hostile length prefix cannot make the decoder allocate without bound.
pub fn codec() -> impl bincode::Options + Copy {
    bincode::DefaultOptions::new()
        .with_varint_encoding()
        .with_limit(super::wire::MAX_MESSAGE_BYTES as u64)
}

/// Encoding thresholds for materialized values (from the node's configuration).
pub use crate::config::EncodingLimits as Limits;

fn kind_of(v: &Value) -> Kind {
    match v {
        Value::Str(_) => Kind::Str,
        Value::Hash(_) => Kind::Hash,
        Value::Set(_) => Kind::Set,
        Value::ZSet(_) => Kind::ZSet,
        Value::List(_) => Kind::List,
        Value::Stream(_) => unreachable!("capture treats a stream as an absent key"),
    }
}

fn score_of(c: &Counter) -> f64 {
    match c.value() {
        CounterValue::Int(i) => i as f64,
        CounterValue::Float(f) => f,
    }
}

fn parse_f64(b: &[u8]) -> Option<f64> {
    std::str::from_utf8(b).ok()?.trim().parse::<f64>().ok()
}

fn format_float(f: f64) -> String {
    let mut out = Vec::new();
    lattice_resp::write::format_g(f, 17, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// What a digest covers of a state with no collection component: the key, the string
/// entries with their dots (one group per entry key: there is at most one, `()`), the deadline
/// register and the type stamps. Shared by the full and the compact forms, which must digest
/// alike.
fn string_digest_bytes<'a, G, D>(
    key: &[u8],
    groups: G,
    expiry: &LwwRegister<Option<u64>>,
    stamps: [Hlc; 5],
    out: &mut Vec<u8>,
) where
    G: Iterator<Item = D>,
    D: ExactSizeIterator<Item = (&'a Dot, Hlc, &'a [u8], &'a BTreeMap<NodeId, Part>)>,
{
    fn put_u64(out: &mut Vec<u8>, v: u64) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    fn put_hlc(out: &mut Vec<u8>, h: Hlc) {
        put_u64(out, h.wall_ms);
        out.extend_from_slice(&h.logical.to_le_bytes());
        out.extend_from_slice(&h.node.0.to_le_bytes());
    }
    put_u64(out, key.len() as u64);
    out.extend_from_slice(key);
    for dots in groups {
        put_u64(out, dots.len() as u64);
        for (dot, base_ts, base, parts) in dots {
            out.extend_from_slice(&dot.node.0.to_le_bytes());
            put_u64(out, dot.counter);
            put_hlc(out, base_ts);
            put_u64(out, base.len() as u64);
            out.extend_from_slice(base);
            put_u64(out, parts.len() as u64);
            for (node, p) in parts {
                out.extend_from_slice(&node.0.to_le_bytes());
                put_u64(out, p.seq);
                out.extend_from_slice(&p.int.to_le_bytes());
                put_u64(out, p.float.to_bits());
                out.push(u8::from(p.has_float));
            }
        }
    }
    match expiry.value() {
        Some(d) => {
            out.push(1);
            put_u64(out, *d);
        }
        None => out.push(0),
    }
    put_hlc(out, expiry.ts());
    for h in stamps {
        put_hlc(out, h);
    }
}

/// Records `old -> new` as an increment by this node: exact for integers, a float part
/// otherwise. If neither parses (cannot happen after a successful INCR family command), falls
/// back to an assignment.
/// The most dots an HLL's string keeps before a raise folds them: each raise of a growing HLL
/// adds a dot whose payload holds the registers that rose ([`raised_part`]); every read of the
/// value joins the payloads (a decode of each), so past this many the next raise writes the
/// whole HLL at one dot superseding them all (a delta of the whole HLL, once in this many).
const HLL_PARTS_KEPT: usize = 16;

/// The payload of a register raise that carries only the registers that rose, to be written
/// beside the HLL's current dots (`OrMap::put_beside`; they join by max at equal base stamps,
/// see [`Reg`]'s merge): when `old`, the joined value of the key's `dots` current dots, is an
/// HLL without counter parts, `new` is an HLL, and there are fewer than [`HLL_PARTS_KEPT`]
/// dots, and no register fell. None: the whole HLL is written instead ([`Reg::written`]).
fn raised_part(old: Option<&Reg>, new: &[u8], dots: usize) -> Option<Reg> {
    let old = old.filter(|r| r.parts.is_empty() && dots < HLL_PARTS_KEPT)?;
    let (was, now) = (hll::registers(&old.base).ok()?, hll::registers(new).ok()?);
    if was.iter().zip(&now).any(|(w, n)| n < w) {
        return None; // not a raise (the whole HLL replaces the old one)
    }
    let rose: Vec<u8> = was
        .iter()
        .zip(&now)
        .map(|(w, n)| if n > w { *n } else { 0 })
        .collect();
    let part = hll::from_registers(&rose, hll::JOIN_SPARSE_MAX_BYTES);
    Some(Reg::assigned(Bytes::from(part), old.base_ts))
}

fn increment(r: &mut Reg, old: &[u8], new: &[u8], node: NodeId, ts: Hlc) {
    let as_int = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<i64>().ok();
    let base_is_int = as_int(&r.base).is_some();
    match (as_int(old), as_int(new)) {
        (Some(o), Some(n)) if base_is_int && !r.parts.values().any(|p| p.has_float) => {
            r.add(node, i128::from(n) - i128::from(o), None);
        }
        _ => match (parse_f64(old), parse_f64(new)) {
            (Some(o), Some(n)) => r.add(node, 0, Some(n - o)),
            _ => *r = Reg::assigned(Bytes::copy_from_slice(new), ts),
        },
    }
}

/// Equal contents regardless of encoding (listpack or table, intset or not).
/// Whether `a` and `b` are HLLs with the same registers: what a node's store and the key's
/// replicated state must agree on for an HLL, whose bytes may differ (the writer keeps the
/// encoding its own commands produced and its cached count; see `Intent::Registers`).
pub fn same_hll(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => hll::same_registers(&x.as_bytes(), &y.as_bytes()),
        _ => false,
    }
}

pub fn same_content(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => x.as_bytes() == y.as_bytes(),
        (Value::List(x), Value::List(y)) => x.len() == y.len() && x.iter().eq(y.iter()),
        (Value::Hash(x), Value::Hash(y)) => {
            x.len() == y.len() && x.iter().all(|(f, v)| y.get(f) == Some(v))
        }
        (Value::Set(x), Value::Set(y)) => x.len() == y.len() && x.iter().all(|m| y.contains(&m)),
        (Value::ZSet(x), Value::ZSet(y)) => {
            x.len() == y.len()
                && x.iter().all(|(m, s)| {
                    y.score(m)
                        .is_some_and(|t| t == s || (t.is_nan() && s.is_nan()))
                })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stamper_for<'a>(
        node: u32,
        wall: u64,
        counter: &'a mut VersionVector,
        issued: &'a mut CausalContext,
    ) -> Stamper<'a> {
        Stamper {
            node: NodeId(node),
            ts: Hlc::new(wall, 0, NodeId(node)),
            counter,
            issued,
        }
    }

    struct Replica {
        node: u32,
        wall: u64,
        counter: VersionVector,
        issued: CausalContext,
        state: Full,
    }

    impl Replica {
        fn new(node: u32) -> Replica {
            Replica {
                node,
                wall: 0,
                counter: VersionVector::new(),
                issued: CausalContext::new(),
                state: Full::default(),
            }
        }

        fn write(&mut self, value: Option<Value>, intent: Intent) -> Full {
            self.wall += 1;
            let mut st = stamper_for(self.node, self.wall, &mut self.counter, &mut self.issued);
            self.state.capture(
                value.as_ref().map(|v| (v, None)),
                intent,
                true,
                None,
                &mut st,
            )
        }

        fn value(&self) -> Option<Value> {
            self.state.materialize(&Limits::default())
        }

        /// What a store beside this replica holds for the key, when it is a string.
        fn stored(&self) -> Option<Vec<u8>> {
            match self.value()? {
                Value::Str(s) => Some(s.as_bytes().into_owned()),
                _ => None,
            }
        }
    }

    fn s(v: &str) -> Value {
        Value::Str(Str::from_bytes(v.as_bytes()))
    }

    fn set_of(ms: &[&str]) -> Value {
        let mut set = Set::new();
        for m in ms {
            set.insert(m.as_bytes(), 0);
        }
        Value::Set(Box::new(set))
    }

    #[test]
    fn concurrent_increments_add_up() {
        let mut a = Replica::new(1);
        let mut b = Replica::new(2);
        let d1 = a.write(Some(s("1")), Intent::Increment);
        let d2 = b.write(Some(s("1")), Intent::Increment);
        a.state.merge(&d2);
        b.state.merge(&d1);
        assert_eq!(a.value(), Some(s("2")));
        assert_eq!(b.value(), Some(s("2")));
        assert_eq!(a.state, b.state);
    }

    #[test]
    fn sadd_concurrent_with_srem_survives() {
        let mut a = Replica::new(1);
        let mut b = Replica::new(2);
        let d = a.write(Some(set_of(&["x"])), Intent::Assign);
        b.state.merge(&d);
        // a removes x (the set becomes empty, the key is gone); b re-adds x concurrently.
        let da = a.write(None, Intent::Assign);
        let db = b.write(Some(set_of(&["x", "y"])), Intent::Assign);
        a.state.merge(&db);
        b.state.merge(&da);
        assert_eq!(a.value(), b.value());
        // b's add of x did not re-add: x was already present there, so its dot was observed by
        // a's removal; y is new and survives.
        assert_eq!(a.value(), Some(set_of(&["y"])));
    }

    #[test]
    fn del_concurrent_with_set_keeps_the_set() {
        let mut a = Replica::new(1);
        let mut b = Replica::new(2);
        let d = a.write(Some(s("v1")), Intent::Assign);
        b.state.merge(&d);
        let da = a.write(None, Intent::Assign);
        let db = b.write(Some(s("v2")), Intent::Assign);
        a.state.merge(&db);
        b.state.merge(&da);
        assert_eq!(a.value(), Some(s("v2")));
        assert_eq!(b.value(), Some(s("v2")));
    }

    #[test]
    fn type_clash_resolves_to_the_later_type_then_heals() {
        let mut a = Replica::new(1);
        let mut b = Replica::new(2);
        let da = a.write(Some(s("v")), Intent::Assign);
        b.wall = 10;
        let db = b.write(Some(set_of(&["m"])), Intent::Assign);
        a.state.merge(&db);
        b.state.merge(&da);
        assert_eq!(a.value(), Some(set_of(&["m"])));
        assert_eq!(b.value(), Some(set_of(&["m"])));
        // The next write on a clears the hidden string everywhere.
        let d = a.write(Some(set_of(&["m", "n"])), Intent::Assign);
        b.state.merge(&d);
        assert!(b.state.string.is_empty());
    }

    fn list_of(xs: &[&str]) -> Value {
        let mut l = List::new();
        for x in xs {
            l.push(End::Tail, x.as_bytes());
        }
        Value::List(Box::new(l))
    }

    #[test]
    fn concurrent_pushes_are_all_kept_in_one_order() {
        let mut a = Replica::new(1);
        let mut b = Replica::new(2);
        let d = a.write(Some(list_of(&["m"])), Intent::Assign);
        b.state.merge(&d);
        let da = a.write(Some(list_of(&["a", "m"])), Intent::Assign); // LPUSH a
        let db = b.write(Some(list_of(&["b", "m"])), Intent::Assign); // LPUSH b
        let db2 = b.write(Some(list_of(&["b", "m", "y"])), Intent::Assign); // RPUSH y
        let db = db.merged(&db2);
        a.state.merge(&db);
        b.state.merge(&da);
        let va = a.value().unwrap();
        assert_eq!(Some(va.clone()), b.value());
        let Value::List(l) = va else { panic!() };
        let items: Vec<&[u8]> = l.iter().collect();
        // The LPUSH with the higher id (a's, made at a later wall time) is nearer the head;
        // nothing is lost or doubled.
        assert_eq!(items, vec![&b"a"[..], b"b", b"m", b"y"]);
    }

    #[test]
    fn local_capture_materializes_back_to_the_same_value() {
        let mut a = Replica::new(1);
        for v in [
            list_of(&["1", "2", "3"]),
            list_of(&["0", "1", "3", "4"]),
            list_of(&["4"]),
            set_of(&["a", "b"]),
            s("12"),
        ] {
            a.write(Some(v.clone()), Intent::Assign);
            assert_eq!(a.value(), Some(v));
        }
        a.write(Some(s("15")), Intent::Increment);
        assert_eq!(a.value(), Some(s("15")));
    }

    /// Random small histories on three replicas; states after arbitrary delivery are joined in
    /// different groupings and orders and must agree (associative, commutative, idempotent).
    fn op() -> impl Strategy<Value = (usize, u8, u8)> {
        (0..3usize, 0..11u8, 0..4u8)
    }

    /// The intent the node gives the command `apply` runs as `kind`.
    fn intent_of(kind: u8) -> Intent {
        match kind {
            1 => Intent::Increment,
            8 | 9 => Intent::Registers,
            _ => Intent::Assign,
        }
    }

    /// PFADD of `n` elements named from `seed` to the replica's HLL: None when the key holds
    /// something else (PFADD refuses it and writes nothing), else the new HLL, created when
    /// missing. The sparse limit is low so that histories reach dense HLLs too.
    fn pfadd(r: &Replica, seed: &str, n: usize) -> Option<Value> {
        let mut v = match r.value() {
            None => hll::empty(),
            Some(Value::Str(x)) if hll::is_hll(&x.as_bytes()) => x.as_bytes().into_owned(),
            Some(_) => return None,
        };
        for i in 0..n {
            hll::add(&mut v, format!("{seed}:{i}").as_bytes(), 300).expect("well formed");
        }
        Some(Value::Str(Str::from_bytes(&v)))
    }

    fn apply(r: &mut Replica, kind: u8, arg: u8) -> Full {
        let m = format!("m{arg}");
        match kind {
            0 => r.write(Some(s(&format!("v{arg}"))), Intent::Assign),
            1 => {
                let cur = match r.value() {
                    Some(Value::Str(x)) => x.as_i64().unwrap_or(0),
                    _ => 0,
                };
                r.write(
                    Some(s(&(cur + i64::from(arg)).to_string())),
                    Intent::Increment,
                )
            }
            2 => {
                let mut set = match r.value() {
                    Some(Value::Set(x)) => *x,
                    _ => Set::new(),
                };
                set.insert(m.as_bytes(), 0);
                r.write(Some(Value::Set(Box::new(set))), Intent::Assign)
            }
            3 => {
                let mut set = match r.value() {
                    Some(Value::Set(x)) => *x,
                    _ => Set::new(),
                };
                set.remove(m.as_bytes());
                let v = (!set.is_empty()).then(|| Value::Set(Box::new(set)));
                r.write(v, Intent::Assign)
            }
            4 => {
                let mut l = match r.value() {
                    Some(Value::List(x)) => *x,
                    _ => List::new(),
                };
                l.push(
                    if arg.is_multiple_of(2) {
                        End::Head
                    } else {
                        End::Tail
                    },
                    m.as_bytes(),
                );
                r.write(Some(Value::List(Box::new(l))), Intent::Assign)
            }
            5 => {
                let mut h = match r.value() {
                    Some(Value::Hash(x)) => *x,
                    _ => Hash::new(),
                };
                h.insert(m.as_bytes(), b"x", HashLimits::default());
                r.write(Some(Value::Hash(Box::new(h))), Intent::Assign)
            }
            6 => r.write(None, Intent::Assign),
            8 | 9 => {
                // A few elements of this replica's own, or many (a dense HLL).
                let n = if kind == 8 { 1 } else { 200 };
                match pfadd(r, &format!("{}{arg}", r.node), n) {
                    Some(v) => r.write(Some(v), Intent::Registers),
                    None => Full::default(),
                }
            }
            10 => {
                // SET of an HLL's bytes: an assignment the next PFADDs grow from.
                let mut v = hll::empty();
                hll::add(&mut v, format!("set{arg}").as_bytes(), 300).expect("well formed");
                r.write(Some(Value::Str(Str::from_bytes(&v))), Intent::Assign)
            }
            _ => {
                let mut z = match r.value() {
                    Some(Value::ZSet(x)) => *x,
                    _ => ZSet::new(),
                };
                z.insert(m.as_bytes(), f64::from(arg));
                r.write(Some(Value::ZSet(Box::new(z))), Intent::Assign)
            }
        }
    }

    proptest! {
        #[test]
        fn merge_laws(ops in proptest::collection::vec((op(), 0..3usize), 1..30)) {
            let mut rs = [Replica::new(1), Replica::new(2), Replica::new(3)];
            let mut deltas = Vec::new();
            for ((who, kind, arg), sync_from) in ops {
                let d = apply(&mut rs[who], kind, arg);
                deltas.push(d);
                // Occasionally deliver another replica's full state (gossip).
                if sync_from != who {
                    let other = rs[sync_from].state.clone();
                    rs[who].state.merge(&other);
                }
            }
            let [a, b, c] = &rs;
            let (a, b, c) = (&a.state, &b.state, &c.state);
            let ab_c = a.clone().merged(b).merged(c);
            let a_bc = a.clone().merged(&b.clone().merged(c));
            let cba = c.clone().merged(b).merged(a);
            prop_assert_eq!(&ab_c, &a_bc);
            prop_assert_eq!(&ab_c, &cba);
            prop_assert_eq!(&ab_c.clone().merged(&ab_c), &ab_c);
            // Deltas join into the full state without changing it (they are its parts).
            let mut with_deltas = ab_c.clone();
            for d in &deltas {
                with_deltas.merge(d);
            }
            prop_assert_eq!(with_deltas.materialize(&Limits::default()),
                            ab_c.materialize(&Limits::default()));
            // Every state and delta survives the wire encoding unchanged, and the encoding
            // is exact: nothing left over, nothing missing.
            for st in deltas.iter().chain([&ab_c, a, b, c]) {
                let bytes = codec().serialize(st).unwrap();
                prop_assert_eq!(&codec().deserialize::<Full>(&bytes).unwrap(), st);
                prop_assert!(codec().deserialize::<Full>(&bytes[..bytes.len() - 1]).is_err());
            }
        }
    }

    proptest! {
        /// The compact forms are representations, not approximations: the same random
        /// history applied to a `KeyState` and to a `Full` gives states whose full forms are
        /// equal (with an empty frontier, nothing is raised), that digest and materialize
        /// alike, and that stay equal after a GC to any frontier below what was issued.
        #[test]
        fn compact_forms_are_exact(ops in proptest::collection::vec((op(), 0..3usize), 1..30),
                                   cut in 0..4u64) {
            let none = VersionVector::new();
            let mut rs = [Replica::new(1), Replica::new(2), Replica::new(3)];
            let mut ks: [KeyState; 3] = Default::default();
            let mut scratch = Vec::new();
            for ((who, kind, arg), sync_from) in ops {
                let (counter, issued) = (rs[who].counter.clone(), rs[who].issued.clone());
                let before = rs[who].stored();
                // A PFADD refused (the key holds no HLL) writes nothing, and is not captured.
                let refused = matches!(kind, 8 | 9) && pfadd(&rs[who], "", 0).is_none();
                let d = apply(&mut rs[who], kind, arg);
                // The same command, with the same dots, on the compact side.
                let value = rs[who].value();
                let intent = intent_of(kind);
                if let (Intent::Increment | Intent::Registers, Some(b)) = (intent, &before) {
                    // As the node does before an incrementing command.
                    ks[who].keep_value(b);
                }
                let (mut counter, mut issued) = (counter, issued);
                let mut st = stamper_for(rs[who].node, rs[who].wall, &mut counter, &mut issued);
                if !refused {
                    let dk = ks[who].capture(&none, value.as_ref().map(|v| (v, None)), intent,
                                             true, None, &mut st);
                    let stored = rs[who].stored().unwrap_or_default();
                    prop_assert_eq!(&dk.into_full(&stored), &d);
                }
                if sync_from != who {
                    let other = rs[sync_from].state.clone();
                    let stored = rs[who].stored();
                    rs[who].state.merge(&other);
                    let theirs = rs[sync_from].stored();
                    let other = ks[sync_from].expand(&none, theirs.as_deref()).into_owned();
                    ks[who].merge(&none, &other, stored.as_deref());
                    // The store is brought up to date: its copy is the one kept.
                    ks[who].drop_value();
                }
                let stored = rs[who].stored();
                prop_assert_eq!(&*ks[who].expand(&none, stored.as_deref()), &rs[who].state);
            }
            // A frontier every replica has passed: each node's counter, cut back a little.
            let mut frontier = VersionVector::new();
            for r in &rs {
                let c = r.counter.get(NodeId(r.node));
                frontier.raise(NodeId(r.node), c.saturating_sub(cut));
            }
            for (r, k) in rs.iter_mut().zip(ks.iter_mut()) {
                let stored = r.stored();
                let stored = stored.as_deref();
                prop_assert_eq!(k.digest(b"k", stored, &mut scratch),
                                r.state.digest(b"k", &mut scratch));
                prop_assert_eq!(k.materialize(&Limits::default(), stored), r.value());
                // Packing keeps exactly the stamp.
                if let Some(p) = k.packed() {
                    prop_assert_eq!(&KeyState::unpacked(p), &*k);
                }
                r.state.gc(&frontier);
                k.gc(&frontier);
                prop_assert_eq!(&*k.expand(&frontier, stored), &r.state);
                prop_assert_eq!(k.digest(b"k", stored, &mut scratch),
                                r.state.digest(b"k", &mut scratch));
            }
        }
    }

    proptest! {
        /// Joining a delta into a compact state without expanding it (`merged_assignment`)
        /// gives the general join of the full forms, at any frontier.
        #[test]
        fn compact_joins_are_the_general_join(ops in proptest::collection::vec((op(), 0..3usize), 1..40),
                                              at in 0..40usize) {
            // States held at some point of a random history, GC'd to the counters of that
            // point, joined with every delta of the history (most later ones carry dots above
            // that frontier, observed or concurrent).
            let mut rs = [Replica::new(1), Replica::new(2), Replica::new(3)];
            let mut deltas = Vec::new();
            let mut held = Vec::new();
            let mut frontier = VersionVector::new();
            for (i, ((who, kind, arg), sync_from)) in ops.into_iter().enumerate() {
                if i == at {
                    for r in &rs {
                        frontier.raise(NodeId(r.node), r.counter.get(NodeId(r.node)));
                    }
                    held = rs.iter().map(|r| r.state.clone()).collect();
                }
                deltas.push(apply(&mut rs[who], kind, arg));
                if sync_from != who {
                    let other = rs[sync_from].state.clone();
                    rs[who].state.merge(&other);
                }
            }
            for mut full in held {
                full.gc(&frontier);
                let held = KeyState::compacted(full, &frontier);
                // The same state once more with its value only in the store.
                let stored = held.materialize(&Limits::default(), None).and_then(|v| match v {
                    Value::Str(s) => Some(s.as_bytes().into_owned()),
                    _ => None,
                });
                let mut lean = held.clone();
                lean.drop_value();
                for d in &deltas {
                    let mut general = held.expand(&frontier, None).into_owned();
                    general.merge(d);
                    for (start, stored) in [(&held, None), (&lean, stored.as_deref())] {
                        let mut fast = start.clone();
                        fast.merge(&frontier, d, stored);
                        prop_assert_eq!(&*fast.expand(&frontier, stored), &general);
                    }
                }
            }
        }
    }

    fn registers_of(r: &Replica) -> Vec<u8> {
        hll::registers(&r.stored().expect("an HLL")).expect("well formed")
    }

    /// Concurrent PFADDs on three replicas, the key created on each: after any exchange every
    /// replica holds the registers of one HLL fed every element.
    #[test]
    fn concurrent_raises_join_register_by_register() {
        let mut rs = [Replica::new(1), Replica::new(2), Replica::new(3)];
        let mut all = hll::empty();
        let mut deltas = Vec::new();
        for round in 0..3 {
            for r in rs.iter_mut() {
                let seed = format!("{}-{round}", r.node);
                let v = pfadd(r, &seed, 150).expect("an HLL");
                for i in 0..150 {
                    hll::add(&mut all, format!("{seed}:{i}").as_bytes(), 300).unwrap();
                }
                deltas.push(r.write(Some(v), Intent::Registers));
            }
        }
        for r in rs.iter_mut() {
            for d in &deltas {
                r.state.merge(d);
            }
        }
        let want = hll::registers(&all).unwrap();
        for r in &rs {
            assert_eq!(registers_of(r), want, "replica {}", r.node);
            assert_eq!(r.state, rs[0].state);
        }
    }

    /// A raise of a dense HLL ships the registers that rose, not its 12 KiB; the 16th dot
    /// folds the key's payloads into one.
    #[test]
    fn a_raise_ships_the_registers_that_rose() {
        let mut a = Replica::new(1);
        let v = pfadd(&a, "many", 2_000).unwrap();
        let whole = a.write(Some(v), Intent::Registers);
        let whole = codec().serialize(&whole).unwrap().len();
        eprintln!("creation of a dense HLL: {whole} delta bytes");
        assert!(whole > hll::DENSE_SIZE);
        let dots = |a: &Replica| a.state.string.entries().get(&()).map_or(0, |d| d.len());
        let mut folds = 0;
        for i in 0..40 {
            let before = dots(&a);
            let v = pfadd(&a, &format!("one{i}"), 1).unwrap();
            let d = a.write(Some(v), Intent::Registers);
            if d == Full::default() {
                continue; // the element raised no register
            }
            let n = codec().serialize(&d).unwrap().len();
            eprintln!("raise {i}: {n} delta bytes beside {before} dots");
            if before < HLL_PARTS_KEPT {
                assert!(n < 80, "write {i}: {n} bytes beside {before} dots");
                assert_eq!(dots(&a), before + 1);
            } else {
                assert!(n > hll::DENSE_SIZE, "write {i}: a fold of {n} bytes");
                assert_eq!(dots(&a), 1);
                folds += 1;
            }
        }
        assert!(folds >= 1);
        // Same registers, other bytes (a cached count): nothing to send.
        let mut cached = a.stored().unwrap();
        hll::set_cached(&mut cached, 7);
        let d = a.write(
            Some(Value::Str(Str::from_bytes(&cached))),
            Intent::Registers,
        );
        assert_eq!(d, Full::default());
    }

    #[test]
    fn a_plain_string_is_held_compact() {
        let none = VersionVector::new();
        let (mut counter, mut issued) = (VersionVector::new(), CausalContext::new());
        // A local SET of `v` at wall time `wall` on node 1, as the node captures it.
        let mut assign = |k: &mut KeyState, v: &str, wall: u64| {
            let mut st = stamper_for(1, wall, &mut counter, &mut issued);
            k.capture(
                &none,
                Some((&s(v), None)),
                Intent::Assign,
                true,
                None,
                &mut st,
            )
        };
        let mut k = KeyState::default();
        let d = assign(&mut k, "v", 10);
        assert!(k.is_compact_form(), "{k:?}");
        assert!(k.value_in_store(), "the store holds the value: {k:?}");
        assert!(matches!(d, Delta::Assign(_)), "{d:?}");
        assert_eq!(*k.expand(&none, Some(b"v")), d.into_full(b"v"));
        // Overwritten while the old dot is above the frontier: still compact, keeping the old
        // dot in its context (so its expanded form is the join of the old state and the
        // delta), listed for GC and not packed until GC passes it.
        let before = k.expand(&none, Some(b"v")).into_owned();
        let d = assign(&mut k, "w", 11);
        assert!(
            k.is_compact_form() && !k.is_compact() && k.may_hold_garbage(),
            "{k:?}"
        );
        assert!(k.packed().is_none());
        let mut joined = before.clone();
        joined.merge(&d.into_full(b"w"));
        assert_eq!(*k.expand(&none, Some(b"w")), joined);
        // A third write before GC: two dots beyond the frontier take the general form.
        let mut k3 = k.clone();
        let d3 = assign(&mut k3, "x", 12);
        assert!(!k3.is_compact_form(), "{k3:?}");
        let mut joined3 = joined.clone();
        joined3.merge(&d3.into_full(b"x"));
        assert_eq!(*k3.expand(&none, None), joined3);
        let frontier: VersionVector = [(NodeId(1), 1)].into_iter().collect();
        k.gc(&frontier);
        assert!(k.is_compact_form() && k.is_compact(), "{k:?}");
        assert!(k.value_in_store(), "{k:?}");
        assert_eq!(k.materialize(&Limits::default(), Some(b"w")), Some(s("w")));
        // Packed to its stamp and back.
        let p = k.packed().expect("a local write packs");
        assert_eq!(KeyState::unpacked(p), k);
    }

    #[test]
    fn an_empty_state_encodes_as_its_mask_alone() {
        assert_eq!(codec().serialize(&Full::default()).unwrap(), vec![0]);
        // A mask naming a field that is not there is an error, not a default.
        assert!(codec().deserialize::<Full>(&[1]).is_err());
    }
}

//! Eviction on a partitioned cluster (ARCHITECTURE §86): before an owner evicts a key, every
//! other owner of the key's slot says it holds the key as this one does.
//!
//! On a fully replicated cluster the applied GC frontier is that proof (§79): every replica
//! has merged every dot under it. A partitioned node's seen-set also takes the dots of keys
//! it does not keep (the `skipped` contexts of a batch, groups it was not yet holding), so
//! there the frontier says only that every node has seen or skipped a dot. What it lacks is
//! the owners' word, so an owner asks for it: a `Hold` `Ask` names candidate keys with this
//! node's digest of each, and an owner answers `Have` for those it holds with the same digest
//! (equal states). A key is evictable once every other owner has answered for the digest it
//! still has. The evicted key's stub then behaves as §79 says, with one change: a delta held
//! back for a stub, or a local write over one, asks the other owners for the key's whole state
//! (`Fetch`), where a fully replicated node starts a tree comparison (partitioned nodes
//! compare no trees; their pushes run minutes apart).
//!
//! Everything here is bounded: at most `MAX_PROOFS` keys wait for or hold a proof, a proof
//! lapses after `PROOF_TTL_MS`, and at most `MAX_FETCH_KEYS` keys wait to be fetched.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use lattice_crdt::NodeId;
use lattice_store::Db;

use super::wire::{self, Body};
use super::{encode_key_state, Replicator};

/// Keys that wait for, or hold, a proof at most: the eviction pool. Its keys are asked about
/// ahead of need (a node near its limit stocks it), and a command evicts up to 1,024 keys.
pub const MAX_PROOFS: usize = 2_048;

/// How long an owner's answer counts. The answer says the owner held the key then; states
/// only grow by joins, so it stays true until the owner itself evicts or loses the key, which
/// is what a lapse bounds. Unanswered asks (an owner down, a message lost) lapse too.
pub const PROOF_TTL_MS: u64 = 2_000;

/// Keys waiting to be fetched from the other owners at most; past it a fetch is dropped and
/// the periodic push repairs the stub.
const MAX_FETCH_KEYS: usize = 1_024;

/// Keys one `Ask` or `Fetch` names at most.
const MAX_KEYS_PER_MESSAGE: usize = 256;

/// One candidate's proof: the digest asked about and the owners yet to answer.
#[derive(Debug)]
struct Proof {
    digest: u64,
    waiting: Vec<u32>,
    asked_ms: u64,
}

/// The owner side's eviction pool and the fetches of stubs' states.
#[derive(Debug, Default)]
pub struct HoldProofs {
    proofs: BTreeMap<Bytes, Proof>,
    /// Keys whose stub took a peer's delta or a local write: their whole state is wanted.
    refetch: BTreeSet<Bytes>,
    /// Where [`Replicator::proven_keys`] stopped last.
    cursor: Option<Bytes>,
    /// Keys asked about (INFO `eviction_proofs_asked`).
    pub asked: u64,
    /// Keys every other owner vouched for (`eviction_proofs_confirmed`).
    pub confirmed: u64,
    /// Keys asked for whole from the other owners (`eviction_fetches`).
    pub fetched: u64,
}

impl HoldProofs {
    /// Forgets every proof: the owners changed.
    pub fn clear(&mut self) {
        self.proofs.clear();
    }

    pub fn forget(&mut self, key: &[u8]) {
        self.proofs.remove(key);
    }

    /// Drops proofs asked `PROOF_TTL_MS` ago or more.
    pub fn expire(&mut self, now_ms: u64) {
        self.proofs
            .retain(|_, p| p.asked_ms + PROOF_TTL_MS > now_ms);
    }

    pub fn len(&self) -> usize {
        self.proofs.len()
    }

    pub fn want_whole(&mut self, key: &[u8]) {
        if self.refetch.len() < MAX_FETCH_KEYS {
            self.refetch.insert(Bytes::copy_from_slice(key));
        }
    }

    pub fn check_invariants(&self) {
        assert!(
            self.proofs.len() <= MAX_PROOFS,
            "eviction pool over its bound"
        );
        assert!(
            self.refetch.len() <= MAX_FETCH_KEYS,
            "fetches over their bound"
        );
    }
}

impl Replicator {
    /// Whether this node is partitioned (fewer owners per slot than members): eviction then
    /// needs the owners' proofs.
    pub(super) fn partitioned(&self) -> bool {
        self.ownership
            .as_ref()
            .is_some_and(|p| p.replication_factor() < p.members().len())
    }

    /// The owners of `key`'s slot besides this node (partitioned only; empty otherwise).
    fn other_owners(&self, key: &[u8]) -> Vec<u32> {
        let Some(p) = &self.ownership else {
            return Vec::new();
        };
        let slot = lattice_placement::key_slot(key);
        p.owners(slot)
            .iter()
            .copied()
            .filter(|&o| o != self.node.0)
            .collect()
    }

    /// `key`'s digest when this node could evict it but for the other owners' word: the
    /// conditions of [`Replicator::evictable`] that it checks alone.
    pub(super) fn settled_here(&self, key: &[u8], db: &Db) -> Option<u64> {
        if !self.may_evict() || self.is_deferred(key) {
            return None;
        }
        if self.partitioned() {
            // An owner by placement (not a draining holder or a hot copy), of a group it did
            // not gain by a move (merged against no frontier, §85), and not a hot key: a hot
            // copy elsewhere may hold an older state than this one, and a write there would
            // come back as a delta to a stub whose whole state it lacks.
            let slot = lattice_placement::key_slot(key);
            let owner = self
                .ownership
                .as_ref()
                .is_some_and(|p| p.is_owner(self.node.0, slot));
            if !owner || self.gained_key(key) || self.hot.holders_of(key) > 0 || self.hot.holds(key)
            {
                return None;
            }
        }
        let h = lattice_store::key_hash(key);
        self.keys
            .get_any(h, key, db)
            .filter(|e| {
                !e.evicted && !e.partial && !e.digest_stale && e.state.settled_under(&self.frontier)
            })
            .map(|e| e.digest)
    }

    /// Whether `key` lacks only the other owners' proof to be evictable, and none is asked.
    pub fn wants_proof(&self, key: &[u8], db: &Db) -> bool {
        self.partitioned()
            && self.holds.proofs.len() < MAX_PROOFS
            && !self.holds.proofs.contains_key(key)
            && self.settled_here(key, db).is_some()
    }

    /// Whether the eviction pool should take more keys: a node near or over its limit asks
    /// about keys ahead of need, since a proof takes a round trip and a command evicts only
    /// proven keys (without this, a pipeline past the limit met -OOM until the sampled keys'
    /// answers came back, five keys per command).
    pub fn pool_wants_more(&self) -> bool {
        self.partitioned() && self.holds.proofs.len() < MAX_PROOFS / 2
    }

    /// Whether every other owner vouched for `key` as it is here (its digest unchanged).
    pub(super) fn proven(&self, key: &[u8], digest: u64) -> bool {
        self.holds
            .proofs
            .get(key)
            .is_some_and(|p| p.waiting.is_empty() && p.digest == digest)
    }

    /// Up to `limit` keys every other owner vouched for, to rank with the sampled ones (an
    /// eviction pool: a proof arrives after the command that asked for it, and the next
    /// command's sample would rarely draw the same keys again). Taken round the pool from
    /// where the last call stopped, so that an eviction looks at a bounded number of them
    /// (a command evicts up to 1,024 keys; ranking the whole pool for each was quadratic).
    pub fn proven_keys(&mut self, limit: usize) -> Vec<Bytes> {
        use std::ops::Bound::{Excluded, Unbounded};
        let h = &mut self.holds;
        let from = h.cursor.take().map_or(Unbounded, Excluded);
        let proven = |(k, p): (&Bytes, &Proof)| p.waiting.is_empty().then(|| k.clone());
        let mut out: Vec<Bytes> = h
            .proofs
            .range::<Bytes, _>((from.clone(), Unbounded))
            .filter_map(proven)
            .take(limit)
            .collect();
        if out.len() < limit && from != Unbounded {
            let more = limit - out.len();
            let upto = match &from {
                Excluded(k) => std::ops::Bound::Included(k.clone()),
                _ => Unbounded,
            };
            out.extend(
                h.proofs
                    .range::<Bytes, _>((Unbounded, upto))
                    .filter_map(proven)
                    .take(more),
            );
        }
        h.cursor = out.last().cloned();
        out
    }

    /// Asks every other owner of each of `keys` whether it holds the key as this node does.
    /// A key with an owner down (no answer could come), or no other owner (replication
    /// factor 1: evicting it would delete it), is not asked.
    pub fn ask_holders(&mut self, keys: &[Vec<u8>], db: &Db, now_ms: u64) {
        let mut asks: BTreeMap<u32, (Vec<Bytes>, Vec<u64>)> = BTreeMap::new();
        if !self.partitioned() {
            return;
        }
        for key in keys {
            if self.holds.proofs.len() >= MAX_PROOFS || self.holds.proofs.contains_key(&key[..]) {
                continue;
            }
            let Some(digest) = self.settled_here(key, db) else {
                continue;
            };
            let owners = self.other_owners(key);
            let all_up = owners
                .iter()
                .all(|&o| self.peers.get(&NodeId(o)).is_some_and(|p| p.up));
            if owners.is_empty() || !all_up {
                continue;
            }
            let key = Bytes::copy_from_slice(key);
            for &o in &owners {
                let (ks, ds) = asks.entry(o).or_default();
                ks.push(key.clone());
                ds.push(digest);
            }
            self.holds.asked += 1;
            self.holds.proofs.insert(
                key,
                Proof {
                    digest,
                    waiting: owners,
                    asked_ms: now_ms,
                },
            );
        }
        for (o, (keys, digests)) in asks {
            let body = Body::Hold(wire::Hold {
                op: wire::HoldOp::Ask as u32,
                keys,
                digests,
            });
            self.send_control(NodeId(o), body);
        }
    }

    /// A `Hold` message from `peer`.
    pub(super) fn on_hold(&mut self, peer: NodeId, m: wire::Hold, db: &Db) {
        match m.op() {
            Some(wire::HoldOp::Ask) => {
                if m.keys.len() != m.digests.len() || m.keys.len() > MAX_PROOFS {
                    self.stats.bad_messages += 1;
                    return;
                }
                self.refresh_digests();
                let mut have = Vec::new();
                for (key, &digest) in m.keys.iter().zip(&m.digests) {
                    if !self.owns(key) {
                        continue;
                    }
                    let h = lattice_store::key_hash(key);
                    let held = self.keys.get_any(h, key, db).is_some_and(|e| {
                        !e.evicted && !e.partial && !e.digest_stale && e.digest == digest
                    });
                    if held {
                        have.push(key.clone());
                    }
                }
                if !have.is_empty() {
                    let body = Body::Hold(wire::Hold {
                        op: wire::HoldOp::Have as u32,
                        keys: have,
                        digests: Vec::new(),
                    });
                    self.send_control(peer, body);
                }
            }
            Some(wire::HoldOp::Have) => {
                for key in &m.keys {
                    if let Some(p) = self.holds.proofs.get_mut(key) {
                        let before = p.waiting.len();
                        p.waiting.retain(|&o| o != peer.0);
                        if before > 0 && p.waiting.is_empty() {
                            self.holds.confirmed += 1;
                        }
                    }
                }
            }
            Some(wire::HoldOp::Fetch) => self.send_whole_states(peer, &m.keys, db),
            None => self.stats.bad_messages += 1,
        }
    }

    /// The whole states of those of `keys` this node holds whole (not a stub, not a write over
    /// one), as an anti-entropy `States` message: merged as a peer's whole state, which is
    /// what replaces a stub (§79).
    fn send_whole_states(&mut self, peer: NodeId, keys: &[Bytes], db: &Db) {
        let mut writer = wire::StatesWriter::default();
        let mut any = false;
        for key in keys.iter().take(MAX_KEYS_PER_MESSAGE) {
            if !self.owns(key) {
                continue;
            }
            let h = lattice_store::key_hash(key);
            let Some(entry) = self
                .keys
                .get_any(h, key, db)
                .filter(|e| !e.evicted && !e.partial)
            else {
                continue;
            };
            let wire = self.compact_wire.get_mut();
            encode_key_state(
                key,
                &entry.state,
                wire,
                &self.frontier,
                db,
                &mut self.scratch,
            );
            writer.push(key, &self.scratch);
            any = true;
        }
        if !any {
            return;
        }
        let frontier: Vec<(u32, u64)> = self.frontier.iter().map(|(n, c)| (n.0, c)).collect();
        let data = writer.finish(&self.envelope_head(), &[], 0, &frontier);
        self.send_ae_data(peer, data);
    }

    /// Asks the other owners (and `also`, a delta's sender) for the whole states of the keys
    /// whose stubs want them (see [`HoldProofs::want_whole`]).
    pub(super) fn send_fetches(&mut self, also: Option<NodeId>) {
        if self.holds.refetch.is_empty() {
            return;
        }
        let mut fetches: BTreeMap<u32, Vec<Bytes>> = BTreeMap::new();
        for key in std::mem::take(&mut self.holds.refetch) {
            let mut to = self.other_owners(&key);
            if let Some(a) = also.filter(|a| !to.contains(&a.0)) {
                to.push(a.0);
            }
            for o in to {
                if self.peers.get(&NodeId(o)).is_some_and(|p| p.up) {
                    fetches.entry(o).or_default().push(key.clone());
                }
            }
            self.holds.fetched += 1;
        }
        for (o, keys) in fetches {
            for chunk in keys.chunks(MAX_KEYS_PER_MESSAGE) {
                let body = Body::Hold(wire::Hold {
                    op: wire::HoldOp::Fetch as u32,
                    keys: chunk.to_vec(),
                    digests: Vec::new(),
                });
                self.send_control(NodeId(o), body);
            }
        }
    }
}

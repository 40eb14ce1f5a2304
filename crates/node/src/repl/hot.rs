//! Extra replicas of hot keys in a partitioned cluster (ARCHITECTURE, "Hot keys").
//!
//! A node that sees a key it does not own accessed faster than `hotkey-threshold` asks the
//! key's owners for a copy (`Hot` Subscribe). Each owner registers the node as a *holder* of
//! the key for a lease, sends it the key's whole state as a numbered delta, answers `Grant`,
//! and from then on sends it the key's deltas as it sends them to the other owners. The holder
//! serves reads of the key from its copy while at least one owner's grant stands; writes are
//! still forwarded to the owners. The holder renews the lease while the key stays hot and
//! gives the copy back (`Unsubscribe`, and the copy silently dropped) when it cools.
//!
//! Only the owners send a key's deltas, so a holder registers with every owner: each owner
//! sends its own writes. Both sides are bounded: an owner serves at most `MAX_HOLDS` (key,
//! holder) pairs, a node keeps at most `MAX_HELD` copies.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

/// How long an owner keeps sending a key to a holder that stopped renewing (a holder that
/// died or was cut off without its link dropping).
pub const HOT_LEASE_MS: u64 = 6_000;
/// How often a holder renews its leases (and re-asks owners that have not granted yet): well
/// inside the lease, so one lost renewal costs nothing.
pub const HOT_RENEW_MS: u64 = 2_000;
/// (key, holder) pairs one owner serves at most.
pub const MAX_HOLDS: usize = 4_096;
/// Copies of other nodes' keys one node keeps at most.
pub const MAX_HELD: usize = 64;
/// How often a node compares the sketch's rates with the threshold.
pub const HOT_CHECK_MS: u64 = 250;
/// Decisions kept for INFO's `Hotkeys` section.
const LOG_LEN: usize = 16;

/// Counters for INFO.
#[derive(Clone, Copy, Debug, Default)]
pub struct HotStats {
    /// Copies asked for / dropped as keys heated and cooled here.
    pub copies_taken: u64,
    pub copies_dropped: u64,
    /// Reads of a held copy served here instead of forwarded.
    pub local_reads: u64,
    /// Holders registered / released (lease ran out, link dropped, given back) as an owner.
    pub holders_added: u64,
    pub holders_released: u64,
    /// Subscriptions refused because `MAX_HOLDS` was reached.
    pub holds_refused: u64,
}

#[derive(Default)]
pub struct HotReplicas {
    /// Owner side: key -> holder -> lease end (ms).
    holders: BTreeMap<Bytes, BTreeMap<u32, u64>>,
    /// Pairs in `holders`.
    holds: usize,
    /// Holder side: key -> the owners whose grant stands.
    held: BTreeMap<Bytes, BTreeSet<u32>>,
    /// The last decisions, oldest first: (time ms, what).
    log: VecDeque<(u64, String)>,
    pub stats: HotStats,
    /// When the holder side next looks at the sketch, and next renews its leases.
    pub next_check_ms: u64,
    pub next_renew_ms: u64,
}

impl HotReplicas {
    pub fn is_holder(&self, key: &[u8], peer: u32) -> bool {
        !self.holders.is_empty() && self.holders.get(key).is_some_and(|h| h.contains_key(&peer))
    }

    /// Holders of `key` registered here (as an owner).
    pub fn holders_of(&self, key: &[u8]) -> usize {
        self.holders.get(key).map_or(0, |h| h.len())
    }

    /// Whether this node keeps a copy of `key` (granted or still asking).
    pub fn holds(&self, key: &[u8]) -> bool {
        !self.held.is_empty() && self.held.contains_key(key)
    }

    /// Whether reads of `key` may be served from the copy here: an owner granted it.
    pub fn serves(&self, key: &[u8]) -> bool {
        !self.held.is_empty() && self.held.get(key).is_some_and(|g| !g.is_empty())
    }

    pub fn held_keys(&self) -> impl Iterator<Item = (&Bytes, &BTreeSet<u32>)> {
        self.held.iter()
    }

    pub fn is_empty_held(&self) -> bool {
        self.held.is_empty()
    }

    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Starts keeping a copy of `key`; false at the bound.
    pub fn hold(&mut self, key: &Bytes) -> bool {
        if self.held.contains_key(key) {
            return true;
        }
        if self.held.len() >= MAX_HELD {
            return false;
        }
        self.held.insert(key.clone(), BTreeSet::new());
        self.stats.copies_taken += 1;
        true
    }

    /// Stops keeping the copy of `key`; whether it was kept.
    pub fn unhold(&mut self, key: &[u8]) -> bool {
        let was = self.held.remove(key).is_some();
        if was {
            self.stats.copies_dropped += 1;
        }
        was
    }

    pub fn granted(&mut self, owner: u32, key: &[u8]) {
        if let Some(g) = self.held.get_mut(key) {
            g.insert(owner);
        }
    }

    /// Registers (or renews) `peer` as a holder of `key` until `until_ms`; Some(true) when it
    /// is new (its state must be sent), None when refused at the bound.
    pub fn add_holder(&mut self, key: &Bytes, peer: u32, until_ms: u64) -> Option<bool> {
        if let Some(lease) = self.holders.get_mut(key).and_then(|h| h.get_mut(&peer)) {
            *lease = until_ms;
            return Some(false);
        }
        if self.holds >= MAX_HOLDS {
            self.stats.holds_refused += 1;
            return None;
        }
        self.holders
            .entry(key.clone())
            .or_default()
            .insert(peer, until_ms);
        self.holds += 1;
        self.stats.holders_added += 1;
        Some(true)
    }

    pub fn remove_holder(&mut self, key: &[u8], peer: u32) -> bool {
        let Some(h) = self.holders.get_mut(key) else {
            return false;
        };
        let removed = h.remove(&peer).is_some();
        if h.is_empty() {
            self.holders.remove(key);
        }
        if removed {
            self.holds -= 1;
            self.stats.holders_released += 1;
        }
        removed
    }

    /// The link to `peer` dropped: it holds nothing from us any more (it asks again when it
    /// is back), and its grants to us stand no more (reads forward until it grants again).
    pub fn peer_down(&mut self, peer: u32) {
        let keys: Vec<Bytes> = self
            .holders
            .iter()
            .filter(|(_, h)| h.contains_key(&peer))
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            self.remove_holder(&k, peer);
        }
        for g in self.held.values_mut() {
            g.remove(&peer);
        }
    }

    /// Releases holders whose lease ran out; returns them (for the log).
    pub fn expire(&mut self, now_ms: u64) -> Vec<(Bytes, u32)> {
        let due: Vec<(Bytes, u32)> = self
            .holders
            .iter()
            .flat_map(|(k, h)| {
                h.iter()
                    .filter(|(_, &until)| until <= now_ms)
                    .map(move |(p, _)| (k.clone(), *p))
            })
            .collect();
        for (k, p) in &due {
            self.remove_holder(k, *p);
        }
        due
    }

    /// Records a decision for INFO (the last `LOG_LEN` are kept).
    pub fn note(&mut self, now_ms: u64, what: String) {
        if self.log.len() >= LOG_LEN {
            self.log.pop_front();
        }
        self.log.push_back((now_ms, what));
    }

    pub fn log(&self) -> impl Iterator<Item = &(u64, String)> {
        self.log.iter()
    }

    pub fn check_invariants(&self) {
        let pairs: usize = self.holders.values().map(|h| h.len()).sum();
        assert_eq!(pairs, self.holds, "hot holder count");
        assert!(self.holds <= MAX_HOLDS, "hot holders unbounded");
        assert!(
            self.holders.values().all(|h| !h.is_empty()),
            "an empty holder list kept"
        );
        assert!(self.held.len() <= MAX_HELD, "hot copies unbounded");
        assert!(self.log.len() <= LOG_LEN, "hot log unbounded");
    }
}

/// A key as the log shows it: printable ASCII kept, the rest escaped, at most 64 bytes.
pub fn shown(key: &[u8]) -> String {
    let mut s = String::new();
    for &b in key.iter().take(64) {
        if b.is_ascii_graphic() {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    if key.len() > 64 {
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_bounded_renewed_and_released() {
        let mut h = HotReplicas::default();
        let k = Bytes::from_static(b"k");
        assert_eq!(h.add_holder(&k, 2, 100), Some(true));
        assert_eq!(h.add_holder(&k, 2, 200), Some(false), "a renewal");
        assert_eq!(h.add_holder(&k, 3, 150), Some(true));
        assert!(h.is_holder(b"k", 2) && h.is_holder(b"k", 3));
        assert_eq!(h.expire(160), vec![(k.clone(), 3)]);
        assert_eq!(h.holders_of(b"k"), 1);
        h.peer_down(2);
        assert_eq!(h.holders_of(b"k"), 0);
        for i in 0..MAX_HOLDS {
            let key = Bytes::from(format!("k{i}"));
            assert_eq!(h.add_holder(&key, 2, 1_000), Some(true));
        }
        assert_eq!(h.add_holder(&k, 9, 1_000), None, "over the bound");
        h.check_invariants();
    }

    #[test]
    fn a_copy_serves_only_while_granted() {
        let mut h = HotReplicas::default();
        let k = Bytes::from_static(b"k");
        assert!(h.hold(&k));
        assert!(h.holds(b"k") && !h.serves(b"k"));
        h.granted(4, b"k");
        assert!(h.serves(b"k"));
        h.peer_down(4);
        assert!(h.holds(b"k") && !h.serves(b"k"));
        assert!(h.unhold(b"k") && !h.holds(b"k"));
        for i in 0..MAX_HELD {
            assert!(h.hold(&Bytes::from(format!("k{i}"))));
        }
        assert!(!h.hold(&k), "over the bound");
        h.check_invariants();
    }
}

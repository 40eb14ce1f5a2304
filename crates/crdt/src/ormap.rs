//! Observed-remove map of CRDTs (Redis hashes: field -> register or counter; sorted-set
//! scores; also usable for a keyspace of nested types).
//!
//! Contract: each key carries one or more `(dot, value)` pairs and the map carries a causal
//! context. Every update of a key writes a fresh dot whose payload is the key's *whole new
//! value* (the current joined value with the operation applied) and supersedes the dots this
//! replica observed. The visible value of a key is the join of the payloads of its surviving
//! dots. Removal is observed-remove, exactly as in [`crate::OrSet`]:
//! - An update concurrent with a removal of the same key survives, and the key's value is what
//!   the updater wrote, which includes the state it had seen before the removal. For a register
//!   field that is simply the new value; for a counter field (HINCRBY concurrent with HDEL) it is
//!   the old value plus the increment. (A reset-on-remove counter would need every increment to
//!   carry a dot; not worth the metadata for Redis hashes.)
//! - Concurrent updates to the same key both survive and their values are joined (concurrent
//!   HINCRBYs add up; concurrent HSETs resolve by LWW).
//! - A removal that observed an update deletes it; a stale replica cannot resurrect it.
//!
//! Dots: each write needs a dot never used before, for any key (HSET of three fields takes three
//! dots), as for [`crate::OrSet`].
//!
//! Cost: a delta carries the key's whole value. That is small for registers and counters; for
//! large nested values prefer a map per key.
//!
//! GC: as for [`crate::OrSet`]: the stable frontier is folded into the map's context, so its dot
//! cloud is bounded by the dots above the frontier. Payloads are *not* collected: a payload is
//! the immutable snapshot written at its dot, and concurrent snapshots of a key are joined on
//! read; raising a snapshot's own context would make it cancel a concurrent snapshot's elements.
//! Registers and counters (what Redis hashes and sorted sets need) carry no removal metadata, so
//! nothing is lost there; a nested observed-remove payload (a map of sets) keeps its inner
//! metadata until the key is rewritten or removed.

use std::borrow::Cow;

use crate::kernel::DotKernel;
use crate::{CausalContext, Crdt, Dot, VersionVector};

/// An observed-remove map from `K` to the CRDT `V`.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct OrMap<K: Ord, V> {
    kernel: DotKernel<K, V>,
}

impl<K: Ord, V> Default for OrMap<K, V> {
    fn default() -> Self {
        OrMap {
            kernel: DotKernel::default(),
        }
    }
}

impl<K: Ord + Clone, V: Crdt> OrMap<K, V> {
    /// The empty map.
    #[must_use]
    pub fn new() -> OrMap<K, V> {
        OrMap::default()
    }

    /// Writes `value` as `key`'s new value at the fresh `dot`. `value` should be the current
    /// value ([`OrMap::get`]) with an operation applied, so that it includes what this replica
    /// saw; otherwise the effects it does not include disappear where it supersedes them.
    /// Returns the delta.
    pub fn put(&mut self, key: K, value: V, dot: Dot) -> OrMap<K, V> {
        OrMap {
            kernel: self.kernel.write(key, dot, value),
        }
    }

    /// Writes `part` at the fresh `dot` beside `key`'s current dots, superseding none of them:
    /// the key's value becomes the join of its old payloads and `part`. For a payload lattice
    /// where a part is enough (a HyperLogLog's registers, joined by max: the registers that
    /// rose), so the delta carries the change instead of the whole value. The price is a dot
    /// per such write until a [`OrMap::put`] supersedes them, and a removal concurrent with it
    /// leaves `part` alone (not the value it was added to). Returns the delta.
    pub fn put_beside(&mut self, key: K, part: V, dot: Dot) -> OrMap<K, V> {
        OrMap {
            kernel: self.kernel.add_beside(key, dot, part),
        }
    }

    /// The map holding only `key -> {dot: value}`, with causal context `cc` plus `dot`: the
    /// expansion of a state kept in a compact form elsewhere (the caller vouches that `cc` is
    /// what that form stands for). Unlike [`OrMap::put`], `dot` need not be fresh.
    #[must_use]
    pub fn singleton(key: K, dot: Dot, value: V, mut cc: CausalContext) -> OrMap<K, V> {
        cc.insert(dot);
        OrMap {
            kernel: DotKernel {
                entries: std::collections::BTreeMap::from([(
                    key,
                    crate::DotMap::single(dot, value),
                )]),
                cc,
            },
        }
    }

    /// Applies `f` to `key`'s current value (`V::default()` if absent) and writes the result at
    /// the fresh `dot`. If `f` fails nothing changes. Returns `f`'s result and the delta.
    pub fn update<R, E>(
        &mut self,
        key: K,
        dot: Dot,
        f: impl FnOnce(&mut V) -> Result<R, E>,
    ) -> Result<(R, OrMap<K, V>), E>
    where
        V: Default,
    {
        let mut value = self.get(&key).map(Cow::into_owned).unwrap_or_default();
        let r = f(&mut value)?;
        Ok((r, self.put(key, value, dot)))
    }

    /// Removes `key`'s observed dots. Returns the delta (a context only).
    pub fn remove<Q>(&mut self, key: &Q) -> OrMap<K, V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        OrMap {
            kernel: self.kernel.remove(key),
        }
    }

    /// Removes every observed key. Returns the delta.
    pub fn clear(&mut self) -> OrMap<K, V> {
        OrMap {
            kernel: self.kernel.clear(),
        }
    }

    /// `key`'s value: borrowed when a single dot supports it, otherwise the join of the
    /// concurrent payloads.
    #[must_use]
    pub fn get<Q>(&self, key: &Q) -> Option<Cow<'_, V>>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let dots = self.kernel.entries.get(key)?;
        let mut payloads = dots.values();
        let first = payloads.next()?;
        match payloads.next() {
            None => Some(Cow::Borrowed(first)),
            Some(second) => {
                let mut v = first.clone().merged(second);
                for p in payloads {
                    v.merge(p);
                }
                Some(Cow::Owned(v))
            }
        }
    }

    /// Whether `key` is present.
    #[must_use]
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.kernel.entries.contains_key(key)
    }

    /// Keys in ascending order.
    pub fn keys(&self) -> impl Iterator<Item = &K> + '_ {
        self.kernel.entries.keys()
    }

    /// `(key, value)` in key order (values as in [`OrMap::get`]).
    pub fn iter(&self) -> impl Iterator<Item = (&K, Cow<'_, V>)> + '_ {
        self.kernel
            .entries
            .keys()
            .filter_map(|k| Some((k, self.get(k)?)))
    }

    /// Number of keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.kernel.entries.len()
    }

    /// Whether there are no keys.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.kernel.entries.is_empty()
    }

    /// Keys with their `(dot, payload)` pairs, borrowed: what a digest covers, without the
    /// causal context.
    pub fn entries(&self) -> &std::collections::BTreeMap<K, crate::DotMap<V>> {
        &self.kernel.entries
    }

    /// Whether joining `delta` can change no key of this map but the keys `delta` carries
    /// (a small delta of writes; a removal names keys by their dots alone, so it does not
    /// qualify). A replica then updates its copy of the value key by key.
    #[must_use]
    pub fn delta_changes_only_its_keys(&self, delta: &Self) -> bool {
        self.kernel.reaches_only_carried_keys(&delta.kernel)
    }

    /// The causal context (for metrics: `context().cloud().len()`).
    #[must_use]
    pub fn context(&self) -> &CausalContext {
        &self.kernel.cc
    }
}

impl<K: Ord + Clone, V: Crdt> Crdt for OrMap<K, V> {
    fn merge(&mut self, other: &Self) {
        self.kernel.join(&other.kernel);
    }

    /// Folds `stable` into the map's context (payloads untouched; see the module docs).
    fn gc(&mut self, stable: &VersionVector) {
        self.kernel.gc(stable);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Counter, CounterValue, Hlc, LwwRegister, NodeId};

    fn d(n: u32, c: u64) -> Dot {
        Dot::new(NodeId(n), c)
    }

    #[test]
    fn concurrent_hincrby_add_up_and_hdel_that_saw_them_removes() {
        let mut a: OrMap<&str, Counter> = OrMap::new();
        let mut b = a.clone();
        a.update("f", d(1, 1), |c| c.incr(NodeId(1), 2)).unwrap();
        b.update("f", d(2, 1), |c| c.incr(NodeId(2), 3)).unwrap();
        let mut ab = a.clone().merged(&b);
        assert_eq!(ab.get("f").unwrap().value(), CounterValue::Int(5));
        let _ = ab.remove("f");
        assert!(!ab.clone().merged(&a).merged(&b).contains_key("f"));
    }

    #[test]
    fn concurrent_hset_and_hdel_keeps_the_new_value() {
        let mut a: OrMap<&str, LwwRegister<u32>> = OrMap::new();
        a.update("f", d(1, 1), |r| {
            Ok::<_, ()>(r.set(1, Hlc::new(1, 0, NodeId(1))))
        })
        .unwrap();
        let mut b = a.clone();
        let _ = a.remove("f");
        b.update("f", d(2, 1), |r| {
            Ok::<_, ()>(r.set(2, Hlc::new(2, 0, NodeId(2))))
        })
        .unwrap();
        let ab = a.merged(&b);
        assert_eq!(*ab.get("f").unwrap().value(), 2);
    }

    #[test]
    fn failed_update_changes_nothing() {
        let mut a: OrMap<&str, Counter> = OrMap::new();
        a.update("f", d(1, 1), |c| {
            let _ = c.set(crate::Number::Int(i64::MAX), Hlc::new(1, 0, NodeId(1)));
            Ok::<_, crate::CounterError>(())
        })
        .unwrap();
        let before = a.clone();
        assert!(a.update("f", d(1, 2), |c| c.incr(NodeId(1), 1)).is_err());
        assert_eq!(a, before);
    }
}

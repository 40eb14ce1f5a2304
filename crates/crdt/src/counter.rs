//! Counters with a resettable base: Redis INCR/DECR/INCRBY/DECRBY/INCRBYFLOAT plus SET.
//!
//! # State
//! `(base_ts, base, parts)`: a base value written by the last winning SET (an LWW register
//! ordered by [`Hlc`]) and, for each node, one contribution `(seq, int_sum, float_sum)` holding
//! the net effect of every increment that node applied *on top of this base*. A contribution is
//! written only by its node and `seq` grows with every write, so for a given node the entry with
//! the higher `seq` is the newer one.
//!
//! The value is `base + Σ int_sum + Σ float_sum`.
//!
//! # Join
//! Lexicographic: the side with the greater `base_ts` wins outright (its parts are kept, the
//! other side's parts are dropped); with equal `base_ts` the parts are joined per node by
//! taking the higher `seq`. Every contribution in a state is therefore tagged, implicitly, with
//! that state's base.
//!
//! # Semantics (the rule users see)
//! - Concurrent increments on the same base add up (each node contributes its own sum).
//! - A SET after increments (it saw them) resets the counter to the SET value.
//! - An increment counts only if it was applied on top of the base that finally wins. In
//!   particular an increment *concurrent* with a SET is discarded when that SET's base wins,
//!   even if the increment happened later in wall-clock time: the SET wins. Increments made
//!   after a replica has seen the SET are applied on top of it and count.
//! - Concurrent SETs resolve by LWW on their timestamps; increments on the losing base vanish.
//!
//! Why: this keeps the state a join-semilattice of size O(writers) with no per-increment
//! metadata. Keeping increments concurrent with a SET would require remembering each increment's
//! own timestamp forever.
//!
//! # Numbers
//! Integer increments are exact (`i128` sums; every accepted INCR checks that the visible
//! result stays in `i64`, as Redis does). Concurrent increments on different replicas can still
//! push the merged value outside `i64`; [`Counter::value`] then reports the exact `i128` and a
//! further INCR fails with [`CounterError::NotInteger`] (Redis: "value is not an integer or out
//! of range"). Once the base is a float or any surviving contribution includes a float
//! increment, the value is a float, summed in a fixed order (base, then integers, then each
//! node's float sum in node order), so every replica computes the same bits.

use std::collections::BTreeMap;

use crate::{Crdt, Hlc, NodeId};

/// A base value established by SET.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Number {
    /// An integer base.
    Int(i64),
    /// A float base (must be finite).
    Float(f64),
}

impl Default for Number {
    fn default() -> Number {
        Number::Int(0)
    }
}

/// The current value of a counter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CounterValue {
    /// Exact integer (may exceed `i64` only through concurrent increments; see module docs).
    Int(i128),
    /// Float result (finite).
    Float(f64),
}

/// Why an increment was refused (the state is unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterError {
    /// The result would leave the `i64` range ("increment or decrement would overflow").
    Overflow,
    /// The current value is not an integer in `i64` range ("value is not an integer or out of
    /// range").
    NotInteger,
    /// The increment or the result is NaN or infinite ("increment would produce NaN or
    /// Infinity").
    NotFinite,
}

impl std::fmt::Display for CounterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CounterError::Overflow => "increment or decrement would overflow",
            CounterError::NotInteger => "value is not an integer or out of range",
            CounterError::NotFinite => "increment would produce NaN or Infinity",
        })
    }
}

impl std::error::Error for CounterError {}

/// One node's net increments on the current base.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
struct Part {
    /// Number of writes this node made on this base; the newer entry has the higher `seq`.
    seq: u64,
    int: i128,
    /// `None` until the node applies a float increment on this base.
    float: Option<f64>,
}

/// A replicated counter: LWW base plus per-node increment sums. See the module docs.
#[derive(Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Counter {
    base_ts: Hlc,
    base: Number,
    parts: BTreeMap<NodeId, Part>,
}

impl Counter {
    /// A counter at 0 with no base written (`base_ts` is [`Hlc::ZERO`]).
    #[must_use]
    pub fn new() -> Counter {
        Counter::default()
    }

    /// The timestamp of the winning SET ([`Hlc::ZERO`] if none). Observe it before writing.
    #[must_use]
    pub fn base_ts(&self) -> Hlc {
        self.base_ts
    }

    /// The value of the winning SET.
    #[must_use]
    pub fn base(&self) -> Number {
        self.base
    }

    /// Number of nodes with a contribution on the current base.
    #[must_use]
    pub fn contributors(&self) -> usize {
        self.parts.len()
    }

    /// SET: establish `value` as the new base at `ts`, discarding every increment on older
    /// bases. Returns the delta (base only, no parts). If `ts` is not greater than the current
    /// base timestamp the SET loses and the state is unchanged.
    pub fn set(&mut self, value: Number, ts: Hlc) -> Counter {
        debug_assert!(!matches!(value, Number::Float(f) if !f.is_finite()));
        let delta = Counter {
            base_ts: ts,
            base: value,
            parts: BTreeMap::new(),
        };
        self.merge(&delta);
        delta
    }

    /// The current value.
    #[must_use]
    pub fn value(&self) -> CounterValue {
        let (mut int, mut float) = match self.base {
            Number::Int(i) => (i128::from(i), None),
            Number::Float(f) => (0, Some(f)),
        };
        for p in self.parts.values() {
            // Unreachable in practice (sums are bounded by about 2^64 per node); saturate rather
            // than panic.
            int = int.saturating_add(p.int);
        }
        for p in self.parts.values() {
            if let Some(f) = p.float {
                float = Some(float.unwrap_or(0.0) + f);
            }
        }
        match float {
            None => CounterValue::Int(int),
            Some(f) => CounterValue::Float(int as f64 + f),
        }
    }

    /// The current value as an `i64`, if it is an integer in range (an integral float counts).
    fn as_i64(&self) -> Result<i64, CounterError> {
        match self.value() {
            CounterValue::Int(i) => i64::try_from(i).map_err(|_| CounterError::NotInteger),
            CounterValue::Float(f) => {
                // ±2^63 are exact in f64; check the range on the float before converting.
                const I64_RANGE: std::ops::Range<f64> =
                    -9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0;
                if f.fract() == 0.0 && I64_RANGE.contains(&f) {
                    Ok(f as i64)
                } else {
                    Err(CounterError::NotInteger)
                }
            }
        }
    }

    /// INCRBY `by` (negative for DECRBY) by `node`. Fails, changing nothing, if the current
    /// value is not an integer in `i64` range or the result would overflow `i64`. Returns the
    /// delta: the current base plus `node`'s updated contribution.
    pub fn incr(&mut self, node: NodeId, by: i64) -> Result<Counter, CounterError> {
        let cur = self.as_i64()?;
        cur.checked_add(by).ok_or(CounterError::Overflow)?;
        let mut part = self.parts.get(&node).copied().unwrap_or_default();
        part.int = part
            .int
            .checked_add(i128::from(by))
            .ok_or(CounterError::Overflow)?;
        part.seq += 1;
        Ok(self.write_part(node, part))
    }

    /// INCRBYFLOAT `by` by `node`. Fails, changing nothing, if `by` or the result is not finite.
    /// Afterwards the value is a float. Returns the delta.
    pub fn incr_float(&mut self, node: NodeId, by: f64) -> Result<Counter, CounterError> {
        if !by.is_finite() {
            return Err(CounterError::NotFinite);
        }
        let cur = match self.value() {
            CounterValue::Int(i) => i as f64,
            CounterValue::Float(f) => f,
        };
        if !(cur + by).is_finite() {
            return Err(CounterError::NotFinite);
        }
        let mut part = self.parts.get(&node).copied().unwrap_or_default();
        part.float = Some(part.float.unwrap_or(0.0) + by);
        part.seq += 1;
        Ok(self.write_part(node, part))
    }

    fn write_part(&mut self, node: NodeId, part: Part) -> Counter {
        self.parts.insert(node, part);
        Counter {
            base_ts: self.base_ts,
            base: self.base,
            parts: BTreeMap::from([(node, part)]),
        }
    }
}

impl Crdt for Counter {
    fn merge(&mut self, other: &Self) {
        if other.base_ts > self.base_ts {
            self.clone_from(other);
            return;
        }
        if other.base_ts < self.base_ts {
            return;
        }
        for (&node, theirs) in &other.parts {
            let mine = self.parts.entry(node).or_default();
            if theirs.seq > mine.seq {
                *mine = *theirs;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = NodeId(1);
    const B: NodeId = NodeId(2);

    fn ts(wall: u64, node: NodeId) -> Hlc {
        Hlc::new(wall, 0, node)
    }

    #[test]
    fn concurrent_increments_add_up() {
        let mut a = Counter::new();
        let mut b = Counter::new();
        a.incr(A, 5).unwrap();
        a.incr(A, -1).unwrap();
        b.incr(B, 10).unwrap();
        let ab = a.clone().merged(&b);
        assert_eq!(ab.value(), CounterValue::Int(14));
        assert_eq!(ab, b.merged(&a));
    }

    #[test]
    fn set_after_increments_resets() {
        let mut a = Counter::new();
        let mut b = Counter::new();
        a.incr(A, 5).unwrap();
        b.incr(B, 7).unwrap();
        a.merge(&b); // a saw both increments
        let _ = a.set(Number::Int(100), ts(50, A));
        a.incr(A, 1).unwrap(); // after the SET: counts
        b.merge(&a);
        assert_eq!(b.value(), CounterValue::Int(101));
    }

    #[test]
    fn increment_concurrent_with_winning_set_is_discarded() {
        let mut a = Counter::new();
        let mut b = Counter::new();
        let _ = a.set(Number::Int(100), ts(50, A));
        b.incr(B, 3).unwrap(); // did not see the SET
        assert_eq!(a.clone().merged(&b).value(), CounterValue::Int(100));
        assert_eq!(b.merged(&a).value(), CounterValue::Int(100));
    }

    #[test]
    fn stale_set_loses() {
        let mut a = Counter::new();
        let _ = a.set(Number::Int(1), ts(50, B));
        let _ = a.set(Number::Int(2), ts(50, A)); // lower node id at the same time
        assert_eq!(a.value(), CounterValue::Int(1));
    }

    #[test]
    fn overflow_is_reported_and_changes_nothing() {
        let mut a = Counter::new();
        let _ = a.set(Number::Int(i64::MAX - 1), ts(1, A));
        a.incr(A, 1).unwrap();
        let before = a.clone();
        assert_eq!(a.incr(A, 1), Err(CounterError::Overflow));
        assert_eq!(a, before);
        a.incr(A, -5).unwrap();
        assert_eq!(a.value(), CounterValue::Int(i128::from(i64::MAX) - 5));
    }

    #[test]
    fn concurrent_increments_past_i64_stay_exact_and_block_incr() {
        let mut a = Counter::new();
        let _ = a.set(Number::Int(i64::MAX - 10), ts(1, A));
        let mut b = a.clone();
        a.incr(A, 10).unwrap();
        b.incr(B, 10).unwrap();
        a.merge(&b);
        assert_eq!(a.value(), CounterValue::Int(i128::from(i64::MAX) + 10));
        assert_eq!(a.incr(A, -1), Err(CounterError::NotInteger));
    }

    #[test]
    fn float_increments() {
        let mut a = Counter::new();
        let _ = a.set(Number::Int(10), ts(1, A));
        let mut b = a.clone();
        a.incr_float(A, 1.5).unwrap();
        b.incr(B, 2).unwrap();
        a.merge(&b);
        assert_eq!(a.value(), CounterValue::Float(13.5));
        assert_eq!(a.incr(A, 1), Err(CounterError::NotInteger));
        a.incr_float(A, 0.5).unwrap();
        assert_eq!(a.value(), CounterValue::Float(14.0));
        a.incr(A, 1).unwrap(); // integral float: INCR allowed, as for the string "14" in Redis
        assert_eq!(a.value(), CounterValue::Float(15.0));
        assert_eq!(a.incr_float(A, f64::INFINITY), Err(CounterError::NotFinite));
        assert!(a.incr_float(A, f64::MAX).is_ok());
        assert_eq!(a.incr_float(A, f64::MAX), Err(CounterError::NotFinite));
    }

    #[test]
    fn delta_of_increment_carries_base() {
        let mut a = Counter::new();
        let _ = a.set(Number::Int(7), ts(3, A));
        let d = a.incr(A, 1).unwrap();
        // A replica that never saw the SET learns it from the delta.
        let fresh = Counter::new().merged(&d);
        assert_eq!(fresh.value(), CounterValue::Int(8));
    }
}

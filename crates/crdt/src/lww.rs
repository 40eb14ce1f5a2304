//! Last-writer-wins register.
//!
//! Contract: the state is `(value, ts)`; the join keeps the value with the greater [`Hlc`].
//! Because `Hlc` orders by `(wall_ms, logical, node)` and a node's clock never issues the same
//! timestamp twice, two different writes never tie: the winner is the same on every replica
//! whatever order the writes arrive in. (Equal timestamps therefore mean the same write; the
//! join then keeps `self`, which equals `other`.)
//!
//! A write with a timestamp not greater than the current one loses immediately. Callers avoid
//! that by stamping writes with an [`crate::HlcClock`] that has observed the register's `ts`.

use crate::{Crdt, Hlc};

/// A value and the timestamp of the write that produced it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LwwRegister<T> {
    value: T,
    ts: Hlc,
}

impl<T: Clone> LwwRegister<T> {
    /// A register holding `value` written at `ts`.
    #[must_use]
    pub fn new(value: T, ts: Hlc) -> LwwRegister<T> {
        LwwRegister { value, ts }
    }

    /// The current value.
    #[must_use]
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The timestamp of the current value (observe it before writing).
    #[must_use]
    pub fn ts(&self) -> Hlc {
        self.ts
    }

    /// Consumes the register, returning the value.
    #[must_use]
    pub fn into_value(self) -> T {
        self.value
    }

    /// Writes `value` at `ts`; returns the delta (the written register itself). If `ts` is not
    /// greater than the current timestamp the write loses and the state is unchanged.
    pub fn set(&mut self, value: T, ts: Hlc) -> LwwRegister<T> {
        let delta = LwwRegister::new(value, ts);
        self.merge(&delta);
        delta
    }
}

impl<T: Clone> Crdt for LwwRegister<T> {
    fn merge(&mut self, other: &Self) {
        if other.ts > self.ts {
            self.value = other.value.clone();
            self.ts = other.ts;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NodeId;

    #[test]
    fn higher_timestamp_wins_in_either_order() {
        let a = LwwRegister::new("a", Hlc::new(10, 0, NodeId(2)));
        let b = LwwRegister::new("b", Hlc::new(11, 0, NodeId(1)));
        assert_eq!(a.clone().merged(&b).value(), &"b");
        assert_eq!(b.clone().merged(&a).value(), &"b");
    }

    #[test]
    fn ties_break_by_node_id_in_either_order() {
        let a = LwwRegister::new("from-1", Hlc::new(10, 3, NodeId(1)));
        let b = LwwRegister::new("from-2", Hlc::new(10, 3, NodeId(2)));
        assert_eq!(a.clone().merged(&b).value(), &"from-2");
        assert_eq!(b.clone().merged(&a).value(), &"from-2");
    }

    #[test]
    fn stale_write_loses() {
        let mut r = LwwRegister::new(1, Hlc::new(10, 0, NodeId(1)));
        let _ = r.set(2, Hlc::new(9, 0, NodeId(1)));
        assert_eq!(*r.value(), 1);
        let _ = r.set(3, Hlc::new(10, 1, NodeId(1)));
        assert_eq!(*r.value(), 3);
    }
}

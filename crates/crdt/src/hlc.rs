//! Hybrid logical clocks.
//!
//! An [`Hlc`] is `(wall_ms, logical, node)`, totally ordered lexicographically. `wall_ms` keeps
//! timestamps close to physical time (so "last writer wins" means roughly what users expect),
//! `logical` orders events inside one millisecond and survives a wall clock that stalls or goes
//! backwards, and `node` breaks the remaining ties, so two different writes never compare equal
//! and the winner of a conflict never depends on the order in which replicas received them.
//!
//! The clock never reads time itself: the driver passes the wall time in (the simulator skews
//! it per node).

use crate::NodeId;

/// A hybrid logical timestamp. The derived order is `(wall_ms, logical, node)` lexicographic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Hlc {
    /// Milliseconds of (skewed) physical time.
    pub wall_ms: u64,
    /// Counter for events that share `wall_ms`.
    pub logical: u32,
    /// The node that issued the timestamp: the final tie-breaker.
    pub node: NodeId,
}

impl Hlc {
    /// The least timestamp. [`HlcClock`] never issues it, so it can mean "never written".
    pub const ZERO: Hlc = Hlc {
        wall_ms: 0,
        logical: 0,
        node: NodeId(0),
    };

    /// Builds a timestamp from its parts.
    #[must_use]
    pub const fn new(wall_ms: u64, logical: u32, node: NodeId) -> Hlc {
        Hlc {
            wall_ms,
            logical,
            node,
        }
    }
}

/// Default tolerance for remote timestamps ahead of local wall time before [`Skew::Exceeded`]
/// is reported. Generous on purpose: it feeds a metric, it does not reject anything.
pub const DEFAULT_MAX_SKEW_MS: u64 = 10_000;

/// What [`HlcClock::observe`] found about the remote timestamp's distance from local time.
#[must_use = "count Skew::Exceeded in a metric"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skew {
    /// The remote timestamp is at most `max_skew_ms` ahead of local wall time.
    Within,
    /// The remote timestamp is further ahead than allowed. It was still accepted (refusing it
    /// would make the replica unable to order later writes after it), but the node should count
    /// it: a persistently fast clock elsewhere makes that node win every LWW conflict.
    Exceeded {
        /// How far ahead of local wall time the remote timestamp was.
        ahead_ms: u64,
    },
}

/// A node's hybrid logical clock.
///
/// Invariant: every timestamp returned by [`HlcClock::now`] is strictly greater than every
/// timestamp previously returned by `now` or passed to [`HlcClock::observe`] on this clock,
/// whatever wall times are passed in (they may go backwards).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct HlcClock {
    node: NodeId,
    /// `(wall_ms, logical)` of the greatest timestamp issued or observed.
    wall_ms: u64,
    logical: u32,
    max_skew_ms: u64,
}

impl HlcClock {
    /// A clock for `node` with [`DEFAULT_MAX_SKEW_MS`].
    #[must_use]
    pub fn new(node: NodeId) -> HlcClock {
        HlcClock::with_max_skew(node, DEFAULT_MAX_SKEW_MS)
    }

    /// A clock for `node` that reports remote timestamps more than `max_skew_ms` ahead.
    #[must_use]
    pub fn with_max_skew(node: NodeId, max_skew_ms: u64) -> HlcClock {
        HlcClock {
            node,
            wall_ms: 0,
            logical: 0,
            max_skew_ms,
        }
    }

    /// The node this clock stamps.
    #[must_use]
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The greatest `(wall_ms, logical)` issued or observed so far, stamped with this node.
    #[must_use]
    pub fn last(&self) -> Hlc {
        Hlc::new(self.wall_ms, self.logical, self.node)
    }

    /// A fresh timestamp for a local event at wall time `wall_ms`.
    ///
    /// If the wall clock moved past everything seen, the timestamp is `(wall_ms, 0)`; otherwise
    /// (same millisecond, clock behind a remote node, or clock stepped backwards) it keeps the
    /// greatest wall time seen and bumps the logical counter. If the logical counter is
    /// exhausted the wall component is advanced by one millisecond instead.
    pub fn now(&mut self, wall_ms: u64) -> Hlc {
        if wall_ms > self.wall_ms {
            self.wall_ms = wall_ms;
            self.logical = 0;
        } else if self.logical == u32::MAX {
            self.wall_ms = self
                .wall_ms
                .checked_add(1)
                .expect("hybrid logical clock exhausted");
            self.logical = 0;
        } else {
            self.logical += 1;
        }
        self.last()
    }

    /// Account for a timestamp received from another replica at local wall time `wall_ms`, so
    /// that later local timestamps order after it.
    ///
    /// The remote timestamp is always accepted; if its wall component is more than
    /// `max_skew_ms` ahead of `wall_ms`, [`Skew::Exceeded`] is returned for the node's metrics.
    pub fn observe(&mut self, remote: Hlc, wall_ms: u64) -> Skew {
        if (remote.wall_ms, remote.logical) > (self.wall_ms, self.logical) {
            self.wall_ms = remote.wall_ms;
            self.logical = remote.logical;
        }
        let ahead_ms = remote.wall_ms.saturating_sub(wall_ms);
        if ahead_ms > self.max_skew_ms {
            Skew::Exceeded { ahead_ms }
        } else {
            Skew::Within
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_when_wall_clock_goes_backwards() {
        let mut c = HlcClock::new(NodeId(1));
        let a = c.now(1_000);
        let b = c.now(500); // clock stepped back
        let d = c.now(500);
        let e = c.now(1_000);
        let f = c.now(1_001);
        assert!(
            a < b && b < d && d < e && e < f,
            "{a:?} {b:?} {d:?} {e:?} {f:?}"
        );
        assert_eq!(b, Hlc::new(1_000, 1, NodeId(1)));
        assert_eq!(f, Hlc::new(1_001, 0, NodeId(1)));
    }

    #[test]
    fn first_timestamp_is_above_zero() {
        let mut c = HlcClock::new(NodeId(0));
        assert!(c.now(0) > Hlc::ZERO);
    }

    #[test]
    fn now_after_observe_is_greater_even_against_higher_node_id() {
        let mut c = HlcClock::new(NodeId(1));
        let remote = Hlc::new(5_000, 7, NodeId(9));
        assert_eq!(c.observe(remote, 4_999), Skew::Within);
        let t = c.now(10);
        assert!(t > remote);
        assert_eq!(t, Hlc::new(5_000, 8, NodeId(1)));
    }

    #[test]
    fn observing_an_older_timestamp_changes_nothing() {
        let mut c = HlcClock::new(NodeId(1));
        let t = c.now(2_000);
        let _ = c.observe(Hlc::new(1_000, 99, NodeId(2)), 2_000);
        assert_eq!(c.last(), t);
    }

    #[test]
    fn excessive_skew_is_accepted_but_reported() {
        let mut c = HlcClock::with_max_skew(NodeId(1), 100);
        let remote = Hlc::new(1_500, 0, NodeId(2));
        assert_eq!(c.observe(remote, 1_000), Skew::Exceeded { ahead_ms: 500 });
        assert!(
            c.now(1_000) > remote,
            "the remote timestamp was still absorbed"
        );
        assert_eq!(
            c.observe(Hlc::new(1_100, 0, NodeId(2)), 1_000),
            Skew::Within
        );
    }

    #[test]
    fn logical_overflow_advances_wall() {
        let mut c = HlcClock::new(NodeId(1));
        let _ = c.observe(Hlc::new(10, u32::MAX, NodeId(2)), 10);
        let t = c.now(10);
        assert_eq!(t, Hlc::new(11, 0, NodeId(1)));
    }

    #[test]
    fn order_is_wall_then_logical_then_node() {
        let n = NodeId;
        assert!(Hlc::new(1, 9, n(9)) < Hlc::new(2, 0, n(0)));
        assert!(Hlc::new(1, 1, n(9)) < Hlc::new(1, 2, n(0)));
        assert!(Hlc::new(1, 1, n(1)) < Hlc::new(1, 1, n(2)));
    }
}

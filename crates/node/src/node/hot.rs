//! Hot keys in the shell: which keys this node asks copies of, renews and gives back
//! (ARCHITECTURE, "Hot keys"; the owners' side and the copies are `crate::repl::hot`).
//!
//! The decision is local to the node whose clients make the traffic: it counts their accesses
//! in its sketch (`Core::hot_keys`), so a key it serves from a copy keeps its rate and the
//! copy stays while the clients keep reading. A key is taken at `hotkey-threshold` accesses
//! per second and given back below half of it, so a rate near the threshold does not make the
//! copy come and go.

use bytes::Bytes;

use super::Node;
use crate::repl::hot::{shown, HOT_CHECK_MS, HOT_RENEW_MS};
use crate::repl::wire::HotOp;

impl Node {
    /// From the timer: compares the rates with the threshold, takes copies of keys that
    /// turned hot, gives back those that cooled, renews the rest.
    pub(super) fn hot_tick(&mut self, now_ms: u64) {
        let core = &mut self.core;
        core.hot_keys.roll_to(now_ms);
        let threshold = core.config.hotkey_threshold;
        let (Some(c), Some(r)) = (core.cluster.as_deref(), core.repl.as_deref_mut()) else {
            return;
        };
        let Some(p) = c.placement() else {
            return;
        };
        if now_ms < r.hot.next_check_ms {
            return;
        }
        r.hot.next_check_ms = now_ms + HOT_CHECK_MS;
        let owners_of = |key: &[u8]| -> Vec<u32> {
            p.owners(lattice_placement::key_slot(key))
                .iter()
                .copied()
                .filter(|&o| o != c.me)
                .collect()
        };
        let cooled: Vec<(Bytes, u64)> = r
            .hot
            .held_keys()
            .map(|(k, _)| (k.clone(), core.hot_keys.rate_per_s(k)))
            .filter(|&(_, rate)| threshold == 0 || rate < threshold / 2)
            .collect();
        for (key, rate) in cooled {
            r.send_hot(&owners_of(&key), HotOp::Unsubscribe, vec![key.clone()]);
            if r.forget_copy(&key, &mut core.db) {
                core.db.remove(&key);
            }
            let what = format!("{} cooled to {rate}/s: copy dropped", shown(&key));
            r.hot.note(now_ms, what);
        }
        let mut asked = Vec::new();
        if threshold > 0 {
            for (key, rate) in core.hot_keys.hot(threshold) {
                if c.owns(lattice_placement::key_slot(key)) || r.hot.holds(key) {
                    continue;
                }
                let key = Bytes::copy_from_slice(key);
                if !r.hot.hold(&key) {
                    break; // as many copies as a node keeps
                }
                let what = format!("{} hot at {rate}/s: copy asked for", shown(&key));
                r.hot.note(now_ms, what);
                asked.push(key);
            }
        }
        let renew = now_ms >= r.hot.next_renew_ms;
        if renew {
            r.hot.next_renew_ms = now_ms + HOT_RENEW_MS;
            asked = r.hot.held_keys().map(|(k, _)| k.clone()).collect();
        }
        // One message per owner and key: a node holds at most `MAX_HELD` copies.
        for key in asked {
            r.send_hot(&owners_of(&key), HotOp::Subscribe, vec![key]);
        }
    }

    /// This node's hot-key counters (all zero unless replicated).
    pub fn hot_counts(&self) -> crate::repl::hot::HotStats {
        self.core
            .repl
            .as_ref()
            .map(|r| r.hot.stats)
            .unwrap_or_default()
    }

    /// Whether this node holds a copy of `key` it does not own (tests and the simulator's
    /// placement check).
    pub fn holds_hot_copy(&self, key: &[u8]) -> bool {
        self.core.repl.as_ref().is_some_and(|r| r.hot.holds(key))
    }
}

//! Fault-injection switches that make rare paths common, only under simulation.
//!
//! FoundationDB style: each call site (named by a static string) is switched on or off once per
//! seed, and a switched-on site fires with a small probability each time it is reached. The
//! switchboard lives in the node value, never in global state; the server builds nodes with
//! [`Buggify::disabled`], so production never takes these paths by chance.

use std::collections::BTreeMap;

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Probability that a site is enabled for a given seed, and that an enabled site fires.
const SITE_ENABLED_PERCENT: u64 = 25;
const FIRE_PERCENT: u64 = 10;

pub struct Buggify {
    rng: Option<ChaCha8Rng>,
    sites: BTreeMap<&'static str, bool>,
    fired: u64,
}

impl Buggify {
    /// Never fires. What every production node uses.
    pub fn disabled() -> Buggify {
        Buggify {
            rng: None,
            sites: BTreeMap::new(),
            fired: 0,
        }
    }

    /// Fires at sites chosen by `seed`.
    pub fn enabled(seed: u64) -> Buggify {
        Buggify {
            rng: Some(ChaCha8Rng::seed_from_u64(seed ^ 0xB0661F1)),
            sites: BTreeMap::new(),
            fired: 0,
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.rng.is_some()
    }

    /// True when the rare path at `site` should be taken now.
    pub fn fire(&mut self, site: &'static str) -> bool {
        let Some(rng) = self.rng.as_mut() else {
            return false;
        };
        let on = *self
            .sites
            .entry(site)
            .or_insert_with(|| rng.next_u64() % 100 < SITE_ENABLED_PERCENT);
        let fire = on && rng.next_u64() % 100 < FIRE_PERCENT;
        self.fired += fire as u64;
        fire
    }

    /// How many times any site fired (reported by the simulator).
    pub fn fired(&self) -> u64 {
        self.fired
    }
}

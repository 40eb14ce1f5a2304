//! The simulator's only source of randomness: a ChaCha8 stream seeded from the run's seed, with
//! the few drawing helpers the world needs. Everything random in a run (its options, latencies,
//! faults, commands, the nodes' own seeds) is drawn from here, so a seed replays a run exactly.

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub struct Rand {
    inner: ChaCha8Rng,
}

impl Rand {
    pub fn new(seed: u64) -> Rand {
        Rand {
            inner: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    pub fn next(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// Uniform in `0..n` (`n` > 0). Multiply-shift: no modulo bias worth caring about here.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((self.next() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `lo..=hi` for signed values.
    pub fn range_i(&mut self, lo: i64, hi: i64) -> i64 {
        debug_assert!(lo <= hi);
        lo.wrapping_add(self.below((hi - lo) as u64 + 1) as i64)
    }

    /// True with probability `ppm` parts per million.
    pub fn ppm(&mut self, ppm: u32) -> bool {
        ppm > 0 && self.below(1_000_000) < ppm as u64
    }

    /// True with probability `pct` percent.
    pub fn pct(&mut self, pct: u32) -> bool {
        self.below(100) < pct as u64
    }

    /// A uniformly chosen element.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// An index chosen with probability proportional to `weights` (at least one non-zero).
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| w as u64).sum();
        debug_assert!(total > 0);
        let mut x = self.below(total);
        for (i, &w) in weights.iter().enumerate() {
            if x < w as u64 {
                return i;
            }
            x -= w as u64;
        }
        weights.len() - 1
    }

    /// Roughly exponential with the given mean (inverse transform on 53 random bits).
    pub fn exp(&mut self, mean: f64) -> f64 {
        let u = ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        -u.ln() * mean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let (mut a, mut b) = (Rand::new(42), Rand::new(42));
        for _ in 0..100 {
            assert_eq!(a.next(), b.next());
        }
        assert_ne!(Rand::new(1).next(), Rand::new(2).next());
    }

    #[test]
    fn helpers_stay_in_range() {
        let mut r = Rand::new(7);
        for _ in 0..10_000 {
            assert!(r.below(10) < 10);
            let v = r.range(5, 9);
            assert!((5..=9).contains(&v));
            let s = r.range_i(-3, 3);
            assert!((-3..=3).contains(&s));
            assert!(r.weighted(&[0, 3, 0, 1]) % 2 == 1);
            assert!(r.exp(10.0) >= 0.0);
        }
    }
}

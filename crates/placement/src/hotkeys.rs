//! A bounded sketch of the most accessed keys: space-saving counts over a sample of accesses,
//! halved every window so that a key that cools falls out.
//!
//! Bounded on every axis the issue cares about: at most `capacity` keys are remembered (each
//! key at most `max_key_bytes` long), recording a sampled-out access costs one counter step,
//! and a sampled access costs one ordered-map lookup (plus a scan of `capacity` entries only
//! when an unseen key replaces the smallest). Deterministic: sampling is every n-th access,
//! not random, so the simulator replays it exactly.
//!
//! Space-saving's guarantee: a key whose true sampled count exceeds the total divided by
//! `capacity` is always present, and a present key's count over-estimates its true count by
//! at most its recorded `error`.

use std::collections::BTreeMap;

/// Tunables, with the node's defaults in [`Default`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HotKeyConfig {
    /// Keys remembered at most.
    pub capacity: usize,
    /// Counts halve once per window.
    pub window_ms: u64,
    /// One access in this many is counted (1 counts all).
    pub sample_every: u32,
    /// Longer keys are not tracked (a hot key is almost never a huge one, and the bound keeps
    /// the sketch's memory fixed).
    pub max_key_bytes: usize,
}

impl Default for HotKeyConfig {
    fn default() -> Self {
        HotKeyConfig {
            capacity: 128,
            window_ms: 1000,
            sample_every: 8,
            max_key_bytes: 256,
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    key: Vec<u8>,
    /// Sampled accesses, decayed: halved at every window boundary.
    count: u64,
    /// Over-estimate inherited when this key replaced another.
    error: u64,
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct HotKeys {
    config: HotKeyConfig,
    entries: Vec<Entry>,
    /// Key -> position in `entries`.
    index: BTreeMap<Vec<u8>, usize>,
    /// Accesses since the last sampled one.
    skipped: u32,
    window_start_ms: u64,
}

impl HotKeys {
    pub fn new(config: HotKeyConfig, now_ms: u64) -> HotKeys {
        assert!(config.capacity > 0 && config.window_ms > 0 && config.sample_every > 0);
        HotKeys {
            config,
            entries: Vec::with_capacity(config.capacity),
            index: BTreeMap::new(),
            skipped: 0,
            window_start_ms: now_ms,
        }
    }

    /// Counts one access to `key` at `now_ms` (times must not go backwards by more than a
    /// window; a step back is treated as no time passing).
    pub fn record(&mut self, key: &[u8], now_ms: u64) {
        if self.sample() {
            self.count(key, now_ms);
        }
    }

    /// Steps the sampling counter for one access; true when this access is to be counted
    /// with [`HotKeys::count`]. Lets a caller skip finding the key of an access that is not
    /// sampled (the per-command cost is then one increment).
    pub fn sample(&mut self) -> bool {
        self.skipped += 1;
        if self.skipped < self.config.sample_every {
            return false;
        }
        self.skipped = 0;
        true
    }

    /// Counts a sampled access to `key` at `now_ms`.
    pub fn count(&mut self, key: &[u8], now_ms: u64) {
        self.roll(now_ms);
        if key.len() > self.config.max_key_bytes {
            return;
        }
        if let Some(&i) = self.index.get(key) {
            self.entries[i].count += 1;
            return;
        }
        if self.entries.len() < self.config.capacity {
            self.index.insert(key.to_vec(), self.entries.len());
            self.entries.push(Entry {
                key: key.to_vec(),
                count: 1,
                error: 0,
            });
            return;
        }
        // Space-saving: the new key takes the smallest entry's place and count.
        let (i, min) = self
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.count)
            .map(|(i, e)| (i, e.count))
            .expect("capacity is above zero");
        let old = std::mem::replace(
            &mut self.entries[i],
            Entry {
                key: key.to_vec(),
                count: min + 1,
                error: min,
            },
        );
        self.index.remove(&old.key);
        self.index.insert(key.to_vec(), i);
    }

    /// Brings the decay up to `now_ms` (counts only decay when accesses are counted or this
    /// is called: a reader of rates calls it first, or a key nobody touches any more would
    /// keep its last rate).
    pub fn roll_to(&mut self, now_ms: u64) {
        self.roll(now_ms);
    }

    /// Halves every count once per elapsed window; entries that reach zero are forgotten.
    fn roll(&mut self, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(self.window_start_ms);
        if elapsed < self.config.window_ms {
            return;
        }
        let windows = elapsed / self.config.window_ms;
        self.window_start_ms += windows * self.config.window_ms;
        let shift = windows.min(63) as u32;
        for e in &mut self.entries {
            e.count >>= shift;
            e.error >>= shift;
        }
        self.entries.retain(|e| e.count > 0);
        self.index.clear();
        for (i, e) in self.entries.iter().enumerate() {
            self.index.insert(e.key.clone(), i);
        }
    }

    /// Estimated accesses per second to `key` (0 if it is not among the tracked keys). With
    /// halving each window, a steady rate of r per window settles at a decayed count of 2r.
    pub fn rate_per_s(&self, key: &[u8]) -> u64 {
        self.index
            .get(key)
            .map_or(0, |&i| self.scaled_rate(&self.entries[i]))
    }

    fn scaled_rate(&self, e: &Entry) -> u64 {
        let accesses = e.count.saturating_sub(e.error) * u64::from(self.config.sample_every);
        accesses * 1000 / (2 * self.config.window_ms)
    }

    /// Keys whose estimated rate is at least `threshold_per_s`, hottest first (ties by key).
    pub fn hot(&self, threshold_per_s: u64) -> Vec<(&[u8], u64)> {
        let mut out: Vec<(&[u8], u64)> = self
            .entries
            .iter()
            .map(|e| (e.key.as_slice(), self.scaled_rate(e)))
            .filter(|&(_, r)| r >= threshold_per_s.max(1))
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        out
    }

    /// Redis's logarithmic LFU counter (what `OBJECT FREQ` reports under an LFU policy) for
    /// the accesses the sketch holds for `key` (about the last two windows' worth, decayed):
    /// Redis raises a key's counter from `5 + b` with probability `1 / (b * log_factor + 1)`,
    /// so `n` accesses take it to the largest `5 + k` with `log_factor * k(k-1)/2 + k <= n`,
    /// saturating at 255. A key not tracked reports 5, a new key's counter in Redis.
    pub fn lfu_counter(&self, key: &[u8], log_factor: u64) -> u8 {
        let Some(&i) = self.index.get(key) else {
            return 5;
        };
        let e = &self.entries[i];
        let n = e.count.saturating_sub(e.error) * u64::from(self.config.sample_every);
        let cost = |k: u64| log_factor.saturating_mul(k * k.saturating_sub(1) / 2) + k;
        // The largest k in 0..=250 with cost(k) <= n; cost grows with k.
        let (mut lo, mut hi) = (0u64, 250u64);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if cost(mid) <= n {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        (5 + lo) as u8
    }

    /// Keys tracked now (at most the capacity).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn check_invariants(&self) {
        assert!(self.entries.len() <= self.config.capacity, "over capacity");
        assert_eq!(self.index.len(), self.entries.len(), "index size");
        for (i, e) in self.entries.iter().enumerate() {
            assert_eq!(self.index.get(&e.key), Some(&i), "index points elsewhere");
            assert!(e.error <= e.count, "error above the count");
            assert!(
                e.key.len() <= self.config.max_key_bytes,
                "key over the limit"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed skewed stream: key i is drawn with weight 1/(i+1) (Zipf with s=1), from a
    /// deterministic generator so the test needs no randomness source.
    fn zipf_stream(keys: u64, len: usize, seed: u64) -> Vec<Vec<u8>> {
        let weights: Vec<f64> = (0..keys).map(|i| 1.0 / (i as f64 + 1.0)).collect();
        let total: f64 = weights.iter().sum();
        let mut cumulative = Vec::with_capacity(weights.len());
        let mut acc = 0.0;
        for w in &weights {
            acc += w / total;
            cumulative.push(acc);
        }
        let mut x = seed;
        (0..len)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                let i = cumulative.partition_point(|&c| c < u);
                format!("key:{i}").into_bytes()
            })
            .collect()
    }

    #[test]
    fn the_hottest_keys_of_a_skewed_stream_are_found() {
        let mut h = HotKeys::new(HotKeyConfig::default(), 0);
        let stream = zipf_stream(100_000, 200_000, 7);
        for (i, key) in stream.iter().enumerate() {
            // 200,000 accesses over 2 seconds.
            h.record(key, i as u64 / 100);
            if i % 10_000 == 0 {
                h.check_invariants();
            }
        }
        let hot = h.hot(1000);
        let top: Vec<&[u8]> = hot.iter().take(3).map(|(k, _)| *k).collect();
        assert_eq!(top, [&b"key:0"[..], b"key:1", b"key:2"]);
        assert!(h.len() <= 128);
        // key:0 takes about 1/12 of 100,000 accesses per second.
        let rate = h.rate_per_s(b"key:0");
        assert!((5_000..=12_000).contains(&rate), "key:0 rate {rate}");
        assert!(h.lfu_counter(b"key:0", 10) > h.lfu_counter(b"key:50", 10));
    }

    #[test]
    fn a_key_that_cools_falls_out() {
        let mut h = HotKeys::new(HotKeyConfig::default(), 0);
        for i in 0..80_000u64 {
            h.record(b"hot", i / 80);
        }
        assert!(h.rate_per_s(b"hot") > 10_000);
        // The load moves to other keys: ten seconds later the old key is far below any
        // useful threshold, twenty seconds later it is forgotten.
        for i in 0..50_000u64 {
            h.record(format!("other:{}", i % 10).as_bytes(), 1000 + i / 5);
        }
        assert!(h.rate_per_s(b"hot") < 100, "a cold key still hot");
        for i in 0..50_000u64 {
            h.record(format!("other:{}", i % 10).as_bytes(), 11_000 + i / 5);
        }
        assert_eq!(h.rate_per_s(b"hot"), 0, "a cold key still counted");
        assert!(h.hot(100).iter().all(|(k, _)| k.starts_with(b"other:")));
        h.check_invariants();
    }

    #[test]
    fn the_lfu_counter_follows_redis_curve() {
        let config = HotKeyConfig {
            sample_every: 1,
            ..HotKeyConfig::default()
        };
        // Redis's documented figures for lfu-log-factor 10: 100 accesses give about 10,
        // 1,000 about 18, 100,000 about 142, a million saturates at 255.
        for (n, lo, hi) in [(100u64, 8, 12), (1_000, 16, 21), (100_000, 138, 150)] {
            let mut h = HotKeys::new(config, 0);
            for _ in 0..n {
                h.record(b"k", 0);
            }
            let c = h.lfu_counter(b"k", 10);
            assert!((lo..=hi).contains(&c), "{n} accesses: counter {c}");
        }
        let mut h = HotKeys::new(config, 0);
        for _ in 0..1_000_000 {
            h.record(b"k", 0);
        }
        assert_eq!(h.lfu_counter(b"k", 10), 255);
        assert_eq!(h.lfu_counter(b"k", 0), 255);
        assert_eq!(h.lfu_counter(b"other", 10), 5);
    }

    #[test]
    fn long_keys_are_not_tracked() {
        let config = HotKeyConfig {
            sample_every: 1,
            ..HotKeyConfig::default()
        };
        let mut h = HotKeys::new(config, 0);
        let long = vec![b'x'; 1000];
        for _ in 0..100 {
            h.record(&long, 0);
        }
        assert!(h.is_empty());
    }
}

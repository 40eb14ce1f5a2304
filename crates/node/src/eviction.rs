//! maxmemory's bookkeeping: the memory figure the driver last reported and what eviction has
//! freed since (the figure itself comes from outside: the node never measures its process).
//!
//! The behaviour is `crate::ctx::maxmemory`.

/// The policies that choose a victim, from `maxmemory-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    NoEviction,
    /// Any key (`allkeys-*`) or only keys with a deadline (`volatile-*`).
    Evict {
        volatile_only: bool,
        rank: Rank,
    },
}

/// How sampled candidates are ranked: the first one to go is the lowest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rank {
    Random,
    /// Least recently used: the oldest access.
    Lru,
    /// Least frequently used: Redis's logarithmic access counter, decayed.
    Lfu,
    /// Nearest deadline.
    Ttl,
}

impl Policy {
    pub fn parse(name: &str) -> Policy {
        let (scope, rank) = name.split_once('-').unwrap_or(("", ""));
        let rank = match rank {
            "lru" => Rank::Lru,
            "lfu" => Rank::Lfu,
            "random" => Rank::Random,
            "ttl" => Rank::Ttl,
            _ => return Policy::NoEviction,
        };
        match scope {
            "allkeys" => Policy::Evict {
                volatile_only: false,
                rank,
            },
            "volatile" => Policy::Evict {
                volatile_only: true,
                rank,
            },
            _ => Policy::NoEviction,
        }
    }
}

#[derive(Debug, Default)]
pub struct Eviction {
    /// Heap bytes in use as the driver last reported them.
    pub reported_bytes: u64,
    /// Bytes of the keys evicted since that report (the next report includes their release).
    pub freed_since_report: u64,
    /// INFO evicted_keys.
    pub evicted_keys: u64,
}

impl Eviction {
    /// The driver's latest figure of heap bytes in use.
    pub fn report(&mut self, used_bytes: u64) {
        self.reported_bytes = used_bytes;
        self.freed_since_report = 0;
    }

    /// What counts against maxmemory now.
    pub fn used_bytes(&self) -> u64 {
        self.reported_bytes.saturating_sub(self.freed_since_report)
    }
}

//! `maxmemory`: before each command, keys are evicted by `maxmemory-policy` while the memory in
//! use is over the limit; a command that may grow memory (`denyoom`) is refused with -OOM when
//! the node is still over it.
//!
//! The figure compared with the limit is the driver's (the server's counting allocator, handed
//! in before each batch and with the process figures), less what eviction has freed since.
//! Victims are chosen by sampling `maxmemory-samples` random keys from the node's seeded
//! generator, as Redis approximates LRU, LFU and TTL order by sampling.
//!
//! On a fully replicated cluster eviction is a local cache decision (ARCHITECTURE §79): only a
//! key whose state every replica holds may go, its replicated state becomes a stub that keeps
//! the key's digest (so anti-entropy neither ships it back nor ships a deletion), nothing is
//! replicated or logged, and the key reads as missing here until a peer's state or a local
//! write brings it back. A partitioned node evicts the same way, but only keys every other
//! owner has said it holds as this node does (ARCHITECTURE §86): a sampled key that lacks
//! that word is asked about, and evicted by a later command once the answers are in.

use lattice_store::Entry;
use rand_chacha::rand_core::Rng;

use super::Core;
use crate::command::Flag;
use crate::ctx::CommandSpec;
use crate::events::EVENT_EVICTED;
use crate::eviction::{Policy, Rank};

/// Redis's reply to a denyoom command over the limit.
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// Keys evicted before one command at most: past this the command is refused (if it may grow
/// memory) rather than stalling the node on one request.
const MAX_EVICTIONS_PER_COMMAND: usize = 1_024;

/// Draws for a `volatile-*` sample before giving up: random keys are drawn from the whole
/// keyspace and those without a deadline skipped.
const VOLATILE_DRAWS_PER_SAMPLE: usize = 32;

/// Partitioned: random keys drawn for the eviction pool per command while it is short of keys
/// (ARCHITECTURE §86).
const POOL_DRAWS_PER_COMMAND: usize = 256;

/// Partitioned: proven keys of the eviction pool ranked with each eviction's sample, taken
/// round the pool. Bounds an eviction's work (a command evicts up to 1,024 keys; ranking the
/// whole pool of 2,048 for each was quadratic); with 16, a node filling past its limit answered
/// -OOM to 82-419 of 8,000 writes in `scripts/partitioned-evict-check.sh`, with 256 to 0-38.
const POOL_KEYS_RANKED: usize = 256;

/// Partitioned: the pool is stocked once the memory in use passes this share of `maxmemory`
/// (in tenths), so that proofs are in when the limit is reached: a proof takes a round trip,
/// and without them a node reaching its limit answers -OOM until they come back.
const POOL_STOCK_FROM_TENTHS: u64 = 9;

impl Core {
    /// Evicts what the policy allows while over `maxmemory`; returns the -OOM error if `spec`
    /// may not run.
    pub(crate) fn enforce_maxmemory(&mut self, spec: &CommandSpec) -> Option<&'static str> {
        let limit = self.config.maxmemory_bytes;
        if limit == 0 || self.eviction.used_bytes() <= limit / 10 * POOL_STOCK_FROM_TENTHS {
            return None;
        }
        let policy = Policy::parse(&self.config.maxmemory_policy);
        self.stock_eviction_pool(policy);
        if self.eviction.used_bytes() <= limit {
            return None;
        }
        if self.repl.as_ref().is_none_or(|r| r.may_evict()) && policy != Policy::NoEviction {
            // Evictions are told to tracking clients before the reply, as in Redis.
            let running = self.tracking.current.take();
            let mut evicted = 0;
            while self.eviction.used_bytes() > limit
                && evicted < MAX_EVICTIONS_PER_COMMAND
                && self.evict_one(policy)
            {
                evicted += 1;
            }
            self.tracking.current = running;
        }
        (self.eviction.used_bytes() > limit && spec.has(Flag::DenyOom)).then_some(OOM)
    }

    /// Partitioned: asks the other owners about random keys for the eviction pool while it is
    /// short of keys (see `POOL_STOCK_FROM_TENTHS`).
    fn stock_eviction_pool(&mut self, policy: Policy) {
        let Policy::Evict { volatile_only, .. } = policy else {
            return;
        };
        let Some(r) = self.repl.as_mut() else {
            return;
        };
        if !r.may_evict() || !r.pool_wants_more() {
            return;
        }
        let (rng, db) = (&mut self.rng, &self.db);
        let ask: Vec<Vec<u8>> = (0..POOL_DRAWS_PER_COMMAND)
            .filter_map(|_| {
                db.random_entry(|| rng.next_u64())
                    .filter(|e| !volatile_only || e.expire_at_ms().is_some())
                    .filter(|e| r.wants_proof(e.key(), db))
                    .map(|e| e.key().to_vec())
            })
            .collect();
        r.ask_holders(&ask, db, self.now.as_millis());
    }

    /// Evicts one key chosen by `policy`; false when there is no candidate.
    fn evict_one(&mut self, policy: Policy) -> bool {
        let Policy::Evict {
            volatile_only,
            rank,
        } = policy
        else {
            return false;
        };
        let samples = self.config.maxmemory_samples.max(1) as usize;
        let draws = if volatile_only {
            samples * VOLATILE_DRAWS_PER_SAMPLE
        } else {
            samples
        };
        let (now_ms, decay_min) = (self.now.as_millis(), self.config.lfu_decay_time_min);
        let mut best: Option<(u64, Vec<u8>)> = None;
        let mut found = 0;
        // Partitioned: sampled keys that lack only their other owners' word, asked for it
        // after the sampling (ARCHITECTURE §86).
        let mut ask: Vec<Vec<u8>> = Vec::new();
        for _ in 0..draws {
            if found == samples {
                break;
            }
            let key_and_score = {
                let (rng, db, repl) = (&mut self.rng, &self.db, self.repl.as_ref());
                db.random_entry(|| rng.next_u64())
                    .filter(|e| !volatile_only || e.expire_at_ms().is_some())
                    // A replica evicts only what every other replica holds.
                    .filter(|e| {
                        let Some(r) = repl else { return true };
                        if r.evictable(e.key(), db) {
                            return true;
                        }
                        if r.wants_proof(e.key(), db) {
                            ask.push(e.key().to_vec());
                        }
                        false
                    })
                    .map(|e| (score(e, rank, now_ms, decay_min), e.key().to_vec()))
            };
            let Some((score, key)) = key_and_score else {
                continue;
            };
            found += 1;
            if best.as_ref().is_none_or(|(s, _)| score < *s) {
                best = Some((score, key));
            }
            if rank == Rank::Random {
                break;
            }
        }
        if let Some(r) = self.repl.as_mut() {
            // The eviction pool: keys the other owners vouched for after earlier commands
            // asked, ranked with the sample (a partitioned node evicts only those).
            for key in r.proven_keys(POOL_KEYS_RANKED) {
                let db = &self.db;
                let Some(e) = db.get_raw_hashed(lattice_store::key_hash(&key), &key) else {
                    continue;
                };
                if (volatile_only && e.expire_at_ms().is_none()) || !r.evictable(&key, db) {
                    continue;
                }
                let s = score(e, rank, now_ms, decay_min);
                if best.as_ref().is_none_or(|(b, _)| s < *b) {
                    best = Some((s, key.to_vec()));
                }
            }
            if !ask.is_empty() {
                r.ask_holders(&ask, &self.db, now_ms);
            }
        }
        let Some((_, key)) = best else {
            return false;
        };
        // A replica's stub may take a table slot the packed key did not.
        let stub_bytes = match self.repl.as_mut() {
            Some(r) => r.evict(&key, &mut self.db),
            None => 0,
        };
        let Some(entry) = self.db.remove(&key) else {
            return false;
        };
        self.eviction.freed_since_report += entry.memory_usage().saturating_sub(stub_bytes) as u64;
        self.eviction.evicted_keys += 1;
        if self.repl.is_some() {
            // Not a write: nothing is captured, replicated or logged. Watchers, tracking
            // clients and blocked clients see it as any change of the key.
            self.touched_by_peer(&key);
        } else {
            self.modified(&key);
        }
        self.notify(EVENT_EVICTED, "evicted", &key);
        true
    }
}

/// A candidate's rank under `rank` at `now_ms`: the lowest is evicted first.
fn score(e: &Entry, rank: Rank, now_ms: u64, decay_min: u32) -> u64 {
    match rank {
        Rank::Random => 0,
        Rank::Lru => e.access_ms(),
        // Redis's LFU counter, decayed to now (the store keeps it under an LFU policy).
        Rank::Lfu => u64::from(e.lfu_counter(now_ms, decay_min)),
        Rank::Ttl => e.expire_at_ms().unwrap_or(u64::MAX),
    }
}

//! State that `Core` holds for the operations commands (SLOWLOG, LATENCY, MEMORY, CLIENT
//! PAUSE, WAIT). The commands live under `cmd/`, which import `Core`; the state lives here,
//! below `Core`, so that `ctx` does not import the command modules back (no import cycles in
//! the node crate: `scripts/import-cycles.py`).

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use crate::client::ConnId;
use crate::time::Micros;

/// Seconds of history each LATENCY event keeps.
pub const HISTORY_LEN: usize = 160;

/// Commands one request may run that wait for its time (an EXEC's, the clients it released)
/// at most; past it the rest are not logged, so a huge transaction cannot grow this without
/// bound.
pub(crate) const MAX_CANDIDATES: usize = 1024;

// ---- latency ----

/// One event's samples: (unix seconds, milliseconds), oldest first, and the largest ever.
#[derive(Debug, Default)]
pub struct Series {
    pub samples: std::collections::VecDeque<(u64, u64)>,
    pub max_ms: u64,
}

/// Every event with samples, by name.
#[derive(Debug, Default)]
pub struct LatencyMonitor {
    pub events: BTreeMap<&'static str, Series>,
}

impl LatencyMonitor {
    /// Adds a sample of `ms` to `event` at `time_s`: one per second (the largest).
    pub fn add(&mut self, event: &'static str, time_s: u64, ms: u64) {
        let s = self.events.entry(event).or_default();
        s.max_ms = s.max_ms.max(ms);
        match s.samples.back_mut() {
            Some((t, m)) if *t == time_s => *m = (*m).max(ms),
            _ => {
                if s.samples.len() == HISTORY_LEN {
                    s.samples.pop_front();
                }
                s.samples.push_back((time_s, ms));
            }
        }
    }

    pub fn check_invariants(&self) {
        for (name, s) in &self.events {
            assert!(s.samples.len() <= HISTORY_LEN, "{name}: history too long");
            assert!(!s.samples.is_empty(), "{name}: an event without samples");
            for w in s.samples.iter().collect::<Vec<_>>().windows(2) {
                assert!(w[0].0 < w[1].0, "{name}: samples out of order");
            }
            assert!(s.samples.iter().all(|(_, ms)| *ms <= s.max_ms));
        }
    }
}

// ---- memory ----

/// The process's memory figures over time: the first the driver reported and the largest.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryHistory {
    pub startup_bytes: u64,
    pub peak_bytes: u64,
}

// ---- pause ----

/// What a pause holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PauseMode {
    Write,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pause {
    pub mode: PauseMode,
    /// When it ends (ms on the node's clock).
    pub until_ms: u64,
}

/// The pause in effect and the clients it holds, in the order they were held.
#[derive(Debug, Default)]
pub struct Pausing {
    pub pause: Option<Pause>,
    pub held: VecDeque<ConnId>,
}

// ---- role ----

/// A client parked in WAIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    /// This node's writes that must have reached the peers.
    pub writes: u64,
    /// How many peers must have them.
    pub peers: u64,
}

// ---- slowlog ----

/// One logged command.
#[derive(Debug)]
pub struct SlowEntry {
    pub id: u64,
    /// Unix seconds when the command started.
    pub time_s: u64,
    pub duration_us: u64,
    /// The arguments, trimmed ([`MAX_ARGC`], [`MAX_STRING`]) and redacted.
    pub args: Vec<Bytes>,
    /// `ip:port` of the client.
    pub peer: String,
    pub name: Bytes,
}

/// The slow log: newest entry first, at most `slowlog-max-len` entries.
#[derive(Debug, Default)]
pub struct SlowLog {
    pub entries: VecDeque<SlowEntry>,
    pub next_id: u64,
}

/// A command that ran for the request being timed and waits for its duration.
#[derive(Debug)]
pub(crate) struct Candidate {
    pub(crate) conn: ConnId,
    pub(crate) args: Vec<Bytes>,
}

/// The requests being timed (a driver's batch: one request, or a pipeline's): when they
/// started and the commands they ran.
#[derive(Debug, Default)]
pub struct Timing {
    pub(crate) start: Micros,
    pub(crate) begun: bool,
    pub(crate) candidates: Vec<Candidate>,
}

impl Timing {
    /// Requests are being timed.
    pub fn begun(&self) -> bool {
        self.begun
    }

    /// When the requests being timed started.
    pub fn start(&self) -> Micros {
        self.start
    }

    pub fn check_invariants(&self) {
        assert!(
            self.candidates.len() <= MAX_CANDIDATES,
            "too many candidates"
        );
        assert!(
            self.begun || self.candidates.is_empty(),
            "commands wait for a time no request started"
        );
    }
}

impl SlowLog {
    pub fn check_invariants(&self) {
        for w in self.entries.iter().collect::<Vec<_>>().windows(2) {
            assert!(w[0].id > w[1].id, "slow log entries out of order");
        }
    }
}

// ---- lazy free ----

/// Values whose freeing is worth deferring: Redis's `LAZYFREE_THRESHOLD`, in elements.
pub const LAZYFREE_THRESHOLD: usize = 64;

/// Elements freed per timer turn at most (a value is freed whole, so one large value may
/// exceed it): bounds the time a turn spends freeing, as a command's time is bounded.
pub const LAZYFREE_EFFORT_PER_TURN: usize = 200_000;

/// Values UNLINK, FLUSHALL/FLUSHDB ASYNC (and DEL or a flush under `lazyfree-lazy-user-*`)
/// took out of the keyspace, freed by the node's timer after the command has replied, where
/// Redis frees them on a background thread: the command's time does not grow with the
/// value's size. INFO `lazyfree_pending_objects` is the queue's length.
#[derive(Default)]
pub struct LazyFree {
    pub queue: VecDeque<lattice_store::EntryBox>,
    /// Objects freed from the queue since CONFIG RESETSTAT (INFO `lazyfreed_objects`).
    pub freed: u64,
}

/// The work of freeing `v`: its elements (a stream's entries, groups and pending entries),
/// 1 for a string.
pub fn free_effort(v: &lattice_store::Value) -> usize {
    use lattice_store::Value;
    match v {
        Value::Str(_) => 1,
        Value::List(l) => l.len(),
        Value::Hash(h) => h.len(),
        Value::Set(s) => s.len(),
        Value::ZSet(z) => z.len(),
        Value::Stream(s) => s.len() + s.groups().values().map(|g| 1 + g.pel.len()).sum::<usize>(),
    }
}

impl LazyFree {
    /// Frees queued values, oldest first, until `LAZYFREE_EFFORT_PER_TURN` elements went.
    pub fn free_some(&mut self) {
        let mut effort = 0;
        while effort < LAZYFREE_EFFORT_PER_TURN {
            let Some(e) = self.queue.pop_front() else {
                return;
            };
            effort += free_effort(&e.value);
            drop(e);
            self.freed += 1;
        }
    }
}

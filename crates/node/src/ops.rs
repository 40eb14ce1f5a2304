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

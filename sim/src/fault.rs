//! Fault classes, and which of them a run exercised.

use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultClass {
    /// The hosts split in two random groups, both directions blocked.
    PartitionSymmetric,
    /// Some host pairs blocked in one direction only.
    PartitionOneWay,
    /// One node cut off from every other host.
    PartitionIsolate,
    /// Nodes split into a minority and a majority side, clients spread over both.
    PartitionMajority,
    /// A host's traffic held back for a while (saturated link), then delivered.
    Clog,
    /// Every latency multiplied for a while.
    LatencySpike,
    /// Client connections reset in flight (both ends see the reset).
    ConnReset,
    /// A node crashes (volatile state lost, connections reset) and restarts empty.
    CrashRestart,
    /// A node stops processing (timers deferred, input buffered) and resumes.
    PauseResume,
    /// A node's wall clock steps forwards or backwards.
    ClockJump,
    /// Nodes' clocks run with offsets and drift for the whole run.
    ClockSkew,
    /// Peer messages dropped.
    PeerDrop,
    /// Peer messages delivered twice.
    PeerDuplicate,
    /// Peer messages overtaking others on the same link.
    PeerReorder,
    /// Stream writes split at random boundaries.
    StreamChunking,
    /// The nodes' own buggify sites fired.
    Buggify,
    /// Replicated runs with a bucket: a crash took the disk too (restored from the bucket).
    DiskLoss,
    /// Replicated runs with a bucket: the object store turned slow, failing or hanging.
    BucketStorm,
}

impl FaultClass {
    pub const ALL: &'static [FaultClass] = &[
        FaultClass::PartitionSymmetric,
        FaultClass::PartitionOneWay,
        FaultClass::PartitionIsolate,
        FaultClass::PartitionMajority,
        FaultClass::Clog,
        FaultClass::LatencySpike,
        FaultClass::ConnReset,
        FaultClass::CrashRestart,
        FaultClass::PauseResume,
        FaultClass::ClockJump,
        FaultClass::ClockSkew,
        FaultClass::PeerDrop,
        FaultClass::PeerDuplicate,
        FaultClass::PeerReorder,
        FaultClass::StreamChunking,
        FaultClass::Buggify,
        FaultClass::DiskLoss,
        FaultClass::BucketStorm,
    ];

    /// The classes the nemesis injects at random times (the others are rates or settings).
    pub const INJECTED: &'static [FaultClass] = &[
        FaultClass::PartitionSymmetric,
        FaultClass::PartitionOneWay,
        FaultClass::PartitionIsolate,
        FaultClass::PartitionMajority,
        FaultClass::Clog,
        FaultClass::LatencySpike,
        FaultClass::ConnReset,
        FaultClass::CrashRestart,
        FaultClass::PauseResume,
        FaultClass::ClockJump,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultClass::PartitionSymmetric => "partition-symmetric",
            FaultClass::PartitionOneWay => "partition-one-way",
            FaultClass::PartitionIsolate => "partition-isolate-node",
            FaultClass::PartitionMajority => "partition-minority-majority",
            FaultClass::Clog => "clog",
            FaultClass::LatencySpike => "latency-spike",
            FaultClass::ConnReset => "conn-reset",
            FaultClass::CrashRestart => "crash-restart",
            FaultClass::PauseResume => "pause-resume",
            FaultClass::ClockJump => "clock-jump",
            FaultClass::ClockSkew => "clock-skew-drift",
            FaultClass::PeerDrop => "peer-drop",
            FaultClass::PeerDuplicate => "peer-duplicate",
            FaultClass::PeerReorder => "peer-reorder",
            FaultClass::StreamChunking => "stream-chunking",
            FaultClass::Buggify => "buggify",
            FaultClass::DiskLoss => "disk-lost",
            FaultClass::BucketStorm => "bucket-storm",
        }
    }

    /// Classes only some modes have (replicated runs with a bucket): a swarm without them
    /// is not missing coverage.
    pub fn optional(self) -> bool {
        matches!(self, FaultClass::DiskLoss | FaultClass::BucketStorm)
    }
}

/// How many times each class was exercised in a run.
#[derive(Clone, Debug, Default)]
pub struct FaultCounts {
    pub counts: BTreeMap<FaultClass, u64>,
}

impl FaultCounts {
    pub fn add(&mut self, c: FaultClass, n: u64) {
        if n > 0 {
            *self.counts.entry(c).or_insert(0) += n;
        }
    }

    pub fn get(&self, c: FaultClass) -> u64 {
        self.counts.get(&c).copied().unwrap_or(0)
    }

    /// `name=count` for every exercised class.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = FaultClass::ALL
            .iter()
            .filter(|c| self.get(**c) > 0)
            .map(|c| format!("{}={}", c.name(), self.get(*c)))
            .collect();
        parts.join(",")
    }
}

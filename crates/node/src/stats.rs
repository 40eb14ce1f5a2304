//! Counters behind INFO stats and INFO commandstats.

use std::collections::BTreeMap;

/// Per-command figures (INFO commandstats, LATENCY HISTOGRAM).
#[derive(Clone, Copy, Debug, Default)]
pub struct CommandStats {
    pub calls: u64,
    pub usec: u64,
    pub rejected_calls: u64,
    pub failed_calls: u64,
    /// Durations of the calls the driver timed (`Node::charge_command_time`), by power-of-two
    /// bucket: bucket `k` counts durations below `1024 << k` ns.
    pub latency: [u64; LATENCY_BUCKETS],
}

/// Buckets of [`CommandStats::latency`]: the last one reaches about 36 minutes.
pub const LATENCY_BUCKETS: usize = 32;

impl CommandStats {
    /// Counts `calls` calls that took `us` microseconds each.
    pub fn record_latency(&mut self, us: u64, calls: u64) {
        let q = us.saturating_mul(1000) >> 10;
        let k = (64 - q.leading_zeros() as usize).min(LATENCY_BUCKETS - 1);
        self.latency[k] += calls;
    }

    /// Calls timed.
    pub fn timed_calls(&self) -> u64 {
        self.latency.iter().sum()
    }
}

/// Per-command figures by command name, in name order (as INFO lists them).
///
/// Every executed command updates its entry, so the lookup is on the hot path: the entry used
/// last is tried first by pointer (names are the command table's `&'static str`s, and a
/// pipeline repeats one command), and only a miss searches by name. Measured with callgrind,
/// this replaced a map search of about 150 instructions per command.
#[derive(Debug, Default)]
pub struct CommandStatsTable {
    sorted: Vec<(&'static str, CommandStats)>,
    last: usize,
}

impl CommandStatsTable {
    fn position(&self, name: &'static str) -> Result<usize, usize> {
        match self.sorted.get(self.last) {
            Some((n, _)) if std::ptr::eq(*n, name) => Ok(self.last),
            _ => self.sorted.binary_search_by(|(n, _)| (*n).cmp(name)),
        }
    }

    /// The entry for `name`, created empty if it has none yet.
    pub fn entry(&mut self, name: &'static str) -> &mut CommandStats {
        let i = match self.position(name) {
            Ok(i) => i,
            Err(i) => {
                self.sorted.insert(i, (name, CommandStats::default()));
                i
            }
        };
        self.last = i;
        &mut self.sorted[i].1
    }

    pub fn get_mut(&mut self, name: &'static str) -> Option<&mut CommandStats> {
        let i = self.position(name).ok()?;
        self.last = i;
        Some(&mut self.sorted[i].1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &CommandStats)> {
        self.sorted.iter().map(|(n, s)| (*n, s))
    }
}

#[derive(Debug, Default)]
pub struct Stats {
    /// The longest hold of the node by one driver thread since RESETSTAT (INFO stats
    /// `host_lock_longest_hold_us`), from the driver's figures.
    pub host_lock_longest_hold_us: u64,
    pub total_connections_received: u64,
    pub rejected_connections: u64,
    pub total_commands_processed: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub total_error_replies: u64,
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    /// Connections closed because output pushed at them passed the bound, by the node or by
    /// its driver (INFO `client_output_buffer_limit_disconnections`).
    pub output_limit_disconnections: u64,
    pub expired_keys_lazy_or_active: u64,
    /// Indexed like the command table; full names for subcommands are resolved when reporting.
    pub commands: CommandStatsTable,
    /// Error replies by their first word (INFO errorstats).
    pub errors: BTreeMap<String, u64>,
    /// Ring of (time ms, commands processed) samples for instantaneous_ops_per_sec.
    pub ops_samples: [(u64, u64); 16],
    pub ops_sample_index: usize,
}

impl Stats {
    /// Records a sample; called from the node's periodic tick.
    pub fn sample(&mut self, now_ms: u64) {
        self.ops_sample_index = (self.ops_sample_index + 1) % self.ops_samples.len();
        self.ops_samples[self.ops_sample_index] = (now_ms, self.total_commands_processed);
    }

    /// Operations per second over the sampled window.
    pub fn instantaneous_ops_per_sec(&self) -> u64 {
        let newest = self.ops_samples[self.ops_sample_index];
        let oldest = self.ops_samples[(self.ops_sample_index + 1) % self.ops_samples.len()];
        let dt = newest.0.saturating_sub(oldest.0);
        if dt == 0 {
            return 0;
        }
        (newest.1.saturating_sub(oldest.1)) * 1000 / dt
    }

    /// Zeroes what CONFIG RESETSTAT resets.
    pub fn reset(&mut self) {
        let keep = (self.ops_samples, self.ops_sample_index);
        *self = Stats::default();
        (self.ops_samples, self.ops_sample_index) = keep;
    }
}

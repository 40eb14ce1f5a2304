//! Counters behind INFO stats and INFO commandstats.

use std::collections::BTreeMap;

/// Per-command figures (INFO commandstats).
#[derive(Clone, Copy, Debug, Default)]
pub struct CommandStats {
    pub calls: u64,
    pub usec: u64,
    pub rejected_calls: u64,
    pub failed_calls: u64,
}

#[derive(Debug, Default)]
pub struct Stats {
    pub total_connections_received: u64,
    pub rejected_connections: u64,
    pub total_commands_processed: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub total_error_replies: u64,
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    pub expired_keys_lazy_or_active: u64,
    /// Indexed like the command table; full names for subcommands are resolved when reporting.
    pub commands: BTreeMap<&'static str, CommandStats>,
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

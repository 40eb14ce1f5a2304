//! What drivers and checkers may read or tell the node besides inputs: narrow views of its
//! state (never the command context itself), recovery, and measured command times.

use bytes::Bytes;

use super::Node;
use crate::client::ConnId;
use crate::config::Config;
use crate::time::Micros;

impl Node {
    pub fn config(&self) -> &Config {
        &self.core.config
    }

    /// Every INFO section, as `INFO everything` answers it, for drivers that export the
    /// figures elsewhere (the server's metrics endpoint).
    pub fn info_everything(&self) -> String {
        crate::cmd::server::info_everything(&self.core)
    }

    /// Whether `maxmemory` is set: the driver should then report heap bytes in use
    /// ([`Node::report_memory`]) before each batch.
    pub fn memory_limited(&self) -> bool {
        self.core.config.maxmemory_bytes > 0
    }

    /// The driver's reading of heap bytes in use, compared with `maxmemory` before commands.
    /// The driver's reading of `conn`'s read buffer: bytes in it and room left in its
    /// allocation (CLIENT LIST `qbuf`, `qbuf-free`).
    pub fn set_query_buffer(&mut self, conn: ConnId, len: u64, free: u64) {
        if let Some(c) = self.core.clients.get_mut(&conn) {
            c.qbuf = len;
            c.qbuf_free = free;
        }
    }

    /// The driver closed a connection whose unread output passed its bound (INFO stats
    /// `client_output_buffer_limit_disconnections` counts these with the node's own).
    pub fn output_limit_disconnected(&mut self) {
        self.core.stats.output_limit_disconnections += 1;
    }

    /// Also INFO's `used_memory`, between the driver's periodic process readings.
    pub fn report_memory(&mut self, used_bytes: u64) {
        self.core.eviction.report(used_bytes);
        self.core.process.used_memory_bytes = used_bytes;
        self.core.memory.peak_bytes = self.core.memory.peak_bytes.max(used_bytes);
    }

    /// The entry stored under `key`, as it is: no lazy expiry, no statistics (checkers read
    /// recovered state with it).
    pub fn stored_entry(&self, key: &[u8]) -> Option<&lattice_store::Entry> {
        self.core.db.get_raw(key)
    }

    /// Every stored entry, in no particular order (checkers).
    pub fn stored_entries(&self) -> impl Iterator<Item = &lattice_store::Entry> {
        self.core.db.iter()
    }

    /// How many buggify faults this node has injected so far.
    pub fn buggify_fired(&self) -> u64 {
        self.core.buggify.fired()
    }

    /// True while the driver reports a persistence write or sync failure.
    pub fn persist_failing(&self) -> bool {
        self.core.persist.fault.is_some()
    }

    /// Snapshots completed since the node started.
    pub fn snapshots_taken(&self) -> u64 {
        self.core.persist.snapshots
    }

    /// Makes this node persist: it captures changes and emits persistence outputs from now
    /// on (the driver has a disk). Called once, after recovery's [`crate::Input::Loaded`].
    pub fn enable_persistence(&mut self) {
        self.core.enable_persistence();
    }

    /// Starts a background snapshot (as BGREWRITEAOF) unless one runs; the driver asks for one
    /// when the object store needs a fresh base. Returns whether one started.
    pub fn request_snapshot(&mut self) -> bool {
        self.core
            .start_snapshot(crate::persist::SnapshotKind::Background, None)
    }

    /// The object-store upload's figures for INFO persistence.
    pub fn set_upload_figures(&mut self, figures: crate::persist::UploadFigures) {
        self.core.persist.upload = Some(figures);
    }

    /// The `aclfile` configured, if any: the driver reads it at start-up and hands its text to
    /// [`Node::load_acl_file`].
    pub fn acl_file_path(&self) -> Option<&str> {
        self.core.config.aclfile.as_deref()
    }

    /// Start-up: installs the users of the ACL file's `text`, or returns Redis's description
    /// of its errors (the driver then refuses to start, as Redis does).
    pub fn load_acl_file(&mut self, text: &[u8]) -> Result<(), String> {
        let path = self.core.config.aclfile.clone().unwrap_or_default();
        self.core.install_acl_file(&path, text)
    }

    /// [`crate::Output::Reload`] (DEBUG RELOAD): the dataset is emptied, without logging, for
    /// the driver to feed the files back through [`Node::load`] and [`crate::Input::Loaded`].
    pub fn reload_begin(&mut self, now: Micros) {
        self.advance(now);
        self.core.reload_begin();
    }

    /// The driver read the files back (or why not): persistence resumes and the DEBUG caller
    /// is answered. On an error the dataset holds what was read before it.
    pub fn reload_done(&mut self, now: Micros, result: Result<(), String>) {
        self.advance(now);
        self.core.reload_done(result);
    }

    /// Recovery: applies one snapshot chunk or log record read back from disk, through the
    /// same code that applies RESTORE payloads. Nothing is logged for it.
    pub fn load(&mut self, now: Micros, data: &[u8]) -> Result<u64, String> {
        self.advance(now);
        self.core.load_payload(data)
    }

    /// True while a script is suspended between slices: [`Node::poll_timeout`] then asks for
    /// the next slice at once. A driver should let other inputs in before it (the server's
    /// event loop serves the ready connections between slices), and a simulator charges the
    /// slice virtual time.
    #[must_use]
    pub fn script_running(&self) -> bool {
        self.core.scripts.running.is_some()
    }

    /// Charges `usec` of measured execution time to `calls` runs of the command named `name`
    /// (the driver measures, the node only counts, so INFO commandstats has real figures
    /// without the node reading a clock), and, with `latency-tracking`, counts each run's
    /// share in the command's latency histogram (LATENCY HISTOGRAM).
    pub fn charge_command_time(&mut self, name: &'static str, calls: u64, usec: u64) {
        let histograms = self.core.config.latency_tracking;
        if let Some(s) = self.core.stats.commands.get_mut(name) {
            s.usec += usec;
            if histograms && calls > 0 {
                s.record_latency(usec / calls, calls);
            }
        }
    }

    /// A hint that a request with `args` is about to be handled: the driver calls it for every
    /// request of a pipeline before handing any of them over, so the first key's memory is
    /// being fetched for all of them at once (see `lattice_store::Db::prefetch`), and so is the
    /// second argument's member when the key holds a hash or a set. Most commands name a key
    /// first; for the rest the hint is wasted, never wrong. Changes nothing.
    pub fn prefetch(&self, args: &[Bytes]) {
        if let Some(key) = args.get(1) {
            // HSET/HGET/SADD/SISMEMBER... name the member next.
            self.core.db.prefetch(key, args.get(2).map(|m| &m[..]));
        }
    }

    /// Name of the last command `conn` ran, for [`Node::charge_command_time`].
    pub fn last_command(&self, conn: ConnId) -> Option<&'static str> {
        self.core.clients.get(&conn).map(|c| c.last_command)
    }

    /// Digest of this replica's whole replicated state (every key's value, causal metadata,
    /// tombstones and expiry). Replicas that have exchanged everything have equal digests.
    /// Standalone nodes (cluster_size 1) keep no replicated state and answer 0.
    #[must_use]
    pub fn replication_digest(&mut self) -> u64 {
        self.core.settle_captures();
        self.core.repl.as_mut().map_or(0, |r| r.digest())
    }

    /// Heap bytes of the replicated state by part (see `Replicator::memory`); empty on a
    /// standalone node.
    #[must_use]
    pub fn replication_memory(&self) -> Vec<(&'static str, usize)> {
        self.core
            .repl
            .as_ref()
            .map_or_else(Vec::new, |r| r.memory())
    }

    /// CLUSTER LEAVE from a driver (the simulator's membership mode): false when this node is
    /// not a partitioned member that is up.
    pub fn leave_cluster(&mut self) -> bool {
        self.core
            .cluster
            .as_deref_mut()
            .is_some_and(|c| c.leave().is_ok())
    }

    /// Whether this partitioned node knows enough members to place slots (before that CLUSTER
    /// LEAVE is refused with CLUSTERDOWN, as every keyed command is).
    #[must_use]
    pub fn cluster_placed(&self) -> bool {
        self.core
            .cluster
            .as_deref()
            .is_some_and(|c| c.placement().is_some())
    }

    /// Why this node's membership is not settled (a group still incoming or draining, a
    /// leave not finished), or None: once every node is settled every slot group is held by
    /// all its owners.
    #[must_use]
    pub fn membership_unsettled(&self) -> Option<String> {
        let c = self.core.cluster.as_deref()?;
        c.placement()?;
        let (incoming, draining) = (c.incoming().len(), c.draining().len());
        let status = c.me().status;
        let leaving = status == crate::cluster::Status::Leaving;
        (incoming > 0 || draining > 0 || leaving).then(|| {
            format!(
                "{} with {incoming} groups incoming and {draining} draining",
                status.name()
            )
        })
    }

    /// The hybrid timestamp `(wall_ms, logical, node_id)` of the string write that currently
    /// wins on `key` here, for checkers that verify last-writer-wins outcomes.
    #[must_use]
    pub fn string_stamp(&mut self, key: &[u8]) -> Option<lattice_crdt::Hlc> {
        self.core.settle_key(key);
        let core = &self.core;
        core.repl.as_ref()?.state(key, &core.db)?.string_stamp()
    }
}

//! The node's persistence state: what is being logged, synced, held and snapshotted. Plain
//! data with its own bookkeeping, so the command context can own it without depending on the
//! persistence logic (`crate::persist`), which works on the whole context.

use std::collections::{BTreeSet, VecDeque};

use bytes::Bytes;

use crate::client::ConnId;
use crate::io::Output;

/// Why a snapshot is being taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotKind {
    /// SAVE or SHUTDOWN SAVE: all slices at once, callers answered when it is on disk.
    Save,
    /// BGSAVE, BGREWRITEAOF, automatic compaction, appendonly switched on.
    Background,
}

pub(crate) struct Snapshot {
    pub(crate) next_slot: usize,
    pub(crate) keys: u64,
    pub(crate) started_ms: u64,
    /// Every slice is out; waiting for SnapshotDone.
    pub(crate) ended: bool,
    pub(crate) waiters: Vec<ConnId>,
    pub(crate) log_bytes_at_begin: u64,
    pub(crate) changes_at_begin: u64,
    /// Large keys written into the snapshot ahead of its walk, just before a command that is
    /// logged as a command changed them (see `persist_before_command`); the walk skips them.
    pub(crate) early: std::collections::BTreeSet<bytes::Bytes>,
}

/// The node's persistence state (in `Core::persist`).
#[derive(Default)]
pub struct Persist {
    /// The driver writes to a disk (set by [`crate::Node::enable_persistence`]); otherwise
    /// nothing is logged and nothing held (the simulator's other modes, clustered nodes).
    pub active: bool,
    /// Changes are being captured (appendonly, or a snapshot in progress).
    pub(crate) logging: bool,
    /// Keys changed since the last record, in the order of their changes (repeats kept).
    pub(crate) dirty: DirtyKeys,
    /// Changed keys of a clustered node whose capture was deferred at the last record: logged
    /// once the capture is made. Looked at again only when some deferral has ended since
    /// (`waiting_epoch`, the replicator's `deferrals_ended` then): re-sorting and probing
    /// them on every record made a burst of N deferred writes cost N² log N.
    pub(crate) waiting: BTreeSet<Bytes>,
    pub(crate) waiting_epoch: u64,
    /// Commands logged as such (OP_CMD), in order; they go before the key states of the same
    /// record, whose states already include their effect.
    pub(crate) commands: Vec<u8>,
    /// Records are framed in this buffer and leave as views of it (`split().freeze()`), not
    /// as an allocation each: once the driver dropped the views of earlier records, `reserve`
    /// takes the whole buffer back, so a steady write load allocates nothing per record (an
    /// allocation, a copy and a free per record were a third of what `everysec` cost a SET,
    /// ARCHITECTURE §68). A record is encoded here directly, behind its frame header, rather
    /// than in a buffer of its own that is then copied in (ARCHITECTURE §81). Empty between
    /// records.
    pub(crate) records: bytes::BytesMut,
    /// The (hash, index) pairs a record's changed keys are ordered by (kept between records).
    pub(crate) order: Vec<(u64, u32)>,
    pub(crate) clear: bool,
    /// The function library set changed since the last record.
    pub(crate) functions: bool,
    /// Last record emitted, and the last one the driver made durable.
    pub seq: u64,
    pub synced: u64,
    pub(crate) sync_requested: u64,
    pub(crate) last_sync_request_ms: u64,
    pub(crate) out: VecDeque<Output>,
    /// Replies held until their record is durable: (record, connection, bytes), in order.
    pub(crate) held: VecDeque<(u64, ConnId, Bytes)>,
    pub(crate) released: VecDeque<Output>,
    pub(crate) snapshot: Option<Snapshot>,
    /// The last write or sync error, while it lasts.
    pub fault: Option<String>,
    pub(crate) unsynced_since_ms: Option<u64>,
    pub(crate) unsynced_bytes: u64,
    /// SHUTDOWN waits for its snapshot.
    pub(crate) shutdown_after_save: bool,
    /// DEBUG RELOAD / LOADAOF: the client waiting for the driver to read the files back
    /// (after the snapshot, for RELOAD); its reply and what it pipelined after are held.
    pub(crate) reloading: Option<ConnId>,
    // Figures for INFO persistence.
    pub log_bytes: u64,
    pub base_bytes: u64,
    pub changes_since_save: u64,
    pub lastsave_s: u64,
    pub last_snapshot_ok: bool,
    pub last_snapshot_error: Option<String>,
    pub last_snapshot_ms: Option<u64>,
    pub snapshots: u64,
    pub write_errors: u64,
    pub last_sync_ms: u64,
    pub loaded_keys: u64,
    pub loaded_records: u64,
    /// The object-store upload's figures, set by the driver when a bucket is configured.
    pub upload: Option<UploadFigures>,
}

/// What INFO persistence shows of the upload to the object store (the `s3_` fields). The
/// driver's uploader owns these numbers; the node only prints them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UploadFigures {
    /// `async` (acknowledged after the local fsync) or `sync` (after the upload).
    pub mode: &'static str,
    /// Synced log bytes and pieces not yet in the bucket, and the most bytes seen waiting.
    pub lag_bytes: u64,
    pub lag_segments: u64,
    pub max_lag_bytes: u64,
    /// Last record the bucket holds as a restorable chain (snapshot plus pieces).
    pub uploaded_seq: u64,
    pub uploads: u64,
    pub upload_errors: u64,
    pub last_upload_ok: bool,
    pub last_error: String,
    /// Times the backlog passed its bound and was replaced by a fresh snapshot to upload.
    pub backlog_resets: u64,
    pub snapshots_uploaded: u64,
}

/// The changed-key buffers are kept for the next record up to this many bytes (one huge
/// MSET must not pin its key bytes for good).
const DIRTY_KEEP_BYTES: usize = 64 << 10;

/// The keys changed since the last record, copied end to end into one buffer: noting a key
/// is a copy of its bytes and one index, with no allocation once the buffers have grown to
/// the usual record (a reference-counted view per key cost about a hundred instructions of
/// every logged write, ARCHITECTURE §76). A key lives only until the next record, so the
/// buffers are reused record after record.
#[derive(Default)]
pub(crate) struct DirtyKeys {
    bytes: Vec<u8>,
    /// Where each key ends in `bytes` (a key starts where the one before it ends).
    ends: Vec<usize>,
}

impl DirtyKeys {
    pub(crate) fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`th key noted.
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    pub(crate) fn last(&self) -> Option<&[u8]> {
        (!self.is_empty()).then(|| self.get(self.len() - 1))
    }

    /// Forgets the last key noted.
    pub(crate) fn pop(&mut self) {
        if self.ends.pop().is_some() {
            self.bytes.truncate(self.ends.last().copied().unwrap_or(0));
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Bytes of key held (INFO memory).
    pub(crate) fn bytes_len(&self) -> usize {
        self.bytes.len()
    }

    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        if self.bytes.capacity() > DIRTY_KEEP_BYTES {
            self.bytes = Vec::new();
        }
        if self.ends.capacity() * std::mem::size_of::<usize>() > DIRTY_KEEP_BYTES {
            self.ends = Vec::new();
        }
    }
}

impl Persist {
    /// A key changed (`Core::modified`): counted for INFO, and noted for the next record while
    /// changes are being captured.
    pub(crate) fn note_modified(&mut self, key: &[u8]) {
        self.changes_since_save += 1;
        if self.logging {
            self.dirty.push(key);
        }
    }

    /// Replies must wait for `seq` to be durable.
    pub(crate) fn must_hold(&self, always: bool) -> bool {
        if cfg!(feature = "planted-durability-bug") {
            // Acknowledges before the fsync: the simulator's crash checker must catch it.
            return false;
        }
        always && self.seq > self.synced && self.fault.is_none()
    }

    pub(crate) fn note_unsynced(&mut self, now_ms: u64, bytes: u64) {
        if self.unsynced_since_ms.is_none() {
            self.unsynced_since_ms = Some(now_ms);
        }
        self.unsynced_bytes += bytes;
    }

    /// Milliseconds the oldest record not yet durable has waited (INFO `aof_fsync_lag_ms`).
    pub fn fsync_lag_ms(&self, now_ms: u64) -> u64 {
        self.unsynced_since_ms
            .map_or(0, |t| now_ms.saturating_sub(t))
    }

    pub fn snapshot_in_progress(&self) -> bool {
        self.snapshot.is_some()
    }

    pub fn snapshot_started_ms(&self) -> Option<u64> {
        self.snapshot.as_ref().map(|s| s.started_ms)
    }

    pub fn pending_records(&self) -> u64 {
        self.seq - self.synced
    }

    pub fn held_replies(&self) -> usize {
        self.held.len()
    }
}

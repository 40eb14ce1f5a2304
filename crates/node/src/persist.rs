//! Persistence decisions: what to log, when to sync, when to hold replies, snapshot slices.
//!
//! The node never touches a file. It emits [`Output::Append`] records (the new state of every
//! key a batch of commands changed, captured through [`Core::modified`]), [`Output::Sync`]
//! requests (per command batch under `appendfsync always`, once a second under `everysec`),
//! and snapshot material slot by slot ([`Output::SnapshotBegin`], `SnapshotChunk`,
//! `SnapshotEnd`). The driver writes them (`lattice-persist`) and answers with
//! [`Input::Persisted`], [`Input::PersistError`] and [`Input::SnapshotDone`]. Under `always`
//! every reply produced while a record is not yet durable is held until `Persisted` covers
//! it, so a client is only told OK about a write that is on disk.
//!
//! Record payload (also a snapshot chunk's): a sequence of operations, each
//! `0` (every key removed), `6 varint-len key varint-deadline+1 varint-len value` (the key's
//! state: deadline 0 = none, the value in the DUMP encoding without DUMP's version and CRC-64,
//! the frame's checksum covering it), `2 varint-len key` (removed), `3 ...` (a command,
//! below), `4 ...` (the function libraries) or `5 varint-len key varint-len state` (a
//! clustered node: the key's replicated state in the encoding anti-entropy ships). `1` is
//! operation 6 with the whole DUMP payload, written before operation 6 existed and still read.
//!
//! A clustered node logs replicated states, not values: recovery merges each one into the
//! replicator exactly as an anti-entropy state from a peer is merged, and the store follows
//! from the merged state. Merges are joins, so replaying every record of a key (or a fuzzy
//! snapshot and the log after it, in any overlap) ends with the key's last logged state, and
//! a restarted replica comes back with its keys *and* their causal metadata: anti-entropy then
//! ships only what it missed (docs/ARCHITECTURE.md, cluster persistence). A deletion is a
//! tombstone state, logged like any change, so an older live state in the log cannot bring a
//! deleted key back; GC forgetting a key is not logged (its last record is that tombstone).
//! Streams are not replicated and are logged as values in both modes.

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};
use lattice_store::dump;

use crate::client::{ConnId, REPLAY_CONN};
use crate::ctx::Core;
use crate::io::{Input, Output};
use crate::repl::Leafed;

pub mod frame;
pub mod state;

use state::Snapshot;
pub use state::{Persist, SnapshotKind, UploadFigures};

/// Keys put into one snapshot slice at most (whole slots; a slot holds ~1/16384 of the keys).
pub const SNAPSHOT_SLICE_KEYS: usize = 4096;
/// A slice also ends once its chunk passes this many bytes.
const SNAPSHOT_SLICE_BYTES: usize = 1 << 20;
/// Under `everysec`/`no`, writes are refused (MISCONF) while the disk fails and more than this
/// many bytes of records wait for it: the backlog the driver keeps is bounded.
pub const MAX_UNSYNCED_BYTES_ON_FAULT: u64 = 64 << 20;
/// The logged-commands buffer is kept for the next record up to this capacity.
const SCRATCH_KEEP_BYTES: usize = 64 << 10;
/// The buffer records are framed in and leave from (`Persist::records`) is refilled this
/// much at a time: a few hundred small records per allocation. A record that grew past it
/// keeps its buffer for itself (freed with its view).
const RECORD_ARENA_BYTES: usize = 64 << 10;
/// A record starts in the arena as it is while this much room is left; below, the arena is
/// refilled first (taking its block back whole when the driver dropped every earlier view).
const RECORD_ROOM_BYTES: usize = 4 << 10;

const OP_CLEAR: u8 = 0;
/// The key's state with the value as a full DUMP payload: written by older versions, read.
const OP_SET: u8 = 1;
const OP_DEL: u8 = 2;
/// `3 varint-count (varint-len arg)*`: a command to run again (see `Flag::LoggedAsCommand`).
const OP_CMD: u8 = 3;
/// `4 varint-len entries`: the whole function library set (`cmd::function::library`'s
/// encoding of its replicated entries), replacing the one before.
const OP_FUNCTIONS: u8 = 4;
/// `5 varint-len key varint-len state`: a clustered node's replicated state of a key.
const OP_REPL: u8 = 5;
/// `6 varint-len key varint-deadline+1 varint-len value`: the key's state, the value in
/// `dump::put_body`'s encoding (DUMP without its footer: the frame is checksummed already,
/// and the byte-wise CRC-64 was most of the cost of logging a small key; 10 bytes less per
/// key on disk).
const OP_VALUE: u8 = 6;
/// `7 varint-len key varint-len deadline varint-digest`: a clustered node's stub of a key it
/// evicted (ARCHITECTURE §79): the state's digest, and its deadline register (bincode; empty
/// when it had none). Written by snapshots, which replace the records that held the key.
const OP_STUB: u8 = 7;

/// A value is large, for `Flag::LoggedAsCommand`, past this many elements (or string bytes / 8).
const LARGE_VALUE_ELEMENTS: usize = 64;

pub use crate::config::Fsync;

pub(crate) use crate::varint::{get_bytes, get_varint, put_varint};

/// A buffer a record's operations are encoded into: the record arena (a `BytesMut`, where
/// the record is framed in place) or a snapshot chunk's `Vec`.
pub(crate) trait RecordBuf: BufMut + AsRef<[u8]> + AsMut<[u8]> {}
impl<B: BufMut + AsRef<[u8]> + AsMut<[u8]>> RecordBuf for B {}

/// Large keys a snapshot takes ahead of its walk at most (`persist_before_command`); past it,
/// writes to further large keys are logged as states until the snapshot ends, as before.
const MAX_EARLY_KEYS: usize = 65_536;

/// Whether a value is large enough that a command changing it is logged as the command (the
/// value whole would cost more than the command); a key with a deadline is logged as a state.
fn is_large(e: &lattice_store::Entry) -> bool {
    let elements = match &e.value {
        lattice_store::Value::Str(s) => s.len() / 8,
        lattice_store::Value::List(l) => l.len(),
        lattice_store::Value::Hash(h) => h.len(),
        lattice_store::Value::Set(s) => s.len(),
        lattice_store::Value::ZSet(z) => z.len(),
        lattice_store::Value::Stream(_) => 0,
    };
    elements > LARGE_VALUE_ELEMENTS && e.expire_at_ms().is_none()
}

/// Whether the running snapshot `s` (of a standalone node: its walk is over the store's
/// slots) already holds `key` as it is now: its walk is past the key's slot, or it took the
/// key ahead of the walk.
fn snapshot_holds(s: &state::Snapshot, key: &[u8]) -> bool {
    s.ended || lattice_store::store_slot_of(key) < s.next_slot || s.early.contains(key)
}

/// Appends a clustered node's replicated state of `key` (`state` as anti-entropy encodes it).
fn put_repl<B: RecordBuf>(out: &mut B, key: &[u8], state: &[u8]) {
    out.put_u8(OP_REPL);
    put_varint(out, key.len() as u64);
    out.put_slice(key);
    put_varint(out, state.len() as u64);
    out.put_slice(state);
}

fn put_stub<B: RecordBuf>(out: &mut B, key: &[u8], digest: u64, deadline: &[u8]) {
    out.put_u8(OP_STUB);
    put_varint(out, key.len() as u64);
    out.put_slice(key);
    put_varint(out, deadline.len() as u64);
    out.put_slice(deadline);
    put_varint(out, digest);
}

/// `2 varint-len key`: the key was removed.
fn put_del<B: RecordBuf>(out: &mut B, key: &[u8]) {
    out.put_u8(OP_DEL);
    put_varint(out, key.len() as u64);
    out.put_slice(key);
}

fn put_entry<B: RecordBuf>(out: &mut B, e: &lattice_store::Entry) {
    out.put_u8(OP_VALUE);
    put_varint(out, e.key().len() as u64);
    out.put_slice(e.key());
    put_varint(out, e.expire_at_ms().map_or(0, |d| d.saturating_add(1)));
    // The value is encoded in place after a one-byte length, which is filled in afterwards;
    // only a value of 128 bytes or more is moved, by the varint's few extra bytes (rather
    // than every value being encoded into a buffer of its own per key, or moved).
    let at = out.as_ref().len();
    out.put_u8(0);
    let start = at + 1;
    dump::put_body(out, &e.value);
    let len = out.as_ref().len() - start;
    if len < 0x80 {
        out.as_mut()[at] = len as u8;
    } else {
        let mut prefix = [0u8; 10];
        let (mut k, mut v) = (0, len);
        while v >= 0x80 {
            prefix[k] = v as u8 | 0x80;
            v >>= 7;
            k += 1;
        }
        prefix[k] = v as u8;
        k += 1;
        out.put_bytes(0, k - 1);
        let buf = out.as_mut();
        buf.copy_within(start..start + len, at + k);
        buf[at..at + k].copy_from_slice(&prefix[..k]);
    }
}

/// Takes the record arena with a frame begun in it (the header's room; the payload is
/// encoded after it, then [`Core::emit_record`] seals and splits it off). The arena holds no
/// earlier bytes: every record is split off as it is sealed, and an empty one is cleared.
/// Refilled first when little room is left: once the driver has dropped the views of the
/// earlier records, `reserve` takes the whole block back, so a steady write load allocates
/// nothing per record.
fn begin_record(arena: &mut BytesMut) -> BytesMut {
    debug_assert!(arena.is_empty(), "a record was left unsealed in the arena");
    let mut data = std::mem::take(arena);
    if data.capacity() < RECORD_ROOM_BYTES {
        data.reserve(RECORD_ARENA_BYTES);
    }
    frame::begin_frame(&mut data);
    data
}

impl Core {
    /// The change hook's persistence part (called from [`Core::modified`]).
    #[inline]
    /// FLUSHALL/FLUSHDB: one "every key removed" operation instead of a key each.
    /// A clustered node also notes every key with content: FLUSHALL replaces each one's
    /// state by a tombstone (called before the capture), and the record carries the
    /// tombstones after the "every key removed" operation (which removes the streams).
    pub(crate) fn persist_flush_all(&mut self) {
        self.persist.changes_since_save += self.db.len() as u64;
        if let Some(r) = self.repl.as_ref() {
            if self.persist.logging {
                self.persist.commands.clear();
                self.persist.clear = true;
                for k in r.keys_with_content(&self.db) {
                    self.persist.dirty.push(&k);
                }
            }
            return;
        }
        if self.persist.logging {
            self.persist.dirty.clear();
            self.persist.waiting.clear();
            self.persist.commands.clear();
            self.persist.clear = true;
        }
    }

    fn logging_wanted(&self) -> bool {
        self.persist.active && (self.config.appendonly || self.persist.snapshot.is_some())
    }

    /// After a command ran: when it is `logged_as_command` (its table flag), changed only its key,
    /// and that key holds a large value with no deadline, the command is logged instead of the
    /// value's new state.
    pub(crate) fn persist_after_command(&mut self, logged_as_command: bool, args: &[Bytes]) {
        let p = &self.persist;
        // Never on a clustered node: replayed, the command would be captured again as a new
        // write.
        if self.repl.is_some()
            || !p.logging
            || args.len() < 2
            || p.dirty.last() != Some(&args[1][..])
        {
            return;
        }
        if !logged_as_command {
            return;
        }
        // While a snapshot is being taken, only for a key it already holds as it was before
        // this command (see `persist_before_command`): one it captures later would hold the
        // command's effect, and unlike a state a command applied twice is wrong.
        if p.snapshot
            .as_ref()
            .is_some_and(|s| !snapshot_holds(s, &args[1]))
        {
            return;
        }
        let Some(e) = self.db.get_raw(&args[1]) else {
            return;
        };
        if !is_large(e) {
            return;
        }
        let p = &mut self.persist;
        let n = p.dirty.len();
        // The key's state is already due in this record: a command before it would apply
        // twice. (Linear, but only on this path: large values.)
        if p.dirty.iter().take(n - 1).any(|k| k == &args[1][..]) {
            return;
        }
        p.dirty.pop();
        p.commands.push(OP_CMD);
        put_varint(&mut p.commands, args.len() as u64);
        for a in args {
            put_varint(&mut p.commands, a.len() as u64);
            p.commands.extend_from_slice(a);
        }
    }

    /// Before a command that is logged as a command runs on a large key while a snapshot is
    /// being taken whose walk has not reached the key: the key goes into the snapshot now, as
    /// it is before the command, so that the command can be logged after it (and the walk
    /// skips it). Without this, every record written during a snapshot held the whole value
    /// of such a key: LPUSH on a list of 500,000 elements logged megabytes per event-loop
    /// turn, the log outgrew its base before the snapshot ended, and compaction started again
    /// at once (62 snapshots and 2.8 GB of log in one benchmark run of 600,000 LPUSH).
    pub(crate) fn persist_before_command(&mut self, logged_as_command: bool, args: &[Bytes]) {
        if !logged_as_command || self.repl.is_some() || args.len() < 2 {
            return;
        }
        let Some(s) = self.persist.snapshot.as_ref() else {
            return;
        };
        let key = &args[1];
        if snapshot_holds(s, key) || s.early.len() >= MAX_EARLY_KEYS {
            return;
        }
        let Some(e) = self.db.get_raw(key).filter(|e| is_large(e)) else {
            return;
        };
        let mut data = Vec::new();
        put_entry(&mut data, e);
        let s = self.persist.snapshot.as_mut().expect("checked above");
        s.early.insert(key.clone());
        s.keys += 1;
        self.persist.out.push_back(Output::SnapshotChunk {
            data: Bytes::from(data),
        });
    }

    /// The function library set changed: the next record carries it whole.
    pub(crate) fn persist_functions(&mut self) {
        self.persist.changes_since_save += 1;
        if self.persist.logging {
            self.persist.functions = true;
        }
    }

    /// `OP_FUNCTIONS` with the current library set.
    fn put_functions<B: RecordBuf>(&self, data: &mut B) {
        let blob = crate::cmd::function::entries_blob(self);
        data.put_u8(OP_FUNCTIONS);
        put_varint(data, blob.len() as u64);
        data.put_slice(&blob);
    }

    /// Turns the changes captured since the last record into the next record. The check for
    /// nothing to log is inlined: every poll of the node's output makes it, several times
    /// per request, and a call into the whole flush cost each of them its prologue.
    #[inline]
    pub(crate) fn persist_flush(&mut self) {
        let p = &self.persist;
        if p.dirty.is_empty()
            && p.waiting.is_empty()
            && !p.clear
            && p.commands.is_empty()
            && !p.functions
        {
            return;
        }
        self.persist_flush_changes();
    }

    #[inline(never)]
    fn persist_flush_changes(&mut self) {
        let p = &mut self.persist;
        let waiting_due = !p.waiting.is_empty()
            && self
                .repl
                .as_ref()
                .is_some_and(|r| r.deferrals_ended() != p.waiting_epoch);
        if p.dirty.is_empty() && !waiting_due && !p.clear && p.commands.is_empty() && !p.functions {
            return;
        }
        if self.repl.is_some() {
            return self.persist_flush_replicated();
        }
        let now_ms = self.now.as_millis();
        // The record is encoded straight into its frame in the arena it leaves from.
        let mut data = begin_record(&mut p.records);
        if p.clear {
            data.put_u8(OP_CLEAR);
            p.clear = false;
        }
        if std::mem::take(&mut self.persist.functions) {
            self.put_functions(&mut data);
        }
        let p = &mut self.persist;
        data.put_slice(&p.commands);
        p.commands.clear();
        // A huge logged command must not pin its buffer for good.
        if p.commands.capacity() > SCRATCH_KEEP_BYTES {
            p.commands = Vec::new();
        }
        // Each key once, in the order of its hash: sorting (hash, index) pairs compares
        // integers where sorting the keys compared their bytes (a quarter of what logging
        // cost a request at pipeline depth 16), and the hash serves the lookup too. A key
        // whose repeats are not adjacent after the sort (a hash shared with another key) is
        // encoded twice: the same state twice, harmless. (A linear scan instead of the sort
        // for small batches was tried in §88: no difference measurable in instructions.)
        let keys = std::mem::take(&mut p.dirty);
        let mut order = std::mem::take(&mut p.order);
        order.extend(
            keys.iter()
                .enumerate()
                .map(|(i, k)| (lattice_store::key_hash(k), i as u32)),
        );
        if order.len() > 1 {
            order.sort_unstable();
        }
        let mut last: Option<(u64, &[u8])> = None;
        for &(h, i) in &order {
            let k = keys.get(i as usize);
            if last == Some((h, k)) {
                continue;
            }
            last = Some((h, k));
            match self.db.get_raw_hashed(h, k) {
                Some(e) => put_entry(&mut data, e),
                None => put_del(&mut data, k),
            }
        }
        let mut keys = keys;
        keys.clear();
        order.clear();
        let p = &mut self.persist;
        p.dirty = keys;
        p.order = order;
        p.records = data;
        self.emit_record(false, now_ms);
    }

    /// A clustered node's record: the replicated state of every changed key. A key whose
    /// capture is deferred to the replicator's next flush (§17) waits for it in `dirty`, its
    /// state being the one before the change; unless replies wait for the record (`always`,
    /// `s3-durability sync`): then the captures are settled now, as a reply must not be
    /// released before the record of what it acknowledges.
    fn persist_flush_replicated(&mut self) {
        if self.acks_wait_for_persisted() {
            self.settle_captures();
        }
        let now_ms = self.now.as_millis();
        let p = &mut self.persist;
        let mut dirty = std::mem::take(&mut p.dirty);
        let mut waiting = std::collections::BTreeSet::new();
        let ended = self.repl.as_ref().expect("clustered").deferrals_ended();
        if ended != p.waiting_epoch {
            // Some deferral ended: any waiting key may be captured now.
            waiting = std::mem::take(&mut p.waiting);
            p.waiting_epoch = ended;
        }
        let mut keys: Vec<&[u8]> = dirty.iter().chain(waiting.iter().map(|k| &k[..])).collect();
        if keys.len() > 1 {
            keys.sort_unstable();
            keys.dedup();
        }
        let mut data = begin_record(&mut self.persist.records);
        if std::mem::take(&mut self.persist.clear) {
            data.put_u8(OP_CLEAR);
        }
        if std::mem::take(&mut self.persist.functions) {
            self.put_functions(&mut data);
        }
        let mut state = Vec::new();
        let repl = self.repl.as_mut().expect("clustered");
        for k in keys {
            if repl.is_deferred(k) {
                // A copy of its own: a waiting key must not pin the key buffer's block.
                self.persist.waiting.insert(Bytes::copy_from_slice(k));
            } else if repl.encode_state(k, &self.db, &mut state) {
                put_repl(&mut data, k, &state);
            } else {
                // Not replicated: a stream, or a key that never had a replicated state.
                match self.db.get_raw(k) {
                    Some(e) => put_entry(&mut data, e),
                    None => put_del(&mut data, k),
                }
            }
        }
        dirty.clear();
        self.persist.dirty = dirty;
        let empty = data.len() == frame::FRAME_HEADER;
        self.persist.records = data;
        if empty {
            self.persist.records.clear();
        } else {
            self.emit_record(false, now_ms);
        }
    }

    /// Emits the record framed in `Persist::records` (begun by [`begin_record`], its payload
    /// encoded after the header): the header is filled in and the frame leaves as a view of
    /// the arena, which keeps the rest of its block for the next records.
    fn emit_record(&mut self, resume: bool, now_ms: u64) {
        let p = &mut self.persist;
        p.seq += 1;
        let kind = if resume {
            frame::Kind::Resume
        } else {
            frame::Kind::Batch
        };
        frame::seal_frame(&mut p.records, kind, p.seq);
        let record = p.records.split().freeze();
        if record.len() > RECORD_ARENA_BYTES {
            // A large record keeps its block to itself, freed with its view: reclaimed by the
            // arena, the block would stay for good (one logged SADD of 100,000 members pinned
            // about a megabyte, which Redis's lazyfree suite sees as memory UNLINK never gave
            // back).
            p.records = BytesMut::new();
        }
        let bytes = record.len() as u64;
        p.log_bytes += bytes;
        p.note_unsynced(now_ms, bytes);
        p.out.push_back(Output::Append {
            seq: p.seq,
            frame: record,
            resume,
        });
        if self.acks_wait_for_persisted() {
            self.request_sync(now_ms);
        }
    }

    /// Replies wait for `Persisted`: under `appendfsync always`, and under `s3-durability
    /// sync`, where the driver reports a record persisted once it is uploaded too.
    fn acks_wait_for_persisted(&self) -> bool {
        self.config.appendfsync == Fsync::Always || self.config.ack_after_upload
    }

    fn request_sync(&mut self, now_ms: u64) {
        let p = &mut self.persist;
        if p.seq > p.sync_requested {
            p.sync_requested = p.seq;
            p.last_sync_request_ms = now_ms;
            p.out.push_back(Output::Sync { seq: p.seq });
        }
    }

    /// Held replies whose record is durable now, and every other persistence output.
    pub(crate) fn persist_poll(&mut self) -> Option<Output> {
        if let Some(o) = self.persist.released.pop_front() {
            return Some(o);
        }
        self.persist.out.pop_front()
    }

    /// Whether `conn`'s pending output must wait for its record; if so it is taken into the
    /// held queue and true returned.
    pub(crate) fn persist_hold(&mut self, conn: ConnId) -> bool {
        let always = self.acks_wait_for_persisted();
        let p = &mut self.persist;
        let Some(c) = self.clients.get_mut(&conn) else {
            return false;
        };
        // SAVE's caller: its reply (and what it pipelined after) waits for the snapshot;
        // DEBUG RELOAD's, for the files read back.
        let saving = p.reloading == Some(conn)
            || p.snapshot
                .as_ref()
                .is_some_and(|s| s.waiters.contains(&conn));
        if c.held_replies == 0 && !saving && !p.must_hold(always) {
            return false;
        }
        let data = c.out.split().freeze();
        c.held_replies += 1;
        c.pending = false;
        p.held
            .push_back((if saving { u64::MAX } else { p.seq }, conn, data));
        true
    }

    /// The driver made every record up to `seq` durable: release the replies that waited.
    fn persisted(&mut self, seq: u64) {
        let now_ms = self.now.as_millis();
        let p = &mut self.persist;
        if seq > p.synced {
            p.synced = seq.min(p.seq);
        }
        p.last_sync_ms = now_ms;
        if p.fault.take().is_some() {
            // The disk is back.
        }
        if p.synced >= p.seq {
            p.unsynced_since_ms = None;
            p.unsynced_bytes = 0;
        }
        let mut reopened = Vec::new();
        while p.held.front().is_some_and(|h| h.0 <= p.synced) {
            let (_, conn, data) = p.held.pop_front().expect("checked");
            if let Some(c) = self.clients.get_mut(&conn) {
                c.held_replies -= 1;
                p.released.push_back(Output::Write { conn, data });
                if c.held_replies == 0 && c.closing && !c.pending {
                    c.pending = true;
                    reopened.push(conn);
                }
            }
        }
        for conn in reopened {
            self.pending_push(conn);
        }
    }

    /// A client's held replies are dropped with it.
    pub(crate) fn persist_forget(&mut self, conn: ConnId) {
        if self.persist.held.iter().any(|h| h.1 == conn) {
            self.persist.held.retain(|h| h.1 != conn);
        }
    }

    /// MISCONF for write commands while the disk fails: always under `always` and
    /// `s3-durability sync` (nothing could be acknowledged), and under the other policies once
    /// the backlog passes its bound. Never while persistence is off: then nothing is written
    /// that could fail, and the logged commands a reload replays (DEBUG RELOAD after a disk
    /// fault, whose error lasts until the next `Persisted`) must run, or the reload drops
    /// them and loads half the files (the durability simulation lost an acknowledged RPUSH
    /// this way, ARCHITECTURE §68).
    pub(crate) fn persist_refuses_writes(&self) -> Option<String> {
        let p = &self.persist;
        if !p.active {
            return None;
        }
        let fault = p.fault.as_ref()?;
        if !self.config.appendonly {
            return None;
        }
        if self.acks_wait_for_persisted() || p.unsynced_bytes > MAX_UNSYNCED_BYTES_ON_FAULT {
            return Some(format!(
                "MISCONF Errors writing to the AOF file: {fault}. Commands that may modify the data set are disabled until the disk accepts writes again (see INFO persistence)."
            ));
        }
        None
    }

    /// Starts a snapshot unless one runs. `Save` writes it all now.
    pub(crate) fn start_snapshot(&mut self, kind: SnapshotKind, waiter: Option<ConnId>) -> bool {
        if !self.persist.active || self.persist.snapshot.is_some() {
            return false;
        }
        let now_ms = self.now.as_millis();
        self.persist_flush();
        let seq = self.persist.seq;
        self.persist.snapshot = Some(Snapshot {
            next_slot: 0,
            keys: 0,
            started_ms: now_ms,
            ended: false,
            waiters: waiter.into_iter().collect(),
            log_bytes_at_begin: self.persist.log_bytes,
            changes_at_begin: self.persist.changes_since_save,
            early: Default::default(),
        });
        // Changes from here on are logged even with appendonly off, so the fuzzy snapshot plus
        // the records after its sequence number give an exact state.
        self.persist.logging = true;
        self.persist.out.push_back(Output::SnapshotBegin { seq });
        // The library set goes first, whole (later changes follow in the records after `seq`).
        if !self.scripts.libraries.entries.is_empty() {
            let mut data = Vec::new();
            self.put_functions(&mut data);
            self.persist.out.push_back(Output::SnapshotChunk {
                data: Bytes::from(data),
            });
        }
        if kind == SnapshotKind::Save {
            while self.snapshot_slice() {}
        }
        true
    }

    /// Emits the next slice of the snapshot (whole slots, bounded keys and bytes). Returns
    /// true while more slices remain.
    pub(crate) fn snapshot_slice(&mut self) -> bool {
        let Some(s) = self.persist.snapshot.as_mut() else {
            return false;
        };
        if s.ended {
            return false;
        }
        let mut data = Vec::new();
        let mut n = 0;
        // A clustered node first writes the replicated states, leaf by leaf (tombstones
        // included), then walks the store for what is not replicated (streams).
        let leaves = if self.repl.is_some() {
            crate::repl::merkle::LEAVES
        } else {
            0
        };
        if s.next_slot < leaves {
            let repl = self.repl.as_mut().expect("clustered");
            while s.next_slot < leaves
                && n < SNAPSHOT_SLICE_KEYS
                && data.len() < SNAPSHOT_SLICE_BYTES
            {
                repl.for_each_state_in_leaf(s.next_slot, &self.db, &mut |k, st| {
                    match st {
                        Leafed::State(st) => put_repl(&mut data, k, st),
                        Leafed::Stub { digest, deadline } => {
                            put_stub(&mut data, k, digest, deadline)
                        }
                    }
                    n += 1;
                });
                s.next_slot += 1;
            }
        }
        while s.next_slot >= leaves
            && s.next_slot < leaves + lattice_store::SLOT_COUNT
            && n < SNAPSHOT_SLICE_KEYS
            && data.len() < SNAPSHOT_SLICE_BYTES
        {
            let early = &s.early;
            self.db.for_each_in_slot(s.next_slot - leaves, |e| {
                if (leaves == 0 || matches!(e.value, lattice_store::Value::Stream(_)))
                    && (early.is_empty() || !early.contains(e.key()))
                {
                    put_entry(&mut data, e);
                    n += 1;
                }
            });
            s.next_slot += 1;
        }
        s.keys += n as u64;
        if !data.is_empty() {
            self.persist.out.push_back(Output::SnapshotChunk {
                data: Bytes::from(data),
            });
        }
        let s = self.persist.snapshot.as_mut().expect("present");
        if s.next_slot >= leaves + lattice_store::SLOT_COUNT {
            s.ended = true;
            let keys = s.keys;
            self.persist.out.push_back(Output::SnapshotEnd { keys });
            return false;
        }
        true
    }

    /// True while snapshot slices remain to be emitted (the node then wants a timer soon).
    pub(crate) fn snapshot_slicing(&self) -> bool {
        self.persist.snapshot.as_ref().is_some_and(|s| !s.ended)
    }

    fn snapshot_done(&mut self, result: Result<u64, String>) {
        let now_ms = self.now.as_millis();
        let Some(s) = self.persist.snapshot.take() else {
            return;
        };
        let p = &mut self.persist;
        p.last_snapshot_ms = Some(now_ms.saturating_sub(s.started_ms));
        let reply = match result {
            Ok(bytes) => {
                p.snapshots += 1;
                p.last_snapshot_ok = true;
                p.last_snapshot_error = None;
                p.lastsave_s = now_ms / 1000;
                p.base_bytes = bytes;
                p.log_bytes = p.log_bytes.saturating_sub(s.log_bytes_at_begin);
                p.changes_since_save = p.changes_since_save.saturating_sub(s.changes_at_begin);
                Ok(())
            }
            Err(e) => {
                p.last_snapshot_ok = false;
                p.last_snapshot_error = Some(e.clone());
                Err(e)
            }
        };
        self.persist.logging = self.logging_wanted();
        if !self.persist.logging {
            self.persist.dirty.clear();
            self.persist.waiting.clear();
            self.persist.clear = false;
        }
        let reload = self.persist.reloading.filter(|c| s.waiters.contains(c));
        for conn in s.waiters {
            if Some(conn) == reload && reply.is_ok() {
                // DEBUG RELOAD: answered once the files are read back.
                continue;
            }
            let reply = reply
                .as_ref()
                .map(|_| ())
                .map_err(|e| format!("ERR snapshot failed: {e}"));
            self.answer_waiter(conn, reply);
        }
        if reload.is_some() {
            if reply.is_ok() {
                self.request_reload();
            } else {
                self.persist.reloading = None;
            }
        }
        if self.persist.shutdown_after_save {
            self.persist.shutdown_after_save = false;
            if reply.is_ok() {
                self.persist_shutdown();
            }
        }
    }

    /// Answers a client that waited for the driver (SAVE, DEBUG RELOAD): its reply, then what
    /// it pipelined after, which was held behind it.
    fn answer_waiter(&mut self, conn: ConnId, reply: Result<(), String>) {
        let Some(c) = self.clients.get_mut(&conn) else {
            return;
        };
        let mut out = bytes::BytesMut::new();
        let mut w = lattice_resp::ReplyWriter::new(&mut out, c.proto);
        match &reply {
            Ok(()) => w.simple(b"OK"),
            Err(e) => w.error(e.as_bytes()),
        }
        let p = &mut self.persist;
        p.released.push_back(Output::Write {
            conn,
            data: out.freeze(),
        });
        let mut rest = VecDeque::new();
        for h in std::mem::take(&mut p.held) {
            if h.1 == conn && h.0 == u64::MAX {
                c.held_replies -= 1;
                p.released.push_back(Output::Write { conn, data: h.2 });
            } else {
                rest.push_back(h);
            }
        }
        p.held = rest;
        if c.held_replies == 0 && c.closing && !c.pending {
            c.pending = true;
            self.pending_push(conn);
        }
    }

    /// DEBUG RELOAD (`save`: a snapshot first, as Redis saves its RDB first) or DEBUG LOADAOF
    /// / RELOAD NOSAVE (the files as they are): `conn` waits until the driver has read the
    /// data directory back through recovery. False when it cannot start (the caller says
    /// why).
    pub(crate) fn start_reload(&mut self, conn: ConnId, save: bool) -> bool {
        let p = &self.persist;
        if !p.active || p.snapshot.is_some() || p.reloading.is_some() || self.repl.is_some() {
            return false;
        }
        self.persist.reloading = Some(conn);
        if save {
            self.start_snapshot(SnapshotKind::Save, Some(conn));
        } else {
            self.request_reload();
        }
        true
    }

    /// Every change captured so far goes out in a record before the driver reads back.
    fn request_reload(&mut self) {
        self.persist_flush();
        self.persist.out.push_back(Output::Reload);
    }

    /// See [`crate::Node::reload_begin`]: the keyspace and the function libraries emptied
    /// without logging (they come back from the files), and nothing captured until
    /// [`Core::reload_done`].
    pub(crate) fn reload_begin(&mut self) {
        self.persist_flush();
        self.persist.active = false;
        self.persist.logging = false;
        self.db.clear();
        crate::cmd::function::clear_for_reload(self);
    }

    /// See [`crate::Node::reload_done`].
    pub(crate) fn reload_done(&mut self, result: Result<(), String>) {
        self.enable_persistence();
        if let Some(conn) = self.persist.reloading.take() {
            self.answer_waiter(
                conn,
                result.map_err(|e| format!("ERR Error trying to load the data directory: {e}")),
            );
        }
    }

    /// SHUTDOWN: the last changes are logged and synced (by the driver, which then exits).
    pub(crate) fn persist_shutdown(&mut self) {
        self.persist_flush();
        self.persist.out.push_back(Output::Shutdown);
    }

    /// SHUTDOWN SAVE: snapshot first; the driver is asked to stop once it is on disk.
    pub(crate) fn shutdown_after_snapshot(&mut self, conn: ConnId) -> bool {
        if !self.start_snapshot(SnapshotKind::Save, None) {
            return false;
        }
        let _ = conn;
        self.persist.shutdown_after_save = true;
        true
    }

    /// Called after CONFIG SET: appendonly switched on starts logging (marked as a resume
    /// point) and a rewrite; switched off stops logging; appendfsync always syncs what waits.
    pub(crate) fn persist_reconfigured(&mut self, was_appendonly: bool) {
        if !self.persist.active {
            return;
        }
        let now_ms = self.now.as_millis();
        if self.config.appendonly && !was_appendonly {
            if !self.persist.logging {
                let data = begin_record(&mut self.persist.records);
                self.persist.records = data;
                self.emit_record(true, now_ms);
            }
            self.persist.logging = true;
            self.start_snapshot(SnapshotKind::Background, None);
        }
        self.persist.logging = self.logging_wanted();
        if !self.persist.logging {
            self.persist.dirty.clear();
            self.persist.waiting.clear();
            self.persist.clear = false;
        }
        if self.config.appendfsync == Fsync::Always {
            self.request_sync(now_ms);
        }
    }

    /// The timer's part: everysec syncs, snapshot slices, automatic compaction.
    pub(crate) fn persist_tick(&mut self) {
        if !self.persist.active {
            return;
        }
        let now_ms = self.now.as_millis();
        if self.snapshot_slicing() {
            self.snapshot_slice();
        }
        let p = &self.persist;
        if self.config.appendfsync == Fsync::Everysec
            && p.seq > p.sync_requested
            && now_ms >= p.last_sync_request_ms + 1000
        {
            self.request_sync(now_ms);
        }
        // A failed sync is asked again (the driver retries its writes then).
        let p = &self.persist;
        if p.fault.is_some() && p.seq > p.synced && now_ms >= p.last_sync_request_ms + 100 {
            self.persist.sync_requested = self.persist.synced;
            self.request_sync(now_ms);
        }
        // Compaction: Redis's auto-aof-rewrite rule on the log's growth since the snapshot.
        let p = &self.persist;
        let pct = self.config.auto_aof_rewrite_percentage;
        if self.config.appendonly
            && p.snapshot.is_none()
            && p.fault.is_none()
            && pct > 0
            && p.log_bytes >= self.config.auto_aof_rewrite_min_size
            && p.log_bytes * 100 >= p.base_bytes * pct
        {
            self.start_snapshot(SnapshotKind::Background, None);
        }
    }

    /// Applies one recovered record or snapshot chunk.
    pub(crate) fn load_payload(&mut self, data: &[u8]) -> Result<u64, String> {
        let now_ms = self.now.as_millis();
        let mut at = 0;
        let mut n = 0;
        let mut commands: Vec<Vec<Bytes>> = Vec::new();
        while at < data.len() {
            let op = data[at];
            at += 1;
            match op {
                OP_CLEAR => self.db.clear(),
                OP_SET | OP_VALUE => {
                    let key = get_bytes(data, &mut at)?;
                    let deadline = get_varint(data, &mut at)?;
                    let payload = get_bytes(data, &mut at)?;
                    let value = if op == OP_SET {
                        dump::restore(payload)
                    } else {
                        dump::restore_body(payload)
                    }
                    .map_err(|e| format!("key {:?}: {e}", String::from_utf8_lossy(key)))?;
                    let deadline = deadline.checked_sub(1);
                    if self.repl.is_some() && !matches!(value, lattice_store::Value::Stream(_)) {
                        return Err(format!(
                            "key {:?} has a value without replication state: the directory \
                             holds a standalone node's data (start this replica on an empty \
                             directory)",
                            String::from_utf8_lossy(key)
                        ));
                    }
                    if deadline.is_some_and(|d| d <= now_ms) {
                        self.db.remove(key);
                    } else {
                        self.db.insert(key, value, deadline, now_ms);
                    }
                }
                OP_DEL => {
                    let key = get_bytes(data, &mut at)?;
                    self.db.remove(key);
                }
                OP_REPL => {
                    let key = Bytes::copy_from_slice(get_bytes(data, &mut at)?);
                    let state = get_bytes(data, &mut at)?;
                    let Some(repl) = self.repl.as_mut() else {
                        return Err(format!(
                            "key {:?} has a replicated state: the directory holds a cluster \
                             replica's data (start with --seeds, or on an empty directory)",
                            String::from_utf8_lossy(&key)
                        ));
                    };
                    repl.load_state(&key, state, &mut self.db)
                        .map_err(|e| format!("key {:?}: {e}", String::from_utf8_lossy(&key)))?;
                    self.apply_remote(&key);
                }
                OP_STUB => {
                    let key = Bytes::copy_from_slice(get_bytes(data, &mut at)?);
                    let deadline = get_bytes(data, &mut at)?;
                    let digest = get_varint(data, &mut at)?;
                    let Some(repl) = self.repl.as_mut() else {
                        return Err(format!(
                            "key {:?} has an evicted replicated state: the directory holds a \
                             cluster replica's data (start with --seeds, or on an empty \
                             directory)",
                            String::from_utf8_lossy(&key)
                        ));
                    };
                    repl.load_stub(&key, digest, deadline, &mut self.db)
                        .map_err(|e| format!("key {:?}: {e}", String::from_utf8_lossy(&key)))?;
                }
                OP_FUNCTIONS => {
                    let blob = get_bytes(data, &mut at)?;
                    crate::cmd::function::load_recorded(self, blob)
                        .map_err(|e| format!("function libraries: {e}"))?;
                }
                OP_CMD => {
                    let n = get_varint(data, &mut at)?;
                    if n == 0 {
                        return Err(format!(
                            "logged command with no arguments at byte {}",
                            at - 1
                        ));
                    }
                    let mut args = Vec::new();
                    for _ in 0..n.min(1 << 20) {
                        args.push(Bytes::copy_from_slice(get_bytes(data, &mut at)?));
                    }
                    commands.push(args);
                    // Run in order with the operations around it.
                    self.replay_commands(&mut commands)?;
                }
                other => return Err(format!("unknown operation {other} at byte {}", at - 1)),
            }
            n += 1;
        }
        Ok(n)
    }

    /// Persistence inputs from the driver.
    pub(crate) fn persist_input(&mut self, input: Input) {
        match input {
            Input::Persisted { seq } => self.persisted(seq),
            Input::PersistError { message } => {
                let p = &mut self.persist;
                p.write_errors += 1;
                p.fault = Some(message);
            }
            Input::SnapshotDone { result } => self.snapshot_done(result),
            Input::Loaded {
                last_seq,
                log_bytes,
                snapshot_bytes,
                keys,
                records,
            } => {
                let p = &mut self.persist;
                p.seq = last_seq;
                p.synced = last_seq;
                p.sync_requested = last_seq;
                p.log_bytes = log_bytes;
                p.base_bytes = snapshot_bytes;
                p.loaded_keys = keys;
                p.loaded_records = records;
                p.changes_since_save = 0;
            }
            _ => {}
        }
    }
}

impl Core {
    /// Runs logged commands through the ordinary dispatcher, as a client that is not there.
    fn replay_commands(&mut self, commands: &mut Vec<Vec<Bytes>>) -> Result<(), String> {
        if !self.clients.contains_key(&REPLAY_CONN) {
            let mut c = crate::client::Client::new(REPLAY_CONN, String::new(), String::new(), 0);
            c.authenticated = true;
            c.user = None;
            self.clients.insert(REPLAY_CONN, c);
        }
        for args in commands.drain(..) {
            let mut out = bytes::BytesMut::new();
            self.dispatch(REPLAY_CONN, &args, &mut out, lattice_resp::Protocol::Resp2);
            if out.first() == Some(&b'-') {
                return Err(format!(
                    "logged command {} failed: {}",
                    String::from_utf8_lossy(&args[0]),
                    String::from_utf8_lossy(&out).trim_end()
                ));
            }
        }
        self.clients.remove(&REPLAY_CONN);
        Ok(())
    }
}

impl Core {
    /// See [`crate::Node::enable_persistence`].
    pub(crate) fn enable_persistence(&mut self) {
        self.persist.active = true;
        self.persist.last_snapshot_ok = true;
        self.persist.logging = self.logging_wanted();
    }
}

/// INFO persistence, with Redis's field names where one fits and `aof_` extras for what
/// Lattice adds (fsync lag, records held, the last error).
pub(crate) fn write_info(core: &Core, now_ms: u64, t: &mut String) {
    use std::fmt::Write as _;
    let p = &core.persist;
    let aof = p.active && core.config.appendonly;
    let in_progress = p.snapshot_in_progress();
    let current_s = p
        .snapshot_started_ms()
        .map_or(-1, |s| (now_ms.saturating_sub(s) / 1000) as i64);
    let last_s = p.last_snapshot_ms.map_or(-1, |ms| (ms / 1000) as i64);
    let status = if p.last_snapshot_ok { "ok" } else { "err" };
    let write_status = if p.fault.is_some() { "err" } else { "ok" };
    let lastsave = if p.lastsave_s == 0 {
        core.start_ms / 1000
    } else {
        p.lastsave_s
    };
    let _ = write!(
        t,
        "# Persistence\r\nloading:0\r\nasync_loading:0\r\ncurrent_cow_peak:0\r\ncurrent_cow_size:0\r\ncurrent_fork_perc:0.00\r\ncurrent_save_keys_processed:0\r\ncurrent_save_keys_total:0\r\nrdb_changes_since_last_save:{}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{lastsave}\r\nrdb_last_bgsave_status:{status}\r\nrdb_last_bgsave_time_sec:{last_s}\r\nrdb_current_bgsave_time_sec:{current_s}\r\nrdb_saves:{}\r\naof_enabled:{}\r\naof_rewrite_in_progress:{}\r\naof_rewrite_scheduled:0\r\naof_last_rewrite_time_sec:{last_s}\r\naof_current_rewrite_time_sec:{current_s}\r\naof_last_bgrewrite_status:{status}\r\naof_rewrites:{}\r\naof_last_write_status:{write_status}\r\naof_last_cow_size:0\r\nmodule_fork_in_progress:0\r\nmodule_fork_last_cow_size:0\r\n",
        p.changes_since_save,
        u8::from(in_progress),
        p.snapshots,
        u8::from(aof),
        u8::from(in_progress),
        p.snapshots,
    );
    if aof || p.active {
        let _ = write!(
            t,
            "aof_current_size:{}\r\naof_base_size:{}\r\naof_pending_rewrite:0\r\naof_buffer_length:0\r\naof_pending_bio_fsync:{}\r\naof_delayed_fsync:0\r\naof_fsync_policy:{}\r\naof_last_seq:{}\r\naof_synced_seq:{}\r\naof_fsync_lag_ms:{}\r\naof_last_fsync_ms_ago:{}\r\naof_held_replies:{}\r\naof_write_errors:{}\r\naof_last_write_error:{}\r\nrdb_last_bgsave_error:{}\r\nloading_loaded_keys:{}\r\nloading_loaded_records:{}\r\n",
            p.base_bytes + p.log_bytes,
            p.base_bytes,
            u8::from(p.seq > p.synced),
            match core.config.appendfsync {
                Fsync::Always => "always",
                Fsync::Everysec => "everysec",
                Fsync::No => "no",
            },
            p.seq,
            p.synced,
            p.fsync_lag_ms(now_ms),
            if p.last_sync_ms == 0 {
                -1
            } else {
                now_ms.saturating_sub(p.last_sync_ms) as i64
            },
            p.held_replies(),
            p.write_errors,
            p.fault.as_deref().unwrap_or(""),
            p.last_snapshot_error.as_deref().unwrap_or(""),
            p.loaded_keys,
            p.loaded_records,
        );
    }
    if let Some(u) = &p.upload {
        let _ = write!(
            t,
            "s3_durability:{}\r\ns3_lag_bytes:{}\r\ns3_lag_segments:{}\r\ns3_max_lag_bytes:{}\r\ns3_uploaded_seq:{}\r\ns3_uploads:{}\r\ns3_upload_errors:{}\r\ns3_last_upload_ok:{}\r\ns3_last_error:{}\r\ns3_backlog_resets:{}\r\ns3_snapshots_uploaded:{}\r\n",
            u.mode,
            u.lag_bytes,
            u.lag_segments,
            u.max_lag_bytes,
            u.uploaded_seq,
            u.uploads,
            u.upload_errors,
            u8::from(u.last_upload_ok),
            u.last_error,
            u.backlog_resets,
            u.snapshots_uploaded,
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::{Buggify, Config, Micros, Node};

    /// Damaged record payloads are load errors, never panics (both found by fuzzing the
    /// persistence-record decoder: a logged command with no arguments reached dispatch).
    #[test]
    fn damaged_payloads_are_errors() {
        let now = Micros::from_millis(1_700_000_000_000);
        let mut node = Node::new(Config::default(), 1, Buggify::disabled(), now);
        for payload in [
            &[super::OP_CMD, 0][..],
            &[super::OP_CMD],
            &[super::OP_SET, 9],
            &[super::OP_VALUE, 1, b'k', 0, 1, 99],
        ] {
            assert!(node.load(now, payload).is_err(), "{payload:?} loaded");
            node.check_invariants();
        }
        let err = node.load(now, &[super::OP_CMD, 0]).unwrap_err();
        assert!(err.contains("no arguments"), "{err}");
    }
}

//! The driver glue every runtime shares: a node's persistence outputs carried out on a
//! [`Store`], and recovery fed back into the node. The server runs it over its data
//! directory, the simulator over a simulated disk.

use std::io;

use lattice_node::{Input, Micros, Node, Output};

use crate::upload::{AckMode, Call, ObjectReply, Uploader};
use crate::{Dir, Kind, Store, SyncTicket};

/// Framed records a drain leaves for the end of the turn at most; past this many bytes they
/// are written at once (one large MSET or a long pipeline's batch do not wait in memory).
pub const WRITE_AT_BYTES: usize = 1 << 20;

/// The figures recovery reports, for the start-up log line.
pub struct Loaded {
    /// The last record loaded (the log continues after it).
    pub last_seq: u64,
    pub keys: u64,
    pub records: u64,
    /// Repairs made (torn tails cut, leftovers removed), for the driver's log.
    pub notes: Vec<String>,
}

/// What the node hears once recovery read the directory back.
fn loaded_input<D: Dir>(store: &Store<D>, rec: &crate::store::Recovered) -> Input {
    let (log_bytes, snapshot_bytes) = store.sizes();
    Input::Loaded {
        last_seq: rec.last_seq,
        log_bytes,
        snapshot_bytes,
        keys: rec.snapshot_keys,
        records: rec.records,
    }
}

/// Writes a node's persistence outputs.
pub struct Persister<D: Dir> {
    store: Store<D>,
    /// Last synced sequence number the node was told about.
    reported: u64,
    /// A write failed and has not succeeded since (so the node hears of it once).
    failing: bool,
    /// The node asked for a sync: done once at the end of the event loop's turn, for every
    /// batch the turn ran (group commit).
    pub sync_wanted: bool,
    /// Records are framed but not yet written: one `write` at the end of the event loop's
    /// turn carries every batch the turn ran ([`Persister::end_turn`]).
    pub write_wanted: bool,
    /// Events worth a line in the driver's log (failures, recoveries, snapshots), taken with
    /// [`Persister::take_log`].
    log: Vec<String>,
    /// What goes to the object store, when a bucket is configured.
    upload: Option<Uploader>,
}

impl<D: Dir> Persister<D> {
    /// Recovers `dir` into `node` (through [`Node::load`]), then turns persistence on.
    pub fn recover(dir: D, node: &mut Node, now: Micros) -> Result<(Persister<D>, Loaded), String> {
        let (store, rec) = Store::recover(dir, |payload| node.load(now, payload).map(|_| ()))?;
        node.handle(now, loaded_input(&store, &rec));
        node.enable_persistence();
        let loaded = Loaded {
            last_seq: rec.last_seq,
            keys: rec.snapshot_keys,
            records: rec.records,
            notes: rec.notes.clone(),
        };
        Ok((
            Persister {
                reported: rec.last_seq,
                store,
                failing: false,
                sync_wanted: false,
                write_wanted: false,
                log: Vec::new(),
                upload: None,
            },
            loaded,
        ))
    }

    /// Carries out one persistence output; anything else is handed back.
    pub fn output(&mut self, node: &mut Node, now: Micros, out: Output) -> Option<Output> {
        match out {
            Output::Append { seq, frame, resume } => {
                // Framed by the node: appended as it is.
                self.store.append_frame(seq, &frame);
                if let Some(u) = self.upload.as_mut() {
                    let kind = if resume { Kind::Resume } else { Kind::Batch };
                    u.record(kind, seq, crate::frame::payload(&frame));
                }
            }
            Output::Sync { .. } => self.sync_wanted = true,
            Output::SnapshotBegin { seq } => {
                self.store.snapshot_begin(seq);
                if let Some(u) = self.upload.as_mut() {
                    u.snapshot_begin(seq);
                }
            }
            Output::SnapshotChunk { data } => self.store.snapshot_chunk(&data),
            Output::SnapshotEnd { keys } => {
                let result = self.store.snapshot_end(keys);
                self.log.push(match &result {
                    Ok(bytes) => format!("snapshot of {keys} keys written ({bytes} bytes)"),
                    Err(e) => format!("snapshot failed: {e}"),
                });
                self.snapshot_to_upload(result.is_ok());
                node.handle(now, Input::SnapshotDone { result });
                self.report(node, now);
            }
            Output::Reload => self.reload(node, now),
            other => return Some(other),
        }
        None
    }

    /// DEBUG RELOAD / LOADAOF: the log written and synced, then the directory read back into
    /// the emptied node through the recovery the start uses.
    fn reload(&mut self, node: &mut Node, now: Micros) {
        // Synced before the dataset is emptied: a failing disk leaves the data in place.
        if let Err(e) = self.store.sync() {
            let message = format!("syncing the log failed: {e}");
            self.failed(node, now, e);
            node.reload_done(now, Err(message));
            return;
        }
        self.report(node, now);
        // Read whole before the node is emptied: a read that fails half-way (a directory
        // operation of recovery refused by a full disk, say) must leave the dataset as it was,
        // not half loaded (the durability simulation found a later snapshot persisting such a
        // half). The copy is of the directory's size, for a debugging command.
        let mut payloads = Vec::new();
        let result = self.store.reload(|payload| {
            payloads.push(payload.to_vec());
            Ok(())
        });
        let result = result.and_then(|rec| {
            node.reload_begin(now);
            for p in &payloads {
                node.load(now, p)?;
            }
            Ok(rec)
        });
        let result = match result {
            Ok(rec) => {
                // No `Input::Loaded`: the node's sequence numbers are the files' already (every
                // record was framed before the reload), and its durable point must stay what
                // was reported (under `s3-durability sync` synced is not yet acknowledged, and
                // a write refused for a past disk fault waits for the next `Persisted`).
                self.log.push(format!(
                    "reloaded {} keys of the snapshot and {} records after it",
                    rec.snapshot_keys, rec.records
                ));
                self.log.extend(rec.notes);
                Ok(())
            }
            Err(e) => {
                self.log.push(format!("reload failed: {e}"));
                Err(e)
            }
        };
        node.reload_done(now, result);
    }

    /// Hands a snapshot just published to the uploader (or tells it the snapshot failed).
    fn snapshot_to_upload(&mut self, published: bool) {
        let Some(u) = self.upload.as_mut() else {
            return;
        };
        let Some((seq, name, manifest)) = self.store.published_snapshot().filter(|_| published)
        else {
            u.snapshot_failed();
            return;
        };
        match self.store.dir.read(&name) {
            Ok(data) => u.snapshot_published(
                seq,
                self.store.synced_seq(),
                data.into(),
                manifest.into_bytes().into(),
            ),
            Err(e) => {
                self.log
                    .push(format!("reading {name} back for the upload failed: {e}"));
                u.snapshot_failed();
            }
        }
    }

    /// Uploads to an object store from now on (see [`Uploader`]). Under [`AckMode::Sync`] the
    /// node must have been configured with `ack_after_upload`.
    pub fn attach_uploader(&mut self, uploader: Uploader, node: &mut Node) {
        node.set_upload_figures({
            let mut u = uploader;
            let f = u.figures();
            self.upload = Some(u);
            f
        });
    }

    /// The next object-store call to make, if one is due. First asks the node for a
    /// snapshot when the uploader needs a new base and none is being taken.
    pub fn poll_call(&mut self, node: &mut Node, now: Micros) -> Option<Call> {
        let u = self.upload.as_mut()?;
        if u.wants_snapshot() && !self.store.snapshot_in_progress() {
            node.request_snapshot();
        }
        let call = u.poll_call(now.0);
        node.set_upload_figures(u.figures());
        call
    }

    /// The answer to an object-store call; under `sync` it may release acknowledgements.
    pub fn call_done(
        &mut self,
        node: &mut Node,
        now: Micros,
        id: u64,
        result: Result<ObjectReply, String>,
    ) {
        let Some(u) = self.upload.as_mut() else {
            return;
        };
        if let Err(e) = &result {
            if u.figures().last_upload_ok {
                self.log.push(format!("object store call failed: {e}"));
            }
        } else if !u.figures().last_upload_ok {
            self.log.push("the object store answers again".to_string());
        }
        u.done(now.0, id, result);
        self.report(node, now);
    }

    /// When the uploader needs polling again without other news, in µs of node time.
    pub fn upload_timeout(&self) -> Option<u64> {
        self.upload.as_ref()?.poll_timeout()
    }

    /// True when an object-store call could be made now.
    pub fn upload_has_work(&self, now: Micros) -> bool {
        self.upload.as_ref().is_some_and(|u| u.has_work(now.0))
    }

    pub fn uploader(&self) -> Option<&Uploader> {
        self.upload.as_ref()
    }

    /// Makes every record durable and tells the node (or tells it why not): a sync begun and
    /// finished here ([`Self::begin_sync`], [`Self::finish_sync`]).
    pub fn sync(&mut self, node: &mut Node, now: Micros) {
        let ticket = self.begin_sync(node, now);
        self.sync_here(node, now, ticket);
    }

    /// Syncs a begun ticket's segment here and finishes it (the server's turn end syncs it
    /// elsewhere instead).
    fn sync_here(&mut self, node: &mut Node, now: Micros, ticket: Option<SyncTicket>) {
        if let Some(ticket) = ticket {
            let result = self.store.dir.sync(&ticket.segment);
            self.finish_sync(node, now, &ticket, result);
        }
    }

    /// Writes the records and names the segment a sync must make durable, for a driver that
    /// syncs it elsewhere (the server, outside its lock) and then calls
    /// [`Self::finish_sync`]. None: nothing to sync (the node has heard), or the write failed
    /// (the node has heard that too).
    pub fn begin_sync(&mut self, node: &mut Node, now: Micros) -> Option<SyncTicket> {
        self.sync_wanted = false;
        match self.store.sync_begin() {
            Ok(Some(ticket)) => Some(ticket),
            Ok(None) => {
                self.recovered();
                self.report(node, now);
                None
            }
            Err(e) => {
                self.failed(node, now, e);
                None
            }
        }
    }

    /// The sync of `ticket` ended with `result`; the node hears what became durable.
    pub fn finish_sync(
        &mut self,
        node: &mut Node,
        now: Micros,
        ticket: &SyncTicket,
        result: io::Result<()>,
    ) {
        match result {
            Ok(()) => {
                self.store.sync_done(ticket);
                self.recovered();
                self.report(node, now);
            }
            Err(e) => self.failed(node, now, e),
        }
    }

    fn recovered(&mut self) {
        if self.failing {
            self.log
                .push("the data directory accepts writes again".to_string());
            self.failing = false;
        }
    }

    /// End of a drained batch. Its records wait for the end of the turn ([`Self::end_turn`]),
    /// so a turn serving many connections makes one `write` rather than one per batch (a
    /// system call per request was most of what `everysec` cost at pipeline depth 1; Redis
    /// too writes its AOF buffer once per event loop iteration). Past
    /// [`WRITE_AT_BYTES`] they are written at once: the buffer stays bounded.
    pub fn flush(&mut self, node: &mut Node, now: Micros) {
        let buffered = self.store.buffered();
        if buffered == 0 {
            return;
        }
        // While the disk fails every drain retries at once, as before the deferral: a turn
        // end that keeps asking for a write that keeps failing would never end in drivers
        // that drain until no turn-end work is left (the simulator).
        if buffered < WRITE_AT_BYTES && !self.failing {
            self.write_wanted = true;
            return;
        }
        self.write(node, now);
    }

    /// Writes every framed record (one `write`); the turn's end does it, or a drain whose
    /// records passed [`WRITE_AT_BYTES`].
    pub fn write(&mut self, node: &mut Node, now: Micros) {
        self.write_wanted = false;
        if self.store.buffered() == 0 {
            return;
        }
        if let Err(e) = self.store.write() {
            self.failed(node, now, e);
        }
        self.report(node, now);
    }

    /// True when the node asked for a sync not yet begun (not merely a write).
    pub fn sync_requested(&self) -> bool {
        self.sync_wanted
    }

    /// True when the end of the turn has work: records to write or a sync the node asked for.
    pub fn turn_end_wanted(&self) -> bool {
        self.sync_wanted || self.write_wanted
    }

    /// The end of the event loop's turn: a sync if the node asked for one (it writes first),
    /// else one write of the records the turn's batches framed. A failed write is retried by
    /// the next drain's turn (the records stay buffered).
    pub fn end_turn(&mut self, node: &mut Node, now: Micros) {
        let ticket = self.begin_turn_end(node, now);
        self.sync_here(node, now, ticket);
    }

    /// [`Self::end_turn`] up to the sync itself, which the caller does on the returned
    /// ticket's segment and reports with [`Self::finish_sync`] (None: no sync to do).
    pub fn begin_turn_end(&mut self, node: &mut Node, now: Micros) -> Option<SyncTicket> {
        if self.sync_wanted {
            self.write_wanted = false;
            self.begin_sync(node, now)
        } else {
            if self.write_wanted {
                self.write(node, now);
            }
            None
        }
    }

    fn failed(&mut self, node: &mut Node, now: Micros, e: io::Error) {
        if !self.failing {
            self.log.push(format!(
                "writing the log failed: {e} ({} bytes kept for retry)",
                self.store.buffered()
            ));
        }
        self.failing = true;
        node.handle(
            now,
            Input::PersistError {
                message: e.to_string(),
            },
        );
    }

    /// Tells the node how far its records are durable: synced, and under `s3-durability
    /// sync` uploaded as well.
    fn report(&mut self, node: &mut Node, now: Micros) {
        let synced = self.store.synced_seq();
        let mut durable = synced;
        if let Some(u) = self.upload.as_mut() {
            u.synced(synced, now.0);
            // The planted bug acknowledges after the local fsync alone; the simulator's
            // bucket check must catch it.
            if u.mode() == AckMode::Sync && !cfg!(feature = "planted-upload-bug") {
                durable = durable.min(u.uploaded_seq());
            }
            node.set_upload_figures(u.figures());
        }
        if durable > self.reported {
            self.reported = durable;
            node.handle(now, Input::Persisted { seq: durable });
        }
    }

    /// Log lines since the last call.
    pub fn take_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.log)
    }

    /// The store, for figures and for taking the directory back (the simulator's crash).
    pub fn store(&self) -> &Store<D> {
        &self.store
    }

    pub fn dir_mut(&mut self) -> &mut D {
        &mut self.store.dir
    }

    pub fn into_dir(self) -> D {
        self.store.dir
    }

    /// SHUTDOWN or a signal: everything written and synced.
    pub fn close(&mut self, node: &mut Node, now: Micros) -> io::Result<()> {
        self.store.sync()?;
        self.report(node, now);
        Ok(())
    }
}

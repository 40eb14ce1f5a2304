//! The server's persistence driver: the node's persistence outputs written to the data
//! directory through `lattice-persist`, and recovery at start.
//!
//! Everything here runs with the host lock held, inside `Host::drain`: records are appended
//! with one `write` per drained batch, and a `Sync` from the node (every batch under
//! `appendfsync always`, once a second under `everysec`) is an `fdatasync` before the node
//! hears `Persisted` and releases the replies it held: group commit per event-loop batch, as
//! Redis does in `beforeSleep`.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use lattice_node::{Input, Micros, Node, Output};
use lattice_persist::{Dir, Kind, Store};

/// A local directory as a [`Dir`]: append handles kept open, `fdatasync` per sync, the
/// directory itself synced after files appear, disappear or are renamed.
pub struct LocalDir {
    path: PathBuf,
    open: BTreeMap<String, File>,
    /// Files created since the directory was last synced.
    dir_dirty: bool,
}

impl LocalDir {
    pub fn new(path: &Path) -> LocalDir {
        LocalDir {
            path: path.to_path_buf(),
            open: BTreeMap::new(),
            dir_dirty: false,
        }
    }

    fn file(&mut self, name: &str) -> io::Result<&mut File> {
        if !self.open.contains_key(name) {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.path.join(name))?;
            self.dir_dirty = true;
            self.open.insert(name.to_string(), f);
        }
        Ok(self.open.get_mut(name).expect("just opened"))
    }

    fn sync_dir(&mut self) -> io::Result<()> {
        File::open(&self.path)?.sync_all()?;
        self.dir_dirty = false;
        Ok(())
    }
}

impl Dir for LocalDir {
    fn list(&mut self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in fs::read_dir(&self.path)? {
            let e = e?;
            if e.file_type()?.is_file() {
                if let Some(n) = e.file_name().to_str() {
                    names.push(n.to_string());
                }
            }
        }
        Ok(names)
    }

    fn read(&mut self, name: &str) -> io::Result<Vec<u8>> {
        fs::read(self.path.join(name))
    }

    fn append(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        self.file(name)?.write_all(data)
    }

    fn sync(&mut self, name: &str) -> io::Result<()> {
        self.file(name)?.sync_data()?;
        if self.dir_dirty {
            self.sync_dir()?;
        }
        Ok(())
    }

    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        self.open.remove(name);
        OpenOptions::new()
            .write(true)
            .open(self.path.join(name))?
            .set_len(len)
    }

    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        self.open.remove(from);
        self.open.remove(to);
        fs::rename(self.path.join(from), self.path.join(to))?;
        self.sync_dir()
    }

    fn remove(&mut self, name: &str) -> io::Result<()> {
        self.open.remove(name);
        match fs::remove_file(self.path.join(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => {
                self.dir_dirty = true;
                Ok(())
            }
        }
    }
}

/// The figures recovery reports, for the start-up log line.
pub struct Loaded {
    pub keys: u64,
    pub records: u64,
    pub millis: u128,
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
}

impl<D: Dir> Persister<D> {
    /// Recovers `dir` into `node` (through [`Node::load`]), then turns persistence on.
    pub fn recover(dir: D, node: &mut Node, now: Micros) -> Result<(Persister<D>, Loaded), String> {
        let started = std::time::Instant::now();
        let mut keys = 0u64;
        let (store, rec) = Store::recover(dir, |payload| {
            keys += node.load(now, payload)?;
            Ok(())
        })?;
        for note in &rec.notes {
            tracing::warn!("recovery: {note}");
        }
        let (log_bytes, snapshot_bytes) = store.sizes();
        node.handle(
            now,
            Input::Loaded {
                last_seq: rec.last_seq,
                log_bytes,
                snapshot_bytes,
                keys: rec.snapshot_keys,
                records: rec.records,
            },
        );
        node.enable_persistence();
        let loaded = Loaded {
            keys: rec.snapshot_keys,
            records: rec.records,
            millis: started.elapsed().as_millis(),
        };
        let _ = keys;
        Ok((
            Persister {
                reported: rec.last_seq,
                store,
                failing: false,
                sync_wanted: false,
            },
            loaded,
        ))
    }

    /// Carries out one persistence output; anything else is handed back.
    pub fn output(&mut self, node: &mut Node, now: Micros, out: Output) -> Option<Output> {
        match out {
            Output::Append { seq, data, resume } => {
                let kind = if resume { Kind::Resume } else { Kind::Batch };
                self.store.append(kind, seq, &data);
            }
            Output::Sync { .. } => self.sync_wanted = true,
            Output::SnapshotBegin { seq } => self.store.snapshot_begin(seq),
            Output::SnapshotChunk { data } => self.store.snapshot_chunk(&data),
            Output::SnapshotEnd { keys } => {
                let result = self.store.snapshot_end(keys);
                match &result {
                    Ok(bytes) => tracing::info!("snapshot of {keys} keys written ({bytes} bytes)"),
                    Err(e) => tracing::error!("snapshot failed: {e}"),
                }
                node.handle(now, Input::SnapshotDone { result });
                self.report(node, now);
            }
            other => return Some(other),
        }
        None
    }

    /// Makes every record durable and tells the node (or tells it why not).
    pub fn sync(&mut self, node: &mut Node, now: Micros) {
        self.sync_wanted = false;
        match self.store.sync() {
            Ok(_) => {
                if self.failing {
                    tracing::info!("persistence: the data directory accepts writes again");
                    self.failing = false;
                }
                self.report(node, now);
            }
            Err(e) => self.failed(node, now, e),
        }
    }

    /// End of a drained batch: one write for its records.
    pub fn flush(&mut self, node: &mut Node, now: Micros) {
        if self.store.buffered() == 0 {
            return;
        }
        if let Err(e) = self.store.write() {
            self.failed(node, now, e);
        }
        self.report(node, now);
    }

    fn failed(&mut self, node: &mut Node, now: Micros, e: io::Error) {
        if !self.failing {
            tracing::error!(
                "persistence: writing the log failed: {e} ({} bytes kept for retry)",
                self.store.buffered()
            );
        }
        self.failing = true;
        node.handle(
            now,
            Input::PersistError {
                message: e.to_string(),
            },
        );
    }

    fn report(&mut self, node: &mut Node, now: Micros) {
        let synced = self.store.synced_seq();
        if synced > self.reported {
            self.reported = synced;
            node.handle(now, Input::Persisted { seq: synced });
        }
    }

    /// SHUTDOWN or a signal: everything written and synced.
    pub fn close(&mut self, node: &mut Node, now: Micros) -> io::Result<()> {
        self.store.sync()?;
        self.report(node, now);
        Ok(())
    }
}

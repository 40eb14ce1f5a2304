//! The server's data directory as a `lattice_persist::Dir`. The persistence driver itself
//! (`lattice_persist::Persister`) is shared with the simulator; it runs with the host lock
//! held, inside `Host::drain`: records are appended with one `write` per drained batch, and a
//! `Sync` from the node (every batch under `appendfsync always`, once a second under
//! `everysec`) becomes one `fdatasync` at the end of the event loop's turn, before the node
//! hears `Persisted` and releases the replies it held (group commit, as Redis does in
//! `beforeSleep`). The `fdatasync` runs on a duplicate handle with the host lock released
//! ([`LocalDir::handle_for_sync`], ARCHITECTURE §84), so other loops execute meanwhile.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use lattice_persist::Dir;

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

    /// A second handle on `name`, for syncing it without holding this directory (the event
    /// loop's sync outside the host lock). None when the directory itself has unsynced
    /// entries: [`Dir::sync`] must do that part, under the lock.
    pub fn handle_for_sync(&mut self, name: &str) -> io::Result<Option<File>> {
        if self.dir_dirty {
            return Ok(None);
        }
        self.file(name)?.try_clone().map(Some)
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

//! The files of one node: log segments, snapshots, the manifest; writing and recovery.

use std::io;

use crate::frame::{encode_frame, scan, Kind, ScanEnd};

/// A log segment is sealed and a new one started past this size.
pub const MAX_SEGMENT_BYTES: u64 = 64 << 20;
const MANIFEST: &str = "MANIFEST";
const MANIFEST_HEADER: &str = "lattice-manifest 1";

/// Where the files live. Names are plain file names (no directories). Implementations: a local
/// directory (the server), a simulated disk (the simulator); an object store later.
pub trait Dir {
    /// Names of the files present, in any order.
    fn list(&mut self) -> io::Result<Vec<String>>;
    fn read(&mut self, name: &str) -> io::Result<Vec<u8>>;
    /// Appends to `name`, creating it if missing. Not durable until [`Dir::sync`].
    fn append(&mut self, name: &str, data: &[u8]) -> io::Result<()>;
    /// Makes everything appended to `name` (and its existence) durable.
    fn sync(&mut self, name: &str) -> io::Result<()>;
    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()>;
    /// Durably replaces `to` with the synced file `from`.
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()>;
    fn remove(&mut self, name: &str) -> io::Result<()>;
}

pub(crate) fn segment_name(first_seq: u64) -> String {
    format!("log-{first_seq:020}.aof")
}

pub(crate) fn snapshot_name(seq: u64) -> String {
    format!("snap-{seq:020}.snap")
}

fn parse_seq(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    name.strip_prefix(prefix)?
        .strip_suffix(suffix)?
        .parse()
        .ok()
}

/// A sync in progress (see [`Store::sync_begin`]): the segment to sync and the sequence number
/// it makes durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncTicket {
    pub segment: String,
    pub seq: u64,
}

/// What recovery found.
#[derive(Debug, Default, Clone)]
pub struct Recovered {
    /// Sequence number of the last record applied (the log continues after it).
    pub last_seq: u64,
    /// Sequence number of the snapshot loaded (0: none).
    pub snapshot_seq: u64,
    pub snapshot_keys: u64,
    pub snapshot_bytes: u64,
    /// Log records applied after the snapshot.
    pub records: u64,
    pub log_bytes: u64,
    /// Problems found and repaired, for the log: torn tails cut, leftovers removed.
    pub notes: Vec<String>,
}

struct SnapshotWriter {
    seq: u64,
    tmp: String,
    bytes: u64,
    failed: Option<String>,
}

/// Writes a node's files: records are framed into a buffer, [`Store::write`] appends them to
/// the current segment, [`Store::sync`] makes them durable.
pub struct Store<D: Dir> {
    pub dir: D,
    segment: Option<String>,
    segment_bytes: u64,
    /// Bytes of sealed segments (the current one is `segment_bytes`).
    sealed_bytes: u64,
    /// Framed records not yet appended (a failed write keeps them here for the retry).
    buf: Vec<u8>,
    /// Last sequence number framed, appended, made durable.
    framed_seq: u64,
    written_seq: u64,
    synced_seq: u64,
    /// Sealed segments not yet synced (rotation syncs them first, so normally none).
    snapshot: Option<SnapshotWriter>,
    snapshot_bytes: u64,
    /// The published snapshot's sequence number (0: none).
    snapshot_seq: u64,
    max_segment_bytes: u64,
}

/// The manifest's text naming snapshot `name` taken at record `seq`, checksummed.
pub(crate) fn manifest_text(name: &str, seq: u64) -> String {
    let mut text = format!("{MANIFEST_HEADER}\nsnapshot {name}\nseq {seq}\n");
    let crc = crc32fast::hash(text.as_bytes());
    text.push_str(&format!("crc32 {crc:08x}\n"));
    text
}

impl<D: Dir> Store<D> {
    /// Loads the current snapshot, then every log record after it, handing each payload (a
    /// snapshot chunk or a batch, in order) to `apply`. A torn tail of the last segment is cut
    /// and noted; corruption anywhere else is an error naming the file and offset.
    pub fn recover(
        mut dir: D,
        apply: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(Store<D>, Recovered), String> {
        let rec = read_back(&mut dir, apply)?;
        Ok((Store::after_recovery(dir, &rec), rec))
    }

    /// DEBUG RELOAD and DEBUG LOADAOF: everything written and synced, then the files read
    /// back through the same recovery as at start-up. Refused while a snapshot is being
    /// written (the node never asks then).
    pub fn reload(
        &mut self,
        apply: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<Recovered, String> {
        if self.snapshot.is_some() {
            return Err("a snapshot is being written".into());
        }
        self.sync().map_err(|e| format!("syncing the log: {e}"))?;
        let rec = read_back(&mut self.dir, apply)?;
        self.reset(&rec);
        Ok(rec)
    }
}

/// See [`Store::recover`]: the snapshot the manifest names, then the log after it, handed to
/// `apply`; leftovers removed and a torn tail cut.
fn read_back<D: Dir>(
    dir: &mut D,
    mut apply: impl FnMut(&[u8]) -> Result<(), String>,
) -> Result<Recovered, String> {
    {
        let io = |what: &str, e: io::Error| format!("{what}: {e}");
        let names = dir
            .list()
            .map_err(|e| io("listing the data directory", e))?;
        let mut rec = Recovered::default();
        for n in names.iter().filter(|n| n.ends_with(".tmp")) {
            // An interrupted snapshot: never referenced by the manifest.
            dir.remove(n).map_err(|e| io(n, e))?;
            rec.notes.push(format!("removed unfinished snapshot {n}"));
        }
        // The manifest names the snapshot.
        if names.iter().any(|n| n == MANIFEST) {
            let text = dir.read(MANIFEST).map_err(|e| io(MANIFEST, e))?;
            let (snap, seq) = parse_manifest(&text)?;
            let data = dir.read(&snap).map_err(|e| io(&snap, e))?;
            rec.snapshot_bytes = data.len() as u64;
            rec.snapshot_keys = load_snapshot(&snap, &data, seq, &mut apply)?;
            rec.snapshot_seq = seq;
            rec.last_seq = seq;
        }
        let mut segments: Vec<(u64, String)> = names
            .iter()
            .filter_map(|n| parse_seq(n, "log-", ".aof").map(|s| (s, n.clone())))
            .collect();
        segments.sort();
        // Segments wholly before the snapshot are leftovers of a compaction cut short.
        while segments.len() > 1 && segments[1].0 <= rec.snapshot_seq + 1 {
            let (_, n) = segments.remove(0);
            dir.remove(&n).map_err(|e| io(&n, e))?;
            rec.notes
                .push(format!("removed {n}, older than the snapshot"));
        }
        let mut stop_after: Option<usize> = None;
        let count = segments.len();
        for (i, (_, name)) in segments.iter().enumerate() {
            if stop_after.is_some() {
                dir.remove(name).map_err(|e| io(name, e))?;
                rec.notes
                    .push(format!("removed {name}, after a resume point"));
                continue;
            }
            let data = dir.read(name).map_err(|e| io(name, e))?;
            let last = i + 1 == count;
            let (frames, end) = scan(&data, last);
            let mut keep = data.len();
            for f in &frames {
                if f.seq <= rec.last_seq && f.seq <= rec.snapshot_seq {
                    continue;
                }
                if f.seq != rec.last_seq + 1 {
                    return Err(format!(
                        "{name}: record at offset {} has sequence number {}, expected {} (records are missing)",
                        f.offset,
                        f.seq,
                        rec.last_seq + 1
                    ));
                }
                match f.kind {
                    Kind::Batch => {
                        apply(f.payload).map_err(|e| {
                            format!(
                                "{name}: record at offset {} cannot be applied: {e}",
                                f.offset
                            )
                        })?;
                        rec.records += 1;
                        rec.last_seq = f.seq;
                    }
                    Kind::Resume => {
                        // Logging was off before this point and its snapshot never finished:
                        // the state here is the one of the last record before it.
                        keep = f.offset;
                        stop_after = Some(i);
                        rec.notes.push(format!(
                            "{name}: log resumes at offset {} after a pause with no snapshot taken since; later records ignored",
                            f.offset
                        ));
                        break;
                    }
                    other => {
                        return Err(format!(
                            "{name}: unexpected {other:?} frame at offset {}",
                            f.offset
                        ))
                    }
                }
            }
            match end {
                ScanEnd::Clean => {}
                ScanEnd::Torn { offset, reason } => {
                    keep = keep.min(offset);
                    rec.notes.push(format!(
                        "{name}: torn tail cut at offset {offset} ({} bytes: {reason})",
                        data.len() - offset
                    ));
                }
                ScanEnd::Corrupt { offset, reason } if stop_after.is_none() => {
                    return Err(format!(
                        "{name}: corrupt record at offset {offset}: {reason}; refusing to load a partial log (move the file away to start from what precedes it)"
                    ));
                }
                ScanEnd::Corrupt { .. } => {}
            }
            if keep < data.len() {
                dir.truncate(name, keep as u64).map_err(|e| io(name, e))?;
                dir.sync(name).map_err(|e| io(name, e))?;
            }
            rec.log_bytes += keep as u64;
        }
        Ok(rec)
    }
}

impl<D: Dir> Store<D> {
    /// The store over `dir` once recovery read `rec` from it: the next record starts a new
    /// segment.
    fn after_recovery(dir: D, rec: &Recovered) -> Store<D> {
        let mut store = Store {
            dir,
            segment: None,
            segment_bytes: 0,
            sealed_bytes: 0,
            buf: Vec::new(),
            framed_seq: 0,
            written_seq: 0,
            synced_seq: 0,
            snapshot: None,
            snapshot_bytes: 0,
            snapshot_seq: 0,
            max_segment_bytes: MAX_SEGMENT_BYTES,
        };
        store.reset(rec);
        store
    }

    /// Positions after recovery read `rec`: the files hold records up to `rec.last_seq`, all
    /// durable, and the next record starts a new segment.
    fn reset(&mut self, rec: &Recovered) {
        self.segment = None;
        self.segment_bytes = 0;
        self.sealed_bytes = rec.log_bytes;
        self.buf.clear();
        self.framed_seq = rec.last_seq;
        self.written_seq = rec.last_seq;
        self.synced_seq = rec.last_seq;
        self.snapshot = None;
        self.snapshot_bytes = rec.snapshot_bytes;
        self.snapshot_seq = rec.snapshot_seq;
    }

    /// Smaller segments, so tests cross segment boundaries.
    pub fn set_max_segment_bytes(&mut self, n: u64) {
        self.max_segment_bytes = n.max(1);
    }

    /// Frames record `seq` (the next after the last one) into the write buffer.
    pub fn append(&mut self, kind: Kind, seq: u64, payload: &[u8]) {
        debug_assert!(seq > self.framed_seq, "records go in sequence order");
        encode_frame(kind, seq, payload, &mut self.buf);
        self.framed_seq = seq;
    }

    /// Adds record `seq` (the next after the last one), framed already by the node
    /// (`Output::Append`), to the write buffer.
    pub fn append_frame(&mut self, seq: u64, frame: &[u8]) {
        debug_assert!(seq > self.framed_seq, "records go in sequence order");
        debug_assert_eq!(
            frame.get(10..18),
            Some(&seq.to_le_bytes()[..]),
            "the frame is record {seq}'s"
        );
        self.buf.extend_from_slice(frame);
        self.framed_seq = seq;
    }

    /// Bytes framed but not yet written (kept across failed writes).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    pub fn written_seq(&self) -> u64 {
        self.written_seq
    }

    pub fn synced_seq(&self) -> u64 {
        self.synced_seq
    }

    pub fn framed_seq(&self) -> u64 {
        self.framed_seq
    }

    /// Bytes of log (all segments) and of the current snapshot.
    pub fn sizes(&self) -> (u64, u64) {
        (self.sealed_bytes + self.segment_bytes, self.snapshot_bytes)
    }

    /// The segment records are appended to now (created on the first write).
    pub fn current_segment(&self) -> Option<&str> {
        self.segment.as_deref()
    }

    /// Appends the buffered records to the current segment, sealing it first when full. On
    /// an error the records stay buffered for the next attempt.
    pub fn write(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.segment_bytes >= self.max_segment_bytes {
            self.rotate()?;
        }
        let name = match &self.segment {
            Some(n) => n.clone(),
            None => {
                let n = segment_name(self.written_seq + 1);
                self.segment = Some(n.clone());
                self.segment_bytes = 0;
                n
            }
        };
        if let Err(e) = self.dir.append(&name, &self.buf) {
            // A write that failed half-way (disk full) must not leave half a batch before the
            // retry appends all of it again.
            let _ = self.dir.truncate(&name, self.segment_bytes);
            return Err(e);
        }
        self.segment_bytes += self.buf.len() as u64;
        self.buf.clear();
        self.written_seq = self.framed_seq;
        Ok(())
    }

    /// Writes what is buffered and makes it durable; returns the last durable sequence number.
    pub fn sync(&mut self) -> io::Result<u64> {
        if let Some(ticket) = self.sync_begin()? {
            self.dir.sync(&ticket.segment)?;
            self.sync_done(&ticket);
        }
        Ok(self.synced_seq)
    }

    /// The first half of [`Store::sync`]: writes what is buffered and names what is still to
    /// be made durable (None: nothing is). A driver may then sync the named segment wherever
    /// it likes (the server does it outside its lock, on a duplicate handle, while records
    /// keep being appended) and report with [`Store::sync_done`]. A sync covers everything
    /// written to the file before it began, so the ticket's sequence number is safe to
    /// declare durable even if later records were appended meanwhile.
    pub fn sync_begin(&mut self) -> io::Result<Option<SyncTicket>> {
        self.write()?;
        if self.synced_seq >= self.written_seq {
            return Ok(None);
        }
        match self.segment.clone() {
            Some(segment) => Ok(Some(SyncTicket {
                segment,
                seq: self.written_seq,
            })),
            None => {
                // Rotated since the write: the rotation synced the segment it sealed.
                self.synced_seq = self.written_seq;
                Ok(None)
            }
        }
    }

    /// The ticket's segment was synced: its records are durable. Tickets may complete out of
    /// order (two loops syncing at once); the durable point only rises.
    pub fn sync_done(&mut self, ticket: &SyncTicket) {
        self.synced_seq = self.synced_seq.max(ticket.seq);
    }

    /// Seals the current segment (synced first: a later segment must never be durable while
    /// an earlier one is not) and starts the next one at the next record.
    fn rotate(&mut self) -> io::Result<()> {
        if let Some(name) = self.segment.clone() {
            if self.synced_seq < self.written_seq {
                self.dir.sync(&name)?;
                self.synced_seq = self.written_seq;
            }
            self.sealed_bytes += self.segment_bytes;
        }
        self.segment = None;
        self.segment_bytes = 0;
        Ok(())
    }

    /// Starts a snapshot of the state from record `seq` on: the node sends its key states
    /// slot by slot while it keeps serving, so some keys are captured after later changes;
    /// replaying the records after `seq` over the snapshot gives the exact state (records
    /// carry whole key states, so applying one twice is harmless). The log is rotated so the
    /// records after `seq` start a new segment, and the older ones can go once it is done.
    pub fn snapshot_begin(&mut self, seq: u64) {
        let tmp = format!("{}.tmp", snapshot_name(seq));
        let mut w = SnapshotWriter {
            seq,
            tmp,
            bytes: 0,
            failed: None,
        };
        let result = self.sync().and_then(|_| {
            self.rotate()?;
            let _ = self.dir.remove(&w.tmp);
            let mut frame = Vec::new();
            encode_frame(Kind::SnapBegin, seq, &[], &mut frame);
            self.dir.append(&w.tmp, &frame)?;
            w.bytes += frame.len() as u64;
            Ok(())
        });
        if let Err(e) = result {
            w.failed = Some(e.to_string());
        }
        self.snapshot = Some(w);
    }

    /// Appends one chunk of key states to the snapshot being written.
    pub fn snapshot_chunk(&mut self, payload: &[u8]) {
        let Some(w) = self.snapshot.as_mut() else {
            return;
        };
        if w.failed.is_some() {
            return;
        }
        let mut frame = Vec::with_capacity(payload.len() + 32);
        encode_frame(Kind::SnapChunk, w.seq, payload, &mut frame);
        match self.dir.append(&w.tmp, &frame) {
            Ok(()) => w.bytes += frame.len() as u64,
            Err(e) => w.failed = Some(e.to_string()),
        }
    }

    /// Finishes the snapshot: synced, published by the manifest, then the log segments and
    /// snapshot it replaces are removed. Returns its size in bytes.
    pub fn snapshot_end(&mut self, keys: u64) -> Result<u64, String> {
        let Some(mut w) = self.snapshot.take() else {
            return Err("no snapshot in progress".into());
        };
        let result = (|| -> Result<u64, String> {
            if let Some(e) = w.failed.take() {
                return Err(e);
            }
            // The chunks hold key states as late as now: the records up to now must be
            // durable before the snapshot is, or a crash could recover states from the
            // snapshot newer than the log that leads to them (not a prefix of the history).
            self.sync().map_err(|e| e.to_string())?;
            let mut frame = Vec::new();
            encode_frame(Kind::SnapEnd, w.seq, &keys.to_le_bytes(), &mut frame);
            let e = |e: io::Error| e.to_string();
            self.dir.append(&w.tmp, &frame).map_err(e)?;
            w.bytes += frame.len() as u64;
            self.dir.sync(&w.tmp).map_err(e)?;
            let name = snapshot_name(w.seq);
            self.dir.rename(&w.tmp, &name).map_err(e)?;
            let text = manifest_text(&name, w.seq);
            let tmp = format!("{MANIFEST}.tmp");
            let _ = self.dir.remove(&tmp);
            self.dir.append(&tmp, text.as_bytes()).map_err(e)?;
            self.dir.sync(&tmp).map_err(e)?;
            self.dir.rename(&tmp, MANIFEST).map_err(e)?;
            // Now the snapshot is current: drop what it replaces.
            let names = self.dir.list().map_err(e)?;
            let current = self.segment.clone();
            for n in names {
                let old_segment = parse_seq(&n, "log-", ".aof").is_some_and(|s| s <= w.seq)
                    && Some(&n) != current.as_ref();
                let old_snapshot = parse_seq(&n, "snap-", ".snap").is_some_and(|s| s < w.seq);
                if old_segment || old_snapshot {
                    let _ = self.dir.remove(&n);
                }
            }
            Ok(w.bytes)
        })();
        match result {
            Ok(bytes) => {
                // Segments sealed before the snapshot began are gone.
                self.sealed_bytes = 0;
                self.snapshot_bytes = bytes;
                self.snapshot_seq = w.seq;
                Ok(bytes)
            }
            Err(e) => {
                let _ = self.dir.remove(&w.tmp);
                Err(e)
            }
        }
    }

    /// The published snapshot: its sequence number, file name and manifest text (None
    /// before the first).
    pub fn published_snapshot(&self) -> Option<(u64, String, String)> {
        let name = snapshot_name(self.snapshot_seq);
        (self.snapshot_bytes > 0).then(|| {
            (
                self.snapshot_seq,
                name.clone(),
                manifest_text(&name, self.snapshot_seq),
            )
        })
    }

    /// True while a snapshot is being written.
    pub fn snapshot_in_progress(&self) -> bool {
        self.snapshot.is_some()
    }
}

pub(crate) fn parse_manifest(text: &[u8]) -> Result<(String, u64), String> {
    let bad = |why: &str| format!("{MANIFEST}: {why}");
    let text = std::str::from_utf8(text).map_err(|_| bad("not text"))?;
    let Some(cut) = text.find("crc32 ") else {
        return Err(bad("no checksum line (damaged)"));
    };
    let (body, crc_line) = text.split_at(cut);
    let want = u32::from_str_radix(crc_line["crc32 ".len()..].trim(), 16)
        .map_err(|_| bad("unreadable checksum"))?;
    if crc32fast::hash(body.as_bytes()) != want {
        return Err(bad("checksum mismatch (damaged)"));
    }
    let mut lines = body.lines();
    if lines.next() != Some(MANIFEST_HEADER) {
        return Err(bad("unknown format version"));
    }
    let snap = lines
        .next()
        .and_then(|l| l.strip_prefix("snapshot "))
        .ok_or_else(|| bad("no snapshot line"))?;
    let seq = lines
        .next()
        .and_then(|l| l.strip_prefix("seq "))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no seq line"))?;
    if snap.contains('/') {
        return Err(bad("snapshot name is not a plain file name"));
    }
    Ok((snap.to_string(), seq))
}

fn load_snapshot(
    name: &str,
    data: &[u8],
    seq: u64,
    apply: &mut impl FnMut(&[u8]) -> Result<(), String>,
) -> Result<u64, String> {
    let (frames, end) = scan(data, false);
    if let ScanEnd::Corrupt { offset, reason } | ScanEnd::Torn { offset, reason } = end {
        return Err(format!("{name}: corrupt at offset {offset}: {reason}"));
    }
    let mut frames = frames.into_iter();
    match frames.next() {
        Some(f) if f.kind == Kind::SnapBegin && f.seq == seq => {}
        _ => {
            return Err(format!(
                "{name}: does not begin with the snapshot header for seq {seq}"
            ))
        }
    }
    for f in frames {
        match f.kind {
            Kind::SnapChunk => apply(f.payload).map_err(|e| {
                format!(
                    "{name}: chunk at offset {} cannot be applied: {e}",
                    f.offset
                )
            })?,
            Kind::SnapEnd if f.end == data.len() && f.payload.len() == 8 => {
                return Ok(u64::from_le_bytes(f.payload.try_into().expect("8 bytes")));
            }
            _ => return Err(format!("{name}: unexpected frame at offset {}", f.offset)),
        }
    }
    Err(format!("{name}: incomplete (no end frame)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A directory in memory where everything is durable at once.
    #[derive(Default)]
    struct MemDir(BTreeMap<String, Vec<u8>>);

    impl Dir for &mut MemDir {
        fn list(&mut self) -> io::Result<Vec<String>> {
            Ok(self.0.keys().cloned().collect())
        }
        fn read(&mut self, name: &str) -> io::Result<Vec<u8>> {
            self.0
                .get(name)
                .cloned()
                .ok_or(io::ErrorKind::NotFound.into())
        }
        fn append(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
            self.0
                .entry(name.into())
                .or_default()
                .extend_from_slice(data);
            Ok(())
        }
        fn sync(&mut self, _: &str) -> io::Result<()> {
            Ok(())
        }
        fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
            if let Some(f) = self.0.get_mut(name) {
                f.truncate(len as usize);
            }
            Ok(())
        }
        fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
            let f = self
                .0
                .remove(from)
                .ok_or(io::Error::from(io::ErrorKind::NotFound))?;
            self.0.insert(to.into(), f);
            Ok(())
        }
        fn remove(&mut self, name: &str) -> io::Result<()> {
            self.0.remove(name);
            Ok(())
        }
    }

    fn recover(d: &mut MemDir) -> Result<(Vec<Vec<u8>>, Recovered), String> {
        let mut seen = Vec::new();
        let (_, r) = Store::recover(d, |p| {
            seen.push(p.to_vec());
            Ok(())
        })?;
        Ok((seen, r))
    }

    #[test]
    fn log_snapshot_and_recovery() {
        let mut d = MemDir::default();
        {
            let (mut s, _) = Store::recover(&mut d, |_| Ok(())).unwrap();
            s.set_max_segment_bytes(40);
            for seq in 1..=5 {
                s.append(Kind::Batch, seq, format!("r{seq}").as_bytes());
                s.sync().unwrap();
            }
            s.snapshot_begin(5);
            s.append(Kind::Batch, 6, b"r6");
            s.write().unwrap();
            s.snapshot_chunk(b"c1");
            s.snapshot_chunk(b"c2");
            s.append(Kind::Batch, 7, b"r7");
            s.snapshot_end(2).unwrap();
            s.sync().unwrap();
        }
        let (seen, r) = recover(&mut d).unwrap();
        assert_eq!(
            seen,
            vec![
                b"c1".to_vec(),
                b"c2".to_vec(),
                b"r6".to_vec(),
                b"r7".to_vec()
            ]
        );
        assert_eq!((r.last_seq, r.snapshot_seq, r.snapshot_keys), (7, 5, 2));
        assert!(!d.0.keys().any(|n| n == "log-00000000000000000001.aof"));
        // Continue writing after recovery; then tear the tail.
        {
            let (mut s, _) = Store::recover(&mut d, |_| Ok(())).unwrap();
            s.append(Kind::Batch, 8, b"r8");
            s.sync().unwrap();
        }
        let last = d.0.keys().rfind(|n| n.starts_with("log-")).unwrap().clone();
        let f = d.0.get_mut(&last).unwrap();
        let n = f.len();
        f.truncate(n - 1);
        let (seen, r) = recover(&mut d).unwrap();
        assert_eq!(seen.last().unwrap(), b"r7");
        assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
        // Corruption in a sealed segment is an error naming it.
        let first = d.0.keys().find(|n| n.starts_with("log-")).unwrap().clone();
        d.0.get_mut(&first).unwrap()[12] ^= 1;
        let e = recover(&mut d).unwrap_err();
        assert!(e.contains(&first) && e.contains("offset 0"), "{e}");
    }
}

//! What goes to the object store, and when: a pure state machine the drivers run beside the
//! [`crate::Store`]. It emits [`Call`]s (put, list, delete) and hears their results; the server
//! carries them out with an S3 client, the simulator on a simulated bucket that is slow, fails
//! and times out.
//!
//! The bucket holds the same files as a data directory, under the configured prefix:
//! - `log-<first seq>-<last seq>.aof`: a *piece*, the frames of records `first..=last`
//!   exactly as the local log holds them (checksums and all). Only records the local log has
//!   already synced are uploaded, so the bucket is always a prefix of the local durable history
//!   and a crash can never leave the two disagreeing about a record.
//! - `snap-<seq>.snap`: every snapshot the node publishes locally, uploaded whole.
//! - `MANIFEST`: names the snapshot the pieces continue, written after that snapshot is up.
//!
//! What the bucket can restore is the manifest's snapshot plus the chain of pieces that follows
//! it without a gap ([`plan_restore`]); the last record of that chain is the *uploaded seq*.
//! Under [`AckMode::Sync`] the driver reports a record persisted only once it is uploaded too.
//!
//! Bounds: one call in flight; the bytes not yet in the bucket (`lag`) never exceed
//! `max_backlog_bytes`. Past it the backlog is dropped and the uploader waits for a fresh
//! snapshot (which it asks the node for) to start a new chain from: the bucket keeps its older
//! restorable prefix meanwhile, and memory stays bounded however long the store is down.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use crate::frame::{encode_frame, Kind};

/// The object holding the bucket's manifest (same text as the local `MANIFEST`).
pub const MANIFEST_KEY: &str = "MANIFEST";

/// When a write is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckMode {
    /// After the local fsync; the upload follows, its lag bounded and shown in INFO.
    Async,
    /// After the upload (group commit: one piece per round trip for whatever waited).
    Sync,
}

impl AckMode {
    pub fn name(self) -> &'static str {
        match self {
            AckMode::Async => "async",
            AckMode::Sync => "sync",
        }
    }
}

/// The uploader's knobs.
#[derive(Clone, Debug)]
pub struct UploadConfig {
    pub mode: AckMode,
    /// Under `Async`, a piece is cut once this many synced bytes wait...
    pub piece_bytes: u64,
    /// ... or once the oldest of them has waited this long.
    pub piece_interval_us: u64,
    /// Bound on the bytes not yet in the bucket; past it the backlog is replaced by a snapshot.
    pub max_backlog_bytes: u64,
    /// A call not answered in this time (plus [`UploadConfig::timeout_us_per_mib`] per MiB
    /// sent) counts as failed; its late answer is ignored.
    pub call_timeout_us: u64,
    pub timeout_us_per_mib: u64,
    /// Retries after a failure wait this long, doubling up to `retry_max_us`.
    pub retry_min_us: u64,
    pub retry_max_us: u64,
}

impl Default for UploadConfig {
    fn default() -> Self {
        UploadConfig {
            mode: AckMode::Async,
            piece_bytes: 4 << 20,
            piece_interval_us: 1_000_000,
            max_backlog_bytes: 256 << 20,
            call_timeout_us: 10_000_000,
            timeout_us_per_mib: 1_000_000,
            retry_min_us: 100_000,
            retry_max_us: 5_000_000,
        }
    }
}

/// One object-store operation. Keys are relative to the configured prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectRequest {
    Put {
        key: String,
        data: Bytes,
    },
    /// Every key under the prefix.
    List,
    Delete {
        keys: Vec<String>,
    },
}

/// A successful answer: `List` gives keys, the others nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectReply {
    Done,
    Keys(Vec<String>),
}

/// A request to carry out, answered with [`Uploader::done`] and the same id.
#[derive(Clone, Debug)]
pub struct Call {
    pub id: u64,
    pub request: ObjectRequest,
    /// The driver may give up after this long; the uploader does at the same time.
    pub timeout_us: u64,
}

/// What the bucket held when the uploader started.
#[derive(Clone, Debug)]
pub enum Start {
    /// The local directory was restored from the bucket (or both were empty): the bucket's
    /// chain ends at the last record loaded, and uploading continues from the next.
    Restored { base_seq: u64, last_seq: u64 },
    /// The node started from its own directory: what the bucket holds is unknown, so a
    /// snapshot is taken and a new chain starts from it.
    LocalData,
}

fn piece_key(first: u64, last: u64) -> String {
    format!("log-{first:020}-{last:020}.aof")
}

fn snapshot_key(seq: u64) -> String {
    crate::store::snapshot_name(seq)
}

/// A piece's record range from its key.
pub fn parse_piece_key(key: &str) -> Option<(u64, u64)> {
    let (first, last) = key
        .strip_prefix("log-")?
        .strip_suffix(".aof")?
        .split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

fn parse_snapshot_key(key: &str) -> Option<u64> {
    key.strip_prefix("snap-")?
        .strip_suffix(".snap")?
        .parse()
        .ok()
}

#[derive(Debug)]
enum Job {
    List,
    Piece {
        first: u64,
        last: u64,
        data: Bytes,
    },
    Snapshot {
        seq: u64,
        data: Bytes,
    },
    /// Published only if the pieces after `seq` reach `through`: the snapshot holds states
    /// as late as that record, so without them a restore would not be a state of the history.
    Manifest {
        seq: u64,
        through: u64,
        text: Bytes,
    },
    Delete {
        keys: Vec<String>,
    },
}

impl Job {
    fn request(&self) -> ObjectRequest {
        match self {
            Job::List => ObjectRequest::List,
            Job::Piece { first, last, data } => ObjectRequest::Put {
                key: piece_key(*first, *last),
                data: data.clone(),
            },
            Job::Snapshot { seq, data } => ObjectRequest::Put {
                key: snapshot_key(*seq),
                data: data.clone(),
            },
            Job::Manifest { text, .. } => ObjectRequest::Put {
                key: MANIFEST_KEY.to_string(),
                data: text.clone(),
            },
            Job::Delete { keys } => ObjectRequest::Delete { keys: keys.clone() },
        }
    }

    fn piece_bytes(&self) -> u64 {
        match self {
            Job::Piece { data, .. } => data.len() as u64,
            _ => 0,
        }
    }

    fn sent_bytes(&self) -> u64 {
        match self {
            Job::Piece { data, .. }
            | Job::Snapshot { data, .. }
            | Job::Manifest { text: data, .. } => data.len() as u64,
            _ => 0,
        }
    }
}

/// Deletes go out in batches of at most this many keys (S3's DeleteObjects limit).
const DELETE_BATCH: usize = 1000;

/// The upload state machine (see the module doc).
pub struct Uploader {
    cfg: UploadConfig,
    /// Frames of the records collected and not yet cut into a piece, from `pending_first` on;
    /// `ends` holds each record's sequence number and end offset.
    pending: Vec<u8>,
    ends: VecDeque<(u64, usize)>,
    pending_first: u64,
    /// Bytes (and last record) of `pending` the local log has synced.
    ready_len: usize,
    ready_last: u64,
    ready_since_us: Option<u64>,
    /// Records are collected (false after a backlog reset, until a snapshot begins).
    collecting: bool,
    /// A snapshot is wanted as a new base for the bucket's chain, and the one begun for it.
    needs_snapshot: bool,
    awaiting_base: Option<u64>,
    jobs: VecDeque<Job>,
    /// Bytes of the pieces in `jobs`.
    queued_piece_bytes: u64,
    in_flight: Option<(u64, u64)>,
    next_id: u64,
    retry_at_us: Option<u64>,
    backoff_us: u64,
    /// The manifest's snapshot in the bucket, when known, and the pieces uploaded after it.
    base: Option<u64>,
    chain: BTreeMap<u64, u64>,
    /// Objects known to be in the bucket, for removing what a new manifest replaces.
    known_pieces: BTreeSet<(u64, u64)>,
    known_snapshots: BTreeSet<u64>,
    figures: lattice_node::persist::UploadFigures,
}

impl Uploader {
    pub fn new(cfg: UploadConfig, start: Start) -> Uploader {
        let (base, collecting, first) = match start {
            Start::Restored { base_seq, last_seq } => (Some(base_seq), true, last_seq + 1),
            Start::LocalData => (None, false, 0),
        };
        let mut chain = BTreeMap::new();
        if let Start::Restored { base_seq, last_seq } = start {
            if last_seq > base_seq {
                // What was restored is a chain already; its pieces' boundaries do not matter.
                chain.insert(base_seq + 1, last_seq);
            }
        }
        let figures = lattice_node::persist::UploadFigures {
            mode: cfg.mode.name(),
            last_upload_ok: true,
            uploaded_seq: base.map_or(0, |_| first.saturating_sub(1)),
            ..Default::default()
        };
        let backoff_us = cfg.retry_min_us;
        Uploader {
            cfg,
            pending: Vec::new(),
            ends: VecDeque::new(),
            pending_first: first,
            ready_len: 0,
            ready_last: 0,
            ready_since_us: None,
            collecting,
            needs_snapshot: !collecting,
            awaiting_base: None,
            jobs: VecDeque::from([Job::List]),
            queued_piece_bytes: 0,
            in_flight: None,
            next_id: 1,
            retry_at_us: None,
            backoff_us,
            base,
            chain,
            known_pieces: BTreeSet::new(),
            known_snapshots: BTreeSet::new(),
            figures,
        }
    }

    pub fn mode(&self) -> AckMode {
        self.cfg.mode
    }

    /// A record the store framed (in sequence order).
    pub fn record(&mut self, kind: Kind, seq: u64, payload: &[u8]) {
        if !self.collecting {
            return;
        }
        if self.ends.is_empty() && self.pending.is_empty() {
            self.pending_first = seq;
        }
        debug_assert!(self.ends.back().is_none_or(|e| e.0 + 1 == seq));
        encode_frame(kind, seq, payload, &mut self.pending);
        self.ends.push_back((seq, self.pending.len()));
        if self.lag_bytes() > self.cfg.max_backlog_bytes {
            self.reset_backlog();
        }
    }

    /// The local log is durable up to `seq`: those records may go to the bucket.
    pub fn synced(&mut self, seq: u64, now_us: u64) {
        let before = self.ready_len;
        while let Some(&(s, end)) = self.ends.front() {
            if s > seq {
                break;
            }
            self.ends.pop_front();
            self.ready_len = end;
            self.ready_last = s;
        }
        if self.ready_len > before && self.ready_since_us.is_none() {
            self.ready_since_us = Some(now_us);
        }
    }

    /// The node began a snapshot of the state at record `seq`.
    pub fn snapshot_begin(&mut self, seq: u64) {
        if !self.collecting {
            // A fresh base after a reset: the chain restarts after this snapshot.
            self.collecting = true;
            self.pending.clear();
            self.ends.clear();
            self.ready_len = 0;
            self.ready_since_us = None;
            self.pending_first = seq + 1;
        }
        if self.needs_snapshot {
            self.needs_snapshot = false;
            self.awaiting_base = Some(seq);
        }
    }

    /// A snapshot failed locally: if the bucket waited for it as a base, another is wanted.
    pub fn snapshot_failed(&mut self) {
        if self.awaiting_base.take().is_some() {
            self.needs_snapshot = true;
        }
    }

    /// The node published snapshot `seq` locally (`data` is its file, `manifest` the manifest
    /// text naming it), with the local log synced through `through_seq`: the records waiting
    /// are cut into a piece, then the snapshot goes up, then the manifest. A newer snapshot
    /// replaces one still waiting, so at most one is held.
    pub fn snapshot_published(&mut self, seq: u64, through_seq: u64, data: Bytes, manifest: Bytes) {
        self.synced(through_seq, 0);
        self.cut_now();
        let in_flight = self.in_flight.is_some();
        let mut i = 0;
        self.jobs.retain(|j| {
            let first = i == 0;
            i += 1;
            (first && in_flight) || !matches!(j, Job::Snapshot { .. } | Job::Manifest { .. })
        });
        self.jobs.push_back(Job::Snapshot { seq, data });
        self.jobs.push_back(Job::Manifest {
            seq,
            through: through_seq,
            text: manifest,
        });
    }

    /// True when the driver should ask the node for a snapshot (none is running).
    pub fn wants_snapshot(&self) -> bool {
        self.needs_snapshot
    }

    fn reset_backlog(&mut self) {
        self.pending.clear();
        self.ends.clear();
        self.ready_len = 0;
        self.ready_since_us = None;
        let in_flight = self.in_flight.is_some();
        let mut kept = VecDeque::new();
        for (i, job) in std::mem::take(&mut self.jobs).into_iter().enumerate() {
            let keep = !matches!(job, Job::Piece { .. }) || (i == 0 && in_flight);
            if keep {
                kept.push_back(job);
            }
        }
        self.jobs = kept;
        self.queued_piece_bytes = self.jobs.iter().map(Job::piece_bytes).sum();
        self.collecting = false;
        self.needs_snapshot = true;
        self.figures.backlog_resets += 1;
    }

    /// Bytes of records not yet in the bucket (collected, or cut and queued).
    pub fn lag_bytes(&self) -> u64 {
        self.pending.len() as u64 + self.queued_piece_bytes
    }

    fn lag_segments(&self) -> u64 {
        let queued = self
            .jobs
            .iter()
            .filter(|j| matches!(j, Job::Piece { .. }))
            .count() as u64;
        queued + u64::from(!self.pending.is_empty())
    }

    /// Last record the bucket can restore (0 when it is unknown or holds nothing).
    pub fn uploaded_seq(&self) -> u64 {
        self.base.map_or(0, |base| self.chain_end(base))
    }

    /// The last record the uploaded pieces reach, gaplessly, after record `base`.
    fn chain_end(&self, base: u64) -> u64 {
        let mut end = base;
        for (&first, &last) in &self.chain {
            if first > end + 1 {
                break;
            }
            end = end.max(last);
        }
        end
    }

    /// Cuts the synced records into a piece when the mode says it is time.
    fn cut(&mut self, now_us: u64) {
        if self.ready_len == 0 {
            return;
        }
        let due = match self.cfg.mode {
            // Group commit: whatever waited while the previous piece was in flight.
            AckMode::Sync => !self.jobs.iter().any(|j| matches!(j, Job::Piece { .. })),
            AckMode::Async => {
                self.ready_len as u64 >= self.cfg.piece_bytes
                    || self
                        .ready_since_us
                        .is_some_and(|t| now_us >= t + self.cfg.piece_interval_us)
            }
        };
        if due {
            self.cut_now();
        }
    }

    fn cut_now(&mut self) {
        if self.ready_len == 0 {
            return;
        }
        let data = Bytes::copy_from_slice(&self.pending[..self.ready_len]);
        self.pending.drain(..self.ready_len);
        for e in &mut self.ends {
            e.1 -= self.ready_len;
        }
        let (first, last) = (self.pending_first, self.ready_last);
        self.pending_first = last + 1;
        self.ready_len = 0;
        self.ready_since_us = None;
        self.queued_piece_bytes += data.len() as u64;
        self.jobs.push_back(Job::Piece { first, last, data });
    }

    /// The next call to make, if one is due (one at a time).
    pub fn poll_call(&mut self, now_us: u64) -> Option<Call> {
        self.tick(now_us);
        self.cut(now_us);
        if self.in_flight.is_some() || self.retry_at_us.is_some_and(|t| now_us < t) {
            return None;
        }
        self.retry_at_us = None;
        // A manifest whose chain lost pieces to a backlog reset is not published.
        while let Some(Job::Manifest { seq, through, .. }) = self.jobs.front() {
            if self.chain_end(*seq) >= *through {
                break;
            }
            self.jobs.pop_front();
        }
        let job = self.jobs.front()?;
        let timeout_us = self.cfg.call_timeout_us
            + self.cfg.timeout_us_per_mib * job.sent_bytes().div_ceil(1 << 20);
        let id = self.next_id;
        self.next_id += 1;
        self.in_flight = Some((id, now_us + timeout_us));
        Some(Call {
            id,
            request: job.request(),
            timeout_us,
        })
    }

    /// Gives up on a call past its deadline.
    pub fn tick(&mut self, now_us: u64) {
        if let Some((id, deadline)) = self.in_flight {
            if now_us >= deadline {
                self.done(now_us, id, Err("timed out".to_string()));
            }
        }
    }

    /// When the uploader next needs [`Uploader::poll_call`] without news from outside.
    pub fn poll_timeout(&self) -> Option<u64> {
        let cut = match self.cfg.mode {
            AckMode::Async => self.ready_since_us.map(|t| t + self.cfg.piece_interval_us),
            AckMode::Sync => None,
        };
        [self.in_flight.map(|f| f.1), self.retry_at_us, cut]
            .into_iter()
            .flatten()
            .min()
    }

    /// True when a call could go out now (the driver's cue to poll).
    pub fn has_work(&self, now_us: u64) -> bool {
        self.in_flight.is_none()
            && (!self.jobs.is_empty() || self.ready_len > 0)
            && self.retry_at_us.is_none_or(|t| now_us >= t)
    }

    /// The answer to call `id`. Answers to calls given up on are ignored.
    pub fn done(&mut self, now_us: u64, id: u64, result: Result<ObjectReply, String>) {
        if self.in_flight.map(|f| f.0) != Some(id) {
            return;
        }
        self.in_flight = None;
        match result {
            Err(e) => {
                self.figures.upload_errors += 1;
                self.figures.last_upload_ok = false;
                self.figures.last_error = e;
                self.retry_at_us = Some(now_us + self.backoff_us);
                self.backoff_us = (self.backoff_us * 2).min(self.cfg.retry_max_us);
            }
            Ok(reply) => {
                self.backoff_us = self.cfg.retry_min_us;
                self.figures.last_upload_ok = true;
                self.figures.uploads += 1;
                let job = self.jobs.pop_front().expect("a call in flight has its job");
                self.finished(job, reply);
            }
        }
        self.refresh_figures();
    }

    fn finished(&mut self, job: Job, reply: ObjectReply) {
        match job {
            Job::List => {
                if let ObjectReply::Keys(keys) = reply {
                    for k in keys {
                        if let Some(p) = parse_piece_key(&k) {
                            self.known_pieces.insert(p);
                        } else if let Some(s) = parse_snapshot_key(&k) {
                            self.known_snapshots.insert(s);
                        }
                    }
                }
            }
            Job::Piece { first, last, data } => {
                self.queued_piece_bytes -= data.len() as u64;
                self.known_pieces.insert((first, last));
                self.chain.insert(first, last);
            }
            Job::Snapshot { seq, .. } => {
                self.known_snapshots.insert(seq);
                self.figures.snapshots_uploaded += 1;
            }
            Job::Manifest { seq, .. } => {
                self.base = Some(seq);
                if self.awaiting_base.is_some_and(|s| s <= seq) {
                    self.awaiting_base = None;
                }
                self.chain.retain(|_, last| *last > seq);
                // What the new manifest replaces goes (the chain it continues stays).
                let mut old: Vec<String> = Vec::new();
                self.known_pieces.retain(|&(f, l)| {
                    let gone = l <= seq;
                    if gone {
                        old.push(piece_key(f, l));
                    }
                    !gone
                });
                self.known_snapshots.retain(|&s| {
                    if s < seq {
                        old.push(snapshot_key(s));
                    }
                    s >= seq
                });
                for keys in old.chunks(DELETE_BATCH) {
                    self.jobs.push_back(Job::Delete {
                        keys: keys.to_vec(),
                    });
                }
            }
            Job::Delete { .. } => {}
        }
    }

    fn refresh_figures(&mut self) {
        let lag = self.lag_bytes();
        self.figures.lag_bytes = lag;
        self.figures.max_lag_bytes = self.figures.max_lag_bytes.max(lag);
        self.figures.lag_segments = self.lag_segments();
        self.figures.uploaded_seq = self.uploaded_seq();
    }

    /// INFO persistence's `s3_` figures.
    pub fn figures(&mut self) -> lattice_node::persist::UploadFigures {
        self.refresh_figures();
        self.figures.clone()
    }

    /// The bounds and bookkeeping hold.
    pub fn check_invariants(&self) {
        assert!(
            self.lag_bytes() <= self.cfg.max_backlog_bytes,
            "upload backlog {} past its bound {}",
            self.lag_bytes(),
            self.cfg.max_backlog_bytes
        );
        assert_eq!(
            self.queued_piece_bytes,
            self.jobs.iter().map(Job::piece_bytes).sum::<u64>()
        );
        assert!(self.ready_len <= self.pending.len());
        assert!(self
            .ends
            .iter()
            .all(|e| e.1 > self.ready_len && e.1 <= self.pending.len()));
        assert!(self.in_flight.is_none() || !self.jobs.is_empty());
    }
}

/// What to fetch to restore a directory from the bucket, and what to remove first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestorePlan {
    /// The manifest's snapshot (seq, key), if the bucket has a manifest.
    pub snapshot: Option<(u64, String)>,
    /// The chain of pieces after it: (key, local segment name), in order.
    pub pieces: Vec<(String, String)>,
    /// Pieces beyond the chain, from a run whose chain never joined up: removed before
    /// uploading resumes, so a new piece can never be confused with one of them.
    pub stale: Vec<String>,
    /// The last record the chain restores.
    pub last_seq: u64,
}

/// Picks the manifest's snapshot and the gapless chain of pieces after it from a listing
/// (keys relative to the prefix). `manifest` is the manifest object's text, if there is one.
pub fn plan_restore(keys: &[String], manifest: Option<&[u8]>) -> Result<RestorePlan, String> {
    let mut plan = RestorePlan::default();
    let base = match manifest {
        Some(text) => {
            let (name, seq) = crate::store::parse_manifest(text)?;
            if !keys.contains(&name) {
                return Err(format!(
                    "the bucket's manifest names {name}, which is missing"
                ));
            }
            plan.snapshot = Some((seq, name));
            seq
        }
        None => 0,
    };
    let mut pieces: Vec<(u64, u64, &String)> = keys
        .iter()
        .filter_map(|k| parse_piece_key(k).map(|(f, l)| (f, l, k)))
        .filter(|&(f, l, _)| l > base && f <= l)
        .collect();
    pieces.sort();
    let mut end = base;
    let mut used = BTreeSet::new();
    loop {
        // The piece that continues the chain furthest; only the first may reach back
        // before the base (records the snapshot holds are skipped on load).
        let next = pieces
            .iter()
            .filter(|&&(f, l, _)| l > end && (f == end + 1 || (end == base && f <= base + 1)))
            .max_by_key(|&&(_, l, _)| l);
        let Some(&(f, l, k)) = next else { break };
        plan.pieces.push((k.clone(), crate::store::segment_name(f)));
        used.insert(k);
        end = l;
    }
    plan.last_seq = end;
    plan.stale = pieces
        .iter()
        .filter(|&&(_, _, k)| !used.contains(k))
        .map(|&(_, _, k)| k.clone())
        .collect();
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(mode: AckMode) -> UploadConfig {
        UploadConfig {
            mode,
            piece_bytes: 100,
            piece_interval_us: 1000,
            max_backlog_bytes: 1000,
            ..Default::default()
        }
    }

    fn answer(u: &mut Uploader, now: u64, ok: bool) -> Option<ObjectRequest> {
        let c = u.poll_call(now)?;
        let reply = match (&c.request, ok) {
            (_, false) => Err("down".to_string()),
            (ObjectRequest::List, true) => Ok(ObjectReply::Keys(Vec::new())),
            (_, true) => Ok(ObjectReply::Done),
        };
        u.done(now, c.id, reply);
        Some(c.request)
    }

    /// An uploader started on an empty restore, past its first call (the LIST of the bucket).
    fn restored_empty(mode: AckMode) -> Uploader {
        let mut u = Uploader::new(
            cfg(mode),
            Start::Restored {
                base_seq: 0,
                last_seq: 0,
            },
        );
        answer(&mut u, 0, true);
        u
    }

    #[test]
    fn sync_mode_uploads_synced_records_as_one_piece_per_round_trip() {
        let mut u = Uploader::new(
            cfg(AckMode::Sync),
            Start::Restored {
                base_seq: 0,
                last_seq: 0,
            },
        );
        assert!(matches!(answer(&mut u, 0, true), Some(ObjectRequest::List)));
        u.record(Kind::Batch, 1, b"a");
        u.record(Kind::Batch, 2, b"b");
        // Not synced yet: nothing goes up.
        assert!(u.poll_call(0).is_none());
        u.synced(1, 0);
        let c = u.poll_call(0).unwrap();
        assert!(matches!(&c.request, ObjectRequest::Put { key, .. } if key == &piece_key(1, 1)));
        u.synced(2, 0);
        assert_eq!(u.uploaded_seq(), 0);
        u.done(0, c.id, Ok(ObjectReply::Done));
        assert_eq!(u.uploaded_seq(), 1);
        assert!(
            matches!(answer(&mut u, 0, true), Some(ObjectRequest::Put { key, .. }) if key == piece_key(2, 2))
        );
        assert_eq!(u.uploaded_seq(), 2);
        assert_eq!(u.lag_bytes(), 0);
        u.check_invariants();
    }

    #[test]
    fn failures_retry_with_backoff_and_late_answers_are_ignored() {
        let mut u = restored_empty(AckMode::Async);
        u.record(Kind::Batch, 1, &[0; 200]);
        u.synced(1, 0);
        let c = u.poll_call(0).unwrap();
        // The call times out; its answer arrives after and changes nothing.
        u.tick(c.timeout_us);
        u.done(c.timeout_us, c.id, Ok(ObjectReply::Done));
        assert_eq!(u.uploaded_seq(), 0);
        let at = c.timeout_us;
        assert!(u.poll_call(at).is_none(), "waits out the backoff");
        let retry = u.poll_call(at + 100_000).unwrap();
        assert_eq!(retry.request, c.request);
        u.done(at + 100_000, retry.id, Ok(ObjectReply::Done));
        assert_eq!(u.uploaded_seq(), 1);
    }

    #[test]
    fn a_backlog_past_its_bound_waits_for_a_snapshot() {
        let mut u = restored_empty(AckMode::Async);
        for seq in 1..=20 {
            u.record(Kind::Batch, seq, &[0; 80]);
            u.synced(seq, 0);
            while answer(&mut u, 0, false).is_some() {}
            u.check_invariants();
        }
        assert!(u.wants_snapshot());
        assert_eq!(u.figures().backlog_resets, 1);
        u.snapshot_begin(25);
        assert!(!u.wants_snapshot());
        u.record(Kind::Batch, 26, b"x");
        u.synced(26, 0);
        u.snapshot_published(
            25,
            26,
            Bytes::from_static(b"snap"),
            Bytes::from_static(b"manifest"),
        );
        let mut now = 10_000_000;
        while u.uploaded_seq() < 26 {
            answer(&mut u, now, true);
            now += 1_000_000;
        }
        u.check_invariants();
    }

    #[test]
    fn a_manifest_removes_what_it_replaces() {
        let mut u = Uploader::new(cfg(AckMode::Sync), Start::LocalData);
        let c = u.poll_call(0).unwrap();
        u.done(
            0,
            c.id,
            Ok(ObjectReply::Keys(vec![
                piece_key(1, 5),
                piece_key(6, 9),
                snapshot_key(0),
                "MANIFEST".into(),
            ])),
        );
        assert!(u.wants_snapshot());
        u.snapshot_begin(12);
        u.record(Kind::Batch, 13, b"y");
        u.synced(13, 0);
        assert!(answer(&mut u, 0, true).is_some());
        assert_eq!(u.uploaded_seq(), 0, "no base in the bucket yet");
        u.snapshot_published(12, 13, Bytes::from_static(b"s"), Bytes::from_static(b"m"));
        answer(&mut u, 0, true);
        answer(&mut u, 0, true);
        assert_eq!(u.uploaded_seq(), 13);
        match answer(&mut u, 0, true) {
            Some(ObjectRequest::Delete { keys }) => assert_eq!(
                keys,
                vec![piece_key(1, 5), piece_key(6, 9), snapshot_key(0)]
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn restore_takes_the_gapless_chain_after_the_manifest() {
        let manifest = crate::store::manifest_text(&snapshot_key(10), 10);
        let keys: Vec<String> = vec![
            snapshot_key(10),
            piece_key(3, 9),
            piece_key(8, 12),
            piece_key(13, 20),
            piece_key(30, 35),
            MANIFEST_KEY.into(),
        ];
        let plan = plan_restore(&keys, Some(manifest.as_bytes())).unwrap();
        assert_eq!(plan.snapshot, Some((10, snapshot_key(10))));
        assert_eq!(
            plan.pieces,
            vec![
                (piece_key(8, 12), crate::store::segment_name(8)),
                (piece_key(13, 20), crate::store::segment_name(13))
            ]
        );
        assert_eq!(plan.last_seq, 20);
        assert_eq!(plan.stale, vec![piece_key(30, 35)]);
        let empty = plan_restore(&[], None).unwrap();
        assert_eq!(empty, RestorePlan::default());
    }
}

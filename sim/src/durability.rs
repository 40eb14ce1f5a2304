//! Durability mode (`--durability`): one standalone node with a simulated disk, crashed and
//! restarted under write load, every acknowledged write checked against the fsync policy.
//!
//! The node and the persistence driver are the production ones (`lattice-node`,
//! `lattice_persist::Persister` over a `Store`); only the disk is simulated. The disk keeps,
//! per file, the bytes written and how many of them are durable. A crash keeps the durable
//! bytes plus a random prefix of the rest, and may garble the end of that prefix (a torn
//! write). Disk-full periods make writes fail, part-way or at once.
//!
//! Clients send `SET k<i> <version>` with a version that grows per key in execution order, so
//! the state after recovery must be the state after some prefix of the executed writes, and:
//! - `always`: every write acknowledged before the crash is in it (nothing acknowledged lost);
//! - `everysec`: every write acknowledged more than 1.2 s of virtual time before the crash is
//!   in it (one second, plus the timer tick and the fsync in flight);
//! - `no`: only the prefix property.
//!
//! After a disk-full period ends, writes must be acknowledged again (service resumes).
//! `--features planted-durability-bug` makes the node acknowledge before the sync; the
//! `always` check must then fail.
//!
//! Two seeds in three also upload to a simulated object store (`crate::bucket`) whose weather
//! changes (slow calls past the timeout, failing calls, calls that never answer), under
//! `s3-durability async` or `sync`. Some crashes lose the whole disk, and the node restores
//! from the bucket. Promises checked:
//! - `sync`: every acknowledged write survives any crash, the disk's loss included;
//! - `async`: the local promise above for a crash that keeps the disk; a restore from the
//!   bucket is a prefix of the history; the backlog never passes its bound
//!   (`Uploader::check_invariants`);
//! - both: once the store answers again, the lag drains to nothing and a restore from the
//!   bucket equals the node's state.
//!
//! `--features planted-upload-bug` acknowledges `sync` writes after the local fsync alone;
//! the loss-of-disk check must catch it.

use std::collections::BTreeMap;
use std::io;

use bytes::Bytes;
use lattice_node::{Buggify, Config, ConnId, Input, Micros, Node, Output};
use lattice_persist::{AckMode, Dir, Persister, Start, UploadConfig, Uploader};
use xxhash_rust::xxh3::Xxh3;

use crate::bucket::{SimBucket, Weather};
use crate::rng::Rand;

#[derive(Default)]
struct SimFile {
    data: Vec<u8>,
    durable: usize,
}

/// The simulated disk.
pub struct SimDisk {
    files: BTreeMap<String, SimFile>,
    /// Writes fail while set (disk full / unwritable).
    full: bool,
    rng: Rand,
    pub torn: u64,
    pub lost_bytes: u64,
    pub failed_writes: u64,
}

impl SimDisk {
    pub(crate) fn new(seed: u64) -> SimDisk {
        SimDisk {
            files: BTreeMap::new(),
            full: false,
            rng: Rand::new(seed),
            torn: 0,
            lost_bytes: 0,
            failed_writes: 0,
        }
    }

    /// A disk holding `files`, all durable (a directory restored from the bucket).
    pub(crate) fn restored(seed: u64, files: Vec<(String, Bytes)>) -> SimDisk {
        let mut disk = SimDisk::new(seed);
        for (name, data) in files {
            let durable = data.len();
            disk.files.insert(
                name,
                SimFile {
                    data: data.to_vec(),
                    durable,
                },
            );
        }
        disk
    }

    /// Power loss: unsynced bytes are lost, except a random prefix that made it, whose end
    /// may be garbage.
    pub(crate) fn crash(&mut self) {
        for f in self.files.values_mut() {
            let unsynced = f.data.len() - f.durable;
            if unsynced == 0 {
                continue;
            }
            let keep = match self.rng.below(3) {
                0 => 0,
                1 => unsynced,
                _ => self.rng.below(unsynced as u64 + 1) as usize,
            };
            self.lost_bytes += (unsynced - keep) as u64;
            f.data.truncate(f.durable + keep);
            if keep > 0 && self.rng.pct(30) {
                let n = (self.rng.range(1, 16) as usize).min(keep);
                let len = f.data.len();
                for b in &mut f.data[len - n..] {
                    *b = self.rng.next() as u8;
                }
                self.torn += 1;
            }
            f.durable = f.data.len();
        }
    }
}

fn full() -> io::Error {
    io::Error::other("No space left on device (simulated)")
}

impl Dir for SimDisk {
    fn list(&mut self) -> io::Result<Vec<String>> {
        Ok(self.files.keys().cloned().collect())
    }
    fn read(&mut self, name: &str) -> io::Result<Vec<u8>> {
        self.files
            .get(name)
            .map(|f| f.data.clone())
            .ok_or_else(|| io::ErrorKind::NotFound.into())
    }
    fn append(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        if self.full {
            self.failed_writes += 1;
            // Part of it may land before the error.
            let part = self.rng.below(data.len() as u64 + 1) as usize;
            self.files
                .entry(name.to_string())
                .or_default()
                .data
                .extend_from_slice(&data[..part]);
            return Err(full());
        }
        self.files
            .entry(name.to_string())
            .or_default()
            .data
            .extend_from_slice(data);
        Ok(())
    }
    fn sync(&mut self, name: &str) -> io::Result<()> {
        if self.full {
            return Err(full());
        }
        if let Some(f) = self.files.get_mut(name) {
            f.durable = f.data.len();
        }
        Ok(())
    }
    fn truncate(&mut self, name: &str, len: u64) -> io::Result<()> {
        if let Some(f) = self.files.get_mut(name) {
            f.data.truncate(len as usize);
            f.durable = f.durable.min(f.data.len());
        }
        Ok(())
    }
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        if self.full {
            return Err(full());
        }
        let f = self
            .files
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        self.files.insert(to.to_string(), f);
        Ok(())
    }
    fn remove(&mut self, name: &str) -> io::Result<()> {
        self.files.remove(name);
        Ok(())
    }
}

/// The uploader's knobs scaled to the simulations' few kilobytes of log and seconds (the
/// replicated simulation's replicas use them too).
pub(crate) fn upload_config(mode: AckMode) -> UploadConfig {
    UploadConfig {
        mode,
        piece_bytes: 2048,
        piece_interval_us: 100_000,
        max_backlog_bytes: 16 << 10,
        call_timeout_us: 200_000,
        timeout_us_per_mib: 0,
        retry_min_us: 10_000,
        retry_max_us: 400_000,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    Always,
    Everysec,
    No,
}

struct Client {
    conn: ConnId,
    /// The write in flight: key index, version, virtual time sent.
    waiting: Option<(usize, u64)>,
    buf: Vec<u8>,
}

/// Outcome of one seed.
#[derive(Default, Debug, Clone)]
pub struct Summary {
    pub policy: &'static str,
    pub crashes: u64,
    pub acked: u64,
    pub refused: u64,
    pub torn: u64,
    pub full_periods: u64,
    pub snapshots: u64,
    /// `none`, `async` or `sync`.
    pub s3: &'static str,
    pub bucket_restores: u64,
    pub digest: u64,
}

const KEYS: usize = 40;
/// `Client::waiting` for a BGSAVE, BGREWRITEAOF or DEBUG RELOAD/LOADAOF (not a write).
const ADMIN: usize = usize::MAX;
const CLIENTS: usize = 4;
const EVERYSEC_BOUND_US: u64 = 1_200_000;

struct Run {
    rng: Rand,
    now: u64,
    node: Node,
    driver: Option<Persister<SimDisk>>,
    clients: Vec<Client>,
    policy: Policy,
    next_conn: u64,
    /// Per key: every executed version in order, and (version, ack time) of the last ack.
    versions: Vec<u64>,
    executed: Vec<(usize, u64)>,
    acked: Vec<Option<(u64, u64)>>,
    hash: Xxh3,
    s: Summary,
    /// When the fsync asked for completes.
    sync_due: Option<u64>,
    /// The object store, when this seed uploads.
    bucket: Option<SimBucket>,
    s3_mode: AckMode,
}

fn args(parts: &[&[u8]]) -> Vec<Bytes> {
    parts.iter().map(|p| Bytes::copy_from_slice(p)).collect()
}

impl Run {
    fn config(policy: Policy, ack_after_upload: bool) -> Config {
        let mut c = Config::default();
        c.ack_after_upload = ack_after_upload;
        c.set_initial("appendonly", "yes").expect("valid");
        let p = match policy {
            Policy::Always => "always",
            Policy::Everysec => "everysec",
            Policy::No => "no",
        };
        c.set_initial("appendfsync", p).expect("valid");
        // Compaction every few kilobytes of log, so crashes land in every phase of it.
        c.set_initial("auto-aof-rewrite-min-size", "4096")
            .expect("valid");
        c
    }

    fn boot(&mut self, disk: SimDisk, start: Start) -> Result<(), String> {
        let seed = self.rng.next();
        let sync = self.bucket.is_some() && self.s3_mode == AckMode::Sync;
        let mut node = Node::new(
            Self::config(self.policy, sync),
            seed,
            Buggify::disabled(),
            Micros(self.now),
        );
        let (mut driver, _loaded) = Persister::recover(disk, &mut node, Micros(self.now))
            .map_err(|e| format!("recovery failed at t={}us: {e}", self.now))?;
        if self.bucket.is_some() {
            let u = Uploader::new(upload_config(self.s3_mode), start);
            driver.attach_uploader(u, &mut node);
        }
        self.node = node;
        self.driver = Some(driver);
        self.clients.clear();
        for _ in 0..CLIENTS {
            self.next_conn += 1;
            let conn = ConnId(self.next_conn);
            self.node.handle(
                Micros(self.now),
                Input::Connected {
                    conn,
                    peer_addr: "sim".into(),
                    local_addr: "sim".into(),
                },
            );
            self.clients.push(Client {
                conn,
                waiting: None,
                buf: Vec::new(),
            });
        }
        self.drain();
        Ok(())
    }

    /// Carries out the node's outputs: persistence through the driver (a sync at once, as
    /// the server does at the end of its turn), replies to the clients.
    fn drain(&mut self) {
        let now = Micros(self.now);
        loop {
            let mut any = false;
            while let Some(out) = self.node.poll_output() {
                any = true;
                let driver = self.driver.as_mut().expect("booted");
                let Some(out) = driver.output(&mut self.node, now, out) else {
                    continue;
                };
                if let Output::Write { conn, data } = out {
                    self.hash.update(&conn.0.to_le_bytes());
                    self.hash.update(&data);
                    if let Some(c) = self.clients.iter_mut().find(|c| c.conn == conn) {
                        c.buf.extend_from_slice(&data);
                    }
                }
            }
            let driver = self.driver.as_mut().expect("booted");
            driver.flush(&mut self.node, now);
            // The end of the server's turn: the records written (the sync comes later).
            driver.write(&mut self.node, now);
            if driver.sync_wanted && self.sync_due.is_none() {
                // An fsync takes time: a crash may come before it completes.
                self.sync_due = Some(self.now + self.rng.range(0, 2000));
            }
            if !any {
                break;
            }
        }
        // Replies: one line each (+OK, -MISCONF..., +Background...).
        for c in &mut self.clients {
            while let Some(end) = c.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = c.buf.drain(..end + 2).collect();
                if let Some((key, version)) = c.waiting.take() {
                    if key == ADMIN {
                        continue;
                    }
                    if line.starts_with(b"+OK") || line.starts_with(b":") {
                        self.acked[key] = Some((version, self.now));
                        self.s.acked += 1;
                    } else {
                        self.s.refused += 1;
                    }
                }
            }
        }
    }

    /// The object store's part of a step: a due answer delivered, the next call started.
    fn upload_step(&mut self) {
        let Some(bucket) = self.bucket.as_mut() else {
            return;
        };
        let now = Micros(self.now);
        let driver = self.driver.as_mut().expect("booted");
        if let Some((id, result)) = bucket.finish(self.now) {
            driver.call_done(&mut self.node, now, id, result);
        }
        if let Some(call) = driver.poll_call(&mut self.node, now) {
            bucket.start(self.now, call);
        }
        self.drain();
        let driver = self.driver.as_ref().expect("booted");
        driver.uploader().expect("attached").check_invariants();
    }

    /// Time passes by up to 3 ms; a client may send a request (`writes`).
    fn step(&mut self) {
        self.step_with(true, 3000);
    }

    fn step_with(&mut self, writes: bool, max_advance_us: u64) {
        self.now += self.rng.range(0, max_advance_us);
        if self.sync_due.is_some_and(|t| t <= self.now) {
            self.sync_due = None;
            let driver = self.driver.as_mut().expect("booted");
            driver.sync(&mut self.node, Micros(self.now));
            self.drain();
        }
        self.upload_step();
        let i = self.rng.below(CLIENTS as u64) as usize;
        if writes && self.clients[i].waiting.is_none() {
            let conn = self.clients[i].conn;
            if self.rng.pct(1) {
                // One step in 400 reads the directory back (DEBUG RELOAD saves first, LOADAOF
                // does not): the node must go on from exactly what the files hold.
                let cmd: &[&[u8]] = if self.rng.pct(25) {
                    if self.rng.pct(50) {
                        &[b"DEBUG", b"RELOAD"]
                    } else {
                        &[b"DEBUG", b"LOADAOF"]
                    }
                } else if self.rng.pct(50) {
                    &[b"BGSAVE"]
                } else {
                    &[b"BGREWRITEAOF"]
                };
                self.node.handle(
                    Micros(self.now),
                    Input::Request {
                        conn,
                        args: args(cmd),
                    },
                );
                // Its reply comes before the next write's, held or not.
                self.clients[i].waiting = Some((ADMIN, 0));
            } else {
                // One key in five is the list `big`, which RPUSH grows past the size where its
                // changes are logged as commands rather than states.
                let key = if self.rng.pct(20) {
                    KEYS
                } else {
                    self.rng.below(KEYS as u64) as usize
                };
                // Only writes the node runs count as executed; a refused one changes nothing
                // (and the list's next element keeps its number).
                let refused = self.node.persist_failing()
                    && (self.policy == Policy::Always || self.node.config().ack_after_upload);
                let v = self.versions[key] + 1;
                if !refused {
                    self.versions[key] = v;
                    self.executed.push((key, v));
                }
                self.clients[i].waiting = Some((key, v));
                let k = if key == KEYS {
                    "big".to_string()
                } else {
                    format!("k{key}")
                };
                let val = v.to_string();
                let cmd: &[u8] = if key == KEYS { b"RPUSH" } else { b"SET" };
                self.node.handle(
                    Micros(self.now),
                    Input::Request {
                        conn,
                        args: args(&[cmd, k.as_bytes(), val.as_bytes()]),
                    },
                );
            }
        }
        if let Some(t) = self.node.poll_timeout() {
            if t.0 <= self.now {
                self.node.handle_timeout(Micros(self.now));
            }
        }
        self.drain();
    }

    /// Per key the version recovered (0: absent); for `big`, its length, after checking that
    /// it holds exactly 1, 2, ... in order.
    fn found(&self) -> Result<Vec<u64>, String> {
        let mut found = vec![0u64; KEYS + 1];
        for (k, f) in found.iter_mut().enumerate().take(KEYS) {
            if let Some(e) = self.node.stored_entry(format!("k{k}").as_bytes()) {
                let lattice_store::Value::Str(s) = &e.value else {
                    return Err(format!("k{k} is not a string after recovery"));
                };
                *f = String::from_utf8_lossy(&s.as_bytes())
                    .parse()
                    .map_err(|_| format!("k{k} holds garbage after recovery"))?;
            }
        }
        if let Some(e) = self.node.stored_entry(b"big") {
            let lattice_store::Value::List(l) = &e.value else {
                return Err("big is not a list after recovery".into());
            };
            for (i, item) in l.iter().enumerate() {
                if item != (i + 1).to_string().as_bytes() {
                    return Err(format!(
                        "big[{i}] is {:?} after recovery, expected {} (an RPUSH lost or applied twice)",
                        String::from_utf8_lossy(item),
                        i + 1
                    ));
                }
            }
            found[KEYS] = l.len() as u64;
        }
        Ok(found)
    }

    /// The recovered state must be the state after a prefix of the executed writes, and hold
    /// every write `promise` (the policy, or what the object store's mode promises) kept.
    fn check(&self, crash_at: u64, promise: Policy) -> Result<(), String> {
        let found = self.found()?;
        // Prefix: the last executed write reflected must come before the first one that is
        // not (for its key, the write after the recovered version).
        let mut last_in = 0usize;
        let mut first_out = usize::MAX;
        let mut seen = [false; KEYS + 1];
        for (pos, &(key, v)) in self.executed.iter().enumerate() {
            if v <= found[key] {
                if v == found[key] {
                    seen[key] = true;
                }
                last_in = last_in.max(pos + 1);
            } else if v > found[key] {
                first_out = first_out.min(pos + 1);
            }
        }
        for k in 0..=KEYS {
            if found[k] > 0 && !seen[k] {
                return Err(format!(
                    "k{k} recovered as version {}, which was never executed",
                    found[k]
                ));
            }
        }
        if last_in > first_out {
            return Err(format!(
                "recovered state is not a prefix of the history: write #{last_in} is in, #{first_out} is lost"
            ));
        }
        for (k, a) in self.acked.iter().enumerate() {
            let Some((v, at)) = *a else { continue };
            let promised = match promise {
                Policy::Always => true,
                Policy::Everysec => at + EVERYSEC_BOUND_US < crash_at,
                Policy::No => false,
            };
            if promised && found[k] < v {
                return Err(format!(
                    "{promise:?}: k{k} version {v} was acknowledged at t={at}us, {} ms before the crash, and is lost (recovered version {})",
                    crash_at.saturating_sub(at) / 1000,
                    found[k]
                ));
            }
        }
        Ok(())
    }
}

/// Runs seed `seed`: a few thousand writes, with crashes, restarts and disk-full periods.
pub fn run(seed: u64) -> Result<Summary, (Summary, String)> {
    let mut rng = Rand::new(seed ^ 0xd0_4ab1_e5ee);
    let policy = match rng.below(3) {
        0 => Policy::Always,
        1 => Policy::Everysec,
        _ => Policy::No,
    };
    let disk = SimDisk::new(rng.next());
    let (bucket, s3_mode) = match rng.below(3) {
        0 => (None, AckMode::Async),
        1 => (Some(SimBucket::new(rng.next())), AckMode::Async),
        _ => (Some(SimBucket::new(rng.next())), AckMode::Sync),
    };
    let mut r = Run {
        bucket,
        s3_mode,
        node: Node::new(Config::default(), 0, Buggify::disabled(), Micros(0)),
        rng,
        now: 1_700_000_000_000_000,
        driver: None,
        clients: Vec::new(),
        policy,
        next_conn: 0,
        versions: vec![0; KEYS + 1],
        executed: Vec::new(),
        acked: vec![None; KEYS + 1],
        hash: Xxh3::new(),
        sync_due: None,
        s: Summary {
            policy: match policy {
                Policy::Always => "always",
                Policy::Everysec => "everysec",
                Policy::No => "no",
            },
            ..Summary::default()
        },
    };
    r.s.s3 = match (&r.bucket, s3_mode) {
        (None, _) => "none",
        (Some(_), m) => m.name(),
    };
    let fail = |r: &Run, e: String| Err((r.s.clone(), format!("{e} (policy {:?})", r.policy)));
    let fresh = Start::Restored {
        base_seq: 0,
        last_seq: 0,
    };
    if let Err(e) = r.boot(disk, fresh) {
        return fail(&r, e);
    }
    let crashes = r.rng.range(2, 5);
    for _ in 0..crashes {
        let steps = r.rng.range(200, 1500);
        let full_at = r.rng.pct(40).then(|| r.rng.below(steps));
        let full_until = full_at.map(|at| at + r.rng.range(20, 200));
        let mut acked_before_full_end = 0;
        // The object store's weather for a stretch of this period.
        let storm_at = r.rng.below(steps);
        let storm_until = storm_at + r.rng.range(20, 600);
        let storm = *r
            .rng
            .pick(&[Weather::Slow, Weather::Failing, Weather::Hanging]);
        // Under `sync` an acknowledgement needs the store too: service resumes once both
        // the disk and the store are back (and the uploader's backoff has run out).
        let sync = r.bucket.is_some() && s3_mode == AckMode::Sync;
        let (resume_from, margin) = match full_until {
            Some(f) if sync => (Some(f.max(storm_until)), 400),
            other => (other, 100),
        };
        for step in 0..steps {
            if let Some(b) = r.bucket.as_mut() {
                if step == storm_at {
                    b.weather = storm;
                } else if step == storm_until {
                    b.weather = Weather::Fine;
                }
            }
            if Some(step) == full_at {
                r.driver.as_mut().expect("booted").dir_mut().full = true;
                r.s.full_periods += 1;
            }
            if Some(step) == full_until {
                r.driver.as_mut().expect("booted").dir_mut().full = false;
            }
            if Some(step) == resume_from {
                acked_before_full_end = r.s.acked;
            }
            r.step();
        }
        if let Some(end) = resume_from.filter(|&e| e + margin < steps) {
            // Service resumes: writes were acknowledged after the disk came back.
            if r.s.acked == acked_before_full_end {
                return fail(
                    &r,
                    format!(
                        "no write acknowledged in the {} steps after the disk recovered",
                        steps - end
                    ),
                );
            }
        }
        let crash_at = r.now;
        r.s.snapshots += r.node.snapshots_taken();
        r.sync_due = None;
        let mut disk = r.driver.take().expect("booted").into_dir();
        disk.full = false;
        disk.crash();
        r.s.torn = disk.torn;
        r.s.crashes += 1;
        r.hash.update(&disk.lost_bytes.to_le_bytes());
        r.now += 1_000;
        // With a bucket, a crash may take the disk with it: the node restores from the bucket.
        let mut start = Start::LocalData;
        let mut promise = policy;
        if let Some(b) = r.bucket.as_mut() {
            b.crash();
            if s3_mode == AckMode::Sync {
                promise = Policy::Always;
            }
            if r.rng.pct(30) {
                let (plan, files) = match b.restore() {
                    Ok(x) => x,
                    Err(e) => return fail(&r, format!("restore from the bucket: {e}")),
                };
                disk = SimDisk::restored(r.rng.next(), files);
                start = Start::Restored {
                    base_seq: plan.snapshot.map_or(0, |s| s.0),
                    last_seq: plan.last_seq,
                };
                r.s.bucket_restores += 1;
                if s3_mode == AckMode::Async {
                    // Only the prefix: the upload lags behind the acknowledgements.
                    promise = Policy::No;
                }
            }
        }
        let restored = matches!(start, Start::Restored { .. });
        if let Err(e) = r.boot(disk, start) {
            return fail(&r, e);
        }
        if let Err(e) = r.check(crash_at, promise) {
            let from = if restored {
                " (the disk lost, restored from the bucket)"
            } else {
                ""
            };
            return fail(&r, format!("after crash {}{from}: {e}", r.s.crashes));
        }
        // Versions executed before the crash but lost are gone for good: the history goes on
        // from what was recovered.
        let found = match r.found() {
            Ok(f) => f,
            Err(e) => return fail(&r, e),
        };
        // The list restarts from what was recovered: versions go on from its length.
        r.versions[KEYS] = found[KEYS];
        // The history keeps the recovered prefix (a later restore from a lagging bucket may
        // go back further into it) and drops the lost suffix.
        let kept = r
            .executed
            .iter()
            .position(|&(k, v)| v > found[k])
            .unwrap_or(r.executed.len());
        r.executed.truncate(kept);
        for (k, a) in r.acked.iter_mut().enumerate() {
            if a.is_some_and(|(v, _)| v > found[k]) {
                *a = None;
            }
        }
        r.node.check_invariants();
    }
    if r.bucket.is_some() {
        if let Err(e) = r.drain_upload() {
            return fail(&r, e);
        }
    }
    r.s.digest = r.hash.digest();
    Ok(r.s)
}

impl Run {
    /// The store answers again and the writes stop: within 30 s of virtual time the lag must
    /// drain to nothing, and a restore from the bucket must equal the node's state.
    fn drain_upload(&mut self) -> Result<(), String> {
        self.bucket.as_mut().expect("uploading").weather = Weather::Fine;
        self.driver.as_mut().expect("booted").dir_mut().full = false;
        let deadline = self.now + 30_000_000;
        let drained = |r: &Run| {
            let d = r.driver.as_ref().expect("booted");
            let u = d.uploader().expect("attached");
            u.lag_bytes() == 0
                && !u.wants_snapshot()
                && u.uploaded_seq() >= d.store().synced_seq()
                && d.store().synced_seq() == d.store().framed_seq()
        };
        while self.now < deadline && !drained(self) {
            self.step_with(false, 20_000);
            if let Some(t) = self.node.poll_timeout() {
                if t.0 <= self.now {
                    self.node.handle_timeout(Micros(self.now));
                    self.drain();
                }
            }
        }
        if !drained(self) {
            let d = self.driver.as_ref().expect("booted");
            let u = d.uploader().expect("attached");
            return Err(format!(
                "the upload did not drain in 30 s once the store answered: lag {} bytes, uploaded seq {}, synced seq {}, snapshot wanted {}",
                u.lag_bytes(),
                u.uploaded_seq(),
                d.store().synced_seq(),
                u.wants_snapshot()
            ));
        }
        let want = self.found()?;
        let (_, files) = self
            .bucket
            .as_mut()
            .expect("uploading")
            .restore()
            .map_err(|e| format!("restore from the drained bucket: {e}"))?;
        let mut node = Node::new(
            Self::config(self.policy, false),
            1,
            Buggify::disabled(),
            Micros(self.now),
        );
        let disk = SimDisk::restored(0, files);
        Persister::recover(disk, &mut node, Micros(self.now))
            .map_err(|e| format!("loading the drained bucket: {e}"))?;
        let live = std::mem::replace(&mut self.node, node);
        let got = self.found();
        self.node = live;
        let got = got?;
        if got != want {
            let k = (0..want.len()).find(|&k| got[k] != want[k]).unwrap_or(0);
            return Err(format!(
                "a restore from the drained bucket differs from the node: key {k} has version {} there, {} in the node",
                got[k], want[k]
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[cfg(not(any(feature = "planted-durability-bug", feature = "planted-upload-bug")))]
    #[test]
    fn seeds_keep_every_promise() {
        for seed in 0..20 {
            if let Err((_, e)) = super::run(seed) {
                panic!("seed {seed}: {e}");
            }
        }
    }

    /// `s3-durability sync` acknowledging before the upload must be caught by the crashes
    /// that lose the disk.
    #[cfg(feature = "planted-upload-bug")]
    #[test]
    fn acknowledging_before_the_upload_is_caught() {
        let caught = (0..60)
            .filter_map(|seed| super::run(seed).err())
            .filter(|(s, e)| s.s3 == "sync" && e.contains("acknowledged"))
            .count();
        assert!(caught > 0, "the planted upload bug went unnoticed");
    }

    /// The node built to acknowledge before its records are durable must be caught.
    #[cfg(feature = "planted-durability-bug")]
    #[test]
    fn acknowledging_before_the_fsync_is_caught() {
        let caught = (0..40)
            .filter_map(|seed| super::run(seed).err())
            .filter(|(_, e)| e.contains("acknowledged"))
            .count();
        assert!(caught > 0, "the planted durability bug went unnoticed");
    }
}

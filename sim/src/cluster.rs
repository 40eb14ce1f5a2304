//! Replicated mode: the workload, the history of every request, and the checkers that judge the
//! cluster at the end of a run.
//!
//! The single-node reference model cannot predict a replica's replies while other replicas
//! write the same keys concurrently, so this mode checks properties instead. Keys are split by
//! what is done to them, so that each checker knows exactly which operations can affect a key:
//!
//! | keys | operations | checked at the end |
//! | --- | --- | --- |
//! | `cnt:*` | INCRBY | sum of increments (bounds for the uncertain ones) |
//! | `sa:*` | SADD | every certain member present, nothing never added |
//! | `sr:*` | SADD, SREM | convergence only |
//! | `h:*` | HSET on `f*` fields, HINCRBY on `n*` fields | `n*` fields like counters |
//! | `r:*` | SET with globally unique values | the value with the highest stamp wins |
//! | `l:*` | LPUSH, RPUSH of unique elements | every certain element exactly once |
//! | `xs:*`, `xt:*` | SET / SADD, EXPIRE, PEXPIRE, PERSIST, DEL | convergence only |
//!
//! Every request is recorded when the client sends it; the world marks when (and on which
//! incarnation of which host) a replica executed it, the HLC stamp of a SET read right after
//! executing it, and the reply if the client got one. An operation is *certain* when it was
//! executed by an incarnation that is still alive at the end and acknowledged without error:
//! its effect must be visible. It is *uncertain* when it may or may not have taken effect: the
//! reply never came (indeterminate), or the incarnation that executed it crashed later (there is
//! no persistence: what it had not passed on yet is lost). Operations that never reached a
//! replica, or were answered with an error, must have no effect.
//!
//! EXPIRE's planted canary (and any expiry arithmetic bug) is caught online: `MULTI; PEXPIRE k
//! ms; PTTL k; EXEC` runs atomically on one replica, so the PTTL must read back exactly `ms`
//! (or -2 when the key did not exist and PEXPIRE answered 0), whatever the other replicas do.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use bytes::Bytes;
use lattice_crdt::Hlc;
use lattice_resp::Frame;

use crate::check::Check;
use crate::rng::Rand;
use crate::trace::show_frame;

/// Operation classes, weighted per seed (`RunConfig::repl_weights`).
pub const CLASSES: &[&str] = &[
    "counter",
    "set-add",
    "set-remove",
    "hash",
    "register",
    "list",
    "volatile",
    "expire-probe",
    "read",
];

const COUNTERS: &[&str] = &["cnt:0", "cnt:1", "cnt:2", "cnt:3", "cnt:4", "cnt:5"];
const SETS_ADD: &[&str] = &["sa:0", "sa:1", "sa:2", "sa:3"];
const SETS_REM: &[&str] = &["sr:0", "sr:1", "sr:2"];
const HASHES: &[&str] = &["h:0", "h:1", "h:2", "h:3"];
const HASH_SET_FIELDS: &[&str] = &["f0", "f1", "f2", "f3"];
const HASH_INCR_FIELDS: &[&str] = &["n0", "n1", "n2"];
const REGISTERS: &[&str] = &["r:0", "r:1", "r:2", "r:3", "r:4", "r:5"];
const LISTS: &[&str] = &["l:0", "l:1", "l:2", "l:3", "l:4", "l:5", "l:6", "l:7"];
const VOLATILE_STRINGS: &[&str] = &["xs:0", "xs:1", "xs:2", "xs:3"];
const VOLATILE_SETS: &[&str] = &["xt:0", "xt:1", "xt:2"];
/// Set members: few enough that the same member is added on several replicas concurrently.
const MEMBERS: u64 = 24;
/// Longest EXPIRE the workload sets, seconds. Together with the bounded clock spread of
/// replicated runs this makes every deadline pass during the 30 s drain, so replicas read the
/// same keys whatever their clocks say.
pub const EXPIRE_MAX_S: u64 = 10;

/// What a key holds, which decides how the end of the run reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyClass {
    String,
    Set,
    Hash,
    List,
}

/// Every key the workload touches, with its class.
pub fn keys() -> Vec<(&'static str, KeyClass)> {
    let mut out = Vec::new();
    for (keys, class) in [
        (COUNTERS, KeyClass::String),
        (REGISTERS, KeyClass::String),
        (VOLATILE_STRINGS, KeyClass::String),
        (SETS_ADD, KeyClass::Set),
        (SETS_REM, KeyClass::Set),
        (VOLATILE_SETS, KeyClass::Set),
        (HASHES, KeyClass::Hash),
        (LISTS, KeyClass::List),
    ] {
        out.extend(keys.iter().map(|k| (*k, class)));
    }
    out
}

/// The reads the end of the run issues for a key on every replica (TYPE first, TTL last).
pub fn probe_commands(key: &str, class: KeyClass) -> Vec<Vec<Bytes>> {
    let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
    let k = b(key);
    let value = match class {
        KeyClass::String => vec![b("GET"), k.clone()],
        KeyClass::Set => vec![b("SMEMBERS"), k.clone()],
        KeyClass::Hash => vec![b("HGETALL"), k.clone()],
        KeyClass::List => vec![b("LRANGE"), k.clone(), b("0"), b("-1")],
    };
    vec![vec![b("TYPE"), k.clone()], value, vec![b("TTL"), k]]
}

/// Makes a probe reply comparable across replicas: members and field pairs sorted, a TTL
/// reduced to "has a deadline" (replicas read it on their own clocks).
pub fn normalize(class: KeyClass, index: usize, frame: Frame) -> Frame {
    match (index, class, frame) {
        (1, KeyClass::Set, Frame::Array(mut items)) => {
            items.sort_by_key(show_frame);
            Frame::Array(items)
        }
        (1, KeyClass::Hash, Frame::Array(items)) => {
            let mut pairs: Vec<(Frame, Frame)> = Vec::new();
            let mut it = items.into_iter();
            while let (Some(f), Some(v)) = (it.next(), it.next()) {
                pairs.push((f, v));
            }
            pairs.sort_by_key(|(f, _)| show_frame(f));
            Frame::Array(pairs.into_iter().flat_map(|(f, v)| [f, v]).collect())
        }
        (2, _, Frame::Integer(n)) if n > 0 => Frame::Simple(Bytes::from_static(b"ttl>0")),
        (_, _, f) => f,
    }
}

/// What one replica shows at the end of the run.
pub struct NodeView {
    pub host: usize,
    pub node_id: u32,
    pub digest: u64,
    /// Per key of [`keys`], the normalized replies to [`probe_commands`].
    pub reads: Vec<Vec<Frame>>,
    /// Per key of [`keys`], the stamp of the winning string write (strings only).
    pub stamps: Vec<Option<Hlc>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Incr {
        key: String,
        delta: i64,
    },
    HIncr {
        key: String,
        field: String,
        delta: i64,
    },
    SAdd {
        key: String,
        members: Vec<String>,
    },
    Set {
        key: String,
        value: String,
    },
    Push {
        key: String,
        elems: Vec<String>,
    },
    Other,
}

#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    /// No reply (yet): the connection died first, or the request never arrived.
    Unknown,
    Acked,
    Error(Frame),
}

/// One request of the history.
struct Op {
    args: Vec<Bytes>,
    check: Check,
    kind: Kind,
    /// Host and incarnation that executed it.
    executed: Option<(usize, u32)>,
    /// For SET: the stamp the replica reported right after executing it.
    stamp: Option<Hlc>,
    outcome: Outcome,
}

/// Whether an operation's effect must, may, or must not be visible at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Certain,
    Uncertain,
    Never,
}

/// Every request of a replicated run, in the order clients sent them.
#[derive(Default)]
pub struct History {
    ops: Vec<Op>,
    /// Per key, everything any request sent so far wrote there: values, members, elements,
    /// `field=value` pairs. A read may only ever show these.
    written: BTreeMap<Bytes, BTreeSet<Bytes>>,
    pub acked: u64,
    pub indeterminate: u64,
    /// Partitioned run: a forwarded SET runs on an owner, not where the world handed it, so
    /// no stamp is read right after it and the register checker (highest stamp wins) is left
    /// out; convergence and the other checkers stand.
    pub partitioned: bool,
    /// Percent of reads that go to the few hot keys (`HOT_KEYS`): a partitioned run with
    /// hot-key tuning on makes non-owners take copies of them, serve reads from the copies
    /// and give them back as the load moves (0: reads spread over every key).
    pub hot_read_pct: u32,
    /// Per host, the first incarnation whose acknowledged writes must survive its crashes
    /// (`Host::durable_from`: a persisting replica whose every crash since kept its mode's
    /// promise). Empty or `u32::MAX`: only a live incarnation's writes are certain.
    pub durable_from: Vec<u32>,
}

/// The keys hot reads go to: written by counters, set adds, hashes and lists, so the copies
/// that serve them must follow writes, and the end's checkers judge what they show.
const HOT_KEYS: &[(&str, KeyClass)] = &[
    ("cnt:0", KeyClass::String),
    ("sa:0", KeyClass::Set),
    ("h:0", KeyClass::Hash),
    ("l:0", KeyClass::List),
];

fn bytes(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

impl History {
    pub fn new(partitioned: bool) -> History {
        History {
            partitioned,
            ..History::default()
        }
    }

    /// Aims `pct` percent of reads at `HOT_KEYS`.
    pub fn with_hot_reads(mut self, pct: u32) -> History {
        self.hot_read_pct = pct;
        self
    }

    /// Draws the next request(s) a client sends: one command, or the four of an atomic expiry
    /// probe. Returns their history indices, arguments and reply checks.
    pub fn generate(&mut self, rng: &mut Rand, weights: &[u32]) -> Vec<(u64, Vec<Bytes>)> {
        let class = if weights.iter().all(|w| *w == 0) {
            CLASSES.len() - 1
        } else {
            rng.weighted(weights)
        };
        let next = self.ops.len() as u64;
        let mut out = Vec::new();
        let mut push = |ops: &mut Vec<Op>, args: Vec<Bytes>, check: Check, kind: Kind| {
            let id = ops.len() as u64;
            out.push((id, args.clone()));
            ops.push(Op {
                args,
                check,
                kind,
                executed: None,
                stamp: None,
                outcome: Outcome::Unknown,
            });
        };
        let any_int = Check::IntRange(i64::MIN, i64::MAX);
        let ok = Check::Exact(Frame::Simple(Bytes::from_static(b"OK")));
        let member = |rng: &mut Rand| format!("m{}", rng.below(MEMBERS));
        match CLASSES[class] {
            "counter" => {
                let key = rng.pick(COUNTERS).to_string();
                let delta = rng.range_i(-50, 100);
                let args = vec![bytes("INCRBY"), bytes(&key), bytes(&delta.to_string())];
                push(&mut self.ops, args, any_int, Kind::Incr { key, delta });
            }
            "set-add" | "set-remove" => {
                let remove = CLASSES[class] == "set-remove";
                let key = if remove {
                    rng.pick(SETS_REM)
                } else {
                    rng.pick(SETS_ADD)
                }
                .to_string();
                let n = rng.range(1, 3) as usize;
                let members: Vec<String> = (0..n).map(|_| member(rng)).collect();
                let srem = remove && rng.pct(40);
                let mut args = vec![bytes(if srem { "SREM" } else { "SADD" }), bytes(&key)];
                args.extend(members.iter().map(|m| bytes(m)));
                let kind = if remove {
                    Kind::Other
                } else {
                    Kind::SAdd { key, members }
                };
                push(&mut self.ops, args, Check::IntRange(0, n as i64), kind);
            }
            "hash" => {
                let key = rng.pick(HASHES).to_string();
                if rng.pct(50) {
                    let field = rng.pick(HASH_INCR_FIELDS).to_string();
                    let delta = rng.range_i(-20, 50);
                    let args = vec![
                        bytes("HINCRBY"),
                        bytes(&key),
                        bytes(&field),
                        bytes(&delta.to_string()),
                    ];
                    push(
                        &mut self.ops,
                        args,
                        any_int,
                        Kind::HIncr { key, field, delta },
                    );
                } else {
                    let pairs = rng.range(1, 2);
                    let mut args = vec![bytes("HSET"), bytes(&key)];
                    for i in 0..pairs {
                        let field: &&str = rng.pick(HASH_SET_FIELDS);
                        args.push(bytes(field));
                        args.push(bytes(&format!("v{next}.{i}")));
                    }
                    push(
                        &mut self.ops,
                        args,
                        Check::IntRange(0, pairs as i64),
                        Kind::Other,
                    );
                }
            }
            "register" => {
                let key = rng.pick(REGISTERS).to_string();
                let value = format!("v{next}");
                let args = vec![bytes("SET"), bytes(&key), bytes(&value)];
                push(&mut self.ops, args, ok, Kind::Set { key, value });
            }
            "list" => {
                let key = rng.pick(LISTS).to_string();
                let n = rng.range(1, 3);
                let elems: Vec<String> = (0..n).map(|i| format!("e{next}.{i}")).collect();
                let cmd = if rng.pct(50) { "LPUSH" } else { "RPUSH" };
                let mut args = vec![bytes(cmd), bytes(&key)];
                args.extend(elems.iter().map(|e| bytes(e)));
                push(
                    &mut self.ops,
                    args,
                    Check::IntRange(n as i64, i64::MAX),
                    Kind::Push { key, elems },
                );
            }
            "volatile" => {
                let string = rng.pct(60);
                let key = if string {
                    rng.pick(VOLATILE_STRINGS)
                } else {
                    rng.pick(VOLATILE_SETS)
                }
                .to_string();
                let (args, check) = match rng.below(5) {
                    0 | 1 if string => (
                        vec![bytes("SET"), bytes(&key), bytes(&format!("v{next}"))],
                        ok,
                    ),
                    0 | 1 => (
                        vec![bytes("SADD"), bytes(&key), bytes(&member(rng))],
                        Check::IntRange(0, 1),
                    ),
                    2 => {
                        let secs = rng.range(1, EXPIRE_MAX_S);
                        (
                            vec![bytes("EXPIRE"), bytes(&key), bytes(&secs.to_string())],
                            Check::IntRange(0, 1),
                        )
                    }
                    3 => (vec![bytes("PERSIST"), bytes(&key)], Check::IntRange(0, 1)),
                    _ => (vec![bytes("DEL"), bytes(&key)], Check::IntRange(0, 1)),
                };
                push(&mut self.ops, args, check, Kind::Other);
            }
            "expire-probe" => {
                let key = if rng.pct(60) {
                    rng.pick(VOLATILE_STRINGS)
                } else {
                    rng.pick(VOLATILE_SETS)
                }
                .to_string();
                let ms = rng.range(1, 2_000) as i64;
                let queued = Check::Exact(Frame::Simple(Bytes::from_static(b"QUEUED")));
                push(&mut self.ops, vec![bytes("MULTI")], ok, Kind::Other);
                push(
                    &mut self.ops,
                    vec![bytes("PEXPIRE"), bytes(&key), bytes(&ms.to_string())],
                    queued.clone(),
                    Kind::Other,
                );
                push(
                    &mut self.ops,
                    vec![bytes("PTTL"), bytes(&key)],
                    queued,
                    Kind::Other,
                );
                // Atomic on one replica at one instant: the deadline just set reads back exactly.
                let set = Frame::Array(vec![Frame::Integer(1), Frame::Integer(ms)]);
                let missing = Frame::Array(vec![Frame::Integer(0), Frame::Integer(-2)]);
                push(
                    &mut self.ops,
                    vec![bytes("EXEC")],
                    Check::AnyOf(vec![set, missing]),
                    Kind::Other,
                );
            }
            _ => {
                let (key, class) = if self.hot_read_pct > 0 && rng.pct(self.hot_read_pct) {
                    *rng.pick(HOT_KEYS)
                } else {
                    *rng.pick(&keys())
                };
                let read = match (class, rng.below(3)) {
                    (_, 0) => vec![bytes("TYPE"), bytes(key)],
                    (_, 1) => vec![bytes("PTTL"), bytes(key)],
                    (KeyClass::String, _) => vec![bytes("GET"), bytes(key)],
                    (KeyClass::Set, _) => vec![bytes("SMEMBERS"), bytes(key)],
                    (KeyClass::Hash, _) => vec![bytes("HGETALL"), bytes(key)],
                    (KeyClass::List, _) => {
                        vec![bytes("LRANGE"), bytes(key), bytes("0"), bytes("-1")]
                    }
                };
                push(&mut self.ops, read, Check::NotError, Kind::Other);
            }
        }
        for (_, args) in &out {
            let Some(key) = args.get(1) else {
                continue;
            };
            let w = self.written.entry(key.clone()).or_default();
            match &args[0][..] {
                b"SET" | b"SADD" | b"LPUSH" | b"RPUSH" => w.extend(args[2..].iter().cloned()),
                b"HSET" => {
                    for p in args[2..].chunks(2) {
                        w.insert(Bytes::from([&p[0][..], b"=", &p[1][..]].concat()));
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// Online check of a read's reply on any replica, whatever the others did concurrently:
    /// it may only show what some request wrote to that key, a list never holds an element
    /// twice, counters are integers.
    pub fn check_read(&self, op: u64, reply: &Frame) -> Result<(), String> {
        let args = &self.ops[op as usize].args;
        let (Some(cmd), Some(key)) = (args.first(), args.get(1)) else {
            return Ok(());
        };
        let empty = BTreeSet::new();
        let written = self.written.get(key).unwrap_or(&empty);
        let counter = key.starts_with(b"cnt:");
        let shown = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
        let known = |b: &Bytes| -> Result<(), String> {
            if written.contains(b) {
                Ok(())
            } else {
                Err(format!("{} was never written there", shown(b)))
            }
        };
        let integer = |b: &Bytes| -> Result<(), String> {
            match std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
            {
                Some(_) => Ok(()),
                None => Err(format!("{} is not an integer", shown(b))),
            }
        };
        let bulks = |f: &Frame| -> Result<Vec<Bytes>, String> {
            match f {
                Frame::Array(items) => items
                    .iter()
                    .map(|i| match i {
                        Frame::Bulk(b) => Ok(b.clone()),
                        other => Err(format!("a non-string element {}", show_frame(other))),
                    })
                    .collect(),
                other => Err(format!("not an array: {}", show_frame(other))),
            }
        };
        match (&cmd[..], reply) {
            (b"GET", Frame::Null) => Ok(()),
            (b"GET", Frame::Bulk(v)) if counter => integer(v),
            (b"GET", Frame::Bulk(v)) => known(v),
            (b"GET", other) => Err(format!("not a string: {}", show_frame(other))),
            (b"SMEMBERS", f) => bulks(f)?.iter().try_for_each(known),
            (b"LRANGE", f) => {
                let elems = bulks(f)?;
                let mut seen = BTreeSet::new();
                for e in &elems {
                    known(e)?;
                    if !seen.insert(e) {
                        return Err(format!("{} appears twice", shown(e)));
                    }
                }
                Ok(())
            }
            (b"HGETALL", f) => {
                let items = bulks(f)?;
                for p in items.chunks(2) {
                    let [field, value] = p else {
                        return Err("an odd number of elements".into());
                    };
                    if field.starts_with(b"n") {
                        integer(value)?;
                    } else {
                        known(&Bytes::from([&field[..], b"=", &value[..]].concat()))?;
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// The reply check of request `op`.
    pub fn check(&self, op: u64) -> Check {
        self.ops[op as usize].check.clone()
    }

    pub fn is_set(&self, op: u64) -> Option<&[u8]> {
        match &self.ops[op as usize].kind {
            Kind::Set { key, .. } => Some(key.as_bytes()),
            _ => None,
        }
    }

    /// Replica `host` (its incarnation `incarnation`) executed request `op`.
    pub fn executed(&mut self, op: u64, host: usize, incarnation: u32) {
        self.ops[op as usize].executed = Some((host, incarnation));
    }

    /// The stamp the replica reported right after executing SET `op`.
    pub fn stamped(&mut self, op: u64, stamp: Option<Hlc>) {
        self.ops[op as usize].stamp = stamp;
    }

    /// Partitioned: `op` was answered CLUSTERDOWN (it did not run: an error, no effect) or
    /// TRYAGAIN (`maybe_ran`: it may have run on an owner, so its outcome stays unknown).
    pub fn unavailable(&mut self, op: u64, reply: &Frame, maybe_ran: bool) {
        self.ops[op as usize].outcome = if maybe_ran {
            Outcome::Unknown
        } else {
            Outcome::Error(reply.clone())
        };
    }

    /// The client received `reply` to request `op`.
    pub fn replied(&mut self, op: u64, reply: &Frame) {
        let o = &mut self.ops[op as usize];
        o.outcome = match reply {
            Frame::Error(_) => Outcome::Error(reply.clone()),
            _ => Outcome::Acked,
        };
    }

    /// Counts acknowledged and indeterminate requests (for the run's report).
    pub fn tally(&mut self) {
        self.acked = 0;
        self.indeterminate = 0;
        for op in &self.ops {
            match op.outcome {
                Outcome::Acked => self.acked += 1,
                Outcome::Unknown => self.indeterminate += 1,
                Outcome::Error(_) => {}
            }
        }
    }

    fn fate(&self, op: &Op, alive: &[u32]) -> Fate {
        let Some((host, incarnation)) = op.executed else {
            return Fate::Never;
        };
        match op.outcome {
            Outcome::Error(_) => Fate::Never,
            Outcome::Acked if alive[host] == incarnation || self.kept(host, incarnation) => {
                Fate::Certain
            }
            _ => Fate::Uncertain,
        }
    }

    /// The acknowledged writes of `host`'s `incarnation` survived its crash and every later
    /// one: its disk or its bucket kept them (a crash that lost them ends this).
    fn kept(&self, host: usize, incarnation: u32) -> bool {
        self.durable_from
            .get(host)
            .is_some_and(|&from| incarnation >= from)
    }

    fn describe(op: &Op) -> String {
        let args: Vec<String> = op
            .args
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let at = match op.executed {
            Some((h, i)) => format!("n{h} incarnation {i}"),
            None => "never executed".into(),
        };
        format!("`{}` ({at}, {:?})", args.join(" "), op.outcome)
    }

    /// The end-of-run checks. `alive[host]` is each host's incarnation at the end; `views` is
    /// what every replica shows.
    pub fn check_end(&mut self, alive: &[u32], views: &[NodeView]) -> Result<(), String> {
        // A SET that reached a replica must have been stamped there: the register checker
        // orders writes by these stamps.
        if let Some(op) = self.ops.iter().find(|o| {
            !self.partitioned
                && matches!(o.kind, Kind::Set { .. })
                && o.executed.is_some()
                && o.stamp.is_none()
        }) {
            return Err(format!(
                "register: the replica reported no string stamp right after executing {}",
                History::describe(op)
            ));
        }
        self.check_convergence(views)?;
        let keys = keys();
        let first = &views[0];
        let value = |key: &str| -> &Frame {
            let i = keys.iter().position(|(k, _)| *k == key).expect("known key");
            &first.reads[i][1]
        };
        self.check_counters(alive, &value)?;
        self.check_hash_counters(alive, &value)?;
        self.check_sets(alive, &value)?;
        if !self.partitioned {
            self.check_registers(alive, &keys, first)?;
        }
        self.check_lists(alive, &value)?;
        Ok(())
    }

    /// Every replica has the same digest and answers every read identically.
    fn check_convergence(&self, views: &[NodeView]) -> Result<(), String> {
        let keys = keys();
        let first = &views[0];
        for (ki, (key, class)) in keys.iter().enumerate() {
            let probes = probe_commands(key, *class);
            for (pi, probe) in probes.iter().enumerate() {
                if views.iter().all(|v| v.reads[ki][pi] == first.reads[ki][pi]) {
                    continue;
                }
                let cmd: Vec<String> = probe
                    .iter()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                let mut msg = format!(
                    "convergence: replicas answer `{}` differently after the drain:",
                    cmd.join(" ")
                );
                for v in views {
                    let _ = write!(
                        msg,
                        " n{} (id {}): {};",
                        v.host,
                        v.node_id,
                        show_frame(&v.reads[ki][pi])
                    );
                }
                return Err(msg);
            }
        }
        // Partitioned, each replica's tree covers its own slots: the reads above compared the
        // owners (each reads its own state; the others forward to an owner).
        if !self.partitioned && views.iter().any(|v| v.digest != first.digest) {
            let d: Vec<String> = views
                .iter()
                .map(|v| format!("n{} (id {}): {:016x}", v.host, v.node_id, v.digest))
                .collect();
            return Err(format!(
                "convergence: replication digests differ after the drain (reads agree): {}",
                d.join(", ")
            ));
        }
        Ok(())
    }

    /// Bounds for a sum of increments: exact for certain ones, either way for uncertain ones.
    fn bounds<'a>(
        &'a self,
        alive: &[u32],
        mut delta_of: impl FnMut(&Kind) -> Option<i64>,
    ) -> (i128, i128, u64, Vec<&'a Op>) {
        let (mut lo, mut hi, mut certain) = (0i128, 0i128, 0u64);
        let mut ops = Vec::new();
        for op in &self.ops {
            let Some(d) = delta_of(&op.kind) else {
                continue;
            };
            match self.fate(op, alive) {
                Fate::Certain => {
                    lo += d as i128;
                    hi += d as i128;
                    certain += 1;
                }
                Fate::Uncertain => {
                    lo += d.min(0) as i128;
                    hi += d.max(0) as i128;
                }
                Fate::Never => continue,
            }
            ops.push(op);
        }
        (lo, hi, certain, ops)
    }

    fn check_counter(
        &self,
        what: &str,
        got: Option<&Frame>,
        (lo, hi, certain, ops): (i128, i128, u64, Vec<&Op>),
    ) -> Result<(), String> {
        let value: Option<i128> = match got {
            None | Some(Frame::Null) => None,
            Some(Frame::Bulk(b)) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
            Some(_) => None,
        };
        let fine = match value {
            Some(v) => (lo..=hi).contains(&v),
            // Never created, or only by increments that may all have been lost.
            None => matches!(got, None | Some(Frame::Null)) && certain == 0,
        };
        if fine {
            return Ok(());
        }
        let shown = got.map_or("(missing)".to_string(), show_frame);
        let mut msg = format!(
            "counter: {what} is {shown}, expected {lo}..={hi} ({certain} certain increments of {} that may count); last ones:",
            ops.len()
        );
        for op in ops.iter().rev().take(6) {
            let _ = write!(msg, " {};", History::describe(op));
        }
        Err(msg)
    }

    fn check_counters<'a>(
        &self,
        alive: &[u32],
        value: &impl Fn(&str) -> &'a Frame,
    ) -> Result<(), String> {
        for key in COUNTERS {
            let b = self.bounds(alive, |k| match k {
                Kind::Incr { key: k, delta } if k == key => Some(*delta),
                _ => None,
            });
            self.check_counter(key, Some(value(key)), b)?;
        }
        Ok(())
    }

    fn check_hash_counters<'a>(
        &self,
        alive: &[u32],
        value: &impl Fn(&str) -> &'a Frame,
    ) -> Result<(), String> {
        for key in HASHES {
            let fields: BTreeMap<Vec<u8>, Frame> = match value(key) {
                Frame::Array(items) => items
                    .chunks(2)
                    .filter_map(|p| match p {
                        [Frame::Bulk(f), v] => Some((f.to_vec(), v.clone())),
                        _ => None,
                    })
                    .collect(),
                other => {
                    return Err(format!(
                        "hash: HGETALL {key} answered {}",
                        show_frame(other)
                    ))
                }
            };
            for field in HASH_INCR_FIELDS {
                let b = self.bounds(alive, |k| match k {
                    Kind::HIncr {
                        key: k,
                        field: f,
                        delta,
                    } if k == key && f == field => Some(*delta),
                    _ => None,
                });
                let got = fields.get(field.as_bytes());
                self.check_counter(&format!("field {field} of {key}"), got, b)?;
            }
        }
        Ok(())
    }

    fn members(frame: &Frame) -> Result<Vec<String>, String> {
        match frame {
            Frame::Array(items) => items
                .iter()
                .map(|i| match i {
                    Frame::Bulk(b) => Ok(String::from_utf8_lossy(b).into_owned()),
                    other => Err(format!("a non-string element {}", show_frame(other))),
                })
                .collect(),
            other => Err(format!("not an array: {}", show_frame(other))),
        }
    }

    fn check_sets<'a>(
        &self,
        alive: &[u32],
        value: &impl Fn(&str) -> &'a Frame,
    ) -> Result<(), String> {
        for key in SETS_ADD {
            let present: BTreeSet<String> = History::members(value(key))
                .map_err(|e| format!("set: SMEMBERS {key}: {e}"))?
                .into_iter()
                .collect();
            let mut may: BTreeSet<&str> = BTreeSet::new();
            for op in &self.ops {
                let Kind::SAdd { key: k, members } = &op.kind else {
                    continue;
                };
                if k != key {
                    continue;
                }
                match self.fate(op, alive) {
                    Fate::Never => {}
                    Fate::Uncertain => may.extend(members.iter().map(|m| m.as_str())),
                    Fate::Certain => {
                        may.extend(members.iter().map(|m| m.as_str()));
                        if let Some(m) = members.iter().find(|m| !present.contains(*m)) {
                            return Err(format!(
                                "set: {key} lacks {m}, added by the acknowledged {}",
                                History::describe(op)
                            ));
                        }
                    }
                }
            }
            if let Some(m) = present.iter().find(|m| !may.contains(m.as_str())) {
                return Err(format!(
                    "set: {key} holds {m}, which no executed SADD added"
                ));
            }
        }
        Ok(())
    }

    fn check_registers(
        &self,
        alive: &[u32],
        keys: &[(&str, KeyClass)],
        view: &NodeView,
    ) -> Result<(), String> {
        for key in REGISTERS {
            let ki = keys.iter().position(|(k, _)| k == key).expect("known key");
            let mut by_value: BTreeMap<&str, &Op> = BTreeMap::new();
            // The highest stamp among writes that must have survived (their replica lives).
            let mut floor: Option<&Op> = None;
            for op in &self.ops {
                let Kind::Set { key: k, value } = &op.kind else {
                    continue;
                };
                if k != key {
                    continue;
                }
                let Some((host, incarnation)) = op.executed else {
                    continue;
                };
                by_value.insert(value, op);
                // Executed by a replica that lives: its write survives even unacknowledged;
                // acknowledged by one whose crashes kept it, it survives too.
                let survives = alive[host] == incarnation
                    || (op.outcome == Outcome::Acked && self.kept(host, incarnation));
                if survives && floor.is_none_or(|f| op.stamp > f.stamp) {
                    floor = Some(op);
                }
            }
            let got = &view.reads[ki][1];
            let winner = match got {
                Frame::Null => {
                    if let Some(f) = floor {
                        return Err(format!(
                            "register: {key} is missing, but {} must have survived",
                            History::describe(f)
                        ));
                    }
                    continue;
                }
                Frame::Bulk(v) => {
                    let v = String::from_utf8_lossy(v).into_owned();
                    match by_value.get(v.as_str()) {
                        Some(op) => *op,
                        None => {
                            return Err(format!(
                                "register: {key} holds {v:?}, which no executed SET wrote"
                            ))
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "register: GET {key} answered {}",
                        show_frame(other)
                    ))
                }
            };
            if let Some(f) = floor {
                if f.stamp > winner.stamp {
                    return Err(format!(
                        "register: {key} ends with {} stamped {:?}, but {} has the higher stamp {:?}",
                        History::describe(winner),
                        winner.stamp,
                        History::describe(f),
                        f.stamp
                    ));
                }
            }
            if view.stamps[ki] != winner.stamp {
                return Err(format!(
                    "register: {key}'s winning write {} was stamped {:?} when written, but the replica now reports {:?}",
                    History::describe(winner),
                    winner.stamp,
                    view.stamps[ki]
                ));
            }
        }
        Ok(())
    }

    fn check_lists<'a>(
        &self,
        alive: &[u32],
        value: &impl Fn(&str) -> &'a Frame,
    ) -> Result<(), String> {
        for key in LISTS {
            let elems =
                History::members(value(key)).map_err(|e| format!("list: LRANGE {key}: {e}"))?;
            let mut count: BTreeMap<&str, usize> = BTreeMap::new();
            for e in &elems {
                *count.entry(e.as_str()).or_insert(0) += 1;
            }
            if let Some((e, n)) = count.iter().find(|(_, n)| **n > 1) {
                return Err(format!("list: {key} holds {e} {n} times (pushed once)"));
            }
            let mut may: BTreeSet<&str> = BTreeSet::new();
            for op in &self.ops {
                let Kind::Push {
                    key: k,
                    elems: pushed,
                } = &op.kind
                else {
                    continue;
                };
                if k != key {
                    continue;
                }
                match self.fate(op, alive) {
                    Fate::Never => {}
                    Fate::Uncertain => may.extend(pushed.iter().map(|e| e.as_str())),
                    Fate::Certain => {
                        may.extend(pushed.iter().map(|e| e.as_str()));
                        if let Some(e) = pushed.iter().find(|e| !count.contains_key(e.as_str())) {
                            return Err(format!(
                                "list: {key} lacks {e}, pushed by the acknowledged {}",
                                History::describe(op)
                            ));
                        }
                    }
                }
            }
            if let Some(e) = count.keys().find(|e| !may.contains(*e)) {
                return Err(format!(
                    "list: {key} holds {e}, which no executed push added"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Frame {
        Frame::Bulk(bytes(s))
    }

    /// A history of one counter, one set and one register, with a view built from `values`.
    fn world() -> History {
        let mut h = History::default();
        let mut rng = Rand::new(9);
        // Draw until the history has a few of each class we check here.
        let only =
            |name: &str| -> Vec<u32> { CLASSES.iter().map(|c| u32::from(*c == name)).collect() };
        for class in ["counter", "set-add", "register", "list"] {
            for _ in 0..5 {
                h.generate(&mut rng, &only(class));
            }
        }
        h
    }

    fn view(h: &History, alive: &[u32], tweak: impl Fn(&str, &mut Frame)) -> NodeView {
        // The state every certain and no uncertain operation leads to.
        let keys = keys();
        let mut reads = Vec::new();
        let mut stamps = Vec::new();
        for (key, class) in &keys {
            let mut value = match class {
                KeyClass::String => Frame::Null,
                _ => Frame::Array(Vec::new()),
            };
            let mut stamp = None;
            let mut sum = 0i64;
            let mut counted = false;
            let mut members: BTreeSet<String> = BTreeSet::new();
            let mut list: Vec<Frame> = Vec::new();
            for op in &h.ops {
                if h.fate(op, alive) != Fate::Certain {
                    continue;
                }
                match &op.kind {
                    Kind::Incr { key: k, delta } if k == key => {
                        sum += delta;
                        counted = true;
                    }
                    Kind::SAdd { key: k, members: m } if k == key => members.extend(m.clone()),
                    Kind::Set { key: k, value: v } if k == key && op.stamp > stamp => {
                        stamp = op.stamp;
                        value = bulk(v);
                    }
                    Kind::Push { key: k, elems } if k == key => {
                        list.extend(elems.iter().map(|e| bulk(e)))
                    }
                    _ => {}
                }
            }
            if counted {
                value = bulk(&sum.to_string());
            }
            if *class == KeyClass::Set && !members.is_empty() {
                value = Frame::Array(members.iter().map(|m| bulk(m)).collect());
            }
            if *class == KeyClass::List && !list.is_empty() {
                value = Frame::Array(list);
            }
            tweak(key, &mut value);
            reads.push(vec![Frame::Simple(bytes("x")), value, Frame::Integer(-1)]);
            stamps.push(stamp);
        }
        NodeView {
            host: 0,
            node_id: 1,
            digest: 7,
            reads,
            stamps,
        }
    }

    fn execute_all(h: &mut History) {
        for i in 0..h.ops.len() as u64 {
            h.executed(i, 0, 1);
            if h.is_set(i).is_some() {
                h.stamped(
                    i,
                    Some(Hlc {
                        wall_ms: 1000 + i,
                        logical: 0,
                        node: lattice_crdt::NodeId(1),
                    }),
                );
            }
            h.replied(i, &Frame::Integer(1));
        }
    }

    #[test]
    fn a_faithful_cluster_passes_and_each_checker_catches_its_fault() {
        let mut h = world();
        execute_all(&mut h);
        let alive = [1];
        let good = view(&h, &alive, |_, _| {});
        assert_eq!(h.check_end(&alive, &[good]), Ok(()));

        let lost_increment = view(&h, &alive, |k, v| {
            if k == "cnt:0" || k == "cnt:1" {
                if let Frame::Bulk(b) = v {
                    let n: i64 = std::str::from_utf8(b).unwrap().parse().unwrap();
                    *v = bulk(&(n + 1000).to_string());
                }
            }
        });
        let e = h.check_end(&alive, &[lost_increment]).unwrap_err();
        assert!(e.starts_with("counter:"), "{e}");

        let phantom = view(&h, &alive, |k, v| {
            if let (true, Frame::Array(a)) = (k.starts_with("sa:"), v) {
                a.push(bulk("never"));
            }
        });
        let e = h.check_end(&alive, &[phantom]).unwrap_err();
        assert!(e.starts_with("set:"), "{e}");

        let duplicated = view(&h, &alive, |k, v| {
            if let (true, Frame::Array(a)) = (k.starts_with("l:"), v) {
                if let Some(x) = a.first().cloned() {
                    a.push(x);
                }
            }
        });
        let e = h.check_end(&alive, &[duplicated]).unwrap_err();
        assert!(e.starts_with("list:"), "{e}");

        // A register ending on a write that is not the highest stamped one.
        let stale = view(&h, &alive, |k, v| {
            if k.starts_with("r:") && *v != Frame::Null {
                *v = Frame::Null;
            }
        });
        let e = h.check_end(&alive, &[stale]).unwrap_err();
        assert!(e.starts_with("register:"), "{e}");
    }

    #[test]
    fn reads_show_only_what_was_written() {
        let mut h = History::default();
        let mut rng = Rand::new(5);
        let only =
            |name: &str| -> Vec<u32> { CLASSES.iter().map(|c| u32::from(*c == name)).collect() };
        let set = h.generate(&mut rng, &only("register"));
        let (key, value) = (set[0].1[1].clone(), set[0].1[2].clone());
        let push = h.generate(&mut rng, &only("list"));
        let (list, elem) = (push[0].1[1].clone(), push[0].1[2].clone());
        let read = |h: &mut History, args: Vec<Bytes>| -> u64 {
            let id = h.ops.len() as u64;
            h.ops.push(Op {
                args,
                check: Check::NotError,
                kind: Kind::Other,
                executed: None,
                stamp: None,
                outcome: Outcome::Unknown,
            });
            id
        };
        let get = read(&mut h, vec![bytes("GET"), key]);
        assert_eq!(h.check_read(get, &Frame::Bulk(value)), Ok(()));
        assert_eq!(h.check_read(get, &Frame::Null), Ok(()));
        assert!(h.check_read(get, &bulk("v999999")).is_err());
        let lrange = read(&mut h, vec![bytes("LRANGE"), list, bytes("0"), bytes("-1")]);
        let once = Frame::Array(vec![Frame::Bulk(elem.clone())]);
        assert_eq!(h.check_read(lrange, &once), Ok(()));
        let twice = Frame::Array(vec![Frame::Bulk(elem.clone()), Frame::Bulk(elem)]);
        assert!(h.check_read(lrange, &twice).unwrap_err().contains("twice"));
    }

    #[test]
    fn replicas_that_disagree_fail_convergence() {
        let mut h = world();
        execute_all(&mut h);
        let alive = [1];
        let a = view(&h, &alive, |_, _| {});
        let mut b = view(&h, &alive, |_, _| {});
        b.host = 1;
        assert_eq!(h.check_end(&alive, &[a, b]), Ok(()));
        let a = view(&h, &alive, |_, _| {});
        let mut b = view(&h, &alive, |k, v| {
            if k == "cnt:2" {
                *v = bulk("123456789");
            }
        });
        b.host = 1;
        let e = h.check_end(&alive, &[a, b]).unwrap_err();
        assert!(e.starts_with("convergence:"), "{e}");
        let a = view(&h, &alive, |_, _| {});
        let mut b = view(&h, &alive, |_, _| {});
        b.digest = 8;
        let e = h.check_end(&alive, &[a, b]).unwrap_err();
        assert!(e.contains("digests differ"), "{e}");
    }

    #[test]
    fn uncertain_operations_may_count_and_lost_ones_must_not() {
        let mut h = History::default();
        let mut rng = Rand::new(3);
        let only: Vec<u32> = CLASSES.iter().map(|c| u32::from(*c == "counter")).collect();
        while h.ops.len() < 40 {
            h.generate(&mut rng, &only);
        }
        // Half executed on an incarnation that crashed (uncertain), half never executed.
        for i in 0..20u64 {
            h.executed(i, 0, 1);
            h.replied(i, &Frame::Integer(0));
        }
        let alive = [2];
        let none = view(&h, &alive, |_, _| {});
        assert_eq!(h.check_end(&alive, &[none]), Ok(()), "all may be lost");
        // Everything the crashed replica did, applied: also fine.
        let all = view(&h, &[1], |_, _| {});
        assert_eq!(h.check_end(&alive, &[all]), Ok(()));
        // An increment that never reached a replica showing up is not.
        let mut h2 = History::default();
        let mut rng = Rand::new(3);
        while h2.ops.len() < 40 {
            h2.generate(&mut rng, &only);
        }
        let phantom = view(&h, &[1], |_, _| {});
        let e = h2.check_end(&alive, &[phantom]).unwrap_err();
        assert!(e.starts_with("counter:"), "{e}");
    }
}

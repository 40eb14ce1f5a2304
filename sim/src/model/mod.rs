//! The reference model: single-node Redis 7.0 semantics, written from the documented behaviour
//! and checked against redis-server, deliberately simple and never calling node code.
//!
//! One [`Model`] per node incarnation. The node driver applies every request to the model at
//! the moment it hands the request to the node, with the same `now`, and gets back the
//! [`Check`] the reply must pass. Where Redis is not deterministic from the outside (RANDOMKEY,
//! SCAN cursors, DBSIZE with expired keys not yet reclaimed, INFO, OBJECT IDLETIME) the check is
//! a property instead of an exact frame.
//!
//! Each command family is one module with a table of [`Spec`]s (name, Redis arity, handler);
//! adding a family (lists, hashes, ...) is a module and one line in [`FAMILIES`].

#[cfg(test)]
mod behaviour;
pub mod connection;
pub mod expire;
pub mod float;
pub mod glob;
pub mod hashes;
pub mod keys;
pub mod keyspace;
pub mod lists;
pub mod multi;
pub mod pubsub;
pub mod server;
pub mod sets;
pub mod sort;
pub mod strings;
pub mod zsets;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use bytes::Bytes;
use lattice_resp::Frame;

use crate::check::Check;
pub use keyspace::{Keyspace, Value};

/// The reply to a command on a key of another type.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const SYNTAX: &str = "ERR syntax error";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Resp2,
    Resp3,
}

/// What the model knows about one connection.
#[derive(Clone, Debug)]
pub struct ConnState {
    pub proto: Proto,
    pub name: Option<Bytes>,
    /// CLIENT REPLY OFF in force.
    pub reply_off: bool,
    /// CLIENT REPLY SKIP: the next command's reply is suppressed.
    pub skip_next: bool,
    /// The SCAN iteration in progress on this connection.
    pub scan: Option<keys::ScanIter>,
    /// The peer address the node was given (CLIENT KILL ADDR, CLIENT LIST addr=).
    pub addr: String,
    /// MULTI in force: the commands queued so far.
    pub multi: Option<multi::Queued>,
    /// WATCHed keys, each with whether it was live when watched (a key that expires after
    /// WATCH breaks the transaction; one already expired then does not).
    pub watched: BTreeMap<Bytes, bool>,
    /// A watched key was modified: the next EXEC fails.
    pub dirty: bool,
    /// Killed by another connection (CLIENT KILL): the node closes it when its output is
    /// written and lists it no more meanwhile, though it still receives what it was sent.
    pub killed: bool,
    /// Pub/sub subscriptions.
    pub channels: BTreeSet<Bytes>,
    pub patterns: BTreeSet<Bytes>,
}

impl ConnState {
    /// Subscribed to anything: RESP2 connections are restricted to pub/sub commands.
    pub fn subscribed(&self) -> bool {
        !self.channels.is_empty() || !self.patterns.is_empty()
    }

    pub fn subscriptions(&self) -> i64 {
        (self.channels.len() + self.patterns.len()) as i64
    }
}

/// A frame the node writes that is not the reply of the request being applied: a pub/sub
/// message, or a (un)subscribe confirmation. CLIENT REPLY never silences these.
#[derive(Clone, Debug)]
pub struct Push {
    pub conn: u64,
    pub check: Check,
    /// Frames of one request to one connection sharing a non-zero group may arrive in any
    /// order (the pattern messages of one PUBLISH: Redis walks its patterns in hash order).
    pub group: u64,
    /// This frame answers the request on the client's side (the first confirmation of a
    /// SUBSCRIBE whose reply is not suppressed).
    pub answers: bool,
}

/// One node's worth of Redis state.
pub struct Model {
    pub db: Keyspace,
    pub conns: BTreeMap<u64, ConnState>,
    /// CONFIG parameters the workload changes (name -> value).
    pub config: BTreeMap<&'static str, String>,
    /// Sets a SPOP of the request being applied took part of: the members it removed are in
    /// the node's reply (see [`Model::settle`]).
    pub pending_pops: Vec<Bytes>,
}

/// The command being applied.
pub struct Cx<'a> {
    pub args: &'a [Bytes],
    pub now_us: u64,
    pub now_ms: u64,
    pub conn: u64,
    pub proto: Proto,
    /// Connections this command closes (CLIENT KILL); the driver expects the node to close them.
    pub kill: Vec<u64>,
    /// The node closes this connection after the reply (QUIT, CLIENT KILL of itself).
    pub close_self: bool,
    /// CLIENT REPLY ON clears the skip of the command carrying it.
    pub clear_skip: bool,
    /// Frames written before the reply, in order (pub/sub).
    pub pushes: Vec<Push>,
    /// Run by EXEC from the transaction's queue (the connection's current command is EXEC).
    pub in_exec: bool,
}

impl Cx<'_> {
    pub fn arg(&self, i: usize) -> &[u8] {
        &self.args[i]
    }

    pub fn argc(&self) -> usize {
        self.args.len()
    }

    /// Queues a frame for connection `conn` ahead of the reply.
    pub fn push(&mut self, conn: u64, check: Check, group: u64) {
        self.pushes.push(Push {
            conn,
            check,
            group,
            answers: false,
        });
    }
}

pub type Run = fn(&mut Model, &mut Cx) -> Check;

/// A command: lowercase full name (`client|id` for subcommands), Redis arity, handler.
pub struct Spec {
    pub name: &'static str,
    pub arity: i32,
    pub run: Run,
}

pub const fn spec(name: &'static str, arity: i32, run: Run) -> Spec {
    Spec { name, arity, run }
}

/// Every family's table.
pub const FAMILIES: &[&[Spec]] = &[
    strings::SPECS,
    keys::SPECS,
    expire::SPECS,
    server::SPECS,
    connection::SPECS,
    lists::SPECS,
    hashes::SPECS,
    sets::SPECS,
    sort::SPECS,
    zsets::SPECS,
    multi::SPECS,
    pubsub::SPECS,
];

/// Commands whose work is done by subcommands (`COMMAND` alone is also runnable).
const CONTAINERS: &[(&str, i32)] = &[
    ("client", -2),
    ("object", -2),
    ("config", -2),
    ("command", -1),
    ("pubsub", -2),
];

fn table() -> &'static BTreeMap<&'static str, &'static Spec> {
    static TABLE: OnceLock<BTreeMap<&'static str, &'static Spec>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = BTreeMap::new();
        for fam in FAMILIES {
            for s in fam.iter() {
                assert!(t.insert(s.name, s).is_none(), "{} defined twice", s.name);
            }
        }
        t
    })
}

/// What applying one request produced.
pub struct Applied {
    /// Frames written ahead of the reply, in order, to this or other connections.
    pub pushes: Vec<Push>,
    /// The check for the reply, or `None` when the node must not reply (CLIENT REPLY) or the
    /// reply is the pushes (SUBSCRIBE).
    pub reply: Option<Check>,
    pub close_self: bool,
    pub kill: Vec<u64>,
    /// The driver must hand the node's reply to [`Model::settle`] (a random SPOP).
    pub settle: bool,
}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}

impl Model {
    pub fn new() -> Model {
        let mut config = BTreeMap::new();
        config.insert("hz", "10".to_string());
        config.insert("maxmemory-policy", "noeviction".to_string());
        Model {
            db: Keyspace::default(),
            conns: BTreeMap::new(),
            config,
            pending_pops: Vec::new(),
        }
    }

    pub fn connect(&mut self, conn: u64, addr: String) {
        self.conns.insert(
            conn,
            ConnState {
                proto: Proto::Resp2,
                name: None,
                reply_off: false,
                skip_next: false,
                scan: None,
                addr,
                multi: None,
                watched: BTreeMap::new(),
                dirty: false,
                killed: false,
                channels: BTreeSet::new(),
                patterns: BTreeSet::new(),
            },
        );
    }

    pub fn disconnect(&mut self, conn: u64) {
        self.conns.remove(&conn);
    }

    /// Applies one request from `conn` (which must be connected) at node time `now_us`.
    pub fn apply(&mut self, conn: u64, now_us: u64, args: &[Bytes]) -> Applied {
        assert!(
            self.pending_pops.is_empty(),
            "model: a SPOP's reply was never settled"
        );
        let st = self
            .conns
            .get_mut(&conn)
            .expect("model: request on a connection the node does not know");
        let skip_this = std::mem::take(&mut st.skip_next);
        let mut cx = Cx {
            args,
            now_us,
            now_ms: now_us / 1000,
            conn,
            proto: st.proto,
            kill: Vec::new(),
            close_self: false,
            clear_skip: false,
            pushes: Vec::new(),
            in_exec: false,
        };
        let watch = multi::WatchProbe::before(self, cx.now_ms);
        let check = self.dispatch(&mut cx);
        if let Some(w) = watch {
            w.after(self, cx.now_ms);
        }
        let off = self.conns.get(&conn).is_some_and(|c| c.reply_off);
        let silent = off || (skip_this && !cx.clear_skip) || check == Check::NoReply;
        let mut pushes = cx.pushes;
        let reply = if check == Check::Pushed {
            // The reply is the confirmations: the first answers the request unless suppressed.
            if !(off || skip_this) {
                if let Some(p) = pushes.iter_mut().find(|p| p.conn == conn) {
                    p.answers = true;
                }
            }
            None
        } else {
            (!silent).then_some(check)
        };
        // A suppressed reply cannot tell which members a SPOP took (the workload avoids it).
        assert!(
            self.pending_pops.is_empty() || reply.is_some(),
            "model: a random SPOP whose reply is suppressed: {args:?}"
        );
        for v in &cx.kill {
            if let Some(c) = self.conns.get_mut(v) {
                c.killed = true;
            }
        }
        Applied {
            pushes,
            settle: !self.pending_pops.is_empty(),
            reply,
            close_self: cx.close_self,
            kill: cx.kill,
        }
    }

    /// Completes the pending SPOP of the request just applied from the node's reply to it,
    /// at the same node time.
    pub fn settle(&mut self, reply: &Frame, now_us: u64) {
        for key in std::mem::take(&mut self.pending_pops) {
            sets::settle_pop(self, &key, reply, now_us / 1000);
        }
    }

    fn dispatch(&mut self, cx: &mut Cx) -> Check {
        let spec = match self.resolve(cx) {
            Ok(spec) => spec,
            Err(e) => return multi::rejected(self, cx, e),
        };
        let st = &self.conns[&cx.conn];
        if st.proto == Proto::Resp2 && st.subscribed() && !pubsub::ALLOWED.contains(&spec.name) {
            return multi::rejected(
                self,
                cx,
                Check::err(&format!(
                    "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                    spec.name
                )),
            );
        }
        if st.multi.is_some() && !multi::RUN_INSIDE.contains(&spec.name) {
            return multi::queue(self, cx, spec);
        }
        (spec.run)(self, cx)
    }

    /// The command's spec, or the error Redis rejects it with (unknown, arity).
    fn resolve(&self, cx: &Cx) -> Result<&'static Spec, Check> {
        // Command names are short: lowercase on the stack.
        let raw = cx.arg(0);
        let mut buf = [0u8; 32];
        let lower = if raw.len() <= buf.len() {
            for (d, s) in buf.iter_mut().zip(raw) {
                *d = s.to_ascii_lowercase();
            }
            std::str::from_utf8(&buf[..raw.len()]).unwrap_or("\u{0}")
        } else {
            "\u{0}"
        };
        let name = lower;
        let t = table();
        let spec = if let Some(&(cname, _)) = CONTAINERS.iter().find(|(n, _)| *n == name) {
            if cx.argc() < 2 {
                if cname == "command" {
                    t["command"]
                } else {
                    return Err(arity_error(cname));
                }
            } else {
                let sub = String::from_utf8_lossy(cx.arg(1)).to_ascii_lowercase();
                let full = format!("{cname}|{sub}");
                match t.get(full.as_str()) {
                    Some(s) => s,
                    None => {
                        return Err(Check::err(&format!(
                            "ERR unknown subcommand '{}'. Try {} HELP.",
                            lossy_cut(cx.arg(1), 128),
                            cname.to_ascii_uppercase()
                        )));
                    }
                }
            }
        } else {
            match t.get(name) {
                Some(s) => s,
                None => return Err(unknown_command(cx.args)),
            }
        };
        let argc = cx.argc() as i32;
        let ok = if spec.arity >= 0 {
            argc == spec.arity
        } else {
            argc >= -spec.arity
        };
        if !ok {
            return Err(arity_error(spec.name));
        }
        Ok(spec)
    }

    /// Runs a queued command inside EXEC (arity was checked when it was queued).
    pub fn run_queued(&mut self, cx: &mut Cx) -> Check {
        match self.resolve(cx) {
            Ok(spec) => (spec.run)(self, cx),
            Err(e) => e,
        }
    }
}

pub fn arity_error(name: &str) -> Check {
    Check::err(&format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

fn lossy_cut(b: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&b[..b.len().min(max)]).into_owned()
}

fn unknown_command(args: &[Bytes]) -> Check {
    let mut rest = String::new();
    for a in &args[1..] {
        if rest.len() >= 128 {
            break;
        }
        let room = 128 - rest.len();
        rest.push('\'');
        rest.push_str(&lossy_cut(a, room));
        rest.push_str("' ");
    }
    Check::err(&format!(
        "ERR unknown command '{}', with args beginning with: {}",
        lossy_cut(&args[0], 128),
        rest
    ))
}

// ---- small helpers shared by the families ----

/// Redis's `string2ll`: optional `-`, digits, no leading zeros (except "0"), no `+`, no
/// spaces, no overflow.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let (neg, digits) = match b[0] {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if digits[0] == b'0' && (digits.len() > 1 || neg) {
        return None;
    }
    let mut v: i128 = 0;
    for &d in digits {
        v = v * 10 + (d - b'0') as i128;
    }
    if neg {
        v = -v;
    }
    i64::try_from(v).ok()
}

/// `key [count [<with>]]` of ZRANDMEMBER / HRANDFIELD: the count and whether the pairs were
/// asked for, checked before the key is looked at.
pub fn random_pick_args(cx: &Cx, with: &str) -> Result<(Option<i64>, bool), Check> {
    if cx.argc() < 3 {
        return Ok((None, false));
    }
    let count = match parse_i64(cx.arg(2)) {
        Some(n) if n > i64::MIN => n,
        _ => return Err(Check::err(NOT_INTEGER)),
    };
    if cx.argc() > 4 || (cx.argc() == 4 && !is(cx.arg(3), with)) {
        return Err(Check::err(SYNTAX));
    }
    Ok((Some(count), cx.argc() == 4))
}

/// ASCII case-insensitive comparison with an option keyword.
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

pub fn ok() -> Check {
    Check::Exact(Frame::Simple(Bytes::from_static(b"OK")))
}

pub fn int(n: i64) -> Check {
    Check::Exact(Frame::Integer(n))
}

pub fn bulk(b: &[u8]) -> Check {
    Check::Exact(Frame::Bulk(Bytes::copy_from_slice(b)))
}

pub fn null() -> Check {
    Check::Exact(Frame::Null)
}

pub fn simple(s: &str) -> Check {
    Check::Exact(Frame::Simple(Bytes::copy_from_slice(s.as_bytes())))
}

pub fn bulk_frame(b: &[u8]) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(b))
}

/// A map reply: `%` in RESP3, a flat array in RESP2.
pub fn map_frame(proto: Proto, pairs: Vec<(Frame, Frame)>) -> Frame {
    match proto {
        Proto::Resp3 => Frame::Map(pairs),
        Proto::Resp2 => Frame::Array(pairs.into_iter().flat_map(|(k, v)| [k, v]).collect()),
    }
}

/// The null array: `*-1` in RESP2, `_` in RESP3 (blocking pops, EXEC aborts).
pub fn null_array(proto: Proto) -> Frame {
    match proto {
        Proto::Resp2 => Frame::NullArray,
        Proto::Resp3 => Frame::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    #[test]
    fn strict_integers() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-7"), Some(-7));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            "",
            "-",
            "+1",
            "01",
            "-0",
            " 1",
            "1 ",
            "9223372036854775808",
            "1.0",
        ] {
            assert_eq!(parse_i64(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn dispatch_errors() {
        let mut m = Model::new();
        m.connect(1, "10.0.0.1:40001".into());
        let r = |m: &mut Model, args: &[&str]| {
            let args: Vec<Bytes> = args.iter().map(|a| b(a)).collect();
            m.apply(1, 1_000_000, &args).reply.unwrap()
        };
        assert_eq!(
            r(&mut m, &["nosuch", "a", "b"]),
            Check::err("ERR unknown command 'nosuch', with args beginning with: 'a' 'b' ")
        );
        assert_eq!(
            r(&mut m, &["GET"]),
            Check::err("ERR wrong number of arguments for 'get' command")
        );
        assert_eq!(
            r(&mut m, &["client"]),
            Check::err("ERR wrong number of arguments for 'client' command")
        );
        assert_eq!(
            r(&mut m, &["client", "foo"]),
            Check::err("ERR unknown subcommand 'foo'. Try CLIENT HELP.")
        );
        assert_eq!(
            r(&mut m, &["client", "setname"]),
            Check::err("ERR wrong number of arguments for 'client|setname' command")
        );
    }
}

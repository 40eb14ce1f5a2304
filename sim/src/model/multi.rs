//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH — Redis 7.0 semantics.
//!
//! - While MULTI is in force every command but EXEC, DISCARD, MULTI, WATCH, QUIT and RESET is
//!   queued (`+QUEUED`); a command rejected while queueing (unknown, wrong arity, refused in
//!   RESP2 subscribed mode) flags the transaction and EXEC then answers EXECABORT. A rejected
//!   EXEC itself aborts the transaction at once ("EXECABORT Transaction discarded because of:").
//! - EXEC runs the queue back to back and answers an array of the queued commands' replies,
//!   runtime errors included.
//! - WATCH: EXEC answers the null array when, since the WATCH, a watched key was modified by
//!   any connection (this one too) — a write that changed it, or one that Redis signals even
//!   when the value stays the same (SET, HSET, LSET, LTRIM, EXPIRE, ...: see
//!   [`Keyspace::touch`](super::Keyspace::touch)) — or deleted (DEL, FLUSHALL of a live key),
//!   or when a key live at WATCH time has expired since. A key already expired when watched
//!   changes nothing by being reclaimed (checked against redis-server 7.0.15).
//!
//! Modifications are found by comparing the watched keys' live entries around each command
//! (value, deadline, identity) plus the keys the command wrote without changing them.

use bytes::Bytes;
use lattice_resp::Frame;

use super::keyspace::Value;
use super::{null_array, ok, simple, spec, Cx, Model, Spec};
use crate::check::Check;

pub const SPECS: &[Spec] = &[
    spec("multi", 1, multi),
    spec("exec", 1, exec),
    spec("discard", 1, discard),
    spec("watch", -2, watch),
    spec("unwatch", 1, unwatch),
];

/// Commands executed at once inside MULTI instead of being queued.
pub const RUN_INSIDE: &[&str] = &["exec", "discard", "multi", "watch", "quit", "reset"];

/// A transaction being queued.
#[derive(Clone, Debug, Default)]
pub struct Queued {
    pub cmds: Vec<Vec<Bytes>>,
    /// A command was rejected while queueing: EXEC answers EXECABORT.
    pub errored: bool,
}

/// The reply to a command the dispatcher rejected (`e`), with its effect on a transaction.
pub fn rejected(m: &mut Model, cx: &mut Cx, e: Check) -> Check {
    let st = m.conns.get_mut(&cx.conn).expect("connected");
    if cx.arg(0).eq_ignore_ascii_case(b"exec") {
        st.multi = None;
        forget_watches(m, cx.conn);
        let Check::Exact(Frame::Error(msg)) = e else {
            unreachable!("rejections are errors")
        };
        let reason = msg.strip_prefix(b"ERR ").unwrap_or(&msg);
        return Check::err(&format!(
            "EXECABORT Transaction discarded because of: {}",
            String::from_utf8_lossy(reason)
        ));
    }
    if let Some(q) = st.multi.as_mut() {
        q.errored = true;
    }
    e
}

/// Queues a command of a connection in MULTI.
pub fn queue(m: &mut Model, cx: &mut Cx, spec: &Spec) -> Check {
    // Commands whose effect reaches past the reply (the connection's mode, SCAN iterations,
    // subscriptions) are not sent inside MULTI by the workload: their replies would land
    // inside EXEC's array, which the clients do not track.
    assert!(
        !matches!(
            spec.name,
            "hello"
                | "client|reply"
                | "client|kill"
                | "scan"
                | "subscribe"
                | "unsubscribe"
                | "psubscribe"
                | "punsubscribe"
        ),
        "model limitation: {} inside MULTI",
        spec.name
    );
    let st = m.conns.get_mut(&cx.conn).expect("connected");
    st.multi
        .as_mut()
        .expect("in MULTI")
        .cmds
        .push(cx.args.to_vec());
    simple("QUEUED")
}

fn forget_watches(m: &mut Model, conn: u64) {
    let st = m.conns.get_mut(&conn).expect("connected");
    st.watched.clear();
    st.dirty = false;
}

fn multi(m: &mut Model, cx: &mut Cx) -> Check {
    let st = m.conns.get_mut(&cx.conn).expect("connected");
    if st.multi.is_some() {
        return Check::err("ERR MULTI calls can not be nested");
    }
    st.multi = Some(Queued::default());
    ok()
}

fn discard(m: &mut Model, cx: &mut Cx) -> Check {
    let st = m.conns.get_mut(&cx.conn).expect("connected");
    if st.multi.take().is_none() {
        return Check::err("ERR DISCARD without MULTI");
    }
    forget_watches(m, cx.conn);
    ok()
}

fn exec(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    let st = m.conns.get_mut(&cx.conn).expect("connected");
    let Some(q) = st.multi.take() else {
        return Check::err("ERR EXEC without MULTI");
    };
    let expired = st
        .watched
        .iter()
        .any(|(k, live_then)| *live_then && !m.db.exists(k, now));
    let st = m.conns.get_mut(&cx.conn).expect("connected");
    let dirty = st.dirty || expired;
    forget_watches(m, cx.conn);
    if q.errored {
        return Check::err("EXECABORT Transaction discarded because of previous errors.");
    }
    if dirty {
        return Check::Exact(null_array(cx.proto));
    }
    let mut replies = Vec::with_capacity(q.cmds.len());
    for args in &q.cmds {
        let mut sub = Cx {
            args,
            now_us: cx.now_us,
            now_ms: cx.now_ms,
            conn: cx.conn,
            proto: cx.proto,
            kill: Vec::new(),
            close_self: false,
            clear_skip: false,
            pushes: Vec::new(),
            in_exec: true,
        };
        replies.push(m.run_queued(&mut sub));
        cx.pushes.append(&mut sub.pushes);
        cx.kill.append(&mut sub.kill);
        cx.close_self |= sub.close_self;
    }
    Check::Elements(replies)
}

fn watch(m: &mut Model, cx: &mut Cx) -> Check {
    let now = cx.now_ms;
    if m.conns[&cx.conn].multi.is_some() {
        return Check::err("ERR WATCH inside MULTI is not allowed");
    }
    for key in &cx.args[1..] {
        let live = m.db.exists(key, now);
        let st = m.conns.get_mut(&cx.conn).expect("connected");
        st.watched.entry(key.clone()).or_insert(live);
    }
    ok()
}

fn unwatch(m: &mut Model, cx: &mut Cx) -> Check {
    forget_watches(m, cx.conn);
    ok()
}

/// What a watched key looked like before a command: its live value, deadline and identity.
type Seen = Option<(Value, Option<u64>, u64)>;

/// The watched keys' state before a command, to find the ones it modified.
pub struct WatchProbe {
    before: Vec<(Bytes, Seen)>,
}

fn seen(m: &Model, key: &[u8], now_ms: u64) -> Seen {
    m.db.get(key, now_ms)
        .map(|e| (e.value.clone(), e.deadline, e.birth))
}

impl WatchProbe {
    /// `None` when no connection watches anything (the common case costs nothing).
    pub fn before(m: &mut Model, now_ms: u64) -> Option<WatchProbe> {
        let mut keys: Vec<&Bytes> = m.conns.values().flat_map(|c| c.watched.keys()).collect();
        if keys.is_empty() {
            return None;
        }
        keys.sort_unstable();
        keys.dedup();
        let before = keys
            .into_iter()
            .map(|k| (k.clone(), seen(m, k, now_ms)))
            .collect();
        m.db.track_writes(true);
        Some(WatchProbe { before })
    }

    /// Marks the watchers of every key the command modified.
    pub fn after(self, m: &mut Model, now_ms: u64) {
        let written = m.db.track_writes(false);
        for (key, was) in self.before {
            let changed = written.contains(&key) || seen(m, &key, now_ms) != was;
            if !changed {
                continue;
            }
            for st in m.conns.values_mut() {
                if st.watched.contains_key(&key) {
                    st.dirty = true;
                }
            }
        }
    }
}

//! Pub/sub on one node: SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PUBLISH and PUBSUB
//! CHANNELS / NUMSUB / NUMPAT — Redis 7.0 semantics.
//!
//! - (Un)subscribe confirmations and messages are pushes: arrays in RESP2, push frames in
//!   RESP3, written even under CLIENT REPLY OFF/SKIP; one confirmation per channel named.
//! - PUBLISH delivers to this node's subscribers of the channel, then to every (pattern,
//!   connection) whose pattern matches, and answers how many deliveries it made. One
//!   connection's pattern messages may come in any order (Redis walks its patterns in hash
//!   order); so may the confirmations of UNSUBSCRIBE without arguments.
//! - RESP2 connections with a subscription may only run (P)SUBSCRIBE, (P)UNSUBSCRIBE, PING,
//!   QUIT and RESET (the dispatcher checks [`ALLOWED`]); PING answers `["pong", arg]` there.

use bytes::Bytes;
use lattice_resp::Frame;

use super::glob;
use super::{bulk_frame, int, spec, Cx, Model, Proto, Spec};
use crate::check::Check;

pub const SPECS: &[Spec] = &[
    spec("subscribe", -2, subscribe),
    spec("unsubscribe", -1, unsubscribe),
    spec("psubscribe", -2, psubscribe),
    spec("punsubscribe", -1, punsubscribe),
    spec("publish", 3, publish),
    spec("pubsub|channels", -2, channels),
    spec("pubsub|numsub", -2, numsub),
    spec("pubsub|numpat", 2, numpat),
    spec("pubsub|help", 2, super::keys::help),
];

/// Commands a RESP2 connection may run while subscribed.
pub const ALLOWED: &[&str] = &[
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ping",
    "quit",
    "reset",
];

/// A push to a connection speaking `proto`.
fn push_frame(proto: Proto, items: Vec<Frame>) -> Frame {
    match proto {
        Proto::Resp2 => Frame::Array(items),
        Proto::Resp3 => Frame::Push(items),
    }
}

fn confirmation(proto: Proto, kind: &str, name: Option<&[u8]>, count: i64) -> Frame {
    push_frame(
        proto,
        vec![
            bulk_frame(kind.as_bytes()),
            name.map_or(Frame::Null, bulk_frame),
            Frame::Integer(count),
        ],
    )
}

fn subscribe_generic(m: &mut Model, cx: &mut Cx, pattern: bool) -> Check {
    let kind = if pattern { "psubscribe" } else { "subscribe" };
    let args = cx.args;
    for name in &args[1..] {
        let st = m.conns.get_mut(&cx.conn).expect("connected");
        if pattern {
            st.patterns.insert(name.clone());
        } else {
            st.channels.insert(name.clone());
        }
        let f = confirmation(cx.proto, kind, Some(name), st.subscriptions());
        cx.push(cx.conn, Check::Exact(f), 0);
    }
    Check::Pushed
}

fn unsubscribe_generic(m: &mut Model, cx: &mut Cx, pattern: bool) -> Check {
    let kind = if pattern {
        "punsubscribe"
    } else {
        "unsubscribe"
    };
    let args = cx.args;
    if args.len() > 1 {
        for name in &args[1..] {
            let st = m.conns.get_mut(&cx.conn).expect("connected");
            if pattern {
                st.patterns.remove(name);
            } else {
                st.channels.remove(name);
            }
            let f = confirmation(cx.proto, kind, Some(name), st.subscriptions());
            cx.push(cx.conn, Check::Exact(f), 0);
        }
        return Check::Pushed;
    }
    let st = m.conns.get_mut(&cx.conn).expect("connected");
    let set = if pattern {
        &mut st.patterns
    } else {
        &mut st.channels
    };
    let all: Vec<Bytes> = std::mem::take(set).into_iter().collect();
    let rest = st.subscriptions();
    if all.is_empty() {
        cx.push(
            cx.conn,
            Check::Exact(confirmation(cx.proto, kind, None, rest)),
            0,
        );
        return Check::Pushed;
    }
    // In the order Redis's dictionary gives: any, with the count falling by one each time.
    let n = all.len() as i64;
    for i in 0..n {
        let options = all
            .iter()
            .map(|name| confirmation(cx.proto, kind, Some(name), rest + n - 1 - i))
            .collect();
        cx.push(cx.conn, Check::AnyOf(options), 0);
    }
    Check::Pushed
}

fn subscribe(m: &mut Model, cx: &mut Cx) -> Check {
    subscribe_generic(m, cx, false)
}

fn psubscribe(m: &mut Model, cx: &mut Cx) -> Check {
    subscribe_generic(m, cx, true)
}

fn unsubscribe(m: &mut Model, cx: &mut Cx) -> Check {
    unsubscribe_generic(m, cx, false)
}

fn punsubscribe(m: &mut Model, cx: &mut Cx) -> Check {
    unsubscribe_generic(m, cx, true)
}

fn publish(m: &mut Model, cx: &mut Cx) -> Check {
    let (channel, message) = (cx.args[1].clone(), cx.args[2].clone());
    let mut receivers = 0;
    let mut deliveries: Vec<(u64, Check, u64)> = Vec::new();
    for (&id, st) in &m.conns {
        if st.channels.contains(&channel) {
            let f = push_frame(
                st.proto,
                vec![
                    bulk_frame(b"message"),
                    bulk_frame(&channel),
                    bulk_frame(&message),
                ],
            );
            deliveries.push((id, Check::Exact(f), 0));
            receivers += 1;
        }
    }
    for (&id, st) in &m.conns {
        let matching: Vec<&Bytes> = st
            .patterns
            .iter()
            .filter(|p| glob::matches(p, &channel))
            .collect();
        // Several pattern messages to one connection: any order among them.
        let group = if matching.len() > 1 { id } else { 0 };
        for p in matching {
            let f = push_frame(
                st.proto,
                vec![
                    bulk_frame(b"pmessage"),
                    bulk_frame(p),
                    bulk_frame(&channel),
                    bulk_frame(&message),
                ],
            );
            deliveries.push((id, Check::Exact(f), group));
            receivers += 1;
        }
    }
    for (id, check, group) in deliveries {
        cx.push(id, check, group);
    }
    int(receivers)
}

fn channels(m: &mut Model, cx: &mut Cx) -> Check {
    if cx.argc() > 3 {
        return super::arity_error("pubsub|channels");
    }
    let pattern = cx.args.get(2);
    let mut names: Vec<Bytes> = m
        .conns
        .values()
        .flat_map(|c| c.channels.iter())
        .filter(|ch| pattern.is_none_or(|p| glob::matches(p, ch)))
        .cloned()
        .collect();
    names.sort_unstable();
    names.dedup();
    Check::Unordered(names)
}

fn numsub(m: &mut Model, cx: &mut Cx) -> Check {
    let mut items = Vec::new();
    for ch in &cx.args[2..] {
        let n = m.conns.values().filter(|c| c.channels.contains(ch)).count();
        items.push(bulk_frame(ch));
        items.push(Frame::Integer(n as i64));
    }
    Check::Exact(Frame::Array(items))
}

fn numpat(m: &mut Model, _cx: &mut Cx) -> Check {
    let mut all: Vec<&Bytes> = m.conns.values().flat_map(|c| c.patterns.iter()).collect();
    all.sort_unstable();
    all.dedup();
    int(all.len() as i64)
}

//! The event trace: every step of a run, encoded canonically and hashed.
//!
//! Each event is encoded into bytes (a tag, the virtual time, then its fields little-endian and
//! payloads length-prefixed) and fed to a streaming xxh3; the final digest is printed as
//! `trace=<hex>`, so two runs of a seed agree on the digest exactly when they agree on every
//! event. The last events are kept in a ring for failure reports; `--trace` prints them all; the
//! determinism check records one hash per event to find the first difference.

use std::collections::VecDeque;
use std::fmt::Write as _;

use bytes::{Bytes, BytesMut};
use lattice_resp::{encode_frame, Frame};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

#[derive(Clone, Debug)]
pub enum TraceEvent {
    Phase(&'static str),
    Fault(String),
    Connect {
        client: u32,
        conn: u64,
        node: u32,
    },
    Send {
        client: u32,
        conn: u64,
        data: Bytes,
    },
    /// A segment reached its receiver (`to_node`: the node side).
    Deliver {
        conn: u64,
        to_node: bool,
        kind: &'static str,
        len: u32,
    },
    Request {
        node: u32,
        conn: u64,
        now_us: u64,
        args: Vec<Bytes>,
    },
    ProtocolError {
        node: u32,
        conn: u64,
        message: String,
    },
    Output {
        node: u32,
        conn: u64,
        data: Bytes,
    },
    NodeClose {
        node: u32,
        conn: u64,
    },
    Reply {
        client: u32,
        conn: u64,
        frame: Frame,
    },
    Closed {
        conn: u64,
        why: &'static str,
    },
    /// The node side of a connection stopped reading (its socket is full) or read again.
    Flow {
        conn: u64,
        what: &'static str,
    },
    Timer {
        node: u32,
        now_us: u64,
    },
    Peer {
        from: u32,
        to: u32,
        len: u32,
    },
    Process {
        node: u32,
        what: &'static str,
    },
    /// A replica handed the driver a message for replica `to_id` (replicated mode).
    PeerSend {
        from: u32,
        to_id: u32,
        data: Bytes,
        /// Why the driver dropped it instead of sending, if it did.
        dropped: Option<&'static str>,
    },
    /// A peer message handed to a replica (replicated mode).
    PeerRecv {
        from_id: u32,
        node: u32,
        data: Bytes,
    },
    /// The driver told `node` that its link to replica `peer` is up (or down).
    PeerLink {
        node: u32,
        peer: u32,
        up: bool,
    },
}

impl TraceEvent {
    fn encode(&self, at: u64, out: &mut Vec<u8>, scratch: &mut BytesMut) {
        fn u(out: &mut Vec<u8>, v: u64) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        fn b(out: &mut Vec<u8>, v: &[u8]) {
            u(out, v.len() as u64);
            out.extend_from_slice(v);
        }
        out.clear();
        let tag: u8 = match self {
            TraceEvent::Phase(_) => 1,
            TraceEvent::Fault(_) => 2,
            TraceEvent::Connect { .. } => 3,
            TraceEvent::Send { .. } => 4,
            TraceEvent::Deliver { .. } => 5,
            TraceEvent::Request { .. } => 6,
            TraceEvent::ProtocolError { .. } => 7,
            TraceEvent::Output { .. } => 8,
            TraceEvent::NodeClose { .. } => 9,
            TraceEvent::Reply { .. } => 10,
            TraceEvent::Closed { .. } => 11,
            TraceEvent::Timer { .. } => 12,
            TraceEvent::Peer { .. } => 13,
            TraceEvent::Process { .. } => 14,
            TraceEvent::PeerSend { .. } => 15,
            TraceEvent::PeerRecv { .. } => 16,
            TraceEvent::PeerLink { .. } => 17,
            TraceEvent::Flow { .. } => 18,
        };
        out.push(tag);
        u(out, at);
        match self {
            TraceEvent::Phase(p) => b(out, p.as_bytes()),
            TraceEvent::Fault(f) => b(out, f.as_bytes()),
            TraceEvent::Connect { client, conn, node } => {
                u(out, *client as u64);
                u(out, *conn);
                u(out, *node as u64);
            }
            TraceEvent::Send { client, conn, data } => {
                u(out, *client as u64);
                u(out, *conn);
                b(out, data);
            }
            TraceEvent::Deliver {
                conn,
                to_node,
                kind,
                len,
            } => {
                u(out, *conn);
                u(out, *to_node as u64);
                b(out, kind.as_bytes());
                u(out, *len as u64);
            }
            TraceEvent::Request {
                node,
                conn,
                now_us,
                args,
            } => {
                u(out, *node as u64);
                u(out, *conn);
                u(out, *now_us);
                u(out, args.len() as u64);
                for a in args {
                    b(out, a);
                }
            }
            TraceEvent::ProtocolError {
                node,
                conn,
                message,
            } => {
                u(out, *node as u64);
                u(out, *conn);
                b(out, message.as_bytes());
            }
            TraceEvent::Output { node, conn, data } => {
                u(out, *node as u64);
                u(out, *conn);
                b(out, data);
            }
            TraceEvent::NodeClose { node, conn } => {
                u(out, *node as u64);
                u(out, *conn);
            }
            TraceEvent::Reply {
                client,
                conn,
                frame,
            } => {
                u(out, *client as u64);
                u(out, *conn);
                scratch.clear();
                encode_frame(frame, scratch);
                b(out, scratch);
            }
            TraceEvent::Closed { conn, why } | TraceEvent::Flow { conn, what: why } => {
                u(out, *conn);
                b(out, why.as_bytes());
            }
            TraceEvent::Timer { node, now_us } => {
                u(out, *node as u64);
                u(out, *now_us);
            }
            TraceEvent::Peer { from, to, len } => {
                u(out, *from as u64);
                u(out, *to as u64);
                u(out, *len as u64);
            }
            TraceEvent::Process { node, what } => {
                u(out, *node as u64);
                b(out, what.as_bytes());
            }
            TraceEvent::PeerSend {
                from,
                to_id,
                data,
                dropped,
            } => {
                u(out, *from as u64);
                u(out, *to_id as u64);
                b(out, data);
                b(out, dropped.unwrap_or("").as_bytes());
            }
            TraceEvent::PeerRecv {
                from_id,
                node,
                data,
            } => {
                u(out, *from_id as u64);
                u(out, *node as u64);
                b(out, data);
            }
            TraceEvent::PeerLink { node, peer, up } => {
                u(out, *node as u64);
                u(out, *peer as u64);
                u(out, *up as u64);
            }
        }
    }

    /// One human-readable line.
    pub fn render(&self, at: u64) -> String {
        let mut s = format!("{:>4}.{:06} ", at / 1_000_000, at % 1_000_000);
        match self {
            TraceEvent::Phase(p) => {
                let _ = write!(s, "PHASE {p}");
            }
            TraceEvent::Fault(f) => {
                let _ = write!(s, "FAULT {f}");
            }
            TraceEvent::Connect { client, conn, node } => {
                let _ = write!(s, "CONNECT client{client} c{conn} -> n{node}");
            }
            TraceEvent::Send { client, conn, data } => {
                let _ = write!(s, "SEND client{client} c{conn} {}", escape(data, 160));
            }
            TraceEvent::Deliver {
                conn,
                to_node,
                kind,
                len,
            } => {
                let dir = if *to_node { "->node" } else { "->client" };
                let _ = write!(s, "DELIVER c{conn} {dir} {kind} {len}B");
            }
            TraceEvent::Request {
                node,
                conn,
                now_us,
                args,
            } => {
                let _ = write!(s, "EXEC n{node} c{conn} now={now_us}");
                for a in args {
                    s.push(' ');
                    s.push_str(&escape(a, 60));
                }
            }
            TraceEvent::ProtocolError {
                node,
                conn,
                message,
            } => {
                let _ = write!(s, "PROTOCOL-ERROR n{node} c{conn} {message}");
            }
            TraceEvent::Output { node, conn, data } => {
                let _ = write!(s, "OUTPUT n{node} c{conn} {}", escape(data, 160));
            }
            TraceEvent::NodeClose { node, conn } => {
                let _ = write!(s, "NODE-CLOSE n{node} c{conn}");
            }
            TraceEvent::Reply {
                client,
                conn,
                frame,
            } => {
                let _ = write!(s, "REPLY client{client} c{conn} {}", show_frame(frame));
            }
            TraceEvent::Closed { conn, why } => {
                let _ = write!(s, "CLOSED c{conn} {why}");
            }
            TraceEvent::Flow { conn, what } => {
                let _ = write!(s, "FLOW c{conn} {what}");
            }
            TraceEvent::Timer { node, now_us } => {
                let _ = write!(s, "TIMER n{node} now={now_us}");
            }
            TraceEvent::Peer { from, to, len } => {
                let _ = write!(s, "PEER n{from} -> n{to} {len}B");
            }
            TraceEvent::Process { node, what } => {
                let _ = write!(s, "PROCESS n{node} {what}");
            }
            TraceEvent::PeerSend {
                from,
                to_id,
                data,
                dropped,
            } => {
                let _ = write!(s, "PEER-SEND n{from} -> id{to_id} {}B", data.len());
                if let Some(why) = dropped {
                    let _ = write!(s, " dropped ({why})");
                }
            }
            TraceEvent::PeerRecv {
                from_id,
                node,
                data,
            } => {
                let _ = write!(s, "PEER-RECV id{from_id} -> n{node} {}B", data.len());
            }
            TraceEvent::PeerLink { node, peer, up } => {
                let what = if *up { "up" } else { "down" };
                let _ = write!(s, "PEER-LINK n{node} id{peer} {what}");
            }
        }
        s
    }
}

/// Bytes as text: printable ASCII kept, the rest escaped, cut at `max` characters.
pub fn escape(b: &[u8], max: usize) -> String {
    let mut s = String::new();
    for &c in b {
        if s.len() >= max {
            s.push_str("...");
            break;
        }
        match c {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(c as char),
            _ => {
                let _ = write!(s, "\\x{c:02x}");
            }
        }
    }
    s
}

/// A frame in a compact, readable form.
pub fn show_frame(f: &Frame) -> String {
    match f {
        Frame::Simple(b) => format!("+{}", escape(b, 80)),
        Frame::Error(b) => format!("-{}", escape(b, 200)),
        Frame::Integer(n) => format!(":{n}"),
        Frame::Bulk(b) => format!("\"{}\"", escape(b, 80)),
        Frame::Null => "(nil)".into(),
        Frame::NullArray => "(nil-array)".into(),
        Frame::Boolean(b) => format!("#{b}"),
        Frame::Double(d) => format!(",{d}"),
        Frame::BigNumber(b) => format!("({}", escape(b, 80)),
        Frame::Verbatim { text, .. } => format!("={}", escape(text, 80)),
        Frame::Array(items) | Frame::Set(items) | Frame::Push(items) => {
            let inner: Vec<String> = items.iter().take(20).map(show_frame).collect();
            let more = if items.len() > 20 { ", ..." } else { "" };
            format!("[{}{more}]", inner.join(", "))
        }
        Frame::Map(pairs) => {
            let inner: Vec<String> = pairs
                .iter()
                .take(20)
                .map(|(k, v)| format!("{}: {}", show_frame(k), show_frame(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
        Frame::Attribute { frame, .. } => format!("|attr| {}", show_frame(frame)),
    }
}

pub struct Tracer {
    digest: Xxh3,
    buf: Vec<u8>,
    scratch: BytesMut,
    ring: VecDeque<(u64, TraceEvent)>,
    ring_cap: usize,
    /// Print every event as it happens (`--trace`).
    pub print: bool,
    /// One hash per event (the determinism check).
    pub hashes: Option<Vec<u64>>,
    /// Render these event indices (inclusive range) into `captured`.
    pub capture: Option<(u64, u64)>,
    pub captured: Vec<String>,
    count: u64,
}

impl Tracer {
    pub fn new(ring_cap: usize) -> Tracer {
        Tracer {
            digest: Xxh3::new(),
            buf: Vec::with_capacity(256),
            scratch: BytesMut::new(),
            ring: VecDeque::with_capacity(ring_cap),
            ring_cap,
            print: false,
            hashes: None,
            capture: None,
            captured: Vec::new(),
            count: 0,
        }
    }

    pub fn record(&mut self, at: u64, ev: TraceEvent) {
        ev.encode(at, &mut self.buf, &mut self.scratch);
        self.digest.update(&self.buf);
        if let Some(h) = self.hashes.as_mut() {
            h.push(xxh3_64(&self.buf));
        }
        if let Some((lo, hi)) = self.capture {
            if (lo..=hi).contains(&self.count) {
                self.captured
                    .push(format!("#{} {}", self.count, ev.render(at)));
            }
        }
        if self.print {
            println!("{}", ev.render(at));
        }
        if self.ring.len() == self.ring_cap {
            self.ring.pop_front();
        }
        self.ring.push_back((at, ev));
        self.count += 1;
    }

    /// The events still in the ring, oldest first.
    #[cfg(test)]
    pub fn ring_events(&self) -> impl Iterator<Item = &TraceEvent> {
        self.ring.iter().map(|(_, e)| e)
    }

    pub fn events(&self) -> u64 {
        self.count
    }

    /// The digest of everything recorded so far, as 16 hex digits.
    pub fn digest(&self) -> String {
        format!("{:016x}", self.digest.digest())
    }

    /// The last events, rendered, oldest first.
    pub fn tail(&self, n: usize) -> Vec<String> {
        let skip = self.ring.len().saturating_sub(n);
        self.ring
            .iter()
            .skip(skip)
            .map(|(at, ev)| ev.render(*at))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_depends_on_every_field() {
        let run = |args: &[&str], now: u64| {
            let mut t = Tracer::new(4);
            t.record(5, TraceEvent::Phase("safety"));
            t.record(
                9,
                TraceEvent::Request {
                    node: 0,
                    conn: 1,
                    now_us: now,
                    args: args.iter().map(|a| Bytes::from(a.to_string())).collect(),
                },
            );
            t.digest()
        };
        let a = run(&["SET", "k", "v"], 1);
        assert_eq!(a, run(&["SET", "k", "v"], 1));
        assert_ne!(a, run(&["SET", "k", "w"], 1));
        assert_ne!(a, run(&["SET", "kv"], 1));
        assert_ne!(a, run(&["SET", "k", "v"], 2));
    }

    #[test]
    fn ring_keeps_the_tail() {
        let mut t = Tracer::new(3);
        for i in 0..10 {
            t.record(i, TraceEvent::Timer { node: 0, now_us: i });
        }
        let tail = t.tail(10);
        assert_eq!(tail.len(), 3);
        assert!(tail[2].contains("now=9"));
        assert_eq!(t.events(), 10);
    }
}

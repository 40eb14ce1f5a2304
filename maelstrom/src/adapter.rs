//! Maelstrom messages in, one `lattice_node::Node` driven, Maelstrom messages out.
//!
//! The adapter owns no clock and no IO: the binary (`main.rs`) passes the time with every call
//! and writes out what [`Adapter::take_outgoing`] returns, so tests drive it with made-up time.
//! Client requests become Redis commands on one internal connection; because the adapter feeds
//! the node one message at a time and the node answers these commands at once, a `cas` (GET,
//! compare, SET) is atomic on this node.

use std::str::FromStr;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use lattice_node::{Buggify, Config, ConnId, Input, Micros, Node, NodeId, Output};
use lattice_resp::{decode_frame, Frame};
use serde_json::{json, Map, Value};

use crate::proto::{code, Message};

/// The internal connection every client request runs on.
const CLIENT_CONN: ConnId = ConnId(1);
/// Body type of node-to-node messages; `data` is the node's peer message in base64.
pub const PEER_TYPE: &str = "lattice_peer";
/// Most nodes a cluster may have: node ids must fit the node's `NodeId` and the cluster stays a
/// size Maelstrom runs (it tests with a handful of nodes).
pub const MAX_NODES: usize = 1024;

/// Keys the workloads use. lin-kv keys get a prefix so they never meet these.
const COUNTER_KEY: &[u8] = b"maelstrom:counter";
const GSET_KEY: &[u8] = b"maelstrom:g-set";
const BROADCAST_KEY: &[u8] = b"maelstrom:broadcast";
const KV_PREFIX: &str = "maelstrom:kv:";

/// Which Maelstrom workload the node serves. Only needed to shape the reply to a keyless
/// `read`, which counters, g-set and broadcast all send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    LinKv,
    GCounter,
    PnCounter,
    GSet,
    Broadcast,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::LinKv => "lin-kv",
            Workload::GCounter => "g-counter",
            Workload::PnCounter => "pn-counter",
            Workload::GSet => "g-set",
            Workload::Broadcast => "broadcast",
        }
    }

    pub const ALL: [Workload; 5] = [
        Workload::LinKv,
        Workload::GCounter,
        Workload::PnCounter,
        Workload::GSet,
        Workload::Broadcast,
    ];
}

impl FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                format!("unknown workload {s:?}: expected lin-kv, g-counter, pn-counter, g-set or broadcast")
            })
    }
}

/// Parses a Maelstrom node id `n<k>` (k ≥ 1) into the node's id.
pub fn parse_node_id(id: &str) -> Result<NodeId, String> {
    let n = id
        .strip_prefix('n')
        .and_then(|d| {
            if d.is_empty() || !d.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                d.parse::<u32>().ok()
            }
        })
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("node id {id:?} is not of the form n1, n2, ..."))?;
    Ok(NodeId(n))
}

/// Canonical text for a JSON value: serde_json orders object keys, so equal values give equal
/// strings, which makes them usable as Redis keys and comparable as Redis values.
fn canonical(v: &Value) -> String {
    v.to_string()
}

struct Running {
    node: Node,
    name: String,
}

/// Why a request got an error reply.
struct Failure {
    code: i64,
    text: String,
}

impl Failure {
    fn new(code: i64, text: impl Into<String>) -> Failure {
        Failure {
            code,
            text: text.into(),
        }
    }
}

type Reply = Result<Map<String, Value>, Failure>;

pub struct Adapter {
    running: Option<Running>,
    /// Fixed by the command line, or learnt from the first workload-specific request.
    workload: Option<Workload>,
    seed: u64,
    next_msg_id: u64,
    /// Reply bytes of the internal connection not yet decoded.
    reply_buf: BytesMut,
    outgoing: Vec<Message>,
    /// Peer messages that could not be decoded, for the log and tests.
    pub bad_peer_messages: u64,
}

impl Adapter {
    /// `workload`: fixes how keyless reads answer (otherwise learnt from the requests seen).
    /// `seed`: mixed with the node id to seed the node's RNG.
    pub fn new(workload: Option<Workload>, seed: u64) -> Adapter {
        Adapter {
            running: None,
            workload,
            seed,
            next_msg_id: 1,
            reply_buf: BytesMut::new(),
            outgoing: Vec::new(),
            bad_peer_messages: 0,
        }
    }

    /// The node, once `init` has arrived (tests and invariant checks).
    pub fn node(&self) -> Option<&Node> {
        self.running.as_ref().map(|r| &r.node)
    }

    /// Messages to write, in order.
    pub fn take_outgoing(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.outgoing)
    }

    /// When the node wants `handle_timeout`.
    pub fn poll_timeout(&self) -> Option<Micros> {
        self.running.as_ref().and_then(|r| r.node.poll_timeout())
    }

    pub fn handle_timeout(&mut self, now: Micros) {
        if let Some(r) = self.running.as_mut() {
            r.node.handle_timeout(now);
        }
        self.drain_node();
    }

    /// One line from stdin. Malformed lines are reported as `Err` (for the log) and ignored.
    pub fn handle_line(&mut self, now: Micros, line: &str) -> Result<(), String> {
        if line.trim().is_empty() {
            return Ok(());
        }
        let msg = Message::parse(line)?;
        self.handle_message(now, msg)
    }

    pub fn handle_message(&mut self, now: Micros, msg: Message) -> Result<(), String> {
        let ty = msg.body_type().to_string();
        if ty == PEER_TYPE {
            return self.peer_message(now, &msg);
        }
        if msg.in_reply_to().is_some() && msg.msg_id().is_none() {
            // A reply to something we never asked: nothing to answer.
            return Err(format!("ignoring unsolicited reply of type {ty:?}"));
        }
        let result = if ty == "init" {
            self.init(now, &msg)
        } else if self.running.is_none() {
            Err(Failure::new(
                code::TEMPORARILY_UNAVAILABLE,
                "this node has not received init yet",
            ))
        } else {
            self.request(now, &ty, &msg.body)
        };
        let from = self
            .running
            .as_ref()
            .map(|r| r.name.clone())
            .unwrap_or_else(|| msg.dest.clone());
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        let reply = match result {
            Ok(body) => msg.reply(&from, id, body),
            Err(f) => msg.error_reply(&from, id, f.code, &f.text),
        };
        self.outgoing.push(reply);
        self.drain_node();
        Ok(())
    }

    fn init(&mut self, now: Micros, msg: &Message) -> Reply {
        if self.running.is_some() {
            return Err(Failure::new(
                code::MALFORMED_REQUEST,
                "init was already received",
            ));
        }
        let body = &msg.body;
        let name = body
            .get("node_id")
            .and_then(Value::as_str)
            .ok_or_else(|| Failure::new(code::MALFORMED_REQUEST, "init needs node_id"))?;
        let me = parse_node_id(name).map_err(|e| Failure::new(code::MALFORMED_REQUEST, e))?;
        let ids = body
            .get("node_ids")
            .and_then(Value::as_array)
            .ok_or_else(|| Failure::new(code::MALFORMED_REQUEST, "init needs node_ids"))?;
        if ids.is_empty() || ids.len() > MAX_NODES {
            return Err(Failure::new(
                code::MALFORMED_REQUEST,
                format!("init needs 1 to {MAX_NODES} node_ids"),
            ));
        }
        let mut peers = Vec::new();
        let mut found_self = false;
        for id in ids {
            let s = id
                .as_str()
                .ok_or_else(|| Failure::new(code::MALFORMED_REQUEST, "node_ids must be strings"))?;
            let peer = parse_node_id(s).map_err(|e| Failure::new(code::MALFORMED_REQUEST, e))?;
            if peer == me {
                found_self = true;
            } else if !peers.contains(&peer) {
                peers.push(peer);
            }
        }
        if !found_self {
            return Err(Failure::new(
                code::MALFORMED_REQUEST,
                format!("node_ids does not contain this node's id {name:?}"),
            ));
        }
        let mut config = Config::default();
        config.node_id = me.0;
        config.cluster_size = peers.len() + 1; // duplicates in node_ids count once
        let seed = self.seed ^ (u64::from(me.0)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut node = Node::new(config, seed, Buggify::disabled(), now);
        node.handle(
            now,
            Input::Connected {
                conn: CLIENT_CONN,
                peer_addr: "maelstrom-clients:0".into(),
                local_addr: format!("{name}:0"),
            },
        );
        for peer in peers {
            node.handle(now, Input::PeerUp { peer });
        }
        self.running = Some(Running {
            node,
            name: name.to_string(),
        });
        Ok(body_of("init_ok"))
    }

    fn peer_message(&mut self, now: Micros, msg: &Message) -> Result<(), String> {
        let Some(r) = self.running.as_mut() else {
            return Err("peer message before init dropped".into());
        };
        let peer = match parse_node_id(&msg.src) {
            Ok(p) => p,
            Err(e) => {
                self.bad_peer_messages += 1;
                return Err(format!("peer message from a bad source: {e}"));
            }
        };
        let Some(data) = msg.body.get("data").and_then(Value::as_str) else {
            self.bad_peer_messages += 1;
            return Err("peer message without data".into());
        };
        let data = match B64.decode(data) {
            Ok(d) => d,
            Err(e) => {
                self.bad_peer_messages += 1;
                return Err(format!("peer message data is not base64: {e}"));
            }
        };
        r.node.handle(
            now,
            Input::PeerMessage {
                peer,
                data: Bytes::from(data),
            },
        );
        self.drain_node();
        Ok(())
    }

    fn learn(&mut self, w: Workload) {
        if self.workload.is_none() {
            self.workload = Some(w);
        }
    }

    fn request(&mut self, now: Micros, ty: &str, body: &Value) -> Reply {
        match ty {
            "echo" => {
                let mut m = body_of("echo_ok");
                m.insert(
                    "echo".into(),
                    body.get("echo").cloned().unwrap_or(Value::Null),
                );
                Ok(m)
            }
            "read" => match body.get("key") {
                Some(key) => {
                    self.learn(Workload::LinKv);
                    let v = self.kv_get(now, key)?;
                    let v = v.ok_or_else(|| {
                        Failure::new(code::KEY_DOES_NOT_EXIST, "key does not exist")
                    })?;
                    Ok(with(body_of("read_ok"), "value", v))
                }
                None => self.keyless_read(now),
            },
            "write" => {
                self.learn(Workload::LinKv);
                let key = field(body, "key")?;
                let value = field(body, "value")?;
                self.kv_set(now, key, value)?;
                Ok(body_of("write_ok"))
            }
            "cas" => {
                self.learn(Workload::LinKv);
                let key = field(body, "key")?;
                let from = field(body, "from")?;
                let to = field(body, "to")?;
                let create = body
                    .get("create_if_not_exists")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                match self.kv_get(now, key)? {
                    None if create => {}
                    None => {
                        return Err(Failure::new(code::KEY_DOES_NOT_EXIST, "key does not exist"))
                    }
                    Some(cur) if cur == *from => {}
                    Some(cur) => {
                        return Err(Failure::new(
                            code::PRECONDITION_FAILED,
                            format!("expected {from}, had {cur}"),
                        ))
                    }
                }
                self.kv_set(now, key, to)?;
                Ok(body_of("cas_ok"))
            }
            "add" => {
                if let Some(delta) = body.get("delta") {
                    let delta = delta.as_i64().ok_or_else(|| {
                        Failure::new(code::MALFORMED_REQUEST, "delta must be an integer")
                    })?;
                    if self.workload.is_none() {
                        self.learn(if delta < 0 {
                            Workload::PnCounter
                        } else {
                            Workload::GCounter
                        });
                    }
                    let d = delta.to_string();
                    let reply = self.command(now, &[b"INCRBY", COUNTER_KEY, d.as_bytes()])?;
                    match reply {
                        Frame::Integer(_) => Ok(body_of("add_ok")),
                        other => Err(unexpected("INCRBY", &other)),
                    }
                } else {
                    self.learn(Workload::GSet);
                    let element = field(body, "element")?;
                    self.sadd(now, GSET_KEY, element)?;
                    Ok(body_of("add_ok"))
                }
            }
            "broadcast" => {
                self.learn(Workload::Broadcast);
                let message = field(body, "message")?;
                self.sadd(now, BROADCAST_KEY, message)?;
                Ok(body_of("broadcast_ok"))
            }
            "topology" => {
                // Replication reaches every peer directly; the suggested topology is not needed.
                self.learn(Workload::Broadcast);
                Ok(body_of("topology_ok"))
            }
            _ => Err(Failure::new(
                code::NOT_SUPPORTED,
                format!("unsupported request type {ty:?}"),
            )),
        }
    }

    /// A read without a key: its reply's shape depends on the workload. When it was neither
    /// given nor learnt, the keys the node holds (maybe replicated from peers) decide.
    fn keyless_read(&mut self, now: Micros) -> Reply {
        let workload = match self.workload {
            Some(w) => w,
            None => {
                if self.exists(now, BROADCAST_KEY)? {
                    Workload::Broadcast
                } else if self.exists(now, GSET_KEY)? {
                    Workload::GSet
                } else {
                    Workload::GCounter
                }
            }
        };
        match workload {
            Workload::GCounter | Workload::PnCounter => {
                let v = match self.command(now, &[b"GET", COUNTER_KEY])? {
                    Frame::Null => 0,
                    Frame::Bulk(b) => std::str::from_utf8(&b)
                        .ok()
                        .and_then(|s| s.parse::<i64>().ok())
                        .ok_or_else(|| Failure::new(code::CRASH, "counter is not an integer"))?,
                    other => return Err(unexpected("GET", &other)),
                };
                Ok(with(body_of("read_ok"), "value", json!(v)))
            }
            Workload::GSet => {
                let members = self.smembers(now, GSET_KEY)?;
                Ok(with(body_of("read_ok"), "value", Value::Array(members)))
            }
            Workload::Broadcast => {
                let members = self.smembers(now, BROADCAST_KEY)?;
                Ok(with(body_of("read_ok"), "messages", Value::Array(members)))
            }
            Workload::LinKv => Err(Failure::new(
                code::MALFORMED_REQUEST,
                "lin-kv read needs a key",
            )),
        }
    }

    fn exists(&mut self, now: Micros, key: &[u8]) -> Result<bool, Failure> {
        match self.command(now, &[b"EXISTS", key])? {
            Frame::Integer(n) => Ok(n > 0),
            other => Err(unexpected("EXISTS", &other)),
        }
    }

    fn sadd(&mut self, now: Micros, key: &[u8], member: &Value) -> Result<(), Failure> {
        let m = canonical(member);
        match self.command(now, &[b"SADD", key, m.as_bytes()])? {
            Frame::Integer(_) => Ok(()),
            other => Err(unexpected("SADD", &other)),
        }
    }

    /// Members in canonical-text order (SMEMBERS order is the node's business).
    fn smembers(&mut self, now: Micros, key: &[u8]) -> Result<Vec<Value>, Failure> {
        let items = match self.command(now, &[b"SMEMBERS", key])? {
            Frame::Array(items) | Frame::Set(items) => items,
            other => return Err(unexpected("SMEMBERS", &other)),
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(parse_stored(&item)?);
        }
        out.sort_by_key(canonical);
        Ok(out)
    }

    fn kv_get(&mut self, now: Micros, key: &Value) -> Result<Option<Value>, Failure> {
        let k = format!("{KV_PREFIX}{}", canonical(key));
        match self.command(now, &[b"GET", k.as_bytes()])? {
            Frame::Null => Ok(None),
            f @ Frame::Bulk(_) => Ok(Some(parse_stored(&f)?)),
            other => Err(unexpected("GET", &other)),
        }
    }

    fn kv_set(&mut self, now: Micros, key: &Value, value: &Value) -> Result<(), Failure> {
        let k = format!("{KV_PREFIX}{}", canonical(key));
        let v = canonical(value);
        match self.command(now, &[b"SET", k.as_bytes(), v.as_bytes()])? {
            Frame::Simple(_) => Ok(()),
            other => Err(unexpected("SET", &other)),
        }
    }

    /// Runs one command on the internal connection and returns its reply. Peer messages the
    /// node emits meanwhile are queued as usual.
    fn command(&mut self, now: Micros, args: &[&[u8]]) -> Result<Frame, Failure> {
        let Some(r) = self.running.as_mut() else {
            return Err(Failure::new(
                code::TEMPORARILY_UNAVAILABLE,
                "not initialised",
            ));
        };
        let args = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        r.node.handle(
            now,
            Input::Request {
                conn: CLIENT_CONN,
                args,
            },
        );
        self.drain_node();
        match decode_frame(&mut self.reply_buf) {
            Ok(Some(Frame::Error(e))) => Err(Failure::new(
                code::CRASH,
                format!("node error: {}", String::from_utf8_lossy(&e)),
            )),
            Ok(Some(f)) => Ok(f),
            Ok(None) => Err(Failure::new(code::CRASH, "the node did not reply")),
            Err(e) => {
                self.reply_buf.clear();
                Err(Failure::new(
                    code::CRASH,
                    format!("undecodable node reply: {}", e.message()),
                ))
            }
        }
    }

    /// Moves the node's outputs where they belong: client bytes into `reply_buf`, peer messages
    /// into `outgoing` as `lattice_peer` messages.
    fn drain_node(&mut self) {
        let Some(r) = self.running.as_mut() else {
            return;
        };
        while let Some(out) = r.node.poll_output() {
            match out {
                Output::Write { conn, data } if conn == CLIENT_CONN => {
                    self.reply_buf.extend_from_slice(&data);
                }
                Output::Write { .. } | Output::Close { .. } => {
                    // Only the internal connection exists, and it never asks to close.
                }
                // Maelstrom nodes keep no files (persistence is never enabled here).
                Output::Append { .. }
                | Output::Sync { .. }
                | Output::SnapshotBegin { .. }
                | Output::SnapshotChunk { .. }
                | Output::SnapshotEnd { .. }
                | Output::Reload
                | Output::Shutdown => {}
                // No aclfile is configured here, so ACL LOAD and SAVE refuse before asking.
                Output::AclFile(_) => {}
                // Maelstrom's links are fixed.
                Output::PeerDial { .. } => {}
                Output::PeerSend { peer, data } => {
                    let mut body = body_of(PEER_TYPE);
                    body.insert("data".into(), json!(B64.encode(&data)));
                    self.outgoing.push(Message {
                        src: r.name.clone(),
                        dest: format!("n{}", peer.0),
                        body: Value::Object(body),
                    });
                }
            }
        }
    }
}

fn body_of(ty: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("type".into(), json!(ty));
    m
}

fn with(mut m: Map<String, Value>, k: &str, v: Value) -> Map<String, Value> {
    m.insert(k.into(), v);
    m
}

fn field<'a>(body: &'a Value, name: &str) -> Result<&'a Value, Failure> {
    body.get(name)
        .ok_or_else(|| Failure::new(code::MALFORMED_REQUEST, format!("missing field {name:?}")))
}

fn unexpected(cmd: &str, f: &Frame) -> Failure {
    Failure::new(code::CRASH, format!("unexpected {cmd} reply {f:?}"))
}

/// A stored value back to JSON: everything the adapter stores is canonical JSON text.
fn parse_stored(f: &Frame) -> Result<Value, Failure> {
    let b = f
        .as_bytes()
        .ok_or_else(|| Failure::new(code::CRASH, format!("stored value is {f:?}")))?;
    serde_json::from_slice(b)
        .map_err(|e| Failure::new(code::CRASH, format!("stored value is not JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(a: &mut Adapter, now: u64, line: &str) -> Vec<Message> {
        a.handle_line(Micros(now), line).unwrap();
        a.take_outgoing()
            .into_iter()
            .filter(|m| m.body_type() != PEER_TYPE)
            .collect()
    }

    fn init(a: &mut Adapter, me: &str, ids: &[&str]) {
        let line = json!({"src":"c0","dest":me,"body":{"type":"init","msg_id":1,"node_id":me,"node_ids":ids}}).to_string();
        let r = send(a, 1_000_000, &line);
        assert_eq!(r[0].body_type(), "init_ok");
    }

    #[test]
    fn init_answers_init_ok_in_reply_to_its_msg_id() {
        let mut a = Adapter::new(None, 0);
        let r = send(
            &mut a,
            1,
            r#"{"src":"c1","dest":"n1","body":{"type":"init","msg_id":1,"node_id":"n1","node_ids":["n1"]}}"#,
        );
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].src, "n1");
        assert_eq!(r[0].dest, "c1");
        assert_eq!(r[0].body["type"], "init_ok");
        assert_eq!(r[0].body["in_reply_to"], 1);
        assert_eq!(a.node().unwrap().config().cluster_size, 1);
    }

    #[test]
    fn bad_node_ids_and_requests_before_init_are_errors() {
        let mut a = Adapter::new(None, 0);
        let r = send(
            &mut a,
            1,
            r#"{"src":"c1","dest":"x","body":{"type":"read","msg_id":3,"key":1}}"#,
        );
        assert_eq!(r[0].body["code"], code::TEMPORARILY_UNAVAILABLE);
        let r = send(
            &mut a,
            1,
            r#"{"src":"c1","dest":"x","body":{"type":"init","msg_id":4,"node_id":"node-a","node_ids":["node-a"]}}"#,
        );
        assert_eq!(r[0].body["code"], code::MALFORMED_REQUEST);
        assert!(r[0].body["text"].as_str().unwrap().contains("n1, n2"));
        assert!(a.node().is_none());
        assert!(parse_node_id("n0").is_err());
        assert!(parse_node_id("n+1").is_err());
        assert_eq!(parse_node_id("n12").unwrap(), NodeId(12));
        assert!(a.handle_line(Micros(1), "not json").is_err());
    }

    #[test]
    fn lin_kv_read_write_cas_with_maelstrom_codes() {
        let mut a = Adapter::new(None, 0);
        init(&mut a, "n1", &["n1"]);
        let q = |ty: &str, extra: Value| {
            let mut body = json!({"type": ty, "msg_id": 9});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            json!({"src":"c2","dest":"n1","body":body}).to_string()
        };
        let r = send(&mut a, 2, &q("read", json!({"key": 1})));
        assert_eq!(r[0].body["code"], code::KEY_DOES_NOT_EXIST);
        let r = send(&mut a, 3, &q("cas", json!({"key": 1, "from": 1, "to": 2})));
        assert_eq!(r[0].body["code"], code::KEY_DOES_NOT_EXIST);
        let r = send(
            &mut a,
            4,
            &q("write", json!({"key": 1, "value": {"b":1,"a":[2]}})),
        );
        assert_eq!(r[0].body["type"], "write_ok");
        let r = send(&mut a, 5, &q("read", json!({"key": 1})));
        assert_eq!(r[0].body["value"], json!({"a":[2],"b":1}));
        let r = send(&mut a, 6, &q("cas", json!({"key": 1, "from": 3, "to": 4})));
        assert_eq!(r[0].body["code"], code::PRECONDITION_FAILED);
        let r = send(
            &mut a,
            7,
            &q("cas", json!({"key": 1, "from": {"a":[2],"b":1}, "to": 4})),
        );
        assert_eq!(r[0].body["type"], "cas_ok");
        let r = send(&mut a, 8, &q("read", json!({"key": 1})));
        assert_eq!(r[0].body["value"], 4);
        // "1" and 1 are different keys.
        let r = send(&mut a, 9, &q("read", json!({"key": "1"})));
        assert_eq!(r[0].body["code"], code::KEY_DOES_NOT_EXIST);
        let r = send(
            &mut a,
            10,
            &q(
                "cas",
                json!({"key": 5, "from": 0, "to": 1, "create_if_not_exists": true}),
            ),
        );
        assert_eq!(r[0].body["type"], "cas_ok");
        let r = send(&mut a, 11, &q("write", json!({"key": 1})));
        assert_eq!(r[0].body["code"], code::MALFORMED_REQUEST);
        let r = send(&mut a, 12, &q("frobnicate", json!({})));
        assert_eq!(r[0].body["code"], code::NOT_SUPPORTED);
    }

    #[test]
    fn counters_sets_and_broadcast() {
        let mut a = Adapter::new(None, 0);
        init(&mut a, "n1", &["n1"]);
        let r = send(
            &mut a,
            2,
            r#"{"src":"c1","dest":"n1","body":{"type":"read","msg_id":2}}"#,
        );
        assert_eq!(r[0].body["value"], 0);
        for (i, d) in [5, -2, 7].iter().enumerate() {
            let line = json!({"src":"c1","dest":"n1","body":{"type":"add","msg_id":3+i,"delta":d}});
            let r = send(&mut a, 3, &line.to_string());
            assert_eq!(r[0].body["type"], "add_ok");
        }
        let r = send(
            &mut a,
            4,
            r#"{"src":"c1","dest":"n1","body":{"type":"read","msg_id":9}}"#,
        );
        assert_eq!(r[0].body["value"], 10);

        let mut g = Adapter::new(Some(Workload::GSet), 0);
        init(&mut g, "n1", &["n1"]);
        for e in [3, 1, 3] {
            let line = json!({"src":"c1","dest":"n1","body":{"type":"add","msg_id":1,"element":e}});
            send(&mut g, 2, &line.to_string());
        }
        let r = send(
            &mut g,
            3,
            r#"{"src":"c1","dest":"n1","body":{"type":"read","msg_id":2}}"#,
        );
        assert_eq!(r[0].body["value"], json!([1, 3]));

        let mut b = Adapter::new(None, 0);
        init(&mut b, "n1", &["n1"]);
        let r = send(
            &mut b,
            2,
            r#"{"src":"c1","dest":"n1","body":{"type":"topology","msg_id":1,"topology":{"n1":[]}}}"#,
        );
        assert_eq!(r[0].body["type"], "topology_ok");
        let r = send(
            &mut b,
            2,
            r#"{"src":"c1","dest":"n1","body":{"type":"broadcast","msg_id":2,"message":42}}"#,
        );
        assert_eq!(r[0].body["type"], "broadcast_ok");
        let r = send(
            &mut b,
            3,
            r#"{"src":"c1","dest":"n1","body":{"type":"read","msg_id":3}}"#,
        );
        assert_eq!(r[0].body["messages"], json!([42]));
    }

    #[test]
    fn bad_peer_messages_are_counted_not_fatal() {
        let mut a = Adapter::new(None, 0);
        init(&mut a, "n1", &["n1", "n2"]);
        assert!(a
            .handle_line(
                Micros(2),
                r#"{"src":"n2","dest":"n1","body":{"type":"lattice_peer","data":"%%"}}"#
            )
            .is_err());
        assert!(a
            .handle_line(
                Micros(2),
                r#"{"src":"zz","dest":"n1","body":{"type":"lattice_peer","data":""}}"#
            )
            .is_err());
        assert_eq!(a.bad_peer_messages, 2);
        // Undecodable bytes reach the node, which drops them.
        a.handle_line(
            Micros(3),
            r#"{"src":"n2","dest":"n1","body":{"type":"lattice_peer","data":"AAEC"}}"#,
        )
        .unwrap();
        a.node().unwrap().check_invariants();
    }
}

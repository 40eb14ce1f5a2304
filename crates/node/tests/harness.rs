//! Drives a real `Node` through its public entry points and collects what it writes per
//! connection.

#![allow(dead_code)]

use std::collections::BTreeMap;

use bytes::Bytes;
use lattice_node::{Buggify, Config, ConnId, Input, Micros, Node, Output};

pub struct Harness {
    pub node: Node,
    pub now_ms: u64,
    written: BTreeMap<u64, Vec<u8>>,
    closed: Vec<u64>,
    /// The ACL file, as the driver would keep it (None: missing).
    pub acl_file: Option<Vec<u8>>,
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with_config(Config::default())
    }

    pub fn with_config(config: Config) -> Harness {
        let now_ms = 1_700_000_000_000;
        Harness {
            node: Node::new(config, 1, Buggify::disabled(), Micros::from_millis(now_ms)),
            now_ms,
            written: BTreeMap::new(),
            closed: Vec::new(),
            acl_file: None,
        }
    }

    pub fn connect(&mut self, id: u64) {
        let now = Micros::from_millis(self.now_ms);
        self.node.handle(
            now,
            Input::Connected {
                conn: ConnId(id),
                peer_addr: format!("127.0.0.1:{}", 40000 + id),
                local_addr: "127.0.0.1:6379".into(),
            },
        );
        self.drain();
    }

    fn drain(&mut self) {
        let mut acl_ops = Vec::new();
        while let Some(out) = self.node.poll_output() {
            match out {
                Output::AclFile(op) => acl_ops.push(op),
                Output::Write { conn, data } => self
                    .written
                    .entry(conn.0)
                    .or_default()
                    .extend_from_slice(&data),
                Output::Close { conn } => self.closed.push(conn.0),
                Output::PeerSend { .. } => panic!("standalone node sent to a peer"),
                _ => {}
            }
        }
        self.node.check_invariants();
        if acl_ops.is_empty() {
            return;
        }
        let now = Micros::from_millis(self.now_ms);
        for op in acl_ops {
            let result = match op {
                lattice_node::acl::FileOp::Load { .. } => match &self.acl_file {
                    Some(f) => Ok(Some(Bytes::copy_from_slice(f))),
                    None => Err("No such file or directory".to_string()),
                },
                lattice_node::acl::FileOp::Save { text, .. } => {
                    self.acl_file = Some(text.to_vec());
                    Ok(None)
                }
            };
            self.node.handle(now, Input::AclFileDone { result });
        }
        self.drain();
    }

    /// Sends one command and returns (and forgets) everything written to `id` since.
    pub fn cmd(&mut self, id: u64, args: &[&str]) -> String {
        let now = Micros::from_millis(self.now_ms);
        let args = args
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        self.node.handle(
            now,
            Input::Request {
                conn: ConnId(id),
                args,
            },
        );
        self.drain();
        self.take(id)
    }

    /// Everything written to `id` and not yet taken.
    pub fn take(&mut self, id: u64) -> String {
        String::from_utf8_lossy(&self.written.remove(&id).unwrap_or_default()).into_owned()
    }

    pub fn advance(&mut self, ms: u64) {
        self.now_ms += ms;
        self.node.handle_timeout(Micros::from_millis(self.now_ms));
        self.drain();
    }

    /// Fires the node's timers at the current time (one slice of a running script).
    pub fn tick(&mut self) {
        self.advance(0);
    }

    /// Ticks until no script is running; returns how many slices that took.
    pub fn finish_script(&mut self) -> usize {
        let mut slices = 0;
        while self.node.script_running() {
            self.tick();
            slices += 1;
            assert!(slices < 100_000, "script never ended");
        }
        slices
    }

    pub fn is_closed(&self, id: u64) -> bool {
        self.closed.contains(&id)
    }
}

//! One node as a driver holds it: the node, what it wrote to each connection, its data
//! directory (persistence records and snapshot chunks). Everything goes in through the node's
//! public entry points, so a test exercises exactly what the server and the simulator run.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use lattice_node::{Buggify, Config, ConnId, Input, Micros, Node, NodeId, Output};

pub struct Host {
    pub node: Node,
    /// The configuration it started with; a restart starts its next incarnation from it.
    pub config: Config,
    /// Connections the driver opened (a write to any other is a node bug: an internal
    /// stand-in client's output escaped).
    open: BTreeSet<u64>,
    written: BTreeMap<u64, Vec<u8>>,
    closed: Vec<u64>,
    /// Every persistence record emitted since [`Host::persist`], in order: the data
    /// directory's log. Every record counts as written the moment it is emitted.
    pub records: Vec<Bytes>,
    /// Snapshot chunks, in order (with `publish_snapshots`, those of the snapshot being
    /// written).
    pub snapshot: Vec<Bytes>,
    /// Snapshots end as the driver's manifest ends them: at `SnapshotEnd` the directory
    /// (`records`) becomes the snapshot's chunks followed by the records after the one it
    /// follows, and the node is told it is done. Off, no snapshot ever ends, `records` is the
    /// whole log and `snapshot` collects every chunk.
    pub publish_snapshots: bool,
    /// The sequence numbers of the log records at the end of `records` (those before them are
    /// the published snapshot, or what recovery loaded).
    log_seqs: Vec<u64>,
    /// The record the snapshot being written follows.
    snapshot_seq: Option<u64>,
    /// Answer each `Sync` at once (a disk whose syncs never fail or wait). Off, syncs are never
    /// answered, as when a test does not model durability at all.
    pub sync_at_once: bool,
    /// The ACL file, as the driver keeps it (None: missing); ACL LOAD/SAVE read and write it.
    pub acl_file: Option<Vec<u8>>,
}

impl Host {
    /// A node of its own; `seed` feeds its RNG (nodes of one cluster get different ones).
    pub fn new(config: Config, seed: u64, now: Micros) -> Host {
        Host {
            node: Node::new(config.clone(), seed, Buggify::disabled(), now),
            config,
            open: BTreeSet::new(),
            written: BTreeMap::new(),
            closed: Vec::new(),
            records: Vec::new(),
            snapshot: Vec::new(),
            publish_snapshots: false,
            log_seqs: Vec::new(),
            snapshot_seq: None,
            sync_at_once: false,
            acl_file: None,
        }
    }

    /// Starts persisting: from now on its records are kept in `records`.
    pub fn persist(&mut self) {
        self.node.enable_persistence();
    }

    /// Recovery as the driver does it at start: every chunk of `data` (snapshot chunks and
    /// log records, in order) goes back in, then persistence continues on the same records.
    pub fn recover(&mut self, now: Micros, data: Vec<Bytes>) {
        for chunk in &data {
            self.node.load(now, chunk).expect("its own records load");
        }
        self.records = data;
        self.log_seqs.clear();
        self.persist();
    }

    /// Client connection `conn` opens (addresses as a local client's).
    pub fn connect(&mut self, now: Micros, conn: u64) {
        self.open.insert(conn);
        self.node.handle(
            now,
            Input::Connected {
                conn: ConnId(conn),
                peer_addr: format!("127.0.0.1:{}", 40000 + conn),
                local_addr: "127.0.0.1:6379".into(),
            },
        );
    }

    /// One request of connection `conn`.
    pub fn request(&mut self, now: Micros, conn: u64, args: Vec<Bytes>) {
        self.node.handle(
            now,
            Input::Request {
                conn: ConnId(conn),
                args,
            },
        );
    }

    /// Takes everything the node emitted: writes and closes are kept per connection,
    /// persistence output goes to the data directory, and peer messages are appended to
    /// `sends` as (peer index from 0, message).
    pub fn drain(&mut self, now: Micros, sends: &mut Vec<(usize, Bytes)>) {
        let mut acl_ops = Vec::new();
        while let Some(out) = self.node.poll_output() {
            match out {
                Output::Write { conn, data } => {
                    assert!(
                        self.open.contains(&conn.0),
                        "a write for connection {} that the driver never opened",
                        conn.0
                    );
                    self.written
                        .entry(conn.0)
                        .or_default()
                        .extend_from_slice(&data)
                }
                Output::Close { conn } => self.closed.push(conn.0),
                Output::PeerSend { peer, data } => sends.push((peer.0 as usize - 1, data)),
                Output::Append { seq, frame, .. } => {
                    // The directory's records are payloads (as recovery hands them over).
                    self.records
                        .push(frame.slice(lattice_node::persist::frame::FRAME_HEADER..));
                    self.log_seqs.push(seq);
                }
                Output::SnapshotBegin { seq } if self.publish_snapshots => {
                    self.snapshot.clear();
                    self.snapshot_seq = Some(seq);
                }
                Output::SnapshotChunk { data } => self.snapshot.push(data),
                Output::SnapshotEnd { .. } if self.publish_snapshots => {
                    let bytes = self.publish_snapshot();
                    self.node
                        .handle(now, Input::SnapshotDone { result: Ok(bytes) });
                }
                Output::Sync { seq } if self.sync_at_once => {
                    self.node.handle(now, Input::Persisted { seq })
                }
                Output::AclFile(op) => acl_ops.push(op),
                Output::Reload => {
                    // Read back as the driver does: every record of the directory, in order.
                    self.node.reload_begin(now);
                    let mut result = Ok(());
                    for chunk in &self.records {
                        if let Err(e) = self.node.load(now, chunk) {
                            result = Err(e);
                            break;
                        }
                    }
                    self.node.reload_done(now, result);
                }
                _ => {}
            }
        }
        if acl_ops.is_empty() {
            return;
        }
        // The driver's file operations, answered as a disk holding `acl_file` would.
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
        self.drain(now, sends);
    }

    /// Replaces the directory's records up to the snapshot's with its chunks; its size.
    fn publish_snapshot(&mut self) -> u64 {
        let seq = self
            .snapshot_seq
            .take()
            .expect("a snapshot ends after it began");
        assert!(
            self.log_seqs.len() <= self.records.len(),
            "the log's records are in the directory"
        );
        let log = self
            .records
            .split_off(self.records.len() - self.log_seqs.len());
        let mut records = std::mem::take(&mut self.snapshot);
        let bytes = records.iter().map(|c| c.len() as u64).sum();
        let mut seqs = Vec::new();
        for (s, r) in std::mem::take(&mut self.log_seqs).into_iter().zip(log) {
            if s > seq {
                seqs.push(s);
                records.push(r);
            }
        }
        self.records = records;
        self.log_seqs = seqs;
        bytes
    }

    /// Everything written to `conn` and not yet taken.
    pub fn take(&mut self, conn: u64) -> String {
        String::from_utf8_lossy(&self.take_bytes(conn)).into_owned()
    }

    pub fn take_bytes(&mut self, conn: u64) -> Vec<u8> {
        self.written.remove(&conn).unwrap_or_default()
    }

    /// Whether anything was written to `conn` and not yet taken.
    pub fn has_output(&self, conn: u64) -> bool {
        self.written.get(&conn).is_some_and(|w| !w.is_empty())
    }

    pub fn is_closed(&self, conn: u64) -> bool {
        self.closed.contains(&conn)
    }
}

/// The peer id of the node at `index` (ids count from 1).
pub(crate) fn peer_id(index: usize) -> NodeId {
    NodeId(index as u32 + 1)
}

//! What crosses the boundary between the node and its driver: [`Input`]s the driver hands in,
//! [`Output`]s it carries out. Kept apart from the state machine so that every part of the
//! node (persistence, dispatch, commands) can name them without depending on [`crate::node`].

use bytes::Bytes;
use lattice_crdt::NodeId;

use crate::client::ConnId;

/// Figures about the hosting process that only the driver can measure (INFO memory, cpu).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessStats {
    pub used_memory_bytes: u64,
    pub rss_bytes: u64,
    pub cpu_user_us: u64,
    pub cpu_sys_us: u64,
    pub process_id: u64,
    pub tcp_port: u64,
    /// The longest time one thread held the node since the previous figures, in µs: how long
    /// the node itself kept every client of the process waiting at most (0 under the
    /// simulator, whose steps take no time).
    pub host_lock_longest_hold_us: u64,
}

pub enum Input {
    /// A client connected. The node may refuse it (maxclients) by closing it at once.
    Connected {
        conn: ConnId,
        peer_addr: String,
        local_addr: String,
    },
    /// One parsed request; a pipeline arrives as many of these in order.
    Request { conn: ConnId, args: Vec<Bytes> },
    /// The driver's parser rejected the connection's input: reply and close.
    ProtocolError { conn: ConnId, message: String },
    /// The connection is gone (peer closed, I/O error, or after an `Output::Close`).
    Closed { conn: ConnId },
    /// Fresh process figures for INFO.
    ProcessStats(ProcessStats),
    /// The driver has an (authenticated) link to replica `peer`. From now on the node may emit
    /// [`Output::PeerSend`] for it. Repeating it for a live link is harmless.
    PeerUp { peer: NodeId },
    /// One message from `peer`: the payload of one frame (the driver strips its framing). Bytes
    /// the node cannot decode are counted and dropped, never trusted.
    PeerMessage { peer: NodeId, data: Bytes },
    /// The link to `peer` is gone. The node stops sending to it until the next `PeerUp`; what
    /// was lost in flight is repaired by anti-entropy.
    PeerDown { peer: NodeId },
    /// Every persistence record up to `seq` is durable (the answer to [`Output::Sync`], or to
    /// any sync the driver did on its own). Replies held for them are released.
    Persisted { seq: u64 },
    /// Writing or syncing records failed; the driver keeps them and retries. Under
    /// `appendfsync always` write commands are refused (MISCONF) until a `Persisted` arrives.
    PersistError { message: String },
    /// The snapshot begun by [`Output::SnapshotBegin`] is on disk and current (its size in
    /// bytes), or failed.
    SnapshotDone { result: Result<u64, String> },
    /// Recovery finished: the last record applied and what was found (for INFO). Record
    /// payloads themselves go in through [`crate::Node::load`] before this.
    Loaded {
        last_seq: u64,
        log_bytes: u64,
        snapshot_bytes: u64,
        keys: u64,
        records: u64,
    },
    /// The answer to the oldest [`Output::AclFile`] not yet answered: for a load the file's
    /// contents, for a save nothing; or why the file could not be read or written.
    AclFileDone {
        result: Result<Option<Bytes>, String>,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub enum Output {
    /// Bytes to write to a connection, in order: a whole pipeline's replies in one piece.
    Write {
        conn: ConnId,
        data: Bytes,
    },
    /// Close the connection after everything written before.
    Close {
        conn: ConnId,
    },
    /// One message for replica `peer`; the driver frames it (the server: 4-byte big-endian
    /// length, then the payload) and sends it in order on the peer's link. Emitted only
    /// between `PeerUp` and `PeerDown`; the driver may drop it if the link fails.
    PeerSend {
        peer: NodeId,
        data: Bytes,
    },
    /// Live membership: keep a link to member `peer` at its cluster address `addr` (learned
    /// by gossip, or named by `CLUSTER MEET` with `peer` 0): the driver dials it (once per
    /// address) and reports `PeerUp` when the link is up. Drivers with fixed links ignore it.
    PeerDial {
        peer: NodeId,
        addr: String,
    },
    /// Persistence record `seq` (one more than the previous): the new state of every key the
    /// commands since the previous record changed (encoding in `persist.rs`). `resume` marks
    /// the first record after logging was off. Emitted only after `Node::enable_persistence`.
    /// `frame` is the record as the log holds it, framed and checksummed by the node
    /// (`persist::frame`: kind `Resume` or `Batch`, sequence number `seq`), so the driver
    /// appends it as it is; `persist::frame::payload` gives the record's payload.
    Append {
        seq: u64,
        frame: Bytes,
        resume: bool,
    },
    /// Make every record up to `seq` durable, then answer [`Input::Persisted`] (or
    /// [`Input::PersistError`]).
    Sync {
        seq: u64,
    },
    /// A snapshot of the state from record `seq` on begins; chunks follow slot by slot while
    /// the node keeps serving, then `SnapshotEnd`. Answer with [`Input::SnapshotDone`].
    SnapshotBegin {
        seq: u64,
    },
    SnapshotChunk {
        data: Bytes,
    },
    SnapshotEnd {
        keys: u64,
    },
    /// DEBUG RELOAD / DEBUG LOADAOF: after carrying out every output before this one, sync
    /// the log and read the data directory back through recovery: [`crate::Node::reload_begin`],
    /// each payload to [`crate::Node::load`], then [`crate::Node::reload_done`] with the
    /// outcome (which answers the client). No [`Input::Loaded`]: the node's sequence numbers
    /// and durable point stay as they are.
    Reload,
    /// SHUTDOWN: after carrying out every output before this one and syncing the log, stop
    /// the process.
    Shutdown,
    /// ACL LOAD or ACL SAVE: read the ACL file, or replace it (atomically) with the text
    /// given, then answer [`Input::AclFileDone`]. Requests are answered in order.
    AclFile(crate::acl::FileOp),
}

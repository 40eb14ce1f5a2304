//! Per-connection state the node keeps.

use bytes::{Bytes, BytesMut};
use lattice_resp::Protocol;

/// A connection's identity, chosen by the driver and unique for the node's lifetime. It is also
/// the id `CLIENT ID` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// What `CLIENT REPLY` asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// Skip the reply of the next command (set by `CLIENT REPLY SKIP`).
    SkipNext,
    /// Skip the reply of the command being executed.
    SkipThis,
}

#[derive(Debug)]
pub struct Client {
    pub id: ConnId,
    pub name: Option<Bytes>,
    pub proto: Protocol,
    pub peer_addr: String,
    pub local_addr: String,
    pub created_ms: u64,
    pub last_interaction_ms: u64,
    /// Full name of the last command executed (`client|list`), for CLIENT LIST `cmd=`.
    pub last_command: &'static str,
    pub reply_mode: ReplyMode,
    pub no_evict: bool,
    /// Passed AUTH (or HELLO AUTH); only consulted when `requirepass` is set.
    pub authenticated: bool,
    /// Replies not yet handed to the driver.
    pub out: BytesMut,
    /// Queued in the node's list of connections with pending output.
    pub(crate) pending: bool,
    /// The driver should close this connection once `out` is written.
    pub closing: bool,
}

impl Client {
    pub fn new(id: ConnId, peer_addr: String, local_addr: String, now_ms: u64) -> Client {
        Client {
            id,
            name: None,
            proto: Protocol::Resp2,
            peer_addr,
            local_addr,
            created_ms: now_ms,
            last_interaction_ms: now_ms,
            last_command: "NULL",
            reply_mode: ReplyMode::On,
            no_evict: false,
            authenticated: false,
            out: BytesMut::new(),
            pending: false,
            closing: false,
        }
    }

    /// One line of CLIENT LIST / CLIENT INFO, in Redis's field order (fields we do not track
    /// report Redis's idle defaults so parsers keep working).
    pub fn info_line(&self, now_ms: u64) -> String {
        let age = now_ms.saturating_sub(self.created_ms) / 1000;
        let idle = now_ms.saturating_sub(self.last_interaction_ms) / 1000;
        let name = self
            .name
            .as_ref()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .unwrap_or_default();
        let flags = if self.no_evict { "e" } else { "N" };
        let resp = match self.proto {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        };
        format!(
            "id={} addr={} laddr={} fd=8 name={} age={} idle={} flags={} db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem={} tot-mem=0 events=r cmd={} user=default redir=-1 resp={}",
            self.id.0,
            self.peer_addr,
            self.local_addr,
            name,
            age,
            idle,
            flags,
            self.out.len(),
            self.last_command,
            resp
        )
    }
}

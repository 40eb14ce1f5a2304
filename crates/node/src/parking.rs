//! Parking clients in blocking commands: the per-key queues and deadlines in the command
//! context, filled when a handler asks to block and emptied when the client is served, times
//! out or goes away (see `crate::blocking` for the mechanism).

use bytes::Bytes;

use crate::blocking::{BlockRequest, Blocked, TimeoutReply};
use crate::client::ConnId;
use crate::command::Call;
use crate::ctx::Core;

impl Core {
    /// Parks the calling client until one of `keys` changes or `deadline_ms` passes. Inside
    /// MULTI/EXEC a client cannot block: the timeout reply is written at once, as in Redis.
    pub fn block(
        &mut self,
        call: &mut Call,
        keys: &[Bytes],
        deadline_ms: Option<u64>,
        on_timeout: TimeoutReply,
    ) {
        if call.in_exec {
            on_timeout.write(&mut call.out);
            return;
        }
        self.block_request = Some(BlockRequest {
            keys: keys.to_vec(),
            deadline_ms,
            on_timeout,
        });
    }

    /// Number of clients parked in a blocking command (INFO blocked_clients).
    pub fn blocked_clients(&self) -> usize {
        self.clients
            .values()
            .filter(|c| c.blocked.is_some())
            .count()
    }

    /// Registers `conn` as parked with `args` (first time) — or keeps its place (a retry that
    /// found nothing again).
    pub(crate) fn park(&mut self, conn: ConnId, args: &[Bytes], req: BlockRequest) {
        let Some(client) = self.clients.get_mut(&conn) else {
            return;
        };
        if client.blocked.is_some() {
            return;
        }
        for key in &req.keys {
            let q = self.blocked_on.entry(key.clone()).or_default();
            if !q.contains(&conn) {
                q.push_back(conn);
            }
        }
        if let Some(d) = req.deadline_ms {
            self.block_deadlines.insert((d, conn));
        }
        client.blocked = Some(Blocked {
            args: args.to_vec(),
            keys: req.keys,
            deadline_ms: req.deadline_ms,
            on_timeout: req.on_timeout,
        });
    }

    /// Releases `conn` from every queue it is parked in; returns what it was parked with.
    pub(crate) fn unpark(&mut self, conn: ConnId) -> Option<Blocked> {
        let blocked = self.clients.get_mut(&conn)?.blocked.take()?;
        self.waits.remove(&conn);
        for key in &blocked.keys {
            if let Some(q) = self.blocked_on.get_mut(key) {
                q.retain(|c| *c != conn);
                if q.is_empty() {
                    self.blocked_on.remove(key);
                }
            }
        }
        if let Some(d) = blocked.deadline_ms {
            self.block_deadlines.remove(&(d, conn));
        }
        Some(blocked)
    }

    /// The earliest blocking deadline, for the node's timer.
    pub(crate) fn next_block_deadline_ms(&self) -> Option<u64> {
        self.block_deadlines.first().map(|(d, _)| *d)
    }
}

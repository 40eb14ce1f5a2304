//! Output to connections other than the one whose command runs (pub/sub messages, released
//! clients, closes): appended to the connection's buffer and queued for the driver, in the
//! order connections became pending.

use lattice_resp::ReplyWriter;

use super::Core;
use crate::client::ConnId;

impl Core {
    /// Appends to another connection's output (pub/sub messages, unblocked clients).
    pub fn write_to(&mut self, conn: ConnId, f: impl FnOnce(&mut ReplyWriter)) {
        if let Some(c) = self.clients.get_mut(&conn) {
            if c.closing {
                return;
            }
            let mut w = ReplyWriter::new(&mut c.out, c.proto);
            f(&mut w);
            if !c.pending {
                c.pending = true;
                self.pending.push_back(conn);
            }
        }
    }

    /// Closes a connection once its pending output is written.
    pub fn close_client(&mut self, conn: ConnId) {
        if let Some(c) = self.clients.get_mut(&conn) {
            c.closing = true;
            if !c.pending {
                c.pending = true;
                self.pending.push_back(conn);
            }
        }
    }

    /// Queues `conn` among the connections with pending output.
    pub(crate) fn pending_push(&mut self, conn: ConnId) {
        self.pending.push_back(conn);
    }
}

//! Keyspace notifications and message delivery: how a change or a PUBLISH reaches the
//! subscribers of this node (and, through replication, of its peers).

use bytes::Bytes;
use lattice_resp::ReplyWriter;
use lattice_store::glob_match;

use super::Core;
use crate::client::ConnId;
use crate::events::{EVENT_KEYEVENT, EVENT_KEYSPACE};

/// A subscriber whose unread output passes this is disconnected (Redis's default pubsub
/// client-output-buffer-limit hard limit), so one slow reader cannot exhaust memory. This
/// counts what the node still holds; output it has handed to the driver is the driver's to
/// bound (the drivers apply the same limit, `lattice_router::PUSH_LIMIT_BYTES`).
const SUBSCRIBER_OUTPUT_LIMIT: usize = 32 * 1024 * 1024;

impl Core {
    /// Publishes a keyspace notification for `key` if `class` is enabled, like Redis's
    /// `notifyKeyspaceEvent(class, event, key)`. Write commands call it after each change.
    pub fn notify(&mut self, class: u32, event: &str, key: &[u8]) {
        let flags = self.config.notify_keyspace_events;
        if flags & class == 0 {
            return;
        }
        if flags & EVENT_KEYSPACE != 0 {
            let mut ch = b"__keyspace@0__:".to_vec();
            ch.extend_from_slice(key);
            self.publish(&ch, event.as_bytes());
        }
        if flags & EVENT_KEYEVENT != 0 {
            let mut ch = b"__keyevent@0__:".to_vec();
            ch.extend_from_slice(event.as_bytes());
            self.publish(&ch, key);
        }
    }

    /// Delivers `message` to subscribers of `channel` and of matching patterns; returns how
    /// many received it.
    /// PUBLISH: local subscribers now, and every peer's subscribers (replication).
    pub fn publish(&mut self, channel: &[u8], message: &[u8]) -> usize {
        if let Some(r) = self.repl.as_mut() {
            r.publish(channel, message, false);
        }
        self.deliver_publish(channel, message)
    }

    /// Delivers a message to this node's subscribers; returns how many received it.
    pub fn deliver_publish(&mut self, channel: &[u8], message: &[u8]) -> usize {
        let mut receivers = 0;
        let direct: Vec<ConnId> = self
            .channels
            .get(channel)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        for conn in direct {
            self.deliver(conn, |w| {
                w.push_len(3);
                w.bulk(b"message");
                w.bulk(channel);
                w.bulk(message);
            });
            receivers += 1;
        }
        let matching: Vec<(Bytes, ConnId)> = self
            .patterns
            .iter()
            .filter(|(p, _)| glob_match(p, channel, false))
            .flat_map(|(p, subs)| subs.iter().map(move |c| (p.clone(), *c)))
            .collect();
        for (pattern, conn) in matching {
            self.deliver(conn, |w| {
                w.push_len(4);
                w.bulk(b"pmessage");
                w.bulk(&pattern);
                w.bulk(channel);
                w.bulk(message);
            });
            receivers += 1;
        }
        receivers
    }

    pub(crate) fn deliver(&mut self, conn: ConnId, f: impl FnOnce(&mut ReplyWriter)) {
        self.write_to(conn, f);
        if self
            .clients
            .get(&conn)
            .is_some_and(|c| c.out.len() > SUBSCRIBER_OUTPUT_LIMIT)
        {
            self.stats.output_limit_disconnections += 1;
            self.close_client(conn);
        }
    }
}

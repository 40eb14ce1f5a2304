//! A connection's unwritten output, and the bound on what other connections may pile onto it.

use bytes::{Buf, Bytes};

/// Replies and pushes not yet written to one connection's socket, in order; the first chunk
/// may be partly written already.
///
/// While the socket is full (`blocked`) the connection is not read from, so its own replies
/// cannot grow; only writes from other connections can (pub/sub messages, keyspace
/// notifications). Those are bounded: past `limit_bytes` of unread output the connection is to
/// be closed, as Redis's `client-output-buffer-limit pubsub` hard limit does, so one subscriber
/// that stops reading cannot make the server hold every message for it. The byte count is kept
/// only while blocked, so a request pays nothing for it.
#[derive(Debug, Default)]
pub struct OutputQueue {
    chunks: Vec<Bytes>,
    /// Bytes in `chunks`, kept up to date only while `blocked`.
    blocked_bytes: usize,
    blocked: bool,
}

/// A write from another connection found this many bytes unread: the connection must close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushOverflow {
    pub unread_bytes: usize,
}

impl OutputQueue {
    pub fn new() -> OutputQueue {
        OutputQueue::default()
    }

    /// The queue the connection's own replies are appended to. Only while not blocked (the
    /// connection is not read from then, so it runs no commands).
    pub fn replies_mut(&mut self) -> &mut Vec<Bytes> {
        debug_assert!(!self.blocked, "own replies while the socket is full");
        &mut self.chunks
    }

    /// Queues a write another connection caused, unless the socket is full and the unread
    /// output would pass `limit_bytes`.
    pub fn push_from_other(&mut self, data: Bytes, limit_bytes: usize) -> Result<(), PushOverflow> {
        if self.blocked {
            let unread_bytes = self.blocked_bytes + data.len();
            if unread_bytes > limit_bytes {
                return Err(PushOverflow { unread_bytes });
            }
            self.blocked_bytes = unread_bytes;
        }
        self.chunks.push(data);
        Ok(())
    }

    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The socket took the next `n` bytes.
    pub fn written(&mut self, mut n: usize) {
        if self.blocked {
            self.blocked_bytes -= n;
        }
        let mut done = 0;
        while n > 0 {
            let first = &mut self.chunks[done];
            if n >= first.len() {
                n -= first.len();
                done += 1;
            } else {
                first.advance(n);
                n = 0;
            }
        }
        self.chunks.drain(..done);
    }

    /// The socket is full. True when it was not already (the driver then asks to hear when
    /// it has room).
    pub fn block(&mut self) -> bool {
        if self.blocked {
            return false;
        }
        self.blocked = true;
        self.blocked_bytes = self.chunks.iter().map(Bytes::len).sum();
        true
    }

    /// Everything was written. True when the socket had been full (the driver then stops
    /// waiting for room, and reads again).
    pub fn unblock(&mut self) -> bool {
        std::mem::replace(&mut self.blocked, false)
    }

    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    pub fn check_invariants(&self) {
        if self.blocked {
            assert_eq!(
                self.blocked_bytes,
                self.chunks.iter().map(Bytes::len).sum::<usize>(),
                "output queue: unread byte count off"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_writes_keep_the_rest_in_order() {
        let mut q = OutputQueue::new();
        q.replies_mut().push(Bytes::from_static(b"abc"));
        q.replies_mut().push(Bytes::from_static(b"defg"));
        q.written(4);
        assert_eq!(q.chunks(), &[Bytes::from_static(b"efg")]);
        q.written(3);
        assert!(q.is_empty());
    }

    #[test]
    fn only_a_full_socket_bounds_writes_from_others() {
        let mut q = OutputQueue::new();
        assert_eq!(q.push_from_other(Bytes::from(vec![0; 100]), 10), Ok(()));
        assert!(q.block());
        assert!(!q.block());
        assert_eq!(
            q.push_from_other(Bytes::from_static(b"x"), 100),
            Err(PushOverflow { unread_bytes: 101 })
        );
        q.written(60);
        assert_eq!(q.push_from_other(Bytes::from_static(b"xy"), 100), Ok(()));
        q.check_invariants();
        q.written(42);
        assert!(q.unblock());
        assert!(!q.unblock());
        assert!(q.is_empty());
    }
}

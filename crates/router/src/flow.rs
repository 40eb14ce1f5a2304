//! Back-pressure and wake-ups of one client connection: when to read it, when to stop, when to
//! read again, and when output other connections push at it must end it.
//!
//! The driver does the system calls and reports what they found (input ready or drained, a
//! write that filled the socket or took everything); [`ConnFlow`] answers with what to do
//! next. Both the server's event loops and the simulator's drive it, so a lost wake-up here
//! (input that arrived while reading was paused, never read) hangs a simulated client and
//! fails the swarm's liveness check.

use bytes::Bytes;

use crate::mail::Mail;
use crate::output::{OutputQueue, PushOverflow};

/// Unread output another connection may pile onto a connection whose socket is full, before
/// that connection is closed: Redis's default `client-output-buffer-limit pubsub` hard limit
/// (32 MiB, also what `CONFIG GET client-output-buffer-limit` shows). One subscriber that
/// stops reading cannot make the server hold every message for it; a connection's own
/// replies need no such bound, since it is not read from (so runs no commands) while its
/// socket is full. The simulator passes smaller bounds, so that closing over it happens there.
pub const PUSH_LIMIT_BYTES: usize = 32 * 1024 * 1024;

/// What the driver does after a write attempt ([`ConnFlow::socket_full`],
/// [`ConnFlow::all_written`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterWrite {
    /// Nothing changes.
    Idle,
    /// The socket just filled: stop reading and ask to hear when it has room.
    WaitForRoom,
    /// The socket had been full and took everything: stop waiting for room. `read_now`: input
    /// arrived while reading was paused, and edge-triggered readiness will not announce it
    /// again, so the driver must read the connection now (the wake-up).
    Resume { read_now: bool },
    /// The output is written and the connection was to close after it: close it now.
    Close,
}

/// What the driver does with mail for a connection ([`ConnFlow::take_mail`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MailAction {
    /// Queued (or the close noted): write the connection's output.
    Flush,
    /// Close at once, dropping unwritten output: pushes passed [`ConnFlow`]'s bound (`Some`),
    /// or a close came while the client is not reading its output (`None`; waiting for it to
    /// read first could take forever).
    CloseNow(Option<PushOverflow>),
}

/// One connection's output queue with the reading state that goes with it.
///
/// Contract: the driver reads the connection only while [`ConnFlow::should_read`]; after a
/// write attempt it reports the outcome and carries out the answer; mail for the connection
/// goes through [`ConnFlow::take_mail`]; its own replies go straight into
/// [`ConnFlow::replies_mut`] (never while the socket is full: it is not read from then).
#[derive(Debug)]
pub struct ConnFlow {
    out: OutputQueue,
    /// Input may be waiting: readiness is edge-triggered, so this stays set until a read finds
    /// the socket drained, including while reading is paused.
    input_waiting: bool,
    /// Close once the output is written (QUIT, a kill, a protocol error).
    closing: bool,
    push_limit_bytes: usize,
}

impl ConnFlow {
    /// A connection whose pushes are bounded by `push_limit_bytes` while its socket is full
    /// ([`PUSH_LIMIT_BYTES`] in the server).
    pub fn new(push_limit_bytes: usize) -> ConnFlow {
        ConnFlow {
            out: OutputQueue::new(),
            input_waiting: false,
            closing: false,
            push_limit_bytes,
        }
    }

    /// The unwritten output, for the write system call.
    pub fn out(&self) -> &OutputQueue {
        &self.out
    }

    /// The unwritten output, for a write system call that reports what it took
    /// ([`OutputQueue::written`]).
    pub fn out_mut(&mut self) -> &mut OutputQueue {
        &mut self.out
    }

    /// Where the connection's own replies go.
    pub fn replies_mut(&mut self) -> &mut Vec<Bytes> {
        self.out.replies_mut()
    }

    /// Readiness reported input (or a hang-up, which a read finds).
    pub fn input_ready(&mut self) {
        self.input_waiting = true;
    }

    /// A read found the socket drained (short, would block): the next input raises a new edge.
    pub fn input_drained(&mut self) {
        self.input_waiting = false;
    }

    pub fn input_waiting(&self) -> bool {
        self.input_waiting
    }

    /// Read now: input is waiting, the socket takes output, and the connection is not closing.
    pub fn should_read(&self) -> bool {
        self.input_waiting && !self.closing && !self.out.is_blocked()
    }

    /// The socket is full and the driver waits for room (not reading meanwhile).
    pub fn waiting_for_room(&self) -> bool {
        self.out.is_blocked()
    }

    /// Something to write, or a close to carry out after it.
    pub fn wants_flush(&self) -> bool {
        !self.out.is_empty() || self.closing
    }

    pub fn is_closing(&self) -> bool {
        self.closing
    }

    /// The connection closes once its output is written; no more is read from it.
    pub fn close_after_output(&mut self) {
        self.closing = true;
    }

    /// Mail the connection's loop took for it.
    pub fn take_mail(&mut self, mail: Mail) -> MailAction {
        match mail {
            Mail::Write { data, .. } => match self.out.push_from_other(data, self.push_limit_bytes)
            {
                Ok(()) => MailAction::Flush,
                Err(e) => MailAction::CloseNow(Some(e)),
            },
            Mail::Close { .. } if self.out.is_blocked() => MailAction::CloseNow(None),
            Mail::Close { .. } => {
                self.closing = true;
                MailAction::Flush
            }
        }
    }

    /// A write found the socket full with output left.
    pub fn socket_full(&mut self) -> AfterWrite {
        if self.out.block() {
            AfterWrite::WaitForRoom
        } else {
            AfterWrite::Idle
        }
    }

    /// A write took everything queued.
    pub fn all_written(&mut self) -> AfterWrite {
        debug_assert!(self.out.is_empty(), "all written with output left");
        let resumed = self.out.unblock();
        if self.closing {
            return AfterWrite::Close;
        }
        if !resumed {
            return AfterWrite::Idle;
        }
        // The wake-up: input that came while reading was paused raised its only edge then.
        #[cfg(not(feature = "planted-wakeup-bug"))]
        let read_now = self.input_waiting;
        #[cfg(feature = "planted-wakeup-bug")]
        let read_now = false;
        AfterWrite::Resume { read_now }
    }

    pub fn check_invariants(&self) {
        self.out.check_invariants();
        assert!(
            !self.out.is_blocked() || !self.out.is_empty(),
            "connection flow: waiting for room with nothing to write"
        );
    }
}

#[cfg(test)]
mod tests {
    use lattice_node::ConnId;

    use super::*;

    fn write(n: usize) -> Mail {
        Mail::Write {
            slot: 0,
            conn: ConnId(1),
            data: Bytes::from(vec![b'x'; n]),
        }
    }

    fn close() -> Mail {
        Mail::Close {
            slot: 0,
            conn: ConnId(1),
        }
    }

    #[test]
    #[cfg_attr(feature = "planted-wakeup-bug", should_panic)]
    fn a_full_socket_pauses_reading_until_it_drains() {
        let mut f = ConnFlow::new(100);
        f.input_ready();
        assert!(f.should_read());
        f.replies_mut().push(Bytes::from_static(b"reply"));
        assert_eq!(f.socket_full(), AfterWrite::WaitForRoom);
        assert_eq!(f.socket_full(), AfterWrite::Idle, "already waiting");
        assert!(!f.should_read(), "no reading while the socket is full");
        f.check_invariants();
        f.out_mut().written(5);
        assert_eq!(f.all_written(), AfterWrite::Resume { read_now: true });
        assert!(f.should_read());
        assert_eq!(f.all_written(), AfterWrite::Idle, "not waiting any more");
    }

    /// The planted lost wake-up: input waiting when the socket drains is not read.
    #[test]
    #[cfg_attr(feature = "planted-wakeup-bug", should_panic)]
    fn input_that_came_while_paused_is_read_after_the_drain() {
        let mut f = ConnFlow::new(100);
        f.replies_mut().push(Bytes::from_static(b"reply"));
        f.socket_full();
        f.input_ready();
        f.out_mut().written(5);
        assert_eq!(f.all_written(), AfterWrite::Resume { read_now: true });
    }

    #[test]
    fn a_drained_read_needs_no_wake_up() {
        let mut f = ConnFlow::new(100);
        f.replies_mut().push(Bytes::from_static(b"reply"));
        f.socket_full();
        f.input_drained();
        f.out_mut().written(5);
        assert_eq!(f.all_written(), AfterWrite::Resume { read_now: false });
        assert!(!f.should_read());
    }

    #[test]
    fn pushes_onto_a_full_socket_are_bounded() {
        let mut f = ConnFlow::new(100);
        assert_eq!(
            f.take_mail(write(150)),
            MailAction::Flush,
            "not full: unbounded"
        );
        f.socket_full();
        assert_eq!(
            f.take_mail(write(1)),
            MailAction::CloseNow(Some(PushOverflow { unread_bytes: 151 }))
        );
        f.out_mut().written(100);
        assert_eq!(f.take_mail(write(40)), MailAction::Flush);
        f.check_invariants();
    }

    #[test]
    fn a_close_waits_for_the_output_unless_the_client_is_not_reading() {
        let mut f = ConnFlow::new(100);
        f.replies_mut().push(Bytes::from_static(b"bye"));
        assert_eq!(f.take_mail(close()), MailAction::Flush);
        assert!(f.is_closing() && !f.should_read());
        f.out_mut().written(3);
        assert_eq!(f.all_written(), AfterWrite::Close);

        let mut f = ConnFlow::new(100);
        f.replies_mut().push(Bytes::from_static(b"unread"));
        f.socket_full();
        assert_eq!(f.take_mail(close()), MailAction::CloseNow(None));
    }
}

//! Mail between event loops: node output for a connection that the loop running the node is
//! not serving, or that has to queue behind earlier mail.

use bytes::Bytes;
use lattice_node::ConnId;

/// Where a connection lives in its event loop's table. A slot is reused after its connection
/// closes, so mail names the connection too, and the loop drops mail whose connection is gone.
pub type Slot = usize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mail {
    Write {
        slot: Slot,
        conn: ConnId,
        data: Bytes,
    },
    Close {
        slot: Slot,
        conn: ConnId,
    },
}

impl Mail {
    /// The connection the mail is for, and its slot.
    pub fn target(&self) -> (Slot, ConnId) {
        match *self {
            Mail::Write { slot, conn, .. } | Mail::Close { slot, conn } => (slot, conn),
        }
    }
}

/// One queue per event loop, filled while the node runs (under the node's lock in the server)
/// and emptied by the loop it is for, all at once. A queue holds its mail in the order the node
/// produced it, so every connection's output keeps the node's order.
///
/// A loop whose queue goes from empty to holding mail is listed once in `to_wake` until the
/// driver takes that list: one wake-up per burst, however many messages it holds.
#[derive(Debug)]
pub struct Mailboxes {
    queues: Vec<Vec<Mail>>,
    to_wake: Vec<usize>,
    /// Mail in all queues, so that the common case (none) is one comparison.
    queued: usize,
}

impl Mailboxes {
    /// Queues for `loops` event loops (at least one).
    pub fn new(loops: usize) -> Mailboxes {
        Mailboxes {
            queues: (0..loops.max(1)).map(|_| Vec::new()).collect(),
            to_wake: Vec::new(),
            queued: 0,
        }
    }

    pub fn loops(&self) -> usize {
        self.queues.len()
    }

    pub fn post(&mut self, loop_index: usize, mail: Mail) {
        let queue = &mut self.queues[loop_index];
        if queue.is_empty() && !self.to_wake.contains(&loop_index) {
            self.to_wake.push(loop_index);
        }
        queue.push(mail);
        self.queued += 1;
    }

    /// No loop has mail.
    pub fn all_empty(&self) -> bool {
        self.queued == 0
    }

    /// Some loop got mail since the last [`Mailboxes::take_to_wake`].
    pub fn wake_pending(&self) -> bool {
        !self.to_wake.is_empty()
    }

    pub fn is_empty(&self, loop_index: usize) -> bool {
        self.queues[loop_index].is_empty()
    }

    /// Moves `loop_index`'s mail, in order, to the end of `into`.
    pub fn take(&mut self, loop_index: usize, into: &mut Vec<Mail>) {
        let queue = &mut self.queues[loop_index];
        self.queued -= queue.len();
        if into.is_empty() {
            std::mem::swap(queue, into);
        } else {
            into.append(queue);
        }
    }

    /// Appends to `into` the loops that got mail since the last call, and forgets them.
    pub fn take_to_wake(&mut self, into: &mut Vec<usize>) {
        into.append(&mut self.to_wake);
    }

    /// Every loop with mail is listed in `to_wake` or has not been asked for since it got it;
    /// no loop is listed twice.
    pub fn check_invariants(&self) {
        assert_eq!(
            self.queued,
            self.queues.iter().map(Vec::len).sum::<usize>(),
            "mailbox: mail count off"
        );
        for (i, l) in self.to_wake.iter().enumerate() {
            assert!(*l < self.queues.len(), "mailbox: loop {l} out of range");
            assert!(
                !self.to_wake[..i].contains(l),
                "mailbox: loop {l} listed twice for a wake-up"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(conn: u64, data: &'static [u8]) -> Mail {
        Mail::Write {
            slot: conn as usize,
            conn: ConnId(conn),
            data: Bytes::from_static(data),
        }
    }

    #[test]
    fn a_burst_wakes_a_loop_once_and_keeps_its_order() {
        let mut m = Mailboxes::new(2);
        m.post(1, write(1, b"a"));
        m.post(1, write(2, b"b"));
        m.post(1, write(1, b"c"));
        m.check_invariants();
        let mut wake = Vec::new();
        m.take_to_wake(&mut wake);
        assert_eq!(wake, vec![1]);
        let mut got = Vec::new();
        m.take(1, &mut got);
        assert_eq!(got, vec![write(1, b"a"), write(2, b"b"), write(1, b"c")]);
        assert!(m.is_empty(1));
        // Taken: the next post needs a new wake-up.
        m.post(1, write(1, b"d"));
        wake.clear();
        m.take_to_wake(&mut wake);
        assert_eq!(wake, vec![1]);
    }

    #[test]
    fn taking_appends_behind_mail_already_taken() {
        let mut m = Mailboxes::new(1);
        let mut got = vec![write(1, b"a")];
        m.post(0, write(1, b"b"));
        m.take(0, &mut got);
        assert_eq!(got, vec![write(1, b"a"), write(1, b"b")]);
    }
}

//! The replicator's outgoing messages, in the order each peer must receive them, with the
//! forwarding traffic of a partitioned cluster gathered per peer (ARCHITECTURE §69).
//!
//! A command forwarded to an owner, and the owner's reply, used to be a message each: an
//! envelope (version, sender, hybrid clock), a protobuf encoding and a frame on the link per
//! command, which made a forwarded GET cost 6-7 times the instructions of a direct one. Now a
//! forward (or a reply) joins the peer's open `Forwards` message when that message is the last
//! thing queued for the peer, and is encoded when the driver drains the node: every forward a
//! turn produces for a peer (a pipeline's worth) travels in one message. Anything else queued
//! for the peer closes its open message first, so a link still carries everything in the
//! order it was queued.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use lattice_crdt::NodeId;

use super::wire;

/// Forwards and replies in one message at most; a longer run opens the next message.
pub const MAX_FORWARDS_PER_MESSAGE: usize = 1024;
/// Argument and reply bytes in one message at most (exceeded by the entry that closes it):
/// well under the 16 MiB message limit, and a receiver runs one message's forwards under one
/// lock acquisition, so a message must stay a bounded amount of work.
pub const MAX_FORWARD_BYTES_PER_MESSAGE: usize = 1 << 20;

/// One queued message: encoded, or forwarding traffic still open for more.
pub enum Queued {
    Data(Bytes),
    Forwards(wire::Forwards),
}

#[derive(Default)]
pub struct Outbox {
    queue: VecDeque<(NodeId, Queued)>,
    /// Entries popped so far: `queue[i]` is entry number `popped + i`.
    popped: u64,
    /// Per peer, the entry number of its open `Forwards` message (the last entry queued for
    /// that peer) and the bytes it carries.
    open: BTreeMap<NodeId, (u64, usize)>,
}

impl Outbox {
    /// Queues an encoded message for `peer`, after its open forwarding message if any.
    pub fn push(&mut self, peer: NodeId, data: Bytes) {
        self.open.remove(&peer);
        self.queue.push_back((peer, Queued::Data(data)));
    }

    pub fn push_forward(&mut self, peer: NodeId, f: wire::Forward) {
        let bytes = f.args.iter().map(Bytes::len).sum::<usize>();
        self.open_for(peer, bytes).forwards.push(f);
    }

    pub fn push_forward_reply(&mut self, peer: NodeId, r: wire::ForwardReply) {
        let bytes = r.reply.len();
        self.open_for(peer, bytes).replies.push(r);
    }

    /// The open forwarding message for `peer`, made room for an entry of `bytes`: a new one
    /// when there is none or the open one is full.
    fn open_for(&mut self, peer: NodeId, bytes: usize) -> &mut wire::Forwards {
        if let Some(&(at, held)) = self.open.get(&peer) {
            let m = self.entry(at);
            if m.forwards.len() + m.replies.len() >= MAX_FORWARDS_PER_MESSAGE
                || held >= MAX_FORWARD_BYTES_PER_MESSAGE
            {
                self.open.remove(&peer);
            }
        }
        let next = self.popped + self.queue.len() as u64;
        let (at, held) = self.open.entry(peer).or_insert((next, 0));
        *held += bytes;
        let at = *at;
        if at == next {
            self.queue
                .push_back((peer, Queued::Forwards(wire::Forwards::default())));
        }
        self.entry(at)
    }

    fn entry(&mut self, at: u64) -> &mut wire::Forwards {
        let i = usize::try_from(at - self.popped).expect("an entry still queued");
        match &mut self.queue[i].1 {
            Queued::Forwards(m) => m,
            Queued::Data(_) => unreachable!("an open entry is a Forwards message"),
        }
    }

    /// The next message to send; an open forwarding message is closed by being taken.
    pub fn pop(&mut self) -> Option<(NodeId, Queued)> {
        let (peer, q) = self.queue.pop_front()?;
        if self
            .open
            .get(&peer)
            .is_some_and(|&(at, _)| at == self.popped)
        {
            self.open.remove(&peer);
        }
        self.popped += 1;
        Some((peer, q))
    }

    /// Drops the forwarding traffic not yet sent to `peer`, whose link went down: its
    /// forwards are answered or sent elsewhere by the cluster, and its replies are asked for
    /// again by resends once a link is back.
    pub fn drop_forwards(&mut self, peer: NodeId) {
        if let Some((at, _)) = self.open.remove(&peer) {
            let i = usize::try_from(at - self.popped).expect("an entry still queued");
            self.queue[i].1 = Queued::Forwards(wire::Forwards::default());
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forward(id: u64) -> wire::Forward {
        wire::Forward {
            id,
            proto: 2,
            args: vec![Bytes::from_static(b"GET"), Bytes::from_static(b"k")],
            origin: 1,
        }
    }

    fn ids(q: Queued) -> Vec<u64> {
        match q {
            Queued::Forwards(m) => m
                .forwards
                .iter()
                .map(|f| f.id)
                .chain(m.replies.iter().map(|r| 1000 + r.id))
                .collect(),
            Queued::Data(d) => vec![d.len() as u64 + 5000],
        }
    }

    #[test]
    fn a_peers_forwards_share_a_message_until_something_else_is_queued_for_it() {
        let (a, b) = (NodeId(1), NodeId(2));
        let mut o = Outbox::default();
        o.push_forward(a, forward(1));
        o.push_forward(b, forward(2));
        o.push_forward_reply(
            a,
            wire::ForwardReply {
                id: 7,
                reply: Bytes::from_static(b"+OK\r\n"),
            },
        );
        o.push_forward(a, forward(3));
        // A message for b closes b's batch, not a's.
        o.push(b, Bytes::from_static(b"x"));
        o.push_forward(a, forward(4));
        o.push_forward(b, forward(5));
        assert_eq!(o.len(), 4);
        let got: Vec<(u32, Vec<u64>)> = std::iter::from_fn(|| o.pop())
            .map(|(p, q)| (p.0, ids(q)))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, vec![1, 3, 4, 1007]),
                (2, vec![2]),
                (2, vec![5001]),
                (2, vec![5]),
            ]
        );
    }

    #[test]
    fn taking_an_open_message_closes_it_and_full_messages_are_split() {
        let a = NodeId(1);
        let mut o = Outbox::default();
        o.push_forward(a, forward(1));
        assert_eq!(o.pop().map(|(_, q)| ids(q)), Some(vec![1]));
        o.push_forward(a, forward(2));
        assert_eq!(o.pop().map(|(_, q)| ids(q)), Some(vec![2]));
        for id in 0..MAX_FORWARDS_PER_MESSAGE as u64 + 1 {
            o.push_forward(a, forward(id));
        }
        assert_eq!(o.len(), 2);
        let big = wire::Forward {
            id: 0,
            proto: 2,
            args: vec![Bytes::from(vec![0u8; MAX_FORWARD_BYTES_PER_MESSAGE])],
            origin: 1,
        };
        o.push_forward(a, big);
        o.push_forward(a, forward(9));
        assert_eq!(o.len(), 3, "the message over the byte bound is closed");
        o.drop_forwards(a);
        let sizes: Vec<usize> = std::iter::from_fn(|| o.pop())
            .map(|(_, q)| ids(q).len())
            .collect();
        assert_eq!(sizes, vec![MAX_FORWARDS_PER_MESSAGE, 2, 0]);
    }
}

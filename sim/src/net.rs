//! The simulated network.
//!
//! - [`NetState`]: who can reach whom (partitions, including one-way ones), clogged hosts,
//!   latency and latency spikes. Hosts are numbered: nodes first, then clients.
//! - [`Pipe`]: one direction of a TCP-like byte stream between a client and a node. Segments
//!   arrive in order, each after a latency, possibly split at random boundaries; a partition
//!   holds them back (TCP retransmits once the path heals), a reset discards them.
//! - [`PeerNetwork`]: message-based node-to-node traffic (what replication will use): each
//!   opaque message is delivered after a latency, or dropped, duplicated or reordered; a
//!   partition drops messages, a clog delays them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use bytes::Bytes;

use crate::rng::Rand;

pub type HostId = usize;

/// One-way latency: a floor plus an exponential tail, with rare spikes.
#[derive(Clone, Debug)]
pub struct Latency {
    pub min_us: u64,
    pub mean_extra_us: u64,
    pub spike_ppm: u32,
    pub spike_us: u64,
}

impl Latency {
    pub fn sample(&self, rng: &mut Rand) -> u64 {
        let mut l = self.min_us + rng.exp(self.mean_extra_us as f64) as u64;
        if rng.ppm(self.spike_ppm) {
            l += rng.range(self.spike_us / 4, self.spike_us);
        }
        l
    }
}

/// Reachability and timing shared by streams and peer messages.
pub struct NetState {
    hosts: usize,
    /// `blocked[from * hosts + to]`: packets from `from` to `to` are lost.
    blocked: Vec<bool>,
    any_blocked: bool,
    /// Traffic to or from a host waits until this time (a saturated or flapping link).
    clog_until: Vec<u64>,
    pub latency: Latency,
    /// While `now < slow_until`, every latency is multiplied by `slow_factor`.
    pub slow_until: u64,
    pub slow_factor: u64,
}

impl NetState {
    pub fn new(hosts: usize, latency: Latency) -> NetState {
        NetState {
            hosts,
            blocked: vec![false; hosts * hosts],
            any_blocked: false,
            clog_until: vec![0; hosts],
            latency,
            slow_until: 0,
            slow_factor: 1,
        }
    }

    pub fn hosts(&self) -> usize {
        self.hosts
    }

    #[inline]
    pub fn blocked(&self, from: HostId, to: HostId) -> bool {
        self.any_blocked && self.blocked[from * self.hosts + to]
    }

    pub fn block(&mut self, from: HostId, to: HostId) {
        if from != to {
            self.blocked[from * self.hosts + to] = true;
            self.any_blocked = true;
        }
    }

    /// Blocks both directions between every host of `a` and every host of `b`.
    #[cfg(test)]
    pub fn split(&mut self, a: &[HostId], b: &[HostId]) {
        for &x in a {
            for &y in b {
                self.block(x, y);
                self.block(y, x);
            }
        }
    }

    /// Removes every partition.
    pub fn heal_partitions(&mut self) {
        self.blocked.iter_mut().for_each(|b| *b = false);
        self.any_blocked = false;
    }

    #[cfg(test)]
    pub fn is_partitioned(&self) -> bool {
        self.any_blocked
    }

    pub fn clog(&mut self, host: HostId, until: u64) {
        self.clog_until[host] = self.clog_until[host].max(until);
    }

    pub fn unclog_all(&mut self) {
        self.clog_until.iter_mut().for_each(|c| *c = 0);
    }

    /// When traffic between `a` and `b` may flow again (0 or a past time: now).
    #[inline]
    pub fn clogged_until(&self, a: HostId, b: HostId) -> u64 {
        self.clog_until[a].max(self.clog_until[b])
    }

    pub fn sample_latency(&self, rng: &mut Rand, now: u64) -> u64 {
        let l = self.latency.sample(rng);
        if now < self.slow_until {
            l * self.slow_factor
        } else {
            l
        }
    }
}

/// What travels in one direction of a stream.
#[derive(Clone, Debug)]
pub enum Seg {
    /// Connection request (first segment from the client).
    Syn,
    Data(Bytes),
    /// Orderly close after everything before it.
    Fin,
    /// Abort: the peer is gone; nothing further arrives.
    Rst,
}

/// One direction of a stream: segments in arrival order, each with its arrival time.
#[derive(Default)]
pub struct Pipe {
    segs: VecDeque<(u64, Seg)>,
    last_at: u64,
    /// A delivery event is pending for this pipe.
    pub scheduled: bool,
    /// Held back by a partition or a paused receiver until woken.
    pub parked: bool,
}

impl Pipe {
    /// Queues `seg` to arrive at `at`, or later if that would overtake an earlier segment.
    /// Returns the arrival time used.
    pub fn push(&mut self, at: u64, seg: Seg) -> u64 {
        let at = at.max(self.last_at);
        self.last_at = at;
        self.segs.push_back((at, seg));
        at
    }

    pub fn head_time(&self) -> Option<u64> {
        self.segs.front().map(|(t, _)| *t)
    }

    pub fn pop_due(&mut self, now: u64) -> Option<Seg> {
        match self.segs.front() {
            Some((t, _)) if *t <= now => self.segs.pop_front().map(|(_, s)| s),
            _ => None,
        }
    }

    /// Discards everything in flight (a reset).
    pub fn clear(&mut self) {
        self.segs.clear();
    }
}

/// Splits `data` at random boundaries into 1..=4 pieces (TCP may deliver any split).
pub fn chunk(rng: &mut Rand, data: Bytes, split_pct: u32) -> Vec<Bytes> {
    if data.len() < 2 || !rng.pct(split_pct) {
        return vec![data];
    }
    let pieces = rng.range(2, 4) as usize;
    let mut cuts: Vec<usize> = (0..pieces - 1)
        .map(|_| rng.range(1, data.len() as u64 - 1) as usize)
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut rest = data;
    let mut taken = 0;
    for c in cuts {
        out.push(rest.split_to(c - taken));
        taken = c;
    }
    out.push(rest);
    out
}

/// Fault rates for peer messages (parts per million of messages sent).
#[derive(Clone, Debug, Default)]
pub struct PeerFaults {
    pub drop_ppm: u32,
    pub dup_ppm: u32,
    pub reorder_ppm: u32,
    /// Extra delay, up to this, of a reordered message.
    pub reorder_us: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    pub sent: u64,
    pub delivered: u64,
    pub dropped: u64,
    pub partition_dropped: u64,
    pub duplicated: u64,
    /// Deliveries that arrived after a later-sent message on the same link.
    pub reordered: u64,
}

struct InFlight {
    from: HostId,
    to: HostId,
    /// Opaque to the network: the world's link epoch at sending.
    tag: u64,
    /// Send order on the link, for detecting reordering at delivery.
    seq: u64,
    msg: Bytes,
}

/// Message transport between nodes. Self-contained: the world asks [`PeerNetwork::next_due`]
/// when to call [`PeerNetwork::poll`] next.
pub struct PeerNetwork {
    pub faults: PeerFaults,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    in_flight: BTreeMap<u64, InFlight>,
    next_id: u64,
    /// Per link: next send sequence, latest FIFO arrival time, highest sequence delivered.
    links: BTreeMap<(HostId, HostId), (u64, u64, u64)>,
    pub stats: PeerStats,
}

/// A message handed to its receiver.
#[derive(Debug, PartialEq, Eq)]
pub struct Delivered {
    pub from: HostId,
    pub to: HostId,
    pub tag: u64,
    pub msg: Bytes,
}

impl PeerNetwork {
    pub fn new(faults: PeerFaults) -> PeerNetwork {
        PeerNetwork {
            faults,
            queue: BinaryHeap::new(),
            in_flight: BTreeMap::new(),
            next_id: 0,
            links: BTreeMap::new(),
            stats: PeerStats::default(),
        }
    }

    /// Sends `msg` from `from` to `to` at `now`.
    pub fn send(
        &mut self,
        rng: &mut Rand,
        net: &NetState,
        now: u64,
        from: HostId,
        to: HostId,
        msg: Bytes,
    ) {
        self.send_tagged(rng, net, now, from, to, 0, msg);
    }

    /// Sends `msg` carrying `tag` (handed back on delivery; the world uses it to drop messages
    /// of a link that has failed since, as a new TCP connection does not carry the old one's
    /// bytes).
    #[allow(clippy::too_many_arguments)]
    pub fn send_tagged(
        &mut self,
        rng: &mut Rand,
        net: &NetState,
        now: u64,
        from: HostId,
        to: HostId,
        tag: u64,
        msg: Bytes,
    ) {
        self.stats.sent += 1;
        if net.blocked(from, to) {
            self.stats.partition_dropped += 1;
            return;
        }
        if rng.ppm(self.faults.drop_ppm) {
            self.stats.dropped += 1;
            return;
        }
        let copies = if rng.ppm(self.faults.dup_ppm) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        let link = self.links.entry((from, to)).or_insert((0, 0, 0));
        let seq = link.0;
        link.0 += 1;
        for _ in 0..copies {
            let mut at = now + net.sample_latency(rng, now);
            if rng.ppm(self.faults.reorder_ppm) {
                // Not bound by FIFO: may overtake or be overtaken.
                at += rng.range(0, self.faults.reorder_us);
            } else {
                at = at.max(link.1);
                link.1 = at;
            }
            let id = self.next_id;
            self.next_id += 1;
            self.in_flight.insert(
                id,
                InFlight {
                    from,
                    to,
                    tag,
                    seq,
                    msg: msg.clone(),
                },
            );
            self.queue.push(Reverse((at, id)));
        }
    }

    /// When every message sent so far has arrived (or been dropped): the latest arrival time
    /// queued, and the latest a link's FIFO order holds its next message behind. Messages sent
    /// during a latency spike or held by a clog keep their late arrival after the faults end,
    /// and a link delivers nothing sent later before them.
    pub fn drained_at(&self) -> u64 {
        let queued = self
            .queue
            .iter()
            .map(|Reverse((t, _))| *t)
            .max()
            .unwrap_or(0);
        let fifo = self.links.values().map(|l| l.1).max().unwrap_or(0);
        queued.max(fifo)
    }

    /// When the next message is due, if any is in flight.
    pub fn next_due(&self) -> Option<u64> {
        self.queue.peek().map(|Reverse((t, _))| *t)
    }

    /// The next message due at `now`, if any. Messages whose path is partitioned at arrival are
    /// dropped; messages to or from a clogged host wait for the clog to end.
    pub fn poll(&mut self, net: &NetState, now: u64) -> Option<Delivered> {
        loop {
            let &Reverse((at, id)) = self.queue.peek()?;
            if at > now {
                return None;
            }
            self.queue.pop();
            let m = &self.in_flight[&id];
            let clog = net.clogged_until(m.from, m.to);
            if clog > now {
                self.queue.push(Reverse((clog, id)));
                continue;
            }
            let m = self
                .in_flight
                .remove(&id)
                .expect("queued messages are in flight");
            if net.blocked(m.from, m.to) {
                self.stats.partition_dropped += 1;
                continue;
            }
            let link = self.links.get_mut(&(m.from, m.to)).expect("link exists");
            if m.seq < link.2 {
                self.stats.reordered += 1;
            }
            link.2 = link.2.max(m.seq);
            self.stats.delivered += 1;
            return Some(Delivered {
                from: m.from,
                to: m.to,
                tag: m.tag,
                msg: m.msg,
            });
        }
    }

    /// Messages sent but neither delivered nor dropped yet.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(hosts: usize) -> NetState {
        NetState::new(
            hosts,
            Latency {
                min_us: 100,
                mean_extra_us: 400,
                spike_ppm: 0,
                spike_us: 0,
            },
        )
    }

    /// Sends `n` numbered messages 0 -> 1 one µs apart and returns what arrived, in order.
    fn run(peer: &mut PeerNetwork, net: &NetState, rng: &mut Rand, n: u32) -> Vec<u32> {
        let mut got = Vec::new();
        let mut now = 0;
        for i in 0..n {
            peer.send(rng, net, now, 0, 1, Bytes::from(i.to_le_bytes().to_vec()));
            now += 1;
            while let Some(d) = peer.poll(net, now) {
                got.push(u32::from_le_bytes(d.msg[..].try_into().unwrap()));
            }
        }
        while let Some(t) = peer.next_due() {
            now = now.max(t);
            while let Some(d) = peer.poll(net, now) {
                got.push(u32::from_le_bytes(d.msg[..].try_into().unwrap()));
            }
        }
        got
    }

    #[test]
    fn fifo_and_lossless_without_faults() {
        let n = net(2);
        let mut p = PeerNetwork::new(PeerFaults::default());
        let got = run(&mut p, &n, &mut Rand::new(1), 1000);
        assert_eq!(got, (0..1000).collect::<Vec<_>>());
        assert_eq!(p.stats.delivered, 1000);
        assert_eq!(p.in_flight(), 0);
    }

    #[test]
    fn drops_duplicates_and_reorders_at_the_configured_rates() {
        let n = net(2);
        let mut p = PeerNetwork::new(PeerFaults {
            drop_ppm: 100_000,
            dup_ppm: 100_000,
            reorder_ppm: 200_000,
            reorder_us: 5_000,
        });
        let got = run(&mut p, &n, &mut Rand::new(2), 10_000);
        let s = &p.stats;
        assert!((800..1200).contains(&s.dropped), "{s:?}");
        assert!((700..1100).contains(&s.duplicated), "{s:?}");
        assert!(s.reordered > 100, "{s:?}");
        assert_eq!(s.delivered as usize, got.len());
        assert_eq!(s.delivered, s.sent - s.dropped + s.duplicated);
        assert!(
            got.windows(2).any(|w| w[0] > w[1]),
            "some message overtaken"
        );
        let mut dedup = got.clone();
        dedup.sort_unstable();
        dedup.dedup();
        assert!(dedup.len() < got.len(), "some message delivered twice");
    }

    #[test]
    fn partitions_drop_and_one_way_partitions_drop_one_way() {
        let mut n = net(3);
        let mut rng = Rand::new(3);
        let mut p = PeerNetwork::new(PeerFaults::default());
        n.block(0, 1);
        p.send(&mut rng, &n, 0, 0, 1, Bytes::from_static(b"lost"));
        p.send(&mut rng, &n, 0, 1, 0, Bytes::from_static(b"back"));
        p.send(&mut rng, &n, 0, 0, 2, Bytes::from_static(b"side"));
        let mut got = Vec::new();
        while let Some(t) = p.next_due() {
            while let Some(d) = p.poll(&n, t) {
                got.push(d.msg);
            }
        }
        got.sort();
        assert_eq!(
            got,
            vec![Bytes::from_static(b"back"), Bytes::from_static(b"side")]
        );
        assert_eq!(p.stats.partition_dropped, 1);

        // A partition that starts while a message is in flight drops it on arrival.
        n.heal_partitions();
        p.send(&mut rng, &n, 10, 0, 1, Bytes::from_static(b"x"));
        n.split(&[0], &[1, 2]);
        let t = p.next_due().unwrap();
        assert!(p.poll(&n, t).is_none());
        assert_eq!(p.stats.partition_dropped, 2);
        n.heal_partitions();
        assert!(!n.is_partitioned());
    }

    #[test]
    fn clogs_delay_without_loss() {
        let mut n = net(2);
        let mut rng = Rand::new(4);
        let mut p = PeerNetwork::new(PeerFaults::default());
        n.clog(1, 1_000_000);
        p.send(&mut rng, &n, 0, 0, 1, Bytes::from_static(b"late"));
        let t = p.next_due().unwrap();
        assert!(t < 1_000_000);
        assert!(p.poll(&n, t).is_none(), "clogged: re-queued");
        assert_eq!(p.next_due(), Some(1_000_000));
        let d = p.poll(&n, 1_000_000).unwrap();
        assert_eq!(&d.msg[..], b"late");
        assert_eq!((d.from, d.to), (0, 1));
    }

    #[test]
    fn pipes_keep_order_and_chunks_reassemble() {
        let mut rng = Rand::new(5);
        let mut pipe = Pipe::default();
        let data = Bytes::from_static(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n");
        let mut t = 0;
        for piece in chunk(&mut rng, data.clone(), 100) {
            // Later pieces may be given earlier times; the pipe never lets them overtake.
            t = pipe.push(1000 - t.min(999), Seg::Data(piece)).max(t);
        }
        let mut got = Vec::new();
        let mut last = 0;
        while let Some(h) = pipe.head_time() {
            assert!(h >= last);
            last = h;
            if let Some(Seg::Data(b)) = pipe.pop_due(h) {
                got.extend_from_slice(&b);
            }
        }
        assert_eq!(got, data);
        let pieces = chunk(&mut rng, data.clone(), 100);
        assert!(pieces.len() >= 2);
        assert_eq!(pieces.concat(), data.to_vec());
    }
}

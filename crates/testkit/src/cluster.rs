//! N members on virtual time with links the test controls. A member is a [`Host`] (a node
//! driven through its entry points) or anything else a test wraps, such as the Maelstrom
//! adapter; every member's invariants are checked after each input it takes.

use std::collections::BTreeMap;

use bytes::Bytes;
use lattice_node::{Config, Input, Micros};

use crate::host::{peer_id, Host};
use crate::START_MS;

/// What the cluster drives.
pub trait Member {
    /// One message between members.
    type Msg;
    /// Takes `msg` from member `from`.
    fn receive(&mut self, now: Micros, from: usize, msg: Self::Msg);
    /// Runs whatever timers are due at `now`.
    fn tick(&mut self, now: Micros);
    /// The link to member `peer` came up or went down (a driver sees its connection do so).
    fn link(&mut self, now: Micros, peer: usize, up: bool);
    /// Moves out what it emitted: messages for other members are appended to `sends` as
    /// (member index, message); the rest (client replies, records) it keeps.
    fn drain(&mut self, now: Micros, sends: &mut Vec<(usize, Self::Msg)>);
    /// Its size on the wire, for the per-link byte counts.
    fn size(msg: &Self::Msg) -> usize;
    /// Panics when an invariant of its state does not hold.
    fn check_invariants(&self);
}

/// The state of one direction of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    Up,
    /// Down, and both ends were told (a connection that failed).
    Cut,
    /// Loses every message without either end noticing.
    Silent,
}

pub struct Cluster<M: Member = Host> {
    pub members: Vec<M>,
    pub now_ms: u64,
    /// Virtual time between two rounds of timers in [`Cluster::advance`].
    pub step_ms: u64,
    /// Time a message spends on the wire; 0 delivers it within the step it was sent in.
    pub latency_ms: u64,
    /// Invariants are checked after every `check_every`-th input to a member (1: every one).
    /// Above 1 only for keyspaces so large that a check after each input is quadratic.
    pub check_every: u64,
    inputs: u64,
    /// (deliver at, send order) -> (from, to, message).
    wire: BTreeMap<(u64, u64), (usize, usize, M::Msg)>,
    sent: u64,
    /// `links[from][to]`.
    links: Vec<Vec<Link>>,
    /// Bytes delivered, `[from][to]`.
    link_bytes: Vec<Vec<u64>>,
    /// `[from][to]`: nothing sent on that direction arrives before this time (see
    /// [`Cluster::hold`]).
    held_until: Vec<Vec<u64>>,
}

impl<M: Member> Cluster<M> {
    /// `members` with every link up; nobody is told (the members start connected).
    pub fn of(members: Vec<M>) -> Cluster<M> {
        let n = members.len();
        Cluster {
            members,
            now_ms: START_MS,
            step_ms: 10,
            latency_ms: 0,
            check_every: 1,
            inputs: 0,
            wire: BTreeMap::new(),
            sent: 0,
            links: vec![vec![Link::Up; n]; n],
            link_bytes: vec![vec![0; n]; n],
            held_until: vec![vec![0; n]; n],
        }
    }

    /// The same cluster (time, links, what is in flight) with each member wrapped by `f`: a
    /// probe that times or counts what its members do.
    pub fn map<N: Member<Msg = M::Msg>>(self, f: impl FnMut(M) -> N) -> Cluster<N> {
        Cluster {
            members: self.members.into_iter().map(f).collect(),
            now_ms: self.now_ms,
            step_ms: self.step_ms,
            latency_ms: self.latency_ms,
            check_every: self.check_every,
            inputs: self.inputs,
            wire: self.wire,
            sent: self.sent,
            links: self.links,
            link_bytes: self.link_bytes,
            held_until: self.held_until,
        }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn now(&self) -> Micros {
        Micros::from_millis(self.now_ms)
    }

    /// Runs `f` on member `i` at the current time, then routes what it emitted and checks it.
    pub fn on<R>(&mut self, i: usize, f: impl FnOnce(&mut M, Micros) -> R) -> R {
        let now = self.now();
        let r = f(&mut self.members[i], now);
        self.collect(i);
        r
    }

    fn collect(&mut self, i: usize) {
        let now = self.now();
        let mut sends = Vec::new();
        self.members[i].drain(now, &mut sends);
        for (to, msg) in sends {
            if self.links[i][to] == Link::Up {
                self.sent += 1;
                let at = (self.now_ms + self.latency_ms).max(self.held_until[i][to]);
                self.wire.insert((at, self.sent), (i, to, msg));
            }
        }
        self.inputs += 1;
        if self.inputs.is_multiple_of(self.check_every) {
            self.members[i].check_invariants();
        }
    }

    /// Delivers every message due by now, and what those cause, until none is due. A message
    /// whose link went down while it was on the wire is lost with the link.
    pub fn deliver(&mut self) {
        while let Some(entry) = self.wire.first_entry() {
            if entry.key().0 > self.now_ms {
                break;
            }
            let (from, to, msg) = entry.remove();
            if self.links[from][to] != Link::Up {
                continue;
            }
            self.link_bytes[from][to] += M::size(&msg) as u64;
            self.on(to, |m, now| m.receive(now, from, msg));
        }
    }

    /// Holds what member `from` sends member `to`, on the wire now or sent later, until
    /// `until_ms` (in order), while the other directions and links deliver as usual: a slow
    /// path that later messages on other paths overtake. `hold(from, to, 0)` stops holding
    /// what is sent from then on; what was held still arrives at its time, after which
    /// messages sent later may arrive first (a link that reorders).
    pub fn hold(&mut self, from: usize, to: usize, until_ms: u64) {
        self.held_until[from][to] = until_ms;
        let held: Vec<(u64, u64)> = self
            .wire
            .iter()
            .filter(|(&(at, _), &(f, t, _))| f == from && t == to && at < until_ms)
            .map(|(&k, _)| k)
            .collect();
        for (at, n) in held {
            let m = self.wire.remove(&(at, n)).expect("listed");
            self.wire.insert((until_ms, n), m);
        }
    }

    /// Loses everything on the wire.
    pub fn drop_in_flight(&mut self) {
        self.wire.clear();
    }

    /// Moves time on by `ms` in steps of `step_ms`: each step runs every member's timers,
    /// then delivers what is due.
    pub fn advance(&mut self, ms: u64) {
        let end = self.now_ms + ms;
        while self.now_ms < end {
            self.now_ms = (self.now_ms + self.step_ms).min(end);
            for i in 0..self.len() {
                self.on(i, |m, now| m.tick(now));
            }
            self.deliver();
        }
    }

    /// Delivers what is in flight, then lets three steps of timers send what they queued
    /// (deltas wait a few milliseconds to be batched) and delivers that too.
    pub fn settle(&mut self) {
        self.deliver();
        self.advance(3 * self.step_ms);
    }

    /// Sets the link between members `a` and `b` (both directions); each end is told when it
    /// fails or comes back.
    pub fn set_link(&mut self, a: usize, b: usize, state: Link) {
        let was = self.links[a][b];
        self.links[a][b] = state;
        self.links[b][a] = state;
        // The ends see a link fail or come back; a silent one looks up to them.
        if state != Link::Silent && (was == Link::Cut) != (state == Link::Cut) {
            let up = state == Link::Up;
            self.on(a, |m, now| m.link(now, b, up));
            self.on(b, |m, now| m.link(now, a, up));
        }
    }

    /// Cuts member `i` off from every other; each end is told its link went down.
    pub fn cut(&mut self, i: usize) {
        self.isolate(i, Link::Cut);
    }

    /// Reconnects member `i` to every other (each end told the link is up), or stops
    /// silencing its links.
    pub fn heal(&mut self, i: usize) {
        self.isolate(i, Link::Up);
    }

    /// Loses every message to and from member `i` without anyone noticing.
    pub fn silence(&mut self, i: usize) {
        self.isolate(i, Link::Silent);
    }

    fn isolate(&mut self, i: usize, state: Link) {
        for j in (0..self.len()).filter(|&j| j != i) {
            self.set_link(i, j, state);
        }
    }

    /// Every link loses its messages silently (`on`), or works again.
    pub fn lossy(&mut self, on: bool) {
        let state = if on { Link::Silent } else { Link::Up };
        for a in 0..self.len() {
            for b in (a + 1)..self.len() {
                self.set_link(a, b, state);
            }
        }
    }

    /// Brings every link up, telling each end (for members started with links down).
    pub fn connect_all(&mut self) {
        for i in 0..self.len() {
            self.heal(i);
        }
    }

    /// Bytes delivered to and from member `i` so far.
    pub fn bytes_of(&self, i: usize) -> u64 {
        (0..self.len())
            .map(|j| self.link_bytes[i][j] + self.link_bytes[j][i])
            .sum()
    }

    /// Bytes delivered on every link so far.
    pub fn delivered_bytes(&self) -> u64 {
        self.link_bytes.iter().flatten().sum()
    }
}

impl Member for Host {
    type Msg = Bytes;

    fn receive(&mut self, now: Micros, from: usize, data: Bytes) {
        let peer = peer_id(from);
        self.node.handle(now, Input::PeerMessage { peer, data });
    }

    fn tick(&mut self, now: Micros) {
        self.node.handle_timeout(now);
    }

    fn link(&mut self, now: Micros, peer: usize, up: bool) {
        let peer = peer_id(peer);
        let input = if up {
            Input::PeerUp { peer }
        } else {
            Input::PeerDown { peer }
        };
        self.node.handle(now, input);
    }

    fn drain(&mut self, now: Micros, sends: &mut Vec<(usize, Bytes)>) {
        Host::drain(self, now, sends);
    }

    fn size(msg: &Bytes) -> usize {
        msg.len()
    }

    fn check_invariants(&self) {
        self.node.check_invariants();
    }
}

/// A cluster of nodes: the client connection 1 is open on each, and commands go through it
/// unless a test names another connection.
impl Cluster<Host> {
    /// `n` replicas of everything (replication factor `n`), every link up.
    pub fn new(n: usize) -> Cluster<Host> {
        Cluster::with(n, |_, _| {})
    }

    /// `n` nodes; `tweak` adjusts each node's configuration (by index) before it starts.
    pub fn with(n: usize, tweak: impl Fn(usize, &mut Config)) -> Cluster<Host> {
        let mut c = Cluster::unlinked(n, tweak);
        c.connect_all();
        c
    }

    /// [`Cluster::with`] whose links have not come up yet ([`Cluster::connect_all`] brings
    /// them up).
    pub fn unlinked(n: usize, tweak: impl Fn(usize, &mut Config)) -> Cluster<Host> {
        let now = Micros::from_millis(START_MS);
        let hosts = (0..n)
            .map(|i| Host::new(Self::config(n, i, &tweak), i as u64, now))
            .collect();
        let mut c = Cluster::of(hosts);
        for row in &mut c.links {
            row.iter_mut().for_each(|l| *l = Link::Cut);
        }
        for i in 0..n {
            c.on(i, |h, now| h.connect(now, 1));
        }
        c
    }

    fn config(n: usize, i: usize, tweak: &impl Fn(usize, &mut Config)) -> Config {
        let mut config = Config::default();
        config.node_id = i as u32 + 1;
        config.cluster_size = n;
        tweak(i, &mut config);
        config
    }

    /// Sends a pipeline to node `i` on connection 1 without delivering anything in between.
    pub fn send(&mut self, i: usize, pipeline: &[&[&str]]) {
        self.on(i, |h, now| {
            for args in pipeline {
                h.request(now, 1, crate::args(args));
            }
        });
    }

    /// Everything written to node `i`'s connection 1 and not yet taken.
    pub fn take(&mut self, i: usize) -> String {
        self.members[i].take(1)
    }

    /// One command on node `i` and its reply, with the peer traffic it causes delivered.
    pub fn cmd(&mut self, i: usize, args: &[&str]) -> String {
        self.send(i, &[args]);
        self.deliver();
        self.take(i)
    }

    /// One command of connection `conn` on node `i`, delivered; what `conn` was written since.
    pub fn cmd_on(&mut self, i: usize, conn: u64, args: &[&str]) -> String {
        self.on(i, |h, now| h.request(now, conn, crate::args(args)));
        self.deliver();
        self.members[i].take(conn)
    }

    /// Opens client connection `conn` on node `i`.
    pub fn connect(&mut self, i: usize, conn: u64) {
        self.on(i, |h, now| h.connect(now, conn));
    }

    /// Node `i`'s DBSIZE.
    pub fn dbsize(&mut self, i: usize) -> usize {
        let r = self.cmd(i, &["DBSIZE"]);
        r.trim_start_matches(':')
            .trim_end()
            .parse()
            .expect("DBSIZE answers an integer")
    }

    /// A number from node `i`'s INFO replication section.
    pub fn info_field(&mut self, i: usize, field: &str) -> u64 {
        let info = self.cmd(i, &["INFO", "replication"]);
        crate::info_field(&info, field)
    }

    /// Node `i`'s digest of its replicated state.
    pub fn digest(&mut self, i: usize) -> u64 {
        self.members[i].node.replication_digest()
    }

    /// Every replica's digest of its replicated state.
    pub fn digests(&mut self) -> Vec<u64> {
        (0..self.len()).map(|i| self.digest(i)).collect()
    }

    pub fn converged(&mut self) -> bool {
        let d = self.digests();
        d.iter().all(|x| *x == d[0])
    }

    /// Advances time until every replica's digest is equal; returns how long it took.
    pub fn converge(&mut self, limit_ms: u64) -> u64 {
        let mut waited_ms = 0;
        while !self.converged() {
            assert!(waited_ms < limit_ms, "no convergence after {waited_ms} ms");
            self.advance(self.step_ms);
            waited_ms += self.step_ms;
        }
        waited_ms
    }

    /// Node `i` persists from now on (its records are kept as its data directory).
    pub fn persist(&mut self, i: usize) {
        self.members[i].persist();
    }

    /// Node `i` stops (its peers see the links fail; what was in flight to or from it is
    /// lost) and starts again as its next incarnation, on its own records when `keep`, else on
    /// an empty data directory; it persists, and its links come up.
    pub fn restart(&mut self, i: usize, keep: bool) {
        let now = self.now();
        let old = &mut self.members[i];
        let mut config = old.config.clone();
        config.incarnation += 1;
        let records = if keep {
            std::mem::take(&mut old.records)
        } else {
            Vec::new()
        };
        let (sync_at_once, publish_snapshots) = (old.sync_at_once, old.publish_snapshots);
        let mut host = Host::new(config, 100 + i as u64, now);
        host.sync_at_once = sync_at_once;
        host.publish_snapshots = publish_snapshots;
        host.recover(now, records);
        self.members[i] = host;
        self.wire.retain(|_, (from, to, _)| *from != i && *to != i);
        for j in (0..self.len()).filter(|&j| j != i) {
            self.links[i][j] = Link::Cut;
            self.links[j][i] = Link::Cut;
            self.on(j, |m, now| m.link(now, i, false));
        }
        self.on(i, |h, now| h.connect(now, 1));
        self.heal(i);
    }
}

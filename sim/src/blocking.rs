//! Blocking list pops on virtual time, driven deterministically: a node (a [`Host`], as the
//! world runs it, with a skewed and drifting clock and buggify on) is fed scripted requests
//! at chosen virtual times and its timers are fired when its `poll_timeout` deadline comes up on
//! its own clock, exactly as the world's event loop does. The swarm does not generate blocking
//! commands yet (the model would have to predict wake-up order across every client); these
//! scenarios pin the behaviour down instead:
//! - a BLPOP with a timeout is woken by another client's push and gets `[key, value]`,
//!   clients blocked on one key being served first come, first served;
//! - a BLPOP whose timeout passes gets the null array at its deadline on the node's clock,
//!   and a request pipelined behind it is answered after it;
//! - BZPOPMIN/BZPOPMAX likewise: woken by a ZADD in the order they blocked, each gets
//!   `[key, member, score]` from its end of the sorted set, or the null array at its deadline.

use std::collections::{BTreeMap, VecDeque};

use bytes::{Bytes, BytesMut};
use lattice_node::{ConnId, Input, Micros, Output};
use lattice_resp::{decode_frame, Frame};

use crate::clock::Clock;
use crate::process::Host;

/// One reply as a client saw it: connection, virtual time, node time, frame.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) conn: u64,
    pub(crate) virt: u64,
    pub(crate) node_us: u64,
    pub(crate) frame: Frame,
}

/// One node and a script of requests, run on virtual time (also used by the busy-script
/// scenarios).
pub(crate) struct Bench {
    host: Host,
    now: u64,
    /// Virtual time -> requests to hand the node then, in order.
    script: BTreeMap<u64, VecDeque<(u64, Vec<Bytes>)>>,
    inbufs: BTreeMap<u64, BytesMut>,
    replies: Vec<Reply>,
    /// Node time at which each request was handed over, in order.
    sent: Vec<(u64, String, u64)>,
}

impl Bench {
    pub(crate) fn new(seed: u64, conns: &[u64]) -> Bench {
        // A clock 3 s ahead and running 500 ppm fast: timeouts are on the node's clock.
        let mut host = Host::new(0, Clock::new(3_000_000, 500), 10, 1);
        host.start(seed, seed ^ 0x5eed, 0)
            .expect("no disk to recover");
        let mut b = Bench {
            host,
            now: 0,
            script: BTreeMap::new(),
            inbufs: BTreeMap::new(),
            replies: Vec::new(),
            sent: Vec::new(),
        };
        for &c in conns {
            let t = b.host.clock.read(0);
            b.node().handle(
                Micros(t),
                Input::Connected {
                    conn: ConnId(c),
                    peer_addr: format!("10.0.1.{c}:4000{c}"),
                    local_addr: "10.0.0.1:6379".into(),
                },
            );
            b.drain();
        }
        b
    }

    fn node(&mut self) -> &mut lattice_node::Node {
        self.host.node_mut().expect("up")
    }

    pub(crate) fn at(&mut self, virt_ms: u64, conn: u64, args: &[&str]) {
        let args = args.iter().map(|a| Bytes::from(a.to_string())).collect();
        self.script
            .entry(virt_ms * 1000)
            .or_default()
            .push_back((conn, args));
    }

    fn drain(&mut self) {
        while let Some(out) = self.node().poll_output() {
            match out {
                Output::Write { conn, data } => {
                    let node_us = self.host.clock.peek(self.now);
                    let buf = self.inbufs.entry(conn.0).or_default();
                    buf.extend_from_slice(&data);
                    while let Some(frame) = decode_frame(buf).expect("well-formed reply") {
                        self.replies.push(Reply {
                            conn: conn.0,
                            virt: self.now,
                            node_us,
                            frame,
                        });
                    }
                }
                Output::Close { conn } => panic!("node closed c{}", conn.0),
                Output::PeerSend { .. } => panic!("standalone node sent to a peer"),
                _ => {}
            }
        }
        self.node().check_invariants();
    }

    /// Runs the event loop until virtual time `until_ms`.
    pub(crate) fn run(&mut self, until_ms: u64) {
        let until = until_ms * 1000;
        loop {
            self.host.follow_node_timer();
            let timer = self.host.timer_due(self.now);
            let request = self.script.keys().next().copied();
            let next = match (timer, request) {
                (Some(t), Some(r)) => t.min(r),
                (t, r) => match t.or(r) {
                    Some(x) => x,
                    None => break,
                },
            };
            if next > until {
                break;
            }
            self.now = next;
            let t = self.host.clock.read(self.now);
            if request == Some(next) {
                let mut batch = self.script.remove(&next).expect("scheduled");
                while let Some((conn, args)) = batch.pop_front() {
                    let text = args
                        .iter()
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect::<Vec<_>>()
                        .join(" ");
                    self.sent.push((conn, text, t));
                    self.node().handle(
                        Micros(t),
                        Input::Request {
                            conn: ConnId(conn),
                            args,
                        },
                    );
                    self.drain();
                }
            } else {
                self.node().handle_timeout(Micros(t));
                self.drain();
            }
        }
        self.now = self.now.max(until);
    }

    pub(crate) fn replies_on(&self, conn: u64) -> Vec<&Reply> {
        self.replies.iter().filter(|r| r.conn == conn).collect()
    }

    pub(crate) fn sent_at(&self, conn: u64, text: &str) -> u64 {
        self.sent
            .iter()
            .find(|(c, s, _)| *c == conn && s == text)
            .expect("sent")
            .2
    }
}

pub(crate) fn bulk(s: &str) -> Frame {
    Frame::Bulk(Bytes::from(s.to_string()))
}

fn pair(k: &str, v: &str) -> Frame {
    Frame::Array(vec![bulk(k), bulk(v)])
}

#[test]
fn a_push_wakes_blocked_clients_first_come_first_served() {
    for seed in 0..20 {
        let mut b = Bench::new(seed, &[1, 2, 3]);
        b.at(10, 1, &["BLPOP", "q", "0.5"]);
        b.at(20, 3, &["BLPOP", "q", "1"]);
        b.at(100, 2, &["RPUSH", "q", "a", "b", "c"]);
        b.at(150, 2, &["LRANGE", "q", "0", "-1"]);
        b.run(2_000);
        let r1 = b.replies_on(1);
        let r3 = b.replies_on(3);
        assert_eq!(r1.len(), 1, "seed {seed}: {r1:?}");
        assert_eq!(r3.len(), 1, "seed {seed}: {r3:?}");
        // Served at the push, in the order the clients blocked.
        assert_eq!(r1[0].frame, pair("q", "a"), "seed {seed}");
        assert_eq!(r1[0].virt, 100_000, "seed {seed}: woken by the push");
        assert_eq!(r3[0].frame, pair("q", "b"), "seed {seed}");
        assert_eq!(r3[0].virt, 100_000, "seed {seed}");
        let r2: Vec<&Frame> = b.replies_on(2).iter().map(|r| &r.frame).collect();
        // RPUSH replies with the length after the push, before blocked clients are served.
        assert_eq!(
            r2,
            vec![&Frame::Integer(3), &Frame::Array(vec![bulk("c")])],
            "seed {seed}"
        );
    }
}

#[test]
fn a_blpop_timeout_fires_at_its_deadline_on_the_node_clock() {
    for seed in 0..20 {
        let mut b = Bench::new(seed, &[1, 2]);
        b.at(10, 1, &["BLPOP", "w", "0.2"]);
        b.at(10, 1, &["PING"]); // pipelined behind the blocked command
        b.at(50, 2, &["SET", "s", "x"]); // another key: does not wake it
        b.at(50, 2, &["LPUSH", "other", "y"]);
        b.run(2_000);
        let start = b.sent_at(1, "BLPOP w 0.2");
        let r1 = b.replies_on(1);
        assert_eq!(r1.len(), 2, "seed {seed}: {r1:?}");
        assert_eq!(r1[0].frame, Frame::NullArray, "seed {seed}");
        // Redis takes the deadline in whole milliseconds: now (ms) plus the timeout.
        let deadline = start / 1000 * 1000 + 200_000;
        assert!(
            r1[0].node_us >= deadline,
            "seed {seed}: timed out early: {} < {deadline}",
            r1[0].node_us
        );
        assert!(
            r1[0].node_us <= deadline + 2_000,
            "seed {seed}: timed out late: {} > {deadline}",
            r1[0].node_us
        );
        // The virtual time is that of the deadline on a clock running 500 ppm fast.
        assert!(r1[0].virt < 10_000 + 200_000, "seed {seed}: {}", r1[0].virt);
        assert_eq!(r1[1].frame, Frame::Simple(Bytes::from_static(b"PONG")));
        // The wait was on virtual time: nothing else happened to the blocked client before.
        assert!(r1[1].virt == r1[0].virt, "seed {seed}");
    }
}

#[test]
fn bzpopmin_and_bzpopmax_are_woken_by_zadd_first_come_first_served() {
    let triple = |k: &str, m: &str, s: &str| Frame::Array(vec![bulk(k), bulk(m), bulk(s)]);
    for seed in 0..20 {
        let mut b = Bench::new(seed, &[1, 2, 3]);
        b.at(10, 1, &["BZPOPMIN", "z", "0.5"]);
        b.at(20, 3, &["BZPOPMAX", "other", "z", "1"]);
        b.at(100, 2, &["ZADD", "z", "1", "a", "2.5", "b", "3", "c"]);
        b.at(150, 2, &["ZRANGE", "z", "0", "-1", "WITHSCORES"]);
        b.at(200, 1, &["BZPOPMIN", "empty", "0.1"]);
        b.run(2_000);
        let r1 = b.replies_on(1);
        let r3 = b.replies_on(3);
        assert_eq!(r1.len(), 2, "seed {seed}: {r1:?}");
        assert_eq!(r3.len(), 1, "seed {seed}: {r3:?}");
        // Served at the ZADD, in the order they blocked: the lowest, then the highest.
        assert_eq!(r1[0].frame, triple("z", "a", "1"), "seed {seed}");
        assert_eq!(r1[0].virt, 100_000, "seed {seed}");
        assert_eq!(r3[0].frame, triple("z", "c", "3"), "seed {seed}");
        assert_eq!(r3[0].virt, 100_000, "seed {seed}");
        let r2: Vec<&Frame> = b.replies_on(2).iter().map(|r| &r.frame).collect();
        assert_eq!(
            r2,
            vec![
                &Frame::Integer(3),
                &Frame::Array(vec![bulk("b"), bulk("2.5")])
            ],
            "seed {seed}"
        );
        // A timeout answers the null array at its deadline on the node's clock.
        assert_eq!(r1[1].frame, Frame::NullArray, "seed {seed}");
        let start = b.sent_at(1, "BZPOPMIN empty 0.1");
        assert!(
            r1[1].node_us >= start / 1000 * 1000 + 100_000,
            "seed {seed}"
        );
    }
}

//! A full transfer to an empty replica (issue 16's catch-up) on a virtual clock: how long the
//! catch-up takes, how long the writer's clients wait meanwhile, and how long each call into
//! the writer runs (the step a client batch waits behind on the real server, which hands the
//! node one input at a time under its lock).
//!
//! Three nodes in memory, each on a core of its own: a call into a node starts when its input
//! has arrived and the node is free, and takes the CPU time the call really took (measured
//! with the thread's CPU clock, so the machine's load changes little); a message arrives
//! `LATENCY_US` (default 50) after the call that sent it ended. Nodes 1 and 2 are loaded with
//! `keys` string keys (64-byte values); node 3 then links up empty while node 1 takes `RATE`
//! (default 20,000) SETs of new keys per second of virtual time, one request each. Node 3 has
//! caught up when it holds as many keys as node 1 less the last check interval's writes, with
//! nothing owed to it; the writes then stop and the run goes on until node 3's tree equals
//! node 1's. Prints, in virtual time: the time to catch up, the writer clients' latency
//! (p50 / p99 / max), and the CPU share each node spent; and node 1's calls other than client
//! requests (p50 / p99 / max CPU), the largest message, and the bytes node 1 sent node 3.
//!
//!   cargo run --release -p lattice-node --example repl_catchup_steps [keys] [slice_keys]...
//!   RATE=40000 LATENCY_US=100 cargo run --release ... --example repl_catchup_steps 1000000
//!
//! Not modelled: the real server's batching of inputs per lock hold, its syscalls and the
//! link's writer tasks (a constant cost per message that the latency stands for).

// A probe outside the node: it may read the clock the node itself never reads.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use lattice_node::{Buggify, Config, ConnId, Input, Micros, Node, NodeId, Output};

/// CPU time consumed by this thread so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The cost of reading the clock twice (the least of many tries): taken off every measured
/// call, so a client request of a few µs is not charged the clock's own syscalls.
fn clock_overhead() -> Duration {
    (0..1_000)
        .map(|_| {
            let t = thread_cpu();
            thread_cpu() - t
        })
        .min()
        .unwrap_or_default()
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn node(id: u32, slice_keys: usize, now: Micros) -> Node {
    let mut config = Config::default();
    config.node_id = id;
    config.cluster_size = 3;
    config.repl_slice_keys = slice_keys;
    let mut n = Node::new(config, u64::from(id), Buggify::disabled(), now);
    n.handle(
        now,
        Input::Connected {
            conn: ConnId(1),
            peer_addr: "127.0.0.1:1".into(),
            local_addr: "127.0.0.1:2".into(),
        },
    );
    n
}

fn set_args(key: String) -> Vec<Bytes> {
    vec![
        Bytes::from_static(b"SET"),
        Bytes::from(key),
        Bytes::from(vec![b'v'; 64]),
    ]
}

enum Ev {
    Msg {
        from: usize,
        data: Bytes,
    },
    /// Client requests that arrived at `arrived_us` (one pipelined batch).
    Client {
        arrived_us: u64,
        batch: Vec<Vec<Bytes>>,
    },
    Timer,
}

struct Sim {
    nodes: Vec<Node>,
    /// Virtual µs at which each node's core is free again.
    free_us: Vec<u64>,
    /// The timer each node asked for last; other timer events are stale.
    timer_us: Vec<u64>,
    /// (virtual µs, sequence) -> (node, event): the sequence keeps arrivals in order.
    events: BTreeMap<(u64, u64), (usize, Ev)>,
    seq: u64,
    latency_us: u64,
    overhead: Duration,
    /// Node 3 is linked (before: messages to it are not sent).
    third_up: bool,
    /// While timing: node 1's calls other than client requests, with what they were.
    timing: bool,
    steps: Vec<Duration>,
    longest: Vec<(Duration, String, usize)>,
    /// While timing: each client request's wait from arrival to reply, µs.
    client_us: Vec<u64>,
    /// While timing: CPU each node spent.
    busy: Vec<Duration>,
    largest_to_third: usize,
    bytes_to_third: usize,
}

impl Sim {
    fn push(&mut self, at_us: u64, to: usize, ev: Ev) {
        self.seq += 1;
        self.events.insert((at_us, self.seq), (to, ev));
    }

    fn now_us(&self) -> u64 {
        self.events.keys().next().map_or(0, |k| k.0)
    }

    /// Runs the next event; false when there is none.
    fn step(&mut self) -> bool {
        let Some(((at, seq), (i, ev))) = self.events.pop_first() else {
            return false;
        };
        if matches!(ev, Ev::Timer) && self.timer_us[i] != at {
            return true; // replaced by a later request for a timer
        }
        if at < self.free_us[i] {
            // The node is busy: the input waits, keeping its place among the others.
            self.events.insert((self.free_us[i], seq), (i, ev));
            return true;
        }
        let now = Micros(at);
        let what = match &ev {
            Ev::Msg { from, data } => format!("message of {} B from node {}", data.len(), from + 1),
            Ev::Client { .. } => String::new(),
            Ev::Timer => "timers".to_string(),
        };
        let client = matches!(ev, Ev::Client { .. });
        let t = thread_cpu();
        let mut arrived = None;
        match ev {
            Ev::Msg { from, data } => {
                let peer = NodeId(from as u32 + 1);
                self.nodes[i].handle(now, Input::PeerMessage { peer, data });
            }
            Ev::Client { arrived_us, batch } => {
                arrived = Some((arrived_us, batch.len()));
                for args in batch {
                    self.nodes[i].handle(
                        now,
                        Input::Request {
                            conn: ConnId(1),
                            args,
                        },
                    );
                }
            }
            Ev::Timer => self.nodes[i].handle_timeout(now),
        }
        let mut sent = 0;
        let mut out = Vec::new();
        while let Some(o) = self.nodes[i].poll_output() {
            if let Output::PeerSend { peer, data } = o {
                out.push((peer.0 as usize - 1, data));
            }
        }
        let took = (thread_cpu() - t).saturating_sub(self.overhead);
        let done = at + took.as_micros() as u64;
        self.free_us[i] = done;
        for (to, data) in out {
            sent += data.len();
            if (to == 2 || i == 2) && !self.third_up {
                continue;
            }
            if i == 0 && to == 2 && self.timing {
                self.largest_to_third = self.largest_to_third.max(data.len());
                self.bytes_to_third += data.len();
            }
            self.push(done + self.latency_us, to, Ev::Msg { from: i, data });
        }
        if let Some(Micros(next)) = self.nodes[i].poll_timeout() {
            let next = next.max(done);
            if next != self.timer_us[i] {
                self.timer_us[i] = next;
                self.push(next, i, Ev::Timer);
            }
        }
        if self.timing {
            self.busy[i] += took;
            if let Some((arrived_us, n)) = arrived {
                self.client_us
                    .extend(std::iter::repeat_n(done - arrived_us, n));
            } else if i == 0 && !client {
                self.steps.push(took);
                self.longest.push((took, what, sent));
                self.longest.sort_by_key(|l| std::cmp::Reverse(l.0));
                self.longest.truncate(5);
            }
        }
        true
    }

    /// Runs every event before `until_us`.
    fn run_until(&mut self, until_us: u64) {
        while self.events.keys().next().is_some_and(|k| k.0 < until_us) {
            self.step();
        }
    }

    fn info(&self, i: usize) -> String {
        self.nodes[i].info_everything()
    }
}

/// A number from an INFO text: `name:value` on a line of its own.
fn field(info: &str, name: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A number from a peer's line of INFO replication (`name=value` among others).
fn peer_field(line: &str, name: &str) -> u64 {
    line.split([',', ':'])
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// What a node still owes node 3 (leaves, and slices in flight).
fn owed_to_third(info: &str) -> u64 {
    info.lines()
        .filter(|l| l.starts_with("peer") && l.contains("id=3,"))
        .map(|l| peer_field(l, "transfer_owed_leaves") + peer_field(l, "transfer_inflight_slices"))
        .sum()
}

fn quantile_ms<T: Copy + Ord>(sorted: &[T], p: f64, ms: impl Fn(T) -> f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    ms(sorted[((sorted.len() - 1) as f64 * p) as usize])
}

fn run(keys: usize, slice_keys: usize) {
    let rate = env_u64("RATE", 20_000).max(1);
    let latency_us = env_u64("LATENCY_US", 50);
    let start_us = 1_700_000_000_000_000;
    let now = Micros(start_us);
    let mut s = Sim {
        nodes: vec![node(1, slice_keys, now), node(2, slice_keys, now)],
        free_us: vec![start_us; 3],
        timer_us: vec![0; 3],
        events: BTreeMap::new(),
        seq: 0,
        latency_us,
        overhead: clock_overhead(),
        third_up: false,
        timing: false,
        steps: Vec::new(),
        longest: Vec::new(),
        client_us: Vec::new(),
        busy: vec![Duration::ZERO; 3],
        largest_to_third: 0,
        bytes_to_third: 0,
    };
    for i in 0..2 {
        let other = NodeId(2 - i as u32);
        s.nodes[i].handle(now, Input::PeerUp { peer: other });
    }
    // The load: pipelined batches of 1,000 SETs every 10 ms (100,000 a second).
    let mut t = start_us;
    for b in 0..keys.div_ceil(1_000) {
        let batch = (b * 1_000..keys.min((b + 1) * 1_000))
            .map(|k| set_args(format!("pre:{k:010}")))
            .collect();
        s.push(
            t,
            0,
            Ev::Client {
                arrived_us: t,
                batch,
            },
        );
        t += 10_000;
    }
    s.push(start_us, 0, Ev::Timer);
    s.push(start_us, 1, Ev::Timer);
    loop {
        let until = s.now_us() + 100_000;
        s.run_until(until);
        if field(&s.info(1), "replicated_keys") >= keys as u64 {
            break;
        }
    }
    // Node 3 joins empty.
    let join_us = s.now_us().max(s.free_us[0]).max(s.free_us[1]);
    let now = Micros(join_us);
    s.nodes.push(node(3, slice_keys, now));
    s.free_us[2] = join_us;
    s.third_up = true;
    for i in 0..3 {
        for p in (1..=3u32).filter(|p| *p != i as u32 + 1) {
            s.nodes[i].handle(now, Input::PeerUp { peer: NodeId(p) });
        }
        s.timer_us[i] = join_us;
        s.push(join_us, i, Ev::Timer);
    }
    s.timing = true;
    let interval_us = 1_000_000 / rate;
    let check_us = 100_000;
    let mut writes = 0u64;
    let mut next_write_us = join_us;
    let mut caught_us = None;
    while caught_us.is_none() {
        let until = s.now_us().max(next_write_us) + check_us;
        while next_write_us < until {
            let batch = vec![set_args(format!("new:{writes:010}"))];
            s.push(
                next_write_us,
                0,
                Ev::Client {
                    arrived_us: next_write_us,
                    batch,
                },
            );
            writes += 1;
            next_write_us += interval_us;
        }
        s.run_until(until);
        let (one, three) = (s.info(0), s.info(2));
        let behind =
            field(&one, "replicated_keys").saturating_sub(field(&three, "replicated_keys"));
        let two = s.info(1);
        let owed = owed_to_third(&one) + owed_to_third(&two);
        if std::env::var_os("VERBOSE").is_some() {
            let peers = |info: &str| -> String {
                info.lines()
                    .filter(|l| l.starts_with("peer"))
                    .map(|l| {
                        format!(
                            "[{} owed {} inflight {} sent {} ae {}]",
                            peer_field(l, "id"),
                            peer_field(l, "transfer_owed_leaves"),
                            peer_field(l, "transfer_inflight_slices"),
                            peer_field(l, "transfer_slices_sent"),
                            peer_field(l, "last_anti_entropy_ms_ago"),
                        )
                    })
                    .collect()
            };
            println!(
                "  {:>6} ms: node 3 behind by {behind}; node 1 {} rounds {} deferred; node 2 {} rounds {} deferred; node 3 {} rounds {} deferred",
                (until - join_us) / 1_000,
                peers(&one),
                field(&one, "anti_entropy_rounds_deferred"),
                peers(&two),
                field(&two, "anti_entropy_rounds_deferred"),
                peers(&three),
                field(&three, "anti_entropy_rounds_deferred"),
            );
        }
        if behind <= check_us * rate / 1_000_000 && owed == 0 {
            caught_us = Some(until - join_us);
        }
        assert!(
            until - join_us < 3_600_000_000,
            "no catch-up within an hour of virtual time"
        );
    }
    let caught_us = caught_us.expect("loop ends caught up");
    let busy = s.busy.clone();
    s.timing = false;
    // The writes stop: how long until node 3's tree equals the writer's.
    let stop_us = s.now_us();
    let mut equal_us = None;
    for _ in 0..1_000 {
        let until = s.now_us() + 10_000;
        s.run_until(until);
        if s.nodes[0].replication_digest() == s.nodes[2].replication_digest()
            && s.nodes[1].replication_digest() == s.nodes[2].replication_digest()
        {
            equal_us = Some(until - stop_us);
            break;
        }
    }
    let mut steps = s.steps.clone();
    steps.sort();
    let mut client = s.client_us.clone();
    client.sort();
    let cpu_ms = |d: Duration| d.as_secs_f64() * 1e3;
    let us_ms = |u: u64| u as f64 / 1e3;
    let share = |d: Duration| 100.0 * d.as_secs_f64() / (caught_us as f64 / 1e6);
    println!(
        "keys {keys} slice_keys {slice_keys} rate {rate}/s latency {latency_us} us: node 3 caught up after {:.3} s of virtual time ({writes} writes meanwhile), trees equal {} after the writes stopped",
        caught_us as f64 / 1e6,
        equal_us.map_or("not within 10 s".to_string(), |u| format!("{:.1} ms", us_ms(u))),
    );
    println!(
        "  writer clients: p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms; CPU share node 1 / 2 / 3: {:.0}% / {:.0}% / {:.0}%",
        quantile_ms(&client, 0.5, us_ms),
        quantile_ms(&client, 0.99, us_ms),
        quantile_ms(&client, 1.0, us_ms),
        share(busy[0]),
        share(busy[1]),
        share(busy[2]),
    );
    let (one, three) = (s.info(0), s.info(2));
    println!(
        "  node-1 calls other than requests {:>7}: p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms; largest message to node 3 {} B; node 1 sent node 3 {} B; rounds node 1 {} (deferred {}), node 3 merged states {}",
        steps.len(),
        quantile_ms(&steps, 0.5, cpu_ms),
        quantile_ms(&steps, 0.99, cpu_ms),
        quantile_ms(&steps, 1.0, cpu_ms),
        s.largest_to_third,
        s.bytes_to_third,
        field(&one, "anti_entropy_rounds"),
        field(&one, "anti_entropy_rounds_deferred"),
        field(&three, "states_applied"),
    );
    for (took, what, sent) in &s.longest {
        println!("    {:.3} ms: {what}, sent {sent} B", cpu_ms(*took));
    }
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers: keys, then slice sizes"))
        .collect();
    let keys = args.first().copied().unwrap_or(100_000);
    let slices = if args.len() > 1 {
        args[1..].to_vec()
    } else {
        vec![Config::default().repl_slice_keys]
    };
    for s in slices {
        run(keys, s);
    }
}

//! The nemesis: injecting faults (partitions, clogs, crashes, pauses, connection resets),
//! ending them, and healing everything when the liveness phase starts.

use crate::fault::FaultClass;
use crate::net::{PeerFaults, Seg};
use crate::trace::TraceEvent;

use super::{Active, Ev, NodeSide, Phase, World};

impl World {
    pub(super) fn on_nemesis(&mut self) {
        if self.phase != Phase::Safety {
            return;
        }
        let classes: Vec<FaultClass> = self.cfg.injected.iter().copied().collect();
        let class = *self.rng.pick(&classes);
        self.inject(class);
        let t = self.now + self.rng.exp(self.cfg.nemesis_mean_us as f64) as u64;
        self.at(t, Ev::Nemesis);
    }

    pub(super) fn fault_duration(&mut self) -> u64 {
        self.rng.range(50_000, 3_000_000)
    }

    pub(super) fn add_active(&mut self, a: Active, dur: u64) {
        let id = self.next_fault_id;
        self.next_fault_id += 1;
        self.active.push((id, a));
        self.at(self.now + dur, Ev::FaultEnd { id });
    }

    /// The blocked paths are the union of the active partitions.
    pub(super) fn rebuild_partitions(&mut self) {
        self.net.heal_partitions();
        for (_, a) in &self.active {
            if let Active::Partition(pairs) = a {
                for &(x, y) in pairs {
                    self.net.block(x, y);
                }
            }
        }
    }

    pub(super) fn inject(&mut self, class: FaultClass) {
        let nodes = self.cfg.nodes;
        let hosts = self.net.hosts();
        let mut pairs: Vec<(usize, usize)> = Vec::new();
        let both = |pairs: &mut Vec<(usize, usize)>, a: &[usize], b: &[usize]| {
            for &x in a {
                for &y in b {
                    pairs.push((x, y));
                    pairs.push((y, x));
                }
            }
        };
        let desc = match class {
            FaultClass::PartitionSymmetric => {
                let (a, b): (Vec<usize>, Vec<usize>) = (0..hosts).partition(|_| self.rng.pct(50));
                both(&mut pairs, &a, &b);
                format!("partition {a:?} | {b:?}")
            }
            FaultClass::PartitionOneWay => {
                for _ in 0..self.rng.range(1, 4) {
                    let a = self.rng.below(hosts as u64) as usize;
                    let b = self.rng.below(nodes as u64) as usize;
                    let (from, to) = if self.rng.pct(50) { (a, b) } else { (b, a) };
                    if from != to {
                        pairs.push((from, to));
                    }
                }
                format!("one-way {pairs:?}")
            }
            FaultClass::PartitionIsolate => {
                let n = self.rng.below(nodes as u64) as usize;
                let others: Vec<usize> = (0..hosts).filter(|&h| h != n).collect();
                both(&mut pairs, &[n], &others);
                format!("isolate n{n}")
            }
            FaultClass::PartitionMajority => {
                let mut order: Vec<usize> = (0..nodes).collect();
                for i in (1..order.len()).rev() {
                    let j = self.rng.below(i as u64 + 1) as usize;
                    order.swap(i, j);
                }
                let minority = (nodes - 1) / 2;
                let (mut a, mut b) = (order[..minority].to_vec(), order[minority..].to_vec());
                for ci in 0..self.cfg.clients {
                    if self.rng.pct(50) {
                        a.push(nodes + ci);
                    } else {
                        b.push(nodes + ci);
                    }
                }
                both(&mut pairs, &a, &b);
                format!("minority {a:?} | majority {b:?}")
            }
            FaultClass::Clog => {
                let h = self.rng.below(hosts as u64) as usize;
                let d = self.rng.range(10_000, 2_000_000);
                self.net.clog(h, self.now + d);
                format!("clog host{h} for {}ms", d / 1000)
            }
            FaultClass::LatencySpike => {
                let d = self.fault_duration();
                self.net.slow_until = self.now + d;
                self.net.slow_factor = self.rng.range(5, 50);
                format!("latency x{} for {}ms", self.net.slow_factor, d / 1000)
            }
            FaultClass::ConnReset => {
                let open: Vec<u64> = (1..self.conns.len() as u64)
                    .filter(|&i| {
                        self.conns[i as usize]
                            .as_ref()
                            .is_some_and(|c| c.client_open)
                    })
                    .collect();
                if open.is_empty() {
                    return;
                }
                let mut victims = Vec::new();
                for _ in 0..self.rng.range(1, 3) {
                    victims.push(*self.rng.pick(&open));
                }
                victims.sort_unstable();
                victims.dedup();
                for &v in &victims {
                    self.reset_conn(v);
                }
                format!("reset {victims:?}")
            }
            FaultClass::CrashRestart => {
                let up: Vec<usize> = (0..nodes).filter(|&n| self.hosts[n].up()).collect();
                if up.is_empty() {
                    return;
                }
                let n = *self.rng.pick(&up);
                self.crash(n);
                let d = self.fault_duration();
                self.add_active(Active::Crashed(n), d);
                format!("crash n{n} for {}ms", d / 1000)
            }
            FaultClass::PauseResume => {
                let up: Vec<usize> = (0..nodes).filter(|&n| self.hosts[n].running()).collect();
                if up.is_empty() {
                    return;
                }
                let n = *self.rng.pick(&up);
                self.hosts[n].paused = true;
                self.trace(TraceEvent::Process {
                    node: n as u32,
                    what: "pause",
                });
                let d = self.fault_duration();
                self.add_active(Active::Paused(n), d);
                format!("pause n{n} for {}ms", d / 1000)
            }
            FaultClass::ClockJump => {
                let n = self.rng.below(nodes as u64) as usize;
                let mut d = self.rng.range_i(-3_000_000, 3_000_000);
                if self.replicated {
                    // Replicas' clocks stay within ±3 s of true time, so every deadline the
                    // workload sets has passed on every replica by the end of the drain.
                    let off = self.hosts[n].clock.offset_us();
                    d = (off + d).clamp(-3_000_000, 3_000_000) - off;
                }
                self.hosts[n].clock.jump(d);
                self.hosts[n].timer_at = None;
                self.schedule_timer(n);
                format!("clock n{n} steps {}ms", d / 1000)
            }
            _ => unreachable!("not injected: {class:?}"),
        };
        let partition = matches!(
            class,
            FaultClass::PartitionSymmetric
                | FaultClass::PartitionOneWay
                | FaultClass::PartitionIsolate
                | FaultClass::PartitionMajority
        );
        if partition {
            if pairs.is_empty() {
                return;
            }
            let d = self.fault_duration();
            self.add_active(Active::Partition(pairs), d);
            self.rebuild_partitions();
            self.sync_links();
        }
        self.faults.add(class, 1);
        self.trace(TraceEvent::Fault(desc));
    }

    pub(super) fn end_fault(&mut self, id: u64) {
        let Some(pos) = self.active.iter().position(|(i, _)| *i == id) else {
            return;
        };
        let (_, a) = self.active.remove(pos);
        match a {
            Active::Partition(_) => {
                self.rebuild_partitions();
                self.trace(TraceEvent::Fault("partition healed".into()));
                self.unpark_partitioned();
                self.sync_links();
            }
            Active::Crashed(n) => self.restart(n),
            Active::Paused(n) => self.resume(n),
        }
    }

    /// A middlebox kills a connection: both ends see a reset, bytes in flight are lost.
    pub(super) fn reset_conn(&mut self, id: u64) {
        self.trace(TraceEvent::Closed {
            conn: id,
            why: "network-reset",
        });
        let Some(c) = self.conn(id) else {
            return;
        };
        c.to_node.clear();
        c.to_client.clear();
        c.unread_by_client = 0;
        let (client_open, side) = (c.client_open, c.node_side);
        if side == NodeSide::Pending {
            c.node_side = NodeSide::Done;
        }
        if client_open {
            self.stream_push(id, false, Seg::Rst);
        }
        if side == NodeSide::Open {
            self.stream_push(id, true, Seg::Rst);
        }
    }

    pub(super) fn crash(&mut self, n: usize) {
        self.trace(TraceEvent::Process {
            node: n as u32,
            what: "crash",
        });
        // Bytes held for a paused node now meet a dead one (connection requests are refused).
        let parked = std::mem::take(&mut self.hosts[n].parked);
        // On a host with a bucket, every other crash takes the disk too: the replica
        // restores from its prefix (drawn only there, so other runs stay as they were).
        let lose_disk = self.hosts[n].bucket.is_some() && self.rng.pct(50);
        if lose_disk {
            self.faults.add(FaultClass::DiskLoss, 1);
            self.trace(TraceEvent::Process {
                node: n as u32,
                what: "disk lost",
            });
        }
        let conns = self.hosts[n].crash(lose_disk);
        for id in parked {
            if let Some(p) = self.pipe(id, true) {
                p.parked = false;
            }
            self.ensure_scheduled(id, true);
        }
        for id in conns {
            let Some(c) = self.conn(id) else {
                continue;
            };
            c.to_node.clear();
            c.to_client.clear();
            c.unread_by_client = 0;
            c.node_side = NodeSide::Done;
            c.inbuf.clear();
            if c.client_open {
                self.stream_push(id, false, Seg::Rst);
            }
            self.maybe_reap(id);
        }
        // The process is gone, and with it its side of every replica link.
        let nn = self.cfg.nodes;
        for b in 0..nn {
            self.link_peer[n * nn + b] = None;
        }
        self.sync_links();
    }

    pub(super) fn restart(&mut self, n: usize) {
        if self.hosts[n].up() {
            return;
        }
        let (seed, bug) = (self.rng.next(), self.rng.next());
        let now = self.now;
        if let Err(e) = self.hosts[n].start(seed, bug, now) {
            return self.fail(e);
        }
        self.trace(TraceEvent::Process {
            node: n as u32,
            what: "restart",
        });
        self.schedule_timer(n);
        self.sync_links();
    }

    pub(super) fn resume(&mut self, n: usize) {
        let host = &mut self.hosts[n];
        if !host.paused {
            return;
        }
        host.paused = false;
        let parked = std::mem::take(&mut host.parked);
        let inbox = std::mem::take(&mut host.inbox);
        self.trace(TraceEvent::Process {
            node: n as u32,
            what: "resume",
        });
        let nn = self.cfg.nodes;
        if self.replicated {
            // First what changed while it slept, then what arrived on links that still stand.
            self.sync_links();
            for (from, epoch, data) in inbox {
                if self.hosts[n].running() {
                    self.peer_deliver(from, n, epoch, data);
                }
            }
        } else {
            for (from, _, _) in inbox {
                self.heartbeats[from * nn + n] = self.now;
            }
        }
        for id in parked {
            if let Some(p) = self.pipe(id, true) {
                p.parked = false;
            }
            self.ensure_scheduled(id, true);
        }
        // Output that waited for room the client made meanwhile.
        let mut waiting: Vec<u64> = self.hosts[n].conns.iter().copied().collect();
        waiting.retain(|&id| {
            self.conns[id as usize]
                .as_ref()
                .is_some_and(|c| c.flow.waiting_for_room())
        });
        for id in waiting {
            self.queue_flush(id);
        }
        // Mail that waited for the node: every loop takes its own.
        for l in 0..self.hosts[n].loops {
            if self.hosts[n].router.as_ref().is_some_and(|r| r.has_mail(l)) {
                self.take_loop_mail(n, l);
            }
        }
        self.hosts[n].timer_at = None;
        self.schedule_timer(n);
    }

    /// Ends every fault: the liveness phase starts from a healthy system.
    pub(super) fn heal_all(&mut self) {
        let active = std::mem::take(&mut self.active);
        for (_, a) in active {
            match a {
                Active::Partition(_) => {}
                Active::Crashed(n) => self.restart(n),
                Active::Paused(n) => self.resume(n),
            }
        }
        self.net.heal_partitions();
        self.net.unclog_all();
        self.net.slow_until = 0;
        self.peers.faults = PeerFaults::default();
        for h in &mut self.hosts {
            if let Some(b) = h.bucket.as_mut() {
                b.weather = crate::bucket::Weather::Fine;
            }
        }
        self.unpark_partitioned();
        self.trace(TraceEvent::Fault("heal all".into()));
        self.sync_links();
    }
}

//! The clients: think time, connecting, generating and sending batches of requests, and
//! checking every reply against the model's expectation.

use std::collections::VecDeque;

use bytes::BytesMut;
use lattice_resp::{decode_frame, Frame, Limits, RequestParser};
use lattice_router::ConnFlow;

use crate::check::{Check, ScanState};
use crate::client::{encode, ReplyMode};
use crate::clock::EPOCH_US;
use crate::net::{Pipe, Seg};
use crate::trace::{escape, TraceEvent};
use crate::workload::{inline_safe, Cmd, Gen, Tag, FAMILIES, PUBSUB_FAMILY, TX_FAMILY};

use super::streams::seg_kind;
use super::{Conn, Ev, NodeSide, Phase, World};

impl World {
    pub(super) fn wake(&mut self, client: usize, at: u64) {
        let c = &mut self.clients[client];
        if c.wake_at.is_some_and(|w| w <= at) {
            return;
        }
        c.wake_at = Some(at);
        self.at(at, Ev::ClientWake { client });
    }

    /// Everything a client does when something happened or its time came: reconnect, give up
    /// on a stuck connection, send the next batch, and arrange to be woken again.
    pub(super) fn client_step(&mut self, ci: usize) {
        if self.phase == Phase::End || self.failure.is_some() {
            return;
        }
        let now = self.now;
        let timeout = self.cfg.client_timeout_us;
        let Some(id) = self.clients[ci].conn else {
            let at = self.clients[ci].reconnect_at;
            if now < at {
                self.wake(ci, at);
                return;
            }
            self.connect(ci);
            return self.client_step(ci);
        };
        // Give up on a connection whose oldest request (or expected close) is stuck.
        let c = &self.clients[ci];
        let stuck_since = match c.pending.front() {
            Some(p) => Some(p.sent_at),
            None if c.closing => Some(c.next_send_at),
            None => None,
        };
        if let Some(since) = stuck_since {
            if now >= since + timeout {
                if since >= self.settled_at {
                    let what = match c.pending.front() {
                        Some(p) => format!("a request ({:?})", p.tag),
                        None => "the close it was waiting for".to_string(),
                    };
                    self.fail(format!(
                        "liveness: client{ci} on c{id} waited {} ms for {what} sent after the faults were healed",
                        timeout / 1000
                    ));
                    return;
                }
                self.clients[ci].timeouts += 1;
                self.stats.timeouts += 1;
                self.abort(id, "client-timeout");
                self.client_lost_conn(ci);
                return self.client_step(ci);
            }
        }
        let c = &self.clients[ci];
        let can_send = self.phase <= Phase::Liveness && !c.closing;
        if can_send && now >= c.next_send_at && c.pending.len() < self.cfg.depth_max {
            self.send_batch(ci, id);
            // Now and then the client stops reading for a while (a slow consumer): the node's
            // socket fills and it must stop reading this connection, then wake it again.
            if self.flow_rng.pct(self.cfg.slow_read_pct) {
                // Well under the client timeout: a slow reader, not a stuck one.
                let max_us = self
                    .cfg
                    .slow_read_max_us
                    .min(self.cfg.client_timeout_us / 4)
                    .max(1_000);
                let pause = self.flow_rng.range(1_000, max_us);
                self.clients[ci].read_paused_until = now + pause;
            }
            let think = if self.rng.pct(self.cfg.think_zero_pct) {
                0
            } else {
                self.rng.exp(self.cfg.think_mean_us as f64) as u64
            };
            let c = &mut self.clients[ci];
            if c.conn.is_none() {
                return self.client_step(ci);
            }
            c.next_send_at = now + think.max(1);
        }
        let c = &self.clients[ci];
        let can_send = self.phase <= Phase::Liveness && !c.closing;
        let mut want = u64::MAX;
        if let Some(p) = c.pending.front() {
            want = want.min(p.sent_at + timeout);
        } else if c.closing {
            want = want.min(c.next_send_at + timeout);
        }
        if can_send && c.pending.len() < self.cfg.depth_max {
            want = want.min(c.next_send_at);
        }
        if want != u64::MAX {
            self.wake(ci, want);
        }
    }

    pub(super) fn connect(&mut self, ci: usize) {
        let nodes = self.cfg.nodes as u64;
        if self.rng.pct(self.cfg.roam_pct) {
            self.clients[ci].home = self.rng.below(nodes) as usize;
        }
        let node = self.clients[ci].home;
        let id = self.conns.len() as u64;
        let addr = format!("10.1.{}.{}:{}", ci / 250, ci % 250 + 1, 30000 + id);
        self.conns.push(Some(Conn {
            client: ci,
            node,
            loop_index: 0,
            killed: false,
            addr,
            to_node: Pipe::default(),
            to_client: Pipe::default(),
            client_open: true,
            node_side: NodeSide::Pending,
            parser: RequestParser::new(Limits::default()),
            inbuf: BytesMut::new(),
            rx: BytesMut::new(),
            expected: VecDeque::new(),
            scan: ScanState::default(),
            ops: VecDeque::new(),
            flow: ConnFlow::new(self.cfg.push_limit_bytes),
            unread_by_client: 0,
            writable_queued: false,
            cut_off: false,
        }));
        let c = &mut self.clients[ci];
        c.drop_conn();
        c.conn = Some(id);
        c.connects += 1;
        c.next_send_at = self.now;
        self.trace(TraceEvent::Connect {
            client: ci as u32,
            conn: id,
            node: node as u32,
        });
        self.stream_push(id, true, Seg::Syn);
    }

    /// The client forgets its connection and will reconnect after a backoff.
    pub(super) fn client_lost_conn(&mut self, ci: usize) {
        let backoff = self.rng.range(1_000, self.cfg.backoff_max_us);
        let c = &mut self.clients[ci];
        c.drop_conn();
        c.reconnect_at = self.now + backoff;
    }

    /// Aborts a connection from the client side (timeout): in-flight bytes are lost, the node
    /// sees a reset.
    pub(super) fn abort(&mut self, id: u64, why: &'static str) {
        self.trace(TraceEvent::Closed { conn: id, why });
        let Some(c) = self.conn(id) else {
            return;
        };
        c.to_node.clear();
        c.to_client.clear();
        c.unread_by_client = 0;
        c.client_open = false;
        match c.node_side {
            NodeSide::Pending => c.node_side = NodeSide::Done,
            NodeSide::Open => self.stream_push(id, true, Seg::Rst),
            NodeSide::Done => {}
        }
        self.maybe_reap(id);
    }

    /// Draws the next command, within what this client may send now.
    pub(super) fn generate(&mut self, ci: usize, id: u64) -> Cmd {
        let mode = self.clients[ci].mode;
        if mode == ReplyMode::Off {
            return Cmd::new("CLIENT").a("REPLY").a("ON").tag(Tag::ReplyOn);
        }
        let c = &self.clients[ci];
        let in_multi = c.in_multi;
        // An open transaction is closed soon (EXEC or DISCARD come from its family).
        let fam = if in_multi && self.rng.pct(25) {
            TX_FAMILY
        } else if !c.subs.is_empty() && self.rng.pct(25) {
            // A subscriber mostly speaks pub/sub (in RESP2 nothing else runs).
            PUBSUB_FAMILY
        } else {
            self.rng.weighted(&self.cfg.family_weights)
        };
        if self.stats.family_commands.len() < FAMILIES.len() {
            self.stats.family_commands.resize(FAMILIES.len(), 0);
        }
        self.stats.family_commands[fam] += 1;
        let disruptive = self.rng.pct(self.cfg.disruptive_pct) && !in_multi;
        let client_now_ms = (EPOCH_US + self.now) / 1000;
        let addr = self
            .conns
            .get(id as usize)
            .and_then(|c| c.as_ref())
            .map(|c| c.addr.clone())
            .unwrap_or_default();
        let c = &self.clients[ci];
        let mut g = Gen {
            rng: &mut self.rng,
            client_now_ms,
            conn_id: id,
            conn_addr: &addr,
            scan_next: c.scan_next.as_ref(),
            scan_busy: c.scan_busy || in_multi,
            disruptive: disruptive && mode == ReplyMode::On,
            in_multi,
            subscribed: !c.subs.is_empty(),
            replies_on: mode == ReplyMode::On,
        };
        (FAMILIES[fam].gen)(&mut g)
    }

    pub(super) fn send_batch(&mut self, ci: usize, id: u64) {
        let room = self.cfg.depth_max - self.clients[ci].pending.len();
        let n = self.rng.range(1, self.cfg.batch_max).min(room as u64);
        let mut buf = BytesMut::new();
        if self.replicated {
            // Every request goes into the history; an expiry probe's four requests always go
            // out together (so a batch may exceed the room by up to three).
            let mut sent = 0;
            while sent < n {
                let reqs = self.history.generate(&mut self.rng, &self.cfg.repl_weights);
                for (op, args) in reqs {
                    let inline = self.rng.pct(self.cfg.inline_pct) && inline_safe(&args);
                    encode(&args, inline, &mut buf);
                    self.clients[ci].sent(self.now, Tag::Plain);
                    if let Some(c) = self.conn(id) {
                        c.ops.push_back(op);
                    }
                    sent += 1;
                }
            }
            let data = buf.freeze();
            self.trace(TraceEvent::Send {
                client: ci as u32,
                conn: id,
                data: data.clone(),
            });
            self.stream_write(id, true, data);
            return;
        }
        for _ in 0..n {
            let cmd = self.generate(ci, id);
            if cmd.tag == Tag::Garbage {
                buf.extend_from_slice(&cmd.args[0]);
            } else {
                let inline = self.rng.pct(self.cfg.inline_pct) && inline_safe(&cmd.args);
                encode(&cmd.args, inline, &mut buf);
            }
            let stop = matches!(cmd.tag, Tag::Quit | Tag::Garbage);
            if cmd.tag != Tag::Garbage {
                self.clients[ci].track(&cmd.args);
            }
            self.clients[ci].sent(self.now, cmd.tag);
            if stop {
                break;
            }
        }
        let data = buf.freeze();
        self.trace(TraceEvent::Send {
            client: ci as u32,
            conn: id,
            data: data.clone(),
        });
        self.stream_write(id, true, data);
        // Now and then a client hangs up on its own (an orderly close).
        if !self.clients[ci].closing && self.rng.below(20_000) == 0 {
            self.trace(TraceEvent::Closed {
                conn: id,
                why: "client-close",
            });
            self.stream_push(id, true, Seg::Fin);
            if let Some(c) = self.conn(id) {
                c.client_open = false;
            }
            self.client_lost_conn(ci);
            self.maybe_reap(id);
        }
    }

    pub(super) fn deliver_to_client(&mut self, id: u64, ci: usize) {
        let now = self.now;
        let mut touched = false;
        while let Some(c) = self.conn(id) {
            let Some(seg) = c.to_client.pop_due(now) else {
                break;
            };
            let open = c.client_open;
            if let Seg::Data(b) = &seg {
                // Read (or thrown away by a closed client): room in the node's socket again.
                c.unread_by_client = c.unread_by_client.saturating_sub(b.len());
                if c.flow.waiting_for_room() && !c.writable_queued {
                    c.writable_queued = true;
                    let at = now + self.net.sample_latency(&mut self.rng, now);
                    self.at(at, Ev::Writable { conn: id });
                }
            }
            let (kind, len) = seg_kind(&seg);
            self.trace(TraceEvent::Deliver {
                conn: id,
                to_node: false,
                kind,
                len,
            });
            if !open {
                continue;
            }
            touched = true;
            match seg {
                Seg::Data(b) => {
                    self.conn(id).expect("checked").rx.extend_from_slice(&b);
                    loop {
                        let c = self.conn(id).expect("checked");
                        match decode_frame(&mut c.rx) {
                            Ok(Some(frame)) => {
                                self.on_reply(ci, id, frame);
                                if self.failure.is_some() {
                                    return;
                                }
                            }
                            Ok(None) => break,
                            Err(e) => {
                                let rest = escape(&c.rx, 200);
                                self.fail(format!(
                                    "client{ci} c{id}: undecodable reply bytes ({e}): {rest}"
                                ));
                                return;
                            }
                        }
                    }
                }
                Seg::Fin => {
                    self.on_node_closed(ci, id);
                    if self.failure.is_some() {
                        return;
                    }
                }
                Seg::Rst => {
                    self.trace(TraceEvent::Closed {
                        conn: id,
                        why: "reset",
                    });
                    if let Some(c) = self.conn(id) {
                        c.client_open = false;
                    }
                    self.client_lost_conn(ci);
                }
                Seg::Syn => unreachable!("no SYN towards clients"),
            }
        }
        if touched {
            self.client_step(ci);
        }
    }

    pub(super) fn on_reply(&mut self, ci: usize, id: u64, frame: Frame) {
        self.trace(TraceEvent::Reply {
            client: ci as u32,
            conn: id,
            frame: frame.clone(),
        });
        let c = self.conns[id as usize].as_mut().expect("live");
        let node = c.node;
        // A group's frames may come in any order: take the first of the group this one meets.
        if let Some(g) = c.expected.front().map(|e| e.group).filter(|g| *g != 0) {
            let run = c.expected.iter().take_while(|e| e.group == g).count();
            let mut scratch = ScanState::default();
            if let Some(i) = (0..run).find(|&i| {
                self.verifier
                    .verify(&c.expected[i].check, &frame, &mut scratch)
                    .is_ok()
            }) {
                let exp = c.expected.remove(i).expect("in range");
                c.expected.push_front(exp);
            }
        }
        let Some(exp) = c.expected.pop_front() else {
            let msg = format!(
                "n{node} c{id}: got {} but the node executed no request that awaits a reply",
                crate::trace::show_frame(&frame)
            );
            self.fail(msg);
            return;
        };
        // Partitioned: a keyed command may find no owner (membership not learned yet, every
        // owner cut off: CLUSTERDOWN, it did not run) or lose its owner with the command in
        // flight (TRYAGAIN: it may have run). Either may replace any reply.
        let unavailable = match &frame {
            Frame::Error(e) if self.cfg.partitioned() => {
                if e.starts_with(b"CLUSTERDOWN") {
                    Some(false)
                } else if e.starts_with(b"TRYAGAIN") {
                    Some(true)
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some(maybe_ran) = unavailable {
            if let Some(op) = exp.op {
                self.history.unavailable(op, &frame, maybe_ran);
            }
        } else if let Err(why) = self.verifier.verify(&exp.check, &frame, &mut c.scan) {
            let cmd: Vec<String> = exp.args.iter().map(|a| escape(a, 80)).collect();
            let what = if cmd.is_empty() {
                "(protocol error or close)".to_string()
            } else {
                cmd.join(" ")
            };
            self.fail(format!(
                "n{node} c{id}: reply to `{what}` (executed at node time {}.{:06}) is wrong: {why}",
                exp.at_us / 1_000_000,
                exp.at_us % 1_000_000
            ));
            return;
        }
        if let Some(op) = exp.op.filter(|_| unavailable.is_none()) {
            if let Err(why) = self.history.check_read(op, &frame) {
                let cmd: Vec<String> = exp.args.iter().map(|a| escape(a, 80)).collect();
                self.fail(format!(
                    "n{node} c{id}: reply to `{}` (executed at node time {}.{:06}) is wrong: {why}: {}",
                    cmd.join(" "),
                    exp.at_us / 1_000_000,
                    exp.at_us % 1_000_000,
                    crate::trace::show_frame(&frame)
                ));
                return;
            }
            self.history.replied(op, &frame);
        }
        self.stats.pushes += u64::from(!exp.answers);
        if !exp.answers {
            return;
        }
        let c = &mut self.clients[ci];
        let Some(p) = c.pending.pop_front() else {
            self.fail(format!(
                "client{ci} c{id}: a reply arrived but the client expected none"
            ));
            return;
        };
        if let Tag::Scan(args) = p.tag {
            c.scan_busy = false;
            c.scan_next = match &frame {
                Frame::Array(parts) => match parts.first() {
                    Some(Frame::Bulk(cur)) if &cur[..] != b"0" => Some((cur.clone(), args)),
                    _ => None,
                },
                _ => None,
            };
        }
        c.replies += 1;
        c.last_reply_at = self.now;
        self.stats.ops += 1;
    }

    /// The node closed the connection (FIN after its last bytes). Legitimate only where the
    /// model expected a close, and only once every executed request was answered.
    pub(super) fn on_node_closed(&mut self, ci: usize, id: u64) {
        self.trace(TraceEvent::Closed {
            conn: id,
            why: "closed-by-node",
        });
        let c = self.conns[id as usize].as_mut().expect("live");
        let node = c.node;
        // Cut off by the driver (pushes over the bound, or a kill while it was not reading):
        // the replies it dropped never come, and the close may precede the expected one.
        let fine = c.cut_off || (c.expected.len() == 1 && c.expected[0].check == Check::Close);
        c.client_open = false;
        if !fine {
            let rest: Vec<String> = c
                .expected
                .iter()
                .map(|e| match &e.check {
                    Check::Close => "(close)".to_string(),
                    _ => e
                        .args
                        .iter()
                        .map(|a| escape(a, 40))
                        .collect::<Vec<_>>()
                        .join(" "),
                })
                .collect();
            let msg = if c.expected.is_empty() {
                format!("n{node} c{id}: the node closed the connection for no reason")
            } else {
                format!(
                    "n{node} c{id}: the node closed the connection with these executed requests unanswered: {rest:?}"
                )
            };
            self.fail(msg);
            return;
        }
        c.expected.clear();
        self.client_lost_conn(ci);
    }
}

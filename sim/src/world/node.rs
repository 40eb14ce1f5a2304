//! The node driver: delivery of client bytes to a node, parsing, batches through the node's
//! router, the reference model beside each request, output routing between event loops, and
//! the node's timers.

use bytes::{Bytes, BytesMut};
use lattice_node::{ConnId, Input, Micros};
use lattice_resp::decode_frame;
use lattice_router::{AfterWrite, Mail, MailAction, Route};

use crate::check::{Check, Expect};
use crate::net::Seg;
use crate::trace::TraceEvent;

use super::streams::seg_kind;
use super::{Cut, Ev, NodeSide, World};

/// Virtual time between mail being posted for another event loop and that loop running (a
/// thread woken through its eventfd), at most.
const LOOP_WAKE_MAX_US: u64 = 50;

/// The loop that runs a node's timers (the server's first loop).
const TIMER_LOOP: usize = 0;

impl World {
    pub(super) fn deliver_to_node(&mut self, id: u64, node: usize) {
        let now = self.now;
        let mut touched = false;
        while let Some(c) = self.conn(id) {
            let Some(seg) = c.to_node.pop_due(now) else {
                break;
            };
            let (kind, len) = seg_kind(&seg);
            self.trace(TraceEvent::Deliver {
                conn: id,
                to_node: true,
                kind,
                len,
            });
            match seg {
                Seg::Syn => {
                    if !self.hosts[node].up() {
                        // Connection refused.
                        if let Some(c) = self.conn(id) {
                            c.node_side = NodeSide::Done;
                        }
                        self.stream_push(id, false, Seg::Rst);
                        continue;
                    }
                    let host = &mut self.hosts[node];
                    let loop_index = host.next_loop;
                    host.next_loop = (loop_index + 1) % host.loops;
                    let addr = {
                        let c = self.conn(id).expect("checked");
                        c.node_side = NodeSide::Open;
                        c.loop_index = loop_index;
                        c.addr.clone()
                    };
                    let host = &mut self.hosts[node];
                    host.conns.insert(id);
                    host.model.connect(id, addr.clone());
                    let t = host.clock.read(now);
                    let router = host.router.as_mut().expect("up");
                    let slot = id as usize;
                    router.register(ConnId(id), Route { loop_index, slot });
                    router.handle(
                        Micros(t),
                        Input::Connected {
                            conn: ConnId(id),
                            peer_addr: addr,
                            local_addr: format!("10.0.0.{}:6379", node + 1),
                        },
                    );
                    self.drain(node, Some(id));
                    touched = true;
                }
                Seg::Data(b) => {
                    let c = self.conn(id).expect("checked");
                    if c.node_side != NodeSide::Open {
                        continue;
                    }
                    // The server reads the socket only while the connection's output is not
                    // stuck; otherwise the bytes wait (here in `inbuf`) for the wake-up.
                    c.inbuf.extend_from_slice(&b);
                    c.flow.input_ready();
                    if c.flow.should_read() {
                        self.parse_and_execute(id, node);
                    }
                    touched = true;
                }
                Seg::Fin | Seg::Rst => {
                    let c = self.conn(id).expect("checked");
                    if c.node_side != NodeSide::Open {
                        c.node_side = NodeSide::Done;
                        continue;
                    }
                    c.node_side = NodeSide::Done;
                    c.inbuf.clear();
                    let loop_index = c.loop_index;
                    let host = &mut self.hosts[node];
                    host.conns.remove(&id);
                    host.model.disconnect(id);
                    let t = host.clock.read(now);
                    let router = host
                        .router
                        .as_mut()
                        .expect("open connections belong to a live node");
                    router.unregister(ConnId(id));
                    router.handle(Micros(t), Input::Closed { conn: ConnId(id) });
                    self.drain_on(node, None, Some(loop_index));
                    touched = true;
                }
            }
        }
        if touched {
            self.after_node_step(node);
        }
    }

    /// Runs the invariant checker of the node a step touched (nodes a step did not touch have
    /// not changed): the full check if its stride (`RunConfig::check_every`) is due, else the
    /// check of what the step changed. Then re-arms its timer.
    pub(super) fn after_node_step(&mut self, node: usize) {
        let every = self.cfg.check_every.max(1);
        let host = &mut self.hosts[node];
        let due = host.steps_unchecked.is_none_or(|n| n + 1 >= every);
        host.steps_unchecked = Some(host.steps_unchecked.map_or(0, |n| n + 1));
        if due {
            self.check_node(node);
        } else {
            self.check_node_changed(node);
        }
        self.schedule_timer(node);
    }

    /// The invariant check of a running node limited to the keys changed since its last one
    /// (`Node::check_changed_invariants`; the full one when too much changed).
    fn check_node_changed(&mut self, node: usize) {
        let host = &mut self.hosts[node];
        if let Some(r) = host.router.as_mut() {
            if r.check_changed_invariants() {
                host.steps_unchecked = Some(0);
                self.stats.invariant_checks += 1;
            } else {
                self.stats.changed_checks += 1;
            }
        }
    }

    /// The full invariant check of a running node (router, node, keyspace, replicated state).
    pub(super) fn check_node(&mut self, node: usize) {
        let host = &mut self.hosts[node];
        if let Some(r) = host.router.as_ref() {
            r.check_invariants();
            host.steps_unchecked = Some(0);
            self.stats.invariant_checks += 1;
        }
    }

    /// Runs everything complete in the connection's buffer as one batch (the server's read
    /// batch), ending the batch early after a request whose reply the model settles from, or
    /// that closes the connection.
    pub(super) fn parse_and_execute(&mut self, id: u64, node: usize) {
        let mut commands = 0;
        loop {
            let Some(c) = self.conn(id) else {
                return;
            };
            // A closing connection is read no more (what came after a QUIT is never run).
            if c.node_side != NodeSide::Open || c.flow.is_closing() {
                c.inbuf.clear();
                return;
            }
            match c.parser.parse(&mut c.inbuf) {
                Ok(Some(args)) => {
                    if commands == 0 {
                        self.router(node).begin_batch();
                    }
                    commands += 1;
                    if let Some(cut) = self.execute(id, node, args) {
                        self.end_batch(id, node, commands, None);
                        commands = 0;
                        if let Cut::Settle(t) = cut {
                            self.settle(node, t);
                        }
                    }
                }
                Ok(None) => {
                    // Everything delivered was read: the next bytes raise a new edge.
                    c.flow.input_drained();
                    break;
                }
                Err(e) => {
                    let message = e.message().to_string();
                    c.inbuf.clear();
                    if commands == 0 {
                        self.router(node).begin_batch();
                    }
                    self.protocol_error(id, node, &message);
                    self.end_batch(id, node, commands, Some(message));
                    return;
                }
            }
        }
        if commands > 0 {
            self.end_batch(id, node, commands, None);
        }
    }

    pub(super) fn router(&mut self, node: usize) -> &mut crate::process::NodeRouter {
        self.hosts[node].router.as_mut().expect("up")
    }

    /// Ends the batch running for `id`: its output is carried out as the server would.
    pub(super) fn end_batch(
        &mut self,
        id: u64,
        node: usize,
        commands: u64,
        protocol_error: Option<String>,
    ) {
        let mut own_out = Vec::new();
        let close =
            self.router(node)
                .end_batch(ConnId(id), commands, 0, protocol_error, &mut own_out);
        self.carry_out(node, Some(id), own_out, close);
    }

    /// Records in the trace that `node` executes `args` for connection `id` at its time `t`.
    fn trace_request(&mut self, node: usize, id: u64, t: u64, args: &[Bytes]) {
        self.trace(TraceEvent::Request {
            node: node as u32,
            conn: id,
            now_us: t,
            args: args.to_vec(),
        });
    }

    /// Runs one request of the batch. Returns why the batch must end after it, if it must.
    pub(super) fn execute(&mut self, id: u64, node: usize, args: Vec<Bytes>) -> Option<Cut> {
        if self.replicated {
            self.execute_replicated(id, node, args);
            return None;
        }
        let now = self.now;
        let host = &mut self.hosts[node];
        let t = host.clock.read(now);
        if self.conns[id as usize].as_ref().is_some_and(|c| c.killed) {
            self.trace_request(node, id, t, &args);
            self.router(node).request(Micros(t), ConnId(id), args);
            return None;
        }
        let applied = host.model.apply(id, t, &args);
        if applied.settle {
            self.capture = Some((id, BytesMut::new()));
        }
        self.stats.requests += 1;
        self.trace_request(node, id, t, &args);
        for p in applied.pushes {
            if let Some(pc) = self.conn(p.conn) {
                pc.expected.push_back(Expect {
                    group: p.group,
                    answers: p.answers,
                    ..Expect::reply(args.clone(), p.check, t)
                });
            }
        }
        let c = self.conn(id).expect("executing on a live connection");
        if let Some(check) = applied.reply {
            c.expected.push_back(Expect::reply(args.clone(), check, t));
        }
        let closes_self = applied.close_self || applied.kill.contains(&id);
        if applied.close_self {
            c.expected.push_back(Expect::close(t));
        }
        for v in applied.kill {
            if let Some(vc) = self.conn(v) {
                vc.killed = true;
                vc.expected.push_back(Expect::close(t));
            }
        }
        self.router(node).request(Micros(t), ConnId(id), args);
        if closes_self {
            // The batch ends with the connection: the node answers nothing after it.
            Some(Cut::Closed)
        } else {
            applied.settle.then_some(Cut::Settle(t))
        }
    }

    /// The model learns a random outcome (a random SPOP) from the reply the batch just wrote.
    pub(super) fn settle(&mut self, node: usize, t: u64) {
        if let Some((_, mut out)) = self.capture.take() {
            // The node answers at once: its reply is the last frame it wrote to the connection.
            let mut last = None;
            while let Ok(Some(f)) = decode_frame(&mut out) {
                last = Some(f);
            }
            if let Some(f) = last {
                self.hosts[node].model.settle(&f, t);
            }
        }
    }

    /// Replicated mode: no reference model (other replicas write the same keys); the request's
    /// check comes from the history, which learns that it executed here, and for a SET, the
    /// stamp the replica gave it.
    pub(super) fn execute_replicated(&mut self, id: u64, node: usize, args: Vec<Bytes>) {
        let now = self.now;
        let host = &mut self.hosts[node];
        let t = host.clock.read(now);
        let incarnation = host.incarnation;
        self.stats.requests += 1;
        self.trace_request(node, id, t, &args);
        let c = self.conn(id).expect("executing on a live connection");
        let op = c.ops.pop_front();
        let check = match op {
            Some(op) => self.history.check(op),
            None => Check::NotError,
        };
        let c = self.conn(id).expect("executing on a live connection");
        c.expected.push_back(Expect {
            op,
            ..Expect::reply(args.clone(), check, t)
        });
        let set_key = op.and_then(|op| {
            self.history.executed(op, node, incarnation);
            self.history.is_set(op).map(|k| k.to_vec())
        });
        let router = self.router(node);
        router.request(Micros(t), ConnId(id), args);
        if let (Some(op), Some(key)) = (op, set_key) {
            let stamp = router.node_mut().string_stamp(&key);
            self.history.stamped(op, stamp);
        }
    }

    /// The read ended in bytes that are not RESP: the model expects the error and the close
    /// (the batch's end hands the node the error).
    pub(super) fn protocol_error(&mut self, id: u64, node: usize, message: &str) {
        let t = self.hosts[node].clock.read(self.now);
        let c = self.conn(id).expect("live");
        c.expected.push_back(Expect::reply(
            Vec::new(),
            Check::err(&format!("ERR {message}")),
            t,
        ));
        c.expected.push_back(Expect::close(t));
        self.trace(TraceEvent::ProtocolError {
            node: node as u32,
            conn: id,
            message: message.to_string(),
        });
    }

    /// Carries out everything the node wants done after an input for connection `own` (None:
    /// an input of no connection's, such as a peer message).
    pub(super) fn drain(&mut self, node: usize, own: Option<u64>) {
        let current = own.and_then(|id| self.conns[id as usize].as_ref().map(|c| c.loop_index));
        self.drain_on(node, own, current);
    }

    /// [`World::drain`] run by event loop `current` (None: by no loop, as the server's replica
    /// links are).
    pub(super) fn drain_on(&mut self, node: usize, own: Option<u64>, current: Option<usize>) {
        let host = &mut self.hosts[node];
        let t = host.clock.read(self.now);
        let Some(router) = host.router.as_mut() else {
            return;
        };
        let mut own_out = Vec::new();
        let mut close = router.drain(Micros(t), own.map(ConnId), &mut own_out);
        // The server syncs once at the end of the loop's turn and drains again (the sync
        // releases replies held for it): the same here, at once.
        while router.sync_wanted() {
            router.complete_sync(Micros(t));
            close |= router.drain(Micros(t), own.map(ConnId), &mut own_out);
        }
        self.carry_out_on(node, own, own_out, close, current);
    }

    pub(super) fn carry_out(
        &mut self,
        node: usize,
        own: Option<u64>,
        own_out: Vec<Bytes>,
        close: bool,
    ) {
        let current = own.and_then(|id| self.conns[id as usize].as_ref().map(|c| c.loop_index));
        self.carry_out_on(node, own, own_out, close, current);
    }

    /// What the server's event loop `current` does with a drain's results: the own
    /// connection's output, then the loop's own mail (taken right after each batch), peer
    /// messages, and a wake-up for every other loop that got mail.
    pub(super) fn carry_out_on(
        &mut self,
        node: usize,
        own: Option<u64>,
        own_out: Vec<Bytes>,
        close: bool,
        current: Option<usize>,
    ) {
        if let Some(id) = own {
            for data in own_out {
                self.write_to(node, id, data);
            }
            if close {
                self.node_close(node, id);
            }
        }
        if let Some(l) = current {
            self.take_loop_mail(node, l);
        }
        let Some(router) = self.hosts[node].router.as_mut() else {
            return;
        };
        let sends: Vec<_> = router.take_peer_sends().collect();
        let mut to_wake = Vec::new();
        router.take_loops_to_wake(&mut to_wake);
        let mut sent = false;
        for (peer, data) in sends {
            sent |= self.peer_send(node, peer.0, data);
        }
        if sent {
            self.schedule_peer_tick();
        }
        let incarnation = self.hosts[node].incarnation;
        for loop_index in to_wake {
            if Some(loop_index) == current {
                continue;
            }
            let at = self.now + self.rng.range(1, LOOP_WAKE_MAX_US);
            self.at(
                at,
                Ev::LoopWake {
                    node,
                    loop_index,
                    incarnation,
                },
            );
        }
    }

    /// Event loop `loop_index` of `node` takes its mail: what the connection's
    /// `ConnFlow` queues is written at the end of the step.
    pub(super) fn take_loop_mail(&mut self, node: usize, loop_index: usize) {
        let mut mail = Vec::new();
        match self.hosts[node].router.as_mut() {
            Some(r) => r.take_mail(loop_index, &mut mail),
            None => return,
        }
        for m in mail {
            let id = m.target().1 .0;
            if !self.served_by(id, node, loop_index) {
                continue;
            }
            let closes = matches!(m, Mail::Close { .. });
            if let Mail::Write { data, .. } = &m {
                self.record_output(node, id, data);
            }
            let c = self.conn(id).expect("served");
            match c.flow.take_mail(m) {
                MailAction::Flush => {
                    if closes {
                        self.node_forget(node, id);
                    }
                    self.queue_flush(id);
                }
                MailAction::CloseNow(overflow) => self.cut_off(node, id, overflow.is_some()),
            }
        }
    }

    /// Mail can outlive its connection: it is for `id` only while `loop_index` of `node`
    /// still serves it.
    pub(super) fn served_by(&self, id: u64, node: usize, loop_index: usize) -> bool {
        self.conns
            .get(id as usize)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| {
                c.node == node && c.loop_index == loop_index && c.node_side == NodeSide::Open
            })
    }

    pub(super) fn on_loop_wake(&mut self, node: usize, loop_index: usize, incarnation: u32) {
        let host = &self.hosts[node];
        if host.incarnation != incarnation || !host.up() || host.paused {
            // A paused node's loops take their mail when it resumes.
            return;
        }
        self.take_loop_mail(node, loop_index);
        self.after_node_step(node);
    }

    /// Output of the node for connection `id`, as it leaves the node (trace, settle capture).
    fn record_output(&mut self, node: usize, id: u64, data: &Bytes) {
        if let Some((_, out)) = self.capture.as_mut().filter(|c| c.0 == id) {
            out.extend_from_slice(data);
        }
        self.trace(TraceEvent::Output {
            node: node as u32,
            conn: id,
            data: data.clone(),
        });
    }

    /// A reply of the batch connection `id` ran: queued, written at the end of the step.
    pub(super) fn write_to(&mut self, node: usize, id: u64, data: Bytes) {
        self.record_output(node, id, &data);
        let Some(c) = self.conn(id).filter(|c| c.node_side == NodeSide::Open) else {
            return;
        };
        c.flow.replies_mut().push(data);
        self.queue_flush(id);
    }

    /// The node closed connection `id`: the connection goes once everything written before
    /// is (unless the client stops reading meanwhile and another close cuts it off).
    pub(super) fn node_close(&mut self, node: usize, id: u64) {
        self.node_forget(node, id);
        if let Some(c) = self.conn(id).filter(|c| c.node_side == NodeSide::Open) {
            c.flow.close_after_output();
            self.queue_flush(id);
        }
    }

    /// The node is done with connection `id` (what it said before is still to be written):
    /// the model forgets it and no more output is routed to it.
    fn node_forget(&mut self, node: usize, id: u64) {
        self.trace(TraceEvent::NodeClose {
            node: node as u32,
            conn: id,
        });
        let host = &mut self.hosts[node];
        host.model.disconnect(id);
        if let Some(r) = host.router.as_mut() {
            r.unregister(ConnId(id));
        }
    }

    /// The node side of connection `id` closes: FIN after the bytes already written.
    fn node_fin(&mut self, node: usize, id: u64) {
        self.hosts[node].conns.remove(&id);
        if let Some(c) = self.conn(id) {
            c.node_side = NodeSide::Done;
            c.inbuf.clear();
            self.stream_push(id, false, Seg::Fin);
        }
    }

    /// The driver closes connection `id` dropping its unwritten output: pushes passed the
    /// bound (`overflow`: the node is told, as of any close it did not ask for), or the node
    /// closed it while the client was not reading.
    fn cut_off(&mut self, node: usize, id: u64, overflow: bool) {
        self.node_forget(node, id);
        let Some(c) = self.conn(id) else {
            return;
        };
        c.cut_off = true;
        let loop_index = c.loop_index;
        self.stats.push_cutoffs += u64::from(overflow);
        self.trace(TraceEvent::Closed {
            conn: id,
            why: if overflow { "push-limit" } else { "cut-off" },
        });
        self.node_fin(node, id);
        if overflow {
            let host = &mut self.hosts[node];
            let t = host.clock.read(self.now);
            if let Some(r) = host.router.as_mut() {
                r.node_mut().output_limit_disconnected();
                r.handle(Micros(t), Input::Closed { conn: ConnId(id) });
            }
            self.drain_on(node, None, Some(loop_index));
        }
    }

    /// Connection `id` has output to write at the end of this step.
    pub(super) fn queue_flush(&mut self, id: u64) {
        if !self.to_flush.contains(&id) {
            self.to_flush.push(id);
        }
    }

    /// The end of a step (the server's end of a loop's turn): every connection with output
    /// queued writes what its socket takes.
    pub(super) fn flush_pending(&mut self) {
        while !self.to_flush.is_empty() && self.failure.is_none() {
            let list = std::mem::take(&mut self.to_flush);
            for id in list {
                self.flush_conn(id);
            }
        }
    }

    /// Writes connection `id`'s output into its stream while the socket has room (the client
    /// has read all but `sock_buf_bytes` of it), and does what its `ConnFlow` says next.
    fn flush_conn(&mut self, id: u64) {
        let cap = self.cfg.sock_buf_bytes;
        let Some(c) = self.conn(id).filter(|c| c.node_side == NodeSide::Open) else {
            return;
        };
        let node = c.node;
        let next = loop {
            let c = self.conn(id).expect("open");
            let Some(first) = c.flow.out().chunks().first().cloned() else {
                break c.flow.all_written();
            };
            let room = cap.saturating_sub(c.unread_by_client);
            if room == 0 {
                break c.flow.socket_full();
            }
            let n = first.len().min(room);
            c.flow.out_mut().written(n);
            c.unread_by_client += n;
            self.stream_write(id, false, first.slice(..n));
        };
        self.conn(id).expect("open").flow.check_invariants();
        match next {
            AfterWrite::Idle => {}
            AfterWrite::WaitForRoom => {
                self.stats.socket_full += 1;
                self.trace(TraceEvent::Flow {
                    conn: id,
                    what: "socket full: reading paused",
                });
            }
            AfterWrite::Resume { read_now } => {
                self.trace(TraceEvent::Flow {
                    conn: id,
                    what: if read_now {
                        "socket drained: reading the input that waited"
                    } else {
                        "socket drained: reading resumes"
                    },
                });
                if read_now {
                    self.stats.wakeups += 1;
                    self.parse_and_execute(id, node);
                    self.after_node_step(node);
                }
            }
            AfterWrite::Close => self.node_fin(node, id),
        }
    }

    /// The client read from connection `id`: its node writes what waited for room.
    pub(super) fn on_writable(&mut self, id: u64) {
        let Some(c) = self.conn(id) else {
            return;
        };
        c.writable_queued = false;
        if c.node_side != NodeSide::Open || !c.flow.waiting_for_room() {
            return;
        }
        // A stopped process writes nothing; it writes what waits when it resumes.
        let node = c.node;
        if self.hosts[node].paused {
            return;
        }
        self.queue_flush(id);
    }

    /// Re-arms the node's timer event at the router's plan, moved earlier first if the node
    /// now wants its timers sooner (the server's wake-up of its timer loop).
    pub(super) fn schedule_timer(&mut self, node: usize) {
        let now = self.now;
        let host = &mut self.hosts[node];
        if !host.running() {
            return;
        }
        if let Some(r) = host.router.as_mut() {
            r.earlier_timer();
        }
        let Some(v) = host.timer_due(now) else {
            return;
        };
        if host.timer_at == Some(v) {
            return;
        }
        host.timer_at = Some(v);
        host.timer_gen += 1;
        let gen = host.timer_gen;
        self.at(v, Ev::NodeTimer { node, gen });
    }

    pub(super) fn on_timer(&mut self, node: usize, gen: u64) {
        let now = self.now;
        let host = &mut self.hosts[node];
        if host.timer_gen != gen || !host.up() {
            return;
        }
        host.timer_at = None;
        if host.paused {
            return; // deferred: re-armed on resume
        }
        let t = host.clock.read(now);
        let router = host.router.as_mut().expect("up");
        let next_us = router.run_timers(Micros(t), || t).map_or(u64::MAX, |d| d.0);
        router.plan_timers(next_us);
        // A sync the timers asked for (everysec), then what it released.
        let mut released = Vec::new();
        while router.sync_wanted() {
            router.complete_sync(Micros(t));
            router.drain(Micros(t), None, &mut released);
        }
        self.trace(TraceEvent::Timer {
            node: node as u32,
            now_us: t,
        });
        self.carry_out_on(node, None, Vec::new(), false, Some(TIMER_LOOP));
        self.after_node_step(node);
    }
}

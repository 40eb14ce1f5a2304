//! The router: one node, the connections its event loops serve, and where each output goes.

use std::hash::BuildHasherDefault;

use bytes::Bytes;
use hashbrown::HashMap;
use lattice_node::{ConnId, Input, Micros, Node, NodeId, Output};
use lattice_persist::{Dir, Persister};

use crate::hasher::IdHasher;
use crate::mail::{Mail, Mailboxes, Slot};

/// Where a connection is served: its event loop and its slot there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub loop_index: usize,
    pub slot: Slot,
}

/// Owns the node and carries out its outputs for a driver with one or more event loops.
///
/// The contract, for every driver:
/// - Inputs go in with the time ([`Router::execute`], [`Router::handle`],
///   [`Router::run_timers`]); the driver then calls [`Router::drain`] (the batch entry points
///   drain themselves) and carries out what it was handed.
/// - Output for the connection whose batch is running (`own`) is appended to the caller's
///   buffer, to be written at the end of the loop's turn, unless that loop has mail not yet
///   taken: then it queues behind that mail, so a connection never sees a later reply before
///   an earlier push.
/// - Output for any other registered connection becomes [`Mail`] for its loop; the driver wakes
///   the loops [`Router::take_loops_to_wake`] names (other than the caller, which takes its own
///   mail after each batch with [`Router::take_mail`]). Output for an unregistered connection
///   (closed meanwhile) is dropped.
/// - Peer messages wait in [`Router::take_peer_sends`]; persistence outputs go to the
///   persister, and the records of one drain are written together.
/// - The node's timers run at [`Router::planned_timers_us`]; after any input,
///   [`Router::earlier_timer`] says whether the node now wants them earlier (a wake-up for the
///   loop that runs them).
pub struct Router<D: Dir> {
    node: Node,
    persist: Option<Persister<D>>,
    routes: HashMap<ConnId, Route, BuildHasherDefault<IdHasher>>,
    mail: Mailboxes,
    peer_sends: Vec<(NodeId, Bytes)>,
    /// Member cluster addresses the node asked to dial (live membership).
    peer_dials: Vec<String>,
    /// The latest time handed in; the node's time never goes back.
    last_now_us: u64,
    /// When the driver will next run the node's timers (node time, µs); `u64::MAX`: not planned.
    timer_deadline_us: u64,
    shutdown_requested: bool,
    /// ACL file reads and writes the node asked for, for the driver to carry out in order
    /// and answer with `Input::AclFileDone`.
    acl_file_ops: Vec<lattice_node::acl::FileOp>,
    /// Runs of one command name in the batch being executed, for INFO commandstats.
    runs: Vec<(&'static str, u64)>,
    /// Reads the process's heap bytes in use, handed to the node before each batch while
    /// `maxmemory` is set (None: the driver has no such figure; the process figures' periodic
    /// report is then all the node gets).
    memory_probe: Option<fn() -> u64>,
}

impl<D: Dir> Router<D> {
    /// A router for a driver with `loops` event loops (at least one). `persist` writes the
    /// node's persistence outputs (None: nowhere to write, as on a clustered node).
    pub fn new(node: Node, persist: Option<Persister<D>>, loops: usize, now: Micros) -> Router<D> {
        Router {
            node,
            persist,
            routes: HashMap::default(),
            mail: Mailboxes::new(loops),
            peer_sends: Vec::new(),
            peer_dials: Vec::new(),
            last_now_us: now.0,
            timer_deadline_us: u64::MAX,
            shutdown_requested: false,
            acl_file_ops: Vec::new(),
            runs: Vec::new(),
            memory_probe: None,
        }
    }

    /// Gives the router the driver's reading of heap bytes in use, for `maxmemory`.
    pub fn set_memory_probe(&mut self, probe: fn() -> u64) {
        self.memory_probe = probe.into();
    }

    pub fn node(&self) -> &Node {
        &self.node
    }

    pub fn node_mut(&mut self) -> &mut Node {
        &mut self.node
    }

    pub fn persister(&self) -> Option<&Persister<D>> {
        self.persist.as_ref()
    }

    /// The persister, taken back when the node is gone (a simulated crash keeps its disk).
    pub fn into_persister(self) -> Option<Persister<D>> {
        self.persist
    }

    /// The persister with the node it feeds, for the object-store driver's calls (the
    /// uploader reads the node's figures and reports into it).
    pub fn persister_and_node_mut(&mut self) -> Option<(&mut Persister<D>, &mut Node)> {
        Some((self.persist.as_mut()?, &mut self.node))
    }

    /// The node's time for a clock reading: never behind a time already handed in.
    pub fn now(&mut self, clock_us: u64) -> Micros {
        self.last_now_us = self.last_now_us.max(clock_us);
        Micros(self.last_now_us)
    }

    /// The latest time handed in.
    pub fn last_now(&self) -> Micros {
        Micros(self.last_now_us)
    }

    /// `conn` is served at `route` from now on.
    pub fn register(&mut self, conn: ConnId, route: Route) {
        self.routes.insert(conn, route);
    }

    pub fn unregister(&mut self, conn: ConnId) {
        self.routes.remove(&conn);
    }

    pub fn route(&self, conn: ConnId) -> Option<Route> {
        self.routes.get(&conn).copied()
    }

    /// One input for the node (connection events, peer messages, process figures).
    pub fn handle(&mut self, now: Micros, input: Input) {
        let now = self.now(now.0);
        self.node.handle(now, input);
    }

    /// Runs one read's worth of requests from `conn` as a batch, then a protocol error if the
    /// read ended in one, and drains. `clock_us` is read once at the end: the batch's time is
    /// shared evenly by its commands in INFO commandstats. Returns true when `conn` must close
    /// after its output.
    pub fn execute(
        &mut self,
        now: Micros,
        conn: ConnId,
        batch: &mut Vec<Vec<Bytes>>,
        protocol_error: Option<String>,
        own_out: &mut Vec<Bytes>,
        clock_us: impl FnOnce() -> u64,
    ) -> bool {
        let now = self.now(now.0);
        if batch.len() > 1 {
            for args in batch.iter() {
                self.node.prefetch(args);
            }
        }
        let commands = batch.len() as u64;
        // One relaxed atomic load: INFO's used_memory and maxmemory then see the heap as it is
        // now, not as it was at the last once-a-second process reading.
        if let Some(probe) = self.memory_probe {
            self.node.report_memory(probe());
        }
        self.begin_batch();
        for args in batch.drain(..) {
            self.request(now, conn, args);
        }
        let end_us = clock_us();
        let elapsed_us = end_us.saturating_sub(now.0);
        let end = self.now(end_us);
        // The batch's time for the slow log and the latency monitor, shared like the above.
        self.node.request_done(end);
        self.end_batch(conn, commands, elapsed_us, protocol_error, own_out)
    }

    /// Starts a batch run request by request ([`Router::request`]), for a driver that looks at
    /// the node between requests (the simulator's reference checks).
    pub fn begin_batch(&mut self) {
        self.runs.clear();
    }

    pub fn request(&mut self, now: Micros, conn: ConnId, args: Vec<Bytes>) {
        self.node.handle(now, Input::Request { conn, args });
        if let Some(name) = self.node.last_command(conn) {
            match self.runs.last_mut() {
                Some((last, n)) if *last == name => *n += 1,
                _ => self.runs.push((name, 1)),
            }
        }
    }

    /// Ends a batch of `commands` requests that took `elapsed_us`: charges their time, hands
    /// the node the protocol error that ended the read (if any) and drains.
    pub fn end_batch(
        &mut self,
        conn: ConnId,
        commands: u64,
        elapsed_us: u64,
        protocol_error: Option<String>,
        own_out: &mut Vec<Bytes>,
    ) -> bool {
        // With no command run, `runs` is empty and nothing is charged. Charged once per run of
        // the same command, the common shape of a pipeline.
        for &(name, n) in self.runs.iter() {
            let share = (elapsed_us * n).checked_div(commands).unwrap_or(0);
            self.node.charge_command_time(name, n, share);
        }
        let now = self.last_now();
        if let Some(message) = protocol_error {
            self.node
                .handle(now, Input::ProtocolError { conn, message });
        }
        self.drain(now, Some(conn), own_out)
    }

    /// Carries out every pending output (see the type's contract). Returns true when `own`
    /// must be closed after its output.
    pub fn drain(&mut self, now: Micros, own: Option<ConnId>, own_out: &mut Vec<Bytes>) -> bool {
        let now = self.now(now.0);
        let mut close_own = false;
        loop {
            let mut any = false;
            while let Some(out) = self.node.poll_output() {
                any = true;
                let out = match self.persist.as_mut() {
                    Some(p) => match p.output(&mut self.node, now, out) {
                        Some(o) => o,
                        None => continue,
                    },
                    None => out,
                };
                close_own |= self.carry_out(out, own, own_out);
            }
            // One write for the drain's records; a sync it completes releases held replies.
            if let Some(p) = self.persist.as_mut() {
                p.flush(&mut self.node, now);
            }
            if !any {
                break;
            }
        }
        close_own
    }

    /// True when output for `own` may go straight to its buffer: its loop has no mail that
    /// must be delivered first.
    fn direct(&self, own: ConnId) -> bool {
        self.mail.all_empty()
            || self
                .routes
                .get(&own)
                .is_some_and(|r| self.mail.is_empty(r.loop_index))
    }

    /// Carries out one output that is not the persister's.
    fn carry_out(&mut self, out: Output, own: Option<ConnId>, own_out: &mut Vec<Bytes>) -> bool {
        match out {
            Output::Write { conn, data } => match own {
                Some(c) if c == conn && self.direct(c) => own_out.push(data),
                _ => {
                    let Some(&route) = self.routes.get(&conn) else {
                        return false;
                    };
                    #[cfg(feature = "planted-bug")]
                    if let Some(r) = own.and_then(|c| self.routes.get(&c)) {
                        if r.loop_index == route.loop_index && self.mail.is_empty(r.loop_index) {
                            own_out.push(data);
                            return false;
                        }
                    }
                    let slot = route.slot;
                    self.mail
                        .post(route.loop_index, Mail::Write { slot, conn, data });
                }
            },
            Output::Close { conn } => match own {
                Some(c) if c == conn && self.direct(c) => return true,
                _ => {
                    if let Some(&route) = self.routes.get(&conn) {
                        let slot = route.slot;
                        self.mail.post(route.loop_index, Mail::Close { slot, conn });
                    }
                }
            },
            // An empty message is a link heartbeat; the node has nothing to say in one.
            Output::PeerSend { peer, data } => {
                if !data.is_empty() {
                    self.peer_sends.push((peer, data));
                }
            }
            Output::Shutdown => self.shutdown_requested = true,
            Output::AclFile(op) => self.acl_file_ops.push(op),
            Output::PeerDial { addr, .. } => self.peer_dials.push(addr),
            // Without a persister (a clustered node) there is nowhere to write.
            Output::Append { .. }
            | Output::Sync { .. }
            | Output::SnapshotBegin { .. }
            | Output::SnapshotChunk { .. }
            | Output::SnapshotEnd { .. }
            | Output::Reload => {}
        }
        false
    }

    /// Moves `loop_index`'s mail, in the node's order, to the end of `into`.
    pub fn take_mail(&mut self, loop_index: usize, into: &mut Vec<Mail>) {
        self.mail.take(loop_index, into);
    }

    pub fn has_mail(&self, loop_index: usize) -> bool {
        !self.mail.is_empty(loop_index)
    }

    /// Appends the loops that got mail since the last call: each needs one wake-up, unless it
    /// is the caller (which takes its mail after its batch).
    pub fn take_loops_to_wake(&mut self, into: &mut Vec<usize>) {
        self.mail.take_to_wake(into);
    }

    /// The peer messages of the drains so far, in order; each non-empty.
    pub fn take_peer_sends(&mut self) -> std::vec::Drain<'_, (NodeId, Bytes)> {
        self.peer_sends.drain(..)
    }

    /// Cluster addresses the node asked to dial since the last call.
    pub fn take_peer_dials(&mut self) -> Vec<String> {
        std::mem::take(&mut self.peer_dials)
    }

    /// The ACL file operations asked for since the last call, oldest first.
    pub fn take_acl_file_ops(&mut self) -> Vec<lattice_node::acl::FileOp> {
        std::mem::take(&mut self.acl_file_ops)
    }

    /// SHUTDOWN ran: the driver stops the process once the log is closed
    /// ([`Router::close_persistence`]).
    pub fn shutdown_requested(&self) -> bool {
        self.shutdown_requested
    }

    /// The end of the turn has work: records framed but not written, or a sync the node
    /// asked for ([`Router::complete_sync`] does both).
    pub fn sync_wanted(&self) -> bool {
        self.persist.as_ref().is_some_and(|p| p.turn_end_wanted())
    }

    /// The end of the turn has a sync to do, not only records to write.
    pub fn sync_requested(&self) -> bool {
        self.persist.as_ref().is_some_and(|p| p.sync_requested())
    }

    /// The group commit at the end of a loop's turn: one write (and, when the node asked,
    /// one sync) for the records of every batch since the last. Returns the persister's log lines; the caller then drains (the sync
    /// releases held replies).
    pub fn complete_sync(&mut self, now: Micros) -> Vec<String> {
        let now = self.now(now.0);
        match self.persist.as_mut() {
            Some(p) => {
                p.end_turn(&mut self.node, now);
                p.take_log()
            }
            None => Vec::new(),
        }
    }

    /// [`Router::complete_sync`] up to the sync, for a driver that syncs outside its lock:
    /// the records are written; the returned ticket names the segment to sync, and
    /// [`Router::finish_sync`] reports it. None: no sync to do (the caller drains as after
    /// `complete_sync`).
    pub fn begin_sync(&mut self, now: Micros) -> Option<lattice_persist::SyncTicket> {
        let now = self.now(now.0);
        let p = self.persist.as_mut()?;
        p.begin_turn_end(&mut self.node, now)
    }

    /// The sync of a ticket from [`Router::begin_sync`] ended with `result`. Returns the
    /// persister's log lines; the caller then drains (the sync releases held replies).
    pub fn finish_sync(
        &mut self,
        now: Micros,
        ticket: &lattice_persist::SyncTicket,
        result: std::io::Result<()>,
    ) -> Vec<String> {
        let now = self.now(now.0);
        match self.persist.as_mut() {
            Some(p) => {
                p.finish_sync(&mut self.node, now, ticket, result);
                p.take_log()
            }
            None => Vec::new(),
        }
    }

    /// The persister's log lines since the last call.
    pub fn take_persist_log(&mut self) -> Vec<String> {
        self.persist
            .as_mut()
            .map(|p| p.take_log())
            .unwrap_or_default()
    }

    /// Ends persistence for a stop: every pending record written and synced. None without a
    /// persister.
    pub fn close_persistence(&mut self, now: Micros) -> Option<std::io::Result<()>> {
        let now = self.now(now.0);
        let p = self.persist.as_mut()?;
        while let Some(out) = self.node.poll_output() {
            let _ = p.output(&mut self.node, now, out);
        }
        Some(p.close(&mut self.node, now))
    }

    /// Runs the node's timers and drains. Returns the node's next deadline. `clock_us` is read
    /// once the timers ran: the time they took is the latency monitor's (`Node::timers_done`).
    pub fn run_timers(&mut self, now: Micros, clock_us: impl FnOnce() -> u64) -> Option<Micros> {
        let now = self.now(now.0);
        self.node.handle_timeout(now);
        let end = self.now(clock_us());
        self.node.timers_done(end);
        self.drain(now, None, &mut Vec::new());
        self.node.poll_timeout()
    }

    /// The driver will run the node's timers at `deadline_us` (node time; `u64::MAX`: only
    /// when the node asks).
    pub fn plan_timers(&mut self, deadline_us: u64) {
        self.timer_deadline_us = deadline_us;
    }

    pub fn planned_timers_us(&self) -> u64 {
        self.timer_deadline_us
    }

    /// After inputs: the node's deadline when it is earlier than planned (it becomes the plan;
    /// the driver wakes whoever runs the timers), else None.
    pub fn earlier_timer(&mut self) -> Option<u64> {
        let t = self.node.poll_timeout()?.0;
        if t < self.timer_deadline_us {
            self.timer_deadline_us = t;
            Some(t)
        } else {
            None
        }
    }

    /// Something for the driver beyond the caller's own output: loops to wake, peer messages,
    /// a stop. False on the path of a request that touched no other connection.
    pub fn has_effects(&self) -> bool {
        self.mail.wake_pending()
            || !self.peer_sends.is_empty()
            || !self.peer_dials.is_empty()
            || self.shutdown_requested
            || !self.acl_file_ops.is_empty()
    }

    /// The node's invariants and the router's own: every loop with mail is known.
    pub fn check_invariants(&self) {
        self.node.check_invariants();
        self.check_routes();
    }

    /// [`Router::check_invariants`] with the node's check limited to what changed since the
    /// last call ([`Node::check_changed_invariants`]); returns whether the node's check was
    /// the full one after all.
    pub fn check_changed_invariants(&mut self) -> bool {
        let full = self.node.check_changed_invariants();
        self.check_routes();
        full
    }

    fn check_routes(&self) {
        self.mail.check_invariants();
        for route in self.routes.values() {
            assert!(
                route.loop_index < self.mail.loops(),
                "router: a connection routed to loop {} of {}",
                route.loop_index,
                self.mail.loops()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use lattice_node::{Buggify, Config};

    use super::*;

    /// A directory that refuses everything: the routers under test have no persister.
    struct NoDisk;

    impl Dir for NoDisk {
        fn list(&mut self) -> io::Result<Vec<String>> {
            Err(io::ErrorKind::Unsupported.into())
        }
        fn read(&mut self, _: &str) -> io::Result<Vec<u8>> {
            Err(io::ErrorKind::Unsupported.into())
        }
        fn append(&mut self, _: &str, _: &[u8]) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }
        fn sync(&mut self, _: &str) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }
        fn truncate(&mut self, _: &str, _: u64) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }
        fn rename(&mut self, _: &str, _: &str) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }
        fn remove(&mut self, _: &str) -> io::Result<()> {
            Err(io::ErrorKind::Unsupported.into())
        }
    }

    const NOW: Micros = Micros(1_700_000_000_000_000);

    /// A router over two loops with connection `c` on loop `loops[c - 1]`, slot `10 * c`.
    fn router(loops: &[usize]) -> Router<NoDisk> {
        let node = Node::new(Config::default(), 7, Buggify::disabled(), NOW);
        let mut r = Router::new(node, None, 2, NOW);
        for (i, &loop_index) in loops.iter().enumerate() {
            let conn = ConnId(i as u64 + 1);
            r.register(
                conn,
                Route {
                    loop_index,
                    slot: 10 * (i + 1),
                },
            );
            r.handle(
                NOW,
                Input::Connected {
                    conn,
                    peer_addr: format!("10.0.0.9:{}", 4000 + i),
                    local_addr: "10.0.0.1:6379".into(),
                },
            );
        }
        r
    }

    /// Runs one request of `conn` as a batch; returns its own output, joined.
    fn run(r: &mut Router<NoDisk>, conn: u64, args: &[&str]) -> Vec<u8> {
        let mut batch = vec![args.iter().map(|a| Bytes::from(a.to_string())).collect()];
        let mut out = Vec::new();
        assert!(!r.execute(NOW, ConnId(conn), &mut batch, None, &mut out, || NOW.0));
        r.check_invariants();
        out.concat()
    }

    fn writes(mail: &[Mail]) -> Vec<(usize, u64, Vec<u8>)> {
        mail.iter()
            .map(|m| match m {
                Mail::Write { slot, conn, data } => (*slot, conn.0, data.to_vec()),
                Mail::Close { slot, conn } => (*slot, conn.0, b"<close>".to_vec()),
            })
            .collect()
    }

    #[test]
    fn own_replies_go_to_the_caller_and_others_become_mail_for_their_loop() {
        let mut r = router(&[0, 1]);
        run(&mut r, 2, &["SUBSCRIBE", "ch"]);
        let mut mail = Vec::new();
        r.take_mail(1, &mut mail);
        let mut wake = Vec::new();
        r.take_loops_to_wake(&mut wake);
        mail.clear();
        wake.clear();
        assert_eq!(run(&mut r, 1, &["PUBLISH", "ch", "hi"]), b":1\r\n");
        r.take_loops_to_wake(&mut wake);
        assert_eq!(wake, vec![1]);
        assert!(!r.has_mail(0));
        r.take_mail(1, &mut mail);
        assert_eq!(
            writes(&mail),
            vec![(
                20,
                2,
                b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n".to_vec()
            )]
        );
    }

    #[test]
    fn own_output_waits_behind_mail_its_loop_has_not_taken() {
        let mut r = router(&[0, 0]);
        run(&mut r, 1, &["SUBSCRIBE", "ch"]);
        let mut mail = Vec::new();
        r.take_mail(0, &mut mail);
        mail.clear();
        // The message for connection 1 is mail for loop 0; from then on, until the loop takes
        // it, output for any of its connections queues behind it, the publisher's reply and
        // connection 1's PING reply included.
        assert_eq!(run(&mut r, 2, &["PUBLISH", "ch", "hi"]), b"");
        assert_eq!(run(&mut r, 1, &["PING"]), b"");
        r.take_mail(0, &mut mail);
        let got = writes(&mail);
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0].2.starts_with(b"*3\r\n$7\r\nmessage"), "{got:?}");
        assert_eq!(got[1], (20, 2, b":1\r\n".to_vec()));
        assert_eq!(got[2], (10, 1, b"*2\r\n$4\r\npong\r\n$0\r\n\r\n".to_vec()));
        // Taken: replies go straight to the caller again.
        assert_eq!(run(&mut r, 1, &["PING"]), b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    }

    #[test]
    fn output_for_an_unregistered_connection_is_dropped() {
        let mut r = router(&[0, 1]);
        run(&mut r, 2, &["SUBSCRIBE", "ch"]);
        let mut mail = Vec::new();
        r.take_mail(1, &mut mail);
        r.unregister(ConnId(2));
        assert_eq!(run(&mut r, 1, &["PUBLISH", "ch", "hi"]), b":1\r\n");
        assert!(!r.has_mail(0) && !r.has_mail(1));
        assert!(!r.has_effects());
    }

    #[test]
    fn the_timer_plan_moves_only_earlier_until_timers_run() {
        let mut r = router(&[0]);
        let wanted = r
            .node()
            .poll_timeout()
            .expect("a node always has a timer")
            .0;
        assert_eq!(r.earlier_timer(), Some(wanted));
        assert_eq!(r.earlier_timer(), None, "already planned");
        r.plan_timers(wanted - 1);
        assert_eq!(r.earlier_timer(), None, "planned earlier than needed");
        let next = r
            .run_timers(Micros(wanted), || wanted)
            .expect("a next deadline");
        r.plan_timers(next.0);
        assert_eq!(r.planned_timers_us(), next.0);
        assert!(next.0 >= wanted);
    }
}

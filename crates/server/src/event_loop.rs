//! Client connections: one event loop per worker thread, each with its own epoll set.
//!
//! A loop waits for readiness, reads each ready socket once, parses and runs what arrived as one
//! batch under the node lock, and writes every connection's replies once at the end of the turn,
//! like Redis's event loop. There is no task per connection: an async runtime's per-wake-up
//! machinery is a large share of a small request's cost (docs/ARCHITECTURE.md §25).
//!
//! A client of the TLS port (`tls-port`) has a rustls session beside its socket: what a read
//! brings is decrypted into the same buffer the parser reads, and a turn's replies are
//! encrypted together into as few records as fit and written with one system call, as
//! plaintext replies are. The node never sees TLS (docs/ARCHITECTURE.md, "TLS").
//!
//! The first loop also accepts connections (handing each to the loops in turn) and drives the
//! node's timers. Outputs for a connection that another thread produced (pub/sub, a kill, an
//! unblocked BLPOP, a replicated write's notification) are mail the router (crates/router)
//! keeps for the connection's loop; the loop takes it when woken and after each batch. What
//! goes where is the router's; this module is the syscalls around it.

use std::io::{self, BufRead, IoSlice, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use lattice_node::{ConnId, Input};
use lattice_resp::{Limits, RequestParser};
use lattice_router::{AfterWrite, ConnFlow, Mail, MailAction, OutputQueue, PUSH_LIMIT_BYTES};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use parking_lot::Mutex;
use rustls::{ServerConfig, ServerConnection};

use crate::host::{Host, Shared};
use crate::nap::NapPolicy;

/// Requests executed per lock acquisition at most, so one client's enormous pipeline cannot
/// keep the others waiting for long.
const MAX_BATCH: usize = 1024;
/// Initial read buffer; grows for large requests.
const READ_CHUNK: usize = 16 * 1024;
/// How often a loop looks at its connections' read buffers (Redis's client cron runs at
/// `hz` 10 and visits every client of a small server each time).
const QBUF_SWEEP_US: u64 = 100_000;
/// Connections looked at per sweep at least; otherwise a tenth of them, so one sweep costs
/// little whatever the connection count and each is seen about once a second.
const QBUF_SWEEP_MIN_VISITS: usize = 5;
/// A read buffer with nothing in it is given back after this long without input.
const QBUF_IDLE_US: u64 = 2_000_000;
/// A read buffer larger than this is cut down when it held less than half of it since the
/// last visit (Redis's PROTO_RESIZE_THRESHOLD): one large request does not pin its buffer.
const QBUF_RESIZE_THRESHOLD: usize = 32 * 1024;
/// Readiness events taken per wait; more stay queued in the kernel for the next turn.
const EVENTS_PER_WAIT: usize = 1024;
/// Reply chunks handed to one `writev`.
const WRITE_SLICES: usize = 64;
/// How long accepting pauses after an error such as running out of file descriptors, instead
/// of spinning on a connection it cannot take.
const ACCEPT_BACKOFF_US: u64 = 50_000;
/// The timer loop wakes at least this often, for the process figures in INFO.
const MAX_TIMER_SLEEP_US: u64 = 100_000;
/// Process figures (memory, CPU) are refreshed this often.
const STATS_INTERVAL_US: u64 = 1_000_000;

const LISTENER: Token = Token(usize::MAX);
const WAKER: Token = Token(usize::MAX - 1);
const TLS_LISTENER: Token = Token(usize::MAX - 2);

/// Where a connection lives in its loop's table; also its epoll token (see
/// [`lattice_router::Slot`]).
pub use lattice_router::Slot;

/// The part of a loop other threads hold: connections handed to it, and the means to wake it.
pub struct LoopHandle {
    /// Connections accepted by the first loop for this one to serve.
    adoptions: Mutex<Vec<Adoption>>,
    /// Set while the loop may have adoptions or router mail it has not taken. A burst of posts
    /// wakes the loop once (one eventfd write), and the loop checks it after every batch.
    pending: AtomicBool,
    waker: Waker,
}

impl LoopHandle {
    /// The router holds mail for this loop. `wake` is false when the loop itself is the caller
    /// (it takes its mail after each batch, before it sleeps), so no system call is made.
    pub fn mail_posted(&self, wake: bool) {
        if !self.pending.swap(true, Ordering::AcqRel) && wake {
            let _ = self.waker.wake();
        }
    }

    fn adopt_later(&self, adoption: Adoption) {
        self.adoptions.lock().push(adoption);
        self.mail_posted(true);
    }

    /// Wakes the loop without mail (the timer loop, when the node wants an earlier timer).
    pub fn wake(&self) {
        let _ = self.waker.wake();
    }
}

/// A connection accepted by the first loop: its id, its socket, and whether it came in on the
/// TLS port.
type Adoption = (ConnId, TcpStream, bool);

/// The client ports, on the first loop only.
#[derive(Default)]
pub struct Listeners {
    /// `port` (None with `port 0`).
    pub plain: Option<TcpListener>,
    /// `tls-port`.
    pub tls: Option<TcpListener>,
}

/// A loop before it runs: its epoll set and the handle other threads use.
pub struct LoopSeed {
    poll: Poll,
    pub handle: Arc<LoopHandle>,
}

impl LoopSeed {
    pub fn new() -> io::Result<LoopSeed> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        Ok(LoopSeed {
            poll,
            handle: Arc::new(LoopHandle {
                adoptions: Mutex::new(Vec::new()),
                pending: AtomicBool::new(false),
                waker,
            }),
        })
    }
}

struct Conn {
    id: ConnId,
    socket: TcpStream,
    parser: RequestParser,
    limits: Limits,
    rbuf: BytesMut,
    /// The most `rbuf` held since the last sweep looked at it.
    qbuf_peak: usize,
    /// When input last arrived (µs of the wall clock), for giving an idle buffer back.
    last_read_us: u64,
    /// `client-query-buffer-limit`: unparsed input past it closes the connection.
    qbuf_limit: usize,
    /// Replies not yet written, and when to read (crates/router's `ConnFlow` decides: while
    /// the socket is full, reading pauses, so a client that does not read its replies cannot
    /// make this server buffer without bound, and writes from other connections are bounded).
    flow: ConnFlow,
    /// Already in the loop's list of connections to write at the end of this turn.
    flush_queued: bool,
    /// The nap window this connection was last counted in (nap.rs).
    nap_mark: u32,
    /// The TLS session of a client of the TLS port. Boxed: it is large, and plaintext
    /// connections should not carry its space in the loop's table.
    tls: Option<Box<ServerConnection>>,
}

pub struct EventLoop {
    index: usize,
    poll: Poll,
    handle: Arc<LoopHandle>,
    shared: Arc<Shared>,
    /// Every loop's handle, for handing accepted connections out.
    loops: Arc<[Arc<LoopHandle>]>,
    /// Connections by slot (a table indexed by epoll token: no hashing per event).
    conns: Vec<Option<Conn>>,
    free_slots: Vec<Slot>,
    /// On the first loop only.
    listeners: Listeners,
    /// The TLS configuration for clients of the TLS port (every loop serves them).
    tls_config: Option<Arc<ServerConfig>>,
    /// Encrypted input of one read, before its session decrypts it into the connection's
    /// buffer (one per loop: a read's bytes are all handed to the session at once).
    tls_in: Vec<u8>,
    next_loop: usize,
    /// When accepting may resume after an error (µs of the wall clock); 0 when not paused.
    accept_paused_until_us: u64,
    /// The first loop runs the node's timers.
    drives_timers: bool,
    last_stats_us: u64,
    script_running: bool,
    /// Connections with input left over after their read this turn (a full buffer).
    again: Vec<Slot>,
    /// Connections with replies to write at the end of this turn.
    to_flush: Vec<Slot>,
    // Scratch reused from turn to turn, so a request allocates nothing for them.
    ready: Vec<Slot>,
    batch: Vec<Vec<Bytes>>,
    mail: Vec<Mail>,
    adoptions: Vec<Adoption>,
    nap: NapPolicy,
    /// When the read buffers are next looked at, and the slot the last sweep stopped at.
    next_qbuf_sweep_us: u64,
    qbuf_cursor: usize,
}

impl EventLoop {
    pub fn new(
        index: usize,
        seed: LoopSeed,
        shared: Arc<Shared>,
        loops: Arc<[Arc<LoopHandle>]>,
        listeners: Listeners,
        tls_config: Option<Arc<ServerConfig>>,
        nap_us: u64,
    ) -> io::Result<EventLoop> {
        let mut listeners = listeners;
        if let Some(l) = listeners.plain.as_mut() {
            seed.poll
                .registry()
                .register(l, LISTENER, Interest::READABLE)?;
        }
        if let Some(l) = listeners.tls.as_mut() {
            seed.poll
                .registry()
                .register(l, TLS_LISTENER, Interest::READABLE)?;
        }
        Ok(EventLoop {
            index,
            poll: seed.poll,
            handle: seed.handle,
            shared,
            loops,
            conns: Vec::new(),
            free_slots: Vec::new(),
            listeners,
            tls_in: if tls_config.is_some() {
                vec![0; READ_CHUNK]
            } else {
                Vec::new()
            },
            tls_config,
            next_loop: 0,
            accept_paused_until_us: 0,
            drives_timers: index == 0,
            last_stats_us: 0,
            script_running: false,
            again: Vec::new(),
            to_flush: Vec::new(),
            ready: Vec::new(),
            batch: Vec::new(),
            mail: Vec::new(),
            adoptions: Vec::new(),
            nap: NapPolicy::new(nap_us),
            next_qbuf_sweep_us: 0,
            qbuf_cursor: 0,
        })
    }

    /// Runs forever (the process ends from the signal handler on the main thread).
    pub fn run(mut self) {
        let mut events = Events::with_capacity(EVENTS_PER_WAIT);
        NapPolicy::set_thread_timer_slack();
        if self.drives_timers {
            self.run_timers();
        }
        loop {
            if let Err(e) = self.wait(&mut events) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!("event loop {}: wait failed: {e}", self.index);
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            // Input left from last turn first, then the new readiness, in the order the kernel
            // reported it.
            self.ready.clear();
            self.ready.append(&mut self.again);
            let mut listener_ready = false;
            for event in events.iter() {
                match event.token() {
                    LISTENER | TLS_LISTENER => listener_ready = true,
                    WAKER => {}
                    Token(slot) => {
                        let Some(Some(conn)) = self.conns.get_mut(slot) else {
                            continue;
                        };
                        // A reset or hang-up also ends a blocked write: the retry fails and
                        // closes the connection instead of leaving it waiting for space.
                        if conn.flow.waiting_for_room()
                            && (event.is_writable() || event.is_write_closed() || event.is_error())
                        {
                            queue_flush(&mut self.to_flush, slot, conn);
                        }
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            conn.flow.input_ready();
                            self.nap.count(&mut conn.nap_mark);
                            self.ready.push(slot);
                        }
                    }
                }
            }
            let mut ready = std::mem::take(&mut self.ready);
            for &slot in &ready {
                self.serve(slot);
            }
            ready.clear();
            self.ready = ready;
            // New connections after the ready ones: a close reported in the same wait is
            // counted out before a newcomer is counted in against maxclients.
            if listener_ready {
                self.accept();
            }
            self.take_mail();
            if self.accept_paused_until_us != 0
                && crate::host::clock_us() >= self.accept_paused_until_us
            {
                self.accept_paused_until_us = 0;
                self.accept();
            }
            if self.drives_timers
                && (self.script_running
                    || crate::host::clock_us()
                        >= self.shared.timer_deadline_us.load(Ordering::Acquire))
            {
                self.run_timers();
                self.take_mail();
            }
            self.sweep_query_buffers();
            self.complete_sync();
            self.flush_all();
        }
    }

    /// Redis's client cron for query buffers: a connection without input for 2 s and with
    /// nothing unparsed gives its read buffer back; one whose buffer is over 32 KiB and more
    /// than twice the most it held since the last visit is cut down to that. The node learns
    /// the new figures (CLIENT LIST `qbuf`, `qbuf-free`).
    fn sweep_query_buffers(&mut self) {
        let now = crate::host::clock_us();
        if now < self.next_qbuf_sweep_us {
            return;
        }
        self.next_qbuf_sweep_us = now + QBUF_SWEEP_US;
        let n = self.conns.len();
        if n == 0 {
            return;
        }
        let visits = (n / 10).max(QBUF_SWEEP_MIN_VISITS).min(n);
        let mut changed: Vec<(ConnId, u64, u64)> = Vec::new();
        for _ in 0..visits {
            self.qbuf_cursor = (self.qbuf_cursor + 1) % n;
            if let Some(conn) = self.conns[self.qbuf_cursor].as_mut() {
                if resize_query_buffer(conn, now) {
                    changed.push((conn.id, conn.rbuf.len() as u64, spare_of(&conn.rbuf)));
                }
            }
        }
        if !changed.is_empty() {
            let mut host = self.shared.host.lock();
            for (id, len, free) in changed {
                host.router.node_mut().set_query_buffer(id, len, free);
            }
        }
    }

    /// Waits for readiness until the loop's next deadline, napping first when nap.rs says
    /// so, and starts the turn's nap bookkeeping.
    fn wait(&mut self, events: &mut Events) -> io::Result<()> {
        let timeout = self.wait_timeout();
        let mut result = None;
        if let Some(nap) = self.nap.nap_for(timeout) {
            // Only when there is nothing to do right now.
            let r = self.poll.poll(events, Some(Duration::ZERO));
            if r.is_err() || !events.is_empty() {
                result = Some(r);
            } else {
                std::thread::sleep(nap);
                let r = self.poll.poll(events, Some(Duration::ZERO));
                let found = r.is_err() || !events.is_empty();
                self.nap.nap_ended(found);
                result = found.then_some(r);
            }
        }
        let result = result.unwrap_or_else(|| self.poll.poll(events, timeout));
        if self.nap.enabled() {
            self.nap.begin_turn(crate::host::clock_us());
        }
        result
    }

    fn wait_timeout(&self) -> Option<Duration> {
        // Mail already flagged for this loop: a poster that found the flag set did not wake
        // us (see `LoopHandle::mail_posted`), so sleeping now could hold its replies until
        // some socket or timer woke the loop.
        if !self.again.is_empty()
            || self.script_running
            || self.handle.pending.load(Ordering::Acquire)
        {
            return Some(Duration::ZERO);
        }
        let mut deadline_us = u64::MAX;
        if self.drives_timers {
            deadline_us = self.shared.timer_deadline_us.load(Ordering::Acquire);
        }
        if self.accept_paused_until_us != 0 {
            deadline_us = deadline_us.min(self.accept_paused_until_us);
        }
        if self.conns.len() > self.free_slots.len() {
            // Connections whose read buffers the sweep looks at.
            deadline_us = deadline_us.min(self.next_qbuf_sweep_us);
        }
        if deadline_us == u64::MAX {
            return None;
        }
        let now_us = crate::host::clock_us();
        Some(Duration::from_micros(deadline_us.saturating_sub(now_us)))
    }

    /// Takes every pending connection from the listeners and hands each to a loop in turn.
    fn accept(&mut self) {
        for tls in [false, true] {
            self.accept_from(tls);
        }
    }

    fn accept_from(&mut self, tls: bool) {
        if self.accept_paused_until_us != 0 {
            return;
        }
        loop {
            let listener = if tls {
                &self.listeners.tls
            } else {
                &self.listeners.plain
            };
            let Some(listener) = listener.as_ref() else {
                return;
            };
            match listener.accept() {
                Ok((socket, _)) => {
                    let id = self.shared.next_conn_id();
                    let target = self.next_loop;
                    self.next_loop = (self.next_loop + 1) % self.loops.len();
                    if target == self.index {
                        self.adopt((id, socket, tls));
                    } else {
                        self.loops[target].adopt_later((id, socket, tls));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of file descriptors and the like: the connection stays queued, and
                    // edge-triggered readiness will not say so again, so retry after a pause.
                    tracing::warn!("accept failed: {e}");
                    self.accept_paused_until_us = crate::host::clock_us() + ACCEPT_BACKOFF_US;
                    return;
                }
            }
        }
    }

    fn adopt(&mut self, (id, mut socket, tls): Adoption) {
        let tls = match (tls, &self.tls_config) {
            (false, _) => None,
            (true, Some(config)) => match ServerConnection::new(config.clone()) {
                Ok(session) => Some(Box::new(session)),
                Err(e) => {
                    tracing::warn!("cannot start a TLS session: {e}");
                    return;
                }
            },
            (true, None) => return,
        };
        let _ = socket.set_nodelay(true);
        let peer_addr = socket
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let local_addr = socket
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let slot = match self.free_slots.pop() {
            Some(slot) => slot,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut socket, Token(slot), Interest::READABLE)
        {
            tracing::warn!("cannot watch a new connection: {e}");
            self.free_slots.push(slot);
            return;
        }
        let mut flow = ConnFlow::new(PUSH_LIMIT_BYTES);
        let (limits, closing) = {
            let mut host = self.shared.host.lock();
            host.register(id, self.index, slot);
            host.handle(Input::Connected {
                conn: id,
                peer_addr,
                local_addr,
            });
            let closing = host.drain(Some(id), flow.replies_mut(), Some(self.index));
            host.router
                .node_mut()
                .set_query_buffer(id, 0, READ_CHUNK as u64);
            self.shared.check_timer(&mut host, Some(self.index));
            (limits_of(&host), closing)
        };
        if closing {
            flow.close_after_output();
        }
        // Input that came before registration is reported by the registration itself.
        let mut conn = Conn {
            id,
            socket,
            parser: RequestParser::new(limits),
            limits,
            rbuf: BytesMut::with_capacity(READ_CHUNK),
            qbuf_peak: 0,
            last_read_us: crate::host::clock_us(),
            qbuf_limit: usize::MAX,
            flow,
            flush_queued: false,
            nap_mark: 0,
            tls,
        };
        if conn.flow.wants_flush() {
            queue_flush(&mut self.to_flush, slot, &mut conn);
        }
        self.conns[slot] = Some(conn);
    }

    /// One read from a ready connection, then everything complete in its buffer runs.
    fn serve(&mut self, slot: Slot) {
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        if !conn.flow.should_read() {
            return;
        }
        // A TLS client's bytes are read into the loop's scratch buffer and decrypted from
        // there into `rbuf`; a plaintext client's go straight into `rbuf`.
        let (into, spare) = if conn.tls.is_some() {
            (self.tls_in.as_mut_ptr(), self.tls_in.len())
        } else {
            let hint = conn.parser.bytes_needed_hint();
            conn.rbuf.reserve(hint.max(READ_CHUNK / 4));
            (
                conn.rbuf.chunk_mut().as_mut_ptr(),
                conn.rbuf.capacity() - conn.rbuf.len(),
            )
        };
        let read = loop {
            // SAFETY: `into` and `spare` describe `tls_in`, or `rbuf`'s spare capacity, which
            // `recv` may fill; only the `n` bytes it reports are then used.
            let read = unsafe { sys_recv(conn.socket.as_raw_fd(), into, spare) };
            match read {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other,
            }
        };
        // The client closed its TLS session (close_notify): what came before it still runs.
        let mut tls_closed = false;
        match read {
            Ok(0) => {
                self.close(slot);
                return;
            }
            Ok(n) => {
                match conn.tls.as_deref_mut() {
                    // SAFETY: `recv` wrote `n <= spare` bytes into the spare capacity.
                    None => unsafe { conn.rbuf.advance_mut(n) },
                    Some(session) => {
                        let received = tls_receive(session, &self.tls_in[..n], &mut conn.rbuf);
                        // Handshake messages, or the alert that tells a refused client why.
                        let reply = session.wants_write();
                        match received {
                            Ok(closed) => tls_closed = closed,
                            Err(e) => {
                                // A client without a certificate, or with one the CA did not
                                // sign, or not speaking TLS: refused, like a protocol error.
                                tracing::debug!("TLS client {} refused: {e}", conn.id.0);
                                conn.flow.close_after_output();
                                queue_flush(&mut self.to_flush, slot, conn);
                                return;
                            }
                        }
                        if reply {
                            queue_flush(&mut self.to_flush, slot, conn);
                        }
                    }
                }
                conn.last_read_us = crate::host::clock_us();
                conn.qbuf_peak = conn.qbuf_peak.max(conn.rbuf.len());
                if n < spare {
                    // A short read drained the socket; new input raises a new edge.
                    conn.flow.input_drained();
                } else {
                    self.again.push(slot);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                conn.flow.input_drained();
                return;
            }
            Err(_) => {
                self.close(slot);
                return;
            }
        }
        if conn.rbuf.len() > conn.qbuf_limit {
            tracing::warn!(
                "closing client {} that reached the query buffer limit ({} bytes)",
                conn.id.0,
                conn.qbuf_limit
            );
            self.close(slot);
            return;
        }
        // What CLIENT LIST shows while this batch runs: the whole input as read, as Redis
        // keeps the query buffer until its requests have run.
        let qbuf = (conn.rbuf.len() as u64, spare_of(&conn.rbuf));
        // Parse everything complete, running a batch whenever it reaches MAX_BATCH.
        let mut protocol_error = None;
        loop {
            match conn.parser.parse(&mut conn.rbuf) {
                Ok(Some(args)) => {
                    self.batch.push(args);
                    if self.batch.len() >= MAX_BATCH {
                        execute(&self.shared, self.index, conn, &mut self.batch, None, qbuf);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    protocol_error = Some(e.message().to_string());
                    break;
                }
            }
        }
        execute(
            &self.shared,
            self.index,
            conn,
            &mut self.batch,
            protocol_error,
            qbuf,
        );
        if conn.parser.limits() != conn.limits {
            conn.parser.set_limits(conn.limits);
        }
        if tls_closed {
            conn.flow.close_after_output();
        }
        if conn.flow.wants_flush() {
            queue_flush(&mut self.to_flush, slot, conn);
        }
        // Mail this batch posted to this loop (a PUBLISH to a neighbour, say) is delivered now,
        // so each connection's output keeps the order in which the commands ran.
        self.take_mail();
    }

    /// Takes the connections handed to this loop and the router's mail for it, until no more
    /// arrives meanwhile.
    fn take_mail(&mut self) {
        while self.handle.pending.load(Ordering::Acquire) {
            self.handle.pending.store(false, Ordering::Release);
            std::mem::swap(&mut *self.handle.adoptions.lock(), &mut self.adoptions);
            let mut adoptions = std::mem::take(&mut self.adoptions);
            for adoption in adoptions.drain(..) {
                self.adopt(adoption);
            }
            self.adoptions = adoptions;
            let mut mail = std::mem::take(&mut self.mail);
            self.shared
                .host
                .lock()
                .router
                .take_mail(self.index, &mut mail);
            for m in mail.drain(..) {
                let (slot, id) = m.target();
                let Some(conn) = live_conn(&mut self.conns, slot, id) else {
                    continue;
                };
                match conn.flow.take_mail(m) {
                    MailAction::Flush => queue_flush(&mut self.to_flush, slot, conn),
                    MailAction::CloseNow(overflow) => {
                        if let Some(e) = overflow {
                            tracing::warn!(
                                "closing client {}: {} bytes of output unread, over the {} byte limit",
                                id.0,
                                e.unread_bytes,
                                PUSH_LIMIT_BYTES
                            );
                            self.shared
                                .host
                                .lock()
                                .router
                                .node_mut()
                                .output_limit_disconnected();
                        }
                        self.close(slot);
                    }
                }
            }
            self.mail = mail;
        }
    }

    /// Writes every queued connection's replies: one system call each unless a socket's
    /// buffer fills.
    fn flush_all(&mut self) {
        while !self.to_flush.is_empty() {
            let mut list = std::mem::take(&mut self.to_flush);
            for &slot in &list {
                self.flush(slot);
            }
            list.clear();
            if self.to_flush.is_empty() {
                self.to_flush = list;
            }
            // Closing a connection can post mail (a client blocked on it, say): deliver it now.
            self.take_mail();
        }
    }

    fn flush(&mut self, slot: Slot) {
        let Some(Some(conn)) = self.conns.get_mut(slot) else {
            return;
        };
        conn.flush_queued = false;
        let fd = conn.socket.as_raw_fd();
        let written = match conn.tls.as_deref_mut() {
            None => write_plain(fd, conn.flow.out_mut()),
            Some(session) => {
                let closing = conn.flow.is_closing();
                write_tls(fd, session, conn.flow.out_mut(), closing)
            }
        };
        let next = match written {
            Written::All => conn.flow.all_written(),
            Written::Blocked => conn.flow.socket_full(),
            Written::Failed => AfterWrite::Close,
        };
        match next {
            AfterWrite::Idle => {}
            AfterWrite::WaitForRoom => {
                if self
                    .poll
                    .registry()
                    .reregister(
                        &mut conn.socket,
                        Token(slot),
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .is_err()
                {
                    self.close(slot);
                }
            }
            AfterWrite::Resume { read_now } => {
                if self
                    .poll
                    .registry()
                    .reregister(&mut conn.socket, Token(slot), Interest::READABLE)
                    .is_err()
                {
                    self.close(slot);
                } else if read_now {
                    self.again.push(slot);
                }
            }
            AfterWrite::Close => self.close(slot),
        }
    }

    fn close(&mut self, slot: Slot) {
        let Some(mut conn) = self.conns.get_mut(slot).and_then(Option::take) else {
            return;
        };
        self.free_slots.push(slot);
        let id = conn.id;
        let _ = self.poll.registry().deregister(&mut conn.socket);
        drop(conn);
        let mut host = self.shared.host.lock();
        host.unregister(id);
        host.handle(Input::Closed { conn: id });
        host.drain(None, &mut Vec::new(), Some(self.index));
        self.shared.check_timer(&mut host, Some(self.index));
    }

    /// Group commit: if a batch of this turn (or of another loop's) left records to sync, one
    /// sync covers them all before this turn's replies are written; the replies the node held
    /// for it come back as mail.
    fn complete_sync(&mut self) {
        if !self.shared.sync_wanted.load(Ordering::Acquire) {
            return;
        }
        let job = {
            let mut host = self.shared.host.lock();
            let syncing = host.sync_requested();
            let job = host.begin_sync(Some(self.index));
            self.shared
                .sync_wanted
                .store(host.sync_wanted(), Ordering::Release);
            self.shared.check_timer(&mut host, Some(self.index));
            // Handed straight to a loop waiting for it: that loop's batch runs now, during
            // the sync below (or, when the sync was done above, before this loop's next
            // batch). Released plainly, the lock went back to this loop often enough that
            // the other loop's clients waited many syncs (`appendfsync always`, two loops,
            // P=1: p99 20-30 ms against 2 ms; ARCHITECTURE §84). A turn end that only wrote
            // (`everysec` between its syncs) releases plainly: handing the lock over at every
            // turn cost a context switch per turn: 81,000 against 61,000 per 2M INCR at
            // pipeline depth 16, everysec against off (§88).
            if syncing {
                host.unlock_fair();
            } else {
                drop(host);
            }
            job
        };
        if let Some((ticket, file)) = job {
            // The `fdatasync` without the host lock: other loops execute and append meanwhile
            // (a sync covers what was written before it began, which the ticket names).
            let result = file.sync_data();
            let mut host = self.shared.host.lock();
            host.finish_sync(&ticket, result, Some(self.index));
            self.shared
                .sync_wanted
                .store(host.sync_wanted(), Ordering::Release);
            self.shared.check_timer(&mut host, Some(self.index));
            host.unlock_fair();
        }
        self.take_mail();
    }

    /// The node's timers (active expiry, statistics, idle timeouts, the slices of a long
    /// script) and the process figures for INFO.
    fn run_timers(&mut self) {
        let mut host = self.shared.host.lock();
        let now = host.now();
        if now.0.saturating_sub(self.last_stats_us) >= STATS_INTERVAL_US {
            self.last_stats_us = now.0;
            let mut figures = crate::process::read(self.shared.port);
            figures.host_lock_longest_hold_us = self.shared.host.take_longest_hold_us();
            host.router.handle(now, Input::ProcessStats(figures));
        }
        let next = host
            .router
            .run_timers(now, crate::host::clock_us)
            .map_or(u64::MAX, |t| t.0);
        host.carry_out(Some(self.index));
        let next = next.min(now.0 + MAX_TIMER_SLEEP_US);
        host.router.plan_timers(next);
        self.shared.timer_deadline_us.store(next, Ordering::Release);
        // A long script runs slice by slice from here, with connections served in between
        // (their requests get BUSY).
        self.script_running = host.node().script_running();
    }
}

/// How a flush ended.
enum Written {
    /// Everything that can go now went (for TLS, plaintext may wait for the handshake).
    All,
    /// The socket is full; the rest waits for room.
    Blocked,
    /// The connection is broken (or the peer gone): close it.
    Failed,
}

/// Writes a plaintext connection's output: one `send`/`writev` per call while the socket takes
/// everything.
fn write_plain(fd: i32, out: &mut OutputQueue) -> Written {
    while !out.is_empty() {
        let chunks = out.chunks();
        let written = if chunks.len() == 1 {
            sys_send(fd, &chunks[0])
        } else {
            let mut slices = [IoSlice::new(&[]); WRITE_SLICES];
            let count = slices_of(chunks, &mut slices);
            sys_writev(fd, &slices[..count])
        };
        match written {
            Ok(0) => return Written::Failed,
            Ok(n) => out.written(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Written::Blocked,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Written::Failed,
        }
    }
    Written::All
}

/// Points `slices` at the first chunks; returns how many.
fn slices_of<'a>(chunks: &'a [Bytes], slices: &mut [IoSlice<'a>; WRITE_SLICES]) -> usize {
    let count = chunks.len().min(WRITE_SLICES);
    for (slice, chunk) in slices.iter_mut().zip(&chunks[..count]) {
        *slice = IoSlice::new(chunk);
    }
    count
}

/// Writes a TLS connection's output: the queued replies are encrypted together (one record per
/// 16 KiB of them, up to rustls's 64 KiB of unsent records) and the records go out in one
/// `writev`; more rounds only for more output than that. `closing`: end the session with a
/// close_notify once the replies are out.
fn write_tls(
    fd: i32,
    session: &mut ServerConnection,
    out: &mut OutputQueue,
    closing: bool,
) -> Written {
    loop {
        if session.wants_write() {
            match session.write_tls(&mut Socket(fd)) {
                Ok(0) => return Written::Failed,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Written::Blocked,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return Written::Failed,
            }
        }
        if out.is_empty() {
            if closing {
                // Queues the alert once; a second call adds nothing.
                session.send_close_notify();
                if session.wants_write() {
                    continue;
                }
            }
            return Written::All;
        }
        let mut slices = [IoSlice::new(&[]); WRITE_SLICES];
        let count = slices_of(out.chunks(), &mut slices);
        match session.writer().write_vectored(&slices[..count]) {
            // Before the handshake ends, rustls holds a bounded amount of plaintext; the rest
            // waits in `out` for the flush after the client's next message.
            Ok(0) => return Written::All,
            Ok(n) => out.written(n),
            Err(_) => return Written::Failed,
        }
    }
}

/// A socket as rustls writes to it: straight system calls, as for plaintext output.
struct Socket(i32);

impl Write for Socket {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        sys_send(self.0, data)
    }

    fn write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        sys_writev(self.0, slices)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Decrypts `input` (bytes one read brought) through a client's session into `rbuf`. True when
/// the client closed the session; an error (a refused certificate, bytes that are not TLS)
/// leaves the alert to send in the session.
fn tls_receive(
    session: &mut ServerConnection,
    mut input: &[u8],
    rbuf: &mut BytesMut,
) -> Result<bool, String> {
    while !input.is_empty() {
        // rustls takes a bounded amount per call (one record's worth at most); the plaintext
        // is moved out after each so its own buffer never fills.
        session.read_tls(&mut input).map_err(|e| e.to_string())?;
        let state = session.process_new_packets().map_err(|e| e.to_string())?;
        let mut reader = session.reader();
        loop {
            match reader.fill_buf() {
                Ok([]) => return Ok(true),
                Ok(chunk) => {
                    let n = chunk.len();
                    rbuf.extend_from_slice(chunk);
                    reader.consume(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.to_string()),
            }
        }
        if state.peer_has_closed() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The connection in `slot` if it is still `id` (mail can outlive its connection, and the slot
/// be reused).
fn live_conn(conns: &mut [Option<Conn>], slot: Slot, id: ConnId) -> Option<&mut Conn> {
    conns.get_mut(slot)?.as_mut().filter(|c| c.id == id)
}

fn queue_flush(to_flush: &mut Vec<Slot>, slot: Slot, conn: &mut Conn) {
    if !conn.flush_queued {
        conn.flush_queued = true;
        to_flush.push(slot);
    }
}

// The socket calls go straight to the kernel rather than through the C library's wrappers:
// with more than one thread in the process those wrappers are cancellation points, and their
// bookkeeping is a visible share of a small request's cost (bench/results/
// architecture-measurements.md, §25).

/// `recv(2)` into `len` bytes at `buf`.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes.
unsafe fn sys_recv(fd: i32, buf: *mut u8, len: usize) -> io::Result<usize> {
    syscall_result(libc::syscall(
        libc::SYS_recvfrom,
        fd,
        buf,
        len,
        0,
        std::ptr::null_mut::<libc::sockaddr>(),
        std::ptr::null_mut::<libc::socklen_t>(),
    ))
}

fn sys_send(fd: i32, data: &[u8]) -> io::Result<usize> {
    // SAFETY: `data` is valid for reads of its length; no address is passed.
    let n = unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            data.as_ptr(),
            data.len(),
            libc::MSG_NOSIGNAL,
            std::ptr::null::<libc::sockaddr>(),
            0,
        )
    };
    syscall_result(n)
}

fn sys_writev(fd: i32, slices: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: `IoSlice` has the layout of `iovec`, and every slice is valid for reads.
    let n = unsafe {
        libc::syscall(
            libc::SYS_writev,
            fd,
            slices.as_ptr(),
            slices.len() as libc::c_int,
        )
    };
    syscall_result(n)
}

/// A byte count, or the error `errno` holds when the call returned a negative value.
fn syscall_result(n: libc::c_long) -> io::Result<usize> {
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Room left in a read buffer's allocation.
fn spare_of(rbuf: &BytesMut) -> u64 {
    (rbuf.capacity() - rbuf.len()) as u64
}

/// The sweep's rule for one connection (see `EventLoop::sweep_query_buffers`); true when
/// its buffer changed.
fn resize_query_buffer(conn: &mut Conn, now_us: u64) -> bool {
    let len = conn.rbuf.len();
    let cap = conn.rbuf.capacity();
    let peak = conn.qbuf_peak.max(len);
    conn.qbuf_peak = len;
    let idle = now_us.saturating_sub(conn.last_read_us) >= QBUF_IDLE_US;
    let target = if len == 0 && idle && cap > 0 {
        0
    } else if cap > QBUF_RESIZE_THRESHOLD && cap / 2 > peak {
        // Not below what a request being read still needs.
        peak.max(len + conn.parser.bytes_needed_hint())
    } else {
        return false;
    };
    let mut fresh = BytesMut::with_capacity(target);
    fresh.extend_from_slice(&conn.rbuf);
    conn.rbuf = fresh;
    true
}

fn limits_of(host: &Host) -> Limits {
    Limits {
        max_bulk_len: host.node().config().proto_max_bulk_len as usize,
        ..Limits::default()
    }
}

/// Runs the parsed batch (and then a protocol error, if any) under one lock, appending the
/// connection's replies to its output.
fn execute(
    shared: &Shared,
    loop_index: usize,
    conn: &mut Conn,
    batch: &mut Vec<Vec<Bytes>>,
    protocol_error: Option<String>,
    qbuf: (u64, u64),
) {
    if batch.is_empty() && protocol_error.is_none() {
        return;
    }
    let mut host = shared.host.lock();
    let now = host.now();
    host.router
        .node_mut()
        .set_query_buffer(conn.id, qbuf.0, qbuf.1);
    // INFO commandstats time: one more clock reading at the batch's end (two per batch, not two
    // per command). A wall clock stepped backwards mid-batch charges nothing.
    let closing = host.router.execute(
        now,
        conn.id,
        batch,
        protocol_error,
        conn.flow.replies_mut(),
        crate::host::clock_us,
    );
    host.carry_out(Some(loop_index));
    if closing {
        conn.flow.close_after_output();
    }
    conn.limits = limits_of(&host);
    conn.qbuf_limit =
        usize::try_from(host.node().config().client_query_buffer_limit).unwrap_or(usize::MAX);
    // Once everything read has run, the space it took is this buffer's again (when no
    // request's arguments still share it; then nothing is allocated here), so the figure
    // the node keeps is the room of the whole allocation, as Redis reports its buffer's.
    if conn.rbuf.is_empty() {
        let _ = conn.rbuf.try_reclaim(conn.rbuf.capacity() + 1);
    }
    host.router
        .node_mut()
        .set_query_buffer(conn.id, conn.rbuf.len() as u64, spare_of(&conn.rbuf));
    shared.check_timer(&mut host, Some(loop_index));
}

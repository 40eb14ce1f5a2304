//! The node and everything shared between connection tasks.
//!
//! One node state machine per process, behind a mutex. Connection tasks parse requests and do
//! all socket I/O in parallel on every core; only command execution is serialised, one lock
//! acquisition per read batch (a whole pipeline). Why, and the alternatives, are in
//! docs/ARCHITECTURE.md.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use lattice_node::{ConnId, Input, Micros, Node, Output};
use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};

/// What one connection task is told by whoever drains the node's outputs.
pub enum Mail {
    Write(Bytes),
    Close,
}

pub struct Host {
    pub node: Node,
    mailboxes: HashMap<ConnId, mpsc::UnboundedSender<Mail>>,
    last_now_us: u64,
}

impl Host {
    pub fn new(node: Node, now: Micros) -> Host {
        Host {
            node,
            mailboxes: HashMap::new(),
            last_now_us: now.0,
        }
    }

    /// The wall clock in µs, never going backwards (the node requires monotonic time; a clock
    /// stepped back by NTP just holds still until it catches up).
    pub fn now(&mut self) -> Micros {
        let wall = wall_clock_us();
        if wall > self.last_now_us {
            self.last_now_us = wall;
        }
        Micros(self.last_now_us)
    }

    pub fn register(&mut self, conn: ConnId, mailbox: mpsc::UnboundedSender<Mail>) {
        self.mailboxes.insert(conn, mailbox);
    }

    pub fn unregister(&mut self, conn: ConnId) {
        self.mailboxes.remove(&conn);
    }

    /// Carries out every pending output. Writes for `own` are appended to `own_out` (the caller
    /// writes them after releasing the lock, in one syscall); others go to their tasks'
    /// mailboxes. Returns true when `own` must be closed after its writes.
    pub fn drain(&mut self, own: Option<ConnId>, own_out: &mut Vec<Bytes>) -> bool {
        let mut close_own = false;
        while let Some(out) = self.node.poll_output() {
            match out {
                Output::Write { conn, data } if Some(conn) == own => own_out.push(data),
                Output::Close { conn } if Some(conn) == own => close_own = true,
                Output::Write { conn, data } => {
                    if let Some(m) = self.mailboxes.get(&conn) {
                        let _ = m.send(Mail::Write(data));
                    }
                }
                Output::Close { conn } => {
                    if let Some(m) = self.mailboxes.get(&conn) {
                        let _ = m.send(Mail::Close);
                    }
                }
                // No cluster links yet: a standalone server never reports PeerUp.
                Output::PeerSend { .. } => {}
            }
        }
        close_own
    }

    pub fn handle(&mut self, input: Input) {
        let now = self.now();
        self.node.handle(now, input);
    }
}

pub fn wall_clock_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

pub struct Shared {
    pub host: Mutex<Host>,
    /// Wakes the timer task when a command asked for an earlier timer than it sleeps to.
    pub timer_wake: Notify,
    pub timer_deadline_us: AtomicU64,
    next_conn: AtomicU64,
    pub port: u16,
}

impl Shared {
    pub fn new(host: Host, port: u16) -> Shared {
        Shared {
            host: Mutex::new(host),
            timer_wake: Notify::new(),
            timer_deadline_us: AtomicU64::new(u64::MAX),
            next_conn: AtomicU64::new(1),
            port,
        }
    }

    pub fn next_conn_id(&self) -> ConnId {
        ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed))
    }

    /// Called with the lock held after handling inputs: if the node now wants waking earlier
    /// than the timer task plans, wake it.
    pub fn check_timer(&self, host: &Host) {
        if let Some(t) = host.node.poll_timeout() {
            if t.0 < self.timer_deadline_us.load(Ordering::Relaxed) {
                self.timer_wake.notify_one();
            }
        }
    }
}

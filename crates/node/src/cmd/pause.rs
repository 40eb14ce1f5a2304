//! CLIENT PAUSE / CLIENT UNPAUSE.
//!
//! CLIENT PAUSE ms [WRITE|ALL] holds, until the pause ends, every request (ALL) or the ones
//! that could change data or reach other clients (WRITE: commands flagged `write` or
//! `may-replicate`, and an EXEC whose transaction holds one), as Redis 7.0 does. A script
//! call that declares its flags is judged by them instead: one declaring `no-writes` (or an
//! EVAL_RO / FCALL_RO of a script declaring none) runs during a WRITE pause, since a
//! read-only script is refused any command that could write or replicate. A held
//! client is parked as a blocked one is (INFO blocked_clients counts it); its request and
//! whatever it pipelines after run in order when the pause ends: at its deadline on the node's
//! clock (`now`), or at CLIENT UNPAUSE. A request refused before it would run (unknown
//! command, wrong arity) is answered at once. Pausing again keeps the stricter mode and the
//! later end. Neither active nor lazy expiry deletes while a pause is on (a deletion is a
//! write): a key past its deadline is answered as missing and deleted after the pause.
//!
//! **Node-local**: a pause holds this node's clients only. Peers keep accepting writes and
//! their changes still arrive and apply here: in a multi-primary store a pause cannot stop the
//! data from changing, only this node's clients from changing it (docs/SEMANTICS.md).

use bytes::Bytes;

use crate::args::{is, parse_i64};
use crate::blocking::{Blocked, TimeoutReply};
use crate::client::ConnId;
use crate::command::Call;
use crate::ctx::{CommandSpec, Core};
pub use crate::ops::{Pause, PauseMode, Pausing};

pub(crate) fn client_pause(core: &mut Core, call: &mut Call) {
    if call.argc() > 4 {
        return call.subcommand_syntax_error();
    }
    let mode = match call.args.get(3) {
        None => PauseMode::All,
        Some(m) if is(m, "write") => PauseMode::Write,
        Some(m) if is(m, "all") => PauseMode::All,
        Some(_) => return call.error("ERR CLIENT PAUSE mode must be WRITE or ALL"),
    };
    let ms = match parse_i64(call.arg(2)) {
        None => return call.error("ERR timeout is not an integer or out of range"),
        Some(t) if t < 0 => return call.error("ERR timeout is negative"),
        Some(t) => t as u64,
    };
    let until_ms = if ms > 0 {
        call.now_ms.saturating_add(ms)
    } else {
        0
    };
    let p = &mut core.pausing.pause;
    *p = Some(match *p {
        Some(old) => Pause {
            mode: old.mode.max(mode),
            until_ms: old.until_ms.max(until_ms),
        },
        None => Pause { mode, until_ms },
    });
    call.ok();
}

pub(crate) fn client_unpause(core: &mut Core, call: &mut Call) {
    core.unpause();
    call.ok();
}

impl Core {
    /// Ends the pause: the held clients are released in the order they were held, and run
    /// what they sent meanwhile (the node runs `released` clients' queued requests).
    pub(crate) fn unpause(&mut self) {
        self.pausing.pause = None;
        while let Some(conn) = self.pausing.held.pop_front() {
            if self.unpark(conn).is_some() {
                self.released.push(conn);
            }
        }
    }

    /// The pause's end, for the node's timer.
    pub(crate) fn pause_deadline_ms(&self) -> Option<u64> {
        self.pausing.pause.map(|p| p.until_ms)
    }

    /// Ends a pause whose time has come.
    pub(crate) fn expire_pause(&mut self, now_ms: u64) {
        if self.pausing.pause.is_some_and(|p| p.until_ms <= now_ms) {
            self.unpause();
        }
    }

    /// Whether writes are paused (active expiry waits).
    pub(crate) fn writes_paused(&self) -> bool {
        self.pausing.pause.is_some()
    }

    /// Holds `conn`'s request `args` if the pause covers it: parks the client with the
    /// request first in its queue. Returns whether it was held.
    pub(crate) fn pause_hold(&mut self, conn: ConnId, args: &[Bytes]) -> bool {
        let Some(pause) = self.pausing.pause else {
            return false;
        };
        if pause.until_ms <= self.now.as_millis() {
            // Ended; the timer releases the held clients.
            return false;
        }
        let Ok(spec) = crate::dispatch::resolve(self, args) else {
            return false;
        };
        let held = match pause.mode {
            PauseMode::All => true,
            PauseMode::Write => self.held_by_write_pause(conn, spec, args),
        };
        if !held {
            return false;
        }
        let Some(c) = self.clients.get_mut(&conn) else {
            return false;
        };
        c.queued_requests.push_front(args.to_vec());
        c.blocked = Some(Blocked {
            args: args.to_vec(),
            keys: Vec::new(),
            deadline_ms: None,
            on_timeout: TimeoutReply::NullArray,
        });
        self.pausing.held.push_back(conn);
        true
    }

    /// What CLIENT PAUSE WRITE holds: a request that may change data or reach other clients
    /// (`Core::may_replicate`, which reads a script's declared flags), or an EXEC whose
    /// queued transaction holds one.
    fn held_by_write_pause(
        &self,
        conn: ConnId,
        spec: &'static CommandSpec,
        args: &[Bytes],
    ) -> bool {
        if self.may_replicate(spec, args) {
            return true;
        }
        if spec.name != "exec" {
            return false;
        }
        let Some(m) = self.clients.get(&conn).and_then(|c| c.multi.as_ref()) else {
            return false;
        };
        m.queued.iter().any(|args| {
            crate::dispatch::resolve(self, args).is_ok_and(|s| self.may_replicate(s, args))
        })
    }

    pub(crate) fn check_pause_invariants(&self) {
        for conn in &self.pausing.held {
            let c = self.clients.get(conn);
            assert!(
                c.is_none_or(|c| c.blocked.is_some()),
                "a held client that is not parked"
            );
        }
        if self.pausing.pause.is_none() {
            assert!(self.pausing.held.is_empty(), "clients held with no pause");
        }
    }
}

//! MONITOR: a connection that asks for it receives, from then on, a line for every command
//! the node runs, as Redis writes them: `+<unix seconds>.<micros> [0 <client address>]` (or
//! `[0 lua]` for a script's commands) and the arguments quoted. Admin commands and those
//! flagged `skip-monitor` (EVAL's relatives show their own line, not their code's) are left
//! out, and so are requests refused before they ran, as in Redis; secrets are redacted as the
//! slow log redacts them. The time is the node's (`now` of the request).
//!
//! **Node-local**: a monitor sees what its node ran (its own clients' commands and the
//! scripts they ran); replicated changes from peers are states, not commands, and are not
//! shown.

use bytes::Bytes;

use crate::client::ConnId;
use crate::command::{spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};

pub const COMMANDS: &[CommandSpec] = &[spec(
    "monitor",
    1,
    &["admin", "noscript", "loading", "stale"],
    (0, 0, 0),
    "server",
    "1.0.0",
    "Listens for all requests received by the server in real-time.",
    monitor,
)];

/// Where a command shown to monitors came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Client,
    Script,
}

fn monitor(core: &mut Core, call: &mut Call) {
    if call.in_exec {
        // Redis refuses it inside MULTI by its no-multi rule; a script cannot call it.
        return call.error(crate::command::NOT_IN_MULTI);
    }
    core.monitors.insert(call.conn);
    call.ok();
}

/// Appends `bytes` quoted as Redis quotes an argument for MONITOR (`sdscatrepr`).
fn quote(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    for &b in bytes {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

impl Core {
    /// Shows a command (`spec`, `args`, for `conn`) to every monitor: `before` it runs for
    /// the script commands (flagged `skip-monitor`: the commands their script runs follow
    /// them), after it ran for the others.
    pub(crate) fn feed_monitors(
        &mut self,
        conn: ConnId,
        spec: &CommandSpec,
        args: &[Bytes],
        source: Source,
        before: bool,
    ) {
        if self.monitors.is_empty()
            || spec.has(Flag::Admin)
            || spec.flags.contains(&"skip-monitor") != before
        {
            return;
        }
        let us = self.now.0;
        let mut line = format!("+{}.{:06} ", us / 1_000_000, us % 1_000_000).into_bytes();
        match source {
            Source::Script => line.extend_from_slice(b"[0 lua] "),
            Source::Client => {
                let addr = self.clients.get(&conn).map_or("", |c| c.peer_addr.as_str());
                line.extend_from_slice(format!("[0 {addr}] ").as_bytes());
            }
        }
        let mut shown = args.to_vec();
        crate::cmd::slowlog::redact(&mut shown);
        for (i, a) in shown.iter().enumerate() {
            if i > 0 {
                line.push(b' ');
            }
            quote(&mut line, a);
        }
        line.extend_from_slice(b"\r\n");
        let monitors: Vec<ConnId> = self.monitors.iter().copied().collect();
        for m in monitors {
            self.deliver(m, |w| w.raw(&line));
        }
    }

    pub(crate) fn check_monitor_invariants(&self) {
        for m in &self.monitors {
            assert!(self.clients.contains_key(m), "a monitor that is gone");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn arguments_are_quoted_as_redis_quotes_them() {
        let mut out = Vec::new();
        super::quote(&mut out, b"a\"b\\c\n\x01\xff ");
        assert_eq!(out, b"\"a\\\"b\\\\c\\n\\x01\\xff \"");
    }
}

//! SLOWLOG GET/LEN/RESET/HELP, and how a command's execution time is measured without the
//! node reading a clock.
//!
//! **What a duration measures.** The node only knows the times its driver hands in. A request
//! starts at the `now` of its [`crate::Input::Request`]; it ends at the `now` the driver gives
//! [`crate::Node::request_done`] right after handing it over (the server reads its clock
//! there), or, when a driver never calls it, at the latest time the node was given before its
//! next input (then no time passed for it: the simulator's requests take 0 µs). A script that
//! runs in slices ends when its last slice has run. The commands a request ran (the request
//! itself, each command of an EXEC, the blocked commands it served) share its time evenly,
//! as INFO commandstats shares a pipeline's. So a duration is the wall-clock time the node's
//! thread spent on the request, including what the driver did in between (parsing the
//! request is before, writing the reply after): the same span Redis's `call()` measures, plus
//! the dispatch around it.
//!
//! **Node-local.** In a cluster each node logs the commands its own clients sent it; nothing is
//! replicated or forwarded (docs/SEMANTICS.md).

use bytes::Bytes;

use crate::args::{is, parse_i64};
use crate::client::ConnId;
use crate::command::{container, spec, Call};
use crate::ctx::{CommandSpec, Core};
use crate::ops::{Candidate, MAX_CANDIDATES};
pub use crate::ops::{SlowEntry, SlowLog, Timing};
use crate::time::Micros;

const SERVER: &str = "server";
/// Arguments an entry keeps at most (the last slot then says how many were left out).
const MAX_ARGC: usize = 32;
/// Bytes an argument keeps at most (the rest is replaced by a count).
const MAX_STRING: usize = 128;

pub const COMMANDS: &[CommandSpec] = &[container(
    "slowlog",
    -2,
    SERVER,
    "2.2.12",
    "A container for slow log commands.",
    &[
        spec(
            "slowlog|get",
            -2,
            &["admin", "loading", "stale"],
            (0, 0, 0),
            SERVER,
            "2.2.12",
            "Returns the slow log's entries.",
            slowlog_get,
        ),
        spec(
            "slowlog|len",
            2,
            &["admin", "loading", "stale"],
            (0, 0, 0),
            SERVER,
            "2.2.12",
            "Returns the number of entries in the slow log.",
            slowlog_len,
        ),
        spec(
            "slowlog|reset",
            2,
            &["admin", "loading", "stale"],
            (0, 0, 0),
            SERVER,
            "2.2.12",
            "Clears all entries from the slow log.",
            slowlog_reset,
        ),
        spec(
            "slowlog|help",
            2,
            &["loading", "stale"],
            (0, 0, 0),
            SERVER,
            "6.2.0",
            "Show helpful text about the different subcommands.",
            slowlog_help,
        ),
    ],
)];

impl Core {
    /// Whether finished commands are worth remembering: the slow log or the latency monitor
    /// would record a slow one. Off, nothing is kept per request.
    pub(crate) fn timing_wanted(&self) -> bool {
        (self.config.slowlog_log_slower_than_us >= 0 && self.config.slowlog_max_len > 0)
            || self.config.latency_monitor_threshold_ms > 0
    }

    /// Remembers a command `conn` ran (its own request, one of its EXEC, or a blocked one it
    /// released) until the duration of the requests being timed is known; the first one
    /// starts the timing at the node's current time. Skipped: EXEC itself (its commands are
    /// logged one by one, as Redis does).
    pub(crate) fn timing_note(&mut self, conn: ConnId, args: Vec<Bytes>) {
        if args.first().is_some_and(|a| is(a, "exec"))
            || self.timing.candidates.len() >= MAX_CANDIDATES
            || !self.timing_wanted()
        {
            return;
        }
        if !self.timing.begun {
            self.timing.begun = true;
            self.timing.start = self.now;
        }
        self.timing.candidates.push(Candidate { conn, args });
    }

    /// The requests being timed ended at `end`: each command they ran gets an equal share of
    /// their time and goes into the slow log and the latency monitor if slow enough. When the
    /// whole batch is faster than both thresholds no share can reach them, and the commands
    /// are only forgotten: the common case costs a comparison.
    pub(crate) fn timing_end(&mut self, end: Micros) {
        if !self.timing.begun {
            return;
        }
        self.timing.begun = false;
        let elapsed = end.0.saturating_sub(self.timing.start.0);
        let slowlog = self.config.slowlog_log_slower_than_us;
        let monitor_ms = self.config.latency_monitor_threshold_ms;
        let may_log =
            (slowlog >= 0 && self.config.slowlog_max_len > 0 && elapsed >= slowlog as u64)
                || (monitor_ms > 0 && elapsed / 1000 >= monitor_ms);
        let mut candidates = std::mem::take(&mut self.timing.candidates);
        if may_log && !candidates.is_empty() {
            let share = elapsed / candidates.len() as u64;
            let time_s = self.timing.start.0 / 1_000_000;
            for c in candidates.drain(..) {
                self.latency_command(&c.args, share, end);
                self.slowlog_push(c.conn, c.args, share, time_s);
            }
        }
        candidates.clear();
        // Keep the allocation for the next batch.
        self.timing.candidates = candidates;
    }

    fn slowlog_push(&mut self, conn: ConnId, args: Vec<Bytes>, duration_us: u64, time_s: u64) {
        let threshold = self.config.slowlog_log_slower_than_us;
        let max_len = self.config.slowlog_max_len;
        if threshold < 0 || max_len == 0 || duration_us < threshold as u64 {
            return;
        }
        let (peer, name) = match self.clients.get(&conn) {
            Some(c) => (c.peer_addr.clone(), c.name.clone().unwrap_or_default()),
            None => (String::new(), Bytes::new()),
        };
        let log = &mut self.slowlog;
        let id = log.next_id;
        log.next_id += 1;
        log.entries.push_front(SlowEntry {
            id,
            time_s,
            duration_us,
            args: entry_args(args),
            peer,
            name,
        });
        log.entries.truncate(max_len as usize);
    }
}

/// The arguments as an entry keeps them: at most [`MAX_ARGC`] (the last saying how many more
/// there were), each at most [`MAX_STRING`] bytes, secrets replaced by `(redacted)`. Copies,
/// in a vector of their own: a request's arguments share its read buffer, and the request's
/// vector has room for all of them, which an entry kept for long must not pin (a slow SADD of
/// 100,000 members would keep megabytes alive after the set is gone).
fn entry_args(mut args: Vec<Bytes>) -> Vec<Bytes> {
    redact(&mut args);
    let argc = args.len();
    let keep = argc.min(MAX_ARGC);
    let shown = if keep != argc { keep - 1 } else { keep };
    let mut kept: Vec<Bytes> = Vec::with_capacity(keep);
    for a in &args[..shown] {
        kept.push(if a.len() > MAX_STRING {
            let mut s = a[..MAX_STRING].to_vec();
            s.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_STRING).as_bytes());
            Bytes::from(s)
        } else {
            Bytes::copy_from_slice(a)
        });
    }
    if keep != argc {
        kept.push(Bytes::from(format!(
            "... ({} more arguments)",
            argc - keep + 1
        )));
    }
    kept
}

/// Passwords never reach the log: AUTH's arguments, HELLO's AUTH pair, and the value of a
/// CONFIG SET of `requirepass` or `masterauth` (as Redis redacts them).
pub(crate) fn redact(args: &mut [Bytes]) {
    let redacted = || Bytes::from_static(b"(redacted)");
    let Some(first) = args.first() else {
        return;
    };
    if is(first, "auth") {
        for a in args.iter_mut().skip(1) {
            *a = redacted();
        }
    } else if is(first, "hello") {
        let mut i = 2;
        while i < args.len() {
            if is(&args[i], "auth") && i + 2 < args.len() {
                args[i + 1] = redacted();
                args[i + 2] = redacted();
                i += 3;
            } else {
                i += 1;
            }
        }
    } else if is(first, "config") && args.len() > 1 && is(&args[1], "set") {
        let mut i = 2;
        while i + 1 < args.len() {
            if is(&args[i], "requirepass") || is(&args[i], "masterauth") {
                args[i + 1] = redacted();
            }
            i += 2;
        }
    }
}

fn slowlog_get(core: &mut Core, call: &mut Call) {
    if call.argc() > 3 {
        return call.subcommand_syntax_error();
    }
    let mut count = 10usize;
    if call.argc() == 3 {
        match parse_i64(call.arg(2)) {
            Some(-1) => count = usize::MAX,
            Some(n) if n >= 0 => count = n as usize,
            _ => return call.error("ERR count should be greater than or equal to -1"),
        }
    }
    let n = count.min(core.slowlog.entries.len());
    call.out.array_len(n);
    for e in core.slowlog.entries.iter().take(n) {
        call.out.array_len(6);
        call.out.integer(e.id as i64);
        call.out.integer(e.time_s as i64);
        call.out.integer(e.duration_us as i64);
        call.out.array_len(e.args.len());
        for a in &e.args {
            call.out.bulk(a);
        }
        call.out.bulk(e.peer.as_bytes());
        call.out.bulk(&e.name);
    }
}

fn slowlog_len(core: &mut Core, call: &mut Call) {
    call.out.integer(core.slowlog.entries.len() as i64);
}

fn slowlog_reset(core: &mut Core, call: &mut Call) {
    core.slowlog.entries.clear();
    // What this request ran before the reset (earlier commands of its EXEC) is gone too.
    core.timing.candidates.clear();
    call.ok();
}

fn slowlog_help(_core: &mut Core, call: &mut Call) {
    const LINES: &[&str] = &[
        "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET [<count>]",
        "    Return the <count> newest entries of the slow log (default 10, -1 for all).",
        "    Each entry: id, unix time, duration in microseconds, the arguments,",
        "    the client's address and port, the client's name.",
        "LEN",
        "    Return the number of entries in the slow log.",
        "RESET",
        "    Empty the slow log.",
        "HELP",
        "    Print this help.",
    ];
    call.help(LINES);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    #[test]
    fn long_commands_are_trimmed_and_secrets_redacted() {
        let mut many = vec!["sadd".to_string(), "set".to_string()];
        many.extend((3..=33).map(|i| i.to_string()));
        let many: Vec<&str> = many.iter().map(|s| s.as_str()).collect();
        let e = entry_args(args(&many));
        assert_eq!(e.len(), 32);
        assert_eq!(&e[31][..], b"... (2 more arguments)");
        assert_eq!(&e[30][..], b"31");
        let long = "A".repeat(129);
        let e = entry_args(args(&["sadd", "set", &long]));
        assert_eq!(e[2].len(), 128 + "... (1 more bytes)".len());
        let e = entry_args(args(&["config", "set", "requirepass", "pw", "hz", "10"]));
        assert_eq!(&e[3][..], b"(redacted)");
        assert_eq!(&e[5][..], b"10");
        let e = entry_args(args(&["hello", "3", "auth", "u", "p", "setname", "x"]));
        assert_eq!(
            e,
            args(&[
                "hello",
                "3",
                "auth",
                "(redacted)",
                "(redacted)",
                "setname",
                "x"
            ])
        );
        let e = entry_args(args(&["AUTH", "pw"]));
        assert_eq!(e, args(&["AUTH", "(redacted)"]));
    }
}

//! LATENCY LATEST/HISTORY/RESET/DOCTOR/HELP: the latency monitor.
//!
//! With `latency-monitor-threshold` above 0, a command whose duration (measured as the slow
//! log measures it, `crate::cmd::slowlog`) reaches the threshold in milliseconds is a sample
//! of the event `command`, or `fast-command` for a command flagged fast; a timer run whose
//! active expiry deleted keys and that reached it is a sample of `expire-cycle`
//! (`Node::timers_done`). Samples within one second keep the largest; each event keeps its
//! last [`HISTORY_LEN`] seconds with samples and the largest ever. Those are the only events:
//! snapshots and fsyncs are the driver's and happen between the node's inputs.
//!
//! **Node-local**, like the slow log: a node monitors the commands it ran.

use std::fmt::Write as _;

use bytes::Bytes;

use crate::command::{container, spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};
use crate::stats::CommandStats;
use crate::time::Micros;

const SERVER: &str = "server";
/// Samples kept per event (Redis keeps 160).
pub use crate::ops::{LatencyMonitor, Series, HISTORY_LEN};

pub const COMMANDS: &[CommandSpec] = &[container(
    "latency",
    -2,
    SERVER,
    "2.8.13",
    "A container for latency diagnostics commands.",
    &[
        spec(
            "latency|latest",
            2,
            &["admin", "noscript", "loading", "stale"],
            (0, 0, 0),
            SERVER,
            "2.8.13",
            "Returns the latest latency samples for all events.",
            latency_latest,
        ),
        spec(
            "latency|history",
            3,
            &["admin", "noscript", "loading", "stale"],
            (0, 0, 0),
            SERVER,
            "2.8.13",
            "Returns timestamp-latency samples for an event.",
            latency_history,
        ),
        spec(
            "latency|reset",
            -2,
            &["admin", "noscript", "loading", "stale"],
            (0, 0, 0),
            SERVER,
            "2.8.13",
            "Resets the latency data for one or more events.",
            latency_reset,
        ),
        spec(
            "latency|doctor",
            2,
            &["admin", "noscript", "loading", "stale"],
            (0, 0, 0),
            SERVER,
            "2.8.13",
            "Returns a human-readable latency analysis report.",
            latency_doctor,
        ),
        spec(
            "latency|histogram",
            -2,
            &["admin", "noscript", "loading", "stale"],
            (0, 0, 0),
            SERVER,
            "7.0.0",
            "Returns the cumulative distribution of latencies of a subset or all commands.",
            latency_histogram,
        ),
        spec(
            "latency|help",
            2,
            &["loading", "stale"],
            (0, 0, 0),
            SERVER,
            "2.8.13",
            "Returns helpful text about the different subcommands.",
            latency_help,
        ),
    ],
)];

impl Core {
    /// A command (`args`) took `duration_us`, ending at `end`: a latency sample if the monitor
    /// is on and it reached the threshold.
    pub(crate) fn latency_command(&mut self, args: &[Bytes], duration_us: u64, end: Micros) {
        let threshold = self.config.latency_monitor_threshold_ms;
        let ms = duration_us / 1000;
        if threshold == 0 || ms < threshold {
            return;
        }
        let fast = args
            .first()
            .and_then(|name| self.table.find(name))
            .is_some_and(|s| s.has(Flag::Fast));
        let event = if fast { "fast-command" } else { "command" };
        self.latency.add(event, end.0 / 1_000_000, ms);
    }
}

fn latency_latest(core: &mut Core, call: &mut Call) {
    call.out.array_len(core.latency.events.len());
    for (name, s) in &core.latency.events {
        let (t, ms) = s.samples.back().copied().unwrap_or((0, 0));
        call.out.array_len(4);
        call.out.bulk(name.as_bytes());
        call.out.integer(t as i64);
        call.out.integer(ms as i64);
        call.out.integer(s.max_ms as i64);
    }
}

fn event<'a>(core: &'a Core, name: &[u8]) -> Option<(&'static str, &'a Series)> {
    core.latency
        .events
        .iter()
        .find(|(n, _)| n.as_bytes() == name)
        .map(|(n, s)| (*n, s))
}

fn latency_history(core: &mut Core, call: &mut Call) {
    let Some((_, s)) = event(core, call.arg(2)) else {
        return call.out.array_len(0);
    };
    call.out.array_len(s.samples.len());
    for (t, ms) in &s.samples {
        call.out.array_len(2);
        call.out.integer(*t as i64);
        call.out.integer(*ms as i64);
    }
}

fn latency_reset(core: &mut Core, call: &mut Call) {
    if call.argc() == 2 {
        let n = core.latency.events.len();
        core.latency.events.clear();
        return call.out.integer(n as i64);
    }
    let mut n = 0;
    for name in &call.args[2..] {
        if let Some((key, _)) = event(core, name) {
            core.latency.events.remove(key);
            n += 1;
        }
    }
    call.out.integer(n);
}

/// A short report in plain words: each event's figures and what to look at.
fn latency_doctor(core: &mut Core, call: &mut Call) {
    let mut t = String::new();
    if core.latency.events.is_empty() {
        if core.config.latency_monitor_threshold_ms == 0 {
            t.push_str("The latency monitor is off (latency-monitor-threshold is 0): set it to the number of milliseconds above which a command counts as a latency spike.\n");
        } else {
            let _ = writeln!(
                t,
                "No command took {} ms or more since the monitor was last reset.",
                core.config.latency_monitor_threshold_ms
            );
        }
    } else {
        let _ = writeln!(
            t,
            "Latency spikes of {} ms or more, by event:\n",
            core.config.latency_monitor_threshold_ms
        );
        for (i, (name, s)) in core.latency.events.iter().enumerate() {
            let sum: u64 = s.samples.iter().map(|(_, ms)| ms).sum();
            let avg = sum / s.samples.len().max(1) as u64;
            let first = s.samples.front().map_or(0, |x| x.0);
            let _ = writeln!(
                t,
                "{}. {name}: {} latency spikes (average {avg} ms, largest {} ms) since unix time {first}.",
                i + 1,
                s.samples.len(),
                s.max_ms
            );
        }
        t.push_str("\nAdvice: SLOWLOG GET lists the slowest commands with their arguments. Commands that walk a whole value or keyspace (KEYS, SMEMBERS, HGETALL, LRANGE 0 -1, SORT, long scripts) grow with the data; SCAN and its relatives split the work.\n");
    }
    call.out.verbatim(b"txt", t.as_bytes());
}

/// Writes one command's histogram: its timed calls, then each bucket's upper bound in µs with
/// the count of calls up to it, for the buckets that hold calls (Redis's shape).
fn write_histogram(call: &mut Call, s: &CommandStats) {
    call.out.map_len(2);
    call.out.bulk(b"calls");
    call.out.integer(s.timed_calls() as i64);
    call.out.bulk(b"histogram_usec");
    let filled = s.latency.iter().filter(|n| **n > 0).count();
    call.out.map_len(filled);
    let mut cumulative = 0;
    for (k, n) in s.latency.iter().enumerate() {
        if *n > 0 {
            cumulative += n;
            call.out.integer(((1024u64 << k) / 1000) as i64);
            call.out.integer(cumulative as i64);
        }
    }
}

/// LATENCY HISTOGRAM [command ...]: the latency histograms of the named commands (a container
/// names its subcommands too; unknown names are skipped), or of every command timed so far.
/// Durations are the slow log's (`crate::cmd::slowlog`); `latency-tracking no` stops them.
fn latency_histogram(core: &mut Core, call: &mut Call) {
    let mut names: Vec<&'static str> = Vec::new();
    if call.argc() == 2 {
        names.extend(core.stats.commands.iter().map(|(n, _)| n));
    }
    for arg in &call.args[2..] {
        let Some(spec) = crate::cmd::server::lookup_full(core, arg) else {
            continue;
        };
        names.push(spec.name);
        names.extend(spec.subcommands.iter().map(|s| s.name));
    }
    let found: Vec<(&'static str, CommandStats)> = names
        .into_iter()
        .filter_map(|n| {
            let s = core.stats.commands.get_mut(n).copied()?;
            (s.timed_calls() > 0).then_some((n, s))
        })
        .collect();
    call.out.map_len(found.len());
    for (name, s) in &found {
        call.out.bulk(name.as_bytes());
        write_histogram(call, s);
    }
}

fn latency_help(_core: &mut Core, call: &mut Call) {
    const LINES: &[&str] = &[
        "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "DOCTOR",
        "    Return a report on the latency spikes seen, in plain words.",
        "HISTORY <event>",
        "    Return the (unix time, milliseconds) samples of <event>.",
        "LATEST",
        "    Return each event's newest sample and its largest.",
        "RESET [<event> ...]",
        "    Forget the samples of the given events (default: all of them).",
        "HISTOGRAM [<command> ...]",
        "    Return the latency distribution of the given commands (default: all of them).",
        "HELP",
        "    Print this help.",
    ];
    call.help(LINES);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_per_second_and_a_bounded_history() {
        let mut m = LatencyMonitor::default();
        m.add("command", 10, 5);
        m.add("command", 10, 3);
        m.add("command", 11, 2);
        let s = &m.events["command"];
        assert_eq!(s.samples, [(10, 5), (11, 2)]);
        assert_eq!(s.max_ms, 5);
        for t in 0..500 {
            m.add("command", 100 + t, 1);
        }
        assert_eq!(m.events["command"].samples.len(), HISTORY_LEN);
        m.check_invariants();
    }
}

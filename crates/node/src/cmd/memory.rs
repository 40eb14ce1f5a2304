//! MEMORY USAGE/STATS/DOCTOR/HELP.
//!
//! The figures come from two places: the driver's allocator counts (`ProcessStats`: bytes
//! allocated, resident set), which the node keeps with their peak and their first value (the
//! memory the process held before any data), and the node's own accounting of what it holds
//! besides the keyspace: client buffers, retransmission buffers, the script cache, the
//! persistence buffers, the store's per-key tables. The dataset is what is left, as Redis
//! computes it. No figure is made up; a part Lattice does not have (replica output buffers,
//! the cluster bus's buffers, function libraries) is 0, as Redis reports a part it does not
//! use.
//!
//! **Node-local**: each node reports its own process.

use std::fmt::Write as _;

use crate::args::is;
use crate::command::{container, spec, Call};
use crate::ctx::{CommandSpec, Core};
use crate::io::ProcessStats;
pub use crate::ops::MemoryHistory;

const SERVER: &str = "server";

pub const COMMANDS: &[CommandSpec] = &[container(
    "memory",
    -2,
    SERVER,
    "4.0.0",
    "A container for memory diagnostics commands.",
    &[
        spec(
            "memory|usage",
            -3,
            &["readonly"],
            (2, 2, 1),
            SERVER,
            "4.0.0",
            "Estimates the memory usage of a key.",
            memory_usage,
        ),
        spec(
            "memory|stats",
            2,
            &[],
            (0, 0, 0),
            SERVER,
            "4.0.0",
            "Returns details about memory usage.",
            memory_stats,
        ),
        spec(
            "memory|doctor",
            2,
            &[],
            (0, 0, 0),
            SERVER,
            "4.0.0",
            "Outputs a memory problems report.",
            memory_doctor,
        ),
        spec(
            "memory|help",
            2,
            &["loading", "stale"],
            (0, 0, 0),
            SERVER,
            "4.0.0",
            "Returns helpful text about the different subcommands.",
            memory_help,
        ),
    ],
)];

impl Core {
    /// Fresh process figures from the driver (INFO, MEMORY STATS).
    pub(crate) fn set_process_stats(&mut self, p: ProcessStats) {
        if self.memory.startup_bytes == 0 {
            self.memory.startup_bytes = p.used_memory_bytes;
        }
        self.memory.peak_bytes = self.memory.peak_bytes.max(p.used_memory_bytes);
        self.eviction.report(p.used_memory_bytes);
        self.stats.host_lock_longest_hold_us = self
            .stats
            .host_lock_longest_hold_us
            .max(p.host_lock_longest_hold_us);
        self.process = p;
    }
}

/// What MEMORY STATS reports, computed once for STATS and DOCTOR.
struct Overhead {
    peak: u64,
    total: u64,
    startup: u64,
    backlog: u64,
    clients: u64,
    aof: u64,
    lua: u64,
    table_main: u64,
    table_expires: u64,
    overhead: u64,
    keys: u64,
    bytes_per_key: u64,
    dataset: u64,
    dataset_pct: f64,
    peak_pct: f64,
    rss: u64,
}

/// Bytes the store's slot tables spend per key (a pointer and a control byte per bucket at a
/// typical load): the share `lattice_store::Entry::memory_usage` counts.
const TABLE_BYTES_PER_KEY: u64 = 16;
/// Bytes the expiry index spends per key with a deadline: a (deadline, hash) key and a slot
/// number, plus the B-tree's node overhead (about a third at its usual fill).
const EXPIRES_BYTES_PER_KEY: u64 = 28;

fn overhead(core: &Core) -> Overhead {
    let total = core.process.used_memory_bytes;
    let startup = core.memory.startup_bytes.min(total);
    let peak = core.memory.peak_bytes.max(total);
    let backlog = core.repl.as_ref().map_or(0, |r| r.retained_bytes()) as u64;
    let clients: u64 = core
        .clients
        .values()
        .map(|c| {
            (c.out.capacity()
                + c.queued_requests
                    .iter()
                    .flatten()
                    .map(|a| a.len())
                    .sum::<usize>()) as u64
                + std::mem::size_of::<crate::client::Client>() as u64
        })
        .sum();
    let p = &core.persist;
    let aof = (p.commands.capacity()
        + p.dirty.bytes_len()
        + p.held.iter().map(|(_, _, b)| b.len()).sum::<usize>()) as u64;
    let lua = core.scripts.cache_bytes as u64;
    let keys = core.db.len() as u64;
    let table_main = keys * TABLE_BYTES_PER_KEY;
    let table_expires = core.db.volatile_len() as u64 * EXPIRES_BYTES_PER_KEY;
    let overhead = startup + backlog + clients + aof + lua + table_main + table_expires;
    let net = total.saturating_sub(startup);
    let dataset = total.saturating_sub(overhead);
    let pct = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            part as f64 * 100.0 / whole as f64
        }
    };
    Overhead {
        peak,
        total,
        startup,
        backlog,
        clients,
        aof,
        lua,
        table_main,
        table_expires,
        overhead,
        keys,
        bytes_per_key: net.checked_div(keys).unwrap_or(0),
        dataset,
        dataset_pct: pct(dataset, net),
        peak_pct: pct(total, peak),
        rss: core.process.rss_bytes,
    }
}

fn memory_stats(core: &mut Core, call: &mut Call) {
    let o = overhead(core);
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let ints: [(&str, u64); 10] = [
        ("peak.allocated", o.peak),
        ("total.allocated", o.total),
        ("startup.allocated", o.startup),
        ("replication.backlog", o.backlog),
        ("clients.slaves", 0),
        ("clients.normal", o.clients),
        ("cluster.links", 0),
        ("aof.buffer", o.aof),
        ("lua.caches", o.lua),
        ("functions.caches", 0),
    ];
    let has_db = o.keys > 0;
    call.out.map_len(27 + usize::from(has_db));
    for (name, v) in ints {
        call.out.bulk(name.as_bytes());
        call.out.integer(v as i64);
    }
    if has_db {
        call.out.bulk(b"db.0");
        call.out.map_len(3);
        call.out.bulk(b"overhead.hashtable.main");
        call.out.integer(o.table_main as i64);
        call.out.bulk(b"overhead.hashtable.expires");
        call.out.integer(o.table_expires as i64);
        call.out.bulk(b"overhead.hashtable.slot-to-keys");
        call.out.integer(0);
    }
    for (name, v) in [
        ("overhead.total", o.overhead),
        ("keys.count", o.keys),
        ("keys.bytes-per-key", o.bytes_per_key),
        ("dataset.bytes", o.dataset),
    ] {
        call.out.bulk(name.as_bytes());
        call.out.integer(v as i64);
    }
    call.out.bulk(b"dataset.percentage");
    call.out.double(o.dataset_pct);
    call.out.bulk(b"peak.percentage");
    call.out.double(o.peak_pct);
    // The driver's allocator reports allocated bytes and the resident set, no "active"
    // figure: active is given as allocated, so allocator fragmentation shows as none and the
    // whole difference to the resident set as the allocator's.
    for (name, v) in [
        ("allocator.allocated", o.total),
        ("allocator.active", o.total),
        ("allocator.resident", o.rss),
    ] {
        call.out.bulk(name.as_bytes());
        call.out.integer(v as i64);
    }
    let rss_extra = o.rss.saturating_sub(o.total);
    for (rname, bname, num, den, b) in [
        (
            "allocator-fragmentation.ratio",
            "allocator-fragmentation.bytes",
            o.total,
            o.total,
            0,
        ),
        (
            "allocator-rss.ratio",
            "allocator-rss.bytes",
            o.rss,
            o.total,
            rss_extra,
        ),
        ("rss-overhead.ratio", "rss-overhead.bytes", o.rss, o.rss, 0),
        (
            "fragmentation",
            "fragmentation.bytes",
            o.rss,
            o.total,
            rss_extra,
        ),
    ] {
        call.out.bulk(rname.as_bytes());
        call.out.double(ratio(num, den));
        call.out.bulk(bname.as_bytes());
        call.out.integer(b as i64);
    }
}

/// A plain-words report on the figures MEMORY STATS gives, naming what to look at.
fn memory_doctor(core: &mut Core, call: &mut Call) {
    let o = overhead(core);
    let mut t = String::new();
    let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
    if o.total < 5 * 1024 * 1024 {
        t.push_str("This node holds less than 5 MB: nothing to report.\n");
    } else {
        let mut issues = 0;
        if o.peak > o.total.saturating_mul(3) / 2 {
            issues += 1;
            let _ = writeln!(
                t,
                "* The peak was {:.1} MB, more than 1.5 times the {:.1} MB held now: a load came and went; the allocator may keep the difference as resident memory.",
                mb(o.peak),
                mb(o.total)
            );
        }
        if o.rss > o.total.saturating_mul(7) / 5 {
            issues += 1;
            let _ = writeln!(
                t,
                "* The resident set ({:.1} MB) is {:.2} times the bytes allocated: fragmentation, or memory freed but not returned to the system.",
                mb(o.rss),
                o.rss as f64 / o.total.max(1) as f64
            );
        }
        if o.clients > o.total / 4 {
            issues += 1;
            let _ = writeln!(
                t,
                "* Client buffers hold {:.1} MB: slow readers (subscribers, large replies) or large pipelines.",
                mb(o.clients)
            );
        }
        if o.backlog > o.total / 4 {
            issues += 1;
            let _ = writeln!(
                t,
                "* {:.1} MB wait for peers to acknowledge them: a peer is slow or unreachable.",
                mb(o.backlog)
            );
        }
        if issues == 0 {
            let _ = writeln!(
                t,
                "No memory problem found: {:.1} MB allocated, {:.1} MB of them data in {} keys.",
                mb(o.total),
                mb(o.dataset),
                o.keys
            );
        }
    }
    call.out.verbatim(b"txt", t.as_bytes());
}

fn memory_usage(core: &mut Core, call: &mut Call) {
    let mut i = 3;
    while i < call.argc() {
        if is(call.arg(i), "samples") && i + 1 < call.argc() {
            match crate::args::parse_i64(call.arg(i + 1)) {
                None => return call.error(crate::args::NOT_INTEGER),
                Some(n) if n < 0 => return call.syntax_error(),
                Some(_) => {}
            }
            i += 2;
        } else {
            return call.syntax_error();
        }
    }
    match core.db.get_live(call.arg(2), call.now_ms, |_| {}) {
        Some(e) => call.out.integer(e.memory_usage() as i64),
        None => call.out.null(),
    }
}

fn memory_help(_core: &mut Core, call: &mut Call) {
    const LINES: &[&str] = &[
        "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "DOCTOR",
        "    Return a report on memory problems, in plain words.",
        "STATS",
        "    Return the node's memory figures: allocated, peak, overheads, dataset.",
        "USAGE <key> [SAMPLES <count>]",
        "    Return the bytes <key> and its value use (every element is counted;",
        "    SAMPLES is accepted for compatibility).",
        "HELP",
        "    Print this help.",
    ];
    call.help(LINES);
}

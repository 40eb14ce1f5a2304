//! ROLE and WAIT, answered for what a Lattice node is: a primary that accepts writes and
//! replicates them to its peers without coordination (docs/SEMANTICS.md, "ROLE and WAIT").
//!
//! ROLE says `master` on every node, because every node takes writes; its peers are primaries
//! too, not replicas of it, so none is listed as one. The offset is the count of writes this
//! node has stamped, the figure its peers acknowledge.
//!
//! WAIT n timeout waits until at least `n` peers have reported merging every write this node
//! had accepted when WAIT ran (its own writes, not only the caller's: Redis's offset is the
//! whole stream's too), or until the timeout; it answers how many peers have them. That is
//! all a coordination-free store can promise: the writes reached `n` other replicas' memory.
//! It does not make them durable there, nor make them win over a concurrent write elsewhere.
//! A standalone node has no peer and never will, so it answers 0 at once.
//!
//! REPLICAOF (and its old name SLAVEOF) and FAILOVER belong to Redis's primary/replica
//! replication, which Lattice does not have: a node cannot become a read-only copy of
//! another server, and has no replicas to hand its role to. `REPLICAOF NO ONE` is true
//! already and answers OK as Redis does on a primary; the other forms answer an error that
//! says so. On a clustered node they answer Redis Cluster's refusals.

use crate::args::{is, parse_i64};
use crate::blocking::TimeoutReply;
use crate::client::ConnId;
use crate::command::{spec, Call};
use crate::ctx::{CommandSpec, Core};
pub use crate::ops::Wait;

pub const COMMANDS: &[CommandSpec] = &[
    replicaof_spec(
        "replicaof",
        "5.0.0",
        "Configures a server as replica of another, or promotes it to a master.",
    ),
    replicaof_spec(
        "slaveof",
        "1.0.0",
        "Sets a Redis server as a replica of another, or promotes it to being a master.",
    ),
    spec(
        "failover",
        -1,
        &["admin", "noscript", "stale"],
        (0, 0, 0),
        "server",
        "6.2.0",
        "Starts a coordinated failover from a server to one of its replicas.",
        failover,
    ),
    spec(
        "role",
        1,
        &["noscript", "loading", "stale", "fast"],
        (0, 0, 0),
        "server",
        "2.8.12",
        "Returns the replication role.",
        role,
    ),
    spec(
        "wait",
        3,
        &["noscript"],
        (0, 0, 0),
        "generic",
        "3.0.0",
        "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed.",
        wait,
    ),
];

fn role(core: &mut Core, call: &mut Call) {
    core.settle_captures();
    let offset = core.repl.as_ref().map_or(0, |r| r.own_writes());
    call.out.array_len(3);
    call.out.bulk(b"master");
    call.out.integer(offset as i64);
    call.out.array_len(0);
}

fn wait(core: &mut Core, call: &mut Call) {
    let Some(wanted) = parse_i64(call.arg(1)) else {
        return call.error(crate::args::NOT_INTEGER);
    };
    let timeout_ms = match parse_i64(call.arg(2)) {
        None => return call.error("ERR timeout is not an integer or out of range"),
        Some(t) if t < 0 => return call.error("ERR timeout is negative"),
        Some(t) => t as u64,
    };
    // Every write so far gets its stamp, so the count below covers them all.
    core.settle_captures();
    let Some(r) = core.repl.as_ref() else {
        return call.out.integer(0);
    };
    let writes = r.own_writes();
    let have = r.peers_having(writes) as i64;
    if have >= wanted || call.in_exec {
        return call.out.integer(have);
    }
    let deadline = (timeout_ms > 0).then(|| call.now_ms.saturating_add(timeout_ms));
    core.block(call, &[], deadline, TimeoutReply::Integer(have));
    core.waits.insert(
        call.conn,
        Wait {
            writes,
            peers: wanted as u64,
        },
    );
}

impl Core {
    /// After peers reported what they merged: WAITs that have their count are answered, the
    /// others' timeout reply is brought up to date. Returns whether any client was released.
    pub(crate) fn serve_waits(&mut self) -> bool {
        let Some(r) = self.repl.as_ref() else {
            return false;
        };
        let mut done: Vec<(ConnId, i64)> = Vec::new();
        let mut counts: Vec<(ConnId, i64)> = Vec::new();
        for (conn, w) in &self.waits {
            let have = r.peers_having(w.writes) as i64;
            if have as u64 >= w.peers {
                done.push((*conn, have));
            } else {
                counts.push((*conn, have));
            }
        }
        for (conn, have) in counts {
            if let Some(b) = self.clients.get_mut(&conn).and_then(|c| c.blocked.as_mut()) {
                b.on_timeout = TimeoutReply::Integer(have);
            }
        }
        let released = !done.is_empty();
        for (conn, have) in done {
            if self.unpark(conn).is_some() {
                self.write_to(conn, |w| w.integer(have));
                self.released.push(conn);
            }
        }
        released
    }

    pub(crate) fn check_wait_invariants(&self) {
        for conn in self.waits.keys() {
            assert!(
                self.clients.get(conn).is_some_and(|c| c.blocked.is_some()),
                "a WAIT for a client that is not parked"
            );
        }
    }
}

/// REPLICAOF and its old name share everything but their name, version and summary.
const fn replicaof_spec(
    name: &'static str,
    since: &'static str,
    summary: &'static str,
) -> CommandSpec {
    spec(
        name,
        3,
        &["admin", "noscript", "stale", "no-async-loading"],
        (0, 0, 0),
        "server",
        since,
        summary,
        replicaof,
    )
}

/// REPLICAOF host port | NO ONE, with Redis's argument checks and replies.
fn replicaof(core: &mut Core, call: &mut Call) {
    let name = if is(call.arg(0), "slaveof") {
        "SLAVEOF"
    } else {
        "REPLICAOF"
    };
    if core.repl.is_some() {
        return call.error(&format!("ERR {name} not allowed in cluster mode."));
    }
    if is(call.arg(1), "no") && is(call.arg(2), "one") {
        // Already a primary: nothing to stop, as on a Redis primary.
        return call.ok();
    }
    if !matches!(parse_i64(call.arg(2)), Some(0..=65535)) {
        return call.error("ERR Invalid master port");
    }
    call.error(&format!(
        "ERR {name} is not supported: a Lattice node replicates as a peer of other Lattice nodes (--seeds, --join), never as a read-only copy"
    ));
}

/// FAILOVER [TO host port [FORCE]] [ABORT] [TIMEOUT ms]: Redis's parsing, then Redis's answer
/// for a primary without replicas, which is what every Lattice node is.
fn failover(core: &mut Core, call: &mut Call) {
    if core.repl.is_some() {
        return call.error("ERR FAILOVER not allowed in cluster mode.");
    }
    if call.argc() == 2 && is(call.arg(1), "abort") {
        return call.error("ERR No failover in progress.");
    }
    let (mut timeout_ms, mut to, mut force) = (0i64, false, false);
    let mut j = 1;
    while j < call.argc() {
        let arg = call.arg(j);
        if is(arg, "timeout") && j + 1 < call.argc() && timeout_ms <= 0 {
            let Some(t) = parse_i64(call.arg(j + 1)) else {
                return call.error(crate::args::NOT_INTEGER);
            };
            if t <= 0 {
                return call.error("ERR FAILOVER timeout must be greater than 0");
            }
            timeout_ms = t;
            j += 2;
        } else if is(arg, "to") && j + 2 < call.argc() && !to {
            if parse_i64(call.arg(j + 2)).is_none() {
                return call.error(crate::args::NOT_INTEGER);
            }
            to = true;
            j += 3;
        } else if is(arg, "force") && !force {
            force = true;
            j += 1;
        } else {
            return call.syntax_error();
        }
    }
    call.error("ERR FAILOVER requires connected replicas.");
}

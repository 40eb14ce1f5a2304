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

use crate::args::parse_i64;
use crate::blocking::TimeoutReply;
use crate::client::ConnId;
use crate::command::{spec, Call};
use crate::ctx::{CommandSpec, Core};
pub use crate::ops::Wait;

pub const COMMANDS: &[CommandSpec] = &[
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

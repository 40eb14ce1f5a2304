//! SELECT, MOVE and SWAPDB on a node with one database (ARCHITECTURE §4).
//!
//! A Lattice node has exactly one keyspace, as Redis Cluster does, because replication's
//! semantics (docs/SEMANTICS.md) are defined for one. These commands answer exactly what
//! redis-server 7.0 answers when started with `databases 1`, so a client that probes them
//! learns the truth: database 0 exists and nothing else does. On a clustered node MOVE and
//! SWAPDB answer Redis Cluster's refusals instead (SELECT keeps the out-of-range answer there,
//! which the simulator's model checks in every mode).

use crate::args::{parse_i64, NOT_INTEGER};
use crate::command::{spec, Call};
use crate::ctx::{CommandSpec, Core};

const KEYSPACE: &str = "keyspace";
const OUT_OF_RANGE: &str = "ERR DB index is out of range";

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "select",
        2,
        &["fast", "loading"],
        (0, 0, 0),
        "connection",
        "1.0.0",
        "Changes the selected database.",
        select,
    ),
    spec(
        "move",
        3,
        &["write", "fast"],
        (1, 1, 1),
        KEYSPACE,
        "1.0.0",
        "Moves a key to another database.",
        move_key,
    ),
    spec(
        "swapdb",
        3,
        &["write", "fast"],
        (0, 0, 0),
        KEYSPACE,
        "4.0.0",
        "Swaps two Redis databases.",
        swapdb,
    ),
];

/// Redis reads database numbers as C ints, with its own message for a number wider than one.
fn c_int(arg: &[u8]) -> Result<i64, &'static str> {
    match parse_i64(arg) {
        None => Err(NOT_INTEGER),
        Some(n) if i32::try_from(n).is_err() => Err(NOT_C_INT),
        Some(n) => Ok(n),
    }
}

const NOT_C_INT: &str = "ERR value is out of range, value must between -2147483648 and 2147483647";

fn select(_core: &mut Core, call: &mut Call) {
    match c_int(call.arg(1)) {
        Err(e) => call.error(e),
        Ok(0) => call.ok(),
        Ok(_) => call.error(OUT_OF_RANGE),
    }
}

/// MOVE key db: Redis checks the target database before it looks at the key, so with one
/// database the key never matters: 0 is the source itself, anything else does not exist.
fn move_key(core: &mut Core, call: &mut Call) {
    if core.repl.is_some() {
        return call.error("ERR MOVE is not allowed in cluster mode");
    }
    match c_int(call.arg(2)) {
        Err(e) => call.error(e),
        Ok(0) => call.error("ERR source and destination objects are the same"),
        Ok(_) => call.error(OUT_OF_RANGE),
    }
}

/// SWAPDB a b: swapping database 0 with itself is Redis's no-op success; any other index is
/// out of range.
fn swapdb(core: &mut Core, call: &mut Call) {
    if core.repl.is_some() {
        return call.error("ERR SWAPDB is not allowed in cluster mode");
    }
    let Ok(first) = c_int(call.arg(1)) else {
        return call.error("ERR invalid first DB index");
    };
    let Ok(second) = c_int(call.arg(2)) else {
        return call.error("ERR invalid second DB index");
    };
    if first == 0 && second == 0 {
        call.ok()
    } else {
        call.error(OUT_OF_RANGE)
    }
}

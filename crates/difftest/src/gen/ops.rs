//! The operations family: the parts of SLOWLOG, LATENCY, ROLE, WAIT, MEMORY, OBJECT, sharded
//! pub/sub and CLIENT PAUSE whose replies do not depend on timing or on the process: their
//! errors, empty logs, replies with no subscribers, and nil for missing keys. (What a slow
//! command leaves in the logs, pauses that hold requests and subscriptions are covered by the
//! node's own tests: a second connection or a clock would be needed to compare them.)
//! Also the one-database commands (SELECT, MOVE, SWAPDB, against a redis-server started with
//! `--databases 1`), and REPLICAOF/FAILOVER in the forms that leave a server a primary.

use super::{Cmd, Cmp, Ctx, Family};

pub const FAMILY: Family = Family {
    name: "ops",
    weight: 3,
    gen,
};

fn channel(c: &mut Ctx) -> Vec<u8> {
    match c.below(4) {
        0 => c.key(),
        1 => c.member(),
        _ => c
            .pick(&["ch", "chan1", "{t}ch", "news.*"])
            .as_bytes()
            .to_vec(),
    }
}

fn gen(c: &mut Ctx) -> Cmd {
    match c.below(26) {
        // Fixed: without its count SLOWLOG GET lists what each server logged.
        0 => Cmd::new("SLOWLOG").a("GET").a("0").fixed(),
        1 => Cmd::new("SLOWLOG")
            .a("GET")
            .a(*c.pick(&["-2", "-222", "x", "1.5", ""])),
        2 => Cmd::new("SLOWLOG")
            .a(*c.pick(&["nope", "get", "len"]))
            .a("1")
            .a("2")
            .fixed(),
        3 => Cmd::new("LATENCY").a("LATEST"),
        4 => Cmd::new("LATENCY")
            .a("HISTORY")
            .a(*c.pick(&["command", "blabla", "fast-command"])),
        5 => Cmd::new("LATENCY").a("RESET").all(c.members(0, 3)),
        6 => Cmd::new("ROLE"),
        7 => Cmd::new("WAIT").a("0").a(*c.pick(&["0", "1", "10"])),
        8 => Cmd::new("WAIT")
            .a(*c.pick(&["x", "1", "0"]))
            .a(*c.pick(&["-1", "y", "1.5"])),
        // Fixed: damaged, MEMORY USAGE would be compared exactly (each server's own sizes).
        9 => Cmd::new("MEMORY")
            .a("USAGE")
            .a(c.key())
            .cmp(Cmp::NilOrNot)
            .fixed(),
        10 => Cmd::new("MEMORY")
            .a("USAGE")
            .a(c.key())
            .a(*c.pick(&["SAMPLES", "samples", "nope"]))
            .a(*c.pick(&["-1", "x", "0", "5"]))
            .cmp(Cmp::NilOrNot)
            .fixed(),
        11 => Cmd::new("OBJECT").a("FREQ").a(c.key()),
        12 => Cmd::new("OBJECT")
            .a("IDLETIME")
            .a(c.key())
            .cmp(Cmp::Tolerance(2)),
        13 => Cmd::new("SPUBLISH").a(channel(c)).a(c.value()),
        14 => Cmd::new("PUBSUB")
            .a("SHARDCHANNELS")
            .all((0..c.below(2)).map(|_| channel(c)).collect::<Vec<_>>()),
        15 => {
            let n = c.below(4);
            let names: Vec<Vec<u8>> = (0..n).map(|_| channel(c)).collect();
            Cmd::new("PUBSUB").a("SHARDNUMSUB").all(names)
        }
        // At most a 10 ms pause when valid: it holds the next writes briefly on both sides.
        16 => Cmd::new("CLIENT")
            .a("PAUSE")
            .a(*c.pick(&["-1", "x", "10"]))
            .a(*c.pick(&["NONE", "read", "WRITE"])),
        17 => Cmd::new("CLIENT").a("UNPAUSE"),
        // Fixed: without the extra argument the figures are each process's own.
        18 => Cmd::new("MEMORY")
            .a(*c.pick(&["STATS", "DOCTOR"]))
            .a("extra")
            .fixed(),
        19 => Cmd::new("SELECT").a(*c.pick(&["0", "1", "-1", "x", "99999999999", ""])),
        20 => Cmd::new("MOVE")
            .a(c.key())
            .a(*c.pick(&["0", "1", "-1", "x", "99999999999"])),
        21 => Cmd::new("SWAPDB")
            .a(*c.pick(&["0", "1", "x", "-1", "99999999999"]))
            .a(*c.pick(&["0", "2", "y"])),
        // Never a valid host and port (and never damaged into one): that would turn
        // redis-server into a replica.
        22 => Cmd::new("REPLICAOF")
            .a(*c.pick(&["no", "NO", "127.0.0.1"]))
            .a(*c.pick(&["one", "ONE", "x", "70000", "-1"]))
            .fixed(),
        23 => Cmd::new("FAILOVER")
            .all(
                c.pick(&[
                    &[][..],
                    &["ABORT"],
                    &["TIMEOUT", "0"],
                    &["TIMEOUT", "x"],
                    &["TO", "h", "1", "FORCE"],
                    &["FORCE", "FORCE"],
                    &["bogus"],
                ])
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
            )
            .fixed(),
        // Fixed: a valid LOLWUT draws each server's own picture.
        24 => Cmd::new("LOLWUT")
            .a("VERSION")
            .a(*c.pick(&["x", "1.5", ""]))
            .fixed(),
        _ => Cmd::new("PUBSUB").a("SHARDCHANNELS").a("a").a("b"),
    }
}

//! The server family: DBSIZE, TIME, INFO, FLUSHDB/FLUSHALL (rare), COMMAND, CONFIG.

use super::{Cmd, Gen};

pub fn gen(g: &mut Gen) -> Cmd {
    match g.rng.weighted(&[
        10, // dbsize
        3,  // time
        6,  // info
        1,  // flush (only when disruptive commands are allowed)
        2,  // command
        3,  // config
    ]) {
        0 => Cmd::new("DBSIZE"),
        1 => Cmd::new("TIME"),
        2 => {
            let c = Cmd::new("INFO");
            match g.range(0, 5) {
                0 => c,
                1 | 2 => c.a("keyspace"),
                3 => c.a(g.pick(&["server", "clients", "stats", "memory", "Keyspace"])),
                4 => c.a(g.pick(&["all", "everything", "default"])),
                _ => c.a("server").a("keyspace"),
            }
        }
        3 if g.disruptive => {
            let c = Cmd::new(g.pick(&["FLUSHDB", "FLUSHALL"]));
            match g.range(0, 3) {
                0 => c.a("ASYNC"),
                1 => c.a("SYNC"),
                2 => c.a("NOW"),
                _ => c,
            }
        }
        3 => Cmd::new("DBSIZE"),
        4 => match g.range(0, 3) {
            0 => Cmd::new("COMMAND").a("COUNT"),
            1 => Cmd::new("COMMAND")
                .a("INFO")
                .a(g.pick(&["get", "SET", "ttl"])),
            2 => Cmd::new("COMMAND").a("DOCS").a("get"),
            _ => Cmd::new("COMMAND").a("HELP"),
        },
        _ => match g.range(0, 4) {
            0 | 1 => Cmd::new("CONFIG")
                .a("GET")
                .a(g.pick(&["hz", "maxmemory-policy", "HZ"])),
            2 => Cmd::new("CONFIG").a("SET").a("hz").a(g.range(1, 100)),
            3 => Cmd::new("CONFIG").a("RESETSTAT"),
            _ => Cmd::new("CONFIG").a("HELP"),
        },
    }
}

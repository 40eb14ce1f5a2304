//! The sets family: every set command on the shared general keys, members from a small pool
//! (integers and text, so both set encodings appear). A SPOP that may take part of a set is
//! only sent outside transactions and when its reply will be seen: the model learns from the
//! reply which members went.

use super::{Cmd, Gen};

const MEMBERS: &[&str] = &["1", "2", "-3", "100", "a", "b", "hello", ""];

fn keys(g: &mut Gen, mut c: Cmd, max: i64) -> Cmd {
    for _ in 0..g.range(1, max) {
        c = c.a(g.general_key());
    }
    c
}

fn members(g: &mut Gen, mut c: Cmd) -> Cmd {
    for _ in 0..g.range(1, 3) {
        c = c.a(g.pick(MEMBERS));
    }
    c
}

fn sintercard(g: &mut Gen) -> Cmd {
    let n = g.range(1, 3);
    let mut c = Cmd::new("SINTERCARD").a(if g.pct(5) {
        g.pick(&["0", "-1", "x", "9"]).to_string()
    } else {
        n.to_string()
    });
    for _ in 0..n {
        c = c.a(g.general_key());
    }
    if g.pct(40) {
        c = c.a(g.pick(&["LIMIT", "limit", "LIMIT", "OFFSET"]));
        c = c.a(g.pick(&["0", "1", "2", "-1", "x"]));
    }
    c
}

fn spop(g: &mut Gen, k: &'static str) -> Cmd {
    let c = Cmd::new("SPOP").a(k);
    if !g.replies_on || g.in_multi {
        // Every member or none: the model needs no reply (and, queued, the commands after it
        // in the transaction see the set as the node leaves it).
        return c.a(g.pick(&["100", "0", "-1"]));
    }
    match g.rng.weighted(&[4, 6, 1, 1]) {
        0 => c,
        1 => c.a(g.range(0, 4)),
        2 => c.a(g.pick(&["-1", "x", "100"])),
        _ => c.a("1").a("2"),
    }
}

pub fn gen(g: &mut Gen) -> Cmd {
    let k = g.general_key();
    match g.rng.weighted(&[10, 5, 5, 3, 4, 2, 2, 3, 2, 2, 2, 3, 3]) {
        0 | 1 => {
            let name = if g.pct(65) { "SADD" } else { "SREM" };
            members(g, Cmd::new(name).a(k))
        }
        2 => Cmd::new("SISMEMBER").a(k).a(g.pick(MEMBERS)),
        3 => Cmd::new("SCARD").a(k),
        4 => Cmd::new("SMEMBERS").a(k),
        5 => members(g, Cmd::new("SMISMEMBER").a(k)),
        6 => Cmd::new("SMOVE").a(k).a(g.general_key()).a(g.pick(MEMBERS)),
        7 => {
            let name = g.pick(&["SINTER", "SUNION", "SDIFF"]);
            keys(g, Cmd::new(name), 3)
        }
        8 => {
            let name = g.pick(&["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]);
            keys(g, Cmd::new(name).a(k), 3)
        }
        9 => sintercard(g),
        10 => Cmd::new("SINTERCARD").a("1"), // no key: an arity error
        11 => {
            let c = Cmd::new("SRANDMEMBER").a(k);
            match g.rng.weighted(&[2, 6, 1]) {
                0 => c,
                1 => c.a(g.range(-5, 5)),
                _ if g.pct(50) => c.a(g.pick(&["x", "1.5"])),
                _ => c.a("1").a("2"), // a syntax error
            }
        }
        _ => spop(g, k),
    }
}

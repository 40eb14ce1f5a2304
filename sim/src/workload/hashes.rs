//! The hashes family: every hash command on the shared general keys, fields from a small pool.
//! HINCRBYFLOAT works on its own field `fl`, which only ever holds values the model computes
//! exactly (see `model::float`): the other writers never pick it, except HSETNX with a short
//! decimal or a non-number.

use super::{Cmd, Gen};

const FIELDS: &[&str] = &["f", "g", "h", "n", "name", ""];
const VALUES: &[&str] = &["1", "-5", "x", "", "9223372036854775806", "hello", "007"];
const FLOAT_FIELD: &str = "fl";
const FLOAT_INCRS: &[&str] = &[
    "1.5", "-0.25", "3", "100", "0.125", "5.0e1", "-7", "abc", "inf",
];

/// Field/value pairs for HSET and HMSET, sometimes one field short (an arity error).
fn pairs(g: &mut Gen, mut c: Cmd) -> Cmd {
    for _ in 0..g.range(1, 3) {
        c = c.a(g.pick(FIELDS)).a(g.pick(VALUES));
    }
    if g.pct(3) {
        c = c.a(g.pick(FIELDS));
    }
    c
}

/// Fields to read: the pool, now and then the float field.
fn read_field(g: &mut Gen) -> &'static str {
    if g.pct(10) {
        FLOAT_FIELD
    } else {
        g.pick(FIELDS)
    }
}

pub fn gen(g: &mut Gen) -> Cmd {
    let k = g.general_key();
    match g
        .rng
        .weighted(&[10, 6, 4, 3, 4, 5, 2, 2, 3, 2, 2, 2, 2, 3, 3])
    {
        0 => pairs(g, Cmd::new("HSET").a(k)),
        1 => Cmd::new("HGET").a(k).a(read_field(g)),
        2 => {
            let mut c = Cmd::new("HDEL").a(k);
            for _ in 0..g.range(1, 3) {
                c = c.a(read_field(g));
            }
            c
        }
        3 => Cmd::new("HLEN").a(k),
        4 => Cmd::new("HGETALL").a(k),
        5 => {
            let by = g.pick(&["1", "-3", "100", "9223372036854775807", "abc", "0"]);
            Cmd::new("HINCRBY").a(k).a(g.pick(FIELDS)).a(by)
        }
        6 => {
            if g.pct(20) {
                let v = g.pick(&["2.5", "x"]);
                Cmd::new("HSETNX").a(k).a(FLOAT_FIELD).a(v)
            } else {
                Cmd::new("HSETNX").a(k).a(g.pick(FIELDS)).a(g.pick(VALUES))
            }
        }
        7 => pairs(g, Cmd::new("HMSET").a(k)),
        8 => {
            let mut c = Cmd::new("HMGET").a(k);
            for _ in 0..g.range(1, 3) {
                c = c.a(read_field(g));
            }
            c
        }
        9 => Cmd::new("HSTRLEN").a(k).a(read_field(g)),
        10 => Cmd::new("HEXISTS").a(k).a(read_field(g)),
        11 => Cmd::new("HKEYS").a(k),
        12 => Cmd::new("HVALS").a(k),
        13 => Cmd::new("HINCRBYFLOAT")
            .a(k)
            .a(FLOAT_FIELD)
            .a(g.pick(FLOAT_INCRS)),
        _ => {
            let mut c = Cmd::new("HRANDFIELD").a(k);
            if g.pct(75) {
                c = c.a(g.pick(&["1", "2", "5", "0", "-1", "-4", "x"]));
                if g.pct(50) {
                    c = c.a(g.pick(&["WITHVALUES", "withvalues", "WITHSCORES"]));
                }
            }
            c
        }
    }
}

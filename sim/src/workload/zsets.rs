//! The sorted-sets family: every deterministic sorted-set command, plus ZRANDMEMBER.
//!
//! Most commands use the shared general keys (so sorted sets meet the other types and
//! WRONGTYPE). Lex ranges are only defined over members with equal scores, so the lex
//! commands work on their own keys `lx0`/`lx1`, which only ever receive score 0 (ZADD without
//! INCR/GT/LT) and are never a destination; they are read and popped by the other commands
//! too. SUM aggregates take at most two sources: with more, the result would depend on the
//! order Redis visits them.

use super::{Cmd, Gen};

const LEX_KEYS: &[&str] = &["lx0", "lx1"];
const MEMBERS: &[&str] = &["a", "b", "c", "d", "e", "1", "2", "hello", ""];
const LEX_MEMBERS: &[&str] = &["a", "b", "c", "aa", "ab", "b1", "z", ""];
const SCORES: &[&str] = &[
    "0", "1", "2", "3", "-1", "5", "10", "2.5", "0.5", "-1.5", "0.1", "1e2", "+3",
];
const ODD_SCORES: &[&str] = &["inf", "-inf", "+inf", "abc", "nan", "", "1e400", "1.5.5"];
const FLAGS: &[&str] = &["NX", "XX", "GT", "LT", "CH", "INCR", "nx", "ch"];

fn score(g: &mut Gen) -> &'static str {
    if g.pct(8) {
        g.pick(ODD_SCORES)
    } else {
        g.pick(SCORES)
    }
}

fn member(g: &mut Gen) -> &'static str {
    g.pick(MEMBERS)
}

fn lex_key(g: &mut Gen) -> &'static str {
    g.pick(LEX_KEYS)
}

/// A key to read or remove from: usually general, sometimes a lex key.
fn any_zkey(g: &mut Gen) -> &'static str {
    if g.pct(20) {
        lex_key(g)
    } else {
        g.general_key()
    }
}

/// A rank range bound.
fn rank(g: &mut Gen) -> String {
    match g.rng.weighted(&[10, 6, 1, 1]) {
        0 => g.range(0, 5).to_string(),
        1 => g.range(-5, -1).to_string(),
        2 => g.pick(&["100", "-100"]).to_string(),
        _ => g.pick(&["abc", "1.5"]).to_string(),
    }
}

/// A score range bound.
fn score_bound(g: &mut Gen) -> String {
    match g.rng.weighted(&[10, 5, 4, 1]) {
        0 => g.range(-2, 6).to_string(),
        1 => format!("({}", g.range(-2, 6)),
        2 => g
            .pick(&["-inf", "+inf", "(-inf", "(+inf", "2.5", "(0.1"])
            .to_string(),
        _ => g.pick(&["abc", "(x", "1e"]).to_string(),
    }
}

fn lex_bound(g: &mut Gen) -> String {
    match g.rng.weighted(&[4, 8, 1]) {
        0 => g.pick(&["-", "+"]).to_string(),
        1 => {
            let m = g.pick(LEX_MEMBERS);
            format!("{}{m}", g.pick(&["[", "("]))
        }
        _ => g.pick(&["a", "", "*"]).to_string(),
    }
}

fn limit(g: &mut Gen, c: Cmd) -> Cmd {
    let off = if g.pct(10) { -1 } else { g.range(0, 3) };
    let cnt = g.range(-1, 3);
    c.a("LIMIT").a(off).a(cnt)
}

fn zadd(g: &mut Gen) -> Cmd {
    if g.pct(25) {
        // Lex keys: score 0 only, so their lex ranges stay defined.
        let mut c = Cmd::new("ZADD").a(lex_key(g));
        if g.pct(20) {
            c = c.a(g.pick(&["NX", "XX", "CH"]));
        }
        for _ in 0..g.range(1, 3) {
            c = c.a("0").a(g.pick(LEX_MEMBERS));
        }
        return c;
    }
    let mut c = Cmd::new("ZADD").a(g.general_key());
    let mut incr = false;
    for _ in 0..g.rng.weighted(&[6, 3, 1]) {
        let f = g.pick(FLAGS);
        incr |= f.eq_ignore_ascii_case("incr");
        c = c.a(f);
    }
    let pairs = if incr && g.pct(90) { 1 } else { g.range(1, 3) };
    for _ in 0..pairs {
        c = c.a(score(g)).a(member(g));
    }
    if g.pct(2) {
        c = c.a("1"); // a score without a member
    }
    c
}

/// Sources for a set operation: a count and keys (general or lex).
fn sources(g: &mut Gen, c: Cmd, max: i64) -> Cmd {
    let n = g.range(1, max);
    let mut c = c.a(if g.pct(3) {
        g.pick(&["0", "20", "x"]).to_string()
    } else {
        n.to_string()
    });
    for _ in 0..n {
        c = c.a(any_zkey(g));
    }
    c
}

fn setop(g: &mut Gen, name: &'static str, store: bool) -> Cmd {
    let diff = name.starts_with("ZDIFF");
    let mut c = Cmd::new(name);
    if store {
        c = c.a(g.general_key());
    }
    // SUM over more than two sources is order-dependent: three only with MIN or MAX.
    let agg = if diff || g.pct(50) {
        None
    } else {
        Some(g.pick(&["SUM", "MIN", "MAX", "min", "max", "avg"]))
    };
    let max = if agg.is_some_and(|a| !a.eq_ignore_ascii_case("sum")) {
        3
    } else {
        2
    };
    let n_pos = c.args.len();
    c = sources(g, c, max);
    let n: i64 = std::str::from_utf8(&c.args[n_pos])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if !diff && g.pct(30) && (1..=3).contains(&n) {
        c = c.a("WEIGHTS");
        for _ in 0..n {
            c = c.a(if g.pct(3) {
                "x"
            } else {
                g.pick(&["1", "2", "0.5", "3"])
            });
        }
    }
    if let Some(a) = agg {
        c = c.a("AGGREGATE").a(a);
    }
    if !store && g.pct(50) {
        c = c.a("WITHSCORES");
    }
    if diff && g.pct(3) {
        c = c.a("WEIGHTS").a("1"); // not accepted by ZDIFF
    }
    c
}

fn zrange(g: &mut Gen) -> Cmd {
    match g.rng.weighted(&[5, 5, 4]) {
        0 => {
            let mut c = Cmd::new("ZRANGE").a(any_zkey(g)).a(rank(g)).a(rank(g));
            if g.pct(30) {
                c = c.a("REV");
            }
            if g.pct(5) {
                c = limit(g, c); // refused with a rank range (unless the count is -1)
            }
            if g.pct(40) {
                c = c.a("WITHSCORES");
            }
            c
        }
        1 => {
            let mut c = Cmd::new("ZRANGE")
                .a(any_zkey(g))
                .a(score_bound(g))
                .a(score_bound(g));
            c = c.a(g.pick(&["BYSCORE", "byscore"]));
            if g.pct(30) {
                c = c.a("REV");
            }
            if g.pct(30) {
                c = limit(g, c);
            }
            if g.pct(40) {
                c = c.a("WITHSCORES");
            }
            c
        }
        _ => {
            let mut c = Cmd::new("ZRANGE")
                .a(lex_key(g))
                .a(lex_bound(g))
                .a(lex_bound(g))
                .a("BYLEX");
            if g.pct(30) {
                c = c.a("REV");
            }
            if g.pct(30) {
                c = limit(g, c);
            }
            if g.pct(5) {
                c = c.a("WITHSCORES"); // refused with BYLEX
            }
            c
        }
    }
}

pub fn gen(g: &mut Gen) -> Cmd {
    match g.rng.weighted(&[
        14, // zadd
        4,  // zincrby
        4,  // zrem
        2,  // zcard
        3,  // zcount / zlexcount
        4,  // zscore / zmscore
        3,  // zrank / zrevrank
        7,  // zrange
        4,  // zrangebyscore / zrevrangebyscore / zrevrange
        3,  // zrangebylex / zrevrangebylex
        2,  // zrangestore
        4,  // zremrangeby*
        4,  // zpopmin / zpopmax
        4,  // z*store
        3,  // zunion / zinter / zdiff
        1,  // zintercard
        2,  // zrandmember
    ]) {
        0 => zadd(g),
        1 => Cmd::new("ZINCRBY")
            .a(g.general_key())
            .a(score(g))
            .a(member(g)),
        2 => {
            let mut c = Cmd::new("ZREM").a(any_zkey(g));
            for _ in 0..g.range(1, 3) {
                c = c.a(if g.pct(50) {
                    member(g)
                } else {
                    g.pick(LEX_MEMBERS)
                });
            }
            c
        }
        3 => Cmd::new("ZCARD").a(any_zkey(g)),
        4 => {
            if g.pct(60) {
                Cmd::new("ZCOUNT")
                    .a(any_zkey(g))
                    .a(score_bound(g))
                    .a(score_bound(g))
            } else {
                Cmd::new("ZLEXCOUNT")
                    .a(lex_key(g))
                    .a(lex_bound(g))
                    .a(lex_bound(g))
            }
        }
        5 => {
            if g.pct(60) {
                Cmd::new("ZSCORE").a(any_zkey(g)).a(member(g))
            } else {
                let mut c = Cmd::new("ZMSCORE").a(any_zkey(g));
                for _ in 0..g.range(1, 3) {
                    c = c.a(member(g));
                }
                c
            }
        }
        6 => Cmd::new(g.pick(&["ZRANK", "ZREVRANK"]))
            .a(any_zkey(g))
            .a(member(g)),
        7 => zrange(g),
        8 => {
            let k = any_zkey(g);
            let mut c = match g.range(0, 2) {
                0 => Cmd::new("ZRANGEBYSCORE")
                    .a(k)
                    .a(score_bound(g))
                    .a(score_bound(g)),
                1 => Cmd::new("ZREVRANGEBYSCORE")
                    .a(k)
                    .a(score_bound(g))
                    .a(score_bound(g)),
                _ => Cmd::new("ZREVRANGE").a(k).a(rank(g)).a(rank(g)),
            };
            if g.pct(40) {
                c = c.a("WITHSCORES");
            }
            if g.pct(25) {
                c = limit(g, c);
            }
            if g.pct(2) {
                c = c.a("REV"); // not an option of the legacy commands
            }
            c
        }
        9 => {
            let name = if g.pct(50) {
                "ZRANGEBYLEX"
            } else {
                "ZREVRANGEBYLEX"
            };
            let mut c = Cmd::new(name).a(lex_key(g)).a(lex_bound(g)).a(lex_bound(g));
            if g.pct(30) {
                c = limit(g, c);
            }
            c
        }
        10 => {
            let dst = g.general_key();
            if g.pct(30) {
                let c = Cmd::new("ZRANGESTORE").a(dst).a(lex_key(g));
                c.a(lex_bound(g)).a(lex_bound(g)).a("BYLEX")
            } else if g.pct(50) {
                let mut c = Cmd::new("ZRANGESTORE").a(dst).a(any_zkey(g));
                c = c.a(score_bound(g)).a(score_bound(g)).a("BYSCORE");
                if g.pct(30) {
                    c = c.a("REV");
                }
                if g.pct(30) {
                    c = limit(g, c);
                }
                c
            } else {
                let c = Cmd::new("ZRANGESTORE")
                    .a(dst)
                    .a(any_zkey(g))
                    .a(rank(g))
                    .a(rank(g));
                if g.pct(5) {
                    c.a("WITHSCORES")
                } else {
                    c
                }
            }
        }
        11 => match g.range(0, 2) {
            0 => Cmd::new("ZREMRANGEBYRANK")
                .a(any_zkey(g))
                .a(rank(g))
                .a(rank(g)),
            1 => Cmd::new("ZREMRANGEBYSCORE")
                .a(any_zkey(g))
                .a(score_bound(g))
                .a(score_bound(g)),
            _ => Cmd::new("ZREMRANGEBYLEX")
                .a(lex_key(g))
                .a(lex_bound(g))
                .a(lex_bound(g)),
        },
        12 if g.pct(30) => {
            // ZMPOP: usually well formed; sometimes a bad count, side or key count.
            let n = g.range(1, 3);
            let numkeys = if g.pct(4) {
                g.pick(&["0", "x"]).to_string()
            } else {
                n.to_string()
            };
            let mut c = Cmd::new("ZMPOP").a(numkeys);
            for _ in 0..n {
                c = c.a(any_zkey(g));
            }
            c = c.a(g.pick(&["MIN", "MAX", "min", "max", "middle"]));
            match g.rng.weighted(&[6, 6, 1, 1]) {
                0 => c,
                1 => c.a("COUNT").a(g.range(1, 4)),
                2 => c.a("COUNT").a(g.pick(&["0", "-1", "abc"])),
                _ => c.a("COUNT").a("1").a("COUNT").a("2"),
            }
        }
        12 => {
            let c = Cmd::new(g.pick(&["ZPOPMIN", "ZPOPMAX"])).a(any_zkey(g));
            match g.rng.weighted(&[6, 6, 1, 1]) {
                0 => c,
                1 => c.a(g.range(0, 3)),
                2 => c.a(g.pick(&["-1", "abc"])),
                _ => c.a("1").a("2"),
            }
        }
        13 => {
            let name = g.pick(&["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"]);
            setop(g, name, true)
        }
        14 => {
            let name = g.pick(&["ZUNION", "ZINTER", "ZDIFF"]);
            setop(g, name, false)
        }
        15 => {
            let mut c = sources(g, Cmd::new("ZINTERCARD"), 3);
            if g.pct(40) {
                c = c.a("LIMIT").a(g.pick(&["0", "1", "2", "-1"]));
            }
            c
        }
        _ => {
            let c = Cmd::new("ZRANDMEMBER").a(any_zkey(g));
            match g.rng.weighted(&[3, 5, 3, 1]) {
                0 => c,
                1 => c.a(g.range(-4, 4)),
                2 => c.a(g.range(-4, 4)).a("WITHSCORES"),
                _ => c.a(g.pick(&["abc", "1"])).a(g.pick(&["x", "WITHSCORES"])),
            }
        }
    }
}

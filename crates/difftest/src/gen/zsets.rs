//! The sorted-sets family.
//!
//! Scores are mostly small integers so ties are common; members with equal scores are ordered
//! by member, so every ordered reply is deterministic and compared exactly.
//!
//! Lex ranges are only defined when all scores are equal: those commands carry a
//! [`Guard::UniformScores`] and are skipped when the sorted set has mixed scores.

use super::hashes::{key_scan, random_pick};
use super::lists::{index, numkeys_and_keys, timeout};
use super::{Cmd, Ctx, Family, Guard, Probe};

pub const FAMILY: Family = Family {
    name: "zsets",
    weight: 12,
    gen,
};

const LEX: Guard = Guard::UniformScores { key: 1 };

/// The sorted set whose members usually all get score 0, for the lex ranges.
const LEX_KEY: &str = "h[e]llo";

/// A key for a lex-range command: usually the one with uniform scores.
fn lex_key(c: &mut Ctx) -> Vec<u8> {
    if c.pct(70) {
        LEX_KEY.as_bytes().to_vec()
    } else {
        key(c)
    }
}

/// Keys the sorted-set commands prefer.
pub const HOME: &[&str] = &["{t}z", "h[e]llo", ""];

fn key(c: &mut Ctx) -> Vec<u8> {
    c.key_in(HOME)
}

/// A score: mostly a small integer, sometimes a decimal, an infinity, an edge or junk.
fn score(c: &mut Ctx) -> Vec<u8> {
    match c.below(40) {
        0..=23 => c.range(-5, 10).to_string().into_bytes(),
        24..=28 => c
            .pick(&["1.5", "-2.25", "0.1", "0.2", "3.0e2", "2.5", "-0", "1e-5"])
            .as_bytes()
            .to_vec(),
        29 | 30 => format!("{}.{}", c.range(-20, 20), c.range(0, 999)).into_bytes(),
        31..=33 => c
            .pick(&["inf", "-inf", "+inf", "INF", "-Infinity"])
            .as_bytes()
            .to_vec(),
        34 | 35 => c
            .pick(&[
                "1.7976931348623157e308",
                "-1e308",
                "4.9e-324",
                "9007199254740993",
                "123456789012345678",
                " 1",
                "0x10",
            ])
            .as_bytes()
            .to_vec(),
        _ => c
            .pick(&["nan", "abc", "", "1e400", "1.5.5", "(1", "--1"])
            .as_bytes()
            .to_vec(),
    }
}

/// A score range bound: inclusive, exclusive `(`, infinities, sometimes malformed.
fn score_bound(c: &mut Ctx) -> Vec<u8> {
    match c.below(30) {
        0..=11 => c.range(-5, 10).to_string().into_bytes(),
        12..=18 => format!("({}", c.range(-5, 10)).into_bytes(),
        19..=24 => c
            .pick(&["-inf", "+inf", "inf", "(-inf", "(+inf", "(inf"])
            .as_bytes()
            .to_vec(),
        25 | 26 => c
            .pick(&["1.5", "(2.5", "-0.5", "(0.1", "3e0"])
            .as_bytes()
            .to_vec(),
        _ => c
            .pick(&["((1", "(", "abc", "nan", "(nan", "", "[1"])
            .as_bytes()
            .to_vec(),
    }
}

/// A lex range bound: `[x`, `(x`, `-`, `+`, sometimes malformed.
fn lex_bound(c: &mut Ctx) -> Vec<u8> {
    match c.below(30) {
        0..=9 => {
            let m = c.member();
            let mut v = vec![b'['];
            v.extend(m);
            v
        }
        10..=17 => {
            let m = c.member();
            let mut v = vec![b'('];
            v.extend(m);
            v
        }
        18..=21 => b"-".to_vec(),
        22..=25 => b"+".to_vec(),
        26 => b"[".to_vec(),
        27 => b"(".to_vec(),
        _ => c.pick(&["a", "", "+a", "-a", "{a"]).as_bytes().to_vec(),
    }
}

/// `LIMIT offset count`.
fn limit(c: &mut Ctx) -> Vec<Vec<u8>> {
    let off = match c.below(10) {
        0..=7 => c.range(0, 4).to_string().into_bytes(),
        8 => b"-1".to_vec(),
        _ => c.not_an_int(),
    };
    let cnt = match c.below(10) {
        0..=6 => c.range(0, 5).to_string().into_bytes(),
        7 | 8 => c.range(-3, -1).to_string().into_bytes(),
        _ => c.not_an_int(),
    };
    vec![b"LIMIT".to_vec(), off, cnt]
}

fn zadd(c: &mut Ctx) -> Cmd {
    let k = if c.pct(25) {
        LEX_KEY.as_bytes().to_vec()
    } else {
        key(c)
    };
    let zero = k == LEX_KEY.as_bytes() && c.pct(85);
    let mut cmd = Cmd::new("ZADD").a(k);
    let mut flags: Vec<&str> = Vec::new();
    for (f, p) in [
        ("NX", 12),
        ("XX", 12),
        ("GT", 10),
        ("LT", 10),
        ("CH", 20),
        ("INCR", 10),
    ] {
        if c.pct(p) {
            flags.push(f);
        }
    }
    if c.pct(2) {
        flags.push("BOGUS");
    }
    c.shuffle(&mut flags);
    for f in flags.iter() {
        cmd = cmd.a(if c.pct(5) {
            f.to_ascii_lowercase()
        } else {
            f.to_string()
        });
    }
    let n = if flags.contains(&"INCR") && c.pct(85) {
        1
    } else if c.pct(2) {
        c.range(100, 150)
    } else {
        c.range(1, 4)
    };
    for _ in 0..n {
        let s = if zero { b"0".to_vec() } else { score(c) };
        cmd = cmd.a(s).a(c.member());
    }
    if c.pct(3) {
        cmd = cmd.a(score(c)); // a score without a member
    }
    cmd
}

/// ZRANGE / ZRANGESTORE after the name (and destination): src start stop [BYSCORE|BYLEX] [REV]
/// [LIMIT] [WITHSCORES].
fn zrange_args(c: &mut Ctx, mut cmd: Cmd, store: bool) -> Cmd {
    let by = c.below(10);
    cmd = cmd.a(if by >= 7 { lex_key(c) } else { key(c) });
    let (a, b) = match by {
        0..=3 => (index(c), index(c)),
        4..=6 => (score_bound(c), score_bound(c)),
        _ => (lex_bound(c), lex_bound(c)),
    };
    cmd = cmd.a(a).a(b);
    let mut opts: Vec<Vec<Vec<u8>>> = Vec::new();
    match by {
        4..=6 => opts.push(vec![b"BYSCORE".to_vec()]),
        7..=9 => opts.push(vec![b"BYLEX".to_vec()]),
        _ => {}
    }
    if c.pct(35) {
        opts.push(vec![b"REV".to_vec()]);
    }
    // LIMIT without BYSCORE/BYLEX is an error: rarely.
    if (by >= 4 && c.pct(35)) || c.pct(3) {
        opts.push(limit(c));
    }
    if !store && c.pct(40) {
        opts.push(vec![b"WITHSCORES".to_vec()]);
    }
    if c.pct(2) {
        opts.push(vec![b"BYSCORE".to_vec(), b"BYLEX".to_vec()]);
    }
    // Redis accepts the options in any order.
    if c.pct(30) {
        c.shuffle(&mut opts);
    }
    let lex = opts.iter().any(|o| o[0] == b"BYLEX");
    for o in opts {
        cmd = cmd.all(o);
    }
    if lex {
        let key = if store { 2 } else { 1 };
        cmd = cmd.guard(Guard::UniformScores { key });
    }
    cmd
}

fn weight(c: &mut Ctx) -> Vec<u8> {
    match c.below(12) {
        0..=7 => c.range(-2, 3).to_string().into_bytes(),
        8 => b"0.5".to_vec(),
        9 => c.pick(&["inf", "-inf"]).as_bytes().to_vec(),
        10 => b"1e308".to_vec(),
        _ => c.pick(&["x", "nan", ""]).as_bytes().to_vec(),
    }
}

/// ZUNION/ZINTER/ZDIFF and their STORE forms. Sets are valid inputs too (score 1).
fn set_op(c: &mut Ctx) -> Cmd {
    let op = c.below(3);
    let store = c.pct(40);
    let name = match (op, store) {
        (0, false) => "ZUNION",
        (1, false) => "ZINTER",
        (2, false) => "ZDIFF",
        (0, true) => "ZUNIONSTORE",
        (1, true) => "ZINTERSTORE",
        _ => "ZDIFFSTORE",
    };
    let mut cmd = Cmd::new(name);
    if store {
        cmd = cmd.a(key(c));
    }
    let mut home: Vec<&str> = HOME.to_vec();
    home.extend_from_slice(super::sets::HOME);
    let nk = numkeys_and_keys(c, &home);
    let n = nk.len() - 1;
    cmd = cmd.all(nk);
    if op != 2 || c.pct(3) {
        if c.pct(35) {
            let m = if c.pct(90) {
                n
            } else {
                n + 1 - 2 * c.below(2) as usize
            };
            cmd = cmd.a("WEIGHTS");
            for _ in 0..m {
                cmd = cmd.a(weight(c));
            }
        }
        if c.pct(35) {
            let agg = *c.pick(&["SUM", "MIN", "MAX", "min", "AVG"]);
            cmd = cmd.a("AGGREGATE").a(agg);
        }
    }
    if !store && c.pct(45) {
        cmd = cmd.a("WITHSCORES");
    }
    cmd
}

fn blocking(c: &mut Ctx) -> Cmd {
    if c.pct(60) {
        let name = if c.pct(50) { "BZPOPMIN" } else { "BZPOPMAX" };
        Cmd::new(name).all(c.keys_in(HOME, 1, 3)).a(timeout(c))
    } else {
        let mut cmd = Cmd::new("BZMPOP")
            .a(timeout(c))
            .all(numkeys_and_keys(c, HOME))
            .a(minmax(c));
        if c.pct(50) {
            cmd = cmd.a("COUNT").a(c.count_arg());
        }
        cmd
    }
}

fn minmax(c: &mut Ctx) -> &'static str {
    match c.below(20) {
        0..=8 => "MIN",
        9..=17 => "MAX",
        18 => "max",
        _ => "MID",
    }
}

fn gen(c: &mut Ctx) -> Cmd {
    if c.pct(1) {
        // A fresh start for a home key that another family turned into something else.
        return Cmd::new("DEL").a(c.pick(HOME).as_bytes());
    }
    let weights = [
        20, // 0 ZADD
        4,  // 1 ZINCRBY
        4,  // 2 ZREM
        3,  // 3 ZCARD
        4,  // 4 ZCOUNT
        3,  // 5 ZLEXCOUNT
        4,  // 6 ZSCORE
        3,  // 7 ZMSCORE
        4,  // 8 ZRANK/ZREVRANK
        10, // 9 ZRANGE
        3,  // 10 ZRANGESTORE
        3,  // 11 ZREVRANGE
        5,  // 12 ZRANGEBYSCORE/ZREVRANGEBYSCORE
        4,  // 13 ZRANGEBYLEX/ZREVRANGEBYLEX
        4,  // 14 ZREMRANGEBY*
        4,  // 15 ZPOPMIN/ZPOPMAX
        3,  // 16 ZMPOP
        3,  // 17 ZRANDMEMBER
        8,  // 18 ZUNION/ZINTER/ZDIFF (+STORE)
        2,  // 19 ZINTERCARD
        3,  // 20 ZSCAN
        2,  // 21 blocking
    ];
    match c.weighted(&weights) {
        0 => zadd(c),
        1 => Cmd::new("ZINCRBY").a(key(c)).a(score(c)).a(c.member()),
        2 => Cmd::new("ZREM").a(key(c)).all(c.members(1, 3)),
        3 => Cmd::new("ZCARD").a(key(c)),
        4 => Cmd::new("ZCOUNT")
            .a(key(c))
            .a(score_bound(c))
            .a(score_bound(c)),
        5 => Cmd::new("ZLEXCOUNT")
            .a(lex_key(c))
            .a(lex_bound(c))
            .a(lex_bound(c))
            .guard(LEX),
        6 => Cmd::new("ZSCORE").a(key(c)).a(c.member()),
        7 => Cmd::new("ZMSCORE").a(key(c)).all(c.members(1, 4)),
        8 => Cmd::new(if c.pct(50) { "ZRANK" } else { "ZREVRANK" })
            .a(key(c))
            .a(c.member()),
        9 => {
            let cmd = Cmd::new("ZRANGE");
            zrange_args(c, cmd, false)
        }
        10 => {
            let cmd = Cmd::new("ZRANGESTORE").a(key(c));
            zrange_args(c, cmd, true)
        }
        11 => {
            let cmd = Cmd::new("ZREVRANGE").a(key(c)).a(index(c)).a(index(c));
            if c.pct(40) {
                cmd.a("WITHSCORES")
            } else {
                cmd
            }
        }
        12 => {
            let name = if c.pct(50) {
                "ZRANGEBYSCORE"
            } else {
                "ZREVRANGEBYSCORE"
            };
            let mut cmd = Cmd::new(name).a(key(c)).a(score_bound(c)).a(score_bound(c));
            let mut opts: Vec<Vec<Vec<u8>>> = Vec::new();
            if c.pct(40) {
                opts.push(vec![b"WITHSCORES".to_vec()]);
            }
            if c.pct(35) {
                opts.push(limit(c));
            }
            c.shuffle(&mut opts);
            for o in opts {
                cmd = cmd.all(o);
            }
            cmd
        }
        13 => {
            let name = if c.pct(50) {
                "ZRANGEBYLEX"
            } else {
                "ZREVRANGEBYLEX"
            };
            let cmd = Cmd::new(name)
                .a(lex_key(c))
                .a(lex_bound(c))
                .a(lex_bound(c))
                .guard(LEX);
            if c.pct(35) {
                cmd.all(limit(c))
            } else {
                cmd
            }
        }
        14 => match c.below(3) {
            0 => Cmd::new("ZREMRANGEBYRANK")
                .a(key(c))
                .a(index(c))
                .a(index(c)),
            1 => Cmd::new("ZREMRANGEBYSCORE")
                .a(key(c))
                .a(score_bound(c))
                .a(score_bound(c)),
            _ => Cmd::new("ZREMRANGEBYLEX")
                .a(lex_key(c))
                .a(lex_bound(c))
                .a(lex_bound(c))
                .guard(LEX),
        },
        15 => {
            let cmd = Cmd::new(if c.pct(50) { "ZPOPMIN" } else { "ZPOPMAX" }).a(key(c));
            if c.pct(50) {
                cmd.a(c.count_arg())
            } else {
                cmd
            }
        }
        16 => {
            let mut cmd = Cmd::new("ZMPOP")
                .all(numkeys_and_keys(c, HOME))
                .a(minmax(c));
            if c.pct(50) {
                cmd = cmd.a("COUNT").a(c.count_arg());
            }
            cmd
        }
        17 => {
            let k = key(c);
            let probe = Probe::new(&[b"ZRANGE", &k, b"0", b"-1", b"WITHSCORES"], true);
            random_pick(c, "ZRANDMEMBER", k, "WITHSCORES", probe)
        }
        18 => set_op(c),
        19 => {
            let mut cmd = Cmd::new("ZINTERCARD").all(numkeys_and_keys(c, HOME));
            if c.pct(40) {
                cmd = cmd.a("LIMIT").a(c.int_or_bad(-1, 5, 10));
            }
            cmd
        }
        20 => {
            let k = key(c);
            key_scan(c, "ZSCAN", k, true, &["*", "m*", "?", "[a-c]", "*o*", "1*"])
        }
        _ => blocking(c),
    }
}

//! The strings family: GET/SET and friends, counters, ranges, LCS and bit operations.

use super::{Arg, Cmd, Ctx, Family};

pub const FAMILY: Family = Family {
    name: "strings",
    weight: 10,
    gen,
};

/// An expiry option as used by SET and GETEX: `EX s`, `PX ms`, `EXAT t`, `PXAT t`, mostly
/// valid and far in the future; sometimes zero, negative, junk, overflowing or (when
/// `allow_past`) an absolute time in the past.
///
/// SET must not get a past EXAT/PXAT: Redis 7.0 then stores an already expired key that stays
/// in the keyspace until the active expiry cycle or a lookup removes it, so DBSIZE would
/// depend on timing. GETEX deletes the key at once, which is deterministic.
pub fn expiry_option(c: &mut Ctx, allow_past: bool) -> Vec<Arg> {
    let lit = |s: &str| Arg::Lit(s.as_bytes().to_vec());
    let which = c.below(4);
    let name = ["EX", "PX", "EXAT", "PXAT"][which as usize];
    let name = if c.pct(10) {
        name.to_ascii_lowercase()
    } else {
        name.to_string()
    };
    let value = if c.pct(88) {
        let secs = c.ttl_secs();
        match which {
            0 => Arg::Lit(secs.to_string().into_bytes()),
            1 => Arg::Lit((secs * 1000 + c.range(0, 999)).to_string().into_bytes()),
            2 => Arg::SecsFromNow(secs),
            _ => Arg::MsFromNow(secs * 1000 + c.range(0, 999)),
        }
    } else {
        match c.below(6) {
            0 => lit("0"),
            1 => lit("-5"),
            2 => Arg::Lit(c.not_an_int()),
            3 => lit("9223372036854775807"),
            // Absolute times in the past: the key is gone at once (no timing race).
            4 if which >= 2 && allow_past => {
                if which == 2 {
                    Arg::SecsFromNow(-c.range(10, 100_000))
                } else {
                    Arg::MsFromNow(-c.range(10_000, 100_000_000))
                }
            }
            _ => lit("1"),
        }
    };
    // A relative 1 s / 1 ms would race with the next command: make it long instead. An
    // absolute 1 is 1970, already expired: only where that is allowed.
    let value = match (&value, which) {
        (Arg::Lit(v), _) if v == b"1" && (which < 2 || !allow_past) => lit("100000000000000"),
        _ => value,
    };
    vec![Arg::Lit(name.into_bytes()), value]
}

fn set(c: &mut Ctx) -> Cmd {
    let mut cmd = Cmd::new("SET").a(c.str_key()).a(c.value());
    // Option groups, each present or not, in shuffled order.
    let mut groups: Vec<Vec<Arg>> = Vec::new();
    let lit = |s: &str| Arg::Lit(s.as_bytes().to_vec());
    if c.pct(40) {
        groups.push(expiry_option(c, false));
    } else if c.pct(10) {
        groups.push(vec![lit("KEEPTTL")]);
    }
    if c.pct(30) {
        groups.push(vec![lit(if c.pct(50) { "NX" } else { "XX" })]);
    }
    if c.pct(20) {
        groups.push(vec![lit("GET")]);
    }
    // Invalid combinations and unknown options.
    if c.pct(8) {
        let bad = match c.below(7) {
            0 => expiry_option(c, false),
            1 => vec![lit("KEEPTTL")],
            2 => vec![lit("NX"), lit("XX")],
            3 => vec![lit("FOO")],
            4 => vec![lit("EX")], // missing value (if last)
            5 => vec![lit("PX"), lit("100000"), lit("KEEPTTL")],
            _ => vec![lit("GET"), lit("GET")],
        };
        groups.push(bad);
    }
    c.shuffle(&mut groups);
    for g in groups {
        for a in g {
            cmd = cmd.arg(a);
        }
    }
    cmd
}

fn getex(c: &mut Ctx) -> Cmd {
    let mut cmd = Cmd::new("GETEX").a(c.str_key());
    match c.below(10) {
        0..=4 => {
            for a in expiry_option(c, true) {
                cmd = cmd.arg(a);
            }
        }
        5 | 6 => cmd = cmd.a("PERSIST"),
        7 => {}
        8 => {
            // Two options: always a syntax error.
            for a in expiry_option(c, true) {
                cmd = cmd.arg(a);
            }
            cmd = cmd.a("PERSIST");
        }
        _ => cmd = cmd.a(if c.pct(50) { "EX" } else { "BAR" }),
    }
    cmd
}

fn increment(c: &mut Ctx) -> Vec<u8> {
    match c.below(10) {
        0..=5 => c.range(-100, 100).to_string().into_bytes(),
        6 => c.edge_int_str(),
        7 => {
            let edges = ["9223372036854775807", "-9223372036854775808", "1", "-1"];
            c.pick(&edges).as_bytes().to_vec()
        }
        8 => c.not_an_int(),
        _ => c
            .range(-1_000_000_000_000, 1_000_000_000_000)
            .to_string()
            .into_bytes(),
    }
}

fn float_increment(c: &mut Ctx) -> Vec<u8> {
    match c.below(6) {
        0 | 1 => c.float_str(),
        2 => c.range(-100, 100).to_string().into_bytes(),
        3 => c.edge_int_str(),
        4 => c.not_an_int(),
        _ => format!("{}.{}", c.range(-5, 5), c.range(0, 99)).into_bytes(),
    }
}

/// A range index for GETRANGE/BITCOUNT/BITPOS: mostly small, sometimes negative or huge.
fn index(c: &mut Ctx) -> Vec<u8> {
    match c.below(12) {
        0..=7 => c.range(-12, 20).to_string().into_bytes(),
        8 => b"9223372036854775807".to_vec(),
        9 => b"-9223372036854775808".to_vec(),
        10 => c.range(-100, 100).to_string().into_bytes(),
        _ => c.not_an_int(),
    }
}

fn bit_unit(c: &mut Ctx, cmd: Cmd) -> Cmd {
    match c.below(8) {
        0 | 1 => cmd.a("BYTE"),
        2 | 3 => cmd.a("BIT"),
        4 => cmd.a(if c.pct(50) { "bit" } else { "byte" }),
        5 => cmd.a("WORD"),
        _ => cmd,
    }
}

fn gen(c: &mut Ctx) -> Cmd {
    let weights = [
        14, // 0 GET
        16, // 1 SET
        3,  // 2 SETNX
        3,  // 3 SETEX
        3,  // 4 PSETEX
        4,  // 5 MGET
        4,  // 6 MSET
        2,  // 7 MSETNX
        5,  // 8 APPEND
        3,  // 9 STRLEN
        4,  // 10 GETRANGE
        1,  // 11 SUBSTR
        4,  // 12 SETRANGE
        2,  // 13 GETSET
        3,  // 14 GETDEL
        4,  // 15 GETEX
        4,  // 16 INCR/DECR
        5,  // 17 INCRBY/DECRBY
        5,  // 18 INCRBYFLOAT
        4,  // 19 LCS
        4,  // 20 SETBIT
        3,  // 21 GETBIT
        4,  // 22 BITCOUNT
        4,  // 23 BITPOS
        3,  // 24 SET numeric (feeds the counters)
    ];
    match c.weighted(&weights) {
        0 => Cmd::new("GET").a(c.str_key()),
        1 => set(c),
        2 => Cmd::new("SETNX").a(c.str_key()).a(c.value()),
        3 => {
            let secs = if c.pct(90) {
                c.ttl_secs().to_string().into_bytes()
            } else if c.pct(50) {
                c.not_an_int()
            } else {
                c.range(-5, 0).to_string().into_bytes()
            };
            Cmd::new("SETEX").a(c.str_key()).a(secs).a(c.value())
        }
        4 => {
            let ms = if c.pct(90) {
                (c.ttl_secs() * 1000).to_string().into_bytes()
            } else if c.pct(50) {
                c.not_an_int()
            } else {
                c.range(-5, 0).to_string().into_bytes()
            };
            Cmd::new("PSETEX").a(c.str_key()).a(ms).a(c.value())
        }
        5 => Cmd::new("MGET").all(c.keys(1, 5)),
        6 | 7 => {
            let name = if c.pct(70) { "MSET" } else { "MSETNX" };
            let n = c.range(1, 4);
            let mut cmd = Cmd::new(name);
            for _ in 0..n {
                cmd = cmd.a(c.str_key()).a(c.value());
            }
            if c.pct(5) {
                cmd = cmd.a(c.str_key()); // odd number of arguments
            }
            cmd
        }
        8 => Cmd::new("APPEND").a(c.str_key()).a(c.value()),
        9 => Cmd::new("STRLEN").a(c.str_key()),
        10 | 11 => {
            let name = if c.pct(80) { "GETRANGE" } else { "SUBSTR" };
            Cmd::new(name).a(c.str_key()).a(index(c)).a(index(c))
        }
        12 => {
            let off = match c.below(20) {
                0..=13 => c.range(0, 40).to_string().into_bytes(),
                14 | 15 => c.range(0, 4095).to_string().into_bytes(),
                16 => c.range(-5, -1).to_string().into_bytes(),
                // Past the 512 MB limit: an error before any allocation (or, with an empty
                // value, just the current length).
                17 => c
                    .pick(&["536870912", "536870913", "9223372036854775807"])
                    .as_bytes()
                    .to_vec(),
                _ => c.not_an_int(),
            };
            let val = if c.pct(10) { Vec::new() } else { c.value() };
            Cmd::new("SETRANGE").a(c.str_key()).a(off).a(val)
        }
        13 => Cmd::new("GETSET").a(c.str_key()).a(c.value()),
        14 => Cmd::new("GETDEL").a(c.str_key()),
        15 => getex(c),
        16 => Cmd::new(if c.pct(50) { "INCR" } else { "DECR" }).a(c.counter_key()),
        17 => Cmd::new(if c.pct(50) { "INCRBY" } else { "DECRBY" })
            .a(c.counter_key())
            .a(increment(c)),
        18 => Cmd::new("INCRBYFLOAT")
            .a(c.counter_key())
            .a(float_increment(c)),
        19 => {
            let mut cmd = Cmd::new("LCS").a(c.str_key()).a(c.str_key());
            let mut opts: Vec<Vec<Vec<u8>>> = Vec::new();
            if c.pct(30) {
                opts.push(vec![b"LEN".to_vec()]);
            }
            if c.pct(40) {
                opts.push(vec![b"IDX".to_vec()]);
            }
            if c.pct(25) {
                opts.push(vec![b"MINMATCHLEN".to_vec(), c.int_or_bad(-1, 4, 10)]);
            }
            if c.pct(30) {
                opts.push(vec![b"WITHMATCHLEN".to_vec()]);
            }
            if c.pct(4) {
                opts.push(vec![b"NOPE".to_vec()]);
            }
            if c.pct(3) {
                opts.push(vec![b"MINMATCHLEN".to_vec()]);
            }
            c.shuffle(&mut opts);
            for o in opts {
                cmd = cmd.all(o);
            }
            cmd
        }
        20 => {
            let off = match c.below(20) {
                0..=15 => c.range(0, 200).to_string().into_bytes(),
                16 => c.range(0, 4000 * 8).to_string().into_bytes(),
                // Beyond 2^32 bits: rejected before any allocation.
                17 => c
                    .pick(&["4294967296", "9223372036854775807"])
                    .as_bytes()
                    .to_vec(),
                18 => b"-1".to_vec(),
                _ => c.not_an_int(),
            };
            let bit: &[u8] = match c.below(12) {
                0..=4 => b"0",
                5..=9 => b"1",
                10 => b"2",
                _ => b"x",
            };
            Cmd::new("SETBIT").a(c.str_key()).a(off).a(bit)
        }
        21 => {
            let off = match c.below(10) {
                0..=8 => c.range(0, 200).to_string().into_bytes(),
                _ => match c.below(3) {
                    0 => b"4294967295".to_vec(),
                    1 => b"4294967296".to_vec(),
                    _ => c.int_or_bad(-2, 100_000, 50),
                },
            };
            Cmd::new("GETBIT").a(c.str_key()).a(off)
        }
        22 => {
            let mut cmd = Cmd::new("BITCOUNT").a(c.str_key());
            match c.below(6) {
                0 | 1 => {}
                2 => cmd = cmd.a(index(c)), // start without end: syntax error
                _ => {
                    cmd = cmd.a(index(c)).a(index(c));
                    cmd = bit_unit(c, cmd);
                }
            }
            cmd
        }
        23 => {
            let bit: &[u8] = match c.below(10) {
                0..=3 => b"0",
                4..=8 => b"1",
                _ => b"3",
            };
            let mut cmd = Cmd::new("BITPOS").a(c.str_key()).a(bit);
            match c.below(5) {
                0 => {}
                1 => cmd = cmd.a(index(c)),
                _ => {
                    cmd = cmd.a(index(c)).a(index(c));
                    cmd = bit_unit(c, cmd);
                }
            }
            cmd
        }
        _ => {
            let v = if c.pct(70) {
                c.range(-1000, 1000).to_string().into_bytes()
            } else if c.pct(50) {
                c.edge_int_str()
            } else {
                c.float_str()
            };
            Cmd::new("SET").a(c.counter_key()).a(v)
        }
    }
}

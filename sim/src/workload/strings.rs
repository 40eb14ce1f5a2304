//! The strings family: every string command, options and error cases included.

use bytes::Bytes;

use super::{Cmd, Gen};

const INCRS: &[&str] = &[
    "0.5", "-0.25", "1.5", "-3", "10", "1e2", "2.5e-1", "-0.125", "7",
];
const BAD_FLOATS: &[&str] = &["abc", "inf", "", "1.2.3"];

pub fn gen(g: &mut Gen) -> Cmd {
    match g.rng.weighted(&[
        14, // get
        14, // set
        2,  // setnx
        2,  // setex / psetex
        4,  // mget
        3,  // mset / msetnx
        4,  // append
        3,  // strlen
        4,  // getrange
        3,  // setrange
        2,  // getset
        2,  // getdel
        4,  // getex
        8,  // incr family
        5,  // incrbyfloat
        5,  // setbit / getbit
        4,  // bitcount
        4,  // bitpos
        2,  // lcs
    ]) {
        0 => Cmd::new("GET").a(g.any_key()),
        1 => set(g),
        2 => {
            let k = g.any_key();
            let v = g.value_for(k);
            Cmd::new("SETNX").a(k).a(v)
        }
        3 => {
            let k = g.any_key();
            let v = g.value_for(k);
            if g.pct(50) {
                let s: i64 = if g.pct(5) {
                    g.pick(&[0, -1])
                } else {
                    g.range(1, 3)
                };
                Cmd::new("SETEX").a(k).a(s).a(v)
            } else {
                let ms: i64 = if g.pct(5) { 0 } else { g.range(1, 3000) };
                Cmd::new("PSETEX").a(k).a(ms).a(v)
            }
        }
        4 => {
            let mut c = Cmd::new("MGET");
            for _ in 0..g.range(1, 4) {
                c = c.a(g.any_key());
            }
            c
        }
        5 => {
            let mut c = Cmd::new(if g.pct(70) { "MSET" } else { "MSETNX" });
            for _ in 0..g.range(1, 3) {
                let k = g.general_key();
                let v = g.value_for(k);
                c = c.a(k).a(v);
            }
            if g.pct(3) {
                c = c.a(g.general_key()); // odd argument count: an error
            }
            c
        }
        6 => {
            let k = g.general_key();
            let v = g.value_for(k);
            Cmd::new("APPEND").a(k).a(v)
        }
        7 => Cmd::new("STRLEN").a(g.any_key()),
        8 => {
            let name = if g.pct(90) { "GETRANGE" } else { "SUBSTR" };
            let (s, e) = (g.range(-12, 12), g.range(-12, 12));
            let c = Cmd::new(name).a(g.any_key());
            if g.pct(3) {
                c.a("x").a(e)
            } else {
                c.a(s).a(e)
            }
        }
        9 => {
            let k = g.general_key();
            match g.range(0, 99) {
                0 => Cmd::new("SETRANGE").a(k).a(-1i64).a("x"),
                // Past 512 MiB: an error (the value is longer than one byte on purpose).
                1 => Cmd::new("SETRANGE").a(k).a(536_870_911i64).a("toolong"),
                _ => {
                    let off = g.range(0, 40);
                    let v = g.value_for(k);
                    Cmd::new("SETRANGE").a(k).a(off).a(v)
                }
            }
        }
        10 => {
            let k = g.any_key();
            let v = g.value_for(k);
            Cmd::new("GETSET").a(k).a(v)
        }
        11 => Cmd::new("GETDEL").a(g.any_key()),
        12 => getex(g),
        13 => incr(g),
        14 => {
            let by = if g.pct(4) {
                g.pick(BAD_FLOATS)
            } else {
                g.pick(INCRS)
            };
            Cmd::new("INCRBYFLOAT").a(g.float_key()).a(by)
        }
        15 => {
            let off: i64 = match g.range(0, 99) {
                0 => -1,
                1 => 4_294_967_296,
                _ => g.range(0, 200),
            };
            if g.pct(50) {
                let bit: i64 = if g.pct(3) { 2 } else { g.range(0, 1) };
                Cmd::new("SETBIT").a(g.general_key()).a(off).a(bit)
            } else {
                Cmd::new("GETBIT").a(g.any_key()).a(off)
            }
        }
        16 => {
            let mut c = Cmd::new("BITCOUNT").a(g.any_key());
            match g.range(0, 9) {
                0..=2 => {}
                3..=5 => c = c.a(g.range(-10, 10)).a(g.range(-10, 10)),
                6..=8 => {
                    let unit = g.pick(&["BIT", "BYTE", "bit"]);
                    c = c.a(g.range(-40, 40)).a(g.range(-40, 40)).a(unit)
                }
                _ => c = c.a(g.range(0, 3)), // start without end: a syntax error
            }
            c
        }
        17 => {
            let bit: i64 = if g.pct(3) { 2 } else { g.range(0, 1) };
            let mut c = Cmd::new("BITPOS").a(g.any_key()).a(bit);
            match g.range(0, 9) {
                0..=2 => {}
                3..=4 => c = c.a(g.range(-10, 10)),
                5..=6 => c = c.a(g.range(-10, 10)).a(g.range(-10, 10)),
                _ => {
                    let unit = g.pick(&["BIT", "BYTE", "byte"]);
                    c = c.a(g.range(-40, 40)).a(g.range(-40, 40)).a(unit)
                }
            }
            c
        }
        _ => lcs(g),
    }
}

fn set(g: &mut Gen) -> Cmd {
    let k = g.any_key();
    let v = g.value_for(k);
    let mut c = Cmd::new("SET").a(k).a(v);
    if g.pct(40) {
        return c;
    }
    if g.pct(30) {
        c = c.a(g.pick(&["NX", "XX", "nx"]));
    }
    if g.pct(25) {
        c = c.a("GET");
    }
    match g.range(0, 9) {
        0 => c = c.a("EX").a(g.range(1, 3)),
        1 | 2 => c = c.a("PX").a(g.range(1, 3000)),
        3 => {
            c = c
                .a("EXAT")
                .a((g.client_now_ms / 1000) as i64 + g.range(-1, 4))
        }
        4 => c = c.a("PXAT").a(g.client_now_ms as i64 + g.range(-1000, 4000)),
        5 => c = c.a("KEEPTTL"),
        6 => {
            // Error cases: bad number, non-positive time, conflicting options.
            c = match g.range(0, 4) {
                0 => c.a("EX").a(0i64),
                1 => c.a("PX").a("abc"),
                2 => c.a("NX").a("XX"),
                3 => c.a("EX").a(1i64).a("PX").a(10i64),
                _ => c.a("KEEPTTL").a("PX").a(100i64),
            }
        }
        _ => {}
    }
    c
}

fn getex(g: &mut Gen) -> Cmd {
    let c = Cmd::new("GETEX").a(g.any_key());
    match g.range(0, 9) {
        0 | 1 => c,
        2 => c.a("EX").a(g.range(1, 3)),
        3 | 4 => c.a("PX").a(g.range(1, 3000)),
        5 => c
            .a("EXAT")
            .a((g.client_now_ms / 1000) as i64 + g.range(-1, 4)),
        6 => c.a("PXAT").a(g.client_now_ms as i64 + g.range(-1000, 4000)),
        7 => c.a("PERSIST"),
        _ => match g.range(0, 3) {
            0 => c.a("EX").a(0i64),
            1 => c.a("PERSIST").a("EX").a(1i64),
            2 => c.a("KEEPTTL"),
            _ => c.a("PX").a("x"),
        },
    }
}

fn incr(g: &mut Gen) -> Cmd {
    // Float keys get small steps only (they must stay exact numbers); general keys also get
    // steps that overflow.
    let float = g.pct(25);
    let k = if float {
        g.float_key()
    } else {
        g.general_key()
    };
    let big = !float && g.pct(10);
    let by: Bytes = if big {
        Bytes::from_static(
            g.pick(&[
                "9223372036854775807",
                "-9223372036854775808",
                "9223372036854775806",
            ])
            .as_bytes(),
        )
    } else if g.pct(3) {
        Bytes::from_static(b"1.5")
    } else {
        Bytes::from(g.range(-100, 100).to_string())
    };
    match g.range(0, 3) {
        0 => Cmd::new("INCR").a(k),
        1 => Cmd::new("DECR").a(k),
        2 => Cmd::new("INCRBY").a(k).a(by),
        _ => Cmd::new("DECRBY").a(k).a(by),
    }
}

fn lcs(g: &mut Gen) -> Cmd {
    let c = Cmd::new("LCS").a(g.any_key()).a(g.any_key());
    match g.range(0, 7) {
        0..=2 => c,
        3 => c.a("LEN"),
        4 => c.a("IDX"),
        5 => c
            .a("IDX")
            .a("MINMATCHLEN")
            .a(g.range(0, 3))
            .a("WITHMATCHLEN"),
        6 => c.a("IDX").a("WITHMATCHLEN"),
        _ if g.pct(50) => c.a("LEN").a("IDX"),
        _ => c.a("FOO"),
    }
}

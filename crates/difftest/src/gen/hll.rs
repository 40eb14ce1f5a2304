//! The HyperLogLog family: PFADD/PFCOUNT/PFMERGE and PFDEBUG over a few keys, read back with
//! GET so the sparse and dense encodings (and the cached cardinality) are compared byte for
//! byte, with corruptions (APPEND, SETRANGE) and a varying `hll-sparse-max-bytes`.

use super::{Cmd, Ctx, Family};

pub const FAMILY: Family = Family {
    name: "hll",
    weight: 8,
    gen,
};

/// Keys the HLL commands prefer; "foo" is usually a plain string (WRONGTYPE-like refusals).
pub const HOME: &[&str] = &["hll1", "hll2", "hll3", "hll{t}", "foo"];

fn key(c: &mut Ctx) -> Vec<u8> {
    c.key_in(HOME)
}

/// An element: from a pool large enough to fill thousands of registers over a run.
fn element(c: &mut Ctx) -> Vec<u8> {
    match c.below(10) {
        0..=7 => format!("e{}", c.below(20_000)).into_bytes(),
        8 => c.member(),
        _ => c.binary(),
    }
}

fn gen(c: &mut Ctx) -> Cmd {
    let weights = [
        20, // 0 PFADD
        8,  // 1 PFCOUNT
        4,  // 2 PFMERGE
        8,  // 3 GET
        2,  // 4 PFDEBUG
        1,  // 5 corruption
        1,  // 6 CONFIG SET hll-sparse-max-bytes
        1,  // 7 DEL
    ];
    match c.weighted(&weights) {
        0 => {
            let n = match c.below(10) {
                0 => 0,
                1..=6 => c.range(1, 5),
                7 | 8 => c.range(5, 60),
                _ => c.range(100, 400),
            };
            let mut cmd = Cmd::new("PFADD").a(key(c));
            for _ in 0..n {
                cmd = cmd.a(element(c));
            }
            cmd
        }
        1 => Cmd::new("PFCOUNT").all(c.keys_in(HOME, 1, 3)),
        2 => Cmd::new("PFMERGE").a(key(c)).all(c.keys_in(HOME, 0, 3)),
        3 => Cmd::new("GET").a(key(c)),
        4 => {
            let sub = c.pick(&[
                "GETREG", "ENCODING", "TODENSE", "DECODE", "nope", "encoding",
            ]);
            Cmd::new("PFDEBUG").a(*sub).a(key(c))
        }
        5 => match c.below(3) {
            0 => Cmd::new("APPEND")
                .a(key(c))
                .a(c.pick(&["x", "\u{7f}", "hello"])),
            1 => Cmd::new("SETRANGE").a(key(c)).i(c.range(0, 40)).a(c.pick(&[
                "\u{0}",
                "x",
                "\u{7f}\u{40}",
                "0123",
            ])),
            _ => Cmd::new("SET").a(key(c)).a(c.value()),
        },
        6 => Cmd::new("CONFIG")
            .a("SET")
            .a("hll-sparse-max-bytes")
            .a(*c.pick(&["3000", "3000", "200", "1000", "10000", "0"])),
        _ => Cmd::new("DEL").a(key(c)),
    }
}

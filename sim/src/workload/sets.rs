//! The sets family: SADD, SREM, SISMEMBER, SCARD, SMEMBERS on the shared general keys,
//! members from a small pool (integers and text, so both set encodings appear).

use super::{Cmd, Gen};

const MEMBERS: &[&str] = &["1", "2", "-3", "100", "a", "b", "hello", ""];

pub fn gen(g: &mut Gen) -> Cmd {
    let k = g.general_key();
    match g.rng.weighted(&[10, 5, 5, 3, 4]) {
        0 | 1 => {
            let mut c = Cmd::new(if g.pct(65) { "SADD" } else { "SREM" }).a(k);
            for _ in 0..g.range(1, 3) {
                c = c.a(g.pick(MEMBERS));
            }
            c
        }
        2 => Cmd::new("SISMEMBER").a(k).a(g.pick(MEMBERS)),
        3 => Cmd::new("SCARD").a(k),
        _ => Cmd::new("SMEMBERS").a(k),
    }
}

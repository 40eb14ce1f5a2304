//! The expiry family. PEXPIRE with small relative times is frequent and followed by reads of
//! the same small keyspace, so a wrong deadline is seen within milliseconds.

use super::{Cmd, Gen};

pub fn gen(g: &mut Gen) -> Cmd {
    let k = g.any_key();
    match g.rng.weighted(&[
        12, // pexpire
        4,  // expire
        3,  // expireat
        3,  // pexpireat
        8,  // pttl
        5,  // ttl
        2,  // expiretime
        2,  // pexpiretime
        4,  // persist
        2,  // errors
    ]) {
        0 => {
            let ms = g.range(1, 2000);
            opts(g, Cmd::new("PEXPIRE").a(k).a(ms))
        }
        1 => {
            let s = g.range(-1, 3);
            opts(g, Cmd::new("EXPIRE").a(k).a(s))
        }
        2 => {
            let at = (g.client_now_ms / 1000) as i64 + g.range(-2, 4);
            opts(g, Cmd::new("EXPIREAT").a(k).a(at))
        }
        3 => {
            let at = g.client_now_ms as i64 + g.range(-2000, 4000);
            opts(g, Cmd::new("PEXPIREAT").a(k).a(at))
        }
        4 => Cmd::new("PTTL").a(k),
        5 => Cmd::new("TTL").a(k),
        6 => Cmd::new("EXPIRETIME").a(k),
        7 => Cmd::new("PEXPIRETIME").a(k),
        8 => Cmd::new("PERSIST").a(k),
        _ => match g.range(0, 5) {
            0 => Cmd::new("PEXPIRE").a(k).a("abc"),
            1 => Cmd::new("PEXPIRE").a(k).a(100i64).a("NX").a("XX"),
            2 => Cmd::new("PEXPIRE").a(k).a(100i64).a("GT").a("LT"),
            3 => Cmd::new("EXPIRE").a(k).a(100i64).a("FOO"),
            4 => Cmd::new("EXPIRE").a(k).a("9223372036854775807"),
            _ => Cmd::new("PEXPIRE").a(k).a("9223372036854775807"),
        },
    }
}

/// Adds NX/XX/GT/LT a third of the time.
fn opts(g: &mut Gen, c: Cmd) -> Cmd {
    if g.pct(66) {
        c
    } else {
        c.a(g.pick(&["NX", "XX", "GT", "LT", "gt"]))
    }
}

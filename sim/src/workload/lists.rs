//! The lists family: pushes, pops (with and without count), reads, LSET, LREM, LTRIM, LINSERT,
//! RPOPLPUSH and LMOVE on the shared general keys (so lists meet strings and WRONGTYPE), with
//! elements from a small pool so that LREM and LINSERT find their pivots.

use super::{Cmd, Gen};

const ELEMS: &[&str] = &["a", "b", "c", "x", "1", "42", "", "hello"];
const SIDES: &[&str] = &["LEFT", "RIGHT", "left", "Right"];

fn elem(g: &mut Gen) -> &'static str {
    g.pick(ELEMS)
}

/// An index or range bound: mostly small, sometimes negative, huge or not a number.
fn index(g: &mut Gen) -> String {
    match g.rng.weighted(&[10, 6, 1, 1]) {
        0 => g.range(0, 6).to_string(),
        1 => g.range(-6, -1).to_string(),
        2 => g
            .pick(&["100", "-100", "9223372036854775807", "-9223372036854775808"])
            .to_string(),
        _ => g.pick(&["abc", "1.5", ""]).to_string(),
    }
}

pub fn gen(g: &mut Gen) -> Cmd {
    let k = g.general_key();
    match g.rng.weighted(&[
        12, // lpush / rpush
        2,  // lpushx / rpushx
        8,  // lpop / rpop
        3,  // llen
        6,  // lrange
        4,  // lindex
        3,  // lset
        3,  // lrem
        3,  // ltrim
        3,  // linsert
        4,  // rpoplpush / lmove
    ]) {
        0 | 1 => {
            let name = match (g.pct(50), g.rng.below(2) == 1) {
                (true, true) => "LPUSHX",
                (false, true) => "RPUSHX",
                (true, false) => "LPUSH",
                (false, false) => "RPUSH",
            };
            let mut c = Cmd::new(name).a(k);
            for _ in 0..g.range(1, 4) {
                c = c.a(elem(g));
            }
            c
        }
        2 => {
            let c = Cmd::new(if g.pct(50) { "LPOP" } else { "RPOP" }).a(k);
            if g.pct(40) {
                let n = match g.rng.weighted(&[10, 2, 1, 1]) {
                    0 => g.range(1, 4).to_string(),
                    1 => "0".to_string(),
                    2 => "-1".to_string(),
                    _ => "abc".to_string(),
                };
                let c = c.a(n);
                if g.pct(2) {
                    c.a("1") // too many arguments
                } else {
                    c
                }
            } else {
                c
            }
        }
        3 => Cmd::new("LLEN").a(k),
        4 => Cmd::new("LRANGE").a(k).a(index(g)).a(index(g)),
        5 => Cmd::new("LINDEX").a(k).a(index(g)),
        6 => Cmd::new("LSET").a(k).a(index(g)).a(elem(g)),
        7 => {
            let n = g.range(-3, 3);
            Cmd::new("LREM").a(k).a(n).a(elem(g))
        }
        8 => Cmd::new("LTRIM").a(k).a(index(g)).a(index(g)),
        9 => {
            let w = g.pick(&["BEFORE", "AFTER", "after", "middle"]);
            Cmd::new("LINSERT").a(k).a(w).a(elem(g)).a(elem(g))
        }
        _ => {
            let dst = if g.pct(20) { k } else { g.general_key() };
            if g.pct(40) {
                Cmd::new("RPOPLPUSH").a(k).a(dst)
            } else {
                let from = if g.pct(3) { "UP" } else { g.pick(SIDES) };
                let to = g.pick(SIDES);
                Cmd::new("LMOVE").a(k).a(dst).a(from).a(to)
            }
        }
    }
}

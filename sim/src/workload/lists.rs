//! The lists family: pushes, pops (with and without count), reads, LSET, LREM, LTRIM, LINSERT,
//! RPOPLPUSH, LMOVE, LPOS and LMPOP on the shared general keys (so lists meet strings and
//! WRONGTYPE), with elements from a small pool so that LREM, LINSERT and LPOS find their
//! pivots. SORT and SORT_RO live here too: they sort lists, sets and sorted sets alike, and
//! their BY/GET patterns (`k*`) turn elements such as `1` into the general keys `k1`.

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
        3,  // lpos
        2,  // lmpop
        5,  // sort / sort_ro
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
        11 => lpos(g, k),
        12 => lmpop(g),
        13 => sort(g, k),
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

fn lpos(g: &mut Gen, k: &'static str) -> Cmd {
    let mut c = Cmd::new("LPOS").a(k).a(elem(g));
    for _ in 0..g.rng.weighted(&[4, 4, 2, 1]) {
        c = match g.rng.weighted(&[4, 4, 3, 1]) {
            0 => {
                let r = match g.rng.weighted(&[8, 6, 1, 1]) {
                    0 => g.range(1, 3).to_string(),
                    1 => g.range(-3, -1).to_string(),
                    2 => "0".to_string(),
                    _ => g
                        .pick(&["abc", "-9223372036854775808", "9223372036854775807"])
                        .to_string(),
                };
                c.a("RANK").a(r)
            }
            1 => c.a("COUNT").a(g.pick(&["0", "1", "2", "3", "-1", "x"])),
            2 => c.a("MAXLEN").a(g.pick(&["0", "1", "2", "4", "-1", "x"])),
            _ => c.a(g.pick(&["RANK", "LIMIT"])),
        };
    }
    c
}

fn lmpop(g: &mut Gen) -> Cmd {
    let n = g.range(1, 3);
    let numkeys = match g.rng.weighted(&[20, 1, 1]) {
        0 => n.to_string(),
        1 => g.pick(&["0", "-1", "x"]).to_string(),
        _ => (n + 3).to_string(), // more keys announced than given
    };
    let mut c = Cmd::new("LMPOP").a(numkeys);
    for _ in 0..n {
        c = c.a(g.general_key());
    }
    c = c.a(if g.pct(3) { "UP" } else { g.pick(SIDES) });
    match g.rng.weighted(&[6, 6, 1, 1]) {
        0 => c,
        1 => c.a("COUNT").a(g.range(1, 4)),
        2 => c.a("COUNT").a(g.pick(&["0", "-2", "abc"])),
        _ => c.a("COUNT").a("1").a("COUNT").a("1"),
    }
}

/// BY patterns: through string keys, through hash fields, to keys that never exist, and
/// without `*` (no sorting at all).
const BY: &[&str] = &["k*", "k*", "k*->f", "k*->name", "missing_*", "nosort", "#"];
/// GET patterns: the element, string keys, hash fields, and a constant that finds nothing.
const GET: &[&str] = &["#", "k*", "k*->f", "k*->n", "fixed"];

fn sort(g: &mut Gen, k: &'static str) -> Cmd {
    let ro = g.pct(30);
    let mut c = Cmd::new(if ro { "SORT_RO" } else { "SORT" }).a(k);
    let store = !ro && g.pct(25);
    let mut by_pattern = false;
    if g.pct(40) {
        let p = g.pick(BY);
        by_pattern = p.contains('*');
        c = c.a("BY").a(p);
    }
    // STORE with ALPHA and a BY pattern would leave ties in an order only qsort knows.
    if g.pct(45) && !(store && by_pattern) {
        c = c.a(g.pick(&["ALPHA", "alpha"]));
    }
    if g.pct(35) {
        c = c.a(g.pick(&["ASC", "DESC", "desc"]));
    }
    if g.pct(30) {
        let off = match g.rng.weighted(&[8, 1, 1]) {
            0 => g.range(0, 4).to_string(),
            1 => "-1".to_string(),
            _ => "x".to_string(),
        };
        c = c.a("LIMIT").a(off).a(g.range(-1, 3));
    }
    for _ in 0..g.rng.weighted(&[6, 3, 1]) {
        c = c.a("GET").a(g.pick(GET));
    }
    if store {
        c = c.a("STORE").a(g.general_key());
    } else if ro && g.pct(5) {
        c = c.a("STORE").a(g.general_key()); // not an option of SORT_RO
    }
    if g.pct(2) {
        c = c.a(g.pick(&["LIMIT", "BY", "WHAT"])); // a dangling or unknown option
    }
    c
}

//! The sort family: SORT and SORT_RO with BY, GET (`#`, `key*`, `hash*->field`), LIMIT,
//! ASC/DESC, ALPHA and STORE.
//!
//! Where Redis leaves the order open, the reply is compared as a multiset (or, with LIMIT
//! picking an unspecified subset, by shape only), and STORE is never combined with such an
//! order (the stored lists would differ):
//! - a BY pattern without `*` (or `nosort`) skips sorting: a set comes out in its internal
//!   order (with STORE Redis sorts it instead, which is deterministic again);
//! - ALPHA with a BY pattern has no tie-break between equal (or missing) weights.
//!
//! Numeric sorting breaks ties by the element, so it is deterministic.
//!
//! Every SORT is preceded by [`ERRNO_RESET`]: Redis 7.0 can fail a numeric SORT because of a
//! stale `errno` left by an earlier command (a Redis bug, not something to compare).

use super::{Cmd, Cmp, Ctx, Family, ERRNO_RESET};

pub const FAMILY: Family = Family {
    name: "sort",
    weight: 4,
    gen,
};

const BY: &[&str] = &[
    "k:*",
    "k:*",
    "user:*->age",
    "user:*->name",
    "*",
    "*->f1",
    "k:*->f1",
    "w_*",
    "nosort",
    "#",
    "user:*->",
    "constant",
];

const GET: &[&str] = &[
    "#",
    "#",
    "k:*",
    "user:*->name",
    "user:*->age",
    "*",
    "*->f1",
    "k:*->f1",
    "nokey_*",
    "user:*->",
    "#->f1",
];

/// What a SORT command line asks for, parsed the way Redis parses it.
#[derive(Default)]
struct Parsed {
    ok: bool,
    alpha: bool,
    limit: bool,
    store: bool,
    /// Some BY pattern has no `*`: nothing is sorted.
    dontsort: bool,
    /// The last BY pattern (the one that counts).
    by: Option<Vec<u8>>,
}

fn parse(cmd: &Cmd) -> Parsed {
    let readonly = cmd.name() == "SORT_RO";
    let n = cmd.args.len();
    let mut p = Parsed {
        ok: true,
        ..Parsed::default()
    };
    let mut j = 2;
    while j < n {
        let left = n - j - 1;
        let opt = String::from_utf8_lossy(cmd.lit(j)).to_ascii_uppercase();
        match opt.as_str() {
            "ASC" | "DESC" => {}
            "ALPHA" => p.alpha = true,
            "LIMIT" if left >= 2 => {
                p.limit = true;
                j += 2;
            }
            "STORE" if !readonly && left >= 1 => {
                p.store = true;
                j += 1;
            }
            "BY" if left >= 1 => {
                let pat = cmd.lit(j + 1).to_vec();
                if !pat.contains(&b'*') {
                    p.dontsort = true;
                }
                p.by = Some(pat);
                j += 1;
            }
            "GET" if left >= 1 => j += 1,
            _ => {
                p.ok = false;
                break;
            }
        }
        j += 1;
    }
    p
}

impl Parsed {
    /// Whether the order of the sorted elements is fully specified.
    fn order_defined(&self) -> bool {
        if self.dontsort {
            // Lists and sorted sets keep their order; sets do not, unless STORE sorts them.
            return self.store;
        }
        !(self.alpha && self.by.is_some())
    }
}

/// How the replies of a SORT / SORT_RO command line are compared.
pub fn cmp_for(cmd: &Cmd) -> Cmp {
    let p = parse(cmd);
    if !p.ok || p.store || p.order_defined() {
        Cmp::Exact
    } else if p.limit {
        Cmp::Shape
    } else {
        Cmp::Sorted
    }
}

fn source(c: &mut Ctx) -> Vec<u8> {
    let homes: [&[&str]; 3] = [super::lists::HOME, super::sets::HOME, super::zsets::HOME];
    let home = *c.pick(&homes);
    c.key_in(home)
}

fn gen(c: &mut Ctx) -> Cmd {
    let readonly = c.pct(25);
    let mut cmd = Cmd::new(if readonly { "SORT_RO" } else { "SORT" }).a(source(c));
    let mut opts: Vec<Vec<Vec<u8>>> = Vec::new();
    if c.pct(55) {
        opts.push(vec![b"BY".to_vec(), c.pick(BY).as_bytes().to_vec()]);
    }
    if c.pct(3) {
        opts.push(vec![b"BY".to_vec(), c.pick(BY).as_bytes().to_vec()]);
    }
    if c.pct(30) {
        let off = match c.below(10) {
            0..=7 => c.range(0, 4).to_string().into_bytes(),
            8 => b"-2".to_vec(),
            _ => c.not_an_int(),
        };
        let cnt = match c.below(10) {
            0..=7 => c.range(0, 5).to_string().into_bytes(),
            8 => b"-1".to_vec(),
            _ => c.not_an_int(),
        };
        opts.push(vec![b"LIMIT".to_vec(), off, cnt]);
    }
    let gets = match c.below(10) {
        0..=5 => 0,
        6..=8 => 1,
        _ => 2 + c.below(2),
    };
    for _ in 0..gets {
        opts.push(vec![b"GET".to_vec(), c.pick(GET).as_bytes().to_vec()]);
    }
    if c.pct(35) {
        opts.push(vec![if c.pct(70) {
            b"DESC".to_vec()
        } else {
            b"ASC".to_vec()
        }]);
    }
    if c.pct(45) {
        opts.push(vec![b"ALPHA".to_vec()]);
    }
    if c.pct(3) {
        opts.push(vec![c.pick(&["BOGUS", "LIMIT", "GET"]).as_bytes().to_vec()]);
    }
    c.shuffle(&mut opts);
    for o in opts {
        cmd = cmd.all(o);
    }
    // STORE last, and only where the stored order is defined (or on SORT_RO, an error).
    if c.pct(if readonly { 4 } else { 15 }) {
        let dst = if c.pct(50) { b"abc".to_vec() } else { c.key() };
        let with = cmd.clone().a("STORE").a(dst);
        if readonly || parse(&with).order_defined() {
            cmd = with;
        }
    }
    let cmp = cmp_for(&cmd);
    cmd.cmp(cmp).pre(ERRNO_RESET)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str]) -> Cmd {
        let mut c = Cmd::new(args[0]);
        for a in &args[1..] {
            c = c.a(a);
        }
        c
    }

    #[test]
    fn order_rules() {
        assert_eq!(cmp_for(&cmd(&["SORT", "k"])), Cmp::Exact);
        assert_eq!(cmp_for(&cmd(&["SORT", "k", "ALPHA"])), Cmp::Exact);
        assert_eq!(cmp_for(&cmd(&["SORT", "k", "BY", "w_*"])), Cmp::Exact);
        assert_eq!(
            cmp_for(&cmd(&["SORT", "k", "BY", "w_*", "ALPHA"])),
            Cmp::Sorted
        );
        assert_eq!(cmp_for(&cmd(&["SORT", "k", "BY", "nosort"])), Cmp::Sorted);
        assert_eq!(
            cmp_for(&cmd(&["SORT", "k", "BY", "nosort", "LIMIT", "0", "1"])),
            Cmp::Shape
        );
        assert_eq!(
            cmp_for(&cmd(&["SORT", "k", "BY", "nosort", "STORE", "d"])),
            Cmp::Exact
        );
        // STORE is not an option of SORT_RO: a syntax error, compared exactly.
        assert_eq!(
            cmp_for(&cmd(&["SORT_RO", "k", "BY", "nosort", "STORE", "d"])),
            Cmp::Exact
        );
        assert_eq!(
            cmp_for(&cmd(&["sort_ro", "k", "by", "#", "get", "#"])),
            Cmp::Sorted
        );
        // The first BY without a star disables sorting for good.
        assert_eq!(
            cmp_for(&cmd(&["SORT", "k", "BY", "x", "BY", "k:*"])),
            Cmp::Sorted
        );
    }
}

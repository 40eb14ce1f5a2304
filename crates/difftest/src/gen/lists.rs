//! The lists family: pushes, pops, ranges, positions, moves and the blocking variants.
//!
//! Blocking commands never block for long: outside MULTI their timeout is a few milliseconds
//! (an empty source answers nil after it, a non-empty one at once, and nothing else writes in
//! between, so the reply does not depend on timing); inside MULTI they never block, so there
//! the timeout may also be 0.

use super::{Cmd, Ctx, Family};

pub const FAMILY: Family = Family {
    name: "lists",
    weight: 10,
    gen,
};

/// Keys the list commands prefer.
pub const HOME: &[&str] = &["a", "ab", "abc", "foo1"];

fn key(c: &mut Ctx) -> Vec<u8> {
    c.key_in(HOME)
}

/// A list index: mostly around the ends, sometimes huge or junk.
pub fn index(c: &mut Ctx) -> Vec<u8> {
    match c.below(20) {
        0..=15 => c.range(-8, 8).to_string().into_bytes(),
        16 => c.range(-1000, 1000).to_string().into_bytes(),
        17 => c
            .pick(&["9223372036854775807", "-9223372036854775808"])
            .as_bytes()
            .to_vec(),
        _ => c.not_an_int(),
    }
}

fn side(c: &mut Ctx) -> &'static str {
    match c.below(20) {
        0..=8 => "LEFT",
        9..=17 => "RIGHT",
        18 => "left",
        _ => "MIDDLE",
    }
}

/// A blocking timeout in seconds (see the module documentation).
pub fn timeout(c: &mut Ctx) -> Vec<u8> {
    let v: &str = match c.below(20) {
        0..=13 => "0.01",
        14 | 15 => "0.02",
        16 if c.in_multi => "0",
        16 => "0.001",
        17 => "-1",
        18 => "abc",
        _ => "1e-2",
    };
    v.as_bytes().to_vec()
}

/// `numkeys key... ` with numkeys usually right, sometimes zero, too large, or junk.
pub fn numkeys_and_keys(c: &mut Ctx, home: &[&str]) -> Vec<Vec<u8>> {
    let keys = c.keys_in(home, 1, 3);
    let n = match c.below(20) {
        0..=16 => keys.len().to_string().into_bytes(),
        17 => b"0".to_vec(),
        18 => (keys.len() + 2).to_string().into_bytes(),
        _ => c.not_an_int(),
    };
    let mut out = vec![n];
    out.extend(keys);
    out
}

fn lpos(c: &mut Ctx) -> Cmd {
    let mut cmd = Cmd::new("LPOS").a(key(c)).a(c.member());
    let mut opts: Vec<Vec<Vec<u8>>> = Vec::new();
    if c.pct(40) {
        let r = match c.below(10) {
            0..=7 => {
                let r = c.range(1, 3);
                (if c.pct(40) { -r } else { r }).to_string().into_bytes()
            }
            8 => b"0".to_vec(),
            _ => c
                .pick(&["-9223372036854775808", "9223372036854775807", "x"])
                .as_bytes()
                .to_vec(),
        };
        opts.push(vec![b"RANK".to_vec(), r]);
    }
    if c.pct(40) {
        opts.push(vec![b"COUNT".to_vec(), c.int_or_bad(-1, 4, 5)]);
    }
    if c.pct(25) {
        opts.push(vec![b"MAXLEN".to_vec(), c.int_or_bad(-1, 6, 5)]);
    }
    if c.pct(3) {
        opts.push(vec![b"NOPE".to_vec()]);
    }
    c.shuffle(&mut opts);
    for o in opts {
        cmd = cmd.all(o);
    }
    cmd
}

fn blocking(c: &mut Ctx) -> Cmd {
    match c.below(5) {
        0 | 1 => {
            let name = if c.pct(50) { "BLPOP" } else { "BRPOP" };
            Cmd::new(name).all(c.keys_in(HOME, 1, 3)).a(timeout(c))
        }
        2 => Cmd::new("BRPOPLPUSH").a(key(c)).a(key(c)).a(timeout(c)),
        3 => Cmd::new("BLMOVE")
            .a(key(c))
            .a(key(c))
            .a(side(c))
            .a(side(c))
            .a(timeout(c)),
        _ => {
            let mut cmd = Cmd::new("BLMPOP")
                .a(timeout(c))
                .all(numkeys_and_keys(c, HOME))
                .a(side(c));
            if c.pct(50) {
                cmd = cmd.a("COUNT").a(c.count_arg());
            }
            cmd
        }
    }
}

fn gen(c: &mut Ctx) -> Cmd {
    if c.pct(1) {
        // A fresh start for a home key that another family turned into something else.
        return Cmd::new("DEL").a(c.pick(HOME).as_bytes());
    }
    let weights = [
        18, // 0 LPUSH/RPUSH
        3,  // 1 LPUSHX/RPUSHX
        7,  // 2 LPOP/RPOP
        4,  // 3 LLEN
        10, // 4 LRANGE
        4,  // 5 LINDEX
        4,  // 6 LSET
        4,  // 7 LINSERT
        4,  // 8 LREM
        3,  // 9 LTRIM
        5,  // 10 LPOS
        3,  // 11 RPOPLPUSH
        4,  // 12 LMOVE
        4,  // 13 LMPOP
        2,  // 14 blocking
    ];
    match c.weighted(&weights) {
        0 => {
            let name = if c.pct(50) { "LPUSH" } else { "RPUSH" };
            Cmd::new(name).a(key(c)).all(c.members(1, 6))
        }
        1 => {
            let name = if c.pct(50) { "LPUSHX" } else { "RPUSHX" };
            Cmd::new(name).a(key(c)).all(c.members(1, 3))
        }
        2 => {
            let name = if c.pct(50) { "LPOP" } else { "RPOP" };
            let cmd = Cmd::new(name).a(key(c));
            if c.pct(50) {
                cmd.a(c.count_arg())
            } else {
                cmd
            }
        }
        3 => Cmd::new("LLEN").a(key(c)),
        4 => Cmd::new("LRANGE").a(key(c)).a(index(c)).a(index(c)),
        5 => Cmd::new("LINDEX").a(key(c)).a(index(c)),
        6 => Cmd::new("LSET").a(key(c)).a(index(c)).a(c.member()),
        7 => {
            let place = match c.below(10) {
                0..=4 => "BEFORE",
                5..=8 => "AFTER",
                _ => "ATOP",
            };
            Cmd::new("LINSERT")
                .a(key(c))
                .a(place)
                .a(c.member())
                .a(c.member())
        }
        8 => Cmd::new("LREM")
            .a(key(c))
            .a(c.int_or_bad(-3, 3, 5))
            .a(c.member()),
        9 => Cmd::new("LTRIM").a(key(c)).a(index(c)).a(index(c)),
        10 => lpos(c),
        11 => Cmd::new("RPOPLPUSH").a(key(c)).a(key(c)),
        12 => Cmd::new("LMOVE").a(key(c)).a(key(c)).a(side(c)).a(side(c)),
        13 => {
            let mut cmd = Cmd::new("LMPOP").all(numkeys_and_keys(c, HOME)).a(side(c));
            if c.pct(50) {
                cmd = cmd.a("COUNT").a(c.count_arg());
            }
            cmd
        }
        _ => blocking(c),
    }
}

//! The sets family.
//!
//! SPOP picks at random, and a different pick on each side would make the keyspaces diverge:
//! it only runs with a count of 0 or one larger than any set here (everything is popped, which
//! is deterministic as a set), or with an invalid count.

use super::hashes::{key_scan, random_pick};
use super::lists::numkeys_and_keys;
use super::{Cmd, Cmp, Ctx, Family, Probe};

pub const FAMILY: Family = Family {
    name: "sets",
    weight: 9,
    gen,
};

/// Keys the set commands prefer.
pub const HOME: &[&str] = &["bar", "baz", "foo2", "x*y"];

fn key(c: &mut Ctx) -> Vec<u8> {
    c.key_in(HOME)
}

const PATTERNS: &[&str] = &["*", "1*", "?", "m1*", "[a-c]", "*o*", "-*", "nomatch*"];

fn spop(c: &mut Ctx) -> Cmd {
    let count: &str = match c.below(10) {
        0..=5 => "100000",
        6 => "9223372036854775807",
        7 => "0",
        8 => "-1",
        _ => "1x",
    };
    Cmd::new("SPOP").a(key(c)).a(count).cmp(Cmp::Sorted).fixed()
}

fn gen(c: &mut Ctx) -> Cmd {
    if c.pct(1) {
        // A fresh start for a home key that another family turned into something else.
        return Cmd::new("DEL").a(c.pick(HOME).as_bytes());
    }
    let weights = [
        18, // 0 SADD
        5,  // 1 SREM
        5,  // 2 SMEMBERS
        4,  // 3 SISMEMBER
        3,  // 4 SMISMEMBER
        3,  // 5 SCARD
        2,  // 6 SPOP
        4,  // 7 SRANDMEMBER
        4,  // 8 SMOVE
        4,  // 9 SINTER
        3,  // 10 SINTERCARD
        3,  // 11 SINTERSTORE
        4,  // 12 SUNION
        3,  // 13 SUNIONSTORE
        4,  // 14 SDIFF
        3,  // 15 SDIFFSTORE
        3,  // 16 SSCAN
    ];
    match c.weighted(&weights) {
        0 => Cmd::new("SADD").a(key(c)).all(c.members(1, 6)),
        1 => Cmd::new("SREM").a(key(c)).all(c.members(1, 3)),
        2 => Cmd::new("SMEMBERS").a(key(c)).cmp(Cmp::Sorted),
        3 => Cmd::new("SISMEMBER").a(key(c)).a(c.member()),
        4 => Cmd::new("SMISMEMBER").a(key(c)).all(c.members(1, 4)),
        5 => Cmd::new("SCARD").a(key(c)),
        6 => spop(c),
        7 => {
            let k = key(c);
            let probe = Probe::new(&[b"SMEMBERS", &k], false);
            random_pick(c, "SRANDMEMBER", k, "", probe)
        }
        8 => Cmd::new("SMOVE").a(key(c)).a(key(c)).a(c.member()),
        9 => Cmd::new("SINTER")
            .all(c.keys_in(HOME, 1, 3))
            .cmp(Cmp::Sorted),
        10 => {
            let mut cmd = Cmd::new("SINTERCARD").all(numkeys_and_keys(c, HOME));
            if c.pct(40) {
                cmd = cmd.a("LIMIT").a(c.int_or_bad(-1, 5, 10));
            }
            cmd
        }
        11 => Cmd::new("SINTERSTORE").a(key(c)).all(c.keys_in(HOME, 1, 3)),
        12 => Cmd::new("SUNION")
            .all(c.keys_in(HOME, 1, 3))
            .cmp(Cmp::Sorted),
        13 => Cmd::new("SUNIONSTORE").a(key(c)).all(c.keys_in(HOME, 1, 3)),
        14 => Cmd::new("SDIFF")
            .all(c.keys_in(HOME, 1, 3))
            .cmp(Cmp::Sorted),
        15 => Cmd::new("SDIFFSTORE").a(key(c)).all(c.keys_in(HOME, 1, 3)),
        _ => {
            let k = key(c);
            key_scan(c, "SSCAN", k, false, PATTERNS)
        }
    }
}

//! The hashes family.

use super::{Cmd, Cmp, Ctx, Family, Probe};

pub const FAMILY: Family = Family {
    name: "hashes",
    weight: 9,
    gen,
};

/// Keys the hash commands prefer (`user:*` and `k:10` are also SORT's GET/BY targets).
pub const HOME: &[&str] = &["user:1", "user:2", "k:10", "\x00\u{7f}k\n"];

fn key(c: &mut Ctx) -> Vec<u8> {
    c.key_in(HOME)
}

/// A field value: often a small integer (HINCRBY, SORT BY) and otherwise any value.
fn value(c: &mut Ctx) -> Vec<u8> {
    if c.pct(40) {
        c.range(-50, 50).to_string().into_bytes()
    } else {
        c.value()
    }
}

fn increment(c: &mut Ctx) -> Vec<u8> {
    match c.below(10) {
        0..=6 => c.range(-20, 20).to_string().into_bytes(),
        7 => c.edge_int_str(),
        8 => c.not_an_int(),
        _ => c.float_str(),
    }
}

fn float_increment(c: &mut Ctx) -> Vec<u8> {
    match c.below(8) {
        0..=2 => c.float_str(),
        3 | 4 => c.range(-20, 20).to_string().into_bytes(),
        5 => c.edge_int_str(),
        6 => c.not_an_int(),
        _ => format!("{}.{}", c.range(-5, 5), c.range(0, 99)).into_bytes(),
    }
}

const PATTERNS: &[&str] = &[
    "*", "f*", "f?", "[ab]", "*e*", "n*", "x\\ y", "?", "nomatch*",
];

/// A full HSCAN/SSCAN/ZSCAN iteration with the usual options (sometimes bad ones).
pub fn key_scan(c: &mut Ctx, name: &str, key: Vec<u8>, pairs: bool, patterns: &[&str]) -> Cmd {
    let mut cmd = Cmd::new(name).a(key).a("0").cmp(Cmp::ScanKey { pairs });
    let mut opts: Vec<Vec<Vec<u8>>> = Vec::new();
    if c.pct(40) {
        opts.push(vec![
            b"MATCH".to_vec(),
            c.pick(patterns).as_bytes().to_vec(),
        ]);
    }
    if c.pct(40) {
        opts.push(vec![b"COUNT".to_vec(), c.int_or_bad(1, 20, 5)]);
    }
    if c.pct(4) {
        let bad: Vec<Vec<u8>> = match c.below(4) {
            0 => vec![b"COUNT".to_vec(), b"0".to_vec()],
            1 => vec![b"MATCH".to_vec()],
            2 => vec![b"TYPE".to_vec(), b"string".to_vec()],
            _ => vec![b"BOGUS".to_vec()],
        };
        opts.push(bad);
    }
    c.shuffle(&mut opts);
    for o in opts {
        cmd = cmd.all(o);
    }
    if c.pct(3) {
        // A bad cursor: an error on the first call.
        cmd.args[2] = super::Arg::Lit(c.pick(&["x", "1.5", "0x"]).as_bytes().to_vec());
    }
    cmd
}

/// A random-pick command (`HRANDFIELD`, `SRANDMEMBER`, `ZRANDMEMBER`): its count and options,
/// compared by properties against `probe`.
pub fn random_pick(c: &mut Ctx, name: &str, key: Vec<u8>, with: &str, probe: Probe) -> Cmd {
    let mut cmd = Cmd::new(name).a(key);
    if c.pct(25) {
        return cmd
            .cmp(Cmp::Random {
                pairs: false,
                distinct: true,
            })
            .probe(probe);
    }
    let count = c.count_arg();
    let distinct = std::str::from_utf8(&count)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .is_some_and(|n| n >= 0);
    cmd = cmd.a(count);
    let mut pairs = false;
    if !with.is_empty() && c.pct(40) {
        cmd = cmd.a(if c.pct(90) { with } else { "WITHNOTHING" });
        pairs = true;
    }
    cmd.cmp(Cmp::Random { pairs, distinct }).probe(probe)
}

fn gen(c: &mut Ctx) -> Cmd {
    if c.pct(1) {
        // A fresh start for a home key that another family turned into something else.
        return Cmd::new("DEL").a(c.pick(HOME).as_bytes());
    }
    let weights = [
        18, // 0 HSET
        3,  // 1 HSETNX
        8,  // 2 HGET
        4,  // 3 HMGET
        3,  // 4 HMSET
        5,  // 5 HDEL
        3,  // 6 HLEN
        3,  // 7 HSTRLEN
        3,  // 8 HEXISTS
        3,  // 9 HKEYS
        3,  // 10 HVALS
        5,  // 11 HGETALL
        5,  // 12 HINCRBY
        4,  // 13 HINCRBYFLOAT
        4,  // 14 HRANDFIELD
        3,  // 15 HSCAN
    ];
    match c.weighted(&weights) {
        0 | 4 => {
            let name = if c.pct(80) { "HSET" } else { "HMSET" };
            let mut cmd = Cmd::new(name).a(key(c));
            let n = if c.pct(2) {
                c.range(70, 140)
            } else {
                c.range(1, 3)
            };
            for _ in 0..n {
                cmd = cmd.a(c.field()).a(value(c));
            }
            if c.pct(4) {
                cmd = cmd.a(c.field()); // a field without a value
            }
            cmd
        }
        1 => Cmd::new("HSETNX").a(key(c)).a(c.field()).a(value(c)),
        2 => Cmd::new("HGET").a(key(c)).a(c.field()),
        3 => {
            let n = c.range(1, 4);
            let mut cmd = Cmd::new("HMGET").a(key(c));
            for _ in 0..n {
                cmd = cmd.a(c.field());
            }
            cmd
        }
        5 => {
            let n = c.range(1, 3);
            let mut cmd = Cmd::new("HDEL").a(key(c));
            for _ in 0..n {
                cmd = cmd.a(c.field());
            }
            cmd
        }
        6 => Cmd::new("HLEN").a(key(c)),
        7 => Cmd::new("HSTRLEN").a(key(c)).a(c.field()),
        8 => Cmd::new("HEXISTS").a(key(c)).a(c.field()),
        9 => Cmd::new("HKEYS").a(key(c)).cmp(Cmp::Sorted),
        10 => Cmd::new("HVALS").a(key(c)).cmp(Cmp::Sorted),
        11 => Cmd::new("HGETALL").a(key(c)).cmp(Cmp::Pairs),
        12 => Cmd::new("HINCRBY").a(key(c)).a(c.field()).a(increment(c)),
        13 => Cmd::new("HINCRBYFLOAT")
            .a(key(c))
            .a(c.field())
            .a(float_increment(c)),
        14 => {
            let k = key(c);
            let probe = Probe::new(&[b"HGETALL", &k], true);
            random_pick(c, "HRANDFIELD", k, "WITHVALUES", probe)
        }
        _ => {
            let k = key(c);
            key_scan(c, "HSCAN", k, true, PATTERNS)
        }
    }
}

//! The geo family: GEOADD and every search and read command over a few geo sets whose members
//! each have one fixed place (so two members at one spot, whose order Redis leaves to its
//! sort, are rare), clustered around Sicily with a few far away, near the poles' limit and on
//! the antimeridian; ZRANGE reads back what the STORE forms wrote. Members never share a
//! place: with COUNT, Redis sorts by distance with a partial quicksort that orders equal
//! distances arbitrarily, so ties are not comparable.

use super::{Cmd, Cmp, Ctx, Family};

pub const FAMILY: Family = Family {
    name: "geo",
    weight: 8,
    gen,
};

pub const HOME: &[&str] = &["geo1", "geo2", "Sicily", "geo{t}", "bar"];

fn key(c: &mut Ctx) -> Vec<u8> {
    c.key_in(HOME)
}

const MEMBERS: u64 = 80;

/// The fixed place of member `i`: (longitude, latitude) as text.
fn place(i: u64) -> (String, String) {
    // A small mixing function of the index: the same place on every run.
    let mut h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5851_f42d_4c95_7f2d;
    h ^= h >> 29;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 32;
    let a = (h & 0xffff_ffff) as f64 / 4_294_967_296.0;
    let b = (h >> 32) as f64 / 4_294_967_296.0;
    let (long, lat) = match i % 10 {
        0 => (-180.0 + 360.0 * a, -85.0 + 170.0 * b),
        1 => (179.5 + 0.5 * a, -10.0 + 20.0 * b),
        2 => (-180.0 + 0.5 * a, -10.0 + 20.0 * b),
        3 => (-20.0 + 40.0 * a, 84.0 + 1.05 * b),
        _ => (12.0 + 4.0 * a, 36.5 + 2.5 * b),
    };
    (format!("{long:.6}"), format!("{lat:.6}"))
}

fn member_index(c: &mut Ctx) -> u64 {
    c.below(MEMBERS)
}

fn member(c: &mut Ctx) -> Vec<u8> {
    if c.pct(5) {
        return b"nosuchplace".to_vec();
    }
    format!("p{}", member_index(c)).into_bytes()
}

/// A search centre's coordinates: mostly near the cluster, sometimes anywhere or invalid.
fn center(c: &mut Ctx) -> Vec<String> {
    match c.below(20) {
        0..=13 => vec![
            format!("{:.4}", 12.0 + 4.0 * c.below(1000) as f64 / 1000.0),
            format!("{:.4}", 36.5 + 2.5 * c.below(1000) as f64 / 1000.0),
        ],
        14..=16 => {
            let (a, b) = place(member_index(c));
            vec![a, b]
        }
        17 => vec![
            format!("{:.3}", -180.0 + 360.0 * c.below(1000) as f64 / 1000.0),
            format!("{:.3}", -85.0 + 170.0 * c.below(1000) as f64 / 1000.0),
        ],
        18 => vec!["181".into(), "0".into()],
        _ => vec![
            c.pick(&["x", "0", "180", "-180", "nan", "1e400"])
                .to_string(),
            c.pick(&["85.05112879", "0", "-85.05112878", "y", "90"])
                .to_string(),
        ],
    }
}

fn unit(c: &mut Ctx) -> &'static str {
    match c.below(25) {
        0..=9 => "km",
        10..=14 => "m",
        15..=18 => "mi",
        19..=22 => "ft",
        23 => "KM",
        _ => "parsec",
    }
}

/// A radius or box side in the unit drawn next: mostly a few hundred km's worth.
fn distance(c: &mut Ctx) -> String {
    match c.below(20) {
        0..=13 => format!("{}", c.range(1, 400)),
        14..=15 => format!("{}", c.range(1, 400_000)),
        16 => "0".into(),
        17 => format!("{}.{}", c.range(0, 50), c.range(0, 99)),
        18 => c.pick(&["-1", "x", "inf"]).to_string(),
        _ => "20000".into(),
    }
}

/// WITHDIST/WITHHASH/WITHCOORD, COUNT [ANY], ASC/DESC, in random order.
fn options(c: &mut Ctx, with: bool) -> Vec<Vec<String>> {
    let mut opts: Vec<Vec<String>> = Vec::new();
    if with {
        for w in ["WITHDIST", "WITHHASH", "WITHCOORD"] {
            if c.pct(30) {
                opts.push(vec![w.into()]);
            }
        }
    }
    if c.pct(30) {
        let n = match c.below(10) {
            0 => "0".to_string(),
            1 => "x".to_string(),
            _ => c.range(1, 12).to_string(),
        };
        let mut o = vec!["COUNT".to_string(), n];
        if c.pct(30) {
            o.push("ANY".into());
        }
        opts.push(o);
    } else if c.pct(3) {
        opts.push(vec!["ANY".into()]);
    }
    if c.pct(40) {
        opts.push(vec![c.pick(&["ASC", "DESC", "asc"]).to_string()]);
    }
    c.shuffle(&mut opts);
    opts
}

fn add_options(mut cmd: Cmd, opts: Vec<Vec<String>>) -> Cmd {
    for o in opts {
        cmd = cmd.all(o);
    }
    cmd
}

fn gen(c: &mut Ctx) -> Cmd {
    let weights = [
        14, // 0 GEOADD
        4,  // 1 GEODIST
        3,  // 2 GEOHASH or GEOPOS
        4,  // 3 GEOHASH or GEOPOS
        6,  // 4 GEORADIUS[BYMEMBER][_RO]
        5,  // 5 GEORADIUS[BYMEMBER][_RO]
        10, // 6 GEOSEARCH
        5,  // 7 GEOSEARCHSTORE
        4,  // 8 ZRANGE WITHSCORES
        2,  // 9 ZREM
        1,  // 10 ZADD raw score
        1,  // 11 DEL
    ];
    match c.weighted(&weights) {
        0 => {
            let mut cmd = Cmd::new("GEOADD").a(key(c));
            if c.pct(15) {
                cmd = cmd.a(c.pick(&["NX", "XX", "CH", "nx"]));
                if c.pct(30) {
                    cmd = cmd.a(c.pick(&["CH", "XX", "GT"]));
                }
            }
            let n = c.range(1, 6);
            for _ in 0..n {
                let i = member_index(c);
                // Only invalid pairs besides the member's own place: two members at one
                // spot tie on distance, and Redis orders ties by its (unstable) sort.
                let (long, lat) = if c.pct(4) {
                    let bad = *c.pick(&[
                        ("181", "0"),
                        ("0", "85.06"),
                        ("x", "1"),
                        ("1", "nan"),
                        ("-180.0001", "0"),
                        ("1e400", "0"),
                    ]);
                    (bad.0.to_string(), bad.1.to_string())
                } else {
                    place(i)
                };
                cmd = cmd.a(long).a(lat).a(format!("p{i}"));
            }
            if c.pct(2) {
                cmd = cmd.a("13.0");
            }
            cmd
        }
        1 => {
            let mut cmd = Cmd::new("GEODIST").a(key(c)).a(member(c)).a(member(c));
            if c.pct(70) {
                cmd = cmd.a(unit(c));
            }
            cmd
        }
        2 | 3 => {
            let n = c.range(0, 4);
            let name: &&str = c.pick(&["GEOHASH", "GEOPOS"]);
            let mut cmd = Cmd::new(name).a(key(c));
            for _ in 0..n {
                cmd = cmd.a(member(c));
            }
            cmd
        }
        4 | 5 => {
            let ro = c.pct(40);
            let by_member = c.pct(45);
            let name = match (by_member, ro) {
                (false, false) => "GEORADIUS",
                (false, true) => "GEORADIUS_RO",
                (true, false) => "GEORADIUSBYMEMBER",
                (true, true) => "GEORADIUSBYMEMBER_RO",
            };
            let mut cmd = Cmd::new(name).a(key(c));
            cmd = if by_member {
                cmd.a(member(c))
            } else {
                cmd.all(center(c))
            };
            cmd = cmd.a(distance(c)).a(unit(c));
            let store = !ro && c.pct(30) || c.pct(3);
            let with = !store || c.pct(10);
            cmd = add_options(cmd, options(c, with));
            if store {
                cmd = cmd.a(c.pick(&["STORE", "STOREDIST"])).a(key(c));
            }
            cmd
        }
        6 | 7 => {
            let store = c.below(2) == 1 && c.pct(90);
            let cmd = if store {
                Cmd::new("GEOSEARCHSTORE").a(key(c)).a(key(c))
            } else {
                Cmd::new("GEOSEARCH").a(key(c))
            };
            let mut parts: Vec<Vec<String>> = Vec::new();
            match c.below(12) {
                0..=5 => {
                    let mut v = vec!["FROMLONLAT".to_string()];
                    v.extend(center(c));
                    parts.push(v)
                }
                6..=10 => parts.push(vec![
                    "FROMMEMBER".into(),
                    String::from_utf8(member(c)).unwrap_or_default(),
                ]),
                _ => {}
            }
            match c.below(12) {
                0..=5 => parts.push(vec!["BYRADIUS".into(), distance(c), unit(c).into()]),
                6..=10 => parts.push(vec![
                    "BYBOX".into(),
                    distance(c),
                    distance(c),
                    unit(c).into(),
                ]),
                _ => {}
            }
            let with = !store || c.pct(10);
            parts.extend(options(c, with));
            if store && c.pct(30) {
                parts.push(vec!["STOREDIST".into()]);
            }
            if c.pct(3) {
                parts.push(vec![c.pick(&["STORE", "FROMMEMBER", "BYBOX"]).to_string()]);
            }
            if c.pct(80) {
                // The FROM and BY parts usually come first, as people write them.
                let tail = parts.split_off(parts.len().min(2));
                c.shuffle(&mut parts);
                parts.extend(tail);
            } else {
                c.shuffle(&mut parts);
            }
            add_options(cmd, parts)
        }
        8 => Cmd::new("ZRANGE")
            .a(key(c))
            .a("0")
            .a("-1")
            .a("WITHSCORES")
            .cmp(Cmp::Exact),
        9 => Cmd::new("ZREM").a(key(c)).a(member(c)),
        10 => {
            // Scores GEOADD never writes, each for its own member (no two at one spot).
            let (score, m) = *c.pick(&[
                ("-1", "r0"),
                ("0", "r1"),
                ("4503599627370496", "r2"),
                ("1e300", "r3"),
                ("3.5", "r4"),
                ("-inf", "r5"),
            ]);
            Cmd::new("ZADD").a(key(c)).a(score).a(m)
        }
        _ => Cmd::new("DEL").a(key(c)),
    }
}

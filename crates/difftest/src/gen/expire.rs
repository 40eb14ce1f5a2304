//! The expiry family: setting, reading and removing TTLs.
//!
//! Relative TTLs are at least 100 s so nothing expires by itself during a run; the only keys
//! that expire do so at once (a zero or negative relative TTL, an absolute time in the past).

use super::{Arg, Cmd, Cmp, Ctx, Family};

pub const FAMILY: Family = Family {
    name: "expire",
    weight: 6,
    gen,
};

/// NX/XX/GT/LT flags: usually none or one, sometimes an incompatible pair or junk.
fn flags(c: &mut Ctx, mut cmd: Cmd) -> Cmd {
    match c.below(20) {
        0..=7 => {}
        8..=9 => cmd = cmd.a("NX"),
        10..=11 => cmd = cmd.a("XX"),
        12..=13 => cmd = cmd.a("GT"),
        14..=15 => cmd = cmd.a("LT"),
        16 => cmd = cmd.a(if c.pct(50) { "nx" } else { "gt" }),
        17 => {
            let pairs = [
                ("NX", "XX"),
                ("GT", "LT"),
                ("NX", "GT"),
                ("XX", "GT"),
                ("XX", "LT"),
            ];
            let (a, b) = *c.pick(&pairs);
            cmd = cmd.a(a).a(b);
        }
        18 => cmd = cmd.a("FOO"),
        _ => cmd = cmd.a("XX").a("XX"),
    }
    cmd
}

/// A relative amount in seconds (or ms when `ms`), mostly long, sometimes immediate or junk.
fn relative(c: &mut Ctx, ms: bool) -> Arg {
    let scale = if ms { 1000 } else { 1 };
    let v: Vec<u8> = match c.below(20) {
        0..=14 => (c.ttl_secs() * scale + if ms { c.range(0, 999) } else { 0 })
            .to_string()
            .into_bytes(),
        15 => b"0".to_vec(),
        16 => c.range(-100_000, -1).to_string().into_bytes(),
        17 => c.not_an_int(),
        18 => b"9223372036854775807".to_vec(),
        _ => b"-9223372036854775808".to_vec(),
    };
    Arg::Lit(v)
}

/// An absolute time in seconds (or ms), mostly in the future, sometimes in the past or junk.
fn absolute(c: &mut Ctx, ms: bool) -> Arg {
    match c.below(20) {
        0..=13 => {
            let s = c.ttl_secs();
            if ms {
                Arg::MsFromNow(s * 1000 + c.range(0, 999))
            } else {
                Arg::SecsFromNow(s)
            }
        }
        14 | 15 => {
            let s = c.range(10, 1_000_000);
            if ms {
                Arg::MsFromNow(-s * 1000)
            } else {
                Arg::SecsFromNow(-s)
            }
        }
        16 => Arg::Lit(c.pick(&["0", "1", "-1"]).as_bytes().to_vec()),
        17 => Arg::Lit(c.not_an_int()),
        18 => Arg::Lit(b"9223372036854775807".to_vec()),
        _ => Arg::Lit(b"-9223372036854775808".to_vec()),
    }
}

fn gen(c: &mut Ctx) -> Cmd {
    let weights = [
        10, // 0 EXPIRE
        6,  // 1 PEXPIRE
        6,  // 2 EXPIREAT
        5,  // 3 PEXPIREAT
        10, // 4 TTL
        8,  // 5 PTTL
        4,  // 6 EXPIRETIME
        4,  // 7 PEXPIRETIME
        6,  // 8 PERSIST
        10, // 9 SET (plain or with an expiry) so targets exist
        2,  // 10 SETEX
    ];
    match c.weighted(&weights) {
        0 => {
            let cmd = Cmd::new("EXPIRE").a(c.hot_key()).arg(relative(c, false));
            flags(c, cmd)
        }
        1 => {
            let cmd = Cmd::new("PEXPIRE").a(c.hot_key()).arg(relative(c, true));
            flags(c, cmd)
        }
        2 => {
            let cmd = Cmd::new("EXPIREAT").a(c.hot_key()).arg(absolute(c, false));
            flags(c, cmd)
        }
        3 => {
            let cmd = Cmd::new("PEXPIREAT").a(c.hot_key()).arg(absolute(c, true));
            flags(c, cmd)
        }
        4 => Cmd::new("TTL").a(c.hot_key()).cmp(Cmp::Tolerance(1)),
        5 => Cmd::new("PTTL").a(c.hot_key()).cmp(Cmp::Tolerance(250)),
        6 => Cmd::new("EXPIRETIME").a(c.hot_key()).cmp(Cmp::Tolerance(1)),
        7 => Cmd::new("PEXPIRETIME")
            .a(c.hot_key())
            .cmp(Cmp::Tolerance(250)),
        8 => Cmd::new("PERSIST").a(c.hot_key()),
        9 => {
            let cmd = Cmd::new("SET").a(c.hot_str_key()).a(c.value());
            if c.pct(50) {
                let secs = c.ttl_secs();
                match c.below(4) {
                    0 => cmd.a("EX").i(secs),
                    1 => cmd.a("PX").i(secs * 1000),
                    2 => cmd.a("EXAT").arg(Arg::SecsFromNow(secs)),
                    _ => cmd.a("PXAT").arg(Arg::MsFromNow(secs * 1000)),
                }
            } else {
                cmd
            }
        }
        _ => Cmd::new("SETEX")
            .a(c.hot_str_key())
            .i(c.ttl_secs())
            .a(c.value()),
    }
}

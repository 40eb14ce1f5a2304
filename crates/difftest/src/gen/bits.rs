//! The bits family: BITOP and BITFIELD/BITFIELD_RO over a few string keys, with SETBIT, SET
//! and GET around them so every change is read back byte for byte.

use super::{Cmd, Ctx, Family};

pub const FAMILY: Family = Family {
    name: "bits",
    weight: 8,
    gen,
};

/// Keys the bit commands prefer (strings of the strings family too, so they meet counters,
/// text and other types).
pub const HOME: &[&str] = &["bits", "foo", "foobar", "k:1", "bits2"];

fn key(c: &mut Ctx) -> Vec<u8> {
    c.key_in(HOME)
}

/// A field type: mostly valid, sometimes out of range or malformed.
fn field_type(c: &mut Ctx) -> Vec<u8> {
    match c.below(20) {
        0..=8 => format!("i{}", c.range(1, 64)).into_bytes(),
        9..=16 => format!("u{}", c.range(1, 63)).into_bytes(),
        17 => c.pick(&["u64", "i65", "i0", "u0"]).as_bytes().to_vec(),
        18 => c
            .pick(&["I8", "x8", "", "i", "u-1", "i8x"])
            .as_bytes()
            .to_vec(),
        _ => b"i64".to_vec(),
    }
}

/// A field offset: bits or `#n`, mostly small so fields overlap. The largest valid offsets
/// (a 512 MB string) only for reads: a write there makes both servers allocate it.
fn offset(c: &mut Ctx, write: bool) -> Vec<u8> {
    match c.below(20) {
        0..=11 => c.range(0, 100).to_string().into_bytes(),
        12..=16 => format!("#{}", c.range(0, 12)).into_bytes(),
        17 => c.range(0, 4000).to_string().into_bytes(),
        18 => c
            .pick(&["-1", "#-1", "4294967296", "x", "##1", "#"])
            .as_bytes()
            .to_vec(),
        _ if write => b"4294967296".to_vec(),
        _ => b"4294967295".to_vec(),
    }
}

/// A SET/INCRBY value: small, at the limits of some width, or not an integer.
fn value(c: &mut Ctx) -> Vec<u8> {
    match c.below(20) {
        0..=9 => c.range(-300, 300).to_string().into_bytes(),
        10..=14 => {
            let bits = c.range(1, 63);
            // 1 << 63 is i64::MIN: wrap, so every width's edge (either sign) is drawn.
            let v = 1i64 << bits;
            v.wrapping_add(c.range(-2, 1)).to_string().into_bytes()
        }
        15 => (1i64 << c.range(1, 63))
            .wrapping_neg()
            .wrapping_add(c.range(-1, 1))
            .to_string()
            .into_bytes(),
        16 => c
            .pick(&["9223372036854775807", "-9223372036854775808"])
            .as_bytes()
            .to_vec(),
        17 => c.edge_int_str(),
        18 => c.not_an_int(),
        _ => c.u64().to_string().into_bytes(),
    }
}

fn bitfield(c: &mut Ctx, name: &str, writes: bool) -> Cmd {
    let mut cmd = Cmd::new(name).a(key(c));
    let n = c.below(5);
    for _ in 0..n {
        match c.below(if writes { 10 } else { 4 }) {
            0..=2 => cmd = cmd.a("GET").a(field_type(c)).a(offset(c, false)),
            3 => {
                if c.pct(50) {
                    cmd = cmd
                        .a("OVERFLOW")
                        .a(c.pick(&["WRAP", "SAT", "FAIL", "fail", "nope"]));
                } else {
                    cmd = cmd.a("SET").a(field_type(c)).a(offset(c, true)).a(value(c));
                }
            }
            4..=5 => cmd = cmd.a("SET").a(field_type(c)).a(offset(c, true)).a(value(c)),
            6..=7 => {
                cmd = cmd
                    .a("INCRBY")
                    .a(field_type(c))
                    .a(offset(c, true))
                    .a(value(c))
            }
            _ => {
                cmd = cmd
                    .a("OVERFLOW")
                    .a(c.pick(&["WRAP", "SAT", "FAIL", "sat", "bad"]))
            }
        }
    }
    if c.pct(3) {
        // A subcommand cut short, or an unknown one.
        cmd = cmd.a(c.pick(&["GET", "SET", "INCRBY", "OVERFLOW", "NOPE"]));
    }
    cmd
}

fn gen(c: &mut Ctx) -> Cmd {
    let weights = [
        10, // 0 BITFIELD
        4,  // 1 BITFIELD_RO
        8,  // 2 BITOP
        8,  // 3 GET
        4,  // 4 SETBIT
        3,  // 5 SET
        2,  // 6 BITCOUNT
        1,  // 7 DEL
    ];
    match c.weighted(&weights) {
        0 => bitfield(c, "BITFIELD", true),
        1 => {
            let writes = c.pct(10);
            bitfield(c, "BITFIELD_RO", writes)
        }
        2 => {
            let op = match c.below(20) {
                0..=4 => "AND",
                5..=9 => "OR",
                10..=14 => "XOR",
                15..=18 => "NOT",
                _ => *c.pick(&["nand", "and\0", "", "or"]),
            };
            let srcs = if op == "NOT" && c.pct(85) {
                1
            } else {
                c.range(1, 4) as u64
            };
            let mut cmd = Cmd::new("BITOP").a(op).a(key(c));
            for _ in 0..srcs {
                cmd = cmd.a(key(c));
            }
            cmd
        }
        3 => Cmd::new("GET").a(key(c)),
        4 => Cmd::new("SETBIT")
            .a(key(c))
            .i(c.range(0, 300))
            .a(c.pick(&["0", "1"])),
        5 => {
            let v = if c.pct(50) { c.binary() } else { c.value() };
            Cmd::new("SET").a(key(c)).a(v)
        }
        6 => Cmd::new("BITCOUNT").a(key(c)),
        _ => Cmd::new("DEL").a(key(c)),
    }
}

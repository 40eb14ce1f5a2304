//! The generic keys family: DEL, UNLINK, EXISTS, TOUCH, TYPE, KEYS, SCAN, RENAME, RENAMENX,
//! RANDOMKEY, COPY, OBJECT.

use bytes::Bytes;

use super::{Cmd, Gen, ScanArgs, Tag};

const PATTERNS: &[&str] = &[
    "*", "k*", "f?", "*1*", "[kf]1", "k[0-3]", "k[^0-3]*", "?", "\\*", "k1?", "*0", "[f]*",
];

pub fn gen(g: &mut Gen) -> Cmd {
    match g.rng.weighted(&[
        8, // del / unlink
        8, // exists / touch
        4, // type
        3, // keys
        6, // scan
        5, // rename / renamenx
        3, // randomkey
        4, // copy
        4, // object
    ]) {
        0 => {
            let mut c = Cmd::new(if g.pct(70) { "DEL" } else { "UNLINK" });
            for _ in 0..g.range(1, 3) {
                c = c.a(g.any_key());
            }
            c
        }
        1 => {
            let mut c = Cmd::new(if g.pct(70) { "EXISTS" } else { "TOUCH" });
            let k = g.any_key();
            c = c.a(k);
            for _ in 0..g.range(0, 2) {
                // Repeats count twice.
                c = c.a(if g.pct(30) { k } else { g.any_key() });
            }
            c
        }
        2 => Cmd::new("TYPE").a(g.any_key()),
        3 => Cmd::new("KEYS").a(g.pick(PATTERNS)),
        4 => scan(g),
        5 => {
            let name = if g.pct(60) { "RENAME" } else { "RENAMENX" };
            let (src, dst) = src_dst(g);
            Cmd::new(name).a(src).a(dst)
        }
        6 => Cmd::new("RANDOMKEY"),
        7 => {
            let (src, dst) = src_dst(g);
            let c = Cmd::new("COPY").a(src).a(dst);
            match g.range(0, 9) {
                0..=4 => c,
                5..=6 => c.a("REPLACE"),
                7 => c.a("DB").a(0i64).a("REPLACE"),
                8 => c.a("DB").a(g.pick(&["1", "x"])),
                _ => c.a("NOPE"),
            }
        }
        _ => {
            let sub = g.pick(&["ENCODING", "REFCOUNT", "IDLETIME", "FREQ", "encoding"]);
            if g.pct(3) {
                return Cmd::new("OBJECT").a("HELP");
            }
            Cmd::new("OBJECT").a(sub).a(g.any_key())
        }
    }
}

/// A source and destination that keep float keys exact: a float key only receives from
/// another float key.
fn src_dst(g: &mut Gen) -> (&'static str, &'static str) {
    let src = g.any_key();
    let dst = if Gen::is_float_key(src) {
        g.any_key()
    } else if g.pct(5) {
        src
    } else {
        g.general_key()
    };
    (src, dst)
}

fn scan(g: &mut Gen) -> Cmd {
    if let Some((cursor, args)) = g.scan_next {
        if !g.scan_busy {
            let mut c = Cmd::new("SCAN").a(cursor.clone());
            for a in &args.tail {
                c = c.a(a.clone());
            }
            return c.tag(Tag::Scan(args.clone()));
        }
    }
    if g.scan_busy {
        return Cmd::new("DBSIZE");
    }
    let mut tail: Vec<Bytes> = Vec::new();
    if g.pct(40) {
        tail.push(Bytes::from_static(b"MATCH"));
        tail.push(Bytes::from_static(g.pick(PATTERNS).as_bytes()));
    }
    if g.pct(60) {
        tail.push(Bytes::from_static(b"COUNT"));
        tail.push(Bytes::from(g.range(1, 5).to_string()));
    }
    if g.pct(15) {
        tail.push(Bytes::from_static(b"TYPE"));
        tail.push(Bytes::from_static(
            g.pick(&["string", "list", "STRING"]).as_bytes(),
        ));
    }
    if g.pct(2) {
        return Cmd::new("SCAN").a(g.pick(&["abc", "-1"]));
    }
    let mut c = Cmd::new("SCAN").a("0");
    for a in &tail {
        c = c.a(a.clone());
    }
    c.tag(Tag::Scan(ScanArgs { tail }))
}

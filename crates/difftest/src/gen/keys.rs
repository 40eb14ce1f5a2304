//! The keys family: generic keyspace commands.

use super::{Cmd, Cmp, Ctx, Family};

pub const FAMILY: Family = Family {
    name: "keys",
    weight: 6,
    gen,
};

/// Glob patterns for KEYS and SCAN MATCH, including escapes, classes, negation, ranges and
/// malformed patterns.
const PATTERNS: &[&str] = &[
    "*",
    "foo*",
    "*o*",
    "k:?",
    "k:*",
    "a?",
    "a*c",
    "[ab]*",
    "[^f]*",
    "[a-c]*",
    "h\\[e\\]llo",
    "h[e]llo",
    "x\\*y",
    "x*y",
    "*:1*",
    "nomatch*",
    "?",
    "???",
    "user:[12]",
    "[!f]*",
    "foo[",
    "foo\\",
    "*\\",
    "{t}*",
    "\\{t\\}z",
    "[z-a]*",
    "*[0-9]",
    "k:1?",
    "",
    "**",
    "f*o*o*",
    "[]",
    "[\\]]*",
    "FOO*",
];

fn pattern(c: &mut Ctx) -> Vec<u8> {
    c.pick(PATTERNS).as_bytes().to_vec()
}

fn scan(c: &mut Ctx) -> Cmd {
    if c.pct(8) {
        // Bad cursors and bad options. Still a full iteration (which stops at the first
        // error), so a reply that is not an error is never compared cursor by cursor.
        let cmd = match c.below(5) {
            0 => Cmd::new("SCAN").a("abc"),
            1 => Cmd::new("SCAN").a("1x"),
            2 => Cmd::new("SCAN")
                .a("0")
                .a("COUNT")
                .a(c.int_or_bad(-1, 0, 50)),
            3 => Cmd::new("SCAN").a("0").a("MATCH"),
            _ => Cmd::new("SCAN").a("0").a("FOO").a("bar"),
        };
        return cmd.cmp(Cmp::ScanAll);
    }
    let mut cmd = Cmd::new("SCAN").a("0").cmp(Cmp::ScanAll);
    let mut opts: Vec<Vec<Vec<u8>>> = Vec::new();
    if c.pct(50) {
        opts.push(vec![b"MATCH".to_vec(), pattern(c)]);
    }
    if c.pct(50) {
        opts.push(vec![
            b"COUNT".to_vec(),
            c.range(1, 30).to_string().into_bytes(),
        ]);
    }
    if c.pct(25) {
        let t = ["string", "list", "hash", "set", "zset", "none", "STRING"];
        opts.push(vec![b"TYPE".to_vec(), c.pick(&t).as_bytes().to_vec()]);
    }
    c.shuffle(&mut opts);
    for o in opts {
        cmd = cmd.all(o);
    }
    cmd
}

fn gen(c: &mut Ctx) -> Cmd {
    let weights = [
        8,  // 0 DEL
        3,  // 1 UNLINK
        8,  // 2 EXISTS
        6,  // 3 TYPE
        6,  // 4 KEYS
        5,  // 5 SCAN
        5,  // 6 RENAME
        4,  // 7 RENAMENX
        3,  // 8 RANDOMKEY
        3,  // 9 TOUCH
        5,  // 10 COPY
        3,  // 11 DBSIZE
        2,  // 12 no-argument variants (arity errors)
        10, // 13 SET (keeps the keyspace populated)
    ];
    match c.weighted(&weights) {
        0 => Cmd::new("DEL").all(c.keys(1, 4)),
        1 => Cmd::new("UNLINK").all(c.keys(1, 4)),
        2 => Cmd::new("EXISTS").all(c.keys(1, 5)),
        3 => Cmd::new("TYPE").a(c.key()),
        4 => Cmd::new("KEYS").a(pattern(c)).cmp(Cmp::Sorted),
        5 => scan(c),
        6 => Cmd::new("RENAME").a(c.key()).a(c.key()),
        7 => Cmd::new("RENAMENX").a(c.key()).a(c.key()),
        8 => Cmd::new("RANDOMKEY").cmp(Cmp::NilOrNot),
        9 => Cmd::new("TOUCH").all(c.keys(1, 4)),
        10 => {
            let mut cmd = Cmd::new("COPY").a(c.key()).a(c.key());
            let mut opts: Vec<Vec<Vec<u8>>> = Vec::new();
            if c.pct(40) {
                opts.push(vec![b"REPLACE".to_vec()]);
            }
            if c.pct(5) {
                opts.push(vec![b"DB".to_vec(), b"0".to_vec()]);
            }
            if c.pct(4) {
                opts.push(vec![b"DB".to_vec(), c.not_an_int()]);
            }
            if c.pct(4) {
                opts.push(vec![b"BOGUS".to_vec()]);
            }
            c.shuffle(&mut opts);
            for o in opts {
                cmd = cmd.all(o);
            }
            cmd
        }
        11 => Cmd::new("DBSIZE"),
        12 => {
            let names = [
                "DEL", "EXISTS", "TYPE", "KEYS", "RENAME", "TOUCH", "COPY", "UNLINK",
            ];
            let name = c.pick(&names[..]);
            Cmd::new(name)
        }
        _ => Cmd::new("SET").a(c.str_key()).a(c.value()),
    }
}

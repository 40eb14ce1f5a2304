//! Seeded command generation.
//!
//! Every family (strings, keys, expiry, and later lists, hashes, ...) lives in its own module
//! and exposes one [`Family`]: a name and a function that draws one [`Cmd`] from a [`Ctx`].
//! The context owns the only source of randomness (a ChaCha8 stream seeded from `--seed`) and
//! the shared keyspace, so two runs with the same seed and families produce the same commands.
//!
//! Keys come from one small pool shared by all families: once container families exist, a key
//! written by one family will be read by another and type clashes (`WRONGTYPE`) happen.

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub mod expire;
pub mod keys;
pub mod strings;

/// How the replies of one command are compared (see `reply::equivalent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// Same reply (errors by first word).
    Exact,
    /// The top-level array is compared as a multiset (KEYS, SMEMBERS-like replies).
    Sorted,
    /// Non-negative integers may differ by `tol`; negative ones (-1, -2) must be equal.
    Tolerance(i64),
    /// Only nil versus non-nil matters (RANDOMKEY).
    NilOrNot,
    /// Not compared at all (TIME).
    Skip,
    /// A SCAN command: the runner iterates the cursor to 0 on each side and compares the
    /// sorted union of the returned keys. Argument 1 is the cursor and is replaced.
    ScanAll,
}

/// One argument. Absolute timestamps are generated as offsets from "now" and resolved once per
/// command at send time, so both servers receive the same bytes and runs stay reproducible.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    Lit(Vec<u8>),
    /// Unix time in seconds, now + offset.
    SecsFromNow(i64),
    /// Unix time in milliseconds, now + offset.
    MsFromNow(i64),
}

impl Arg {
    pub fn resolve(&self, now_ms: i64) -> Vec<u8> {
        match self {
            Arg::Lit(b) => b.clone(),
            Arg::SecsFromNow(off) => (now_ms / 1000 + off).to_string().into_bytes(),
            Arg::MsFromNow(off) => (now_ms + off).to_string().into_bytes(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cmd {
    pub args: Vec<Arg>,
    pub cmp: Cmp,
}

impl Cmd {
    pub fn new(name: &str) -> Cmd {
        Cmd {
            args: vec![Arg::Lit(name.as_bytes().to_vec())],
            cmp: Cmp::Exact,
        }
    }

    /// Appends a literal argument.
    pub fn a(mut self, arg: impl AsRef<[u8]>) -> Cmd {
        self.args.push(Arg::Lit(arg.as_ref().to_vec()));
        self
    }

    /// Appends an integer argument.
    pub fn i(self, n: i64) -> Cmd {
        self.a(n.to_string())
    }

    /// Appends several literal arguments.
    pub fn all<T: AsRef<[u8]>>(mut self, args: impl IntoIterator<Item = T>) -> Cmd {
        for a in args {
            self.args.push(Arg::Lit(a.as_ref().to_vec()));
        }
        self
    }

    pub fn arg(mut self, arg: Arg) -> Cmd {
        self.args.push(arg);
        self
    }

    pub fn cmp(mut self, cmp: Cmp) -> Cmd {
        self.cmp = cmp;
        self
    }

    pub fn resolve(&self, now_ms: i64) -> Vec<Vec<u8>> {
        self.args.iter().map(|a| a.resolve(now_ms)).collect()
    }
}

/// A command family: one module of the generator.
pub struct Family {
    pub name: &'static str,
    pub gen: fn(&mut Ctx) -> Cmd,
}

/// Every known family, in the order used by default.
pub const ALL: &[Family] = &[strings::FAMILY, keys::FAMILY, expire::FAMILY];

pub fn family_names() -> Vec<&'static str> {
    ALL.iter().map(|f| f.name).collect()
}

/// The shared keyspace. A few names contain glob metacharacters so KEYS/SCAN MATCH patterns
/// with escapes have something to hit.
pub const KEYS: &[&str] = &[
    "foo",
    "foo1",
    "foo2",
    "foobar",
    "bar",
    "baz",
    "a",
    "ab",
    "abc",
    "k:1",
    "k:2",
    "k:10",
    "user:1",
    "user:2",
    "num",
    "cnt",
    "bits",
    "h[e]llo",
    "x*y",
    "{t}z",
    "",
    "\x00\u{7f}k\n",
];

const WORDS: &[&str] = &[
    "hello",
    "world",
    "foo",
    "bar",
    "ohmytext",
    "mynewtext",
    "abcde",
    "lattice",
    "redis",
    "x",
    "a b c",
    "The quick brown fox",
];

/// Random source plus helpers shared by the families.
pub struct Ctx {
    rng: ChaCha8Rng,
}

impl Ctx {
    pub fn new(seed: u64) -> Ctx {
        Ctx {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    pub fn u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        self.u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        debug_assert!(lo <= hi);
        let span = (hi as i128 - lo as i128 + 1) as u128;
        (lo as i128 + (self.u64() as u128 % span) as i128) as i64
    }

    /// True with probability `p` percent.
    pub fn pct(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }

    /// Picks an index with the given weights.
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut r = self.below(total);
        for (i, &w) in weights.iter().enumerate() {
            if r < w {
                return i;
            }
            r -= w;
        }
        weights.len() - 1
    }

    pub fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            xs.swap(i, j);
        }
    }

    pub fn key(&mut self) -> Vec<u8> {
        self.pick(KEYS).as_bytes().to_vec()
    }

    /// A key from a few "hot" names, so TTL reads meet TTL writes more often.
    pub fn hot_key(&mut self) -> Vec<u8> {
        if self.pct(50) {
            self.pick(&KEYS[..6]).as_bytes().to_vec()
        } else {
            self.key()
        }
    }

    /// A key that usually holds a number (counter commands target these half the time).
    pub fn counter_key(&mut self) -> Vec<u8> {
        if self.pct(50) {
            self.pick(&["num", "cnt"]).as_bytes().to_vec()
        } else {
            self.key()
        }
    }

    /// `lo..=hi` keys, possibly repeated.
    pub fn keys(&mut self, lo: u64, hi: u64) -> Vec<Vec<u8>> {
        let n = lo + self.below(hi - lo + 1);
        (0..n).map(|_| self.key()).collect()
    }

    /// A value: integers, edge integers, floats, empty strings, binary bytes and text.
    pub fn value(&mut self) -> Vec<u8> {
        match self.weighted(&[25, 6, 10, 6, 13, 40]) {
            0 => self.range(-1000, 1000).to_string().into_bytes(),
            1 => self.edge_int_str(),
            2 => self.float_str(),
            3 => Vec::new(),
            4 => self.binary(),
            _ => self.text(),
        }
    }

    /// Strings at and around the i64 limits, and almost-integers.
    pub fn edge_int_str(&mut self) -> Vec<u8> {
        const EDGES: &[&str] = &[
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775806",
            "-9223372036854775807",
            "9223372036854775808",
            "-9223372036854775809",
            "0",
            "-0",
            "007",
            " 1",
            "1 ",
            "+1",
            "1e3",
            "0x10",
            "4294967296",
        ];
        self.pick(EDGES).as_bytes().to_vec()
    }

    pub fn float_str(&mut self) -> Vec<u8> {
        const FLOATS: &[&str] = &[
            "1.5",
            "-2.25",
            "0.1",
            "3.0e2",
            "1e-3",
            ".5",
            "5.",
            "10.50",
            "-0.0",
            "inf",
            "-inf",
            "nan",
            "1e400",
            "3.14159",
            "1.7976931348623157e308",
            "0x1p3",
            " 2.5",
            "2.5 ",
        ];
        if self.pct(50) {
            self.pick(FLOATS).as_bytes().to_vec()
        } else {
            let whole = self.range(-1000, 1000);
            let frac = self.range(0, 9999);
            format!("{whole}.{frac}").into_bytes()
        }
    }

    pub fn binary(&mut self) -> Vec<u8> {
        let n = self.range(1, 12) as usize;
        if self.pct(20) {
            // All ones or all zeros: BITPOS/BITCOUNT edge cases.
            let b = if self.pct(50) { 0xff } else { 0x00 };
            return vec![b; n];
        }
        let mut v: Vec<u8> = (0..n).map(|_| self.below(256) as u8).collect();
        if self.pct(30) {
            v.extend_from_slice(b"\r\n\0");
        }
        v
    }

    pub fn text(&mut self) -> Vec<u8> {
        if self.pct(40) {
            self.pick(WORDS).as_bytes().to_vec()
        } else if self.pct(4) {
            // Now and then a longer value.
            let n = self.range(64, 700) as usize;
            (0..n).map(|_| b"abcdeXY"[self.below(7) as usize]).collect()
        } else {
            // A small alphabet so LCS, BITCOUNT and GETRANGE see structure.
            let n = self.range(1, 16) as usize;
            (0..n).map(|_| b"abcdeXY"[self.below(7) as usize]).collect()
        }
    }

    /// A positive TTL in seconds, long enough that nothing expires during a run.
    pub fn ttl_secs(&mut self) -> i64 {
        if self.pct(80) {
            self.range(100, 100_000)
        } else {
            self.range(100_000, 100_000_000)
        }
    }

    /// Something that is not a valid integer argument.
    pub fn not_an_int(&mut self) -> Vec<u8> {
        const BAD: &[&str] = &[
            "abc",
            "1.5",
            "",
            " 1",
            "1x",
            "9223372036854775808",
            "--1",
            "0x1",
            "01",
            "+1",
            "-0",
            "1e2",
        ];
        self.pick(BAD).as_bytes().to_vec()
    }

    /// A small integer argument in `lo..=hi`, or (with probability `bad` percent) garbage.
    pub fn int_or_bad(&mut self, lo: i64, hi: i64, bad: u64) -> Vec<u8> {
        if self.pct(bad) {
            self.not_an_int()
        } else {
            self.range(lo, hi).to_string().into_bytes()
        }
    }
}

/// Draws commands from the selected families.
pub struct Generator {
    ctx: Ctx,
    families: Vec<&'static Family>,
}

impl Generator {
    pub fn new(seed: u64, families: Vec<&'static Family>) -> Generator {
        assert!(!families.is_empty());
        Generator {
            ctx: Ctx::new(seed),
            families,
        }
    }

    pub fn next_cmd(&mut self) -> Cmd {
        if self.ctx.pct(1) && self.ctx.pct(50) {
            let n = self.ctx.below(3);
            let mut cmd = Cmd::new(if self.ctx.pct(50) {
                "NOSUCHCMD"
            } else {
                "getx"
            });
            for _ in 0..n {
                cmd = cmd.a(self.ctx.value());
            }
            return cmd;
        }
        let fam = self.families[self.ctx.below(self.families.len() as u64) as usize];
        let mut cmd = (fam.gen)(&mut self.ctx);
        // Command names are case-insensitive: mix the case now and then.
        if self.ctx.pct(5) {
            if let Arg::Lit(name) = &mut cmd.args[0] {
                for b in name.iter_mut() {
                    if self.ctx.pct(50) {
                        *b = b.to_ascii_lowercase();
                    }
                }
            }
        }
        // A modest rate of arity damage on top of the families' own bad-argument cases.
        if cmd.cmp != Cmp::ScanAll && self.ctx.pct(3) {
            if cmd.args.len() > 1 && self.ctx.pct(60) {
                let keep = 1 + self.ctx.below(cmd.args.len() as u64 - 1) as usize;
                cmd.args.truncate(keep);
            } else {
                cmd.args.push(Arg::Lit(b"extra".to_vec()));
            }
            if cmd.cmp == Cmp::NilOrNot {
                cmd.cmp = Cmp::Exact;
            }
        }
        cmd
    }
}

/// Looks families up by name.
pub fn select(names: &[String]) -> Result<Vec<&'static Family>, String> {
    let mut out = Vec::new();
    for n in names {
        let n = n.trim();
        if n.is_empty() {
            continue;
        }
        match ALL.iter().find(|f| f.name.eq_ignore_ascii_case(n)) {
            Some(f) => out.push(f),
            None => {
                return Err(format!(
                    "unknown family {n:?} (known: {})",
                    family_names().join(",")
                ))
            }
        }
    }
    if out.is_empty() {
        return Err("no families selected".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_commands() {
        let fams = select(&["strings".into(), "keys".into(), "expire".into()]).unwrap();
        let mut a = Generator::new(7, fams.clone());
        let mut b = Generator::new(7, fams);
        for _ in 0..2000 {
            assert_eq!(a.next_cmd(), b.next_cmd());
        }
    }

    #[test]
    fn different_seeds_differ() {
        let fams = select(&["strings".into()]).unwrap();
        let mut a = Generator::new(1, fams.clone());
        let mut b = Generator::new(2, fams);
        let va: Vec<Cmd> = (0..50).map(|_| a.next_cmd()).collect();
        let vb: Vec<Cmd> = (0..50).map(|_| b.next_cmd()).collect();
        assert_ne!(va, vb);
    }

    #[test]
    fn unknown_family_is_rejected() {
        assert!(select(&["strings".into(), "nope".into()]).is_err());
    }
}

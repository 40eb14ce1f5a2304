//! Seeded command generation.
//!
//! Every family (strings, keys, expiry, and later lists, hashes, ...) lives in its own module
//! and exposes one [`Family`]: a name and a function that draws one [`Cmd`] from a [`Ctx`].
//! The context owns the only source of randomness (a ChaCha8 stream seeded from `--seed`) and
//! the shared keyspace, so two runs with the same seed and families produce the same commands.
//!
//! Keys come from one small pool shared by all families, so a key written by one family is
//! read by another and type clashes (`WRONGTYPE`) happen. The container families prefer a few
//! "home" keys of their own so most of their commands also meet the right type.
//!
//! A family may emit a whole sequence (MULTI ... EXEC): it returns the first command and queues
//! the rest in [`Ctx::pending`]; the generator hands those out before drawing anything new.

use std::collections::VecDeque;

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub mod bits;
pub mod expire;
pub mod functions;
pub mod geo;
pub mod hashes;
pub mod hll;
pub mod keys;
pub mod lists;
pub mod ops;
pub mod sets;
pub mod sort;
pub mod strings;
pub mod tx;
pub mod zsets;

/// How the replies of one command are compared (see `reply::equivalent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// Same reply (errors by first word).
    Exact,
    /// The top-level array is compared as a multiset (KEYS, SMEMBERS-like replies).
    Sorted,
    /// Non-negative integers may differ by `tol`; negative ones (-1, -2) must be equal.
    Tolerance(i64),
    /// Only nil versus non-nil matters (RANDOMKEY, MEMORY USAGE).
    NilOrNot,
    /// Not compared at all (TIME).
    Skip,
    /// A SCAN command: the runner iterates the cursor to 0 on each side and compares the
    /// sorted union of the returned keys. Argument 1 is the cursor and is replaced.
    ScanAll,
    /// HSCAN/SSCAN/ZSCAN: like [`Cmp::ScanAll`] with the cursor in argument 2; with `pairs`
    /// the union is of (field, value) / (member, score) pairs.
    ScanKey { pairs: bool },
    /// A flat array of pairs (HGETALL) compared as a multiset of pairs.
    Pairs,
    /// Only the shape: same kind of reply, same array length (errors by first word, integers
    /// and nils exactly). For replies whose order or choice is not specified.
    Shape,
    /// A random pick (SRANDMEMBER, HRANDFIELD, ZRANDMEMBER): [`Cmp::Shape`], plus on each
    /// side every returned element (or pair, with `pairs`) must be in that side's
    /// [`Cmd::probe`] reply, and with `distinct` no element may repeat.
    Random { pairs: bool, distinct: bool },
    /// EXEC: element `i` of the reply is compared with `Cmd::sub[i]`.
    Exec,
}

impl Cmp {
    /// Whether the runner iterates a cursor for this command.
    pub fn is_scan(self) -> bool {
        matches!(self, Cmp::ScanAll | Cmp::ScanKey { .. })
    }
}

/// A condition checked on both sides right before a command runs; when it does not hold, the
/// command is skipped on both (it would do something Redis leaves unspecified).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// Argument `key` names a sorted set whose scores are all equal, or no sorted set: lex
    /// ranges over mixed scores depend on Redis's internal layout (even on the random levels
    /// of its skiplist), so two Redis servers disagree.
    UniformScores { key: usize },
}

/// A read-only command run on each side right after the command it belongs to; its reply is
/// the membership reference for [`Cmp::Random`] and is compared across the sides as well.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    pub args: Vec<Vec<u8>>,
    /// The reply is a flat array of pairs (HGETALL, ZRANGE ... WITHSCORES).
    pub pairs: bool,
}

impl Probe {
    pub fn new(args: &[&[u8]], pairs: bool) -> Probe {
        Probe {
            args: args.iter().map(|a| a.to_vec()).collect(),
            pairs,
        }
    }

    /// How the two sides' probe replies are compared.
    pub fn cmp(&self) -> Cmp {
        if self.pairs {
            Cmp::Pairs
        } else {
            Cmp::Sorted
        }
    }
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
    /// For [`Cmp::Exec`]: how the reply of each queued command is compared, in order.
    pub sub: Vec<Cmp>,
    /// For [`Cmp::Random`]: the membership reference.
    pub probe: Option<Probe>,
    /// Never damaged by the generator (a truncated `SPOP key 1000` would pop at random; a
    /// damaged EXEC would leave the connection inside MULTI).
    pub fixed: bool,
    /// Checked before the command runs (never queued inside MULTI, where it cannot be).
    pub guard: Option<Guard>,
    /// Commands run on both sides right before this one, their replies ignored (see
    /// [`ERRNO_RESET`]). Moved to the EXEC when the command is queued.
    pub pre: Vec<Vec<Vec<u8>>>,
}

/// A no-op (XX on a key that never exists) that makes Redis parse a double with `errno`
/// cleared first. Redis 7.0's numeric SORT tests `errno == ERANGE` after `strtod` without
/// clearing it, so a stale ERANGE left by an earlier command (`ZADD k 1e400 m`, or even a
/// successful `ZADD k 4.9e-324 m`) makes it fail with "One or more scores can't be converted
/// into double". Sent before every SORT so the comparison is about SORT itself.
pub const ERRNO_RESET: &[&str] = &["ZADD", "__difftest_errno__", "XX", "0", "x"];

impl Cmd {
    pub fn new(name: &str) -> Cmd {
        Cmd {
            args: vec![Arg::Lit(name.as_bytes().to_vec())],
            cmp: Cmp::Exact,
            sub: Vec::new(),
            probe: None,
            fixed: false,
            guard: None,
            pre: Vec::new(),
        }
    }

    /// The command name, uppercased.
    pub fn name(&self) -> String {
        match self.args.first() {
            Some(Arg::Lit(b)) => String::from_utf8_lossy(b).to_ascii_uppercase(),
            _ => String::new(),
        }
    }

    /// The literal argument `i` (empty for a timestamp or a missing argument).
    pub fn lit(&self, i: usize) -> &[u8] {
        match self.args.get(i) {
            Some(Arg::Lit(b)) => b,
            _ => &[],
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

    pub fn probe(mut self, probe: Probe) -> Cmd {
        self.probe = Some(probe);
        self
    }

    pub fn fixed(mut self) -> Cmd {
        self.fixed = true;
        self
    }

    /// Adds a command to run on both sides before this one (reply ignored).
    pub fn pre(mut self, args: &[&str]) -> Cmd {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        if !self.pre.contains(&args) {
            self.pre.push(args);
        }
        self
    }

    pub fn guard(mut self, guard: Guard) -> Cmd {
        self.guard = Some(guard);
        self
    }

    pub fn resolve(&self, now_ms: i64) -> Vec<Vec<u8>> {
        self.args.iter().map(|a| a.resolve(now_ms)).collect()
    }
}

/// A command family: one module of the generator.
pub struct Family {
    pub name: &'static str,
    /// Relative share of the commands drawn when several families are selected.
    pub weight: u64,
    pub gen: fn(&mut Ctx) -> Cmd,
}

/// Picks one of `fams` by weight.
pub fn pick_family(c: &mut Ctx, fams: &[&'static Family]) -> &'static Family {
    let weights: Vec<u64> = fams.iter().map(|f| f.weight).collect();
    fams[c.weighted(&weights)]
}

/// Every known family, in the order used by default.
pub const ALL: &[Family] = &[
    strings::FAMILY,
    keys::FAMILY,
    expire::FAMILY,
    lists::FAMILY,
    hashes::FAMILY,
    sets::FAMILY,
    zsets::FAMILY,
    sort::FAMILY,
    tx::FAMILY,
    bits::FAMILY,
    hll::FAMILY,
    geo::FAMILY,
    functions::FAMILY,
    ops::FAMILY,
];

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

/// Keys the string commands prefer.
const STRING_HOME: &[&str] = &["foo", "foobar", "num", "cnt", "bits", "k:1", "k:2"];

/// Keys the expiry commands prefer: strings first, then one of each container type.
const HOT: &[&str] = &["foo", "foobar", "foo1", "bar", "{t}z", "user:1"];

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

/// Members of lists, sets and sorted sets: numbers (so SORT and intsets have something to
/// work with), words that are also key names (SORT BY/GET `*`), and a few odd ones.
const MEMBERS: &[&str] = &[
    "1", "2", "3", "5", "10", "42", "-1", "0", "007", "1.5", "-2.5", "a", "b", "c", "d", "foo",
    "bar", "baz", "hello", "world", "x", "y", "z", "aa", "A", "Zed", "", "a b", "k:1", "inf",
];

/// Hash fields.
const FIELDS: &[&str] = &[
    "f1", "f2", "f3", "f4", "name", "age", "a", "b", "1", "2", "", "x y", "n",
];

/// Random source plus helpers shared by the families.
pub struct Ctx {
    rng: ChaCha8Rng,
    /// Commands of a sequence still to be handed out (see the module documentation).
    pub pending: VecDeque<Cmd>,
    /// The selected families (the transaction family draws queued commands from them).
    pub families: Vec<&'static Family>,
    /// Set while the transaction family draws commands to queue (blocking commands do not
    /// block inside MULTI, so their timeout may be 0 there).
    pub in_multi: bool,
}

impl Ctx {
    pub fn new(seed: u64) -> Ctx {
        Ctx {
            rng: ChaCha8Rng::seed_from_u64(seed),
            pending: VecDeque::new(),
            families: Vec::new(),
            in_multi: false,
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

    /// A key from a few "hot" names (one or two of each type), so TTL reads meet TTL writes
    /// more often.
    pub fn hot_key(&mut self) -> Vec<u8> {
        if self.pct(50) {
            self.pick(HOT).as_bytes().to_vec()
        } else {
            self.key()
        }
    }

    /// A hot key that usually holds a string (SET and SETEX of the expiry family).
    pub fn hot_str_key(&mut self) -> Vec<u8> {
        if self.pct(50) {
            self.pick(&HOT[..2]).as_bytes().to_vec()
        } else {
            self.str_key()
        }
    }

    /// A key the string commands prefer: the container families prefer others, so a string
    /// overwriting a container (and the WRONGTYPE replies after it) happens, but not all the
    /// time.
    pub fn str_key(&mut self) -> Vec<u8> {
        if self.pct(85) {
            self.pick(STRING_HOME).as_bytes().to_vec()
        } else {
            self.key()
        }
    }

    /// A key that usually holds a number (counter commands target these half the time).
    pub fn counter_key(&mut self) -> Vec<u8> {
        if self.pct(50) {
            self.pick(&["num", "cnt"]).as_bytes().to_vec()
        } else {
            self.str_key()
        }
    }

    /// `lo..=hi` keys, possibly repeated.
    pub fn keys(&mut self, lo: u64, hi: u64) -> Vec<Vec<u8>> {
        let n = lo + self.below(hi - lo + 1);
        (0..n).map(|_| self.key()).collect()
    }

    /// A key from `home` 85% of the time, otherwise from the whole pool.
    pub fn key_in(&mut self, home: &[&str]) -> Vec<u8> {
        if self.pct(85) {
            self.pick(home).as_bytes().to_vec()
        } else {
            self.key()
        }
    }

    /// `lo..=hi` keys drawn with [`Ctx::key_in`].
    pub fn keys_in(&mut self, home: &[&str], lo: u64, hi: u64) -> Vec<Vec<u8>> {
        let n = lo + self.below(hi - lo + 1);
        (0..n).map(|_| self.key_in(home)).collect()
    }

    /// A list/set/sorted-set member. No NUL bytes: Redis's SORT ALPHA compares with strcoll.
    pub fn member(&mut self) -> Vec<u8> {
        match self.below(40) {
            0..=33 => self.pick(MEMBERS).as_bytes().to_vec(),
            34..=37 => format!("m{}", self.below(200)).into_bytes(),
            38 => self.range(-20_000, 20_000).to_string().into_bytes(),
            _ => {
                // Longer than 64 bytes: no longer fits a listpack entry.
                let n = self.range(65, 90) as usize;
                (0..n).map(|_| b"abcxyz"[self.below(6) as usize]).collect()
            }
        }
    }

    /// `lo..=hi` members, possibly repeated; now and then a large batch that moves a small
    /// encoding (listpack, intset) to the big one.
    pub fn members(&mut self, lo: u64, hi: u64) -> Vec<Vec<u8>> {
        if self.pct(2) {
            let n = self.range(100, 160);
            let ints = self.pct(50);
            return (0..n)
                .map(|_| {
                    if ints {
                        self.below(1000).to_string().into_bytes()
                    } else {
                        format!("m{}", self.below(200)).into_bytes()
                    }
                })
                .collect();
        }
        let n = lo + self.below(hi - lo + 1);
        (0..n).map(|_| self.member()).collect()
    }

    /// A hash field.
    pub fn field(&mut self) -> Vec<u8> {
        if self.pct(92) {
            self.pick(FIELDS).as_bytes().to_vec()
        } else if self.pct(50) {
            format!("f{}", self.below(200)).into_bytes()
        } else {
            let n = self.range(65, 80) as usize;
            (0..n).map(|_| b"fgh"[self.below(3) as usize]).collect()
        }
    }

    /// A count argument of a popping or random command: mostly small, sometimes zero,
    /// negative, huge or junk.
    pub fn count_arg(&mut self) -> Vec<u8> {
        match self.below(20) {
            0..=11 => self.range(1, 6).to_string().into_bytes(),
            12 => b"0".to_vec(),
            13 | 14 => self.range(-6, -1).to_string().into_bytes(),
            15 => self.range(7, 300).to_string().into_bytes(),
            16 => self
                .pick(&["9223372036854775807", "-9223372036854775808", "4294967296"])
                .as_bytes()
                .to_vec(),
            _ => self.not_an_int(),
        }
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
        let mut ctx = Ctx::new(seed);
        ctx.families = families.clone();
        Generator { ctx, families }
    }

    pub fn next_cmd(&mut self) -> Cmd {
        if let Some(cmd) = self.ctx.pending.pop_front() {
            return cmd;
        }
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
        let fam = pick_family(&mut self.ctx, &self.families);
        let cmd = (fam.gen)(&mut self.ctx);
        if !self.ctx.pending.is_empty() {
            // The first command of a sequence: the family has done its own damage.
            return cmd;
        }
        damage(&mut self.ctx, cmd)
    }
}

/// Mixes the case of the command name now and then and, at a modest rate, damages the arity
/// (on top of the families' own bad-argument cases), adjusting the comparison to match.
pub fn damage(c: &mut Ctx, mut cmd: Cmd) -> Cmd {
    // Command names are case-insensitive: mix the case now and then.
    if c.pct(5) {
        if let Arg::Lit(name) = &mut cmd.args[0] {
            for b in name.iter_mut() {
                if c.pct(50) {
                    *b = b.to_ascii_lowercase();
                }
            }
        }
    }
    if cmd.fixed || cmd.cmp.is_scan() || cmd.cmp == Cmp::Exec {
        return cmd;
    }
    if c.pct(3) {
        if cmd.args.len() > 1 && c.pct(60) {
            let keep = 1 + c.below(cmd.args.len() as u64 - 1) as usize;
            cmd.args.truncate(keep);
        } else {
            cmd.args.push(Arg::Lit(b"extra".to_vec()));
        }
        match cmd.cmp {
            Cmp::NilOrNot => cmd.cmp = Cmp::Exact,
            // Without its count a random pick is a single element, with a different count a
            // different number of them: only the shape is left to compare.
            Cmp::Random { .. } => {
                cmd.cmp = Cmp::Shape;
                cmd.probe = None;
            }
            _ => {}
        }
        let name = cmd.name();
        if name == "SORT" || name == "SORT_RO" {
            cmd.cmp = sort::cmp_for(&cmd);
        }
    }
    cmd
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

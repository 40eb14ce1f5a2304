//! Command generators, one module per Redis command family.
//!
//! A family is a name and a function that draws one command from a [`Gen`]. Each run weights
//! the families from its seed (some runs leave some out: swarm testing). Keys come from one
//! small pool shared by every family so that commands collide:
//! - `k0`..`k11` hold anything (strings, integers, bitmaps; lists and hashes once those
//!   families exist, so type clashes happen),
//! - `f0`..`f3` only ever hold short exact numbers (or junk that is not a number), so that
//!   INCRBYFLOAT stays where the model computes exactly (see `model/float.rs`). Commands
//!   that could put anything else there (APPEND, SETRANGE, SETBIT, MSET, RENAME/COPY from a
//!   general key) never target them.

pub mod connection;
pub mod expire;
pub mod hashes;
pub mod keys;
pub mod lists;
pub mod pubsub;
pub mod server;
pub mod sets;
pub mod strings;
pub mod tx;
pub mod zsets;

use bytes::Bytes;

use crate::rng::Rand;

pub const GENERAL: &[&str] = &[
    "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "k10", "k11",
];
pub const FLOATS: &[&str] = &["f0", "f1", "f2", "f3"];

/// Values for general keys: integers (edge ones included), floats, text, binary, empty.
const VALUES: &[&str] = &[
    "",
    "v",
    "hello",
    "0",
    "1",
    "-1",
    "42",
    "100",
    "007",
    "3.5",
    "abc",
    "x",
    "foobar",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775806",
    "12345678901",
    "\u{0}\u{1}\u{ff}",
    " 1",
    "1e3",
    "héllo",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
];

/// Values for float keys: exact numbers in several spellings, and junk.
const FLOAT_VALUES: &[&str] = &[
    "0", "1", "2.5", "-7.75", "100", "1e2", "-0.125", "3", "abc", "",
];

/// What the client must remember about a request it sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tag {
    Plain,
    /// A SCAN step; the reply's cursor continues the iteration.
    Scan(ScanArgs),
    /// The node closes the connection after replying.
    Quit,
    ReplyOn,
    ReplyOff,
    ReplySkip,
    Reset,
    /// Bytes that are not RESP: the node replies with a protocol error and closes.
    Garbage,
}

/// A SCAN iteration's fixed arguments (the cursor aside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanArgs {
    pub tail: Vec<Bytes>,
}

pub struct Cmd {
    pub args: Vec<Bytes>,
    pub tag: Tag,
}

impl Cmd {
    pub fn new(name: &'static str) -> Cmd {
        Cmd {
            args: vec![Bytes::from_static(name.as_bytes())],
            tag: Tag::Plain,
        }
    }

    pub fn a(mut self, arg: impl Into<Arg>) -> Cmd {
        self.args.push(arg.into().0);
        self
    }

    pub fn tag(mut self, tag: Tag) -> Cmd {
        self.tag = tag;
        self
    }
}

/// An argument: static text, a number or owned bytes.
pub struct Arg(pub Bytes);

impl From<&'static str> for Arg {
    fn from(s: &'static str) -> Arg {
        Arg(Bytes::from_static(s.as_bytes()))
    }
}

impl From<i64> for Arg {
    fn from(n: i64) -> Arg {
        Arg(Bytes::from(n.to_string()))
    }
}

impl From<u64> for Arg {
    fn from(n: u64) -> Arg {
        Arg(Bytes::from(n.to_string()))
    }
}

impl From<String> for Arg {
    fn from(s: String) -> Arg {
        Arg(Bytes::from(s))
    }
}

impl From<Bytes> for Arg {
    fn from(b: Bytes) -> Arg {
        Arg(b)
    }
}

/// What a generator may look at: the randomness, the client's own clock and connection, and
/// where its SCAN iteration stands.
pub struct Gen<'a> {
    pub rng: &'a mut Rand,
    /// The client's wall clock, ms (not the node's: clocks are skewed).
    pub client_now_ms: u64,
    pub conn_id: u64,
    pub conn_addr: &'a str,
    /// The client's SCAN continuation, if an iteration is under way and none is in flight.
    pub scan_next: Option<&'a (Bytes, ScanArgs)>,
    /// A SCAN is in flight: do not start another.
    pub scan_busy: bool,
    /// Whether rare disruptive commands (QUIT, CLIENT KILL, FLUSHALL, garbage) are allowed.
    pub disruptive: bool,
    /// The connection is queueing a transaction: nothing whose reply the client must follow
    /// (HELLO, CLIENT REPLY, SCAN, subscriptions) may be queued.
    pub in_multi: bool,
    /// The connection holds subscriptions (in RESP2 only pub/sub commands run then).
    pub subscribed: bool,
    /// The next request's reply will be seen (no CLIENT REPLY OFF/SKIP in force): a random SPOP
    /// needs it to settle the model.
    pub replies_on: bool,
}

impl Gen<'_> {
    pub fn pct(&mut self, p: u32) -> bool {
        self.rng.pct(p)
    }

    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        self.rng.range_i(lo, hi)
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        *self.rng.pick(items)
    }

    pub fn general_key(&mut self) -> &'static str {
        self.pick(GENERAL)
    }

    pub fn float_key(&mut self) -> &'static str {
        self.pick(FLOATS)
    }

    /// Any key, float keys a quarter of the time.
    pub fn any_key(&mut self) -> &'static str {
        if self.pct(25) {
            self.float_key()
        } else {
            self.general_key()
        }
    }

    pub fn is_float_key(key: &str) -> bool {
        key.starts_with('f')
    }

    /// A value fit for `key`.
    pub fn value_for(&mut self, key: &str) -> Bytes {
        if Self::is_float_key(key) {
            Bytes::from_static(self.pick(FLOAT_VALUES).as_bytes())
        } else if self.pct(20) {
            // A fresh short string, to vary lengths and contents.
            let n = self.rng.range(1, 12) as usize;
            let s: Vec<u8> = (0..n)
                .map(|_| b"abcxyz0123"[self.rng.below(10) as usize])
                .collect();
            Bytes::from(s)
        } else {
            Bytes::from_static(self.pick(VALUES).as_bytes())
        }
    }
}

pub type GenFn = fn(&mut Gen) -> Cmd;

pub struct Family {
    pub name: &'static str,
    pub gen: GenFn,
}

pub const FAMILIES: &[Family] = &[
    Family {
        name: "strings",
        gen: strings::gen,
    },
    Family {
        name: "keys",
        gen: keys::gen,
    },
    Family {
        name: "expire",
        gen: expire::gen,
    },
    Family {
        name: "server",
        gen: server::gen,
    },
    Family {
        name: "connection",
        gen: connection::gen,
    },
    Family {
        name: "lists",
        gen: lists::gen,
    },
    Family {
        name: "hashes",
        gen: hashes::gen,
    },
    Family {
        name: "sets",
        gen: sets::gen,
    },
    Family {
        name: "zsets",
        gen: zsets::gen,
    },
    Family {
        name: "transactions",
        gen: tx::gen,
    },
    Family {
        name: "pubsub",
        gen: pubsub::gen,
    },
];

/// Index of the transactions family in [`FAMILIES`] (an open transaction is closed from it).
pub const TX_FAMILY: usize = 9;
/// Index of the pub/sub family in [`FAMILIES`] (a subscriber mostly speaks pub/sub).
pub const PUBSUB_FAMILY: usize = 10;

/// Whether `args` can be sent as an inline command (telnet style) and mean the same.
pub fn inline_safe(args: &[Bytes]) -> bool {
    args.iter().all(|a| {
        !a.is_empty()
            && a.iter()
                .all(|&c| c.is_ascii_graphic() && c != b'"' && c != b'\'')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_generates_well_formed_commands() {
        let mut rng = Rand::new(9);
        let scan = (Bytes::from_static(b"17"), ScanArgs { tail: vec![] });
        for fam in FAMILIES {
            for i in 0..2000 {
                let mut g = Gen {
                    rng: &mut rng,
                    client_now_ms: 1_700_000_000_000,
                    conn_id: 5,
                    conn_addr: "10.0.0.1:1000",
                    scan_next: if i % 2 == 0 { Some(&scan) } else { None },
                    scan_busy: i % 3 == 0,
                    disruptive: true,
                    in_multi: i % 5 == 0,
                    subscribed: i % 7 == 0,
                    replies_on: i % 11 != 0,
                };
                let c = (fam.gen)(&mut g);
                assert!(!c.args.is_empty(), "{}", fam.name);
                // Nothing but INCRBYFLOAT-safe writes reach float keys.
                let name = String::from_utf8_lossy(&c.args[0]).to_ascii_lowercase();
                let keys: Vec<&Bytes> = match name.as_str() {
                    "append" | "setrange" | "setbit" => vec![&c.args[1]],
                    "mset" | "msetnx" => c.args[1..].iter().step_by(2).collect(),
                    _ => vec![],
                };
                assert!(
                    !keys.iter().any(|k| k.starts_with(b"f")),
                    "{name} touches a float key: {:?}",
                    c.args
                );
            }
        }
    }
}

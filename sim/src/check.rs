//! Checkers.
//!
//! - Per reply: the model's [`Check`] for a request, verified against the frame the client
//!   decoded from its byte stream ([`Verifier::verify`]).
//! - Per step: `Node::check_invariants` on the node the step touched (the world calls it).
//! - End of run: liveness (in `world/checks.rs`) and, in replicated mode, the cluster checkers of
//!   `cluster.rs` (convergence, counters, sets, registers, lists) over the run's history.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use lattice_resp::Frame;

use crate::trace::show_frame;

/// What a reply must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Check {
    /// Exactly this frame.
    Exact(Frame),
    /// An array of exactly these bulk strings, in any order (KEYS).
    Unordered(Vec<Bytes>),
    /// These bulk strings in any order: an array, in RESP3 a set (SMEMBERS).
    Members {
        items: Vec<Bytes>,
        resp3: bool,
    },
    /// These field/value pairs in any order: a flat array, in RESP3 a map (HGETALL).
    Pairs {
        pairs: Vec<(Bytes, Bytes)>,
        resp3: bool,
    },
    /// One of the live keys, or a null exactly when there is none (RANDOMKEY).
    RandomKey(Vec<Bytes>),
    Scan(ScanCheck),
    /// An integer in `lo..=hi`.
    IntRange(i64, i64),
    /// Redis's answer, or an answer the node is known to give instead (a reported node bug,
    /// tolerated unless `--strict`). No divergence is outstanding today; the variant stays so
    /// the next one found can be recorded without hiding it.
    #[allow(dead_code)]
    Known {
        redis: Box<Check>,
        node: Box<Check>,
        bug: &'static str,
    },
    /// Text (a bulk string; in RESP3 a verbatim string when `verbatim`) containing every needle.
    Text {
        needles: Vec<Vec<u8>>,
        verbatim: bool,
    },
    /// INFO: text containing every needle and, when `keyspace` is given, a
    /// `db0:keys=..,expires=..` line within those bounds (absent when there are no keys). Redis
    /// 7 answers a verbatim string in RESP3 (`verbatim`).
    Info {
        needles: Vec<Vec<u8>>,
        keyspace: Option<KeyspaceBounds>,
        verbatim: bool,
    },
    /// CLIENT LIST: one line per connection, with exactly these ids.
    ClientList {
        ids: Vec<u64>,
        verbatim: bool,
    },
    /// The node must not reply (CLIENT REPLY SKIP/OFF); never queued.
    NoReply,
    /// The HELLO map.
    Hello {
        proto: i64,
        id: i64,
        resp3: bool,
    },
    /// A bulk string equal to one of these.
    OneOfBulk(Vec<&'static str>),
    /// An array of at least one element (HELP texts, COMMAND DOCS).
    NonEmpty,
    /// COMMAND INFO <name>: an array holding one command description named `name`.
    CommandInfo(Bytes),
    /// The node closes the connection here (QUIT, CLIENT KILL, protocol error).
    Close,
    /// Any reply but an error (replicated mode: reads whose value depends on what other
    /// replicas wrote concurrently; the history and the end-of-run checkers judge those).
    NotError,
    /// Exactly one of these frames.
    AnyOf(Vec<Frame>),
    /// An array whose elements pass these checks, in order (EXEC).
    Elements(Vec<Check>),
    /// Random picks from `pool` (ZRANDMEMBER): `n` elements, distinct when `distinct`, as
    /// members or, when `scores`, member/score pairs (nested pairs in RESP3, flat in RESP2).
    /// `single`: one bulk member (no count given), or a null when the pool is empty.
    Sample {
        pool: Vec<(Bytes, Frame)>,
        n: usize,
        distinct: bool,
        scores: bool,
        resp3: bool,
        single: bool,
        /// In RESP3 the picks come as a set (`~`) rather than an array.
        set: bool,
    },
    /// Model-internal: the reply is the pushes the command queued (SUBSCRIBE); never checked.
    Pushed,
}

impl Check {
    pub fn err(message: &str) -> Check {
        Check::Exact(Frame::Error(Bytes::copy_from_slice(message.as_bytes())))
    }

    /// The random-pick commands' shared contract (ZRANDMEMBER, HRANDFIELD, SRANDMEMBER): no
    /// count is one pick (or a null); a positive count that many distinct picks, at most the
    /// pool; a negative count exactly that many, repeats allowed (none from an empty pool).
    pub fn sample(
        pool: Vec<(Bytes, Frame)>,
        count: Option<i64>,
        pairs: bool,
        resp3: bool,
    ) -> Check {
        let (n, distinct) = match count {
            None => (1, true),
            Some(c) if c >= 0 => ((c as usize).min(pool.len()), true),
            Some(_) if pool.is_empty() => (0, true),
            Some(c) => (c.unsigned_abs() as usize, false),
        };
        Check::Sample {
            pool,
            n,
            distinct,
            scores: pairs,
            resp3,
            single: count.is_none(),
            set: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyspaceBounds {
    pub keys: (usize, usize),
    pub expires: (usize, usize),
}

/// One SCAN step. `tracked`: a step of an iteration (a plain decimal cursor), not a stray
/// cursor. `cursor`: the cursor sent (0 starts an iteration). `live`: keys that match and are
/// live when the node runs the step. `must_see`: keys that existed, unchanged, since the
/// iteration started; if this step ends the iteration they must all have been returned.
#[derive(Clone, Debug, PartialEq)]
pub struct ScanCheck {
    pub tracked: bool,
    pub cursor: u64,
    pub live: Vec<Bytes>,
    pub must_see: Option<Vec<Bytes>>,
}

/// A connection's SCAN iteration as seen by the client: the keys returned so far, the cursor
/// the node handed back last, and whether every step so far continued from it.
#[derive(Debug, Default)]
pub struct ScanState {
    seen: BTreeSet<Bytes>,
    next: Option<u64>,
    unbroken: bool,
}

/// A request and the check of its reply, queued on the connection when the node executes it.
#[derive(Debug)]
pub struct Expect {
    pub args: Vec<Bytes>,
    pub check: Check,
    /// Replicated mode: the request's index in the cluster history.
    pub op: Option<u64>,
    /// The node's clock when it executed the request, µs.
    pub at_us: u64,
    /// Non-zero: consecutive expectations of one group may be met in any order.
    pub group: u64,
    /// The frame answers a request the client counts as outstanding (false for pub/sub
    /// messages and the extra confirmations of one SUBSCRIBE).
    pub answers: bool,
}

impl Expect {
    /// The reply to `args`, executed at `at_us` (the node's clock), answering a request the
    /// client counts as outstanding; outside any group and any cluster history.
    pub fn reply(args: Vec<Bytes>, check: Check, at_us: u64) -> Expect {
        Expect {
            args,
            check,
            op: None,
            at_us,
            group: 0,
            answers: true,
        }
    }

    /// The node closes the connection (after what it wrote before).
    pub fn close(at_us: u64) -> Expect {
        Expect::reply(Vec::new(), Check::Close, at_us)
    }
}

#[derive(Default)]
pub struct Verifier {
    pub strict: bool,
    /// How often each known node divergence was seen (and tolerated).
    pub known_hits: BTreeMap<&'static str, u64>,
    /// Complete SCAN iterations whose every-key guarantee was checked.
    pub scan_iterations: u64,
}

fn is_verbatim(f: &Frame) -> bool {
    matches!(f, Frame::Verbatim { .. })
}

impl Verifier {
    pub fn new(strict: bool) -> Verifier {
        Verifier {
            strict,
            known_hits: BTreeMap::new(),
            scan_iterations: 0,
        }
    }

    /// Checks `got` against `check`; `scan` is the connection's SCAN iteration state.
    pub fn verify(
        &mut self,
        check: &Check,
        got: &Frame,
        scan: &mut ScanState,
    ) -> Result<(), String> {
        let want = |what: &str| Err(format!("expected {what}, got {}", show_frame(got)));
        match check {
            Check::Exact(f) => {
                if f == got {
                    Ok(())
                } else {
                    want(&show_frame(f))
                }
            }
            Check::Unordered(keys) => {
                let Frame::Array(items) = got else {
                    return want("an array");
                };
                let mut a: Vec<&[u8]> = Vec::with_capacity(items.len());
                for i in items {
                    match i {
                        Frame::Bulk(b) => a.push(b),
                        _ => return want("an array of bulk strings"),
                    }
                }
                a.sort_unstable();
                let mut b: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                b.sort_unstable();
                if a == b {
                    Ok(())
                } else {
                    want(&format!("these keys in any order: {}", show_keys(keys)))
                }
            }
            Check::Members { items, resp3 } => {
                let got_items = match got {
                    Frame::Set(v) if *resp3 => v,
                    Frame::Array(v) if !*resp3 => v,
                    _ => return want(if *resp3 { "a set" } else { "an array" }),
                };
                let mut a = Vec::with_capacity(got_items.len());
                for i in got_items {
                    match i {
                        Frame::Bulk(b) => a.push(&b[..]),
                        _ => return want("bulk strings"),
                    }
                }
                a.sort_unstable();
                let mut b: Vec<&[u8]> = items.iter().map(|k| &k[..]).collect();
                b.sort_unstable();
                if a == b {
                    Ok(())
                } else {
                    want(&format!("these members in any order: {}", show_keys(items)))
                }
            }
            Check::Pairs { pairs, resp3 } => {
                let flat: Vec<(&Frame, &Frame)> = match got {
                    Frame::Map(m) if *resp3 => m.iter().map(|(k, v)| (k, v)).collect(),
                    Frame::Array(v) if !*resp3 && v.len() % 2 == 0 => {
                        v.chunks(2).map(|c| (&c[0], &c[1])).collect()
                    }
                    _ => {
                        return want(if *resp3 {
                            "a map"
                        } else {
                            "a flat array of pairs"
                        })
                    }
                };
                let mut a = Vec::with_capacity(flat.len());
                for (k, v) in flat {
                    match (k, v) {
                        (Frame::Bulk(k), Frame::Bulk(v)) => a.push((&k[..], &v[..])),
                        _ => return want("bulk strings"),
                    }
                }
                a.sort_unstable();
                let mut b: Vec<(&[u8], &[u8])> =
                    pairs.iter().map(|(k, v)| (&k[..], &v[..])).collect();
                b.sort_unstable();
                if a == b {
                    Ok(())
                } else {
                    let shown: Vec<Bytes> = pairs
                        .iter()
                        .map(|(k, v)| {
                            let mut s = k.to_vec();
                            s.push(b'=');
                            s.extend_from_slice(v);
                            Bytes::from(s)
                        })
                        .collect();
                    want(&format!("these pairs in any order: {}", show_keys(&shown)))
                }
            }
            Check::RandomKey(live) => match got {
                Frame::Null if live.is_empty() => Ok(()),
                Frame::Bulk(k) if live.iter().any(|l| l == k) => Ok(()),
                _ if live.is_empty() => want("nil (no live key)"),
                _ => want(&format!("one of the live keys {}", show_keys(live))),
            },
            Check::Scan(s) => self.verify_scan(s, got, scan),
            Check::IntRange(lo, hi) => match got {
                Frame::Integer(n) if (lo..=hi).contains(&n) => Ok(()),
                _ => want(&format!("an integer in {lo}..={hi}")),
            },
            Check::Known { redis, node, bug } => {
                let r = self.verify(redis, got, scan);
                if r.is_ok() || self.strict {
                    return r;
                }
                let mut scratch = ScanState::default();
                if self.verify(node, got, &mut scratch).is_ok() {
                    *self.known_hits.entry(bug).or_insert(0) += 1;
                    return Ok(());
                }
                r
            }
            Check::Text { needles, verbatim } => {
                let text = match got {
                    Frame::Verbatim { text, .. } if *verbatim => text,
                    Frame::Bulk(b) if !*verbatim => b,
                    _ if *verbatim => return want("a verbatim string"),
                    _ => return want("a bulk string"),
                };
                for n in needles {
                    if !contains(text, n) {
                        return want(&format!("text containing {:?}", String::from_utf8_lossy(n)));
                    }
                }
                Ok(())
            }
            Check::Info {
                needles,
                keyspace,
                verbatim,
            } => {
                let text = match got {
                    Frame::Verbatim { text, .. } => text,
                    Frame::Bulk(b) => b,
                    _ => return want("a text reply"),
                };
                if *verbatim && !is_verbatim(got) {
                    if self.strict {
                        return want("a verbatim string (RESP3)");
                    }
                    *self
                        .known_hits
                        .entry("info-resp3-not-verbatim")
                        .or_insert(0) += 1;
                }
                for n in needles {
                    if !contains(text, n) {
                        return want(&format!("INFO containing {:?}", String::from_utf8_lossy(n)));
                    }
                }
                let Some(bounds) = keyspace else {
                    return Ok(());
                };
                let text = String::from_utf8_lossy(text);
                let line = text.lines().find(|l| l.starts_with("db0:"));
                let (k, e) = match line {
                    None => (0, 0),
                    Some(l) => {
                        let field = |name: &str| -> Option<usize> {
                            l[4..]
                                .split(',')
                                .find_map(|kv| kv.strip_prefix(name))
                                .and_then(|v| v.trim().parse().ok())
                        };
                        match (field("keys="), field("expires=")) {
                            (Some(k), Some(e)) if k > 0 => (k, e),
                            _ => return want("a well-formed db0 line with keys > 0"),
                        }
                    }
                };
                let (kb, eb) = (bounds.keys, bounds.expires);
                if (kb.0..=kb.1).contains(&k) && (eb.0..=eb.1).contains(&e) {
                    Ok(())
                } else {
                    want(&format!(
                        "db0 keys in {}..={} and expires in {}..={}",
                        kb.0, kb.1, eb.0, eb.1
                    ))
                }
            }
            Check::ClientList { ids, verbatim } => {
                let text = match got {
                    Frame::Verbatim { text, .. } if *verbatim => text,
                    Frame::Bulk(b) if !*verbatim => b,
                    _ => return want("the client list text"),
                };
                let mut listed: Vec<u64> = Vec::new();
                for line in String::from_utf8_lossy(text).lines() {
                    let id = line
                        .split(' ')
                        .find_map(|f| f.strip_prefix("id="))
                        .and_then(|v| v.parse().ok());
                    match id {
                        Some(id) => listed.push(id),
                        None => return want("client lines with an id= field"),
                    }
                }
                listed.sort_unstable();
                let mut want_ids = ids.clone();
                want_ids.sort_unstable();
                if listed == want_ids {
                    Ok(())
                } else {
                    want(&format!("client ids {want_ids:?} (listed {listed:?})"))
                }
            }
            Check::NoReply => want("no reply"),
            Check::Hello { proto, id, resp3 } => {
                let pairs: Vec<(Frame, Frame)> = match got {
                    Frame::Map(p) if *resp3 => p.clone(),
                    Frame::Array(items) if !*resp3 && items.len() % 2 == 0 => items
                        .chunks(2)
                        .map(|c| (c[0].clone(), c[1].clone()))
                        .collect(),
                    _ => return want("the HELLO map"),
                };
                let get = |k: &str| {
                    pairs
                        .iter()
                        .find(|(key, _)| key.as_bytes() == Some(k.as_bytes()))
                        .map(|(_, v)| v.clone())
                };
                let ok = get("server") == Some(Frame::Bulk(Bytes::from_static(b"redis")))
                    && matches!(get("version"), Some(Frame::Bulk(_)))
                    && get("proto") == Some(Frame::Integer(*proto))
                    && get("id") == Some(Frame::Integer(*id))
                    && get("mode") == Some(Frame::Bulk(Bytes::from_static(b"standalone")))
                    && get("role") == Some(Frame::Bulk(Bytes::from_static(b"master")))
                    && get("modules") == Some(Frame::Array(vec![]));
                if ok {
                    Ok(())
                } else {
                    want(&format!("the HELLO map with proto {proto} and id {id}"))
                }
            }
            Check::OneOfBulk(options) => match got {
                Frame::Bulk(b) if options.iter().any(|o| o.as_bytes() == &b[..]) => Ok(()),
                _ => want(&format!("one of {options:?}")),
            },
            Check::NonEmpty => match got {
                Frame::Array(a) | Frame::Set(a) if !a.is_empty() => Ok(()),
                Frame::Map(m) if !m.is_empty() => Ok(()),
                _ => want("a non-empty aggregate"),
            },
            Check::CommandInfo(name) => match got {
                Frame::Array(a) if a.len() == 1 => match &a[0] {
                    Frame::Array(d) if d.first() == Some(&Frame::Bulk(name.clone())) => Ok(()),
                    _ => want("a command description"),
                },
                _ => want("an array with one command description"),
            },
            Check::Close => want("the connection to be closed"),
            Check::NotError => match got {
                Frame::Error(_) => want("no error"),
                _ => Ok(()),
            },
            Check::Elements(checks) => {
                let Frame::Array(items) = got else {
                    return want(&format!("an array of {} replies", checks.len()));
                };
                if items.len() != checks.len() {
                    return want(&format!("an array of {} replies", checks.len()));
                }
                for (i, (c, f)) in checks.iter().zip(items).enumerate() {
                    let mut scratch = ScanState::default();
                    if let Err(why) = self.verify(c, f, &mut scratch) {
                        return Err(format!("element {i}: {why}"));
                    }
                }
                Ok(())
            }
            Check::Sample {
                pool,
                n,
                distinct,
                scores,
                resp3,
                single,
                set,
            } => {
                // A RESP3 set reply is checked like the array it would be in RESP2.
                let as_array;
                let got = match got {
                    Frame::Set(v) if *set && *resp3 => {
                        as_array = Frame::Array(v.clone());
                        &as_array
                    }
                    Frame::Array(_) if *set && *resp3 => return want("a set"),
                    g => g,
                };
                verify_sample(pool, *n, *distinct, *scores, *resp3, *single, got)
                    .or_else(|what| want(&what))
            }
            Check::Pushed => want("nothing (model-internal check)"),
            Check::AnyOf(options) => {
                if options.contains(got) {
                    Ok(())
                } else {
                    let o: Vec<String> = options.iter().map(show_frame).collect();
                    want(&format!("one of {}", o.join(" or ")))
                }
            }
        }
    }

    fn verify_scan(
        &mut self,
        s: &ScanCheck,
        got: &Frame,
        st: &mut ScanState,
    ) -> Result<(), String> {
        let bad = || Err(format!("expected a SCAN reply, got {}", show_frame(got)));
        let Frame::Array(parts) = got else {
            return bad();
        };
        let [Frame::Bulk(cursor), Frame::Array(keys)] = &parts[..] else {
            return bad();
        };
        let Some(next) = std::str::from_utf8(cursor)
            .ok()
            .and_then(|c| c.parse::<u64>().ok())
        else {
            return bad();
        };
        let mut returned = Vec::with_capacity(keys.len());
        for k in keys {
            let Frame::Bulk(k) = k else {
                return bad();
            };
            if !s.live.iter().any(|l| l == k) {
                return Err(format!(
                    "SCAN returned {:?}, which is not a live matching key (live: {})",
                    String::from_utf8_lossy(k),
                    show_keys(&s.live)
                ));
            }
            returned.push(k.clone());
        }
        if !s.tracked {
            return Ok(());
        }
        if s.cursor == 0 {
            st.seen.clear();
            st.unbroken = true;
        } else if st.next != Some(s.cursor) {
            st.unbroken = false;
        }
        st.seen.extend(returned);
        st.next = Some(next);
        if next == 0 && st.unbroken {
            if let Some(must) = &s.must_see {
                self.scan_iterations += 1;
                if let Some(missing) = must.iter().find(|k| !st.seen.contains(*k)) {
                    return Err(format!(
                        "SCAN iteration ended without returning {:?}, which existed throughout",
                        String::from_utf8_lossy(missing)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// ZRANDMEMBER: the reply's shape, its size, membership and (for a positive count)
/// distinctness; `Err` says what was expected.
fn verify_sample(
    pool: &[(Bytes, Frame)],
    n: usize,
    distinct: bool,
    scores: bool,
    resp3: bool,
    single: bool,
    got: &Frame,
) -> Result<(), String> {
    let member_of = |f: &Frame| match f {
        Frame::Bulk(b) => pool.iter().position(|(m, _)| m == b),
        _ => None,
    };
    if single {
        return match got {
            Frame::Null if pool.is_empty() => Ok(()),
            f if !pool.is_empty() && member_of(f).is_some() => Ok(()),
            _ => Err("one member of the pool (nil when missing)".into()),
        };
    }
    let Frame::Array(items) = got else {
        return Err("an array of random members".into());
    };
    let mut picks: Vec<(&Frame, Option<&Frame>)> = Vec::new();
    if !scores {
        picks.extend(items.iter().map(|f| (f, None)));
    } else if resp3 {
        for it in items {
            match it {
                Frame::Array(p) if p.len() == 2 => picks.push((&p[0], Some(&p[1]))),
                _ => return Err("member/score pairs".into()),
            }
        }
    } else {
        if items.len() % 2 != 0 {
            return Err("a flat array of members and scores".into());
        }
        picks.extend(items.chunks(2).map(|c| (&c[0], Some(&c[1]))));
    }
    if picks.len() != n {
        return Err(format!("{n} random members"));
    }
    let mut seen = BTreeSet::new();
    for (m, s) in picks {
        let Some(i) = member_of(m) else {
            return Err(format!(
                "members of {}",
                show_keys(&pool.iter().map(|p| p.0.clone()).collect::<Vec<_>>())
            ));
        };
        if s.is_some_and(|s| *s != pool[i].1) {
            return Err(format!(
                "the score {} with member {:?}",
                show_frame(&pool[i].1),
                pool[i].0
            ));
        }
        if distinct && !seen.insert(i) {
            return Err("distinct members".into());
        }
    }
    Ok(())
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

fn show_keys(keys: &[Bytes]) -> String {
    let v: Vec<String> = keys
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    format!("{v:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::from(s.to_string())
    }

    #[test]
    fn scan_iteration_completeness() {
        let mut v = Verifier::new(true);
        let mut seen = ScanState::default();
        let step = |cursor, must: Option<Vec<Bytes>>| {
            Check::Scan(ScanCheck {
                tracked: true,
                cursor,
                live: vec![b("a"), b("b"), b("c")],
                must_see: must,
            })
        };
        let reply = |cursor: &str, keys: &[&str]| {
            Frame::Array(vec![
                Frame::Bulk(b(cursor)),
                Frame::Array(keys.iter().map(|k| Frame::Bulk(b(k))).collect()),
            ])
        };
        let must = || Some(vec![b("a"), b("b")]);
        let mut check = |cursor: u64, must, r: Frame| v.verify(&step(cursor, must), &r, &mut seen);
        assert!(check(0, must(), reply("5", &["a"])).is_ok());
        assert!(
            check(5, must(), reply("0", &["c"])).is_err(),
            "b was never returned"
        );
        // A step that did not continue from the returned cursor voids the guarantee.
        assert!(check(0, must(), reply("5", &["a"])).is_ok());
        assert!(check(9, must(), reply("0", &["c"])).is_ok());
        assert!(check(0, None, reply("0", &["z"])).is_err(), "z is not live");
    }

    #[test]
    fn known_divergences_need_non_strict() {
        let c = Check::Known {
            redis: Box::new(Check::Exact(Frame::Integer(2))),
            node: Box::new(Check::Exact(Frame::Integer(1))),
            bug: "test",
        };
        let mut seen = ScanState::default();
        assert!(Verifier::new(false)
            .verify(&c, &Frame::Integer(1), &mut seen)
            .is_ok());
        assert!(Verifier::new(true)
            .verify(&c, &Frame::Integer(1), &mut seen)
            .is_err());
        assert!(Verifier::new(true)
            .verify(&c, &Frame::Integer(2), &mut seen)
            .is_ok());
    }
}

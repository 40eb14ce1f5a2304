//! Replies as the tester sees them, their normalisation and their comparison.

use std::collections::BTreeSet;
use std::fmt;

use lattice_resp::Frame;

use crate::gen::{Cmd, Cmp};

/// A decoded reply, detached from the codec's frame type so it can be normalised, compared and
/// printed. RESP3-only frames are kept as their debug text (the tester speaks RESP2).
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Simple(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    NilArray,
    Array(Vec<Reply>),
    Other(String),
    /// The connection failed (closed, timed out, undecodable bytes).
    Io(String),
}

impl From<Frame> for Reply {
    fn from(f: Frame) -> Reply {
        match f {
            Frame::Simple(b) => Reply::Simple(b.to_vec()),
            Frame::Error(b) => Reply::Error(b.to_vec()),
            Frame::Integer(i) => Reply::Int(i),
            Frame::Bulk(b) => Reply::Bulk(b.to_vec()),
            Frame::Null => Reply::Nil,
            Frame::NullArray => Reply::NilArray,
            Frame::Array(items) => Reply::Array(items.into_iter().map(Reply::from).collect()),
            other => Reply::Other(format!("{other:?}")),
        }
    }
}

impl Reply {
    pub fn is_nil(&self) -> bool {
        matches!(self, Reply::Nil | Reply::NilArray)
    }

    /// Serialised form used as a sort key for unordered replies.
    fn sort_key(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_key(&mut out);
        out
    }

    /// Unambiguous: every variant has its own tag and strings carry their length, so no two
    /// different replies share a key (a bulk "-1" is not a nil).
    fn write_key(&self, out: &mut Vec<u8>) {
        let mut tagged = |tag: u8, b: &[u8]| {
            out.push(tag);
            out.extend_from_slice(format!("{}:", b.len()).as_bytes());
            out.extend_from_slice(b);
        };
        match self {
            Reply::Simple(b) => tagged(b'+', b),
            Reply::Error(b) => tagged(b'-', b),
            Reply::Bulk(b) => tagged(b'$', b),
            Reply::Int(i) => out.extend_from_slice(format!(":{i}").as_bytes()),
            Reply::Nil => out.push(b'_'),
            Reply::NilArray => out.push(b'~'),
            Reply::Array(items) => {
                out.extend_from_slice(format!("*{}", items.len()).as_bytes());
                for i in items {
                    out.push(0);
                    i.write_key(out);
                }
            }
            Reply::Other(s) => {
                out.push(b'?');
                out.extend_from_slice(s.as_bytes());
            }
            Reply::Io(s) => {
                out.push(b'!');
                out.extend_from_slice(s.as_bytes());
            }
        }
    }
}

/// The first word of an error message (`ERR`, `WRONGTYPE`, ...).
pub fn error_code(msg: &[u8]) -> &[u8] {
    let end = msg.iter().position(|&b| b == b' ').unwrap_or(msg.len());
    &msg[..end]
}

/// Rewrites a reply into the form that is compared: errors reduced to their first word (at
/// any depth), for [`Cmp::Sorted`] / [`Cmp::ScanAll`] / [`Cmp::ScanKey`] the top-level array
/// sorted, and for [`Cmp::Pairs`] / [`Cmp::ScanKey`] with pairs its pairs sorted.
#[cfg(test)]
pub fn normalize(cmp: Cmp, r: &Reply) -> Reply {
    normalize_with(cmp, r, false)
}

/// [`normalize`], keeping whole error messages when `full_errors` is set.
pub fn normalize_with(cmp: Cmp, r: &Reply, full_errors: bool) -> Reply {
    let mut n = if full_errors {
        r.clone()
    } else {
        strip_errors(r)
    };
    match cmp {
        Cmp::Sorted | Cmp::ScanAll | Cmp::ScanKey { pairs: false } => {
            if let Reply::Array(items) = &mut n {
                items.sort_by_cached_key(Reply::sort_key);
            }
        }
        Cmp::Pairs | Cmp::ScanKey { pairs: true } => {
            if let Reply::Array(items) = &mut n {
                if items.len() % 2 == 0 {
                    let mut pairs: Vec<Vec<Reply>> = items.chunks(2).map(|p| p.to_vec()).collect();
                    pairs.sort_by_cached_key(|p| {
                        let mut k = p[0].sort_key();
                        k.push(0);
                        k.extend(p[1].sort_key());
                        k
                    });
                    *items = pairs.into_iter().flatten().collect();
                }
            }
        }
        _ => {}
    }
    n
}

fn strip_errors(r: &Reply) -> Reply {
    match r {
        Reply::Error(m) => Reply::Error(error_code(m).to_vec()),
        Reply::Array(items) => Reply::Array(items.iter().map(strip_errors).collect()),
        other => other.clone(),
    }
}

/// Whether two replies to the same command count as the same (errors by first word).
#[cfg(test)]
pub fn equivalent(cmp: Cmp, a: &Reply, b: &Reply) -> bool {
    equivalent_with(cmp, a, b, false)
}

/// [`equivalent`], comparing whole error messages when `full_errors` is set.
pub fn equivalent_with(cmp: Cmp, a: &Reply, b: &Reply, full_errors: bool) -> bool {
    compare(cmp, &[], a, b, None, full_errors)
}

/// The probe replies of both sides and whether they are flat pairs.
pub type Probes<'a> = Option<(&'a Reply, &'a Reply, bool)>;

/// Whether the replies of both sides to `cmd` count as the same, including the replies to its
/// probe (`pa` / `pb`, run right after it on each side) when it has one.
pub fn equivalent_cmd(
    cmd: &Cmd,
    a: &Reply,
    pa: Option<&Reply>,
    b: &Reply,
    pb: Option<&Reply>,
    full_errors: bool,
) -> bool {
    let probes = match (&cmd.probe, pa, pb) {
        (Some(p), Some(x), Some(y)) => {
            if !equivalent_with(p.cmp(), x, y, full_errors) {
                return false;
            }
            Some((x, y, p.pairs))
        }
        _ => None,
    };
    compare(cmd.cmp, &cmd.sub, a, b, probes, full_errors)
}

fn compare(cmp: Cmp, sub: &[Cmp], a: &Reply, b: &Reply, probes: Probes, full: bool) -> bool {
    let normalize = |cmp, r| normalize_with(cmp, r, full);
    if matches!(a, Reply::Io(_)) || matches!(b, Reply::Io(_)) {
        return false;
    }
    match cmp {
        Cmp::Shape => same_shape(a, b, full),
        Cmp::Random { pairs, distinct } => {
            same_shape(a, b, full)
                && random_ok(a, probes.map(|(p, _, pp)| (p, pp)), pairs, distinct)
                && random_ok(b, probes.map(|(_, p, pp)| (p, pp)), pairs, distinct)
        }
        Cmp::Exec => match (a, b) {
            (Reply::Array(x), Reply::Array(y)) if x.len() == sub.len() && y.len() == sub.len() => {
                (0..sub.len()).all(|i| compare(sub[i], &[], &x[i], &y[i], None, full))
            }
            _ => normalize(Cmp::Exact, a) == normalize(Cmp::Exact, b),
        },
        Cmp::Skip => true,
        Cmp::Tolerance(tol) => match (a, b) {
            (Reply::Int(x), Reply::Int(y)) if *x >= 0 && *y >= 0 => {
                (*x as i128 - *y as i128).abs() <= tol as i128
            }
            _ => normalize(cmp, a) == normalize(cmp, b),
        },
        Cmp::NilOrNot => match (a, b) {
            (Reply::Bulk(_), Reply::Bulk(_)) | (Reply::Int(_), Reply::Int(_)) => true,
            _ if a.is_nil() && b.is_nil() => a == b,
            _ => normalize(cmp, a) == normalize(cmp, b),
        },
        Cmp::Exact | Cmp::Sorted | Cmp::ScanAll | Cmp::ScanKey { .. } | Cmp::Pairs => {
            normalize(cmp, a) == normalize(cmp, b)
        }
    }
}

/// Same kind of reply and, for arrays, the same length; anything else compared exactly.
fn same_shape(a: &Reply, b: &Reply, full: bool) -> bool {
    match (a, b) {
        (Reply::Array(x), Reply::Array(y)) => x.len() == y.len(),
        (Reply::Bulk(_), Reply::Bulk(_)) => true,
        _ => normalize_with(Cmp::Exact, a, full) == normalize_with(Cmp::Exact, b, full),
    }
}

/// The properties of a random pick `r`: every element (or pair, with `pairs`) is in the
/// collection the probe read right after it, and with `distinct` none repeats.
fn random_ok(r: &Reply, probe: Option<(&Reply, bool)>, pairs: bool, distinct: bool) -> bool {
    let picked: Vec<Vec<u8>> = match r {
        Reply::Bulk(_) => vec![r.sort_key()],
        Reply::Array(items) => {
            let group = if pairs { 2 } else { 1 };
            if items.len() % group != 0 {
                return false;
            }
            items
                .chunks(group)
                .map(|g| {
                    let mut k = Vec::new();
                    for it in g {
                        k.extend(it.sort_key());
                        k.push(0);
                    }
                    k
                })
                .collect()
        }
        _ => return true,
    };
    if distinct {
        let set: BTreeSet<&Vec<u8>> = picked.iter().collect();
        if set.len() != picked.len() {
            return false;
        }
    }
    let Some((Reply::Array(all), probe_pairs)) = probe else {
        return true;
    };
    let group = if probe_pairs { 2 } else { 1 };
    if all.len() % group != 0 {
        return false;
    }
    // The reference groups, cut down to the members when the pick has no values.
    let take = if pairs { group } else { 1 };
    let reference: BTreeSet<Vec<u8>> = all
        .chunks(group)
        .map(|g| {
            let mut k = Vec::new();
            for it in &g[..take] {
                k.extend(it.sort_key());
                k.push(0);
            }
            k
        })
        .collect();
    match r {
        // A single pick without a count: compare the bare element.
        Reply::Bulk(_) => {
            let mut k = r.sort_key();
            k.push(0);
            reference.contains(&k)
        }
        _ => picked.iter().all(|p| reference.contains(p)),
    }
}

/// Writes bytes the way redis-cli quotes them: printable ASCII as is, the rest escaped.
pub fn quote(b: &[u8]) -> String {
    format!("\"{}\"", escape(b))
}

/// Printable ASCII as is, everything else escaped (no surrounding quotes).
pub fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        match c {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s
}

/// Renders a command line: bare words where unambiguous, quoted otherwise.
pub fn render_args(args: &[Vec<u8>]) -> String {
    let mut parts = Vec::with_capacity(args.len());
    for a in args {
        let bare = !a.is_empty()
            && a.iter()
                .all(|&c| c.is_ascii_graphic() && c != b'"' && c != b'\'' && c != b'\\');
        if bare {
            parts.push(String::from_utf8_lossy(a).into_owned());
        } else {
            parts.push(quote(a));
        }
    }
    parts.join(" ")
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Simple(b) => write!(f, "+{}", escape(b)),
            Reply::Error(b) => write!(f, "(error) {}", escape(b)),
            Reply::Int(i) => write!(f, "(integer) {i}"),
            Reply::Bulk(b) => write!(f, "{}", quote(b)),
            Reply::Nil => write!(f, "(nil)"),
            Reply::NilArray => write!(f, "(nil array)"),
            Reply::Array(items) => {
                write!(f, "[")?;
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{it}")?;
                }
                write!(f, "]")
            }
            Reply::Other(s) => write!(f, "(other) {s}"),
            Reply::Io(s) => write!(f, "(connection failure) {s}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> Reply {
        Reply::Error(s.as_bytes().to_vec())
    }
    fn bulk(s: &str) -> Reply {
        Reply::Bulk(s.as_bytes().to_vec())
    }

    #[test]
    fn errors_compare_by_first_word() {
        let a = err("ERR wrong number of arguments for 'get' command");
        let b = err("ERR syntax error");
        assert!(equivalent(Cmp::Exact, &a, &b));
        let c = err("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert!(!equivalent(Cmp::Exact, &a, &c));
        assert!(!equivalent(Cmp::Exact, &a, &bulk("ERR")));
        assert_eq!(error_code(b"ERR"), b"ERR");
        assert_eq!(error_code(b""), b"");
        assert!(!equivalent_with(Cmp::Exact, &a, &b, true));
        assert!(equivalent_with(Cmp::Exact, &a, &a.clone(), true));
    }

    #[test]
    fn errors_inside_arrays_compare_by_first_word() {
        let a = Reply::Array(vec![err("ERR one"), Reply::Int(1)]);
        let b = Reply::Array(vec![err("ERR two"), Reply::Int(1)]);
        let c = Reply::Array(vec![err("EXECABORT x"), Reply::Int(1)]);
        assert!(equivalent(Cmp::Exact, &a, &b));
        assert!(!equivalent(Cmp::Exact, &a, &c));
    }

    #[test]
    fn sorted_keys_ignore_order_but_not_content() {
        let a = Reply::Array(vec![bulk("foo"), bulk("bar"), bulk("baz")]);
        let b = Reply::Array(vec![bulk("baz"), bulk("foo"), bulk("bar")]);
        assert!(equivalent(Cmp::Sorted, &a, &b));
        assert!(!equivalent(Cmp::Exact, &a, &b));
        let c = Reply::Array(vec![bulk("baz"), bulk("foo")]);
        assert!(!equivalent(Cmp::Sorted, &a, &c));
        // Multiset, not set: duplicates count.
        let d = Reply::Array(vec![bulk("foo"), bulk("foo"), bulk("bar")]);
        let e = Reply::Array(vec![bulk("foo"), bulk("bar"), bulk("bar")]);
        assert!(!equivalent(Cmp::Sorted, &d, &e));
        assert_eq!(
            normalize(Cmp::Sorted, &b),
            Reply::Array(vec![bulk("bar"), bulk("baz"), bulk("foo")])
        );
    }

    #[test]
    fn sorted_distinguishes_nil_from_bulk_minus_one() {
        let a = Reply::Array(vec![Reply::Nil, bulk("-1"), Reply::Nil, bulk("a")]);
        let b = Reply::Array(vec![bulk("a"), Reply::Nil, bulk("-1"), Reply::Nil]);
        assert!(equivalent(Cmp::Sorted, &a, &b));
        let c = Reply::Array(vec![bulk("a"), bulk("-1"), bulk("-1"), Reply::Nil]);
        assert!(!equivalent(Cmp::Sorted, &a, &c));
    }

    #[test]
    fn pairs_compare_as_a_multiset_of_pairs() {
        let a = Reply::Array(vec![bulk("f1"), bulk("1"), bulk("f2"), bulk("2")]);
        let b = Reply::Array(vec![bulk("f2"), bulk("2"), bulk("f1"), bulk("1")]);
        let c = Reply::Array(vec![bulk("f2"), bulk("1"), bulk("f1"), bulk("2")]);
        assert!(equivalent(Cmp::Pairs, &a, &b));
        assert!(!equivalent(Cmp::Pairs, &a, &c));
    }

    #[test]
    fn random_picks_are_checked_against_the_probe() {
        let probe = Reply::Array(vec![bulk("a"), bulk("1"), bulk("b"), bulk("2")]);
        let cmp = Cmp::Random {
            pairs: true,
            distinct: true,
        };
        let ok = Reply::Array(vec![bulk("b"), bulk("2")]);
        let other = Reply::Array(vec![bulk("a"), bulk("1")]);
        let wrong_value = Reply::Array(vec![bulk("a"), bulk("2")]);
        let p = Some((&probe, &probe, true));
        assert!(compare(cmp, &[], &ok, &other, p, false));
        assert!(!compare(cmp, &[], &ok, &wrong_value, p, false));
        let members = Cmp::Random {
            pairs: false,
            distinct: true,
        };
        let twice = Reply::Array(vec![bulk("a"), bulk("a")]);
        let two = Reply::Array(vec![bulk("a"), bulk("b")]);
        assert!(!compare(members, &[], &two, &twice, p, false));
        assert!(compare(members, &[], &bulk("a"), &bulk("b"), p, false));
        assert!(!compare(members, &[], &bulk("a"), &bulk("1"), p, false));
        assert!(!compare(members, &[], &bulk("a"), &Reply::Nil, p, false));
    }

    #[test]
    fn exec_replies_are_compared_per_queued_command() {
        let a = Reply::Array(vec![
            Reply::Array(vec![bulk("x"), bulk("y")]),
            Reply::Int(3),
        ]);
        let b = Reply::Array(vec![
            Reply::Array(vec![bulk("y"), bulk("x")]),
            Reply::Int(3),
        ]);
        assert!(compare(
            Cmp::Exec,
            &[Cmp::Sorted, Cmp::Exact],
            &a,
            &b,
            None,
            false
        ));
        assert!(!compare(
            Cmp::Exec,
            &[Cmp::Exact, Cmp::Exact],
            &a,
            &b,
            None,
            false
        ));
        assert!(compare(
            Cmp::Exec,
            &[],
            &Reply::NilArray,
            &Reply::NilArray,
            None,
            false
        ));
    }

    #[test]
    fn ttl_tolerance_applies_to_positive_values_only() {
        assert!(equivalent(
            Cmp::Tolerance(1),
            &Reply::Int(100),
            &Reply::Int(99)
        ));
        assert!(!equivalent(
            Cmp::Tolerance(1),
            &Reply::Int(100),
            &Reply::Int(98)
        ));
        assert!(equivalent(
            Cmp::Tolerance(250),
            &Reply::Int(99_900),
            &Reply::Int(100_100)
        ));
        assert!(!equivalent(
            Cmp::Tolerance(1),
            &Reply::Int(-1),
            &Reply::Int(-2)
        ));
        assert!(!equivalent(
            Cmp::Tolerance(1),
            &Reply::Int(0),
            &Reply::Int(-1)
        ));
        assert!(!equivalent(Cmp::Tolerance(1), &Reply::Int(-2), &Reply::Nil));
        assert!(equivalent(
            Cmp::Tolerance(1),
            &Reply::Int(-2),
            &Reply::Int(-2)
        ));
    }

    #[test]
    fn randomkey_compares_nil_versus_non_nil() {
        assert!(equivalent(Cmp::NilOrNot, &bulk("foo"), &bulk("bar")));
        assert!(equivalent(Cmp::NilOrNot, &Reply::Nil, &Reply::Nil));
        assert!(!equivalent(Cmp::NilOrNot, &Reply::Nil, &bulk("bar")));
        assert!(!equivalent(Cmp::NilOrNot, &Reply::Nil, &Reply::NilArray));
        assert!(equivalent(Cmp::NilOrNot, &Reply::Int(48), &Reply::Int(64)));
        assert!(!equivalent(Cmp::NilOrNot, &Reply::Nil, &Reply::Int(64)));
    }

    #[test]
    fn nil_kinds_and_types_are_distinct() {
        assert!(!equivalent(Cmp::Exact, &Reply::Nil, &Reply::NilArray));
        assert!(!equivalent(Cmp::Exact, &Reply::Int(1), &bulk("1")));
        assert!(!equivalent(
            Cmp::Exact,
            &Reply::Simple(b"OK".to_vec()),
            &bulk("OK")
        ));
    }

    #[test]
    fn io_failures_never_match_and_skip_always_does() {
        let io = Reply::Io("closed".into());
        assert!(!equivalent(Cmp::Exact, &io, &io.clone()));
        assert!(equivalent(Cmp::Skip, &Reply::Int(1), &bulk("x")));
    }

    #[test]
    fn rendering_quotes_binary() {
        let args = vec![
            b"SET".to_vec(),
            b"k".to_vec(),
            b"a b\x00\r\n".to_vec(),
            Vec::new(),
        ];
        assert_eq!(render_args(&args), r#"SET k "a b\x00\r\n" """#);
    }
}

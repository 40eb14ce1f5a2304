//! Replies as the tester sees them, their normalisation and their comparison.

use std::fmt;

use lattice_resp::Frame;

use crate::gen::Cmp;

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

    fn write_key(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Simple(b) => {
                out.push(b'+');
                out.extend_from_slice(b);
            }
            Reply::Error(b) => {
                out.push(b'-');
                out.extend_from_slice(b);
            }
            Reply::Int(i) => out.extend_from_slice(format!(":{i}").as_bytes()),
            Reply::Bulk(b) => {
                out.push(b'$');
                out.extend_from_slice(b);
            }
            Reply::Nil => out.extend_from_slice(b"$-1"),
            Reply::NilArray => out.extend_from_slice(b"*-1"),
            Reply::Array(items) => {
                out.extend_from_slice(format!("*{}", items.len()).as_bytes());
                for i in items {
                    out.push(0);
                    i.write_key(out);
                }
            }
            Reply::Other(s) => out.extend_from_slice(s.as_bytes()),
            Reply::Io(s) => out.extend_from_slice(s.as_bytes()),
        }
    }
}

/// The first word of an error message (`ERR`, `WRONGTYPE`, ...).
pub fn error_code(msg: &[u8]) -> &[u8] {
    let end = msg.iter().position(|&b| b == b' ').unwrap_or(msg.len());
    &msg[..end]
}

/// Rewrites a reply into the form that is compared: errors reduced to their first word (at
/// any depth), and for [`Cmp::Sorted`] / [`Cmp::ScanAll`] the top-level array sorted.
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
    if matches!(cmp, Cmp::Sorted | Cmp::ScanAll) {
        if let Reply::Array(items) = &mut n {
            items.sort_by_cached_key(Reply::sort_key);
        }
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
    let normalize = |cmp, r| normalize_with(cmp, r, full_errors);
    if matches!(a, Reply::Io(_)) || matches!(b, Reply::Io(_)) {
        return false;
    }
    match cmp {
        Cmp::Skip => true,
        Cmp::Tolerance(tol) => match (a, b) {
            (Reply::Int(x), Reply::Int(y)) if *x >= 0 && *y >= 0 => {
                (*x as i128 - *y as i128).abs() <= tol as i128
            }
            _ => normalize(cmp, a) == normalize(cmp, b),
        },
        Cmp::NilOrNot => match (a, b) {
            (Reply::Bulk(_), Reply::Bulk(_)) => true,
            _ if a.is_nil() && b.is_nil() => a == b,
            _ => normalize(cmp, a) == normalize(cmp, b),
        },
        Cmp::Exact | Cmp::Sorted | Cmp::ScanAll => normalize(cmp, a) == normalize(cmp, b),
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

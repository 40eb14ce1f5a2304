//! SORT and SORT_RO on lists, sets and sorted sets — Redis 7.0 semantics: ASC/DESC, ALPHA,
//! LIMIT, BY (a pattern with `*`, optionally `->field` into a hash; a pattern without `*` means
//! "do not sort"), GET (`#` is the element itself), and STORE (SORT only).
//!
//! Redis leaves two orders open, and the model checks those replies as a property instead of
//! an exact frame: a set that is not sorted comes out in hash order, and ALPHA with a BY pattern
//! compares equal weights as equal (no tie-break), so `qsort` may put them either way. Each
//! reply slot then accepts any value of its tie group. Stored results must be exact, so the
//! workload never combines STORE with ALPHA and a BY pattern (STORE on an unsorted set is
//! forced to ALPHA by Redis itself and is exact).
//!
//! Weights are compared the way `redis-server` does under a C/UTF-8 collation: ALPHA without
//! STORE uses `strcoll`, which stops at a NUL byte; with STORE the comparison is binary.

use std::cmp::Ordering;

use bytes::Bytes;
use lattice_resp::Frame;

use super::{int, is, parse_i64, spec, Cx, Model, Spec, Value, NOT_INTEGER, SYNTAX, WRONGTYPE};
use crate::check::Check;

pub const SPECS: &[Spec] = &[spec("sort", -2, sort), spec("sort_ro", -2, sort_ro)];

const NOT_DOUBLE: &str = "ERR One or more scores can't be converted into double";

struct Opts<'a> {
    desc: bool,
    alpha: bool,
    limit: Option<(i64, i64)>,
    by: Option<&'a [u8]>,
    gets: Vec<&'a [u8]>,
    store: Option<&'a [u8]>,
}

fn parse_opts<'a>(cx: &'a Cx, readonly: bool) -> Result<Opts<'a>, Check> {
    let mut o = Opts {
        desc: false,
        alpha: false,
        limit: None,
        by: None,
        gets: vec![],
        store: None,
    };
    let mut j = 2;
    while j < cx.argc() {
        let a = cx.arg(j);
        let left = cx.argc() - j - 1;
        if is(a, "asc") {
            o.desc = false;
        } else if is(a, "desc") {
            o.desc = true;
        } else if is(a, "alpha") {
            o.alpha = true;
        } else if is(a, "limit") && left >= 2 {
            match (parse_i64(cx.arg(j + 1)), parse_i64(cx.arg(j + 2))) {
                (Some(s), Some(c)) => o.limit = Some((s, c)),
                _ => return Err(Check::err(NOT_INTEGER)),
            }
            j += 2;
        } else if !readonly && is(a, "store") && left >= 1 {
            o.store = Some(cx.arg(j + 1));
            j += 1;
        } else if is(a, "by") && left >= 1 {
            o.by = Some(cx.arg(j + 1));
            j += 1;
        } else if is(a, "get") && left >= 1 {
            o.gets.push(cx.arg(j + 1));
            j += 1;
        } else {
            return Err(Check::err(SYNTAX));
        }
        j += 1;
    }
    Ok(o)
}

/// Redis's `lookupKeyByPattern`: `#` is the element; otherwise the first `*` is replaced by
/// the element and the key read as a string, or (with `->field` after the `*`) as a hash
/// field. A pattern without `*` finds nothing.
fn lookup(m: &Model, pattern: &[u8], elem: &[u8], now_ms: u64) -> Option<Vec<u8>> {
    if pattern == b"#" {
        return Some(elem.to_vec());
    }
    let star = pattern.iter().position(|&c| c == b'*')?;
    let rest = &pattern[star + 1..];
    let arrow = rest.windows(2).position(|w| w == b"->");
    let (post, field) = match arrow {
        Some(i) if i + 2 < rest.len() => (&rest[..i], Some(&rest[i + 2..])),
        _ => (rest, None),
    };
    let key = [&pattern[..star], elem, post].concat();
    match (&m.db.get(&key, now_ms)?.value, field) {
        (Value::Str(s), None) => Some(s.clone()),
        (Value::Hash(h), Some(f)) => h.get(f).cloned(),
        _ => None,
    }
}

/// C's `strtod` over a whole NUL-terminated string, as SORT uses it: `None` when text is left
/// over, the value is NaN, or it overflows. Hexadecimal floats (`0x1.8p3`) included.
fn c_strtod(b: &[u8]) -> Option<f64> {
    let b = &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())];
    let s = std::str::from_utf8(b).ok()?;
    let s = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    if s.is_empty() {
        // Nothing parsed: strtod returns 0 and leaves the end at the NUL.
        return Some(0.0);
    }
    if let Some(v) = hex_strtod(s) {
        return v;
    }
    let v: f64 = s.parse().ok()?;
    let lower = s.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    let written_inf = body == "inf" || body == "infinity";
    if v.is_nan() || (v.is_infinite() && !written_inf) {
        return None;
    }
    Some(v)
}

/// The bytes `strcoll` sees: up to the first NUL.
fn c_str(b: &[u8]) -> &[u8] {
    &b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]
}

enum Weight {
    Num(f64),
    Text(Option<Vec<u8>>),
    /// Not sorted at all.
    None,
}

fn sort(m: &mut Model, cx: &mut Cx) -> Check {
    generic(m, cx, false)
}

fn sort_ro(m: &mut Model, cx: &mut Cx) -> Check {
    generic(m, cx, true)
}

fn generic(m: &mut Model, cx: &mut Cx, readonly: bool) -> Check {
    let now = cx.now_ms;
    let o = match parse_opts(cx, readonly) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let mut dontsort = o.by.is_some_and(|p| !p.contains(&b'*'));
    let (mut alpha, mut by) = (o.alpha, o.by);
    // Elements in their native order; `is_set` when that order is Redis's hash order.
    let (elems, is_set): (Vec<Vec<u8>>, bool) = match m.db.get(cx.arg(1), now).map(|e| &e.value) {
        None => (vec![], false),
        Some(Value::List(l)) => (l.iter().cloned().collect(), false),
        Some(Value::Set(s)) => (s.iter().cloned().collect(), true),
        Some(Value::ZSet(z)) => {
            let mut v: Vec<(&Vec<u8>, f64)> = z.iter().map(|(k, s)| (k, *s)).collect();
            v.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
            (v.into_iter().map(|(k, _)| k.clone()).collect(), false)
        }
        Some(_) => return Check::err(WRONGTYPE),
    };
    if dontsort && is_set && o.store.is_some() {
        // Redis sorts a set it would store, so that replicas agree.
        dontsort = false;
        alpha = true;
        by = None;
    }
    assert!(
        !(o.store.is_some() && alpha && by.is_some() && !dontsort),
        "model limitation: STORE with ALPHA and a BY pattern leaves ties in Redis's qsort order"
    );
    let len = elems.len() as i64;
    let (ls, lc) = o.limit.unwrap_or((0, -1));
    let mut start = ls.max(0);
    let mut end = if lc < 0 { len - 1 } else { start + lc - 1 };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    end = end.min(len - 1);

    // Each element with its weight, then ordered; `tied[i]` is the group of positions that
    // Redis may have put in any order.
    let mut items: Vec<(Vec<u8>, Weight)> = Vec::with_capacity(elems.len());
    for e in elems {
        let w = if dontsort {
            Weight::None
        } else {
            let val = match by {
                Some(p) => lookup(m, p, &e, now),
                None => Some(e.clone()),
            };
            if alpha {
                Weight::Text(val)
            } else {
                match val {
                    None => Weight::Num(0.0),
                    Some(v) => match c_strtod(&v) {
                        Some(x) => Weight::Num(x),
                        None => return Check::err(NOT_DOUBLE),
                    },
                }
            }
        };
        items.push((e, w));
    }
    let binary = o.store.is_some();
    let cmp = |a: &(Vec<u8>, Weight), b: &(Vec<u8>, Weight)| -> Ordering {
        let c = match (&a.1, &b.1) {
            (Weight::Num(x), Weight::Num(y)) => x
                .partial_cmp(y)
                .expect("no NaN")
                .then_with(|| a.0.cmp(&b.0)),
            (Weight::Text(x), Weight::Text(y)) if by.is_some() => match (x, y) {
                (Some(x), Some(y)) if binary => x.cmp(y),
                (Some(x), Some(y)) => c_str(x).cmp(c_str(y)),
                (x, y) => x.is_some().cmp(&y.is_some()),
            },
            (Weight::Text(_), Weight::Text(_)) if binary => a.0.cmp(&b.0),
            (Weight::Text(_), Weight::Text(_)) => c_str(&a.0).cmp(c_str(&b.0)),
            _ => Ordering::Equal,
        };
        if o.desc {
            c.reverse()
        } else {
            c
        }
    };
    if dontsort {
        if o.desc && !is_set {
            items.reverse();
        }
    } else {
        items.sort_by(cmp);
    }
    // Tie groups: an unsorted set is one group; a sort puts equal elements in one group.
    let mut group = vec![0usize; items.len()];
    for i in 1..items.len() {
        let tied = if dontsort {
            is_set
        } else {
            cmp(&items[i - 1], &items[i]) == Ordering::Equal
        };
        group[i] = if tied { group[i - 1] } else { i };
    }
    let window: Vec<usize> = if end >= start {
        (start as usize..=end as usize).collect()
    } else {
        vec![]
    };
    // The values one element contributes: itself, or one per GET pattern.
    let outputs = |i: usize| -> Vec<Option<Vec<u8>>> {
        let e = &items[i].0;
        if o.gets.is_empty() {
            vec![Some(e.clone())]
        } else {
            o.gets.iter().map(|p| lookup(m, p, e, now)).collect()
        }
    };
    if let Some(dst) = o.store {
        let list: std::collections::VecDeque<Vec<u8>> = window
            .iter()
            .flat_map(|&i| outputs(i))
            .map(|v| v.unwrap_or_default())
            .collect();
        let n = list.len() as i64;
        if list.is_empty() {
            m.db.delete(dst, now);
        } else {
            m.db.set(dst, Value::List(list), None, false, now);
        }
        return int(n);
    }
    let frame = |v: Option<Vec<u8>>| match v {
        Some(v) => Frame::Bulk(Bytes::from(v)),
        None => Frame::Null,
    };
    let exact = window.iter().all(|&i| {
        let g = group[i];
        group.iter().filter(|&&x| x == g).count() == 1
    });
    if exact {
        let out = window.iter().flat_map(|&i| outputs(i)).map(frame).collect();
        return Check::Exact(Frame::Array(out));
    }
    // Each slot holds the matching output of some element of its tie group.
    let mut checks = vec![];
    for &i in &window {
        let members: Vec<usize> = (0..items.len()).filter(|&x| group[x] == group[i]).collect();
        let per: Vec<Vec<Option<Vec<u8>>>> = members.iter().map(|&x| outputs(x)).collect();
        for slot in 0..per[0].len() {
            let mut alts: Vec<Frame> = per.iter().map(|o| frame(o[slot].clone())).collect();
            alts.dedup();
            checks.push(Check::AnyOf(alts));
        }
    }
    Check::Elements(checks)
}

/// C's hexadecimal form: `[+-]0x<hex>[.<hex>][p[+-]<dec>]`. `None` when `s` is not hexadecimal
/// at all; `Some(None)` when it is but does not parse whole, or overflows (strtod's ERANGE).
fn hex_strtod(s: &str) -> Option<Option<f64>> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let rest = body
        .strip_prefix("0x")
        .or_else(|| body.strip_prefix("0X"))?;
    let (mant, exp) = match rest.find(['p', 'P']) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let (int, frac) = match mant.find('.') {
        Some(i) => (&mant[..i], &mant[i + 1..]),
        None => (mant, ""),
    };
    let hex = |t: &str| t.bytes().all(|c| c.is_ascii_hexdigit());
    if (int.is_empty() && frac.is_empty()) || !hex(int) || !hex(frac) {
        // "0x" with no digits: strtod reads the "0" and leaves "x..." over.
        return Some(None);
    }
    let mut v = 0f64;
    for c in int.chars().chain(frac.chars()) {
        v = v * 16.0 + f64::from(c.to_digit(16).expect("hex digit"));
    }
    let mut e2: i64 = -4 * frac.len() as i64;
    if let Some(e) = exp {
        let digits = e.trim_start_matches(['+', '-']);
        if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return Some(None);
        }
        let n: i64 = digits.parse().unwrap_or(i64::MAX / 2).min(100_000);
        e2 += if e.starts_with('-') { -n } else { n };
    }
    let v = v * 2f64.powi(e2.clamp(-100_000, 100_000) as i32);
    if v.is_infinite() {
        return Some(None);
    }
    Some(Some(if neg { -v } else { v }))
}

#[cfg(test)]
mod hex_tests {
    use super::c_strtod;

    #[test]
    fn hexadecimal_weights_parse_like_strtod() {
        assert_eq!(c_strtod(b"0x03c"), Some(60.0));
        assert_eq!(c_strtod(b"-0x1p3"), Some(-8.0));
        assert_eq!(c_strtod(b"0x1.8"), Some(1.5));
        assert_eq!(c_strtod(b"0x"), None);
        assert_eq!(c_strtod(b"0x1g"), None);
    }
}

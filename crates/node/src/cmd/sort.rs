//! SORT and SORT_RO: sorting lists, sets and sorted sets, numerically or lexicographically,
//! optionally by the values of other keys (`BY pattern`, `BY nosort`), returning other keys'
//! values (`GET pattern`, `GET #`, `GET pattern->field`), and storing the result as a list.
//!
//! Replies, error texts and the order of checks follow Redis 7.0. Where Redis's result depends
//! on an unspecified order (equal ALPHA BY keys, the iteration order of a set or sorted set
//! sorted by something else) Lattice is deterministic for a given history.

use std::cmp::Ordering;

use lattice_store::list::{End, List};
use lattice_store::Value;

use crate::args::{is, parse_i64, NOT_INTEGER};
use crate::cmd::pubsub::{EVENT_GENERIC, EVENT_LIST, EVENT_NEW};
use crate::command::{spec, Call};
use crate::ctx::{CommandSpec, Core};

const GENERIC: &str = "generic";

// One line per command reads best as a table.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    spec("sort", -2, &["write", "denyoom", "movablekeys"], (1, 1, 1), GENERIC, "1.0.0", "Sort the elements in a list, set or sorted set", sort),
    spec("sort_ro", -2, &["readonly", "movablekeys"], (1, 1, 1), GENERIC, "7.0.0", "Sort the elements in a list, set or sorted set. Read-only variant of SORT.", sort_ro),
];

fn sort(core: &mut Core, call: &mut Call) {
    sort_generic(core, call, false);
}

fn sort_ro(core: &mut Core, call: &mut Call) {
    sort_generic(core, call, true);
}

/// The argument as C string functions see it: up to its first NUL byte.
fn cstr(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(n) => &b[..n],
        None => b,
    }
}

/// One element being sorted.
struct Item {
    element: Vec<u8>,
    score: f64,
    /// The BY value for an ALPHA sort by pattern (`None`: the key was missing).
    by: Option<Vec<u8>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    List,
    Set,
    ZSet,
}

fn sort_generic(core: &mut Core, call: &mut Call, readonly: bool) {
    let mut desc = false;
    let mut alpha = false;
    let mut limit_start: i64 = 0;
    let mut limit_count: i64 = -1;
    let mut sortby: Option<&[u8]> = None;
    let mut dontsort = false;
    let mut store: Option<&[u8]> = None;
    let mut gets: Vec<&[u8]> = Vec::new();
    let mut j = 2;
    while j < call.argc() {
        let left = call.argc() - j - 1;
        let opt = cstr(call.arg(j));
        if is(opt, "asc") {
            desc = false;
        } else if is(opt, "desc") {
            desc = true;
        } else if is(opt, "alpha") {
            alpha = true;
        } else if is(opt, "limit") && left >= 2 {
            let (Some(s), Some(c)) = (parse_i64(call.arg(j + 1)), parse_i64(call.arg(j + 2)))
            else {
                return call.error(NOT_INTEGER);
            };
            limit_start = s;
            limit_count = c;
            j += 2;
        } else if !readonly && is(opt, "store") && left >= 1 {
            store = Some(call.arg(j + 1));
            j += 1;
        } else if is(opt, "by") && left >= 1 {
            let pattern = call.arg(j + 1);
            sortby = Some(pattern);
            // A pattern without `*` (such as `nosort`) names no per-element key: nothing to
            // sort by, the native order is kept.
            dontsort = !cstr(pattern).contains(&b'*');
            j += 1;
        } else if is(opt, "get") && left >= 1 {
            gets.push(call.arg(j + 1));
            j += 1;
        } else {
            return call.syntax_error();
        }
        j += 1;
    }

    let now_ms = call.now_ms;
    let key = call.arg(1);
    let kind = match core.lookup_read(key, now_ms).map(|e| &mut e.value) {
        None | Some(Value::List(_)) => Kind::List,
        Some(Value::Set(_)) => Kind::Set,
        Some(Value::ZSet(z)) => {
            // Redis converts a sorted set it sorts to the skiplist encoding (which keeps a
            // -0 score as -0 from then on), whether or not the SORT succeeds.
            z.convert_to_skiplist();
            Kind::ZSet
        }
        Some(_) => return call.wrong_type(),
    };

    // A set has no native order worth keeping: when storing, or for a script (whose result
    // must not depend on the set's internal layout either), sort it, as Redis does.
    if dontsort && kind == Kind::Set && (store.is_some() || call.in_script) {
        dontsort = false;
        alpha = true;
        sortby = None;
    }

    let len = match core.db.get_raw(key).map(|e| &e.value) {
        Some(Value::List(l)) => l.len(),
        Some(Value::Set(s)) => s.len(),
        Some(Value::ZSet(z)) => z.len(),
        _ => 0,
    } as i64;

    // LIMIT, clamped as Redis does.
    let mut start = limit_start.max(0);
    let mut end = if limit_count < 0 {
        len - 1
    } else {
        start.saturating_add(limit_count) - 1
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }

    // Load the elements. Lists and sorted sets that are not sorted load only the requested
    // range, in native order (reversed for DESC).
    let mut items: Vec<Item> = Vec::new();
    let item = |element: Vec<u8>| Item {
        element,
        score: 0.0,
        by: None,
    };
    match core.db.get_raw(key).map(|e| &e.value) {
        Some(Value::List(_) | Value::ZSet(_)) if dontsort && end < start => {}
        Some(Value::List(l)) if dontsort => {
            let (s, n) = (start as usize, (end - start + 1) as usize);
            if desc {
                items.extend(l.iter().rev().skip(s).take(n).map(|v| item(v.to_vec())));
            } else {
                items.extend(l.iter().skip(s).take(n).map(|v| item(v.to_vec())));
            }
            end -= start;
            start = 0;
        }
        Some(Value::List(l)) => items.extend(l.iter().map(|v| item(v.to_vec()))),
        Some(Value::Set(s)) => items.extend(s.iter().map(|m| item(m.into_owned()))),
        Some(Value::ZSet(z)) if dontsort => {
            let n = (end - start + 1) as usize;
            let iter = if desc {
                z.iter_at(len as usize - 1 - start as usize, true)
            } else {
                z.iter_at(start as usize, false)
            };
            items.extend(iter.take(n).map(|(m, _)| item(m.to_vec())));
            end -= start;
            start = 0;
        }
        Some(Value::ZSet(z)) => items.extend(z.iter().map(|(m, _)| item(m.to_vec()))),
        _ => {}
    }

    if !dontsort {
        let mut conversion_error = false;
        for it in items.iter_mut() {
            let by = match sortby {
                Some(pattern) => match lookup_by_pattern(core, pattern, &it.element, now_ms) {
                    Some(v) => v,
                    None => continue,
                },
                None => it.element.clone(),
            };
            if alpha {
                if sortby.is_some() {
                    it.by = Some(by);
                }
            } else {
                match strtod(&by) {
                    Some(score) => it.score = score,
                    None => conversion_error = true,
                }
            }
        }
        if conversion_error {
            return call.error("ERR One or more scores can't be converted into double");
        }
        let by_pattern = sortby.is_some();
        items.sort_by(|a, b| {
            let ord = compare(a, b, alpha, by_pattern);
            if desc {
                ord.reverse()
            } else {
                ord
            }
        });
    }

    let selected: &[Item] = if end >= start {
        &items[start as usize..=end as usize]
    } else {
        &[]
    };
    let per_item = gets.len().max(1);
    let output_len = selected.len() * per_item;

    let Some(dst) = store else {
        call.out.array_len(output_len);
        for it in selected {
            if gets.is_empty() {
                call.out.bulk(&it.element);
            }
            for pattern in &gets {
                match lookup_by_pattern(core, pattern, &it.element, now_ms) {
                    Some(v) => call.out.bulk(&v),
                    None => call.out.null(),
                }
            }
        }
        return;
    };

    let mut result = List::new();
    for it in selected {
        if gets.is_empty() {
            result.push(End::Tail, &it.element);
        }
        for pattern in &gets {
            let v = lookup_by_pattern(core, pattern, &it.element, now_ms).unwrap_or_default();
            result.push(End::Tail, &v);
        }
    }
    if output_len > 0 {
        let created = core
            .db
            .insert(dst, Value::List(Box::new(result)), None, now_ms)
            .is_none();
        if created {
            core.notify(EVENT_NEW, "new", dst);
        }
        core.modified(dst);
        core.notify(EVENT_LIST, "sortstore", dst);
    } else if core.exists(dst, now_ms) {
        core.db.remove(dst);
        core.modified(dst);
        core.notify(EVENT_GENERIC, "del", dst);
    }
    call.out.integer(output_len as i64);
}

/// Redis's sort comparison: by score (ties by element bytes), or ALPHA by the BY values
/// (missing ones first) or by the elements themselves.
fn compare(a: &Item, b: &Item, alpha: bool, by_pattern: bool) -> Ordering {
    if !alpha {
        return a
            .score
            .partial_cmp(&b.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.element.cmp(&b.element));
    }
    if by_pattern {
        match (&a.by, &b.by) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Less,
            (Some(_), None) => Ordering::Greater,
            (Some(x), Some(y)) => x.cmp(y),
        }
    } else {
        a.element.cmp(&b.element)
    }
}

/// The value `pattern` designates for `element`: `#` is the element itself; otherwise the
/// first `*` is replaced by the element to name a key, whose string value is taken, or with
/// `->field` after the `*`, the field of the hash at that key. `None` when there is no `*`,
/// no such key, or the key holds another type.
fn lookup_by_pattern(
    core: &mut Core,
    pattern: &[u8],
    element: &[u8],
    now_ms: u64,
) -> Option<Vec<u8>> {
    let c = cstr(pattern);
    if c == b"#" {
        return Some(element.to_vec());
    }
    let star = c.iter().position(|&b| b == b'*')?;
    let field = c[star + 1..]
        .windows(2)
        .position(|w| w == b"->")
        .map(|i| star + 1 + i)
        .filter(|&arrow| arrow + 2 < c.len())
        .map(|arrow| &pattern[arrow + 2..]);
    let postfix_end = match field {
        Some(f) => pattern.len() - f.len() - 2,
        None => pattern.len(),
    };
    let mut key = Vec::with_capacity(pattern.len() + element.len());
    key.extend_from_slice(&pattern[..star]);
    key.extend_from_slice(element);
    key.extend_from_slice(&pattern[star + 1..postfix_end]);
    let entry = core.lookup_read(&key, now_ms)?;
    match (&entry.value, field) {
        (Value::Hash(h), Some(f)) => h.get(f).map(|v| v.to_vec()),
        (Value::Str(s), None) => Some(s.as_bytes().into_owned()),
        _ => None,
    }
}

/// Parses a score as C's `strtod` does for SORT: leading whitespace allowed, the rest must be
/// consumed entirely (the text ends at a NUL byte), no NaN, no overflow or underflow. An empty
/// text is 0.
fn strtod(text: &[u8]) -> Option<f64> {
    let text = cstr(text);
    if text.is_empty() {
        return Some(0.0);
    }
    let start = text
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r'))?;
    let s = std::str::from_utf8(&text[start..]).ok()?;
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if body.starts_with(['+', '-']) {
        return None;
    }
    let lower = body.to_ascii_lowercase();
    let v = if lower == "inf" || lower == "infinity" {
        f64::INFINITY
    } else if let Some(hex) = lower.strip_prefix("0x") {
        parse_hex_float(hex)?
    } else {
        if !body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
        {
            return None;
        }
        let v: f64 = body.parse().ok()?;
        if v.is_infinite() {
            return None; // overflow: ERANGE
        }
        let nonzero_digits = body
            .split(['e', 'E'])
            .next()
            .is_some_and(|m| m.bytes().any(|b| (b'1'..=b'9').contains(&b)));
        if (v == 0.0 && nonzero_digits) || (v != 0.0 && !v.is_normal()) {
            return None; // underflow: ERANGE
        }
        v
    };
    Some(if neg { -v } else { v })
}

/// C's hexadecimal float syntax after `0x`: hex digits with an optional point, then an
/// optional binary exponent `p[+-]digits`.
fn parse_hex_float(s: &str) -> Option<f64> {
    let (mantissa, exp) = match s.split_once('p') {
        Some((m, e)) => {
            let (sign, digits) = match e.as_bytes().first() {
                Some(b'+') => (1, &e[1..]),
                Some(b'-') => (-1, &e[1..]),
                _ => (1, e),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (m, sign * digits.parse::<i32>().ok()?)
        }
        None => (s, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut v = 0f64;
    for c in int.chars().chain(frac.chars()) {
        v = v * 16.0 + c.to_digit(16)? as f64;
    }
    let scale = exp - 4 * frac.len() as i32;
    let v = v * 2f64.powi(scale);
    if v.is_infinite() {
        return None;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::strtod;
    use crate::cmd::list::testkit::*;

    #[test]
    fn scores_parse_like_strtod() {
        assert_eq!(strtod(b" 1"), Some(1.0));
        assert_eq!(strtod(b""), Some(0.0));
        assert_eq!(strtod(b"0x10"), Some(16.0));
        assert_eq!(strtod(b"0x1p3"), Some(8.0));
        assert_eq!(strtod(b"+.5"), Some(0.5));
        assert_eq!(strtod(b"5."), Some(5.0));
        assert_eq!(strtod(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(strtod(b"1\0abc"), Some(1.0));
        for bad in [
            "1 ", " ", "abc", "nan", "1e-400", "1e-310", "1e400", "0x", "1e", "--1",
        ] {
            assert_eq!(strtod(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn sorts_lists() {
        let mut h = node();
        h.line(1, "RPUSH l 3 1 2");
        h.check("SORT l", &arr(&["1", "2", "3"]));
        h.check("SORT l DESC LIMIT 1 1", &arr(&["2"]));
        h.check("SORT l LIMIT 5 1", &arr(&[]));
        h.check("SORT l LIMIT -1 2", &arr(&["1", "2"]));
        h.check("SORT l LIMIT 0 0", &arr(&[]));
        h.check("SORT l LIMIT 0", &err("ERR syntax error"));
        h.check(
            "SORT l LIMIT 0 x",
            &err("ERR value is not an integer or out of range"),
        );
        h.check("SORT l BY nosort", &arr(&["3", "1", "2"]));
        h.check("SORT l BY nosort DESC LIMIT 1 2", &arr(&["1", "3"]));
        h.check("SORT nokey", &arr(&[]));
        h.line(1, "RPUSH words b a 10");
        h.check(
            "SORT words",
            &err("ERR One or more scores can't be converted into double"),
        );
        h.check("SORT words ALPHA", &arr(&["10", "a", "b"]));
        h.check("SORT words ALPHA DESC", &arr(&["b", "a", "10"]));
        h.line(1, "SET s v");
        h.check("SORT s", WRONGTYPE);
        h.line(1, "HSET hh a 1");
        h.check("SORT hh", WRONGTYPE);
        h.check("SORT l foo", &err("ERR syntax error"));
    }

    #[test]
    fn by_and_get_patterns() {
        let mut h = node();
        h.line(1, "RPUSH l 3 1 2");
        h.line(1, "MSET w_3 10 w_1 30 w_2 20");
        h.check("SORT l BY w_*", &arr(&["3", "2", "1"]));
        h.check(
            "SORT l BY w_* GET # GET w_*",
            &arr(&["3", "10", "2", "20", "1", "30"]),
        );
        h.check("SORT l BY w_* ALPHA DESC", &arr(&["1", "2", "3"]));
        h.line(1, "HSET ho_1 f b");
        h.line(1, "HSET ho_2 f a");
        h.check("SORT l BY ho_*->f ALPHA", &arr(&["3", "2", "1"]));
        h.check(
            "SORT l BY ho_*->f ALPHA GET ho_*->f GET #",
            &format!(
                "*6\r\n{NIL}{}{}{}{}{}",
                bulk("3"),
                bulk("a"),
                bulk("2"),
                bulk("b"),
                bulk("1")
            ),
        );
        h.check("SORT l BY ho_*-> ALPHA", &arr(&["3", "1", "2"]));
        h.check(
            "SORT l BY nosort GET ho_*->f",
            &format!("*3\r\n{NIL}{}{}", bulk("b"), bulk("a")),
        );
        h.check(
            "SORT l BY ho_*->f",
            &err("ERR One or more scores can't be converted into double"),
        );
        h.check("SORT l GET nostar", &format!("*3\r\n{NIL}{NIL}{NIL}"));
    }

    #[test]
    fn store() {
        let mut h = node();
        h.line(1, "RPUSH l 3 1 2");
        h.line(1, "HSET ho_1 f b");
        h.line(1, "HSET ho_2 f a");
        h.line(1, "SET dst old");
        h.line(1, "EXPIRE dst 100");
        h.check("SORT l GET ho_*->f STORE dst", &int(3));
        h.check("LRANGE dst 0 -1", &arr(&["b", "a", ""]));
        h.check("TTL dst", &int(-1));
        h.check("SORT_RO l STORE dst", &err("ERR syntax error"));
        h.check("SORT_RO l DESC", &arr(&["3", "2", "1"]));
        h.check("SORT nokey STORE dst", &int(0));
        h.check("EXISTS dst", &int(0));
    }

    #[test]
    fn store_wakes_blocked_clients() {
        let mut h = node();
        h.connect(2);
        assert_eq!(h.line(2, "BLPOP foo 5"), "");
        h.line(1, "LPUSH notfoo hello hola aguacate konichiwa zanzibar");
        h.check("SORT notfoo ALPHA STORE foo", &int(5));
        assert_eq!(h.take(2), arr(&["foo", "aguacate"]));
    }

    #[test]
    fn sorts_sets_and_sorted_sets() {
        let mut h = node();
        h.line(1, "SADD st 3 1 2 10");
        h.check("SORT st", &arr(&["1", "2", "3", "10"]));
        h.check("SORT st BY nosort STORE d", &int(4));
        h.check("LRANGE d 0 -1", &arr(&["1", "10", "2", "3"]));
        h.line(1, "ZADD z 1 c 2 b 3 a");
        h.check("SORT z BY nosort", &arr(&["c", "b", "a"]));
        h.check("SORT z BY nosort DESC LIMIT 1 1", &arr(&["b"]));
        h.check("SORT z ALPHA", &arr(&["a", "b", "c"]));
        h.check(
            "SORT z",
            &err("ERR One or more scores can't be converted into double"),
        );
    }
}

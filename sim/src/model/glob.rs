//! Redis glob patterns (KEYS, SCAN MATCH): `*`, `?`, `[abc]`, `[^a]`, `[a-z]`, `\x`.
//! A small backtracking matcher; the model only meets short keys and patterns.

pub fn matches(pattern: &[u8], s: &[u8]) -> bool {
    match pattern.first() {
        None => s.is_empty(),
        Some(b'*') => {
            let rest = &pattern[1..];
            (0..=s.len()).any(|i| matches(rest, &s[i..]))
        }
        Some(b'?') => !s.is_empty() && matches(&pattern[1..], &s[1..]),
        Some(b'[') => {
            let Some(&c) = s.first() else {
                return false;
            };
            let (hit, len) = class(&pattern[1..], c);
            hit && matches(&pattern[1 + len..], &s[1..])
        }
        Some(b'\\') if pattern.len() >= 2 => {
            s.first() == Some(&pattern[1]) && matches(&pattern[2..], &s[1..])
        }
        Some(&p) => s.first() == Some(&p) && matches(&pattern[1..], &s[1..]),
    }
}

/// Matches `c` against the class body starting after `[`; returns whether it matched and how
/// many pattern bytes the class used, the closing `]` included (an unclosed class runs to the
/// end of the pattern).
fn class(p: &[u8], c: u8) -> (bool, usize) {
    let mut i = 0;
    let negate = p.first() == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut hit = false;
    while i < p.len() {
        match p[i] {
            b']' => return (hit != negate, i + 1),
            b'\\' if i + 1 < p.len() => {
                hit |= p[i + 1] == c;
                i += 2;
            }
            lo if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' => {
                let hi = p[i + 2];
                let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
                hit |= (lo..=hi).contains(&c);
                i += 3;
            }
            x => {
                hit |= x == c;
                i += 1;
            }
        }
    }
    (hit != negate, i)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn patterns() {
        let m = |p: &str, s: &str| matches(p.as_bytes(), s.as_bytes());
        assert!(m("*", ""));
        assert!(m("*", "abc"));
        assert!(m("k*", "k12"));
        assert!(!m("k*", "f1"));
        assert!(m("?1", "k1"));
        assert!(!m("?1", "k11"));
        assert!(m("*1*", "k10"));
        assert!(m("[kf]1", "f1"));
        assert!(!m("[^kf]1", "f1"));
        assert!(m("k[0-3]", "k2"));
        assert!(m("k[3-0]", "k2"));
        assert!(!m("k[0-3]", "k5"));
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
        assert!(m("k**1", "k01"));
    }
}

//! Redis-style glob matching for KEYS, SCAN MATCH and PUBSUB patterns.
//!
//! Supports `*`, `?`, `[abc]`, `[^abc]`, `[a-z]` and `\` escapes, like Redis's `stringmatchlen`.
//! Runs in O(pattern x subject) time: on a mismatch only the most recent `*` is retried, which
//! is sufficient for globs and immune to the exponential blow-up of naive recursion.

/// Redis refuses to match patterns that nest more than this many `*` (its matcher recurses
/// once per star); we give the same answer, no match, so KEYS and SCAN agree with Redis.
const MAX_STAR_GROUPS: usize = 1000;

/// True when `subject` matches `pattern`. `nocase` folds ASCII case.
pub fn glob_match(pattern: &[u8], subject: &[u8], nocase: bool) -> bool {
    if star_groups(pattern) > MAX_STAR_GROUPS {
        return false;
    }
    // Redis's matcher never enters its loop for an empty subject, so only an empty pattern
    // matches it (`KEYS *` lists the empty key only because `*` skips matching entirely).
    if subject.is_empty() {
        return pattern.is_empty();
    }
    let (mut p, mut s) = (0usize, 0usize);
    // Where to resume after the last `*`: (pattern index after the star, subject index).
    let mut star: Option<(usize, usize)> = None;
    while s < subject.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    // Collapse runs of stars.
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
                    }
                    star = Some((p, s));
                    continue;
                }
                b'?' => {
                    p += 1;
                    s += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next_p)) = match_class(pattern, p, subject[s], nocase) {
                        if matched {
                            p = next_p;
                            s += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if eq(pattern[p + 1], subject[s], nocase) {
                        p += 2;
                        s += 1;
                        continue;
                    }
                }
                c => {
                    if eq(c, subject[s], nocase) {
                        p += 1;
                        s += 1;
                        continue;
                    }
                }
            }
        }
        // Mismatch: let the last star swallow one more byte, or fail.
        match star {
            Some((sp, ss)) => {
                p = sp;
                s = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    while p < pattern.len() && pattern[p] == b'*' {
        p += 1;
    }
    p == pattern.len()
}

/// Runs of consecutive unescaped `*` (a run counts once, as Redis collapses it).
fn star_groups(pattern: &[u8]) -> usize {
    let mut groups = 0;
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            b'\\' => i += 2,
            b'*' => {
                groups += 1;
                while i < pattern.len() && pattern[i] == b'*' {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    groups
}

fn eq(a: u8, b: u8, nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(&b)
    } else {
        a == b
    }
}

/// Matches `c` against the class starting at `pattern[start] == b'['`. Returns whether it
/// matched and the index after the class. An unterminated class extends to the end of the
/// pattern, as in Redis.
fn match_class(pattern: &[u8], start: usize, c: u8, nocase: bool) -> Option<(bool, usize)> {
    let mut p = start + 1;
    let negate = p < pattern.len() && pattern[p] == b'^';
    if negate {
        p += 1;
    }
    let mut matched = false;
    loop {
        if p >= pattern.len() {
            // Redis treats the end of the pattern as closing the class.
            break;
        }
        match pattern[p] {
            b']' => {
                p += 1;
                break;
            }
            b'\\' if p + 1 < pattern.len() => {
                if eq(pattern[p + 1], c, nocase) {
                    matched = true;
                }
                p += 2;
            }
            lo if p + 2 < pattern.len() && pattern[p + 1] == b'-' => {
                let hi = pattern[p + 2];
                let (lo, hi) = if lo > hi { (hi, lo) } else { (lo, hi) };
                let (l, h, x) = if nocase {
                    (
                        lo.to_ascii_lowercase(),
                        hi.to_ascii_lowercase(),
                        c.to_ascii_lowercase(),
                    )
                } else {
                    (lo, hi, c)
                };
                if x >= l && x <= h {
                    matched = true;
                }
                p += 3;
            }
            x => {
                if eq(x, c, nocase) {
                    matched = true;
                }
                p += 1;
            }
        }
    }
    Some((matched != negate, p))
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    fn m(p: &str, s: &str) -> bool {
        glob_match(p.as_bytes(), s.as_bytes(), false)
    }

    #[test]
    fn basics() {
        assert!(
            !m("*", ""),
            "an empty key matches only an empty pattern, as in Redis"
        );
        assert!(m("", ""));
        assert!(m("*", "anything"));
        assert!(m("h?llo", "hello"));
        assert!(!m("h?llo", "hllo"));
        assert!(m("h*llo", "heeeello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(!m("h[a-b]llo", "hcllo"));
        assert!(m("h\\*llo", "h*llo"));
        assert!(!m("h\\*llo", "hello"));
        assert!(m("key:*:x", "key:123:x"));
        assert!(!m("key:*:x", "key:123:y"));
        assert!(m("*a*b*c*", "xxaxxbxxcxx"));
        assert!(!m("a*", "ba"));
        assert!(glob_match(b"HELLO", b"hello", true));
    }

    #[test]
    fn too_many_stars_never_match_like_redis() {
        let subject = "a".repeat(50_000);
        assert!(!m(&"*?".repeat(50_000), &subject));
        assert!(m(&"*a".repeat(1000), &subject));
        assert!(!m(&"*a".repeat(1001), &subject));
    }

    #[test]
    fn pathological_pattern_is_fast() {
        let pattern = "a*".repeat(40) + "b";
        let subject = "a".repeat(5000);
        assert!(!m(&pattern, &subject));
    }
}

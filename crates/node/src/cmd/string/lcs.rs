//! LCS: the longest common subsequence of two strings, by the classic dynamic-programming
//! table, with Redis 7.0's options (LEN, IDX, MINMATCHLEN, WITHMATCHLEN) and its backtracking
//! order, so the ranges reported under IDX are the same ones Redis reports.

use super::value::{as_str_mut, opt_is};
use crate::args::{parse_i64, NOT_INTEGER};
use crate::command::Call;
use crate::ctx::Core;

/// One matching run: ranges in the first and second string (inclusive) and its length.
struct Match {
    a: (u32, u32),
    b: (u32, u32),
    len: u32,
}

/// The value at `key` as text for LCS: empty when missing, `Err` when not a string.
fn lcs_input(core: &mut Core, key: &[u8], now_ms: u64) -> Result<Vec<u8>, ()> {
    match core.lookup_read(key, now_ms) {
        None => Ok(Vec::new()),
        Some(e) => match as_str_mut(&mut e.value) {
            Some(s) => Ok(s.as_bytes().into_owned()),
            None => Err(()),
        },
    }
}

pub fn lcs(core: &mut Core, call: &mut Call) {
    let now_ms = call.now_ms;
    let a = lcs_input(core, call.arg(1), now_ms);
    let b = lcs_input(core, call.arg(2), now_ms);
    let (Ok(a), Ok(b)) = (a, b) else {
        return call.error("ERR The specified keys must contain string values");
    };

    let (mut get_len, mut get_idx, mut with_match_len) = (false, false, false);
    let mut min_match_len: i64 = 0;
    let mut j = 3;
    while j < call.argc() {
        let opt = call.arg(j);
        let more = j + 1 < call.argc();
        if opt_is(opt, "idx") {
            get_idx = true;
        } else if opt_is(opt, "len") {
            get_len = true;
        } else if opt_is(opt, "withmatchlen") {
            with_match_len = true;
        } else if opt_is(opt, "minmatchlen") && more {
            let Some(n) = parse_i64(call.arg(j + 1)) else {
                return call.error(NOT_INTEGER);
            };
            min_match_len = n.max(0);
            j += 1;
        } else {
            return call.syntax_error();
        }
        j += 1;
    }
    if get_idx && get_len {
        return call.error("ERR If you want both the length and indexes, please just use IDX.");
    }
    if a.len() as u64 >= u64::from(u32::MAX - 1) || b.len() as u64 >= u64::from(u32::MAX - 1) {
        return call.error("ERR String too long for LCS");
    }
    // The table is (|a|+1) x (|b|+1) u32 cells; Redis refuses tables larger than
    // proto-max-bulk-len bytes, which also bounds the work here.
    let cells = (a.len() as u64 + 1) * (b.len() as u64 + 1);
    if cells.saturating_mul(4) > core.config.proto_max_bulk_len {
        return call
            .error("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
    }

    let table = Table::build(&a, &b);
    let total = table.at(a.len(), b.len());
    if get_len {
        return call.out.integer(i64::from(total));
    }
    let (text, matches) = table.backtrack(&a, &b, total);
    if !get_idx {
        return call.out.bulk(&text);
    }
    let shown: Vec<&Match> = matches
        .iter()
        .filter(|m| min_match_len == 0 || i64::from(m.len) >= min_match_len)
        .collect();
    call.out.map_len(2);
    call.out.bulk(b"matches");
    call.out.array_len(shown.len());
    for m in shown {
        call.out.array_len(2 + with_match_len as usize);
        call.out.array_len(2);
        call.out.integer(i64::from(m.a.0));
        call.out.integer(i64::from(m.a.1));
        call.out.array_len(2);
        call.out.integer(i64::from(m.b.0));
        call.out.integer(i64::from(m.b.1));
        if with_match_len {
            call.out.integer(i64::from(m.len));
        }
    }
    call.out.bulk(b"len");
    call.out.integer(i64::from(total));
}

/// LCS lengths of every pair of prefixes: `at(i, j)` = LCS(a[..i], b[..j]).
struct Table {
    cells: Vec<u32>,
    width: usize,
}

impl Table {
    fn build(a: &[u8], b: &[u8]) -> Table {
        let width = b.len() + 1;
        let mut cells = vec![0u32; (a.len() + 1) * width];
        for i in 1..=a.len() {
            let (prev, cur) = cells[(i - 1) * width..(i + 1) * width].split_at_mut(width);
            for j in 1..=b.len() {
                cur[j] = if a[i - 1] == b[j - 1] {
                    prev[j - 1] + 1
                } else {
                    prev[j].max(cur[j - 1])
                };
            }
        }
        Table { cells, width }
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.cells[i * self.width + j]
    }

    /// Walks back from the end: the common subsequence, and its contiguous runs from the last
    /// to the first (the order Redis reports them in). On a mismatch it steps back in `a` only
    /// when that keeps a strictly longer LCS, else in `b`, as Redis does.
    fn backtrack(&self, a: &[u8], b: &[u8], total: u32) -> (Vec<u8>, Vec<Match>) {
        let mut text = vec![0u8; total as usize];
        let mut k = total as usize;
        let mut matches = Vec::new();
        // The run being extended backwards: (a start, a end, b start, b end).
        let mut run: Option<(u32, u32, u32, u32)> = None;
        let (mut i, mut j) = (a.len(), b.len());
        while i > 0 && j > 0 {
            if a[i - 1] == b[j - 1] {
                k -= 1;
                text[k] = a[i - 1];
                let (ai, bj) = ((i - 1) as u32, (j - 1) as u32);
                // Each step back after a match is contiguous with it, so a run only ever grows
                // backwards until a mismatch or the start of either string closes it.
                let r = match run {
                    Some((_, ae, _, be)) => (ai, ae, bj, be),
                    None => (ai, ai, bj, bj),
                };
                run = Some(r);
                i -= 1;
                j -= 1;
                if r.0 == 0 || r.2 == 0 {
                    matches.push(close(r));
                    run = None;
                }
            } else {
                if self.at(i - 1, j) > self.at(i, j - 1) {
                    i -= 1;
                } else {
                    j -= 1;
                }
                if let Some(r) = run.take() {
                    matches.push(close(r));
                }
            }
        }
        (text, matches)
    }
}

fn close((a0, a1, b0, b1): (u32, u32, u32, u32)) -> Match {
    Match {
        a: (a0, a1),
        b: (b0, b1),
        len: a1 - a0 + 1,
    }
}

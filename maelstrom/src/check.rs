//! Checkers for recorded histories.
//!
//! - [`check_lin_kv`]: linearizability of a register per key, by a Wing–Gong search with
//!   memoisation of (linearized set, state), keys checked separately (a history is
//!   linearizable iff each key's sub-history is).
//! - [`check_counter`]: final reads equal the acknowledged adds plus some of the indeterminate
//!   ones; no read shows more (or, for pn-counters, less) than what had been invoked.
//! - [`check_set`]: g-set and broadcast: every acknowledged add is in every final read, and no
//!   read holds an element nobody added.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde_json::Value;

use crate::history::{Call, Op, Outcome};
use crate::proto::code;

/// A checker's verdict. `valid == None` means the search gave up (budget exhausted): neither a
/// pass nor a proof of a violation.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub valid: Option<bool>,
    /// One line per finding (the anomaly, when there is one) and figures.
    pub notes: Vec<String>,
}

impl Verdict {
    pub fn valid_str(&self) -> &'static str {
        match self.valid {
            Some(true) => "true",
            Some(false) => "false",
            None => "unknown",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Linearizability
// ---------------------------------------------------------------------------------------------

/// A register state: the canonical text of the value, or `None` when the key does not exist.
type State = Option<String>;

/// What one operation does to a register, and what it requires of it.
#[derive(Clone, Debug)]
enum RegOp {
    /// A read that saw this (None: the key did not exist).
    Read(State),
    Write(String),
    /// Succeeded: the value was `from`, became `to`.
    Cas(String, String),
    /// Failed with precondition-failed: the key existed with a value other than `from`.
    CasMismatch(String),
}

impl RegOp {
    /// The state after applying the op to `s`, or `None` if the op could not happen in `s`.
    fn step(&self, s: &State) -> Option<State> {
        match self {
            RegOp::Read(v) => (v == s).then(|| s.clone()),
            RegOp::Write(v) => Some(Some(v.clone())),
            RegOp::Cas(from, to) => (s.as_deref() == Some(from.as_str())).then(|| Some(to.clone())),
            RegOp::CasMismatch(from) => match s {
                Some(cur) if cur != from => Some(s.clone()),
                _ => None,
            },
        }
    }
}

/// One operation of a key's sub-history as the search sees it.
#[derive(Clone, Debug)]
struct SearchOp {
    /// Index into the full history, for reports.
    history_index: usize,
    op: RegOp,
    invoke_us: u64,
    /// `None`: indeterminate; it may take effect at any point after its invocation, or never.
    complete_us: Option<u64>,
}

/// Steps the search may take per key before it gives up, so a pathological history cannot hang
/// the harness. Generous: a few seconds of work.
pub const DEFAULT_SEARCH_BUDGET: u64 = 20_000_000;

/// Turns a key's operations into search operations. Reads that got no reply and operations that
/// definitely failed without observing anything are left out: they constrain nothing.
fn to_search_ops(ops: &[&Op]) -> Vec<SearchOp> {
    let mut out = Vec::new();
    for op in ops {
        let canon = |v: &Value| v.to_string();
        let reg = match (&op.call, &op.outcome) {
            (Call::Read { .. }, Outcome::Ok { value }) => Some(RegOp::Read(Some(canon(
                value.as_ref().unwrap_or(&Value::Null),
            )))),
            (Call::Read { .. }, Outcome::Fail { code: c, .. })
                if *c == code::KEY_DOES_NOT_EXIST =>
            {
                Some(RegOp::Read(None))
            }
            (Call::Write { value, .. }, Outcome::Ok { .. } | Outcome::Info { .. }) => {
                Some(RegOp::Write(canon(value)))
            }
            (Call::Cas { from, to, .. }, Outcome::Ok { .. } | Outcome::Info { .. }) => {
                Some(RegOp::Cas(canon(from), canon(to)))
            }
            (Call::Cas { from, .. }, Outcome::Fail { code: c, .. })
                if *c == code::PRECONDITION_FAILED =>
            {
                Some(RegOp::CasMismatch(canon(from)))
            }
            (Call::Cas { .. }, Outcome::Fail { code: c, .. }) if *c == code::KEY_DOES_NOT_EXIST => {
                Some(RegOp::Read(None))
            }
            _ => None,
        };
        if let Some(reg) = reg {
            out.push(SearchOp {
                history_index: op.index,
                op: reg,
                invoke_us: op.invoke_us,
                complete_us: if op.is_info() { None } else { op.complete_us },
            });
        }
    }
    out
}

/// A fixed-size bit set of operations.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
    fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
}

/// The outcome of searching one key.
#[derive(Debug)]
enum KeyResult {
    Linearizable,
    /// The operation (history index) whose completion could not be reached, with up to a few
    /// states the register could be in just before it.
    NotLinearizable {
        stuck_at: usize,
        linearized: u32,
        states: Vec<State>,
    },
    GaveUp,
}

/// Wing & Gong's search over a doubly linked list of call/return events, with Lowe's
/// memoisation: a configuration (set of linearized ops, register state) is explored once.
fn search_key(ops: &[SearchOp], budget: u64) -> KeyResult {
    let n = ops.len();
    if n == 0 {
        return KeyResult::Linearizable;
    }
    // Events: (time, kind, op). Calls sort before returns at the same instant (treating touching
    // operations as concurrent, the permissive reading); indeterminate ops return at infinity.
    #[derive(Clone, Copy)]
    struct Ev {
        is_call: bool,
        op: usize,
        /// For a call: the index of its return event in the list.
        partner: usize,
    }
    let mut order: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * n);
    for (i, o) in ops.iter().enumerate() {
        order.push((o.invoke_us, 0, i));
        order.push((o.complete_us.unwrap_or(u64::MAX), 1, i));
    }
    order.sort();
    // Node 0 is the head sentinel; events are 1..=2n; 2n+1 is the tail sentinel.
    let tail = 2 * n + 1;
    let mut evs = vec![
        Ev {
            is_call: false,
            op: usize::MAX,
            partner: 0
        };
        tail + 1
    ];
    let mut return_pos = vec![0usize; n];
    for (pos, &(_, kind, op)) in order.iter().enumerate() {
        evs[pos + 1] = Ev {
            is_call: kind == 0,
            op,
            partner: 0,
        };
        if kind == 1 {
            return_pos[op] = pos + 1;
        }
    }
    for e in evs.iter_mut().take(tail).skip(1) {
        if e.is_call {
            e.partner = return_pos[e.op];
        }
    }
    let mut next: Vec<usize> = (0..=tail).map(|i| (i + 1).min(tail)).collect();
    let mut prev: Vec<usize> = (0..=tail).map(|i| i.saturating_sub(1)).collect();

    let lift = |next: &mut Vec<usize>, prev: &mut Vec<usize>, i: usize| {
        let (p, nx) = (prev[i], next[i]);
        next[p] = nx;
        prev[nx] = p;
    };
    let unlift = |next: &mut Vec<usize>, prev: &mut Vec<usize>, i: usize| {
        let (p, nx) = (prev[i], next[i]);
        next[p] = i;
        prev[nx] = i;
    };

    let mut state: State = None;
    let mut linearized = Bits::new(n);
    let mut cache: HashSet<(Bits, State)> = HashSet::new();
    // (call event, state before it)
    let mut stack: Vec<(usize, State)> = Vec::new();
    let mut best: Option<(u32, usize, Vec<State>)> = None;
    let mut steps: u64 = 0;
    let mut cur = next[0];
    loop {
        steps += 1;
        if steps > budget {
            return KeyResult::GaveUp;
        }
        if cur == tail {
            return KeyResult::Linearizable;
        }
        let ev = evs[cur];
        if ev.is_call {
            if let Some(new_state) = ops[ev.op].op.step(&state) {
                let mut bits = linearized.clone();
                bits.set(ev.op);
                if cache.insert((bits.clone(), new_state.clone())) {
                    stack.push((cur, std::mem::replace(&mut state, new_state)));
                    linearized = bits;
                    // Lift the call, then its return (the return is later in the list).
                    lift(&mut next, &mut prev, cur);
                    lift(&mut next, &mut prev, ev.partner);
                    cur = next[0];
                    continue;
                }
            }
            cur = next[cur];
        } else {
            if ops[ev.op].complete_us.is_none() {
                // Everything left returns at infinity: only indeterminate ops remain, and they
                // may simply never have happened.
                return KeyResult::Linearizable;
            }
            // A determinate op must be linearized before its return: dead end here.
            let depth = linearized.count();
            match &mut best {
                Some((d, at, states)) if *d == depth && *at == ev.op => {
                    if states.len() < 4 && !states.contains(&state) {
                        states.push(state.clone());
                    }
                }
                Some((d, _, _)) if *d >= depth => {}
                _ => best = Some((depth, ev.op, vec![state.clone()])),
            }
            let Some((call, old)) = stack.pop() else {
                let (linearized, at, states) = best.expect("a dead end was recorded");
                return KeyResult::NotLinearizable {
                    stuck_at: ops[at].history_index,
                    linearized,
                    states,
                };
            };
            let op = evs[call].op;
            state = old;
            linearized.clear(op);
            // Undo in reverse order of lifting.
            unlift(&mut next, &mut prev, evs[call].partner);
            unlift(&mut next, &mut prev, call);
            cur = next[call];
        }
    }
}

/// Non-linearizable keys whose neighbouring operations are listed; the rest get one line each.
const MAX_DETAILED_KEYS: usize = 2;
/// Operations listed around a violation: enough to see the write it missed.
const MAX_NEIGHBOURS: usize = 10;

/// Linearizability of a lin-kv history, key by key. `budget` bounds the search steps per key.
pub fn check_lin_kv(history: &[Op], budget: u64) -> Verdict {
    let mut by_key: BTreeMap<String, Vec<&Op>> = BTreeMap::new();
    for op in history {
        let key = match &op.call {
            Call::Read { key: Some(k) } | Call::Write { key: k, .. } | Call::Cas { key: k, .. } => {
                k
            }
            _ => continue,
        };
        by_key.entry(key.to_string()).or_default().push(op);
    }
    let mut notes = Vec::new();
    let mut valid = Some(true);
    let mut gave_up = 0;
    let mut failed_keys = 0;
    for (key, ops) in &by_key {
        let search = to_search_ops(ops);
        match search_key(&search, budget) {
            KeyResult::Linearizable => {}
            KeyResult::GaveUp => {
                gave_up += 1;
                if valid == Some(true) {
                    valid = None;
                }
                notes.push(format!(
                    "key {key}: search gave up after {budget} steps ({} ops)",
                    search.len()
                ));
            }
            KeyResult::NotLinearizable {
                stuck_at,
                linearized,
                states,
            } => {
                valid = Some(false);
                failed_keys += 1;
                let op = &history[stuck_at];
                let states: Vec<String> = states
                    .iter()
                    .map(|s| s.clone().unwrap_or_else(|| "<absent>".into()))
                    .collect();
                notes.push(format!(
                    "key {key}: not linearizable. No order of the {} ops on this key explains {}; \
                     at best {linearized} ops were linearized before it, leaving the register at {}",
                    search.len(),
                    op.describe(),
                    states.join(" or ")
                ));
                if failed_keys > MAX_DETAILED_KEYS {
                    continue;
                }
                // The evidence: the operations on this key that overlap it, and the last few
                // that completed before it began, in time order.
                let stuck_end = op.complete_us.unwrap_or(u64::MAX);
                let mut near: Vec<&&Op> = ops
                    .iter()
                    .filter(|o| o.index != op.index && o.invoke_us <= stuck_end)
                    .collect();
                near.sort_by_key(|o| std::cmp::Reverse(o.complete_us.unwrap_or(u64::MAX)));
                near.truncate(MAX_NEIGHBOURS);
                near.sort_by_key(|o| o.invoke_us);
                for other in near {
                    notes.push(format!("    near it: {}", other.describe()));
                }
            }
        }
    }
    notes.insert(
        0,
        format!(
            "{} keys, {} ops checked, {} keys not linearizable, {} undecided",
            by_key.len(),
            by_key.values().map(Vec::len).sum::<usize>(),
            failed_keys,
            gave_up
        ),
    );
    Verdict { valid, notes }
}

// ---------------------------------------------------------------------------------------------
// Counters
// ---------------------------------------------------------------------------------------------

/// g-counter and pn-counter. Every final read must lie between the acknowledged sum plus the
/// negative indeterminate deltas and the acknowledged sum plus the positive ones; all final
/// reads must agree (replicas converged). Any read must lie within the deltas invoked before it
/// completed (no increment from nowhere).
pub fn check_counter(history: &[Op]) -> Verdict {
    let mut acked: i64 = 0;
    let (mut info_neg, mut info_pos) = (0i64, 0i64);
    let mut adds: Vec<(u64, i64)> = Vec::new();
    for op in history {
        if let Call::Add { delta } = op.call {
            match op.outcome {
                Outcome::Ok { .. } => acked += delta,
                Outcome::Info { .. } => {
                    if delta < 0 {
                        info_neg += delta
                    } else {
                        info_pos += delta
                    }
                }
                Outcome::Fail { .. } => continue,
            }
            adds.push((op.invoke_us, delta));
        }
    }
    adds.sort();
    let (lo, hi) = (acked + info_neg, acked + info_pos);
    let mut notes = vec![format!(
        "acknowledged sum {acked}, final reads allowed in [{lo}, {hi}]"
    )];
    let mut valid = true;
    let mut finals = BTreeSet::new();
    let mut final_count = 0;
    for op in history {
        let (Call::Read { key: None }, Outcome::Ok { value }) = (&op.call, &op.outcome) else {
            continue;
        };
        let Some(v) = value.as_ref().and_then(Value::as_i64) else {
            valid = false;
            notes.push(format!("read without an integer value: {}", op.describe()));
            continue;
        };
        // Bounds from everything invoked before this read completed (not acknowledged ones:
        // an add may be visible before its reply arrives).
        let end = op.complete_us.unwrap_or(u64::MAX);
        let (mut neg, mut pos) = (0i64, 0i64);
        for &(t, d) in adds.iter().take_while(|(t, _)| *t <= end) {
            let _ = t;
            if d < 0 {
                neg += d
            } else {
                pos += d
            }
        }
        if v < neg || v > pos {
            valid = false;
            notes.push(format!(
                "read outside [{neg}, {pos}], the range of the adds invoked before it: {}",
                op.describe()
            ));
        }
        if op.final_read {
            final_count += 1;
            finals.insert(v);
            if v < lo || v > hi {
                valid = false;
                notes.push(format!(
                    "final read {v} outside [{lo}, {hi}]: {}",
                    op.describe()
                ));
            }
        }
    }
    if final_count == 0 {
        valid = false;
        notes.push("no final reads".into());
    } else if finals.len() > 1 {
        valid = false;
        notes.push(format!("final reads disagree: {finals:?}"));
    } else {
        notes.push(format!("{final_count} final reads, all {finals:?}"));
    }
    Verdict {
        valid: Some(valid),
        notes,
    }
}

// ---------------------------------------------------------------------------------------------
// Sets
// ---------------------------------------------------------------------------------------------

/// g-set and broadcast: every acknowledged add is in every final read; every element any read
/// returned was added (acknowledged or not) by some client.
pub fn check_set(history: &[Op]) -> Verdict {
    let mut acked = BTreeSet::new();
    let mut attempted = BTreeSet::new();
    for op in history {
        let e = match &op.call {
            Call::AddElement { element } => element,
            Call::Broadcast { message } => message,
            _ => continue,
        };
        let e = e.to_string();
        if !matches!(op.outcome, Outcome::Fail { .. }) {
            attempted.insert(e.clone());
        }
        if op.is_ok() {
            acked.insert(e);
        }
    }
    let mut notes = vec![format!(
        "{} acknowledged adds, {} attempted",
        acked.len(),
        attempted.len()
    )];
    let mut valid = true;
    let mut finals = 0;
    for op in history {
        let (Call::Read { key: None }, Outcome::Ok { value }) = (&op.call, &op.outcome) else {
            continue;
        };
        let Some(items) = value.as_ref().and_then(Value::as_array) else {
            valid = false;
            notes.push(format!("read without a list: {}", op.describe()));
            continue;
        };
        let seen: BTreeSet<String> = items.iter().map(Value::to_string).collect();
        let phantom: Vec<&String> = seen.difference(&attempted).take(5).collect();
        if !phantom.is_empty() {
            valid = false;
            notes.push(format!(
                "read holds elements nobody added {phantom:?}: {}",
                op.describe()
            ));
        }
        if op.final_read {
            finals += 1;
            let missing: Vec<&String> = acked.difference(&seen).collect();
            if !missing.is_empty() {
                valid = false;
                notes.push(format!(
                    "final read on {} lacks {} acknowledged elements, e.g. {:?}",
                    op.node,
                    missing.len(),
                    &missing[..missing.len().min(5)]
                ));
            }
        }
    }
    if finals == 0 {
        valid = false;
        notes.push("no final reads".into());
    } else {
        notes.push(format!("{finals} final reads"));
    }
    Verdict {
        valid: Some(valid),
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Builds ops: (process, call, invoke, complete, outcome).
    fn h(ops: Vec<(u64, Call, u64, Option<u64>, Outcome)>) -> Vec<Op> {
        ops.into_iter()
            .enumerate()
            .map(|(index, (process, call, inv, comp, outcome))| Op {
                index,
                process,
                node: "n1".into(),
                call,
                invoke_us: inv,
                complete_us: comp,
                outcome,
                final_read: false,
            })
            .collect()
    }
    fn ok() -> Outcome {
        Outcome::Ok { value: None }
    }
    fn read_ok(v: i64) -> Outcome {
        Outcome::Ok {
            value: Some(json!(v)),
        }
    }
    fn info() -> Outcome {
        Outcome::Info {
            reason: "timeout".into(),
        }
    }
    fn r() -> Call {
        Call::Read {
            key: Some(json!(1)),
        }
    }
    fn w(v: i64) -> Call {
        Call::Write {
            key: json!(1),
            value: json!(v),
        }
    }
    fn cas(a: i64, b: i64) -> Call {
        Call::Cas {
            key: json!(1),
            from: json!(a),
            to: json!(b),
        }
    }

    #[test]
    fn sequential_register_history_is_linearizable() {
        let hist = h(vec![
            (
                0,
                r(),
                0,
                Some(1),
                Outcome::Fail {
                    code: 20,
                    text: String::new(),
                },
            ),
            (0, w(1), 2, Some(3), ok()),
            (1, r(), 4, Some(5), read_ok(1)),
            (1, cas(1, 2), 6, Some(7), ok()),
            (
                0,
                cas(1, 3),
                8,
                Some(9),
                Outcome::Fail {
                    code: 22,
                    text: String::new(),
                },
            ),
            (0, r(), 10, Some(11), read_ok(2)),
        ]);
        assert_eq!(check_lin_kv(&hist, DEFAULT_SEARCH_BUDGET).valid, Some(true));
    }

    #[test]
    fn stale_read_after_a_completed_write_is_rejected() {
        // w(1) completes, then w(2) completes, then a read returns 1: no order explains it.
        let hist = h(vec![
            (0, w(1), 0, Some(10), ok()),
            (1, w(2), 20, Some(30), ok()),
            (2, r(), 40, Some(50), read_ok(1)),
        ]);
        let v = check_lin_kv(&hist, DEFAULT_SEARCH_BUDGET);
        assert_eq!(v.valid, Some(false), "{:?}", v.notes);
        assert!(v.notes.iter().any(|n| n.contains("#2")), "{:?}", v.notes);
    }

    #[test]
    fn concurrent_ops_may_linearize_in_either_order() {
        // The read overlaps w(2), so it may see 1 or 2.
        let hist = h(vec![
            (0, w(1), 0, Some(10), ok()),
            (1, w(2), 20, Some(60), ok()),
            (2, r(), 30, Some(50), read_ok(1)),
            (2, r(), 70, Some(80), read_ok(2)),
        ]);
        assert_eq!(check_lin_kv(&hist, DEFAULT_SEARCH_BUDGET).valid, Some(true));
        // But two sequential reads cannot see 2 then 1 when nothing writes 1 again.
        let hist = h(vec![
            (0, w(1), 0, Some(10), ok()),
            (1, w(2), 20, Some(100), ok()),
            (2, r(), 30, Some(40), read_ok(2)),
            (2, r(), 50, Some(60), read_ok(1)),
        ]);
        assert_eq!(
            check_lin_kv(&hist, DEFAULT_SEARCH_BUDGET).valid,
            Some(false)
        );
    }

    #[test]
    fn indeterminate_writes_may_happen_late_or_never() {
        // w(2) timed out: a later read may see it...
        let hist = h(vec![
            (0, w(1), 0, Some(10), ok()),
            (1, w(2), 20, None, info()),
            (2, r(), 100, Some(110), read_ok(1)),
            (2, r(), 200, Some(210), read_ok(2)),
        ]);
        assert_eq!(check_lin_kv(&hist, DEFAULT_SEARCH_BUDGET).valid, Some(true));
        // ...or never; but it cannot take effect before it was invoked.
        let hist = h(vec![
            (0, w(1), 0, Some(10), ok()),
            (2, r(), 15, Some(18), read_ok(2)),
            (1, w(2), 20, None, info()),
        ]);
        assert_eq!(
            check_lin_kv(&hist, DEFAULT_SEARCH_BUDGET).valid,
            Some(false)
        );
        // An indeterminate cas only applies when its precondition holds.
        let hist = h(vec![
            (0, w(1), 0, Some(10), ok()),
            (1, cas(3, 4), 20, None, info()),
            (2, r(), 100, Some(110), read_ok(4)),
        ]);
        assert_eq!(
            check_lin_kv(&hist, DEFAULT_SEARCH_BUDGET).valid,
            Some(false)
        );
    }

    #[test]
    fn keys_are_checked_separately_and_budget_is_reported() {
        let mut hist = h(vec![
            (0, w(1), 0, Some(10), ok()),
            (1, r(), 20, Some(30), read_ok(1)),
        ]);
        hist.push(Op {
            index: 2,
            process: 3,
            node: "n1".into(),
            call: Call::Read {
                key: Some(json!(2)),
            },
            invoke_us: 40,
            complete_us: Some(50),
            outcome: read_ok(1),
            final_read: false,
        });
        // Key 2 was never written: reading 1 from it is impossible.
        assert_eq!(
            check_lin_kv(&hist, DEFAULT_SEARCH_BUDGET).valid,
            Some(false)
        );
        assert_eq!(check_lin_kv(&hist[..2], 1).valid, None);
    }

    #[test]
    fn many_concurrent_ops_check_quickly() {
        // 10 processes, 400 ops on one key, heavily overlapping, generated to be linearizable:
        // each op takes effect at a point inside its interval.
        let mut ops = Vec::new();
        let mut value = 0i64;
        let mut t = 0u64;
        for i in 0..400u64 {
            let p = i % 10;
            let point = t + 5;
            let (call, out) = match i % 3 {
                0 => {
                    value = (i % 5) as i64;
                    (w(value), ok())
                }
                1 => (r(), read_ok(value)),
                _ => {
                    let from = value;
                    value = (i % 4) as i64;
                    (cas(from, value), ok())
                }
            };
            // Wide interval around the effect point.
            ops.push((p, call, point.saturating_sub(40), Some(point + 40), out));
            t += 10;
        }
        let hist = h(ops);
        let v = check_lin_kv(&hist, DEFAULT_SEARCH_BUDGET);
        assert_eq!(v.valid, Some(true), "{:?}", v.notes);
    }

    #[test]
    fn one_corrupted_read_in_a_long_concurrent_history_is_found() {
        // The same construction as above, then one read in the middle returns a value that no
        // write near it produced.
        let mut ops = Vec::new();
        let mut value = 0i64;
        let mut t = 0u64;
        for i in 0..400u64 {
            let point = t + 5;
            let (call, out) = match i % 3 {
                0 => {
                    value = (i % 5) as i64;
                    (w(value), ok())
                }
                1 if i == 199 => (r(), read_ok(99)),
                1 => (r(), read_ok(value)),
                _ => {
                    let from = value;
                    value = (i % 4) as i64;
                    (cas(from, value), ok())
                }
            };
            ops.push((
                i % 10,
                call,
                point.saturating_sub(40),
                Some(point + 40),
                out,
            ));
            t += 10;
        }
        let v = check_lin_kv(&h(ops), DEFAULT_SEARCH_BUDGET);
        assert_eq!(v.valid, Some(false), "{:?}", v.notes);
        assert!(v.notes.iter().any(|n| n.contains("#199")), "{:?}", v.notes);
    }

    fn add(d: i64, out: Outcome) -> (u64, Call, u64, Option<u64>, Outcome) {
        (0, Call::Add { delta: d }, 0, Some(10), out)
    }
    fn final_read(v: Value, node: &str) -> Op {
        Op {
            index: 99,
            process: 9,
            node: node.into(),
            call: Call::Read { key: None },
            invoke_us: 100,
            complete_us: Some(110),
            outcome: Outcome::Ok { value: Some(v) },
            final_read: true,
        }
    }

    #[test]
    fn counter_final_reads_respect_indeterminate_bounds() {
        let base = h(vec![
            add(5, ok()),
            add(-2, ok()),
            add(4, info()),
            add(-1, info()),
        ]);
        for (v, want) in [
            (3, true),
            (7, true),
            (2, true),
            (6, true),
            (1, false),
            (8, false),
        ] {
            let mut hist = base.clone();
            hist.push(final_read(json!(v), "n1"));
            assert_eq!(check_counter(&hist).valid, Some(want), "final {v}");
        }
        // Disagreeing replicas fail even inside the bounds.
        let mut hist = base.clone();
        hist.push(final_read(json!(3), "n1"));
        hist.push(final_read(json!(7), "n2"));
        assert_eq!(check_counter(&hist).valid, Some(false));
        // No final read at all is not a pass.
        assert_eq!(check_counter(&base).valid, Some(false));
    }

    #[test]
    fn set_final_reads_must_hold_every_acknowledged_add() {
        let base = h(vec![
            (0, Call::AddElement { element: json!(1) }, 0, Some(1), ok()),
            (0, Call::AddElement { element: json!(2) }, 2, None, info()),
            (0, Call::Broadcast { message: json!(3) }, 3, Some(4), ok()),
        ]);
        let mut good = base.clone();
        good.push(final_read(json!([1, 3]), "n1"));
        good.push(final_read(json!([1, 2, 3]), "n2"));
        assert_eq!(check_set(&good).valid, Some(true));
        let mut lost = base.clone();
        lost.push(final_read(json!([1]), "n1"));
        assert_eq!(check_set(&lost).valid, Some(false));
        let mut phantom = base.clone();
        phantom.push(final_read(json!([1, 3, 9]), "n1"));
        assert_eq!(check_set(&phantom).valid, Some(false));
    }
}

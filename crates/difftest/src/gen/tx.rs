//! The transactions family: MULTI ... EXEC / DISCARD with commands of the other families
//! queued, WATCH / UNWATCH with a modification from the same connection in between, queued
//! errors (EXECABORT), and the misuse cases (EXEC or DISCARD without MULTI, nested MULTI,
//! WATCH inside MULTI).
//!
//! A transaction is one sequence: the family returns its first command and queues the rest in
//! [`Ctx::pending`]. EXEC carries the comparison of every queued command (`Cmd::sub`), so its
//! array reply is normalised element by element. The framing commands are never damaged.

use super::{damage, pick_family, Cmd, Cmp, Ctx, Family, ALL};

pub const FAMILY: Family = Family {
    name: "tx",
    weight: 5,
    gen,
};

/// A command of another family, to be queued. Full SCAN iterations and guarded commands cannot
/// run inside MULTI, and a random pick cannot be probed there (only its shape and
/// distinctness are compared).
fn queued(c: &mut Ctx) -> Cmd {
    other(c, true)
}

/// A command of another family; `in_multi` when it is going to be queued.
fn other(c: &mut Ctx, in_multi: bool) -> Cmd {
    let mut fams: Vec<&'static Family> = c
        .families
        .iter()
        .copied()
        .filter(|f| f.name != FAMILY.name)
        .collect();
    if fams.is_empty() {
        fams = ALL.iter().filter(|f| f.name != FAMILY.name).collect();
    }
    c.in_multi = in_multi;
    let mut out = None;
    for _ in 0..20 {
        let f = pick_family(c, &fams);
        let cmd = (f.gen)(c);
        if cmd.cmp.is_scan() || (in_multi && cmd.guard.is_some()) {
            continue;
        }
        out = Some(damage(c, cmd));
        break;
    }
    c.in_multi = false;
    let mut cmd = out.unwrap_or_else(|| Cmd::new("GET").a(c.key()));
    cmd.probe = None;
    cmd
}

/// A write (or, sometimes, a read or a no-op write) on `key`, between WATCH and MULTI.
fn touch(c: &mut Ctx, key: &[u8]) -> Cmd {
    let k = key.to_vec();
    match c.below(20) {
        0 | 1 => Cmd::new("SET").a(k).a(c.value()),
        2 => Cmd::new("DEL").a(k),
        3 => Cmd::new("LPUSH").a(k).a(c.member()),
        4 => Cmd::new("SADD").a(k).a(c.member()),
        5 => Cmd::new("HSET").a(k).a(c.field()).a(c.value()),
        6 => Cmd::new("ZADD").a(k).i(c.range(-3, 3)).a(c.member()),
        7 => Cmd::new("EXPIRE").a(k).i(c.ttl_secs()),
        8 => Cmd::new("PERSIST").a(k),
        9 => Cmd::new("INCR").a(k),
        10 => Cmd::new("APPEND").a(k).a("x"),
        11 => Cmd::new("SET").a(k).a(c.value()).a("NX"),
        12 => Cmd::new("SREM").a(k).a(c.member()),
        13 => Cmd::new("GET").a(k),
        14 => Cmd::new("EXISTS").a(k),
        15 => Cmd::new("RENAME").a(k).a(c.key()),
        16 => Cmd::new("LPOP").a(k),
        17 => Cmd::new("HDEL").a(k).a(c.field()),
        18 => Cmd::new("EXPIRE").a(k).a("0"),
        _ => Cmd::new("ZREM").a(k).a(c.member()),
    }
}

/// The queued commands so far: how their replies inside EXEC's are compared, and what must
/// run before the transaction on their behalf (carried by the EXEC until [`hoist_pre`]).
#[derive(Default)]
struct Queue {
    sub: Vec<Cmp>,
    pre: Vec<Vec<Vec<u8>>>,
}

impl Queue {
    /// Adds `q` to the sequence as a queued command (its reply now is +QUEUED or an error).
    fn push(&mut self, seq: &mut Vec<Cmd>, mut q: Cmd) {
        self.sub.push(q.cmp);
        q.cmp = Cmp::Exact;
        for p in q.pre.drain(..) {
            if !self.pre.contains(&p) {
                self.pre.push(p);
            }
        }
        seq.push(q.fixed());
    }

    fn exec(self) -> Cmd {
        let mut cmd = Cmd::new("EXEC").cmp(Cmp::Exec).fixed();
        cmd.sub = self.sub;
        cmd.pre = self.pre;
        cmd
    }
}

/// MULTI, `n` queued commands, then EXEC (or DISCARD).
fn transaction(c: &mut Ctx, seq: &mut Vec<Cmd>, n: u64, discard: bool) {
    seq.push(Cmd::new("MULTI").fixed());
    let mut queue = Queue::default();
    for _ in 0..n {
        let q = queued(c);
        queue.push(seq, q);
    }
    if discard {
        seq.push(Cmd::new("DISCARD").fixed());
    } else {
        seq.push(queue.exec());
    }
}

fn gen(c: &mut Ctx) -> Cmd {
    let mut seq: Vec<Cmd> = Vec::new();
    match c.weighted(&[45, 25, 10, 20]) {
        0 => {
            let n = c.range(1, 3) as u64;
            let discard = c.pct(15);
            transaction(c, &mut seq, n, discard);
        }
        1 => {
            let watched = c.keys(1, 2);
            seq.push(Cmd::new("WATCH").all(watched.clone()).fixed());
            for _ in 0..c.below(3) {
                let cmd = match c.below(4) {
                    0 | 1 => {
                        let k = c.pick(&watched).clone();
                        touch(c, &k)
                    }
                    // Unrelated, unless it happens to hit a watched key.
                    2 => other(c, false),
                    _ => Cmd::new("EXISTS").all(watched.clone()),
                };
                seq.push(cmd.fixed());
            }
            if c.pct(15) {
                seq.push(Cmd::new("UNWATCH").fixed());
            }
            let n = c.range(1, 3) as u64;
            let discard = c.pct(10);
            transaction(c, &mut seq, n, discard);
        }
        2 => {
            // A command rejected while queueing: EXEC answers EXECABORT.
            seq.push(Cmd::new("MULTI").fixed());
            let mut queue = Queue::default();
            let bad_at = c.below(3);
            for i in 0..3 {
                if i == bad_at {
                    let bad = match c.below(4) {
                        0 => Cmd::new("NOSUCHCMD").a(c.key()),
                        1 => Cmd::new("GET"),
                        2 => Cmd::new("SET").a(c.key()),
                        _ => Cmd::new("ZADD").a(c.key()),
                    };
                    seq.push(bad.fixed());
                } else {
                    let q = queued(c);
                    queue.push(&mut seq, q);
                }
            }
            seq.push(queue.exec());
        }
        _ => match c.below(9) {
            0 => seq.push(Queue::default().exec()),
            1 => seq.push(Cmd::new("DISCARD").fixed()),
            2 => seq.push(Cmd::new("UNWATCH").fixed()),
            3 => {
                // A WATCH left active: a later transaction may abort because of it.
                seq.push(Cmd::new("WATCH").all(c.keys(1, 3)).fixed());
            }
            4 => {
                // Nested MULTI: an error that does not abort the transaction.
                seq.push(Cmd::new("MULTI").fixed());
                seq.push(Cmd::new("MULTI").fixed());
                let mut queue = Queue::default();
                let q = queued(c);
                queue.push(&mut seq, q);
                seq.push(queue.exec());
            }
            5 => {
                // WATCH inside MULTI is refused.
                seq.push(Cmd::new("MULTI").fixed());
                seq.push(Cmd::new("WATCH").a(c.key()).fixed());
                let mut queue = Queue::default();
                let q = queued(c);
                queue.push(&mut seq, q);
                let discard = c.pct(30);
                seq.push(if discard {
                    Cmd::new("DISCARD").fixed()
                } else {
                    queue.exec()
                });
            }
            7 => {
                // A framing command with the wrong arity inside MULTI. A bad EXEC discards
                // the transaction at once in Redis, so the closing DISCARD then has no MULTI.
                seq.push(Cmd::new("MULTI").fixed());
                let mut queue = Queue::default();
                let q = queued(c);
                queue.push(&mut seq, q);
                match c.below(3) {
                    0 => {
                        seq.push(Cmd::new("EXEC").a("x").fixed());
                        seq.push(Cmd::new("DISCARD").fixed());
                    }
                    1 => {
                        seq.push(Cmd::new("MULTI").a("x").fixed());
                        seq.push(queue.exec());
                    }
                    _ => {
                        seq.push(Cmd::new("DISCARD").a("x").fixed());
                        seq.push(queue.exec());
                    }
                }
            }
            8 => {
                // Emptying the database touches the watched keys that existed.
                let watched = c.keys(1, 2);
                seq.push(Cmd::new("WATCH").all(watched).fixed());
                if c.pct(50) {
                    let k = c.key();
                    let t = touch(c, &k);
                    seq.push(t.fixed());
                }
                // Rarely: it empties the keyspace the other families build up.
                if c.pct(30) {
                    seq.push(Cmd::new(if c.pct(50) { "FLUSHDB" } else { "FLUSHALL" }).fixed());
                }
                transaction(c, &mut seq, 1, false);
            }
            _ => {
                // Arity errors of the framing commands themselves (outside MULTI).
                let bad = match c.below(4) {
                    0 => Cmd::new("WATCH"),
                    1 => Cmd::new("EXEC").a("x"),
                    2 => Cmd::new("DISCARD").a("x"),
                    _ => Cmd::new("UNWATCH").a("x"),
                };
                seq.push(bad.fixed());
            }
        },
    }
    hoist_pre(&mut seq);
    let first = seq.remove(0);
    c.pending.extend(seq);
    first
}

/// Moves the `pre` commands of each EXEC to the MULTI that opened its transaction: sent
/// between MULTI and EXEC they would be queued themselves.
fn hoist_pre(seq: &mut [Cmd]) {
    let mut open: Option<usize> = None;
    for i in 0..seq.len() {
        let bare = seq[i].args.len() == 1;
        match seq[i].name().as_str() {
            "MULTI" if bare && open.is_none() => open = Some(i),
            "EXEC" | "DISCARD" if bare => {
                let pre = std::mem::take(&mut seq[i].pre);
                if let Some(m) = open.take() {
                    seq[m].pre = pre;
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{select, Generator};
    use super::*;

    /// Whether the connection is inside MULTI after `cmd`, as Redis sees it (a bad EXEC ends
    /// the transaction too).
    fn step(in_multi: bool, cmd: &Cmd) -> bool {
        let bare = cmd.args.len() == 1;
        match cmd.name().as_str() {
            "MULTI" if bare => true,
            "EXEC" => false,
            "DISCARD" if bare => false,
            _ => in_multi,
        }
    }

    #[test]
    fn nothing_runs_inside_multi_that_cannot() {
        let names: Vec<String> = ALL.iter().map(|f| f.name.to_string()).collect();
        let mut g = Generator::new(11, select(&names).unwrap());
        let mut in_multi = false;
        let mut execs = 0;
        for _ in 0..50_000 {
            let cmd = g.next_cmd();
            if in_multi {
                assert!(cmd.pre.is_empty(), "pre inside MULTI: {cmd:?}");
                assert!(cmd.guard.is_none(), "guard inside MULTI: {cmd:?}");
                assert!(!cmd.cmp.is_scan(), "scan inside MULTI: {cmd:?}");
                assert!(cmd.probe.is_none(), "probe inside MULTI: {cmd:?}");
            }
            if cmd.cmp == Cmp::Exec {
                execs += 1;
                assert!(cmd.pre.is_empty());
            }
            in_multi = step(in_multi, &cmd);
        }
        assert!(execs > 100);
    }

    #[test]
    fn exec_compares_one_reply_per_queued_command() {
        let mut c = Ctx::new(5);
        c.families = ALL.iter().collect();
        for _ in 0..2_000 {
            let first = gen(&mut c);
            let mut seq = vec![first];
            seq.extend(c.pending.drain(..));
            // MULTI ... EXEC: every command between them is queued and compared, except at
            // most one deliberately rejected one (then EXEC answers EXECABORT anyway).
            let last = seq.last().unwrap();
            if seq.len() >= 3 && seq[0].name() == "MULTI" && last.cmp == Cmp::Exec {
                let inner = &seq[1..seq.len() - 1];
                if inner
                    .iter()
                    .any(|q| matches!(q.name().as_str(), "MULTI" | "WATCH"))
                {
                    continue;
                }
                let n = inner.len();
                assert!(last.sub.len() == n || last.sub.len() + 1 == n, "{seq:?}");
            }
        }
    }

    #[test]
    fn pre_commands_move_to_the_opening_multi() {
        let mut exec = Cmd::new("EXEC").cmp(Cmp::Exec);
        exec.pre = vec![vec![b"PING".to_vec()]];
        let mut seq = vec![
            Cmd::new("MULTI"),
            Cmd::new("MULTI"),
            Cmd::new("SORT").a("k"),
            exec,
        ];
        hoist_pre(&mut seq);
        assert_eq!(seq[0].pre, vec![vec![b"PING".to_vec()]]);
        assert!(seq[1].pre.is_empty() && seq[3].pre.is_empty());
    }
}

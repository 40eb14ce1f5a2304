//! The transactions family: MULTI, EXEC, DISCARD, WATCH, UNWATCH and the errors around them
//! (nested MULTI, EXEC/DISCARD without MULTI, WATCH inside MULTI, commands rejected while
//! queueing, which make EXEC answer EXECABORT). The commands queued in between come from the
//! other families; watched keys are the shared ones, so other clients, expiry and FLUSHALL
//! break the watches.

use super::{Cmd, Gen};

fn watch(g: &mut Gen) -> Cmd {
    let mut c = Cmd::new("WATCH");
    for _ in 0..g.range(1, 3) {
        c = c.a(if g.pct(85) {
            g.general_key()
        } else {
            g.pick(&["lx0", "f0"])
        });
    }
    c
}

pub fn gen(g: &mut Gen) -> Cmd {
    if g.in_multi {
        return match g.rng.weighted(&[12, 4, 1, 1, 1, 1, 1]) {
            0 => Cmd::new("EXEC"),
            1 => Cmd::new("DISCARD"),
            2 => Cmd::new("EXEC").a("now"), // rejected: aborts the transaction
            3 => Cmd::new("MULTI"),         // nested
            4 => watch(g),                  // not allowed inside MULTI
            5 => Cmd::new("NOSUCHCOMMAND-TX").a("x"),
            _ => Cmd::new("LPUSH").a(g.general_key()), // wrong arity: flags the transaction
        };
    }
    match g.rng.weighted(&[10, 6, 2, 1, 1, 1]) {
        // RESP2 refuses MULTI to a subscriber; the client would then think it is queueing.
        0 if g.subscribed => Cmd::new("PING"),
        0 => Cmd::new("MULTI"),
        1 => watch(g),
        2 => Cmd::new("UNWATCH"),
        3 => Cmd::new("EXEC"),
        4 => Cmd::new("DISCARD"),
        _ => Cmd::new("EXEC").a("x"),
    }
}

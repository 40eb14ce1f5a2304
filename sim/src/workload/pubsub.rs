//! The pub/sub family: SUBSCRIBE, PSUBSCRIBE, UNSUBSCRIBE, PUNSUBSCRIBE, PUBLISH and PUBSUB
//! CHANNELS / NUMSUB / NUMPAT over a few channels and patterns, so that the clients connected
//! to one node publish to each other. A subscribed client mostly leaves again (in RESP2 only
//! pub/sub commands and PING run while subscribed). Nothing that changes subscriptions or
//! delivers messages is queued inside MULTI.

use super::{Cmd, Gen};

const CHANNELS: &[&str] = &["ch0", "ch1", "ch2", "news.a", "news.b"];
const PATTERNS: &[&str] = &["news.*", "ch?", "*", "ch[01]", "x*"];

fn channel(g: &mut Gen) -> &'static str {
    g.pick(CHANNELS)
}

fn pubsub(g: &mut Gen) -> Cmd {
    match g.range(0, 3) {
        0 => Cmd::new("PUBSUB").a("CHANNELS"),
        1 => Cmd::new("PUBSUB").a("CHANNELS").a(g.pick(PATTERNS)),
        2 => {
            let mut c = Cmd::new("PUBSUB").a("NUMSUB");
            for _ in 0..g.range(0, 2) {
                c = c.a(channel(g));
            }
            c
        }
        _ => Cmd::new("PUBSUB").a("NUMPAT"),
    }
}

fn publish(g: &mut Gen) -> Cmd {
    Cmd::new("PUBLISH")
        .a(channel(g))
        .a(g.pick(&["hi", "", "m1", "m2"]))
}

fn names(g: &mut Gen, c: Cmd, pool: &[&'static str], lo: i64, hi: i64) -> Cmd {
    let mut c = c;
    for _ in 0..g.range(lo, hi) {
        c = c.a(g.pick(pool));
    }
    c
}

pub fn gen(g: &mut Gen) -> Cmd {
    if g.in_multi {
        return pubsub(g);
    }
    if g.subscribed {
        return match g.rng.weighted(&[5, 2, 2, 1, 2, 2, 1]) {
            0 => names(g, Cmd::new("UNSUBSCRIBE"), CHANNELS, 0, 2),
            1 => names(g, Cmd::new("PUNSUBSCRIBE"), PATTERNS, 0, 1),
            2 => names(g, Cmd::new("SUBSCRIBE"), CHANNELS, 1, 2),
            3 => names(g, Cmd::new("PSUBSCRIBE"), PATTERNS, 1, 1),
            4 => {
                if g.pct(50) {
                    Cmd::new("PING")
                } else {
                    Cmd::new("PING").a("hey")
                }
            }
            5 => publish(g),
            _ => pubsub(g),
        };
    }
    match g.rng.weighted(&[4, 2, 10, 4, 1, 1]) {
        0 => names(g, Cmd::new("SUBSCRIBE"), CHANNELS, 1, 3),
        1 => names(g, Cmd::new("PSUBSCRIBE"), PATTERNS, 1, 2),
        2 => publish(g),
        3 => pubsub(g),
        4 => names(g, Cmd::new("UNSUBSCRIBE"), CHANNELS, 0, 1),
        _ => names(g, Cmd::new("PUNSUBSCRIBE"), PATTERNS, 0, 1),
    }
}

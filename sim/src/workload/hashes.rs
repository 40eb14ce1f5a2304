//! The hashes family: HSET, HGET, HDEL, HLEN, HGETALL, HINCRBY on the shared general keys,
//! fields from a small pool.

use super::{Cmd, Gen};

const FIELDS: &[&str] = &["f", "g", "h", "n", "name", ""];
const VALUES: &[&str] = &["1", "-5", "x", "", "9223372036854775806", "hello", "007"];

pub fn gen(g: &mut Gen) -> Cmd {
    let k = g.general_key();
    match g.rng.weighted(&[10, 6, 4, 3, 4, 5]) {
        0 => {
            let mut c = Cmd::new("HSET").a(k);
            for _ in 0..g.range(1, 3) {
                c = c.a(g.pick(FIELDS)).a(g.pick(VALUES));
            }
            if g.pct(3) {
                c = c.a(g.pick(FIELDS)); // odd: an arity error
            }
            c
        }
        1 => Cmd::new("HGET").a(k).a(g.pick(FIELDS)),
        2 => {
            let mut c = Cmd::new("HDEL").a(k);
            for _ in 0..g.range(1, 3) {
                c = c.a(g.pick(FIELDS));
            }
            c
        }
        3 => Cmd::new("HLEN").a(k),
        4 => Cmd::new("HGETALL").a(k),
        _ => {
            let by = g.pick(&["1", "-3", "100", "9223372036854775807", "abc", "0"]);
            Cmd::new("HINCRBY").a(k).a(g.pick(FIELDS)).a(by)
        }
    }
}

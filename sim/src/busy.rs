//! Long scripts on virtual time, driven like the blocking scenarios ([`Bench`]: one node with
//! a skewed, drifting clock and buggify on, requests at chosen virtual times, timers fired
//! when due). The node runs a long script in slices from its timer; each slice costs
//! [`crate::process::SCRIPT_SLICE_US`] of virtual time, as CPU time on a real core would. The
//! swarm does not generate scripts yet; these scenarios pin the behaviour down:
//! - another client's request waits while the script is younger than busy-reply-threshold on
//!   the node's clock, and is answered BUSY once it passes it;
//! - SCRIPT KILL stops a script that wrote nothing, the caller gets the Redis error, and the
//!   node serves everyone again;
//! - a script that wrote is UNKILLABLE and runs to its end, atomically.

use bytes::Bytes;
use lattice_resp::Frame;

use crate::blocking::{bulk, Bench};

fn error(text: &str) -> Frame {
    Frame::Error(Bytes::from(text.to_string()))
}

fn simple(text: &str) -> Frame {
    Frame::Simple(Bytes::from(text.to_string()))
}

const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

#[test]
fn a_long_script_answers_busy_after_the_threshold_and_dies_by_script_kill() {
    for seed in 0..10 {
        let mut b = Bench::new(seed, &[1, 2, 3]);
        b.at(10, 2, &["CONFIG", "SET", "lua-time-limit", "50"]);
        b.at(20, 1, &["EVAL", "while true do end", "0"]);
        b.at(30, 2, &["PING"]);
        b.at(200, 3, &["GET", "x"]);
        b.at(300, 3, &["SCRIPT", "KILL"]);
        b.at(400, 2, &["PING"]);
        b.run(1_000);
        let started = b.sent_at(1, "EVAL while true do end 0");
        let r2 = b.replies_on(2);
        assert_eq!(r2.len(), 3, "seed {seed}: {r2:?}");
        assert_eq!(r2[0].frame, simple("OK"));
        // The PING waited for the threshold, on the node's clock, and no longer than a slice.
        assert_eq!(r2[1].frame, error(BUSY), "seed {seed}");
        assert!(r2[1].node_us >= started + 50_000, "seed {seed}: early");
        assert!(
            r2[1].node_us <= started + 50_000 + 5_000,
            "seed {seed}: late"
        );
        assert_eq!(r2[2].frame, simple("PONG"), "seed {seed}");
        let r3: Vec<&Frame> = b.replies_on(3).iter().map(|r| &r.frame).collect();
        assert_eq!(r3, vec![&error(BUSY), &simple("OK")], "seed {seed}");
        let r1 = b.replies_on(1);
        assert_eq!(r1.len(), 1, "seed {seed}: {r1:?}");
        let Frame::Error(e) = &r1[0].frame else {
            panic!("seed {seed}: {:?}", r1[0].frame)
        };
        assert!(
            e.starts_with(b"ERR Script killed by user with SCRIPT KILL..."),
            "seed {seed}"
        );
        assert!(r1[0].virt >= 300_000, "seed {seed}: ended before the kill");
    }
}

#[test]
fn a_script_that_wrote_is_unkillable_and_stays_atomic() {
    let script = "redis.call('set', 'x', 'a') \
                  local i = 0 while i < 5000000 do i = i + 1 end \
                  redis.call('set', 'x', 'b') return i";
    for seed in 0..3 {
        let mut b = Bench::new(seed, &[1, 2]);
        b.at(10, 2, &["CONFIG", "SET", "busy-reply-threshold", "10"]);
        b.at(20, 1, &["EVAL", script, "0"]);
        b.at(21, 2, &["GET", "x"]);
        b.at(35, 2, &["SCRIPT", "KILL"]);
        b.run(10_000);
        let r1: Vec<&Frame> = b.replies_on(1).iter().map(|r| &r.frame).collect();
        assert_eq!(r1, vec![&Frame::Integer(5_000_000)], "seed {seed}");
        let r2: Vec<&Frame> = b.replies_on(2).iter().map(|r| &r.frame).collect();
        assert_eq!(r2.len(), 3, "seed {seed}: {r2:?}");
        // The GET waited past the threshold and got BUSY: it never saw the half-done 'a'.
        assert_eq!(r2[1], &error(BUSY), "seed {seed}");
        let Frame::Error(e) = r2[2] else {
            panic!("seed {seed}: {:?}", r2[2])
        };
        assert!(e.starts_with(b"UNKILLABLE"), "seed {seed}");
        b.at(10_001, 2, &["GET", "x"]);
        b.run(10_100);
        assert_eq!(b.replies_on(2)[3].frame, bulk("b"), "seed {seed}");
    }
}

//! Redis 7.0 behaviours the model must reproduce (each checked against redis-server 7.0.15).

use bytes::Bytes;
use lattice_resp::Frame;

use super::Model;
use crate::check::Check;

const NOW_US: u64 = 1_700_000_000_000_000;

struct T {
    m: Model,
    now_us: u64,
}

impl T {
    fn new() -> T {
        let mut m = Model::new();
        m.connect(1, "10.0.0.1:1".into());
        T { m, now_us: NOW_US }
    }

    fn run(&mut self, cmd: &str) -> Check {
        let args: Vec<Bytes> = cmd
            .split(' ')
            .map(|a| Bytes::from(a.replace("\\s", " ")))
            .collect();
        self.m.apply(1, self.now_us, &args).reply.expect("a reply")
    }

    fn exact(&mut self, cmd: &str) -> Frame {
        match self.run(cmd) {
            Check::Exact(f) => f,
            other => panic!("{cmd}: not exact: {other:?}"),
        }
    }

    fn int(&mut self, cmd: &str) -> i64 {
        match self.exact(cmd) {
            Frame::Integer(n) => n,
            other => panic!("{cmd}: {other:?}"),
        }
    }

    fn bulk(&mut self, cmd: &str) -> Option<String> {
        match self.exact(cmd) {
            Frame::Bulk(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            Frame::Null => None,
            other => panic!("{cmd}: {other:?}"),
        }
    }

    fn err(&mut self, cmd: &str) -> String {
        match self.exact(cmd) {
            Frame::Error(e) => String::from_utf8_lossy(&e).into_owned(),
            other => panic!("{cmd}: {other:?}"),
        }
    }

    fn advance_ms(&mut self, ms: u64) {
        self.now_us += ms * 1000;
    }
}

fn arr(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

fn i(n: i64) -> Frame {
    Frame::Integer(n)
}

#[test]
fn set_options() {
    let mut t = T::new();
    assert_eq!(t.exact("SET k v EX 10 EX 20"), Frame::Simple("OK".into()));
    assert_eq!(t.int("TTL k"), 20);
    assert_eq!(t.bulk("SET k v2 NX GET").as_deref(), Some("v"));
    assert_eq!(t.bulk("GET k").as_deref(), Some("v"));
    assert_eq!(t.bulk("SET k v3 XX GET").as_deref(), Some("v"));
    assert_eq!(t.int("TTL k"), -1, "SET without KEEPTTL drops the deadline");
    assert_eq!(t.err("SET k v EX 10 PX 100"), "ERR syntax error");
    assert_eq!(t.err("SET k v KEEPTTL EX 10"), "ERR syntax error");
    assert_eq!(
        t.err("SET k v EX 0"),
        "ERR invalid expire time in 'set' command"
    );
    assert_eq!(t.err("GETEX k EX 10 PERSIST"), "ERR syntax error");
    assert_eq!(
        t.bulk("GETEX nokey EX abc"),
        None,
        "missing key answers before validation"
    );
}

#[test]
fn expiry_boundaries_and_conditions() {
    let mut t = T::new();
    t.exact("SET k v");
    assert_eq!(t.int("PEXPIRE k 100"), 1);
    t.advance_ms(100);
    assert_eq!(
        t.bulk("GET k").as_deref(),
        Some("v"),
        "alive through its deadline"
    );
    t.advance_ms(1);
    assert_eq!(t.bulk("GET k"), None);
    t.exact("SET k v");
    assert_eq!(
        t.int("EXPIRE k 100 GT"),
        0,
        "no deadline counts as infinite"
    );
    assert_eq!(t.int("EXPIRE k 100 LT"), 1);
    assert_eq!(t.int("EXPIRE k 50 GT"), 0);
    assert_eq!(t.int("EXPIRE k 200 GT"), 1);
    assert_eq!(
        t.err("EXPIRE k 1 NX XX"),
        "ERR NX and XX, GT or LT options at the same time are not compatible"
    );
    assert_eq!(t.int("PEXPIRE k -1"), 1);
    assert_eq!(t.int("EXISTS k"), 0, "a deadline in the past deletes");
}

#[test]
fn expiretime_rounds_in_redis() {
    let mut t = T::new();
    t.exact("SET k v");
    t.int("PEXPIREAT k 1999999999600");
    assert_eq!(t.run("EXPIRETIME k"), Check::Exact(i(2_000_000_000)));
}

#[test]
fn lcs_like_the_redis_docs() {
    let mut t = T::new();
    t.exact("MSET key1 ohmytext key2 mynewtext");
    assert_eq!(t.bulk("LCS key1 key2").as_deref(), Some("mytext"));
    assert_eq!(t.int("LCS key1 key2 LEN"), 6);
    let matches = |items: Vec<Frame>| {
        arr(vec![
            Frame::Bulk("matches".into()),
            arr(items),
            Frame::Bulk("len".into()),
            i(6),
        ])
    };
    assert_eq!(
        t.exact("LCS key1 key2 IDX"),
        matches(vec![
            arr(vec![arr(vec![i(4), i(7)]), arr(vec![i(5), i(8)])]),
            arr(vec![arr(vec![i(2), i(3)]), arr(vec![i(0), i(1)])]),
        ])
    );
    assert_eq!(
        t.exact("LCS key1 key2 IDX MINMATCHLEN 4 WITHMATCHLEN"),
        matches(vec![arr(vec![
            arr(vec![i(4), i(7)]),
            arr(vec![i(5), i(8)]),
            i(4)
        ])])
    );
}

#[test]
fn bit_commands() {
    let mut t = T::new();
    t.exact("SET mykey foobar");
    assert_eq!(t.int("BITCOUNT mykey"), 26);
    assert_eq!(t.int("BITCOUNT mykey 0 0"), 4);
    assert_eq!(t.int("BITCOUNT mykey 1 1"), 6);
    assert_eq!(t.int("BITCOUNT mykey 1 1 BYTE"), 6);
    assert_eq!(t.int("BITCOUNT mykey 5 30 BIT"), 17);
    assert_eq!(t.int("BITCOUNT nokey 1"), 0, "a missing key answers first");
    assert_eq!(t.err("BITCOUNT mykey 1"), "ERR syntax error");
    t.run("DEL mykey");
    assert_eq!(t.int("SETBIT mykey 7 1"), 0);
    t.run("DEL mykey");
    // \xff\xf0\x00 as in the BITPOS docs.
    t.int("SETBIT mykey 0 1");
    for b in 1..12 {
        t.int(&format!("SETBIT mykey {b} 1"));
    }
    t.int("SETBIT mykey 23 0");
    assert_eq!(t.int("BITPOS mykey 0"), 12);
    assert_eq!(t.int("BITPOS mykey 1 2"), -1);
    assert_eq!(t.int("BITPOS mykey 1 2 -1 BYTE"), -1);
    assert_eq!(t.int("BITPOS mykey 1 7 15 BIT"), 7);
    assert_eq!(t.int("BITPOS nokey 1 a"), -1, "a missing key answers first");
    assert_eq!(
        t.err("BITPOS mykey 2"),
        "ERR The bit argument must be 1 or 0."
    );
}

#[test]
fn incrbyfloat_is_exact_where_the_workload_uses_it() {
    let mut t = T::new();
    assert_eq!(t.bulk("INCRBYFLOAT f 10.5").as_deref(), Some("10.5"));
    assert_eq!(t.bulk("INCRBYFLOAT f 0.1e1").as_deref(), Some("11.5"));
    assert_eq!(t.bulk("INCRBYFLOAT f -11.5").as_deref(), Some("0"));
    assert_eq!(t.err("INCRBYFLOAT f abc"), "ERR value is not a valid float");
    assert_eq!(
        t.err("INCRBYFLOAT f inf"),
        "ERR increment would produce NaN or Infinity"
    );
    t.exact("SET f 1e2");
    assert_eq!(t.bulk("INCRBYFLOAT f 2.5e-1").as_deref(), Some("100.25"));
    assert_eq!(
        t.err("INCR f"),
        "ERR value is not an integer or out of range"
    );
}

#[test]
fn client_reply_modes() {
    let mut t = T::new();
    let mut apply = |cmd: &str| {
        let args: Vec<Bytes> = cmd.split(' ').map(|a| Bytes::from(a.to_string())).collect();
        t.m.apply(1, NOW_US, &args).reply.is_some()
    };
    assert!(!apply("CLIENT REPLY SKIP"));
    assert!(!apply("NOSUCHCOMMAND"), "even errors are skipped");
    assert!(apply("PING"));
    assert!(!apply("CLIENT REPLY OFF"));
    assert!(!apply("CLIENT REPLY SKIP"), "SKIP while OFF keeps OFF");
    assert!(!apply("PING"));
    assert!(apply("CLIENT REPLY ON"));
    assert!(!apply("CLIENT REPLY SKIP"));
    assert!(apply("CLIENT REPLY ON"), "ON answers even right after SKIP");
}

fn bulks(items: &[&str]) -> Frame {
    arr(items
        .iter()
        .map(|s| Frame::Bulk(Bytes::from(s.to_string())))
        .collect())
}

#[test]
fn zadd_options_and_ranges() {
    let mut t = T::new();
    assert_eq!(t.int("ZADD z 1 a 2 b 3 c"), 3);
    assert_eq!(t.int("ZADD z GT CH 0 a 5 b"), 1, "GT only raises");
    assert_eq!(t.int("ZADD z LT CH 0 a 9 c"), 1, "LT only lowers");
    assert_eq!(
        t.bulk("ZADD z INCR GT -1 a"),
        None,
        "INCR GT that would lower"
    );
    assert_eq!(t.bulk("ZINCRBY z 0.5 a").as_deref(), Some("0.5"));
    assert_eq!(
        t.err("ZADD z GT LT 1 a"),
        "ERR GT, LT, and/or NX options at the same time are not compatible"
    );
    assert_eq!(
        t.exact("ZRANGE z 0 -1 WITHSCORES"),
        bulks(&["a", "0.5", "c", "3", "b", "5"])
    );
    assert_eq!(
        t.exact("ZRANGE z (5 0 BYSCORE REV LIMIT 0 1"),
        bulks(&["c"])
    );
    assert_eq!(
        t.err("ZRANGE z 0 -1 LIMIT 0 1"),
        "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
    );
    assert_eq!(t.exact("ZRANGEBYSCORE z -inf +inf LIMIT -1 2"), arr(vec![]));
    assert_eq!(t.int("ZUNIONSTORE d 2 z z WEIGHTS 1 2"), 3);
    assert_eq!(t.bulk("ZSCORE d a").as_deref(), Some("1.5"));
    assert_eq!(t.int("ZREMRANGEBYSCORE z -inf +inf"), 3);
    assert_eq!(t.int("EXISTS z"), 0, "an emptied sorted set is deleted");
}

fn exec(t: &mut T) -> Check {
    t.run("MULTI");
    t.run("PING");
    t.run("EXEC")
}

#[test]
fn watch_follows_redis_modifications_and_expiry() {
    let mut t = T::new();
    t.exact("SET k abc");
    t.run("WATCH k");
    t.int("SETBIT k 1 1");
    assert!(
        matches!(exec(&mut t), Check::Elements(_)),
        "a SETBIT that changes no bit is no modification"
    );
    t.run("WATCH k");
    t.exact("SET k abc");
    assert_eq!(
        exec(&mut t),
        Check::Exact(Frame::NullArray),
        "SET of the same value"
    );
    t.run("SET k v PX 50");
    t.run("WATCH k");
    t.advance_ms(100);
    assert_eq!(
        exec(&mut t),
        Check::Exact(Frame::NullArray),
        "expired since"
    );
    t.run("SET k v PX 10");
    t.advance_ms(20);
    t.run("WATCH k");
    t.run("FLUSHALL");
    assert!(
        matches!(exec(&mut t), Check::Elements(_)),
        "expired before WATCH: flushing it changes nothing"
    );
    t.run("MULTI");
    assert!(t.err("NOSUCH").starts_with("ERR unknown command"));
    assert_eq!(
        t.err("EXEC"),
        "EXECABORT Transaction discarded because of previous errors."
    );
}

#[test]
fn pubsub_pushes_reach_subscribers_and_answer_only_their_request() {
    let mut m = Model::new();
    m.connect(1, "10.0.0.1:1".into());
    m.connect(2, "10.0.0.1:2".into());
    let mut run = |conn: u64, cmd: &str| {
        let args: Vec<Bytes> = cmd.split(' ').map(|a| Bytes::from(a.to_string())).collect();
        m.apply(conn, NOW_US, &args)
    };
    let a = run(1, "SUBSCRIBE ch a");
    assert!(a.reply.is_none());
    assert_eq!(a.pushes.len(), 2);
    assert!(a.pushes[0].answers && !a.pushes[1].answers);
    run(1, "PSUBSCRIBE c* *");
    let p = run(2, "PUBLISH ch hi");
    assert_eq!(p.reply, Some(Check::Exact(i(3))));
    assert_eq!(p.pushes.len(), 3);
    assert!(p.pushes.iter().all(|x| x.conn == 1 && !x.answers));
    assert_eq!(p.pushes[0].group, 0, "the channel message comes first");
    assert!(p.pushes[1].group != 0 && p.pushes[1].group == p.pushes[2].group);
    let g = run(1, "GET k");
    assert!(
        matches!(g.reply, Some(Check::Exact(Frame::Error(_)))),
        "RESP2 subscriber"
    );
    let r = run(1, "CLIENT REPLY OFF");
    assert!(
        matches!(r.reply, Some(Check::Exact(Frame::Error(_)))),
        "refused to a RESP2 subscriber"
    );
    let u = run(1, "UNSUBSCRIBE");
    assert_eq!(
        u.pushes.len(),
        2,
        "one confirmation per channel, in any order"
    );
    assert!(u.pushes[0].answers && matches!(u.pushes[1].check, Check::AnyOf(_)));
    assert!(run(2, "CLIENT REPLY OFF").reply.is_none());
    let s = run(2, "SUBSCRIBE x");
    assert_eq!(s.pushes.len(), 1, "confirmed even with replies off");
    assert!(
        !s.pushes[0].answers,
        "but it answers nothing the client waits for"
    );
}

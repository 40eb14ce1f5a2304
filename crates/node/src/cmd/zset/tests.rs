//! Sorted set command tests through the node's real entry point, replies compared byte for
//! byte (expected replies checked against redis-server 7.0.15).

use proptest::prelude::*;

use crate::cmd::set::tests::{
    arr, bulk, check_all, events, node, subscribe_events, OK, SYNTAX, WRONGTYPE,
};

const NIL: &str = "$-1\r\n";
const NULL_ARRAY: &str = "*-1\r\n";
const EMPTY: &str = "*0\r\n";
const NOT_FLOAT: &str = "-ERR value is not a valid float\r\n";
const NOT_INT: &str = "-ERR value is not an integer or out of range\r\n";

/// A flat array of members and scores (RESP2 WITHSCORES).
fn pairs(items: &[(&str, &str)]) -> String {
    let flat: Vec<&str> = items.iter().flat_map(|(m, s)| [*m, *s]).collect();
    arr(&flat)
}

#[test]
fn zadd_options_and_errors() {
    let mut h = node();
    h.check("ZADD z 1 a 2 b 3 c", ":3\r\n");
    h.check("ZADD z 1 a", ":0\r\n");
    h.check("ZADD z CH 5 a", ":1\r\n");
    h.check("ZADD z NX 10 a 11 d", ":1\r\n");
    h.check("ZADD z XX 20 a 21 e", ":0\r\n");
    h.check("ZSCORE z a", &bulk("20"));
    h.check("ZADD z GT CH 1 a", ":0\r\n");
    h.check("ZADD z LT CH 1 a", ":1\r\n");
    h.check("ZADD z GT CH 100 a 1 new", ":2\r\n");
    h.check(
        "ZADD z NX XX 1 a",
        "-ERR XX and NX options at the same time are not compatible\r\n",
    );
    let gtltnx = "-ERR GT, LT, and/or NX options at the same time are not compatible\r\n";
    h.check("ZADD z LT GT 1 a", gtltnx);
    h.check("ZADD z NX GT 1 a", gtltnx);
    h.check("ZADD z NX LT 1 a", gtltnx);
    h.check(
        "ZADD z INCR 1 a 2 b",
        "-ERR INCR option supports a single increment-element pair\r\n",
    );
    h.check("ZADD z NX 1", SYNTAX);
    h.check("ZADD z 1 a 2", SYNTAX);
    h.check("ZADD z abc a", NOT_FLOAT);
    h.check("ZADD z nan a", NOT_FLOAT);
    h.check("ZADD z 1e500 a", NOT_FLOAT);
    h.check("ZADD z 1 x abc y", NOT_FLOAT);
    h.check("ZSCORE z x", NIL);
    h.check("ZADD z 0x10 hex", ":1\r\n");
    h.check("ZSCORE z hex", &bulk("16"));
    h.check("ZADD z INCR 1 a", &bulk("101"));
    h.check("ZADD z INCR NX 1 a", NIL);
    h.check("ZADD z INCR XX 1 nosuch", NIL);
    h.check("ZADD z INCR GT -1 a", NIL);
    h.check("ZADD z inf a", ":0\r\n");
    h.check(
        "ZADD z INCR -inf a",
        "-ERR resulting score is not a number (NaN)\r\n",
    );
    h.check(
        "ZINCRBY z -inf a",
        "-ERR resulting score is not a number (NaN)\r\n",
    );
    h.check("ZINCRBY z abc a", NOT_FLOAT);
    h.check("ZINCRBY fresh 2.5 m", &bulk("2.5"));
    h.check("ZINCRBY fresh 0.1 m", &bulk("2.6000000000000001"));
    h.check("ZADD nokey XX 1 a", ":0\r\n");
    h.check("ZADD nokey XX INCR 1 a", NIL);
    h.check("EXISTS nokey", ":0\r\n");
    h.check("SET str x", OK);
    h.check("ZADD str 1 a", WRONGTYPE);
    h.check("ZINCRBY str 1 a", WRONGTYPE);
    // A listpack stores -0 as 0, a skiplist keeps the sign (as Redis does).
    h.check("ZADD neg -0 a", ":1\r\n");
    h.check("ZSCORE neg a", &bulk("0"));
    h.check("CONFIG SET zset-max-ziplist-entries 0", OK);
    h.check("ZADD neg2 -0 a", ":1\r\n");
    h.check("ZSCORE neg2 a", &bulk("-0"));
}

#[test]
fn reads() {
    let mut h = node();
    h.line(1, "ZADD z 1 a 2 b 3 c");
    h.line(1, "SET str x");
    h.check("ZCARD z", ":3\r\n");
    h.check("ZCARD nokey", ":0\r\n");
    h.check("ZSCORE z b", &bulk("2"));
    h.check("ZSCORE nokey b", NIL);
    h.check(
        "ZMSCORE z a nosuch c",
        "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n3\r\n",
    );
    h.check("ZMSCORE nokey a b", "*2\r\n$-1\r\n$-1\r\n");
    h.check("ZRANK z c", ":2\r\n");
    h.check("ZREVRANK z c", ":0\r\n");
    h.check("ZRANK z nosuch", NIL);
    h.check("ZRANK nokey a", NIL);
    for c in [
        "ZCARD str",
        "ZSCORE str a",
        "ZMSCORE str a",
        "ZRANK str a",
        "ZRANGE str 0 -1",
        "ZCOUNT str 0 1",
        "ZREM str a",
        "ZPOPMIN str",
        "ZSCAN str 0",
    ] {
        h.check(c, WRONGTYPE);
    }
    h.check("ZREM z a nosuch", ":1\r\n");
    h.check("ZREM z b c", ":2\r\n");
    h.check("EXISTS z", ":0\r\n");
    h.check("ZREM z b", ":0\r\n");
}

#[test]
fn ranges() {
    let mut h = node();
    h.line(1, "ZADD z 1 a 2 b 3 c 4 d 5 e 6 f");
    h.check("ZRANGE z 0 -1", &arr(&["a", "b", "c", "d", "e", "f"]));
    h.check("ZRANGE z 2 3 WITHSCORES", &pairs(&[("c", "3"), ("d", "4")]));
    h.check("ZRANGE z -2 -1", &arr(&["e", "f"]));
    h.check("ZRANGE z -100 100", &arr(&["a", "b", "c", "d", "e", "f"]));
    h.check("ZRANGE z 5 1", EMPTY);
    h.check("ZRANGE z a b", NOT_INT);
    h.check(
        "ZRANGE z 0 2 REV WITHSCORES",
        &pairs(&[("f", "6"), ("e", "5"), ("d", "4")]),
    );
    h.check("ZREVRANGE z 0 1", &arr(&["f", "e"]));
    h.check("ZRANGE z (1 5 BYSCORE", &arr(&["b", "c", "d", "e"]));
    h.check("ZRANGE z 5 (1 BYSCORE REV", &arr(&["e", "d", "c", "b"]));
    h.check("ZRANGE z -inf +inf BYSCORE LIMIT 1 2", &arr(&["b", "c"]));
    h.check(
        "ZRANGE z +inf -inf BYSCORE REV LIMIT 1 2",
        &arr(&["e", "d"]),
    );
    h.check(
        "ZRANGE z +inf -inf BYSCORE REV LIMIT 1 -1",
        &arr(&["e", "d", "c", "b", "a"]),
    );
    h.check("ZRANGE z -inf +inf BYSCORE LIMIT -1 2", EMPTY);
    h.check("ZRANGE z -inf +inf BYSCORE LIMIT 10 2", EMPTY);
    h.check("ZRANGE z -inf +inf BYSCORE LIMIT 0 0", EMPTY);
    h.check("ZRANGE z -inf +inf BYSCORE LIMIT a 0", NOT_INT);
    h.check("ZRANGE z -inf +inf BYSCORE LIMIT 0", SYNTAX);
    h.check(
        "ZRANGE z 0 -1 LIMIT 0 1",
        "-ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX\r\n",
    );
    h.check(
        "ZRANGE z - + BYLEX WITHSCORES",
        "-ERR syntax error, WITHSCORES not supported in combination with BYLEX\r\n",
    );
    h.check("ZRANGE z 0 1 BYSCORE BYLEX", SYNTAX);
    h.check("ZRANGE z 0 1 REV REV", SYNTAX);
    h.check(
        "ZRANGE z abc 1 BYSCORE",
        "-ERR min or max is not a float\r\n",
    );
    h.check("ZRANGEBYSCORE z (2 (4 WITHSCORES", &pairs(&[("c", "3")]));
    h.check("ZRANGEBYSCORE z 4 2", EMPTY);
    h.check("ZRANGEBYSCORE z 2 4 REV", SYNTAX);
    h.check(
        "ZREVRANGEBYSCORE z 4 2 WITHSCORES LIMIT 0 1",
        &pairs(&[("d", "4")]),
    );
    h.check("ZREVRANGEBYSCORE z (4 (2", &arr(&["c"]));
    h.check("ZREVRANGE z 0 1 BYSCORE", SYNTAX);
    h.check("ZCOUNT z 2 4", ":3\r\n");
    h.check("ZCOUNT z (2 4", ":2\r\n");
    h.check("ZCOUNT z -inf +inf", ":6\r\n");
    h.check("ZCOUNT z 4 2", ":0\r\n");
    h.check("ZCOUNT z a b", "-ERR min or max is not a float\r\n");
    h.check("ZCOUNT nokey 1 2", ":0\r\n");
    h.check("ZRANGE nokey 0 -1", EMPTY);

    h.line(1, "ZADD l 0 a 0 b 0 c 0 d 0 e 0 f 0 g");
    h.check("ZRANGEBYLEX l [b (e", &arr(&["b", "c", "d"]));
    h.check("ZRANGEBYLEX l (b [e", &arr(&["c", "d", "e"]));
    h.check("ZRANGEBYLEX l - + LIMIT 2 3", &arr(&["c", "d", "e"]));
    h.check("ZREVRANGEBYLEX l [e (b", &arr(&["e", "d", "c"]));
    h.check("ZREVRANGEBYLEX l + - LIMIT 1 2", &arr(&["f", "e"]));
    h.check("ZRANGE l [d [b BYLEX REV LIMIT 0 2", &arr(&["d", "c"]));
    let lex_err = "-ERR min or max not valid string range item\r\n";
    h.check("ZRANGEBYLEX l b e", lex_err);
    h.check("ZRANGEBYLEX l +a -", lex_err);
    h.check("ZLEXCOUNT l - +", ":7\r\n");
    h.check("ZLEXCOUNT l [b [d", ":3\r\n");
    h.check("ZLEXCOUNT l [d [b", ":0\r\n");
    h.check("ZLEXCOUNT l (a (a", ":0\r\n");
    h.check("ZLEXCOUNT l a b", lex_err);

    h.check("ZREMRANGEBYLEX l [b (d", ":2\r\n");
    h.check("ZREMRANGEBYRANK l 0 1", ":2\r\n");
    h.check("ZREMRANGEBYRANK l -1 -1", ":1\r\n");
    h.check("ZREMRANGEBYRANK l 10 20", ":0\r\n");
    h.check("ZRANGE l 0 -1", &arr(&["e", "f"]));
    h.check("ZREMRANGEBYRANK l a 1", NOT_INT);
    h.check("ZREMRANGEBYSCORE z 2 3", ":2\r\n");
    h.check("ZREMRANGEBYSCORE z (5 +inf", ":1\r\n");
    h.check(
        "ZREMRANGEBYSCORE z a 1",
        "-ERR min or max is not a float\r\n",
    );
    h.check("ZRANGE z 0 -1", &arr(&["a", "d", "e"]));
    h.check("ZREMRANGEBYRANK z 0 -1", ":3\r\n");
    h.check("EXISTS z", ":0\r\n");
}

#[test]
fn rangestore() {
    let mut h = node();
    h.line(1, "ZADD z 1 a 2 b 3 c");
    h.check("ZRANGESTORE d z 0 -1", ":3\r\n");
    h.check(
        "ZRANGE d 0 -1 WITHSCORES",
        &pairs(&[("a", "1"), ("b", "2"), ("c", "3")]),
    );
    h.check("ZRANGESTORE d z (1 +inf BYSCORE LIMIT 0 1", ":1\r\n");
    h.check("ZRANGE d 0 -1", &arr(&["b"]));
    h.check("ZRANGESTORE d z 0 -1 WITHSCORES", SYNTAX);
    h.check("ZRANGESTORE d nokey 0 -1", ":0\r\n");
    h.check("EXISTS d", ":0\r\n");
    h.check("SET str x", OK);
    h.check("ZRANGESTORE str z 0 0", ":1\r\n");
    h.check("TYPE str", "+zset\r\n");
}

#[test]
fn pops() {
    let mut h = node();
    h.line(1, "ZADD z 1 a 2 b 3 c 4 d 5 e 6 f");
    h.check("ZPOPMIN z", &pairs(&[("a", "1")]));
    h.check("ZPOPMAX z", &pairs(&[("f", "6")]));
    h.check("ZPOPMIN z 2", &pairs(&[("b", "2"), ("c", "3")]));
    h.check("ZPOPMAX z 0", EMPTY);
    let positive = "-ERR value is out of range, must be positive\r\n";
    h.check("ZPOPMIN z -1", positive);
    h.check("ZPOPMIN z abc", positive);
    h.check("ZPOPMIN z 1 2", SYNTAX);
    h.check("ZPOPMIN nokey", EMPTY);
    h.check("ZPOPMIN nokey 0", EMPTY);
    h.check("SET str x", OK);
    h.check("ZPOPMIN str 0", WRONGTYPE);
    h.check("ZPOPMAX z 10", &pairs(&[("e", "5"), ("d", "4")]));
    h.check("EXISTS z", ":0\r\n");

    h.line(1, "ZADD z 1 a 2 b 3 c");
    h.check(
        "ZMPOP 1 z MIN",
        "*2\r\n$1\r\nz\r\n*1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n",
    );
    h.check(
        "ZMPOP 2 nokey z MAX COUNT 5",
        "*2\r\n$1\r\nz\r\n*2\r\n*2\r\n$1\r\nc\r\n$1\r\n3\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n",
    );
    h.check("ZMPOP 1 z MIN", NULL_ARRAY);
    h.check("ZMPOP 2 nokey str MIN", WRONGTYPE);
    let numkeys = "-ERR numkeys should be greater than 0\r\n";
    h.check("ZMPOP 0 z MIN", numkeys);
    h.check("ZMPOP abc z MIN", numkeys);
    h.check("ZMPOP 3 z MIN", SYNTAX);
    h.check("ZMPOP 1 z FOO", SYNTAX);
    let count = "-ERR count should be greater than 0\r\n";
    h.check("ZMPOP 1 z MIN COUNT 0", count);
    h.check("ZMPOP 1 z MIN COUNT a", count);
    h.check("ZMPOP 1 z MIN COUNT 1 COUNT 1", SYNTAX);
    h.check("ZMPOP 1 z MIN COUNT", SYNTAX);
    h.check(
        "BZPOPMIN z abc",
        "-ERR timeout is not a float or out of range\r\n",
    );
    h.check("BZPOPMIN z -1", "-ERR timeout is negative\r\n");
    h.check("BZPOPMIN str 0", WRONGTYPE);
    h.line(1, "ZADD z 1 a 2 b");
    h.check(
        "BZPOPMIN nokey z 0",
        "*3\r\n$1\r\nz\r\n$1\r\na\r\n$1\r\n1\r\n",
    );
    h.check(
        "BZMPOP 0 1 z MAX",
        "*2\r\n$1\r\nz\r\n*1\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n",
    );
    // Inside MULTI a blocking pop that finds nothing answers at once.
    h.check("MULTI", OK);
    h.check("BZPOPMIN z 0", "+QUEUED\r\n");
    h.check("BZMPOP 0 1 z MIN", "+QUEUED\r\n");
    h.check("EXEC", "*2\r\n*-1\r\n*-1\r\n");
}

#[test]
fn blocking_pop_woken_by_another_client() {
    let mut h = node();
    h.connect(2);
    // Parked: no reply yet.
    h.check("BZPOPMIN z1 z2 0", "");
    h.connect(3);
    assert_eq!(h.line(3, "BZPOPMAX z2 0"), "");
    assert_eq!(h.line(2, "ZADD z2 1 a 2 b"), ":2\r\n");
    // First come, first served: client 1 gets the minimum, client 3 the rest.
    assert_eq!(h.take(1), "*3\r\n$2\r\nz2\r\n$1\r\na\r\n$1\r\n1\r\n");
    assert_eq!(h.take(3), "*3\r\n$2\r\nz2\r\n$1\r\nb\r\n$1\r\n2\r\n");
    h.check("EXISTS z2", ":0\r\n");

    // A key that becomes another type does not wake the client with an error.
    h.check("BZMPOP 0 1 z MIN COUNT 2", "");
    h.line(2, "MULTI");
    h.line(2, "ZADD z 0 foo");
    h.line(2, "DEL z");
    h.line(2, "SET z foo");
    h.line(2, "EXEC");
    assert_eq!(h.take(1), "");
    h.line(2, "DEL z");
    h.line(2, "ZADD z 1 bar 2 baz 3 qux");
    assert_eq!(
        h.take(1),
        "*2\r\n$1\r\nz\r\n*2\r\n*2\r\n$3\r\nbar\r\n$1\r\n1\r\n*2\r\n$3\r\nbaz\r\n$1\r\n2\r\n"
    );
    // Requests pipelined behind a parked command run after it.
    h.check("BZPOPMIN w 0", "");
    h.check("PING", "");
    h.line(2, "ZADD w 5 m");
    assert_eq!(
        h.take(1),
        "*3\r\n$1\r\nw\r\n$1\r\nm\r\n$1\r\n5\r\n+PONG\r\n"
    );
}

#[test]
fn blocking_pop_times_out() {
    let mut h = node();
    h.check("BZPOPMIN z 1.5", "");
    h.advance(1000);
    assert_eq!(h.take(1), "");
    h.advance(600);
    assert_eq!(h.take(1), NULL_ARRAY);
    h.line(1, "HELLO 3");
    h.check("BZMPOP 0.01 1 z MIN", "");
    h.advance(20);
    assert_eq!(h.take(1), "_\r\n");
    // After the timeout the client is free again.
    h.check("ZADD z 1 a", ":1\r\n");
    h.check("BZPOPMIN z 1", "*3\r\n$1\r\nz\r\n$1\r\na\r\n,1\r\n");
}

#[test]
fn set_operations() {
    let mut h = node();
    h.line(1, "ZADD z1 1 a 2 b 3 c");
    h.line(1, "ZADD z2 10 b 20 c 30 d");
    h.line(1, "SADD s1 a d x");
    h.line(1, "SET str x");
    h.check("ZUNION 2 z1 z2", &arr(&["a", "b", "c", "d"]));
    h.check(
        "ZUNION 2 z1 z2 WITHSCORES",
        &pairs(&[("a", "1"), ("b", "12"), ("c", "23"), ("d", "30")]),
    );
    h.check(
        "ZUNION 2 z1 z2 WEIGHTS 2 3 WITHSCORES",
        &pairs(&[("a", "2"), ("b", "34"), ("c", "66"), ("d", "90")]),
    );
    h.check(
        "ZUNION 2 z1 z2 AGGREGATE MIN WITHSCORES",
        &pairs(&[("a", "1"), ("b", "2"), ("c", "3"), ("d", "30")]),
    );
    h.check(
        "ZUNION 3 z1 z2 s1 WITHSCORES",
        &pairs(&[
            ("x", "1"),
            ("a", "2"),
            ("b", "12"),
            ("c", "23"),
            ("d", "31"),
        ]),
    );
    h.check(
        "ZINTER 2 z1 z2 WITHSCORES",
        &pairs(&[("b", "12"), ("c", "23")]),
    );
    h.check("ZINTER 2 z1 s1 WITHSCORES", &pairs(&[("a", "2")]));
    h.check("ZINTER 2 z1 nokey", EMPTY);
    h.check("ZDIFF 2 z1 z2 WITHSCORES", &pairs(&[("a", "1")]));
    h.check("ZDIFF 2 z1 s1", &arr(&["b", "c"]));
    h.check("ZDIFF 1 z1 WEIGHTS 1", SYNTAX);
    h.check("ZDIFF 2 z1 z2 AGGREGATE SUM", SYNTAX);
    h.check(
        "ZUNION 0 z1",
        "-ERR at least 1 input key is needed for 'zunion' command\r\n",
    );
    h.check("ZUNION abc z1", NOT_INT);
    h.check("ZUNION 3 z1 z2", SYNTAX);
    h.check("ZUNION 2 z1 str", WRONGTYPE);
    // Key types are checked before the options.
    h.check("ZUNION 2 str z1 FOO", WRONGTYPE);
    h.check("ZUNION 2 z1 z2 WEIGHTS 1", SYNTAX);
    h.check(
        "ZUNION 2 z1 z2 WEIGHTS 1 nan",
        "-ERR weight value is not a float\r\n",
    );
    h.check("ZUNION 2 z1 z2 AGGREGATE FOO", SYNTAX);
    h.check("ZUNIONSTORE d 2 z1 z2", ":4\r\n");
    h.check("ZUNIONSTORE d 2 z1 z2 WITHSCORES", SYNTAX);
    h.check("ZINTERSTORE d 2 z1 z2 WEIGHTS 1 -1", ":2\r\n");
    h.check(
        "ZRANGE d 0 -1 WITHSCORES",
        &pairs(&[("c", "-17"), ("b", "-8")]),
    );
    h.check("ZDIFFSTORE d 2 z1 z2", ":1\r\n");
    h.check("ZINTERSTORE d 2 z1 nokey", ":0\r\n");
    h.check("EXISTS d", ":0\r\n");
    h.check(
        "ZINTERSTORE d 0 z1",
        "-ERR at least 1 input key is needed for 'zinterstore' command\r\n",
    );
    h.check("ZINTERCARD 2 z1 z2", ":2\r\n");
    h.check("ZINTERCARD 2 z1 z2 LIMIT 1", ":1\r\n");
    h.check(
        "ZINTERCARD 2 z1 z2 LIMIT -1",
        "-ERR LIMIT can't be negative\r\n",
    );
    h.check("ZINTERCARD 2 z1 z2 WEIGHTS 1 2", SYNTAX);
    h.check("ZINTERCARD 2 z1 nokey", ":0\r\n");
    // inf - inf is 0 by Redis's convention, as is inf * 0.
    h.line(1, "ZADD pinf inf a");
    h.line(1, "ZADD ninf -inf a");
    h.check("ZUNION 2 pinf ninf WITHSCORES", &pairs(&[("a", "0")]));
    h.check(
        "ZUNION 2 pinf ninf WEIGHTS 0 1 WITHSCORES",
        &pairs(&[("a", "-inf")]),
    );
    h.check(
        "ZUNION 2 pinf ninf AGGREGATE MAX WITHSCORES",
        &pairs(&[("a", "inf")]),
    );
}

#[test]
fn zscan_and_zrandmember() {
    let mut h = node();
    h.check("ZSCAN nokey 0", "*2\r\n$1\r\n0\r\n*0\r\n");
    h.line(1, "ZADD z 1 a 0.1 b");
    h.check(
        "ZSCAN z 0",
        "*2\r\n$1\r\n0\r\n*4\r\n$1\r\nb\r\n$19\r\n0.10000000000000001\r\n$1\r\na\r\n$1\r\n1\r\n",
    );
    h.check(
        "ZSCAN z 0 MATCH a",
        "*2\r\n$1\r\n0\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n",
    );
    h.check("ZSCAN z x", "-ERR invalid cursor\r\n");
    h.check("ZSCAN z 0 COUNT 0", SYNTAX);
    for i in 0..500 {
        h.line(1, &format!("ZADD big {} m{i}", i / 3));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        let reply = h.line(1, &format!("ZSCAN big {cursor} COUNT 10"));
        let lines: Vec<&str> = reply.split("\r\n").collect();
        cursor = lines[2].to_string();
        for pair in lines[4..].chunks(4) {
            if pair.len() == 4 {
                let (m, s) = (pair[1], pair[3]);
                let i: usize = m[1..].parse().unwrap();
                assert_eq!(s, (i / 3).to_string());
                seen.insert(i);
            }
        }
        calls += 1;
        if cursor == "0" {
            break;
        }
    }
    assert!(calls >= 30);
    assert_eq!(seen.len(), 500);

    h.check("ZRANDMEMBER nokey", NIL);
    h.check("ZRANDMEMBER nokey 5", EMPTY);
    h.check("ZRANDMEMBER z 0", EMPTY);
    h.check("ZRANDMEMBER z 5", &arr(&["b", "a"]));
    h.check(
        "ZRANDMEMBER z 5 WITHSCORES",
        &pairs(&[("b", "0.10000000000000001"), ("a", "1")]),
    );
    let reply = h.line(1, "ZRANDMEMBER z -5 WITHSCORES");
    assert!(reply.starts_with("*10\r\n"));
    h.check(
        "ZRANDMEMBER z -9223372036854775808",
        "-ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807\r\n",
    );
    h.check(
        "ZRANDMEMBER z -9223372036854770000 WITHSCORES",
        "-ERR value is out of range\r\n",
    );
    h.check("ZRANDMEMBER z 5 WITHSCOR", SYNTAX);
    h.check("ZRANDMEMBER z 5 WITHSCORES x", SYNTAX);
    let picks: std::collections::BTreeSet<String> =
        (0..50).map(|_| h.line(1, "ZRANDMEMBER big")).collect();
    assert!(picks.len() > 10);
}

#[test]
fn resp3_shapes() {
    let mut h = node();
    h.line(1, "HELLO 3");
    h.line(1, "ZADD z 1 a 2 b 3 c");
    h.check("ZSCORE z a", ",1\r\n");
    h.check("ZSCORE z none", "_\r\n");
    h.check("ZMSCORE z a none", "*2\r\n,1\r\n_\r\n");
    h.check("ZRANGE z 0 0 WITHSCORES", "*1\r\n*2\r\n$1\r\na\r\n,1\r\n");
    h.check("ZINCRBY z 1 a", ",2\r\n");
    h.check("ZPOPMIN z", "*2\r\n$1\r\na\r\n,2\r\n");
    h.check("ZPOPMIN z 1", "*1\r\n*2\r\n$1\r\nb\r\n,2\r\n");
    h.check("ZPOPMIN nokey", EMPTY);
    h.check("ZMPOP 1 nokey MIN", "_\r\n");
    h.check(
        "ZRANDMEMBER z 1 WITHSCORES",
        "*1\r\n*2\r\n$1\r\nc\r\n,3\r\n",
    );
    h.check("ZUNION 1 z WITHSCORES", "*1\r\n*2\r\n$1\r\nc\r\n,3\r\n");
    // ZSCAN's scores stay bulk strings.
    h.check("ZSCAN z 0", "*2\r\n$1\r\n0\r\n*2\r\n$1\r\nc\r\n$1\r\n3\r\n");
}

#[test]
fn encodings_follow_the_config() {
    let mut h = node();
    h.line(1, "ZADD z 1 a");
    h.check("OBJECT ENCODING z", &bulk("listpack"));
    let long = "x".repeat(65);
    h.line(1, &format!("ZADD z 2 {long}"));
    h.check("OBJECT ENCODING z", &bulk("skiplist"));
    h.line(1, &format!("ZREM z {long}"));
    h.check("OBJECT ENCODING z", &bulk("skiplist"));
    h.check("CONFIG SET zset-max-ziplist-entries 2", OK);
    h.line(1, "ZADD y 1 a 2 b");
    h.check("OBJECT ENCODING y", &bulk("listpack"));
    h.line(1, "ZADD y 3 c");
    h.check("OBJECT ENCODING y", &bulk("skiplist"));
    h.check("ZUNIONSTORE u 1 z", ":1\r\n");
    h.check("OBJECT ENCODING u", &bulk("listpack"));
}

#[test]
fn events_and_watch() {
    let mut h = node();
    subscribe_events(&mut h, 2);
    h.take(2);
    for line in [
        "ZADD z 1 a 2 b 3 c 4 d 5 e",
        "ZADD z 1 a",
        "ZADD z INCR 1 a",
        "ZINCRBY z 1 a",
        "ZREM z nosuch",
        "ZREM z e",
        "ZREMRANGEBYSCORE z 100 200",
        "ZREMRANGEBYSCORE z 4 4",
        "ZREMRANGEBYRANK z 0 0",
        "ZREMRANGEBYLEX z - +",
        "ZADD y 1 a 2 b 3 c",
        "ZPOPMIN y",
        "ZPOPMAX y",
        "ZMPOP 1 y MIN",
        "ZADD x 1 a",
        "ZUNIONSTORE d 1 x",
        "ZINTERSTORE d 1 x",
        "ZDIFFSTORE d 1 x",
        "ZRANGESTORE d x 0 -1",
        "ZDIFFSTORE d 2 x x",
    ] {
        h.line(1, line);
    }
    assert_eq!(
        events(&mut h, 2).join(" "),
        "new:z zadd:z zincr:z zincr:z zrem:z zremrangebyscore:z zremrangebyrank:z \
         zremrangebylex:z del:z new:y zadd:y zpopmin:y zpopmax:y zpopmin:y del:y new:x zadd:x \
         new:d zunionstore:d zinterstore:d zdiffstore:d zrangestore:d del:d"
    );
    h.connect(3);
    h.check("WATCH x", OK);
    h.line(3, "ZADD x 2 a");
    h.check("MULTI", OK);
    h.check("ZCARD x", "+QUEUED\r\n");
    h.check("EXEC", NULL_ARRAY);
}

/// A large sorted set through the commands, against a model (sorted Vec).
#[test]
fn large_set_matches_a_model() {
    let mut h = node();
    h.check_every = u64::MAX;
    let mut model: Vec<(i64, String)> = Vec::new();
    let mut x = 12345u64;
    for i in 0..3000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let score = ((x >> 33) % 500) as i64;
        let member = format!("m{}", (x >> 20) % 2000);
        if let Some(p) = model.iter().position(|(_, m)| *m == member) {
            model.remove(p);
        }
        if i % 5 == 4 {
            h.line(1, &format!("ZREM z {member}"));
        } else {
            h.line(1, &format!("ZADD z {score} {member}"));
            model.push((score, member));
        }
    }
    model.sort();
    h.check("ZCARD z", &format!(":{}\r\n", model.len()));
    for probe in [0, 1, 17, 500, model.len() / 2, model.len() - 1] {
        let (s, m) = &model[probe];
        h.check(&format!("ZRANK z {m}"), &format!(":{probe}\r\n"));
        h.check(
            &format!("ZREVRANK z {m}"),
            &format!(":{}\r\n", model.len() - 1 - probe),
        );
        h.check(&format!("ZSCORE z {m}"), &bulk(&s.to_string()));
    }
    let want: Vec<&str> = model[100..110].iter().map(|(_, m)| m.as_str()).collect();
    h.check("ZRANGE z 100 109", &arr(&want));
    let in_range: Vec<&str> = model
        .iter()
        .filter(|(s, _)| (100..=200).contains(s))
        .map(|(_, m)| m.as_str())
        .collect();
    h.check("ZRANGEBYSCORE z 100 200", &arr(&in_range));
    h.check("ZCOUNT z 100 200", &format!(":{}\r\n", in_range.len()));
    let rev: Vec<&str> = in_range.iter().rev().skip(3).take(7).copied().collect();
    h.check("ZREVRANGEBYSCORE z 200 100 LIMIT 3 7", &arr(&rev));
    check_all(&h);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Random ZADD/ZREM/ZINCRBY/ZPOPMIN histories: ranks, ranges and counts agree with a model.
    #[test]
    fn commands_match_a_model(ops in proptest::collection::vec((0u8..4, 0u8..40, -20i8..20), 1..300)) {
        let mut h = node();
        h.check_every = u64::MAX;
        let mut model: Vec<(i64, String)> = Vec::new();
        for (op, m, s) in ops {
            let member = format!("k{m}");
            let pos = model.iter().position(|(_, x)| *x == member);
            match op {
                0 => {
                    h.line(1, &format!("ZADD z {s} {member}"));
                    if let Some(p) = pos { model.remove(p); }
                    model.push((s as i64, member));
                }
                1 => {
                    h.line(1, &format!("ZREM z {member}"));
                    if let Some(p) = pos { model.remove(p); }
                }
                2 => {
                    h.line(1, &format!("ZINCRBY z {s} {member}"));
                    let old = pos.map(|p| model.remove(p).0).unwrap_or(0);
                    model.push((old + s as i64, member));
                }
                _ => {
                    h.line(1, "ZPOPMIN z");
                    model.sort();
                    if !model.is_empty() { model.remove(0); }
                }
            }
        }
        model.sort();
        let all: Vec<&str> = model.iter().map(|(_, m)| m.as_str()).collect();
        prop_assert_eq!(h.line(1, "ZRANGE z 0 -1"), arr(&all));
        let rev: Vec<&str> = all.iter().rev().copied().collect();
        prop_assert_eq!(h.line(1, "ZREVRANGE z 0 -1"), arr(&rev));
        let mid: Vec<&str> = model.iter().filter(|(s, _)| (-5..5).contains(s)).map(|(_, m)| m.as_str()).collect();
        prop_assert_eq!(h.line(1, "ZRANGEBYSCORE z -5 (5"), arr(&mid));
        for (i, (_, m)) in model.iter().enumerate() {
            prop_assert_eq!(h.line(1, &format!("ZRANK z {m}")), format!(":{i}\r\n"));
        }
        check_all(&h);
    }
}

//! Set command tests through the node's real entry point, replies compared byte for byte
//! (expected replies checked against redis-server 7.0.15).

use std::collections::BTreeSet;

pub(crate) use lattice_testkit::Harness;

/// A node with client 1, its RNG seeded with 7.
pub(crate) fn node() -> Harness {
    seeded(7)
}

pub(crate) fn seeded(seed: u64) -> Harness {
    let mut h = Harness::seeded(seed);
    h.connect(1);
    h
}

/// Event names published on `__keyevent@0__:*` to connection `id` (subscribed with
/// [`subscribe_events`]), in order, as "event:key".
pub(crate) fn events(h: &mut Harness, id: u64) -> Vec<String> {
    let text = h.take(id);
    text.split("__keyevent@0__:")
        .skip(1)
        .map(|rest| {
            let mut parts = rest.split("\r\n");
            let event = parts.next().unwrap_or("");
            let _len = parts.next();
            let key = parts.next().unwrap_or("");
            format!("{event}:{key}")
        })
        .collect()
}

/// Checks the node's invariants and those of every set and sorted set stored.
pub(crate) fn check_all(h: &Harness) {
    h.node.check_invariants();
    for e in h.node.stored_entries() {
        match &e.value {
            lattice_store::Value::Set(s) => s.check_invariants(),
            lattice_store::Value::ZSet(z) => z.check_invariants(),
            _ => {}
        }
    }
}

pub(crate) fn subscribe_events(h: &mut Harness, id: u64) {
    h.check("CONFIG SET notify-keyspace-events KEAn", OK);
    h.connect(id);
    h.line(id, "PSUBSCRIBE __keyevent*");
}

pub(crate) const OK: &str = "+OK\r\n";
pub(crate) const WRONGTYPE: &str =
    "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
pub(crate) const SYNTAX: &str = "-ERR syntax error\r\n";

pub(crate) fn bulk(s: &str) -> String {
    format!("${}\r\n{}\r\n", s.len(), s)
}

/// An array of bulk strings.
pub(crate) fn arr(items: &[&str]) -> String {
    let mut s = format!("*{}\r\n", items.len());
    for i in items {
        s.push_str(&bulk(i));
    }
    s
}

/// The members of a flat array-of-bulk-strings reply, sorted.
pub(crate) fn members(reply: &str) -> BTreeSet<String> {
    let mut lines = reply.split("\r\n");
    let head = lines.next().unwrap();
    assert!(
        head.starts_with('*') || head.starts_with('~'),
        "not an array: {reply:?}"
    );
    let mut out = BTreeSet::new();
    while let Some(l) = lines.next() {
        if l.starts_with('$') {
            out.insert(lines.next().unwrap().to_string());
        }
    }
    out
}

fn set_of(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn add_remove_members() {
    let mut h = node();
    h.check("SADD s 3 1 2 2", ":3\r\n");
    h.check("SADD s 3 4", ":1\r\n");
    h.check("SCARD s", ":4\r\n");
    // An intset iterates in ascending order, as in Redis.
    h.check("SMEMBERS s", &arr(&["1", "2", "3", "4"]));
    h.check("OBJECT ENCODING s", &bulk("intset"));
    h.check("SISMEMBER s 2", ":1\r\n");
    h.check("SISMEMBER s x", ":0\r\n");
    h.check("SMISMEMBER s 1 x 3", "*3\r\n:1\r\n:0\r\n:1\r\n");
    h.check("SMISMEMBER nokey a", "*1\r\n:0\r\n");
    h.check("SADD s a", ":1\r\n");
    h.check("OBJECT ENCODING s", &bulk("hashtable"));
    h.check("SREM s a 1 zz", ":2\r\n");
    h.check("OBJECT ENCODING s", &bulk("hashtable"));
    assert_eq!(members(&h.line(1, "SMEMBERS s")), set_of(&["2", "3", "4"]));
    h.check("SREM s 2 3 4", ":3\r\n");
    h.check("EXISTS s", ":0\r\n");
    h.check("SREM s 2", ":0\r\n");
    h.check("SMEMBERS nokey", "*0\r\n");
    h.check("SCARD nokey", ":0\r\n");
    h.check("SET str x", OK);
    for c in [
        "SADD str a",
        "SREM str a",
        "SMEMBERS str",
        "SISMEMBER str a",
        "SMISMEMBER str a",
        "SCARD str",
        "SPOP str",
        "SPOP str 0",
        "SRANDMEMBER str",
        "SRANDMEMBER str 0",
        "SSCAN str 0",
    ] {
        h.check(c, WRONGTYPE);
    }
    h.check(
        "SADD s",
        "-ERR wrong number of arguments for 'sadd' command\r\n",
    );
}

#[test]
fn intset_limit_follows_the_config() {
    let mut h = node();
    h.check("CONFIG SET set-max-intset-entries 3", OK);
    h.check("SADD s 1 2 3", ":3\r\n");
    h.check("OBJECT ENCODING s", &bulk("intset"));
    h.check("SADD s 4", ":1\r\n");
    h.check("OBJECT ENCODING s", &bulk("hashtable"));
    h.check("SADD t 01", ":1\r\n");
    h.check("OBJECT ENCODING t", &bulk("hashtable"));
}

#[test]
fn algebra() {
    let mut h = node();
    h.line(1, "SADD a 1 2 3 4");
    h.line(1, "SADD b 3 4 5 x");
    h.line(1, "SET str v");
    h.check("SINTER a b", &arr(&["3", "4"]));
    h.check("SINTER a nokey", "*0\r\n");
    // Every key's type is checked before a missing key empties the result.
    h.check("SINTER nokey str", WRONGTYPE);
    h.check("SINTER str nokey", WRONGTYPE);
    assert_eq!(
        members(&h.line(1, "SUNION a b nokey")),
        set_of(&["1", "2", "3", "4", "5", "x"])
    );
    h.check("SUNION a str", WRONGTYPE);
    h.check("SDIFF a b", &arr(&["1", "2"]));
    h.check("SDIFF nokey a", "*0\r\n");
    h.check("SINTERCARD 2 a b", ":2\r\n");
    h.check("SINTERCARD 2 a b LIMIT 1", ":1\r\n");
    h.check("SINTERCARD 2 a b LIMIT 0", ":2\r\n");
    h.check("SINTERCARD 2 a nokey", ":0\r\n");
    h.check(
        "SINTERCARD 0 a",
        "-ERR numkeys should be greater than 0\r\n",
    );
    h.check(
        "SINTERCARD x a",
        "-ERR numkeys should be greater than 0\r\n",
    );
    h.check(
        "SINTERCARD 3 a b",
        "-ERR Number of keys can't be greater than number of args\r\n",
    );
    h.check(
        "SINTERCARD 2 a b LIMIT -1",
        "-ERR LIMIT can't be negative\r\n",
    );
    h.check("SINTERCARD 2 a b LIMIT", SYNTAX);
    h.check("SINTERCARD 2 a b FOO", SYNTAX);

    h.check("SINTERSTORE d a b", ":2\r\n");
    h.check("SMEMBERS d", &arr(&["3", "4"]));
    h.check("OBJECT ENCODING d", &bulk("intset"));
    h.check("SUNIONSTORE d a b", ":6\r\n");
    h.check("OBJECT ENCODING d", &bulk("hashtable"));
    h.check("SDIFFSTORE d a b", ":2\r\n");
    h.check("SMEMBERS d", &arr(&["1", "2"]));
    // A destination holding another type is simply replaced.
    h.check("SUNIONSTORE str a", ":4\r\n");
    h.check("TYPE str", "+set\r\n");
    // An empty result deletes the destination.
    h.check("EXPIRE d 100", ":1\r\n");
    h.check("SINTERSTORE d a nokey", ":0\r\n");
    h.check("EXISTS d", ":0\r\n");
    h.check("SDIFFSTORE d a a", ":0\r\n");
    h.check("EXISTS d", ":0\r\n");
    // The source may be the destination.
    h.check("SINTERSTORE a a b", ":2\r\n");
    h.check("SMEMBERS a", &arr(&["3", "4"]));
}

#[test]
fn smove() {
    let mut h = node();
    h.line(1, "SADD a 1 2");
    h.line(1, "SADD b x");
    h.line(1, "SET str v");
    h.check("SMOVE a b 1", ":1\r\n");
    h.check("SMOVE a b 9", ":0\r\n");
    h.check("SMOVE nokey b 1", ":0\r\n");
    h.check("SMOVE nokey str 1", ":0\r\n");
    h.check("SMOVE a str 2", WRONGTYPE);
    h.check("SMOVE str a 2", WRONGTYPE);
    h.check("SMOVE a a 2", ":1\r\n");
    h.check("SMOVE a a 9", ":0\r\n");
    h.check("SMOVE a c 2", ":1\r\n");
    h.check("EXISTS a", ":0\r\n");
    h.check("SMEMBERS c", &arr(&["2"]));
    assert_eq!(members(&h.line(1, "SMEMBERS b")), set_of(&["1", "x"]));
}

#[test]
fn spop_and_srandmember() {
    let mut h = node();
    h.check("SPOP nokey", "$-1\r\n");
    h.check("SPOP nokey 3", "*0\r\n");
    h.check("SRANDMEMBER nokey", "$-1\r\n");
    h.check("SRANDMEMBER nokey 3", "*0\r\n");
    let must_be_positive = "-ERR value is out of range, must be positive\r\n";
    h.check("SPOP s -1", must_be_positive);
    h.check("SPOP s abc", must_be_positive);
    h.check("SPOP s 1 2", SYNTAX);
    h.check("SRANDMEMBER s 1 2", SYNTAX);
    h.check(
        "SRANDMEMBER s -9223372036854775808",
        "-ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807\r\n",
    );
    let all: BTreeSet<String> = (0..50).map(|i| format!("m{i}")).collect();
    let words: Vec<&str> = all.iter().map(String::as_str).collect();
    h.line(1, &format!("SADD s {}", words.join(" ")));
    h.check("SRANDMEMBER s 0", "*0\r\n");
    // Distinct members, at most the set's size.
    for n in [1, 5, 20, 40, 50, 100] {
        let got = members(&h.line(1, &format!("SRANDMEMBER s {n}")));
        assert_eq!(got.len(), n.min(50));
        assert!(got.is_subset(&all));
    }
    // Negative counts repeat.
    let reply = h.line(1, "SRANDMEMBER s -200");
    assert!(reply.starts_with("*200\r\n"));
    assert!(members(&reply).is_subset(&all));
    let one = h.line(1, "SPOP s");
    let popped = members(&h.line(1, "SPOP s 10"));
    assert_eq!(popped.len(), 10);
    h.check("SCARD s", ":39\r\n");
    let rest = members(&h.line(1, "SMEMBERS s"));
    let one = one.split("\r\n").nth(1).unwrap().to_string();
    assert!(!rest.contains(&one) && popped.is_disjoint(&rest) && !popped.contains(&one));
    assert_eq!(rest.len() + popped.len() + 1, 50);
    h.check("SPOP s 0", "*0\r\n");
    assert_eq!(members(&h.line(1, "SPOP s 100")), rest);
    h.check("EXISTS s", ":0\r\n");

    // The same seed and history give the same picks.
    let run = |seed| {
        let mut h = seeded(seed);
        h.line(1, "SADD s a b c d e f g h i j");
        [
            h.line(1, "SRANDMEMBER s 3"),
            h.line(1, "SPOP s 2"),
            h.line(1, "SRANDMEMBER s -4"),
        ]
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn sscan_returns_every_member() {
    let mut h = node();
    h.check("SSCAN nokey 0", "*2\r\n$1\r\n0\r\n*0\r\n");
    h.check("SSCAN nokey 0 COUNT 0", "*2\r\n$1\r\n0\r\n*0\r\n");
    h.check("SSCAN s x", "-ERR invalid cursor\r\n");
    h.line(1, "SADD small 1 2 3");
    h.check(
        "SSCAN small 0",
        "*2\r\n$1\r\n0\r\n*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n",
    );
    h.check("SSCAN small 0 COUNT 0", SYNTAX);
    h.check(
        "SSCAN small 0 COUNT x",
        "-ERR value is not an integer or out of range\r\n",
    );
    h.check("SSCAN small 0 MATCH", SYNTAX);
    h.check("SSCAN small 0 TYPE set", SYNTAX);
    h.check(
        "SSCAN small 0 MATCH 2",
        "*2\r\n$1\r\n0\r\n*1\r\n$1\r\n2\r\n",
    );
    for i in 0..300 {
        h.line(1, &format!("SADD big k{i}"));
    }
    let mut seen = BTreeSet::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        let reply = h.line(1, &format!("SSCAN big {cursor} COUNT 20"));
        let mut lines = reply.split("\r\n");
        lines.next();
        lines.next();
        cursor = lines.next().unwrap().to_string();
        seen.extend(members(&lines.collect::<Vec<_>>().join("\r\n")));
        calls += 1;
        // Changes during the scan do not hide members present throughout.
        h.line(1, &format!("SREM big k{}", 250 + calls));
        if cursor == "0" {
            break;
        }
    }
    assert!(calls > 10);
    for i in 0..250 {
        assert!(seen.contains(&format!("k{i}")), "k{i} missed");
    }
    check_all(&h);
}

#[test]
fn resp3_shapes() {
    let mut h = node();
    h.line(1, "HELLO 3");
    h.line(1, "SADD s 1 2");
    h.check("SMEMBERS s", "~2\r\n$1\r\n1\r\n$1\r\n2\r\n");
    h.check("SMEMBERS nokey", "~0\r\n");
    h.check("SINTER s nokey", "~0\r\n");
    h.check("SPOP nokey 1", "~0\r\n");
    h.check("SRANDMEMBER nokey 1", "*0\r\n");
    h.check("SRANDMEMBER s 5", "*2\r\n$1\r\n1\r\n$1\r\n2\r\n");
    h.check("SPOP s 5", "~2\r\n$1\r\n1\r\n$1\r\n2\r\n");
    h.check("SPOP s", "_\r\n");
}

#[test]
fn events_and_watch() {
    let mut h = node();
    subscribe_events(&mut h, 2);
    h.take(2);
    for line in [
        "SADD s a b",
        "SADD s a",
        "SREM s x",
        "SREM s a",
        "SADD t b c",
        "SMOVE s t b",
        "SADD u 1 2 3",
        "SPOP u",
        "SPOP u 5",
        "SINTERSTORE d t t",
        "SUNIONSTORE d t",
        "SDIFFSTORE d t t",
        "SDIFFSTORE d t t",
    ] {
        h.line(1, line);
    }
    assert_eq!(
        events(&mut h, 2).join(" "),
        "new:s sadd:s srem:s new:t sadd:t srem:s del:s new:u sadd:u spop:u spop:u del:u \
         new:d sinterstore:d sunionstore:d del:d"
    );

    // A watched set changed by another client aborts the transaction.
    h.connect(3);
    h.check("WATCH t", OK);
    h.line(3, "SADD t z");
    h.check("MULTI", OK);
    h.check("SCARD t", "+QUEUED\r\n");
    h.check("EXEC", "*-1\r\n");
    // ... but a command that changes nothing does not.
    h.check("WATCH t", OK);
    h.line(3, "SADD t z");
    h.line(3, "SREM t nothing");
    h.check("MULTI", OK);
    h.check("SCARD t", "+QUEUED\r\n");
    h.check("EXEC", "*1\r\n:3\r\n");
}

#[test]
fn command_table() {
    let find = |name: &str| super::COMMANDS.iter().find(|c| c.name == name).unwrap();
    assert_eq!(super::COMMANDS.len(), 17);
    assert_eq!(find("sadd").flags, &["write", "denyoom", "fast"][..]);
    assert_eq!(find("smove").keys, (1, 2, 1));
    assert_eq!(find("sintercard").arity, -3);
    assert_eq!(find("sunionstore").keys, (1, -1, 1));
}

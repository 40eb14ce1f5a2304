//! Stream commands through the node's real entry points, replies byte for byte.

use lattice_testkit::Harness;

#[test]
fn xadd_ids_ranges_and_errors() {
    let mut h = Harness::with_clients(1);
    assert_eq!(h.cmd(1, &["XADD", "s", "1-1", "a", "1"]), "$3\r\n1-1\r\n");
    assert_eq!(h.cmd(1, &["XADD", "s", "1-*", "b", "2"]), "$3\r\n1-2\r\n");
    assert_eq!(
        h.cmd(1, &["XADD", "s", "1-1", "c", "3"]),
        "-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n"
    );
    assert_eq!(
        h.cmd(1, &["XADD", "s", "0-0", "c", "3"]),
        "-ERR The ID specified in XADD must be greater than 0-0\r\n"
    );
    assert_eq!(
        h.cmd(1, &["XADD", "s", "*", "c"]),
        "-ERR wrong number of arguments for 'xadd' command\r\n"
    );
    assert_eq!(
        h.cmd(1, &["XADD", "s", "x-y", "c", "3"]),
        "-ERR Invalid stream ID specified as stream command argument\r\n"
    );
    // `*` uses the node's clock.
    let now = h.now_ms;
    assert_eq!(
        h.cmd(1, &["XADD", "s", "*", "c", "3"]),
        format!("${}\r\n{now}-0\r\n", format!("{now}-0").len())
    );
    assert_eq!(h.cmd(1, &["XLEN", "s"]), ":3\r\n");
    assert_eq!(
        h.cmd(1, &["XRANGE", "s", "-", "+", "COUNT", "1"]),
        "*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"
    );
    assert_eq!(
        h.cmd(1, &["XREVRANGE", "s", "(2", "1", "COUNT", "5"]),
        "*2\r\n*2\r\n$3\r\n1-2\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"
    );
    assert_eq!(h.cmd(1, &["XRANGE", "nokey", "-", "+"]), "*0\r\n");
    assert_eq!(h.cmd(1, &["TYPE", "s"]), "+stream\r\n");
    assert_eq!(h.cmd(1, &["OBJECT", "ENCODING", "s"]), "$6\r\nstream\r\n");
    assert_eq!(h.cmd(1, &["XDEL", "s", "1-1", "9-9"]), ":1\r\n");
    assert_eq!(h.cmd(1, &["XTRIM", "s", "MAXLEN", "=", "1"]), ":1\r\n");
    assert_eq!(h.cmd(1, &["XLEN", "s"]), ":1\r\n");
    // An emptied stream stays (its metadata matters).
    assert_eq!(h.cmd(1, &["XTRIM", "s", "MAXLEN", "0"]), ":1\r\n");
    assert_eq!(h.cmd(1, &["EXISTS", "s"]), ":1\r\n");
    h.cmd(1, &["SET", "str", "x"]);
    assert!(h
        .cmd(1, &["XADD", "str", "*", "a", "1"])
        .starts_with("-WRONGTYPE"));
    assert_eq!(
        h.cmd(1, &["XADD", "new", "NOMKSTREAM", "*", "a", "1"]),
        "$-1\r\n"
    );
    assert_eq!(h.cmd(1, &["EXISTS", "new"]), ":0\r\n");
}

#[test]
fn consumer_groups_deliver_ack_and_claim() {
    let mut h = Harness::with_clients(1);
    for i in 1..=3 {
        h.cmd(1, &["XADD", "s", &format!("{i}-0"), "f", "v"]);
    }
    assert_eq!(h.cmd(1, &["XGROUP", "CREATE", "s", "g", "0"]), "+OK\r\n");
    assert_eq!(
        h.cmd(1, &["XGROUP", "CREATE", "s", "g", "0"]),
        "-BUSYGROUP Consumer Group name already exists\r\n"
    );
    assert_eq!(
        h.cmd(1, &["XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">"]),
        "*1\r\n*2\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n*2\r\n$3\r\n2-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
    );
    assert_eq!(
        h.cmd(1, &["XPENDING", "s", "g"]),
        "*4\r\n:2\r\n$3\r\n1-0\r\n$3\r\n2-0\r\n*1\r\n*2\r\n$5\r\nalice\r\n$1\r\n2\r\n"
    );
    h.advance(50);
    assert_eq!(
        h.cmd(1, &["XPENDING", "s", "g", "-", "+", "10", "alice"]),
        "*2\r\n*4\r\n$3\r\n1-0\r\n$5\r\nalice\r\n:50\r\n:1\r\n*4\r\n$3\r\n2-0\r\n$5\r\nalice\r\n:50\r\n:1\r\n"
    );
    assert_eq!(h.cmd(1, &["XACK", "s", "g", "1-0", "1-0"]), ":1\r\n");
    assert_eq!(
        h.cmd(1, &["XCLAIM", "s", "g", "bob", "10", "2-0", "JUSTID"]),
        "*1\r\n$3\r\n2-0\r\n"
    );
    assert_eq!(
        h.cmd(1, &["XINFO", "CONSUMERS", "s", "g"]),
        "*2\r\n*6\r\n$4\r\nname\r\n$5\r\nalice\r\n$7\r\npending\r\n:0\r\n$4\r\nidle\r\n:50\r\n*6\r\n$4\r\nname\r\n$3\r\nbob\r\n$7\r\npending\r\n:1\r\n$4\r\nidle\r\n:0\r\n"
    );
    // Entry 3 is still undelivered: lag 1.
    let groups = h.cmd(1, &["XINFO", "GROUPS", "s"]);
    assert!(
        groups.contains("$7\r\nlag\r\n:1\r\n") || groups.contains("$3\r\nlag\r\n:1\r\n"),
        "{groups}"
    );
    assert_eq!(
        h.cmd(1, &["XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">"]),
        "-NOGROUP No such key 's' or consumer group 'nog' in XREADGROUP with GROUP option\r\n"
    );
    assert_eq!(
        h.cmd(1, &["XGROUP", "DELCONSUMER", "s", "g", "bob"]),
        ":1\r\n"
    );
    assert_eq!(h.cmd(1, &["XGROUP", "DESTROY", "s", "g"]), ":1\r\n");
    assert_eq!(
        h.cmd(1, &["XGROUP", "CREATE", "missing", "g", "$"]),
        "-ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.\r\n"
    );
}

#[test]
fn stream_keyspace_events_in_order() {
    let mut h = Harness::with_clients(1);
    h.connect(2);
    h.cmd(1, &["CONFIG", "SET", "notify-keyspace-events", "Kt"]);
    h.cmd(2, &["PSUBSCRIBE", "*"]);
    h.cmd(1, &["XGROUP", "CREATE", "ms", "grp", "$", "MKSTREAM"]);
    h.cmd(1, &["XGROUP", "CREATECONSUMER", "ms", "grp", "Bob"]);
    h.cmd(1, &["XADD", "ms", "1", "f", "A"]);
    h.cmd(
        1,
        &["XREADGROUP", "GROUP", "grp", "Alice", "STREAMS", "ms", ">"],
    );
    h.cmd(1, &["XCLAIM", "ms", "grp", "Mike", "0", "1", "FORCE"]);
    h.cmd(1, &["XGROUP", "DELCONSUMER", "ms", "grp", "Lee"]);
    h.cmd(1, &["XAUTOCLAIM", "ms", "grp", "Bob", "0", "1"]);
    h.cmd(1, &["XGROUP", "DELCONSUMER", "ms", "grp", "Bob"]);
    let got = h.take(2);
    let events: Vec<&str> = got
        .split("__keyspace@0__:ms\r\n")
        .skip(1)
        .map(|rest| rest.split("\r\n").nth(1).unwrap_or(""))
        .collect();
    assert_eq!(
        events,
        vec![
            "xgroup-create",
            "xgroup-createconsumer",
            "xadd",
            "xgroup-createconsumer",
            "xgroup-createconsumer",
            "xgroup-delconsumer"
        ]
    );
}

#[test]
fn copy_keeps_groups_and_pending_entries() {
    let mut h = Harness::with_clients(1);
    for i in 100..106 {
        h.cmd(1, &["XADD", "x", &i.to_string(), "a", "1"]);
    }
    h.cmd(1, &["XGROUP", "CREATE", "x", "g1", "0"]);
    h.cmd(
        1,
        &[
            "XREADGROUP",
            "GROUP",
            "g1",
            "Alice",
            "COUNT",
            "2",
            "STREAMS",
            "x",
            ">",
        ],
    );
    h.cmd(1, &["XDEL", "x", "103"]);
    assert_eq!(h.cmd(1, &["COPY", "x", "y"]), ":1\r\n");
    let a = h.cmd(1, &["XINFO", "STREAM", "x", "FULL"]);
    h.cmd(1, &["DEL", "x"]);
    assert_eq!(a, h.cmd(1, &["XINFO", "STREAM", "y", "FULL"]));
    assert!(a.contains("Alice"));
    // DUMP/RESTORE round trip.
    let dump = h.cmd(1, &["DUMP", "y"]);
    assert!(dump.starts_with('$'), "{dump}");
}

#[test]
fn xreadgroup_blocks_until_an_entry_arrives() {
    let mut h = Harness::with_clients(1);
    h.connect(2);
    h.cmd(1, &["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
    assert_eq!(
        h.cmd(
            2,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "1000",
                "STREAMS",
                "s",
                ">"
            ]
        ),
        ""
    );
    h.cmd(1, &["XADD", "s", "5-0", "k", "v"]);
    assert_eq!(
        h.take(2),
        "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n5-0\r\n*2\r\n$1\r\nk\r\n$1\r\nv\r\n"
    );
    // Times out with a null array at its deadline.
    assert_eq!(
        h.cmd(2, &["XREAD", "BLOCK", "100", "STREAMS", "s", "5-0"]),
        ""
    );
    h.advance(100);
    assert_eq!(h.take(2), "*-1\r\n");
    // XREAD BLOCK with `$` is woken by the next entry, not by whatever is last on re-run.
    assert_eq!(h.cmd(2, &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]), "");
    h.cmd(1, &["XADD", "s", "6-0", "k", "w"]);
    assert_eq!(
        h.take(2),
        "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n6-0\r\n*2\r\n$1\r\nk\r\n$1\r\nw\r\n"
    );
    // On a missing key, `$` is 0-0: the first entry wakes it.
    assert_eq!(
        h.cmd(2, &["XREAD", "BLOCK", "0", "STREAMS", "fresh", "$"]),
        ""
    );
    h.cmd(1, &["XADD", "fresh", "1-1", "a", "b"]);
    assert!(h.take(2).contains("1-1"));
    // Inside MULTI a blocking read answers at once.
    assert_eq!(h.cmd(1, &["XGROUP", "CREATE", "s", "g2", "$"]), "+OK\r\n");
    h.cmd(1, &["MULTI"]);
    h.cmd(1, &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
    h.cmd(
        1,
        &[
            "XREADGROUP",
            "GROUP",
            "g2",
            "c",
            "BLOCK",
            "0",
            "STREAMS",
            "s",
            ">",
        ],
    );
    assert_eq!(h.cmd(1, &["EXEC"]), "*2\r\n*-1\r\n*-1\r\n");
}

//! FUNCTION and FCALL through the node's entry points: loading, calling, errors, kill,
//! DUMP/RESTORE, and libraries surviving a restart through the persistence records.

use lattice_testkit::{bulk, Harness};

const LIB: &str = "#!lua name=mylib\n\
redis.register_function('setget', function(keys, args) redis.call('set', keys[1], args[1]); return redis.call('get', keys[1]) end)\n\
redis.register_function{function_name='reader', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}, description='reads a key'}\n";

#[test]
fn load_call_list_delete() {
    let mut h = Harness::with_clients(1);
    assert_eq!(h.cmd(1, &["FUNCTION", "LOAD", LIB]), bulk("mylib"));
    assert_eq!(h.cmd(1, &["FCALL", "setget", "1", "k", "v"]), bulk("v"));
    // Function names are case-insensitive.
    assert_eq!(h.cmd(1, &["FCALL", "READER", "1", "k"]), bulk("v"));
    assert_eq!(h.cmd(1, &["FCALL_RO", "reader", "1", "k"]), bulk("v"));
    assert_eq!(
        h.cmd(1, &["FCALL_RO", "setget", "1", "k", "v"]),
        "-ERR Can not execute a script with write flag using *_ro command.\r\n"
    );
    assert_eq!(
        h.cmd(1, &["FUNCTION", "LOAD", LIB]),
        "-ERR Library 'mylib' already exists\r\n"
    );
    let list = h.cmd(1, &["FUNCTION", "LIST"]);
    assert!(list.contains("+no-writes\r\n"), "{list}");
    assert!(list.contains("$11\r\nreads a key\r\n"), "{list}");
    assert!(!list.contains("library_code"));
    assert!(h
        .cmd(1, &["FUNCTION", "LIST", "WITHCODE"])
        .contains("library_code"));
    assert_eq!(
        h.cmd(1, &["FUNCTION", "LIST", "LIBRARYNAME", "other*"]),
        "*0\r\n"
    );
    assert_eq!(
        h.cmd(1, &["FUNCTION", "STATS"]),
        "*4\r\n$14\r\nrunning_script\r\n$-1\r\n$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n$15\r\nlibraries_count\r\n:1\r\n$15\r\nfunctions_count\r\n:2\r\n"
    );
    assert_eq!(
        h.cmd(1, &["FUNCTION", "DELETE", "MYLIB"]),
        "-ERR Library not found\r\n"
    );
    assert_eq!(h.cmd(1, &["FUNCTION", "DELETE", "mylib"]), "+OK\r\n");
    assert_eq!(
        h.cmd(1, &["FCALL", "setget", "0"]),
        "-ERR Function not found\r\n"
    );
    assert_eq!(h.cmd(1, &["FUNCTION", "LIST"]), "*0\r\n");
}

#[test]
fn load_errors_are_redis_s() {
    let mut h = Harness::with_clients(1);
    let cases: &[(&str, &str)] = &[
        ("return 1", "-ERR Missing library metadata\r\n"),
        ("#!lua\nx", "-ERR Library name was not given\r\n"),
        ("#!js name=a\nx", "-ERR Engine 'js' not found\r\n"),
        ("#!lua name=a\nreturn 1", "-ERR No functions registered\r\n"),
        (
            "#!lua name=a\nreturn math.random()",
            "-ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'math'\r\n",
        ),
        (
            "#!lua name=a\nredis.call('ping')",
            "-ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'call'\r\n",
        ),
        (
            "#!lua name=a\na = 1",
            "-ERR Error registering functions: ERR user_function:2: Attempt to modify a readonly table\r\n",
        ),
        (
            "#!lua name=a\nredis.register_function()",
            "-ERR Error registering functions: ERR wrong number of arguments to redis.register_function\r\n",
        ),
        (
            "#!lua name=a\nlocal a = 1 while true do a = a + 1 end",
            "-ERR Error registering functions: ERR FUNCTION LOAD timeout\r\n",
        ),
        (
            "#!lua name=a\nredis.register_function{function_name='f', callback=function() end, flags={'bogus'}}",
            "-ERR Error registering functions: ERR unknown flag given\r\n",
        ),
    ];
    for (code, want) in cases {
        assert_eq!(h.cmd(1, &["FUNCTION", "LOAD", code]), *want, "{code}");
    }
    assert_eq!(
        h.cmd(1, &["FUNCTION", "LOAD", "foo", "x"]),
        "-ERR Unknown option given: foo\r\n"
    );
    // A failed REPLACE keeps the library it would have replaced.
    h.cmd(1, &["FUNCTION", "LOAD", LIB]);
    assert!(h
        .cmd(
            1,
            &["FUNCTION", "LOAD", "REPLACE", "#!lua name=mylib\nbad code"]
        )
        .starts_with("-ERR Error compiling function: user_function:2:"));
    assert_eq!(h.cmd(1, &["FCALL", "setget", "1", "a", "b"]), bulk("b"));
    // Another library cannot take a function name.
    assert_eq!(
        h.cmd(
            1,
            &[
                "FUNCTION",
                "LOAD",
                "#!lua name=two\nredis.register_function('setget', function() end)"
            ]
        ),
        "-ERR Function setget already exists\r\n"
    );
    // Runtime errors name the function and the library line.
    h.cmd(
        1,
        &[
            "FUNCTION",
            "LOAD",
            "#!lua name=e\n\nredis.register_function('boom', function() error('no') end)",
        ],
    );
    assert_eq!(
        h.cmd(1, &["FCALL", "boom", "0"]),
        "-ERR user_function:3: no script: boom, on @user_function:3.\r\n"
    );
}

#[test]
fn dump_and_restore_policies() {
    let mut d = Harness::durable(&[]);
    d.cmd(1, &["FUNCTION", "LOAD", LIB]);
    let dump = d.raw(1, &[b"FUNCTION", b"DUMP"]);
    // A bulk string: opcode 245, then the code, the RDB version 10 and a CRC-64.
    let at = dump.iter().position(|&b| b == b'\n').unwrap() + 1;
    let payload = dump[at..dump.len() - 2].to_vec();
    assert_eq!(payload[0], 245);
    assert_eq!(&payload[payload.len() - 10..payload.len() - 8], &[10, 0]);
    let restore = |d: &mut Harness, p: &[u8], policy: Option<&str>| {
        let mut args: Vec<&[u8]> = vec![b"FUNCTION", b"RESTORE", p];
        if let Some(policy) = policy {
            args.push(policy.as_bytes());
        }
        String::from_utf8_lossy(&d.raw(1, &args)).into_owned()
    };
    assert_eq!(
        restore(&mut d, &payload, None),
        "-ERR Library mylib already exists\r\n"
    );
    assert_eq!(restore(&mut d, &payload, Some("REPLACE")), "+OK\r\n");
    assert_eq!(d.cmd(1, &["FUNCTION", "FLUSH"]), "+OK\r\n");
    assert_eq!(restore(&mut d, &payload, None), "+OK\r\n");
    assert_eq!(d.cmd(1, &["FCALL", "setget", "1", "k", "1"]), bulk("1"));
    assert_eq!(
        restore(&mut d, b"bad_payload", None),
        "-ERR DUMP payload version or checksum are wrong\r\n"
    );
    // A corrupt byte is caught by the checksum, and nothing changes.
    let mut bad = payload.clone();
    bad[5] ^= 1;
    assert_eq!(
        restore(&mut d, &bad, Some("FLUSH")),
        "-ERR DUMP payload version or checksum are wrong\r\n"
    );
    assert_eq!(d.cmd(1, &["FCALL", "reader", "1", "k"]), bulk("1"));
    assert_eq!(
        restore(&mut d, &payload, Some("MERGE")),
        "-ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.\r\n"
    );
    assert_eq!(
        d.cmd(1, &["FUNCTION", "RESTORE", "a", "b", "c"]),
        "-ERR unknown subcommand or wrong number of arguments for 'RESTORE'. Try FUNCTION HELP.\r\n"
    );
}

#[test]
fn a_long_function_is_busy_and_only_function_kill_stops_it() {
    let mut h = Harness::with_clients(2);
    h.cmd(2, &["CONFIG", "SET", "busy-reply-threshold", "100"]);
    h.cmd(
        1,
        &["FUNCTION", "LOAD", "#!lua name=loop\nredis.register_function('spin', function() local a = 1 while true do a = a + 1 end end)"],
    );
    assert_eq!(h.cmd(1, &["FCALL", "spin", "0"]), "");
    assert!(h.node.script_running());
    h.advance(150);
    let busy =
        "-BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.\r\n";
    assert_eq!(h.cmd(2, &["PING"]), busy);
    assert_eq!(h.cmd(2, &["SCRIPT", "KILL"]), busy);
    assert!(h
        .cmd(2, &["FUNCTION", "STATS"])
        .contains("$4\r\nspin\r\n$7\r\ncommand\r\n*3\r\n$5\r\nFCALL\r\n"));
    assert_eq!(h.cmd(2, &["FUNCTION", "KILL"]), "+OK\r\n");
    h.finish_script();
    assert!(h.take(1).starts_with(
        "-ERR Script killed by user with SCRIPT KILL... script: spin, on @user_function:2."
    ));
    assert_eq!(h.cmd(2, &["PING"]), "+PONG\r\n");
    assert_eq!(
        h.cmd(2, &["FUNCTION", "KILL"]),
        "-NOTBUSY No scripts in execution right now.\r\n"
    );
}

#[test]
fn libraries_survive_a_restart() {
    let mut d = Harness::durable(&[]);
    assert_eq!(d.cmd(1, &["FUNCTION", "LOAD", LIB]), bulk("mylib"));
    d.cmd(
        1,
        &[
            "FUNCTION",
            "LOAD",
            "#!lua name=gone\nredis.register_function('g', function() return 1 end)",
        ],
    );
    assert_eq!(d.cmd(1, &["FUNCTION", "DELETE", "gone"]), "+OK\r\n");
    assert_eq!(d.cmd(1, &["FCALL", "setget", "1", "k", "v1"]), bulk("v1"));
    assert!(!d.records.is_empty());

    // From the log alone.
    let mut r = Harness::durable(&d.records);
    assert_eq!(r.cmd(1, &["FCALL", "reader", "1", "k"]), bulk("v1"));
    assert_eq!(
        r.cmd(1, &["FCALL", "g", "0"]),
        "-ERR Function not found\r\n"
    );
    assert_eq!(
        r.cmd(1, &["FUNCTION", "STATS"]),
        d.cmd(1, &["FUNCTION", "STATS"])
    );

    // From a snapshot (which starts with the library set) plus the records after it.
    assert!(d.cmd(1, &["BGREWRITEAOF"]).starts_with('+'));
    for _ in 0..100 {
        d.advance(10);
    }
    assert!(!d.snapshot.is_empty());
    let mut r = Harness::durable(&d.snapshot);
    assert_eq!(
        r.cmd(1, &["FUNCTION", "LIST"]),
        d.cmd(1, &["FUNCTION", "LIST"])
    );
    assert_eq!(r.cmd(1, &["FCALL", "reader", "1", "k"]), bulk("v1"));

    // FUNCTION FLUSH is recorded too.
    let before = d.records.len();
    d.cmd(1, &["FUNCTION", "FLUSH"]);
    assert!(d.records.len() > before);
    let mut r = Harness::durable(&d.records);
    assert_eq!(r.cmd(1, &["FUNCTION", "LIST"]), "*0\r\n");
}

/// DEBUG RELOAD reads the data directory back (keys and libraries), so a reload followed by
/// reads checks persistence: a change whose record never reached the directory is gone after
/// it, and one that did comes back.
#[test]
fn debug_reload_reads_the_data_directory_back() {
    let mut d = Harness::durable(&[]);
    d.host.publish_snapshots = true;
    assert_eq!(d.cmd(1, &["FUNCTION", "LOAD", LIB]), bulk("mylib"));
    d.cmd(1, &["SET", "a", "1"]);
    d.cmd(1, &["RPUSH", "l", "x", "y"]);
    assert_eq!(d.cmd(1, &["DEBUG", "RELOAD"]), "+OK\r\n");
    assert_eq!(d.cmd(1, &["GET", "a"]), bulk("1"));
    assert_eq!(
        d.cmd(1, &["LRANGE", "l", "0", "-1"]),
        "*2\r\n$1\r\nx\r\n$1\r\ny\r\n"
    );
    assert_eq!(d.cmd(1, &["FCALL", "reader", "1", "a"]), bulk("1"));

    // The record of `b` is lost from the directory: LOADAOF must not find it.
    d.cmd(1, &["SET", "b", "2"]);
    d.records.pop().expect("the record of SET b");
    d.cmd(1, &["SET", "c", "3"]);
    assert_eq!(d.cmd(1, &["DEBUG", "LOADAOF"]), "+OK\r\n");
    assert_eq!(d.cmd(1, &["GET", "b"]), "$-1\r\n");
    assert_eq!(d.cmd(1, &["GET", "c"]), bulk("3"));
    assert_eq!(d.cmd(1, &["GET", "a"]), bulk("1"));

    // Unsupported subcommands and options are errors, never a silent OK.
    assert!(d
        .cmd(1, &["DEBUG", "SLEEP", "0"])
        .starts_with("-ERR DEBUG SLEEP is not supported"));
    assert!(d
        .cmd(1, &["DEBUG", "RELOAD", "NOFLUSH"])
        .starts_with("-ERR"));
    assert!(Harness::with_clients(1)
        .cmd(1, &["DEBUG", "RELOAD"])
        .starts_with("-ERR persistence is off"));
}

/// A reload while the node still counts a disk fault (it lasts until the next `Persisted`)
/// replays every logged command: a write refusal (MISCONF) must not apply to the replay, or
/// the reload stops half-way and the pushes logged as commands are gone from the dataset.
#[test]
fn a_reload_after_a_disk_fault_replays_every_logged_command() {
    let mut d = Harness::durable(&[]);
    assert_eq!(
        d.cmd(1, &["CONFIG", "SET", "appendfsync", "always"]),
        "+OK\r\n"
    );
    // Past 64 elements a push is logged as the command, not as the list's state.
    for i in 1..=70 {
        assert_eq!(
            d.cmd(1, &["RPUSH", "l", &i.to_string()]),
            format!(":{i}\r\n")
        );
    }
    d.input(lattice_node::Input::PersistError {
        message: "No space left on device".into(),
    });
    assert!(d.cmd(1, &["RPUSH", "l", "71"]).starts_with("-MISCONF"));
    assert_eq!(d.cmd(1, &["DEBUG", "LOADAOF"]), "+OK\r\n");
    assert_eq!(d.cmd(1, &["LLEN", "l"]), ":70\r\n");
    assert_eq!(d.cmd(1, &["LINDEX", "l", "69"]), bulk("70"));
}

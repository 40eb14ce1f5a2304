//! Operations commands through the node's real entry points: SLOWLOG, LATENCY, ROLE, WAIT,
//! MEMORY, sharded pub/sub, CLIENT PAUSE and MONITOR. Reply shapes and errors were checked
//! against redis-server 7.0.15 given the same commands; figures that depend on time are
//! planted through `Node::request_done`, the driver's report of when a request finished.

use lattice_node::{ConnId, Input, Micros, ProcessStats};
use lattice_testkit::{bulk, Harness};

/// Runs `line` for client 1, reported finished at once (as the server reports each batch).
fn run(h: &mut Harness, line: &str) -> String {
    timed(h, line, 0)
}

/// Runs `line` for client 1 and reports it finished `took_ms` later.
fn timed(h: &mut Harness, line: &str, took_ms: u64) -> String {
    let args: Vec<&str> = line.split(' ').collect();
    let reply = h.cmd(1, &args);
    h.now_ms += took_ms;
    // What the server's router reports after a batch: its end, and its time per command.
    let now = h.now();
    h.node.request_done(now);
    if let Some(name) = h.node.last_command(ConnId(1)) {
        h.node.charge_command_time(name, 1, took_ms * 1000);
    }
    reply
}

#[test]
fn slowlog_logs_what_reaches_the_threshold() {
    let mut h = Harness::with_clients(2);
    assert_eq!(
        run(&mut h, "CONFIG SET slowlog-log-slower-than 100000"),
        "+OK\r\n"
    );
    timed(&mut h, "SET fast 1", 50);
    assert_eq!(run(&mut h, "SLOWLOG LEN"), ":0\r\n");
    run(&mut h, "CLIENT SETNAME foobar");
    let start_s = h.now_ms / 1000;
    timed(&mut h, "SET slow 1", 200);
    assert_eq!(run(&mut h, "SLOWLOG LEN"), ":1\r\n");
    let entry = format!(
        "*1\r\n*6\r\n:0\r\n:{start_s}\r\n:200000\r\n*3\r\n{}{}{}{}{}",
        bulk("SET"),
        bulk("slow"),
        bulk("1"),
        bulk("127.0.0.1:40001"),
        bulk("foobar")
    );
    assert_eq!(run(&mut h, "SLOWLOG GET"), entry);
    // Off with -1; a zero max length keeps nothing.
    run(&mut h, "CONFIG SET slowlog-log-slower-than -1");
    timed(&mut h, "SET slow 2", 500);
    assert_eq!(run(&mut h, "SLOWLOG LEN"), ":1\r\n");
    assert_eq!(run(&mut h, "SLOWLOG RESET"), "+OK\r\n");
    assert_eq!(run(&mut h, "SLOWLOG LEN"), ":0\r\n");
}

#[test]
fn slowlog_keeps_the_newest_entries_and_counts_as_redis() {
    let mut h = Harness::with_clients(2);
    run(&mut h, "CONFIG SET slowlog-log-slower-than 0");
    run(&mut h, "CONFIG SET slowlog-max-len 10");
    for _ in 0..100 {
        timed(&mut h, "PING", 0);
    }
    assert_eq!(run(&mut h, "SLOWLOG LEN"), ":10\r\n");
    assert!(run(&mut h, "SLOWLOG GET 5").starts_with("*5\r\n"));
    assert!(run(&mut h, "SLOWLOG GET 0").starts_with("*0\r\n"));
    assert!(run(&mut h, "SLOWLOG GET -1").starts_with("*10\r\n"));
    // Newest first, ids counting up from 0.
    assert!(run(&mut h, "SLOWLOG GET 1").starts_with("*1\r\n*6\r\n:10"));
    for bad in ["-2", "-222", "x"] {
        assert_eq!(
            run(&mut h, &format!("SLOWLOG GET {bad}")),
            "-ERR count should be greater than or equal to -1\r\n"
        );
    }
    assert_eq!(
        run(&mut h, "SLOWLOG GET 1 2"),
        "-ERR unknown subcommand or wrong number of arguments for 'GET'. Try SLOWLOG HELP.\r\n"
    );
    assert_eq!(
        run(&mut h, "SLOWLOG LEN x"),
        "-ERR wrong number of arguments for 'slowlog|len' command\r\n"
    );
    assert_eq!(
        run(&mut h, "SLOWLOG NOPE"),
        "-ERR unknown subcommand 'NOPE'. Try SLOWLOG HELP.\r\n"
    );
    assert!(run(&mut h, "SLOWLOG HELP").starts_with("*11\r\n+SLOWLOG <subcommand>"));
}

#[test]
fn slowlog_logs_a_transaction_command_by_command_and_a_blocked_command_once_served() {
    let mut h = Harness::with_clients(2);
    run(&mut h, "CONFIG SET slowlog-log-slower-than 0");
    run(&mut h, "RPUSH l a");
    timed(&mut h, "SLOWLOG RESET", 0);
    run(&mut h, "MULTI");
    run(&mut h, "LPOP l");
    run(&mut h, "SET k v");
    timed(&mut h, "EXEC", 10);
    let log = run(&mut h, "SLOWLOG GET");
    assert!(log.starts_with("*4\r\n"), "{log}");
    assert!(!log.contains("EXEC"), "{log}");
    // Each command of the transaction got its share of the 10 ms.
    assert!(
        log.contains(&format!(":5000\r\n*3\r\n{}", bulk("SET"))),
        "{log}"
    );
    // Client 2 parks; it is logged when client 1's push serves it.
    h.cmd(2, &["BLPOP", "l", "0"]);
    timed(&mut h, "SLOWLOG RESET", 0);
    timed(&mut h, "LPUSH l x", 4);
    let log = run(&mut h, "SLOWLOG GET 1");
    assert!(log.contains(&bulk("BLPOP")), "{log}");
}

#[test]
fn slowlog_redacts_passwords() {
    let mut h = Harness::with_clients(2);
    run(&mut h, "CONFIG SET slowlog-log-slower-than 0");
    timed(&mut h, "CONFIG SET requirepass secret", 0);
    timed(&mut h, "AUTH secret", 0);
    let log = run(&mut h, "SLOWLOG GET");
    assert!(!log.contains("secret"), "{log}");
    assert!(log.contains("(redacted)"), "{log}");
}

/// A timer run whose active expiry deleted a key is an `expire-cycle` sample when the driver
/// reports it took the threshold or more (Redis's unit/latency-monitor expires a set of a
/// million members and expects the event); a slow timer run that expired nothing is not one.
#[test]
fn latency_monitor_records_a_slow_expire_cycle() {
    /// One timer run a second on, reported over by the driver `took_ms` later.
    fn timer_run(h: &mut Harness, took_ms: u64) {
        h.now_ms += 1000;
        let now = h.now();
        h.node.handle_timeout(now);
        h.now_ms += took_ms;
        let end = h.now();
        h.node.timers_done(end);
    }
    let mut h = Harness::with_clients(2);
    run(&mut h, "CONFIG SET latency-monitor-threshold 20");
    // A slow timer run with nothing to expire.
    timer_run(&mut h, 50);
    assert_eq!(run(&mut h, "LATENCY LATEST"), "*0\r\n");
    // A fast one that expires a key.
    run(&mut h, "SET k v PX 10");
    timer_run(&mut h, 5);
    assert_eq!(run(&mut h, "DBSIZE"), ":0\r\n");
    assert_eq!(run(&mut h, "LATENCY LATEST"), "*0\r\n");
    // A slow one that expires a key.
    run(&mut h, "SET k v PX 10");
    timer_run(&mut h, 30);
    let end_s = h.now_ms / 1000;
    assert_eq!(run(&mut h, "DBSIZE"), ":0\r\n");
    assert_eq!(
        run(&mut h, "LATENCY LATEST"),
        format!(
            "*1\r\n*4\r\n{}:{end_s}\r\n:30\r\n:30\r\n",
            bulk("expire-cycle")
        )
    );
}

#[test]
fn latency_monitor_records_slow_commands_per_second() {
    let mut h = Harness::with_clients(2);
    assert_eq!(run(&mut h, "LATENCY LATEST"), "*0\r\n");
    // Off by default (threshold 0).
    timed(&mut h, "SET k v", 500);
    assert_eq!(run(&mut h, "LATENCY LATEST"), "*0\r\n");
    run(&mut h, "CONFIG SET latency-monitor-threshold 100");
    timed(&mut h, "KEYS *", 50);
    assert_eq!(run(&mut h, "LATENCY LATEST"), "*0\r\n");
    let t1 = h.now_ms / 1000;
    timed(&mut h, "KEYS *", 150);
    let end1 = h.now_ms / 1000;
    assert_eq!(t1 + 1, end1 + 1);
    h.now_ms += 2000;
    timed(&mut h, "KEYS *", 300);
    let end2 = h.now_ms / 1000;
    timed(&mut h, "GET k", 120);
    let end3 = h.now_ms / 1000;
    assert_eq!(
        run(&mut h, "LATENCY LATEST"),
        format!(
            "*2\r\n*4\r\n{}:{end2}\r\n:300\r\n:300\r\n*4\r\n{}:{end3}\r\n:120\r\n:120\r\n",
            bulk("command"),
            bulk("fast-command")
        )
    );
    assert_eq!(
        run(&mut h, "LATENCY HISTORY command"),
        format!("*2\r\n*2\r\n:{end1}\r\n:150\r\n*2\r\n:{end2}\r\n:300\r\n")
    );
    assert_eq!(run(&mut h, "LATENCY HISTORY blabla"), "*0\r\n");
    assert!(run(&mut h, "LATENCY DOCTOR").contains("command: 2 latency spikes"));
    assert_eq!(run(&mut h, "LATENCY RESET blabla"), ":0\r\n");
    assert_eq!(run(&mut h, "LATENCY RESET command blabla"), ":1\r\n");
    assert_eq!(run(&mut h, "LATENCY RESET"), ":1\r\n");
    assert_eq!(run(&mut h, "LATENCY LATEST"), "*0\r\n");
    assert_eq!(
        run(&mut h, "LATENCY HELP xxx"),
        "-ERR wrong number of arguments for 'latency|help' command\r\n"
    );
}

#[test]
fn a_standalone_node_is_a_master_and_wait_answers_at_once() {
    let mut h = Harness::with_clients(2);
    assert_eq!(
        run(&mut h, "ROLE"),
        format!("*3\r\n{}:0\r\n*0\r\n", bulk("master"))
    );
    assert_eq!(run(&mut h, "WAIT 0 0"), ":0\r\n");
    assert_eq!(run(&mut h, "WAIT 3 100"), ":0\r\n");
    assert_eq!(
        run(&mut h, "WAIT x 0"),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(run(&mut h, "WAIT 1 -1"), "-ERR timeout is negative\r\n");
    assert_eq!(
        run(&mut h, "WAIT 1 1.5"),
        "-ERR timeout is not an integer or out of range\r\n"
    );
}

#[test]
fn memory_stats_reports_the_process_figures_and_the_node_overheads() {
    let mut h = Harness::with_clients(2);
    let now = Micros::from_millis(h.now_ms);
    let figures = |used| ProcessStats {
        used_memory_bytes: used,
        rss_bytes: used * 2,
        ..Default::default()
    };
    h.node.handle(now, Input::ProcessStats(figures(1_000_000)));
    run(&mut h, "SET k v");
    h.node.handle(now, Input::ProcessStats(figures(3_000_000)));
    h.node.handle(now, Input::ProcessStats(figures(2_000_000)));
    let stats = run(&mut h, "MEMORY STATS");
    assert!(stats.starts_with("*56\r\n"), "{stats}");
    for (name, value) in [
        ("peak.allocated", ":3000000"),
        ("total.allocated", ":2000000"),
        ("startup.allocated", ":1000000"),
        ("keys.count", ":1"),
        ("keys.bytes-per-key", ":1000000"),
        ("allocator.resident", ":4000000"),
        ("fragmentation.bytes", ":2000000"),
    ] {
        assert!(
            stats.contains(&format!("{}{value}\r\n", bulk(name))),
            "{name} {value}: {stats}"
        );
    }
    assert!(
        stats.contains(&format!("{}*6\r\n", bulk("db.0"))),
        "{stats}"
    );
    assert!(
        stats.contains(&format!("{}{}", bulk("fragmentation"), bulk("2"))),
        "{stats}"
    );
    assert!(run(&mut h, "MEMORY DOCTOR").starts_with('$'));
    assert!(run(&mut h, "MEMORY USAGE k").starts_with(':'));
    assert_eq!(run(&mut h, "MEMORY USAGE nokey"), "$-1\r\n");
    assert_eq!(
        run(&mut h, "MEMORY USAGE k SAMPLES -1"),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        run(&mut h, "MEMORY STATS x"),
        "-ERR wrong number of arguments for 'memory|stats' command\r\n"
    );
}

#[test]
fn sharded_pubsub_is_its_own_namespace() {
    let mut h = Harness::with_clients(2);
    assert_eq!(
        h.cmd(2, &["SSUBSCRIBE", "chan1", "chan2", "chan1"]),
        format!(
            "*3\r\n{}{}:1\r\n*3\r\n{}{}:2\r\n*3\r\n{}{}:2\r\n",
            bulk("ssubscribe"),
            bulk("chan1"),
            bulk("ssubscribe"),
            bulk("chan2"),
            bulk("ssubscribe"),
            bulk("chan1")
        )
    );
    assert_eq!(run(&mut h, "SPUBLISH chan1 hello"), ":1\r\n");
    assert_eq!(
        h.take(2),
        format!(
            "*3\r\n{}{}{}",
            bulk("smessage"),
            bulk("chan1"),
            bulk("hello")
        )
    );
    // PUBLISH does not reach shard subscribers, nor SPUBLISH plain ones.
    assert_eq!(run(&mut h, "PUBLISH chan1 x"), ":0\r\n");
    assert_eq!(
        run(&mut h, "PUBSUB SHARDCHANNELS"),
        format!("*2\r\n{}{}", bulk("chan1"), bulk("chan2"))
    );
    assert_eq!(
        run(&mut h, "PUBSUB SHARDCHANNELS *2"),
        format!("*1\r\n{}", bulk("chan2"))
    );
    assert_eq!(run(&mut h, "PUBSUB CHANNELS"), "*0\r\n");
    assert_eq!(
        run(&mut h, "PUBSUB SHARDNUMSUB chan1 nope"),
        format!("*4\r\n{}:1\r\n{}:0\r\n", bulk("chan1"), bulk("nope"))
    );
    // A RESP2 shard subscriber is in subscribed mode.
    assert_eq!(
        h.cmd(2, &["GET", "k"]),
        "-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n"
    );
    assert!(h.cmd(2, &["CLIENT", "INFO"]).contains("ERR"));
    assert_eq!(
        h.cmd(2, &["SUNSUBSCRIBE"]),
        format!(
            "*3\r\n{}{}:1\r\n*3\r\n{}{}:0\r\n",
            bulk("sunsubscribe"),
            bulk("chan1"),
            bulk("sunsubscribe"),
            bulk("chan2")
        )
    );
    assert_eq!(
        h.cmd(2, &["SUNSUBSCRIBE"]),
        format!("*3\r\n{}$-1\r\n:0\r\n", bulk("sunsubscribe"))
    );
    assert_eq!(run(&mut h, "SPUBLISH chan1 hello"), ":0\r\n");
    // RESP3: pushes.
    h.cmd(2, &["HELLO", "3"]);
    assert_eq!(
        h.cmd(2, &["SSUBSCRIBE", "c"]),
        format!(">3\r\n{}{}:1\r\n", bulk("ssubscribe"), bulk("c"))
    );
    run(&mut h, "SPUBLISH c m");
    assert_eq!(
        h.take(2),
        format!(">3\r\n{}{}{}", bulk("smessage"), bulk("c"), bulk("m"))
    );
    assert_eq!(h.cmd(2, &["GET", "k"]), "_\r\n");
}

#[test]
fn client_pause_write_holds_writes_until_unpause() {
    let mut h = Harness::with_clients(2);
    h.connect(3);
    assert_eq!(run(&mut h, "CLIENT PAUSE 100000 WRITE"), "+OK\r\n");
    assert_eq!(h.cmd(2, &["SET", "k", "v"]), "");
    assert_eq!(h.cmd(2, &["GET", "k"]), "");
    assert_eq!(h.cmd(3, &["GET", "k"]), "$-1\r\n");
    assert_eq!(h.cmd(3, &["PUBLISH", "c", "m"]), "");
    assert!(run(&mut h, "INFO clients").contains("blocked_clients:2\r\n"));
    // A request refused before it runs is answered at once.
    assert_eq!(
        run(&mut h, "SET k"),
        "-ERR wrong number of arguments for 'set' command\r\n"
    );
    assert_eq!(run(&mut h, "CLIENT UNBLOCK 2"), ":0\r\n");
    assert_eq!(run(&mut h, "CLIENT UNPAUSE"), "+OK\r\n");
    assert_eq!(h.take(2), format!("+OK\r\n{}", bulk("v")));
    assert_eq!(h.take(3), ":0\r\n");
    assert!(run(&mut h, "INFO clients").contains("blocked_clients:0\r\n"));
}

#[test]
fn client_pause_all_holds_everything_until_its_deadline() {
    let mut h = Harness::with_clients(2);
    h.connect(3);
    assert_eq!(run(&mut h, "CLIENT PAUSE 500"), "+OK\r\n");
    assert_eq!(h.cmd(2, &["GET", "k"]), "");
    assert_eq!(h.cmd(2, &["CLIENT", "UNPAUSE"]), "");
    h.advance(400);
    assert_eq!(h.take(2), "");
    h.advance(200);
    assert_eq!(h.take(2), "$-1\r\n+OK\r\n");
    assert_eq!(
        run(&mut h, "CLIENT PAUSE 10 NONE"),
        "-ERR CLIENT PAUSE mode must be WRITE or ALL\r\n"
    );
    assert_eq!(
        run(&mut h, "CLIENT PAUSE x"),
        "-ERR timeout is not an integer or out of range\r\n"
    );
    assert_eq!(
        run(&mut h, "CLIENT PAUSE -1"),
        "-ERR timeout is negative\r\n"
    );
    // A transaction of reads runs; one with a write waits.
    run(&mut h, "CLIENT PAUSE 100000 WRITE");
    h.cmd(2, &["MULTI"]);
    h.cmd(2, &["GET", "k"]);
    assert_eq!(h.cmd(2, &["EXEC"]), "*1\r\n$-1\r\n");
    run(&mut h, "CLIENT UNPAUSE");
    h.cmd(2, &["MULTI"]);
    h.cmd(2, &["INCR", "n"]);
    run(&mut h, "CLIENT PAUSE 100000 WRITE");
    assert_eq!(h.cmd(2, &["EXEC"]), "");
    // A write sent inside MULTI during the pause waits too, before it is queued.
    h.cmd(3, &["MULTI"]);
    assert_eq!(h.cmd(3, &["SET", "x", "1"]), "");
    run(&mut h, "CLIENT UNPAUSE");
    assert_eq!(h.take(2), "*1\r\n:1\r\n");
    assert_eq!(h.take(3), "+QUEUED\r\n");
}

/// As Redis 7.0 (its unit/pause suite): a script call that declares `no-writes` runs during
/// CLIENT PAUSE WRITE, alone or inside MULTI, and so do EVAL_RO and FCALL_RO of scripts that
/// declare nothing; every other script call is held like a write, an unknown SHA-1 or
/// function included (it may turn out to write).
#[test]
fn client_pause_write_runs_read_only_scripts_and_holds_the_others() {
    const LIB: &str = "#!lua name=lib\n\
        redis.register_function{function_name='ro', callback=function() return 'hello' end, flags={'no-writes'}}\n\
        redis.register_function('rw', function() return redis.call('incr', 'n') end)";
    const RO_BODY: &str = "#!lua flags=no-writes\nreturn 'unique'";
    let mut h = Harness::with_clients(9);
    assert_eq!(h.cmd(1, &["FUNCTION", "LOAD", LIB]), bulk("lib"));
    run(&mut h, "SET x y");
    let loaded = h.cmd(1, &["SCRIPT", "LOAD", "#!lua flags=no-writes\nreturn 2"]);
    let ro_sha = loaded.lines().nth(1).unwrap().to_string();
    let loaded = h.cmd(1, &["SCRIPT", "LOAD", "return 3"]);
    let compat_sha = loaded.lines().nth(1).unwrap().to_string();
    // A write script queued before the pause: its EXEC is held.
    h.cmd(9, &["MULTI"]);
    assert_eq!(h.cmd(9, &["EVAL", "#!lua\nreturn 13", "0"]), "+QUEUED\r\n");
    assert_eq!(run(&mut h, "CLIENT PAUSE 100000 WRITE"), "+OK\r\n");

    // Not cached yet, then cached.
    assert_eq!(h.cmd(2, &["EVAL", RO_BODY, "0"]), bulk("unique"));
    assert_eq!(h.cmd(2, &["EVAL", RO_BODY, "0"]), bulk("unique"));
    let get = "return redis.call('GeT', KEYS[1])";
    assert_eq!(h.cmd(2, &["EVAL_RO", get, "1", "x"]), bulk("y"));
    assert_eq!(h.cmd(2, &["EVALSHA", &ro_sha, "0"]), ":2\r\n");
    assert_eq!(h.cmd(2, &["EVALSHA_RO", &compat_sha, "0"]), ":3\r\n");
    assert_eq!(h.cmd(2, &["FCALL", "ro", "0"]), bulk("hello"));
    assert_eq!(h.cmd(2, &["FCALL_RO", "ro", "0"]), bulk("hello"));
    h.cmd(2, &["MULTI"]);
    assert_eq!(
        h.cmd(2, &["EVAL", "#!lua flags=no-writes\nreturn 12", "0"]),
        "+QUEUED\r\n"
    );
    assert_eq!(h.cmd(2, &["EXEC"]), "*1\r\n:12\r\n");
    // A read-only script still may not publish (which is what lets it run now).
    assert!(h
        .cmd(
            2,
            &[
                "EVAL",
                "#!lua flags=no-writes\nreturn redis.call('publish', 'c', 'm')",
                "0"
            ]
        )
        .starts_with("-ERR Write commands are not allowed from read-only scripts."));
    assert!(run(&mut h, "INFO clients").contains("blocked_clients:0\r\n"));

    // Held: no shebang (the commands it runs decide, so it may write), a shebang without
    // no-writes (EVAL_RO's too: it is refused once it runs), a write function, an unknown
    // SHA-1 and an unknown function, the EXEC.
    assert_eq!(h.cmd(3, &["EVAL", "return 1", "0"]), "");
    assert_eq!(h.cmd(4, &["EVAL", "#!lua\nreturn 1", "0"]), "");
    assert_eq!(h.cmd(5, &["FCALL", "rw", "0"]), "");
    assert_eq!(h.cmd(6, &["EVALSHA", &"f".repeat(40), "0"]), "");
    assert_eq!(h.cmd(7, &["FCALL", "nosuch", "0"]), "");
    assert_eq!(h.cmd(8, &["EVAL_RO", "#!lua\nreturn 1", "0"]), "");
    assert_eq!(h.cmd(9, &["EXEC"]), "");
    assert!(run(&mut h, "INFO clients").contains("blocked_clients:7\r\n"));
    assert_eq!(run(&mut h, "CLIENT UNPAUSE"), "+OK\r\n");
    assert_eq!(h.take(3), ":1\r\n");
    assert_eq!(h.take(4), ":1\r\n");
    assert_eq!(h.take(5), ":1\r\n");
    assert_eq!(
        h.take(6),
        "-NOSCRIPT No matching script. Please use EVAL.\r\n"
    );
    assert_eq!(h.take(7), "-ERR Function not found\r\n");
    assert_eq!(
        h.take(8),
        "-ERR Can not execute a script with write flag using *_ro command.\r\n"
    );
    assert_eq!(h.take(9), "*1\r\n:13\r\n");
}

#[test]
fn monitor_shows_commands_as_they_run() {
    let mut h = Harness::with_clients(2);
    assert_eq!(h.cmd(2, &["MONITOR"]), "+OK\r\n");
    run(&mut h, "SET foo bar");
    run(&mut h, "CONFIG GET hz");
    run(&mut h, "MULTI");
    run(&mut h, "GET foo");
    run(&mut h, "EXEC");
    run(&mut h, "AUTH secret");
    run(&mut h, "SET a\"b c\n");
    let us = h.now_ms * 1000;
    let stamp = format!(
        "+{}.{:06} [0 127.0.0.1:40001] ",
        us / 1_000_000,
        us % 1_000_000
    );
    let lines: Vec<String> = [
        "\"SET\" \"foo\" \"bar\"",
        "\"MULTI\"",
        "\"GET\" \"foo\"",
        "\"EXEC\"",
        "\"AUTH\" \"(redacted)\"",
        "\"SET\" \"a\\\"b\" \"c\\n\"",
    ]
    .iter()
    .map(|l| format!("{stamp}{l}\r\n"))
    .collect();
    assert_eq!(h.take(2), lines.concat());
    h.cmd(1, &["EVAL", "return redis.call('get','foo')", "0"]);
    h.finish_script();
    let got = h.take(2);
    let eval = got.find("\"EVAL\"").expect("EVAL shown");
    let get = got.find("[0 lua] \"get\" \"foo\"").expect("its GET shown");
    assert!(eval < get, "{got}");
}

#[test]
fn latency_histograms_count_each_command_by_duration() {
    let mut h = Harness::with_clients(2);
    timed(&mut h, "CONFIG RESETSTAT", 0);
    timed(&mut h, "SET a b", 0);
    timed(&mut h, "SET c d", 3);
    timed(&mut h, "CLIENT ID", 0);
    assert_eq!(
        run(&mut h, "LATENCY HISTOGRAM set nope"),
        format!(
            "*2\r\n{}*4\r\n{}:2\r\n{}*4\r\n:1\r\n:1\r\n:4194\r\n:2\r\n",
            bulk("set"),
            bulk("calls"),
            bulk("histogram_usec")
        )
    );
    // A container names its subcommands; with no names, every command timed so far.
    let client = run(&mut h, "LATENCY HISTOGRAM client");
    assert!(
        client.starts_with(&format!("*2\r\n{}", bulk("client|id"))),
        "{client}"
    );
    let all = run(&mut h, "LATENCY HISTOGRAM");
    assert!(all.starts_with("*8\r\n"), "{all}");
    for name in [
        "client|id",
        "config|resetstat",
        "latency|histogram",
        "set",
        "set",
    ] {
        assert!(all.contains(&bulk(name)), "{name}: {all}");
    }
    run(&mut h, "CONFIG SET latency-tracking no");
    run(&mut h, "CONFIG RESETSTAT");
    run(&mut h, "SET a b");
    assert_eq!(run(&mut h, "LATENCY HISTOGRAM"), "*0\r\n");
}

/// One `name:value` field of INFO.
fn info_field(h: &mut Harness, name: &str) -> String {
    let info = run(h, "INFO everything");
    let prefix = format!("{name}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("INFO has no {name}"))
        .to_string()
}

#[test]
fn unlink_and_flush_async_free_large_values_on_the_timer() {
    let mut h = Harness::with_clients(2);
    let members: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
    let mut sadd = vec!["SADD", "big"];
    sadd.extend(members.iter().map(String::as_str));
    assert_eq!(h.cmd(1, &sadd), ":1000\r\n");
    run(&mut h, "SADD small a b c");
    // A small value is freed at once; a large one waits for the timer.
    assert_eq!(run(&mut h, "UNLINK small big"), ":2\r\n");
    assert_eq!(run(&mut h, "EXISTS big"), ":0\r\n");
    assert_eq!(info_field(&mut h, "lazyfree_pending_objects"), "1");
    assert_eq!(info_field(&mut h, "lazyfreed_objects"), "0");
    h.tick();
    assert_eq!(info_field(&mut h, "lazyfree_pending_objects"), "0");
    assert_eq!(info_field(&mut h, "lazyfreed_objects"), "1");
    // DEL frees at once unless lazyfree-lazy-user-del says otherwise.
    h.cmd(1, &sadd);
    run(&mut h, "DEL big");
    assert_eq!(info_field(&mut h, "lazyfree_pending_objects"), "0");
    run(&mut h, "CONFIG SET lazyfree-lazy-user-del yes");
    h.cmd(1, &sadd);
    run(&mut h, "DEL big");
    assert_eq!(info_field(&mut h, "lazyfree_pending_objects"), "1");
    h.tick();
    // FLUSHALL ASYNC hands every entry to the timer.
    for k in ["a", "b", "c"] {
        run(&mut h, &format!("SET {k} 1"));
    }
    assert_eq!(run(&mut h, "FLUSHALL ASYNC"), "+OK\r\n");
    assert_eq!(run(&mut h, "DBSIZE"), ":0\r\n");
    assert_eq!(info_field(&mut h, "lazyfree_pending_objects"), "3");
    h.tick();
    assert_eq!(info_field(&mut h, "lazyfree_pending_objects"), "0");
    assert_eq!(info_field(&mut h, "lazyfreed_objects"), "5");
    run(&mut h, "CONFIG RESETSTAT");
    assert_eq!(info_field(&mut h, "lazyfreed_objects"), "0");
}

#[test]
fn a_served_blocked_command_counts_one_call() {
    let mut h = Harness::with_clients(2);
    assert_eq!(h.cmd(2, &["BLPOP", "q", "0"]), "");
    run(&mut h, "LPUSH q x");
    assert_eq!(h.take(2), format!("*2\r\n{}{}", bulk("q"), bulk("x")));
    assert!(run(&mut h, "INFO commandstats").contains("cmdstat_blpop:calls=1,"));
}

#[test]
fn a_key_expiring_during_a_pause_is_hidden_not_deleted() {
    let mut h = Harness::with_clients(2);
    run(&mut h, "SET k v PX 10");
    run(&mut h, "CLIENT PAUSE 100000 WRITE");
    h.now_ms += 20;
    assert_eq!(run(&mut h, "GET k"), "$-1\r\n");
    assert_eq!(run(&mut h, "EXISTS k"), ":0\r\n");
    h.tick();
    assert_eq!(info_field(&mut h, "expired_keys"), "0");
    run(&mut h, "CLIENT UNPAUSE");
    assert_eq!(run(&mut h, "GET k"), "$-1\r\n");
    assert_eq!(info_field(&mut h, "expired_keys"), "1");
}

#[test]
fn client_info_shows_the_drivers_query_buffer_and_the_request() {
    let mut h = Harness::with_clients(2);
    h.node.set_query_buffer(ConnId(1), 26, 16358);
    let line = run(&mut h, "CLIENT INFO");
    assert!(
        line.contains(" qbuf=26 qbuf-free=16358 argv-mem="),
        "{line}"
    );
    assert!(line.contains(" multi-mem=0 "), "{line}");
    // A transaction's queued requests count in multi-mem.
    run(&mut h, "MULTI");
    run(&mut h, "SET k v");
    let line = h.cmd(2, &["CLIENT", "LIST", "ID", "1"]);
    assert!(!line.contains(" multi-mem=0 "), "{line}");
}

#[test]
fn config_takes_redis_parameters_it_stores() {
    let mut h = Harness::with_clients(2);
    assert_eq!(
        run(&mut h, "CONFIG SET maxmemory-clients 200%"),
        "-ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - percentage argument must be less or equal to 100\r\n"
    );
    assert_eq!(run(&mut h, "CONFIG SET maxmemory-clients 10%"), "+OK\r\n");
    assert!(run(&mut h, "CONFIG SET daemonize yes").contains("immutable"));
    // Hidden from patterns, there by name.
    assert!(!run(&mut h, "CONFIG GET *").contains("key-load-delay"));
    assert!(run(&mut h, "CONFIG GET key-load-delay").contains("key-load-delay"));
    let of = run(&mut h, "CONFIG GET *of");
    assert!(of.contains("replicaof") && of.contains("slaveof"), "{of}");
}

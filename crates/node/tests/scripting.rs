//! EVAL / EVALSHA / SCRIPT through the node's real entry points, replies byte for byte.

use lattice_testkit::Harness;

#[test]
fn eval_converts_replies_both_ways() {
    let mut h = Harness::with_clients(1);
    assert_eq!(h.cmd(1, &["EVAL", "return 1", "0"]), ":1\r\n");
    assert_eq!(h.cmd(1, &["EVAL", "return 3.99", "0"]), ":3\r\n");
    assert_eq!(h.cmd(1, &["EVAL", "return 'x'", "0"]), "$1\r\nx\r\n");
    assert_eq!(h.cmd(1, &["EVAL", "return true", "0"]), ":1\r\n");
    assert_eq!(h.cmd(1, &["EVAL", "return false", "0"]), "$-1\r\n");
    assert_eq!(h.cmd(1, &["EVAL", "return nil", "0"]), "$-1\r\n");
    assert_eq!(
        h.cmd(1, &["EVAL", "return {1, 'a', {2}, nil, 5}", "0"]),
        "*3\r\n:1\r\n$1\r\na\r\n*1\r\n:2\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "return redis.status_reply('FINE')", "0"]),
        "+FINE\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "return redis.error_reply('MY oops')", "0"]),
        "-MY oops\r\n"
    );
    assert_eq!(
        h.cmd(
            1,
            &[
                "EVAL",
                "return {KEYS[1], ARGV[1], #KEYS, #ARGV}",
                "1",
                "k",
                "a"
            ]
        ),
        "*4\r\n$1\r\nk\r\n$1\r\na\r\n:1\r\n:1\r\n"
    );
}

#[test]
fn redis_call_runs_commands_and_raises_errors() {
    let mut h = Harness::with_clients(1);
    assert_eq!(
        h.cmd(
            1,
            &[
                "EVAL",
                "redis.call('set', KEYS[1], ARGV[1]); return redis.call('get', KEYS[1])",
                "1",
                "k",
                "v"
            ]
        ),
        "$1\r\nv\r\n"
    );
    assert_eq!(h.cmd(1, &["GET", "k"]), "$1\r\nv\r\n");
    // Status replies become {ok=...}; a missing key reads as false.
    assert_eq!(
        h.cmd(1, &["EVAL", "return redis.call('set', 'a', 1)", "0"]),
        "+OK\r\n"
    );
    assert_eq!(
        h.cmd(
            1,
            &["EVAL", "return redis.call('get', 'nokey') == false", "0"]
        ),
        ":1\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "return redis.call('incrby', 'a', 2.0)", "0"]),
        ":3\r\n"
    );
    // An error reply raised by redis.call, with where it happened.
    let r = h.cmd(
        1,
        &["EVAL", "\nreturn redis.call('incr', KEYS[1])", "1", "k"],
    );
    assert!(
        r.starts_with("-ERR value is not an integer or out of range script: ")
            && r.ends_with(", on @user_script:2.\r\n"),
        "{r}"
    );
    // pcall returns it instead.
    assert_eq!(
        h.cmd(
            1,
            &[
                "EVAL",
                "local r = redis.pcall('incr', KEYS[1]); return r.err",
                "1",
                "k"
            ]
        ),
        "$43\r\nERR value is not an integer or out of range\r\n"
    );
    // Lua's pcall around redis.call catches the same {err=...} table.
    assert_eq!(
        h.cmd(
            1,
            &[
                "EVAL",
                "local ok, e = pcall(redis.call, 'incr', KEYS[1]); return {ok and 1 or 0, e.err}",
                "1",
                "k"
            ]
        ),
        "*2\r\n:0\r\n$43\r\nERR value is not an integer or out of range\r\n"
    );
    // A runtime error in the script itself.
    let r = h.cmd(1, &["EVAL", "local t = nil\nreturn t.x", "0"]);
    assert!(
        r.starts_with("-ERR user_script:2: attempt to index local 't'")
            && r.ends_with("on @user_script:2.\r\n"),
        "{r}"
    );
    assert!(h
        .cmd(1, &["EVAL", "return redis.call('nosuch')", "0"])
        .starts_with("-ERR Unknown Redis command called from script"));
    assert!(h
        .cmd(1, &["EVAL", "return redis.call('get')", "0"])
        .starts_with("-ERR Wrong number of args calling Redis command from script"));
    assert!(h
        .cmd(1, &["EVAL", "return redis.call('multi')", "0"])
        .starts_with("-ERR This Redis command is not allowed from script"));
    assert!(h
        .cmd(1, &["EVAL_RO", "return redis.call('set', 'x', 1)", "0"])
        .starts_with("-ERR Write commands are not allowed from read-only scripts."));
    // Redis 7.0.15 refuses BLPOP, BRPOP, BRPOPLPUSH and BLMOVE in scripts; the other blocking
    // commands do not block inside a script.
    assert!(h
        .cmd(1, &["EVAL", "return redis.call('blpop', 'empty', 0)", "0"])
        .starts_with("-ERR This Redis command is not allowed from script"));
    assert_eq!(
        h.cmd(
            1,
            &[
                "EVAL",
                "return redis.call('blmpop', 0, 1, 'empty', 'LEFT')",
                "0"
            ]
        ),
        "$-1\r\n"
    );
}

#[test]
fn sandbox_has_no_io_and_protects_globals() {
    let mut h = Harness::with_clients(1);
    for code in [
        "return os.time()",
        "return io.write('x')",
        "return loadfile('x')",
        "return dofile('x')",
    ] {
        let r = h.cmd(1, &["EVAL", code, "0"]);
        assert!(
            r.contains("Script attempted to access nonexistent global variable"),
            "{code}: {r}"
        );
    }
    let r = h.cmd(1, &["EVAL", "x = 1", "0"]);
    assert!(r.contains("Attempt to modify a readonly table"), "{r}");
    let r = h.cmd(1, &["EVAL", "return +", "0"]);
    assert!(
        r.starts_with("-ERR Error compiling script (new function): user_script:1:"),
        "{r}"
    );
    // math.random is seeded from the node: deterministic per node seed, in range.
    let r = h.cmd(
        1,
        &[
            "EVAL",
            "local v = math.random(10); return v >= 1 and v <= 10",
            "0",
        ],
    );
    assert_eq!(r, ":1\r\n");
}

#[test]
fn scripts_that_cannot_be_suspended_are_stopped_by_the_budget() {
    let mut h = Harness::with_clients(1);
    // Lua 5.1 cannot suspend a coroutine inside a C call (here a sort comparator): the
    // instruction budget stops it.
    let r = h.cmd(
        1,
        &[
            "EVAL",
            "table.sort({1, 2, 3}, function(a, b) while true do end end)",
            "0",
        ],
    );
    assert!(
        r.starts_with("-ERR Script exceeded its execution budget"),
        "{r}"
    );
    // Inside EXEC a script is never suspended (EXEC answers as one reply).
    assert_eq!(h.cmd(1, &["MULTI"]), "+OK\r\n");
    assert_eq!(h.cmd(1, &["EVAL", "while true do end", "0"]), "+QUEUED\r\n");
    let r = h.cmd(1, &["EXEC"]);
    assert!(
        r.starts_with("*1\r\n-ERR Script exceeded its execution budget"),
        "{r}"
    );
    // The node goes on serving.
    assert_eq!(h.cmd(1, &["EVAL", "return 2", "0"]), ":2\r\n");
}

const BUSY: &str =
    "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
const FOREVER: &str = "while true do end";

/// A node with clients 1..=3 and busy-reply-threshold at 100 ms.
fn busy_node() -> Harness {
    let mut h = Harness::with_clients(3);
    assert_eq!(
        h.cmd(2, &["CONFIG", "SET", "lua-time-limit", "100"]),
        "+OK\r\n"
    );
    h
}

#[test]
fn busy_threshold_is_configurable_under_both_names() {
    let mut h = Harness::with_clients(1);
    assert_eq!(
        h.cmd(1, &["CONFIG", "SET", "busy-reply-threshold", "250"]),
        "+OK\r\n"
    );
    assert_eq!(
        h.cmd(1, &["CONFIG", "GET", "lua-time-limit"]),
        "*2\r\n$14\r\nlua-time-limit\r\n$3\r\n250\r\n"
    );
    assert_eq!(
        h.cmd(1, &["CONFIG", "GET", "busy-reply-threshold"]),
        "*2\r\n$20\r\nbusy-reply-threshold\r\n$3\r\n250\r\n"
    );
    assert!(h
        .cmd(1, &["CONFIG", "SET", "lua-time-limit", "soon"])
        .starts_with("-ERR CONFIG SET failed"));
}

#[test]
fn long_script_makes_others_wait_then_answers_busy_after_the_threshold() {
    let mut h = busy_node();
    assert_eq!(h.cmd(1, &["EVAL", FOREVER, "0"]), "");
    assert!(h.node.script_running());
    // Younger than the threshold on the node's clock: other clients simply wait.
    assert_eq!(h.cmd(2, &["PING"]), "");
    h.advance(60);
    assert_eq!(h.take(2), "");
    // Past it: what waited is answered BUSY, and so is every new command...
    h.advance(60);
    assert_eq!(h.take(2), BUSY);
    assert_eq!(h.cmd(3, &["GET", "x"]), BUSY);
    // ... but not the caller's own requests, which wait for its reply.
    assert_eq!(h.cmd(1, &["PING"]), "");
    // SCRIPT KILL stops a script that wrote nothing: OK for the killer, the Redis error for
    // the caller, then the caller's waiting PING.
    assert_eq!(h.cmd(3, &["SCRIPT", "KILL"]), "+OK\r\n");
    h.tick();
    assert!(!h.node.script_running());
    let sha = lattice_node::cmd::script::sha1_hex(FOREVER.as_bytes());
    assert_eq!(
        h.take(1),
        format!(
            "-ERR Script killed by user with SCRIPT KILL... script: {sha}, on @user_script:1.\r\n+PONG\r\n"
        )
    );
    assert_eq!(h.cmd(2, &["PING"]), "+PONG\r\n");
    assert_eq!(
        h.cmd(2, &["SCRIPT", "KILL"]),
        "-NOTBUSY No scripts in execution right now.\r\n"
    );
    let stats = h.cmd(2, &["INFO", "errorstats"]);
    assert!(stats.contains("errorstat_BUSY:count=2"), "{stats}");
}

#[test]
fn a_script_stays_atomic_across_slices() {
    let mut h = busy_node();
    h.cmd(2, &["SET", "x", "before"]);
    let script = "local a = redis.call('get', 'x') \
                  local i = 0 while i < 3000000 do i = i + 1 end \
                  return {a, redis.call('get', 'x'), i}";
    assert_eq!(h.cmd(1, &["EVAL", script, "0"]), "");
    // Arrives mid-script, before the threshold: it waits, it does not slip in.
    assert_eq!(h.cmd(2, &["SET", "x", "during"]), "");
    let slices = h.finish_script();
    assert!(slices > 1, "{slices}");
    assert_eq!(
        h.take(1),
        "*3\r\n$6\r\nbefore\r\n$6\r\nbefore\r\n:3000000\r\n"
    );
    assert_eq!(h.take(2), "+OK\r\n");
    assert_eq!(h.cmd(2, &["GET", "x"]), "$6\r\nduring\r\n");
}

#[test]
fn parked_clients_see_a_script_only_once_it_has_ended() {
    let mut h = busy_node();
    assert_eq!(h.cmd(2, &["BLPOP", "q", "0"]), "");
    let script = "redis.call('rpush', 'q', 'a') \
                  local i = 0 while i < 3000000 do i = i + 1 end \
                  redis.call('del', 'q') return i";
    assert_eq!(h.cmd(1, &["EVAL", script, "0"]), "");
    h.finish_script();
    assert_eq!(h.take(1), ":3000000\r\n");
    // The push was undone before the script ended: the parked client got nothing.
    assert_eq!(h.take(2), "");
    assert_eq!(h.cmd(3, &["RPUSH", "q", "b"]), ":1\r\n");
    assert_eq!(h.take(2), "*2\r\n$1\r\nq\r\n$1\r\nb\r\n");
}

#[test]
fn a_script_that_wrote_cannot_be_killed() {
    let mut h = busy_node();
    let script = "redis.call('set', 'x', 'mine') \
                  local i = 0 while i < 5000000 do i = i + 1 end return i";
    assert_eq!(h.cmd(1, &["EVAL", script, "0"]), "");
    h.advance(150);
    assert_eq!(
        h.cmd(2, &["SCRIPT", "KILL"]),
        "-UNKILLABLE Sorry the script already executed write commands against the dataset. \
         You can either wait the script termination or kill the server in a hard way using the \
         SHUTDOWN NOSAVE command.\r\n"
    );
    assert_eq!(h.cmd(2, &["GET", "x"]), BUSY);
    h.finish_script();
    assert_eq!(h.take(1), ":5000000\r\n");
    assert_eq!(h.cmd(2, &["GET", "x"]), "$4\r\nmine\r\n");
}

/// Starts an endless script from client 1 and lets the node pass the threshold.
fn start_busy_script(h: &mut Harness) {
    assert_eq!(h.cmd(1, &["EVAL", FOREVER, "0"]), "");
    h.advance(200);
}

/// Kills the endless script from client 3 and checks client 1 got the kill error.
fn kill_busy_script(h: &mut Harness) {
    assert_eq!(h.cmd(3, &["SCRIPT", "KILL"]), "+OK\r\n");
    h.tick();
    assert!(h.take(1).starts_with("-ERR Script killed by user"));
}

#[test]
fn multi_during_a_busy_script_is_doomed_by_the_refused_command() {
    // Redis's "MULTI and script timeout".
    let mut h = busy_node();
    h.cmd(2, &["SET", "xx", "1"]);
    start_busy_script(&mut h);
    assert_eq!(h.cmd(2, &["MULTI"]), "+OK\r\n");
    assert_eq!(h.cmd(2, &["INCR", "xx"]), BUSY);
    kill_busy_script(&mut h);
    assert_eq!(h.cmd(2, &["INCR", "xx"]), "+QUEUED\r\n");
    assert_eq!(
        h.cmd(2, &["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(h.cmd(2, &["GET", "xx"]), "$1\r\n1\r\n");
    assert_eq!(h.cmd(2, &["PING", "asdf"]), "$4\r\nasdf\r\n");
}

#[test]
fn exec_during_a_busy_script_aborts_the_transaction() {
    // Redis's "EXEC and script timeout" and "just EXEC and script timeout".
    for extra_incr in [true, false] {
        let mut h = busy_node();
        h.cmd(2, &["SET", "xx", "1"]);
        assert_eq!(h.cmd(2, &["MULTI"]), "+OK\r\n");
        assert_eq!(h.cmd(2, &["INCR", "xx"]), "+QUEUED\r\n");
        start_busy_script(&mut h);
        if extra_incr {
            assert_eq!(h.cmd(2, &["INCR", "xx"]), BUSY);
        }
        assert_eq!(
            h.cmd(2, &["EXEC"]),
            "-EXECABORT Transaction discarded because of: BUSY Redis is busy running a script. \
             You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"
        );
        kill_busy_script(&mut h);
        assert_eq!(h.cmd(2, &["GET", "xx"]), "$1\r\n1\r\n");
        // No longer in MULTI.
        assert_eq!(h.cmd(2, &["PING", "asdf"]), "$4\r\nasdf\r\n");
    }
}

#[test]
fn queued_body_during_a_busy_script_is_discarded_at_exec() {
    // Redis's "MULTI-EXEC body and script timeout".
    let mut h = busy_node();
    h.cmd(2, &["SET", "xx", "1"]);
    assert_eq!(h.cmd(2, &["MULTI"]), "+OK\r\n");
    assert_eq!(h.cmd(2, &["INCR", "xx"]), "+QUEUED\r\n");
    start_busy_script(&mut h);
    assert_eq!(h.cmd(2, &["INCR", "xx"]), BUSY);
    kill_busy_script(&mut h);
    assert_eq!(
        h.cmd(2, &["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(h.cmd(2, &["GET", "xx"]), "$1\r\n1\r\n");
}

#[test]
fn script_cache_load_exists_flush() {
    let mut h = Harness::with_clients(1);
    let body = "return redis.call('incr', KEYS[1])";
    let r = h.cmd(1, &["SCRIPT", "LOAD", body]);
    let sha = r.lines().nth(1).unwrap().to_string();
    assert_eq!(sha.len(), 40);
    assert_eq!(h.cmd(1, &["EVALSHA", &sha, "1", "c"]), ":1\r\n");
    assert_eq!(
        h.cmd(1, &["EVALSHA", &sha.to_uppercase(), "1", "c"]),
        ":2\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "return redis.sha1hex(ARGV[1])", "0", body]),
        format!("$40\r\n{sha}\r\n")
    );
    assert_eq!(
        h.cmd(
            1,
            &[
                "SCRIPT",
                "EXISTS",
                &sha,
                "0000000000000000000000000000000000000000"
            ]
        ),
        "*2\r\n:1\r\n:0\r\n"
    );
    assert_eq!(h.cmd(1, &["SCRIPT", "FLUSH"]), "+OK\r\n");
    assert_eq!(
        h.cmd(1, &["EVALSHA", &sha, "1", "c"]),
        "-NOSCRIPT No matching script. Please use EVAL.\r\n"
    );
    assert_eq!(
        h.cmd(1, &["SCRIPT", "KILL"]),
        "-NOTBUSY No scripts in execution right now.\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "return 1", "2", "a"]),
        "-ERR Number of keys can't be greater than number of args\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "return 1", "-1"]),
        "-ERR Number of keys can't be negative\r\n"
    );
    // Inside MULTI, EVAL runs at EXEC.
    h.cmd(1, &["MULTI"]);
    assert_eq!(
        h.cmd(
            1,
            &[
                "EVAL",
                "return redis.call('set', KEYS[1], 'bar')",
                "1",
                "bar"
            ]
        ),
        "+QUEUED\r\n"
    );
    assert_eq!(h.cmd(1, &["EXEC"]), "*1\r\n+OK\r\n");
    assert_eq!(h.cmd(1, &["GET", "bar"]), "$3\r\nbar\r\n");
}

#[test]
fn unpack_of_a_huge_range_is_an_error_not_a_crash() {
    let mut h = Harness::with_clients(1);
    for (i, j) in [
        ("-2", "2147483647"),
        ("0", "2147483647"),
        ("-2147483648", "-2"),
    ] {
        let script = format!("return {{unpack({{1,2,3}}, {i}, {j})}}");
        let r = h.cmd(1, &["EVAL", &script, "0"]);
        assert!(r.contains("too many results to unpack"), "{r}");
    }
    assert_eq!(
        h.cmd(1, &["EVAL", "return {unpack({1,2,3}, 2)}", "0"]),
        "*2\r\n:2\r\n:3\r\n"
    );
    let r = h.cmd(
        1,
        &[
            "EVAL",
            "local a = {} for i = 1, 7999 do a[i] = 1 end return #{unpack(a)}",
            "0",
        ],
    );
    assert_eq!(r, ":7999\r\n");
}

#[test]
fn sha1hex_wants_one_argument() {
    let mut h = Harness::with_clients(1);
    assert!(h
        .cmd(1, &["EVAL", "return redis.sha1hex()", "0"])
        .contains("wrong number of arguments"));
    assert_eq!(
        h.cmd(1, &["EVAL", "return redis.sha1hex('abc')", "0"]),
        "$40\r\na9993e364706816aba3e25717850c26c9cd0d89d\r\n"
    );
}

#[test]
fn a_loop_inside_pcall_is_suspended_and_can_be_killed() {
    // Redis's "Timedout read-only scripts can be killed by SCRIPT KILL even when use pcall".
    let mut h = busy_node();
    let script = "local f = function() while 1 do redis.call('ping') end end \
                  while 1 do pcall(f) end";
    assert_eq!(h.cmd(1, &["EVAL", script, "0"]), "");
    assert!(h.node.script_running());
    h.advance(200);
    assert_eq!(h.cmd(2, &["PING"]), BUSY);
    assert_eq!(h.cmd(3, &["SCRIPT", "KILL"]), "+OK\r\n");
    h.tick();
    assert!(!h.node.script_running());
    assert!(h.take(1).starts_with("-ERR Script killed by user"));
    assert_eq!(h.cmd(2, &["PING"]), "+PONG\r\n");
}

#[test]
fn pcall_and_xpcall_keep_their_results_across_slices() {
    let mut h = busy_node();
    let script = "local count = function(n) local i = 0 while i < n do i = i + 1 end return i, 'done' end \
                  local ok, n, word = pcall(count, 3000000) \
                  local bad, e = pcall(function() count(2000000) error('boom', 0) end) \
                  local _, handled = xpcall(function() count(2000000) error({err='MINE x'}) end, \
                                            function(err) return err.err end) \
                  local ok2, inner = pcall(pcall, count, 10) \
                  return {tostring(ok), n, word, tostring(bad), e, handled, tostring(ok2), tostring(inner)}";
    assert_eq!(h.cmd(1, &["EVAL", script, "0"]), "");
    let slices = h.finish_script();
    assert!(slices > 3, "{slices}");
    assert_eq!(
        h.take(1),
        "*8\r\n$4\r\ntrue\r\n:3000000\r\n$4\r\ndone\r\n$5\r\nfalse\r\n$4\r\nboom\r\n\
         $6\r\nMINE x\r\n$4\r\ntrue\r\n$4\r\ntrue\r\n"
    );
}

#[test]
fn a_script_cannot_yield_its_own_coroutine() {
    let mut h = Harness::with_clients(1);
    // As in Redis, where scripts run inside a C pcall: inside pcall the yield fails there...
    let message = "attempt to yield across metamethod/C-call boundary";
    assert_eq!(
        h.cmd(
            1,
            &["EVAL", "return {tostring(pcall(function() coroutine.yield(1) end)), select(2, pcall(function() coroutine.yield(1) end))}", "0"]
        ),
        format!("*2\r\n$5\r\nfalse\r\n${}\r\n{message}\r\n", message.len())
    );
    // ... and at the top it ends the script with that error.
    let r = h.cmd(1, &["EVAL", "coroutine.yield()", "0"]);
    assert!(
        r.starts_with("-ERR attempt to yield across metamethod/C-call boundary"),
        "{r}"
    );
    // A script's own coroutines still work, pcall inside them too.
    assert_eq!(
        h.cmd(
            1,
            &[
                "EVAL",
                "local co = coroutine.wrap(function() local ok, v = pcall(function() return 7 end) coroutine.yield(v) return 8 end) \
                 return {co(), co()}",
                "0"
            ]
        ),
        "*2\r\n:7\r\n:8\r\n"
    );
}

#[test]
fn shebang_flags_are_read_and_enforced() {
    let mut h = Harness::with_clients(1);
    assert_eq!(h.cmd(1, &["EVAL", "#!lua\nreturn 1", "0"]), ":1\r\n");
    assert_eq!(
        h.cmd(1, &["EVAL", "#!not-lua\nreturn 1", "0"]),
        "-ERR Unexpected engine in script shebang: #!not-lua\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "#!lua badger=data\nreturn 1", "0"]),
        "-ERR Unknown lua shebang option: badger=data\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "#!lua flags=allow-oom,what?\nreturn 1", "0"]),
        "-ERR Unexpected flag in script shebang: what?\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "#!lua return 1", "0"]),
        "-ERR Invalid script shebang\r\n"
    );
    // no-writes: a read-only script, as EVAL_RO.
    let r = h.cmd(
        1,
        &[
            "EVAL",
            "#!lua flags=no-writes\nredis.call('set','x',1)",
            "1",
            "x",
        ],
    );
    assert!(
        r.starts_with("-ERR Write commands are not allowed from read-only scripts."),
        "{r}"
    );
    assert_eq!(
        h.cmd(
            1,
            &[
                "EVAL_RO",
                "#!lua flags=no-writes\nreturn redis.call('get','x')",
                "1",
                "x"
            ]
        ),
        "$-1\r\n"
    );
    // A script that declares flags but not no-writes may write: not with EVAL_RO.
    assert_eq!(
        h.cmd(1, &["EVAL_RO", "#!lua\nreturn 1", "0"]),
        "-ERR Can not execute a script with write flag using *_ro command.\r\n"
    );
    // Line numbers stay the script's: the shebang is line 1.
    let r = h.cmd(1, &["EVAL", "#!lua\n\nerror('x')", "0"]);
    assert!(r.contains("@user_script:3."), "{r}");
    // EVALSHA reads the same flags.
    let sha =
        lattice_node::cmd::script::sha1_hex(b"#!lua flags=no-writes\nreturn redis.call('del','x')");
    h.cmd(
        1,
        &[
            "SCRIPT",
            "LOAD",
            "#!lua flags=no-writes\nreturn redis.call('del','x')",
        ],
    );
    assert!(h
        .cmd(1, &["EVALSHA", &sha, "0"])
        .starts_with("-ERR Write commands are not allowed from read-only scripts."));
}

/// INFO errorstats and the commandstats line of each of `commands` (from `calls=`), then
/// CONFIG RESETSTAT.
fn error_stats(h: &mut Harness, commands: &[&str]) -> (String, Vec<String>) {
    let errors = h.cmd(1, &["INFO", "errorstats"]);
    let all = h.cmd(1, &["INFO", "commandstats"]);
    let lines = commands
        .iter()
        .map(|c| {
            let prefix = format!("cmdstat_{c}:");
            all.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .map(|l| {
                    let calls = l.split(',').next().unwrap_or("");
                    let rest = l.split_once(",rejected").map_or("", |(_, r)| r);
                    format!("{calls},rejected{rest}")
                })
                .unwrap_or_default()
        })
        .collect();
    h.cmd(1, &["CONFIG", "RESETSTAT"]);
    (errors, lines)
}

#[test]
fn a_command_error_passed_on_by_a_script_is_counted_once() {
    // Redis's "Consistent eval error reporting".
    let mut h = Harness::with_clients(1);
    h.cmd(1, &["SET", "s", "1"]);
    h.cmd(1, &["CONFIG", "RESETSTAT"]);
    let r = h.cmd(1, &["EVAL", "return redis.call('lpush', 's', 'x')", "0"]);
    assert!(r.starts_with("-WRONGTYPE"), "{r}");
    let (errors, cmds) = error_stats(&mut h, &["lpush", "eval"]);
    assert!(
        errors.contains("errorstat_WRONGTYPE:count=1\r\n"),
        "{errors}"
    );
    assert_eq!(cmds, ["calls=1,rejected_calls=0,failed_calls=1"; 2]);
    // Returned from redis.pcall: still once.
    let r = h.cmd(1, &["EVAL", "return redis.pcall('lpush', 's', 'x')", "0"]);
    assert!(r.starts_with("-WRONGTYPE"), "{r}");
    let (errors, cmds) = error_stats(&mut h, &["lpush", "eval"]);
    assert!(
        errors.contains("errorstat_WRONGTYPE:count=1\r\n"),
        "{errors}"
    );
    assert_eq!(cmds, ["calls=1,rejected_calls=0,failed_calls=1"; 2]);
    // Caught and not returned: the command's error only; EVAL did not fail.
    assert_eq!(
        h.cmd(1, &["EVAL", "redis.pcall('lpush', 's', 'x') return 1", "0"]),
        ":1\r\n"
    );
    let (errors, cmds) = error_stats(&mut h, &["lpush", "eval"]);
    assert!(
        errors.contains("errorstat_WRONGTYPE:count=1\r\n"),
        "{errors}"
    );
    assert_eq!(cmds[1], "calls=1,rejected_calls=0,failed_calls=0");
    // A refusal inside the script counts as a rejected call of the command.
    let r = h.cmd(
        1,
        &["EVAL_RO", "return redis.call('set', 'x', 'y')", "1", "x"],
    );
    assert!(r.starts_with("-ERR Write commands are not allowed"), "{r}");
    let (errors, cmds) = error_stats(&mut h, &["set", "eval_ro"]);
    assert!(errors.contains("errorstat_ERR:count=1\r\n"), "{errors}");
    assert_eq!(cmds[1], "calls=1,rejected_calls=0,failed_calls=1");
    assert_eq!(cmds[0], "calls=0,rejected_calls=1,failed_calls=0");
    // An error the script makes itself is counted with its own code.
    let r = h.cmd(
        1,
        &["EVAL", "return redis.error_reply('MY_CODE custom')", "0"],
    );
    assert_eq!(r, "-MY_CODE custom\r\n");
    let (errors, _) = error_stats(&mut h, &[]);
    assert!(errors.contains("errorstat_MY_CODE:count=1\r\n"), "{errors}");
}

#[test]
fn error_and_status_reply_follow_redis() {
    let mut h = Harness::with_clients(1);
    assert_eq!(
        h.cmd(1, &["EVAL", "return redis.error_reply('')", "0"]),
        "-ERR \r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "return redis.error_reply('-FOO')", "0"]),
        "-ERR FOO\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "return redis.error_reply('oops\\r\\n')", "0"]),
        "-ERR oops\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "return redis.error_reply(1)", "0"]),
        "-ERR wrong number or type of arguments\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EVAL", "return redis.status_reply()", "0"]),
        "-ERR wrong number or type of arguments\r\n"
    );
}

#[test]
fn json_and_msgpack_libraries_are_loaded_and_read_only() {
    let mut h = Harness::with_clients(1);
    assert_eq!(
        h.cmd(
            1,
            &[
                "EVAL",
                "return cjson.encode(cjson.decode('{\"a\":[1,2,null]}'))",
                "0"
            ]
        ),
        "$16\r\n{\"a\":[1,2,null]}\r\n"
    );
    assert_eq!(
        h.cmd(
            1,
            &[
                "EVAL",
                "return cmsgpack.unpack(cmsgpack.pack({1, 'x'}))[2]",
                "0"
            ]
        ),
        "$1\r\nx\r\n"
    );
    for code in ["cjson.encode = nil", "cmsgpack.pack = nil"] {
        let r = h.cmd(1, &["EVAL", code, "0"]);
        assert!(r.contains("Attempt to modify a readonly table"), "{r}");
    }
}

#[test]
fn acl_check_cmd_answers_for_the_callers_user() {
    let mut h = Harness::with_clients(1);
    h.cmd(
        1,
        &[
            "ACL",
            "SETUSER",
            "bob",
            "on",
            ">123",
            "+@scripting",
            "+set",
            "~x*",
        ],
    );
    assert_eq!(h.cmd(1, &["AUTH", "bob", "123"]), "+OK\r\n");
    assert_eq!(
        h.cmd(
            1,
            &[
                "EVAL",
                "return redis.acl_check_cmd('set', 'xx', 1)",
                "1",
                "xx"
            ]
        ),
        ":1\r\n"
    );
    assert_eq!(
        h.cmd(
            1,
            &[
                "EVAL",
                "return redis.acl_check_cmd('hset', 'xx', 'f', 1)",
                "1",
                "xx"
            ]
        ),
        "$-1\r\n"
    );
    assert_eq!(
        h.cmd(
            1,
            &["EVAL", "return redis.acl_check_cmd('set', 'yy', 1)", "0"]
        ),
        "$-1\r\n"
    );
    let r = h.cmd(
        1,
        &["EVAL", "return redis.acl_check_cmd('nosuch', 'a')", "0"],
    );
    assert!(
        r.starts_with("-ERR Invalid command passed to redis.acl_check_cmd()"),
        "{r}"
    );
}

#[test]
fn precompiled_chunks_are_refused() {
    let mut h = Harness::with_clients(1);
    let r = h.cmd(
        1,
        &[
            "EVAL",
            "return loadstring(string.dump(function() return 1 end))()",
            "0",
        ],
    );
    assert!(r.contains("attempt to call a nil value"), "{r}");
    let r = h.raw(1, &[b"EVAL", b"\x1bLua\x51\x00garbage", b"0"]);
    assert!(
        r.starts_with(b"-ERR Error compiling script"),
        "{}",
        String::from_utf8_lossy(&r)
    );
    // Source text still loads.
    assert_eq!(
        h.cmd(1, &["EVAL", "return loadstring('return 5')()", "0"]),
        ":5\r\n"
    );
}

#[test]
fn min_replicas_to_write_refuses_writes_without_linked_peers() {
    // Redis's "not enough good replicas": a node without peers has no good replicas.
    const NOREPLICAS: &str = "-NOREPLICAS Not enough good replicas to write.\r\n";
    let mut h = Harness::with_clients(1);
    h.cmd(1, &["SET", "x", "v"]);
    assert_eq!(
        h.cmd(1, &["CONFIG", "SET", "min-slaves-to-write", "1"]),
        "+OK\r\n"
    );
    assert_eq!(h.cmd(1, &["SET", "x", "w"]), NOREPLICAS);
    assert_eq!(h.cmd(1, &["GET", "x"]), "$1\r\nv\r\n");
    let read = "return redis.call('get','x')";
    assert_eq!(
        h.cmd(
            1,
            &["EVAL", &format!("#!lua flags=no-writes\n{read}"), "1", "x"]
        ),
        "$1\r\nv\r\n"
    );
    assert_eq!(h.cmd(1, &["EVAL", read, "1", "x"]), "$1\r\nv\r\n");
    assert_eq!(
        h.cmd(1, &["EVAL", &format!("#!lua\n{read}"), "1", "x"]),
        NOREPLICAS
    );
    let r = h.cmd(1, &["EVAL", "return redis.call('set','x',1)", "1", "x"]);
    assert!(r.starts_with("-NOREPLICAS"), "{r}");
    // Queued in MULTI: refused there, so EXEC aborts.
    h.cmd(1, &["MULTI"]);
    assert_eq!(h.cmd(1, &["SET", "x", "w"]), NOREPLICAS);
    assert!(h.cmd(1, &["EXEC"]).starts_with("-EXECABORT"));
    assert_eq!(
        h.cmd(1, &["CONFIG", "SET", "min-replicas-to-write", "0"]),
        "+OK\r\n"
    );
    assert_eq!(h.cmd(1, &["SET", "x", "w"]), "+OK\r\n");
}

/// The interpreter's heap as INFO memory reports it.
fn lua_memory(h: &mut Harness) -> u64 {
    let info = h.cmd(1, &["INFO", "memory"]);
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory_lua:"))
        .expect("INFO memory has used_memory_lua");
    line.trim().parse().expect("a byte count")
}

/// SCRIPT FLUSH starts a new interpreter, as Redis's does (Redis's unit/scripting measures
/// the Lua heap after it and 10,000 EVALs): what scripts left behind does not survive it, even
/// what collecting the old interpreter cannot give back (Lua 5.1 keeps a string table grown by
/// many distinct strings), while the function libraries on the same interpreter stay loaded
/// and callable.
#[test]
fn script_flush_starts_a_new_interpreter_and_keeps_the_functions() {
    const LIB: &str = "#!lua name=lib\nredis.register_function('hi', function() return 'hi' end)";
    let mut h = Harness::with_clients(1);
    assert_eq!(h.cmd(1, &["FUNCTION", "LOAD", LIB]), "$3\r\nlib\r\n");
    assert_eq!(h.cmd(1, &["SCRIPT", "FLUSH"]), "+OK\r\n");
    let fresh = lua_memory(&mut h);
    let strings = "local t = {} for i = 1, 50000 do t[i] = 'string ' .. i end return #t";
    assert_eq!(h.cmd(1, &["EVAL", strings, "0"]), ":50000\r\n");
    assert!(lua_memory(&mut h) > fresh + 1_000_000);
    assert_eq!(h.cmd(1, &["SCRIPT", "FLUSH"]), "+OK\r\n");
    let after = lua_memory(&mut h);
    assert!(
        after <= fresh,
        "{after} bytes after SCRIPT FLUSH, {fresh} fresh"
    );
    let loaded = h.cmd(1, &["SCRIPT", "LOAD", strings]);
    let sha = loaded.lines().nth(1).expect("a SHA-1");
    assert_eq!(h.cmd(1, &["SCRIPT", "FLUSH"]), "+OK\r\n");
    assert_eq!(h.cmd(1, &["SCRIPT", "EXISTS", sha]), "*1\r\n:0\r\n");
    assert_eq!(h.cmd(1, &["FCALL", "hi", "0"]), "$2\r\nhi\r\n");
    assert!(h.cmd(1, &["FUNCTION", "LIST"]).contains("lib"));
}

//! EVAL / EVALSHA / SCRIPT through the node's real entry points, replies byte for byte.

mod harness;
use harness::Harness;

fn node() -> Harness {
    let mut h = Harness::new();
    h.connect(1);
    h
}

#[test]
fn eval_converts_replies_both_ways() {
    let mut h = node();
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
    let mut h = node();
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
    // Blocking commands do not block inside a script.
    assert_eq!(
        h.cmd(1, &["EVAL", "return redis.call('blpop', 'empty', 0)", "0"]),
        "$-1\r\n"
    );
}

#[test]
fn sandbox_has_no_io_and_protects_globals() {
    let mut h = node();
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
    assert!(
        r.contains("Script attempted to create global variable 'x'"),
        "{r}"
    );
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
fn runaway_scripts_are_stopped_even_inside_pcall() {
    let mut h = node();
    let r = h.cmd(1, &["EVAL", "while true do end", "0"]);
    assert!(
        r.starts_with("-ERR Script exceeded its execution budget"),
        "{r}"
    );
    let r = h.cmd(
        1,
        &[
            "EVAL",
            "while true do pcall(function() while true do end end) end",
            "0",
        ],
    );
    assert!(
        r.starts_with("-ERR Script exceeded its execution budget"),
        "{r}"
    );
    // The node goes on serving.
    assert_eq!(h.cmd(1, &["EVAL", "return 2", "0"]), ":2\r\n");
}

#[test]
fn script_cache_load_exists_flush() {
    let mut h = node();
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

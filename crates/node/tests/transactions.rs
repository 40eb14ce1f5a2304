//! MULTI/EXEC/WATCH and pub/sub through the node's real entry points.

use lattice_testkit::Harness;

#[test]
fn exec_runs_queued_commands_atomically() {
    let mut h = Harness::with_clients(1);
    assert_eq!(h.cmd(1, &["MULTI"]), "+OK\r\n");
    assert_eq!(h.cmd(1, &["PING"]), "+QUEUED\r\n");
    assert_eq!(h.cmd(1, &["ECHO", "x"]), "+QUEUED\r\n");
    assert_eq!(h.cmd(1, &["EXEC"]), "*2\r\n+PONG\r\n$1\r\nx\r\n");
    assert_eq!(h.cmd(1, &["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(h.cmd(1, &["DISCARD"]), "-ERR DISCARD without MULTI\r\n");
}

#[test]
fn queueing_errors_abort_the_transaction() {
    let mut h = Harness::with_clients(1);
    h.cmd(1, &["MULTI"]);
    assert!(h.cmd(1, &["NOSUCH"]).starts_with("-ERR unknown command"));
    assert!(h.cmd(1, &["ECHO"]).starts_with("-ERR wrong number"));
    assert_eq!(
        h.cmd(1, &["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(h.cmd(1, &["MULTI"]), "+OK\r\n");
    assert_eq!(
        h.cmd(1, &["MULTI"]),
        "-ERR MULTI calls can not be nested\r\n"
    );
    assert_eq!(
        h.cmd(1, &["WATCH", "k"]),
        "-ERR WATCH inside MULTI is not allowed\r\n"
    );
    assert_eq!(h.cmd(1, &["DISCARD"]), "+OK\r\n");
}

#[test]
fn watch_sees_writes_deletes_and_expiry_by_others() {
    let mut h = Harness::with_clients(2);
    // A write by another client fails the EXEC.
    h.cmd(1, &["WATCH", "k"]);
    h.cmd(2, &["EXPIRE", "k", "100"]); // no such key: not a change
    h.cmd(1, &["MULTI"]);
    h.cmd(1, &["PING"]);
    assert_eq!(
        h.cmd(1, &["EXEC"]),
        "*1\r\n+PONG\r\n",
        "a no-op must not fail EXEC"
    );
    h.cmd(2, &["COPY", "none", "k"]);
    h.cmd(1, &["WATCH", "k"]);
    h.cmd(2, &["DEL", "nothing"]);
    h.cmd(1, &["MULTI"]);
    h.cmd(1, &["PING"]);
    assert_eq!(h.cmd(1, &["EXEC"]), "*1\r\n+PONG\r\n");
    // UNWATCH forgets; FLUSHALL of an existing watched key fails the EXEC.
    h.cmd(1, &["WATCH", "k"]);
    h.cmd(1, &["UNWATCH"]);
    h.cmd(1, &["MULTI"]);
    assert_eq!(h.cmd(1, &["EXEC"]), "*0\r\n");
}

#[test]
fn rename_of_a_watched_key_fails_exec() {
    let mut h = Harness::with_clients(2);
    h.cmd(2, &["COPY", "x", "y"]);
    h.cmd(1, &["WATCH", "dst"]);
    // Create a source with a key command only (strings may be absent in this test's scope).
    h.cmd(2, &["RENAME", "missing", "dst"]);
    h.cmd(1, &["MULTI"]);
    h.cmd(1, &["PING"]);
    assert_eq!(
        h.cmd(1, &["EXEC"]),
        "*1\r\n+PONG\r\n",
        "a failed RENAME changes nothing"
    );
}

#[test]
fn pubsub_delivers_messages_and_patterns() {
    let mut h = Harness::with_clients(2);
    assert_eq!(
        h.cmd(1, &["SUBSCRIBE", "news", "sport"]),
        "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$5\r\nsport\r\n:2\r\n"
    );
    assert_eq!(h.cmd(2, &["PUBLISH", "news", "hi"]), ":1\r\n");
    assert_eq!(
        h.take(1),
        "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
    );
    // RESP2 subscribers may only run pub/sub commands.
    assert!(h
        .cmd(1, &["ECHO", "x"])
        .starts_with("-ERR Can't execute 'echo'"));
    assert_eq!(h.cmd(1, &["PING"]), "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    assert_eq!(
        h.cmd(2, &["PSUBSCRIBE", "n*"]),
        "*3\r\n$10\r\npsubscribe\r\n$2\r\nn*\r\n:1\r\n"
    );
    assert_eq!(h.cmd(1, &["PUBLISH", "news", "x"]), "-ERR Can't execute 'publish': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n");
    h.connect(3);
    assert_eq!(h.cmd(3, &["PUBLISH", "news", "x"]), ":2\r\n");
    assert_eq!(
        h.take(2),
        "*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$1\r\nx\r\n"
    );
    assert_eq!(
        h.cmd(3, &["PUBSUB", "NUMSUB", "news", "none"]),
        "*4\r\n$4\r\nnews\r\n:1\r\n$4\r\nnone\r\n:0\r\n"
    );
    assert_eq!(h.cmd(3, &["PUBSUB", "NUMPAT"]), ":1\r\n");
    h.cmd(1, &["UNSUBSCRIBE"]);
    assert_eq!(h.cmd(3, &["PUBLISH", "news", "y"]), ":1\r\n");
    assert_eq!(
        h.cmd(1, &["ECHO", "ok"]),
        "$2\r\nok\r\n",
        "no subscriptions left: back to normal"
    );
}

#[test]
fn resp3_publish_to_own_subscription_pushes_before_the_reply() {
    let mut h = Harness::with_clients(1);
    h.cmd(1, &["HELLO", "3"]);
    h.cmd(1, &["SUBSCRIBE", "c"]);
    assert_eq!(
        h.cmd(1, &["PUBLISH", "c", "m"]),
        ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n:1\r\n"
    );
}

#[test]
fn keyspace_notifications_follow_the_config() {
    let mut h = Harness::with_clients(2);
    h.cmd(1, &["CONFIG", "SET", "notify-keyspace-events", "KEg"]);
    h.cmd(2, &["PSUBSCRIBE", "__key*__:*"]);
    h.take(2);
    h.cmd(1, &["COPY", "nothing", "k"]);
    assert_eq!(h.take(2), "", "nothing happened, nothing notified");
    assert!(h
        .cmd(1, &["CONFIG", "SET", "notify-keyspace-events", "Q"])
        .starts_with("-ERR CONFIG SET failed"));
}

#[test]
fn client_reply_off_and_skip() {
    let mut h = Harness::with_clients(1);
    assert_eq!(h.cmd(1, &["CLIENT", "REPLY", "OFF"]), "");
    assert_eq!(h.cmd(1, &["PING"]), "");
    assert_eq!(h.cmd(1, &["CLIENT", "REPLY", "ON"]), "+OK\r\n");
    assert_eq!(h.cmd(1, &["CLIENT", "REPLY", "SKIP"]), "");
    assert_eq!(h.cmd(1, &["PING"]), "");
    assert_eq!(h.cmd(1, &["PING"]), "+PONG\r\n");
    // ON inside the skipped command is acknowledged, as in Redis.
    h.cmd(1, &["CLIENT", "REPLY", "SKIP"]);
    assert_eq!(h.cmd(1, &["CLIENT", "REPLY", "ON"]), "+OK\r\n");
    // SKIP while OFF stays off.
    h.cmd(1, &["CLIENT", "REPLY", "OFF"]);
    h.cmd(1, &["CLIENT", "REPLY", "SKIP"]);
    assert_eq!(h.cmd(1, &["PING"]), "");
    assert_eq!(h.cmd(1, &["PING"]), "");
    // Pub/sub confirmations are pushes that OFF does not silence, even in RESP2.
    assert_eq!(
        h.cmd(1, &["SUBSCRIBE", "c"]),
        "*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"
    );
}

#[test]
fn quit_closes_after_the_reply_and_kill_closes_others() {
    let mut h = Harness::with_clients(2);
    assert_eq!(h.cmd(2, &["CLIENT", "KILL", "ID", "1"]), ":1\r\n");
    assert!(h.is_closed(1));
    assert_eq!(h.cmd(2, &["QUIT"]), "+OK\r\n");
    assert!(h.is_closed(2));
}

#[test]
fn watch_fails_exec_after_a_write_a_delete_an_expiry_or_a_flush() {
    let mut h = Harness::with_clients(2);
    let tx = |h: &mut Harness| {
        h.cmd(1, &["MULTI"]);
        h.cmd(1, &["PING"]);
        h.cmd(1, &["EXEC"])
    };
    h.cmd(1, &["WATCH", "k"]);
    h.cmd(2, &["SET", "k", "1"]);
    assert_eq!(tx(&mut h), "*-1\r\n", "write by another client");
    h.cmd(1, &["WATCH", "k"]);
    h.cmd(2, &["DEL", "k"]);
    assert_eq!(tx(&mut h), "*-1\r\n", "delete");
    h.cmd(2, &["SET", "k", "1", "PX", "10"]);
    h.cmd(1, &["WATCH", "k"]);
    h.advance(200); // active expiry removes it
    assert_eq!(tx(&mut h), "*-1\r\n", "expiry");
    h.cmd(2, &["SET", "k", "1"]);
    h.cmd(1, &["WATCH", "k"]);
    h.cmd(2, &["FLUSHALL"]);
    assert_eq!(tx(&mut h), "*-1\r\n", "flush");
    h.cmd(1, &["WATCH", "k"]);
    h.cmd(2, &["SET", "other", "1"]);
    assert_eq!(tx(&mut h), "*1\r\n+PONG\r\n", "unrelated key");
}

#[test]
fn command_introspection_answers_its_subcommands() {
    let mut h = Harness::with_clients(1);
    let count = h.cmd(1, &["COMMAND", "COUNT"]);
    assert!(count.starts_with(':'), "{count}");
    let n: i64 = count[1..count.len() - 2].parse().unwrap();
    assert!(n > 50, "COMMAND COUNT {n}");
    let info = h.cmd(1, &["COMMAND", "INFO", "get", "nosuch"]);
    assert!(
        info.starts_with("*2\r\n*10\r\n$3\r\nget\r\n:2\r\n"),
        "{info}"
    );
    assert!(info.ends_with("*-1\r\n"), "{info}");
    let docs = h.cmd(1, &["COMMAND", "DOCS", "get"]);
    assert!(
        docs.starts_with("*2\r\n$3\r\nget\r\n*6\r\n$7\r\nsummary\r\n"),
        "{docs}"
    );
    assert!(h.cmd(1, &["COMMAND", "LIST"]).contains("client|setname"));
    assert!(h.cmd(1, &["COMMAND"]).starts_with(&format!("*{n}\r\n")));
    assert_eq!(
        h.cmd(1, &["COMMAND", "NOPE"]),
        "-ERR unknown subcommand 'NOPE'. Try COMMAND HELP.\r\n"
    );
}

#[test]
fn punsubscribe_without_arguments_drops_every_pattern() {
    let mut h = Harness::with_clients(2);
    h.cmd(1, &["PSUBSCRIBE", "chan1.*", "chan2.*"]);
    assert_eq!(
        h.cmd(1, &["PUNSUBSCRIBE"]),
        "*3\r\n$12\r\npunsubscribe\r\n$7\r\nchan1.*\r\n:1\r\n*3\r\n$12\r\npunsubscribe\r\n$7\r\nchan2.*\r\n:0\r\n"
    );
    assert_eq!(h.cmd(2, &["PUBLISH", "chan1.hi", "hello"]), ":0\r\n");
}

#[test]
fn function_flush_and_list_answer_with_no_libraries() {
    let mut h = Harness::with_clients(1);
    assert_eq!(h.cmd(1, &["FUNCTION", "FLUSH"]), "+OK\r\n");
    assert_eq!(h.cmd(1, &["FUNCTION", "FLUSH", "ASYNC"]), "+OK\r\n");
    assert_eq!(h.cmd(1, &["FUNCTION", "LIST"]), "*0\r\n");
    // LOAD exists now (tests/functions.rs); a body without its metadata line is refused.
    assert_eq!(
        h.cmd(1, &["FUNCTION", "LOAD", "x"]),
        "-ERR Missing library metadata\r\n"
    );
}

#[test]
fn resp3_pushes_arrive_under_client_reply_off() {
    let mut h = Harness::with_clients(2);
    h.cmd(1, &["HELLO", "3"]);
    assert_eq!(h.cmd(1, &["CLIENT", "REPLY", "OFF"]), "");
    assert_eq!(
        h.cmd(1, &["SUBSCRIBE", "ch"]),
        ">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
    );
    assert_eq!(h.cmd(2, &["PUBLISH", "ch", "hi"]), ":1\r\n");
    assert_eq!(h.take(1), ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n");
    assert_eq!(h.cmd(1, &["PING"]), "", "ordinary replies stay off");
}

#[test]
fn unknown_command_echoes_bytes_like_redis() {
    let mut h = Harness::with_clients(1);
    let node_reply = h.cmd(1, &["nosuch", "a\u{0}b", "x"]);
    assert_eq!(
        node_reply,
        "-ERR unknown command 'nosuch', with args beginning with: 'a' 'x' \r\n"
    );
}

#[test]
fn client_unblock_releases_a_parked_client_and_its_pipeline() {
    let mut h = Harness::with_clients(2);
    assert_eq!(h.cmd(1, &["BLPOP", "q", "0"]), "");
    assert_eq!(h.cmd(1, &["PING"]), "", "queued behind the blocked BLPOP");
    assert_eq!(h.cmd(2, &["CLIENT", "UNBLOCK", "1", "ERROR"]), ":1\r\n");
    assert_eq!(
        h.take(1),
        "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n+PONG\r\n"
    );
    assert_eq!(h.cmd(2, &["CLIENT", "UNBLOCK", "1"]), ":0\r\n");
    h.cmd(1, &["BLPOP", "q", "0"]);
    assert_eq!(h.cmd(2, &["CLIENT", "UNBLOCK", "1", "TIMEOUT"]), ":1\r\n");
    assert_eq!(h.take(1), "*-1\r\n");
    assert_eq!(
        h.cmd(2, &["CLIENT", "UNBLOCK", "1", "foo"]),
        "-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n"
    );
}

#[test]
fn command_getkeys_and_memory_usage() {
    let mut h = Harness::with_clients(1);
    assert_eq!(
        h.cmd(1, &["COMMAND", "GETKEYS", "set", "a", "b"]),
        "*1\r\n$1\r\na\r\n"
    );
    assert_eq!(
        h.cmd(1, &["COMMAND", "GETKEYS", "mset", "a", "1", "b", "2"]),
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(
        h.cmd(1, &["COMMAND", "GETKEYS", "sort", "a", "store", "b"]),
        "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(
        h.cmd(
            1,
            &["COMMAND", "GETKEYS", "zunionstore", "d", "2", "a", "b"]
        ),
        "*3\r\n$1\r\nd\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
    assert_eq!(
        h.cmd(1, &["COMMAND", "GETKEYS", "ping", "x"]),
        "-ERR The command has no key arguments\r\n"
    );
    assert_eq!(h.cmd(1, &["MEMORY", "USAGE", "nokey"]), "$-1\r\n");
    h.cmd(1, &["SET", "k", "v"]);
    let usage = h.cmd(1, &["MEMORY", "USAGE", "k"]);
    let n: i64 = usage.trim_start_matches(':').trim().parse().unwrap();
    assert!((40..1000).contains(&n), "{usage}");
}

#[test]
fn exec_with_wrong_arity_aborts_the_transaction() {
    let mut h = Harness::with_clients(1);
    h.cmd(1, &["WATCH", "k"]);
    h.cmd(1, &["MULTI"]);
    h.cmd(1, &["PING"]);
    assert_eq!(
        h.cmd(1, &["EXEC", "x"]),
        "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n"
    );
    assert_eq!(h.cmd(1, &["PING"]), "+PONG\r\n", "no longer in MULTI");
    assert_eq!(h.cmd(1, &["DISCARD"]), "-ERR DISCARD without MULTI\r\n");
}

#[test]
fn notify_keyspace_events_reads_back_in_canonical_form() {
    let mut h = Harness::with_clients(1);
    h.cmd(1, &["CONFIG", "SET", "notify-keyspace-events", "KA"]);
    assert_eq!(
        h.cmd(1, &["CONFIG", "GET", "notify-keyspace-events"]),
        "*2\r\n$22\r\nnotify-keyspace-events\r\n$2\r\nAK\r\n"
    );
    h.cmd(1, &["CONFIG", "SET", "notify-keyspace-events", "El$"]);
    assert_eq!(
        h.cmd(1, &["CONFIG", "GET", "notify-keyspace-events"]),
        "*2\r\n$22\r\nnotify-keyspace-events\r\n$3\r\n$lE\r\n"
    );
}

#[test]
fn save_and_shutdown_are_refused_inside_multi() {
    for cmd in ["SAVE", "SHUTDOWN"] {
        let mut h = Harness::with_clients(1);
        h.cmd(1, &["MULTI"]);
        h.cmd(1, &["SET", "foo", "bar"]);
        assert_eq!(
            h.cmd(1, &[cmd]),
            "-ERR Command not allowed inside a transaction\r\n"
        );
        assert_eq!(
            h.cmd(1, &["EXEC"]),
            "-EXECABORT Transaction discarded because of previous errors.\r\n"
        );
        assert_eq!(h.cmd(1, &["GET", "foo"]), "$-1\r\n");
        // Outside MULTI, SAVE on a node without a disk says so; SHUTDOWN answers nothing and
        // asks the driver to stop the process (Output::Shutdown).
        if cmd == "SAVE" {
            assert!(h.cmd(1, &[cmd]).starts_with("-ERR persistence is off"));
        } else {
            assert_eq!(h.cmd(1, &[cmd]), "");
        }
    }
}

#[test]
fn a_watched_key_that_expires_fails_exec_even_unreclaimed() {
    // Redis 7.0: a key live at WATCH that has expired by EXEC fails it, whether or not
    // anything reclaimed it; one already expired at WATCH breaks nothing by being reclaimed.
    let mut h = Harness::with_clients(2);
    h.cmd(1, &["SET", "k", "v", "PX", "50"]);
    h.cmd(1, &["WATCH", "k"]);
    h.advance(100);
    h.cmd(1, &["MULTI"]);
    h.cmd(1, &["PING"]);
    assert_eq!(h.cmd(1, &["EXEC"]), "*-1\r\n", "expired since WATCH");

    h.cmd(1, &["SET", "k", "v", "PX", "10"]);
    h.advance(20);
    h.cmd(1, &["WATCH", "k"]);
    assert_eq!(h.cmd(2, &["GET", "k"]), "$-1\r\n"); // reclaims the key
    h.cmd(1, &["MULTI"]);
    h.cmd(1, &["PING"]);
    assert_eq!(
        h.cmd(1, &["EXEC"]),
        "*1\r\n+PONG\r\n",
        "already expired at WATCH"
    );

    h.cmd(1, &["SET", "k", "v", "PX", "10"]);
    h.advance(20);
    h.cmd(1, &["WATCH", "k"]);
    h.cmd(2, &["SET", "k", "new"]);
    h.cmd(1, &["MULTI"]);
    h.cmd(1, &["PING"]);
    assert_eq!(h.cmd(1, &["EXEC"]), "*-1\r\n", "created again after WATCH");
}

#[test]
fn exec_refused_to_a_resp2_subscriber_aborts_and_client_info_inside_exec_says_exec() {
    let mut h = Harness::with_clients(1);
    h.cmd(1, &["SUBSCRIBE", "c"]);
    assert_eq!(
        h.cmd(1, &["EXEC"]),
        "-EXECABORT Transaction discarded because of: Can't execute 'exec': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n"
    );
    h.cmd(1, &["UNSUBSCRIBE"]);
    h.cmd(1, &["MULTI"]);
    h.cmd(1, &["CLIENT", "INFO"]);
    let out = h.cmd(1, &["EXEC"]);
    assert!(out.contains(" cmd=exec "), "{out}");
}

/// Every refusal takes the dispatcher's one path (Redis's rejectCommand): the command's
/// rejected calls are counted, a transaction being queued is doomed, and a refused EXEC aborts
/// with the refusal as its reason, whichever rule refused it.
#[test]
fn every_refusal_dooms_the_transaction_and_aborts_exec() {
    let mut h = Harness::with_clients(1);
    // A no-multi command while queueing.
    h.cmd(1, &["MULTI"]);
    assert_eq!(
        h.cmd(1, &["SAVE"]),
        "-ERR Command not allowed inside a transaction\r\n"
    );
    assert_eq!(
        h.cmd(1, &["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    let stats = h.cmd(1, &["INFO", "commandstats"]);
    assert!(
        stats.contains("cmdstat_save:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,"),
        "{stats}"
    );
    // EXEC refused in subscribed mode (RESP2).
    h.cmd(1, &["SUBSCRIBE", "ch"]);
    assert!(h.cmd(1, &["EXEC"]).starts_with(
        "-EXECABORT Transaction discarded because of: Can't execute 'exec': only (P|S)SUBSCRIBE"
    ));
    // EXEC refused for want of authentication.
    h.connect(2);
    h.cmd(2, &["CONFIG", "SET", "requirepass", "secret"]);
    h.connect(3);
    assert_eq!(
        h.cmd(3, &["EXEC"]),
        "-EXECABORT Transaction discarded because of: NOAUTH Authentication required.\r\n"
    );
    assert_eq!(
        h.cmd(3, &["GET", "k"]),
        "-NOAUTH Authentication required.\r\n"
    );
}

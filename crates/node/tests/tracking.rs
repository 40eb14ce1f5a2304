//! CLIENT TRACKING through the node's real entry points: which changes are announced, to whom,
//! in which form and in which order against the replies. Expected bytes were checked against
//! redis-server 7.0.15 given the same commands.

mod harness;
use harness::Harness;

/// Client 1 tracks, client 2 writes, client 3 receives redirected invalidations.
fn node() -> Harness {
    let mut h = Harness::new();
    for id in 1..=3 {
        h.connect(id);
    }
    h
}

#[test]
fn resp3_client_is_told_once_per_read() {
    let mut h = node();
    h.cmd(1, &["HELLO", "3"]);
    assert_eq!(h.cmd(1, &["CLIENT", "TRACKING", "on"]), "+OK\r\n");
    h.cmd(2, &["SET", "k", "1"]);
    assert_eq!(h.cmd(1, &["GET", "k"]), "$1\r\n1\r\n");
    h.cmd(2, &["SET", "k", "2"]);
    assert_eq!(h.take(1), ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n");
    // Not read again: the next change is not announced.
    h.cmd(2, &["SET", "k", "3"]);
    assert_eq!(h.take(1), "");
    // A key never read is never announced.
    h.cmd(2, &["SET", "other", "1"]);
    assert_eq!(h.take(1), "");
}

#[test]
fn own_change_is_announced_after_the_reply() {
    let mut h = node();
    h.cmd(1, &["HELLO", "3"]);
    h.cmd(1, &["CLIENT", "TRACKING", "on"]);
    h.cmd(1, &["HSET", "h", "f", "1"]);
    h.cmd(1, &["HGET", "h", "f"]);
    assert_eq!(
        h.cmd(1, &["HDEL", "h", "f"]),
        ":1\r\n>2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nh\r\n"
    );
    // And after a whole transaction's reply.
    h.cmd(1, &["MSET", "a", "1", "b", "2"]);
    h.cmd(1, &["GET", "a"]);
    h.cmd(1, &["MULTI"]);
    h.cmd(1, &["INCR", "a"]);
    h.cmd(1, &["GET", "b"]);
    assert_eq!(
        h.cmd(1, &["EXEC"]),
        "*2\r\n:2\r\n$1\r\n2\r\n>2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\na\r\n"
    );
}

#[test]
fn resp2_redirect_to_a_subscriber() {
    let mut h = node();
    h.cmd(3, &["SUBSCRIBE", "__redis__:invalidate"]);
    assert_eq!(
        h.cmd(1, &["CLIENT", "TRACKING", "on", "REDIRECT", "3"]),
        "+OK\r\n"
    );
    h.cmd(1, &["GET", "a"]);
    h.cmd(1, &["GET", "b"]);
    h.cmd(2, &["SET", "a", "1"]);
    assert_eq!(
        h.take(3),
        "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$1\r\na\r\n"
    );
    // A flush invalidates everything: a null in place of the keys.
    h.cmd(2, &["FLUSHALL"]);
    assert_eq!(
        h.take(3),
        "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n"
    );
    assert!(h
        .cmd(2, &["INFO", "stats"])
        .contains("tracking_total_keys:0\r\n"));
    // Client 1 itself (RESP2, redirected) never gets a push.
    assert_eq!(h.take(1), "");
}

#[test]
fn broken_redirect_is_reported() {
    let mut h = node();
    h.cmd(1, &["HELLO", "3"]);
    h.cmd(1, &["CLIENT", "TRACKING", "on", "REDIRECT", "3"]);
    h.cmd(1, &["GET", "k"]);
    h.cmd(3, &["QUIT"]);
    h.cmd(2, &["SET", "k", "1"]);
    assert_eq!(h.take(1), ">2\r\n$21\r\ntracking-redir-broken\r\n:3\r\n");
    let info = h.cmd(1, &["CLIENT", "TRACKINGINFO"]);
    assert!(info.contains("$15\r\nbroken_redirect\r\n"), "{info}");
}

#[test]
fn bcast_prefixes_gather_changes_per_drain() {
    let mut h = node();
    h.cmd(3, &["SUBSCRIBE", "__redis__:invalidate"]);
    let reply = h.cmd(
        1,
        &[
            "CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", "3", "PREFIX", "a:", "PREFIX", "b:",
        ],
    );
    assert_eq!(reply, "+OK\r\n");
    h.cmd(1, &["MULTI"]);
    for k in ["a:1", "a:2", "b:1", "c:1"] {
        h.cmd(1, &["INCR", k]);
    }
    h.cmd(1, &["EXEC"]);
    let got = h.take(3);
    assert_eq!(
        got,
        "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*2\r\n$3\r\na:1\r\n$3\r\na:2\r\n\
         *3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$3\r\nb:1\r\n"
    );
    // Overlapping prefixes are refused with Redis's text.
    let err = h.cmd(1, &["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "a"]);
    assert!(
        err.starts_with("-ERR Prefix 'a' overlaps with an existing prefix 'a:'"),
        "{err}"
    );
    // NOLOOP: the client's own changes are left out.
    h.cmd(1, &["CLIENT", "TRACKING", "off"]);
    h.cmd(
        1,
        &[
            "CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", "3", "NOLOOP",
        ],
    );
    h.cmd(1, &["SET", "mine", "1"]);
    h.cmd(2, &["SET", "theirs", "1"]);
    assert_eq!(
        h.take(3),
        "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$6\r\ntheirs\r\n"
    );
}

#[test]
fn optin_tracks_only_after_caching_yes() {
    let mut h = node();
    h.cmd(1, &["HELLO", "3"]);
    h.cmd(1, &["CLIENT", "TRACKING", "on", "OPTIN"]);
    h.cmd(1, &["GET", "a"]);
    assert_eq!(h.cmd(1, &["CLIENT", "CACHING", "yes"]), "+OK\r\n");
    h.cmd(1, &["GET", "b"]);
    // CACHING applied to one command only.
    h.cmd(1, &["GET", "c"]);
    h.cmd(2, &["MSET", "a", "1", "b", "1", "c", "1"]);
    assert_eq!(h.take(1), ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nb\r\n");
    let err = h.cmd(1, &["CLIENT", "CACHING", "no"]);
    assert_eq!(
        err,
        "-ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.\r\n"
    );
}

#[test]
fn scripts_track_declared_keys_only_when_they_read() {
    let mut h = node();
    h.cmd(1, &["HELLO", "3"]);
    h.cmd(1, &["CLIENT", "TRACKING", "on"]);
    h.cmd(
        1,
        &["EVAL", "redis.call('set', 'x', 'bar')", "2", "k1", "k2"],
    );
    h.cmd(2, &["MSET", "k1", "1", "k2", "1"]);
    assert_eq!(h.take(1), "");
    h.cmd(1, &["EVAL", "redis.call('get', 'x')", "2", "k1", "k2"]);
    h.cmd(2, &["MSET", "k2", "2", "k1", "2", "x", "1"]);
    assert_eq!(
        h.take(1),
        ">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\nk2\r\n>2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\nk1\r\n"
    );
}

#[test]
fn table_limit_evicts_with_invalidations() {
    let mut h = node();
    h.cmd(1, &["HELLO", "3"]);
    h.cmd(1, &["CLIENT", "TRACKING", "on"]);
    for i in 0..250 {
        h.cmd(1, &["GET", &format!("key{i}")]);
    }
    h.cmd(2, &["CONFIG", "SET", "tracking-table-max-keys", "1"]);
    // Evicted over the next requests (100, then 200 keys a round) and the timer.
    for _ in 0..3 {
        h.cmd(2, &["PING"]);
    }
    let pushes = h.take(1).matches("invalidate").count();
    assert_eq!(pushes, 249);
    assert!(h
        .cmd(2, &["INFO", "stats"])
        .contains("tracking_total_keys:1\r\n"));
}

#[test]
fn expiry_is_announced() {
    let mut h = node();
    h.cmd(1, &["HELLO", "3"]);
    h.cmd(1, &["CLIENT", "TRACKING", "on"]);
    h.cmd(2, &["SET", "k", "v", "PX", "10"]);
    h.cmd(1, &["GET", "k"]);
    h.advance(1000);
    assert_eq!(h.take(1), ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n");
}

#[test]
fn tracking_info_and_errors() {
    let mut h = node();
    assert_eq!(h.cmd(1, &["CLIENT", "GETREDIR"]), ":-1\r\n");
    let refused: [(&[&str], &str); 5] = [
        (
            &["REDIRECT", "99"],
            "The client ID you want redirect to does not exist",
        ),
        (
            &["PREFIX", "a"],
            "PREFIX option requires BCAST mode to be enabled",
        ),
        (
            &["OPTIN", "OPTOUT"],
            "You can't specify both OPTIN mode and OPTOUT mode",
        ),
        (
            &["BCAST", "OPTIN"],
            "OPTIN and OPTOUT are not compatible with BCAST",
        ),
        (&["NOSUCH"], "syntax error"),
    ];
    for (options, error) in refused {
        let mut args = vec!["CLIENT", "TRACKING", "on"];
        args.extend_from_slice(options);
        assert_eq!(h.cmd(1, &args), format!("-ERR {error}\r\n"));
    }
    h.cmd(1, &["CLIENT", "TRACKING", "on", "REDIRECT", "2", "NOLOOP"]);
    assert_eq!(h.cmd(1, &["CLIENT", "GETREDIR"]), ":2\r\n");
    assert_eq!(
        h.cmd(1, &["CLIENT", "TRACKINGINFO"]),
        "*6\r\n$5\r\nflags\r\n*2\r\n$2\r\non\r\n$6\r\nnoloop\r\n$8\r\nredirect\r\n:2\r\n$8\r\nprefixes\r\n*0\r\n"
    );
    assert!(h
        .cmd(2, &["INFO", "clients"])
        .contains("tracking_clients:1\r\n"));
    h.cmd(1, &["RESET"]);
    assert!(h
        .cmd(2, &["INFO", "clients"])
        .contains("tracking_clients:0\r\n"));
}

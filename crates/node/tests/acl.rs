//! ACL: users, passwords, command, key and channel permissions, the ACL log, the ACL file
//! through the driver, as Redis 7.0 documents them.

use lattice_node::Config;
use lattice_testkit::Harness;

fn ok(h: &mut Harness, id: u64, args: &[&str]) {
    assert_eq!(h.cmd(id, args), "+OK\r\n", "{args:?}");
}

/// A node with client 1 connected as the default user.
fn node() -> Harness {
    let mut h = Harness::new();
    h.connect(1);
    h
}

#[test]
fn default_user_runs_everything() {
    let mut h = node();
    assert_eq!(h.cmd(1, &["ACL", "WHOAMI"]), "$7\r\ndefault\r\n");
    assert_eq!(
        h.cmd(1, &["ACL", "LIST"]),
        "*1\r\n$34\r\nuser default on nopass ~* &* +@all\r\n"
    );
    assert_eq!(h.cmd(1, &["ACL", "USERS"]), "*1\r\n$7\r\ndefault\r\n");
    assert!(h.cmd(1, &["CLIENT", "INFO"]).contains(" user=default "));
}

#[test]
fn new_users_start_disabled_and_passwords_are_a_set() {
    let mut h = node();
    ok(&mut h, 1, &["ACL", "SETUSER", "newuser", ">passwd1"]);
    let wrong = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    assert_eq!(h.cmd(1, &["AUTH", "newuser", "passwd1"]), wrong);
    ok(
        &mut h,
        1,
        &["ACL", "SETUSER", "newuser", "on", "+acl", ">passwd2"],
    );
    ok(&mut h, 1, &["AUTH", "newuser", "passwd1"]);
    assert_eq!(h.cmd(1, &["ACL", "WHOAMI"]), "$7\r\nnewuser\r\n");
    ok(&mut h, 1, &["AUTH", "newuser", "passwd2"]);
    assert_eq!(h.cmd(1, &["AUTH", "newuser", "passwd3"]), wrong);
    ok(&mut h, 1, &["ACL", "SETUSER", "newuser", "<passwd1"]);
    assert_eq!(h.cmd(1, &["AUTH", "newuser", "passwd1"]), wrong);
    // Stored as SHA-256, shown as such.
    let hash = "34344e4d60c2b6d639b7bd22e18f2b0b91bc34bf0ac5f9952744435093cfb4e6";
    ok(
        &mut h,
        1,
        &["ACL", "SETUSER", "newuser", &format!("#{hash}")],
    );
    ok(&mut h, 1, &["AUTH", "newuser", "passwd4"]);
    let user = h.cmd(1, &["ACL", "GETUSER", "newuser"]);
    assert!(user.contains(hash) && !user.contains("passwd4"), "{user}");
    let bad = h.cmd(
        1,
        &["ACL", "SETUSER", "newuser", &format!("#{}", &hash[1..])],
    );
    assert_eq!(bad, "-ERR Error in ACL SETUSER modifier '#4344e4d60c2b6d639b7bd22e18f2b0b91bc34bf0ac5f9952744435093cfb4e6': The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters\r\n");
    // A failed SETUSER changes nothing.
    let before = h.cmd(1, &["ACL", "GETUSER", "newuser"]);
    assert!(h
        .cmd(
            1,
            &["ACL", "SETUSER", "newuser", "nopass", "+nosuchcommand"]
        )
        .contains("Unknown command or category name in ACL"));
    assert_eq!(h.cmd(1, &["ACL", "GETUSER", "newuser"]), before);
    assert_eq!(
        h.cmd(1, &["ACL", "SETUSER", "a a"]),
        "-ERR Usernames can't contain spaces or null characters\r\n"
    );
}

#[test]
fn commands_keys_and_channels_are_checked() {
    let mut h = node();
    ok(&mut h, 1, &["ACL", "SETUSER", "u", "on", "nopass", "+acl"]);
    ok(&mut h, 1, &["AUTH", "u", "x"]);
    assert_eq!(
        h.cmd(1, &["SET", "foo", "bar"]),
        "-NOPERM this user has no permissions to run the 'set' command\r\n"
    );
    ok(&mut h, 1, &["ACL", "SETUSER", "u", "+set"]);
    assert_eq!(
        h.cmd(1, &["SET", "foo", "bar"]),
        "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
    );
    ok(&mut h, 1, &["ACL", "SETUSER", "u", "allcommands", "~foo:*"]);
    ok(&mut h, 1, &["SET", "foo:1", "a"]);
    assert!(h
        .cmd(1, &["MSET", "foo:2", "a", "zap", "b"])
        .starts_with("-NOPERM"));
    assert_eq!(
        h.cmd(1, &["PUBLISH", "ch", "m"]),
        "-NOPERM this user has no permissions to access one of the channels used as arguments\r\n"
    );
    ok(&mut h, 1, &["ACL", "SETUSER", "u", "&news.*"]);
    assert_eq!(h.cmd(1, &["PUBLISH", "news.1", "m"]), ":0\r\n");
    // A pattern must be one of the user's patterns as written.
    h.connect(2);
    ok(&mut h, 2, &["AUTH", "u", "x"]);
    assert!(h.cmd(2, &["PSUBSCRIBE", "news.1*"]).starts_with("-NOPERM"));
    assert!(h.cmd(2, &["PSUBSCRIBE", "news.*"]).contains("psubscribe"));
    // Subcommands: allowed one by one, refused by their full name.
    ok(&mut h, 1, &["ACL", "SETUSER", "u", "-client", "+client|id"]);
    assert_eq!(h.cmd(1, &["CLIENT", "ID"]), ":1\r\n");
    assert_eq!(
        h.cmd(1, &["CLIENT", "KILL", "TYPE", "master"]),
        "-NOPERM this user has no permissions to run the 'client|kill' command\r\n"
    );
    // A first argument of a plain command.
    ok(&mut h, 1, &["ACL", "SETUSER", "u", "-select", "+select|0"]);
    ok(&mut h, 1, &["SELECT", "0"]);
    assert!(h.cmd(1, &["SELECT", "1"]).starts_with("-NOPERM"));
    // AUTH and HELLO run whatever the user may do.
    ok(&mut h, 1, &["ACL", "SETUSER", "u", "-@all"]);
    ok(&mut h, 1, &["AUTH", "default", ""]);
}

#[test]
fn read_and_write_key_permissions() {
    let mut h = node();
    ok(
        &mut h,
        1,
        &[
            "ACL", "SETUSER", "rw", "on", "nopass", "+@all", "%R~r*", "%W~w*",
        ],
    );
    let user = h.cmd(1, &["ACL", "GETUSER", "rw"]);
    assert!(user.contains("%R~r* %W~w*"), "{user}");
    let dry = |h: &mut Harness, args: &[&str]| {
        let mut all = vec!["ACL", "DRYRUN", "rw"];
        all.extend_from_slice(args);
        h.cmd(1, &all)
    };
    assert_eq!(dry(&mut h, &["GET", "r1"]), "+OK\r\n");
    assert_eq!(
        dry(&mut h, &["GET", "w1"]),
        "$51\r\nThis user has no permissions to access the 'w1' key\r\n"
    );
    assert_eq!(dry(&mut h, &["SET", "w1", "v"]), "+OK\r\n");
    assert!(dry(&mut h, &["SET", "w1", "v", "GET"]).contains("'w1' key"));
    assert_eq!(dry(&mut h, &["COPY", "r1", "w1"]), "+OK\r\n");
    assert!(dry(&mut h, &["COPY", "w1", "r1"]).contains("'w1' key"));
    assert_eq!(dry(&mut h, &["SINTERSTORE", "w1", "r1", "r2"]), "+OK\r\n");
    assert_eq!(dry(&mut h, &["EXISTS", "w1"]), "+OK\r\n");
    assert_eq!(
        h.cmd(1, &["ACL", "DRYRUN", "nobody", "GET", "k"]),
        "-ERR User 'nobody' not found\r\n"
    );
    assert_eq!(
        dry(&mut h, &["NOSUCH", "k"]),
        "-ERR Command 'NOSUCH' not found\r\n"
    );
    assert_eq!(
        dry(&mut h, &["GET"]),
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    ok(
        &mut h,
        1,
        &["ACL", "SETUSER", "scripter", "on", "nopass", "+@read"],
    );
    assert_eq!(
        h.cmd(1, &["ACL", "DRYRUN", "scripter", "EVAL_RO", "", "0"]),
        "$57\r\nThis user has no permissions to run the 'eval_ro' command\r\n"
    );
}

#[test]
fn getuser_describes_rules_compactly() {
    let mut h = node();
    let commands = |h: &mut Harness, rules: &[&str]| {
        let mut args = vec!["ACL", "SETUSER", "t", "reset"];
        args.extend_from_slice(rules);
        assert_eq!(h.cmd(1, &args), "+OK\r\n");
        let user = h.cmd(1, &["ACL", "GETUSER", "t"]);
        let at = user.find("commands\r\n").expect("commands field") + 10;
        let rest = &user[at..];
        let line_end = rest.find("\r\n").unwrap();
        let value = &rest[line_end + 2..];
        value[..value.find("\r\n").unwrap()].to_string()
    };
    assert_eq!(commands(&mut h, &[]), "-@all");
    assert_eq!(commands(&mut h, &["+@all", "-@string"]), "+@all -@string");
    assert_eq!(commands(&mut h, &["+@hash"]), "-@all +@hash");
    assert_eq!(
        commands(&mut h, &["+memory|doctor"]),
        "-@all +memory|doctor"
    );
    assert_eq!(
        commands(&mut h, &["+memory|doctor", "+memory"]),
        "-@all +memory"
    );
    assert_eq!(
        commands(&mut h, &["+@all", "-client|kill"]),
        "+@all -client|kill"
    );
    assert_eq!(commands(&mut h, &["+@all", "+client|id"]), "+@all");
    // Every category describes as itself, from either side.
    let cats = h.cmd(1, &["ACL", "CAT"]);
    let names: Vec<String> = cats
        .split("\r\n")
        .filter(|l| !l.is_empty() && !l.starts_with('*') && !l.starts_with('$'))
        .map(str::to_string)
        .collect();
    assert_eq!(names.len(), 21);
    for c in &names {
        assert_eq!(
            commands(&mut h, &["+@all", &format!("-@{c}")]),
            format!("+@all -@{c}")
        );
        assert_eq!(
            commands(&mut h, &[&format!("+@{c}")]),
            format!("-@all +@{c}")
        );
    }
    assert_eq!(
        h.cmd(1, &["ACL", "CAT", "NON_EXISTS"]),
        "-ERR Unknown category 'NON_EXISTS'\r\n"
    );
    let transaction = h.cmd(1, &["ACL", "CAT", "transaction"]);
    assert!(transaction.contains("\r\nmulti\r\n"), "{transaction}");
    let keyspace = h.cmd(1, &["ACL", "CAT", "keyspace"]);
    assert!(!keyspace.contains("\r\nset\r\n") && keyspace.contains("\r\ndel\r\n"));
    ok(
        &mut h,
        1,
        &[
            "ACL",
            "SETUSER",
            "hp",
            "on",
            "nopass",
            "resetchannels",
            "&foo",
            "+@all",
        ],
    );
    let list = h.cmd(1, &["ACL", "LIST"]);
    assert!(
        list.contains("user hp on nopass resetchannels &foo +@all\r\n"),
        "{list}"
    );
}

#[test]
fn acl_log_records_refusals() {
    let mut h = node();
    ok(
        &mut h,
        1,
        &[
            "ACL",
            "SETUSER",
            "antirez",
            ">foo",
            "on",
            "+set",
            "~object:1234",
            "+multi",
            "+exec",
            "+eval",
        ],
    );
    ok(&mut h, 1, &["AUTH", "antirez", "foo"]);
    for _ in 0..3 {
        assert!(h.cmd(1, &["GET", "foo"]).starts_with("-NOPERM"));
    }
    assert!(h.cmd(1, &["SET", "nokey", "1"]).starts_with("-NOPERM"));
    ok(&mut h, 1, &["MULTI"]);
    assert!(h.cmd(1, &["INCR", "foo"]).starts_with("-NOPERM"));
    assert!(h.cmd(1, &["EXEC"]).starts_with("-EXECABORT"));
    assert!(h
        .cmd(1, &["EVAL", "return redis.call('incr','foo')", "0"])
        .contains("The user executing the script can't run this command or subcommand"));
    assert!(h
        .cmd(1, &["AUTH", "antirez", "wrong"])
        .starts_with("-WRONGPASS"));
    ok(&mut h, 1, &["AUTH", "default", ""]);
    let log = h.cmd(1, &["ACL", "LOG"]);
    // Newest first: auth, lua, multi, key, command (three merged).
    let entries: Vec<&str> = log.split("$5\r\ncount\r\n").skip(1).collect();
    assert_eq!(entries.len(), 5, "{log}");
    assert!(entries[0].contains("auth") && entries[0].contains("AUTH"));
    assert!(entries[1].contains("lua") && entries[1].contains("incr"));
    assert!(entries[2].contains("multi") && entries[2].contains("incr"));
    assert!(entries[3].contains("$3\r\nkey\r\n") && entries[3].contains("nokey"));
    assert!(entries[4].starts_with(":3\r\n") && entries[4].contains("$3\r\nget\r\n"));
    assert!(entries[4].contains("$8\r\nusername\r\n$7\r\nantirez\r\n"));
    assert_eq!(h.cmd(1, &["ACL", "LOG", "2"]).matches("count").count(), 2);
    ok(&mut h, 1, &["CONFIG", "SET", "acllog-max-len", "2"]);
    ok(&mut h, 1, &["AUTH", "antirez", "foo"]);
    assert!(h.cmd(1, &["SET", "other", "1"]).starts_with("-NOPERM"));
    ok(&mut h, 1, &["AUTH", "default", ""]);
    assert_eq!(h.cmd(1, &["ACL", "LOG"]).matches("count").count(), 2);
    ok(&mut h, 1, &["ACL", "LOG", "RESET"]);
    assert_eq!(h.cmd(1, &["ACL", "LOG"]), "*0\r\n");
    let info = h.cmd(1, &["INFO", "stats"]);
    assert!(
        info.contains(
            "acl_access_denied_auth:1\r\nacl_access_denied_cmd:5\r\nacl_access_denied_key:2\r\n"
        ),
        "{info}"
    );
}

#[test]
fn exec_rechecks_permissions() {
    let mut h = node();
    h.connect(2);
    ok(
        &mut h,
        1,
        &[
            "ACL", "SETUSER", "u", "on", "nopass", "+multi", "+exec", "+incr", "~*",
        ],
    );
    ok(&mut h, 1, &["AUTH", "u", "p"]);
    ok(&mut h, 1, &["MULTI"]);
    assert_eq!(h.cmd(1, &["INCR", "k"]), "+QUEUED\r\n");
    ok(&mut h, 2, &["ACL", "SETUSER", "u", "-incr"]);
    assert_eq!(
        h.cmd(1, &["EXEC"]),
        "*1\r\n-NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: no permission to execute the command or subcommand\r\n"
    );
}

#[test]
fn deleted_users_and_revoked_subscribers_are_disconnected() {
    let mut h = node();
    h.connect(2);
    h.connect(3);
    ok(
        &mut h,
        1,
        &[
            "ACL",
            "SETUSER",
            "ps",
            "on",
            ">pw",
            "+@all",
            "resetchannels",
            "&foo:1",
            "&bar:*",
        ],
    );
    ok(&mut h, 2, &["AUTH", "ps", "pw"]);
    assert!(h.cmd(2, &["SUBSCRIBE", "foo:1"]).contains("subscribe"));
    ok(&mut h, 3, &["AUTH", "ps", "pw"]);
    assert!(h.cmd(3, &["PSUBSCRIBE", "bar:*"]).contains("psubscribe"));
    // Keeping the permissions (and gaining more) pardons both.
    ok(
        &mut h,
        1,
        &[
            "ACL",
            "SETUSER",
            "ps",
            "resetchannels",
            "&foo:1",
            "&bar:*",
            "&baz",
        ],
    );
    assert!(!h.is_closed(2) && !h.is_closed(3));
    ok(
        &mut h,
        1,
        &["ACL", "SETUSER", "ps", "resetchannels", "&bar:*"],
    );
    assert!(h.is_closed(2) && !h.is_closed(3));
    // DELUSER: its connections are closed, the caller's after its reply.
    h.connect(4);
    ok(&mut h, 4, &["ACL", "SETUSER", "using", "on", ">pw", "+acl"]);
    ok(&mut h, 4, &["AUTH", "using", "pw"]);
    assert_eq!(
        h.cmd(4, &["ACL", "DELUSER", "using", "ps", "nobody"]),
        ":2\r\n"
    );
    assert!(h.is_closed(3) && h.is_closed(4));
    assert_eq!(
        h.cmd(1, &["ACL", "DELUSER", "default"]),
        "-ERR The 'default' user cannot be removed\r\n"
    );
}

#[test]
fn requirepass_is_the_default_users_password() {
    let mut h = node();
    assert!(h
        .cmd(1, &["AUTH", "x"])
        .starts_with("-ERR AUTH <password> called without"));
    ok(&mut h, 1, &["CONFIG", "SET", "requirepass", "secret"]);
    h.connect(2);
    assert_eq!(
        h.cmd(2, &["GET", "k"]),
        "-NOAUTH Authentication required.\r\n"
    );
    ok(&mut h, 2, &["AUTH", "secret"]);
    assert_eq!(h.cmd(2, &["GET", "k"]), "$-1\r\n");
    let user = h.cmd(1, &["ACL", "GETUSER", "default"]);
    assert!(user.contains(&lattice_node::acl::hash_password(b"secret")));
    // The default user off: new connections must authenticate as someone else.
    ok(&mut h, 1, &["CONFIG", "SET", "requirepass", ""]);
    ok(&mut h, 1, &["ACL", "SETUSER", "default", "off"]);
    h.connect(3);
    assert_eq!(h.cmd(3, &["PING"]), "-NOAUTH Authentication required.\r\n");
    ok(
        &mut h,
        1,
        &["ACL", "SETUSER", "secure", ">supass", "on", "+@all"],
    );
    assert!(h
        .cmd(3, &["HELLO", "2", "AUTH", "secure", "supass"])
        .starts_with("*14"));
    assert_eq!(h.cmd(3, &["ACL", "WHOAMI"]), "$6\r\nsecure\r\n");
    ok(&mut h, 1, &["ACL", "SETUSER", "default", "on"]);
}

#[test]
fn acl_file_save_and_load_go_through_the_driver() {
    let mut h = node();
    assert!(h
        .cmd(1, &["ACL", "LOAD"])
        .contains("not configured to use an ACL file"));
    let mut config = Config::default();
    config.set_initial("aclfile", "/data/users.acl").unwrap();
    let mut h = Harness::with_config(config);
    h.connect(1);
    h.connect(2);
    assert_eq!(
        h.cmd(1, &["ACL", "LOAD"]),
        "-ERR Error loading ACLs, opening file '/data/users.acl': No such file or directory\r\n"
    );
    ok(
        &mut h,
        1,
        &["ACL", "SETUSER", "alice", "on", ">alice", "~*", "+@all"],
    );
    ok(&mut h, 1, &["ACL", "SAVE"]);
    let saved = String::from_utf8(h.host.acl_file.clone().unwrap()).unwrap();
    assert!(saved.starts_with("user alice on #"), "{saved}");
    assert!(
        saved.ends_with("user default on nopass ~* &* +@all\n"),
        "{saved}"
    );
    ok(&mut h, 2, &["AUTH", "alice", "alice"]);
    h.host.acl_file = Some(b"user bob on >bob +@set +acl ~set*\n".to_vec());
    ok(&mut h, 1, &["ACL", "LOAD"]);
    // alice is gone (and her connection closed); the default user is back to its defaults.
    assert!(h.is_closed(2));
    assert_eq!(
        h.cmd(1, &["ACL", "USERS"]),
        "*2\r\n$3\r\nbob\r\n$7\r\ndefault\r\n"
    );
    h.host.acl_file = Some(b"user bob on +nosuch\nbogus line\n".to_vec());
    let err = h.cmd(1, &["ACL", "LOAD"]);
    assert!(
        err.contains("/data/users.acl:1: Error in applying operation '+nosuch'"),
        "{err}"
    );
    assert!(
        err.contains("/data/users.acl:2 should start with user keyword"),
        "{err}"
    );
    assert_eq!(
        h.cmd(1, &["ACL", "USERS"]),
        "*2\r\n$3\r\nbob\r\n$7\r\ndefault\r\n"
    );
}

#[test]
fn genpass_and_help() {
    let mut h = node();
    let pass = h.cmd(1, &["ACL", "GENPASS"]);
    assert!(pass.starts_with("$64\r\n"), "{pass}");
    assert!(h.cmd(1, &["ACL", "GENPASS", "5"]).starts_with("$2\r\n"));
    assert!(h
        .cmd(1, &["ACL", "GENPASS", "5000"])
        .contains("ACL GENPASS argument must be the number of bits"));
    assert!(h
        .cmd(1, &["ACL", "HELP", "xxx"])
        .contains("wrong number of arguments for 'acl|help' command"));
}

#[test]
fn command_getkeysandflags_and_categories() {
    let mut h = node();
    assert_eq!(
        h.cmd(1, &["COMMAND", "GETKEYSANDFLAGS", "LMOVE", "a", "b", "LEFT", "LEFT"]),
        // Redis 7.0.15's answer: LMOVE deletes from its source and inserts into its destination.
        "*2\r\n*2\r\n$1\r\na\r\n*3\r\n+RW\r\n+access\r\n+delete\r\n*2\r\n$1\r\nb\r\n*2\r\n+RW\r\n+insert\r\n"
    );
    assert_eq!(
        h.cmd(1, &["COMMAND", "GETKEYSANDFLAGS", "SET", "k", "v"]),
        "*1\r\n*2\r\n$1\r\nk\r\n*2\r\n+OW\r\n+update\r\n"
    );
    assert_eq!(
        h.cmd(1, &["COMMAND", "GETKEYSANDFLAGS", "GET", "k"]),
        "*1\r\n*2\r\n$1\r\nk\r\n*2\r\n+RO\r\n+access\r\n"
    );
    assert_eq!(
        h.cmd(1, &["COMMAND", "GETKEYSANDFLAGS", "DEL", "k"]),
        "*1\r\n*2\r\n$1\r\nk\r\n*2\r\n+RM\r\n+delete\r\n"
    );
    assert_eq!(
        h.cmd(1, &["COMMAND", "GETKEYSANDFLAGS", "PING", "x"]),
        "-ERR The command has no key arguments\r\n"
    );
    assert_eq!(
        h.cmd(1, &["COMMAND", "GETKEYSANDFLAGS", "NOSUCH", "x"]),
        "-ERR Invalid command specified\r\n"
    );
    let info = h.cmd(1, &["COMMAND", "INFO", "GET"]);
    assert!(info.contains("+@read\r\n+@string\r\n+@fast\r\n"), "{info}");
    let list = h.cmd(1, &["COMMAND", "LIST", "FILTERBY", "ACLCAT", "scripting"]);
    assert!(
        list.contains("\r\nfunction|list\r\n") && list.contains("\r\neval\r\n"),
        "{list}"
    );
    assert!(!list.contains("\r\nget\r\n"));
}

#[test]
fn shard_channels_are_channels_not_keys() {
    let mut h = node();
    ok(
        &mut h,
        1,
        &[
            "ACL",
            "SETUSER",
            "ps",
            "on",
            "nopass",
            "+@all",
            "resetchannels",
            "&foo:1",
        ],
    );
    ok(&mut h, 1, &["AUTH", "ps", "x"]);
    assert_eq!(h.cmd(1, &["SPUBLISH", "foo:1", "m"]), ":0\r\n");
    assert_eq!(
        h.cmd(1, &["SPUBLISH", "zap", "m"]),
        "-NOPERM this user has no permissions to access one of the channels used as arguments\r\n"
    );
    assert!(h.cmd(1, &["SSUBSCRIBE", "foo:1"]).contains("ssubscribe"));
    h.connect(2);
    assert_eq!(
        h.cmd(2, &["READONLY"]),
        "-ERR This instance has cluster support disabled\r\n"
    );
}

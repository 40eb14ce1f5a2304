//! Connection commands: PING, ECHO, HELLO, AUTH, QUIT, RESET, CLIENT (SELECT is in
//! `databases`).

use bytes::Bytes;
use lattice_resp::Protocol;

use crate::args::{is, parse_i64, NOT_INTEGER};
use crate::client::{ConnId, ReplyMode};
use crate::command::{container, spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};

const CONN: &str = "connection";

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "ping",
        -1,
        &["fast", "stale"],
        (0, 0, 0),
        CONN,
        "1.0.0",
        "Returns the server's liveliness response.",
        ping,
    )
    .with(Flag::AllowedWhileSubscribed),
    spec(
        "echo",
        2,
        &["fast"],
        (0, 0, 0),
        CONN,
        "1.0.0",
        "Returns the given string.",
        echo,
    ),
    spec(
        "hello",
        -1,
        &["no-auth", "fast", "allow-busy"],
        (0, 0, 0),
        CONN,
        "6.0.0",
        "Handshakes with the Redis server.",
        hello,
    ),
    spec(
        "auth",
        -2,
        &["no-auth", "fast", "allow-busy"],
        (0, 0, 0),
        CONN,
        "1.0.0",
        "Authenticates the connection.",
        auth,
    ),
    spec(
        "quit",
        -1,
        &["no-auth", "fast", "allow-busy"],
        (0, 0, 0),
        CONN,
        "1.0.0",
        "Closes the connection.",
        quit,
    )
    .with(Flag::RunsInsideMulti)
    .with(Flag::AllowedWhileSubscribed),
    spec(
        "reset",
        1,
        &["no-auth", "fast", "allow-busy"],
        (0, 0, 0),
        CONN,
        "6.2.0",
        "Resets the connection.",
        reset,
    )
    .with(Flag::RunsInsideMulti)
    .with(Flag::AllowedWhileSubscribed),
    container(
        "client",
        -2,
        CONN,
        "2.4.0",
        "A container for client connection commands.",
        &[
            spec(
                "client|id",
                2,
                &["fast"],
                (0, 0, 0),
                CONN,
                "5.0.0",
                "Returns the unique client ID of the connection.",
                client_id,
            ),
            spec(
                "client|setname",
                3,
                &["fast"],
                (0, 0, 0),
                CONN,
                "2.6.9",
                "Sets the connection name.",
                client_setname,
            ),
            spec(
                "client|getname",
                2,
                &["fast"],
                (0, 0, 0),
                CONN,
                "2.6.9",
                "Returns the name of the connection.",
                client_getname,
            ),
            spec(
                "client|list",
                -2,
                &["admin"],
                (0, 0, 0),
                CONN,
                "2.4.0",
                "Lists open connections.",
                client_list,
            ),
            spec(
                "client|info",
                2,
                &[],
                (0, 0, 0),
                CONN,
                "6.2.0",
                "Returns information about the connection.",
                client_info,
            ),
            spec(
                "client|kill",
                -3,
                &["admin"],
                (0, 0, 0),
                CONN,
                "2.4.0",
                "Terminates open connections.",
                client_kill,
            ),
            spec(
                "client|no-evict",
                3,
                &["admin"],
                (0, 0, 0),
                CONN,
                "7.0.0",
                "Sets the client eviction mode of the connection.",
                client_no_evict,
            ),
            spec(
                "client|unblock",
                -3,
                &["admin", "noscript", "loading", "stale"],
                (0, 0, 0),
                CONN,
                "5.0.0",
                "Unblocks a client blocked by a blocking command from a different connection.",
                client_unblock,
            ),
            spec(
                "client|pause",
                -3,
                &["admin", "noscript", "loading", "stale"],
                (0, 0, 0),
                CONN,
                "2.9.50",
                "Suspends commands processing.",
                crate::cmd::pause::client_pause,
            ),
            spec(
                "client|unpause",
                2,
                &["admin", "noscript", "loading", "stale"],
                (0, 0, 0),
                CONN,
                "6.2.0",
                "Resumes processing commands from paused clients.",
                crate::cmd::pause::client_unpause,
            ),
            spec(
                "client|reply",
                3,
                &[],
                (0, 0, 0),
                CONN,
                "3.2.0",
                "Instructs the server whether to reply to commands.",
                client_reply,
            ),
            spec(
                "client|tracking",
                -3,
                &[],
                (0, 0, 0),
                CONN,
                "6.0.0",
                "Controls server-assisted client-side caching for the connection.",
                crate::cmd::tracking::client_tracking,
            ),
            spec(
                "client|caching",
                3,
                &[],
                (0, 0, 0),
                CONN,
                "6.0.0",
                "Instructs the server whether to track the keys in the next request.",
                crate::cmd::tracking::client_caching,
            ),
            spec(
                "client|getredir",
                2,
                &[],
                (0, 0, 0),
                CONN,
                "6.0.0",
                "Returns the client ID to which the connection's tracking notifications are redirected.",
                crate::cmd::tracking::client_getredir,
            ),
            spec(
                "client|trackinginfo",
                2,
                &[],
                (0, 0, 0),
                CONN,
                "6.2.0",
                "Returns information about server-assisted client-side caching for the connection.",
                crate::cmd::tracking::client_trackinginfo,
            ),
            spec(
                "client|help",
                2,
                &[],
                (0, 0, 0),
                CONN,
                "5.0.0",
                "Returns helpful text about the different subcommands.",
                client_help,
            ),
        ],
    ),
];

fn ping(core: &mut Core, call: &mut Call) {
    let subscribed_resp2 = core
        .clients
        .get(&call.conn)
        .is_some_and(|c| c.proto == Protocol::Resp2 && c.subscriptions() > 0);
    if subscribed_resp2 && call.argc() <= 2 {
        // In RESP2 subscribed mode PING answers in the shape of a message.
        call.out.array_len(2);
        call.out.bulk(b"pong");
        call.out
            .bulk(if call.argc() == 2 { call.arg(1) } else { b"" });
        return;
    }
    match call.argc() {
        1 => call.out.simple(b"PONG"),
        2 => call.out.bulk(call.arg(1)),
        _ => call.error("ERR wrong number of arguments for 'ping' command"),
    }
}

fn echo(_core: &mut Core, call: &mut Call) {
    call.out.bulk(call.arg(1));
}

fn auth(core: &mut Core, call: &mut Call) {
    let (user, pass) = match call.argc() {
        2 => {
            if core.acl.default_user().nopass {
                call.error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
                return;
            }
            (&b"default"[..], call.arg(1))
        }
        3 => (call.arg(1), call.arg(2)),
        _ => return call.syntax_error(),
    };
    match core.authenticate(call.conn, &call.args[0], user, pass) {
        Ok(()) => call.ok(),
        Err(e) => call.error(e),
    }
}

fn hello(core: &mut Core, call: &mut Call) {
    let mut proto = None;
    let mut i = 1;
    if call.argc() >= 2 {
        match parse_i64(call.arg(1)) {
            Some(2) => proto = Some(Protocol::Resp2),
            Some(3) => proto = Some(Protocol::Resp3),
            Some(_) => return call.error("NOPROTO unsupported protocol version"),
            None => return call.error("ERR Protocol version is not an integer or out of range"),
        }
        i = 2;
    }
    while i < call.argc() {
        let more = call.argc() - i - 1;
        if is(call.arg(i), "auth") && more >= 2 {
            if let Err(e) =
                core.authenticate(call.conn, &call.args[0], call.arg(i + 1), call.arg(i + 2))
            {
                return call.error(e);
            }
            i += 3;
        } else if is(call.arg(i), "setname") && more >= 1 {
            if let Err(e) = validate_name(call.arg(i + 1)) {
                return call.error(e);
            }
            // Applied at once, as Redis does: a later bad option does not undo it.
            let n = call.args[i + 1].clone();
            if let Some(c) = core.clients.get_mut(&call.conn) {
                c.name = (!n.is_empty()).then_some(n);
            }
            i += 2;
        } else {
            let opt = String::from_utf8_lossy(call.arg(i)).into_owned();
            return call.error(&format!("ERR Syntax error in HELLO option '{opt}'"));
        }
    }
    let needs_auth = core.acl.auth_required()
        && !core
            .clients
            .get(&call.conn)
            .is_some_and(|c| c.authenticated);
    if needs_auth {
        return call.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    let Some(client) = core.clients.get_mut(&call.conn) else {
        return;
    };
    if let Some(p) = proto {
        client.proto = p;
    }
    let proto_num = if client.proto == Protocol::Resp3 {
        3
    } else {
        2
    };
    let id = client.id.0 as i64;
    // The reply uses the protocol just negotiated.
    call.out.set_protocol(client.proto);
    call.out.map_len(7);
    call.out.bulk(b"server");
    call.out.bulk(b"redis");
    call.out.bulk(b"version");
    call.out.bulk(crate::cmd::server::REDIS_VERSION.as_bytes());
    call.out.bulk(b"proto");
    call.out.integer(proto_num);
    call.out.bulk(b"id");
    call.out.integer(id);
    call.out.bulk(b"mode");
    call.out.bulk(b"standalone");
    call.out.bulk(b"role");
    call.out.bulk(b"master");
    call.out.bulk(b"modules");
    call.out.array_len(0);
}

fn quit(core: &mut Core, call: &mut Call) {
    call.ok();
    core.close_client(call.conn);
}

fn reset(core: &mut Core, call: &mut Call) {
    core.unwatch_all(call.conn);
    crate::cmd::pubsub::unsubscribe_all(core, call.conn);
    core.monitors.remove(&call.conn);
    core.tracking_disable(call.conn);
    if let Some(c) = core.clients.get_mut(&call.conn) {
        c.multi = None;
    }
    // As Redis: back to the default user, logged in if it needs no password.
    let authenticated = !core.acl.auth_required();
    if let Some(c) = core.clients.get_mut(&call.conn) {
        c.proto = Protocol::Resp2;
        c.name = None;
        // Like Redis, RESET clears OFF and a pending SKIP but not the skip of the command
        // running now (RESET itself), so its +RESET stays silent after CLIENT REPLY SKIP.
        if c.reply_mode != ReplyMode::SkipThis {
            c.reply_mode = ReplyMode::On;
        }
        c.no_evict = false;
        c.authenticated = authenticated;
        c.user = Some(Bytes::from_static(b"default"));
    }
    call.out.set_protocol(Protocol::Resp2);
    call.out.simple(b"RESET");
}

fn client_id(_core: &mut Core, call: &mut Call) {
    call.out.integer(call.conn.0 as i64);
}

/// Redis allows printable ASCII without spaces in client names.
fn validate_name(name: &[u8]) -> Result<(), &'static str> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        Err("ERR Client names cannot contain spaces, newlines or special characters.")
    } else {
        Ok(())
    }
}

fn client_setname(core: &mut Core, call: &mut Call) {
    if let Err(e) = validate_name(call.arg(2)) {
        return call.error(e);
    }
    let name = call.args[2].clone();
    if let Some(c) = core.clients.get_mut(&call.conn) {
        // An empty name removes the name.
        c.name = (!name.is_empty()).then(|| Bytes::copy_from_slice(&name));
    }
    call.ok();
}

fn client_getname(core: &mut Core, call: &mut Call) {
    match core.clients.get(&call.conn).and_then(|c| c.name.clone()) {
        Some(n) => call.out.bulk(&n),
        None => call.out.null(),
    }
}

fn client_list(core: &mut Core, call: &mut Call) {
    let now_ms = call.now_ms;
    let mut ids: Option<Vec<u64>> = None;
    let mut i = 2;
    while i < call.argc() {
        if is(call.arg(i), "type") && i + 1 < call.argc() {
            let t = call.arg(i + 1);
            if !["normal", "master", "replica", "slave", "pubsub"]
                .iter()
                .any(|k| is(t, k))
            {
                let t = String::from_utf8_lossy(t).into_owned();
                return call.error(&format!("ERR Unknown client type '{t}'"));
            }
            // Every client is a normal one until replication and pub/sub add kinds.
            if !is(t, "normal") {
                ids = Some(Vec::new());
            }
            i += 2;
        } else if is(call.arg(i), "id") && i + 1 < call.argc() {
            let mut list = Vec::new();
            for a in &call.args[i + 1..] {
                match parse_i64(a) {
                    Some(n) if n > 0 => list.push(n as u64),
                    _ => return call.error("ERR Invalid client ID"),
                }
            }
            ids = Some(list);
            i = call.argc();
        } else {
            return call.syntax_error();
        }
    }
    let mut text = String::new();
    for c in core.clients.values() {
        // A connection being closed (CLIENT KILL, a deleted user) is gone for clients.
        if c.closing || ids.as_ref().is_some_and(|l| !l.contains(&c.id.0)) {
            continue;
        }
        let argv: &[Bytes] = if c.id == call.conn { call.args } else { &[] };
        text.push_str(&c.info_line(now_ms, argv));
        text.push('\n');
    }
    call.out.verbatim(b"txt", text.as_bytes());
}

fn client_info(core: &mut Core, call: &mut Call) {
    let mut line = core
        .clients
        .get(&call.conn)
        .map(|c| c.info_line(call.now_ms, call.args))
        .unwrap_or_default();
    line.push('\n');
    call.out.verbatim(b"txt", line.as_bytes());
}

fn client_kill(core: &mut Core, call: &mut Call) {
    // Old form: CLIENT KILL addr:port -> +OK or an error.
    if call.argc() == 3 {
        let addr = call.arg(2);
        let target = core
            .clients
            .values()
            .find(|c| c.peer_addr.as_bytes() == addr)
            .map(|c| c.id);
        return match target {
            Some(id) => {
                core.close_client(id);
                call.ok();
            }
            None => call.error("ERR No such client"),
        };
    }
    // New form: filters, all of which must match; replies with the number killed.
    let mut id: Option<u64> = None;
    let mut addr: Option<Vec<u8>> = None;
    let mut laddr: Option<Vec<u8>> = None;
    let mut skipme = true;
    let mut maxage: Option<u64> = None;
    let mut type_normal = true;
    let mut user: Option<Bytes> = None;
    let mut i = 2;
    while i + 1 < call.argc() + 1 && i < call.argc() {
        if i + 1 >= call.argc() {
            return call.syntax_error();
        }
        let (opt, val) = (call.arg(i), call.arg(i + 1));
        if is(opt, "id") {
            match parse_i64(val) {
                Some(n) if n > 0 => id = Some(n as u64),
                _ => return call.error("ERR client-id should be greater than 0"),
            }
        } else if is(opt, "addr") {
            addr = Some(val.to_vec());
        } else if is(opt, "laddr") {
            laddr = Some(val.to_vec());
        } else if is(opt, "skipme") {
            if is(val, "yes") {
                skipme = true;
            } else if is(val, "no") {
                skipme = false;
            } else {
                return call.syntax_error();
            }
        } else if is(opt, "maxage") {
            match parse_i64(val) {
                Some(n) if n >= 0 => maxage = Some(n as u64),
                _ => return call.syntax_error(),
            }
        } else if is(opt, "type") {
            if !["normal", "master", "replica", "slave", "pubsub"]
                .iter()
                .any(|k| is(val, k))
            {
                let t = String::from_utf8_lossy(val).into_owned();
                return call.error(&format!("ERR Unknown client type '{t}'"));
            }
            type_normal = is(val, "normal");
        } else if is(opt, "user") {
            if !core.acl.users.contains_key(val) {
                let u = String::from_utf8_lossy(val).into_owned();
                return call.error(&format!("ERR No such user '{u}'"));
            }
            user = Some(Bytes::copy_from_slice(val));
        } else {
            return call.syntax_error();
        }
        i += 2;
    }
    let now_ms = call.now_ms;
    let victims: Vec<ConnId> = core
        .clients
        .values()
        .filter(|c| type_normal && !c.closing)
        .filter(|c| id.is_none_or(|id| c.id.0 == id))
        .filter(|c| {
            addr.as_ref()
                .is_none_or(|a| c.peer_addr.as_bytes() == &a[..])
        })
        .filter(|c| {
            laddr
                .as_ref()
                .is_none_or(|a| c.local_addr.as_bytes() == &a[..])
        })
        .filter(|c| maxage.is_none_or(|m| now_ms.saturating_sub(c.created_ms) / 1000 >= m))
        .filter(|c| user.is_none() || c.user == user)
        .filter(|c| !(skipme && c.id == call.conn))
        .map(|c| c.id)
        .collect();
    for v in &victims {
        core.close_client(*v);
    }
    call.out.integer(victims.len() as i64);
}

fn client_no_evict(core: &mut Core, call: &mut Call) {
    let on = if is(call.arg(2), "on") {
        true
    } else if is(call.arg(2), "off") {
        false
    } else {
        return call.syntax_error();
    };
    if let Some(c) = core.clients.get_mut(&call.conn) {
        c.no_evict = on;
    }
    call.ok();
}

fn client_reply(core: &mut Core, call: &mut Call) {
    let mode = if is(call.arg(2), "on") {
        ReplyMode::On
    } else if is(call.arg(2), "off") {
        ReplyMode::Off
    } else if is(call.arg(2), "skip") {
        ReplyMode::SkipNext
    } else {
        return call.syntax_error();
    };
    if let Some(c) = core.clients.get_mut(&call.conn) {
        // SKIP does nothing while replies are OFF (Redis stays off).
        if !(mode == ReplyMode::SkipNext && c.reply_mode == ReplyMode::Off) {
            c.reply_mode = mode;
        }
    }
    // Only ON is acknowledged; OFF and SKIP are silent by definition.
    if mode == ReplyMode::On {
        call.ok();
    }
}

fn client_help(_core: &mut Core, call: &mut Call) {
    const LINES: &[&str] = &[
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ID",
        "    Return the ID of the current connection.",
        "INFO",
        "    Return information about the current client connection.",
        "GETNAME",
        "    Return the name of the current connection.",
        "KILL <ip:port>",
        "    Kill connection made from <ip:port>.",
        "KILL <option> <value> [<option> <value> [...]]",
        "    Kill connections. Options are: ID, ADDR, LADDR, TYPE, USER, SKIPME, MAXAGE.",
        "LIST [options ...]",
        "    Return information about client connections. Options: TYPE, ID.",
        "NO-EVICT (ON|OFF)",
        "    Protect the current client connection from eviction in the case of OOM.",
        "REPLY (ON|OFF|SKIP)",
        "    Control the replies sent to the current connection.",
        "SETNAME <name>",
        "    Assign the name <name> to the current connection.",
        "HELP",
        "    Print this help.",
    ];
    call.out.array_len(LINES.len());
    for l in LINES {
        call.out.simple(l.as_bytes());
    }
}

fn client_unblock(core: &mut Core, call: &mut Call) {
    let Some(id) = parse_i64(call.arg(2)) else {
        return call.error(NOT_INTEGER);
    };
    let as_error = match call.args.get(3) {
        None => false,
        Some(r) if is(r, "timeout") => false,
        Some(r) if is(r, "error") => true,
        Some(_) => return call.error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR"),
    };
    if call.argc() > 4 {
        return call.syntax_error();
    }
    let target = ConnId(id as u64);
    if core.pausing.held.contains(&target) {
        // Held by CLIENT PAUSE, not blocked by its command: only the pause's end frees it.
        return call.out.integer(0);
    }
    match core.unpark(target) {
        Some(blocked) => {
            if as_error {
                core.write_to(target, |w| {
                    w.error(b"UNBLOCKED client unblocked via CLIENT UNBLOCK")
                });
            } else {
                core.write_to(target, |w| blocked.on_timeout.write(w));
            }
            core.released.push(target);
            call.out.integer(1);
        }
        None => call.out.integer(0),
    }
}

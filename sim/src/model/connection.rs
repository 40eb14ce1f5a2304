//! Connection commands: PING, ECHO, HELLO, AUTH, QUIT, RESET, SELECT, CLIENT.

use bytes::Bytes;

use super::{
    bulk, int, is, null, ok, parse_i64, simple, spec, Cx, Model, Proto, Spec, NOT_INTEGER, SYNTAX,
};
use crate::check::Check;

pub const SPECS: &[Spec] = &[
    spec("ping", -1, ping),
    spec("echo", 2, echo),
    spec("hello", -1, hello),
    spec("auth", -2, auth),
    spec("quit", -1, quit),
    spec("reset", 1, reset),
    spec("select", 2, select),
    spec("client|id", 2, client_id),
    spec("client|setname", 3, client_setname),
    spec("client|getname", 2, client_getname),
    spec("client|list", -2, client_list),
    spec("client|info", 2, client_info),
    spec("client|kill", -3, client_kill),
    spec("client|no-evict", 3, client_no_evict),
    spec("client|reply", 3, client_reply),
    spec("client|help", 2, super::keys::help),
];

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
const BAD_NAME: &str = "ERR Client names cannot contain spaces, newlines or special characters.";

fn ping(m: &mut Model, cx: &mut Cx) -> Check {
    if cx.argc() > 2 {
        return super::arity_error("ping");
    }
    let st = &m.conns[&cx.conn];
    if cx.proto == Proto::Resp2 && st.subscribed() {
        // RESP2 subscribed mode: a pong "message" carrying the argument (empty by default).
        let arg = if cx.argc() == 2 { cx.arg(1) } else { b"" };
        return Check::Exact(lattice_resp::Frame::Array(vec![
            super::bulk_frame(b"pong"),
            super::bulk_frame(arg),
        ]));
    }
    match cx.argc() {
        1 => simple("PONG"),
        _ => bulk(cx.arg(1)),
    }
}

fn echo(_m: &mut Model, cx: &mut Cx) -> Check {
    bulk(cx.arg(1))
}

fn valid_name(name: &[u8]) -> bool {
    name.iter().all(|b| (b'!'..=b'~').contains(b))
}

/// No `requirepass`: the default user accepts any password, other users do not exist.
fn password_ok(user: &[u8]) -> bool {
    user == b"default"
}

fn hello(m: &mut Model, cx: &mut Cx) -> Check {
    let mut proto = None;
    let mut j = 1;
    if cx.argc() >= 2 {
        match parse_i64(cx.arg(1)) {
            None => return Check::err("ERR Protocol version is not an integer or out of range"),
            Some(2) => proto = Some(Proto::Resp2),
            Some(3) => proto = Some(Proto::Resp3),
            Some(_) => return Check::err("NOPROTO unsupported protocol version"),
        }
        j = 2;
    }
    let mut auth_user: Option<Bytes> = None;
    while j < cx.argc() {
        let more = cx.argc() - 1 - j;
        if is(cx.arg(j), "auth") && more >= 2 {
            auth_user = Some(cx.args[j + 1].clone());
            j += 3;
        } else if is(cx.arg(j), "setname") && more >= 1 {
            // Redis 7.0 sets the name as it parses (before later options are checked).
            let name = cx.args[j + 1].clone();
            if !valid_name(&name) {
                return Check::err(BAD_NAME);
            }
            let st = m.conns.get_mut(&cx.conn).expect("connected");
            st.name = (!name.is_empty()).then_some(name);
            j += 2;
        } else {
            return Check::err(&format!(
                "ERR Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(cx.arg(j))
            ));
        }
    }
    if let Some(u) = auth_user {
        if !password_ok(&u) {
            return Check::err(WRONGPASS);
        }
    }
    let st = m.conns.get_mut(&cx.conn).expect("connected");
    if let Some(p) = proto {
        st.proto = p;
    }
    Check::Hello {
        proto: if st.proto == Proto::Resp3 { 3 } else { 2 },
        id: cx.conn as i64,
        resp3: st.proto == Proto::Resp3,
    }
}

fn auth(_m: &mut Model, cx: &mut Cx) -> Check {
    match cx.argc() {
        2 => Check::err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
        3 if password_ok(cx.arg(1)) => ok(),
        3 => Check::err(WRONGPASS),
        _ => Check::err(SYNTAX),
    }
}

fn quit(_m: &mut Model, cx: &mut Cx) -> Check {
    cx.close_self = true;
    ok()
}

fn reset(m: &mut Model, cx: &mut Cx) -> Check {
    let st = m.conns.get_mut(&cx.conn).expect("connected");
    st.proto = Proto::Resp2;
    st.name = None;
    st.reply_off = false;
    st.skip_next = false;
    // Leaves MULTI, forgets watches and subscriptions, without confirmations.
    st.multi = None;
    st.watched.clear();
    st.dirty = false;
    st.channels.clear();
    st.patterns.clear();
    simple("RESET")
}

fn select(_m: &mut Model, cx: &mut Cx) -> Check {
    match parse_i64(cx.arg(1)) {
        // Redis reads the index as a C int, with this message for a wider number.
        Some(n) if i32::try_from(n).is_err() => {
            Check::err("ERR value is out of range, value must between -2147483648 and 2147483647")
        }
        None => Check::err(NOT_INTEGER),
        Some(0) => ok(),
        // One database per node (docs/ARCHITECTURE.md).
        Some(_) => Check::err("ERR DB index is out of range"),
    }
}

fn client_id(_m: &mut Model, cx: &mut Cx) -> Check {
    int(cx.conn as i64)
}

fn client_setname(m: &mut Model, cx: &mut Cx) -> Check {
    let name = cx.args[2].clone();
    if !valid_name(&name) {
        return Check::err(BAD_NAME);
    }
    let st = m.conns.get_mut(&cx.conn).expect("connected");
    st.name = (!name.is_empty()).then_some(name);
    ok()
}

fn client_getname(m: &mut Model, cx: &mut Cx) -> Check {
    match &m.conns[&cx.conn].name {
        Some(n) => bulk(n),
        None => null(),
    }
}

fn client_list(m: &mut Model, cx: &mut Cx) -> Check {
    // The workload sends CLIENT LIST without filters.
    assert_eq!(cx.argc(), 2, "model limitation: CLIENT LIST filters");
    Check::ClientList {
        // A killed connection is closing: the node lists it no more.
        ids: m
            .conns
            .iter()
            .filter(|(_, c)| !c.killed)
            .map(|(id, _)| *id)
            .collect(),
        verbatim: cx.proto == Proto::Resp3,
    }
}

fn client_info(m: &mut Model, cx: &mut Cx) -> Check {
    let st = &m.conns[&cx.conn];
    let name = st
        .name
        .as_ref()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .unwrap_or_default();
    let resp = if st.proto == Proto::Resp3 { 3 } else { 2 };
    Check::Text {
        needles: vec![
            format!("id={} addr={} ", cx.conn, st.addr).into_bytes(),
            format!(" name={name} ").into_bytes(),
            // Inside EXEC the connection's command is EXEC.
            if cx.in_exec {
                b" cmd=exec ".to_vec()
            } else {
                b" cmd=client|info ".to_vec()
            },
            format!(" resp={resp}").into_bytes(),
        ],
        verbatim: st.proto == Proto::Resp3,
    }
}

fn client_kill(m: &mut Model, cx: &mut Cx) -> Check {
    if cx.argc() == 3 {
        // Old form: CLIENT KILL addr:port.
        let addr = cx.arg(2);
        let target = m
            .conns
            .iter()
            .find(|(_, c)| c.addr.as_bytes() == addr)
            .map(|(id, _)| *id);
        return match target {
            Some(id) => {
                kill(cx, id);
                ok()
            }
            None => Check::err("ERR No such client"),
        };
    }
    let mut id: Option<u64> = None;
    let mut addr: Option<Vec<u8>> = None;
    let mut skipme = true;
    let mut i = 2;
    while i < cx.argc() {
        if i + 1 >= cx.argc() {
            return Check::err(SYNTAX);
        }
        let (opt, val) = (cx.arg(i), cx.arg(i + 1));
        if is(opt, "id") {
            match parse_i64(val) {
                Some(n) if n > 0 => id = Some(n as u64),
                _ => return Check::err("ERR client-id should be greater than 0"),
            }
        } else if is(opt, "addr") {
            addr = Some(val.to_vec());
        } else if is(opt, "skipme") {
            if is(val, "yes") {
                skipme = true;
            } else if is(val, "no") {
                skipme = false;
            } else {
                return Check::err(SYNTAX);
            }
        } else {
            panic!("model limitation: CLIENT KILL {:?}", &cx.args[2..]);
        }
        i += 2;
    }
    let victims: Vec<u64> = m
        .conns
        .iter()
        .filter(|(cid, _)| id.is_none_or(|i| **cid == i))
        .filter(|(_, c)| addr.as_ref().is_none_or(|a| c.addr.as_bytes() == &a[..]))
        .filter(|(cid, _)| !(skipme && **cid == cx.conn))
        .map(|(cid, _)| *cid)
        .collect();
    for v in &victims {
        kill(cx, *v);
    }
    int(victims.len() as i64)
}

fn kill(cx: &mut Cx, id: u64) {
    if id == cx.conn {
        cx.close_self = true;
    } else {
        cx.kill.push(id);
    }
}

fn client_no_evict(_m: &mut Model, cx: &mut Cx) -> Check {
    if is(cx.arg(2), "on") || is(cx.arg(2), "off") {
        ok()
    } else {
        Check::err(SYNTAX)
    }
}

fn client_reply(m: &mut Model, cx: &mut Cx) -> Check {
    let st = m.conns.get_mut(&cx.conn).expect("connected");
    if is(cx.arg(2), "on") {
        st.reply_off = false;
        cx.clear_skip = true;
        ok()
    } else if is(cx.arg(2), "off") {
        st.reply_off = true;
        Check::NoReply
    } else if is(cx.arg(2), "skip") {
        if !st.reply_off {
            st.skip_next = true;
        }
        Check::NoReply
    } else {
        Check::err(SYNTAX)
    }
}

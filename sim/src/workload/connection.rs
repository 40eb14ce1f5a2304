//! The connection family: PING, ECHO, HELLO, AUTH, SELECT, CLIENT, RESET, QUIT, unknown
//! commands, wrong arity and (rarely) bytes that are not RESP at all.

use bytes::Bytes;

use super::{Cmd, Gen, Tag};

pub fn gen(g: &mut Gen) -> Cmd {
    match g.rng.weighted(&[
        6,  // ping
        3,  // echo
        4,  // hello
        2,  // auth
        2,  // select
        10, // client
        2,  // reset
        1,  // quit
        2,  // unknown / arity
        1,  // garbage
    ]) {
        0 => {
            if g.pct(50) {
                Cmd::new("PING")
            } else if g.pct(95) {
                Cmd::new("PING").a(g.pick(&["hi", "", "x y"]))
            } else {
                Cmd::new("PING").a("a").a("b")
            }
        }
        1 => Cmd::new("ECHO").a(g.pick(&["hello", "", "\r\n"])),
        // HELLO inside MULTI would switch the protocol in the middle of EXEC's reply.
        2 if g.in_multi => Cmd::new("PING"),
        2 => match g.range(0, 7) {
            0 => Cmd::new("HELLO"),
            1 | 2 => Cmd::new("HELLO").a("3"),
            3 => Cmd::new("HELLO").a("2"),
            4 => Cmd::new("HELLO")
                .a(g.pick(&["2", "3"]))
                .a("SETNAME")
                .a(g.pick(&["app", "worker-1"])),
            5 => Cmd::new("HELLO")
                .a(g.pick(&["2", "3"]))
                .a("AUTH")
                .a("default")
                .a("pw"),
            6 => Cmd::new("HELLO").a(g.pick(&["4", "1", "x"])),
            _ => Cmd::new("HELLO").a("3").a("FOO"),
        },
        3 => match g.range(0, 3) {
            0 => Cmd::new("AUTH").a("pw"),
            1 => Cmd::new("AUTH").a("default").a("pw"),
            2 => Cmd::new("AUTH").a("nobody").a("pw"),
            _ => Cmd::new("AUTH").a("a").a("b").a("c"),
        },
        4 => Cmd::new("SELECT").a(g.pick(&["0", "0", "1", "x", "-1"])),
        5 => client(g),
        6 => Cmd::new("RESET").tag(Tag::Reset),
        7 if g.disruptive => Cmd::new("QUIT").tag(Tag::Quit),
        7 => Cmd::new("PING"),
        8 => match g.range(0, 3) {
            0 => Cmd::new("NOSUCHCOMMAND-SIM").a("a").a("b"),
            1 => Cmd::new("GET"),
            2 => Cmd::new("SET").a("k1"),
            _ => Cmd::new("CLIENT"),
        },
        _ if g.disruptive => {
            let junk = g.pick(&[
                "*1\r\n$x\r\n",
                "*abc\r\n",
                "*1\r\n$-5\r\n",
                "\"unbalanced\r\n",
            ]);
            Cmd {
                args: vec![Bytes::from_static(junk.as_bytes())],
                tag: Tag::Garbage,
            }
        }
        _ => Cmd::new("PING"),
    }
}

fn client(g: &mut Gen) -> Cmd {
    match g.rng.weighted(&[4, 3, 3, 2, 2, 1, 2, 3, 1, 1]) {
        0 => Cmd::new("CLIENT").a("ID"),
        1 => Cmd::new("CLIENT")
            .a("SETNAME")
            .a(g.pick(&["app", "worker-1", "", "bad name"])),
        2 => Cmd::new("CLIENT").a("GETNAME"),
        3 => Cmd::new("CLIENT").a("INFO"),
        4 => Cmd::new("CLIENT").a("LIST"),
        5 if g.disruptive => {
            // Kill this or a nearby connection (ids are handed out in order).
            let id = (g.conn_id as i64 + g.range(-3, 1)).max(0);
            let skipme = g.pick(&["yes", "no"]);
            match g.range(0, 3) {
                0 => Cmd::new("CLIENT")
                    .a("KILL")
                    .a("ID")
                    .a(id)
                    .a("SKIPME")
                    .a(skipme),
                1 => Cmd::new("CLIENT").a("KILL").a("ID").a(id),
                2 => Cmd::new("CLIENT")
                    .a("KILL")
                    .a("ADDR")
                    .a(g.conn_addr.to_string())
                    .a("SKIPME")
                    .a(skipme),
                _ => Cmd::new("CLIENT").a("KILL").a(g.conn_addr.to_string()),
            }
        }
        5 => Cmd::new("CLIENT").a("ID"),
        6 => Cmd::new("CLIENT")
            .a("NO-EVICT")
            .a(g.pick(&["on", "off", "maybe"])),
        // Queued, CLIENT REPLY would act at EXEC; a RESP2 subscriber is refused it, and the
        // client would wrongly expect its replies to stop.
        7 if g.in_multi || g.subscribed => Cmd::new("CLIENT").a("ID"),
        7 => {
            if g.pct(50) {
                Cmd::new("CLIENT").a("REPLY").a("SKIP").tag(Tag::ReplySkip)
            } else if g.pct(70) {
                Cmd::new("CLIENT").a("REPLY").a("OFF").tag(Tag::ReplyOff)
            } else {
                Cmd::new("CLIENT").a("REPLY").a("ON").tag(Tag::ReplyOn)
            }
        }
        8 => Cmd::new("CLIENT").a("HELP"),
        _ => Cmd::new("CLIENT").a("NOSUCH"),
    }
}

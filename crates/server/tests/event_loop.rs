//! The event loops: replies larger than a socket buffer, a client that stops reading, and
//! outputs that cross from one loop to another (pub/sub, CLIENT KILL).

mod common;

use common::{is_closed, read_bulk, read_n, roundtrip, Server};
use std::io::Write;
use std::time::Duration;

/// A `$<len>\r\n<bytes>\r\n` reply for `value`.
fn bulk(value: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", value.len()).into_bytes();
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    out
}

fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(&bulk(a));
    }
    out
}

/// 48 MiB of replies to a client that does not read for a while: the loop must park that
/// connection's output (its send buffer is full) and keep serving the other client on the same
/// loop, then deliver every byte, in order, once the first client reads.
#[test]
fn a_client_that_stops_reading_gets_every_byte_and_does_not_stall_others() {
    let server = Server::start_with(&["--threads", "1"]);
    let value: Vec<u8> = (0..4 << 20).map(|i: u32| b'a' + (i % 26) as u8).collect();
    let mut writer = server.raw();
    assert_eq!(
        roundtrip(&mut writer, &command(&[b"SET", b"big", &value]), 5),
        b"+OK\r\n"
    );

    let mut slow = server.raw();
    let gets = 12;
    let mut request = Vec::new();
    for _ in 0..gets {
        request.extend_from_slice(&command(&[b"GET", b"big"]));
    }
    slow.write_all(&request).unwrap();
    // While `slow` reads nothing, its replies fill the socket buffers and the loop must park
    // them; another client on the same (only) loop is still answered.
    std::thread::sleep(Duration::from_millis(300));
    let mut other = server.raw();
    for i in 0..100 {
        let ping = command(&[b"PING", i.to_string().as_bytes()]);
        let expected = bulk(i.to_string().as_bytes());
        assert_eq!(roundtrip(&mut other, &ping, expected.len()), expected);
    }

    let one = bulk(&value);
    let got = read_n(&mut slow, one.len() * gets);
    assert_eq!(got.len(), one.len() * gets, "replies cut short");
    for (i, chunk) in got.chunks(one.len()).enumerate() {
        assert!(chunk == one.as_slice(), "reply {i} differs");
    }
    // And the connection still works afterwards.
    assert_eq!(roundtrip(&mut slow, b"PING\r\n", 7), b"+PONG\r\n");
}

/// With two loops, connections are dealt out to both in turn, so a publisher and its
/// subscribers sit on different loops: messages and a kill travel through the loops' inboxes.
#[test]
fn pubsub_and_client_kill_cross_event_loops() {
    let server = Server::start_with(&["--threads", "2"]);
    let subscribe = command(&[b"SUBSCRIBE", b"news"]);
    let confirm = b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n";
    let mut subscribers: Vec<_> = (0..4)
        .map(|_| {
            let mut s = server.raw();
            assert_eq!(roundtrip(&mut s, &subscribe, confirm.len()), confirm);
            s
        })
        .collect();
    let mut publisher = server.raw();
    for round in 0..50 {
        let payload = format!("m{round}");
        assert_eq!(
            roundtrip(
                &mut publisher,
                &command(&[b"PUBLISH", b"news", payload.as_bytes()]),
                4
            ),
            b":4\r\n"
        );
        let mut message = b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n".to_vec();
        message.extend_from_slice(&bulk(payload.as_bytes()));
        for s in subscribers.iter_mut() {
            assert_eq!(read_n(s, message.len()), message);
        }
    }

    // Kill the two oldest subscribers from the publisher's connection. Connections are dealt
    // to the loops in turn, so consecutive ids sit on different loops: one of the two is on a
    // loop other than the publisher's.
    publisher.write_all(b"CLIENT LIST\r\n").unwrap();
    let list = read_bulk(&mut publisher);
    let mut ids: Vec<u64> = list
        .lines()
        .filter(|l| l.contains("cmd=subscribe"))
        .filter_map(|l| l.split_whitespace().next()?.strip_prefix("id="))
        .filter_map(|id| id.parse().ok())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids.len(), 4, "subscribers in CLIENT LIST:\n{list}");
    for id in &ids[..2] {
        let kill = command(&[b"CLIENT", b"KILL", b"ID", id.to_string().as_bytes()]);
        assert_eq!(roundtrip(&mut publisher, &kill, 4), b":1\r\n");
    }
    // Subscribers were connected in id order.
    for mut killed in subscribers.drain(..2) {
        killed
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert!(is_closed(&mut killed), "a killed subscriber is still open");
    }
    assert_eq!(
        roundtrip(&mut publisher, &command(&[b"PUBLISH", b"news", b"x"]), 4),
        b":2\r\n"
    );
}

/// A client killed while its replies are stuck in a full send buffer is closed at once, not
/// when (if ever) it reads them.
#[test]
fn a_killed_client_that_is_not_reading_is_closed_at_once() {
    let server = Server::start_with(&["--threads", "1"]);
    let value = vec![b'v'; 4 << 20];
    let mut admin = server.raw();
    assert_eq!(
        roundtrip(&mut admin, &command(&[b"SET", b"big", &value]), 5),
        b"+OK\r\n"
    );
    let mut stuck = server.raw();
    stuck.write_all(b"CLIENT ID\r\n").unwrap();
    let id_line = read_n(&mut stuck, 3);
    let mut id_text = String::from_utf8(id_line[1..].to_vec()).unwrap();
    while !id_text.ends_with("\r\n") {
        id_text.push(read_n(&mut stuck, 1)[0] as char);
    }
    let id: u64 = id_text.trim().parse().unwrap();
    let mut request = Vec::new();
    for _ in 0..8 {
        request.extend_from_slice(&command(&[b"GET", b"big"]));
    }
    stuck.write_all(&request).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // The node forgets a killed client at once; whether the server closed its socket shows in
    // the process's open sockets.
    let pid = server.child.id();
    let before = open_sockets(pid);
    let kill = command(&[b"CLIENT", b"KILL", b"ID", id.to_string().as_bytes()]);
    assert_eq!(roundtrip(&mut admin, &kill, 4), b":1\r\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while open_sockets(pid) >= before {
        assert!(
            std::time::Instant::now() < deadline,
            "the killed client's socket is still open ({before} sockets)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stuck);
}

/// Sockets the process `pid` holds open.
fn open_sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// A subscriber that stops reading is disconnected once the messages held for it pass the
/// limit (32 MiB, Redis's pub/sub default), instead of the server holding every message.
#[test]
fn a_subscriber_that_stops_reading_is_dropped_at_the_output_limit() {
    let server = Server::start_with(&["--threads", "1"]);
    let mut subscriber = server.raw();
    let confirm = b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n";
    assert_eq!(
        roundtrip(
            &mut subscriber,
            &command(&[b"SUBSCRIBE", b"news"]),
            confirm.len()
        ),
        confirm
    );
    let mut publisher = server.raw();
    let payload = vec![b'p'; 1024];
    let publish = command(&[b"PUBLISH", b"news", &payload]);
    let batch: Vec<u8> = publish.repeat(1000);
    // 1 MiB per batch; the subscriber must be gone well before 128 MiB.
    for sent_mib in 1..=128 {
        let replies = roundtrip(&mut publisher, &batch, 4 * 1000);
        assert_eq!(replies.len(), 4000, "publisher cut short");
        if replies.ends_with(b":0\r\n") {
            assert!(
                sent_mib > 32,
                "dropped after only {sent_mib} MiB, below the limit"
            );
            drop(subscriber);
            // INFO counts the close, as Redis 7.0 does.
            publisher.write_all(&command(&[b"INFO", b"stats"])).unwrap();
            let info = read_bulk(&mut publisher);
            assert!(
                info.contains("client_output_buffer_limit_disconnections:1\r\n"),
                "{info}"
            );
            return;
        }
    }
    panic!("the subscriber was still subscribed after 128 MiB of unread messages");
}

/// Sixteen clients busy at once make the loop nap between turns instead of blocking (nap.rs):
/// every request must still be answered, in order, with nothing lost across the naps. A loop
/// that dropped the readiness seen by its check after a nap would leave clients hanging here.
#[test]
fn many_busy_clients_are_all_answered_across_naps() {
    let server = Server::start_with(&["--threads", "1", "--nap-us", "1000"]);
    let clients = 16;
    let increments = 1_500;
    let workers: Vec<_> = (0..clients)
        .map(|c| {
            let mut s = server.raw();
            std::thread::spawn(move || {
                let key = format!("counter:{c}");
                for n in 1..=increments {
                    let expected = format!(":{n}\r\n").into_bytes();
                    let got =
                        roundtrip(&mut s, &command(&[b"INCR", key.as_bytes()]), expected.len());
                    assert_eq!(got, expected, "client {c}, increment {n}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a client failed");
    }
    let mut check = server.raw();
    for c in 0..clients {
        let key = format!("counter:{c}");
        let expected = bulk(increments.to_string().as_bytes());
        let got = roundtrip(
            &mut check,
            &command(&[b"GET", key.as_bytes()]),
            expected.len(),
        );
        assert_eq!(got, expected);
    }
}

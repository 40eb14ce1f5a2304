//! The server speaks RESP correctly and survives abuse: pipelines, HELLO, malformed input.

mod common;

use common::{is_closed, read_bulk, read_n, roundtrip, Server};
use std::io::Write;

#[test]
fn pipeline_of_ten_thousand_pings_is_answered_in_order() {
    let server = Server::start();
    let mut s = server.raw();
    let mut req = Vec::new();
    for i in 0..10_000 {
        req.extend_from_slice(
            format!("*2\r\n$4\r\nPING\r\n${}\r\n{}\r\n", i.to_string().len(), i).as_bytes(),
        );
    }
    let mut expected = Vec::new();
    for i in 0..10_000 {
        expected.extend_from_slice(format!("${}\r\n{}\r\n", i.to_string().len(), i).as_bytes());
    }
    let got = roundtrip(&mut s, &req, expected.len());
    assert_eq!(got, expected);
}

#[test]
fn hello_3_answers_a_map_and_switches_protocol() {
    let server = Server::start();
    let mut s = server.raw();
    let reply = roundtrip(&mut s, b"HELLO 3\r\n", 1);
    assert_eq!(
        reply[0], b'%',
        "HELLO 3 must reply with a RESP3 map: {reply:?}"
    );
    assert!(
        reply.starts_with(b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"),
        "{reply:?}"
    );
    let mut s2 = server.raw();
    // In RESP3 a missing key is `_`, not `$-1`.
    let got = roundtrip(&mut s2, b"HELLO 3\r\nGET nokey\r\n", 1);
    let mut all = got;
    while !all.ends_with(b"_\r\n") {
        let more = read_n(&mut s2, 1);
        assert!(!more.is_empty(), "connection ended early: {all:?}");
        all.extend(more);
    }
    let unsupported = roundtrip(&mut server.raw(), b"HELLO 4\r\n", 10);
    assert!(unsupported.starts_with(b"-NOPROTO"), "{unsupported:?}");
}

fn assert_protocol_error_and_close(server: &Server, bytes: &[u8], message: &str) {
    let mut s = server.raw();
    s.write_all(bytes).unwrap();
    let reply = read_n(&mut s, 1);
    let text = String::from_utf8_lossy(&reply).into_owned();
    let mut all = text.clone();
    if !all.ends_with("\r\n") {
        all.push_str(&String::from_utf8_lossy(&read_n(&mut s, 1)));
    }
    assert!(
        all.starts_with(&format!("-ERR Protocol error: {message}")),
        "for {bytes:?} got {all:?}"
    );
    assert!(
        is_closed(&mut s),
        "connection must be closed after {bytes:?}"
    );
}

#[test]
fn malformed_input_gets_a_protocol_error_and_only_that_connection_closes() {
    let server = Server::start();
    // A well-behaved client stays connected throughout.
    let mut bystander = server.client();
    assert_protocol_error_and_close(&server, b"*99999999999\r\n", "invalid multibulk length");
    assert_protocol_error_and_close(&server, b"*1\r\n$600000000\r\n", "invalid bulk length");
    assert_protocol_error_and_close(&server, b"*1\r\n$-5\r\n", "invalid bulk length");
    assert_protocol_error_and_close(&server, b"*2\r\nfoo\r\n", "expected '$', got 'f'");
    assert_protocol_error_and_close(
        &server,
        b"SET \"unbalanced\r\n",
        "unbalanced quotes in request",
    );
    assert_protocol_error_and_close(&server, &vec![b'x'; 70 * 1024], "too big inline request");
    // Binary garbage: either an error or a close, never a crash.
    let mut s = server.raw();
    s.set_read_timeout(Some(std::time::Duration::from_millis(500)))
        .unwrap();
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let _ = s.write_all(&garbage);
    let _ = is_closed(&mut s);
    let pong: String = redis::cmd("PING").query(&mut bystander).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn unknown_commands_are_rejected_like_redis() {
    let server = Server::start();
    let mut s = server.raw();
    let expected = b"-ERR unknown command 'NOPE', with args beginning with: 'a' 'b' \r\n";
    assert_eq!(roundtrip(&mut s, b"NOPE a b\r\n", expected.len()), expected);
    let expected = b"-ERR wrong number of arguments for 'echo' command\r\n";
    assert_eq!(roundtrip(&mut s, b"ECHO\r\n", expected.len()), expected);
    let expected = b"-ERR unknown subcommand 'nope'. Try CLIENT HELP.\r\n";
    assert_eq!(
        roundtrip(&mut s, b"CLIENT nope\r\n", expected.len()),
        expected
    );
}

#[test]
fn maxclients_from_the_config_file_refuses_extra_connections() {
    let dir = std::env::temp_dir().join(format!("lattice-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("lattice.toml");
    std::fs::write(&cfg, "maxclients = 2\nhz = 20\n").unwrap();
    let server = Server::start_with(&["--config", cfg.to_str().unwrap()]);
    let mut a = server.raw();
    // The start-up probe's connection counts until the server has seen it close.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        a.write_all(b"INFO clients\r\n").unwrap();
        let info = read_bulk(&mut a);
        if info.contains("connected_clients:1\r\n") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "probe still counted: {info}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut b = server.raw();
    assert_eq!(roundtrip(&mut a, b"PING\r\n", 7), b"+PONG\r\n");
    assert_eq!(roundtrip(&mut b, b"PING\r\n", 7), b"+PONG\r\n");
    let mut c = server.raw();
    let expected = b"-ERR max number of clients reached\r\n";
    assert_eq!(read_n(&mut c, expected.len()), expected);
    assert!(is_closed(&mut c));
    let hz = roundtrip(&mut a, b"CONFIG GET hz\r\n", 20);
    assert_eq!(hz, b"*2\r\n$2\r\nhz\r\n$2\r\n20\r\n");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_shuts_down_gracefully() {
    let mut server = Server::start();
    let pid = server.child.id();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        if let Some(exit) = server.child.try_wait().unwrap() {
            assert!(exit.success(), "exit status {exit:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "server ignored SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `--metrics-port` serves INFO's figures in Prometheus's text format, commands included.
#[test]
fn metrics_endpoint_serves_info_figures() {
    use std::io::Read;
    let metrics_port = common::free_port();
    let server = Server::start_with(&["--metrics-port", &metrics_port.to_string()]);
    let mut c = server.client();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    let _: Option<String> = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    let scrape = |path: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", metrics_port)).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    };
    let text = scrape("/metrics");
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("\nlattice_connected_clients 1"), "{text}");
    assert!(
        text.contains("lattice_command_calls_total{command=\"set\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("lattice_command_calls_total{command=\"get\"} 1"),
        "{text}"
    );
    assert!(text.contains("\nlattice_keyspace_hits 1"), "{text}");
    assert!(scrape("/other").starts_with("HTTP/1.1 404"));
}

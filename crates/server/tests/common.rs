//! Starts a real `lattice-server` on a free port for a test and stops it afterwards.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    pub port: u16,
    pub child: Child,
    _dir: TempDir,
}

pub struct TempDir(pub std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A port free right now and not handed out before in this test process: tests run in
/// parallel, and two of them asking the OS at the same moment can be given the same port
/// (each binds, reads it and releases it); one server would then fail to bind while its test
/// talked to the other test's server, and lost it when that test ended.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if HANDED_OUT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(port)
        {
            return port;
        }
    }
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts the server with extra flags and waits until it accepts connections.
    pub fn start_with(extra: &[&str]) -> Server {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("lattice-test-{}-{port}", std::process::id()));
        let child = Command::new(env!("CARGO_BIN_EXE_lattice-server"))
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn lattice-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut child = child;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whoever accepted must be our server, not another process that holds the port.
        assert!(
            matches!(child.try_wait(), Ok(None)),
            "lattice-server exited at start (port {port} taken by another process?)"
        );
        Server {
            port,
            child,
            _dir: TempDir(dir),
        }
    }

    pub fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    pub fn raw(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `bytes` and reads until `expected_len` bytes arrived or the peer closed.
pub fn roundtrip(s: &mut TcpStream, bytes: &[u8], expected_len: usize) -> Vec<u8> {
    s.write_all(bytes).unwrap();
    read_n(s, expected_len)
}

pub fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while out.len() < n {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => out.extend_from_slice(&buf[..k]),
            Err(_) => break,
        }
    }
    out
}

/// True when the server closed the connection (reads EOF or a reset within the timeout).
pub fn is_closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Reads one `$<len>\r\n<body>\r\n` reply (nothing else may be in flight).
pub fn read_bulk(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(2).position(|w| w == b"\r\n") {
            assert_eq!(got[0], b'$', "not a bulk reply: {got:?}");
            let n: usize = std::str::from_utf8(&got[1..end]).unwrap().parse().unwrap();
            if got.len() >= end + 2 + n + 2 {
                return String::from_utf8(got[end + 2..end + 2 + n].to_vec()).unwrap();
            }
        }
        let k = s.read(&mut buf).expect("reply");
        assert!(k > 0, "closed mid-reply");
        got.extend_from_slice(&buf[..k]);
    }
}

//! TLS against the real binary: redis-cli `--tls` and a Rust rustls client run commands on the
//! TLS port; a client without a certificate is refused under `tls-auth-clients yes` (and served
//! under `optional`); three nodes with `tls-replication` replicate a write, while a node whose
//! certificate another CA signed is refused by its peers and never receives it.
//!
//! Certificates are made by the test (rcgen) in a temporary directory: nothing is checked in,
//! nothing expires.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{free_port, TempDir};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A CA and the files of certificates it signed.
struct Ca {
    cert: Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// Writes `<name>.crt` and `<name>.key` (a certificate for 127.0.0.1 and localhost, good
    /// for a server and a client alike) and this CA's `<name>-ca.crt`; returns their paths.
    fn issue(&self, dir: &Path, name: &str) -> Files {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let files = Files {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
            ca: dir.join(format!("{name}-ca.crt")),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        std::fs::write(&files.ca, self.cert.pem()).unwrap();
        files
    }
}

#[derive(Clone)]
struct Files {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

impl Files {
    fn flags(&self) -> Vec<String> {
        let p = |p: &PathBuf| p.display().to_string();
        vec![
            "--tls-cert-file".into(),
            p(&self.cert),
            "--tls-key-file".into(),
            p(&self.key),
            "--tls-ca-cert-file".into(),
            p(&self.ca),
        ]
    }
}

fn temp_dir(what: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!(
        "lattice-tls-{what}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

/// A standalone server with a plaintext port and a TLS port.
struct TlsServer {
    server: common::Server,
    tls_port: u16,
}

fn start(files: &Files, extra: &[&str]) -> TlsServer {
    let tls_port = free_port();
    let mut args: Vec<String> = vec!["--tls-port".into(), tls_port.to_string()];
    args.extend(files.flags());
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = common::Server::start_with(&args);
    TlsServer { server, tls_port }
}

/// A rustls client configuration trusting `ca`, presenting `client` if given.
fn client_config(ca: &Path, client: Option<&Files>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match client {
        Some(f) => {
            let certs = CertificateDer::pem_file_iter(&f.cert)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_file(&f.key).unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn connect(port: u16, config: Arc<rustls::ClientConfig>) -> TlsStream {
    let socket = TcpStream::connect(("127.0.0.1", port)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let session =
        rustls::ClientConnection::new(config, ServerName::try_from("localhost").unwrap()).unwrap();
    rustls::StreamOwned::new(session, socket)
}

fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// Sends one command and reads one reply (simple, error, integer, or bulk: all these tests
/// need). Err when the connection fails or closes first.
fn call(s: &mut TlsStream, args: &[&str]) -> Result<String, String> {
    s.write_all(&resp(args)).map_err(|e| e.to_string())?;
    s.flush().map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(reply) = parse_reply(&got) {
            return Ok(reply);
        }
        match s.read(&mut buf) {
            Ok(0) => return Err(format!("closed after {:?}", String::from_utf8_lossy(&got))),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn parse_reply(got: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(got).ok()?;
    let (first, rest) = text.split_once("\r\n")?;
    match first.as_bytes().first()? {
        b'+' | b'-' | b':' => Some(first.to_string()),
        b'$' if first == "$-1" => Some("(nil)".into()),
        b'$' => {
            let len: usize = first[1..].parse().ok()?;
            (rest.len() >= len + 2).then(|| rest[..len].to_string())
        }
        _ => Some(text.to_string()),
    }
}

/// redis-cli on `port` over TLS, presenting `client` and trusting `ca`.
fn redis_cli(port: u16, client: &Files, ca: &Path) -> Command {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "--tls"])
        .arg("--cert")
        .arg(&client.cert)
        .arg("--key")
        .arg(&client.key)
        .arg("--cacert")
        .arg(ca);
    cmd
}

/// What redis-cli printed (stdout, then stderr), trimmed.
fn output_of(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .expect("redis-cli (Debian's redis-tools; `make deps` installs it)");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

#[test]
fn redis_cli_over_tls() {
    let dir = temp_dir("cli");
    let ca = Ca::new("test CA");
    let server_files = ca.issue(&dir.0, "server");
    let client_files = ca.issue(&dir.0, "client");
    let s = start(&server_files, &[]);
    let cli = |args: &[&str]| {
        output_of(redis_cli(s.tls_port, &client_files, &server_files.ca).args(args))
    };
    assert_eq!(cli(&["PING"]), "PONG");
    assert_eq!(cli(&["SET", "greeting", "hello over tls"]), "OK");
    assert_eq!(cli(&["GET", "greeting"]), "hello over tls");
    // The same key through the plaintext port: one node behind both.
    let mut plain = s.server.client();
    let v: String = redis::cmd("GET").arg("greeting").query(&mut plain).unwrap();
    assert_eq!(v, "hello over tls");
    // A pipeline of many commands in one TLS stream (several records each way).
    let mut many = String::new();
    for i in 0..2000 {
        many.push_str(&format!("SET k{i} {}\n", "v".repeat(i % 300)));
    }
    let out = redis_cli(s.tls_port, &client_files, &server_files.ca)
        .arg("--pipe")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(redis_protocol(&many).as_slice())?;
            child.wait_with_output()
        })
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("errors: 0, replies: 2000"), "{text}");
    assert_eq!(cli(&["DBSIZE"]), "2001");
    assert_eq!(cli(&["STRLEN", "k299"]), "299");
}

/// `redis-cli --pipe` input: each line as a RESP command.
fn redis_protocol(lines: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in lines.lines() {
        let args: Vec<&str> = line.split(' ').collect();
        out.extend(resp(&args));
    }
    out
}

#[test]
fn a_rust_client_runs_commands_and_the_server_reports_tls() {
    let dir = temp_dir("rust");
    let ca = Ca::new("test CA");
    let server_files = ca.issue(&dir.0, "server");
    let client_files = ca.issue(&dir.0, "client");
    let s = start(&server_files, &[]);
    let mut c = connect(
        s.tls_port,
        client_config(&server_files.ca, Some(&client_files)),
    );
    assert_eq!(call(&mut c, &["PING"]).unwrap(), "+PONG");
    assert_eq!(call(&mut c, &["SET", "k", "v"]).unwrap(), "+OK");
    assert_eq!(call(&mut c, &["GET", "k"]).unwrap(), "v");
    // A value larger than a TLS record (16 KiB) each way.
    let big = "x".repeat(100_000);
    assert_eq!(call(&mut c, &["SET", "big", &big]).unwrap(), "+OK");
    assert_eq!(call(&mut c, &["GET", "big"]).unwrap(), big);
    // 100 of them (10 MB) pipelined and read only after a pause: the server's socket fills, the
    // connection waits for room with records left in its session, and everything arrives in
    // order once the client reads.
    let get = resp(&["GET", "big"]);
    for _ in 0..100 {
        c.write_all(&get).unwrap();
    }
    c.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let one = format!("${}\r\n{big}\r\n", big.len());
    let mut got = vec![0u8; one.len() * 100];
    c.read_exact(&mut got).unwrap();
    assert!(got.chunks(one.len()).all(|r| r == one.as_bytes()));
    let info = call(&mut c, &["INFO", "clients"]).unwrap();
    assert!(info.contains("connected_tls_clients:1\r\n"), "{info}");
    let config = call(&mut c, &["CONFIG", "GET", "tls-port"]).unwrap();
    // The reply is an array; its text holds the port.
    assert!(config.contains(&s.tls_port.to_string()), "{config}");
    let mut plain = s.server.client();
    let auth: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("tls-auth-clients")
        .query(&mut plain)
        .unwrap();
    assert_eq!(auth, ["tls-auth-clients", "yes"]);
    let info: String = redis::cmd("INFO").arg("clients").query(&mut plain).unwrap();
    assert!(info.contains("connected_clients:2\r\n"), "{info}");
    assert!(info.contains("connected_tls_clients:1\r\n"), "{info}");
    // QUIT over TLS: the reply, then the session ends.
    assert_eq!(call(&mut c, &["QUIT"]).unwrap(), "+OK");
}

/// The `redis` crate's rustls client (`rediss://`, mutual TLS), as an application would use it.
#[test]
fn the_redis_crate_over_tls() {
    let dir = temp_dir("crate");
    let ca = Ca::new("test CA");
    let server_files = ca.issue(&dir.0, "server");
    let client_files = ca.issue(&dir.0, "client");
    let s = start(&server_files, &[]);
    let read = |p: &PathBuf| std::fs::read(p).unwrap();
    let client = redis::Client::build_with_tls(
        format!("rediss://127.0.0.1:{}/", s.tls_port),
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: read(&client_files.cert),
                client_key: read(&client_files.key),
            }),
            root_cert: Some(read(&server_files.ca)),
        },
    )
    .unwrap();
    let mut c = client.get_connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("lib")
        .arg("rustls")
        .query(&mut c)
        .unwrap();
    let v: String = redis::cmd("GET").arg("lib").query(&mut c).unwrap();
    assert_eq!(v, "rustls");
    // A pipeline: its replies come back encrypted together.
    let mut pipe = redis::pipe();
    for i in 0..500 {
        pipe.cmd("INCRBY").arg("n").arg(i);
    }
    let totals: Vec<i64> = pipe.query(&mut c).unwrap();
    assert_eq!(totals.last(), Some(&(0..500).sum::<i64>()));
    // Without a client certificate the library's connection fails.
    let anonymous = redis::Client::build_with_tls(
        format!("rediss://127.0.0.1:{}/", s.tls_port),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(read(&server_files.ca)),
        },
    )
    .unwrap();
    let refused = anonymous
        .get_connection()
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
    assert!(refused.is_err(), "{refused:?}");
}

#[test]
fn a_client_without_a_certificate_is_refused_unless_optional() {
    let dir = temp_dir("refuse");
    let ca = Ca::new("test CA");
    let server_files = ca.issue(&dir.0, "server");
    let s = start(&server_files, &[]);
    let mut anonymous = connect(s.tls_port, client_config(&server_files.ca, None));
    let r = call(&mut anonymous, &["PING"]);
    assert!(r.is_err(), "served without a certificate: {r:?}");
    // A certificate from another CA is refused too.
    let other = Ca::new("someone else's CA").issue(&dir.0, "stranger");
    let mut stranger = connect(s.tls_port, client_config(&server_files.ca, Some(&other)));
    let r = call(&mut stranger, &["PING"]);
    assert!(r.is_err(), "served with a foreign certificate: {r:?}");
    // Plaintext on the TLS port is not RESP to it.
    let mut raw = TcpStream::connect(("127.0.0.1", s.tls_port)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.write_all(b"PING\r\n").unwrap();
    let mut buf = [0u8; 64];
    let n = raw.read(&mut buf).unwrap_or(0);
    assert!(!buf[..n].starts_with(b"+PONG"));
    drop(s);

    let s = start(&server_files, &["--tls-auth-clients", "optional"]);
    let mut anonymous = connect(s.tls_port, client_config(&server_files.ca, None));
    assert_eq!(call(&mut anonymous, &["PING"]).unwrap(), "+PONG");
    let mut stranger = connect(s.tls_port, client_config(&server_files.ca, Some(&other)));
    assert!(call(&mut stranger, &["PING"]).is_err());
}

#[test]
fn tls_only_and_bad_settings() {
    let dir = temp_dir("only");
    let ca = Ca::new("test CA");
    let files = ca.issue(&dir.0, "server");
    // `port 0`: no plaintext port at all.
    let tls_port = free_port();
    let data = dir.0.join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lattice-server"))
        .args(["--port", "0", "--tls-port", &tls_port.to_string()])
        .args(["--tls-auth-clients", "no"])
        .args(files.flags())
        .arg("--dir")
        .arg(&data)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _kill = KillOnDrop(&mut child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", tls_port)).is_err() {
        assert!(Instant::now() < deadline, "TLS port never opened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = connect(tls_port, client_config(&files.ca, None));
    assert_eq!(call(&mut c, &["PING"]).unwrap(), "+PONG");
    let config = call(&mut c, &["CONFIG", "GET", "port"]).unwrap();
    assert!(config.contains("\r\n$1\r\n0"), "{config:?}");

    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_lattice-server"))
            .args(args)
            .arg("--dir")
            .arg(&data)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let port = free_port().to_string();
    let missing = dir.0.join("missing.crt").display().to_string();
    let (cert, key, ca) = (
        files.cert.display().to_string(),
        files.key.display().to_string(),
        files.ca.display().to_string(),
    );
    assert!(run(&["--port", "0"]).contains("no tls-port"));
    let e = run(&[
        "--port",
        &port,
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
    ]);
    assert!(e.contains("its own port"), "{e}");
    assert!(run(&["--tls-port", &port, "--tls-cert-file", "x"]).contains("tls-key-file"));
    let e = run(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &missing,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
    ]);
    assert!(e.contains("missing.crt"), "{e}");
    let e = run(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &ca,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "sometimes",
    ]);
    assert!(e.contains("tls-auth-clients"), "{e}");
}

struct KillOnDrop<'a>(&'a mut Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One replica of a TLS cluster; killed on drop (its log printed if the test failed).
struct Replica {
    id: u32,
    port: u16,
    log: PathBuf,
    child: Child,
}

impl Replica {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut self.client())
            .unwrap()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("----- log of node {} -----\n{}", self.id, self.log_text());
        }
    }
}

fn wait_for(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Nodes 1 and 2 hold certificates from the cluster's CA; node 3's was signed by another CA
/// (it trusts the cluster's CA itself, so only its own certificate is wrong). 1 and 2 link and
/// replicate; both refuse 3 in both directions, log why, and 3 never sees their writes.
#[test]
fn tls_replication_links_replicas_and_refuses_a_foreign_certificate() {
    let dir = temp_dir("repl");
    let ca = Ca::new("cluster CA");
    let rogue = Ca::new("rogue CA");
    let mut files = vec![ca.issue(&dir.0, "node1"), ca.issue(&dir.0, "node2")];
    let mut third = rogue.issue(&dir.0, "node3");
    third.ca = files[0].ca.clone();
    files.push(third);
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let seeds = ports
        .iter()
        .map(|(_, c)| format!("127.0.0.1:{c}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut nodes = Vec::new();
    for (i, ((port, cluster_port), f)) in ports.iter().zip(&files).enumerate() {
        let id = i as u32 + 1;
        let log = dir.0.join(format!("node{id}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_lattice-server"))
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--node-id", &id.to_string()])
            .args(["--cluster-port", &cluster_port.to_string()])
            .args(["--seeds", &seeds])
            .args(["--tls-replication", "yes"])
            .args(f.flags())
            .arg("--dir")
            .arg(dir.0.join(format!("data{id}")))
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .unwrap();
        nodes.push(Replica {
            id,
            port: *port,
            log,
            child,
        });
    }
    let up = |n: &Replica, other: u32| {
        let t = n.log_text();
        t.contains(&format!("outgoing link to node {other} "))
            && t.contains(&format!("incoming link from node {other} "))
    };
    wait_for(
        "nodes 1 and 2 linked over TLS",
        Duration::from_secs(20),
        || up(&nodes[0], 2) && up(&nodes[1], 1),
    );
    // Both good nodes refuse node 3 (as dialer and as acceptor) and say why.
    wait_for("node 3 refused and logged", Duration::from_secs(20), || {
        nodes[..2].iter().all(|n| {
            let t = n.log_text();
            t.contains("incoming link from")
                && t.contains("refused: TLS handshake failed")
                && t.matches("TLS handshake failed").count() >= 2
        })
    });
    let mut c1 = nodes[0].client();
    let _: () = redis::cmd("SET")
        .arg("over-tls")
        .arg("yes")
        .query(&mut c1)
        .unwrap();
    wait_for("the write reached node 2", Duration::from_secs(20), || {
        nodes[1].get("over-tls").as_deref() == Some("yes")
    });
    // A burst the other way: many frames batched into TLS records on node 2's link to node 1.
    let mut c2 = nodes[1].client();
    let mut pipe = redis::pipe();
    for _ in 0..2000 {
        pipe.cmd("INCR").arg("burst").ignore();
    }
    let _: () = pipe.query(&mut c2).unwrap();
    wait_for("the burst reached node 1", Duration::from_secs(20), || {
        nodes[0].get("burst").as_deref() == Some("2000")
    });
    // Node 2 has had it; give node 3 as long again before saying it never came.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(nodes[2].get("over-tls"), None, "node 3 received the write");
    assert_eq!(nodes[2].get("burst"), None, "node 3 received the burst");
    let log3 = nodes[2].log_text();
    assert!(!log3.contains("link to node"), "node 3 got a link:\n{log3}");
    // Both of its roles fail at TLS: as acceptor (its peers refuse its certificate) and as
    // dialer (they refuse it after the handshake, with an alert at its first read).
    assert!(log3.contains("incoming link from"), "{log3}");
    assert!(
        log3.lines()
            .any(|l| l.contains("cluster: link to") && l.contains("TLS handshake failed")),
        "{log3}"
    );
    let links: String = redis::cmd("CONFIG")
        .arg("GET")
        .arg("tls-replication")
        .query::<Vec<String>>(&mut c2)
        .unwrap()
        .join(" ");
    assert_eq!(links, "tls-replication yes");
}

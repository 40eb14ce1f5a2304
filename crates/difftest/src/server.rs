//! Starting and stopping the servers under test.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::conn::Conn;
use crate::reply::Reply;

/// A server process we started. Dropping it kills the process and removes its directory, so
/// servers go away on every exit path (errors, mismatches, panics).
pub struct ServerGuard {
    pub name: String,
    pub addr: String,
    child: Option<Child>,
    dir: PathBuf,
}

impl ServerGuard {
    fn log_tail(&self) -> String {
        let mut s = String::new();
        for f in ["stdout.log", "stderr.log"] {
            if let Ok(text) = fs::read_to_string(self.dir.join(f)) {
                let lines: Vec<&str> = text.lines().collect();
                let start = lines.len().saturating_sub(15);
                for l in &lines[start..] {
                    s.push_str(&format!("  [{}] {l}\n", f));
                }
            }
        }
        s
    }

    /// Whether the process is still running (false after it exited or was never ours).
    pub fn exit_status(&mut self) -> Option<String> {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(Some(st))) => Some(format!("{st}")),
            _ => None,
        }
    }
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> std::io::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

fn temp_dir(tag: &str) -> std::io::Result<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "lattice-difftest-{}-{}-{}",
        tag,
        std::process::id(),
        nanos
    ));
    fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Starts `bin` with `args` (the port is appended by the caller), waits until it answers PING.
fn start(
    name: &str,
    bin: &Path,
    args: Vec<String>,
    port: u16,
    dir: PathBuf,
) -> Result<ServerGuard, String> {
    // The server runs inside its temporary directory, so a relative binary path must be
    // resolved against ours first. Symlinks are kept: redis-server is a link to
    // redis-check-rdb, which picks its mode from the name it was started under.
    let bin = &if bin.components().count() > 1 && bin.is_relative() {
        std::env::current_dir()
            .map(|d| d.join(bin))
            .unwrap_or_else(|_| bin.to_path_buf())
    } else {
        bin.to_path_buf()
    };
    let stdout = fs::File::create(dir.join("stdout.log")).map_err(|e| e.to_string())?;
    let stderr = fs::File::create(dir.join("stderr.log")).map_err(|e| e.to_string())?;
    let child = Command::new(bin)
        .args(&args)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            let _ = fs::remove_dir_all(&dir);
            return Err(format!("cannot start {name} ({}): {e}", bin.display()));
        }
    };
    let mut guard = ServerGuard {
        name: name.to_string(),
        addr: format!("127.0.0.1:{port}"),
        child: Some(child),
        dir,
    };
    wait_ping(&mut guard, Duration::from_secs(20))?;
    Ok(guard)
}

fn wait_ping(guard: &mut ServerGuard, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no attempt");
    while Instant::now() < deadline {
        if let Some(st) = guard.exit_status() {
            return Err(format!(
                "{} exited during startup ({st}):\n{}",
                guard.name,
                guard.log_tail()
            ));
        }
        match Conn::connect(&guard.addr, Duration::from_secs(2)) {
            Ok(mut c) => match c.call(&[b"PING".to_vec()]) {
                Reply::Simple(s) if s == b"PONG" => return Ok(()),
                other => last = format!("PING answered {other}"),
            },
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "{} at {} did not answer PING within {:?} (last: {last}):\n{}",
        guard.name,
        guard.addr,
        timeout,
        guard.log_tail()
    ))
}

pub fn start_redis(bin: &Path) -> Result<ServerGuard, String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let dir = temp_dir("redis").map_err(|e| e.to_string())?;
    let args = vec![
        "--port".into(),
        port.to_string(),
        "--bind".into(),
        "127.0.0.1".into(),
        "--save".into(),
        "".into(),
        "--appendonly".into(),
        "no".into(),
        // Lattice has one database (ARCHITECTURE §4): Redis with one answers SELECT, MOVE and
        // SWAPDB the same way, which the `ops` family compares.
        "--databases".into(),
        "1".into(),
        "--daemonize".into(),
        "no".into(),
        "--dir".into(),
        dir.display().to_string(),
    ];
    start("redis", bin, args, port, dir)
}

pub fn start_lattice(bin: &Path) -> Result<ServerGuard, String> {
    let port = free_port().map_err(|e| e.to_string())?;
    let dir = temp_dir("lattice").map_err(|e| e.to_string())?;
    let args = vec![
        "--port".into(),
        port.to_string(),
        "--bind".into(),
        "127.0.0.1".into(),
        "--dir".into(),
        dir.display().to_string(),
    ];
    start("lattice", bin, args, port, dir)
}

/// The lattice-server binary: next to this executable (cargo puts both in target/<profile>),
/// then target/release, then PATH.
pub fn default_lattice_bin() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            let p = dir.join("lattice-server");
            if p.is_file() {
                return p;
            }
        }
    }
    let p = PathBuf::from("target/release/lattice-server");
    if p.is_file() {
        return p;
    }
    PathBuf::from("lattice-server")
}

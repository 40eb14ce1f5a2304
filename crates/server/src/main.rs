//! `lattice-server`: serves the Redis protocol from a Lattice node.

mod alloc;
mod conn;
mod host;
mod process;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use lattice_node::{Buggify, Config, Input, Micros, Node};
use tokio::net::TcpListener;

use crate::host::{wall_clock_us, Host, Shared};

#[global_allocator]
static GLOBAL: alloc::CountingAlloc = alloc::CountingAlloc;

/// A Redis-compatible key-value store whose nodes replicate without coordination.
#[derive(Parser, Debug)]
#[command(name = "lattice-server", version)]
struct Args {
    /// TCP port for Redis clients.
    #[arg(long)]
    port: Option<u16>,
    /// Address to listen on.
    #[arg(long)]
    bind: Option<String>,
    /// Directory for this node's data.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// TOML file: `port`, `bind`, `dir`, `threads`, and any CONFIG parameter by its Redis name
    /// (e.g. `maxclients = 100`, `requirepass = "secret"`). Flags override the file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

/// The settings after merging the config file and the flags.
struct Settings {
    port: u16,
    bind: String,
    dir: PathBuf,
    threads: usize,
    node: Config,
}

fn settings(args: Args) -> Result<Settings, String> {
    let mut port = 6379u16;
    let mut bind = "127.0.0.1".to_string();
    let mut dir = PathBuf::from("./data");
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut node = Config::default();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e| format!("invalid config file {}: {e}", path.display()))?;
        for (key, value) in table {
            let text = match &value {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(i) => i.to_string(),
                toml::Value::Boolean(b) => (if *b { "yes" } else { "no" }).to_string(),
                other => return Err(format!("config key '{key}': unsupported value {other}")),
            };
            match key.as_str() {
                "port" => port = text.parse().map_err(|_| format!("invalid port '{text}'"))?,
                "bind" => bind = text,
                "dir" => dir = PathBuf::from(text),
                "threads" => {
                    threads = text
                        .parse()
                        .map_err(|_| format!("invalid threads '{text}'"))?
                }
                _ => node
                    .set_initial(&key, &text)
                    .map_err(|e| format!("config key '{key}': {e}"))?,
            }
        }
    }
    if let Some(p) = args.port {
        port = p;
    }
    if let Some(b) = args.bind {
        bind = b;
    }
    if let Some(d) = args.dir {
        dir = d;
    }
    if let Some(t) = args.threads {
        threads = t.max(1);
    }
    node.set_initial("port", &port.to_string())?;
    node.set_initial("bind", &bind)?;
    node.set_initial("dir", &dir.display().to_string())?;
    Ok(Settings {
        port,
        bind,
        dir,
        threads,
        node,
    })
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let settings = match settings(Args::parse()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lattice-server: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&settings.dir) {
        eprintln!(
            "lattice-server: cannot create data directory {}: {e}",
            settings.dir.display()
        );
        std::process::exit(2);
    }
    // One thread: a current-thread runtime, which runs woken connections in the order their
    // input arrived, like a single event loop (Redis's own behaviour, which its test suite
    // relies on). More: a multi-thread runtime with one worker per thread.
    let runtime = if settings.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(settings.threads)
            .enable_all()
            .build()
    }
    .expect("tokio runtime");
    if let Err(e) = runtime.block_on(run(settings)) {
        eprintln!("lattice-server: {e}");
        std::process::exit(1);
    }
}

async fn run(s: Settings) -> Result<(), String> {
    let addr = format!("{}:{}", s.bind, s.port);
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let now = Micros(wall_clock_us());
    // The node's randomness (RANDOMKEY, run id) needs no secrecy; any varying seed will do.
    let seed = now.0 ^ ((std::process::id() as u64) << 32);
    let node = Node::new(s.node, seed, Buggify::disabled(), now);
    let shared = Arc::new(Shared::new(Host::new(node, now), s.port));
    tracing::info!(
        "lattice-server {} ready: listening on {addr}, data dir {}, {} worker threads (Redis protocol 7.0)",
        env!("CARGO_PKG_VERSION"),
        s.dir.display(),
        s.threads
    );
    tokio::spawn(timer_task(shared.clone()));
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => {
                    tokio::spawn(conn::serve(shared.clone(), socket));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            signal = &mut shutdown => {
                tracing::info!("received {signal}, shutting down");
                break;
            }
        }
    }
    Ok(())
}

/// Drives the node's timers (active expiry, statistics, idle timeouts) and refreshes process
/// figures for INFO.
async fn timer_task(shared: Arc<Shared>) {
    let mut last_stats_us = 0u64;
    loop {
        let deadline_us = {
            let mut host = shared.host.lock();
            let now = host.now();
            if now.0.saturating_sub(last_stats_us) >= 1_000_000 {
                last_stats_us = now.0;
                host.node
                    .handle(now, Input::ProcessStats(process::read(shared.port)));
            }
            host.node.handle_timeout(now);
            host.drain(None, &mut Vec::new());
            let next = host.node.poll_timeout().map_or(u64::MAX, |t| t.0);
            // Wake at least every 100 ms for the process figures.
            let next = next.min(now.0 + 100_000);
            shared.timer_deadline_us.store(next, Ordering::Relaxed);
            next.saturating_sub(now.0)
        };
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_micros(deadline_us)) => {}
            _ = shared.timer_wake.notified() => {}
        }
    }
}

async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

//! `lattice-server`: serves the Redis protocol from a Lattice node.

mod acl_file;
mod alloc;
mod cluster;
mod disk;
mod event_loop;
mod host;
mod incarnation;
mod metrics;
mod nap;
mod process;
mod s3;
mod tls;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Parser;
use lattice_node::{Buggify, Config, Micros, Node, NodeId};

use crate::cluster::{Auth, ClusterSettings, LinkStats};
use crate::event_loop::{EventLoop, LoopHandle, LoopSeed};
use crate::host::{clock_us, Host, Shared};

#[global_allocator]
static GLOBAL: alloc::CountingAlloc = alloc::CountingAlloc;

/// A Redis-compatible key-value store whose nodes replicate without coordination.
#[derive(Parser, Debug)]
#[command(name = "lattice-server", version)]
struct Args {
    /// TCP port for Redis clients; 0: no plaintext port (with --tls-port, TLS only).
    #[arg(long)]
    port: Option<u16>,
    /// TCP port for Redis clients over TLS (Redis's `tls-port`; default: none).
    #[arg(long)]
    tls_port: Option<u16>,
    /// PEM certificate (chain) this server presents to clients and to its replicas.
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long)]
    tls_key_file: Option<PathBuf>,
    /// PEM CA certificate(s) that client and replica certificates must be signed by.
    #[arg(long)]
    tls_ca_cert_file: Option<PathBuf>,
    /// `yes` (default, as Redis): TLS clients must present a certificate signed by the CA;
    /// `optional`: one without a certificate is served too; `no`: none is asked for.
    #[arg(long)]
    tls_auth_clients: Option<String>,
    /// `yes`: replica links run over TLS, each side presenting --tls-cert-file and accepting
    /// only a peer signed by the CA. Every replica must agree. Default `no`.
    #[arg(long)]
    tls_replication: Option<String>,
    /// Same as --tls-replication (the replica links are also Lattice's cluster bus).
    #[arg(long)]
    tls_cluster: Option<String>,
    /// Address to listen on.
    #[arg(long)]
    bind: Option<String>,
    /// Directory for this node's data.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// TOML file: `port`, `bind`, `dir`, `threads`, `nap-us`, and any CONFIG parameter by its
    /// Redis name (e.g. `maxclients = 100`, `requirepass = "secret"`). Flags override the file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Event-loop threads serving clients (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// Serve Prometheus metrics (every numeric INFO figure, per-command calls, time, errors and
    /// latency percentiles) at http://<bind>:<port>/metrics. Off by default.
    #[arg(long)]
    metrics_port: Option<u16>,
    /// Microseconds an event loop naps before blocking while many clients are busy, so that
    /// requests arriving meanwhile are served together instead of each waking it (0: never).
    #[arg(long)]
    nap_us: Option<u64>,
    /// This replica's id in the cluster: a number >= 1, unique among the replicas. Needed with
    /// --seeds.
    #[arg(long)]
    node_id: Option<u32>,
    /// Port (on --bind) where this node listens for its replicas. Needed with --seeds.
    #[arg(long)]
    cluster_port: Option<u16>,
    /// The replicas' cluster addresses, host:port separated by commas; may include this node's
    /// own --bind:--cluster-port. Without seeds the server runs standalone.
    #[arg(long, value_delimiter = ',')]
    seeds: Option<Vec<String>>,
    /// Join a running partitioned cluster through one member's cluster address (host:port)
    /// instead of listing --seeds: the node learns the other members from it, and the
    /// slots it comes to own are streamed to it. Needs --node-id, --cluster-port and
    /// --replication-factor (the cluster's).
    #[arg(long, conflicts_with = "seeds")]
    join: Option<String>,
    /// Shared secret proving membership on replica links (default: the environment variable
    /// LATTICE_CLUSTER_SECRET; without either, links are not authenticated). All replicas must
    /// agree on having one and on its value.
    #[arg(long)]
    cluster_secret: Option<String>,
    /// Owners per hash slot (default 3, or every member when there are fewer). Below the
    /// member count the cluster is partitioned: each node holds the keys of its slots and
    /// forwards the others' commands to an owner.
    #[arg(long)]
    replication_factor: Option<usize>,
    /// S3 bucket the data directory is uploaded to (sealed log pieces, snapshots, a manifest);
    /// a node whose directory is empty restores from it. Credentials: the standard AWS chain
    /// (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws files, ...).
    #[arg(long)]
    s3_bucket: Option<String>,
    /// Key prefix inside the bucket (one node's files), e.g. `lattice/node1/`.
    #[arg(long)]
    s3_prefix: Option<String>,
    /// Endpoint URL of an S3-compatible server instead of AWS (path-style addressing).
    #[arg(long)]
    s3_endpoint: Option<String>,
    /// Region (default: AWS_REGION / the profile's, else us-east-1).
    #[arg(long)]
    s3_region: Option<String>,
    /// `async` (default): writes are acknowledged after the local fsync and the upload
    /// follows with a bounded lag shown in INFO persistence. `sync`: acknowledged only once
    /// uploaded too.
    #[arg(long)]
    s3_durability: Option<String>,
}

/// The `--s3-*` keys as given by the config file and the flags.
#[derive(Default)]
struct S3Args {
    bucket: Option<String>,
    prefix: Option<String>,
    endpoint: Option<String>,
    region: Option<String>,
    durability: Option<String>,
}

/// Validates the S3 keys. None means no bucket.
fn s3_settings(a: S3Args) -> Result<Option<s3::S3Settings>, String> {
    let mode = match a.durability.as_deref() {
        None | Some("async") => lattice_persist::AckMode::Async,
        Some("sync") => lattice_persist::AckMode::Sync,
        Some(other) => {
            return Err(format!(
                "invalid s3-durability '{other}': expected async or sync"
            ))
        }
    };
    let Some(bucket) = a.bucket.filter(|b| !b.is_empty()) else {
        if a.prefix.is_some()
            || a.endpoint.is_some()
            || a.region.is_some()
            || a.durability.is_some()
        {
            return Err("the s3-* settings need s3-bucket".into());
        }
        return Ok(None);
    };
    Ok(Some(s3::S3Settings {
        bucket,
        prefix: a.prefix.unwrap_or_default(),
        endpoint: a.endpoint,
        region: a.region,
        mode,
    }))
}

/// Environment variable read for the cluster secret when neither the flag nor the config file
/// sets it (keeps the secret out of `ps` output).
const SECRET_ENV: &str = "LATTICE_CLUSTER_SECRET";

/// The settings after merging the config file and the flags.
struct Settings {
    port: u16,
    bind: String,
    dir: PathBuf,
    threads: usize,
    nap_us: u64,
    metrics_port: Option<u16>,
    node: Config,
    cluster: Option<ClusterSettings>,
    s3: Option<s3::S3Settings>,
    tls: Option<tls::TlsSettings>,
}

/// The cluster keys as given by the config file, the environment and the flags.
#[derive(Default)]
struct ClusterArgs {
    node_id: Option<u32>,
    cluster_port: Option<u16>,
    seeds: Option<Vec<String>>,
    secret: Option<String>,
    replication_factor: Option<usize>,
}

/// Two seed spellings name the same address when they are equal as text or as socket addresses
/// (`[::1]:7000` and `[0:0:0:0:0:0:0:1]:7000`). Host names are not resolved here: a name for this
/// node's own address is found at its first handshake instead.
fn same_address(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (
        a.parse::<std::net::SocketAddr>(),
        b.parse::<std::net::SocketAddr>(),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// The owners per slot for a cluster of `members`: the one given (1..=members), else the
/// default capped at the member count (so a two-node cluster needs no flag).
fn replication_factor_for(given: Option<usize>, members: usize) -> Result<usize, String> {
    match given {
        None => Ok(lattice_node::config::DEFAULT_REPLICATION_FACTOR.min(members)),
        Some(0) => Err("--replication-factor must be at least 1".into()),
        Some(n) if n > members => Err(format!(
            "--replication-factor {n} exceeds the {members} members --seeds names (this node included)"
        )),
        Some(n) => Ok(n),
    }
}

/// Never used: `--join` requires `--replication-factor`; named for the type's sake.
const DEFAULT_JOIN_RF: usize = 3;

/// Validates the cluster keys. None means standalone (no seeds).
fn cluster_settings(
    c: ClusterArgs,
    bind: &str,
    client_ports: &[u16],
) -> Result<Option<ClusterSettings>, String> {
    let Some(seeds) = c.seeds else {
        if c.cluster_port.is_some() {
            return Err("--cluster-port needs --seeds (the replicas' cluster addresses)".into());
        }
        if let Some(id) = c.node_id {
            if id == 0 {
                return Err("--node-id must be a number >= 1".into());
            }
        }
        return Ok(None);
    };
    let node_id = c
        .node_id
        .ok_or("--seeds needs --node-id (a number >= 1, different on every replica)".to_string())?;
    if node_id == 0 {
        return Err("--node-id must be a number >= 1".into());
    }
    if node_id >= lattice_node::MAX_NODE_ID_WITH_INCARNATION {
        return Err(format!(
            "--node-id must be below {} in a cluster (the rest of a write's stamp is the replica's incarnation)",
            lattice_node::MAX_NODE_ID_WITH_INCARNATION
        ));
    }
    let port = c.cluster_port.ok_or(
        "--seeds needs --cluster-port (the port on --bind where replicas reach this node)"
            .to_string(),
    )?;
    if port != 0 && client_ports.contains(&port) {
        return Err(format!(
            "--cluster-port {port} is also a client port; give the replicas their own port"
        ));
    }
    let listen = format!("{bind}:{port}");
    let mut peers: Vec<String> = Vec::new();
    let mut listed_self = false;
    for seed in seeds.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let valid = seed
            .rsplit_once(':')
            .is_some_and(|(host, p)| !host.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !valid {
            return Err(format!("invalid seed '{seed}': expected host:port"));
        }
        if same_address(seed, &listen) {
            listed_self = true;
        } else if !peers.iter().any(|p| same_address(p, seed)) {
            peers.push(seed.to_string());
        }
    }
    if peers.is_empty() && !listed_self {
        return Err("--seeds is empty".into());
    }
    let secret = match c.secret {
        Some(s) if s.is_empty() => {
            return Err(format!(
                "the cluster secret is empty; set a non-empty one or unset it ({SECRET_ENV})"
            ))
        }
        Some(s) => Some(s.into_bytes()),
        None => None,
    };
    if peers.is_empty() {
        tracing::warn!("--seeds names only this node: it runs as a cluster of one");
    }
    Ok(Some(ClusterSettings {
        auth: Auth {
            node_id: NodeId(node_id),
            secret,
        },
        listen,
        peers,
        tls: None,
    }))
}

fn settings(args: Args) -> Result<Settings, String> {
    let mut port = 6379u16;
    let mut bind = "127.0.0.1".to_string();
    let mut dir = PathBuf::from("./data");
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut nap_us = nap::NAP_US;
    let mut node = Config::default();
    let mut cluster = ClusterArgs::default();
    let mut s3 = S3Args::default();
    let mut tls_args = tls::TlsArgs::default();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e| format!("invalid config file {}: {e}", path.display()))?;
        for (key, value) in table {
            if key == "seeds" {
                // A list, or one string of comma-separated addresses like the flag.
                let list = match &value {
                    toml::Value::String(s) => s.split(',').map(str::to_string).collect(),
                    toml::Value::Array(items) => items
                        .iter()
                        .map(|v| v.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .ok_or("config key 'seeds': expected strings \"host:port\"")?,
                    other => return Err(format!("config key 'seeds': unsupported value {other}")),
                };
                cluster.seeds = Some(list);
                continue;
            }
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
                "nap-us" => {
                    nap_us = text
                        .parse()
                        .map_err(|_| format!("invalid nap-us '{text}'"))?
                }
                "node-id" => {
                    cluster.node_id =
                        Some(text.parse().map_err(|_| {
                            format!("invalid node-id '{text}': expected a number >= 1")
                        })?)
                }
                "cluster-port" => {
                    cluster.cluster_port = Some(
                        text.parse()
                            .map_err(|_| format!("invalid cluster-port '{text}'"))?,
                    )
                }
                "cluster-secret" => cluster.secret = Some(text),
                "replication-factor" => {
                    cluster.replication_factor = Some(text.parse().map_err(|_| {
                        format!("invalid replication-factor '{text}': expected a number >= 1")
                    })?)
                }
                "s3-bucket" => s3.bucket = Some(text),
                "s3-prefix" => s3.prefix = Some(text),
                "s3-endpoint" => s3.endpoint = Some(text),
                "s3-region" => s3.region = Some(text),
                "s3-durability" => s3.durability = Some(text),
                "tls-port" => {
                    tls_args.port = Some(
                        text.parse()
                            .map_err(|_| format!("invalid tls-port '{text}'"))?,
                    )
                }
                "tls-cert-file" => tls_args.cert_file = Some(PathBuf::from(text)),
                "tls-key-file" => tls_args.key_file = Some(PathBuf::from(text)),
                "tls-ca-cert-file" => tls_args.ca_cert_file = Some(PathBuf::from(text)),
                "tls-auth-clients" => tls_args.auth_clients = Some(text),
                "tls-replication" => tls_args.replication = Some(text),
                "tls-cluster" => tls_args.cluster = Some(text),
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
    if let Some(n) = args.nap_us {
        nap_us = n;
    }
    if nap_us > nap::MAX_NAP_US {
        return Err(format!(
            "invalid nap-us {nap_us}: at most {} (it delays requests)",
            nap::MAX_NAP_US
        ));
    }
    if args.node_id.is_some() {
        cluster.node_id = args.node_id;
    }
    if args.cluster_port.is_some() {
        cluster.cluster_port = args.cluster_port;
    }
    if args.seeds.is_some() {
        cluster.seeds = args.seeds;
    }
    let join = args.join.is_some();
    if let Some(contact) = args.join {
        if args.replication_factor.is_none() && cluster.replication_factor.is_none() {
            return Err("--join needs --replication-factor (the cluster's)".into());
        }
        cluster.seeds = Some(vec![contact]);
    }
    if args.replication_factor.is_some() {
        cluster.replication_factor = args.replication_factor;
    }
    let replication_factor = cluster.replication_factor;
    if args.tls_port.is_some() {
        tls_args.port = args.tls_port;
    }
    for (flag, key) in [
        (args.tls_cert_file, &mut tls_args.cert_file),
        (args.tls_key_file, &mut tls_args.key_file),
        (args.tls_ca_cert_file, &mut tls_args.ca_cert_file),
    ] {
        if flag.is_some() {
            *key = flag;
        }
    }
    for (flag, key) in [
        (args.tls_auth_clients, &mut tls_args.auth_clients),
        (args.tls_replication, &mut tls_args.replication),
        (args.tls_cluster, &mut tls_args.cluster),
    ] {
        if flag.is_some() {
            *key = flag;
        }
    }
    // What CONFIG GET shows: the values as given (Redis shows them whether or not TLS is on).
    for (key, value) in [
        ("tls-port", tls_args.port.map(|p| p.to_string())),
        ("tls-cert-file", path_text(&tls_args.cert_file)),
        ("tls-key-file", path_text(&tls_args.key_file)),
        ("tls-ca-cert-file", path_text(&tls_args.ca_cert_file)),
        ("tls-auth-clients", lower(&tls_args.auth_clients)),
        ("tls-replication", lower(&tls_args.replication)),
        ("tls-cluster", lower(&tls_args.cluster)),
    ] {
        if let Some(v) = value {
            node.set_initial(key, &v)?;
        }
    }
    let tls = tls::settings(tls_args)?;
    let tls_port = tls.as_ref().map_or(0, |t| t.port);
    if port == 0 && tls_port == 0 {
        return Err("port 0 turns the plaintext port off, and no tls-port is set: clients could not connect".into());
    }
    if port != 0 && port == tls_port {
        return Err(format!(
            "tls-port {port} is also the plaintext port; give TLS its own port (or port 0)"
        ));
    }
    // Precedence for the secret: flag, then environment, then file.
    if let Some(s) = args.cluster_secret {
        cluster.secret = Some(s);
    } else if let Ok(s) = std::env::var(SECRET_ENV) {
        cluster.secret = Some(s);
    }
    let cluster = cluster_settings(cluster, &bind, &[port, tls_port])?;
    for (flag, key) in [
        (args.s3_bucket, &mut s3.bucket),
        (args.s3_prefix, &mut s3.prefix),
        (args.s3_endpoint, &mut s3.endpoint),
        (args.s3_region, &mut s3.region),
        (args.s3_durability, &mut s3.durability),
    ] {
        if flag.is_some() {
            *key = flag;
        }
    }
    let s3 = s3_settings(s3)?;
    if let Some(s) = &s3 {
        node.ack_after_upload = s.mode == lattice_persist::AckMode::Sync;
    }
    if let Some(c) = &cluster {
        node.node_id = c.auth.node_id.0;
        node.cluster_size = c.peers.len() + 1;
        node.cluster_port = c
            .listen
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or(0);
        if join {
            // The member count is learned; the replicator's is set with the members.
            node.join = true;
            node.replication_factor = replication_factor.unwrap_or(DEFAULT_JOIN_RF);
        } else {
            node.replication_factor =
                replication_factor_for(replication_factor, node.cluster_size)?;
        }
        node.announce_host = match bind.as_str() {
            "0.0.0.0" | "::" | "[::]" => "127.0.0.1".to_string(),
            b => b.to_string(),
        };
        // Clients reach this node on its plaintext port, or on TLS when that is the only one.
        node.announce_port = if port != 0 { port } else { tls_port };
    } else if replication_factor.is_some() {
        return Err(
            "--replication-factor needs --seeds (it counts a cluster's owners per slot)".into(),
        );
    }
    node.set_initial("port", &port.to_string())?;
    node.set_initial("bind", &bind)?;
    node.set_initial("dir", &dir.display().to_string())?;
    // A relative aclfile names a file in the data directory, where Redis (which changes to
    // its `dir`) finds it too.
    if let Some(f) = node.aclfile.clone().filter(|f| Path::new(f).is_relative()) {
        node.set_initial("aclfile", &dir.join(f).display().to_string())?;
    }
    Ok(Settings {
        port,
        bind,
        dir,
        threads,
        nap_us,
        metrics_port: args.metrics_port,
        node,
        cluster,
        s3,
        tls,
    })
}

/// A yes/no-like value as CONFIG GET shows it.
fn lower(v: &Option<String>) -> Option<String> {
    v.as_ref().map(|v| v.to_ascii_lowercase())
}

/// A path as CONFIG GET shows it.
fn path_text(p: &Option<PathBuf>) -> Option<String> {
    p.as_ref().map(|p| p.display().to_string())
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal: logs sent to a file or a collector
        // stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let mut settings = match settings(Args::parse()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lattice-server: {e}");
            std::process::exit(1);
        }
    };
    alloc::spawn_trimmer();
    if let Err(e) = std::fs::create_dir_all(&settings.dir) {
        eprintln!(
            "lattice-server: cannot create data directory {}: {e}",
            settings.dir.display()
        );
        std::process::exit(2);
    }
    // Whether the directory was empty before this start wrote anything into it (the
    // incarnation file below): an empty directory is restored from the bucket, if any.
    let dir_was_empty = match std::fs::read_dir(&settings.dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) => {
            eprintln!(
                "lattice-server: cannot read data directory {}: {e}",
                settings.dir.display()
            );
            std::process::exit(2);
        }
    };
    if settings.cluster.is_some() {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        match incarnation::next(&settings.dir, now_ms) {
            Ok(n) => settings.node.incarnation = n,
            Err(e) => {
                eprintln!("lattice-server: {e}");
                std::process::exit(2);
            }
        }
    }
    // Clients are served by event loops on their own threads (`--threads` of them; with one,
    // connections run in the order their input arrived, Redis's own behaviour, which its test
    // suite relies on). The tokio runtime runs the replica links and waits for signals: one
    // thread standalone, `--threads` workers in a cluster, where a node catching up decodes
    // its peers' streams in parallel and so converges sooner after a pause (`make
    // cluster-pause`; figures in bench/results/architecture-measurements.md, §25).
    let runtime = if settings.cluster.is_some() && settings.threads > 1 {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(settings.threads)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
    .expect("tokio runtime");
    if let Err(e) = runtime.block_on(run(settings, dir_was_empty)) {
        eprintln!("lattice-server: {e}");
        std::process::exit(1);
    }
}

async fn run(s: Settings, dir_was_empty: bool) -> Result<(), String> {
    // Signals are caught from before the port opens: a SIGTERM once clients can connect
    // always means a graceful stop (log synced), never the default kill.
    let signals = Signals::new();
    // Certificates load before any port opens: a server with a bad one does not start.
    let tls_configs = s.tls.as_ref().map(tls::configs).transpose()?;
    let listen = |port: u16| {
        let addr = format!("{}:{port}", s.bind);
        std::net::TcpListener::bind(&addr)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map(mio::net::TcpListener::from_std)
            .map_err(|e| format!("cannot listen on {addr}: {e}"))
    };
    let mut listeners = event_loop::Listeners::default();
    let mut addrs = Vec::new();
    if s.port != 0 {
        listeners.plain = Some(listen(s.port)?);
        addrs.push(format!("{}:{}", s.bind, s.port));
    }
    let tls_port = s.tls.as_ref().map_or(0, |t| t.port);
    if tls_port != 0 {
        listeners.tls = Some(listen(tls_port)?);
        addrs.push(format!(
            "{}:{tls_port} (TLS, tls-auth-clients {})",
            s.bind,
            s.tls.as_ref().map_or("", |t| t.auth_clients.name())
        ));
    }
    let client_tls = tls_configs.as_ref().map(|c| c.clients.clone());
    let mut listeners = Some(listeners);
    let seeds = (0..s.threads)
        .map(|_| LoopSeed::new())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot create an event loop: {e}"))?;
    let loops: Arc<[Arc<LoopHandle>]> = seeds.iter().map(|l| l.handle.clone()).collect();
    let now = Micros(clock_us());
    // The node's randomness (RANDOMKEY, run id) needs no secrecy; any varying seed will do.
    let seed = now.0 ^ ((std::process::id() as u64) << 32);
    let cluster_size = s.node.cluster_size;
    let (incarnation, dot_id) = (s.node.incarnation, s.node.dot_node_id());
    let mut node = Node::new(s.node, seed, Buggify::disabled(), now);
    // As Redis, a server whose ACL file cannot be loaded does not start.
    if let Some(path) = node.acl_file_path().map(str::to_string) {
        let load = lattice_node::acl::FileOp::Load { path: path.clone() };
        let text = acl_file::carry_out(&load)
            .map_err(|e| format!("Error loading ACLs, opening file '{path}': {e}"))?
            .unwrap_or_default();
        node.load_acl_file(&text)
            .map_err(|e| format!("Aborting startup because of ACL errors: {e}"))?;
    }
    // Every node recovers its data directory and persists to it: a standalone node its values,
    // a clustered node its replicated states, so a restarted replica comes back with its keys
    // and anti-entropy ships it only what it missed.
    let bucket = match &s.s3 {
        Some(cfg) => Some(s3::Bucket::connect(cfg).await),
        None => None,
    };
    let mut upload_start = lattice_persist::Start::LocalData;
    let mut restored_pieces = Vec::new();
    if let (Some(b), Some(cfg)) = (&bucket, &s.s3) {
        // A clustered node restores its own prefix too: it comes back with the replicated
        // states its bucket holds, and its peers ship only what the bucket lacked.
        if dir_was_empty {
            let started = std::time::Instant::now();
            let r = s3::restore(b, &s.dir).await.map_err(|e| {
                format!(
                    "cannot restore from s3://{}/{}: {e}",
                    cfg.bucket, cfg.prefix
                )
            })?;
            tracing::info!(
                "restored {} from s3://{}/{}: {} objects, {} bytes, {} ms",
                s.dir.display(),
                cfg.bucket,
                cfg.prefix,
                r.objects,
                r.bytes,
                started.elapsed().as_millis()
            );
            upload_start = r.start;
            restored_pieces = r.pieces;
        }
    }
    let persister = {
        let started = std::time::Instant::now();
        let (mut p, loaded) =
            lattice_persist::Persister::recover(disk::LocalDir::new(&s.dir), &mut node, now)
                .map_err(|e| format!("cannot load the data directory {}: {e}", s.dir.display()))?;
        for note in &loaded.notes {
            tracing::warn!("recovery: {note}");
        }
        tracing::info!(
            "data loaded from {}: {} keys from the snapshot, {} log records, {} ms",
            s.dir.display(),
            loaded.keys,
            loaded.records,
            started.elapsed().as_millis()
        );
        if let (Some(b), lattice_persist::Start::Restored { last_seq, .. }) =
            (&bucket, &upload_start)
        {
            if loaded.last_seq != *last_seq {
                // Recovery stopped before the chain's end (a resume point): the records after
                // it are not part of this history; the bucket gets a new base instead.
                tracing::warn!(
                    "the bucket's log continues past record {} where recovery stopped; its pieces after it are removed and a new base is uploaded",
                    loaded.last_seq
                );
                b.drop_pieces_after(&restored_pieces, loaded.last_seq)
                    .await?;
                upload_start = lattice_persist::Start::LocalData;
            }
        }
        if let Some(cfg) = &s.s3 {
            let config = lattice_persist::UploadConfig {
                mode: cfg.mode,
                ..Default::default()
            };
            p.attach_uploader(
                lattice_persist::Uploader::new(config, upload_start),
                &mut node,
            );
        }
        if s.cluster.is_some() {
            tracing::info!(
                "clustered node: incarnation {} (writes stamped as replica {}); peers ship \
                 what it lacks",
                incarnation,
                dot_id
            );
        }
        Some(p)
    };
    let link_stats = Arc::new(LinkStats::default());
    let mut host = Host::new(node, persister, now, link_stats, loops.clone());
    let wake = Arc::new(tokio::sync::Notify::new());
    if bucket.is_some() {
        host.upload_wake = Some(wake.clone());
    }
    let shared = Arc::new(Shared::new(host, s.port));
    if let (Some(b), Some(cfg)) = (bucket, &s.s3) {
        tracing::info!(
            "uploading to s3://{}/{} (s3-durability {})",
            cfg.bucket,
            cfg.prefix,
            cfg.mode.name()
        );
        tokio::spawn(s3::run(shared.clone(), b, wake));
    }
    if let Some(port) = s.metrics_port {
        metrics::serve(shared.clone(), format!("{}:{port}", s.bind)).await?;
    }
    if let Some(mut c) = s.cluster.clone() {
        let (id, listen, peers) = (c.auth.node_id.0, c.listen.clone(), c.peers.join(","));
        let authenticated = c.auth.secret.is_some();
        if let Some(t) = &tls_configs {
            if let (Some(acceptor), Some(dialer)) = (&t.link_acceptor, &t.link_dialer) {
                c.tls = Some(cluster::LinkTls {
                    acceptor: acceptor.clone(),
                    dialer: dialer.clone(),
                });
            }
        }
        let over_tls = c.tls.is_some();
        cluster::start(shared.clone(), c).await?;
        tracing::info!(
            "cluster: node {id} listening for replicas on {listen}, dialing [{peers}], \
             cluster size {}, links {}{}",
            cluster_size,
            if authenticated {
                "authenticated"
            } else {
                "NOT authenticated (no secret)"
            },
            if over_tls {
                ", over TLS (peers must present a certificate signed by the CA)"
            } else {
                ""
            }
        );
    }
    for (index, seed) in seeds.into_iter().enumerate() {
        let event_loop = EventLoop::new(
            index,
            seed,
            shared.clone(),
            loops.clone(),
            if index == 0 {
                listeners.take().unwrap_or_default()
            } else {
                event_loop::Listeners::default()
            },
            client_tls.clone(),
            s.nap_us,
        )
        .map_err(|e| format!("cannot start event loop {index}: {e}"))?;
        std::thread::Builder::new()
            .name(format!("lattice-loop-{index}"))
            .spawn(move || {
                let run = std::panic::AssertUnwindSafe(|| event_loop.run());
                if std::panic::catch_unwind(run).is_err() {
                    // Its clients would hang unanswered: better to stop and be restarted.
                    eprintln!("lattice-server: event loop {index} panicked; aborting");
                    std::process::abort();
                }
            })
            .map_err(|e| format!("cannot start event loop {index}: {e}"))?;
    }
    tracing::info!(
        "lattice-server {} ready: listening on {}, data dir {}, {} event loops (Redis protocol 7.0)",
        env!("CARGO_PKG_VERSION"),
        addrs.join(" and "),
        s.dir.display(),
        s.threads
    );
    let signal = signals.wait().await;
    tracing::info!("received {signal}, shutting down");
    if s.cluster.is_some() {
        tracing::info!("cluster link stats: {:?}", shared.link_stats.snapshot());
    }
    let mut host = shared.host.lock();
    let now = host.now();
    host.shutdown(now)
}

struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Signals {
        use tokio::signal::unix::{signal, SignalKind};
        Signals {
            term: signal(SignalKind::terminate()).expect("SIGTERM handler"),
            int: signal(SignalKind::interrupt()).expect("SIGINT handler"),
        }
    }

    async fn wait(mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

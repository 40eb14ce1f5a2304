//! `lattice-difftest`: differential testing of lattice-server against redis-server.
//!
//! A seeded generator produces a command stream over a small shared keyspace; each command is
//! sent to both servers in turn and the replies are compared after normalisation (errors by
//! first word, unordered replies sorted, TTLs within a tolerance, ...). The first mismatch
//! stops the run (or the `--max-mismatches`th) and prints everything needed to reproduce it.

mod conn;
mod gen;
mod reply;
mod server;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;

use conn::Conn;
use gen::{Cmd, Cmp, Generator, Guard};
use reply::{equivalent_cmd, render_args, Reply};
use server::ServerGuard;

const HISTORY: usize = 20;

#[derive(Parser, Debug)]
#[command(
    name = "lattice-difftest",
    about = "Replays a seeded random command stream against lattice-server and redis-server and compares the replies"
)]
struct Opts {
    /// Seed of the command stream (the only source of randomness).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Number of commands to generate.
    #[arg(long, default_value_t = 10_000)]
    commands: u64,
    /// Comma-separated command families.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "strings,keys,expire,lists,hashes,sets,zsets,sort,tx"
    )]
    families: Vec<String>,
    /// lattice-server binary to start (default: next to this binary, target/release, PATH).
    #[arg(long)]
    lattice_bin: Option<PathBuf>,
    /// redis-server binary to start.
    #[arg(long, default_value = "redis-server")]
    redis_bin: PathBuf,
    /// Use an already running lattice server instead of starting one (its data is flushed).
    #[arg(long)]
    lattice_addr: Option<String>,
    /// Use an already running redis server instead of starting one (its data is flushed).
    #[arg(long)]
    redis_addr: Option<String>,
    /// Stop after this many mismatches (later ones may be consequences of the first).
    #[arg(long, default_value_t = 1)]
    max_mismatches: u64,
    /// Compare whole error messages instead of their first word only.
    #[arg(long)]
    exact_errors: bool,
    /// Print every command and both replies.
    #[arg(long)]
    verbose: bool,
}

fn main() -> ExitCode {
    let opts = Opts::parse();
    // Everything that owns a server lives inside run(), so the guards are dropped (servers
    // killed) before the process exits.
    match run(&opts) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("difftest: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// One side of the comparison: a connection and, if we started it, the server.
struct Side {
    label: &'static str,
    conn: Conn,
    _guard: Option<ServerGuard>,
}

fn open_side(
    label: &'static str,
    addr: &Option<String>,
    start: impl FnOnce() -> Result<ServerGuard, String>,
) -> Result<Side, String> {
    let (guard, addr) = match addr {
        Some(a) => (None, a.clone()),
        None => {
            let g = start()?;
            let a = g.addr.clone();
            (Some(g), a)
        }
    };
    let mut conn = Conn::connect(&addr, Duration::from_secs(10))
        .map_err(|e| format!("cannot connect to {label} at {addr}: {e}"))?;
    // Start from an empty keyspace (matters for external servers).
    let r = conn.call(&[b"FLUSHALL".to_vec()]);
    if !matches!(r, Reply::Simple(_)) {
        let r2 = conn.call(&[b"FLUSHDB".to_vec()]);
        if !matches!(r2, Reply::Simple(_)) {
            eprintln!(
                "difftest: warning: {label} answered FLUSHALL with {r} and FLUSHDB with {r2}"
            );
        }
    }
    Ok(Side {
        label,
        conn,
        _guard: guard,
    })
}

/// Runs a whole SCAN-like iteration (the cursor is `args[cursor]`) and returns the sorted set
/// of elements, or of (field, value) pairs with `pairs` as a flat array (or the first error).
fn scan_all(conn: &mut Conn, args: &[Vec<u8>], cursor: usize, pairs: bool) -> Reply {
    let mut args = args.to_vec();
    let group = if pairs { 2 } else { 1 };
    let mut seen: BTreeSet<Vec<Vec<u8>>> = BTreeSet::new();
    for _ in 0..100_000 {
        match conn.call(&args) {
            Reply::Array(parts) if parts.len() == 2 => {
                let next = match &parts[0] {
                    Reply::Bulk(c) => c.clone(),
                    other => {
                        return Reply::Other(format!("SCAN cursor is not a bulk string: {other}"))
                    }
                };
                let items = match &parts[1] {
                    Reply::Array(items) => items,
                    other => {
                        return Reply::Other(format!("SCAN elements are not an array: {other}"))
                    }
                };
                if items.len() % group != 0 {
                    return Reply::Other(format!(
                        "SCAN returned an odd number of elements: {}",
                        Reply::Array(items.clone())
                    ));
                }
                for g in items.chunks(group) {
                    let mut one = Vec::with_capacity(group);
                    for it in g {
                        match it {
                            Reply::Bulk(k) => one.push(k.clone()),
                            other => {
                                return Reply::Other(format!(
                                    "SCAN returned a non-bulk element: {other}"
                                ))
                            }
                        }
                    }
                    seen.insert(one);
                }
                if next == b"0" {
                    return Reply::Array(seen.into_iter().flatten().map(Reply::Bulk).collect());
                }
                args[cursor] = next;
            }
            Reply::Error(e) => return Reply::Error(e),
            Reply::Io(e) => return Reply::Io(e),
            other => return Reply::Other(format!("unexpected SCAN reply: {other}")),
        }
    }
    Reply::Other("SCAN did not finish within 100000 calls".into())
}

/// Checks a guard on one side: `Ok(true)` when it holds, with the reply it was judged on.
fn check_guard(side: &mut Side, guard: Guard, args: &[Vec<u8>]) -> (bool, Reply) {
    match guard {
        Guard::UniformScores { key } => {
            let Some(k) = args.get(key) else {
                return (true, Reply::Nil); // an arity error anyway
            };
            let r = side.conn.call(&[
                b"ZRANGE".to_vec(),
                k.clone(),
                b"0".to_vec(),
                b"-1".to_vec(),
                b"WITHSCORES".to_vec(),
            ]);
            let ok = match &r {
                Reply::Array(items) => {
                    let scores: BTreeSet<String> = items
                        .iter()
                        .skip(1)
                        .step_by(2)
                        .map(|s| match s {
                            Reply::Bulk(b) => match String::from_utf8_lossy(b).parse::<f64>() {
                                // -0 and 0 are the same score: 0.0 == -0.0.
                                Ok(f) => format!("{:?}", if f == 0.0 { 0.0 } else { f }),
                                Err(_) => String::from_utf8_lossy(b).into_owned(),
                            },
                            other => other.to_string(),
                        })
                        .collect();
                    scores.len() <= 1
                }
                Reply::Io(_) => false,
                // WRONGTYPE or no key at all: the command's own reply is defined.
                _ => true,
            };
            (ok, r)
        }
    }
}

/// Runs one command on one side (after its `pre` commands), and its probe right after it (if
/// it has one).
fn execute(side: &mut Side, cmd: &Cmd, args: &[Vec<u8>]) -> (Reply, Option<Reply>) {
    for p in &cmd.pre {
        if let Reply::Io(e) = side.conn.call(p) {
            return (Reply::Io(e), None);
        }
    }
    let reply = match cmd.cmp {
        Cmp::ScanAll => scan_all(&mut side.conn, args, 1, false),
        Cmp::ScanKey { pairs } => scan_all(&mut side.conn, args, 2, pairs),
        _ => side.conn.call(args),
    };
    let probe = cmd.probe.as_ref().map(|p| side.conn.call(&p.args));
    (reply, probe)
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:,=+@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn repro_line(opts: &Opts, commands: u64) -> String {
    let prog = std::env::args()
        .next()
        .unwrap_or_else(|| "lattice-difftest".into());
    let mut parts = vec![
        shell_quote(&prog),
        "--seed".into(),
        opts.seed.to_string(),
        "--commands".into(),
        commands.to_string(),
        "--families".into(),
        shell_quote(&opts.families.join(",")),
    ];
    if let Some(b) = &opts.lattice_bin {
        parts.push("--lattice-bin".into());
        parts.push(shell_quote(&b.display().to_string()));
    }
    if opts.redis_bin.as_os_str() != "redis-server" {
        parts.push("--redis-bin".into());
        parts.push(shell_quote(&opts.redis_bin.display().to_string()));
    }
    if let Some(a) = &opts.lattice_addr {
        parts.push("--lattice-addr".into());
        parts.push(shell_quote(a));
    }
    if let Some(a) = &opts.redis_addr {
        parts.push("--redis-addr".into());
        parts.push(shell_quote(a));
    }
    if opts.exact_errors {
        parts.push("--exact-errors".into());
    }
    parts.push("--verbose".into());
    parts.join(" ")
}

/// The slowest reply seen from one side (a stall shows up here even without a mismatch).
#[derive(Default)]
struct Slowest {
    time: Duration,
    idx: u64,
    cmd: String,
}

impl Slowest {
    fn note(&mut self, t: Duration, idx: u64, cmd: &str) {
        if t > self.time {
            self.time = t;
            self.idx = idx;
            self.cmd = cmd.to_string();
        }
    }
}

/// Returns the number of mismatches.
fn run(opts: &Opts) -> Result<u64, String> {
    let families = gen::select(&opts.families)?;
    let lattice_bin = opts
        .lattice_bin
        .clone()
        .unwrap_or_else(server::default_lattice_bin);

    let mut lattice = open_side("lattice", &opts.lattice_addr, || {
        server::start_lattice(&lattice_bin)
    })?;
    let mut redis = open_side("redis", &opts.redis_addr, || {
        server::start_redis(&opts.redis_bin)
    })?;

    let mut generator = Generator::new(opts.seed, families);
    let mut history: VecDeque<String> = VecDeque::with_capacity(HISTORY + 1);
    let mut compared = 0u64;
    let mut mismatches = 0u64;
    let mut executed = 0u64;
    let mut skipped = 0u64;
    let mut by_command: BTreeMap<String, u64> = BTreeMap::new();
    let mut slowest = [Slowest::default(), Slowest::default()];
    let started = Instant::now();

    for idx in 0..opts.commands {
        let cmd = generator.next_cmd();
        let args = cmd.resolve(now_ms());
        let text = render_args(&args);
        let shown = if cmd.cmp.is_scan() {
            format!("{text}  (full SCAN iteration)")
        } else {
            text.clone()
        };
        if let Some(g) = cmd.guard {
            let (ok_a, ga) = check_guard(&mut lattice, g, &args);
            let (ok_b, gb) = check_guard(&mut redis, g, &args);
            if !(ok_a && ok_b) {
                skipped += 1;
                if opts.verbose {
                    println!("#{idx} {shown}\n    (skipped: {g:?} does not hold)");
                }
                if ok_a != ok_b || matches!(ga, Reply::Io(_)) || matches!(gb, Reply::Io(_)) {
                    // The sides disagree about the state itself.
                    mismatches += 1;
                    println!("=== MISMATCH #{mismatches} (guard {g:?} of the next command) ===");
                    println!("seed:      {}", opts.seed);
                    println!("command #: {idx} (0-based)");
                    println!("command:   {shown}");
                    println!("{:<8}:  {ga}", lattice.label);
                    println!("{:<8}:  {gb}", redis.label);
                    println!("reproduce: {}", repro_line(opts, idx + 1));
                    if mismatches >= opts.max_mismatches {
                        break;
                    }
                }
                history.push_back(format!("{shown}  (skipped)"));
                if history.len() > HISTORY {
                    history.pop_front();
                }
                continue;
            }
        }
        let t0 = Instant::now();
        let (a, pa) = execute(&mut lattice, &cmd, &args);
        let t1 = Instant::now();
        let (b, pb) = execute(&mut redis, &cmd, &args);
        let t2 = Instant::now();
        slowest[0].note(t1 - t0, idx, &shown);
        slowest[1].note(t2 - t1, idx, &shown);
        executed += 1;
        let probe_text = cmd
            .probe
            .as_ref()
            .map(|p| render_args(&p.args))
            .unwrap_or_default();
        if opts.verbose {
            println!(
                "#{idx} {shown}\n    {}: {a}\n    {}: {b}",
                lattice.label, redis.label
            );
            if let (Some(x), Some(y)) = (&pa, &pb) {
                println!(
                    "    probe {probe_text}\n      {}: {x}\n      {}: {y}",
                    lattice.label, redis.label
                );
            }
        }
        if cmd.cmp != Cmp::Skip {
            compared += 1;
        }
        let same = equivalent_cmd(&cmd, &a, pa.as_ref(), &b, pb.as_ref(), opts.exact_errors);
        if !same {
            mismatches += 1;
            let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
            *by_command.entry(name).or_default() += 1;
            println!("=== MISMATCH #{mismatches} ===");
            println!("seed:      {}", opts.seed);
            println!("command #: {idx} (0-based)");
            println!("command:   {shown}");
            println!("compare:   {:?}", cmd.cmp);
            for p in &cmd.pre {
                println!("sent before it (reply ignored): {}", render_args(p));
            }
            println!("{:<8}:  {a}", lattice.label);
            println!("{:<8}:  {b}", redis.label);
            if let (Some(x), Some(y)) = (&pa, &pb) {
                println!("probe:     {probe_text}");
                println!("{:<8}:  {x}", lattice.label);
                println!("{:<8}:  {y}", redis.label);
            }
            if cmd.cmp == Cmp::Exec {
                println!("queued compared as: {:?}", cmd.sub);
            }
            println!("last {} commands before it:", history.len());
            for (i, h) in history.iter().enumerate() {
                let n = idx as i64 - history.len() as i64 + i as i64;
                println!("  #{n} {h}");
            }
            println!("reproduce: {}", repro_line(opts, idx + 1));
            let io = [Some(&a), Some(&b), pa.as_ref(), pb.as_ref()]
                .iter()
                .any(|r| matches!(r, Some(Reply::Io(_))));
            if io {
                println!("(a connection failed; stopping)");
            }
            if io || mismatches >= opts.max_mismatches {
                break;
            }
        }
        history.push_back(shown);
        if history.len() > HISTORY {
            history.pop_front();
        }
    }

    if by_command.len() > 1 || mismatches > 1 {
        let mut v: Vec<(String, u64)> = by_command.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let list: Vec<String> = v.iter().map(|(k, n)| format!("{k}={n}")).collect();
        println!("difftest: mismatches by command: {}", list.join(" "));
    }
    for (side, slow) in [(&lattice, &slowest[0]), (&redis, &slowest[1])] {
        println!(
            "difftest: slowest {} reply: {} ms (#{} {})",
            side.label,
            slow.time.as_millis(),
            slow.idx,
            slow.cmd
        );
    }
    println!("difftest: elapsed {:.1}s", started.elapsed().as_secs_f64());
    println!(
        "difftest: seed={} commands={} skipped={} mismatches={}",
        opts.seed, executed, skipped, mismatches
    );
    println!("{} passed, {} failed", compared - mismatches, mismatches);
    Ok(mismatches)
}

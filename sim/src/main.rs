//! `lattice-sim`: deterministic simulation of Lattice nodes and clients.
//!
//! ```text
//! lattice-sim --seed 7                 one run; the last line carries trace=<digest>
//! lattice-sim --seeds 0..200           many runs on every core, then a coverage summary
//! lattice-sim --seed 7 --trace         every event, one per line
//! lattice-sim --seeds 0..100 --determinism   each seed twice, digests compared
//! ```
//! A failing run prints `seed=N`, the command that reproduces it and the tail of its trace, and
//! the process exits with status 1.

mod against;
#[cfg(test)]
mod blocking;
mod bucket;
#[cfg(test)]
mod busy;
mod check;
mod client;
mod clock;
mod cluster;
mod config;
mod durability;
mod fault;
mod model;
mod net;
mod process;
mod rng;
mod trace;
mod workload;
mod world;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Parser;

use config::RunConfig;
use fault::{FaultClass, FaultCounts};
use trace::Tracer;
use world::World;

#[derive(Parser, Debug)]
#[command(
    name = "lattice-sim",
    about = "Deterministic simulation of Lattice: seeded swarms of nodes and clients over a faulty network, every reply checked against a reference model"
)]
struct Args {
    /// Run one seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run a range of seeds, `A..B` (B excluded).
    #[arg(long)]
    seeds: Option<String>,
    /// Print every event of the run, one per line.
    #[arg(long)]
    trace: bool,
    /// Run each seed twice and compare the traces event by event.
    #[arg(long)]
    determinism: bool,
    /// Worker threads for --seeds (default: every core).
    #[arg(long)]
    jobs: Option<usize>,
    /// Fail on known node divergences from Redis too (see docs/TESTING.md).
    #[arg(long)]
    strict: bool,
    /// Replicated mode: 3-5 replicas of one cluster, a workload of concurrent writes checked
    /// by convergence, counter, set, register and list checkers at the end (docs/TESTING.md).
    #[arg(long)]
    replicated: bool,
    /// Partitioned mode: replicated mode with fewer owners per slot than nodes (4-5 nodes,
    /// replication factor 2..nodes-1), clients spread over every node: commands are forwarded
    /// to owners; at the end every key is read through every node and the owners must agree.
    #[arg(long)]
    partitioned: bool,
    /// Membership mode: partitioned mode with 5 nodes and 1..=3 owners per slot, in which a
    /// node leaves the cluster (CLUSTER LEAVE) under the faults; its slot groups must reach
    /// their new owners with every acknowledged write, and every node must be settled at the
    /// end (docs/TESTING.md, "Membership mode").
    #[arg(long)]
    membership: bool,
    /// Durability mode: one node with a simulated disk, crashed and restarted under writes
    /// (lost unsynced bytes, torn writes, disk-full periods), every acknowledged write checked
    /// against its appendfsync policy; each seed runs twice and must replay identically.
    #[arg(long)]
    durability: bool,
    /// Print each run's options.
    #[arg(long, short)]
    verbose: bool,
    /// Events shown after a failure.
    #[arg(long, default_value_t = 60)]
    tail: usize,
    /// Check the reference model itself: run the workload against redis-server on this port
    /// (one connection, one command at a time) and compare every reply with the model.
    #[arg(long, value_name = "PORT")]
    against_redis: Option<u16>,
    /// Commands for --against-redis.
    #[arg(long, default_value_t = 20_000)]
    ops: u64,
    /// Run a node's full invariant check after one in N of its steps (default: 1, and 32 in
    /// --replicated runs, whose checks walk every key's replicated state). `--check-every 1`
    /// finds the exact step that broke an invariant a strided run reported; the events and
    /// the trace digest are the same whatever N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    check_every: Option<u64>,
}

/// `--partitioned` was given (for the reproduction commands printed).
static PARTITIONED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// `--membership` was given.
static MEMBERSHIP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

thread_local! {
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

struct RunOpts {
    strict: bool,
    replicated: bool,
    partitioned: bool,
    membership: bool,
    print_trace: bool,
    record_hashes: bool,
    capture: Option<(u64, u64)>,
    tail: usize,
    check_every: Option<u64>,
}

struct RunResult {
    seed: u64,
    cfg: RunConfig,
    digest: String,
    failure: Option<String>,
    tail: Vec<String>,
    stats: world::RunStats,
    faults: FaultCounts,
    known: BTreeMap<&'static str, u64>,
    scans: u64,
    wall: Duration,
    /// CPU time the run's thread spent on a core, where the system tells (Linux).
    cpu: Option<Duration>,
    events: u64,
    hashes: Option<Vec<u64>>,
    captured: Vec<String>,
}

fn run_seed(seed: u64, o: &RunOpts) -> RunResult {
    let mut cfg = if o.membership {
        RunConfig::membership_from_seed(seed)
    } else if o.partitioned {
        RunConfig::partitioned_from_seed(seed)
    } else if o.replicated {
        RunConfig::replicated_from_seed(seed)
    } else {
        RunConfig::from_seed(seed)
    };
    if let Some(n) = o.check_every {
        cfg.check_every = n;
    }
    let mut tracer = Tracer::new(o.tail.max(1));
    tracer.print = o.print_trace;
    if o.record_hashes {
        tracer.hashes = Some(Vec::new());
    }
    tracer.capture = o.capture;
    let mut world = World::new(cfg.clone(), o.strict, tracer);
    let started = Instant::now();
    let cpu_before = thread_cpu();
    LAST_PANIC.with(|p| p.borrow_mut().take());
    let outcome = catch_unwind(AssertUnwindSafe(|| world.run()));
    let wall = started.elapsed();
    let cpu = thread_cpu()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let mut failure = world.failure.clone();
    if outcome.is_err() {
        let msg = LAST_PANIC
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| "unknown panic".into());
        failure = Some(format!("panic at t={}us: {msg}", world.now()));
    }
    RunResult {
        seed,
        digest: world.tracer.digest(),
        failure,
        tail: world.tracer.tail(o.tail),
        stats: world.stats.clone(),
        faults: world.faults.clone(),
        known: world.known_hits().clone(),
        scans: world.scan_iterations(),
        wall,
        cpu,
        events: world.tracer.events(),
        hashes: world.tracer.hashes.take(),
        captured: std::mem::take(&mut world.tracer.captured),
        cfg,
    }
}

fn repro(seed: u64, strict: bool, replicated: bool) -> String {
    let planted: Vec<&str> = [
        (cfg!(feature = "planted-bug"), "planted-bug"),
        (cfg!(feature = "planted-router-bug"), "planted-router-bug"),
        (cfg!(feature = "planted-wakeup-bug"), "planted-wakeup-bug"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    let features = if planted.is_empty() {
        String::new()
    } else {
        format!(" --features {}", planted.join(","))
    };
    let strict = if strict { " --strict" } else { "" };
    let replicated = if replicated { " --replicated" } else { "" };
    let replicated = if MEMBERSHIP.load(std::sync::atomic::Ordering::Relaxed) {
        " --membership"
    } else if PARTITIONED.load(std::sync::atomic::Ordering::Relaxed) {
        " --partitioned"
    } else {
        replicated
    };
    let features = if cfg!(feature = "planted-move-bug") {
        " --features planted-move-bug".to_string()
    } else {
        features
    };
    format!("cargo run --release -p lattice-sim{features} --{replicated} --seed {seed}{strict}")
}

/// Time the calling thread has run on a core (`/proc/thread-self/schedstat`, in ns): unlike
/// wall time it does not grow while other processes hold the machine's cores, so the swarm's
/// "per core" rate means the same on a busy machine as on a quiet one.
fn thread_cpu() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

fn rate(ops: u64, wall: Duration) -> u64 {
    (ops as f64 / wall.as_secs_f64().max(1e-9)) as u64
}

/// The result line: always ends with `trace=<digest>`.
fn result_line(r: &RunResult) -> String {
    let status = if r.failure.is_some() { "FAILED" } else { "ok" };
    let known = if r.known.is_empty() {
        String::new()
    } else {
        let k: Vec<String> = r.known.iter().map(|(b, n)| format!("{b}={n}")).collect();
        format!(" known-divergences=[{}]", k.join(","))
    };
    let repl = if r.cfg.replicated {
        let hot = if r.cfg.partitioned() {
            format!(
                " hot-copies={} hot-local-reads={}",
                r.stats.hot_copies, r.stats.hot_local_reads
            )
        } else {
            String::new()
        };
        format!(
            " replicated peer-msgs={}/{} acked={} indeterminate={}{hot}",
            r.stats.peer_delivered, r.stats.peer_sent, r.stats.acked, r.stats.indeterminate
        )
    } else {
        String::new()
    };
    format!(
        "seed={} {status}{repl} nodes={} clients={} ops={} requests={} events={} virtual={:.1}s wall={:.2}s ops/s={} reconnects={} scan-iterations={} faults=[{}]{known} trace={}",
        r.seed,
        r.cfg.nodes,
        r.cfg.clients,
        r.stats.ops,
        r.stats.requests,
        r.events,
        r.stats.virtual_us as f64 / 1e6,
        r.wall.as_secs_f64(),
        rate(r.stats.ops, r.wall),
        r.stats.connects,
        r.scans,
        r.faults.summary(),
        r.digest
    )
}

fn report(r: &RunResult, strict: bool, verbose: bool) -> String {
    let mut out = String::new();
    if verbose && r.failure.is_none() {
        out.push_str(&format!("seed={} options: {}\n", r.seed, r.cfg.describe()));
    }
    if let Some(f) = &r.failure {
        out.push_str(&format!("seed={} FAILED: {f}\n", r.seed));
        out.push_str(&format!(
            "  reproduce: {}\n",
            repro(r.seed, strict, r.cfg.replicated)
        ));
        out.push_str(&format!("  options: {}\n", r.cfg.describe()));
        if r.cfg.check_every > 1 {
            out.push_str(&format!(
                "  invariants were checked every {} steps of a node: add --check-every 1 to stop at the first step that breaks one\n",
                r.cfg.check_every
            ));
        }
        out.push_str(&format!("  last {} events:\n", r.tail.len()));
        for l in &r.tail {
            out.push_str("    ");
            out.push_str(l);
            out.push('\n');
        }
    }
    out.push_str(&result_line(r));
    out.push('\n');
    out
}

fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("--seeds wants A..B, got {s:?}"))?;
    let a: u64 = a.trim().parse().map_err(|e| format!("{a:?}: {e}"))?;
    let b: u64 = b.trim().parse().map_err(|e| format!("{b:?}: {e}"))?;
    if b <= a {
        return Err(format!("empty range {s}"));
    }
    Ok((a, b))
}

/// Runs `seed` twice; `Err` describes the first event where the runs differ.
fn determinism(seed: u64, base: &RunOpts) -> (RunResult, Result<(), String>) {
    let o = RunOpts {
        record_hashes: true,
        ..*base
    };
    let a = run_seed(seed, &o);
    let b = run_seed(seed, &o);
    let (ha, hb) = (
        a.hashes.as_deref().unwrap_or(&[]),
        b.hashes.as_deref().unwrap_or(&[]),
    );
    if a.digest == b.digest && ha == hb {
        return (a, Ok(()));
    }
    let i = ha
        .iter()
        .zip(hb)
        .position(|(x, y)| x != y)
        .unwrap_or(ha.len().min(hb.len())) as u64;
    let window = RunOpts {
        capture: Some((i.saturating_sub(3), i + 1)),
        record_hashes: false,
        ..*base
    };
    let ca = run_seed(seed, &window).captured;
    let cb = run_seed(seed, &window).captured;
    let mut msg = format!(
        "determinism: seed={seed} runs differ at event #{i} (digests {} vs {})\n  first run:\n",
        a.digest, b.digest
    );
    for l in ca {
        msg.push_str(&format!("    {l}\n"));
    }
    msg.push_str("  second run:\n");
    for l in cb {
        msg.push_str(&format!("    {l}\n"));
    }
    (a, Err(msg))
}

fn main() -> ExitCode {
    let args = Args::parse();
    std::panic::set_hook(Box::new(|info| {
        let msg = format!("{info}");
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(msg));
    }));
    if let Some(port) = args.against_redis {
        let seed = args.seed.unwrap_or(1);
        return match against::run(port, seed, args.ops) {
            Ok(0) => {
                println!(
                    "against-redis seed={seed}: {} commands, model agrees with redis-server",
                    args.ops
                );
                ExitCode::SUCCESS
            }
            Ok(n) => {
                println!("against-redis seed={seed}: {n} mismatches");
                ExitCode::from(1)
            }
            Err(e) => {
                eprintln!("against-redis: {e}");
                ExitCode::from(2)
            }
        };
    }
    let (lo, hi) = match (&args.seed, &args.seeds) {
        (Some(s), None) => (*s, *s + 1),
        (None, Some(r)) => match parse_range(r) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("give --seed N or --seeds A..B");
            return ExitCode::from(2);
        }
    };
    if args.durability {
        return durability_swarm(lo, hi, args.jobs);
    }
    PARTITIONED.store(args.partitioned, std::sync::atomic::Ordering::Relaxed);
    MEMBERSHIP.store(args.membership, std::sync::atomic::Ordering::Relaxed);
    let opts = RunOpts {
        strict: args.strict,
        replicated: args.replicated || args.partitioned || args.membership,
        partitioned: args.partitioned || args.membership,
        membership: args.membership,
        print_trace: args.trace,
        record_hashes: false,
        capture: None,
        tail: args.tail,
        check_every: args.check_every,
    };
    let single = hi - lo == 1;
    if single {
        let (r, det) = if args.determinism {
            let (r, d) = determinism(lo, &opts);
            (r, Some(d))
        } else {
            (run_seed(lo, &opts), None)
        };
        let mut failed = r.failure.is_some();
        if let Some(Err(msg)) = &det {
            print!("{msg}");
            failed = true;
        }
        print!("{}", report(&r, args.strict, args.verbose));
        return if failed {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        };
    }

    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(RunResult, Option<String>)>> = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                std::panic::set_hook(Box::new(|info| {
                    let msg = format!("{info}");
                    LAST_PANIC.with(|p| *p.borrow_mut() = Some(msg));
                }));
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as u64;
                    let seed = lo + i;
                    if seed >= hi {
                        break;
                    }
                    let (r, det) = if args.determinism {
                        let (r, d) = determinism(seed, &opts);
                        (r, d.err())
                    } else {
                        (run_seed(seed, &opts), None)
                    };
                    let mut text = String::new();
                    if let Some(d) = &det {
                        text.push_str(d);
                    }
                    text.push_str(&report(&r, args.strict, args.verbose));
                    {
                        let mut out = std::io::stdout().lock();
                        let _ = out.write_all(text.as_bytes());
                        let _ = out.flush();
                    }
                    results.lock().expect("results").push((r, det));
                }
            });
        }
    });
    let elapsed = started.elapsed();
    let mut results = results.into_inner().expect("results");
    results.sort_by_key(|(r, _)| r.seed);
    summary(
        &results,
        elapsed,
        jobs,
        args.strict,
        args.replicated || args.partitioned || args.membership,
    )
}

fn summary(
    results: &[(RunResult, Option<String>)],
    elapsed: Duration,
    jobs: usize,
    strict: bool,
    replicated: bool,
) -> ExitCode {
    let failed: Vec<u64> = results
        .iter()
        .filter(|(r, d)| r.failure.is_some() || d.is_some())
        .map(|(r, _)| r.seed)
        .collect();
    let ops: u64 = results.iter().map(|(r, _)| r.stats.ops).sum();
    // CPU time of the runs where known (their wall time otherwise): ops per core-second.
    let cpu: Duration = results.iter().map(|(r, _)| r.cpu.unwrap_or(r.wall)).sum();
    println!();
    println!(
        "fault coverage over {} seeds (seeds exercising it, total count):",
        results.len()
    );
    let mut missing = Vec::new();
    for c in FaultClass::ALL {
        let seeds = results.iter().filter(|(r, _)| r.faults.get(*c) > 0).count();
        let total: u64 = results.iter().map(|(r, _)| r.faults.get(*c)).sum();
        println!("  {:<28} {:>5} seeds {:>10}", c.name(), seeds, total);
        if seeds == 0 && !c.optional() {
            missing.push(c.name());
        }
    }
    if missing.is_empty() {
        println!("  every fault class was exercised");
    } else {
        println!("  NOT exercised: {}", missing.join(", "));
    }
    let mut known: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for (r, _) in results {
        for (b, n) in &r.known {
            let e = known.entry(b).or_insert((0, 0));
            e.0 += 1;
            e.1 += n;
        }
    }
    if !known.is_empty() {
        println!("known node divergences from Redis 7.0 tolerated (see docs/TESTING.md; --strict fails on them):");
        for (b, (s, n)) in &known {
            println!("  {b:<36} {s:>5} seeds {n:>8} replies");
        }
    }
    for s in &failed {
        println!(
            "FAILED seed={s}: reproduce with {}",
            repro(*s, strict, replicated)
        );
    }
    if !replicated {
        let mut counts = vec![0u64; workload::FAMILIES.len()];
        for (r, _) in results {
            for (c, n) in counts.iter_mut().zip(&r.stats.family_commands) {
                *c += n;
            }
        }
        let per: Vec<String> = workload::FAMILIES
            .iter()
            .zip(&counts)
            .map(|(f, n)| format!("{}={n}", f.name))
            .collect();
        let pushes: u64 = results.iter().map(|(r, _)| r.stats.pushes).sum();
        println!(
            "commands generated per family: {}; pub/sub pushes checked: {pushes}",
            per.join(" ")
        );
    }
    let sum =
        |f: fn(&world::RunStats) -> u64| -> u64 { results.iter().map(|(r, _)| f(&r.stats)).sum() };
    println!(
        "back-pressure: sockets filled {}, connections read again when their socket drained {}, closed over the push bound {}",
        sum(|s| s.socket_full),
        sum(|s| s.wakeups),
        sum(|s| s.push_cutoffs)
    );
    let mut all = xxhash_rust::xxh3::Xxh3::new();
    for (r, _) in results {
        all.update(r.digest.as_bytes());
    }
    if replicated {
        println!(
            "replicated: peer messages delivered {} of {} sent; requests acknowledged {}, indeterminate {}",
            sum(|s| s.peer_delivered),
            sum(|s| s.peer_sent),
            sum(|s| s.acked),
            sum(|s| s.indeterminate)
        );
        if PARTITIONED.load(std::sync::atomic::Ordering::Relaxed) {
            let with = results
                .iter()
                .filter(|(r, _)| r.stats.hot_copies > 0)
                .count();
            println!(
                "hot keys: {} copies taken in {with} seeds, {} holders registered, {} reads served from copies",
                sum(|s| s.hot_copies),
                sum(|s| s.hot_holders),
                sum(|s| s.hot_local_reads)
            );
        }
    }
    println!(
        "seeds={} failed={} ops={} wall={:.1}s jobs={} ops/s={} (per core {}) trace={:016x}",
        results.len(),
        failed.len(),
        ops,
        elapsed.as_secs_f64(),
        jobs,
        rate(ops, elapsed),
        rate(ops, cpu),
        all.digest()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `--durability`: seeds in parallel, each run twice (the digests must match).
fn durability_swarm(lo: u64, hi: u64, jobs: Option<usize>) -> ExitCode {
    let jobs = jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
        .max(1);
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let totals = Mutex::new((0u64, 0u64, 0u64, 0u64, 0u64, 0u64));
    let started = Instant::now();
    let features = if cfg!(feature = "planted-durability-bug") {
        " --features planted-durability-bug"
    } else if cfg!(feature = "planted-upload-bug") {
        " --features planted-upload-bug"
    } else {
        ""
    };
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let seed = lo + next.fetch_add(1, Ordering::Relaxed) as u64;
                if seed >= hi {
                    break;
                }
                let guarded = |seed| {
                    catch_unwind(AssertUnwindSafe(|| durability::run(seed))).unwrap_or_else(|_| {
                        let msg = LAST_PANIC
                            .with(|p| p.borrow_mut().take())
                            .unwrap_or_else(|| "unknown panic".into());
                        Err((durability::Summary::default(), format!("panic: {msg}")))
                    })
                };
                let first = guarded(seed);
                let again = guarded(seed);
                let line = match (&first, &again) {
                    (Ok(a), Ok(b)) if a.digest != b.digest => {
                        failures.lock().expect("lock").push(seed);
                        format!("seed={seed} FAILED: not deterministic ({:016x} vs {:016x})", a.digest, b.digest)
                    }
                    (Ok(a), _) => {
                        let mut t = totals.lock().expect("lock");
                        t.0 += a.crashes;
                        t.1 += a.acked;
                        t.2 += a.torn;
                        t.3 += a.full_periods;
                        t.4 += a.refused;
                        t.5 += a.snapshots;
                        format!(
                            "seed={seed} ok policy={} s3={} crashes={} acked={} refused={} torn={} disk_full={} snapshots={} bucket_restores={} digest={:016x}",
                            a.policy, a.s3, a.crashes, a.acked, a.refused, a.torn, a.full_periods, a.snapshots, a.bucket_restores, a.digest
                        )
                    }
                    (Err((a, e)), _) => {
                        failures.lock().expect("lock").push(seed);
                        format!(
                            "seed={seed} FAILED policy={} s3={}: {e}\n  replay: cargo run --release -p lattice-sim{features} -- --durability --seed {seed}",
                            a.policy, a.s3
                        )
                    }
                };
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
            });
        }
    });
    let failures = failures.into_inner().expect("lock");
    let t = totals.into_inner().expect("lock");
    println!(
        "durability: {} seeds in {:.1}s, {} failed; {} crashes, {} acknowledged writes checked, {} torn writes, {} disk-full periods, {} writes refused (MISCONF), {} snapshots",
        hi - lo,
        started.elapsed().as_secs_f64(),
        failures.len(),
        t.0,
        t.1,
        t.2,
        t.3,
        t.4,
        t.5
    );
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("failed seeds: {failures:?}");
        ExitCode::from(1)
    }
}

//! `lattice-loadgen`: a closed-loop load of GETs and SETs whose keys follow a Zipf
//! distribution, spread over several servers, reporting throughput and read latency every
//! second and for the whole run. It exists for the hot-key benchmark (issue 18): what
//! redis-benchmark cannot do is skew its keys.
//!
//! Each thread owns one connection to one of `--ports` (round robin) and sends one command at
//! a time (pipeline 1), so a reply's latency is the time from its request's write to the end
//! of its read. Keys are `key:%012d`, redis-benchmark's format, so a keyspace loaded by
//! either tool is read by the other. The random stream is seeded: the same arguments give the
//! same sequence of keys per thread.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Parser, Debug)]
#[command(about = "Zipf GET/SET load against Redis-protocol servers")]
struct Args {
    /// Comma-separated ports on 127.0.0.1; threads connect to them in turn.
    #[arg(long, value_delimiter = ',')]
    ports: Vec<u16>,
    /// Number of distinct keys (ranks 0..keys).
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Zipf exponent; 0 is uniform.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Added (mod keys) to each drawn rank, so a second phase makes other keys hot.
    #[arg(long, default_value_t = 0)]
    key_offset: u64,
    /// Fraction of commands that are SETs.
    #[arg(long, default_value_t = 0.1)]
    write_ratio: f64,
    #[arg(long, default_value_t = 8)]
    threads: usize,
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    #[arg(long, default_value_t = 64)]
    value_size: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Instead of the Zipf load, SET every key once (pipelines of 64) and exit.
    #[arg(long)]
    load: bool,
    /// Prefix of each per-second line and of the summary (for a driver that runs phases).
    #[arg(long, default_value = "load")]
    label: String,
}

/// Cumulative Zipf distribution over `n` ranks, drawn by binary search. 8 bytes per rank: 8 MB
/// for a million keys, built once.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: u64, s: f64) -> Zipf {
        let mut cdf = Vec::with_capacity(n as usize);
        let mut sum = 0.0;
        for rank in 1..=n {
            sum += 1.0 / (rank as f64).powf(s);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Zipf { cdf }
    }

    fn draw(&self, rng: &mut ChaCha8Rng) -> u64 {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1) as u64
    }
}

fn key(rank: u64) -> String {
    format!("key:{rank:012}")
}

fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Reads one reply; returns whether it was an error (its text is printed once per thread by
/// the caller). Arrays are not expected from GET and SET.
fn read_reply(r: &mut BufReader<TcpStream>, line: &mut Vec<u8>) -> std::io::Result<Option<String>> {
    line.clear();
    r.read_until(b'\n', line)?;
    if line.len() < 3 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "short reply",
        ));
    }
    match line[0] {
        b'+' | b':' => Ok(None),
        b'-' => Ok(Some(
            String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned(),
        )),
        b'$' => {
            let n: i64 = std::str::from_utf8(&line[1..line.len() - 2])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(-1);
            if n >= 0 {
                let mut body = vec![0u8; n as usize + 2];
                r.read_exact(&mut body)?;
            }
            Ok(None)
        }
        other => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("unexpected reply type {:?}", other as char),
        )),
    }
}

#[derive(Default)]
struct Second {
    ops: u64,
    errors: u64,
    reads: Option<Histogram<u64>>,
}

fn new_histogram() -> Histogram<u64> {
    // Microseconds, 1 us to 60 s, 3 significant digits.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

fn load(args: &Args) -> std::io::Result<()> {
    let value = vec![b'x'; args.value_size];
    let threads: Vec<_> = (0..args.threads.max(1))
        .map(|t| {
            let port = args.ports[t % args.ports.len()];
            let (keys, n, value) = (args.keys, args.threads.max(1) as u64, value.clone());
            std::thread::spawn(move || -> std::io::Result<u64> {
                let stream = TcpStream::connect(("127.0.0.1", port))?;
                stream.set_nodelay(true)?;
                let mut w = stream.try_clone()?;
                let mut r = BufReader::new(stream);
                let (mut out, mut line, mut errors) = (Vec::new(), Vec::new(), 0u64);
                let mine: Vec<u64> = (t as u64..keys).step_by(n as usize).collect();
                for chunk in mine.chunks(64) {
                    out.clear();
                    for &rank in chunk {
                        command(&mut out, &[b"SET", key(rank).as_bytes(), &value]);
                    }
                    w.write_all(&out)?;
                    for _ in chunk {
                        if let Some(e) = read_reply(&mut r, &mut line)? {
                            if errors == 0 {
                                eprintln!("loadgen: SET error: {e}");
                            }
                            errors += 1;
                        }
                    }
                }
                Ok(errors)
            })
        })
        .collect();
    let mut errors = 0;
    for t in threads {
        errors += t.join().expect("load thread")?;
    }
    println!("{} loaded keys={} errors={errors}", args.label, args.keys);
    if errors > 0 {
        std::process::exit(1);
    }
    Ok(())
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    assert!(!args.ports.is_empty(), "--ports is required");
    if args.load {
        return load(&args);
    }
    let zipf = Arc::new(Zipf::new(args.keys, args.zipf));
    let stop = Arc::new(AtomicBool::new(false));
    let seconds = args.seconds.ceil() as usize + 1;
    let per_second: Arc<Mutex<Vec<Second>>> = Arc::new(Mutex::new(
        (0..seconds).map(|_| Second::default()).collect(),
    ));
    let start = Instant::now();
    let value = vec![b'v'; args.value_size];
    let mut handles = Vec::new();
    for t in 0..args.threads {
        let (zipf, stop, per_second, value) = (
            zipf.clone(),
            stop.clone(),
            per_second.clone(),
            value.clone(),
        );
        let port = args.ports[t % args.ports.len()];
        let (keys, offset, write_ratio) = (args.keys, args.key_offset, args.write_ratio);
        let seed = args.seed.wrapping_mul(1_000_003).wrapping_add(t as u64);
        handles.push(std::thread::spawn(
            move || -> std::io::Result<(Histogram<u64>, u64, u64)> {
                let stream = TcpStream::connect(("127.0.0.1", port))?;
                stream.set_nodelay(true)?;
                let mut w = stream.try_clone()?;
                let mut r = BufReader::new(stream);
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let (mut out, mut line) = (Vec::new(), Vec::new());
                let mut reads = new_histogram();
                let (mut ops, mut errors) = (0u64, 0u64);
                // Per-second figures are kept locally and folded into the shared table each second.
                let mut local = Second {
                    reads: Some(new_histogram()),
                    ..Default::default()
                };
                let mut local_second = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let rank = (zipf.draw(&mut rng) + offset) % keys;
                    let k = key(rank);
                    let is_write =
                        ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < write_ratio;
                    out.clear();
                    if is_write {
                        command(&mut out, &[b"SET", k.as_bytes(), &value]);
                    } else {
                        command(&mut out, &[b"GET", k.as_bytes()]);
                    }
                    let sent = Instant::now();
                    w.write_all(&out)?;
                    let failed = read_reply(&mut r, &mut line)?;
                    let done = Instant::now();
                    let us = done.duration_since(sent).as_micros().max(1) as u64;
                    if let Some(e) = failed {
                        if errors == 0 {
                            eprintln!("loadgen: error: {e}");
                        }
                        errors += 1;
                        local.errors += 1;
                    }
                    if !is_write {
                        let _ = reads.record(us);
                        let _ = local.reads.as_mut().map(|h| h.record(us));
                    }
                    ops += 1;
                    local.ops += 1;
                    let second = done.duration_since(start).as_secs() as usize;
                    if second != local_second {
                        fold(&per_second, local_second, &mut local);
                        local_second = second;
                    }
                }
                fold(&per_second, local_second, &mut local);
                Ok((reads, ops, errors))
            },
        ));
    }
    // Print each second's figures as it ends.
    let mut printed = 0;
    while start.elapsed().as_secs_f64() < args.seconds {
        std::thread::sleep(Duration::from_millis(100));
        let now = start.elapsed().as_secs() as usize;
        // A second is printed one second after it ends, so the threads have folded it in.
        while printed + 1 < now {
            print_second(&args.label, &per_second, printed);
            printed += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    let (mut reads, mut ops, mut errors) = (new_histogram(), 0, 0);
    for h in handles {
        let (r, o, e) = h.join().expect("load thread")?;
        reads.add(&r).expect("same bounds");
        ops += o;
        errors += e;
    }
    while printed < (args.seconds as usize).min(seconds) {
        print_second(&args.label, &per_second, printed);
        printed += 1;
    }
    println!(
        "{} summary ops={ops} ops_per_s={:.0} errors={errors} read_p50_us={} read_p99_us={} read_p999_us={} read_max_us={}",
        args.label,
        ops as f64 / elapsed,
        reads.value_at_quantile(0.5),
        reads.value_at_quantile(0.99),
        reads.value_at_quantile(0.999),
        reads.max(),
    );
    Ok(())
}

fn fold(per_second: &Mutex<Vec<Second>>, second: usize, local: &mut Second) {
    let mut table = per_second.lock().expect("per-second table");
    if let Some(slot) = table.get_mut(second) {
        slot.ops += local.ops;
        slot.errors += local.errors;
        let h = slot.reads.get_or_insert_with(new_histogram);
        if let Some(l) = &local.reads {
            h.add(l).expect("same bounds");
        }
    }
    local.ops = 0;
    local.errors = 0;
    if let Some(h) = local.reads.as_mut() {
        h.reset();
    }
}

fn print_second(label: &str, per_second: &Mutex<Vec<Second>>, second: usize) {
    let table = per_second.lock().expect("per-second table");
    if let Some(s) = table.get(second) {
        let (p50, p99) = s.reads.as_ref().map_or((0, 0), |h| {
            (h.value_at_quantile(0.5), h.value_at_quantile(0.99))
        });
        println!(
            "{label} second={second} ops={} errors={} read_p50_us={p50} read_p99_us={p99}",
            s.ops, s.errors
        );
    }
}

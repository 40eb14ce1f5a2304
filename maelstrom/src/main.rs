//! `lattice-maelstrom`: one Lattice node speaking Maelstrom's JSON-lines protocol on
//! stdin/stdout. Logs go to stderr only; stdout carries nothing but protocol messages.
//!
//! A thread reads stdin lines into a bounded channel; the main loop feeds them to the adapter
//! one at a time with the wall-clock time, fires the node's timers when due, and writes what
//! the adapter produced.

use std::io::{self, BufWriter, Write};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use lattice_maelstrom::adapter::{Adapter, Workload};
use lattice_maelstrom::proto::{read_bounded_line, LineRead, MAX_LINE_BYTES};
use lattice_node::Micros;

/// Lines read ahead of the node at most: enough to keep it busy, small enough that a flood on
/// stdin stalls the reader instead of growing memory.
const INBOX_LINES: usize = 1024;
/// Longest sleep without a timer, so the loop notices a closed stdin promptly.
const MAX_IDLE: Duration = Duration::from_millis(100);

#[derive(Parser)]
#[command(about = "A Lattice node driven by Maelstrom's protocol on stdin/stdout")]
struct Args {
    /// How keyless reads answer (g-counter, pn-counter, g-set, broadcast). Learnt from the
    /// first request when not given; the environment variable LATTICE_MAELSTROM_WORKLOAD works
    /// too (handy when the official tool runs the binary without arguments).
    #[arg(long)]
    workload: Option<String>,
    /// Seeds the node's RNG (mixed with its node id).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Wall-clock microseconds, never going backwards.
struct Clock {
    last: u64,
}

impl Clock {
    fn now(&mut self) -> Micros {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        self.last = self.last.max(t);
        Micros(self.last)
    }
}

fn main() {
    let args = Args::parse();
    let workload = match args
        .workload
        .or_else(|| std::env::var("LATTICE_MAELSTROM_WORKLOAD").ok())
    {
        Some(w) => match w.parse::<Workload>() {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("lattice-maelstrom: {e}");
                std::process::exit(2);
            }
        },
        None => None,
    };
    let (tx, rx) = mpsc::sync_channel::<String>(INBOX_LINES);
    std::thread::spawn(move || {
        let stdin = io::stdin();
        let mut input = stdin.lock();
        loop {
            match read_bounded_line(&mut input, MAX_LINE_BYTES) {
                Ok(LineRead::Line(l)) => {
                    if tx.send(l).is_err() {
                        return;
                    }
                }
                Ok(LineRead::Bad(why)) => eprintln!("lattice-maelstrom: {why}"),
                Ok(LineRead::Eof) => return,
                Err(e) => {
                    eprintln!("lattice-maelstrom: reading stdin: {e}");
                    return;
                }
            }
        }
    });

    let mut clock = Clock { last: 0 };
    let mut adapter = Adapter::new(workload, args.seed);
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    loop {
        let now = clock.now();
        let wait = match adapter.poll_timeout() {
            Some(at) => Duration::from_micros(at.0.saturating_sub(now.0)).min(MAX_IDLE),
            None => MAX_IDLE,
        };
        match rx.recv_timeout(wait) {
            Ok(line) => {
                if let Err(e) = adapter.handle_line(clock.now(), &line) {
                    eprintln!("lattice-maelstrom: {e}");
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let now = clock.now();
        if adapter.poll_timeout().is_some_and(|at| at <= now) {
            adapter.handle_timeout(now);
        }
        let msgs = adapter.take_outgoing();
        if !msgs.is_empty() {
            for m in msgs {
                if writeln!(out, "{}", m.to_line()).is_err() {
                    return;
                }
            }
            if out.flush().is_err() {
                // Whoever reads us is gone.
                return;
            }
        }
    }
    let _ = out.flush();
}

//! `lattice-maelstrom-harness`: runs Maelstrom's workloads against N `lattice-maelstrom`
//! processes behind a controlled network and checks the histories. See `maelstrom/README.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use lattice_maelstrom::adapter::Workload;
use lattice_maelstrom::harness::{self, Nemesis, Options};

#[derive(Clone, Copy, ValueEnum)]
enum NemesisArg {
    None,
    Partition,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Expect {
    /// Exit 1 unless the history is valid.
    Valid,
    /// Exit 1 unless the checker finds the history invalid (demonstrates an anomaly).
    Invalid,
    /// Report only.
    Any,
}

#[derive(Parser)]
#[command(about = "Run a Maelstrom workload against lattice-maelstrom processes and check it")]
struct Args {
    /// lin-kv, g-counter, pn-counter, g-set or broadcast.
    #[arg(long)]
    workload: String,
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    #[arg(long, default_value_t = 5)]
    clients: usize,
    /// Operations to issue.
    #[arg(long, default_value_t = 1000)]
    ops: usize,
    /// Operations per second over all clients.
    #[arg(long, default_value_t = 500.0)]
    rate: f64,
    #[arg(long, value_enum, default_value = "none")]
    nemesis: NemesisArg,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Longest workload phase in seconds.
    #[arg(long, default_value_t = 30.0)]
    time_limit: f64,
    /// Failing runs keep their history, summary and node logs under this directory.
    #[arg(long, default_value = "target/maelstrom")]
    out: PathBuf,
    /// The node binary.
    #[arg(long, default_value = "target/release/lattice-maelstrom")]
    bin: PathBuf,
    #[arg(long, default_value_t = 0)]
    latency_min_ms: u64,
    #[arg(long, default_value_t = 3)]
    latency_max_ms: u64,
    /// Node-to-node message loss probability.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Client request/reply loss probability (makes operations indeterminate).
    #[arg(long, default_value_t = 0.0)]
    client_loss: f64,
    #[arg(long, default_value_t = 1000)]
    op_timeout_ms: u64,
    #[arg(long, default_value_t = 1000)]
    nemesis_interval_ms: u64,
    /// Longest wait after healing for the final reads to agree, seconds.
    #[arg(long, default_value_t = 20.0)]
    heal: f64,
    /// lin-kv: keys in use at once.
    #[arg(long, default_value_t = 5)]
    keys: usize,
    /// lin-kv: operations per key before a fresh key replaces it.
    #[arg(long, default_value_t = 150)]
    ops_per_key: usize,
    /// Keep the history of valid runs too.
    #[arg(long)]
    keep_history: bool,
    /// Linearizability search steps per key before giving up.
    #[arg(long, default_value_t = lattice_maelstrom::check::DEFAULT_SEARCH_BUDGET)]
    search_budget: u64,
    /// Do not run anything: check this saved history.jsonl again.
    #[arg(long)]
    check: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "valid")]
    expect: Expect,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let workload: Workload = match a.workload.parse() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let (valid, line, notes) = if let Some(path) = &a.check {
        match harness::recheck(workload, path, a.search_budget) {
            Ok(v) => (
                v.valid,
                format!(
                    "workload={} history={} valid?={}",
                    workload.name(),
                    path.display(),
                    v.valid_str()
                ),
                v.notes,
            ),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        let mut o = Options::new(a.bin.clone(), workload);
        o.nodes = a.nodes;
        o.clients = a.clients;
        o.ops = a.ops;
        o.rate = a.rate;
        o.nemesis = match a.nemesis {
            NemesisArg::None => Nemesis::None,
            NemesisArg::Partition => Nemesis::Partition,
        };
        o.seed = a.seed;
        o.time_limit_s = a.time_limit;
        o.out = a.out.clone();
        o.latency_ms = (a.latency_min_ms, a.latency_max_ms);
        o.loss = a.loss;
        o.client_loss = a.client_loss;
        o.op_timeout_ms = a.op_timeout_ms;
        o.nemesis_interval_ms = a.nemesis_interval_ms;
        o.heal_s = a.heal;
        o.keys = a.keys;
        o.ops_per_key = a.ops_per_key;
        o.keep_history = a.keep_history;
        o.search_budget = a.search_budget;
        match harness::run(o) {
            Ok(s) => {
                let mut notes = s.verdict.notes;
                if let Some(p) = s.history_path {
                    notes.push(format!(
                        "history kept in {} (re-check: lattice-maelstrom-harness --workload {} --check {})",
                        p.display(),
                        workload.name(),
                        p.display()
                    ));
                }
                (s.verdict.valid, s.line, notes)
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    };
    println!("{line}");
    for n in notes {
        println!("    {n}");
    }
    let pass = match a.expect {
        Expect::Valid => valid == Some(true),
        Expect::Invalid => valid == Some(false),
        Expect::Any => true,
    };
    if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

//! A short harness run against the real binary: one node, every workload, checked.

use std::path::PathBuf;

use lattice_maelstrom::adapter::Workload;
use lattice_maelstrom::harness::{run, Options};

fn quick(workload: Workload) -> Options {
    let mut o = Options::new(
        PathBuf::from(env!("CARGO_BIN_EXE_lattice-maelstrom")),
        workload,
    );
    // One directory per run, so the tests (run in parallel) never remove each other's.
    o.out = std::env::temp_dir().join(format!(
        "lattice-maelstrom-test-{}-{}",
        std::process::id(),
        workload.name()
    ));
    o.clients = 4;
    o.ops = 200;
    o.rate = 1000.0;
    o.client_loss = 0.02;
    o.op_timeout_ms = 300;
    o.heal_s = 5.0;
    o
}

#[test]
fn one_node_runs_of_every_workload_are_valid() {
    for w in Workload::ALL {
        let o = quick(w);
        let out = o.out.clone();
        let s = run(o).expect("run");
        assert_eq!(
            s.verdict.valid,
            Some(true),
            "{}: {:?}",
            s.line,
            s.verdict.notes
        );
        assert!(s.line.contains("valid?=true"));
        assert!(s.history_path.is_none(), "a valid run keeps nothing");
        let _ = std::fs::remove_dir_all(out);
    }
}

#[test]
fn a_missing_binary_is_reported() {
    let mut o = quick(Workload::LinKv);
    o.bin = PathBuf::from("/nonexistent/lattice-maelstrom");
    o.out = o.out.with_file_name(format!(
        "lattice-maelstrom-test-{}-missing-binary",
        std::process::id()
    ));
    let out = o.out.clone();
    let err = run(o).err().expect("must fail");
    assert!(err.contains("cannot start"), "{err}");
    let _ = std::fs::remove_dir_all(out);
}

//! The `lattice-maelstrom` binary as Maelstrom runs it: lines on stdin, replies on stdout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::Value;

fn run(input: &str) -> (Vec<Value>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lattice-maelstrom"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lattice-maelstrom");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    // stdin is closed now: the binary answers what it read and exits.
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "exit status {:?}", out.status);
    let lines = BufReader::new(&out.stdout[..])
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).expect("stdout carries only JSON lines"))
        .collect();
    (lines, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn init_gets_init_ok_in_reply_to_1() {
    let (out, _) = run(
        "{\"src\":\"c1\",\"dest\":\"n1\",\"body\":{\"type\":\"init\",\"msg_id\":1,\"node_id\":\"n1\",\"node_ids\":[\"n1\"]}}\n",
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["src"], "n1");
    assert_eq!(out[0]["dest"], "c1");
    assert_eq!(out[0]["body"]["type"], "init_ok");
    assert_eq!(out[0]["body"]["in_reply_to"], 1);
}

#[test]
fn malformed_lines_are_logged_and_the_node_carries_on() {
    let input = concat!(
        "{\"src\":\"c1\",\"dest\":\"n1\",\"body\":{\"type\":\"init\",\"msg_id\":1,\"node_id\":\"n1\",\"node_ids\":[\"n1\"]}}\n",
        "this is not json\n",
        "{\"src\":\"c2\",\"dest\":\"n1\",\"body\":{\"type\":\"write\",\"msg_id\":2,\"key\":3,\"value\":7}}\n",
        "{\"src\":\"c2\",\"dest\":\"n1\",\"body\":{\"type\":\"read\",\"msg_id\":3,\"key\":3}}\n",
        "{\"src\":\"c2\",\"dest\":\"n1\",\"body\":{\"type\":\"txn\",\"msg_id\":4,\"txn\":[]}}\n",
    );
    let (out, err) = run(input);
    assert!(err.contains("not a Maelstrom message"), "stderr: {err}");
    let types: Vec<&str> = out
        .iter()
        .map(|m| m["body"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["init_ok", "write_ok", "read_ok", "error"]);
    assert_eq!(out[2]["body"]["value"], 7);
    assert_eq!(out[3]["body"]["code"], 10);
    assert_eq!(out[3]["body"]["in_reply_to"], 4);
}

#[test]
fn unknown_workload_flag_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_lattice-maelstrom"))
        .args(["--workload", "kafka"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown workload"));
}

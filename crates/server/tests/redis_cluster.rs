//! redis-rs's cluster client against a partitioned cluster of real processes: five
//! `lattice-server`s with replication factor 3. The client learns the slots from CLUSTER
//! SLOTS and sends each command to its slot's first owner; a seeded mixed workload (strings,
//! counters, hashes, sets, lists, expiry, hash-tagged multi-key commands) must see 0 errors and
//! read back what a model of the same commands predicts. Part of `make partition-test`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, TempDir};
use redis::cluster::ClusterClient;
use redis::Commands;

const NODES: usize = 5;
const RF: usize = 3;
const OPS: usize = 5_000;

struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A deterministic generator, so a failure repeats (no randomness source in the test).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn start(dir: &std::path::Path) -> (Procs, Vec<u16>) {
    let ports: Vec<(u16, u16)> = (0..NODES).map(|_| (free_port(), free_port())).collect();
    let seeds = ports
        .iter()
        .map(|(_, c)| format!("127.0.0.1:{c}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut procs = Procs(Vec::new());
    for (i, (port, cport)) in ports.iter().enumerate() {
        let log = File::create(dir.join(format!("node{}.log", i + 1))).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_lattice-server"))
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--node-id", &(i + 1).to_string()])
            .args(["--cluster-port", &cport.to_string()])
            .args(["--seeds", &seeds])
            .args(["--replication-factor", &RF.to_string()])
            .arg("--dir")
            .arg(dir.join(format!("d{}", i + 1)))
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn lattice-server");
        procs.0.push(child);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for (port, _) in &ports {
        loop {
            let ok = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .and_then(|c| c.get_connection())
                .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut c))
                .is_ok_and(|info| info.contains("cluster_state:ok"));
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node on {port} never reported cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    (procs, ports.into_iter().map(|(p, _)| p).collect())
}

#[test]
fn redis_rs_cluster_client_runs_a_mixed_workload_without_errors() {
    let dir = TempDir(std::env::temp_dir().join(format!(
        "lattice-redis-cluster-{}-{}",
        std::process::id(),
        free_port()
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let (_procs, ports) = start(&dir.0);
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}/"))
        .collect();
    let client = ClusterClient::builder(urls)
        .connection_timeout(Duration::from_secs(5))
        .response_timeout(Duration::from_secs(10))
        .build()
        .expect("cluster client");
    let mut c = client.get_connection().expect("cluster connection");

    // The client must have learnt a partitioned layout: every node first owner of some slots.
    let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(
            &mut redis::Client::open(format!("redis://127.0.0.1:{}/", ports[0]))
                .unwrap()
                .get_connection()
                .unwrap(),
        )
        .expect("CLUSTER SLOTS");
    assert!(
        slots.len() >= NODES,
        "CLUSTER SLOTS lists {} ranges",
        slots.len()
    );

    let mut rng = Lcg(18);
    let mut strings: BTreeMap<String, String> = BTreeMap::new();
    let mut counters: BTreeMap<String, i64> = BTreeMap::new();
    let mut hashes: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut sets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut lists: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut errors = Vec::new();
    let mut note = |what: String, r: redis::RedisResult<()>| {
        if let Err(e) = r {
            errors.push(format!("{what}: {e}"));
        }
    };
    for i in 0..OPS {
        let n = rng.below(200);
        match rng.below(12) {
            0 | 1 => {
                let (k, v) = (format!("s:{n}"), format!("v{i}"));
                note(format!("SET {k}"), c.set(&k, &v));
                strings.insert(k, v);
            }
            2 | 3 => {
                let k = format!("s:{n}");
                let r: redis::RedisResult<Option<String>> = c.get(&k);
                note(
                    format!("GET {k}"),
                    r.map(|got| assert_eq!(got.as_ref(), strings.get(&k), "GET {k}")),
                );
            }
            4 => {
                let (k, by) = (format!("c:{n}"), rng.below(100) as i64 - 30);
                let r: redis::RedisResult<i64> = c.incr(&k, by);
                let want = counters.entry(k.clone()).or_insert(0);
                *want += by;
                let want = *want;
                note(
                    format!("INCRBY {k}"),
                    r.map(|got| assert_eq!(got, want, "INCRBY {k}")),
                );
            }
            5 => {
                let (k, f, v) = (
                    format!("h:{}", n % 40),
                    format!("f{}", n % 7),
                    format!("v{i}"),
                );
                note(format!("HSET {k}"), c.hset(&k, &f, &v));
                hashes.entry(k).or_default().insert(f, v);
            }
            6 => {
                let k = format!("h:{}", n % 40);
                let r: redis::RedisResult<BTreeMap<String, String>> = c.hgetall(&k);
                let want = hashes.get(&k).cloned().unwrap_or_default();
                note(
                    format!("HGETALL {k}"),
                    r.map(|got| assert_eq!(got, want, "HGETALL {k}")),
                );
            }
            7 => {
                let (k, m) = (format!("set:{}", n % 30), format!("m{}", rng.below(50)));
                note(format!("SADD {k}"), c.sadd(&k, &m));
                sets.entry(k).or_default().insert(m);
            }
            8 => {
                let k = format!("set:{}", n % 30);
                let r: redis::RedisResult<BTreeSet<String>> = c.smembers(&k);
                let want = sets.get(&k).cloned().unwrap_or_default();
                note(
                    format!("SMEMBERS {k}"),
                    r.map(|got| assert_eq!(got, want, "SMEMBERS {k}")),
                );
            }
            9 => {
                let (k, e) = (format!("l:{}", n % 20), format!("e{i}"));
                note(format!("RPUSH {k}"), c.rpush(&k, &e));
                lists.entry(k.clone()).or_default().push(e);
                let r: redis::RedisResult<Vec<String>> = c.lrange(&k, 0, -1);
                let want = lists[&k].clone();
                note(
                    format!("LRANGE {k}"),
                    r.map(|got| assert_eq!(got, want, "LRANGE {k}")),
                );
            }
            10 => {
                // Multi-key commands in one slot through a hash tag.
                let tag = format!("{{u{}}}", n % 25);
                let (a, b) = (format!("{tag}:a"), format!("{tag}:b"));
                let (va, vb) = (format!("a{i}"), format!("b{i}"));
                note(format!("MSET {a} {b}"), c.mset(&[(&a, &va), (&b, &vb)]));
                let r: redis::RedisResult<Vec<Option<String>>> = c.mget(&[&a, &b]);
                note(
                    format!("MGET {a} {b}"),
                    r.map(|got| assert_eq!(got, vec![Some(va), Some(vb)], "MGET {a} {b}")),
                );
            }
            _ => {
                let k = format!("s:{n}");
                let r: redis::RedisResult<i64> = c.expire(&k, 3600);
                let want = i64::from(strings.contains_key(&k));
                note(
                    format!("EXPIRE {k}"),
                    r.map(|got| assert_eq!(got, want, "EXPIRE {k}")),
                );
                let r: redis::RedisResult<i64> = c.del(&k);
                note(
                    format!("DEL {k}"),
                    r.map(|got| assert_eq!(got, want, "DEL {k}")),
                );
                strings.remove(&k);
            }
        }
    }
    assert!(
        errors.is_empty(),
        "{} of {OPS} operations failed, first: {:?} (logs in {})",
        errors.len(),
        &errors[..errors.len().min(5)],
        dir.0.display()
    );
    println!("redis-rs cluster client: {OPS} mixed operations on {NODES} nodes, RF {RF}: 0 errors");
}

//! redis-rs's cluster client against a partitioned cluster of real processes: five
//! `lattice-server`s with replication factor 3. The client learns the slots from CLUSTER
//! SLOTS and sends each command to its slot's first owner. 20,000 keys are loaded through
//! the client's pipelines, read back, and a seeded mixed workload (strings, counters, hashes,
//! sets, lists, expiry, hash-tagged multi-key commands, reads of the loaded keys) must see 0
//! errors and read back what a model of the same commands predicts. Part of `make
//! partition-test`.
//!
//! Against a cluster already running (`scripts/partition-scale.py`, 1,000,000 keys), set
//! `LATTICE_CLUSTER_PORTS=port,port,...` (client ports) and `LATTICE_LOADED_KEYS=N`: the keys
//! `key:0` .. `key:N-1`, holding `v-key:<i>`, were loaded by the caller and are sampled instead
//! of loaded; `LATTICE_OPS` sets the workload's length (default 5,000) and
//! `LATTICE_KEY_PREFIX` prefixes the workload's own keys (so runs do not meet).

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
/// Keys the test loads into the cluster it starts (the small version of the 1M-key run).
const LOADED: usize = 20_000;
/// Loaded keys read back through the client, at most (all of them up to this).
const SAMPLE: usize = 20_000;
/// Commands per cluster pipeline.
const PIPELINE: usize = 500;

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

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
    })
}

fn loaded_value(i: usize) -> String {
    format!("v-key:{i}")
}

#[test]
fn redis_rs_cluster_client_runs_a_mixed_workload_without_errors() {
    let dir = TempDir(std::env::temp_dir().join(format!(
        "lattice-redis-cluster-{}-{}",
        std::process::id(),
        free_port()
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let external: Option<Vec<u16>> = std::env::var("LATTICE_CLUSTER_PORTS").ok().map(|v| {
        v.split(',')
            .map(|p| {
                p.trim()
                    .parse()
                    .expect("LATTICE_CLUSTER_PORTS: client ports")
            })
            .collect()
    });
    let (_procs, ports) = match external {
        Some(ports) => (Procs(Vec::new()), ports),
        None => start(&dir.0),
    };
    let ops = env_usize("LATTICE_OPS").unwrap_or(OPS);
    let prefix = std::env::var("LATTICE_KEY_PREFIX").unwrap_or_default();
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
        slots.len() >= ports.len(),
        "CLUSTER SLOTS lists {} ranges",
        slots.len()
    );

    // The loaded keys: written here through the client's pipelines (each command to its
    // slot's owner), or by the caller; then a sample read back.
    let loaded = match env_usize("LATTICE_LOADED_KEYS") {
        Some(n) => n,
        None => {
            let t = Instant::now();
            for at in (0..LOADED).step_by(PIPELINE) {
                let mut p = redis::cluster::cluster_pipe();
                for i in at..(at + PIPELINE).min(LOADED) {
                    p.set(format!("key:{i}"), loaded_value(i)).ignore();
                }
                let r: redis::RedisResult<()> = p.query(&mut c);
                r.unwrap_or_else(|e| panic!("loading keys {at}..: {e}"));
            }
            println!(
                "redis-rs cluster pipelines: {LOADED} keys loaded in {:.1} s",
                t.elapsed().as_secs_f64()
            );
            LOADED
        }
    };
    let mut rng = Lcg(69);
    let sample: Vec<usize> = if loaded <= SAMPLE {
        (0..loaded).collect()
    } else {
        (0..SAMPLE)
            .map(|_| rng.below(loaded as u64) as usize)
            .collect()
    };
    let t = Instant::now();
    for chunk in sample.chunks(PIPELINE) {
        let mut p = redis::cluster::cluster_pipe();
        for i in chunk {
            p.get(format!("key:{i}"));
        }
        let got: Vec<Option<String>> = p.query(&mut c).expect("GET pipeline");
        for (i, v) in chunk.iter().zip(got) {
            assert_eq!(v, Some(loaded_value(*i)), "GET key:{i}");
        }
    }
    println!(
        "redis-rs cluster pipelines: {} of {loaded} loaded keys read back correctly in {:.1} s",
        sample.len(),
        t.elapsed().as_secs_f64()
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
    for i in 0..ops {
        let n = rng.below(200);
        let p = &prefix;
        match rng.below(13) {
            0 | 1 => {
                let (k, v) = (format!("{p}s:{n}"), format!("v{i}"));
                note(format!("SET {k}"), c.set(&k, &v));
                strings.insert(k, v);
            }
            2 | 3 => {
                let k = format!("{p}s:{n}");
                let r: redis::RedisResult<Option<String>> = c.get(&k);
                note(
                    format!("GET {k}"),
                    r.map(|got| assert_eq!(got.as_ref(), strings.get(&k), "GET {k}")),
                );
            }
            4 => {
                let (k, by) = (format!("{p}c:{n}"), rng.below(100) as i64 - 30);
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
                    format!("{p}h:{}", n % 40),
                    format!("f{}", n % 7),
                    format!("v{i}"),
                );
                note(format!("HSET {k}"), c.hset(&k, &f, &v));
                hashes.entry(k).or_default().insert(f, v);
            }
            6 => {
                let k = format!("{p}h:{}", n % 40);
                let r: redis::RedisResult<BTreeMap<String, String>> = c.hgetall(&k);
                let want = hashes.get(&k).cloned().unwrap_or_default();
                note(
                    format!("HGETALL {k}"),
                    r.map(|got| assert_eq!(got, want, "HGETALL {k}")),
                );
            }
            7 => {
                let (k, m) = (format!("{p}set:{}", n % 30), format!("m{}", rng.below(50)));
                note(format!("SADD {k}"), c.sadd(&k, &m));
                sets.entry(k).or_default().insert(m);
            }
            8 => {
                let k = format!("{p}set:{}", n % 30);
                let r: redis::RedisResult<BTreeSet<String>> = c.smembers(&k);
                let want = sets.get(&k).cloned().unwrap_or_default();
                note(
                    format!("SMEMBERS {k}"),
                    r.map(|got| assert_eq!(got, want, "SMEMBERS {k}")),
                );
            }
            9 => {
                let (k, e) = (format!("{p}l:{}", n % 20), format!("e{i}"));
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
                let tag = format!("{{{p}u{}}}", n % 25);
                let (a, b) = (format!("{tag}:a"), format!("{tag}:b"));
                let (va, vb) = (format!("a{i}"), format!("b{i}"));
                note(format!("MSET {a} {b}"), c.mset(&[(&a, &va), (&b, &vb)]));
                let r: redis::RedisResult<Vec<Option<String>>> = c.mget(&[&a, &b]);
                note(
                    format!("MGET {a} {b}"),
                    r.map(|got| assert_eq!(got, vec![Some(va), Some(vb)], "MGET {a} {b}")),
                );
            }
            11 if loaded > 0 => {
                // A loaded key, through whichever owner the client picks.
                let j = rng.below(loaded as u64) as usize;
                let k = format!("key:{j}");
                let r: redis::RedisResult<Option<String>> = c.get(&k);
                note(
                    format!("GET {k}"),
                    r.map(|got| assert_eq!(got, Some(loaded_value(j)), "GET {k}")),
                );
            }
            _ => {
                let k = format!("{p}s:{n}");
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
        "{} of {ops} operations failed, first: {:?} (logs in {})",
        errors.len(),
        &errors[..errors.len().min(5)],
        dir.0.display()
    );
    println!(
        "redis-rs cluster client: {ops} mixed operations on {} nodes: 0 errors",
        ports.len()
    );
}

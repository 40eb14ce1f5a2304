//! Three `lattice-server` processes replicating over real cluster links: concurrent counters and
//! sets converge, a paused node catches up (and how long that takes is printed), a node with the
//! wrong secret is kept out, and the links come back after a peer restarts.
//!
//! Convergence is polled every 50 ms until every node answers the same, with a deadline; a
//! timeout fails with what each node answered. Child processes are killed on drop, also when a
//! test panics.

mod common;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{free_port, TempDir};

const SECRET: &str = "correct horse battery staple";
/// How long replicas get to agree before a test fails.
const CONVERGE_DEADLINE: Duration = Duration::from_secs(20);
/// After the pause the resumed node first works through everything its peers sent or resent
/// meanwhile (in a debug build on two shared cores that has taken 5-13 s), so it gets longer.
const PAUSE_CONVERGE_DEADLINE: Duration = Duration::from_secs(45);
const POLL: Duration = Duration::from_millis(50);

/// The tests here each run three or four servers and time convergence; on two cores they would
/// distort each other's figures, so they take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Node {
    id: u32,
    port: u16,
    cluster_port: u16,
    seeds: String,
    secret: String,
    log: PathBuf,
    child: Option<Child>,
    stopped: bool,
    /// Owners per slot (`--replication-factor`): 3, every member, except where a test says.
    replication_factor: usize,
}

struct Cluster {
    nodes: Vec<Node>,
    dir: TempDir,
}

impl Node {
    fn spawn(&mut self, dir: &Path) {
        let data = dir.join(format!("node{}", self.id));
        // Append so a restarted node's log keeps what came before.
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_lattice-server"))
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--node-id", &self.id.to_string()])
            .args(["--cluster-port", &self.cluster_port.to_string()])
            .args(["--seeds", &self.seeds])
            .args(["--replication-factor", &self.replication_factor.to_string()])
            .arg("--dir")
            .arg(&data)
            .env("LATTICE_CLUSTER_SECRET", &self.secret)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn lattice-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "node {} did not start:\n{}",
                self.id,
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.stopped {
                signal(&child, "CONT");
                self.stopped = false;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn log_count(&self, needle: &str) -> usize {
        self.log_text().matches(needle).count()
    }

    /// Log lines containing `needle` and ending with `end`.
    fn log_lines(&self, needle: &str, end: &str) -> usize {
        self.log_text()
            .lines()
            .filter(|l| l.contains(needle) && l.ends_with(end))
            .count()
    }

    fn client(&self) -> redis::Connection {
        let c = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .unwrap()
            .get_connection()
            .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c
    }

    fn pause(&mut self) {
        signal(self.child.as_ref().unwrap(), "STOP");
        self.stopped = true;
    }

    fn resume(&mut self) {
        signal(self.child.as_ref().unwrap(), "CONT");
        self.stopped = false;
    }
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{sig} failed");
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill();
        }
        if std::thread::panicking() {
            for n in &self.nodes {
                eprintln!("----- log of node {} -----\n{}", n.id, n.log_text());
            }
        }
    }
}

impl Cluster {
    /// Starts `n` replicas sharing `SECRET` and waits until every link is up.
    fn start(n: usize) -> Cluster {
        let dir = std::env::temp_dir().join(format!(
            "lattice-cluster-test-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let seeds = ports
            .iter()
            .map(|(_, c)| format!("127.0.0.1:{c}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            nodes: Vec::new(),
            dir: TempDir(dir),
        };
        for (i, (port, cluster_port)) in ports.into_iter().enumerate() {
            let id = i as u32 + 1;
            cluster.nodes.push(Node {
                id,
                port,
                cluster_port,
                seeds: seeds.clone(),
                secret: SECRET.to_string(),
                log: cluster.dir.0.join(format!("node{id}.log")),
                child: None,
                stopped: false,
                replication_factor: 3,
            });
        }
        let dir = cluster.dir.0.clone();
        for node in &mut cluster.nodes {
            node.spawn(&dir);
        }
        cluster.wait_links(1);
        cluster
    }

    /// Waits until every node logged `times` rounds of links up to and from each other node.
    fn wait_links(&self, times: usize) {
        let deadline = Instant::now() + Duration::from_secs(15);
        for node in &self.nodes {
            for other in self.nodes.iter().filter(|o| o.id != node.id) {
                let out = format!("outgoing link to node {} ", other.id);
                let inc = format!("incoming link from node {} ", other.id);
                while node.log_count(&format!("{out}(127.0.0.1:{}) up", other.cluster_port)) < times
                    || node.log_lines(&inc, " up") < times
                {
                    assert!(
                        Instant::now() < deadline,
                        "node {}: links with node {} not up {times} time(s)",
                        node.id,
                        other.id
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }

    fn clients(&self) -> Vec<redis::Connection> {
        self.nodes.iter().map(Node::client).collect()
    }
}

/// Polls `probe` on every connection until all answers are equal and `accept` holds for them;
/// returns the time it took. Fails with each node's last answer at the deadline.
fn converge<T: PartialEq + Debug>(
    what: &str,
    conns: &mut [redis::Connection],
    mut probe: impl FnMut(&mut redis::Connection) -> T,
    accept: impl Fn(&T) -> bool,
) -> Duration {
    let started = Instant::now();
    loop {
        let answers: Vec<T> = conns.iter_mut().map(&mut probe).collect();
        if answers.windows(2).all(|w| w[0] == w[1]) && accept(&answers[0]) {
            return started.elapsed();
        }
        if started.elapsed() > CONVERGE_DEADLINE {
            let mut report = String::new();
            for (i, a) in answers.iter().enumerate() {
                report.push_str(&format!("node {}: {a:?}\n", i + 1));
            }
            panic!("{what}: no agreement within {CONVERGE_DEADLINE:?}\n{report}");
        }
        std::thread::sleep(POLL);
    }
}

fn query<T: redis::FromRedisValue>(
    c: &mut redis::Connection,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    cmd.query(c).map_err(|e| e.to_string())
}

/// Every key with its type, its contents in a canonical order, and whether it has a TTL.
type Dump = BTreeMap<String, String>;

fn dump(c: &mut redis::Connection) -> Result<Dump, String> {
    let mut keys: Vec<String> = query(c, redis::cmd("KEYS").arg("*"))?;
    keys.sort();
    // One pipeline per step and per type (a few round trips per poll, not several per key), so
    // the measured time to agreement is not dominated by the probe itself.
    let kinds: Vec<String> = pipelined(c, &keys, |p, k| {
        p.cmd("TYPE").arg(k);
    })?;
    let ttls: Vec<i64> = pipelined(c, &keys, |p, k| {
        p.cmd("TTL").arg(k);
    })?;
    let of_kind = |kind: &str| -> Vec<String> {
        keys.iter()
            .zip(&kinds)
            .filter(|(_, t)| t.as_str() == kind)
            .map(|(k, _)| k.clone())
            .collect()
    };
    let mut bodies: BTreeMap<String, String> = BTreeMap::new();
    let strings = of_kind("string");
    let values: Vec<Option<String>> = pipelined(c, &strings, |p, k| {
        p.cmd("GET").arg(k);
    })?;
    for (k, v) in strings.into_iter().zip(values) {
        bodies.insert(k, format!("{v:?}"));
    }
    let sets = of_kind("set");
    let members: Vec<Vec<String>> = pipelined(c, &sets, |p, k| {
        p.cmd("SMEMBERS").arg(k);
    })?;
    for (k, mut m) in sets.into_iter().zip(members) {
        m.sort();
        bodies.insert(k, format!("{m:?}"));
    }
    let hashes = of_kind("hash");
    let fields: Vec<Vec<String>> = pipelined(c, &hashes, |p, k| {
        p.cmd("HGETALL").arg(k);
    })?;
    for (k, flat) in hashes.into_iter().zip(fields) {
        let mut pairs: Vec<(String, String)> = flat
            .chunks(2)
            .map(|p| (p[0].clone(), p.get(1).cloned().unwrap_or_default()))
            .collect();
        pairs.sort();
        bodies.insert(k, format!("{pairs:?}"));
    }
    let lists = of_kind("list");
    let items: Vec<Vec<String>> = pipelined(c, &lists, |p, k| {
        p.cmd("LRANGE").arg(k).arg(0).arg(-1);
    })?;
    for (k, l) in lists.into_iter().zip(items) {
        bodies.insert(k, format!("{l:?}"));
    }
    let zsets = of_kind("zset");
    let scored: Vec<Vec<String>> = pipelined(c, &zsets, |p, k| {
        p.cmd("ZRANGE").arg(k).arg(0).arg(-1).arg("WITHSCORES");
    })?;
    for (k, z) in zsets.into_iter().zip(scored) {
        bodies.insert(k, format!("{z:?}"));
    }
    let mut out = Dump::new();
    for ((key, kind), ttl) in keys.into_iter().zip(kinds).zip(ttls) {
        if kind == "none" {
            continue; // gone between KEYS and TYPE
        }
        let body = bodies.remove(&key).unwrap_or_else(|| format!("<{kind}>"));
        let ttl = if ttl > 0 { "ttl" } else { "persist" };
        out.insert(key, format!("{kind} {body} {ttl}"));
    }
    Ok(out)
}

/// One pipeline with `add(pipe, key)` per key; the replies in key order.
fn pipelined<T: redis::FromRedisValue>(
    c: &mut redis::Connection,
    keys: &[String],
    add: impl Fn(&mut redis::Pipeline, &str),
) -> Result<Vec<T>, String> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let mut p = redis::pipe();
    for k in keys {
        add(&mut p, k);
    }
    p.query(c).map_err(|e| e.to_string())
}

/// Keys whose entries differ between two dumps, for a readable failure.
fn dump_diff(a: &Dump, b: &Dump) -> Vec<String> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{k}: {:?} vs {:?}", a.get(k), b.get(k)))
        .collect()
}

#[test]
fn concurrent_incr_on_three_nodes_converges_to_the_sum() {
    let _turn = serial();
    let cluster = Cluster::start(3);
    let writers: Vec<_> = cluster
        .nodes
        .iter()
        .map(|n| {
            let mut c = n.client();
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    let _: i64 = redis::cmd("INCR").arg("counter").query(&mut c).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let mut conns = cluster.clients();
    let took = converge(
        "GET counter",
        &mut conns,
        |c| query::<Option<i64>>(c, redis::cmd("GET").arg("counter")),
        |v| *v == Ok(Some(3000)),
    );
    println!(
        "counter converged to 3000 on 3 nodes {} ms after the last INCR",
        took.as_millis()
    );
}

#[test]
fn concurrent_sadd_on_three_nodes_converges_to_the_union() {
    let _turn = serial();
    let cluster = Cluster::start(3);
    let writers: Vec<_> = cluster
        .nodes
        .iter()
        .map(|n| {
            let mut c = n.client();
            let id = n.id;
            std::thread::spawn(move || {
                for j in 0..200 {
                    let added: i64 = redis::cmd("SADD")
                        .arg("set")
                        .arg(format!("n{id}-m{j}"))
                        .query(&mut c)
                        .unwrap();
                    assert_eq!(added, 1);
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let mut union: Vec<String> = (1..=3)
        .flat_map(|id| (0..200).map(move |j| format!("n{id}-m{j}")))
        .collect();
    union.sort();
    let mut conns = cluster.clients();
    converge(
        "SMEMBERS set",
        &mut conns,
        |c| {
            query::<Vec<String>>(c, redis::cmd("SMEMBERS").arg("set")).map(|mut m| {
                m.sort();
                m
            })
        },
        |m| m.as_ref() == Ok(&union),
    );
}

/// A small seeded generator, so a failing workload can be rerun as it was.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Mixed writes against one node until `stop`; returns the acknowledged INCRs per counter key.
/// Counter keys `c0..c3` only ever get INCR, so each must end at the sum of acknowledgements.
fn mixed_writer(mut c: redis::Connection, node: u32, stop: Arc<AtomicBool>) -> [i64; 4] {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ node as u64);
    let mut acked = [0i64; 4];
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let k = rng.below(6);
        let member = format!("n{node}-{}", rng.below(20));
        let cmd = match rng.below(8) {
            0 => {
                let slot = rng.below(4) as usize;
                let _: i64 = redis::cmd("INCR")
                    .arg(format!("c{slot}"))
                    .query(&mut c)
                    .expect("INCR");
                acked[slot] += 1;
                continue;
            }
            1 => redis::cmd("SADD").arg(format!("s{k}")).arg(&member).clone(),
            2 => redis::cmd("HSET")
                .arg(format!("h{k}"))
                .arg(&member)
                .arg(i)
                .clone(),
            3 => redis::cmd("SET")
                .arg(format!("str{k}"))
                .arg(format!("{node}:{i}"))
                .clone(),
            4 => redis::cmd("LPUSH")
                .arg(format!("l{k}"))
                .arg(&member)
                .clone(),
            5 => {
                let key = ["s", "h", "str", "l"][rng.below(4) as usize];
                redis::cmd("EXPIRE")
                    .arg(format!("{key}{k}"))
                    .arg(1000)
                    .clone()
            }
            6 => {
                let key = ["s", "h", "str", "l"][rng.below(4) as usize];
                redis::cmd("DEL").arg(format!("{key}{k}")).clone()
            }
            _ => redis::cmd("SADD").arg(format!("s{k}")).arg(&member).clone(),
        };
        let reply: Result<redis::Value, _> = cmd.query(&mut c);
        if let Err(e) = reply {
            panic!("node {node}: {e}");
        }
    }
    acked
}

#[test]
fn paused_node_catches_up_and_all_agree_on_a_full_dump() {
    let _turn = serial();
    let mut cluster = Cluster::start(3);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = cluster
        .nodes
        .iter()
        .map(|n| {
            let c = n.client();
            let (id, stop) = (n.id, stop.clone());
            std::thread::spawn(move || mixed_writer(c, id, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    cluster.nodes[1].pause();
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    cluster.nodes[1].resume();
    let resumed = Instant::now();
    let mut sums = [0i64; 4];
    for w in writers {
        for (s, a) in sums.iter_mut().zip(w.join().unwrap()) {
            *s += a;
        }
    }
    println!(
        "  {} ms after SIGCONT: writers stopped",
        resumed.elapsed().as_millis()
    );
    let mut conns = cluster.clients();
    let mut last: Vec<Result<Dump, String>> = Vec::new();
    let mut next_report = Duration::from_secs(1);
    loop {
        let dumps: Vec<Result<Dump, String>> = conns.iter_mut().map(dump).collect();
        if dumps.iter().all(Result::is_ok) && dumps.windows(2).all(|w| w[0] == w[1]) {
            break;
        }
        if resumed.elapsed() > PAUSE_CONVERGE_DEADLINE {
            last = dumps;
            break;
        }
        // Progress once a second, for whoever measures: how many keys still differ.
        if resumed.elapsed() >= next_report {
            next_report += Duration::from_secs(1);
            if let [Ok(a), Ok(b), Ok(c)] = &dumps[..] {
                let (ab, ac) = (dump_diff(a, b), dump_diff(a, c));
                println!(
                    "  {} ms after SIGCONT: node 2 differs from node 1 in {} keys, node 3 in {}{}",
                    resumed.elapsed().as_millis(),
                    ab.len(),
                    ac.len(),
                    ab.first()
                        .or(ac.first())
                        .map(|d| format!(" (e.g. {d})"))
                        .unwrap_or_default()
                );
            }
        }
        std::thread::sleep(POLL);
    }
    if !last.is_empty() {
        let mut report = String::new();
        for (i, d) in last.iter().enumerate().skip(1) {
            match (&last[0], d) {
                (Ok(a), Ok(b)) => report.push_str(&format!(
                    "node 1 vs node {}:\n  {}\n",
                    i + 1,
                    dump_diff(a, b).join("\n  ")
                )),
                (a, b) => report.push_str(&format!("node 1: {a:?}\nnode {}: {b:?}\n", i + 1)),
            }
        }
        panic!("replicas disagree {PAUSE_CONVERGE_DEADLINE:?} after SIGCONT:\n{report}");
    }
    let took = resumed.elapsed();
    // scripts/cluster-pause.sh greps this line.
    println!(
        "cluster-pause: all 3 nodes agree {} ms after SIGCONT (node 2 paused 3000 ms under writes)",
        took.as_millis()
    );
    // What the replicas did to get there (retransmissions, deltas applied, CPU), for the record.
    for (i, c) in conns.iter_mut().enumerate() {
        let info: String = query(c, redis::cmd("INFO").arg("replication")).unwrap_or_default();
        let cpu: String = query(c, redis::cmd("INFO").arg("cpu")).unwrap_or_default();
        println!(
            "  node {} {}",
            i + 1,
            (info + &cpu)
                .split("\r\n")
                .filter(|l| l.contains(':'))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let dump1 = dump(&mut conns[0]).unwrap();
    assert!(dump1.len() > 10, "the workload wrote too little: {dump1:?}");
    for (slot, sum) in sums.iter().enumerate() {
        for (i, c) in conns.iter_mut().enumerate() {
            let v: Option<i64> = query(c, redis::cmd("GET").arg(format!("c{slot}"))).unwrap();
            assert_eq!(
                v.unwrap_or(0),
                *sum,
                "node {}: c{slot} differs from the acknowledged INCRs",
                i + 1
            );
        }
    }
}

#[test]
fn node_with_the_wrong_secret_is_refused() {
    let _turn = serial();
    let mut cluster = Cluster::start(3);
    let (port, cluster_port) = (free_port(), free_port());
    let seeds = format!("{},127.0.0.1:{cluster_port}", cluster.nodes[0].seeds);
    let dir = cluster.dir.0.clone();
    let mut intruder = Node {
        id: 4,
        port,
        cluster_port,
        seeds,
        secret: "not the secret".to_string(),
        log: dir.join("node4.log"),
        child: None,
        stopped: false,
        // Every member it names owns every key: it takes the write below itself (with fewer
        // owners it would wait, as CLUSTERDOWN, for members it can never reach).
        replication_factor: 4,
    };
    intruder.spawn(&dir);
    cluster.nodes.push(intruder);
    // Both ends log why: the three refuse the hello, the intruder hears the refusal.
    let deadline = Instant::now() + Duration::from_secs(10);
    for node in &cluster.nodes[..3] {
        while node.log_count("refused: authentication failed") == 0 {
            assert!(
                Instant::now() < deadline,
                "node {} never refused node 4",
                node.id
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert!(cluster.nodes[3].log_count("refused by peer: authentication failed") > 0);
    assert_eq!(
        cluster.nodes[3].log_count("link to node"),
        0,
        "node 4 got a link"
    );

    let mut bad = cluster.nodes[3].client();
    let _: () = redis::cmd("SET")
        .arg("intruder")
        .arg("x")
        .query(&mut bad)
        .unwrap();
    let mut first = cluster.nodes[0].client();
    let _: () = redis::cmd("SET")
        .arg("control")
        .arg("y")
        .query(&mut first)
        .unwrap();
    // Once the control write replicated, the intruder's (written earlier) would have too.
    let mut conns: Vec<_> = cluster.nodes[..3].iter().map(Node::client).collect();
    converge(
        "GET control",
        &mut conns,
        |c| query::<Option<String>>(c, redis::cmd("GET").arg("control")),
        |v| *v == Ok(Some("y".to_string())),
    );
    std::thread::sleep(Duration::from_millis(500));
    for (i, c) in conns.iter_mut().enumerate() {
        let v: Option<String> = query(c, redis::cmd("GET").arg("intruder")).unwrap();
        assert_eq!(v, None, "node {} has the intruder's write", i + 1);
    }
}

#[test]
fn idle_links_stay_up_and_come_back_after_a_peer_restarts() {
    let _turn = serial();
    let mut cluster = Cluster::start(3);
    // Idle links stay up past the 10 s silence limit: heartbeats keep them alive.
    std::thread::sleep(Duration::from_secs(12));
    for node in &cluster.nodes {
        assert_eq!(
            node.log_count(") down"),
            0,
            "node {} lost a link while idle",
            node.id
        );
    }
    cluster.nodes[2].kill();
    let deadline = Instant::now() + Duration::from_secs(10);
    for node in &cluster.nodes[..2] {
        while node.log_count("outgoing link to node 3 ") < 1
            || node.log_count(&format!(
                "outgoing link to node 3 (127.0.0.1:{}) down",
                cluster.nodes[2].cluster_port
            )) < 1
        {
            assert!(
                Instant::now() < deadline,
                "node {} missed node 3 going down",
                node.id
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let dir = cluster.dir.0.clone();
    cluster.nodes[2].spawn(&dir);
    // Node 3 restarted: its own log has one round; nodes 1 and 2 see a second one.
    for node in &cluster.nodes[..2] {
        let deadline = Instant::now() + Duration::from_secs(15);
        while node.log_count(&format!(
            "outgoing link to node 3 (127.0.0.1:{}) up",
            cluster.nodes[2].cluster_port
        )) < 2
            || node.log_lines("incoming link from node 3 ", " up") < 2
        {
            assert!(
                Instant::now() < deadline,
                "node {} did not relink node 3",
                node.id
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // And a write on the restarted node reaches the others.
    let mut c3 = cluster.nodes[2].client();
    let _: () = redis::cmd("SET")
        .arg("after-restart")
        .arg("1")
        .query(&mut c3)
        .unwrap();
    let mut conns = cluster.clients();
    converge(
        "GET after-restart",
        &mut conns,
        |c| query::<Option<String>>(c, redis::cmd("GET").arg("after-restart")),
        |v| *v == Ok(Some("1".to_string())),
    );
}

/// SADD s `member` and INCR c.
fn add_and_count(c: &mut redis::Connection, member: &str) {
    let _: i64 = redis::cmd("SADD").arg("s").arg(member).query(c).unwrap();
    let _: i64 = redis::cmd("INCR").arg("c").query(c).unwrap();
}

/// A replica killed and restarted under its old id, once on its directory and once on a wiped
/// one, starts without its state; its new writes must not be taken for ones its peers saw
/// before (they were, when a restart reused the old dots: every replica then lost data).
#[test]
fn a_replica_restarted_under_its_old_id_keeps_its_new_writes() {
    let _turn = serial();
    let mut cluster = Cluster::start(3);
    let mut members = 0;
    for (round, wipe) in [false, true].into_iter().enumerate() {
        let mut c2 = cluster.nodes[1].client();
        for k in 0..5 {
            add_and_count(&mut c2, &format!("r{round}-{k}"));
        }
        members += 5;
        let mut conns = cluster.clients();
        // Every write node 2 acknowledged has reached its peers (the counter as well as the
        // set: its increments may leave in a later batch than the SADDs): a wiped directory
        // cannot lose them.
        converge(
            "SCARD s and GET c before the restart",
            &mut conns,
            |c| {
                let card = query::<i64>(c, redis::cmd("SCARD").arg("s"))?;
                let count = query::<i64>(c, redis::cmd("GET").arg("c"))?;
                Ok((card, count))
            },
            |v: &Result<(i64, i64), String>| *v == Ok((members, members)),
        );
        cluster.nodes[1].kill();
        let dir = cluster.dir.0.clone();
        if wipe {
            std::fs::remove_dir_all(dir.join("node2")).unwrap();
        }
        cluster.nodes[1].spawn(&dir);
        // The restarted node's links to both peers are up (its log is appended across starts).
        let deadline = Instant::now() + Duration::from_secs(15);
        for other in [&cluster.nodes[0], &cluster.nodes[2]] {
            let up = format!(
                "outgoing link to node {} (127.0.0.1:{}) up",
                other.id, other.cluster_port
            );
            while cluster.nodes[1].log_count(&up) < round + 2 {
                assert!(Instant::now() < deadline, "node 2 did not relink");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        add_and_count(&mut cluster.nodes[1].client(), &format!("after-{round}"));
        members += 1;
        let mut conns = cluster.clients();
        converge(
            "SCARD s and GET c after the restart",
            &mut conns,
            |c| {
                let card = query::<i64>(c, redis::cmd("SCARD").arg("s"))?;
                let count = query::<i64>(c, redis::cmd("GET").arg("c"))?;
                Ok((card, count))
            },
            |v: &Result<(i64, i64), String>| *v == Ok((members, members)),
        );
    }
}

#[test]
fn cluster_flags_are_validated() {
    let bin = env!("CARGO_BIN_EXE_lattice-server");
    let cases: &[(&[&str], &str)] = &[
        (&["--seeds", "127.0.0.1:1"], "--seeds needs --node-id"),
        (
            &["--seeds", "127.0.0.1:1", "--node-id", "1"],
            "--seeds needs --cluster-port",
        ),
        (
            &[
                "--seeds",
                "127.0.0.1:1",
                "--node-id",
                "0",
                "--cluster-port",
                "2",
            ],
            "--node-id must be",
        ),
        (
            &[
                "--seeds",
                "nohostport",
                "--node-id",
                "1",
                "--cluster-port",
                "2",
            ],
            "invalid seed",
        ),
        (&["--cluster-port", "7000"], "--cluster-port needs --seeds"),
        (
            &["--replication-factor", "2"],
            "--replication-factor needs --seeds",
        ),
        (
            &[
                "--seeds",
                "127.0.0.1:1,127.0.0.1:3",
                "--node-id",
                "1",
                "--cluster-port",
                "2",
                "--replication-factor",
                "4",
            ],
            "--replication-factor 4 exceeds the 3 members",
        ),
        (
            &[
                "--seeds",
                "127.0.0.1:1",
                "--node-id",
                "1",
                "--cluster-port",
                "2",
                "--replication-factor",
                "0",
            ],
            "--replication-factor must be at least 1",
        ),
    ];
    for (args, message) in cases {
        let out = Command::new(bin)
            .args(["--port", "1"])
            .args(*args)
            .env_remove("LATTICE_CLUSTER_SECRET")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    let out = Command::new(bin)
        .args([
            "--port",
            "1",
            "--seeds",
            "127.0.0.1:1",
            "--node-id",
            "1",
            "--cluster-port",
            "2",
        ])
        .env("LATTICE_CLUSTER_SECRET", "")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cluster secret is empty"));

    // The config file takes the same keys; seeds as a list.
    let dir = TempDir(std::env::temp_dir().join(format!(
        "lattice-cluster-config-{}-{}",
        std::process::id(),
        free_port()
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let (port, cport) = (free_port(), free_port());
    let config = dir.0.join("lattice.toml");
    std::fs::write(
        &config,
        format!(
            "port = {port}\nbind = \"127.0.0.1\"\ncluster-port = {cport}\n\
             seeds = [\"127.0.0.1:{cport}\", \"127.0.0.1:1\"]\ncluster-secret = \"s\"\n"
        ),
    )
    .unwrap();
    let out = Command::new(bin)
        .arg("--config")
        .arg(&config)
        .env_remove("LATTICE_CLUSTER_SECRET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--seeds needs --node-id"));
    std::fs::write(
        &config,
        format!("{}node-id = 7\n", std::fs::read_to_string(&config).unwrap()),
    )
    .unwrap();
    let log = dir.0.join("node.log");
    let mut child = Command::new(bin)
        .arg("--config")
        .arg(&config)
        .arg("--dir")
        .arg(dir.0.join("data"))
        .env_remove("LATTICE_CLUSTER_SECRET")
        .env("NO_COLOR", "1")
        .stderr(File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("ready") || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    // Its own address is among the seeds, so the cluster has two replicas.
    assert!(
        text.contains(&format!(
            "node 7 listening for replicas on 127.0.0.1:{cport}, dialing [127.0.0.1:1], cluster size 2, links authenticated"
        )),
        "{text}"
    );
}

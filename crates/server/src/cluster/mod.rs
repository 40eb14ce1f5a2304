//! Links between replicas: one authenticated TCP connection per direction and peer.
//!
//! Every node listens on its cluster port and dials every other seed. A node SENDS its
//! `Output::PeerSend` messages for peer P on the connection it dialed to P, and RECEIVES P's
//! messages (`Input::PeerMessage`) on the connection P dialed to it. Each connection thus carries
//! data one way, and there is never a pair of links to elect a winner from. After the handshake a
//! connection carries frames: a 4-byte big-endian length, then that many payload bytes (at most
//! [`MAX_FRAME_BYTES`]). An empty frame is the dialer's heartbeat and never reaches the node; the
//! acceptor sends one heartbeat byte back at the same pace. Either side drops a link that stayed silent
//! for [`LINK_SILENCE_LIMIT`].
//!
//! With `tls-replication` every link runs over TLS first, both sides presenting a certificate
//! signed by the cluster's CA ([`stream`]); the membership handshake then runs inside it.
//!
//! The handshake that proves membership is in [`handshake`], an established link's framing,
//! queue and tasks in [`link`], the counters in [`stats`]. This module starts the listener and
//! the dialers.

mod handshake;
mod link;
mod stats;
mod stream;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use lattice_node::NodeId;
use tokio::net::{TcpListener, TcpStream};

use crate::host::Shared;
pub use handshake::Auth;
use handshake::{dial_handshake, HandshakeError};
use link::{run_outgoing, serve_incoming, Probe};
pub use link::{PeerQueue, MAX_FRAME_BYTES};
pub use stats::LinkStats;
use stats::LinkStatsSnapshot;
use stream::LinkStream;
pub use stream::LinkTls;

/// A peer gets this long to complete the handshake; a silent connection must not hold a task.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A dial that the network black-holes gives up after this long and goes to backoff. Shorter
/// than TCP's first SYN retransmission (1 s), so that a dial sent into a partition is followed,
/// after the backoff, by a fresh SYN instead of a retransmission a second later: a healed link
/// is found within a backoff step. A connect between replicas takes a round trip (well under
/// this within a region).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// While a dial is unanswered, another one starts this often (each with its own
/// `CONNECT_TIMEOUT`, at most `CONNECT_ATTEMPTS` in flight; the first connected wins). SYNs sent
/// into a partition are dropped and the kernel would retransmit them only a second later, so
/// without fresh ones a healed partition was found up to a whole dial cycle (about a second)
/// late; with them, within this period. A few SYNs a second to an unreachable peer cost nothing.
const CONNECT_STAGGER: Duration = Duration::from_millis(150);
const CONNECT_ATTEMPTS: usize = 4;
/// Redial backoff: first wait, doubling per failure up to the cap (with jitter), so a peer that
/// is down costs a few connection attempts per second at most, and one that returns is found
/// within the cap. The cap, with the connect timeout, bounds how long a healed partition stays
/// unrepaired.
const BACKOFF_MIN_MS: u64 = 100;
const BACKOFF_MAX_MS: u64 = 500;
/// Incoming connections still in their handshake at once, at most: each costs a task and a
/// socket for up to the handshake timeout, and anyone who can reach the port can open them.
/// Beyond this, new connections are closed at once (real peers retry with backoff).
const MAX_PENDING_HANDSHAKES: usize = 64;

/// The cluster part of the server's settings.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    pub auth: Auth,
    /// `bind:cluster_port`, where peers dial this node.
    pub listen: String,
    /// The other replicas' cluster addresses (this node's own address removed).
    pub peers: Vec<String>,
    /// TLS for every link (`tls-replication`); None: plain TCP.
    pub tls: Option<LinkTls>,
}

/// Starts the cluster: the listener for incoming links and one dialer per peer. Fails only when
/// the cluster port cannot be bound.
pub async fn start(shared: Arc<Shared>, settings: ClusterSettings) -> Result<(), String> {
    let listener = TcpListener::bind(&settings.listen)
        .await
        .map_err(|e| format!("cannot listen for replicas on {}: {e}", settings.listen))?;
    let auth = Arc::new(settings.auth);
    let tls = settings.tls.map(Arc::new);
    tokio::spawn(accept_loop(
        shared.clone(),
        auth.clone(),
        tls.clone(),
        listener,
    ));
    // Members learned while running (gossip, CLUSTER MEET) are dialed once per address; the
    // list is bounded by the member list, which the node bounds.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    shared.set_dial_tx(tx);
    let mut dialed: Vec<String> = vec![settings.listen.clone()];
    for seed in settings.peers {
        dialed.push(seed.clone());
        tokio::spawn(dial_loop(shared.clone(), auth.clone(), tls.clone(), seed));
    }
    let (s2, a2, t2) = (shared.clone(), auth.clone(), tls.clone());
    tokio::spawn(async move {
        while let Some(addr) = rx.recv().await {
            if dialed.contains(&addr) {
                continue;
            }
            tracing::info!("cluster: dialing member {addr}");
            dialed.push(addr.clone());
            tokio::spawn(dial_loop(s2.clone(), a2.clone(), t2.clone(), addr));
        }
    });
    tokio::spawn(log_stats(shared));
    Ok(())
}

/// Logs the link counters at debug level whenever they changed (every 5 s at most).
async fn log_stats(shared: Arc<Shared>) {
    let mut last = LinkStatsSnapshot::default();
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = shared.link_stats.snapshot();
        if now != last {
            tracing::debug!("cluster link stats: {now:?}");
            last = now;
        }
    }
}

async fn accept_loop(
    shared: Arc<Shared>,
    auth: Arc<Auth>,
    tls: Option<Arc<LinkTls>>,
    listener: TcpListener,
) {
    let pending = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HANDSHAKES));
    loop {
        match listener.accept().await {
            Ok((socket, addr)) => {
                let Ok(permit) = pending.clone().try_acquire_owned() else {
                    LinkStats::add(&shared.link_stats.handshakes_shed, 1);
                    tracing::warn!(
                        "cluster: closing connection from {addr}: {MAX_PENDING_HANDSHAKES} \
                         handshakes already pending"
                    );
                    continue;
                };
                tokio::spawn(serve_incoming(
                    shared.clone(),
                    auth.clone(),
                    tls.clone(),
                    socket,
                    addr,
                    permit,
                ));
            }
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!("cluster: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Why a dial attempt ended before the link was up.
enum DialError {
    Connect(io::Error),
    Handshake(HandshakeError),
}

async fn dial(
    auth: &Auth,
    tls: Option<&LinkTls>,
    seed: &str,
) -> Result<(LinkStream, NodeId), DialError> {
    let socket = connect_staggered(seed).await.map_err(DialError::Connect)?;
    let _ = socket.set_nodelay(true);
    // One time bound for the TLS handshake and the membership handshake together.
    let handshakes = async {
        let mut stream = LinkStream::dial(socket, tls, seed)
            .await
            .map_err(HandshakeError::Tls)?;
        let peer = dial_handshake(&mut stream, auth).await?;
        Ok((stream, peer))
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, handshakes)
        .await
        .unwrap_or(Err(HandshakeError::Timeout))
        .map_err(DialError::Handshake)
}

/// A TCP connection to `seed`: a fresh attempt every `CONNECT_STAGGER` while the earlier ones
/// are unanswered, `CONNECT_ATTEMPTS` in all, each given up after `CONNECT_TIMEOUT`; the first
/// to connect wins (the others are dropped). An error that is not a timeout (refused:
/// nothing listens) ends the dial at once, so a peer that is down is retried at the backoff's
/// pace, not the stagger's.
async fn connect_staggered(seed: &str) -> io::Result<TcpStream> {
    let mut attempts = tokio::task::JoinSet::new();
    let mut started = 0;
    loop {
        if started < CONNECT_ATTEMPTS {
            let seed = seed.to_owned();
            attempts.spawn(async move {
                tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(seed))
                    .await
                    .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
            });
            started += 1;
        }
        let more = started < CONNECT_ATTEMPTS;
        tokio::select! {
            done = attempts.join_next() => match done {
                Some(Ok(Ok(socket))) => return Ok(socket),
                Some(Ok(Err(e))) if e.kind() != io::ErrorKind::TimedOut => return Err(e),
                Some(Ok(Err(e))) if attempts.is_empty() && !more => return Err(e),
                Some(Err(join)) => return Err(io::Error::other(join)),
                None => return Err(io::ErrorKind::TimedOut.into()),
                Some(Ok(Err(_))) => {}
            },
            _ = tokio::time::sleep(CONNECT_STAGGER), if more => {}
        }
    }
}

/// A random duration in [d/2, d]: peers that lost each other at the same moment do not redial
/// in lockstep.
fn jittered(ms: u64) -> Duration {
    let r = getrandom::u64().unwrap_or(0);
    Duration::from_millis(ms / 2 + r % (ms / 2 + 1))
}

/// One attempt at a replacement link to `peer` (see `link::PROBE_AFTER_SILENCE`): the link when
/// the handshake completed with that same node.
fn probe_dial<'a>(
    auth: &'a Auth,
    tls: Option<&'a LinkTls>,
    seed: &'a str,
    peer: NodeId,
) -> Probe<'a> {
    Box::pin(async move {
        match dial(auth, tls, seed).await {
            Ok((socket, id)) if id == peer => Some(socket),
            _ => None,
        }
    })
}

/// Keeps one outgoing link to the replica at `seed` up for the life of the process.
async fn dial_loop(shared: Arc<Shared>, auth: Arc<Auth>, tls: Option<Arc<LinkTls>>, seed: String) {
    let stats = &shared.link_stats;
    let mut backoff_ms = BACKOFF_MIN_MS;
    // The last connection error, so a peer that stays unreachable is reported once per cause,
    // not once per attempt.
    let mut last_error = String::new();
    loop {
        match dial(&auth, tls.as_deref(), &seed).await {
            Ok((socket, peer)) => {
                backoff_ms = BACKOFF_MIN_MS;
                last_error.clear();
                // A replacement dialed while the link was silent runs next, at once.
                let probe = || probe_dial(&auth, tls.as_deref(), &seed, peer);
                let mut link = Some(socket);
                while let Some(socket) = link.take() {
                    link = run_outgoing(&shared, socket, peer, &seed, &probe).await;
                }
            }
            Err(DialError::Connect(e)) => {
                let error = e.to_string();
                if error != last_error {
                    tracing::info!("cluster: cannot reach {seed}: {error} (retrying)");
                    last_error = error;
                }
                if e.kind() == io::ErrorKind::TimedOut {
                    // Black-holed (a partition): the dial already took its time, and the next
                    // one's SYNs are what finds the heal soonest.
                    continue;
                }
            }
            Err(DialError::Handshake(e)) => {
                stats.count_failure(&e);
                if matches!(e, HandshakeError::OwnId) {
                    tracing::error!(
                        "cluster: seed {seed} is this node itself; list this node's own address \
                         exactly as --bind:--cluster-port in --seeds so the cluster size is \
                         counted right. Not dialing it again."
                    );
                    return;
                }
                tracing::warn!("cluster: link to {seed} refused: {e}");
            }
        }
        tokio::time::sleep(jittered(backoff_ms)).await;
        backoff_ms = (backoff_ms * 2).min(BACKOFF_MAX_MS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use handshake::accept_handshake;
    use link::{write_loop, HEARTBEAT_INTERVAL, LINK_SILENCE_LIMIT, MAX_QUEUE_BYTES};
    use tokio::io::AsyncReadExt;

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn host(id: u32) -> Arc<Shared> {
        use crate::host::{clock_us, Host};
        use lattice_node::{Buggify, Config, Micros, Node};
        let now = Micros(clock_us());
        let mut config = Config::default();
        config.node_id = id;
        config.cluster_size = 2;
        let node = Node::new(config, u64::from(id), Buggify::disabled(), now);
        Arc::new(Shared::new(
            Host::new(
                node,
                None,
                now,
                Arc::new(LinkStats::default()),
                Arc::from(Vec::new()),
            ),
            0,
        ))
    }

    async fn wait_for(what: &str, stats: [&LinkStats; 2], cond: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while !cond() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out: {what}\n{:?}\n{:?}",
                stats[0].snapshot(),
                stats[1].snapshot()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Hosts 1 and 2, each started with the other as its peer on loopback.
    async fn linked_pair() -> (Arc<Shared>, Arc<Shared>) {
        let (p1, p2) = (free_port(), free_port());
        let (h1, h2) = (host(1), host(2));
        for (h, id, me, other) in [(&h1, 1, p1, p2), (&h2, 2, p2, p1)] {
            let settings = ClusterSettings {
                auth: Auth::for_tests(id, Some("k")),
                listen: format!("127.0.0.1:{me}"),
                peers: vec![format!("127.0.0.1:{other}")],
                tls: None,
            };
            start(h.clone(), settings).await.unwrap();
        }
        (h1, h2)
    }

    /// Two hosts linked over loopback: what is queued for a peer arrives there in whole frames,
    /// in batches, and a queue pushed past its bound drops the link, which comes back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_frames_cross_a_real_link_and_an_overflow_relinks() {
        let (h1, h2) = linked_pair().await;
        let (s1, s2) = (h1.link_stats.clone(), h2.link_stats.clone());
        wait_for("links up", [&s1, &s2], || {
            let (a, b) = (s1.snapshot(), s2.snapshot());
            a.outgoing_up == 1 && b.outgoing_up == 1 && a.incoming_accepted == 1
        })
        .await;
        let queue = h1.host.lock().peer_queue(NodeId(2)).expect("link to 2");
        let base = s2.snapshot();
        let frames: Vec<Bytes> = (0..500u32)
            .map(|i| Bytes::from(vec![i as u8; 1 + (i as usize * 131) % 5000]))
            .collect();
        let total: u64 = frames.iter().map(|f| f.len() as u64 + 4).sum();
        for f in &frames {
            assert!(queue.push(f.clone()));
        }
        wait_for("frames received", [&s1, &s2], || {
            s2.snapshot().bytes_received >= base.bytes_received + total
        })
        .await;
        let sent = s1.snapshot();
        assert!(sent.frames_sent >= 500, "{sent:?}");
        assert!(
            sent.write_calls * 2 <= sent.frames_sent,
            "frames were not batched: {sent:?}"
        );
        assert!(s2.snapshot().frames_received >= base.frames_received + 500);

        // Five 16 MiB frames (one shared buffer) exceed the 64 MiB bound before the first is out.
        let big = Bytes::from(vec![0u8; MAX_FRAME_BYTES]);
        let accepted = (0..5).filter(|_| queue.push(big.clone())).count();
        assert!(accepted < 5);
        wait_for("relinked after overflow", [&s1, &s2], || {
            let s = s1.snapshot();
            s.queue_overflows == 1
                && s.outgoing_lost == 1
                && s.outgoing_established == 2
                && s.outgoing_up == 1
        })
        .await;
        let new_queue = h1.host.lock().peer_queue(NodeId(2)).expect("new link to 2");
        assert!(!Arc::ptr_eq(&queue, &new_queue));
        assert!(new_queue.push(Bytes::from_static(b"after")));
    }

    /// Link throughput on loopback for small and larger messages (a figure, not a check):
    /// `cargo test --release -p lattice-server --bin lattice-server -- --ignored --nocapture link_throughput`
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore]
    async fn link_throughput() {
        let (h1, h2) = linked_pair().await;
        let (s1, s2) = (h1.link_stats.clone(), h2.link_stats.clone());
        wait_for("links up", [&s1, &s2], || {
            s1.snapshot().outgoing_up == 1 && s2.snapshot().incoming_accepted == 1
        })
        .await;
        let queue = h1.host.lock().peer_queue(NodeId(2)).unwrap();
        for (size, count) in [(64usize, 1_000_000u64), (4096, 100_000), (1 << 20, 400)] {
            let frame = Bytes::from(vec![7u8; size]);
            let base = s2.snapshot().frames_received;
            let started = std::time::Instant::now();
            let mut pushed = 0;
            while pushed < count {
                // Stay under the queue bound: push while less than 32 MiB is outstanding.
                let received = s2.snapshot().frames_received - base;
                if (pushed - received) * (size as u64 + 4) < 32 << 20 {
                    assert!(queue.push(frame.clone()));
                    pushed += 1;
                } else {
                    tokio::task::yield_now().await;
                }
            }
            wait_for("all received", [&s1, &s2], || {
                s2.snapshot().frames_received - base >= count
            })
            .await;
            let secs = started.elapsed().as_secs_f64();
            println!(
                "link_throughput: {size}-byte messages: {:.0} msg/s, {:.0} MiB/s",
                count as f64 / secs,
                count as f64 * size as f64 / secs / (1 << 20) as f64
            );
        }
        let s = s1.snapshot();
        println!(
            "link_throughput: {} frames in {} vectored writes",
            s.frames_sent, s.write_calls
        );
    }

    /// A link whose peer went silent while a fresh connection to it completes its handshake
    /// (a partition that healed while the old connection waits for TCP's backed-off
    /// retransmission) moves to the fresh one after the probe delay, before the silence limit;
    /// probes that fail leave the old link to the limit.
    #[tokio::test]
    async fn a_silent_link_moves_to_a_fresh_one_that_answers() {
        use link::{write_loop_probing, PROBE_AFTER_SILENCE};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let acceptor = tokio::spawn(async move {
            let mut held = Vec::new();
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                accept_handshake(&mut s, &Auth::for_tests(2, None))
                    .await
                    .unwrap();
                // Never a heartbeat: every link to this peer goes silent.
                held.push(s);
            }
        });
        let auth = Auth::for_tests(1, None);
        let (socket, _) = match dial(&auth, None, &addr).await {
            Ok(x) => x,
            Err(_) => panic!("dial failed"),
        };
        let stats = LinkStats::default();
        let queue = PeerQueue::new(MAX_QUEUE_BYTES);
        let probe = || probe_dial(&auth, None, &addr, NodeId(2));
        let started = tokio::time::Instant::now();
        let (reason, fresh) = write_loop_probing(socket, &queue, &stats, Some(&probe)).await;
        let took = started.elapsed();
        assert!(fresh.is_some(), "{reason}");
        assert!(
            took >= PROBE_AFTER_SILENCE && took < LINK_SILENCE_LIMIT,
            "{took:?}"
        );
        // A probe that reaches another node (or nothing) never replaces the link.
        let (socket, _) = match dial(&auth, None, &addr).await {
            Ok(x) => x,
            Err(_) => panic!("dial failed"),
        };
        let wrong = || probe_dial(&auth, None, &addr, NodeId(3));
        let (reason, fresh) = write_loop_probing(socket, &queue, &stats, Some(&wrong)).await;
        assert!(fresh.is_none() && reason.contains("silent"), "{reason}");
        acceptor.abort();
    }

    /// A peer that completed the handshake and then went silent (a host gone without a reset)
    /// is dropped after the silence limit.
    #[tokio::test]
    async fn a_silent_peer_is_dropped() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let acceptor = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            accept_handshake(&mut s, &Auth::for_tests(2, None))
                .await
                .unwrap();
            // Read (and so keep the socket open) but never send a heartbeat.
            let mut sink = vec![0u8; 4096];
            while s.read(&mut sink).await.is_ok_and(|n| n > 0) {}
        });
        let (socket, peer) = match dial(&Auth::for_tests(1, None), None, &addr).await {
            Ok(x) => x,
            Err(_) => panic!("dial failed"),
        };
        assert_eq!(peer, NodeId(2));
        let stats = LinkStats::default();
        let queue = PeerQueue::new(MAX_QUEUE_BYTES);
        let started = tokio::time::Instant::now();
        let reason = write_loop(socket, &queue, &stats).await;
        assert!(reason.contains("silent"), "{reason}");
        assert!(started.elapsed() >= LINK_SILENCE_LIMIT);
        // The dialer kept sending heartbeats (empty frames) while it waited: one at most every
        // 1.5 intervals.
        let beats = LINK_SILENCE_LIMIT.as_millis() / (HEARTBEAT_INTERVAL.as_millis() * 3 / 2);
        assert!(
            stats.snapshot().frames_sent >= beats as u64,
            "{:?}",
            stats.snapshot()
        );
        acceptor.abort();
    }
}

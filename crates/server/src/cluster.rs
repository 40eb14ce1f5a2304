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
//! Handshake (before any frame), with `D` the dialer and `A` the acceptor:
//! 1. A -> D, challenge: magic, version, flags (bit 0: A has a secret), A's node id, 32-byte
//!    random nonce `na`.
//! 2. D -> A, hello: magic, version, flags (bit 0: D has a secret), D's node id, 32-byte nonce
//!    `nd`, proof `HMAC-SHA256(secret, "lattice-hello-v1" | na | nd | id(D) | id(A))`.
//! 3. A -> D, welcome: status 0 and `HMAC-SHA256(secret, "lattice-welcome-v1" | nd | na | id(A)
//!    | id(D))`, or status 1 and a short reason (then A closes).
//!
//! The hello is bound to A's fresh nonce, so a recorded hello replayed on a new connection fails;
//! the welcome proves to D that A knows the secret too, so an impostor listening on a seed address
//! receives nothing. Without a secret on both sides the proofs are zeros and unchecked (a trusted
//! network); one side with and one without is refused, as is a peer announcing our own node id.
//! Every refusal is logged with its reason and counted in [`LinkStats`].

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use hmac::{Hmac, Mac};
use lattice_node::{Input, NodeId};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::host::Shared;

/// Identifies a Lattice replica link in the first bytes of either side's first message, so a
/// stray client (or a Redis client pointed at the wrong port) is refused at once.
pub const MAGIC: [u8; 4] = *b"LTCL";
/// The only handshake and framing version this build speaks.
pub const VERSION: u16 = 1;
/// Largest frame payload accepted or sent: the node promises at most 16 MiB per message, and a
/// receiver must not be made to buffer more than that for one frame.
pub const MAX_FRAME_BYTES: usize = 16 << 20;
/// Bytes (payloads plus headers) waiting for or in one peer's socket at most. A peer that is
/// paused or slow stops draining its socket; rather than grow without bound we drop the link
/// (`PeerDown`) and reconnect, and the node repairs the gap by anti-entropy after `PeerUp`.
pub const MAX_QUEUE_BYTES: usize = 64 << 20;
/// A peer gets this long to complete the handshake; a silent connection must not hold a task.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// A dial that the network black-holes gives up after this long and goes to backoff.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Redial backoff: first wait, doubling per failure up to the cap (with jitter), so a peer that
/// is down costs a few connection attempts per second at most, and one that returns is found
/// within the cap. The cap bounds how long a healed partition stays unrepaired: at 5 s the
/// fault tests saw convergence after a heal take up to 4 s.
const BACKOFF_MIN_MS: u64 = 100;
const BACKOFF_MAX_MS: u64 = 1_000;
/// Each side of an idle link shows it is alive this often: the dialer with an empty frame, the
/// acceptor with one byte back on the otherwise unused direction.
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);
/// A link whose other side sent nothing (frame or heartbeat) for this long is dead: a peer host
/// that vanished without a reset would otherwise hold a link, and the node's view of it, forever.
/// Six missed heartbeats. Short, because a link that silently lost packets (a partition that
/// drops instead of resetting) resumes only at TCP's backed-off retransmission, seconds after
/// the network heals, while a new link is dialed at once and starts with an anti-entropy round.
/// Dropping a link to a paused peer costs a redial and that round, never data.
const LINK_SILENCE_LIMIT: Duration = Duration::from_secs(3);
/// Slices per vectored write; Linux's IOV_MAX is 1024.
const MAX_IOVECS: usize = 512;
/// Frames, and payload bytes, handed to the node per lock acquisition (at least one frame), so
/// one peer's burst cannot starve clients: merging a large batch of deltas can take long.
const MAX_FRAMES_PER_LOCK: usize = 256;
const MAX_BYTES_PER_LOCK: usize = 256 * 1024;
/// Incoming connections still in their handshake at once, at most: each costs a task and a
/// socket for up to the handshake timeout, and anyone who can reach the port can open them.
/// Beyond this, new connections are closed at once (real peers retry with backoff).
const MAX_PENDING_HANDSHAKES: usize = 64;
/// Read buffer growth step for incoming frames.
const READ_CHUNK: usize = 64 * 1024;
/// Upper bound of a refusal reason in a welcome message (one length byte).
const MAX_REASON_BYTES: usize = 255;

const NONCE_BYTES: usize = 32;
const PROOF_BYTES: usize = 32;
const FLAG_SECRET: u8 = 1;
const CHALLENGE_BODY: usize = 1 + 4 + NONCE_BYTES; // after magic and version
const HELLO_BODY: usize = 1 + 4 + NONCE_BYTES + PROOF_BYTES; // after magic and version

type HmacSha256 = Hmac<Sha256>;

/// Counters of the replica links, shared by all link tasks. Plain atomics so the lead can show
/// them in INFO without taking any lock; `snapshot` gives a consistent-enough copy for logs.
#[derive(Default, Debug)]
pub struct LinkStats {
    /// Outgoing links currently up (handshake done, `PeerUp` given, no `PeerDown` yet).
    pub outgoing_up: AtomicU64,
    /// Outgoing links established since start (each one followed by a `PeerUp`).
    pub outgoing_established: AtomicU64,
    /// Outgoing links lost since start (each one followed by a `PeerDown`).
    pub outgoing_lost: AtomicU64,
    /// Incoming links that completed the handshake.
    pub incoming_accepted: AtomicU64,
    /// Handshakes that failed for any reason (both directions), including the three below.
    pub handshake_failures: AtomicU64,
    /// Wrong proof, or one side with a secret and the other without.
    pub auth_failures: AtomicU64,
    /// Bad magic or an unknown version.
    pub version_rejects: AtomicU64,
    /// A peer announcing this node's own id (a seed that is really this node).
    pub self_id_rejects: AtomicU64,
    pub frames_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    /// Vectored write calls, to compare with `frames_sent` (batching).
    pub write_calls: AtomicU64,
    pub frames_received: AtomicU64,
    pub bytes_received: AtomicU64,
    /// Incoming frames announcing more than [`MAX_FRAME_BYTES`] (the link was closed).
    pub oversize_frames: AtomicU64,
    /// Outgoing links dropped because their queue exceeded [`MAX_QUEUE_BYTES`].
    pub queue_overflows: AtomicU64,
    /// Incoming connections closed unread because too many handshakes were pending.
    pub handshakes_shed: AtomicU64,
    /// `PeerSend`s for a peer without an outgoing link (it went down meanwhile), or larger than a
    /// frame may be; dropped, repaired by anti-entropy.
    pub sends_dropped: AtomicU64,
}

/// A plain copy of [`LinkStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStatsSnapshot {
    pub outgoing_up: u64,
    pub outgoing_established: u64,
    pub outgoing_lost: u64,
    pub incoming_accepted: u64,
    pub handshake_failures: u64,
    pub auth_failures: u64,
    pub version_rejects: u64,
    pub self_id_rejects: u64,
    pub frames_sent: u64,
    pub bytes_sent: u64,
    pub write_calls: u64,
    pub frames_received: u64,
    pub bytes_received: u64,
    pub oversize_frames: u64,
    pub queue_overflows: u64,
    pub handshakes_shed: u64,
    pub sends_dropped: u64,
}

impl LinkStats {
    pub fn snapshot(&self) -> LinkStatsSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LinkStatsSnapshot {
            outgoing_up: g(&self.outgoing_up),
            outgoing_established: g(&self.outgoing_established),
            outgoing_lost: g(&self.outgoing_lost),
            incoming_accepted: g(&self.incoming_accepted),
            handshake_failures: g(&self.handshake_failures),
            auth_failures: g(&self.auth_failures),
            version_rejects: g(&self.version_rejects),
            self_id_rejects: g(&self.self_id_rejects),
            frames_sent: g(&self.frames_sent),
            bytes_sent: g(&self.bytes_sent),
            write_calls: g(&self.write_calls),
            frames_received: g(&self.frames_received),
            bytes_received: g(&self.bytes_received),
            oversize_frames: g(&self.oversize_frames),
            queue_overflows: g(&self.queue_overflows),
            handshakes_shed: g(&self.handshakes_shed),
            sends_dropped: g(&self.sends_dropped),
        }
    }

    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn count_failure(&self, e: &HandshakeError) {
        Self::add(&self.handshake_failures, 1);
        match e {
            HandshakeError::BadProof | HandshakeError::SecretMismatch { .. } => {
                Self::add(&self.auth_failures, 1)
            }
            HandshakeError::BadMagic | HandshakeError::UnknownVersion(_) => {
                Self::add(&self.version_rejects, 1)
            }
            HandshakeError::OwnId => Self::add(&self.self_id_rejects, 1),
            _ => {}
        }
    }
}

/// Who this node is on its links, and the shared secret if any.
#[derive(Clone)]
pub struct Auth {
    pub node_id: NodeId,
    pub secret: Option<Vec<u8>>,
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the secret.
        f.debug_struct("Auth")
            .field("node_id", &self.node_id)
            .field("secret", &self.secret.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// The cluster part of the server's settings.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    pub auth: Auth,
    /// `bind:cluster_port`, where peers dial this node.
    pub listen: String,
    /// The other replicas' cluster addresses (this node's own address removed).
    pub peers: Vec<String>,
}

#[derive(Debug)]
pub enum HandshakeError {
    Io(io::Error),
    Timeout,
    BadMagic,
    UnknownVersion(u16),
    /// `ours`: whether this side has a secret (the other side does the opposite).
    SecretMismatch {
        ours: bool,
    },
    BadProof,
    /// The peer announced this node's own id.
    OwnId,
    /// The acceptor refused us and said why.
    Refused(String),
    NoRandomness,
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Io(e) => write!(f, "connection failed during handshake: {e}"),
            HandshakeError::Timeout => write!(f, "handshake timed out"),
            HandshakeError::BadMagic => write!(f, "not a lattice replica link (bad magic)"),
            HandshakeError::UnknownVersion(v) => {
                write!(f, "unknown link version {v} (this node speaks {VERSION})")
            }
            HandshakeError::SecretMismatch { ours: true } => write!(
                f,
                "authentication failed: this node has a cluster secret and the peer has none"
            ),
            HandshakeError::SecretMismatch { ours: false } => write!(
                f,
                "authentication failed: the peer has a cluster secret and this node has none"
            ),
            HandshakeError::BadProof => {
                write!(
                    f,
                    "authentication failed: wrong proof of the cluster secret"
                )
            }
            HandshakeError::OwnId => write!(f, "peer announced this node's own node id"),
            HandshakeError::Refused(r) => write!(f, "refused by peer: {r}"),
            HandshakeError::NoRandomness => write!(f, "no OS randomness for the nonce"),
        }
    }
}

impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> Self {
        HandshakeError::Io(e)
    }
}

fn nonce() -> Result<[u8; NONCE_BYTES], HandshakeError> {
    let mut n = [0u8; NONCE_BYTES];
    getrandom::fill(&mut n).map_err(|_| HandshakeError::NoRandomness)?;
    Ok(n)
}

fn mac(secret: &[u8], label: &[u8], n1: &[u8], n2: &[u8], id1: NodeId, id2: NodeId) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length");
    m.update(label);
    m.update(n1);
    m.update(n2);
    m.update(&id1.0.to_be_bytes());
    m.update(&id2.0.to_be_bytes());
    m
}

const HELLO_LABEL: &[u8] = b"lattice-hello-v1";
const WELCOME_LABEL: &[u8] = b"lattice-welcome-v1";

/// Reads magic and version and checks both.
async fn read_preamble<S: AsyncRead + Unpin>(s: &mut S) -> Result<(), HandshakeError> {
    let mut pre = [0u8; 6];
    s.read_exact(&mut pre).await?;
    if pre[..4] != MAGIC {
        return Err(HandshakeError::BadMagic);
    }
    let version = u16::from_be_bytes([pre[4], pre[5]]);
    if version != VERSION {
        return Err(HandshakeError::UnknownVersion(version));
    }
    Ok(())
}

fn flags(auth: &Auth) -> u8 {
    if auth.secret.is_some() {
        FLAG_SECRET
    } else {
        0
    }
}

/// The dialer's side. Returns the acceptor's node id once both sides are satisfied.
pub async fn dial_handshake<S>(s: &mut S, auth: &Auth) -> Result<NodeId, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    read_preamble(s).await?;
    let mut body = [0u8; CHALLENGE_BODY];
    s.read_exact(&mut body).await?;
    let their_secret = body[0] & FLAG_SECRET != 0;
    let peer = NodeId(u32::from_be_bytes(body[1..5].try_into().expect("4 bytes")));
    let na = &body[5..5 + NONCE_BYTES];
    if peer == auth.node_id {
        return Err(HandshakeError::OwnId);
    }
    let nd = nonce()?;
    let proof = match &auth.secret {
        Some(secret) if their_secret => mac(secret, HELLO_LABEL, na, &nd, auth.node_id, peer)
            .finalize()
            .into_bytes()
            .into(),
        _ => [0u8; PROOF_BYTES],
    };
    let mut hello = Vec::with_capacity(6 + HELLO_BODY);
    hello.extend_from_slice(&MAGIC);
    hello.extend_from_slice(&VERSION.to_be_bytes());
    hello.push(flags(auth));
    hello.extend_from_slice(&auth.node_id.0.to_be_bytes());
    hello.extend_from_slice(&nd);
    hello.extend_from_slice(&proof);
    s.write_all(&hello).await?;
    // Sent even on a mismatch so the acceptor can log it too; we do not wait for its verdict.
    if their_secret != auth.secret.is_some() {
        return Err(HandshakeError::SecretMismatch {
            ours: auth.secret.is_some(),
        });
    }
    let mut status = [0u8; 1];
    s.read_exact(&mut status).await?;
    if status[0] != 0 {
        let mut len = [0u8; 1];
        s.read_exact(&mut len).await?;
        let mut reason = vec![0u8; len[0] as usize];
        s.read_exact(&mut reason).await?;
        return Err(HandshakeError::Refused(
            String::from_utf8_lossy(&reason).into_owned(),
        ));
    }
    let mut their_proof = [0u8; PROOF_BYTES];
    s.read_exact(&mut their_proof).await?;
    if let Some(secret) = &auth.secret {
        mac(secret, WELCOME_LABEL, &nd, na, peer, auth.node_id)
            .verify_slice(&their_proof)
            .map_err(|_| HandshakeError::BadProof)?;
    }
    Ok(peer)
}

/// The acceptor's side. Returns the dialer's node id once it proved itself; on a refusal it tells
/// the dialer why (best effort) before returning the error.
pub async fn accept_handshake<S>(s: &mut S, auth: &Auth) -> Result<NodeId, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let na = nonce()?;
    let mut challenge = Vec::with_capacity(6 + CHALLENGE_BODY);
    challenge.extend_from_slice(&MAGIC);
    challenge.extend_from_slice(&VERSION.to_be_bytes());
    challenge.push(flags(auth));
    challenge.extend_from_slice(&auth.node_id.0.to_be_bytes());
    challenge.extend_from_slice(&na);
    s.write_all(&challenge).await?;
    let verdict = async {
        read_preamble(s).await?;
        let mut body = [0u8; HELLO_BODY];
        s.read_exact(&mut body).await?;
        let their_secret = body[0] & FLAG_SECRET != 0;
        let peer = NodeId(u32::from_be_bytes(body[1..5].try_into().expect("4 bytes")));
        let nd: [u8; NONCE_BYTES] = body[5..5 + NONCE_BYTES].try_into().expect("nonce");
        let proof = &body[5 + NONCE_BYTES..];
        if their_secret != auth.secret.is_some() {
            return Err(HandshakeError::SecretMismatch {
                ours: auth.secret.is_some(),
            });
        }
        if peer == auth.node_id {
            return Err(HandshakeError::OwnId);
        }
        if let Some(secret) = &auth.secret {
            mac(secret, HELLO_LABEL, &na, &nd, peer, auth.node_id)
                .verify_slice(proof)
                .map_err(|_| HandshakeError::BadProof)?;
        }
        Ok((peer, nd))
    }
    .await;
    match verdict {
        Ok((peer, nd)) => {
            let proof: [u8; PROOF_BYTES] = match &auth.secret {
                Some(secret) => mac(secret, WELCOME_LABEL, &nd, &na, auth.node_id, peer)
                    .finalize()
                    .into_bytes()
                    .into(),
                None => [0u8; PROOF_BYTES],
            };
            let mut welcome = Vec::with_capacity(1 + PROOF_BYTES);
            welcome.push(0);
            welcome.extend_from_slice(&proof);
            s.write_all(&welcome).await?;
            Ok(peer)
        }
        Err(e) => {
            if !matches!(e, HandshakeError::Io(_)) {
                let reason = e.to_string();
                let reason = &reason.as_bytes()[..reason.len().min(MAX_REASON_BYTES)];
                let mut refusal = Vec::with_capacity(2 + reason.len());
                refusal.push(1);
                refusal.push(reason.len() as u8);
                refusal.extend_from_slice(reason);
                let _ = s.write_all(&refusal).await;
                let _ = s.flush().await;
            }
            Err(e)
        }
    }
}

/// One peer's outgoing messages, filled by `Host::drain` under the node's lock (never blocks)
/// and emptied by that link's writer task.
pub struct PeerQueue {
    state: parking_lot::Mutex<QueueState>,
    wake: Notify,
    max_bytes: usize,
}

#[derive(Default)]
struct QueueState {
    frames: VecDeque<Bytes>,
    /// Bytes queued plus bytes taken by the writer and not yet written (headers included), so
    /// the bound holds while the writer is blocked on a stalled peer.
    bytes: usize,
    overflowed: bool,
}

impl PeerQueue {
    pub fn new(max_bytes: usize) -> PeerQueue {
        PeerQueue {
            state: parking_lot::Mutex::new(QueueState::default()),
            wake: Notify::new(),
            max_bytes,
        }
    }

    /// Queues one message. False when the queue is (now) over its bound: the writer then drops
    /// the link and everything queued.
    pub fn push(&self, data: Bytes) -> bool {
        let mut s = self.state.lock();
        if s.overflowed {
            return false;
        }
        let cost = data.len() + 4;
        if s.bytes + cost > self.max_bytes {
            s.overflowed = true;
            s.frames.clear();
            drop(s);
            self.wake.notify_one();
            return false;
        }
        s.bytes += cost;
        s.frames.push_back(data);
        drop(s);
        self.wake.notify_one();
        true
    }

    /// Moves every queued message into `out`. Err when the queue overflowed.
    fn take(&self, out: &mut Vec<Bytes>) -> Result<(), ()> {
        let mut s = self.state.lock();
        if s.overflowed {
            return Err(());
        }
        out.extend(s.frames.drain(..));
        Ok(())
    }

    fn overflowed(&self) -> bool {
        self.state.lock().overflowed
    }

    /// The writer wrote `n` bytes of what it took.
    fn written(&self, n: usize) {
        let mut s = self.state.lock();
        s.bytes = s.bytes.saturating_sub(n);
    }
}

/// Builds the wire chunks for `frames`: header, payload, header, payload... The headers share one
/// allocation; payloads are not copied.
fn frame_chunks(frames: &mut Vec<Bytes>, chunks: &mut VecDeque<Bytes>) {
    let mut headers = BytesMut::with_capacity(frames.len() * 4);
    for f in frames.iter() {
        headers.put_u32(f.len() as u32);
    }
    let mut headers = headers.freeze();
    for f in frames.drain(..) {
        chunks.push_back(headers.split_to(4));
        if !f.is_empty() {
            chunks.push_back(f);
        }
    }
}

/// Writes every chunk, one vectored write per call while the socket takes everything (more only
/// after a partial write). Returns the bytes written.
pub async fn write_chunks<W: AsyncWrite + Unpin>(
    w: &mut W,
    chunks: &mut VecDeque<Bytes>,
    stats: &LinkStats,
) -> io::Result<usize> {
    let mut total = 0;
    while !chunks.is_empty() {
        let n = {
            let slices: Vec<IoSlice<'_>> = chunks
                .iter()
                .take(MAX_IOVECS)
                .map(|c| IoSlice::new(c))
                .collect();
            w.write_vectored(&slices).await?
        };
        LinkStats::add(&stats.write_calls, 1);
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        total += n;
        let mut left = n;
        while left > 0 {
            let front = chunks.front_mut().expect("written bytes come from chunks");
            if front.len() <= left {
                left -= front.len();
                chunks.pop_front();
            } else {
                front.advance(left);
                left = 0;
            }
        }
    }
    Ok(total)
}

/// Why an incoming frame stream ended.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameError {
    /// A header announced `len` bytes, above [`MAX_FRAME_BYTES`].
    Oversize(usize),
}

/// Splits every complete frame off the front of `buf` (up to `max` frames). A partial frame
/// stays, with room reserved for the rest of it.
pub fn split_frames(
    buf: &mut BytesMut,
    out: &mut Vec<Bytes>,
    max: usize,
) -> Result<(), FrameError> {
    while out.len() < max && buf.len() >= 4 {
        let len = u32::from_be_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
        if len > MAX_FRAME_BYTES {
            return Err(FrameError::Oversize(len));
        }
        if buf.len() < 4 + len {
            buf.reserve(4 + len - buf.len());
            break;
        }
        buf.advance(4);
        out.push(buf.split_to(len).freeze());
    }
    Ok(())
}

/// Starts the cluster: the listener for incoming links and one dialer per peer. Fails only when
/// the cluster port cannot be bound.
pub async fn start(shared: Arc<Shared>, settings: ClusterSettings) -> Result<(), String> {
    let listener = TcpListener::bind(&settings.listen)
        .await
        .map_err(|e| format!("cannot listen for replicas on {}: {e}", settings.listen))?;
    let auth = Arc::new(settings.auth);
    tokio::spawn(accept_loop(shared.clone(), auth.clone(), listener));
    for seed in settings.peers {
        tokio::spawn(dial_loop(shared.clone(), auth.clone(), seed));
    }
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

async fn accept_loop(shared: Arc<Shared>, auth: Arc<Auth>, listener: TcpListener) {
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

/// Receives one peer's frames and hands them to the node.
async fn serve_incoming(
    shared: Arc<Shared>,
    auth: Arc<Auth>,
    mut socket: TcpStream,
    addr: SocketAddr,
    handshake_permit: tokio::sync::OwnedSemaphorePermit,
) {
    let _ = socket.set_nodelay(true);
    let stats = &shared.link_stats;
    let verdict = tokio::time::timeout(HANDSHAKE_TIMEOUT, accept_handshake(&mut socket, &auth))
        .await
        .unwrap_or(Err(HandshakeError::Timeout));
    drop(handshake_permit);
    let peer = match verdict {
        Ok(peer) => peer,
        Err(e) => {
            stats.count_failure(&e);
            match e {
                // A dialer that found itself, or a port scan: not worth a warning.
                HandshakeError::Io(_) => {
                    tracing::debug!("cluster: incoming link from {addr} refused: {e}")
                }
                _ => tracing::warn!("cluster: incoming link from {addr} refused: {e}"),
            }
            return;
        }
    };
    LinkStats::add(&stats.incoming_accepted, 1);
    tracing::info!("cluster: incoming link from node {} ({addr}) up", peer.0);
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut frames = Vec::new();
    let mut heartbeat = tokio::time::interval(HEARTBEAT_INTERVAL);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_heard = tokio::time::Instant::now();
    let reason = loop {
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        tokio::select! {
            read = socket.read_buf(&mut buf) => match read {
                Ok(0) => break "closed by peer".to_string(),
                Err(e) => break format!("read failed: {e}"),
                Ok(_) => last_heard = tokio::time::Instant::now(),
            },
            _ = heartbeat.tick() => {
                if last_heard.elapsed() > LINK_SILENCE_LIMIT {
                    break format!("peer silent for {LINK_SILENCE_LIMIT:?}");
                }
                // Never blocks: nothing else is written on this direction, so a full socket
                // buffer means the dialer stopped reading, which its own silence limit handles.
                match socket.try_write(&[0]) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => break format!("write failed: {e}"),
                }
                continue;
            }
        }
        let mut failed = None;
        loop {
            if let Err(FrameError::Oversize(len)) =
                split_frames(&mut buf, &mut frames, MAX_FRAMES_PER_LOCK)
            {
                LinkStats::add(&stats.oversize_frames, 1);
                tracing::warn!(
                    "cluster: node {} sent a frame of {len} bytes, above the \
                     {MAX_FRAME_BYTES}-byte limit; closing its link",
                    peer.0
                );
                failed = Some(format!(
                    "frame of {len} bytes exceeds the {MAX_FRAME_BYTES}-byte limit"
                ));
            }
            let split_any = !frames.is_empty();
            // Empty frames are heartbeats, for the link only.
            frames.retain(|f| !f.is_empty());
            if frames.is_empty() {
                if failed.is_some() || !split_any {
                    break;
                }
                continue;
            }
            let bytes: usize = frames.iter().map(|f| f.len() + 4).sum();
            LinkStats::add(&stats.frames_received, frames.len() as u64);
            LinkStats::add(&stats.bytes_received, bytes as u64);
            let mut pending = frames.drain(..).peekable();
            while pending.peek().is_some() {
                let mut host = shared.host.lock();
                let now = host.now();
                let mut handed = 0;
                while let Some(data) = pending.next_if(|_| handed < MAX_BYTES_PER_LOCK) {
                    handed += data.len();
                    host.node.handle(now, Input::PeerMessage { peer, data });
                }
                host.drain(None, &mut Vec::new(), None);
                shared.check_timer(&host, None);
                drop(host);
            }
            drop(pending);
            if failed.is_some() {
                break;
            }
        }
        if let Some(reason) = failed {
            break reason;
        }
    };
    tracing::info!(
        "cluster: incoming link from node {} ({addr}) down: {reason}",
        peer.0
    );
}

/// Why a dial attempt ended before the link was up.
enum DialError {
    Connect(io::Error),
    Handshake(HandshakeError),
}

async fn dial(auth: &Auth, seed: &str) -> Result<(TcpStream, NodeId), DialError> {
    let mut socket = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(seed))
        .await
        .map_err(|_| DialError::Connect(io::ErrorKind::TimedOut.into()))?
        .map_err(DialError::Connect)?;
    let _ = socket.set_nodelay(true);
    let peer = tokio::time::timeout(HANDSHAKE_TIMEOUT, dial_handshake(&mut socket, auth))
        .await
        .unwrap_or(Err(HandshakeError::Timeout))
        .map_err(DialError::Handshake)?;
    Ok((socket, peer))
}

/// A random duration in [d/2, d]: peers that lost each other at the same moment do not redial
/// in lockstep.
fn jittered(ms: u64) -> Duration {
    let r = getrandom::u64().unwrap_or(0);
    Duration::from_millis(ms / 2 + r % (ms / 2 + 1))
}

/// Keeps one outgoing link to the replica at `seed` up for the life of the process.
async fn dial_loop(shared: Arc<Shared>, auth: Arc<Auth>, seed: String) {
    let stats = &shared.link_stats;
    let mut backoff_ms = BACKOFF_MIN_MS;
    // The last connection error, so a peer that stays unreachable is reported once per cause,
    // not once per attempt.
    let mut last_error = String::new();
    loop {
        match dial(&auth, &seed).await {
            Ok((socket, peer)) => {
                backoff_ms = BACKOFF_MIN_MS;
                last_error.clear();
                run_outgoing(&shared, socket, peer, &seed).await;
            }
            Err(DialError::Connect(e)) => {
                let error = e.to_string();
                if error != last_error {
                    tracing::info!("cluster: cannot reach {seed}: {error} (retrying)");
                    last_error = error;
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

/// Runs one established outgoing link: registers its queue, tells the node `PeerUp`, writes until
/// the link fails, then tells the node `PeerDown`.
async fn run_outgoing(shared: &Arc<Shared>, socket: TcpStream, peer: NodeId, seed: &str) {
    let stats = &shared.link_stats;
    let queue = Arc::new(PeerQueue::new(MAX_QUEUE_BYTES));
    let generation = {
        let mut host = shared.host.lock();
        let Some(generation) = host.add_peer(peer, queue.clone()) else {
            drop(host);
            tracing::warn!(
                "cluster: {seed} is node {} which another seed already links to; ignoring it",
                peer.0
            );
            return;
        };
        host.handle(Input::PeerUp { peer });
        host.drain(None, &mut Vec::new(), None);
        shared.check_timer(&host, None);
        generation
    };
    LinkStats::add(&stats.outgoing_established, 1);
    LinkStats::add(&stats.outgoing_up, 1);
    tracing::info!("cluster: outgoing link to node {} ({seed}) up", peer.0);
    let reason = write_loop(socket, &queue, stats).await;
    {
        let mut host = shared.host.lock();
        host.remove_peer(peer, generation);
        host.handle(Input::PeerDown { peer });
        host.drain(None, &mut Vec::new(), None);
        shared.check_timer(&host, None);
    }
    stats.outgoing_up.fetch_sub(1, Ordering::Relaxed);
    LinkStats::add(&stats.outgoing_lost, 1);
    tracing::warn!(
        "cluster: outgoing link to node {} ({seed}) down: {reason}",
        peer.0
    );
}

/// Sends queued messages until the link fails; returns why it did. The peer never sends on this
/// connection, so anything readable (data or EOF) means it is gone or broken.
async fn write_loop(socket: TcpStream, queue: &PeerQueue, stats: &LinkStats) -> String {
    let (mut rd, mut wr) = socket.into_split();
    let mut frames = Vec::new();
    let mut chunks = VecDeque::new();
    // The acceptor only ever sends heartbeat bytes on this connection.
    let mut probe = [0u8; 64];
    // Ticks twice per interval: a heartbeat goes out at the first tick at least an interval
    // after the last write. Ticking once per interval skipped every other heartbeat (the tick
    // came a hair before the interval was up), so an idle link beat once per two intervals.
    let mut heartbeat = tokio::time::interval(HEARTBEAT_INTERVAL / 2);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_heard = tokio::time::Instant::now();
    let mut last_sent = tokio::time::Instant::now();
    let silent = || format!("peer silent for {LINK_SILENCE_LIMIT:?}");
    let read_reason = |read: io::Result<usize>| match read {
        Ok(0) => Some("closed by peer".to_string()),
        Ok(_) => None,
        Err(e) => Some(format!("read failed: {e}")),
    };
    loop {
        if queue.take(&mut frames).is_err() {
            LinkStats::add(&stats.queue_overflows, 1);
            return format!("outgoing queue exceeded {MAX_QUEUE_BYTES} bytes");
        }
        // Bytes of this batch that are not in the queue's accounting (a heartbeat).
        let mut unqueued = 0;
        if frames.is_empty() {
            tokio::select! {
                _ = queue.wake.notified() => continue,
                read = rd.read(&mut probe) => {
                    if let Some(reason) = read_reason(read) {
                        return reason;
                    }
                    last_heard = tokio::time::Instant::now();
                    continue;
                }
                _ = heartbeat.tick() => {
                    if last_heard.elapsed() > LINK_SILENCE_LIMIT {
                        return silent();
                    }
                    if last_sent.elapsed() < HEARTBEAT_INTERVAL {
                        continue;
                    }
                    frames.push(Bytes::new());
                    unqueued = 4;
                }
            }
        }
        let n_frames = frames.len() as u64;
        frame_chunks(&mut frames, &mut chunks);
        // A stalled peer blocks this write; meanwhile watch the queue, so that overflowing it
        // drops the link at once instead of when the peer wakes up, and the peer's heartbeats.
        let write = write_chunks(&mut wr, &mut chunks, stats);
        tokio::pin!(write);
        let result = loop {
            tokio::select! {
                r = &mut write => break r,
                _ = queue.wake.notified() => {
                    if queue.overflowed() {
                        LinkStats::add(&stats.queue_overflows, 1);
                        return format!("outgoing queue exceeded {MAX_QUEUE_BYTES} bytes");
                    }
                }
                read = rd.read(&mut probe) => {
                    if let Some(reason) = read_reason(read) {
                        return reason;
                    }
                    last_heard = tokio::time::Instant::now();
                }
                _ = heartbeat.tick() => {
                    if last_heard.elapsed() > LINK_SILENCE_LIMIT {
                        return silent();
                    }
                }
            }
        };
        last_sent = tokio::time::Instant::now();
        match result {
            Ok(n) => {
                queue.written(n - unqueued);
                LinkStats::add(&stats.frames_sent, n_frames);
                LinkStats::add(&stats.bytes_sent, n as u64);
            }
            Err(e) => return format!("write failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(id: u32, secret: Option<&str>) -> Auth {
        Auth {
            node_id: NodeId(id),
            secret: secret.map(|s| s.as_bytes().to_vec()),
        }
    }

    async fn pair(
        dialer: Auth,
        acceptor: Auth,
    ) -> (
        Result<NodeId, HandshakeError>,
        Result<NodeId, HandshakeError>,
    ) {
        let (mut a, mut b) = tokio::io::duplex(4096);
        let d = tokio::spawn(async move { dial_handshake(&mut a, &dialer).await });
        let acc = accept_handshake(&mut b, &acceptor).await;
        drop(b);
        (d.await.unwrap(), acc)
    }

    #[tokio::test]
    async fn matching_secrets_link_and_learn_each_others_ids() {
        let (d, a) = pair(auth(1, Some("s3cret")), auth(2, Some("s3cret"))).await;
        assert_eq!(d.unwrap(), NodeId(2));
        assert_eq!(a.unwrap(), NodeId(1));
        let (d, a) = pair(auth(5, None), auth(7, None)).await;
        assert_eq!(d.unwrap(), NodeId(7));
        assert_eq!(a.unwrap(), NodeId(5));
    }

    #[tokio::test]
    async fn wrong_secret_is_refused_on_both_sides() {
        let (d, a) = pair(auth(1, Some("right")), auth(2, Some("wrong"))).await;
        assert!(matches!(a, Err(HandshakeError::BadProof)), "{a:?}");
        match d {
            Err(HandshakeError::Refused(r)) => assert!(r.contains("authentication failed"), "{r}"),
            other => panic!("dialer: {other:?}"),
        }
    }

    #[tokio::test]
    async fn secret_on_one_side_only_is_refused() {
        let (d, a) = pair(auth(1, Some("x")), auth(2, None)).await;
        assert!(
            matches!(d, Err(HandshakeError::SecretMismatch { ours: true })),
            "{d:?}"
        );
        assert!(
            matches!(a, Err(HandshakeError::SecretMismatch { ours: false })),
            "{a:?}"
        );
        let (d, a) = pair(auth(1, None), auth(2, Some("x"))).await;
        assert!(
            matches!(d, Err(HandshakeError::SecretMismatch { ours: false })),
            "{d:?}"
        );
        assert!(
            matches!(a, Err(HandshakeError::SecretMismatch { ours: true })),
            "{a:?}"
        );
    }

    #[tokio::test]
    async fn own_node_id_is_refused() {
        let (d, a) = pair(auth(3, Some("k")), auth(3, Some("k"))).await;
        assert!(matches!(d, Err(HandshakeError::OwnId)), "{d:?}");
        assert!(a.is_err());
    }

    #[tokio::test]
    async fn replayed_hello_fails_against_a_fresh_challenge() {
        // Record a genuine dialer's hello on one connection...
        let (mut a, mut b) = tokio::io::duplex(4096);
        let acceptor = auth(2, Some("k"));
        let dialer = auth(1, Some("k"));
        let d = tokio::spawn(async move { dial_handshake(&mut a, &dialer).await });
        let mut challenge = [0u8; 6 + CHALLENGE_BODY];
        let na = nonce().unwrap();
        challenge[..4].copy_from_slice(&MAGIC);
        challenge[4..6].copy_from_slice(&VERSION.to_be_bytes());
        challenge[6] = FLAG_SECRET;
        challenge[7..11].copy_from_slice(&2u32.to_be_bytes());
        challenge[11..].copy_from_slice(&na);
        b.write_all(&challenge).await.unwrap();
        let mut hello = [0u8; 6 + HELLO_BODY];
        b.read_exact(&mut hello).await.unwrap();
        drop(b);
        let _ = d.await;
        // ...and replay it to the real acceptor, which sends its own nonce.
        let (mut attacker, mut server) = tokio::io::duplex(4096);
        let acc = tokio::spawn(async move { accept_handshake(&mut server, &acceptor).await });
        let mut their_challenge = [0u8; 6 + CHALLENGE_BODY];
        attacker.read_exact(&mut their_challenge).await.unwrap();
        attacker.write_all(&hello).await.unwrap();
        let verdict = acc.await.unwrap();
        assert!(
            matches!(verdict, Err(HandshakeError::BadProof)),
            "{verdict:?}"
        );
    }

    #[tokio::test]
    async fn unknown_version_and_bad_magic_are_refused() {
        let acceptor = auth(2, None);
        let (mut c, mut s) = tokio::io::duplex(4096);
        let acc = tokio::spawn(async move { accept_handshake(&mut s, &acceptor).await });
        let mut challenge = [0u8; 6 + CHALLENGE_BODY];
        c.read_exact(&mut challenge).await.unwrap();
        let mut hello = vec![0u8; 6 + HELLO_BODY];
        hello[..4].copy_from_slice(&MAGIC);
        hello[4..6].copy_from_slice(&9u16.to_be_bytes());
        c.write_all(&hello).await.unwrap();
        let verdict = acc.await.unwrap();
        assert!(
            matches!(verdict, Err(HandshakeError::UnknownVersion(9))),
            "{verdict:?}"
        );

        let acceptor = auth(2, None);
        let (mut c, mut s) = tokio::io::duplex(4096);
        let acc = tokio::spawn(async move { accept_handshake(&mut s, &acceptor).await });
        c.read_exact(&mut challenge).await.unwrap();
        c.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
        let verdict = acc.await.unwrap();
        assert!(
            matches!(verdict, Err(HandshakeError::BadMagic)),
            "{verdict:?}"
        );
    }

    #[tokio::test]
    async fn frames_round_trip_through_vectored_writes_and_split() {
        let stats = LinkStats::default();
        let (mut w, mut r) = tokio::io::duplex(1 << 20);
        let mut frames: Vec<Bytes> = (0..300)
            .map(|i| Bytes::from(vec![i as u8; (i * 37) % 1000]))
            .collect();
        let expected = frames.clone();
        let mut chunks = VecDeque::new();
        frame_chunks(&mut frames, &mut chunks);
        let n = write_chunks(&mut w, &mut chunks, &stats).await.unwrap();
        assert_eq!(n, expected.iter().map(|f| f.len() + 4).sum::<usize>());
        drop(w);
        let mut buf = BytesMut::new();
        r.read_buf(&mut buf).await.unwrap();
        while r.read_buf(&mut buf).await.unwrap() > 0 {}
        let mut got = Vec::new();
        // Frames split off in bounded batches come out whole and in order.
        loop {
            let before = got.len();
            split_frames(&mut buf, &mut got, before + 64).unwrap();
            if got.len() == before {
                break;
            }
        }
        assert_eq!(got, expected);
        assert!(buf.is_empty());
    }

    #[test]
    fn a_partial_frame_waits_and_an_oversize_header_is_an_error() {
        let mut buf = BytesMut::new();
        buf.put_u32(5);
        buf.put_slice(b"abc");
        let mut out = Vec::new();
        split_frames(&mut buf, &mut out, 10).unwrap();
        assert!(out.is_empty());
        buf.put_slice(b"de");
        split_frames(&mut buf, &mut out, 10).unwrap();
        assert_eq!(out, vec![Bytes::from_static(b"abcde")]);
        let mut big = BytesMut::new();
        big.put_u32(MAX_FRAME_BYTES as u32 + 1);
        assert_eq!(
            split_frames(&mut big, &mut out, 10),
            Err(FrameError::Oversize(MAX_FRAME_BYTES + 1))
        );
    }

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

    /// Two hosts linked over loopback: what is queued for a peer arrives there in whole frames,
    /// in batches, and a queue pushed past its bound drops the link, which comes back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_frames_cross_a_real_link_and_an_overflow_relinks() {
        let (p1, p2) = (free_port(), free_port());
        let (h1, h2) = (host(1), host(2));
        for (h, id, me, other) in [(&h1, 1, p1, p2), (&h2, 2, p2, p1)] {
            let settings = ClusterSettings {
                auth: auth(id, Some("k")),
                listen: format!("127.0.0.1:{me}"),
                peers: vec![format!("127.0.0.1:{other}")],
            };
            start(h.clone(), settings).await.unwrap();
        }
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
        let (p1, p2) = (free_port(), free_port());
        let (h1, h2) = (host(1), host(2));
        for (h, id, me, other) in [(&h1, 1, p1, p2), (&h2, 2, p2, p1)] {
            let settings = ClusterSettings {
                auth: auth(id, Some("k")),
                listen: format!("127.0.0.1:{me}"),
                peers: vec![format!("127.0.0.1:{other}")],
            };
            start(h.clone(), settings).await.unwrap();
        }
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

    /// A peer that completed the handshake and then went silent (a host gone without a reset)
    /// is dropped after the silence limit.
    #[tokio::test]
    async fn a_silent_peer_is_dropped() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let acceptor = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            accept_handshake(&mut s, &auth(2, None)).await.unwrap();
            // Read (and so keep the socket open) but never send a heartbeat.
            let mut sink = vec![0u8; 4096];
            while s.read(&mut sink).await.is_ok_and(|n| n > 0) {}
        });
        let (socket, peer) = match dial(&auth(1, None), &addr).await {
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

    #[test]
    fn queue_overflows_past_its_bound_and_then_refuses() {
        let q = PeerQueue::new(100);
        assert!(q.push(Bytes::from(vec![0; 50])));
        assert!(q.push(Bytes::from(vec![0; 40])));
        assert!(!q.push(Bytes::from(vec![0; 10])));
        assert!(!q.push(Bytes::from(vec![0; 1])));
        let mut out = Vec::new();
        assert!(q.take(&mut out).is_err());
        // Bytes taken but not written still count against the bound.
        let q = PeerQueue::new(100);
        assert!(q.push(Bytes::from(vec![0; 60])));
        q.take(&mut out).unwrap();
        assert!(!q.push(Bytes::from(vec![0; 60])));
        let q = PeerQueue::new(100);
        assert!(q.push(Bytes::from(vec![0; 60])));
        let mut out = Vec::new();
        q.take(&mut out).unwrap();
        q.written(64);
        assert!(q.push(Bytes::from(vec![0; 60])));
    }
}

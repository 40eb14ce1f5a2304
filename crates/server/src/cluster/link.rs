//! An established replica link: frames, the outgoing queue, and the tasks that carry them.
//!
//! After the handshake a connection carries frames: a 4-byte big-endian length, then that many
//! payload bytes (at most [`MAX_FRAME_BYTES`]). An empty frame is the dialer's heartbeat and
//! never reaches the node; the acceptor sends one heartbeat byte back at the same pace. Either
//! side drops a link that stayed silent for [`LINK_SILENCE_LIMIT`].

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use lattice_node::{Input, NodeId};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::handshake::{accept_handshake, Auth, HandshakeError};
use super::stats::LinkStats;
use super::stream::{LinkStream, LinkTls};
use super::HANDSHAKE_TIMEOUT;
use crate::host::Shared;

/// Largest frame payload accepted or sent: the node promises at most 16 MiB per message, and a
/// receiver must not be made to buffer more than that for one frame.
pub const MAX_FRAME_BYTES: usize = 16 << 20;
/// Bytes (payloads plus headers) waiting for or in one peer's socket at most. A peer that is
/// paused or slow stops draining its socket; rather than grow without bound we drop the link
/// (`PeerDown`) and reconnect, and the node repairs the gap by anti-entropy after `PeerUp`.
pub const MAX_QUEUE_BYTES: usize = 64 << 20;
/// Each side of an idle link shows it is alive this often: the dialer with an empty frame, the
/// acceptor with one byte back on the otherwise unused direction.
pub(super) const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(500);
/// A link whose other side sent nothing (frame or heartbeat) for this long is dead: a peer host
/// that vanished without a reset would otherwise hold a link, and the node's view of it, forever.
/// Six missed heartbeats. Short, because a link that silently lost packets (a partition that
/// drops instead of resetting) resumes only at TCP's backed-off retransmission, seconds after
/// the network heals, while a new link is dialed at once and starts with an anti-entropy round.
/// Dropping a link to a paused peer costs a redial and that round, never data.
pub(super) const LINK_SILENCE_LIMIT: Duration = Duration::from_secs(3);
/// A dialer whose peer has been silent this long (two missed heartbeats) dials a fresh link
/// beside the silent one, one attempt at a time, and moves to it as soon as its handshake
/// completes. A partition that drops packets leaves both directions of the old connection in
/// TCP's retransmission backoff, which doubles with each loss: after a cut of 1.5-3 s the next
/// retransmission can come seconds after the network healed. A fresh connection is up one
/// round trip after the heal, and a completed handshake proves the peer process answers, so a
/// peer that is only slow (its kernel acks, its process is busy) keeps its link.
pub(super) const PROBE_AFTER_SILENCE: Duration = Duration::from_millis(1000);
/// Slices per vectored write; Linux's IOV_MAX is 1024.
const MAX_IOVECS: usize = 512;
/// Frames, and payload bytes, handed to the node per lock acquisition (at least one frame), so
/// one peer's burst cannot starve clients: merging a large batch of deltas can take long. The
/// byte bound is one delta message or anti-entropy slice (64 KiB, a few milliseconds of
/// merging): at 256 KiB a replica under a bulk load held its lock for four messages at a time.
const MAX_FRAMES_PER_LOCK: usize = 256;
const MAX_BYTES_PER_LOCK: usize = 64 * 1024;
/// And time: a small message can cost much more than its bytes (a move slice's checks are a
/// few bytes each and each compares a span of the receiver's keys), so a hold also ends after
/// this long, and the lock is then handed to a waiting event loop (§90).
const MAX_HOLD_PER_LOCK: Duration = Duration::from_millis(2);
/// Read buffer growth step for incoming frames.
const READ_CHUNK: usize = 64 * 1024;

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
    // Over TLS the last records may still be in the session: out they go before the caller
    // waits for more (a no-op on plain TCP).
    w.flush().await?;
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

/// Receives one peer's frames and hands them to the node.
pub(super) async fn serve_incoming(
    shared: Arc<Shared>,
    auth: Arc<Auth>,
    tls: Option<Arc<LinkTls>>,
    socket: TcpStream,
    addr: SocketAddr,
    handshake_permit: tokio::sync::OwnedSemaphorePermit,
) {
    let _ = socket.set_nodelay(true);
    let stats = &shared.link_stats;
    // One time bound for the TLS handshake and the membership handshake together.
    let handshakes = async {
        let mut stream = LinkStream::accept(socket, tls.as_deref())
            .await
            .map_err(HandshakeError::Tls)?;
        let peer = accept_handshake(&mut stream, &auth).await?;
        Ok((stream, peer))
    };
    let verdict = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshakes)
        .await
        .unwrap_or(Err(HandshakeError::Timeout));
    drop(handshake_permit);
    let (mut socket, peer) = match verdict {
        Ok(x) => x,
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
                let started = std::time::Instant::now();
                let mut handed = 0;
                while let Some(data) = pending.next_if(|_| {
                    handed < MAX_BYTES_PER_LOCK && started.elapsed() < MAX_HOLD_PER_LOCK
                }) {
                    handed += data.len();
                    host.router.handle(now, Input::PeerMessage { peer, data });
                }
                host.drain(None, &mut Vec::new(), None);
                shared.check_timer(&mut host, None);
                if pending.peek().is_some() {
                    // More to hand over: clients waiting for the lock go first.
                    host.unlock_fair();
                } else {
                    drop(host);
                }
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

/// A fresh connection to the same peer, dialed while its link is silent: the link to move to,
/// or None when the attempt failed (the caller tries again later).
pub(super) type Probe<'a> = Pin<Box<dyn Future<Output = Option<LinkStream>> + Send + 'a>>;

/// Runs one established outgoing link: registers its queue, tells the node `PeerUp`, writes until
/// the link fails, then tells the node `PeerDown`. `probe` dials a replacement while the peer is
/// silent ([`PROBE_AFTER_SILENCE`]); a replacement that answered is returned for the caller to
/// run next.
pub(super) async fn run_outgoing<'p>(
    shared: &Arc<Shared>,
    socket: LinkStream,
    peer: NodeId,
    seed: &str,
    probe: &(dyn Fn() -> Probe<'p> + Sync),
) -> Option<LinkStream> {
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
            return None;
        };
        host.handle(Input::PeerUp { peer });
        host.drain(None, &mut Vec::new(), None);
        shared.check_timer(&mut host, None);
        generation
    };
    LinkStats::add(&stats.outgoing_established, 1);
    LinkStats::add(&stats.outgoing_up, 1);
    tracing::info!("cluster: outgoing link to node {} ({seed}) up", peer.0);
    let (reason, replacement) = write_loop_probing(socket, &queue, stats, Some(probe)).await;
    {
        let mut host = shared.host.lock();
        host.remove_peer(peer, generation);
        host.handle(Input::PeerDown { peer });
        host.drain(None, &mut Vec::new(), None);
        shared.check_timer(&mut host, None);
    }
    stats.outgoing_up.fetch_sub(1, Ordering::Relaxed);
    LinkStats::add(&stats.outgoing_lost, 1);
    tracing::warn!(
        "cluster: outgoing link to node {} ({seed}) down: {reason}",
        peer.0
    );
    replacement
}

/// Sends queued messages until the link fails; returns why it did. The peer never sends on this
/// connection, so anything readable (data or EOF) means it is gone or broken.
#[cfg(test)]
pub(super) async fn write_loop(socket: LinkStream, queue: &PeerQueue, stats: &LinkStats) -> String {
    write_loop_probing(socket, queue, stats, None).await.0
}

/// [`write_loop`], and while the peer is silent, dials replacements with `probe`: ends with the
/// first one that answers.
pub(super) async fn write_loop_probing<'p>(
    socket: LinkStream,
    queue: &PeerQueue,
    stats: &LinkStats,
    probe: Option<&(dyn Fn() -> Probe<'p> + Sync)>,
) -> (String, Option<LinkStream>) {
    match socket {
        // Plain TCP splits without a lock between the halves.
        LinkStream::Plain(s) => {
            let (rd, wr) = s.into_split();
            write_halves(rd, wr, queue, stats, probe).await
        }
        LinkStream::Tls(s) => {
            let (rd, wr) = tokio::io::split(*s);
            write_halves(rd, wr, queue, stats, probe).await
        }
    }
}

/// Completes with the probe in flight (clearing it), never when there is none.
async fn probe_done(probing: &mut Option<Probe<'_>>) -> Option<LinkStream> {
    match probing.as_mut() {
        Some(p) => {
            let found = p.await;
            *probing = None;
            found
        }
        None => std::future::pending().await,
    }
}

async fn write_halves<'p, R, W>(
    mut rd: R,
    mut wr: W,
    queue: &PeerQueue,
    stats: &LinkStats,
    probe: Option<&(dyn Fn() -> Probe<'p> + Sync)>,
) -> (String, Option<LinkStream>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut frames = Vec::new();
    let mut chunks = VecDeque::new();
    // The acceptor only ever sends heartbeat bytes on this connection.
    let mut heard = [0u8; 64];
    // Ticks twice per interval: a heartbeat goes out at the first tick at least an interval
    // after the last write. Ticking once per interval skipped every other heartbeat (the tick
    // came a hair before the interval was up), so an idle link beat once per two intervals.
    let mut heartbeat = tokio::time::interval(HEARTBEAT_INTERVAL / 2);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_heard = tokio::time::Instant::now();
    let mut last_sent = tokio::time::Instant::now();
    // The replacement being dialed while the peer is silent (one at a time).
    let mut probing: Option<Probe<'p>> = None;
    let silent = || (format!("peer silent for {LINK_SILENCE_LIMIT:?}"), None);
    let replaced = |s: LinkStream| {
        (
            format!("peer silent for over {PROBE_AFTER_SILENCE:?}; a fresh link to it answered"),
            Some(s),
        )
    };
    let read_reason = |read: io::Result<usize>| match read {
        Ok(0) => Some("closed by peer".to_string()),
        Ok(_) => None,
        Err(e) => Some(format!("read failed: {e}")),
    };
    loop {
        if queue.take(&mut frames).is_err() {
            LinkStats::add(&stats.queue_overflows, 1);
            return (
                format!("outgoing queue exceeded {MAX_QUEUE_BYTES} bytes"),
                None,
            );
        }
        // Bytes of this batch that are not in the queue's accounting (a heartbeat).
        let mut unqueued = 0;
        if frames.is_empty() {
            tokio::select! {
                _ = queue.wake.notified() => continue,
                read = rd.read(&mut heard) => {
                    if let Some(reason) = read_reason(read) {
                        return (reason, None);
                    }
                    last_heard = tokio::time::Instant::now();
                    continue;
                }
                found = probe_done(&mut probing) => {
                    if let Some(s) = found {
                        return replaced(s);
                    }
                    continue;
                }
                _ = heartbeat.tick() => {
                    if last_heard.elapsed() > LINK_SILENCE_LIMIT {
                        return silent();
                    }
                    start_probe(&mut probing, probe, last_heard);
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
                        return (format!("outgoing queue exceeded {MAX_QUEUE_BYTES} bytes"), None);
                    }
                }
                read = rd.read(&mut heard) => {
                    if let Some(reason) = read_reason(read) {
                        return (reason, None);
                    }
                    last_heard = tokio::time::Instant::now();
                }
                found = probe_done(&mut probing) => {
                    if let Some(s) = found {
                        return replaced(s);
                    }
                }
                _ = heartbeat.tick() => {
                    if last_heard.elapsed() > LINK_SILENCE_LIMIT {
                        return silent();
                    }
                    start_probe(&mut probing, probe, last_heard);
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
            Err(e) => return (format!("write failed: {e}"), None),
        }
    }
}

/// Starts dialing a replacement when the peer has been silent past [`PROBE_AFTER_SILENCE`] and
/// no attempt is in flight.
fn start_probe<'a>(
    probing: &mut Option<Probe<'a>>,
    probe: Option<&(dyn Fn() -> Probe<'a> + Sync)>,
    last_heard: tokio::time::Instant,
) {
    if let Some(dial) = probe {
        if probing.is_none() && last_heard.elapsed() > PROBE_AFTER_SILENCE {
            *probing = Some(dial());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! Counters of the replica links.

use std::sync::atomic::{AtomicU64, Ordering};

use super::handshake::HandshakeError;

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
    /// TLS handshakes that failed (`tls-replication`): a certificate the CA did not sign, or a
    /// peer that does not speak TLS.
    pub tls_failures: AtomicU64,
    pub frames_sent: AtomicU64,
    pub bytes_sent: AtomicU64,
    /// Vectored write calls, to compare with `frames_sent` (batching).
    pub write_calls: AtomicU64,
    pub frames_received: AtomicU64,
    pub bytes_received: AtomicU64,
    /// Incoming frames announcing more than [`MAX_FRAME_BYTES`](super::link::MAX_FRAME_BYTES) (the link was closed).
    pub oversize_frames: AtomicU64,
    /// Outgoing links dropped because their queue exceeded [`MAX_QUEUE_BYTES`](super::link::MAX_QUEUE_BYTES).
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
    pub tls_failures: u64,
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
            tls_failures: g(&self.tls_failures),
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

    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn count_failure(&self, e: &HandshakeError) {
        Self::add(&self.handshake_failures, 1);
        match e {
            HandshakeError::BadProof | HandshakeError::SecretMismatch { .. } => {
                Self::add(&self.auth_failures, 1)
            }
            HandshakeError::BadMagic | HandshakeError::UnknownVersion(_) => {
                Self::add(&self.version_rejects, 1)
            }
            HandshakeError::OwnId => Self::add(&self.self_id_rejects, 1),
            HandshakeError::Tls(_) => Self::add(&self.tls_failures, 1),
            _ => {}
        }
    }
}

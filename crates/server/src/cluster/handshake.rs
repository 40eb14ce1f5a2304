//! The replica link handshake: both sides prove they belong to the cluster.
//!
//! Before any frame, with `D` the dialer and `A` the acceptor:
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

use std::fmt;
use std::io;

use hmac::{Hmac, Mac};
use lattice_node::NodeId;
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Identifies a Lattice replica link in the first bytes of either side's first message, so a
/// stray client (or a Redis client pointed at the wrong port) is refused at once.
pub const MAGIC: [u8; 4] = *b"LTCL";
/// The only handshake and framing version this build speaks.
pub const VERSION: u16 = 1;
/// Upper bound of a refusal reason in a welcome message (one length byte).
const MAX_REASON_BYTES: usize = 255;

type HmacSha256 = Hmac<Sha256>;

const NONCE_BYTES: usize = 32;
const PROOF_BYTES: usize = 32;
const FLAG_SECRET: u8 = 1;
const CHALLENGE_BODY: usize = 1 + 4 + NONCE_BYTES; // after magic and version
const HELLO_BODY: usize = 1 + 4 + NONCE_BYTES + PROOF_BYTES; // after magic and version

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
    /// The TLS handshake failed (`tls-replication`): most often a certificate the CA did not
    /// sign, on either side.
    Tls(io::Error),
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
            HandshakeError::Tls(e) => write!(f, "TLS handshake failed: {e}"),
            HandshakeError::NoRandomness => write!(f, "no OS randomness for the nonce"),
        }
    }
}

impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> Self {
        // Over TLS 1.3 the dialer learns that the acceptor refused its certificate only at
        // its first read (the alert): that is a TLS refusal too, not a network failure.
        if e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) {
            return HandshakeError::Tls(e);
        }
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
    // Over TLS a write may stay in the session's buffer until flushed.
    s.flush().await?;
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
    s.flush().await?;
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
            s.flush().await?;
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

#[cfg(test)]
impl Auth {
    pub(super) fn for_tests(id: u32, secret: Option<&str>) -> Auth {
        Auth {
            node_id: NodeId(id),
            secret: secret.map(|s| s.as_bytes().to_vec()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let (d, a) = pair(
            Auth::for_tests(1, Some("s3cret")),
            Auth::for_tests(2, Some("s3cret")),
        )
        .await;
        assert_eq!(d.unwrap(), NodeId(2));
        assert_eq!(a.unwrap(), NodeId(1));
        let (d, a) = pair(Auth::for_tests(5, None), Auth::for_tests(7, None)).await;
        assert_eq!(d.unwrap(), NodeId(7));
        assert_eq!(a.unwrap(), NodeId(5));
    }

    #[tokio::test]
    async fn wrong_secret_is_refused_on_both_sides() {
        let (d, a) = pair(
            Auth::for_tests(1, Some("right")),
            Auth::for_tests(2, Some("wrong")),
        )
        .await;
        assert!(matches!(a, Err(HandshakeError::BadProof)), "{a:?}");
        match d {
            Err(HandshakeError::Refused(r)) => assert!(r.contains("authentication failed"), "{r}"),
            other => panic!("dialer: {other:?}"),
        }
    }

    #[tokio::test]
    async fn secret_on_one_side_only_is_refused() {
        let (d, a) = pair(Auth::for_tests(1, Some("x")), Auth::for_tests(2, None)).await;
        assert!(
            matches!(d, Err(HandshakeError::SecretMismatch { ours: true })),
            "{d:?}"
        );
        assert!(
            matches!(a, Err(HandshakeError::SecretMismatch { ours: false })),
            "{a:?}"
        );
        let (d, a) = pair(Auth::for_tests(1, None), Auth::for_tests(2, Some("x"))).await;
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
        let (d, a) = pair(Auth::for_tests(3, Some("k")), Auth::for_tests(3, Some("k"))).await;
        assert!(matches!(d, Err(HandshakeError::OwnId)), "{d:?}");
        assert!(a.is_err());
    }

    #[tokio::test]
    async fn replayed_hello_fails_against_a_fresh_challenge() {
        // Record a genuine dialer's hello on one connection...
        let (mut a, mut b) = tokio::io::duplex(4096);
        let acceptor = Auth::for_tests(2, Some("k"));
        let dialer = Auth::for_tests(1, Some("k"));
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
        let acceptor = Auth::for_tests(2, None);
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

        let acceptor = Auth::for_tests(2, None);
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
}

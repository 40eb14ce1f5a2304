//! The peer protocol: protobuf messages (prost) carried one per frame by the driver.
//!
//! Every message is an [`Envelope`] with a protocol `version`, the sender's node id and its
//! hybrid clock (the receiver observes it, so writes it makes afterwards order after everything
//! the sender had seen). CRDT states travel as opaque `bincode` blobs inside the protobuf
//! messages: protobuf gives the envelope a stable, versioned shape; the CRDT encoding is
//! internal to one version of Lattice (a version mismatch is refused, not misread).

use prost::Message;

/// Bumped on any incompatible change; peers with another version are ignored (and counted).
/// 2: key states carry a presence mask (see `state::KeyState`'s serialization).
/// 3: anti-entropy states go in numbered slices the receiver acknowledges (`States::slice`,
/// `SliceAck`), so a sender paces a large transfer by the receiver's merging; `Digests`
/// below the root name parents instead of every child.
pub const PROTOCOL_VERSION: u32 = 3;

/// Largest message the node emits or accepts (drivers enforce the same bound on frames).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

#[derive(Clone, PartialEq, Message)]
pub struct Envelope {
    #[prost(uint32, tag = "1")]
    pub version: u32,
    #[prost(uint32, tag = "2")]
    pub from: u32,
    #[prost(uint64, tag = "3")]
    pub hlc_wall_ms: u64,
    #[prost(uint32, tag = "4")]
    pub hlc_logical: u32,
    #[prost(oneof = "Body", tags = "5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 18")]
    pub body: Option<Body>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Body {
    /// Deltas of recent local writes, numbered per link for acknowledgement.
    #[prost(message, tag = "5")]
    Deltas(Deltas),
    #[prost(message, tag = "6")]
    Ack(Ack),
    /// Anti-entropy: Merkle digests at one level.
    #[prost(message, tag = "7")]
    Digests(Digests),
    /// Anti-entropy: full states of the keys in differing leaves.
    #[prost(message, tag = "8")]
    States(States),
    /// A PUBLISH to deliver to the receiver's own subscribers.
    #[prost(message, tag = "9")]
    Publish(Publish),
    /// Partitioned cluster: the members the sender knows, with their client addresses.
    #[prost(message, tag = "10")]
    Members(Members),
    /// Partitioned cluster: a client's command for a key the sender does not own.
    #[prost(message, tag = "11")]
    Forward(Forward),
    /// The owner's reply to a `Forward`, in the client's protocol, byte for byte.
    #[prost(message, tag = "12")]
    ForwardReply(ForwardReply),
    /// The function library set: its digest alone (an anti-entropy probe) or whole.
    #[prost(message, tag = "13")]
    Functions(Functions),
    /// Anti-entropy: a `States` slice was merged; the sender may send the next one.
    #[prost(message, tag = "14")]
    SliceAck(SliceAck),
    /// Partitioned cluster, hot keys: a non-owner asks the owners for copies of keys hot on
    /// it, or gives them back; an owner grants them.
    #[prost(message, tag = "18")]
    Hot(Hot),
}

/// What a [`Hot`] message asks or says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HotOp {
    /// Keep sending me these keys' states (also renews the lease on keys already sent).
    Subscribe = 1,
    /// I dropped my copies of these keys.
    Unsubscribe = 2,
    /// The owner sent these keys' states and will keep sending their deltas.
    Grant = 3,
}

#[derive(Clone, PartialEq, Message)]
pub struct Hot {
    /// A [`HotOp`]; unknown values are ignored.
    #[prost(uint32, tag = "1")]
    pub op: u32,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    pub keys: Vec<bytes::Bytes>,
}

impl Hot {
    pub fn op(&self) -> Option<HotOp> {
        match self.op {
            1 => Some(HotOp::Subscribe),
            2 => Some(HotOp::Unsubscribe),
            3 => Some(HotOp::Grant),
            _ => None,
        }
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct Member {
    #[prost(uint32, tag = "1")]
    pub id: u32,
    #[prost(string, tag = "2")]
    pub host: String,
    #[prost(uint32, tag = "3")]
    pub port: u32,
}

#[derive(Clone, PartialEq, Message)]
pub struct Members {
    #[prost(message, repeated, tag = "1")]
    pub members: Vec<Member>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Forward {
    /// The sender's number for this request (echoed in the reply).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The client's protocol: 2 or 3 (the reply is encoded in it).
    #[prost(uint32, tag = "2")]
    pub proto: u32,
    #[prost(bytes = "bytes", repeated, tag = "3")]
    pub args: Vec<bytes::Bytes>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ForwardReply {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(bytes = "bytes", tag = "2")]
    pub reply: bytes::Bytes,
}

#[derive(Clone, PartialEq, Message)]
pub struct KeyBlob {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: bytes::Bytes,
    /// `bincode` of a `KeyState`.
    #[prost(bytes = "bytes", tag = "2")]
    pub state: bytes::Bytes,
}

/// One batch of deltas, numbered on this link. `batch` is an encoded [`DeltaBatch`]: encoded
/// once and shared by every peer's message.
#[derive(Clone, PartialEq, Message)]
pub struct Deltas {
    #[prost(uint64, tag = "1")]
    pub seq: u64,
    #[prost(bytes = "bytes", tag = "2")]
    pub batch: bytes::Bytes,
}

#[derive(Clone, PartialEq, Message)]
pub struct DeltaBatch {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<KeyBlob>,
    /// Partitioned cluster: the `bincode` of the joined causal contexts of the batch's deltas
    /// this receiver does not own (their states went only to their owners). The receiver
    /// counts those dots as seen, so its GC report does not stall on writes it never holds.
    #[prost(bytes = "bytes", tag = "2")]
    pub skipped: bytes::Bytes,
}

/// Acknowledges one `Deltas` message and reports the sender's seen-set frontier (the
/// contiguous prefix of every node's dots it has merged), which drives GC.
#[derive(Clone, PartialEq, Message)]
pub struct Ack {
    #[prost(uint64, tag = "1")]
    pub seq: u64,
    #[prost(uint32, repeated, tag = "2")]
    pub seen_nodes: Vec<u32>,
    #[prost(uint64, repeated, tag = "3")]
    pub seen_counters: Vec<u64>,
}

/// Merkle digests at `level`. At level 0, `index` names the nodes (the root) and `digest`
/// holds one digest each; at a deeper level `index` names parent nodes (at `level - 1`) and
/// `digest` holds the digests of all `FANOUT` children of each, in order: the children of a
/// differing node are always sent together, so naming each child cost about a quarter of
/// the digests' bytes again.
#[derive(Clone, PartialEq, Message)]
pub struct Digests {
    #[prost(uint32, tag = "1")]
    pub level: u32,
    #[prost(uint32, repeated, tag = "2")]
    pub index: Vec<u32>,
    #[prost(fixed64, repeated, tag = "3")]
    pub digest: Vec<u64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct States {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<KeyBlob>,
    /// Leaves whose states the receiver should send back (the pull half of push-pull).
    #[prost(uint32, repeated, tag = "2")]
    pub want_leaves: Vec<u32>,
    /// Non-zero: slice number of a transfer, to be acknowledged with a [`SliceAck`] once
    /// merged (the sender keeps a bounded number of slices unacknowledged per peer).
    #[prost(uint64, tag = "3")]
    pub slice: u64,
}

#[derive(Clone, PartialEq, Message)]
pub struct SliceAck {
    #[prost(uint64, tag = "1")]
    pub slice: u64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Publish {
    #[prost(bytes = "bytes", tag = "1")]
    pub channel: bytes::Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub message: bytes::Bytes,
    /// An SPUBLISH (for shard channel subscribers) rather than a PUBLISH. Absent from the
    /// messages of nodes that predate sharded pub/sub, which read as false.
    #[prost(bool, tag = "3")]
    pub shard: bool,
}

/// The sender's function library set (see `cmd::function::library`): with `full`, every entry
/// (`entries`); without, only its `digest`, which the receiver answers with its own set when
/// the digests differ.
#[derive(Clone, PartialEq, Message)]
pub struct Functions {
    #[prost(fixed64, tag = "1")]
    pub digest: u64,
    #[prost(bytes = "bytes", tag = "2")]
    pub entries: bytes::Bytes,
    #[prost(bool, tag = "3")]
    pub full: bool,
}

/// Writes an encoded [`DeltaBatch`] entry by entry, byte for byte what prost would produce for
/// the same entries, without building a `KeyBlob` per key: the flush of a random-key write load
/// encodes one entry per written key, and the per-entry buffers and reference-counted copies
/// of the general path cost about as much as encoding the state itself.
#[derive(Default)]
pub struct BatchWriter {
    buf: Vec<u8>,
}

impl BatchWriter {
    /// Appends the entry (`key`, `state`), `state` being the `bincode` of a `KeyState`.
    pub fn push(&mut self, key: &[u8], state: &[u8]) {
        use prost::encoding::{encode_key, encode_varint, WireType};
        encode_key(1, WireType::LengthDelimited, &mut self.buf);
        encode_varint((field_len(key) + field_len(state)) as u64, &mut self.buf);
        // Proto3 leaves empty bytes fields out, as prost does.
        for (tag, bytes) in [(1, key), (2, state)] {
            if !bytes.is_empty() {
                encode_key(tag, WireType::LengthDelimited, &mut self.buf);
                encode_varint(bytes.len() as u64, &mut self.buf);
                self.buf.extend_from_slice(bytes);
            }
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn finish(self) -> bytes::Bytes {
        bytes::Bytes::from(self.buf)
    }

    /// Appends [`DeltaBatch::skipped`] (protobuf lets a field follow the repeated entries).
    pub fn finish_with_skipped(mut self, skipped: &[u8]) -> bytes::Bytes {
        use prost::encoding::{encode_key, encode_varint, WireType};
        if !skipped.is_empty() {
            encode_key(2, WireType::LengthDelimited, &mut self.buf);
            encode_varint(skipped.len() as u64, &mut self.buf);
            self.buf.extend_from_slice(skipped);
        }
        bytes::Bytes::from(self.buf)
    }
}

/// Encoded length of a non-empty bytes field with a one-byte key (0 if empty: left out).
fn field_len(bytes: &[u8]) -> usize {
    if bytes.is_empty() {
        0
    } else {
        1 + prost::encoding::encoded_len_varint(bytes.len() as u64) + bytes.len()
    }
}

pub fn encode(env: &Envelope) -> bytes::Bytes {
    bytes::Bytes::from(env.encode_to_vec())
}

pub fn decode(data: &[u8]) -> Result<Envelope, String> {
    if data.len() > MAX_MESSAGE_BYTES {
        return Err(format!("message of {} bytes exceeds the limit", data.len()));
    }
    Envelope::decode(data).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_writer_matches_prost() {
        let entries: Vec<KeyBlob> = [
            (&b"k"[..], vec![1u8, 2, 3]),
            (b"", vec![9]),
            (b"a longer key", vec![7; 300]),
            (b"no state", vec![]),
        ]
        .into_iter()
        .map(|(k, s)| KeyBlob {
            key: bytes::Bytes::copy_from_slice(k),
            state: bytes::Bytes::from(s),
        })
        .collect();
        let mut w = BatchWriter::default();
        assert!(w.is_empty());
        for e in &entries {
            w.push(&e.key, &e.state);
        }
        let expected = DeltaBatch {
            entries: entries.clone(),
            skipped: bytes::Bytes::new(),
        }
        .encode_to_vec();
        assert_eq!(w.len(), expected.len());
        let ours = w.finish();
        assert_eq!(&ours[..], &expected[..]);
        assert_eq!(DeltaBatch::decode(&ours[..]).unwrap().entries, entries);
    }
}

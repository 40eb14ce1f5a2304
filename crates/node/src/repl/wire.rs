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
/// 4: forwarded commands and their replies travel in per-peer batches (`Forwards`, tag 19)
/// instead of a message each (tags 11 and 12, no longer used).
/// 5: a `MoveSlice` may check leaves by digest (`check_*`) and a `MoveAck` name the leaves
/// that differed (`want`): a receiver of version 4 would acknowledge a check unanswered.
/// 6: a `MoveSlice` may carry states in their short form (`short_entries`, `frontier`): a
/// receiver of version 5 would acknowledge them unmerged.
pub const PROTOCOL_VERSION: u32 = 6;

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
    #[prost(
        oneof = "Body",
        tags = "5, 6, 7, 8, 9, 10, 13, 14, 15, 16, 17, 18, 19, 20"
    )]
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
    /// The function library set: its digest alone (an anti-entropy probe) or whole.
    #[prost(message, tag = "13")]
    Functions(Functions),
    /// Anti-entropy: a `States` slice was merged; the sender may send the next one.
    #[prost(message, tag = "14")]
    SliceAck(SliceAck),
    /// Live membership: one acknowledged slice of a slot-group move (ARCHITECTURE, "Live
    /// membership").
    #[prost(message, tag = "15")]
    MoveSlice(MoveSlice),
    /// A `MoveSlice` was merged.
    #[prost(message, tag = "16")]
    MoveAck(MoveAck),
    /// A gaining owner asks a holder to stream it these groups (no draining holder is left).
    #[prost(message, tag = "17")]
    MoveAsk(MoveAsk),
    /// Partitioned cluster, hot keys: a non-owner asks the owners for copies of keys hot on
    /// it, or gives them back; an owner grants them.
    #[prost(message, tag = "18")]
    Hot(Hot),
    /// Partitioned cluster: clients' commands for keys the sender does not own, and the
    /// owner's replies to the receiver's, gathered in one turn (see `repl::outbox`).
    #[prost(message, tag = "19")]
    Forwards(Forwards),
    /// Partitioned cluster, eviction (ARCHITECTURE §86): an owner asks the other owners
    /// whether they hold keys as it does, they answer, and an owner holding a key's stub
    /// asks them for the key's whole state.
    #[prost(message, tag = "20")]
    Hold(Hold),
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

/// What a [`Hold`] message asks or says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldOp {
    /// Do you hold these keys with these digests (`digests`, one per key)?
    Ask = 1,
    /// I hold these keys with the digests you asked about.
    Have = 2,
    /// Send me these keys' whole states (I hold stubs of them).
    Fetch = 3,
}

#[derive(Clone, PartialEq, Message)]
pub struct Hold {
    /// A [`HoldOp`]; unknown values are ignored.
    #[prost(uint32, tag = "1")]
    pub op: u32,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    pub keys: Vec<bytes::Bytes>,
    /// `Ask` only: the asker's digest of each key.
    #[prost(fixed64, repeated, tag = "3")]
    pub digests: Vec<u64>,
}

impl Hold {
    pub fn op(&self) -> Option<HoldOp> {
        match self.op {
            1 => Some(HoldOp::Ask),
            2 => Some(HoldOp::Have),
            3 => Some(HoldOp::Fetch),
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
    /// Live membership (all absent from senders that predate it, which reads as an `up`
    /// member at epoch 0 holding nothing announced): where peers dial it (0: unknown).
    #[prost(uint32, tag = "4")]
    pub cluster_port: u32,
    /// `cluster::Status` as a number.
    #[prost(uint32, tag = "5")]
    pub status: u32,
    /// The member's own version of its record: the higher one wins.
    #[prost(uint64, tag = "6")]
    pub epoch: u64,
    /// The slot groups it holds completely, a bitmap (bit g of byte g / 8).
    #[prost(bytes = "bytes", tag = "7")]
    pub held: bytes::Bytes,
}

/// One slice of a move: states of keys in `groups` (a bitmap of slot groups, bit g of byte
/// g / 8). Slices of one `stream` are numbered from 1; `last` marks the final one, after
/// which the receiver holds every key the sender held in those groups when it listed them.
#[derive(Clone, PartialEq, Message)]
pub struct MoveSlice {
    #[prost(uint64, tag = "1")]
    pub stream: u64,
    #[prost(uint64, tag = "2")]
    pub slice: u64,
    #[prost(bytes = "bytes", tag = "3")]
    pub groups: bytes::Bytes,
    #[prost(message, repeated, tag = "4")]
    pub entries: Vec<KeyBlob>,
    #[prost(bool, tag = "5")]
    pub last: bool,
    /// Groups of the stream the receiver already holds (by its record): their keys are not
    /// sent but checked, a leaf at a time (`check_leaves`, `check_digests`).
    #[prost(bytes = "bytes", tag = "6")]
    pub check_groups: bytes::Bytes,
    /// Checks, each of the `moves::CHECK_SPAN` Merkle leaves from the one named, named by its
    /// distance from the one before (the first from 0).
    #[prost(uint32, repeated, tag = "7")]
    pub check_leaves: Vec<u32>,
    /// Per check, the wrapping sum of the digests of its leaves' keys in `check_groups`.
    #[prost(fixed64, repeated, tag = "8")]
    pub check_digests: Vec<u64>,
    /// States in their short form (`KeyState::encode_move_short`: compact strings as dot,
    /// stamp and value), which the receiver expands with `frontier` into the general form
    /// `entries` would have carried (ARCHITECTURE §89).
    #[prost(message, repeated, tag = "9")]
    pub short_entries: Vec<KeyBlob>,
    /// `bincode` of the sender's applied GC frontier when it built the slice; empty when
    /// `short_entries` is.
    #[prost(bytes = "bytes", tag = "10")]
    pub frontier: bytes::Bytes,
}

#[derive(Clone, PartialEq, Message)]
pub struct MoveAck {
    #[prost(uint64, tag = "1")]
    pub stream: u64,
    #[prost(uint64, tag = "2")]
    pub slice: u64,
    /// Checks of the slice whose keys differ here (their first leaves): the sender sends
    /// their states.
    #[prost(uint32, repeated, tag = "3")]
    pub want: Vec<u32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct MoveAsk {
    #[prost(bytes = "bytes", tag = "1")]
    pub groups: bytes::Bytes,
}

#[derive(Clone, PartialEq, Message)]
pub struct Members {
    #[prost(message, repeated, tag = "1")]
    pub members: Vec<Member>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Forwards {
    /// In the order the sender's clients sent them: the receiver runs them in this order.
    #[prost(message, repeated, tag = "1")]
    pub forwards: Vec<Forward>,
    #[prost(message, repeated, tag = "2")]
    pub replies: Vec<ForwardReply>,
}

/// A client's command for a key the sender does not own.
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
    /// The sender process's number (`Cluster::origin`): forward ids count from 1 in each
    /// process, so the owner tells a restarted sender's forwards from copies of the old
    /// process's by it.
    #[prost(uint64, tag = "4")]
    pub origin: u64,
}

/// The owner's reply to a `Forward`, in the client's protocol, byte for byte.
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
    /// Live membership: the sender's member records as ranks (`Cluster::ranks`), by id, sent
    /// only when the batch holds a key of a group the receiver owns by the sender's placement
    /// and does not hold yet by its record. A receiver that does not keep a key of the batch
    /// and knows a lower rank of one of these members has not heard of the change yet: it
    /// neither merges nor acknowledges the message, and sends the sender its own records,
    /// which the sender answers with the ones it lacks (ARCHITECTURE §65).
    #[prost(uint32, repeated, tag = "3")]
    pub member_ids: Vec<u32>,
    #[prost(uint64, repeated, tag = "4")]
    pub member_ranks: Vec<u64>,
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
    /// The sender's applied GC frontier (node ids and counters, pairwise), the context every
    /// state here was expanded with: a receiver whose own frontier is behind adopts what of it
    /// it has merged, so the states join in compact form (ARCHITECTURE, "A merged state is
    /// compacted with the sender's frontier"). Empty from senders that predate it.
    #[prost(uint32, repeated, tag = "4")]
    pub frontier_nodes: Vec<u32>,
    #[prost(uint64, repeated, tag = "5")]
    pub frontier_counters: Vec<u64>,
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

/// Writes an encoded `Envelope` holding a [`States`] slice, its entries pushed one by one
/// ([`BatchWriter::push`]: a `States` entry is laid out as a `DeltaBatch` entry, field 1 of
/// either), byte for byte what prost writes for the same message. A slice of hundreds of keys
/// built as `KeyBlob`s cost two or three small allocations a key and a second copy of every
/// state, and freeing them made the slice's one large buffer the allocator's most expensive
/// request: about half of a transfer step on the sender.
#[derive(Default)]
pub struct StatesWriter {
    entries: BatchWriter,
}

impl StatesWriter {
    /// Appends the entry (`key`, `state`), `state` being the `bincode` of a key state.
    pub fn push(&mut self, key: &[u8], state: &[u8]) {
        self.entries.push(key, state);
    }

    /// The message: `head` is the envelope without a body (version, sender, clock), which
    /// prost encodes; the `States` body (field 8) follows it, then its remaining fields.
    pub fn finish(
        self,
        head: &Envelope,
        want_leaves: &[u32],
        slice: u64,
        frontier: &[(u32, u64)],
    ) -> bytes::Bytes {
        use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
        debug_assert!(head.body.is_none());
        let mut tail = Vec::new();
        // Proto3 packs repeated scalars and leaves empty ones and zeros out, as prost does.
        let packed = |tail: &mut Vec<u8>, tag: u32, values: &mut dyn Iterator<Item = u64>| {
            let values: Vec<u64> = values.collect();
            if values.is_empty() {
                return;
            }
            encode_key(tag, WireType::LengthDelimited, tail);
            let len: usize = values.iter().map(|&v| encoded_len_varint(v)).sum();
            encode_varint(len as u64, tail);
            for v in values {
                encode_varint(v, tail);
            }
        };
        packed(&mut tail, 2, &mut want_leaves.iter().map(|&l| u64::from(l)));
        if slice != 0 {
            encode_key(3, WireType::Varint, &mut tail);
            encode_varint(slice, &mut tail);
        }
        packed(
            &mut tail,
            4,
            &mut frontier.iter().map(|&(n, _)| u64::from(n)),
        );
        packed(&mut tail, 5, &mut frontier.iter().map(|&(_, c)| c));
        let body_len = self.entries.len() + tail.len();
        let mut out = Vec::with_capacity(head.encoded_len() + 1 + 5 + body_len);
        head.encode(&mut out).expect("a Vec grows as needed");
        encode_key(8, WireType::LengthDelimited, &mut out);
        encode_varint(body_len as u64, &mut out);
        out.extend_from_slice(&self.entries.buf);
        out.extend_from_slice(&tail);
        bytes::Bytes::from(out)
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
    fn states_writer_matches_prost() {
        let entries: Vec<KeyBlob> = [(&b"k"[..], vec![1u8, 2, 3]), (b"key 2", vec![7; 200])]
            .into_iter()
            .map(|(k, s)| KeyBlob {
                key: bytes::Bytes::copy_from_slice(k),
                state: bytes::Bytes::from(s),
            })
            .collect();
        type Case<'a> = (&'a [u32], u64, &'a [(u32, u64)]);
        let cases: [Case; 3] = [
            (&[], 0, &[]),
            (&[3, 70_000], 7, &[(1, 5)]),
            (&[0], 1 << 40, &[(1, 300), (2, 0), (0x8000_0001, u64::MAX)]),
        ];
        for (want, slice, frontier) in cases {
            for entries in [&entries[..], &[]] {
                let head = Envelope {
                    version: PROTOCOL_VERSION,
                    from: 3,
                    hlc_wall_ms: 1_700_000_000_000,
                    hlc_logical: 9,
                    body: None,
                };
                let mut w = StatesWriter::default();
                for e in entries {
                    w.push(&e.key, &e.state);
                }
                let ours = w.finish(&head, want, slice, frontier);
                let expected = encode(&Envelope {
                    body: Some(Body::States(States {
                        entries: entries.to_vec(),
                        want_leaves: want.to_vec(),
                        slice,
                        frontier_nodes: frontier.iter().map(|f| f.0).collect(),
                        frontier_counters: frontier.iter().map(|f| f.1).collect(),
                    })),
                    ..head
                });
                assert_eq!(&ours[..], &expected[..], "{want:?} {slice} {frontier:?}");
            }
        }
    }

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

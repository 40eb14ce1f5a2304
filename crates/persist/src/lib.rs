//! Lattice's persistence files, independent of where they live.
//!
//! The node (`lattice-node`) decides what to persist and emits it as outputs: log records (the
//! new state of every key a batch of commands changed) and snapshot chunks. A driver hands them
//! to a [`Store`], which frames them into files through the [`Dir`] trait: the server implements
//! it over a local directory, the simulator over a simulated disk that loses unsynced bytes and
//! tears writes when it crashes. The [`Uploader`] decides what goes to an
//! object store (sealed pieces of the synced log, snapshots, a manifest) and when; its drivers
//! make the calls.
//!
//! Files:
//! - `log-<first seq>.aof`: segments of framed records, in sequence-number order.
//! - `snap-<seq>.snap`: a snapshot taken from sequence number `seq` on (see [`Store::recover`]).
//! - `MANIFEST`: which snapshot is current, replaced atomically.
//!
//! Every frame is `len u32 | crc u32 | version u8 | kind u8 | seq u64 | payload`, little
//! endian, the checksum (CRC-32C since format version 2, CRC-32 before) covering everything
//! after itself. Log records arrive framed by the node (`lattice_node::persist::frame`, whose
//! layout and checksums this crate re-exports and reads); snapshot frames are built here. This
//! crate reads no clock and does no IO of its own.

mod driver;
mod frame;
mod store;
mod upload;

pub use driver::{Loaded, Persister};

pub use frame::{encode_frame, scan, Frame, Kind, ScanEnd, FORMAT_VERSION, FRAME_HEADER};
pub use store::{Dir, Recovered, Store, SyncTicket, MAX_SEGMENT_BYTES};
pub use upload::{
    parse_piece_key, plan_restore, AckMode, Call, ObjectReply, ObjectRequest, RestorePlan, Start,
    UploadConfig, Uploader, MANIFEST_KEY,
};

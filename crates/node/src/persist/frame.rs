//! The log's frame: one checksummed, versioned frame per record, written by the node.
//!
//! `len u32 | crc u32 | version u8 | kind u8 | seq u64 | payload`, little endian; `len` counts
//! the bytes after the checksum, which covers them (from the version byte on). The node builds
//! a record's frame itself, the payload encoded in place after a header filled in last
//! ([`begin_frame`], [`seal_frame`]), so a record reaches the driver ready to be written: the
//! payload is neither copied into a record buffer of its own nor copied again into the write
//! buffer behind a header (ARCHITECTURE §81). Reading frames (`scan`) is `lattice-persist`'s.
//!
//! Version 2 (written since ARCHITECTURE §76) checksums a frame with CRC-32C (Castagnoli),
//! which x86-64 computes eight bytes per instruction (SSE4.2); version 1 used CRC-32 (IEEE),
//! whose table or carry-less-multiply code cost a small record about 140 instructions, a
//! tenth of what logging added to a SET. The reader accepts both: the version byte, the first
//! byte the checksum covers, says which checksum to verify.

use bytes::BufMut;

/// The frame format this code writes.
pub const FORMAT_VERSION: u8 = 2;
/// The frame format before it: the same layout, checksummed with CRC-32 (IEEE). Still read.
pub const FORMAT_VERSION_CRC32: u8 = 1;
/// Bytes before a frame's payload: length, checksum, version, kind, sequence number.
pub const FRAME_HEADER: usize = 4 + 4 + 1 + 1 + 8;

/// What a frame holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The new state of the keys one batch of commands changed (the node's encoding).
    Batch = 1,
    /// Logging resumed after a pause (`appendonly` was off): the log before this frame does
    /// not lead to the state after it, so replay from an older snapshot stops here.
    Resume = 2,
    /// A snapshot's first frame; its sequence number is the snapshot's.
    SnapBegin = 3,
    /// Key states of a snapshot (the same encoding as a batch).
    SnapChunk = 4,
    /// A snapshot's last frame; the payload is its key count (u64).
    SnapEnd = 5,
}

impl Kind {
    /// The kind a frame's kind byte names, if any.
    pub fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Batch,
            2 => Kind::Resume,
            3 => Kind::SnapBegin,
            4 => Kind::SnapChunk,
            5 => Kind::SnapEnd,
            _ => return None,
        })
    }
}

/// Appends room for a frame's header to `out`; the payload follows it, and [`seal_frame`]
/// fills the header in once the payload is complete. Returns where the frame starts.
pub fn begin_frame<B: BufMut + AsRef<[u8]>>(out: &mut B) -> usize {
    let start = out.as_ref().len();
    out.put_bytes(0, FRAME_HEADER);
    start
}

/// Fills in the header of the frame `frame` (a frame begun by [`begin_frame`], its payload
/// after the header): length, version, kind, sequence number, and the checksum of it all.
pub fn seal_frame(frame: &mut [u8], kind: Kind, seq: u64) {
    debug_assert!(frame.len() >= FRAME_HEADER);
    let body_len = (frame.len() - 8) as u32;
    frame[0..4].copy_from_slice(&body_len.to_le_bytes());
    frame[8] = FORMAT_VERSION;
    frame[9] = kind as u8;
    frame[10..18].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c(&frame[8..]);
    frame[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Appends one frame holding `payload` to `out`.
pub fn encode_frame(kind: Kind, seq: u64, payload: &[u8], out: &mut Vec<u8>) {
    out.reserve(FRAME_HEADER + payload.len());
    let start = begin_frame(out);
    out.extend_from_slice(payload);
    seal_frame(&mut out[start..], kind, seq);
}

/// The payload of a whole frame built by [`seal_frame`] or [`encode_frame`].
pub fn payload(frame: &[u8]) -> &[u8] {
    &frame[FRAME_HEADER..]
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, as iSCSI and ext4 use it).
pub fn crc32c(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU supports SSE4.2, checked just above.
            return unsafe { crc32c_sse42(data) };
        }
    }
    crc32c_portable(data)
}

/// CRC-32C by the SSE4.2 `crc32` instruction, eight bytes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_sse42(data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut crc = u64::from(u32::MAX);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let mut crc = crc as u32;
    for &b in words.remainder() {
        crc = _mm_crc32_u8(crc, b);
    }
    !crc
}

/// The byte-wise table for [`crc32c_portable`].
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            bit += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-32C a byte at a time: CPUs without SSE4.2 (and the check of the fast path).
pub fn crc32c_portable(data: &[u8]) -> u32 {
    let mut crc = u32::MAX;
    for &b in data {
        crc = (crc >> 8) ^ CRC32C_TABLE[((crc ^ u32::from(b)) & 0xff) as usize];
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value_on_both_paths() {
        // The catalogue's check value of CRC-32C over "123456789".
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_portable(b"123456789"), 0xE306_9283);
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for len in 0..data.len() {
            assert_eq!(crc32c(&data[..len]), crc32c_portable(&data[..len]), "{len}");
        }
    }

    /// A frame sealed in place in a `BytesMut` is byte for byte the one `encode_frame` builds.
    #[test]
    fn a_frame_sealed_in_place_equals_an_encoded_one() {
        let mut encoded = Vec::new();
        encode_frame(Kind::Resume, 77, b"payload", &mut encoded);
        let mut arena = bytes::BytesMut::new();
        arena.put_slice(b"earlier");
        let start = begin_frame(&mut arena);
        arena.put_slice(b"payload");
        seal_frame(&mut arena[start..], Kind::Resume, 77);
        assert_eq!(&arena[start..], &encoded[..]);
        assert_eq!(payload(&encoded), b"payload");
        assert_eq!(u32::from_le_bytes(encoded[0..4].try_into().unwrap()), 17);
    }
}

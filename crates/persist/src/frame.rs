//! Reading frames: one checksummed, versioned frame per record.
//!
//! The node builds the frames it logs (`lattice_node::persist::frame`, which holds the layout,
//! the kinds and the checksums, re-exported here); this module decodes them and tells a torn
//! tail from corruption. Both format versions are read: the version byte, the first byte the
//! checksum covers, says which checksum to verify (2: CRC-32C, 1: CRC-32 IEEE).

pub use lattice_node::persist::frame::{
    crc32c, encode_frame, payload, Kind, FORMAT_VERSION, FORMAT_VERSION_CRC32, FRAME_HEADER,
};

/// Largest payload accepted when reading (a bigger length is damage, not a record).
const MAX_PAYLOAD: usize = 1 << 31;

/// The checksum of a frame's `body` (from its version byte on), by the version's algorithm;
/// None for an unknown version.
fn body_checksum(body: &[u8]) -> Option<u32> {
    match body.first() {
        Some(&FORMAT_VERSION) => Some(crc32c(body)),
        Some(&FORMAT_VERSION_CRC32) => Some(crc32fast::hash(body)),
        _ => None,
    }
}

/// One decoded frame.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub kind: Kind,
    pub seq: u64,
    pub payload: &'a [u8],
    /// Where the frame starts in its file.
    pub offset: usize,
    /// Where the next frame starts.
    pub end: usize,
}

/// How a scan ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte belonged to a whole, valid frame.
    Clean,
    /// Damage from `offset` to the end with no valid frame after it: an interrupted last
    /// write, safe to cut.
    Torn { offset: usize, reason: String },
    /// Damage at `offset` followed by valid frames (or in a file that is not the last): the
    /// middle of the data is corrupt, and loading must stop with an error.
    Corrupt { offset: usize, reason: String },
}

/// Decodes the frame at `at`, or says why there is none.
fn decode_at(data: &[u8], at: usize) -> Result<Frame<'_>, String> {
    let rest = &data[at..];
    if rest.len() < 8 {
        return Err(format!(
            "{} stray bytes, shorter than a frame header",
            rest.len()
        ));
    }
    let body_len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
    if !(FRAME_HEADER - 8..=MAX_PAYLOAD).contains(&body_len) {
        return Err(format!("implausible frame length {body_len}"));
    }
    if rest.len() - 8 < body_len {
        return Err(format!(
            "frame of {body_len} bytes but only {} left",
            rest.len() - 8
        ));
    }
    let body = &rest[8..8 + body_len];
    match body_checksum(body) {
        None => return Err(format!("unknown format version {}", body[0])),
        Some(c) if c != crc => return Err("checksum mismatch".into()),
        Some(_) => {}
    }
    let kind = Kind::from_byte(body[1]).ok_or_else(|| format!("unknown frame kind {}", body[1]))?;
    let seq = u64::from_le_bytes(body[2..10].try_into().expect("8 bytes"));
    Ok(Frame {
        kind,
        seq,
        payload: &body[10..],
        offset: at,
        end: at + 8 + body_len,
    })
}

/// Decodes every frame of `data`. Damage in the `last` file of a log with no valid frame after
/// it is a torn tail; anything else is corruption. Never panics on any input.
pub fn scan(data: &[u8], last: bool) -> (Vec<Frame<'_>>, ScanEnd) {
    let mut frames = Vec::new();
    let mut at = 0;
    while at < data.len() {
        match decode_at(data, at) {
            Ok(f) => {
                at = f.end;
                frames.push(f);
            }
            Err(reason) => {
                let valid_after = (at + 1..data.len()).any(|p| plausible(data, p));
                let end = if last && !valid_after {
                    ScanEnd::Torn { offset: at, reason }
                } else {
                    ScanEnd::Corrupt { offset: at, reason }
                };
                return (frames, end);
            }
        }
    }
    (frames, ScanEnd::Clean)
}

/// True when a valid frame starts at `p` (cheap rejections first, so scanning a garbage or
/// zeroed tail rarely computes a checksum).
fn plausible(data: &[u8], p: usize) -> bool {
    let rest = &data[p..];
    if rest.len() < FRAME_HEADER
        || !matches!(rest[8], FORMAT_VERSION | FORMAT_VERSION_CRC32)
        || Kind::from_byte(rest[9]).is_none()
    {
        return false;
    }
    decode_at(data, p).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut v = Vec::new();
        encode_frame(Kind::Batch, 1, b"hello", &mut v);
        encode_frame(Kind::Batch, 2, b"", &mut v);
        encode_frame(Kind::Batch, 3, b"world!", &mut v);
        v
    }

    #[test]
    fn round_trip() {
        let v = sample();
        let (frames, end) = scan(&v, true);
        assert_eq!(end, ScanEnd::Clean);
        assert_eq!(frames.len(), 3);
        assert_eq!(frames[2].payload, b"world!");
        assert_eq!(frames[1].seq, 2);
    }

    #[test]
    fn every_truncation_is_a_torn_tail_in_the_last_file() {
        let v = sample();
        for cut in 0..v.len() {
            let (frames, end) = scan(&v[..cut], true);
            let whole = frames.len();
            match end {
                ScanEnd::Clean => assert!(cut == 0 || frames.last().unwrap().end == cut),
                ScanEnd::Torn { offset, .. } => {
                    assert_eq!(offset, frames.last().map_or(0, |f| f.end))
                }
                ScanEnd::Corrupt { .. } => panic!("cut at {cut} called corrupt ({whole} frames)"),
            }
        }
    }

    #[test]
    fn a_flipped_byte_in_the_middle_is_corruption_with_its_offset() {
        let mut v = sample();
        let second = scan(&v, true).0[1].offset;
        v[second + 9] ^= 0x40;
        let (frames, end) = scan(&v, true);
        assert_eq!(frames.len(), 1);
        assert!(matches!(end, ScanEnd::Corrupt { offset, .. } if offset == second));
        // In the last frame it is a torn tail; in a sealed file, corruption.
        let mut v = sample();
        let n = v.len();
        v[n - 1] ^= 1;
        assert!(matches!(scan(&v, true).1, ScanEnd::Torn { .. }));
        assert!(matches!(scan(&v, false).1, ScanEnd::Corrupt { .. }));
    }

    /// The version-1 encoding (CRC-32 IEEE), as files written before version 2 hold it.
    fn encode_frame_v1(kind: Kind, seq: u64, payload: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        encode_frame(kind, seq, payload, out);
        out[start + 8] = FORMAT_VERSION_CRC32;
        let crc = crc32fast::hash(&out[start + 8..]);
        out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn version_1_frames_are_still_read_and_mix_with_version_2() {
        let mut v = Vec::new();
        encode_frame_v1(Kind::Batch, 1, b"old", &mut v);
        encode_frame(Kind::Batch, 2, b"new", &mut v);
        let (frames, end) = scan(&v, true);
        assert_eq!(end, ScanEnd::Clean);
        assert_eq!(frames.len(), 2);
        assert_eq!(
            (frames[0].payload, frames[1].payload),
            (&b"old"[..], &b"new"[..])
        );
        assert_eq!(v[8], FORMAT_VERSION_CRC32);
        // A version-1 frame checked by the version-2 checksum (or the reverse) must fail.
        let mut w = v.clone();
        w[8] = FORMAT_VERSION;
        assert!(matches!(
            scan(&w, false).1,
            ScanEnd::Corrupt { offset: 0, .. }
        ));
        // An unknown version is named.
        let mut w = v.clone();
        let second = frames[1].offset;
        w[second + 8] = 9;
        let (_, end) = scan(&w, false);
        assert!(
            matches!(&end, ScanEnd::Corrupt { reason, .. } if reason.contains("version 9")),
            "{end:?}"
        );
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 12345;
        for len in 0..300 {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = scan(&data, true);
            let _ = scan(&data, false);
        }
    }
}

//! Redis Cluster's key-to-slot mapping: CRC16 (XMODEM: polynomial 0x1021, initial value 0,
//! no reflection) of the key, or of its hash tag, modulo 16384. Cluster-aware clients compute
//! the same function, which is what lets them send a key straight to one of its owners.

use crate::slots::SLOTS;

/// CRC16/XMODEM, bit by bit over a 256-entry table built at compile time.
const TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

fn crc16(data: &[u8]) -> u16 {
    data.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ b)]
    })
}

/// The part of `key` that is hashed: the bytes between the first `{` and the first `}` after
/// it, when that is not empty; otherwise the whole key (Redis Cluster's hash-tag rule).
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The hash slot of `key`, as `CLUSTER KEYSLOT` answers it.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_check_value() {
        // The catalogued check value of CRC-16/XMODEM.
        assert_eq!(crc16(b"123456789"), 0x31c3);
    }

    #[test]
    fn slots_match_redis_cluster() {
        // Values any Redis Cluster answers for CLUSTER KEYSLOT.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn hash_tags() {
        assert_eq!(
            key_slot(b"{user1000}.following"),
            key_slot(b"{user1000}.followers")
        );
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        // An empty tag hashes the whole key; only the first braces count.
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"{abc"), b"{abc");
    }
}

//! A hasher for connection ids.

use std::hash::Hasher;

/// Hashes connection ids, which are small sequential numbers chosen by the driver (no
/// adversary picks them): one multiplication, whose high bits the table uses, instead of
/// SipHash. Deterministic, so tables keyed by it iterate the same way in every run.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

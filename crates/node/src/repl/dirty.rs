//! The keys changed by the command being executed, held until the command finishes and they are
//! captured (see `Core::capture_dirty`).
//!
//! Flat storage, reused from command to command: marking a key costs no allocation once the
//! buffers have grown to the largest command seen, which matters because every write command
//! of a replicated node marks at least one key. Each key keeps its hash, computed once here and
//! reused by the captures that follow (store lookup, deferral table).

/// A set of keys in insertion order (a command rarely changes more than a handful, so a
/// duplicate check by linear scan is the cheap choice).
#[derive(Default)]
pub struct DirtyKeys {
    bytes: Vec<u8>,
    /// (key hash, end offset in `bytes`); a key starts where the previous one ended.
    keys: Vec<(u64, usize)>,
}

impl DirtyKeys {
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Adds `key` unless it is already listed.
    pub fn insert(&mut self, key: &[u8]) {
        let hash = lattice_store::key_hash(key);
        if (0..self.keys.len()).any(|i| self.get(i) == (hash, key)) {
            return;
        }
        self.bytes.extend_from_slice(key);
        self.keys.push((hash, self.bytes.len()));
    }

    /// The `i`th key listed, with its hash.
    pub fn get(&self, i: usize) -> (u64, &[u8]) {
        let start = if i == 0 { 0 } else { self.keys[i - 1].1 };
        let (hash, end) = self.keys[i];
        (hash, &self.bytes[start..end])
    }

    /// Empties the set, keeping the buffers' capacity.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.keys.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::DirtyKeys;

    #[test]
    fn keys_are_listed_once_in_order_with_their_hashes() {
        let mut d = DirtyKeys::default();
        assert!(d.is_empty());
        d.insert(b"b");
        d.insert(b"a");
        d.insert(b"b");
        d.insert(b"");
        assert_eq!(d.len(), 3);
        assert_eq!(d.get(0), (lattice_store::key_hash(b"b"), &b"b"[..]));
        assert_eq!(d.get(1), (lattice_store::key_hash(b"a"), &b"a"[..]));
        assert_eq!(d.get(2), (lattice_store::key_hash(b""), &b""[..]));
        d.clear();
        assert!(d.is_empty());
        d.insert(b"c");
        assert_eq!(d.get(0).1, b"c");
    }
}

//! The Hash value type (being written).

/// A Redis hash value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hash {}

impl Hash {
    pub fn new() -> Hash {
        Hash {}
    }

    pub fn len(&self) -> usize {
        0
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What OBJECT ENCODING reports.
    pub fn encoding(&self) -> &'static str {
        "listpack"
    }

    /// Approximate heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        0
    }
}

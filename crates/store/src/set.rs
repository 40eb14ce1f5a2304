//! The Set value type (being written).

/// A Redis set value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Set {}

impl Set {
    pub fn new() -> Set {
        Set {}
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

//! The node's notion of time: a number the driver passes in, never a clock read.

/// Microseconds since the Unix epoch on this node's clock. There is no `now()`: the driver
/// passes the time in with every input and keeps it from going backwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Micros(pub u64);

impl Micros {
    pub fn from_millis(ms: u64) -> Micros {
        Micros(ms.saturating_mul(1000))
    }

    pub fn as_millis(self) -> u64 {
        self.0 / 1000
    }
}

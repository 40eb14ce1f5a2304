//! The one test kit for the node, replication and Maelstrom tests.
//!
//! - [`Host`]: a node as a driver holds it (the bytes written to each connection, its
//!   persistence records and snapshot chunks), taking every input through the node's public
//!   entry points and checking the node's invariants after each one.
//! - [`Harness`]: one standalone [`Host`] on a clock the test moves.
//! - [`Cluster`]: N [`Member`]s (hosts, or anything else a test wraps, such as the Maelstrom
//!   adapter) on virtual time, with links the test controls: deliver, cut and heal (the
//!   members are told), silence (they are not), drop what is in flight, restart a node on
//!   its own records.
//!
//! Like the simulator, the kit reads no clock and uses no randomness: a test's run is the same
//! every time.

mod cluster;
mod harness;
mod host;

pub use cluster::{Cluster, Link, Member};
pub use harness::Harness;
pub use host::Host;

use bytes::Bytes;

/// The virtual time every test starts at (an ordinary recent wall-clock time, so that
/// millisecond stamps and TTLs look like real ones).
pub const START_MS: u64 = 1_700_000_000_000;

/// A command's words as the driver's parser hands them over.
pub fn args(words: &[&str]) -> Vec<Bytes> {
    words
        .iter()
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect()
}

/// The `field:value` line's value in an INFO reply, as a number (panics when it is missing:
/// a test asking for a field expects it).
pub fn info_field(info: &str, field: &str) -> u64 {
    let at = info
        .find(&format!("{field}:"))
        .unwrap_or_else(|| panic!("{field} in INFO"))
        + field.len()
        + 1;
    info[at..]
        .split('\r')
        .next()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} is a number"))
}

/// A RESP bulk string.
pub fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

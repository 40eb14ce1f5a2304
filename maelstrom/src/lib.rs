//! Lattice under Maelstrom's workloads.
//!
//! - [`proto`]: the JSON-lines message format and Maelstrom's error codes.
//! - [`adapter`]: Maelstrom requests mapped onto one `lattice_node::Node` (the `lattice-maelstrom`
//!   binary is this plus stdin/stdout).
//! - [`history`]: the operations a harness run recorded.
//! - [`check`]: the checkers (linearizability, counters, sets).
//! - [`harness`]: runs N copies of the binary behind a network it controls, drives clients and
//!   records the history (`lattice-maelstrom-harness`).

pub mod adapter;
pub mod check;
pub mod harness;
pub mod history;
pub mod proto;

//! The Lattice node: a pure state machine that executes Redis commands.
//!
//! Inputs go in with the time ([`Node::handle`], [`Node::handle_timeout`]); effects come out
//! ([`Node::poll_output`]); the node says when it next wants to be woken
//! ([`Node::poll_timeout`]). It never reads a clock, touches a socket or file, draws OS
//! randomness or spawns a thread, so the simulator, the server and the Maelstrom adapter all
//! drive exactly this code, and a seed replays any run.

pub mod acl;
pub mod args;
pub mod blocking;
pub mod buggify;
pub mod client;
pub mod cluster;
pub mod cmd;
pub mod command;
pub mod config;
pub mod ctx;
mod dispatch;
pub mod events;
pub mod eviction;
pub mod io;
pub mod node;
pub mod ops;
mod parking;
pub mod persist;
pub mod repl;
pub mod stats;
pub mod time;
pub mod tracking;
mod varint;

pub use buggify::Buggify;
pub use client::ConnId;
pub use config::{Config, MAX_INCARNATION, MAX_NODE_ID_WITH_INCARNATION};
pub use node::{Input, Micros, Node, NodeId, Output, ProcessStats};
pub use repl::hot::HotStats as HotCounts;

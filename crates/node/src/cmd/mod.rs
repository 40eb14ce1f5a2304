//! Command implementations, one module per Redis command group. Each module exports its table
//! as `COMMANDS`; [`FAMILIES`] is the list the node builds its lookup table from.

use crate::ctx::CommandSpec;

pub mod connection;
pub mod dump;
pub mod expire;
pub mod geo;
pub mod hash;
pub mod hll;
pub mod keys;
pub mod list;
pub mod pubsub;
pub mod script;
pub mod server;
pub mod set;
pub mod sort;
pub mod stream;
pub mod string;
pub mod tx;
pub(crate) mod typed;
pub mod zset;

pub const FAMILIES: &[&[CommandSpec]] = &[
    connection::COMMANDS,
    server::COMMANDS,
    keys::COMMANDS,
    expire::COMMANDS,
    dump::COMMANDS,
    string::COMMANDS,
    hll::COMMANDS,
    list::COMMANDS,
    hash::COMMANDS,
    sort::COMMANDS,
    set::COMMANDS,
    zset::COMMANDS,
    geo::COMMANDS,
    tx::COMMANDS,
    pubsub::COMMANDS,
    stream::COMMANDS,
    script::COMMANDS,
];

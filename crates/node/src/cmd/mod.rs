//! Command implementations, one module per Redis command group. Each module exports its table
//! as `COMMANDS`; [`FAMILIES`] is the list the node builds its lookup table from.

use crate::command::CommandSpec;

pub mod connection;
pub mod expire;
pub mod keys;
pub mod server;
pub mod string;

pub const FAMILIES: &[&[CommandSpec]] = &[
    connection::COMMANDS,
    server::COMMANDS,
    keys::COMMANDS,
    expire::COMMANDS,
    string::COMMANDS,
];

//! list commands (being written).

use crate::command::CommandSpec;

pub const COMMANDS: &[CommandSpec] = &[];

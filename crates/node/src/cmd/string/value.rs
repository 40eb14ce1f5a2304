//! What every string command shares: typed access to the string at a key and the one way a
//! change to it is reported (keyspace events, the modification hook).

use lattice_store::{Str, Value};

use crate::args::is;
use crate::cmd::typed::{self, Typed};
use crate::ctx::Core;
use crate::events::{EVENT_NEW, EVENT_STRING};

/// Reports a change a string command made to `key`, as Redis does: the `new` event when the
/// key was created, the modification hook (WATCH, blocked clients), then the command's event.
pub(crate) fn changed(core: &mut Core, key: &[u8], created: bool, event: &str) {
    if created {
        core.notify(EVENT_NEW, "new", key);
    }
    core.modified(key);
    core.notify(EVENT_STRING, event, key);
}

/// Stores a string under `key` with `deadline`, replacing any value, and reports it as `event`.
pub(crate) fn store(
    core: &mut Core,
    key: &[u8],
    s: Str,
    deadline: Option<u64>,
    now_ms: u64,
    event: &str,
) {
    let created = core
        .db
        .insert(key, Value::Str(s), deadline, now_ms)
        .is_none();
    changed(core, key, created, event);
}

pub(crate) use crate::cmd::typed::WrongType;

/// The string inside `value`, if it is one.
pub(crate) fn as_str_mut(value: &mut Value) -> Option<&mut Str> {
    Str::of_mut(value)
}

/// The string at `key` for reading (counts a keyspace hit or miss).
pub(crate) fn read_str<'c>(
    core: &'c mut Core,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'c mut Str>, WrongType> {
    typed::read::<Str>(core, key, now_ms)
}

/// The string at `key` for writing (no hit/miss counting).
pub(crate) fn write_str<'c>(
    core: &'c mut Core,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'c mut Str>, WrongType> {
    typed::write::<Str>(core, key, now_ms)
}

/// The argument as C code sees it: up to its first NUL byte (Redis compares option keywords
/// with C string functions).
pub(crate) fn cstr(arg: &[u8]) -> &[u8] {
    match arg.iter().position(|&b| b == 0) {
        Some(n) => &arg[..n],
        None => arg,
    }
}

/// True when the option keyword `arg` is `word`, compared as Redis does (case-insensitive,
/// stopping at a NUL byte).
pub(crate) fn opt_is(arg: &[u8], word: &str) -> bool {
    is(cstr(arg), word)
}

//! HyperLogLog commands: PFADD, PFCOUNT, PFMERGE, PFDEBUG, PFSELFTEST. An HLL is an ordinary
//! string holding Redis's format (see `format`), so GET, SET, DUMP/RESTORE and replication see
//! the same bytes Redis would produce, and a string that is not a valid HLL is refused with
//! Redis's WRONGTYPE message.

pub mod format;
#[cfg(test)]
mod tests;

use lattice_store::{Str, Value};

use crate::cmd::string::value::{changed, cstr, opt_is, read_str, write_str, WrongType};
use crate::command::{spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};
use format::{Corrupt, DENSE, HDR, REGISTERS, SPARSE};

const HLL: &str = "hyperloglog";

// One line per command reads best as a table.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    // Every command that writes an HLL replicates as a register-max merge (`Flag::RaisesRegisters`).
    spec("pfadd", -2, &["write", "denyoom", "fast"], (1, 1, 1), HLL, "2.8.9", "Adds the specified elements to the specified HyperLogLog.", pfadd).with(Flag::RaisesRegisters),
    // May replicate (it can rewrite the key's cached count); COMMAND INFO does not show it.
    spec("pfcount", -2, &["readonly"], (1, -1, 1), HLL, "2.8.9", "Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s).", pfcount).with(Flag::MayReplicate).with(Flag::RaisesRegisters),
    spec("pfmerge", -2, &["write", "denyoom"], (1, -1, 1), HLL, "2.8.9", "Merge N different HyperLogLogs into a single one.", pfmerge).with(Flag::RaisesRegisters),
    spec("pfdebug", 3, &["write", "denyoom", "admin"], (2, 2, 1), HLL, "2.8.9", "Internal commands for debugging HyperLogLog values", pfdebug).with(Flag::RaisesRegisters),
    spec("pfselftest", 1, &["admin"], (0, 0, 0), HLL, "2.8.9", "An internal command for testing HyperLogLog values", pfselftest),
];

const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";
const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";

/// What a key holds, for an HLL command.
enum Found {
    Missing,
    Hll,
    /// A string that is not an HLL, or another type (the reply is sent).
    Refused,
}

/// Checks the string at `key` (already looked up by the caller) as Redis's
/// `isHLLObjectOrReply` does, replying the error when it is not an HLL.
fn check(call: &mut Call, s: Result<Option<&mut Str>, WrongType>) -> Found {
    match s {
        Err(WrongType) => {
            call.wrong_type();
            Found::Refused
        }
        Ok(None) => Found::Missing,
        Ok(Some(Str::Raw(v))) if format::is_hll(v) => Found::Hll,
        Ok(Some(_)) => {
            call.error(NOT_HLL);
            Found::Refused
        }
    }
}

/// The raw bytes of the HLL at `key`, which the caller has checked.
fn hll_mut<'c>(core: &'c mut Core, key: &[u8], now_ms: u64) -> &'c mut Vec<u8> {
    match write_str(core, key, now_ms) {
        Ok(Some(s)) => s.make_raw(),
        _ => unreachable!("checked to be an HLL"),
    }
}

fn sparse_max(core: &Core) -> u64 {
    core.config.hll_sparse_max_bytes
}

/// PFADD key [element ...]: 1 when a register changed or the key was created, else 0.
pub fn pfadd(core: &mut Core, call: &mut Call) {
    let (key, now_ms) = (call.arg(1), call.now_ms);
    let found = check(call, write_str(core, key, now_ms));
    let mut updated = false;
    let created = match found {
        Found::Refused => return,
        Found::Hll => false,
        Found::Missing => {
            core.db
                .insert(key, Value::Str(Str::Raw(format::empty())), None, now_ms);
            updated = true;
            true
        }
    };
    let max_bytes = sparse_max(core);
    let v = hll_mut(core, key, now_ms);
    let mut corrupt = false;
    for e in &call.args[2..] {
        match format::add(v, e, max_bytes) {
            Ok(true) => updated = true,
            Ok(false) => {}
            Err(Corrupt) => {
                corrupt = true;
                break;
            }
        }
    }
    if corrupt {
        // Redis keeps what was added before the corruption was met, and reports nothing.
        return call.error(CORRUPT);
    }
    if updated {
        format::invalidate_cache(v);
        changed(core, key, created, "pfadd");
    }
    call.out.integer(updated as i64);
}

/// Raises `max` to the registers of every HLL named from argument 1 on (missing keys are
/// empty HLLs). Whether any of them was dense; `None` once an error is replied.
fn merge_keys(core: &mut Core, call: &mut Call, max: &mut [u8]) -> Option<bool> {
    let now_ms = call.now_ms;
    let mut any_dense = false;
    for i in 1..call.argc() {
        let key = call.arg(i);
        match check(call, read_str(core, key, now_ms)) {
            Found::Refused => return None,
            Found::Missing => continue,
            Found::Hll => {}
        }
        let v = hll_mut(core, key, now_ms);
        any_dense |= v[4] == DENSE;
        if format::merge_into(max, v).is_err() {
            call.error(CORRUPT);
            return None;
        }
    }
    Some(any_dense)
}

/// PFCOUNT key [key ...]. One key: its cached cardinality, recomputed and stored back when
/// stale (a write, though the command is flagged read-only as in Redis 7.0; the changed bytes
/// replicate like any other change to the string). Several keys: the
/// cardinality of their union, nothing stored.
pub fn pfcount(core: &mut Core, call: &mut Call) {
    let now_ms = call.now_ms;
    if call.argc() > 2 {
        let mut max = vec![0u8; REGISTERS];
        if merge_keys(core, call, &mut max).is_none() {
            return;
        }
        let card = format::estimate(&format::histogram_of_registers(&max));
        return call.out.integer(card as i64);
    }
    let key = call.arg(1);
    match check(call, write_str(core, key, now_ms)) {
        Found::Refused => return,
        Found::Missing => return call.out.integer(0),
        Found::Hll => {}
    }
    let v = hll_mut(core, key, now_ms);
    if let Some(card) = format::cached(v) {
        return call.out.integer(card as i64);
    }
    let Ok(h) = format::histogram(v) else {
        return call.error(CORRUPT);
    };
    let card = format::estimate(&h);
    format::set_cached(v, card);
    core.modified(key);
    call.out.integer(card as i64);
}

/// PFMERGE destkey [sourcekey ...]: the destination (itself a source) becomes the
/// register-wise maximum of all; dense if any source was.
pub fn pfmerge(core: &mut Core, call: &mut Call) {
    let now_ms = call.now_ms;
    let mut max = vec![0u8; REGISTERS];
    let Some(use_dense) = merge_keys(core, call, &mut max) else {
        return;
    };
    let key = call.arg(1);
    let created = !core.exists(key, now_ms);
    if created {
        core.db
            .insert(key, Value::Str(Str::Raw(format::empty())), None, now_ms);
    }
    let max_bytes = sparse_max(core);
    let v = hll_mut(core, key, now_ms);
    if use_dense && format::to_dense(v).is_err() {
        return call.error(CORRUPT);
    }
    for (j, &m) in max.iter().enumerate() {
        if m == 0 {
            continue;
        }
        if v[4] == DENSE {
            format::dense_raise(&mut v[HDR..], j, m);
        } else {
            // As in Redis, a corrupt sparse destination is left as it is.
            let _ = format::sparse_set(v, j, m, max_bytes);
        }
    }
    format::invalidate_cache(v);
    changed(core, key, created, "pfadd");
    call.ok();
}

/// PFDEBUG GETREG|DECODE|ENCODING|TODENSE key.
pub fn pfdebug(core: &mut Core, call: &mut Call) {
    let (sub, key, now_ms) = (call.arg(1), call.arg(2), call.now_ms);
    match check(call, write_str(core, key, now_ms)) {
        Found::Refused => return,
        Found::Missing => return call.error("ERR The specified key does not exist"),
        Found::Hll => {}
    }
    let v = hll_mut(core, key, now_ms);
    if opt_is(sub, "getreg") {
        let was_sparse = v[4] == SPARSE;
        if format::to_dense(v).is_err() {
            return call.error(CORRUPT);
        }
        call.out.array_len(REGISTERS);
        for i in 0..REGISTERS {
            call.out.integer(i64::from(format::dense_get(&v[HDR..], i)));
        }
        if was_sparse {
            core.modified(key);
        }
    } else if opt_is(sub, "decode") {
        if v[4] != SPARSE {
            return call.error("ERR HLL encoding is not sparse");
        }
        let text = format::decode_text(v);
        call.out.bulk(text.as_bytes());
    } else if opt_is(sub, "encoding") {
        call.out
            .simple(if v[4] == DENSE { b"dense" } else { b"sparse" });
    } else if opt_is(sub, "todense") {
        let conv = v[4] == SPARSE;
        if format::to_dense(v).is_err() {
            return call.error(CORRUPT);
        }
        if conv {
            core.modified(key);
        }
        call.out.integer(conv as i64);
    } else {
        let msg = format!(
            "ERR Unknown PFDEBUG subcommand '{}'",
            String::from_utf8_lossy(cstr(sub))
        );
        call.error(&msg);
    }
}

/// PFSELFTEST: checks the register packing and that sparse and dense HLLs fed the same
/// elements agree, with an estimate within bounds. Deterministic (its own generator).
pub fn pfselftest(_core: &mut Core, call: &mut Call) {
    match format::self_test() {
        Ok(()) => call.ok(),
        Err(what) => call.error(&format!("ERR TESTFAILED {what}")),
    }
}

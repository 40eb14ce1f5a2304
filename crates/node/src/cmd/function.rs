//! Redis 7.0's functions: FUNCTION LOAD/LIST/DELETE/FLUSH/DUMP/RESTORE/STATS/KILL/HELP and
//! FCALL/FCALL_RO.
//!
//! Libraries live on the node's one Lua interpreter next to EVAL's script cache
//! ([`library::Libraries`]). A function runs exactly as an EVAL script does (`cmd::script`):
//! as a coroutine in slices, BUSY past busy-reply-threshold, stopped by FUNCTION KILL (and
//! only by it) while it has not written, its commands run through the ordinary handlers so
//! that replication captures their effects; the code is never re-run on a replica.
//!
//! Every change of the library set ([`changed`]) is logged for persistence as the whole set
//! (`Core::persist_functions`) and sent to the peers as a whole (`Replicator::set_functions`);
//! see docs/ARCHITECTURE.md ("Functions") and docs/SEMANTICS.md.

pub mod library;

use bytes::Bytes;
use lattice_store::dump::crc64;

use crate::args::is;
use crate::command::{container, spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};
use library::{Entry, Library, Stamp, FLAG_NAMES, MAX_CODE_BYTES, NO_WRITES};

const SCRIPTING: &str = "scripting";

/// RDB's opcode for one library in a FUNCTION DUMP payload (Redis's `RDB_OPCODE_FUNCTION2`).
const RDB_OPCODE_FUNCTION2: u8 = 245;
/// The RDB version Redis 7.0 writes after the libraries (and accepts up to).
const RDB_VERSION: u16 = 10;

// One line per command reads best as a table. FCALL is may-replicate in Redis (CLIENT PAUSE
// WRITE holds a call of an unknown function), a flag COMMAND INFO does not show.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    spec("fcall", -3, &["noscript", "skip-monitor", "no-mandatory-keys", "stale", "movablekeys"], (0, 0, 0), SCRIPTING, "7.0.0", "Invoke a function", fcall).with(Flag::MayReplicate),
    spec("fcall_ro", -3, &["noscript", "skip-monitor", "no-mandatory-keys", "stale", "readonly", "movablekeys"], (0, 0, 0), SCRIPTING, "7.0.0", "Invoke a read-only function", fcall_ro),
    container(
        "function",
        -2,
        SCRIPTING,
        "7.0.0",
        "A container for function commands",
        &[
            spec("function|load", -3, &["write", "denyoom", "noscript"], (0, 0, 0), SCRIPTING, "7.0.0", "Create a function with the given arguments (name, code, description)", function_load),
            spec("function|delete", 3, &["write", "noscript"], (0, 0, 0), SCRIPTING, "7.0.0", "Delete a function by name", function_delete),
            spec("function|flush", -2, &["write", "noscript"], (0, 0, 0), SCRIPTING, "7.0.0", "Deleting all functions", function_flush),
            spec("function|restore", -3, &["write", "denyoom", "noscript"], (0, 0, 0), SCRIPTING, "7.0.0", "Restore all the functions on the given payload", function_restore),
            spec("function|dump", 2, &["noscript"], (0, 0, 0), SCRIPTING, "7.0.0", "Dump all functions into a serialized binary payload", function_dump),
            spec("function|list", -2, &["noscript"], (0, 0, 0), SCRIPTING, "7.0.0", "List information about all the functions", function_list),
            spec("function|stats", 2, &["noscript", "allow-busy"], (0, 0, 0), SCRIPTING, "7.0.0", "Return information about the function currently running (name, description, duration)", function_stats),
            spec("function|kill", 2, &["noscript", "allow-busy"], (0, 0, 0), SCRIPTING, "7.0.0", "Kill the function currently in execution.", function_kill),
            spec("function|help", 2, &["loading", "stale"], (0, 0, 0), SCRIPTING, "7.0.0", "Show helpful text about the different subcommands", function_help),
        ],
    ),
];

fn fcall(core: &mut Core, call: &mut Call) {
    fcall_generic(core, call, false);
}

fn fcall_ro(core: &mut Core, call: &mut Call) {
    fcall_generic(core, call, true);
}

fn fcall_generic(core: &mut Core, call: &mut Call, ro: bool) {
    let Some((_, f)) = core.scripts.libraries.function(call.arg(1)) else {
        return call.error("ERR Function not found");
    };
    let (name, flags, func) = (f.name.clone(), f.flags, f.func.clone());
    let Some(numkeys) = crate::args::parse_i64(call.arg(2)) else {
        return call.error("ERR Bad number of keys provided");
    };
    if numkeys > (call.argc() - 3) as i64 {
        return call.error("ERR Number of keys can't be greater than number of args");
    }
    if numkeys < 0 {
        return call.error("ERR Number of keys can't be negative");
    }
    let deny_oom = match crate::cmd::script::prepare(core, Some(flags), ro) {
        Ok(deny_oom) => deny_oom,
        Err(e) => return call.error(&e),
    };
    let split = 3 + numkeys as usize;
    let (keys, argv) = (&call.args[3..split], &call.args[split..]);
    let seed = core.random_u64();
    let read_only = flags & NO_WRITES != 0;
    match core.scripts.start_function(
        call.conn, call.now, &name, func, keys, argv, read_only, seed,
    ) {
        Ok(mut run) => {
            run.command = call.args.to_vec();
            run.deny_oom = deny_oom;
            crate::cmd::script::launch(core, call, run)
        }
        Err(e) => call.error_bytes(&e),
    }
}

/// A stamp for a local change of the library set: the replication clock's when the node
/// replicates, else the node's clock kept above every stamp already held.
fn next_stamp(core: &mut Core) -> Stamp {
    let now_ms = core.now.as_millis();
    if let Some(r) = core.repl.as_mut() {
        let h = r.hlc.now(now_ms);
        return Stamp {
            wall_ms: h.wall_ms,
            logical: h.logical,
            node: h.node.0,
        };
    }
    let last = core
        .scripts
        .libraries
        .entries
        .values()
        .map(|e| e.stamp)
        .max()
        .unwrap_or_default();
    if now_ms > last.wall_ms {
        Stamp {
            wall_ms: now_ms,
            logical: 0,
            node: 0,
        }
    } else {
        Stamp {
            wall_ms: last.wall_ms,
            logical: last.logical + 1,
            node: 0,
        }
    }
}

/// After the library set changed here: persistence logs it, peers receive it.
pub(crate) fn changed(core: &mut Core) {
    core.persist_functions();
    let blob = entries_blob(core);
    if let Some(r) = core.repl.as_mut() {
        r.set_functions(blob);
    }
}

/// The encoded replicated entries (persistence and peer messages).
pub(crate) fn entries_blob(core: &Core) -> Bytes {
    Bytes::from(library::encode_entries(
        core.scripts.libraries.entries.iter(),
    ))
}

/// Entries received from a peer: merged, and true if the set changed.
pub(crate) fn merge_remote(core: &mut Core, blob: &[u8]) -> bool {
    let Ok(entries) = library::decode_entries(blob) else {
        return false;
    };
    let s = &mut core.scripts;
    let changed = s.libraries.merge(&s.lua, &s.hook, entries);
    if changed {
        core.persist_functions();
    }
    changed
}

/// DEBUG RELOAD: the set emptied before the files are read back (a snapshot holds the set
/// only when it is not empty).
pub(crate) fn clear_for_reload(core: &mut Core) {
    let s = &mut core.scripts;
    s.libraries.reset_to(&s.lua, &s.hook, Vec::new());
}

/// Recovery: the set becomes exactly the recorded one.
pub(crate) fn load_recorded(core: &mut Core, blob: &[u8]) -> Result<(), String> {
    let entries = library::decode_entries(blob)?;
    let s = &mut core.scripts;
    s.libraries.reset_to(&s.lua, &s.hook, entries);
    Ok(())
}

fn compile(core: &Core, code: &[u8]) -> Result<Library, String> {
    let s = &core.scripts;
    s.libraries.compile(&s.lua, &s.hook, code)
}

/// FUNCTION LOAD [REPLACE] <code>
fn function_load(core: &mut Core, call: &mut Call) {
    let mut replace = false;
    let mut at = 2;
    while at < call.argc() - 1 {
        let a = call.arg(at);
        at += 1;
        if is(a, "replace") {
            replace = true;
            continue;
        }
        return call.error(&format!(
            "ERR Unknown option given: {}",
            String::from_utf8_lossy(a)
        ));
    }
    if at >= call.argc() {
        return call.error("ERR Function code is missing");
    }
    let code = call.arg(at);
    let name = match library::parse_metadata(code) {
        Ok(n) => n,
        Err(e) => return call.error(&e),
    };
    let key = name.clone();
    let existing = core.scripts.libraries.libs.contains_key(&key);
    if existing && !replace {
        return call.error(&format!("ERR Library '{name}' already exists"));
    }
    if !existing && core.scripts.libraries.len() >= library::MAX_LIBRARIES {
        return call.error("ERR too many function libraries: delete some first");
    }
    let others = core.scripts.libraries.code_bytes()
        - core
            .scripts
            .libraries
            .libs
            .get(&key)
            .map_or(0, |l| l.code.len());
    if others + code.len() > MAX_CODE_BYTES {
        return call.error("ERR function libraries are too large: delete some first");
    }
    let lib = match compile(core, code) {
        Ok(lib) => lib,
        Err(e) => return call.error(&e),
    };
    if let Some(f) = core.scripts.libraries.collision(&lib, &[key]) {
        return call.error(&format!("ERR Function {f} already exists"));
    }
    let stamp = next_stamp(core);
    core.scripts.libraries.insert(lib, stamp);
    changed(core);
    call.out.bulk(name.as_bytes());
}

fn function_delete(core: &mut Core, call: &mut Call) {
    let stamp = next_stamp(core);
    if !core.scripts.libraries.delete(call.arg(2), stamp) {
        return call.error("ERR Library not found");
    }
    changed(core);
    call.ok();
}

fn syntax_error(call: &mut Call) {
    let sub = String::from_utf8_lossy(call.arg(1)).into_owned();
    call.error(&format!(
        "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try FUNCTION HELP."
    ));
}

fn function_flush(core: &mut Core, call: &mut Call) {
    if call.argc() > 3 {
        return syntax_error(call);
    }
    if call.argc() == 3 && !is(call.arg(2), "sync") && !is(call.arg(2), "async") {
        return call.error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
    }
    let stamp = next_stamp(core);
    core.scripts.libraries.flush(stamp);
    core.scripts.lua.gc_collect().ok();
    changed(core);
    call.ok();
}

fn function_kill(core: &mut Core, call: &mut Call) {
    crate::cmd::script::kill(core, call, crate::cmd::script::engine::Kind::Function);
}

/// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]
fn function_list(core: &mut Core, call: &mut Call) {
    let mut with_code = false;
    let mut pattern: Option<&[u8]> = None;
    let mut i = 2;
    while i < call.argc() {
        let a = call.arg(i);
        if !with_code && is(a, "withcode") {
            with_code = true;
        } else if pattern.is_none() && is(a, "libraryname") {
            if i + 1 >= call.argc() {
                return call.error("ERR library name argument was not given");
            }
            i += 1;
            pattern = Some(call.arg(i));
        } else {
            // Redis's "safe" error: a line break cannot end the reply early.
            let text: String = String::from_utf8_lossy(a)
                .chars()
                .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
                .collect();
            return call.error(&format!("ERR Unknown argument {text}"));
        }
        i += 1;
    }
    let libs: Vec<&Library> = core
        .scripts
        .libraries
        .iter()
        .filter(|l| pattern.is_none_or(|p| lattice_store::glob_match(p, l.name.as_bytes(), true)))
        .collect();
    let out = &mut call.out;
    out.array_len(libs.len());
    for lib in libs {
        out.map_len(if with_code { 4 } else { 3 });
        out.bulk(b"library_name");
        out.bulk(lib.name.as_bytes());
        out.bulk(b"engine");
        out.bulk(b"LUA");
        out.bulk(b"functions");
        out.array_len(lib.functions.len());
        for f in &lib.functions {
            out.map_len(3);
            out.bulk(b"name");
            out.bulk(f.name.as_bytes());
            out.bulk(b"description");
            match &f.description {
                Some(d) => out.bulk(d),
                None => out.null(),
            }
            out.bulk(b"flags");
            let names: Vec<&str> = FLAG_NAMES
                .iter()
                .enumerate()
                .filter(|(bit, _)| f.flags & (1 << bit) != 0)
                .map(|(_, n)| *n)
                .collect();
            // Status strings, as Redis replies them.
            out.set_len(names.len());
            for n in names {
                out.simple(n.as_bytes());
            }
        }
        if with_code {
            out.bulk(b"library_code");
            out.bulk(&lib.code);
        }
    }
}

fn function_stats(core: &mut Core, call: &mut Call) {
    let now = call.now;
    let libs = &core.scripts.libraries;
    let out = &mut call.out;
    out.map_len(2);
    out.bulk(b"running_script");
    match core
        .scripts
        .running
        .as_ref()
        .filter(|r| r.kind == crate::cmd::script::engine::Kind::Function)
    {
        None => out.null(),
        Some(run) => {
            out.map_len(3);
            out.bulk(b"name");
            out.bulk(run.sha.as_bytes());
            out.bulk(b"command");
            out.array_len(run.command.len());
            for a in &run.command {
                out.bulk(a);
            }
            out.bulk(b"duration_ms");
            out.integer((now.0.saturating_sub(run.started.0) / 1000) as i64);
        }
    }
    out.bulk(b"engines");
    out.map_len(1);
    out.bulk(b"LUA");
    out.map_len(2);
    out.bulk(b"libraries_count");
    out.integer(libs.len() as i64);
    out.bulk(b"functions_count");
    out.integer(libs.function_count() as i64);
}

/// FUNCTION DUMP: Redis's payload, so it restores on Redis too: each library as the RDB
/// function opcode and its code as an RDB string, then the RDB version (2 bytes, little
/// endian) and the CRC-64 of everything before (8 bytes, little endian).
fn function_dump(core: &mut Core, call: &mut Call) {
    let mut out = Vec::new();
    for lib in core.scripts.libraries.iter() {
        out.push(RDB_OPCODE_FUNCTION2);
        put_rdb_len(&mut out, lib.code.len() as u64);
        out.extend_from_slice(&lib.code);
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    call.out.bulk(&out);
}

fn put_rdb_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.push(0x40 | (n >> 8) as u8);
        out.push(n as u8);
    } else if n <= u32::MAX as u64 {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// The library codes of a FUNCTION DUMP payload (Redis's or ours).
pub fn parse_dump(payload: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    const WRONG: &str = "ERR DUMP payload version or checksum are wrong";
    if payload.len() < 10 {
        return Err(WRONG.into());
    }
    let crc_at = payload.len() - 8;
    let version = u16::from_le_bytes([payload[crc_at - 2], payload[crc_at - 1]]);
    let stored = u64::from_le_bytes(payload[crc_at..].try_into().expect("8 bytes"));
    if version > RDB_VERSION || crc64(&payload[..crc_at]) != stored {
        return Err(WRONG.into());
    }
    let body = &payload[..crc_at - 2];
    let mut at = 0;
    let mut codes = Vec::new();
    while at < body.len() {
        let op = body[at];
        at += 1;
        if op != RDB_OPCODE_FUNCTION2 {
            return Err("ERR given type is not a function".into());
        }
        let code = read_rdb_string(body, &mut at)
            .ok_or("ERR failed loading the given functions payload")?;
        codes.push(code);
    }
    Ok(codes)
}

/// An RDB string: plain, integer-encoded or LZF-compressed.
fn read_rdb_string(data: &[u8], at: &mut usize) -> Option<Vec<u8>> {
    let first = *data.get(*at)?;
    *at += 1;
    let take = |at: &mut usize, n: usize| -> Option<&[u8]> {
        let s = data.get(*at..at.checked_add(n)?)?;
        *at += n;
        Some(s)
    };
    let len = match first >> 6 {
        0 => (first & 0x3f) as u64,
        1 => (((first & 0x3f) as u64) << 8) | *take(at, 1)?.first()? as u64,
        2 if first == 0x80 => u32::from_be_bytes(take(at, 4)?.try_into().ok()?) as u64,
        2 if first == 0x81 => u64::from_be_bytes(take(at, 8)?.try_into().ok()?),
        2 => return None,
        _ => {
            return match first & 0x3f {
                0 => Some((take(at, 1)?[0] as i8).to_string().into_bytes()),
                1 => Some(
                    i16::from_le_bytes(take(at, 2)?.try_into().ok()?)
                        .to_string()
                        .into_bytes(),
                ),
                2 => Some(
                    i32::from_le_bytes(take(at, 4)?.try_into().ok()?)
                        .to_string()
                        .into_bytes(),
                ),
                3 => {
                    let clen = read_rdb_len(data, at)? as usize;
                    let ulen = read_rdb_len(data, at)? as usize;
                    lzf_decompress(take(at, clen)?, ulen)
                }
                _ => None,
            };
        }
    };
    take(at, usize::try_from(len).ok()?).map(|s| s.to_vec())
}

fn read_rdb_len(data: &[u8], at: &mut usize) -> Option<u64> {
    let first = *data.get(*at)?;
    *at += 1;
    Some(match first >> 6 {
        0 => (first & 0x3f) as u64,
        1 => {
            let b = *data.get(*at)?;
            *at += 1;
            (((first & 0x3f) as u64) << 8) | b as u64
        }
        _ if first == 0x80 => {
            let v = u32::from_be_bytes(data.get(*at..*at + 4)?.try_into().ok()?);
            *at += 4;
            v as u64
        }
        _ if first == 0x81 => {
            let v = u64::from_be_bytes(data.get(*at..*at + 8)?.try_into().ok()?);
            *at += 8;
            v
        }
        _ => return None,
    })
}

/// LZF decompression (the format RDB strings are compressed with); None if malformed or not
/// exactly `len` bytes. Bounded: never produces more than `len` bytes.
fn lzf_decompress(input: &[u8], len: usize) -> Option<Vec<u8>> {
    if len > MAX_CODE_BYTES {
        return None;
    }
    let mut out: Vec<u8> = Vec::with_capacity(len);
    let mut i = 0;
    while i < input.len() {
        let ctrl = input[i] as usize;
        i += 1;
        if ctrl < 32 {
            let n = ctrl + 1;
            out.extend_from_slice(input.get(i..i + n)?);
            i += n;
        } else {
            let mut n = ctrl >> 5;
            if n == 7 {
                n += *input.get(i)? as usize;
                i += 1;
            }
            let back = ((ctrl & 0x1f) << 8) + *input.get(i)? as usize + 1;
            i += 1;
            let from = out.len().checked_sub(back)?;
            for k in 0..n + 2 {
                let b = out[from + k];
                out.push(b);
            }
        }
        if out.len() > len {
            return None;
        }
    }
    (out.len() == len).then_some(out)
}

/// FUNCTION RESTORE <payload> [FLUSH|APPEND|REPLACE]
fn function_restore(core: &mut Core, call: &mut Call) {
    if call.argc() > 4 {
        return syntax_error(call);
    }
    #[derive(PartialEq)]
    enum Policy {
        Flush,
        Append,
        Replace,
    }
    let policy =
        match call.args.get(3) {
            None => Policy::Append,
            Some(a) if is(a, "flush") => Policy::Flush,
            Some(a) if is(a, "append") => Policy::Append,
            Some(a) if is(a, "replace") => Policy::Replace,
            Some(_) => return call.error(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            ),
        };
    let codes = match parse_dump(call.arg(2)) {
        Ok(c) => c,
        Err(e) => return call.error(&e),
    };
    // Every library compiles, and the payload itself has no duplicates, before anything
    // changes.
    let mut incoming: Vec<Library> = Vec::new();
    let mut bytes = 0;
    for code in &codes {
        let lib = match compile(core, code) {
            Ok(l) => l,
            Err(e) => return call.error(&e),
        };
        if incoming.iter().any(|l| l.name == lib.name) {
            return call.error(&format!("ERR Library '{}' already exists", lib.name));
        }
        for f in &lib.functions {
            let clash = incoming.iter().flat_map(|l| l.functions.iter());
            if clash.clone().any(|g| g.name.eq_ignore_ascii_case(&f.name)) {
                return call.error(&format!("ERR Function {} already exists", f.name));
            }
        }
        bytes += lib.code.len();
        incoming.push(lib);
    }
    let libs = &core.scripts.libraries;
    let mut removed: Vec<String> = Vec::new();
    match policy {
        Policy::Flush => removed = libs.libs.keys().cloned().collect(),
        Policy::Append | Policy::Replace => {
            for lib in &incoming {
                let key = lib.name.clone();
                if libs.libs.contains_key(&key) {
                    if policy == Policy::Append {
                        return call.error(&format!("ERR Library {} already exists", lib.name));
                    }
                    removed.push(key);
                }
            }
        }
    }
    for lib in &incoming {
        if let Some(f) = libs.collision(lib, &removed) {
            return call.error(&format!("ERR Function {f} already exists"));
        }
    }
    let kept: usize = libs
        .libs
        .iter()
        .filter(|(k, _)| !removed.contains(k))
        .map(|(_, l)| l.code.len())
        .sum();
    if kept + bytes > MAX_CODE_BYTES {
        return call.error("ERR function libraries are too large: delete some first");
    }
    if libs.len() - removed.len() + incoming.len() > library::MAX_LIBRARIES {
        return call.error("ERR too many function libraries: delete some first");
    }
    let stamp = next_stamp(core);
    let libs = &mut core.scripts.libraries;
    for key in &removed {
        libs.delete(key.as_bytes(), stamp);
    }
    for lib in incoming {
        libs.insert(lib, stamp);
    }
    changed(core);
    call.ok();
}

fn function_help(_core: &mut Core, call: &mut Call) {
    let lines: &[&str] = &[
        "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "LOAD [REPLACE] <FUNCTION CODE>",
        "    Load a library; REPLACE overwrites a library of the same name.",
        "DELETE <LIBRARY NAME>",
        "    Delete a library and its functions.",
        "KILL",
        "    Stop the running function if it has not written yet.",
        "FLUSH [ASYNC|SYNC]",
        "    Delete every library.",
        "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
        "    Show the libraries (matching PATTERN) and their functions, with their code if asked.",
        "STATS",
        "    Show the running function, and the number of libraries and functions.",
        "DUMP",
        "    Serialize every library into one payload for FUNCTION RESTORE.",
        "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
        "    Load the libraries of a payload: after deleting every library (FLUSH), refusing",
        "    names in use (APPEND, the default), or replacing libraries of the same name (REPLACE).",
        "HELP",
        "    Print this help.",
    ];
    call.out.array_len(lines.len());
    for l in lines {
        call.out.simple(l.as_bytes());
    }
}

/// The replicated entries, for tests.
pub fn entries(core: &Core) -> Vec<(String, Entry)> {
    core.scripts
        .libraries
        .entries
        .iter()
        .map(|(k, e)| (k.clone(), e.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdb_strings() {
        let mut out = Vec::new();
        for n in [0u64, 63, 64, 16383, 16384] {
            out.clear();
            put_rdb_len(&mut out, n);
            let mut at = 0;
            assert_eq!(read_rdb_len(&out, &mut at), Some(n));
            assert_eq!(at, out.len());
        }
        // Integer encodings.
        let mut at = 0;
        assert_eq!(read_rdb_string(&[0xc0, 0xfe], &mut at).unwrap(), b"-2");
        // LZF: a literal run of 3, then a back reference of length 3 at distance 3.
        let lzf = [2, b'a', b'b', b'c', 0x20, 2];
        assert_eq!(lzf_decompress(&lzf, 6).unwrap(), b"abcabc");
        assert!(lzf_decompress(&lzf, 5).is_none());
        assert!(lzf_decompress(&[0x20, 9], 3).is_none());
    }

    #[test]
    fn dump_payload_checks() {
        assert!(parse_dump(b"bad_payload").is_err());
        let mut body = vec![RDB_OPCODE_FUNCTION2, 3, b'a', b'b', b'c'];
        body.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = crc64(&body);
        let mut p = body.clone();
        p.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(parse_dump(&p).unwrap(), vec![b"abc".to_vec()]);
        let mut bad = p.clone();
        bad[2] ^= 1;
        assert!(parse_dump(&bad).is_err());
        let mut body = vec![1, 3, b'a', b'b', b'c'];
        body.extend_from_slice(&RDB_VERSION.to_le_bytes());
        let crc = crc64(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(
            parse_dump(&body).unwrap_err(),
            "ERR given type is not a function"
        );
    }
}

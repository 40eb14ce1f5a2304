//! Stream commands: XADD, XRANGE and friends, consumer groups (XGROUP, XREADGROUP, XACK,
//! XPENDING, XCLAIM, XAUTOCLAIM), XINFO and XSETID.
//!
//! Replies, error texts and the order of checks follow Redis 7.0. The value itself is
//! `lattice_store::Stream`. Times (delivery, idle, seen) are the node's clock in ms.
//!
//! Blocking (`BLOCK ms`) uses the node's generic re-run mechanism: the request runs again when
//! a stream key changes. For XREADGROUP `>` and XREAD with explicit IDs that is exact. XREAD
//! with `$` parks a copy of the request with `$` replaced by the stream's last ID at the time
//! of the call, so that the re-run serves what arrived since (inside MULTI it never blocks).
//! Streams are not replicated yet (`repl::state` treats a stream key as absent).

use bytes::Bytes;
use lattice_resp::{Protocol, ReplyWriter};
use lattice_store::stream::{AddError, Fields, NewId, NodeLimits, ReadEntry};
use lattice_store::{Stream, StreamId, Value};

use crate::args::{is, parse_i64, NOT_INTEGER, NO_SUCH_KEY, SYNTAX};
use crate::blocking::{BlockRequest, TimeoutReply};
use crate::cmd::pubsub::{EVENT_NEW, EVENT_STREAM};
use crate::command::{container, spec, Call};
use crate::ctx::{CommandSpec, Core};

const STREAM: &str = "stream";
const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

const WDF: &[&str] = &["write", "denyoom", "fast"];
const W: &[&str] = &["write"];
const WF: &[&str] = &["write", "fast"];
const R: &[&str] = &["readonly"];
const RF: &[&str] = &["readonly", "fast"];

// One line per command reads best as a table.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    spec("xadd", -5, WDF, (1, 1, 1), STREAM, "5.0.0", "Appends a new entry to a stream", xadd),
    spec("xlen", 2, RF, (1, 1, 1), STREAM, "5.0.0", "Return the number of entries in a stream", xlen),
    spec("xrange", -4, R, (1, 1, 1), STREAM, "5.0.0", "Return a range of elements in a stream, with IDs matching the specified IDs interval", xrange),
    spec("xrevrange", -4, R, (1, 1, 1), STREAM, "5.0.0", "Return a range of elements in a stream, with IDs matching the specified IDs interval, in reverse order (from greater to smaller IDs) compared to XRANGE", xrevrange),
    spec("xdel", -3, WF, (1, 1, 1), STREAM, "5.0.0", "Removes the specified entries from the stream. Returns the number of items actually deleted, that may be different from the number of IDs passed in case certain IDs do not exist.", xdel),
    spec("xtrim", -4, W, (1, 1, 1), STREAM, "5.0.0", "Trims the stream to (approximately if '~' is passed) a certain size", xtrim),
    spec("xread", -4, &["readonly", "blocking", "movablekeys"], (0, 0, 0), STREAM, "5.0.0", "Return never seen elements in multiple streams, with IDs greater than the ones reported by the caller for each stream. Can block.", xread),
    spec("xreadgroup", -7, &["write", "blocking", "movablekeys"], (0, 0, 0), STREAM, "5.0.0", "Return new entries from a stream using a consumer group, or access the history of the pending entries for a given consumer. Can block.", xreadgroup),
    spec("xack", -4, WF, (1, 1, 1), STREAM, "5.0.0", "Marks a pending message as correctly processed, effectively removing it from the pending entries list of the consumer group. Return value of the command is the number of messages successfully acknowledged, that is, the IDs we were actually able to resolve in the PEL.", xack),
    spec("xpending", -3, R, (1, 1, 1), STREAM, "5.0.0", "Return information and entries from a stream consumer group pending entries list, that are messages fetched but never acknowledged.", xpending),
    spec("xclaim", -6, WF, (1, 1, 1), STREAM, "5.0.0", "Changes (or acquires) ownership of a message in a consumer group, as if the message was delivered to the specified consumer.", xclaim),
    spec("xautoclaim", -6, WF, (1, 1, 1), STREAM, "6.2.0", "Changes (or acquires) ownership of messages in a consumer group, as if the messages were delivered to the specified consumer.", xautoclaim),
    spec("xsetid", -3, WDF, (1, 1, 1), STREAM, "5.0.0", "An internal command for replicating stream values", xsetid),
    container(
        "xgroup",
        -2,
        STREAM,
        "5.0.0",
        "A container for consumer groups commands",
        &[
            spec("xgroup|create", -5, &["write", "denyoom"], (2, 2, 1), STREAM, "5.0.0", "Create a consumer group.", xgroup_create),
            spec("xgroup|setid", -5, W, (2, 2, 1), STREAM, "5.0.0", "Set a consumer group to an arbitrary last delivered ID value.", xgroup_setid),
            spec("xgroup|destroy", 4, W, (2, 2, 1), STREAM, "5.0.0", "Destroy a consumer group.", xgroup_destroy),
            spec("xgroup|createconsumer", 5, &["write", "denyoom"], (2, 2, 1), STREAM, "6.2.0", "Create a consumer in a consumer group.", xgroup_createconsumer),
            spec("xgroup|delconsumer", 5, W, (2, 2, 1), STREAM, "5.0.0", "Delete a consumer from a consumer group.", xgroup_delconsumer),
            spec("xgroup|help", 2, &["loading", "stale"], (0, 0, 0), STREAM, "5.0.0", "Show helpful text about the different subcommands", xgroup_help),
        ],
    ),
    container(
        "xinfo",
        -2,
        STREAM,
        "5.0.0",
        "A container for stream introspection commands",
        &[
            spec("xinfo|stream", -3, R, (2, 2, 1), STREAM, "5.0.0", "Get information about a stream", xinfo_stream),
            spec("xinfo|groups", 3, R, (2, 2, 1), STREAM, "5.0.0", "List the consumer groups of a stream", xinfo_groups),
            spec("xinfo|consumers", 4, R, (2, 2, 1), STREAM, "5.0.0", "List the consumers in a consumer group", xinfo_consumers),
            spec("xinfo|help", 2, &["loading", "stale"], (0, 0, 0), STREAM, "5.0.0", "Show helpful text about the different subcommands", xinfo_help),
        ],
    ),
];

/// The key holds another type.
struct WrongType;

/// Node sizes from `stream-node-max-entries` / `stream-node-max-bytes` (Redis's defaults
/// when unset or unreadable).
fn node_limits(core: &Core) -> NodeLimits {
    let get = |name: &str, default: usize| {
        core.config
            .get(name)
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(default, |v| v.min(usize::MAX as u64) as usize)
    };
    NodeLimits {
        max_entries: get(
            "stream-node-max-entries",
            lattice_store::stream::NODE_MAX_ENTRIES,
        ),
        max_bytes: get(
            "stream-node-max-bytes",
            lattice_store::stream::NODE_MAX_BYTES,
        ),
    }
}

/// The stream at `key` (lazy expiry; `read` counts a keyspace hit or miss).
fn lookup<'c>(
    core: &'c mut Core,
    key: &[u8],
    now_ms: u64,
    read: bool,
) -> Result<Option<&'c mut Stream>, WrongType> {
    let e = if read {
        core.lookup_read(key, now_ms)
    } else {
        core.lookup_write(key, now_ms)
    };
    match e {
        None => Ok(None),
        Some(e) => match &mut e.value {
            Value::Stream(s) => Ok(Some(s)),
            _ => Err(WrongType),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// ID parsing and replies

/// A strict ID (`ms-seq` or `ms`, no `-`/`+`), as Redis's `streamParseStrictIDOrReply`.
fn strict_id(arg: &[u8], missing_seq: u64) -> Result<StreamId, &'static str> {
    StreamId::parse(arg, missing_seq).ok_or(INVALID_ID)
}

/// An ID that may also be `-` or `+`.
fn loose_id(arg: &[u8], missing_seq: u64) -> Result<StreamId, &'static str> {
    match arg {
        b"-" => Ok(StreamId::MIN),
        b"+" => Ok(StreamId::MAX),
        _ => strict_id(arg, missing_seq),
    }
}

/// A range bound: `-`, `+`, an ID, or `(ID` for an exclusive bound (not `(-`/`(+`), turned
/// inclusive.
fn interval_start(arg: &[u8]) -> Result<StreamId, &'static str> {
    match arg.strip_prefix(b"(") {
        Some(rest) => strict_id(rest, 0)?
            .next()
            .ok_or("ERR invalid start ID for the interval"),
        None => loose_id(arg, 0),
    }
}

fn interval_end(arg: &[u8]) -> Result<StreamId, &'static str> {
    match arg.strip_prefix(b"(") {
        Some(rest) => strict_id(rest, u64::MAX)?
            .prev()
            .ok_or("ERR invalid end ID for the interval"),
        None => loose_id(arg, u64::MAX),
    }
}

fn write_id(out: &mut ReplyWriter, id: StreamId) {
    out.bulk(id.to_string().as_bytes());
}

fn write_fields(out: &mut ReplyWriter, fields: &Fields) {
    out.array_len(fields.len() * 2);
    for (f, v) in fields {
        out.bulk(f);
        out.bulk(v);
    }
}

fn write_entry(out: &mut ReplyWriter, id: StreamId, fields: Option<&Fields>) {
    out.array_len(2);
    write_id(out, id);
    match fields {
        Some(f) => write_fields(out, f),
        None => out.null_array(),
    }
}

fn write_entries(out: &mut ReplyWriter, entries: &[ReadEntry]) {
    out.array_len(entries.len());
    for (id, f) in entries {
        write_entry(out, *id, f.as_ref());
    }
}

fn no_group(call: &mut Call, key: &[u8], group: &[u8]) {
    let mut m = b"NOGROUP No such key '".to_vec();
    m.extend_from_slice(key);
    m.extend_from_slice(b"' or consumer group '");
    m.extend_from_slice(group);
    m.push(b'\'');
    call.error_bytes(&m);
}

fn no_such_group(call: &mut Call, key: &[u8], group: &[u8]) {
    let mut m = b"NOGROUP No such consumer group '".to_vec();
    m.extend_from_slice(group);
    m.extend_from_slice(b"' for key name '");
    m.extend_from_slice(key);
    m.push(b'\'');
    call.error_bytes(&m);
}

// ---------------------------------------------------------------------------------------------
// XADD / XTRIM

/// Trimming options shared by XADD and XTRIM.
#[derive(Default)]
struct Trim {
    max_len: Option<usize>,
    min_id: Option<StreamId>,
    approx: bool,
    /// Entries removed at most (0: no limit).
    limit: usize,
}

impl Trim {
    fn any(&self) -> bool {
        self.max_len.is_some() || self.min_id.is_some()
    }
}

/// What XADD's arguments say.
struct AddArgs {
    trim: Trim,
    nomkstream: bool,
    id: NewId,
    /// Index of the first field.
    fields_at: usize,
}

/// Parses trimming options (and, for XADD, NOMKSTREAM and the ID) from argument 2 on, with
/// 7.0's `streamParseAddOrTrimArgsOrReply` rules and errors.
fn parse_add_or_trim(
    args: &[Bytes],
    xadd: bool,
    limits: NodeLimits,
) -> Result<AddArgs, &'static str> {
    let mut trim = Trim::default();
    let mut limit: Option<i64> = None;
    let mut nomkstream = false;
    let mut id = None;
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = &args[i][..];
        if xadd && opt == b"*" {
            id = Some(NewId::Auto);
            break;
        } else if (is(opt, "maxlen") || is(opt, "minid")) && more > 0 {
            if trim.any() {
                return Err("ERR syntax error, MAXLEN and MINID options at the same time are not compatible");
            }
            let next = &args[i + 1][..];
            if more >= 2 && next == b"~" {
                trim.approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            let value = &args[i + 1][..];
            if is(opt, "maxlen") {
                let n = parse_i64(value).ok_or(NOT_INTEGER)?;
                if n < 0 {
                    return Err("ERR The MAXLEN argument must be >= 0.");
                }
                trim.max_len = Some(n as usize);
            } else {
                trim.min_id = Some(strict_id(value, 0)?);
            }
            i += 1;
        } else if is(opt, "limit") && more > 0 {
            let n = parse_i64(&args[i + 1]).ok_or(NOT_INTEGER)?;
            if n < 0 {
                return Err("ERR The LIMIT argument must be >= 0.");
            }
            limit = Some(n);
            i += 1;
        } else if xadd && is(opt, "nomkstream") {
            nomkstream = true;
        } else if xadd {
            id = Some(match opt.strip_suffix(b"-*") {
                Some(ms) => NewId::Ms(lattice_store::stream::parse_u64(ms).ok_or(INVALID_ID)?),
                None => NewId::Exact(strict_id(opt, 0)?),
            });
            break;
        } else {
            return Err(SYNTAX);
        }
        i += 1;
    }
    if limit.is_some() && !trim.any() {
        return Err(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        );
    }
    if !xadd && !trim.any() {
        return Err("ERR syntax error, XTRIM must be called with a trimming strategy");
    }
    match limit {
        Some(_) if !trim.approx => {
            return Err("ERR syntax error, LIMIT cannot be used without the special ~ option")
        }
        Some(n) => trim.limit = n as usize,
        // Redis's default for `~`: 100 nodes' worth of entries, 10,000 if that is out of range.
        None if trim.approx => {
            trim.limit = match 100usize.saturating_mul(limits.max_entries) {
                n if n == 0 || n > 1_000_000 => 10_000,
                n => n,
            }
        }
        None => trim.limit = 0,
    }
    Ok(AddArgs {
        trim,
        nomkstream,
        id: id.unwrap_or(NewId::Auto),
        fields_at: i + 1,
    })
}

fn xadd(core: &mut Core, call: &mut Call) {
    let limits = node_limits(core);
    let a = match parse_add_or_trim(call.args, true, limits) {
        Ok(a) => a,
        Err(e) => return call.error(e),
    };
    if a.id == NewId::Exact(StreamId::MIN) {
        return call.error("ERR The ID specified in XADD must be greater than 0-0");
    }
    let nfields = call.argc().saturating_sub(a.fields_at);
    if nfields < 2 || nfields % 2 == 1 {
        return call.error("ERR wrong number of arguments for 'xadd' command");
    }
    let key = call.arg(1);
    let now_ms = call.now_ms;
    let created = match lookup(core, key, now_ms, false) {
        Err(WrongType) => return call.wrong_type(),
        Ok(Some(_)) => false,
        Ok(None) if a.nomkstream => return call.out.null(),
        Ok(None) => true,
    };
    let mut fresh = Stream::new();
    let s: &mut Stream = if created {
        &mut fresh
    } else {
        match lookup(core, key, now_ms, false) {
            Ok(Some(s)) => s,
            _ => unreachable!("looked up above"),
        }
    };
    if s.last_id == StreamId::MAX {
        return call
            .error("ERR The stream has exhausted the last possible ID, unable to add more items");
    }
    let id =
        match s.next_id(a.id, now_ms) {
            Ok(id) => id,
            Err(AddError::Zero) => {
                return call.error("ERR The ID specified in XADD must be greater than 0-0")
            }
            Err(_) => return call.error(
                "ERR The ID specified in XADD is equal or smaller than the target stream top item",
            ),
        };
    let fields: Fields = call.args[a.fields_at..]
        .chunks_exact(2)
        .map(|p| (p[0].to_vec(), p[1].to_vec()))
        .collect();
    s.add_with(id, fields, limits)
        .expect("next_id chose a valid id");
    let trimmed = if a.trim.any() {
        s.trim(a.trim.max_len, a.trim.min_id, a.trim.approx, a.trim.limit)
    } else {
        0
    };
    if created {
        core.db
            .insert(key, Value::Stream(Box::new(fresh)), None, now_ms);
    }
    write_id(&mut call.out, id);
    if created {
        core.notify(EVENT_NEW, "new", key);
    }
    core.modified(key);
    core.notify(EVENT_STREAM, "xadd", key);
    if trimmed > 0 {
        core.notify(EVENT_STREAM, "xtrim", key);
    }
}

fn xtrim(core: &mut Core, call: &mut Call) {
    let a = match parse_add_or_trim(call.args, false, node_limits(core)) {
        Ok(a) => a,
        Err(e) => return call.error(e),
    };
    let key = call.arg(1);
    let n = match lookup(core, key, call.now_ms, false) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => 0,
        Ok(Some(s)) => s.trim(a.trim.max_len, a.trim.min_id, a.trim.approx, a.trim.limit),
    };
    if n > 0 {
        core.modified(key);
        core.notify(EVENT_STREAM, "xtrim", key);
    }
    call.out.integer(n as i64);
}

// ---------------------------------------------------------------------------------------------
// Reads

fn xlen(core: &mut Core, call: &mut Call) {
    match lookup(core, call.arg(1), call.now_ms, true) {
        Err(WrongType) => call.wrong_type(),
        Ok(s) => call.out.integer(s.map_or(0, |s| s.len() as i64)),
    }
}

fn range_generic(core: &mut Core, call: &mut Call, rev: bool) {
    let (start_arg, end_arg) = if rev {
        (call.arg(3), call.arg(2))
    } else {
        (call.arg(2), call.arg(3))
    };
    let start = match interval_start(start_arg) {
        Ok(id) => id,
        Err(e) => return call.error(e),
    };
    let end = match interval_end(end_arg) {
        Ok(id) => id,
        Err(e) => return call.error(e),
    };
    let mut count: Option<usize> = None;
    let mut j = 4;
    while j < call.argc() {
        if is(call.arg(j), "count") && j + 1 < call.argc() {
            match parse_i64(call.arg(j + 1)) {
                Some(n) => count = Some(n.max(0) as usize),
                None => return call.error(NOT_INTEGER),
            }
            j += 2;
        } else {
            return call.syntax_error();
        }
    }
    let s = match lookup(core, call.arg(1), call.now_ms, true) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.array_len(0),
        Ok(Some(s)) => s,
    };
    if count == Some(0) {
        return call.out.null_array();
    }
    let entries = s.range(start, end, count, rev);
    call.out.array_len(entries.len());
    for (id, f) in entries {
        write_entry(&mut call.out, id, Some(f));
    }
}

fn xrange(core: &mut Core, call: &mut Call) {
    range_generic(core, call, false);
}

fn xrevrange(core: &mut Core, call: &mut Call) {
    range_generic(core, call, true);
}

fn xdel(core: &mut Core, call: &mut Call) {
    let mut ids = Vec::with_capacity(call.argc() - 2);
    for arg in &call.args[2..] {
        match strict_id(arg, 0) {
            Ok(id) => ids.push(id),
            Err(e) => return call.error(e),
        }
    }
    let key = call.arg(1);
    let n = match lookup(core, key, call.now_ms, false) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => 0,
        Ok(Some(s)) => ids.into_iter().filter(|id| s.delete(*id)).count(),
    };
    if n > 0 {
        core.modified(key);
        core.notify(EVENT_STREAM, "xdel", key);
    }
    call.out.integer(n as i64);
}

/// Where a stream read starts, per key.
#[derive(Clone, Copy, PartialEq)]
enum ReadFrom {
    After(StreamId),
    /// `$`: after the stream's last ID now.
    Last,
    /// `>`: the group's undelivered entries.
    New,
}

fn xread(core: &mut Core, call: &mut Call) {
    read_generic(core, call, false);
}

fn xreadgroup(core: &mut Core, call: &mut Call) {
    read_generic(core, call, true);
}

/// XREAD and XREADGROUP, after 7.0's `xreadCommand`.
fn read_generic(core: &mut Core, call: &mut Call, group_mode: bool) {
    let name = if group_mode { "xreadgroup" } else { "xread" };
    let mut block: Option<Option<u64>> = None;
    let mut count: Option<usize> = None;
    let mut group: Option<(&[u8], &[u8])> = None;
    let mut noack = false;
    let mut streams_at = 0;
    let mut i = 1;
    while i < call.argc() {
        let more = call.argc() - i - 1;
        let o = call.arg(i);
        if is(o, "block") && more > 0 {
            if call.in_script {
                // As Redis: blocking makes no sense inside a script.
                return call.error(&format!(
                    "ERR {name} command is not allowed with BLOCK option from scripts"
                ));
            }
            i += 1;
            let ms = match parse_i64(call.arg(i)) {
                Some(ms) if ms < 0 => return call.error("ERR timeout is negative"),
                Some(ms) => ms as u64,
                None => return call.error("ERR timeout is not an integer or out of range"),
            };
            block = Some((ms > 0).then(|| call.now_ms.saturating_add(ms)));
        } else if is(o, "count") && more > 0 {
            i += 1;
            match parse_i64(call.arg(i)) {
                Some(n) => count = Some(n.max(0) as usize),
                None => return call.error(NOT_INTEGER),
            }
        } else if is(o, "streams") && more > 0 {
            streams_at = i + 1;
            if !(call.argc() - streams_at).is_multiple_of(2) {
                let symbol = if group_mode { '>' } else { '$' };
                return call.error(&format!("ERR Unbalanced '{name}' list of streams: for each stream key an ID or '{symbol}' must be specified."));
            }
            break;
        } else if is(o, "group") && more >= 2 {
            if !group_mode {
                return call.error(
                    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                );
            }
            group = Some((call.arg(i + 1), call.arg(i + 2)));
            i += 2;
        } else if is(o, "noack") {
            if !group_mode {
                return call.error(
                    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                );
            }
            noack = true;
        } else {
            return call.syntax_error();
        }
        i += 1;
    }
    if streams_at == 0 {
        return call.syntax_error();
    }
    if group_mode && group.is_none() {
        return call.error("ERR Missing GROUP option for XREADGROUP");
    }
    // COUNT 0 means no limit, as in Redis.
    let count = count.filter(|&n| n > 0);
    let nstreams = (call.argc() - streams_at) / 2;
    let keys = &call.args[streams_at..streams_at + nstreams];
    let now_ms = call.now_ms;
    // A parked request running again because one of its keys changed.
    let retry = !call.in_exec
        && core
            .clients
            .get(&call.conn)
            .is_some_and(|c| c.blocked.is_some());
    let mut from = Vec::with_capacity(nstreams);
    for (k, key) in keys.iter().enumerate() {
        let id_arg = call.arg(streams_at + nstreams + k);
        let s = match lookup(core, key, now_ms, true) {
            // A parked XREAD whose key now holds another type keeps waiting (Redis wakes
            // it only for streams); a parked XREADGROUP has lost its group.
            Err(WrongType) if retry && !group_mode => None,
            Err(WrongType) | Ok(None) if retry && group_mode => {
                return call.error("UNBLOCKED the stream key no longer exists")
            }
            Err(WrongType) => return call.wrong_type(),
            Ok(s) => s,
        };
        if retry && group_mode {
            let g = group.map(|(g, _)| g).unwrap_or_default();
            if s.as_ref().is_some_and(|s| s.group(g).is_none()) {
                return call.error(
                    "NOGROUP the consumer group this client was blocked on no longer exists",
                );
            }
        }
        if let Some((g, _)) = group {
            if s.is_none_or(|s| s.group(g).is_none()) {
                let mut m = b"NOGROUP No such key '".to_vec();
                m.extend_from_slice(key);
                m.extend_from_slice(b"' or consumer group '");
                m.extend_from_slice(g);
                m.extend_from_slice(b"' in XREADGROUP with GROUP option");
                return call.error_bytes(&m);
            }
        }
        let f = if id_arg == b"$" {
            if group_mode {
                return call.error("ERR The $ ID is meaningful only for XREAD");
            }
            ReadFrom::Last
        } else if id_arg == b">" {
            if !group_mode {
                return call.error("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.");
            }
            ReadFrom::New
        } else {
            match strict_id(id_arg, 0) {
                Ok(id) => ReadFrom::After(id),
                Err(e) => return call.error(e),
            }
        };
        from.push(f);
    }
    // `$` means "after the last ID now": remembered as that ID in case the client parks.
    let mut last_ids = vec![StreamId::MIN; nstreams];
    for (k, key) in keys.iter().enumerate() {
        if from[k] == ReadFrom::Last {
            if let Some(e) = core.db.get_raw(key) {
                if let Value::Stream(s) = &e.value {
                    last_ids[k] = s.last_id;
                }
            }
        }
    }
    // Serve what can be served now.
    let mut served: Vec<(usize, Vec<ReadEntry>)> = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        let Ok(Some(s)) = lookup(core, key, now_ms, false) else {
            continue;
        };
        let entries = match (group, from[k]) {
            (Some((g, c)), ReadFrom::New) => {
                let last = s.group(g).map(|g| g.last_id).unwrap_or_default();
                if s.last_entry().is_none_or(|(max, _)| max <= last) {
                    continue;
                }
                let created = !s.group(g).is_some_and(|g| g.consumers.contains_key(c));
                let got = s
                    .read_group_new(g, c, count, noack, now_ms)
                    .unwrap_or_default();
                if created {
                    core.notify(EVENT_STREAM, "xgroup-createconsumer", key);
                }
                got
            }
            (Some((g, c)), ReadFrom::After(id)) => {
                let created = !s.group(g).is_some_and(|g| g.consumers.contains_key(c));
                let got = s
                    .read_group_history(g, c, id, count, now_ms)
                    .unwrap_or_default();
                if created {
                    core.notify(EVENT_STREAM, "xgroup-createconsumer", key);
                }
                got
            }
            (None, f) => {
                let after = match f {
                    ReadFrom::After(id) => id,
                    _ => s.last_id,
                };
                let Some(start) = after.next() else { continue };
                let got: Vec<ReadEntry> = s
                    .range(start, StreamId::MAX, count, false)
                    .into_iter()
                    .map(|(id, f)| (id, Some(f.clone())))
                    .collect();
                if got.is_empty() {
                    continue;
                }
                got
            }
            (Some(_), ReadFrom::Last) => unreachable!("rejected above"),
        };
        served.push((k, entries));
    }
    if !served.is_empty() {
        match call.out.protocol() {
            Protocol::Resp2 => call.out.array_len(served.len()),
            Protocol::Resp3 => call.out.map_len(served.len()),
        }
        for (k, entries) in &served {
            if call.out.protocol() == Protocol::Resp2 {
                call.out.array_len(2);
            }
            call.out.bulk(&keys[*k]);
            write_entries(&mut call.out, entries);
        }
        return;
    }
    match block {
        Some(deadline) if !call.in_exec => {
            let keys = keys.to_vec();
            if from.contains(&ReadFrom::Last) {
                // Park the request with `$` replaced by the IDs it stood for: a re-run must
                // serve entries added after this moment, not after whatever is last then.
                // The dispatcher's own parking then keeps this place (first park wins).
                let mut args = call.args.to_vec();
                for (k, f) in from.iter().enumerate() {
                    if *f == ReadFrom::Last {
                        args[streams_at + nstreams + k] = Bytes::from(last_ids[k].to_string());
                    }
                }
                let req = BlockRequest {
                    keys: keys.clone(),
                    deadline_ms: deadline,
                    on_timeout: TimeoutReply::NullArray,
                };
                core.park(call.conn, &args, req);
            }
            core.block(call, &keys, deadline, TimeoutReply::NullArray);
        }
        _ => call.out.null_array(),
    }
}

// ---------------------------------------------------------------------------------------------
// Groups

/// Parses XGROUP CREATE/SETID options from argument 5 on: (mkstream, entries read).
fn group_options(call: &Call, create: bool) -> Result<(bool, Option<u64>), &'static str> {
    let mut mkstream = false;
    let mut entries_read = None;
    let mut i = 5;
    while i < call.argc() {
        if create && is(call.arg(i), "mkstream") {
            mkstream = true;
            i += 1;
        } else if is(call.arg(i), "entriesread") && i + 1 < call.argc() {
            let n = parse_i64(call.arg(i + 1)).ok_or(NOT_INTEGER)?;
            if n < -1 {
                return Err("ERR value for ENTRIESREAD must be positive or -1");
            }
            entries_read = (n >= 0).then_some(n as u64);
            i += 2;
        } else {
            return Err("SUBCOMMAND");
        }
    }
    Ok((mkstream, entries_read))
}

fn subcommand_syntax(call: &mut Call) {
    let sub = String::from_utf8_lossy(call.arg(1)).into_owned();
    call.error(&format!(
        "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try XGROUP HELP."
    ));
}

/// The stream at argument 2 for an XGROUP subcommand, with 7.0's checks: the key must exist
/// (unless `mkstream`), and `need_group` subcommands need the group. Replies on failure.
fn xgroup_target<'c>(
    core: &'c mut Core,
    call: &mut Call,
    mkstream: bool,
    need_group: bool,
) -> Option<Option<&'c mut Stream>> {
    let (key, group) = (call.arg(2), call.arg(3));
    match lookup(core, key, call.now_ms, false) {
        Err(WrongType) => {
            call.wrong_type();
            None
        }
        Ok(None) if !mkstream => {
            call.error("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.");
            None
        }
        Ok(Some(s)) if need_group && s.group(group).is_none() => {
            no_such_group(call, key, group);
            None
        }
        Ok(s) => Some(s),
    }
}

fn xgroup_create(core: &mut Core, call: &mut Call) {
    let (mkstream, entries_read) = match group_options(call, true) {
        Ok(o) => o,
        Err("SUBCOMMAND") => return subcommand_syntax(call),
        Err(e) => return call.error(e),
    };
    if call.argc() > 8 {
        return subcommand_syntax(call);
    }
    let (key, group, now_ms) = (call.arg(2), call.arg(3), call.now_ms);
    let Some(existing) = xgroup_target(core, call, mkstream, false) else {
        return;
    };
    let last = existing.as_ref().map(|s| s.last_id);
    let id = if call.arg(4) == b"$" {
        last.unwrap_or_default()
    } else {
        match strict_id(call.arg(4), 0) {
            Ok(id) => id,
            Err(e) => return call.error(e),
        }
    };
    let created = last.is_none();
    if created {
        core.db
            .insert(key, Value::Stream(Box::new(Stream::new())), None, now_ms);
        core.notify(EVENT_NEW, "new", key);
        core.modified(key);
    }
    let Ok(Some(s)) = lookup(core, key, now_ms, false) else {
        unreachable!("exists now")
    };
    if s.create_group(group, id, entries_read) {
        call.ok();
        core.notify(EVENT_STREAM, "xgroup-create", key);
    } else {
        call.error("BUSYGROUP Consumer Group name already exists");
    }
}

fn xgroup_setid(core: &mut Core, call: &mut Call) {
    let entries_read = match group_options(call, false) {
        Ok((_, n)) => n,
        Err("SUBCOMMAND") => return subcommand_syntax(call),
        Err(e) => return call.error(e),
    };
    if call.argc() != 5 && call.argc() != 7 {
        return subcommand_syntax(call);
    }
    let (key, group) = (call.arg(2), call.arg(3));
    let Some(Some(s)) = xgroup_target(core, call, false, true) else {
        return;
    };
    let id = if call.arg(4) == b"$" {
        s.last_id
    } else {
        match loose_id(call.arg(4), 0) {
            Ok(id) => id,
            Err(e) => return call.error(e),
        }
    };
    s.set_group_id(group, id, entries_read);
    call.ok();
    core.notify(EVENT_STREAM, "xgroup-setid", key);
}

fn xgroup_destroy(core: &mut Core, call: &mut Call) {
    let (key, group) = (call.arg(2), call.arg(3));
    let Some(Some(s)) = xgroup_target(core, call, false, false) else {
        return;
    };
    if s.destroy_group(group) {
        call.out.integer(1);
        core.notify(EVENT_STREAM, "xgroup-destroy", key);
        // Parked XREADGROUP clients of this group run again and get NOGROUP.
        core.modified(key);
    } else {
        call.out.integer(0);
    }
}

fn xgroup_createconsumer(core: &mut Core, call: &mut Call) {
    let (key, group, consumer, now_ms) = (call.arg(2), call.arg(3), call.arg(4), call.now_ms);
    let Some(Some(s)) = xgroup_target(core, call, false, true) else {
        return;
    };
    let created = s
        .group_mut(group)
        .expect("checked")
        .create_consumer(consumer, now_ms);
    call.out.integer(created as i64);
    if created {
        core.notify(EVENT_STREAM, "xgroup-createconsumer", key);
    }
}

fn xgroup_delconsumer(core: &mut Core, call: &mut Call) {
    let (key, group, consumer) = (call.arg(2), call.arg(3), call.arg(4));
    let Some(Some(s)) = xgroup_target(core, call, false, true) else {
        return;
    };
    match s
        .group_mut(group)
        .expect("checked")
        .delete_consumer(consumer)
    {
        Some(pending) => {
            call.out.integer(pending as i64);
            core.notify(EVENT_STREAM, "xgroup-delconsumer", key);
        }
        None => call.out.integer(0),
    }
}

fn help(call: &mut Call, name: &str, lines: &[&str]) {
    call.out.array_len(lines.len() + 3);
    call.out.simple(
        format!("{name} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:").as_bytes(),
    );
    for l in lines {
        call.out.simple(l.as_bytes());
    }
    call.out.simple(b"HELP");
    call.out.simple(b"    Print this help.");
}

fn xgroup_help(_core: &mut Core, call: &mut Call) {
    help(
        call,
        "XGROUP",
        &[
            "CREATE <key> <groupname> <id|$> [option]",
            "    Create a new consumer group. Options are:",
            "    * MKSTREAM",
            "      Create the empty stream if it does not exist.",
            "    * ENTRIESREAD entries_read",
            "      Set the group's entries_read counter (internal use).",
            "CREATECONSUMER <key> <groupname> <consumer>",
            "    Create a new consumer in the specified group.",
            "DELCONSUMER <key> <groupname> <consumer>",
            "    Remove the specified consumer.",
            "DESTROY <key> <groupname>",
            "    Remove the specified group.",
            "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
            "    Set the current group ID and entries_read counter.",
        ],
    );
}

fn xack(core: &mut Core, call: &mut Call) {
    let mut ids = Vec::with_capacity(call.argc() - 3);
    for arg in &call.args[3..] {
        match strict_id(arg, 0) {
            Ok(id) => ids.push(id),
            Err(e) => return call.error(e),
        }
    }
    let group = call.arg(2);
    let n = match lookup(core, call.arg(1), call.now_ms, true) {
        Err(WrongType) => return call.wrong_type(),
        Ok(s) => match s.and_then(|s| s.group_mut(group)) {
            None => 0,
            Some(g) => ids.into_iter().filter(|id| g.ack(*id)).count(),
        },
    };
    call.out.integer(n as i64);
}

fn xpending(core: &mut Core, call: &mut Call) {
    let argc = call.argc();
    if argc != 3 && !(6..=9).contains(&argc) {
        return call.syntax_error();
    }
    let mut min_idle = 0i64;
    let mut range = None;
    let mut consumer: Option<&[u8]> = None;
    if argc >= 6 {
        let mut at = 3;
        if is(call.arg(3), "idle") {
            match parse_i64(call.arg(4)) {
                Some(n) => min_idle = n,
                None => return call.error(NOT_INTEGER),
            }
            if argc < 8 {
                return call.syntax_error();
            }
            at += 2;
        }
        let count = match parse_i64(call.arg(at + 2)) {
            Some(n) => n.max(0) as usize,
            None => return call.error(NOT_INTEGER),
        };
        let start = match interval_start(call.arg(at)) {
            Ok(id) => id,
            Err(e) => return call.error(e),
        };
        let end = match interval_end(call.arg(at + 1)) {
            Ok(id) => id,
            Err(e) => return call.error(e),
        };
        if at + 3 < argc {
            consumer = Some(call.arg(at + 3));
        }
        range = Some((start, end, count));
    }
    let (key, group, now_ms) = (call.arg(1), call.arg(2), call.now_ms);
    let g = match lookup(core, key, now_ms, true) {
        Err(WrongType) => return call.wrong_type(),
        Ok(s) => match s.and_then(|s| s.group(group)) {
            Some(g) => g,
            None => return no_group(call, key, group),
        },
    };
    let Some((start, end, count)) = range else {
        call.out.array_len(4);
        call.out.integer(g.pel.len() as i64);
        if g.pel.is_empty() {
            call.out.null();
            call.out.null();
            call.out.null_array();
            return;
        }
        write_id(&mut call.out, *g.pel.keys().next().expect("non-empty"));
        write_id(&mut call.out, *g.pel.keys().next_back().expect("non-empty"));
        let busy: Vec<_> = g
            .consumers
            .iter()
            .filter(|(_, c)| !c.pel.is_empty())
            .collect();
        call.out.array_len(busy.len());
        for (name, c) in busy {
            call.out.array_len(2);
            call.out.bulk(name);
            call.out.bulk(c.pel.len().to_string().as_bytes());
        }
        return;
    };
    let ids: Vec<StreamId> = if start > end {
        Vec::new()
    } else {
        match consumer {
            Some(c) => match g.consumers.get(c) {
                Some(c) => c.pel.range(start..=end).copied().collect(),
                None => Vec::new(),
            },
            None => g.pel.range(start..=end).map(|(id, _)| *id).collect(),
        }
    };
    let mut rows = Vec::new();
    for id in ids {
        if rows.len() >= count {
            break;
        }
        let p = &g.pel[&id];
        let idle = now_ms.saturating_sub(p.delivery_time_ms);
        if min_idle > 0 && (idle as i64) < min_idle {
            continue;
        }
        rows.push((id, p.consumer.clone(), idle, p.delivery_count));
    }
    call.out.array_len(rows.len());
    for (id, c, idle, n) in rows {
        call.out.array_len(4);
        write_id(&mut call.out, id);
        call.out.bulk(&c);
        call.out.integer(idle as i64);
        call.out.integer(n as i64);
    }
}

fn xclaim(core: &mut Core, call: &mut Call) {
    let (key, group, consumer, now_ms) = (call.arg(1), call.arg(2), call.arg(3), call.now_ms);
    match lookup(core, key, now_ms, true) {
        Err(WrongType) => return call.wrong_type(),
        Ok(s) if s.as_ref().and_then(|s| s.group(group)).is_none() => {
            return no_group(call, key, group)
        }
        Ok(_) => {}
    }
    let min_idle = match parse_i64(call.arg(4)) {
        Some(n) => n.max(0) as u64,
        None => return call.error("ERR Invalid min-idle-time argument for XCLAIM"),
    };
    let mut ids = Vec::new();
    let mut j = 5;
    while j < call.argc() {
        match strict_id(call.arg(j), 0) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let (mut force, mut justid) = (false, false);
    let mut delivery: Option<i64> = None;
    let mut retry: Option<u64> = None;
    let mut last_id = StreamId::MIN;
    while j < call.argc() {
        let more = call.argc() - 1 - j;
        let opt = call.arg(j);
        let num = |j: usize, what: &str| {
            parse_i64(call.arg(j)).ok_or(format!("ERR Invalid {what} option argument for XCLAIM"))
        };
        if is(opt, "force") {
            force = true;
        } else if is(opt, "justid") {
            justid = true;
        } else if is(opt, "idle") && more > 0 {
            j += 1;
            match num(j, "IDLE") {
                Ok(n) => delivery = Some(now_ms as i64 - n),
                Err(e) => return call.error(&e),
            }
        } else if is(opt, "time") && more > 0 {
            j += 1;
            match num(j, "TIME") {
                Ok(n) => delivery = Some(n),
                Err(e) => return call.error(&e),
            }
        } else if is(opt, "retrycount") && more > 0 {
            j += 1;
            match num(j, "RETRYCOUNT") {
                Ok(n) => retry = Some(n.max(0) as u64),
                Err(e) => return call.error(&e),
            }
        } else if is(opt, "lastid") && more > 0 {
            j += 1;
            match strict_id(call.arg(j), 0) {
                Ok(id) => last_id = id,
                Err(e) => return call.error(e),
            }
        } else {
            let mut m = b"ERR Unrecognized XCLAIM option '".to_vec();
            m.extend_from_slice(opt);
            m.push(b'\'');
            return call.error_bytes(&m);
        }
        j += 1;
    }
    // A bogus delivery time (negative, in the future) is taken as now, as Redis does.
    let delivery_ms = match delivery {
        Some(t) if t >= 0 && (t as u64) <= now_ms => t as u64,
        _ => now_ms,
    };
    let Ok(Some(s)) = lookup(core, key, now_ms, false) else {
        unreachable!("checked above")
    };
    let g = s.group_mut(group).expect("checked above");
    if last_id > g.last_id {
        g.last_id = last_id;
    }
    let had_consumer = g.consumers.contains_key(consumer);
    let mut claimed = Vec::new();
    for id in ids {
        if let Some(true) = s.claim(
            group,
            consumer,
            id,
            min_idle,
            delivery_ms,
            retry,
            force,
            justid,
            now_ms,
        ) {
            claimed.push(id);
        }
    }
    let created = !had_consumer
        && s.group(group)
            .is_some_and(|g| g.consumers.contains_key(consumer));
    call.out.array_len(claimed.len());
    for id in claimed {
        if justid {
            write_id(&mut call.out, id);
        } else {
            write_entry(&mut call.out, id, s.get(id));
        }
    }
    if created {
        core.notify(EVENT_STREAM, "xgroup-createconsumer", key);
    }
}

fn xautoclaim(core: &mut Core, call: &mut Call) {
    let (key, group, consumer, now_ms) = (call.arg(1), call.arg(2), call.arg(3), call.now_ms);
    let min_idle = match parse_i64(call.arg(4)) {
        Some(n) => n.max(0) as u64,
        None => return call.error("ERR Invalid min-idle-time argument for XAUTOCLAIM"),
    };
    let start = match interval_start(call.arg(5)) {
        Ok(id) => id,
        Err(e) => return call.error(e),
    };
    let mut count = 100usize;
    let mut justid = false;
    let mut j = 6;
    while j < call.argc() {
        let more = call.argc() - 1 - j;
        if is(call.arg(j), "count") && more > 0 {
            // Bounded so that `10 × count` attempts cannot overflow (Redis's own limit).
            const MAX_COUNT: i64 = i64::MAX / 16;
            match parse_i64(call.arg(j + 1)) {
                Some(n) if (1..=MAX_COUNT).contains(&n) => count = n as usize,
                _ => return call.error("ERR COUNT must be > 0"),
            }
            j += 1;
        } else if is(call.arg(j), "justid") {
            justid = true;
        } else {
            return call.syntax_error();
        }
        j += 1;
    }
    // Arguments first, then the key and group (Redis 7.0's order of errors).
    let s = match lookup(core, key, now_ms, true) {
        Err(WrongType) => return call.wrong_type(),
        Ok(Some(s)) if s.group(group).is_some() => s,
        Ok(_) => return no_group(call, key, group),
    };
    let had_consumer = s
        .group(group)
        .is_some_and(|g| g.consumers.contains_key(consumer));
    let (next, claimed, deleted) = s
        .auto_claim(group, consumer, start, min_idle, count, justid, now_ms)
        .expect("group checked above");
    let created = !had_consumer
        && s.group(group)
            .is_some_and(|g| g.consumers.contains_key(consumer));
    call.out.array_len(3);
    write_id(&mut call.out, next);
    call.out.array_len(claimed.len());
    for id in claimed {
        if justid {
            write_id(&mut call.out, id);
        } else {
            write_entry(&mut call.out, id, s.get(id));
        }
    }
    call.out.array_len(deleted.len());
    for id in deleted {
        write_id(&mut call.out, id);
    }
    if created {
        core.notify(EVENT_STREAM, "xgroup-createconsumer", key);
    }
}

fn xsetid(core: &mut Core, call: &mut Call) {
    let id = match strict_id(call.arg(2), 0) {
        Ok(id) => id,
        Err(e) => return call.error(e),
    };
    let mut entries_added: Option<u64> = None;
    let mut max_del = StreamId::MIN;
    let mut i = 3;
    while i < call.argc() {
        let more = call.argc() - 1 - i;
        if is(call.arg(i), "entriesadded") && more > 0 {
            match parse_i64(call.arg(i + 1)) {
                Some(n) if n < 0 => return call.error("ERR entries_added must be positive"),
                Some(n) => entries_added = Some(n as u64),
                None => return call.error(NOT_INTEGER),
            }
            i += 2;
        } else if is(call.arg(i), "maxdeletedid") && more > 0 {
            match strict_id(call.arg(i + 1), 0) {
                Ok(m) => max_del = m,
                Err(e) => return call.error(e),
            }
            if id < max_del {
                return call.error("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id");
            }
            i += 2;
        } else {
            return call.syntax_error();
        }
    }
    let key = call.arg(1);
    let s = match lookup(core, key, call.now_ms, false) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.error(NO_SUCH_KEY),
        Ok(Some(s)) => s,
    };
    if id < s.max_deleted_id {
        return call
            .error("ERR The ID specified in XSETID is smaller than current max_deleted_entry_id");
    }
    if let Some((top, _)) = s.last_entry() {
        if id < top {
            return call.error(
                "ERR The ID specified in XSETID is smaller than the target stream top item",
            );
        }
        if entries_added.is_some_and(|n| (s.len() as u64) > n) {
            return call.error("ERR The entries_added specified in XSETID is smaller than the target stream length");
        }
    }
    s.set_last_id(id, entries_added, (!max_del.is_zero()).then_some(max_del));
    call.ok();
    core.modified(key);
    core.notify(EVENT_STREAM, "xsetid", key);
}

// ---------------------------------------------------------------------------------------------
// XINFO

fn xinfo_help(_core: &mut Core, call: &mut Call) {
    help(
        call,
        "XINFO",
        &[
            "CONSUMERS <key> <groupname>",
            "    Show consumers of <groupname>.",
            "GROUPS <key>",
            "    Show the stream consumer groups.",
            "STREAM <key> [FULL [COUNT <count>]",
            "    Show information about the stream.",
        ],
    );
}

/// Listpack nodes Redis would use for this many entries (`radix-tree-keys`): reported so
/// tools see the field; Lattice keeps no radix tree.
fn node_estimate(len: usize) -> usize {
    len.div_ceil(lattice_store::stream::NODE_MAX_ENTRIES)
}

fn write_lag(out: &mut ReplyWriter, lag: Option<u64>) {
    match lag {
        Some(n) => out.integer(n as i64),
        None => out.null(),
    }
}

fn xinfo_stream(core: &mut Core, call: &mut Call) {
    let mut full = false;
    let mut count = 10usize;
    if call.argc() > 3 {
        if !is(call.arg(3), "full") {
            return call.syntax_error();
        }
        full = true;
        match call.argc() {
            4 => {}
            6 if is(call.arg(4), "count") => match parse_i64(call.arg(5)) {
                Some(n) if n <= 0 => count = usize::MAX,
                Some(n) => count = n as usize,
                None => return call.error(NOT_INTEGER),
            },
            _ => return call.syntax_error(),
        }
    }
    let now_ms = call.now_ms;
    let s = match lookup(core, call.arg(2), now_ms, true) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.error(NO_SUCH_KEY),
        Ok(Some(s)) => s,
    };
    let out = &mut call.out;
    out.map_len(if full { 9 } else { 10 });
    out.bulk(b"length");
    out.integer(s.len() as i64);
    out.bulk(b"radix-tree-keys");
    out.integer(node_estimate(s.len()) as i64);
    out.bulk(b"radix-tree-nodes");
    out.integer((node_estimate(s.len()) + 1) as i64);
    out.bulk(b"last-generated-id");
    write_id(out, s.last_id);
    out.bulk(b"max-deleted-entry-id");
    write_id(out, s.max_deleted_id);
    out.bulk(b"entries-added");
    out.integer(s.entries_added as i64);
    out.bulk(b"recorded-first-entry-id");
    write_id(out, s.first_id());
    if !full {
        out.bulk(b"groups");
        out.integer(s.groups().len() as i64);
        out.bulk(b"first-entry");
        match s.first_entry() {
            Some((id, f)) => write_entry(out, id, Some(f)),
            None => out.null(),
        }
        out.bulk(b"last-entry");
        match s.last_entry() {
            Some((id, f)) => write_entry(out, id, Some(f)),
            None => out.null(),
        }
        return;
    }
    out.bulk(b"entries");
    let entries = s.range(StreamId::MIN, StreamId::MAX, Some(count), false);
    out.array_len(entries.len());
    for (id, f) in entries {
        write_entry(out, id, Some(f));
    }
    out.bulk(b"groups");
    out.array_len(s.groups().len());
    for (name, g) in s.groups() {
        out.map_len(7);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"last-delivered-id");
        write_id(out, g.last_id);
        out.bulk(b"entries-read");
        match g.entries_read {
            Some(n) => out.integer(n as i64),
            None => out.null(),
        }
        out.bulk(b"lag");
        write_lag(out, s.lag(g));
        out.bulk(b"pel-count");
        out.integer(g.pel.len() as i64);
        out.bulk(b"pending");
        let pel: Vec<_> = g.pel.iter().take(count).collect();
        out.array_len(pel.len());
        for (id, p) in pel {
            out.array_len(4);
            write_id(out, *id);
            out.bulk(&p.consumer);
            out.integer(p.delivery_time_ms as i64);
            out.integer(p.delivery_count as i64);
        }
        out.bulk(b"consumers");
        out.array_len(g.consumers.len());
        for (cname, c) in &g.consumers {
            out.map_len(4);
            out.bulk(b"name");
            out.bulk(cname);
            out.bulk(b"seen-time");
            out.integer(c.seen_time_ms as i64);
            out.bulk(b"pel-count");
            out.integer(c.pel.len() as i64);
            out.bulk(b"pending");
            let ids: Vec<_> = c.pel.iter().take(count).collect();
            out.array_len(ids.len());
            for id in ids {
                let p = &g.pel[id];
                out.array_len(3);
                write_id(out, *id);
                out.integer(p.delivery_time_ms as i64);
                out.integer(p.delivery_count as i64);
            }
        }
    }
}

fn xinfo_groups(core: &mut Core, call: &mut Call) {
    let s = match lookup(core, call.arg(2), call.now_ms, true) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.error(NO_SUCH_KEY),
        Ok(Some(s)) => s,
    };
    let out = &mut call.out;
    out.array_len(s.groups().len());
    for (name, g) in s.groups() {
        out.map_len(6);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"consumers");
        out.integer(g.consumers.len() as i64);
        out.bulk(b"pending");
        out.integer(g.pel.len() as i64);
        out.bulk(b"last-delivered-id");
        write_id(out, g.last_id);
        out.bulk(b"entries-read");
        match g.entries_read {
            Some(n) => out.integer(n as i64),
            None => out.null(),
        }
        out.bulk(b"lag");
        write_lag(out, s.lag(g));
    }
}

fn xinfo_consumers(core: &mut Core, call: &mut Call) {
    let (key, group, now_ms) = (call.arg(2), call.arg(3), call.now_ms);
    let s = match lookup(core, key, now_ms, true) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.error(NO_SUCH_KEY),
        Ok(Some(s)) => s,
    };
    let Some(g) = s.group(group) else {
        return no_such_group(call, key, group);
    };
    let out = &mut call.out;
    out.array_len(g.consumers.len());
    for (name, c) in &g.consumers {
        out.map_len(3);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"pending");
        out.integer(c.pel.len() as i64);
        out.bulk(b"idle");
        out.integer(now_ms.saturating_sub(c.seen_time_ms) as i64);
    }
}

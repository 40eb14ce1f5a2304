//! Server-side Lua scripting: EVAL, EVALSHA (and their `_RO` forms) and SCRIPT.
//!
//! Lua 5.1, as in Redis, built from source (`mlua` with `vendored`). One interpreter per node,
//! created with the node and replaced by a new one at SCRIPT FLUSH (as Redis does; the
//! function libraries are compiled into the new one); compiled scripts are cached by the SHA-1
//! of their body, so EVALSHA works after EVAL or SCRIPT LOAD, until SCRIPT FLUSH.
//!
//! Determinism and purity: the interpreter has no `io`, `os`, `package`, `debug`, `loadfile`,
//! `dofile` or `print`; `math.random` draws from a generator seeded per script from the node's
//! seeded RNG. Globals are read-only to scripts (reading an undefined one is an error), as in
//! Redis.
//!
//! `redis.call` / `redis.pcall` run commands through the same handlers as clients, with
//! `Core::run_handler` (so replication captures each command's effect and keyspace events
//! fire), marked as inside EXEC so that blocking commands answer at once. Every command a
//! script runs sees the time the script started, as in Redis.
//!
//! Long scripts (Redis's busy scripts): a script runs as a Lua coroutine in slices of
//! [`SLICE_INSTRUCTIONS`]; the count hook suspends it at the end of a slice
//! ([`coroutine`]). If it has not finished, the EVAL handler returns without a reply and the
//! node keeps it as [`Running`]; the node asks for an immediate timer and resumes the next
//! slice from `handle_timeout`. In between, the node stays atomic: other clients' inputs are
//! held back in arrival order while the script is younger than `busy-reply-threshold` on the
//! node's clock (as Redis's clients simply wait), and after that they are answered `-BUSY`,
//! except the `allow-busy` commands (SCRIPT KILL, MULTI, DISCARD, WATCH, ...). SCRIPT KILL
//! ends a script that has not run a write command (the caller gets "Script killed by user");
//! one that wrote answers UNKILLABLE, since its effects cannot be undone. Replication messages
//! and the caller's own later requests wait until the script ends; no timer (expiry, blocking
//! timeouts) runs in between. See docs/ARCHITECTURE.md §13.
//!
//! Bounds: Lua 5.1 cannot suspend a coroutine inside a C call (`pcall`, a sort comparator, a
//! metamethod), so a script may run at most [`INSTRUCTION_BUDGET`] instructions without being
//! suspended, and is stopped with an error past that; a script inside MULTI/EXEC is never
//! suspended (EXEC answers as one reply), so the same bound is its whole budget. A script may
//! hold at most [`MEMORY_LIMIT_BYTES`] of Lua memory. The script cache is bounded too
//! ([`MAX_CACHED_SCRIPTS`], [`MAX_CACHED_BYTES`]).

pub(crate) mod basics;
pub(crate) mod coroutine;
pub(crate) mod engine;
pub(crate) mod json;
pub(crate) mod msgpack;

pub use basics::lua_number_text;

use std::cell::{Cell, RefCell};

use bytes::{Bytes, BytesMut};
use lattice_resp::{decode_frame, Frame, Protocol, ReplyWriter};
use mlua::{Lua, MultiValue, Table, Value as LuaValue};
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::args::{is, parse_i64, NOT_INTEGER};
use crate::client::{ConnId, ReplyMode};
use crate::command::{container, spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};
use crate::dispatch::Unresolved;
use crate::time::Micros;
use basics::{ALLOW_OOM, NO_CLUSTER, NO_WRITES};
use engine::{
    error_table, internal_error, raise_if_error, unwrap_call_error, Kind, Running, COUNTED,
    HOOK_STEP,
};
pub use engine::{
    sha1_hex, Scripts, INSTRUCTION_BUDGET, MAX_CACHED_BYTES, MAX_CACHED_SCRIPTS,
    MEMORY_LIMIT_BYTES, SLICE_INSTRUCTIONS,
};

const SCRIPTING: &str = "scripting";

/// Nesting depth of a Lua table converted to a reply (a table containing itself would
/// otherwise recurse forever). The conversion recurses on the node's stack: a debug build's
/// test thread overflowed at 1,000 levels.
const MAX_REPLY_DEPTH: usize = 256;

/// What the caller of a script stopped by SCRIPT KILL gets (before the location).
const KILLED_BY_USER: &str = "ERR Script killed by user with SCRIPT KILL...";

// One line per command reads best as a table.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    spec("eval", -3, &["noscript", "skip-monitor", "may-replicate", "no-mandatory-keys", "stale", "movablekeys"], (0, 0, 0), SCRIPTING, "2.6.0", "Execute a Lua script server side", eval),
    spec("evalsha", -3, &["noscript", "skip-monitor", "may-replicate", "no-mandatory-keys", "stale", "movablekeys"], (0, 0, 0), SCRIPTING, "2.6.0", "Execute a Lua script server side", evalsha),
    spec("eval_ro", -3, &["noscript", "skip-monitor", "no-mandatory-keys", "stale", "readonly", "movablekeys"], (0, 0, 0), SCRIPTING, "7.0.0", "Execute a read-only Lua script server side", eval_ro),
    spec("evalsha_ro", -3, &["noscript", "skip-monitor", "no-mandatory-keys", "stale", "readonly", "movablekeys"], (0, 0, 0), SCRIPTING, "7.0.0", "Execute a read-only Lua script server side", evalsha_ro),
    container(
        "script",
        -2,
        SCRIPTING,
        "2.6.0",
        "A container for Lua scripts management commands",
        &[
            spec("script|load", 3, &["noscript", "stale"], (0, 0, 0), SCRIPTING, "2.6.0", "Load the specified Lua script into the script cache.", script_load),
            spec("script|exists", -3, &["noscript"], (0, 0, 0), SCRIPTING, "2.6.0", "Check existence of scripts in the script cache.", script_exists),
            spec("script|flush", -2, &["noscript"], (0, 0, 0), SCRIPTING, "2.6.0", "Remove all the scripts from the script cache.", script_flush),
            spec("script|kill", 2, &["noscript", "allow-busy"], (0, 0, 0), SCRIPTING, "2.6.0", "Kill the script currently in execution.", script_kill),
            spec("script|debug", 3, &["noscript"], (0, 0, 0), SCRIPTING, "3.2.0", "Set the debug mode for executed scripts.", script_debug),
            spec("script|help", 2, &["loading", "stale"], (0, 0, 0), SCRIPTING, "5.0.0", "Show helpful text about the different subcommands", script_help),
        ],
    ),
];

fn eval(core: &mut Core, call: &mut Call) {
    eval_generic(core, call, false, false);
}

fn evalsha(core: &mut Core, call: &mut Call) {
    eval_generic(core, call, true, false);
}

fn eval_ro(core: &mut Core, call: &mut Call) {
    eval_generic(core, call, false, true);
}

fn evalsha_ro(core: &mut Core, call: &mut Call) {
    eval_generic(core, call, true, true);
}

fn eval_generic(core: &mut Core, call: &mut Call, by_sha: bool, read_only: bool) {
    let numkeys = match parse_i64(call.arg(2)) {
        Some(n) => n,
        None => return call.error(NOT_INTEGER),
    };
    if numkeys < 0 {
        return call.error("ERR Number of keys can't be negative");
    }
    if numkeys as u64 > (call.argc() - 3) as u64 {
        return call.error("ERR Number of keys can't be greater than number of args");
    }
    let sha = if by_sha {
        let sha = String::from_utf8_lossy(call.arg(1)).to_ascii_lowercase();
        if !core.scripts.cache.contains_key(&sha) {
            return call.error("NOSCRIPT No matching script. Please use EVAL.");
        }
        sha
    } else {
        match core.scripts.load(call.arg(1)) {
            Ok(sha) => sha,
            Err(e) => return call.error(&e),
        }
    };
    let flags = core.scripts.cache[&sha].flags;
    let deny_oom = match prepare(core, flags, read_only) {
        Ok(deny_oom) => deny_oom,
        Err(e) => return call.error(&e),
    };
    // A script declaring no-writes runs as EVAL_RO does.
    let read_only = read_only || flags.is_some_and(|f| f & NO_WRITES != 0);
    let split = 3 + numkeys as usize;
    let (keys, argv) = (&call.args[3..split], &call.args[split..]);
    let seed = core.random_u64();
    match core
        .scripts
        .start(call.conn, call.now, &sha, keys, argv, read_only, seed)
    {
        Ok(mut run) => {
            run.deny_oom = deny_oom;
            launch(core, call, run)
        }
        Err(e) => call.error_bytes(&e),
    }
}

/// Redis's checks before a script runs, from its flags (`None`: an EVAL script without a
/// shebang, which only the commands it runs are checked for) and whether the caller is a
/// `_RO` command. Returns whether the script's `denyoom` commands must be refused (the node
/// is over maxmemory and the flags do not allow it), or the error reply.
pub(crate) fn prepare(core: &Core, flags: Option<u8>, ro: bool) -> Result<bool, String> {
    let limit = core.config.maxmemory_bytes;
    // Dispatch already evicted what the policy allows before this command.
    let oom = limit > 0 && core.eviction.used_bytes() > limit;
    let Some(flags) = flags else {
        return Ok(oom);
    };
    if flags & NO_CLUSTER != 0 && core.cluster.is_some() {
        return Err("ERR Can not run script on cluster, 'no-cluster' flag is set.".into());
    }
    if flags & (ALLOW_OOM | NO_WRITES) == 0 && oom {
        // What Redis answers before the script: a script that may write is a denyoom command.
        return Err(crate::ctx::maxmemory::OOM.into());
    }
    if flags & NO_WRITES == 0 {
        if let Some(e) = core.persist_refuses_writes() {
            return Err(e);
        }
        if ro {
            return Err("ERR Can not execute a script with write flag using *_ro command.".into());
        }
        if !core.enough_replicas() {
            return Err(crate::dispatch::NOREPLICAS.into());
        }
    }
    Ok(oom && flags & ALLOW_OOM == 0)
}

/// What a script answers: a value, or an error reply and whether the error statistics
/// already counted it (a command's error inside the script, passed on: Redis counts it once,
/// when the command replied).
pub(crate) enum Reply {
    Value(Frame),
    Error(Vec<u8>, bool),
}

impl Reply {
    /// Writes the reply into `call`, counting an error the statistics have not counted yet.
    fn answer(self, call: &mut Call) {
        match self {
            Reply::Value(frame) => write_frame(&mut call.out, &frame),
            Reply::Error(message, false) => call.error_bytes(&message),
            Reply::Error(message, true) => call.error_counted(&message),
        }
    }
}

/// Runs a prepared script or function for `call`: its reply now if it ends in its first
/// slice, else it stays as the node's running script (resumed by `continue_script`).
pub(crate) fn launch(core: &mut Core, call: &mut Call, mut run: Running) {
    run.silent = core
        .clients
        .get(&call.conn)
        .is_some_and(|c| matches!(c.reply_mode, ReplyMode::Off | ReplyMode::SkipThis));
    // Inside EXEC (the only way a script runs with `in_exec`: scripts cannot call EVAL) the
    // transaction's reply is one array, so the script must finish here.
    let suspendable = !call.in_exec;
    if run.command.is_empty() && core.tracking.clients > 0 {
        // Client-side caching remembers the declared keys once the script reads.
        run.command = call.args.to_vec();
    }
    match run_slice(core, &mut run, suspendable) {
        Some(reply) => reply.answer(call),
        None => core.scripts.running = Some(run),
    }
}

/// Runs the next slice of the suspended script, or ends it if SCRIPT KILL asked. Returns the
/// caller and its reply when the script is over (None while it goes on); the reply is `None`
/// when the caller asked for none, and `close` says the caller must be closed after it.
pub(crate) fn continue_script(core: &mut Core) -> Option<Finished> {
    let mut run = core.scripts.running.take()?;
    let outcome = if run.killed {
        let line = core.scripts.hook.suspended_line();
        let message = located(
            KILLED_BY_USER.as_bytes().to_vec(),
            &run.sha,
            source_of(run.kind),
            line,
        );
        Reply::Error(message, false)
    } else {
        match run_slice(core, &mut run, true) {
            Some(outcome) => outcome,
            None => {
                core.scripts.running = Some(run);
                return None;
            }
        }
    };
    Some(Finished {
        caller: run.caller,
        reply: (!run.silent).then_some(outcome),
        close: run.close_caller,
    })
}

/// A script that ended after the EVAL handler returned.
pub(crate) struct Finished {
    pub(crate) caller: ConnId,
    pub(crate) reply: Option<Reply>,
    pub(crate) close: bool,
}

impl Finished {
    /// Writes the reply (as `proto` requires) into `out`; returns the error code for the
    /// error statistics if it is an error reply they have not counted yet.
    pub(crate) fn write(&self, out: &mut ReplyWriter) -> Option<String> {
        match &self.reply {
            Some(Reply::Value(frame)) => {
                write_frame(out, frame);
                None
            }
            Some(Reply::Error(message, counted)) => {
                out.error(message);
                (!counted).then(|| crate::command::error_code(message))
            }
            None => None,
        }
    }
}

/// Runs `run` until it ends (its reply as a frame, or an error reply's text) or, when
/// `suspendable`, until the count hook suspends it at the end of a slice (None).
fn run_slice(core: &mut Core, run: &mut Running, suspendable: bool) -> Option<Reply> {
    let lua = core.scripts.lua.clone();
    let hook = core.scripts.hook.clone();
    let slice_steps = if core.buggify.fire("script_short_slice") {
        0
    } else {
        SLICE_INSTRUCTIONS / HOOK_STEP as u64
    };
    let suspendable = suspendable && core.scripts.can_suspend;
    hook.arm(suspendable.then_some(&run.thread), slice_steps);
    let (conn, now) = (run.caller, run.started);
    let limits = Limits {
        read_only: run.read_only,
        deny_oom: run.deny_oom,
    };
    let seen = Seen {
        wrote: Cell::new(run.wrote),
        read: Cell::new(false),
    };
    let core_cell = RefCell::new(core);
    let rng = RefCell::new(run.rng.clone());
    let result = lua.scope(|scope| {
        let dispatch = scope.create_function(|lua, ()| {
            let resp = match lua.named_registry_value::<i64>("lattice.resp")? {
                3 => Protocol::Resp3,
                _ => Protocol::Resp2,
            };
            let call = take_call(&hook)?;
            let argv = match call.args {
                Ok(a) => a,
                Err(e) => return error_table(lua, e.as_bytes(), false),
            };
            let mut core = core_cell
                .try_borrow_mut()
                .map_err(|_| mlua::Error::runtime("redis.call is not reentrant"))?;
            let r = match execute(&mut core, conn, now, &argv, &limits, resp, &seen) {
                Ok(frame) => frame_to_lua(lua, frame, 0)?,
                Err(e) => error_table(lua, e.as_bytes(), true)?,
            };
            if call.raise {
                return raise_if_error(r);
            }
            Ok(r)
        })?;
        // redis.acl_check_cmd: may the caller's user run this command with these arguments?
        let acl_check = scope.create_function(|lua, ()| {
            let argv = match take_call(&hook)?.args {
                Ok(a) => a,
                Err(e) => return raise_if_error(error_table(lua, e.as_bytes(), false)?),
            };
            let core = core_cell
                .try_borrow()
                .map_err(|_| mlua::Error::runtime("redis.acl_check_cmd is not reentrant"))?;
            let spec = match crate::dispatch::resolve(&core, &argv) {
                Ok(spec) | Err(Unresolved::Arity(spec)) => spec,
                Err(_) => {
                    let e = b"ERR Invalid command passed to redis.acl_check_cmd()";
                    return raise_if_error(error_table(lua, e, false)?);
                }
            };
            let user = core.clients.get(&conn).and_then(|c| c.user.clone());
            let allowed = core.acl_denied(user.as_ref(), spec, &argv).is_none();
            Ok(LuaValue::Boolean(allowed))
        })?;
        let random =
            scope.create_function(|_, args: MultiValue| lua_random(&mut rng.borrow_mut(), args))?;
        let randomseed = scope.create_function(|_, s: f64| {
            *rng.borrow_mut() = ChaCha8Rng::seed_from_u64(s as i64 as u64);
            Ok(())
        })?;
        lua.set_named_registry_value("lattice.dispatch", dispatch)?;
        lua.set_named_registry_value("lattice.acl_check", acl_check)?;
        lua.set_named_registry_value("lattice.random", random)?;
        lua.set_named_registry_value("lattice.randomseed", randomseed)?;
        coroutine::resume(&lua, &run.thread, &hook)
    });
    hook.disarm();
    for name in [
        "lattice.dispatch",
        "lattice.acl_check",
        "lattice.random",
        "lattice.randomseed",
    ] {
        lua.unset_named_registry_value(name).ok();
    }
    run.wrote = seen.wrote.get();
    let core = core_cell.into_inner();
    if seen.read.get() && !run.command.is_empty() {
        // Client-side caching: a script that read anything may have read any declared key.
        if let Ok(spec) = crate::dispatch::resolve(core, &run.command) {
            core.remember_keys(conn, spec, &run.command);
        }
    }
    run.rng = rng.into_inner();
    if !matches!(result, Ok(coroutine::Resumed::Suspended)) {
        core.scripts.script_ended();
    }
    Some(match result {
        Err(e) => Reply::Error(internal_error(e), false),
        Ok(coroutine::Resumed::Suspended) => return None,
        Ok(coroutine::Resumed::Returned(value)) => {
            let resp3 = lua.named_registry_value::<i64>("lattice.resp").ok() == Some(3);
            returned(&value, resp3)
        }
        Ok(coroutine::Resumed::Raised(err, line)) => {
            failure_text(&lua, err, line, &run.sha, source_of(run.kind))
        }
    })
}

/// The `redis.call` (or `pcall`, `acl_check_cmd`) that called the running script's runner.
fn take_call(hook: &coroutine::HookState) -> mlua::Result<coroutine::PendingCall> {
    hook.take_call()
        .ok_or_else(|| mlua::Error::runtime("a redis call without its arguments"))
}

/// The script's reply for the value it returned: an error reply for an `{err=...}` table
/// (counted already if it came from a command, see [`COUNTED`]).
fn returned(value: &LuaValue, resp3: bool) -> Reply {
    if let LuaValue::Table(t) = value {
        if let Ok(LuaValue::String(e)) = t.raw_get::<LuaValue>("err") {
            let counted = t.raw_get::<bool>(COUNTED).unwrap_or(false);
            return Reply::Error(e.as_bytes().to_vec(), counted);
        }
    }
    match lua_to_frame(value, 0, resp3) {
        Ok(frame) => Reply::Value(frame),
        Err(e) => Reply::Error(e.into_bytes(), false),
    }
}

/// What a running script may not do.
struct Limits {
    /// EVAL_RO, FCALL_RO or the no-writes flag: no write command, nor any that may replicate.
    read_only: bool,
    /// Over maxmemory at the start without allow-oom: `denyoom` commands are refused until
    /// the script has written (after that it cannot be stopped half-way).
    deny_oom: bool,
}

/// What the commands a script slice called did.
struct Seen {
    /// A write command ran (SCRIPT KILL then refuses).
    wrote: Cell<bool>,
    /// A read-only command ran (client-side caching remembers the declared keys).
    read: Cell<bool>,
}

/// Runs one command for a script: resolution, arity and script restrictions with Redis's
/// errors, then the handler itself.
fn execute(
    core: &mut Core,
    conn: ConnId,
    now: Micros,
    args: &[Bytes],
    limits: &Limits,
    resp: Protocol,
    seen: &Seen,
) -> Result<Frame, String> {
    const UNKNOWN: &str = "ERR Unknown Redis command called from script";
    const ARITY: &str = "ERR Wrong number of args calling Redis command from script";
    let spec = match crate::dispatch::resolve(core, args) {
        Ok(spec) => spec,
        Err(Unresolved::Arity(spec)) => return Err(refused(core, Some(spec), ARITY.into())),
        Err(Unresolved::Command | Unresolved::Subcommand(_)) => {
            return Err(refused(core, None, UNKNOWN.into()))
        }
    };
    if spec.has(Flag::NoScript) {
        let e = "ERR This Redis command is not allowed from script".into();
        return Err(refused(core, Some(spec), e));
    }
    let user = core.clients.get(&conn).and_then(|c| c.user.clone());
    if let Some(denied) = core.acl_denied(user.as_ref(), spec, args) {
        core.acl_log_denied(conn, spec, args, &denied, crate::acl::LogContext::Lua);
        return Err(refused(core, Some(spec), denied.script_message()));
    }
    // As Redis, a read-only script may not run what may replicate either (PUBLISH): that is
    // what lets CLIENT PAUSE WRITE run read-only scripts.
    if limits.read_only && (spec.is_write() || spec.has(Flag::MayReplicate)) {
        let e = "ERR Write commands are not allowed from read-only scripts.".into();
        return Err(refused(core, Some(spec), e));
    }
    if limits.deny_oom && !seen.wrote.get() && spec.has(Flag::DenyOom) {
        return Err(refused(core, Some(spec), crate::ctx::maxmemory::OOM.into()));
    }
    // As Redis, only before the script's first write: after it, stopping half-way would leave
    // part of the script's effects.
    if spec.is_write() && !seen.wrote.get() && !core.enough_replicas() {
        return Err(refused(
            core,
            Some(spec),
            crate::dispatch::NOREPLICAS.into(),
        ));
    }
    if spec.is_write() {
        // As Redis: from the first write command on, SCRIPT KILL can no longer stop the
        // script, whether or not the command changed anything.
        seen.wrote.set(true);
    }
    let mut buf = BytesMut::new();
    let mut sub = Call::new(conn, args, now, ReplyWriter::new(&mut buf, resp));
    sub.in_exec = true;
    sub.in_script = true;
    core.run_handler(spec, &mut sub);
    if spec.has(Flag::ReadOnly) {
        seen.read.set(true);
    }
    if !core.monitors.is_empty() {
        core.feed_monitors(conn, spec, args, crate::cmd::monitor::Source::Script, false);
    }
    if let Some(code) = sub.take_error_for_stats() {
        core.stats.total_error_replies += 1;
        *core.stats.errors.entry(code).or_insert(0) += 1;
    }
    match decode_frame(&mut buf) {
        Ok(Some(frame)) => Ok(frame),
        // A command that wrote nothing (CLIENT REPLY OFF) reads as nil.
        Ok(None) => Ok(Frame::Null),
        Err(_) => Err("ERR internal error: unreadable command reply".into()),
    }
}

/// A command a script called refused before it ran, as Redis's `scriptCall` refuses: the error
/// counts in the error statistics and as a rejected call of the command.
fn refused(core: &mut Core, spec: Option<&'static CommandSpec>, message: String) -> String {
    if let Some(spec) = spec {
        core.stats.commands.entry(spec.name).rejected_calls += 1;
    }
    core.stats.total_error_replies += 1;
    *core
        .stats
        .errors
        .entry(crate::command::error_code(message.as_bytes()))
        .or_insert(0) += 1;
    message
}

/// The error reply for a script that raised `err`, located at `line` of the user's script
/// when known.
fn failure_text(lua: &Lua, err: LuaValue, line: Option<i64>, sha: &str, source: &str) -> Reply {
    // A library function's error gets the script's position, as Lua's luaL_error gives the
    // C libraries' errors in Redis (`user_script:3: Cannot serialise ...`).
    let positioned = match (&err, line) {
        (LuaValue::Error(e), Some(n)) => engine::runtime_message(e)
            .map(|m| format!("{}:{n}: {m}", source.trim_start_matches('@')))
            .and_then(|text| lua.create_string(text).ok()),
        _ => None,
    };
    let err = positioned.map_or(err, LuaValue::String);
    let table = match error_table_of(lua, err) {
        Ok(t) => t,
        Err(e) => return Reply::Error(internal_error(e), false),
    };
    if let Some(line) = line {
        table.raw_set("source", source).ok();
        table.raw_set("line", line).ok();
    }
    error_text(&LuaValue::Table(table), sha)
}

/// The chunk name errors cite: EVAL's script or a function library.
fn source_of(kind: Kind) -> &'static str {
    match kind {
        Kind::Eval => "@user_script",
        Kind::Function => "@user_function",
    }
}

/// `message` with Redis's location suffix when the line is known.
fn located(mut message: Vec<u8>, name: &str, source: &str, line: Option<i64>) -> Vec<u8> {
    if let Some(line) = line {
        message.extend_from_slice(format!(" script: {name}, on {source}:{line}.").as_bytes());
    }
    message
}

/// Turns any error value into an `{err=...}` table (a `redis.call` error, a table raised by
/// the script, or a runtime error's text, which gets the `ERR` code unless it has one).
fn error_table_of(lua: &Lua, err: LuaValue) -> mlua::Result<Table> {
    Ok(match unwrap_call_error(lua, err)? {
        LuaValue::Table(t) => t,
        other => {
            let text = match &other {
                LuaValue::String(s) => s.to_string_lossy(),
                LuaValue::Error(e) => match e.as_ref() {
                    mlua::Error::RuntimeError(m) => m.clone(),
                    mlua::Error::CallbackError { cause, .. } => cause.to_string(),
                    e => e.to_string(),
                },
                v => v.to_string().unwrap_or_default(),
            };
            let t = lua.create_table()?;
            // Errors we raise ourselves already carry a code.
            if text.starts_with("ERR ") {
                t.raw_set("err", text)?;
            } else {
                t.raw_set("err", format!("ERR {text}"))?;
            }
            t
        }
    })
}

/// The error reply for a script that raised: `<err> script: <sha>, on @user_script:<line>.`
fn error_text(err: &LuaValue, sha: &str) -> Reply {
    let LuaValue::Table(t) = err else {
        return Reply::Error(
            b"ERR Error running script: execution failure".to_vec(),
            false,
        );
    };
    let msg: Vec<u8> = match t.raw_get::<LuaValue>("err") {
        Ok(LuaValue::String(s)) => s.as_bytes().to_vec(),
        _ => b"ERR execution failure".to_vec(),
    };
    let source: Option<String> = t.raw_get("source").ok().flatten();
    let line: Option<i64> = t.raw_get("line").ok().flatten();
    let counted = t.raw_get::<bool>(COUNTED).unwrap_or(false);
    let msg = match source {
        Some(source) => located(msg, sha, &source, line),
        None => msg,
    };
    Reply::Error(msg, counted)
}

/// Lua's `math.random` on the per-script generator: `()` a float in [0, 1), `(m)` an integer
/// in [1, m], `(m, n)` one in [m, n].
fn lua_random(rng: &mut ChaCha8Rng, args: MultiValue) -> mlua::Result<f64> {
    let r = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let nums: Vec<f64> = args
        .iter()
        .map(|v| match v {
            LuaValue::Integer(i) => Ok(*i as f64),
            LuaValue::Number(n) => Ok(*n),
            _ => Err(mlua::Error::runtime(
                "bad argument to 'random' (number expected)",
            )),
        })
        .collect::<mlua::Result<_>>()?;
    let (lo, hi) = match nums.as_slice() {
        [] => return Ok(r),
        [m] => (1.0, m.floor()),
        [m, n] => (m.floor(), n.floor()),
        _ => return Err(mlua::Error::runtime("wrong number of arguments")),
    };
    if lo > hi {
        return Err(mlua::Error::runtime(
            "bad argument to 'random' (interval is empty)",
        ));
    }
    Ok((r * (hi - lo + 1.0)).floor() + lo)
}

/// Converts a command's reply into the Lua value a script sees (Redis's documented mapping).
fn frame_to_lua(lua: &Lua, frame: Frame, depth: usize) -> mlua::Result<LuaValue> {
    if depth > MAX_REPLY_DEPTH {
        return Err(mlua::Error::runtime("reached lua stack limit"));
    }
    let single = |key: &str, v: LuaValue| -> mlua::Result<LuaValue> {
        let t = lua.create_table()?;
        t.raw_set(key, v)?;
        Ok(LuaValue::Table(t))
    };
    Ok(match frame {
        Frame::Integer(n) => LuaValue::Integer(n),
        Frame::Bulk(b) => LuaValue::String(lua.create_string(&b)?),
        Frame::Simple(s) => single("ok", LuaValue::String(lua.create_string(&s)?))?,
        // A command's error reply, counted by the statistics already (see COUNTED).
        Frame::Error(e) if depth == 0 => error_table(lua, &e, true)?,
        Frame::Error(e) => single("err", LuaValue::String(lua.create_string(&e)?))?,
        Frame::NullArray => LuaValue::Boolean(false),
        Frame::Null => {
            if lua.named_registry_value::<i64>("lattice.resp")? == 3 {
                LuaValue::Nil
            } else {
                LuaValue::Boolean(false)
            }
        }
        Frame::Array(items) | Frame::Push(items) => {
            let t = lua.create_table()?;
            for (i, f) in items.into_iter().enumerate() {
                t.raw_set(i + 1, frame_to_lua(lua, f, depth + 1)?)?;
            }
            LuaValue::Table(t)
        }
        Frame::Boolean(b) => LuaValue::Boolean(b),
        Frame::Double(d) => single("double", LuaValue::Number(d))?,
        Frame::BigNumber(b) => single("big_number", LuaValue::String(lua.create_string(&b)?))?,
        Frame::Verbatim { format, text } => {
            let t = lua.create_table()?;
            t.raw_set("format", lua.create_string(format)?)?;
            t.raw_set("string", lua.create_string(&text)?)?;
            single("verbatim_string", LuaValue::Table(t))?
        }
        Frame::Map(pairs) => {
            let t = lua.create_table()?;
            for (k, v) in pairs {
                t.raw_set(
                    frame_to_lua(lua, k, depth + 1)?,
                    frame_to_lua(lua, v, depth + 1)?,
                )?;
            }
            single("map", LuaValue::Table(t))?
        }
        Frame::Set(items) => {
            let t = lua.create_table()?;
            for f in items {
                t.raw_set(frame_to_lua(lua, f, depth + 1)?, true)?;
            }
            single("set", LuaValue::Table(t))?
        }
        Frame::Attribute { frame, .. } => frame_to_lua(lua, *frame, depth + 1)?,
    })
}

/// Converts a script's return value into a reply (Redis's documented mapping): numbers are
/// truncated to integers, `false`/`nil` are nil, `{ok=...}` a status, `{err=...}` an error, a
/// table an array of its elements up to the first nil.
pub fn lua_to_frame(v: &LuaValue, depth: usize, resp3: bool) -> Result<Frame, String> {
    if depth > MAX_REPLY_DEPTH {
        return Err("ERR reached lua stack limit".into());
    }
    let bytes = |s: &mlua::LuaString| Bytes::copy_from_slice(&s.as_bytes());
    // As Redis: line breaks in a big number become spaces (they would end the reply line).
    let one_line = |s: &mlua::LuaString| -> Bytes {
        s.as_bytes()
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
            .collect::<Vec<u8>>()
            .into()
    };
    let field = |t: &Table, name: &str| t.raw_get::<LuaValue>(name).unwrap_or(LuaValue::Nil);
    Ok(match v {
        LuaValue::String(s) => Frame::Bulk(bytes(s)),
        LuaValue::Integer(n) => Frame::Integer(*n),
        // As Redis's C cast on x86: a number out of range (or NaN) reads as i64::MIN.
        LuaValue::Number(n)
            if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(n) =>
        {
            Frame::Integer(n.trunc() as i64)
        }
        LuaValue::Number(_) => Frame::Integer(i64::MIN),
        // A script that chose RESP3 (redis.setresp(3)) returns booleans as booleans.
        LuaValue::Boolean(b) if resp3 => Frame::Boolean(*b),
        LuaValue::Boolean(true) => Frame::Integer(1),
        LuaValue::Table(t) => {
            if let LuaValue::String(e) = field(t, "err") {
                return Ok(Frame::Error(bytes(&e)));
            }
            if let LuaValue::String(s) = field(t, "ok") {
                return Ok(Frame::Simple(bytes(&s)));
            }
            match field(t, "double") {
                LuaValue::Number(d) => return Ok(Frame::Double(d)),
                LuaValue::Integer(d) => return Ok(Frame::Double(d as f64)),
                _ => {}
            }
            if let LuaValue::String(s) = field(t, "big_number") {
                return Ok(Frame::BigNumber(one_line(&s)));
            }
            if let LuaValue::Table(v) = field(t, "verbatim_string") {
                if let (LuaValue::String(format), LuaValue::String(text)) =
                    (field(&v, "format"), field(&v, "string"))
                {
                    let mut f = [b' '; 3];
                    for (d, s) in f.iter_mut().zip(format.as_bytes().iter()) {
                        *d = *s;
                    }
                    return Ok(Frame::Verbatim {
                        format: f,
                        text: bytes(&text),
                    });
                }
            }
            if let LuaValue::Table(m) = field(t, "map") {
                let mut pairs = Vec::new();
                for pair in m.pairs::<LuaValue, LuaValue>() {
                    let (k, v) = pair.map_err(|e| e.to_string())?;
                    pairs.push((
                        lua_to_frame(&k, depth + 1, resp3)?,
                        lua_to_frame(&v, depth + 1, resp3)?,
                    ));
                }
                return Ok(Frame::Map(pairs));
            }
            if let LuaValue::Table(set) = field(t, "set") {
                let mut items = Vec::new();
                for pair in set.pairs::<LuaValue, LuaValue>() {
                    let (k, _) = pair.map_err(|e| e.to_string())?;
                    items.push(lua_to_frame(&k, depth + 1, resp3)?);
                }
                return Ok(Frame::Set(items));
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<LuaValue>(i) {
                    Ok(LuaValue::Nil) | Err(_) => break,
                    Ok(item) => items.push(lua_to_frame(&item, depth + 1, resp3)?),
                }
            }
            Frame::Array(items)
        }
        _ => Frame::Null,
    })
}

/// Writes a frame with the writer's protocol (RESP3 types degrade in RESP2).
fn write_frame(out: &mut ReplyWriter, f: &Frame) {
    match f {
        Frame::Simple(s) => out.simple(s),
        Frame::Error(e) => out.error(e),
        Frame::Integer(n) => out.integer(*n),
        Frame::Bulk(b) => out.bulk(b),
        Frame::Null => out.null(),
        Frame::NullArray => out.null_array(),
        Frame::Array(items) | Frame::Push(items) => {
            out.array_len(items.len());
            for i in items {
                write_frame(out, i);
            }
        }
        Frame::Boolean(b) => out.boolean(*b),
        Frame::Double(d) => out.double(*d),
        Frame::BigNumber(b) => out.big_number(b),
        Frame::Verbatim { format, text } => out.verbatim(format, text),
        Frame::Map(pairs) => {
            out.map_len(pairs.len());
            for (k, v) in pairs {
                write_frame(out, k);
                write_frame(out, v);
            }
        }
        Frame::Set(items) => {
            out.set_len(items.len());
            for i in items {
                write_frame(out, i);
            }
        }
        Frame::Attribute { frame, .. } => write_frame(out, frame),
    }
}

fn script_load(core: &mut Core, call: &mut Call) {
    match core.scripts.load(call.arg(2)) {
        Ok(sha) => call.out.bulk(sha.as_bytes()),
        Err(e) => call.error(&e),
    }
}

fn script_exists(core: &mut Core, call: &mut Call) {
    call.out.array_len(call.argc() - 2);
    for arg in &call.args[2..] {
        let sha = String::from_utf8_lossy(arg).to_ascii_lowercase();
        call.out
            .integer(core.scripts.cache.contains_key(&sha) as i64);
    }
}

fn script_flush(core: &mut Core, call: &mut Call) {
    match call.argc() {
        2 => {}
        3 if is(call.arg(2), "sync") || is(call.arg(2), "async") => {}
        _ => return call.error("ERR SCRIPT FLUSH only support SYNC|ASYNC option"),
    }
    core.scripts.flush();
    call.ok();
}

/// SCRIPT KILL: stops the suspended script unless it already wrote (its effects cannot be
/// undone; Redis answers UNKILLABLE and only SHUTDOWN NOSAVE gets out). Only a script past
/// busy-reply-threshold can be seen running: before that, this request waits behind it.
fn script_kill(core: &mut Core, call: &mut Call) {
    kill(core, call, Kind::Eval);
}

/// SCRIPT KILL (`kind` Eval) and FUNCTION KILL (Function): each stops only its own kind.
pub(crate) fn kill(core: &mut Core, call: &mut Call, kind: Kind) {
    match core.scripts.running.as_mut() {
        None => call.error("NOTBUSY No scripts in execution right now."),
        Some(run) if run.wrote => call.error(
            "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.",
        ),
        Some(run) if run.kind != kind => call.error(engine::busy_message(run.kind)),
        Some(run) => {
            run.killed = true;
            call.ok();
        }
    }
}

fn script_debug(_core: &mut Core, call: &mut Call) {
    call.error("ERR SCRIPT DEBUG is not supported by this server");
}

fn script_help(_core: &mut Core, call: &mut Call) {
    let lines: &[&str] = &[
        "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "EXISTS <sha1> [<sha1> ...]",
        "    Return information about the existence of the scripts in the script cache.",
        "FLUSH [ASYNC|SYNC]",
        "    Flush the Lua scripts cache.",
        "KILL",
        "    Kill the currently executing Lua script.",
        "LOAD <script>",
        "    Load a script into the scripts cache without executing it.",
        "HELP",
        "    Print this help.",
    ];
    call.out.array_len(lines.len());
    for l in lines {
        call.out.simple(l.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_like_lua() {
        assert_eq!(lua_number_text(3.0), "3");
        assert_eq!(lua_number_text(-2.5), "-2.5");
        assert_eq!(lua_number_text(0.1), "0.1");
        assert_eq!(lua_number_text(1e20), "1e+20");
        assert_eq!(lua_number_text(1.5e-7), "1.5e-07");
        assert_eq!(lua_number_text(123456789012.5), "123456789012.5");
        assert_eq!(lua_number_text(1.0 / 3.0), "0.33333333333333");
    }

    #[test]
    fn replies_convert_both_ways() {
        let lua = Lua::new();
        lua.set_named_registry_value("lattice.resp", 2).unwrap();
        let f = Frame::Array(vec![
            Frame::Integer(7),
            Frame::Bulk(Bytes::from_static(b"x")),
            Frame::Null,
            Frame::Simple(Bytes::from_static(b"OK")),
            Frame::Error(Bytes::from_static(b"ERR bad")),
        ]);
        let v = frame_to_lua(&lua, f, 0).unwrap();
        let LuaValue::Table(t) = &v else { panic!() };
        assert_eq!(t.raw_get::<i64>(1).unwrap(), 7);
        assert_eq!(t.raw_get::<String>(2).unwrap(), "x");
        assert!(!t.raw_get::<bool>(3).unwrap());
        let ok: Table = t.raw_get(4).unwrap();
        assert_eq!(ok.raw_get::<String>("ok").unwrap(), "OK");
        // And back: `false` becomes a nil reply.
        let back = lua_to_frame(&v, 0, false).unwrap();
        assert_eq!(
            back,
            Frame::Array(vec![
                Frame::Integer(7),
                Frame::Bulk(Bytes::from_static(b"x")),
                Frame::Null,
                Frame::Simple(Bytes::from_static(b"OK")),
                Frame::Error(Bytes::from_static(b"ERR bad")),
            ])
        );
        // Numbers truncate; true is 1; nil ends an array.
        let t = lua.create_table().unwrap();
        t.raw_set(1, 3.9).unwrap();
        t.raw_set(2, true).unwrap();
        t.raw_set(4, "unreached").unwrap();
        assert_eq!(
            lua_to_frame(&LuaValue::Table(t), 0, false).unwrap(),
            Frame::Array(vec![Frame::Integer(3), Frame::Integer(1)])
        );
        // A table containing itself is refused, not followed forever.
        let t = lua.create_table().unwrap();
        t.raw_set(1, t.clone()).unwrap();
        assert!(lua_to_frame(&LuaValue::Table(t), 0, false).is_err());
    }

    #[test]
    fn scripts_can_be_suspended_on_this_interpreter() {
        // The mirror of Lua's state layout matched: long scripts run in slices instead of
        // being bounded by the instruction budget alone.
        assert!(Scripts::new().can_suspend);
    }

    #[test]
    fn sha1_matches_known_vectors() {
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
    }
}

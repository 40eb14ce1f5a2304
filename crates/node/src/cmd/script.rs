//! Server-side Lua scripting: EVAL, EVALSHA (and their `_RO` forms) and SCRIPT.
//!
//! Lua 5.1, as in Redis, built from source (`mlua` with `vendored`). One interpreter per node,
//! created with the node and kept for its life; compiled scripts are cached by the SHA-1 of
//! their body, so EVALSHA works after EVAL or SCRIPT LOAD, until SCRIPT FLUSH.
//!
//! Determinism and purity: the interpreter has no `io`, `os`, `package`, `debug`, `loadfile`,
//! `dofile` or `print`; `math.random` draws from a generator seeded per script from the node's
//! seeded RNG. Globals are read-only to scripts (reading an undefined one is an error), as in
//! Redis.
//!
//! `redis.call` / `redis.pcall` run commands through the same handlers as clients, with
//! `Core::run_handler` (so replication captures each command's effect and keyspace events
//! fire), marked as inside EXEC so that blocking commands answer at once. A script is atomic
//! because the node runs one input at a time.
//!
//! Bounds: a script runs at most [`INSTRUCTION_BUDGET`] Lua VM instructions and may hold at
//! most [`MEMORY_LIMIT_BYTES`] of Lua memory; past either it is stopped with an error. Redis
//! instead lets a script run forever, answering BUSY to other clients until SCRIPT KILL; the
//! node cannot serve other inputs in the middle of a handler, so a bound is what keeps a
//! runaway script from hanging it (see docs/ARCHITECTURE.md §13). The script cache is bounded
//! too ([`MAX_CACHED_SCRIPTS`], [`MAX_CACHED_BYTES`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use lattice_resp::{decode_frame, Frame, Protocol, ReplyWriter};
use mlua::{
    Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value as LuaValue, VmState,
};
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::args::{is, parse_i64, NOT_INTEGER};
use crate::client::ConnId;
use crate::command::{find_subcommand, spec, Call, CommandSpec};
use crate::node::{Core, Micros};

const SCRIPTING: &str = "scripting";

/// Lua VM instructions between two checks of the budget: cheap enough to be invisible
/// (one callback per 10,000 instructions) and fine enough to stop a loop promptly.
const HOOK_STEP: u32 = 10_000;
/// Instructions one script may execute: about two seconds of a tight loop on a current core.
/// Chosen to be far above what a legitimate script does inside one atomic step.
pub const INSTRUCTION_BUDGET: u64 = 500_000_000;
/// Lua heap limit: a script building huge tables gets an error instead of exhausting memory.
pub const MEMORY_LIMIT_BYTES: usize = 512 << 20;
/// Cached scripts at most, and their total source size: SCRIPT LOAD / EVAL of ever-new
/// bodies cannot grow the node without bound.
pub const MAX_CACHED_SCRIPTS: usize = 100_000;
pub const MAX_CACHED_BYTES: usize = 256 << 20;
/// Nesting depth of a Lua table converted to a reply (a table containing itself would
/// otherwise recurse forever).
const MAX_REPLY_DEPTH: usize = 1000;

const KILLED: &str = "ERR Script exceeded its execution budget and was stopped (a script may run at most 500000000 Lua instructions)";

/// The interpreter and the script cache of one node.
pub struct Scripts {
    lua: Lua,
    cache: BTreeMap<String, Cached>,
    cache_bytes: usize,
    /// Budget checks done by the running script (in units of [`HOOK_STEP`] instructions).
    steps: Arc<AtomicU64>,
    /// Set once the running script is over budget: every later check fails, and the wrapped
    /// `pcall`/`xpcall` re-raise, so the script cannot swallow its own stop.
    killed: Arc<AtomicBool>,
}

struct Cached {
    body: Bytes,
    func: Function,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts::new()
    }
}

/// Lua run once at start-up, after the `redis` table exists: wraps `redis.call` so that an
/// error reply raises, keeps raw `xpcall` for the runner, makes `pcall`/`xpcall` re-raise a
/// budget stop, and protects globals.
const PRELUDE: &str = r#"
local rawpcall, rawxpcall, killed, kill_message = pcall, xpcall, __lattice_killed, __lattice_kill_message
local unwrap = __lattice_unwrap
__lattice_killed = nil
__lattice_kill_message = nil
__lattice_unwrap = nil
local function checked(ok, ...)
  if killed() then error(kill_message, 0) end
  if not ok then return false, unwrap(...) end
  return ok, ...
end
pcall = function(...) return checked(rawpcall(...)) end
xpcall = function(f, h)
  return checked(rawxpcall(f, function(e) return h(unwrap(e)) end))
end
__lattice_run = function(f, handler) return rawxpcall(f, handler) end
local mt = {}
mt.__index = function(_, name)
  error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
end
mt.__newindex = function(_, name)
  error("Script attempted to create global variable '" .. tostring(name) .. "'", 2)
end
setmetatable(_G, mt)
"#;

impl Scripts {
    pub fn new() -> Scripts {
        Scripts::build().expect("the Lua interpreter starts")
    }

    fn build() -> mlua::Result<Scripts> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )?;
        lua.set_memory_limit(MEMORY_LIMIT_BYTES)?;
        let g = lua.globals();
        for name in ["loadfile", "dofile", "print", "gcinfo", "newproxy"] {
            g.raw_set(name, LuaValue::Nil)?;
        }
        let steps = Arc::new(AtomicU64::new(0));
        let killed = Arc::new(AtomicBool::new(false));
        let k = killed.clone();
        g.raw_set(
            "__lattice_killed",
            lua.create_function(move |_, ()| Ok(k.load(Ordering::Relaxed)))?,
        )?;
        g.raw_set("__lattice_kill_message", KILLED)?;
        g.raw_set(
            "__lattice_unwrap",
            lua.create_function(|lua, v: LuaValue| unwrap_call_error(lua, v))?,
        )?;

        let redis = lua.create_table()?;
        // Dispatches to the running script's command runner (a scoped function registered for
        // the duration of each script).
        redis.raw_set(
            "pcall",
            lua.create_function(|lua, args: MultiValue| {
                let f: Function = lua.named_registry_value("lattice.dispatch")?;
                f.call::<LuaValue>(args)
            })?,
        )?;
        // A Rust function, not a Lua wrapper: a Lua function called as `return redis.call(..)`
        // would be a tail call and take the script's frame (and line number) with it.
        redis.raw_set(
            "call",
            lua.create_function(|lua, args: MultiValue| {
                let f: Function = lua.named_registry_value("lattice.dispatch")?;
                let r = f.call::<LuaValue>(args)?;
                if let LuaValue::Table(t) = &r {
                    if let Ok(LuaValue::String(e)) = t.raw_get::<LuaValue>("err") {
                        return Err(mlua::Error::external(CallError(e.to_string_lossy())));
                    }
                }
                Ok(r)
            })?,
        )?;
        redis.raw_set(
            "sha1hex",
            lua.create_function(|_, s: mlua::LuaString| Ok(sha1_hex(&s.as_bytes())))?,
        )?;
        redis.raw_set(
            "error_reply",
            lua.create_function(|lua, s: mlua::LuaString| {
                let t = lua.create_table()?;
                t.raw_set("err", s)?;
                Ok(t)
            })?,
        )?;
        redis.raw_set(
            "status_reply",
            lua.create_function(|lua, s: mlua::LuaString| {
                let t = lua.create_table()?;
                t.raw_set("ok", s)?;
                Ok(t)
            })?,
        )?;
        // Logging goes nowhere: the node has no log sink (and no IO).
        redis.raw_set("log", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
        redis.raw_set(
            "setresp",
            lua.create_function(|lua, v: i64| {
                if v != 2 && v != 3 {
                    return Err(mlua::Error::runtime("RESP version must be 2 or 3."));
                }
                lua.set_named_registry_value("lattice.resp", v)
            })?,
        )?;
        // Effects are always replicated (each command's effect is captured); these exist for
        // scripts written for older servers.
        redis.raw_set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
        redis.raw_set("set_repl", lua.create_function(|_, _: i64| Ok(()))?)?;
        for (name, v) in [
            ("LOG_DEBUG", 0),
            ("LOG_VERBOSE", 1),
            ("LOG_NOTICE", 2),
            ("LOG_WARNING", 3),
            ("REPL_NONE", 0),
            ("REPL_AOF", 1),
            ("REPL_SLAVE", 2),
            ("REPL_REPLICA", 2),
            ("REPL_ALL", 3),
        ] {
            redis.raw_set(name, v)?;
        }
        g.raw_set("redis", redis)?;
        // math.random / randomseed come from the per-script generator (registered per run).
        let math: Table = g.raw_get("math")?;
        math.raw_set(
            "random",
            lua.create_function(|lua, args: MultiValue| {
                let f: Function = lua.named_registry_value("lattice.random")?;
                f.call::<LuaValue>(args)
            })?,
        )?;
        math.raw_set(
            "randomseed",
            lua.create_function(|lua, args: MultiValue| {
                let f: Function = lua.named_registry_value("lattice.randomseed")?;
                f.call::<()>(args)
            })?,
        )?;
        lua.load(PRELUDE).set_name("=prelude").exec()?;

        let (s, kk) = (steps.clone(), killed.clone());
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_STEP),
            move |_, _| {
                let n = s.fetch_add(1, Ordering::Relaxed) + 1;
                if n.saturating_mul(HOOK_STEP as u64) > INSTRUCTION_BUDGET {
                    kk.store(true, Ordering::Relaxed);
                    return Err(mlua::Error::runtime(KILLED));
                }
                Ok(VmState::Continue)
            },
        )?;
        Ok(Scripts {
            lua,
            cache: BTreeMap::new(),
            cache_bytes: 0,
            steps,
            killed,
        })
    }

    /// Number of cached scripts (INFO, tests).
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Compiles `body` and caches it under its SHA-1 (a no-op if cached). Returns the SHA-1,
    /// or the error reply (compile error, cache full).
    fn load(&mut self, body: &[u8]) -> Result<String, String> {
        let sha = sha1_hex(body);
        if self.cache.contains_key(&sha) {
            return Ok(sha);
        }
        if self.cache.len() >= MAX_CACHED_SCRIPTS
            || self.cache_bytes + body.len() > MAX_CACHED_BYTES
        {
            return Err("ERR script cache is full: SCRIPT FLUSH to make room".into());
        }
        let func = self
            .lua
            .load(body)
            .set_name("@user_script")
            .into_function()
            .map_err(|e| {
                let text = match &e {
                    mlua::Error::SyntaxError { message, .. } => message.clone(),
                    other => other.to_string(),
                };
                format!("ERR Error compiling script (new function): {text}")
            })?;
        self.cache_bytes += body.len();
        self.cache.insert(
            sha.clone(),
            Cached {
                body: Bytes::copy_from_slice(body),
                func,
            },
        );
        Ok(sha)
    }

    fn flush(&mut self) {
        self.cache.clear();
        self.cache_bytes = 0;
        self.lua.gc_collect().ok();
    }

    /// The cached body of `sha` (tests, SCRIPT EXISTS).
    pub fn body(&self, sha: &str) -> Option<&Bytes> {
        self.cache.get(sha).map(|c| &c.body)
    }
}

/// SHA-1 of `data` in lowercase hex, as `redis.sha1hex` and script IDs use it.
pub fn sha1_hex(data: &[u8]) -> String {
    sha1_smol::Sha1::from(data).digest().to_string()
}

// One line per command reads best as a table.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    spec("eval", -3, &["noscript", "skip-monitor", "may-replicate", "no-mandatory-keys", "stale", "movablekeys"], (0, 0, 0), SCRIPTING, "2.6.0", "Execute a Lua script server side", eval),
    spec("evalsha", -3, &["noscript", "skip-monitor", "may-replicate", "no-mandatory-keys", "stale", "movablekeys"], (0, 0, 0), SCRIPTING, "2.6.0", "Execute a Lua script server side", evalsha),
    spec("eval_ro", -3, &["noscript", "skip-monitor", "no-mandatory-keys", "stale", "readonly", "movablekeys"], (0, 0, 0), SCRIPTING, "7.0.0", "Execute a read-only Lua script server side", eval_ro),
    spec("evalsha_ro", -3, &["noscript", "skip-monitor", "no-mandatory-keys", "stale", "readonly", "movablekeys"], (0, 0, 0), SCRIPTING, "7.0.0", "Execute a read-only Lua script server side", evalsha_ro),
    CommandSpec {
        name: "script",
        arity: -2,
        flags: &[],
        keys: (0, 0, 0),
        group: SCRIPTING,
        summary: "A container for Lua scripts management commands",
        since: "2.6.0",
        handler: None,
        subcommands: &[
            spec("script|load", 3, &["noscript", "stale"], (0, 0, 0), SCRIPTING, "2.6.0", "Load the specified Lua script into the script cache.", script_load),
            spec("script|exists", -3, &["noscript"], (0, 0, 0), SCRIPTING, "2.6.0", "Check existence of scripts in the script cache.", script_exists),
            spec("script|flush", -2, &["noscript"], (0, 0, 0), SCRIPTING, "2.6.0", "Remove all the scripts from the script cache.", script_flush),
            spec("script|kill", 2, &["noscript", "allow-busy"], (0, 0, 0), SCRIPTING, "2.6.0", "Kill the script currently in execution.", script_kill),
            spec("script|debug", 3, &["noscript"], (0, 0, 0), SCRIPTING, "3.2.0", "Set the debug mode for executed scripts.", script_debug),
            spec("script|help", 2, &["loading", "stale"], (0, 0, 0), SCRIPTING, "5.0.0", "Show helpful text about the different subcommands", script_help),
        ],
    },
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
    let split = 3 + numkeys as usize;
    let (keys, argv) = (&call.args[3..split], &call.args[split..]);
    let seed = core.random_u64();
    let outcome = run_script(core, call.conn, call.now, &sha, keys, argv, read_only, seed);
    match outcome {
        Ok(frame) => write_frame(&mut call.out, &frame),
        Err(message) => call.error_bytes(&message),
    }
}

/// An error reply raised by `redis.call`; scripts catching it with `pcall` see `{err=...}`.
#[derive(Debug)]
struct CallError(String);

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CallError {}

/// The text of a `redis.call` error inside `e`, however mlua wrapped it on the way.
fn call_error_text(e: &mlua::Error) -> Option<String> {
    match e {
        mlua::Error::CallbackError { cause, .. } => call_error_text(cause),
        mlua::Error::ExternalError(inner) => inner.downcast_ref::<CallError>().map(|c| c.0.clone()),
        mlua::Error::WithContext { cause, .. } => call_error_text(cause),
        _ => None,
    }
}

/// Turns a raised `redis.call` error back into the `{err=...}` table Redis scripts catch.
fn unwrap_call_error(lua: &Lua, v: LuaValue) -> mlua::Result<LuaValue> {
    if let LuaValue::Error(e) = &v {
        if let Some(text) = call_error_text(e) {
            return error_table(lua, text.as_bytes());
        }
    }
    Ok(v)
}

/// Runs the cached script `sha`; the reply as a frame, or an error reply's text.
#[allow(clippy::too_many_arguments)]
fn run_script(
    core: &mut Core,
    conn: ConnId,
    now: Micros,
    sha: &str,
    keys: &[Bytes],
    argv: &[Bytes],
    read_only: bool,
    seed: u64,
) -> Result<Frame, Vec<u8>> {
    let lua = core.scripts.lua.clone();
    let func = core.scripts.cache[sha].func.clone();
    core.scripts.steps.store(0, Ordering::Relaxed);
    core.scripts.killed.store(false, Ordering::Relaxed);
    let internal = |e: mlua::Error| format!("ERR internal scripting error: {e}").into_bytes();
    let setup = (|| -> mlua::Result<()> {
        let g = lua.globals();
        g.raw_set(
            "KEYS",
            lua.create_sequence_from(keys.iter().map(|k| lua.create_string(k).expect("string")))?,
        )?;
        g.raw_set(
            "ARGV",
            lua.create_sequence_from(argv.iter().map(|k| lua.create_string(k).expect("string")))?,
        )?;
        lua.set_named_registry_value("lattice.resp", 2)
    })();
    setup.map_err(internal)?;
    let core_cell = std::cell::RefCell::new(core);
    let rng = std::cell::RefCell::new(ChaCha8Rng::seed_from_u64(seed));
    let result = lua.scope(|scope| {
        let dispatch = scope.create_function(|lua, args: MultiValue| {
            let resp = match lua.named_registry_value::<i64>("lattice.resp")? {
                3 => Protocol::Resp3,
                _ => Protocol::Resp2,
            };
            let argv = match lua_args(args) {
                Ok(a) => a,
                Err(e) => return error_table(lua, e.as_bytes()),
            };
            let mut core = core_cell
                .try_borrow_mut()
                .map_err(|_| mlua::Error::runtime("redis.call is not reentrant"))?;
            match execute(&mut core, conn, now, &argv, read_only, resp) {
                Ok(frame) => frame_to_lua(lua, frame, 0),
                Err(e) => error_table(lua, e.as_bytes()),
            }
        })?;
        let random =
            scope.create_function(|_, args: MultiValue| lua_random(&mut rng.borrow_mut(), args))?;
        let randomseed = scope.create_function(|_, s: f64| {
            *rng.borrow_mut() = ChaCha8Rng::seed_from_u64(s as i64 as u64);
            Ok(())
        })?;
        lua.set_named_registry_value("lattice.dispatch", dispatch)?;
        lua.set_named_registry_value("lattice.random", random)?;
        lua.set_named_registry_value("lattice.randomseed", randomseed)?;
        let handler = scope.create_function(|lua, err: LuaValue| error_handler(lua, err))?;
        let run: Function = lua.globals().raw_get("__lattice_run")?;
        let (ok, value): (bool, LuaValue) = run.call((func.clone(), handler))?;
        Ok(if ok {
            lua_to_frame(&value, 0).map_err(String::into_bytes)
        } else {
            Err(error_text(&value, sha))
        })
    });
    for name in ["lattice.dispatch", "lattice.random", "lattice.randomseed"] {
        lua.unset_named_registry_value(name).ok();
    }
    result.unwrap_or_else(|e| Err(internal(e)))
}

/// The arguments of `redis.call`: strings and numbers only, as Redis requires.
fn lua_args(args: MultiValue) -> Result<Vec<Bytes>, &'static str> {
    if args.is_empty() {
        return Err("ERR Please specify at least one argument for this redis lib call");
    }
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        match a {
            LuaValue::String(s) => out.push(Bytes::copy_from_slice(&s.as_bytes())),
            LuaValue::Integer(i) => out.push(Bytes::from(i.to_string())),
            LuaValue::Number(n) => out.push(Bytes::from(lua_number_text(n))),
            _ => return Err("ERR Lua redis lib command arguments must be strings or integers"),
        }
    }
    Ok(out)
}

/// Runs one command for a script: resolution, arity and script restrictions with Redis's
/// errors, then the handler itself.
fn execute(
    core: &mut Core,
    conn: ConnId,
    now: Micros,
    args: &[Bytes],
    read_only: bool,
    resp: Protocol,
) -> Result<Frame, String> {
    const UNKNOWN: &str = "ERR Unknown Redis command called from script";
    const ARITY: &str = "ERR Wrong number of args calling Redis command from script";
    let Some(spec) = core.table.find(&args[0]) else {
        return Err(UNKNOWN.into());
    };
    let spec = if !spec.subcommands.is_empty() && (spec.handler.is_none() || args.len() >= 2) {
        if args.len() < 2 {
            return Err(ARITY.into());
        }
        find_subcommand(spec, &args[1]).ok_or(UNKNOWN)?
    } else {
        spec
    };
    if !spec.arity_ok(args.len()) {
        return Err(ARITY.into());
    }
    if spec.flags.contains(&"noscript") {
        return Err("ERR This Redis command is not allowed from script".into());
    }
    if read_only && spec.is_write() {
        return Err("ERR Write commands are not allowed from read-only scripts.".into());
    }
    let mut buf = BytesMut::new();
    let mut sub = Call::new(conn, args, now, ReplyWriter::new(&mut buf, resp));
    sub.in_exec = true;
    core.run_handler(spec, &mut sub);
    if let Some(code) = sub.error_code.take() {
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

fn error_table(lua: &Lua, message: &[u8]) -> mlua::Result<LuaValue> {
    let t = lua.create_table()?;
    let text = message.strip_prefix(b"-").unwrap_or(message);
    t.raw_set("err", lua.create_string(text)?)?;
    Ok(LuaValue::Table(t))
}

/// The `xpcall` handler: turns any error into an `{err=...}` table and records where in the
/// user's script it happened.
fn error_handler(lua: &Lua, err: LuaValue) -> mlua::Result<LuaValue> {
    let t = match unwrap_call_error(lua, err)? {
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
    };
    for level in 0..64 {
        let found = lua.inspect_stack(level, |d| {
            let src = d.source();
            (src.source.as_deref() == Some("@user_script")).then(|| d.current_line())
        });
        match found {
            None => break,
            Some(None) => continue,
            Some(Some(line)) => {
                t.raw_set("source", "@user_script")?;
                if let Some(line) = line {
                    t.raw_set("line", line as i64)?;
                }
                break;
            }
        }
    }
    Ok(LuaValue::Table(t))
}

/// The error reply for a script that raised: `<err> script: <sha>, on @user_script:<line>.`
fn error_text(err: &LuaValue, sha: &str) -> Vec<u8> {
    let LuaValue::Table(t) = err else {
        return b"ERR Error running script: execution failure".to_vec();
    };
    let msg: Vec<u8> = match t.raw_get::<LuaValue>("err") {
        Ok(LuaValue::String(s)) => s.as_bytes().to_vec(),
        _ => b"ERR execution failure".to_vec(),
    };
    let source: Option<String> = t.raw_get("source").ok().flatten();
    let line: Option<i64> = t.raw_get("line").ok().flatten();
    let mut out = msg;
    if let (Some(source), Some(line)) = (source, line) {
        out.extend_from_slice(format!(" script: {sha}, on {source}:{line}.").as_bytes());
    }
    out
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

/// A Lua 5.1 number as `tostring` prints it (`%.14g`).
pub fn lua_number_text(n: f64) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if n.is_infinite() {
        return if n < 0.0 { "-inf" } else { "inf" }.into();
    }
    if n == 0.0 {
        return if n.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{n:.13e}");
    let (mantissa, exp) = sci.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("exponent");
    if !(-4..14).contains(&exp) {
        let m = trim_fraction(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", exp.abs());
    }
    let decimals = (13 - exp).max(0) as usize;
    trim_fraction(&format!("{n:.decimals$}")).to_string()
}

fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
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
pub fn lua_to_frame(v: &LuaValue, depth: usize) -> Result<Frame, String> {
    if depth > MAX_REPLY_DEPTH {
        return Err("ERR reached lua stack limit".into());
    }
    Ok(match v {
        LuaValue::String(s) => Frame::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        LuaValue::Integer(n) => Frame::Integer(*n),
        LuaValue::Number(n) => {
            Frame::Integer(n.trunc().clamp(i64::MIN as f64, i64::MAX as f64) as i64)
        }
        LuaValue::Boolean(true) => Frame::Integer(1),
        LuaValue::Table(t) => {
            if let Ok(LuaValue::String(e)) = t.raw_get::<LuaValue>("err") {
                return Ok(Frame::Error(Bytes::copy_from_slice(&e.as_bytes())));
            }
            if let Ok(LuaValue::String(s)) = t.raw_get::<LuaValue>("ok") {
                return Ok(Frame::Simple(Bytes::copy_from_slice(&s.as_bytes())));
            }
            if let Ok(LuaValue::Number(d)) = t.raw_get::<LuaValue>("double") {
                return Ok(Frame::Double(d));
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<LuaValue>(i) {
                    Ok(LuaValue::Nil) | Err(_) => break,
                    Ok(item) => items.push(lua_to_frame(&item, depth + 1)?),
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

/// A script runs inside one input of the node, so no other command can ever observe one in
/// progress: there is never anything to kill.
fn script_kill(_core: &mut Core, call: &mut Call) {
    call.error("NOTBUSY No scripts in execution right now.");
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
        let back = lua_to_frame(&v, 0).unwrap();
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
            lua_to_frame(&LuaValue::Table(t), 0).unwrap(),
            Frame::Array(vec![Frame::Integer(3), Frame::Integer(1)])
        );
        // A table containing itself is refused, not followed forever.
        let t = lua.create_table().unwrap();
        t.raw_set(1, t.clone()).unwrap();
        assert!(lua_to_frame(&LuaValue::Table(t), 0).is_err());
    }

    #[test]
    fn sha1_matches_known_vectors() {
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
    }
}

//! The Lua interpreter of one node and its script cache: building the sandbox, compiling and
//! caching scripts, starting one as a coroutine. Nothing here runs a command; that is the
//! EVAL handler's job (`super`), so the command context can own the interpreter without
//! depending on the scripting commands.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Thread, Value as LuaValue};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::coroutine;
use crate::client::ConnId;
use crate::time::Micros;

pub(crate) use super::basics::HOOK_STEP;
pub use super::basics::{INSTRUCTION_BUDGET, REDIS_VERSION, REDIS_VERSION_NUM};

/// Instructions in one slice of a script: a few milliseconds of a tight loop, so a long script
/// notices SCRIPT KILL and lets BUSY replies out within milliseconds, while a short script
/// (nearly every one) finishes inside its first slice, in the EVAL handler itself.
pub const SLICE_INSTRUCTIONS: u64 = 1_000_000;
/// Lua heap limit: a script building huge tables gets an error instead of exhausting memory.
pub const MEMORY_LIMIT_BYTES: usize = 512 << 20;
/// Cached scripts at most, and their total source size: SCRIPT LOAD / EVAL of ever-new
/// bodies cannot grow the node without bound.
pub const MAX_CACHED_SCRIPTS: usize = 100_000;
pub const MAX_CACHED_BYTES: usize = 256 << 20;
/// The interpreter and the script cache of one node.
pub struct Scripts {
    pub(crate) lua: Lua,
    pub(crate) cache: BTreeMap<String, Cached>,
    pub(crate) cache_bytes: usize,
    /// Shared with the count hook (which finds it through the registry).
    pub(crate) hook: Arc<coroutine::HookState>,
    /// The start-up check of the coroutine machinery passed: scripts may be suspended.
    pub(crate) can_suspend: bool,
    /// The script in progress between two slices, if any.
    pub(crate) running: Option<Running>,
    /// FUNCTION's libraries, on the same interpreter.
    pub(crate) libraries: crate::cmd::function::library::Libraries,
}

/// What is running: an EVAL script or a function (FCALL). SCRIPT KILL stops only the first,
/// FUNCTION KILL only the second, as in Redis.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Eval,
    Function,
}

/// A script suspended between two slices, and what the node needs to finish it.
pub(crate) struct Running {
    pub(crate) thread: Thread,
    /// The connection that sent EVAL: it gets the reply when the script ends, and its later
    /// requests wait until then.
    pub(crate) caller: ConnId,
    /// The script's SHA-1, or the function's name: errors name it.
    pub(crate) sha: String,
    pub(crate) kind: Kind,
    /// The command that started it (FUNCTION STATS shows it).
    pub(crate) command: Vec<Bytes>,
    pub(crate) read_only: bool,
    pub(crate) rng: ChaCha8Rng,
    /// The node's time when the script started: commands inside it see this time, and
    /// busy-reply-threshold counts from it.
    pub(crate) started: Micros,
    /// A write command ran: SCRIPT KILL refuses, since the effects cannot be undone.
    pub(crate) wrote: bool,
    /// SCRIPT KILL accepted: the script ends instead of running its next slice.
    pub(crate) killed: bool,
    /// Past busy-reply-threshold: other clients get BUSY.
    pub(crate) timed_out: bool,
    /// The caller asked for no reply (CLIENT REPLY OFF or SKIP).
    pub(crate) silent: bool,
    /// The caller overflowed the requests held back for it: closed once the script ends.
    pub(crate) close_caller: bool,
}

pub(crate) struct Cached {
    pub(crate) body: Bytes,
    pub(crate) func: Function,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts::new()
    }
}

/// Lua run once at start-up, after the `redis` table exists: wraps `redis.call` so that an
/// error reply raises, keeps raw `xpcall` for the runner, makes `pcall`/`xpcall` re-raise a
/// budget stop, and makes globals read-only.
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
-- Lua 5.1's unpack computes its result count in a C int: a huge range overflows it and
-- crashes the process. Ranges of 8000 or more results (Lua's C stack limit) are refused first.
local raw_unpack, tonum, typ = unpack, tonumber, type
unpack = function(...)
  local t, i, j = ...
  if typ(t) == "table" then
    local lo, hi = tonum(i) or 1, tonum(j) or #t
    if hi - lo >= 8000 then error("too many results to unpack", 2) end
  end
  return raw_unpack(...)
end
-- Read-only globals, as Redis 7.0's read-only tables: the globals table and the library
-- tables a script sees are empty proxies over the real ones; writing to them, changing their
-- metatables (or the string metatable) or rawset on them raises "Attempt to modify a readonly
-- table". Reads go through table __index chains (no Lua call per global read).
local raw_setmt, raw_getmt, raw_rawset, err, tostr, nxt = setmetatable, getmetatable, rawset, error, tostring, next
local function readonly() err("Attempt to modify a readonly table", 2) end
local sentinel = raw_setmt({}, { __newindex = readonly, __metatable = false })
local function protect(real)
  return raw_setmt({}, { __index = real, __newindex = readonly, __metatable = sentinel })
end
setmetatable = function(t, m)
  if raw_getmt(t) == sentinel then readonly() end
  return raw_setmt(t, m)
end
rawset = function(t, k, v)
  if raw_getmt(t) == sentinel then readonly() end
  return raw_rawset(t, k, v)
end
raw_getmt("").__metatable = sentinel
local backing = {}
for k, v in nxt, _G do backing[k] = v end
for _, name in ipairs({ "redis", "bit", "string", "math", "table" }) do
  if backing[name] then backing[name] = protect(backing[name]) end
end
local G = _G
for k in nxt, backing do G[k] = nil end
backing._G = G
raw_setmt(backing, { __index = function(_, name)
  err("Script attempted to access nonexistent global variable '" .. tostr(name) .. "'", 2)
end })
raw_setmt(G, { __index = backing, __newindex = readonly, __metatable = sentinel })
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
        let hook = Arc::new(coroutine::HookState::new(
            INSTRUCTION_BUDGET / HOOK_STEP as u64,
        ));
        coroutine::register(&lua, &hook)?;
        let h = hook.clone();
        g.raw_set(
            "__lattice_killed",
            lua.create_function(move |_, ()| Ok(h.stopped()))?,
        )?;
        g.raw_set(
            "__lattice_kill_message",
            coroutine::STOP_MESSAGE.to_str().expect("ascii"),
        )?;
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
            // As Redis: exactly one argument; a string or number is hashed, anything else
            // hashes as the empty string.
            lua.create_function(|_, args: MultiValue| {
                let args: Vec<LuaValue> = args.into_iter().collect();
                let [arg] = args.as_slice() else {
                    return Err(mlua::Error::runtime("wrong number of arguments"));
                };
                Ok(match arg {
                    LuaValue::String(s) => sha1_hex(&s.as_bytes()),
                    LuaValue::Integer(i) => sha1_hex(i.to_string().as_bytes()),
                    LuaValue::Number(n) => sha1_hex(super::basics::lua_number_text(*n).as_bytes()),
                    _ => sha1_hex(b""),
                })
            })?,
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
        redis.raw_set("REDIS_VERSION", REDIS_VERSION)?;
        redis.raw_set("REDIS_VERSION_NUM", REDIS_VERSION_NUM)?;
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
        g.raw_set("bit", bit_library(&lua)?)?;
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
        // Before the prelude wraps `pcall`: the probe counts the C calls of the raw one.
        let can_suspend = coroutine::layout_matches(&lua);
        lua.load(PRELUDE).set_name("=prelude").exec()?;
        let libraries = crate::cmd::function::library::Libraries::new(&lua)?;
        Ok(Scripts {
            libraries,
            lua,
            cache: BTreeMap::new(),
            cache_bytes: 0,
            hook,
            can_suspend,
            running: None,
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
    pub(crate) fn load(&mut self, body: &[u8]) -> Result<String, String> {
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

    pub(crate) fn flush(&mut self) {
        self.cache.clear();
        self.cache_bytes = 0;
        self.lua.gc_collect().ok();
    }

    /// The cached body of `sha` (tests, SCRIPT EXISTS).
    pub fn body(&self, sha: &str) -> Option<&Bytes> {
        self.cache.get(sha).map(|c| &c.body)
    }
}

/// Lua BitOp's `bit` table (which Redis loads): 32-bit operations whose results are signed
/// 32-bit numbers; arguments are numbers taken modulo 2^32.
fn bit_library(lua: &Lua) -> mlua::Result<Table> {
    fn tobit(v: f64) -> i32 {
        // Lua BitOp's normalization: the number modulo 2^32, as a signed 32-bit value.
        let m = v.trunc().rem_euclid(4_294_967_296.0);
        m as u64 as u32 as i32
    }
    fn nums(args: &MultiValue, name: &str) -> mlua::Result<Vec<i32>> {
        args.iter()
            .map(|v| match v {
                LuaValue::Integer(i) => Ok(tobit(*i as f64)),
                LuaValue::Number(n) => Ok(tobit(*n)),
                LuaValue::String(s) => s
                    .to_str()
                    .ok()
                    .and_then(|t| t.trim().parse::<f64>().ok())
                    .map(tobit)
                    .ok_or_else(|| {
                        mlua::Error::runtime(format!("bad argument to '{name}' (number expected)"))
                    }),
                _ => Err(mlua::Error::runtime(format!(
                    "bad argument to '{name}' (number expected)"
                ))),
            })
            .collect()
    }
    fn first(args: &MultiValue, name: &str) -> mlua::Result<i32> {
        nums(args, name)?.first().copied().ok_or_else(|| {
            mlua::Error::runtime(format!("bad argument #1 to '{name}' (number expected)"))
        })
    }
    let t = lua.create_table()?;
    type Fold = fn(i32, i32) -> i32;
    for (name, op) in [
        ("band", (|a, b| a & b) as Fold),
        ("bor", |a, b| a | b),
        ("bxor", |a, b| a ^ b),
    ] {
        t.raw_set(
            name,
            lua.create_function(move |_, args: MultiValue| {
                let v = nums(&args, name)?;
                let first = *v.first().ok_or_else(|| {
                    mlua::Error::runtime(format!("bad argument #1 to '{name}' (number expected)"))
                })?;
                Ok(v[1..].iter().fold(first, |a, b| op(a, *b)) as f64)
            })?,
        )?;
    }
    type Shift = fn(i32, u32) -> i32;
    for (name, op) in [
        (
            "lshift",
            (|a: i32, n: u32| ((a as u32) << n) as i32) as Shift,
        ),
        ("rshift", |a, n| ((a as u32) >> n) as i32),
        ("arshift", |a, n| a >> n),
        ("rol", |a, n| (a as u32).rotate_left(n) as i32),
        ("ror", |a, n| (a as u32).rotate_right(n) as i32),
    ] {
        t.raw_set(
            name,
            lua.create_function(move |_, args: MultiValue| {
                let v = nums(&args, name)?;
                if v.len() < 2 {
                    return Err(mlua::Error::runtime(format!(
                        "bad argument #2 to '{name}' (number expected)"
                    )));
                }
                Ok(op(v[0], (v[1] & 31) as u32) as f64)
            })?,
        )?;
    }
    t.raw_set(
        "tobit",
        lua.create_function(|_, args: MultiValue| Ok(first(&args, "tobit")? as f64))?,
    )?;
    t.raw_set(
        "bnot",
        lua.create_function(|_, args: MultiValue| Ok(!first(&args, "bnot")? as f64))?,
    )?;
    t.raw_set(
        "bswap",
        lua.create_function(|_, args: MultiValue| Ok(first(&args, "bswap")?.swap_bytes() as f64))?,
    )?;
    t.raw_set(
        "tohex",
        lua.create_function(|_, args: MultiValue| {
            let v = nums(&args, "tohex")?;
            let x = first(&args, "tohex")? as u32;
            let n = v.get(1).copied().unwrap_or(8);
            let digits = n.unsigned_abs().min(8) as usize;
            let hex = if n < 0 {
                format!("{x:08X}")
            } else {
                format!("{x:08x}")
            };
            Ok(hex[8 - digits..].to_string())
        })?,
    )?;
    Ok(t)
}

/// SHA-1 of `data` in lowercase hex, as `redis.sha1hex` and script IDs use it.
pub fn sha1_hex(data: &[u8]) -> String {
    sha1_smol::Sha1::from(data).digest().to_string()
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
pub(crate) fn unwrap_call_error(lua: &Lua, v: LuaValue) -> mlua::Result<LuaValue> {
    if let LuaValue::Error(e) = &v {
        if let Some(text) = call_error_text(e) {
            return error_table(lua, text.as_bytes());
        }
    }
    Ok(v)
}

impl Scripts {
    /// Prepares the cached script `sha` to run for `conn`: KEYS and ARGV, RESP2 replies, a
    /// fresh coroutine with the count hook, a fresh budget.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        &mut self,
        conn: ConnId,
        now: Micros,
        sha: &str,
        keys: &[Bytes],
        argv: &[Bytes],
        read_only: bool,
        seed: u64,
    ) -> Result<Running, Vec<u8>> {
        let lua = &self.lua;
        let setup = || -> mlua::Result<Thread> {
            let g = lua.globals();
            g.raw_set("KEYS", string_sequence(lua, keys)?)?;
            g.raw_set("ARGV", string_sequence(lua, argv)?)?;
            lua.create_thread(self.cache[sha].func.clone())
        };
        let thread = setup().map_err(internal_error)?;
        Ok(self.running(thread, conn, now, sha, Kind::Eval, read_only, seed))
    }

    /// Prepares function `func` (called `name`) to run for `conn` with `keys` and `args` as
    /// its two parameters, as Redis calls functions.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_function(
        &mut self,
        conn: ConnId,
        now: Micros,
        name: &str,
        func: Function,
        keys: &[Bytes],
        argv: &[Bytes],
        read_only: bool,
        seed: u64,
    ) -> Result<Running, Vec<u8>> {
        let lua = &self.lua;
        let setup = || -> mlua::Result<Thread> {
            let thunk: Function = self.libraries.binder.call((
                func,
                string_sequence(lua, keys)?,
                string_sequence(lua, argv)?,
            ))?;
            lua.create_thread(thunk)
        };
        let thread = setup().map_err(internal_error)?;
        Ok(self.running(thread, conn, now, name, Kind::Function, read_only, seed))
    }

    #[allow(clippy::too_many_arguments)]
    fn running(
        &self,
        thread: Thread,
        conn: ConnId,
        now: Micros,
        name: &str,
        kind: Kind,
        read_only: bool,
        seed: u64,
    ) -> Running {
        self.lua.set_named_registry_value("lattice.resp", 2).ok();
        coroutine::install_hook(&self.lua, &thread, HOOK_STEP);
        self.hook.reset();
        Running {
            thread,
            caller: conn,
            sha: name.to_string(),
            kind,
            command: Vec::new(),
            read_only,
            rng: ChaCha8Rng::seed_from_u64(seed),
            started: now,
            wrote: false,
            killed: false,
            timed_out: false,
            silent: false,
            close_caller: false,
        }
    }
}

fn string_sequence(lua: &Lua, items: &[Bytes]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        t.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(t)
}

pub(crate) fn internal_error(e: mlua::Error) -> Vec<u8> {
    format!("ERR internal scripting error: {e}").into_bytes()
}

pub(crate) fn error_table(lua: &Lua, message: &[u8]) -> mlua::Result<LuaValue> {
    let t = lua.create_table()?;
    let text = message.strip_prefix(b"-").unwrap_or(message);
    t.raw_set("err", lua.create_string(text)?)?;
    Ok(LuaValue::Table(t))
}

/// Redis's reply to other clients while a script runs past busy-reply-threshold.
pub const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

/// The BUSY reply while `kind` runs, naming the command that can stop it.
pub(crate) fn busy_message(kind: Kind) -> &'static str {
    match kind {
        Kind::Eval => BUSY,
        Kind::Function => {
            "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
        }
    }
}

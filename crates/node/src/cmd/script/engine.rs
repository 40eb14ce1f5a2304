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
    /// Scripts ended since the last garbage-collection step (see [`GC_PERIOD`]).
    pub(crate) ended: u32,
}

/// Scripts between two incremental garbage-collection steps of [`GC_PERIOD`] units, as Redis
/// does after its EVALs: without them the collector only runs when the heap doubles, and a
/// stream of small scripts leaves the heap at twice what it needs.
pub const GC_PERIOD: u32 = 50;
/// Below this Lua heap a full collection every [`GC_PERIOD`] scripts costs a few
/// microseconds per script; above it, an incremental step.
pub const SMALL_HEAP_BYTES: usize = 1 << 20;
/// Full collections SCRIPT FLUSH runs at most: enough to halve a string table grown to
/// millions of entries back to Lua's minimum.
pub const FLUSH_COLLECTIONS: usize = 24;

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
    /// The node was over maxmemory when the script started and its flags do not allow that:
    /// its first write of a `denyoom` command gets -OOM, as in Redis.
    pub(crate) deny_oom: bool,
}

pub(crate) struct Cached {
    pub(crate) body: Bytes,
    pub(crate) func: Function,
    /// The flags of its shebang line; None without one (Redis's compatibility mode).
    pub(crate) flags: Option<u8>,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts::new()
    }
}

/// Lua run once at start-up, after the `redis` table exists: wraps `redis.call` so that an
/// error reply raises, keeps raw `xpcall` for the runner, makes `pcall`/`xpcall` re-raise a
/// budget stop, and makes globals read-only.
const PRELUDE: &str = r##"
local rawpcall, killed, kill_message = pcall, __lattice_killed, __lattice_kill_message
local unwrap, adopt, took, pass = __lattice_unwrap, __lattice_adopt, __lattice_took, __lattice_pass
__lattice_killed = nil
__lattice_kill_message = nil
__lattice_unwrap = nil
__lattice_adopt = nil
__lattice_took = nil
__lattice_pass = nil
local co_create, co_resume, co_status = coroutine.create, coroutine.resume, coroutine.status
local sel, raw_unpack, tonum, typ = select, unpack, tonumber, type
local function pack(...) return { n = sel("#", ...), ... } end
-- pcall(f, ...) with f in a coroutine the count hook may suspend (see coroutine.rs): a
-- suspension by the hook is passed up to this thread's resumer. Where that cannot work (f is
-- a C function, or this thread could not be suspended here), the raw pcall. Only threads of
-- the script's own chain adopt, so a yield of the script's own could only reach the script's
-- top: it fails inside the pcall, as it does across Redis's (C) pcall.
local function suspendable_pcall(f, ...)
  local made, co = rawpcall(co_create, f)
  if not made or not adopt(co) then return rawpcall(f, ...) end
  local r = pack(co_resume(co, ...))
  while co_status(co) ~= "dead" do
    if not took(co) then return false, "attempt to yield across metamethod/C-call boundary" end
    pass()
    r = pack(co_resume(co))
  end
  return raw_unpack(r, 1, r.n)
end
local function checked(ok, ...)
  if killed() then error(kill_message, 0) end
  if not ok then return false, unwrap(...) end
  return ok, ...
end
pcall = function(...) return checked(suspendable_pcall(...)) end
xpcall = function(f, h)
  local r = pack(suspendable_pcall(f))
  if killed() then error(kill_message, 0) end
  if r[1] then return raw_unpack(r, 1, r.n) end
  local _, v = rawpcall(h, unwrap(r[2]))
  return false, v
end
-- Precompiled chunks are refused (Lua 5.1 trusts bytecode: a crafted chunk could break the
-- interpreter): loadstring and load answer nil and a message, as for a syntax error.
local raw_loadstring, raw_load, str_byte, concat = loadstring, load, string.byte, table.concat
local function binary(s) return str_byte(s, 1) == 27 end
loadstring = function(s, ...)
  if typ(s) == "string" and binary(s) then return nil, "binary chunks are not allowed" end
  return raw_loadstring(s, ...)
end
load = function(reader, ...)
  if typ(reader) ~= "function" then return raw_load(reader, ...) end
  local pieces = {}
  while true do
    local piece = reader()
    if piece == nil or piece == "" then break end
    if typ(piece) ~= "string" then return nil, "reader function must return a string" end
    pieces[#pieces + 1] = piece
  end
  return loadstring(concat(pieces), ...)
end
-- Lua 5.1's unpack computes its result count in a C int: a huge range overflows it and
-- crashes the process. Ranges of 8000 or more results (Lua's C stack limit) are refused first.
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
for _, name in ipairs({ "redis", "bit", "cjson", "cmsgpack", "string", "math", "table" }) do
  if backing[name] then backing[name] = protect(backing[name]) end
end
local G = _G
for k in nxt, backing do G[k] = nil end
backing._G = G
raw_setmt(backing, { __index = function(_, name)
  err("Script attempted to access nonexistent global variable '" .. tostr(name) .. "'", 2)
end })
raw_setmt(G, { __index = backing, __newindex = readonly, __metatable = sentinel })
"##;

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
        let [adopt, took, pass] = coroutine::pcall_functions(&lua)?;
        g.raw_set("__lattice_adopt", adopt)?;
        g.raw_set("__lattice_took", took)?;
        g.raw_set("__lattice_pass", pass)?;
        g.raw_set(
            "__lattice_unwrap",
            lua.create_function(|lua, v: LuaValue| unwrap_call_error(lua, v))?,
        )?;

        let redis = lua.create_table()?;
        // Dispatches to the running script's command runner (a scoped function registered for
        // the duration of each script).
        let [call, pcall, acl_check] = coroutine::command_functions(&lua)?;
        redis.raw_set("call", call)?;
        redis.raw_set("pcall", pcall)?;
        redis.raw_set("acl_check_cmd", acl_check)?;
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
            lua.create_function(|lua, args: MultiValue| match one_string(&args) {
                Some(s) => error_table(lua, &error_reply_text(&s.as_bytes()), false),
                None => error_table(lua, WRONG_ARGUMENTS, false),
            })?,
        )?;
        redis.raw_set(
            "status_reply",
            lua.create_function(|lua, args: MultiValue| match one_string(&args) {
                Some(s) => {
                    let t = lua.create_table()?;
                    t.raw_set("ok", s)?;
                    Ok(LuaValue::Table(t))
                }
                None => error_table(lua, WRONG_ARGUMENTS, false),
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
        g.raw_set("cjson", super::json::library(&lua)?)?;
        g.raw_set("cmsgpack", super::msgpack::library(&lua)?)?;
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
        let can_suspend = coroutine::layout_matches(&lua, &hook);
        lua.load(PRELUDE).set_name("=prelude").exec()?;
        let libraries = crate::cmd::function::library::Libraries::new(&lua)?;
        // Setup leaves garbage, and how far the incremental collector has got through it at
        // any later moment differed between processes of one binary (with address-space
        // randomization: 71,647 against 73,007 bytes in INFO's `used_memory_lua` for the same
        // seed, so the simulator's trace differed). A full collection here starts every
        // interpreter from the same heap (and a smaller one: about 52 KB instead of 72 KB).
        lua.gc_collect()?;
        Ok(Scripts {
            libraries,
            lua,
            cache: BTreeMap::new(),
            cache_bytes: 0,
            hook,
            can_suspend,
            running: None,
            ended: 0,
        })
    }

    /// A script ended: every [`GC_PERIOD`] of them, one collection step, or a full collection
    /// while the heap is under [`SMALL_HEAP_BYTES`] (each script leaves its coroutine and
    /// tables behind; Lua's own pacing lets garbage reach the live size before it collects).
    pub(crate) fn script_ended(&mut self) {
        self.ended += 1;
        if self.ended >= GC_PERIOD {
            self.ended = 0;
            if self.lua.used_memory() < SMALL_HEAP_BYTES {
                self.lua.gc_collect().ok();
                return;
            }
            // SAFETY: one collector step on the main state, which no Rust value borrows.
            unsafe {
                self.lua
                    .exec_raw::<()>((), |state| {
                        mlua::ffi::lua_gc(state, mlua::ffi::LUA_GCSTEP, GC_PERIOD as i32);
                    })
                    .ok();
            }
        }
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
        let shebang = super::basics::parse_shebang(body)?;
        let skip = shebang.map_or(0, |(_, len)| len);
        let func = self
            .lua
            .load(&body[skip..])
            .set_name("@user_script")
            // Lua 5.1 trusts precompiled chunks: crafted bytecode could break the interpreter.
            .set_mode(mlua::chunk::ChunkMode::Text)
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
                flags: shebang.map(|(flags, _)| flags),
            },
        );
        Ok(sha)
    }

    /// SCRIPT FLUSH: as Redis, a new interpreter, so that nothing the flushed scripts left
    /// behind survives (collecting the old one cannot give back all of it: Lua 5.1 shrinks its
    /// string table and thread stacks by half at most per collection, and only below a
    /// quarter in use). The function libraries, which share the interpreter here (Redis keeps
    /// them in one of their own), are compiled again into the new one from their code; the
    /// set loaded is the same, since the entries decide it. Between two slices of a
    /// suspended script (which SCRIPT FLUSH cannot reach: it is not `allow-busy`) or if a new
    /// interpreter cannot be made, the old one is collected instead, up to
    /// [`FLUSH_COLLECTIONS`] times.
    pub(crate) fn flush(&mut self) {
        self.cache.clear();
        self.cache_bytes = 0;
        if self.running.is_none() {
            if let Ok(mut fresh) = Scripts::build() {
                let entries = std::mem::take(&mut self.libraries.entries);
                fresh
                    .libraries
                    .reset_to(&fresh.lua, &fresh.hook, entries.into_iter().collect());
                *self = fresh;
                return;
            }
        }
        self.collect_fully();
    }

    /// Full collections until one frees nothing more, at most [`FLUSH_COLLECTIONS`].
    fn collect_fully(&mut self) {
        let mut used = self.lua.used_memory();
        for _ in 0..FLUSH_COLLECTIONS {
            self.lua.gc_collect().ok();
            let now = self.lua.used_memory();
            if now >= used {
                break;
            }
            used = now;
        }
    }

    /// The script flags a call of `command` declares before it runs, as Redis 7.0's
    /// `evalGetCommandFlags` and `fcallGetCommandFlags` find them: an EVAL body's shebang
    /// (cached or not: a cached script's flags are its body's), a cached EVALSHA script's,
    /// the called function's. None when the call declares none (no shebang, an unknown SHA-1
    /// or function, a shebang that does not parse, not a script command): the command's own
    /// flags decide then, and the call itself answers any error once it runs.
    pub(crate) fn declared_flags(&self, command: &str, args: &[Bytes]) -> Option<u8> {
        let target = args.get(1)?;
        match command {
            "eval" | "eval_ro" => super::basics::parse_shebang(target)
                .ok()
                .flatten()
                .map(|(flags, _)| flags),
            "evalsha" | "evalsha_ro" if target.len() == 40 => {
                let sha = String::from_utf8_lossy(target).to_ascii_lowercase();
                self.cache.get(&sha).and_then(|c| c.flags)
            }
            "fcall" | "fcall_ro" => self.libraries.function(target).map(|(_, f)| f.flags),
            _ => None,
        }
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

/// What `redis.call` and `acl_check_cmd` do with their runner's result: an `{err=...}` table
/// is raised as an error (scripts catching it with `pcall` get the table back).
pub(crate) fn raise_if_error(r: LuaValue) -> mlua::Result<LuaValue> {
    if let LuaValue::Table(t) = &r {
        if let Ok(LuaValue::String(e)) = t.raw_get::<LuaValue>("err") {
            let counted = t.raw_get::<bool>(COUNTED).unwrap_or(false);
            return Err(mlua::Error::external(CallError(
                e.to_string_lossy(),
                counted,
            )));
        }
    }
    Ok(r)
}

/// What `redis.error_reply` and `redis.status_reply` return for anything but one string.
const WRONG_ARGUMENTS: &[u8] = b"ERR wrong number or type of arguments";

/// The single string argument of `args`, if that is what they are.
fn one_string(args: &MultiValue) -> Option<mlua::LuaString> {
    match (args.len(), args.front()) {
        (1, Some(LuaValue::String(s))) => Some(s.clone()),
        _ => None,
    }
}

/// `redis.error_reply`'s text as Redis 7.0 builds it: the first word is the error code (a
/// leading `-` dropped), or `ERR` when there is only one word; line breaks around the message
/// are trimmed (those inside become spaces in the reply).
fn error_reply_text(s: &[u8]) -> Vec<u8> {
    let s = s.strip_prefix(b"-").unwrap_or(s);
    let (code, msg): (&[u8], &[u8]) = match s.iter().position(|&b| b == b' ') {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (b"ERR", s),
    };
    let trim = |b: &u8| *b != b'\r' && *b != b'\n';
    let start = msg.iter().position(trim).unwrap_or(msg.len());
    let end = msg.iter().rposition(trim).map_or(start, |i| i + 1);
    let mut text = code.to_vec();
    text.push(b' ');
    text.extend_from_slice(&msg[start..end]);
    text
}

/// SHA-1 of `data` in lowercase hex, as `redis.sha1hex` and script IDs use it.
pub fn sha1_hex(data: &[u8]) -> String {
    sha1_smol::Sha1::from(data).digest().to_string()
}

/// An error reply raised by `redis.call` (and whether the statistics counted it already);
/// scripts catching it with `pcall` see `{err=...}`.
#[derive(Debug)]
struct CallError(String, bool);

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CallError {}

/// The `redis.call` error inside `e`, however mlua wrapped it on the way.
fn call_error(e: &mlua::Error) -> Option<&CallError> {
    match e {
        mlua::Error::CallbackError { cause, .. } => call_error(cause),
        mlua::Error::ExternalError(inner) => inner.downcast_ref::<CallError>(),
        mlua::Error::WithContext { cause, .. } => call_error(cause),
        _ => None,
    }
}

/// The message of a library function's error (a Rust function of ours raised it), however
/// mlua wrapped it on the way.
pub(crate) fn runtime_message(e: &mlua::Error) -> Option<&str> {
    match e {
        mlua::Error::CallbackError { cause, .. } => runtime_message(cause),
        mlua::Error::WithContext { cause, .. } => runtime_message(cause),
        mlua::Error::RuntimeError(m) => Some(m),
        _ => None,
    }
}

/// Turns a raised `redis.call` error back into the `{err=...}` table Redis scripts catch, and
/// a library function's error into its message (a string, as scripts get from Redis's C
/// libraries).
pub(crate) fn unwrap_call_error(lua: &Lua, v: LuaValue) -> mlua::Result<LuaValue> {
    if let LuaValue::Error(e) = &v {
        if let Some(CallError(text, counted)) = call_error(e) {
            return error_table(lua, text.as_bytes(), *counted);
        }
        if let Some(m) = runtime_message(e) {
            return Ok(LuaValue::String(lua.create_string(m)?));
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
            deny_oom: false,
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

/// The field Redis adds to the error table of a command's error reply inside a script: the
/// error statistics counted it when the command replied, so the script's own reply, if it
/// passes the error on, is not counted again (only as a failed call of EVAL).
pub(crate) const COUNTED: &str = "ignore_error_stats_update";

/// The `{err=...}` table of an error reply (`counted`: see [`COUNTED`]).
pub(crate) fn error_table(lua: &Lua, message: &[u8], counted: bool) -> mlua::Result<LuaValue> {
    let t = lua.create_table()?;
    let text = message.strip_prefix(b"-").unwrap_or(message);
    t.raw_set("err", lua.create_string(text)?)?;
    if counted {
        t.raw_set(COUNTED, true)?;
    }
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

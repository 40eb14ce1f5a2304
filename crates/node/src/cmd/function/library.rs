//! The function libraries of one node (Redis 7.0's FUNCTION): parsing a library's `#!lua`
//! metadata line, running its code once with the load-time API (`redis.register_function`,
//! `redis.log`, the version constants and nothing else) under an instruction budget, and the
//! set of loaded libraries with their functions.
//!
//! Each library gets its own global environment (Lua 5.1 function environments): while its
//! code loads, the environment resolves only `redis` (the load-time API); afterwards it
//! resolves the scripting globals (`redis.call`, `string`, ...), so the functions a library
//! registered run with the same API as EVAL. Writing a global is refused in both phases
//! ("Attempt to modify a readonly table"), as is writing to the load-time `redis` table,
//! which a library can keep in a local and use later.
//!
//! Replication and durability see the set through [`Libraries::entries`]: per library name
//! the code and a hybrid-clock stamp, with deletions kept as stamped tombstones. Which
//! libraries are loaded is a deterministic function of those entries ([`Libraries::rebuild`]),
//! so replicas that merged the same entries load the same libraries. See
//! docs/ARCHITECTURE.md ("Functions") and docs/SEMANTICS.md.

use std::cell::RefCell;
use std::collections::BTreeMap;

use bytes::Bytes;
use mlua::{Function, Lua, MultiValue, Table, Value as LuaValue};

use crate::cmd::script::basics::HOOK_STEP;
use crate::cmd::script::coroutine;
use crate::varint::{get_bytes, get_varint, put_varint};

pub use crate::cmd::script::basics::{FLAG_NAMES, NO_WRITES};

/// Instructions a library's code may run while it loads (Redis stops it after 500 ms): it
/// should only register functions.
pub const LOAD_INSTRUCTIONS: u64 = 100_000_000;
/// Libraries at most (live ones and deletion tombstones together) and their total code size:
/// the set travels whole between replicas and into persistence records.
pub const MAX_LIBRARIES: usize = 10_000;
pub const MAX_CODE_BYTES: usize = 8 << 20;

const NAME_RULE: &str = "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// A hybrid-clock stamp: `(wall_ms, logical, node)`, compared in that order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp {
    pub wall_ms: u64,
    pub logical: u32,
    pub node: u32,
}

/// The replicated record of one library name: its code, or a tombstone (`None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub stamp: Stamp,
    pub code: Option<Bytes>,
}

/// One registered function.
pub struct FunctionDef {
    pub name: String,
    pub description: Option<Bytes>,
    pub flags: u8,
    pub func: Function,
}

/// A loaded library.
pub struct Library {
    pub name: String,
    pub code: Bytes,
    pub functions: Vec<FunctionDef>,
}

/// The libraries of a node, their functions by name, and the replicated entries.
pub struct Libraries {
    /// Loaded libraries by name (case-sensitive, as in Redis; function names are not).
    pub(crate) libs: BTreeMap<String, Library>,
    /// Lowercase function name to its library's key.
    pub(crate) funcs: BTreeMap<String, String>,
    /// Replicated entries by library name (live and tombstones).
    pub(crate) entries: BTreeMap<String, Entry>,
    /// Makes a library environment: `(env, done)`, `done()` switching it to run time.
    new_env: Function,
    /// `function(f, keys, args) return function() return f(keys, args) end end`.
    pub(crate) binder: Function,
}

/// Lua that builds library environments. Arguments: the load-time API table and the scripting
/// globals.
const ENV_SETUP: &str = r#"
local api, G = ...
local setmt, err, tostr = setmetatable, error, tostring
local function readonly() err("Attempt to modify a readonly table", 2) end
local function missing(name)
  err("Script attempted to access nonexistent global variable '" .. tostr(name) .. "'", 3)
end
local redis_api = setmt({}, {
  __index = function(_, k) local v = api[k]; if v == nil then missing(k) end; return v end,
  __newindex = readonly, __metatable = false })
local function load_globals(_, k)
  if k == "redis" then return redis_api end
  missing(k)
end
local new_env = function()
  local mt = { __index = load_globals, __newindex = readonly, __metatable = false }
  local env = setmt({}, mt)
  return env, function() mt.__index = G end
end
local binder = function(f, keys, args) return function() return f(keys, args) end end
return new_env, binder
"#;

/// What `register_function` collected while a library loads.
#[derive(Default)]
struct Registration {
    functions: Vec<FunctionDef>,
}

impl Libraries {
    pub(crate) fn new(lua: &Lua) -> mlua::Result<Libraries> {
        let api = lua.create_table()?;
        api.raw_set(
            "register_function",
            lua.create_function(|lua, args: MultiValue| {
                let f: Option<Function> = lua.named_registry_value("lattice.register").ok();
                match f {
                    Some(f) => f.call::<()>(args),
                    None => Err(mlua::Error::runtime(
                        "redis.register_function can only be called on FUNCTION LOAD command",
                    )),
                }
            })?,
        )?;
        api.raw_set("log", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
        for (name, v) in [
            ("LOG_DEBUG", 0),
            ("LOG_VERBOSE", 1),
            ("LOG_NOTICE", 2),
            ("LOG_WARNING", 3),
        ] {
            api.raw_set(name, v)?;
        }
        api.raw_set("REDIS_VERSION", crate::cmd::script::basics::REDIS_VERSION)?;
        api.raw_set(
            "REDIS_VERSION_NUM",
            crate::cmd::script::basics::REDIS_VERSION_NUM,
        )?;
        let (new_env, binder): (Function, Function) = lua
            .load(ENV_SETUP)
            .set_name("=functions")
            .call((api, lua.globals()))?;
        Ok(Libraries {
            libs: BTreeMap::new(),
            funcs: BTreeMap::new(),
            entries: BTreeMap::new(),
            new_env,
            binder,
        })
    }

    pub fn len(&self) -> usize {
        self.libs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.libs.is_empty()
    }

    pub fn function_count(&self) -> usize {
        self.funcs.len()
    }

    /// The function called `name` (any case) and its library.
    pub(crate) fn function(&self, name: &[u8]) -> Option<(&Library, &FunctionDef)> {
        let key = String::from_utf8_lossy(name).to_ascii_lowercase();
        let lib = self.libs.get(self.funcs.get(&key)?)?;
        let f = lib
            .functions
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(&key))?;
        Some((lib, f))
    }

    /// Compiles and runs a library's code. The library is not added to the set.
    pub(crate) fn compile(
        &self,
        lua: &Lua,
        hook: &coroutine::HookState,
        code: &[u8],
    ) -> Result<Library, String> {
        let meta = parse_metadata(code)?;
        // The metadata line is left out (as Redis does), its line break kept so that line
        // numbers in errors are the library's.
        let body = &code[code.iter().position(|&b| b == b'\n').unwrap_or(0)..];
        let (env, done): (Table, Function) =
            self.new_env.call(()).map_err(|e| format!("ERR {e}"))?;
        let chunk = lua
            .load(body)
            .set_name("@user_function")
            .set_environment(env)
            // Lua 5.1 trusts precompiled chunks: crafted bytecode could break the interpreter.
            .set_mode(mlua::chunk::ChunkMode::Text)
            .into_function()
            .map_err(|e| {
                let text = match &e {
                    mlua::Error::SyntaxError { message, .. } => message.clone(),
                    other => other.to_string(),
                };
                format!("ERR Error compiling function: {text}")
            })?;
        let reg = RefCell::new(Registration::default());
        let result = lua.scope(|scope| {
            let register = scope.create_function(|lua, args: MultiValue| {
                let f = read_register_args(lua, args).map_err(mlua::Error::runtime)?;
                let mut r = reg.borrow_mut();
                if r.functions
                    .iter()
                    .any(|g| g.name.eq_ignore_ascii_case(&f.name))
                {
                    return Err(mlua::Error::runtime(
                        "Function already exists in the library",
                    ));
                }
                r.functions.push(f);
                Ok(())
            })?;
            lua.set_named_registry_value("lattice.register", register)?;
            let thread = lua.create_thread(chunk)?;
            coroutine::install_hook(lua, &thread, HOOK_STEP);
            hook.reset();
            hook.set_budget(LOAD_INSTRUCTIONS / HOOK_STEP as u64);
            hook.arm(None, u64::MAX);
            let r = coroutine::resume(lua, &thread, hook);
            hook.disarm();
            hook.set_budget(crate::cmd::script::basics::INSTRUCTION_BUDGET / HOOK_STEP as u64);
            r
        });
        lua.unset_named_registry_value("lattice.register").ok();
        let timed_out = hook.stopped();
        hook.reset();
        done.call::<()>(()).map_err(|e| format!("ERR {e}"))?;
        match result {
            Err(e) => return Err(registering(&lua_error_text(&e))),
            Ok(coroutine::Resumed::Raised(err, _)) => {
                if timed_out {
                    return Err(registering("FUNCTION LOAD timeout"));
                }
                return Err(registering(&value_text(&err)));
            }
            Ok(coroutine::Resumed::Suspended) => return Err(registering("FUNCTION LOAD timeout")),
            Ok(coroutine::Resumed::Returned(_)) => {}
        }
        let functions = reg.into_inner().functions;
        if functions.is_empty() {
            return Err("ERR No functions registered".into());
        }
        Ok(Library {
            name: meta,
            code: Bytes::copy_from_slice(code),
            functions,
        })
    }

    /// The first function of `lib` another loaded library (other than those in `except`)
    /// already registered.
    pub(crate) fn collision<'a>(&self, lib: &'a Library, except: &[String]) -> Option<&'a str> {
        lib.functions
            .iter()
            .find(|f| {
                self.funcs
                    .get(&f.name.to_ascii_lowercase())
                    .is_some_and(|owner| !except.contains(owner))
            })
            .map(|f| f.name.as_str())
    }

    /// Adds a compiled library (replacing one of the same name), recording it as written at
    /// `stamp`. The caller checked collisions.
    pub(crate) fn insert(&mut self, lib: Library, stamp: Stamp) {
        let key = lib.name.clone();
        self.unload(&key);
        self.entries.insert(
            key.clone(),
            Entry {
                stamp,
                code: Some(lib.code.clone()),
            },
        );
        self.attach(key, lib);
        self.trim_tombstones();
    }

    fn attach(&mut self, key: String, lib: Library) {
        for f in &lib.functions {
            self.funcs.insert(f.name.to_ascii_lowercase(), key.clone());
        }
        self.libs.insert(key, lib);
    }

    fn unload(&mut self, key: &str) -> Option<Library> {
        let lib = self.libs.remove(key)?;
        for f in &lib.functions {
            self.funcs.remove(&f.name.to_ascii_lowercase());
        }
        Some(lib)
    }

    /// Deletes the library `name` (any case) at `stamp`; false if there is none.
    pub(crate) fn delete(&mut self, name: &[u8], stamp: Stamp) -> bool {
        let key = String::from_utf8_lossy(name).into_owned();
        if self.unload(&key).is_none() {
            return false;
        }
        self.entries.insert(key, Entry { stamp, code: None });
        self.trim_tombstones();
        true
    }

    /// Deletes every library at `stamp`, including those left out for a name collision
    /// (which a later rebuild would otherwise bring back).
    pub(crate) fn flush(&mut self, stamp: Stamp) {
        self.libs.clear();
        self.funcs.clear();
        for e in self.entries.values_mut() {
            if e.code.is_some() {
                *e = Entry { stamp, code: None };
            }
        }
        self.trim_tombstones();
    }

    /// Bounds the entries: the oldest tombstones go first. (A peer that missed such a
    /// deletion and still holds the library can bring it back; see SEMANTICS.)
    fn trim_tombstones(&mut self) {
        while self.entries.len() > MAX_LIBRARIES {
            let oldest = self
                .entries
                .iter()
                .filter(|(_, e)| e.code.is_none())
                .min_by_key(|(_, e)| e.stamp)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.entries.remove(&k);
                }
                None => break,
            }
        }
    }

    /// Total code size of the live libraries.
    pub(crate) fn code_bytes(&self) -> usize {
        self.libs.values().map(|l| l.code.len()).sum()
    }

    /// Merges replicated entries (last writer wins per library name, by stamp). Returns true
    /// if anything changed; the loaded set is then rebuilt from the entries.
    pub(crate) fn merge(
        &mut self,
        lua: &Lua,
        hook: &coroutine::HookState,
        incoming: Vec<(String, Entry)>,
    ) -> bool {
        let mut changed = false;
        for (key, e) in incoming {
            if self
                .entries
                .get(&key)
                .is_none_or(|mine| e.stamp > mine.stamp)
            {
                self.entries.insert(key, e);
                changed = true;
            }
        }
        if changed {
            self.trim_tombstones();
            self.rebuild(lua, hook);
        }
        changed
    }

    /// Loads the libraries the entries name: newest first, a library whose code does not load
    /// or whose function names a newer library already took is left out. Only concurrent loads
    /// on two replicas (each accepted locally) can collide; every replica resolves them alike.
    pub(crate) fn rebuild(&mut self, lua: &Lua, hook: &coroutine::HookState) {
        let mut order: Vec<(Stamp, String, Bytes)> = self
            .entries
            .iter()
            .filter_map(|(k, e)| e.code.clone().map(|c| (e.stamp, k.clone(), c)))
            .collect();
        order.sort_by_key(|e| std::cmp::Reverse(e.0));
        let mut old = std::mem::take(&mut self.libs);
        self.funcs.clear();
        for (_, key, code) in order {
            let lib = match old.remove(&key) {
                Some(lib) if lib.code == code => lib,
                _ => match self.compile(lua, hook, &code) {
                    Ok(lib) if lib.name == key => lib,
                    _ => continue,
                },
            };
            if self.collision(&lib, &[]).is_some() {
                continue;
            }
            self.attach(key, lib);
        }
    }

    /// Replaces the whole set with `entries` (recovery).
    pub(crate) fn reset_to(
        &mut self,
        lua: &Lua,
        hook: &coroutine::HookState,
        entries: Vec<(String, Entry)>,
    ) {
        self.entries = entries.into_iter().collect();
        self.rebuild(lua, hook);
    }

    /// Every loaded library, in name order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Library> {
        self.libs.values()
    }

    /// Checks that the function index and the loaded libraries agree, and that every loaded
    /// library has a live entry with its code.
    pub fn check_invariants(&self) {
        let n: usize = self.libs.values().map(|l| l.functions.len()).sum();
        assert_eq!(n, self.funcs.len(), "function index out of step");
        for (k, lib) in &self.libs {
            assert_eq!(*k, lib.name);
            for f in &lib.functions {
                assert_eq!(self.funcs.get(&f.name.to_ascii_lowercase()), Some(k));
            }
            let e = self.entries.get(k).expect("a loaded library has an entry");
            assert_eq!(e.code.as_ref(), Some(&lib.code));
        }
        assert!(self.entries.len() <= MAX_LIBRARIES + 1);
    }
}

/// Encoding of a set of entries (persistence records and peer messages): varint n, then n ×
/// (bytes name, varint wall_ms, varint logical, varint node, byte live, [bytes code]).
pub fn encode_entries<'a>(entries: impl Iterator<Item = (&'a String, &'a Entry)>) -> Vec<u8> {
    let list: Vec<_> = entries.collect();
    let mut out = Vec::new();
    put_varint(&mut out, list.len() as u64);
    for (k, e) in list {
        put_bytes(&mut out, k.as_bytes());
        put_varint(&mut out, e.stamp.wall_ms);
        put_varint(&mut out, e.stamp.logical as u64);
        put_varint(&mut out, e.stamp.node as u64);
        match &e.code {
            Some(c) => {
                out.push(1);
                put_bytes(&mut out, c);
            }
            None => out.push(0),
        }
    }
    out
}

pub fn decode_entries(data: &[u8]) -> Result<Vec<(String, Entry)>, String> {
    let mut at = 0;
    let n = get_varint(data, &mut at)?;
    let mut out = Vec::new();
    for _ in 0..n.min(MAX_LIBRARIES as u64 * 2) {
        let name = String::from_utf8_lossy(get_bytes(data, &mut at)?).into_owned();
        let wall_ms = get_varint(data, &mut at)?;
        let logical = get_varint(data, &mut at)? as u32;
        let node = get_varint(data, &mut at)? as u32;
        let live = *data.get(at).ok_or("truncated library entry")?;
        at += 1;
        let code = match live {
            0 => None,
            1 => Some(Bytes::copy_from_slice(get_bytes(data, &mut at)?)),
            _ => return Err("bad library entry".into()),
        };
        out.push((
            name,
            Entry {
                stamp: Stamp {
                    wall_ms,
                    logical,
                    node,
                },
                code,
            },
        ));
    }
    if at != data.len() {
        return Err("trailing bytes after library entries".into());
    }
    Ok(out)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A valid library or function name: letters, digits and `_`, at least one.
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_')
}

/// Parses the `#!<engine> name=<name>` first line; returns the library name.
pub fn parse_metadata(code: &[u8]) -> Result<String, String> {
    if !code.starts_with(b"#!") {
        return Err("ERR Missing library metadata".into());
    }
    let Some(end) = code.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid library metadata".into());
    };
    let line = bytes::Bytes::copy_from_slice(&code[..end]);
    let parts = lattice_resp::request::split_inline(&line).ok_or("ERR Invalid library metadata")?;
    if parts.is_empty() {
        return Err("ERR Invalid library metadata".into());
    }
    let engine = &parts[0][2..];
    let mut name: Option<&[u8]> = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err(
                    "ERR Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            name = Some(&part[5..]);
            continue;
        }
        return Err(format!(
            "ERR Invalid metadata value given: {}",
            String::from_utf8_lossy(part)
        ));
    }
    let Some(name) = name else {
        return Err("ERR Library name was not given".into());
    };
    if !valid_name(name) {
        return Err(format!("ERR {NAME_RULE}"));
    }
    if !engine.eq_ignore_ascii_case(b"lua") {
        return Err(format!(
            "ERR Engine '{}' not found",
            String::from_utf8_lossy(engine)
        ));
    }
    Ok(String::from_utf8_lossy(name).into_owned())
}

/// Reads `redis.register_function`'s arguments, positional or named, with Redis's errors.
fn read_register_args(lua: &Lua, args: MultiValue) -> Result<FunctionDef, String> {
    let args: Vec<LuaValue> = args.into_iter().collect();
    let def = match args.as_slice() {
        [LuaValue::Table(t)] => read_named(t)?,
        [_] => return Err("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).".into()),
        [name, callback] => {
            let name = lua_string(name)
                .ok_or("first argument to redis.register_function must be a string")?;
            let LuaValue::Function(func) = callback else {
                return Err("second argument to redis.register_function must be a function".into());
            };
            FunctionDef {
                name: String::from_utf8_lossy(&name).into_owned(),
                description: None,
                flags: 0,
                func: func.clone(),
            }
        }
        _ => return Err("wrong number of arguments to redis.register_function".into()),
    };
    let _ = lua;
    if !valid_name(def.name.as_bytes()) {
        return Err(NAME_RULE.into());
    }
    Ok(def)
}

fn read_named(t: &Table) -> Result<FunctionDef, String> {
    let mut name = None;
    let mut description = None;
    let mut func = None;
    let mut flags = 0u8;
    for pair in t.clone().pairs::<LuaValue, LuaValue>() {
        let (k, v) = pair.map_err(|e| e.to_string())?;
        let key = lua_string(&k)
            .ok_or("named argument key given to redis.register_function is not a string")?;
        let key = String::from_utf8_lossy(&key).to_ascii_lowercase();
        match key.as_str() {
            "function_name" => {
                let s = lua_string(&v).ok_or(
                    "function_name argument given to redis.register_function must be a string",
                )?;
                name = Some(String::from_utf8_lossy(&s).into_owned());
            }
            "description" => {
                let s = lua_string(&v).ok_or(
                    "description argument given to redis.register_function must be a string",
                )?;
                description = Some(Bytes::from(s));
            }
            "callback" => {
                let LuaValue::Function(f) = v else {
                    return Err(
                        "callback argument given to redis.register_function must be a function"
                            .into(),
                    );
                };
                func = Some(f);
            }
            "flags" => {
                let LuaValue::Table(ft) = v else {
                    return Err("flags argument to redis.register_function must be a table representing function flags".into());
                };
                for item in ft.sequence_values::<LuaValue>() {
                    let item = item.map_err(|e| e.to_string())?;
                    let LuaValue::String(s) = item else {
                        return Err("unknown flag given".into());
                    };
                    let s = s.as_bytes();
                    let bit = FLAG_NAMES
                        .iter()
                        .position(|n| n.as_bytes().eq_ignore_ascii_case(&s))
                        .ok_or("unknown flag given")?;
                    flags |= 1 << bit;
                }
            }
            _ => return Err("unknown argument given to redis.register_function".into()),
        }
    }
    let name = name.ok_or("redis.register_function must get a function name argument")?;
    let func = func.ok_or("redis.register_function must get a callback argument")?;
    Ok(FunctionDef {
        name,
        description,
        flags,
        func,
    })
}

/// A Lua string or number as bytes (Lua's `lua_isstring`).
fn lua_string(v: &LuaValue) -> Option<Vec<u8>> {
    match v {
        LuaValue::String(s) => Some(s.as_bytes().to_vec()),
        LuaValue::Integer(i) => Some(i.to_string().into_bytes()),
        LuaValue::Number(n) => Some(crate::cmd::script::basics::lua_number_text(*n).into_bytes()),
        _ => None,
    }
}

/// FUNCTION LOAD's error for a library whose code raised `text` while loading.
fn registering(text: &str) -> String {
    let text = text.strip_prefix("ERR ").unwrap_or(text);
    format!("ERR Error registering functions: ERR {text}")
}

/// The message of an error raised while a library loaded.
fn value_text(v: &LuaValue) -> String {
    match v {
        LuaValue::String(s) => s.to_string_lossy(),
        LuaValue::Error(e) => lua_error_text(e),
        LuaValue::Table(t) => t
            .raw_get::<String>("err")
            .unwrap_or_else(|_| "unknown error".into()),
        other => other.to_string().unwrap_or_default(),
    }
}

fn lua_error_text(e: &mlua::Error) -> String {
    match e {
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::CallbackError { cause, .. } => lua_error_text(cause),
        mlua::Error::WithContext { cause, .. } => lua_error_text(cause),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_lines() {
        assert_eq!(parse_metadata(b"#!lua name=lib\nx").unwrap(), "lib");
        assert_eq!(parse_metadata(b"#!LUA name=\"foo\"\nx").unwrap(), "foo");
        assert_eq!(
            parse_metadata(b"#! name=test\n").unwrap_err(),
            "ERR Engine '' not found"
        );
        assert_eq!(
            parse_metadata(b"#!lua name=test foo=bar\n").unwrap_err(),
            "ERR Invalid metadata value given: foo=bar"
        );
        assert_eq!(
            parse_metadata(b"#!lua\n").unwrap_err(),
            "ERR Library name was not given"
        );
        assert_eq!(
            parse_metadata(b"#!lua name=a name=b\n").unwrap_err(),
            "ERR Invalid metadata value, name argument was given multiple times"
        );
        assert_eq!(
            parse_metadata(b"return 1").unwrap_err(),
            "ERR Missing library metadata"
        );
        assert!(parse_metadata(b"#!lua name=a").is_err());
        assert!(parse_metadata(b"#!lua name=a-b\n").is_err());
    }

    #[test]
    fn entries_round_trip() {
        let mut m = BTreeMap::new();
        m.insert(
            "a".to_string(),
            Entry {
                stamp: Stamp {
                    wall_ms: 5,
                    logical: 2,
                    node: 3,
                },
                code: Some(Bytes::from_static(b"#!lua name=a\n")),
            },
        );
        m.insert(
            "b".to_string(),
            Entry {
                stamp: Stamp::default(),
                code: None,
            },
        );
        let data = encode_entries(m.iter());
        let back: BTreeMap<String, Entry> = decode_entries(&data).unwrap().into_iter().collect();
        assert_eq!(back, m);
        assert!(decode_entries(&data[..data.len() - 1]).is_err());
    }
}

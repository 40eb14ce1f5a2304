//! Running a script as a Lua coroutine that the instruction-count hook can suspend.
//!
//! This is the only place that talks to the Lua C API directly (mlua has no way to yield from a
//! hook on Lua 5.1, although Lua 5.1 itself supports it for count hooks: `lua_yield` from the
//! hook suspends the coroutine and the next `lua_resume` continues the interrupted
//! instruction). A suspended script keeps its whole Lua stack, so the node can return from the
//! handler, serve other inputs (with BUSY) and resume it later: see the module doc of
//! `cmd::script` and docs/ARCHITECTURE.md §13.
//!
//! Lua 5.1 can only suspend a coroutine when no C function or metamethod call sits between the
//! hook and the coroutine's entry (`pcall`, a `table.sort` comparator, an `__index` function,
//! a generic-`for` iterator written in Lua...). Lua 5.1 has no `lua_isyieldable`, so
//! [`can_yield`] reads the two counters `lua_yield` itself checks, through a mirror of the
//! start of Lua 5.1.5's `struct lua_State`. The mirror is verified when the interpreter starts
//! ([`layout_matches`]); if it ever did not match, scripts simply run to completion under the
//! instruction budget, as they did before suspension existed.
//!
//! `pcall` and `xpcall` are C functions, so a script looping inside one could never be
//! suspended (nor see SCRIPT KILL, nor let BUSY replies out). The prelude therefore runs the
//! function they call in a coroutine of its own that the hook may suspend too ([`adopt`]):
//! when the hook suspends that coroutine, the Lua wrapper around it (no C call in between)
//! suspends its own thread in turn, and so on up to the script's coroutine, which returns to
//! the node; resuming walks back down. Each suspended thread is marked as suspended by the hook
//! (the script's coroutine in [`HookState`], an adopted one in the table of adopted
//! coroutines), which tells it from a script's own `coroutine.yield`: that one passes through
//! unchanged. Marks are per thread because the hook may suspend the outer thread again before
//! the wrapper looked at the inner one. A coroutine is adopted only while the thread creating
//! it could itself be suspended, so the chain is unbroken whenever the hook acts.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

use bytes::Bytes;

use mlua::{ffi, Lua, Thread, Value as LuaValue};

/// Registry key of the light userdata pointing at the node's [`HookState`].
const HOOK_KEY: &CStr = c"lattice.hook";
/// Registry key of the weak-keyed table of the coroutines `pcall` runs its function in, which
/// the hook may suspend besides the script's own ([`adopt`]).
const ADOPTED_KEY: &CStr = c"lattice.adopted";

/// What the count hook reads and the node arms before each slice. Atomics only because the
/// interpreter is `Send`; a node runs one slice at a time.
pub(crate) struct HookState {
    /// The coroutine the hook may suspend, or null while the running script must finish in
    /// one go (inside EXEC, or if [`layout_matches`] failed).
    suspendable: AtomicPtr<ffi::lua_State>,
    /// Hook calls left before the current slice ends.
    slice_left: AtomicU64,
    /// Hook calls since the script last suspended (or started): the hard bound on code that
    /// cannot be suspended.
    unsuspended: AtomicU64,
    /// Hook calls allowed without a suspension.
    budget_steps: AtomicU64,
    /// The running script went over that bound: every later check fails too, and the wrapped
    /// `pcall`/`xpcall` re-raise, so the script cannot swallow its own stop.
    stopped: AtomicBool,
    /// The user-script line the coroutine was suspended at (0: unknown). Read in the hook:
    /// once suspended, Lua 5.1 reports the interrupted instruction's position one off.
    suspended_line: AtomicI64,
    /// The script's coroutine was last suspended by the hook (or by a `pcall` wrapper passing
    /// a suspension up), not by its own `coroutine.yield`; taken by [`resume`].
    hook_yielded: AtomicBool,
    /// The `redis.call` in progress, from [`command_functions`] to the running script's runner.
    pending: Mutex<Option<PendingCall>>,
}

/// What `redis.call`, `redis.pcall` or `redis.acl_check_cmd` was asked, read straight off the
/// Lua stack: Lua 5.1 lets a C function that received about 8,000 arguments push nothing more
/// (mlua's callbacks need a few slots), and a script may pass 7,999 with `unpack`, as Redis's
/// own tests do.
pub(crate) struct PendingCall {
    /// The command and its arguments (strings and numbers), or the error reply for others.
    pub(crate) args: Result<Vec<Bytes>, &'static str>,
    /// `redis.call` (and `acl_check_cmd`) raise an error reply; `redis.pcall` returns it.
    pub(crate) raise: bool,
}

impl HookState {
    pub(crate) fn new(budget_steps: u64) -> HookState {
        HookState {
            suspendable: AtomicPtr::new(std::ptr::null_mut()),
            slice_left: AtomicU64::new(0),
            unsuspended: AtomicU64::new(0),
            budget_steps: AtomicU64::new(budget_steps),
            stopped: AtomicBool::new(false),
            suspended_line: AtomicI64::new(0),
            hook_yielded: AtomicBool::new(false),
            pending: Mutex::new(None),
        }
    }

    /// The call [`command_functions`] just handed over.
    pub(crate) fn take_call(&self) -> Option<PendingCall> {
        self.pending.lock().expect("pending call lock").take()
    }

    /// True (once) if the script's coroutine was just suspended by the hook.
    fn take_hook_yield(&self) -> bool {
        self.hook_yielded.swap(false, Ordering::Relaxed)
    }

    /// A new script starts: nothing counted yet.
    pub(crate) fn reset(&self) {
        self.unsuspended.store(0, Ordering::Relaxed);
        self.stopped.store(false, Ordering::Relaxed);
    }

    /// Before a slice: `thread` may be suspended (if given) after `steps` hook calls.
    pub(crate) fn arm(&self, thread: Option<&Thread>, steps: u64) {
        let ptr = thread.map_or(std::ptr::null_mut(), |t| t.state());
        self.suspendable.store(ptr, Ordering::Relaxed);
        self.slice_left.store(steps, Ordering::Relaxed);
    }

    /// After a slice: nothing may be suspended until the next `arm`.
    pub(crate) fn disarm(&self) {
        self.suspendable
            .store(std::ptr::null_mut(), Ordering::Relaxed);
    }

    /// Sets the hook calls allowed without a suspension (loading a library gets less).
    pub(crate) fn set_budget(&self, steps: u64) {
        self.budget_steps.store(steps, Ordering::Relaxed);
    }

    pub(crate) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    /// The line of the user's script where the running script was last suspended.
    pub(crate) fn suspended_line(&self) -> Option<i64> {
        Some(self.suspended_line.load(Ordering::Relaxed)).filter(|&n| n > 0)
    }
}

/// Registers `state` for the hook. `state` must outlive `lua` (the node keeps both together).
pub(crate) fn register(lua: &Lua, state: &HookState) -> mlua::Result<()> {
    let ptr = state as *const HookState as *mut c_void;
    lua.set_named_registry_value(
        HOOK_KEY.to_str().expect("ascii key"),
        LuaValue::LightUserData(mlua::LightUserData(ptr)),
    )?;
    let adopted = lua.create_table()?;
    let weak_keys = lua.create_table()?;
    weak_keys.raw_set("__mode", "k")?;
    adopted.set_metatable(Some(weak_keys))?;
    lua.set_named_registry_value(ADOPTED_KEY.to_str().expect("ascii key"), adopted)
}

/// The C functions the prelude's `pcall` uses: `adopt(co)` makes the new coroutine `co` one
/// the hook may suspend, if the calling thread could be suspended itself right here (it is the
/// script's coroutine or an adopted one, armed for suspension, with no C call in between), and
/// returns whether it did; `took(co)` says (once) whether the adopted `co` was just suspended
/// by the hook; `pass()` suspends the calling thread as suspended by the hook.
pub(crate) fn pcall_functions(lua: &Lua) -> mlua::Result<[mlua::Function; 3]> {
    // SAFETY: the three read the registry and their arguments and push at most three values;
    // `pass` returns through lua_yield, as coroutine.yield does.
    unsafe {
        Ok([
            lua.create_c_function(adopt)?,
            lua.create_c_function(took)?,
            lua.create_c_function(pass)?,
        ])
    }
}

/// `redis.call`, `redis.pcall` and `redis.acl_check_cmd`: C functions that read their
/// arguments off the stack into a [`PendingCall`], empty the stack, and call the running
/// script's runner registered as `lattice.dispatch` (`lattice.acl_check`), returning its
/// result. C functions, not Lua wrappers: `return redis.call(..)` in a Lua function would be a
/// tail call and take the script's frame (and line number) with it.
pub(crate) fn command_functions(lua: &Lua) -> mlua::Result<[mlua::Function; 3]> {
    // SAFETY: the three read their arguments, empty the stack and call one registry function
    // with no Rust value alive across the call (an error raised by it unwinds through them).
    unsafe {
        Ok([
            lua.create_c_function(redis_call)?,
            lua.create_c_function(redis_pcall)?,
            lua.create_c_function(redis_acl_check)?,
        ])
    }
}

unsafe extern "C-unwind" fn redis_call(l: *mut ffi::lua_State) -> c_int {
    run_command(l, c"lattice.dispatch", true)
}

unsafe extern "C-unwind" fn redis_pcall(l: *mut ffi::lua_State) -> c_int {
    run_command(l, c"lattice.dispatch", false)
}

unsafe extern "C-unwind" fn redis_acl_check(l: *mut ffi::lua_State) -> c_int {
    run_command(l, c"lattice.acl_check", true)
}

unsafe fn run_command(l: *mut ffi::lua_State, runner: &CStr, raise: bool) -> c_int {
    let call = PendingCall {
        args: command_args(l),
        raise,
    };
    if let Some(state) = hook_state(l) {
        *state.pending.lock().expect("pending call lock") = Some(call);
    }
    ffi::lua_settop(l, 0);
    ffi::lua_getfield(l, ffi::LUA_REGISTRYINDEX, runner.as_ptr());
    ffi::lua_call(l, 0, 1);
    1
}

/// The arguments of a `redis.call`: strings and numbers only, as Redis requires.
unsafe fn command_args(l: *mut ffi::lua_State) -> Result<Vec<Bytes>, &'static str> {
    let n = ffi::lua_gettop(l);
    if n == 0 {
        return Err("ERR Please specify at least one argument for this redis lib call");
    }
    let mut out = Vec::with_capacity(n as usize);
    for i in 1..=n {
        match ffi::lua_type(l, i) {
            ffi::LUA_TSTRING => {
                let mut len = 0usize;
                let p = ffi::lua_tolstring(l, i, &mut len);
                out.push(Bytes::copy_from_slice(std::slice::from_raw_parts(
                    p as *const u8,
                    len,
                )));
            }
            ffi::LUA_TNUMBER => {
                let x = ffi::lua_tonumber(l, i);
                let whole = x.fract() == 0.0 && x.abs() < 9.2e18;
                out.push(Bytes::from(if whole {
                    (x as i64).to_string()
                } else {
                    super::basics::lua_number_text(x)
                }));
            }
            _ => return Err("ERR Lua redis lib command arguments must be strings or integers"),
        }
    }
    Ok(out)
}

/// The value of an adopted coroutine in the adopted table while it is suspended by the hook
/// (`true` otherwise).
const SUSPENDED_MARK: ffi::lua_Integer = 2;

unsafe extern "C-unwind" fn adopt(l: *mut ffi::lua_State) -> c_int {
    let ok = hook_state(l).is_some_and(|state| {
        let armed = state.suspendable.load(Ordering::Relaxed);
        !armed.is_null() && (l == armed || adopted(l)) && can_yield(l)
    }) && ffi::lua_type(l, 1) == ffi::LUA_TTHREAD;
    if ok {
        ffi::lua_getfield(l, ffi::LUA_REGISTRYINDEX, ADOPTED_KEY.as_ptr());
        adopt_argument(l);
        ffi::lua_pop(l, 1);
    }
    ffi::lua_pushboolean(l, ok as c_int);
    1
}

/// `adopted[first argument] = true`, the adopted table being on top of the stack.
unsafe fn adopt_argument(l: *mut ffi::lua_State) {
    ffi::lua_pushvalue(l, 1);
    ffi::lua_pushboolean(l, 1);
    ffi::lua_rawset(l, -3);
}

unsafe extern "C-unwind" fn took(l: *mut ffi::lua_State) -> c_int {
    ffi::lua_getfield(l, ffi::LUA_REGISTRYINDEX, ADOPTED_KEY.as_ptr());
    ffi::lua_pushvalue(l, 1);
    ffi::lua_rawget(l, -2);
    let marked = ffi::lua_type(l, -1) == ffi::LUA_TNUMBER;
    ffi::lua_pop(l, 1);
    if marked {
        adopt_argument(l);
    }
    ffi::lua_pop(l, 1);
    ffi::lua_pushboolean(l, marked as c_int);
    1
}

unsafe extern "C-unwind" fn pass(l: *mut ffi::lua_State) -> c_int {
    if let Some(state) = hook_state(l) {
        mark_suspended(l, state);
    }
    ffi::lua_yield(l, 0)
}

/// Marks `l` (about to be suspended) as suspended by the hook.
unsafe fn mark_suspended(l: *mut ffi::lua_State, state: &HookState) {
    if l == state.suspendable.load(Ordering::Relaxed) {
        state.hook_yielded.store(true, Ordering::Relaxed);
        return;
    }
    ffi::lua_getfield(l, ffi::LUA_REGISTRYINDEX, ADOPTED_KEY.as_ptr());
    ffi::lua_pushthread(l);
    // An existing key: setting its value allocates nothing (this also runs in the hook).
    ffi::lua_pushinteger(l, SUSPENDED_MARK);
    ffi::lua_rawset(l, -3);
    ffi::lua_pop(l, 1);
}

/// True if `l` is a coroutine [`adopt`] registered.
unsafe fn adopted(l: *mut ffi::lua_State) -> bool {
    ffi::lua_getfield(l, ffi::LUA_REGISTRYINDEX, ADOPTED_KEY.as_ptr());
    if ffi::lua_type(l, -1) != ffi::LUA_TTABLE {
        ffi::lua_pop(l, 1);
        return false;
    }
    ffi::lua_pushthread(l);
    ffi::lua_rawget(l, -2);
    let found = ffi::lua_toboolean(l, -1) != 0;
    ffi::lua_pop(l, 2);
    found
}

/// The node's [`HookState`], found through the registry of `l`'s interpreter.
unsafe fn hook_state<'a>(l: *mut ffi::lua_State) -> Option<&'a HookState> {
    ffi::lua_getfield(l, ffi::LUA_REGISTRYINDEX, HOOK_KEY.as_ptr());
    let state = ffi::lua_touserdata(l, -1) as *const HookState;
    ffi::lua_pop(l, 1);
    // SAFETY: the registry holds a pointer to the HookState owned next to this interpreter.
    state.as_ref()
}

/// Installs the count hook on `thread`, called every `every` VM instructions.
pub(crate) fn install_hook(lua: &Lua, thread: &Thread, every: u32) {
    // SAFETY: `thread` is a live coroutine of `lua`; lua_sethook only stores the hook.
    unsafe {
        lua.exec_raw::<()>((), |_| {
            ffi::lua_sethook(
                thread.state(),
                Some(count_hook),
                ffi::LUA_MASKCOUNT,
                every as c_int,
            );
        })
        .expect("setting a hook cannot fail");
    }
}

/// The error a script gets when it runs [`super::INSTRUCTION_BUDGET`] instructions without
/// reaching a point where it can be suspended.
pub(crate) const STOP_MESSAGE: &CStr = c"ERR Script exceeded its execution budget and was stopped (a script may run at most 500000000 Lua instructions without a point where it can be suspended)";

/// The count hook: counts, stops a script over budget with an error, and suspends the
/// script's coroutine when its slice is used up and it is at a point Lua can suspend.
unsafe extern "C-unwind" fn count_hook(l: *mut ffi::lua_State, _ar: *mut ffi::lua_Debug) {
    let Some(state) = hook_state(l) else {
        return;
    };
    let steps = state.unsuspended.fetch_add(1, Ordering::Relaxed) + 1;
    if state.stopped() || steps > state.budget_steps.load(Ordering::Relaxed) {
        state.stopped.store(true, Ordering::Relaxed);
        ffi::lua_pushstring(l, STOP_MESSAGE.as_ptr());
        // No Rust value with a destructor is alive here: unwinding past this frame is sound.
        ffi::lua_error(l);
    }
    let left = state.slice_left.load(Ordering::Relaxed);
    if left > 0 {
        state.slice_left.store(left - 1, Ordering::Relaxed);
        return;
    }
    let armed = state.suspendable.load(Ordering::Relaxed);
    if !armed.is_null() && (l == armed || adopted(l)) && can_yield(l) {
        state.unsuspended.store(0, Ordering::Relaxed);
        let line = user_script_line(l).unwrap_or(0);
        state.suspended_line.store(line, Ordering::Relaxed);
        mark_suspended(l, state);
        ffi::lua_yield(l, 0);
    }
}

/// The start of Lua 5.1.5's `struct lua_State` (lstate.h), up to the two call counters
/// `lua_yield` compares. Layout checked at start-up by [`layout_matches`].
#[repr(C)]
struct LuaStateHead {
    next: *mut c_void,
    tt: u8,
    marked: u8,
    status: u8,
    top: *mut c_void,
    base: *mut c_void,
    l_g: *mut c_void,
    ci: *mut c_void,
    savedpc: *const c_void,
    stack_last: *mut c_void,
    stack: *mut c_void,
    end_ci: *mut c_void,
    base_ci: *mut c_void,
    stacksize: c_int,
    size_ci: c_int,
    n_ccalls: u16,
    base_ccalls: u16,
}

/// C calls nested inside the coroutine `l` since it was resumed (0: `lua_yield` is allowed).
unsafe fn nested_c_calls(l: *mut ffi::lua_State) -> i64 {
    let head = &*(l as *const LuaStateHead);
    head.n_ccalls as i64 - head.base_ccalls as i64
}

/// True when `lua_yield(l)` would succeed (it raises "attempt to yield across metamethod/C-call
/// boundary" otherwise).
unsafe fn can_yield(l: *mut ffi::lua_State) -> bool {
    nested_c_calls(l) == 0
}

/// Probe for [`layout_matches`]: returns the nested C call count and the status byte as the
/// mirror reads them.
unsafe extern "C-unwind" fn probe(l: *mut ffi::lua_State) -> c_int {
    ffi::lua_pushinteger(l, nested_c_calls(l) as ffi::lua_Integer);
    let head = &*(l as *const LuaStateHead);
    ffi::lua_pushinteger(l, head.status as ffi::lua_Integer);
    2
}

/// Checks the [`LuaStateHead`] mirror against the running interpreter: inside a coroutine a
/// direct call must read 0 nested C calls, a call under `pcall` 1, a call under two `pcall`s
/// 2, and the status byte of a running coroutine must read 0.
pub(crate) fn layout_matches(lua: &Lua, hook: &HookState) -> bool {
    let check = || -> mlua::Result<bool> {
        // SAFETY: `probe` only reads the state it is called with and pushes two integers.
        let probe = unsafe { lua.create_c_function(probe)? };
        let body: mlua::Function = lua
            .load(
                r#"
                local probe, rawpcall = ...
                return function()
                  local a, s = probe()
                  local _, b = rawpcall(probe)
                  local _, _, c = rawpcall(rawpcall, probe)
                  return a == 0 and s == 0 and b == 1 and c == 2
                end
                "#,
            )
            .set_name("=probe")
            .call((probe, lua.globals().raw_get::<mlua::Function>("pcall")?))?;
        let thread = lua.create_thread(body)?;
        match resume(lua, &thread, hook)? {
            Resumed::Returned(LuaValue::Boolean(ok)) => Ok(ok),
            _ => Ok(false),
        }
    };
    check().unwrap_or(false)
}

/// How one resumption of a script's coroutine ended.
pub(crate) enum Resumed {
    /// Suspended by the hook; resume it again later.
    Suspended,
    /// Returned: its first return value (nil if none).
    Returned(LuaValue),
    /// Raised: the error value, and the line of the innermost user-script frame if any.
    Raised(LuaValue, Option<i64>),
}

/// Resumes `thread` (started or suspended) until it returns, raises or is suspended by the
/// hook. A `coroutine.yield` of the script itself (outside any coroutine of its own) is an
/// error, as it is in Redis (whose scripts run inside a C `pcall`).
pub(crate) fn resume(lua: &Lua, thread: &Thread, hook: &HookState) -> mlua::Result<Resumed> {
    let th = thread.state();
    let by_hook = || hook.take_hook_yield();
    // SAFETY: `th` is a coroutine of `lua` that is not running; values move between its stack
    // and the calling state with lua_xmove, and at most three values are pushed.
    let (code, value, line): (i64, LuaValue, Option<i64>) = unsafe {
        lua.exec_raw((), |state| {
            let mut nres: c_int = 0;
            let status = ffi::lua_resume(th, state, 0, &mut nres);
            match status {
                ffi::LUA_YIELD if by_hook() => {
                    ffi::lua_pushinteger(state, 1);
                    ffi::lua_pushnil(state);
                    ffi::lua_pushnil(state);
                }
                ffi::LUA_YIELD => {
                    let line = user_script_line(th);
                    ffi::lua_pushinteger(state, 2);
                    ffi::lua_pushstring(
                        state,
                        c"attempt to yield across metamethod/C-call boundary".as_ptr(),
                    );
                    match line {
                        Some(n) => ffi::lua_pushinteger(state, n as ffi::lua_Integer),
                        None => ffi::lua_pushnil(state),
                    }
                }
                ffi::LUA_OK => {
                    ffi::lua_pushinteger(state, 0);
                    if nres > 0 {
                        ffi::lua_settop(th, 1);
                        ffi::lua_xmove(th, state, 1);
                    } else {
                        ffi::lua_pushnil(state);
                    }
                    ffi::lua_pushnil(state);
                }
                _ => {
                    let line = user_script_line(th);
                    ffi::lua_pushinteger(state, 2);
                    ffi::lua_xmove(th, state, 1);
                    match line {
                        Some(n) => ffi::lua_pushinteger(state, n as ffi::lua_Integer),
                        None => ffi::lua_pushnil(state),
                    }
                }
            }
        })?
    };
    Ok(match code {
        1 => Resumed::Suspended,
        0 => Resumed::Returned(value),
        _ => Resumed::Raised(value, line),
    })
}

/// Walks the coroutine's stack from the innermost frame to the first one in the user's
/// script and returns its current line (for a coroutine that is running or failed).
unsafe fn user_script_line(th: *mut ffi::lua_State) -> Option<i64> {
    for level in 0..64 {
        let mut ar: ffi::lua_Debug = std::mem::zeroed();
        if ffi::lua_getstack(th, level, &mut ar) == 0 {
            break;
        }
        if ffi::lua_getinfo(th, c"Sl".as_ptr(), &mut ar) == 0 || ar.source.is_null() {
            continue;
        }
        let source = CStr::from_ptr(ar.source).to_bytes();
        if source == b"@user_script" || source == b"@user_function" {
            return (ar.currentline > 0).then_some(ar.currentline as i64);
        }
    }
    None
}

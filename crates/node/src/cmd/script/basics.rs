//! What the script engine, EVAL and function libraries share without depending on one
//! another: the hook's instruction budgets, the version scripts see, and Lua's number text.
//! A leaf module, so `Core` (which holds the engine) never imports the command modules back.

/// Lua VM instructions between two calls of the count hook: cheap enough to be invisible
/// (one callback per 10,000 instructions) and fine enough to suspend or stop a loop promptly.
pub(crate) const HOOK_STEP: u32 = 10_000;
/// Instructions a script may execute without being suspended: about two seconds of a tight
/// loop on a current core. Only code Lua cannot suspend (inside `pcall`, a comparator, a
/// metamethod) or a script inside EXEC can get this far.
pub const INSTRUCTION_BUDGET: u64 = 500_000_000;
/// The Redis version scripts see as `redis.REDIS_VERSION` (and as a number, 0x00MMmmpp).
pub const REDIS_VERSION: &str = "7.0.15";
pub const REDIS_VERSION_NUM: i64 = 0x0007_000f;

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

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
    format_g(n, 14)
}

/// `n` as C's `%.<precision>g` prints it (precision 1 to 17): Lua's `tostring` uses 14, and so
/// does cjson by default (`cjson.encode_number_precision`).
pub fn format_g(n: f64, precision: usize) -> String {
    debug_assert!((1..=17).contains(&precision));
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if n.is_infinite() {
        return if n < 0.0 { "-inf" } else { "inf" }.into();
    }
    if n == 0.0 {
        return if n.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let digits = precision - 1;
    let sci = format!("{n:.digits$e}");
    let (mantissa, exp) = sci.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("exponent");
    if exp < -4 || exp >= precision as i32 {
        let m = trim_fraction(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", exp.abs());
    }
    let decimals = (digits as i32 - exp).max(0) as usize;
    trim_fraction(&format!("{n:.decimals$}")).to_string()
}

fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// The script flags of Redis 7.0 (a function's `flags`, an EVAL script's shebang `flags=`),
/// in the order FUNCTION LIST shows them; bit `i` of a flag set is `FLAG_NAMES[i]`.
pub const FLAG_NAMES: [&str; 5] = [
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];
pub const NO_WRITES: u8 = 1;
pub const ALLOW_OOM: u8 = 1 << 1;
// allow-stale (bit 2) changes nothing: a Lattice node is never a replica with its link to a
// primary down. allow-cross-slot-keys (bit 4) neither: see docs/ARCHITECTURE.md §66.
pub const NO_CLUSTER: u8 = 1 << 3;

/// An EVAL script's first line `#!lua [flags=a,b,...]`, as Redis 7.0 reads it: `Ok(None)`
/// for a script without one (Redis's compatibility mode, where the commands it runs decide),
/// else its flags and the length of the line (which is left out when the script compiles, its
/// line break kept so that line numbers stay the script's). Errors are Redis's replies.
pub fn parse_shebang(body: &[u8]) -> Result<Option<(u8, usize)>, String> {
    if !body.starts_with(b"#!") {
        return Ok(None);
    }
    let Some(len) = body.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid script shebang".into());
    };
    let text = String::from_utf8_lossy(&body[..len]);
    let mut parts = text.split([' ', '\t', '\r']).filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or("");
    if engine != "#!lua" {
        return Err(format!("ERR Unexpected engine in script shebang: {engine}"));
    }
    let mut flags = 0u8;
    for part in parts {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {part}"));
        };
        for name in list.split(',').filter(|f| !f.is_empty()) {
            let Some(bit) = FLAG_NAMES.iter().position(|f| *f == name) else {
                return Err(format!("ERR Unexpected flag in script shebang: {name}"));
            };
            flags |= 1 << bit;
        }
    }
    Ok(Some((flags, len)))
}

/// How a Lua table's keys look, read without keeping them: the number of pairs, and the
/// largest key when every key is a positive integer (a number: a string key never counts,
/// whatever it reads as). Encoders walk tables twice (shape, then values) instead of
/// collecting the pairs: each value held from Rust takes a slot of the interpreter's reference
/// stack, which Lua 5.1 caps near 8,000.
pub(crate) fn table_shape(t: &mlua::Table) -> mlua::Result<(usize, Option<f64>)> {
    let mut count = 0usize;
    let mut max = Some(0.0f64);
    for pair in t.pairs::<mlua::Value, mlua::Value>() {
        let (k, _) = pair?;
        count += 1;
        let n = match k {
            mlua::Value::Integer(i) => Some(i as f64),
            mlua::Value::Number(n) => Some(n),
            _ => None,
        };
        max = match (max, n) {
            (Some(m), Some(n)) if n >= 1.0 && n.fract() == 0.0 => Some(m.max(n)),
            _ => None,
        };
    }
    Ok((count, max))
}

//! The `cjson` table scripts see, as Redis loads lua-cjson 2.1: `cjson.encode`,
//! `cjson.decode`, `cjson.null`, the configuration functions and `cjson.new`. Written here in
//! Rust against the documented behaviour (formats, defaults, error wording), not a port.
//!
//! Encoding: a table whose keys are all positive integers is an array (`null` in the holes),
//! unless it is "excessively sparse" (`encode_sparse_array`); any other table is an object
//! whose keys must be strings or numbers; the empty table is `{}`. Numbers use `%.14g`
//! (`encode_number_precision`); NaN and infinities are refused unless
//! `encode_invalid_numbers` allows them. `/` is escaped as `\/`, as lua-cjson does.
//!
//! Decoding: `null` is `cjson.null` (a NULL light userdata), numbers are Lua numbers, and with
//! `decode_invalid_numbers` (on by default) hexadecimal, `inf` and `nan` are accepted.
//!
//! Bounds: nesting is limited by `encode_max_depth` / `decode_max_depth` (1000 by default, as
//! lua-cjson) and never beyond [`MAX_NESTING`] (256), whatever a script configures, because
//! both directions recurse on the node's stack; an encoded text may not exceed [`MAX_OUTPUT_BYTES`]
//! (a table can reference one large string many times, so the output is not bounded by the
//! Lua heap).
//!
//! The configuration belongs to the interpreter (it outlives the script that set it, as in
//! Redis); scripts' effects are replicated, never their code, so it is node-local state.

use std::sync::{Arc, Mutex};

use mlua::{LightUserData, Lua, MultiValue, Table, Value as LuaValue};

use super::basics::{format_g, table_shape};

/// Deepest nesting encoded or decoded, whatever the configured depth (see the module doc):
/// both directions recurse on the node's stack, two frames per level, and a test thread's
/// stack in a debug build holds a few hundred levels at most. (Lua 5.1 itself stops nested
/// C calls at 200.)
pub const MAX_NESTING: i64 = 256;
/// Largest text `cjson.encode` produces.
pub const MAX_OUTPUT_BYTES: usize = 512 << 20;

/// What `encode_invalid_numbers` does with NaN and the infinities.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Invalid {
    Refuse,
    /// `NaN`, `Infinity`, `-Infinity` (JavaScript's spellings).
    Allow,
    AsNull,
}

/// One cjson instance's settings, with lua-cjson's defaults.
#[derive(Clone, Copy, Debug)]
struct Config {
    sparse_convert: bool,
    sparse_ratio: i64,
    sparse_safe: i64,
    encode_max_depth: i64,
    decode_max_depth: i64,
    precision: i64,
    keep_buffer: bool,
    encode_invalid: Invalid,
    decode_invalid: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            precision: 14,
            keep_buffer: true,
            encode_invalid: Invalid::Refuse,
            decode_invalid: true,
        }
    }
}

type Shared = Arc<Mutex<Config>>;

fn get(cfg: &Shared) -> Config {
    *cfg.lock().expect("cjson settings lock")
}

/// A new `cjson` table with default settings.
pub(crate) fn library(lua: &Lua) -> mlua::Result<Table> {
    let cfg: Shared = Arc::new(Mutex::new(Config::default()));
    let t = lua.create_table()?;
    let c = cfg.clone();
    t.raw_set(
        "encode",
        lua.create_function(move |lua, args: MultiValue| {
            let [v] = one_argument(args)?;
            let mut enc = Encoder {
                cfg: get(&c),
                out: Vec::new(),
            };
            enc.value(&v, 0).map_err(mlua::Error::runtime)?;
            lua.create_string(&enc.out)
        })?,
    )?;
    let c = cfg.clone();
    t.raw_set(
        "decode",
        lua.create_function(move |lua, args: MultiValue| {
            let [v] = one_argument(args)?;
            let text = match v {
                LuaValue::String(s) => s.as_bytes().to_vec(),
                LuaValue::Integer(i) => i.to_string().into_bytes(),
                LuaValue::Number(n) => format_g(n, 14).into_bytes(),
                other => {
                    return Err(mlua::Error::runtime(format!(
                        "bad argument #1 to 'decode' (string expected, got {})",
                        type_name(&other)
                    )))
                }
            };
            let cfg = get(&c);
            let mut dec = Decoder {
                lua,
                s: &text,
                pos: 0,
                max_depth: cfg.decode_max_depth.min(MAX_NESTING),
                invalid_ok: cfg.decode_invalid,
            };
            dec.document()
        })?,
    )?;
    setting_functions(lua, &t, &cfg)?;
    t.raw_set(
        "new",
        lua.create_function(|lua, _: MultiValue| library(lua))?,
    )?;
    t.raw_set("null", null())?;
    t.raw_set("_NAME", "cjson")?;
    t.raw_set("_VERSION", "2.1.0")?;
    Ok(t)
}

/// `cjson.null`.
fn null() -> LuaValue {
    LuaValue::LightUserData(LightUserData(std::ptr::null_mut()))
}

fn one_argument(args: MultiValue) -> mlua::Result<[LuaValue; 1]> {
    let v: Vec<LuaValue> = args.into_iter().collect();
    <[LuaValue; 1]>::try_from(v)
        .map_err(|_| mlua::Error::runtime("bad argument #1 to '?' (expected 1 argument)"))
}

/// A Lua number's value (mlua reads integral ones as integers).
fn number(v: &LuaValue) -> Option<f64> {
    match v {
        LuaValue::Integer(i) => Some(*i as f64),
        LuaValue::Number(n) => Some(*n),
        _ => None,
    }
}

/// Lua's name for a value's type, as error messages print it.
fn type_name(v: &LuaValue) -> &'static str {
    match v {
        LuaValue::Nil => "nil",
        LuaValue::Boolean(_) => "boolean",
        LuaValue::Integer(_) | LuaValue::Number(_) => "number",
        LuaValue::String(_) => "string",
        LuaValue::Table(_) => "table",
        LuaValue::Function(_) => "function",
        LuaValue::Thread(_) => "thread",
        _ => "userdata",
    }
}

/// The configuration functions: each sets its option(s) when given arguments and returns
/// the current value(s).
fn setting_functions(lua: &Lua, t: &Table, cfg: &Shared) -> mlua::Result<()> {
    fn field<'a>(c: &'a mut Config, name: &str) -> &'a mut i64 {
        match name {
            "encode_max_depth" => &mut c.encode_max_depth,
            "decode_max_depth" => &mut c.decode_max_depth,
            _ => &mut c.precision,
        }
    }
    for (name, lo, hi) in [
        ("encode_max_depth", 1, i32::MAX as i64),
        ("decode_max_depth", 1, i32::MAX as i64),
        ("encode_number_precision", 1, 14),
    ] {
        let c = cfg.clone();
        t.raw_set(
            name,
            lua.create_function(move |_, args: MultiValue| {
                let mut cfg = c.lock().expect("cjson settings lock");
                if let Some(v) = args.front().filter(|v| !v.is_nil()) {
                    *field(&mut cfg, name) = integer_in(v, lo, hi, name)?;
                }
                Ok(*field(&mut cfg, name))
            })?,
        )?;
    }
    fn flag<'a>(c: &'a mut Config, name: &str) -> &'a mut bool {
        match name {
            "encode_keep_buffer" => &mut c.keep_buffer,
            _ => &mut c.decode_invalid,
        }
    }
    for name in ["encode_keep_buffer", "decode_invalid_numbers"] {
        let c = cfg.clone();
        t.raw_set(
            name,
            lua.create_function(move |_, args: MultiValue| {
                let mut cfg = c.lock().expect("cjson settings lock");
                if let Some(v) = args.front().filter(|v| !v.is_nil()) {
                    *flag(&mut cfg, name) = switch(v, name)?;
                }
                Ok(*flag(&mut cfg, name))
            })?,
        )?;
    }
    let c = cfg.clone();
    t.raw_set(
        "encode_invalid_numbers",
        lua.create_function(move |lua, args: MultiValue| {
            let mut cfg = c.lock().expect("cjson settings lock");
            if let Some(v) = args.front().filter(|v| !v.is_nil()) {
                let is_null = matches!(v, LuaValue::String(s) if s.as_bytes().as_ref() == b"null");
                cfg.encode_invalid = if is_null {
                    Invalid::AsNull
                } else if switch(v, "encode_invalid_numbers")? {
                    Invalid::Allow
                } else {
                    Invalid::Refuse
                };
            }
            Ok(match cfg.encode_invalid {
                Invalid::AsNull => LuaValue::String(lua.create_string("null")?),
                other => LuaValue::Boolean(other == Invalid::Allow),
            })
        })?,
    )?;
    let c = cfg.clone();
    t.raw_set(
        "encode_sparse_array",
        lua.create_function(move |_, args: MultiValue| {
            let mut cfg = c.lock().expect("cjson settings lock");
            let args: Vec<LuaValue> = args.into_iter().collect();
            if let Some(v) = args.first().filter(|v| !v.is_nil()) {
                cfg.sparse_convert = switch(v, "encode_sparse_array")?;
            }
            if let Some(v) = args.get(1).filter(|v| !v.is_nil()) {
                cfg.sparse_ratio = integer_in(v, 0, i32::MAX as i64, "encode_sparse_array")?;
            }
            if let Some(v) = args.get(2).filter(|v| !v.is_nil()) {
                cfg.sparse_safe = integer_in(v, 0, i32::MAX as i64, "encode_sparse_array")?;
            }
            Ok((cfg.sparse_convert, cfg.sparse_ratio, cfg.sparse_safe))
        })?,
    )?;
    Ok(())
}

fn integer_in(v: &LuaValue, lo: i64, hi: i64, name: &str) -> mlua::Result<i64> {
    let n = match v {
        LuaValue::Integer(i) => Some(*i),
        LuaValue::Number(n) if n.fract() == 0.0 => Some(*n as i64),
        LuaValue::String(s) => s.to_str().ok().and_then(|t| t.trim().parse().ok()),
        _ => None,
    };
    n.filter(|n| (lo..=hi).contains(n)).ok_or_else(|| {
        mlua::Error::runtime(format!(
            "bad argument #1 to '{name}' (expected integer between {lo} and {hi})"
        ))
    })
}

/// A boolean option: `true`/`false` or `"on"`/`"off"`.
fn switch(v: &LuaValue, name: &str) -> mlua::Result<bool> {
    match v {
        LuaValue::Boolean(b) => Ok(*b),
        LuaValue::String(s) if s.as_bytes().as_ref() == b"on" => Ok(true),
        LuaValue::String(s) if s.as_bytes().as_ref() == b"off" => Ok(false),
        other => Err(mlua::Error::runtime(format!(
            "bad argument #1 to '{name}' (invalid option '{}')",
            other.to_string().unwrap_or_default()
        ))),
    }
}

struct Encoder {
    cfg: Config,
    out: Vec<u8>,
}

impl Encoder {
    fn value(&mut self, v: &LuaValue, depth: i64) -> Result<(), String> {
        match v {
            LuaValue::Nil => self.out.extend_from_slice(b"null"),
            LuaValue::LightUserData(p) if p.0.is_null() => self.out.extend_from_slice(b"null"),
            LuaValue::Boolean(true) => self.out.extend_from_slice(b"true"),
            LuaValue::Boolean(false) => self.out.extend_from_slice(b"false"),
            LuaValue::Integer(i) => self.number(*i as f64)?,
            LuaValue::Number(n) => self.number(*n)?,
            LuaValue::String(s) => self.string(&s.as_bytes())?,
            LuaValue::Table(t) => self.table(t, depth + 1)?,
            other => {
                return Err(format!(
                    "Cannot serialise {}: type not supported",
                    type_name(other)
                ))
            }
        }
        Ok(())
    }

    fn number(&mut self, n: f64) -> Result<(), String> {
        if !n.is_finite() {
            let text: &[u8] = match self.cfg.encode_invalid {
                Invalid::Refuse => {
                    return Err("Cannot serialise number: must not be NaN or Inf".into())
                }
                Invalid::AsNull => b"null",
                Invalid::Allow if n.is_nan() => b"NaN",
                Invalid::Allow if n > 0.0 => b"Infinity",
                Invalid::Allow => b"-Infinity",
            };
            self.out.extend_from_slice(text);
            return Ok(());
        }
        let precision = self.cfg.precision.clamp(1, 14) as usize;
        self.out
            .extend_from_slice(format_g(n, precision).as_bytes());
        Ok(())
    }

    fn string(&mut self, s: &[u8]) -> Result<(), String> {
        if self.out.len() + s.len() > MAX_OUTPUT_BYTES {
            return Err(format!(
                "Cannot serialise: the text would exceed {MAX_OUTPUT_BYTES} bytes"
            ));
        }
        self.out.push(b'"');
        for &b in s {
            match b {
                b'"' => self.out.extend_from_slice(b"\\\""),
                b'\\' => self.out.extend_from_slice(b"\\\\"),
                b'/' => self.out.extend_from_slice(b"\\/"),
                b'\n' => self.out.extend_from_slice(b"\\n"),
                b'\r' => self.out.extend_from_slice(b"\\r"),
                b'\t' => self.out.extend_from_slice(b"\\t"),
                0x08 => self.out.extend_from_slice(b"\\b"),
                0x0c => self.out.extend_from_slice(b"\\f"),
                0..=0x1f | 0x7f => self.out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
                _ => self.out.push(b),
            }
        }
        self.out.push(b'"');
        Ok(())
    }

    fn table(&mut self, t: &Table, depth: i64) -> Result<(), String> {
        if depth > self.cfg.encode_max_depth.min(MAX_NESTING) {
            return Err(format!("Cannot serialise, excessive nesting ({depth})"));
        }
        match self.array_length(t)? {
            Some(len) => {
                self.out.push(b'[');
                for i in 1..=len {
                    if i > 1 {
                        self.out.push(b',');
                    }
                    let v: LuaValue = t.raw_get(i).map_err(|e| e.to_string())?;
                    self.value(&v, depth)?;
                }
                self.out.push(b']');
            }
            None => {
                self.out.push(b'{');
                for (n, pair) in t.pairs::<LuaValue, LuaValue>().enumerate() {
                    let (k, v) = pair.map_err(|e| e.to_string())?;
                    if n > 0 {
                        self.out.push(b',');
                    }
                    match &k {
                        LuaValue::String(s) => self.string(&s.as_bytes())?,
                        LuaValue::Integer(_) | LuaValue::Number(_) => {
                            self.out.push(b'"');
                            self.number(number(&k).expect("a number key"))?;
                            self.out.push(b'"');
                        }
                        other => {
                            return Err(format!(
                                "Cannot serialise {}: table key must be a number or string",
                                type_name(other)
                            ))
                        }
                    }
                    self.out.push(b':');
                    self.value(&v, depth)?;
                }
                self.out.push(b'}');
            }
        }
        Ok(())
    }

    /// The length to encode a table as an array, or None for an object: all keys positive
    /// integers and the array not excessively sparse (or that refused, as configured).
    fn array_length(&self, t: &Table) -> Result<Option<u64>, String> {
        let (items, max) = table_shape(t).map_err(|e| e.to_string())?;
        let Some(max) = max.filter(|_| items > 0) else {
            return Ok(None);
        };
        let cfg = &self.cfg;
        let items = items as f64;
        if cfg.sparse_ratio > 0
            && max > items * cfg.sparse_ratio as f64
            && max > cfg.sparse_safe as f64
        {
            if cfg.sparse_convert {
                return Ok(None);
            }
            return Err("Cannot serialise table: excessively sparse array".into());
        }
        Ok(Some(max as u64))
    }
}

/// A JSON token, with lua-cjson's names for error messages.
enum Token {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str(Vec<u8>),
    Num(f64),
    Bool(bool),
    Null,
    Colon,
    Comma,
    End,
    Error(&'static str),
}

impl Token {
    fn name(&self) -> &'static str {
        match self {
            Token::ObjBegin => "T_OBJ_BEGIN",
            Token::ObjEnd => "T_OBJ_END",
            Token::ArrBegin => "T_ARR_BEGIN",
            Token::ArrEnd => "T_ARR_END",
            Token::Str(_) => "T_STRING",
            Token::Num(_) => "T_NUMBER",
            Token::Bool(_) => "T_BOOLEAN",
            Token::Null => "T_NULL",
            Token::Colon => "T_COLON",
            Token::Comma => "T_COMMA",
            Token::End => "T_END",
            Token::Error(e) => e,
        }
    }
}

struct Decoder<'a> {
    lua: &'a Lua,
    s: &'a [u8],
    pos: usize,
    max_depth: i64,
    invalid_ok: bool,
}

impl Decoder<'_> {
    fn document(&mut self) -> mlua::Result<LuaValue> {
        let (tok, at) = self.next();
        let v = self.value(tok, at, 0)?;
        let (tok, at) = self.next();
        if !matches!(tok, Token::End) {
            return Err(expected("the end", &tok, at));
        }
        Ok(v)
    }

    fn value(&mut self, tok: Token, at: usize, depth: i64) -> mlua::Result<LuaValue> {
        Ok(match tok {
            Token::ObjBegin => self.object(depth + 1)?,
            Token::ArrBegin => self.array(depth + 1)?,
            Token::Str(s) => LuaValue::String(self.lua.create_string(&s)?),
            Token::Num(n) => LuaValue::Number(n),
            Token::Bool(b) => LuaValue::Boolean(b),
            Token::Null => null(),
            other => return Err(expected("value", &other, at)),
        })
    }

    fn descend(&self, depth: i64) -> mlua::Result<()> {
        if depth > self.max_depth {
            return Err(mlua::Error::runtime(format!(
                "Found too many nested data structures ({depth}) at character {}",
                self.pos
            )));
        }
        Ok(())
    }

    fn object(&mut self, depth: i64) -> mlua::Result<LuaValue> {
        self.descend(depth)?;
        let t = self.lua.create_table()?;
        let (mut tok, mut at) = self.next();
        if matches!(tok, Token::ObjEnd) {
            return Ok(LuaValue::Table(t));
        }
        loop {
            let Token::Str(key) = tok else {
                return Err(expected("object key string", &tok, at));
            };
            let (colon, at_colon) = self.next();
            if !matches!(colon, Token::Colon) {
                return Err(expected("colon", &colon, at_colon));
            }
            let (vt, vat) = self.next();
            let v = self.value(vt, vat, depth)?;
            t.raw_set(self.lua.create_string(&key)?, v)?;
            let (sep, at_sep) = self.next();
            match sep {
                Token::ObjEnd => return Ok(LuaValue::Table(t)),
                Token::Comma => (tok, at) = self.next(),
                other => return Err(expected("comma or object end", &other, at_sep)),
            }
        }
    }

    fn array(&mut self, depth: i64) -> mlua::Result<LuaValue> {
        self.descend(depth)?;
        let t = self.lua.create_table()?;
        let (mut tok, mut at) = self.next();
        if matches!(tok, Token::ArrEnd) {
            return Ok(LuaValue::Table(t));
        }
        for i in 1.. {
            let v = self.value(tok, at, depth)?;
            t.raw_set(i, v)?;
            let (sep, at_sep) = self.next();
            match sep {
                Token::ArrEnd => break,
                Token::Comma => (tok, at) = self.next(),
                other => return Err(expected("comma or array end", &other, at_sep)),
            }
        }
        Ok(LuaValue::Table(t))
    }

    /// The next token and its 1-based position.
    fn next(&mut self) -> (Token, usize) {
        while self
            .s
            .get(self.pos)
            .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.pos += 1;
        }
        let at = self.pos + 1;
        let Some(&c) = self.s.get(self.pos) else {
            return (Token::End, at);
        };
        let single = match c {
            b'{' => Some(Token::ObjBegin),
            b'}' => Some(Token::ObjEnd),
            b'[' => Some(Token::ArrBegin),
            b']' => Some(Token::ArrEnd),
            b':' => Some(Token::Colon),
            b',' => Some(Token::Comma),
            _ => None,
        };
        if let Some(tok) = single {
            self.pos += 1;
            return (tok, at);
        }
        let tok = match c {
            b'"' => self.string(),
            b'-' | b'0'..=b'9' => self.number(),
            _ if self.invalid_ok && self.looks_invalid_number() => self.number(),
            b't' => self.word(b"true", Token::Bool(true)),
            b'f' => self.word(b"false", Token::Bool(false)),
            b'n' => self.word(b"null", Token::Null),
            _ => Token::Error("invalid token"),
        };
        (tok, at)
    }

    fn word(&mut self, w: &[u8], tok: Token) -> Token {
        if self.s[self.pos..].starts_with(w) {
            self.pos += w.len();
            tok
        } else {
            Token::Error("invalid token")
        }
    }

    /// `inf` or `nan` (any case), which only `decode_invalid_numbers` accepts.
    fn looks_invalid_number(&self) -> bool {
        let rest = &self.s[self.pos..];
        rest.len() >= 3
            && (rest[..3].eq_ignore_ascii_case(b"inf") || rest[..3].eq_ignore_ascii_case(b"nan"))
    }

    /// A number as C's `strtod` reads one (what lua-cjson parses with), refusing what JSON
    /// does not allow (hexadecimal, leading zeros, inf/nan) unless `decode_invalid_numbers`.
    fn number(&mut self) -> Token {
        let rest = &self.s[self.pos..];
        let unsigned = rest.strip_prefix(b"-").unwrap_or(rest);
        let sign = rest.len() - unsigned.len();
        let hex = unsigned.len() > 1 && unsigned[0] == b'0' && (unsigned[1] | 0x20) == b'x';
        let leading_zero =
            unsigned.len() > 1 && unsigned[0] == b'0' && unsigned[1].is_ascii_digit();
        let special = unsigned.len() >= 3
            && (unsigned[..3].eq_ignore_ascii_case(b"inf")
                || unsigned[..3].eq_ignore_ascii_case(b"nan"));
        if (hex || leading_zero || special) && !self.invalid_ok {
            return Token::Error("invalid number");
        }
        let negative = sign == 1;
        let (value, used) = if hex {
            let digits = unsigned[2..]
                .iter()
                .take_while(|c| c.is_ascii_hexdigit())
                .count();
            let text = std::str::from_utf8(&unsigned[2..2 + digits]).unwrap_or("");
            match u64::from_str_radix(text, 16) {
                Ok(v) => (v as f64, 2 + digits),
                Err(_) if digits > 0 => (f64::INFINITY, 2 + digits),
                Err(_) => return Token::Error("invalid number"),
            }
        } else if special {
            let word = if unsigned.len() >= 8 && unsigned[..8].eq_ignore_ascii_case(b"infinity") {
                8
            } else {
                3
            };
            let v = if (unsigned[0] | 0x20) == b'n' {
                f64::NAN
            } else {
                f64::INFINITY
            };
            (v, word)
        } else {
            let len = decimal_length(unsigned);
            let text = std::str::from_utf8(&unsigned[..len]).unwrap_or("");
            match text.parse::<f64>() {
                Ok(v) if len > 0 => (v, len),
                _ => return Token::Error("invalid number"),
            }
        };
        self.pos += sign + used;
        Token::Num(if negative { -value } else { value })
    }

    fn string(&mut self) -> Token {
        let mut out = Vec::new();
        let mut i = self.pos + 1;
        loop {
            let Some(&c) = self.s.get(i) else {
                return Token::Error("unexpected end of string");
            };
            i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.s.get(i) else {
                        return Token::Error("unexpected end of string");
                    };
                    i += 1;
                    let plain = match e {
                        b'"' | b'\\' | b'/' => e,
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => match self.unicode_escape(&mut i) {
                            Some(ch) => {
                                let mut buf = [0u8; 4];
                                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                                continue;
                            }
                            None => return Token::Error("invalid unicode escape code"),
                        },
                        _ => return Token::Error("invalid escape code"),
                    };
                    out.push(plain);
                }
                _ => out.push(c),
            }
        }
        self.pos = i;
        Token::Str(out)
    }

    /// The code point of `\uXXXX` (and its low surrogate when it is a high one); `i` is just
    /// after the `u` and moves past what was read.
    fn unicode_escape(&self, i: &mut usize) -> Option<char> {
        let hex4 = |at: usize| -> Option<u32> {
            let digits = self.s.get(at..at + 4)?;
            u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
        };
        let first = hex4(*i)?;
        *i += 4;
        let code = match first {
            0xd800..=0xdbff => {
                if self.s.get(*i..*i + 2) != Some(&b"\\u"[..]) {
                    return None;
                }
                let low = hex4(*i + 2)?;
                if !(0xdc00..=0xdfff).contains(&low) {
                    return None;
                }
                *i += 6;
                0x10000 + ((first - 0xd800) << 10) + (low - 0xdc00)
            }
            0xdc00..=0xdfff => return None,
            c => c,
        };
        char::from_u32(code)
    }
}

/// Length of the decimal number at the start of `s`: digits, an optional fraction and an
/// optional exponent, as `strtod` consumes them.
fn decimal_length(s: &[u8]) -> usize {
    let digits = |from: usize| s[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let mut n = digits(0);
    if s.get(n) == Some(&b'.') {
        n += 1 + digits(n + 1);
    }
    if n > 0 && matches!(s.get(n), Some(b'e' | b'E')) {
        let mut e = n + 1;
        if matches!(s.get(e), Some(b'+' | b'-')) {
            e += 1;
        }
        let exp = digits(e);
        if exp > 0 {
            n = e + exp;
        }
    }
    n
}

fn expected(what: &str, found: &Token, at: usize) -> mlua::Error {
    mlua::Error::runtime(format!(
        "Expected {what} but found {} at character {at}",
        found.name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lua: &Lua, code: &str) -> mlua::Result<LuaValue> {
        lua.load(code).eval()
    }

    fn lua() -> Lua {
        let lua = Lua::new();
        lua.globals().set("cjson", library(&lua).unwrap()).unwrap();
        lua
    }

    #[test]
    fn encodes_as_lua_cjson() {
        let lua = lua();
        let text = |code: &str| -> String {
            match run(&lua, code).unwrap() {
                LuaValue::String(s) => s.to_str().unwrap().to_string(),
                v => panic!("{v:?}"),
            }
        };
        assert_eq!(
            text("return cjson.encode({1, 2, 'a/b', true, cjson.null})"),
            r#"[1,2,"a\/b",true,null]"#
        );
        assert_eq!(text("return cjson.encode({})"), "{}");
        assert_eq!(
            text("return cjson.encode({[1]='x', [3]='z'})"),
            r#"["x",null,"z"]"#
        );
        assert_eq!(
            text("return cjson.encode({k={0.1, 1e20}})"),
            r#"{"k":[0.1,1e+20]}"#
        );
        assert_eq!(text("return cjson.encode('\\n\\1\"')"), r#""\n\u0001\"""#);
        assert_eq!(text("return cjson.encode({[2.5]=1})"), r#"{"2.5":1}"#);
        // Excessively sparse arrays are refused by default, objects once converted.
        assert!(run(&lua, "return cjson.encode({[1000]=1})").is_err());
        assert_eq!(
            text("cjson.encode_sparse_array(true) return cjson.encode({[1000]=1})"),
            r#"{"1000":1}"#
        );
        // Keys must be strings or numbers; functions cannot be encoded.
        assert!(run(&lua, "return cjson.encode({[true]=1})").is_err());
        assert!(run(&lua, "return cjson.encode(print)").is_err());
        // NaN: refused, then JavaScript's spelling, then null.
        assert!(run(&lua, "return cjson.encode(0/0)").is_err());
        assert_eq!(
            text("cjson.encode_invalid_numbers(true) return cjson.encode(1/0)"),
            "Infinity"
        );
        assert_eq!(
            text("cjson.encode_invalid_numbers('null') return cjson.encode(1/0)"),
            "null"
        );
        // Precision.
        assert_eq!(
            text("cjson.encode_number_precision(3) return cjson.encode(3.14159)"),
            "3.14"
        );
    }

    #[test]
    fn nesting_is_bounded_both_ways() {
        let lua = lua();
        // A table containing itself stops at the depth limit instead of recursing forever.
        assert!(run(&lua, "local t = {} t[1] = t return cjson.encode(t)").is_err());
        // A configured depth above the hard bound still stops at it.
        let deep = format!("return cjson.decode('{}')", "[".repeat(5000));
        assert!(run(&lua, &format!("cjson.decode_max_depth(100000) {deep}")).is_err());
        assert!(run(&lua, "cjson.encode_max_depth(1) return cjson.encode({{1}})").is_err());
        assert!(run(
            &lua,
            "cjson.decode_max_depth(1) return cjson.decode('[[1]]')"
        )
        .is_err());
    }

    #[test]
    fn decodes_as_lua_cjson() {
        let lua = lua();
        let v = run(
            &lua,
            r#"local t = cjson.decode('[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]') return table.concat(t, ' ')"#,
        )
        .unwrap();
        assert_eq!(v.to_string().unwrap(), "0 -5000 -1 0.0003 1023.2 0");
        let v = run(
            &lua,
            r#"local t = cjson.decode([[{"a": {"b": [true, null, "\u00e9\ud83d\ude00\/"]}}]])
               return {t.a.b[1], t.a.b[2] == cjson.null, t.a.b[3]}"#,
        )
        .unwrap();
        let LuaValue::Table(t) = v else { panic!() };
        assert!(t.raw_get::<bool>(1).unwrap());
        assert!(t.raw_get::<bool>(2).unwrap());
        assert_eq!(t.raw_get::<String>(3).unwrap(), "é😀/");
        // Errors name what was expected and where.
        let e = run(&lua, "return cjson.decode('[1,]')")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Expected value but found T_ARR_END at character 4"),
            "{e}"
        );
        let e = run(&lua, "return cjson.decode('{1:2}')")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Expected object key string"), "{e}");
        assert!(run(&lua, "return cjson.decode('[1] x')").is_err());
        assert!(run(&lua, "return cjson.decode('\"abc')").is_err());
        assert!(run(&lua, "return cjson.decode('')").is_err());
        // Hexadecimal and nan only while decode_invalid_numbers is on (the default).
        assert_eq!(
            number(&run(&lua, "return cjson.decode('0x10')").unwrap()),
            Some(16.0)
        );
        assert!(run(
            &lua,
            "cjson.decode_invalid_numbers(false) return cjson.decode('0x10')"
        )
        .is_err());
    }
}

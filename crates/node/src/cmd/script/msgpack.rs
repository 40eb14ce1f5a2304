//! The `cmsgpack` table scripts see, as Redis loads lua-cmsgpack 0.4: `pack(...)`,
//! `unpack(s)`, `unpack_one(s [, offset])` and `unpack_limit(s, limit [, offset])`. Written
//! here in Rust against MessagePack's specification and lua-cmsgpack's documented choices:
//!
//! - a number equal to a 64-bit integer is packed as the smallest integer form, any other as a
//!   float 32 when that is exact, else a float 64;
//! - a string uses fixstr, str 8, str 16 or str 32 by length;
//! - a table whose keys are exactly the numbers 1..n is an array, any other a map (in `next`
//!   order);
//! - tables nested [`MAX_PACK_NESTING`] deep are packed as nil (lua-cmsgpack's limit, which
//!   also ends self-referencing tables); functions, threads and userdata are packed as nil;
//! - unpacking gives integers and floats as Lua numbers, bin and str as strings, arrays as
//!   tables indexed from 1, maps as tables.
//!
//! Bounds: unpacking nests at most [`MAX_UNPACK_NESTING`] containers (it recurses on the
//! node's stack; nothing `pack` makes comes near it), a container never claims more elements
//! than bytes remain, and a packed result may not exceed [`MAX_OUTPUT_BYTES`].

use mlua::{Lua, MultiValue, Table, Value as LuaValue};

use super::basics::table_shape;

/// Tables nested this deep are packed as nil, as lua-cmsgpack does.
pub const MAX_PACK_NESTING: usize = 16;
/// Deepest containers `unpack` follows before refusing the input (it recurses on the node's
/// stack; see `json::MAX_NESTING`).
pub const MAX_UNPACK_NESTING: usize = 256;
/// Largest result of `cmsgpack.pack`.
pub const MAX_OUTPUT_BYTES: usize = 512 << 20;

const MISSING_BYTES: &str = "Missing bytes in input.";
const BAD_FORMAT: &str = "Bad data format in input.";

pub(crate) fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(
        "pack",
        lua.create_function(|lua, args: MultiValue| {
            if args.is_empty() {
                return Err(mlua::Error::runtime(
                    "bad argument #0 to 'pack' (MessagePack pack needs input.)",
                ));
            }
            let mut out = Vec::new();
            for v in args.iter() {
                pack(&mut out, v, 0).map_err(mlua::Error::runtime)?;
            }
            lua.create_string(&out)
        })?,
    )?;
    t.raw_set(
        "unpack",
        lua.create_function(|lua, args: MultiValue| {
            let s = input(&args, "unpack")?;
            unpack(lua, &s, 0, 0)
        })?,
    )?;
    t.raw_set(
        "unpack_one",
        lua.create_function(|lua, args: MultiValue| {
            let s = input(&args, "unpack_one")?;
            let offset = optional_integer(&args, 1, "unpack_one")?.unwrap_or(0);
            unpack(lua, &s, 1, offset)
        })?,
    )?;
    t.raw_set(
        "unpack_limit",
        lua.create_function(|lua, args: MultiValue| {
            let s = input(&args, "unpack_limit")?;
            let limit = optional_integer(&args, 1, "unpack_limit")?.ok_or_else(|| {
                mlua::Error::runtime(
                    "bad argument #2 to 'unpack_limit' (number expected, got no value)",
                )
            })?;
            let offset = optional_integer(&args, 2, "unpack_limit")?.unwrap_or(0);
            unpack(lua, &s, limit, offset)
        })?,
    )?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}

fn input(args: &MultiValue, name: &str) -> mlua::Result<Vec<u8>> {
    match args.front() {
        Some(LuaValue::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(LuaValue::Integer(i)) => Ok(i.to_string().into_bytes()),
        Some(LuaValue::Number(n)) => Ok(super::basics::lua_number_text(*n).into_bytes()),
        _ => Err(mlua::Error::runtime(format!(
            "bad argument #1 to '{name}' (string expected)"
        ))),
    }
}

fn optional_integer(args: &MultiValue, i: usize, name: &str) -> mlua::Result<Option<i64>> {
    match args.get(i) {
        None | Some(LuaValue::Nil) => Ok(None),
        Some(LuaValue::Integer(n)) => Ok(Some(*n)),
        Some(LuaValue::Number(n)) => Ok(Some(n.trunc() as i64)),
        Some(LuaValue::String(s)) => s
            .to_str()
            .ok()
            .and_then(|t| t.trim().parse::<f64>().ok())
            .map(|n| Some(n.trunc() as i64))
            .ok_or_else(|| {
                mlua::Error::runtime(format!(
                    "bad argument #{} to '{name}' (number expected)",
                    i + 1
                ))
            }),
        Some(_) => Err(mlua::Error::runtime(format!(
            "bad argument #{} to '{name}' (number expected)",
            i + 1
        ))),
    }
}

fn pack(out: &mut Vec<u8>, v: &LuaValue, level: usize) -> Result<(), String> {
    if out.len() > MAX_OUTPUT_BYTES {
        return Err(format!(
            "MessagePack result would exceed {MAX_OUTPUT_BYTES} bytes"
        ));
    }
    match v {
        LuaValue::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        LuaValue::Integer(i) => pack_int(out, *i),
        LuaValue::Number(n) => pack_number(out, *n),
        LuaValue::String(s) => pack_str(out, &s.as_bytes()),
        LuaValue::Table(t) if level < MAX_PACK_NESTING => pack_table(out, t, level)?,
        _ => out.push(0xc0),
    }
    Ok(())
}

fn pack_number(out: &mut Vec<u8>, n: f64) {
    // Equal to a 64-bit integer (2^63 itself is not: it only equals i64::MIN's magnitude).
    if n.fract() == 0.0 && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&n)
    {
        return pack_int(out, n as i64);
    }
    let f = n as f32;
    if f as f64 == n {
        out.push(0xca);
        out.extend_from_slice(&f.to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn pack_int(out: &mut Vec<u8>, n: i64) {
    match n {
        0..=0x7f => out.push(n as u8),
        0x80..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ if n > 0 => {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
        -32..=-1 => out.push(n as i8 as u8),
        -128..=-33 => out.extend_from_slice(&[0xd0, n as i8 as u8]),
        -32768..=-129 => {
            out.push(0xd1);
            out.extend_from_slice(&(n as i16).to_be_bytes());
        }
        -2_147_483_648..=-32769 => {
            out.push(0xd2);
            out.extend_from_slice(&(n as i32).to_be_bytes());
        }
        _ => {
            out.push(0xd3);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

fn pack_str(out: &mut Vec<u8>, s: &[u8]) {
    let len = s.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

/// A container header: `fix` (the 4-bit form's base) when `len` fits in it, else the 16- or
/// 32-bit form.
fn pack_header(out: &mut Vec<u8>, len: usize, fix: u8, wide16: u8, wide32: u8) {
    if len <= 15 {
        out.push(fix | len as u8);
    } else if len <= 0xffff {
        out.push(wide16);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(wide32);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
}

fn pack_table(out: &mut Vec<u8>, t: &Table, level: usize) -> Result<(), String> {
    let (count, max) = table_shape(t).map_err(|e| e.to_string())?;
    // An array when the keys are exactly 1..n: keys are distinct, so positive integers whose
    // largest is their count (the empty table is an empty array).
    if max == Some(count as f64) {
        pack_header(out, count, 0x90, 0xdc, 0xdd);
        for i in 1..=count {
            let v: LuaValue = t.raw_get(i).map_err(|e| e.to_string())?;
            pack(out, &v, level + 1)?;
        }
    } else {
        pack_header(out, count, 0x80, 0xde, 0xdf);
        for pair in t.pairs::<LuaValue, LuaValue>() {
            let (k, v) = pair.map_err(|e| e.to_string())?;
            pack(out, &k, level + 1)?;
            pack(out, &v, level + 1)?;
        }
    }
    Ok(())
}

/// Unpacks values from `s` starting at byte `offset`: all of them when `limit` and `offset`
/// are both 0 (`unpack`), else at most `limit`, preceded by the offset of the next value (-1
/// once the input is used up).
fn unpack(lua: &Lua, s: &[u8], limit: i64, offset: i64) -> mlua::Result<MultiValue> {
    if offset < 0 || limit < 0 {
        return Err(mlua::Error::runtime(format!(
            "Invalid request to unpack with offset of {offset} and limit of {limit}."
        )));
    }
    if offset as u64 > s.len() as u64 {
        return Err(mlua::Error::runtime(format!(
            "Start offset {offset} greater than input length {}.",
            s.len()
        )));
    }
    let all = limit == 0 && offset == 0;
    let limit = if all { i64::MAX } else { limit };
    let mut cur = Cursor {
        lua,
        s,
        pos: offset as usize,
    };
    let mut values = MultiValue::new();
    let mut count = 0;
    while cur.pos < s.len() && count < limit {
        values.push_back(cur.value(0).map_err(mlua::Error::runtime)?);
        count += 1;
    }
    if !all {
        let next = if cur.pos == s.len() {
            -1
        } else {
            cur.pos as i64
        };
        values.push_front(LuaValue::Integer(next));
    }
    Ok(values)
}

struct Cursor<'a> {
    lua: &'a Lua,
    s: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        let s: &'a [u8] = self.s;
        let end = self.pos.checked_add(n).filter(|&e| e <= s.len());
        let end = end.ok_or(MISSING_BYTES)?;
        let bytes = &s[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn uint(&mut self, n: usize) -> Result<u64, &'static str> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | b as u64))
    }

    fn value(&mut self, depth: usize) -> Result<LuaValue, &'static str> {
        let tag = self.take(1)?[0];
        Ok(match tag {
            0x00..=0x7f => LuaValue::Integer(tag as i64),
            0xe0..=0xff => LuaValue::Integer(tag as i8 as i64),
            0xc0 => LuaValue::Nil,
            0xc2 => LuaValue::Boolean(false),
            0xc3 => LuaValue::Boolean(true),
            0xcc => LuaValue::Number(self.uint(1)? as f64),
            0xcd => LuaValue::Number(self.uint(2)? as f64),
            0xce => LuaValue::Number(self.uint(4)? as f64),
            0xcf => LuaValue::Number(self.uint(8)? as f64),
            0xd0 => LuaValue::Number(self.uint(1)? as u8 as i8 as f64),
            0xd1 => LuaValue::Number(self.uint(2)? as u16 as i16 as f64),
            0xd2 => LuaValue::Number(self.uint(4)? as u32 as i32 as f64),
            0xd3 => LuaValue::Number(self.uint(8)? as i64 as f64),
            0xca => LuaValue::Number(f32::from_bits(self.uint(4)? as u32) as f64),
            0xcb => LuaValue::Number(f64::from_bits(self.uint(8)?)),
            0xa0..=0xbf => self.string((tag & 0x1f) as usize)?,
            0xd9 | 0xc4 => {
                let n = self.uint(1)? as usize;
                self.string(n)?
            }
            0xda | 0xc5 => {
                let n = self.uint(2)? as usize;
                self.string(n)?
            }
            0xdb | 0xc6 => {
                let n = self.uint(4)? as usize;
                self.string(n)?
            }
            0x90..=0x9f => self.array((tag & 0x0f) as usize, depth)?,
            0xdc => {
                let n = self.uint(2)? as usize;
                self.array(n, depth)?
            }
            0xdd => {
                let n = self.uint(4)? as usize;
                self.array(n, depth)?
            }
            0x80..=0x8f => self.map((tag & 0x0f) as usize, depth)?,
            0xde => {
                let n = self.uint(2)? as usize;
                self.map(n, depth)?
            }
            0xdf => {
                let n = self.uint(4)? as usize;
                self.map(n, depth)?
            }
            _ => return Err(BAD_FORMAT),
        })
    }

    fn string(&mut self, n: usize) -> Result<LuaValue, &'static str> {
        let bytes = self.take(n)?;
        let s = self.lua.create_string(bytes).map_err(|_| BAD_FORMAT)?;
        Ok(LuaValue::String(s))
    }

    /// Checks the nesting bound and that `n` elements of at least `min_bytes` each can still
    /// be in the input (so a huge claimed length fails before it allocates anything).
    fn container(&self, n: usize, min_bytes: usize, depth: usize) -> Result<(), &'static str> {
        if depth >= MAX_UNPACK_NESTING {
            return Err("Bad data format in input: containers nested too deep.");
        }
        if n.saturating_mul(min_bytes) > self.s.len() - self.pos {
            return Err(MISSING_BYTES);
        }
        Ok(())
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<LuaValue, &'static str> {
        self.container(n, 1, depth)?;
        let t = self.lua.create_table().map_err(|_| BAD_FORMAT)?;
        for i in 1..=n {
            let v = self.value(depth + 1)?;
            t.raw_set(i, v).map_err(|_| BAD_FORMAT)?;
        }
        Ok(LuaValue::Table(t))
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<LuaValue, &'static str> {
        self.container(n, 2, depth)?;
        let t = self.lua.create_table().map_err(|_| BAD_FORMAT)?;
        for _ in 0..n {
            let k = self.value(depth + 1)?;
            let v = self.value(depth + 1)?;
            if k.is_nil() {
                return Err(BAD_FORMAT);
            }
            t.raw_set(k, v).map_err(|_| BAD_FORMAT)?;
        }
        Ok(LuaValue::Table(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua() -> Lua {
        let lua = Lua::new();
        lua.globals()
            .set("cmsgpack", library(&lua).unwrap())
            .unwrap();
        lua
    }

    fn hex(lua: &Lua, code: &str) -> String {
        let s: mlua::LuaString = lua.load(code).eval().unwrap();
        s.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn packs_the_smallest_forms() {
        let lua = lua();
        assert_eq!(hex(&lua, "return cmsgpack.pack(0.1)"), "cb3fb999999999999a");
        assert_eq!(hex(&lua, "return cmsgpack.pack(0.5)"), "ca3f000000");
        assert_eq!(
            hex(&lua, "return cmsgpack.pack(-1099511627776)"),
            "d3ffffff0000000000"
        );
        assert_eq!(
            hex(&lua, "return cmsgpack.pack(1, 200, 70000, -1, -100, -200)"),
            "01ccc8ce00011170ffd09cd1ff38"
        );
        assert_eq!(
            hex(&lua, "return cmsgpack.pack({1, 2}, {a = true}, {}, nil)"),
            "92010281a161c390c0"
        );
        assert_eq!(
            hex(&lua, "return cmsgpack.pack(string.rep('x', 40))").len(),
            2 * (2 + 40)
        );
        // A string key is a map key, even one that reads as a number (as in Redis).
        assert_eq!(hex(&lua, "return cmsgpack.pack({['1'] = 5})"), "81a13105");
        // A table that contains itself is cut at the nesting limit.
        let h = hex(&lua, "local a = {} a[1] = a return cmsgpack.pack(a)");
        assert_eq!(h, "91".repeat(MAX_PACK_NESTING) + "c0");
    }

    #[test]
    fn unpacks_what_it_packs() {
        let lua = lua();
        let ok: bool = lua
            .load(
                r#"
                local t = {s = string.rep('y', 70000), d = 0.25, i = -3147483648, a = {1, 2, {3}}, b = false}
                local u = cmsgpack.unpack(cmsgpack.pack(t))
                assert(u.s == t.s and u.d == 0.25 and u.i == -3147483648 and u.a[3][1] == 3 and u.b == false)
                local packed = cmsgpack.pack('a', 'b', 'c')
                local off, v = cmsgpack.unpack_one(packed)
                assert(off == 2 and v == 'a')
                local off2, v2, v3 = cmsgpack.unpack_limit(packed, 2, off)
                assert(off2 == -1 and v2 == 'b' and v3 == 'c')
                local x, y, z = cmsgpack.unpack(packed)
                return x == 'a' and y == 'b' and z == 'c'
                "#,
            )
            .eval()
            .unwrap();
        assert!(ok);
    }

    #[test]
    fn bad_input_is_an_error() {
        let lua = lua();
        for code in [
            "return cmsgpack.unpack('\\218\\255')", // str 16 cut short
            "return cmsgpack.unpack('\\221\\255\\255\\255\\255')", // a 4G-element array claimed
            "return cmsgpack.unpack('\\193')",      // never used tag
            "return cmsgpack.pack()",
            "return cmsgpack.unpack_one('\\1', 5)",
        ] {
            assert!(lua.load(code).exec().is_err(), "{code}");
        }
        // Deeply nested input is refused instead of recursing without bound.
        let deep = format!("return cmsgpack.unpack('{}')", "\\145".repeat(5000) + "\\1");
        assert!(lua.load(&deep).exec().is_err());
    }
}

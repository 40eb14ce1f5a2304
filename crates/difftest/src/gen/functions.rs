//! The functions family: FUNCTION LOAD [REPLACE] of libraries drawn from a small pool of names
//! and bodies (so loads collide on library and function names, and some fail to compile or
//! raise while loading), FCALL/FCALL_RO on the shared keys, DELETE, FLUSH, STATS and LIST.
//!
//! Each library registers one function, so FUNCTION LIST compares as a multiset of libraries
//! (Redis lists them in its dictionary's order). FUNCTION DUMP is not drawn: its payload
//! lists libraries in that order too.

use super::{Cmd, Cmp, Ctx, Family};

pub const FAMILY: Family = Family {
    name: "functions",
    weight: 4,
    gen,
};

const LIBS: &[&str] = &["lib1", "lib2", "lib3", "Lib1"];
const FUNCS: &[&str] = &["f1", "f2", "f3", "F1", "get_it"];

/// Bodies of the registered function (parameters `keys`, `args`).
const BODIES: &[&str] = &[
    "return redis.call('GET', keys[1])",
    "return redis.call('SET', keys[1], args[1] or 'x')",
    "return redis.call('INCR', keys[1])",
    "return redis.call('LPUSH', keys[1], 'a', 'b')",
    "return #keys + #args",
    "return {keys[1], args[1], 3, {ok='fine'}}",
    "return redis.pcall('HSET', keys[1], 'f', 'v')",
    "error('boom')",
    "return redis.call('EXISTS', unpack(keys))",
    "local n = 0 for i = 1, 1000 do n = n + i end return n",
    "return bit.band(0xff, 0x0f) + bit.lshift(1, 4)",
];

fn library(c: &mut Ctx) -> String {
    let lib = *c.pick(LIBS);
    let f = *c.pick(FUNCS);
    let body = *c.pick(BODIES);
    match c.below(12) {
        // The closing parenthesis is missing: a compile error.
        0 => format!("#!lua name={lib}\nredis.register_function('{f}', function(keys, args) {body} end"),
        1 => format!("#!lua name={lib}\nreturn 1"),
        2 => format!("#!lua name={lib}\nredis.register_function('{f}')"),
        3 => format!("#!lua name={lib}\nlocal x = math.floor(1)"),
        4 => format!("#!lua name={lib} x=y\nredis.register_function('{f}', function() end)"),
        5..=7 => format!(
            "#!lua name={lib}\nredis.register_function{{function_name='{f}', callback=function(keys, args) {body} end, flags={{'no-writes'}}, description='d'}}"
        ),
        _ => format!(
            "#!lua name={lib}\nlocal function helper(keys, args) {body} end\nredis.register_function('{f}', helper)"
        ),
    }
}

fn gen(c: &mut Ctx) -> Cmd {
    let weights = [
        10, // 0 FUNCTION LOAD [REPLACE]
        20, // 1 FCALL
        8,  // 2 FCALL_RO
        3,  // 3 FUNCTION DELETE
        1,  // 4 FUNCTION FLUSH
        3,  // 5 FUNCTION STATS
        4,  // 6 FUNCTION LIST
        2,  // 7 bad arguments
    ];
    match c.weighted(&weights) {
        0 => {
            let mut cmd = Cmd::new("FUNCTION").a("LOAD");
            if c.pct(60) {
                cmd = cmd.a(*c.pick(&["REPLACE", "replace"]));
            }
            cmd.a(library(c))
        }
        n @ (1 | 2) => {
            let name = if n == 1 { "FCALL" } else { "FCALL_RO" };
            let nkeys = c.below(3);
            let mut cmd = Cmd::new(name).a(*c.pick(FUNCS)).i(nkeys as i64);
            for _ in 0..nkeys {
                let k = c.key();
                cmd = cmd.a(k);
            }
            for _ in 0..c.below(3) {
                let v = c.value();
                cmd = cmd.a(v);
            }
            cmd
        }
        3 => Cmd::new("FUNCTION").a("DELETE").a(*c.pick(LIBS)),
        4 => Cmd::new("FUNCTION")
            .a("FLUSH")
            .all(c.pick(&[&[][..], &["SYNC"][..], &["async"][..]]).iter()),
        5 => Cmd::new("FUNCTION").a("STATS"),
        6 => {
            let mut cmd = Cmd::new("FUNCTION").a("LIST").cmp(Cmp::Sorted);
            if c.pct(40) {
                cmd = cmd
                    .a("LIBRARYNAME")
                    .a(*c.pick(&["lib*", "LIB1", "*2", "nope"]));
            }
            if c.pct(30) {
                cmd = cmd.a("WITHCODE");
            }
            cmd
        }
        _ => match c.below(5) {
            0 => Cmd::new("FCALL").a(*c.pick(FUNCS)).a("notanumber"),
            1 => Cmd::new("FCALL").a(*c.pick(FUNCS)).i(-1),
            2 => Cmd::new("FCALL").a(*c.pick(FUNCS)).i(5).a("k"),
            // Sorted: a damaged (truncated) copy is a valid LIST.
            3 => Cmd::new("FUNCTION").a("LIST").a("bogus").cmp(Cmp::Sorted),
            _ => Cmd::new("FUNCTION").a("RESTORE").a("not a payload"),
        },
    }
}

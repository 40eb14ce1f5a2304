//! BITOP and BITFIELD / BITFIELD_RO: whole-string bit operations and integer fields of any
//! width (1..=64 bits signed, 1..=63 unsigned) at any bit offset. Bit 0 is the most
//! significant bit of the first byte, as for SETBIT; a field is read and written most
//! significant bit first. Parsing order, limits and error texts follow Redis 7.0.

use lattice_store::Str;

use super::bits::BAD_OFFSET;
use super::value::{changed, opt_is, read_str, store, write_str, WrongType};
use crate::args::{parse_i64, NOT_INTEGER};
use crate::cmd::pubsub::EVENT_GENERIC;
use crate::command::Call;
use crate::ctx::Core;

// ---------------------------------------------------------------------------------------------
// BITOP

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    And,
    Or,
    Xor,
    Not,
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]. Missing keys are empty strings; the result is as
/// long as the longest input, shorter inputs padded with zeros. An empty result deletes the
/// destination. Replies with the result's length.
pub fn bitop(core: &mut Core, call: &mut Call) {
    let name = call.arg(1);
    let op = if opt_is(name, "and") {
        Op::And
    } else if opt_is(name, "or") {
        Op::Or
    } else if opt_is(name, "xor") {
        Op::Xor
    } else if opt_is(name, "not") {
        Op::Not
    } else {
        return call.syntax_error();
    };
    if op == Op::Not && call.argc() != 4 {
        return call.error("ERR BITOP NOT must be called with a single source key.");
    }
    let now_ms = call.now_ms;
    let mut sources: Vec<Vec<u8>> = Vec::with_capacity(call.argc() - 3);
    for i in 3..call.argc() {
        match read_str(core, call.arg(i), now_ms) {
            Err(WrongType) => return call.wrong_type(),
            Ok(None) => sources.push(Vec::new()),
            Ok(Some(s)) => sources.push(s.as_bytes().into_owned()),
        }
    }
    let maxlen = sources.iter().map(Vec::len).max().unwrap_or(0);
    let dst = call.arg(2);
    if maxlen == 0 {
        if core.exists(dst, now_ms) {
            core.db.remove(dst);
            core.modified(dst);
            core.notify(EVENT_GENERIC, "del", dst);
        }
        return call.out.integer(0);
    }
    let byte = |src: &[u8], j: usize| src.get(j).copied().unwrap_or(0);
    let mut res = Vec::with_capacity(maxlen);
    for j in 0..maxlen {
        let mut out = byte(&sources[0], j);
        if op == Op::Not {
            out = !out;
        }
        for src in &sources[1..] {
            let b = byte(src, j);
            match op {
                Op::And => out &= b,
                Op::Or => out |= b,
                Op::Xor => out ^= b,
                Op::Not => {}
            }
        }
        res.push(out);
    }
    store(core, dst, Str::Raw(res), None, now_ms, "set");
    call.out.integer(maxlen as i64);
}

// ---------------------------------------------------------------------------------------------
// Field access

/// The `bits`-wide unsigned field at bit `offset` of `p` (bytes past the end read as zero).
pub(crate) fn get_unsigned(p: &[u8], offset: u64, bits: u32) -> u64 {
    let mut value = 0u64;
    for j in 0..u64::from(bits) {
        let o = offset + j;
        let byte = p.get((o >> 3) as usize).copied().unwrap_or(0);
        let bit = (byte >> (7 - (o & 7))) & 1;
        value = (value << 1) | u64::from(bit);
    }
    value
}

/// The same field read as a two's complement signed integer.
pub(crate) fn get_signed(p: &[u8], offset: u64, bits: u32) -> i64 {
    let v = get_unsigned(p, offset, bits);
    if bits < 64 && v & (1u64 << (bits - 1)) != 0 {
        (v | (u64::MAX << bits)) as i64
    } else {
        v as i64
    }
}

/// Writes the low `bits` bits of `value` at bit `offset` of `p`, which must be long enough.
pub(crate) fn set_field(p: &mut [u8], offset: u64, bits: u32, value: u64) {
    for j in 0..u64::from(bits) {
        let bit = (value >> (u64::from(bits) - 1 - j)) & 1;
        let o = offset + j;
        let mask = 0x80u8 >> (o & 7);
        let b = &mut p[(o >> 3) as usize];
        if bit == 1 {
            *b |= mask;
        } else {
            *b &= !mask;
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Overflow {
    Wrap,
    Sat,
    Fail,
}

/// Whether `value + incr` fits a signed field of `bits` bits. `Some(v)` on overflow: `v` is
/// the value to store under WRAP and SAT (meaningless under FAIL).
pub(crate) fn signed_overflow(value: i64, incr: i64, bits: u32, ow: Overflow) -> Option<i64> {
    let max: i64 = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    // Both may wrap; they are only used once `value` is known to be in range.
    let maxincr = max.wrapping_sub(value);
    let minincr = min.wrapping_sub(value);
    let wrap = || {
        let c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & (1u64 << (bits - 1)) != 0 {
                (c | mask) as i64
            } else {
                (c & !mask) as i64
            }
        } else {
            c as i64
        }
    };
    let high =
        value > max || (bits != 64 && incr > maxincr) || (value >= 0 && incr > 0 && incr > maxincr);
    let low =
        value < min || (bits != 64 && incr < minincr) || (value < 0 && incr < 0 && incr < minincr);
    if high {
        Some(if ow == Overflow::Wrap { wrap() } else { max })
    } else if low {
        Some(if ow == Overflow::Wrap { wrap() } else { min })
    } else {
        None
    }
}

/// Like [`signed_overflow`] for an unsigned field (`bits` <= 63).
pub(crate) fn unsigned_overflow(value: u64, incr: i64, bits: u32, ow: Overflow) -> Option<u64> {
    let max: u64 = (1u64 << bits) - 1;
    let maxincr = max.wrapping_sub(value) as i64;
    let minincr = value.wrapping_neg() as i64;
    let wrap = || value.wrapping_add(incr as u64) & !(u64::MAX << bits);
    if value > max || (incr > 0 && incr > maxincr) {
        Some(if ow == Overflow::Wrap { wrap() } else { max })
    } else if incr < 0 && incr < minincr {
        Some(if ow == Overflow::Wrap { wrap() } else { 0 })
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------------
// BITFIELD

const BAD_TYPE: &str =
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";

#[derive(Clone, Copy, PartialEq, Eq)]
enum FieldOp {
    Get,
    Set,
    Incrby,
}

struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    value: i64,
    overflow: Overflow,
}

/// A field type `i<bits>` or `u<bits>` (lowercase, as Redis reads it).
fn field_type(arg: &[u8]) -> Option<(bool, u32)> {
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return None,
    };
    let rest = arg[1..].split(|&b| b == 0).next().unwrap_or(&[]);
    let bits = parse_i64(rest)?;
    if bits < 1 || (signed && bits > 64) || (!signed && bits > 63) {
        return None;
    }
    Some((signed, bits as u32))
}

/// A field offset: a bit number, or `#n` for the n-th field of this width. The field's first
/// byte must lie within `proto-max-bulk-len`.
fn field_offset(core: &Core, arg: &[u8], bits: u32) -> Option<u64> {
    let (hash, digits) = match arg.first() {
        Some(b'#') => (true, &arg[1..]),
        _ => (false, arg),
    };
    let mut v = parse_i64(digits)?;
    if hash {
        v = v.wrapping_mul(i64::from(bits));
    }
    if v < 0 || (v as u64 >> 3) >= core.config.proto_max_bulk_len {
        return None;
    }
    Some(v as u64)
}

pub fn bitfield(core: &mut Core, call: &mut Call) {
    bitfield_generic(core, call, false);
}

pub fn bitfield_ro(core: &mut Core, call: &mut Call) {
    bitfield_generic(core, call, true);
}

/// Parses every subcommand first (any error stops the command before it touches the key),
/// then runs them in order, one reply each.
fn bitfield_generic(core: &mut Core, call: &mut Call, ro_command: bool) {
    let mut fields: Vec<Field> = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut readonly = true;
    // The last bit any write reaches: the string grows to cover it.
    let mut highest_write: u64 = 0;
    let argc = call.argc();
    let mut j = 2;
    while j < argc {
        let remaining = argc - j - 1;
        let sub = call.arg(j);
        let op = if opt_is(sub, "get") && remaining >= 2 {
            FieldOp::Get
        } else if opt_is(sub, "set") && remaining >= 3 {
            FieldOp::Set
        } else if opt_is(sub, "incrby") && remaining >= 3 {
            FieldOp::Incrby
        } else if opt_is(sub, "overflow") && remaining >= 1 {
            let kind = call.arg(j + 1);
            overflow = if opt_is(kind, "wrap") {
                Overflow::Wrap
            } else if opt_is(kind, "sat") {
                Overflow::Sat
            } else if opt_is(kind, "fail") {
                Overflow::Fail
            } else {
                return call.error("ERR Invalid OVERFLOW type specified");
            };
            j += 2;
            continue;
        } else {
            return call.syntax_error();
        };
        let Some((signed, bits)) = field_type(call.arg(j + 1)) else {
            return call.error(BAD_TYPE);
        };
        let Some(offset) = field_offset(core, call.arg(j + 2), bits) else {
            return call.error(BAD_OFFSET);
        };
        let mut value = 0;
        if op != FieldOp::Get {
            readonly = false;
            highest_write = highest_write.max(offset + u64::from(bits) - 1);
            match parse_i64(call.arg(j + 3)) {
                Some(v) => value = v,
                None => return call.error(NOT_INTEGER),
            }
        }
        fields.push(Field {
            op,
            signed,
            bits,
            offset,
            value,
            overflow,
        });
        j += if op == FieldOp::Get { 3 } else { 4 };
    }
    let (key, now_ms) = (call.arg(1), call.now_ms);
    if readonly {
        let bytes = match read_str(core, key, now_ms) {
            Err(WrongType) => return call.wrong_type(),
            Ok(None) => Vec::new(),
            Ok(Some(s)) => s.as_bytes().into_owned(),
        };
        call.out.array_len(fields.len());
        for f in &fields {
            if f.signed {
                call.out.integer(get_signed(&bytes, f.offset, f.bits));
            } else {
                call.out
                    .integer(get_unsigned(&bytes, f.offset, f.bits) as i64);
            }
        }
        return;
    }
    if ro_command {
        return call.error("ERR BITFIELD_RO only supports the GET subcommand");
    }
    let need = (highest_write >> 3) as usize + 1;
    let (created, grew) = match write_str(core, key, now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => {
            store(core, key, Str::Raw(vec![0; need]), None, now_ms, "setbit");
            (true, true)
        }
        Ok(Some(s)) => {
            let v = s.make_raw();
            let grew = v.len() < need;
            if grew {
                v.resize(need, 0);
            }
            (false, grew)
        }
    };
    let s = match write_str(core, key, now_ms) {
        Ok(Some(s)) => s,
        _ => unreachable!("the string was just stored"),
    };
    let v = s.make_raw();
    let mut changes = 0;
    call.out.array_len(fields.len());
    for f in &fields {
        match f.op {
            FieldOp::Get => {
                if f.signed {
                    call.out.integer(get_signed(v, f.offset, f.bits));
                } else {
                    call.out.integer(get_unsigned(v, f.offset, f.bits) as i64);
                }
            }
            FieldOp::Set | FieldOp::Incrby if f.signed => {
                let old = get_signed(v, f.offset, f.bits);
                let (new, over, ret) = if f.op == FieldOp::Incrby {
                    let over = signed_overflow(old, f.value, f.bits, f.overflow);
                    let new = over.unwrap_or(old.wrapping_add(f.value));
                    (new, over.is_some(), new)
                } else {
                    let over = signed_overflow(f.value, 0, f.bits, f.overflow);
                    (over.unwrap_or(f.value), over.is_some(), old)
                };
                if over && f.overflow == Overflow::Fail {
                    call.out.null();
                } else {
                    call.out.integer(ret);
                    set_field(v, f.offset, f.bits, new as u64);
                    if grew || old != new {
                        changes += 1;
                    }
                }
            }
            FieldOp::Set | FieldOp::Incrby => {
                let old = get_unsigned(v, f.offset, f.bits);
                let (new, over, ret) = if f.op == FieldOp::Incrby {
                    let over = unsigned_overflow(old, f.value, f.bits, f.overflow);
                    let new = over.unwrap_or(old.wrapping_add(f.value as u64));
                    (new, over.is_some(), new)
                } else {
                    let over = unsigned_overflow(f.value as u64, 0, f.bits, f.overflow);
                    (over.unwrap_or(f.value as u64), over.is_some(), old)
                };
                if over && f.overflow == Overflow::Fail {
                    call.out.null();
                } else {
                    call.out.integer(ret as i64);
                    set_field(v, f.offset, f.bits, new);
                    if grew || old != new {
                        changes += 1;
                    }
                }
            }
        }
    }
    // A newly created key was reported by `store` already.
    if changes > 0 && !created {
        changed(core, key, false, "setbit");
    }
}

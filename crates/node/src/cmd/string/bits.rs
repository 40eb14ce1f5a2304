//! Bitmap commands on strings: SETBIT, GETBIT, BITCOUNT, BITPOS. Bit 0 is the most significant
//! bit of the first byte.

use lattice_store::Str;

use super::value::{changed, opt_is, read_str, store, write_str, WrongType};
use crate::args::{parse_i64, NOT_INTEGER};
use crate::command::Call;
use crate::ctx::Core;

pub(super) const BAD_OFFSET: &str = "ERR bit offset is not an integer or out of range";
const BAD_BIT: &str = "ERR bit is not an integer or out of range";

/// A bit offset argument: a non-negative integer whose byte lies within `proto-max-bulk-len`.
fn bit_offset(core: &Core, arg: &[u8]) -> Option<u64> {
    let v = parse_i64(arg)?;
    if v < 0 || (v as u64 >> 3) >= core.config.proto_max_bulk_len {
        return None;
    }
    Some(v as u64)
}

/// The mask of bit `offset` within its byte.
fn bit_mask(offset: u64) -> u8 {
    0x80 >> (offset & 7)
}

pub fn setbit(core: &mut Core, call: &mut Call) {
    let Some(offset) = bit_offset(core, call.arg(2)) else {
        return call.error(BAD_OFFSET);
    };
    let on = match parse_i64(call.arg(3)) {
        Some(v) if v & !1 == 0 => v == 1,
        _ => return call.error(BAD_BIT),
    };
    let (key, now_ms) = (call.arg(1), call.now_ms);
    let byte = (offset >> 3) as usize;
    let mask = bit_mask(offset);
    match write_str(core, key, now_ms) {
        Err(WrongType) => call.wrong_type(),
        Ok(None) => {
            // The key is created (zero-padded up to the bit) even when clearing.
            let mut v = vec![0u8; byte + 1];
            if on {
                v[byte] |= mask;
            }
            store(core, key, Str::Raw(v), None, now_ms, "setbit");
            call.out.integer(0);
        }
        Ok(Some(s)) => {
            let v = s.make_raw();
            let grew = v.len() <= byte;
            if grew {
                v.resize(byte + 1, 0);
            }
            let old = v[byte] & mask != 0;
            if on {
                v[byte] |= mask;
            } else {
                v[byte] &= !mask;
            }
            call.out.integer(old as i64);
            // Redis reports the change only when the string grew or the bit flipped.
            if grew || old != on {
                changed(core, key, false, "setbit");
            }
        }
    }
}

pub fn getbit(core: &mut Core, call: &mut Call) {
    let Some(offset) = bit_offset(core, call.arg(2)) else {
        return call.error(BAD_OFFSET);
    };
    let s = match read_str(core, call.arg(1), call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.integer(0),
        Ok(Some(s)) => s,
    };
    let bytes = s.as_bytes();
    let set = bytes
        .get((offset >> 3) as usize)
        .is_some_and(|b| b & bit_mask(offset) != 0);
    call.out.integer(set as i64);
}

/// Number of set bits.
fn popcount(bytes: &[u8]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    let mut n = 0u64;
    for c in &mut chunks {
        n += u64::from(u64::from_ne_bytes(c.try_into().expect("8 bytes")).count_ones());
    }
    n + chunks
        .remainder()
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum::<u64>()
}

/// Set bits between bit `first` and bit `last`, both included.
fn popcount_bits(bytes: &[u8], first: u64, last: u64) -> u64 {
    let (fb, lb) = ((first >> 3) as usize, (last >> 3) as usize);
    let mut n = popcount(&bytes[fb..=lb]);
    // Take away the bits of the edge bytes that lie outside the range.
    let before = !(0xFFu8 >> (first & 7));
    let after = 0xFFu8.checked_shr((last & 7) as u32 + 1).unwrap_or(0);
    n -= u64::from((bytes[fb] & before).count_ones());
    n -= u64::from((bytes[lb] & after).count_ones());
    n
}

/// Makes negative indexes count from the end and clamps both into `[0, total)`; the result
/// may be an empty range (start > end).
fn normalize(start: i64, end: i64, total: i64) -> (i64, i64) {
    let start = if start < 0 { total + start } else { start }.max(0);
    let mut end = if end < 0 { total + end } else { end }.max(0);
    if end >= total {
        end = total - 1;
    }
    (start, end)
}

/// The BYTE|BIT unit word; `None` after replying a syntax error.
fn unit_is_bit(call: &mut Call, arg: &[u8]) -> Option<bool> {
    if opt_is(arg, "bit") {
        Some(true)
    } else if opt_is(arg, "byte") {
        Some(false)
    } else {
        call.syntax_error();
        None
    }
}

/// BITCOUNT key [start end [BYTE|BIT]]. As in Redis 7.0 the key is looked up before the range
/// is parsed, so a missing key answers 0 whatever the arguments.
pub fn bitcount(core: &mut Core, call: &mut Call) {
    let s = match read_str(core, call.arg(1), call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.integer(0),
        Ok(Some(s)) => s,
    };
    let bytes = s.as_bytes();
    let len = bytes.len() as i64;
    let argc = call.argc();
    let count = if argc == 4 || argc == 5 {
        let Some(start) = parse_i64(call.arg(2)) else {
            return call.error(NOT_INTEGER);
        };
        let Some(end) = parse_i64(call.arg(3)) else {
            return call.error(NOT_INTEGER);
        };
        // Two negative indexes in the wrong order select nothing; this is decided before the
        // unit word is even looked at.
        if start < 0 && end < 0 && start > end {
            return call.out.integer(0);
        }
        let is_bit = if argc == 5 {
            let Some(b) = unit_is_bit(call, call.arg(4)) else {
                return;
            };
            b
        } else {
            false
        };
        let total = if is_bit { len << 3 } else { len };
        let (start, end) = normalize(start, end, total);
        if start > end {
            0
        } else if is_bit {
            popcount_bits(&bytes, start as u64, end as u64)
        } else {
            popcount(&bytes[start as usize..=end as usize])
        }
    } else if argc == 2 {
        popcount(&bytes)
    } else {
        return call.syntax_error();
    };
    call.out.integer(count as i64);
}

/// First bit equal to `bit` between bits `first` and `last` (both included).
fn find_bit(bytes: &[u8], first: u64, last: u64, bit: bool) -> Option<u64> {
    let (fb, lb) = ((first >> 3) as usize, (last >> 3) as usize);
    for (i, &b) in bytes[fb..=lb].iter().enumerate() {
        let i = fb + i;
        // Turn the search into one for a set bit, then drop the bits outside the range.
        let mut b = if bit { b } else { !b };
        if i == fb {
            b &= 0xFF >> (first & 7);
        }
        if i == lb {
            b &= 0xFF << (7 - (last & 7));
        }
        if b != 0 {
            return Some(i as u64 * 8 + u64::from(b.leading_zeros()));
        }
    }
    None
}

/// BITPOS key bit [start [end [BYTE|BIT]]]. A missing key is an endless run of zeros; without
/// an explicit end, the bits after the string count as zeros too, so a search for 0 in a run of
/// ones answers the first position past the string.
pub fn bitpos(core: &mut Core, call: &mut Call) {
    let bit = match parse_i64(call.arg(2)) {
        None => return call.error(NOT_INTEGER),
        Some(0) => false,
        Some(1) => true,
        Some(_) => return call.error("ERR The bit argument must be 1 or 0."),
    };
    let s = match read_str(core, call.arg(1), call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.integer(if bit { -1 } else { 0 }),
        Ok(Some(s)) => s,
    };
    let bytes = s.as_bytes();
    let len = bytes.len() as i64;
    let argc = call.argc();
    // The range in bits, inclusive.
    let (first, last, end_given) = if argc == 3 {
        (0, len * 8 - 1, false)
    } else if (4..=6).contains(&argc) {
        let Some(start) = parse_i64(call.arg(3)) else {
            return call.error(NOT_INTEGER);
        };
        let is_bit = if argc == 6 {
            let Some(b) = unit_is_bit(call, call.arg(5)) else {
                return;
            };
            b
        } else {
            false
        };
        let (end, end_given) = if argc >= 5 {
            let Some(end) = parse_i64(call.arg(4)) else {
                return call.error(NOT_INTEGER);
            };
            (end, true)
        } else if is_bit {
            ((len << 3) + 7, false)
        } else {
            (len - 1, false)
        };
        let total = if is_bit { len << 3 } else { len };
        let (start, end) = normalize(start, end, total);
        if start > end {
            return call.out.integer(-1);
        }
        if is_bit {
            (start, end, end_given)
        } else {
            (start * 8, end * 8 + 7, end_given)
        }
    } else {
        return call.syntax_error();
    };
    if first > last {
        return call.out.integer(-1);
    }
    let pos = match find_bit(&bytes, first as u64, last as u64, bit) {
        Some(p) => p as i64,
        None if bit || end_given => -1,
        None => last + 1,
    };
    call.out.integer(pos);
}

//! Varint-framed fields of the node's records (persistence records, function library sets):
//! a leaf module, so that anything encoding such fields can use it without importing the
//! persistence layer.

/// LEB128-style unsigned varint.
pub(crate) fn put_varint<B: bytes::BufMut + ?Sized>(out: &mut B, mut v: u64) {
    while v >= 0x80 {
        out.put_u8(v as u8 | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

pub(crate) fn get_varint(data: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *data.get(*at).ok_or("truncated varint")?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint too long".into())
}

pub(crate) fn get_bytes<'a>(data: &'a [u8], at: &mut usize) -> Result<&'a [u8], String> {
    let n = get_varint(data, at)?;
    let end = usize::try_from(n)
        .ok()
        .and_then(|n| at.checked_add(n))
        .filter(|&e| e <= data.len())
        .ok_or("length past the end of the record")?;
    let b = &data[*at..end];
    *at = end;
    Ok(b)
}

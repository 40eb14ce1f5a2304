//! INCRBYFLOAT's arithmetic, in C `long double` as Redis does it (see `csrc/longdouble.c`).

use crate::args::NOT_FLOAT;

/// Size of the text buffer, as Redis's `MAX_LONG_DOUBLE_CHARS`: the longest value `%.17Lf`
/// can print for a finite x87 long double (about 4950 characters) fits.
const LD_CHARS: usize = 5 * 1024;

const OK: i32 = 0;
const NOT_A_FLOAT: i32 = 1;
const NAN_OR_INF: i32 = 2;

extern "C" {
    fn lattice_incrbyfloat(
        current: *const u8,
        current_len: usize,
        has_current: i32,
        increment: *const u8,
        increment_len: usize,
        out: *mut u8,
        out_cap: usize,
        out_len: *mut usize,
    ) -> i32;
}

/// Why a long-double addition was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FloatError {
    /// The current value or the increment is not a number.
    NotAFloat,
    /// The sum is NaN or infinite.
    NanOrInf,
}

/// `current + incr` computed, checked and printed as Redis does in `long double`; `current` is
/// `None` for a missing value (zero). Shared by INCRBYFLOAT and HINCRBYFLOAT, which word the
/// errors differently.
pub(crate) fn long_double_add(current: Option<&[u8]>, incr: &[u8]) -> Result<Vec<u8>, FloatError> {
    let mut out = vec![0u8; LD_CHARS];
    let mut len = 0usize;
    let (cur_ptr, cur_len) = match current {
        Some(c) => (c.as_ptr(), c.len()),
        None => (std::ptr::null(), 0),
    };
    // SAFETY: every pointer is valid for the length passed with it (a null `current` is
    // only read when `has_current` is 1, which it is not then); the C function writes at most
    // `out_cap` bytes into `out` and one usize into `len`, and keeps no pointer.
    let code = unsafe {
        lattice_incrbyfloat(
            cur_ptr,
            cur_len,
            current.is_some() as i32,
            incr.as_ptr(),
            incr.len(),
            out.as_mut_ptr(),
            out.len(),
            &mut len,
        )
    };
    match code {
        OK => {
            out.truncate(len);
            Ok(out)
        }
        NOT_A_FLOAT => Err(FloatError::NotAFloat),
        NAN_OR_INF => Err(FloatError::NanOrInf),
        // No room for the text: Redis stores and answers an empty string then. It cannot
        // happen with this buffer size; kept for exactness.
        _ => Ok(Vec::new()),
    }
}

/// `current + incr` as INCRBYFLOAT computes, checks and prints it; `current` is `None` for a
/// missing key (zero). The error is the reply's full text.
pub fn incr_by_float(current: Option<&[u8]>, incr: &[u8]) -> Result<Vec<u8>, &'static str> {
    long_double_add(current, incr).map_err(|e| match e {
        FloatError::NotAFloat => NOT_FLOAT,
        FloatError::NanOrInf => "ERR increment would produce NaN or Infinity",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(cur: Option<&str>, incr: &str) -> Result<String, &'static str> {
        incr_by_float(cur.map(str::as_bytes), incr.as_bytes())
            .map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn sums_print_like_redis() {
        assert_eq!(add(Some("2.2"), "1.1"), Ok("3.3".into()));
        assert_eq!(add(Some("10.5"), "5.0e3"), Ok("5010.5".into()));
        assert_eq!(add(None, "0.1"), Ok("0.1".into()));
        assert_eq!(add(None, "1e-20"), Ok("0".into()));
        assert_eq!(add(Some("0"), "-1e-20"), Ok("0".into()));
        assert_eq!(add(None, "0x10"), Ok("16".into()));
        assert_eq!(add(Some("1"), "1"), Ok("2".into()));
        assert_eq!(add(Some("-3"), "1.5"), Ok("-1.5".into()));
        assert_eq!(
            add(Some("10.5"), "1e300").unwrap(),
            "1000000000000000000008997324079559193870523944273290747938260082321265646596180935755849152083750497190350372508614274835903592556184672983913096260520748646287327135641843653294084255107606016789726652932370030551382947620994540294772781889620606179267611627097410650567187386105690089424915104006144"
        );
    }

    #[test]
    fn invalid_inputs() {
        for bad in ["", " 1", "1 ", "nan", "abc", "1e5000", "1e-5000", "1.2.3"] {
            assert_eq!(add(None, bad), Err(NOT_FLOAT), "{bad:?}");
            assert_eq!(add(Some(bad), "1"), Err(NOT_FLOAT), "{bad:?}");
        }
        assert_eq!(
            add(None, "inf"),
            Err("ERR increment would produce NaN or Infinity")
        );
        let long = format!("{}1", "0".repeat(5119));
        assert_eq!(add(Some(&long), "1"), Err(NOT_FLOAT));
        assert_eq!(add(Some(&long[1..]), "1"), Ok("2".into()));
    }
}

//! Typed access to keys: the one place where "the value at a key" becomes "the list (hash, set,
//! sorted set) at that key, or WRONGTYPE", shared by every collection command family.

use lattice_store::{Db, Hash, List, Set, Value, ZSet};

use crate::ctx::Core;

/// The key holds a value of another type (the caller replies WRONGTYPE).
pub(crate) struct WrongType;

/// A value type a key can hold.
pub(crate) trait Typed {
    fn of(value: &Value) -> Option<&Self>;
    fn of_mut(value: &mut Value) -> Option<&mut Self>;
}

macro_rules! typed {
    ($ty:ty, $variant:ident) => {
        impl Typed for $ty {
            fn of(value: &Value) -> Option<&Self> {
                match value {
                    Value::$variant(v) => Some(v),
                    _ => None,
                }
            }

            fn of_mut(value: &mut Value) -> Option<&mut Self> {
                match value {
                    Value::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}

typed!(List, List);
typed!(Hash, Hash);
typed!(Set, Set);
typed!(ZSet, ZSet);

/// The value at `key` for reading (lazy expiry; counts a keyspace hit or miss).
pub(crate) fn read<'c, T: Typed>(
    core: &'c mut Core,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'c mut T>, WrongType> {
    match core.lookup_read(key, now_ms) {
        None => Ok(None),
        Some(e) => T::of_mut(&mut e.value).map(Some).ok_or(WrongType),
    }
}

/// The value at `key` for writing (lazy expiry; no hit/miss counting).
pub(crate) fn write<'c, T: Typed>(
    core: &'c mut Core,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'c mut T>, WrongType> {
    match core.lookup_write(key, now_ms) {
        None => Ok(None),
        Some(e) => T::of_mut(&mut e.value).map(Some).ok_or(WrongType),
    }
}

/// The value stored at `key`, without expiry or statistics (the caller looked it up already).
pub(crate) fn peek<'d, T: Typed>(db: &'d Db, key: &[u8]) -> Option<&'d T> {
    db.get_raw(key).and_then(|e| T::of(&e.value))
}

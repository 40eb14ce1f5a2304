//! Typed access to keys: the one place where "the value at a key" becomes "the string (list,
//! hash, set, sorted set) at that key, or WRONGTYPE", shared by the string and collection
//! command families.

use lattice_store::{Db, Hash, List, Set, Str, Value, ZSet};

use crate::command::Call;
use crate::ctx::Core;
use crate::events::{EVENT_GENERIC, EVENT_HASH, EVENT_LIST, EVENT_SET, EVENT_STRING, EVENT_ZSET};

/// The key holds a value of another type (the caller replies WRONGTYPE).
pub(crate) struct WrongType;

/// A value type a key can hold.
pub(crate) trait Typed {
    /// The keyspace event class of its commands (`notify-keyspace-events`).
    const EVENT_CLASS: u32;
    fn of(value: &Value) -> Option<&Self>;
    fn of_mut(value: &mut Value) -> Option<&mut Self>;
    /// Holds no element (a key never stores an empty collection).
    fn is_empty(&self) -> bool;
}

macro_rules! typed {
    ($ty:ty, $variant:ident, $class:expr) => {
        impl Typed for $ty {
            const EVENT_CLASS: u32 = $class;

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

            fn is_empty(&self) -> bool {
                <$ty>::is_empty(self)
            }
        }
    };
}

typed!(Str, Str, EVENT_STRING);
typed!(List, List, EVENT_LIST);
typed!(Hash, Hash, EVENT_HASH);
typed!(Set, Set, EVENT_SET);
typed!(ZSet, ZSet, EVENT_ZSET);

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

/// Reports elements removed from the `T` at `key` by `event`, deleting the key when nothing is
/// left, in Redis's order for every collection: the key goes, the modification hook runs, the
/// family's event fires, then `del` if the key went.
pub(crate) fn removed_from<T: Typed>(core: &mut Core, key: &[u8], event: &str) {
    let emptied = peek::<T>(&core.db, key).is_some_and(T::is_empty);
    if emptied {
        core.db.remove(key);
    }
    core.modified(key);
    core.notify(T::EVENT_CLASS, event, key);
    if emptied {
        core.notify(EVENT_GENERIC, "del", key);
    }
}

/// SREM, ZREM and HDEL: removes each member named after the key from the `T` at `call.arg(1)`
/// with `remove` (true when the member was there), stops early once the collection is empty,
/// reports the removal as `event` and replies with the count (0 for a missing key).
pub(crate) fn remove_members<T: Typed>(
    core: &mut Core,
    call: &mut Call,
    event: &str,
    mut remove: impl FnMut(&mut T, &[u8]) -> bool,
) {
    let key = call.arg(1);
    let removed = match write::<T>(core, key, call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => 0,
        Ok(Some(t)) => {
            let mut n = 0;
            for m in &call.args[2..] {
                if remove(t, m) {
                    n += 1;
                }
                if t.is_empty() {
                    break;
                }
            }
            n
        }
    };
    if removed > 0 {
        removed_from::<T>(core, key, event);
    }
    call.out.integer(removed);
}

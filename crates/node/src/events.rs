//! The event classes of `notify-keyspace-events`: what CONFIG stores and what keyspace
//! notifications are filtered by. A leaf, so that configuration and the key services can name
//! them without depending on the pub/sub commands.

// Event classes of `notify-keyspace-events`, as bits.
pub const EVENT_KEYSPACE: u32 = 1 << 0;
pub const EVENT_KEYEVENT: u32 = 1 << 1;
pub const EVENT_GENERIC: u32 = 1 << 2;
pub const EVENT_STRING: u32 = 1 << 3;
pub const EVENT_LIST: u32 = 1 << 4;
pub const EVENT_SET: u32 = 1 << 5;
pub const EVENT_HASH: u32 = 1 << 6;
pub const EVENT_ZSET: u32 = 1 << 7;
pub const EVENT_EXPIRED: u32 = 1 << 8;
pub const EVENT_EVICTED: u32 = 1 << 9;
pub const EVENT_STREAM: u32 = 1 << 10;
pub const EVENT_KEY_MISS: u32 = 1 << 11;
pub const EVENT_MODULE: u32 = 1 << 12;
pub const EVENT_NEW: u32 = 1 << 13;
const EVENT_ALL: u32 = EVENT_GENERIC
    | EVENT_STRING
    | EVENT_LIST
    | EVENT_SET
    | EVENT_HASH
    | EVENT_ZSET
    | EVENT_EXPIRED
    | EVENT_EVICTED
    | EVENT_STREAM
    | EVENT_MODULE;

/// Parses a `notify-keyspace-events` value; `None` for an unknown class character.
pub fn parse_event_classes(s: &str) -> Option<u32> {
    let mut flags = 0;
    for c in s.chars() {
        flags |= match c {
            'A' => EVENT_ALL,
            'g' => EVENT_GENERIC,
            '$' => EVENT_STRING,
            'l' => EVENT_LIST,
            's' => EVENT_SET,
            'h' => EVENT_HASH,
            'z' => EVENT_ZSET,
            'x' => EVENT_EXPIRED,
            'e' => EVENT_EVICTED,
            'K' => EVENT_KEYSPACE,
            'E' => EVENT_KEYEVENT,
            't' => EVENT_STREAM,
            'm' => EVENT_KEY_MISS,
            'd' => EVENT_MODULE,
            'n' => EVENT_NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// The canonical text of a set of event classes, as CONFIG GET shows it (Redis's order, `A`
/// for all the type classes).
pub fn event_classes_to_string(flags: u32) -> String {
    let mut s = String::new();
    if flags & EVENT_ALL == EVENT_ALL {
        s.push('A');
    } else {
        for (bit, c) in [
            (EVENT_GENERIC, 'g'),
            (EVENT_STRING, '$'),
            (EVENT_LIST, 'l'),
            (EVENT_SET, 's'),
            (EVENT_HASH, 'h'),
            (EVENT_ZSET, 'z'),
            (EVENT_EXPIRED, 'x'),
            (EVENT_EVICTED, 'e'),
            (EVENT_STREAM, 't'),
            (EVENT_MODULE, 'd'),
        ] {
            if flags & bit != 0 {
                s.push(c);
            }
        }
    }
    // `n` is not part of `A`, so it is kept even then: the string is also what the flags are
    // read back from.
    for (bit, c) in [
        (EVENT_NEW, 'n'),
        (EVENT_KEYSPACE, 'K'),
        (EVENT_KEYEVENT, 'E'),
        (EVENT_KEY_MISS, 'm'),
    ] {
        if flags & bit != 0 {
            s.push(c);
        }
    }
    s
}

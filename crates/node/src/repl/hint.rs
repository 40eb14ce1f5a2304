//! What a command's arguments say about the elements it changed.
//!
//! Capture works by comparing the store's value after a command with the replicated state's
//! value before it (see `state`), which costs the size of the value. For the common writes to
//! a large collection the command itself names everything it may have changed: HSET the fields
//! it sets, SADD the members it adds, LPUSH that it pushed so many elements at the front. A
//! [`ChangeHint`] carries that, so the capture looks at those elements alone and costs the
//! size of the change. The capture checks what it can cheaply (the element count of a hash or
//! set) and falls back to the full comparison when the hint does not explain the new value.

use bytes::Bytes;
use lattice_store::list::End;

/// The elements one command changed on its key (`args[1]`).
#[derive(Clone, Copy, Debug)]
pub enum ChangeHint<'a> {
    /// Hash fields or set members named by the command: every `stride`-th argument from the
    /// third on. Nothing else of the value changed.
    Elements { args: &'a [Bytes], stride: usize },
    /// `count` elements pushed at `end`, nothing else changed.
    Pushed { end: End, count: usize },
}

impl<'a> ChangeHint<'a> {
    /// The hint of the command `name` (lower case) with `args` (name first), if it has one.
    pub fn of(name: &str, args: &'a [Bytes]) -> Option<ChangeHint<'a>> {
        let elements = |stride| {
            Some(ChangeHint::Elements {
                args: args.get(2..)?,
                stride,
            })
        };
        let pushed = |end| {
            Some(ChangeHint::Pushed {
                end,
                count: args.len().checked_sub(2)?,
            })
        };
        match name {
            "hset" | "hmset" | "hsetnx" if args.len().is_multiple_of(2) => elements(2),
            "hdel" | "sadd" | "srem" => elements(1),
            "lpush" | "lpushx" => pushed(End::Head),
            "rpush" | "rpushx" => pushed(End::Tail),
            _ => None,
        }
    }

    /// The named elements (None for a push).
    pub fn elements(&self) -> Option<impl Iterator<Item = &'a [u8]>> {
        match *self {
            ChangeHint::Elements { args, stride } => {
                Some(args.iter().step_by(stride).map(|a| &a[..]))
            }
            ChangeHint::Pushed { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::from(w.to_string())).collect()
    }

    fn named(name: &str, a: &[Bytes]) -> Option<Vec<Vec<u8>>> {
        ChangeHint::of(name, a)?
            .elements()
            .map(|e| e.map(<[u8]>::to_vec).collect())
    }

    #[test]
    fn hash_writes_name_their_fields_and_set_writes_their_members() {
        let hset = args(&["HSET", "k", "f1", "v1", "f2", "v2"]);
        assert_eq!(
            named("hset", &hset),
            Some(vec![b"f1".to_vec(), b"f2".to_vec()])
        );
        let sadd = args(&["SADD", "k", "a", "b"]);
        assert_eq!(
            named("sadd", &sadd),
            Some(vec![b"a".to_vec(), b"b".to_vec()])
        );
        // A malformed HSET (odd field/value list) never ran: no hint.
        assert!(ChangeHint::of("hset", &args(&["HSET", "k", "f1"])).is_none());
        assert!(ChangeHint::of("get", &args(&["GET", "k"])).is_none());
    }

    #[test]
    fn pushes_count_their_elements() {
        let lpush = args(&["LPUSH", "k", "a", "b", "c"]);
        assert!(matches!(
            ChangeHint::of("lpush", &lpush),
            Some(ChangeHint::Pushed {
                end: End::Head,
                count: 3
            })
        ));
        let rpush = args(&["RPUSH", "k", "a"]);
        assert!(matches!(
            ChangeHint::of("rpush", &rpush),
            Some(ChangeHint::Pushed {
                end: End::Tail,
                count: 1
            })
        ));
    }
}

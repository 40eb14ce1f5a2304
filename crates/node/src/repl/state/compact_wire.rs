//! The wire encoding of a compact state (nothing, or a plain string whose stamp is all it
//! holds), written by hand.
//!
//! Anti-entropy slices, persistence records and snapshots ship a state in its general form,
//! which for a compact state meant expanding it into a `Full` (five components, each with the
//! frontier as its context: a handful of allocations) and walking that through serde and
//! bincode: 13% of the replicated simulation's instructions, and most of the CPU of building a
//! catch-up slice. Everything in that encoding but the string's entry, its context and the type
//! stamps depends on the frontier alone, so those bytes are built once per frontier
//! ([`CompactWire`]) and copied; the rest is written directly. The bytes are exactly serde's
//! (the tests compare them on random states and frontiers), so the protocol, the persisted
//! format and every digest are unchanged, and the receiver reads them with the general decoder.

use bincode::Options as _;
use lattice_crdt::{Dot, Hlc, VersionVector};

use super::assign_wire::{dot, hlc, string_entry, varint, Reader};
use super::{codec, Full, KeyState, Kind, Repr};

/// The bit of the string component, and of the type stamps, in a state's presence mask.
const STRING_BIT: u8 = 1;
const STAMPS_BIT: u8 = 1 << 6;

/// The parts of a compact state's encoding that depend only on the applied GC frontier it is
/// expanded with, built for the last frontier asked for (it changes once per GC round).
#[derive(Debug, Default)]
pub struct CompactWire {
    /// The frontier the parts below were built for; None: not built yet.
    built_for: Option<VersionVector>,
    /// The whole encoding of the empty state (`Full::fresh`).
    empty: Vec<u8>,
    /// Presence bits of the components other than the string and the stamps.
    mask: u8,
    /// The encoded components between the string and the stamps (hash, set, zset, list,
    /// expiry), and after the stamps (removals), as the empty state holds them.
    middle: Vec<u8>,
    removals: Vec<u8>,
}

impl CompactWire {
    fn refresh(&mut self, frontier: &VersionVector) {
        if self.built_for.as_ref() == Some(frontier) {
            return;
        }
        let fresh = Full::fresh(frontier);
        let none = Full::default();
        debug_assert_eq!(
            fresh.stamps, none.stamps,
            "a fresh state has no type stamps"
        );
        self.empty = codec()
            .serialize(&fresh)
            .expect("in-memory states always encode");
        self.mask = 0;
        self.middle.clear();
        self.removals.clear();
        macro_rules! part {
            ($field:ident, $bit:expr, $into:ident) => {
                if fresh.$field != none.$field {
                    self.mask |= 1 << $bit;
                    codec()
                        .serialize_into(&mut self.$into, &fresh.$field)
                        .expect("in-memory states always encode");
                }
            };
        }
        part!(hash, 1, middle);
        part!(set, 2, middle);
        part!(zset, 3, middle);
        part!(list, 4, middle);
        part!(expiry, 5, middle);
        part!(removals, 7, removals);
        self.built_for = Some(frontier.clone());
    }
}

/// The context of a string that holds `d`, expanded with `frontier`: the frontier plus `d`,
/// in the canonical form `CausalContext::insert` leaves (a dot that extends a node's counter
/// raises it, any other uncovered dot goes to the cloud).
fn context_with(out: &mut Vec<u8>, frontier: &VersionVector, d: Dot) {
    let own = frontier.get(d.node);
    let raises = d.counter == own + 1;
    let added = raises && own == 0;
    varint(out, frontier.iter().count() as u64 + u64::from(added));
    let mut pending = added;
    for (node, counter) in frontier.iter() {
        if pending && d.node < node {
            varint(out, u64::from(d.node.0));
            varint(out, d.counter);
            pending = false;
        }
        varint(out, u64::from(node.0));
        varint(
            out,
            if raises && node == d.node {
                d.counter
            } else {
                counter
            },
        );
    }
    if pending {
        varint(out, u64::from(d.node.0));
        varint(out, d.counter);
    }
    if d.counter > own + 1 {
        varint(out, 1);
        dot(out, d);
    } else {
        varint(out, 0);
    }
}

impl KeyState {
    /// The wire encoding of this state (its full form) into `out`, replacing its contents
    /// (`stored` as for [`KeyState::expand`]). A compact state is written from `wire`'s parts
    /// for `frontier`, byte for byte what the general form encodes to.
    pub fn encode_into(
        &self,
        wire: &mut CompactWire,
        frontier: &VersionVector,
        stored: Option<&[u8]>,
        out: &mut Vec<u8>,
    ) {
        out.clear();
        match &self.repr {
            Repr::Empty => {
                wire.refresh(frontier);
                out.extend_from_slice(&wire.empty);
            }
            // A zero stamp would leave the stamps out of the mask: the general path says so.
            // A string that keeps an overwritten dot has a context the parts below lack.
            Repr::Str(c) if c.ts != Hlc::ZERO && c.over.is_none() => {
                wire.refresh(frontier);
                out.push(STRING_BIT | STAMPS_BIT | wire.mask);
                string_entry(out, c.dot, c.ts, c.value(stored));
                context_with(out, frontier, c.dot);
                out.extend_from_slice(&wire.middle);
                for kind in 0..5 {
                    hlc(
                        out,
                        if kind == Kind::Str as usize {
                            c.ts
                        } else {
                            Hlc::ZERO
                        },
                    );
                }
                out.extend_from_slice(&wire.removals);
            }
            _ => codec()
                .serialize_into(&mut *out, &*self.expand(frontier, stored))
                .expect("in-memory states always encode"),
        }
    }
}

/// The short form's first byte: which compact state follows.
const SHORT_EMPTY: u8 = 0;
const SHORT_STR: u8 = 1;
const SHORT_STR_OVER: u8 = 2;

impl KeyState {
    /// A move slice's short form of this state (ARCHITECTURE §89): a compact state (nothing,
    /// or a plain string: its dot, stamp, overwritten dot if it keeps one, and value), whose
    /// general form is a function of these and the frontier alone, about a fifth of the
    /// general form's bytes. Returns false, writing nothing, for a state in general form.
    pub fn encode_move_short(&self, stored: Option<&[u8]>, out: &mut Vec<u8>) -> bool {
        out.clear();
        match &self.repr {
            Repr::Empty => out.push(SHORT_EMPTY),
            Repr::Str(c) => {
                out.push(if c.over.is_some() {
                    SHORT_STR_OVER
                } else {
                    SHORT_STR
                });
                dot(out, c.dot);
                hlc(out, c.ts);
                if let Some(o) = c.over {
                    dot(out, o);
                }
                let value = c.value(stored);
                varint(out, value.len() as u64);
                out.extend_from_slice(value);
            }
            Repr::Full(_) => return false,
        }
        true
    }
}

/// The general form of a state sent in its short form ([`KeyState::encode_move_short`]),
/// expanded with `frontier`, the sender's when it wrote the slice: the same state encoded by
/// the same code as the sender's general form would have been, so byte for byte that, and the
/// receiver merges exactly what it merged before. None when `short` is not a whole short form.
pub fn expand_move_short(
    short: &[u8],
    wire: &mut CompactWire,
    frontier: &VersionVector,
    out: &mut Vec<u8>,
) -> Option<()> {
    let mut r = Reader {
        bytes: short,
        at: 0,
    };
    let repr = match r.take(1)?[0] {
        SHORT_EMPTY => Repr::Empty,
        tag @ (SHORT_STR | SHORT_STR_OVER) => {
            let d = r.dot()?;
            let ts = r.hlc()?;
            let over = if tag == SHORT_STR_OVER {
                Some(r.dot()?)
            } else {
                None
            };
            let len = usize::try_from(r.varint()?).ok()?;
            let value = r.take(len)?;
            Repr::Str(super::CompactStr {
                dot: d,
                ts,
                value: Some(value.into()),
                over,
            })
        }
        _ => return None,
    };
    if r.at != short.len() {
        return None;
    }
    KeyState { repr }.encode_into(wire, frontier, None, out);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::super::{CompactStr, Full};
    use super::*;
    use lattice_crdt::NodeId;
    use proptest::prelude::*;

    fn counter() -> impl Strategy<Value = u64> {
        prop_oneof![
            1..300u64,
            60_000..70_000u64,
            4_294_967_000..4_294_968_000u64,
            any::<u64>().prop_map(|c| c.max(1))
        ]
    }

    fn node() -> impl Strategy<Value = u32> {
        prop_oneof![1..6u32, Just(250), Just(251), Just(70_000), any::<u32>()]
    }

    proptest! {
        /// Byte for byte what serde writes of the expanded state, for the empty state and for
        /// strings whose dot the frontier covers, extends (with the node in the frontier or
        /// not) or leaves a gap after; the general decoder reads back the expanded state; a
        /// shortened encoding never decodes. One `CompactWire` serves two frontiers in turn.
        #[test]
        fn compact_states_encode_as_serde_does(
            frontier in proptest::collection::vec((node(), counter()), 0..4),
            other in proptest::collection::vec((node(), counter()), 0..3),
            dot_node in node(),
            relation in 0..4u8,
            gap in 2..1_000u64,
            wall in any::<u64>(),
            logical in any::<u32>(),
            value in proptest::collection::vec(any::<u8>(), 0..300),
            in_store in any::<bool>(),
        ) {
            let mut wire = CompactWire::default();
            for pairs in [&frontier, &other] {
                let mut f = VersionVector::new();
                for &(n, c) in pairs {
                    f.raise(NodeId(n), c);
                }
                let own = f.get(NodeId(dot_node));
                let counter = match relation {
                    0 if own > 0 => own,                    // covered
                    1 => own.saturating_add(1),             // extends the frontier
                    2 => own.saturating_add(gap),           // a gap: the cloud
                    _ => own.saturating_add(1).max(1),
                };
                let d = Dot::new(NodeId(dot_node), counter.max(1));
                let ts = Hlc::new(wall, logical, NodeId(dot_node));
                let states = [
                    KeyState::default(),
                    KeyState {
                        repr: Repr::Str(CompactStr {
                            dot: d,
                            ts,
                            value: (!in_store).then(|| value.clone().into_boxed_slice()),
                            over: None,
                        }),
                    },
                ];
                // The short form covers a string that keeps an overwritten dot, and one with a
                // zero stamp, too (both take the general path of `encode_into`).
                let more = [
                    KeyState {
                        repr: Repr::Str(CompactStr {
                            dot: d,
                            ts,
                            value: (!in_store).then(|| value.clone().into_boxed_slice()),
                            over: Some(Dot::new(NodeId(dot_node.wrapping_add(1)), gap)),
                        }),
                    },
                    KeyState {
                        repr: Repr::Str(CompactStr {
                            dot: d,
                            ts: Hlc::ZERO,
                            value: (!in_store).then(|| value.clone().into_boxed_slice()),
                            over: None,
                        }),
                    },
                ];
                let stored = in_store.then_some(&value[..]);
                for st in &more {
                    let full = st.expand(&f, stored).into_owned();
                    let theirs = codec().serialize(&full).unwrap();
                    let mut short = Vec::new();
                    prop_assert!(st.encode_move_short(stored, &mut short));
                    let mut expanded = Vec::new();
                    prop_assert!(
                        expand_move_short(&short, &mut CompactWire::default(), &f, &mut expanded)
                            .is_some()
                    );
                    prop_assert_eq!(&expanded, &theirs);
                }
                for st in &states {
                    let mut ours = Vec::new();
                    st.encode_into(&mut wire, &f, stored, &mut ours);
                    let full = st.expand(&f, stored).into_owned();
                    let theirs = codec().serialize(&full).unwrap();
                    prop_assert_eq!(&ours, &theirs);
                    prop_assert_eq!(codec().deserialize::<Full>(&ours).unwrap(), full);
                    prop_assert!(codec().deserialize::<Full>(&ours[..ours.len() - 1]).is_err());
                    // A move slice's short form, expanded by the receiver with the same
                    // frontier, is the general form exactly; cut short, it is refused.
                    let mut short = Vec::new();
                    if st.encode_move_short(stored, &mut short) {
                        let mut expanded = Vec::new();
                        let mut other_wire = CompactWire::default();
                        prop_assert!(
                            expand_move_short(&short, &mut other_wire, &f, &mut expanded).is_some()
                        );
                        prop_assert_eq!(&expanded, &theirs);
                        prop_assert!(short.len() <= theirs.len());
                        prop_assert!(expand_move_short(
                            &short[..short.len() - 1],
                            &mut other_wire,
                            &f,
                            &mut expanded
                        )
                        .is_none());
                    } else {
                        prop_assert!(false, "every compact state has a short form");
                    }
                }
            }
        }
    }

    #[test]
    fn a_general_state_takes_the_general_path() {
        let mut f = VersionVector::new();
        f.raise(NodeId(1), 5);
        let mut full = Full::fresh(&f);
        full.removals.insert(Dot::new(NodeId(2), 9));
        let st = KeyState {
            repr: Repr::Full(Box::new(full.clone())),
        };
        let mut out = Vec::new();
        st.encode_into(&mut CompactWire::default(), &f, None, &mut out);
        assert_eq!(out, codec().serialize(&full).unwrap());
    }
}

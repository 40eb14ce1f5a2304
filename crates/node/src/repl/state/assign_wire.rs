//! The wire encoding of the commonest delta, a plain string assignment, written and read by
//! hand.
//!
//! The flush encoded every queued delta through serde and bincode: about 3,600 instructions per
//! replicated SET on the writer, most of it walking the eight components of a `Full` that holds
//! one string; a replica decoded it into a `Full` (maps allocated and freed per write). This
//! writes the same bytes directly (the tests compare them with serde's on random deltas), so
//! peers see no difference and the protocol is unchanged, and reads them into an
//! [`Assignment`] that a compact state joins without building a `Full`.

use bytes::Bytes;
use lattice_crdt::{CausalContext, Dot, Hlc, NodeId, OrMap, VersionVector};

use super::{Full, Kind, Reg};

/// The presence mask of a plain assignment: the string component (bit 0) and the type stamps
/// (bit 6).
const ASSIGNMENT_MASK: u8 = 1 | 1 << 6;

/// A plain string assignment delta ([`Full::plain_assignment`]) as a replica receives it.
#[derive(Debug, PartialEq)]
pub struct Assignment {
    pub dot: Dot,
    pub reg: Reg,
    /// The string component's causal context.
    pub cc: CausalContext,
}

impl Assignment {
    /// Reads a delta in exactly the layout [`Full::encode_assignment_into`] writes; None for
    /// anything else (which the general decoder reads).
    pub fn decode(bytes: &[u8]) -> Option<Assignment> {
        let mut r = Reader { bytes, at: 0 };
        if r.byte()? != ASSIGNMENT_MASK || r.varint()? != 1 || r.varint()? != 1 {
            return None;
        }
        let dot = r.dot()?;
        let base_ts = r.hlc()?;
        let len = usize::try_from(r.varint()?).ok()?;
        let base = Bytes::copy_from_slice(r.take(len)?);
        if r.varint()? != 0 {
            return None; // counter parts: not a plain assignment
        }
        let mut vv = VersionVector::new();
        for _ in 0..r.varint()? {
            let node = r.node()?;
            vv.raise(node, r.varint()?);
        }
        let mut cc = CausalContext::from_vv(&vv);
        for _ in 0..r.varint()? {
            cc.insert(r.dot()?);
        }
        if r.hlc()? != base_ts {
            return None;
        }
        for _ in 1..5 {
            if r.hlc()? != Hlc::ZERO {
                return None;
            }
        }
        (r.at == bytes.len()).then(|| Assignment {
            dot,
            reg: Reg::assigned(base, base_ts),
            cc,
        })
    }

    /// The delta in the general form.
    pub fn to_full(&self) -> Full {
        let mut full = Full {
            string: OrMap::singleton((), self.dot, self.reg.clone(), self.cc.clone()),
            ..Full::default()
        };
        full.stamps[Kind::Str as usize] = self.reg.base_ts;
        full
    }
}

/// A local plain string assignment as the writer's capture issues it: its stamp, and the dot
/// of the compact string it overwrote, if any. The value is the store's (the capture runs after
/// the command wrote it), so queueing this instead of the `Full` delta it stands for
/// ([`AssignStamp::to_full`]) leaves the flush a few bytes to copy where it built, encoded and
/// freed a general state per write (ARCHITECTURE §73).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AssignStamp {
    pub dot: Dot,
    pub ts: Hlc,
    pub overwritten: Option<Dot>,
}

impl AssignStamp {
    /// The string component's causal context: the new dot and the overwritten one.
    pub fn context(&self) -> CausalContext {
        CausalContext::from_dots(self.overwritten.into_iter().chain([self.dot]))
    }

    /// The delta in the general form, `value` being the assigned string.
    pub fn to_full(&self, value: &[u8]) -> Full {
        let mut cc = CausalContext::new();
        if let Some(d) = self.overwritten {
            cc.insert(d);
        }
        let reg = Reg::assigned(Bytes::copy_from_slice(value), self.ts);
        let mut full = Full {
            string: OrMap::singleton((), self.dot, reg, cc),
            ..Full::default()
        };
        full.stamps[Kind::Str as usize] = self.ts;
        full
    }

    /// Appends the wire encoding of [`AssignStamp::to_full`] of `value` to `out`: the bytes
    /// [`Full::encode_assignment_into`] writes for it, without building it. Returns where in
    /// `out` the value's copy starts.
    pub fn encode_into(&self, value: &[u8], out: &mut Vec<u8>) -> usize {
        out.push(ASSIGNMENT_MASK);
        string_entry(out, self.dot, self.ts, value);
        // The value is followed by the empty counter parts' length, one byte.
        let value_at = out.len() - 1 - value.len();
        few_dots_context(out, self.overwritten, self.dot);
        hlc(out, self.ts);
        for _ in 1..5 {
            hlc(out, Hlc::ZERO);
        }
        value_at
    }
}

/// The encoding of the causal context holding exactly `a` (if any) and `b`, in the canonical
/// form `CausalContext` keeps (each node's dots counted from 1 without a gap go into its
/// vector, the rest into the cloud), as [`context`] would write it, without building one.
fn few_dots_context(out: &mut Vec<u8>, a: Option<Dot>, b: Dot) {
    // The dots in (node, counter) order, once each.
    let dots: ([Dot; 2], usize) = match a {
        Some(a) if a == b => ([b, b], 1),
        Some(a) if a < b => ([a, b], 2),
        Some(a) => ([b, a], 2),
        None => ([b, b], 1),
    };
    let dots = &dots.0[..dots.1];
    // Per dot, the vector entry it makes its node's top (counter 1, or 2 above its node's 1).
    let mut in_vv = [false; 2];
    for (i, d) in dots.iter().enumerate() {
        let below = i > 0 && in_vv[i - 1] && dots[i - 1].node == d.node;
        in_vv[i] = d.counter == 1 || (below && d.counter == dots[i - 1].counter + 1);
    }
    // A node's vector entry is its last dot in the vector.
    let n = dots.len();
    let is_top =
        |i: usize| in_vv[i] && !(i + 1 < n && in_vv[i + 1] && dots[i + 1].node == dots[i].node);
    varint(out, (0..n).filter(|&i| is_top(i)).count() as u64);
    for (i, d) in dots.iter().enumerate() {
        if is_top(i) {
            varint(out, u64::from(d.node.0));
            varint(out, d.counter);
        }
    }
    varint(out, (0..n).filter(|&i| !in_vv[i]).count() as u64);
    for (i, d) in dots.iter().enumerate() {
        if !in_vv[i] {
            dot(out, *d);
        }
    }
}

/// A cursor over bincode's encoding; every read is None past the end or on a malformed value.
pub(super) struct Reader<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    pub(super) fn varint(&mut self) -> Option<u64> {
        Some(match self.byte()? {
            n @ 0..=250 => u64::from(n),
            251 => u64::from(u16::from_le_bytes(self.take(2)?.try_into().ok()?)),
            252 => u64::from(u32::from_le_bytes(self.take(4)?.try_into().ok()?)),
            253 => u64::from_le_bytes(self.take(8)?.try_into().ok()?),
            _ => return None,
        })
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.varint()?).ok()
    }

    fn node(&mut self) -> Option<NodeId> {
        Some(NodeId(self.u32()?))
    }

    pub(super) fn dot(&mut self) -> Option<Dot> {
        let node = self.node()?;
        let counter = self.varint()?;
        (counter >= 1).then(|| Dot::new(node, counter))
    }

    pub(super) fn hlc(&mut self) -> Option<Hlc> {
        let wall_ms = self.varint()?;
        let logical = self.u32()?;
        Some(Hlc::new(wall_ms, logical, self.node()?))
    }
}

/// bincode's variable-length integer (`with_varint_encoding`): one byte below 251, else a
/// marker byte and the little-endian u16, u32 or u64.
pub(super) fn varint(out: &mut Vec<u8>, n: u64) {
    if n < 251 {
        out.push(n as u8);
    } else if let Ok(n) = u16::try_from(n) {
        out.push(251);
        out.extend_from_slice(&n.to_le_bytes());
    } else if let Ok(n) = u32::try_from(n) {
        out.push(252);
        out.extend_from_slice(&n.to_le_bytes());
    } else {
        out.push(253);
        out.extend_from_slice(&n.to_le_bytes());
    }
}

pub(super) fn hlc(out: &mut Vec<u8>, h: Hlc) {
    varint(out, h.wall_ms);
    varint(out, u64::from(h.logical));
    varint(out, u64::from(h.node.0));
}

pub(super) fn dot(out: &mut Vec<u8>, d: Dot) {
    varint(out, u64::from(d.node.0));
    varint(out, d.counter);
}

fn context(out: &mut Vec<u8>, cc: &CausalContext) {
    varint(out, cc.vv().iter().count() as u64);
    for (node, counter) in cc.vv().iter() {
        varint(out, u64::from(node.0));
        varint(out, counter);
    }
    varint(out, cc.cloud().len() as u64);
    for d in cc.cloud().iter() {
        dot(out, d);
    }
}

/// A string component's one entry, without the context that follows it: one key (the unit
/// key writes nothing) holding one dot, whose register is `value` assigned at `ts`.
pub(super) fn string_entry(out: &mut Vec<u8>, d: Dot, ts: Hlc, value: &[u8]) {
    varint(out, 1);
    varint(out, 1);
    dot(out, d);
    hlc(out, ts);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
    varint(out, 0); // no counter parts
}

impl Full {
    /// Appends this delta's wire encoding to `out` when it is a plain string assignment
    /// ([`Full::plain_assignment`]); returns false, writing nothing, otherwise.
    pub fn encode_assignment_into(&self, out: &mut Vec<u8>) -> bool {
        let Some((d, reg)) = self.plain_assignment() else {
            return false;
        };
        out.push(ASSIGNMENT_MASK);
        string_entry(out, d, reg.base_ts, &reg.base);
        context(out, self.string.context());
        for (i, stamp) in self.stamps.iter().enumerate() {
            debug_assert!(i == Kind::Str as usize || *stamp == Hlc::ZERO);
            hlc(out, *stamp);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::codec;
    use super::*;
    use bincode::Options as _;
    use bytes::Bytes;
    use proptest::prelude::*;

    proptest! {
        /// Byte for byte what serde writes, including integers on every side of bincode's
        /// varint boundaries.
        #[test]
        fn assignments_encode_as_serde_does(
            node in prop_oneof![Just(1u32), Just(250), Just(251), Just(70_000), any::<u32>()],
            counter in prop_oneof![1..300u64, 60_000..70_000u64, 4_294_967_000..4_294_968_000u64, any::<u64>().prop_map(|c| c.max(1))],
            old in proptest::option::of(1..100_000u64),
            wall in any::<u64>(),
            logical in any::<u32>(),
            value in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let d = Dot::new(NodeId(node), counter);
            let ts = Hlc::new(wall, logical, NodeId(node));
            let mut cc = CausalContext::new();
            cc.insert(d);
            if let Some(o) = old {
                cc.insert(Dot::new(NodeId(node % 7 + 1), o));
            }
            let mut delta = Full {
                string: OrMap::singleton((), d, Reg::assigned(Bytes::from(value), ts), cc),
                ..Full::default()
            };
            delta.stamps[Kind::Str as usize] = ts;
            let mut ours = Vec::new();
            prop_assert!(delta.encode_assignment_into(&mut ours));
            let theirs = codec().serialize(&delta).unwrap();
            prop_assert_eq!(&ours, &theirs);
            let read = Assignment::decode(&theirs).expect("a plain assignment");
            prop_assert_eq!(read.to_full(), delta);
            // Cut short anywhere: not read.
            for cut in 0..theirs.len() {
                prop_assert!(Assignment::decode(&theirs[..cut]).is_none());
            }
        }
    }

    fn small_dot() -> impl Strategy<Value = Dot> {
        // Counters 1-3 on two nodes: every way two dots can share a node, start its vector
        // or leave a gap; plus large ones for the varint boundaries.
        let node = prop_oneof![Just(1u32), Just(2), Just(251), any::<u32>()];
        let counter = prop_oneof![1..4u64, 250..253u64, any::<u64>().prop_map(|c| c.max(1))];
        (node, counter).prop_map(|(n, c)| Dot::new(NodeId(n), c))
    }

    proptest! {
        /// A captured stamp writes the bytes serde writes for the delta it stands for, and
        /// its context is that delta's.
        #[test]
        fn stamps_encode_as_their_full_delta_does(
            d in small_dot(),
            overwritten in proptest::option::of(small_dot()),
            wall in any::<u64>(),
            logical in any::<u32>(),
            value in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let a = AssignStamp { dot: d, ts: Hlc::new(wall, logical, d.node), overwritten };
            let full = a.to_full(&value);
            let mut ours = vec![7u8]; // appended after what is there
            let at = a.encode_into(&value, &mut ours);
            prop_assert_eq!(&ours[at..at + value.len()], &value[..]);
            let theirs = codec().serialize(&full).unwrap();
            prop_assert_eq!(&ours[1..], &theirs[..]);
            prop_assert_eq!(&a.context(), full.string.context());
            let read = Assignment::decode(&theirs).expect("a plain assignment");
            prop_assert_eq!(read.to_full(), full);
        }
    }

    #[test]
    fn anything_else_is_left_to_serde() {
        let mut out = Vec::new();
        assert!(!Full::default().encode_assignment_into(&mut out));
        assert!(out.is_empty());
        let empty = codec().serialize(&Full::default()).unwrap();
        assert!(Assignment::decode(&empty).is_none());
    }
}

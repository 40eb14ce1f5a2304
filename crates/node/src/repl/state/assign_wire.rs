//! The wire encoding of the commonest delta, a plain string assignment, written by hand.
//!
//! The flush encoded every queued delta through serde and bincode: about 3,600 instructions per
//! replicated SET on the writer, most of it walking the eight components of a `Full` that holds
//! one string. This writes the same bytes directly (the test below compares them with serde's
//! on random deltas), so peers see no difference and the protocol is unchanged.

use lattice_crdt::{CausalContext, Dot, Hlc};

use super::{Full, Kind};

/// bincode's variable-length integer (`with_varint_encoding`): one byte below 251, else a
/// marker byte and the little-endian u16, u32 or u64.
fn varint(out: &mut Vec<u8>, n: u64) {
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

fn hlc(out: &mut Vec<u8>, h: Hlc) {
    varint(out, h.wall_ms);
    varint(out, u64::from(h.logical));
    varint(out, u64::from(h.node.0));
}

fn dot(out: &mut Vec<u8>, d: Dot) {
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

impl Full {
    /// Appends this delta's wire encoding to `out` when it is a plain string assignment
    /// ([`Full::plain_assignment`]); returns false, writing nothing, otherwise.
    pub fn encode_assignment_into(&self, out: &mut Vec<u8>) -> bool {
        let Some((d, reg)) = self.plain_assignment() else {
            return false;
        };
        // The presence mask: the string component (bit 0) and the type stamps (bit 6).
        out.push(1 | 1 << 6);
        // string: one key (the unit key writes nothing) holding one dot.
        varint(out, 1);
        varint(out, 1);
        dot(out, d);
        hlc(out, reg.base_ts);
        varint(out, reg.base.len() as u64);
        out.extend_from_slice(&reg.base);
        varint(out, 0); // no counter parts
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
    use super::super::{codec, Reg};
    use super::*;
    use bincode::Options as _;
    use bytes::Bytes;
    use lattice_crdt::{NodeId, OrMap};
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
            prop_assert_eq!(ours, codec().serialize(&delta).unwrap());
        }
    }

    #[test]
    fn anything_else_is_left_to_serde() {
        let mut out = Vec::new();
        assert!(!Full::default().encode_assignment_into(&mut out));
        assert!(out.is_empty());
    }
}

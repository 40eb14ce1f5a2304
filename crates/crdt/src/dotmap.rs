//! The dots of one key of an observed-remove type, with their payloads: a map `Dot -> P` kept
//! as a vector sorted by dot.
//!
//! A key almost always has one dot (two or three only while concurrent writes await a later
//! write that supersedes them), and a `BTreeMap` allocates a node sized for eleven entries on
//! its first insert: about a kilobyte for one hash field, sorted-set member or string write,
//! in every stored state and every delta. An exactly sized vector holds one entry in its own
//! size. Iteration is in ascending dot order, and the serialized form is a map, as the
//! `BTreeMap`'s was: the wire encoding and every digest are unchanged.

use crate::Dot;

/// A map from dots to payloads, in ascending dot order.
#[derive(Clone, Debug, PartialEq)]
pub struct DotMap<P> {
    entries: Vec<(Dot, P)>,
}

impl<P> Default for DotMap<P> {
    fn default() -> Self {
        DotMap {
            entries: Vec::new(),
        }
    }
}

impl<P> DotMap<P> {
    /// The map holding `dot -> payload` alone.
    #[must_use]
    pub fn single(dot: Dot, payload: P) -> DotMap<P> {
        // `vec!` of one element allocates exactly one.
        DotMap {
            entries: vec![(dot, payload)],
        }
    }

    fn find(&self, dot: Dot) -> Result<usize, usize> {
        self.entries.binary_search_by(|(d, _)| d.cmp(&dot))
    }

    /// The payload at `dot`.
    #[must_use]
    pub fn get(&self, dot: &Dot) -> Option<&P> {
        self.find(*dot).ok().map(|i| &self.entries[i].1)
    }

    /// Sets `dot`'s payload; returns the previous one.
    pub fn insert(&mut self, dot: Dot, payload: P) -> Option<P> {
        match self.find(dot) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, payload)),
            Err(i) => {
                // Grow by one: a key's dots are few, and spare capacity would be kept by
                // every stored state.
                self.entries.reserve_exact(1);
                self.entries.insert(i, (dot, payload));
                None
            }
        }
    }

    /// Keeps the entries for which `keep` returns true.
    pub fn retain(&mut self, mut keep: impl FnMut(&Dot, &mut P) -> bool) {
        self.entries.retain_mut(|(d, p)| keep(d, p));
        if self.entries.capacity() > self.entries.len() {
            self.entries.shrink_to_fit();
        }
    }

    /// Number of dots.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no dots.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `(dot, payload)` in ascending dot order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&Dot, &P)> + DoubleEndedIterator + '_ {
        self.entries.iter().map(|(d, p)| (d, p))
    }

    /// The dots, ascending.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &Dot> + '_ {
        self.entries.iter().map(|(d, _)| d)
    }

    /// The payloads, in dot order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &P> + '_ {
        self.entries.iter().map(|(_, p)| p)
    }
}

impl<'a, P> IntoIterator for &'a DotMap<P> {
    type Item = (&'a Dot, &'a P);
    type IntoIter =
        std::iter::Map<std::slice::Iter<'a, (Dot, P)>, fn(&'a (Dot, P)) -> (&'a Dot, &'a P)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(d, p)| (d, p))
    }
}

#[cfg(feature = "serde")]
impl<P: serde::Serialize> serde::Serialize for DotMap<P> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

#[cfg(feature = "serde")]
impl<'de, P: serde::Deserialize<'de>> serde::Deserialize<'de> for DotMap<P> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries<P>(std::marker::PhantomData<P>);
        impl<'de, P: serde::Deserialize<'de>> serde::de::Visitor<'de> for Entries<P> {
            type Value = DotMap<P>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of dots to payloads")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<DotMap<P>, A::Error> {
                // No capacity from the untrusted length: entries arrive one by one.
                let mut out = DotMap::default();
                while let Some((dot, payload)) = m.next_entry::<Dot, P>()? {
                    out.insert(dot, payload);
                }
                Ok(out)
            }
        }
        d.deserialize_map(Entries(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NodeId;

    fn d(n: u32, c: u64) -> Dot {
        Dot {
            node: NodeId(n),
            counter: c,
        }
    }

    #[test]
    fn keeps_dot_order_and_replaces_in_place() {
        let mut m = DotMap::default();
        assert_eq!(m.insert(d(2, 1), 'b'), None);
        assert_eq!(m.insert(d(1, 5), 'a'), None);
        assert_eq!(m.insert(d(3, 1), 'c'), None);
        assert_eq!(m.insert(d(1, 5), 'A'), Some('a'));
        let dots: Vec<Dot> = m.keys().copied().collect();
        assert_eq!(dots, vec![d(1, 5), d(2, 1), d(3, 1)]);
        assert_eq!(m.get(&d(1, 5)), Some(&'A'));
        m.retain(|dot, _| dot.node != NodeId(2));
        assert_eq!(m.values().copied().collect::<String>(), "Ac");
    }
}

//! An order-statistic B+ tree: a sorted collection of distinct keys that also answers "what is
//! the rank of this key" and "which key has this rank" in O(log n).
//!
//! Sorted sets keep their (score, member) pairs here. Why a B+ tree rather than Redis's skip
//! list: no randomness is needed to shape it (the node may only draw from its seeded RNG and a
//! data structure that consumes draws would couple unrelated commands), its leaves are
//! contiguous arrays (a rank query touches ~log64(n) cache-friendly nodes instead of ~log2(n)
//! scattered ones), and every node knows how many keys each child subtree holds, which is all
//! rank arithmetic needs.
//!
//! Shape: keys live only in leaves (at most [`LEAF_MAX`] each). An inner node holds its
//! children, the number of keys under each child, and separators: `seps[i]` is a key with
//! `every key under kids[i] < seps[i] <= every key under kids[i + 1]`. Separators are copies
//! made when a node splits; they may go stale when keys are removed (a separator need not be a
//! present key), which keeps removal from having to touch ancestors beyond their counts.
//! Nodes below a quarter full are merged with or refilled from a sibling, so the height stays
//! logarithmic in the current size, not the historical one.

use std::cmp::Ordering;
use std::fmt;

const LEAF_MAX: usize = 64;
const LEAF_MIN: usize = LEAF_MAX / 4;
const INNER_MAX: usize = 64;
const INNER_MIN: usize = INNER_MAX / 4;

#[derive(Clone)]
enum Node<K> {
    Leaf(Vec<K>),
    Inner(Box<Inner<K>>),
}

#[derive(Clone)]
struct Inner<K> {
    seps: Vec<K>,
    kids: Vec<Node<K>>,
    /// Keys under each child.
    sizes: Vec<usize>,
}

impl<K> Node<K> {
    fn size(&self) -> usize {
        match self {
            Node::Leaf(v) => v.len(),
            Node::Inner(n) => n.sizes.iter().sum(),
        }
    }

    fn underfull(&self) -> bool {
        match self {
            Node::Leaf(v) => v.len() < LEAF_MIN,
            Node::Inner(n) => n.kids.len() < INNER_MIN,
        }
    }
}

/// A sorted collection of distinct keys with rank queries. See the module documentation.
#[derive(Clone)]
pub struct OsTree<K> {
    root: Node<K>,
    len: usize,
}

impl<K> Default for OsTree<K> {
    fn default() -> Self {
        OsTree {
            root: Node::Leaf(Vec::new()),
            len: 0,
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for OsTree<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<K> OsTree<K> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The key of rank `rank` (0 = smallest).
    pub fn get(&self, mut rank: usize) -> Option<&K> {
        if rank >= self.len {
            return None;
        }
        let mut node = &self.root;
        loop {
            match node {
                Node::Leaf(v) => return v.get(rank),
                Node::Inner(n) => {
                    let mut i = 0;
                    while rank >= n.sizes[i] {
                        rank -= n.sizes[i];
                        i += 1;
                    }
                    node = &n.kids[i];
                }
            }
        }
    }

    pub fn first(&self) -> Option<&K> {
        self.get(0)
    }

    pub fn last(&self) -> Option<&K> {
        self.len.checked_sub(1).and_then(|r| self.get(r))
    }

    /// How many keys satisfy `pred`, which must hold for a prefix of the keys in order (true,
    /// ..., true, false, ..., false) — the rank of the first key for which it fails.
    pub fn partition_point(&self, mut pred: impl FnMut(&K) -> bool) -> usize {
        let mut rank = 0;
        let mut node = &self.root;
        loop {
            match node {
                Node::Leaf(v) => return rank + v.partition_point(&mut pred),
                Node::Inner(n) => {
                    // A true separator means every key left of it is true; a false one means
                    // every key right of it is false: the boundary is in child `t`.
                    let t = n.seps.partition_point(&mut pred);
                    rank += n.sizes[..t].iter().sum::<usize>();
                    node = &n.kids[t];
                }
            }
        }
    }

    /// Keys in order, starting at rank `rank` (ascending) — or, when `rev`, starting at rank
    /// `rank` and going down to rank 0.
    pub fn iter_at(&self, rank: usize, rev: bool) -> Iter<'_, K> {
        let mut it = Iter {
            stack: Vec::new(),
            leaf: &[],
            pos: 0,
            remaining: 0,
            rev,
        };
        if rank >= self.len {
            return it;
        }
        it.remaining = if rev { rank + 1 } else { self.len - rank };
        let mut r = rank;
        let mut node = &self.root;
        loop {
            match node {
                Node::Leaf(v) => {
                    it.leaf = v;
                    it.pos = if rev { r + 1 } else { r };
                    return it;
                }
                Node::Inner(n) => {
                    let mut i = 0;
                    while r >= n.sizes[i] {
                        r -= n.sizes[i];
                        i += 1;
                    }
                    it.stack.push((&**n, i));
                    node = &n.kids[i];
                }
            }
        }
    }

    /// All keys in ascending order.
    pub fn iter(&self) -> Iter<'_, K> {
        self.iter_at(0, false)
    }

    /// Approximate heap bytes held by the tree's nodes (not by what the keys own).
    pub fn node_bytes(&self) -> usize {
        fn walk<K>(n: &Node<K>) -> usize {
            match n {
                Node::Leaf(v) => v.capacity() * std::mem::size_of::<K>(),
                Node::Inner(n) => {
                    std::mem::size_of::<Inner<K>>()
                        + n.seps.capacity() * std::mem::size_of::<K>()
                        + n.kids.capacity() * std::mem::size_of::<Node<K>>()
                        + n.sizes.capacity() * std::mem::size_of::<usize>()
                        + n.kids.iter().map(walk).sum::<usize>()
                }
            }
        }
        walk(&self.root)
    }
}

impl<K: Ord + Clone> OsTree<K> {
    /// Inserts `key`; false (and `key` is dropped) when an equal key is already present.
    pub fn insert(&mut self, key: K) -> bool {
        match insert_rec(&mut self.root, key) {
            Err(_) => false,
            Ok(split) => {
                self.len += 1;
                if let Some((sep, right)) = split {
                    let left = std::mem::replace(&mut self.root, Node::Leaf(Vec::new()));
                    let sizes = vec![left.size(), right.size()];
                    self.root = Node::Inner(Box::new(Inner {
                        seps: vec![sep],
                        kids: vec![left, right],
                        sizes,
                    }));
                }
                true
            }
        }
    }

    /// Removes the key equal to `key`, returning it.
    pub fn remove(&mut self, key: &K) -> Option<K> {
        self.remove_by(|k| k.cmp(key))
    }

    /// Removes the key for which `cmp` answers `Equal`; `cmp(k)` orders a stored key `k`
    /// against the target (as `k.cmp(target)` would), so the target need not be a `K`.
    pub fn remove_by(&mut self, mut cmp: impl FnMut(&K) -> Ordering) -> Option<K> {
        let removed = remove_rec(&mut self.root, &mut |n| match n {
            Target::Leaf(v) => v.binary_search_by(&mut cmp).ok(),
            Target::Inner(seps, _) => Some(seps.partition_point(|s| cmp(s) != Ordering::Greater)),
        })?;
        self.after_remove();
        Some(removed)
    }

    /// Removes the key of rank `rank`, returning it.
    pub fn remove_at(&mut self, rank: usize) -> Option<K> {
        if rank >= self.len {
            return None;
        }
        let mut r = rank;
        let removed = remove_rec(&mut self.root, &mut |n| match n {
            Target::Leaf(_) => Some(r),
            Target::Inner(_, sizes) => {
                let mut i = 0;
                while r >= sizes[i] {
                    r -= sizes[i];
                    i += 1;
                }
                Some(i)
            }
        })?;
        self.after_remove();
        Some(removed)
    }

    fn after_remove(&mut self) {
        self.len -= 1;
        if let Node::Inner(n) = &mut self.root {
            if n.kids.len() == 1 {
                let only = n.kids.pop().expect("one child");
                self.root = only;
            }
        }
    }

    /// The rank of the key equal to `key`, if present.
    pub fn rank(&self, key: &K) -> Option<usize> {
        self.rank_by(|k| k.cmp(key))
    }

    /// The rank of the key for which `cmp` answers `Equal` (see [`OsTree::remove_by`]).
    pub fn rank_by(&self, mut cmp: impl FnMut(&K) -> Ordering) -> Option<usize> {
        let mut rank = 0;
        let mut node = &self.root;
        loop {
            match node {
                Node::Leaf(v) => return v.binary_search_by(&mut cmp).ok().map(|p| rank + p),
                Node::Inner(n) => {
                    let i = n.seps.partition_point(|s| cmp(s) != Ordering::Greater);
                    rank += n.sizes[..i].iter().sum::<usize>();
                    node = &n.kids[i];
                }
            }
        }
    }

    /// The stored key equal to `key`.
    pub fn find(&self, key: &K) -> Option<&K> {
        self.rank(key).and_then(|r| self.get(r))
    }

    /// Checks every structural invariant; panics on violation (tests).
    pub fn check(&self) {
        fn walk<K: Ord>(
            n: &Node<K>,
            lo: Option<&K>,
            hi: Option<&K>,
            is_root: bool,
            depth: usize,
            leaf_depth: &mut Option<usize>,
        ) -> usize {
            match n {
                Node::Leaf(v) => {
                    assert!(v.len() <= LEAF_MAX, "leaf overfull");
                    assert!(is_root || v.len() >= LEAF_MIN, "leaf underfull");
                    assert!(v.windows(2).all(|w| w[0] < w[1]), "leaf unsorted");
                    if let (Some(lo), Some(first)) = (lo, v.first()) {
                        assert!(lo <= first, "key below its separator");
                    }
                    if let (Some(hi), Some(last)) = (hi, v.last()) {
                        assert!(last < hi, "key above its separator");
                    }
                    match leaf_depth {
                        Some(d) => assert_eq!(*d, depth, "leaves at different depths"),
                        None => *leaf_depth = Some(depth),
                    }
                    v.len()
                }
                Node::Inner(n) => {
                    assert_eq!(n.seps.len() + 1, n.kids.len(), "separator count");
                    assert_eq!(n.sizes.len(), n.kids.len(), "size count");
                    assert!(n.kids.len() <= INNER_MAX, "inner overfull");
                    assert!(
                        if is_root {
                            n.kids.len() >= 2
                        } else {
                            n.kids.len() >= INNER_MIN
                        },
                        "inner underfull"
                    );
                    assert!(
                        n.seps.windows(2).all(|w| w[0] < w[1]),
                        "separators unsorted"
                    );
                    let mut total = 0;
                    for (i, kid) in n.kids.iter().enumerate() {
                        let klo = if i == 0 { lo } else { Some(&n.seps[i - 1]) };
                        let khi = if i == n.seps.len() {
                            hi
                        } else {
                            Some(&n.seps[i])
                        };
                        let s = walk(kid, klo, khi, false, depth + 1, leaf_depth);
                        assert_eq!(s, n.sizes[i], "stale subtree size");
                        total += s;
                    }
                    total
                }
            }
        }
        let mut leaf_depth = None;
        let total = walk(&self.root, None, None, true, 0, &mut leaf_depth);
        assert_eq!(total, self.len, "len out of step");
    }
}

/// Splits a node that grew past its maximum: the separator and the new right sibling.
type Split<K> = Option<(K, Node<K>)>;

fn insert_rec<K: Ord + Clone>(node: &mut Node<K>, key: K) -> Result<Split<K>, K> {
    match node {
        Node::Leaf(items) => {
            let pos = match items.binary_search(&key) {
                Ok(_) => return Err(key),
                Err(p) => p,
            };
            items.insert(pos, key);
            if items.len() > LEAF_MAX {
                let right = items.split_off(items.len() / 2);
                let sep = right[0].clone();
                return Ok(Some((sep, Node::Leaf(right))));
            }
            Ok(None)
        }
        Node::Inner(n) => {
            let i = n.seps.partition_point(|s| s <= &key);
            let split = insert_rec(&mut n.kids[i], key)?;
            n.sizes[i] += 1;
            if let Some((sep, right)) = split {
                let rs = right.size();
                n.sizes[i] -= rs;
                n.seps.insert(i, sep);
                n.kids.insert(i + 1, right);
                n.sizes.insert(i + 1, rs);
                if n.kids.len() > INNER_MAX {
                    let mid = n.kids.len() / 2;
                    let kids = n.kids.split_off(mid);
                    let sizes = n.sizes.split_off(mid);
                    let seps = n.seps.split_off(mid);
                    let up = n.seps.pop().expect("separator between the halves");
                    return Ok(Some((
                        up,
                        Node::Inner(Box::new(Inner { seps, kids, sizes })),
                    )));
                }
            }
            Ok(None)
        }
    }
}

/// What a removal's navigator is shown at each level.
enum Target<'a, K> {
    Leaf(&'a [K]),
    Inner(&'a [K], &'a [usize]),
}

/// Removes the key the navigator leads to: at a leaf it names the position (or `None`: not
/// present), at an inner node the child to descend into.
fn remove_rec<K: Ord + Clone>(
    node: &mut Node<K>,
    nav: &mut impl FnMut(Target<'_, K>) -> Option<usize>,
) -> Option<K> {
    match node {
        Node::Leaf(items) => {
            let p = nav(Target::Leaf(items))?;
            Some(items.remove(p))
        }
        Node::Inner(n) => {
            let i = nav(Target::Inner(&n.seps, &n.sizes))?;
            let k = remove_rec(&mut n.kids[i], nav)?;
            n.sizes[i] -= 1;
            if n.kids[i].underfull() {
                n.rebalance(i);
            }
            Some(k)
        }
    }
}

impl<K: Ord + Clone> Inner<K> {
    /// Child `i` fell below its minimum: merge it with a sibling, or even the two out.
    fn rebalance(&mut self, i: usize) {
        if self.kids.len() < 2 {
            return;
        }
        let l = if i > 0 { i - 1 } else { i };
        let (left_part, right_part) = self.kids.split_at_mut(l + 1);
        let merged = match (&mut left_part[l], &mut right_part[0]) {
            (Node::Leaf(a), Node::Leaf(b)) => {
                if a.len() + b.len() <= LEAF_MAX {
                    a.append(b);
                    true
                } else {
                    let want = (a.len() + b.len()) / 2;
                    if a.len() < want {
                        let n = want - a.len();
                        a.extend(b.drain(..n));
                    } else {
                        let tail = a.split_off(want);
                        b.splice(0..0, tail);
                    }
                    self.seps[l] = b[0].clone();
                    self.sizes[l] = a.len();
                    self.sizes[l + 1] = b.len();
                    false
                }
            }
            (Node::Inner(a), Node::Inner(b)) => {
                if a.kids.len() + b.kids.len() <= INNER_MAX {
                    let sep = self.seps[l].clone();
                    a.seps.push(sep);
                    a.seps.append(&mut b.seps);
                    a.kids.append(&mut b.kids);
                    a.sizes.append(&mut b.sizes);
                    true
                } else {
                    let want = (a.kids.len() + b.kids.len()) / 2;
                    while a.kids.len() < want {
                        // Rotate b's first child through the parent separator.
                        let up = b.seps.remove(0);
                        a.seps.push(std::mem::replace(&mut self.seps[l], up));
                        a.kids.push(b.kids.remove(0));
                        a.sizes.push(b.sizes.remove(0));
                    }
                    while a.kids.len() > want {
                        let up = a.seps.pop().expect("separator");
                        b.seps.insert(0, std::mem::replace(&mut self.seps[l], up));
                        b.kids.insert(0, a.kids.pop().expect("child"));
                        b.sizes.insert(0, a.sizes.pop().expect("size"));
                    }
                    self.sizes[l] = a.sizes.iter().sum();
                    self.sizes[l + 1] = b.sizes.iter().sum();
                    false
                }
            }
            _ => unreachable!("siblings are at the same depth"),
        };
        if merged {
            self.seps.remove(l);
            self.kids.remove(l + 1);
            let moved = self.sizes.remove(l + 1);
            self.sizes[l] += moved;
        }
    }
}

/// An iterator over keys in order (or reverse order) from a starting rank.
pub struct Iter<'a, K> {
    /// Inner nodes on the path to the current leaf, with the child index taken at each.
    stack: Vec<(&'a Inner<K>, usize)>,
    leaf: &'a [K],
    /// Forward: the next index to yield. Reverse: one past it.
    pos: usize,
    remaining: usize,
    rev: bool,
}

impl<'a, K> Iter<'a, K> {
    /// Moves to the next leaf in the iteration direction.
    fn step_leaf(&mut self) -> bool {
        loop {
            let Some((n, i)) = self.stack.pop() else {
                return false;
            };
            let next = if self.rev {
                if i == 0 {
                    continue;
                }
                i - 1
            } else {
                if i + 1 >= n.kids.len() {
                    continue;
                }
                i + 1
            };
            self.stack.push((n, next));
            let mut node = &n.kids[next];
            loop {
                match node {
                    Node::Leaf(v) => {
                        self.leaf = v;
                        self.pos = if self.rev { v.len() } else { 0 };
                        return true;
                    }
                    Node::Inner(inner) => {
                        let j = if self.rev { inner.kids.len() - 1 } else { 0 };
                        self.stack.push((&**inner, j));
                        node = &inner.kids[j];
                    }
                }
            }
        }
    }
}

impl<'a, K> Iterator for Iter<'a, K> {
    type Item = &'a K;

    fn next(&mut self) -> Option<&'a K> {
        if self.remaining == 0 {
            return None;
        }
        loop {
            if self.rev {
                if self.pos > 0 {
                    self.pos -= 1;
                    self.remaining -= 1;
                    return Some(&self.leaf[self.pos]);
                }
            } else if self.pos < self.leaf.len() {
                self.pos += 1;
                self.remaining -= 1;
                return Some(&self.leaf[self.pos - 1]);
            }
            if !self.step_leaf() {
                self.remaining = 0;
                return None;
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<K> ExactSizeIterator for Iter<'_, K> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u16),
        Remove(u16),
        RemoveAt(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => any::<u16>().prop_map(|k| Op::Insert(k % 2000)),
            2 => any::<u16>().prop_map(|k| Op::Remove(k % 2000)),
            1 => any::<u16>().prop_map(Op::RemoveAt),
        ]
    }

    fn compare(tree: &OsTree<u16>, model: &[u16]) {
        tree.check();
        assert_eq!(tree.len(), model.len());
        assert!(tree.iter().copied().eq(model.iter().copied()));
        let n = model.len();
        for probe in [0, 1, n / 3, n / 2, n.saturating_sub(1), n, n + 1] {
            assert_eq!(tree.get(probe), model.get(probe));
            let fwd: Vec<u16> = tree.iter_at(probe, false).copied().collect();
            assert_eq!(fwd, model.get(probe..).unwrap_or(&[]).to_vec());
            let rev: Vec<u16> = tree.iter_at(probe, true).copied().collect();
            let want: Vec<u16> = if probe < n {
                model[..=probe].iter().rev().copied().collect()
            } else {
                Vec::new()
            };
            assert_eq!(rev, want);
        }
        for k in [0u16, 7, 500, 1000, 1999, 2500] {
            assert_eq!(tree.rank(&k), model.binary_search(&k).ok());
            assert_eq!(
                tree.partition_point(|x| *x < k),
                model.partition_point(|x| *x < k)
            );
            assert_eq!(
                tree.partition_point(|x| *x <= k),
                model.partition_point(|x| *x <= k)
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn matches_a_sorted_vec(ops in proptest::collection::vec(op(), 1..3000)) {
            let mut tree = OsTree::new();
            let mut model: Vec<u16> = Vec::new();
            for (step, op) in ops.iter().enumerate() {
                match *op {
                    Op::Insert(k) => {
                        let fresh = model.binary_search(&k).map_err(|p| model.insert(p, k)).is_err();
                        prop_assert_eq!(tree.insert(k), fresh);
                    }
                    Op::Remove(k) => {
                        let want = model.binary_search(&k).ok().map(|p| model.remove(p));
                        prop_assert_eq!(tree.remove(&k), want);
                    }
                    Op::RemoveAt(r) => {
                        let r = if model.is_empty() { r as usize } else { r as usize % (model.len() + 1) };
                        let want = (r < model.len()).then(|| model.remove(r));
                        prop_assert_eq!(tree.remove_at(r), want);
                    }
                }
                if step % 97 == 0 {
                    compare(&tree, &model);
                }
            }
            compare(&tree, &model);
        }
    }

    #[test]
    fn grows_and_shrinks_through_many_levels() {
        let mut tree = OsTree::new();
        let n = 200_000u32;
        // A scrambled insertion order.
        for i in 0..n {
            assert!(tree.insert(((i as u64 * 7919) % n as u64) as u32));
        }
        tree.check();
        assert_eq!(tree.len(), n as usize);
        for r in [0, 1, 12345, 199_999] {
            assert_eq!(tree.get(r), Some(&(r as u32)));
            assert_eq!(tree.rank(&(r as u32)), Some(r));
        }
        for i in 0..n {
            if i % 3 != 0 {
                assert!(tree.remove(&i).is_some());
            }
        }
        tree.check();
        assert!(tree.iter().copied().eq((0..n).filter(|i| i % 3 == 0)));
        while let Some(k) = tree.first().copied() {
            assert_eq!(tree.remove_at(0), Some(k));
        }
        tree.check();
        assert!(tree.is_empty());
    }
}

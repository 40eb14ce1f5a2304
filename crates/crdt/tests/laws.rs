//! Property tests: merge laws, delta correctness, convergence and GC safety for every CRDT.
//!
//! States are never generated as arbitrary structs (many of those are unreachable); instead a
//! random schedule runs on three replicas: operations (with wall clocks that jitter and go
//! backwards), full-state merges between replicas, and delivery of any previously produced delta
//! to any replica (so deltas arrive late, out of order and duplicated).
//!
//! Checked on every run:
//! - at each operation: `op(x) = x ⊔ delta` and `delta ⊑ op(x)`; a refused op changes nothing;
//! - on the final states a, b, c: commutativity, associativity, idempotence;
//! - the join of all deltas ever produced equals the join of all final states (every change
//!   travels in some delta);
//! - GC: after a full sync, GC with the frontier of every issued dot on a random subset of
//!   replicas changes no visible value, and an identical continuation (more operations, merges,
//!   and re-delivery of old deltas) looks the same as in a world without GC;
//! - GC mid-run: the harness tracks which dots each replica has merged and derives a causally
//!   stable frontier the way a node would (two rounds of acknowledgements, see `Crdt::gc`); GC
//!   with it at random points on random replicas never changes what any replica shows, at any
//!   step, and the merge laws still hold on the collected states.

use std::fmt::Debug;

use lattice_crdt::{
    Anchor, CausalContext, Counter, CounterValue, Crdt, Dot, Hlc, HlcClock, LwwRegister, NodeId,
    Number, OrMap, OrSet, Rga, VersionVector,
};
use proptest::prelude::*;
use proptest::sample::Index;

const REPLICAS: usize = 3;

/// A replica's clocks: the HLC and the node-wide event counter that issues dots.
#[derive(Clone, Debug)]
struct Replica {
    node: NodeId,
    clock: HlcClock,
    wall: u64,
    events: VersionVector,
    /// Dots issued by the current operation.
    issued: Vec<Dot>,
}

impl Replica {
    fn new(i: usize) -> Replica {
        let node = NodeId(i as u32 + 1);
        Replica {
            node,
            clock: HlcClock::new(node),
            wall: 1_000,
            events: VersionVector::new(),
            issued: Vec::new(),
        }
    }
    fn ts(&mut self) -> Hlc {
        self.clock.now(self.wall)
    }
    fn dot(&mut self) -> Dot {
        let d = self.events.next_dot(self.node);
        self.issued.push(d);
        d
    }
}

/// One CRDT under test: how to generate and apply its operations, and what users see of it.
trait Model {
    type S: Crdt + PartialEq + Debug + Default;
    type Op: Debug + Clone;
    type View: PartialEq + Debug;
    fn op() -> BoxedStrategy<Self::Op>;
    /// Applies `op` at replica `r`; returns the delta, or `None` if the op was refused.
    fn apply(r: &mut Replica, s: &mut Self::S, op: &Self::Op) -> Option<Self::S>;
    fn view(s: &Self::S) -> Self::View;
    /// A timestamp the replica's clock should observe after merging `s` (as a node would).
    fn observe(_s: &Self::S) -> Option<Hlc> {
        None
    }
    /// Model-specific checks after a full sync and a GC with every dot stable.
    fn after_full_gc(_s: &Self::S) -> Result<(), TestCaseError> {
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum Step<O> {
    /// Burn `skip` dots first (events for other keys, as with a node-wide counter), then apply.
    Op {
        at: usize,
        wall: i16,
        skip: u8,
        op: O,
    },
    Merge {
        from: usize,
        to: usize,
    },
    Deliver {
        delta: Index,
        to: usize,
    },
    /// GC the replicas whose bit is set with the current causally stable frontier (ignored by
    /// worlds that do not collect).
    Gc {
        who: [bool; REPLICAS],
    },
}

fn steps<M: Model>(max: usize) -> impl Strategy<Value = Vec<Step<M::Op>>> {
    let step = prop_oneof![
        5 => (0..REPLICAS, -30i16..60, prop_oneof![3 => Just(0u8), 1 => 1u8..4], M::op())
            .prop_map(|(at, wall, skip, op)| Step::Op { at, wall, skip, op }),
        2 => (0..REPLICAS, 0..REPLICAS).prop_map(|(from, to)| Step::Merge { from, to }),
        2 => (any::<Index>(), 0..REPLICAS).prop_map(|(delta, to)| Step::Deliver { delta, to }),
        1 => any::<[bool; REPLICAS]>().prop_map(|who| Step::Gc { who }),
    ];
    prop::collection::vec(step, 0..max)
}

struct World<M: Model> {
    reps: Vec<Replica>,
    states: Vec<M::S>,
    /// Every delta produced, with the dots its operation issued.
    deltas: Vec<(M::S, Vec<Dot>)>,
    /// Whether `Step::Gc` collects in this world.
    collect: bool,
    /// Per replica: the dots it has merged (its own included).
    seen: Vec<CausalContext>,
    /// Per step: (pointwise min of the contiguous `seen` vectors, pointwise max of everything
    /// seen). A past round's min is causally stable once the current min covers that round's max.
    rounds: Vec<(VersionVector, VersionVector)>,
}

impl<M: Model> Clone for World<M> {
    fn clone(&self) -> Self {
        World {
            reps: self.reps.clone(),
            states: self.states.clone(),
            deltas: self.deltas.clone(),
            collect: self.collect,
            seen: self.seen.clone(),
            rounds: self.rounds.clone(),
        }
    }
}

impl<M: Model> World<M> {
    fn new() -> World<M> {
        World {
            reps: (0..REPLICAS).map(Replica::new).collect(),
            states: (0..REPLICAS).map(|_| M::S::default()).collect(),
            deltas: Vec::new(),
            collect: false,
            seen: vec![CausalContext::new(); REPLICAS],
            rounds: Vec::new(),
        }
    }

    /// The causally stable frontier as a node would compute it from acknowledgements.
    fn stable(&self) -> VersionVector {
        let mut now = self.seen[0].vv().clone();
        for s in &self.seen[1..] {
            now.meet(s.vv());
        }
        self.rounds
            .iter()
            .rev()
            .find(|(_, max)| now.dominates(max))
            .map(|(min, _)| min.clone())
            .unwrap_or_default()
    }

    fn record_round(&mut self) {
        let mut min = self.seen[0].vv().clone();
        let mut max = VersionVector::new();
        for s in &self.seen {
            min.meet(s.vv());
            max.merge(s.vv());
            for d in s.cloud().iter() {
                max.raise(d.node, d.counter);
            }
        }
        self.rounds.push((min, max));
    }

    fn absorb(&mut self, to: usize, other: &M::S) {
        self.states[to].merge(other);
        if let Some(ts) = M::observe(&self.states[to]) {
            let r = &mut self.reps[to];
            let _ = r.clock.observe(ts, r.wall);
        }
    }

    fn step(&mut self, step: &Step<M::Op>) -> Result<(), TestCaseError> {
        match step {
            Step::Op { at, wall, skip, op } => {
                let r = &mut self.reps[*at];
                r.wall = r.wall.saturating_add_signed(i64::from(*wall));
                r.issued.clear();
                for _ in 0..*skip {
                    let _ = r.dot();
                }
                let s = &mut self.states[*at];
                let before = s.clone();
                let result = M::apply(r, s, op);
                let issued = std::mem::take(&mut r.issued);
                for d in &issued {
                    self.seen[*at].insert(*d);
                }
                match result {
                    Some(delta) => {
                        prop_assert_eq!(
                            &before.merged(&delta),
                            &*s,
                            "op(x) != x ⊔ delta for {:?}",
                            op
                        );
                        prop_assert_eq!(&s.clone().merged(&delta), &*s, "delta not below op(x)");
                        self.deltas.push((delta, issued));
                    }
                    None => prop_assert_eq!(&before, &*s, "a refused op changed the state"),
                }
            }
            Step::Merge { from, to } => {
                let other = self.states[*from].clone();
                self.absorb(*to, &other);
                let seen = self.seen[*from].clone();
                self.seen[*to].merge(&seen);
            }
            Step::Deliver { delta, to } => {
                if !self.deltas.is_empty() {
                    let (d, dots) = self.deltas[delta.index(self.deltas.len())].clone();
                    self.absorb(*to, &d);
                    for dot in dots {
                        self.seen[*to].insert(dot);
                    }
                }
            }
            Step::Gc { who } => {
                if self.collect {
                    let stable = self.stable();
                    for (i, s) in self.states.iter_mut().enumerate() {
                        if who[i] {
                            s.gc(&stable);
                        }
                    }
                }
            }
        }
        self.record_round();
        Ok(())
    }

    fn run(&mut self, steps: &[Step<M::Op>]) -> Result<(), TestCaseError> {
        steps.iter().try_for_each(|s| self.step(s))
    }

    /// Every replica merges every other.
    fn sync(&mut self) {
        let all = self
            .states
            .iter()
            .fold(M::S::default(), |acc, s| acc.merged(s));
        let seen = self
            .seen
            .iter()
            .fold(CausalContext::new(), |acc, s| acc.merged(s));
        for i in 0..REPLICAS {
            self.absorb(i, &all);
            self.seen[i] = seen.clone();
        }
        self.record_round();
    }

    fn views(&self) -> Vec<M::View> {
        self.states.iter().map(M::view).collect()
    }
}

fn laws<S: Crdt + PartialEq + Debug>(a: &S, b: &S, c: &S) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.clone().merged(b), b.clone().merged(a), "not commutative");
    prop_assert_eq!(
        a.clone().merged(b).merged(c),
        a.clone().merged(&b.clone().merged(c)),
        "not associative"
    );
    prop_assert_eq!(&a.clone().merged(a), a, "not idempotent");
    Ok(())
}

fn check_laws<M: Model>(steps: &[Step<M::Op>]) -> Result<(), TestCaseError> {
    let mut w = World::<M>::new();
    w.run(steps)?;
    let [a, b, c] = [&w.states[0], &w.states[1], &w.states[2]];
    laws(a, b, c)?;
    laws(b, c, a)?;
    laws(c, a, b)?;
    let from_states = w
        .states
        .iter()
        .fold(M::S::default(), |acc, s| acc.merged(s));
    let from_deltas = w
        .deltas
        .iter()
        .fold(M::S::default(), |acc, (d, _)| acc.merged(d));
    prop_assert_eq!(
        &from_deltas,
        &from_states,
        "deltas do not account for every change"
    );
    w.sync();
    prop_assert!(
        w.states.iter().all(|s| *s == w.states[0]),
        "replicas did not converge"
    );
    Ok(())
}

fn check_gc<M: Model>(
    before: &[Step<M::Op>],
    who: [bool; REPLICAS],
    after: &[Step<M::Op>],
) -> Result<(), TestCaseError> {
    let mut plain = World::<M>::new();
    plain.run(before)?;
    plain.sync();
    // Every dot issued so far has been merged everywhere and every later op is in its causal
    // future: a causally stable frontier.
    let stable = plain.reps.iter().fold(VersionVector::new(), |mut acc, r| {
        acc.merge(&r.events);
        acc
    });
    let mut gced = plain.clone();
    for (i, s) in gced.states.iter_mut().enumerate() {
        if who[i] {
            s.gc(&stable);
            M::after_full_gc(s)?;
        }
    }
    prop_assert_eq!(gced.views(), plain.views(), "gc changed a visible value");
    for step in after {
        plain.step(step)?;
        gced.step(step)?;
        prop_assert_eq!(
            gced.views(),
            plain.views(),
            "gc'd world diverged at {:?}",
            step
        );
    }
    plain.sync();
    gced.sync();
    prop_assert_eq!(gced.views(), plain.views());
    prop_assert!(
        gced.states.iter().all(|s| *s == gced.states[0]),
        "gc'd replicas did not converge"
    );
    Ok(())
}

fn check_gc_midway<M: Model>(steps: &[Step<M::Op>]) -> Result<(), TestCaseError> {
    let mut plain = World::<M>::new();
    let mut gced = World::<M>::new();
    gced.collect = true;
    for step in steps {
        plain.step(step)?;
        gced.step(step)?;
        prop_assert_eq!(
            gced.views(),
            plain.views(),
            "gc'd world diverged at {:?}",
            step
        );
    }
    let [a, b, c] = [&gced.states[0], &gced.states[1], &gced.states[2]];
    laws(a, b, c)?;
    laws(b, c, a)?;
    plain.sync();
    gced.sync();
    prop_assert_eq!(gced.views(), plain.views());
    prop_assert!(
        gced.states.iter().all(|s| *s == gced.states[0]),
        "gc'd replicas did not converge"
    );
    Ok(())
}

macro_rules! model_tests {
    ($name:ident, $model:ty) => {
        mod $name {
            use super::*;

            proptest! {

                #[test]
                fn merge_laws_and_deltas(s in steps::<$model>(60)) {
                    check_laws::<$model>(&s)?;
                }

                #[test]
                fn gc_is_invisible(
                    before in steps::<$model>(40),
                    who in any::<[bool; REPLICAS]>(),
                    after in steps::<$model>(30),
                ) {
                    check_gc::<$model>(&before, who, &after)?;
                }

                #[test]
                fn gc_midway_is_invisible(s in steps::<$model>(80)) {
                    check_gc_midway::<$model>(&s)?;
                }
            }
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Models

fn pick<T: Copy>(items: &[T], i: &Index) -> Option<T> {
    (!items.is_empty()).then(|| items[i.index(items.len())])
}

/// Version vectors grown by local events.
impl Model for VersionVector {
    type S = VersionVector;
    type Op = ();
    type View = VersionVector;
    fn op() -> BoxedStrategy<()> {
        Just(()).boxed()
    }
    fn apply(r: &mut Replica, s: &mut VersionVector, _: &()) -> Option<VersionVector> {
        let d = r.dot();
        s.raise(d.node, d.counter);
        Some([(d.node, d.counter)].into_iter().collect())
    }
    fn view(s: &VersionVector) -> VersionVector {
        s.clone()
    }
}

/// Causal contexts fed dots with gaps (a node's dots may go to other keys).
struct Ctx;
impl Model for Ctx {
    type S = CausalContext;
    type Op = u8;
    type View = Vec<Dot>;
    fn op() -> BoxedStrategy<u8> {
        (0u8..4).boxed()
    }
    fn apply(r: &mut Replica, s: &mut CausalContext, skip: &u8) -> Option<CausalContext> {
        for _ in 0..*skip {
            let _ = r.dot();
        }
        let d = r.dot();
        s.insert(d);
        Some(CausalContext::from_dots([d]))
    }
    fn view(s: &CausalContext) -> Vec<Dot> {
        let vv = s
            .vv()
            .iter()
            .flat_map(|(n, c)| (1..=c).map(move |k| Dot::new(n, k)));
        let mut v: Vec<Dot> = vv.chain(s.cloud().iter()).collect();
        v.sort();
        v
    }
}

struct Lww;
impl Model for Lww {
    type S = LwwRegister<u8>;
    type Op = u8;
    type View = u8;
    fn op() -> BoxedStrategy<u8> {
        any::<u8>().boxed()
    }
    fn apply(r: &mut Replica, s: &mut LwwRegister<u8>, v: &u8) -> Option<LwwRegister<u8>> {
        Some(s.set(*v, r.ts()))
    }
    fn view(s: &LwwRegister<u8>) -> u8 {
        *s.value()
    }
    fn observe(s: &LwwRegister<u8>) -> Option<Hlc> {
        Some(s.ts())
    }
}

#[derive(Clone, Debug)]
enum CounterOp {
    Set(Number),
    Incr(i64),
    IncrFloat(f64),
}

fn counter_op() -> BoxedStrategy<CounterOp> {
    prop_oneof![
        1 => prop_oneof![
            (-100i64..100).prop_map(Number::Int),
            Just(Number::Int(i64::MAX - 3)),
            Just(Number::Int(i64::MIN + 3)),
            (-20i32..20).prop_map(|h| Number::Float(f64::from(h) * 0.5)),
        ].prop_map(CounterOp::Set),
        4 => prop_oneof![-5i64..6, Just(i64::MAX / 2), Just(i64::MIN / 2)].prop_map(CounterOp::Incr),
        1 => prop_oneof![(-8i32..8).prop_map(|q| f64::from(q) * 0.25), Just(f64::MAX)].prop_map(CounterOp::IncrFloat),
    ]
    .boxed()
}

fn apply_counter(
    r: &mut Replica,
    s: &mut Counter,
    op: &CounterOp,
) -> Result<Counter, lattice_crdt::CounterError> {
    match op {
        CounterOp::Set(n) => Ok(s.set(*n, r.ts())),
        CounterOp::Incr(by) => s.incr(r.node, *by),
        CounterOp::IncrFloat(by) => s.incr_float(r.node, *by),
    }
}

/// `CounterValue` with floats compared by bits (NaN never occurs; this makes `Eq` exact).
#[derive(Debug, PartialEq)]
enum ExactValue {
    Int(i128),
    Float(u64),
}

fn exact(v: CounterValue) -> ExactValue {
    match v {
        CounterValue::Int(i) => ExactValue::Int(i),
        CounterValue::Float(f) => ExactValue::Float(f.to_bits()),
    }
}

struct Ctr;
impl Model for Ctr {
    type S = Counter;
    type Op = CounterOp;
    type View = ExactValue;
    fn op() -> BoxedStrategy<CounterOp> {
        counter_op()
    }
    fn apply(r: &mut Replica, s: &mut Counter, op: &CounterOp) -> Option<Counter> {
        apply_counter(r, s, op).ok()
    }
    fn view(s: &Counter) -> ExactValue {
        exact(s.value())
    }
    fn observe(s: &Counter) -> Option<Hlc> {
        Some(s.base_ts())
    }
}

#[derive(Clone, Debug)]
enum SetOp {
    Add(u8),
    Remove(u8),
    Clear,
}

fn set_op() -> BoxedStrategy<SetOp> {
    prop_oneof![5 => (0u8..6).prop_map(SetOp::Add), 3 => (0u8..6).prop_map(SetOp::Remove), 1 => Just(SetOp::Clear)]
        .boxed()
}

fn apply_set(r: &mut Replica, s: &mut OrSet<u8>, op: &SetOp) -> OrSet<u8> {
    match op {
        SetOp::Add(e) => s.add(*e, r.dot()),
        SetOp::Remove(e) => s.remove(e),
        SetOp::Clear => s.clear(),
    }
}

struct Set;
impl Model for Set {
    type S = OrSet<u8>;
    type Op = SetOp;
    type View = Vec<u8>;
    fn op() -> BoxedStrategy<SetOp> {
        set_op()
    }
    fn apply(r: &mut Replica, s: &mut OrSet<u8>, op: &SetOp) -> Option<OrSet<u8>> {
        Some(apply_set(r, s, op))
    }
    fn view(s: &OrSet<u8>) -> Vec<u8> {
        s.iter().copied().collect()
    }
    fn after_full_gc(s: &OrSet<u8>) -> Result<(), TestCaseError> {
        prop_assert!(
            s.context().cloud().is_empty(),
            "dot cloud not collected: {:?}",
            s.context()
        );
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum MapOp<O> {
    Update(u8, O),
    Remove(u8),
    Clear,
}

fn map_op<O: Debug + Clone + 'static>(inner: BoxedStrategy<O>) -> BoxedStrategy<MapOp<O>> {
    prop_oneof![
        6 => (0u8..4, inner).prop_map(|(k, o)| MapOp::Update(k, o)),
        2 => (0u8..4).prop_map(MapOp::Remove),
        1 => Just(MapOp::Clear),
    ]
    .boxed()
}

fn apply_map<V: Crdt + Default, E>(
    r: &mut Replica,
    s: &mut OrMap<u8, V>,
    op: &MapOp<impl Clone>,
    mut inner: impl FnMut(&mut Replica, &mut V) -> Result<(), E>,
) -> Option<OrMap<u8, V>> {
    match op {
        MapOp::Update(k, _) => {
            let dot = r.dot();
            s.update(*k, dot, |v| inner(r, v)).ok().map(|((), d)| d)
        }
        MapOp::Remove(k) => Some(s.remove(k)),
        MapOp::Clear => Some(s.clear()),
    }
}

/// Hash of LWW fields (HSET/HDEL).
struct HashLww;
impl Model for HashLww {
    type S = OrMap<u8, LwwRegister<u8>>;
    type Op = MapOp<u8>;
    type View = Vec<(u8, u8)>;
    fn op() -> BoxedStrategy<MapOp<u8>> {
        map_op(any::<u8>().boxed())
    }
    fn apply(r: &mut Replica, s: &mut Self::S, op: &MapOp<u8>) -> Option<Self::S> {
        let v = match op {
            MapOp::Update(_, v) => *v,
            _ => 0,
        };
        apply_map(r, s, op, |r, reg| {
            let _ = reg.set(v, r.ts());
            Ok::<_, ()>(())
        })
    }
    fn view(s: &Self::S) -> Vec<(u8, u8)> {
        s.iter().map(|(k, v)| (*k, *v.value())).collect()
    }
    fn observe(s: &Self::S) -> Option<Hlc> {
        s.iter().map(|(_, v)| v.ts()).max()
    }
    fn after_full_gc(s: &Self::S) -> Result<(), TestCaseError> {
        prop_assert!(s.context().cloud().is_empty());
        Ok(())
    }
}

/// Hash of counter fields (HINCRBY/HINCRBYFLOAT/HSET/HDEL).
struct HashCtr;
impl Model for HashCtr {
    type S = OrMap<u8, Counter>;
    type Op = MapOp<CounterOp>;
    type View = Vec<(u8, ExactValue)>;
    fn op() -> BoxedStrategy<MapOp<CounterOp>> {
        map_op(counter_op())
    }
    fn apply(r: &mut Replica, s: &mut Self::S, op: &MapOp<CounterOp>) -> Option<Self::S> {
        let inner = match op {
            MapOp::Update(_, o) => o.clone(),
            _ => CounterOp::Incr(0),
        };
        apply_map(r, s, op, |r, c| apply_counter(r, c, &inner).map(|_| ()))
    }
    fn view(s: &Self::S) -> Vec<(u8, ExactValue)> {
        s.iter().map(|(k, v)| (*k, exact(v.value()))).collect()
    }
    fn observe(s: &Self::S) -> Option<Hlc> {
        s.iter().map(|(_, v)| v.base_ts()).max()
    }
}

/// A map of sets (nested observed-remove payloads: GC of the map must not break them).
struct MapOfSets;
impl Model for MapOfSets {
    type S = OrMap<u8, OrSet<u8>>;
    type Op = MapOp<SetOp>;
    type View = Vec<(u8, Vec<u8>)>;
    fn op() -> BoxedStrategy<MapOp<SetOp>> {
        map_op(set_op())
    }
    fn apply(r: &mut Replica, s: &mut Self::S, op: &MapOp<SetOp>) -> Option<Self::S> {
        let inner = match op {
            MapOp::Update(_, o) => o.clone(),
            _ => SetOp::Clear,
        };
        apply_map(r, s, op, |r, set| {
            let _ = apply_set(r, set, &inner);
            Ok::<_, ()>(())
        })
    }
    fn view(s: &Self::S) -> Vec<(u8, Vec<u8>)> {
        s.iter()
            .map(|(k, v)| (*k, v.iter().copied().collect()))
            .collect()
    }
    fn after_full_gc(s: &Self::S) -> Result<(), TestCaseError> {
        prop_assert!(s.context().cloud().is_empty());
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum ListOp {
    PushFront(u8),
    PushBack(u8),
    InsertAfter(Index, u8),
    Remove(Index),
    Set(Index, u8),
    Clear,
}

struct List;
impl Model for List {
    type S = Rga<u8>;
    type Op = ListOp;
    type View = Vec<u8>;
    fn op() -> BoxedStrategy<ListOp> {
        prop_oneof![
            2 => any::<u8>().prop_map(ListOp::PushFront),
            2 => any::<u8>().prop_map(ListOp::PushBack),
            3 => (any::<Index>(), any::<u8>()).prop_map(|(i, v)| ListOp::InsertAfter(i, v)),
            3 => any::<Index>().prop_map(ListOp::Remove),
            1 => (any::<Index>(), any::<u8>()).prop_map(|(i, v)| ListOp::Set(i, v)),
            1 => Just(ListOp::Clear),
        ]
        .boxed()
    }
    fn apply(r: &mut Replica, s: &mut Rga<u8>, op: &ListOp) -> Option<Rga<u8>> {
        let ids = s.visible_ids();
        let res = match op {
            ListOp::PushFront(v) => s.insert(Anchor::Head, r.ts(), r.dot(), *v),
            ListOp::PushBack(v) => s.insert(Anchor::Tail, r.ts(), r.dot(), *v),
            ListOp::InsertAfter(i, v) => match pick(&ids, i) {
                Some(at) => s.insert_after(at, r.ts(), r.dot(), *v),
                None => s.push_front(r.ts(), r.dot(), *v),
            },
            ListOp::Remove(i) => s.remove(pick(&ids, i)?, r.dot()),
            ListOp::Set(i, v) => s.set(pick(&ids, i)?, *v, r.ts()),
            ListOp::Clear => {
                // One command, one removal dot, one combined delta.
                let by = r.dot();
                let mut delta = Rga::new();
                for id in ids {
                    delta.merge(&s.remove(id, by).expect("visible"));
                }
                Ok(delta)
            }
        };
        Some(res.expect("local list ops on visible targets succeed"))
    }
    fn view(s: &Rga<u8>) -> Vec<u8> {
        let v: Vec<u8> = s.iter_visible().map(|(_, v)| *v).collect();
        // `is_empty` answers from shortcuts (no tree walk): it must agree with the walk,
        // orphans of out-of-order deltas included.
        assert_eq!(
            s.is_empty(),
            v.is_empty(),
            "Rga::is_empty disagrees with its contents"
        );
        v
    }
    fn observe(s: &Rga<u8>) -> Option<Hlc> {
        s.max_id()
    }
    fn after_full_gc(s: &Rga<u8>) -> Result<(), TestCaseError> {
        prop_assert!(s.context().cloud().is_empty());
        if s.is_empty() {
            prop_assert_eq!(
                s.tombstones(),
                0,
                "an all-removed list must be collected entirely"
            );
        }
        Ok(())
    }
}

model_tests!(version_vector, VersionVector);
model_tests!(causal_context, Ctx);
model_tests!(lww_register, Lww);
model_tests!(counter, Ctr);
model_tests!(or_set, Set);
model_tests!(or_map_lww, HashLww);
model_tests!(or_map_counter, HashCtr);
model_tests!(or_map_of_sets, MapOfSets);
model_tests!(rga_list, List);

//! HLL format and command tests. Expected bytes come from redis-server 7.0.15.

use super::format::*;

#[test]
fn murmur_and_pattern_match_redis() {
    assert_eq!(murmur64a(b"", 0), 0);
    // Redis 7.0.15: PFADD h a b c, then PFDEBUG DECODE h answers
    // "Z:8436 v:1,1 Z:4274 v:2,1 Z:3068 v:1,1 Z:603": registers 8436 and 15780 hold 1,
    // register 12711 holds 2.
    let mut got: Vec<(usize, u8)> = [&b"a"[..], b"b", b"c"].iter().map(|e| pattern(e)).collect();
    got.sort();
    assert_eq!(got, vec![(8436, 1), (12711, 2), (15780, 1)]);
    let mut s = empty();
    for e in [&b"a"[..], b"b", b"c"] {
        add(&mut s, e, 3000).unwrap();
    }
    assert_eq!(
        decode_text(&s),
        "Z:8436 v:1,1 Z:4274 v:2,1 Z:3068 v:1,1 Z:603"
    );
}

#[test]
fn empty_hll_layout() {
    let e = empty();
    assert_eq!(
        e,
        b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x7f\xff"
    );
    assert!(is_hll(&e));
    assert_eq!(cached(&e), Some(0));
    assert_eq!(estimate(&histogram(&e).unwrap()), 0);
}

#[test]
fn dense_registers_round_trip() {
    let mut regs = vec![0u8; REGISTERS * 6 / 8];
    for i in 0..REGISTERS {
        dense_set(&mut regs, i, (i % 64) as u8);
    }
    for i in 0..REGISTERS {
        assert_eq!(dense_get(&regs, i), (i % 64) as u8);
    }
}

#[test]
fn self_test_passes() {
    self_test().unwrap();
}

#[test]
fn sparse_and_dense_agree_and_promote() {
    let mut s = empty();
    let mut d = empty();
    to_dense(&mut d).unwrap();
    for i in 0..2000u32 {
        let e = i.to_string();
        assert_eq!(
            add(&mut s, e.as_bytes(), 3000),
            add(&mut d, e.as_bytes(), 3000)
        );
    }
    assert_eq!(
        estimate(&histogram(&s).unwrap()),
        estimate(&histogram(&d).unwrap())
    );
    let mut s2 = s.clone();
    to_dense(&mut s2).unwrap();
    assert_eq!(s2[HDR..], d[HDR..]);
    // With a small limit the sparse form turns dense.
    let mut small = empty();
    for i in 0..200u32 {
        add(&mut small, i.to_string().as_bytes(), 100).unwrap();
    }
    assert_eq!(small[4], DENSE);
    assert_eq!(small.len(), DENSE_SIZE);
}

#[test]
fn corrupt_sparse_is_detected() {
    let mut s = empty();
    add(&mut s, b"a", 3000).unwrap();
    s.extend_from_slice(b"hello");
    assert_eq!(histogram(&s), Err(Corrupt));
    let mut max = vec![0u8; REGISTERS];
    assert_eq!(merge_into(&mut max, &s), Err(Corrupt));
    // A run past the last register.
    let mut t = empty();
    t.push(0xff);
    assert_eq!(merge_into(&mut max, &t), Err(Corrupt));
    assert_eq!(to_dense(&mut t), Err(Corrupt));
}

/// Randomly corrupted and truncated HLLs (dense and sparse) never panic: every entry point
/// either works or reports `Corrupt`, and a dense string of the wrong length is not an HLL.
#[test]
fn corrupted_hlls_never_panic() {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..1000u64 {
        let mut s = empty();
        let n = next() % 600;
        for i in 0..n {
            add(&mut s, &(round * 1000 + i).to_le_bytes(), 3000).unwrap();
        }
        if round % 3 == 0 {
            to_dense(&mut s).unwrap();
        }
        for _ in 0..(1 + next() % 4) {
            let pos = HDR + (next() as usize % (s.len() - HDR));
            s[pos] = next() as u8;
        }
        if round % 5 == 0 {
            let cut = HDR + (next() as usize % (s.len() - HDR));
            s.truncate(cut);
        }
        if !is_hll(&s) {
            continue;
        }
        let _ = histogram(&s).map(|h| estimate(&h));
        let mut max = vec![0u8; REGISTERS];
        let _ = merge_into(&mut max, &s);
        let mut d = s.clone();
        let _ = to_dense(&mut d);
        let mut a = s.clone();
        for i in 0..20u64 {
            if add(&mut a, &i.to_le_bytes(), 3000).is_err() {
                break;
            }
        }
        let _ = decode_text(&s);
    }
}

/// An HLL of `regs` (index, value) pairs in one of Redis's encodings: built by raising each
/// register in order (sparse, `max_bytes` low enough to turn some dense), or then made dense.
fn encoded(regs: &[(u16, u8)], max_bytes: u64, dense: bool) -> Vec<u8> {
    let mut v = empty();
    for &(i, r) in regs {
        let i = usize::from(i) % REGISTERS;
        if v[4] == DENSE {
            dense_raise(&mut v[HDR..], i, r);
        } else {
            sparse_set(&mut v, i, r, max_bytes).unwrap();
        }
    }
    if dense {
        to_dense(&mut v).unwrap();
    }
    v
}

fn an_hll() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    (
        proptest::collection::vec((any::<u16>(), 1..40u8), 0..400),
        prop_oneof![Just(60u64), Just(3000u64)],
        any::<bool>(),
    )
        .prop_map(|(regs, max, dense)| encoded(&regs, max, dense))
}

proptest::proptest! {
    /// The replicated join of two HLLs (register max) is commutative, associative and
    /// idempotent on the bytes themselves, whatever encodings the inputs have, and holds each
    /// register's maximum.
    #[test]
    fn join_laws(a in an_hll(), b in an_hll(), c in an_hll()) {
        let j = |x: &[u8], y: &[u8]| join(x, y).expect("well formed");
        proptest::prop_assert_eq!(j(&a, &a), a.clone());
        proptest::prop_assert_eq!(j(&a, &b), j(&b, &a));
        proptest::prop_assert_eq!(j(&j(&a, &b), &c), j(&a, &j(&b, &c)));
        let ab = j(&a, &b);
        proptest::prop_assert!(is_hll(&ab));
        let (ra, rb, rab) = (registers(&a).unwrap(), registers(&b).unwrap(),
                             registers(&ab).unwrap());
        for i in 0..REGISTERS {
            proptest::prop_assert_eq!(rab[i], ra[i].max(rb[i]));
        }
        proptest::prop_assert!(cached(&ab).is_none() || a == b);
    }
}

#[test]
fn a_join_is_refused_for_what_is_not_an_hll() {
    assert_eq!(join(b"plain", &empty()), None);
    let mut bad = empty();
    bad.truncate(HDR + 1); // runs cover fewer than 16384 registers
    assert_eq!(join(&bad, &empty()), None);
    assert!(same_registers(&empty(), &{
        let mut d = empty();
        to_dense(&mut d).unwrap();
        d
    }));
}

proptest::proptest! {
    /// The one-pass encoding is the string Redis's process builds, raising each register in
    /// index order with `sparse_set` (and `dense_raise` once dense).
    #[test]
    fn from_registers_is_the_index_order_build(
        regs in proptest::collection::vec((proptest::prelude::any::<u16>(), 1..3u8), 0..700),
        high in proptest::prelude::any::<bool>(),
        max in proptest::prop_oneof![proptest::strategy::Just(60u64),
                                     proptest::strategy::Just(300u64),
                                     proptest::strategy::Just(3000u64)],
    ) {
        let mut all = vec![0u8; REGISTERS];
        for (i, r) in regs {
            // Few distinct indices, so runs of neighbours and equal values are common.
            let i = usize::from(i) % 600;
            all[i] = all[i].max(r);
        }
        if high {
            all[300] = 40; // beyond the sparse opcodes: dense
        }
        let mut slow = empty();
        for (i, &r) in all.iter().enumerate().filter(|(_, &r)| r != 0) {
            if slow[4] == DENSE {
                dense_raise(&mut slow[HDR..], i, r);
            } else {
                sparse_set(&mut slow, i, r, max).unwrap();
            }
        }
        invalidate_cache(&mut slow);
        proptest::prop_assert_eq!(from_registers(&all, max), slow);
    }
}

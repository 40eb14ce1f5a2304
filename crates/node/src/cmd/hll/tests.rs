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

//! String command tests through the node's real entry point, replies compared byte for byte.

use lattice_testkit::{Harness, START_MS as T0};

fn node() -> Harness {
    Harness::with_clients(1)
}

#[track_caller]
fn check_raw(h: &mut Harness, args: &[&[u8]], expected: &[u8]) {
    let got = h.raw(1, args);
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(expected),
        "reply to {args:?}"
    );
}

fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{}\r\n", s.len(), s).into_bytes()
}

const OK: &[u8] = b"+OK\r\n";
const NIL: &[u8] = b"$-1\r\n";
const EMPTY: &[u8] = b"$0\r\n\r\n";
const SYNTAX: &[u8] = b"-ERR syntax error\r\n";
const NOT_INT: &[u8] = b"-ERR value is not an integer or out of range\r\n";
const NOT_FLOAT: &[u8] = b"-ERR value is not a valid float\r\n";

#[test]
fn get_and_set() {
    let mut h = node();
    h.check("GET k", NIL);
    h.check("SET k hello", OK);
    h.check("GET k", b"$5\r\nhello\r\n");
    h.check("set k 12", OK);
    h.check("get k", b"$2\r\n12\r\n");
    h.check("STRLEN k", b":2\r\n");
    h.check("STRLEN nokey", b":0\r\n");
    h.check(
        "GET",
        b"-ERR wrong number of arguments for 'get' command\r\n",
    );
    h.check(
        "SET k",
        b"-ERR wrong number of arguments for 'set' command\r\n",
    );
    check_raw(&mut h, &[b"SET", b"bin", b"a\0b\r\n"], OK);
    check_raw(&mut h, &[b"GET", b"bin"], b"$5\r\na\0b\r\n\r\n");
}

#[test]
fn set_option_errors() {
    let mut h = node();
    let invalid = b"-ERR invalid expire time in 'set' command\r\n";
    h.check("SET k v EX 0", invalid);
    h.check("SET k v EX -1", invalid);
    h.check("SET k v PX 0", invalid);
    h.check("SET k v EXAT 0", invalid);
    h.check("SET k v EX 9223372036854775", invalid);
    h.check("SET k v PX 9223372036854775807", invalid);
    h.check("SET k v EX abc", NOT_INT);
    h.check("SET k v NX XX", SYNTAX);
    h.check("SET k v XX NX", SYNTAX);
    h.check("SET k v EX 10 PX 100", SYNTAX);
    h.check("SET k v EXAT 10 PXAT 100", SYNTAX);
    h.check("SET k v KEEPTTL EX 10", SYNTAX);
    h.check("SET k v EX 10 KEEPTTL", SYNTAX);
    h.check("SET k v EX", SYNTAX);
    h.check("SET k v PERSIST", SYNTAX);
    h.check("SET k v bogus", SYNTAX);
    h.check("EXISTS k", b":0\r\n");
    // The same expiry option twice is allowed; the last one counts.
    h.check("SET k v ex 10 ex 20", OK);
    h.check("TTL k", b":20\r\n");
    h.check("SET k v nx nx get get", b"$1\r\nv\r\n");
    // Options are compared as C strings: a NUL byte ends them.
    check_raw(&mut h, &[b"SET", b"k2", b"v", b"NX\0junk"], OK);
    h.check("GET k2", b"$1\r\nv\r\n");
}

#[test]
fn set_nx_xx_get() {
    let mut h = node();
    h.check("SET k v XX", NIL);
    h.check("EXISTS k", b":0\r\n");
    h.check("SET k v NX", OK);
    h.check("SET k w NX", NIL);
    h.check("SET k w NX GET", b"$1\r\nv\r\n");
    h.check("GET k", b"$1\r\nv\r\n");
    h.check("SET k w XX GET", b"$1\r\nv\r\n");
    h.check("GET k", b"$1\r\nw\r\n");
    h.check("SET new x GET", NIL);
    h.check("GET new", b"$1\r\nx\r\n");
    h.check("SET missing x XX GET", NIL);
    h.check("EXISTS missing", b":0\r\n");
    h.check("SET n 5 GET", NIL);
    h.check("SET n 6 GET", b"$1\r\n5\r\n");
}

#[test]
fn set_expiry() {
    let mut h = node();
    h.check("SET k v EX 10", OK);
    h.check("TTL k", b":10\r\n");
    h.now_ms += 10_000;
    // Alive through its deadline millisecond, gone after it.
    h.check("GET k", b"$1\r\nv\r\n");
    h.now_ms += 1;
    h.check("GET k", NIL);

    h.check("SET k v PX 100", OK);
    h.check("PTTL k", b":100\r\n");
    h.check("SET k w KEEPTTL", OK);
    h.check("PTTL k", b":100\r\n");
    h.check("SET k w", OK);
    h.check("PTTL k", b":-1\r\n");

    let at = (T0 + 10_000 + 1 + 5_000).to_string();
    h.check(&format!("SET k v PXAT {at}"), OK);
    h.check("PTTL k", b":5000\r\n");
    h.check("SET k v EXAT 1", OK);
    h.check("GET k", NIL);
    h.check("EXISTS k", b":0\r\n");
}

#[test]
fn setnx_setex_psetex() {
    let mut h = node();
    h.check("SETNX k a", b":1\r\n");
    h.check("SETNX k b", b":0\r\n");
    h.check("GET k", b"$1\r\na\r\n");
    h.check("SETEX k 100 v", OK);
    h.check("TTL k", b":100\r\n");
    h.check("GET k", b"$1\r\nv\r\n");
    h.check(
        "SETEX k 0 v",
        b"-ERR invalid expire time in 'setex' command\r\n",
    );
    h.check("SETEX k x v", NOT_INT);
    h.check(
        "PSETEX k 0 v",
        b"-ERR invalid expire time in 'psetex' command\r\n",
    );
    h.check("PSETEX k 1500 w", OK);
    h.check("PTTL k", b":1500\r\n");
    h.now_ms += 1501;
    h.check("GET k", NIL);
    h.check(
        "SETEX k 10",
        b"-ERR wrong number of arguments for 'setex' command\r\n",
    );
}

#[test]
fn mget_mset_msetnx() {
    let mut h = node();
    h.check(
        "MSET a",
        b"-ERR wrong number of arguments for 'mset' command\r\n",
    );
    h.check(
        "MSET a 1 b",
        b"-ERR wrong number of arguments for 'mset' command\r\n",
    );
    h.check(
        "MSETNX a 1 b",
        b"-ERR wrong number of arguments for 'msetnx' command\r\n",
    );
    h.check("MSET a 1 b 2 a 3", OK);
    h.check("MGET a b c", b"*3\r\n$1\r\n3\r\n$1\r\n2\r\n$-1\r\n");
    h.check("MSETNX c 1 a 9", b":0\r\n");
    h.check("EXISTS c", b":0\r\n");
    h.check("MSETNX c 1 d 2", b":1\r\n");
    h.check("MGET c d", b"*2\r\n$1\r\n1\r\n$1\r\n2\r\n");
    // MSET drops any time to live.
    h.check("SET a x EX 100", OK);
    h.check("MSET a y", OK);
    h.check("TTL a", b":-1\r\n");
}

#[test]
fn append_and_strlen() {
    let mut h = node();
    h.check("APPEND k hello", b":5\r\n");
    h.check("APPEND k _world", b":11\r\n");
    h.check("GET k", &bulk("hello_world"));
    h.check("SET n 10 EX 100", OK);
    h.check("APPEND n 5", b":3\r\n");
    h.check("GET n", &bulk("105"));
    h.check("TTL n", b":100\r\n");
    h.check("INCR n", b":106\r\n");
    h.check("STRLEN n", b":3\r\n");
}

#[test]
fn getrange_and_substr() {
    let mut h = node();
    h.check("SET s hello", OK);
    let cases: &[(&str, &str, &str)] = &[
        ("0", "-1", "hello"),
        ("1", "3", "ell"),
        ("-3", "-1", "llo"),
        ("-100", "2", "hel"),
        ("0", "-100", "h"),
        ("4", "100", "o"),
        ("3", "1", ""),
        ("5", "10", ""),
        ("-1", "-5", ""),
        ("-10", "-20", ""),
        ("-9223372036854775808", "9223372036854775807", "hello"),
    ];
    for (a, b, want) in cases {
        h.check(&format!("GETRANGE s {a} {b}"), &bulk(want));
        h.check(&format!("SUBSTR s {a} {b}"), &bulk(want));
    }
    h.check("GETRANGE s x 1", NOT_INT);
    h.check("GETRANGE nokey 0 -1", EMPTY);
    h.check("GETRANGE nokey a b", NOT_INT);
    h.check("SET n 12345", OK);
    h.check("GETRANGE n 1 -2", &bulk("234"));
    check_raw(&mut h, &[b"SET", b"e", b""], OK);
    h.check("GETRANGE e 0 -1", EMPTY);
}

#[test]
fn setrange() {
    let mut h = node();
    h.check("SETRANGE r -1 a", b"-ERR offset is out of range\r\n");
    h.check("SETRANGE r x a", NOT_INT);
    check_raw(&mut h, &[b"SETRANGE", b"r", b"0", b""], b":0\r\n");
    h.check("EXISTS r", b":0\r\n");
    h.check("SETRANGE r 3 abc", b":6\r\n");
    check_raw(&mut h, &[b"GET", b"r"], b"$6\r\n\0\0\0abc\r\n");
    h.check("SETRANGE r 1 XY", b":6\r\n");
    check_raw(&mut h, &[b"GET", b"r"], b"$6\r\n\0XYabc\r\n");
    check_raw(&mut h, &[b"SETRANGE", b"r", b"100", b""], b":6\r\n");
    let too_long = b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
    h.check("SETRANGE r 536870912 a", too_long);
    h.check("SETRANGE big 536870912 a", too_long);
    h.check("CONFIG SET proto-max-bulk-len 1mb", OK);
    h.check("SETRANGE big 1048575 a", b":1048576\r\n");
    h.check("SETRANGE big 1048576 a", too_long);
    h.check("APPEND big b", too_long);
    h.check("STRLEN big", b":1048576\r\n");
    h.check("SETRANGE r 9223372036854775807 a", too_long);
    h.check("SET n 100 EX 50", OK);
    h.check("SETRANGE n 1 9", b":3\r\n");
    h.check("GET n", &bulk("190"));
    h.check("TTL n", b":50\r\n");
}

#[test]
fn getset_getdel_getex() {
    let mut h = node();
    h.check("GETSET k a", NIL);
    h.check("SET k b EX 100", OK);
    h.check("GETSET k c", &bulk("b"));
    h.check("TTL k", b":-1\r\n");
    h.check("GETDEL k", &bulk("c"));
    h.check("GETDEL k", NIL);
    h.check("EXISTS k", b":0\r\n");

    h.check("GETEX nokey EX abc", NIL);
    h.check("SET g v", OK);
    h.check("GETEX g", &bulk("v"));
    h.check(
        "GETEX g EX 0",
        b"-ERR invalid expire time in 'getex' command\r\n",
    );
    h.check("GETEX g EX abc", NOT_INT);
    for bad in [
        "PERSIST EX 10",
        "EX 10 PERSIST",
        "EX 10 PX 20",
        "NX",
        "XX",
        "KEEPTTL",
        "GET",
        "EX",
    ] {
        h.check(&format!("GETEX g {bad}"), SYNTAX);
    }
    h.check("GETEX g EX 100", &bulk("v"));
    h.check("TTL g", b":100\r\n");
    h.check("GETEX g PX 5000", &bulk("v"));
    h.check("PTTL g", b":5000\r\n");
    h.check("GETEX g PERSIST", &bulk("v"));
    h.check("TTL g", b":-1\r\n");
    let at = (T0 / 1000 + 30).to_string();
    h.check(&format!("GETEX g EXAT {at}"), &bulk("v"));
    h.check("TTL g", b":30\r\n");
    // An absolute time already past deletes the key (after answering its value).
    h.check("GETEX g PXAT 1000", &bulk("v"));
    h.check("EXISTS g", b":0\r\n");
}

#[test]
fn integer_counters() {
    let mut h = node();
    h.check("INCR c", b":1\r\n");
    h.check("INCRBY c 10", b":11\r\n");
    h.check("DECRBY c 3", b":8\r\n");
    h.check("DECR c", b":7\r\n");
    h.check("INCRBY c abc", NOT_INT);
    h.check("INCRBY c +1", NOT_INT);
    let overflow = b"-ERR increment or decrement would overflow\r\n";
    h.check("SET c 9223372036854775807", OK);
    h.check("INCR c", overflow);
    h.check("SET c -9223372036854775808", OK);
    h.check("DECR c", overflow);
    h.check(
        "DECRBY c -9223372036854775808",
        b"-ERR decrement would overflow\r\n",
    );
    h.check(
        "DECRBY x -9223372036854775808",
        b"-ERR decrement would overflow\r\n",
    );
    h.check(
        "INCRBY y -9223372036854775808",
        b":-9223372036854775808\r\n",
    );
    for bad in ["01", "1.5", "abc", "-0"] {
        h.check(&format!("SET s {bad}"), OK);
        h.check("INCR s", NOT_INT);
    }
    check_raw(&mut h, &[b"SET", b"s", b" 1"], OK);
    h.check("INCR s", NOT_INT);
    // Counters keep their time to live.
    h.check("SET t 5 EX 100", OK);
    h.check("INCR t", b":6\r\n");
    h.check("TTL t", b":100\r\n");
    h.check("GET t", &bulk("6"));
}

#[test]
fn incrbyfloat() {
    let mut h = node();
    h.check("INCRBYFLOAT f 10.5", &bulk("10.5"));
    h.check("INCRBYFLOAT f 0.1", &bulk("10.6"));
    h.check("INCRBYFLOAT f -5", &bulk("5.6"));
    h.check("SET f 2.2", OK);
    h.check("INCRBYFLOAT f 1.1", &bulk("3.3"));
    h.check("SET f 10.5", OK);
    h.check("INCRBYFLOAT f 5.0e3", &bulk("5010.5"));
    h.check("SET f 1", OK);
    h.check("INCRBYFLOAT f 1", &bulk("2"));
    h.check("OBJECT ENCODING f", &bulk("embstr"));
    h.check("INCRBYFLOAT f 0x10", &bulk("18"));
    h.check("INCRBYFLOAT f 1e-20", &bulk("18"));
    h.check("SET f 0", OK);
    h.check("INCRBYFLOAT f -1e-20", &bulk("0"));
    let nan_inf = b"-ERR increment would produce NaN or Infinity\r\n";
    h.check("INCRBYFLOAT f inf", nan_inf);
    h.check("INCRBYFLOAT f -inf", nan_inf);
    for bad in ["nan", "abc", "1e5000", "1.2.3", "1e"] {
        h.check(&format!("INCRBYFLOAT f {bad}"), NOT_FLOAT);
    }
    check_raw(&mut h, &[b"INCRBYFLOAT", b"f", b" 1"], NOT_FLOAT);
    check_raw(&mut h, &[b"INCRBYFLOAT", b"f", b""], NOT_FLOAT);
    check_raw(&mut h, &[b"INCRBYFLOAT", b"f", b"1\0"], NOT_FLOAT);
    h.check("SET f abc", OK);
    h.check("INCRBYFLOAT f 1", NOT_FLOAT);
    h.check("SET f 1e300 EX 100", OK);
    let big = "1000000000000000000008997324079559193870523944273290747938260082321265646596180935755849152083750497190350372508614274835903592556184672983913096260520748646287327135641843653294084255107606016789726652932370030551382947620994540294772781889620606179267611627097410650567187386105690089424915104006144";
    h.check("INCRBYFLOAT f 0", &bulk(big));
    h.check("TTL f", b":100\r\n");
    h.check("GET f", &bulk(big));
}

#[test]
fn lcs() {
    let mut h = node();
    h.check("MSET key1 ohmytext key2 mynewtext", OK);
    h.check("LCS key1 key2", &bulk("mytext"));
    h.check("LCS key1 key2 LEN", b":6\r\n");
    h.check(
        "LCS key1 key2 IDX",
        b"*4\r\n$7\r\nmatches\r\n*2\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n*2\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n$3\r\nlen\r\n:6\r\n",
    );
    h.check(
        "LCS key1 key2 IDX MINMATCHLEN 4 WITHMATCHLEN",
        b"*4\r\n$7\r\nmatches\r\n*1\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n$3\r\nlen\r\n:6\r\n",
    );
    let both = b"-ERR If you want both the length and indexes, please just use IDX.\r\n";
    h.check("LCS key1 key2 IDX LEN", both);
    h.check("LCS key1 key2 LEN IDX", both);
    h.check("LCS key1 key2 MINMATCHLEN", SYNTAX);
    h.check("LCS key1 key2 MINMATCHLEN x", NOT_INT);
    h.check("LCS key1 key2 foo", SYNTAX);
    h.check("LCS key1 nokey", EMPTY);
    h.check(
        "LCS nokey nokey2 IDX",
        b"*4\r\n$7\r\nmatches\r\n*0\r\n$3\r\nlen\r\n:0\r\n",
    );
    h.check(
        "LCS key1",
        b"-ERR wrong number of arguments for 'lcs' command\r\n",
    );
    // The DP table may not exceed proto-max-bulk-len bytes: 601 * 601 * 4 > 1MB.
    h.check("CONFIG SET proto-max-bulk-len 1mb", OK);
    h.check(
        &format!("MSET a {} b {}", "x".repeat(600), "x".repeat(600)),
        OK,
    );
    h.check(
        "LCS a b LEN",
        b"-ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len\r\n",
    );
    h.check(&format!("SET b {}", "x".repeat(400)), OK);
    h.check("LCS a b LEN", b":400\r\n");
    // RESP3 answers IDX with a real map.
    h.line(1, "HELLO 3");
    h.check(
        "LCS key1 key2 IDX MINMATCHLEN 3",
        b"%2\r\n$7\r\nmatches\r\n*1\r\n*2\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n$3\r\nlen\r\n:6\r\n",
    );
}

#[test]
fn setbit_getbit() {
    let mut h = node();
    let bad_offset = b"-ERR bit offset is not an integer or out of range\r\n";
    let bad_bit = b"-ERR bit is not an integer or out of range\r\n";
    h.check("SETBIT b 4294967296 1", bad_offset);
    h.check("SETBIT b -1 1", bad_offset);
    h.check("SETBIT b x 1", bad_offset);
    h.check("SETBIT b 0 2", bad_bit);
    h.check("SETBIT b 0 -1", bad_bit);
    h.check("SETBIT b 0 x", bad_bit);
    h.check("GETBIT b 4294967296", bad_offset);
    h.check("EXISTS b", b":0\r\n");
    h.check("SETBIT b 7 0", b":0\r\n");
    check_raw(&mut h, &[b"GET", b"b"], b"$1\r\n\0\r\n");
    h.check("SETBIT b 7 1", b":0\r\n");
    h.check("SETBIT b 7 1", b":1\r\n");
    h.check("SETBIT b 20 1", b":0\r\n");
    check_raw(&mut h, &[b"GET", b"b"], b"$3\r\n\x01\x00\x08\r\n");
    h.check("GETBIT b 20", b":1\r\n");
    h.check("GETBIT b 21", b":0\r\n");
    h.check("GETBIT b 1000", b":0\r\n");
    h.check("GETBIT nokey 0", b":0\r\n");
    // Integers are bits of their decimal text: '5' is 0x35.
    h.check("SET n 5", OK);
    h.check("GETBIT n 2", b":1\r\n");
    h.check("GETBIT n 4", b":0\r\n");
    h.check("SETBIT n 6 1", b":0\r\n");
    h.check("GET n", &bulk("7"));
    // The offset limit follows proto-max-bulk-len (512MB, so 2^32-1, by default).
    h.check("CONFIG SET proto-max-bulk-len 1mb", OK);
    h.check("SETBIT big 8388608 1", bad_offset);
    h.check("SETBIT big 8388607 1", b":0\r\n");
    h.check("STRLEN big", b":1048576\r\n");
    h.check("BITCOUNT big", b":1\r\n");
    h.check("BITPOS big 1", b":8388607\r\n");
    h.check("BITPOS big 0 -1", b":8388600\r\n");
}

#[test]
fn bitcount() {
    let mut h = node();
    check_raw(&mut h, &[b"SET", b"b", b"\xff\xf0\x00"], OK);
    h.check("BITCOUNT b", b":12\r\n");
    h.check("BITCOUNT b 0 0", b":8\r\n");
    h.check("BITCOUNT b 1 -1", b":4\r\n");
    h.check("BITCOUNT b -2 -2", b":4\r\n");
    h.check("BITCOUNT b 5 3", b":0\r\n");
    h.check("BITCOUNT b -100 100", b":12\r\n");
    h.check("BITCOUNT b 4 11 BIT", b":8\r\n");
    h.check("BITCOUNT b 7 8 bit", b":2\r\n");
    h.check("BITCOUNT b 9 9 BIT", b":1\r\n");
    h.check("BITCOUNT b -16 -1 BIT", b":4\r\n");
    h.check("BITCOUNT b -12 -1 BIT", b":0\r\n");
    h.check("BITCOUNT b 0 0 byte", b":8\r\n");
    h.check("BITCOUNT b 0 1 foo", SYNTAX);
    h.check("BITCOUNT b x 1 foo", NOT_INT);
    // Two negative indexes in the wrong order answer 0 before the unit is looked at.
    h.check("BITCOUNT b -100 -200 foo", b":0\r\n");
    h.check("BITCOUNT b 1", SYNTAX);
    h.check("BITCOUNT b 0 0 BIT 1", SYNTAX);
    // The key is looked up first: a missing key answers 0 whatever follows.
    h.check("BITCOUNT nokey a b", b":0\r\n");
    h.check("BITCOUNT nokey 1", b":0\r\n");
    h.check("SET n 12345", OK);
    h.check("BITCOUNT n", b":17\r\n");
}

#[test]
fn bitpos() {
    let mut h = node();
    check_raw(&mut h, &[b"SET", b"ones", b"\xff\xff"], OK);
    check_raw(&mut h, &[b"SET", b"b", b"\xff\xf0\x00"], OK);
    check_raw(&mut h, &[b"SET", b"z", b"\x00\x00\x00"], OK);
    h.check("BITPOS b 2", b"-ERR The bit argument must be 1 or 0.\r\n");
    h.check("BITPOS b x", NOT_INT);
    h.check("BITPOS nokey 1", b":-1\r\n");
    h.check("BITPOS nokey 0 a b", b":0\r\n");
    h.check("BITPOS b 1", b":0\r\n");
    h.check("BITPOS b 0", b":12\r\n");
    h.check("BITPOS z 1", b":-1\r\n");
    h.check("BITPOS z 0", b":0\r\n");
    // No end given: the bits past the string count as zeros.
    h.check("BITPOS ones 0", b":16\r\n");
    h.check("BITPOS ones 0 1", b":16\r\n");
    // Without an end the unit word is taken for the end.
    h.check("BITPOS ones 0 9 BIT", NOT_INT);
    // An explicit end: only the range is searched.
    h.check("BITPOS ones 0 0 -1", b":-1\r\n");
    h.check("BITPOS ones 0 4 12 BIT", b":-1\r\n");
    h.check("BITPOS b 0 4 12 BIT", b":12\r\n");
    h.check("BITPOS b 1 12 23 BIT", b":-1\r\n");
    h.check("BITPOS b 1 -12 -1 BIT", b":-1\r\n");
    h.check("BITPOS b 1 7 8 bit", b":7\r\n");
    h.check("BITPOS b 0 1 1", b":12\r\n");
    h.check("BITPOS b 1 2 1", b":-1\r\n");
    h.check("BITPOS b 1 -100 -200", b":0\r\n");
    h.check("BITPOS b 0 0 1 foo", SYNTAX);
    h.check("BITPOS b 0 0 a foo", SYNTAX);
    h.check("BITPOS b 0 a 1 foo", NOT_INT);
    h.check("BITPOS b 0 0 a", NOT_INT);
    h.check("BITPOS b 0 0 1 BIT 1", SYNTAX);
    check_raw(&mut h, &[b"SET", b"e", b""], OK);
    h.check("BITPOS e 0", b":-1\r\n");
    h.check("BITPOS e 1", b":-1\r\n");
}

#[test]
fn command_table_entries() {
    let find = |name: &str| {
        super::COMMANDS
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let get = find("get");
    assert_eq!(
        (get.arity, get.flags, get.keys),
        (2, &["readonly", "fast"][..], (1, 1, 1))
    );
    let set = find("set");
    assert_eq!((set.arity, set.flags), (-3, &["write", "denyoom"][..]));
    assert_eq!(find("mget").keys, (1, -1, 1));
    assert_eq!(find("mset").keys, (1, -1, 2));
    assert_eq!(find("lcs").keys, (1, 2, 1));
    assert_eq!(find("setbit").group, "bitmap");
    assert_eq!(find("incrbyfloat").since, "2.6.0");
    assert_eq!(find("bitop").keys, (2, -1, 1));
    assert_eq!(find("bitfield_ro").flags, &["readonly", "fast"][..]);
    assert_eq!(super::COMMANDS.len(), 29);
}

#[test]
fn keyspace_events_and_watch() {
    let mut h = node();
    h.check("CONFIG SET notify-keyspace-events KEAn", OK);
    h.connect(2);
    h.raw(2, &[b"PSUBSCRIBE", b"__keyevent*"]);
    for line in [
        "SET a 1",
        "SET a 2 EX 100",
        "SETEX b 10 x",
        "INCR c",
        "INCRBYFLOAT c 1.5",
        "APPEND d x",
        "APPEND d y",
        "SETBIT e 3 1",
        "SETBIT e 3 1",
        "SETBIT e 3 0",
        "SETRANGE f 1 x",
        "GETEX a PERSIST",
        "GETEX a PERSIST",
        "GETEX a EX 10",
        "GETEX a PXAT 1",
        "GETDEL b",
        "GETSET g 1",
        "MSET h 1 i 2",
        "MSETNX j 1",
        "SETNX j 1",
        "SET j 2 NX",
        "GET j",
    ] {
        h.line(1, line);
    }
    // Setting nothing changes nothing.
    h.raw(1, &[b"SETRANGE", b"f", b"1", b""]);
    let text = h.take(2);
    let events: Vec<&str> = text
        .split("__keyevent@0__:")
        .skip(1)
        .map(|rest| rest.split('\r').next().unwrap())
        .collect();
    assert_eq!(
        events.join(" "),
        "new set set expire new set expire new incrby incrbyfloat new append append new setbit \
         setbit new setrange persist expire del del new set new set new set new set"
    );

    // WATCH sees a string write and aborts the transaction.
    h.check("WATCH k", OK);
    h.check("INCR k", b":1\r\n");
    h.check("MULTI", OK);
    h.check("GET k", b"+QUEUED\r\n");
    h.check("EXEC", b"*-1\r\n");
}

//! BITOP/BITFIELD, HyperLogLog and GEO commands through the node's real entry points; every
//! expected reply was taken from redis-server 7.0.15 given the same commands.

use lattice_testkit::{bulk, Harness};

fn run(h: &mut Harness, line: &str) -> String {
    let args: Vec<&str> = line.split(' ').collect();
    h.cmd(1, &args)
}

const SYNTAX: &str = "-ERR syntax error\r\n";

#[test]
fn bitfield_subcommands_overflow_and_errors() {
    let mut h = Harness::with_clients(1);
    assert_eq!(
        run(&mut h, "BITFIELD k SET i8 0 -100 GET u4 0 INCRBY u2 100 1 OVERFLOW FAIL INCRBY u2 102 5 OVERFLOW SAT INCRBY i8 0 -1000"),
        "*5\r\n:0\r\n:9\r\n:1\r\n$-1\r\n:-128\r\n"
    );
    assert_eq!(
        run(&mut h, "BITFIELD k GET u64 0"),
        "-ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.\r\n"
    );
    assert_eq!(
        run(&mut h, "BITFIELD k OVERFLOW nope"),
        "-ERR Invalid OVERFLOW type specified\r\n"
    );
    assert_eq!(run(&mut h, "BITFIELD k BAD"), SYNTAX);
    assert_eq!(run(&mut h, "BITFIELD k GET"), SYNTAX);
    assert_eq!(
        run(&mut h, "BITFIELD k GET i8 4294967296"),
        "-ERR bit offset is not an integer or out of range\r\n"
    );
    assert_eq!(
        run(&mut h, "BITFIELD_RO k SET u8 0 1"),
        "-ERR BITFIELD_RO only supports the GET subcommand\r\n"
    );
    assert_eq!(run(&mut h, "BITFIELD_RO k GET u8 0"), "*1\r\n:128\r\n");
    assert_eq!(run(&mut h, "BITFIELD k"), "*0\r\n");
    // `#n` addresses the n-th field of the type's width.
    assert_eq!(
        run(&mut h, "BITFIELD s SET u8 #1 66 SET u8 #0 65"),
        "*2\r\n:0\r\n:0\r\n"
    );
    assert_eq!(run(&mut h, "GET s"), bulk("AB"));
    // Wrapping and saturating a 64-bit signed field.
    assert_eq!(
        run(&mut h, "BITFIELD w SET i64 0 9223372036854775807 INCRBY i64 0 1 OVERFLOW SAT INCRBY i64 0 -1 INCRBY i64 0 -9223372036854775808"),
        "*4\r\n:0\r\n:-9223372036854775808\r\n:-9223372036854775808\r\n:-9223372036854775808\r\n"
    );
    run(&mut h, "LPUSH l x");
    assert_eq!(
        run(&mut h, "BITFIELD l GET u8 0"),
        "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    );
}

#[test]
fn bitop_operations() {
    let mut h = Harness::with_clients(1);
    run(&mut h, "BITFIELD k SET u8 0 156");
    assert_eq!(
        run(&mut h, "BITOP NOT d k k"),
        "-ERR BITOP NOT must be called with a single source key.\r\n"
    );
    assert_eq!(run(&mut h, "BITOP nand d k"), SYNTAX);
    run(&mut h, "SET a abc");
    run(&mut h, "SET b a");
    assert_eq!(run(&mut h, "BITOP OR d a b"), ":3\r\n");
    assert_eq!(run(&mut h, "GET d"), bulk("abc"));
    assert_eq!(run(&mut h, "BITOP AND d a b nokey"), ":3\r\n");
    assert_eq!(run(&mut h, "GET d"), "$3\r\n\0\0\0\r\n");
    assert_eq!(run(&mut h, "BITOP XOR d a b"), ":3\r\n");
    assert_eq!(run(&mut h, "GET d"), "$3\r\n\0bc\r\n");
    assert_eq!(run(&mut h, "BITOP NOT d b"), ":1\r\n");
    assert_eq!(
        run(&mut h, "GET d"),
        "$1\r\n\u{9e}\r\n".replace('\u{9e}', "\u{fffd}")
    );
    // An empty result deletes the destination.
    assert_eq!(run(&mut h, "BITOP XOR d nokey"), ":0\r\n");
    assert_eq!(run(&mut h, "EXISTS d"), ":0\r\n");
}

#[test]
fn hyperloglog_format_and_errors() {
    let mut h = Harness::with_clients(1);
    assert_eq!(run(&mut h, "PFADD h a b c"), ":1\r\n");
    assert_eq!(run(&mut h, "PFADD h a b c"), ":0\r\n");
    assert_eq!(run(&mut h, "PFCOUNT h"), ":3\r\n");
    assert_eq!(run(&mut h, "PFDEBUG ENCODING h"), "+sparse\r\n");
    assert_eq!(
        run(&mut h, "PFDEBUG DECODE h"),
        bulk("Z:8436 v:1,1 Z:4274 v:2,1 Z:3068 v:1,1 Z:603")
    );
    assert_eq!(run(&mut h, "PFDEBUG TODENSE h"), ":1\r\n");
    assert_eq!(run(&mut h, "PFDEBUG ENCODING h"), "+dense\r\n");
    assert_eq!(run(&mut h, "STRLEN h"), ":12304\r\n");
    assert_eq!(run(&mut h, "PFCOUNT h"), ":3\r\n");
    assert_eq!(
        run(&mut h, "PFDEBUG FOO h"),
        "-ERR Unknown PFDEBUG subcommand 'FOO'\r\n"
    );
    assert_eq!(
        run(&mut h, "PFDEBUG GETREG nokey"),
        "-ERR The specified key does not exist\r\n"
    );
    run(&mut h, "SET k x");
    let not_hll = "-WRONGTYPE Key is not a valid HyperLogLog string value.\r\n";
    assert_eq!(run(&mut h, "PFADD k x"), not_hll);
    assert_eq!(run(&mut h, "PFCOUNT k"), not_hll);
    assert_eq!(run(&mut h, "PFMERGE k h"), not_hll);
    assert_eq!(run(&mut h, "PFADD s a b c"), ":1\r\n");
    assert_eq!(run(&mut h, "PFMERGE m s h nokey"), "+OK\r\n");
    assert_eq!(run(&mut h, "PFDEBUG ENCODING m"), "+dense\r\n");
    assert_eq!(run(&mut h, "PFCOUNT m s"), ":3\r\n");
    run(&mut h, "APPEND s hello");
    assert_eq!(
        run(&mut h, "PFCOUNT s"),
        "-INVALIDOBJ Corrupted HLL object detected\r\n"
    );
    assert_eq!(run(&mut h, "PFSELFTEST"), "+OK\r\n");
}

#[test]
fn geo_commands() {
    let mut h = Harness::with_clients(1);
    assert_eq!(
        run(
            &mut h,
            "GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania"
        ),
        ":2\r\n"
    );
    assert_eq!(
        run(&mut h, "GEOADD g 200 1 x"),
        "-ERR invalid longitude,latitude pair 200.000000,1.000000\r\n"
    );
    assert_eq!(run(&mut h, "GEOADD g NX XX 1 1 x"), SYNTAX);
    assert_eq!(run(&mut h, "ZSCORE g Palermo"), bulk("3479099956230698"));
    assert_eq!(
        run(&mut h, "GEODIST g Palermo Catania mi"),
        bulk("103.3182")
    );
    assert_eq!(run(&mut h, "GEODIST g Palermo nosuch"), "$-1\r\n");
    assert_eq!(
        run(&mut h, "GEOPOS g Palermo nosuch"),
        format!(
            "*2\r\n*2\r\n{}{}*-1\r\n",
            bulk("13.36138933897018433"),
            bulk("38.11555639549629859")
        )
    );
    assert_eq!(
        run(&mut h, "GEOHASH g Catania"),
        format!("*1\r\n{}", bulk("sqdtr74hyu0"))
    );
    assert_eq!(
        run(
            &mut h,
            "GEOSEARCH g FROMMEMBER Palermo BYBOX 400 400 km ASC WITHDIST WITHHASH"
        ),
        format!(
            "*2\r\n*3\r\n{}{}:3479099956230698\r\n*3\r\n{}{}:3479447370796909\r\n",
            bulk("Palermo"),
            bulk("0.0000"),
            bulk("Catania"),
            bulk("166.2742")
        )
    );
    assert_eq!(
        run(&mut h, "GEOSEARCH g FROMMEMBER nosuch BYRADIUS 10 km"),
        "-ERR could not decode requested zset member\r\n"
    );
    assert_eq!(
        run(
            &mut h,
            "GEOSEARCH g FROMLONLAT 15 37 BYRADIUS 10 km STORE x"
        ),
        SYNTAX
    );
    assert_eq!(
        run(&mut h, "GEORADIUS g 15 37 200 km COUNT 1 DESC"),
        format!("*1\r\n{}", bulk("Palermo"))
    );
    assert_eq!(
        run(&mut h, "GEORADIUS g 15 37 200 km ANY"),
        "-ERR the ANY argument requires COUNT argument\r\n"
    );
    assert_eq!(
        run(&mut h, "GEORADIUS g 15 37 -1 km"),
        "-ERR radius cannot be negative\r\n"
    );
    assert_eq!(
        run(&mut h, "GEORADIUS g 15 37 1 parsec"),
        "-ERR unsupported unit provided. please use M, KM, FT, MI\r\n"
    );
    assert_eq!(
        run(
            &mut h,
            "GEOSEARCHSTORE d2 g FROMLONLAT 15 37 BYRADIUS 200 km STOREDIST"
        ),
        ":2\r\n"
    );
    assert_eq!(
        run(&mut h, "ZRANGE d2 0 -1 WITHSCORES"),
        format!(
            "*4\r\n{}{}{}{}",
            bulk("Catania"),
            bulk("56.441257870158204"),
            bulk("Palermo"),
            bulk("190.44242984775784")
        )
    );
    assert_eq!(
        run(&mut h, "GEORADIUSBYMEMBER g Palermo 200 km STORE d3 WITHDIST"),
        "-ERR STORE option in GEORADIUS is not compatible with WITHDIST, WITHHASH and WITHCOORD options\r\n"
    );
    // A missing source deletes the destination of a STORE.
    assert_eq!(
        run(&mut h, "GEORADIUS nokey 15 37 200 km STORE d2"),
        ":0\r\n"
    );
    assert_eq!(run(&mut h, "EXISTS d2"), ":0\r\n");
    assert_eq!(
        run(
            &mut h,
            "COMMAND GETKEYS GEORADIUS k 1 2 3 km STOREDIST b STORE a"
        ),
        format!("*3\r\n{}{}{}", bulk("k"), bulk("a"), bulk("b"))
    );
}

//! The log while a snapshot is being taken (ARCHITECTURE §87): a command that is logged as a
//! command on a large value stays a command, and a restart from the snapshot plus the records
//! after it gives back exactly what the node held.

use lattice_testkit::Harness;

/// Lists of `LIST_LEN` elements: "large" (past 64 elements, logged as commands).
const LISTS: usize = 8;
const LIST_LEN: usize = 2_000;

fn total_bytes(records: &[bytes::Bytes]) -> usize {
    records.iter().map(|r| r.len()).sum()
}

#[test]
fn large_lists_written_during_a_snapshot_are_logged_as_commands() {
    let mut d = Harness::durable(&[]);
    d.host.publish_snapshots = true;
    // Enough keys that the snapshot's walk takes several slices (4,096 keys each): the lists'
    // slots are some behind the walk and some ahead of it while the writes below run.
    for i in 0..10_000 {
        d.cmd(1, &["SET", &format!("k{i}"), "v"]);
    }
    let elements: Vec<String> = (0..LIST_LEN).map(|e| format!("e{e}")).collect();
    for l in 0..LISTS {
        let key = format!("list{l}");
        let mut args = vec!["RPUSH", key.as_str()];
        args.extend(elements.iter().map(String::as_str));
        assert_eq!(d.cmd(1, &args), format!(":{LIST_LEN}\r\n"));
    }
    assert!(d.cmd(1, &["BGREWRITEAOF"]).starts_with('+'));
    d.advance(1);
    let before = total_bytes(&d.records);
    let pushes = 10;
    for p in 0..pushes {
        for l in 0..LISTS {
            d.cmd(1, &["LPUSH", &format!("list{l}"), &format!("new{p}")]);
        }
    }
    let logged = total_bytes(&d.records) - before;
    // As commands, each LPUSH costs a few dozen bytes; a list's whole value is over 10 KB.
    assert!(
        logged < pushes * LISTS * 200,
        "{logged} bytes logged for {} LPUSH during the snapshot",
        pushes * LISTS
    );
    for _ in 0..200 {
        d.advance(10);
    }
    assert!(
        d.cmd(1, &["INFO", "persistence"])
            .contains("aof_rewrite_in_progress:0"),
        "the snapshot did not end"
    );
    // After the snapshot too (its walk is over: every key is held as before the command).
    for l in 0..LISTS {
        d.cmd(1, &["RPUSH", &format!("list{l}"), "tail"]);
    }
    // Restarted on the directory (the snapshot, then the records after it).
    let mut r = Harness::durable(&d.records);
    for l in 0..LISTS {
        let key = format!("list{l}");
        assert_eq!(
            r.cmd(1, &["LLEN", &key]),
            format!(":{}\r\n", LIST_LEN + pushes + 1)
        );
        for (i, at) in [0, pushes - 1, pushes, pushes + LIST_LEN]
            .into_iter()
            .enumerate()
        {
            let at = at.to_string();
            assert_eq!(
                r.cmd(1, &["LINDEX", &key, &at]),
                d.cmd(1, &["LINDEX", &key, &at]),
                "{key} index {at} ({i})"
            );
        }
    }
    assert_eq!(r.cmd(1, &["DBSIZE"]), d.cmd(1, &["DBSIZE"]));
}

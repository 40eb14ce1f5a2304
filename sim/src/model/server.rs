//! Server commands: DBSIZE, FLUSHDB, FLUSHALL, TIME, INFO, COMMAND, CONFIG.

use bytes::Bytes;
use lattice_resp::Frame;

use super::{bulk_frame, is, map_frame, ok, spec, Cx, Model, Proto, Spec, SYNTAX};
use crate::check::{Check, KeyspaceBounds};

pub const SPECS: &[Spec] = &[
    spec("dbsize", 1, dbsize),
    spec("flushdb", -1, flush),
    spec("flushall", -1, flush),
    spec("time", 1, time),
    spec("info", -1, info),
    spec("command", -1, command),
    spec("command|count", 2, command_count),
    spec("command|info", -2, command_info),
    spec("command|docs", -2, command_docs),
    spec("command|list", -2, command_list),
    spec("command|help", 2, super::keys::help),
    spec("config|get", -3, config_get),
    spec("config|set", -4, config_set),
    spec("config|resetstat", 2, config_resetstat),
    spec("config|help", 2, super::keys::help),
];

fn keyspace_bounds(m: &Model, now_ms: u64) -> KeyspaceBounds {
    KeyspaceBounds {
        keys: (m.db.live_count(now_ms), m.db.stored_upper_bound()),
        expires: (
            m.db.volatile_count(now_ms),
            m.db.stored_volatile_upper_bound(),
        ),
    }
}

fn dbsize(m: &mut Model, cx: &mut Cx) -> Check {
    // Redis counts expired keys not reclaimed yet: anything between the live keys and
    // everything possibly still stored.
    let b = keyspace_bounds(m, cx.now_ms);
    Check::IntRange(b.keys.0 as i64, b.keys.1 as i64)
}

fn flush(m: &mut Model, cx: &mut Cx) -> Check {
    match cx.argc() {
        1 => {}
        2 if is(cx.arg(1), "sync") || is(cx.arg(1), "async") => {}
        _ => return Check::err(SYNTAX),
    }
    m.db.clear();
    ok()
}

fn time(_m: &mut Model, cx: &mut Cx) -> Check {
    // The node's clock is exactly what the driver handed it.
    Check::Exact(Frame::Array(vec![
        bulk_frame((cx.now_us / 1_000_000).to_string().as_bytes()),
        bulk_frame((cx.now_us % 1_000_000).to_string().as_bytes()),
    ]))
}

/// Section headers INFO must contain for each section argument.
fn section_header(s: &str) -> Option<&'static str> {
    Some(match s {
        "server" => "# Server",
        "clients" => "# Clients",
        "memory" => "# Memory",
        "persistence" => "# Persistence",
        "stats" => "# Stats",
        "replication" => "# Replication",
        "cpu" => "# CPU",
        "keyspace" => "# Keyspace",
        "errorstats" => "# Errorstats",
        "commandstats" => "# Commandstats",
        _ => return None,
    })
}

fn info(m: &mut Model, cx: &mut Cx) -> Check {
    let mut needles: Vec<Vec<u8>> = Vec::new();
    let mut with_keyspace = cx.argc() == 1;
    if cx.argc() == 1 {
        needles.push(b"# Server".to_vec());
        needles.push(b"redis_version:".to_vec());
    }
    for a in &cx.args[1..] {
        let s = String::from_utf8_lossy(a).to_ascii_lowercase();
        match s.as_str() {
            "all" | "everything" | "default" => {
                with_keyspace = true;
                needles.push(b"# Server".to_vec());
            }
            "keyspace" => {
                with_keyspace = true;
                needles.push(b"# Keyspace".to_vec());
            }
            other => {
                if let Some(h) = section_header(other) {
                    needles.push(h.as_bytes().to_vec());
                }
            }
        }
    }
    Check::Info {
        needles,
        keyspace: with_keyspace.then(|| keyspace_bounds(m, cx.now_ms)),
        verbatim: cx.proto == Proto::Resp3,
    }
}

fn command(_m: &mut Model, cx: &mut Cx) -> Check {
    // Only `COMMAND` alone reaches here; subcommands are dispatched to their specs.
    debug_assert_eq!(cx.argc(), 1);
    Check::NonEmpty
}

/// What Redis answers for a COMMAND subcommand.
fn command_sub(redis: Check, _cx: &Cx) -> Check {
    redis
}

fn command_count(_m: &mut Model, cx: &mut Cx) -> Check {
    command_sub(Check::IntRange(1, i64::MAX), cx)
}

fn command_info(_m: &mut Model, cx: &mut Cx) -> Check {
    let redis = if cx.argc() == 3 {
        Check::CommandInfo(Bytes::from(
            String::from_utf8_lossy(cx.arg(2)).to_ascii_lowercase(),
        ))
    } else {
        Check::NonEmpty
    };
    command_sub(redis, cx)
}

fn command_docs(_m: &mut Model, cx: &mut Cx) -> Check {
    command_sub(Check::NonEmpty, cx)
}

fn command_list(_m: &mut Model, cx: &mut Cx) -> Check {
    command_sub(Check::NonEmpty, cx)
}

fn config_get(m: &mut Model, cx: &mut Cx) -> Check {
    // The workload only asks for parameters the model tracks, by name (no glob characters).
    // Redis 7.0 echoes such a name as it was typed, and lists a parameter once however often
    // it was asked for.
    let mut seen: Vec<&str> = Vec::new();
    let mut pairs = Vec::new();
    for a in &cx.args[2..] {
        let name = String::from_utf8_lossy(a).to_ascii_lowercase();
        if let Some((n, v)) = m.config.get_key_value(name.as_str()) {
            if !seen.contains(n) {
                seen.push(n);
                pairs.push((bulk_frame(a), bulk_frame(v.as_bytes())));
            }
        }
    }
    Check::Exact(map_frame(cx.proto, pairs))
}

fn config_set(m: &mut Model, cx: &mut Cx) -> Check {
    // The workload only sets `hz` to valid values.
    if cx.argc() != 4 || !is(cx.arg(2), "hz") {
        panic!("model limitation: CONFIG SET {:?}", &cx.args[2..]);
    }
    let v = String::from_utf8_lossy(cx.arg(3)).into_owned();
    match v.parse::<i64>() {
        Ok(n) if (1..=500).contains(&n) => {
            m.config.insert("hz", n.to_string());
            ok()
        }
        _ => panic!("model limitation: CONFIG SET hz {v}"),
    }
}

fn config_resetstat(_m: &mut Model, _cx: &mut Cx) -> Check {
    ok()
}

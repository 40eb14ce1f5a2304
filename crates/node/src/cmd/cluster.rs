//! CLUSTER: what cluster-aware clients read to route keys straight to an owner (Redis 7.0's
//! reply shapes), and INFO's `cluster` section.
//!
//! Lattice's ownership does not have Redis's shape (one master per slot range, replicas of one
//! master): every owner of a slot accepts writes. A slot range is listed with its first owner
//! (the placement's highest weight) as the master and the other owners as its replicas, so a
//! client sends writes to the first owner and may read from any. A node that is not
//! partitioned (every replica holds every key) lists one range, 0-16383, with itself first.
//! A standalone node answers as a Redis without cluster support.

use std::fmt::Write as _;

use lattice_placement::{key_slot, Placement, SLOTS};

use crate::args::{is, parse_i64};
use crate::command::{container, spec, Call};
use crate::ctx::{CommandSpec, Core};

const CLUSTER: &str = "cluster";

pub static COMMANDS: &[CommandSpec] = &[
    container(
        "cluster",
        -2,
        CLUSTER,
        "3.0.0",
        "A container for Redis Cluster commands.",
        &[
            spec(
                "cluster|myid",
                2,
                &["stale"],
                (0, 0, 0),
                CLUSTER,
                "3.0.0",
                "Returns the ID of a node.",
                myid,
            ),
            spec(
                "cluster|meet",
                -4,
                &["admin", "stale"],
                (0, 0, 0),
                CLUSTER,
                "3.0.0",
                "Forces a node to handshake with another node.",
                meet,
            ),
            spec(
                "cluster|forget",
                3,
                &["admin", "stale"],
                (0, 0, 0),
                CLUSTER,
                "3.0.0",
                "Removes a node from the nodes table.",
                forget,
            ),
            spec(
                "cluster|leave",
                2,
                &["admin", "stale"],
                (0, 0, 0),
                CLUSTER,
                "3.0.0",
                "Lattice: drains this node's slots to their new owners, then leaves the cluster.",
                leave,
            ),
            spec(
                "cluster|reset",
                -2,
                &["admin", "noscript", "stale"],
                (0, 0, 0),
                CLUSTER,
                "3.0.0",
                "Reset a Redis Cluster node.",
                reset,
            ),
            spec(
                "cluster|keyslot",
                3,
                &["stale"],
                (0, 0, 0),
                CLUSTER,
                "3.0.0",
                "Returns the hash slot for a key.",
                keyslot,
            ),
            spec(
                "cluster|countkeysinslot",
                3,
                &["stale"],
                (0, 0, 0),
                CLUSTER,
                "3.0.0",
                "Returns the number of keys in a hash slot.",
                countkeysinslot,
            ),
            spec(
                "cluster|getkeysinslot",
                4,
                &["stale"],
                (0, 0, 0),
                CLUSTER,
                "3.0.0",
                "Returns the key names in a hash slot.",
                getkeysinslot,
            ),
            spec(
                "cluster|slots",
                2,
                &["loading", "stale"],
                (0, 0, 0),
                CLUSTER,
                "3.0.0",
                "Returns the mapping of cluster slots to nodes.",
                slots,
            ),
            spec(
                "cluster|shards",
                2,
                &["loading", "stale"],
                (0, 0, 0),
                CLUSTER,
                "7.0.0",
                "Returns the mapping of cluster slots to shards.",
                shards,
            ),
            spec(
                "cluster|nodes",
                2,
                &["loading", "stale"],
                (0, 0, 0),
                CLUSTER,
                "3.0.0",
                "Returns the cluster configuration for a node.",
                nodes,
            ),
            spec(
                "cluster|info",
                2,
                &["loading", "stale"],
                (0, 0, 0),
                CLUSTER,
                "3.0.0",
                "Returns information about the state of a node.",
                info,
            ),
        ],
    ),
    spec(
        "readonly",
        1,
        &["fast", "loading", "stale"],
        (0, 0, 0),
        CLUSTER,
        "3.0.0",
        "Enables read-only queries for a connection to a Redis Cluster replica node.",
        read_mode,
    ),
    spec(
        "asking",
        1,
        &["fast"],
        (0, 0, 0),
        CLUSTER,
        "3.0.0",
        "Signals that a cluster client is following an -ASK redirect.",
        read_mode,
    ),
    spec(
        "readwrite",
        1,
        &["fast", "loading", "stale"],
        (0, 0, 0),
        CLUSTER,
        "3.0.0",
        "Enables read-write queries for a connection to a Redis Cluster replica node.",
        read_mode,
    ),
];

/// READONLY and READWRITE: in Redis Cluster they let a connection read from a replica. Every
/// owner of a Lattice slot serves reads and writes alike, so in a cluster there is nothing
/// to switch: both answer OK. ASKING too: a Lattice node never answers -ASK (a key that is
/// moving is served by its old owners until the move is done), so following one is a no-op.
/// A standalone node answers as Redis without cluster support.
fn read_mode(core: &mut Core, call: &mut Call) {
    if core.repl.is_none() {
        return call.error(DISABLED);
    }
    call.ok();
}

const DISABLED: &str = "ERR This instance has cluster support disabled";

/// CLUSTER MEET ip port [bus-port]: links this node with the member whose cluster port is
/// `bus-port` (Redis's default, `port` + 10000, when not given); the two then exchange their
/// member lists and everyone learns everyone (ARCHITECTURE, "Live membership").
fn meet(core: &mut Core, call: &mut Call) {
    if core.cluster.is_none() {
        return call.error(DISABLED);
    }
    let host = String::from_utf8_lossy(call.arg(2)).into_owned();
    let port = parse_i64(call.arg(3)).filter(|p| (1..=65535).contains(p));
    let bus = match call.args.len() {
        4 => port.map(|p| p + 10_000),
        5 => parse_i64(call.arg(4)),
        _ => return call.error("ERR syntax error"),
    };
    let (Some(_), Some(bus)) = (port, bus.filter(|p| (1..=65535).contains(p))) else {
        return call.error(&format!(
            "ERR Invalid node address specified: {host}:{}",
            String::from_utf8_lossy(call.arg(3))
        ));
    };
    if host.is_empty() || host.contains(char::is_whitespace) {
        return call.error(&format!("ERR Invalid node address specified: {host}:{bus}"));
    }
    core.dials
        .push_back((lattice_crdt::NodeId(0), format!("{host}:{bus}")));
    call.ok();
}

/// CLUSTER FORGET <node-id>: `node-id` (40 hex digits, or the plain number) becomes a
/// tombstone that gossip spreads, its slots are placed over the rest and their new owners
/// take them from a holder.
fn forget(core: &mut Core, call: &mut Call) {
    let Some(c) = core.cluster.as_deref_mut() else {
        return call.error(DISABLED);
    };
    let text = String::from_utf8_lossy(call.arg(2)).into_owned();
    let id = if text.len() == 40 {
        u32::from_str_radix(text.trim_start_matches('0'), 16).ok()
    } else {
        text.parse::<u32>().ok()
    };
    let Some(id) = id.filter(|&id| c.members.contains_key(&id)) else {
        return call.error(&format!("ERR Unknown node {text}"));
    };
    match c.forget(id) {
        Ok(()) => call.ok(),
        Err(e) => call.error(e),
    }
}

/// CLUSTER LEAVE (Lattice's own): the node stops owning slots, streams each group it holds to
/// its new owners, and once every one acknowledged, marks itself left; it keeps forwarding
/// commands meanwhile. INFO cluster shows the progress (`cluster_my_status`).
fn leave(core: &mut Core, call: &mut Call) {
    let Some(c) = core.cluster.as_deref_mut() else {
        return call.error(DISABLED);
    };
    match c.leave() {
        Ok(()) => call.ok(),
        Err(e) => call.error(e),
    }
}

/// CLUSTER RESET [HARD|SOFT]: Redis Cluster's way for a node to forget its cluster at once.
/// A Lattice member holds keys other members may not have yet, so it never drops out without
/// handing its slots over: refused, naming CLUSTER LEAVE, which does that. Standalone, Redis's
/// answer for a server without cluster support.
fn reset(core: &mut Core, call: &mut Call) {
    if core.cluster.is_none() {
        return call.error(DISABLED);
    }
    if call.argc() > 3 || (call.argc() == 3 && !is(call.arg(2), "hard") && !is(call.arg(2), "soft"))
    {
        return call.error("ERR syntax error");
    }
    call.error(
        "ERR CLUSTER RESET is not supported: a member leaves with CLUSTER LEAVE, which first moves its slots to their new owners",
    );
}

/// A node's 40-character id, as Redis Cluster's ids look: the node id in hex, zero-padded.
pub fn node_name(id: u32) -> String {
    format!("{id:040x}")
}

/// What the CLUSTER replies describe: each slot range with its owners, first owner first.
struct View {
    me: u32,
    /// (id, host, port) of every known member.
    members: Vec<(u32, String, u16)>,
    ranges: Vec<(u16, u16, Vec<u32>)>,
    ok: bool,
}

fn view(core: &Core) -> Option<View> {
    core.repl.as_ref()?;
    let me = core.config.node_id;
    if let Some(c) = core.cluster.as_deref() {
        let members = c
            .members
            .iter()
            .filter(|(_, m)| m.status != crate::cluster::Status::Left)
            .map(|(id, m)| (*id, m.host.clone(), m.port))
            .collect();
        let ranges = c.placement().map_or_else(Vec::new, ranges_of);
        return Some(View {
            me,
            members,
            ok: c.placement().is_some(),
            ranges,
        });
    }
    // Fully replicated: this node holds every slot; its peers' addresses are not exchanged.
    Some(View {
        me,
        members: vec![(
            me,
            core.config.announce_host.clone(),
            core.config.announce_port,
        )],
        ranges: vec![(0, SLOTS - 1, vec![me])],
        ok: true,
    })
}

fn ranges_of(p: &Placement) -> Vec<(u16, u16, Vec<u32>)> {
    p.ranges()
        .into_iter()
        .map(|(r, owners)| (r.start, r.end - 1, owners.to_vec()))
        .collect()
}

impl View {
    fn member(&self, id: u32) -> Option<&(u32, String, u16)> {
        self.members.iter().find(|m| m.0 == id)
    }
}

fn myid(core: &mut Core, call: &mut Call) {
    if core.repl.is_none() {
        return call.error(DISABLED);
    }
    call.out.bulk(node_name(core.config.node_id).as_bytes());
}

fn keyslot(core: &mut Core, call: &mut Call) {
    if core.repl.is_none() {
        return call.error(DISABLED);
    }
    call.out.integer(i64::from(key_slot(call.arg(2))));
}

fn parse_slot(call: &mut Call) -> Option<u16> {
    match parse_i64(call.arg(2)) {
        Some(n) if (0..i64::from(SLOTS)).contains(&n) => Some(n as u16),
        _ => {
            call.error("ERR Invalid slot");
            None
        }
    }
}

/// The live keys of `slot` held here, in store order. A scan of the keyspace: the store is
/// split by its own hash, not by cluster slot (ARCHITECTURE §3).
fn keys_in_slot(core: &Core, slot: u16, now_ms: u64, limit: usize) -> Vec<bytes::Bytes> {
    core.db
        .iter()
        .filter(|e| !e.is_expired(now_ms) && key_slot(e.key()) == slot)
        .take(limit)
        .map(|e| bytes::Bytes::copy_from_slice(e.key()))
        .collect()
}

fn countkeysinslot(core: &mut Core, call: &mut Call) {
    if core.repl.is_none() {
        return call.error(DISABLED);
    }
    let Some(slot) = parse_slot(call) else {
        return;
    };
    let n = keys_in_slot(core, slot, call.now_ms, usize::MAX).len();
    call.out.integer(n as i64);
}

fn getkeysinslot(core: &mut Core, call: &mut Call) {
    if core.repl.is_none() {
        return call.error(DISABLED);
    }
    let Some(slot) = parse_slot(call) else {
        return;
    };
    let count = match parse_i64(call.arg(3)) {
        Some(n) if n >= 0 => n as usize,
        _ => return call.error("ERR Invalid number of keys"),
    };
    let keys = keys_in_slot(core, slot, call.now_ms, count);
    call.out.array_len(keys.len());
    for k in keys {
        call.out.bulk(&k);
    }
}

fn slots(core: &mut Core, call: &mut Call) {
    let Some(v) = view(core) else {
        return call.error(DISABLED);
    };
    call.out.array_len(v.ranges.len());
    for (start, end, owners) in &v.ranges {
        let known: Vec<&(u32, String, u16)> = owners.iter().filter_map(|&o| v.member(o)).collect();
        call.out.array_len(2 + known.len());
        call.out.integer(i64::from(*start));
        call.out.integer(i64::from(*end));
        for (id, host, port) in known {
            call.out.array_len(4);
            call.out.bulk(host.as_bytes());
            call.out.integer(i64::from(*port));
            call.out.bulk(node_name(*id).as_bytes());
            call.out.map_len(0);
        }
    }
}

/// A shard of `CLUSTER SHARDS`: an owner list and its slot ranges.
type Shard<'a> = (&'a [u32], Vec<(u16, u16)>);

fn shards(core: &mut Core, call: &mut Call) {
    let Some(v) = view(core) else {
        return call.error(DISABLED);
    };
    // A shard: the ranges with one and the same owner list.
    let mut groups: Vec<Shard> = Vec::new();
    for (start, end, owners) in &v.ranges {
        match groups.iter_mut().find(|(o, _)| *o == owners.as_slice()) {
            Some((_, rs)) => rs.push((*start, *end)),
            None => groups.push((owners, vec![(*start, *end)])),
        }
    }
    call.out.array_len(groups.len());
    for (owners, ranges) in groups {
        call.out.map_len(2);
        call.out.bulk(b"slots");
        call.out.array_len(ranges.len() * 2);
        for (s, e) in ranges {
            call.out.integer(i64::from(s));
            call.out.integer(i64::from(e));
        }
        call.out.bulk(b"nodes");
        let known: Vec<&(u32, String, u16)> = owners.iter().filter_map(|&o| v.member(o)).collect();
        call.out.array_len(known.len());
        for (i, (id, host, port)) in known.into_iter().enumerate() {
            call.out.map_len(7);
            call.out.bulk(b"id");
            call.out.bulk(node_name(*id).as_bytes());
            call.out.bulk(b"port");
            call.out.integer(i64::from(*port));
            call.out.bulk(b"ip");
            call.out.bulk(host.as_bytes());
            call.out.bulk(b"endpoint");
            call.out.bulk(host.as_bytes());
            call.out.bulk(b"role");
            call.out
                .bulk(if i == 0 { &b"master"[..] } else { b"replica" });
            call.out.bulk(b"replication-offset");
            call.out.integer(0);
            call.out.bulk(b"health");
            call.out.bulk(b"online");
        }
    }
}

/// One line per member: every member is listed as a master with the slots it is the first
/// owner of (Redis's format has no place for a node that is master of some ranges and replica
/// of others; `CLUSTER SLOTS` and `SHARDS` carry the replicas).
fn nodes(core: &mut Core, call: &mut Call) {
    let Some(v) = view(core) else {
        return call.error(DISABLED);
    };
    let up = core.cluster.as_deref().map(|c| c.up.clone());
    let mut text = String::new();
    for (id, host, port) in &v.members {
        let connected = *id == v.me || up.as_ref().is_none_or(|u| u.contains(id));
        // A member that is not reachable is flagged `fail` (failure detection is the link's:
        // a link silent for its limit is down); a draining one `nofailover` (Lattice: it
        // serves its slots' data until the new owners hold it, and owns none).
        let leaving = core.cluster.as_deref().is_some_and(|c| {
            c.members
                .get(id)
                .is_some_and(|m| m.status == crate::cluster::Status::Leaving)
        });
        let myself = format!(
            "{}master{}{}",
            if *id == v.me { "myself," } else { "" },
            if connected { "" } else { ",fail" },
            if leaving { ",nofailover" } else { "" },
        );
        let _ = write!(
            text,
            "{} {host}:{port}@0 {myself} - 0 0 0 {}",
            node_name(*id),
            if connected {
                "connected"
            } else {
                "disconnected"
            }
        );
        for (start, end, owners) in &v.ranges {
            if owners.first() == Some(id) {
                if start == end {
                    let _ = write!(text, " {start}");
                } else {
                    let _ = write!(text, " {start}-{end}");
                }
            }
        }
        text.push('\n');
    }
    call.out.verbatim(b"txt", text.as_bytes());
}

fn info(core: &mut Core, call: &mut Call) {
    let Some(v) = view(core) else {
        return call.error(DISABLED);
    };
    let assigned: u32 = v.ranges.iter().map(|(s, e, _)| u32::from(e - s) + 1).sum();
    let masters = {
        let mut firsts: Vec<u32> = v
            .ranges
            .iter()
            .filter_map(|r| r.2.first().copied())
            .collect();
        firsts.sort_unstable();
        firsts.dedup();
        firsts.len()
    };
    let mut text = String::new();
    let _ = write!(
        text,
        "cluster_state:{}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{assigned}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{}\r\ncluster_size:{masters}\r\ncluster_current_epoch:0\r\ncluster_my_epoch:0\r\n",
        if v.ok { "ok" } else { "fail" },
        v.members.len(),
    );
    if let Some(c) = core.cluster.as_deref() {
        let s = c.stats;
        let _ = write!(
            text,
            "cluster_replication_factor:{}\r\ncluster_forwarded:{}\r\ncluster_forward_retries:{}\r\ncluster_forward_timeouts:{}\r\ncluster_forward_failures:{}\r\ncluster_served_for_peers:{}\r\ncluster_forwards_waiting:{}\r\n",
            c.rf,
            s.forwarded,
            s.forward_retries,
            s.forward_timeouts,
            s.forward_failures,
            s.served_for_peers,
            c.pending_len(),
        );
    }
    call.out.verbatim(b"txt", text.as_bytes());
}

/// INFO's `cluster` section: `cluster_enabled:1` on a clustered node, 0 standalone (Redis's
/// field), then Lattice's own figures.
pub fn info_section(core: &Core, t: &mut String) {
    t.push_str("# Cluster\r\n");
    let _ = write!(t, "cluster_enabled:{}\r\n", u8::from(core.repl.is_some()));
    if let Some(c) = core.cluster.as_deref() {
        let s = c.stats;
        let _ = write!(
            t,
            "cluster_partitioned:1\r\ncluster_replication_factor:{}\r\ncluster_members_known:{}\r\ncluster_state:{}\r\ncluster_forwarded:{}\r\ncluster_forward_retries:{}\r\ncluster_forward_timeouts:{}\r\ncluster_forward_failures:{}\r\ncluster_served_for_peers:{}\r\n",
            c.rf,
            c.live_members(),
            if c.placement().is_some() { "ok" } else { "fail" },
            s.forwarded,
            s.forward_retries,
            s.forward_timeouts,
            s.forward_failures,
            s.served_for_peers,
        );
        let members: Vec<String> = c
            .members
            .iter()
            .map(|(id, m)| format!("{id}:{}", m.status.name()))
            .collect();
        let me = c.me();
        let _ = write!(
            t,
            "cluster_members:{}\r\ncluster_my_status:{}\r\ncluster_my_epoch_lattice:{}\r\ncluster_groups_owned:{}\r\ncluster_groups_held:{}\r\ncluster_groups_incoming:{}\r\ncluster_groups_draining:{}\r\ncluster_groups_sent:{}\r\ncluster_groups_received:{}\r\ncluster_groups_dropped:{}\r\n",
            members.join(","),
            me.status.name(),
            me.epoch,
            c.owned().len(),
            me.held.len(),
            c.incoming().len(),
            c.draining().len(),
            s.groups_sent,
            s.groups_received,
            s.groups_dropped,
        );
        if let Some(r) = core.repl.as_deref() {
            let m = r.move_stats;
            let _ = write!(
                t,
                "cluster_moves_in_progress:{}\r\ncluster_move_streams_done:{}\r\ncluster_move_streams_restarted:{}\r\ncluster_move_bytes_sent:{}\r\ncluster_move_keys_sent:{}\r\ncluster_move_bytes_received:{}\r\ncluster_move_keys_received:{}\r\ncluster_move_keys_dropped:{}\r\ncluster_move_deltas_held_back:{}\r\ncluster_move_leaves_checked:{}\r\ncluster_move_leaves_wanted:{}\r\ncluster_move_keys_filled:{}\r\ncluster_move_keys_sent_short:{}\r\n",
                r.moves_out().count(),
                m.streams_done,
                m.streams_restarted,
                m.bytes_sent,
                m.keys_sent,
                m.bytes_received,
                m.keys_received,
                m.keys_dropped,
                m.deltas_held_back,
                m.leaves_checked,
                m.leaves_wanted,
                m.keys_filled,
                m.keys_sent_short,
            );
        }
    }
}

/// INFO `hotkeys` (ARCHITECTURE, "Hot keys"): the threshold, the hottest keys this node's
/// clients touch with their estimated rate, Redis LFU counter and where they are served from,
/// the copies held and served, and the last decisions.
pub fn hotkeys_info_section(core: &Core, t: &mut String) {
    let threshold = core.config.hotkey_threshold;
    t.push_str("# Hotkeys\r\n");
    let _ = write!(
        t,
        "hotkey_threshold:{threshold}\r\nhotkeys_tracked:{}\r\n",
        core.hot_keys.len()
    );
    let factor = core
        .config
        .get("lfu-log-factor")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(10);
    let cluster = core.cluster.as_deref();
    let repl = core.repl.as_deref();
    if let Some(r) = repl {
        let s = r.hot.stats;
        let _ = write!(
            t,
            "hotkey_copies_held:{}\r\nhotkey_copies_taken:{}\r\nhotkey_copies_dropped:{}\r\nhotkey_local_reads:{}\r\nhotkey_holders_added:{}\r\nhotkey_holders_released:{}\r\nhotkey_holds_refused:{}\r\n",
            r.hot.held_len(),
            s.copies_taken,
            s.copies_dropped,
            s.local_reads,
            s.holders_added,
            s.holders_released,
            s.holds_refused,
        );
    }
    // The ten hottest keys at any rate: what the sketch sees, hot or not yet.
    for (i, (key, rate)) in core.hot_keys.hot(1).into_iter().take(10).enumerate() {
        let shown = crate::repl::hot::shown(key);
        let (place, replicas) = match (cluster, repl) {
            (Some(c), Some(r)) if c.owns(lattice_placement::key_slot(key)) => {
                ("owner", c.rf + r.hot.holders_of(key))
            }
            (Some(c), Some(r)) if r.hot.serves(key) => ("copy", c.rf + 1),
            (Some(c), _) => ("forwarded", c.rf),
            (None, _) => ("local", core.config.cluster_size),
        };
        let _ = write!(
            t,
            "hotkey{i}:key={shown},rate={rate},freq={},served={place},replicas={replicas}\r\n",
            core.hot_keys.lfu_counter(key, factor)
        );
    }
    if let Some(r) = repl {
        for (i, (at, what)) in r.hot.log().enumerate() {
            let _ = write!(t, "hotkey_event{i}:ms={at},{what}\r\n");
        }
    }
}

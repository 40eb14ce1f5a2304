//! Server commands: INFO, DBSIZE, FLUSHDB, FLUSHALL, TIME, COMMAND, CONFIG.

use std::fmt::Write as _;

use crate::args::is;
use crate::command::{container, flag_bits, key_positions, spec, Call};
use crate::ctx::{CommandSpec, Core};
use crate::dispatch::NOT_IN_MULTI;

const SERVER: &str = "server";

/// The Redis version we answer as: clients and tools gate features on it, and Lattice
/// implements Redis 7.0's command semantics.
pub const REDIS_VERSION: &str = "7.0.15";
pub const LATTICE_VERSION: &str = env!("CARGO_PKG_VERSION");

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "info",
        -1,
        &["loading", "stale"],
        (0, 0, 0),
        SERVER,
        "1.0.0",
        "Returns information and statistics about the server.",
        info,
    ),
    spec(
        "dbsize",
        1,
        &["readonly", "fast"],
        (0, 0, 0),
        SERVER,
        "1.0.0",
        "Returns the number of keys in the database.",
        dbsize,
    ),
    spec(
        "flushdb",
        -1,
        &["write"],
        (0, 0, 0),
        SERVER,
        "1.0.0",
        "Removes all keys from the current database.",
        flush,
    ),
    spec(
        "flushall",
        -1,
        &["write"],
        (0, 0, 0),
        SERVER,
        "1.0.0",
        "Removes all keys from all databases.",
        flush,
    ),
    spec(
        "time",
        1,
        &["loading", "stale", "fast"],
        (0, 0, 0),
        SERVER,
        "2.6.0",
        "Returns the server time.",
        time,
    ),
    CommandSpec {
        name: "command",
        arity: -1,
        flags: &["loading", "stale"],
        bits: flag_bits(&["loading", "stale"]),
        keys: (0, 0, 0),
        group: SERVER,
        summary: "Returns detailed information about all commands.",
        since: "2.8.13",
        handler: Some(command_all),
        subcommands: &[
            spec(
                "command|count",
                2,
                &["loading", "stale"],
                (0, 0, 0),
                SERVER,
                "2.8.13",
                "Returns a count of commands.",
                command_count,
            ),
            spec(
                "command|info",
                -2,
                &["loading", "stale"],
                (0, 0, 0),
                SERVER,
                "2.8.13",
                "Returns information about one, multiple or all commands.",
                command_info,
            ),
            spec(
                "command|docs",
                -2,
                &["loading", "stale"],
                (0, 0, 0),
                SERVER,
                "7.0.0",
                "Returns documentary information about one, multiple or all commands.",
                command_docs,
            ),
            spec(
                "command|list",
                -2,
                &["loading", "stale"],
                (0, 0, 0),
                SERVER,
                "7.0.0",
                "Returns a list of command names.",
                command_list,
            ),
            spec(
                "command|getkeys",
                -3,
                &["loading", "stale"],
                (0, 0, 0),
                SERVER,
                "2.8.13",
                "Extracts the key names from an arbitrary command.",
                command_getkeys,
            ),
            spec(
                "command|getkeysandflags",
                -4,
                &["loading", "stale"],
                (0, 0, 0),
                SERVER,
                "7.0.0",
                "Extracts the key names and access flags for an arbitrary command.",
                command_getkeysandflags,
            ),
            spec(
                "command|help",
                2,
                &["loading", "stale"],
                (0, 0, 0),
                SERVER,
                "5.0.0",
                "Returns helpful text about the different subcommands.",
                command_help,
            ),
        ],
    },
    container(
        "config",
        -2,
        SERVER,
        "2.0.0",
        "A container for server configuration commands.",
        &[
            spec(
                "config|get",
                -3,
                &["admin", "loading", "stale"],
                (0, 0, 0),
                SERVER,
                "2.0.0",
                "Returns the effective values of configuration parameters.",
                config_get,
            ),
            spec(
                "config|set",
                -4,
                &["admin", "loading", "stale"],
                (0, 0, 0),
                SERVER,
                "2.0.0",
                "Sets configuration parameters in-flight.",
                config_set,
            ),
            spec(
                "config|resetstat",
                2,
                &["admin", "loading", "stale"],
                (0, 0, 0),
                SERVER,
                "2.0.0",
                "Resets the server's statistics.",
                config_resetstat,
            ),
            spec(
                "config|help",
                2,
                &["loading", "stale"],
                (0, 0, 0),
                SERVER,
                "5.0.0",
                "Returns helpful text about the different subcommands.",
                config_help,
            ),
        ],
    ),
    spec(
        "save",
        1,
        &["admin", "noscript", "no-async-loading", "no-multi"],
        (0, 0, 0),
        SERVER,
        "1.0.0",
        "Synchronously saves the database(s) to disk.",
        save,
    ),
    spec(
        "shutdown",
        -1,
        &[
            "admin",
            "noscript",
            "loading",
            "stale",
            "no-multi",
            "allow-busy",
        ],
        (0, 0, 0),
        SERVER,
        "1.0.0",
        "Synchronously saves the database(s) to disk and shuts down the Redis server.",
        shutdown,
    ),
    spec(
        "bgsave",
        -1,
        &["admin", "noscript", "no-async-loading"],
        (0, 0, 0),
        SERVER,
        "1.0.0",
        "Asynchronously saves the database(s) to disk.",
        bgsave,
    ),
    spec(
        "bgrewriteaof",
        1,
        &["admin", "noscript", "no-async-loading"],
        (0, 0, 0),
        SERVER,
        "1.0.0",
        "Asynchronously rewrites the append-only file to disk.",
        bgrewriteaof,
    ),
    spec(
        "lastsave",
        1,
        &["loading", "stale", "fast"],
        (0, 0, 0),
        SERVER,
        "1.0.0",
        "Returns the Unix timestamp of the last successful save to disk.",
        lastsave,
    ),
    spec(
        "debug",
        -2,
        &["admin", "noscript", "loading", "stale"],
        (0, 0, 0),
        SERVER,
        "1.0.0",
        "A container for debugging commands (Lattice: RELOAD and LOADAOF).",
        debug,
    ),
];

/// DEBUG: only what reads the data directory back for real. RELOAD takes a snapshot and
/// reloads the dataset from the files through the recovery the start uses (so a test that
/// reloads and then reads checks persistence); RELOAD NOSAVE and LOADAOF reload from the
/// files as they are. Every other subcommand is an error naming what is supported, never a
/// silent OK.
fn debug(core: &mut Core, call: &mut Call) {
    let sub = call.arg(1);
    if is(sub, "reload") {
        let mut save = true;
        for a in &call.args[2..] {
            if is(a, "nosave") {
                save = false;
            } else if is(a, "noflush") || is(a, "merge") {
                return call.error(
                    "ERR DEBUG RELOAD NOFLUSH and MERGE are not supported: a reload replaces the dataset with what the files hold",
                );
            } else {
                return call.syntax_error();
            }
        }
        return debug_reload(core, call, save);
    }
    if is(sub, "loadaof") && call.argc() == 2 {
        return debug_reload(core, call, false);
    }
    if is(sub, "help") && call.argc() == 2 {
        return call.help(&[
            "DEBUG <subcommand> [<arg> ...]. Subcommands are:",
            "RELOAD [NOSAVE]",
            "    Save a snapshot (unless NOSAVE) and reload the dataset from the data directory.",
            "LOADAOF",
            "    Sync the log and reload the dataset from the data directory.",
            "HELP",
            "    Print this help.",
        ]);
    }
    let sub = String::from_utf8_lossy(&sub[..sub.len().min(64)]).into_owned();
    call.error(&format!(
        "ERR DEBUG {sub} is not supported by Lattice (supported: RELOAD [NOSAVE], LOADAOF, HELP)"
    ));
}

fn debug_reload(core: &mut Core, call: &mut Call, save: bool) {
    if call.in_exec {
        return call.error(NOT_IN_MULTI);
    }
    if !core.persist.active {
        return call.error(NO_DISK);
    }
    if core.repl.is_some() {
        return call.error("ERR DEBUG RELOAD is not supported on a cluster replica");
    }
    if !save && !core.config.appendonly {
        return call.error(
            "ERR DEBUG LOADAOF and RELOAD NOSAVE need appendonly yes (the log is not being written)",
        );
    }
    if core.persist.snapshot_in_progress() {
        return call.error("ERR Background save already in progress");
    }
    if !core.start_reload(call.conn, save) {
        call.error("ERR a reload is already in progress");
    }
}

/// Without a data directory (a clustered node, or a driver with no disk) there is nothing
/// to save to: answering OK would claim data is on disk when it is not.
const NO_DISK: &str = "ERR persistence is off on this node (clustered, or no data directory)";

/// SAVE: a whole snapshot at once; the caller's reply (and anything after it) waits until the
/// driver says it is on disk and current.
fn save(core: &mut Core, call: &mut Call) {
    if call.in_exec {
        return call.error(NOT_IN_MULTI);
    }
    if !core.persist.active {
        return call.error(NO_DISK);
    }
    if core.persist.snapshot_in_progress() {
        return call.error("ERR Background save already in progress");
    }
    core.start_snapshot(crate::persist::SnapshotKind::Save, Some(call.conn));
}

fn bgsave(core: &mut Core, call: &mut Call) {
    if call.argc() > 2 || (call.argc() == 2 && !is(call.arg(1), "schedule")) {
        return call.syntax_error();
    }
    if !core.persist.active {
        return call.error(NO_DISK);
    }
    if core.persist.snapshot_in_progress() {
        return call.error("ERR Background save already in progress");
    }
    core.start_snapshot(crate::persist::SnapshotKind::Background, None);
    call.out.simple(b"Background saving started");
}

/// BGREWRITEAOF: compaction is a snapshot plus the log after it, so this is BGSAVE by another
/// name (with Redis's replies).
fn bgrewriteaof(core: &mut Core, call: &mut Call) {
    if !core.persist.active {
        return call.error(NO_DISK);
    }
    if core.persist.snapshot_in_progress() {
        return call.error("ERR Background append only file rewriting already in progress");
    }
    core.start_snapshot(crate::persist::SnapshotKind::Background, None);
    call.out
        .simple(b"Background append only file rewriting started");
}

fn lastsave(core: &mut Core, call: &mut Call) {
    let s = core.persist.lastsave_s;
    let s = if s == 0 { core.start_ms / 1000 } else { s };
    call.out.integer(s as i64);
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]. The node asks its driver to stop the process
/// (`Output::Shutdown`) after the last records are logged and synced; SAVE takes a snapshot
/// first. ABORT has nothing to abort (no shutdown waits for replicas here).
fn shutdown(core: &mut Core, call: &mut Call) {
    if call.in_exec {
        return call.error(NOT_IN_MULTI);
    }
    let (mut save, mut nosave, mut abort) = (false, false, false);
    for arg in &call.args[1..] {
        if is(arg, "save") {
            save = true;
        } else if is(arg, "nosave") {
            nosave = true;
        } else if is(arg, "abort") {
            abort = true;
        } else if !is(arg, "now") && !is(arg, "force") {
            return call.syntax_error();
        }
    }
    if (save && nosave) || (abort && call.argc() > 2) {
        return call.syntax_error();
    }
    if abort {
        return call.error("ERR No shutdown in progress.");
    }
    if save && core.persist.active && !core.persist.snapshot_in_progress() {
        if !core.shutdown_after_snapshot(call.conn) {
            return call.error("ERR Errors trying to SHUTDOWN. Check logs.");
        }
        return;
    }
    core.persist_shutdown();
}

fn dbsize(core: &mut Core, call: &mut Call) {
    call.out.integer(core.db.len() as i64);
}

fn flush(core: &mut Core, call: &mut Call) {
    let lazy = match call.argc() {
        1 => core.config.lazyfree_lazy_user_flush,
        2 if is(call.arg(1), "async") => true,
        2 if is(call.arg(1), "sync") => false,
        _ => return call.syntax_error(),
    };
    core.touch_all_watched();
    core.tracking_flush_all();
    // Before the capture: a clustered node notes the keys whose tombstones it will log.
    core.persist_flush_all();
    core.capture_flush();
    if lazy {
        let taken = core.db.clear_taking();
        core.lazy_free.queue.extend(taken);
    } else {
        core.db.clear();
    }
    // Parked clients re-check their keys: a blocked XREADGROUP learns its stream is gone
    // (Redis answers it UNBLOCKED); list and zset pops simply stay parked.
    let parked: Vec<_> = core.blocked_on.keys().cloned().collect();
    for key in parked {
        core.touched_by_peer(&key);
    }
    call.ok();
}

fn time(_core: &mut Core, call: &mut Call) {
    let us = call.now.0;
    call.out.array_len(2);
    call.out.bulk((us / 1_000_000).to_string().as_bytes());
    call.out.bulk((us % 1_000_000).to_string().as_bytes());
}

fn human_bytes(n: u64) -> String {
    let n = n as f64;
    if n < 1024.0 {
        format!("{n}B")
    } else if n < 1024.0 * 1024.0 {
        format!("{:.2}K", n / 1024.0)
    } else if n < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2}M", n / (1024.0 * 1024.0))
    } else {
        format!("{:.2}G", n / (1024.0 * 1024.0 * 1024.0))
    }
}

const DEFAULT_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "errorstats",
    "cluster",
    "keyspace",
];
const ALL_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "commandstats",
    "errorstats",
    "cluster",
    "hotkeys",
    "keyspace",
];

/// Clients connected over TLS: the driver serves TLS on `tls-port` only, so a connection whose
/// local address ends in that port is one (the node itself never sees TLS).
fn tls_clients(core: &Core) -> usize {
    let port = core.config.get("tls-port").unwrap_or("0");
    if port == "0" {
        return 0;
    }
    core.clients
        .values()
        .filter(|c| {
            c.local_addr
                .rsplit_once(':')
                .is_some_and(|(_, p)| p == port)
        })
        .count()
}

fn info(core: &mut Core, call: &mut Call) {
    let mut wanted: Vec<&str> = Vec::new();
    if call.argc() == 1 {
        wanted.extend(DEFAULT_SECTIONS);
    }
    for a in &call.args[1..] {
        let a = String::from_utf8_lossy(a).to_ascii_lowercase();
        match a.as_str() {
            "all" | "everything" => wanted.extend(ALL_SECTIONS),
            "default" => wanted.extend(DEFAULT_SECTIONS),
            s => {
                if let Some(known) = ALL_SECTIONS.iter().find(|k| **k == s) {
                    wanted.push(known);
                }
            }
        }
    }
    // Rates decay with time, not only with accesses.
    core.hot_keys.roll_to(call.now_ms);
    let mut text = String::new();
    for section in ALL_SECTIONS {
        if !wanted.contains(section) {
            continue;
        }
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        write_section(core, section, call.now_ms, &mut text);
    }
    call.out.verbatim(b"txt", text.as_bytes());
}

/// Every INFO section as `INFO everything` shows it (the metrics endpoint reads this).
pub(crate) fn info_everything(core: &Core) -> String {
    let now_ms = core.now.as_millis();
    let mut text = String::new();
    for section in ALL_SECTIONS {
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        write_section(core, section, now_ms, &mut text);
    }
    text
}

fn write_section(core: &Core, section: &str, now_ms: u64, t: &mut String) {
    let p = &core.process;
    match section {
        "server" => {
            let uptime_s = core.uptime_ms() / 1000;
            let _ = write!(
                t,
                "# Server\r\nredis_version:{REDIS_VERSION}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\nlattice_version:{LATTICE_VERSION}\r\nredis_mode:standalone\r\nos:{}\r\narch_bits:64\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nhz:{}\r\nconfigured_hz:{}\r\nexecutable:lattice-server\r\n",
                std::env::consts::OS,
                p.process_id,
                core.run_id,
                p.tcp_port,
                core.now.0,
                uptime_s,
                uptime_s / 86400,
                core.config.hz,
                core.config.hz,
            );
        }
        "clients" => {
            let _ = write!(
                t,
                "# Clients\r\nconnected_clients:{}\r\nconnected_tls_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\ntracking_clients:{}\r\n",
                core.clients.len(),
                tls_clients(core),
                core.config.maxclients,
                core.blocked_clients(),
                core.tracking.clients
            );
        }
        "memory" => {
            let used = p.used_memory_bytes;
            let ratio = if used > 0 {
                p.rss_bytes as f64 / used as f64
            } else {
                0.0
            };
            let _ = write!(
                t,
                "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{}\r\nused_memory_rss_human:{}\r\nmaxmemory:{}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:{}\r\nmem_not_counted_for_evict:0\r\nlazyfree_pending_objects:{}\r\nmem_fragmentation_ratio:{ratio:.2}\r\nmem_allocator:system\r\n",
                human_bytes(used),
                p.rss_bytes,
                human_bytes(p.rss_bytes),
                core.config.maxmemory_bytes,
                human_bytes(core.config.maxmemory_bytes),
                core.config.maxmemory_policy,
                core.lazy_free.queue.len(),
            );
            // EVAL scripts and function libraries share the node's one interpreter, so its
            // heap is reported once, as Lua memory.
            let sc = &core.scripts;
            let lua = sc.lua.used_memory();
            let _ = write!(
                t,
                "used_memory_lua:{lua}\r\nused_memory_lua_human:{}\r\nused_memory_scripts_eval:{}\r\nnumber_of_cached_scripts:{}\r\nnumber_of_functions:{}\r\nnumber_of_libraries:{}\r\n",
                human_bytes(lua as u64),
                sc.cache_bytes,
                sc.len(),
                sc.libraries.function_count(),
                sc.libraries.len(),
            );
        }
        "persistence" => {
            crate::persist::write_info(core, now_ms, t);
        }
        "stats" => {
            let s = &core.stats;
            let _ = write!(
                t,
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nrejected_connections:{}\r\nexpired_keys:{}\r\nevicted_keys:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\npubsub_channels:{}\r\npubsub_patterns:{}\r\npubsubshard_channels:{}\r\ntracking_total_keys:{}\r\ntracking_total_items:{}\r\ntracking_total_prefixes:{}\r\ntotal_error_replies:{}\r\nlazyfreed_objects:{}\r\nclient_output_buffer_limit_disconnections:{}\r\n",
                s.total_connections_received,
                s.total_commands_processed,
                s.instantaneous_ops_per_sec(),
                s.net_input_bytes,
                s.net_output_bytes,
                s.rejected_connections,
                core.db.stats().expired_keys,
                core.eviction.evicted_keys,
                s.keyspace_hits,
                s.keyspace_misses,
                core.channels.len(),
                core.patterns.len(),
                core.shard_channels.len(),
                core.tracking.keys.len(),
                core.tracking.items,
                core.tracking.prefixes.len(),
                s.total_error_replies,
                core.lazy_free.freed,
                s.output_limit_disconnections,
            );
            let d = &core.acl.denied;
            let _ = write!(
                t,
                "acl_access_denied_auth:{}\r\nacl_access_denied_cmd:{}\r\nacl_access_denied_key:{}\r\nacl_access_denied_channel:{}\r\n",
                d.auth, d.command, d.key, d.channel
            );
            // Redis's count of connections MIGRATE keeps open to other servers. Lattice has no
            // MIGRATE (ARCHITECTURE §57), so there are never any.
            t.push_str("migrate_cached_sockets:0\r\n");
            let _ = write!(
                t,
                "host_lock_longest_hold_us:{}\r\n",
                s.host_lock_longest_hold_us
            );
        }
        "replication" => {
            // The offset is ROLE's: the writes this node has stamped (`crate::cmd::role`).
            let offset = core.repl.as_ref().map_or(0, |r| r.own_writes());
            let _ = write!(
                t,
                "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_repl_offset:{offset}\r\n"
            );
            if let Some(r) = core.repl.as_ref() {
                r.info(now_ms, t);
            }
        }
        "cluster" => super::cluster::info_section(core, t),
        "hotkeys" => super::cluster::hotkeys_info_section(core, t),
        "cpu" => {
            let _ = write!(
                t,
                "# CPU\r\nused_cpu_sys:{:.6}\r\nused_cpu_user:{:.6}\r\n",
                p.cpu_sys_us as f64 / 1e6,
                p.cpu_user_us as f64 / 1e6
            );
        }
        "commandstats" => {
            t.push_str("# Commandstats\r\n");
            for (name, s) in core.stats.commands.iter() {
                let per = if s.calls > 0 {
                    s.usec as f64 / s.calls as f64
                } else {
                    0.0
                };
                let _ = write!(
                    t,
                    "cmdstat_{name}:calls={},usec={},usec_per_call={per:.2},rejected_calls={},failed_calls={}\r\n",
                    s.calls, s.usec, s.rejected_calls, s.failed_calls
                );
            }
        }
        "errorstats" => {
            t.push_str("# Errorstats\r\n");
            for (code, n) in &core.stats.errors {
                let _ = write!(t, "errorstat_{code}:count={n}\r\n");
            }
        }
        "keyspace" => {
            t.push_str("# Keyspace\r\n");
            if !core.db.is_empty() {
                let _ = write!(
                    t,
                    "db0:keys={},expires={},avg_ttl=0\r\n",
                    core.db.len(),
                    core.db.volatile_len()
                );
            }
        }
        _ => {}
    }
    let _ = now_ms;
}

// ---- COMMAND ----

/// The command's ACL categories (`@read`, `@slow`, ...), as the ACL catalog derives them.
fn acl_categories(core: &Core, spec: &CommandSpec) -> Vec<String> {
    let bits = core
        .acl
        .catalog
        .find(spec.name.as_bytes())
        .map_or(0, |i| core.acl.catalog.entries[i].categories);
    crate::acl::CATEGORIES
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, c)| format!("@{c}"))
        .collect()
}

fn write_command_info(core: &Core, call: &mut Call, spec: &CommandSpec) {
    call.out.array_len(10);
    call.out.bulk(spec.name.as_bytes());
    call.out.integer(spec.arity as i64);
    call.out.set_len(spec.flags.len());
    for f in spec.flags {
        call.out.simple(f.as_bytes());
    }
    call.out.integer(spec.keys.0 as i64);
    call.out.integer(spec.keys.1 as i64);
    call.out.integer(spec.keys.2 as i64);
    let cats = acl_categories(core, spec);
    call.out.set_len(cats.len());
    for c in &cats {
        call.out.simple(c.as_bytes());
    }
    call.out.set_len(0); // tips
    call.out.array_len(0); // key specs
    call.out.array_len(spec.subcommands.len());
    for sub in spec.subcommands {
        write_command_info(core, call, sub);
    }
}

fn command_all(core: &mut Core, call: &mut Call) {
    if call.argc() > 1 {
        // `COMMAND <unknown subcommand>` (known ones were dispatched to their handlers).
        let sub = String::from_utf8_lossy(call.arg(1)).into_owned();
        return call.error(&format!(
            "ERR unknown subcommand '{sub}'. Try COMMAND HELP."
        ));
    }
    let all: Vec<&'static CommandSpec> = core.table.all().to_vec();
    call.out.array_len(all.len());
    for s in all {
        write_command_info(core, call, s);
    }
}

fn command_count(core: &mut Core, call: &mut Call) {
    call.out.integer(core.table.all().len() as i64);
}

fn command_info(core: &mut Core, call: &mut Call) {
    let names = &call.args[2..];
    if names.is_empty() {
        return command_all_info(core, call);
    }
    call.out.array_len(names.len());
    for n in names {
        match lookup_full(core, n) {
            Some(s) => write_command_info(core, call, s),
            None => call.out.null_array(),
        }
    }
}

fn command_all_info(core: &mut Core, call: &mut Call) {
    let all: Vec<&'static CommandSpec> = core.table.all().to_vec();
    call.out.array_len(all.len());
    for s in all {
        write_command_info(core, call, s);
    }
}

/// Finds `get` or `client|setname` style names.
pub(crate) fn lookup_full(core: &Core, name: &[u8]) -> Option<&'static CommandSpec> {
    let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
    match lower.split_once('|') {
        None => core.table.find(lower.as_bytes()),
        Some((parent, sub)) => {
            let p = core.table.find(parent.as_bytes())?;
            crate::command::find_subcommand(p, sub.as_bytes())
        }
    }
}

fn write_docs(call: &mut Call, spec: &CommandSpec) {
    let has_subs = !spec.subcommands.is_empty();
    call.out.map_len(if has_subs { 4 } else { 3 });
    call.out.bulk(b"summary");
    call.out.bulk(spec.summary.as_bytes());
    call.out.bulk(b"since");
    call.out.bulk(spec.since.as_bytes());
    call.out.bulk(b"group");
    call.out.bulk(spec.group.as_bytes());
    if has_subs {
        call.out.bulk(b"subcommands");
        call.out.map_len(spec.subcommands.len());
        for sub in spec.subcommands {
            call.out.bulk(sub.name.as_bytes());
            write_docs(call, sub);
        }
    }
}

fn command_docs(core: &mut Core, call: &mut Call) {
    let specs: Vec<&'static CommandSpec> = if call.argc() == 2 {
        core.table.all().to_vec()
    } else {
        call.args[2..]
            .iter()
            .filter_map(|n| lookup_full(core, n))
            .collect()
    };
    call.out.map_len(specs.len());
    for s in specs {
        call.out.bulk(s.name.as_bytes());
        write_docs(call, s);
    }
}

fn command_list(core: &mut Core, call: &mut Call) {
    let mut pattern: Option<Vec<u8>> = None;
    if call.argc() > 2 {
        if call.argc() == 5 && is(call.arg(2), "filterby") && is(call.arg(3), "pattern") {
            pattern = Some(call.arg(4).to_vec());
        } else if call.argc() == 5 && is(call.arg(2), "filterby") && is(call.arg(3), "module") {
            // No modules exist.
            return call.out.array_len(0);
        } else if call.argc() == 5 && is(call.arg(2), "filterby") && is(call.arg(3), "aclcat") {
            let Some(bit) = crate::acl::category_bit(call.arg(4)) else {
                return call.out.array_len(0);
            };
            let names = core.acl.catalog.names_in(bit);
            call.out.array_len(names.len());
            for n in names {
                call.out.bulk(n.as_bytes());
            }
            return;
        } else {
            return call.syntax_error();
        }
    }
    let mut names: Vec<&'static str> = Vec::new();
    for s in core.table.all() {
        names.push(s.name);
        names.extend(s.subcommands.iter().map(|c| c.name));
    }
    if let Some(p) = &pattern {
        names.retain(|n| lattice_store::glob_match(p, n.as_bytes(), true));
    }
    call.out.array_len(names.len());
    for n in names {
        call.out.bulk(n.as_bytes());
    }
}

fn command_help(_core: &mut Core, call: &mut Call) {
    const LINES: &[&str] = &[
        "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "(no subcommand)",
        "    Return details about all Redis commands.",
        "COUNT",
        "    Return the total number of commands in this Redis server.",
        "LIST",
        "    Return a list of all commands in this Redis server.",
        "INFO [<command-name> ...]",
        "    Return details about multiple Redis commands.",
        "DOCS [<command-name> ...]",
        "    Return documentation details about multiple Redis commands.",
        "GETKEYS <full-command>",
        "    Return the keys from a full Redis command.",
        "GETKEYSANDFLAGS <full-command>",
        "    Return the keys and the access flags from a full Redis command.",
        "HELP",
        "    Print this help.",
    ];
    call.out.array_len(LINES.len());
    for l in LINES {
        call.out.simple(l.as_bytes());
    }
}

// ---- CONFIG ----

fn config_get(core: &mut Core, call: &mut Call) {
    let mut pairs: Vec<(Vec<u8>, String)> = Vec::new();
    for pattern in &call.args[2..] {
        let is_glob = pattern.iter().any(|b| matches!(b, b'*' | b'?' | b'['));
        for (n, v) in core.config.matching(pattern) {
            // A plain name is echoed as the client typed it, as Redis does.
            let name = if is_glob {
                n.as_bytes().to_vec()
            } else {
                pattern.to_vec()
            };
            if !pairs
                .iter()
                .any(|(seen, _)| seen.eq_ignore_ascii_case(n.as_bytes()))
            {
                pairs.push((name, v.to_string()));
            }
        }
    }
    call.out.map_len(pairs.len());
    for (n, v) in pairs {
        call.out.bulk(&n);
        call.out.bulk(v.as_bytes());
    }
}

fn config_set(core: &mut Core, call: &mut Call) {
    if !call.argc().is_multiple_of(2) {
        return call.error("ERR wrong number of arguments for 'config|set' command");
    }
    // All or nothing, as Redis 7: apply to a copy, then swap it in.
    let mut next = core.config.clone();
    let mut seen: Vec<String> = Vec::new();
    for pair in call.args[2..].chunks(2) {
        let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
        if seen.contains(&name) {
            return call.error(&format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - duplicate parameter"
            ));
        }
        let value = String::from_utf8_lossy(&pair[1]).into_owned();
        if let Err(e) = next.set(&name, &value) {
            return call.error(&format!("ERR {e}"));
        }
        seen.push(name);
    }
    let was_appendonly = core.config.appendonly;
    core.config = next;
    core.db.set_access_clock(core.config.access_clock());
    if seen.iter().any(|n| n == "requirepass") {
        let pass = core.config.requirepass.clone().unwrap_or_default();
        core.acl.set_requirepass(pass.as_bytes());
    }
    core.persist_reconfigured(was_appendonly);
    call.ok();
}

impl Core {
    /// A value taken out of the keyspace by a lazy delete: freed by the timer when freeing it
    /// is real work, at once when it is not (Redis's rule, `LAZYFREE_THRESHOLD`).
    pub(crate) fn free_later(&mut self, gone: lattice_store::EntryBox) {
        if crate::ops::free_effort(&gone.value) > crate::ops::LAZYFREE_THRESHOLD {
            self.lazy_free.queue.push_back(gone);
        }
    }
}

fn config_resetstat(core: &mut Core, call: &mut Call) {
    core.stats.reset();
    core.lazy_free.freed = 0;
    call.ok();
}

fn config_help(_core: &mut Core, call: &mut Call) {
    const LINES: &[&str] = &[
        "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET <pattern>",
        "    Return parameters matching the glob-like <pattern> and their values.",
        "SET <directive> <value>",
        "    Set the configuration <directive> to <value>.",
        "RESETSTAT",
        "    Reset statistics reported by the INFO command.",
        "HELP",
        "    Print this help.",
    ];
    call.out.array_len(LINES.len());
    for l in LINES {
        call.out.simple(l.as_bytes());
    }
}

// ---- COMMAND GETKEYS ----

/// The command GETKEYS and GETKEYSANDFLAGS are asked about, and its key positions.
fn keys_of(
    core: &Core,
    cmd_args: &[bytes::Bytes],
) -> Result<(&'static CommandSpec, Vec<usize>), &'static str> {
    let Some(mut spec) = core.table.find(&cmd_args[0]) else {
        return Err("ERR Invalid command specified");
    };
    if !spec.subcommands.is_empty() && cmd_args.len() >= 2 {
        match crate::command::find_subcommand(spec, &cmd_args[1]) {
            Some(sub) => spec = sub,
            None => return Err("ERR Invalid command specified"),
        }
    }
    if !spec.arity_ok(cmd_args.len()) {
        return Err("ERR Invalid number of arguments specified for command");
    }
    match key_positions(spec, cmd_args) {
        Err(e) => Err(e),
        Ok(positions) if positions.is_empty() && !crate::command::no_mandatory_keys(spec.name) => {
            Err("ERR The command has no key arguments")
        }
        Ok(positions) => Ok((spec, positions)),
    }
}

fn command_getkeys(core: &mut Core, call: &mut Call) {
    let cmd_args = &call.args[2..];
    match keys_of(core, cmd_args) {
        Err(e) => call.error(e),
        Ok((_, positions)) => {
            call.out.array_len(positions.len());
            for p in positions {
                call.out.bulk(&cmd_args[p]);
            }
        }
    }
}

/// The flags of keys whose elements a command removes or adds (Redis's `delete` and
/// `insert` key-spec flags), which the read/write view of the ACL check cannot tell from an
/// update: a pop's or a move's source loses elements, a push's target or a move's
/// destination only gains some; SORT reads its source and overwrites its STORE key.
fn element_flags(name: &str, nth: usize) -> Option<&'static [&'static str]> {
    const POPPED: &[&str] = &["RW", "access", "delete"];
    const PUSHED: &[&str] = &["RW", "insert"];
    match (name, nth) {
        ("lmove" | "blmove" | "rpoplpush" | "brpoplpush" | "smove", 0) => Some(POPPED),
        ("lmove" | "blmove" | "rpoplpush" | "brpoplpush" | "smove", _) => Some(PUSHED),
        (
            "lpop" | "rpop" | "blpop" | "brpop" | "lmpop" | "blmpop" | "spop" | "zpopmin"
            | "zpopmax" | "bzpopmin" | "bzpopmax" | "zmpop" | "bzmpop" | "getdel",
            _,
        ) => Some(POPPED),
        ("lpush" | "rpush" | "lpushx" | "rpushx" | "sadd", _) => Some(PUSHED),
        ("sort", 0) => Some(&["RO", "access"]),
        ("sort", _) => Some(&["OW", "update"]),
        _ => None,
    }
}

/// Redis 7.0's reply: each key with its access flags. Lattice has no per-key specs; the
/// flags come from how the ACL check sees the key (`crate::acl::key_use`): read and write is
/// `RW access update`, write only `OW update`, read only `RO access`, and a key only looked
/// at (EXISTS, TTL) `RO`. DEL and UNLINK remove theirs (`RM delete`).
fn command_getkeysandflags(core: &mut Core, call: &mut Call) {
    let cmd_args = &call.args[2..];
    let (spec, positions) = match keys_of(core, cmd_args) {
        Err(e) => return call.error(e),
        Ok(found) => found,
    };
    call.out.array_len(positions.len());
    for (nth, p) in positions.into_iter().enumerate() {
        let usage = crate::cmd::acl::key_use_of(spec, cmd_args, nth);
        let flags: &[&str] = if matches!(spec.name, "del" | "unlink") {
            &["RM", "delete"]
        } else if let Some(f) = element_flags(spec.name, nth) {
            f
        } else {
            match (usage.read, usage.write) {
                (true, true) => &["RW", "access", "update"],
                (false, true) => &["OW", "update"],
                (true, false) => &["RO", "access"],
                (false, false) => &["RO"],
            }
        };
        call.out.array_len(2);
        call.out.bulk(&cmd_args[p]);
        call.out.set_len(flags.len());
        for f in flags {
            call.out.simple(f.as_bytes());
        }
    }
}

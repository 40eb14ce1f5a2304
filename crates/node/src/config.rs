//! Runtime configuration: what CONFIG GET/SET see.
//!
//! Every parameter has a kind that validates CONFIG SET. Parameters that change behaviour are
//! mirrored into typed fields when set. Parameters that Redis has but that mean nothing for
//! Lattice (listpack thresholds, lazyfree switches, ...) are accepted and stored so that tools
//! and Redis's own test suite can set them; `docs/ARCHITECTURE.md` lists which ones act.

use std::collections::BTreeMap;

/// `appendfsync`: when the persistence log is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    Always,
    Everysec,
    No,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Int {
        min: i64,
        max: i64,
    },
    Memory,
    /// A byte count, or a percentage of `maxmemory` (`maxmemory-clients`).
    MemoryOrPercent,
    Bool,
    Enum(&'static [&'static str]),
    Str,
    /// Set at start-up only.
    Immutable,
}

const POLICIES: &[&str] = &[
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "noeviction",
];

/// (name, default, kind). Names are lowercase, as Redis reports them.
const PARAMS: &[(&str, &str, Kind)] = &[
    // The ACL file ACL LOAD and SAVE use (the driver reads and writes it); empty: none.
    ("aclfile", "", Kind::Immutable),
    (
        "acl-pubsub-default",
        "resetchannels",
        Kind::Enum(&["allchannels", "resetchannels"]),
    ),
    (
        "acllog-max-len",
        "128",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    ("activedefrag", "no", Kind::Bool),
    // Milliseconds a script runs before other clients get BUSY (Redis 7's name; the older
    // lua-time-limit is an alias).
    (
        "busy-reply-threshold",
        "5000",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    ("active-expire-effort", "1", Kind::Int { min: 1, max: 10 }),
    (
        "appendfsync",
        "everysec",
        Kind::Enum(&["always", "everysec", "no"]),
    ),
    // On by default (Redis's default is no): a node with a data directory persists.
    ("appendonly", "yes", Kind::Bool),
    (
        "auto-aof-rewrite-percentage",
        "100",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    ("auto-aof-rewrite-min-size", "67108864", Kind::Memory),
    ("bind", "127.0.0.1", Kind::Immutable),
    (
        "client-output-buffer-limit",
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
        Kind::Str,
    ),
    // Largest query buffer a client may hold; the server closes a client whose unparsed
    // input grows past it (Redis's `client-query-buffer-limit`).
    ("client-query-buffer-limit", "1073741824", Kind::Memory),
    ("close-on-replica-write", "yes", Kind::Bool),
    // Lattice always runs in the foreground (a supervisor or container runs it).
    ("daemonize", "no", Kind::Immutable),
    ("databases", "1", Kind::Immutable),
    ("dir", ".", Kind::Immutable),
    (
        "hash-max-listpack-entries",
        "512",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        "hash-max-listpack-value",
        "64",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    ("hll-sparse-max-bytes", "3000", Kind::Memory),
    // Accesses per second (as this node's sketch estimates them) at which a key of a
    // partitioned cluster gets a copy on this node, served locally; 0 turns the tuning off
    // (ARCHITECTURE, "Hot keys").
    (
        "hotkey-threshold",
        "5000",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    ("hz", "10", Kind::Int { min: 1, max: 500 }),
    // Redis's debugging delay per key loaded from an RDB file; hidden from CONFIG GET
    // patterns as in Redis. Accepted and stored: Lattice loads no RDB file.
    (
        "key-load-delay",
        "0",
        Kind::Int {
            min: i64::MIN,
            max: i64::MAX,
        },
    ),
    (
        "latency-monitor-threshold",
        "0",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    // Per-command latency histograms (LATENCY HISTOGRAM), on by default as in Redis 7.
    ("latency-tracking", "yes", Kind::Bool),
    ("lazyfree-lazy-eviction", "no", Kind::Bool),
    ("lazyfree-lazy-expire", "no", Kind::Bool),
    ("lazyfree-lazy-server-del", "no", Kind::Bool),
    ("lazyfree-lazy-user-del", "no", Kind::Bool),
    ("lazyfree-lazy-user-flush", "no", Kind::Bool),
    (
        "lfu-decay-time",
        "1",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        "lfu-log-factor",
        "10",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        "list-compress-depth",
        "0",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        "list-max-listpack-size",
        "-2",
        Kind::Int {
            min: i64::MIN,
            max: i64::MAX,
        },
    ),
    (
        "loglevel",
        "notice",
        Kind::Enum(&["debug", "verbose", "notice", "warning"]),
    ),
    (
        "maxclients",
        "10000",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
    ),
    ("maxmemory", "0", Kind::Memory),
    ("maxmemory-policy", "noeviction", Kind::Enum(POLICIES)),
    // Accepted and stored: Lattice does not evict clients for their memory.
    ("maxmemory-clients", "0", Kind::MemoryOrPercent),
    ("maxmemory-samples", "5", Kind::Int { min: 1, max: 64 }),
    // Writes are refused (NOREPLICAS) while fewer peers than this are linked; 0 never. A
    // Lattice node's replicas are its peers, and a linked peer receives every write within a
    // heartbeat, so the link's liveness stands for Redis's replica lag.
    (
        "min-replicas-to-write",
        "0",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
    ),
    ("notify-keyspace-events", "", Kind::Str),
    ("port", "6379", Kind::Immutable),
    ("proto-max-bulk-len", "536870912", Kind::Memory),
    // Accepted and stored: a node keeps no Redis replication backlog (replicas catch up by
    // anti-entropy, ARCHITECTURE §57).
    ("repl-backlog-size", "1048576", Kind::Memory),
    // Redis's primary of this server: a Lattice node is never a Redis replica (§57), so
    // empty, fixed.
    ("replicaof", "", Kind::Immutable),
    ("requirepass", "", Kind::Str),
    ("save", "", Kind::Str),
    (
        "set-max-intset-entries",
        "512",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        "set-max-listpack-entries",
        "128",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        "slowlog-log-slower-than",
        "10000",
        Kind::Int {
            min: -1,
            max: i64::MAX,
        },
    ),
    (
        "slowlog-max-len",
        "128",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        "stream-node-max-entries",
        "100",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        "timeout",
        "0",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    // TLS (Redis's names and defaults). The server reads them at start-up and builds its
    // listeners and links from them; here they are what CONFIG GET shows. Immutable: new
    // certificates take a restart (ARCHITECTURE, "TLS").
    ("tls-auth-clients", "yes", Kind::Immutable),
    ("tls-ca-cert-file", "", Kind::Immutable),
    ("tls-cert-file", "", Kind::Immutable),
    ("tls-cluster", "no", Kind::Immutable),
    ("tls-key-file", "", Kind::Immutable),
    // The client port served over TLS; 0: none. A client whose connection's local port is
    // this one counts as a TLS client in INFO.
    ("tls-port", "0", Kind::Immutable),
    ("tls-replication", "no", Kind::Immutable),
    // Keys CLIENT TRACKING remembers at most (0: no limit).
    (
        "tracking-table-max-keys",
        "1000000",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        "zset-max-listpack-entries",
        "128",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
    (
        "zset-max-listpack-value",
        "64",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
    ),
];

/// Old names Redis 7.0 still accepts, as (alias, name). Both answer CONFIG GET; setting either
/// sets the one value.
const ALIASES: &[(&str, &str)] = &[
    ("lua-time-limit", "busy-reply-threshold"),
    ("slaveof", "replicaof"),
    ("min-slaves-to-write", "min-replicas-to-write"),
    ("hash-max-ziplist-entries", "hash-max-listpack-entries"),
    ("hash-max-ziplist-value", "hash-max-listpack-value"),
    ("list-max-ziplist-size", "list-max-listpack-size"),
    ("zset-max-ziplist-entries", "zset-max-listpack-entries"),
    ("zset-max-ziplist-value", "zset-max-listpack-value"),
];

/// Parameters a CONFIG GET pattern does not list (asked by their exact name only), as Redis
/// hides its debugging parameters.
const HIDDEN: &[&str] = &["key-load-delay"];

/// The node's configuration. Construct with [`Config::default`] and [`Config::set`].
/// The compact-encoding thresholds (`*-max-listpack-*`, `set-max-intset-entries`). Every write
/// to a hash, set or sorted set and every replicated value materialized reads them, so they
/// are parsed once per configuration change instead of looked up by name per command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodingLimits {
    pub hash_max_entries: usize,
    pub hash_max_value: usize,
    pub set_max_intset_entries: usize,
    pub zset_max_entries: usize,
    pub zset_max_value: usize,
}

impl Default for EncodingLimits {
    /// Redis 7.0's defaults.
    fn default() -> Self {
        EncodingLimits {
            hash_max_entries: 128,
            hash_max_value: 64,
            set_max_intset_entries: 512,
            zset_max_entries: 128,
            zset_max_value: 64,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    values: BTreeMap<&'static str, String>,
    pub encoding: EncodingLimits,
    pub maxclients: u64,
    pub hz: u64,
    /// Milliseconds a script runs before other clients get BUSY (`busy-reply-threshold`).
    pub busy_reply_threshold_ms: u64,
    pub proto_max_bulk_len: u64,
    /// `client-query-buffer-limit`: unparsed input a client may hold (the server closes it).
    pub client_query_buffer_limit: u64,
    /// `lazyfree-lazy-user-del`: DEL frees large values as UNLINK does.
    pub lazyfree_lazy_user_del: bool,
    /// `lazyfree-lazy-user-flush`: FLUSHALL/FLUSHDB without a mode free as with ASYNC.
    pub lazyfree_lazy_user_flush: bool,
    /// Largest sparse HyperLogLog (header included) before PFADD turns it dense.
    pub hll_sparse_max_bytes: u64,
    /// Close clients idle for this long; 0 never.
    pub timeout_s: u64,
    /// `tracking-table-max-keys`: keys CLIENT TRACKING remembers at most (0: no limit).
    pub tracking_table_max_keys: u64,
    pub maxmemory_bytes: u64,
    pub maxmemory_policy: String,
    /// `min-replicas-to-write`: linked peers a write needs (0: none).
    pub min_replicas_to_write: u64,
    /// `lfu-log-factor`: how slowly the LFU counter grows (see `lattice_store::AccessClock`).
    pub lfu_log_factor: u32,
    /// `lfu-decay-time`: minutes per unit the LFU counter loses without access (0: never).
    pub lfu_decay_time_min: u32,
    /// `hotkey-threshold`: accesses per second that make a key hot here; 0 never.
    pub hotkey_threshold: u64,
    /// Keys sampled per eviction (`maxmemory-samples`).
    pub maxmemory_samples: u64,
    /// `slowlog-log-slower-than` (µs; negative: the slow log is off).
    pub slowlog_log_slower_than_us: i64,
    pub slowlog_max_len: u64,
    /// `latency-monitor-threshold` (ms; 0: the latency monitor is off).
    pub latency_monitor_threshold_ms: u64,
    /// `latency-tracking`: per-command latency histograms.
    pub latency_tracking: bool,
    pub requirepass: Option<String>,
    /// `aclfile`: the file ACL LOAD and SAVE read and write; None without one.
    pub aclfile: Option<String>,
    /// `acl-pubsub-default allchannels`: new users may use every channel.
    pub acl_pubsub_all: bool,
    pub acllog_max_len: usize,
    /// `notify-keyspace-events` as event-class bits (see `crate::events`).
    pub notify_keyspace_events: u32,
    /// This replica's identity in the cluster (its links, its place in GC's reports).
    pub node_id: u32,
    /// Which start of this replica this is (0: not tracked, the simulators). A driver that
    /// persists it gives every start a new one; the replica's writes are stamped with
    /// [`Config::dot_node_id`], so a replica restarted without its replicated state starts a
    /// fresh dot sequence instead of reissuing dots its peers saw before the restart (which
    /// they would take as old news, dropping the new writes and the data they replace).
    pub incarnation: u32,
    /// Replicas in the cluster, this one included (1 = standalone: no replication metadata is
    /// kept). Garbage collection of causal metadata waits until this many replicas have
    /// acknowledged, so a configured peer that never connected holds GC back instead of
    /// being silently skipped.
    pub cluster_size: usize,
    /// Keys per anti-entropy slice at most (`repl::SLICE_KEYS` unless set lower): the bound
    /// on one step of a transfer to a lagging or empty replica. The simulator sets it low so
    /// that its small keyspaces still take many slices.
    pub repl_slice_keys: usize,
    /// Owners per hash slot. At or above `cluster_size` every replica holds every key; below
    /// it the cluster is partitioned (ARCHITECTURE, "A partitioned cluster"). The value's
    /// default is "every member" (what the simulator, Maelstrom and the node tests run); the
    /// server applies `--replication-factor` (default [`DEFAULT_REPLICATION_FACTOR`]) after
    /// validating it against the member count.
    pub replication_factor: usize,
    /// Where clients reach this node (`CLUSTER SLOTS`, `CLUSTER NODES`, and the address the
    /// other members learn for it).
    pub announce_host: String,
    pub announce_port: u16,
    /// Where peers dial this node (announced to members that learn of it by gossip; 0: not
    /// announced, the static clusters whose members dial their `--seeds`).
    pub cluster_port: u16,
    /// This node joins a running cluster (`--join`): it knows no member count, learns the
    /// members from the one it reaches, and holds no slots until they are streamed to it.
    pub join: bool,
    pub appendonly: bool,
    pub appendfsync: Fsync,
    pub auto_aof_rewrite_percentage: u64,
    pub auto_aof_rewrite_min_size: u64,
    /// `s3-durability sync`: a write is acknowledged only once the object store holds it (the
    /// driver reports `Persisted` for records both synced and uploaded), so every record is
    /// synced at once, as under `appendfsync always`. A start-up setting of the driver's.
    pub ack_after_upload: bool,
}

impl Default for Config {
    fn default() -> Self {
        let mut c = Config {
            values: PARAMS.iter().map(|(n, d, _)| (*n, d.to_string())).collect(),
            encoding: EncodingLimits::default(),
            maxclients: 0,
            hz: 0,
            busy_reply_threshold_ms: 0,
            proto_max_bulk_len: 0,
            client_query_buffer_limit: 0,
            lazyfree_lazy_user_del: false,
            lazyfree_lazy_user_flush: false,
            hll_sparse_max_bytes: 0,
            timeout_s: 0,
            tracking_table_max_keys: 0,
            maxmemory_bytes: 0,
            maxmemory_policy: String::new(),
            min_replicas_to_write: 0,
            lfu_log_factor: 0,
            lfu_decay_time_min: 0,
            hotkey_threshold: 0,
            maxmemory_samples: 5,
            slowlog_log_slower_than_us: 0,
            slowlog_max_len: 0,
            latency_monitor_threshold_ms: 0,
            latency_tracking: true,
            requirepass: None,
            aclfile: None,
            acl_pubsub_all: false,
            acllog_max_len: 128,
            notify_keyspace_events: 0,
            node_id: 1,
            incarnation: 0,
            cluster_size: 1,
            repl_slice_keys: REPL_SLICE_KEYS,
            replication_factor: usize::MAX,
            announce_host: "127.0.0.1".to_string(),
            announce_port: 6379,
            cluster_port: 0,
            join: false,
            appendonly: true,
            appendfsync: Fsync::Everysec,
            auto_aof_rewrite_percentage: 100,
            auto_aof_rewrite_min_size: 0,
            ack_after_upload: false,
        };
        c.refresh();
        c
    }
}

/// Owners per slot when the server's `--replication-factor` is not given.
pub const DEFAULT_REPLICATION_FACTOR: usize = 3;

/// Keys in one anti-entropy slice at most (`crate::repl::SLICE_KEYS`, defined here so the
/// configuration's default does not import the replicator): with small states the per-key
/// merge cost is what bounds a step.
pub const REPL_SLICE_KEYS: usize = 512;

/// Node ids below this fit beside an incarnation in a dot's 32-bit node field.
pub const MAX_NODE_ID_WITH_INCARNATION: u32 = 1 << INCARNATION_SHIFT;
const INCARNATION_SHIFT: u32 = 12;
/// Incarnations are numbered 1..MAX_INCARNATION (wrapping).
pub const MAX_INCARNATION: u32 = (1 << (32 - INCARNATION_SHIFT)) - 1;

impl Config {
    /// The id this replica's writes are stamped with: `node_id` alone without an incarnation,
    /// else the incarnation in the high 20 bits and `node_id` (below 4096) in the low 12.
    pub fn dot_node_id(&self) -> u32 {
        if self.incarnation == 0 {
            return self.node_id;
        }
        debug_assert!(self.node_id < MAX_NODE_ID_WITH_INCARNATION);
        (self.incarnation << INCARNATION_SHIFT) | self.node_id
    }

    /// Sets a parameter at start-up (immutable ones included), validating it.
    pub fn set_initial(&mut self, name: &str, value: &str) -> Result<(), String> {
        self.set_inner(name, value, true)
    }

    /// CONFIG SET of one parameter.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        self.set_inner(name, value, false)
    }

    fn set_inner(&mut self, name: &str, value: &str, initial: bool) -> Result<(), String> {
        let mut lower = name.to_ascii_lowercase();
        if let Some((_, canonical)) = ALIASES.iter().find(|(alias, _)| *alias == lower) {
            lower = canonical.to_string();
        }
        let Some((pname, _, kind)) = PARAMS.iter().find(|(n, _, _)| *n == lower) else {
            return Err(format!(
                "Unknown option or number of arguments for CONFIG SET - '{name}'"
            ));
        };
        let normalized = match *kind {
            // Setting a start-up parameter to the value it has changes nothing and is no
            // error (tools that read CONFIG GET * and set each value back, as Redis's own
            // introspection suite does, meet the TLS keys too).
            Kind::Immutable if !initial && self.values.get(pname).map(String::as_str) == Some(value) => {
                return Ok(())
            }
            Kind::Immutable if !initial => {
                return Err(format!(
                    "CONFIG SET failed (possibly related to argument '{pname}') - can't set immutable config"
                ))
            }
            Kind::Str if lower == "notify-keyspace-events" => {
                match crate::events::parse_event_classes(value) {
                    Some(flags) => crate::events::event_classes_to_string(flags),
                    None => return Err(format!(
                        "CONFIG SET failed (possibly related to argument '{pname}') - Invalid event class character. Use 'Ag$lshzxeKEtmd'."
                    )),
                }
            }
            Kind::Immutable | Kind::Str => value.to_string(),
            Kind::Int { min, max } => match value.parse::<i64>() {
                Ok(v) if v >= min && v <= max => v.to_string(),
                Ok(_) => {
                    return Err(format!(
                        "CONFIG SET failed (possibly related to argument '{pname}') - argument must be between {min} and {max} inclusive"
                    ))
                }
                Err(_) => {
                    return Err(format!(
                        "CONFIG SET failed (possibly related to argument '{pname}') - argument couldn't be parsed into an integer"
                    ))
                }
            },
            Kind::Memory => match parse_memory(value) {
                Some(v) => v.to_string(),
                None => {
                    return Err(format!(
                        "CONFIG SET failed (possibly related to argument '{pname}') - argument must be a memory value"
                    ))
                }
            },
            Kind::MemoryOrPercent => {
                let parsed = match value.strip_suffix('%') {
                    Some(pct) => pct.parse::<u64>().ok().map(|p| (p, true)),
                    None => parse_memory(value).map(|b| (b, false)),
                };
                match parsed {
                    Some((p, true)) if p > 100 => {
                        return Err(format!(
                            "CONFIG SET failed (possibly related to argument '{pname}') - percentage argument must be less or equal to 100"
                        ))
                    }
                    Some((p, true)) => format!("{p}%"),
                    Some((b, false)) => b.to_string(),
                    None => {
                        return Err(format!(
                            "CONFIG SET failed (possibly related to argument '{pname}') - argument must be a memory or percent value"
                        ))
                    }
                }
            }
            Kind::Bool => match value.to_ascii_lowercase().as_str() {
                "yes" => "yes".to_string(),
                "no" => "no".to_string(),
                _ => {
                    return Err(format!(
                        "CONFIG SET failed (possibly related to argument '{pname}') - argument must be 'yes' or 'no'"
                    ))
                }
            },
            Kind::Enum(options) => {
                let v = value.to_ascii_lowercase();
                if options.contains(&v.as_str()) {
                    v
                } else {
                    return Err(format!(
                        "CONFIG SET failed (possibly related to argument '{pname}') - argument(s) must be one of the following: {}",
                        options.join(", ")
                    ));
                }
            }
        };
        self.values.insert(pname, normalized);
        self.refresh();
        Ok(())
    }

    /// Parameters whose name matches the glob `pattern`, in name order.
    pub fn matching(&self, pattern: &[u8]) -> Vec<(&'static str, &str)> {
        let names = self
            .values
            .keys()
            .copied()
            .chain(ALIASES.iter().map(|(alias, _)| *alias));
        let is_glob = pattern.iter().any(|b| matches!(b, b'*' | b'?' | b'['));
        let mut found: Vec<(&'static str, &str)> = names
            .filter(|n| !(is_glob && HIDDEN.contains(n)))
            .filter(|n| lattice_store::glob_match(pattern, n.as_bytes(), true))
            .filter_map(|n| Some((n, self.get(n)?)))
            .collect();
        found.sort();
        found
    }

    /// A parameter's value, by its name or an alias.
    pub fn get(&self, name: &str) -> Option<&str> {
        let name = ALIASES
            .iter()
            .find(|(alias, _)| *alias == name)
            .map_or(name, |(_, canonical)| canonical);
        self.values.get(name).map(|s| s.as_str())
    }

    /// How the store keeps access words under this `maxmemory-policy`: Redis's LFU data under
    /// an LFU policy, else the last access time.
    pub fn access_clock(&self) -> lattice_store::AccessClock {
        if self.maxmemory_policy.ends_with("lfu") {
            lattice_store::AccessClock::Lfu {
                log_factor: self.lfu_log_factor,
                decay_min: self.lfu_decay_time_min,
            }
        } else {
            lattice_store::AccessClock::Lru
        }
    }

    fn refresh(&mut self) {
        let int = |c: &Config, n: &str| c.values[n].parse::<i64>().unwrap_or(0).max(0) as u64;
        self.maxclients = int(self, "maxclients");
        self.hz = int(self, "hz").max(1);
        self.busy_reply_threshold_ms = int(self, "busy-reply-threshold");
        self.proto_max_bulk_len = int(self, "proto-max-bulk-len");
        self.client_query_buffer_limit = int(self, "client-query-buffer-limit");
        self.lazyfree_lazy_user_del = self.values["lazyfree-lazy-user-del"] == "yes";
        self.lazyfree_lazy_user_flush = self.values["lazyfree-lazy-user-flush"] == "yes";
        self.hll_sparse_max_bytes = int(self, "hll-sparse-max-bytes");
        self.timeout_s = int(self, "timeout");
        self.tracking_table_max_keys = int(self, "tracking-table-max-keys");
        self.maxmemory_bytes = int(self, "maxmemory");
        self.maxmemory_policy = self.values["maxmemory-policy"].clone();
        self.min_replicas_to_write = int(self, "min-replicas-to-write");
        self.lfu_log_factor = int(self, "lfu-log-factor") as u32;
        self.lfu_decay_time_min = int(self, "lfu-decay-time") as u32;
        self.hotkey_threshold = int(self, "hotkey-threshold");
        self.maxmemory_samples = int(self, "maxmemory-samples");
        self.slowlog_log_slower_than_us =
            self.values["slowlog-log-slower-than"].parse().unwrap_or(-1);
        self.slowlog_max_len = int(self, "slowlog-max-len");
        self.latency_monitor_threshold_ms = int(self, "latency-monitor-threshold");
        self.latency_tracking = self.values["latency-tracking"] == "yes";
        self.appendonly = self.values["appendonly"] == "yes";
        self.appendfsync = match self.values["appendfsync"].as_str() {
            "always" => Fsync::Always,
            "no" => Fsync::No,
            _ => Fsync::Everysec,
        };
        self.auto_aof_rewrite_percentage = int(self, "auto-aof-rewrite-percentage");
        self.auto_aof_rewrite_min_size = int(self, "auto-aof-rewrite-min-size");
        self.notify_keyspace_events =
            crate::events::parse_event_classes(&self.values["notify-keyspace-events"]).unwrap_or(0);
        let pass = &self.values["requirepass"];
        self.requirepass = (!pass.is_empty()).then(|| pass.clone());
        let aclfile = &self.values["aclfile"];
        self.aclfile = (!aclfile.is_empty()).then(|| aclfile.clone());
        self.acl_pubsub_all = self.values["acl-pubsub-default"] == "allchannels";
        self.acllog_max_len = int(self, "acllog-max-len").min(usize::MAX as u64) as usize;
        let size = |c: &Config, n: &str, default: usize| {
            c.values[n]
                .parse::<u64>()
                .map_or(default, |v| v.min(usize::MAX as u64) as usize)
        };
        let d = EncodingLimits::default();
        self.encoding = EncodingLimits {
            hash_max_entries: size(self, "hash-max-listpack-entries", d.hash_max_entries),
            hash_max_value: size(self, "hash-max-listpack-value", d.hash_max_value),
            set_max_intset_entries: size(self, "set-max-intset-entries", d.set_max_intset_entries),
            zset_max_entries: size(self, "zset-max-listpack-entries", d.zset_max_entries),
            zset_max_value: size(self, "zset-max-listpack-value", d.zset_max_value),
        };
    }
}

/// Parses `100`, `1k`, `1kb`, `2mb`, `3gb` (k = 1000, kb = 1024, as in redis.conf).
pub fn parse_memory(value: &str) -> Option<u64> {
    let v = value.to_ascii_lowercase();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (digits, unit) = v.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let mult = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    n.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_validates_and_mirrors() {
        let mut c = Config::default();
        assert_eq!(c.hz, 10);
        c.set("HZ", "100").unwrap();
        assert_eq!(c.hz, 100);
        assert!(c.set("hz", "0").is_err());
        assert!(c.set("hz", "x").is_err());
        assert!(c.set("nope", "1").is_err());
        assert!(c.set("port", "1").is_err());
        assert!(c.set("port", "6379").is_ok(), "the value it has");
        assert!(c.set("tls-auth-clients", "yes").is_ok());
        assert!(c.set("tls-auth-clients", "no").is_err());
        c.set("maxmemory", "2mb").unwrap();
        assert_eq!(c.maxmemory_bytes, 2 * 1024 * 1024);
        c.set("appendonly", "YES").unwrap();
        assert_eq!(c.get("appendonly"), Some("yes"));
        assert_eq!(
            c.matching(b"max*").len(),
            5,
            "maxclients, maxmemory and its -clients, -policy, -samples"
        );
        c.set("zset-max-ziplist-entries", "7").unwrap();
        assert_eq!(c.get("zset-max-listpack-entries"), Some("7"));
        assert_eq!(c.matching(b"zset-max-*-entries").len(), 2);
        assert_eq!(c.busy_reply_threshold_ms, 5000);
        c.set("lua-time-limit", "10").unwrap();
        assert_eq!(c.busy_reply_threshold_ms, 10);
        assert_eq!(c.get("busy-reply-threshold"), Some("10"));
        assert_eq!(c.get("lua-time-limit"), Some("10"));
        assert!(c.set("busy-reply-threshold", "-1").is_err());
    }
}

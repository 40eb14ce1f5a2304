//! The command context: everything a command handler may read or change, and the key services
//! handlers reach the keyspace through (`keys`), their output to other connections (`output`)
//! and keyspace notifications (`notify`).
//!
//! Handlers receive a `&mut Core`; they never see the node that owns it (`crate::node`), which
//! is only the sans-IO shell around this state. The dispatch policy (`crate::dispatch`) and
//! the persistence and replication hooks work on the same `Core`.

mod invariants;
mod keys;
pub(crate) mod maxmemory;
mod notify;
mod output;
mod tracking;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use lattice_crdt::NodeId;
use lattice_store::Db;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::blocking::BlockRequest;
use crate::buggify::Buggify;
use crate::client::{ClientTable, ConnId};
use crate::cmd::script::engine::Scripts;
use crate::command::CommandTable;
use crate::config::Config;
use crate::io::ProcessStats;
use crate::persist::state::Persist;
use crate::repl::Replicator;
use crate::stats::Stats;
use crate::time::Micros;

/// The node's command table entry: [`crate::command::CommandSpec`] over this context.
pub type CommandSpec = crate::command::CommandSpec<Core>;

/// Everything commands may touch. Split from the node so a handler can borrow it mutably while
/// the connection's output buffer is borrowed by the call. Its fields are the crate's own:
/// drivers see the node's narrow accessors instead.
pub struct Core {
    pub(crate) db: Db,
    pub(crate) config: Config,
    pub(crate) stats: Stats,
    pub(crate) clients: ClientTable,
    pub(crate) rng: ChaCha8Rng,
    pub(crate) buggify: Buggify,
    pub(crate) process: ProcessStats,
    /// Every command, for dispatch, scripts, recovery and COMMAND.
    pub(crate) table: CommandTable<Core>,
    /// When the node started (ms), for INFO uptime.
    pub(crate) start_ms: u64,
    /// The latest time the node was given.
    pub(crate) now: Micros,
    /// 40 hex characters, drawn from the node's seed (INFO run_id).
    pub(crate) run_id: String,
    /// Pub/sub: channel or pattern -> subscribers, in connection order.
    pub(crate) channels: BTreeMap<Bytes, BTreeSet<ConnId>>,
    pub(crate) patterns: BTreeMap<Bytes, BTreeSet<ConnId>>,
    /// Sharded pub/sub: shard channel -> subscribers (`crate::cmd::shard_pubsub`).
    pub(crate) shard_channels: BTreeMap<Bytes, BTreeSet<ConnId>>,
    /// WATCHed key -> watching clients.
    pub(crate) watched_keys: BTreeMap<Bytes, BTreeSet<ConnId>>,
    /// Key -> clients parked on it, first come first served.
    pub(crate) blocked_on: BTreeMap<Bytes, VecDeque<ConnId>>,
    pub(crate) block_deadlines: BTreeSet<(u64, ConnId)>,
    /// Keys changed since parked clients were last offered them.
    pub(crate) ready_keys: Vec<Bytes>,
    pub(crate) block_request: Option<BlockRequest>,
    /// Clients released from blocking by a command (CLIENT UNBLOCK) whose pipelined requests
    /// must now run.
    pub(crate) released: Vec<ConnId>,
    /// Connections with output or a close pending, in the order they became pending.
    pub(crate) pending: VecDeque<ConnId>,
    /// Replication state; None for a standalone node (cluster_size 1), which then keeps no
    /// CRDT metadata at all.
    pub(crate) repl: Option<Box<Replicator>>,
    /// A partitioned cluster's members, placement and forwarded commands; None when every
    /// replica holds every key (standalone, or replication factor = member count).
    pub(crate) cluster: Option<Box<crate::cluster::Cluster>>,
    /// Member links for the driver to dial (`Output::PeerDial`); at most one per member
    /// learned, so bounded by the member list.
    pub(crate) dials: std::collections::VecDeque<(NodeId, String)>,
    /// Set by dispatch when the request must run on an owner of this slot instead.
    pub(crate) forward_request: Option<u16>,
    /// The Lua interpreter and script cache (EVAL, SCRIPT).
    pub(crate) scripts: Scripts,
    /// Persistence: records, syncs, held replies, snapshots (`crate::persist`).
    pub(crate) persist: Persist,
    /// SLOWLOG's entries (`crate::cmd::slowlog`).
    pub(crate) slowlog: crate::ops::SlowLog,
    /// The command a client's request ran (set when its handler runs, not for a request
    /// refused or queued in MULTI), for the slow log's timing.
    pub(crate) ran: Option<&'static str>,
    /// The request being timed for the slow log and the latency monitor.
    pub(crate) timing: crate::ops::Timing,
    /// Clients parked in WAIT: the count of this node's writes they wait for and how many
    /// peers must have them (`crate::cmd::role`).
    pub(crate) waits: BTreeMap<ConnId, crate::ops::Wait>,
    /// The process's first and largest memory figures (MEMORY STATS).
    pub(crate) memory: crate::ops::MemoryHistory,
    /// CLIENT PAUSE: the pause in effect and the clients it holds (`crate::cmd::pause`).
    pub(crate) pausing: crate::ops::Pausing,
    /// Connections in MONITOR mode (`crate::cmd::monitor`).
    pub(crate) monitors: BTreeSet<ConnId>,
    /// LATENCY's events (`crate::cmd::latency`).
    pub(crate) latency: crate::ops::LatencyMonitor,
    /// Key accesses by this node's clients, sampled and decayed: OBJECT FREQ, INFO
    /// `Hotkeys`, and which keys a partitioned node asks copies of (`crate::node::hot`).
    pub(crate) hot_keys: lattice_placement::HotKeys,
    /// CLIENT TRACKING's tables (`crate::ctx::tracking`).
    pub(crate) tracking: crate::tracking::Tracking,
    /// maxmemory's figures (`crate::ctx::maxmemory`).
    pub(crate) eviction: crate::eviction::Eviction,
    /// Users and their permissions, the ACL log, ACL file requests (`crate::acl`).
    pub(crate) acl: crate::acl::Acl,
    /// Values taken out of the keyspace, freed by the timer (`crate::ops::LazyFree`).
    pub(crate) lazy_free: crate::ops::LazyFree,
    /// A parked client's request is being retried: it was counted in its command's calls
    /// when it first ran, as Redis counts a blocked command once.
    pub(crate) retrying_parked: bool,
}

/// The ACL's view of the command table: every command and subcommand with what its
/// categories derive from.
fn acl_catalog(table: &CommandTable<Core>) -> crate::acl::Catalog {
    use crate::command::Flag;
    // A container's categories are only those its (absent) flags imply, as in Redis: its
    // group's category belongs to its subcommands.
    let facts = |s: &CommandSpec| crate::acl::CommandFacts {
        name: s.name,
        group: if s.subcommands.is_empty() {
            s.group
        } else {
            ""
        },
        write: s.has(Flag::Write),
        readonly: s.has(Flag::ReadOnly),
        admin: s.has(Flag::Admin),
        pubsub: s.has(Flag::PubSub),
        fast: s.has(Flag::Fast),
        blocking: s.has(Flag::Blocking),
        no_auth: s.has(Flag::NoAuth),
    };
    crate::acl::Catalog::new(
        table
            .all()
            .iter()
            .map(|s| (facts(s), s.subcommands.iter().map(facts).collect()))
            .collect(),
    )
}

impl Core {
    /// The context of a node with `config` and the command `table`, drawing all its
    /// randomness from `seed`, started at `now`.
    pub(crate) fn new(
        config: Config,
        table: CommandTable<Core>,
        seed: u64,
        buggify: Buggify,
        now: Micros,
    ) -> Core {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let run_id = (0..20)
            .map(|_| format!("{:02x}", rng.next_u64() as u8))
            .collect();
        let now_ms = now.as_millis();
        let repl = (config.cluster_size > 1).then(|| {
            Box::new(
                Replicator::new(
                    NodeId(config.node_id),
                    NodeId(config.dot_node_id()),
                    config.cluster_size,
                    now_ms,
                )
                .with_slice_keys(config.repl_slice_keys),
            )
        });
        let cluster = crate::cluster::Cluster::new(
            config.node_id,
            config.cluster_size,
            config.replication_factor,
            config.announce_host.clone(),
            config.announce_port,
            config.cluster_port,
            config.join,
        )
        .map(|mut c| {
            // Differs between two processes of one node: they start at different times, or
            // (a restart within a microsecond, in a simulation) from different seeds.
            c.origin = now.0 ^ seed.rotate_left(32);
            Box::new(c)
        });
        let mut acl = crate::acl::Acl::new(acl_catalog(&table));
        if let Some(pass) = config.requirepass.as_deref() {
            acl.set_requirepass(pass.as_bytes());
        }
        let mut db = Db::new();
        db.set_access_clock(config.access_clock());
        Core {
            db,
            config,
            stats: Stats::default(),
            clients: ClientTable::default(),
            rng,
            buggify,
            process: ProcessStats::default(),
            table,
            start_ms: now_ms,
            now,
            run_id,
            channels: BTreeMap::new(),
            patterns: BTreeMap::new(),
            shard_channels: BTreeMap::new(),
            watched_keys: BTreeMap::new(),
            blocked_on: BTreeMap::new(),
            block_deadlines: BTreeSet::new(),
            ready_keys: Vec::new(),
            block_request: None,
            released: Vec::new(),
            pending: VecDeque::new(),
            repl,
            cluster,
            dials: std::collections::VecDeque::new(),
            forward_request: None,
            hot_keys: lattice_placement::HotKeys::new(
                lattice_placement::hotkeys::HotKeyConfig::default(),
                now_ms,
            ),
            scripts: Scripts::new(),
            persist: Persist::default(),
            slowlog: Default::default(),
            ran: None,
            lazy_free: crate::ops::LazyFree::default(),
            retrying_parked: false,
            timing: Default::default(),
            latency: Default::default(),
            waits: BTreeMap::new(),
            memory: Default::default(),
            pausing: Default::default(),
            monitors: BTreeSet::new(),
            tracking: Default::default(),
            eviction: Default::default(),
            acl,
        }
    }

    pub fn random_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// Milliseconds since the node started.
    pub fn uptime_ms(&self) -> u64 {
        self.now.as_millis().saturating_sub(self.start_ms)
    }
}

//! The command table and the context a command runs in.
//!
//! Every command is a [`CommandSpec`] in one of the `cmd` family modules: name, Redis arity,
//! flags, key positions and a handler. Dispatch, arity errors, COMMAND COUNT/INFO/DOCS/LIST and
//! INFO commandstats are all derived from these tables, so a command exists in exactly one place.

use bytes::Bytes;
use lattice_resp::ReplyWriter;

use crate::client::ConnId;
use crate::time::Micros;

/// The reply to a `no-multi` command (SAVE, SHUTDOWN, ...) sent while queueing a transaction.
pub const NOT_IN_MULTI: &str = "ERR Command not allowed inside a transaction";

/// Runs one command: reads `call.args`, changes the context `C` (the node's `crate::ctx::Core`),
/// writes the reply into `call.out`. The table is generic over the context so that this
/// module, which the context itself uses, does not depend on it.
pub type Handler<C> = fn(&mut C, &mut Call);

pub struct CommandSpec<C: 'static> {
    /// Lowercase full name: `get`, or `client|setname` for a subcommand.
    pub name: &'static str,
    /// Redis arity: `n` exactly n arguments (the name included), `-n` at least n.
    pub arity: i32,
    /// Redis's flags, as COMMAND INFO shows them.
    pub flags: &'static [&'static str],
    /// The same flags as bits ([`Flag`]), plus Lattice's own dispatch rules; what the
    /// dispatcher, scripts and COMMAND DOCS test. Built from `flags` by [`flag_bits`].
    pub bits: u32,
    /// Key positions as Redis's legacy (first, last, step) triple; (0, 0, 0) for no keys.
    pub keys: (i32, i32, i32),
    /// Redis's command group (`string`, `generic`, `server`, `connection`, ...).
    pub group: &'static str,
    pub summary: &'static str,
    pub since: &'static str,
    /// `None` for a container whose work is done by its subcommands.
    pub handler: Option<Handler<C>>,
    pub subcommands: &'static [CommandSpec<C>],
}

impl<C> std::fmt::Debug for CommandSpec<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl<C> CommandSpec<C> {
    /// The name as a client types it (`setname` for `client|setname`).
    pub fn short_name(&self) -> &'static str {
        match self.name.split_once('|') {
            Some((_, sub)) => sub,
            None => self.name,
        }
    }

    pub fn arity_ok(&self, argc: usize) -> bool {
        if self.arity >= 0 {
            argc == self.arity as usize
        } else {
            argc >= (-self.arity) as usize
        }
    }

    pub fn is_write(&self) -> bool {
        self.has(Flag::Write)
    }

    pub fn has(&self, flag: Flag) -> bool {
        self.bits & flag as u32 != 0
    }

    /// The same entry with one of Lattice's own rules added (a rule Redis applies by command
    /// name rather than by flag).
    pub const fn with(mut self, rule: Flag) -> CommandSpec<C> {
        self.bits |= rule as u32;
        self
    }
}

/// A command's properties as the code asks about them. The first group are Redis's flags
/// (named as in COMMAND INFO); the last are rules Redis decides by command name, kept here so
/// that no list of names elsewhere has to stay in step with the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Flag {
    Write = 1 << 0,
    ReadOnly = 1 << 1,
    DenyOom = 1 << 2,
    Admin = 1 << 3,
    PubSub = 1 << 4,
    NoScript = 1 << 5,
    Blocking = 1 << 6,
    Loading = 1 << 7,
    Stale = 1 << 8,
    Fast = 1 << 9,
    NoAuth = 1 << 10,
    MayReplicate = 1 << 11,
    NoMulti = 1 << 12,
    AllowBusy = 1 << 13,
    /// Its effect on a large value is logged as the command itself rather than the value's
    /// new state (`crate::persist`): it changes only its first key, the same way whenever it
    /// runs on the same value (no time, no randomness, no other key).
    LoggedAsCommand = 1 << 26,
    /// It raises or rewrites a HyperLogLog's registers (PFADD, PFMERGE) or re-encodes one
    /// without changing them (PFCOUNT's cached count, PFDEBUG's dense conversion): merged
    /// register by register (replication's `Intent::Registers`).
    RaisesRegisters = 1 << 25,
    /// Its numeric change is an increment, merged by adding (replication's `Intent`).
    Increments = 1 << 27,
    /// An increment when given the INCR option (ZADD).
    IncrementsWithIncrOption = 1 << 28,
    /// Changes only a key's deadline, never its value (EXPIRE, PERSIST, GETEX): no new
    /// last-writer-wins stamp for the value.
    KeepsValue = 1 << 29,
    /// Runs at once inside MULTI instead of being queued (EXEC, DISCARD, MULTI, WATCH, QUIT,
    /// RESET).
    RunsInsideMulti = 1 << 30,
    /// A RESP2 client may send it while subscribed ((P)SUBSCRIBE, (P)UNSUBSCRIBE, PING, QUIT,
    /// RESET).
    AllowedWhileSubscribed = 1 << 31,
}

/// Redis flag names and their bits; a name not listed carries no bit (it is only shown).
const FLAG_NAMES: &[(&str, Flag)] = &[
    ("write", Flag::Write),
    ("readonly", Flag::ReadOnly),
    ("denyoom", Flag::DenyOom),
    ("admin", Flag::Admin),
    ("pubsub", Flag::PubSub),
    ("noscript", Flag::NoScript),
    ("blocking", Flag::Blocking),
    ("loading", Flag::Loading),
    ("stale", Flag::Stale),
    ("fast", Flag::Fast),
    ("no-auth", Flag::NoAuth),
    ("may-replicate", Flag::MayReplicate),
    ("no-multi", Flag::NoMulti),
    ("allow-busy", Flag::AllowBusy),
];

/// The bits of a list of Redis flag names (evaluated when the tables are compiled).
pub const fn flag_bits(flags: &[&str]) -> u32 {
    let mut bits = 0;
    let mut i = 0;
    while i < flags.len() {
        let mut j = 0;
        while j < FLAG_NAMES.len() {
            if const_str_eq(flags[i], FLAG_NAMES[j].0) {
                bits |= FLAG_NAMES[j].1 as u32;
            }
            j += 1;
        }
        i += 1;
    }
    bits
}

const fn const_str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Shorthand for a table entry with no subcommands.
#[allow(clippy::too_many_arguments)]
pub const fn spec<C>(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    group: &'static str,
    since: &'static str,
    summary: &'static str,
    handler: Handler<C>,
) -> CommandSpec<C> {
    CommandSpec {
        name,
        arity,
        flags,
        bits: flag_bits(flags),
        keys,
        group,
        summary,
        since,
        handler: Some(handler),
        subcommands: &[],
    }
}

/// A container command (CONFIG, CLIENT, XGROUP, ...): no flags, no keys, no handler of its
/// own; a request names one of its `subcommands`.
pub const fn container<C>(
    name: &'static str,
    arity: i32,
    group: &'static str,
    since: &'static str,
    summary: &'static str,
    subcommands: &'static [CommandSpec<C>],
) -> CommandSpec<C> {
    CommandSpec {
        name,
        arity,
        flags: &[],
        bits: 0,
        keys: (0, 0, 0),
        group,
        summary,
        since,
        handler: None,
        subcommands,
    }
}

/// One command being executed.
pub struct Call<'a> {
    pub conn: ConnId,
    /// The arguments, the command name first.
    pub args: &'a [Bytes],
    pub now: Micros,
    /// `now` in milliseconds, the unit of expiry.
    pub now_ms: u64,
    pub out: ReplyWriter<'a>,
    /// First word of the first error replied (for INFO errorstats), if any.
    pub(crate) error_code: Option<String>,
    /// The error reply was counted in the error statistics already (a script passing on the
    /// error of a command it ran): it still makes this call a failed one.
    error_counted: bool,
    /// Running inside EXEC: blocking commands must not block.
    pub in_exec: bool,
    /// Called by a script (`redis.call`): client-side caching remembers the script's declared
    /// keys, not those of the commands it calls.
    pub in_script: bool,
}

impl<'a> Call<'a> {
    pub fn new(conn: ConnId, args: &'a [Bytes], now: Micros, out: ReplyWriter<'a>) -> Call<'a> {
        Call {
            conn,
            args,
            now,
            now_ms: now.as_millis(),
            out,
            error_code: None,
            error_counted: false,
            in_exec: false,
            in_script: false,
        }
    }

    pub fn arg(&self, i: usize) -> &'a [u8] {
        &self.args[i]
    }

    pub fn argc(&self) -> usize {
        self.args.len()
    }

    /// Replies with an error. `message` includes its code: `ERR ...`, `WRONGTYPE ...`.
    pub fn error(&mut self, message: &str) {
        if self.error_code.is_none() {
            let code = message.split(' ').next().unwrap_or("ERR");
            self.error_code = Some(code.to_string());
        }
        self.out.error(message.as_bytes());
    }

    /// Like [`Call::error`] for a message holding arbitrary bytes (echoed user input).
    pub fn error_bytes(&mut self, message: &[u8]) {
        if self.error_code.is_none() {
            self.error_code = Some(error_code(message));
        }
        self.out.error(message);
    }

    /// An error reply the error statistics counted already (see `error_counted`).
    pub(crate) fn error_counted(&mut self, message: &[u8]) {
        if self.error_code.is_none() {
            self.error_counted = true;
        }
        self.error_bytes(message);
    }

    /// The code of this call's error reply for the error statistics, once, unless they
    /// counted it already.
    pub(crate) fn take_error_for_stats(&mut self) -> Option<String> {
        let code = self.error_code.take();
        code.filter(|_| !self.error_counted)
    }

    pub fn wrong_type(&mut self) {
        self.error(crate::args::WRONGTYPE);
    }

    pub fn syntax_error(&mut self) {
        self.error(crate::args::SYNTAX);
    }

    pub fn ok(&mut self) {
        self.out.ok();
    }

    /// Redis's reply to a known subcommand given arguments it does not take (the container's
    /// name in capitals, the subcommand as the client typed it).
    pub fn subcommand_syntax_error(&mut self) {
        let sub = String::from_utf8_lossy(&self.args[1][..self.args[1].len().min(128)]);
        let container = String::from_utf8_lossy(&self.args[0]).to_ascii_uppercase();
        let message = format!(
            "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try {container} HELP."
        );
        self.error(&message);
    }

    /// Replies with help text, a simple string per line (the HELP subcommands).
    pub fn help(&mut self, lines: &[&str]) {
        self.out.array_len(lines.len());
        for l in lines {
            self.out.simple(l.as_bytes());
        }
    }

    /// Whether this call replied with an error.
    pub fn failed(&self) -> bool {
        self.error_code.is_some()
    }
}

/// The code of an error reply (its first word: `ERR`, `WRONGTYPE`, ...), as error statistics
/// count it.
pub fn error_code(message: &[u8]) -> String {
    let end = message
        .iter()
        .position(|&b| b == b' ')
        .unwrap_or(message.len());
    String::from_utf8_lossy(&message[..end]).into_owned()
}

/// Case-insensitive lookup over all command tables, by binary search on lowercase names.
pub struct CommandTable<C: 'static> {
    sorted: Vec<&'static CommandSpec<C>>,
    /// The command found last: a pipeline usually repeats one command, and comparing against
    /// it costs a few instructions where the search costs a few hundred (measured with
    /// callgrind at pipeline depth 16). A `Cell` because lookups take `&self`; the node is
    /// single-threaded.
    last: std::cell::Cell<Option<&'static CommandSpec<C>>>,
}

impl<C> CommandTable<C> {
    pub fn new(families: &[&'static [CommandSpec<C>]]) -> CommandTable<C> {
        let mut sorted: Vec<&'static CommandSpec<C>> =
            families.iter().flat_map(|f| f.iter()).collect();
        sorted.sort_by(|a, b| a.name.cmp(b.name));
        for w in sorted.windows(2) {
            assert_ne!(w[0].name, w[1].name, "command defined twice");
        }
        CommandTable {
            sorted,
            last: std::cell::Cell::new(None),
        }
    }

    /// Finds a top-level command by the name a client sent, in any case.
    pub fn find(&self, name: &[u8]) -> Option<&'static CommandSpec<C>> {
        if let Some(last) = self.last.get() {
            if last.name.as_bytes().eq_ignore_ascii_case(name) {
                return Some(last);
            }
        }
        let found = find_in(&self.sorted, name, |s| s.name);
        if found.is_some() {
            self.last.set(found);
        }
        found
    }

    pub fn all(&self) -> &[&'static CommandSpec<C>] {
        &self.sorted
    }
}

/// Finds the subcommand `sub` of `container`, in any case.
pub fn find_subcommand<C>(
    container: &'static CommandSpec<C>,
    sub: &[u8],
) -> Option<&'static CommandSpec<C>> {
    container
        .subcommands
        .iter()
        .find(|s| s.short_name().as_bytes().eq_ignore_ascii_case(sub))
}

fn find_in<C>(
    sorted: &[&'static CommandSpec<C>],
    name: &[u8],
    key: impl Fn(&CommandSpec<C>) -> &'static str,
) -> Option<&'static CommandSpec<C>> {
    // Command names are short; lowercase into a stack buffer to avoid allocating.
    let mut buf = [0u8; 32];
    if name.len() > buf.len() {
        return None;
    }
    for (d, s) in buf.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let lower = &buf[..name.len()];
    sorted
        .binary_search_by(|s| key(s).as_bytes().cmp(lower))
        .ok()
        .map(|i| sorted[i])
}

/// EVAL and FCALL and their variants: Redis's `no-mandatory-keys` commands, which may name no key.
pub fn no_mandatory_keys(name: &str) -> bool {
    matches!(
        name,
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro"
    )
}

/// Positions of the key arguments of `args` (a whole command line), or an error message.
/// Most commands declare (first, last, step); the ones whose keys move with a count or an
/// option are listed by name.
pub fn key_positions<C>(
    spec: &CommandSpec<C>,
    args: &[bytes::Bytes],
) -> Result<Vec<usize>, &'static str> {
    let argc = args.len();
    let numkeys_at = |pos: usize| -> Result<Vec<usize>, &'static str> {
        let n = args
            .get(pos)
            .and_then(|a| crate::args::parse_i64(a))
            .filter(|n| *n > 0)
            .ok_or("ERR Invalid arguments specified for command")? as usize;
        if pos + n >= argc {
            return Err("ERR Invalid arguments specified for command");
        }
        Ok((pos + 1..=pos + n).collect())
    };
    match spec.name {
        "zunion" | "zinter" | "zdiff" | "zintercard" | "sintercard" | "lmpop" | "zmpop" => {
            numkeys_at(1)
        }
        "zunionstore" | "zinterstore" | "zdiffstore" => {
            let mut keys = vec![1];
            keys.extend(numkeys_at(2)?);
            Ok(keys)
        }
        "blmpop" | "bzmpop" => numkeys_at(2),
        // Redis flags these "no mandatory keys": a count of 0, or one that does not fit,
        // names no key rather than being an error.
        name if no_mandatory_keys(name) => Ok(numkeys_at(2).unwrap_or_default()),
        "georadius" | "georadiusbymember" => {
            // Redis 7.0's key specs: the first STORE, then the first STOREDIST, each searched
            // from after the radius unit, names a key.
            let from = if spec.name == "georadius" { 6 } else { 5 };
            let mut keys = vec![1];
            for word in ["store", "storedist"] {
                if let Some(i) =
                    (from..argc.saturating_sub(1)).find(|&i| crate::args::is(&args[i], word))
                {
                    keys.push(i + 1);
                }
            }
            Ok(keys)
        }
        "sort" | "sort_ro" => {
            let mut keys = vec![1];
            let mut i = 2;
            while i < argc {
                if crate::args::is(&args[i], "store") && i + 1 < argc {
                    keys.push(i + 1);
                    i += 2;
                } else {
                    i += 1;
                }
            }
            Ok(keys)
        }
        _ => {
            let (first, last, step) = spec.keys;
            if first <= 0 {
                return Err("ERR The command has no key arguments");
            }
            let last = if last < 0 { argc as i32 + last } else { last };
            let step = step.max(1);
            Ok((first..=last)
                .step_by(step as usize)
                .map(|i| i as usize)
                .filter(|i| *i < argc)
                .collect())
        }
    }
}

/// The keys a partitioned cluster routes `args` by: those of [`key_positions`], plus the
/// declared keys of EVAL/EVALSHA/FCALL (`numkeys` at 2) and XREAD/XREADGROUP's streams (the
/// first half of what follows STREAMS). Empty when the command names no key.
pub fn routing_keys<'a, C>(spec: &CommandSpec<C>, args: &'a [Bytes]) -> Vec<&'a Bytes> {
    match spec.name {
        name if no_mandatory_keys(name) => {
            let n = args
                .get(2)
                .and_then(|a| crate::args::parse_i64(a))
                .filter(|n| *n > 0 && (*n as usize) < args.len() - 2)
                .unwrap_or(0) as usize;
            args.iter().skip(3).take(n).collect()
        }
        "xread" | "xreadgroup" => {
            let Some(at) = args.iter().position(|a| crate::args::is(a, "streams")) else {
                return Vec::new();
            };
            let rest = &args[at + 1..];
            rest[..rest.len() / 2].iter().collect()
        }
        _ => key_positions(spec, args)
            .map(|ps| ps.into_iter().map(|p| &args[p]).collect())
            .unwrap_or_default(),
    }
}

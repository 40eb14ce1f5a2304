//! Access control (Redis 7.0's ACL): users, their passwords, and what each may run, which keys
//! it may read or write and which pub/sub channels it may use.
//!
//! Plain state with its own rules, held by the command context (`crate::ctx::Core::acl`); the
//! ACL commands (`crate::cmd::acl`) and the dispatch policy (`crate::dispatch`) work on it. It
//! knows commands only through a [`Catalog`] built from the command table, so it does not
//! depend on the context that owns it.
//!
//! Rules are applied as Redis applies them: a SETUSER works on a copy of the user and replaces
//! it only when every rule was valid. What a user may run is a bit per command (and per
//! subcommand); categories are sets of those bits derived from the command flags and groups.
//! Selectors (Redis 7.0's `(...)` rules) are not supported: a rule in parentheses is refused as
//! a syntax error.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use sha2::{Digest, Sha256};

/// Redis 7.0's command categories, in its order (ACL CAT lists them so). A command's set of
/// categories is a bit mask over this table.
pub const CATEGORIES: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

fn cat(name: &str) -> u32 {
    let i = CATEGORIES
        .iter()
        .position(|c| *c == name)
        .expect("a known category");
    1 << i
}

/// The bit of a category named by a client (any case).
pub fn category_bit(name: &[u8]) -> Option<u32> {
    CATEGORIES
        .iter()
        .position(|c| c.as_bytes().eq_ignore_ascii_case(name))
        .map(|i| 1 << i)
}

/// What the catalog needs to know of one command of the table.
pub struct CommandFacts {
    pub name: &'static str,
    pub group: &'static str,
    pub write: bool,
    pub readonly: bool,
    pub admin: bool,
    pub pubsub: bool,
    pub fast: bool,
    pub blocking: bool,
    pub no_auth: bool,
}

/// The categories of a command, derived as Redis derives the implicit ones (write, read,
/// admin and dangerous, pubsub, fast or else slow, blocking) plus the one its group stands
/// for. Redis also names a few commands dangerous without the admin flag (they scan, flush or
/// rewrite whole keyspaces, or reveal server state): those are listed by name.
pub fn categories_of(c: &CommandFacts) -> u32 {
    let mut bits = 0;
    let group = match c.group {
        "generic" => Some("keyspace"),
        "sorted-set" | "sorted_set" => Some("sortedset"),
        "transactions" => Some("transaction"),
        "scripting" => Some("scripting"),
        "string" | "list" | "hash" | "set" | "bitmap" | "hyperloglog" | "geo" | "stream"
        | "pubsub" | "connection" => Some(c.group),
        _ => None,
    };
    // SORT belongs to the data types it sorts rather than to the keyspace commands.
    if c.name == "sort" || c.name == "sort_ro" {
        bits |= cat("set") | cat("sortedset") | cat("list");
    } else if let Some(g) = group {
        bits |= cat(g);
    }
    if c.write {
        bits |= cat("write");
    }
    // Scripts may write whatever their flags say: EVAL_RO is not in @read.
    if c.readonly && bits & cat("scripting") == 0 {
        bits |= cat("read");
    }
    if c.admin {
        bits |= cat("admin") | cat("dangerous");
    }
    if c.pubsub {
        bits |= cat("pubsub");
    }
    if c.fast {
        bits |= cat("fast");
    } else {
        bits |= cat("slow");
    }
    if c.blocking {
        bits |= cat("blocking");
    }
    if matches!(
        c.name,
        "keys"
            | "flushall"
            | "flushdb"
            | "sort"
            | "migrate"
            | "restore"
            | "restore-asking"
            | "swapdb"
            | "info"
            | "role"
            | "lastsave"
            | "client|list"
            | "client|kill"
            | "client|pause"
            | "client|unpause"
            | "client|no-evict"
            | "client|tracking"
            | "client|trackinginfo"
            | "client|getredir"
            | "client|caching"
    ) {
        bits |= cat("dangerous");
    }
    bits
}

/// One entry of the catalog: a command or a subcommand.
pub struct CatalogEntry {
    pub name: &'static str,
    pub categories: u32,
    pub no_auth: bool,
    /// The container's index, for a subcommand.
    pub parent: Option<usize>,
    /// The subcommands' indexes, for a container.
    pub subcommands: std::ops::Range<usize>,
}

/// Every command and subcommand with an index, which is its bit in a user's permissions.
/// Containers come right before their subcommands, in the table's (alphabetical) order.
#[derive(Default)]
pub struct Catalog {
    pub entries: Vec<CatalogEntry>,
    /// Indexes sorted by full name, for lookups.
    by_name: Vec<usize>,
}

impl Catalog {
    /// The full names of the commands in the category `bit` (ACL CAT, COMMAND LIST FILTERBY
    /// ACLCAT), in catalog order.
    pub fn names_in(&self, bit: u32) -> Vec<&'static str> {
        self.entries
            .iter()
            .filter(|e| e.categories & bit != 0)
            .map(|e| e.name)
            .collect()
    }

    /// Builds the catalog from top-level commands with their subcommands.
    pub fn new(commands: Vec<(CommandFacts, Vec<CommandFacts>)>) -> Catalog {
        let mut entries = Vec::new();
        for (top, subs) in commands {
            let at = entries.len();
            entries.push(CatalogEntry {
                name: top.name,
                categories: categories_of(&top),
                no_auth: top.no_auth,
                parent: None,
                subcommands: at + 1..at + 1 + subs.len(),
            });
            for s in subs {
                entries.push(CatalogEntry {
                    name: s.name,
                    categories: categories_of(&s),
                    no_auth: s.no_auth,
                    parent: Some(at),
                    subcommands: 0..0,
                });
            }
        }
        let mut by_name: Vec<usize> = (0..entries.len()).collect();
        by_name.sort_by(|a, b| entries[*a].name.cmp(entries[*b].name));
        Catalog { entries, by_name }
    }

    /// The index of a full command name (`get`, `client|kill`), in any case.
    pub fn find(&self, name: &[u8]) -> Option<usize> {
        let mut buf = [0u8; 64];
        if name.len() > buf.len() {
            return None;
        }
        for (d, s) in buf.iter_mut().zip(name) {
            *d = s.to_ascii_lowercase();
        }
        let lower = &buf[..name.len()];
        self.by_name
            .binary_search_by(|i| self.entries[*i].name.as_bytes().cmp(lower))
            .ok()
            .map(|i| self.by_name[i])
    }
}

/// A set of command indexes.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize, on: bool) -> Bits {
        Bits(vec![if on { u64::MAX } else { 0 }; n.div_ceil(64)])
    }
    pub fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
    fn set(&mut self, i: usize, on: bool) {
        if on {
            self.0[i / 64] |= 1 << (i % 64);
        } else {
            self.0[i / 64] &= !(1 << (i % 64));
        }
    }
}

/// A key pattern and what it allows (`~p` both, `%R~p` reading, `%W~p` writing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPattern {
    pub pattern: Bytes,
    pub read: bool,
    pub write: bool,
}

impl KeyPattern {
    fn describe(&self, out: &mut String) {
        match (self.read, self.write) {
            (true, true) => out.push('~'),
            (true, false) => out.push_str("%R~"),
            _ => out.push_str("%W~"),
        }
        out.push_str(&String::from_utf8_lossy(&self.pattern));
    }
}

/// Why a rule of SETUSER was refused (Redis's wording, after "Error in ACL SETUSER modifier").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleError {
    UnknownCommand,
    Syntax,
    KeyAfterAll,
    ChannelAfterAll,
    NoSuchPassword,
    BadHash,
    FirstArgOfSubcommand,
}

impl RuleError {
    pub fn text(self) -> &'static str {
        match self {
            RuleError::UnknownCommand => "Unknown command or category name in ACL",
            RuleError::Syntax => "Syntax error",
            RuleError::KeyAfterAll => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            RuleError::ChannelAfterAll => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            RuleError::FirstArgOfSubcommand => "Allowing first-arg of a subcommand is not supported",
        }
    }
}

/// One user.
#[derive(Clone, Debug)]
pub struct User {
    pub name: Bytes,
    pub enabled: bool,
    pub nopass: bool,
    /// `sanitize-payload` / `skip-sanitize-payload` (shown, not acted on: RESTORE payloads are
    /// always validated).
    pub sanitize: Option<bool>,
    /// SHA-256 digests in lowercase hex, in the order added.
    pub passwords: Vec<String>,
    commands: Bits,
    /// Set by `+@all`, cleared by `-@all`: commands the table does not have yet would be
    /// allowed (what decides between describing as `+@all ...` and `-@all ...`).
    future: bool,
    /// `+select|0`: first arguments allowed for a command otherwise refused.
    firstargs: BTreeMap<usize, Vec<Bytes>>,
    pub all_keys: bool,
    pub keys: Vec<KeyPattern>,
    pub all_channels: bool,
    pub channels: Vec<Bytes>,
}

/// What a permission check refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denied {
    Command,
    /// The argument at this position is a key the user may not touch.
    Key(usize),
    /// The argument at this position is a channel (or pattern) the user may not use.
    Channel(usize),
}

/// How a command uses the key at one position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyUse {
    pub read: bool,
    pub write: bool,
}

/// How a command names pub/sub channels, for the channel permission check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelUse {
    /// These argument positions are channels, matched against the user's patterns.
    Channels {
        from: usize,
        step: usize,
        only_first: bool,
    },
    /// The arguments from 1 on are patterns, which must equal one of the user's patterns.
    Patterns,
}

impl User {
    /// A new user as Redis creates one: off, no password, no commands, no keys, and channels
    /// per `acl-pubsub-default`.
    pub fn new(name: Bytes, catalog_len: usize, all_channels: bool) -> User {
        User {
            name,
            enabled: false,
            nopass: false,
            sanitize: None,
            passwords: Vec::new(),
            commands: Bits::new(catalog_len, false),
            future: false,
            firstargs: BTreeMap::new(),
            all_keys: false,
            keys: Vec::new(),
            all_channels,
            channels: Vec::new(),
        }
    }

    /// Redis's `default` user: on, no password, everything allowed.
    pub fn default_user(catalog_len: usize) -> User {
        let mut u = User::new(Bytes::from_static(b"default"), catalog_len, true);
        u.enabled = true;
        u.nopass = true;
        u.commands = Bits::new(catalog_len, true);
        u.future = true;
        u.all_keys = true;
        u
    }

    /// May run every command on every key and channel: the dispatch policy skips its checks.
    pub fn unrestricted(&self) -> bool {
        self.future
            && self.all_keys
            && self.all_channels
            && self.commands.0.iter().all(|w| *w == u64::MAX)
    }

    /// Whether `password` authenticates this user (any does for `nopass`).
    pub fn password_ok(&self, password: &[u8]) -> bool {
        self.nopass || self.passwords.iter().any(|p| *p == hash_password(password))
    }

    /// Applies one rule (`on`, `>pass`, `~keys*`, `+@read`, ...).
    pub fn apply(
        &mut self,
        rule: &[u8],
        catalog: &Catalog,
        pubsub_all_default: bool,
    ) -> Result<(), RuleError> {
        if rule.is_empty() {
            return Ok(());
        }
        let is = |word: &str| rule.eq_ignore_ascii_case(word.as_bytes());
        let rest = &rule[1..];
        if is("on") {
            self.enabled = true;
        } else if is("off") {
            self.enabled = false;
        } else if is("skip-sanitize-payload") {
            self.sanitize = Some(false);
        } else if is("sanitize-payload") {
            self.sanitize = Some(true);
        } else if is("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if is("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if rule[0] == b'>' || rule[0] == b'#' {
            let hash = if rule[0] == b'>' {
                hash_password(rest)
            } else {
                checked_hash(rest)?
            };
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.nopass = false;
        } else if rule[0] == b'<' || rule[0] == b'!' {
            let hash = if rule[0] == b'<' {
                hash_password(rest)
            } else {
                checked_hash(rest)?
            };
            let at = self
                .passwords
                .iter()
                .position(|p| *p == hash)
                .ok_or(RuleError::NoSuchPassword)?;
            self.passwords.remove(at);
        } else if is("clearselectors") {
            // No selectors exist beyond the root one.
        } else if rule[0] == b'(' {
            return Err(RuleError::Syntax);
        } else if is("reset") {
            self.nopass = false;
            self.passwords.clear();
            self.all_keys = false;
            self.keys.clear();
            self.all_channels = pubsub_all_default;
            self.channels.clear();
            self.enabled = false;
            self.sanitize = Some(true);
            self.set_all_commands(false);
        } else {
            self.apply_selector_rule(rule, catalog)?;
        }
        Ok(())
    }

    fn set_all_commands(&mut self, on: bool) {
        let n = self.commands.0.len();
        self.commands = Bits(vec![if on { u64::MAX } else { 0 }; n]);
        self.future = on;
        self.firstargs.clear();
    }

    /// Allows or refuses a command, and with a container all its subcommands.
    fn change(&mut self, catalog: &Catalog, i: usize, on: bool) {
        self.commands.set(i, on);
        self.firstargs.remove(&i);
        for s in catalog.entries[i].subcommands.clone() {
            self.commands.set(s, on);
        }
    }

    fn apply_selector_rule(&mut self, rule: &[u8], catalog: &Catalog) -> Result<(), RuleError> {
        let is = |word: &str| rule.eq_ignore_ascii_case(word.as_bytes());
        let has_space = |b: &[u8]| b.iter().any(|c| *c == b' ' || *c == 0);
        if is("allkeys") || rule == b"~*" {
            self.all_keys = true;
            self.keys.clear();
        } else if is("resetkeys") {
            self.all_keys = false;
            self.keys.clear();
        } else if is("allchannels") || rule == b"&*" {
            self.all_channels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.all_channels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.set_all_commands(true);
        } else if is("nocommands") || is("-@all") {
            self.set_all_commands(false);
        } else if rule[0] == b'~' || rule[0] == b'%' {
            if self.all_keys {
                return Err(RuleError::KeyAfterAll);
            }
            let (read, write, pattern) = if rule[0] == b'%' {
                let tilde = rule
                    .iter()
                    .position(|c| *c == b'~')
                    .ok_or(RuleError::Syntax)?;
                let perms = &rule[1..tilde];
                let read = perms.iter().any(|c| c.eq_ignore_ascii_case(&b'r'));
                let write = perms.iter().any(|c| c.eq_ignore_ascii_case(&b'w'));
                let valid = !perms.is_empty()
                    && perms.len() == read as usize + write as usize
                    && perms.iter().all(|c| b"rRwW".contains(c));
                if !valid {
                    return Err(RuleError::Syntax);
                }
                (read, write, &rule[tilde + 1..])
            } else {
                (true, true, &rule[1..])
            };
            if has_space(pattern) {
                return Err(RuleError::Syntax);
            }
            match self.keys.iter_mut().find(|k| k.pattern == pattern) {
                Some(k) => {
                    k.read |= read;
                    k.write |= write;
                }
                None => self.keys.push(KeyPattern {
                    pattern: Bytes::copy_from_slice(pattern),
                    read,
                    write,
                }),
            }
        } else if rule[0] == b'&' {
            if self.all_channels {
                return Err(RuleError::ChannelAfterAll);
            }
            let pattern = &rule[1..];
            if has_space(pattern) {
                return Err(RuleError::Syntax);
            }
            if !self.channels.iter().any(|c| c == pattern) {
                self.channels.push(Bytes::copy_from_slice(pattern));
            }
        } else if (rule[0] == b'+' || rule[0] == b'-') && rule.get(1) == Some(&b'@') {
            let bit = category_bit(&rule[2..]).ok_or(RuleError::UnknownCommand)?;
            for i in 0..catalog.entries.len() {
                if catalog.entries[i].categories & bit != 0 {
                    self.change(catalog, i, rule[0] == b'+');
                }
            }
        } else if rule[0] == b'+' {
            let name = &rule[1..];
            match name.iter().rposition(|c| *c == b'|') {
                None => {
                    let i = catalog.find(name).ok_or(RuleError::UnknownCommand)?;
                    self.change(catalog, i, true);
                }
                Some(bar) => {
                    let (cmd, sub) = (&name[..bar], &name[bar + 1..]);
                    let i = catalog.find(cmd).ok_or(RuleError::UnknownCommand)?;
                    if catalog.entries[i].parent.is_some() {
                        return Err(RuleError::FirstArgOfSubcommand);
                    }
                    if sub.is_empty() {
                        return Err(RuleError::Syntax);
                    }
                    if catalog.entries[i].subcommands.is_empty() {
                        // A first argument of a plain command (SELECT 0): deprecated in Redis,
                        // still accepted.
                        let lower = Bytes::from(sub.to_ascii_lowercase());
                        let list = self.firstargs.entry(i).or_default();
                        if !list.contains(&lower) {
                            list.push(lower);
                        }
                    } else {
                        let s = catalog.find(name).ok_or(RuleError::UnknownCommand)?;
                        self.change(catalog, s, true);
                    }
                }
            }
        } else if rule[0] == b'-' {
            let i = catalog.find(&rule[1..]).ok_or(RuleError::UnknownCommand)?;
            self.change(catalog, i, false);
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    /// Whether the user may run command `i` with `args` (the whole request).
    pub fn may_run(&self, catalog: &Catalog, i: usize, args: &[Bytes]) -> bool {
        if self.commands.get(i) || catalog.entries[i].no_auth {
            return true;
        }
        match (self.firstargs.get(&i), args.get(1)) {
            (Some(list), Some(a)) => list.iter().any(|f| f.eq_ignore_ascii_case(a)),
            _ => false,
        }
    }

    /// Whether the user may use `key` as `usage` says.
    pub fn may_touch(&self, key: &[u8], usage: KeyUse) -> bool {
        self.all_keys
            || self.keys.iter().any(|k| {
                (k.read || !usage.read)
                    && (k.write || !usage.write)
                    && lattice_store::glob::glob_match(&k.pattern, key, false)
            })
    }

    /// Whether the user may use `channel` (a literal channel, or with `pattern` a PSUBSCRIBE
    /// pattern, which must be one of the user's patterns as written).
    pub fn may_use_channel(&self, channel: &[u8], pattern: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|c| {
                if pattern {
                    c == channel
                } else {
                    lattice_store::glob::glob_match(c, channel, false)
                }
            })
    }

    /// The flags GETUSER shows, in Redis's order.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.sanitize {
            Some(false) => f.push("skip-sanitize-payload"),
            Some(true) => f.push("sanitize-payload"),
            None => {}
        }
        f
    }

    /// GETUSER's `keys`: `~*`, or the patterns separated by spaces.
    pub fn keys_text(&self) -> String {
        if self.all_keys {
            return "~*".into();
        }
        let mut s = String::new();
        for (n, k) in self.keys.iter().enumerate() {
            if n > 0 {
                s.push(' ');
            }
            k.describe(&mut s);
        }
        s
    }

    /// GETUSER's `channels`.
    pub fn channels_text(&self) -> String {
        if self.all_channels {
            return "&*".into();
        }
        let parts: Vec<String> = self
            .channels
            .iter()
            .map(|c| format!("&{}", String::from_utf8_lossy(c)))
            .collect();
        parts.join(" ")
    }

    /// The command rules, as short as Redis makes them: `+@all` or `-@all`, then the
    /// categories that best cover the difference (each time the one with the fewest
    /// exceptions among those covering more than they miss), then single commands and first
    /// arguments for what remains. Applying the result to a fresh user gives back exactly
    /// these permissions (asserted).
    pub fn commands_text(&self, catalog: &Catalog) -> String {
        let n = catalog.entries.len();
        let additive = !self.future;
        let mut fake = User::new(Bytes::new(), n, false);
        fake.set_all_commands(!additive);
        let mut rules = String::from(if additive { "-@all" } else { "+@all" });
        // What still differs, as a user whose bits are flipped as categories are emitted.
        let mut temp = self.clone();
        let mut applied = [false; CATEGORIES.len()];
        loop {
            let mut best: Option<usize> = None;
            let (mut min_diff, mut max_same) = (usize::MAX, 0);
            for (j, done) in applied.iter().enumerate() {
                if *done {
                    continue;
                }
                let (mut on, mut off) = (0, 0);
                for (i, e) in catalog.entries.iter().enumerate() {
                    if e.categories & (1 << j) != 0 {
                        if temp.commands.get(i) {
                            on += 1;
                        } else {
                            off += 1;
                        }
                    }
                }
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < min_diff || (diff == min_diff && same > max_same)) {
                    best = Some(j);
                    min_diff = diff;
                    max_same = same;
                }
            }
            let Some(j) = best else { break };
            let (sign, inverse) = if additive { ('+', '-') } else { ('-', '+') };
            let op = format!("{sign}@{}", CATEGORIES[j]);
            fake.apply_selector_rule(op.as_bytes(), catalog)
                .expect("a known category");
            temp.apply_selector_rule(format!("{inverse}@{}", CATEGORIES[j]).as_bytes(), catalog)
                .expect("a known category");
            rules.push(' ');
            rules.push_str(&op);
            applied[j] = true;
        }
        for (i, e) in catalog.entries.iter().enumerate() {
            let mine = self.commands.get(i);
            if mine != fake.commands.get(i) {
                rules.push(' ');
                rules.push(if mine { '+' } else { '-' });
                rules.push_str(e.name);
                fake.change(catalog, i, mine);
            }
            if !mine {
                if let Some(list) = self.firstargs.get(&i) {
                    for a in list {
                        rules.push_str(&format!(" +{}|{}", e.name, String::from_utf8_lossy(a)));
                    }
                }
            }
        }
        assert_eq!(
            fake.commands, self.commands,
            "the described command rules must give back the user's permissions"
        );
        rules
    }

    /// The user as ACL LIST and the ACL file write it (after `user <name> `).
    pub fn describe(&self, catalog: &Catalog) -> String {
        let mut out = self.flags().join(" ");
        for p in &self.passwords {
            out.push_str(" #");
            out.push_str(p);
        }
        if self.all_keys {
            out.push_str(" ~*");
        } else {
            for k in &self.keys {
                out.push(' ');
                k.describe(&mut out);
            }
        }
        if self.all_channels {
            out.push_str(" &*");
        } else {
            out.push_str(" resetchannels");
            for c in &self.channels {
                out.push_str(" &");
                out.push_str(&String::from_utf8_lossy(c));
            }
        }
        out.push(' ');
        out.push_str(&self.commands_text(catalog));
        out
    }
}

/// SHA-256 of a password in lowercase hex, as Redis stores passwords.
pub fn hash_password(password: &[u8]) -> String {
    let digest = Sha256::digest(password);
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn checked_hash(hash: &[u8]) -> Result<String, RuleError> {
    if hash.len() != 64 || !hash.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(RuleError::BadHash);
    }
    Ok(String::from_utf8_lossy(hash).into_owned())
}

/// Redis refuses user names with spaces or NUL bytes.
pub fn valid_user_name(name: &[u8]) -> bool {
    !name.iter().any(|c| *c == b' ' || *c == 0)
}

/// Where a refused request ran, for the ACL log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogContext {
    Toplevel,
    Multi,
    Lua,
}

/// Why an ACL log entry was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogReason {
    Command,
    Key,
    Channel,
    Auth,
}

/// One ACL LOG entry.
#[derive(Clone, Debug)]
pub struct LogEntry {
    pub count: u64,
    pub reason: LogReason,
    pub context: LogContext,
    pub object: Bytes,
    pub username: Bytes,
    /// When it last happened (ms).
    pub at_ms: u64,
    pub client_info: String,
}

/// Redis merges an event into an entry like it when they are at most this far apart.
const LOG_GROUPING_MS: u64 = 60_000;
/// How many of the newest entries are searched for one to merge into.
const LOG_MERGE_SCAN: usize = 10;

/// A pending read or write of the ACL file, carried out by the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileOp {
    Load { path: String },
    Save { path: String, text: Bytes },
}

/// The node's ACL state (in `Core::acl`).
pub struct Acl {
    pub catalog: Catalog,
    /// Users by name; `default` always exists.
    pub users: BTreeMap<Bytes, User>,
    /// Whether the default user may run everything on everything: then a client of the
    /// default user is never checked (no lookup, no allocation on the hot path).
    pub default_unrestricted: bool,
    /// Newest first, at most `acllog-max-len`.
    pub log: VecDeque<LogEntry>,
    /// ACL LOAD/SAVE requests waiting for the driver, oldest first: the client and what it
    /// asked. The driver answers them in order.
    pub file_waiters: VecDeque<(crate::client::ConnId, FileOp)>,
    /// File operations not yet handed to the driver.
    pub file_out: VecDeque<FileOp>,
    /// Refusals since start-up, by reason (INFO stats `acl_access_denied_*`).
    pub denied: DeniedCounts,
}

/// Counts of refusals by reason.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeniedCounts {
    pub auth: u64,
    pub command: u64,
    pub key: u64,
    pub channel: u64,
}

impl Acl {
    pub fn new(catalog: Catalog) -> Acl {
        let mut users = BTreeMap::new();
        users.insert(
            Bytes::from_static(b"default"),
            User::default_user(catalog.entries.len()),
        );
        Acl {
            catalog,
            users,
            default_unrestricted: true,
            log: VecDeque::new(),
            file_waiters: VecDeque::new(),
            file_out: VecDeque::new(),
            denied: DeniedCounts::default(),
        }
    }

    pub fn default_user(&self) -> &User {
        self.users
            .get(&b"default"[..])
            .expect("the default user exists")
    }

    /// `requirepass`: the default user's only password, or none needed when empty (as Redis
    /// applies `resetpass` then `>pass` or `nopass`).
    pub fn set_requirepass(&mut self, pass: &[u8]) {
        let d = self
            .users
            .get_mut(&b"default"[..])
            .expect("the default user exists");
        d.passwords.clear();
        d.nopass = pass.is_empty();
        if !pass.is_empty() {
            d.passwords.push(hash_password(pass));
        }
        self.refresh();
    }

    /// Recomputes what depends on the default user.
    pub fn refresh(&mut self) {
        self.default_unrestricted = self.default_user().unrestricted();
    }

    /// Whether a new connection must authenticate (the default user needs a password, or is
    /// off).
    pub fn auth_required(&self) -> bool {
        let d = self.default_user();
        !d.nopass || !d.enabled
    }

    /// Applies SETUSER's rules to a copy of `name` (created if missing) and keeps it only
    /// if all were valid; on error, the failing rule.
    pub fn set_user(
        &mut self,
        name: &[u8],
        rules: &[Bytes],
        pubsub_all_default: bool,
    ) -> Result<(), (Bytes, RuleError)> {
        let n = self.catalog.entries.len();
        let mut user = self
            .users
            .get(name)
            .cloned()
            .unwrap_or_else(|| User::new(Bytes::copy_from_slice(name), n, pubsub_all_default));
        for r in rules {
            user.apply(r, &self.catalog, pubsub_all_default)
                .map_err(|e| (r.clone(), e))?;
        }
        self.users.insert(user.name.clone(), user);
        self.refresh();
        Ok(())
    }

    /// Adds an entry, or merges it into a recent one like it.
    pub fn log_event(&mut self, mut entry: LogEntry, max_len: usize) {
        let counter = match entry.reason {
            LogReason::Auth => &mut self.denied.auth,
            LogReason::Command => &mut self.denied.command,
            LogReason::Key => &mut self.denied.key,
            LogReason::Channel => &mut self.denied.channel,
        };
        *counter += 1;
        let similar = self.log.iter().take(LOG_MERGE_SCAN).position(|e| {
            e.reason == entry.reason
                && e.context == entry.context
                && e.at_ms.abs_diff(entry.at_ms) <= LOG_GROUPING_MS
                && e.object == entry.object
                && e.username == entry.username
        });
        if let Some(i) = similar {
            let old = self.log.remove(i).expect("found");
            entry.count = old.count + 1;
        }
        self.log.push_front(entry);
        self.log.truncate(max_len);
    }

    /// The users in ACL file form (`user <name> <rules>` lines), as ACL SAVE writes them.
    pub fn file_text(&self) -> String {
        let mut s = String::new();
        for u in self.users.values() {
            s.push_str("user ");
            s.push_str(&String::from_utf8_lossy(&u.name));
            s.push(' ');
            s.push_str(&u.describe(&self.catalog));
            s.push('\n');
        }
        s
    }

    /// Parses an ACL file into a new set of users; errors in Redis's words, each prefixed
    /// with `path:line`. The default user is created if the file does not define it.
    pub fn parse_file(
        &self,
        path: &str,
        text: &[u8],
        pubsub_all_default: bool,
    ) -> Result<BTreeMap<Bytes, User>, String> {
        let n = self.catalog.entries.len();
        let mut users: BTreeMap<Bytes, User> = BTreeMap::new();
        let mut errors = String::new();
        for (i, line) in text.split(|c| *c == b'\n').enumerate() {
            let line_no = i + 1;
            let line = trim(line);
            if line.is_empty() {
                continue;
            }
            let words: Vec<&[u8]> = line
                .split(|c| *c == b' ')
                .filter(|w| !w.is_empty())
                .collect();
            if words.len() < 2 || words[0] != b"user" {
                errors.push_str(&format!(
                    "{path}:{line_no} should start with user keyword followed by the username. "
                ));
                continue;
            }
            let name = Bytes::copy_from_slice(words[1]);
            if users.contains_key(&name) {
                errors.push_str(&format!(
                    "WARNING: Duplicate user '{}' found on line {line_no}. ",
                    String::from_utf8_lossy(&name)
                ));
                continue;
            }
            let mut user = User::new(name.clone(), n, pubsub_all_default);
            let mut reported = false;
            for w in &words[2..] {
                let w = trim(w);
                if let Err(e) = user.apply(w, &self.catalog, pubsub_all_default) {
                    if e == RuleError::UnknownCommand {
                        errors.push_str(&format!(
                            "{path}:{line_no}: Error in applying operation '{}': {}. ",
                            String::from_utf8_lossy(w),
                            e.text()
                        ));
                    } else if !reported {
                        errors.push_str(&format!("{path}:{line_no}: {}. ", e.text()));
                        reported = true;
                    }
                }
            }
            users.insert(name, user);
        }
        if !errors.is_empty() {
            errors.push_str("WARNING: ACL errors detected, no change to the previously active ACL rules was performed");
            return Err(errors);
        }
        users
            .entry(Bytes::from_static(b"default"))
            .or_insert_with(|| User::default_user(n));
        Ok(users)
    }
}

fn trim(mut b: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = b {
        if b" \t\r\n".contains(first) {
            b = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = b {
        if b" \t\r\n".contains(last) {
            b = rest;
        } else {
            break;
        }
    }
    b
}

/// The ways commands use their keys that the permission check must tell apart: most read
/// or write the keys they name as their flags say; these read without looking at the value
/// (Redis's key specs lack `access` for them), and these write commands also return what
/// they find.
fn reads_no_value(name: &str) -> bool {
    matches!(
        name,
        "exists"
            | "type"
            | "touch"
            | "ttl"
            | "pttl"
            | "expiretime"
            | "pexpiretime"
            | "hexists"
            | "hstrlen"
            | "strlen"
            | "llen"
            | "scard"
            | "zcard"
            | "hlen"
            | "xlen"
            | "object|encoding"
            | "object|freq"
            | "object|idletime"
            | "object|refcount"
            | "memory|usage"
            | "debug|object"
    )
}

fn writes_and_returns(name: &str) -> bool {
    matches!(
        name,
        "getset"
            | "getdel"
            | "getex"
            | "set"
            | "incr"
            | "decr"
            | "incrby"
            | "decrby"
            | "incrbyfloat"
            | "hincrby"
            | "hincrbyfloat"
            | "zincrby"
            | "lpop"
            | "rpop"
            | "spop"
            | "zpopmin"
            | "zpopmax"
            | "bzpopmin"
            | "bzpopmax"
            | "blpop"
            | "brpop"
            | "lmpop"
            | "blmpop"
            | "zmpop"
            | "bzmpop"
            | "rpoplpush"
            | "brpoplpush"
            | "lmove"
            | "blmove"
            | "smove"
            | "append"
            | "setrange"
            | "bitfield"
            | "pfadd"
            | "pfcount"
            | "pfmerge"
            | "xreadgroup"
            | "xautoclaim"
            | "xclaim"
            | "sort"
            | "linsert"
            | "lset"
            | "hsetnx"
            | "setnx"
            | "msetnx"
            | "restore"
            | "zadd"
            | "geoadd"
    )
}

/// How the command `name` uses the key that is the `nth` of its keys (`first` is whether it
/// is the first, the destination of the commands that store a result). Redis derives this
/// from per-key specs; Lattice from the command's flags, with the destinations and
/// exceptions above.
pub fn key_use(name: &str, write: bool, nth: usize) -> KeyUse {
    const READ: KeyUse = KeyUse {
        read: true,
        write: false,
    };
    const WRITE: KeyUse = KeyUse {
        read: false,
        write: true,
    };
    const BOTH: KeyUse = KeyUse {
        read: true,
        write: true,
    };
    // Commands storing into their first key from the others.
    let dest_first = matches!(
        name,
        "sinterstore"
            | "sunionstore"
            | "sdiffstore"
            | "zunionstore"
            | "zinterstore"
            | "zdiffstore"
            | "zrangestore"
            | "geosearchstore"
    );
    if dest_first {
        return if nth == 0 { WRITE } else { READ };
    }
    match name {
        // BITOP op dest src...: the first key is the destination.
        "bitop" => return if nth == 0 { WRITE } else { READ },
        // The source is read, the destination written.
        "copy" => return if nth == 0 { READ } else { WRITE },
        "sort" | "georadius" | "georadiusbymember" => {
            return if nth == 0 { READ } else { WRITE };
        }
        _ => {}
    }
    if !write {
        if reads_no_value(name) {
            // Needs some permission on the key, read or write.
            return KeyUse {
                read: false,
                write: false,
            };
        }
        return READ;
    }
    if writes_and_returns(name) {
        BOTH
    } else {
        WRITE
    }
}

/// The channels a pub/sub command names, if it is one.
pub fn channel_use(name: &str) -> Option<ChannelUse> {
    match name {
        "publish" | "spublish" => Some(ChannelUse::Channels {
            from: 1,
            step: 1,
            only_first: true,
        }),
        "subscribe" | "ssubscribe" => Some(ChannelUse::Channels {
            from: 1,
            step: 1,
            only_first: false,
        }),
        "psubscribe" => Some(ChannelUse::Patterns),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(name: &'static str, group: &'static str, write: bool, fast: bool) -> CommandFacts {
        CommandFacts {
            name,
            group,
            write,
            readonly: !write,
            admin: false,
            pubsub: false,
            fast,
            blocking: false,
            no_auth: false,
        }
    }

    fn catalog() -> Catalog {
        let mut client = facts("client", "connection", false, false);
        client.readonly = false;
        let mut kill = facts("client|kill", "connection", false, false);
        kill.admin = true;
        kill.readonly = false;
        let mut id = facts("client|id", "connection", false, true);
        id.readonly = false;
        Catalog::new(vec![
            (client, vec![id, kill]),
            (facts("get", "string", false, true), vec![]),
            (facts("hget", "hash", false, true), vec![]),
            (facts("hset", "hash", true, true), vec![]),
            (facts("select", "connection", false, true), vec![]),
            (facts("set", "string", true, false), vec![]),
        ])
    }

    fn user(rules: &[&str]) -> User {
        let c = catalog();
        let mut u = User::new(Bytes::from_static(b"u"), c.entries.len(), false);
        for r in rules {
            u.apply(r.as_bytes(), &c, false).unwrap();
        }
        u
    }

    #[test]
    fn categories_describe_back() {
        let c = catalog();
        assert_eq!(user(&["+@all", "-@hash"]).commands_text(&c), "+@all -@hash");
        assert_eq!(user(&["-@all", "+@hash"]).commands_text(&c), "-@all +@hash");
        // CLIENT KILL is all of @admin here, so refusing CLIENT refuses @admin.
        assert_eq!(
            user(&["+@all", "-client"]).commands_text(&c),
            "+@all -@admin -client"
        );
        assert_eq!(
            user(&["+@all", "-client", "+client|id"]).commands_text(&c),
            "+@all -@admin -client +client|id"
        );
        assert_eq!(user(&["+select|0"]).commands_text(&c), "-@all +select|0");
        assert_eq!(
            user(&["+select|0", "+select"]).commands_text(&c),
            "-@all +select"
        );
    }

    #[test]
    fn rules_errors() {
        let c = catalog();
        let mut u = user(&[]);
        assert_eq!(
            u.apply(b"+nosuch", &c, false),
            Err(RuleError::UnknownCommand)
        );
        assert_eq!(
            u.apply(b"+client|id|x", &c, false),
            Err(RuleError::FirstArgOfSubcommand)
        );
        assert_eq!(
            u.apply(b"+client|nosuch", &c, false),
            Err(RuleError::UnknownCommand)
        );
        assert_eq!(u.apply(b"#abc", &c, false), Err(RuleError::BadHash));
        assert_eq!(u.apply(b"<nope", &c, false), Err(RuleError::NoSuchPassword));
        assert_eq!(u.apply(b"%X~k", &c, false), Err(RuleError::Syntax));
        u.apply(b"allkeys", &c, false).unwrap();
        assert_eq!(u.apply(b"~k", &c, false), Err(RuleError::KeyAfterAll));
        u.apply(b"&*", &c, false).unwrap();
        assert_eq!(u.apply(b"&k", &c, false), Err(RuleError::ChannelAfterAll));
    }

    #[test]
    fn key_patterns_merge_permissions() {
        let u = user(&["%R~foo", "%W~foo", "%R~bar"]);
        assert_eq!(u.keys_text(), "~foo %R~bar");
        let r = KeyUse {
            read: true,
            write: false,
        };
        let w = KeyUse {
            read: false,
            write: true,
        };
        assert!(u.may_touch(b"bar", r));
        assert!(!u.may_touch(b"bar", w));
        assert!(u.may_touch(b"foo", w));
    }

    #[test]
    fn passwords_are_sha256() {
        assert_eq!(
            hash_password(b"passwd4"),
            "34344e4d60c2b6d639b7bd22e18f2b0b91bc34bf0ac5f9952744435093cfb4e6"
        );
        let u = user(&[">passwd4"]);
        assert!(u.password_ok(b"passwd4"));
        assert!(!u.password_ok(b"passwd5"));
    }
}

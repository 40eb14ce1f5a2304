//! ACL commands (SETUSER, GETUSER, DELUSER, LIST, USERS, WHOAMI, CAT, LOG, DRYRUN, GENPASS,
//! LOAD, SAVE, HELP) and the permission checks the dispatch policy, EXEC and scripts share.
//! The users themselves live in `crate::acl`.

use bytes::Bytes;

use crate::acl::{
    channel_use, key_use, ChannelUse, Denied, FileOp, KeyUse, LogContext, LogEntry, LogReason, User,
};
use crate::args::{is, parse_i64};
use crate::blocking::TimeoutReply;
use crate::client::ConnId;
use crate::command::{container, spec, Call};
use crate::ctx::{CommandSpec, Core};

const SERVER: &str = "server";
const ADMIN: &[&str] = &["admin", "noscript", "loading", "stale"];
const PLAIN: &[&str] = &["noscript", "loading", "stale"];

pub const COMMANDS: &[CommandSpec] = &[container(
    "acl",
    -2,
    SERVER,
    "6.0.0",
    "A container for Access List Control commands.",
    &[
        spec(
            "acl|cat",
            -2,
            PLAIN,
            (0, 0, 0),
            SERVER,
            "6.0.0",
            "Lists the ACL categories, or the commands inside a category.",
            acl_cat,
        ),
        spec(
            "acl|deluser",
            -3,
            ADMIN,
            (0, 0, 0),
            SERVER,
            "6.0.0",
            "Deletes ACL users, and terminates their connections.",
            acl_deluser,
        ),
        spec(
            "acl|dryrun",
            -4,
            ADMIN,
            (0, 0, 0),
            SERVER,
            "7.0.0",
            "Simulates the execution of a command by a user, without executing the command.",
            acl_dryrun,
        ),
        spec(
            "acl|genpass",
            -2,
            PLAIN,
            (0, 0, 0),
            SERVER,
            "6.0.0",
            "Generates a pseudorandom, secure password that can be used to identify ACL users.",
            acl_genpass,
        ),
        spec(
            "acl|getuser",
            3,
            ADMIN,
            (0, 0, 0),
            SERVER,
            "6.0.0",
            "Lists the ACL rules of a user.",
            acl_getuser,
        ),
        spec(
            "acl|help",
            2,
            &["loading", "stale"],
            (0, 0, 0),
            SERVER,
            "6.0.0",
            "Returns helpful text about the different subcommands.",
            acl_help,
        ),
        spec(
            "acl|list",
            2,
            ADMIN,
            (0, 0, 0),
            SERVER,
            "6.0.0",
            "Dumps the effective rules in ACL file format.",
            acl_list,
        ),
        spec(
            "acl|load",
            2,
            ADMIN,
            (0, 0, 0),
            SERVER,
            "6.0.0",
            "Reloads the rules from the configured ACL file.",
            acl_load,
        ),
        spec(
            "acl|log",
            -2,
            ADMIN,
            (0, 0, 0),
            SERVER,
            "6.0.0",
            "Lists recent security events generated due to commands rejected by ACL rules.",
            acl_log,
        ),
        spec(
            "acl|save",
            2,
            ADMIN,
            (0, 0, 0),
            SERVER,
            "6.0.0",
            "Saves the effective ACL rules in the configured ACL file.",
            acl_save,
        ),
        spec(
            "acl|setuser",
            -3,
            ADMIN,
            (0, 0, 0),
            SERVER,
            "6.0.0",
            "Creates and modifies an ACL user and its rules.",
            acl_setuser,
        ),
        spec(
            "acl|users",
            2,
            ADMIN,
            (0, 0, 0),
            SERVER,
            "6.0.0",
            "Lists all ACL users.",
            acl_users,
        ),
        spec(
            "acl|whoami",
            2,
            PLAIN,
            (0, 0, 0),
            SERVER,
            "6.0.0",
            "Returns the authenticated username of the current connection.",
            acl_whoami,
        ),
    ],
)];

const NO_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";
const SAVE_FAILED: &str = "ERR There was an error trying to save the ACLs. Please check the server logs for more information";

impl Denied {
    /// The reply to a client's refused request (Redis's `processCommand` wording).
    pub fn message(&self, command: &str) -> String {
        match self {
            Denied::Command => {
                format!("NOPERM this user has no permissions to run the '{command}' command")
            }
            Denied::Key(_) => "NOPERM this user has no permissions to access one of the keys used as arguments".into(),
            Denied::Channel(_) => "NOPERM this user has no permissions to access one of the channels used as arguments".into(),
        }
    }

    /// ACL DRYRUN's answer, naming the key or channel.
    fn dryrun_text(&self, command: &str, args: &[Bytes]) -> String {
        match self {
            Denied::Command => {
                format!("This user has no permissions to run the '{command}' command")
            }
            Denied::Key(p) => format!(
                "This user has no permissions to access the '{}' key",
                String::from_utf8_lossy(&args[*p])
            ),
            Denied::Channel(p) => format!(
                "This user has no permissions to access the '{}' channel",
                String::from_utf8_lossy(&args[*p])
            ),
        }
    }

    /// Why EXEC no longer runs a command queued before the user's rules changed.
    pub fn exec_message(&self) -> String {
        let reason = match self {
            Denied::Command => "no permission to execute the command or subcommand",
            Denied::Key(_) => "no permission to touch the specified keys",
            Denied::Channel(_) => "no permission to access one of the channels used as arguments",
        };
        format!("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {reason}")
    }

    /// A script's error for a command it may not run.
    pub fn script_message(&self) -> String {
        let what = match self {
            Denied::Command => "can't run this command or subcommand",
            Denied::Key(_) => {
                "can't access at least one of the keys mentioned in the command arguments"
            }
            Denied::Channel(_) => "can't publish to the channel mentioned in the command",
        };
        format!("ERR The user executing the script {what}")
    }
}

/// The argument positions of the keys `args` names, for the key permission check: the
/// command's keys, and XREAD/XREADGROUP's streams (the first half of what follows STREAMS).
fn key_positions(spec: &CommandSpec, args: &[Bytes]) -> Vec<usize> {
    if matches!(spec.name, "xread" | "xreadgroup") {
        let Some(at) = args.iter().position(|a| is(a, "streams")) else {
            return Vec::new();
        };
        let n = (args.len() - at - 1) / 2;
        return (at + 1..at + 1 + n).collect();
    }
    crate::command::key_positions(spec, args).unwrap_or_default()
}

/// How `args` (resolved to `spec`) uses the `nth` of its keys.
pub(crate) fn key_use_of(spec: &CommandSpec, args: &[Bytes], nth: usize) -> KeyUse {
    // SET reads the old value only when asked for it (GET).
    if spec.name == "set" && !args[3..].iter().any(|a| is(a, "get")) {
        return KeyUse {
            read: false,
            write: true,
        };
    }
    key_use(spec.name, spec.is_write(), nth)
}

/// Whether `user` may run `args` (resolved to `spec`), and if not, why.
pub(crate) fn check_user(
    acl: &crate::acl::Acl,
    user: &User,
    spec: &CommandSpec,
    args: &[Bytes],
) -> Option<Denied> {
    let Some(i) = acl.catalog.find(spec.name.as_bytes()) else {
        return Some(Denied::Command);
    };
    if !user.may_run(&acl.catalog, i, args) {
        return Some(Denied::Command);
    }
    // The shard channels SPUBLISH and SSUBSCRIBE name are declared as keys (cluster routing
    // follows them) but are channels to the permission check, as Redis marks them `not_key`.
    let keys_are_channels = matches!(spec.name, "spublish" | "ssubscribe" | "sunsubscribe");
    if !user.all_keys && !keys_are_channels {
        for (nth, p) in key_positions(spec, args).into_iter().enumerate() {
            let usage = key_use_of(spec, args, nth);
            if !user.may_touch(&args[p], usage) {
                return Some(Denied::Key(p));
            }
        }
    }
    if !user.all_channels {
        match channel_use(spec.name) {
            Some(ChannelUse::Channels {
                from,
                step,
                only_first,
            }) => {
                let last = if only_first { from } else { args.len() - 1 };
                for p in (from..=last.min(args.len() - 1)).step_by(step) {
                    if !user.may_use_channel(&args[p], false) {
                        return Some(Denied::Channel(p));
                    }
                }
            }
            Some(ChannelUse::Patterns) => {
                for (p, pattern) in args.iter().enumerate().skip(1) {
                    if !user.may_use_channel(pattern, true) {
                        return Some(Denied::Channel(p));
                    }
                }
            }
            None => {}
        }
    }
    None
}

impl Core {
    /// Whether the connection's `user` may run `args`, resolved to `spec`; None when it may.
    /// The default user with every permission (the usual case) costs one comparison.
    pub(crate) fn acl_denied(
        &self,
        user: Option<&Bytes>,
        spec: &CommandSpec,
        args: &[Bytes],
    ) -> Option<Denied> {
        let name = user?;
        if self.acl.default_unrestricted && &name[..] == b"default" {
            return None;
        }
        // A deleted user's connections are closed; until they are, they may run nothing.
        let Some(u) = self.acl.users.get(name) else {
            return Some(Denied::Command);
        };
        check_user(&self.acl, u, spec, args)
    }

    /// Records a refusal in the ACL log.
    pub(crate) fn acl_log_denied(
        &mut self,
        conn: ConnId,
        spec: &CommandSpec,
        args: &[Bytes],
        denied: &Denied,
        context: LogContext,
    ) {
        let (reason, object) = match denied {
            Denied::Command => (LogReason::Command, Bytes::from_static(spec.name.as_bytes())),
            Denied::Key(p) => (LogReason::Key, args[*p].clone()),
            Denied::Channel(p) => (LogReason::Channel, args[*p].clone()),
        };
        self.acl_log(conn, reason, context, object, None);
    }

    fn acl_log(
        &mut self,
        conn: ConnId,
        reason: LogReason,
        context: LogContext,
        object: Bytes,
        username: Option<Bytes>,
    ) {
        let now_ms = self.now.as_millis();
        let (user, client_info) = match self.clients.get(&conn) {
            Some(c) => (c.user.clone().unwrap_or_default(), c.info_line(now_ms, &[])),
            None => (Bytes::new(), String::new()),
        };
        let entry = LogEntry {
            count: 1,
            reason,
            context,
            object,
            username: username.unwrap_or(user),
            at_ms: now_ms,
            client_info,
        };
        let max = self.config.acllog_max_len;
        self.acl.log_event(entry, max);
    }

    /// AUTH and HELLO AUTH: logs the connection in as `user` if the password is right, or
    /// logs the failure (as Redis, naming the command that tried).
    pub(crate) fn authenticate(
        &mut self,
        conn: ConnId,
        command: &Bytes,
        user: &[u8],
        pass: &[u8],
    ) -> Result<(), &'static str> {
        let ok = self
            .acl
            .users
            .get(user)
            .is_some_and(|u| u.enabled && u.password_ok(pass));
        if !ok {
            self.acl_log(
                conn,
                LogReason::Auth,
                LogContext::Toplevel,
                command.clone(),
                Some(Bytes::copy_from_slice(user)),
            );
            return Err("WRONGPASS invalid username-password pair or user is disabled.");
        }
        if let Some(c) = self.clients.get_mut(&conn) {
            c.authenticated = true;
            c.user = Some(Bytes::copy_from_slice(user));
        }
        Ok(())
    }

    /// Closes the connections of users that are gone (DELUSER, ACL LOAD). The calling
    /// connection gets its reply first, as Redis closes it after the command.
    fn close_clients_of(&mut self, gone: impl Fn(&Bytes) -> bool) {
        let victims: Vec<ConnId> = self
            .clients
            .values()
            .filter(|c| c.user.as_ref().is_some_and(&gone))
            .map(|c| c.id)
            .collect();
        for v in victims {
            self.close_client(v);
        }
    }

    /// After `name`'s channel permissions changed: its subscribers to a channel or pattern it
    /// may no longer use are disconnected, as in Redis.
    fn close_revoked_subscribers(&mut self, name: &Bytes) {
        let Some(user) = self.acl.users.get(name) else {
            return;
        };
        if user.all_channels {
            return;
        }
        let victims: Vec<ConnId> = self
            .clients
            .values()
            .filter(|c| c.user.as_ref() == Some(name))
            .filter(|c| {
                c.channels
                    .iter()
                    .chain(c.shard_channels.iter())
                    .any(|ch| !user.may_use_channel(ch, false))
                    || c.patterns.iter().any(|p| !user.may_use_channel(p, true))
            })
            .map(|c| c.id)
            .collect();
        for v in victims {
            self.close_client(v);
        }
    }

    /// The driver finished the oldest ACL file request: `result` is the file's contents for
    /// a LOAD (or why it could not be read), nothing for a SAVE (or why it failed). The
    /// waiting client gets its reply.
    pub(crate) fn acl_file_done(&mut self, result: Result<Option<Bytes>, String>) {
        let Some((conn, op)) = self.acl.file_waiters.pop_front() else {
            return;
        };
        let reply: Result<(), String> = match op {
            FileOp::Save { .. } => result.map(|_| ()).map_err(|_| SAVE_FAILED.to_string()),
            FileOp::Load { path } => match result {
                Err(e) => Err(format!(
                    "ERR Error loading ACLs, opening file '{path}': {e}"
                )),
                Ok(text) => self
                    .install_acl_file(&path, text.as_deref().unwrap_or_default())
                    .map_err(|e| format!("ERR {e}")),
            },
        };
        if self.unpark(conn).is_some() {
            self.write_to(conn, |w| match &reply {
                Ok(()) => w.ok(),
                Err(e) => w.error(e.as_bytes()),
            });
            self.released.push(conn);
        }
    }

    /// Replaces every user with those of an ACL file, or changes nothing if it has errors.
    /// Connections of the users replaced are closed, as Redis frees them; the default user
    /// keeps its connections and takes its new rules.
    pub(crate) fn install_acl_file(&mut self, path: &str, text: &[u8]) -> Result<(), String> {
        let users = self
            .acl
            .parse_file(path, text, self.config.acl_pubsub_all)?;
        self.acl.users = users;
        self.acl.refresh();
        self.close_clients_of(|u| &u[..] != b"default");
        Ok(())
    }
}

fn acl_setuser(core: &mut Core, call: &mut Call) {
    let name = call.args[2].clone();
    if !crate::acl::valid_user_name(&name) {
        return call.error("ERR Usernames can't contain spaces or null characters");
    }
    let pubsub_all = core.config.acl_pubsub_all;
    match core.acl.set_user(&name, &call.args[3..], pubsub_all) {
        Ok(()) => {
            core.close_revoked_subscribers(&name);
            call.ok();
        }
        Err((rule, e)) => call.error(&format!(
            "ERR Error in ACL SETUSER modifier '{}': {}",
            String::from_utf8_lossy(&rule),
            e.text()
        )),
    }
}

fn acl_deluser(core: &mut Core, call: &mut Call) {
    if call.args[2..].iter().any(|n| &n[..] == b"default") {
        return call.error("ERR The 'default' user cannot be removed");
    }
    let mut deleted = Vec::new();
    for n in &call.args[2..] {
        if core.acl.users.remove(n).is_some() {
            deleted.push(n.clone());
        }
    }
    call.out.integer(deleted.len() as i64);
    core.close_clients_of(|u| deleted.contains(u));
}

fn acl_getuser(core: &mut Core, call: &mut Call) {
    let Some(u) = core.acl.users.get(call.arg(2)) else {
        return call.out.null();
    };
    let flags = u.flags();
    call.out.map_len(6);
    call.out.bulk(b"flags");
    call.out.set_len(flags.len());
    for f in flags {
        call.out.bulk(f.as_bytes());
    }
    call.out.bulk(b"passwords");
    call.out.array_len(u.passwords.len());
    for p in &u.passwords {
        call.out.bulk(p.as_bytes());
    }
    call.out.bulk(b"commands");
    call.out.bulk(u.commands_text(&core.acl.catalog).as_bytes());
    call.out.bulk(b"keys");
    call.out.bulk(u.keys_text().as_bytes());
    call.out.bulk(b"channels");
    call.out.bulk(u.channels_text().as_bytes());
    call.out.bulk(b"selectors");
    call.out.array_len(0);
}

fn acl_list(core: &mut Core, call: &mut Call) {
    let text = core.acl.file_text();
    let lines: Vec<&str> = text.lines().collect();
    call.out.array_len(lines.len());
    for l in lines {
        call.out.bulk(l.as_bytes());
    }
}

fn acl_users(core: &mut Core, call: &mut Call) {
    call.out.array_len(core.acl.users.len());
    for name in core.acl.users.keys() {
        call.out.bulk(name);
    }
}

fn acl_whoami(core: &mut Core, call: &mut Call) {
    match core.clients.get(&call.conn).and_then(|c| c.user.clone()) {
        Some(u) => call.out.bulk(&u),
        None => call.out.null(),
    }
}

fn acl_cat(core: &mut Core, call: &mut Call) {
    match call.argc() {
        2 => {
            call.out.array_len(crate::acl::CATEGORIES.len());
            for c in crate::acl::CATEGORIES {
                call.out.bulk(c.as_bytes());
            }
        }
        3 => {
            let Some(bit) = crate::acl::category_bit(call.arg(2)) else {
                let name = String::from_utf8_lossy(&call.arg(2)[..call.arg(2).len().min(128)])
                    .into_owned();
                return call.error(&format!("ERR Unknown category '{name}'"));
            };
            let names = core.acl.catalog.names_in(bit);
            call.out.array_len(names.len());
            for n in names {
                call.out.bulk(n.as_bytes());
            }
        }
        _ => call.subcommand_syntax_error(),
    }
}

/// Redis's bound on ACL GENPASS's length.
const GENPASS_MAX_BITS: i64 = 4096;

fn acl_genpass(core: &mut Core, call: &mut Call) {
    let bits = match call.argc() {
        2 => 256,
        3 => match parse_i64(call.arg(2)) {
            Some(b) => b,
            None => return call.error(crate::args::NOT_INTEGER),
        },
        _ => return call.subcommand_syntax_error(),
    };
    if bits <= 0 || bits > GENPASS_MAX_BITS {
        return call.error(&format!("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to {GENPASS_MAX_BITS}"));
    }
    let chars = (bits as usize).div_ceil(4);
    let mut pass = String::with_capacity(chars + 16);
    while pass.len() < chars {
        pass.push_str(&format!("{:016x}", core.random_u64()));
    }
    pass.truncate(chars);
    call.out.bulk(pass.as_bytes());
}

fn acl_log(core: &mut Core, call: &mut Call) {
    let mut count: usize = 10;
    match call.argc() {
        2 => {}
        3 if is(call.arg(2), "reset") => {
            core.acl.log.clear();
            return call.ok();
        }
        3 => match parse_i64(call.arg(2)) {
            Some(n) => count = n.max(0) as usize,
            None => return call.error(crate::args::NOT_INTEGER),
        },
        _ => return call.subcommand_syntax_error(),
    }
    let now_ms = call.now_ms;
    let entries: Vec<&LogEntry> = core.acl.log.iter().take(count).collect();
    call.out.array_len(entries.len());
    for e in entries {
        call.out.map_len(7);
        call.out.bulk(b"count");
        call.out.integer(e.count as i64);
        call.out.bulk(b"reason");
        call.out.bulk(match e.reason {
            LogReason::Command => b"command" as &[u8],
            LogReason::Key => b"key",
            LogReason::Channel => b"channel",
            LogReason::Auth => b"auth",
        });
        call.out.bulk(b"context");
        call.out.bulk(match e.context {
            LogContext::Toplevel => b"toplevel" as &[u8],
            LogContext::Multi => b"multi",
            LogContext::Lua => b"lua",
        });
        call.out.bulk(b"object");
        call.out.bulk(&e.object);
        call.out.bulk(b"username");
        call.out.bulk(&e.username);
        call.out.bulk(b"age-seconds");
        call.out
            .double(now_ms.saturating_sub(e.at_ms) as f64 / 1000.0);
        call.out.bulk(b"client-info");
        call.out.bulk(e.client_info.as_bytes());
    }
}

fn acl_dryrun(core: &mut Core, call: &mut Call) {
    let Some(user) = core.acl.users.get(call.arg(2)) else {
        let name = String::from_utf8_lossy(call.arg(2)).into_owned();
        return call.error(&format!("ERR User '{name}' not found"));
    };
    let args = &call.args[3..];
    let spec = match crate::dispatch::resolve(core, args) {
        Ok(spec) => spec,
        Err(crate::dispatch::Unresolved::Arity(spec)) => {
            return call.error(&format!(
                "ERR wrong number of arguments for '{}' command",
                spec.name
            ))
        }
        Err(_) => {
            let name = String::from_utf8_lossy(&args[0]).into_owned();
            return call.error(&format!("ERR Command '{name}' not found"));
        }
    };
    match check_user(&core.acl, user, spec, args) {
        None => call.ok(),
        Some(d) => call.out.bulk(d.dryrun_text(spec.name, args).as_bytes()),
    }
}

/// ACL LOAD and SAVE: the driver reads or writes the file; the client waits, parked, for
/// its answer (`Core::acl_file_done`).
fn file_request(core: &mut Core, call: &mut Call, save: bool) {
    let Some(path) = core.config.aclfile.clone() else {
        return call.error(NO_FILE);
    };
    if call.in_exec {
        // A transaction cannot wait for the driver.
        return call.error("ERR ACL LOAD and ACL SAVE cannot run inside a transaction");
    }
    let op = if save {
        FileOp::Save {
            path,
            text: Bytes::from(core.acl.file_text()),
        }
    } else {
        FileOp::Load { path }
    };
    core.acl.file_out.push_back(op.clone());
    core.acl.file_waiters.push_back((call.conn, op));
    core.block(call, &[], None, TimeoutReply::NullArray);
}

fn acl_load(core: &mut Core, call: &mut Call) {
    file_request(core, call, false);
}

fn acl_save(core: &mut Core, call: &mut Call) {
    file_request(core, call, true);
}

fn acl_help(_core: &mut Core, call: &mut Call) {
    call.help(&[
        "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CAT [<category>]",
        "    List all commands that belong to <category>, or all command categories",
        "    when no category is specified.",
        "DELUSER <username> [<username> ...]",
        "    Delete a list of users.",
        "DRYRUN <username> <command> [<arg> ...]",
        "    Returns whether the user can execute the given command without executing the command.",
        "GETUSER <username>",
        "    Get the user's details.",
        "GENPASS [<bits>]",
        "    Generate a secure 256-bit user password. The optional `bits` argument can",
        "    be used to specify a different size.",
        "LIST",
        "    Show users details in config file format.",
        "LOAD",
        "    Reload users from the ACL file.",
        "LOG [<count> | RESET]",
        "    Show the ACL log entries.",
        "SAVE",
        "    Save the current config to the ACL file.",
        "SETUSER <username> <attribute> [<attribute> ...]",
        "    Create or modify a user with the specified attributes.",
        "USERS",
        "    List all the registered usernames.",
        "WHOAMI",
        "    Return the current connection username.",
        "HELP",
        "    Print this help.",
    ]);
}

//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH.
//!
//! EXEC runs the queued commands back to back inside one call of the node, which executes one
//! request at a time, so no other client's command can interleave: atomic and isolated by
//! construction. WATCH is optimistic: any change reported through `Core::modified` (writes,
//! deletes, expiry, FLUSH) marks the watching clients, and their next EXEC fails. As in Redis
//! 7.0, a key live when watched that expires before EXEC fails it too (reclaimed or not), and
//! a key already expired when watched changes nothing by being reclaimed.

use crate::client::MultiState;
use crate::command::{spec, Call, Flag};
use crate::ctx::{CommandSpec, Core};

const TX: &str = "transactions";

pub const COMMANDS: &[CommandSpec] = &[
    spec(
        "multi",
        1,
        &["noscript", "loading", "stale", "fast", "allow-busy"],
        (0, 0, 0),
        TX,
        "1.2.0",
        "Starts a transaction.",
        multi,
    )
    .with(Flag::RunsInsideMulti),
    spec(
        "exec",
        1,
        &["noscript", "loading", "stale", "skip-slowlog"],
        (0, 0, 0),
        TX,
        "1.2.0",
        "Executes all commands in a transaction.",
        exec,
    )
    .with(Flag::RunsInsideMulti),
    spec(
        "discard",
        1,
        &["noscript", "loading", "stale", "fast", "allow-busy"],
        (0, 0, 0),
        TX,
        "2.0.0",
        "Discards a transaction.",
        discard,
    )
    .with(Flag::RunsInsideMulti),
    spec(
        "watch",
        -2,
        &["noscript", "loading", "stale", "fast", "allow-busy"],
        (1, -1, 1),
        TX,
        "2.2.0",
        "Monitors changes to keys to determine the execution of a transaction.",
        watch,
    )
    .with(Flag::RunsInsideMulti),
    spec(
        "unwatch",
        1,
        &["noscript", "loading", "stale", "fast", "allow-busy"],
        (0, 0, 0),
        TX,
        "2.2.0",
        "Forgets about watched keys of a transaction.",
        unwatch,
    ),
];

fn multi(core: &mut Core, call: &mut Call) {
    let Some(c) = core.clients.get_mut(&call.conn) else {
        return;
    };
    if c.multi.is_some() {
        return call.error("ERR MULTI calls can not be nested");
    }
    c.multi = Some(MultiState::default());
    call.ok();
}

fn discard(core: &mut Core, call: &mut Call) {
    let Some(c) = core.clients.get_mut(&call.conn) else {
        return;
    };
    if c.multi.take().is_none() {
        return call.error("ERR DISCARD without MULTI");
    }
    core.unwatch_all(call.conn);
    call.ok();
}

fn exec(core: &mut Core, call: &mut Call) {
    let Some(c) = core.clients.get_mut(&call.conn) else {
        return;
    };
    let Some(multi) = c.multi.take() else {
        return call.error("ERR EXEC without MULTI");
    };
    // A key live when watched that has expired since breaks the transaction, reclaimed
    // (which marked it dirty) or not.
    let now_ms = call.now.as_millis();
    let expired = c.watched.iter().any(|k| {
        !c.watched_expired.contains(k) && core.db.get_raw(k).is_some_and(|e| e.is_expired(now_ms))
    });
    let dirty = c.dirty_cas || expired;
    core.unwatch_all(call.conn);
    if multi.errored {
        return call.error("EXECABORT Transaction discarded because of previous errors.");
    }
    if dirty {
        return call.out.null_array();
    }
    call.out.array_len(multi.queued.len());
    for args in &multi.queued {
        let mut sub = Call::new(call.conn, args, call.now, call.out.reborrow());
        sub.in_exec = true;
        // Resolved when queued, so this finds the same command again.
        let user = core.clients.get(&call.conn).and_then(|c| c.user.clone());
        let resolved = crate::dispatch::resolve(core, args);
        // Permissions are checked again: the rules may have changed since it was queued.
        let denied = resolved
            .as_ref()
            .ok()
            .and_then(|spec| core.acl_denied(user.as_ref(), spec, args));
        match resolved {
            Ok(spec) if denied.is_some() => {
                let denied = denied.expect("checked");
                let context = crate::acl::LogContext::Multi;
                core.acl_log_denied(call.conn, spec, args, &denied, context);
                sub.error(&denied.exec_message());
            }
            Ok(spec) => {
                use crate::cmd::monitor::Source;
                let monitored = !core.monitors.is_empty();
                if monitored {
                    core.feed_monitors(call.conn, spec, args, Source::Client, true);
                }
                core.run_handler(spec, &mut sub);
                if monitored {
                    core.feed_monitors(call.conn, spec, args, Source::Client, false);
                }
            }
            Err(unresolved) => sub.error_bytes(&unresolved.message(args)),
        }
        if core.timing_wanted() {
            core.timing_note(call.conn, args.clone());
        }
        if let Some(code) = sub.take_error_for_stats() {
            core.stats.total_error_replies += 1;
            *core.stats.errors.entry(code).or_insert(0) += 1;
        }
        // A queued command may change the protocol (HELLO) for what follows.
        let proto = sub.out.protocol();
        call.out.set_protocol(proto);
    }
}

fn watch(core: &mut Core, call: &mut Call) {
    let conn = call.conn;
    let Some(c) = core.clients.get_mut(&conn) else {
        return;
    };
    if c.multi.is_some() {
        return call.error("ERR WATCH inside MULTI is not allowed");
    }
    let now_ms = call.now.as_millis();
    for key in &call.args[1..] {
        let expired = core.db.get_raw(key).is_some_and(|e| e.is_expired(now_ms));
        let c = core.clients.get_mut(&conn).expect("checked above");
        if c.watched.iter().any(|k| k == key) {
            continue;
        }
        if expired {
            c.watched_expired.insert(key.clone());
        }
        c.watched.push(key.clone());
        core.watched_keys
            .entry(key.clone())
            .or_default()
            .insert(conn);
    }
    call.ok();
}

fn unwatch(core: &mut Core, call: &mut Call) {
    core.unwatch_all(call.conn);
    call.ok();
}

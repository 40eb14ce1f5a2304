//! CLIENT TRACKING, CLIENT CACHING, CLIENT GETREDIR and CLIENT TRACKINGINFO: client-side
//! caching's commands, with Redis 7.0's options, checks and error texts. What tracking does
//! to reads and changes is `crate::ctx::tracking`.

use std::collections::BTreeSet;

use bytes::Bytes;

use crate::args::{is, parse_i64, NOT_INTEGER};
use crate::client::{ClientTracking, ConnId};
use crate::command::Call;
use crate::ctx::Core;
use crate::tracking::prefixes_overlap;

/// `CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN] [OPTOUT] [NOLOOP]`.
pub(crate) fn client_tracking(core: &mut Core, call: &mut Call) {
    let mut wanted = ClientTracking::default();
    let mut prefixes: Vec<Bytes> = Vec::new();
    let mut j = 3;
    while j < call.argc() {
        let more = j + 1 < call.argc();
        let a = call.arg(j);
        if is(a, "redirect") && more {
            j += 1;
            if wanted.redirect != 0 {
                return call.error("ERR A client can only redirect to a single other client");
            }
            let Some(id) = parse_i64(call.arg(j)) else {
                return call.error(NOT_INTEGER);
            };
            if id <= 0 || !core.clients.contains_key(&ConnId(id as u64)) {
                return call.error("ERR The client ID you want redirect to does not exist");
            }
            wanted.redirect = id as u64;
        } else if is(a, "bcast") {
            wanted.bcast = true;
        } else if is(a, "optin") {
            wanted.optin = true;
        } else if is(a, "optout") {
            wanted.optout = true;
        } else if is(a, "noloop") {
            wanted.noloop = true;
        } else if is(a, "prefix") && more {
            j += 1;
            prefixes.push(call.args[j].clone());
        } else {
            return call.syntax_error();
        }
        j += 1;
    }
    let conn = call.conn;
    if is(call.arg(2), "off") {
        core.tracking_disable(conn);
        return call.ok();
    }
    if !is(call.arg(2), "on") {
        return call.syntax_error();
    }
    if let Err(e) = check_options(core.tracking_of(conn), &wanted, &prefixes) {
        return call.error(&e);
    }
    enable(core, conn, wanted, prefixes);
    call.ok();
}

/// Redis's checks of the options against each other and against the tracking already on.
fn check_options(
    now: Option<&ClientTracking>,
    wanted: &ClientTracking,
    prefixes: &[Bytes],
) -> Result<(), String> {
    if !wanted.bcast && !prefixes.is_empty() {
        return Err("ERR PREFIX option requires BCAST mode to be enabled".into());
    }
    if now.is_some_and(|t| t.bcast != wanted.bcast) {
        return Err("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.".into());
    }
    if wanted.bcast && (wanted.optin || wanted.optout) {
        return Err("ERR OPTIN and OPTOUT are not compatible with BCAST".into());
    }
    if wanted.optin && wanted.optout {
        return Err("ERR You can't specify both OPTIN mode and OPTOUT mode".into());
    }
    if now.is_some_and(|t| (wanted.optin && t.optout) || (wanted.optout && t.optin)) {
        return Err("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.".into());
    }
    if wanted.bcast {
        for (i, p) in prefixes.iter().enumerate() {
            let text = String::from_utf8_lossy(p);
            if let Some(old) = now
                .into_iter()
                .flat_map(|t| t.prefixes.iter())
                .find(|old| prefixes_overlap(old, p))
            {
                return Err(format!(
                    "ERR Prefix '{text}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                    String::from_utf8_lossy(old)
                ));
            }
            if let Some(other) = prefixes[i + 1..].iter().find(|o| prefixes_overlap(p, o)) {
                return Err(format!(
                    "ERR Prefix '{text}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                    String::from_utf8_lossy(other)
                ));
            }
        }
    }
    Ok(())
}

/// Turns tracking on (or changes its options): like Redis, the redirect and the flags are
/// replaced, BCAST prefixes are added to those the client has.
fn enable(core: &mut Core, conn: ConnId, wanted: ClientTracking, prefixes: Vec<Bytes>) {
    let Some(client) = core.clients.get_mut(&conn) else {
        return;
    };
    let was_on = client.tracking.is_some();
    let t = client.tracking.get_or_insert_with(Default::default);
    t.redirect = wanted.redirect;
    t.bcast = wanted.bcast;
    t.optin = wanted.optin;
    t.optout = wanted.optout;
    t.noloop = wanted.noloop;
    t.broken_redirect = false;
    let mut added: BTreeSet<Bytes> = BTreeSet::new();
    if wanted.bcast {
        if prefixes.is_empty() {
            added.insert(Bytes::new());
        }
        added.extend(prefixes);
        t.prefixes.extend(added.iter().cloned());
    }
    if !was_on {
        core.tracking.clients += 1;
    }
    for p in &added {
        core.tracking.add_prefix(p, conn);
    }
}

pub(crate) fn client_caching(core: &mut Core, call: &mut Call) {
    let yes = is(call.arg(2), "yes");
    let no = is(call.arg(2), "no");
    let Some(t) = core
        .clients
        .get_mut(&call.conn)
        .and_then(|c| c.tracking.as_mut())
    else {
        return call.error("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled");
    };
    if yes {
        if !t.optin {
            return call.error(
                "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
            );
        }
    } else if no {
        if !t.optout {
            return call.error(
                "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
            );
        }
    } else {
        return call.syntax_error();
    }
    t.caching = true;
    call.ok();
}

pub(crate) fn client_getredir(core: &mut Core, call: &mut Call) {
    match core.tracking_of(call.conn) {
        Some(t) => call.out.integer(t.redirect as i64),
        None => call.out.integer(-1),
    }
}

pub(crate) fn client_trackinginfo(core: &mut Core, call: &mut Call) {
    let t = core.tracking_of(call.conn).cloned();
    call.out.map_len(3);
    call.out.bulk(b"flags");
    let Some(t) = t else {
        call.out.set_len(1);
        call.out.bulk(b"off");
        call.out.bulk(b"redirect");
        call.out.integer(-1);
        call.out.bulk(b"prefixes");
        call.out.array_len(0);
        return;
    };
    let flags: Vec<&[u8]> = [
        (true, &b"on"[..]),
        (t.bcast, b"bcast"),
        (t.optin, b"optin"),
        (t.optin && t.caching, b"caching-yes"),
        (t.optout, b"optout"),
        (t.optout && t.caching, b"caching-no"),
        (t.noloop, b"noloop"),
        (t.broken_redirect, b"broken_redirect"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect();
    call.out.set_len(flags.len());
    for f in flags {
        call.out.bulk(f);
    }
    call.out.bulk(b"redirect");
    call.out.integer(t.redirect as i64);
    call.out.bulk(b"prefixes");
    call.out.array_len(t.prefixes.len());
    for p in &t.prefixes {
        call.out.bulk(p);
    }
}

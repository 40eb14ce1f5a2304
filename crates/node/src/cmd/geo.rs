//! GEO commands: GEOADD, GEODIST, GEOHASH, GEOPOS, GEOSEARCH, GEOSEARCHSTORE, GEORADIUS,
//! GEORADIUSBYMEMBER and their read-only variants. As in Redis, a geo set is a sorted set whose
//! scores are 52-bit geohashes (see `hash`), so ZRANGE, ZREM and the rest work on it, and a
//! sorted set written by ZADD is searched as whatever points its scores encode.

pub mod hash;
#[cfg(test)]
mod tests;

use lattice_resp::Protocol;
use lattice_store::ZSet;

use crate::args::{is, parse_i64, NOT_FLOAT, NOT_INTEGER};
use crate::cmd::set::WrongType;
use crate::cmd::typed;
use crate::cmd::zset::{parse_add_flags, parse_score, store_result, zadd_generic};
use crate::command::{spec, Call};
use crate::ctx::{CommandSpec, Core};
use hash::{Shape, ShapeKind};

const GEO: &str = "geo";

// One line per command reads best as a table.
#[rustfmt::skip]
pub const COMMANDS: &[CommandSpec] = &[
    spec("geoadd", -5, &["write", "denyoom"], (1, 1, 1), GEO, "3.2.0", "Add one or more geospatial items in the geospatial index represented using a sorted set", geoadd),
    spec("geodist", -4, &["readonly"], (1, 1, 1), GEO, "3.2.0", "Returns the distance between two members of a geospatial index", geodist),
    spec("geohash", -2, &["readonly"], (1, 1, 1), GEO, "3.2.0", "Returns members of a geospatial index as standard geohash strings", geohash),
    spec("geopos", -2, &["readonly"], (1, 1, 1), GEO, "3.2.0", "Returns longitude and latitude of members of a geospatial index", geopos),
    spec("georadius", -6, &["write", "denyoom", "movablekeys"], (1, 1, 1), GEO, "3.2.0", "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a point", georadius),
    spec("georadius_ro", -6, &["readonly"], (1, 1, 1), GEO, "3.2.10", "A read-only variant for GEORADIUS", georadius_ro),
    spec("georadiusbymember", -5, &["write", "denyoom", "movablekeys"], (1, 1, 1), GEO, "3.2.0", "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance from a member", georadiusbymember),
    spec("georadiusbymember_ro", -5, &["readonly"], (1, 1, 1), GEO, "3.2.10", "A read-only variant for GEORADIUSBYMEMBER", georadiusbymember_ro),
    spec("geosearch", -7, &["readonly"], (1, 1, 1), GEO, "6.2.0", "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle.", geosearch),
    spec("geosearchstore", -8, &["write", "denyoom"], (1, 2, 1), GEO, "6.2.0", "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle, and store the result in another key.", geosearchstore),
];

/// A double argument as Redis's `getDoubleFromObjectOrReply` reads it.
fn double_or(call: &mut Call, arg: &[u8], msg: &str) -> Option<f64> {
    let v = parse_score(arg);
    if v.is_none() {
        call.error(msg);
    }
    v
}

/// A longitude, latitude pair within the GEO limits, or an error reply.
fn long_lat(call: &mut Call, at: usize) -> Option<(f64, f64)> {
    let long = double_or(call, call.arg(at), NOT_FLOAT)?;
    let lat = double_or(call, call.arg(at + 1), NOT_FLOAT)?;
    if !(hash::LONG_MIN..=hash::LONG_MAX).contains(&long)
        || !(hash::LAT_MIN..=hash::LAT_MAX).contains(&lat)
    {
        call.error(&format!(
            "ERR invalid longitude,latitude pair {long:.6},{lat:.6}"
        ));
        return None;
    }
    Some((long, lat))
}

/// Meters per unit (m, km, ft, mi), or an error reply.
fn unit(call: &mut Call, arg: &[u8]) -> Option<f64> {
    let u = if is(arg, "m") {
        1.0
    } else if is(arg, "km") {
        1000.0
    } else if is(arg, "ft") {
        0.3048
    } else if is(arg, "mi") {
        1609.34
    } else {
        call.error("ERR unsupported unit provided. please use M, KM, FT, MI");
        return None;
    };
    Some(u)
}

/// A distance in the "%.4f" form Redis replies with.
fn reply_distance(call: &mut Call, d: f64) {
    call.out.bulk(format!("{d:.4}").as_bytes());
}

/// A coordinate as Redis's `addReplyHumanLongDouble` writes it: "%.17Lf" without trailing
/// zeros, a bulk string in RESP2 and a double in RESP3.
fn reply_coord(call: &mut Call, v: f64) {
    let mut s = format!("{v:.17}");
    if s.contains('.') {
        let t = s.trim_end_matches('0').trim_end_matches('.').len();
        s.truncate(t);
    }
    if s == "-0" {
        s = "0".to_string();
    }
    match call.out.protocol() {
        Protocol::Resp2 => call.out.bulk(s.as_bytes()),
        Protocol::Resp3 => {
            let mut line = Vec::with_capacity(s.len() + 3);
            line.push(b',');
            line.extend_from_slice(s.as_bytes());
            line.extend_from_slice(b"\r\n");
            call.out.raw(&line);
        }
    }
}

/// GEOADD key [NX|XX] [CH] longitude latitude member [...]: ZADD with each point's geohash
/// as its score (the same replies, errors after the option words, and `zadd` event).
fn geoadd(core: &mut Core, call: &mut Call) {
    let (f, idx) = parse_add_flags(call, false);
    let rest = call.argc() - idx;
    if !rest.is_multiple_of(3) || (f.nx && f.xx) || rest == 0 {
        return call.syntax_error();
    }
    let mut pairs: Vec<(f64, &[u8])> = Vec::with_capacity(rest / 3);
    for i in (idx..call.argc()).step_by(3) {
        let Some((long, lat)) = long_lat(call, i) else {
            return;
        };
        pairs.push((hash::score_of(long, lat) as f64, call.arg(i + 2)));
    }
    zadd_generic(core, call, f, &pairs);
}

/// GEODIST key member1 member2 [unit]: nil when either member is missing.
fn geodist(core: &mut Core, call: &mut Call) {
    let mut to_meter = 1.0;
    if call.argc() == 5 {
        match unit(call, call.arg(4)) {
            Some(u) => to_meter = u,
            None => return,
        }
    } else if call.argc() > 5 {
        return call.syntax_error();
    }
    let z = match typed::read::<ZSet>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(None) => return call.out.null(),
        Ok(Some(z)) => z,
    };
    let (Some(s1), Some(s2)) = (z.score(call.arg(2)), z.score(call.arg(3))) else {
        return call.out.null();
    };
    let (a, b) = (hash::decode_score(s1), hash::decode_score(s2));
    reply_distance(call, hash::distance(a.0, a.1, b.0, b.1) / to_meter);
}

/// GEOHASH key [member ...]: one 11-character geohash (or nil) per member.
fn geohash(core: &mut Core, call: &mut Call) {
    let z = match typed::read::<ZSet>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(z) => z,
    };
    call.out.array_len(call.argc() - 2);
    for j in 2..call.argc() {
        match z.as_ref().and_then(|z| z.score(call.arg(j))) {
            None => call.out.null(),
            Some(s) => call.out.bulk(&hash::geohash_string(s)),
        }
    }
}

/// GEOPOS key [member ...]: [longitude, latitude] (or a null array) per member.
fn geopos(core: &mut Core, call: &mut Call) {
    let scores: Vec<Option<f64>> = match typed::read::<ZSet>(core, call.arg(1), call.now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(z) => (2..call.argc())
            .map(|j| z.as_ref().and_then(|z| z.score(call.arg(j))))
            .collect(),
    };
    call.out.array_len(scores.len());
    for s in scores {
        match s {
            None => call.out.null_array(),
            Some(s) => {
                let (long, lat) = hash::decode_score(s);
                call.out.array_len(2);
                reply_coord(call, long);
                reply_coord(call, lat);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Searches

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// GEORADIUS[_RO]: centre and radius at fixed positions.
    Coords,
    /// GEORADIUSBYMEMBER[_RO].
    Member,
    /// GEOSEARCH: FROMMEMBER/FROMLONLAT and BYRADIUS/BYBOX options.
    Search,
    /// GEOSEARCHSTORE: GEOSEARCH with a destination before the source.
    SearchStore,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    None,
    Asc,
    Desc,
}

struct Point {
    member: Vec<u8>,
    score: f64,
    dist: f64,
    long: f64,
    lat: f64,
}

fn georadius(core: &mut Core, call: &mut Call) {
    search(core, call, Variant::Coords, true);
}

fn georadius_ro(core: &mut Core, call: &mut Call) {
    search(core, call, Variant::Coords, false);
}

fn georadiusbymember(core: &mut Core, call: &mut Call) {
    search(core, call, Variant::Member, true);
}

fn georadiusbymember_ro(core: &mut Core, call: &mut Call) {
    search(core, call, Variant::Member, false);
}

fn geosearch(core: &mut Core, call: &mut Call) {
    search(core, call, Variant::Search, false);
}

fn geosearchstore(core: &mut Core, call: &mut Call) {
    search(core, call, Variant::SearchStore, false);
}

/// The point a member of `z` stands for.
fn member_point(z: Option<&ZSet>, member: &[u8]) -> Option<(f64, f64)> {
    z?.score(member).map(hash::decode_score)
}

/// A radius and unit, or an error reply.
fn radius_arg(call: &mut Call, at: usize) -> Option<(f64, f64)> {
    let r = double_or(call, call.arg(at), "ERR need numeric radius")?;
    if r < 0.0 {
        call.error("ERR radius cannot be negative");
        return None;
    }
    let u = unit(call, call.arg(at + 1))?;
    Some((r, u))
}

/// Redis's `georadiusGeneric`: parses the options in Redis's order (so the same error wins),
/// then visits the search boxes and replies or stores.
fn search(core: &mut Core, call: &mut Call, variant: Variant, may_store: bool) {
    let now_ms = call.now_ms;
    let src_idx = if variant == Variant::SearchStore {
        2
    } else {
        1
    };
    let z: Option<&ZSet> = match typed::read::<ZSet>(core, call.arg(src_idx), now_ms) {
        Err(WrongType) => return call.wrong_type(),
        Ok(z) => z.map(|z| &*z),
    };
    let mut center: Option<(f64, f64)> = None;
    let mut kind: Option<ShapeKind> = None;
    let mut conversion = 1.0;
    let mut storekey: Option<&[u8]> = None;
    let mut storedist = false;
    let base = match variant {
        Variant::Coords => {
            let Some(c) = long_lat(call, 2) else { return };
            let Some((r, u)) = radius_arg(call, 4) else {
                return;
            };
            center = Some(c);
            kind = Some(ShapeKind::Radius(r));
            conversion = u;
            6
        }
        Variant::Member => {
            if z.is_some() {
                let Some(c) = member_point(z, call.arg(2)) else {
                    return call.error("ERR could not decode requested zset member");
                };
                let Some((r, u)) = radius_arg(call, 3) else {
                    return;
                };
                center = Some(c);
                kind = Some(ShapeKind::Radius(r));
                conversion = u;
            }
            5
        }
        Variant::Search => 2,
        Variant::SearchStore => {
            storekey = Some(call.arg(1));
            3
        }
    };
    let searching = matches!(variant, Variant::Search | Variant::SearchStore);
    let (mut withdist, mut withhash, mut withcoord, mut any) = (false, false, false, false);
    let (mut frommember, mut fromloc, mut byradius, mut bybox) = (false, false, false, false);
    let mut sort = Sort::None;
    let mut count: i64 = 0;
    let argc = call.argc();
    let remaining = argc - base;
    let mut i = 0;
    while i < remaining {
        let at = base + i;
        let arg = call.arg(at);
        if is(arg, "withdist") {
            withdist = true;
        } else if is(arg, "withhash") {
            withhash = true;
        } else if is(arg, "withcoord") {
            withcoord = true;
        } else if is(arg, "any") {
            any = true;
        } else if is(arg, "asc") {
            sort = Sort::Asc;
        } else if is(arg, "desc") {
            sort = Sort::Desc;
        } else if is(arg, "count") && i + 1 < remaining {
            match parse_i64(call.arg(at + 1)) {
                None => return call.error(NOT_INTEGER),
                Some(n) if n <= 0 => return call.error("ERR COUNT must be > 0"),
                Some(n) => count = n,
            }
            i += 1;
        } else if (is(arg, "store") || is(arg, "storedist"))
            && i + 1 < remaining
            && may_store
            && !searching
        {
            storekey = Some(call.arg(at + 1));
            storedist = is(arg, "storedist");
            i += 1;
        } else if is(arg, "storedist") && variant == Variant::SearchStore {
            storedist = true;
        } else if is(arg, "frommember") && i + 1 < remaining && searching && !fromloc {
            if z.is_some() {
                let Some(c) = member_point(z, call.arg(at + 1)) else {
                    return call.error("ERR could not decode requested zset member");
                };
                center = Some(c);
            }
            frommember = true;
            i += 1;
        } else if is(arg, "fromlonlat") && i + 2 < remaining && searching && !frommember {
            let Some(c) = long_lat(call, at + 1) else {
                return;
            };
            center = Some(c);
            fromloc = true;
            i += 2;
        } else if is(arg, "byradius") && i + 2 < remaining && searching && !bybox {
            let Some((r, u)) = radius_arg(call, at + 1) else {
                return;
            };
            kind = Some(ShapeKind::Radius(r));
            conversion = u;
            byradius = true;
            i += 2;
        } else if is(arg, "bybox") && i + 3 < remaining && searching && !byradius {
            let Some(w) = double_or(call, call.arg(at + 1), "ERR need numeric width") else {
                return;
            };
            let Some(h) = double_or(call, call.arg(at + 2), "ERR need numeric height") else {
                return;
            };
            if h < 0.0 || w < 0.0 {
                return call.error("ERR height or width cannot be negative");
            }
            let Some(u) = unit(call, call.arg(at + 3)) else {
                return;
            };
            kind = Some(ShapeKind::Box {
                width: w,
                height: h,
            });
            conversion = u;
            bybox = true;
            i += 3;
        } else {
            return call.syntax_error();
        }
        i += 1;
    }
    let name = String::from_utf8_lossy(call.arg(0)).into_owned();
    if storekey.is_some() && (withdist || withhash || withcoord) {
        let what = if variant == Variant::SearchStore {
            "GEOSEARCHSTORE"
        } else {
            "STORE option in GEORADIUS"
        };
        return call.error(&format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        ));
    }
    if searching && !(frommember || fromloc) {
        return call.error(&format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        ));
    }
    if searching && !(byradius || bybox) {
        return call.error(&format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        ));
    }
    if any && count == 0 {
        return call.error("ERR the ANY argument requires COUNT argument");
    }
    let Some(z) = z else {
        return match storekey {
            Some(dst) => store_result(core, call, dst, ZSet::new(), "georadiusstore"),
            None => call.out.array_len(0),
        };
    };
    if count != 0 && sort == Sort::None && !any {
        sort = Sort::Asc;
    }
    let (long, lat) = center.expect("a centre is set once the source exists");
    let shape = Shape {
        long,
        lat,
        conversion,
        kind: kind.expect("a shape is set once parsing succeeded"),
    };
    let limit = if any { count as usize } else { 0 };
    let mut points = collect(z, &shape, limit);
    if points.is_empty() && storekey.is_none() {
        return call.out.array_len(0);
    }
    let returned = if count == 0 {
        points.len()
    } else {
        points.len().min(count as usize)
    };
    match sort {
        Sort::None => {}
        Sort::Asc => points.sort_by(|a, b| a.dist.total_cmp(&b.dist)),
        Sort::Desc => points.sort_by(|a, b| b.dist.total_cmp(&a.dist)),
    }
    points.truncate(returned);
    for p in &mut points {
        p.dist /= shape.conversion;
    }
    match storekey {
        None => {
            let options = usize::from(withdist) + usize::from(withhash) + usize::from(withcoord);
            call.out.array_len(points.len());
            for p in &points {
                if options > 0 {
                    call.out.array_len(options + 1);
                }
                call.out.bulk(&p.member);
                if withdist {
                    reply_distance(call, p.dist);
                }
                if withhash {
                    call.out.integer(p.score as i64);
                }
                if withcoord {
                    call.out.array_len(2);
                    reply_coord(call, p.long);
                    reply_coord(call, p.lat);
                }
            }
        }
        Some(dst) => {
            let mut result = ZSet::new();
            for p in &points {
                result.insert(&p.member, if storedist { p.dist } else { p.score });
            }
            let event = if searching {
                "geosearchstore"
            } else {
                "georadiusstore"
            };
            store_result(core, call, dst, result, event);
        }
    }
}

/// The members inside `shape`, box by box in Redis's visiting order, each box's members in
/// score order. With `limit` > 0 (ANY), stops once that many are found.
fn collect(z: &ZSet, shape: &Shape, limit: usize) -> Vec<Point> {
    let mut points: Vec<Point> = Vec::new();
    let boxes = hash::search_boxes(shape);
    let mut last: Option<usize> = None;
    for (i, b) in boxes.iter().enumerate() {
        let Some(b) = *b else { continue };
        // Huge radii make neighbours coincide; Redis skips a box equal to the one visited
        // last, except right after the centre box.
        if let Some(l) = last.filter(|&l| l > 0) {
            if boxes[l] == Some(b) {
                continue;
            }
        }
        if limit > 0 && points.len() >= limit {
            break;
        }
        let (min, max) = hash::score_range(b);
        let start = z.count_while(|_, s| s < min);
        for (member, score) in z.iter_at(start, false) {
            if score >= max {
                break;
            }
            let (long, lat) = hash::decode_score(score);
            if let Some(dist) = shape.contains(long, lat) {
                points.push(Point {
                    member: member.to_vec(),
                    score,
                    dist,
                    long,
                    lat,
                });
                if limit > 0 && points.len() >= limit {
                    break;
                }
            }
        }
        last = Some(i);
    }
    points
}

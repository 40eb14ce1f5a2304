//! Geohash arithmetic as Redis's GEO commands use it: a longitude/latitude pair becomes a
//! 52-bit integer (26 bits each, longitude in the odd bit positions, latitude in the even
//! ones) over the Web Mercator latitude range, stored as a sorted set score. Searches cover
//! the query shape with the box of a coarser hash and its eight neighbours, and filter the
//! members of those score ranges by exact distance. Every step is done in the same order, with
//! the same floating point operations, as Redis 7.0, because which boxes are visited decides
//! the order of unsorted replies and which members ANY returns.

pub const STEP_MAX: u32 = 26;
pub const LONG_MIN: f64 = -180.0;
pub const LONG_MAX: f64 = 180.0;
pub const LAT_MIN: f64 = -85.051_128_78;
pub const LAT_MAX: f64 = 85.051_128_78;
const EARTH_RADIUS_M: f64 = 6_372_797.560_856;
const MERCATOR_MAX: f64 = 20_037_726.37;
const D_R: f64 = std::f64::consts::PI / 180.0;

fn deg_rad(a: f64) -> f64 {
    a * D_R
}

fn rad_deg(a: f64) -> f64 {
    a / D_R
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

pub const LONG_RANGE: Range = Range {
    min: LONG_MIN,
    max: LONG_MAX,
};
pub const LAT_RANGE: Range = Range {
    min: LAT_MIN,
    max: LAT_MAX,
};

/// A hash of `step` bits per coordinate; `step` 0 and `bits` 0 is "no box".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hash {
    pub bits: u64,
    pub step: u32,
}

impl Hash {
    const ZERO: Hash = Hash { bits: 0, step: 0 };

    fn is_zero(self) -> bool {
        self.bits == 0 && self.step == 0
    }

    /// The hash shifted to 52 bits: the score of the box's first point.
    pub fn align52(self) -> u64 {
        self.bits << (52 - self.step * 2)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Area {
    pub long: Range,
    pub lat: Range,
}

/// Spreads the 32 bits of `v` to the even bit positions.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The even bit positions of `v`, packed.
fn squash(v: u64) -> u32 {
    let mut x = v & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x >> 16)) & 0x0000_0000_FFFF_FFFF;
    x as u32
}

/// Encodes a point with `step` bits per coordinate over the given ranges; `None` outside
/// them (or outside the GEO limits).
pub fn encode(long_r: Range, lat_r: Range, long: f64, lat: f64, step: u32) -> Option<Hash> {
    if !(LONG_MIN..=LONG_MAX).contains(&long) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    if lat < lat_r.min || lat > lat_r.max || long < long_r.min || long > long_r.max {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_off = (lat - lat_r.min) / (lat_r.max - lat_r.min) * scale;
    let long_off = (long - long_r.min) / (long_r.max - long_r.min) * scale;
    Some(Hash {
        bits: spread(lat_off as u32) | (spread(long_off as u32) << 1),
        step,
    })
}

pub fn encode_wgs84(long: f64, lat: f64, step: u32) -> Option<Hash> {
    encode(LONG_RANGE, LAT_RANGE, long, lat, step)
}

/// The area a hash covers.
pub fn decode(long_r: Range, lat_r: Range, h: Hash) -> Area {
    let lat_i = squash(h.bits);
    let long_i = squash(h.bits >> 1);
    let lat_scale = lat_r.max - lat_r.min;
    let long_scale = long_r.max - long_r.min;
    let div = (1u64 << h.step) as f64;
    Area {
        lat: Range {
            min: lat_r.min + (f64::from(lat_i) / div) * lat_scale,
            max: lat_r.min + (f64::from(lat_i.wrapping_add(1)) / div) * lat_scale,
        },
        long: Range {
            min: long_r.min + (f64::from(long_i) / div) * long_scale,
            max: long_r.min + (f64::from(long_i.wrapping_add(1)) / div) * long_scale,
        },
    }
}

/// The centre of a hash's area, clamped to the GEO limits: (longitude, latitude).
pub fn center(area: &Area) -> (f64, f64) {
    let long = ((area.long.min + area.long.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((area.lat.min + area.lat.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (long, lat)
}

/// A score converted to an integer as C converts a double to `uint64_t` on x86-64 (negative
/// scores wrap; scores a user stored by hand decode to some point, as in Redis).
fn score_bits(score: f64) -> u64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    if score < TWO63 {
        (score as i64) as u64
    } else {
        let rest = score - TWO63;
        let i = if rest < TWO63 { rest as i64 } else { i64::MIN };
        (i as u64) ^ (1u64 << 63)
    }
}

/// The point a sorted set score stands for: (longitude, latitude).
pub fn decode_score(score: f64) -> (f64, f64) {
    let h = Hash {
        bits: score_bits(score),
        step: STEP_MAX,
    };
    center(&decode(LONG_RANGE, LAT_RANGE, h))
}

/// The score GEOADD stores for a point (which the caller has range-checked).
pub fn score_of(long: f64, lat: f64) -> u64 {
    encode_wgs84(long, lat, STEP_MAX).map_or(0, |h| h.align52())
}

/// The standard 11-character geohash (latitude over -90..90) of a stored score.
pub fn geohash_string(score: f64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (long, lat) = decode_score(score);
    let r_long = Range {
        min: -180.0,
        max: 180.0,
    };
    let r_lat = Range {
        min: -90.0,
        max: 90.0,
    };
    let bits = encode(r_long, r_lat, long, lat, STEP_MAX).map_or(0, |h| h.bits);
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().enumerate().take(10) {
        let idx = (bits >> (52 - (i + 1) * 5)) & 0x1f;
        *c = ALPHABET[idx as usize];
    }
    out
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_M * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// Great-circle distance in meters (haversine, Redis's Earth radius).
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let lon1r = deg_rad(lon1);
    let lon2r = deg_rad(lon2);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let lat1r = deg_rad(lat1);
    let lat2r = deg_rad(lat2);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_M * a.sqrt().asin()
}

/// A search shape: a circle of `radius`, or a `width` x `height` box, both in `unit`s (the
/// unit's length in meters is `conversion`), around (`long`, `lat`).
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub long: f64,
    pub lat: f64,
    pub conversion: f64,
    pub kind: ShapeKind,
}

#[derive(Clone, Copy, Debug)]
pub enum ShapeKind {
    Radius(f64),
    Box { width: f64, height: f64 },
}

impl Shape {
    /// The distance from the centre to a point when the point lies inside the shape.
    pub fn contains(&self, long: f64, lat: f64) -> Option<f64> {
        match self.kind {
            ShapeKind::Radius(r) => {
                let d = distance(self.long, self.lat, long, lat);
                (d <= r * self.conversion).then_some(d)
            }
            ShapeKind::Box { width, height } => {
                let (w, h) = (width * self.conversion, height * self.conversion);
                if lat_distance(lat, self.lat) > h / 2.0 {
                    return None;
                }
                if distance(long, lat, self.long, lat) > w / 2.0 {
                    return None;
                }
                Some(distance(self.long, self.lat, long, lat))
            }
        }
    }

    /// (min longitude, min latitude, max longitude, max latitude) around the shape.
    fn bounding_box(&self) -> [f64; 4] {
        let (height, width) = match self.kind {
            ShapeKind::Radius(r) => (self.conversion * r, self.conversion * r),
            ShapeKind::Box { width, height } => (
                self.conversion * (height / 2.0),
                self.conversion * (width / 2.0),
            ),
        };
        let lat_delta = rad_deg(height / EARTH_RADIUS_M);
        let long_delta_top = rad_deg(width / EARTH_RADIUS_M / deg_rad(self.lat + lat_delta).cos());
        let long_delta_bottom =
            rad_deg(width / EARTH_RADIUS_M / deg_rad(self.lat - lat_delta).cos());
        let south = self.lat < 0.0;
        let delta = if south {
            long_delta_bottom
        } else {
            long_delta_top
        };
        [
            self.long - delta,
            self.lat - lat_delta,
            self.long + delta,
            self.lat + lat_delta,
        ]
    }
}

fn steps_for_radius(mut range_m: f64, lat: f64) -> u32 {
    if range_m == 0.0 {
        return 26;
    }
    let mut step: i32 = 1;
    while range_m < MERCATOR_MAX {
        range_m *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u32
}

const ODD: u64 = 0xaaaa_aaaa_aaaa_aaaa;
const EVEN: u64 = 0x5555_5555_5555_5555;

/// Moves a hash one box along the axis whose bits are `own` (ODD: longitude, EVEN: latitude),
/// east/north for `d` > 0, wrapping around at the edge of the range.
fn move_axis(h: &mut Hash, d: i8, own: u64) {
    if d == 0 {
        return;
    }
    let other = !own;
    let mut v = h.bits & own;
    let rest = h.bits & other;
    let zz = other >> (64 - h.step * 2);
    if d > 0 {
        v = v.wrapping_add(zz + 1);
    } else {
        v |= zz;
        v = v.wrapping_sub(zz + 1);
    }
    v &= own >> (64 - h.step * 2);
    h.bits = v | rest;
}

fn moved(h: Hash, dx: i8, dy: i8) -> Hash {
    let mut n = h;
    move_axis(&mut n, dx, ODD);
    move_axis(&mut n, dy, EVEN);
    n
}

/// Neighbours in Redis's visiting order after the centre: N, S, E, W, NE, NW, SE, SW.
const DIRS: [(i8, i8); 8] = [
    (0, 1),
    (0, -1),
    (1, 0),
    (-1, 0),
    (1, 1),
    (-1, 1),
    (1, -1),
    (-1, -1),
];

/// The boxes to search for `shape`, in visiting order: the centre box then its eight
/// neighbours; a neighbour the shape cannot reach is `None`.
pub fn search_boxes(shape: &Shape) -> [Option<Hash>; 9] {
    let [min_lon, min_lat, max_lon, max_lat] = shape.bounding_box();
    let radius_m = match shape.kind {
        ShapeKind::Radius(r) => r,
        ShapeKind::Box { width, height } => {
            ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
        }
    } * shape.conversion;
    let mut steps = steps_for_radius(radius_m, shape.lat);
    let boxes_at = |steps: u32| {
        let h = encode_wgs84(shape.long, shape.lat, steps).unwrap_or(Hash {
            bits: 0,
            step: steps,
        });
        let mut n = [Hash::ZERO; 9];
        n[0] = h;
        for (i, (dx, dy)) in DIRS.iter().enumerate() {
            n[i + 1] = moved(h, *dx, *dy);
        }
        n
    };
    let mut n = boxes_at(steps);
    let dec = |h: Hash| decode(LONG_RANGE, LAT_RANGE, h);
    let decrease = dec(n[1]).lat.max < max_lat
        || dec(n[2]).lat.min > min_lat
        || dec(n[3]).long.max < max_lon
        || dec(n[4]).long.min > min_lon;
    if steps > 1 && decrease {
        steps -= 1;
        n = boxes_at(steps);
    }
    let area = dec(n[0]);
    let mut keep = [true; 9];
    if steps >= 2 {
        // When the centre box already reaches past the shape on one side, the three boxes on
        // that side are useless. Indexes: 1 N, 2 S, 3 E, 4 W, 5 NE, 6 NW, 7 SE, 8 SW.
        let sides = [
            (area.lat.min < min_lat, [2, 8, 7]),
            (area.lat.max > max_lat, [1, 5, 6]),
            (area.long.min < min_lon, [4, 8, 6]),
            (area.long.max > max_lon, [3, 7, 5]),
        ];
        for (beyond, boxes) in sides {
            if beyond {
                for b in boxes {
                    keep[b] = false;
                }
            }
        }
    }
    let mut out = [None; 9];
    for i in 0..9 {
        if keep[i] && !n[i].is_zero() {
            out[i] = Some(n[i]);
        }
    }
    out
}

/// The score range `[min, max)` of the points inside a box.
pub fn score_range(h: Hash) -> (f64, f64) {
    let min = h.align52();
    let max = Hash {
        bits: h.bits.wrapping_add(1),
        step: h.step,
    }
    .align52();
    (min as f64, max as f64)
}

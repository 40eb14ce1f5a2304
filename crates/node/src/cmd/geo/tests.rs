//! Geohash unit tests; expected values come from redis-server 7.0.15.

use super::hash::*;

#[test]
fn score_round_trip() {
    // GEOADD Sicily 13.361389 38.115556 "Palermo" stores 3479099956230698.
    assert_eq!(score_of(13.361389, 38.115556), 3479099956230698);
    let (long, lat) = decode_score(3479099956230698.0);
    assert!((long - 13.361389).abs() < 1e-5 && (lat - 38.115556).abs() < 1e-5);
    assert_eq!(&geohash_string(3479099956230698.0), b"sqc8b49rny0");
}

#[test]
fn distance_palermo_catania() {
    let a = decode_score(score_of(13.361389, 38.115556) as f64);
    let b = decode_score(score_of(15.087269, 37.502669) as f64);
    assert_eq!(
        format!("{:.4}", distance(a.0, a.1, b.0, b.1)),
        "166274.1516"
    );
}

#[test]
fn search_boxes_cover_the_centre() {
    let shape = Shape {
        long: 15.0,
        lat: 37.0,
        conversion: 1000.0,
        kind: ShapeKind::Radius(200.0),
    };
    let boxes = search_boxes(&shape);
    let centre = boxes[0].expect("centre box");
    let (min, max) = score_range(centre);
    let s = score_of(15.0, 37.0) as f64;
    assert!(min <= s && s < max);
}

#[test]
fn extreme_scores_do_not_panic() {
    for s in [-1.0, 0.0, 1e300, f64::INFINITY, -1e300, 4503599627370496.0] {
        let _ = decode_score(s);
        let _ = geohash_string(s);
    }
}

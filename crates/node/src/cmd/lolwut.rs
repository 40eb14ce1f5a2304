//! LOLWUT: Redis's "computer art" command. Redis draws a different piece per version; a
//! Lattice node draws a lattice, `columns` by `rows` cells, then its version line, so the
//! command still tells a human which server answered.

use std::fmt::Write as _;

use crate::args::{is, parse_i64, NOT_INTEGER};
use crate::command::{spec, Call};
use crate::ctx::{CommandSpec, Core};

use super::server::{LATTICE_VERSION, REDIS_VERSION};

pub const COMMANDS: &[CommandSpec] = &[spec(
    "lolwut",
    -1,
    &["readonly", "fast"],
    (0, 0, 0),
    "server",
    "5.0.0",
    "Displays computer art and the Redis version",
    lolwut,
)];

/// Bounds of the drawing, so a request cannot make the reply large (64 x 32 cells is about
/// 17 KB).
const MAX_COLUMNS: i64 = 64;
const MAX_ROWS: i64 = 32;

/// LOLWUT [VERSION v] [columns [rows]]: the version is read as Redis reads it (an integer)
/// and chooses nothing here; columns and rows are clamped to 1..=64 and 1..=32.
fn lolwut(_core: &mut Core, call: &mut Call) {
    let mut i = 1;
    if call.argc() >= 3 && is(call.arg(1), "version") {
        if parse_i64(call.arg(2)).is_none() {
            return call.error(NOT_INTEGER);
        }
        i = 3;
    }
    let mut size = [8i64, 4];
    for (slot, j) in size.iter_mut().zip(i..call.argc()) {
        match parse_i64(call.arg(j)) {
            Some(n) => *slot = n,
            None => return call.error(NOT_INTEGER),
        }
    }
    let columns = size[0].clamp(1, MAX_COLUMNS) as usize;
    let rows = size[1].clamp(1, MAX_ROWS) as usize;
    let out = draw(columns, rows);
    call.out.verbatim(b"txt", out.as_bytes());
}

/// Nodes joined by edges: `o---o` across, `|` down, with a diagonal in every other cell so
/// the picture reads as a lattice rather than a table.
fn draw(columns: usize, rows: usize) -> String {
    let mut s = String::with_capacity((columns * 4 + 2) * (rows * 2 + 1) + 64);
    let node_row = |s: &mut String| {
        s.push('o');
        for _ in 0..columns {
            s.push_str("---o");
        }
        s.push('\n');
    };
    node_row(&mut s);
    for r in 0..rows {
        s.push('|');
        for c in 0..columns {
            s.push_str(if (r + c) % 2 == 0 { " \\ |" } else { " / |" });
        }
        s.push('\n');
        node_row(&mut s);
    }
    let _ = write!(
        s,
        "\nLattice ver. {LATTICE_VERSION} (Redis {REDIS_VERSION} compatible)\n"
    );
    s
}

#[cfg(test)]
mod tests {
    use super::draw;

    #[test]
    fn the_drawing_has_the_asked_size_and_the_version_line() {
        let s = draw(3, 2);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "o---o---o---o");
        assert_eq!(lines[1], "| \\ | / | \\ |");
        assert_eq!(lines.len(), 5 + 2);
        assert!(lines[6].starts_with("Lattice ver. "));
    }
}

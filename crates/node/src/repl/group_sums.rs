//! Digest sums per (check span, slot group), kept for the checks of slot moves (ARCHITECTURE
//! §92).
//!
//! A move checks the groups its receiver already holds a span of `CHECK_SPAN` Merkle leaves
//! at a time: both sides sum the digests of their keys of those groups in the span and compare.
//! Summing by visiting the span's keys reads every key of the span (its group is known only
//! from its bytes), whichever groups move; every stream did it for every span, on both sides,
//! so a join or a leave visited each node's keys about twice per stream. A row here holds the
//! sums of one span for all 256 groups: built by one visit, then kept up to date by every
//! change of the Merkle tree (each passes the key, so its group is known), so later checks of
//! that span by any stream cost a few additions.
//!
//! Rows exist only while moves run: the keeping costs a slot computation per digest change in
//! a span with a row, and each row 4 KiB (all 1,024 of them 4 MiB). [`GroupSums::idle`] drops
//! them once no check has used them for `IDLE_MS`.

use lattice_placement::{Placement, GROUPS};

/// Leaves one check of a move covers: a digest per 64 leaves (1,024 checks cover the keyspace)
/// is about 2.5 bytes per key of a group at 4 keys a check, against about 11 per key for a
/// check per leaf, while a check that differs (a write in flight) costs a few keys' states.
pub(super) const CHECK_SPAN: usize = 64;
/// How long rows are kept with no check using them and no stream going out.
const IDLE_MS: u64 = 10_000;

/// One group's keys of one span: the wrapping sum of their digests, how many have one, and
/// whether a key without one (a removed value awaiting collection: digest 0) may be there.
///
/// A check is sent for a span where the sender holds any key of the checked groups, a removed
/// one included: the receiver may still hold the value it removed. The rows see digests, not
/// keys coming and going, so `zero` is set by a visit that finds such a key and by every
/// change that leaves one (`redigest`), and cleared only by a new visit: it may say "maybe"
/// where the key has gone since, which costs one check the receiver can answer cheaply.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(super) struct Cell {
    pub sum: u64,
    pub keys: u32,
    pub zero: bool,
}

/// One span's cells, by group.
pub(super) type Row = [Cell; GROUPS as usize];

pub(super) struct GroupSums {
    rows: Vec<Option<Box<Row>>>,
    built: usize,
    /// A check used the rows since the last [`GroupSums::idle`].
    used: bool,
    last_used_ms: u64,
}

impl GroupSums {
    /// Room for the rows of a keyspace of `leaves` Merkle leaves.
    pub fn new(leaves: usize) -> GroupSums {
        GroupSums {
            rows: (0..leaves.div_ceil(CHECK_SPAN)).map(|_| None).collect(),
            built: 0,
            used: false,
            last_used_ms: 0,
        }
    }
}

/// The slot group of `key`.
pub(super) fn group_of(key: &[u8]) -> u16 {
    Placement::group_of(lattice_placement::key_slot(key))
}

impl GroupSums {
    /// A key of `leaf` changed its digest from `old` to `new` (0: absent): the span's row, if
    /// it has one, follows.
    #[inline]
    pub fn update(&mut self, leaf: usize, key: &[u8], old: u64, new: u64) {
        if self.built == 0 {
            return;
        }
        let span = leaf / CHECK_SPAN;
        let Some(row) = self.rows[span].as_deref_mut() else {
            return;
        };
        let cell = &mut row[usize::from(group_of(key))];
        cell.sum = cell.sum.wrapping_sub(old).wrapping_add(new);
        if old == 0 {
            cell.keys += 1;
        }
        if new == 0 {
            // A key with a digest left: its cell counted it. If it did not, the row is wrong:
            // it is dropped (built again by a visit when next asked for) rather than the
            // node stopped; the simulator's `check_group_sums` fails on such a row first.
            match cell.keys.checked_sub(1) {
                Some(keys) => cell.keys = keys,
                None => {
                    debug_assert!(false, "a row of group sums missed a key it sums");
                    self.rows[span] = None;
                    self.built -= 1;
                }
            }
        }
    }

    /// `key`, of `leaf`, is held with no digest (its value removed, its state kept).
    #[inline]
    pub fn zero(&mut self, leaf: usize, key: &[u8]) {
        if self.built == 0 {
            return;
        }
        if let Some(row) = self.rows[leaf / CHECK_SPAN].as_deref_mut() {
            row[usize::from(group_of(key))].zero = true;
        }
    }

    /// A key of `leaf` can no longer be compared (its digest is deferred): the span's sums
    /// are built again, by a visit, when next asked for.
    pub fn forget(&mut self, leaf: usize) {
        if self.rows[leaf / CHECK_SPAN].take().is_some() {
            self.built -= 1;
        }
    }

    /// The row of the span starting at leaf `first`, if built.
    pub fn row(&mut self, first: usize) -> Option<&Row> {
        self.used = true;
        self.rows[first / CHECK_SPAN].as_deref()
    }

    pub fn insert(&mut self, first: usize, row: Box<Row>) {
        if self.rows[first / CHECK_SPAN].replace(row).is_none() {
            self.built += 1;
        }
    }

    /// From the timer: drops every row once none was used for `IDLE_MS` and `moving` is
    /// false (no stream goes out).
    pub fn idle(&mut self, now_ms: u64, moving: bool) {
        if self.used || moving {
            self.used = false;
            self.last_used_ms = now_ms;
            return;
        }
        if self.built > 0 && now_ms.saturating_sub(self.last_used_ms) >= IDLE_MS {
            self.rows.iter_mut().for_each(|r| *r = None);
            self.built = 0;
        }
    }

    /// The built rows' first leaves and rows.
    pub fn built(&self) -> impl Iterator<Item = (usize, &Row)> + '_ {
        self.rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_deref().map(|r| (i * CHECK_SPAN, r)))
    }

    pub fn heap_bytes(&self) -> usize {
        self.rows.capacity() * std::mem::size_of::<Option<Box<Row>>>()
            + self.built * std::mem::size_of::<Row>()
    }
}

/// The sum of `groups` in `row`, and how many keys it has (a group that may hold a key
/// without a digest counts one more).
pub(super) fn row_sum(row: &Row, groups: impl Iterator<Item = u16>) -> (u64, usize) {
    groups.fold((0u64, 0usize), |(sum, n), g| {
        let c = row[usize::from(g)];
        (
            sum.wrapping_add(c.sum),
            n + c.keys as usize + usize::from(c.zero),
        )
    })
}

/// Whether `row` agrees with `fresh`, a visit's row of the same span: the same sums and
/// counts, and a possible key without a digest wherever the visit found one.
pub(super) fn row_agrees(row: &Row, fresh: &Row) -> bool {
    row.iter()
        .zip(fresh.iter())
        .all(|(r, f)| r.sum == f.sum && r.keys == f.keys && (r.zero || !f.zero))
}

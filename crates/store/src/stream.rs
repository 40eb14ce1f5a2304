//! Streams: an append-only log of field/value entries ordered by ID, with consumer groups.
//!
//! Entries live in an ordered map keyed by [`StreamId`] (`ms-seq`), which gives range reads in
//! both directions, deletion and trimming from the head in O(log n) per entry. Redis keeps a
//! radix tree of listpack nodes instead. Which entries share a node is visible to clients:
//! approximate (`~`) trimming and LIMIT remove whole nodes only. So the stream also keeps the
//! node *boundaries* Redis would have (a [`Block`] per node: last ID, slots used, live entries,
//! bytes), filled by the same rules (`stream-node-max-entries`, `stream-node-max-bytes`,
//! deleted entries still occupying their slot), without storing entries in them.
//!
//! Consumer groups follow Redis 7.0: each group has a last-delivered ID, a logical read
//! counter (`entries-read`, unknown after some operations), a pending entries list (PEL) of
//! delivered but unacknowledged entries, and consumers each owning part of that PEL. The
//! counters `entries_added`, `max_deleted_id` and the lag estimate use 7.0's rules so that
//! XINFO answers as 7.0 would.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Entries per listpack node in Redis's default configuration (`stream-node-max-entries`).
pub const NODE_MAX_ENTRIES: usize = 100;
/// Bytes per listpack node in Redis's default configuration (`stream-node-max-bytes`).
pub const NODE_MAX_BYTES: usize = 4096;

/// When a new node starts (Redis's `stream-node-max-entries` / `-bytes`; 0 = no limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLimits {
    pub max_entries: usize,
    pub max_bytes: usize,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            max_entries: NODE_MAX_ENTRIES,
            max_bytes: NODE_MAX_BYTES,
        }
    }
}

/// Where Redis would have a listpack node boundary: entries up to `last` since the previous
/// block belong to this one.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Block {
    last: StreamId,
    /// Entries ever appended to the node (deleted ones keep their slot).
    slots: usize,
    /// Entries still present.
    live: usize,
    /// Approximate encoded size.
    bytes: usize,
}

/// Approximate listpack bytes of one entry: its fields and values plus per-element overhead.
fn entry_bytes(fields: &Fields) -> usize {
    4 + fields
        .iter()
        .map(|(f, v)| f.len() + v.len() + 4)
        .sum::<usize>()
}

/// A stream entry ID: milliseconds and a sequence number, ordered as a pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }

    /// The smallest ID greater than this one (None for the maximum).
    pub fn next(self) -> Option<StreamId> {
        if self.seq < u64::MAX {
            Some(StreamId::new(self.ms, self.seq + 1))
        } else if self.ms < u64::MAX {
            Some(StreamId::new(self.ms + 1, 0))
        } else {
            None
        }
    }

    /// The greatest ID smaller than this one (None for 0-0).
    pub fn prev(self) -> Option<StreamId> {
        if self.seq > 0 {
            Some(StreamId::new(self.ms, self.seq - 1))
        } else if self.ms > 0 {
            Some(StreamId::new(self.ms - 1, u64::MAX))
        } else {
            None
        }
    }

    /// Parses `ms-seq` or `ms` (then `seq` is `missing_seq`). Strict unsigned decimals only.
    pub fn parse(text: &[u8], missing_seq: u64) -> Option<StreamId> {
        let (ms, seq) = match text.iter().position(|&b| b == b'-') {
            Some(dash) => (&text[..dash], Some(&text[dash + 1..])),
            None => (text, None),
        };
        let ms = parse_u64(ms)?;
        let seq = match seq {
            Some(s) => parse_u64(s)?,
            None => missing_seq,
        };
        Some(StreamId::new(ms, seq))
    }
}

/// An unsigned decimal as Redis's `string2ull` takes it: digits only, no sign, no overflow.
pub fn parse_u64(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 20 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// The field/value pairs of one entry, in the order given to XADD.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// Why XADD refused an ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddError {
    /// Not greater than the last ID (or, explicitly, 0-0 on an empty stream).
    NotGreater,
    /// `0-0` is never a valid entry ID.
    Zero,
    /// The stream's last ID is the maximum: no ID can follow it.
    Exhausted,
}

/// How the ID of a new entry is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewId {
    /// `*`: the current time, or one past the last ID if the clock is behind it.
    Auto,
    /// `ms-*`: this millisecond with the next free sequence number.
    Ms(u64),
    /// `ms-seq`.
    Exact(StreamId),
}

/// One delivered, unacknowledged entry of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub consumer: Vec<u8>,
    pub delivery_time_ms: u64,
    pub delivery_count: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consumer {
    pub seen_time_ms: u64,
    /// IDs of this consumer's pending entries (their details are in the group's PEL).
    pub pel: BTreeSet<StreamId>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Group {
    pub last_id: StreamId,
    /// Logical number of entries read by the group; None when it cannot be known.
    pub entries_read: Option<u64>,
    pub pel: BTreeMap<StreamId, Pending>,
    pub consumers: BTreeMap<Vec<u8>, Consumer>,
}

impl Group {
    /// The consumer `name`, created (seen now) when missing; the flag says it was created.
    pub fn consumer(&mut self, name: &[u8], now_ms: u64) -> (&mut Consumer, bool) {
        let created = !self.consumers.contains_key(name);
        let c = self.consumers.entry(name.to_vec()).or_insert(Consumer {
            seen_time_ms: now_ms,
            pel: BTreeSet::new(),
        });
        (c, created)
    }

    /// Creates `name` if missing; true when created.
    pub fn create_consumer(&mut self, name: &[u8], now_ms: u64) -> bool {
        self.consumer(name, now_ms).1
    }

    /// Deletes a consumer and its pending entries; the number it had pending, or None.
    pub fn delete_consumer(&mut self, name: &[u8]) -> Option<usize> {
        let c = self.consumers.remove(name)?;
        for id in &c.pel {
            self.pel.remove(id);
        }
        Some(c.pel.len())
    }

    /// Makes `consumer` the owner of the pending entry `id` (creating it if missing), with
    /// the given delivery time; the count is set by the caller.
    fn assign(&mut self, id: StreamId, consumer: &[u8], now_ms: u64) -> &mut Pending {
        let previous = self.pel.get(&id).map(|p| p.consumer.clone());
        if let Some(prev) = previous.as_deref() {
            if prev != consumer {
                if let Some(c) = self.consumers.get_mut(prev) {
                    c.pel.remove(&id);
                }
            }
        }
        self.consumer(consumer, now_ms).0.pel.insert(id);
        let p = self.pel.entry(id).or_insert(Pending {
            consumer: consumer.to_vec(),
            delivery_time_ms: now_ms,
            delivery_count: 0,
        });
        p.consumer = consumer.to_vec();
        p
    }

    /// Removes the pending entry `id`; true if it was pending.
    pub fn ack(&mut self, id: StreamId) -> bool {
        match self.pel.remove(&id) {
            Some(p) => {
                if let Some(c) = self.consumers.get_mut(&p.consumer) {
                    c.pel.remove(&id);
                }
                true
            }
            None => false,
        }
    }
}

/// A stream value. Equality ignores node boundaries (they only steer approximate trimming
/// and are rebuilt, not stored, by RESTORE).
#[derive(Clone, Debug, Default)]
pub struct Stream {
    entries: BTreeMap<StreamId, Fields>,
    blocks: std::collections::VecDeque<Block>,
    /// The greatest ID ever added (or set by XSETID); new IDs must exceed it.
    pub last_id: StreamId,
    /// The greatest ID ever deleted (XDEL; trimming counts as well).
    pub max_deleted_id: StreamId,
    /// Entries ever added (including deleted ones).
    pub entries_added: u64,
    groups: BTreeMap<Vec<u8>, Group>,
}

impl PartialEq for Stream {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
            && self.last_id == other.last_id
            && self.max_deleted_id == other.max_deleted_id
            && self.entries_added == other.entries_added
            && self.groups == other.groups
    }
}

impl Eq for Stream {}

/// One entry as read: its ID and fields (None in a PEL history read of a deleted entry).
pub type ReadEntry = (StreamId, Option<Fields>);

impl Stream {
    pub fn new() -> Stream {
        Stream::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The first entry's ID, 0-0 when empty (Redis's `first_id`).
    pub fn first_id(&self) -> StreamId {
        self.entries.keys().next().copied().unwrap_or_default()
    }

    pub fn first_entry(&self) -> Option<(StreamId, &Fields)> {
        self.entries.iter().next().map(|(k, v)| (*k, v))
    }

    pub fn last_entry(&self) -> Option<(StreamId, &Fields)> {
        self.entries.iter().next_back().map(|(k, v)| (*k, v))
    }

    pub fn contains(&self, id: StreamId) -> bool {
        self.entries.contains_key(&id)
    }

    pub fn get(&self, id: StreamId) -> Option<&Fields> {
        self.entries.get(&id)
    }

    /// The ID XADD would give a new entry at `now_ms`.
    pub fn next_id(&self, how: NewId, now_ms: u64) -> Result<StreamId, AddError> {
        let last = self.last_id;
        let id = match how {
            NewId::Auto => {
                if now_ms > last.ms {
                    StreamId::new(now_ms, 0)
                } else {
                    last.next().ok_or(AddError::Exhausted)?
                }
            }
            NewId::Ms(ms) => {
                if ms == last.ms {
                    if last.seq == u64::MAX {
                        return Err(AddError::NotGreater);
                    }
                    StreamId::new(ms, last.seq + 1)
                } else if ms > last.ms {
                    StreamId::new(ms, 0)
                } else {
                    return Err(AddError::NotGreater);
                }
            }
            NewId::Exact(id) => {
                if id.is_zero() {
                    return Err(AddError::Zero);
                }
                if id <= last {
                    return Err(AddError::NotGreater);
                }
                id
            }
        };
        if id.is_zero() {
            return Err(AddError::Zero);
        }
        Ok(id)
    }

    /// Appends an entry with Redis's default node limits.
    pub fn add(&mut self, id: StreamId, fields: Fields) -> Result<(), AddError> {
        self.add_with(id, fields, NodeLimits::default())
    }

    /// Appends an entry; `id` must come from [`Stream::next_id`] (greater than the last).
    pub fn add_with(
        &mut self,
        id: StreamId,
        fields: Fields,
        limits: NodeLimits,
    ) -> Result<(), AddError> {
        if id.is_zero() {
            return Err(AddError::Zero);
        }
        if id <= self.last_id {
            return Err(AddError::NotGreater);
        }
        self.place(id, entry_bytes(&fields), limits);
        self.entries.insert(id, fields);
        self.last_id = id;
        self.entries_added += 1;
        Ok(())
    }

    /// Records a new last entry in the node Redis would append it to.
    fn place(&mut self, id: StreamId, bytes: usize, limits: NodeLimits) {
        let fits = self.blocks.back().is_some_and(|b| {
            (limits.max_bytes == 0 || b.bytes + bytes < limits.max_bytes)
                && (limits.max_entries == 0 || b.slots < limits.max_entries)
        });
        match self.blocks.back_mut() {
            Some(b) if fits => {
                b.last = id;
                b.slots += 1;
                b.live += 1;
                b.bytes += bytes;
            }
            _ => self.blocks.push_back(Block {
                last: id,
                slots: 1,
                live: 1,
                bytes,
            }),
        }
    }

    /// Entries with `start <= id <= end`, ascending (or descending when `rev`), at most
    /// `count` of them (None: all).
    pub fn range(
        &self,
        start: StreamId,
        end: StreamId,
        count: Option<usize>,
        rev: bool,
    ) -> Vec<(StreamId, &Fields)> {
        if start > end {
            return Vec::new();
        }
        let limit = count.unwrap_or(usize::MAX);
        let it = self.entries.range(start..=end).map(|(k, v)| (*k, v));
        if rev {
            it.rev().take(limit).collect()
        } else {
            it.take(limit).collect()
        }
    }

    /// Deletes an entry (XDEL); true if it existed. A node left empty goes, as in Redis.
    pub fn delete(&mut self, id: StreamId) -> bool {
        if self.entries.remove(&id).is_none() {
            return false;
        }
        self.max_deleted_id = self.max_deleted_id.max(id);
        let at = self.blocks.partition_point(|b| b.last < id);
        if let Some(b) = self.blocks.get_mut(at) {
            b.live -= 1;
            if b.live == 0 {
                self.blocks.remove(at);
            }
        }
        true
    }

    /// Removes entries from the head, as Redis's `streamTrim`: while the stream is longer than
    /// `max_len` (or its first node ends below `min_id`), whole nodes go; with `approx` it stops
    /// at the first node that cannot go whole, otherwise it deletes entries inside that node.
    /// `limit` (0: none) caps the entries removed, in whole nodes. Returns the number removed.
    /// Trimming does not move `max_deleted_id` (only XDEL does, as in Redis).
    pub fn trim(
        &mut self,
        max_len: Option<usize>,
        min_id: Option<StreamId>,
        approx: bool,
        limit: usize,
    ) -> usize {
        let mut deleted = 0usize;
        while let Some(first) = self.blocks.front() {
            if limit > 0 && deleted >= limit {
                break;
            }
            if max_len.is_some_and(|m| self.len() <= m) {
                break;
            }
            let whole = match (max_len, min_id) {
                (Some(m), _) => self.len() - first.live >= m,
                (None, Some(min)) => first.last < min,
                (None, None) => false,
            };
            if whole {
                if limit > 0 && deleted + first.live > limit {
                    break;
                }
                let last = first.last;
                let n = first.live;
                self.blocks.pop_front();
                while self
                    .entries
                    .first_key_value()
                    .is_some_and(|(k, _)| *k <= last)
                {
                    self.entries.pop_first();
                }
                deleted += n;
                continue;
            }
            if approx {
                break;
            }
            // Delete inside the first node; it keeps at least one entry (else it went whole).
            while let Some((&id, _)) = self.entries.first_key_value() {
                let go = match (max_len, min_id) {
                    (Some(m), _) => self.len() > m,
                    (None, Some(min)) => id < min,
                    (None, None) => false,
                };
                if !go {
                    break;
                }
                self.entries.pop_first();
                self.blocks[0].live -= 1;
                deleted += 1;
            }
            break;
        }
        deleted
    }

    /// XSETID: the new last ID, and optionally the added counter and the max deleted ID.
    pub fn set_last_id(
        &mut self,
        id: StreamId,
        entries_added: Option<u64>,
        max_del: Option<StreamId>,
    ) {
        self.last_id = id;
        if let Some(n) = entries_added {
            self.entries_added = n;
        }
        if let Some(m) = max_del {
            self.max_deleted_id = m;
        }
    }

    // -----------------------------------------------------------------------------------------
    // Groups

    pub fn groups(&self) -> &BTreeMap<Vec<u8>, Group> {
        &self.groups
    }

    pub fn group(&self, name: &[u8]) -> Option<&Group> {
        self.groups.get(name)
    }

    pub fn group_mut(&mut self, name: &[u8]) -> Option<&mut Group> {
        self.groups.get_mut(name)
    }

    /// Creates a group reading after `last_id`; false if it exists already.
    pub fn create_group(
        &mut self,
        name: &[u8],
        last_id: StreamId,
        entries_read: Option<u64>,
    ) -> bool {
        if self.groups.contains_key(name) {
            return false;
        }
        self.groups.insert(
            name.to_vec(),
            Group {
                last_id,
                entries_read,
                ..Group::default()
            },
        );
        true
    }

    pub fn destroy_group(&mut self, name: &[u8]) -> bool {
        self.groups.remove(name).is_some()
    }

    /// Whether a deleted entry may lie between `start` and `end` (inclusive; None: open).
    fn range_has_tombstones(&self, start: Option<StreamId>, end: Option<StreamId>) -> bool {
        if self.is_empty() || self.max_deleted_id.is_zero() {
            return false;
        }
        let s = start.unwrap_or(StreamId::MIN);
        let e = end.unwrap_or(StreamId::MAX);
        s <= self.max_deleted_id && self.max_deleted_id <= e
    }

    /// Redis's estimate of how many entries were ever added up to and including `id`;
    /// None when fragmentation makes it unknowable.
    pub fn estimate_entries_read(&self, id: StreamId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.is_empty() && id <= self.last_id {
            return Some(self.entries_added);
        }
        if id == self.last_id {
            return Some(self.entries_added);
        }
        if id > self.last_id {
            return None;
        }
        let first = self.first_id();
        if self.max_deleted_id.is_zero() || self.max_deleted_id < first {
            if id < first {
                return Some(self.entries_added - self.len() as u64);
            }
            if id == first {
                return Some(self.entries_added - self.len() as u64 + 1);
            }
        }
        None
    }

    /// The group's lag (entries added but not yet read by it), None when unknown.
    pub fn lag(&self, group: &Group) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if let Some(read) = group.entries_read {
            if !self.range_has_tombstones(Some(group.last_id), None) {
                return Some(self.entries_added.saturating_sub(read));
            }
        }
        self.estimate_entries_read(group.last_id)
            .map(|read| self.entries_added.saturating_sub(read))
    }

    /// Moves a group's last-delivered ID (XGROUP SETID).
    pub fn set_group_id(&mut self, name: &[u8], id: StreamId, entries_read: Option<u64>) -> bool {
        match self.groups.get_mut(name) {
            Some(g) => {
                g.last_id = id;
                g.entries_read = entries_read;
                true
            }
            None => false,
        }
    }

    /// XREADGROUP with `>`: up to `count` entries after the group's last-delivered ID, for
    /// `consumer` (created if missing). Unless `noack` they become pending for it. None if
    /// the group does not exist.
    pub fn read_group_new(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        count: Option<usize>,
        noack: bool,
        now_ms: u64,
    ) -> Option<Vec<ReadEntry>> {
        let after = self.groups.get(group)?.last_id.next();
        let mut out: Vec<ReadEntry> = Vec::new();
        if let Some(start) = after {
            for (id, f) in self.range(start, StreamId::MAX, count, false) {
                out.push((id, Some(f.clone())));
            }
        }
        // Counters are computed against the stream before the group changes.
        let mut reads: Vec<(StreamId, Option<u64>)> = Vec::with_capacity(out.len());
        let mut entries_read = self.groups[group].entries_read;
        for (id, _) in &out {
            entries_read = match entries_read {
                Some(n) if !self.range_has_tombstones(Some(*id), None) => Some(n + 1),
                _ if self.entries_added > 0 => self.estimate_entries_read(*id),
                other => other,
            };
            reads.push((*id, entries_read));
        }
        let g = self.groups.get_mut(group).expect("checked above");
        let (c, _) = g.consumer(consumer, now_ms);
        c.seen_time_ms = now_ms;
        for (id, read) in reads {
            g.last_id = id;
            g.entries_read = read;
            if !noack {
                let p = g.assign(id, consumer, now_ms);
                p.delivery_time_ms = now_ms;
                p.delivery_count = 1;
            }
        }
        Some(out)
    }

    /// XREADGROUP with an explicit ID: the consumer's own pending entries after `after`, at
    /// most `count`, each counted as delivered again. Deleted entries come back without
    /// fields. None if the group does not exist.
    pub fn read_group_history(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        after: StreamId,
        count: Option<usize>,
        now_ms: u64,
    ) -> Option<Vec<ReadEntry>> {
        let g = self.groups.get_mut(group)?;
        let (c, _) = g.consumer(consumer, now_ms);
        c.seen_time_ms = now_ms;
        let ids: Vec<StreamId> = match after.next() {
            Some(start) => c
                .pel
                .range(start..)
                .take(count.unwrap_or(usize::MAX))
                .copied()
                .collect(),
            None => Vec::new(),
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(p) = g.pel.get_mut(&id) {
                p.delivery_time_ms = now_ms;
                p.delivery_count += 1;
            }
            out.push((id, self.entries.get(&id).cloned()));
        }
        Some(out)
    }

    /// XCLAIM of one ID for `consumer` (created if needed): Some(true) when claimed, Some(false)
    /// when skipped (not pending and no `force`, or idle for less than `min_idle_ms`), None when
    /// the entry no longer exists (its pending record, if any, is dropped). `retry` sets the
    /// delivery count; otherwise it grows by one unless `justid`.
    #[allow(clippy::too_many_arguments)]
    pub fn claim(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        id: StreamId,
        min_idle_ms: u64,
        delivery_time_ms: u64,
        retry: Option<u64>,
        force: bool,
        justid: bool,
        now_ms: u64,
    ) -> Option<bool> {
        let exists = self.entries.contains_key(&id);
        let g = self.groups.get_mut(group)?;
        if !exists {
            g.ack(id);
            return None;
        }
        match g.pel.get(&id) {
            None if !force => return Some(false),
            Some(p)
                if min_idle_ms > 0 && now_ms.saturating_sub(p.delivery_time_ms) < min_idle_ms =>
            {
                return Some(false)
            }
            _ => {}
        }
        let p = g.assign(id, consumer, now_ms);
        p.delivery_time_ms = delivery_time_ms;
        match retry {
            Some(n) => p.delivery_count = n,
            None if !justid => p.delivery_count += 1,
            None => {}
        }
        Some(true)
    }

    /// XAUTOCLAIM: scans the group's PEL from `start`, claiming for `consumer` entries idle
    /// for at least `min_idle_ms`, until `count` entries were claimed or dropped or
    /// `10 × count` were looked at. Returns (next cursor, claimed IDs, IDs dropped because
    /// their entries were deleted); None if the group does not exist.
    #[allow(clippy::too_many_arguments)]
    pub fn auto_claim(
        &mut self,
        group: &[u8],
        consumer: &[u8],
        start: StreamId,
        min_idle_ms: u64,
        count: usize,
        justid: bool,
        now_ms: u64,
    ) -> Option<(StreamId, Vec<StreamId>, Vec<StreamId>)> {
        let g = self.groups.get(group)?;
        let mut attempts = count.saturating_mul(10);
        let mut left = count;
        let mut claimed = Vec::new();
        let mut deleted = Vec::new();
        let mut cursor = StreamId::MIN;
        let ids: Vec<StreamId> = g.pel.range(start..).map(|(id, _)| *id).collect();
        let mut it = ids.into_iter().peekable();
        while attempts > 0 && left > 0 {
            let Some(id) = it.next() else { break };
            attempts -= 1;
            if !self.entries.contains_key(&id) {
                self.groups.get_mut(group).expect("exists").ack(id);
                deleted.push(id);
                left -= 1;
                continue;
            }
            let g = self.groups.get_mut(group).expect("exists");
            let idle = now_ms.saturating_sub(g.pel[&id].delivery_time_ms);
            if min_idle_ms > 0 && idle < min_idle_ms {
                continue;
            }
            let p = g.assign(id, consumer, now_ms);
            p.delivery_time_ms = now_ms;
            if !justid {
                p.delivery_count += 1;
            }
            claimed.push(id);
            left -= 1;
        }
        if let Some(next) = it.next() {
            cursor = next;
        }
        Some((cursor, claimed, deleted))
    }

    /// Approximate heap bytes held (INFO memory, MEMORY USAGE).
    pub fn heap_bytes(&self) -> usize {
        let entries: usize = self
            .entries
            .values()
            .map(|f| 48 + f.iter().map(|(a, b)| a.len() + b.len() + 48).sum::<usize>())
            .sum();
        let groups: usize = self
            .groups
            .iter()
            .map(|(n, g)| n.len() + 64 + g.pel.len() * 64 + g.consumers.len() * 64)
            .sum();
        entries + groups
    }

    /// Iterates every entry in ID order.
    pub fn iter(&self) -> impl Iterator<Item = (StreamId, &Fields)> {
        self.entries.iter().map(|(k, v)| (*k, v))
    }

    /// Appends an entry in ID order without touching the counters (RESTORE sets them itself);
    /// node boundaries are rebuilt with the default limits. False if not after the last.
    pub fn insert_raw(&mut self, id: StreamId, fields: Fields) -> bool {
        if self.entries.last_key_value().is_some_and(|(k, _)| *k >= id) {
            return false;
        }
        self.place(id, entry_bytes(&fields), NodeLimits::default());
        self.entries.insert(id, fields);
        true
    }

    /// Inserts a group as it was dumped (RESTORE).
    pub fn insert_group_raw(&mut self, name: Vec<u8>, group: Group) -> bool {
        self.groups.insert(name, group).is_none()
    }

    /// Checks the structure's invariants (tests and the node's invariant checker).
    pub fn check(&self) -> Result<(), String> {
        let live: usize = self.blocks.iter().map(|b| b.live).sum();
        if live != self.len() {
            return Err(format!(
                "nodes hold {live} live entries, the stream {}",
                self.len()
            ));
        }
        let mut prev = StreamId::MIN;
        for (i, b) in self.blocks.iter().enumerate() {
            if b.live == 0 || b.live > b.slots || (i > 0 && b.last <= prev) {
                return Err(format!("node {i} malformed: {b:?}"));
            }
            let lo = if i == 0 {
                StreamId::MIN
            } else {
                prev.next().unwrap_or(StreamId::MAX)
            };
            let n = if i == 0 {
                self.entries.range(..=b.last).count()
            } else {
                self.entries.range(lo..=b.last).count()
            };
            if n != b.live {
                return Err(format!("node {i} counts {} live, holds {n}", b.live));
            }
            prev = b.last;
        }
        if let Some((id, _)) = self.last_entry() {
            if id > self.last_id {
                return Err(format!("entry {id} beyond last id {}", self.last_id));
            }
        }
        for (name, g) in &self.groups {
            let name = String::from_utf8_lossy(name);
            for (id, p) in &g.pel {
                let owner = g.consumers.get(&p.consumer);
                if !owner.is_some_and(|c| c.pel.contains(id)) {
                    return Err(format!(
                        "group {name}: pending {id} not in its consumer's list"
                    ));
                }
            }
            let owned: usize = g.consumers.values().map(|c| c.pel.len()).sum();
            if owned != g.pel.len() {
                return Err(format!(
                    "group {name}: consumers own {owned} of {} pending",
                    g.pel.len()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(a: &str, b: &str) -> Fields {
        vec![(a.as_bytes().to_vec(), b.as_bytes().to_vec())]
    }

    fn id(ms: u64, seq: u64) -> StreamId {
        StreamId::new(ms, seq)
    }

    #[test]
    fn ids_parse_order_and_step() {
        assert_eq!(StreamId::parse(b"12-3", 0), Some(id(12, 3)));
        assert_eq!(StreamId::parse(b"12", 7), Some(id(12, 7)));
        assert_eq!(StreamId::parse(b"-1", 0), None);
        assert_eq!(StreamId::parse(b"1-", 0), None);
        assert_eq!(StreamId::parse(b"1-x", 0), None);
        assert_eq!(StreamId::parse(b"18446744073709551616", 0), None);
        assert!(id(1, 9) < id(2, 0));
        assert_eq!(id(1, u64::MAX).next(), Some(id(2, 0)));
        assert_eq!(StreamId::MAX.next(), None);
        assert_eq!(id(2, 0).prev(), Some(id(1, u64::MAX)));
        assert_eq!(id(5, 6).to_string(), "5-6");
    }

    #[test]
    fn auto_ids_never_go_back() {
        let mut s = Stream::new();
        let a = s.next_id(NewId::Auto, 100).unwrap();
        assert_eq!(a, id(100, 0));
        s.add(a, f("a", "1")).unwrap();
        // Clock behind the last ID: the sequence grows instead.
        let b = s.next_id(NewId::Auto, 50).unwrap();
        assert_eq!(b, id(100, 1));
        s.add(b, f("b", "2")).unwrap();
        assert_eq!(s.next_id(NewId::Ms(100), 0), Ok(id(100, 2)));
        assert_eq!(s.next_id(NewId::Ms(99), 0), Err(AddError::NotGreater));
        assert_eq!(
            s.next_id(NewId::Exact(id(100, 1)), 0),
            Err(AddError::NotGreater)
        );
        assert_eq!(s.next_id(NewId::Exact(id(0, 0)), 0), Err(AddError::Zero));
        assert_eq!(s.add(id(100, 1), f("c", "3")), Err(AddError::NotGreater));
        assert_eq!(s.len(), 2);
        assert_eq!(s.entries_added, 2);
    }

    #[test]
    fn ranges_deletes_and_trims() {
        let mut s = Stream::new();
        for i in 1..=250 {
            s.add(id(i, 0), f("i", &i.to_string())).unwrap();
        }
        let r = s.range(id(10, 0), id(20, 0), Some(3), false);
        assert_eq!(
            r.iter().map(|e| e.0.ms).collect::<Vec<_>>(),
            vec![10, 11, 12]
        );
        let r = s.range(id(10, 0), id(20, 0), Some(2), true);
        assert_eq!(r.iter().map(|e| e.0.ms).collect::<Vec<_>>(), vec![20, 19]);
        assert!(s.range(id(20, 0), id(10, 0), None, false).is_empty());
        assert!(s.delete(id(5, 0)));
        assert!(!s.delete(id(5, 0)));
        assert_eq!(s.max_deleted_id, id(5, 0));
        // Nodes of 100: [1..=100] (one deleted), [101..=200], [201..=250].
        // Approximate: only whole nodes go, and only while the rest stays >= MAXLEN.
        assert_eq!(s.trim(Some(60), None, true, 0), 99);
        assert_eq!(s.len(), 150);
        assert_eq!(s.trim(Some(60), None, true, 0), 0);
        assert_eq!(s.trim(Some(50), None, true, 0), 100);
        assert_eq!(s.len(), 50);
        s.check().unwrap();
        // Exact with MINID deletes inside the first node; trimming leaves max_deleted_id.
        assert_eq!(s.trim(None, Some(id(220, 0)), false, 0), 19);
        assert_eq!(s.first_id(), id(220, 0));
        assert_eq!(s.max_deleted_id, id(5, 0));
        assert_eq!(s.trim(Some(10), None, false, 0), 21);
        assert_eq!(s.len(), 10);
        s.check().unwrap();
    }

    #[test]
    fn approximate_trimming_follows_node_boundaries() {
        // Redis's own expectations (unit/type/stream): MAXLEN ~ and LIMIT act on whole nodes.
        let limits = NodeLimits {
            max_entries: 10,
            max_bytes: 4096,
        };
        let mut s = Stream::new();
        for i in 1..=101 {
            s.add_with(id(i, 0), f("xitem", "v"), limits).unwrap();
        }
        assert_eq!(s.trim(Some(55), None, true, 30), 30);
        assert_eq!(s.len(), 71);
        s.add_with(id(102, 0), f("xitem", "v"), limits).unwrap();
        assert_eq!(s.trim(Some(55), None, true, 30), 10);
        assert_eq!(s.len(), 62);
        let limits = NodeLimits {
            max_entries: 2,
            max_bytes: 4096,
        };
        let mut s = Stream::new();
        for i in 1..=3 {
            s.add_with(id(i, 0), f("xitem", "v"), limits).unwrap();
        }
        assert_eq!(s.trim(Some(0), None, true, 1), 0);
        assert_eq!(s.trim(Some(0), None, true, 2), 2);
        // Exact trims leave a partly deleted first node, which ~ then removes whole.
        let mut s = Stream::new();
        for i in 1..=1000 {
            s.add(id(i, 0), f("xitem", "v")).unwrap();
        }
        s.trim(Some(666), None, false, 0);
        s.trim(Some(555), None, false, 0);
        assert_eq!(s.trim(Some(444), None, true, 0), 55);
        assert_eq!(s.len(), 500);
        s.trim(Some(400), None, true, 0);
        assert_eq!(s.len(), 400);
        s.check().unwrap();
    }

    #[test]
    fn groups_deliver_ack_and_claim() {
        let mut s = Stream::new();
        for i in 1..=5 {
            s.add(id(i, 0), f("k", "v")).unwrap();
        }
        assert!(s.create_group(b"g", StreamId::MIN, None));
        assert!(!s.create_group(b"g", StreamId::MIN, None));
        let got = s
            .read_group_new(b"g", b"alice", Some(2), false, 1000)
            .unwrap();
        assert_eq!(
            got.iter().map(|e| e.0).collect::<Vec<_>>(),
            vec![id(1, 0), id(2, 0)]
        );
        let g = s.group(b"g").unwrap();
        assert_eq!(g.last_id, id(2, 0));
        assert_eq!(g.entries_read, Some(2));
        assert_eq!(s.lag(g), Some(3));
        assert_eq!(g.pel.len(), 2);
        // NOACK: delivered, not pending.
        s.read_group_new(b"g", b"bob", Some(1), true, 1000).unwrap();
        assert_eq!(s.group(b"g").unwrap().pel.len(), 2);
        // History read counts a second delivery.
        let h = s
            .read_group_history(b"g", b"alice", StreamId::MIN, None, 2000)
            .unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(s.group(b"g").unwrap().pel[&id(1, 0)].delivery_count, 2);
        // Claim by bob once idle long enough.
        assert_eq!(
            s.claim(b"g", b"bob", id(1, 0), 5000, 2500, None, false, false, 2500),
            Some(false)
        );
        assert_eq!(
            s.claim(b"g", b"bob", id(1, 0), 100, 2500, None, false, false, 2500),
            Some(true)
        );
        let g = s.group(b"g").unwrap();
        assert_eq!(g.pel[&id(1, 0)].consumer, b"bob".to_vec());
        assert_eq!(g.pel[&id(1, 0)].delivery_count, 3);
        assert!(!g.consumers[&b"alice".to_vec()].pel.contains(&id(1, 0)));
        // FORCE creates a pending record for an entry never delivered.
        assert_eq!(
            s.claim(b"g", b"carol", id(5, 0), 0, 3000, None, true, true, 3000),
            Some(true)
        );
        // A deleted entry's pending record goes away.
        s.delete(id(2, 0));
        assert_eq!(
            s.claim(b"g", b"bob", id(2, 0), 0, 3000, None, false, false, 3000),
            None
        );
        assert!(!s.group(b"g").unwrap().pel.contains_key(&id(2, 0)));
        assert!(s.group_mut(b"g").unwrap().ack(id(1, 0)));
        assert!(!s.group_mut(b"g").unwrap().ack(id(1, 0)));
        assert_eq!(
            s.group_mut(b"g").unwrap().delete_consumer(b"carol"),
            Some(1)
        );
        s.check().unwrap();
    }

    #[test]
    fn autoclaim_reports_cursor_and_deleted() {
        let mut s = Stream::new();
        for i in 1..=4 {
            s.add(id(i, 0), f("k", "v")).unwrap();
        }
        s.create_group(b"g", StreamId::MIN, None);
        s.read_group_new(b"g", b"a", None, false, 0).unwrap();
        s.delete(id(2, 0));
        let (next, claimed, deleted) = s
            .auto_claim(b"g", b"b", StreamId::MIN, 10, 2, false, 100)
            .unwrap();
        assert_eq!(claimed, vec![id(1, 0)]);
        assert_eq!(deleted, vec![id(2, 0)]);
        assert_eq!(next, id(3, 0));
        let (next, claimed, _) = s.auto_claim(b"g", b"b", next, 10, 10, false, 100).unwrap();
        assert_eq!(claimed, vec![id(3, 0), id(4, 0)]);
        assert_eq!(next, StreamId::MIN);
        s.check().unwrap();
    }

    #[test]
    fn lag_is_unknown_across_deletions() {
        let mut s = Stream::new();
        for i in 1..=5 {
            s.add(id(i, 0), f("k", "v")).unwrap();
        }
        s.create_group(b"g", id(1, 0), None);
        // Known by estimate: the first entry's counter is exact.
        assert_eq!(s.lag(s.group(b"g").unwrap()), Some(4));
        s.delete(id(3, 0));
        assert_eq!(s.lag(s.group(b"g").unwrap()), None);
    }
}

//! Client-side caching (CLIENT TRACKING): the state behind invalidation messages.
//!
//! A client with tracking on is told when a key it may have cached changes. In the default
//! mode the node remembers, per key, which clients read it since it last changed, and forgets
//! the key once it has told them (one message per change, then nothing until they read it
//! again). In BCAST mode the node remembers nothing per key: every change to a key under one
//! of the client's prefixes is announced, gathered per prefix until the node next hands its
//! output to the driver (one message per prefix and drain, as Redis sends one per event-loop
//! turn).
//!
//! This module holds only the state (so that `Core` can hold it without importing command
//! code); what reads and changes it on a command's behalf is `crate::ctx::tracking`.
//!
//! Bounds: the per-key table holds at most `tracking-table-max-keys` keys (keys past it are
//! evicted with an invalidation, as if they had changed, so no client keeps a stale copy);
//! BCAST keys are held only until the next drain; clients are bounded by `maxclients`.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::client::ConnId;

/// Keys changed under one BCAST prefix since the last drain, and its clients.
#[derive(Debug, Default)]
pub struct Prefix {
    pub clients: BTreeSet<ConnId>,
    /// Changed key -> the client whose command changed it last (None: expiry, a peer), so a
    /// NOLOOP client is not told of its own changes.
    pub changed: BTreeMap<Bytes, Option<ConnId>>,
}

/// What an invalidation message names.
pub enum Invalidated<'a> {
    /// Some keys.
    Keys(&'a [&'a [u8]]),
    /// Every key (a flush): RESP's null in place of the array.
    All,
}

/// The node's tracking tables.
#[derive(Debug, Default)]
pub struct Tracking {
    /// Key -> clients that read it since it last changed (default mode). A client that turns
    /// tracking off is not removed here (Redis does the same): its ids are skipped when the
    /// key changes, which keeps turning tracking off O(1).
    pub keys: BTreeMap<Bytes, BTreeSet<ConnId>>,
    /// Sum of the sets' sizes in `keys` (INFO tracking_total_items).
    pub items: usize,
    /// BCAST prefix -> its clients and the keys changed under it.
    pub prefixes: BTreeMap<Bytes, Prefix>,
    /// Some prefix has changed keys not yet broadcast.
    pub broadcast_due: bool,
    /// Clients with tracking on (INFO tracking_clients).
    pub clients: usize,
    /// The client whose request is running, if any: its own invalidations wait until its
    /// reply has been written (`pending_own`), and NOLOOP skips them.
    pub current: Option<ConnId>,
    /// Invalidations for `current`, sent after its reply (None: every key, a flush).
    pub pending_own: Vec<Option<Bytes>>,
    /// A key is being deleted by expiry: the change belongs to no client.
    pub expiring: bool,
    /// Eviction rounds in a row that ended still over `tracking-table-max-keys`: each round
    /// tries 100 keys more than the last, as Redis does.
    pub over_limit_rounds: u32,
}

impl Tracking {
    /// Whether a change to a key concerns anyone (the hot path's one check).
    #[inline]
    pub fn watching(&self) -> bool {
        !self.keys.is_empty() || !self.prefixes.is_empty()
    }

    /// Remembers that `conn` read `key`.
    pub fn remember(&mut self, key: &[u8], conn: ConnId) {
        let ids = match self.keys.get_mut(key) {
            Some(ids) => ids,
            None => self.keys.entry(Bytes::copy_from_slice(key)).or_default(),
        };
        if ids.insert(conn) {
            self.items += 1;
        }
    }

    /// Forgets `key` and returns who had read it.
    pub fn take(&mut self, key: &[u8]) -> Option<BTreeSet<ConnId>> {
        let ids = self.keys.remove(key)?;
        self.items -= ids.len();
        Some(ids)
    }

    /// Notes a change to `key` under every BCAST prefix it starts with.
    pub fn note_broadcast(&mut self, key: &[u8], by: Option<ConnId>) {
        for (prefix, state) in self.prefixes.iter_mut() {
            if key.starts_with(prefix) {
                state.changed.insert(Bytes::copy_from_slice(key), by);
                self.broadcast_due = true;
            }
        }
    }

    /// Subscribes `conn` to `prefix` in BCAST mode.
    pub fn add_prefix(&mut self, prefix: &Bytes, conn: ConnId) {
        self.prefixes
            .entry(prefix.clone())
            .or_default()
            .clients
            .insert(conn);
    }

    /// Unsubscribes `conn` from `prefix`, dropping the prefix with its last client.
    pub fn remove_prefix(&mut self, prefix: &[u8], conn: ConnId) {
        if let Some(state) = self.prefixes.get_mut(prefix) {
            state.clients.remove(&conn);
            if state.clients.is_empty() {
                self.prefixes.remove(prefix);
            }
        }
    }

    /// Drops every remembered key (a flush has invalidated them all).
    pub fn clear_keys(&mut self) {
        self.keys.clear();
        self.items = 0;
    }

    /// Panics if the counters disagree with the tables.
    pub fn check_invariants(&self) {
        let items: usize = self.keys.values().map(BTreeSet::len).sum();
        assert_eq!(items, self.items, "tracking items counter");
        assert!(
            self.keys.values().all(|ids| !ids.is_empty()),
            "tracked key with no client"
        );
        assert!(
            self.prefixes.values().all(|p| !p.clients.is_empty()),
            "BCAST prefix with no client"
        );
        assert!(
            self.broadcast_due || self.prefixes.values().all(|p| p.changed.is_empty()),
            "BCAST keys waiting with no broadcast due"
        );
    }
}

/// The two prefixes overlap: some key starts with both (Redis refuses such a pair for one
/// client, since the key would be announced twice).
pub fn prefixes_overlap(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

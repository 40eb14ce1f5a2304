//! The model's keyspace: an ordered map from key to value and deadline, nothing clever.
//!
//! Expired entries stay in the map until something replaces or deletes them: the model never
//! knows whether the node has reclaimed an expired key yet, so the map's size is an upper bound
//! on what DBSIZE may report and the live count a lower bound.

use std::collections::BTreeMap;

use bytes::Bytes;

/// A value of any Redis type.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(Vec<u8>),
    List(std::collections::VecDeque<Vec<u8>>),
    Hash(std::collections::BTreeMap<Vec<u8>, Vec<u8>>),
    Set(std::collections::BTreeSet<Vec<u8>>),
    /// Member -> score.
    ZSet(std::collections::BTreeMap<Vec<u8>, f64>),
}

impl Value {
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Hash(_) => "hash",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub value: Value,
    /// Absolute deadline, ms on the node's clock; live while `now_ms <= deadline`.
    pub deadline: Option<u64>,
    /// Incarnation: changes whenever the key comes into existence again (SCAN's guarantee is
    /// about keys that existed, unchanged in identity, for a whole iteration).
    pub birth: u64,
    /// A time at or before the key's last access (OBJECT IDLETIME is at most now minus this).
    pub stamp_ms: u64,
}

impl Entry {
    pub fn live(&self, now_ms: u64) -> bool {
        self.deadline.is_none_or(|d| now_ms <= d)
    }
}

#[derive(Default)]
pub struct Keyspace {
    map: BTreeMap<Bytes, Entry>,
    births: u64,
    /// Keys written by the current command, recorded while someone WATCHes (see `touch`).
    written: Option<Vec<Bytes>>,
}

impl Keyspace {
    pub fn get(&self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        self.map.get(key).filter(|e| e.live(now_ms))
    }

    pub fn get_mut(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        self.map.get_mut(key).filter(|e| e.live(now_ms))
    }

    pub fn exists(&self, key: &[u8], now_ms: u64) -> bool {
        self.get(key, now_ms).is_some()
    }

    /// Starts (`true`) or stops recording the keys written; stopping returns them.
    pub fn track_writes(&mut self, on: bool) -> Vec<Bytes> {
        let was = std::mem::replace(&mut self.written, on.then(Vec::new));
        was.unwrap_or_default()
    }

    /// Records that a command wrote `key` in a way Redis reports as a modification (its
    /// `signalModifiedKey`) even when the value stays the same: storing a whole value, HSET,
    /// LSET, LTRIM, a deadline set by EXPIRE or GETEX. WATCH sees these as changes.
    pub fn touch(&mut self, key: &[u8]) {
        if let Some(w) = self.written.as_mut() {
            w.push(Bytes::copy_from_slice(key));
        }
    }

    /// Stores a value, keeping the deadline and identity of a live entry when `keep_ttl`,
    /// otherwise with `deadline` (and a new identity if the key was not live).
    pub fn set(
        &mut self,
        key: &[u8],
        value: Value,
        deadline: Option<u64>,
        keep_ttl: bool,
        now_ms: u64,
    ) {
        self.touch(key);
        if let Some(e) = self.get_mut(key, now_ms) {
            e.value = value;
            if !keep_ttl {
                e.deadline = deadline;
            }
            e.stamp_ms = now_ms;
            return;
        }
        self.births += 1;
        let entry = Entry {
            value,
            deadline: if keep_ttl { None } else { deadline },
            birth: self.births,
            stamp_ms: now_ms,
        };
        self.map.insert(Bytes::copy_from_slice(key), entry);
    }

    /// Inserts a whole entry under `key` (RENAME, COPY), with a new identity.
    pub fn put_entry(&mut self, key: &[u8], mut entry: Entry) {
        self.touch(key);
        self.births += 1;
        entry.birth = self.births;
        self.map.insert(Bytes::copy_from_slice(key), entry);
    }

    /// Deletes `key`; returns the entry if it was live.
    pub fn delete(&mut self, key: &[u8], now_ms: u64) -> Option<Entry> {
        let e = self.map.remove(key)?;
        e.live(now_ms).then_some(e)
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Live keys in key order.
    pub fn live_keys(&self, now_ms: u64) -> impl Iterator<Item = (&Bytes, &Entry)> {
        self.map.iter().filter(move |(_, e)| e.live(now_ms))
    }

    pub fn live_count(&self, now_ms: u64) -> usize {
        self.live_keys(now_ms).count()
    }

    /// Entries the node may still hold: live ones plus expired ones not known to be reclaimed.
    pub fn stored_upper_bound(&self) -> usize {
        self.map.len()
    }

    /// Live entries carrying a deadline.
    pub fn volatile_count(&self, now_ms: u64) -> usize {
        self.live_keys(now_ms)
            .filter(|(_, e)| e.deadline.is_some())
            .count()
    }

    pub fn stored_volatile_upper_bound(&self) -> usize {
        self.map.values().filter(|e| e.deadline.is_some()).count()
    }
}

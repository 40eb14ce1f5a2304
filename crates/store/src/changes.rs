//! Which keys changed since an observer last looked: lets an invariant check look at what a
//! step changed instead of at every key (the full walk costs the whole keyspace per check).
//!
//! Off until [`Changes::start`]; while off, noting a change is a single branch. While on it
//! holds at most [`MAX_NOTED`] key hashes: past that it only remembers that it overflowed, and
//! the observer must look at everything.

/// Hashes kept before the journal gives up and reports "everything" (a bulk change such as a
/// FLUSHALL or a large merge is checked whole anyway).
pub const MAX_NOTED: usize = 4_096;

/// What changed since the journal was last taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Changed {
    /// The [`crate::key_hash`]es of every key that may have changed, ascending, each once.
    Keys(Vec<u64>),
    /// More than [`MAX_NOTED`] keys, a change of the whole keyspace, or nothing noted yet
    /// (the journal was off): anything may have changed.
    Everything,
}

/// A bounded journal of changed key hashes (see the module comment).
#[derive(Default)]
pub struct Changes {
    on: bool,
    overflowed: bool,
    hashes: Vec<u64>,
}

impl Changes {
    /// Starts noting changes; what changed before is unknown, so the first take reports
    /// [`Changed::Everything`].
    pub fn start(&mut self) {
        if !self.on {
            self.on = true;
            self.overflowed = true;
        }
    }

    /// Notes that the key hashed `h` changed (or may have: an exclusive borrow counts).
    #[inline]
    pub fn note(&mut self, h: u64) {
        if !self.on || self.overflowed {
            return;
        }
        if self.hashes.len() < MAX_NOTED {
            self.hashes.push(h);
        } else {
            self.overflowed = true;
            self.hashes = Vec::new();
        }
    }

    /// Notes that any key may have changed.
    pub fn note_all(&mut self) {
        if self.on {
            self.overflowed = true;
            self.hashes = Vec::new();
        }
    }

    /// What changed since the last take, forgetting it. Starts the journal if it was off.
    pub fn take(&mut self) -> Changed {
        if !self.on || self.overflowed {
            self.on = true;
            self.overflowed = false;
            self.hashes.clear();
            return Changed::Everything;
        }
        let mut hashes = std::mem::take(&mut self.hashes);
        hashes.sort_unstable();
        hashes.dedup();
        Changed::Keys(hashes)
    }

    pub fn check_invariants(&self) {
        assert!(
            self.hashes.len() <= MAX_NOTED,
            "change journal over its bound"
        );
        assert!(
            self.on || self.hashes.is_empty(),
            "change journal holds hashes while off"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{Changed, Changes, MAX_NOTED};

    #[test]
    fn off_notes_nothing_and_the_first_take_reports_everything() {
        let mut c = Changes::default();
        c.note(1);
        c.check_invariants();
        assert_eq!(c.take(), Changed::Everything, "off: nothing known");
        c.note(7);
        c.note(3);
        c.note(7);
        assert_eq!(c.take(), Changed::Keys(vec![3, 7]));
        assert_eq!(c.take(), Changed::Keys(vec![]));
        let mut d = Changes::default();
        d.start();
        d.note(5);
        assert_eq!(
            d.take(),
            Changed::Everything,
            "changes before the start are unknown"
        );
        d.note(5);
        assert_eq!(d.take(), Changed::Keys(vec![5]));
    }

    #[test]
    fn past_the_bound_or_after_a_whole_change_everything_is_reported() {
        let mut c = Changes::default();
        assert_eq!(c.take(), Changed::Everything);
        for h in 0..=MAX_NOTED as u64 {
            c.note(h);
        }
        c.check_invariants();
        assert_eq!(c.take(), Changed::Everything);
        c.note(1);
        assert_eq!(c.take(), Changed::Keys(vec![1]));
        c.note(2);
        c.note_all();
        c.note(3);
        assert_eq!(c.take(), Changed::Everything);
    }
}

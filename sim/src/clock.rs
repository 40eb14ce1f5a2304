//! Per-node wall clocks over exact virtual time.
//!
//! Virtual time (µs since the start of the run) is exact and shared by the whole world. Each node
//! reads its own wall clock: the Unix epoch of the run plus a per-node offset, plus a drift in
//! parts per million of elapsed virtual time. Offsets may jump (a clock stepped by NTP, forwards or
//! backwards); the reading handed to the node never goes backwards — a clock stepped back holds
//! still until it catches up, as the real server's driver does. This wall time is what expiry,
//! `TIME` and, later, hybrid logical clocks see.

/// Virtual time zero on every clock without offset: 2023-11-14T22:13:20Z, in µs.
pub const EPOCH_US: u64 = 1_700_000_000_000_000;

#[derive(Clone, Debug)]
pub struct Clock {
    /// Offset from the true time, µs (may be negative).
    offset_us: i64,
    /// Rate error, parts per million (positive runs fast).
    drift_ppm: i64,
    /// The latest reading handed out: readings are monotonic.
    last_us: u64,
}

impl Clock {
    pub fn new(offset_us: i64, drift_ppm: i64) -> Clock {
        assert!(drift_ppm > -1_000_000, "a clock must move forwards");
        Clock {
            offset_us,
            drift_ppm,
            last_us: 0,
        }
    }

    pub fn offset_us(&self) -> i64 {
        self.offset_us
    }

    pub fn drift_ppm(&self) -> i64 {
        self.drift_ppm
    }

    /// The clock's raw (possibly non-monotonic) value at virtual time `virt_us`.
    fn raw(&self, virt_us: u64) -> u64 {
        let drift = (virt_us as i128 * self.drift_ppm as i128) / 1_000_000;
        let v = EPOCH_US as i128 + self.offset_us as i128 + virt_us as i128 + drift;
        v.max(0) as u64
    }

    /// Reads the clock at virtual time `virt_us` (which must not go backwards between calls).
    pub fn read(&mut self, virt_us: u64) -> u64 {
        let v = self.raw(virt_us).max(self.last_us);
        self.last_us = v;
        v
    }

    /// What [`Clock::read`] would return, without recording it.
    pub fn peek(&self, virt_us: u64) -> u64 {
        self.raw(virt_us).max(self.last_us)
    }

    /// Steps the clock by `delta_us` (an NTP correction; backwards steps are absorbed by
    /// monotonic reading).
    pub fn jump(&mut self, delta_us: i64) {
        self.offset_us += delta_us;
    }

    /// The earliest virtual time at or after `now_virt` when the clock reads at least
    /// `target_us` (for turning a node's timer deadline into a world event time).
    pub fn virtual_at(&self, target_us: u64, now_virt: u64) -> u64 {
        if self.peek(now_virt) >= target_us {
            return now_virt;
        }
        self.raw_reaches(target_us, now_virt)
    }

    /// When a clock stepped back stops holding still: the earliest virtual time at or after
    /// `now_virt` when its raw reading is back at the last reading handed out. Until then every
    /// timer of its node waits (ARCHITECTURE §31), so liveness is judged from there on.
    pub fn resumes_at(&self, now_virt: u64) -> u64 {
        if self.raw(now_virt) >= self.last_us {
            return now_virt;
        }
        self.raw_reaches(self.last_us, now_virt)
    }

    /// The earliest virtual time at or after `now_virt` when the raw reading is at least
    /// `target_us`.
    fn raw_reaches(&self, target_us: u64, now_virt: u64) -> u64 {
        // raw(v) = E + off + v * (1e6 + drift) / 1e6: solve for v, then step past rounding.
        let base = EPOCH_US as i128 + self.offset_us as i128;
        let need = target_us as i128 - base;
        let rate = 1_000_000 + self.drift_ppm as i128;
        let mut v = ((need * 1_000_000 + rate - 1) / rate).max(now_virt as i128) as u64;
        while self.raw(v) < target_us {
            v += 1;
        }
        while v > now_virt && self.raw(v - 1) >= target_us {
            v -= 1;
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_and_drift() {
        let mut c = Clock::new(5_000, 100);
        assert_eq!(c.read(0), EPOCH_US + 5_000);
        // 100 ppm of 10 s is 1 ms.
        assert_eq!(c.read(10_000_000), EPOCH_US + 5_000 + 10_000_000 + 1_000);
    }

    #[test]
    fn readings_are_monotonic_across_backward_jumps() {
        let mut c = Clock::new(0, 0);
        let a = c.read(1_000_000);
        c.jump(-500_000);
        let b = c.read(1_200_000);
        assert_eq!(a, b, "holds still until the clock catches up");
        let d = c.read(1_600_000);
        assert_eq!(d, EPOCH_US + 1_100_000);
        c.jump(2_000_000);
        assert_eq!(c.read(1_600_000), EPOCH_US + 3_100_000);
    }

    #[test]
    fn virtual_at_inverts_read() {
        for (off, drift) in [(0, 0), (-3_000_000, 250), (7_000, -300), (123, 1)] {
            let c = Clock::new(off, drift);
            for now in [0u64, 5, 1_000_000, 33_333_333] {
                for ahead in [0u64, 1, 999, 1_000_000, 7_777_777] {
                    let target = c.peek(now) + ahead;
                    let v = c.virtual_at(target, now);
                    assert!(v >= now);
                    assert!(c.peek(v) >= target);
                    assert!(v == now || c.peek(v - 1) < target);
                }
            }
        }
    }
}

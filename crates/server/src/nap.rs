//! When an event loop with nothing left to do should nap on a timer instead of blocking.
//!
//! A loop that blocks in `epoll_wait` is woken by the next request to arrive, and the client's
//! kernel pays for that wake-up inside its `send`: it finds a sleeping waiter, wakes the thread
//! and interrupts the core it sleeps on. The faster the server, the more often it runs out of
//! work and the more wake-ups it costs, so under many concurrent clients a faster server can
//! make a saturated client slower (figures: bench/results/architecture-measurements.md, §26).
//!
//! Under concurrent load the loop therefore naps for a few microseconds on a timer before it
//! blocks: requests that arrive meanwhile queue up without waking anyone, and one turn serves
//! them together (the interrupt moderation of a network card, done by the receiver). It never
//! naps when that would cost latency that nothing pays back:
//! - only when at least [`MIN_ACTIVE_CONNS`] distinct connections sent requests in the last
//!   whole window of [`WINDOW_US`]: a lone client waiting on each reply is never made to wait
//!   for a nap;
//! - never longer than [`CYCLE_SHARE`] of the time those connections' requests take to come
//!   round again (connections × mean gap between requests, over that window): a few requests
//!   in flight cannot cover a long nap, so a nap must shrink with the cycle;
//! - only after a non-blocking check found nothing (a saturated loop keeps serving);
//! - not at all for the rest of the window once a nap found nothing to do when it ended (the
//!   load is too light for naps to gather work, and each empty one is a wasted wake-up);
//! - never past the loop's own next deadline (timers, a paused accept).
//!
//! A nap adds at most its length (plus the kernel's timer slack) to the wait of a request that
//! arrives during it, and only while many connections are busy, when requests queue anyway.

use std::time::Duration;

/// The longest nap (`--nap-us` changes it). The request-cycle cap below is what usually
/// decides; this bounds the delay a nap adds to a request that arrives during it, which must
/// stay small next to what a request already waits under the load that allows naps.
pub const NAP_US: u64 = 100;
/// The most `--nap-us` accepts: a nap delays requests that arrive during it.
pub const MAX_NAP_US: u64 = 1_000;
/// Timer slack for loop threads: the default 50 µs would stretch a short nap by that much.
pub const TIMER_SLACK_NS: u64 = 5_000;
/// Fewer busy connections than this and the loop blocks as before.
pub const MIN_ACTIVE_CONNS: u32 = 8;
/// The span over which busy connections are counted.
pub const WINDOW_US: u64 = 1_000;
/// A nap is at most this fraction (1/N) of the busy connections' request cycle.
pub const CYCLE_SHARE: u64 = 8;
/// Shorter naps than this are not worth the timer.
pub const MIN_NAP_US: u64 = 10;

/// Per-loop bookkeeping; see the module comment for the rules.
#[derive(Debug)]
pub struct NapPolicy {
    nap_us: u64,
    /// Start of the current window (µs of the wall clock) and its number, which starts at 1
    /// so that a connection's initial mark of 0 never matches.
    window_start_us: u64,
    window: u32,
    active_now: u32,
    /// Connection inputs (about one per request at pipeline depth 1) in this window.
    inputs_now: u64,
    /// The nap the last whole window allows (0: none); 0 too once that window is more than
    /// one window ago.
    nap_allowed_us: u64,
    /// A nap came back empty in this window.
    failed_in: Option<u32>,
}

impl NapPolicy {
    /// `nap_us` 0 turns napping off.
    pub fn new(nap_us: u64) -> NapPolicy {
        NapPolicy {
            nap_us,
            window_start_us: 0,
            window: 1,
            active_now: 0,
            inputs_now: 0,
            nap_allowed_us: 0,
            failed_in: None,
        }
    }

    /// Sets the calling thread's timer slack to [`TIMER_SLACK_NS`], so naps last about what
    /// they ask for. Failure only makes naps longer.
    pub fn set_thread_timer_slack() {
        // SAFETY: PR_SET_TIMERSLACK takes an integer and touches no memory of ours.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, TIMER_SLACK_NS as libc::c_ulong);
        }
    }

    /// False with `--nap-us 0`: the loop then need not read the clock for it.
    pub fn enabled(&self) -> bool {
        self.nap_us > 0
    }

    /// Called once per turn with the time, before connections are counted.
    pub fn begin_turn(&mut self, now_us: u64) {
        let elapsed_us = now_us.saturating_sub(self.window_start_us);
        if elapsed_us < WINDOW_US {
            return;
        }
        self.nap_allowed_us = 0;
        if elapsed_us < 2 * WINDOW_US && self.active_now >= MIN_ACTIVE_CONNS && self.inputs_now > 0
        {
            // The busy connections' request cycle: each comes round once per
            // (connections × mean gap between inputs).
            let cycle_us = u64::from(self.active_now) * elapsed_us / self.inputs_now;
            let nap_us = self.nap_us.min(cycle_us / CYCLE_SHARE);
            if nap_us >= MIN_NAP_US {
                self.nap_allowed_us = nap_us;
            }
        }
        self.active_now = 0;
        self.inputs_now = 0;
        self.window_start_us = now_us;
        // Wrapping is harmless: a connection whose mark is a whole cycle of windows old
        // is at worst not counted once.
        self.window = self.window.wrapping_add(1).max(1);
    }

    /// Counts a connection that has input this turn, once per window; `mark` is the
    /// connection's own record of the window it was last counted in.
    pub fn count(&mut self, mark: &mut u32) {
        self.inputs_now += 1;
        if *mark != self.window {
            *mark = self.window;
            self.active_now += 1;
        }
    }

    /// How long to nap before blocking with `timeout` (None: no deadline), if at all.
    pub fn nap_for(&self, timeout: Option<Duration>) -> Option<Duration> {
        if self.nap_allowed_us == 0 || self.failed_in == Some(self.window) {
            return None;
        }
        let nap = Duration::from_micros(self.nap_allowed_us);
        match timeout {
            Some(t) if t <= nap => None,
            _ => Some(nap),
        }
    }

    /// What the check after a nap found.
    pub fn nap_ended(&mut self, found_work: bool) {
        if !found_work {
            self.failed_in = Some(self.window);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One window of `conns` connections sending `inputs` inputs in all, then the turn that
    /// closes it at `end_us`.
    fn window(p: &mut NapPolicy, marks: &mut [u32], inputs: usize, end_us: u64) {
        for i in 0..inputs {
            let n = marks.len();
            p.count(&mut marks[i % n]);
        }
        p.begin_turn(end_us);
    }

    fn nap_us(p: &NapPolicy) -> Option<u64> {
        p.nap_for(None).map(|d| d.as_micros() as u64)
    }

    #[test]
    fn a_lone_client_never_causes_a_nap() {
        let mut p = NapPolicy::new(NAP_US);
        let mut mark = 0;
        for turn in 1..10_000u64 {
            p.begin_turn(turn * 10);
            p.count(&mut mark);
            assert_eq!(p.nap_for(None), None);
        }
    }

    #[test]
    fn many_busy_connections_cause_naps_that_stop_when_they_go_quiet() {
        let mut p = NapPolicy::new(NAP_US);
        let mut marks = vec![0u32; 50];
        p.begin_turn(10_000);
        // 50 connections, 30 inputs per ms: a cycle of 1,667 µs, so the full nap.
        window(&mut p, &mut marks, 30, 10_000 + WINDOW_US);
        assert_eq!(nap_us(&p), Some(NAP_US));
        // A window with one connection short of the minimum allows none.
        let few = MIN_ACTIVE_CONNS as usize - 1;
        window(&mut p, &mut marks[..few], 70, 10_000 + 2 * WINDOW_US);
        assert_eq!(nap_us(&p), None);
        // Counting the same connection twice in a window counts it once.
        window(&mut p, &mut marks[..few], 7_000, 10_000 + 3 * WINDOW_US);
        assert_eq!(nap_us(&p), None);
        // Busy again, then a long idle gap: the stale window allows nothing.
        window(&mut p, &mut marks, 70, 10_000 + 4 * WINDOW_US);
        assert_eq!(
            nap_us(&p),
            Some(89),
            "a cycle of 714 µs caps it at an eighth"
        );
        p.begin_turn(10_000 + 10 * WINDOW_US);
        assert_eq!(nap_us(&p), None);
    }

    #[test]
    fn a_nap_is_a_small_share_of_the_request_cycle() {
        let mut p = NapPolicy::new(NAP_US);
        let mut marks = vec![0u32; 8];
        p.begin_turn(1_000);
        // 8 connections at 70 inputs per ms: a cycle of 114 µs, an eighth of it 14 µs.
        window(&mut p, &mut marks, 70, 1_000 + WINDOW_US);
        assert_eq!(nap_us(&p), Some(14));
        // Faster still, the nap would be too short to be worth a timer.
        window(&mut p, &mut marks, 200, 1_000 + 2 * WINDOW_US);
        assert_eq!(nap_us(&p), None);
    }

    #[test]
    fn an_empty_nap_stops_naps_until_the_next_window() {
        let mut p = NapPolicy::new(NAP_US);
        let mut marks = vec![0u32; 20];
        p.begin_turn(5_000);
        window(&mut p, &mut marks, 40, 5_000 + WINDOW_US);
        p.nap_ended(true);
        assert!(p.nap_for(None).is_some());
        p.nap_ended(false);
        assert_eq!(p.nap_for(None), None);
        window(&mut p, &mut marks, 40, 5_000 + 2 * WINDOW_US);
        assert!(p.nap_for(None).is_some());
    }

    #[test]
    fn a_nap_never_runs_past_the_loops_deadline_and_can_be_turned_off() {
        let mut p = NapPolicy::new(NAP_US);
        let mut marks = vec![0u32; 20];
        p.begin_turn(5_000);
        window(&mut p, &mut marks, 40, 5_000 + WINDOW_US);
        let nap = p.nap_for(None).expect("busy enough to nap");
        assert_eq!(p.nap_for(Some(nap)), None);
        assert_eq!(p.nap_for(Some(Duration::ZERO)), None);
        assert!(p.nap_for(Some(Duration::from_millis(5))).is_some());
        let mut off = NapPolicy::new(0);
        off.begin_turn(5_000);
        window(&mut off, &mut marks, 40, 5_000 + WINDOW_US);
        assert_eq!(off.nap_for(None), None);
    }
}

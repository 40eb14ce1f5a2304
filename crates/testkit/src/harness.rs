//! One standalone node on a clock the test moves, its invariants checked after every step.

use std::ops::{Deref, DerefMut};

use bytes::Bytes;
use lattice_node::{Config, Input, Micros};

use crate::host::Host;
use crate::START_MS;

pub struct Harness {
    pub host: Host,
    pub now_ms: u64,
    /// Invariants are checked after every `check_every`-th step (1: every one). Above 1 only
    /// for bulk loads of many thousands of keys, where a check per step is quadratic; such a
    /// test checks once more at its end.
    pub check_every: u64,
    steps: u64,
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

impl Deref for Harness {
    type Target = Host;
    fn deref(&self) -> &Host {
        &self.host
    }
}

impl DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut Host {
        &mut self.host
    }
}

impl Harness {
    /// A node with the default configuration and no client yet.
    pub fn new() -> Harness {
        Harness::with_config(Config::default())
    }

    pub fn with_config(config: Config) -> Harness {
        Harness::with_config_and_seed(config, 1)
    }

    /// A node with the default configuration whose RNG (SPOP, SRANDMEMBER, eviction samples)
    /// starts from `seed`.
    pub fn seeded(seed: u64) -> Harness {
        Harness::with_config_and_seed(Config::default(), seed)
    }

    pub fn with_config_and_seed(config: Config, seed: u64) -> Harness {
        Harness {
            host: Host::new(config, seed, Micros::from_millis(START_MS)),
            now_ms: START_MS,
            check_every: 1,
            steps: 0,
        }
    }

    /// A node with connections `1..=clients` open.
    pub fn with_clients(clients: u64) -> Harness {
        let mut h = Harness::new();
        for id in 1..=clients {
            h.connect(id);
        }
        h
    }

    /// A node under `appendonly yes` that persists (its records kept, every sync answered at
    /// once), with client 1 connected; it recovers `data` first (snapshot chunks and records,
    /// in order), as a restart on that data directory does.
    pub fn durable(data: &[Bytes]) -> Harness {
        let mut config = Config::default();
        config.appendonly = true;
        let mut h = Harness::with_config(config);
        h.host.sync_at_once = true;
        let now = h.now();
        h.host.recover(now, data.to_vec());
        h.connect(1);
        h
    }

    pub fn now(&self) -> Micros {
        Micros::from_millis(self.now_ms)
    }

    pub fn connect(&mut self, id: u64) {
        let now = self.now();
        self.host.connect(now, id);
        self.drain();
    }

    /// Hands the node any input at the current time.
    pub fn input(&mut self, input: Input) {
        let now = self.now();
        self.host.node.handle(now, input);
        self.drain();
    }

    fn drain(&mut self) {
        let mut sends = Vec::new();
        let now = self.now();
        self.host.drain(now, &mut sends);
        assert!(sends.is_empty(), "a standalone node sent to a peer");
        self.steps += 1;
        if self.steps.is_multiple_of(self.check_every) {
            self.host.node.check_invariants();
        }
    }

    /// Sends one command and returns (and forgets) everything written to `id` since.
    pub fn cmd(&mut self, id: u64, args: &[&str]) -> String {
        self.send(id, &[args]);
        self.take(id)
    }

    /// A command of whitespace-separated words from `id`; what was written to `id` since.
    pub fn line(&mut self, id: u64, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        self.cmd(id, &words)
    }

    /// Fails unless client 1's command `line` is answered exactly `expected`.
    #[track_caller]
    pub fn check(&mut self, line: &str, expected: &(impl AsRef<[u8]> + ?Sized)) {
        let got = self.line(1, line);
        assert_eq!(
            got,
            String::from_utf8_lossy(expected.as_ref()),
            "reply to {line:?}"
        );
    }

    /// [`Harness::cmd`] with binary arguments and reply.
    pub fn raw(&mut self, id: u64, args: &[&[u8]]) -> Vec<u8> {
        let now = self.now();
        let args = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        self.host.request(now, id, args);
        self.drain();
        self.take_bytes(id)
    }

    /// A pipeline from `id`, handed over request by request with nothing taken in between.
    pub fn send(&mut self, id: u64, pipeline: &[&[&str]]) {
        let now = self.now();
        for args in pipeline {
            self.host.request(now, id, crate::args(args));
        }
        self.drain();
    }

    /// Moves the clock on by `ms` at once and fires the node's timers.
    pub fn advance(&mut self, ms: u64) {
        self.now_ms += ms;
        let now = self.now();
        self.host.node.handle_timeout(now);
        self.drain();
    }

    /// Fires the node's timers at the current time (one slice of a running script).
    pub fn tick(&mut self) {
        self.advance(0);
    }

    /// Ticks until no script is running; returns how many slices that took.
    pub fn finish_script(&mut self) -> usize {
        let mut slices = 0;
        while self.host.node.script_running() {
            self.tick();
            slices += 1;
            assert!(slices < 100_000, "script never ended");
        }
        slices
    }
}

//! Inputs while a script runs between slices: which wait (in arrival order) and which are
//! served, and finishing the script when its last slice has run.

use super::Node;
use crate::io::Input;

/// Inputs held back while a script runs (client requests before busy-reply-threshold, the
/// script caller's requests, replication messages) at most. Past it, replication messages are
/// dropped (anti-entropy repairs them) and clients sending more are closed.
const MAX_HELD_INPUTS: usize = 100_000;

impl Node {
    pub(super) fn input_during_script(&mut self, input: Input) {
        self.check_script_threshold();
        let Some(run) = self.core.scripts.running.as_mut() else {
            return self.apply(input);
        };
        let conn = match &input {
            // No keyspace involved: served at once.
            Input::Connected { .. }
            | Input::ProcessStats(_)
            | Input::Persisted { .. }
            | Input::PersistError { .. }
            | Input::SnapshotDone { .. }
            | Input::Loaded { .. } => return self.apply(input),
            Input::Request { conn, .. }
            | Input::ProtocolError { conn, .. }
            | Input::Closed { conn } => Some(*conn),
            // A new set of users must not change what a running script may do: held.
            Input::PeerUp { .. }
            | Input::PeerDown { .. }
            | Input::PeerMessage { .. }
            | Input::AclFileDone { .. } => None,
        };
        if run.timed_out && conn.is_some_and(|c| c != run.caller) {
            return self.apply(input);
        }
        if self.held.len() >= MAX_HELD_INPUTS {
            match (&input, conn) {
                (Input::PeerMessage { .. }, _) => return,
                (Input::Request { .. }, Some(c)) if c == run.caller => {
                    run.close_caller = true;
                    return;
                }
                (Input::Request { .. }, Some(c)) => return self.core.close_client(c),
                _ => {}
            }
        }
        self.held.push_back(input);
    }

    /// Once the running script is past busy-reply-threshold on the node's clock, the client
    /// inputs held back for it are served (and mostly refused with BUSY); the caller's and the
    /// replication messages keep waiting.
    pub(super) fn check_script_threshold(&mut self) {
        let now = self.core.now;
        let threshold_us = self
            .core
            .config
            .busy_reply_threshold_ms
            .saturating_mul(1000);
        let Some(run) = self.core.scripts.running.as_mut() else {
            return;
        };
        if run.timed_out || now.0.saturating_sub(run.started.0) < threshold_us {
            return;
        }
        run.timed_out = true;
        let caller = run.caller;
        for input in std::mem::take(&mut self.held) {
            let other_client = match &input {
                Input::Request { conn, .. }
                | Input::ProtocolError { conn, .. }
                | Input::Closed { conn } => *conn != caller,
                _ => false,
            };
            if other_client {
                self.apply(input);
            } else {
                self.held.push_back(input);
            }
        }
    }

    /// Runs the suspended script's next slice; when it ends, replies to its caller and lets
    /// everything held back in, in order.
    pub(super) fn continue_script(&mut self) {
        self.check_script_threshold();
        let Some(done) = crate::cmd::script::continue_script(&mut self.core) else {
            return;
        };
        let core = &mut self.core;
        if done.reply.is_some() {
            let mut code = None;
            core.write_to(done.caller, |w| code = done.write(w));
            if let Some(code) = code {
                core.stats.total_error_replies += 1;
                *core.stats.errors.entry(code).or_insert(0) += 1;
            }
        }
        if done.close {
            core.close_client(done.caller);
        }
        self.release_parked();
        // A held request may start another long script: the rest is then held again.
        for input in std::mem::take(&mut self.held) {
            self.take_input(input);
        }
    }
}

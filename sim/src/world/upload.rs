//! Replicated runs with a bucket (`RunConfig::repl_s3`): each replica's object-store driver,
//! as the server's task runs it (one call at a time against the replica's own prefix), and the
//! bucket's weather during the faults.

use lattice_node::Micros;

use super::{Ev, Phase, World};
use crate::bucket::Weather;

/// How often a replica's object-store driver looks for a due answer or a call to make. The
/// bucket answers in 1 ms at the soonest and the uploader cuts a piece every 100 ms, so a few
/// milliseconds of delay change no outcome, only when it shows.
pub(super) const UPLOAD_STEP_US: u64 = 4_000;

/// Per step of the safety phase, in a thousand: the bucket's weather changes about once a
/// second, so most runs see a storm of each kind and fine spells between them.
const WEATHER_CHANGE_PER_MILLE: u64 = 4;

impl World {
    pub(super) fn on_upload(&mut self, node: usize) {
        if self.phase == Phase::End {
            return;
        }
        let next = self.now + UPLOAD_STEP_US;
        self.at(next, Ev::Upload { node });
        if self.phase == Phase::Safety && self.rng.below(1000) < WEATHER_CHANGE_PER_MILLE {
            let w = *self.rng.pick(&[
                Weather::Fine,
                Weather::Slow,
                Weather::Failing,
                Weather::Hanging,
            ]);
            if w != Weather::Fine {
                self.faults.add(crate::fault::FaultClass::BucketStorm, 1);
            }
            self.hosts[node]
                .bucket
                .as_mut()
                .expect("scheduled for hosts with a bucket")
                .weather = w;
        }
        // A crashed process makes no calls (its bucket settled what was in flight when it
        // died); a paused one makes none until it resumes.
        if !self.hosts[node].running() {
            return;
        }
        let now = self.now;
        let host = &mut self.hosts[node];
        let t = Micros(host.clock.read(now));
        let bucket = host
            .bucket
            .as_mut()
            .expect("scheduled for hosts with a bucket");
        let router = host.router.as_mut().expect("running");
        let (persister, n) = router
            .persister_and_node_mut()
            .expect("a host with a bucket persists");
        let mut acted = false;
        if let Some((id, result)) = bucket.finish(now) {
            persister.call_done(n, t, id, result);
            acted = true;
        }
        if let Some(call) = persister.poll_call(n, t) {
            bucket.start(now, call);
            acted = true;
        }
        persister
            .uploader()
            .expect("attached at start")
            .check_invariants();
        if acted {
            // An upload may release replies held for it (`s3-durability sync`), and a
            // snapshot the uploader asked for goes out through the node's timer.
            self.drain_on(node, None, None);
            self.after_node_step(node);
        }
    }

    /// The end of the drain: every replica with a bucket has uploaded what its disk synced
    /// (the store has answered for the whole drain), and its prefix restores.
    pub(super) fn check_uploads_drained(&mut self) {
        for h in 0..self.hosts.len() {
            let host = &mut self.hosts[h];
            let Some(bucket) = host.bucket.as_mut() else {
                continue;
            };
            let Some(p) = host.router.as_ref().and_then(|r| r.persister()) else {
                continue;
            };
            let u = p.uploader().expect("attached at start");
            // Under `appendfsync no` the last records may never be synced, and only synced
            // records go up: what must have drained is what the disk made durable.
            let synced = p.store().synced_seq();
            let all_synced = synced == p.store().framed_seq();
            if u.uploaded_seq() < synced || u.wants_snapshot() || (all_synced && u.lag_bytes() > 0)
            {
                let msg = format!(
                    "n{h}: the upload did not drain in the 30 s the store answered: lag {} bytes, uploaded seq {}, synced seq {}, snapshot wanted {}",
                    u.lag_bytes(),
                    u.uploaded_seq(),
                    synced,
                    u.wants_snapshot()
                );
                return self.fail(msg);
            }
            if let Err(e) = bucket.restore() {
                return self.fail(format!("n{h}: restore from the drained bucket: {e}"));
            }
        }
    }
}

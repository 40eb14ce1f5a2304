//! The simulated object store for the durability mode: a map of keys to objects and one call
//! in flight (the uploader makes one at a time), whose latency and outcome follow the bucket's
//! weather. A call given up on may still land: its effect is applied or not at random when the
//! next call starts or the node crashes, and its answer is lost.

use std::collections::BTreeMap;

use bytes::Bytes;
use lattice_persist::{plan_restore, Call, ObjectReply, ObjectRequest, RestorePlan, MANIFEST_KEY};

use crate::rng::Rand;

/// How the object store behaves for a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weather {
    /// Answers in 1-20 ms.
    Fine,
    /// Answers in 100-600 ms, often after the uploader's timeout.
    Slow,
    /// Answers errors.
    Failing,
    /// Never answers.
    Hanging,
}

struct InFlight {
    call: Call,
    due_us: u64,
    /// Whether the call takes effect and, if it is answered, how.
    lands: bool,
    answer: Option<Result<ObjectReply, String>>,
}

pub struct SimBucket {
    objects: BTreeMap<String, Bytes>,
    pub weather: Weather,
    rng: Rand,
    in_flight: Option<InFlight>,
}

impl SimBucket {
    pub fn new(seed: u64) -> SimBucket {
        SimBucket {
            objects: BTreeMap::new(),
            weather: Weather::Fine,
            rng: Rand::new(seed),
            in_flight: None,
        }
    }

    /// Starts `call`; one still in flight (given up on) lands or not first.
    pub fn start(&mut self, now_us: u64, call: Call) {
        self.settle_abandoned();
        let (latency_us, lands, answered) = match self.weather {
            Weather::Fine => (self.rng.range(1_000, 20_000), true, true),
            Weather::Slow => (self.rng.range(100_000, 600_000), true, true),
            Weather::Failing => (self.rng.range(1_000, 50_000), false, true),
            Weather::Hanging => (u64::MAX - now_us, self.rng.pct(50), false),
        };
        let answer = answered.then(|| {
            if !lands {
                return Err("503 Slow Down (simulated)".to_string());
            }
            Ok(match &call.request {
                ObjectRequest::List => ObjectReply::Keys(Vec::new()),
                _ => ObjectReply::Done,
            })
        });
        self.in_flight = Some(InFlight {
            call,
            due_us: now_us + latency_us,
            lands,
            answer,
        });
    }

    /// The answer of the call in flight, if it is due: its effect applied first.
    pub fn finish(&mut self, now_us: u64) -> Option<(u64, Result<ObjectReply, String>)> {
        if self.in_flight.as_ref().is_none_or(|f| f.due_us > now_us) {
            return None;
        }
        let f = self.in_flight.take().expect("checked");
        let listing = f.lands.then(|| self.apply(&f.call.request)).flatten();
        let answer = match (f.answer?, listing) {
            (Ok(_), Some(keys)) => Ok(ObjectReply::Keys(keys)),
            (a, _) => a,
        };
        Some((f.call.id, answer))
    }

    /// The uploader is gone (its node crashed): a call in flight lands or not.
    pub fn crash(&mut self) {
        self.settle_abandoned();
    }

    fn settle_abandoned(&mut self) {
        if let Some(f) = self.in_flight.take() {
            if f.lands && self.rng.pct(50) {
                self.apply(&f.call.request);
            }
        }
    }

    fn apply(&mut self, request: &ObjectRequest) -> Option<Vec<String>> {
        match request {
            ObjectRequest::Put { key, data } => {
                self.objects.insert(key.clone(), data.clone());
                None
            }
            ObjectRequest::Delete { keys } => {
                for k in keys {
                    self.objects.remove(k);
                }
                None
            }
            ObjectRequest::List => Some(self.objects.keys().cloned().collect()),
        }
    }

    /// What a node with an empty directory would fetch, with the stale pieces removed (as the
    /// server's restore does): the plan and every object it names (the manifest included).
    pub fn restore(&mut self) -> Result<(RestorePlan, Vec<(String, Bytes)>), String> {
        let keys: Vec<String> = self.objects.keys().cloned().collect();
        let manifest = self.objects.get(MANIFEST_KEY).cloned();
        let plan = plan_restore(&keys, manifest.as_deref())?;
        for k in &plan.stale {
            self.objects.remove(k);
        }
        let mut files = Vec::new();
        if let Some((_, key)) = &plan.snapshot {
            files.push((key.clone(), self.objects[key].clone()));
        }
        for (key, name) in &plan.pieces {
            files.push((name.clone(), self.objects[key].clone()));
        }
        if let Some(m) = manifest {
            files.push(("MANIFEST".to_string(), m));
        }
        Ok((plan, files))
    }
}

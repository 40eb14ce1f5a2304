//! A run's history: one record per client operation, with its invocation and completion times
//! on the harness's clock. Saved as JSON lines so a failing run can be checked again.

use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a client asked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "kebab-case")]
pub enum Call {
    /// lin-kv read (with a key) or a counter / g-set / broadcast read (without).
    Read {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<Value>,
    },
    Write {
        key: Value,
        value: Value,
    },
    Cas {
        key: Value,
        from: Value,
        to: Value,
    },
    /// g-counter / pn-counter.
    Add {
        delta: i64,
    },
    /// g-set.
    AddElement {
        element: Value,
    },
    Broadcast {
        message: Value,
    },
}

/// How it ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Outcome {
    /// Succeeded; reads carry what they read (`value`, or broadcast's `messages`).
    Ok {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<Value>,
    },
    /// A definite error: the operation did not take effect (a read of a missing key is one).
    Fail { code: i64, text: String },
    /// No reply in time, or an indeterminate error: it may or may not have taken effect.
    Info { reason: String },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Position in the history.
    pub index: usize,
    /// The logical process (a client gets a fresh one after an indeterminate operation, since
    /// the old one may still be in flight).
    pub process: u64,
    /// The node the client talked to.
    pub node: String,
    pub call: Call,
    /// Microseconds since the run started.
    pub invoke_us: u64,
    /// `None` when no reply came.
    pub complete_us: Option<u64>,
    pub outcome: Outcome,
    /// One of the reads made after healing, which must show everything acknowledged.
    #[serde(default)]
    pub final_read: bool,
}

impl Op {
    pub fn is_ok(&self) -> bool {
        matches!(self.outcome, Outcome::Ok { .. })
    }

    pub fn is_info(&self) -> bool {
        matches!(self.outcome, Outcome::Info { .. })
    }

    /// A short human description for reports.
    pub fn describe(&self) -> String {
        let call = serde_json::to_string(&self.call).unwrap_or_default();
        let outcome = serde_json::to_string(&self.outcome).unwrap_or_default();
        let done = match self.complete_us {
            Some(t) => format!("{:.3}s", t as f64 / 1e6),
            None => "never".into(),
        };
        format!(
            "#{} process {} on {}: {} -> {} (invoked {:.3}s, completed {})",
            self.index,
            self.process,
            self.node,
            call,
            outcome,
            self.invoke_us as f64 / 1e6,
            done
        )
    }
}

pub fn save(path: &Path, ops: &[Op]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for op in ops {
        serde_json::to_writer(&mut f, op)?;
        f.write_all(b"\n")?;
    }
    f.flush()
}

/// Loads a saved history; a bad line is an error naming its line number.
pub fn load(path: &Path) -> Result<Vec<Op>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut ops = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let op: Op = serde_json::from_str(&line)
            .map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
        ops.push(op);
    }
    Ok(ops)
}

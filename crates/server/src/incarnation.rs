//! A clustered replica's incarnation: which start of it this is, kept in `INCARNATION` in its
//! data directory and raised at every start, before the node serves anything. The node stamps
//! its writes with its id and this number (`Config::dot_node_id`), so a replica that comes back
//! without its replicated state (cluster nodes do not persist it yet) never reissues dots its
//! peers saw from an earlier start: they would take the new writes for old ones and drop them,
//! together with the data those writes replaced.
//!
//! A directory without the file (a new replica, or one whose directory was wiped) starts from a
//! number taken from the wall clock (milliseconds, modulo the 20-bit space), so a wiped replica
//! reuses an earlier start's number only if it starts in the same millisecond of the
//! ~17-minute cycle as that start did (milliseconds rather than seconds: a replica restarted
//! at once, as a test or a supervisor does, is always a few milliseconds later).

use std::fs::{self, File};
use std::io::Write as _;
use std::path::Path;

use lattice_node::MAX_INCARNATION;

const FILE: &str = "INCARNATION";

/// Reads the previous incarnation in `dir`, durably records the next one and returns it.
pub fn next(dir: &Path, now_unix_ms: u64) -> Result<u32, String> {
    let path = dir.join(FILE);
    let next = match fs::read_to_string(&path) {
        Ok(text) => {
            let prev: u32 = text
                .trim()
                .parse()
                .map_err(|_| format!("{}: not a number: {:?}", path.display(), text.trim()))?;
            prev % MAX_INCARNATION + 1
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            (now_unix_ms % u64::from(MAX_INCARNATION)) as u32 + 1
        }
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let tmp = dir.join(format!("{FILE}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(format!("{next}\n").as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| format!("cannot record the incarnation in {}: {e}", path.display()))?;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_start_gets_a_new_number() {
        let dir = std::env::temp_dir().join(format!("lattice-inc-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let first = next(&dir, 1_000).unwrap();
        assert_eq!(first, 1_001);
        assert_eq!(
            next(&dir, 5).unwrap(),
            1_002,
            "the file wins over the clock"
        );
        fs::write(dir.join(FILE), format!("{MAX_INCARNATION}\n")).unwrap();
        assert_eq!(next(&dir, 5).unwrap(), 1, "wraps, never 0");
        fs::write(dir.join(FILE), "garbage").unwrap();
        assert!(next(&dir, 5).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}

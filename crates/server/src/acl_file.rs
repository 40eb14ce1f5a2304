//! The ACL file's reads and writes (ACL LOAD, ACL SAVE, start-up): the node asks for them
//! (`Output::AclFile`) and the server carries them out, under the node's lock; they are rare
//! administrative commands and the file is small.

use std::io::Write;
use std::path::Path;

use bytes::Bytes;
use lattice_node::acl::FileOp;

/// Carries out one request: the file's contents for a load, nothing for a save; or the
/// operating system's reason in the words Redis shows (`No such file or directory`).
pub fn carry_out(op: &FileOp) -> Result<Option<Bytes>, String> {
    match op {
        FileOp::Load { path } => std::fs::read(path)
            .map(|b| Some(Bytes::from(b)))
            .map_err(|e| os_reason(&e)),
        FileOp::Save { path, text } => save(Path::new(path), text).map(|_| None).map_err(|e| {
            tracing::warn!("ACL SAVE to {path} failed: {e}");
            os_reason(&e)
        }),
    }
}

/// Writes a temporary file beside the target, syncs it and renames it over the target, so
/// a crash leaves either the old file or the new one.
fn save(path: &Path, text: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The error without Rust's " (os error N)" suffix.
fn os_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_then_load_round_trips() {
        let dir = std::env::temp_dir().join(format!("lattice-acl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("users.acl").display().to_string();
        let text = Bytes::from_static(b"user default on nopass ~* &* +@all\n");
        let saved = carry_out(&FileOp::Save {
            path: path.clone(),
            text: text.clone(),
        });
        assert_eq!(saved, Ok(None));
        assert_eq!(carry_out(&FileOp::Load { path }), Ok(Some(text)));
        let missing = dir.join("nope.acl").display().to_string();
        assert_eq!(
            carry_out(&FileOp::Load { path: missing }),
            Err("No such file or directory".to_string())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

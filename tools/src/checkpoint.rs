//! Checkpoints (SPEC R9.6): before a file-changing tool touches a file, its old content (or the
//! fact that it did not exist) is saved under `data_dir/checkpoints/<turn_id>/`, once per path
//! per turn; `restore` puts the turn's files back.
//!
//! Layout: `manifest.json` lists the saved paths in order; `files/<n>` holds old contents.
//! Contents are written and fsynced before the manifest names them, and the manifest is
//! replaced by rename, so a crash leaves either the old or the new manifest, never a torn one.
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const MANIFEST: &str = "manifest.json";
const FILES: &str = "files";

/// Serializes saves: two turns' calls may run at once, and read-modify-write of a manifest
/// must not interleave.
static SAVE_LOCK: Mutex<()> = Mutex::new(());

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The turn saved nothing (no file-changing call ran), or the directory is gone.
    #[error("no checkpoint at {}", .0.display())]
    NotFound(PathBuf),
    #[error("checkpoint manifest {} is unreadable: {source}", .path.display())]
    Manifest {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// A saved path no longer resolves inside the workspace (e.g. a directory on the way
    /// became a symlink to elsewhere); nothing is written through it.
    #[error("refused to restore {}: {reason}", .path.display())]
    Refused { path: PathBuf, reason: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> CheckpointError {
    let context = context.into();
    move |source| CheckpointError::Io { context, source }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Manifest {
    entries: Vec<Entry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    /// Relative to the workspace.
    path: String,
    /// `files/<n>` inside the checkpoint directory; absent when the file did not exist.
    blob: Option<String>,
    /// Unix permission bits of the old file.
    mode: Option<u32>,
}

fn read_manifest(dir: &Path) -> Result<Option<Manifest>, CheckpointError> {
    let path = dir.join(MANIFEST);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| CheckpointError::Manifest { path, source }),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(format!("reading {}", path.display()))(e)),
    }
}

fn write_manifest(dir: &Path, manifest: &Manifest) -> Result<(), CheckpointError> {
    let tmp = dir.join("manifest.json.tmp");
    let bytes =
        serde_json::to_vec_pretty(manifest).map_err(|source| CheckpointError::Manifest {
            path: tmp.clone(),
            source,
        })?;
    write_synced(&tmp, &bytes)?;
    let path = dir.join(MANIFEST);
    std::fs::rename(&tmp, &path).map_err(io_err(format!("replacing {}", path.display())))?;
    sync_dir(dir)
}

/// Writes `bytes` to `path` (created or truncated) and fsyncs it.
pub(crate) fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let context = || format!("writing {}", path.display());
    let mut file = File::create(path).map_err(io_err(context()))?;
    file.write_all(bytes).map_err(io_err(context()))?;
    file.sync_all().map_err(io_err(context()))
}

/// Makes a create, rename or delete inside `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(format!("syncing directory {}", dir.display())))
}

/// Saves the current state of `abs` (`rel` inside the workspace) unless this turn already did.
pub(crate) fn save(checkpoints: &Path, rel: &Path, abs: &Path) -> Result<(), CheckpointError> {
    let rel_text = rel
        .to_str()
        .ok_or_else(|| CheckpointError::Refused {
            path: rel.to_path_buf(),
            reason: "the path is not UTF-8".to_owned(),
        })?
        .to_owned();
    let _guard = SAVE_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let files = checkpoints.join(FILES);
    std::fs::create_dir_all(&files).map_err(io_err(format!("creating {}", files.display())))?;
    let mut manifest = read_manifest(checkpoints)?.unwrap_or_default();
    // Only the first save counts: it holds the file as it was before the turn.
    if manifest.entries.iter().any(|e| e.path == rel_text) {
        return Ok(());
    }
    let entry = match std::fs::read(abs) {
        Ok(old) => {
            let mode = std::fs::metadata(abs).ok().map(|m| m.permissions().mode());
            let blob = format!("{FILES}/{}", manifest.entries.len());
            write_synced(&checkpoints.join(&blob), &old)?;
            sync_dir(&files)?;
            Entry {
                path: rel_text,
                blob: Some(blob),
                mode,
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Entry {
            path: rel_text,
            blob: None,
            mode: None,
        },
        Err(e) => return Err(io_err(format!("reading {}", abs.display()))(e)),
    };
    manifest.entries.push(entry);
    write_manifest(checkpoints, &manifest)
}

/// Puts every file saved in `checkpoints_dir` back into `workspace`: saved contents are
/// rewritten (with their old permissions) and files that did not exist are deleted. Returns
/// the restored paths relative to the workspace, in the order they were first changed.
/// Restoring twice gives the same result.
pub fn restore(checkpoints_dir: &Path, workspace: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
    let Some(manifest) = read_manifest(checkpoints_dir)? else {
        return Err(CheckpointError::NotFound(checkpoints_dir.to_path_buf()));
    };
    let mut restored = Vec::with_capacity(manifest.entries.len());
    for entry in &manifest.entries {
        let target = crate::sandbox::resolve(workspace, &entry.path).map_err(|reason| {
            CheckpointError::Refused {
                path: PathBuf::from(&entry.path),
                reason,
            }
        })?;
        let parent = target.abs.parent().map(Path::to_path_buf);
        match &entry.blob {
            Some(blob) => {
                let blob_path = checkpoints_dir.join(blob);
                let old = std::fs::read(&blob_path)
                    .map_err(io_err(format!("reading {}", blob_path.display())))?;
                if let Some(parent) = &parent {
                    std::fs::create_dir_all(parent)
                        .map_err(io_err(format!("creating {}", parent.display())))?;
                }
                write_synced(&target.abs, &old)?;
                if let Some(mode) = entry.mode {
                    std::fs::set_permissions(&target.abs, std::fs::Permissions::from_mode(mode))
                        .map_err(io_err(format!(
                            "setting permissions of {}",
                            target.abs.display()
                        )))?;
                }
            }
            None => match std::fs::remove_file(&target.abs) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(format!("deleting {}", target.abs.display()))(e)),
            },
        }
        if let Some(parent) = parent.filter(|p| p.exists()) {
            sync_dir(&parent)?;
        }
        restored.push(target.rel);
    }
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r9_6_checkpoint_and_restore_round_trip() {
        let ws = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(ws.path()).unwrap();
        let cp = data.path().join("checkpoints/turn-1");
        std::fs::write(root.join("kept.txt"), "original\n").unwrap();
        std::fs::set_permissions(root.join("kept.txt"), PermissionsExt::from_mode(0o640)).unwrap();

        // First change of kept.txt saves it; the second save in the same turn is ignored.
        save(&cp, Path::new("kept.txt"), &root.join("kept.txt")).unwrap();
        std::fs::write(root.join("kept.txt"), "first edit\n").unwrap();
        save(&cp, Path::new("kept.txt"), &root.join("kept.txt")).unwrap();
        std::fs::write(root.join("kept.txt"), "second edit\n").unwrap();
        // A new file in a new directory.
        save(&cp, Path::new("new/made.txt"), &root.join("new/made.txt")).unwrap();
        std::fs::create_dir(root.join("new")).unwrap();
        std::fs::write(root.join("new/made.txt"), "created\n").unwrap();
        std::fs::set_permissions(root.join("kept.txt"), PermissionsExt::from_mode(0o600)).unwrap();

        let restored = restore(&cp, &root).unwrap();
        assert_eq!(
            restored,
            vec![PathBuf::from("kept.txt"), PathBuf::from("new/made.txt")]
        );
        assert_eq!(
            std::fs::read_to_string(root.join("kept.txt")).unwrap(),
            "original\n"
        );
        let mode = std::fs::metadata(root.join("kept.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
        assert!(!root.join("new/made.txt").exists());
        // Idempotent.
        assert_eq!(restore(&cp, &root).unwrap().len(), 2);
        assert_eq!(
            std::fs::read_to_string(root.join("kept.txt")).unwrap(),
            "original\n"
        );
    }

    #[test]
    fn r9_6_restore_without_a_checkpoint_is_not_found() {
        let ws = tempfile::tempdir().unwrap();
        let err = restore(&ws.path().join("checkpoints/none"), ws.path()).unwrap_err();
        assert!(matches!(err, CheckpointError::NotFound(_)), "{err}");
    }
}

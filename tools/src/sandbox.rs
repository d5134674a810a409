//! Confines a tool's path to the workspace: relative paths only, no `..` out of it, and no
//! existing symlink that leads out of it. Every file tool resolves its path here first.
//!
//! This guards against a model's mistakes, not against a hostile process in the workspace:
//! `terminal` can run anything, and a symlink swapped in between check and use is not caught.
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

/// A path that was checked to lie inside the workspace.
#[derive(Clone, Debug)]
pub(crate) struct Resolved {
    /// Absolute path to operate on: the existing part canonical, the rest as given.
    pub abs: PathBuf,
    /// `abs` relative to the workspace (empty for the workspace itself).
    pub rel: PathBuf,
}

/// The canonical workspace directory, or a message saying why it is not usable.
pub(crate) fn workspace_root(workspace: &Path) -> Result<PathBuf, String> {
    let canonical = std::fs::canonicalize(workspace)
        .map_err(|e| format!("workspace {} is not available: {e}", workspace.display()))?;
    if !canonical.is_dir() {
        return Err(format!(
            "workspace {} is not a directory",
            workspace.display()
        ));
    }
    Ok(canonical)
}

/// Resolves `path` (relative, as the model wrote it) inside `workspace`. The target need
/// not exist; its nearest existing ancestor must be inside the workspace.
pub(crate) fn resolve(workspace: &Path, path: &str) -> Result<Resolved, String> {
    if path.is_empty() {
        return Err("invalid arguments: \"path\" is empty".to_owned());
    }
    if path.contains('\0') {
        return Err(format!("refused: path {path:?} contains a NUL byte"));
    }
    let root = workspace_root(workspace)?;
    // `..` is applied to the text, not the disk, and only the normalized path is ever used,
    // so `link/..` cannot step through a symlink's target.
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(format!("refused: path {path:?} leaves the workspace"));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "refused: path {path:?} is absolute; use a path relative to the workspace"
                ));
            }
        }
    }

    // Walk down while the components exist; symlinks among them are followed by
    // canonicalize below and must land inside the workspace.
    let mut existing = root.clone();
    let mut missing = parts.len();
    for (i, part) in parts.iter().enumerate() {
        let next = existing.join(part);
        match std::fs::symlink_metadata(&next) {
            Ok(_) => existing = next,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                missing = i;
                break;
            }
            Err(e) => return Err(format!("cannot access {path:?}: {e}")),
        }
    }
    let canonical = match std::fs::canonicalize(&existing) {
        Ok(c) => c,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(format!(
                "refused: path {path:?} goes through a symlink whose target does not exist"
            ))
        }
        Err(e) => return Err(format!("cannot access {path:?}: {e}")),
    };
    let Ok(rel_existing) = canonical.strip_prefix(&root) else {
        return Err(format!(
            "refused: path {path:?} leads outside the workspace through a symlink"
        ));
    };
    let mut rel = rel_existing.to_path_buf();
    let mut abs = canonical.clone();
    for part in &parts[missing..] {
        rel.push(part);
        abs.push(part);
    }
    Ok(Resolved { abs, rel })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, PathBuf, tempfile::TempDir) {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(ws.path()).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.txt"), "a").unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        symlink(outside.path(), root.join("out")).unwrap();
        symlink(root.join("sub"), root.join("in")).unwrap();
        symlink(root.join("nowhere"), root.join("dangling")).unwrap();
        (ws, root, outside)
    }

    #[test]
    fn r9_6_paths_inside_the_workspace_resolve() {
        let (_ws, root, _out) = setup();
        let r = resolve(&root, "sub/a.txt").unwrap();
        assert_eq!(r.abs, root.join("sub/a.txt"));
        assert_eq!(r.rel, PathBuf::from("sub/a.txt"));
        let r = resolve(&root, "./sub/../sub/new/deeper.txt").unwrap();
        assert_eq!(r.rel, PathBuf::from("sub/new/deeper.txt"));
        // A symlink that stays inside resolves to its target.
        let r = resolve(&root, "in/a.txt").unwrap();
        assert_eq!(r.rel, PathBuf::from("sub/a.txt"));
        assert_eq!(resolve(&root, ".").unwrap().rel, PathBuf::new());
    }

    #[test]
    fn r9_6_workspace_escapes_are_refused() {
        let (_ws, root, _out) = setup();
        let err = resolve(&root, "../x").unwrap_err();
        assert_eq!(err, r#"refused: path "../x" leaves the workspace"#);
        let err = resolve(&root, "sub/../../x").unwrap_err();
        assert!(err.contains("leaves the workspace"), "{err}");
        let err = resolve(&root, "/etc/passwd").unwrap_err();
        assert!(err.contains("is absolute"), "{err}");
        let err = resolve(&root, "out/secret").unwrap_err();
        assert!(
            err.contains("outside the workspace through a symlink"),
            "{err}"
        );
        let err = resolve(&root, "out/new-file").unwrap_err();
        assert!(
            err.contains("outside the workspace through a symlink"),
            "{err}"
        );
        let err = resolve(&root, "dangling").unwrap_err();
        assert!(err.contains("symlink whose target does not exist"), "{err}");
        assert!(resolve(&root, "").is_err());
    }
}

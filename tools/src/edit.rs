//! The file-changing tools, `write_file {path, content}` and `patch {path, old, new}`. Both
//! are exclusive and checkpoint the old file before changing it (SPEC R9.6).
use crate::args::{non_empty, parse};
use crate::checkpoint::{self, write_synced};
use crate::sandbox::{self, Resolved};
use crate::{Access, Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::Path;

pub(crate) struct WriteFile;
pub(crate) struct Patch;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchArgs {
    path: String,
    old: String,
    new: String,
}

/// Runs a blocking file operation off the async threads.
async fn blocking(
    ctx: &ToolContext,
    op: impl FnOnce(&Path, &Path) -> Result<String, String> + Send + 'static,
) -> ToolOutput {
    let workspace = ctx.workspace.clone();
    let checkpoints = ctx.checkpoints.clone();
    let result = tokio::task::spawn_blocking(move || op(&workspace, &checkpoints))
        .await
        .unwrap_or_else(|e| Err(format!("file operation failed: {e}")));
    ToolOutput::from_result(result)
}

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Create or overwrite a workspace file (old one checkpointed)."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"}
            },
            "required": ["path", "content"]
        })
    }

    fn dangerous(&self) -> bool {
        true
    }

    fn access(&self) -> Access {
        Access::Exclusive
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        match parse::<WriteArgs>(args) {
            Ok(args) => blocking(ctx, move |ws, cp| write_file(ws, cp, &args)).await,
            Err(e) => ToolOutput::error(e),
        }
    }
}

fn write_file(workspace: &Path, checkpoints: &Path, args: &WriteArgs) -> Result<String, String> {
    let path = non_empty("path", &args.path)?;
    if path.ends_with('/') {
        return Err(format!("{path:?} names a directory; give a file path"));
    }
    let target = sandbox::resolve(workspace, path)?;
    regular_or_missing(&target, path)?;
    replace_file(checkpoints, &target, path, args.content.as_bytes())?;
    Ok(format!(
        "wrote {} bytes to {}",
        args.content.len(),
        target.rel.display()
    ))
}

#[async_trait]
impl Tool for Patch {
    fn name(&self) -> &str {
        "patch"
    }

    fn description(&self) -> &str {
        "Replace text old, found exactly once in a workspace file, with new (old file \
         checkpointed)."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "old": {"type": "string"},
                "new": {"type": "string"}
            },
            "required": ["path", "old", "new"]
        })
    }

    fn dangerous(&self) -> bool {
        true
    }

    fn access(&self) -> Access {
        Access::Exclusive
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        match parse::<PatchArgs>(args) {
            Ok(args) => blocking(ctx, move |ws, cp| patch(ws, cp, &args)).await,
            Err(e) => ToolOutput::error(e),
        }
    }
}

fn patch(workspace: &Path, checkpoints: &Path, args: &PatchArgs) -> Result<String, String> {
    let path = non_empty("path", &args.path)?;
    let old = non_empty("old", &args.old)?;
    let target = sandbox::resolve(workspace, path)?;
    if !regular_or_missing(&target, path)? {
        return Err(format!(
            "file {path:?} does not exist; use write_file to create it"
        ));
    }
    let bytes = std::fs::read(&target.abs).map_err(|e| format!("cannot read {path:?}: {e}"))?;
    // Patching a lossy decoding would corrupt the bytes it could not decode.
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("refused: {path:?} is not UTF-8 text; patch edits text files only"))?;
    let at = match occurrences(&text, old) {
        (0, _) => return Err(format!("old text not found in {path:?}")),
        (1, Some(at)) => at,
        (n, _) => {
            return Err(format!(
                "old text occurs {n} times in {path:?}; include more context to make it unique"
            ))
        }
    };
    let mut patched = String::with_capacity(text.len() - old.len() + args.new.len());
    patched.push_str(&text[..at]);
    patched.push_str(&args.new);
    patched.push_str(&text[at + old.len()..]);
    replace_file(checkpoints, &target, path, patched.as_bytes())?;
    let line = text[..at].matches('\n').count() + 1;
    Ok(format!(
        "patched {} at line {line}: replaced {} bytes with {}",
        target.rel.display(),
        old.len(),
        args.new.len()
    ))
}

/// Whether the target exists; an error when it exists but is not a regular file (a
/// directory, or a FIFO or device that would block or misbehave when read or written).
fn regular_or_missing(target: &Resolved, shown: &str) -> Result<bool, String> {
    match std::fs::metadata(&target.abs) {
        Ok(meta) if meta.is_file() => Ok(true),
        Ok(meta) if meta.is_dir() => Err(format!("{shown:?} is a directory")),
        Ok(_) => Err(format!("refused: {shown:?} is not a regular file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("cannot access {shown:?}: {e}")),
    }
}

/// How often `needle` occurs in `hay`, overlaps included ("aa" occurs twice in "aaa": the
/// anchor is ambiguous), and where the first occurrence starts.
fn occurrences(hay: &str, needle: &str) -> (usize, Option<usize>) {
    let mut count = 0;
    let mut first = None;
    let mut from = 0;
    while let Some(i) = hay[from..].find(needle) {
        let at = from + i;
        first.get_or_insert(at);
        count += 1;
        // Step one character, not the needle's length, so overlaps are counted too.
        from = at + hay[at..].chars().next().map_or(1, char::len_utf8);
    }
    (count, first)
}

/// Checkpoints the file, then writes `bytes` to it (parents created, fsynced).
fn replace_file(
    checkpoints: &Path,
    target: &Resolved,
    shown: &str,
    bytes: &[u8],
) -> Result<(), String> {
    checkpoint::save(checkpoints, &target.rel, &target.abs)
        .map_err(|e| format!("checkpoint of {shown:?} failed, file left unchanged: {e}"))?;
    if let Some(parent) = target.abs.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create the directory of {shown:?}: {e}"))?;
    }
    write_synced(&target.abs, bytes).map_err(|e| format!("cannot write {shown:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::tests::ctx;

    #[tokio::test]
    async fn r9_6_write_file_creates_overwrites_and_checkpoints() {
        let (_dirs, ctx) = ctx();
        let ws = ctx.workspace.clone();
        std::fs::write(ws.join("a.txt"), "before\n").unwrap();
        let out = WriteFile
            .call(json!({"path": "a.txt", "content": "after\n"}), &ctx)
            .await;
        assert_eq!(out, ToolOutput::ok("wrote 6 bytes to a.txt"));
        let out = WriteFile
            .call(json!({"path": "a.txt", "content": "again\n"}), &ctx)
            .await;
        assert!(!out.is_error, "{out:?}");
        let out = WriteFile
            .call(json!({"path": "new/dir/b.txt", "content": "hi"}), &ctx)
            .await;
        assert_eq!(out, ToolOutput::ok("wrote 2 bytes to new/dir/b.txt"));
        assert_eq!(
            std::fs::read_to_string(ws.join("new/dir/b.txt")).unwrap(),
            "hi"
        );

        // The second write in the turn did not overwrite the saved original.
        let restored = checkpoint::restore(&ctx.checkpoints, &ws).unwrap();
        assert_eq!(restored.len(), 2);
        assert_eq!(
            std::fs::read_to_string(ws.join("a.txt")).unwrap(),
            "before\n"
        );
        assert!(!ws.join("new/dir/b.txt").exists());
    }

    #[tokio::test]
    async fn r9_6_write_file_refuses_workspace_escapes() {
        let (dirs, ctx) = ctx();
        std::os::unix::fs::symlink(dirs.outside.path(), ctx.workspace.join("out")).unwrap();
        let escapes = [
            ("../x.txt", "leaves the workspace"),
            ("/tmp/x.txt", "is absolute"),
            ("out/x.txt", "outside the workspace through a symlink"),
        ];
        for (path, expected) in escapes {
            let out = WriteFile
                .call(json!({"path": path, "content": "x"}), &ctx)
                .await;
            assert!(out.is_error, "{path}");
            assert!(out.content.starts_with("refused: "), "{}", out.content);
            assert!(out.content.contains(expected), "{}", out.content);
        }
        assert_eq!(std::fs::read_dir(dirs.outside.path()).unwrap().count(), 0);
        let out = WriteFile.call(json!({"path": "a.txt"}), &ctx).await;
        assert_eq!(out.content, r#"invalid arguments: missing field "content""#);
        std::fs::create_dir(ctx.workspace.join("d")).unwrap();
        let out = WriteFile
            .call(json!({"path": "d", "content": "x"}), &ctx)
            .await;
        assert_eq!(out, ToolOutput::error(r#""d" is a directory"#));
        let out = WriteFile
            .call(json!({"path": "e/", "content": "x"}), &ctx)
            .await;
        assert_eq!(
            out,
            ToolOutput::error(r#""e/" names a directory; give a file path"#)
        );
    }

    #[tokio::test]
    async fn r9_6_patch_replaces_a_unique_anchor_and_checkpoints() {
        let (_dirs, ctx) = ctx();
        let ws = ctx.workspace.clone();
        std::fs::write(ws.join("m.rs"), "fn a() {}\nfn b() {}\n").unwrap();
        let out = Patch
            .call(
                json!({"path": "m.rs", "old": "fn b() {}", "new": "fn b() { a() }"}),
                &ctx,
            )
            .await;
        assert_eq!(
            out,
            ToolOutput::ok("patched m.rs at line 2: replaced 9 bytes with 14")
        );
        assert_eq!(
            std::fs::read_to_string(ws.join("m.rs")).unwrap(),
            "fn a() {}\nfn b() { a() }\n"
        );
        checkpoint::restore(&ctx.checkpoints, &ws).unwrap();
        assert_eq!(
            std::fs::read_to_string(ws.join("m.rs")).unwrap(),
            "fn a() {}\nfn b() {}\n"
        );
    }

    #[tokio::test]
    async fn r9_6_patch_refuses_an_ambiguous_anchor() {
        let (_dirs, ctx) = ctx();
        let ws = ctx.workspace.clone();
        std::fs::write(ws.join("m.txt"), "x = 1\nx = 1\naaa\n").unwrap();
        let out = Patch
            .call(
                json!({"path": "m.txt", "old": "x = 1", "new": "x = 2"}),
                &ctx,
            )
            .await;
        assert_eq!(
            out,
            ToolOutput::error(
                r#"old text occurs 2 times in "m.txt"; include more context to make it unique"#
            )
        );
        // Overlapping occurrences are ambiguous too.
        let out = Patch
            .call(json!({"path": "m.txt", "old": "aa", "new": "b"}), &ctx)
            .await;
        assert!(out.content.contains("occurs 2 times"), "{}", out.content);
        assert_eq!(
            std::fs::read_to_string(ws.join("m.txt")).unwrap(),
            "x = 1\nx = 1\naaa\n"
        );
        // Nothing changed, so nothing was checkpointed.
        assert!(!ctx.checkpoints.join("manifest.json").exists());
    }

    #[tokio::test]
    async fn r9_6_patch_errors_are_clear() {
        let (_dirs, ctx) = ctx();
        std::fs::write(ctx.workspace.join("m.txt"), "hello\n").unwrap();
        std::fs::write(ctx.workspace.join("latin1"), b"caf\xe9\n").unwrap();
        let cases = [
            (
                json!({"path": "m.txt", "old": "bye", "new": "x"}),
                "old text not found in \"m.txt\"",
            ),
            (
                json!({"path": "m.txt", "old": "", "new": "x"}),
                "\"old\" is empty",
            ),
            (
                json!({"path": "none.txt", "old": "a", "new": "b"}),
                "does not exist",
            ),
            (
                json!({"path": "latin1", "old": "caf", "new": "b"}),
                "not UTF-8",
            ),
            (
                json!({"path": "../m.txt", "old": "a", "new": "b"}),
                "leaves the workspace",
            ),
            (
                json!({"path": "m.txt", "old": "a"}),
                "missing field \"new\"",
            ),
        ];
        for (args, expected) in cases {
            let out = Patch.call(args.clone(), &ctx).await;
            assert!(out.is_error, "{args}");
            assert!(out.content.contains(expected), "{args}: {}", out.content);
        }
    }
}

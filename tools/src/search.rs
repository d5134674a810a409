//! `search_files {pattern, path?, glob?}`: a regex search over the workspace's text files,
//! skipping what `.gitignore`/`.ignore` and hidden-file rules skip (the `ignore` walker and
//! the `grep-*` searcher that ripgrep is built from). Results are `path:line: text`, capped.
use crate::args::{non_empty, parse};
use crate::{sandbox, Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use grep_regex::RegexMatcher;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::overrides::OverrideBuilder;
use ignore::WalkBuilder;
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::Path;
use tokio_util::sync::CancellationToken;

/// Most matching lines one call returns.
pub(crate) const MAX_MATCHES: usize = 200;
/// Longest piece of one matching line shown.
const MAX_LINE: usize = 400;

pub(crate) struct SearchFiles;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
}

#[async_trait]
impl Tool for SearchFiles {
    fn name(&self) -> &str {
        "search_files"
    }

    fn description(&self) -> &str {
        "Regex search of workspace files (not hidden or .gitignored); path and glob (*.rs) \
         narrow it. Up to 200 path:line: text matches."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string"},
                "glob": {"type": "string"}
            },
            "required": ["pattern"]
        })
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let args = match parse::<Args>(args) {
            Ok(args) => args,
            Err(e) => return ToolOutput::error(e),
        };
        let workspace = ctx.workspace.clone();
        let cancel = ctx.cancel.clone();
        let result = tokio::task::spawn_blocking(move || search(&workspace, &args, &cancel))
            .await
            .unwrap_or_else(|e| Err(format!("search_files failed: {e}")));
        ToolOutput::from_result(result)
    }
}

fn search(workspace: &Path, args: &Args, cancel: &CancellationToken) -> Result<String, String> {
    let pattern = non_empty("pattern", &args.pattern)?;
    let matcher = RegexMatcher::new_line_matcher(pattern)
        .map_err(|e| format!("invalid arguments: invalid regex {pattern:?}: {e}"))?;
    let root_workspace = sandbox::workspace_root(workspace)?;
    let root = sandbox::resolve(workspace, args.path.as_deref().unwrap_or("."))?;
    if !root.abs.exists() {
        let shown = args.path.as_deref().unwrap_or(".");
        return Err(format!("path {shown:?} does not exist"));
    }

    let mut walk = WalkBuilder::new(&root.abs);
    // Honour .gitignore even when the workspace is not a git repository; never follow a
    // symlink, which could lead out of the workspace.
    walk.require_git(false).follow_links(false);
    if let Some(glob) = args.glob.as_deref().filter(|g| !g.is_empty()) {
        let mut overrides = OverrideBuilder::new(&root.abs);
        overrides
            .add(glob)
            .map_err(|e| format!("invalid arguments: invalid glob {glob:?}: {e}"))?;
        let overrides = overrides
            .build()
            .map_err(|e| format!("invalid arguments: invalid glob {glob:?}: {e}"))?;
        walk.overrides(overrides);
    }
    let mut searcher = SearcherBuilder::new()
        // A NUL byte marks a binary file: stop searching it rather than print garbage.
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build();

    let mut lines: Vec<String> = Vec::new();
    let mut capped = false;
    let mut unreadable = 0usize;
    for entry in walk.build() {
        if cancel.is_cancelled() {
            return Err("search_files interrupted".to_owned());
        }
        let Ok(entry) = entry else {
            unreadable += 1;
            continue;
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let shown = path
            .strip_prefix(&root_workspace)
            .unwrap_or(path)
            .display()
            .to_string();
        let sink = Lossy(|number, line: &str| {
            if lines.len() >= MAX_MATCHES {
                capped = true;
                return Ok(false);
            }
            let line = line.trim_end_matches(['\n', '\r']);
            let cut = crate::spill::floor_char_boundary(line, MAX_LINE);
            let ellipsis = if cut < line.len() { " [...]" } else { "" };
            lines.push(format!("{shown}:{number}: {}{ellipsis}", &line[..cut]));
            Ok(true)
        });
        if searcher.search_path(&matcher, path, sink).is_err() {
            unreadable += 1;
        }
        if capped {
            break;
        }
    }

    let mut out = if lines.is_empty() {
        format!("no matches for {pattern:?}")
    } else {
        lines.join("\n")
    };
    if capped {
        out.push_str(&format!(
            "\n[capped at {MAX_MATCHES} matches; narrow the pattern, path or glob to see the rest]"
        ));
    }
    if unreadable > 0 {
        out.push_str(&format!(
            "\n[{unreadable} files or directories could not be read]"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::tests::ctx;

    fn setup(ws: &Path) {
        std::fs::create_dir_all(ws.join("src/deep")).unwrap();
        std::fs::create_dir_all(ws.join("target")).unwrap();
        std::fs::write(ws.join(".gitignore"), "target/\n*.log\n").unwrap();
        std::fs::write(ws.join("src/main.rs"), "fn main() {\n    hello();\n}\n").unwrap();
        std::fs::write(ws.join("src/deep/lib.rs"), "pub fn hello() {}\n").unwrap();
        std::fs::write(ws.join("notes.md"), "say hello\n").unwrap();
        std::fs::write(ws.join("target/out.rs"), "hello from build\n").unwrap();
        std::fs::write(ws.join("run.log"), "hello log\n").unwrap();
        std::fs::write(ws.join("blob.bin"), b"hello\0\x01\x02").unwrap();
    }

    #[tokio::test]
    async fn r9_6_search_files_is_gitignore_aware() {
        let (_dirs, ctx) = ctx();
        setup(&ctx.workspace);
        let out = SearchFiles.call(json!({"pattern": "hel+o"}), &ctx).await;
        assert!(!out.is_error, "{out:?}");
        let mut got: Vec<&str> = out.content.lines().collect();
        got.sort_unstable();
        assert_eq!(
            got,
            vec![
                "notes.md:1: say hello",
                "src/deep/lib.rs:1: pub fn hello() {}",
                "src/main.rs:2:     hello();",
            ]
        );
    }

    #[tokio::test]
    async fn r9_6_search_files_narrows_by_path_and_glob() {
        let (_dirs, ctx) = ctx();
        setup(&ctx.workspace);
        let out = SearchFiles
            .call(json!({"pattern": "hello", "glob": "*.rs"}), &ctx)
            .await;
        assert_eq!(out.content.lines().count(), 2, "{}", out.content);
        assert!(!out.content.contains("notes.md"));
        let out = SearchFiles
            .call(json!({"pattern": "hello", "path": "src/deep"}), &ctx)
            .await;
        assert_eq!(out, ToolOutput::ok("src/deep/lib.rs:1: pub fn hello() {}"));
        let out = SearchFiles
            .call(json!({"pattern": "hello", "path": "notes.md"}), &ctx)
            .await;
        assert_eq!(out, ToolOutput::ok("notes.md:1: say hello"));
        let out = SearchFiles
            .call(json!({"pattern": "absent-text"}), &ctx)
            .await;
        assert_eq!(out, ToolOutput::ok(r#"no matches for "absent-text""#));
    }

    #[tokio::test]
    async fn r9_6_search_files_caps_matches() {
        let (_dirs, ctx) = ctx();
        std::fs::write(ctx.workspace.join("many.txt"), "match\n".repeat(500)).unwrap();
        let out = SearchFiles.call(json!({"pattern": "match"}), &ctx).await;
        assert_eq!(out.content.lines().count(), MAX_MATCHES + 1);
        assert!(out.content.ends_with(
            "[capped at 200 matches; narrow the pattern, path or glob to see the rest]"
        ));
    }

    #[tokio::test]
    async fn r9_6_search_files_errors_are_clear() {
        let (dirs, ctx) = ctx();
        std::os::unix::fs::symlink(dirs.outside.path(), ctx.workspace.join("out")).unwrap();
        let cases = [
            (
                json!({"pattern": "a(b"}),
                "invalid arguments: invalid regex \"a(b\"",
            ),
            (json!({"pattern": ""}), "\"pattern\" is empty"),
            (
                json!({"pattern": "a", "path": "../"}),
                "leaves the workspace",
            ),
            (json!({"pattern": "a", "path": "/etc"}), "is absolute"),
            (
                json!({"pattern": "a", "path": "out"}),
                "outside the workspace",
            ),
            (json!({"pattern": "a", "path": "missing"}), "does not exist"),
            (json!({"pattern": "a", "glob": "a[b"}), "invalid glob"),
            (json!({"path": "x"}), "missing field \"pattern\""),
        ];
        for (args, expected) in cases {
            let out = SearchFiles.call(args.clone(), &ctx).await;
            assert!(out.is_error, "{args}: {out:?}");
            assert!(out.content.contains(expected), "{args}: {}", out.content);
        }
    }
}

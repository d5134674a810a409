//! `read_file {path, start_line?, end_line?}`: a text file of the workspace, whole or a
//! 1-based inclusive line range, capped in size; binary files are refused.
use crate::args::{non_empty, parse};
use crate::{sandbox, Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// Most bytes of file text one call returns.
pub(crate) const READ_CAP: usize = 256 * 1024;
/// How much of the start of a file is looked at to tell text from binary.
const SNIFF: usize = 8 * 1024;

pub(crate) struct ReadFile;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    start_line: Option<u64>,
    end_line: Option<u64>,
}

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a workspace text file, or lines start_line to end_line (1-based); at most 256 KiB."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "start_line": {"type": "integer"},
                "end_line": {"type": "integer"}
            },
            "required": ["path"]
        })
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let workspace = ctx.workspace.clone();
        let result = match parse::<Args>(args) {
            Ok(args) => tokio::task::spawn_blocking(move || read(&workspace, &args))
                .await
                .unwrap_or_else(|e| Err(format!("read_file failed: {e}"))),
            Err(e) => Err(e),
        };
        ToolOutput::from_result(result)
    }
}

fn read(workspace: &Path, args: &Args) -> Result<String, String> {
    let path = non_empty("path", &args.path)?;
    let start = args.start_line.unwrap_or(1);
    if start == 0 {
        return Err("invalid arguments: start_line is 1-based; the first line is 1".to_owned());
    }
    if let Some(end) = args.end_line {
        if end < start {
            return Err(format!(
                "invalid arguments: end_line {end} is before start_line {start}"
            ));
        }
    }
    let target = sandbox::resolve(workspace, path)?;
    let meta = std::fs::metadata(&target.abs).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("file {path:?} does not exist"),
        _ => format!("cannot read {path:?}: {e}"),
    })?;
    if meta.is_dir() {
        return Err(format!(
            "{path:?} is a directory; use search_files or terminal to list it"
        ));
    }
    if !meta.is_file() {
        // A FIFO or device could block the read forever.
        return Err(format!("refused: {path:?} is not a regular file"));
    }
    let file =
        std::fs::File::open(&target.abs).map_err(|e| format!("cannot read {path:?}: {e}"))?;
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let head = reader
        .fill_buf()
        .map_err(|e| format!("cannot read {path:?}: {e}"))?;
    if head[..head.len().min(SNIFF)].contains(&0) {
        return Err(format!(
            "refused: {path:?} looks like a binary file (it contains NUL bytes); read_file returns text only"
        ));
    }
    collect_lines(reader, path, start, args.end_line)
}

/// Reads lines `start..=end` (1-based), stopping at the cap.
fn collect_lines(
    mut reader: impl BufRead,
    path: &str,
    start: u64,
    end: Option<u64>,
) -> Result<String, String> {
    let mut out = String::new();
    let mut line = Vec::new();
    let mut number = 0u64;
    loop {
        let io_err = |e: std::io::Error| format!("cannot read {path:?}: {e}");
        if number + 1 < start {
            // Lines before the range are skipped without holding them in memory.
            if reader.skip_until(b'\n').map_err(io_err)? == 0 {
                break;
            }
            number += 1;
            continue;
        }
        line.clear();
        // One more byte than the cap: a longer line is cut and ends the read below.
        let n = reader
            .by_ref()
            .take(READ_CAP as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(io_err)?;
        if n == 0 {
            break;
        }
        number += 1;
        if end.is_some_and(|end| number > end) {
            break;
        }
        let text = String::from_utf8_lossy(&line);
        if out.len() + text.len() > READ_CAP {
            if out.is_empty() {
                // A single line longer than the cap: its head is better than nothing.
                let room = crate::spill::floor_char_boundary(&text, READ_CAP);
                out.push_str(&text[..room]);
                out.push_str(&format!(
                    "\n[... truncated at {READ_CAP} bytes inside line {number}; the rest of that \
                     line is not shown; continue with start_line={}]",
                    number + 1
                ));
            } else {
                out.push_str(&format!(
                    "[... truncated at {READ_CAP} bytes; continue with start_line={number}]"
                ));
            }
            return Ok(out);
        }
        out.push_str(&text);
    }
    if start > 1 && number < start {
        return Err(format!(
            "start_line {start} is past the end of {path:?} ({number} lines)"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::tests::ctx;

    #[tokio::test]
    async fn r9_6_read_file_returns_whole_files_and_line_ranges() {
        let (_dirs, ctx) = ctx();
        std::fs::write(ctx.workspace.join("a.txt"), "one\ntwo\nthree\nfour\n").unwrap();
        let out = ReadFile.call(json!({"path": "a.txt"}), &ctx).await;
        assert_eq!(out, ToolOutput::ok("one\ntwo\nthree\nfour\n"));
        let out = ReadFile
            .call(
                json!({"path": "a.txt", "start_line": 2, "end_line": 3}),
                &ctx,
            )
            .await;
        assert_eq!(out, ToolOutput::ok("two\nthree\n"));
        let out = ReadFile
            .call(json!({"path": "a.txt", "start_line": 4}), &ctx)
            .await;
        assert_eq!(out, ToolOutput::ok("four\n"));
        let out = ReadFile
            .call(
                json!({"path": "a.txt", "start_line": 3, "end_line": 99}),
                &ctx,
            )
            .await;
        assert_eq!(out, ToolOutput::ok("three\nfour\n"));
    }

    #[tokio::test]
    async fn r9_6_read_file_errors_are_clear() {
        let (_dirs, ctx) = ctx();
        std::fs::write(ctx.workspace.join("a.txt"), "one\ntwo\n").unwrap();
        std::fs::write(ctx.workspace.join("bin"), b"\x7fELF\0\0\x01").unwrap();
        std::fs::create_dir(ctx.workspace.join("dir")).unwrap();
        let cases = [
            (json!({}), r#"invalid arguments: missing field "path""#),
            (
                json!({"path": "nope.txt"}),
                r#"file "nope.txt" does not exist"#,
            ),
            (json!({"path": "bin"}), "looks like a binary file"),
            (json!({"path": "dir"}), "is a directory"),
            (json!({"path": "a.txt", "start_line": 0}), "1-based"),
            (json!({"path": "a.txt", "start_line": 5}), "past the end"),
            (
                json!({"path": "a.txt", "start_line": 2, "end_line": 1}),
                "before start_line",
            ),
            (json!({"path": "../a.txt"}), "leaves the workspace"),
            (json!({"path": "/etc/passwd"}), "is absolute"),
        ];
        for (args, expected) in cases {
            let out = ReadFile.call(args.clone(), &ctx).await;
            assert!(out.is_error, "{args}: {out:?}");
            assert!(out.content.contains(expected), "{args}: {}", out.content);
        }
    }

    #[tokio::test]
    async fn r9_6_read_file_refuses_a_fifo_instead_of_blocking() {
        let (_dirs, ctx) = ctx();
        let fifo = ctx.workspace.join("pipe");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let out = ReadFile.call(json!({"path": "pipe"}), &ctx).await;
        assert_eq!(
            out,
            ToolOutput::error(r#"refused: "pipe" is not a regular file"#)
        );
    }

    #[tokio::test]
    async fn r9_6_read_file_through_a_symlink_to_outside_is_refused() {
        let (dirs, ctx) = ctx();
        let outside = dirs.outside.path().join("secret.txt");
        std::fs::write(&outside, "secret").unwrap();
        std::os::unix::fs::symlink(&outside, ctx.workspace.join("link.txt")).unwrap();
        let out = ReadFile.call(json!({"path": "link.txt"}), &ctx).await;
        assert!(out.is_error);
        assert!(
            out.content.contains("outside the workspace"),
            "{}",
            out.content
        );
    }

    #[tokio::test]
    async fn r9_6_read_file_caps_large_files() {
        let (_dirs, ctx) = ctx();
        let line = "x".repeat(999) + "\n";
        std::fs::write(ctx.workspace.join("big.txt"), line.repeat(1000)).unwrap();
        let out = ReadFile.call(json!({"path": "big.txt"}), &ctx).await;
        assert!(!out.is_error);
        assert!(out.content.len() < READ_CAP + 200);
        assert!(
            out.content
                .contains("truncated at 262144 bytes; continue with start_line=263"),
            "{}",
            &out.content[out.content.len() - 200..]
        );
    }
}

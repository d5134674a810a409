//! Output spilling (SPEC R9.5): a result larger than the limit is written whole to
//! `spill_dir/<name>.txt`, and the model gets its head, its tail and the path.
use std::io::Write;
use std::path::Path;

/// Returns `content` unchanged when it fits in `limit_bytes`. Otherwise writes it to
/// `spill_dir/<name>.txt` (fsynced; the directory is created) and returns the first
/// ~`limit_bytes / 2` bytes, a line `[... N bytes omitted; full output: <path> ...]` and the
/// last ~`limit_bytes / 4` bytes, cut at character boundaries. Characters of `name` outside
/// `[A-Za-z0-9._-]` become `_`, so a name cannot point elsewhere.
pub fn spill_if_large(
    content: &str,
    limit_bytes: usize,
    spill_dir: &Path,
    name: &str,
) -> std::io::Result<String> {
    if content.len() <= limit_bytes {
        return Ok(content.to_owned());
    }
    std::fs::create_dir_all(spill_dir)?;
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let safe = if safe.is_empty() || safe.chars().all(|c| c == '.') {
        "output".to_owned()
    } else {
        safe
    };
    let path = spill_dir.join(format!("{safe}.txt"));
    let mut file = std::fs::File::create(&path)?;
    file.write_all(content.as_bytes())?;
    file.sync_all()?;
    if let Ok(dir) = std::fs::File::open(spill_dir) {
        dir.sync_all()?;
    }

    let head_end = floor_char_boundary(content, limit_bytes / 2);
    // The tail is smaller than the head so head + marker + tail stays within the limit.
    let tail_start = ceil_char_boundary(content, content.len() - limit_bytes / 4).max(head_end);
    let omitted = tail_start - head_end;
    Ok(format!(
        "{}\n[... {omitted} bytes omitted; full output: {} ...]\n{}",
        &content[..head_end],
        path.display(),
        &content[tail_start..]
    ))
}

/// The largest index `<= at` that starts a character.
pub(crate) fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    (0..=at).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

/// The smallest index `>= at` that starts a character.
fn ceil_char_boundary(s: &str, at: usize) -> usize {
    (at..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r9_5_small_output_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let out = spill_if_large("hello", 100, dir.path(), "call_1").unwrap();
        assert_eq!(out, "hello");
        assert!(!dir.path().join("call_1.txt").exists());
    }

    #[test]
    fn r9_5_large_output_spills_with_head_tail_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let spill_dir = dir.path().join("spill");
        // Multi-byte characters make the cut points fall inside characters.
        let content: String = (0..2000).map(|i| format!("line {i} é\n")).collect();
        let out = spill_if_large(&content, 1000, &spill_dir, "call/../x").unwrap();
        let path = spill_dir.join("call_.._x.txt");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), content);
        assert!(out.starts_with("line 0 é\nline 1 é\n"), "{out}");
        assert!(out.ends_with("line 1999 é\n"), "{out}");
        let marker = format!("full output: {} ...]", path.display());
        assert!(out.contains(&marker), "{out}");
        assert!(out.len() < 1000 + marker.len() + 40, "{}", out.len());
        // The omitted count adds up.
        let head = out.split("\n[... ").next().unwrap();
        let tail = out.rsplit(" ...]\n").next().unwrap();
        let omitted = content.len() - head.len() - tail.len();
        assert!(
            out.contains(&format!("[... {omitted} bytes omitted;")),
            "{out}"
        );
    }
}

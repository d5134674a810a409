//! Attached text shown to the model (issue 38): a file that is text, and no larger than
//! `tools.inline_text_bytes`, goes into the wire copy of its message after the note that names
//! its workspace path, so a model that never calls a tool still reads it. A larger file, or
//! one that is not text, is only named. Text means: sniffed as `text/*` when stored, valid
//! UTF-8, and no control characters but tab, newline, carriage return, form feed and escape
//! (a zero-filled file is valid UTF-8 too): binary never reaches a prompt.

/// Whether a stored file's type (sniffed from its bytes, never the client's word) may be text.
pub fn is_text_type(content_type: &str) -> bool {
    content_type.starts_with("text/")
}

/// `bytes` as text fit for a prompt; `None` for anything that is not plainly text.
pub fn readable(bytes: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(bytes).ok()?;
    let plain = text
        .chars()
        .all(|c| !c.is_control() || matches!(c, '\t' | '\n' | '\r' | '\u{c}' | '\u{1b}'));
    plain.then_some(text)
}

/// How much of an attached file the model is shown.
pub enum Shown<'a> {
    /// Its whole text, after the note.
    Text(&'a str),
    /// Text, but over `tools.inline_text_bytes`: named by path only.
    TooLong,
    /// Not text (or not read): named by path only.
    Named,
}

/// The lines a model gets for one attached, non-image file saved in the workspace as `path`.
pub fn note(name: &str, content_type: &str, bytes: u64, path: &str, shown: Shown<'_>) -> String {
    let kb = bytes.div_ceil(1024);
    let head = format!(
        "[file attached: {name} ({content_type}, {kb} KB), saved in the workspace as {path}"
    );
    match shown {
        Shown::Text(text) => format!(
            "{head}; its text follows]\n{}\n[end of {name}]",
            text.trim_end_matches(['\n', '\r'])
        ),
        Shown::TooLong => format!("{head}; too long to show here: read it from there]"),
        Shown::Named => format!("{head}]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r2_2_only_plain_text_is_readable() {
        assert_eq!(readable(b"col1,col2\n1,2\n"), Some("col1,col2\n1,2\n"));
        assert_eq!(
            readable("tabs\tand \x1b[1mcolour\x1b[0m, é".as_bytes()),
            Some("tabs\tand \x1b[1mcolour\x1b[0m, é")
        );
        assert_eq!(readable(&[0u8; 64]), None, "zeros are UTF-8 but not text");
        assert_eq!(readable(b"\x7fELF\x02\x01"), None);
        assert_eq!(readable(b"\xff\xfe\x00a"), None);
        assert!(is_text_type("text/plain") && is_text_type("text/x-shellscript"));
        assert!(!is_text_type("application/pdf") && !is_text_type("application/octet-stream"));
    }

    #[test]
    fn r2_2_a_note_names_the_path_and_shows_text_only_when_given() {
        let shown = note(
            "a.csv",
            "text/plain",
            14,
            "uploads/1-a.csv",
            Shown::Text("x,y\n1,2\n"),
        );
        assert_eq!(
            shown,
            "[file attached: a.csv (text/plain, 1 KB), saved in the workspace as uploads/1-a.csv; \
             its text follows]\nx,y\n1,2\n[end of a.csv]"
        );
        let named = note(
            "b.log",
            "text/plain",
            40_000,
            "uploads/2-b.log",
            Shown::TooLong,
        );
        assert!(named.ends_with("uploads/2-b.log; too long to show here: read it from there]"));
        let binary = note(
            "c.bin",
            "application/octet-stream",
            10,
            "uploads/3-c.bin",
            Shown::Named,
        );
        assert!(
            binary.ends_with("saved in the workspace as uploads/3-c.bin]"),
            "{binary}"
        );
    }
}

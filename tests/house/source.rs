//! Rust source as the house checks read it (`#[path]`, std only): the floors checker
//! (`layers.rs`) and the size test (`tests/tests/sizes.rs`) both look at code with its comments
//! and literals blanked, so a brace or a path inside them never counts.

/// `text` with the inside of every comment, string and char literal replaced by spaces (line
/// breaks kept), so that what is left has only the code's own braces, at the same offsets.
pub fn blank_literals_and_comments(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char, out: &mut String| {
        if c == '\n' {
            out.push('\n');
        } else {
            out.extend(std::iter::repeat_n(' ', c.len_utf8()));
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let prev_ident = i > 0 && ident(chars[i - 1]);
        // A line comment runs to the end of its line.
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(chars[i], &mut out);
                i += 1;
            }
            continue;
        }
        // A block comment, nested ones included.
        if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    blank('/', &mut out);
                    blank('*', &mut out);
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    blank('*', &mut out);
                    blank('/', &mut out);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(chars[i], &mut out);
                    i += 1;
                }
            }
            continue;
        }
        // A raw string: `r"…"`, `r#"…"#`, `br#"…"#` (not a raw identifier like `r#type`).
        let starts_token = !prev_ident || (chars[i - 1] == 'b' && (i < 2 || !ident(chars[i - 2])));
        if c == 'r' && starts_token {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) == Some(&'"') {
                let end = raw_string_end(&chars, i + 2 + hashes, hashes);
                for &ch in &chars[i..end] {
                    blank(ch, &mut out);
                }
                i = end;
                continue;
            }
        }
        // A string (or byte string): to the next unescaped `"`.
        if c == '"' {
            blank(c, &mut out);
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    blank(chars[i], &mut out);
                    i += 1;
                }
                if i < chars.len() {
                    blank(chars[i], &mut out);
                    i += 1;
                }
            }
            if i < chars.len() {
                blank(chars[i], &mut out);
                i += 1;
            }
            continue;
        }
        // A char literal (`'x'`, `'\n'`, `'\u{7d}'`), not a lifetime (`'a`, `'static`).
        if c == '\'' {
            let len = if next == Some('\\') {
                // The escaped character itself may be a `'`: look past it.
                chars
                    .get(i + 3..)
                    .and_then(|rest| rest.iter().position(|&ch| ch == '\''))
                    .map(|p| p + 4)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(3)
            } else {
                None
            };
            if let Some(len) = len {
                for &ch in &chars[i..i + len] {
                    blank(ch, &mut out);
                }
                i += len;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    out
}

/// The index just past the `"###` that closes a raw string whose content starts at `from`.
fn raw_string_end(chars: &[char], from: usize, hashes: usize) -> usize {
    let mut i = from;
    while i < chars.len() {
        let closing = chars.get(i + 1..i + 1 + hashes);
        if chars[i] == '"' && closing.is_some_and(|h| h.iter().all(|&h| h == '#')) {
            return i + 1 + hashes;
        }
        i += 1;
    }
    chars.len()
}

//! Sizes held by a test (issue 39): no production file over 600 lines (the lines before its
//! first top-level `#[cfg(test)]`) and no function over 100 lines (its `fn` line to its closing
//! brace), in every crate of the workspace. The few exceptions are named below, each with why;
//! an exception that no longer matches anything fails the test, so the list only shrinks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../house/source.rs"]
mod source;

use source::blank_literals_and_comments;
use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 600;
const MAX_FN_LINES: usize = 100;

/// Where the production source of each crate lives, relative to the workspace root.
const SOURCE_DIRS: &[&str] = &[
    "actors/src",
    "web/src",
    "storage/src",
    "providers/src",
    "tools/src",
    "migration/src",
    "tests/src",
    "src",
];

/// What an exception lets through: a whole file, or the functions of one name in it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Item {
    File,
    Fn(&'static str),
}

/// One allowed offender. `path` is relative to the workspace root; a `*` in it matches any
/// run of characters within one path segment.
struct Exception {
    path: &'static str,
    item: Item,
    why: &'static str,
}

const EXCEPTIONS: &[Exception] = &[Exception {
    path: "migration/src/m*.rs",
    item: Item::Fn("up"),
    why: "applied migrations are frozen schema history: a database that ran one must find \
              the same steps, so they are never edited or split",
}];

/// One measured offender: the file (relative path), what is too long, and its size.
#[derive(Debug, PartialEq)]
struct Offender {
    path: String,
    item: Offence,
    lines: usize,
}

#[derive(Debug, PartialEq)]
enum Offence {
    File,
    /// A function: its name and the 1-based line of its `fn`.
    Fn(String, usize),
}

#[test]
fn every_file_and_function_fits_or_is_a_named_exception() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        let dir = root.join(dir);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
    }
    assert!(files.len() > 100, "found only {} files", files.len());

    let mut used = vec![false; EXCEPTIONS.len()];
    let mut failures = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(root).unwrap().to_str().unwrap();
        let relative = relative.replace('\\', "/");
        let text = std::fs::read_to_string(file).unwrap();
        for offender in offenders(&relative, &text) {
            match EXCEPTIONS.iter().position(|e| e.covers(&offender)) {
                Some(i) => used[i] = true,
                None => failures.push(offender.describe()),
            }
        }
    }
    for (exception, used) in EXCEPTIONS.iter().zip(used) {
        if exception.why.trim().is_empty() {
            failures.push(format!(
                "the exception for {} {:?} does not say why",
                exception.path, exception.item
            ));
        }
        if !used {
            failures.push(format!(
                "the exception for {} {:?} ({}) matches nothing any more: remove it",
                exception.path, exception.item, exception.why
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "split these along meaning (a module per concern, helpers with clear names), or name \
         them in EXCEPTIONS with why:\n{}",
        failures.join("\n")
    );
}

/// The checker itself catches a planted long function and a long file, and is not fooled by
/// braces in strings, chars and comments or by declarations without a body.
#[test]
fn the_checker_catches_a_planted_long_function_and_a_long_file() {
    let mut text = String::from("//! planted\n");
    text.push_str("trait T {\n    fn declared(&self) -> [u8; 2];\n}\n");
    text.push_str("pub(crate) async unsafe fn long_one(\n    x: [u8; 4],\n) -> u8 {\n");
    text.push_str("    let open = \"{{{\"; let close = '}'; let raw = r#\"}\"#;\n");
    text.push_str("    // } a closing brace in a comment\n    /* } /* nested } */ } */\n");
    text.push_str("    let label: &'static str = \"\\\"}\"; let quote = '\\'';\n");
    for i in 0..95 {
        text.push_str(&format!("    let _v{i} = {{ {i} }};\n"));
    }
    text.push_str("    0\n}\n"); // fn line .. this brace: 3 + 4 + 95 + 2 = 104 lines
    text.push_str("impl S {\n    pub const fn short() -> u8 {\n        1\n    }\n}\n");
    let found = offenders("x/src/planted.rs", &text);
    assert_eq!(
        found,
        vec![Offender {
            path: "x/src/planted.rs".into(),
            item: Offence::Fn("long_one".into(), 5),
            lines: 104,
        }]
    );

    // A function of exactly the limit passes; one line more does not.
    let body = |n: usize| {
        let mut t = String::from("fn edge() {\n");
        for _ in 0..n - 2 {
            t.push_str("    step();\n");
        }
        t.push_str("}\n");
        t
    };
    assert!(offenders("e.rs", &body(MAX_FN_LINES)).is_empty());
    assert_eq!(offenders("e.rs", &body(MAX_FN_LINES + 1)).len(), 1);

    // A long file is caught; its tests after `#[cfg(test)]` do not count.
    let long: String = (0..MAX_FILE_LINES + 1)
        .map(|i| format!("// {i}\n"))
        .collect();
    assert_eq!(
        offenders("l.rs", &long),
        vec![Offender {
            path: "l.rs".into(),
            item: Offence::File,
            lines: MAX_FILE_LINES + 1,
        }]
    );
    let short_with_tests = format!(
        "{}#[cfg(test)]\nmod tests {{\n{}}}\n",
        "// code\n".repeat(MAX_FILE_LINES),
        long
    );
    assert!(offenders("s.rs", &short_with_tests).is_empty());

    // Exceptions match by file pattern and item.
    let migration = Offender {
        path: "migration/src/m20250101_000001_init.rs".into(),
        item: Offence::Fn("up".into(), 9),
        lines: 300,
    };
    assert!(EXCEPTIONS[0].covers(&migration));
    let other = Offender {
        path: "migration/src/lib.rs".into(),
        ..migration
    };
    assert!(!EXCEPTIONS.iter().any(|e| e.covers(&other)));
    // A file exception covers the file's size, not a function in it.
    let whole_file = Exception {
        path: "web/src/*.rs",
        item: Item::File,
        why: "a planted exception",
    };
    let long_file = Offender {
        path: "web/src/big.rs".into(),
        item: Offence::File,
        lines: 700,
    };
    assert!(whole_file.covers(&long_file));
    assert!(!whole_file.covers(&other));
}

impl Exception {
    fn covers(&self, offender: &Offender) -> bool {
        let item = match (&self.item, &offender.item) {
            (Item::File, Offence::File) => true,
            (Item::Fn(name), Offence::Fn(found, _)) => name == found,
            _ => false,
        };
        item && path_matches(self.path, &offender.path)
    }
}

impl Offender {
    fn describe(&self) -> String {
        match &self.item {
            Offence::File => format!(
                "{}: {} production lines (limit {MAX_FILE_LINES})",
                self.path, self.lines
            ),
            Offence::Fn(name, line) => format!(
                "{}:{line}: fn {name} is {} lines (limit {MAX_FN_LINES})",
                self.path, self.lines
            ),
        }
    }
}

/// `pattern` against `path`, segment by segment; `*` matches any run within a segment.
fn path_matches(pattern: &str, path: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('/').collect();
    let path: Vec<&str> = path.split('/').collect();
    pattern.len() == path.len() && pattern.iter().zip(&path).all(|(p, s)| glob(p, s))
}

fn glob(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .filter(|&i| rest.is_char_boundary(i))
                .any(|i| glob(tail, &rest[i..]))
        }
    }
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The too-long file and functions of one source file.
fn offenders(path: &str, text: &str) -> Vec<Offender> {
    let production = production_part(text);
    let mut out = Vec::new();
    let lines = production.lines().count();
    if lines > MAX_FILE_LINES {
        out.push(Offender {
            path: path.to_owned(),
            item: Offence::File,
            lines,
        });
    }
    for f in functions(production) {
        if f.lines > MAX_FN_LINES {
            out.push(Offender {
                path: path.to_owned(),
                item: Offence::Fn(f.name, f.first_line),
                lines: f.lines,
            });
        }
    }
    out
}

/// The text before the first line that is a top-level `#[cfg(test)]`.
fn production_part(text: &str) -> &str {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with("#[cfg(test)]") {
            return &text[..offset];
        }
        offset += line.len();
    }
    text
}

/// One function with a body: its name, the line of its `fn` (1-based) and its length.
struct Function {
    name: String,
    first_line: usize,
    lines: usize,
}

/// Every function with a body, at any depth (in impls, traits, modules and other functions).
fn functions(text: &str) -> Vec<Function> {
    let code = blank_literals_and_comments(text);
    let bytes = code.as_bytes();
    let line_of = |at: usize| 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find("fn") {
        let start = at + found;
        at = start + 2;
        let before_ok = start == 0 || !is_ident_byte(bytes[start - 1]);
        let after_space = bytes.get(start + 2).is_some_and(u8::is_ascii_whitespace);
        if !before_ok || !after_space {
            continue;
        }
        let name_start = start + 2 + code[start + 2..].len() - code[start + 2..].trim_start().len();
        let name_len = code[name_start..]
            .bytes()
            .take_while(|&b| is_ident_byte(b))
            .count();
        // `fn(u8)` is a pointer type and `fn $name` a macro's template, not a function.
        if name_len == 0 || bytes[name_start].is_ascii_digit() {
            continue;
        }
        let name = code[name_start..name_start + name_len].to_owned();
        let Some(open) = body_start(bytes, name_start + name_len) else {
            continue;
        };
        let Some(close) = matching_brace(bytes, open) else {
            continue;
        };
        let first_line = line_of(start);
        out.push(Function {
            name,
            first_line,
            lines: line_of(close) - first_line + 1,
        });
    }
    out
}

/// The `{` that opens a function's body, or `None` when its signature ends in `;` first. Only
/// a `;` outside `(…)` and `[…]` ends it (`[u8; 4]` is a type, not an end).
fn body_start(bytes: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (i, &b) in bytes.iter().enumerate().skip(from) {
        match b {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b'{' if depth <= 0 => return Some(i),
            b';' if depth <= 0 => return None,
            _ => {}
        }
    }
    None
}

/// The `}` that closes the `{` at `open`, counted by depth.
fn matching_brace(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

//! The floors of `actors/` (declared once, in `src/lib.rs`'s module comment): a module uses
//! only its own floor and the floors below it. This reads every file of `src/`, leaves out its
//! tests, collects every `crate::`, `super::` and `self::` path (in `use` trees, braces
//! expanded, and inline), resolves it to the module it names, and fails on any that points up.
//! It also checks that `docs/architecture.md` shows the same floors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One floor: its number, name and the modules on it.
struct Floor {
    number: usize,
    line: String,
    modules: Vec<String>,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The floors as `lib.rs` declares them: `//! N. name: \`module\`, …`.
fn floors() -> Vec<Floor> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut out = Vec::new();
    for line in lib.lines() {
        let Some(rest) = line.strip_prefix("//! ") else {
            continue;
        };
        let Some((number, tail)) = rest.split_once(". ") else {
            continue;
        };
        let Ok(number) = number.parse::<usize>() else {
            continue;
        };
        let modules = tail
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        out.push(Floor {
            number,
            line: rest.to_owned(),
            modules,
        });
    }
    assert!(out.len() >= 3, "lib.rs declares no floors");
    out
}

/// The floor of a module path: the floor of the longest declared module that is a prefix.
fn floor_of(floors: &[Floor], path: &[String]) -> Option<(usize, String)> {
    let mut best: Option<(usize, usize, String)> = None;
    for f in floors {
        for m in &f.modules {
            let parts: Vec<&str> = m.split("::").collect();
            let is_prefix =
                parts.len() <= path.len() && parts.iter().zip(path).all(|(a, b)| a == b);
            if is_prefix && best.as_ref().is_none_or(|(len, _, _)| parts.len() > *len) {
                best = Some((parts.len(), f.number, m.clone()));
            }
        }
    }
    best.map(|(_, n, m)| (n, m))
}

/// Every `.rs` file under `dir`, with its module path (`turn/run.rs` → `turn::run`,
/// `session/mod.rs` → `session`).
fn files(dir: &Path, prefix: &[String], out: &mut Vec<(PathBuf, Vec<String>)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if path.is_dir() {
            let mut p = prefix.to_vec();
            p.push(name);
            files(&path, &p, out);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let mut p = prefix.to_vec();
            if stem != "mod" && stem != "lib" {
                p.push(stem.to_owned());
            }
            out.push((path, p));
        }
    }
}

/// The file's lines without its tests (`#[cfg(test)]` items, a `mod … { … }` to its closing
/// brace) and without comments.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if line.starts_with("#[cfg(test)]") {
            // Skip the item it marks: to the brace that closes it, or its one line.
            i += 1;
            let mut depth = 0i32;
            let mut opened = false;
            while i < lines.len() {
                let l = lines[i];
                depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
                opened |= l.contains('{');
                i += 1;
                if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        let code = match lines[i].find("//") {
            Some(at) => &lines[i][..at],
            None => lines[i],
        };
        out.push((i + 1, code.to_owned()));
        i += 1;
    }
    out
}

/// Expands a `use` tree (`crate::{a, b::{c, d}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let Some(open) = tree.find('{') else {
        return vec![tree];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(&format!("{prefix}{p}")))
        .collect()
}

/// Where the crate root's own names come from: `pub use module::{Name, …}` in `lib.rs`, and
/// exported macros by the file that defines them.
fn root_names(all: &[(PathBuf, Vec<String>)]) -> BTreeMap<String, Vec<String>> {
    let mut names = BTreeMap::new();
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    for line in lib.lines() {
        if let Some(tree) = line
            .strip_prefix("pub use ")
            .and_then(|t| t.strip_suffix(';'))
        {
            for path in expand(tree) {
                let parts: Vec<String> = path.split("::").map(str::to_owned).collect();
                let (name, module) = parts.split_last().unwrap();
                names.insert(name.clone(), module.to_vec());
            }
        }
    }
    for (path, module) in all {
        let text = std::fs::read_to_string(path).unwrap();
        let mut exported = false;
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with("#[macro_export]") {
                exported = true;
            } else if let Some(rest) = line.strip_prefix("macro_rules! ") {
                if exported {
                    let name = rest.trim_end_matches(['{', ' ']).to_owned();
                    names.insert(name, module.clone());
                }
                exported = false;
            }
        }
    }
    names
}

/// The module paths a line names, resolved from `module` (the file's own module path:
/// `super::` of `a/b.rs`, module `a::b`, is `a`; of `a/mod.rs`, module `a`, the root).
fn named_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(start).map(|i| i + from) {
            from = at + start.len();
            let before = at.checked_sub(1).map(|i| bytes[i] as char);
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            // The path runs over identifiers, `::` and, in a `use` tree, braces and commas.
            let rest = &code[at..];
            let mut depth = 0;
            let mut end = rest.len();
            for (i, c) in rest.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        end = i;
                        break;
                    }
                    '}' => depth -= 1,
                    c if c.is_alphanumeric() || c == '_' || c == ':' => {}
                    ',' | ' ' if depth > 0 => {}
                    _ => {
                        end = i;
                        break;
                    }
                }
            }
            for path in expand(&rest[..end]) {
                let mut parts: Vec<String> = path
                    .split("::")
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect();
                let base: Vec<String> = match parts.first().map(String::as_str) {
                    Some("crate") => Vec::new(),
                    Some("self") => module.to_vec(),
                    Some("super") => module[..module.len().saturating_sub(1)].to_vec(),
                    _ => continue,
                };
                parts.remove(0);
                while parts.first().map(String::as_str) == Some("super") {
                    parts.remove(0);
                }
                let mut full = base;
                full.extend(parts);
                out.push(full);
            }
        }
    }
    out
}

#[test]
fn every_module_uses_only_its_own_floor_and_those_below() {
    let floors = floors();
    let mut all = Vec::new();
    files(&src(), &[], &mut all);
    let roots = root_names(&all);
    let mut wrong = Vec::new();
    let mut unplaced = Vec::new();
    for (path, module) in &all {
        if module.is_empty() {
            continue; // lib.rs: the root declares and re-exports, it imports nothing
        }
        let Some((mine, my_room)) = floor_of(&floors, module) else {
            unplaced.push(module.join("::"));
            continue;
        };
        let text = std::fs::read_to_string(path).unwrap();
        for (line_no, code) in code_lines(&text) {
            for target in named_paths(&code, module) {
                let Some(first) = target.first() else {
                    continue;
                };
                // A name the root re-exports (`crate::GatewayError`) or an exported macro
                // (`crate::kill_point!`) stands for the module it comes from.
                let target = match roots.get(first) {
                    Some(m) if target.len() == 1 || first.starts_with(char::is_uppercase) => {
                        m.clone()
                    }
                    _ => target,
                };
                let Some((theirs, room)) = floor_of(&floors, &target) else {
                    continue; // an item of the root itself
                };
                if theirs > mine {
                    wrong.push(format!(
                        "{}:{line_no}: `{}` (floor {mine}, `{my_room}`) uses `{}` (floor {theirs}, `{room}`)",
                        path.strip_prefix(src()).unwrap().display(),
                        module.join("::"),
                        target.join("::"),
                    ));
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules on no floor (add them to lib.rs's list): {unplaced:?}"
    );
    assert!(
        wrong.is_empty(),
        "uses that point up the floors:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_architecture_document_shows_the_same_floors() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    let doc = std::fs::read_to_string(doc).unwrap();
    for f in floors() {
        assert!(
            doc.lines().any(|l| l.trim() == f.line),
            "docs/architecture.md does not show floor {}: {:?}",
            f.number,
            f.line
        );
    }
}

#[test]
fn the_checker_sees_use_trees_inline_paths_and_super() {
    assert_eq!(
        expand("crate::{a::{B, c::D}, e}"),
        ["crate::a::B", "crate::a::c::D", "crate::e"]
    );
    let m = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    let found = named_paths(
        "use crate::{deps::Deps, turn::{self, StopReason}}; let x = super::client::f();",
        &m("platforms::drafts"),
    );
    assert_eq!(
        found,
        [
            m("deps::Deps"),
            m("turn::self"),
            m("turn::StopReason"),
            m("platforms::client::f")
        ]
    );
    let lines = code_lines("use crate::a;\n#[cfg(test)]\nmod tests {\n    use crate::z;\n}\nuse crate::b; // crate::c\n");
    let kept: Vec<&str> = lines.iter().map(|(_, l)| l.trim()).collect();
    assert_eq!(kept, ["use crate::a;", "use crate::b;"]);
}

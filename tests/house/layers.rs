//! The floors checker every crate's `tests/layers.rs` includes (`#[path]`, std only): it reads
//! a crate's `src/` from `lib.rs` down its `mod` declarations (tests left out), resolves every
//! path that names a module of the crate, and refuses imports up the floors and import circles.
//!
//! A crate declares its floors once, in `lib.rs`'s module comment (`//! N. name: \`module\`, …`):
//! a module uses only its own floor and the floors below it, and a file belongs to the longest
//! declared name that is a prefix of its module path (a name ending in `*` stands for every
//! module name it begins). Paths counted: `crate::`, `super::`,
//! `self::`, a child module's name and a name brought in by `use`, in `use` trees (braces
//! expanded, `as` followed) and inline. A name a module only re-exports (`pub use x::Y`, or a
//! private `use` its children reach through `super::`) stands for the module that defines it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

#[path = "source.rs"]
mod source;

use source::blank_literals_and_comments;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One floor: its number, its line as `lib.rs` writes it, and the modules on it.
pub struct Floor {
    pub number: usize,
    pub line: String,
    pub modules: Vec<String>,
}

/// One file of the crate: its module path (`turn/run.rs` → `turn::run`, `lib.rs` → empty).
pub struct Module {
    pub path: Vec<String>,
    pub file: PathBuf,
    /// The code without comments, string contents and `#[cfg(test)]` items (newlines kept).
    code: String,
    /// Modules it declares with `mod name;`.
    children: Vec<String>,
    /// Names its `use` declarations bring in, to the path they name (as written).
    names: BTreeMap<String, Vec<String>>,
    /// Macros it exports at the crate root (`#[macro_export]`).
    macros: Vec<String>,
    /// Every path it writes that may name a module of the crate, with its line.
    paths: Vec<(usize, Vec<String>)>,
}

/// One import between two files of the crate.
pub struct Import {
    pub from: usize,
    pub to: usize,
    pub line: usize,
}

/// A crate read from its `src/`: the modules and the imports between them.
pub struct Crate {
    pub src: PathBuf,
    pub modules: Vec<Module>,
    pub imports: Vec<Import>,
}

/// The floors as `lib.rs` declares them: `//! N. name: \`module\`, …`.
pub fn floors(lib: &str) -> Vec<Floor> {
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
    out
}

/// The floor of a module path: the floor of the longest declared module that is a prefix.
pub fn floor_of(floors: &[Floor], path: &[String]) -> Option<(usize, String)> {
    let mut best: Option<(usize, usize, String)> = None;
    for f in floors {
        for m in &f.modules {
            let parts: Vec<&str> = m.split("::").collect();
            // A name ending in `*` matches every segment it begins (`m2026*`).
            let is_prefix = parts.len() <= path.len()
                && parts.iter().zip(path).all(|(a, b)| {
                    a == b || a.strip_suffix('*').is_some_and(|stem| b.starts_with(stem))
                });
            if is_prefix && best.as_ref().is_none_or(|(len, _, _)| parts.len() > *len) {
                best = Some((parts.len(), f.number, m.clone()));
            }
        }
    }
    best.map(|(_, n, m)| (n, m))
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn blank(c: char) -> char {
    if c == '\n' {
        '\n'
    } else {
        ' '
    }
}

/// Blanks every `#[cfg(test)]` item (to the brace that closes it, or its `;`) and every
/// `pub(in path)` (a visibility, not an import).
pub fn strip_tests(code: &str) -> String {
    let mut b: Vec<char> = code.chars().collect();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + marker.len() <= b.len() {
        if b[i..i + marker.len()] != marker[..] {
            i += 1;
            continue;
        }
        let start = i;
        let mut j = i + marker.len();
        let (mut braces, mut brackets, mut opened) = (0i32, 0i32, false);
        while j < b.len() {
            match b[j] {
                '{' => {
                    braces += 1;
                    opened = true;
                }
                '}' => braces -= 1,
                '(' | '[' => brackets += 1,
                ')' | ']' => brackets -= 1,
                ';' if !opened && brackets == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
            if opened && braces == 0 {
                break;
            }
        }
        let end = j.min(b.len());
        for c in &mut b[start..end] {
            *c = blank(*c);
        }
        i = j;
    }
    let marker: Vec<char> = "pub(in ".chars().collect();
    let mut i = 0;
    while i + marker.len() <= b.len() {
        if b[i..i + marker.len()] == marker[..] {
            while i < b.len() && b[i] != ')' {
                b[i] = ' ';
                i += 1;
            }
            if i < b.len() {
                b[i] = ' ';
            }
        }
        i += 1;
    }
    b.into_iter().collect()
}

/// The start of every keyword `word` followed by whitespace (not part of a longer name).
fn keyword_at(code: &str, word: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(word).map(|i| i + from) {
        from = at + word.len();
        let before = code[..at].chars().next_back();
        let after = code[from..].chars().next();
        if before.is_some_and(|c| is_ident(c) || c == ':' || c == '$')
            || !after.is_some_and(char::is_whitespace)
        {
            continue;
        }
        out.push(at);
    }
    out
}

/// The children `code` declares with `mod name;`.
fn children(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for at in keyword_at(code, "mod") {
        let rest = code[at + 3..].trim_start();
        let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
        if !name.is_empty() && rest[name.len()..].trim_start().starts_with(';') {
            out.push(name);
        }
    }
    out
}

/// Expands a `use` tree (`crate::{a::{B, c::D as E}, f}`) into its paths, each with the name
/// it brings in when renamed (`as E`; `as _` brings in none).
pub fn expand(tree: &str) -> Vec<(String, Option<String>)> {
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut tree = words.join(" ");
    for tight in ["::", "{", "}", ","] {
        tree = tree
            .replace(&format!(" {tight}"), tight)
            .replace(&format!("{tight} "), tight);
    }
    expand_tight(&tree)
}

fn expand_tight(tree: &str) -> Vec<(String, Option<String>)> {
    let Some(open) = tree.find('{') else {
        return match tree.split_once(" as ") {
            Some((path, alias)) => vec![(path.to_owned(), Some(alias.to_owned()))],
            None => vec![(tree.to_owned(), None)],
        };
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
        .flat_map(|p| expand_tight(&format!("{prefix}{p}")))
        .collect()
}

fn segments(path: &str) -> Vec<String> {
    path.trim_start_matches("::")
        .split("::")
        .map(str::to_owned)
        .collect()
}

fn line_of(code: &str, at: usize) -> usize {
    code[..at].matches('\n').count() + 1
}

/// Reads one file: its children, `use` declarations and inline paths.
fn read_module(file: &Path, path: Vec<String>) -> Module {
    let text = std::fs::read_to_string(file).unwrap();
    let mut code = strip_tests(&blank_literals_and_comments(&text));
    let children = children(&code);
    let mut names = BTreeMap::new();
    let mut paths = Vec::new();
    // `use` declarations: their paths and the names they bring in; then blanked, so the
    // inline scan below does not read a tree's inner paths as paths of their own.
    let mut blanked: Vec<char> = code.chars().collect();
    let char_at: Vec<usize> = code.char_indices().map(|(i, _)| i).collect();
    for at in keyword_at(&code, "use") {
        let Some(len) = code[at..].find(';') else {
            continue;
        };
        let tree = &code[at + 3..at + len];
        let line = line_of(&code, at);
        let reexport =
            code[..at].trim_end().ends_with("pub") || code[..at].trim_end().ends_with(')');
        for (p, alias) in expand(tree) {
            let mut segs = segments(&p);
            let name = match alias {
                Some(a) => Some(a),
                None => match segs.last().map(String::as_str) {
                    Some("self") => {
                        segs.pop();
                        segs.last().cloned()
                    }
                    Some("*") => {
                        segs.pop();
                        None
                    }
                    last => last.map(str::to_owned),
                },
            };
            if let Some(name) = name.filter(|n| n != "_") {
                names.insert(name, segs.clone());
            }
            if !reexport {
                paths.push((line, segs));
            }
        }
        let first = char_at.partition_point(|&i| i < at);
        let last = char_at.partition_point(|&i| i < at + len);
        for c in &mut blanked[first..last] {
            *c = blank(*c);
        }
    }
    code = blanked.into_iter().collect();
    // Inline paths: a name followed by `::`, not itself the tail of a longer path.
    let starts: BTreeSet<&str> = ["crate", "$crate", "self", "super"]
        .into_iter()
        .chain(children.iter().map(String::as_str))
        .chain(names.keys().map(String::as_str))
        .collect();
    let bytes: Vec<(usize, char)> = code.char_indices().collect();
    let mut k = 0;
    while k < bytes.len() {
        let (at, c) = bytes[k];
        let before = if k == 0 { ' ' } else { bytes[k - 1].1 };
        if !(is_ident(c) || c == '$') || is_ident(before) || before == ':' || before == '$' {
            k += 1;
            continue;
        }
        let mut end = k;
        while end < bytes.len()
            && (is_ident(bytes[end].1) || bytes[end].1 == ':' || (end == k && bytes[end].1 == '$'))
        {
            end += 1;
        }
        let stop = bytes.get(end).map_or(code.len(), |(i, _)| *i);
        let text = &code[at..stop];
        k = end.max(k + 1);
        let Some((first, _)) = text.split_once("::") else {
            continue;
        };
        if !starts.contains(first) {
            continue;
        }
        let segs: Vec<String> = text
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        paths.push((line_of(&code, at), segs));
    }
    let mut macros = Vec::new();
    let mut exported = false;
    for line in code.lines() {
        let line = line.trim();
        if line.starts_with("#[macro_export]") {
            exported = true;
        } else if let Some(rest) = line.strip_prefix("macro_rules! ") {
            if exported {
                macros.push(rest.trim_end_matches(['{', ' ']).to_owned());
            }
            exported = false;
        }
    }
    Module {
        path,
        file: file.to_owned(),
        code,
        children,
        names,
        macros,
        paths,
    }
}

/// The file of child `name` declared in `file` (module path `path`).
fn child_file(file: &Path, path: &[String], name: &str) -> Option<PathBuf> {
    let dir = file.parent().unwrap();
    let stem = file.file_stem().unwrap().to_str().unwrap();
    let dir = if path.is_empty() || stem == "mod" {
        dir.to_owned()
    } else {
        dir.join(stem)
    };
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|f| f.is_file())
}

impl Crate {
    /// Reads the crate under `src` from `lib.rs` down.
    pub fn read(src: &Path) -> Crate {
        let mut modules = vec![read_module(&src.join("lib.rs"), Vec::new())];
        let mut i = 0;
        while i < modules.len() {
            for name in modules[i].children.clone() {
                let file =
                    child_file(&modules[i].file, &modules[i].path, &name).unwrap_or_else(|| {
                        panic!("no file for module `{name}` of {:?}", modules[i].file)
                    });
                let mut path = modules[i].path.clone();
                path.push(name);
                modules.push(read_module(&file, path));
            }
            i += 1;
        }
        let mut krate = Crate {
            src: src.to_owned(),
            modules,
            imports: Vec::new(),
        };
        let mut imports = Vec::new();
        for from in 0..krate.modules.len() {
            for (line, segs) in &krate.modules[from].paths {
                if let Some(to) = krate.resolve(from, segs, 0) {
                    if to != from {
                        imports.push(Import {
                            from,
                            to,
                            line: *line,
                        });
                    }
                }
            }
        }
        krate.imports = imports;
        krate
    }

    fn index(&self, path: &[String]) -> Option<usize> {
        self.modules.iter().position(|m| m.path == path)
    }

    /// The crate path `segs` names, written in module `from`; `None` outside the crate.
    fn absolute(&self, from: usize, segs: &[String], depth: usize) -> Option<Vec<String>> {
        let m = &self.modules[from];
        let first = segs.first()?.as_str();
        let mut rest = segs[1..].to_vec();
        let mut base = match first {
            "crate" | "$crate" => Vec::new(),
            "self" => m.path.clone(),
            "super" => m.path[..m.path.len().saturating_sub(1)].to_vec(),
            child if m.children.iter().any(|c| c == child) => {
                let mut p = m.path.clone();
                p.push(child.to_owned());
                p
            }
            name => match m.names.get(name) {
                Some(target) if depth < 16 && target.first().map(String::as_str) != Some(name) => {
                    let mut p = self.absolute(from, target, depth + 1)?;
                    p.extend(rest);
                    return Some(p);
                }
                _ => return None,
            },
        };
        while rest.first().map(String::as_str) == Some("super") {
            rest.remove(0);
            base.pop();
        }
        base.extend(rest);
        Some(base)
    }

    /// The file that defines what `segs` (written in module `from`) names: a name a module
    /// only brings in with `use` is followed to where it comes from.
    fn resolve(&self, from: usize, segs: &[String], depth: usize) -> Option<usize> {
        let path = self.absolute(from, segs, 0)?;
        let mut k = path.len();
        let at = loop {
            if let Some(i) = self.index(&path[..k]) {
                break i;
            }
            k -= 1;
        };
        let Some(name) = path.get(k) else {
            return Some(at);
        };
        if depth < 16 {
            if let Some(target) = self.modules[at].names.get(name) {
                let mut next = target.clone();
                next.extend(path[k + 1..].iter().cloned());
                return Some(self.resolve(at, &next, depth + 1).unwrap_or(at));
            }
        }
        if at == 0 {
            if let Some(i) = self.modules.iter().position(|m| m.macros.contains(name)) {
                return Some(i);
            }
        }
        Some(at)
    }

    /// Whether `child` is `parent` or inside it (`turn::run` inside `turn`; all inside the root).
    pub fn owns(&self, parent: usize, child: usize) -> bool {
        self.modules[child]
            .path
            .starts_with(&self.modules[parent].path)
    }

    /// A module's name for messages (`crate` for `lib.rs`).
    pub fn name(&self, i: usize) -> String {
        match self.modules[i].path.join("::") {
            p if p.is_empty() => "crate".to_owned(),
            p => p,
        }
    }

    fn place(&self, i: &Import) -> String {
        format!(
            "{}:{}",
            self.modules[i.from]
                .file
                .strip_prefix(&self.src)
                .unwrap_or(&self.modules[i.from].file)
                .display(),
            i.line
        )
    }

    /// Every module (not the root) on no floor.
    pub fn unplaced(&self, floors: &[Floor]) -> Vec<String> {
        (1..self.modules.len())
            .filter(|&i| floor_of(floors, &self.modules[i].path).is_none())
            .map(|i| self.name(i))
            .collect()
    }

    /// Every import that points up the floors (the root stands outside them).
    pub fn upward(&self, floors: &[Floor]) -> Vec<String> {
        let mut out = Vec::new();
        for i in &self.imports {
            if i.from == 0 || i.to == 0 {
                continue;
            }
            let (Some((mine, my_room)), Some((theirs, room))) = (
                floor_of(floors, &self.modules[i.from].path),
                floor_of(floors, &self.modules[i.to].path),
            ) else {
                continue;
            };
            if theirs > mine {
                out.push(format!(
                    "{}: `{}` (floor {mine}, `{my_room}`) uses `{}` (floor {theirs}, `{room}`)",
                    self.place(i),
                    self.name(i.from),
                    self.name(i.to),
                ));
            }
        }
        out.dedup();
        out
    }

    /// The circles: every strongly connected component of more than one module, as its
    /// modules (sorted) and the imports inside it. A module's use of a module inside it (a
    /// directory's `mod.rs` driving its own phases, the root) is no edge here: a family whose
    /// files reach back to their `mod.rs` for its types is one room. Every other use is one:
    /// siblings, cousins, a child and a stranger.
    pub fn circles(&self) -> Vec<(Vec<String>, Vec<String>)> {
        let counted = |i: &&Import| !self.owns(i.from, i.to);
        let edges: Vec<(usize, usize)> = self
            .imports
            .iter()
            .filter(counted)
            .map(|i| (i.from, i.to))
            .collect();
        components(self.modules.len(), &edges)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| {
                let mut names: Vec<String> = c.iter().map(|&i| self.name(i)).collect();
                names.sort();
                let mut inside: Vec<String> = self
                    .imports
                    .iter()
                    .filter(counted)
                    .filter(|i| c.contains(&i.from) && c.contains(&i.to))
                    .map(|i| {
                        format!(
                            "{}: `{}` uses `{}`",
                            self.place(i),
                            self.name(i.from),
                            self.name(i.to)
                        )
                    })
                    .collect();
                inside.dedup();
                (names, inside)
            })
            .collect()
    }

    /// Every problem: modules on no floor, imports up the floors, circles.
    pub fn problems(&self, floors: &[Floor]) -> Vec<String> {
        let mut out: Vec<String> = self
            .unplaced(floors)
            .into_iter()
            .map(|m| format!("on no floor (add it to lib.rs's list): `{m}`"))
            .collect();
        out.extend(
            self.upward(floors)
                .into_iter()
                .map(|u| format!("up the floors: {u}")),
        );
        for (names, inside) in self.circles() {
            out.push(format!(
                "circle of {} modules: {}\n    {}",
                names.len(),
                names.join(", "),
                inside.join("\n    ")
            ));
        }
        out
    }
}

/// Strongly connected components (Tarjan's algorithm, iterative).
pub fn components(n: usize, edges: &[(usize, usize)]) -> Vec<Vec<usize>> {
    let mut next = vec![Vec::new(); n];
    for &(a, b) in edges {
        next[a].push(b);
    }
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut out = Vec::new();
    let mut counter = 0;
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut child)) = work.last_mut() {
            if *child == 0 && index[v] == usize::MAX {
                index[v] = counter;
                low[v] = counter;
                counter += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if *child < next[v].len() {
                let w = next[v][*child];
                *child += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                out.push(component);
            }
        }
    }
    out
}

/// Checks the crate under `src` against the floors its `lib.rs` declares; panics with every
/// problem found.
pub fn assert_floors_kept(src: &Path) {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let floors = floors(&lib);
    assert!(
        !floors.is_empty(),
        "{}: lib.rs declares no floors",
        src.display()
    );
    let problems = Crate::read(src).problems(&floors);
    assert!(
        problems.is_empty(),
        "{}: the floors are not kept:\n{}",
        src.display(),
        problems.join("\n")
    );
}

/// Checks that `doc` shows every floor line of the crate under `src`, as `lib.rs` writes it.
pub fn assert_document_shows_floors(src: &Path, doc: &Path) {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let text = std::fs::read_to_string(doc).unwrap();
    for f in floors(&lib) {
        assert!(
            text.lines().any(|l| l.trim() == f.line),
            "{} does not show floor {} of {}: {:?}",
            doc.display(),
            f.number,
            src.display(),
            f.line
        );
    }
}

/// A copy of `src` in a fresh temporary directory (the caller removes it).
pub fn copy_to_temp(src: &Path, tag: &str) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        let Ok(entries) = std::fs::read_dir(from) else {
            return; // nothing to copy: an empty directory
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let target = to.join(path.file_name().unwrap());
            if path.is_dir() {
                copy(&path, &target);
            } else {
                std::fs::copy(&path, &target).unwrap();
            }
        }
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("layers-{tag}-{}-{nanos}", std::process::id()));
    copy(src, &dir);
    dir
}

/// Copies the crate under `src` to a temporary directory, plants a circle there between the
/// modules `a` and `b` (each gets a `use` of the other), and returns what the checker says
/// of the copy; the copy is removed.
pub fn problems_with_planted_circle(src: &Path, a: &str, b: &str) -> Vec<String> {
    let dir = copy_to_temp(src, &a.replace("::", "-"));
    let krate = Crate::read(&dir);
    for (here, there) in [(a, b), (b, a)] {
        let i = krate
            .modules
            .iter()
            .position(|m| m.path.join("::") == here)
            .unwrap_or_else(|| panic!("no module `{here}`"));
        let file = &krate.modules[i].file;
        let mut text = std::fs::read_to_string(file).unwrap();
        text.push_str(&format!(
            "\n#[allow(unused_imports)]\nuse crate::{there} as _;\n"
        ));
        std::fs::write(file, text).unwrap();
    }
    let lib = std::fs::read_to_string(dir.join("lib.rs")).unwrap();
    let problems = Crate::read(&dir).problems(&floors(&lib));
    std::fs::remove_dir_all(&dir).unwrap();
    problems
}

/// Asserts that a circle planted between `a` and `b` (two real modules of the crate under
/// `src`) is refused: the checker names a circle holding both.
pub fn assert_planted_circle_refused(src: &Path, a: &str, b: &str) {
    let problems = problems_with_planted_circle(src, a, b);
    let refused = problems.iter().any(|p| {
        p.starts_with("circle of")
            && p.lines().next().is_some_and(|head| {
                head.split(": ").nth(1).is_some_and(|list| {
                    list.split(", ").any(|m| m == a) && list.split(", ").any(|m| m == b)
                })
            })
    });
    assert!(
        refused,
        "a circle planted between `{a}` and `{b}` was not refused; the checker said:\n{}",
        problems.join("\n")
    );
}

/// The tests every crate's `tests/layers.rs` runs (`#[macro_use]` on its `mod layers`):
/// floors kept and no circle, `docs/architecture.md` shows the floors, and a circle planted
/// between two real modules of the crate, `$a` and `$b`, is refused.
macro_rules! floors_tests {
    ($a:literal, $b:literal) => {
        fn src() -> std::path::PathBuf {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
        }

        #[test]
        fn every_module_uses_only_its_own_floor_and_those_below_and_no_circle() {
            layers::assert_floors_kept(&src());
        }

        #[test]
        fn the_architecture_document_shows_the_same_floors() {
            let doc =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
            layers::assert_document_shows_floors(&src(), &doc);
        }

        #[test]
        fn a_circle_planted_between_two_real_modules_is_refused() {
            layers::assert_planted_circle_refused(&src(), $a, $b);
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> Vec<String> {
        s.split("::").map(str::to_owned).collect()
    }

    /// A crate of `files` (path under `src/`, text) in a fresh temporary directory.
    fn planted(files: &[(&str, &str)]) -> PathBuf {
        let dir = copy_to_temp(
            &std::env::temp_dir().join("layers-empty-src-does-not-exist-ok"),
            "unit",
        );
        for (path, text) in files {
            let file = dir.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        dir
    }

    const LIB: &str = "//! 1. leaves: `a`, `b`, `d`\n//! 2. top: `c`\npub mod a;\npub mod b;\npub mod c;\npub mod d;\npub use a::A;\n";

    #[test]
    fn the_checker_sees_use_trees_renames_inline_paths_and_super() {
        assert_eq!(
            expand("crate::{a::{B, c::D as E}, f}"),
            [
                ("crate::a::B".to_owned(), None),
                ("crate::a::c::D".to_owned(), Some("E".to_owned())),
                ("crate::f".to_owned(), None)
            ]
        );
        let code = strip_tests(&blank_literals_and_comments(
            "use crate::a; // crate::c\nlet s = \"crate::z\";\n#[cfg(test)]\nmod tests {\n    use crate::z;\n}\nuse crate::b;\n",
        ));
        assert!(code.contains("use crate::a;") && code.contains("use crate::b;"));
        assert!(!code.contains("crate::z") && !code.contains("crate::c"));
        assert_eq!(
            floor_of(&floors(LIB), &m("a::x")),
            Some((1, "a".to_owned()))
        );
    }

    #[test]
    fn a_use_up_the_floors_is_refused_and_a_re_export_followed() {
        let dir = planted(&[
            ("lib.rs", LIB),
            ("a.rs", "pub struct A;\nfn f() { crate::c::g(); }\n"),
            ("b.rs", "use crate::A;\n"),
            ("c.rs", "pub fn g() {}\n"),
            ("d.rs", "\n"),
        ]);
        let krate = Crate::read(&dir);
        let problems = krate.problems(&floors(LIB));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("`a` (floor 1, `a`) uses `c` (floor 2, `c`)"),
            "{problems:?}"
        );
        // `crate::A` is `a`'s (the root only re-exports it): b uses a, and no circle through lib.rs.
        let (b, a) = (krate.index(&m("b")).unwrap(), krate.index(&m("a")).unwrap());
        assert!(krate.imports.iter().any(|i| i.from == b && i.to == a));
    }

    #[test]
    fn a_circle_within_a_floor_is_refused_and_a_use_of_oneself_is_none() {
        let dir = planted(&[
            ("lib.rs", LIB),
            (
                "a.rs",
                "pub struct A;\nuse crate::b::B;\nfn f() { self::g(); crate::a::g() }\nfn g() {}\n",
            ),
            ("b.rs", "pub struct B;\nfn f() -> crate::d::D { todo!() }\n"),
            ("c.rs", "\n"),
            ("d.rs", "pub struct D;\nuse crate::{\n    a::A,\n};\n"),
        ]);
        let problems = Crate::read(&dir).problems(&floors(LIB));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("circle of 3 modules: a, b, d"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_planted_circle_between_two_modules_is_refused() {
        let dir = planted(&[
            ("lib.rs", LIB),
            ("a.rs", "pub struct A;\n"),
            ("b.rs", "\n"),
            ("c.rs", "\n"),
            ("d.rs", "\n"),
        ]);
        assert!(Crate::read(&dir).problems(&floors(LIB)).is_empty());
        assert_planted_circle_refused(&dir, "a", "b");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tarjan_finds_each_component() {
        let mut found = components(5, &[(0, 1), (1, 2), (2, 0), (3, 4), (4, 4)]);
        for c in &mut found {
            c.sort();
        }
        found.sort();
        assert_eq!(found, [vec![0, 1, 2], vec![3], vec![4]]);
    }
}

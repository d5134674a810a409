//! The skills a turnkey has (API.md "Memory and skills"): the operator's `<name>/SKILL.md`
//! folders under `[skills] dir` (read from disk when asked, so an edited file counts at the
//! next new session) and the skills stored through the API; a folder wins over a stored skill
//! of the same name (the store refuses to make one). Uses are counted in the store for both.
//! `index` renders the `# Skills` block of a new session's prompt within its budget.
use super::document::{self, SkillDoc};
use crate::config::SkillsConfig;
use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use turnkey_storage::{Store, StoreError};

/// The largest file under a skill's folder that `skill_view` returns, in bytes.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;
/// How many files beside a SKILL.md are listed.
const MAX_FILES: usize = 200;

/// Where a skill comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A folder under `[skills] dir`.
    Dir,
    /// Stored through the API (or an approved proposal).
    Api,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Dir => "dir",
            Self::Api => "api",
        }
    }
}

/// One skill as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub source: Source,
    /// Milliseconds since the epoch: the file's modification time, or the stored update.
    pub updated_at: i64,
    pub uses: i64,
    pub last_used_at: Option<i64>,
}

/// One skill with its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillText {
    pub skill: Skill,
    /// The whole SKILL.md.
    pub content: String,
    /// Files beside it, relative to its folder (folders only).
    pub files: Vec<String>,
}

/// What a folder's SKILL.md said when it had this modification time and length (`None`:
/// it was not valid), so that listing the skills re-reads only what changed.
type Parsed = HashMap<PathBuf, (std::time::SystemTime, u64, Option<(SkillDoc, i64)>)>;

#[derive(Clone)]
pub struct Catalog {
    config: SkillsConfig,
    store: Store,
    parsed: Arc<Mutex<Parsed>>,
}

impl Catalog {
    pub fn new(config: SkillsConfig, store: Store) -> Self {
        Self {
            config,
            store,
            parsed: Arc::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    pub fn index_chars(&self) -> usize {
        self.config.index_chars
    }

    /// Every skill, by name.
    pub async fn list(&self) -> Result<Vec<Skill>, StoreError> {
        let mut by_name: BTreeMap<String, Skill> = BTreeMap::new();
        for s in self.store.stored_skills().await? {
            let skill = Skill {
                name: s.name.clone(),
                description: s.description,
                source: Source::Api,
                updated_at: s.updated_at,
                uses: 0,
                last_used_at: None,
            };
            by_name.insert(s.name, skill);
        }
        for (doc, _, modified) in self.folders().await {
            let skill = Skill {
                name: doc.name.clone(),
                description: doc.description,
                source: Source::Dir,
                updated_at: modified,
                uses: 0,
                last_used_at: None,
            };
            by_name.insert(doc.name, skill);
        }
        for u in self.store.skill_uses().await? {
            if let Some(s) = by_name.get_mut(&u.name) {
                s.uses = u.uses;
                s.last_used_at = Some(u.last_used_at);
            }
        }
        Ok(by_name.into_values().collect())
    }

    /// Whether `name` is installed as a folder (read-only through the API).
    pub async fn is_folder(&self, name: &str) -> bool {
        self.folder(name).await.is_some()
    }

    /// One skill with its SKILL.md; `None` if there is none of that name.
    pub async fn get(&self, name: &str) -> Result<Option<SkillText>, StoreError> {
        let uses = self.store.skill_uses().await?;
        let used = uses.iter().find(|u| u.name == name);
        let skill = |description: String, source, updated_at| Skill {
            name: name.to_owned(),
            description,
            source,
            updated_at,
            uses: used.map_or(0, |u| u.uses),
            last_used_at: used.map(|u| u.last_used_at),
        };
        if let Some((doc, content, dir, modified)) = self.folder(name).await {
            let files = list_files(dir).await;
            return Ok(Some(SkillText {
                skill: skill(doc.description, Source::Dir, modified),
                content,
                files,
            }));
        }
        Ok(self.store.stored_skill(name).await?.map(|s| SkillText {
            skill: skill(s.description, Source::Api, s.updated_at),
            content: s.content,
            files: Vec::new(),
        }))
    }

    /// A file under the folder of skill `name`: a relative path that stays inside it.
    pub async fn file(&self, name: &str, path: &str) -> Result<String, String> {
        let Some((_, _, dir, _)) = self.folder(name).await else {
            return Err(format!(
                "skill {name:?} has no files: only a skill installed as a folder does"
            ));
        };
        let rel = Path::new(path);
        if path.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(format!(
                "{path:?} is not a path inside the skill's folder (relative, without `..`)"
            ));
        }
        let file = dir.join(rel);
        tokio::task::spawn_blocking(move || read_inside(&dir, &file))
            .await
            .map_err(|e| format!("reading the file failed: {e}"))?
    }

    /// The folders under `[skills] dir` that hold a valid SKILL.md: the document, its folder
    /// and modification time. A folder whose SKILL.md is invalid is left out, with a warning.
    async fn folders(&self) -> Vec<(SkillDoc, PathBuf, i64)> {
        if !self.config.enabled {
            return Vec::new();
        }
        let dir = self.config.dir.clone();
        let parsed = self.parsed.clone();
        tokio::task::spawn_blocking(move || scan_dir(&dir, &parsed))
            .await
            .unwrap_or_default()
    }

    /// The folder of skill `name`: its document, its text, the folder, its modification time.
    async fn folder(&self, name: &str) -> Option<(SkillDoc, String, PathBuf, i64)> {
        if !self.config.enabled || document::check_name(name).is_err() {
            return None;
        }
        let dir = self.config.dir.join(name);
        let name = name.to_owned();
        tokio::task::spawn_blocking(move || {
            let (doc, text, modified) = read_skill(&dir)?;
            (doc.name == name).then_some((doc, text, dir, modified))
        })
        .await
        .ok()
        .flatten()
    }
}

fn scan_dir(dir: &Path, parsed: &Mutex<Parsed>) -> Vec<(SkillDoc, PathBuf, i64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut parsed = parsed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for e in entries.flatten() {
        // The kind comes with the directory entry (no stat), except for a link to a folder.
        let path = e.path();
        let folder = match e.file_type() {
            Ok(t) if t.is_symlink() => path.is_dir(),
            Ok(t) => t.is_dir(),
            Err(_) => false,
        };
        if !folder {
            continue;
        }
        let Ok(meta) = std::fs::metadata(path.join("SKILL.md")) else {
            continue;
        };
        let stamp = (meta.modified().unwrap_or(std::time::UNIX_EPOCH), meta.len());
        let doc = match parsed.get(&path) {
            Some((at, len, doc)) if (*at, *len) == stamp => doc.clone(),
            _ => {
                let doc = read_skill(&path).map(|(doc, _, modified)| (doc, modified));
                parsed.insert(path.clone(), (stamp.0, stamp.1, doc.clone()));
                doc
            }
        };
        seen.push(path.clone());
        if let Some((doc, modified)) = doc {
            let folder = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if doc.name == folder {
                out.push((doc, path, modified));
            } else {
                tracing::warn!(folder, name = %doc.name, "a SKILL.md's name is not its folder's; skipped");
            }
        }
    }
    // Folders that are gone are forgotten.
    parsed.retain(|p, _| seen.contains(p));
    out
}

/// A folder's SKILL.md, parsed; `None` (with a warning when it exists) if it is not valid.
fn read_skill(folder: &Path) -> Option<(SkillDoc, String, i64)> {
    let file = folder.join("SKILL.md");
    let meta = std::fs::metadata(&file).ok()?;
    if meta.len() > document::MAX_CONTENT_BYTES as u64 {
        tracing::warn!(file = %file.display(), "SKILL.md is too large; skipped");
        return None;
    }
    let text = std::fs::read_to_string(&file).ok()?;
    match document::parse(&text) {
        Ok(doc) => {
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            Some((doc, text, modified))
        }
        Err(why) => {
            tracing::warn!(file = %file.display(), %why, "invalid SKILL.md; skipped");
            None
        }
    }
}

/// Files under `dir` other than SKILL.md, relative, sorted; at most [`MAX_FILES`].
async fn list_files(dir: PathBuf) -> Vec<String> {
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let Ok(kind) = e.file_type() else { continue };
                let path = e.path();
                if kind.is_dir() {
                    stack.push(path);
                } else if kind.is_file() && out.len() < MAX_FILES {
                    if let Ok(rel) = path.strip_prefix(&dir) {
                        let rel = rel.to_string_lossy().into_owned();
                        if rel != "SKILL.md" {
                            out.push(rel);
                        }
                    }
                }
            }
        }
        out.sort();
        out
    })
    .await
    .unwrap_or_default()
}

/// Reads `file` if, with links resolved, it is still under `dir`.
fn read_inside(dir: &Path, file: &Path) -> Result<String, String> {
    let root = dir
        .canonicalize()
        .map_err(|e| format!("the skill's folder: {e}"))?;
    let real = file
        .canonicalize()
        .map_err(|_| "no such file in the skill's folder".to_owned())?;
    if !real.starts_with(&root) {
        return Err("that path leads outside the skill's folder".into());
    }
    let meta = std::fs::metadata(&real).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("that is not a file".into());
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!(
            "the file has {} bytes; skill_view returns at most {MAX_FILE_BYTES}",
            meta.len()
        ));
    }
    let bytes = std::fs::read(&real).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "the file is not UTF-8 text".to_owned())
}

/// The `# Skills` block of a new session's prompt: a line per skill, `- name: description`,
/// within `budget` characters. Over budget, the names come first: descriptions are trimmed
/// (the longest first, each to a fair share of what is left) and, if the names alone do not
/// fit, the last names are counted instead of listed. Empty when there are no skills.
pub fn index(skills: &[Skill], budget: usize) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let head =
        "# Skills\nProcedures you can load with skill_view (by name) before you follow one:\n";
    let chars = |s: &str| s.chars().count();
    let names: usize = skills.iter().map(|s| chars(&s.name) + 3).sum();
    let room = budget.saturating_sub(chars(head));
    if names > room {
        return names_only(head, skills, room);
    }
    let shares = fair_shares(
        skills.iter().map(|s| chars(&s.description) + 2).collect(),
        room - names,
    );
    let mut out = head.to_owned();
    for (s, share) in skills.iter().zip(shares) {
        out.push_str("- ");
        out.push_str(&s.name);
        if share > 2 {
            out.push_str(": ");
            out.push_str(&trim_to(&s.description, share - 2));
        }
        out.push('\n');
    }
    out
}

/// As many names as fit in `room`, then how many more there are.
fn names_only(head: &str, skills: &[Skill], room: usize) -> String {
    let mut out = head.to_owned();
    let mut used = 0;
    for (i, s) in skills.iter().enumerate() {
        let more = skills.len() - i;
        let tail = format!("- … and {more} more (skill_view by name)\n");
        let line = format!("- {}\n", s.name);
        let after = used + line.chars().count();
        if after + tail.chars().count() > room && more > 1 || after > room {
            out.push_str(&tail);
            return out;
        }
        out.push_str(&line);
        used = after;
    }
    out
}

/// Splits `room` among `wants`: whoever wants less than an even share gets it all, the rest
/// share what remains evenly.
fn fair_shares(wants: Vec<usize>, room: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..wants.len()).collect();
    order.sort_by_key(|&i| wants[i]);
    let mut shares = vec![0; wants.len()];
    let mut left = room;
    for (k, &i) in order.iter().enumerate() {
        let even = left / (wants.len() - k);
        shares[i] = wants[i].min(even);
        left -= shares[i];
    }
    shares
}

/// `s` cut to at most `max` characters, ending in `…` when cut.
fn trim_to(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    if max == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(max - 1).collect();
    out.truncate(out.trim_end().len());
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(name: &str, description: &str) -> Skill {
        Skill {
            name: name.into(),
            description: description.into(),
            source: Source::Dir,
            updated_at: 0,
            uses: 0,
            last_used_at: None,
        }
    }

    #[test]
    fn r5_2_the_index_lists_every_skill_when_it_fits() {
        let skills = [
            skill("deploy", "Ship to staging."),
            skill("review", "Review a PR."),
        ];
        let text = index(&skills, 4000);
        assert!(text.starts_with("# Skills\n"));
        assert!(text.contains("- deploy: Ship to staging.\n- review: Review a PR.\n"));
        assert_eq!(index(&[], 4000), "");
    }

    #[test]
    fn r5_2_over_budget_descriptions_are_trimmed_names_kept() {
        let long = "x".repeat(500);
        let skills = [skill("a", "short"), skill("b", &long), skill("c", &long)];
        let budget = 300;
        let text = index(&skills, budget);
        assert!(text.chars().count() <= budget, "{} > {budget}", text.len());
        assert!(text.contains("- a: short\n"), "{text}");
        assert!(
            text.contains("- b: xxx") && text.contains("…\n- c: xxx"),
            "{text}"
        );
    }

    #[test]
    fn r5_2_when_names_alone_overflow_the_rest_are_counted() {
        let skills: Vec<Skill> = (0..100)
            .map(|i| skill(&format!("skill-number-{i:03}"), "d"))
            .collect();
        let budget = 600;
        let text = index(&skills, budget);
        assert!(text.chars().count() <= budget, "{}", text.chars().count());
        assert!(text.contains("- skill-number-000\n"));
        assert!(text.contains("more (skill_view by name)"), "{text}");
        assert!(!text.contains(": d"));
    }

    #[test]
    fn r5_2_a_listing_rereads_only_what_changed_and_forgets_what_is_gone() {
        let root = tempfile::tempdir().expect("tmp");
        let write = |name: &str, description: &str| {
            let d = root.path().join(name);
            std::fs::create_dir_all(&d).expect("mkdir");
            let text = format!("---\nname: {name}\ndescription: {description}\n---\nsteps\n");
            std::fs::write(d.join("SKILL.md"), text).expect("write");
        };
        let parsed = Mutex::new(Parsed::new());
        let described = |parsed: &Mutex<Parsed>| -> Vec<(String, String)> {
            let mut v: Vec<_> = scan_dir(root.path(), parsed)
                .into_iter()
                .map(|(d, _, _)| (d.name, d.description))
                .collect();
            v.sort();
            v
        };
        write("a", "First.");
        write("b", "Second.");
        assert_eq!(described(&parsed).len(), 2);
        write("a", "First, and changed.");
        std::fs::write(root.path().join("b/SKILL.md"), "not a skill").expect("write");
        assert_eq!(
            described(&parsed),
            [("a".into(), "First, and changed.".into())]
        );
        std::fs::remove_dir_all(root.path().join("a")).expect("rm");
        assert_eq!(described(&parsed), []);
        assert_eq!(
            parsed.lock().expect("lock").len(),
            1,
            "only b, remembered as invalid"
        );
    }

    #[test]
    fn r5_2_a_skill_file_outside_its_folder_is_refused() {
        let root = tempfile::tempdir().expect("tmp");
        let dir = root.path().join("s");
        std::fs::create_dir_all(dir.join("ref")).expect("mkdir");
        std::fs::write(dir.join("ref/a.md"), "hello").expect("write");
        std::fs::write(root.path().join("secret.txt"), "no").expect("write");
        assert_eq!(
            read_inside(&dir, &dir.join("ref/a.md")).as_deref(),
            Ok("hello")
        );
        std::os::unix::fs::symlink(root.path().join("secret.txt"), dir.join("link"))
            .expect("symlink");
        assert!(read_inside(&dir, &dir.join("link"))
            .expect_err("outside")
            .contains("outside"));
    }
}

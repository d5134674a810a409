//! The system prompt (SPEC R5.2, R5.3): three layers, stable → context → volatile, built once
//! when the session is created, stored, and replayed byte for byte on every call after. Only
//! compression may invalidate it.
use crate::config::RuntimeConfig;
use crate::error::GatewayError;
use crate::input::NewSessionRequest;
use std::path::Path;

/// Largest project context file (AGENTS.md …) taken into the prompt, in bytes.
const MAX_CONTEXT_FILE: usize = 32 * 1024;
/// How many workspace entries the frozen snapshot lists, at most, and in how many characters:
/// every call of the session reads them again (a small local model reads ~150 tokens a second).
const SNAPSHOT_ENTRIES: usize = 20;
const SNAPSHOT_CHARS: usize = 400;
const CONTEXT_FILES: [&str; 3] = ["AGENTS.md", "TURNKEY.md", ".turnkey/context.md"];

/// What the principal's memory held when the session was made (SPEC R5.2): frozen into its
/// prompt, so a write during the session reaches the next one, never this one's prompt.
#[derive(Clone, Debug, Default)]
pub struct Remembered {
    /// The `# Skills` index (`skills::catalog::index`), empty when there are none.
    pub skills: String,
    pub memory: Vec<String>,
    pub profile: Vec<String>,
    pub memory_limit: usize,
    pub profile_limit: usize,
}

pub struct BuiltPrompt {
    pub prompt: String,
    /// The workspace block, frozen for the session's life so the prompt prefix stays cache-stable.
    pub workspace_snapshot: String,
}

pub fn build_for_new_session(
    config: &RuntimeConfig,
    req: &NewSessionRequest,
    remembered: &Remembered,
) -> Result<BuiltPrompt, GatewayError> {
    let workspace = std::path::absolute(&config.tools.workspace)
        .unwrap_or_else(|_| config.tools.workspace.clone());
    let snapshot = workspace_snapshot(&workspace);
    let stable = stable_layer(&config.agent.name, &snapshot, &req.platform);
    let context = context_layer(req.system_message.as_deref(), &workspace);
    let volatile = volatile_layer(remembered, chrono::Utc::now());
    let mut prompt = stable;
    for layer in [context, volatile] {
        if !layer.is_empty() {
            prompt.push_str("\n\n");
            prompt.push_str(&layer);
        }
    }
    Ok(BuiltPrompt {
        prompt,
        workspace_snapshot: snapshot,
    })
}

/// Identity, guidance, workspace, environment and platform: what changes least comes first.
/// Every word is read again on every call of every session: it stays short. The first
/// sentences stay as they were: with shorter ones the 135M model of the real-model tests
/// stopped calling tools (docs/benchmarks.md, issue 38).
fn stable_layer(name: &str, snapshot: &str, platform: &str) -> String {
    format!(
        "You are {name}, an AI agent served by a durable gateway. Answer the user directly and \
         accurately. When you use a tool, say what you are doing and why; never claim a tool \
         ran when it did not.\n\n\
         # Workspace\n{snapshot}\n\n\
         # Environment\nOS: {os} ({arch})\n\n\
         # Platform\n{hint}",
        os = std::env::consts::OS,
        arch = std::env::consts::ARCH,
        hint = platform_hint(platform),
    )
}

fn platform_hint(platform: &str) -> &'static str {
    match platform {
        "telegram" | "slack" | "webhook" => "A chat app: short plain text, no wide tables.",
        "cli" => "A terminal: plain text and short code blocks.",
        _ => "An API or the web UI: Markdown renders.",
    }
}

/// The caller's system message and the project's context files.
fn context_layer(system_message: Option<&str>, workspace: &Path) -> String {
    let mut parts = Vec::new();
    if let Some(m) = system_message.filter(|m| !m.trim().is_empty()) {
        parts.push(m.trim().to_owned());
    }
    for name in CONTEXT_FILES {
        let path = workspace.join(name);
        if let Ok(text) = std::fs::read_to_string(&path) {
            let mut text = text;
            if text.len() > MAX_CONTEXT_FILE {
                let mut cut = MAX_CONTEXT_FILE;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                text.push_str("\n[truncated]");
            }
            parts.push(format!("# Project context: {name}\n{}", text.trim_end()));
        }
    }
    parts.join("\n\n")
}

/// What is most likely to differ between sessions goes last: only the tail of the prefix moves.
/// In R5.2's order: the principal's memory and user profile (each stating how full it is; an
/// empty one is left out), then when the session started.
fn volatile_layer(remembered: &Remembered, now: chrono::DateTime<chrono::Utc>) -> String {
    let mut out = String::new();
    if !remembered.skills.is_empty() {
        out.push_str(remembered.skills.trim_end());
        out.push_str("\n\n");
    }
    let blocks = [
        (
            "# Memory",
            "Your notes from earlier sessions",
            &remembered.memory,
            remembered.memory_limit,
        ),
        (
            "# User profile",
            "What you know about the user",
            &remembered.profile,
            remembered.profile_limit,
        ),
    ];
    for (heading, what, entries, limit) in blocks {
        if entries.is_empty() {
            continue;
        }
        let used: usize = entries.iter().map(|e| e.chars().count()).sum();
        out.push_str(&format!(
            "{heading}\n{what} ({used} of {limit} characters used; the memory tool changes \
             them for later sessions):\n"
        ));
        for e in entries {
            out.push_str(&format!("- {}\n", e.trim().replace('\n', "\n  ")));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "# Session\nStarted at {}.",
        now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    ));
    out
}

/// A one-time look at the workspace: its git branch and first entries, bounded. Never its
/// absolute path: tools take paths relative to it (`.`, the directory commands run in), and
/// the path would only cost tokens (and tell the model where the gateway's files are). A
/// sentence instead of `Directory: .` made the 135M model of the real-model tests call
/// `read_file` with a file from its examples, most of the time.
fn workspace_snapshot(dir: &Path) -> String {
    let mut out = String::from("Directory: .");
    if let Ok(head) = std::fs::read_to_string(dir.join(".git/HEAD")) {
        let branch = head
            .trim()
            .strip_prefix("ref: refs/heads/")
            .unwrap_or(head.trim());
        out.push_str(&format!("\nGit branch: {branch}"));
    }
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .map(|e| {
                    let dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
                    let n = e.file_name().to_string_lossy().into_owned();
                    if dir {
                        format!("{n}/")
                    } else {
                        n
                    }
                })
                .collect();
            names.sort();
            let total = names.len();
            let mut listed = Vec::new();
            let mut chars = 0;
            for n in names.into_iter().take(SNAPSHOT_ENTRIES) {
                chars += n.chars().count() + 2;
                if chars > SNAPSHOT_CHARS {
                    break;
                }
                listed.push(n);
            }
            if listed.is_empty() && total == 0 {
                out.push_str("\nIt is empty.");
            } else {
                out.push_str(&format!("\nEntries: {}", listed.join(", ")));
                if total > listed.len() {
                    out.push_str(&format!(" (+{} more)", total - listed.len()));
                }
            }
        }
        Err(_) => out.push_str("\nIt is empty."),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r5_2_layers_are_in_order_and_caller_message_is_in_context() {
        let dir = std::env::temp_dir().join(format!("tk-prompt-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("AGENTS.md"), "Always answer in haiku.").expect("write");
        let mut config = RuntimeConfig::default();
        config.tools.workspace = dir.clone();
        let req = NewSessionRequest {
            system_message: Some("Be terse.".into()),
            platform: "api".into(),
            ..Default::default()
        };
        let remembered = Remembered {
            skills: "# Skills\n- deploy: Ship it.\n".into(),
            memory: vec!["The project builds with cargo.".into()],
            profile: vec!["Alice; prefers short answers.".into()],
            memory_limit: 2200,
            profile_limit: 1375,
        };
        let p = build_for_new_session(&config, &req, &remembered)
            .expect("prompt")
            .prompt;
        let identity = p.find("You are turnkey").expect("identity");
        let workspace = p.find("# Workspace").expect("workspace");
        let caller = p.find("Be terse.").expect("caller message");
        let agents = p.find("Always answer in haiku.").expect("AGENTS.md");
        let skills = p
            .find("# Skills\n- deploy: Ship it.\n\n# Memory")
            .expect("skills");
        let memory = p.find("# Memory").expect("memory");
        assert!(agents < skills && skills < memory);
        let profile = p.find("# User profile").expect("profile");
        let session = p.find("# Session").expect("volatile");
        assert!(identity < workspace && workspace < caller && caller < agents && agents < memory);
        assert!(memory < profile && profile < session);
        assert!(
            p.contains("(30 of 2200 characters used;")
                && p.contains("(29 of 1375 characters used;")
                && p.contains("- Alice; prefers short answers.\n"),
            "{p}"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn r5_3_snapshot_lists_entries_of_the_workspace() {
        let dir = std::env::temp_dir().join(format!("tk-snap-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("src")).expect("mkdir");
        std::fs::write(dir.join("Cargo.toml"), "").expect("write");
        let s = workspace_snapshot(&dir);
        assert!(s.contains("Cargo.toml") && s.contains("src/"), "{s}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn r5_3_the_snapshot_is_bounded_and_names_no_absolute_path() {
        let dir = std::env::temp_dir().join(format!("tk-snap-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        for i in 0..60 {
            std::fs::write(dir.join(format!("file-with-a-long-name-{i:02}.txt")), "")
                .expect("write");
        }
        let s = workspace_snapshot(&dir);
        assert!(!s.contains(dir.to_str().expect("utf-8")), "{s}");
        assert!(
            s.chars().count() < SNAPSHOT_CHARS + 100,
            "{} chars: {s}",
            s.chars().count()
        );
        assert!(
            s.contains("file-with-a-long-name-00.txt") && s.contains(" more)"),
            "{s}"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
        assert!(workspace_snapshot(&dir).ends_with("It is empty."));
    }
}

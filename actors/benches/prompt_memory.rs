//! What memory and skills add to a new session (issue 23): the time to read what the prompt's
//! volatile layer shows (both memory stores in one query; the skills: the operator's folders
//! read from disk and the stored ones from the database), to render the `# Skills` index and
//! build the prompt, and the prompt's size (characters and tokens for an OpenAI model, the
//! first request's system message). Three cases: nothing remembered and no skills; full
//! stores (2,200 + 1,375 characters) and 50 folder skills; the same with 200 skills, so the
//! index is over its 4,000-character budget. Prints figures; a measurement, not a test.
//!
//! `cargo bench --workspace --bench prompt_memory` (env: BENCH_ROUNDS, default 200).
#![allow(clippy::expect_used, clippy::unwrap_used)]
use std::time::{Duration, Instant};
use turnkey_actors::config::{RuntimeConfig, SkillsConfig};
use turnkey_actors::input::NewSessionRequest;
use turnkey_actors::skills::catalog::{index, Catalog};
use turnkey_actors::turn::prompt::{build_for_new_session, Remembered};
use turnkey_storage::*;

const SCOPE: &str = "token:bench";

async fn store(dir: &std::path::Path) -> Store {
    let url = format!("sqlite://{}/b.db?mode=rwc", dir.display());
    let s = Store::connect(&url).await.unwrap();
    s.migrate().await.unwrap();
    s
}

/// Fills both stores to their bounds with entries of about 100 characters.
async fn fill(s: &Store) {
    let author = Author {
        by: ChangedBy::Api,
        session: None,
    };
    for (target, limit) in [(MemoryTarget::Memory, 2200), (MemoryTarget::Profile, 1375)] {
        for i in 0.. {
            let text = format!(
                "Fact {i:02}: the release build runs on the staging host first, then canary, then all of prod."
            );
            let w = s
                .edit_memory(
                    SCOPE,
                    target,
                    MemoryEdit::Add { text: &text },
                    limit,
                    &author,
                )
                .await
                .unwrap();
            if !matches!(w, MemoryWrite::Done { .. }) {
                break;
            }
        }
    }
}

/// `n` skill folders under `dir`, each with a description of about 120 characters.
fn folders(dir: &std::path::Path, n: usize) {
    for i in 0..n {
        let d = dir.join(format!("skill-{i:03}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("SKILL.md"),
            format!(
                "---\nname: skill-{i:03}\ndescription: Use when the user asks to deploy service {i} \
                 to staging or production; covers the checks, the rollout and the rollback.\n---\n\
                 1. Build.\n2. Check.\n3. Roll out.\n"
            ),
        )
        .unwrap();
    }
}

fn per(d: Duration, rounds: u32) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6 / f64::from(rounds))
}

async fn case(name: &str, skills: usize, full: bool, rounds: u32) {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path()).await;
    if full {
        fill(&s).await;
    }
    let dir = tmp.path().join("skills");
    std::fs::create_dir_all(&dir).unwrap();
    folders(&dir, skills);
    let config = RuntimeConfig {
        skills: SkillsConfig {
            dir: dir.clone(),
            ..SkillsConfig::default()
        },
        ..RuntimeConfig::default()
    };
    let catalog = Catalog::new(config.skills.clone(), s.clone());
    let req = NewSessionRequest {
        title: None,
        system_message: None,
        model: None,
        platform: "api".into(),
        chat_key: None,
        history: Vec::new(),
    };
    let (mut read_memory, mut read_skills, mut build) =
        (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut prompt = String::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let entries = s.principal_memory(SCOPE).await.unwrap();
        read_memory += t.elapsed();
        let t = Instant::now();
        let list = catalog.list().await.unwrap();
        read_skills += t.elapsed();
        let t = Instant::now();
        let (memory, profile): (Vec<_>, Vec<_>) = entries
            .into_iter()
            .partition(|e| e.target == MemoryTarget::Memory);
        let remembered = Remembered {
            skills: index(&list, config.skills.index_chars),
            memory: memory.into_iter().map(|e| e.text).collect(),
            profile: profile.into_iter().map(|e| e.text).collect(),
            memory_limit: 2200,
            profile_limit: 1375,
        };
        prompt = build_for_new_session(&config, &req, &remembered)
            .unwrap()
            .prompt;
        build += t.elapsed();
    }
    let tokens = turnkey_providers::estimate_tokens_for_model("gpt-4o", &prompt);
    println!(
        "{name:<34} prompt {:>6} chars {:>5} tokens | read memory {:>9} | read skills {:>9} | index+build {:>9}",
        prompt.chars().count(),
        tokens,
        per(read_memory, rounds),
        per(read_skills, rounds),
        per(build, rounds),
    );
}

#[actix_rt::main]
async fn main() {
    let rounds: u32 = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    println!("per new session, mean of {rounds} (SQLite file, folders on local disk)");
    case("nothing remembered, no skills", 0, false, rounds).await;
    case("full memory + profile, 50 skills", 50, true, rounds).await;
    case("full memory + profile, 200 skills", 200, true, rounds).await;
}

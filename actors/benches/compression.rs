//! Compression benchmark: the time to compress a 1,000-message session with the provider call
//! excluded (issue 7). Each stage the CompressionActor and the preflight gate run is timed on a
//! fresh SQLite file: read the transcript, estimate every row's tokens (tiktoken for an OpenAI
//! model, bytes/4 for others), plan the cut, render the bounded summary request, and commit the
//! swap (mark ~975 rows, write the summary and its event, one fsynced transaction); and, on a
//! twin session, the same cut committed as a rotation (`compression.mode = "rotate"`). Prints
//! figures; it is a measurement, not a test.
//!
//! `cargo bench -p turnkey-actors --bench compression` (env: BENCH_SESSIONS, default 5;
//! BENCH_DATABASE_URL to run on PostgreSQL instead of a fresh SQLite file).
#![allow(clippy::expect_used, clippy::unwrap_used)]
use std::time::Instant;
use turnkey_actors::compressor::plan::{plan, Budget};
use turnkey_actors::compressor::summary::request_messages;
use turnkey_actors::turn::preflight::row_tokens;
use turnkey_storage::*;

const MESSAGES: usize = 1_000;

fn text(i: usize) -> String {
    match i % 4 {
        0 => format!("note {i}: please check the build log and tell me which test failed and why; the last run was on the release branch."),
        1 => format!("I read the log. Test {i} failed because the fixture path moved; here is the fix:\n```rust\nlet p = dir.join(\"fixtures\").join(\"case_{i}.json\");\n```"),
        2 => format!("question {i}: does the same change apply to the PostgreSQL job, and should the migration run first?"),
        _ => format!("Yes. Run the migration first, then the tests; the PostgreSQL job uses the same fixtures (answer {i})."),
    }
}

async fn store() -> Store {
    let url = std::env::var("BENCH_DATABASE_URL").unwrap_or_else(|_| {
        let dir = std::env::temp_dir().join(format!("tk-bench-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        format!("sqlite://{}/b.db?mode=rwc", dir.display())
    });
    let s = Store::connect(&url).await.unwrap();
    s.migrate().await.unwrap();
    s
}

/// A fresh session of `MESSAGES` alternating rows, with its lease held.
async fn session_of(s: &Store) -> (SessionId, Fence) {
    let sid = SessionId::new();
    s.create_session(NewSession {
        id: sid,
        owner: "operator".into(),
        platform: "api".into(),
        chat_key: None,
        title: None,
        model: None,
        system_message: None,
        system_prompt: "sys".into(),
        workspace_snapshot: None,
        seed: Vec::new(),
    })
    .await
    .unwrap();
    let owner = Owner {
        instance: InstanceId::new(),
        pid: i64::from(std::process::id()),
        host: "bench".into(),
    };
    let fence = s
        .try_acquire_lease(
            LeaseClaim {
                session: sid,
                owner: owner.clone(),
                platform: "bench",
                ttl_ms: 600_000,
            },
            std::sync::Arc::new(|_: &turnkey_storage::Owner| false),
        )
        .await
        .unwrap()
        .unwrap();
    for i in 0..MESSAGES {
        let role = if i % 2 == 0 {
            MessageRole::User
        } else {
            MessageRole::Assistant
        };
        s.append_message(
            &fence,
            &NewMessage {
                id: MessageId::new(),
                role: Some(role),
                content: Some(text(i)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }

    (sid, fence)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let sessions: usize = std::env::var("BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let s = store().await;
    let mut stages: [Vec<f64>; 7] = Default::default();
    let mut compressed = 0;
    let mut kept = 0;
    for _ in 0..sessions {
        let (sid, fence) = session_of(&s).await;
        let t = Instant::now();
        let rows = s.list_messages(sid).await.unwrap();
        stages[0].push(t.elapsed().as_secs_f64() * 1e3);

        let t = Instant::now();
        let openai: Vec<u64> = rows.iter().map(|m| row_tokens("gpt-4o", m)).collect();
        stages[1].push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let other: Vec<u64> = rows
            .iter()
            .map(|m| row_tokens("claude-sonnet-4", m))
            .collect();
        stages[2].push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(openai.len(), other.len());

        let t = Instant::now();
        let refs: Vec<&Message> = rows.iter().collect();
        let by_id: std::collections::HashMap<MessageId, u64> =
            rows.iter().zip(&openai).map(|(m, t)| (m.id, *t)).collect();
        let cut = plan(
            &refs,
            Budget {
                protect_first_n: 3,
                protect_last_n: 20,
                tail_tokens: 128_000 / 5 / 10,
            },
            |m| by_id[&m.id],
        )
        .unwrap();
        stages[3].push(t.elapsed().as_secs_f64() * 1e3);

        let t = Instant::now();
        let middle = &refs[cut.middle()];
        let req = request_messages(middle, 256 * 1024, 1_500);
        stages[4].push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(req.len(), 2);

        let t = Instant::now();
        let done = s
            .commit_compression(
                &fence,
                &Compaction {
                    session_id: sid,
                    turn_id: TurnId::new(),
                    admission_id: AdmissionId::new(),
                    base_epoch: 0,
                    compressed: middle
                        .iter()
                        .map(|m| Replaced {
                            id: m.id,
                            idx: m.idx,
                            summary: m.summary_epoch.is_some(),
                        })
                        .collect(),
                    summary: NewMessage {
                        id: MessageId::new(),
                        role: Some(MessageRole::System),
                        content: Some("summary ".repeat(200)),
                        summary_after_idx: Some(refs[cut.head_end - 1].idx),
                        ..Default::default()
                    },
                    event_data: serde_json::json!({"before_tokens": 1, "after_tokens": 1}),
                },
            )
            .await
            .unwrap();
        stages[5].push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(done.epoch, 1);
        compressed = middle.len();

        // The same cut in `rotate` mode, on a twin session: a child with copies of the kept
        // rows and the summary, the root pointed at it, two events; one transaction.
        let (twin, twin_fence) = session_of(&s).await;
        let twin_rows = s.list_messages(twin).await.unwrap();
        let ids = |r: std::ops::Range<usize>| twin_rows[r].iter().map(|m| m.id).collect();
        let t = Instant::now();
        let rotated = s
            .commit_rotation(
                &twin_fence,
                &Rotation {
                    session_id: twin,
                    turn_id: TurnId::new(),
                    admission_id: AdmissionId::new(),
                    base_epoch: 0,
                    child_id: SessionId::new(),
                    head: ids(0..cut.head_end),
                    tail: ids(cut.tail_start..twin_rows.len()),
                    summary: NewMessage {
                        id: MessageId::new(),
                        role: Some(MessageRole::System),
                        content: Some("summary ".repeat(200)),
                        ..Default::default()
                    },
                    event_data: serde_json::json!({"before_tokens": 1, "after_tokens": 1}),
                },
            )
            .await
            .unwrap();
        stages[6].push(t.elapsed().as_secs_f64() * 1e3);
        kept = rotated.rows.len() - 1;
    }
    let names = [
        "read 1,000 rows",
        "estimate tokens (gpt-4o, tiktoken o200k)",
        "estimate tokens (other models, bytes/4)",
        "plan the cut",
        "render the summary request",
        "commit the swap",
        "commit a rotation instead (rotate mode)",
    ];
    let backend = if std::env::var("BENCH_DATABASE_URL").is_ok() {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    println!("compression of a {MESSAGES}-message session on {backend}, {compressed} rows replaced, median of {sessions} sessions:");
    let mut total = 0.0;
    for (name, v) in names.iter().zip(stages) {
        let m = median(v);
        if !name.contains("bytes/4") && !name.contains("rotation") {
            total += m;
        }
        println!("  {name:<42} {m:>8.2} ms");
    }
    println!(
        "  {:<42} {total:>8.2} ms",
        "total (tiktoken path, provider call excluded)"
    );
    println!("  (the rotation copies {kept} kept rows into the child)");
}

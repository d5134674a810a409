//! In-place compression end to end (SPEC R6.1–R6.5, R12 "provider overflow"): a long session
//! against a 16K window is compressed by the auxiliary provider,
//! every request fits, the head and tail are intact, no tool pair is split, and the whole
//! history stays readable; a provider overflow is compressed and resent once. What happens when
//! the summarizer fails or times out is in `r6_compression_fallback.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use turnkey_tests::wire::assert_well_formed;
use turnkey_tests::{pg, Api, RecordedRequest, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;
const WINDOW: u32 = 16_000;
const SUMMARY: &str = "Summary: the user sent numbered notes about the garden; the agent acknowledged each one and read files when asked.";

/// The primary (16K window) and an auxiliary provider that writes summaries.
fn options(main: &ScriptedProvider, aux: &ScriptedProvider, extra: &str) -> TurnkeyOptions {
    TurnkeyOptions::new(main).context_window(WINDOW).extra_toml(&format!(
        "[[providers]]\nname = \"aux\"\nkind = \"openai\"\nbase_url = \"{}\"\napi_key = \"sk-aux\"\n\
         model = \"aux-model\"\ncontext_window = 32000\nauxiliary = true\nmax_retries = 0\n\n\
         [tools]\napproval = \"off\"\nenabled = [\"read_file\"]\n\n{extra}",
        aux.base_url
    ))
}

/// A user text of about 100 tokens, unique per turn.
fn note(i: usize) -> String {
    format!(
        "note {i:03}: {}",
        "the tomatoes need water and the roses need pruning. ".repeat(7)
    )
}

fn messages(req: &RecordedRequest) -> Vec<Value> {
    req.body["messages"].as_array().cloned().unwrap_or_default()
}

/// Bytes/4 of the request body: an over-estimate of its tokens (JSON framing included).
fn body_tokens(req: &RecordedRequest) -> usize {
    req.body.to_string().len() / 4
}

/// The text the wire shows for a stored row.
fn wire_text(v: &Value) -> String {
    v["content"].as_str().unwrap_or_default().to_owned()
}

async fn long_session(database: Option<&str>) {
    let main = ScriptedProvider::start();
    let aux = ScriptedProvider::start();
    aux.on_user_text("[turnkey:compress]", Reply::text(SUMMARY));
    let tk = Turnkey::start(with_database(options(&main, &aux, ""), database)).await;
    std::fs::create_dir_all(tk.dir.path().join("workspace")).unwrap();
    std::fs::write(tk.dir.path().join("workspace/plan.txt"), "water at dawn\n").unwrap();
    let api = tk.api();
    let s = api.create_session_id().await;
    let turns = 200;
    let mut tool_turns = 0;
    for i in 0..turns {
        let text = note(i);
        if i % 10 == 5 {
            // A tool round: the call and its result are one pair that must never be split.
            main.on_user_text_times(
                &format!("note {i:03}:"),
                Reply::tool_call(
                    &format!("call{i}"),
                    "read_file",
                    json!({"path": "plan.txt"}),
                ),
                1,
            );
            tool_turns += 1;
        }
        let a = api.submit_accepted(&s, &text).await;
        let adm = api.wait_terminal(&a, BOUND).await;
        if adm["outcome"]["result"] != "completed" {
            let compressions: Vec<Value> = api
                .all_events(&s, 0)
                .await
                .into_iter()
                .filter(|e| e["kind"] == "compression.completed")
                .map(|e| e["data"].clone())
                .collect();
            panic!(
                "turn {i}: {adm}\ncompressions: {compressions:?}\n{}",
                tk.log_tail(30)
            );
        }
    }

    let events = api.all_events(&s, 0).await;
    let compressions: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "compression.completed")
        .collect();
    assert!(
        compressions.len() >= 2,
        "a 400-message session in a 16K window compresses more than once: {}",
        compressions.len()
    );
    for c in &compressions {
        let d = &c["data"];
        assert!(
            d["after_tokens"].as_u64().unwrap() < d["before_tokens"].as_u64().unwrap(),
            "{c}"
        );
        assert!(d["compressed_messages"].as_u64().unwrap() >= 2, "{c}");
        assert!(d["child_session_id"].is_null(), "{c}");
    }
    assert_eq!(
        aux.request_count(),
        compressions.len(),
        "one summary call each"
    );
    // The second summary folds in the first.
    let second = &aux.requests()[1];
    assert!(
        second.last_user_text.contains(SUMMARY),
        "the earlier summary is updated"
    );

    // Every request fits the window and is well formed.
    let requests = main.requests();
    for (n, r) in requests.iter().enumerate() {
        assert!(
            body_tokens(r) < WINDOW as usize,
            "request {n} has ~{} tokens",
            body_tokens(r)
        );
        assert_well_formed(&messages(r));
    }

    // The whole history is readable: every row, compressed or not.
    let history = api.messages(&s).await;
    let users: Vec<&Value> = history.iter().filter(|m| m["role"] == "user").collect();
    assert_eq!(users.len(), turns);
    for (i, u) in users.iter().enumerate() {
        assert_eq!(u["content"].as_str().unwrap(), note(i));
    }
    let tool_rows = history.iter().filter(|m| m["role"] == "tool").count();
    assert_eq!(tool_rows, tool_turns);
    let summaries: Vec<&Value> = history
        .iter()
        .filter(|m| m["summary_epoch"].is_number())
        .collect();
    assert_eq!(summaries.len(), compressions.len());
    let compressed = history
        .iter()
        .filter(|m| m["compressed_epoch"].is_number())
        .count();
    assert!(
        compressed > 100,
        "most of the history left the wire copy: {compressed}"
    );

    // The last request: the first 3 rows are intact, then the newest summary (on its own, or
    // joined to the user message it follows), and the last 20 rows before the answer are
    // exactly the transcript's.
    let last = messages(requests.last().unwrap());
    let rows: Vec<&Value> = history
        .iter()
        .filter(|m| !m["summary_epoch"].is_number())
        .collect();
    for k in 0..3 {
        assert!(
            wire_text(&last[1 + k]).starts_with(&wire_text(rows[k])),
            "head row {k}: {}",
            last[1 + k]
        );
    }
    assert!(
        last[3..5].iter().any(|m| wire_text(m).contains(SUMMARY)),
        "the summary follows the head: {:?}",
        &last[..6]
    );
    let before_answer = &rows[rows.len() - 21..rows.len() - 1];
    let tail = &last[last.len() - 20..];
    for (w, r) in tail.iter().zip(before_answer) {
        assert_eq!(w["role"], r["role"]);
        assert_eq!(wire_text(w), wire_text(r));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_long_session_compresses_in_place_sqlite() {
    long_session(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_long_session_compresses_in_place_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    long_session(Some(db.url())).await;
}

fn with_database(opts: TurnkeyOptions, database: Option<&str>) -> TurnkeyOptions {
    match database {
        Some(url) => opts.database(url),
        None => opts,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_provider_overflow_is_compressed_and_resent_once_sqlite() {
    provider_overflow(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_provider_overflow_is_compressed_and_resent_once_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    provider_overflow(Some(db.url())).await;
}

async fn provider_overflow(database: Option<&str>) {
    let main = ScriptedProvider::start();
    let aux = ScriptedProvider::start();
    aux.on_user_text("[turnkey:compress]", Reply::text(SUMMARY));
    let tk = Turnkey::start(with_database(options(&main, &aux, ""), database)).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    fill_small(&api, &s, 30).await;
    let before = main.request_count();

    // The provider says the request is too long: it is compressed and sent again.
    main.push(Reply::Overflow);
    let a = api.submit_accepted(&s, "one more note").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(
        adm["outcome"]["result"],
        "completed",
        "{adm}\n{}",
        tk.log_tail(30)
    );
    let reqs = main.requests();
    assert_eq!(
        reqs.len(),
        before + 2,
        "sent, rejected, compressed, sent again"
    );
    let (rejected, resent) = (&reqs[before], &reqs[before + 1]);
    assert!(messages(resent).len() < messages(rejected).len());
    assert!(messages(resent)
        .iter()
        .any(|m| wire_text(m).contains(SUMMARY)));
    assert_well_formed(&messages(resent));
    assert_eq!(aux.request_count(), 1);

    // Rejected again after compressing: proven, it fails closed without a third send.
    main.push(Reply::Overflow);
    main.push(Reply::Overflow);
    let before = main.request_count();
    let a = api.submit_accepted(&s, "and another").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "failed", "{adm}");
    assert_eq!(
        adm["outcome"]["failure_reason"], "context_overflow",
        "{adm}"
    );
    assert_eq!(main.request_count(), before + 2);
    // Nothing is lost: every user message is in the history.
    let history = api.messages(&s).await;
    let users = history.iter().filter(|m| m["role"] == "user").count();
    assert_eq!(users, 32);
}

/// Short turns: a session with rows to compress but far from the threshold.
async fn fill_small(api: &Api, s: &str, turns: usize) {
    for i in 0..turns {
        let a = api.submit_accepted(s, &format!("short note {i}")).await;
        let adm = api.wait_terminal(&a, BOUND).await;
        assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    }
}

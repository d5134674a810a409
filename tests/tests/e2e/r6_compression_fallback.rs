//! Compression never strands a session (SPEC R6.3, R6.5; issue 21): whatever the summarizer
//! does — echo the whole conversation back (ignoring `max_tokens`), answer 500, answer slower
//! than `compression.timeout_s`, answer nothing — the middle is still replaced (by the model's
//! summary cut to its budget, or by the summary made without a model), `compression.completed`
//! is committed, every turn completes with its answer, the whole history stays readable, and
//! after a failure the summarizer is not asked again during its cooldown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::time::Duration;
use turnkey_tests::wire::assert_well_formed;
use turnkey_tests::{pg, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;
const WINDOW: u32 = 16_000;
/// The summary budget for a 16K window at the default target ratio (800 tokens), in bytes.
const BUDGET_BYTES: usize = 800 * 4;
/// How a summary made without a model begins.
const FALLBACK_HEAD: &str = "[Automatic summary of ";

/// The primary (16K window) and an auxiliary provider that writes summaries; a short summary
/// timeout, a long cooldown and a small protected tail, so turns of ~1,000 tokens compress
/// every few turns.
fn options(
    main: &ScriptedProvider,
    aux: &ScriptedProvider,
    database: Option<&str>,
) -> TurnkeyOptions {
    let opts = TurnkeyOptions::new(main).context_window(WINDOW).extra_toml(&format!(
        "[[providers]]\nname = \"aux\"\nkind = \"openai\"\nbase_url = \"{}\"\napi_key = \"sk-aux\"\n\
         model = \"aux-model\"\ncontext_window = 32000\nauxiliary = true\nmax_retries = 0\n\n\
         [compression]\ntimeout_s = 1\ncooldown_s = 600\nprotect_last_n = 4\n",
        aux.base_url
    ));
    match database {
        Some(url) => opts.database(url),
        None => opts,
    }
}

/// A user text of about 470 tokens, unique per turn (the scripted model echoes it back).
fn note(i: usize) -> String {
    format!(
        "note {i:03}: {}",
        "the tomatoes need water and the roses need pruning. ".repeat(35)
    )
}

/// What the summarizer does in one case, and the `fallback` code the first compression has.
struct Case {
    summarizer: Option<Reply>,
    first_fallback: Option<&'static str>,
}

/// Runs turns until two compressions happened, then one more; checks every promise.
async fn run(case: Case, database: Option<&str>) {
    let main = ScriptedProvider::start();
    let aux = ScriptedProvider::start();
    // Without a rule the scripted model echoes the request: as long as the conversation.
    if let Some(reply) = case.summarizer.clone() {
        aux.on_user_text("[turnkey:compress]", reply);
    }
    let tk = Turnkey::start(options(&main, &aux, database)).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let compressions = |events: &[Value]| -> Vec<Value> {
        events
            .iter()
            .filter(|e| e["kind"] == "compression.completed")
            .map(|e| e["data"].clone())
            .collect()
    };
    let mut turns = 0;
    let mut after_second = None;
    while after_second.is_none_or(|t| turns <= t) {
        assert!(turns < 60, "two compressions within 60 turns");
        let a = api.submit_accepted(&s, &note(turns)).await;
        let adm = api.wait_terminal(&a, BOUND).await;
        assert_eq!(
            adm["outcome"]["result"],
            "completed",
            "turn {turns} completes whatever the summarizer did: {adm}\n{}",
            tk.log_tail(30)
        );
        assert_eq!(
            adm["outcome"]["final_response"],
            format!("ok: {}", note(turns)),
            "{adm}"
        );
        if after_second.is_none() && compressions(&api.all_events(&s, 0).await).len() >= 2 {
            after_second = Some(turns);
        }
        turns += 1;
    }

    let done = compressions(&api.all_events(&s, 0).await);
    assert_eq!(done.len(), 2, "{done:?}");
    for d in &done {
        assert!(
            d["after_tokens"].as_u64() < d["before_tokens"].as_u64(),
            "{d}"
        );
        assert!(d["compressed_messages"].as_u64().unwrap() >= 2, "{d}");
    }
    assert_eq!(
        done[0]["fallback"].as_str(),
        case.first_fallback,
        "{done:?}"
    );
    let failed = case.first_fallback.is_some();
    if failed {
        // The summarizer cools down: the second compression did not ask it.
        assert_eq!(done[1]["fallback"], "summarizer_cooling_down", "{done:?}");
        assert_eq!(aux.request_count(), 1, "asked once, then cooling down");
    } else {
        assert!(done[1]["fallback"].is_null(), "{done:?}");
        assert_eq!(aux.request_count(), 2, "one summary call each");
    }

    // The whole history is readable: every row, compressed or not, and both summaries.
    let history = api.messages(&s).await;
    let users: Vec<&Value> = history.iter().filter(|m| m["role"] == "user").collect();
    assert_eq!(users.len(), turns);
    for (i, u) in users.iter().enumerate() {
        assert_eq!(u["content"].as_str().unwrap(), note(i));
    }
    let answers = history.iter().filter(|m| m["role"] == "assistant").count();
    assert_eq!(answers, turns);
    let summaries: Vec<&Value> = history
        .iter()
        .filter(|m| m["summary_epoch"].is_number())
        .collect();
    assert_eq!(summaries.len(), 2);
    assert!(history.iter().any(|m| m["compressed_epoch"].is_number()));
    for (row, d) in summaries.iter().zip(&done) {
        let text = row["content"].as_str().unwrap();
        assert_eq!(row["display"]["fallback"], d["fallback"], "{row}");
        if d["fallback"].is_null() {
            // The echo, cut to its budget: the prefix line plus at most the budget.
            assert!(text.contains("[turnkey:compress]"), "the echo: {text}");
            let body = text.split_once('\n').unwrap().1;
            assert!(body.len() <= BUDGET_BYTES, "{} bytes", body.len());
        } else {
            assert!(text.starts_with(FALLBACK_HEAD), "{text}");
            assert!(text.len() <= BUDGET_BYTES, "{} bytes", text.len());
            assert!(text.contains("made without a model because"), "{text}");
            assert!(text.contains("The user's requests:\n- note "), "{text}");
        }
    }

    // The model saw the summary, and every request fit the window and was well formed.
    let requests = main.requests();
    let shown = if failed {
        FALLBACK_HEAD
    } else {
        "[turnkey:compress]"
    };
    let last = requests.last().unwrap().body["messages"]
        .as_array()
        .cloned()
        .unwrap();
    assert!(
        last.iter()
            .any(|m| m["content"].as_str().unwrap_or_default().contains(shown)),
        "the last request carries the summary"
    );
    for r in &requests {
        assert!(r.body.to_string().len() / 4 < WINDOW as usize);
        assert_well_formed(r.body["messages"].as_array().unwrap());
    }
    aux.release_hangs();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_3_a_summary_longer_than_its_budget_is_cut_not_refused_sqlite() {
    run(
        Case {
            summarizer: None,
            first_fallback: None,
        },
        None,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_5_a_failing_summarizer_compresses_with_the_fallback_sqlite() {
    run(
        Case {
            summarizer: Some(Reply::error(500, "server_error")),
            first_fallback: Some("summary_failed"),
        },
        None,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_5_a_summarizer_past_the_timeout_compresses_with_the_fallback_sqlite() {
    run(timeout_case(), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_5_a_summarizer_past_the_timeout_compresses_with_the_fallback_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    run(timeout_case(), Some(db.url())).await;
}

/// Answers after 3 s, past `timeout_s = 1`.
fn timeout_case() -> Case {
    Case {
        summarizer: Some(Reply::chunks(&["a late summary"], Duration::from_secs(3))),
        first_fallback: Some("summary_timeout"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_5_an_empty_summary_compresses_with_the_fallback_sqlite() {
    run(
        Case {
            summarizer: Some(Reply::text("")),
            first_fallback: Some("summary_empty"),
        },
        None,
    )
    .await;
}

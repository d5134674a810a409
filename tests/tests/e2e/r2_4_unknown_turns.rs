//! A turn killed mid-stream on every attempt (SPEC R2.4, R10.5, R12, R13.9): it resumes by
//! itself after each of the first `[agent] max_resumes` kills; after one more, its admission is
//! `unknown`, its tail is closed with the text already streamed kept as a partial answer, the
//! inputs queued behind it run once and in order without being merged with it, the session
//! reads idle, and `POST /v1/admissions/{id}/retry` runs it again once on request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::time::Duration;
use turnkey_tests::harness::DEFAULT_MAX_RESUMES;
use turnkey_tests::wire::{assert_closed_wire, wire_messages};
use turnkey_tests::{pg, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;

async fn killed_mid_stream_then_queued_inputs_run_unmerged(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let killed = "tell me a long story";
    provider.on_user_text(
        killed,
        Reply::chunks(
            &["Once upon ", "a time ", "there ", "was"],
            Duration::from_millis(700),
        ),
    );
    let mut opts = TurnkeyOptions::new(&provider);
    if let Some(url) = database {
        opts = opts.database(url);
    }
    let mut tk = Turnkey::start(opts).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let head = api.submit_accepted(&session, killed).await;
    let first_delta = api.first_delta(&session, 0, BOUND).await;
    let queued = ["first after", "second after", "third after"];
    for q in queued {
        api.submit_accepted(&session, q).await;
    }
    // Cut, the turn resumes by itself (SPEC R13.9) and streams again, up to `max_resumes`
    // times; cut once more, its outcome is unknown.
    tk.kill();
    let mut cut_again = String::new();
    for resume in 1..=DEFAULT_MAX_RESUMES {
        tk.restart().await;
        // (The first delta after this `turn.resumed`: the resumed attempt streams.)
        cut_again = tk.api().first_delta(&session, resume, BOUND).await;
        tk.kill();
    }
    let before_restart = provider.request_count();

    tk.restart().await;
    let api = tk.api();
    let unknown = api
        .wait_admission(&head, |s| s != "started", BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(unknown["status"], "unknown", "{unknown}");
    assert_eq!(unknown["outcome"]["reason"], "owner_died", "{unknown}");
    assert_eq!(
        unknown["outcome"]["attempts"],
        DEFAULT_MAX_RESUMES + 1,
        "{unknown}"
    );
    assert!(
        unknown["outcome"]["failure_message"]
            .as_str()
            .is_some_and(|m| m.contains("stopped")),
        "{unknown}"
    );
    let events = api.all_events(&session, 0).await;
    let turn_unknown = events
        .iter()
        .find(|e| e["kind"] == "turn.unknown")
        .expect("turn.unknown event");
    assert!(
        turn_unknown["data"]["failure_message"].is_string(),
        "{turn_unknown}"
    );

    // The queued inputs run once each, in order, and each request is closed.
    provider
        .wait_for_requests(before_restart + queued.len(), BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let after: Vec<_> = provider.requests()[before_restart..].to_vec();
    let texts: Vec<&str> = after.iter().map(|r| r.last_user_text.as_str()).collect();
    assert_eq!(
        texts, queued,
        "once each, in order, the killed one not re-run"
    );
    for r in &after {
        assert_closed_wire(&r.body, killed);
    }
    let first = wire_messages(&after[0].body);
    assert_eq!(first.len(), 4, "{first:?}");
    assert_eq!(first[1], ("user".to_string(), killed.to_string()));
    assert_eq!(first[2].0, "assistant");
    assert!(
        first[2].1.starts_with(&cut_again) && first[2].1.contains("[cut off:"),
        "the model sees the partial answer marked cut off: {:?}",
        first[2].1
    );
    assert_eq!(
        first[2].1.matches(first_delta.as_str()).count(),
        1,
        "only the last attempt's text, not the superseded one's too: {:?}",
        first[2].1
    );
    assert!(
        first[2].1.contains("outcome is unknown"),
        "{:?}",
        first[2].1
    );

    // The transcript keeps what the user saw, marked as a partial answer of unknown outcome.
    let messages = api.messages(&session).await;
    let closing = &messages[1];
    assert_eq!(closing["role"], "assistant", "{messages:?}");
    assert!(
        closing["content"]
            .as_str()
            .unwrap_or_default()
            .starts_with(&cut_again),
        "{closing}"
    );
    assert_eq!(closing["display"]["boundary"], true, "{closing}");
    assert_eq!(closing["display"]["closed_as"], "unknown", "{closing}");
    assert_eq!(closing["display"]["partial"], true, "{closing}");

    // A retry on request: a new admission linked to the unknown one, run once.
    let retry = api
        .post(&format!("/v1/admissions/{head}/retry"), &Value::Null)
        .await;
    assert_eq!(retry.status, 202, "{}", retry.text);
    assert_eq!(retry.body["retry_of"], head.as_str());
    let retried = retry.str_field("admission_id");
    let done = api.wait_terminal(&retried, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert_eq!(done["retry_of"], head.as_str());
    let again = api
        .post(&format!("/v1/admissions/{head}/retry"), &Value::Null)
        .await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body["duplicate"], true);
    assert_eq!(again.str_field("admission_id"), retried);
    let runs = provider
        .requests()
        .iter()
        .filter(|r| r.last_user_text == killed)
        .count();
    assert_eq!(
        runs,
        DEFAULT_MAX_RESUMES + 2,
        "the killed turn's call and its resumes, then the one retry"
    );
    let old = api.admission(&head).await;
    assert_eq!(old.body["status"], "unknown", "unknown stays unknown");
    assert_eq!(old.body["retried_by"], retried.as_str());
    let terminal = api
        .post(&format!("/v1/admissions/{retried}/retry"), &Value::Null)
        .await;
    assert_eq!(terminal.status, 409, "{}", terminal.text);
    assert_eq!(terminal.error_code(), Some("not_unknown"));
    let session_view = api.session(&session).await;
    assert_eq!(session_view.body["state"], "idle", "{}", session_view.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_4_killed_mid_stream_then_queued_inputs_run_unmerged_sqlite() {
    killed_mid_stream_then_queued_inputs_run_unmerged(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_4_killed_mid_stream_then_queued_inputs_run_unmerged_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    killed_mid_stream_then_queued_inputs_run_unmerged(Some(db.url())).await;
}

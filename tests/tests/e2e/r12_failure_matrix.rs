//! SPEC R12 rows that need a crash: the process dies (failpoint or SIGKILL) at a named point,
//! restarts on the same store, and the admission ends exactly as the failure matrix says.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::time::Duration;
use turnkey_tests::wire::assert_closed_wire;
use turnkey_tests::{Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::harness::DEFAULT_MAX_RESUMES;
use turnkey_tests::wait::BOUND;

const LATER: &str = "a later turn";

fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Events that mention `admission_id`, at the top level or in `data`.
fn events_of(events: &[Value], admission_id: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| {
            e["admission_id"].as_str() == Some(admission_id)
                || e["data"]["admission_id"].as_str() == Some(admission_id)
        })
        .cloned()
        .collect()
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// Submits after a restart with the same request id and returns the duplicate receipt.
async fn resubmit(api: &Api, session: &str, text: &str, request_id: &str) -> Value {
    let again = api.submit(session, text, Some(request_id)).await;
    assert_eq!(
        again.status, 200,
        "the admission survived the crash: {}",
        again.text
    );
    assert_eq!(again.body["duplicate"], Value::Bool(true), "{}", again.text);
    again.body
}

async fn die_at_failpoint(tk: &mut Turnkey, point: &str) {
    let status = tk.wait_exit(Duration::from_secs(10)).await;
    assert!(status.is_some(), "turnkey did not die at failpoint {point}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_admitted_not_claimed_restart_drains_it() {
    let provider = ScriptedProvider::start();
    let opts = TurnkeyOptions::new(&provider).env("FAILPOINTS", "admission.after_commit=return");
    let mut tk = Turnkey::start(opts).await;
    let session = tk.api().create_session_id().await;
    let request_id = uuid::Uuid::new_v4().to_string();
    let text = "durable before anything runs";

    let first = tk.api().try_submit(&session, text, Some(&request_id)).await;
    assert!(
        first.is_err(),
        "the process should die before answering: {first:?}"
    );
    die_at_failpoint(&mut tk, "admission.after_commit").await;
    assert_eq!(provider.request_count(), 0);

    tk.restart_with_env(&[]).await;
    // The restart drains the queue by itself, before anyone asks about the admission.
    provider
        .wait_for_requests(1, BOUND)
        .await
        .unwrap_or_else(|e| panic!("restart did not drain the queued admission: {e}"));
    let api = tk.api();
    let receipt = resubmit(&api, &session, text, &request_id).await;
    let admission_id = receipt["admission_id"].as_str().unwrap().to_string();
    let admission = api.wait_terminal(&admission_id, BOUND).await;
    assert_eq!(admission["outcome"]["result"], "completed", "{admission}");
    assert_closed_wire(&provider.requests()[0].body, "no killed turn here");
    assert_eq!(
        api.asked_after_a_later_turn(&provider, &session, LATER)
            .await,
        [text, LATER],
        "ran exactly once"
    );
}

/// Dies at `turn.after_claim` with a submission in flight, then right after each of its first
/// `resume_cuts` resumes (at `turn.after_resume`); answers the admission id after a clean
/// restart, found again by its request id.
async fn claimed_then_died(
    provider: &ScriptedProvider,
    text: &str,
    resume_cuts: usize,
    extra_toml: &str,
) -> (Turnkey, String, String) {
    let opts = TurnkeyOptions::new(provider)
        .env("FAILPOINTS", "turn.after_claim=return")
        .extra_toml(extra_toml);
    let mut tk = Turnkey::start(opts).await;
    let session = tk.api().create_session_id().await;
    let request_id = uuid::Uuid::new_v4().to_string();

    // The receipt may or may not make it out before the process dies.
    let first = tk.api().try_submit(&session, text, Some(&request_id)).await;
    let first_id = match &first {
        Ok(r) if r.status == 202 => Some(r.str_field("admission_id")),
        Ok(r) => panic!(
            "unexpected answer to the first submission: {} {}",
            r.status, r.text
        ),
        Err(_) => None,
    };
    die_at_failpoint(&mut tk, "turn.after_claim").await;

    // Cut again right after each resume: the process may die before any request reaches it,
    // so the admission is looked up after a clean start.
    let again = [(
        "FAILPOINTS".to_string(),
        "turn.after_resume=return".to_string(),
    )];
    for _ in 0..resume_cuts {
        tk.restart_to_die_at(&again, "turn.after_resume", Duration::from_secs(10))
            .await;
    }
    tk.restart_with_env(&[]).await;
    let api = tk.api();
    let receipt = resubmit(&api, &session, text, &request_id).await;
    let admission_id = receipt["admission_id"].as_str().unwrap().to_string();
    if let Some(id) = first_id {
        assert_eq!(
            id, admission_id,
            "the duplicate names the original admission"
        );
    }
    (tk, session, admission_id)
}

/// The claimed turn of [`claimed_then_died`], resumed after every cut: it completes on
/// attempt `cuts + 1`, each resume announced once as a crash, and runs once.
async fn resumes_after_each_crash(resume_cuts: usize) {
    let provider = ScriptedProvider::start();
    let text = "claimed then the owner died";
    let (tk, session, admission_id) = claimed_then_died(&provider, text, resume_cuts, "").await;
    let api = tk.api();
    let done = api.wait_terminal(&admission_id, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert_eq!(done["outcome"]["attempts"], resume_cuts + 2, "{done}");
    assert_eq!(done["crash_resumes"], resume_cuts + 1, "{done}");
    let mine = events_of(&api.all_events(&session, 0).await, &admission_id);
    let resumed: Vec<_> = mine
        .iter()
        .filter(|e| e["kind"] == "turn.resumed")
        .collect();
    assert_eq!(resumed.len(), resume_cuts + 1, "{:?}", kinds(&mine));
    for (i, r) in resumed.iter().enumerate() {
        assert_eq!(r["data"]["reason"], "crash", "{r}");
        assert_eq!(r["data"]["attempt"], i + 2, "{r}");
    }
    assert!(!kinds(&mine).iter().any(|k| k == "turn.unknown"));
    assert_eq!(
        api.asked_after_a_later_turn(&provider, &session, LATER)
            .await,
        [text, LATER],
        "run once"
    );
}

/// R13.9: a claimed turn that had not begun started no side effect: it resumes by itself and
/// runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_claimed_turn_not_begun_resumes_by_itself() {
    resumes_after_each_crash(0).await;
}

/// R13.9 (`[agent] max_resumes`, default 2): cut again right after its resume, it resumes
/// once more by itself: a rolling restart does not leave it to a person.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_9_a_turn_cut_again_after_its_resume_resumes_again_by_itself() {
    resumes_after_each_crash(DEFAULT_MAX_RESUMES - 1).await;
}

/// R13.9: with `[agent] max_resumes = 0` a turn cut by a crash is never resumed by itself: it
/// is `unknown` at once, and the message says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_9_max_resumes_0_leaves_a_crash_cut_turn_unknown() {
    let provider = ScriptedProvider::start();
    let text = "claimed then the owner died";
    let (tk, _session, admission_id) =
        claimed_then_died(&provider, text, 0, "[agent]\nmax_resumes = 0\n").await;
    let api = tk.api();
    let admission = api
        .wait_admission(&admission_id, |s| s == "unknown" || s == "terminal", BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(admission["status"], "unknown", "{admission}");
    assert_eq!(admission["outcome"]["attempts"], 1, "{admission}");
    assert!(
        admission["outcome"]["failure_message"]
            .as_str()
            .is_some_and(|m| m.contains("[agent] max_resumes = 0")),
        "{admission}"
    );
    assert_eq!(provider.request_count(), 0, "never run");
}

/// R13.9: cut right after each of its `max_resumes` resumes (SIGKILL at `turn.after_resume`),
/// the turn is not resumed again: `unknown`, never re-run, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_claimed_turn_cut_after_its_last_resume_becomes_unknown_not_rerun() {
    let provider = ScriptedProvider::start();
    let text = "claimed then the owner died";
    let (tk, session, admission_id) =
        claimed_then_died(&provider, text, DEFAULT_MAX_RESUMES, "").await;
    let api = tk.api();
    let admission = api
        .wait_admission(&admission_id, |s| s == "unknown" || s == "terminal", BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        admission["status"], "unknown",
        "cut after its last resume -> unknown: {admission}"
    );
    assert_eq!(
        admission["outcome"]["attempts"],
        DEFAULT_MAX_RESUMES + 1,
        "{admission}"
    );
    assert!(
        admission["outcome"]["failure_message"]
            .as_str()
            .is_some_and(|m| m.contains("resumed 2 times after crashes ([agent] max_resumes = 2)")),
        "{admission}"
    );

    let events = api.all_events(&session, 0).await;
    let mine = events_of(&events, &admission_id);
    assert!(
        kinds(&mine).iter().any(|k| k == "turn.unknown"),
        "a turn.unknown event exists for {admission_id}; its events: {:?}",
        kinds(&mine)
    );

    // (The later turn below is the proof that it is not re-run: it would come first.)
    assert_eq!(
        provider.request_count(),
        0,
        "an unknown admission is never re-run"
    );
    let still = api.admission(&admission_id).await;
    assert_eq!(still.body["status"], "unknown", "{}", still.text);

    // The session is not stuck: a new submission runs.
    let next = api
        .submit_accepted(&session, "a new message after recovery")
        .await;
    let done = api.wait_terminal(&next, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert_eq!(provider.request_count(), 1);
    assert_eq!(
        provider.requests()[0].last_user_text,
        "a new message after recovery"
    );
    assert_closed_wire(&provider.requests()[0].body, text);
    let still = api.admission(&admission_id).await;
    assert_eq!(still.body["status"], "unknown", "{}", still.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_sigkill_mid_turn_past_max_resumes_is_unknown_without_invented_answer() {
    let provider = ScriptedProvider::start();
    for _ in 0..=DEFAULT_MAX_RESUMES {
        provider.push(Reply::Hang);
    }
    let mut tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let text = "the model never answers this";
    let admission_id = api.submit_accepted(&session, text).await;
    provider.wait_for_requests(1, BOUND).await.unwrap();
    let running = api
        .wait_admission(&admission_id, |s| s == "started", BOUND)
        .await
        .unwrap_or_else(|e| panic!("a turn talking to the model is `started`: {e}"));
    assert_eq!(running["status"], "started");

    // Cut, it resumes by itself (SPEC R13.9) and asks the model again, `max_resumes` times;
    // cut once more, its outcome is unknown.
    tk.kill();
    for resume in 1..=DEFAULT_MAX_RESUMES {
        tk.restart().await;
        provider.wait_for_requests(1 + resume, BOUND).await.unwrap();
        tk.kill();
    }
    tk.restart().await;
    let api = tk.api();
    let admission = api
        .wait_admission(&admission_id, |s| s != "started", BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        admission["status"], "unknown",
        "not queued (no blind re-run), not terminal (no invented outcome): {admission}"
    );
    let events = api.all_events(&session, 0).await;
    assert!(
        kinds(&events_of(&events, &admission_id))
            .iter()
            .any(|k| k == "turn.unknown"),
        "turn.unknown event; all kinds: {:?}",
        kinds(&events)
    );

    provider.release_hangs();
    // (The later turn below is the proof that it is not re-run: it would come first.)
    assert_eq!(
        provider.request_count(),
        1 + DEFAULT_MAX_RESUMES,
        "the killed turn was not re-run after its last resume"
    );
    assert_eq!(api.admission(&admission_id).await.body["status"], "unknown");

    // The lease of the dead owner no longer counts: the session is idle at once.
    let view = api.session(&session).await;
    assert_eq!(view.body["state"], "idle", "{}", view.text);

    let messages = api.messages(&session).await;
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "user" && text_of(m).contains(text)),
        "the user row is kept: {messages:?}"
    );
    // The tail is closed by a marked boundary, not by an invented answer.
    let assistants: Vec<_> = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(assistants.len(), 1, "{messages:?}");
    let closing = assistants[0];
    assert_eq!(closing["display"]["boundary"], true, "{closing}");
    assert_eq!(closing["display"]["closed_as"], "unknown", "{closing}");
    assert!(
        text_of(closing).starts_with("[no answer:"),
        "nothing streamed, so nothing but the marker: {closing}"
    );

    let next = api.submit_accepted(&session, "and now a normal turn").await;
    let done = api.wait_terminal(&next, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    let later = DEFAULT_MAX_RESUMES + 1;
    assert_eq!(provider.request_count(), later + 1);
    assert_eq!(
        provider.requests()[later].last_user_text,
        "and now a normal turn",
        "the killed turn was not re-run before the next one"
    );
    assert_closed_wire(&provider.requests()[later].body, text);
    let messages = api.messages(&session).await;
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "assistant" && text_of(m) == "ok: and now a normal turn"),
        "the later turn answered: {messages:?}"
    );
}

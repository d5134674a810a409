//! Busy policy (SPEC R13.4) against the real binary: `queue` (the default) runs each input as
//! its own turn in order and never drops or overwrites one; `interrupt` stops the running turn
//! for the newer input; `steer` injects the input into the running turn at its next model
//! boundary as a user row the transcript keeps; `agent.coalesce_ms` makes a burst one turn.
//! Each asserts the event sequence and the transcript. `PATCH /v1/sessions/{id}` sets the
//! per-session policy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::{eventually, BOUND};

/// The kinds this file follows, in the order they were recorded, with their admission ids.
const FOLLOWED: [&str; 6] = [
    "admission.queued",
    "turn.started",
    "tool.started",
    "tool.completed",
    "admission.carried",
    "turn.finished",
];

async fn start(provider: &ScriptedProvider, toml: &str, database: Option<&str>) -> Turnkey {
    let opts =
        TurnkeyOptions::new(provider).extra_toml(&format!("{toml}\n[tools]\napproval = \"off\"\n"));
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    Turnkey::start(opts).await
}

/// (kind, admission id or "") of the followed events.
async fn sequence(api: &Api, session: &str) -> Vec<(String, String)> {
    api.all_events(session, 0)
        .await
        .iter()
        .filter(|e| FOLLOWED.contains(&e["kind"].as_str().unwrap_or_default()))
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["admission_id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn seq(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, a)| ((*k).to_owned(), (*a).to_owned()))
        .collect()
}

async fn wait_event(api: &Api, session: &str, kind: &str) {
    eventually(BOUND, &format!("{kind} event"), || async {
        let events = api.all_events(session, 0).await;
        events.iter().any(|e| e["kind"] == kind).then_some(())
    })
    .await;
}

/// The turn id `turn.started` announced for `admission`.
async fn turn_of(api: &Api, session: &str, admission: &str) -> String {
    api.all_events(session, 0)
        .await
        .iter()
        .find(|e| e["kind"] == "turn.started" && e["admission_id"] == admission)
        .map(|e| e["data"]["turn_id"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no turn.started for {admission}"))
}

/// (role, content, turn_id) of every transcript row.
async fn transcript(api: &Api, session: &str) -> Vec<(String, String, String)> {
    api.messages(session)
        .await
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
                m["turn_id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn user_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_4_patch_sets_title_and_busy_policy() {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "", None).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    assert_eq!(api.session(&s).await.body["busy_policy"], "queue");

    let r = api
        .patch_session(&s, &json!({"title": "renamed", "busy_policy": "steer"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["title"], "renamed");
    assert_eq!(r.body["busy_policy"], "steer");
    let got = api.session(&s).await;
    assert_eq!(got.body["busy_policy"], "steer", "{}", got.text);
    assert_eq!(got.body["title"], "renamed");

    let bad = api
        .patch_session(&s, &json!({"busy_policy": "sometimes"}))
        .await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert_eq!(
        bad.error_code(),
        Some("invalid_busy_policy"),
        "{}",
        bad.text
    );
    let bad = api.patch_session(&s, &json!({"busy_policy": 3})).await;
    assert_eq!(
        bad.error_code(),
        Some("invalid_busy_policy"),
        "{}",
        bad.text
    );
    // Nothing changed by the refused requests.
    assert_eq!(api.session(&s).await.body["busy_policy"], "steer");

    // Only the title changes; null clears the policy back to the platform's.
    let r = api.patch_session(&s, &json!({"title": "again"})).await;
    assert_eq!(r.body["busy_policy"], "steer", "{}", r.text);
    let r = api.patch_session(&s, &json!({"busy_policy": null})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["busy_policy"], "queue");
    assert_eq!(r.body["title"], "again");

    let missing = api
        .patch_session(
            "00000000-0000-7000-8000-000000000000",
            &json!({"title": "x"}),
        )
        .await;
    assert_eq!(missing.status, 404, "{}", missing.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_4_queue_runs_every_input_as_its_own_turn_in_order() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::chunks(
        &["first ", "answer"],
        Duration::from_millis(400),
    ));
    provider.push(Reply::text("second answer"));
    provider.push(Reply::text("third answer"));
    let tk = start(&provider, "", None).await;
    let api = tk.api();
    let s = api.create_session_id().await;

    let a = api.submit_accepted(&s, "one").await;
    provider.wait_for_requests(1, BOUND).await.unwrap();
    let b = api.submit_accepted(&s, "two").await;
    let c = api.submit_accepted(&s, "three").await;
    for id in [&a, &b, &c] {
        let adm = api.wait_terminal(id, BOUND).await;
        assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    }

    // Nothing dropped or overwritten: three requests, each with its own input last.
    let requests = provider.requests();
    assert_eq!(requests.len(), 3);
    let last: Vec<_> = requests.iter().map(|r| r.last_user_text.clone()).collect();
    assert_eq!(last, ["one", "two", "three"]);

    assert_eq!(
        sequence(&api, &s).await,
        seq(&[
            ("admission.queued", &a),
            ("turn.started", &a),
            ("admission.queued", &b),
            ("admission.queued", &c),
            ("turn.finished", &a),
            ("turn.started", &b),
            ("turn.finished", &b),
            ("turn.started", &c),
            ("turn.finished", &c),
        ])
    );
    let rows = transcript(&api, &s).await;
    let shown: Vec<_> = rows
        .iter()
        .map(|(r, c, _)| (r.as_str(), c.as_str()))
        .collect();
    assert_eq!(
        shown,
        [
            ("user", "one"),
            ("assistant", "first answer"),
            ("user", "two"),
            ("assistant", "second answer"),
            ("user", "three"),
            ("assistant", "third answer"),
        ]
    );
    let (ta, tb, tc) = (
        turn_of(&api, &s, &a).await,
        turn_of(&api, &s, &b).await,
        turn_of(&api, &s, &c).await,
    );
    assert!(ta != tb && tb != tc && ta != tc);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_4_interrupt_stops_the_running_turn_for_the_newer_input() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::chunks(&["slow "; 40], Duration::from_millis(250)));
    provider.push(Reply::text("newer answer"));
    let tk = start(&provider, "[agent]\nbusy_policy = \"interrupt\"\n", None).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    assert_eq!(api.session(&s).await.body["busy_policy"], "interrupt");

    let a = api.submit_accepted(&s, "long one").await;
    provider.wait_for_requests(1, BOUND).await.unwrap();
    let b = api.submit_accepted(&s, "newer").await;
    let adm_a = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm_a["outcome"]["result"], "interrupted", "{adm_a}");
    let adm_b = api.wait_terminal(&b, BOUND).await;
    assert_eq!(adm_b["outcome"]["result"], "completed", "{adm_b}");
    assert_eq!(provider.requests()[1].last_user_text, "newer");

    assert_eq!(
        sequence(&api, &s).await,
        seq(&[
            ("admission.queued", &a),
            ("turn.started", &a),
            ("admission.queued", &b),
            ("turn.finished", &a),
            ("turn.started", &b),
            ("turn.finished", &b),
        ])
    );
    let rows = transcript(&api, &s).await;
    let users: Vec<_> = rows
        .iter()
        .filter(|(r, _, _)| r == "user")
        .map(|(_, c, _)| c.as_str())
        .collect();
    assert_eq!(users, ["long one", "newer"]);
    assert_eq!(rows.last().unwrap().1, "newer answer");
}

/// The steered input joins the running turn after its tool round: the turn's second model
/// call carries it as a user message, the transcript keeps it in that turn, and its admission
/// settles pointing at the carrying turn.
async fn steer(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.push(Reply::tool_call(
        "call_wait",
        "terminal",
        json!({"command": "sleep 1.5; echo waited"}),
    ));
    provider.push(Reply::text("steered answer"));
    let tk = start(&provider, "", database).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let r = api
        .patch_session(&s, &json!({"busy_policy": "steer"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);

    let a = api.submit_accepted(&s, "do the slow thing").await;
    wait_event(&api, &s, "tool.started").await;
    let b = api.submit_accepted(&s, "and also mind this").await;
    let adm_a = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm_a["outcome"]["result"], "completed", "{adm_a}");
    assert_eq!(adm_a["outcome"]["final_response"], "steered answer");
    let adm_b = api.wait_terminal(&b, BOUND).await;
    let turn = turn_of(&api, &s, &a).await;
    assert_eq!(adm_b["outcome"]["result"], "steered", "{adm_b}");
    assert_eq!(adm_b["outcome"]["turn_id"], turn.as_str(), "{adm_b}");
    assert_eq!(adm_b["outcome"]["carried_by"], a.as_str(), "{adm_b}");

    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "one turn, two model calls");
    assert_eq!(user_texts(&requests[0].body), ["do the slow thing"]);
    assert_eq!(
        user_texts(&requests[1].body),
        ["do the slow thing", "and also mind this"]
    );
    let roles: Vec<_> = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        roles.iter().rev().take(3).rev().collect::<Vec<_>>(),
        ["assistant", "tool", "user"],
        "the steered message follows the tool round: {roles:?}"
    );

    assert_eq!(
        sequence(&api, &s).await,
        seq(&[
            ("admission.queued", &a),
            ("turn.started", &a),
            ("tool.started", &a),
            ("admission.queued", &b),
            ("tool.completed", &a),
            ("admission.carried", &b),
            ("turn.finished", &a),
        ])
    );
    let rows = transcript(&api, &s).await;
    let shown: Vec<_> = rows
        .iter()
        .map(|(r, c, t)| (r.as_str(), c.as_str(), t == &turn))
        .collect();
    assert_eq!(shown.len(), 5, "{shown:?}");
    assert_eq!(shown[0], ("user", "do the slow thing", true));
    assert_eq!((shown[1].0, shown[1].2), ("assistant", true));
    assert_eq!((shown[2].0, shown[2].2), ("tool", true));
    assert_eq!(shown[3], ("user", "and also mind this", true));
    assert_eq!(shown[4], ("assistant", "steered answer", true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_4_steer_injects_at_the_next_model_boundary_sqlite() {
    steer(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_4_steer_injects_at_the_next_model_boundary_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    steer(Some(db.url())).await;
}

/// A steered input the running turn never reaches a boundary for (it answers without tools)
/// is not dropped: it runs as its own turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_4_steer_without_a_boundary_queues() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::chunks(
        &["only ", "text"],
        Duration::from_millis(400),
    ));
    provider.push(Reply::text("own turn"));
    let tk = start(&provider, "[agent]\nbusy_policy = \"steer\"\n", None).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "first").await;
    provider.wait_for_requests(1, BOUND).await.unwrap();
    let b = api.submit_accepted(&s, "late").await;
    for id in [&a, &b] {
        let adm = api.wait_terminal(id, BOUND).await;
        assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    }
    assert_eq!(provider.requests()[1].last_user_text, "late");
    assert_ne!(turn_of(&api, &s, &a).await, turn_of(&api, &s, &b).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_4_coalesce_makes_a_burst_one_turn() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("both seen"));
    let tk = start(&provider, "[agent]\ncoalesce_ms = 500\n", None).await;
    let api = tk.api();
    let s = api.create_session_id().await;

    let a = api.submit_accepted(&s, "part one").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let b = api.submit_accepted(&s, "part two").await;
    let adm_a = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm_a["outcome"]["result"], "completed", "{adm_a}");
    assert_eq!(adm_a["outcome"]["final_response"], "both seen");
    let adm_b = api.wait_terminal(&b, BOUND).await;
    let turn = turn_of(&api, &s, &a).await;
    assert_eq!(adm_b["outcome"]["result"], "coalesced", "{adm_b}");
    assert_eq!(adm_b["outcome"]["turn_id"], turn.as_str(), "{adm_b}");
    assert_eq!(adm_b["outcome"]["carried_by"], a.as_str(), "{adm_b}");

    // (The later turn at the end is the proof of "one turn": a second would come before it.)
    let requests = provider.requests();
    assert_eq!(requests.len(), 1, "one turn for the burst");
    assert_eq!(requests[0].last_user_text, "part one\npart two");

    assert_eq!(
        sequence(&api, &s).await,
        seq(&[
            ("admission.queued", &a),
            ("admission.queued", &b),
            ("turn.started", &a),
            ("admission.carried", &b),
            ("turn.finished", &a),
        ])
    );
    let rows = transcript(&api, &s).await;
    let shown: Vec<_> = rows
        .iter()
        .map(|(r, c, t)| (r.as_str(), c.as_str(), t == &turn))
        .collect();
    assert_eq!(
        shown,
        [
            ("user", "part one\npart two", true),
            ("assistant", "both seen", true),
        ]
    );
    // One more turn: the session runs its inputs in order, so a wrong second turn for the
    // burst would have called the model before it.
    let asked = api
        .asked_after_a_later_turn(&provider, &s, "and then?")
        .await;
    assert_eq!(
        asked,
        ["part one\npart two", "and then?"],
        "one turn for the burst"
    );
}

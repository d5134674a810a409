//! SPEC R2.3 end to end: a submission is idempotent by request id — twenty concurrent
//! duplicates make one admission and one model call; the same id with other text is a conflict.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::time::Duration;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_3_duplicate_submit_x20_runs_once() {
    let provider = ScriptedProvider::start();
    // Slow enough that duplicates arrive while the turn is still running.
    provider.push(Reply::chunks(
        &["once", " only"],
        Duration::from_millis(100),
    ));
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let request_id = uuid::Uuid::new_v4().to_string();

    let submits = (0..20).map(|_| {
        let (api, session, request_id) = (api.clone(), session.clone(), request_id.clone());
        tokio::spawn(async move { api.submit(&session, "hello once", Some(&request_id)).await })
    });
    let answers: Vec<_> = futures::future::join_all(submits)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();

    let created: Vec<_> = answers.iter().filter(|r| r.status == 202).collect();
    let duplicates: Vec<_> = answers.iter().filter(|r| r.status == 200).collect();
    let statuses: Vec<u16> = answers.iter().map(|r| r.status).collect();
    assert_eq!(created.len(), 1, "exactly one 202; statuses: {statuses:?}");
    assert_eq!(duplicates.len(), 19, "nineteen 200; statuses: {statuses:?}");
    assert_eq!(
        created[0].body["duplicate"],
        Value::Bool(false),
        "{}",
        created[0].text
    );
    for d in &duplicates {
        assert_eq!(d.body["duplicate"], Value::Bool(true), "{}", d.text);
    }
    let admission_id = created[0].str_field("admission_id");
    for r in &answers {
        assert_eq!(r.str_field("admission_id"), admission_id, "{}", r.text);
        assert_eq!(r.str_field("session_id"), session, "{}", r.text);
        assert_eq!(r.body["seq"], created[0].body["seq"], "{}", r.text);
    }

    let admission = api.wait_terminal(&admission_id, BOUND).await;
    assert_eq!(admission["outcome"]["result"], "completed", "{admission}");
    assert_eq!(
        admission["admission_id"],
        admission_id.as_str(),
        "{admission}"
    );
    // (The later turn at the end is the proof of "once": a second run would come before it.)
    assert_eq!(provider.request_count(), 1, "the model was called once");

    // The same request id again after the turn ended is still the same receipt.
    let again = api.submit(&session, "hello once", Some(&request_id)).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body["duplicate"], Value::Bool(true), "{}", again.text);
    assert_eq!(again.str_field("admission_id"), admission_id);

    // Same key, other body: 409 idempotency_conflict, and nothing runs.
    let conflict = api
        .submit(&session, "something else", Some(&request_id))
        .await;
    assert_eq!(conflict.status, 409, "{}", conflict.text);
    assert_eq!(
        conflict.error_code(),
        Some("idempotency_conflict"),
        "{}",
        conflict.text
    );
    assert_eq!(provider.request_count(), 1);

    // One more turn: the session runs its inputs in order, so a second run of the first, or a
    // run of the conflicting one, would have called the model before it.
    let asked = api
        .asked_after_a_later_turn(&provider, &session, "a later turn")
        .await;
    assert_eq!(
        asked,
        ["hello once", "a later turn"],
        "the model was called once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_3_idempotency_key_header_is_the_request_id() {
    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let key = uuid::Uuid::new_v4().to_string();
    let path = format!("/v1/sessions/{session}/submissions");
    let body = serde_json::json!({"text": "by header"});
    let first = api
        .try_send(
            reqwest::Method::POST,
            &path,
            Some(&body),
            &[("Idempotency-Key", &key)],
        )
        .await
        .unwrap();
    assert_eq!(first.status, 202, "{}", first.text);
    let second = api.submit(&session, "by header", Some(&key)).await;
    assert_eq!(
        second.status, 200,
        "body request_id equals the earlier header: {}",
        second.text
    );
    assert_eq!(second.body["duplicate"], Value::Bool(true));
    assert_eq!(
        second.str_field("admission_id"),
        first.str_field("admission_id")
    );
    let admission = api
        .wait_terminal(&first.str_field("admission_id"), BOUND)
        .await;
    assert_eq!(admission["outcome"]["result"], "completed", "{admission}");
    assert_eq!(provider.request_count(), 1);
}

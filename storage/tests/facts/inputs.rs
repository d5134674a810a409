//! What an admission tells everyone else, on both backends (SQLite's transaction and
//! PostgreSQL's one statement): `admission.queued` carries the input's words, its file
//! references and its source, stored and returned alike; an untitled session takes the title
//! the admission brings, and a title it has already is never replaced.
#![allow(clippy::expect_used, clippy::unwrap_used)]
use crate::common;

use common::*;
use serde_json::json;
use turnkey_storage::*;

/// The stored `admission.queued` of `admission`.
async fn stored_queued(s: &Store, sid: SessionId, admission: AdmissionId) -> Event {
    s.events_since(sid, Seq(0), 1_000)
        .await
        .expect("events")
        .into_iter()
        .find(|e| e.kind == EventKind::AdmissionQueued && e.admission_id == Some(admission))
        .expect("its admission.queued")
}

on_both!(r11_1_admission_queued_carries_the_input_its_files_and_its_source);
async fn r11_1_admission_queued_carries_the_input_its_files_and_its_source(s: Store) {
    let sid = session(&s).await;
    let file =
        json!({"file_id": "f1", "name": "dot.png", "content_type": "image/png", "bytes": 70});
    let mut new = new_adm(sid, "with-a-file", "look at this");
    new.payload = json!({"text": "look at this", "attachments": [file], "author": "operator"});
    let a = s.admit(new).await.expect("admit");
    let want = json!({
        "admission_id": a.admission.id,
        "seq_in_queue": 1,
        "text": "look at this",
        "attachments": [file],
        "source": "user",
    });
    assert_eq!(a.events[0].data, want, "as admit answers it");
    assert_eq!(
        stored_queued(&s, sid, a.admission.id).await.data,
        want,
        "as it is stored"
    );

    // No file: no `attachments`. An internal input says where it came from.
    let mut report = new_adm(sid, "subagent:task-1", "[report]");
    report.surface = "internal".into();
    let b = s.admit(report).await.expect("report");
    let stored = stored_queued(&s, sid, b.admission.id).await.data;
    assert_eq!(
        stored,
        json!({"admission_id": b.admission.id, "seq_in_queue": 2, "text": "[report]", "source": "subagent"})
    );
    assert_eq!(b.events[0].data, stored);
}

on_both!(r1_1_an_untitled_session_takes_the_title_of_its_first_input);
async fn r1_1_an_untitled_session_takes_the_title_of_its_first_input(s: Store) {
    let sid = session(&s).await;
    let title = |s: &Store| {
        let s = s.clone();
        async move { s.get_session(sid).await.expect("get").expect("row").title }
    };
    let mut first = new_adm(sid, "a", "plan the trip");
    first.title = Some("plan the trip".into());
    s.admit(first).await.expect("first");
    assert_eq!(title(&s).await.as_deref(), Some("plan the trip"));
    // A later input never replaces it.
    let mut second = new_adm(sid, "b", "and the hotel");
    second.title = Some("and the hotel".into());
    s.admit(second).await.expect("second");
    assert_eq!(title(&s).await.as_deref(), Some("plan the trip"));

    // Nor a title a person gave.
    let named = session(&s).await;
    s.update_session(
        named,
        SessionUpdate {
            title: Some(Some("Mine".into())),
            ..Default::default()
        },
    )
    .await
    .expect("rename");
    let mut input = new_adm(named, "a", "anything");
    input.title = Some("anything".into());
    s.admit(input).await.expect("admit");
    let got = s.get_session(named).await.expect("get").expect("row");
    assert_eq!(got.title.as_deref(), Some("Mine"));
}

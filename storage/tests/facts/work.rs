//! Sub-agent tasks and background processes in the store (SPEC R1.5, R13.10), on SQLite and
//! PostgreSQL: a task is born with its child session (whose parent is the caller) and
//! `subagent.started` in one commit; it is settled once, with the text it was first settled
//! with; its report is recorded once, with `subagent.finished`. A process row exists before
//! its pid; its end is recorded once; only one gateway takes over a dead watcher's process;
//! its report is recorded once, with `process.exited`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{self, owner};
use turnkey_storage::*;

fn child_session() -> NewSession {
    NewSession {
        id: SessionId::new(),
        owner: "operator".into(),
        platform: "subagent".into(),
        chat_key: None,
        title: Some("count".into()),
        model: None,
        system_message: None,
        system_prompt: "sys".into(),
        workspace_snapshot: None,
    }
}

async fn kinds(s: &Store, session: SessionId) -> Vec<EventKind> {
    s.events_since(session, Seq(0), 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

on_both!(r1_5_a_task_is_born_with_its_child_settled_once_and_reported_once);
async fn r1_5_a_task_is_born_with_its_child_settled_once_and_reported_once(s: Store) {
    let parent = common::session(&s).await;
    let (task, started) = s
        .create_subagent_task(NewSubagentTask {
            id: TaskId::new(),
            parent_session_id: parent,
            goal: "count the files".into(),
            context: Some("in src".into()),
            depth: 1,
            child: child_session(),
        })
        .await
        .unwrap();
    assert_eq!(started.kind, EventKind::SubagentStarted);
    assert_eq!(started.session_id, parent);
    let child = s.get_session(task.child_session_id).await.unwrap().unwrap();
    assert_eq!(child.parent_session_id, Some(parent));
    assert_eq!(child.platform, "subagent");
    assert_eq!(
        s.subagent_task_of_child(child.id)
            .await
            .unwrap()
            .unwrap()
            .task_id,
        task.task_id
    );
    assert_eq!(s.open_subagent_count(parent).await.unwrap(), 1);
    assert_eq!(s.unreported_subagent_tasks().await.unwrap().len(), 1);

    let settled = s
        .settle_subagent_task(task.task_id, "completed", "first")
        .await
        .unwrap();
    assert_eq!(settled.status, "completed");
    let again = s
        .settle_subagent_task(task.task_id, "unknown", "second")
        .await
        .unwrap();
    assert_eq!(
        (again.status.as_str(), again.result.as_deref()),
        ("completed", Some("first")),
        "settled once"
    );

    let admission = AdmissionId::new();
    let ev = s.record_subagent_report(&again, admission).await.unwrap();
    let ev = ev.expect("recorded");
    assert_eq!(ev.kind, EventKind::SubagentFinished);
    assert_eq!(ev.data["status"], "completed");
    assert!(s
        .record_subagent_report(&again, admission)
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        kinds(&s, parent)
            .await
            .iter()
            .filter(|k| **k == EventKind::SubagentFinished)
            .count(),
        1
    );
    assert_eq!(s.open_subagent_count(parent).await.unwrap(), 0);
    assert!(s.unreported_subagent_tasks().await.unwrap().is_empty());
    assert_eq!(s.subagent_tasks(parent).await.unwrap().len(), 1);
}

on_both!(r13_10_a_process_ends_once_is_taken_over_once_and_reported_once);
async fn r13_10_a_process_ends_once_is_taken_over_once_and_reported_once(s: Store) {
    let session = common::session(&s).await;
    let first = owner();
    let p = s
        .create_background_process(NewBackgroundProcess {
            id: ProcessId::new(),
            session_id: session,
            owner: "operator".into(),
            command: "make".into(),
            dir: "/tmp/p".into(),
            boot_id: "boot".into(),
            watcher: first.clone(),
        })
        .await
        .unwrap();
    assert_eq!((p.status.as_str(), p.pid), ("running", None));
    let ev = s.record_background_pid(&p, 4242, Some(99)).await.unwrap();
    assert_eq!(ev.kind, EventKind::ProcessStarted);
    assert_eq!(s.running_background_count(session).await.unwrap(), 1);

    // Two gateways find its watcher dead: one takes it over.
    let (a, b) = (owner(), owner());
    let took_a = s
        .take_over_background_process(p.process_id, first.instance, &a)
        .await
        .unwrap();
    let took_b = s
        .take_over_background_process(p.process_id, first.instance, &b)
        .await
        .unwrap();
    assert!(took_a && !took_b);

    let end = ProcessEnd {
        status: "exited".into(),
        exit_code: Some(3),
        tail: "out".into(),
    };
    let ended = s.end_background_process(p.process_id, &end).await.unwrap();
    assert_eq!(
        (ended.status.as_str(), ended.exit_code),
        ("exited", Some(3))
    );
    assert_eq!(ended.pid, Some(4242));
    let other = ProcessEnd {
        status: "unknown".into(),
        exit_code: None,
        tail: String::new(),
    };
    let again = s
        .end_background_process(p.process_id, &other)
        .await
        .unwrap();
    assert_eq!(again.exit_code, Some(3), "ended once");
    assert_eq!(s.running_background_count(session).await.unwrap(), 0);

    let admission = AdmissionId::new();
    let ev = s.record_process_report(&again, admission).await.unwrap();
    assert_eq!(ev.expect("recorded").data["exit_code"], 3);
    assert!(s
        .record_process_report(&again, admission)
        .await
        .unwrap()
        .is_none());
    assert!(s
        .unreported_background_processes()
        .await
        .unwrap()
        .is_empty());
    assert_eq!(s.background_processes(session).await.unwrap().len(), 1);
}

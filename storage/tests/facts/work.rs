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
        seed: Vec::new(),
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

on_both!(r1_5_a_queued_goal_is_cancelled_once_and_a_claimed_one_is_not);
async fn r1_5_a_queued_goal_is_cancelled_once_and_a_claimed_one_is_not(s: Store) {
    let child = common::session(&s).await;
    let goal = s
        .admit(common::new_adm(child, "subagent:1", "goal"))
        .await
        .unwrap()
        .admission;
    let events = s
        .cancel_queued_admission(child, goal.id, "parent_interrupted")
        .await
        .unwrap()
        .expect("a queued goal is cancelled");
    let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::AdmissionCancelled, EventKind::Status]);
    assert_eq!(events[0].data["reason"], "parent_interrupted");
    assert_eq!(events[1].data["queue_depth"], 0);
    let settled = s.get_admission(goal.id).await.unwrap().unwrap();
    assert_eq!(settled.status, AdmissionStatus::Terminal);
    let outcome = settled.outcome.unwrap();
    assert_eq!(outcome["result"], "cancelled");
    assert!(outcome["final_response"].is_null());
    assert!(
        s.cancel_queued_admission(child, goal.id, "again")
            .await
            .unwrap()
            .is_none(),
        "cancelled once"
    );

    // A goal a turn claimed first is not cancelled: the turn is interrupted instead.
    let other = common::session(&s).await;
    let adm = s
        .admit(common::new_adm(other, "subagent:2", "goal"))
        .await
        .unwrap()
        .admission;
    let (_fence, _turn, claimed) = common::take_and_claim(&s, other, &owner(), 60_000).await;
    assert_eq!(claimed.unwrap().admission.id, adm.id);
    assert!(s
        .cancel_queued_admission(other, adm.id, "late")
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        s.get_admission(adm.id).await.unwrap().unwrap().status,
        AdmissionStatus::Started
    );
    // Nor one of another session.
    let third = common::session(&s).await;
    let mine = s
        .admit(common::new_adm(third, "subagent:3", "goal"))
        .await
        .unwrap()
        .admission;
    assert!(s
        .cancel_queued_admission(other, mine.id, "wrong session")
        .await
        .unwrap()
        .is_none());
}

on_both!(r1_5_a_childs_approval_is_relayed_to_the_session_that_delegated_it);
async fn r1_5_a_childs_approval_is_relayed_to_the_session_that_delegated_it(s: Store) {
    let parent = common::session(&s).await;
    let (task, _) = s
        .create_subagent_task(NewSubagentTask {
            id: TaskId::new(),
            parent_session_id: parent,
            goal: "write a file".into(),
            context: None,
            depth: 1,
            child: child_session(),
        })
        .await
        .unwrap();
    let child = task.child_session_id;
    assert_eq!(s.delegating_session(child).await.unwrap(), Some(parent));
    assert_eq!(s.delegating_session(parent).await.unwrap(), None);

    let o = owner();
    let fence = common::lease(&s, child, &o, 60_000).await.unwrap();
    let a = s
        .admit(common::new_adm(child, "subagent:x", "go"))
        .await
        .unwrap()
        .admission;
    let turn_id = TurnId::new();
    s.claim(&fence, a.id, &o, turn_id).await.unwrap();
    let turn = TurnRef {
        session_id: child,
        turn_id,
        admission_id: a.id,
    };
    let assistant = NewMessage {
        id: MessageId::new(),
        role: Some(MessageRole::Assistant),
        tool_calls: Some(serde_json::json!([{"id": "c1", "name": "terminal", "arguments": "{}"}])),
        turn_id: Some(turn_id),
        ..Default::default()
    };
    let runs = [NewToolRun {
        call_id: "c1".into(),
        tool: "terminal".into(),
        args: "{}".into(),
        idx: 0,
    }];
    s.append_tool_calls(&fence, &turn, &assistant, &runs)
        .await
        .unwrap();
    let req = serde_json::json!({"name": "terminal", "args": {}, "reason": "why"});
    let (approval, events) = s
        .request_approval(&fence, &turn, "c1", &req, now_ms() + 60_000)
        .await
        .unwrap();
    let at: Vec<_> = events.iter().map(|e| (e.session_id, e.kind)).collect();
    assert_eq!(
        at,
        [
            (child, EventKind::ApprovalRequested),
            (parent, EventKind::ApprovalRequested)
        ]
    );
    assert_eq!(events[1].data["session_id"], child.to_string());
    assert_eq!(events[1].data["approval_id"], approval.id.to_string());
    assert_eq!(events[1].data["turn_id"], turn_id.to_string());

    let (_, resolved) = s
        .decide_approval(child, approval.id, ApprovalDecision::Approve, "op")
        .await
        .unwrap();
    let at: Vec<_> = resolved.iter().map(|e| (e.session_id, e.kind)).collect();
    assert_eq!(
        at,
        [
            (child, EventKind::ApprovalResolved),
            (parent, EventKind::ApprovalResolved)
        ]
    );
    assert_eq!(resolved[1].data["decision"], "approve");
    assert_eq!(resolved[1].data["session_id"], child.to_string());
    // Both are in the parent's log, where its people read them.
    let parent_kinds = kinds(&s, parent).await;
    assert!(parent_kinds.contains(&EventKind::ApprovalRequested));
    assert!(parent_kinds.contains(&EventKind::ApprovalResolved));
}

//! Tool runs and approvals as durable facts, on both backends (SPEC R9.2, R9.5, R9.7, R13.1,
//! R13.2): planned with the assistant row, started once, finished with the result row, unknown
//! until a person decides (once per unknown), approvals decided once and expiring into denials.
#![allow(clippy::expect_used, clippy::unwrap_used)]
use crate::common;

use common::*;
use serde_json::json;
use turnkey_storage::*;

struct Round {
    fence: Fence,
    turn: TurnRef,
}

async fn round(s: &Store) -> Round {
    let sid = session(s).await;
    let o = owner();
    let fence = lease(s, sid, &o, 60_000).await.expect("lease");
    let a = s
        .admit(new_adm(sid, "a", "go"))
        .await
        .expect("admit")
        .admission;
    let turn_id = TurnId::new();
    s.claim(&fence, a.id, &o, turn_id).await.expect("claim");
    let turn = TurnRef {
        session_id: sid,
        turn_id,
        admission_id: a.id,
    };
    let assistant = NewMessage {
        id: MessageId::new(),
        role: Some(MessageRole::Assistant),
        tool_calls: Some(json!([{"id": "c1", "name": "t", "arguments": "{}"}])),
        turn_id: Some(turn_id),
        ..Default::default()
    };
    let runs = [NewToolRun {
        call_id: "c1".into(),
        tool: "t".into(),
        args: "{}".into(),
        idx: 0,
    }];
    s.append_tool_calls(&fence, &turn, &assistant, &runs)
        .await
        .expect("append");
    Round { fence, turn }
}

fn ev(r: &Round, kind: EventKind) -> NewEvent {
    NewEvent {
        session_id: r.turn.session_id,
        kind,
        turn_id: Some(r.turn.turn_id),
        admission_id: Some(r.turn.admission_id),
        data: json!({"call_id": "c1"}),
    }
}

fn result(r: &Round) -> NewMessage {
    NewMessage {
        id: MessageId::new(),
        role: Some(MessageRole::Tool),
        content: Some("ok".into()),
        tool_call_id: Some("c1".into()),
        turn_id: Some(r.turn.turn_id),
        ..Default::default()
    }
}

async fn status(s: &Store, r: &Round) -> ToolRunStatus {
    s.get_tool_run(r.turn.turn_id, "c1")
        .await
        .expect("get")
        .expect("run")
        .status
}

on_both!(r9_2_a_call_is_planned_with_its_row_and_starts_once);
async fn r9_2_a_call_is_planned_with_its_row_and_starts_once(s: Store) {
    let r = round(&s).await;
    assert_eq!(status(&s, &r).await, ToolRunStatus::Planned);
    let msgs = s.list_messages(r.turn.session_id).await.expect("list");
    assert_eq!(msgs.len(), 1, "the assistant row is in the same commit");
    s.start_tool_run(
        &r.fence,
        r.turn.turn_id,
        "c1",
        Some(&ev(&r, EventKind::ToolStarted)),
    )
    .await
    .expect("start");
    assert!(matches!(
        s.start_tool_run(
            &r.fence,
            r.turn.turn_id,
            "c1",
            Some(&ev(&r, EventKind::ToolStarted))
        )
        .await,
        Err(StoreError::WrongState(_))
    ));
    let (row, event) = s
        .finish_tool_run(
            &r.fence,
            r.turn.turn_id,
            "c1",
            ToolOutcome::Ok,
            &result(&r),
            &ev(&r, EventKind::ToolCompleted),
        )
        .await
        .expect("finish");
    assert_eq!(row.role, MessageRole::Tool);
    assert_eq!(event.kind, EventKind::ToolCompleted);
    let run = s.get_tool_run(r.turn.turn_id, "c1").await.unwrap().unwrap();
    assert_eq!(run.status, ToolRunStatus::Finished);
    assert_eq!(run.outcome, Some(ToolOutcome::Ok));
    assert!(matches!(
        s.finish_tool_run(
            &r.fence,
            r.turn.turn_id,
            "c1",
            ToolOutcome::Ok,
            &result(&r),
            &ev(&r, EventKind::ToolCompleted)
        )
        .await,
        Err(StoreError::WrongState(_))
    ));
}

on_both!(r13_1_an_unknown_run_takes_one_decision_per_unknown);
async fn r13_1_an_unknown_run_takes_one_decision_per_unknown(s: Store) {
    let r = round(&s).await;
    let sid = r.turn.session_id;
    assert!(
        matches!(
            s.decide_tool_run(sid, "c1", ToolRunDecision::Retry, "op")
                .await,
            Err(StoreError::WrongState(_))
        ),
        "a planned run is not waiting for a decision"
    );
    s.start_tool_run(
        &r.fence,
        r.turn.turn_id,
        "c1",
        Some(&ev(&r, EventKind::ToolStarted)),
    )
    .await
    .expect("start");
    let marked = s
        .mark_tool_run_unknown(
            &r.fence,
            r.turn.turn_id,
            "c1",
            &ev(&r, EventKind::ToolCompleted),
        )
        .await
        .expect("mark");
    assert!(marked.is_some());
    assert_eq!(s.unknown_tool_runs(sid).await.expect("list").len(), 1);
    let decided = s
        .decide_tool_run(sid, "c1", ToolRunDecision::Retry, "op")
        .await
        .expect("decide");
    assert_eq!(decided.decision, Some(ToolRunDecision::Retry));
    assert!(
        matches!(
            s.decide_tool_run(sid, "c1", ToolRunDecision::Skip, "op")
                .await,
            Err(StoreError::WrongState(_))
        ),
        "decided once"
    );
    // The retry starts it again; cut again, it is a new unknown that needs a new decision.
    s.start_tool_run(
        &r.fence,
        r.turn.turn_id,
        "c1",
        Some(&ev(&r, EventKind::ToolStarted)),
    )
    .await
    .expect("retry starts");
    s.mark_tool_run_unknown(
        &r.fence,
        r.turn.turn_id,
        "c1",
        &ev(&r, EventKind::ToolCompleted),
    )
    .await
    .expect("mark again");
    let run = s.get_tool_run(r.turn.turn_id, "c1").await.unwrap().unwrap();
    assert_eq!(run.status, ToolRunStatus::Unknown);
    assert_eq!(
        run.decision, None,
        "the old decision does not answer the new unknown"
    );
}

on_both!(r13_2_approvals_are_requested_once_decided_once_and_expire_into_denials);
async fn r13_2_approvals_are_requested_once_decided_once_and_expire_into_denials(s: Store) {
    let r = round(&s).await;
    let sid = r.turn.session_id;
    let req = json!({"name": "t", "args": {}, "reason": "why"});
    let far = now_ms() + 60_000;
    let (a, ev) = s
        .request_approval(&r.fence, &r.turn, "c1", &req, far)
        .await
        .expect("request");
    assert_eq!(a.status, ApprovalStatus::Pending);
    assert_eq!(ev.len(), 1, "a session nobody delegated has no relay");
    assert_eq!(ev[0].kind, EventKind::ApprovalRequested);
    let (again, ev) = s
        .request_approval(&r.fence, &r.turn, "c1", &req, far)
        .await
        .expect("again");
    assert_eq!(again.id, a.id, "a resumed turn waits on the same request");
    assert!(ev.is_empty());
    assert_eq!(s.pending_approvals(sid).await.expect("pending").len(), 1);
    let (decided, ev) = s
        .decide_approval(sid, a.id, ApprovalDecision::Approve, "op")
        .await
        .expect("decide");
    assert_eq!(decided.status, ApprovalStatus::Approved);
    assert_eq!(ev[0].data["decision"], "approve");
    assert!(matches!(
        s.decide_approval(sid, a.id, ApprovalDecision::Deny, "op")
            .await,
        Err(StoreError::WrongState(_))
    ));
    assert!(matches!(
        s.decide_approval(sid, ApprovalId::new(), ApprovalDecision::Deny, "op")
            .await,
        Err(StoreError::NotFound(_))
    ));

    // Another call whose request expires: a denial, and too late to approve.
    let assistant = NewMessage {
        id: MessageId::new(),
        role: Some(MessageRole::Assistant),
        tool_calls: Some(json!([{"id": "c2", "name": "t", "arguments": "{}"}])),
        turn_id: Some(r.turn.turn_id),
        ..Default::default()
    };
    let runs = [NewToolRun {
        call_id: "c2".into(),
        tool: "t".into(),
        args: "{}".into(),
        idx: 0,
    }];
    s.append_tool_calls(&r.fence, &r.turn, &assistant, &runs)
        .await
        .expect("append");
    let (b, _) = s
        .request_approval(&r.fence, &r.turn, "c2", &req, now_ms() - 1)
        .await
        .expect("request");
    assert!(
        matches!(
            s.decide_approval(sid, b.id, ApprovalDecision::Approve, "op")
                .await,
            Err(StoreError::WrongState(_))
        ),
        "expired"
    );
    let (expired, ev) = s
        .expire_approval(&r.fence, b.id)
        .await
        .expect("expire")
        .expect("was pending");
    assert_eq!(expired.status, ApprovalStatus::TimedOut);
    assert_eq!(ev[0].data["decision"], "timeout");
}

//! `DELETE /v1/sessions/{id}` (SPEC R13.8) against the real binary, on SQLite and PostgreSQL:
//! a session whose turn is running is interrupted and deleted with everything it had (its
//! transcript, events, receipts, its sub-agent's session, the checkpoint files of its turns),
//! in no table a row of it is left; a second delete and someone else's session are 404, a
//! read-only token is 403; the deletion is in the audit log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use turnkey_tests::wait::{eventually, BOUND};
use turnkey_tests::webhooks::Rows;
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Step, Turnkey, TurnkeyOptions};

const SUBAGENT_REPORT: &str = "[turnkey:subagent-report";

async fn delete(api: &Api, path: &str) -> turnkey_tests::Resp {
    api.try_send(reqwest::Method::DELETE, path, None, &[])
        .await
        .unwrap()
}

async fn deleting(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_user_text(SUBAGENT_REPORT, Reply::text("noted"));
    provider.on_user_text("CHILD-GOAL", Reply::text("child answer"));
    provider.on_tool_result("write and delegate", Reply::text("written"));
    provider.on_user_text(
        "write and delegate",
        Reply::ToolCalls(vec![
            (
                "w1".into(),
                "write_file".into(),
                json!({"path": "notes.txt", "content": "secret plans"}),
            ),
            (
                "d1".into(),
                "delegate_task".into(),
                json!({"goal": "CHILD-GOAL"}),
            ),
        ]),
    );
    provider.on_user_text(
        "wait here",
        Reply::Steps(vec![Step::text("thinking"), Step::Gate]),
    );
    let opts = TurnkeyOptions::new(&provider).extra_toml("[tools]\napproval = \"off\"\n");
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let tk = Turnkey::start(opts).await;
    let op = tk.api();
    let r = op.post("/v1/tokens", &json!({"name": "alice"})).await;
    let alice = op.with_token(Some(&r.str_field("token")));
    let r = op
        .post("/v1/tokens", &json!({"name": "bob", "read_only": false}))
        .await;
    let bob = op.with_token(Some(&r.str_field("token")));
    let r = op
        .post("/v1/tokens", &json!({"name": "ro", "read_only": true}))
        .await;
    let ro = op.with_token(Some(&r.str_field("token")));
    let rows = Rows::connect(&tk.database_url).await;

    let s = alice.create_session_id().await;
    let first = alice.submit_accepted(&s, "write and delegate").await;
    alice.wait_terminal(&first, BOUND).await;
    let child = eventually(BOUND, "the sub-agent's report", || async {
        let list = alice.get(&format!("/v1/sessions/{s}/subagents")).await;
        let t = list.body["subagents"].get(0).cloned()?;
        (t["status"] == "completed").then(|| t["child_session_id"].as_str().unwrap().to_owned())
    })
    .await;
    let started = alice
        .all_events(&s, 0)
        .await
        .into_iter()
        .find(|e| e["kind"] == "turn.started" && e["data"]["admission_id"] == first.as_str())
        .expect("the first turn's start");
    let turn = started["data"]["turn_id"].as_str().unwrap().to_owned();
    let checkpoints = tk.dir.path().join("data").join("checkpoints");
    assert!(
        checkpoints.join(&turn).exists(),
        "write_file made a checkpoint"
    );
    // A turn runs while the session is deleted.
    let running = alice.submit_accepted(&s, "wait here").await;
    eventually(BOUND, "the turn running", || async {
        (alice.admission(&running).await.body["status"] == "started").then_some(())
    })
    .await;

    // Refused first: someone else, a read-only token.
    assert_eq!(delete(&bob, &format!("/v1/sessions/{s}")).await.status, 404);
    let r = delete(&ro, &format!("/v1/sessions/{s}")).await;
    assert_eq!(
        (r.status, r.error_code()),
        (403, Some("read_only")),
        "{}",
        r.text
    );
    assert_eq!(alice.session(&s).await.status, 200, "still there");

    let r = delete(&alice, &format!("/v1/sessions/{s}")).await;
    assert_eq!(r.status, 204, "{}", r.text);
    provider.release_hangs();
    for path in [
        format!("/v1/sessions/{s}"),
        format!("/v1/sessions/{s}/messages"),
        format!("/v1/sessions/{s}/events"),
        format!("/v1/sessions/{child}"),
        format!("/v1/admissions/{first}"),
        format!("/v1/admissions/{running}"),
    ] {
        assert_eq!(alice.get(&path).await.status, 404, "{path}");
    }
    assert_eq!(
        delete(&alice, &format!("/v1/sessions/{s}")).await.status,
        404,
        "gone already"
    );
    // Alice submitted to it before, so the admission service knows its owner and reads no row
    // to authorize her: her submission is still refused, by the admission that finds no
    // session.
    let r = alice.submit(&s, "are you there?", None).await;
    assert_eq!(
        (r.status, r.error_code()),
        (404, Some("not_found")),
        "{}",
        r.text
    );
    // No row of either session is left anywhere.
    for table in [
        "session_admissions",
        "messages",
        "session_events",
        "tool_runs",
        "subagent_tasks",
        "session_turn_leases",
        "usage_ledger",
    ] {
        let column = if table == "subagent_tasks" {
            "parent_session_id"
        } else {
            "session_id"
        };
        let n = rows
            .count_where(table, &format!("{column} IN ('{s}', '{child}')"))
            .await;
        assert_eq!(n, 0, "{table}");
    }
    let n = rows
        .count_where("sessions", &format!("id IN ('{s}', '{child}')"))
        .await;
    assert_eq!(n, 0, "sessions");
    assert!(
        !checkpoints.join(&turn).exists(),
        "its checkpoint files went too"
    );
    // The file the agent wrote in the workspace is the principal's work, not the session's.
    let homes = tk.dir.path().join("workspace").join("principals");
    let kept = std::fs::read_dir(&homes)
        .unwrap()
        .any(|home| home.unwrap().path().join("notes.txt").exists());
    assert!(kept, "alice's notes.txt is still in her workspace");
    let audit = op.get("/v1/audit").await;
    let entry = audit.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "session.deleted")
        .cloned()
        .unwrap_or_else(|| panic!("{}", audit.text));
    assert_eq!(entry["target"], s.as_str());
    assert_eq!(entry["detail"]["sessions"], 2);
    // The gateway goes on: a new session of alice's works.
    let again = alice.create_session_id().await;
    let adm = alice.submit_accepted(&again, "CHILD-GOAL").await;
    let done = alice.wait_terminal(&adm, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_deleting_a_session_interrupts_its_turn_and_leaves_nothing_sqlite() {
    deleting(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_deleting_a_session_interrupts_its_turn_and_leaves_nothing_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    deleting(Some(db.url())).await;
}

//! Compression by rotation end to end (SPEC R6.4, `compression.mode = "rotate"`): a long session
//! against a 16K window moves its live transcript into child sessions. Each child names its
//! parent; the lease stays keyed on the lineage root; every id of the lineage submits into the
//! same queue and replays one gap-free event log across the rotations; the whole history stays
//! readable, each message once; and every request the model saw fits and is well formed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sea_orm::{ConnectionTrait, Statement};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::Duration;
use turnkey_tests::wire::assert_well_formed;
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;
const WINDOW: u32 = 16_000;
const SUMMARY: &str = "Summary: the user sent numbered notes about the garden; the agent acknowledged each one and read files when asked.";

fn options(main: &ScriptedProvider, aux: &ScriptedProvider) -> TurnkeyOptions {
    TurnkeyOptions::new(main).context_window(WINDOW).extra_toml(&format!(
        "[[providers]]\nname = \"aux\"\nkind = \"openai\"\nbase_url = \"{}\"\napi_key = \"sk-aux\"\n\
         model = \"aux-model\"\ncontext_window = 32000\nauxiliary = true\nmax_retries = 0\n\n\
         [tools]\napproval = \"off\"\nenabled = [\"read_file\"]\n\n\
         [compression]\nmode = \"rotate\"\n",
        aux.base_url
    ))
}

/// A user text of about 100 tokens, unique per turn.
fn note(i: usize) -> String {
    format!(
        "note {i:03}: {}",
        "the tomatoes need water and the roses need pruning. ".repeat(7)
    )
}

fn wire(req: &turnkey_tests::RecordedRequest) -> Vec<Value> {
    req.body["messages"].as_array().cloned().unwrap_or_default()
}

fn text(v: &Value) -> String {
    v["content"].as_str().unwrap_or_default().to_owned()
}

async fn submit_and_finish(api: &Api, session: &str, text: &str, tk: &Turnkey) {
    let a = api.submit_accepted(session, text).await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(
        adm["outcome"]["result"],
        "completed",
        "{adm}\n{}",
        tk.log_tail(40)
    );
}

/// The session ids that have a lease row.
async fn lease_keys(database_url: &str) -> Vec<String> {
    let db = turnkey_tests::pg::open(database_url).await;
    let backend = db.get_database_backend();
    db.query_all_raw(Statement::from_string(
        backend,
        "SELECT session_id FROM session_turn_leases ORDER BY session_id",
    ))
    .await
    .expect("read leases")
    .iter()
    .map(|r| r.try_get::<String>("", "session_id").expect("session_id"))
    .collect()
}

async fn rotated_session(database: Option<&str>) {
    let main = ScriptedProvider::start();
    let aux = ScriptedProvider::start();
    aux.on_user_text("[turnkey:compress]", Reply::text(SUMMARY));
    let opts = options(&main, &aux);
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let tk = Turnkey::start(opts).await;
    std::fs::create_dir_all(tk.dir.path().join("workspace")).unwrap();
    std::fs::write(tk.dir.path().join("workspace/plan.txt"), "water at dawn\n").unwrap();
    let api = tk.api();
    let root = api.create_session_id().await;
    let turns = 200;
    let mut tool_turns = 0;
    // Half the turns go to the id the client first held, half to the newest canonical id.
    for i in 0..turns {
        if i % 10 == 5 {
            main.on_user_text_times(
                &format!("note {i:03}:"),
                Reply::tool_call(
                    &format!("call{i}"),
                    "read_file",
                    json!({"path": "plan.txt"}),
                ),
                1,
            );
            tool_turns += 1;
        }
        let target = if i % 2 == 0 {
            root.clone()
        } else {
            api.session(&root).await.str_field("canonical_id")
        };
        submit_and_finish(&api, &target, &note(i), &tk).await;
    }

    // The rotations: each `compression.completed` names its child, announced by
    // `session.rotated` just before it, in one gap-free log.
    let events = api.all_events(&root, 0).await;
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "one gap-free log"
    );
    let rotations: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "session.rotated")
        .collect();
    let completions: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "compression.completed")
        .collect();
    assert!(
        rotations.len() >= 2,
        "a 400-message session in a 16K window rotates more than once: {}",
        rotations.len()
    );
    assert_eq!(rotations.len(), completions.len());
    assert_eq!(
        aux.request_count(),
        rotations.len(),
        "one summary call each"
    );
    let mut children = Vec::new();
    for (r, c) in rotations.iter().zip(&completions) {
        let child = r["data"]["child_session_id"].as_str().unwrap().to_owned();
        assert_eq!(c["data"]["child_session_id"], child.as_str(), "{c}");
        assert_eq!(c["seq"].as_i64(), r["seq"].as_i64().map(|s| s + 1));
        assert!(
            c["data"]["after_tokens"].as_u64() < c["data"]["before_tokens"].as_u64(),
            "{c}"
        );
        assert_eq!(
            r["session_id"],
            root.as_str(),
            "events stay on the root's log"
        );
        children.push(child);
    }

    // The lineage: root → child 1 → child 2 …; every id resolves to the newest child.
    let newest = children.last().unwrap().clone();
    let mut parent = root.clone();
    for child in &children {
        let v = api.session(child).await;
        assert_eq!(v.status, 200, "{}", v.text);
        assert_eq!(v.body["parent_session_id"], parent.as_str());
        assert_eq!(v.body["canonical_id"], newest.as_str());
        assert_eq!(v.body["last_event_seq"], *seqs.last().unwrap());
        parent = child.clone();
    }
    let r = api.session(&root).await;
    assert_eq!(r.body["canonical_id"], newest.as_str());
    assert!(r.body["parent_session_id"].is_null());
    // One lineage, one entry in the list.
    let list = api.get("/v1/sessions").await;
    let ids: Vec<&str> = list.body["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(ids, vec![root.as_str()]);

    // The lease is keyed on the lineage root, never on a child.
    assert_eq!(lease_keys(&tk.database_url).await, vec![root.clone()]);

    // Events replay across the rotations from any id of the lineage.
    let first_child_events = api.all_events(&children[0], 0).await;
    assert_eq!(first_child_events, events, "the same log from a child's id");
    let before = rotations[0]["seq"].as_i64().unwrap() - 3;
    let sse = api
        .events_sse(&newest, Some(before), Duration::from_secs(10), |e| {
            e.id == seqs.last().copied()
        })
        .await;
    let got: Vec<i64> = sse.iter().filter_map(|e| e.id).collect();
    assert_eq!(
        got,
        (before + 1..=*seqs.last().unwrap()).collect::<Vec<_>>(),
        "SSE from the newest id, resumed before the first rotation, replays through it"
    );

    // The whole history is readable from any id, each message once, in order.
    for id in [&root, &newest] {
        let history = api.messages(id).await;
        let users: Vec<String> = history
            .iter()
            .filter(|m| m["role"] == "user")
            .map(text)
            .collect();
        assert_eq!(users, (0..turns).map(note).collect::<Vec<_>>());
        assert_eq!(
            history.iter().filter(|m| m["role"] == "tool").count(),
            tool_turns
        );
        let summaries = history
            .iter()
            .filter(|m| m["summary_epoch"].is_number())
            .count();
        assert_eq!(summaries, rotations.len());
        let segments: HashSet<&str> = history
            .iter()
            .filter_map(|m| m["session_id"].as_str())
            .collect();
        assert_eq!(segments.len(), children.len() + 1, "rows of every segment");
    }

    // Every request fit the window and was well formed; the last one is the newest child's
    // transcript: its head rows, the summary, then the conversation's last 20 rows.
    let requests = main.requests();
    for (n, r) in requests.iter().enumerate() {
        let tokens = r.body.to_string().len() / 4;
        assert!(tokens < WINDOW as usize, "request {n} has ~{tokens} tokens");
        assert_well_formed(&wire(r));
    }
    let last = wire(requests.last().unwrap());
    let history = api.messages(&root).await;
    let rows: Vec<&Value> = history
        .iter()
        .filter(|m| !m["summary_epoch"].is_number())
        .collect();
    for k in 0..3 {
        assert!(
            text(&last[1 + k]).starts_with(&text(rows[k])),
            "head row {k}: {}",
            last[1 + k]
        );
    }
    assert!(
        last[3..5].iter().any(|m| text(m).contains(SUMMARY)),
        "the summary follows the head: {:?}",
        &last[..6]
    );
    let before_answer = &rows[rows.len() - 21..rows.len() - 1];
    for (w, r) in last[last.len() - 20..].iter().zip(before_answer) {
        assert_eq!(w["role"], r["role"]);
        assert_eq!(text(w), text(r));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_4_long_session_rotates_sqlite() {
    rotated_session(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_4_long_session_rotates_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    rotated_session(Some(db.url())).await;
}

/// SPEC R12 row "compression": the process dies right after a rotation committed, before the
/// turn that asked for it went on. After a restart the turn resumes by itself on the child
/// (R13.9) and answers once, the child is canonical with the summary, every id still reaches
/// the lineage, and the next turn runs on the child's transcript.
async fn killed_after_rotation(database: Option<&str>) {
    let main = ScriptedProvider::start();
    let aux = ScriptedProvider::start();
    aux.on_user_text("[turnkey:compress]", Reply::text(SUMMARY));
    let opts = options(&main, &aux).env("FAILPOINTS", "compression.after_commit=return");
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let mut tk = Turnkey::start(opts).await;
    let api = tk.api();
    let root = api.create_session_id().await;
    let mut killed = None;
    for i in 0..150 {
        let a = api.submit_accepted(&root, &note(i)).await;
        // The failpoint kills the process: stop waiting as soon as it is gone.
        let finished = tokio::select! {
            r = api.wait_admission(&a, |s| s == "terminal", BOUND) => r.ok(),
            _ = tk.wait_exit(BOUND) => None,
        };
        match finished {
            Some(adm) => assert_eq!(adm["outcome"]["result"], "completed", "{adm}"),
            None => {
                killed = Some((i, a));
                break;
            }
        }
    }
    let (k, killed_id) = killed.expect("the first rotation was reached and killed the process");
    assert!(
        tk.wait_exit(Duration::from_secs(10)).await.is_some() || !tk.is_running(),
        "turnkey died at the failpoint"
    );
    assert!(k > 10, "the threshold needs many turns: died at turn {k}");
    tk.restart_with_env(&[]).await;
    let api = tk.api();

    // The turn had started no side effect: it resumes by itself, once, on the child.
    let adm = api.wait_terminal(&killed_id, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    assert_eq!(adm["outcome"]["attempts"], 2, "{adm}");
    let view = api.session(&root).await;
    let child = view.str_field("canonical_id");
    assert_ne!(child, root, "the committed rotation stands: {}", view.text);
    let events = api.all_events(&root, 0).await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "session.rotated").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "turn.resumed").count(),
        1,
        "{kinds:?}"
    );
    assert!(!kinds.contains(&"turn.unknown"), "{kinds:?}");

    // The next input, sent to the root's id, runs on the child's transcript: the summary is
    // there, the killed input is answered.
    let calls_before = main.request_count();
    let next = "after the crash: how are the roses?";
    submit_and_finish(&api, &root, next, &tk).await;
    let request = &main.requests()[calls_before];
    let msgs = wire(request);
    assert_well_formed(&msgs);
    assert!(
        msgs.iter().any(|m| text(m).contains(SUMMARY)),
        "the summary survived the crash"
    );
    turnkey_tests::wire::assert_closed_wire(&request.body, &note(k));
    assert_eq!(text(msgs.last().unwrap()), next);

    // Nothing was lost: every input is in the lineage's history once, in order.
    let users: Vec<String> = api
        .messages(&child)
        .await
        .iter()
        .filter(|m| m["role"] == "user")
        .map(text)
        .collect();
    let mut expected: Vec<String> = (0..=k).map(note).collect();
    expected.push(next.to_owned());
    assert_eq!(users, expected);
    assert_eq!(lease_keys(&tk.database_url).await, vec![root]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_killed_after_a_rotation_commits_sqlite() {
    killed_after_rotation(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_killed_after_a_rotation_commits_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    killed_after_rotation(Some(db.url())).await;
}

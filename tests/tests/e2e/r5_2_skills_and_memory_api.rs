//! Skills and the memory API against the real binary (SPEC R5.2; API.md "Memory and
//! skills"): a skill's index line is in a new session's prompt and its body only after
//! `skill_view`; a folder skill is read-only through the API; only the operator stores skills
//! and decides proposals; an agent's `skill_manage` is a proposal until approved, once. The
//! memory API writes the caller's own entries, scanned and bounded, and never reaches
//! another principal's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use reqwest::Method;
use serde_json::{json, Value};
use turnkey_tests::wait::BOUND;
use turnkey_tests::{Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

const BODY: &str = "STEP-ONE: run the deploy script with --staging.";

async fn send(api: &Api, method: Method, path: &str, body: Option<&Value>) -> turnkey_tests::Resp {
    api.try_send(method, path, body, &[]).await.expect("send")
}

async fn bob(api: &Api) -> Api {
    let issued = api.post("/v1/tokens", &json!({"name": "bob"})).await;
    assert!([200, 201].contains(&issued.status), "{}", issued.text);
    api.with_token(issued.body["token"].as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_2_a_skill_is_indexed_loaded_on_demand_and_changed_only_by_approval() {
    let skills = tempfile::tempdir().unwrap();
    let folder = skills.path().join("deploy");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("SKILL.md"),
        format!("---\nname: deploy\ndescription: Deploy the app to staging.\n---\n{BODY}\n"),
    )
    .unwrap();
    std::fs::write(folder.join("notes.md"), "NOTES-FILE").unwrap();
    let provider = ScriptedProvider::start();
    let toml = format!(
        "[skills]\ndir = {:?}\n",
        skills.path().display().to_string()
    );
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).extra_toml(&toml)).await;
    let api = tk.api();
    let bob = bob(&api).await;

    // The operator stores a skill; a folder skill is read-only; others may not write.
    let greet = "---\nname: greet\ndescription: Greet a new user by name.\n---\nSay hello.\n";
    let put = send(
        &api,
        Method::PUT,
        "/v1/skills/greet",
        Some(&json!({"content": greet})),
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text);
    assert_eq!(put.body["source"], "api");
    let clash = send(
        &api,
        Method::PUT,
        "/v1/skills/deploy",
        Some(&json!({"content": greet})),
    )
    .await;
    assert_eq!(
        (clash.status, clash.body["error"]["code"].as_str()),
        (400, Some("invalid_skill"))
    );
    let folder_put = send(
        &api,
        Method::PUT,
        "/v1/skills/deploy",
        Some(&json!({"content": "---\nname: deploy\ndescription: x\n---\n"})),
    )
    .await;
    assert_eq!(
        (folder_put.status, folder_put.body["error"]["code"].as_str()),
        (409, Some("dir_skill"))
    );
    let theirs = send(
        &bob,
        Method::PUT,
        "/v1/skills/greet",
        Some(&json!({"content": greet})),
    )
    .await;
    assert_eq!(theirs.status, 403, "{}", theirs.text);
    let bad = send(
        &api,
        Method::PUT,
        "/v1/skills/x",
        Some(&json!({"content": "no front matter"})),
    )
    .await;
    assert_eq!(
        (bad.status, bad.body["error"]["code"].as_str()),
        (400, Some("invalid_skill"))
    );

    // A new session's prompt lists both, without the body; skill_view loads it.
    let session = api.create_session_id().await;
    provider.push(Reply::ToolCalls(vec![
        ("v1".into(), "skill_view".into(), json!({"name": "deploy"})),
        (
            "v2".into(),
            "skill_view".into(),
            json!({"name": "deploy", "path": "notes.md"}),
        ),
        (
            "v3".into(),
            "skill_view".into(),
            json!({"name": "deploy", "path": "../deploy/../../etc/passwd"}),
        ),
    ]));
    provider.push(Reply::text("Deploying."));
    let adm = api.submit_accepted(&session, "Deploy it.").await;
    let done = api.wait_terminal(&adm, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    let system = provider.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let index = system.find("# Skills").expect("a skills index");
    assert!(index < system.find("# Session").unwrap(), "{system}");
    assert!(
        system.contains("- deploy: Deploy the app to staging.\n"),
        "{system}"
    );
    assert!(
        system.contains("- greet: Greet a new user by name.\n"),
        "{system}"
    );
    assert!(!system.contains(BODY), "the body is loaded on demand only");
    assert!(provider.tool_result(1, "v1").contains(BODY));
    assert!(provider.tool_result(1, "v1").contains("notes.md"));
    assert_eq!(provider.tool_result(1, "v2"), "NOTES-FILE");
    assert!(provider.tool_result(1, "v3").contains("not a path inside"));
    let listed = api.get("/v1/skills").await;
    let deploy = listed.body["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "deploy")
        .cloned()
        .expect("deploy listed");
    assert_eq!(
        (deploy["source"].as_str(), deploy["uses"].as_i64()),
        (Some("dir"), Some(2)),
        "two loads; the refused path is not a use"
    );

    // skill_manage records a proposal; nothing changes until the operator approves.
    provider.push(Reply::tool_call(
        "p1",
        "skill_manage",
        json!({"action": "create", "name": "lint", "description": "Lint before a commit.", "content": "Run cargo clippy."}),
    ));
    provider.push(Reply::text("Proposed."));
    let adm = api.submit_accepted(&session, "Remember how to lint.").await;
    api.wait_terminal(&adm, BOUND).await;
    assert!(
        provider.tool_result(3, "p1").contains("\"proposed\":true"),
        "{}",
        provider.tool_result(3, "p1")
    );
    assert_eq!(api.get("/v1/skills/lint").await.status, 404);
    let proposals = api.get("/v1/skills/proposals").await;
    let p = &proposals.body["proposals"][0];
    assert_eq!(
        (p["action"].as_str(), p["name"].as_str()),
        (Some("create"), Some("lint"))
    );
    assert_eq!(p["session_id"], session.as_str());
    let path = format!("/v1/skills/proposals/{}", p["id"].as_str().unwrap());
    let approve = json!({"decision": "approve"});
    assert_eq!(bob.post(&path, &approve).await.status, 403);
    let ok = api.post(&path, &approve).await;
    assert_eq!(
        (ok.status, ok.body["status"].as_str()),
        (200, Some("approved")),
        "{}",
        ok.text
    );
    let again = api.post(&path, &approve).await;
    assert_eq!(
        (again.status, again.body["error"]["code"].as_str()),
        (409, Some("already_decided"))
    );
    let lint = api.get("/v1/skills/lint").await;
    assert_eq!(lint.status, 200, "{}", lint.text);
    assert!(lint.body["content"]
        .as_str()
        .unwrap()
        .contains("Run cargo clippy."));
    assert_eq!(
        api.get("/v1/skills/proposals").await.body["proposals"],
        json!([])
    );
    assert_eq!(
        send(&api, Method::DELETE, "/v1/skills/lint", None)
            .await
            .status,
        204
    );
    assert_eq!(
        send(&api, Method::DELETE, "/v1/skills/deploy", None)
            .await
            .status,
        409
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_2_the_memory_api_writes_only_the_callers_own_scanned_and_bounded() {
    let provider = ScriptedProvider::start();
    let toml = "[memory]\nreview_every = 0\nprofile_chars = 40\n";
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).extra_toml(toml)).await;
    let api = tk.api();
    let bob = bob(&api).await;

    let made = api
        .post(
            "/v1/memory",
            &json!({"target": "profile", "text": "Name: Alice"}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.text);
    let id = made.body["id"].as_str().unwrap().to_owned();
    let full = api
        .post(
            "/v1/memory",
            &json!({"target": "profile", "text": "x".repeat(35)}),
        )
        .await;
    assert_eq!(full.status, 422, "{}", full.text);
    assert_eq!(full.body["error"]["code"], "memory_full");
    assert!(
        full.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("11 of 40"),
        "{}",
        full.text
    );
    let secret = api
        .post(
            "/v1/memory",
            &json!({"target": "memory", "text": "key sk-abcdefghijklmnopqrstuvwx12"}),
        )
        .await;
    assert_eq!(
        (secret.status, secret.body["error"]["code"].as_str()),
        (422, Some("memory_secret"))
    );
    let target = api
        .post("/v1/memory", &json!({"target": "diary", "text": "x"}))
        .await;
    assert_eq!(
        (target.status, target.body["error"]["code"].as_str()),
        (400, Some("invalid_target"))
    );

    // Someone else's entry is not found, to read or to change.
    assert_eq!(
        bob.get("/v1/memory").await.body["profile"]["entries"],
        json!([])
    );
    let path = format!("/v1/memory/{id}");
    assert_eq!(send(&bob, Method::DELETE, &path, None).await.status, 404);
    assert_eq!(
        send(
            &bob,
            Method::PATCH,
            &path,
            Some(&json!({"text": "Name: Mallory"}))
        )
        .await
        .status,
        404
    );

    let edited = send(
        &api,
        Method::PATCH,
        &path,
        Some(&json!({"text": "Name: Alice B."})),
    )
    .await;
    assert_eq!(
        (edited.status, edited.body["text"].as_str()),
        (200, Some("Name: Alice B."))
    );
    let mine = api.get("/v1/memory").await;
    assert_eq!(mine.body["profile"]["chars"], 14);
    assert_eq!(mine.body["profile"]["limit"], 40);
    assert_eq!(mine.body["memory"]["limit"], 2200);
    assert_eq!(send(&api, Method::DELETE, &path, None).await.status, 204);
    assert_eq!(send(&api, Method::DELETE, &path, None).await.status, 404);
    let changes = api.get("/v1/memory/changes").await;
    let actions: Vec<(&str, &str)> = changes.body["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["action"].as_str().unwrap(), c["by"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [("remove", "api"), ("replace", "api"), ("add", "api")]
    );
    assert_eq!(changes.body["changes"][1]["before"], "Name: Alice");
    assert_eq!(
        bob.get("/v1/memory/changes").await.body["changes"],
        json!([])
    );
}

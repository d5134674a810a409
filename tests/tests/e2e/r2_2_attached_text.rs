//! An attached text file is shown to the model (SPEC R2.2, R8.1; issue 38 item 11): a small
//! model never calls a tool to read `uploads/…`, so a text file within `tools.inline_text_bytes`
//! goes into the message the provider receives, after the note naming its workspace path; a
//! larger one, and a file that is not plainly text, is only named. Every file is still saved in
//! the workspace, and the transcript keeps the reference, not the text.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use turnkey_tests::files::last_user_content;
use turnkey_tests::wait::BOUND;
use turnkey_tests::{Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

async fn upload(api: &Api, name: &str, bytes: &[u8]) -> String {
    let r = api
        .send_raw(
            &format!("/v1/files?name={name}"),
            "application/octet-stream",
            bytes.to_vec(),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.str_field("file_id")
}

/// Submits `text` with the files `ids` attached and waits for its turn; answers the text of the
/// last user message the provider received.
async fn ask(api: &Api, provider: &ScriptedProvider, s: &str, text: &str, ids: &[&str]) -> String {
    provider.push(Reply::text("read"));
    let attachments: Vec<Value> = ids.iter().map(|id| json!({ "file_id": id })).collect();
    let r = api
        .post(
            &format!("/v1/sessions/{s}/submissions"),
            &json!({"text": text, "attachments": attachments}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let adm = api
        .wait_terminal(r.body["admission_id"].as_str().unwrap(), BOUND)
        .await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    last_user_content(provider).as_str().unwrap().to_owned()
}

/// The workspace path a note names for `name`.
fn path_of(note: &str, name: &str) -> String {
    let from = note
        .find(&format!("[file attached: {name} "))
        .unwrap_or_else(|| panic!("no note for {name}: {note}"));
    let rest = &note[from..];
    let path = rest.split("saved in the workspace as ").nth(1).unwrap();
    path.split([';', ']']).next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_an_attached_text_file_is_in_the_message_and_a_long_one_is_named() {
    let provider = ScriptedProvider::start();
    // The default bound: 16 KiB.
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let notes = "Launch checklist\n1. The code word is periwinkle.\n2. Bring snacks.\n";
    let small = upload(&api, "notes.txt", notes.as_bytes()).await;
    let long_text = "a line of a long log\n".repeat(1000);
    let long = upload(&api, "long.log", long_text.as_bytes()).await;
    let zeros = upload(&api, "zeros.dat", &[0u8; 100]).await;

    let sent = ask(
        &api,
        &provider,
        &s,
        "what is the code word?",
        &[&small, &long, &zeros],
    )
    .await;
    // The small text file, whole, after the note naming where it is saved.
    let path = path_of(&sent, "notes.txt");
    assert!(path.starts_with("uploads/"), "{sent}");
    assert!(
        sent.contains(&format!(
            "[file attached: notes.txt (text/plain, 1 KB), saved in the workspace as {path}; \
             its text follows]\n{}\n[end of notes.txt]",
            notes.trim_end()
        )),
        "{sent}"
    );
    // The long one and the binary one are named by their path, their bytes not shown.
    let long_path = path_of(&sent, "long.log");
    assert!(
        sent.contains(&format!(
            "saved in the workspace as {long_path}; too long to show here: read it from there]"
        )),
        "{sent}"
    );
    assert!(!sent.contains("a line of a long log"), "{sent}");
    let zeros_path = path_of(&sent, "zeros.dat");
    assert!(
        sent.contains(&format!("saved in the workspace as {zeros_path}]")),
        "{sent}"
    );
    assert!(!sent.contains('\0'), "no binary in a prompt");
    // Every file is saved in the workspace all the same.
    let workspace = tk.dir.path().join("workspace");
    assert_eq!(
        std::fs::read(workspace.join(&path)).unwrap(),
        notes.as_bytes()
    );
    assert_eq!(
        std::fs::read(workspace.join(&long_path)).unwrap(),
        long_text.as_bytes()
    );
    // The transcript keeps the user's words and the reference, not the file's text.
    let msgs = api.messages(&s).await;
    let user = msgs.iter().rev().find(|m| m["role"] == "user").unwrap();
    assert_eq!(user["content"], "what is the code word?", "{user}");

    // The next turn shows the same message again, byte for byte (a stable prompt prefix).
    let again = ask(&api, &provider, &s, "and what to bring?", &[]).await;
    let reqs = provider.requests();
    let first_user = reqs.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .cloned()
        .unwrap();
    assert_eq!(first_user["content"].as_str().unwrap(), sent, "{again}");
}

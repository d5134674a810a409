//! Files from chat platforms (issue 26, SPEC R2.2) through the real webhooks and fake platforms,
//! on SQLite and PostgreSQL: a Telegram photo (its largest size, fetched with `getFile` and the
//! file URL under the bot token) and a Slack file (its private URL, with the bot token) reach a
//! vision model as image parts; a Telegram document is saved into the chat's workspace and named
//! to the model; the generic webhook's `attachments` take a `data:` URL and an http URL fetched
//! through the `web_fetch` guard. A file that cannot be fetched costs nothing but itself: the
//! message is admitted with a line naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use turnkey_tests::files::{content_text, image_server, image_urls, png_data_url, PNG};
use turnkey_tests::wait::BOUND;
use turnkey_tests::webhooks::{
    generic_message, platforms_toml, slack_message, telegram_message, Endpoints, Webhooks,
    SLACK_BOT_USER,
};
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

const ALICE: i64 = 4242;
const SLACK_USER: &str = "U123ABC456";

/// The user content of the provider's last request whose last user text has `needle`.
fn user_content(provider: &ScriptedProvider, needle: &str) -> Value {
    let req = provider
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.last_user_text.contains(needle))
        .unwrap_or_else(|| panic!("no request with {needle:?}"));
    req.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| m["content"].clone())
        .unwrap()
}

/// Waits for the turn of a webhook's admission and answers the session's user row.
async fn admitted_row(api: &Api, r: &turnkey_tests::Resp) -> Value {
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["outcome"], "admitted", "{}", r.text);
    let id = r.body["receipt"]["admission_id"].as_str().unwrap();
    let done = api.wait_terminal(id, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    let session = r.body["receipt"]["session_id"].as_str().unwrap();
    let rows = api.messages(session).await;
    rows.into_iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap()
}

async fn files_from_chats(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    for needle in ["photo", "notes", "lost", "slack", "generic", "linked"] {
        provider.on_user_text(needle, Reply::text(&format!("seen: {needle}")));
    }
    let (to, [telegram, slack, _webhook]) = Endpoints::fakes();
    telegram.add_file("small", b"not the largest size");
    telegram.add_file("large", PNG);
    telegram.add_file("doc", b"alpha,beta\n1,2\n");
    slack.add_file("F1", PNG);
    let toml = platforms_toml(&to, &[&ALICE.to_string()], &[SLACK_USER]);
    let opts = TurnkeyOptions::new(&provider)
        .provider_model("gpt-4o")
        .extra_toml(&format!(
            "{toml}\n[tools]\napproval = \"off\"\nfetch_allow = [\"127.0.0.1\"]\n"
        ));
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let tk = Turnkey::start(opts).await;
    let api = tk.api();
    let hooks = Webhooks::new(&tk.url);

    // A Telegram photo with a caption: its largest size reaches the model as an image.
    let mut photo = telegram_message(1, ALICE, ALICE, "");
    photo["message"].as_object_mut().unwrap().remove("text");
    photo["message"]["caption"] = json!("what is in this photo");
    photo["message"]["photo"] = json!([
        {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 90},
        {"file_id": "large", "file_unique_id": "l", "width": 800, "height": 800},
    ]);
    let (r, _) = hooks.telegram(&photo).await;
    let row = admitted_row(&api, &r).await;
    assert_eq!(row["content"], "what is in this photo", "{row}");
    assert_eq!(row["attachments"][0]["content_type"], "image/png", "{row}");
    assert_eq!(
        image_urls(&user_content(&provider, "photo")),
        [png_data_url()]
    );
    let fetched: Vec<Value> = telegram
        .calls_to("getFile")
        .iter()
        .map(|c| c.body.clone())
        .collect();
    assert_eq!(
        fetched,
        [json!({"file_id": "large"})],
        "the largest size only"
    );

    // A document without a caption: saved into the chat's workspace, named to the model.
    let mut doc = telegram_message(2, ALICE, ALICE, "");
    doc["message"].as_object_mut().unwrap().remove("text");
    doc["message"]["document"] =
        json!({"file_id": "doc", "file_unique_id": "d", "file_name": "notes.csv"});
    let (r, _) = hooks.telegram(&doc).await;
    let row = admitted_row(&api, &r).await;
    assert_eq!(row["attachments"][0]["name"], "notes.csv", "{row}");
    let path = row["attachments"][0]["path"].as_str().unwrap().to_owned();
    assert!(
        path.starts_with("uploads/") && path.ends_with("-notes.csv"),
        "{row}"
    );
    let last = provider.requests().pop().unwrap();
    let said = last.body["messages"].to_string();
    assert!(said.contains("[file attached: notes.csv"), "{said}");

    // A photo the platform no longer has: the caption is admitted with a line about it.
    let mut lost = telegram_message(3, ALICE, ALICE, "");
    lost["message"].as_object_mut().unwrap().remove("text");
    lost["message"]["caption"] = json!("the lost one");
    lost["message"]["photo"] =
        json!([{"file_id": "gone", "file_unique_id": "g", "width": 1, "height": 1}]);
    let (r, _) = hooks.telegram(&lost).await;
    let row = admitted_row(&api, &r).await;
    let text = row["content"].as_str().unwrap();
    assert!(
        text.starts_with("the lost one\n[attachment photo could not be kept:"),
        "{row}"
    );
    assert!(
        !text.contains("123456:TEST"),
        "the bot token stays out: {text}"
    );
    assert!(row.get("attachments").is_none(), "{row}");

    // A Slack file: fetched with the bot token, an image for the model.
    let mut shared = slack_message(
        "Ev1",
        "C1",
        "1700000000.000100",
        SLACK_USER,
        &format!("<@{SLACK_BOT_USER}> what is in the slack picture"),
    );
    shared["event"]["subtype"] = json!("file_share");
    shared["event"]["files"] = json!([{
        "id": "F1", "name": "dot.png", "mimetype": "image/png",
        "url_private_download": slack.slack_file_url("F1"),
    }]);
    let (r, _) = hooks.slack(&shared).await;
    let row = admitted_row(&api, &r).await;
    assert_eq!(row["attachments"][0]["name"], "dot.png", "{row}");
    assert_eq!(
        image_urls(&user_content(&provider, "slack")),
        [png_data_url()]
    );
    let downloads = slack.calls_to("file");
    assert_eq!(downloads.len(), 1);
    assert!(downloads[0].ok, "fetched with the bot token");

    // The generic webhook: a data: URL and a link fetched through the guard.
    let mut inline = generic_message("room-1", "m-1", "alice", "generic inline");
    inline["attachments"] = json!([{"url": png_data_url(), "name": "a.png"}]);
    let (r, _) = hooks.generic(&inline).await;
    admitted_row(&api, &r).await;
    assert_eq!(
        image_urls(&user_content(&provider, "generic")),
        [png_data_url()]
    );
    let mut linked = generic_message("room-1", "m-2", "alice", "linked picture");
    linked["attachments"] = json!([{"url": image_server(PNG).0}]);
    let (r, _) = hooks.generic(&linked).await;
    admitted_row(&api, &r).await;
    assert_eq!(
        image_urls(&user_content(&provider, "linked")),
        [png_data_url()]
    );
    let mut bad = generic_message("room-1", "m-3", "alice", "bad link");
    bad["attachments"] = json!([{"url": "ftp://example.com/x.png"}]);
    let (r, _) = hooks.generic(&bad).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.error_code(), Some("invalid_attachment"), "{}", r.text);
    assert!(content_text(&user_content(&provider, "linked")).contains("linked picture"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_telegram_slack_and_webhook_files_reach_the_model_sqlite() {
    files_from_chats(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_telegram_slack_and_webhook_files_reach_the_model_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    files_from_chats(Some(db.url())).await;
}

/// A Telegram voice note with `[stt]` set: transcribed by the OpenAI-shaped
/// `/audio/transcriptions` (a scripted one), its text joins the message, and the audio is kept
/// as an attachment. On SQLite and PostgreSQL.
async fn voice_note(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_user_text("water the plants", Reply::text("will do"));
    let stt = ScriptedProvider::start();
    stt.set_transcript("please water the plants");
    let (to, [telegram, _slack, _webhook]) = Endpoints::fakes();
    let mut ogg = b"OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00".to_vec();
    ogg.extend_from_slice(&[0u8; 64]);
    telegram.add_file("v1", &ogg);
    let toml = platforms_toml(&to, &[&ALICE.to_string()], &[SLACK_USER]);
    let opts = TurnkeyOptions::new(&provider).extra_toml(&format!(
        "{toml}\n[stt]\nbase_url = \"{}\"\napi_key = \"stt-key-123456\"\nmodel = \"whisper-test\"\n",
        stt.base_url
    ));
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let tk = Turnkey::start(opts).await;
    let api = tk.api();
    let hooks = Webhooks::new(&tk.url);

    let mut voice = telegram_message(7, ALICE, ALICE, "");
    voice["message"].as_object_mut().unwrap().remove("text");
    voice["message"]["voice"] =
        json!({"file_id": "v1", "file_unique_id": "v", "duration": 2, "mime_type": "audio/ogg"});
    let (r, _) = hooks.telegram(&voice).await;
    let row = admitted_row(&api, &r).await;
    assert_eq!(
        row["content"], "[voice note, transcribed]: please water the plants",
        "{row}"
    );
    assert_eq!(row["attachments"][0]["content_type"], "audio/ogg", "{row}");
    let asked = provider.requests().pop().unwrap();
    assert_eq!(
        asked.reply, "text",
        "answered by the rule for the transcript"
    );
    let sent = stt.transcriptions();
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].contains("name=\"model\"") && sent[0].contains("whisper-test"),
        "{}",
        sent[0]
    );
    assert!(sent[0].contains("name=\"file\""), "{}", sent[0]);
    assert_eq!(
        stt.request_count(),
        0,
        "no chat request went to the speech server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_a_voice_note_is_transcribed_when_stt_is_set_sqlite() {
    voice_note(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_a_voice_note_is_transcribed_when_stt_is_set_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    voice_note(Some(db.url())).await;
}

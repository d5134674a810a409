//! Files and attachments (SPEC R2.2, R8.1; API.md "Attachments") against the real binary, on
//! SQLite and PostgreSQL: `POST /v1/files` stores the raw body with its type sniffed from the
//! bytes (a PNG named `.txt` is a PNG), serves it to its owner only, and refuses a body over
//! `max_upload_bytes` (413, nothing stored). A submission's image reaches a vision model as
//! an image part on the OpenAI wire (`image_url` data URL) and the Anthropic wire (`image`
//! block), and a text-only model gets a note naming it instead; the transcript keeps the same
//! reference either way. An inline `data:` attachment is stored and a retried submission is a
//! duplicate; a text file is saved into the workspace and named by its path; someone else's
//! `file_id` is refused. Deleting the session deletes the files only it referenced.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::Engine;
use serde_json::{json, Value};
use turnkey_tests::files::{b64, last_user_content, PNG};
use turnkey_tests::wait::BOUND;
use turnkey_tests::webhooks::Rows;
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

async fn start(database: Option<&str>, opts: TurnkeyOptions) -> Turnkey {
    let opts = opts
        .env("TURNKEY__SERVER__MAX_UPLOAD_BYTES", "4096")
        .extra_toml("[tools]\napproval = \"off\"\n");
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    Turnkey::start(opts).await
}

async fn upload(api: &Api, name: &str, bytes: &[u8]) -> Value {
    let r = api
        .send_raw(
            &format!("/v1/files?name={name}"),
            "text/plain",
            bytes.to_vec(),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body
}

async fn submit(
    api: &Api,
    session: &str,
    text: &str,
    attachments: Value,
    rid: &str,
) -> turnkey_tests::Resp {
    api.post(
        &format!("/v1/sessions/{session}/submissions"),
        &json!({"text": text, "request_id": rid, "attachments": attachments}),
    )
    .await
}

async fn files_and_vision(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let tk = start(
        database,
        TurnkeyOptions::new(&provider).provider_model("gpt-4o"),
    )
    .await;
    let api = tk.api();
    let rows = Rows::connect(&tk.database_url).await;

    // Uploads: sniffed, served to the owner only, bounded.
    let png = upload(&api, "../not-really.txt", PNG).await;
    assert_eq!(png["content_type"], "image/png", "{png}");
    assert_eq!(png["name"], "not-really.txt", "{png}");
    assert_eq!(png["bytes"], PNG.len());
    let again = upload(&api, "second-name.png", PNG).await;
    assert_eq!(
        again["file_id"], png["file_id"],
        "the same bytes are the same file"
    );
    let id = png["file_id"].as_str().unwrap();
    let got = api.get(&format!("/v1/files/{id}")).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.content_type, "image/png");
    let created = api.post("/v1/tokens", &json!({"name": "bob"})).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let bob = api.with_token(Some(created.body["token"].as_str().unwrap()));
    assert_eq!(bob.get(&format!("/v1/files/{id}")).await.status, 404);
    let big = api
        .send_raw(
            "/v1/files?name=big.bin",
            "application/octet-stream",
            vec![7u8; 5000],
        )
        .await;
    assert_eq!(big.status, 413, "{}", big.text);
    assert_eq!(big.error_code(), Some("too_large"));
    assert_eq!(
        rows.count("files").await,
        1,
        "nothing stored for the refused upload"
    );

    // A multipart form: the `file` field is the file, named by its filename; other fields
    // are read past; a form without `file`, and a file over the bound, store nothing.
    let boundary = "tk-boundary-7";
    let form = |fields: &[(&str, Option<&str>, &[u8])]| {
        let mut body = Vec::new();
        for (name, filename, bytes) in fields {
            body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            let disposition = match filename {
                Some(f) => format!("form-data; name=\"{name}\"; filename=\"{f}\""),
                None => format!("form-data; name=\"{name}\""),
            };
            body.extend_from_slice(
                format!("Content-Disposition: {disposition}\r\nContent-Type: text/plain\r\n\r\n")
                    .as_bytes(),
            );
            body.extend_from_slice(bytes);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        body
    };
    let multipart = format!("multipart/form-data; boundary={boundary}");
    let r = api
        .send_raw(
            "/v1/files",
            &multipart,
            form(&[("purpose", None, b"vision"), ("file", Some("pic.png"), PNG)]),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.body["file_id"], png["file_id"],
        "the same bytes: {}",
        r.text
    );
    let r = api
        .send_raw(
            "/v1/files",
            &multipart,
            form(&[("file", Some("letters.txt"), b"plain words")]),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["name"], "letters.txt");
    assert_eq!(r.body["content_type"], "text/plain");
    let r = api
        .send_raw("/v1/files", &multipart, form(&[("other", None, b"x")]))
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.error_code(), Some("invalid_body"));
    let r = api
        .send_raw(
            "/v1/files",
            &multipart,
            form(&[("file", Some("big.bin"), &[7u8; 5000])]),
        )
        .await;
    assert_eq!(r.status, 413, "{}", r.text);
    let r = api
        .send_raw(
            "/v1/files",
            &multipart,
            b"--tk-boundary-7\r\ngarbage".to_vec(),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(rows.count("files").await, 2, "the PNG and the text only");

    // An image to a vision model (OpenAI wire): an image_url part with its bytes.
    provider.on_user_text("what is in it", Reply::text("a red dot"));
    let s = api.create_session_id().await;
    let r = submit(&api, &s, "what is in it", json!([{"file_id": id}]), "r-1").await;
    assert_eq!(r.status, 202, "{}", r.text);
    api.wait_terminal(&r.str_field("admission_id"), BOUND).await;
    let content = last_user_content(&provider);
    let parts = content.as_array().expect("parts");
    assert_eq!(parts[0], json!({"type": "text", "text": "what is in it"}));
    assert_eq!(
        parts[1]["image_url"]["url"],
        format!("data:image/png;base64,{}", b64(PNG))
    );
    let messages = api.messages(&s).await;
    let user = messages.iter().find(|m| m["role"] == "user").unwrap();
    assert_eq!(
        user["content"], "what is in it",
        "the transcript keeps the text"
    );

    // Someone else's file is refused; bob's own inline file is stored, and a retry is one.
    let bs = bob.create_session_id().await;
    let r = submit(&bob, &bs, "look", json!([{"file_id": id}]), "b-1").await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.error_code(), Some("unknown_file"));
    let inline = json!([{"url": format!("data:text/plain;base64,{}", b64(b"col1,col2\n1,2\n")), "name": "data.csv"}]);
    let first = submit(&bob, &bs, "sum the file", inline.clone(), "b-2").await;
    assert_eq!(first.status, 202, "{}", first.text);
    let retry = submit(&bob, &bs, "sum the file", inline, "b-2").await;
    assert_eq!(retry.status, 200, "a retry is a duplicate: {}", retry.text);
    assert_eq!(retry.body["duplicate"], true);
    bob.wait_terminal(&first.str_field("admission_id"), BOUND)
        .await;
    let note = last_user_content(&provider);
    let note = note.as_str().unwrap_or_default();
    assert!(
        note.contains("[file attached: data.csv (text/plain") && note.contains("uploads/"),
        "{note}"
    );
    // A small text file is shown too (`r2_2_attached_text`).
    assert!(
        note.ends_with("; its text follows]\ncol1,col2\n1,2\n[end of data.csv]"),
        "{note}"
    );
    let path = note
        .split("saved in the workspace as ")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap();
    let saved = std::fs::read_dir(tk.dir.path().join("workspace").join("principals"))
        .unwrap()
        .map(|d| d.unwrap().path().join(path))
        .find(|p| p.exists())
        .expect("saved in bob's workspace");
    assert_eq!(std::fs::read(saved).unwrap(), b"col1,col2\n1,2\n");

    // Deleting the session deletes what only it referenced; bob's file stays with his (and
    // the text uploaded above, which no admission names, is not the session's to delete).
    assert_eq!(rows.count("files").await, 3);
    let d = api
        .try_send(
            reqwest::Method::DELETE,
            &format!("/v1/sessions/{s}"),
            None,
            &[],
        )
        .await
        .unwrap();
    assert!(d.status == 204 || d.status == 200, "{}", d.text);
    assert_eq!(
        rows.count("files").await,
        2,
        "the PNG only that session named is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_files_are_sniffed_owned_bounded_and_reach_a_vision_model_sqlite() {
    files_and_vision(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_files_are_sniffed_owned_bounded_and_reach_a_vision_model_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    files_and_vision(Some(db.url())).await;
}

async fn image_on(kind: &str, vision: bool) -> Value {
    let provider = ScriptedProvider::start();
    let opts = TurnkeyOptions::new(&provider)
        .provider_kind(kind)
        .provider_toml(&format!("vision = {vision}"));
    let tk = start(None, opts).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let inline = json!([{"url": format!("data:image/png;base64,{}", b64(PNG)), "name": "dot.png"}]);
    let r = submit(&api, &s, "describe", inline, "r-1").await;
    assert_eq!(r.status, 202, "{}", r.text);
    api.wait_terminal(&r.str_field("admission_id"), BOUND).await;
    let messages = api.messages(&s).await;
    let user = messages.iter().find(|m| m["role"] == "user").unwrap();
    assert_eq!(user["attachments"][0]["name"], "dot.png", "{user}");
    last_user_content(&provider)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_1_an_image_is_an_image_block_on_the_anthropic_wire() {
    let content = image_on("anthropic", true).await;
    assert_eq!(content[0]["type"], "image", "{content}");
    assert_eq!(content[0]["source"]["type"], "base64");
    assert_eq!(content[0]["source"]["media_type"], "image/png");
    assert_eq!(content[0]["source"]["data"], b64(PNG));
    assert_eq!(content[1]["text"], "describe");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_1_a_text_only_model_gets_a_note_instead_of_the_image() {
    let content = image_on("openai", false).await;
    let text = content.as_str().expect("plain text content");
    assert!(
        text.starts_with("describe\n\n[image attached: dot.png (image/png")
            && text.contains("this model cannot see images"),
        "{text}"
    );
}

/// An image larger than providers take (3000 px wide) goes to the model scaled to 1568 px on
/// its long edge, as JPEG, keeping its ratio; the stored file stays as uploaded (issue 26).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_1_a_too_large_image_is_scaled_for_the_model_only() {
    use std::io::Cursor;
    let provider = ScriptedProvider::start();
    provider.on_user_text("how wide", Reply::text("wide"));
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).provider_model("gpt-4o")).await;
    let api = tk.api();
    let wide = image::RgbImage::from_fn(3000, 300, |x, y| {
        image::Rgb([(x % 251) as u8, (y % 241) as u8, 9])
    });
    let mut png = Cursor::new(Vec::new());
    image::DynamicImage::from(wide)
        .write_to(&mut png, image::ImageFormat::Png)
        .unwrap();
    let png = png.into_inner();
    let stored = upload(&api, "wide.png", &png).await;
    let s = api.create_session_id().await;
    let id = stored["file_id"].as_str().unwrap();
    let r = submit(&api, &s, "how wide is it", json!([{"file_id": id}]), "w-1").await;
    assert_eq!(r.status, 202, "{}", r.text);
    api.wait_terminal(&r.str_field("admission_id"), BOUND).await;
    let content = last_user_content(&provider);
    let url = content[1]["image_url"]["url"].as_str().unwrap();
    let data = url
        .strip_prefix("data:image/jpeg;base64,")
        .unwrap_or_else(|| panic!("scaled to JPEG: {}", &url[..40]));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    let sent = image::load_from_memory(&bytes).unwrap();
    assert_eq!((sent.width(), sent.height()), (1568, 157));
    let kept = api.get(&format!("/v1/files/{id}")).await;
    assert_eq!(kept.status, 200);
    assert_eq!(
        kept.content_type, "image/png",
        "the stored file is the upload"
    );
    assert_eq!(stored["bytes"], png.len());
    let messages = api.messages(&s).await;
    assert_eq!(messages[0]["attachments"][0]["content_type"], "image/png");
}

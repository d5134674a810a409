//! The OpenAI-compatible endpoint (SPEC R1.1) driven by the official `openai` Python package:
//! non-streamed and streamed completions, one session per `user`, `X-Turnkey-Session`,
//! idempotent replay by `Idempotency-Key`, a bad token as `openai.AuthenticationError`,
//! `GET /v1/models`, and a client that goes away mid-stream (the turn still finishes and is in
//! the transcript). Concurrent first calls for one `user` end in one session (plain HTTP).
//! The SDK tests skip with one line when the package is missing, unless
//! `TURNKEY_REQUIRE_OPENAI_SDK=1` (CI, see `.ci/run`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::files::{image_server, image_urls, last_user_content, png_data_url, PNG};
use turnkey_tests::openai_sdk::OpenAiSdk;
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::{eventually, BOUND};

/// The client every script builds: no retries of its own, so what is counted is what was sent.
const PRELUDE: &str = r#"
import json, os, sys
import openai
client = openai.OpenAI(base_url=os.environ["TK_BASE_URL"] + "/v1",
                       api_key=os.environ["TK_API_KEY"], max_retries=0, timeout=60)
def out(**kw):
    print(json.dumps(kw))
"#;

fn script(body: &str) -> String {
    format!("{PRELUDE}\n{body}")
}

async fn start(provider: &ScriptedProvider) -> Turnkey {
    Turnkey::start(TurnkeyOptions::new(provider).extra_toml("[tools]\napproval = \"off\"\n")).await
}

fn roles_and_text(messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("?").to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_openai_sdk_completion_and_one_session_per_user() {
    let Some(sdk) = OpenAiSdk::find_or_skip("r1_1_openai_sdk_completion").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("first answer"));
    provider.push(Reply::text("second answer"));
    let tk = start(&provider).await;
    let call = script(
        r#"
raw = client.chat.completions.with_raw_response.create(
    model="scripted-model", user="alice",
    messages=[{"role": "system", "content": "Answer like a pirate."},
              {"role": "user", "content": "ignored history"},
              {"role": "assistant", "content": "ignored too"},
              {"role": "user", "content": sys.argv[1] if len(sys.argv) > 1 else os.environ["Q"]}])
r = raw.parse()
out(session=raw.headers.get("x-turnkey-session"), id=r.id, object=r.object, model=r.model,
    text=r.choices[0].message.content, role=r.choices[0].message.role,
    finish=r.choices[0].finish_reason, usage=r.usage.model_dump())
"#,
    );
    let first = sdk.run(&call, &tk.url, &tk.token, &[("Q", "hello")]).await;
    assert_eq!(first["object"], "chat.completion", "{first}");
    assert_eq!(first["text"], "first answer", "{first}");
    assert_eq!(first["role"], "assistant");
    assert_eq!(first["finish"], "stop");
    assert_eq!(first["model"], "scripted-model");
    let u = &first["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap(),
        "{first}"
    );
    let session = first["session"]
        .as_str()
        .expect("X-Turnkey-Session")
        .to_owned();

    let second = sdk.run(&call, &tk.url, &tk.token, &[("Q", "again")]).await;
    assert_eq!(second["text"], "second answer", "{second}");
    assert_eq!(
        second["session"],
        json!(session),
        "the same user, the same session"
    );
    assert_ne!(second["id"], first["id"]);

    // Only the last user message was submitted each time; the session holds its own history,
    // and the first call's system message became the session's.
    let api = tk.api();
    let transcript = roles_and_text(&api.messages(&session).await);
    assert_eq!(
        transcript,
        [
            ("user".into(), "hello".into()),
            ("assistant".into(), "first answer".into()),
            ("user".into(), "again".into()),
            ("assistant".into(), "second answer".into()),
        ]
    );
    let requests = provider.requests();
    let sent = requests[1].body["messages"].to_string();
    assert!(sent.contains("Answer like a pirate."), "{sent}");
    assert!(!sent.contains("ignored history"), "{sent}");
    assert!(
        sent.contains("first answer") && sent.contains("again"),
        "{sent}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_openai_sdk_streams_the_turns_deltas_with_usage() {
    let Some(sdk) = OpenAiSdk::find_or_skip("r1_1_openai_sdk_streams").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.push(Reply::chunks(
        &["Once ", "upon ", "a ", "time."],
        Duration::from_millis(200),
    ));
    let tk = start(&provider).await;
    let out = sdk
        .run(
            &script(
                r#"
raw = client.chat.completions.with_raw_response.create(
    model="anything-at-all", stream=True, stream_options={"include_usage": True},
    messages=[{"role": "user", "content": "tell a story"}])
parts, finish, usage, objects, roles = [], None, None, set(), []
for chunk in raw.parse():
    objects.add(chunk.object)
    if chunk.usage is not None:
        usage = chunk.usage.model_dump()
    for c in chunk.choices:
        if c.delta.role:
            roles.append(c.delta.role)
        if c.delta.content:
            parts.append(c.delta.content)
        if c.finish_reason:
            finish = c.finish_reason
out(session=raw.headers.get("x-turnkey-session"), parts=parts, finish=finish, usage=usage,
    objects=sorted(objects), roles=roles, content_type=raw.headers.get("content-type"))
"#,
            ),
            &tk.url,
            &tk.token,
            &[],
        )
        .await;
    let parts: Vec<&str> = out["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(parts.concat(), "Once upon a time.", "{out}");
    assert!(parts.len() >= 2, "the answer came in several deltas: {out}");
    assert_eq!(out["finish"], "stop");
    assert_eq!(out["objects"], json!(["chat.completion.chunk"]));
    assert_eq!(out["roles"], json!(["assistant"]));
    assert!(out["usage"]["total_tokens"].is_u64(), "{out}");
    assert!(out["content_type"]
        .as_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let session = out["session"].as_str().expect("X-Turnkey-Session");
    let transcript = roles_and_text(&tk.api().messages(session).await);
    assert_eq!(
        transcript.last().unwrap(),
        &("assistant".to_owned(), "Once upon a time.".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_3_openai_sdk_session_header_and_idempotent_replay() {
    let Some(sdk) = OpenAiSdk::find_or_skip("r2_3_openai_sdk_replay").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("only once"));
    let tk = start(&provider).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let call = script(
        r#"
headers = {"X-Turnkey-Session": os.environ["S"], "Idempotency-Key": "replay-1"}
results = []
for stream in (False, False, True):
    raw = client.chat.completions.with_raw_response.create(
        model="scripted-model", stream=stream, extra_headers=headers,
        messages=[{"role": "user", "content": "do it once"}])
    if stream:
        chunks = list(raw.parse())
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        rid = chunks[0].id
    else:
        r = raw.parse()
        text, rid = r.choices[0].message.content, r.id
    results.append({"session": raw.headers.get("x-turnkey-session"), "id": rid, "text": text})
out(results=results)
"#,
    );
    let out = sdk
        .run(&call, &tk.url, &tk.token, &[("S", session.as_str())])
        .await;
    let results = out["results"].as_array().unwrap();
    for r in results {
        assert_eq!(r["session"], json!(session), "{out}");
        assert_eq!(r["text"], "only once", "a replay answers the same: {out}");
        assert_eq!(r["id"], results[0]["id"], "the same admission: {out}");
    }
    assert_eq!(provider.request_count(), 1, "the input ran once");
    let users = api
        .messages(&session)
        .await
        .into_iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(users, 1, "one input in the transcript");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_1_openai_sdk_bad_token_is_an_authentication_error_and_models_are_listed() {
    let Some(sdk) = OpenAiSdk::find_or_skip("r2_1_openai_sdk_errors").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    let tk = start(&provider).await;
    let errors = script(
        r#"
res = {}
try:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    res["auth"] = "no error"
except openai.AuthenticationError as e:
    res["auth"] = {"class": type(e).__name__, "status": e.status_code, "code": e.code,
                   "type": e.type, "body": e.body}
good = openai.OpenAI(base_url=os.environ["TK_BASE_URL"] + "/v1",
                     api_key=os.environ["GOOD"], max_retries=0)
try:
    good.chat.completions.create(model="m", messages=[{"role": "assistant", "content": "x"}])
except openai.BadRequestError as e:
    res["bad"] = {"status": e.status_code, "code": e.code, "param": e.param, "type": e.type}
try:
    good.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                 extra_headers={"X-Turnkey-Session": "7f1b3c9e-0000-4000-8000-000000000000"})
except openai.NotFoundError as e:
    res["missing"] = {"status": e.status_code, "code": e.code}
res["models"] = [m.id for m in good.models.list()]
out(**res)
"#,
    );
    let out = sdk
        .run(&errors, &tk.url, "tk_wrong", &[("GOOD", tk.token.as_str())])
        .await;
    assert_eq!(out["auth"]["class"], "AuthenticationError", "{out}");
    assert_eq!(out["auth"]["status"], 401);
    assert_eq!(out["auth"]["code"], "unauthorized");
    assert_eq!(out["auth"]["type"], "authentication_error");
    assert_eq!(out["bad"]["status"], 400, "{out}");
    assert_eq!(out["bad"]["code"], "invalid_messages");
    assert_eq!(out["bad"]["type"], "invalid_request_error");
    assert_eq!(out["bad"]["param"], "messages[0].role");
    assert_eq!(out["missing"], json!({"status": 404, "code": "not_found"}));
    assert_eq!(
        out["models"],
        json!(["scripted-model", "direct/scripted-model"]),
        "each model, then each as a direct model"
    );
    assert_eq!(provider.request_count(), 0, "nothing reached the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_openai_client_gone_mid_stream_the_turn_still_finishes() {
    let Some(sdk) = OpenAiSdk::find_or_skip("r1_1_openai_client_gone").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    let words: Vec<String> = (0..12).map(|i| format!("w{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    provider.push(Reply::chunks(&words, Duration::from_millis(250)));
    let tk = start(&provider).await;
    let out = sdk
        .run(
            &script(
                r#"
raw = client.chat.completions.with_raw_response.create(
    model="scripted-model", stream=True, messages=[{"role": "user", "content": "long one"}])
stream = raw.parse()
seen = []
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        seen.append(chunk.choices[0].delta.content)
    if len(seen) >= 2:
        break
stream.close()
out(session=raw.headers.get("x-turnkey-session"), seen=seen)
"#,
            ),
            &tk.url,
            &tk.token,
            &[],
        )
        .await;
    assert_eq!(out["seen"].as_array().unwrap().len(), 2, "{out}");
    let session = out["session"].as_str().unwrap();
    let api = tk.api();
    let finished = wait_turn_finished(&api, session).await;
    assert_eq!(finished["data"]["result"], "completed", "{finished}");
    let transcript = roles_and_text(&api.messages(session).await);
    assert_eq!(
        transcript.last().unwrap(),
        &("assistant".to_owned(), words.concat()),
        "the whole answer is in the transcript"
    );
}

async fn wait_turn_finished(api: &Api, session: &str) -> Value {
    let what = format!("turn.finished in {session}");
    eventually(BOUND, &what, || async {
        let events = api.all_events(session, 0).await;
        events.into_iter().find(|e| e["kind"] == "turn.finished")
    })
    .await
}

/// Concurrent first calls for one `user` over plain HTTP: one session, every answer naming it.
async fn concurrent_first_calls_share_one_session(database: Option<&str>) {
    const CALLS: usize = 6;
    let provider = ScriptedProvider::start();
    for _ in 0..CALLS {
        provider.push(Reply::text("ok"));
    }
    let mut opts = TurnkeyOptions::new(&provider).extra_toml("[tools]\napproval = \"off\"\n");
    if let Some(url) = database {
        opts = opts.database(url);
    }
    let tk = Turnkey::start(opts).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let calls = (0..CALLS).map(|i| {
        let req = http
            .post(format!("{}/v1/chat/completions", tk.url))
            .bearer_auth(&tk.token)
            .timeout(BOUND)
            .json(&json!({"model": "scripted-model", "user": "racer",
                "messages": [{"role": "user", "content": format!("call {i}")}]}));
        async move {
            let res = req.send().await.expect("send");
            let status = res.status().as_u16();
            let session = res
                .headers()
                .get("x-turnkey-session")
                .map(|v| v.to_str().unwrap().to_owned());
            let body: Value = res.json().await.unwrap_or(Value::Null);
            (status, session, body)
        }
    });
    let answers = futures::future::join_all(calls).await;
    let first = answers[0].1.clone().expect("X-Turnkey-Session");
    for (status, session, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(session.as_deref(), Some(first.as_str()), "one session");
        assert_eq!(body["choices"][0]["message"]["content"], "ok");
    }
    let list = tk.api().get("/v1/sessions").await;
    assert_eq!(
        list.body["sessions"].as_array().unwrap().len(),
        1,
        "{}",
        list.text
    );
    let users = tk
        .api()
        .messages(&first)
        .await
        .into_iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(users, CALLS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_concurrent_first_calls_for_one_user_share_one_session_sqlite() {
    concurrent_first_calls_share_one_session(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_concurrent_first_calls_for_one_user_share_one_session_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    concurrent_first_calls_share_one_session(Some(db.url())).await;
}

/// Errors on these routes are OpenAI-shaped, keep turnkey's code, and never a 5xx for bad input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_openai_errors_have_the_openai_shape() {
    let provider = ScriptedProvider::start();
    let tk = start(&provider).await;
    let api = tk.api();
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"model": "m", "messages": []}), 400, "empty_input"),
        (json!({"model": "m"}), 400, "invalid_json"),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}),
            400,
            "unsupported_parameter",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}}]}]}),
            400,
            "unsupported_content",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            400,
            "invalid_attachment",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/cat.png"}}]}]}),
            400,
            "invalid_attachment",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "  "}]}),
            400,
            "empty_input",
        ),
        (
            json!({"model": "m", "owner": "root", "messages": [{"role": "user", "content": "x"}]}),
            400,
            "forbidden_field",
        ),
    ];
    for (body, status, code) in cases {
        let r = api.post("/v1/chat/completions", &body).await;
        assert_eq!(r.status, status, "{body}: {}", r.text);
        let e = &r.body["error"];
        assert_eq!(e["code"], code, "{}", r.text);
        assert_eq!(e["type"], "invalid_request_error", "{}", r.text);
        assert!(
            e["message"].is_string() && e.get("param").is_some(),
            "{}",
            r.text
        );
    }
    let r = api
        .try_send(
            reqwest::Method::POST,
            "/v1/chat/completions",
            Some(&json!({"model": "m", "messages": [{"role": "user", "content": "x"}]})),
            &[("Idempotency-Key", "has space")],
        )
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.body["error"]["code"].clone()),
        (400, json!("invalid_request_id")),
        "{}",
        r.text
    );
    let r = api.get("/v1/chat/completions").await;
    assert_eq!(r.status, 405, "{}", r.text);
    assert_eq!(r.body["error"]["type"], "invalid_request_error");
    let r = api.with_token(None).get("/v1/models").await;
    assert_eq!(r.status, 401, "{}", r.text);
    assert_eq!(r.body["error"]["type"], "authentication_error");
    assert_eq!(provider.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_openai_sdk_a_failed_turn_is_an_error_streamed_or_not() {
    let Some(sdk) = OpenAiSdk::find_or_skip("r1_1_openai_sdk_failed_turn").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.push(Reply::error(400, "bad_request"));
    provider.push(Reply::error(400, "bad_request"));
    let tk = Turnkey::start(
        TurnkeyOptions::new(&provider)
            .provider_toml("max_retries = 0")
            .extra_toml("[tools]\napproval = \"off\"\n"),
    )
    .await;
    let out = sdk
        .run(
            &script(
                r#"
res = {}
msgs = [{"role": "user", "content": "fail please"}]
try:
    client.chat.completions.create(model="m", user="u", messages=msgs)
    res["plain"] = "no error"
except openai.APIStatusError as e:
    res["plain"] = {"class": type(e).__name__, "status": e.status_code, "code": e.code,
                    "retry": e.response.headers.get("x-should-retry"),
                    "session": e.response.headers.get("x-turnkey-session")}
try:
    for _ in client.chat.completions.create(model="m", user="u", messages=msgs + [], stream=True,
                                            extra_headers={"Idempotency-Key": "s1"}):
        pass
    res["stream"] = "no error"
except openai.APIError as e:
    res["stream"] = {"class": type(e).__name__, "code": (e.body or {}).get("code")}
out(**res)
"#,
            ),
            &tk.url,
            &tk.token,
            &[],
        )
        .await;
    assert_eq!(out["plain"]["class"], "InternalServerError", "{out}");
    assert_eq!(out["plain"]["status"], 502);
    assert_eq!(out["plain"]["code"], "provider_client_error");
    assert_eq!(
        out["plain"]["retry"], "false",
        "admitted: the SDK must not resubmit"
    );
    assert!(out["plain"]["session"].is_string(), "{out}");
    assert_eq!(out["stream"]["class"], "APIError", "{out}");
    assert_eq!(out["stream"]["code"], "provider_client_error");
    assert_eq!(provider.request_count(), 2, "each input ran once");
}

/// The image parts of the user content of the provider's last request, as data URLs.
fn image_parts(provider: &ScriptedProvider) -> Vec<String> {
    image_urls(&last_user_content(provider))
}

/// Images through the OpenAI endpoint (issue 26): the official SDK sends a data URL, a plain
/// client an http URL fetched through the guard (`tools.fetch_allow` lets the loopback test
/// server through); both reach a vision model as image parts and stay in the transcript as
/// attachments. Too large is 413 `too_large`, a URL the guard refuses 400
/// `invalid_attachment`; neither admits anything.
async fn openai_images(database: Option<&str>) {
    let data_url = png_data_url();
    let provider = ScriptedProvider::start();
    let (picture, hits) = image_server(PNG);
    let opts = TurnkeyOptions::new(&provider)
        .provider_model("gpt-4o")
        .env("TURNKEY__SERVER__MAX_UPLOAD_BYTES", "4096")
        .extra_toml("[tools]\napproval = \"off\"\nfetch_allow = [\"127.0.0.1\"]\n");
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let tk = Turnkey::start(opts).await;
    let api = tk.api();

    // The official SDK, a data URL.
    if let Some(sdk) = OpenAiSdk::find_or_skip("r2_2_openai_sdk_image").await {
        provider.on_user_text_times("what is in this picture", Reply::text("a red dot"), 1);
        let call = script(
            r#"
raw = client.chat.completions.with_raw_response.create(
    model="gpt-4o",
    messages=[{"role": "user", "content": [
        {"type": "text", "text": "what is in this picture?"},
        {"type": "image_url", "image_url": {"url": os.environ["IMG"], "detail": "low"}}]}])
r = raw.parse()
out(session=raw.headers.get("x-turnkey-session"), text=r.choices[0].message.content)
"#,
        );
        let got = sdk
            .run(&call, &tk.url, &tk.token, &[("IMG", &data_url)])
            .await;
        assert_eq!(got["text"], "a red dot", "{got}");
        assert_eq!(image_parts(&provider), std::slice::from_ref(&data_url));
        let session = got["session"].as_str().unwrap();
        let user = api.messages(session).await[0].clone();
        assert_eq!(user["content"], "what is in this picture?", "{user}");
        assert_eq!(
            user["attachments"][0]["content_type"], "image/png",
            "{user}"
        );
    }

    // An http URL, fetched once; an image alone (no text) is an input too.
    provider.push(Reply::text("the same dot"));
    let r = api
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": picture}}]}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["choices"][0]["message"]["content"], "the same dot");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(image_parts(&provider), std::slice::from_ref(&data_url));

    // Refused, nothing admitted: too large inline, and a loopback URL not on the allow list.
    let before = provider.request_count();
    let big = format!(
        "data:image/png;base64,{}",
        turnkey_tests::files::b64(&[0u8; 5000])
    );
    let r = api
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "too big"},
                {"type": "image_url", "image_url": {"url": big}}]}]}),
        )
        .await;
    assert_eq!(r.status, 413, "{}", r.text);
    assert_eq!(r.body["error"]["code"], "too_large", "{}", r.text);
    let r = api
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "elsewhere"},
                {"type": "image_url", "image_url": {"url": "http://127.0.0.2:1/x.png"}}]}]}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.body["error"]["code"], "invalid_attachment", "{}", r.text);
    assert_eq!(provider.request_count(), before, "nothing ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_openai_image_parts_reach_a_vision_model_sqlite() {
    openai_images(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2_2_openai_image_parts_reach_a_vision_model_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    openai_images(Some(db.url())).await;
}

//! The Responses API (`/v1/responses`) on durable sessions, driven by the official `openai`
//! Python package where a client would use it and by plain HTTP where the test needs the
//! wire: a plain response and its retrieval, a stream whose deltas join to the stored answer
//! and that continues after `starting_after` without a repeat, a chain by
//! `previous_response_id` across a SIGKILL (the model seeing the whole history), a stateless
//! client's resent conversation (nothing in it runs again), idempotent replay, an `mcp_call`
//! item for a `terminal` run, `max_output_tokens` as `incomplete`, a background response
//! killed mid-answer that completes after the restart, cancel, delete, input items, and
//! another principal's id as 404. On SQLite and PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::openai_sdk::OpenAiSdk;
use turnkey_tests::wait::{eventually, BOUND};
use turnkey_tests::{pg, Reply, ScriptedProvider, Step, Turnkey, TurnkeyOptions};

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

async fn start(provider: &ScriptedProvider, database: Option<&str>) -> Turnkey {
    let mut o = TurnkeyOptions::new(provider).extra_toml("[tools]\napproval = \"off\"\n");
    if let Some(url) = database {
        o = o.database(url);
    }
    Turnkey::start(o).await
}

/// Every event of a streamed response (`POST` with `stream: true`, or `GET ?stream=true`),
/// as the JSON objects the frames carry, until the stream ends.
async fn read_stream(resp: reqwest::Response) -> Vec<Value> {
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = resp.bytes_stream().eventsource();
    let mut got = Vec::new();
    while let Ok(Some(item)) = tokio::time::timeout(BOUND, stream.next()).await {
        let ev = item.unwrap_or_else(|e| panic!("SSE parse error: {e}"));
        let data: Value = serde_json::from_str(&ev.data).unwrap_or(Value::Null);
        assert_eq!(
            ev.event,
            data["type"].as_str().unwrap_or("?"),
            "{}",
            ev.data
        );
        let last = matches!(
            data["type"].as_str(),
            Some("response.completed" | "response.failed" | "response.incomplete")
        );
        got.push(data);
        if last {
            break;
        }
    }
    got
}

fn http(tk: &Turnkey) -> (reqwest::Client, String, String) {
    (reqwest::Client::new(), tk.url.clone(), tk.token.clone())
}

async fn post_stream(tk: &Turnkey, body: Value) -> Vec<Value> {
    let (c, url, token) = http(tk);
    let resp = c
        .post(format!("{url}/v1/responses"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    read_stream(resp).await
}

async fn get_stream(tk: &Turnkey, id: &str, after: u64) -> Vec<Value> {
    let (c, url, token) = http(tk);
    let resp = c
        .get(format!(
            "{url}/v1/responses/{id}?stream=true&starting_after={after}"
        ))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    read_stream(resp).await
}

fn deltas(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap_or_default())
        .collect()
}

/// The text of the response's `message` items that completed.
fn answer(response: &Value) -> String {
    response["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "message" && i["status"] == "completed")
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .map(|c| c["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn sdk_round_trip(database: Option<&str>) {
    let Some(sdk) = OpenAiSdk::find_or_skip("r1_1_responses_sdk").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("Hello, Ada."));
    provider.push(Reply::chunks(
        &["Your name ", "is ", "Ada."],
        Duration::from_millis(20),
    ));
    let tk = start(&provider, database).await;
    let run = script(
        r#"
first = client.responses.create(model="scripted-model", input="My name is Ada.",
                                instructions="Answer briefly.", metadata={"k": "v"})
again = client.responses.retrieve(first.id)
deltas, kinds, seqs, final = [], [], [], None
with client.responses.create(model="scripted-model", input="What is my name?",
                             previous_response_id=first.id, stream=True) as stream:
    for ev in stream:
        kinds.append(ev.type)
        seqs.append(ev.sequence_number)
        if ev.type == "response.output_text.delta":
            deltas.append(ev.delta)
        if ev.type == "response.completed":
            final = ev.response
items = client.responses.input_items.list(first.id)
out(first=first.model_dump(), first_text=first.output_text, again=again.model_dump(),
    deltas=deltas, kinds=kinds, seqs=seqs, second=final.model_dump(), second_text=final.output_text,
    items=[i.model_dump() for i in items.data])
"#,
    );
    let got = sdk.run(&run, &tk.url, &tk.token, &[]).await;
    let first = &got["first"];
    assert!(first["id"].as_str().unwrap().starts_with("resp_"), "{got}");
    assert_eq!(first["object"], "response");
    assert_eq!(first["status"], "completed", "{first}");
    assert_eq!(got["first_text"], "Hello, Ada.");
    assert_eq!(first["metadata"], json!({"k": "v"}));
    assert_eq!(first["instructions"], "Answer briefly.");
    let u = &first["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["input_tokens"].as_u64().unwrap() + u["output_tokens"].as_u64().unwrap()
    );
    assert_eq!(
        got["again"]["output"], first["output"],
        "retrieval is the same"
    );
    assert_eq!(got["again"]["status"], "completed");

    // The stream: deltas join to the stored answer; sequence numbers count from 0.
    assert_eq!(got["second_text"], "Your name is Ada.", "{got}");
    let joined: String = got["deltas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert_eq!(joined, "Your name is Ada.");
    let seqs: Vec<u64> = got["seqs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>(), "{got}");
    let kinds: Vec<&str> = got["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"response.created"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"response.completed"), "{kinds:?}");
    for k in [
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    assert_eq!(got["second"]["previous_response_id"], first["id"]);
    assert_eq!(
        got["second"]["conversation"], first["conversation"],
        "the same session"
    );

    // The second call's model saw the first exchange and this response's instructions only
    // on the first.
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let first_sent = requests[0].body["messages"].to_string();
    assert!(first_sent.contains("Answer briefly."), "{first_sent}");
    let sent = requests[1].body["messages"].to_string();
    assert!(
        sent.contains("My name is Ada.") && sent.contains("Hello, Ada."),
        "{sent}"
    );
    assert!(
        !sent.contains("Answer briefly."),
        "instructions apply to one response: {sent}"
    );

    // The input items as given.
    let items = got["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{got}");
    assert_eq!(items[0]["role"], "user");
    assert_eq!(items[0]["content"][0]["text"], "My name is Ada.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_responses_sdk_plain_stream_chain_and_items_sqlite() {
    sdk_round_trip(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_responses_sdk_plain_stream_chain_and_items_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    sdk_round_trip(Some(db.url())).await;
}

/// A stream read again with `starting_after` continues exactly where the first reading was
/// cut: no event repeated, none missing, the same sequence numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_responses_stream_resumes_after_a_sequence_number_without_repeats() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::chunks(
        &["one ", "two ", "three"],
        Duration::from_millis(30),
    ));
    let tk = start(&provider, None).await;
    let all = post_stream(&tk, json!({"input": "count", "stream": true})).await;
    let id = all[0]["response"]["id"].as_str().unwrap().to_owned();
    assert_eq!(deltas(&all), "one two three");
    let done = all.last().unwrap();
    assert_eq!(done["type"], "response.completed");
    assert_eq!(answer(&done["response"]), "one two three");
    for cut in [0, 3, all.len() as u64 - 2] {
        let rest = get_stream(&tk, &id, cut).await;
        assert_eq!(rest.as_slice(), &all[cut as usize + 1..], "after {cut}");
    }
    // The whole replay equals the live stream.
    let (c, url, token) = http(&tk);
    let replay = read_stream(
        c.get(format!("{url}/v1/responses/{id}?stream=true"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(replay, all);
}

/// A stateless client resends the conversation: the messages before the last user message
/// start a new session's history and never run again; the same request under one
/// `Idempotency-Key` answers the same response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_responses_a_resent_conversation_seeds_the_session_and_replays_are_idempotent() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("It is blue."));
    let tk = start(&provider, None).await;
    let api = tk.api();
    let body = json!({"input": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What colour is the sky?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Blue."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "And the sea?"}]}
    ]});
    let first = api
        .try_send(
            reqwest::Method::POST,
            "/v1/responses",
            Some(&body),
            &[("Idempotency-Key", "k-1")],
        )
        .await
        .unwrap();
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.body["status"], "completed");
    assert_eq!(answer(&first.body), "It is blue.");
    let again = api
        .try_send(
            reqwest::Method::POST,
            "/v1/responses",
            Some(&body),
            &[("Idempotency-Key", "k-1")],
        )
        .await
        .unwrap();
    assert_eq!(again.body["id"], first.body["id"], "{}", again.text);
    assert_eq!(provider.request_count(), 1, "one model call in all");
    let sent = provider.requests()[0].body["messages"].clone();
    let roles: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"], "{sent}");
    assert!(sent.to_string().contains("You are terse."), "{sent}");
    let session = first.body["conversation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let transcript: Vec<(String, String)> = api
        .messages(&session)
        .await
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        transcript,
        [
            ("user".into(), "What colour is the sky?".into()),
            ("assistant".into(), "Blue.".into()),
            ("user".into(), "And the sea?".into()),
            ("assistant".into(), "It is blue.".into()),
        ]
    );
    // The same key with another input is a conflict, in OpenAI's shape.
    let other = json!({"input": "something else"});
    let clash = api
        .try_send(
            reqwest::Method::POST,
            "/v1/responses",
            Some(&other),
            &[("Idempotency-Key", "k-1")],
        )
        .await
        .unwrap();
    assert_eq!(clash.status, 409, "{}", clash.text);
    assert_eq!(clash.error_code(), Some("idempotency_conflict"));
}

/// A tool the agent runs is an `mcp_call` item with its output, before the answer;
/// `max_output_tokens` makes a cut answer `incomplete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_responses_show_tool_runs_as_mcp_calls_and_a_cut_answer_as_incomplete() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::tool_call(
        "call_1",
        "terminal",
        json!({"command": "echo tk-$((6*7))"}),
    ));
    provider.push(Reply::text("The command printed tk-42."));
    provider.push(Reply::cut_off("A long answer that the limit"));
    let tk = start(&provider, None).await;
    let api = tk.api();
    let r = api.post("/v1/responses", &json!({"input": "run it"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let output = r.body["output"].as_array().unwrap();
    assert_eq!(output.len(), 2, "{}", r.text);
    let call = &output[0];
    assert_eq!(call["type"], "mcp_call");
    assert_eq!(call["server_label"], "turnkey");
    assert_eq!(call["name"], "terminal");
    assert_eq!(call["status"], "completed", "{call}");
    assert!(
        call["arguments"].as_str().unwrap().contains("echo tk-"),
        "{call}"
    );
    assert!(call["output"].as_str().unwrap().contains("tk-42"), "{call}");
    assert_eq!(output[1]["type"], "message");
    assert_eq!(answer(&r.body), "The command printed tk-42.");

    let cut = api
        .post(
            "/v1/responses",
            &json!({"input": "go on", "max_output_tokens": 16,
            "previous_response_id": r.body["id"]}),
        )
        .await;
    assert_eq!(cut.body["status"], "incomplete", "{}", cut.text);
    assert_eq!(
        cut.body["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(cut.body["max_output_tokens"], 16);
    assert_eq!(
        provider.request_count(),
        3,
        "no continuation after the client's own limit"
    );
    assert_eq!(provider.requests()[2].body["max_tokens"], 16);
}

/// Cancel, delete, input items, bad input, and another principal's ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_responses_cancel_delete_and_other_principals() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::Steps(vec![Step::text("Thinking"), Step::Gate]));
    let tk = start(&provider, None).await;
    let api = tk.api();
    let bg = api
        .post(
            "/v1/responses",
            &json!({"input": "slow", "background": true}),
        )
        .await;
    assert_eq!(bg.status, 200, "{}", bg.text);
    assert!(
        matches!(bg.body["status"].as_str(), Some("queued" | "in_progress")),
        "{}",
        bg.text
    );
    assert_eq!(bg.body["background"], true);
    let id = bg.str_field("id");
    provider.wait_for_requests(1, BOUND).await.unwrap();
    let cancelled = api
        .post(&format!("/v1/responses/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    assert_eq!(cancelled.body["status"], "cancelled", "{}", cancelled.text);
    assert_eq!(
        api.get(&format!("/v1/responses/{id}")).await.body["status"],
        "cancelled"
    );

    // Another principal sees none of it, and cannot continue it.
    let made = api.post("/v1/tokens", &json!({"name": "other"})).await;
    let other = api.with_token(Some(&made.str_field("token")));
    for path in [
        format!("/v1/responses/{id}"),
        format!("/v1/responses/{id}/input_items"),
    ] {
        let r = other.get(&path).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
        assert_eq!(r.error_code(), Some("not_found"));
    }
    let r = other
        .post(
            "/v1/responses",
            &json!({"input": "hi", "previous_response_id": id}),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(
        other
            .post(&format!("/v1/responses/{id}/cancel"), &json!({}))
            .await
            .status,
        404
    );

    // Delete: 404 from then on; the session keeps its messages.
    let d = api
        .try_send(
            reqwest::Method::DELETE,
            &format!("/v1/responses/{id}"),
            None,
            &[],
        )
        .await
        .unwrap();
    assert_eq!(d.status, 200, "{}", d.text);
    assert_eq!(
        d.body,
        json!({"id": id, "object": "response", "deleted": true})
    );
    assert_eq!(api.get(&format!("/v1/responses/{id}")).await.status, 404);
    let session = bg.body["conversation"]["id"].as_str().unwrap().to_owned();
    assert!(!api.messages(&session).await.is_empty());

    // Bad input, in OpenAI's shape, nothing admitted.
    for (body, code) in [
        (json!({}), "empty_input"),
        (json!({"input": []}), "empty_input"),
        (json!({"input": 7}), "invalid_input"),
        (
            json!({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": {}}]}),
            "unsupported_parameter",
        ),
        (
            json!({"input": "x", "metadata": {"k": 1}}),
            "invalid_metadata",
        ),
        (
            json!({"input": "x", "max_output_tokens": 0}),
            "invalid_field",
        ),
        (json!({"input": "x", "owner": "root"}), "forbidden_field"),
        (
            json!({"input": "x", "previous_response_id": "resp_nope"}),
            "not_found",
        ),
    ] {
        let r = api.post("/v1/responses", &body).await;
        assert!(
            r.status == 400 || r.status == 404,
            "{body}: {} {}",
            r.status,
            r.text
        );
        assert_eq!(r.error_code(), Some(code), "{body}: {}", r.text);
        assert!(
            r.body["error"]["type"].is_string(),
            "OpenAI's shape: {}",
            r.text
        );
    }
    provider.release_hangs();
}

/// A chain of three responses across a SIGKILL, and a background response killed mid-answer
/// that completes after the restart and is read back by id.
async fn survives_a_kill(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_user_text("first", Reply::text("one"));
    provider.on_user_text("second", Reply::text("two"));
    provider.on_user_text_times(
        "third",
        Reply::Steps(vec![Step::text("thr"), Step::Gate, Step::text("ee")]),
        1,
    );
    provider.on_user_text("third", Reply::text("three"));
    let mut tk = start(&provider, database).await;
    let api = tk.api();
    let first = api.post("/v1/responses", &json!({"input": "first"})).await;
    assert_eq!(first.body["status"], "completed", "{}", first.text);
    let second = api
        .post(
            "/v1/responses",
            &json!({"input": "second", "previous_response_id": first.body["id"]}),
        )
        .await;
    assert_eq!(answer(&second.body), "two", "{}", second.text);
    let third = api
        .post(
            "/v1/responses",
            &json!({"input": "third", "background": true,
            "previous_response_id": second.body["id"]}),
        )
        .await;
    let id = third.str_field("id");
    eventually(BOUND, "the third answer streaming", || async {
        (provider.request_count() >= 3).then_some(())
    })
    .await;
    tk.restart().await;
    let api = tk.api();
    let done = eventually(
        BOUND,
        "the third response completed after the restart",
        || async {
            let r = api.get(&format!("/v1/responses/{id}")).await;
            (r.body["status"] == "completed").then_some(r)
        },
    )
    .await;
    assert_eq!(answer(&done.body), "three", "{}", done.text);
    // The resumed model call saw the whole chain.
    let last = provider.requests().last().unwrap().body["messages"].to_string();
    for said in ["first", "one", "second", "two", "third"] {
        assert!(last.contains(said), "{said} missing: {last}");
    }
    provider.release_hangs();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_r13_9_responses_survive_a_kill_sqlite() {
    survives_a_kill(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_r13_9_responses_survive_a_kill_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    survives_a_kill(Some(db.url())).await;
}

/// A stateless client (no `user`, no session named) resends its conversation on the chat
/// door: each request continues the session whose transcript is what it resent, the model
/// sees the conversation, and nothing runs twice; an edited history starts a new session
/// seeded with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_a_stateless_chat_client_continues_its_conversation() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("Hi Bob."));
    provider.push(Reply::text("You are Bob."));
    provider.push(Reply::text("You said Robert."));
    let tk = start(&provider, None).await;
    let api = tk.api();
    let ask = |messages: Value| {
        let api = api.clone();
        async move {
            let r = api
                .post(
                    "/v1/chat/completions",
                    &json!({"model": "m", "messages": messages}),
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.text);
            let text = r.body["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned();
            (text, r)
        }
    };
    let sys = json!({"role": "system", "content": "Be kind."});
    let (a1, _) = ask(json!([sys, {"role": "user", "content": "I am Bob."}])).await;
    assert_eq!(a1, "Hi Bob.");
    let first_session = session_of(&api, 1).await;
    let (a2, _) = ask(json!([sys, {"role": "user", "content": "I am Bob."},
        {"role": "assistant", "content": a1}, {"role": "user", "content": "Who am I?"}]))
    .await;
    assert_eq!(a2, "You are Bob.");
    assert_eq!(
        session_of(&api, 1).await,
        first_session,
        "the same session goes on"
    );
    let sent = provider.requests()[1].body["messages"].to_string();
    assert!(
        sent.contains("I am Bob.") && sent.contains("Hi Bob.") && sent.contains("Be kind."),
        "{sent}"
    );
    let roles: Vec<String> = api
        .messages(&first_session)
        .await
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "user", "assistant"],
        "nothing twice"
    );

    // The client edited an answer: not this session's conversation; a new one, seeded.
    let (a3, _) = ask(json!([{"role": "user", "content": "I am Bob."},
        {"role": "assistant", "content": "Hello Robert."}, {"role": "user", "content": "What did you call me?"}]))
    .await;
    assert_eq!(a3, "You said Robert.");
    let sent = provider.requests()[2].body["messages"].to_string();
    assert!(
        sent.contains("Hello Robert.") && !sent.contains("Who am I?"),
        "{sent}"
    );
    assert_eq!(provider.request_count(), 3);
}

/// The newest session's id (the operator lists every session, newest first), once `n` exist.
async fn session_of(api: &turnkey_tests::Api, n: usize) -> String {
    let list = api.get("/v1/sessions").await;
    let sessions = list.body["sessions"].as_array().unwrap().clone();
    assert!(sessions.len() >= n, "{}", list.text);
    sessions[0]["id"].as_str().unwrap().to_owned()
}

/// The same on the Responses door, with the input items a stateless client resends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_a_stateless_responses_client_continues_its_conversation() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("Noted: 7."));
    provider.push(Reply::text("It was 7."));
    let tk = start(&provider, None).await;
    let api = tk.api();
    let r1 = api
        .post("/v1/responses", &json!({"input": "Remember 7."}))
        .await;
    assert_eq!(answer(&r1.body), "Noted: 7.", "{}", r1.text);
    let r2 = api
        .post(
            "/v1/responses",
            &json!({"input": [
            {"role": "user", "content": "Remember 7."},
            r1.body["output"][0],
            {"role": "user", "content": "What was it?"}]}),
        )
        .await;
    assert_eq!(answer(&r2.body), "It was 7.", "{}", r2.text);
    assert_eq!(
        r2.body["conversation"], r1.body["conversation"],
        "the same session"
    );
    let session = r1.body["conversation"]["id"].as_str().unwrap().to_owned();
    assert_eq!(api.messages(&session).await.len(), 4, "nothing twice");
    let sent = provider.requests()[1].body["messages"].to_string();
    assert!(
        sent.contains("Remember 7.") && sent.contains("Noted: 7."),
        "{sent}"
    );
}

/// An approval the turn waits for is an `mcp_approval_request` item; an
/// `mcp_approval_response` with `previous_response_id` decides it, and the answer is the
/// response that asked, gone on to its end; sent again, it answers the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_responses_an_approval_is_asked_and_answered_in_the_chain() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::tool_call(
        "call_a",
        "terminal",
        json!({"command": "echo approved-run"}),
    ));
    provider.push(Reply::text("It ran."));
    let tk = Turnkey::start(
        TurnkeyOptions::new(&provider).extra_toml("[tools]\napproval = \"always\"\n"),
    )
    .await;
    let api = tk.api();
    let r1 = api
        .post(
            "/v1/responses",
            &json!({"input": "run it", "background": true}),
        )
        .await;
    let id = r1.str_field("id");
    let waiting = eventually(BOUND, "an mcp_approval_request item", || async {
        let r = api.get(&format!("/v1/responses/{id}")).await;
        let asked = r.body["output"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|i| i["type"] == "mcp_approval_request");
        asked.then_some(r)
    })
    .await;
    assert_eq!(
        waiting.body["status"], "in_progress",
        "nothing fails: {}",
        waiting.text
    );
    let request = waiting.body["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "mcp_approval_request")
        .unwrap()
        .clone();
    assert_eq!(request["name"], "terminal");
    assert_eq!(request["server_label"], "turnkey");
    assert!(
        request["arguments"]
            .as_str()
            .unwrap()
            .contains("approved-run"),
        "{request}"
    );

    let answer_body = json!({"previous_response_id": id, "input": [
        {"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": true}]});
    let done = api.post("/v1/responses", &answer_body).await;
    assert_eq!(done.status, 200, "{}", done.text);
    assert_eq!(
        done.body["id"],
        json!(id),
        "the response that asked goes on"
    );
    assert_eq!(done.body["status"], "completed", "{}", done.text);
    let kinds: Vec<&str> = done.body["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["mcp_approval_request", "mcp_call", "message"],
        "{}",
        done.text
    );
    assert!(done.body["output"][1]["output"]
        .as_str()
        .unwrap()
        .contains("approved-run"));
    assert_eq!(answer(&done.body), "It ran.");
    // Sent again (a client retrying): the same response, nothing run twice.
    let again = api.post("/v1/responses", &answer_body).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body["output"], done.body["output"]);
    assert_eq!(provider.request_count(), 2);
    // Without the response that asked it is refused.
    let orphan = api
        .post(
            "/v1/responses",
            &json!({"input": [{"type": "mcp_approval_response",
            "approval_request_id": request["id"], "approve": true}]}),
        )
        .await;
    assert_eq!(orphan.status, 400, "{}", orphan.text);
    assert_eq!(orphan.error_code(), Some("invalid_input"));
}

/// `direct/<model>` answers a client's side task from the model itself: listed after the
/// session models, no session made, the request's messages as they are (no agent prompt, no
/// tools), streamed or not, and its tokens counted in the caller's daily quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_direct_models_answer_side_tasks_without_a_session() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("Weekend plans"));
    provider.push(Reply::chunks(
        &["Beach ", "trip"],
        Duration::from_millis(10),
    ));
    let tk =
        Turnkey::start(TurnkeyOptions::new(&provider).extra_toml("[limits]\ntokens_per_day = 1\n"))
            .await;
    let api = tk.api();
    let models = api.get("/v1/models").await;
    let ids: Vec<&str> = models.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["scripted-model", "direct/scripted-model"],
        "{}",
        models.text
    );

    let made = api.post("/v1/tokens", &json!({"name": "webui"})).await;
    let client = api.with_token(Some(&made.str_field("token")));
    let task = json!([
        {"role": "system", "content": "You write titles."},
        {"role": "user", "content": "### Task:\nGenerate a concise title for: what shall we do this weekend?"}
    ]);
    let r = client
        .post(
            "/v1/chat/completions",
            // The shape of Open WebUI's title task (backend/open_webui/routers/tasks.py): one
            // request, not streamed, `max_completion_tokens`, its own `metadata`.
            &json!({"model": "direct/scripted-model", "messages": task, "stream": false,
                "max_completion_tokens": 1000,
                "metadata": {"task": "title_generation", "chat_id": "c-1", "task_body": {}}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["choices"][0]["message"]["content"], "Weekend plans");
    assert_eq!(r.body["model"], "direct/scripted-model");
    let sent = &provider.requests()[0].body;
    assert_eq!(
        sent["messages"], task,
        "the messages as they are, nothing added"
    );
    assert!(
        sent.get("tools")
            .is_none_or(|t| t.as_array().is_none_or(|a| a.is_empty())),
        "{sent}"
    );
    assert_eq!(
        api.get("/v1/sessions").await.body["sessions"]
            .as_array()
            .unwrap()
            .len(),
        0,
        "no session"
    );

    // Its tokens count: the quota of 1 is used up, so the next call is refused.
    let over = client
        .post(
            "/v1/chat/completions",
            &json!({"model": "direct/scripted-model", "messages": task}),
        )
        .await;
    assert_eq!(over.status, 429, "{}", over.text);
    assert_eq!(over.error_code(), Some("quota_exceeded"));

    // The operator (exempt) streams one.
    let (c, url, token) = http(&tk);
    let resp = c
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(token)
        .json(&json!({"model": "direct/scripted-model", "messages": task, "stream": true}))
        .send()
        .await
        .unwrap();
    let body = resp.text().await.unwrap();
    let text: String = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "Beach trip", "{body}");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");

    let unknown = api
        .post(
            "/v1/chat/completions",
            &json!({"model": "direct/nope", "messages": task}),
        )
        .await;
    assert_eq!(unknown.status, 400, "{}", unknown.text);
    assert_eq!(unknown.error_code(), Some("invalid_model"));
}

/// A chat front-end that always sends its own tools (Open WebUI's page chat) is answered with
/// the agent's own tools by default (`[openai] client_tools = "ignore"`): the model is not
/// offered the client's; with `"refuse"` the request is `400 unsupported_parameter`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_chat_client_tools_are_ignored_by_default_and_refused_when_configured() {
    let tools = json!([{"type": "function", "function": {"name": "get_current_timestamp",
        "description": "Get the current Unix timestamp in seconds.",
        "parameters": {"type": "object", "properties": {}, "required": []}}}]);
    let body = json!({"model": "scripted-model", "stream": false, "tools": tools,
        "messages": [{"role": "user", "content": "hello"}]});
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("Hello!"));
    let tk = start(&provider, None).await;
    let r = tk.api().post("/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["choices"][0]["message"]["content"], "Hello!");
    let offered = provider.requests()[0].body["tools"].to_string();
    assert!(!offered.contains("get_current_timestamp"), "{offered}");

    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(
        TurnkeyOptions::new(&provider).extra_toml("[openai]\nclient_tools = \"refuse\"\n"),
    )
    .await;
    let r = tk.api().post("/v1/chat/completions", &body).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.error_code(), Some("unsupported_parameter"));
    assert_eq!(provider.request_count(), 0);
}

/// Input images become attachments as on the other doors (a data URL, and a `file_id` of an
/// upload), the model seeing them; `conversation` names the session to continue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_responses_take_input_images_and_continue_a_named_conversation() {
    use turnkey_tests::files::{image_urls, last_user_content, png_data_url, PNG};
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("a red dot"));
    provider.push(Reply::text("the same dot"));
    let tk = Turnkey::start(
        TurnkeyOptions::new(&provider)
            .provider_model("gpt-4o")
            .extra_toml("[tools]\napproval = \"off\"\n"),
    )
    .await;
    let api = tk.api();
    let data_url = png_data_url();
    let r = api
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "what is in this picture?"},
            {"type": "input_image", "image_url": data_url, "detail": "low"}]}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(answer(&r.body), "a red dot");
    assert_eq!(
        image_urls(&last_user_content(&provider)),
        std::slice::from_ref(&data_url)
    );
    let session = r.body["conversation"]["id"].as_str().unwrap().to_owned();
    let user = api.messages(&session).await[0].clone();
    assert_eq!(
        user["attachments"][0]["content_type"], "image/png",
        "{user}"
    );
    // The input items do not repeat the inline image.
    let items = api
        .get(&format!("/v1/responses/{}/input_items", r.str_field("id")))
        .await;
    assert!(!items.text.contains("base64"), "{}", items.text);

    // An upload by file id, in the session named by `conversation`.
    let file = api
        .send_raw(
            "/v1/files?name=dot.png",
            "application/octet-stream",
            PNG.to_vec(),
        )
        .await;
    assert_eq!(file.status, 201, "{}", file.text);
    let r2 = api
        .post(
            "/v1/responses",
            &json!({"model": "gpt-4o", "conversation": session,
            "input": [{"role": "user", "content": [
                {"type": "input_text", "text": "and this one?"},
                {"type": "input_image", "file_id": file.str_field("file_id")}]}]}),
        )
        .await;
    assert_eq!(r2.status, 200, "{}", r2.text);
    assert_eq!(r2.body["conversation"]["id"], json!(session));
    assert_eq!(answer(&r2.body), "the same dot");
    assert_eq!(image_urls(&last_user_content(&provider)).len(), 1);
    assert_eq!(api.messages(&session).await.len(), 4);
    // Someone else's conversation is 404.
    let made = api.post("/v1/tokens", &json!({"name": "other"})).await;
    let other = api.with_token(Some(&made.str_field("token")));
    let r = other
        .post(
            "/v1/responses",
            &json!({"input": "hi", "conversation": {"id": session}}),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
}

/// The `llm` CLI, a real stateless client: `llm -c` resends the conversation, and turnkey
/// continues the one session, the model seeing the history once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_the_llm_cli_continues_its_conversation_in_one_session() {
    let Some(llm) = turnkey_tests::llm_cli::LlmCli::find_or_skip("r1_1_the_llm_cli").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("Hello, Ada."));
    provider.push(Reply::chunks(
        &["Your name ", "is Ada."],
        Duration::from_millis(10),
    ));
    let tk = start(&provider, None).await;
    llm.point_at(&format!("{}/v1", tk.url), "scripted-model");
    let first = llm
        .run(&tk.token, &["-m", "turnkey", "My name is Ada."])
        .await;
    assert_eq!(first.trim(), "Hello, Ada.", "{} ({})", first, llm.version);
    let second = llm.run(&tk.token, &["-c", "What is my name?"]).await;
    assert_eq!(second.trim(), "Your name is Ada.");
    let api = tk.api();
    let sessions = api.get("/v1/sessions").await.body["sessions"].clone();
    assert_eq!(
        sessions.as_array().unwrap().len(),
        1,
        "one session: {sessions}"
    );
    let session = sessions[0]["id"].as_str().unwrap();
    assert_eq!(api.messages(session).await.len(), 4, "nothing twice");
    let sent = provider.requests()[1].body["messages"].to_string();
    assert!(
        sent.contains("My name is Ada.") && sent.contains("Hello, Ada."),
        "{sent}"
    );
}

/// Two chats of one client that began alike stay apart when the client names its chats
/// (Open WebUI's `X-OpenWebUI-Chat-Id`): each follow-up continues its own session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_a_client_chat_id_keeps_two_alike_chats_apart() {
    let provider = ScriptedProvider::start();
    for _ in 0..4 {
        provider.push(Reply::text("Hi."));
    }
    let tk = start(&provider, None).await;
    let (c, url, token) = http(&tk);
    let ask = |chat: &'static str, messages: Value| {
        let (c, url, token) = (c.clone(), url.clone(), token.clone());
        async move {
            let r = c
                .post(format!("{url}/v1/chat/completions"))
                .bearer_auth(token)
                .header("X-OpenWebUI-Chat-Id", chat)
                .json(&json!({"model": "m", "messages": messages}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200);
            r.headers()["x-turnkey-session"]
                .to_str()
                .unwrap()
                .to_owned()
        }
    };
    let first = json!([{"role": "user", "content": "hi"}]);
    let a = ask("chat-a", first.clone()).await;
    let b = ask("chat-b", first).await;
    assert_ne!(a, b);
    let follow = |who: &str| {
        json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": format!("I am {who}")}])
    };
    assert_eq!(
        ask("chat-a", follow("A")).await,
        a,
        "chat A goes on in its session"
    );
    assert_eq!(
        ask("chat-b", follow("B")).await,
        b,
        "chat B goes on in its session"
    );
    let api = tk.api();
    assert_eq!(api.messages(&a).await.len(), 4);
    assert_eq!(api.messages(&b).await.len(), 4);
}

//! A cut-off answer is still an answer (SPEC R10.2, R7.2, R8.5), on every door: the scripted
//! provider answers `finish_reason: "length"` three times, one more than the continuations
//! allowed, and the joined text is the turn's final response with `stop_reason: "truncated"`:
//! in the HTTP receipt and the event stream (`message.complete`, `turn.finished`), as the
//! assistant row, on the OpenAI-compatible endpoint (streamed and not, `finish_reason:
//! "length"`), in a platform reply through the outbox, and in `turnkey chat`. A local server
//! continues the answer from a prefill, with no instruction to echo (issue 38); where the wire
//! has no prefill, a model that echoes turnkey's instruction back has that echo dropped, from
//! the stream too, and the parts join at a word boundary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use turnkey_tests::chat_pty::{chat_command, ChatPty};
use turnkey_tests::webhooks::{generic_message, Webhooks, GENERIC_SECRET};
use turnkey_tests::{Api, FakePlatform, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;
const PARTS: [&str; 3] = [
    "Once upon a time, ",
    "a small model wrote ",
    "until it was cut",
];
const JOINED: &str = "Once upon a time, a small model wrote until it was cut";

/// Three answers cut off by the output limit: the first and two continuations.
fn push_cut_off(provider: &ScriptedProvider) {
    for part in PARTS {
        provider.push(Reply::cut_off(part));
    }
}

async fn start(provider: &ScriptedProvider, extra_toml: &str) -> Turnkey {
    let toml = format!("[tools]\napproval = \"off\"\n{extra_toml}");
    Turnkey::start(TurnkeyOptions::new(provider).extra_toml(&toml)).await
}

/// The session's event of `kind`, the last one.
fn last_of<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    events
        .iter()
        .rev()
        .find(|e| e["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}: {events:?}"))
}

/// The text of every `message.delta` of the session, in order.
fn streamed(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["kind"] == "message.delta")
        .map(|e| e["data"]["text"].as_str().unwrap_or_default())
        .collect()
}

/// The session's last row is the assistant's `text`.
async fn answered_with(api: &Api, session: &str, text: &str) {
    let msgs = api.messages(session).await;
    let last = msgs.last().unwrap();
    assert_eq!(
        (last["role"].as_str(), last["content"].as_str()),
        (Some("assistant"), Some(text)),
        "{msgs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_2_a_cut_off_answer_is_the_answer_on_the_receipt_and_the_event_stream() {
    let provider = ScriptedProvider::start();
    push_cut_off(&provider);
    let tk = start(&provider, "").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "hello").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    let outcome = &adm["outcome"];
    assert_eq!(outcome["result"], "completed", "{adm}");
    assert_eq!(outcome["final_response"], JOINED, "{adm}");
    assert_eq!(outcome["stop_reason"], "truncated", "{adm}");
    assert_eq!(outcome["failure_reason"], Value::Null, "{adm}");
    assert_eq!(provider.request_count(), 3, "two continuations, no more");

    let events = api.all_events(&s, 0).await;
    let complete = last_of(&events, "message.complete");
    assert_eq!(complete["data"]["text"], JOINED);
    assert_eq!(complete["data"]["stop_reason"], "truncated");
    let finished = last_of(&events, "turn.finished");
    assert_eq!(finished["data"]["result"], "completed");
    assert_eq!(finished["data"]["stop_reason"], "truncated");
    assert!(
        finished["data"].get("failure_reason").is_none(),
        "{finished}"
    );
    assert_eq!(streamed(&events), JOINED, "the parts streamed once each");
    answered_with(&api, &s, JOINED).await;
}

/// `data:` payloads of an SSE body, `[DONE]` left out.
fn chunks(sse: &str) -> Vec<Value> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_2_a_cut_off_answer_is_finish_reason_length_on_the_openai_endpoint() {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "").await;
    let api = tk.api();
    let ask = |stream: bool| {
        json!({"model": "scripted-model", "stream": stream, "user": format!("u-{stream}"),
               "messages": [{"role": "user", "content": "hello"}]})
    };

    push_cut_off(&provider);
    let r = api.post("/v1/chat/completions", &ask(false)).await;
    assert_eq!(r.status, 200, "an answer, not an error: {}", r.text);
    let choice = &r.body["choices"][0];
    assert_eq!(choice["message"]["content"], JOINED, "{}", r.text);
    assert_eq!(choice["finish_reason"], "length", "{}", r.text);

    push_cut_off(&provider);
    let r = api.post("/v1/chat/completions", &ask(true)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let frames = chunks(&r.text);
    assert!(
        frames.iter().all(|f| f.get("error").is_none()),
        "{}",
        r.text
    );
    let text: String = frames
        .iter()
        .filter_map(|f| f["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, JOINED, "{}", r.text);
    let finish: Vec<&Value> = frames
        .iter()
        .map(|f| &f["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [&json!("length")], "{}", r.text);
    assert!(r.text.trim_end().ends_with("data: [DONE]"), "{}", r.text);
    assert_eq!(provider.request_count(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_2_a_cut_off_answer_is_the_platform_reply() {
    let provider = ScriptedProvider::start();
    push_cut_off(&provider);
    let platform = FakePlatform::webhook(GENERIC_SECRET);
    let tk = start(&provider, &platform.config_toml("")).await;
    let hooks = Webhooks::new(&tk.url);
    let (r, _) = hooks
        .generic(&generic_message("room-1", "m-1", "alice", "hello"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["outcome"], "admitted", "{}", r.text);
    let replies = platform.wait_accepted(&["reply"], 1, BOUND).await.unwrap();
    assert_eq!(
        replies[0].body,
        json!({"chat_id": "room-1", "text": JOINED, "in_reply_to": "m-1", "final": true}),
        "the answer, not a failure line"
    );
    let a = r.body["receipt"]["admission_id"].as_str().unwrap();
    let adm = tk.api().wait_terminal(a, BOUND).await;
    assert_eq!(adm["outcome"]["stop_reason"], "truncated", "{adm}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_2_turnkey_chat_shows_a_cut_off_answer_as_completed_truncated() {
    let provider = ScriptedProvider::start();
    push_cut_off(&provider);
    let tk = start(&provider, "").await;
    let args = ["--url", tk.url.as_str(), "--token", tk.token.as_str()];
    let mut pty = ChatPty::spawn(chat_command(&args, tk.dir.path()));
    tokio::task::block_in_place(|| {
        pty.expect("you> ");
        pty.send_line("hello");
        pty.expect(JOINED);
        let line = pty.expect("you> ");
        assert!(
            line.contains("[completed (truncated) | tokens: "),
            "{line:?}"
        );
        pty.ctrl_d();
        assert_eq!(pty.exit_code(BOUND), 0, "{}", pty.output());
    });
    assert_eq!(pty.count(JOINED), 1, "{}", pty.output());
}

/// The session's one turn answered; its outcome.
async fn answer_of(api: &Api, s: &str) -> Value {
    let a = api.submit_accepted(s, "hello").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    adm["outcome"].clone()
}

/// Where the wire has no prefill (Claude 4.6 and later refuse one, so Anthropic's default),
/// an instruction asks for the rest: its echo, whole or its first sentence, is dropped, from
/// the stream too, and the parts join at a word boundary ("half," + "and" is "half, and").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_2_a_continuation_that_echoes_the_instruction_loses_the_echo() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::cut_off_anthropic("The first half,"));
    // The model says turnkey's instruction back, then continues.
    provider.push(Reply::EchoThen("and the second half".into()));
    provider.push(Reply::cut_off_anthropic("I was impressed"));
    provider.push(Reply::text(
        "Your previous response was cut off by the output limit.\n\nThe end.",
    ));
    let tk = Turnkey::start(
        TurnkeyOptions::new(&provider)
            .provider_kind("anthropic")
            .extra_toml("[tools]\napproval = \"off\"\n"),
    )
    .await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let answer = "The first half, and the second half";
    let outcome = answer_of(&api, &s).await;
    assert_eq!(outcome["final_response"], answer, "{outcome}");
    assert_eq!(outcome["stop_reason"], "stop", "{outcome}");

    // The instruction was sent, and echoed, but shown nowhere.
    let reqs = provider.requests();
    assert_eq!(reqs.len(), 2);
    let instruction = reqs[1].last_user_text.clone();
    assert!(instruction.contains("cut off"), "{instruction}");
    let events = api.all_events(&s, 0).await;
    assert_eq!(streamed(&events), answer, "no echo in the stream");
    assert_eq!(last_of(&events, "message.complete")["data"]["text"], answer);
    answered_with(&api, &s, answer).await;

    // A reply that opens with the instruction's first sentence only loses it too; a new
    // message after "impressed" starts with a word, which gets its space.
    let s2 = api.create_session_id().await;
    let joined = "I was impressed The end.";
    assert_eq!(answer_of(&api, &s2).await["final_response"], joined);
    let events = api.all_events(&s2, 0).await;
    assert_eq!(streamed(&events), joined);
    let msgs = [api.messages(&s).await, api.messages(&s2).await].concat();
    assert!(
        msgs.iter().all(|m| !m["content"]
            .as_str()
            .unwrap_or_default()
            .contains("output limit")),
        "{msgs:?}"
    );
}

/// A local OpenAI-compatible server (llama.cpp, Ollama, vLLM) takes a prefill: the partial
/// answer goes back as the last, assistant message, with `continue_final_message`, and no
/// instruction the model could echo; the parts join as the model spaced them, and a server
/// that sends the prefill back before the new text (llama.cpp, not streamed) has it dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r10_2_a_local_model_continues_a_cut_off_answer_from_a_prefill() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::cut_off("The first half, I was impressed "));
    provider.push(Reply::text(" by the second."));
    let tk = start(&provider, "").await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let answer = "The first half, I was impressed by the second.";
    let outcome = answer_of(&api, &s).await;
    assert_eq!(outcome["final_response"], answer, "{outcome}");
    let events = api.all_events(&s, 0).await;
    assert_eq!(streamed(&events), answer);
    answered_with(&api, &s, answer).await;

    let reqs = provider.requests();
    assert_eq!(reqs.len(), 2);
    let body = &reqs[1].body;
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "assistant", "content": "The first half, I was impressed"}),
        "the answer so far is the prefill: {body}"
    );
    assert_eq!(body["continue_final_message"], true, "{body}");
    assert_eq!(body["add_generation_prompt"], false, "{body}");
    assert_eq!(
        messages.iter().filter(|m| m["role"] == "user").count(),
        1,
        "no instruction: {body}"
    );

    // A server that answers with the prefill and the new text.
    provider.push(Reply::cut_off("Once upon a time,"));
    provider.push(Reply::text("Once upon a time, there was a fox."));
    let s2 = api.create_session_id().await;
    let told = "Once upon a time, there was a fox.";
    assert_eq!(answer_of(&api, &s2).await["final_response"], told);
    assert_eq!(streamed(&api.all_events(&s2, 0).await), told);
}

//! A stream that breaks after text was shown (SPEC R8.2, R10.2): the retry asks for a
//! non-streamed answer so nothing is shown twice, and when that answer comes back empty the
//! final answer is recovered from the text already streamed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;

/// An OpenAI stream that says `text` and then turns to garbage.
fn broken_after(text: &str) -> Reply {
    let chunk = json!({"id": "chatcmpl-b", "object": "chat.completion.chunk", "created": 0,
        "model": "scripted-model",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
            "finish_reason": null}]});
    Reply::Malformed(format!("data: {chunk}\n\ndata: {{this is not json\n\n").into_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_2_r10_2_a_broken_stream_retries_unstreamed_and_keeps_the_streamed_answer() {
    let provider = ScriptedProvider::start();
    provider.push(broken_after("The answer is forty-two."));
    provider.push(Reply::text(""));
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "what is the answer?").await;
    let adm = api.wait_terminal(&a, BOUND).await;
    assert_eq!(
        adm["outcome"]["result"],
        "completed",
        "{adm}\n{}",
        tk.log_tail(30)
    );
    assert_eq!(
        adm["outcome"]["final_response"], "The answer is forty-two.",
        "recovered from the stream: {adm}"
    );

    let reqs = provider.requests();
    assert_eq!(reqs.len(), 2, "one retry");
    assert!(reqs[0].stream, "streaming is preferred");
    assert!(
        !reqs[1].stream,
        "after text was shown, the retry is not streamed"
    );

    let events = api.all_events(&s, 0).await;
    let shown: String = events
        .iter()
        .filter(|e| e["kind"] == "message.delta")
        .map(|e| e["data"]["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(shown, "The answer is forty-two.", "no word shown twice");
    let complete: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "message.complete")
        .collect();
    assert_eq!(complete.len(), 1);
    assert_eq!(complete[0]["data"]["text"], "The answer is forty-two.");
    let msgs = api.messages(&s).await;
    let last = msgs.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"], "The answer is forty-two.");
}

//! An idle SSE event stream gets a `: keepalive` comment every `server.sse_keepalive_s`
//! (15 s by default; 1 s here), so proxies keep it open and a vanished client is noticed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use std::time::{Duration, Instant};
use turnkey_tests::{ScriptedProvider, Turnkey, TurnkeyOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_2_an_idle_sse_stream_gets_keepalive_comments() {
    let provider = ScriptedProvider::start();
    let tk =
        Turnkey::start(TurnkeyOptions::new(&provider).env("TURNKEY__SERVER__SSE_KEEPALIVE_S", "1"))
            .await;
    let s = tk.api().create_session_id().await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let opened = Instant::now();
    let res = http
        .get(format!("{}/v1/sessions/{s}/events", tk.url))
        .bearer_auth(&tk.token)
        .header("Accept", "text/event-stream")
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let mut body = res.bytes_stream();
    let mut text = String::new();
    let mut arrivals = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while arrivals.len() < 3 {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .expect("three keep-alive comments within 10 s")
            .expect("the stream stays open")
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = text.find("\n\n") {
            let frame: String = text.drain(..end + 2).collect();
            assert_eq!(
                frame, ": keepalive\n\n",
                "an idle session sends only comments"
            );
            arrivals.push(opened.elapsed());
        }
    }
    // The interval is the configured one, not the 15 s default.
    assert!(arrivals[0] >= Duration::from_millis(700), "{arrivals:?}");
    assert!(arrivals[2] < Duration::from_secs(8), "{arrivals:?}");
}

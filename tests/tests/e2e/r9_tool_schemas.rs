//! What the built-in tools cost every model call (issue 26): their schemas, as a default
//! configuration offers them, stay within a bound, so that a description that grows is a
//! decision and not an accident. The figure is printed for docs/benchmarks.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use turnkey_tests::wait::BOUND;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

/// Bytes of JSON of every default tool's schema (about a quarter as many tokens). Was 8,409
/// before the descriptions were made short (issue 26).
const BOUND_BYTES: usize = 7_400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_the_default_tools_schemas_stay_small() {
    let provider = ScriptedProvider::start();
    provider.push(Reply::text("ok"));
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let s = api.create_session_id().await;
    let a = api.submit_accepted(&s, "hi").await;
    api.wait_terminal(&a, BOUND).await;
    let req = provider.requests().pop().unwrap();
    let tools = req.body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 12, "every default tool is offered");
    let total = req.body["tools"].to_string().len();
    for t in tools {
        println!(
            "tool schema: {} {} bytes",
            t["function"]["name"],
            t.to_string().len()
        );
    }
    println!("tool schemas: {total} bytes for {} tools", tools.len());
    assert!(
        total <= BOUND_BYTES,
        "the default tools' schemas take {total} bytes, over {BOUND_BYTES}"
    );
}

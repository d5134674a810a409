//! OpenTelemetry traces over OTLP/HTTP (`[telemetry]`), against the real binary and a real
//! collector on 127.0.0.1: a turn is one trace whose root `turn` span carries the session,
//! admission and turn ids, with a child span per phase in lifecycle order; HTTP requests are
//! server spans; buffered spans are flushed when SIGTERM stops the server; `sample_ratio`
//! 0 exports nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use std::time::Duration;
use turnkey_tests::otlp::{OtlpCollector, ReceivedSpan};
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;
/// Longer than any test: the batch exporter sends nothing on its own schedule, so every span
/// the collector gets was flushed at shutdown.
const NO_SCHEDULED_EXPORT: (&str, &str) = ("OTEL_BSP_SCHEDULE_DELAY", "600000");

fn options(provider: &ScriptedProvider, collector: &OtlpCollector, ratio: f64) -> TurnkeyOptions {
    TurnkeyOptions::new(provider)
        .extra_toml(&format!(
            "[tools]\napproval = \"off\"\n\n[telemetry]\notlp_endpoint = \"{}\"\n\
             service_name = \"turnkey-otlp-test\"\nsample_ratio = {ratio:?}\n",
            collector.endpoint
        ))
        .env(NO_SCHEDULED_EXPORT.0, NO_SCHEDULED_EXPORT.1)
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// One tool round, then the answer: a turn that passes through every phase.
async fn run_a_tool_turn(tk: &Turnkey) -> (String, String, String) {
    let api = tk.api();
    let session = api.create_session_id().await;
    let admission = api
        .submit_accepted(&session, "say hi through the terminal")
        .await;
    let adm = api.wait_terminal(&admission, BOUND).await;
    assert_eq!(adm["outcome"]["result"], "completed", "{adm}");
    let events = api.all_events(&session, 0).await;
    let started = events
        .iter()
        .find(|e| e["kind"] == "turn.started")
        .expect("a turn.started event");
    let turn = started["data"]["turn_id"].as_str().unwrap().to_owned();
    (session, admission, turn)
}

fn script_tool_turn(provider: &ScriptedProvider) {
    provider.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "terminal".into(),
        json!({ "command": "echo hi" }),
    )]));
    provider.push(Reply::text("it said hi"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_one_trace_with_its_phases_as_children_flushed_at_shutdown() {
    let collector = OtlpCollector::start();
    let provider = ScriptedProvider::start();
    script_tool_turn(&provider);
    let mut tk = Turnkey::start(options(&provider, &collector, 1.0)).await;
    let (session, admission, turn_id) = run_a_tool_turn(&tk).await;

    // Nothing is sent on a schedule (see NO_SCHEDULED_EXPORT): the turn's spans are still
    // buffered in the process.
    assert!(
        collector.spans().iter().all(|s| s.name != "turn"),
        "the turn was exported before shutdown"
    );
    let status = tk.terminate(BOUND).await.expect("turnkey exits on SIGTERM");
    assert!(status.success(), "{status:?}\n{}", tk.log_tail(50));
    let spans = collector
        .wait_for(Duration::from_secs(10), |s| {
            s.iter().any(|s| s.name == "turn")
        })
        .await
        .unwrap_or_else(|s| panic!("no turn span after shutdown; got {s:#?}"));
    assert!(
        collector.undecodable().is_empty(),
        "{:?}",
        collector.undecodable()
    );
    assert!(
        collector
            .content_types()
            .iter()
            .all(|c| c == "application/x-protobuf"),
        "{:?}",
        collector.content_types()
    );

    // The root: one `turn` span with the ids of this turn.
    let turns: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == "turn").collect();
    assert_eq!(turns.len(), 1, "{turns:#?}");
    let root = turns[0];
    assert!(root.is_root(), "the turn span has a parent: {root:#?}");
    assert_eq!(root.attr("session_id"), Some(session.as_str()));
    assert_eq!(root.attr("admission_id"), Some(admission.as_str()));
    assert_eq!(root.attr("turn_id"), Some(turn_id.as_str()));
    assert_eq!(root.service_name.as_deref(), Some("turnkey-otlp-test"));

    // Its direct children, in the order the turn went through them.
    let mut children: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.parent_span_id == root.span_id)
        .collect();
    children.sort_by_key(|s| s.start_ns);
    for c in &children {
        assert_eq!(hex(&c.trace_id), hex(&root.trace_id), "{c:#?}");
        // Starts, not ends: a span's end is its last exit, and sqlx's SQLite worker thread
        // enters the span of the store call it serves, so a phase that ends with a store
        // write (finalize) may end a few milliseconds after the turn itself.
        assert!(
            c.start_ns >= root.start_ns && c.start_ns <= root.end_ns && c.end_ns >= c.start_ns,
            "{} ({}..{}) does not start inside the turn ({}..{})",
            c.name,
            c.start_ns,
            c.end_ns,
            root.start_ns,
            root.end_ns
        );
    }
    let names: Vec<&str> = children.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            // A drain's first input is claimed in the lease's commit: no `admission` phase.
            "lease",
            "context",
            "preflight",
            "request",
            "tool_round",
            "preflight",
            "request",
            "finalize",
        ],
        "the turn's phases"
    );
    let round = children.iter().find(|s| s.name == "tool_round").unwrap();
    assert_eq!(round.attr("calls"), Some("1"));
    let request = children.iter().find(|s| s.name == "request").unwrap();
    assert_eq!(request.attr("provider"), Some("scripted"));

    // Delivery of the committed events happens inside finalize.
    let finalize = children.iter().find(|s| s.name == "finalize").unwrap();
    let delivery: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == "delivery").collect();
    assert_eq!(delivery.len(), 1, "{delivery:#?}");
    assert_eq!(hex(&delivery[0].parent_span_id), hex(&finalize.span_id));
    assert_eq!(hex(&delivery[0].trace_id), hex(&root.trace_id));

    // HTTP requests are server spans of their own traces, named by route.
    let submit = spans
        .iter()
        .find(|s| s.name == "POST /v1/sessions/{id}/submissions")
        .unwrap_or_else(|| {
            let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
            panic!("no submission span among {names:?}")
        });
    assert_eq!(
        submit.kind,
        opentelemetry_proto::tonic::trace::v1::span::SpanKind::Server
    );
    assert!(submit.is_root());
    assert_eq!(submit.attr("http.response.status_code"), Some("202"));
    assert_eq!(submit.attr("http.request.method"), Some("POST"));
    assert_eq!(
        submit.attr("url.path"),
        Some(format!("/v1/sessions/{session}/submissions").as_str())
    );
    assert_ne!(hex(&submit.trace_id), hex(&root.trace_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_ratio_zero_exports_no_trace() {
    let collector = OtlpCollector::start();
    let provider = ScriptedProvider::start();
    script_tool_turn(&provider);
    let mut tk = Turnkey::start(options(&provider, &collector, 0.0)).await;
    run_a_tool_turn(&tk).await;
    let status = tk.terminate(BOUND).await.expect("turnkey exits on SIGTERM");
    assert!(status.success(), "{status:?}");
    // The exporter has shut down with the process: whatever it was going to send, it sent.
    let spans = collector.spans();
    assert!(spans.is_empty(), "sampled out, yet exported: {spans:#?}");
}

//! SPEC R13.6 (and R4.2 across replicas) end to end: two `turnkey serve` processes on one
//! PostgreSQL database. A turn admitted to replica A runs there; an interrupt or an approval
//! posted to replica B reaches it through PostgreSQL `LISTEN/NOTIFY`, and an SSE reader on B
//! sees A's events as they commit, in order and without a gap. Latencies are printed; they
//! must be far below the 1 s a store poll would cost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use turnkey_tests::stats::percentile;
use turnkey_tests::{pg, Api, RecordedRequest, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::{eventually, BOUND};
const KEY_A: &str = "sk-replica-a";
const KEY_B: &str = "sk-replica-b";

/// Two replicas on one fresh PostgreSQL database, told apart by their provider api keys.
struct Pair {
    _db: pg::PgDatabase,
    a: Turnkey,
    b: Turnkey,
}

async fn pair(provider: &ScriptedProvider, extra_toml: &str) -> Option<Pair> {
    let db = pg::fresh_database().await?;
    let opts = TurnkeyOptions::new(provider)
        .database(db.url())
        .extra_toml(extra_toml);
    let a = Turnkey::start(opts.clone().provider_api_key(KEY_A)).await;
    let b = Turnkey::start(opts.provider_api_key(KEY_B)).await;
    // The documented start-up window (docs/architecture.md, "Only while another replica
    // listens"): until A has read that B listens, A may skip its notices, and B catches up by
    // the re-read it makes 1.5 s after its listener connected (`RESYNC_AFTER_LISTEN`). These
    // tests measure the steady state, so they begin after that window; the re-read leaves no
    // fact to wait for (it logs nothing and changes nothing when nothing was missed).
    tokio::time::sleep(START_UP_WINDOW).await;
    Some(Pair { _db: db, a, b })
}

/// `turnkey_storage::notify::RESYNC_AFTER_LISTEN`.
const START_UP_WINDOW: Duration = Duration::from_millis(1500);

fn ran_on_a(r: &RecordedRequest) -> bool {
    r.header("authorization") == Some(&format!("Bearer {KEY_A}"))
}

fn ms_since_epoch() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

fn created_ms(data: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(data["created_at"].as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_6_interrupt_posted_to_b_stops_the_turn_running_on_a() {
    let provider = ScriptedProvider::start();
    let Some(p) = pair(&provider, "").await else {
        return;
    };
    provider.on_user_text("[hang]", Reply::Hang);
    let (a, b) = (p.a.api(), p.b.api());
    let s = a.create_session_id().await;
    let adm = a.submit_accepted(&s, "a long one [hang]").await;
    provider
        .wait_for_requests(1, BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(ran_on_a(&provider.requests()[0]), "the turn runs on A");

    let t0 = Instant::now();
    let r = b.interrupt(&s).await;
    let answered = t0.elapsed();
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.body["interrupted"], true, "{}", r.text);
    assert_eq!(r.body["forwarded"]["status"], "done", "{}", r.text);
    assert!(r.body["forwarded"]["request_id"].is_string(), "{}", r.text);
    // The model call on A is abandoned: the provider sees its client go away.
    // The provider stamps the call's end itself: how often this looks does not matter.
    let stopped = eventually(BOUND, "end of A's model call", || async {
        let at = provider.requests()[0].finished_at?;
        Some(at.saturating_duration_since(t0))
    })
    .await;
    let done = b.wait_terminal(&adm, BOUND).await;
    let settled = t0.elapsed();
    assert_eq!(done["outcome"]["result"], "interrupted", "{done}");
    println!(
        "interrupt posted to B, turn on A: acknowledged in {:.1} ms, model call dropped after {:.1} ms, \
         admission terminal (seen by polling B every 100 ms) after {:.1} ms",
        answered.as_secs_f64() * 1e3,
        stopped.as_secs_f64() * 1e3,
        settled.as_secs_f64() * 1e3
    );
    assert!(answered < Duration::from_millis(1000), "{answered:?}");
    assert!(stopped < Duration::from_millis(1000), "{stopped:?}");

    // Nothing runs any more: an interrupt now finds no turn anywhere.
    let r = b.interrupt(&s).await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.body, json!({"interrupted": false}), "{}", r.text);
    assert_eq!(
        provider.request_count(),
        1,
        "no model call after the interrupt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_6_approval_posted_to_b_wakes_the_turn_waiting_on_a() {
    let provider = ScriptedProvider::start();
    let Some(p) = pair(&provider, "[tools]\napproval = \"always\"\n").await else {
        return;
    };
    let (a, b) = (p.a.api(), p.b.api());
    const ROUNDS: usize = 5;
    let mut latencies = Vec::new();
    for round in 0..ROUNDS {
        let tag = format!("[approve-{round}]");
        provider.on_user_text_times(
            &tag,
            Reply::tool_call(
                &format!("c{round}"),
                "terminal",
                json!({"command": format!("echo {round}")}),
            ),
            1,
        );
        provider.on_user_text_times(&tag, Reply::text("done"), 1);
        let s = a.create_session_id().await;
        let adm = a.submit_accepted(&s, &format!("run it {tag}")).await;
        let approval_id = approval_requested(&b, &s).await;
        let calls_before = provider.request_count_for(&tag);
        assert_eq!(calls_before, 1, "the turn waits for the approval");
        // A decision long after the waiter started: a poll would land anywhere in its period.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let t0 = Instant::now();
        let r = b
            .post(
                &format!("/v1/sessions/{s}/approvals/{approval_id}"),
                &json!({"decision": "approve"}),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        // The turn on A goes on: its next model call carries the tool's result.
        // The provider stamps the call's arrival itself: how often this looks does not matter.
        let next = eventually(BOUND, "the next model call of the turn on A", || async {
            let mut calls = provider
                .requests()
                .into_iter()
                .filter(|r| r.last_user_text.contains(&tag));
            calls.nth(1)
        })
        .await;
        assert!(ran_on_a(&next), "the turn went on on A");
        let woke = next.received_at.saturating_duration_since(t0);
        latencies.push(woke.as_secs_f64() * 1e3);
        let done = b.wait_terminal(&adm, BOUND).await;
        assert_eq!(done["outcome"]["result"], "completed", "{done}");
    }
    latencies.sort_by(f64::total_cmp);
    println!(
        "approval posted to B -> next model call of the turn on A: p50 {:.1} ms, max {:.1} ms over {ROUNDS} turns",
        percentile(&latencies, 0.5),
        latencies[ROUNDS - 1]
    );
    assert!(
        latencies[ROUNDS - 1] < 500.0,
        "every wake-up far below the 1 s poll: {latencies:?}"
    );
}

async fn approval_requested(api: &Api, session: &str) -> String {
    eventually(BOUND, "approval.requested", || async {
        let events = api.all_events(session, 0).await;
        let e = events.iter().find(|e| e["kind"] == "approval.requested")?;
        Some(e["data"]["approval_id"].as_str().unwrap().to_string())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_6_sse_reader_on_b_sees_turns_run_on_a_promptly_and_gap_free() {
    let provider = ScriptedProvider::start();
    let Some(p) = pair(&provider, "").await else {
        return;
    };
    const TURNS: usize = 8;
    provider.on_user_text(
        "[stream]",
        Reply::chunks(
            &["one ", "two ", "three ", "four ", "five"],
            Duration::from_millis(40),
        ),
    );
    let (a, b) = (p.a.api(), p.b.api());
    let s = a.create_session_id().await;
    // The reader on B, from the start of the session's log.
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let resp = http
        .get(format!("{}/v1/sessions/{s}/events", b.base))
        .header("Accept", "text/event-stream")
        .bearer_auth(&p.b.token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let reader = tokio::spawn(async move {
        let mut stream = resp.bytes_stream().eventsource();
        let mut seen: Vec<(i64, String, i64, i64)> = Vec::new();
        let mut finished = 0;
        let deadline = tokio::time::Instant::now() + BOUND;
        while let Ok(Some(item)) = tokio::time::timeout_at(deadline, stream.next()).await {
            let ev = item.unwrap();
            let received = ms_since_epoch();
            let data: Value = serde_json::from_str(&ev.data).unwrap();
            let seq: i64 = ev.id.parse().unwrap();
            seen.push((seq, ev.event.clone(), created_ms(&data), received));
            if ev.event == "turn.finished" {
                finished += 1;
                if finished == TURNS {
                    break;
                }
            }
        }
        seen
    });
    let started = ms_since_epoch();
    for n in 0..TURNS {
        let adm = a.submit_accepted(&s, &format!("turn {n} [stream]")).await;
        a.wait_terminal(&adm, BOUND).await;
    }
    let seen = reader.await.unwrap();
    // Both replicas drain the session's queue: A is woken in process at once, B by A's notice,
    // so A claims the turns, but on a loaded machine B may claim one first. The reader on B
    // must still see turns run elsewhere: most of them.
    let on_a = provider.requests().iter().filter(|r| ran_on_a(r)).count();
    assert!(on_a + 2 >= TURNS, "most turns ran on A: {on_a} of {TURNS}");
    let seqs: Vec<i64> = seen.iter().map(|e| e.0).collect();
    let first = seqs[0];
    let expected: Vec<i64> = (first..first + seqs.len() as i64).collect();
    assert_eq!(seqs, expected, "gap-free and in order");
    assert_eq!(first, 1, "from the start of the log");
    // Up to the last turn's end (a `status` event may follow it), what is stored is what came.
    let last_seen = *seqs.last().unwrap();
    let stored: Vec<i64> = b
        .all_events(&s, 0)
        .await
        .iter()
        .map(|e| e["seq"].as_i64().unwrap())
        .filter(|&q| q <= last_seen)
        .collect();
    assert_eq!(stored, seqs, "the reader saw every stored event");
    let finished = seen.iter().filter(|e| e.1 == "turn.finished").count();
    assert_eq!(finished, TURNS);
    let mut lat: Vec<f64> = seen
        .iter()
        .filter(|e| e.2 >= started)
        .map(|e| (e.3 - e.2) as f64)
        .collect();
    lat.sort_by(f64::total_cmp);
    let deltas = seen.iter().filter(|e| e.1 == "message.delta").count();
    println!(
        "SSE on B, turns on A: {} events ({deltas} deltas) gap-free; commit-to-reader latency p50 {:.0} ms, \
         p95 {:.0} ms, max {:.0} ms",
        lat.len(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.95),
        lat.last().copied().unwrap_or_default()
    );
    assert!(lat.len() >= TURNS * 3, "{} live events", lat.len());
    assert!(
        percentile(&lat, 0.5) < 200.0,
        "p50 far below a 1 s poll: {lat:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_5_input_admitted_on_b_cancels_the_review_running_on_a() {
    let provider = ScriptedProvider::start();
    let Some(p) = pair(&provider, "[memory]\nreview_every = 1\n").await else {
        return;
    };
    provider.on_user_text("[turnkey:review]", Reply::Hang);
    let (a, b) = (p.a.api(), p.b.api());
    let s = a.create_session_id().await;
    provider.push(Reply::text("first"));
    let first = a.submit_accepted(&s, "one").await;
    a.wait_terminal(&first, BOUND).await;
    eventually(BOUND, "the review's request", || async {
        provider
            .requests()
            .iter()
            .find(|r| r.last_user_text.contains("[turnkey:review]"))
            .map(ran_on_a)
    })
    .await
    .then_some(())
    .expect("the review runs on A, where the turn ran");

    provider.push(Reply::text("second"));
    let asked = Instant::now();
    let second = b.submit_accepted(&s, "two").await;
    let cancelled = eventually(BOUND, "review.cancelled", || async {
        b.all_events(&s, 0)
            .await
            .into_iter()
            .find(|e| e["kind"] == "review.cancelled")
    })
    .await;
    let took = asked.elapsed();
    assert_eq!(cancelled["data"]["reason"], "input", "{cancelled}");
    assert!(took < Duration::from_secs(1), "cancelled after {took:?}");
    let done = b.wait_terminal(&second, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    provider.release_hangs();
}

// ---------------------------------------------------------------------------------------
// One workspace volume for every replica (deploy/: compose `workspace`, k8s `pvc.yaml`).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_a_sessions_file_written_on_one_replica_is_read_on_the_other() {
    let provider = ScriptedProvider::start();
    provider.on_tool_result("save it", Reply::text("saved"));
    provider.on_user_text(
        "save it",
        Reply::tool_call(
            "w1",
            "write_file",
            serde_json::json!({"path": "shared.txt", "content": "written on A"}),
        ),
    );
    provider.on_tool_result("read it", Reply::text("read"));
    provider.on_user_text(
        "read it",
        Reply::tool_call("r1", "read_file", serde_json::json!({"path": "shared.txt"})),
    );
    let volume = tempfile::tempdir().unwrap();
    let toml = format!(
        "[tools]\napproval = \"off\"\nworkspace = \"{}\"\n",
        volume.path().display()
    );
    let Some(mut p) = pair(&provider, &toml).await else {
        return;
    };
    let r =
        p.a.api()
            .post("/v1/tokens", &serde_json::json!({"name": "alice"}))
            .await;
    let token = r.str_field("token");
    let (on_a, on_b) = (
        p.a.api().with_token(Some(&token)),
        p.b.api().with_token(Some(&token)),
    );
    let s = on_a.create_session_id().await;
    let first = on_a.submit_accepted(&s, "save it").await;
    on_a.wait_terminal(&first, BOUND).await;
    // A is gone: the next turn can only run on B, with only the shared volume to find the file.
    p.a.kill();
    let second = on_b.submit_accepted(&s, "read it").await;
    on_b.wait_terminal(&second, BOUND).await;
    let reqs = provider.requests();
    let save = reqs.iter().find(|r| r.last_user_text == "save it").unwrap();
    let read = reqs.iter().find(|r| r.last_user_text == "read it").unwrap();
    assert!(ran_on_a(save), "the first turn ran on A");
    assert!(!ran_on_a(read), "the second turn ran on B");
    let n = provider.request_count();
    let got = (0..n)
        .rev()
        .map(|i| provider.tool_result(i, "r1"))
        .find(|t| !t.is_empty())
        .unwrap();
    assert!(got.contains("written on A"), "{got}");
}

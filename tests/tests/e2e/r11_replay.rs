//! SPEC R11.2 end to end: every event has a per-session seq; a client that asks for events
//! since its last seq (JSON `?since=` or SSE `Last-Event-ID`) gets everything it missed, once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::time::Duration;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::BOUND;

fn answer(n: usize) -> Vec<String> {
    ["Answer", " to", " turn", &format!(" {n}"), "."]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn seq(e: &Value) -> i64 {
    e["seq"]
        .as_i64()
        .unwrap_or_else(|| panic!("event without integer seq: {e}"))
}

fn kind(e: &Value) -> &str {
    e["kind"].as_str().unwrap_or("?")
}

fn turn_of(e: &Value) -> Option<&str> {
    e["turn_id"]
        .as_str()
        .or_else(|| e["data"]["turn_id"].as_str())
}

fn admission_of(e: &Value) -> Option<&str> {
    e["admission_id"]
        .as_str()
        .or_else(|| e["data"]["admission_id"].as_str())
}

fn position(events: &[Value], what: &str, pred: impl Fn(&Value) -> bool) -> usize {
    events.iter().position(pred).unwrap_or_else(|| {
        panic!(
            "no {what} among {:?}",
            events.iter().map(kind).collect::<Vec<_>>()
        )
    })
}

/// Checks one turn's events appear in a sane order and carry the scripted answer.
fn check_turn(events: &[Value], admission_id: &str, expected: &str) -> usize {
    let queued = position(events, "admission.queued", |e| {
        kind(e) == "admission.queued" && admission_of(e) == Some(admission_id)
    });
    let started = position(events, "turn.started", |e| {
        kind(e) == "turn.started" && admission_of(e) == Some(admission_id)
    });
    let turn = turn_of(&events[started])
        .unwrap_or_else(|| panic!("turn.started without turn_id: {}", events[started]))
        .to_string();
    let in_turn = |k: &'static str| {
        let turn = turn.clone();
        move |e: &Value| kind(e) == k && turn_of(e) == Some(turn.as_str())
    };
    let complete = position(events, "message.complete", in_turn("message.complete"));
    let finished = position(events, "turn.finished", in_turn("turn.finished"));
    let deltas: Vec<usize> = (0..events.len())
        .filter(|&i| in_turn("message.delta")(&events[i]))
        .collect();
    assert!(queued < started, "admission.queued before turn.started");
    assert!(
        started < complete && complete < finished,
        "started < complete < finished"
    );
    assert!(
        !deltas.is_empty(),
        "a streamed answer has message.delta events"
    );
    assert!(
        deltas.iter().all(|&d| started < d && d < complete),
        "deltas lie between turn.started and message.complete"
    );
    let streamed: String = deltas
        .iter()
        .map(|&d| events[d]["data"]["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(streamed, expected, "deltas add up to the answer");
    assert_eq!(
        events[complete]["data"]["text"], expected,
        "{}",
        events[complete]
    );
    assert_eq!(
        events[finished]["data"]["result"], "completed",
        "{}",
        events[finished]
    );
    finished
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_2_replay_since_seq_json_and_sse_agree() {
    let provider = ScriptedProvider::start();
    for n in 1..=4 {
        provider.on_user_text(
            &format!("[turn {n}]"),
            Reply::Text {
                chunks: answer(n),
                chunk_delay: Duration::from_millis(60),
            },
        );
    }
    let tk = Turnkey::start(TurnkeyOptions::new(&provider)).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let mut admissions = Vec::new();
    for n in 1..=3 {
        let id = api
            .submit_accepted(&session, &format!("please answer [turn {n}]"))
            .await;
        let done = api.wait_terminal(&id, BOUND).await;
        assert_eq!(done["outcome"]["result"], "completed", "{done}");
        assert_eq!(
            done["outcome"]["final_response"],
            answer(n).concat(),
            "{done}"
        );
        admissions.push(id);
    }

    let all = api.all_events(&session, 0).await;
    let seqs: Vec<i64> = all.iter().map(seq).collect();
    let expected: Vec<i64> = (1..=all.len() as i64).collect();
    assert_eq!(
        seqs, expected,
        "seqs run 1, 2, 3, ... without gaps or repeats"
    );
    assert!(all.iter().all(|e| e["session_id"] == session.as_str()));
    let mut last_finished = 0;
    for (n, id) in admissions.iter().enumerate() {
        let finished = check_turn(&all, id, &answer(n + 1).concat());
        assert!(
            finished > last_finished || n == 0,
            "turns run in admission order"
        );
        last_finished = finished;
    }

    let k = seqs[seqs.len() / 2];
    let tail = api.all_events(&session, k).await;
    let wanted: Vec<&Value> = all.iter().filter(|e| seq(e) > k).collect();
    assert_eq!(
        tail.iter().collect::<Vec<_>>(),
        wanted,
        "?since={k} returns exactly the events after {k}"
    );
    let (page, next) = api.events_page(&session, *seqs.last().unwrap()).await;
    assert!(page.is_empty(), "nothing after the last seq");
    assert_eq!(
        next,
        *seqs.last().unwrap(),
        "next_since stays put when there is nothing new"
    );

    let max = *seqs.last().unwrap();
    let sse = api
        .events_sse(&session, Some(k), Duration::from_secs(15), |e| {
            e.id >= Some(max)
        })
        .await;
    let sse_ids: Vec<Option<i64>> = sse.iter().map(|e| e.id).collect();
    let tail_ids: Vec<Option<i64>> = tail.iter().map(|e| Some(seq(e))).collect();
    assert_eq!(
        sse_ids, tail_ids,
        "SSE with Last-Event-ID: {k} replays the same events"
    );
    for (s, j) in sse.iter().zip(&tail) {
        assert_eq!(s.kind, kind(j), "SSE `event:` is the kind");
        assert!(s.data.is_object(), "SSE data is JSON: {:?}", s.data);
    }

    // Live: a subscriber from the last seq sees the next turn's events continue the sequence.
    // The server answers a stream only once it has subscribed to the session: from here on
    // the subscriber is live, before the fourth turn is submitted.
    let live = api.open_events_sse(&session, Some(max), BOUND).await;
    let live = tokio::spawn(live.read_until(|e| e.kind == "turn.finished"));
    let fourth = api
        .submit_accepted(&session, "please answer [turn 4]")
        .await;
    api.wait_terminal(&fourth, BOUND).await;
    let live = live.await.unwrap();
    let live_ids: Vec<i64> = live.iter().filter_map(|e| e.id).collect();
    let expected_live: Vec<i64> = (max + 1..=max + live_ids.len() as i64).collect();
    assert_eq!(
        live_ids, expected_live,
        "live events continue the seq without gaps"
    );
    assert_eq!(live.last().map(|e| e.kind.as_str()), Some("turn.finished"));
    let replay = api.all_events(&session, max).await;
    let replay_ids: Vec<i64> = replay.iter().map(seq).take(live_ids.len()).collect();
    assert_eq!(
        replay_ids, live_ids,
        "what was shown live is what a replay returns"
    );
    check_turn(&replay, &fourth, &answer(4).concat());
}

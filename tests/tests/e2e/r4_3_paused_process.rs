//! SPEC R4.3 and R13.3 end to end: a process that is paused (SIGSTOP) mid-answer past its lease
//! TTL loses the session to another process on the same store (a SQLite file, then
//! PostgreSQL); the other runs the next input; once the first goes on (SIGCONT) with the rest
//! of its answer arriving, it writes nothing more for its cut turn (fenced), stops it, and the
//! session's event log stays gap-free and never interleaves the two turns.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sea_orm::{ConnectionTrait, DatabaseConnection, QueryResult, Statement};
use serde_json::Value;
use std::time::Duration;
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Step, Turnkey, TurnkeyOptions};

const TTL_S: u64 = 3;
const REFRESH_S: u64 = 1;
/// Bound on every wait for a fact (a start, an event, a log line, a turn's end).
use turnkey_tests::wait::{eventually, BOUND};

/// The cut turn's input (run by process A).
const FIRST: &str = "first input [tag:paused]";
/// What A's model streams before the test holds its answer.
const EARLY: [&str; 2] = ["early-one ", "early-two "];
/// What A has read from its model but not committed yet when it is paused (its delta window is
/// long): the write it attempts on waking, which the fence must refuse.
const IN_HAND: &str = "IN-HAND-AT-PAUSE";
/// A's `agent.delta_flush_ms`: it gathers streamed text this long before committing it.
const A_DELTA_WINDOW: &str = "[agent]\ndelta_flush_ms = 2000\n";
/// How long the test lets A read a chunk already handed to its socket before pausing it (far
/// inside A's delta window, and inside its lease refresh period): a read from a socket leaves
/// no fact to wait for.
const READ_MARGIN: Duration = Duration::from_millis(200);
/// What A's model sends only after the takeover: it must never reach the store either.
const LATE: &str = "LATE-AFTER-TAKEOVER";
/// The next input (run by process B) and its answer.
const NEXT: &str = "second input [tag:next]";
const NEXT_ANSWER: [&str; 3] = ["[next] ", "answered ", "by B"];
/// A third input, run by A again once it has stopped its cut turn.
const THIRD: &str = "third input [tag:third]";

/// The log lines A writes when its cut turn ends: the lease-loss stop (finalize writes
/// nothing), or a turn end the store refused.
const TURN_STOPPED: [&str; 2] = [
    "lease lost; turn ends without writing",
    "turn end not committed",
];

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

async fn rows(db: &DatabaseConnection, sql: &str) -> Vec<QueryResult> {
    let backend = db.get_database_backend();
    db.query_all_raw(Statement::from_string(backend, sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The session's lease row: (holder instance, generation, expires_at ms).
async fn lease(db: &DatabaseConnection, session: &str) -> (Option<String>, i64, i64) {
    let sql = format!(
        "SELECT holder_instance, generation, expires_at FROM session_turn_leases \
         WHERE session_id = '{session}'"
    );
    let row = rows(db, &sql)
        .await
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no lease row for {session}"));
    (
        row.try_get::<Option<String>>("", "holder_instance")
            .unwrap(),
        row.try_get::<i64>("", "generation").unwrap(),
        row.try_get::<i64>("", "expires_at").unwrap(),
    )
}

async fn usage_rows_of(db: &DatabaseConnection, turn: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) AS n FROM usage_ledger WHERE turn_id = '{turn}'");
    rows(db, &sql).await[0].try_get::<i64>("", "n").unwrap()
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_default()
}

/// The turn id `turn.started` gave `admission`, once it is in the log.
async fn turn_of(api: &Api, session: &str, admission: &str) -> String {
    eventually(BOUND, "the turn.started event", move || async move {
        api.all_events(session, 0)
            .await
            .iter()
            .find(|e| e["kind"] == "turn.started" && str_of(e, "admission_id") == admission)
            .map(|e| str_of(e, "turn_id").to_owned())
    })
    .await
}

/// The text of the committed `message.delta` events of `turn`.
fn delta_text(events: &[Value], turn: &str) -> String {
    events
        .iter()
        .filter(|e| e["kind"] == "message.delta" && str_of(e, "turn_id") == turn)
        .map(|e| e["data"]["text"].as_str().unwrap_or_default())
        .collect()
}

/// Seqs 1..=N, none missing, none twice.
fn assert_gap_free(events: &[Value]) {
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    let want: Vec<i64> = (1..=seqs.len() as i64).collect();
    assert_eq!(seqs, want, "the session's events are seq 1..N, contiguous");
}

/// Waits until the scripted provider has handed `text` of A's held answer to the connection.
async fn wait_for_delivered(provider: &ScriptedProvider, text: &str) {
    eventually(
        BOUND,
        "a chunk handed to A's connection",
        move || async move {
            let requests = provider.requests();
            let held = requests.iter().find(|r| r.reply == "steps")?;
            held.delivered_text.contains(text).then_some(())
        },
    )
    .await;
}

async fn paused_process_cannot_write(base: TurnkeyOptions, provider: &ScriptedProvider) {
    let mut held = vec![Step::Text(EARLY[0].into(), Duration::from_millis(50))];
    held.push(Step::Text(EARLY[1].into(), Duration::from_millis(50)));
    // Held mid-answer; each release lets one more chunk go, then silence again: the cut turn
    // is still streaming when it wakes, with text in hand to write.
    held.extend([Step::Gate, Step::text(IN_HAND), Step::Gate]);
    held.extend([Step::text(LATE), Step::Gate]);
    provider.on_user_text_times("[tag:paused]", Reply::Steps(held), 1);
    provider.on_user_text(
        "[tag:next]",
        Reply::chunks(&NEXT_ANSWER, Duration::from_millis(50)),
    );
    let mut base = base;
    base.lease_ttl_s = TTL_S;
    base.lease_refresh_s = REFRESH_S;
    let mut a = Turnkey::start(base.clone().extra_toml(A_DELTA_WINDOW)).await;
    let b_opts = base.database(&a.database_url).provider_api_key("sk-second");
    let b = Turnkey::start(b_opts).await;
    let (api_a, api_b) = (a.api(), b.api());
    let db = turnkey_tests::pg::open(&a.database_url).await;
    let s = api_a.create_session_id().await;

    // A runs the first input; its answer streams, then the model holds it.
    let first = api_a.submit_accepted(&s, FIRST).await;
    let cut = turn_of(&api_a, &s, &first).await;
    let early: String = EARLY.concat();
    let (dbr, sr, ar, cr, er) = (&db, s.as_str(), &api_a, cut.as_str(), early.as_str());
    eventually(BOUND, "A's early deltas committed", move || async move {
        let events = ar.all_events(sr, 0).await;
        (delta_text(&events, cr) == er).then_some(())
    })
    .await;
    let (holder_a, generation_a, refreshed) = lease(&db, &s).await;
    let holder_a = holder_a.expect("A holds the lease while its turn runs");
    // Pause A right after a refresh committed: it then holds no open transaction (a paused
    // holder of SQLite's write lock or of a PostgreSQL row lock would stall B, not test it).
    eventually(BOUND, "A's next lease refresh", move || async move {
        let (_, _, expires) = lease(dbr, sr).await;
        (expires > refreshed).then_some(())
    })
    .await;
    // One more chunk reaches A and waits in its delta window, uncommitted, when it is paused.
    provider.release_hangs();
    wait_for_delivered(provider, IN_HAND).await;
    tokio::time::sleep(READ_MARGIN).await;
    a.pause();
    let before_pause = api_b.all_events(&s, 0).await;
    assert_eq!(
        delta_text(&before_pause, &cut),
        early,
        "A was paused with {IN_HAND:?} read but not committed"
    );
    let before_pause = before_pause.len();

    // Past the TTL the lease is free for B, which takes the session and runs the next input.
    eventually(BOUND, "A's lease to expire", move || async move {
        let (_, _, expires) = lease(dbr, sr).await;
        (expires < now_ms()).then_some(())
    })
    .await;
    let next = api_b.submit_accepted(&s, NEXT).await;
    let done = api_b.wait_terminal(&next, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert_eq!(done["outcome"]["final_response"], NEXT_ANSWER.concat());
    let next_turn = turn_of(&api_b, &s, &next).await;
    let by_b = |tag: &str| {
        provider
            .requests()
            .iter()
            .filter(|r| r.last_user_text.contains(tag))
            .filter(|r| r.header("authorization") == Some("Bearer sk-second"))
            .count()
    };
    assert_eq!(by_b("[tag:next]"), 1, "B ran the next input");

    // More of A's answer arrives while it is paused; then A goes on.
    provider.release_hangs();
    wait_for_delivered(provider, LATE).await;
    a.resume();
    let paused = &a;
    let log = eventually(BOUND, "A to stop its cut turn", move || async move {
        let log = paused.stderr();
        TURN_STOPPED.iter().any(|l| log.contains(l)).then_some(log)
    })
    .await;

    // A stopped the turn: it noticed the loss, and what it tried to write was refused.
    assert!(a.is_running(), "A lives on");
    assert_eq!(api_a.healthz().await.status, 200);
    assert!(log.contains("turn lease lost"), "A logs the lease loss");
    // The fence at work: the text A had in hand when it woke went to a fenced write (its
    // delta window ran out, or the stop flushed it), which the store refused. Without the
    // fence check that delta is committed, and the checks of the log below fail.
    assert!(
        log.contains("fenced out"),
        "A attempted a write after waking and the fence refused it"
    );
    for line in log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("turnkey_actors"))
    {
        println!("A: {line}");
    }
    let (holder, generation, _) = lease(&db, &s).await;
    assert_ne!(
        holder.as_deref(),
        Some(holder_a.as_str()),
        "A holds no lease"
    );
    assert!(generation > generation_a, "B took a newer generation");

    // Nothing of A's after the takeover reached the store.
    let events = api_b.all_events(&s, 0).await;
    assert_gap_free(&events);
    assert!(
        events.len() > before_pause,
        "B wrote after A's pause: {events:?}"
    );
    for e in &events {
        let data = e["data"].to_string();
        assert!(
            !data.contains(IN_HAND) && !data.contains(LATE),
            "an event carries what A wrote after the takeover: {e}"
        );
    }
    let started = events
        .iter()
        .position(|e| e["kind"] == "turn.started" && str_of(e, "turn_id") == next_turn)
        .unwrap();
    let finished = events
        .iter()
        .position(|e| e["kind"] == "turn.finished" && str_of(e, "turn_id") == next_turn)
        .unwrap();
    for e in &events[started..] {
        assert_ne!(
            str_of(e, "turn_id"),
            cut,
            "an event of the cut turn after the next turn began: {e}"
        );
    }
    for e in &events[started..=finished] {
        let turn = str_of(e, "turn_id");
        assert!(
            turn.is_empty() || turn == next_turn,
            "the next turn's events are not interleaved with another turn's: {e}"
        );
    }
    for m in api_b.messages(&s).await {
        let row = m.to_string();
        assert!(
            !row.contains(IN_HAND) && !row.contains(LATE),
            "a transcript row carries what A wrote after the takeover: {m}"
        );
    }
    // A writes its usage only with its turn's end; any row of the cut turn is B's (a resumed
    // attempt of it, one row per model call B made for it).
    let usage = usage_rows_of(&db, &cut).await;
    assert!(
        usage <= by_b("[tag:paused]") as i64,
        "the cut turn has {usage} usage rows: A wrote some"
    );
    let cut_admission = api_b.admission(&first).await.body;
    let status = str_of(&cut_admission, "status");
    assert!(
        matches!(status, "unknown" | "terminal"),
        "the cut turn is settled (by B's recovery): {cut_admission}"
    );
    let answer = cut_admission["outcome"]["final_response"].to_string();
    assert!(
        !answer.contains(EARLY[0]) && !answer.contains(IN_HAND),
        "A did not complete its cut turn: {cut_admission}"
    );
    let cut_events: Vec<&str> = events[before_pause..]
        .iter()
        .filter(|e| str_of(e, "turn_id") == cut)
        .map(|e| str_of(e, "kind"))
        .collect();
    println!("cut turn: {status}; its events after the pause (B's recovery): {cut_events:?}");

    // A is a healthy replica again: it takes the session for the input after.
    let third = api_a.submit_accepted(&s, THIRD).await;
    let done = api_a.wait_terminal(&third, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert_gap_free(&api_b.all_events(&s, 0).await);
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_3_r13_3_paused_process_cannot_write_sqlite() {
    let provider = ScriptedProvider::start();
    paused_process_cannot_write(TurnkeyOptions::new(&provider), &provider).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r4_3_r13_3_paused_process_cannot_write_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    let provider = ScriptedProvider::start();
    let opts = TurnkeyOptions::new(&provider).database(db.url());
    paused_process_cannot_write(opts, &provider).await;
}

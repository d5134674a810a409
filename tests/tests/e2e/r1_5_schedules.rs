//! Scheduled jobs (SPEC R1.5) against the real binary, on SQLite and PostgreSQL: the
//! `/v1/schedules` API with its auth and error codes; a schedule that falls due every 2 s is
//! admitted through the normal path (surface `internal`, request id
//! `schedule:<id>:<due_ms>`) and its turn completes; a SIGKILL across several due times gives
//! one run for the missed window with `missed = "run_once"` and none with `"skip"`, and no due
//! time is ever admitted twice; a `[[schedules]]` table fires, keeps its id and history across
//! restarts, and stops when removed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sea_orm::{ConnectionTrait, Statement};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;
use turnkey_tests::{pg, Api, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::{self, BOUND};

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

async fn start(provider: &ScriptedProvider, database: Option<&str>) -> Turnkey {
    let opts = TurnkeyOptions::new(provider);
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    Turnkey::start(opts).await
}

/// One admission a schedule made, read from the store: the only place that shows the request
/// id, surface and principal of an admission.
#[derive(Clone, Debug)]
struct Fired {
    id: String,
    session_id: String,
    due: i64,
    surface: String,
    principal: String,
}

/// The admissions of schedule `schedule`, in queue order.
async fn fired(database_url: &str, schedule: &str) -> Vec<Fired> {
    let db = turnkey_tests::pg::open(database_url).await;
    let backend = db.get_database_backend();
    let prefix = format!("schedule:{schedule}:");
    let rows = db
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT id, session_id, request_id, surface, principal FROM session_admissions \
             ORDER BY created_at, seq",
        ))
        .await
        .expect("read admissions");
    let out = rows
        .iter()
        .filter_map(|r| {
            let request_id: String = r.try_get("", "request_id").expect("request_id");
            let due = request_id.strip_prefix(&prefix)?.parse().expect("due ms");
            Some(Fired {
                id: r.try_get("", "id").expect("id"),
                session_id: r.try_get("", "session_id").expect("session_id"),
                due,
                surface: r.try_get("", "surface").expect("surface"),
                principal: r.try_get("", "principal").expect("principal"),
            })
        })
        .collect();
    if let Err(e) = db.close().await {
        eprintln!("closing the test's connection: {e}");
    }
    out
}

/// Due times of `schedule`'s admissions, each checked to be admitted once.
async fn due_times(database_url: &str, schedule: &str) -> Vec<i64> {
    let all: Vec<i64> = fired(database_url, schedule)
        .await
        .iter()
        .map(|f| f.due)
        .collect();
    let distinct: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(
        all.len(),
        distinct.len(),
        "a due time was admitted twice: {all:?}"
    );
    distinct.into_iter().collect()
}

/// Waits (bounded) until `schedule` has an admission with a due time at least `from`.
async fn wait_fired(tk: &Turnkey, schedule: &str, from: i64, within: Duration) -> Fired {
    let found = wait::within(within, || async {
        let all = fired(&tk.database_url, schedule).await;
        all.into_iter().find(|f| f.due >= from)
    })
    .await;
    found.unwrap_or_else(|| {
        panic!(
            "schedule {schedule} admitted nothing due at or after {from} within {within:?}\n{}",
            tk.log_tail(60)
        )
    })
}

async fn create(api: &Api, body: Value) -> Value {
    let r = api.post("/v1/schedules", &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.body
}

async fn delete(api: &Api, id: &str) -> turnkey_tests::Resp {
    api.try_send(
        reqwest::Method::DELETE,
        &format!("/v1/schedules/{id}"),
        None,
        &[],
    )
    .await
    .unwrap()
}

async fn list(api: &Api) -> Vec<Value> {
    let r = api.get("/v1/schedules").await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["schedules"].as_array().cloned().unwrap_or_default()
}

fn ids(schedules: &[Value]) -> BTreeSet<String> {
    schedules
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

fn ms(rfc3339: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

// ---------------------------------------------------------------------------------------
// The API: create, list, delete, auth, codes.

async fn api_and_auth(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, database).await;
    let op = tk.api();
    let made = op.post("/v1/tokens", &json!({"name": "someone"})).await;
    assert_eq!(made.status, 201, "{}", made.text);
    let other = op.with_token(Some(&made.str_field("token")));
    let mine = op.create_session_id().await;
    let theirs = other.create_session_id().await;

    let before = now_ms();
    let daily = create(
        &op,
        json!({"session_id": mine, "cron": "0 8 * * *", "text": "good morning"}),
    )
    .await;
    let fields: BTreeSet<&str> = daily
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        fields,
        BTreeSet::from([
            "id",
            "session_id",
            "cron",
            "once_at",
            "text",
            "missed",
            "source",
            "next_due_at",
            "last_due_at",
            "created_at"
        ])
    );
    assert_eq!(daily["session_id"], mine.as_str());
    assert_eq!(daily["cron"], "0 8 * * *");
    assert!(
        daily["once_at"].is_null(),
        "a cron schedule has no one due time"
    );
    assert_eq!(daily["text"], "good morning");
    assert_eq!(daily["missed"], "run_once", "the default");
    assert_eq!(daily["source"], "api");
    assert_eq!(daily["last_due_at"], Value::Null);
    // The next 08:00 UTC.
    let next = ms(&daily["next_due_at"]);
    assert!(next > before && next - before <= 86_400_000, "{daily}");
    assert_eq!(next % 86_400_000, 8 * 3_600_000, "{daily}");
    assert!(ms(&daily["created_at"]) >= before - 1_000, "{daily}");

    // Someone else's session is not found; their own is fine.
    let r = other
        .post(
            "/v1/schedules",
            &json!({"session_id": mine, "cron": "0 8 * * *", "text": "x"}),
        )
        .await;
    assert_eq!(
        (r.status, r.error_code()),
        (404, Some("not_found")),
        "{}",
        r.text
    );
    let weekly = create(
        &other,
        json!({"session_id": theirs, "cron": "30 9 * * 1", "text": "weekly", "missed": "skip"}),
    )
    .await;
    assert_eq!(weekly["missed"], "skip");

    // Each sees its own; the operator sees all.
    let daily_id = daily["id"].as_str().unwrap().to_owned();
    let weekly_id = weekly["id"].as_str().unwrap().to_owned();
    assert_eq!(
        ids(&list(&other).await),
        BTreeSet::from([weekly_id.clone()])
    );
    assert_eq!(
        ids(&list(&op).await),
        BTreeSet::from([daily_id.clone(), weekly_id.clone()])
    );
    let r = other.with_token(None).get("/v1/schedules").await;
    assert_eq!(r.status, 401, "{}", r.text);

    // Bad input: a stable code, never a 5xx.
    for (body, code) in [
        (
            json!({"session_id": mine, "cron": "61 * * * *", "text": "x"}),
            "invalid_cron",
        ),
        (
            json!({"session_id": mine, "cron": "* * * *", "text": "x"}),
            "invalid_cron",
        ),
        (
            json!({"session_id": mine, "cron": "0 0 30 2 *", "text": "x"}),
            "invalid_cron",
        ),
        (json!({"session_id": mine, "text": "x"}), "invalid_cron"),
        (
            json!({"session_id": mine, "cron": "0 8 * * *", "text": "x", "missed": "twice"}),
            "invalid_missed",
        ),
        (
            json!({"session_id": mine, "cron": "0 8 * * *", "text": "x", "missed": 1}),
            "invalid_missed",
        ),
        (
            json!({"session_id": "abc", "cron": "0 8 * * *", "text": "x"}),
            "invalid_id",
        ),
        (json!({"cron": "0 8 * * *", "text": "x"}), "invalid_id"),
        (
            json!({"session_id": mine, "cron": "0 8 * * *", "text": " "}),
            "empty_input",
        ),
        (
            json!({"session_id": mine, "cron": "0 8 * * *"}),
            "empty_input",
        ),
        (
            json!({"session_id": mine, "cron": "0 8 * * *", "text": "x", "every": "day"}),
            "invalid_field",
        ),
        (
            json!({"session_id": mine, "cron": "0 8 * * *", "text": "x", "owner": "y"}),
            "forbidden_field",
        ),
    ] {
        let r = op.post("/v1/schedules", &body).await;
        assert_eq!(
            (r.status, r.error_code()),
            (400, Some(code)),
            "{body}: {}",
            r.text
        );
    }
    let r = op
        .post(
            "/v1/schedules",
            &json!({"session_id": uuid::Uuid::new_v4(), "cron": "0 8 * * *", "text": "x"}),
        )
        .await;
    assert_eq!(
        (r.status, r.error_code()),
        (404, Some("not_found")),
        "{}",
        r.text
    );
    let r = op
        .send_raw("/v1/schedules", "application/json", b"[1]".to_vec())
        .await;
    assert_eq!(
        (r.status, r.error_code()),
        (400, Some("invalid_json")),
        "{}",
        r.text
    );
    assert_eq!(ids(&list(&op).await).len(), 2, "nothing refused was stored");

    // Delete: someone else's is not found, a malformed id is 400, a missing one 404.
    let r = delete(&other, &daily_id).await;
    assert_eq!(
        (r.status, r.error_code()),
        (404, Some("not_found")),
        "{}",
        r.text
    );
    let r = delete(&op, "abc").await;
    assert_eq!(
        (r.status, r.error_code()),
        (400, Some("invalid_id")),
        "{}",
        r.text
    );
    let r = delete(&op, &uuid::Uuid::new_v4().to_string()).await;
    assert_eq!(
        (r.status, r.error_code()),
        (404, Some("not_found")),
        "{}",
        r.text
    );
    let r = delete(&other, &weekly_id).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(r.text, "");
    let r = delete(&other, &weekly_id).await;
    assert_eq!(r.status, 404, "gone: {}", r.text);
    let r = delete(&op, &daily_id).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert!(list(&op).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_schedules_api_create_list_delete_and_auth_sqlite() {
    api_and_auth(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_schedules_api_create_list_delete_and_auth_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    api_and_auth(Some(db.url())).await;
}

// ---------------------------------------------------------------------------------------
// Firing: admitted through the normal path, the turn completes, delete stops it.

async fn fires_and_completes(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, database).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let made = create(
        &api,
        json!({"session_id": session, "cron": "*/2 * * * * *", "text": "scheduled ping"}),
    )
    .await;
    let id = made["id"].as_str().unwrap().to_owned();
    let first = wait_fired(&tk, &id, 0, Duration::from_secs(10)).await;
    assert_eq!(first.due % 2_000, 0, "due every 2 s: {first:?}");
    assert_eq!(first.session_id, session);
    assert_eq!(first.surface, "internal");
    assert_eq!(first.principal, "operator", "the session owner's input");

    // Its turn completes with a receipt, like any submission's.
    let done = api.wait_terminal(&first.id, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert_eq!(done["source"], "schedule", "{done}");
    assert_eq!(
        done["outcome"]["final_response"], "ok: scheduled ping",
        "{done}"
    );
    let events = api.all_events(&session, 0).await;
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "admission.queued" && e["admission_id"] == first.id.as_str()),
        "the admission is in the session's event log"
    );
    let transcript = api.messages(&session).await;
    assert!(
        transcript
            .iter()
            .any(|m| m["role"] == "user" && m["content"] == "scheduled ping"),
        "{transcript:?}"
    );

    // It goes on every 2 s, each due time once, and the list shows where it is.
    let second = wait_fired(&tk, &id, first.due + 2_000, Duration::from_secs(10)).await;
    api.wait_terminal(&second.id, BOUND).await;
    let shown = list(&api).await;
    assert_eq!(shown.len(), 1);
    let last = ms(&shown[0]["last_due_at"]);
    assert!(last >= second.due, "{}", shown[0]);
    assert_eq!(ms(&shown[0]["next_due_at"]) % 2_000, 0, "{}", shown[0]);
    assert!(ms(&shown[0]["next_due_at"]) > last, "{}", shown[0]);

    // Deleting it stops future due times; what it admitted stays.
    let r = delete(&api, &id).await;
    assert_eq!(r.status, 204, "{}", r.text);
    // A firing already past its deletion check may still land: let it (part of the scenario).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let at_delete = due_times(&tk.database_url, &id).await;
    // A deleted schedule's timer that does not fire leaves no fact to wait for: watch two due
    // times go by.
    tokio::time::sleep(wait::TWO_DUE_TIMES).await;
    assert_eq!(
        due_times(&tk.database_url, &id).await,
        at_delete,
        "a deleted schedule fired again"
    );
    assert!(at_delete.len() >= 2);
    for f in fired(&tk.database_url, &id).await {
        let a = api.wait_terminal(&f.id, BOUND).await;
        assert_eq!(a["outcome"]["result"], "completed", "{a}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_schedule_every_two_seconds_fires_and_its_turn_completes_sqlite() {
    fires_and_completes(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_schedule_every_two_seconds_fires_and_its_turn_completes_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    fires_and_completes(Some(db.url())).await;
}

// ---------------------------------------------------------------------------------------
// A restart across missed due times: once per due time, run_once or skip.

/// Every 5 s. The process is SIGKILLed right after due time D0 was admitted and started again
/// just after D0 + 10 s, so D0 + 5 s and D0 + 10 s fall due while it is down; it is up again
/// before D0 + 15 s, the first due time it watches.
async fn restart_across_missed_due_times(missed: &str, database: Option<&str>) {
    const PERIOD: i64 = 5_000;
    let provider = ScriptedProvider::start();
    let mut tk = start(&provider, database).await;
    let api = tk.api();
    let session = api.create_session_id().await;
    let made = create(
        &api,
        json!({"session_id": session, "cron": "*/5 * * * * *", "text": "every five", "missed": missed}),
    )
    .await;
    let id = made["id"].as_str().unwrap().to_owned();
    let d0 = wait_fired(&tk, &id, 0, Duration::from_secs(15)).await.due;
    tk.kill();
    let killed_at = now_ms();
    assert!(
        killed_at < d0 + PERIOD,
        "the kill came too late for this test's timing ({} ms after D0)",
        killed_at - d0
    );
    assert_eq!(
        due_times(&tk.database_url, &id).await,
        vec![d0],
        "before the kill"
    );

    let restart_at = d0 + 2 * PERIOD + 300;
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(restart_at - now_ms()).unwrap_or(0),
    ))
    .await;
    let restarting = now_ms();
    tk.restart().await;
    let up = now_ms();
    assert!(
        restarting > d0 + 2 * PERIOD,
        "restarted before the second missed due time"
    );
    assert!(
        up < d0 + 3 * PERIOD,
        "the restart took {} ms, too long for this test's timing",
        up - restarting
    );
    // The first due time the new process watches.
    let after = wait_fired(&tk, &id, d0 + 3 * PERIOD, Duration::from_secs(15)).await;
    assert_eq!(after.due, d0 + 3 * PERIOD);
    let api = tk.api();
    api.wait_terminal(&after.id, BOUND).await;

    let dues: Vec<i64> = due_times(&tk.database_url, &id)
        .await
        .into_iter()
        .filter(|d| *d <= d0 + 3 * PERIOD)
        .collect();
    let expected = match missed {
        // One run for the missed window, for its latest due time.
        "run_once" => vec![d0, d0 + 2 * PERIOD, d0 + 3 * PERIOD],
        // None for the missed window; it continues from the next due time.
        "skip" => vec![d0, d0 + 3 * PERIOD],
        other => panic!("{other}"),
    };
    assert_eq!(
        dues,
        expected,
        "missed = {missed}: due times admitted (relative to D0: {:?})",
        dues.iter().map(|d| d - d0).collect::<Vec<_>>()
    );
    let shown = list(&api).await;
    assert!(
        ms(&shown[0]["last_due_at"]) >= d0 + 3 * PERIOD,
        "{}",
        shown[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_missed_due_times_run_once_after_a_restart_sqlite() {
    restart_across_missed_due_times("run_once", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_missed_due_times_run_once_after_a_restart_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    restart_across_missed_due_times("run_once", Some(db.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_missed_due_times_are_skipped_after_a_restart_sqlite() {
    restart_across_missed_due_times("skip", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_missed_due_times_are_skipped_after_a_restart_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    restart_across_missed_due_times("skip", Some(db.url())).await;
}

// ---------------------------------------------------------------------------------------
// A refused admission is not recorded as done.

/// Without a provider every admission is refused (`no_provider`): the due times are logged
/// with the reason and tried again, and none is recorded as handled. Started again with a
/// provider, the schedule runs once for them (they fell due before this start: `run_once`).
async fn refused_admissions_stay_open(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let mut tk = start(&provider, database).await;
    let with_provider = std::fs::read_to_string(&tk.config_path).expect("read turnkey.toml");
    let head = with_provider
        .find("[[providers]]")
        .expect("a provider table");
    let tail = with_provider.find("[lease]").expect("a lease table");
    let without_provider = format!("{}{}", &with_provider[..head], &with_provider[tail..]);
    let session = tk.api().create_session_id().await;
    let made = create(
        &tk.api(),
        json!({"session_id": session, "cron": "*/2 * * * * *", "text": "refused at first"}),
    )
    .await;
    let id = made["id"].as_str().unwrap().to_owned();
    std::fs::write(&tk.config_path, &without_provider).expect("write turnkey.toml");
    tk.restart().await;
    let refused_from = now_ms();
    // Two attempts at least: the first due time, and its retry 5 s later; each is logged
    // after the refused admission, so what the store holds is counted after both.
    let refused = |log: &str| {
        log.lines()
            .filter(|l| l.contains("scheduled input not admitted") && l.contains("no_provider"))
            .count()
    };
    let logged = wait::within(BOUND, || async {
        let log = stderr_of_start(&tk, 2);
        (refused(&log) >= 2).then_some(())
    })
    .await;
    let log = stderr_of_start(&tk, 2);
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("scheduled input not admitted") && l.contains("no_provider"))
        .collect();
    assert!(
        logged.is_some() && refusals.len() >= 2,
        "refusals are logged with the reason and tried again: {refusals:?}"
    );
    let before_restore: Vec<i64> = due_times(&tk.database_url, &id)
        .await
        .into_iter()
        .filter(|d| *d > refused_from)
        .collect();
    assert!(
        before_restore.is_empty(),
        "admitted without a provider: {before_restore:?}"
    );
    let shown = list(&tk.api()).await;
    let recorded = shown[0]["last_due_at"].clone();
    assert!(
        recorded.is_null() || ms(&recorded) < refused_from,
        "a refused due time was recorded as handled: {}",
        shown[0]
    );

    std::fs::write(&tk.config_path, &with_provider).expect("write turnkey.toml");
    tk.restart().await;
    // The new process watches from its start: the due times before it were refused or missed.
    let since = watching_since(&stderr_of_start(&tk, 3));
    let catch_up = wait_fired(&tk, &id, refused_from, Duration::from_secs(10)).await;
    // The latest due time before the start; on a loaded machine the scheduler's first pass
    // may come after the next due time too, and then one admission for that one covers both
    // (the missed window runs once, never once per due time).
    let latest_missed = since - since.rem_euclid(2_000);
    assert!(
        (latest_missed..=latest_missed + 4_000).contains(&catch_up.due),
        "the first admission is for the latest due time that had passed: {catch_up:?}, \
         latest before the start {latest_missed}"
    );
    let api = tk.api();
    let done = api.wait_terminal(&catch_up.id, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    // Once for the whole window without a provider, not once per due time in it.
    let in_window: Vec<i64> = due_times(&tk.database_url, &id)
        .await
        .into_iter()
        .filter(|d| *d > refused_from && *d <= since)
        .collect();
    let once: Vec<i64> = if catch_up.due <= since {
        vec![catch_up.due]
    } else {
        Vec::new()
    };
    assert_eq!(in_window, once);
}

/// The stderr lines of the `n`th start of `tk` (the harness marks each start).
fn stderr_of_start(tk: &Turnkey, n: u32) -> String {
    let log = std::fs::read_to_string(tk.dir.path().join("turnkey.stderr.log")).expect("log");
    let from = log
        .find(&format!("=== start #{n} env"))
        .unwrap_or_else(|| panic!("no start #{n} in the log"));
    let rest = &log[from..];
    let to = rest[1..].find("=== start #").map_or(rest.len(), |i| i + 1);
    rest[..to].to_owned()
}

/// `watching_since` of the scheduler's start line in `log`.
fn watching_since(log: &str) -> i64 {
    let line = log
        .lines()
        .find(|l| l.contains("scheduler started"))
        .unwrap_or_else(|| panic!("no scheduler start in:\n{log}"));
    let digits: String = line
        .split("watching_since=")
        .nth(1)
        .unwrap_or_else(|| panic!("no watching_since in {line:?}"))
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().expect("watching_since ms")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_refused_admission_is_not_recorded_and_runs_once_later_sqlite() {
    refused_admissions_stay_open(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_refused_admission_is_not_recorded_and_runs_once_later_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    refused_admissions_stay_open(Some(db.url())).await;
}

// ---------------------------------------------------------------------------------------
// [[schedules]] in the configuration.

/// `turnkey.toml` as the harness wrote it, with this appended.
fn write_config(tk: &Turnkey, base: &str, extra: &str) {
    std::fs::write(&tk.config_path, format!("{base}\n{extra}")).expect("write turnkey.toml");
}

async fn configured_schedule(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let mut tk = start(&provider, database).await;
    let base = std::fs::read_to_string(&tk.config_path).expect("read turnkey.toml");
    let session = tk.api().create_session_id().await;
    let table = format!(
        "[[schedules]]\nsession_id = \"{session}\"\ncron = \"*/2 * * * * *\"\ntext = \"from the config\"\n"
    );
    write_config(&tk, &base, &table);
    tk.restart().await;
    let api = tk.api();
    let shown = list(&api).await;
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0]["source"], "config");
    assert_eq!(shown[0]["missed"], "run_once");
    assert_eq!(shown[0]["session_id"], session.as_str());
    let id = shown[0]["id"].as_str().unwrap().to_owned();
    let first = wait_fired(&tk, &id, 0, Duration::from_secs(10)).await;
    assert_eq!(first.surface, "internal");
    api.wait_terminal(&first.id, BOUND).await;

    // It cannot be deleted through the API: it would come back with the file.
    let r = delete(&api, &id).await;
    assert_eq!(
        (r.status, r.error_code()),
        (409, Some("config_schedule")),
        "{}",
        r.text
    );

    // A restart finds the same schedule (same id, one row) and its history: no due time twice.
    tk.restart().await;
    let api = tk.api();
    let again = list(&api).await;
    assert_eq!(ids(&again), BTreeSet::from([id.clone()]), "{again:?}");
    let resumed = now_ms();
    let later = wait_fired(&tk, &id, resumed, Duration::from_secs(10)).await;
    api.wait_terminal(&later.id, BOUND).await;
    let dues = due_times(&tk.database_url, &id).await;
    assert!(dues.len() >= 2, "{dues:?}");

    // Removed from the file: gone at the next start, and it fires no more.
    write_config(&tk, &base, "");
    tk.restart().await;
    let api = tk.api();
    assert!(list(&api).await.is_empty());
    let removed_at = now_ms();
    // A removed schedule's timer that does not fire leaves no fact to wait for: watch two due
    // times go by.
    tokio::time::sleep(wait::TWO_DUE_TIMES).await;
    let after: Vec<i64> = due_times(&tk.database_url, &id)
        .await
        .into_iter()
        .filter(|d| *d > removed_at)
        .collect();
    assert!(after.is_empty(), "a removed schedule fired: {after:?}");

    // A table naming no session stops the start, naming the key (exit 2).
    tk.kill();
    write_config(
        &tk,
        &base,
        &format!(
            "[[schedules]]\nsession_id = \"{}\"\ncron = \"0 8 * * *\"\ntext = \"x\"\n",
            uuid::Uuid::new_v4()
        ),
    );
    let (code, stderr) = serve_once(&tk).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("schedules[0].session_id"), "{stderr}");
    assert!(stderr.contains("there is no session"), "{stderr}");
}

/// Runs `turnkey serve` on the test's config once more, expecting it to refuse to start:
/// answers its exit code and stderr (killed after 60 s if it starts after all).
async fn serve_once(tk: &Turnkey) -> (Option<i32>, String) {
    let binary = turnkey_tests::harness::turnkey_binary().expect("binary");
    let log_path = tk.dir.path().join("refused.stderr.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut child = std::process::Command::new(binary)
        .args(["serve", "--bind", "127.0.0.1:0", "--config"])
        .arg(&tk.config_path)
        .current_dir(tk.dir.path())
        .env_remove("DATABASE_URL")
        .env_remove("FAILPOINTS")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_API_KEY")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("run turnkey");
    let status = wait::within(BOUND, || {
        let exited = child.try_wait().expect("wait");
        async move { exited }
    })
    .await;
    if status.is_none() {
        child.kill().expect("kill");
        child.wait().expect("reap");
    }
    let stderr = std::fs::read_to_string(&log_path).unwrap_or_default();
    (status.and_then(|s| s.code()), stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_configured_schedule_fires_and_survives_restarts_without_duplicates_sqlite() {
    configured_schedule(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_configured_schedule_fires_and_survives_restarts_without_duplicates_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    configured_schedule(Some(db.url())).await;
}

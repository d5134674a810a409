//! Chaos (SPEC R13.6, R4.2, R2, R12): three replicas on one fresh PostgreSQL database, 32
//! sessions, clients submitting to random replicas with idempotent retries (the same request
//! id sent again, after failures and at random after successes), an SSE reader per session
//! that reconnects to a random replica after every cut, and one replica SIGKILLed and restarted
//! every few seconds. After the survivors drain: every admission is `terminal` or `unknown`
//! (a cut turn resumes by itself, SPEC R13.9: only one cut past `max_resumes` is `unknown`), none ran
//! twice, no session ever had two model calls in flight, and every reader saw its
//! session's events with no gap. `CHAOS_SEED` replays a run's schedule.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use eventsource_stream::Eventsource;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use turnkey_tests::harness::DEFAULT_MAX_RESUMES;
use turnkey_tests::wait::within;
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

const REPLICAS: usize = 3;
const SESSIONS: usize = 32;
/// How long clients submit and replicas are killed.
const LOAD: Duration = Duration::from_secs(22);
/// Pause between kills, in ms (uniform).
const KILL_EVERY_MS: (u64, u64) = (2_000, 3_500);
/// Pause between one client's submissions, in ms (uniform).
const SUBMIT_EVERY_MS: (u64, u64) = (600, 2_400);
/// How often a client sends an accepted request again (it must get the same receipt).
const RESEND_CHANCE: f64 = 0.25;
/// A submission that gets no answer this soon is sent again elsewhere (a replica frozen or
/// killed mid-request must not stall the client).
const SUBMIT_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts per submission before the client gives up (each on a random replica).
const ATTEMPTS: usize = 40;
/// After the load: how long the survivors get to drain, and the readers to catch up.
const DRAIN_BOUND: Duration = Duration::from_secs(45);
/// An SSE reader that hears nothing for this long reconnects (and looks at its target).
const QUIET: Duration = Duration::from_secs(2);
/// The whole test, start-ups included.
const WALL: Duration = Duration::from_secs(120);

fn session_tag(i: usize) -> String {
    format!("[chaos-s{i:02}]")
}

fn admission_tag(request_id: &str) -> String {
    format!("[adm:{request_id}]")
}

#[derive(Default)]
struct Tally {
    /// request id -> admission id of every accepted submission.
    accepted: HashMap<String, String>,
    resent: usize,
    given_up: usize,
    transport_retries: usize,
    reconnects: usize,
    gaps: Vec<String>,
}

type Shared = Arc<Mutex<Tally>>;

fn lock(t: &Shared) -> std::sync::MutexGuard<'_, Tally> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_6_chaos_three_replicas_with_kills_lose_nothing_and_run_nothing_twice() {
    let wall = Instant::now();
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    let seed: u64 = match std::env::var("CHAOS_SEED") {
        Ok(s) => s.parse().expect("CHAOS_SEED must be an integer"),
        Err(_) => rand::random(),
    };
    println!("chaos seed {seed} (CHAOS_SEED={seed} replays this schedule)");
    let mut rng = StdRng::seed_from_u64(seed);

    let provider = ScriptedProvider::start();
    let chunks = [
        "one ", "two ", "three ", "four ", "five ", "six ", "seven ", "eight",
    ];
    provider.on_user_text("[chaos-", Reply::chunks(&chunks, Duration::from_millis(20)));
    let mut replicas = Vec::new();
    for i in 0..REPLICAS {
        let opts = TurnkeyOptions::new(&provider)
            .database(db.url())
            .provider_api_key(&format!("sk-replica-{i}"));
        replicas.push(Turnkey::start(opts).await);
    }
    let apis: Arc<Vec<Api>> = Arc::new(replicas.iter().map(Turnkey::api).collect());
    // (base URL, token) per replica: a restart keeps both.
    let doors: Arc<Vec<(String, String)>> = Arc::new(
        replicas
            .iter()
            .map(|r| (r.url.clone(), r.token.clone()))
            .collect(),
    );
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        sessions.push(apis[0].create_session_id().await);
    }
    let store = turnkey_tests::pg::open(db.url()).await;

    let tally: Shared = Arc::default();
    let load_over = Arc::new(AtomicBool::new(false));
    let targets: Arc<Mutex<Option<HashMap<String, i64>>>> = Arc::default();
    let mut clients = Vec::new();
    let mut readers = Vec::new();
    for (i, session) in sessions.iter().enumerate() {
        clients.push(tokio::spawn(client(
            i,
            session.clone(),
            apis.clone(),
            StdRng::seed_from_u64(seed ^ (i as u64 + 1)),
            tally.clone(),
            load_over.clone(),
        )));
        readers.push(tokio::spawn(reader(
            session.clone(),
            doors.clone(),
            StdRng::seed_from_u64(seed.rotate_left(17) ^ (i as u64 + 1)),
            tally.clone(),
            targets.clone(),
            wall + WALL - Duration::from_secs(5),
        )));
    }

    // The killer: one replica at a time, SIGKILL and a restart on the same address.
    let load_end = Instant::now() + LOAD;
    // pid -> when it was killed (ms since the epoch, the store's clock).
    let mut killed_pids: HashMap<i64, i64> = HashMap::new();
    // replica -> the instants it was killed (the test's clock, the provider's too).
    let mut kills: HashMap<usize, Vec<Instant>> = HashMap::new();
    while Instant::now() < load_end {
        let pause = rng.gen_range(KILL_EVERY_MS.0..=KILL_EVERY_MS.1);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if Instant::now() >= load_end {
            break;
        }
        let victim = rng.gen_range(0..REPLICAS);
        if let Some(pid) = replicas[victim].pid() {
            killed_pids.insert(i64::from(pid), epoch_ms());
        }
        kills.entry(victim).or_default().push(Instant::now());
        replicas[victim].restart_at_same_address().await;
    }
    load_over.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }

    // The survivors drain: nothing stays queued or started.
    const OPEN: &str =
        "SELECT COUNT(*) AS n FROM session_admissions WHERE status IN ('queued', 'started')";
    let drained = within(DRAIN_BOUND, || async {
        (count(&store, OPEN).await == 0).then_some(())
    })
    .await;
    if drained.is_none() {
        let open = count(&store, OPEN).await;
        panic!("{open} admissions still queued or started after {DRAIN_BOUND:?} (seed {seed})");
    }
    let drained_after = wall.elapsed();
    let last_seqs: HashMap<String, i64> = rows(&store, "SELECT id, last_event_seq FROM sessions")
        .await
        .into_iter()
        .map(|r| {
            (
                r.try_get::<String>("", "id").unwrap(),
                r.try_get::<i64>("", "last_event_seq").unwrap(),
            )
        })
        .collect();
    *targets.lock().unwrap_or_else(|e| e.into_inner()) = Some(last_seqs);
    let mut reached = 0;
    for r in readers {
        reached += usize::from(r.await.unwrap());
    }

    // Every admission settled: terminal or unknown, whatever replica admitted or ran it.
    let admissions = rows(
        &store,
        "SELECT id, session_id, seq, request_id, status, outcome, owner_pid, started_at, \
         attempt, crash_resumes FROM session_admissions ORDER BY session_id, seq",
    )
    .await;
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    let mut results: BTreeMap<String, usize> = BTreeMap::new();
    let mut status_of: HashMap<String, String> = HashMap::new();
    let mut attempts_of: HashMap<String, i64> = HashMap::new();
    let mut resumed = 0;
    for a in &admissions {
        let status: String = a.try_get("", "status").unwrap();
        let attempt = i64::from(a.try_get::<i32>("", "attempt").unwrap());
        let crashes = usize::try_from(a.try_get::<i32>("", "crash_resumes").unwrap()).unwrap();
        let id: String = a.try_get("", "id").unwrap();
        // SPEC R13.9: every turn here is text only, so a cut one resumes by itself; only a
        // turn cut again after `[agent] max_resumes` resumes may be `unknown`.
        assert!(
            status != "unknown" || crashes >= DEFAULT_MAX_RESUMES,
            "admission {id} is unknown after {crashes} crash resume(s) (seed {seed})"
        );
        assert!(
            crashes <= DEFAULT_MAX_RESUMES,
            "admission {id} resumed after {crashes} crashes"
        );
        resumed += usize::from(attempt >= 2);
        attempts_of.insert(id, attempt);
        *by_status.entry(status.clone()).or_default() += 1;
        if status == "terminal" {
            let outcome: Option<String> = a.try_get("", "outcome").unwrap();
            let outcome: Value = serde_json::from_str(&outcome.unwrap_or_default()).unwrap();
            let result = outcome["result"].as_str().unwrap_or("?").to_string();
            *results.entry(result).or_default() += 1;
        }
        status_of.insert(a.try_get("", "id").unwrap(), status);
    }
    let tally = std::mem::take(&mut *lock(&tally));
    for (rid, id) in &tally.accepted {
        let status = status_of
            .get(id)
            .unwrap_or_else(|| panic!("accepted admission {id} ({rid}) is not stored"));
        assert!(
            status == "terminal" || status == "unknown",
            "admission {id} is {status} (seed {seed})"
        );
    }
    for (status, n) in &by_status {
        assert!(
            status == "terminal" || status == "unknown",
            "{n} admissions are {status} (seed {seed})"
        );
    }

    // Nothing ran twice: one model call at most per attempt (the first, and each resume after
    // a cut), one `turn.started` per attempt, and one end at most.
    let mut ran_once = 0;
    for (rid, id) in &tally.accepted {
        let calls = provider.request_count_for(&admission_tag(rid));
        let attempts = attempts_of.get(id).copied().unwrap_or(1);
        assert!(
            calls as i64 <= attempts,
            "{rid} reached the model {calls} times in {attempts} attempt(s) (seed {seed})"
        );
        ran_once += usize::from(calls > 0);
    }
    let started = rows(
        &store,
        "SELECT admission_id, COUNT(*) AS n FROM session_events WHERE kind = 'turn.started' \
         GROUP BY admission_id",
    )
    .await;
    for r in &started {
        let id: String = r.try_get("", "admission_id").unwrap();
        let n: i64 = r.try_get("", "n").unwrap();
        let attempts = attempts_of.get(&id).copied().unwrap_or(1);
        assert!(
            n <= attempts,
            "{id} started {n} times in {attempts} attempt(s) (seed {seed})"
        );
    }
    let twice = rows(
        &store,
        "SELECT admission_id, COUNT(*) AS n FROM session_events WHERE kind = 'turn.finished' \
         GROUP BY admission_id HAVING COUNT(*) > 1",
    )
    .await;
    assert!(
        twice.is_empty(),
        "{} admissions finished twice (seed {seed})",
        twice.len()
    );
    let completed = results.get("completed").copied().unwrap_or_default();
    assert!(
        ran_once >= completed,
        "every completed admission reached the model"
    );

    // One turn per session at a time (R4.2), across the replicas and their restarts. A call
    // ends at the latest when the process that made it was killed: the provider only notices a
    // dead client at its next write, and meanwhile a resumed attempt (SPEC R13.9) may already
    // ask again from another process.
    let requests = provider.requests();
    for i in 0..SESSIONS {
        let at_once = at_once(&requests, &session_tag(i), &kills);
        assert!(
            at_once <= 1,
            "session {i} had {at_once} model calls in flight at once (seed {seed})"
        );
    }
    let across = provider.max_concurrency_where(|t| t.contains("[chaos-"));

    // Takeovers: the process that ran a session's last turn was killed, and its next turn ran
    // on another one.
    let mut takeovers = 0;
    let mut prev: Option<(String, i64, i64)> = None;
    for a in &admissions {
        let session: String = a.try_get("", "session_id").unwrap();
        let pid = a.try_get::<Option<i64>>("", "owner_pid").unwrap();
        let started = a.try_get::<Option<i64>>("", "started_at").unwrap();
        let (Some(pid), Some(started)) = (pid, started) else {
            continue;
        };
        if let Some((ps, ppid, pstarted)) = &prev {
            let killed_between = killed_pids
                .get(ppid)
                .is_some_and(|&k| *pstarted < k && k < started);
            if *ps == session && *ppid != pid && killed_between {
                takeovers += 1;
            }
        }
        prev = Some((session, pid, started));
    }

    assert!(
        tally.gaps.is_empty(),
        "SSE gaps: {:?} (seed {seed})",
        tally.gaps
    );
    assert_eq!(
        reached, SESSIONS,
        "every SSE reader reached its session's last event"
    );
    let unknown = by_status.get("unknown").copied().unwrap_or_default();
    println!(
        "chaos (seed {seed}): {} accepted, {} admissions stored, {completed} completed, \
         {resumed} resumed by themselves, {unknown} unknown (cut past max_resumes), other results {:?}; {} killed, {takeovers} takeovers; {} resent with \
         the same receipt, {} transport retries, {} given up; {} SSE reconnects, 0 gaps; \
         {} model calls, at most {across} at once across sessions; drained after {:.1} s, \
         wall {:.1} s",
        tally.accepted.len(),
        admissions.len(),
        results
            .iter()
            .filter(|(r, _)| r.as_str() != "completed")
            .collect::<Vec<_>>(),
        killed_pids.len(),
        tally.resent,
        tally.transport_retries,
        tally.given_up,
        tally.reconnects,
        provider.request_count(),
        drained_after.as_secs_f64(),
        wall.elapsed().as_secs_f64()
    );
    assert!(killed_pids.len() >= 4, "the schedule killed too little");
    assert!(
        tally.accepted.len() >= SESSIONS * 4,
        "too little was accepted"
    );
    assert!(wall.elapsed() < WALL, "over the wall-clock bound");
    drop(replicas);
}

/// The most calls of `tag` in flight at once, each ending when it finished or when the replica
/// that made it (told by its api key) was killed, whichever came first.
fn at_once(
    requests: &[turnkey_tests::RecordedRequest],
    tag: &str,
    kills: &HashMap<usize, Vec<Instant>>,
) -> usize {
    let now = Instant::now();
    let calls = requests.iter().filter(|r| r.last_user_text.contains(tag));
    turnkey_tests::stats::max_overlap(calls.map(|r| {
        let replica = r
            .header("authorization")
            .and_then(|h| h.strip_prefix("Bearer sk-replica-"))
            .and_then(|i| i.parse::<usize>().ok());
        let killed = replica
            .and_then(|i| kills.get(&i))
            .and_then(|ks| ks.iter().find(|k| **k > r.received_at).copied());
        let end = match (r.finished_at, killed) {
            (Some(f), Some(k)) => f.min(k),
            (Some(f), None) => f,
            (None, Some(k)) => k,
            (None, None) => now,
        };
        (r.received_at, end)
    }))
}

/// Submits to random replicas until the load is over; every accepted receipt is recorded.
async fn client(
    i: usize,
    session: String,
    apis: Arc<Vec<Api>>,
    mut rng: StdRng,
    tally: Shared,
    load_over: Arc<AtomicBool>,
) {
    let mut n = 0;
    while !load_over.load(Ordering::SeqCst) {
        let pause = rng.gen_range(SUBMIT_EVERY_MS.0..=SUBMIT_EVERY_MS.1);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        n += 1;
        let rid = format!("chaos-{i:02}-{n:03}-{}", rng.gen::<u32>());
        let text = format!("{} {} message {n}", session_tag(i), admission_tag(&rid));
        let Some(id) = submit(&apis, &mut rng, &session, &text, &rid, &tally).await else {
            lock(&tally).given_up += 1;
            continue;
        };
        lock(&tally).accepted.insert(rid.clone(), id.clone());
        if rng.gen_bool(RESEND_CHANCE) {
            let again = submit(&apis, &mut rng, &session, &text, &rid, &tally).await;
            if let Some(again) = again {
                assert_eq!(again, id, "request {rid} sent again got another admission");
                lock(&tally).resent += 1;
            }
        }
    }
}

/// One submission, retried with the same request id on random replicas until one answers.
async fn submit(
    apis: &[Api],
    rng: &mut StdRng,
    session: &str,
    text: &str,
    rid: &str,
    tally: &Shared,
) -> Option<String> {
    for _ in 0..ATTEMPTS {
        let api = &apis[rng.gen_range(0..apis.len())];
        let answer = tokio::time::timeout(SUBMIT_TIMEOUT, api.try_submit(session, text, Some(rid)))
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {SUBMIT_TIMEOUT:?}")));
        match answer {
            Ok(r) if r.status == 200 || r.status == 202 => {
                assert_eq!(r.body["duplicate"], r.status == 200, "{}", r.text);
                return Some(r.str_field("admission_id"));
            }
            // A replica that is stopping or whose store hiccups: another one may answer.
            Ok(r) if r.status >= 500 => {}
            Ok(r) => panic!("submission {rid}: {} {}", r.status, r.text),
            Err(_) => lock(tally).transport_retries += 1,
        }
        let pause = rng.gen_range(50..=200);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    None
}

/// Follows a session's events over SSE from random replicas, resuming with `Last-Event-ID`
/// after every cut, and checks that the seqs it sees are consecutive. Answers whether it
/// reached the session's last event once the target is known.
async fn reader(
    session: String,
    doors: Arc<Vec<(String, String)>>,
    mut rng: StdRng,
    tally: Shared,
    targets: Arc<Mutex<Option<HashMap<String, i64>>>>,
    deadline: Instant,
) -> bool {
    let http = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut last: i64 = 0;
    let reached = |last: i64| -> bool {
        targets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|t| t.get(&session).is_some_and(|&target| last >= target))
    };
    let mut first = true;
    while Instant::now() < deadline && !reached(last) {
        if !first {
            lock(&tally).reconnects += 1;
            tokio::time::sleep(Duration::from_millis(rng.gen_range(50..=200))).await;
        }
        first = false;
        let (base, token) = &doors[rng.gen_range(0..doors.len())];
        let mut req = http
            .get(format!("{base}/v1/sessions/{session}/events"))
            .header("Accept", "text/event-stream")
            .bearer_auth(token);
        if last > 0 {
            req = req.header("Last-Event-ID", last.to_string());
        }
        let Ok(resp) = req.send().await else {
            continue;
        };
        if resp.status().as_u16() != 200 {
            continue;
        }
        let mut stream = resp.bytes_stream().eventsource();
        // A quiet stream is left after a while so the reader notices its target.
        while let Ok(Some(Ok(ev))) = tokio::time::timeout(QUIET, stream.next()).await {
            let Ok(seq) = ev.id.parse::<i64>() else {
                continue;
            };
            if seq != last + 1 {
                lock(&tally)
                    .gaps
                    .push(format!("{session}: after {last} came {seq}"));
            }
            last = last.max(seq);
            if reached(last) {
                break;
            }
        }
    }
    reached(last)
}

fn epoch_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

async fn rows(db: &DatabaseConnection, sql: &str) -> Vec<sea_orm::QueryResult> {
    db.query_all_raw(Statement::from_string(DbBackend::Postgres, sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

async fn count(db: &DatabaseConnection, sql: &str) -> i64 {
    rows(db, sql).await[0].try_get::<i64>("", "n").unwrap()
}

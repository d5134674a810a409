//! Crash soak (SPEC R13.9, R12, R2.5): clients keep submitting to 12 sessions while the server
//! is SIGKILLed at random moments (20 times by default) and started again at the same address.
//! Four inputs in five are text turns streamed over about 1.2 s, so most kills cut an answer
//! mid-stream; the fifth runs a tool (a `terminal` command that appends its admission's tag to
//! a file, then a short answer), so some kills land while a side effect may be under way. After
//! the last restart the survivors drain, a person skips every tool run a crash left unknown (as
//! the API asks), and the store is read. Prints: accepted, completed, resumed by themselves,
//! unknown (split by why), tool runs left for a person; and checks nothing was lost (every
//! accepted input settled) and nothing ran twice (one end per admission, model calls per text
//! turn within its attempts, each side effect at most once). A measurement with checks, not a
//! test: it exits non-zero on a broken promise.
//!
//! `cargo bench -p turnkey-tests --bench crash_soak` (env: CRASH_KILLS, default 20;
//! CRASH_SEED to replay a schedule; BENCH_DATABASE_URL for PostgreSQL).
#![allow(clippy::expect_used, clippy::unwrap_used)]
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sea_orm::{ConnectionTrait, Statement};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use turnkey_tests::harness::DEFAULT_MAX_RESUMES;
use turnkey_tests::{Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

const SESSIONS: usize = 12;
/// Pause between kills, in ms (uniform).
const KILL_EVERY_MS: (u64, u64) = (2_000, 5_000);
/// Pause between one client's submissions, in ms (uniform).
const SUBMIT_EVERY_MS: (u64, u64) = (500, 1_500);
/// One input in this many runs a tool.
const TOOL_EVERY: u64 = 5;
/// After the last restart: how long the queues get to drain.
const DRAIN_BOUND: Duration = Duration::from_secs(180);
/// A submission is tried this many times (the server may be down) before the client gives up.
const ATTEMPTS: usize = 100;

#[derive(Default)]
struct Tally {
    /// request id -> (admission id, runs a tool).
    accepted: HashMap<String, (String, bool)>,
    given_up: usize,
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(soak());
}

async fn soak() {
    let kills: usize = std::env::var("CRASH_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    let database = std::env::var("BENCH_DATABASE_URL").ok();
    let provider = ScriptedProvider::start();
    let mut opts = TurnkeyOptions::new(&provider)
        .extra_toml("[tools]\napproval = \"off\"\n[agent]\ndelta_flush_ms = 50\n");
    if let Some(url) = &database {
        opts = opts.database(url);
    }
    let mut tk = Turnkey::start(opts).await;
    let base = tk.url.clone();
    let auth = format!("Bearer {}", tk.token);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let s: Value = http
            .post(format!("{base}/v1/sessions"))
            .header("authorization", &auth)
            .json(&json!({"title": "crash soak"}))
            .send()
            .await
            .expect("create session")
            .json()
            .await
            .expect("session");
        sessions.push(s["id"].as_str().expect("id").to_owned());
    }

    let tally = Arc::new(Mutex::new(Tally::default()));
    let load_over = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for (i, sid) in sessions.iter().enumerate() {
        let c = Client {
            http: http.clone(),
            base: base.clone(),
            auth: auth.clone(),
            sid: sid.clone(),
            provider: provider.clone(),
            tally: tally.clone(),
            over: load_over.clone(),
            rng: StdRng::seed_from_u64(seed ^ (i as u64 + 1)),
        };
        clients.push(tokio::spawn(c.run()));
    }

    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..kills {
        let wait = rng.gen_range(KILL_EVERY_MS.0..KILL_EVERY_MS.1);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        tk.restart_at_same_address().await;
    }
    load_over.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.expect("client");
    }
    let load_secs = started.elapsed().as_secs_f64();

    // Drain; a person skips what a crash left unknown in a tool round.
    let api = tk.api();
    let deadline = Instant::now() + DRAIN_BOUND;
    let mut skipped = 0;
    loop {
        let mut open = 0;
        for sid in &sessions {
            let view = api.session(sid).await;
            for run in view.body["unknown_tool_runs"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let call = run["call_id"].as_str().unwrap_or_default();
                let r = api
                    .post(
                        &format!("/v1/sessions/{sid}/tool_runs/{call}"),
                        &json!({"decision": "skip"}),
                    )
                    .await;
                skipped += usize::from(r.status == 200);
            }
            open += view.body["queue_depth"].as_u64().unwrap_or(0) as usize;
            open += usize::from(view.body["state"] == "running");
        }
        if open == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let store = turnkey_tests::pg::open(&tk.database_url).await;
    let backend = store.get_database_backend();
    let rows = |sql: &str| {
        let st = Statement::from_string(backend, sql.to_owned());
        store.query_all_raw(st)
    };
    let admissions = rows(
        "SELECT id, request_id, status, outcome, attempt, crash_resumes FROM session_admissions",
    )
    .await
    .expect("admissions");
    let tool_started: Vec<String> =
        rows("SELECT DISTINCT admission_id FROM tool_runs WHERE started_at IS NOT NULL")
            .await
            .expect("tool runs")
            .iter()
            .filter_map(|r| {
                r.try_get::<Option<String>>("", "admission_id")
                    .ok()
                    .flatten()
            })
            .collect();
    let ends: HashMap<String, i64> = rows(
        "SELECT admission_id, COUNT(*) AS n FROM session_events \
         WHERE kind IN ('turn.finished', 'turn.unknown') GROUP BY admission_id",
    )
    .await
    .expect("ends")
    .iter()
    .map(|r| {
        (
            r.try_get::<String>("", "admission_id").unwrap_or_default(),
            r.try_get::<i64>("", "n").unwrap_or_default(),
        )
    })
    .collect();

    let tally = std::mem::take(&mut *tally.lock().unwrap());
    let by_id: HashMap<String, &sea_orm::QueryResult> = admissions
        .iter()
        .map(|a| (a.try_get::<String>("", "id").unwrap(), a))
        .collect();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut broken: Vec<String> = Vec::new();
    let side = std::fs::read_to_string(tk.dir.path().join("workspace").join("side.txt"))
        .unwrap_or_default();
    for (rid, (id, tool)) in &tally.accepted {
        let Some(a) = by_id.get(id) else {
            broken.push(format!("lost: {rid} ({id}) is not stored"));
            continue;
        };
        let status: String = a.try_get("", "status").unwrap();
        let attempt = i64::from(a.try_get::<i32>("", "attempt").unwrap());
        let crashes = usize::try_from(a.try_get::<i32>("", "crash_resumes").unwrap()).unwrap();
        let spent = crashes >= DEFAULT_MAX_RESUMES;
        let outcome: Value = a
            .try_get::<Option<String>>("", "outcome")
            .unwrap()
            .and_then(|o| serde_json::from_str(&o).ok())
            .unwrap_or(Value::Null);
        *counts
            .entry(if *tool { "tool turns" } else { "text turns" })
            .or_default() += 1;
        if attempt >= 2 {
            *counts.entry("resumed by themselves").or_default() += 1;
        }
        match status.as_str() {
            "terminal" => {
                let result = outcome["result"].as_str().unwrap_or("?");
                let key = match result {
                    "completed" => "completed",
                    "interrupted" => "interrupted",
                    _ => "failed",
                };
                *counts.entry(key).or_default() += 1;
            }
            "unknown" => {
                let why = match (tool_started.contains(id), attempt >= 2, spent) {
                    (true, false, _) => "unknown: a tool had started (cut once)",
                    (true, true, _) => "unknown: a tool had started (cut again after a resume)",
                    (false, _, true) => "unknown: no tool, cut on every attempt (max_resumes)",
                    (false, _, false) => {
                        broken.push(format!(
                            "{rid} is unknown after {crashes} crash resume(s) with no tool \
                             started (max_resumes {DEFAULT_MAX_RESUMES})"
                        ));
                        "unknown: other"
                    }
                };
                *counts.entry(why).or_default() += 1;
            }
            other => broken.push(format!("lost: {rid} is still {other}")),
        }
        if ends.get(id).copied().unwrap_or(0) > 1 {
            broken.push(format!("run twice: {rid} ended {} times", ends[id]));
        }
        let tag = format!("[{rid}]");
        let calls = provider.request_count_for(&tag) as i64;
        if !tool && calls > attempt {
            broken.push(format!(
                "run twice: {rid} asked the model {calls} times in {attempt}"
            ));
        }
        if *tool && side.matches(&tag).count() > 1 {
            broken.push(format!("run twice: {rid}'s side effect happened twice"));
        }
    }
    println!(
        "crash soak (seed {seed}): {kills} SIGKILLs over {load_secs:.0} s, {SESSIONS} sessions"
    );
    println!(
        "accepted {} (given up {})",
        tally.accepted.len(),
        tally.given_up
    );
    for (k, n) in &counts {
        println!("  {k}: {n}");
    }
    println!("  tool runs left unknown and skipped by a person: {skipped}");
    println!(
        "lost 0 and run twice 0: {}",
        if broken.is_empty() { "yes" } else { "NO" }
    );
    for b in &broken {
        println!("  {b}");
    }
    assert!(broken.is_empty(), "{} promises broken", broken.len());
}

/// One session's client: submits every so often, each input under its own request id, sent
/// again (the same id) until the server admits it, however often it is down meanwhile.
struct Client {
    http: reqwest::Client,
    base: String,
    auth: String,
    sid: String,
    provider: ScriptedProvider,
    tally: Arc<Mutex<Tally>>,
    over: Arc<AtomicBool>,
    rng: StdRng,
}

impl Client {
    async fn run(mut self) {
        let mut n = 0u64;
        while !self.over.load(Ordering::Relaxed) {
            n += 1;
            let rid = uuid::Uuid::new_v4().to_string();
            let tag = format!("[{rid}]");
            let tool = n.is_multiple_of(TOOL_EVERY);
            let text = if tool {
                // The answer after the tool round comes first: both rules match this input.
                self.provider
                    .on_tool_result(&tag, Reply::text("the tool ran; done"));
                let command = format!("echo '{tag}' >> side.txt; sleep 0.4");
                self.provider.on_user_text(
                    &tag,
                    Reply::tool_call(
                        &format!("call_{n}"),
                        "terminal",
                        json!({"command": command}),
                    ),
                );
                format!("run the tool {tag}")
            } else {
                self.provider.on_user_text(
                    &tag,
                    Reply::chunks(
                        &["one ", "two ", "three ", "four"],
                        Duration::from_millis(300),
                    ),
                );
                format!("tell me something {tag}")
            };
            match self.submit(&text, &rid).await {
                Some(id) => {
                    self.tally.lock().unwrap().accepted.insert(rid, (id, tool));
                }
                None => self.tally.lock().unwrap().given_up += 1,
            }
            let pause = self.rng.gen_range(SUBMIT_EVERY_MS.0..SUBMIT_EVERY_MS.1);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    async fn submit(&self, text: &str, rid: &str) -> Option<String> {
        for _ in 0..ATTEMPTS {
            let sent = self
                .http
                .post(format!(
                    "{}/v1/sessions/{}/submissions",
                    self.base, self.sid
                ))
                .header("authorization", &self.auth)
                .json(&json!({"text": text, "request_id": rid}))
                .send()
                .await;
            if let Ok(res) = sent {
                if res.status().is_success() {
                    let body: Value = res.json().await.ok()?;
                    return body["admission_id"].as_str().map(str::to_owned);
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }
}

//! Per-principal limits and quotas (SPEC R13.8; `[limits]`) against the real binary, on SQLite
//! and PostgreSQL: over `turns_per_minute` a submission is 429 `rate_limited` with
//! `Retry-After` and nothing is admitted, while a retry of an admitted request id still
//! answers its receipt and the operator is exempt; over `concurrent_turns` a second running
//! turn is refused until the first ended; over `tokens_per_day` (counted from the usage its
//! turns recorded) it is 429 `quota_exceeded`; a chat over its limit gets 200 and is told
//! once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use turnkey_tests::wait::{eventually, BOUND};
use turnkey_tests::webhooks::{platforms_toml, telegram_message, Endpoints, Rows, Webhooks};
use turnkey_tests::{pg, Api, Reply, ScriptedProvider, Step, Turnkey, TurnkeyOptions};

async fn start(provider: &ScriptedProvider, database: Option<&str>, limits: &str) -> Turnkey {
    let platforms = platforms_toml(&Endpoints::nowhere(), &["4242"], &[]);
    let opts = TurnkeyOptions::new(provider).extra_toml(&format!(
        "{platforms}\n[tools]\napproval = \"off\"\n[limits]\n{limits}\n"
    ));
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    Turnkey::start(opts).await
}

async fn user(op: &Api) -> Api {
    let r = op.post("/v1/tokens", &json!({"name": "user"})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    op.with_token(Some(&r.str_field("token")))
}

fn retry_after(r: &turnkey_tests::Resp) -> u64 {
    r.retry_after
        .as_deref()
        .unwrap_or_else(|| panic!("no Retry-After: {}", r.text))
        .parse()
        .unwrap()
}

async fn rate_and_quota(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_user_text("hi", Reply::text("hello"));
    let tk = start(&provider, database, "turns_per_minute = 2").await;
    let op = tk.api();
    let alice = user(&op).await;
    let s = alice.create_session_id().await;
    let a1 = alice.submit(&s, "hi 1", Some("r-1")).await;
    assert_eq!(a1.status, 202, "{}", a1.text);
    assert_eq!(alice.submit(&s, "hi 2", Some("r-2")).await.status, 202);
    let over = alice.submit(&s, "hi 3", Some("r-3")).await;
    assert_eq!(
        (over.status, over.error_code()),
        (429, Some("rate_limited")),
        "{}",
        over.text
    );
    let wait = retry_after(&over);
    assert!((1..=60).contains(&wait), "Retry-After {wait}");
    // Nothing of it was admitted: its request id is free, and the queue holds two.
    let again = alice.submit(&s, "hi 1", Some("r-1")).await;
    assert_eq!(
        again.status, 200,
        "a retry of an admitted request is its receipt: {}",
        again.text
    );
    assert_eq!(again.body["admission_id"], a1.body["admission_id"]);
    assert_eq!(again.body["duplicate"], true);
    let events = alice.all_events(&s, 0).await;
    let queued = events
        .iter()
        .filter(|e| e["kind"] == "admission.queued")
        .count();
    assert_eq!(queued, 2, "the refused input left no trace");
    // The operator is exempt.
    let mine = op.create_session_id().await;
    for i in 0..3 {
        assert_eq!(
            op.submit(&mine, "hi op", Some(&format!("op-{i}")))
                .await
                .status,
            202
        );
    }
    // Another principal has its own count.
    let bob = user(&op).await;
    let b = bob.create_session_id().await;
    assert_eq!(bob.submit(&b, "hi bob", None).await.status, 202);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_over_turns_per_minute_is_429_with_retry_after_and_nothing_admitted_sqlite() {
    rate_and_quota(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_over_turns_per_minute_is_429_with_retry_after_and_nothing_admitted_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    rate_and_quota(Some(db.url())).await;
}

async fn concurrent_and_daily(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_user_text(
        "slow",
        Reply::Steps(vec![Step::text("working"), Step::Gate]),
    );
    provider.on_user_text("quick", Reply::text("a reply of a few tokens"));
    let tk = start(
        &provider,
        database,
        "concurrent_turns = 1\ntokens_per_day = 5",
    )
    .await;
    let op = tk.api();
    let alice = user(&op).await;
    let (s1, s2) = (
        alice.create_session_id().await,
        alice.create_session_id().await,
    );
    let slow = alice.submit_accepted(&s1, "slow").await;
    eventually(BOUND, "the slow turn running", || async {
        let a = alice.admission(&slow).await;
        (a.body["status"] == "started").then_some(())
    })
    .await;
    let r = alice.submit(&s2, "quick", None).await;
    assert_eq!(
        (r.status, r.error_code()),
        (429, Some("rate_limited")),
        "{}",
        r.text
    );
    assert!(retry_after(&r) >= 1);
    // Released until it ends: a release sent before its model call reaches the provider's gate
    // is not seen by that gate (seen once in CI, under load, between `started` and the call).
    eventually(BOUND, "the slow turn released and ended", || async {
        provider.release_hangs();
        let a = alice.admission(&slow).await;
        a.body["outcome"].is_object().then_some(())
    })
    .await;
    // The slow turn's usage is past the day's 5 tokens: the quota speaks now.
    let r = alice.submit(&s2, "quick", None).await;
    assert_eq!(
        (r.status, r.error_code()),
        (429, Some("quota_exceeded")),
        "{}",
        r.text
    );
    let wait = retry_after(&r);
    assert!((1..=86_400).contains(&wait), "until midnight UTC: {wait}");
    assert!(r.text.contains("tokens_per_day"), "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_concurrent_turns_and_the_daily_token_quota_refuse_before_admission_sqlite() {
    concurrent_and_daily(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_concurrent_turns_and_the_daily_token_quota_refuse_before_admission_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    concurrent_and_daily(Some(db.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r13_8_a_chat_over_its_limit_gets_200_and_is_told_once() {
    let provider = ScriptedProvider::start();
    provider.on_user_text("hello", Reply::text("hi there"));
    let tk = start(&provider, None, "turns_per_minute = 1").await;
    let hooks = Webhooks::new(&tk.url);
    let rows = Rows::connect(&tk.database_url).await;
    let (first, _) = hooks
        .telegram(&telegram_message(700, 4242, 4242, "hello one"))
        .await;
    assert_eq!(
        (first.status, first.body["outcome"].as_str()),
        (200, Some("admitted")),
        "{}",
        first.text
    );
    for update in [701, 702] {
        let (r, _) = hooks
            .telegram(&telegram_message(update, 4242, 4242, "hello again"))
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["outcome"], "rejected", "{}", r.text);
        assert!(
            r.body["detail"]
                .as_str()
                .unwrap()
                .starts_with("rate_limited"),
            "{}",
            r.text
        );
    }
    let told = eventually(BOUND, "the notice", || async {
        let n: Vec<_> = rows
            .outbox()
            .await
            .into_iter()
            .filter(|r| r.idempotency_key.starts_with("limit:"))
            .collect();
        (!n.is_empty()).then_some(n)
    })
    .await;
    assert_eq!(told.len(), 1, "told once: {told:?}");
    assert!(
        told[0].text().contains("Not sent to the agent"),
        "{}",
        told[0].text()
    );
    assert_eq!(
        rows.count("session_admissions").await,
        1,
        "only the first was admitted"
    );
}

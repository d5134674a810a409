//! Chat platforms out (SPEC R13.5, R1.3) against the real binary and fake platforms on loopback
//! (`turnkey_tests::fake_platforms`): a message in on each platform gives a reply out, formatted
//! for it; a SIGKILL after the turn's end and before the send (`outbox.before_send`) still sends
//! the reply exactly once after a restart; a SIGKILL after the platform took the message but
//! before the row said so (`outbox.mid_send`) leaves the row `unknown`, listed by
//! `GET /v1/outbox?status=unknown`, counted in `/metrics` and not sent again (unless a person
//! resends it, or `resend_unknown = true`); a 429 is retried after the time the platform gave;
//! a 6,000-character answer comes as two Telegram messages with intact code fences; 20 messages
//! in one chat get 20 replies in order. Each runs on SQLite and PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::fake_platforms::parse_telegram_html;
use turnkey_tests::webhooks::{
    generic_message, slack_button, slack_message, telegram_button, telegram_message, Rows,
    Webhooks, GENERIC_SECRET, SLACK_BOT_USER,
};
use turnkey_tests::{Api, TurnkeyOptions};
use turnkey_tests::{FakeCall, FakePlatform, Fault, Reply, ScriptedProvider, Turnkey};

use turnkey_tests::wait::{within, BOUND};
const TG_TOKEN: &str = "123456:FAKE";
const SLACK_TOKEN: &str = "xoxb-fake";
const ALICE: i64 = 4242;
const BOB: i64 = 4343;
const SLACK_USER: &str = "U123ABC456";

/// The three fakes and the config pointing turnkey at them.
struct Fakes {
    tg: FakePlatform,
    sl: FakePlatform,
    gw: FakePlatform,
}

impl Fakes {
    fn start() -> Self {
        Self {
            tg: FakePlatform::telegram(TG_TOKEN),
            sl: FakePlatform::slack(SLACK_TOKEN),
            gw: FakePlatform::webhook(GENERIC_SECRET),
        }
    }

    /// `telegram_extra` goes into `[platforms.telegram]`.
    fn toml(&self, telegram_extra: &str) -> String {
        format!(
            "{}{}{}",
            self.tg.config_toml(telegram_extra),
            self.sl.config_toml(""),
            self.gw.config_toml("")
        )
    }
}

async fn start(
    provider: &ScriptedProvider,
    database: Option<&str>,
    toml: &str,
    env: &[(&str, &str)],
) -> Turnkey {
    let mut opts = TurnkeyOptions::new(provider).extra_toml(toml);
    for (k, v) in env {
        opts = opts.env(k, v);
    }
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    Turnkey::start(opts).await
}

/// Runs a scenario on SQLite and on a fresh PostgreSQL database.
macro_rules! on_both {
    ($scenario:ident) => {
        mod $scenario {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$scenario(None).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let Some(db) = turnkey_tests::pg::fresh_database().await else {
                    return;
                };
                super::$scenario(Some(db.url())).await;
            }
        }
    };
}

/// Checks a webhook's answer is an admission; answers its admission id.
async fn admitted(hooks_answer: (turnkey_tests::Resp, Duration)) -> String {
    let (r, _) = hooks_answer;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["outcome"], "admitted", "{}", r.text);
    r.body["receipt"]["admission_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The visible text of an accepted Telegram call.
fn tg_visible(c: &FakeCall) -> String {
    match c.body.get("parse_mode").and_then(Value::as_str) {
        Some("HTML") => parse_telegram_html(c.text()).unwrap_or_else(|e| panic!("{e}: {c:?}")),
        _ => c.text().to_owned(),
    }
}

/// The outbox rows of a status, as `GET /v1/outbox` lists them.
async fn outbox(api: &Api, status: &str) -> Vec<Value> {
    let r = api.get(&format!("/v1/outbox?status={status}")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["deliveries"].as_array().cloned().unwrap_or_default()
}

/// Waits (bounded) until `GET /v1/outbox?status=…` lists `n` rows.
async fn wait_outbox(api: &Api, status: &str, n: usize) -> Vec<Value> {
    let found = within(BOUND, || async {
        let rows = outbox(api, status).await;
        (rows.len() >= n).then_some(rows)
    })
    .await;
    match found {
        Some(rows) => rows,
        None => panic!(
            "{n} {status} outbox rows expected within {BOUND:?}; have {:?}",
            outbox(api, status).await
        ),
    }
}

/// The text of each call to `method`, accepted or not.
fn texts(platform: &FakePlatform, method: &str) -> Vec<String> {
    platform
        .calls_to(method)
        .iter()
        .map(|c| c.text().to_owned())
        .collect()
}

/// Writes `text` as Alice on Telegram and waits until the reply is `sent`. The sender offers
/// only a chat's oldest `pending` or `sending` row (`Store::due_outbox`), and this reply is
/// written after every earlier row of the chat: any send of those, a wrong second one
/// included, went out before this reply did.
async fn later_telegram_reply(tk: &Turnkey, update: i64, text: &str) -> Value {
    let hooks = Webhooks::new(&tk.url);
    let later = admitted(
        hooks
            .telegram(&telegram_message(update, ALICE, ALICE, text))
            .await,
    )
    .await;
    tk.api().reply_sent(&later, BOUND).await
}

// --- a message in, a reply out, on each platform --------------------------------------------

on_both!(reply_on_each_platform);
async fn reply_on_each_platform(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    for p in ["telegram", "slack", "generic"] {
        provider.on_user_text(
            &format!("hello from {p}"),
            Reply::text(&format!("**{p}** answer & <more>")),
        );
    }
    let fakes = Fakes::start();
    let tk = start(&provider, database, &fakes.toml(""), &[]).await;
    let hooks = Webhooks::new(&tk.url);
    admitted(
        hooks
            .telegram(&telegram_message(1001, ALICE, ALICE, "hello from telegram"))
            .await,
    )
    .await;
    admitted(
        hooks
            .slack(&slack_message(
                "Ev1",
                "C1",
                "1700000000.000100",
                SLACK_USER,
                &format!("<@{SLACK_BOT_USER}> hello from slack"),
            ))
            .await,
    )
    .await;
    admitted(
        hooks
            .generic(&generic_message(
                "room-1",
                "m-1",
                "alice",
                "hello from generic",
            ))
            .await,
    )
    .await;

    let tg = fakes
        .tg
        .wait_accepted(&["sendMessage"], 1, BOUND)
        .await
        .unwrap();
    assert_eq!(tg[0].body["chat_id"], json!(ALICE));
    assert_eq!(tg[0].body["parse_mode"], "HTML");
    assert_eq!(
        tg[0].text(),
        "<b>telegram</b> answer &amp; &lt;more&gt;",
        "Markdown as Telegram HTML, escaped"
    );
    let sl = fakes
        .sl
        .wait_accepted(&["chat.postMessage"], 1, BOUND)
        .await
        .unwrap();
    assert_eq!(sl[0].body["channel"], "C1");
    assert_eq!(sl[0].text(), "*slack* answer &amp; &lt;more&gt;", "mrkdwn");
    assert_eq!(sl[0].body["blocks"][0]["text"]["text"], sl[0].text());
    assert_eq!(sl[0].header("authorization"), Some("Bearer xoxb-fake"));
    let gw = fakes.gw.wait_accepted(&["reply"], 1, BOUND).await.unwrap();
    assert_eq!(
        gw[0].body,
        json!({"chat_id": "room-1", "text": "**generic** answer & <more>",
               "in_reply_to": "m-1", "final": true}),
        "the generic reply, signed (the fake checked X-Signature)"
    );

    // Each row is `sent`, with the platform's message id where it gives one.
    let api = tk.api();
    let sent = wait_outbox(&api, "sent", 3).await;
    let id_of = |p: &str| {
        sent.iter()
            .find(|r| r["platform"] == p)
            .unwrap_or_else(|| panic!("no sent {p} row: {sent:?}"))["platform_message_id"]
            .clone()
    };
    assert_eq!(id_of("telegram"), json!(tg[0].message_id.clone().unwrap()));
    assert_eq!(id_of("slack"), json!(sl[0].message_id.clone().unwrap()));
    assert_eq!(id_of("webhook"), Value::Null);
    assert!(sent.iter().all(|r| r["attempts"] == 1), "{sent:?}");

    // Nothing was sent twice: a later message in each chat has its reply sent, which a second
    // send of the first would have preceded (`later_telegram_reply` says why).
    later_telegram_reply(&tk, 1002, "later on telegram").await;
    let later_slack = admitted(
        hooks
            .slack(&slack_message(
                "Ev2",
                "C1",
                "1700000000.000200",
                SLACK_USER,
                &format!("<@{SLACK_BOT_USER}> later on slack"),
            ))
            .await,
    )
    .await;
    let later_generic = admitted(
        hooks
            .generic(&generic_message(
                "room-1",
                "m-2",
                "alice",
                "later on generic",
            ))
            .await,
    )
    .await;
    api.reply_sent(&later_slack, BOUND).await;
    api.reply_sent(&later_generic, BOUND).await;
    assert_eq!(
        texts(&fakes.tg, "sendMessage"),
        [
            "<b>telegram</b> answer &amp; &lt;more&gt;",
            "ok: later on telegram"
        ]
    );
    assert_eq!(
        texts(&fakes.sl, "chat.postMessage"),
        ["*slack* answer &amp; &lt;more&gt;", "ok: later on slack"]
    );
    assert_eq!(
        texts(&fakes.gw, "reply"),
        ["**generic** answer & <more>", "ok: later on generic"]
    );
}

// --- SIGKILL after the turn's end, before the send ------------------------------------------

on_both!(killed_before_the_send_sends_once_after_restart);
async fn killed_before_the_send_sends_once_after_restart(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_user_text("before", Reply::text("the answer that must arrive once"));
    let fakes = Fakes::start();
    let mut tk = start(
        &provider,
        database,
        &fakes.toml(""),
        &[("FAILPOINTS", "outbox.before_send=return")],
    )
    .await;
    let hooks = Webhooks::new(&tk.url);
    admitted(
        hooks
            .telegram(&telegram_message(2001, ALICE, ALICE, "before"))
            .await,
    )
    .await;
    let died = tk.wait_exit(BOUND).await;
    assert!(died.is_some(), "the failpoint did not kill turnkey");
    assert!(
        fakes.tg.calls().is_empty(),
        "nothing was sent before the kill"
    );
    let rows = Rows::connect(&tk.database_url).await;
    let row = rows
        .outbox()
        .await
        .into_iter()
        .find(|r| r.kind == "reply")
        .expect("the reply row committed with the turn's end");
    assert_eq!(row.status, "pending");

    tk.restart_with_env(&[]).await;
    let sent = fakes
        .tg
        .wait_accepted(&["sendMessage"], 1, BOUND)
        .await
        .unwrap();
    assert_eq!(sent[0].text(), "the answer that must arrive once");
    // Still once when a later reply in the chat is out (`later_telegram_reply` says why).
    let api = tk.api();
    later_telegram_reply(&tk, 2002, "later").await;
    assert_eq!(
        texts(&fakes.tg, "sendMessage"),
        ["the answer that must arrive once", "ok: later"]
    );
    let sent: Vec<(Value, Value)> = outbox(&api, "sent")
        .await
        .iter()
        .map(|r| (r["payload"]["text"].clone(), r["attempts"].clone()))
        .collect();
    assert_eq!(
        sent,
        [
            (json!("ok: later"), json!(1)),
            (json!("the answer that must arrive once"), json!(1))
        ],
        "newest first, each sent at the first attempt"
    );
}

// --- SIGKILL mid-send: unknown, listed, counted, not resent -----------------------------------

/// Kills turnkey after Telegram took the reply and before the row said so; restarts it.
async fn killed_mid_send(
    database: Option<&str>,
    telegram_extra: &str,
) -> (ScriptedProvider, Fakes, Turnkey) {
    let provider = ScriptedProvider::start();
    provider.on_user_text("mid", Reply::text("an answer cut mid-send"));
    let fakes = Fakes::start();
    let mut tk = start(
        &provider,
        database,
        &fakes.toml(telegram_extra),
        &[("FAILPOINTS", "outbox.mid_send=return")],
    )
    .await;
    let hooks = Webhooks::new(&tk.url);
    admitted(
        hooks
            .telegram(&telegram_message(3001, ALICE, ALICE, "mid"))
            .await,
    )
    .await;
    assert!(
        tk.wait_exit(BOUND).await.is_some(),
        "the failpoint did not kill turnkey"
    );
    let took = fakes.tg.accepted(&["sendMessage"]);
    assert_eq!(took.len(), 1, "Telegram took the reply before the kill");
    tk.restart_with_env(&[]).await;
    (provider, fakes, tk)
}

on_both!(killed_mid_send_is_unknown_listed_counted_and_not_resent);
async fn killed_mid_send_is_unknown_listed_counted_and_not_resent(database: Option<&str>) {
    let (_provider, fakes, tk) = killed_mid_send(database, "").await;
    let api = tk.api();
    let unknown = wait_outbox(&api, "unknown", 1).await;
    assert_eq!(unknown.len(), 1, "{unknown:?}");
    let row = &unknown[0];
    assert_eq!(row["kind"], "reply");
    assert_eq!(row["chat_key"], format!("telegram:{ALICE}"));
    assert!(
        row["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("stopped before the platform answered")),
        "{row}"
    );
    let metrics = api.get("/metrics").await;
    assert!(
        metrics
            .text
            .contains("turnkey_outbox_rows{status=\"unknown\"} 1\n"),
        "{}",
        metrics.text
    );
    // Not sent again on its own: a later reply in the chat goes out, and an `unknown` row the
    // sender wrongly took for open would be the chat's oldest and have gone out first.
    let later = later_telegram_reply(&tk, 3002, "later").await;
    assert_eq!(
        texts(&fakes.tg, "sendMessage"),
        ["an answer cut mid-send", "ok: later"]
    );
    assert_eq!(outbox(&api, "unknown").await.len(), 1);

    // A filter that is not a status is refused.
    let bad = api.get("/v1/outbox?status=lost").await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert_eq!(bad.error_code(), Some("invalid_status"));

    // A person resends it: it is sent again, once.
    let id = row["id"].as_str().unwrap();
    let r = api
        .post(&format!("/v1/outbox/{id}/resend"), &json!({}))
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.body["status"], "pending");
    let calls = fakes
        .tg
        .wait_accepted(&["sendMessage"], 3, BOUND)
        .await
        .unwrap();
    assert_eq!(calls[2].text(), "an answer cut mid-send");
    let sent = wait_outbox(&api, "sent", 2).await;
    let ids: Vec<&Value> = sent.iter().map(|r| &r["id"]).collect();
    assert_eq!(ids, [&later["id"], &row["id"]], "newest first");
    let again = api
        .post(&format!("/v1/outbox/{id}/resend"), &json!({}))
        .await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert_eq!(again.error_code(), Some("not_resendable"));
    let metrics = api.get("/metrics").await;
    assert!(
        metrics
            .text
            .contains("turnkey_outbox_rows{status=\"unknown\"} 0\n"),
        "{}",
        metrics.text
    );
}

on_both!(killed_mid_send_with_resend_unknown_is_sent_again);
async fn killed_mid_send_with_resend_unknown_is_sent_again(database: Option<&str>) {
    let (_provider, fakes, tk) = killed_mid_send(database, "resend_unknown = true\n").await;
    let calls = fakes
        .tg
        .wait_accepted(&["sendMessage"], 2, BOUND)
        .await
        .unwrap();
    assert_eq!(calls[1].text(), "an answer cut mid-send");
    let api = tk.api();
    let sent = wait_outbox(&api, "sent", 1).await;
    assert_eq!(sent[0]["attempts"], 2, "{sent:?}");
    // Not a third time (`later_telegram_reply` says why the later reply shows it).
    later_telegram_reply(&tk, 3002, "later").await;
    assert_eq!(
        texts(&fakes.tg, "sendMessage"),
        [
            "an answer cut mid-send",
            "an answer cut mid-send",
            "ok: later"
        ]
    );
    assert!(outbox(&api, "unknown").await.is_empty());
}

on_both!(killed_while_the_platform_holds_the_request_is_unknown);
async fn killed_while_the_platform_holds_the_request_is_unknown(database: Option<&str>) {
    // No failpoint: the platform has the request and has not answered when the process dies.
    let provider = ScriptedProvider::start();
    provider.on_user_text("held", Reply::text("an answer the platform holds"));
    let fakes = Fakes::start();
    fakes.tg.fail_next("sendMessage", Fault::Hold, 1);
    let mut tk = start(&provider, database, &fakes.toml(""), &[]).await;
    let hooks = Webhooks::new(&tk.url);
    admitted(
        hooks
            .telegram(&telegram_message(4001, ALICE, ALICE, "held"))
            .await,
    )
    .await;
    fakes.tg.wait_calls("sendMessage", 1, BOUND).await.unwrap();
    let rows = Rows::connect(&tk.database_url).await;
    let row = rows
        .outbox()
        .await
        .into_iter()
        .find(|r| r.kind == "reply")
        .unwrap();
    assert_eq!(row.status, "sending", "marked before the call");
    tk.kill();
    fakes.tg.release();
    tk.restart().await;
    let api = tk.api();
    let unknown = wait_outbox(&api, "unknown", 1).await;
    assert_eq!(unknown[0]["kind"], "reply");
    // An `unknown` row the sender wrongly took for open would be the chat's oldest, sent
    // before the later reply.
    later_telegram_reply(&tk, 4002, "later").await;
    assert_eq!(
        texts(&fakes.tg, "sendMessage"),
        ["an answer the platform holds", "ok: later"],
        "not sent again"
    );
}

// --- 429: retried after the time the platform gave ------------------------------------------

on_both!(rate_limits_are_honoured);
async fn rate_limits_are_honoured(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let fakes = Fakes::start();
    fakes.tg.fail_next("sendMessage", Fault::RateLimit(2), 1);
    fakes
        .sl
        .fail_next("chat.postMessage", Fault::RateLimit(1), 1);
    let tk = start(&provider, database, &fakes.toml(""), &[]).await;
    let hooks = Webhooks::new(&tk.url);
    admitted(
        hooks
            .telegram(&telegram_message(5001, ALICE, ALICE, "slow down"))
            .await,
    )
    .await;
    admitted(
        hooks
            .slack(&slack_message(
                "Ev5",
                "C5",
                "1700000000.000500",
                SLACK_USER,
                &format!("<@{SLACK_BOT_USER}> slow down"),
            ))
            .await,
    )
    .await;
    let tg = fakes.tg.wait_calls("sendMessage", 2, BOUND).await.unwrap();
    assert_eq!(tg[0].status, 429);
    assert!(tg[1].ok, "{:?}", tg[1]);
    let gap = tg[1].at - tg[0].at;
    assert!(
        gap >= Duration::from_secs(2),
        "Telegram's retry_after of 2 s was not honoured: {gap:?}"
    );
    assert!(gap < Duration::from_secs(5), "retried late: {gap:?}");
    let sl = fakes
        .sl
        .wait_calls("chat.postMessage", 2, BOUND)
        .await
        .unwrap();
    assert_eq!(sl[0].status, 429);
    assert!(sl[1].ok, "{:?}", sl[1]);
    let gap = sl[1].at - sl[0].at;
    assert!(
        gap >= Duration::from_secs(1),
        "Slack's Retry-After of 1 s was not honoured: {gap:?}"
    );
    assert!(gap < Duration::from_secs(4), "retried late: {gap:?}");
    let sent = wait_outbox(&tk.api(), "sent", 2).await;
    assert!(sent.iter().all(|r| r["attempts"] == 2), "{sent:?}");
}

// --- a long answer: two Telegram messages, fences intact ------------------------------------

/// About 6,000 characters: paragraphs and two code fences of 40 lines.
fn answer_6000() -> String {
    let para = "Here is how the parser works, step by step, with the details that matter \
                when you run it on real input: a < b & c > d. "
        .repeat(4);
    let code = (0..40)
        .map(|i| format!("    let value_{i} = compute(&input[{i}..]) << 2; // step {i}"))
        .collect::<Vec<_>>()
        .join("\n");
    let text = format!(
        "# Overview\n\n{para}\n\n```rust\n{code}\n```\n\n{para}\n\n```python\n{code}\n```\n\n{para}"
    );
    assert!((5500..=6500).contains(&text.chars().count()));
    text
}

on_both!(a_long_answer_is_two_telegram_messages_with_intact_fences);
async fn a_long_answer_is_two_telegram_messages_with_intact_fences(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let answer = answer_6000();
    provider.on_user_text("long", Reply::text(&answer));
    let fakes = Fakes::start();
    let tk = start(&provider, database, &fakes.toml(""), &[]).await;
    let hooks = Webhooks::new(&tk.url);
    admitted(
        hooks
            .telegram(&telegram_message(6001, ALICE, ALICE, "long"))
            .await,
    )
    .await;
    let calls = fakes
        .tg
        .wait_accepted(&["sendMessage"], 2, BOUND)
        .await
        .unwrap();
    // Two messages, no more (`later_telegram_reply` says why the later reply shows it), none
    // refused.
    let api = tk.api();
    later_telegram_reply(&tk, 6002, "later").await;
    let calls_now = fakes.tg.calls_to("sendMessage");
    assert_eq!(calls_now.len(), 3, "{calls_now:?}");
    assert!(calls_now.iter().all(|c| c.ok), "{calls_now:?}");
    assert_eq!(calls_now[2].text(), "ok: later");
    let mut visible = String::new();
    for c in &calls {
        let html = c.text();
        assert!(html.encode_utf16().count() <= 4096);
        assert_eq!(
            html.matches("<pre>").count(),
            html.matches("</pre>").count(),
            "{html}"
        );
        assert_eq!(
            html.matches("<code").count(),
            html.matches("</code>").count(),
            "{html}"
        );
        // The fake parsed it as Telegram would (balanced tags, escaped text) and took it.
        visible.push_str(&tg_visible(c));
        visible.push('\n');
    }
    for i in 0..40 {
        let line = format!("    let value_{i} = compute(&input[{i}..]) << 2; // step {i}");
        assert_eq!(visible.matches(&line).count(), 2, "line {i} once per fence");
    }
    // Newest first: the later reply, then the long one.
    let sent = outbox(&api, "sent").await;
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0]["payload"]["text"], "ok: later");
    assert_eq!(sent[1]["chunks_sent"], 2, "{sent:?}");
    assert_eq!(
        sent[1]["platform_message_id"],
        json!(calls[0].message_id.clone().unwrap())
    );
}

// --- 20 messages in one chat: 20 replies, in order ------------------------------------------

on_both!(twenty_messages_get_twenty_replies_in_order);
async fn twenty_messages_get_twenty_replies_in_order(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let fakes = Fakes::start();
    // The first send is rate limited: the chat's order holds across the retry.
    fakes.tg.fail_next("sendMessage", Fault::RateLimit(1), 1);
    let tk = start(&provider, database, &fakes.toml(""), &[]).await;
    let hooks = Webhooks::new(&tk.url);
    for i in 0..20 {
        admitted(
            hooks
                .telegram(&telegram_message(7000 + i, BOB, BOB, &format!("burst {i}")))
                .await,
        )
        .await;
    }
    let calls = fakes
        .tg
        .wait_accepted(&["sendMessage"], 20, BOUND)
        .await
        .unwrap();
    let texts: Vec<String> = calls.iter().map(|c| c.text().to_owned()).collect();
    let expected: Vec<String> = (0..20).map(|i| format!("ok: burst {i}")).collect();
    assert_eq!(texts, expected);
    assert!(calls.iter().all(|c| c.body["chat_id"] == json!(BOB)));
    // None sent twice: a later message in the chat has its reply sent, which any second send
    // of the twenty would have preceded (`later_telegram_reply` says why).
    let later = admitted(
        hooks
            .telegram(&telegram_message(7020, BOB, BOB, "after the burst"))
            .await,
    )
    .await;
    tk.api().reply_sent(&later, BOUND).await;
    let texts: Vec<String> = fakes
        .tg
        .accepted(&["sendMessage"])
        .iter()
        .map(|c| c.text().to_owned())
        .collect();
    let expected: Vec<String> = (0..20)
        .map(|i| format!("ok: burst {i}"))
        .chain(["ok: after the burst".to_owned()])
        .collect();
    assert_eq!(texts, expected);
}

// --- approval requests: buttons out, a press in ----------------------------------------------

on_both!(approval_buttons_go_out_and_a_press_decides);
async fn approval_buttons_go_out_and_a_press_decides(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let terminal = |file: &str| {
        Reply::ToolCalls(vec![(
            format!("call-{file}"),
            "terminal".to_owned(),
            json!({ "command": format!("echo yes > {file}") }),
        )])
    };
    provider.on_user_text_times("make one", terminal("one"), 1);
    provider.on_user_text_times("make two", terminal("two"), 1);
    let fakes = Fakes::start();
    let toml = format!(
        // One workspace for every chat: the files are looked for in the root.
        "{}\n[tools]\napproval = \"dangerous\"\napproval_timeout_s = 120\nisolation = \"shared\"\n",
        fakes.toml("")
    );
    let tk = start(&provider, database, &toml, &[]).await;
    let api = tk.api();
    let hooks = Webhooks::new(&tk.url);
    let workspace = tk.dir.path().join("workspace");

    // Telegram: the question with an inline keyboard; its Approve button's data, pressed.
    let one = admitted(
        hooks
            .telegram(&telegram_message(8001, ALICE, ALICE, "make one"))
            .await,
    )
    .await;
    let asked = fakes
        .tg
        .wait_accepted(&["sendMessage"], 1, BOUND)
        .await
        .unwrap();
    let keyboard = &asked[0].body["reply_markup"]["inline_keyboard"][0];
    let approve = keyboard[0]["callback_data"].as_str().unwrap().to_owned();
    let approval_id = approve
        .strip_prefix("approve:")
        .expect("approve:<id>")
        .to_owned();
    assert_eq!(keyboard[1]["callback_data"], format!("deny:{approval_id}"));
    let question = tg_visible(&asked[0]);
    assert!(question.contains("terminal"), "{question}");
    assert!(question.contains("echo yes > one"), "{question}");
    let (r, _) = hooks
        .telegram(&telegram_button(8002, ALICE, ALICE, &approve))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let done = api.wait_terminal(&one, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert!(workspace.join("one").exists(), "the approved tool ran");

    // Slack: the question with the agreed buttons; Deny pressed.
    let two = admitted(
        hooks
            .slack(&slack_message(
                "Ev8",
                "C8",
                "1700000000.000800",
                SLACK_USER,
                &format!("<@{SLACK_BOT_USER}> make two"),
            ))
            .await,
    )
    .await;
    let asked = fakes
        .sl
        .wait_accepted(&["chat.postMessage"], 1, BOUND)
        .await
        .unwrap();
    let buttons = &asked[0].body["blocks"][1]["elements"];
    assert_eq!(buttons[0]["action_id"], "turnkey_approve");
    assert_eq!(buttons[1]["action_id"], "turnkey_deny");
    let approval_id = buttons[1]["value"].as_str().unwrap().to_owned();
    assert_eq!(buttons[0]["value"], approval_id.as_str());
    let (r, _) = hooks
        .slack_interactive(&slack_button(
            "trig-8",
            "C8",
            SLACK_USER,
            "turnkey_deny",
            &approval_id,
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let done = api.wait_terminal(&two, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert!(
        !workspace.join("two").exists(),
        "the denied tool did not run"
    );
}

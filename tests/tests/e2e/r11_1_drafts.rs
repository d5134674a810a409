//! Streamed drafts (SPEC R11.1) against the real binary and fake platforms: with `stream =
//! true` a streamed answer is one message, sent as the answer starts and then edited, never
//! more often than `edit_interval_ms`; what each edit shows extends what the one before showed
//! (a stable prefix) and carries the "still writing" marker; the last edit is the final text,
//! without the marker. The generic webhook gets the same as POSTs with `final: false`, then one
//! with `final: true`. Each runs on SQLite and PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::fake_platforms::parse_telegram_html;
use turnkey_tests::webhooks::{
    generic_message, slack_message, telegram_message, Webhooks, GENERIC_SECRET, SLACK_BOT_USER,
};
use turnkey_tests::{FakeCall, FakePlatform, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::{eventually, within, BOUND};
/// `actors/src/platforms/drafts.rs`: the last line of every draft.
const MARKER: &str = "✍️ still writing…";
const INTERVAL_MS: u64 = 300;
/// Calls are timed where the fake receives them; loopback adds next to nothing, but the
/// sender's clock and the fake's are read on different threads.
const JITTER: Duration = Duration::from_millis(30);
const ALICE: i64 = 4242;
const SLACK_USER: &str = "U123ABC456";

/// An answer with formatting, a code fence and a line break inside a sentence, streamed in
/// small pieces over about two seconds.
const ANSWER: &str = "Here is **the plan**, in short:\n\n- read the _input_ & parse it\n- \
                      write `out.txt`\n\n```rust\nfn main() {\n    println!(\"a < b\");\n}\n```\n\
                      That is all, done.";

fn streamed_answer() -> Reply {
    let chars: Vec<char> = ANSWER.chars().collect();
    let pieces: Vec<String> = chars.chunks(9).map(|c| c.iter().collect()).collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    Reply::chunks(&refs, Duration::from_millis(110))
}

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

async fn start(provider: &ScriptedProvider, database: Option<&str>, toml: &str) -> Turnkey {
    let opts = TurnkeyOptions::new(provider).extra_toml(toml);
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    Turnkey::start(opts).await
}

fn stream_toml() -> String {
    format!("stream = true\nedit_interval_ms = {INTERVAL_MS}\n")
}

/// Consecutive calls are at least the interval apart.
fn assert_paced(calls: &[FakeCall]) {
    for w in calls.windows(2) {
        let gap = w[1].at - w[0].at;
        assert!(
            gap + JITTER >= Duration::from_millis(INTERVAL_MS),
            "two draft calls {gap:?} apart, under edit_interval_ms = {INTERVAL_MS}: {} then {}",
            w[0].method,
            w[1].method
        );
    }
}

/// Every draft shows the marker and extends the one before; the last shows `fin` exactly.
fn assert_stable(shown: &[String], fin: &str) {
    assert!(
        shown.len() >= 3,
        "too few drafts to show streaming: {shown:?}"
    );
    let (last, drafts) = shown.split_last().unwrap();
    let mut before = String::new();
    for s in drafts {
        let text = s
            .strip_suffix(MARKER)
            .unwrap_or_else(|| panic!("a draft without the marker: {s:?}"))
            .trim_end();
        assert!(
            text.starts_with(before.trim_end()),
            "a draft changed what was shown: {before:?} then {text:?}"
        );
        before = text.to_owned();
    }
    assert!(!last.contains(MARKER), "the final edit keeps the marker");
    assert!(
        last.starts_with(before.trim_end()),
        "the final edit does not extend the drafts: {before:?} then {last:?}"
    );
    assert_eq!(last, fin);
}

/// The Telegram draft calls accepted so far, once the last one shows what `is_final` wants.
async fn final_edit(tg: &FakePlatform, is_final: impl Fn(&str) -> bool) -> Vec<FakeCall> {
    let found = within(BOUND, || async {
        let calls = tg.accepted(&["sendMessage", "editMessageText"]);
        let last = calls.last()?;
        is_final(&parse_telegram_html(last.text()).unwrap()).then_some(calls)
    })
    .await;
    found.unwrap_or_else(|| {
        let calls = tg.accepted(&["sendMessage", "editMessageText"]);
        panic!("no final edit within {BOUND:?}: {calls:?}")
    })
}

on_both!(telegram_streams_one_message_edited_at_the_interval);
async fn telegram_streams_one_message_edited_at_the_interval(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_user_text("plan", streamed_answer());
    let tg = FakePlatform::telegram("123456:FAKE");
    let tk = start(&provider, database, &tg.config_toml(&stream_toml())).await;
    let hooks = Webhooks::new(&tk.url);
    let (r, _) = hooks
        .telegram(&telegram_message(1, ALICE, ALICE, "plan"))
        .await;
    assert_eq!(r.body["outcome"], "admitted", "{}", r.text);
    let admission = r.body["receipt"]["admission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = tk.api().wait_terminal(&admission, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");

    // The final edit drops the marker.
    let calls = final_edit(&tg, |shown| !shown.contains(MARKER)).await;
    assert!(
        tg.calls().iter().all(|c| c.ok),
        "a call was refused: {:?}",
        tg.calls()
    );
    assert_eq!(calls[0].method, "sendMessage", "the draft is sent first");
    assert!(
        calls[1..].iter().all(|c| c.method == "editMessageText"),
        "one message, then only edits: {calls:?}"
    );
    let id = calls[0].message_id.clone().unwrap();
    assert!(calls.iter().all(|c| c.message_id.as_deref() == Some(&id)));
    assert_paced(&calls);
    let shown: Vec<String> = calls
        .iter()
        .map(|c| parse_telegram_html(c.text()).unwrap())
        .collect();
    let fin = "Here is the plan, in short:\n\n• read the input & parse it\n• write out.txt\n\n\
               fn main() {\n    println!(\"a < b\");\n}\nThat is all, done.";
    assert_stable(&shown, fin);
    // The chat shows the final text; the reply row records the draft's message.
    let msgs = tg.messages();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0].text, fin);
    // The reply row is `sent` only after its final edit, and the draft takes no edit once the
    // reply has begun (`Drafts::settle`): from then on nothing more may come.
    let rows = eventually(BOUND, "the reply row sent", || async {
        let sent = tk.api().get("/v1/outbox?status=sent").await;
        let rows = sent.body["deliveries"].as_array().cloned()?;
        rows.iter().any(|r| r["kind"] == "reply").then_some(rows)
    })
    .await;
    let reply = rows
        .iter()
        .find(|r| r["kind"] == "reply")
        .expect("reply row");
    assert_eq!(reply["platform_message_id"], json!(id));
    let draft = rows
        .iter()
        .find(|r| r["kind"] == "draft")
        .expect("draft row");
    assert_eq!(draft["platform_message_id"], json!(id));
    // Nothing more came.
    assert_eq!(tg.calls().len(), calls.len());
}

on_both!(slack_and_the_generic_webhook_stream_too);
async fn slack_and_the_generic_webhook_stream_too(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    provider.on_user_text("plan", streamed_answer());
    let sl = FakePlatform::slack("xoxb-fake");
    let gw = FakePlatform::webhook(GENERIC_SECRET);
    let toml = format!(
        "{}{}",
        sl.config_toml(&stream_toml()),
        gw.config_toml(&stream_toml())
    );
    let tk = start(&provider, database, &toml).await;
    let hooks = Webhooks::new(&tk.url);
    let (r, _) = hooks
        .slack(&slack_message(
            "Ev1",
            "C1",
            "1700000000.000100",
            SLACK_USER,
            &format!("<@{SLACK_BOT_USER}> plan"),
        ))
        .await;
    assert_eq!(r.body["outcome"], "admitted", "{}", r.text);
    let (r, _) = hooks
        .generic(&generic_message("room-1", "m-1", "alice", "plan"))
        .await;
    assert_eq!(r.body["outcome"], "admitted", "{}", r.text);

    // Generic: drafts with `final: false`, the raw text growing, then the whole answer final.
    let posts = gw
        .wait_until_final(BOUND)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(posts.iter().all(|c| c.ok), "{posts:?}");
    let (last, drafts) = posts.split_last().unwrap();
    assert!(drafts.len() >= 2, "too few drafts: {posts:?}");
    assert_paced(drafts);
    let mut before = String::new();
    for d in drafts {
        assert_eq!(d.body["final"], false);
        assert_eq!(d.body["in_reply_to"], "m-1");
        assert!(
            d.text().starts_with(&before),
            "{before:?} then {:?}",
            d.text()
        );
        before = d.text().to_owned();
    }
    assert_eq!(
        last.body,
        json!({"chat_id": "room-1", "text": ANSWER, "in_reply_to": "m-1", "final": true})
    );

    // Slack: one message, updated; the last update is the final mrkdwn without the marker.
    let final_update = within(BOUND, || async {
        let calls = sl.accepted(&["chat.postMessage", "chat.update"]);
        let last = calls.last()?;
        (calls.len() > 1 && !last.text().contains(MARKER)).then_some(calls)
    })
    .await;
    let calls = final_update.unwrap_or_else(|| {
        let calls = sl.accepted(&["chat.postMessage", "chat.update"]);
        panic!("no final update within {BOUND:?}: {calls:?}")
    });
    assert_eq!(calls[0].method, "chat.postMessage");
    assert!(calls[1..].iter().all(|c| c.method == "chat.update"));
    let ts = calls[0].message_id.clone().unwrap();
    assert!(calls[1..].iter().all(|c| c.body["ts"] == json!(ts)));
    assert_paced(&calls);
    let shown: Vec<String> = calls.iter().map(|c| slack_visible(c.text())).collect();
    let final_mrkdwn = "Here is *the plan*, in short:\n\n• read the _input_ &amp; parse it\n\
                        • write `out.txt`\n\n```\nfn main() {\n    println!(\"a &lt; b\");\n}\n```\n\
                        That is all, done.";
    assert_eq!(calls.last().unwrap().text(), final_mrkdwn);
    let fin = slack_visible(final_mrkdwn);
    assert_stable(&shown, &fin);
    assert_eq!(sl.messages().len(), 1);
}

/// What a Slack chat shows of our mrkdwn, near enough to compare drafts: fence lines dropped,
/// entities decoded (formatting marks of complete lines never change).
fn slack_visible(mrkdwn: &str) -> String {
    mrkdwn
        .lines()
        .filter(|l| *l != "```")
        .collect::<Vec<_>>()
        .join("\n")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

trait UntilFinal {
    async fn wait_until_final(&self, bound: Duration) -> Result<Vec<FakeCall>, String>;
}

impl UntilFinal for FakePlatform {
    /// The generic receiver's POSTs up to the first with `final: true`.
    async fn wait_until_final(&self, bound: Duration) -> Result<Vec<FakeCall>, String> {
        let found = within(bound, || async {
            let calls = self.calls_to("reply");
            let i = calls
                .iter()
                .position(|c| c.body["final"] == Value::Bool(true))?;
            Some(calls[..=i].to_vec())
        })
        .await;
        found.ok_or_else(|| {
            let calls = self.calls_to("reply");
            format!("no final reply within {bound:?}: {calls:?}")
        })
    }
}

on_both!(a_resumed_turn_edits_its_draft_from_the_start);
/// SPEC R13.9 with R11.1: the process dies while a turn's draft is being edited; the turn
/// resumes by itself after the restart, and its answer goes into the same draft message, edited
/// from the start: never a second message, and the chat ends with the one complete answer.
async fn a_resumed_turn_edits_its_draft_from_the_start(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let words: Vec<String> = (1..=20).map(|i| format!("w{i:02} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    provider.on_user_text_times(
        "story",
        Reply::chunks(&words, Duration::from_millis(150)),
        1,
    );
    let fin = "The whole story, told once.";
    provider.on_user_text("story", Reply::text(fin));
    let tg = FakePlatform::telegram("123456:FAKE");
    let mut tk = start(&provider, database, &tg.config_toml(&stream_toml())).await;
    let hooks = Webhooks::new(&tk.url);
    let (r, _) = hooks
        .telegram(&telegram_message(1, ALICE, ALICE, "a story"))
        .await;
    assert_eq!(r.body["outcome"], "admitted", "{}", r.text);
    let admission = r.body["receipt"]["admission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The draft was sent and edited at least once (its message id is recorded by then).
    tg.wait_accepted(&["editMessageText"], 1, BOUND)
        .await
        .unwrap();
    tk.kill();
    tk.restart().await;
    let done = tk.api().wait_terminal(&admission, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert_eq!(done["outcome"]["attempts"], 2, "{done}");

    let calls = final_edit(&tg, |shown| shown == fin).await;
    assert_eq!(calls[0].method, "sendMessage", "the draft is sent first");
    assert!(
        calls[1..].iter().all(|c| c.method == "editMessageText"),
        "one message, then only edits, across the restart: {calls:?}"
    );
    let id = calls[0].message_id.clone().unwrap();
    assert!(calls.iter().all(|c| c.message_id.as_deref() == Some(&id)));
    let msgs = tg.messages();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0].text, fin);
}

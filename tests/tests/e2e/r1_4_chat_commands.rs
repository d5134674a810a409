//! Chat commands that bypass the queue (SPEC R1.4) and approvals from chat buttons, against the
//! real binary through the platform webhooks: `/stop` interrupts a running turn at once,
//! `/status` answers while a turn runs, `/new` moves the chat to a fresh session (once, however
//! often it is redelivered), `/queue` waits even where the session interrupts, `/approve`,
//! `/deny`, a Telegram inline button and a Slack block action reach a turn waiting on approval,
//! and `/retry` runs again a turn a crash left `unknown`. Every answer is an outbox `notice`
//! keyed `cmd:<platform>:<update id>`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use turnkey_tests::webhooks::{
    generic_message, platforms_toml, slack_button, slack_message, slack_signature, telegram_button,
    telegram_message, unix_now, Endpoints, Rows, Webhooks, SLACK_BOT_USER, SLACK_SECRET,
    SLACK_TEAM,
};
use turnkey_tests::{pg, Api, Reply, Resp, ScriptedProvider, Turnkey, TurnkeyOptions};

use turnkey_tests::wait::{eventually, BOUND};
const ALICE: i64 = 4242;
const BOB: i64 = 4343;
const STRANGER: i64 = 9999;
const SLACK_USER: &str = "U123ABC456";

async fn start(provider: &ScriptedProvider, database: Option<&str>, extra: &str) -> Turnkey {
    start_to(provider, database, extra, &Endpoints::nowhere()).await
}

async fn start_to(
    provider: &ScriptedProvider,
    database: Option<&str>,
    extra: &str,
    to: &Endpoints,
) -> Turnkey {
    let toml = platforms_toml(to, &[&ALICE.to_string(), &BOB.to_string()], &[SLACK_USER]);
    let opts = TurnkeyOptions::new(provider).extra_toml(&format!("{toml}{extra}"));
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    Turnkey::start(opts).await
}

/// Alice says `text` in her private chat as update `update_id`.
async fn say(hooks: &Webhooks, update_id: i64, text: &str) -> Resp {
    let (r, _) = hooks
        .telegram(&telegram_message(update_id, ALICE, ALICE, text))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r
}

fn admission_id(r: &Resp) -> String {
    assert!(
        matches!(r.body["outcome"].as_str(), Some("admitted" | "duplicate")),
        "{}",
        r.text
    );
    r.body["receipt"]["admission_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn session_id(r: &Resp) -> String {
    r.body["receipt"]["session_id"].as_str().unwrap().to_owned()
}

/// The answer of a command, checked to be one.
fn answer<'a>(r: &'a Resp, command: &str) -> &'a str {
    assert_eq!(r.body["outcome"], "command", "{}", r.text);
    assert_eq!(r.body["command"], command, "{}", r.text);
    r.body["detail"].as_str().unwrap()
}

async fn wait_event(api: &Api, session: &str, kind: &str) -> Value {
    eventually(BOUND, kind, || async {
        api.all_events(session, 0)
            .await
            .into_iter()
            .find(|e| e["kind"] == kind)
    })
    .await
}

/// The ids of the session's pending approvals, once there are `n`.
async fn pending_approvals(api: &Api, session: &str, n: usize) -> Vec<String> {
    eventually(BOUND, &format!("{n} pending approvals"), || async {
        let view = api.session(session).await;
        let ids: Vec<String> = view.body["pending_approvals"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a["approval_id"].as_str().unwrap().to_owned())
            .collect();
        (ids.len() == n).then_some(ids)
    })
    .await
}

/// `/status` answers while a turn runs; `/stop` interrupts it at once.
async fn stop_and_status(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let chunks: Vec<String> = (0..40).map(|i| format!("part {i} ")).collect();
    let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
    // About 12 s of answer, unless stopped.
    provider.on_user_text(
        "long task",
        Reply::chunks(&chunks, Duration::from_millis(300)),
    );
    let tk = start(&provider, database, "").await;
    let api = tk.api();
    let hooks = Webhooks::new(&tk.url);
    let rows = Rows::connect(&tk.database_url).await;

    let first = say(&hooks, 100, "long task").await;
    let running = admission_id(&first);
    let session = session_id(&first);
    wait_event(&api, &session, "message.delta").await;

    let status = say(&hooks, 101, "/status").await;
    let text = answer(&status, "status");
    assert!(text.contains("running, 0 queued"), "{text}");
    assert!(text.contains(&running), "{text}");
    assert!(text.contains("No approval is pending"), "{text}");
    let row = rows
        .wait_outbox("cmd:telegram:101", Duration::from_secs(5))
        .await;
    assert_eq!(row.kind, "notice");
    assert_eq!(row.text(), text);
    assert_eq!(row.chat_key, format!("telegram:{ALICE}"));
    assert_eq!(row.payload["reply_to"], "601", "{:?}", row.payload);
    // The command did not queue behind the turn: nothing new was admitted.
    assert_eq!(rows.count("session_admissions").await, 1);

    let asked = Instant::now();
    let stop = say(&hooks, 102, "/stop@turnkey_bot").await;
    assert_eq!(answer(&stop, "stop"), "⏹ Stopping the running turn.");
    let done = api.wait_terminal(&running, BOUND).await;
    let took = asked.elapsed();
    assert_eq!(done["outcome"]["result"], "interrupted", "{done}");
    assert!(
        took < Duration::from_secs(3),
        "the turn stopped {took:?} after /stop"
    );
    let reply = rows
        .wait_outbox(&format!("reply:{running}"), Duration::from_secs(5))
        .await;
    assert!(reply.text().starts_with("⏹ Stopped"), "{reply:?}");

    // A redelivered /stop does nothing again; a new one finds nothing running.
    let again = say(&hooks, 102, "/stop@turnkey_bot").await;
    assert_eq!(again.body["duplicate"], true, "{}", again.text);
    assert_eq!(answer(&again, "stop"), "⏹ Stopping the running turn.");
    let idle = say(&hooks, 103, "/stop").await;
    assert_eq!(answer(&idle, "stop"), "Nothing is running.");
    let status = say(&hooks, 104, "/status").await;
    assert!(answer(&status, "status").contains("idle, 0 queued"));
    let notices: Vec<String> = rows
        .outbox()
        .await
        .into_iter()
        .filter(|r| r.idempotency_key.starts_with("cmd:"))
        .map(|r| r.idempotency_key)
        .collect();
    assert_eq!(
        notices,
        [
            "cmd:telegram:101",
            "cmd:telegram:102",
            "cmd:telegram:103",
            "cmd:telegram:104"
        ]
    );
    assert_eq!(provider.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_4_stop_interrupts_at_once_and_status_answers_while_a_turn_runs_sqlite() {
    stop_and_status(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_4_stop_interrupts_at_once_and_status_answers_while_a_turn_runs_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    stop_and_status(Some(db.url())).await;
}

/// `/new`: a fresh session for the chat, once however often the update comes.
async fn new_session(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, database, "").await;
    let api = tk.api();
    let hooks = Webhooks::new(&tk.url);
    let rows = Rows::connect(&tk.database_url).await;
    let chat = format!("telegram:{ALICE}");

    let first = say(&hooks, 200, "remember the word kiwi").await;
    let old = session_id(&first);
    api.wait_terminal(&admission_id(&first), BOUND).await;

    let new = say(&hooks, 201, "/new").await;
    let text = answer(&new, "new").to_owned();
    assert_eq!(new.body["duplicate"], false);
    let fresh = rows.chat_session(&chat).await.unwrap();
    assert_ne!(fresh, old);
    assert!(text.contains(&fresh), "{text}");
    for _ in 0..2 {
        let again = say(&hooks, 201, "/new").await;
        assert_eq!(again.body["duplicate"], true, "{}", again.text);
        assert_eq!(answer(&again, "new"), text);
    }
    assert_eq!(rows.chat_session(&chat).await.unwrap(), fresh);
    assert_eq!(rows.count("sessions").await, 2);
    let answers: Vec<_> = rows
        .outbox()
        .await
        .into_iter()
        .filter(|r| r.idempotency_key == "cmd:telegram:201")
        .collect();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].text(), text);

    // The next message goes to the fresh session, which does not know the old one.
    let next = say(&hooks, 202, "what was the word?").await;
    assert_eq!(session_id(&next), fresh);
    api.wait_terminal(&admission_id(&next), BOUND).await;
    let sent = provider.requests().last().unwrap().body.clone();
    assert!(!sent.to_string().contains("kiwi"), "{sent}");
    // An old update redelivered still reaches the old session, as the same admission.
    let replay = say(&hooks, 200, "remember the word kiwi").await;
    assert_eq!(replay.body["outcome"], "duplicate", "{}", replay.text);
    assert_eq!(session_id(&replay), old);

    // A stranger's /new changes nothing.
    let (r, _) = hooks
        .telegram(&telegram_message(203, ALICE, STRANGER, "/new"))
        .await;
    assert_eq!(r.body["outcome"], "refused", "{}", r.text);
    assert_eq!(rows.chat_session(&chat).await.unwrap(), fresh);
    assert_eq!(rows.count("sessions").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_4_new_gives_a_fresh_session_once_however_often_it_is_redelivered_sqlite() {
    new_session(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_4_new_gives_a_fresh_session_once_however_often_it_is_redelivered_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    new_session(Some(db.url())).await;
}

/// `/queue <text>` waits for the running turn even where the busy policy interrupts; a plain
/// message in the same place interrupts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_4_queue_waits_for_the_running_turn_even_where_the_policy_interrupts() {
    let provider = ScriptedProvider::start();
    let slow = || Reply::chunks(&["slow ", "work ", "done"], Duration::from_millis(400));
    provider.on_user_text("first", slow());
    provider.on_user_text("third", slow());
    let tk = start(&provider, None, "\n[agent]\nbusy_policy = \"interrupt\"\n").await;
    let api = tk.api();
    let hooks = Webhooks::new(&tk.url);

    let first = say(&hooks, 300, "first").await;
    let session = session_id(&first);
    wait_event(&api, &session, "message.delta").await;
    let queued = say(&hooks, 301, "/queue second").await;
    let text = answer(&queued, "queue");
    assert!(text.starts_with("⏳ Queued"), "{text}");
    let second = queued.body["receipt"]["admission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let a = api.wait_terminal(&admission_id(&first), BOUND).await;
    assert_eq!(a["outcome"]["result"], "completed", "not interrupted: {a}");
    let b = api.wait_terminal(&second, BOUND).await;
    assert_eq!(b["outcome"]["result"], "completed", "{b}");
    let asked: Vec<String> = provider.asked();
    assert_eq!(asked, ["first", "second"]);
    // A redelivered /queue is the same admission.
    let again = say(&hooks, 301, "/queue second").await;
    assert_eq!(again.body["duplicate"], true, "{}", again.text);

    // The policy is in force: a plain message interrupts the running turn.
    let third = say(&hooks, 302, "third").await;
    wait_event(&api, &session, "message.delta").await;
    eventually(BOUND, "third turn's model call", || async {
        (provider.requests().len() >= 3).then_some(())
    })
    .await;
    let fourth = say(&hooks, 303, "fourth").await;
    let c = api.wait_terminal(&admission_id(&third), BOUND).await;
    assert_eq!(c["outcome"]["result"], "interrupted", "{c}");
    let d = api.wait_terminal(&admission_id(&fourth), BOUND).await;
    assert_eq!(d["outcome"]["result"], "completed", "{d}");
}

/// Approvals from the chat: `/approve` (the only pending one), a Telegram button, a Slack
/// button, and `/approve` / `/deny` by id when several are pending. Each reaches the turn
/// waiting on it. Strangers and other chats cannot decide.
async fn approvals_from_the_chat(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let terminal = |id: &str, file: &str| {
        (
            id.to_owned(),
            "terminal".to_owned(),
            json!({ "command": format!("echo yes > {file}") }),
        )
    };
    // Each asks once; the model's next call (after the tool result) gets a plain answer.
    let once =
        |needle: &str, calls| provider.on_user_text_times(needle, Reply::ToolCalls(calls), 1);
    once("run one", vec![terminal("a1", "one")]);
    once("run two", vec![terminal("b1", "two")]);
    once("run three", vec![terminal("c1", "three")]);
    once(
        "run four",
        vec![terminal("d1", "four"), terminal("d2", "five")],
    );
    let tk = start(
        &provider,
        database,
        "\n[tools]\napproval = \"dangerous\"\napproval_timeout_s = 120\nisolation = \"shared\"\n",
    )
    .await;
    let api = tk.api();
    let hooks = Webhooks::new(&tk.url);
    let rows = Rows::connect(&tk.database_url).await;
    let workspace = tk.dir.path().join("workspace");

    // `/approve` with one pending approval.
    let one = say(&hooks, 400, "run one").await;
    let session = session_id(&one);
    let ids = pending_approvals(&api, &session, 1).await;
    let asked = rows
        .wait_outbox(&format!("approval:{}", ids[0]), BOUND)
        .await;
    assert_eq!(asked.kind, "approval");
    assert_eq!(asked.payload["name"], "terminal");
    assert_eq!(asked.payload["approval_id"], ids[0].as_str());
    let approved = say(&hooks, 401, "/approve").await;
    assert_eq!(
        answer(&approved, "approve"),
        "✅ Approved terminal (by Testusername)."
    );
    let done = api.wait_terminal(&admission_id(&one), BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert!(workspace.join("one").exists());
    let nothing = say(&hooks, 402, "/deny").await;
    assert_eq!(answer(&nothing, "deny"), "Nothing waits for approval.");

    // A Telegram inline button.
    let two = say(&hooks, 410, "run two").await;
    let ids = pending_approvals(&api, &session, 1).await;
    let data = format!("approve:{}", ids[0]);
    let (r, _) = hooks
        .telegram(&telegram_button(411, ALICE, STRANGER, &data))
        .await;
    assert_eq!(r.body["method"], "answerCallbackQuery", "{}", r.text);
    assert_eq!(r.body["callback_query_id"], "cb-411");
    assert_eq!(
        r.body["text"],
        "You are not allowed to decide approvals here."
    );
    // Bob is allowed, but the approval is not of his chat.
    let (r, _) = hooks.telegram(&telegram_button(412, BOB, BOB, &data)).await;
    assert_eq!(
        r.body["text"],
        format!("No approval {} in this chat.", ids[0]),
        "{}",
        r.text
    );
    assert_eq!(pending_approvals(&api, &session, 1).await, ids);
    let (r, _) = hooks
        .telegram(&telegram_button(413, ALICE, ALICE, &data))
        .await;
    assert_eq!(
        r.body,
        json!({
            "method": "answerCallbackQuery",
            "callback_query_id": "cb-413",
            "text": "✅ Approved terminal (by Testusername).",
        })
    );
    let done = api.wait_terminal(&admission_id(&two), BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert!(workspace.join("two").exists());
    // Pressed again (or redelivered): decided once.
    let (r, _) = hooks
        .telegram(&telegram_button(413, ALICE, ALICE, &data))
        .await;
    assert_eq!(r.body["text"], "✅ Approved terminal (by Testusername).");
    let (r, _) = hooks
        .telegram(&telegram_button(414, ALICE, ALICE, &data))
        .await;
    assert_eq!(
        r.body["text"],
        format!("Approval {} was already decided or has expired.", ids[0])
    );
    let notice = rows.wait_outbox("cmd:telegram:413", BOUND).await;
    assert_eq!(notice.text(), "✅ Approved terminal (by Testusername).");

    // A Slack block action denies.
    let (three, _) = hooks
        .slack(&slack_message(
            "Ev9",
            "C9",
            "1700000000.000900",
            SLACK_USER,
            &format!("<@{SLACK_BOT_USER}> run three"),
        ))
        .await;
    let slack_session = session_id(&three);
    let ids = pending_approvals(&api, &slack_session, 1).await;
    let (r, _) = hooks
        .slack_interactive(&slack_button(
            "trigger-1",
            "C9",
            SLACK_USER,
            "turnkey_deny",
            &ids[0],
        ))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["outcome"], "decided", "{}", r.text);
    assert_eq!(r.body["detail"], "🚫 Denied terminal (by jtorrance).");
    let done = api.wait_terminal(&admission_id(&three), BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    assert!(!workspace.join("three").exists());
    let notice = rows.wait_outbox("cmd:slack:action:trigger-1", BOUND).await;
    assert_eq!(notice.chat_key, format!("slack:{SLACK_TEAM}:C9"));

    // Two pending at once: `/approve` alone lists them; an id prefix or a whole id decides.
    let four = say(&hooks, 420, "run four").await;
    let ids = pending_approvals(&api, &session, 2).await;
    let list = say(&hooks, 421, "/approve").await;
    let text = answer(&list, "approve");
    assert!(text.starts_with("2 approvals are pending"), "{text}");
    assert!(text.contains(&ids[0]) && text.contains(&ids[1]), "{text}");
    assert_eq!(pending_approvals(&api, &session, 2).await.len(), 2);
    let view = api.session(&session).await;
    let first_call = view.body["pending_approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["approval_id"] == ids[0].as_str())
        .map(|a| a["call_id"].as_str().unwrap().to_owned())
        .unwrap();
    // The shortest prefix that tells the two apart, and a little more: two approvals made in
    // the same millisecond share their UUIDv7 timestamp digits, so a fixed length can be
    // ambiguous (and an ambiguous prefix rightly lists them instead of deciding).
    let common = ids[0]
        .chars()
        .zip(ids[1].chars())
        .take_while(|(a, b)| a == b)
        .count();
    let prefix = &ids[0][..(common + 4).min(ids[0].len())];
    let r = say(&hooks, 422, &format!("/approve {prefix}")).await;
    assert_eq!(
        answer(&r, "approve"),
        "✅ Approved terminal (by Testusername)."
    );
    let r = say(&hooks, 423, &format!("/deny {}", ids[1])).await;
    assert_eq!(answer(&r, "deny"), "🚫 Denied terminal (by Testusername).");
    let done = api.wait_terminal(&admission_id(&four), BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    let (approved_file, denied_file) = if first_call == "d1" {
        ("four", "five")
    } else {
        ("five", "four")
    };
    assert!(workspace.join(approved_file).exists());
    assert!(!workspace.join(denied_file).exists());
}

/// A sub-agent's approval is its people's (SPEC R1.5): it is asked in the chat of the session
/// that delegated it, with buttons; `/approve` there decides it; the child runs the command and
/// its report comes back and is answered. The parent's log relays both approval events, naming
/// the child.
async fn subagent_approval_in_the_chat(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    // Earlier rules win: the report (which quotes the goal) before the child's goal.
    provider.on_user_text(
        "[turnkey:subagent-report",
        Reply::text("The helper wrote it."),
    );
    provider.on_tool_result("CHILD-WRITE", Reply::text("child wrote the file"));
    provider.on_user_text(
        "CHILD-WRITE",
        Reply::tool_call(
            "w1",
            "terminal",
            json!({"command": "echo yes > from-child"}),
        ),
    );
    provider.on_tool_result("delegate the write", Reply::text("delegated"));
    provider.on_user_text(
        "delegate the write",
        Reply::tool_call("d1", "delegate_task", json!({"goal": "CHILD-WRITE"})),
    );
    let tk = start(
        &provider,
        database,
        "\n[tools]\napproval = \"dangerous\"\napproval_timeout_s = 120\nisolation = \"shared\"\n",
    )
    .await;
    let api = tk.api();
    let hooks = Webhooks::new(&tk.url);
    let rows = Rows::connect(&tk.database_url).await;
    let workspace = tk.dir.path().join("workspace");

    let asked = say(&hooks, 500, "delegate the write").await;
    let parent = session_id(&asked);
    let relayed = wait_event(&api, &parent, "approval.requested").await;
    let child = relayed["data"]["session_id"].as_str().unwrap().to_owned();
    assert_ne!(child, parent, "{relayed}");
    assert_eq!(relayed["data"]["name"], "terminal", "{relayed}");
    let id = relayed["data"]["approval_id"].as_str().unwrap().to_owned();
    let row = rows.wait_outbox(&format!("approval:{id}"), BOUND).await;
    assert_eq!(row.kind, "approval");
    assert_eq!(
        row.chat_key,
        format!("telegram:{ALICE}"),
        "asked in the parent's chat"
    );
    assert_eq!(row.session_id.as_deref(), Some(parent.as_str()));
    assert!(
        !workspace.join("from-child").exists(),
        "not before approval"
    );

    let approved = say(&hooks, 501, "/approve").await;
    assert_eq!(
        answer(&approved, "approve"),
        "✅ Approved terminal (by Testusername)."
    );
    let resolved = wait_event(&api, &parent, "approval.resolved").await;
    assert_eq!(resolved["data"]["session_id"], child.as_str());
    assert_eq!(resolved["data"]["decision"], "approve");
    let finished = wait_event(&api, &parent, "subagent.finished").await;
    assert_eq!(finished["data"]["status"], "completed", "{finished}");
    assert!(workspace.join("from-child").exists());
    eventually(BOUND, "the parent's answer to the report", || async {
        api.messages(&parent)
            .await
            .iter()
            .any(|m| m["role"] == "assistant" && m["content"] == "The helper wrote it.")
            .then_some(())
    })
    .await;
    // The child's approval is the child's: its own log has it, without a relay mark.
    let own = wait_event(&api, &child, "approval.requested").await;
    assert!(own["data"].get("session_id").is_none(), "{own}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_subagents_approval_is_asked_and_decided_in_the_parents_chat_sqlite() {
    subagent_approval_in_the_chat(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_5_a_subagents_approval_is_asked_and_decided_in_the_parents_chat_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    subagent_approval_in_the_chat(Some(db.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_4_approve_commands_and_buttons_unblock_a_turn_waiting_on_approval_sqlite() {
    approvals_from_the_chat(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_4_approve_commands_and_buttons_unblock_a_turn_waiting_on_approval_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    approvals_from_the_chat(Some(db.url())).await;
}

/// After a turn is cut past `[agent] max_resumes` (a crash, then another right after each
/// resume) the chat is told its turn was cut off; `/retry` runs it again, once.
async fn retry_after_a_crash(database: Option<&str>) {
    let provider = ScriptedProvider::start();
    let toml = platforms_toml(&Endpoints::nowhere(), &[&ALICE.to_string()], &[SLACK_USER]);
    let opts = TurnkeyOptions::new(&provider)
        .extra_toml(&toml)
        .env("FAILPOINTS", "turn.after_claim=return");
    let opts = match database {
        Some(url) => opts.database(url),
        None => opts,
    };
    let mut tk = Turnkey::start(opts).await;
    // The process dies at the claim, which may come before its answer to the webhook: the
    // answer is then lost, as Telegram would see it, and the update is delivered again below.
    let url = tk.url.clone();
    let first = tokio::spawn(async move { say(&Webhooks::new(&url), 500, "cut off").await });
    let answered = first.await.ok().map(|cut| admission_id(&cut));
    assert!(
        tk.wait_exit(Duration::from_secs(10)).await.is_some(),
        "turnkey did not die at turn.after_claim"
    );
    // Cut, a turn resumes by itself (SPEC R13.9); cut again right after each of its
    // `max_resumes` resumes, it is left unknown for a person.
    let again = [(
        "FAILPOINTS".to_string(),
        "turn.after_resume=return".to_string(),
    )];
    for _ in 0..turnkey_tests::harness::DEFAULT_MAX_RESUMES {
        tk.restart_to_die_at(&again, "turn.after_resume", Duration::from_secs(10))
            .await;
    }
    tk.restart_with_env(&[]).await;
    let api = tk.api();
    let hooks = Webhooks::new(&tk.url);
    let rows = Rows::connect(&tk.database_url).await;
    // Delivered again (its answer was lost), the update is a duplicate with the same receipt.
    let unknown = match answered {
        Some(id) => id,
        None => admission_id(&say(&hooks, 500, "cut off").await),
    };
    let a = api
        .wait_admission(&unknown, |s| s == "unknown", BOUND)
        .await
        .unwrap();
    assert_eq!(a["status"], "unknown");
    let told = rows.wait_outbox(&format!("unknown:{unknown}"), BOUND).await;
    assert!(told.text().contains("/retry"), "{told:?}");

    let retry = say(&hooks, 501, "/retry").await;
    assert_eq!(
        answer(&retry, "retry"),
        "🔁 Running the cut-off turn again."
    );
    assert_eq!(retry.body["receipt"]["retry_of"], unknown.as_str());
    let rerun = retry.body["receipt"]["admission_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = api.wait_terminal(&rerun, BOUND).await;
    assert_eq!(done["outcome"]["result"], "completed", "{done}");
    let reply = rows.wait_outbox(&format!("reply:{rerun}"), BOUND).await;
    assert_eq!(reply.text(), "ok: cut off");
    let again = say(&hooks, 502, "/retry").await;
    assert_eq!(
        answer(&again, "retry"),
        "🔁 That turn was already run again."
    );
    assert_eq!(provider.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_4_retry_runs_again_a_turn_a_crash_cut_off_sqlite() {
    retry_after_a_crash(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_4_retry_runs_again_a_turn_a_crash_cut_off_postgres() {
    let Some(db) = pg::fresh_database().await else {
        return;
    };
    retry_after_a_crash(Some(db.url())).await;
}

/// The same commands on Slack and the generic webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_4_commands_work_on_every_platform() {
    let provider = ScriptedProvider::start();
    let (to, [telegram, slack, webhook]) = Endpoints::fakes();
    let tk = start_to(&provider, None, "", &to).await;
    let hooks = Webhooks::new(&tk.url);
    let rows = Rows::connect(&tk.database_url).await;

    let (r, _) = hooks
        .slack(&slack_message(
            "Ev10",
            "D10",
            "1700000000.001000",
            SLACK_USER,
            &format!("<@{SLACK_BOT_USER}> /status"),
        ))
        .await;
    assert!(
        answer(&r, "status").contains("idle, 0 queued"),
        "{}",
        r.text
    );
    let row = rows
        .wait_outbox("cmd:slack:D10:1700000000.001000", BOUND)
        .await;
    assert_eq!(row.chat_key, format!("slack:{SLACK_TEAM}:D10"));
    assert_eq!(row.payload["reply_to"], "1700000000.001000");

    let (r, _) = hooks
        .generic(&generic_message("room-7", "g-1", "alice", "/new"))
        .await;
    answer(&r, "new");
    let row = rows.wait_outbox("cmd:webhook:g-1", BOUND).await;
    assert_eq!(row.chat_key, "webhook:room-7");
    let (r, _) = hooks
        .generic(&generic_message("room-7", "g-2", "alice", "/help"))
        .await;
    assert!(answer(&r, "help").contains("/queue"), "{}", r.text);
    // Not a command: text that only starts with a slash.
    let (r, _) = hooks
        .generic(&generic_message(
            "room-7",
            "g-3",
            "alice",
            "/etc/hosts is where?",
        ))
        .await;
    assert_eq!(r.body["outcome"], "admitted", "{}", r.text);
    // A Slack slash command registered with the events URL: an empty 200, the answer goes to
    // the channel.
    let form = b"token=x&team_id=T123ABC456&team_domain=d&channel_id=C11&channel_name=general\
&user_id=U123ABC456&user_name=jtorrance&command=%2Fstatus&text=&api_app_id=A1\
&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c\
&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2F1"
        .to_vec();
    let ts = unix_now();
    let (r, _) = hooks
        .slack_raw(
            "/webhooks/slack",
            "application/x-www-form-urlencoded",
            form.clone(),
            &[
                ("X-Slack-Request-Timestamp", ts.to_string()),
                (
                    "X-Slack-Signature",
                    slack_signature(SLACK_SECRET, ts, &form),
                ),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.text, "");
    let row = rows
        .wait_outbox(
            "cmd:slack:slash:398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c",
            BOUND,
        )
        .await;
    assert_eq!(row.chat_key, format!("slack:{SLACK_TEAM}:C11"));
    assert!(row.text().contains("idle, 0 queued"), "{row:?}");
    // Unsigned, it is refused like any other request.
    let (r, _) = hooks
        .slack_raw(
            "/webhooks/slack",
            "application/x-www-form-urlencoded",
            form,
            &[("X-Slack-Request-Timestamp", ts.to_string())],
        )
        .await;
    assert_eq!(r.status, 401, "{}", r.text);

    let (r, _) = hooks
        .telegram(&telegram_message(600, ALICE, ALICE, "/status@turnkey_bot"))
        .await;
    let status = answer(&r, "status").to_owned();

    // The answers reached their chats.
    let sent = slack
        .wait_accepted(&["chat.postMessage"], 2, BOUND)
        .await
        .unwrap();
    let mut channels: Vec<&str> = sent
        .iter()
        .map(|c| c.body["channel"].as_str().unwrap())
        .collect();
    channels.sort();
    assert_eq!(channels, ["C11", "D10"]);
    assert!(sent[0].text().contains("idle, 0 queued"), "{:?}", sent[0]);
    let sent = webhook.wait_accepted(&["reply"], 2, BOUND).await.unwrap();
    assert_eq!(sent[0].body["chat_id"], "room-7");
    assert!(
        sent[0].text().starts_with("🆕 New conversation"),
        "{:?}",
        sent[0]
    );
    assert_eq!(sent[0].body["in_reply_to"], "g-1");
    assert!(sent[1].text().contains("/queue"), "{:?}", sent[1]);
    let sent = telegram
        .wait_accepted(&["sendMessage"], 1, BOUND)
        .await
        .unwrap();
    assert_eq!(sent[0].body["chat_id"].to_string(), ALICE.to_string());
    assert!(
        sent[0].text().contains(status.lines().next().unwrap()),
        "{:?} vs {status}",
        sent[0]
    );
}

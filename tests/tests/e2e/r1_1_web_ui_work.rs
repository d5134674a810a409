//! The web UI's Work section and report cards in real headless Chromium (SPEC R1.1, R1.5),
//! against the real binary and the scripted provider. A turn sent from the page delegates a
//! task and starts a background command (`echo hi; exit 3`): the page shows, live, a sub-agent
//! card that reaches `completed` with a link that opens the child session, a process card that
//! reaches `exited` with code 3, and the two reports as report cards (not user bubbles); after
//! a reload the same is read from `GET …/subagents`, `GET …/processes` and the transcript; at
//! phone width nothing is wider than the screen. A second test: a running child's approval is
//! shown on its card in the parent's page and approved from there. Screenshots go to
//! `target/screenshots/`. Without Chromium and chromedriver the tests print "skipping: …",
//! unless `TURNKEY_REQUIRE_BROWSER=1` (CI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::r1_1_web_ui::{new_session, send, sign_in, SERIAL};
use serde_json::{json, Value};
use std::time::Duration;
use turnkey_tests::browser::{Browser, DESKTOP, PAGE_WAIT, PHONE};
use turnkey_tests::wait::{eventually, BOUND};
use turnkey_tests::{Api, Reply, ScriptedProvider, Turnkey, TurnkeyOptions};

const SUBAGENT_REPORT: &str = "[turnkey:subagent-report";
const PROCESS_REPORT: &str = "[turnkey:process-report";
const SUBAGENT_CARD: &str = "#work .work-card.subagent";
const PROCESS_CARD: &str = "#work .work-card.process";

/// Waits until `session` has an event of `kind`, and answers it.
async fn wait_event(api: &Api, session: &str, kind: &str) -> Value {
    eventually(BOUND, kind, || async {
        api.all_events(session, 0)
            .await
            .into_iter()
            .find(|e| e["kind"] == kind)
    })
    .await
}

/// Every report card's `[kind, status, exit code or null, body]`, in transcript order.
async fn report_cards(b: &Browser) -> Value {
    b.js(
        "return Array.from(document.querySelectorAll('#transcript li.msg.report')).map(r => [\
           r.dataset.kind, r.dataset.status, r.querySelector('.report-card').dataset.exitCode ?? null, \
           r.querySelector('.report-body').textContent]);",
        vec![],
    )
    .await
}

/// What the page shows of the work: the two cards' status lines and the report cards.
async fn check_work_shown(b: &Browser, child: &str, what: &str) {
    b.wait_js(
        &format!("{what}: the sub-agent card completed"),
        BOUND,
        &format!(
            "const c = document.querySelector('{SUBAGENT_CARD}'); \
             return !!c && c.dataset.status === 'completed' && c.dataset.child === '{child}' \
             && c.querySelector('.work-status').textContent === 'completed' \
             && !c.querySelector('.work-report').hidden \
             && c.querySelector('.work-report .report-body').textContent.includes('alpha answer: 42');"
        ),
    )
    .await;
    b.wait_js(
        &format!("{what}: the process card exited with 3"),
        BOUND,
        &format!(
            "const c = document.querySelector('{PROCESS_CARD}'); \
             return !!c && c.dataset.status === 'exited' && c.dataset.exitCode === '3' \
             && c.querySelector('.work-status').textContent === 'exited · code 3' \
             && c.querySelector('.work-command').textContent === 'echo hi; exit 3';"
        ),
    )
    .await;
    b.wait_js(
        &format!("{what}: the two report cards"),
        BOUND,
        "return document.querySelectorAll('#transcript li.msg.report').length === 2;",
    )
    .await;
    let mut reports: Vec<Value> = report_cards(b).await.as_array().unwrap().clone();
    reports.sort_by_key(|r| r[0].as_str().unwrap_or_default().to_owned());
    assert_eq!(reports[0][0], "process", "{reports:?}");
    assert_eq!(reports[0][1], "exited");
    assert_eq!(reports[0][2], "3");
    assert!(
        reports[0][3]
            .as_str()
            .unwrap()
            .contains("It exited with code 3.")
            && reports[0][3].as_str().unwrap().contains("hi"),
        "{reports:?}"
    );
    assert_eq!(reports[1][0], "subagent", "{reports:?}");
    assert_eq!(reports[1][1], "completed");
    assert_eq!(reports[1][3], "alpha answer: 42");
    // No report is drawn as the user's bubble; the gateway's closing line is not shown.
    let bubbles = b
        .js(
            "return Array.from(document.querySelectorAll('#transcript li.msg.user')).map(e => e.textContent);",
            vec![],
        )
        .await;
    assert_eq!(bubbles, json!(["youStart the work"]), "{what}");
    let transcript = b.text("#transcript").await.unwrap();
    assert!(
        !transcript.contains("[end of report") && !transcript.contains("[turnkey:"),
        "{what}: {transcript}"
    );
    // Each report is answered by its own turn, drawn right after it.
    b.wait_js(
        &format!("{what}: each report's answer right after it"),
        BOUND,
        "const after = Array.from(document.querySelectorAll('#transcript li.msg.report'))\
         .map(r => r.nextElementSibling && r.nextElementSibling.classList.contains('assistant') \
              ? r.nextElementSibling.querySelector('.md').textContent : null).sort(); \
         return JSON.stringify(after) === JSON.stringify(['The command exited with 3.', 'The sub-agent found 42.']);",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_r1_5_ui_shows_subagents_processes_and_reports_live_and_after_a_reload() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r1_1_r1_5_ui_shows_subagents_processes…").await else {
        return;
    };
    let provider = ScriptedProvider::start();
    // Earlier rules win: the reports (the sub-agent's quotes its goal) before the goal.
    provider.on_user_text(SUBAGENT_REPORT, Reply::text("The sub-agent found 42."));
    provider.on_user_text(PROCESS_REPORT, Reply::text("The command exited with 3."));
    provider.on_user_text(
        "CHILD-GOAL-ALPHA",
        Reply::chunks(&["alpha answer: ", "42"], Duration::from_millis(700)),
    );
    provider.on_tool_result("Start the work", Reply::text("Both are running."));
    // A goal with a long unbroken word: the card must wrap it, also at phone width.
    let goal = format!(
        "CHILD-GOAL-ALPHA: find the number in /srv/{}",
        "build-0042-".repeat(12)
    );
    provider.on_user_text(
        "Start the work",
        Reply::TextThenToolCalls(
            "On it.".into(),
            vec![
                (
                    "d1".into(),
                    "delegate_task".into(),
                    json!({"tasks": [{"goal": goal}]}),
                ),
                (
                    "b1".into(),
                    "terminal".into(),
                    json!({"command": "echo hi; exit 3", "background": true}),
                ),
            ],
        ),
    );
    let tk =
        Turnkey::start(TurnkeyOptions::new(&provider).extra_toml("[tools]\napproval = \"off\"\n"))
            .await;
    let api = tk.api();

    // The turn is sent from the page: the cards come from the events as they happen.
    sign_in(&b, &tk).await;
    let parent = new_session(&b).await;
    send(&b, "Start the work").await;
    let started = wait_event(&api, &parent, "subagent.started").await;
    let child = started["data"]["child_session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_event(&api, &parent, "subagent.finished").await;
    wait_event(&api, &parent, "process.exited").await;
    check_work_shown(&b, &child, "live").await;
    let summary = b.text("#work .work-summary").await.unwrap();
    assert_eq!(summary, "Work: 1 sub-agent · 1 process");
    let goal_shown = b
        .text(&format!("{SUBAGENT_CARD} .work-goal"))
        .await
        .unwrap();
    assert_eq!(goal_shown, goal);
    b.screenshot("ui-work-live").await;

    // A reload reads the same from the two lists and the transcript.
    b.client.refresh().await.expect("reload");
    b.wait_visible("#composer", PAGE_WAIT).await;
    check_work_shown(&b, &child, "after a reload").await;
    assert_eq!(
        b.count("#work .work-card").await,
        2,
        "each card once after the reload"
    );
    // The session list marks the child as a sub-agent's session.
    b.wait_js(
        "the child marked in the session list",
        PAGE_WAIT,
        &format!(
            "const m = document.querySelector('#sessions a[href=\"#/s/{child}\"] .session-meta'); \
             return !!m && m.textContent.startsWith('sub-agent · ');"
        ),
    )
    .await;
    // Everything ended: the section is folded to its summary line, and opens on a click.
    assert_eq!(
        b.js(
            "return document.querySelector('#work details.work-box').open;",
            vec![]
        )
        .await,
        json!(false)
    );
    b.click("#work .work-summary").await;
    b.wait_visible(&format!("{SUBAGENT_CARD} a.work-link"), PAGE_WAIT)
        .await;

    // At phone width: nothing is wider than the screen, the cards and reports still read.
    b.resize(PHONE).await;
    b.wait_js(
        "the phone layout",
        PAGE_WAIT,
        "return getComputedStyle(document.querySelector('#toggle-sessions')).display !== 'none';",
    )
    .await;
    let overflow = b
        .js(
            "const d = document.documentElement; const wide = Array.from(document.querySelectorAll('#work *, #transcript *'))\
             .filter(e => e.getBoundingClientRect().right > d.clientWidth + 1).map(e => e.className); \
             return [d.scrollWidth - d.clientWidth, wide.slice(0, 5)];",
            vec![],
        )
        .await;
    assert!(
        overflow[0].as_i64().unwrap_or(1) <= 0 && overflow[1] == json!([]),
        "wider than the screen: {overflow}"
    );
    b.screenshot("ui-work-phone").await;
    b.js(
        "document.querySelector('#transcript li.msg.report').scrollIntoView();",
        vec![],
    )
    .await;
    b.screenshot("ui-work-report-phone").await;
    b.resize(DESKTOP).await;

    // The card's link opens the child session: its own transcript, and a way back.
    b.click(&format!("{SUBAGENT_CARD} a.work-link")).await;
    b.wait_js(
        "the child session open",
        PAGE_WAIT,
        &format!(
            "return location.hash === '#/s/{child}' \
             && Array.from(document.querySelectorAll('.msg.assistant .md')).some(e => e.textContent === 'alpha answer: 42');"
        ),
    )
    .await;
    let back = b
        .js(
            "const a = document.querySelector('#work .work-parent-link'); return a ? a.getAttribute('href') : null;",
            vec![],
        )
        .await;
    assert_eq!(back, json!(format!("#/s/{parent}")));
    assert_eq!(
        b.count("#work .work-card").await,
        0,
        "the child started no work of its own"
    );
    b.screenshot("ui-work-child").await;
    b.click("#work .work-parent-link").await;
    b.wait_js(
        "back in the parent",
        PAGE_WAIT,
        &format!(
            "const c = document.querySelector('{SUBAGENT_CARD}'); \
             return location.hash === '#/s/{parent}' && !!c && c.dataset.status === 'completed';"
        ),
    )
    .await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_1_r1_5_ui_approves_a_running_childs_tool_from_the_parents_page() {
    let _serial = SERIAL.lock().await;
    let Some(b) = Browser::start_or_skip("r1_1_r1_5_ui_approves_a_running_childs_tool…").await
    else {
        return;
    };
    let provider = ScriptedProvider::start();
    provider.on_user_text(SUBAGENT_REPORT, Reply::text("The cleanup is done."));
    // The child's terminal call is dangerous: with the default approval mode it waits for
    // the owner, in the child session.
    provider.on_tool_result("CHILD-GOAL-BETA", Reply::text("beta cleaned"));
    provider.on_user_text(
        "CHILD-GOAL-BETA",
        Reply::tool_call(
            "c1",
            "terminal",
            json!({"command": "echo cleaned-by-the-child"}),
        ),
    );
    provider.on_tool_result("Delegate the cleanup", Reply::text("Delegated."));
    provider.on_user_text(
        "Delegate the cleanup",
        Reply::tool_call(
            "d1",
            "delegate_task",
            json!({"tasks": [{"goal": "CHILD-GOAL-BETA: clean up"}]}),
        ),
    );
    let tk = Turnkey::start(
        TurnkeyOptions::new(&provider)
            .extra_toml("[tools]\napproval = \"dangerous\"\napproval_timeout_s = 300\n"),
    )
    .await;
    let api = tk.api();
    sign_in(&b, &tk).await;
    let parent = new_session(&b).await;
    send(&b, "Delegate the cleanup").await;
    let started = wait_event(&api, &parent, "subagent.started").await;
    let child = started["data"]["child_session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let asked = wait_event(&api, &child, "approval.requested").await;
    let approval_id = asked["data"]["approval_id"].as_str().unwrap().to_owned();

    // The parent's page shows the child's question on the child's card.
    let text = b
        .wait_visible(
            &format!("{SUBAGENT_CARD} .approval[data-approval='{approval_id}']"),
            BOUND,
        )
        .await;
    assert!(text.contains("terminal"), "{text}");
    let status = b
        .text(&format!("{SUBAGENT_CARD} .work-status"))
        .await
        .unwrap();
    assert_eq!(status, "needs approval");
    let summary = b.text("#work .work-summary").await.unwrap();
    assert_eq!(
        summary,
        "Work: 1 sub-agent (1 running, 1 waiting for approval)"
    );
    b.screenshot("ui-work-child-approval").await;
    b.click(&format!("{SUBAGENT_CARD} .approval button.approve"))
        .await;

    // Approved in the child: it runs its tool, answers, and the card completes.
    let resolved = wait_event(&api, &child, "approval.resolved").await;
    assert_eq!(resolved["data"]["decision"], "approve", "{resolved}");
    b.wait_js(
        "the sub-agent card completed",
        BOUND,
        &format!(
            "const c = document.querySelector('{SUBAGENT_CARD}'); \
             return !!c && c.dataset.status === 'completed' && !c.querySelector('.approval') \
             && c.querySelector('.work-report .report-body').textContent.includes('beta cleaned');"
        ),
    )
    .await;
    let ran = api.messages(&child).await.into_iter().any(|m| {
        m["role"] == "tool"
            && m["content"]
                .as_str()
                .is_some_and(|c| c.contains("cleaned-by-the-child"))
    });
    assert!(ran, "the child ran its approved command");
    b.close().await;
}

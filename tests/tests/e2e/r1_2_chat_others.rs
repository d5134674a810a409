//! `turnkey chat` beside other clients of the same session (SPEC R1.2, issue 38): an input
//! sent from another door (the web UI, the API) is shown at once with its words, before its
//! answer; the terminal's own lines are not shown twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::r1_2_chat_cli::{blocking, chat, session_id, start, PROMPT};
use turnkey_tests::ScriptedProvider;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_2_an_input_another_client_sent_is_shown_with_its_words() {
    let provider = ScriptedProvider::start();
    let tk = start(&provider, "approval = \"off\"").await;
    let api = tk.api();
    let mut pty = chat(&tk, &[]);
    let session = blocking(|| {
        let id = session_id(&mut pty);
        pty.expect(PROMPT);
        id
    });
    api.submit_accepted(&session, "sent from the web page")
        .await;
    blocking(|| {
        pty.expect("[another client] sent from the web page");
        pty.expect("ok: sent from the web page");
        pty.expect(PROMPT);
        pty.send_line("and this from the terminal");
        pty.expect("ok: and this from the terminal");
        pty.expect(PROMPT);
    });
    let out = pty.output().to_owned();
    assert_eq!(out.matches("[another client]").count(), 1, "{out}");
    assert_eq!(
        out.matches("ok: sent from the web page").count(),
        1,
        "{out}"
    );
}

//! How `turnkey chat` shows things: events, the resumed transcript, approval questions. Pure
//! functions of what the API sent (and the clock, passed in), so they are tested without a
//! terminal. The only state is what the current answer already streamed and the tool names by
//! call id.
use super::api::{Message, PendingApproval};
use super::sse::ChatEvent;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::HashMap;

/// Longest rendering of tool arguments or a preview on one line.
const ONE_LINE: usize = 200;

/// A piece of output: `Inline` continues the current line (streamed answer text), `Line` is a
/// whole line of its own, begun on a fresh line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Out {
    Inline(String),
    Line(String),
}

#[derive(Debug, Default)]
pub struct Renderer {
    /// Text streamed by the current model call, to reconcile with `message.complete`.
    streamed: String,
    /// Tool names by call id, from `approval.requested` and `tool.started`.
    tools: HashMap<String, String>,
}

impl Renderer {
    pub fn event(&mut self, ev: &ChatEvent) -> Vec<Out> {
        let d = &ev.data;
        match ev.kind.as_str() {
            "message.delta" => {
                let text = str_of(d, "text");
                self.streamed.push_str(text);
                if text.is_empty() {
                    Vec::new()
                } else {
                    vec![Out::Inline(text.to_owned())]
                }
            }
            "message.complete" => self.complete(str_of(d, "text")),
            "turn.started" => {
                self.streamed.clear();
                Vec::new()
            }
            // A terminal cannot take back what it printed: the cut attempt's text stays,
            // marked as cut, and the resumed attempt's answer follows on a line of its own.
            "turn.resumed" => {
                let cut = !std::mem::take(&mut self.streamed).is_empty();
                vec![Out::Line(resumed_line(d, cut))]
            }
            "tool.started" | "tool.progress" | "tool.completed" | "approval.requested"
            | "approval.resolved" => self.tool_event(&ev.kind, d),
            "compression.completed" => vec![Out::Line(format!(
                "[context compressed: {} -> {} tokens, {} messages summarized]",
                d["before_tokens"], d["after_tokens"], d["compressed_messages"]
            ))],
            "admission.carried" => vec![Out::Line(format!(
                "[input joined the running turn ({})]",
                str_of(d, "result")
            ))],
            "turn.finished" => {
                self.streamed.clear();
                vec![Out::Line(finished_line(d))]
            }
            "turn.unknown" => {
                self.streamed.clear();
                unknown_lines(d).into_iter().map(Out::Line).collect()
            }
            "subagent.started" | "subagent.finished" | "process.started" | "process.exited" => {
                background_event(&ev.kind, d)
            }
            // admission.queued is the conversation's (it knows which inputs are its own);
            // status and kinds of later versions show nothing.
            _ => Vec::new(),
        }
    }

    /// A tool call's lines: started, progress, completed, and the approval it may wait for.
    fn tool_event(&mut self, kind: &str, d: &Value) -> Vec<Out> {
        match kind {
            "tool.started" => {
                // The text streamed so far belonged to the model call that asked for the tool.
                self.streamed.clear();
                let name = str_of(d, "name");
                self.tools
                    .insert(str_of(d, "call_id").to_owned(), name.to_owned());
                vec![Out::Line(format!(
                    "[tool] {name} {}",
                    compact(&d["args"], ONE_LINE)
                ))]
            }
            "tool.progress" => vec![Out::Line(format!(
                "[tool] {}: {}",
                self.tool_name(d),
                one_line(str_of(d, "message"), ONE_LINE)
            ))],
            "tool.completed" => {
                self.streamed.clear();
                let preview = one_line(str_of(d, "preview"), ONE_LINE);
                let took = seconds(d["duration_ms"].as_u64().unwrap_or(0));
                let mut line = format!(
                    "[tool] {} {} in {took}",
                    self.tool_name(d),
                    str_of(d, "status")
                );
                if !preview.is_empty() {
                    line.push_str(": ");
                    line.push_str(&preview);
                }
                vec![Out::Line(line)]
            }
            "approval.requested" => {
                self.streamed.clear();
                self.tools.insert(
                    str_of(d, "call_id").to_owned(),
                    str_of(d, "name").to_owned(),
                );
                Vec::new()
            }
            "approval.resolved" => vec![Out::Line(format!(
                "[approval] {}: {}",
                self.tool_name(d),
                match str_of(d, "decision") {
                    "approve" => "approved",
                    "deny" => "denied",
                    "timeout" => "no answer in time, denied",
                    other => other,
                }
            ))],
            _ => Vec::new(),
        }
    }

    /// Names the tool of an approval that came without an event (a resumed session's
    /// `pending_approvals`), for the lines about it that follow.
    pub fn know_approval(&mut self, a: &PendingApproval) {
        if let Some(name) = a.name.as_str() {
            self.tools.insert(a.call_id.clone(), name.to_owned());
        }
    }

    /// The authoritative answer: only what the stream did not already show is printed.
    fn complete(&mut self, text: &str) -> Vec<Out> {
        let shown = std::mem::take(&mut self.streamed);
        if text == shown {
            Vec::new()
        } else if let Some(rest) = text.strip_prefix(shown.as_str()) {
            vec![Out::Inline(rest.to_owned())]
        } else {
            // The final answer differs from what streamed (a recovered or repaired answer).
            vec![
                Out::Line("[final answer]".into()),
                Out::Inline(text.to_owned()),
            ]
        }
    }

    fn tool_name(&self, d: &Value) -> String {
        let named = str_of(d, "name");
        if !named.is_empty() {
            return named.to_owned();
        }
        self.tools
            .get(str_of(d, "call_id"))
            .cloned()
            .unwrap_or_else(|| format!("call {}", str_of(d, "call_id")))
    }
}

/// The line after every turn: how it ended, tokens and cost.
pub fn finished_line(d: &Value) -> String {
    let result = match str_of(d, "result") {
        "" => "finished",
        r => r,
    };
    let mut line = format!("[{result}");
    // An answer the output limit cut off, or the repeat guard stopped, says so.
    let stop = str_of(d, "stop_reason");
    if !stop.is_empty() && stop != "stop" {
        line.push_str(&format!(" ({stop})"));
    }
    // Why, once: a reason that is the result again (`interrupted`), or a message that only
    // repeats a word already said, adds nothing.
    let reason = Some(str_of(d, "failure_reason")).filter(|r| !r.is_empty() && *r != result);
    let message = Some(str_of(d, "failure_message"))
        .filter(|m| !m.is_empty() && !m.contains(result) && reason.is_none_or(|r| !m.contains(r)));
    match (reason, message) {
        (Some(r), Some(m)) => line.push_str(&format!(": {r} ({})", one_line(m, ONE_LINE))),
        (Some(r), None) => line.push_str(&format!(": {r}")),
        (None, Some(m)) => line.push_str(&format!(": {}", one_line(m, ONE_LINE))),
        (None, None) => {}
    }
    let u = &d["usage"];
    let count = |k: &str| u[k].as_u64().unwrap_or(0);
    line.push_str(&format!(
        " | tokens: {} in, {} out",
        count("input_tokens"),
        count("output_tokens")
    ));
    if count("cache_read_tokens") > 0 {
        line.push_str(&format!(", {} cached", count("cache_read_tokens")));
    }
    line.push_str(&format!(
        " | cost: {}]",
        cost(d["cost"].as_f64().unwrap_or(0.0))
    ));
    line
}

/// An input admitted from elsewhere (another client of the session, a schedule), so the
/// terminal shows the whole conversation: its words, and its files by name. `None` for a
/// report (its sub-agent or background line says it follows) and for an event of a server
/// that does not send the text.
pub fn queued_line(d: &Value) -> Option<String> {
    let text = d["text"].as_str()?;
    let from = match str_of(d, "source") {
        "user" | "" => "another client",
        "schedule" => "schedule",
        _ => return None,
    };
    let mut line = format!("[{from}]");
    if !text.is_empty() {
        line.push(' ');
        line.push_str(text);
    }
    let files: Vec<&str> = d["attachments"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| f["name"].as_str().unwrap_or("a file"))
        .collect();
    if !files.is_empty() {
        line.push_str(&format!(" [files: {}]", files.join(", ")));
    }
    Some(line)
}

/// A turn resumed by itself (SPEC R13.9): why, and that what streamed before was cut.
pub fn resumed_line(d: &Value, cut: bool) -> String {
    let after = match str_of(d, "reason") {
        "shutdown" => "the server restarted",
        _ => "the server stopped mid-turn",
    };
    let attempt = d["attempt"].as_i64().unwrap_or(2);
    if cut {
        format!(
            "[cut off: {after}; the turn resumes by itself (attempt {attempt}) and answers again]"
        )
    } else {
        format!("[{after}; the turn resumes by itself (attempt {attempt})]")
    }
}

/// A turn whose process died: what is known, and how to run it again.
pub fn unknown_lines(d: &Value) -> Vec<String> {
    let mut head = "[outcome unknown".to_owned();
    for key in ["reason", "failure_message"] {
        let part = str_of(d, key);
        if !part.is_empty() {
            head.push_str(": ");
            head.push_str(&one_line(part, ONE_LINE));
        }
    }
    head.push(']');
    vec![
        head,
        format!(
            "[the server stopped while this turn ran; it is not run again by itself: type /retry \
             to run it once more (POST /v1/admissions/{}/retry)]",
            str_of(d, "admission_id")
        ),
    ]
}

/// A sub-agent's or background process's start and end; what it reports follows as a turn.
fn background_event(kind: &str, d: &Value) -> Vec<Out> {
    match kind {
        "subagent.started" => vec![Out::Line(format!(
            "[sub-agent {}] started: {}",
            short_id(str_of(d, "task_id")),
            one_line(str_of(d, "goal"), ONE_LINE)
        ))],
        "subagent.finished" => vec![Out::Line(format!(
            "[sub-agent {}] {}: its report follows",
            short_id(str_of(d, "task_id")),
            str_of(d, "status")
        ))],
        "process.started" => vec![Out::Line(format!(
            "[background {}] started: {}",
            short_id(str_of(d, "process_id")),
            one_line(str_of(d, "command"), ONE_LINE)
        ))],
        "process.exited" => {
            let how = match (str_of(d, "status"), d["exit_code"].as_i64()) {
                ("exited", Some(code)) => format!("exited with code {code}"),
                ("killed", _) => "killed".to_owned(),
                _ => "ended; its outcome is unknown".to_owned(),
            };
            vec![Out::Line(format!(
                "[background {}] {how}: its report follows",
                short_id(str_of(d, "process_id"))
            ))]
        }
        _ => Vec::new(),
    }
}

/// `Approve terminal {"command":"ls"}? [y/n] (4 min 58 s left) `
pub fn approval_question(a: &PendingApproval, now: DateTime<Utc>) -> String {
    let name = a.name.as_str().unwrap_or("a tool");
    let left = a
        .expires_at
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|at| at.with_timezone(&Utc) - now)
        .map(|left| match left.num_seconds() {
            s if s <= 0 => "expired".to_owned(),
            s if s < 60 => format!("{s} s left"),
            s => format!("{} min {} s left", s / 60, s % 60),
        });
    let mut q = format!("Approve {name} {}? [y/n]", compact(&a.args, ONE_LINE));
    if let Some(left) = left {
        q.push_str(&format!(" ({left})"));
    }
    q.push(' ');
    q
}

/// Why the gateway asks, shown once before the first question about an approval.
pub fn approval_reason(a: &PendingApproval) -> Option<String> {
    a.reason
        .as_str()
        .filter(|r| !r.trim().is_empty())
        .map(|r| format!("[approval needed: {}]", one_line(r, ONE_LINE)))
}

/// The last `limit` rows of a transcript, one block per row.
pub fn transcript(messages: &[Message], limit: usize) -> Vec<String> {
    let skipped = messages.len().saturating_sub(limit);
    let mut lines = Vec::new();
    if skipped > 0 {
        lines.push(format!("[{skipped} earlier messages not shown]"));
    }
    for m in &messages[skipped..] {
        let content = m.content.as_deref().unwrap_or_default();
        let display = m.display.as_ref().unwrap_or(&Value::Null);
        match m.role.as_str() {
            "user" => lines.push(format!("you> {content}")),
            "tool" => lines.push(format!(
                "[tool result] {}: {}",
                m.name.as_deref().unwrap_or("tool"),
                one_line(content, ONE_LINE)
            )),
            "system" if display["kind"] == "compression_summary" => {
                // A summary made without a model (the summarizer failed) says so, and why.
                let how = display["fallback"]
                    .as_str()
                    .map(|why| format!(", made without a model ({why})"))
                    .unwrap_or_default();
                lines.push(format!(
                    "[summary of {} earlier messages{how}]",
                    display["replaced_messages"]
                ))
            }
            "system" => lines.push(format!("[system] {}", one_line(content, ONE_LINE))),
            _ => {
                if !content.is_empty() {
                    lines.push(content.to_owned());
                }
                for call in m
                    .tool_calls
                    .as_ref()
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let args = call["arguments"].as_str().unwrap_or_default();
                    lines.push(format!(
                        "[tool] {} {}",
                        str_of(call, "name"),
                        one_line(args, ONE_LINE)
                    ));
                }
                if display["boundary"] == true {
                    lines.push(format!(
                        "[{}: {}]",
                        str_of(display, "closed_as"),
                        str_of(display, "failure_reason")
                    ));
                }
            }
        }
    }
    lines
}

/// The first 8 characters of an id: enough to tell a session's tasks apart on screen.
fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_default()
}

/// JSON on one line, cut at `max` characters.
pub fn compact(v: &Value, max: usize) -> String {
    one_line(&v.to_string(), max)
}

/// Text on one line (newlines shown as spaces), cut at `max` characters with an ellipsis.
pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn seconds(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

fn cost(usd: f64) -> String {
    if usd == 0.0 {
        "$0".to_owned()
    } else if usd < 0.01 {
        format!("${usd:.6}")
    } else {
        format!("${usd:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(kind: &str, data: Value) -> ChatEvent {
        ChatEvent {
            seq: 1,
            kind: kind.into(),
            turn_id: Some("t".into()),
            admission_id: Some("a".into()),
            data,
        }
    }

    fn shown(r: &mut Renderer, events: &[ChatEvent]) -> Vec<Out> {
        events.iter().flat_map(|e| r.event(e)).collect()
    }

    #[test]
    fn r1_2_a_streamed_answer_is_not_printed_twice() {
        let mut r = Renderer::default();
        let out = shown(
            &mut r,
            &[
                ev("message.delta", json!({"text": "Hel"})),
                ev("message.delta", json!({"text": "lo"})),
                ev("message.complete", json!({"text": "Hello"})),
            ],
        );
        assert_eq!(
            out,
            vec![Out::Inline("Hel".into()), Out::Inline("lo".into())]
        );
    }

    #[test]
    fn r13_9_a_resumed_turn_marks_the_cut_text_and_answers_once_after_it() {
        let mut r = Renderer::default();
        let out = shown(
            &mut r,
            &[
                ev("turn.started", json!({})),
                ev("message.delta", json!({"text": "Once upon"})),
                ev(
                    "turn.resumed",
                    json!({"attempt": 2, "reason": "crash", "admission_id": "a"}),
                ),
                ev("turn.started", json!({"resumed": true})),
                ev("message.delta", json!({"text": "Once upon a time"})),
                ev("message.complete", json!({"text": "Once upon a time."})),
            ],
        );
        assert_eq!(
            out,
            vec![
                Out::Inline("Once upon".into()),
                Out::Line(
                    "[cut off: the server stopped mid-turn; the turn resumes by itself \
                     (attempt 2) and answers again]"
                        .into()
                ),
                Out::Inline("Once upon a time".into()),
                Out::Inline(".".into()),
            ]
        );
        // Nothing streamed before a hand-back at shutdown: nothing is said to be cut.
        let out = shown(
            &mut r,
            &[ev(
                "turn.resumed",
                json!({"attempt": 2, "reason": "shutdown"}),
            )],
        );
        assert_eq!(
            out,
            vec![Out::Line(
                "[the server restarted; the turn resumes by itself (attempt 2)]".into()
            )]
        );
    }

    #[test]
    fn r1_2_a_recovered_answer_shows_what_the_stream_missed() {
        let mut r = Renderer::default();
        let out = shown(
            &mut r,
            &[
                ev("message.delta", json!({"text": "Hel"})),
                ev("message.complete", json!({"text": "Hello world"})),
            ],
        );
        assert_eq!(out[1], Out::Inline("lo world".into()));
        let out = shown(
            &mut r,
            &[
                ev("message.delta", json!({"text": "draft"})),
                ev("message.complete", json!({"text": "final"})),
            ],
        );
        assert_eq!(
            out[1..],
            [
                Out::Line("[final answer]".into()),
                Out::Inline("final".into())
            ]
        );
    }

    #[test]
    fn r1_2_text_before_a_tool_round_is_not_compared_with_the_final_answer() {
        let mut r = Renderer::default();
        let out = shown(
            &mut r,
            &[
                ev("message.delta", json!({"text": "Let me look. "})),
                ev(
                    "tool.started",
                    json!({"call_id": "c1", "name": "terminal", "args": {"command": "ls"}}),
                ),
                ev(
                    "tool.progress",
                    json!({"call_id": "c1", "message": "still running"}),
                ),
                ev(
                    "tool.completed",
                    json!({"call_id": "c1", "name": "terminal", "status": "ok",
                           "preview": "a\nb", "duration_ms": 1500}),
                ),
                ev("message.delta", json!({"text": "Done."})),
                ev("message.complete", json!({"text": "Done."})),
            ],
        );
        assert_eq!(
            out,
            vec![
                Out::Inline("Let me look. ".into()),
                Out::Line(r#"[tool] terminal {"command":"ls"}"#.into()),
                Out::Line("[tool] terminal: still running".into()),
                Out::Line("[tool] terminal ok in 1.5 s: a b".into()),
                Out::Inline("Done.".into()),
            ]
        );
    }

    #[test]
    fn r1_5_sub_agents_and_background_processes_get_a_line_each() {
        let mut r = Renderer::default();
        let task = "01a24bba-d89b-768e-90e1-b77864cf08a9";
        let out = shown(
            &mut r,
            &[
                ev(
                    "subagent.started",
                    json!({"task_id": task, "child_session_id": "c", "goal": "count\nfiles"}),
                ),
                ev(
                    "subagent.finished",
                    json!({"task_id": task, "status": "completed"}),
                ),
                ev(
                    "process.started",
                    json!({"process_id": task, "command": "make test"}),
                ),
                ev(
                    "process.exited",
                    json!({"process_id": task, "status": "exited", "exit_code": 2}),
                ),
                ev(
                    "process.exited",
                    json!({"process_id": task, "status": "unknown", "exit_code": null}),
                ),
            ],
        );
        assert_eq!(
            out,
            vec![
                Out::Line("[sub-agent 01a24bba] started: count files".into()),
                Out::Line("[sub-agent 01a24bba] completed: its report follows".into()),
                Out::Line("[background 01a24bba] started: make test".into()),
                Out::Line("[background 01a24bba] exited with code 2: its report follows".into()),
                Out::Line(
                    "[background 01a24bba] ended; its outcome is unknown: its report follows"
                        .into()
                ),
            ]
        );
    }

    #[test]
    fn r1_2_the_turn_line_shows_result_usage_cost_and_failures() {
        let usage = json!({"input_tokens": 12, "output_tokens": 3, "cache_read_tokens": 0});
        assert_eq!(
            finished_line(&json!({"result": "completed", "usage": usage, "cost": 0.0})),
            "[completed | tokens: 12 in, 3 out | cost: $0]"
        );
        assert_eq!(
            finished_line(&json!({"result": "completed", "stop_reason": "truncated",
                "usage": usage, "cost": 0.0})),
            "[completed (truncated) | tokens: 12 in, 3 out | cost: $0]"
        );
        assert_eq!(
            finished_line(
                &json!({"result": "failed", "failure_reason": "provider_server_error",
                "failure_message": "HTTP 500", "usage": usage, "cost": 0.0123})
            ),
            "[failed: provider_server_error (HTTP 500) | tokens: 12 in, 3 out | cost: $0.0123]"
        );
        // An interrupt says so once (issue 38: "[interrupted: interrupted (interrupted …)").
        assert_eq!(
            finished_line(
                &json!({"result": "interrupted", "failure_reason": "interrupted",
                "failure_message": "interrupted: user_interrupt", "usage": usage, "cost": 0.0})
            ),
            "[interrupted | tokens: 12 in, 3 out | cost: $0]"
        );
        assert_eq!(
            finished_line(
                &json!({"result": "interrupted", "failure_reason": "shutdown",
                "usage": usage, "cost": 0.0})
            ),
            "[interrupted: shutdown | tokens: 12 in, 3 out | cost: $0]"
        );
        let unknown = unknown_lines(&json!({"admission_id": "A1", "reason": "owner_died",
            "failure_message": "the process stopped"}));
        assert_eq!(
            unknown[0],
            "[outcome unknown: owner_died: the process stopped]"
        );
        assert!(unknown[1].contains("/retry") && unknown[1].contains("/v1/admissions/A1/retry"));
    }

    #[test]
    fn r1_2_an_input_from_elsewhere_is_shown_with_its_words_and_files() {
        let file = json!({"file_id": "f1", "name": "notes.txt", "content_type": "text/plain"});
        assert_eq!(
            queued_line(&json!({"admission_id": "A", "text": "hello", "source": "user"}))
                .as_deref(),
            Some("[another client] hello")
        );
        assert_eq!(
            queued_line(&json!({"text": "", "attachments": [file], "source": "user"})).as_deref(),
            Some("[another client] [files: notes.txt]")
        );
        assert_eq!(
            queued_line(&json!({"text": "daily check", "source": "schedule"})).as_deref(),
            Some("[schedule] daily check")
        );
        for quiet in [
            json!({"text": "[report]", "source": "subagent"}),
            json!({"text": "[report]", "source": "process"}),
            json!({"admission_id": "A", "seq_in_queue": 1}),
        ] {
            assert_eq!(queued_line(&quiet), None, "{quiet}");
        }
    }

    #[test]
    fn r1_2_the_approval_question_names_the_call_and_the_time_left() {
        let now = Utc::now();
        let a = PendingApproval {
            approval_id: "p".into(),
            call_id: "c".into(),
            name: json!("terminal"),
            args: json!({"command": "rm -rf build"}),
            reason: Value::Null,
            expires_at: json!((now + chrono::Duration::seconds(298)).to_rfc3339()),
        };
        let q = approval_question(&a, now);
        assert!(
            q.starts_with(r#"Approve terminal {"command":"rm -rf build"}? [y/n] (4 min 5"#),
            "{q}"
        );
        let later = now + chrono::Duration::seconds(400);
        assert!(approval_question(&a, later).contains("(expired)"));
        assert_eq!(approval_reason(&a), None);
        let a = PendingApproval {
            reason: json!("terminal can run commands"),
            ..a
        };
        assert_eq!(
            approval_reason(&a).as_deref(),
            Some("[approval needed: terminal can run commands]")
        );
    }

    #[test]
    fn r1_2_the_transcript_shows_the_recent_rows() {
        let row = |role: &str, content: &str| Message {
            role: role.into(),
            content: Some(content.into()),
            tool_calls: None,
            name: None,
            display: None,
        };
        let mut rows: Vec<Message> = (0..5).map(|i| row("user", &format!("q{i}"))).collect();
        rows.push(Message {
            tool_calls: Some(
                json!([{"id": "c1", "name": "read_file", "arguments": "{\"path\":\"a\"}"}]),
            ),
            ..row("assistant", "")
        });
        rows.push(Message {
            name: Some("read_file".into()),
            ..row("tool", "line one\nline two")
        });
        rows.push(Message {
            display: Some(json!({"boundary": true, "closed_as": "interrupted",
                                 "failure_reason": "interrupted"})),
            ..row("assistant", "partial")
        });
        assert_eq!(
            transcript(&rows, 4),
            vec![
                "[4 earlier messages not shown]",
                "you> q4",
                r#"[tool] read_file {"path":"a"}"#,
                "[tool result] read_file: line one line two",
                "partial",
                "[interrupted: interrupted]",
            ]
        );
    }

    #[test]
    fn r1_2_long_text_is_cut_on_one_line() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }
}

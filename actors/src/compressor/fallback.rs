//! The summary written without a model (SPEC R6.3, R6.5; issue 21): when the summarizer fails,
//! times out, answers nothing or answers something that saves too little, or cools down after
//! doing so, the middle is still replaced, by a deterministic digest of the replaced rows: the
//! user's requests in brief, the tool calls made and how each ended, and the counts. Its first
//! line says it was made without a model and why, so the model and a reader of the history
//! know what they are looking at. Also the cut of a model summary to the budget it was given.
use std::collections::HashMap;
use turnkey_providers::ToolCall;
use turnkey_storage::{Message, MessageRole};

/// The fallback summary never exceeds this many bytes (about 2,000 tokens).
pub const MAX_CHARS: usize = 8_000;
/// A user request is shown within this many bytes.
const REQUEST_BYTES: usize = 200;
/// A tool call's arguments are shown within this many bytes.
const ARGS_BYTES: usize = 120;
/// An earlier summary folded into this one keeps at most this share of the budget.
const EARLIER_SHARE: usize = 4;

/// Why the model's summary was not used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// An earlier failure put the summarizer on cooldown: it was not asked.
    CoolingDown {
        remaining_s: u64,
    },
    Timeout {
        timeout_s: u64,
    },
    Failed(String),
    Empty,
    /// Its summary left more than nine tenths of the request's tokens.
    Useless,
}

impl Reason {
    /// Stable code for the event and the log.
    pub fn code(&self) -> &'static str {
        match self {
            Self::CoolingDown { .. } => "summarizer_cooling_down",
            Self::Timeout { .. } => "summary_timeout",
            Self::Failed(_) => "summary_failed",
            Self::Empty => "summary_empty",
            Self::Useless => "summary_useless",
        }
    }

    /// True when the summarizer itself just failed (so it cools down).
    pub fn is_failure(&self) -> bool {
        !matches!(self, Self::CoolingDown { .. })
    }

    fn describe(&self) -> String {
        match self {
            Self::CoolingDown { remaining_s } => format!(
                "the summarizer failed earlier and is cooling down for {remaining_s} s more"
            ),
            Self::Timeout { timeout_s } => {
                format!("the summarizer did not answer within {timeout_s} s")
            }
            Self::Failed(e) => format!("the summarizer failed: {}", cut(e.trim(), 300)),
            Self::Empty => "the summarizer returned no text".to_owned(),
            Self::Useless => "the summarizer's answer saved too little of the context".to_owned(),
        }
    }
}

/// The stored summary made without a model for `rows` (the middle being replaced), within
/// `max_chars` bytes (never more than [`MAX_CHARS`]).
pub fn summary(rows: &[&Message], epoch: i32, reason: &Reason, max_chars: usize) -> String {
    let max_chars = max_chars.min(MAX_CHARS);
    let fresh: Vec<&Message> = rows
        .iter()
        .copied()
        .filter(|m| m.summary_epoch.is_none())
        .collect();
    let count = |role: MessageRole| fresh.iter().filter(|m| m.role == role).count();
    let calls = tool_calls(&fresh);
    let errors = calls.iter().filter(|c| c.outcome != "ok").count();
    let mut out = format!(
        "[Automatic summary of {replaced} earlier messages (compression {epoch}), made without a \
         model because {why}. The full history is kept by the gateway; this lists what those \
         messages asked and did.]\n\
         Replaced: {replaced} messages ({users} from the user, {assistants} from the assistant, \
         {results} tool results); {n_calls} tool calls ({ok} ok, {errors} not ok).",
        replaced = fresh.len(),
        why = reason.describe(),
        users = count(MessageRole::User),
        assistants = count(MessageRole::Assistant),
        results = count(MessageRole::Tool),
        n_calls = calls.len(),
        ok = calls.len() - errors,
    );
    if let Some(earlier) = rows.iter().find(|m| m.summary_epoch.is_some()) {
        let text = earlier
            .api_content
            .as_deref()
            .or(earlier.content.as_deref())
            .unwrap_or_default();
        out.push_str("\nAn earlier summary was among them:\n");
        out.push_str(&cut(text.trim(), max_chars / EARLIER_SHARE));
    }
    let requests: Vec<String> = fresh
        .iter()
        .filter(|m| m.role == MessageRole::User)
        .map(|m| {
            format!(
                "- {}",
                one_line(m.content.as_deref().unwrap_or_default(), REQUEST_BYTES)
            )
        })
        .collect();
    let call_lines: Vec<String> = calls
        .iter()
        .map(|c| format!("- {} {} → {}", c.name, c.args, c.outcome))
        .collect();
    // What is left is shared: user requests first (the goal), then the tool calls.
    let left = max_chars.saturating_sub(out.len());
    let request_part = section("The user's requests:", &requests, left / 2);
    let call_part = section(
        "Tool calls and how they ended:",
        &call_lines,
        left.saturating_sub(request_part.len()),
    );
    out.push_str(&request_part);
    out.push_str(&call_part);
    cut_to_budget(&out, max_chars)
}

/// `text` within `max_bytes`, cut on a char boundary (a model that ignores `max_tokens`).
pub fn cut_to_budget(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

struct CallLine {
    name: String,
    args: String,
    outcome: &'static str,
}

/// Every tool call of the rows, in order, with the outcome its result row shows: an error
/// result is the JSON object `{"error": …}` (`tool_exec::error_json`, the tail closure).
fn tool_calls(rows: &[&Message]) -> Vec<CallLine> {
    let results: HashMap<&str, &Message> = rows
        .iter()
        .filter(|m| m.role == MessageRole::Tool)
        .filter_map(|m| m.tool_call_id.as_deref().map(|id| (id, *m)))
        .collect();
    rows.iter()
        .filter(|m| m.role == MessageRole::Assistant)
        .flat_map(|m| {
            m.tool_calls
                .as_ref()
                .and_then(|v| serde_json::from_value::<Vec<ToolCall>>(v.clone()).ok())
                .unwrap_or_default()
        })
        .map(|c| {
            let outcome = match results.get(c.id.as_str()) {
                None => "no result in this part",
                Some(r) if is_error(r.content.as_deref().unwrap_or_default()) => "error",
                Some(_) => "ok",
            };
            CallLine {
                name: c.name,
                args: one_line(&c.arguments, ARGS_BYTES),
                outcome,
            }
        })
        .collect()
}

fn is_error(content: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(content)
        .ok()
        .and_then(|v| v.as_object().map(|o| o.contains_key("error")))
        .unwrap_or(false)
}

/// A titled list within `limit` bytes: its first and last lines, with a note of how many were
/// left out between them; empty when there is nothing to list or no room.
fn section(title: &str, lines: &[String], limit: usize) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let head = format!("\n{title}");
    let note_room = 48;
    if limit < head.len() + note_room {
        return String::new();
    }
    let room = limit - head.len() - note_room;
    let (mut front, mut back) = (Vec::new(), Vec::new());
    let (mut i, mut j, mut used) = (0usize, lines.len(), 0usize);
    // Alternate from both ends so the first request (the goal) and the latest both survive.
    while i < j {
        let take_front = front.len() <= back.len();
        let line = if take_front { &lines[i] } else { &lines[j - 1] };
        if used + line.len() + 1 > room {
            break;
        }
        used += line.len() + 1;
        if take_front {
            front.push(line.as_str());
            i += 1;
        } else {
            back.push(line.as_str());
            j -= 1;
        }
    }
    back.reverse();
    let mut out = head;
    for l in front {
        out.push('\n');
        out.push_str(l);
    }
    if j > i {
        out.push_str(&format!("\n- [… {} more left out here …]", j - i));
    }
    for l in back {
        out.push('\n');
        out.push_str(l);
    }
    out
}

/// `text` on one line within `max` bytes, cut on a char boundary with a mark.
fn one_line(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    cut(&flat, max)
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!(
        "{}…",
        cut_to_budget(text, max.saturating_sub('…'.len_utf8()))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use turnkey_storage::{MessageId, SessionId};

    fn row(idx: i64, role: MessageRole, content: &str) -> Message {
        Message {
            id: MessageId::new(),
            session_id: SessionId::new(),
            idx,
            role,
            content: Some(content.to_owned()),
            api_content: None,
            tool_calls: None,
            tool_call_id: None,
            name: None,
            turn_id: None,
            admission_id: None,
            display: None,
            token_estimate: 10,
            created_at: 0,
            compressed_epoch: None,
            summary_epoch: None,
            summary_after_idx: None,
            attachments: None,
        }
    }

    fn call(idx: i64, id: &str, name: &str, args: &str) -> Message {
        let mut m = row(idx, MessageRole::Assistant, "");
        m.tool_calls = Some(json!([{"id": id, "name": name, "arguments": args}]));
        m
    }

    fn result(idx: i64, id: &str, content: &str) -> Message {
        let mut m = row(idx, MessageRole::Tool, content);
        m.tool_call_id = Some(id.to_owned());
        m
    }

    #[test]
    fn r6_3_fallback_summary_lists_requests_calls_and_counts() {
        let rows = [
            row(4, MessageRole::User, "please water\n the   tomatoes"),
            call(5, "c1", "read_file", r#"{"path":"plan.txt"}"#),
            result(6, "c1", "water at dawn"),
            call(7, "c2", "terminal", r#"{"command":"ls /nope"}"#),
            result(8, "c2", r#"{"error":"no such directory"}"#),
            row(9, MessageRole::Assistant, "done"),
            row(10, MessageRole::User, "and prune the roses"),
        ];
        let refs: Vec<&Message> = rows.iter().collect();
        let s = summary(&refs, 2, &Reason::Timeout { timeout_s: 5 }, MAX_CHARS);
        let first = s.lines().next().unwrap();
        assert!(first.starts_with("[Automatic summary of 7 earlier messages (compression 2), made without a model because the summarizer did not answer within 5 s."), "{first}");
        assert!(s.contains("7 messages (2 from the user, 3 from the assistant, 2 tool results); 2 tool calls (1 ok, 1 not ok)"), "{s}");
        assert!(
            s.contains("- please water the tomatoes\n- and prune the roses"),
            "{s}"
        );
        assert!(s.contains(r#"- read_file {"path":"plan.txt"} → ok"#), "{s}");
        assert!(
            s.contains(r#"- terminal {"command":"ls /nope"} → error"#),
            "{s}"
        );
    }

    #[test]
    fn r6_3_fallback_summary_is_bounded_and_keeps_both_ends() {
        let long = "é".repeat(5_000);
        let mut rows = Vec::new();
        for i in 0..2_000 {
            rows.push(row(
                i * 2,
                MessageRole::User,
                &format!("request {i:04} {long}"),
            ));
            rows.push(call(i * 2 + 1, &format!("c{i}"), "read_file", &long));
        }
        let mut earlier = row(0, MessageRole::System, &"x".repeat(50_000));
        earlier.summary_epoch = Some(1);
        let mut refs: Vec<&Message> = vec![&earlier];
        refs.extend(rows.iter());
        for max in [MAX_CHARS, 3_000, 1_000, 100_000] {
            let s = summary(&refs, 2, &Reason::Failed("500 é".repeat(400)), max);
            assert!(s.len() <= max.min(MAX_CHARS), "{} > {max}", s.len());
            assert!(s.starts_with("[Automatic summary of 4000 earlier messages"));
        }
        let s = summary(&refs, 2, &Reason::Empty, MAX_CHARS);
        assert!(s.contains("An earlier summary was among them"));
        assert!(
            s.contains("- request 0000 "),
            "the first request (the goal) stays"
        );
        assert!(s.contains("- request 1999 "), "the latest request stays");
        assert!(s.contains("more left out here"));
        assert!(s.contains("no result in this part"));
    }

    #[test]
    fn r6_3_a_summary_over_its_budget_is_cut_on_a_char_boundary() {
        assert_eq!(cut_to_budget("short", 10), "short");
        // "a" is one byte, "é" two: byte 2 is inside the first "é", byte 5 inside the second.
        let s = "aé".repeat(100);
        assert_eq!(cut_to_budget(&s, 2), "a");
        assert_eq!(cut_to_budget(&s, 3), "aé");
        assert_eq!(cut_to_budget(&s, 5), "aéa");
        assert_eq!(cut_to_budget(&s, 1_000), s);
    }

    #[test]
    fn r6_5_reasons_have_stable_codes() {
        assert_eq!(
            Reason::CoolingDown { remaining_s: 3 }.code(),
            "summarizer_cooling_down"
        );
        assert!(!Reason::CoolingDown { remaining_s: 3 }.is_failure());
        assert_eq!(Reason::Timeout { timeout_s: 1 }.code(), "summary_timeout");
        assert_eq!(Reason::Failed("x".into()).code(), "summary_failed");
        assert_eq!(Reason::Empty.code(), "summary_empty");
        assert_eq!(Reason::Useless.code(), "summary_useless");
        assert!(Reason::Useless.is_failure());
    }
}

//! The summary request (SPEC R6.3, R6.4): a bounded rendering of the rows being replaced, old
//! tool results cut first, an earlier summary folded in and updated, and instructions to keep
//! the task goal, the rules from context files and the recent state.
use turnkey_providers::{ChatMessage, ToolCall};
use turnkey_storage::{Message, MessageRole};

/// Tag at the start of the summary request's user message (tests and logs recognise it).
pub const SUMMARY_TAG: &str = "[turnkey:compress]";
/// A tool result is cut to this many bytes before anything else is (deterministic pruning).
const TOOL_RESULT_BYTES: usize = 600;
/// Any other row is cut to this many bytes.
const ROW_BYTES: usize = 2_000;

/// Prefix of the stored summary row: what the model (and a reader of the history) sees.
pub fn summary_text(replaced: usize, epoch: i32, summary: &str) -> String {
    format!(
        "[Summary of {replaced} earlier messages (compression {epoch}); the full history is kept \
         by the gateway, this is what it said:]\n{}",
        summary.trim()
    )
}

/// The two messages of the summary call for `rows` (the middle being replaced), within
/// `input_bytes` of rendered conversation and asking for at most `max_words` words.
pub fn request_messages(rows: &[&Message], input_bytes: usize, max_words: u32) -> Vec<ChatMessage> {
    let earlier = rows.iter().any(|m| m.summary_epoch.is_some());
    let rendered: Vec<String> = rows.iter().map(|m| render(m)).collect();
    let body = bounded(&rendered, input_bytes);
    let system = format!(
        "You write the working memory of an AI agent. Summarize the conversation you are given \
         so the agent can continue it without the original messages. Keep: the user's goal and \
         every request still open; rules, constraints and preferences the user or the context \
         files stated; decisions made and why; facts learned from tools (file names, paths, \
         values, errors, commands and their outcome); what was done and what is left to do. \
         Never invent anything; say so when something is unknown. Write plain sentences and \
         short lists, at most {max_words} words."
    );
    let fold = if earlier {
        " It begins with the summary of an even earlier part: fold that summary in and update it; \
         drop nothing from it that is still true."
    } else {
        ""
    };
    let user = format!(
        "{SUMMARY_TAG} Summarize this conversation.{fold}\n\n<conversation>\n{body}\n</conversation>"
    );
    vec![ChatMessage::system(system), ChatMessage::user(user)]
}

fn render(m: &Message) -> String {
    let text = m
        .api_content
        .as_deref()
        .or(m.content.as_deref())
        .unwrap_or_default();
    if m.summary_epoch.is_some() {
        return format!("[earlier summary]\n{}", cut(text, ROW_BYTES * 4));
    }
    match m.role {
        MessageRole::Tool => format!(
            "[tool result{}] {}",
            m.name
                .as_deref()
                .map(|n| format!(" of {n}"))
                .unwrap_or_default(),
            cut(text, TOOL_RESULT_BYTES)
        ),
        MessageRole::Assistant => {
            let calls: Vec<ToolCall> = m
                .tool_calls
                .as_ref()
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default();
            let mut out = format!("[assistant] {}", cut(text, ROW_BYTES));
            for c in calls {
                out.push_str(&format!(
                    "\n[assistant calls {}] {}",
                    c.name,
                    cut(&c.arguments, TOOL_RESULT_BYTES)
                ));
            }
            out
        }
        MessageRole::User => format!("[user] {}", cut(text, ROW_BYTES)),
        MessageRole::System => format!("[note] {}", cut(text, ROW_BYTES)),
    }
}

/// Keeps the first and last rows within `limit` bytes, dropping from the middle with a note.
fn bounded(rendered: &[String], limit: usize) -> String {
    let total: usize = rendered.iter().map(|r| r.len() + 1).sum();
    if total <= limit {
        return rendered.join("\n");
    }
    let mut front = Vec::new();
    let mut back = Vec::new();
    let mut used = 0usize;
    let (mut i, mut j) = (0usize, rendered.len());
    // Alternate from both ends so both the oldest goal and the latest state survive.
    while i < j {
        let take_front = front.len() <= back.len();
        let candidate = if take_front {
            &rendered[i]
        } else {
            &rendered[j - 1]
        };
        if used + candidate.len() + 1 > limit {
            break;
        }
        used += candidate.len() + 1;
        if take_front {
            front.push(candidate.clone());
            i += 1;
        } else {
            back.push(candidate.clone());
            j -= 1;
        }
    }
    let omitted = j - i;
    back.reverse();
    let mut out = front;
    if omitted > 0 {
        out.push(format!(
            "[… {omitted} messages omitted here to fit the summary request …]"
        ));
    }
    out.extend(back);
    out.join("\n")
}

/// `text` within `max` bytes: its head and tail with a note of what was cut, on char bounds.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let head_len = max * 2 / 3;
    let tail_len = max - head_len;
    let mut h = head_len;
    while !text.is_char_boundary(h) {
        h -= 1;
    }
    let mut t = text.len() - tail_len;
    while !text.is_char_boundary(t) {
        t += 1;
    }
    format!("{} [… {} bytes cut …] {}", &text[..h], t - h, &text[t..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_head_and_tail_on_char_bounds() {
        assert_eq!(cut("short", 10), "short");
        let s = "é".repeat(100);
        let c = cut(&s, 31);
        assert!(c.contains("bytes cut"));
        assert!(c.starts_with('é') && c.ends_with('é'));
    }

    #[test]
    fn bounded_keeps_both_ends() {
        let rows: Vec<String> = (0..100)
            .map(|i| format!("row {i:03} {}", "x".repeat(90)))
            .collect();
        let out = bounded(&rows, 2_000);
        assert!(out.len() <= 2_100, "{}", out.len());
        assert!(out.starts_with("row 000"));
        assert!(out.ends_with(&rows[99]));
        assert!(out.contains("messages omitted"));
    }
}

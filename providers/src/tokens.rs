//! Cheap token estimates for preflight pressure (SPEC R6.1). Deliberately a little
//! pessimistic; the provider's reported usage is the real count.
use crate::wire::ChatMessage;

/// Tokens every message costs beyond its text: role, separators (OpenAI's own rule of thumb).
const PER_MESSAGE_OVERHEAD: u64 = 4;
/// Tokens a tool call costs beyond its name and arguments: id, type, JSON framing.
const PER_TOOL_CALL_OVERHEAD: u64 = 8;
/// Tokens that prime the assistant's reply.
const REPLY_PRIMING: u64 = 3;

/// About four bytes of UTF-8 a token, rounded up.
///
/// Bytes rather than characters: for English the two agree, while for scripts that need
/// several bytes a character (CJK, Cyrillic) tokenizers also spend more tokens a character,
/// so counting bytes keeps the estimate from running low where characters would.
pub fn estimate_tokens(text: &str) -> u64 {
    u64::try_from(text.len()).unwrap_or(u64::MAX).div_ceil(4)
}

/// The whole prompt: each message's text, tool calls and ids, plus fixed framing.
pub fn estimate_messages(msgs: &[ChatMessage]) -> u64 {
    let body: u64 = msgs.iter().map(estimate_message).sum();
    if msgs.is_empty() {
        0
    } else {
        body.saturating_add(REPLY_PRIMING)
    }
}

fn estimate_message(m: &ChatMessage) -> u64 {
    let text = |s: &Option<String>| s.as_deref().map(estimate_tokens).unwrap_or(0);
    let calls: u64 = m
        .tool_calls
        .iter()
        .map(|c| {
            PER_TOOL_CALL_OVERHEAD
                + estimate_tokens(&c.id)
                + estimate_tokens(&c.name)
                + estimate_tokens(&c.arguments)
        })
        .sum();
    PER_MESSAGE_OVERHEAD + text(&m.content) + text(&m.tool_call_id) + text(&m.name) + calls
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ToolCall;

    #[test]
    fn text_estimate_is_four_bytes_a_token_rounded_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens(&"word ".repeat(700)), 875);
        // Three CJK characters are nine bytes: counted as three tokens, not one.
        assert_eq!(estimate_tokens("漢字漢"), 3);
    }

    #[test]
    fn message_estimate_adds_framing_and_tool_calls() {
        assert_eq!(estimate_messages(&[]), 0);
        let m = vec![ChatMessage::user("abcd")];
        assert_eq!(estimate_messages(&m), 4 + 1 + 3);
        let with_call = ChatMessage {
            tool_calls: vec![ToolCall {
                id: "call".into(),
                name: "read".into(),
                arguments: "{\"p\":1}".into(),
            }],
            ..ChatMessage::assistant("")
        };
        let plain = estimate_messages(&[ChatMessage::assistant("")]);
        assert_eq!(estimate_messages(&[with_call]), plain + 8 + 1 + 1 + 2);
        let result = estimate_messages(&[ChatMessage::tool_result("call", "abcd")]);
        assert_eq!(result, 4 + 1 + 1 + 3);
    }
}

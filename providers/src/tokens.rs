//! Token estimates for preflight pressure (SPEC R6.1): real BPE counts (tiktoken) for
//! OpenAI-family models, else a cheap, deliberately pessimistic byte count. The provider's
//! reported usage is the real count either way.
use crate::wire::ChatMessage;
use tiktoken_rs::CoreBPE;

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
    count_messages(msgs, &estimate_tokens)
}

/// Tokens of `text` for `model`: the model's own BPE when it is an OpenAI-family model (see
/// [`bpe_for_model`]), else [`estimate_tokens`].
pub fn estimate_tokens_for_model(model: &str, text: &str) -> u64 {
    match bpe_for_model(model) {
        Some(bpe) => bpe_count(bpe, text),
        None => estimate_tokens(text),
    }
}

/// [`estimate_messages`] with each text counted by [`estimate_tokens_for_model`]; the framing
/// per message, per tool call and for the reply is the same.
pub fn estimate_messages_for_model(model: &str, msgs: &[ChatMessage]) -> u64 {
    match bpe_for_model(model) {
        Some(bpe) => count_messages(msgs, &|text| bpe_count(bpe, text)),
        None => estimate_messages(msgs),
    }
}

/// The tokenizer of an OpenAI-family model, by name prefix (an `openai/` style routing prefix
/// is ignored). The BPE tables load once per process, on first use (tiktoken-rs singletons).
fn bpe_for_model(model: &str) -> Option<&'static CoreBPE> {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    let is = |prefixes: &[&str]| prefixes.iter().any(|p| name.starts_with(p));
    // gpt-4o and gpt-4.1 before gpt-4: they share its prefix but not its tokenizer.
    if is(&["gpt-4o", "gpt-4.1", "gpt-5", "o1", "o3", "o4", "chatgpt"]) {
        Some(tiktoken_rs::o200k_base_singleton())
    } else if is(&["gpt-4", "gpt-3.5"]) {
        Some(tiktoken_rs::cl100k_base_singleton())
    } else {
        None
    }
}

/// Special-token spellings in a transcript are text the model reads as text, so they are
/// counted as ordinary text.
fn bpe_count(bpe: &CoreBPE, text: &str) -> u64 {
    u64::try_from(bpe.count_ordinary(text)).unwrap_or(u64::MAX)
}

fn count_messages(msgs: &[ChatMessage], count: &dyn Fn(&str) -> u64) -> u64 {
    let body = msgs
        .iter()
        .map(|m| count_message(m, count))
        .fold(0u64, u64::saturating_add);
    if msgs.is_empty() {
        0
    } else {
        body.saturating_add(REPLY_PRIMING)
    }
}

fn count_message(m: &ChatMessage, count: &dyn Fn(&str) -> u64) -> u64 {
    let text = |s: &Option<String>| s.as_deref().map(count).unwrap_or(0);
    let calls: u64 = m
        .tool_calls
        .iter()
        .map(|c| PER_TOOL_CALL_OVERHEAD + count(&c.id) + count(&c.name) + count(&c.arguments))
        .sum();
    let images = IMAGE_TOKENS * m.images.len() as u64;
    PER_MESSAGE_OVERHEAD + text(&m.content) + text(&m.tool_call_id) + text(&m.name) + calls + images
}

/// What one image part is counted as: providers charge by its size (OpenAI up to ~1,100
/// tokens at high detail for a 1024 px image, Anthropic width × height / 750, ~1,600 at most
/// after their downscale); a bound, not a measurement.
pub const IMAGE_TOKENS: u64 = 1_600;

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
            images: Vec::new(),
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

    #[test]
    fn openai_family_models_are_counted_with_their_bpe() {
        // OpenAI cookbook ("How to count tokens with tiktoken"): six tokens in both encodings,
        // [83, 8251, 2488, 382, 2212, 0] in o200k_base, [83, 1609, 5963, 374, 2294, 0] in cl100k_base.
        let text = "tiktoken is great!";
        assert_eq!(
            tiktoken_rs::o200k_base_singleton().encode_ordinary(text),
            [83, 8251, 2488, 382, 2212, 0]
        );
        assert_eq!(
            tiktoken_rs::cl100k_base_singleton().encode_ordinary(text),
            [83, 1609, 5963, 374, 2294, 0]
        );
        assert_eq!(estimate_tokens_for_model("gpt-4o-mini", text), 6);
        assert_eq!(estimate_tokens_for_model("gpt-4-turbo", text), 6);
        assert_eq!(
            estimate_tokens(text),
            5,
            "the byte estimate differs, so the BPE was used"
        );
        // The encodings split code differently; each family gets its own.
        let code = "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n";
        let o200k = tiktoken_rs::o200k_base_singleton().count_ordinary(code);
        let cl100k = tiktoken_rs::cl100k_base_singleton().count_ordinary(code);
        for model in [
            "gpt-4o",
            "gpt-4.1",
            "gpt-5-mini",
            "o1-preview",
            "o3",
            "o4-mini",
            "chatgpt-4o-latest",
            "openai/gpt-4o",
            "GPT-4o",
        ] {
            assert_eq!(
                estimate_tokens_for_model(model, code),
                o200k as u64,
                "{model}"
            );
        }
        for model in ["gpt-4", "gpt-4-0613", "gpt-3.5-turbo"] {
            assert_eq!(
                estimate_tokens_for_model(model, code),
                cl100k as u64,
                "{model}"
            );
        }
    }

    #[test]
    fn other_models_fall_back_to_the_byte_estimate() {
        let text = "Hello, world! The quick brown fox jumps over the lazy dog.";
        for model in ["claude-sonnet-4-5", "smollm2", "llama-3.1-8b", ""] {
            assert_eq!(
                estimate_tokens_for_model(model, text),
                estimate_tokens(text),
                "{model}"
            );
        }
        let msgs = vec![ChatMessage::system("be brief"), ChatMessage::user(text)];
        assert_eq!(
            estimate_messages_for_model("claude-3-5-haiku", &msgs),
            estimate_messages(&msgs)
        );
        assert_eq!(
            estimate_messages_for_model("smollm2", &msgs),
            estimate_messages(&msgs)
        );
    }

    #[test]
    fn model_message_count_adds_the_same_framing() {
        assert_eq!(estimate_messages_for_model("gpt-4o", &[]), 0);
        let msgs = vec![ChatMessage::user("Hello, world!")];
        let text = estimate_tokens_for_model("gpt-4o", "Hello, world!");
        assert_eq!(estimate_messages_for_model("gpt-4o", &msgs), 4 + text + 3);
        let with_call = ChatMessage {
            images: Vec::new(),
            tool_calls: vec![ToolCall {
                id: "call".into(),
                name: "read".into(),
                arguments: "{\"p\":1}".into(),
            }],
            ..ChatMessage::assistant("")
        };
        let plain = estimate_messages_for_model("gpt-4o", &[ChatMessage::assistant("")]);
        let call = ["call", "read", "{\"p\":1}"]
            .iter()
            .map(|t| estimate_tokens_for_model("gpt-4o", t))
            .sum::<u64>();
        assert_eq!(
            estimate_messages_for_model("gpt-4o", &[with_call]),
            plain + 8 + call
        );
    }
}

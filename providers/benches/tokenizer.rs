//! Prints how many messages a second `estimate_messages_for_model` counts: tiktoken (o200k_base,
//! for gpt-4o) against the bytes/4 fallback, over 1,000 fixed messages of prose, code and tool
//! results. A figure printer, not a timed test: `cargo bench -p turnkey-providers --bench tokenizer`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a bench may fail loudly
use std::hint::black_box;
use std::time::{Duration, Instant};
use turnkey_providers::{estimate_messages, estimate_messages_for_model, ChatMessage, ToolCall};

const MESSAGES: usize = 1_000;
/// Each measurement repeats whole passes over the set until at least this long has passed.
const MEASURE_FOR: Duration = Duration::from_secs(3);
/// And stops after this many passes whatever the time (the fallback is very fast).
const MAX_PASSES: u32 = 10_000;

const PROSE: &str = "The gateway keeps every input durably before it answers, so a crash between \
the admission and the model call loses nothing: on restart the session lease is fenced, the \
unfinished turn is marked unknown, and a person decides whether to retry it. Compression only \
changes what the model sees, never the history itself; a summary replaces the middle of the \
conversation while the first and last messages stay as they were. ";

const CODE: &str = r##"pub fn estimate_tokens(text: &str) -> u64 {
    u64::try_from(text.len()).unwrap_or(u64::MAX).div_ceil(4)
}

#[tokio::test]
async fn streams_text_deltas_then_usage_then_done() {
    let (r, deltas, raw) = call(sse(&[r#"{"choices":[{"delta":{"content":"Hello"}}]}"#]), request(true), 30).await;
    assert_eq!(deltas, ["Hello"]);
    for (i, line) in raw.lines().enumerate().filter(|(_, l)| l.contains("POST")) {
        println!("{i:>4}: {line}");
    }
}
"##;

const TOOL_RESULT: &str = r#"{"path":"src/store/sessions.rs","lines":[
  "  41 | impl SessionStore {",
  "  42 |     pub async fn claim(&self, id: SessionId, gen: LeaseGeneration) -> Result<Claim, StoreError> {",
  "  43 |         let row = session::Entity::find_by_id(id.0).one(&self.db).await?;",
  "  44 |         match row { Some(r) if r.lease_generation == gen.0 => Ok(Claim::Held), _ => Ok(Claim::Lost) }",
  "  45 |     }"],
 "total_lines": 312, "truncated": false, "sha256": "9f2c0e4b7a1d3c5e8f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2"}
"#;

/// 1,000 messages in the shape of an agent session: user prose, assistant prose with tool
/// calls, tool results of file text and JSON, some code, lengths varying by position.
fn corpus() -> Vec<ChatMessage> {
    let mut msgs = vec![ChatMessage::system(PROSE.repeat(3))];
    for i in 1..MESSAGES {
        let reps = 1 + i % 4;
        let m = match i % 5 {
            0 => ChatMessage::user(format!("Step {i}: {}", PROSE.repeat(reps))),
            1 => ChatMessage {
                images: Vec::new(),
                tool_calls: vec![ToolCall {
                    id: format!("call_{i:06}"),
                    name: "read_file".into(),
                    arguments: format!(r#"{{"path":"src/module_{i}.rs","offset":{}}}"#, i * 40),
                }],
                ..ChatMessage::assistant(format!("Reading module {i} to check the lease path."))
            },
            2 => ChatMessage::tool_result(format!("call_{:06}", i - 1), TOOL_RESULT.repeat(reps)),
            3 => ChatMessage::assistant(format!(
                "Here is the change ({i}):\n```rust\n{}```",
                CODE.repeat(reps)
            )),
            _ => ChatMessage::tool_result(
                format!("call_{i:06}"),
                format!("exit 0\n{}", CODE.repeat(reps)),
            ),
        };
        msgs.push(m);
    }
    msgs
}

/// One way of counting a whole prompt.
type Counter = Box<dyn Fn(&[ChatMessage]) -> u64>;

/// Messages a second, over whole passes of `msgs`, and the count one pass returns.
fn measure(msgs: &[ChatMessage], count: impl Fn(&[ChatMessage]) -> u64) -> (f64, u64) {
    let tokens = count(msgs); // warm-up (and the BPE load, for tiktoken)
    let started = Instant::now();
    let mut passes = 0u32;
    while started.elapsed() < MEASURE_FOR && passes < MAX_PASSES {
        black_box(count(black_box(msgs)));
        passes += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    (f64::from(passes) * msgs.len() as f64 / secs, tokens)
}

fn main() {
    let msgs = corpus();
    let bytes: usize = msgs
        .iter()
        .filter_map(|m| m.content.as_deref())
        .map(str::len)
        .sum();
    println!(
        "corpus: {} messages, {:.1} KiB of text ({} bytes a message on average)",
        msgs.len(),
        bytes as f64 / 1024.0,
        bytes / msgs.len()
    );

    let load = Instant::now();
    let first = estimate_messages_for_model("gpt-4o", &msgs[..1]);
    println!(
        "o200k_base first use (BPE load + 1 message): {:.1} ms ({first} tokens)",
        load.elapsed().as_secs_f64() * 1e3
    );

    let cases: [(&str, Counter); 4] = [
        (
            "gpt-4o (tiktoken o200k_base)",
            Box::new(|m| estimate_messages_for_model("gpt-4o", m)),
        ),
        (
            "gpt-4 (tiktoken cl100k_base)",
            Box::new(|m| estimate_messages_for_model("gpt-4", m)),
        ),
        (
            "claude-sonnet-4-5 (bytes/4 fallback)",
            Box::new(|m| estimate_messages_for_model("claude-sonnet-4-5", m)),
        ),
        (
            "estimate_messages (bytes/4, no model)",
            Box::new(estimate_messages),
        ),
    ];
    for (label, count) in cases {
        let (rate, tokens) = measure(&msgs, count);
        println!(
            "{label:<40} {rate:>14.0} messages/s  {:>10.3} ms per 1,000-message prompt  {tokens:>8} tokens",
            1e3 * msgs.len() as f64 / rate
        );
    }
}

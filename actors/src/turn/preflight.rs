//! The preflight gate before every model call (SPEC R6.1, R6.5): measure request pressure
//! against the window. Compression itself is deepened by a later issue; until then a request
//! that provably cannot fit fails closed instead of being sent to fail.
use crate::config::CompressionConfig;
use turnkey_providers::{estimate_messages, ChatMessage};

/// Windows below this size get the raised 0.75 threshold (raise-only floor, SPEC R6.2).
const LARGE_WINDOW: u32 = 512_000;

#[derive(Debug, PartialEq)]
pub enum Gate {
    /// Send the request.
    Proceed { pressure_tokens: u64 },
    /// Over the compression threshold: compress before sending (when a compressor is
    /// available); the request may still fit, so it proceeds otherwise.
    ShouldCompress { pressure_tokens: u64 },
    /// It cannot fit, or the provider already proved it does not: do not send.
    FailClosed { pressure_tokens: u64, window: u32 },
}

/// The threshold actually used for a window: the configured one, raised to 0.75 for windows
/// under 512K tokens.
pub fn effective_threshold(config: &CompressionConfig, window: u32) -> f64 {
    if window < LARGE_WINDOW {
        config.threshold.max(0.75)
    } else {
        config.threshold
    }
}

pub fn gate(
    config: &CompressionConfig,
    messages: &[ChatMessage],
    window: u32,
    overflow_proven: bool,
) -> Gate {
    let pressure_tokens = estimate_messages(messages);
    if overflow_proven || pressure_tokens > u64::from(window) {
        return Gate::FailClosed {
            pressure_tokens,
            window,
        };
    }
    let eligible = config.enabled && messages.len() > 1;
    let limit = effective_threshold(config, window) * f64::from(window);
    if eligible && pressure_tokens as f64 > limit {
        Gate::ShouldCompress { pressure_tokens }
    } else {
        Gate::Proceed { pressure_tokens }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r6_2_threshold_is_raised_for_small_windows_only() {
        let c = CompressionConfig::default();
        assert_eq!(effective_threshold(&c, 128_000), 0.75);
        assert_eq!(effective_threshold(&c, 1_000_000), 0.50);
    }

    #[test]
    fn r6_5_proven_overflow_fails_closed() {
        let c = CompressionConfig::default();
        let m = vec![ChatMessage::user("hi".to_string())];
        assert!(matches!(
            gate(&c, &m, 128_000, true),
            Gate::FailClosed { .. }
        ));
    }

    #[test]
    fn r6_1_small_request_proceeds_and_big_one_wants_compression() {
        let c = CompressionConfig::default();
        let small = vec![
            ChatMessage::system("s".to_string()),
            ChatMessage::user("hi".to_string()),
        ];
        assert!(matches!(
            gate(&c, &small, 1000, false),
            Gate::Proceed { .. }
        ));
        let big = vec![
            ChatMessage::system("s".to_string()),
            ChatMessage::user("word ".repeat(700)),
        ];
        assert!(matches!(
            gate(&c, &big, 1000, false),
            Gate::ShouldCompress { .. }
        ));
        let huge = vec![ChatMessage::user("word ".repeat(2000))];
        assert!(matches!(
            gate(&c, &huge, 1000, false),
            Gate::FailClosed { .. }
        ));
    }
}

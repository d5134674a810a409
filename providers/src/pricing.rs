//! A small price table (USD per million tokens) for the usage ledger's cost column
//! (SPEC R10.4), which `[pricing]` in the configuration overrides per model. Unknown models
//! cost 0.0: a cost is never invented.
use crate::wire::Usage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "PriceEntry")]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
}

/// A `[pricing]` entry as written: `cache_read` may be left out, and then costs as much as
/// plain input (no discount is assumed).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceEntry {
    input: f64,
    output: f64,
    cache_read: Option<f64>,
}

impl From<PriceEntry> for Price {
    fn from(e: PriceEntry) -> Self {
        Self {
            input: e.input,
            output: e.output,
            cache_read: e.cache_read.unwrap_or(e.input),
        }
    }
}

impl Price {
    /// The name of the first field that is negative or not a number.
    pub fn invalid_field(&self) -> Option<&'static str> {
        [
            ("input", self.input),
            ("output", self.output),
            ("cache_read", self.cache_read),
        ]
        .into_iter()
        .find(|(_, v)| !v.is_finite() || *v < 0.0)
        .map(|(k, _)| k)
    }
}

/// The built-in table with the configuration's overrides, matched together by the longest
/// prefix; an override wins over a table entry of the same length (the same name).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pricing {
    overrides: Vec<(String, Price)>,
}

impl Pricing {
    pub fn new(overrides: &BTreeMap<String, Price>) -> Self {
        Self {
            overrides: overrides
                .iter()
                .map(|(m, p)| (m.to_ascii_lowercase(), *p))
                .collect(),
        }
    }

    pub fn price(&self, model: &str) -> Option<Price> {
        // Overrides come last, so that among equal lengths `max_by_key` keeps one of them.
        let table = TABLE.iter().map(|(m, p)| (*m, p));
        let overrides = self.overrides.iter().map(|(m, p)| (m.as_str(), p));
        longest_prefix(table.chain(overrides), model)
    }

    /// What `usage` cost on `model`, in USD; 0.0 when no price is known.
    pub fn cost_usd(&self, model: &str, usage: &Usage) -> f64 {
        self.price(model).map_or(0.0, |p| cost_at(&p, usage))
    }
}

fn longest_prefix<'a>(
    table: impl Iterator<Item = (&'a str, &'a Price)>,
    model: &str,
) -> Option<Price> {
    let bare = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    table
        .filter(|(prefix, _)| bare.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, price)| *price)
}

/// Writing to Anthropic's (5-minute) prompt cache costs this much more than plain input.
/// OpenAI caches for free and reports no writes, so this only ever applies to Anthropic.
const CACHE_WRITE_PREMIUM: f64 = 1.25;

const fn p(input: f64, output: f64, cache_read: f64) -> Price {
    Price {
        input,
        output,
        cache_read,
    }
}

/// Matched by prefix, longest first wins, so "gpt-4o-mini" is not priced as "gpt-4o" and
/// dated snapshots ("gpt-4o-2024-08-06") find their family.
const TABLE: &[(&str, Price)] = &[
    ("gpt-5-nano", p(0.05, 0.40, 0.005)),
    ("gpt-5-mini", p(0.25, 2.00, 0.025)),
    ("gpt-5", p(1.25, 10.00, 0.125)),
    ("gpt-4.1-nano", p(0.10, 0.40, 0.025)),
    ("gpt-4.1-mini", p(0.40, 1.60, 0.10)),
    ("gpt-4.1", p(2.00, 8.00, 0.50)),
    ("gpt-4o-mini", p(0.15, 0.60, 0.075)),
    ("gpt-4o", p(2.50, 10.00, 1.25)),
    ("o4-mini", p(1.10, 4.40, 0.275)),
    ("o3-mini", p(1.10, 4.40, 0.55)),
    ("o3", p(2.00, 8.00, 0.50)),
    ("claude-opus-4-5", p(5.00, 25.00, 0.50)),
    ("claude-opus-4", p(15.00, 75.00, 1.50)),
    ("claude-sonnet-4", p(3.00, 15.00, 0.30)),
    ("claude-3-7-sonnet", p(3.00, 15.00, 0.30)),
    ("claude-3-5-sonnet", p(3.00, 15.00, 0.30)),
    ("claude-haiku-4-5", p(1.00, 5.00, 0.10)),
    ("claude-3-5-haiku", p(0.80, 4.00, 0.08)),
];

/// The price of `model`, ignoring a router prefix such as `openai/` or `anthropic/`.
pub fn price_per_mtok(model: &str) -> Option<Price> {
    longest_prefix(TABLE.iter().map(|(m, p)| (*m, p)), model)
}

/// What `usage` cost on `model`, in USD; 0.0 when the model is not in the table.
///
/// Follows `Usage`'s convention that `input_tokens` includes cached tokens: cache reads and
/// writes are taken out of the plain input and charged at their own rates.
pub fn cost_usd(model: &str, usage: &Usage) -> f64 {
    price_per_mtok(model).map_or(0.0, |p| cost_at(&p, usage))
}

fn cost_at(price: &Price, usage: &Usage) -> f64 {
    let tokens = |n: u64| n as f64;
    let plain = usage
        .input_tokens
        .saturating_sub(usage.cache_read_tokens)
        .saturating_sub(usage.cache_write_tokens);
    let micro = tokens(plain) * price.input
        + tokens(usage.cache_read_tokens) * price.cache_read
        + tokens(usage.cache_write_tokens) * price.input * CACHE_WRITE_PREMIUM
        + tokens(usage.output_tokens) * price.output;
    micro / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    fn input(n: u64) -> Usage {
        Usage {
            input_tokens: n,
            ..Usage::default()
        }
    }

    #[test]
    fn the_longest_prefix_wins() {
        assert_eq!(
            price_per_mtok("gpt-4o-mini-2024-07-18").map(|p| p.input),
            Some(0.15)
        );
        assert_eq!(
            price_per_mtok("gpt-4o-2024-08-06").map(|p| p.input),
            Some(2.50)
        );
        assert_eq!(price_per_mtok("gpt-5-mini").map(|p| p.input), Some(0.25));
        assert_eq!(
            price_per_mtok("claude-opus-4-1-20250805").map(|p| p.input),
            Some(15.0)
        );
        assert_eq!(
            price_per_mtok("claude-opus-4-5").map(|p| p.input),
            Some(5.0)
        );
        assert_eq!(price_per_mtok("openai/GPT-4o").map(|p| p.input), Some(2.50));
        assert_eq!(price_per_mtok("llama-3-70b"), None);
    }

    #[test]
    fn cost_charges_input_output_and_cache_at_their_rates() {
        assert!(close(cost_usd("gpt-4o", &input(1_000_000)), 2.50));
        assert_eq!(cost_usd("unknown-model", &input(1_000_000)), 0.0);
        let cached = Usage {
            input_tokens: 1_000_000,
            cache_read_tokens: 1_000_000,
            ..Usage::default()
        };
        assert!(close(cost_usd("gpt-4o", &cached), 1.25));
        let mixed = Usage {
            input_tokens: 2_000_000,
            output_tokens: 1_000_000,
            cache_read_tokens: 500_000,
            cache_write_tokens: 500_000,
        };
        // 1M plain * 3 + 0.5M read * 0.30 + 0.5M write * 3.75 + 1M out * 15
        let expected = 3.0 + 0.15 + 1.875 + 15.0;
        assert!(close(cost_usd("claude-sonnet-4-5", &mixed), expected));
    }

    #[test]
    fn r10_4_overrides_win_over_the_table_and_price_unknown_models() {
        let overrides: BTreeMap<String, Price> = serde_json::from_value(serde_json::json!({
            "gpt-4o": {"input": 1.0, "output": 2.0, "cache_read": 0.5},
            "My-Local-Model": {"input": 0.2, "output": 0.4},
        }))
        .unwrap();
        let pricing = Pricing::new(&overrides);
        assert!(close(
            pricing.cost_usd("gpt-4o-2024-08-06", &input(1_000_000)),
            1.0
        ));
        // Not overridden: the table still applies, longest prefix first.
        assert!(close(
            pricing.cost_usd("gpt-4o-mini", &input(1_000_000)),
            0.15
        ));
        // cache_read left out costs as much as input.
        let local = pricing.price("openai/my-local-model-q4").unwrap();
        assert_eq!(local.cache_read, 0.2);
        assert_eq!(
            Pricing::default().cost_usd("my-local-model", &input(1)),
            0.0
        );
        let bad: Result<BTreeMap<String, Price>, _> = serde_json::from_value(
            serde_json::json!({"m": {"input": 1.0, "output": 1.0, "cached": 1.0}}),
        );
        assert!(bad.is_err(), "unknown fields are refused");
        let negative = Price {
            input: -1.0,
            output: 0.0,
            cache_read: 0.0,
        };
        assert_eq!(negative.invalid_field(), Some("input"));
    }
}

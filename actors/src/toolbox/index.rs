//! What the model is offered (SPEC R5.2, R8.1; issue 38): every enabled tool stays usable, but
//! only the `tools.always_on` ones come with their full schema in every request; the others
//! (when there are two or more) are listed, a line each, in one `tools` tool. The model calls `tools` with a `name` to read
//! that tool's description and parameters, then with `name` and `arguments` to run it. The
//! offer is fixed at start-up, so a session's prompt prefix (system prompt and tool list) is
//! the same on every call and the provider's prompt cache holds.
//!
//! A call of `tools` with `name` and `arguments` is the named tool's call: the response is
//! normalized to it before the tool round persists anything (`resolve`), so approvals, tool
//! runs, events and the transcript all see the real tool. On the wire the call goes back as
//! the model made it (`wrap`), naming only offered tools.
use async_trait::async_trait;
use serde_json::{json, Value};
use turnkey_providers::{ToolCall, ToolSchema};
use turnkey_tools::{Tool, ToolContext, ToolOutput};

/// The name of the tool that lists and describes the others.
pub const INDEX_TOOL: &str = "tools";
/// Longest line a listed tool gets in the index.
const SUMMARY_CHARS: usize = 90;

/// The tools offered to the model: the always-on ones with their schemas, and the rest behind
/// [`INDEX_TOOL`].
#[derive(Clone, Debug, Default)]
pub struct ToolOffer {
    always_on: Vec<ToolSchema>,
    deferred: Vec<ToolSchema>,
    /// What a session that withholds nothing is offered.
    offered: Vec<ToolSchema>,
}

impl ToolOffer {
    /// `schemas` of every registered tool; those `always_on` names are offered directly, and
    /// so is a single other tool (an index of one would save nothing and cost a call).
    pub fn new(schemas: Vec<ToolSchema>, always_on: &[String]) -> Self {
        let (mut always_on, mut deferred): (Vec<_>, Vec<_>) = schemas
            .into_iter()
            .partition(|s| always_on.contains(&s.name));
        if deferred.len() == 1 {
            always_on.append(&mut deferred);
        }
        let mut offer = Self {
            always_on,
            deferred,
            offered: Vec::new(),
        };
        offer.offered = offer.schemas_without(&[]);
        offer
    }

    /// The schemas a session that withholds nothing is offered.
    pub fn schemas(&self) -> &[ToolSchema] {
        &self.offered
    }

    /// The schemas offered to a session that is not given the tools named `withheld` (a
    /// sub-agent's, SPEC R1.5).
    pub fn schemas_without(&self, withheld: &[&str]) -> Vec<ToolSchema> {
        let kept = |s: &&ToolSchema| !withheld.contains(&s.name.as_str());
        let mut out: Vec<ToolSchema> = self.always_on.iter().filter(kept).cloned().collect();
        let listed: Vec<&ToolSchema> = self.deferred.iter().filter(kept).collect();
        if !listed.is_empty() {
            out.push(index_schema(&listed));
        }
        out
    }

    /// The tools listed behind [`INDEX_TOOL`], with their full schemas.
    pub fn deferred(&self) -> &[ToolSchema] {
        &self.deferred
    }

    /// `call` as the tool it runs: a call of [`INDEX_TOOL`] with the `name` of an offered
    /// tool and `arguments` (an object, or a string holding one) becomes that tool's call,
    /// with the same id. Any other call is left as it is.
    pub fn resolve(&self, call: ToolCall) -> ToolCall {
        if call.name != INDEX_TOOL || self.deferred.is_empty() {
            return call;
        }
        let Ok(Value::Object(args)) = serde_json::from_str::<Value>(&call.arguments) else {
            return call;
        };
        let Some(name) = args.get("name").and_then(Value::as_str) else {
            return call;
        };
        let known = self
            .deferred
            .iter()
            .chain(&self.always_on)
            .any(|s| s.name == name);
        let inner = match args.get("arguments") {
            Some(v @ Value::Object(_)) => v.to_string(),
            Some(Value::String(s)) if matches!(serde_json::from_str(s), Ok(Value::Object(_))) => {
                s.clone()
            }
            _ => return call,
        };
        if !known {
            return call;
        }
        ToolCall {
            id: call.id,
            name: name.to_owned(),
            arguments: inner,
        }
    }

    /// `call` as the wire shows it: a call of a listed tool goes back as the [`INDEX_TOOL`]
    /// call the model made, so that a request names only tools it offers.
    pub fn wrap(&self, call: &ToolCall) -> Option<ToolCall> {
        if !self.deferred.iter().any(|s| s.name == call.name) {
            return None;
        }
        let arguments = serde_json::from_str::<Value>(&call.arguments)
            .unwrap_or_else(|_| Value::String(call.arguments.clone()));
        Some(ToolCall {
            id: call.id.clone(),
            name: INDEX_TOOL.to_owned(),
            arguments: json!({"name": call.name, "arguments": arguments}).to_string(),
        })
    }
}

/// The schema of [`INDEX_TOOL`] for `listed`: a line each, and their names as the choices.
fn index_schema(listed: &[&ToolSchema]) -> ToolSchema {
    let lines: Vec<String> = listed
        .iter()
        .map(|s| format!("{}: {}", s.name, summary(&s.description)))
        .collect();
    let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
    ToolSchema {
        name: INDEX_TOOL.to_owned(),
        description: format!(
            "More tools: call with name for its parameters, then with name and arguments to \
             run it. {}",
            lines.join("; ")
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": names},
                "arguments": {"type": "object"}
            },
            "required": ["name"]
        }),
    }
}

/// The first clause of `description` (up to a full stop, colon, semicolon or parenthesis), at
/// most [`SUMMARY_CHARS`] characters.
fn summary(description: &str) -> String {
    let end = [". ", ": ", "; ", " ("]
        .iter()
        .filter_map(|p| description.find(p))
        .min()
        .unwrap_or(description.len());
    let first = description[..end].trim_end_matches('.');
    if first.chars().count() <= SUMMARY_CHARS {
        return first.to_owned();
    }
    let cut: String = first.chars().take(SUMMARY_CHARS).collect();
    let at_word = cut.rfind(' ').map_or(cut.as_str(), |i| &cut[..i]);
    format!("{at_word}…")
}

/// The [`INDEX_TOOL`] tool itself: describes a listed tool. Running one goes through
/// [`ToolOffer::resolve`]; a call that reaches this tool with `arguments` did not resolve.
pub struct IndexTool {
    offer: ToolOffer,
    schema: ToolSchema,
}

impl IndexTool {
    pub fn new(offer: &ToolOffer) -> Self {
        let listed: Vec<&ToolSchema> = offer.deferred.iter().collect();
        Self {
            offer: offer.clone(),
            schema: index_schema(&listed),
        }
    }
}

#[async_trait]
impl Tool for IndexTool {
    fn name(&self) -> &str {
        INDEX_TOOL
    }

    fn description(&self) -> &str {
        &self.schema.description
    }

    fn parameters(&self) -> Value {
        self.schema.parameters.clone()
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> ToolOutput {
        let name = args.get("name").and_then(Value::as_str).unwrap_or_default();
        let offered = self.offer.deferred.iter().chain(&self.offer.always_on);
        let Some(s) = offered.clone().find(|s| s.name == name) else {
            let names: Vec<&str> = self
                .offer
                .deferred
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            return ToolOutput::error(format!(
                "no listed tool {name:?}; the tools listed are: {}",
                names.join(", ")
            ));
        };
        if args.get("arguments").is_some() {
            return ToolOutput::error(format!(
                "arguments must be a JSON object of {name}'s parameters: {}",
                s.parameters
            ));
        }
        ToolOutput::ok(
            json!({
                "name": s.name,
                "description": s.description,
                "parameters": s.parameters,
                "to_run": format!("call {INDEX_TOOL} with name \"{name}\" and arguments"),
            })
            .to_string(),
        )
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;

//! Per-turn display behaviour (SPEC R3.1): whether a turn streams its text (`message.delta`),
//! which tool events it shows (`tool.started`, `tool.progress`), and whether a platform draft
//! keeps the text written before a tool round. It decides what a turn publishes to clients and
//! what a chat's draft shows, never what is stored: the transcript, the tool runs, the outcome
//! and `tool.completed` are the same whatever the display says.
//!
//! Four layers, the first that sets a key wins: the input's own `display`, the session's
//! (`PATCH /v1/sessions/{id}`, kept on the lineage root), the session's platform table
//! (`[platforms.<p>] tool_progress`, `interim`), then `[agent] streaming`, `tool_progress`,
//! `interim`. A platform's `stream` is not a layer: it says whether its chats get drafts at
//! all, and a turn shown without streaming gets none. A leaf: it knows JSON and the layers it is given
//! (`RuntimeConfig::display` hands it the configured ones), nothing else.
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Which tool events a turn shows. `tool.completed` is always shown: it carries the outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolProgress {
    /// Every `tool.started` and `tool.progress`.
    #[default]
    All,
    /// `tool.started` only for a call of another tool than the turn's call before it; no
    /// `tool.progress`.
    New,
    /// Neither.
    Off,
}

impl ToolProgress {
    pub const NAMES: &'static str = "all, new or off";

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "all" => Some(Self::All),
            "new" => Some(Self::New),
            "off" => Some(Self::Off),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::New => "new",
            Self::Off => "off",
        }
    }

    /// Whether the call of `tool` shows `tool.started`, `previous` being the tool of the
    /// turn's call before it (in call order), if any.
    pub fn shows_start(self, tool: &str, previous: Option<&str>) -> bool {
        match self {
            Self::All => true,
            Self::New => previous != Some(tool),
            Self::Off => false,
        }
    }

    pub fn shows_progress(self) -> bool {
        self == Self::All
    }
}

/// How one turn is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Display {
    /// `message.delta` events while the model writes (and a platform draft).
    pub stream: bool,
    pub tool_progress: ToolProgress,
    /// A platform draft keeps the text the model wrote before a tool round; `false` drops it
    /// there, so the draft shows only the text after the last tool round.
    pub interim: bool,
}

/// The keys one layer sets; an absent key leaves it to the next layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DisplayLayer {
    pub stream: Option<bool>,
    pub tool_progress: Option<ToolProgress>,
    pub interim: Option<bool>,
}

/// The keys a `display` object may set to change how a turn is shown.
pub const KEYS: [&str; 3] = ["stream", "tool_progress", "interim"];

impl DisplayLayer {
    /// The display keys of `display` (an input's or a session's); other keys (a platform
    /// input's `message_id`, say) are not this module's. A key of the wrong type is an error
    /// that says what it takes.
    pub fn parse(display: &Value) -> Result<Self, String> {
        let Some(d) = display.as_object() else {
            return Err("display must be an object".into());
        };
        Self::parse_map(d)
    }

    fn parse_map(d: &Map<String, Value>) -> Result<Self, String> {
        let flag = |key: &str| match d.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(format!("display.{key} must be true or false; got {other}")),
        };
        let tool_progress = match d.get("tool_progress") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if ToolProgress::parse(s).is_some() => ToolProgress::parse(s),
            Some(other) => {
                return Err(format!(
                    "display.tool_progress must be {}; got {other}",
                    ToolProgress::NAMES
                ))
            }
        };
        Ok(Self {
            stream: flag("stream")?,
            tool_progress,
            interim: flag("interim")?,
        })
    }

    /// A session's `display` as `PATCH` takes it: only the display keys, each of the right
    /// type. Answers the object to store (`null` keys dropped), or `None` when it sets nothing.
    pub fn for_session(display: &Value) -> Result<Option<Value>, String> {
        let Some(d) = display.as_object() else {
            return Err("display must be an object or null".into());
        };
        if let Some(k) = d.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!(
                "display.{k} is not a display setting; a session's display takes {}",
                KEYS.join(", ")
            ));
        }
        let layer = Self::parse_map(d)?;
        Ok((layer != Self::default()).then(|| layer.to_json()))
    }

    fn to_json(self) -> Value {
        let mut m = Map::new();
        if let Some(s) = self.stream {
            m.insert("stream".into(), Value::Bool(s));
        }
        if let Some(t) = self.tool_progress {
            m.insert("tool_progress".into(), Value::String(t.as_str().into()));
        }
        if let Some(i) = self.interim {
            m.insert("interim".into(), Value::Bool(i));
        }
        Value::Object(m)
    }

    /// This layer over `below`: each key it sets wins.
    fn over(self, below: Display) -> Display {
        Display {
            stream: self.stream.unwrap_or(below.stream),
            tool_progress: self.tool_progress.unwrap_or(below.tool_progress),
            interim: self.interim.unwrap_or(below.interim),
        }
    }

    /// The layer of a stored `display` (already checked when it was stored): a malformed one
    /// sets nothing rather than failing a turn.
    fn stored(display: Option<&Value>) -> Self {
        display
            .and_then(|d| Self::parse(d).ok())
            .unwrap_or_default()
    }
}

/// How a turn is shown: the input's `display` over the session's, over the session's platform
/// table, over the global defaults.
pub fn resolve(
    global: Display,
    table: DisplayLayer,
    session: Option<&Value>,
    input: Option<&Value>,
) -> Display {
    let session = DisplayLayer::stored(session);
    let input = DisplayLayer::stored(input);
    input.over(session.over(table.over(global)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn r3_1_the_first_layer_that_sets_a_key_wins() {
        let global = Display {
            stream: true,
            tool_progress: ToolProgress::All,
            interim: true,
        };
        assert_eq!(resolve(global, DisplayLayer::default(), None, None), global);
        let table = DisplayLayer {
            stream: Some(true),
            tool_progress: Some(ToolProgress::New),
            interim: None,
        };
        let session = json!({"tool_progress": "off", "interim": false});
        let input = json!({"message_id": 7, "interim": true});
        assert_eq!(
            resolve(global, table, Some(&session), Some(&input)),
            Display {
                stream: true,
                tool_progress: ToolProgress::Off,
                interim: true
            }
        );
        // A layer without a key leaves it to the next one down.
        let quiet = DisplayLayer {
            stream: Some(false),
            ..DisplayLayer::default()
        };
        let d = resolve(global, quiet, Some(&session), None);
        assert_eq!(
            d,
            Display {
                stream: false,
                tool_progress: ToolProgress::Off,
                interim: false
            }
        );
        // A malformed stored value sets nothing rather than failing the turn.
        let bad = json!({"stream": "no"});
        assert!(!resolve(global, quiet, None, Some(&bad)).stream);
    }

    #[test]
    fn r3_1_display_keys_of_the_wrong_type_are_refused_with_what_they_take() {
        let e = DisplayLayer::parse(&json!({"stream": "yes"})).expect_err("string");
        assert!(e.contains("display.stream must be true or false"), "{e}");
        let e = DisplayLayer::parse(&json!({"tool_progress": "some"})).expect_err("value");
        assert!(e.contains("all, new or off"), "{e}");
        assert!(DisplayLayer::parse(&json!([])).is_err());
        // Other keys belong to others (a platform input's message id).
        assert_eq!(
            DisplayLayer::parse(&json!({"message_id": 1})).expect("other keys"),
            DisplayLayer::default()
        );
        let e = DisplayLayer::for_session(&json!({"message_id": 1})).expect_err("session");
        assert!(e.contains("not a display setting"), "{e}");
        assert_eq!(
            DisplayLayer::for_session(&json!({"stream": false, "interim": null})).expect("ok"),
            Some(json!({"stream": false}))
        );
        assert_eq!(DisplayLayer::for_session(&json!({})).expect("empty"), None);
    }

    #[test]
    fn r3_1_new_shows_a_start_only_when_the_tool_changes() {
        let p = ToolProgress::New;
        assert!(p.shows_start("terminal", None));
        assert!(!p.shows_start("terminal", Some("terminal")));
        assert!(p.shows_start("read_file", Some("terminal")));
        assert!(!p.shows_progress());
        assert!(ToolProgress::All.shows_start("terminal", Some("terminal")));
        assert!(!ToolProgress::Off.shows_start("terminal", None));
    }
}

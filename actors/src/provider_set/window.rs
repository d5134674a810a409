//! A provider's context window as its server says it (issue 38): a local server runs a model
//! with a context it chose (llama.cpp `--ctx-size`, Ollama `num_ctx`), often far below the
//! 128,000 a `[[providers]]` table assumes, and a turn sized for 128,000 then overflows on
//! every call. Asked, in order, of the server's root (`base_url` without its `/v1`):
//! - llama.cpp `GET /props`: `default_generation_settings.n_ctx`, the context one request gets
//!   (older builds put `n_ctx` at the top);
//! - `GET {base_url}/models`, the entry of the model: vLLM's `max_model_len`, llama.cpp's
//!   `meta.n_ctx`;
//! - LM Studio `GET /api/v0/models/{model}`: `loaded_context_length` when loaded, else
//!   `max_context_length`;
//! - Ollama `GET /api/ps`: `context_length` of the model when it is loaded (what Ollama
//!   allocated), else `POST /api/show`: `num_ctx` of its parameters, else
//!   `model_info["<arch>.context_length"]` (what the model was trained for).
//!
//! The first answer that names a plausible number wins. Only OpenAI-compatible providers are
//! asked; an Anthropic one keeps its configured window. An explicit `context_window` always
//! wins over what is read here.
use serde_json::Value;
use std::time::Duration;
use turnkey_providers::{ProviderConfig, ProviderKind};

/// How long one question to the server may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// How long all the questions together may take: a server that swallows requests cannot hold
/// a start or a connection longer than this.
pub const READ_TIMEOUT: Duration = Duration::from_secs(6);
/// Below this a number is not a context window (a misread field).
const SMALLEST: u64 = 256;
/// Above this neither.
const LARGEST: u64 = 10_000_000;

/// A window the server said, and where it said it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerWindow {
    pub tokens: u32,
    /// The request that said it, e.g. `llama.cpp GET /props`.
    pub from: &'static str,
}

/// Where a provider's context window comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowSource {
    /// `context_window` in its `[[providers]]` table or in the request that connected it.
    Configured,
    /// Read from its server.
    Server(&'static str),
    /// None set, and none read (a configured provider's server is not asked): the default,
    /// 128,000.
    Default,
}

impl WindowSource {
    /// Its name in answers: `configured`, `server` or `default`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Configured => "configured",
            Self::Server(_) => "server",
            Self::Default => "default",
        }
    }

    /// The request a server's window was read with.
    pub fn read_from(self) -> Option<&'static str> {
        match self {
            Self::Server(from) => Some(from),
            _ => None,
        }
    }
}

/// What the server of `p` says its context window for `p.model` is, if it says.
pub async fn read(p: &ProviderConfig) -> Option<ServerWindow> {
    if p.kind != ProviderKind::Openai {
        return None;
    }
    match tokio::time::timeout(READ_TIMEOUT, ask_all(p)).await {
        Ok(found) => found,
        Err(_) => {
            tracing::info!(provider = %p.name, "the server did not say its context window in time");
            None
        }
    }
}

async fn ask_all(p: &ProviderConfig) -> Option<ServerWindow> {
    let http = reqwest::Client::builder()
        .timeout(ASK_TIMEOUT)
        .build()
        .ok()?;
    let ask = Ask {
        http,
        key: p.resolved_api_key().map(|k| k.expose().to_owned()),
    };
    let base = p.base_url.trim_end_matches('/');
    let root = base.strip_suffix("/v1").unwrap_or(base);
    let model = p.model.as_str();
    if let Some(t) = ask
        .get(&format!("{root}/props"))
        .await
        .and_then(|v| from_props(&v))
    {
        return Some(found(t, "llama.cpp GET /props"));
    }
    if let Some(v) = ask.get(&format!("{base}/models")).await {
        if let Some(w) = from_model_list(&v, model) {
            return Some(w);
        }
    }
    let lmstudio = format!("{root}/api/v0/models/{}", urlencode(model));
    if let Some(t) = ask.get(&lmstudio).await.and_then(|v| from_lmstudio(&v)) {
        return Some(found(t, "LM Studio GET /api/v0/models/{model}"));
    }
    if let Some(t) = ask
        .get(&format!("{root}/api/ps"))
        .await
        .and_then(|v| from_ollama_ps(&v, model))
    {
        return Some(found(t, "Ollama GET /api/ps, the loaded model"));
    }
    let show = ask
        .post(
            &format!("{root}/api/show"),
            serde_json::json!({ "model": model }),
        )
        .await?;
    from_ollama_show(&show)
}

fn found(tokens: u32, from: &'static str) -> ServerWindow {
    ServerWindow { tokens, from }
}

/// Asks with the provider's key, as it expects it; only a 2xx JSON body is an answer.
struct Ask {
    http: reqwest::Client,
    key: Option<String>,
}

impl Ask {
    async fn get(&self, url: &str) -> Option<Value> {
        self.send(self.http.get(url)).await
    }

    async fn post(&self, url: &str, body: Value) -> Option<Value> {
        self.send(self.http.post(url).json(&body)).await
    }

    async fn send(&self, mut req: reqwest::RequestBuilder) -> Option<Value> {
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        let res = req.send().await.ok()?;
        if !res.status().is_success() {
            return None;
        }
        res.json().await.ok()
    }
}

/// A plausible window from a JSON number.
fn tokens(v: &Value) -> Option<u32> {
    let n = v.as_u64()?;
    (SMALLEST..=LARGEST)
        .contains(&n)
        .then(|| u32::try_from(n).ok())
        .flatten()
}

/// llama.cpp `/props`.
fn from_props(v: &Value) -> Option<u32> {
    tokens(&v["default_generation_settings"]["n_ctx"]).or_else(|| tokens(&v["n_ctx"]))
}

/// The entry of `model` in an OpenAI model list: vLLM's `max_model_len`, llama.cpp's
/// `meta.n_ctx`.
fn from_model_list(v: &Value, model: &str) -> Option<ServerWindow> {
    let entry = v["data"]
        .as_array()?
        .iter()
        .find(|m| m["id"].as_str() == Some(model))?;
    if let Some(t) = tokens(&entry["max_model_len"]) {
        return Some(found(t, "vLLM GET /v1/models max_model_len"));
    }
    tokens(&entry["meta"]["n_ctx"]).map(|t| found(t, "llama.cpp GET /v1/models meta.n_ctx"))
}

/// LM Studio `/api/v0/models/{model}`.
fn from_lmstudio(v: &Value) -> Option<u32> {
    tokens(&v["loaded_context_length"]).or_else(|| tokens(&v["max_context_length"]))
}

/// Ollama `/api/ps`: the context the loaded `model` was given.
fn from_ollama_ps(v: &Value, model: &str) -> Option<u32> {
    let wanted = |m: &Value| {
        let named = |k: &str| m[k].as_str().is_some_and(|n| same_ollama_model(n, model));
        named("name") || named("model")
    };
    v["models"]
        .as_array()?
        .iter()
        .find(|m| wanted(m))
        .and_then(|m| tokens(&m["context_length"]))
}

/// `llama3.2` is `llama3.2:latest` to Ollama.
fn same_ollama_model(listed: &str, model: &str) -> bool {
    let full = |n: &str| {
        if n.contains(':') {
            n.to_owned()
        } else {
            format!("{n}:latest")
        }
    };
    full(listed) == full(model)
}

/// Ollama `/api/show`: the `num_ctx` its Modelfile sets, else what the model was trained for.
fn from_ollama_show(v: &Value) -> Option<ServerWindow> {
    let set = v["parameters"].as_str().and_then(|params| {
        params.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx"))
                .then(|| words.next()?.parse::<u64>().ok())
                .flatten()
                .and_then(|n| tokens(&Value::from(n)))
        })
    });
    if let Some(t) = set {
        return Some(found(t, "Ollama POST /api/show num_ctx"));
    }
    let trained = v["model_info"]
        .as_object()?
        .iter()
        .find_map(|(k, n)| k.ends_with(".context_length").then(|| tokens(n)).flatten())?;
    Some(found(
        trained,
        "Ollama POST /api/show model_info, the model's maximum",
    ))
}

/// A model name as one path segment (`/` and friends escaped).
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn r8_4_llama_cpp_props_say_the_window_of_one_request() {
        // As llama.cpp's server (xllamacpp 2026.10) answers, and as older builds did.
        let now =
            json!({"default_generation_settings": {"n_ctx": 8192, "params": {}}, "total_slots": 1});
        assert_eq!(from_props(&now), Some(8192));
        assert_eq!(from_props(&json!({"n_ctx": 4096})), Some(4096));
        assert_eq!(from_props(&json!({"error": "Unexpected endpoint"})), None);
        assert_eq!(from_props(&json!({"n_ctx": 3})), None, "not a window");
    }

    #[test]
    fn r8_4_a_model_list_entry_says_vllm_and_llama_cpp_windows() {
        let vllm = json!({"data": [
            {"id": "other", "max_model_len": 4096},
            {"id": "Qwen/Qwen2.5-7B", "max_model_len": 32768},
        ]});
        assert_eq!(
            from_model_list(&vllm, "Qwen/Qwen2.5-7B").map(|w| w.tokens),
            Some(32768)
        );
        let llama =
            json!({"data": [{"id": "smollm2", "meta": {"n_ctx": 4096, "n_ctx_train": 8192}}]});
        assert_eq!(
            from_model_list(&llama, "smollm2"),
            Some(found(4096, "llama.cpp GET /v1/models meta.n_ctx"))
        );
        let openai = json!({"data": [{"id": "gpt-4o", "owned_by": "openai"}]});
        assert_eq!(from_model_list(&openai, "gpt-4o"), None);
    }

    #[test]
    fn r8_4_lm_studio_says_the_loaded_window_first() {
        let loaded =
            json!({"state": "loaded", "max_context_length": 131072, "loaded_context_length": 4096});
        assert_eq!(from_lmstudio(&loaded), Some(4096));
        let not_loaded = json!({"state": "not-loaded", "max_context_length": 32768});
        assert_eq!(from_lmstudio(&not_loaded), Some(32768));
    }

    #[test]
    fn r8_4_ollama_says_the_allocated_then_the_set_then_the_trained_window() {
        let ps = json!({"models": [{"name": "llama3.2:latest", "model": "llama3.2:latest", "context_length": 4096}]});
        assert_eq!(from_ollama_ps(&ps, "llama3.2"), Some(4096));
        assert_eq!(from_ollama_ps(&ps, "qwen3"), None);
        let set = json!({"parameters": "stop \"<|eot_id|>\"\nnum_ctx                        16384", "model_info": {"llama.context_length": 131072}});
        assert_eq!(from_ollama_show(&set).map(|w| w.tokens), Some(16384));
        let trained = json!({"parameters": "", "model_info": {"general.architecture": "llama", "llama.context_length": 131072}});
        let w = from_ollama_show(&trained).unwrap();
        assert_eq!(w.tokens, 131072);
        assert!(w.from.contains("maximum"), "{w:?}");
    }

    #[test]
    fn a_model_name_is_one_path_segment() {
        assert_eq!(
            urlencode("lmstudio-community/qwen:7b"),
            "lmstudio-community%2Fqwen%3A7b"
        );
    }
}

//! Asking a provider what it serves (`GET {base_url}/models`), for `doctor`, for what `serve`
//! says at start-up, and for a first run with nothing configured: the local OpenAI-compatible
//! servers people usually run (Ollama, LM Studio, llama.cpp, vLLM) are tried on their usual
//! ports, and the first that lists a model is used.
use std::time::Duration;
use turnkey_providers::{ProviderConfig, ProviderKind};

/// The base URLs `serve` tries when no provider is configured (`server.detect_providers`), in
/// order, with the name the provider gets.
pub const LOCAL_SERVERS: [(&str, &str); 4] = [
    ("ollama", "http://127.0.0.1:11434/v1"),
    ("lmstudio", "http://127.0.0.1:1234/v1"),
    ("llamacpp", "http://127.0.0.1:8080/v1"),
    ("vllm", "http://127.0.0.1:8000/v1"),
];

/// How long a provider gets to answer a check before it is called a problem: `doctor`'s (which
/// gives the store as long), and the one `serve` makes of the primary at start-up.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one local server gets to answer `/models` during detection. They are asked at
/// once, so a start with nothing listening waits this long at most.
pub const DETECT_TIMEOUT: Duration = Duration::from_millis(800);

/// What `GET /models` said: the ids it lists (empty when its body is not a model list).
#[derive(Clone, Debug)]
pub struct Listed {
    pub url: String,
    pub status: u16,
    pub ids: Vec<String>,
    /// The body was a model list (`{data: [{id}]}`).
    pub is_list: bool,
}

impl Listed {
    /// Whether `model` is among the listed ids.
    pub fn lists(&self, model: &str) -> bool {
        self.ids.iter().any(|m| m == model)
    }

    /// Up to `n` listed ids, for a message.
    pub fn some_ids(&self, n: usize) -> String {
        let mut shown: Vec<&str> = self.ids.iter().take(n).map(String::as_str).collect();
        if self.ids.len() > n {
            shown.push("…");
        }
        shown.join(", ")
    }
}

/// `GET {base_url}/models` with the key as the provider expects it (Bearer; Anthropic's
/// `x-api-key` and `anthropic-version`). A 2xx is an answer; anything else is an explanation of
/// what went wrong, ready for a person.
pub async fn list_models(p: &ProviderConfig, timeout: Duration) -> Result<Listed, String> {
    let url = format!("{}/models", p.base_url.trim_end_matches('/'));
    let http = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let key = p.resolved_api_key();
    let mut req = http.get(&url);
    match (&key, p.kind) {
        (Some(key), ProviderKind::Anthropic) => {
            req = req
                .header("x-api-key", key.expose())
                .header("anthropic-version", "2023-06-01");
        }
        (Some(key), ProviderKind::Openai) => req = req.bearer_auth(key.expose()),
        (None, _) => {}
    }
    let res = req.send().await.map_err(|e| {
        if e.is_timeout() {
            format!("GET {url}: no answer within {} ms", timeout.as_millis())
        } else {
            format!("GET {url}: no answer: {}", with_causes(&e))
        }
    })?;
    let status = res.status();
    if !status.is_success() {
        let hint = match (status.as_u16(), &key) {
            (401 | 403, None) => "; no API key is set (api_key, or the variable api_key_env names)",
            (401 | 403, Some(_)) => "; the API key was refused",
            (404, _) => "; is base_url right (it usually ends in /v1)?",
            _ => "",
        };
        return Err(format!("GET {url}: answered HTTP {status}{hint}"));
    }
    let data = res
        .json::<serde_json::Value>()
        .await
        .ok()
        .and_then(|v| v.get("data")?.as_array().cloned());
    Ok(Listed {
        url,
        status: status.as_u16(),
        is_list: data.is_some(),
        ids: data
            .unwrap_or_default()
            .iter()
            .filter_map(|m| m["id"].as_str().map(str::to_owned))
            .collect(),
    })
}

/// A provider's check, as `doctor` reports it: `Ok` when the server answers and lists the
/// configured model (or answers something that is not a list); `Err` when it does not answer,
/// refuses, or lists other models only (the name is wrong for this server).
pub async fn check(p: &ProviderConfig, timeout: Duration) -> Result<String, String> {
    verdict(p, &list_models(p, timeout).await?)
}

/// [`check`]'s verdict on what `GET /models` said.
fn verdict(p: &ProviderConfig, listed: &Listed) -> Result<String, String> {
    let (url, status) = (&listed.url, listed.status);
    if !listed.is_list {
        return Ok(format!("GET {url}: HTTP {status}"));
    }
    if listed.lists(&p.model) {
        return Ok(format!(
            "GET {url}: HTTP {status}, model {} is listed",
            p.model
        ));
    }
    Err(if listed.ids.is_empty() {
        format!("GET {url}: HTTP {status}, but it lists no model at all")
    } else {
        format!(
            "GET {url}: HTTP {status}, but model {:?} is not among what it serves: {}",
            p.model,
            listed.some_ids(8)
        )
    })
}

/// What connecting a provider asks (`POST /v1/providers`): stricter than [`check`], the server
/// must answer a model list that names the model, since nothing else shows that `base_url` is
/// the API's root (a web page at that address answers 200 too).
pub async fn check_to_connect(p: &ProviderConfig, timeout: Duration) -> Result<String, String> {
    let listed = list_models(p, timeout).await?;
    if !listed.is_list {
        return Err(format!(
            "GET {}: HTTP {}, but the answer is not a model list ({{\"data\": [{{\"id\": …}}]}}); \
             is base_url the API's root (it usually ends in /v1)?",
            listed.url, listed.status
        ));
    }
    verdict(p, &listed)
}

/// The base URL to connect `p` with: `base_url` with `/v1` added when it has no path and the
/// server answers a model list there, the usual slip when typing a local server's address
/// (Ollama, LM Studio, llama.cpp and vLLM all serve their API under `/v1`); else `None` (as
/// given).
pub async fn with_api_root(p: &ProviderConfig, timeout: Duration) -> Option<String> {
    let url = reqwest::Url::parse(&p.base_url).ok()?;
    if !matches!(url.path(), "" | "/") || url.query().is_some() {
        return None;
    }
    let mut with_v1 = p.clone();
    with_v1.base_url = format!("{}/v1", p.base_url.trim_end_matches('/'));
    let listed = list_models(&with_v1, timeout).await.ok()?;
    listed.is_list.then_some(with_v1.base_url)
}

/// The first of `candidates` (name, base URL) that answers `/models` with a model, as a
/// provider using that model: a chat model, not an embedding one, when it lists both. All are
/// asked at once; the order of `candidates` decides between several that answer. A candidate
/// on `own_port` (this server's) is skipped.
pub async fn detect(
    candidates: &[(String, String)],
    own_port: Option<u16>,
) -> Option<ProviderConfig> {
    let asked = candidates
        .iter()
        .filter(|(_, url)| own_port.is_none_or(|port| port_of(url) != Some(port)))
        .map(|(name, url)| async move {
            let p = provider(name, url, "")?;
            let listed = list_models(&p, DETECT_TIMEOUT).await.ok()?;
            let model = listed
                .ids
                .iter()
                .find(|m| !m.to_ascii_lowercase().contains("embed"))
                .or(listed.ids.first())?;
            provider(name, url, model)
        });
    futures::future::join_all(asked)
        .await
        .into_iter()
        .flatten()
        .next()
}

/// The name a detected server at `url` gets: the known one for its port, else `local`.
pub fn name_for(url: &str) -> String {
    LOCAL_SERVERS
        .iter()
        .find(|(_, known)| port_of(known) == port_of(url))
        .map_or("local", |(name, _)| name)
        .to_owned()
}

/// An OpenAI-compatible provider with every default but these.
fn provider(name: &str, base_url: &str, model: &str) -> Option<ProviderConfig> {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "kind": "openai",
        "base_url": base_url,
        "model": model,
    }))
    .ok()
}

fn port_of(url: &str) -> Option<u16> {
    reqwest::Url::parse(url).ok()?.port_or_known_default()
}

/// reqwest's own message ("error sending request") hides the cause ("Connection refused").
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detected_server_is_named_by_its_port() {
        assert_eq!(name_for("http://127.0.0.1:11434/v1"), "ollama");
        assert_eq!(name_for("http://localhost:8000/v1"), "vllm");
        assert_eq!(name_for("http://127.0.0.1:9999/v1"), "local");
    }

    #[test]
    fn the_own_port_is_read_from_a_url() {
        assert_eq!(port_of("http://127.0.0.1:8080/v1"), Some(8080));
        assert_eq!(port_of("https://example.com/v1"), Some(443));
    }
}

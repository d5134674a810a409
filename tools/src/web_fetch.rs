//! `web_fetch {url}`: GET an http(s) URL and return it as text (HTML rendered to plain text),
//! within size and time caps. Non-public addresses are refused unless `tools.fetch_allow`
//! lists them; the check runs on the resolved addresses of every hop, and the connection is
//! pinned to the checked addresses so DNS cannot answer differently in between.
use crate::args::{non_empty, parse};
use crate::net_guard::{non_global, FetchAllow};
use crate::spill::floor_char_boundary;
use crate::{Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, LOCATION};
use reqwest::redirect::Policy;
use reqwest::Url;
use serde::Deserialize;
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
pub(crate) const MAX_REDIRECTS: usize = 5;
/// Most body bytes read from the server.
pub(crate) const READ_CAP: usize = 2 * 1024 * 1024;
/// Most bytes of text returned to the model.
pub(crate) const RETURN_CAP: usize = 64 * 1024;
pub(crate) const TIME_CAP: Duration = Duration::from_secs(30);
/// Column width HTML is rendered to; wide, so that prose is not broken up needlessly.
const TEXT_WIDTH: usize = 120;

pub(crate) struct WebFetch {
    allow: FetchAllow,
    /// Tests set this so that a bug in the guard fails the test instead of sending a packet
    /// anywhere but the loopback interface.
    #[cfg(test)]
    pub loopback_only: bool,
}

impl WebFetch {
    pub(crate) fn new(allow: FetchAllow) -> Self {
        Self {
            allow,
            #[cfg(test)]
            loopback_only: false,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    url: String,
}

#[async_trait]
impl Tool for WebFetch {
    fn name(&self) -> &str {
        "web_fetch"
    }

    fn description(&self) -> &str {
        "GET an http(s) URL as readable text (at most 64 KiB); private addresses are refused."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "url": {"type": "string"}
            },
            "required": ["url"]
        })
    }

    fn dangerous(&self) -> bool {
        true
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> ToolOutput {
        let args = match parse::<Args>(args) {
            Ok(args) => args,
            Err(e) => return ToolOutput::error(e),
        };
        let result = tokio::select! {
            result = tokio::time::timeout(TIME_CAP, self.fetch(&args.url)) => match result {
                Ok(result) => result,
                Err(_) => Err(format!("fetching {} took longer than {} s", args.url, TIME_CAP.as_secs())),
            },
            _ = ctx.cancel.cancelled() => Err("web_fetch interrupted".to_owned()),
        };
        ToolOutput::from_result(result)
    }
}

impl WebFetch {
    async fn fetch(&self, url: &str) -> Result<String, String> {
        let url = non_empty("url", url)?;
        let (url, response) = self.get(url).await?;
        render(url, response).await
    }

    /// GET `url`, following up to [`MAX_REDIRECTS`] redirects, each hop through the guard:
    /// the final URL and its response.
    async fn get(&self, url: &str) -> Result<(Url, reqwest::Response), String> {
        let mut url =
            Url::parse(url).map_err(|e| format!("invalid arguments: invalid url {url:?}: {e}"))?;
        let mut hops = 0;
        loop {
            let client = self.client_for(&url).await?;
            let response = client
                .get(url.clone())
                .send()
                .await
                .map_err(|e| format!("fetching {url} failed: {e}"))?;
            let location = response.headers().get(LOCATION).cloned();
            if let (true, Some(location)) = (response.status().is_redirection(), location) {
                if hops == MAX_REDIRECTS {
                    return Err(format!(
                        "fetching {url}: too many redirects (more than {MAX_REDIRECTS})"
                    ));
                }
                hops += 1;
                let location = location
                    .to_str()
                    .map_err(|_| format!("{url} redirected to a Location that is not text"))?;
                url = url
                    .join(location)
                    .map_err(|e| format!("{url} redirected to an invalid URL {location:?}: {e}"))?;
                continue;
            }
            return Ok((url, response));
        }
    }

    /// A client that may fetch `url`: its host's addresses are checked and the client
    /// connects to those addresses only.
    async fn client_for(&self, url: &Url) -> Result<reqwest::Client, String> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "refused: {url}: only http and https URLs are fetched, not {}:",
                url.scheme()
            ));
        }
        let port = url.port_or_known_default().unwrap_or(80);
        let host = url
            .host_str()
            .ok_or_else(|| format!("invalid url {url}: no host"))?;
        // An IPv6 literal comes in brackets; the url crate has already normalized IPv4
        // literals in other notations (`2130706433`, `0x7f.1`) to dotted form.
        let literal = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
            .parse::<IpAddr>()
            .ok();
        let (addrs, domain) = match literal {
            Some(ip) => (vec![SocketAddr::new(ip, port)], None),
            None => {
                let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
                    .await
                    .map_err(|e| format!("cannot resolve {host}: {e}"))?
                    .collect();
                if addrs.is_empty() {
                    return Err(format!("cannot resolve {host}: no addresses"));
                }
                (addrs, Some(host))
            }
        };
        let host_allowed = domain.is_some_and(|d| self.allow.allows_host(d));
        if !host_allowed {
            // Every address must pass: a name that resolves to one public and one private
            // address could otherwise be steered to the private one.
            for addr in &addrs {
                let ip = addr.ip();
                if let Some(kind) = non_global(ip) {
                    if !self.allow.allows_addr(ip) {
                        let via = match domain {
                            Some(d) => format!("{d} resolves to {ip}, "),
                            None => String::new(),
                        };
                        return Err(format!(
                            "refused: {url}: {via}{ip} is a {kind} address; web_fetch reaches \
                             only public addresses unless tools.fetch_allow lists the host or address"
                        ));
                    }
                }
            }
        }
        #[cfg(test)]
        if self.loopback_only && addrs.iter().any(|a| !a.ip().is_loopback()) {
            return Err(format!("test guard: would connect to {addrs:?}"));
        }
        let mut builder = reqwest::Client::builder()
            .redirect(Policy::none())
            // A proxy would do its own DNS and reach what the guard refused.
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("turnkey-web-fetch/", env!("CARGO_PKG_VERSION")));
        if let Some(domain) = domain {
            builder = builder.resolve_to_addrs(domain, &addrs);
        }
        builder
            .build()
            .map_err(|e| format!("cannot set up an HTTP client: {e}"))
    }
}

/// Why [`download`] brought nothing back.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// Larger than the bound given, by its `Content-Length` or by what arrived.
    #[error("{url} is larger than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    /// Refused by the guard, unreachable, an error status, too slow.
    #[error("{0}")]
    Failed(String),
}

/// The bytes of `url` (http or https) and the type the server declared, fetched the way
/// `web_fetch` fetches: non-public addresses refused unless `fetch_allow` (the
/// `tools.fetch_allow` entries) lets them through, each redirect checked again, at most `limit`
/// bytes, within `timeout`. For attachments that arrive as links (SPEC R2.2).
pub async fn download(
    fetch_allow: &[String],
    url: &str,
    limit: usize,
    timeout: Duration,
) -> Result<(Vec<u8>, Option<String>), DownloadError> {
    let allow = FetchAllow::parse(fetch_allow).map_err(|e| DownloadError::Failed(e.to_string()))?;
    let fetcher = WebFetch::new(allow);
    let fetched = async {
        let (url, mut response) = fetcher.get(url).await.map_err(DownloadError::Failed)?;
        let status = response.status();
        if !status.is_success() {
            return Err(DownloadError::Failed(format!(
                "{url} answered HTTP {status}"
            )));
        }
        let too_large = || DownloadError::TooLarge {
            url: url.to_string(),
            limit,
        };
        if response
            .content_length()
            .is_some_and(|n| usize::try_from(n).map_or(true, |n| n > limit))
        {
            return Err(too_large());
        }
        let declared = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| DownloadError::Failed(format!("reading {url} failed: {e}")))?
        {
            if body.len() + chunk.len() > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok((body, declared))
    };
    tokio::time::timeout(timeout, fetched).await.map_err(|_| {
        DownloadError::Failed(format!(
            "fetching {url} took longer than {} s",
            timeout.as_secs()
        ))
    })?
}

/// The response as text for the model: a short header, then the body (HTML rendered).
async fn render(url: Url, mut response: reqwest::Response) -> Result<String, String> {
    let status = response.status();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut body = Vec::new();
    let mut cut = false;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("reading {url} failed: {e}"))?
    {
        let room = READ_CAP - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if chunk.len() >= room {
            // Full: one more chunk tells whether anything was left; the rest is dropped
            // unread rather than downloaded.
            cut = chunk.len() > room
                || matches!(response.chunk().await, Ok(Some(more)) if !more.is_empty());
            break;
        }
    }
    let kind = content_type.to_ascii_lowercase();
    let sniff = &body[..body.len().min(1024)];
    let head = String::from_utf8_lossy(sniff)
        .trim_start()
        .to_ascii_lowercase();
    let looks_html = head.starts_with("<!doctype html") || head.starts_with("<html");
    let text = if kind.contains("html") || (kind.is_empty() && looks_html) {
        html2text::from_read(&body[..], TEXT_WIDTH)
            .map_err(|e| format!("{url}: the HTML could not be converted to text: {e}"))?
    } else if is_textual(&kind) || (kind.is_empty() && !sniff.contains(&0)) {
        String::from_utf8_lossy(&body).into_owned()
    } else {
        return Err(format!(
            "refused: {url} returned {content_type} content ({} bytes), which web_fetch does not turn into text",
            body.len()
        ));
    };

    let mut out = format!("URL: {url}\nStatus: {status}\nContent-Type: {content_type}\n\n");
    let keep = floor_char_boundary(&text, RETURN_CAP);
    out.push_str(&text[..keep]);
    if keep < text.len() {
        out.push_str(&format!(
            "\n[... truncated: showing {keep} of {} bytes of text]",
            text.len()
        ));
    }
    if cut {
        out.push_str(&format!("\n[the body was cut after {READ_CAP} bytes]"));
    }
    if status.is_success() {
        Ok(out)
    } else {
        Err(out)
    }
}

fn is_textual(content_type: &str) -> bool {
    content_type.starts_with("text/")
        || [
            "json",
            "xml",
            "javascript",
            "ecmascript",
            "yaml",
            "csv",
            "toml",
        ]
        .iter()
        .any(|t| content_type.contains(t))
}

#[cfg(test)]
#[path = "web_fetch_tests.rs"]
mod tests;

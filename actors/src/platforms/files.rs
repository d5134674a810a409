//! Files that arrive with a chat message (SPEC R2.2): a Telegram photo, document, voice note or
//! audio (`getFile`, then the file's URL under the bot token), a Slack file (its
//! `url_private_download` with the bot token), a generic webhook's `attachments: [{url}]` (a
//! `data:` URL, or an http(s) URL fetched through the `web_fetch` guard). Each becomes an
//! inline attachment that admission stores as a file (`attachments::normalize`), at most
//! `server.max_upload_bytes`. A file that cannot be fetched never costs the message: the input
//! is admitted with a line saying which file is missing and why.
use super::client::{http_client, CALL_TIMEOUT};
use super::telegram::Telegram;
use crate::config::RuntimeConfig;
use base64::Engine as _;
use serde_json::{json, Value};
use std::time::Duration;

/// How long one file may take to download from a platform.
pub const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// A file a chat message names, as its platform gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlatformFile {
    /// A Telegram file: `kind` is what the message called it (`photo`, `document`, `voice`,
    /// `audio`, `video`).
    Telegram {
        file_id: String,
        name: Option<String>,
        kind: &'static str,
    },
    /// A Slack file, downloaded with the bot token.
    Slack { url: String, name: Option<String> },
    /// A link given by an integrator (the generic webhook): `data:` or http(s).
    Url { url: String, name: Option<String> },
}

impl PlatformFile {
    /// How a message names it to the agent when it could not be fetched.
    pub fn label(&self) -> String {
        match self {
            Self::Telegram { name, kind, .. } => name.clone().unwrap_or_else(|| (*kind).to_owned()),
            Self::Slack { name, .. } | Self::Url { name, .. } => {
                name.clone().unwrap_or_else(|| "a file".to_owned())
            }
        }
    }

    fn name(&self) -> Option<&str> {
        match self {
            Self::Telegram { name, .. } | Self::Slack { name, .. } | Self::Url { name, .. } => {
                name.as_deref()
            }
        }
    }
}

/// What the files of one message became: attachments for the submission, a line with the
/// text of each voice note or audio file (`[stt]`), and a line for each file that could not be
/// fetched.
#[derive(Clone, Debug, Default)]
pub struct Fetched {
    pub attachments: Vec<Value>,
    pub transcripts: Vec<String>,
    pub missing: Vec<String>,
}

impl Fetched {
    /// `text` with the transcripts and a line per missing file after it.
    pub fn text_with_notes(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for line in self.transcripts.iter().chain(&self.missing) {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(line);
        }
        out
    }
}

/// Fetches every file of a message, one after another (a message carries few).
pub async fn fetch(config: &RuntimeConfig, files: &[PlatformFile]) -> Fetched {
    let mut out = Fetched::default();
    let limit = config.files.max_upload_bytes;
    for file in files {
        match fetch_one(config, file, limit).await {
            Ok(bytes) => {
                let audio = crate::attachments::sniff(&bytes).starts_with("audio/")
                    || matches!(
                        file,
                        PlatformFile::Telegram {
                            kind: "voice note" | "audio",
                            ..
                        }
                    );
                if audio && config.stt.on() {
                    let label = file.label();
                    let named = file.name().map(|n| format!(" {n}")).unwrap_or_default();
                    out.transcripts.push(match transcribe(&config.stt, &label, &bytes).await {
                        Ok(text) => format!("[voice note{named}, transcribed]: {text}"),
                        Err(why) => {
                            tracing::warn!(file = %label, %why, "a voice note was not transcribed");
                            format!("[voice note{named} could not be transcribed: {why}]")
                        }
                    });
                }
                let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
                let mut attachment = json!({
                    // The type is sniffed from the bytes at admission; this one only parses.
                    "url": format!("data:application/octet-stream;base64,{data}"),
                });
                if let Some(name) = file.name() {
                    attachment["name"] = json!(name);
                }
                out.attachments.push(attachment);
            }
            Err(why) => {
                tracing::warn!(file = %file.label(), %why, "a chat message's file was not fetched");
                out.missing.push(format!(
                    "[attachment {} could not be kept: {why}]",
                    file.label()
                ));
            }
        }
    }
    out
}

async fn fetch_one(
    config: &RuntimeConfig,
    file: &PlatformFile,
    limit: usize,
) -> Result<Vec<u8>, String> {
    match file {
        PlatformFile::Telegram { file_id, .. } => {
            let tg = config
                .platforms
                .telegram
                .as_ref()
                .ok_or("telegram is not configured")?;
            let path = Telegram::new(tg)
                .file_path(file_id)
                .await
                .map_err(|e| e.to_string())?;
            let url = format!(
                "{}/file/bot{}/{}",
                tg.api_base.trim_end_matches('/'),
                tg.bot_token.expose(),
                path.trim_start_matches('/')
            );
            get(&url, None, limit).await
        }
        PlatformFile::Slack { url, .. } => {
            let slack = config
                .platforms
                .slack
                .as_ref()
                .ok_or("slack is not configured")?;
            if !url.starts_with("https://") && !url.starts_with("http://") {
                return Err("its URL is not http(s)".into());
            }
            get(url, Some(slack.bot_token.expose()), limit).await
        }
        PlatformFile::Url { url, .. } if url.starts_with("data:") => {
            crate::attachments::decode_data_url(url, 0)
                .map_err(|e| e.to_string())
                .and_then(|bytes| {
                    if bytes.len() > limit {
                        Err(format!("it is larger than {limit} bytes"))
                    } else {
                        Ok(bytes)
                    }
                })
        }
        PlatformFile::Url { url, .. } => {
            turnkey_tools::download(&config.tools.fetch_allow, url, limit, DOWNLOAD_TIMEOUT)
                .await
                .map(|(bytes, _)| bytes)
                .map_err(|e| e.to_string())
        }
    }
}

/// The text of an audio file from `[stt]`'s OpenAI-compatible `/audio/transcriptions`.
async fn transcribe(
    stt: &crate::config::SttConfig,
    name: &str,
    bytes: &[u8],
) -> Result<String, String> {
    let url = format!(
        "{}/audio/transcriptions",
        stt.base_url.trim().trim_end_matches('/')
    );
    let part = reqwest::multipart::Part::bytes(bytes.to_vec())
        .file_name(name.to_owned())
        .mime_str(crate::attachments::sniff(bytes))
        .map_err(|e| e.to_string())?;
    let form = reqwest::multipart::Form::new()
        .text("model", stt.model.clone())
        .text("response_format", "json")
        .part("file", part);
    let http = http_client(Duration::from_secs(stt.timeout_s));
    let mut req = http.post(url).multipart(form);
    if let Some(key) = stt.resolved_api_key() {
        req = req.bearer_auth(key.expose());
    }
    let resp = req.send().await.map_err(|e| {
        format!(
            "the transcription service did not answer: {}",
            e.without_url()
        )
    })?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("the transcription service answered HTTP {status}"));
    }
    let body: Value = resp
        .json()
        .await
        .map_err(|e| format!("the transcription is not JSON: {}", e.without_url()))?;
    body["text"]
        .as_str()
        .map(|t| t.trim().to_owned())
        .ok_or_else(|| "the transcription has no text".to_owned())
}

/// GET `url` (the platform's own file URL) with the bot token when given, at most `limit`
/// bytes. The URL is left out of every error: a Telegram file URL holds the bot token.
async fn get(url: &str, bearer: Option<&str>, limit: usize) -> Result<Vec<u8>, String> {
    let http = http_client(DOWNLOAD_TIMEOUT.max(CALL_TIMEOUT));
    let mut req = http.get(url);
    if let Some(token) = bearer {
        req = req.bearer_auth(token);
    }
    let mut resp = req
        .send()
        .await
        .map_err(|e| format!("the download failed: {}", e.without_url()))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("the platform answered HTTP {status}"));
    }
    let too_large = || format!("it is larger than {limit} bytes");
    if resp
        .content_length()
        .is_some_and(|n| usize::try_from(n).map_or(true, |n| n > limit))
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| format!("the download was cut: {}", e.without_url()))?
    {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r2_2_missing_files_are_lines_after_the_text() {
        let f = Fetched {
            attachments: Vec::new(),
            transcripts: Vec::new(),
            missing: vec!["[attachment photo could not be kept: x]".into()],
        };
        assert_eq!(
            f.text_with_notes("look"),
            "look\n[attachment photo could not be kept: x]"
        );
        assert_eq!(
            f.text_with_notes(""),
            "[attachment photo could not be kept: x]"
        );
    }
}

//! The Slack Web API client (https://api.slack.com/methods): `chat.postMessage` and
//! `chat.update` with the bot token as a bearer token, JSON bodies, `thread_ts` for threads, a
//! section block of mrkdwn per message and approve/deny buttons for approvals. Slack answers a
//! refusal with 200 and `ok: false`, and a rate limit with 429 and `Retry-After`.
use super::client::{http_client, retry_after_header, CallError, CALL_TIMEOUT};
use super::config::SlackConfig;
use serde_json::{json, Value};
use std::time::Duration;
use turnkey_providers::Secret;

#[derive(Clone)]
pub struct Slack {
    http: reqwest::Client,
    base: String,
    token: Secret,
}

/// Where a message goes: a channel, and a thread in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlackChannel {
    pub channel: String,
    pub thread_ts: Option<String>,
}

impl Slack {
    pub fn new(cfg: &SlackConfig) -> Self {
        Self::with_timeout(cfg, CALL_TIMEOUT)
    }

    pub fn with_timeout(cfg: &SlackConfig, timeout: Duration) -> Self {
        Self {
            http: http_client(timeout),
            base: cfg.api_base.trim_end_matches('/').to_owned(),
            token: cfg.bot_token.clone(),
        }
    }

    /// Posts a message; answers its `ts` (Slack's message id).
    pub async fn post_message(
        &self,
        to: &SlackChannel,
        text: &str,
        blocks: &Value,
    ) -> Result<String, CallError> {
        let mut body = json!({
            "channel": to.channel,
            "text": text,
            "blocks": blocks,
            "unfurl_links": false,
            "unfurl_media": false,
        });
        if let Some(ts) = &to.thread_ts {
            body["thread_ts"] = json!(ts);
        }
        let answer = self.call("chat.postMessage", &body).await?;
        answer
            .get("ts")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| CallError::Ambiguous("chat.postMessage answered ok without a ts".into()))
    }

    /// Replaces a message the bot posted.
    pub async fn update(
        &self,
        channel: &str,
        ts: &str,
        text: &str,
        blocks: &Value,
    ) -> Result<(), CallError> {
        let body = json!({"channel": channel, "ts": ts, "text": text, "blocks": blocks});
        self.call("chat.update", &body).await.map(|_| ())
    }

    async fn call(&self, method: &str, body: &Value) -> Result<Value, CallError> {
        let resp = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(self.token.expose())
            .json(body)
            .send()
            .await
            .map_err(CallError::from_transport)?;
        let status = resp.status().as_u16();
        let retry_after = retry_after_header(resp.headers());
        let answer: Option<Value> = match resp.bytes().await {
            Ok(b) => serde_json::from_slice(&b).ok(),
            Err(e) => {
                return Err(match CallError::from_transport(e) {
                    CallError::NotSent(m) => CallError::Ambiguous(m),
                    other => other,
                })
            }
        };
        classify(method, status, retry_after, answer)
    }
}

/// Slack errors that mean the request did not do anything and may be sent again.
const TRANSIENT: &[&str] = &[
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
];

fn classify(
    method: &str,
    status: u16,
    retry_after: Option<Duration>,
    answer: Option<Value>,
) -> Result<Value, CallError> {
    let answer = answer.unwrap_or(Value::Null);
    let error = answer
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("no error given")
        .to_owned();
    let message = format!("slack {method}: {status} {error}");
    match status {
        200 if answer.get("ok").and_then(Value::as_bool) == Some(true) => Ok(answer),
        429 => Err(CallError::RateLimited {
            retry_after,
            message,
        }),
        200 if error == "ratelimited" => Err(CallError::RateLimited {
            retry_after,
            message,
        }),
        200 if TRANSIENT.contains(&error.as_str()) => Err(CallError::Transient(message)),
        // A 200 Slack could not say `ok` in: it took the request, the message may be posted.
        200 if answer.is_null() => Err(CallError::Ambiguous(message)),
        500..=599 => Err(CallError::Transient(message)),
        _ => Err(CallError::Permanent(message)),
    }
}

/// One section block of mrkdwn.
pub fn section(mrkdwn: &str) -> Value {
    json!([{"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn}}])
}

/// An approval request: the question, then the agreed buttons (`action_id`
/// `turnkey_approve` / `turnkey_deny`, `value` = the approval id).
pub fn approval_blocks(mrkdwn: &str, approval_id: &str) -> Value {
    json!([
        {"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn}},
        {"type": "actions", "block_id": format!("approval:{approval_id}"), "elements": [
            {"type": "button", "style": "primary", "action_id": "turnkey_approve",
             "text": {"type": "plain_text", "text": "Approve"}, "value": approval_id},
            {"type": "button", "style": "danger", "action_id": "turnkey_deny",
             "text": {"type": "plain_text", "text": "Deny"}, "value": approval_id},
        ]},
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r13_5_slack_answers_are_classified() {
        assert!(classify(
            "chat.postMessage",
            200,
            None,
            Some(json!({"ok": true, "ts": "1.2"}))
        )
        .is_ok());
        assert_eq!(
            classify(
                "chat.postMessage",
                429,
                Some(Duration::from_secs(7)),
                Some(json!({"ok": false, "error": "ratelimited"}))
            ),
            Err(CallError::RateLimited {
                retry_after: Some(Duration::from_secs(7)),
                message: "slack chat.postMessage: 429 ratelimited".into()
            })
        );
        assert!(matches!(
            classify("chat.postMessage", 200, None, Some(json!({"ok": false, "error": "channel_not_found"}))),
            Err(CallError::Permanent(m)) if m.contains("channel_not_found")
        ));
        assert!(matches!(
            classify("chat.postMessage", 503, None, None),
            Err(CallError::Transient(_))
        ));
    }

    #[test]
    fn r1_4_slack_buttons_carry_the_agreed_ids() {
        let b = approval_blocks("q", "ap-1");
        assert_eq!(b[1]["elements"][0]["action_id"], "turnkey_approve");
        assert_eq!(b[1]["elements"][1]["action_id"], "turnkey_deny");
        assert_eq!(b[1]["elements"][0]["value"], "ap-1");
    }
}

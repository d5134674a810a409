//! The generic webhook's outbound half: each reply is a JSON POST to `reply_url`,
//! `{chat_id, text, in_reply_to, final}`, signed like the inbound side: `X-Signature:
//! sha256=HEX` with HEX = HMAC-SHA256(secret, raw body). `final` is false for a streamed draft
//! and true for everything else; `in_reply_to` is the inbound `message_id` answered, when known.
use super::client::{http_client, retry_after_header, CallError, CALL_TIMEOUT};
use super::config::WebhookConfig;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use std::time::Duration;
use turnkey_providers::Secret;

#[derive(Clone)]
pub struct Webhook {
    http: reqwest::Client,
    url: String,
    secret: Secret,
}

/// `sha256=HEX` of HMAC-SHA256(`secret`, `body`).
pub fn signature(secret: &str, body: &[u8]) -> String {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

impl Webhook {
    pub fn new(cfg: &WebhookConfig) -> Self {
        Self::with_timeout(cfg, CALL_TIMEOUT)
    }

    pub fn with_timeout(cfg: &WebhookConfig, timeout: Duration) -> Self {
        Self {
            http: http_client(timeout),
            url: cfg.reply_url.clone(),
            secret: cfg.secret.clone(),
        }
    }

    /// POSTs one reply.
    pub async fn post(
        &self,
        chat_id: &str,
        text: &str,
        in_reply_to: Option<&str>,
        is_final: bool,
    ) -> Result<(), CallError> {
        let raw = serde_json::to_vec(&reply_body(chat_id, text, in_reply_to, is_final))
            .map_err(|e| CallError::Permanent(format!("cannot encode the reply: {e}")))?;
        let resp = self
            .http
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("X-Signature", signature(self.secret.expose(), &raw))
            .body(raw)
            .send()
            .await
            .map_err(CallError::from_transport)?;
        let status = resp.status().as_u16();
        let retry_after = retry_after_header(resp.headers());
        let detail: String = resp
            .text()
            .await
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect();
        classify(status, retry_after, &detail)
    }
}

fn classify(status: u16, retry_after: Option<Duration>, detail: &str) -> Result<(), CallError> {
    let message = format!("webhook reply: {status} {detail}");
    match status {
        200..=299 => Ok(()),
        429 => Err(CallError::RateLimited {
            retry_after,
            message,
        }),
        500..=599 => Err(CallError::Transient(message)),
        _ => Err(CallError::Permanent(message)),
    }
}

/// The body a receiver gets: what `post` signs.
pub fn reply_body(chat_id: &str, text: &str, in_reply_to: Option<&str>, is_final: bool) -> Value {
    json!({"chat_id": chat_id, "text": text, "in_reply_to": in_reply_to, "final": is_final})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r1_3_reply_signature_is_hmac_sha256_hex() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn r13_5_receiver_answers_are_classified() {
        assert!(classify(204, None, "").is_ok());
        assert!(matches!(classify(429, Some(Duration::from_secs(2)), ""),
            Err(CallError::RateLimited { retry_after: Some(d), .. }) if d.as_secs() == 2));
        assert!(matches!(
            classify(500, None, ""),
            Err(CallError::Transient(_))
        ));
        assert!(matches!(
            classify(401, None, "bad signature"),
            Err(CallError::Permanent(_))
        ));
    }
}

#[cfg(test)]
mod transport_tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn cfg(url: String) -> WebhookConfig {
        WebhookConfig {
            secret: "s".into(),
            reply_url: url,
            ..WebhookConfig::default()
        }
    }

    #[tokio::test]
    async fn r13_5_a_refused_connection_is_not_sent_and_a_silent_platform_is_ambiguous() {
        // Nothing listens: the request never left, so it may be sent again.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let url = format!(
            "http://{}/r",
            closed.local_addr().unwrap_or_else(|e| panic!("{e}"))
        );
        drop(closed);
        let e = Webhook::new(&cfg(url)).post("c", "t", None, true).await;
        assert!(matches!(e, Err(CallError::NotSent(_))), "{e:?}");

        // A platform that reads the request and never answers: it may have taken it.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let url = format!(
            "http://{}/r",
            silent.local_addr().unwrap_or_else(|e| panic!("{e}"))
        );
        let held = tokio::spawn(async move {
            let (mut sock, _) = silent.accept().await.unwrap_or_else(|e| panic!("{e}"));
            let mut buf = vec![0u8; 4096];
            // Read what comes, answer nothing, keep the connection open until the client gives up.
            while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
        });
        let client = Webhook::with_timeout(&cfg(url), Duration::from_millis(300));
        let e = client.post("c", "t", None, true).await;
        assert!(matches!(e, Err(CallError::Ambiguous(_))), "{e:?}");
        held.abort();
    }
}

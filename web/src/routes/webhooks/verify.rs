//! Platform verification of webhook requests: Telegram's secret-token header, Slack's v0
//! signature with its five-minute window, and the generic webhook's HMAC-SHA256. Every compare
//! takes the same time wherever the inputs differ. A request that fails is answered
//! 401 `invalid_signature` before anything is written.
use crate::auth::tokens_match;
use crate::error::ApiError;
use actix_web::http::StatusCode;
use actix_web::HttpRequest;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

pub const TELEGRAM_SECRET_HEADER: &str = "X-Telegram-Bot-Api-Secret-Token";
pub const SLACK_SIGNATURE_HEADER: &str = "X-Slack-Signature";
pub const SLACK_TIMESTAMP_HEADER: &str = "X-Slack-Request-Timestamp";
pub const GENERIC_SIGNATURE_HEADER: &str = "X-Signature";
/// How far a Slack request's timestamp may be from now, either way (Slack's advice).
pub const SLACK_MAX_SKEW_S: i64 = 5 * 60;

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "invalid_signature", message)
}

/// The one value of header `name`. None when it is missing, not visible ASCII, or sent more
/// than once: a proxy that appends its own copy, or an attacker who adds one, must not make
/// the check read a different value than the one a platform signed.
fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    let mut values = req.headers().get_all(name);
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok()
}

/// Telegram: `X-Telegram-Bot-Api-Secret-Token` equals the `secret_token` given to setWebhook.
pub fn telegram(req: &HttpRequest, secret_token: &str) -> Result<(), ApiError> {
    let Some(given) = header(req, TELEGRAM_SECRET_HEADER) else {
        return Err(invalid(format!(
            "missing or repeated {TELEGRAM_SECRET_HEADER}"
        )));
    };
    if secret_token.is_empty() || !tokens_match(given, secret_token) {
        return Err(invalid(format!(
            "{TELEGRAM_SECRET_HEADER} does not match platforms.telegram.secret_token"
        )));
    }
    Ok(())
}

/// Slack: `X-Slack-Signature: v0=HEX` is HMAC-SHA256(signing secret, `v0:TS:BODY`) with `TS`
/// from `X-Slack-Request-Timestamp`, which must be within five minutes of `now_s`.
pub fn slack(
    req: &HttpRequest,
    signing_secret: &str,
    body: &[u8],
    now_s: i64,
) -> Result<(), ApiError> {
    let ts = header(req, SLACK_TIMESTAMP_HEADER)
        .ok_or_else(|| invalid(format!("missing or repeated {SLACK_TIMESTAMP_HEADER}")))?;
    let sig = header(req, SLACK_SIGNATURE_HEADER)
        .ok_or_else(|| invalid(format!("missing or repeated {SLACK_SIGNATURE_HEADER}")))?;
    slack_signature(signing_secret, ts, sig, body, now_s)
}

/// [`slack`] on the header values.
pub fn slack_signature(
    signing_secret: &str,
    ts: &str,
    sig: &str,
    body: &[u8],
    now_s: i64,
) -> Result<(), ApiError> {
    let when: i64 = ts
        .trim()
        .parse()
        .map_err(|_| invalid(format!("{SLACK_TIMESTAMP_HEADER} is not a Unix time")))?;
    if (now_s - when).abs() > SLACK_MAX_SKEW_S {
        return Err(invalid(format!(
            "{SLACK_TIMESTAMP_HEADER} is more than {SLACK_MAX_SKEW_S} s from now (a replay, \
             or a clock that is off)"
        )));
    }
    let hex = sig
        .strip_prefix("v0=")
        .ok_or_else(|| invalid(format!("{SLACK_SIGNATURE_HEADER} is not v0=HEX")))?;
    if !hmac_matches(signing_secret, &[b"v0:", ts.as_bytes(), b":", body], hex) {
        return Err(invalid(format!(
            "{SLACK_SIGNATURE_HEADER} does not match the body (check platforms.slack.signing_secret)"
        )));
    }
    Ok(())
}

/// The generic webhook: `X-Signature: sha256=HEX` is HMAC-SHA256(secret, raw body).
pub fn generic(req: &HttpRequest, secret: &str, body: &[u8]) -> Result<(), ApiError> {
    let sig = header(req, GENERIC_SIGNATURE_HEADER)
        .ok_or_else(|| invalid(format!("missing or repeated {GENERIC_SIGNATURE_HEADER}")))?;
    let hex = sig
        .strip_prefix("sha256=")
        .ok_or_else(|| invalid(format!("{GENERIC_SIGNATURE_HEADER} is not sha256=HEX")))?;
    if !hmac_matches(secret, &[body], hex) {
        return Err(invalid(format!(
            "{GENERIC_SIGNATURE_HEADER} does not match the body (check platforms.webhook.secret)"
        )));
    }
    Ok(())
}

/// HMAC-SHA256(key, parts joined) as lower- or upper-case hex, for signing outbound bodies
/// and for tests.
pub fn sign(key: &str, parts: &[&[u8]]) -> String {
    hex::encode(mac(key, parts).finalize().into_bytes())
}

fn mac(key: &str, parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut mac = match HmacSha256::new_from_slice(key.as_bytes()) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    parts.iter().for_each(|p| mac.update(p));
    mac
}

/// Whether `hex` is the HMAC of `parts` under `key`: checked by the `hmac` crate in constant
/// time. An empty key never matches (a secret must be configured).
fn hmac_matches(key: &str, parts: &[&[u8]], hex: &str) -> bool {
    if key.is_empty() {
        return false;
    }
    let Ok(expected) = hex::decode(hex.trim()) else {
        return false;
    };
    mac(key, parts).verify_slice(&expected).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of Slack's "Verifying requests from Slack" page.
    #[test]
    fn r1_3_slack_documented_example_verifies() {
        let secret = "8f742231b10e8888abcd99yyyzzz85a5";
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let ts = "1531420618";
        let sig = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert!(slack_signature(secret, ts, sig, body, 1_531_420_618).is_ok());
        // Within the window either way; outside it refused even with the right signature.
        assert!(slack_signature(secret, ts, sig, body, 1_531_420_618 + 300).is_ok());
        assert!(slack_signature(secret, ts, sig, body, 1_531_420_618 - 300).is_ok());
        for now in [1_531_420_618 + 301, 1_531_420_618 - 301] {
            let e = slack_signature(secret, ts, sig, body, now).expect_err("stale");
            assert_eq!(e.code, "invalid_signature");
        }
        // Another body, secret or timestamp does not match.
        assert!(slack_signature(secret, ts, sig, b"token=x", 1_531_420_618).is_err());
        assert!(slack_signature("other", ts, sig, body, 1_531_420_618).is_err());
        assert!(slack_signature(secret, "1531420619", sig, body, 1_531_420_618).is_err());
        assert!(slack_signature(secret, ts, "a2114d57", body, 1_531_420_618).is_err());
        assert!(slack_signature(secret, ts, "v0=zz", body, 1_531_420_618).is_err());
        assert!(slack_signature(secret, "soon", sig, body, 1_531_420_618).is_err());
    }

    #[test]
    fn r1_3_hmac_matches_only_the_signed_bytes() {
        let sig = sign("k", &[b"body"]);
        assert!(hmac_matches("k", &[b"body"], &sig));
        assert!(hmac_matches("k", &[b"bo", b"dy"], &sig));
        assert!(hmac_matches("k", &[b"body"], &sig.to_uppercase()));
        assert!(!hmac_matches("k", &[b"body "], &sig));
        assert!(!hmac_matches("j", &[b"body"], &sig));
        assert!(!hmac_matches("", &[b"body"], &sign("", &[b"body"])));
        assert!(!hmac_matches("k", &[b"body"], &sig[..10]));
    }
}

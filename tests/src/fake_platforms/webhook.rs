//! The fake receiver of the generic webhook's replies (`/reply`): checks the HMAC signature
//! and the fields every reply carries.
use super::{FakeMessage, Outcome, Shared};
use actix_web::HttpRequest;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// `sha256=HEX` of HMAC-SHA256(`secret`, `body`): the generic webhook's signature.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|e| panic!("hmac key: {e}"));
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The receiver's answer to a signed reply.
pub(super) fn answer(shared: &Shared, req: &HttpRequest, raw: &[u8], body: &Value) -> Outcome {
    let given = req
        .headers()
        .get("x-signature")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if given != sign(&shared.secret, raw) {
        return Outcome {
            status: 401,
            body: json!({"error": "bad signature"}),
            retry_after: None,
            ok: false,
            message_id: None,
            error: Some("bad signature".into()),
        };
    }
    let fields_ok = body.get("chat_id").is_some_and(Value::is_string)
        && body.get("text").is_some_and(Value::is_string)
        && body.get("final").is_some_and(Value::is_boolean)
        && body.get("in_reply_to").is_some();
    if !fields_ok {
        return Outcome {
            status: 400,
            body: json!({"error": "want {chat_id, text, in_reply_to, final}"}),
            retry_after: None,
            ok: false,
            message_id: None,
            error: Some("bad body".into()),
        };
    }
    let chat = body
        .get("chat_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let text = body
        .get("text")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut state = shared.lock();
    let n = state.next_id;
    state.next_id += 1;
    state.messages.insert(
        (chat.clone(), n),
        FakeMessage {
            chat,
            id: n.to_string(),
            text,
            edits: 0,
        },
    );
    Outcome::ok(json!({"ok": true}), None)
}

//! The documented limit of every string a client sends, checked before anything reaches the
//! store, so both backends give the same answer: a 400 with a stable code, never a 5xx from an
//! index that cannot hold the value (PostgreSQL's btree rows stop near 2.7 KB) and never a NUL
//! that PostgreSQL's text type refuses. docs/api.md lists the same numbers.
use crate::error::GatewayError;
use serde_json::Value;

/// `request_id` / `Idempotency-Key`: 1 to this many bytes of visible ASCII (0x21–0x7E).
pub const MAX_REQUEST_ID_BYTES: usize = 255;
/// An input's text, in characters.
pub const MAX_TEXT_CHARS: usize = 200_000;
pub const MAX_TITLE_CHARS: usize = 200;
pub const MAX_SYSTEM_MESSAGE_CHARS: usize = 32_000;
/// A model name: 1 to this many bytes of visible ASCII.
pub const MAX_MODEL_BYTES: usize = 128;
pub const MAX_ATTACHMENTS: usize = 16;
/// One attachment object, serialized as JSON.
pub const MAX_ATTACHMENT_BYTES: usize = 64 * 1024;
/// The `display` object, serialized as JSON.
pub const MAX_DISPLAY_BYTES: usize = 16 * 1024;
/// An interrupt's reason, in characters.
pub const MAX_REASON_CHARS: usize = 500;
/// A door's key for a session (the OpenAI endpoint's `user`), in characters.
pub const MAX_SESSION_KEY_CHARS: usize = 256;
/// The messages a new session may start with (a stateless client's earlier conversation).
pub const MAX_HISTORY_MESSAGES: usize = 1_000;
/// An input's `instructions` (the Responses API), in characters.
pub const MAX_INSTRUCTIONS_CHARS: usize = 32_000;
/// An input's `max_output_tokens`, at most.
pub const MAX_OUTPUT_TOKENS: u32 = 1_000_000;
/// What a door keeps with an input (its `door` object), serialized as JSON.
pub const MAX_DOOR_BYTES: usize = 4 * 1024 * 1024;

fn invalid(code: &'static str, message: String) -> GatewayError {
    GatewayError::InvalidInput { code, message }
}

fn visible_ascii(s: &str) -> bool {
    s.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// A request id is an index key: short, and the same bytes on every backend.
pub fn request_id(id: &str) -> Result<(), GatewayError> {
    if id.is_empty() || id.len() > MAX_REQUEST_ID_BYTES || !visible_ascii(id) {
        return Err(invalid(
            "invalid_request_id",
            format!(
                "request_id / Idempotency-Key must be 1 to {MAX_REQUEST_ID_BYTES} bytes of \
                 visible ASCII (no spaces or control characters); got {} bytes",
                id.len()
            ),
        ));
    }
    Ok(())
}

/// Strips what no store or provider accepts: NUL and other C0 controls except tab, newline and
/// return. (Rust strings cannot hold lone surrogates; JSON escapes of them are refused at parse.)
pub fn sanitize_text(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control() || matches!(c, '\n' | '\t' | '\r'))
        .collect()
}

/// A free-text field after sanitizing, refused when longer than `max` characters.
pub fn text_field(field: &str, value: &str, max: usize) -> Result<String, GatewayError> {
    let clean = sanitize_text(value);
    let n = clean.chars().count();
    if n > max {
        return Err(invalid(
            "field_too_long",
            format!("{field} is {n} characters; the limit is {max}"),
        ));
    }
    Ok(clean)
}

pub fn model(name: &str) -> Result<(), GatewayError> {
    if name.len() > MAX_MODEL_BYTES {
        return Err(invalid(
            "field_too_long",
            format!(
                "model is {} bytes; the limit is {MAX_MODEL_BYTES}",
                name.len()
            ),
        ));
    }
    if !visible_ascii(name) {
        return Err(invalid(
            "invalid_field",
            "model must be visible ASCII (no spaces or control characters)".into(),
        ));
    }
    Ok(())
}

/// How many attachments an input may carry, each an object of bounded size besides its
/// inline `url` (checked before any is stored; the body limit bounds a data URL).
pub fn attachment_count(list: &[Value]) -> Result<(), GatewayError> {
    if list.len() > MAX_ATTACHMENTS {
        return Err(invalid(
            "too_many_attachments",
            format!("{} attachments; the limit is {MAX_ATTACHMENTS}", list.len()),
        ));
    }
    for (i, a) in list.iter().enumerate() {
        let Some(fields) = a.as_object() else {
            return Err(invalid(
                "invalid_attachment",
                "each attachment must be an object".into(),
            ));
        };
        let mut rest = fields.clone();
        rest.remove("url");
        json_size(
            &format!("attachments[{i}]"),
            &Value::Object(rest),
            MAX_ATTACHMENT_BYTES,
        )?;
    }
    Ok(())
}

/// The JSON objects an input may carry: `attachments` (normalized: file references) and
/// `display`.
pub fn attachments(list: &[Value]) -> Result<(), GatewayError> {
    attachment_count(list)?;
    for (i, a) in list.iter().enumerate() {
        json_size(&format!("attachments[{i}]"), a, MAX_ATTACHMENT_BYTES)?;
    }
    Ok(())
}

pub fn display(d: &Value) -> Result<(), GatewayError> {
    if !d.is_object() {
        return Err(invalid(
            "invalid_display",
            "display must be an object".into(),
        ));
    }
    json_size("display", d, MAX_DISPLAY_BYTES)?;
    // Its display settings (SPEC R3.1) must say something the turn can follow.
    crate::display::DisplayLayer::parse(d).map_err(|e| invalid("invalid_display", e))?;
    Ok(())
}

fn json_size(field: &str, v: &Value, max: usize) -> Result<(), GatewayError> {
    let n = v.to_string().len();
    if n > max {
        return Err(invalid(
            "field_too_long",
            format!("{field} is {n} bytes as JSON; the limit is {max}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn r2_2_request_ids_are_short_visible_ascii() {
        assert!(request_id("a").is_ok());
        assert!(request_id(&"k".repeat(255)).is_ok());
        for bad in ["", " a", "a b", "ключ", "a\u{0}", &"k".repeat(256)] {
            let e = request_id(bad).expect_err(bad);
            assert_eq!(e.code(), "invalid_request_id");
        }
    }

    #[test]
    fn r2_2_text_fields_are_cleaned_then_bounded() {
        assert_eq!(
            text_field("title", "a\u{0}b", 5).ok().as_deref(),
            Some("ab")
        );
        let e = text_field("title", "abcdef", 5).expect_err("long");
        assert_eq!(e.code(), "field_too_long");
    }

    #[test]
    fn r2_2_models_attachments_and_display_are_bounded() {
        assert!(model("gpt-4o-mini").is_ok());
        assert_eq!(model("a b").expect_err("space").code(), "invalid_field");
        assert_eq!(
            model(&"m".repeat(129)).expect_err("long").code(),
            "field_too_long"
        );
        let many = vec![json!({}); 17];
        assert_eq!(
            attachments(&many).expect_err("many").code(),
            "too_many_attachments"
        );
        let big = json!({ "data": "x".repeat(MAX_ATTACHMENT_BYTES) });
        assert_eq!(
            attachments(&[big]).expect_err("big").code(),
            "field_too_long"
        );
        assert_eq!(
            display(&json!([])).expect_err("array").code(),
            "invalid_display"
        );
        let big = json!({ "d": "x".repeat(MAX_DISPLAY_BYTES) });
        assert_eq!(display(&big).expect_err("big").code(), "field_too_long");
        assert_eq!(
            display(&json!({"tool_progress": "loud"}))
                .expect_err("tool_progress")
                .code(),
            "invalid_display"
        );
        assert!(
            display(&json!({"stream": false, "tool_progress": "new", "interim": false})).is_ok()
        );
    }
}

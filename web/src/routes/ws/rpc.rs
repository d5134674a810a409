//! JSON-RPC 2.0 framing for the WebSocket door: reading a request, and writing results,
//! errors and notifications. Standard codes for malformed traffic; a turnkey error is an
//! application error whose `data.code` is the stable snake_case code of API.md.
use crate::error::ApiError;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
/// A turnkey error (not found, conflict, unavailable, unauthorized, ...): see `data.code`.
pub const APPLICATION_ERROR: i64 = -32000;

/// One request as read: `id` is `None` for a notification (no answer is sent).
#[derive(Debug)]
pub struct Request {
    pub id: Option<Value>,
    pub method: String,
    pub params: Map<String, Value>,
}

#[derive(Debug)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Value,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>, data_code: &str) -> Self {
        Self {
            code,
            message: message.into(),
            data: json!({ "code": data_code }),
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message, "invalid_params")
    }
}

/// Bad input (400) is invalid params; every other turnkey error is an application error. The
/// turnkey code and HTTP status ride in `data`.
impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> Self {
        let code = if e.status.as_u16() == 400 {
            INVALID_PARAMS
        } else {
            APPLICATION_ERROR
        };
        let mut data = json!({ "code": e.code, "status": e.status.as_u16() });
        if let Some(s) = e.retry_after {
            data["retry_after_s"] = json!(s);
        }
        Self {
            code,
            message: e.message,
            data,
        }
    }
}

impl From<turnkey_actors::GatewayError> for RpcError {
    fn from(e: turnkey_actors::GatewayError) -> Self {
        ApiError::from(e).into()
    }
}

/// Reads one message. A failure comes with the id to answer it under (`null` when the id
/// could not be read).
pub fn parse(text: &str) -> Result<Request, (Value, RpcError)> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        (
            Value::Null,
            RpcError::new(PARSE_ERROR, format!("not JSON: {e}"), "parse_error"),
        )
    })?;
    let invalid = |id: Value, msg: &str| {
        (
            id,
            RpcError::new(INVALID_REQUEST, msg.to_owned(), "invalid_request"),
        )
    };
    let Value::Object(mut obj) = v else {
        return Err(invalid(
            Value::Null,
            "a request must be a JSON object (batches are not supported)",
        ));
    };
    let id = match obj.remove("id") {
        None => None,
        Some(id @ (Value::Null | Value::String(_) | Value::Number(_))) => Some(id),
        Some(_) => {
            return Err(invalid(
                Value::Null,
                "id must be a string, a number or null",
            ))
        }
    };
    let answer_id = id.clone().unwrap_or(Value::Null);
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(answer_id, "jsonrpc must be \"2.0\""));
    }
    let Some(Value::String(method)) = obj.remove("method") else {
        return Err(invalid(answer_id, "method must be a string"));
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err((
                answer_id,
                RpcError::invalid_params("params must be an object of named parameters"),
            ))
        }
    };
    Ok(Request { id, method, params })
}

/// Deserializes a method's params, naming what is wrong.
pub fn params<T: DeserializeOwned>(method: &str, p: Map<String, Value>) -> Result<T, RpcError> {
    serde_json::from_value(Value::Object(p))
        .map_err(|e| RpcError::invalid_params(format!("{method}: {e}")))
}

pub fn result(id: Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

pub fn error(id: Value, e: &RpcError) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {
        "code": e.code,
        "message": e.message,
        "data": e.data,
    }})
    .to_string()
}

/// A JSON-RPC notification whose `params` are already JSON (an event's shared serialization,
/// written once for every connection that sends it).
pub fn notification_json(method: &str, params: &str) -> String {
    let method = serde_json::Value::from(method);
    format!(r#"{{"jsonrpc":"2.0","method":{method},"params":{params}}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_wraps_its_json_params() {
        let params = json!({"seq": 3, "kind": "status", "data": {"text": "a \"quoted\" line\n"}});
        let text = notification_json("event", &params.to_string());
        let parsed: Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(
            parsed,
            json!({"jsonrpc": "2.0", "method": "event", "params": params})
        );
    }

    #[test]
    fn malformed_traffic_gets_the_standard_codes() {
        let code = |t: &str| parse(t).err().map(|(_, e)| e.code);
        assert_eq!(code("{"), Some(PARSE_ERROR));
        assert_eq!(code("[]"), Some(INVALID_REQUEST));
        assert_eq!(code(r#"{"id":1,"method":"auth"}"#), Some(INVALID_REQUEST));
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":7}"#),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"auth","params":[1]}"#),
            Some(INVALID_PARAMS)
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":{},"method":"auth"}"#),
            Some(INVALID_REQUEST)
        );
    }

    #[test]
    fn a_request_keeps_its_id_and_a_notification_has_none() {
        let r = parse(r#"{"jsonrpc":"2.0","id":"a","method":"m","params":{"x":1}}"#);
        let r = r.ok().map(|r| (r.id, r.method, r.params.len()));
        assert_eq!(r, Some((Some(json!("a")), "m".to_owned(), 1)));
        let n = parse(r#"{"jsonrpc":"2.0","method":"m"}"#)
            .ok()
            .map(|r| r.id);
        assert_eq!(n, Some(None));
    }

    #[test]
    fn turnkey_errors_carry_their_code_in_data() {
        let e = RpcError::from(ApiError::bad_request("empty_input", "no text"));
        assert_eq!(
            (e.code, e.data["code"].clone()),
            (INVALID_PARAMS, json!("empty_input"))
        );
        let e = RpcError::from(ApiError::not_found("session x"));
        assert_eq!(
            (e.code, e.data["code"].clone()),
            (APPLICATION_ERROR, json!("not_found"))
        );
    }
}

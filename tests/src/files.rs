//! Files for the attachment tests: a tiny PNG, a loopback server that serves it, and reads of
//! what a request to the model carried (its text parts, its image parts).
use crate::ScriptedProvider;
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A 1×1 red PNG.
pub const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x08, 0xd7, 0x63, 0xf8, 0xcf, 0xc0, 0x00,
    0x00, 0x03, 0x01, 0x01, 0x00, 0x18, 0xdd, 0x8d, 0xb0, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

/// Standard base64.
pub fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// [`PNG`] as a `data:` URL, as it goes to a vision model.
pub fn png_data_url() -> String {
    format!("data:image/png;base64,{}", b64(PNG))
}

/// A loopback server answering every GET with `body` as `image/png` (one request a
/// connection): its URL and how many requests it answered.
pub fn image_server(body: &'static [u8]) -> (String, Arc<AtomicUsize>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap_or_else(|e| panic!("image server: cannot bind: {e}"));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("image server: no address: {e}"));
    let url = format!("http://{addr}/pictures/dot.png");
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let Ok(read_half) = stream.try_clone() else {
                continue;
            };
            let mut reader = BufReader::new(read_half);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
            }
            counted.fetch_add(1, Ordering::SeqCst);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            drop(
                stream
                    .write_all(head.as_bytes())
                    .and_then(|()| stream.write_all(body)),
            );
        }
    });
    (url, hits)
}

/// The text of an OpenAI or Anthropic message's content: a string, or its text parts joined.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The `image_url` parts of an OpenAI message's content, as their URLs.
pub fn image_urls(content: &Value) -> Vec<String> {
    content
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter(|p| p["type"] == "image_url")
                .filter_map(|p| p["image_url"]["url"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The content of the last user message of the provider's last request.
pub fn last_user_content(provider: &ScriptedProvider) -> Value {
    let req = provider
        .requests()
        .last()
        .cloned()
        .unwrap_or_else(|| panic!("the provider got no request"));
    req.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| m["content"].clone())
        .unwrap_or(Value::Null)
}

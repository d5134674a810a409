//! Tests of `web_fetch` against a small HTTP server on 127.0.0.1: HTML to text, caps, and the
//! address guard on the first hop and on redirects. Nothing here connects anywhere else:
//! every `WebFetch` is built with `loopback_only`.
use super::*;
use crate::builtin::tests::ctx;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

struct Server {
    port: u16,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn response(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

fn route(path: &str) -> Vec<u8> {
    let html = ("Content-Type", "text/html; charset=utf-8");
    match path {
        "/" => response(
            "200 OK",
            &[html],
            b"<!doctype html><html><head><title>T</title><script>var hidden = 1;</script></head>\
              <body><h1>Hello</h1><p>Some <b>bold</b> text.</p><ul><li>one</li><li>two</li></ul></body></html>",
        ),
        "/plain" => response("200 OK", &[("Content-Type", "text/plain")], b"just text\n"),
        "/to-root" => response("302 Found", &[("Location", "/plain")], b""),
        "/to-metadata" => response(
            "302 Found",
            &[("Location", "http://169.254.169.254/latest/meta-data/")],
            b"",
        ),
        "/to-private" => response("301 Moved Permanently", &[("Location", "http://10.0.0.1/")], b""),
        "/loop" => response("302 Found", &[("Location", "/loop")], b""),
        "/big" => response("200 OK", &[("Content-Type", "text/plain")], &vec![b'z'; 100_000]),
        "/huge" => response("200 OK", &[("Content-Type", "text/plain")], &vec![b'y'; READ_CAP + 10]),
        "/image" => response("200 OK", &[("Content-Type", "image/png")], b"\x89PNG\r\n\x1a\n\0\0"),
        _ => response("404 Not Found", &[("Content-Type", "text/plain")], b"no such page"),
    }
}

/// Serves `route` on 127.0.0.1 until dropped; one request per connection.
async fn serve() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&requests);
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request);
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
                if stream.write_all(&route(&path)).await.is_ok() {
                    stream.shutdown().await.ok();
                }
            });
        }
    });
    Server {
        port,
        requests,
        task,
    }
}

fn fetcher(allow: &[&str]) -> WebFetch {
    let entries: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
    let mut tool = WebFetch::new(FetchAllow::parse(&entries).unwrap());
    tool.loopback_only = true;
    tool
}

async fn fetch(tool: &WebFetch, url: &str) -> ToolOutput {
    let (_dirs, ctx) = ctx();
    tool.call(json!({ "url": url }), &ctx).await
}

#[tokio::test]
async fn r9_6_web_fetch_refuses_non_public_addresses() {
    let tool = fetcher(&[]);
    let cases = [
        ("http://127.0.0.1:9/", "127.0.0.1 is a loopback address"),
        (
            "http://169.254.169.254/latest/meta-data/",
            "169.254.169.254 is a link-local address",
        ),
        ("http://10.0.0.1/", "10.0.0.1 is a private address"),
        ("http://[::1]:9/", "::1 is a loopback address"),
        ("http://[::ffff:127.0.0.1]:9/", "is a loopback address"),
        ("http://[fd00::1]/", "fd00::1 is a unique-local address"),
        ("http://0.0.0.0:9/", "0.0.0.0 is a unspecified address"),
        ("http://2130706433:9/", "127.0.0.1 is a loopback address"),
        ("http://localhost:9/", "localhost resolves to"),
    ];
    for (url, expected) in cases {
        let out = fetch(&tool, url).await;
        assert!(out.is_error, "{url}");
        assert!(
            out.content.starts_with("refused: "),
            "{url}: {}",
            out.content
        );
        assert!(out.content.contains(expected), "{url}: {}", out.content);
        assert!(out.content.contains("tools.fetch_allow"), "{}", out.content);
    }
}

#[tokio::test]
async fn r9_6_web_fetch_argument_errors_are_clear() {
    let tool = fetcher(&[]);
    let cases = [
        (
            "ftp://example.com/x",
            "refused: ftp://example.com/x: only http and https URLs",
        ),
        ("file:///etc/passwd", "only http and https URLs"),
        ("not a url", "invalid arguments: invalid url \"not a url\""),
        ("", "invalid arguments: \"url\" is empty"),
    ];
    for (url, expected) in cases {
        let out = fetch(&tool, url).await;
        assert!(out.is_error, "{url}");
        assert!(out.content.contains(expected), "{url}: {}", out.content);
    }
}

#[tokio::test]
async fn r9_6_web_fetch_turns_html_into_text_on_an_allowed_local_server() {
    let server = serve().await;
    let tool = fetcher(&["127.0.0.1"]);
    let out = fetch(&tool, &format!("http://127.0.0.1:{}/", server.port)).await;
    assert!(!out.is_error, "{}", out.content);
    let text = &out.content;
    assert!(text.starts_with(&format!(
        "URL: http://127.0.0.1:{}/\nStatus: 200 OK\n",
        server.port
    )));
    assert!(text.contains("Hello"), "{text}");
    assert!(text.contains("Some **bold** text."), "{text}");
    assert!(text.contains("one") && text.contains("two"), "{text}");
    assert!(
        !text.contains("<p>") && !text.contains("var hidden"),
        "{text}"
    );

    // Redirects within the allowed server are followed.
    let out = fetch(&tool, &format!("http://127.0.0.1:{}/to-root", server.port)).await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out
        .content
        .contains(&format!("URL: http://127.0.0.1:{}/plain", server.port)));
    assert!(out.content.ends_with("just text\n"), "{}", out.content);
}

#[tokio::test]
async fn r9_6_web_fetch_allows_by_host_name_and_cidr() {
    let server = serve().await;
    let by_name = fetcher(&["localhost"]);
    let out = fetch(&by_name, &format!("http://localhost:{}/plain", server.port)).await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out.content.ends_with("just text\n"));
    let by_cidr = fetcher(&["127.0.0.0/8"]);
    let out = fetch(&by_cidr, &format!("http://127.0.0.1:{}/plain", server.port)).await;
    assert!(!out.is_error, "{}", out.content);
}

#[tokio::test]
async fn r9_6_web_fetch_checks_every_redirect_hop() {
    let server = serve().await;
    let tool = fetcher(&["127.0.0.1"]);
    for (path, expected) in [
        ("/to-metadata", "169.254.169.254 is a link-local address"),
        ("/to-private", "10.0.0.1 is a private address"),
    ] {
        let before = server.requests.load(Ordering::SeqCst);
        let out = fetch(&tool, &format!("http://127.0.0.1:{}{path}", server.port)).await;
        assert!(out.is_error, "{path}");
        assert!(
            out.content.starts_with("refused: http://"),
            "{path}: {}",
            out.content
        );
        assert!(out.content.contains(expected), "{path}: {}", out.content);
        // Only the allowed first hop was requested; the refused hop never left the guard.
        assert_eq!(server.requests.load(Ordering::SeqCst), before + 1);
    }
    let out = fetch(&tool, &format!("http://127.0.0.1:{}/loop", server.port)).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("too many redirects (more than 5)"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn r9_6_web_fetch_caps_and_refuses_binary() {
    let server = serve().await;
    let tool = fetcher(&["127.0.0.1"]);
    let out = fetch(&tool, &format!("http://127.0.0.1:{}/big", server.port)).await;
    assert!(!out.is_error);
    assert!(out.content.len() < RETURN_CAP + 200);
    assert!(out
        .content
        .ends_with("[... truncated: showing 65536 of 100000 bytes of text]"));

    let out = fetch(&tool, &format!("http://127.0.0.1:{}/huge", server.port)).await;
    assert!(
        out.content
            .ends_with("[the body was cut after 2097152 bytes]"),
        "{}",
        &out.content[out.content.len() - 200..]
    );

    let out = fetch(&tool, &format!("http://127.0.0.1:{}/image", server.port)).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("returned image/png content"),
        "{}",
        out.content
    );

    let out = fetch(&tool, &format!("http://127.0.0.1:{}/missing", server.port)).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("Status: 404 Not Found"),
        "{}",
        out.content
    );
    assert!(out.content.ends_with("no such page"));
}

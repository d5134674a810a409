//! The scripted HTTP/1.1 server on 127.0.0.1 that the provider clients' tests run against, so
//! the real reqwest, SSE and timeout paths run: it answers one connection with a list of
//! steps (bytes to write, pauses) and hands back the request it read.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use turnkey_providers::{ChatRequest, ChatResponse, Provider, ProviderError};

/// No test may take longer than this, whatever the client does.
pub const TEST_BOUND: Duration = Duration::from_secs(15);

/// What the server does on one connection, in order.
#[derive(Clone)]
pub enum Step {
    Write(Vec<u8>),
    Sleep(Duration),
}

pub fn write(s: impl Into<String>) -> Step {
    Step::Write(s.into().into_bytes())
}

pub fn chunk(data: &str) -> Step {
    write(format!("{:x}\r\n{data}\r\n", data.len()))
}

pub fn sse_head() -> Step {
    write(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
    )
}

pub fn plain(status: &str, headers: &str, body: &str) -> Vec<Step> {
    vec![write(format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         {headers}Connection: close\r\n\r\n{body}",
        body.len()
    ))]
}

/// A server that answers one connection with `steps` and hands back the request it read
/// as soon as it has read it (the steps may still be running, or sleeping).
pub struct Server {
    pub base_url: String,
    pub request: oneshot::Receiver<String>,
}

pub async fn serve(steps: Vec<Step>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, request) = oneshot::channel();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        tx.send(read_request(&mut sock).await).unwrap();
        for step in steps {
            match step {
                // The client may hang up early (it gave up); that is its right.
                Step::Write(bytes) => {
                    if sock.write_all(&bytes).await.is_err() {
                        break;
                    }
                    if sock.flush().await.is_err() {
                        break;
                    }
                }
                Step::Sleep(d) => tokio::time::sleep(d).await,
            }
        }
    });
    Server {
        base_url: format!("http://{addr}/v1/"),
        request,
    }
}

/// Head and body of one request (the body by its Content-Length).
pub async fn read_request(sock: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        let n = sock.read(&mut tmp).await.unwrap();
        assert!(n > 0, "client closed before sending a request");
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = sock.read(&mut tmp).await.unwrap();
        assert!(n > 0, "client closed mid-body");
        buf.extend_from_slice(&tmp[..n]);
    }
    String::from_utf8(buf).unwrap()
}

/// Runs one call against `steps`; returns the result, the deltas seen and the raw request.
pub async fn call(
    steps: Vec<Step>,
    req: ChatRequest,
    idle_s: u64,
    provider: fn(&str, u64) -> Arc<dyn Provider>,
) -> (Result<ChatResponse, ProviderError>, Vec<String>, String) {
    tokio::time::timeout(TEST_BOUND, async {
        let server = serve(steps).await;
        let p = provider(&server.base_url, idle_s);
        let deltas = Mutex::new(Vec::new());
        let sink = |t: &str| deltas.lock().unwrap().push(t.to_owned());
        let result = p.chat(&req, &sink).await;
        drop(p);
        let raw = server.request.await.unwrap();
        (result, deltas.into_inner().unwrap(), raw)
    })
    .await
    .expect("test exceeded its time bound")
}

pub fn request_body(raw: &str) -> serde_json::Value {
    let (_, body) = raw.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap()
}

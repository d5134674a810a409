//! A JSON-RPC 2.0 client for turnkey's `GET /v1/ws`, on tokio-tungstenite: calls wait for
//! the answer with their id while notifications (`event`) are kept in arrival order.
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// One call may wait this long for its answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How the connection ended, when it did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closed {
    pub code: Option<u16>,
    pub reason: String,
}

pub struct WsClient {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    notifications: VecDeque<Value>,
    pub closed: Option<Closed>,
}

impl WsClient {
    /// Connects to `ws://…/v1/ws` of a turnkey at `http_base` (`http://127.0.0.1:PORT`).
    pub async fn connect(http_base: &str) -> Self {
        let url = format!("{}/v1/ws", http_base.replacen("http://", "ws://", 1));
        let (socket, _) =
            tokio::time::timeout(CALL_TIMEOUT, tokio_tungstenite::connect_async(&url))
                .await
                .unwrap_or_else(|_| panic!("connecting to {url} timed out"))
                .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
        Self {
            socket,
            next_id: 0,
            notifications: VecDeque::new(),
            closed: None,
        }
    }

    /// Connects over a socket whose receive buffer is `recv_buffer` bytes, so that a client
    /// that stops reading makes the server's writes wait soon, whatever the host's defaults.
    pub async fn connect_with_recv_buffer(http_base: &str, recv_buffer: u32) -> Self {
        let url = format!("{}/v1/ws", http_base.replacen("http://", "ws://", 1));
        let addr: std::net::SocketAddr = http_base
            .trim_start_matches("http://")
            .parse()
            .unwrap_or_else(|e| panic!("{http_base} is not http://ip:port: {e}"));
        let socket = tokio::net::TcpSocket::new_v4().unwrap_or_else(|e| panic!("socket: {e}"));
        socket
            .set_recv_buffer_size(recv_buffer)
            .unwrap_or_else(|e| panic!("SO_RCVBUF: {e}"));
        let tcp = socket
            .connect(addr)
            .await
            .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
        let (socket, _) = tokio::time::timeout(
            CALL_TIMEOUT,
            tokio_tungstenite::client_async(url.as_str(), MaybeTlsStream::Plain(tcp)),
        )
        .await
        .unwrap_or_else(|_| panic!("handshake with {url} timed out"))
        .unwrap_or_else(|e| panic!("handshake with {url}: {e}"));
        Self {
            socket,
            next_id: 0,
            notifications: VecDeque::new(),
            closed: None,
        }
    }

    /// Connects and authenticates with `token`, asserting success.
    pub async fn connect_as(http_base: &str, token: &str) -> Self {
        let mut c = Self::connect(http_base).await;
        let r = c.call("auth", json!({ "token": token })).await;
        assert!(r.get("result").is_some(), "auth failed: {r}");
        c
    }

    /// Sends raw text.
    pub async fn send_text(&mut self, text: &str) {
        self.socket
            .send(Message::text(text))
            .await
            .unwrap_or_else(|e| panic!("websocket send: {e}"));
    }

    /// Sends a request and returns the whole answer object (`result` or `error`).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_text(&req.to_string()).await;
        self.answer_to(json!(id)).await
    }

    /// `result` of a call, panicking with the error when it failed.
    pub async fn ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.call(method, params).await;
        match r.get("result") {
            Some(v) => v.clone(),
            None => panic!("{method} failed: {r}"),
        }
    }

    /// Waits for the answer with `id`, keeping notifications that come first.
    pub async fn answer_to(&mut self, id: Value) -> Value {
        let deadline = tokio::time::Instant::now() + CALL_TIMEOUT;
        loop {
            let msg = self
                .recv_until(deadline)
                .await
                .unwrap_or_else(|| panic!("no answer to id {id} (closed: {:?})", self.closed));
            if msg.get("method").is_some() && msg.get("id").is_none() {
                self.notifications.push_back(msg);
                continue;
            }
            if msg["id"] == id {
                return msg;
            }
            panic!("answer to another id while waiting for {id}: {msg}");
        }
    }

    /// The next notification within `timeout`, or `None`.
    pub async fn notification(&mut self, timeout: Duration) -> Option<Value> {
        if let Some(n) = self.notifications.pop_front() {
            return Some(n);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let msg = self.recv_until(deadline).await?;
        assert!(
            msg.get("method").is_some() && msg.get("id").is_none(),
            "an answer while waiting for a notification: {msg}"
        );
        Some(msg)
    }

    /// Collects `event` notifications until `stop` holds for one (included), or `timeout`.
    pub async fn events_until(
        &mut self,
        timeout: Duration,
        mut stop: impl FnMut(&Value) -> bool,
    ) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut got = Vec::new();
        while let Some(n) = self
            .notification(deadline - tokio::time::Instant::now())
            .await
        {
            assert_eq!(n["method"], "event", "{n}");
            let ev = n["params"].clone();
            let done = stop(&ev);
            got.push(ev);
            if done {
                break;
            }
        }
        got
    }

    /// Waits for the server to close the connection (`None` on timeout).
    pub async fn wait_closed(&mut self, timeout: Duration) -> Option<Closed> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.closed.is_none() {
            match self.recv_until(deadline).await {
                Some(_) => {}
                None if self.closed.is_some() => break,
                None => return None,
            }
        }
        self.closed.clone()
    }

    /// Closes from this side.
    pub async fn close(mut self) {
        // The server may already be gone; nothing to report then.
        if let Err(e) = self.socket.close(None).await {
            eprintln!("websocket close: {e}");
        }
    }

    /// The next JSON text frame before `deadline`; `None` on timeout or close.
    async fn recv_until(&mut self, deadline: tokio::time::Instant) -> Option<Value> {
        loop {
            if self.closed.is_some() {
                return None;
            }
            let frame = match tokio::time::timeout_at(deadline, self.socket.next()).await {
                Err(_) => return None,
                Ok(None) => {
                    self.closed = Some(Closed {
                        code: None,
                        reason: "stream ended".into(),
                    });
                    return None;
                }
                Ok(Some(Err(e))) => {
                    self.closed = Some(Closed {
                        code: None,
                        reason: format!("error: {e}"),
                    });
                    return None;
                }
                Ok(Some(Ok(m))) => m,
            };
            match frame {
                Message::Text(t) => {
                    return Some(
                        serde_json::from_str(t.as_str())
                            .unwrap_or_else(|e| panic!("not JSON from the server ({e}): {t}")),
                    )
                }
                Message::Close(frame) => {
                    self.closed = Some(Closed {
                        code: frame.as_ref().map(|f| u16::from(f.code)),
                        reason: frame.map(|f| f.reason.to_string()).unwrap_or_default(),
                    });
                    return None;
                }
                // Pings are answered by tungstenite itself; pongs and binary carry nothing.
                _ => {}
            }
        }
    }
}

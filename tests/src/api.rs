//! A thin reqwest client for the HTTP API of API.md. Calls return the status and the JSON body
//! as they came, so error-path tests can assert codes; helpers wait (bounded) for states.
use crate::wait::{eventually, within};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// One HTTP answer: status, JSON body (`Null` when the body is not JSON) and the raw text.
#[derive(Clone, Debug)]
pub struct Resp {
    pub status: u16,
    pub body: Value,
    pub text: String,
    pub content_type: String,
    /// The `Retry-After` header, when there was one.
    pub retry_after: Option<String>,
}

impl Resp {
    /// `error.code` of an error body, if any.
    pub fn error_code(&self) -> Option<&str> {
        self.body.pointer("/error/code").and_then(Value::as_str)
    }

    /// A string field of the body, panicking with the whole answer when it is missing.
    pub fn str_field(&self, field: &str) -> String {
        match self.body.get(field) {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => panic!("answer has no `{field}`: {} {}", self.status, self.text),
        }
    }
}

/// One server-sent event as the client saw it.
#[derive(Clone, Debug)]
pub struct SseEvent {
    pub id: Option<i64>,
    pub kind: String,
    pub data: Value,
}

/// An SSE event stream the server has answered (`Api::open_events_sse`).
pub struct SseStream {
    resp: reqwest::Response,
    deadline: tokio::time::Instant,
}

impl SseStream {
    /// Reads until `stop` returns true for an event, the stream ends, or the time given at
    /// opening passes; returns what arrived.
    pub async fn read_until(self, mut stop: impl FnMut(&SseEvent) -> bool) -> Vec<SseEvent> {
        let mut stream = self.resp.bytes_stream().eventsource();
        let mut got = Vec::new();
        while let Ok(Some(item)) = tokio::time::timeout_at(self.deadline, stream.next()).await {
            let ev = item.unwrap_or_else(|e| panic!("SSE parse error: {e}"));
            let ev = SseEvent {
                id: ev.id.parse().ok(),
                kind: ev.event,
                data: serde_json::from_str(&ev.data).unwrap_or(Value::String(ev.data)),
            };
            let done = stop(&ev);
            got.push(ev);
            if done {
                break;
            }
        }
        got
    }
}

/// Client for one turnkey process.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Api {
    pub fn new(base: &str, token: Option<&str>) -> Self {
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_else(|e| panic!("reqwest client: {e}"));
        Self {
            base: base.trim_end_matches('/').to_string(),
            token: token.map(str::to_string),
            http,
        }
    }

    /// The same client with another bearer token (`None`: no Authorization header).
    pub fn with_token(&self, token: Option<&str>) -> Self {
        Self {
            token: token.map(str::to_string),
            ..self.clone()
        }
    }

    fn builder(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut b = self
            .http
            .request(method, format!("{}{path}", self.base))
            .timeout(REQUEST_TIMEOUT);
        if let Some(t) = &self.token {
            b = b.bearer_auth(t);
        }
        b
    }

    /// Sends a request; transport errors (the process died, ...) come back as `Err`.
    pub async fn try_send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<Resp, String> {
        let mut b = self.builder(method.clone(), path);
        if let Some(body) = body {
            b = b.json(body);
        }
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let resp = b
            .send()
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        read(resp).await
    }

    /// Sends raw bytes as the body with the given content type.
    pub async fn send_raw(&self, path: &str, content_type: &str, body: Vec<u8>) -> Resp {
        let resp = self
            .builder(reqwest::Method::POST, path)
            .header("Content-Type", content_type)
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        read(resp)
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.try_send(reqwest::Method::GET, path, None, &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    pub async fn post(&self, path: &str, body: &Value) -> Resp {
        self.try_send(reqwest::Method::POST, path, Some(body), &[])
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    pub async fn healthz(&self) -> Resp {
        self.get("/healthz").await
    }

    pub async fn readyz(&self) -> Resp {
        self.get("/readyz").await
    }

    /// `POST /v1/sessions` with an empty body.
    pub async fn create_session(&self) -> Resp {
        self.post("/v1/sessions", &json!({})).await
    }

    /// Creates a session and returns its id, panicking unless the answer is 201.
    pub async fn create_session_id(&self) -> String {
        let r = self.create_session().await;
        assert_eq!(r.status, 201, "POST /v1/sessions: {}", r.text);
        r.str_field("id")
    }

    pub async fn session(&self, id: &str) -> Resp {
        self.get(&format!("/v1/sessions/{id}")).await
    }

    /// `POST /v1/sessions/{id}/submissions`; `Err` when the transport fails (e.g. a failpoint).
    pub async fn try_submit(
        &self,
        session: &str,
        text: &str,
        request_id: Option<&str>,
    ) -> Result<Resp, String> {
        let mut body = json!({ "text": text });
        if let Some(id) = request_id {
            body["request_id"] = json!(id);
        }
        self.try_send(
            reqwest::Method::POST,
            &format!("/v1/sessions/{session}/submissions"),
            Some(&body),
            &[],
        )
        .await
    }

    /// `PATCH /v1/sessions/{session}` with `body`, panicking on transport errors.
    pub async fn patch_session(&self, session: &str, body: &Value) -> Resp {
        self.try_send(
            reqwest::Method::PATCH,
            &format!("/v1/sessions/{session}"),
            Some(body),
            &[],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like `try_submit`, panicking on transport errors.
    pub async fn submit(&self, session: &str, text: &str, request_id: Option<&str>) -> Resp {
        self.try_submit(session, text, request_id)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Submits and returns the admission id, panicking unless the answer is 202.
    pub async fn submit_accepted(&self, session: &str, text: &str) -> String {
        let request_id = uuid::Uuid::new_v4().to_string();
        let r = self.submit(session, text, Some(&request_id)).await;
        assert_eq!(r.status, 202, "submit {text:?}: {}", r.text);
        r.str_field("admission_id")
    }

    pub async fn admission(&self, id: &str) -> Resp {
        self.get(&format!("/v1/admissions/{id}")).await
    }

    /// Polls the admission until `pred(status)` holds; `Err` with the last answer on timeout.
    pub async fn wait_admission(
        &self,
        id: &str,
        pred: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<Value, String> {
        let path = format!("/v1/admissions/{id}");
        // The last answer, for the message when the bound passes.
        let last = std::sync::Mutex::new(String::new());
        let found = within(timeout, || async {
            match self.try_send(reqwest::Method::GET, &path, None, &[]).await {
                Ok(r) if r.status == 200 && pred(r.body["status"].as_str().unwrap_or("")) => {
                    return Some(r.body)
                }
                Ok(r) => *lock(&last) = format!("{} {}", r.status, r.text),
                Err(e) => *lock(&last) = e,
            }
            None
        })
        .await;
        found.ok_or_else(|| {
            let last = lock(&last).clone();
            format!("admission {id}: condition not met within {timeout:?}; last: {last}")
        })
    }

    /// Waits for `terminal` and returns the admission, panicking on timeout.
    pub async fn wait_terminal(&self, id: &str, timeout: Duration) -> Value {
        self.wait_admission(id, |s| s == "terminal", timeout)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Submits `text` to `session`, waits for its turn to complete, and answers what the model
    /// was asked so far (`ScriptedProvider::asked`). The session runs its inputs one at a time
    /// in order, so an earlier input run again (or run when it should not have been) reached
    /// the model before this turn: the marker that proves nothing more happened.
    pub async fn asked_after_a_later_turn(
        &self,
        provider: &crate::ScriptedProvider,
        session: &str,
        text: &str,
    ) -> Vec<String> {
        let later = self.submit_accepted(session, text).await;
        let done = self.wait_terminal(&later, crate::wait::BOUND).await;
        assert_eq!(done["outcome"]["result"], "completed", "{done}");
        provider.asked()
    }

    /// `GET /v1/sessions/{id}/events?since=SEQ` (JSON).
    pub async fn events(&self, session: &str, since: i64) -> Resp {
        self.get(&format!("/v1/sessions/{session}/events?since={since}"))
            .await
    }

    /// One page of events and its `next_since`.
    pub async fn events_page(&self, session: &str, since: i64) -> (Vec<Value>, i64) {
        let r = self.events(session, since).await;
        assert_eq!(r.status, 200, "GET events since {since}: {}", r.text);
        let events = r
            .body
            .get("events")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_else(|| panic!("no `events` array: {}", r.text));
        let next = r
            .body
            .get("next_since")
            .and_then(Value::as_i64)
            .unwrap_or_else(|| panic!("no integer `next_since`: {}", r.text));
        (events, next)
    }

    /// Every event after `since`, following `next_since` until a page is empty (bounded).
    pub async fn all_events(&self, session: &str, since: i64) -> Vec<Value> {
        let mut all = Vec::new();
        let mut cursor = since;
        for _ in 0..1000 {
            let (page, next) = self.events_page(session, cursor).await;
            if page.is_empty() {
                return all;
            }
            assert!(
                next > cursor,
                "next_since {next} did not advance past {cursor}"
            );
            all.extend(page);
            cursor = next;
        }
        panic!("events of {session}: more than 1000 pages");
    }

    /// The text of the session's first `message.delta` after its `resumes`-th `turn.resumed`
    /// (0: from the start), once there is one; panics after `timeout`.
    pub async fn first_delta(&self, session: &str, resumes: usize, timeout: Duration) -> String {
        let what = format!("message.delta in {session}");
        eventually(timeout, &what, || async {
            let events = self.all_events(session, 0).await;
            let from = match resumes {
                0 => Some(0),
                n => events
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e["kind"] == "turn.resumed")
                    .nth(n - 1)
                    .map(|(i, _)| i + 1),
            };
            let delta =
                from.and_then(|from| events[from..].iter().find(|e| e["kind"] == "message.delta"));
            delta.map(|d| d["data"]["text"].as_str().unwrap_or_default().to_owned())
        })
        .await
    }

    /// Reads the SSE event stream (optionally with `Last-Event-ID`) until `stop` returns true
    /// for an event, the stream ends, or `how_long` passes; returns what arrived.
    pub async fn events_sse(
        &self,
        session: &str,
        last_event_id: Option<i64>,
        how_long: Duration,
        stop: impl FnMut(&SseEvent) -> bool,
    ) -> Vec<SseEvent> {
        self.open_events_sse(session, last_event_id, how_long)
            .await
            .read_until(stop)
            .await
    }

    /// Opens the SSE event stream (optionally with `Last-Event-ID`), returning once the server
    /// answered: it subscribes to the session before it answers (`web/src/routes/events.rs`),
    /// so every event committed from then on comes live. Read within `how_long`.
    pub async fn open_events_sse(
        &self,
        session: &str,
        last_event_id: Option<i64>,
        how_long: Duration,
    ) -> SseStream {
        let mut b = self
            .http
            .get(format!("{}/v1/sessions/{session}/events", self.base))
            .header("Accept", "text/event-stream")
            .timeout(how_long + Duration::from_secs(5));
        if let Some(t) = &self.token {
            b = b.bearer_auth(t);
        }
        if let Some(id) = last_event_id {
            b = b.header("Last-Event-ID", id.to_string());
        }
        let resp = b
            .send()
            .await
            .unwrap_or_else(|e| panic!("SSE events of {session}: {e}"));
        let content_type = content_type(&resp);
        if resp.status().as_u16() != 200 || !content_type.starts_with("text/event-stream") {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            panic!("SSE events of {session}: {status} {content_type:?} {text}");
        }
        SseStream {
            resp,
            deadline: tokio::time::Instant::now() + how_long,
        }
    }

    /// The outbox row of the reply to `admission` (`GET /v1/outbox?status=sent`), once it is
    /// `sent`; panics after `bound`.
    pub async fn reply_sent(&self, admission: &str, bound: Duration) -> Value {
        let key = format!("reply:{admission}");
        eventually(bound, &format!("sent outbox row {key}"), || async {
            let sent = self.get("/v1/outbox?status=sent").await;
            let rows = sent.body["deliveries"].as_array()?;
            rows.iter()
                .find(|row| row["idempotency_key"] == key.as_str())
                .cloned()
        })
        .await
    }

    /// `{"messages": [...]}` of a session, as a list.
    pub async fn messages(&self, session: &str) -> Vec<Value> {
        let r = self.get(&format!("/v1/sessions/{session}/messages")).await;
        assert_eq!(r.status, 200, "GET messages: {}", r.text);
        r.body
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_else(|| panic!("no `messages` array: {}", r.text))
    }

    pub async fn interrupt(&self, session: &str) -> Resp {
        self.post(&format!("/v1/sessions/{session}/interrupt"), &json!({}))
            .await
    }

    /// POSTs a JSON body of `size` bytes over a raw connection, reading the answer while the
    /// body is still being written (a server that refuses early may close before reading it
    /// all). Returns the status code of the answer.
    pub async fn post_oversized(&self, path: &str, size: usize) -> Result<u16, String> {
        let host = self
            .base
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let stream = tokio::net::TcpStream::connect(&host)
            .await
            .map_err(|e| format!("connect {host}: {e}"))?;
        let (mut rd, mut wr) = stream.into_split();
        let auth = self
            .token
            .as_ref()
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {size}\r\n{auth}Connection: close\r\n\r\n"
        );
        let writer = tokio::spawn(async move {
            wr.write_all(head.as_bytes()).await?;
            let prefix = b"{\"text\":\"";
            wr.write_all(prefix).await?;
            let chunk = vec![b'a'; 64 * 1024];
            let mut left = size.saturating_sub(prefix.len() + 2);
            while left > 0 {
                let n = left.min(chunk.len());
                wr.write_all(&chunk[..n]).await?;
                left -= n;
            }
            wr.write_all(b"\"}").await
        });
        let mut buf = Vec::new();
        let read = tokio::time::timeout(REQUEST_TIMEOUT, async {
            let mut tmp = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = rd.read(&mut tmp).await?;
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&tmp[..n]);
            }
            Ok::<_, std::io::Error>(())
        })
        .await;
        writer.abort();
        match read {
            Err(_) => return Err("no answer in time".into()),
            Ok(Err(e)) if buf.is_empty() => return Err(format!("read: {e}")),
            Ok(_) => {}
        }
        let head = String::from_utf8_lossy(&buf);
        head.split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no status line in {head:?}"))
    }
}

fn content_type(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

async fn read(resp: reqwest::Response) -> Result<Resp, String> {
    let status = resp.status().as_u16();
    let content_type = content_type(&resp);
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = resp
        .text()
        .await
        .map_err(|e| format!("reading body: {e}"))?;
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Ok(Resp {
        status,
        body,
        text,
        content_type,
        retry_after,
    })
}

fn lock(last: &std::sync::Mutex<String>) -> std::sync::MutexGuard<'_, String> {
    last.lock().unwrap_or_else(|e| e.into_inner())
}

//! The HTTP calls `turnkey chat` makes, and nothing else: it is a thin client of the public API
//! (docs/api.md). Answers are read into the few fields the client shows; an error answer keeps
//! its stable `error.code` so the caller can decide what a person is told.
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::fmt;
use std::time::Duration;

/// How long one plain request may take (the event stream has its own idle bound).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const USER_AGENT: &str = concat!("turnkey-chat/", env!("CARGO_PKG_VERSION"));

/// Why a call did not give the answer asked for.
#[derive(Clone, Debug)]
pub enum CallError {
    /// No HTTP answer at all: refused, reset, timed out. The request may or may not have
    /// reached the server.
    Unreachable(String),
    /// An HTTP answer other than success, with the API's error code when it had one.
    Status {
        status: u16,
        code: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// A success whose body is not what the API promises.
    BadAnswer(String),
}

impl CallError {
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether sending the same request again later may succeed: no answer, or the server
    /// asked to wait (shutting down, store unavailable).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable(_) => true,
            Self::Status { status, code, .. } => {
                *status == 503 && matches!(code.as_str(), "shutting_down" | "store_unavailable")
                    || *status == 502
                    || *status == 504
            }
            Self::BadAnswer(_) => false,
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreachable(why) => f.write_str(why),
            Self::Status {
                status,
                code,
                message,
                ..
            } => write!(f, "{status} {code}: {message}"),
            Self::BadAnswer(why) => write!(f, "unexpected answer: {why}"),
        }
    }
}

/// `GET /v1/sessions/{id}`, the fields the client uses.
#[derive(Clone, Debug, Deserialize)]
pub struct SessionView {
    pub id: String,
    pub state: String,
    pub last_event_seq: i64,
    /// What its turns run on (`None`: no provider configured).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub pending_approvals: Vec<PendingApproval>,
    #[serde(default)]
    pub unknown_tool_runs: Vec<Value>,
}

/// A stored file, as `POST /v1/files` answers it.
#[derive(Clone, Debug, Deserialize)]
pub struct Uploaded {
    pub file_id: String,
    pub name: String,
    pub content_type: String,
    pub bytes: u64,
}

/// An approval waiting for a person, as `approval.requested` and `pending_approvals` carry it.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct PendingApproval {
    pub approval_id: String,
    pub call_id: String,
    #[serde(default)]
    pub name: Value,
    #[serde(default)]
    pub args: Value,
    #[serde(default)]
    pub reason: Value,
    #[serde(default)]
    pub expires_at: Value,
}

/// One transcript row of `GET /v1/sessions/{id}/messages`.
#[derive(Clone, Debug, Deserialize)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Value>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub display: Option<Value>,
}

/// The receipt of a submission or a retry.
#[derive(Clone, Debug, Deserialize)]
pub struct Receipt {
    pub admission_id: String,
    /// The server already had this request id: the original receipt, nothing queued twice.
    #[serde(default)]
    pub duplicate: bool,
}

/// A client bound to one server and one token.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    pub fn new(base_url: &str, token: &str) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(USER_AGENT)
            .build()
            .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
        Ok(Self {
            http,
            base: base_url.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    async fn call<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        let resp = req
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(unreachable)?;
        let resp = check(resp).await?;
        let body = resp.bytes().await.map_err(unreachable)?;
        serde_json::from_slice(&body).map_err(|e| CallError::BadAnswer(e.to_string()))
    }

    /// `POST /v1/sessions` with an empty body.
    pub async fn create_session(&self) -> Result<SessionView, CallError> {
        self.call(
            self.request(reqwest::Method::POST, "/v1/sessions")
                .json(&json!({})),
        )
        .await
    }

    pub async fn session(&self, id: &str) -> Result<SessionView, CallError> {
        self.call(self.request(reqwest::Method::GET, &format!("/v1/sessions/{id}")))
            .await
    }

    /// `GET /v1/models`: the models a session can be switched to.
    pub async fn models(&self) -> Result<Vec<String>, CallError> {
        #[derive(Deserialize)]
        struct Entry {
            id: String,
        }
        #[derive(Deserialize)]
        struct List {
            data: Vec<Entry>,
        }
        let list: List = self
            .call(self.request(reqwest::Method::GET, "/v1/models"))
            .await?;
        // The `direct/` ids answer without a session: no session can switch to one.
        Ok(list
            .data
            .into_iter()
            .map(|e| e.id)
            .filter(|id| !id.starts_with("direct/"))
            .collect())
    }

    /// `PATCH /v1/sessions/{id}` `{model}`: the session's next turn runs on `model`.
    pub async fn set_model(&self, id: &str, model: &str) -> Result<SessionView, CallError> {
        self.call(
            self.request(reqwest::Method::PATCH, &format!("/v1/sessions/{id}"))
                .json(&json!({ "model": model })),
        )
        .await
    }

    pub async fn messages(&self, id: &str) -> Result<Vec<Message>, CallError> {
        #[derive(Deserialize)]
        struct Page {
            messages: Vec<Message>,
        }
        let page: Page = self
            .call(self.request(reqwest::Method::GET, &format!("/v1/sessions/{id}/messages")))
            .await?;
        Ok(page.messages)
    }

    /// One submission under `key` (sent as `Idempotency-Key`), with the files of `attachments`
    /// (file ids): sending it again with the same key returns the same receipt and runs
    /// nothing twice.
    pub async fn submit(
        &self,
        session: &str,
        text: &str,
        attachments: &[String],
        key: &str,
    ) -> Result<Receipt, CallError> {
        let mut body = json!({});
        if !text.is_empty() || attachments.is_empty() {
            body["text"] = json!(text);
        }
        if !attachments.is_empty() {
            body["attachments"] = attachments
                .iter()
                .map(|id| json!({ "file_id": id }))
                .collect();
        }
        self.call(
            self.request(
                reqwest::Method::POST,
                &format!("/v1/sessions/{session}/submissions"),
            )
            .header("Idempotency-Key", key)
            .json(&body),
        )
        .await
    }

    /// `POST /v1/files?name=NAME` with `bytes`: the stored file's id and sniffed type.
    pub async fn upload(&self, name: &str, bytes: Vec<u8>) -> Result<Uploaded, CallError> {
        let mut url = reqwest::Url::parse(&format!("{}/v1/files", self.base))
            .map_err(|e| CallError::BadAnswer(e.to_string()))?;
        url.query_pairs_mut().append_pair("name", name);
        self.call(
            self.http
                .post(url)
                .bearer_auth(&self.token)
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(bytes),
        )
        .await
    }

    /// Whether a running turn was signalled.
    pub async fn interrupt(&self, session: &str) -> Result<bool, CallError> {
        let answer: Value = self
            .call(
                self.request(
                    reqwest::Method::POST,
                    &format!("/v1/sessions/{session}/interrupt"),
                )
                .json(&json!({ "reason": "interrupted from turnkey chat" })),
            )
            .await?;
        Ok(answer["interrupted"].as_bool().unwrap_or(false))
    }

    pub async fn decide_approval(
        &self,
        session: &str,
        approval_id: &str,
        approve: bool,
    ) -> Result<(), CallError> {
        let decision = if approve { "approve" } else { "deny" };
        self.call::<Value>(
            self.request(
                reqwest::Method::POST,
                &format!("/v1/sessions/{session}/approvals/{approval_id}"),
            )
            .json(&json!({ "decision": decision })),
        )
        .await
        .map(drop)
    }

    /// `POST /v1/admissions/{id}/retry`: runs an `unknown` input again, once.
    pub async fn retry(&self, admission_id: &str) -> Result<Receipt, CallError> {
        self.call(self.request(
            reqwest::Method::POST,
            &format!("/v1/admissions/{admission_id}/retry"),
        ))
        .await
    }

    /// Opens the event stream after `since`; the caller reads the body as it comes.
    pub async fn open_events(
        &self,
        session: &str,
        since: i64,
    ) -> Result<reqwest::Response, CallError> {
        let resp = self
            .request(
                reqwest::Method::GET,
                &format!("/v1/sessions/{session}/events?since={since}"),
            )
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(unreachable)?;
        check(resp).await
    }
}

/// A success passes; anything else becomes `CallError::Status` with the API's error code.
async fn check(resp: reqwest::Response) -> Result<reqwest::Response, CallError> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    let text = |field: &str| {
        body.pointer(&format!("/error/{field}"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Err(CallError::Status {
        status: status.as_u16(),
        code: text("code").unwrap_or_else(|| "http_error".to_owned()),
        message: text("message").unwrap_or_else(|| {
            status
                .canonical_reason()
                .unwrap_or("unexpected status")
                .to_owned()
        }),
        retry_after,
    })
}

/// No answer, in words: the person knows which server they talk to, and the HTTP library's
/// error chain (the URL, "client error (Connect)", an os error number) gives them nothing more
/// to act on.
fn unreachable(e: reqwest::Error) -> CallError {
    CallError::Unreachable(lost_words(&e).to_owned())
}

/// What a transport error means to the person at the terminal.
pub fn lost_words(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "the server did not answer in time"
    } else if e.is_connect() {
        "the server does not answer"
    } else {
        "the server closed the connection"
    }
}

//! What every handler shares (`AppState`): the gateway, the operator's token and its first use,
//! the request counters, the CORS policy, the API tokens seen, the shutdown flag. Built by
//! `startup`, read by every route through `web::Data<AppState>`.
use crate::cors::CorsPolicy;
use crate::metrics::Metrics;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use turnkey_actors::Gateway;
use turnkey_storage::Store;

/// The operator token's file in the data directory, when `auth.operator_token` is not set.
pub const OPERATOR_TOKEN_FILE: &str = "operator.token";
/// Written in the data directory the first time the operator token from `operator.token` is
/// used: until then every start says where the token is.
const OPERATOR_TOKEN_USED_FILE: &str = "operator.token.used";
/// `server.sse_keepalive_s` by default.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(15);

/// What every handler shares.
pub struct AppState {
    pub gateway: Gateway,
    pub operator_token: String,
    pub metrics: Arc<Metrics>,
    pub max_body_bytes: usize,
    /// `server.sse_keepalive_s`: an idle event stream's comment, a WebSocket's ping interval.
    pub keepalive: Duration,
    /// `server.cors_origins`, read by the security middleware.
    pub cors: Arc<CorsPolicy>,
    /// API tokens' last use and revocations, for open streams.
    pub tokens: Arc<TokenWatch>,
    /// Notes the first use of a generated operator token (see [`OperatorToken::file`]).
    pub operator_used: Arc<OperatorUse>,
    /// `openai.client_tools`: what a chat completion's own tools get.
    pub client_tools: crate::configuration::ClientTools,
    shutdown: watch::Sender<bool>,
}

impl AppState {
    pub fn new(gateway: Gateway, operator_token: String, max_body_bytes: usize) -> Self {
        Self {
            gateway,
            operator_token,
            metrics: Arc::new(Metrics::new()),
            max_body_bytes,
            keepalive: DEFAULT_KEEPALIVE,
            cors: Arc::new(CorsPolicy::default()),
            tokens: Arc::new(TokenWatch::default()),
            operator_used: Arc::new(OperatorUse::default()),
            client_tools: crate::configuration::ClientTools::default(),
            shutdown: watch::channel(false).0,
        }
    }

    /// With another keep-alive interval (`server.sse_keepalive_s`).
    pub fn with_keepalive(mut self, keepalive: Duration) -> Self {
        self.keepalive = keepalive;
        self
    }

    /// Lets pages of these exact origins call the API from a browser (CORS).
    pub fn with_cors_origins(mut self, origins: Vec<String>) -> Self {
        self.cors = Arc::new(CorsPolicy::new(origins));
        self
    }

    /// From now on `/readyz` answers 503 and event streams end.
    pub fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    pub fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Resolves once shutdown has begun; long-lived responses select on it.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }
}

/// The operator's bearer token and whether this start generated it (then it is printed once).
#[derive(Clone, Debug)]
pub struct OperatorToken {
    pub value: String,
    pub generated: bool,
    /// The file it was generated into (`None` when `auth.operator_token` configures it).
    pub file: Option<PathBuf>,
}

impl OperatorToken {
    /// Whether the token of the file has been used since it was generated.
    pub fn used(&self) -> bool {
        self.file
            .as_ref()
            .is_none_or(|f| f.with_file_name(OPERATOR_TOKEN_USED_FILE).exists())
    }
}

/// The first use of the operator token read from `operator.token`: it writes
/// `operator.token.used` beside it, once, so that later starts stop saying where it is.
#[derive(Debug, Default)]
pub struct OperatorUse {
    marker: Option<PathBuf>,
    noted: std::sync::atomic::AtomicBool,
}

impl OperatorUse {
    pub fn for_token(token: &OperatorToken) -> Self {
        Self {
            marker: token
                .file
                .as_ref()
                .map(|f| f.with_file_name(OPERATOR_TOKEN_USED_FILE))
                .filter(|m| !m.exists()),
            noted: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The operator token was just accepted.
    pub fn note(&self) {
        let Some(marker) = &self.marker else { return };
        if self.noted.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        // A hint for the next start, not a record of anything: a failure only means the
        // next start says once more where the token is.
        if let Err(e) = std::fs::write(marker, b"") {
            tracing::warn!(path = %marker.display(), error = %e, "cannot note the operator token's first use");
        }
    }
}

/// Tokens seen in this process: when each was last noted as used (so `last_used_at` is written
/// at most once a minute per token), and a channel that tells open streams a token was revoked
/// here (a stream also asks the store again at each keep-alive, for revocations on other
/// replicas and expiry).
#[derive(Debug)]
pub struct TokenWatch {
    touched: dashmap::DashMap<String, i64>,
    revoked: tokio::sync::broadcast::Sender<String>,
}

impl Default for TokenWatch {
    fn default() -> Self {
        Self {
            touched: dashmap::DashMap::new(),
            revoked: tokio::sync::broadcast::channel(64).0,
        }
    }
}

impl TokenWatch {
    /// Tells every open stream of this process that token `id` was revoked.
    pub fn revoked(&self, id: &str) {
        self.touched.remove(id);
        // No receiver: no stream is open.
        if self.revoked.send(id.to_owned()).is_err() {
            tracing::debug!(token = %id, "no open stream to end");
        }
    }

    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.revoked.subscribe()
    }

    /// Notes a use of token `id` now; the store is written (in the background) only when the
    /// last note is older than [`turnkey_storage::LAST_USED_GRAIN_MS`].
    pub fn used(&self, store: &Store, id: &str) {
        let now = turnkey_storage::now_ms();
        let due = match self.touched.get(id) {
            Some(at) => now - *at >= turnkey_storage::LAST_USED_GRAIN_MS,
            None => true,
        };
        if !due {
            return;
        }
        self.touched.insert(id.to_owned(), now);
        let store = store.clone();
        let id = id.to_owned();
        actix_web::rt::spawn(async move {
            if let Err(e) = store.touch_token(&id, now).await {
                tracing::warn!(token = %id, error = %e, "cannot note when a token was last used");
            }
        });
    }
}

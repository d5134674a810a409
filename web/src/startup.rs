//! Start-up and shutdown of `turnkey serve`: store, migrations, operator principal and token,
//! the gateway, then the HTTP server. On SIGTERM/SIGINT admission stops first, running turns
//! get a bounded grace, and only then does the server stop (actix's own signal handling is off).
use crate::auth::{self, OPERATOR_ID, OPERATOR_KIND};
use crate::configuration::{InvalidConfig, ServerSettings, Settings};
use crate::error;
use crate::openapi;
use crate::routes;
use crate::security;
use crate::state::{AppState, OperatorToken, OperatorUse, OPERATOR_TOKEN_FILE};
use actix_web::body::MessageBody;
use actix_web::dev::{Server, Service, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{web, App, HttpServer};
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;
use turnkey_actors::{Gateway, GatewayError};
use turnkey_storage::{Store, StoreError};
use utoipa_actix_web::AppExt;

/// The longest `turnkey serve` takes from SIGTERM/SIGINT to its exit (SPEC R2.4): running turns
/// get `server.shutdown_grace_s`; then interrupted turns get
/// [`turnkey_actors::gateway::SETTLE_AFTER_INTERRUPT`] to settle and platform sends
/// [`turnkey_actors::gateway::OUTBOX_DRAIN`] to finish; then open HTTP connections get
/// `server.http_shutdown_grace_s`; last, buffered traces get [`crate::telemetry::FLUSH_TIMEOUT`].
/// A supervisor must wait at least this long before it kills the process: the files in
/// deploy/ (systemd TimeoutStopSec, compose stop_grace_period, Kubernetes
/// terminationGracePeriodSeconds) are checked against it by web/tests/deploy_manifests.rs.
pub fn drain_bound(server: &ServerSettings) -> Duration {
    Duration::from_secs(server.shutdown_grace_s)
        + turnkey_actors::gateway::SETTLE_AFTER_INTERRUPT
        + turnkey_actors::gateway::OUTBOX_DRAIN
        + Duration::from_secs(server.http_shutdown_grace_s)
        + crate::telemetry::FLUSH_TIMEOUT
}

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] InvalidConfig),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error(
        "cannot bind {bind}: the address is already in use by another program (llama.cpp's \
         server listens on 8080 too); start on another port with --bind {instead}, or set \
         server.bind in turnkey.toml"
    )]
    AddressInUse { bind: String, instead: String },
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("gateway: {0}")]
    Gateway(#[from] GatewayError),
}

/// A bind that failed: when another program holds the address, the way out. 8080, the
/// default, is also llama.cpp's server's port, so a first start beside one meets it.
fn bind_failed(bind: &str, source: std::io::Error) -> StartupError {
    if source.kind() != std::io::ErrorKind::AddrInUse {
        return io_err(format!("cannot bind {bind}"))(source);
    }
    // The next port up, on the same host.
    let (host, port) = bind.rsplit_once(':').unwrap_or(("127.0.0.1", "8080"));
    let next = port.parse::<u16>().map_or(8081, |p| p.saturating_add(1));
    StartupError::AddressInUse {
        bind: bind.to_owned(),
        instead: format!("{host}:{next}"),
    }
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StartupError {
    let context = context.into();
    move |source| StartupError::Io { context, source }
}

/// Creates the data directory (spills, checkpoints, the SQLite file, the operator token).
pub fn prepare_data_dir(dir: &Path) -> Result<(), StartupError> {
    std::fs::create_dir_all(dir).map_err(io_err(format!(
        "cannot create server.data_dir {}",
        dir.display()
    )))
}

/// `auth.operator_token`, else `data_dir/operator.token`, else a new one written there (0600).
pub fn resolve_operator_token(settings: &Settings) -> Result<OperatorToken, StartupError> {
    if let Some(t) = &settings.auth.operator_token {
        return Ok(OperatorToken {
            value: t.expose().trim().to_owned(),
            generated: false,
            file: None,
        });
    }
    let path = settings.server.data_dir.join(OPERATOR_TOKEN_FILE);
    if let Some(value) = read_token_file(&path)? {
        return Ok(OperatorToken {
            value,
            generated: false,
            file: Some(path),
        });
    }
    let value = auth::generate_token();
    match write_token_file(&path, &value) {
        Ok(()) => Ok(OperatorToken {
            value,
            generated: true,
            file: Some(path),
        }),
        // Another process sharing the data directory won the race: use its token.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_token_file(&path)?
            .map(|value| OperatorToken {
                value,
                generated: false,
                file: Some(path.clone()),
            })
            .ok_or_else(|| StartupError::Io {
                context: format!("{} is empty", path.display()),
                source: e,
            }),
        Err(e) => Err(io_err(format!("cannot write {}", path.display()))(e)),
    }
}

fn read_token_file(path: &PathBuf) -> Result<Option<String>, StartupError> {
    match std::fs::read_to_string(path) {
        Ok(s) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
        Ok(_) => {
            std::fs::remove_file(path)
                .map_err(io_err(format!("cannot replace {}", path.display())))?;
            Ok(None)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(format!("cannot read {}", path.display()))(e)),
    }
}

fn write_token_file(path: &PathBuf, token: &str) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(format!("{token}\n").as_bytes())?;
    f.sync_all()
}

/// Everything the server needs before it binds: the migrated store, the operator, the token
/// and the running gateway. Must run inside the actix System.
pub async fn prepare(settings: &Settings) -> Result<(AppState, OperatorToken), StartupError> {
    prepare_data_dir(&settings.server.data_dir)?;
    let store = Store::connect(&settings.database.url).await?;
    store.migrate().await?;
    store
        .ensure_principal(OPERATOR_ID, OPERATOR_ID, OPERATOR_KIND)
        .await?;
    let token = resolve_operator_token(settings)?;
    let mut runtime = settings.runtime();
    // The operator token is masked like a configured secret (SPEC R13.8).
    runtime.security.extra_secrets.push(token.value.clone());
    let gateway = Gateway::start(runtime, store).await?;
    // The gateway's own masking: it learns the keys of providers connected later.
    crate::telemetry::mask_logs(gateway.redactor().clone());
    let mut state = AppState::new(gateway, token.value.clone(), settings.server.max_body_bytes)
        .with_keepalive(Duration::from_secs(settings.server.sse_keepalive_s))
        .with_cors_origins(settings.server.cors_origins.clone());
    state.client_tools = settings.openai.client_tools;
    state.operator_used = Arc::new(OperatorUse::for_token(&token));
    Ok((state, token))
}

/// The actix-web application: routes, extractor error shapes, security headers and CORS,
/// request metrics.
pub fn build_app(
    state: web::Data<AppState>,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let metrics = state.metrics.clone();
    let limit = state.max_body_bytes;
    App::new()
        .app_data(state)
        .app_data(error::json_config(limit))
        .app_data(error::path_config())
        .app_data(error::query_config())
        .app_data(web::PayloadConfig::new(limit))
        .configure(|cfg| routes::refusals(cfg, &openapi::document().paths))
        .into_utoipa_app()
        .configure(openapi::serve)
        .into_app()
        .default_service(web::to(routes::not_found))
        .wrap(actix_web::middleware::from_fn(security::secure))
        .wrap_fn(move |req, srv| {
            let metrics = metrics.clone();
            let started = Instant::now();
            let method = req.method().clone();
            let path = req.path().to_owned();
            // The server span of the request (OpenTelemetry semantic conventions), named
            // `METHOD ROUTE` (the exporter takes the name when the span opens).
            let route = req.match_pattern().unwrap_or_else(|| "unmatched".into());
            let span = tracing::info_span!(
                "http_request",
                otel.name = %format!("{method} {route}"),
                otel.kind = "server",
                otel.status_code = tracing::field::Empty,
                http.request.method = %method,
                url.path = %path,
                http.route = %route,
                http.response.status_code = tracing::field::Empty,
            );
            let fut = {
                let _entered = span.enter();
                srv.call(req)
            };
            let recorded = span.clone();
            async move {
                let res = fut.await?;
                let route = res
                    .request()
                    .match_pattern()
                    .unwrap_or_else(|| "unmatched".into());
                let status = res.status().as_u16();
                recorded.record("http.response.status_code", status);
                if status >= 500 {
                    recorded.record("otel.status_code", "ERROR");
                }
                metrics.record_request(&route, status);
                tracing::info!(
                    %method, %path, status, ms = started.elapsed().as_millis() as u64,
                    "request"
                );
                Ok(res)
            }
            .instrument(span)
        })
}

/// A bound, not yet running server.
pub struct Application {
    server: Server,
    /// `server.shutdown_grace_s`: running turns get this long after a stop signal.
    turn_grace: Duration,
    local_addr: SocketAddr,
    state: web::Data<AppState>,
    operator_token: OperatorToken,
    /// Installed before the server is bound, so that a SIGTERM sent as soon as the listening
    /// line is read stops it gracefully instead of killing it.
    signals: StopSignals,
}

impl Application {
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let (state, operator_token) = prepare(&settings).await?;
        let signals = StopSignals::register().map_err(io_err("cannot install signal handlers"))?;
        let bind = settings.server.bind.clone();
        let listener = TcpListener::bind(&bind).map_err(|e| bind_failed(&bind, e))?;
        let local_addr = listener
            .local_addr()
            .map_err(io_err("cannot read the bound address"))?;
        let state = web::Data::new(state);
        let data = state.clone();
        // No Nagle: SSE frames are small and must leave at once, not wait for the peer's
        // delayed ACK (about 40 ms a frame otherwise).
        let server = HttpServer::new(move || build_app(data.clone()))
            .tcp_nodelay(true)
            .listen(listener)
            .map_err(io_err(format!("cannot listen on {local_addr}")))?
            .disable_signals()
            .shutdown_timeout(settings.server.http_shutdown_grace_s)
            .run();
        Ok(Self {
            server,
            turn_grace: Duration::from_secs(settings.server.shutdown_grace_s),
            local_addr,
            state,
            operator_token,
            signals,
        })
    }

    /// The address actually bound (so `--bind 127.0.0.1:0` works).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn operator_token(&self) -> &OperatorToken {
        &self.operator_token
    }

    pub fn state(&self) -> web::Data<AppState> {
        self.state.clone()
    }

    /// Serves until SIGTERM/SIGINT, then: stop admitting (503 `shutting_down`), let running
    /// turns go on for `server.shutdown_grace_s`, interrupt and settle the rest as
    /// `interrupted` (reason `shutdown`), and stop the server, whose open connections get
    /// `server.http_shutdown_grace_s`.
    pub async fn run_until_stopped(self) -> Result<(), StartupError> {
        let signals = self.signals;
        let handle = self.server.handle();
        let state = self.state.clone();
        let grace = self.turn_grace;
        let stopper = actix_web::rt::spawn(async move {
            let which = signals.recv().await;
            tracing::info!(
                signal = which,
                "stopping: admission closed, waiting for running turns"
            );
            state.begin_shutdown();
            state.gateway.shutdown(grace).await;
            handle.stop(true).await;
        });
        let served = self.server.await;
        stopper.abort();
        served.map_err(io_err("server error"))?;
        tracing::info!("stopped");
        Ok(())
    }
}

/// Printed on stderr when `serve` starts without a provider and finds no local server: it
/// serves, but refuses every submission until one is configured or connected, and says how.
pub const NO_PROVIDER_WARNING: &str = "\
warning: no model provider is configured; submissions are refused with 503 no_provider until one is.
  No local OpenAI-compatible server answered on the usual ports (Ollama 11434, LM Studio 1234,
  llama.cpp 8080, vLLM 8000; server.detect_providers). Connect one without a restart in the web
  UI (\"Connect a model\", as the operator) or with POST /v1/providers, or set one, then restart:
  - a [[providers]] table in turnkey.toml (see deploy/turnkey.example.toml), or
  - the environment: OPENAI_BASE_URL (e.g. http://127.0.0.1:8000/v1), OPENAI_API_KEY and
    OPENAI_MODEL (default gpt-4o-mini), for any OpenAI-compatible server.
";

/// With no provider configured, the first local server of `server.detect_providers` that
/// lists a model becomes the provider, and stderr says so. `None`: nothing was configured or
/// found (the caller warns).
pub async fn detect_provider(settings: &Settings) -> Option<turnkey_providers::ProviderConfig> {
    let candidates: Vec<(String, String)> = settings
        .server
        .detect_providers
        .iter()
        .map(|url| (crate::provider_probe::name_for(url), url.clone()))
        .collect();
    let own_port = settings
        .server
        .bind
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok());
    crate::provider_probe::detect(&candidates, own_port).await
}

/// The line `serve` prints about the provider it will use (the primary; the others counted).
pub fn provider_line(providers: &[turnkey_actors::provider_set::ProviderView]) -> String {
    use turnkey_actors::provider_set::{Role, Source, WindowSource};
    let Some(p) = providers
        .iter()
        .find(|p| p.role == Role::Primary)
        .or(providers.first())
    else {
        return String::new();
    };
    let how = match p.source {
        Source::Detected => {
            "detected, since none is configured; a [[providers]] table or OPENAI_* variables take precedence"
        }
        Source::Configured => "configured",
        Source::Connected => "connected in the web UI or with POST /v1/providers",
    };
    let more = match providers
        .iter()
        .filter(|p| matches!(p.role, Role::Fallback(_)))
        .count()
    {
        0 => String::new(),
        n => format!(", then {n} fallback(s)"),
    };
    let window = match p.window {
        WindowSource::Server(from) => format!("read from the server, {from}"),
        WindowSource::Configured => "configured".to_owned(),
        WindowSource::Default => {
            "the default; set context_window if the model's is smaller".to_owned()
        }
    };
    format!(
        "provider: {} ({}) at {}, model {} ({how}{more}); context window {} tokens ({window})\n",
        p.name, p.kind, p.base_url, p.model, p.context_window
    )
}

/// Printed on stderr when `serve` starts with `tools.sandbox = "auto"` on a kernel that cannot
/// confine commands (SPEC R13.7: say so, do not pretend).
pub fn sandbox_warning(state: &turnkey_tools::SandboxState) -> String {
    format!(
        "warning: the OS sandbox is NOT in force: {}.\n  Commands the agent runs and MCP servers \
         can write outside the workspace or reach the network. Use a kernel with Landlock \
         (Linux 5.13+, lsm=landlock) and seccomp, or set tools.sandbox = \"landlock\" to refuse \
         to start without it.\n",
        state.summary()
    )
}

/// `turnkey serve`: prints the one-time token line (if generated) and the listening line.
pub async fn serve(settings: Settings) -> Result<(), StartupError> {
    let configured = !settings.runtime.providers.is_empty();
    let primary = settings.runtime.providers.first().cloned();
    let detect_from = settings.clone();
    let app = Application::build(settings).await?;
    let gateway = &app.state().gateway;
    // Nothing configured: a local server on a usual port leads, at every start, before the
    // providers connected at run time (one connected by hand never hides it).
    let mut detected = false;
    if !configured {
        if let Some(found) = detect_provider(&detect_from).await {
            gateway
                .add_detected_provider(found)
                .await
                .map_err(StartupError::Gateway)?;
            detected = true;
        }
    }
    let providers = gateway.providers();
    let said = if providers.is_empty() {
        NO_PROVIDER_WARNING.to_owned()
    } else {
        provider_line(&providers)
    };
    let mut err = std::io::stderr();
    err.write_all(said.as_bytes())
        .and_then(|()| err.flush())
        .map_err(io_err("stderr"))?;
    // The primary is asked what it serves while the server starts: a wrong URL, key or model
    // name is said at once, not at the first message.
    if let Some(p) = primary.filter(|_| !detected) {
        actix_web::rt::spawn(async move {
            if let Err(why) =
                crate::provider_probe::check(&p, crate::provider_probe::CHECK_TIMEOUT).await
            {
                let line = format!(
                    "warning: provider {} may not answer: {why} (turnkey doctor checks every provider)\n",
                    p.name
                );
                let mut err = std::io::stderr();
                if err
                    .write_all(line.as_bytes())
                    .and_then(|()| err.flush())
                    .is_err()
                {
                    tracing::warn!(provider = %p.name, %why, "provider check failed");
                }
            }
        });
    }
    let sandbox = app.state().gateway.sandbox().clone();
    if !sandbox.complete() {
        let mut err = std::io::stderr();
        err.write_all(sandbox_warning(&sandbox).as_bytes())
            .and_then(|()| err.flush())
            .map_err(io_err("stderr"))?;
    }
    let mut out = std::io::stdout();
    let token = app.operator_token();
    if token.generated {
        writeln!(out, "operator token: {}", token.value).map_err(io_err("stdout"))?;
    } else if let Some(file) = token.file.as_ref().filter(|_| !token.used()) {
        // Generated by an earlier start that may never have shown it (its port was taken):
        // said on every start until the token is used once.
        let line = format!(
            "operator token: not used yet; it is in {} (sign in to http://{} with it)\n",
            file.display(),
            app.local_addr()
        );
        let mut err = std::io::stderr();
        err.write_all(line.as_bytes())
            .and_then(|()| err.flush())
            .map_err(io_err("stderr"))?;
    }
    writeln!(out, "listening on http://{}", app.local_addr()).map_err(io_err("stdout"))?;
    out.flush().map_err(io_err("stdout"))?;
    app.run_until_stopped().await
}

#[cfg(unix)]
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl StopSignals {
    fn register() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn recv(mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

#[cfg(not(unix))]
struct StopSignals;

#[cfg(not(unix))]
impl StopSignals {
    fn register() -> std::io::Result<Self> {
        Ok(Self)
    }

    async fn recv(self) -> &'static str {
        match tokio::signal::ctrl_c().await {
            Ok(()) => "ctrl-c",
            Err(_) => std::future::pending().await,
        }
    }
}

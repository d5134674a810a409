//! One configured MCP server: its live connection (process plus rmcp client session), the
//! `initialize` handshake, and the restart of a dead server, tried once by the next call.
use super::process::ServerProcess;
use super::{McpError, McpServerConfig, START_TIMEOUT};
use crate::confine::Sandbox;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProtocolVersion,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::ServiceExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// How long an error message waits for a dead server's exit status.
const EXIT_STATUS_WAIT: Duration = Duration::from_millis(500);

/// A server process with its initialized client session.
pub(super) struct Connection {
    // Declared first so that it drops first: the session closes the server's stdin, then the
    // process handle gives the server its grace and kills it.
    client: RunningService<RoleClient, ClientConfig>,
    process: ServerProcess,
}

impl Connection {
    async fn open(
        config: &McpServerConfig,
        workdir: &Path,
        sandbox: &Sandbox,
    ) -> Result<Self, McpError> {
        let (process, pipes) = ServerProcess::spawn(config, workdir, sandbox)?;
        // The handshake every stdio server on the registries speaks; the server answers with
        // the version it supports, and rmcp accepts any it knows.
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("turnkey", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        match tokio::time::timeout(START_TIMEOUT, info.serve(pipes)).await {
            Ok(Ok(client)) => Ok(Self { client, process }),
            Ok(Err(e)) => {
                let ending = process.ending(EXIT_STATUS_WAIT).await;
                // rmcp's text for a server that died first is a broken pipe; its end says more.
                let reason = if process.has_exited() {
                    "no answer".to_owned()
                } else {
                    e.to_string()
                };
                Err(McpError::Initialize { reason, ending })
            }
            Err(_) => Err(McpError::Initialize {
                reason: format!("no answer within {} s", START_TIMEOUT.as_secs()),
                ending: "still running; stopped".into(),
            }),
        }
    }

    fn is_closed(&self) -> bool {
        self.client.is_transport_closed() || self.process.has_exited()
    }

    pub(super) fn pid(&self) -> Option<u32> {
        self.process.pid
    }

    pub(super) async fn list_tools(&self) -> Result<Vec<rmcp::model::Tool>, McpError> {
        self.client
            .list_all_tools()
            .await
            .map_err(|e| McpError::ListTools(e.to_string()))
    }

    /// Sends `tools/call`. A failure is the text of an error result.
    pub(super) async fn call(
        &self,
        server: &str,
        params: CallToolRequestParams,
    ) -> Result<CallToolResult, String> {
        match self.client.peer().call_tool(params).await {
            Ok(result) => Ok(result),
            Err(ServiceError::McpError(e)) => Err(format!(
                "MCP server `{server}` refused the call: {} (error {})",
                e.message, e.code.0
            )),
            Err(e) if self.is_closed() || is_transport_error(&e) => Err(format!(
                "MCP server `{server}` stopped during the call ({}); the call may or may not \
                 have taken effect. The server is restarted on the next call.",
                self.process.ending(EXIT_STATUS_WAIT).await
            )),
            Err(e) => Err(format!("MCP server `{server}`: {e}")),
        }
    }
}

fn is_transport_error(e: &ServiceError) -> bool {
    matches!(
        e,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    )
}

/// A configured server and its current connection. Calls share the connection; the first
/// call that finds it dead starts the server again (once: if that fails, the call fails and
/// the next call tries again).
pub(super) struct Server {
    pub config: McpServerConfig,
    workdir: PathBuf,
    sandbox: Sandbox,
    current: Mutex<Arc<Connection>>,
}

impl Server {
    pub(super) async fn start(
        config: McpServerConfig,
        workdir: &Path,
        sandbox: &Sandbox,
    ) -> Result<(Arc<Self>, Vec<rmcp::model::Tool>), McpError> {
        let connection = Connection::open(&config, workdir, sandbox).await?;
        let tools = tokio::time::timeout(START_TIMEOUT, connection.list_tools())
            .await
            .map_err(|_| {
                McpError::ListTools(format!("no answer within {} s", START_TIMEOUT.as_secs()))
            })??;
        let server = Arc::new(Self {
            config,
            workdir: workdir.to_path_buf(),
            sandbox: sandbox.clone(),
            current: Mutex::new(Arc::new(connection)),
        });
        Ok((server, tools))
    }

    pub(super) fn name(&self) -> &str {
        &self.config.name
    }

    /// The live connection; a dead server is started again first. An error is the text of
    /// an error result.
    pub(super) async fn connection(&self) -> Result<Arc<Connection>, String> {
        let mut current = self.current.lock().await;
        if !current.is_closed() {
            return Ok(current.clone());
        }
        let ending = current.process.ending(EXIT_STATUS_WAIT).await;
        tracing::warn!(server = %self.name(), "MCP server stopped ({ending}); restarting it");
        match Connection::open(&self.config, &self.workdir, &self.sandbox).await {
            Ok(connection) => {
                *current = Arc::new(connection);
                tracing::info!(server = %self.name(), pid = ?current.pid(), "MCP server restarted");
                Ok(current.clone())
            }
            Err(e) => Err(format!(
                "MCP server `{}` stopped ({ending}) and could not be started again: {e}",
                self.name()
            )),
        }
    }

    /// The process id of the current connection (logs, tests).
    pub(super) async fn pid(&self) -> Option<u32> {
        self.current.lock().await.pid()
    }
}

//! The command line (API.md "Command line"): `serve`, `migrate`, `chat` (in `crate::chat`),
//! `doctor`, and the exit codes: 0 ok, 2 bad usage or invalid config (the message names the
//! key), 1 other failure.
use crate::chat::ChatError;
use crate::configuration::{self, InvalidConfig, Overrides, Settings};
use crate::doctor::redact_url;
use crate::startup::{self, StartupError};
use clap::{Args, Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use turnkey_actors::GatewayError;
use turnkey_storage::Store;

#[derive(Debug, Parser)]
#[command(name = "turnkey", version, about = "A durable AI-agent gateway")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run migrations, recover, and serve HTTP until SIGTERM/SIGINT.
    #[command(after_help = "\
The model provider comes from, in order: [[providers]] tables in the config file; else the
variables OPENAI_BASE_URL (default https://api.openai.com/v1), OPENAI_API_KEY and OPENAI_MODEL
(default gpt-4o-mini), for any OpenAI-compatible server; else the first local server that lists
a model on the usual ports (Ollama 11434, LM Studio 1234, llama.cpp 8080, vLLM 8000; see
server.detect_providers). Any key can also be set as TURNKEY__SECTION__KEY, e.g.
TURNKEY__SERVER__BIND=0.0.0.0:8080. deploy/turnkey.example.toml lists every key.")]
    Serve(ServeArgs),
    /// Apply database migrations and exit.
    Migrate(StoreArgs),
    /// Terminal client for a running server: send lines, see the answers stream.
    Chat(ChatArgs),
    /// Check the configuration, the store and every provider, changing nothing; exit 1 on any
    /// problem.
    Doctor(StoreArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Config file (TOML); default: ./turnkey.toml when present.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on, e.g. 127.0.0.1:8080 (port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,
    /// Database URL: sqlite://… or postgres://…
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
}

#[derive(Debug, Args)]
pub struct StoreArgs {
    /// Database URL: sqlite://… or postgres://…
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
    /// Config file (TOML); default: ./turnkey.toml when present.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Type a line and press Enter to send it; the answer streams in. \
While a turn runs, Ctrl-C interrupts it; at the prompt, Ctrl-C or Ctrl-D leaves. \
Exit status: 0 when you leave, 2 on bad usage or no token, 1 on any other failure."
)]
pub struct ChatArgs {
    /// Server URL.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Session to resume (its recent transcript is shown first); default: a new one.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Bearer token; default: $TURNKEY_TOKEN, else the content of ./data/operator.token.
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
}

/// Why a command failed, which decides the exit code.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error(transparent)]
    Config(#[from] InvalidConfig),
    /// Bad usage clap cannot see (a flag's value, a missing token): exit 2.
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Other(String),
}

impl Failure {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Self::Config(_) | Self::Usage(_) => ExitCode::from(2),
            Self::Other(_) => ExitCode::from(1),
        }
    }
}

impl From<ChatError> for Failure {
    fn from(e: ChatError) -> Self {
        match e {
            ChatError::Usage(_) => Self::Usage(e.to_string()),
            ChatError::Failed(_) => Self::Other(e.to_string()),
        }
    }
}

impl From<StartupError> for Failure {
    fn from(e: StartupError) -> Self {
        match e {
            StartupError::Config(c) => Self::Config(c),
            // Settings the gateway could not use when it started (a provider, the workspace,
            // an MCP server that would not start) are configuration errors too: exit 2.
            StartupError::Gateway(GatewayError::Config { key, reason }) => {
                Self::Config(InvalidConfig::new(key, reason))
            }
            other => Self::Other(other.to_string()),
        }
    }
}

/// Runs the parsed command to its end and reports how it went.
pub fn run(cli: Cli) -> ExitCode {
    // `serve` installs logging once its settings say whether traces are exported.
    if !matches!(cli.command, Command::Serve(_)) {
        crate::telemetry::init();
    }
    let outcome = match cli.command {
        Command::Chat(args) => {
            crate::chat::run(&args.url, args.session.as_deref(), args.token.as_deref())
                .map_err(Failure::from)
        }
        Command::Serve(args) => load(args.config, args.bind, args.database).and_then(serve),
        Command::Migrate(args) => {
            load(args.config, None, args.database).and_then(|s| in_system(migrate(s)))
        }
        Command::Doctor(args) => {
            load(args.config, None, args.database).and_then(|s| in_system(doctor(s)))
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            e.exit_code()
        }
    }
}

fn load(
    config_file: Option<PathBuf>,
    bind: Option<String>,
    database_url: Option<String>,
) -> Result<Settings, Failure> {
    Ok(configuration::load(&Overrides {
        config_file,
        bind,
        database_url,
    })?)
}

/// `turnkey serve` with its trace export (`[telemetry]`), flushed once the server has stopped.
fn serve(settings: Settings) -> Result<(), Failure> {
    let traces = crate::telemetry::init_with(&settings.telemetry)?;
    let served = in_system(startup::serve(settings)).map_err(Failure::from);
    traces.shutdown();
    served
}

/// Runs `fut` on a fresh actix System (the gateway's actors need one).
fn in_system<T>(fut: impl std::future::Future<Output = T>) -> T {
    actix_web::rt::System::new().block_on(fut)
}

async fn migrate(settings: Settings) -> Result<(), Failure> {
    startup::prepare_data_dir(&settings.server.data_dir)?;
    let store = connect(&settings).await?;
    store
        .migrate()
        .await
        .map_err(|e| Failure::Other(format!("migration failed: {e}")))?;
    println!(
        "migrations applied to {}",
        redact_url(&settings.database.url)
    );
    Ok(())
}

async fn connect(settings: &Settings) -> Result<Store, Failure> {
    Store::connect(&settings.database.url).await.map_err(|e| {
        Failure::Other(format!(
            "cannot connect to {}: {e}",
            redact_url(&settings.database.url)
        ))
    })
}

/// Prints one line per check; any problem makes the command fail (exit 1).
async fn doctor(settings: Settings) -> Result<(), Failure> {
    let findings = crate::doctor::check(&settings).await;
    let mut out = std::io::stdout().lock();
    for f in &findings {
        writeln!(out, "{}", f.line()).map_err(|e| Failure::Other(format!("stdout: {e}")))?;
    }
    out.flush()
        .map_err(|e| Failure::Other(format!("stdout: {e}")))?;
    match findings.iter().filter(|f| !f.ok).count() {
        0 => Ok(()),
        n => Err(Failure::Other(format!("doctor: {n} problem(s) found"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_parses_every_command() {
        for args in [
            vec![
                "turnkey",
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--database",
                "sqlite://x.db",
            ],
            vec!["turnkey", "migrate", "--database", "sqlite://x.db"],
            vec![
                "turnkey",
                "chat",
                "--url",
                "http://x",
                "--session",
                "s",
                "--token",
                "t",
            ],
            vec!["turnkey", "doctor"],
        ] {
            assert!(Cli::try_parse_from(args).is_ok());
        }
        assert!(Cli::try_parse_from(["turnkey", "serve", "--nope"]).is_err());
    }
}

//! The `turnkey` binary: parses the command line and hands over to [`turnkey_web::cli::run`].
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // clap exits with status 2 on bad usage by itself.
    turnkey_web::cli::run(turnkey_web::cli::Cli::parse())
}

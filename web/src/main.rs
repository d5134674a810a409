//! The `turnkey` binary: parses the command line and hands over to [`turnkey_web::cli::run`].
use clap::Parser;
use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: under load glibc's allocator (arenas shared by the
/// runtime's threads, consolidation on free) took 18 % of the server's CPU in a turn_load
/// profile (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // clap exits with status 2 on bad usage by itself.
    turnkey_web::cli::run(turnkey_web::cli::Cli::parse())
}

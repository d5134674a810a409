//! The `turnkey` binary the tests run: `TURNKEY_BIN`, or this build's, rebuilt once per test
//! run when it is missing or older than the service's sources.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the one-off `cargo build` of a missing binary may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// True when a source file of the service is newer than `binary`: `cargo test -p turnkey-tests`
/// does not rebuild another package's binary, and a stale one would test old code.
fn sources_newer_than(binary: &Path) -> bool {
    let Ok(built) = std::fs::metadata(binary).and_then(|m| m.modified()) else {
        return true;
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf);
    let Some(workspace) = workspace else {
        return false;
    };
    let mut stack: Vec<PathBuf> = [
        "web",
        "actors",
        "storage",
        "providers",
        "tools",
        "migration",
    ]
    .iter()
    .map(|c| workspace.join(c).join("src"))
    // The web UI's files are compiled into the binary.
    .chain([
        workspace.join("web").join("ui"),
        workspace.join("Cargo.lock"),
    ])
    .collect();
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
            }
        } else if meta.modified().map(|m| m > built).unwrap_or(false) {
            return true;
        }
    }
    false
}

/// The `turnkey` binary of this build: `TURNKEY_BIN` if set, else `target/<profile>/turnkey`
/// next to the test executable, (re)built once with cargo if it is missing or older than the sources.
pub fn turnkey_binary() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY.get_or_init(locate_or_build).clone()
}

fn locate_or_build() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("TURNKEY_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // target/<profile>/deps/<test> -> target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("test executable has no target/<profile> dir")?
        .to_path_buf();
    let binary = profile_dir.join("turnkey");
    if binary.exists() && !sources_newer_than(&binary) {
        return Ok(binary);
    }
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug");
    let target_dir = profile_dir.parent().ok_or("no target dir")?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no workspace dir")?;
    let mut cmd = Command::new(cargo);
    // `--workspace`, not `-p turnkey-web`: the features of the dependencies are then those of
    // `cargo test --workspace`, whose build this one reuses; with `-p` they differ, and the
    // two builds would rebuild each other's dependencies every time.
    cmd.current_dir(workspace)
        .args(["build", "--workspace", "--bin", "turnkey"])
        .arg("--target-dir")
        .arg(target_dir);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    eprintln!("building turnkey: {cmd:?}");
    let mut build = cmd.spawn().map_err(|e| format!("cannot run cargo: {e}"))?;
    let deadline = Instant::now() + BUILD_TIMEOUT;
    let status = loop {
        match build.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Ok(None) => {
                // Bounded: a build that takes this long is stuck (or waits on a lock forever).
                if let Err(e) = build.kill() {
                    eprintln!("cannot stop cargo: {e}");
                }
                return Err(format!("building turnkey took over {BUILD_TIMEOUT:?}"));
            }
            Err(e) => return Err(format!("waiting for cargo: {e}")),
        }
    };
    if !status.success() || !binary.exists() {
        return Err(format!(
            "`cargo build --workspace --bin turnkey` failed ({status}); {} is missing",
            binary.display()
        ));
    }
    Ok(binary)
}

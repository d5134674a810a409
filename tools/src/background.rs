//! Background commands, the operating-system side (SPEC R1.5, R13.10): a command started by a
//! small `sh` wrapper in a process group of its own, its output appended to `<dir>/log` and,
//! when it ends, its exit code written to `<dir>/exit` (atomically: a temp file renamed). The
//! wrapper writes its pid to `<dir>/pid` first. Nothing of this depends on the gateway that
//! started it staying alive: a restarted gateway finds the pid (recorded with the kernel's
//! start time of that pid and the boot id, so a reused pid or a reboot is told apart), keeps
//! watching it, and reads the real exit code from the file.
//!
//! The wrapper traps TERM and INT with a handler (not by ignoring them, which the command
//! would inherit), so a `kill` of the group ends the command and the wrapper still records
//! the exit (128 + the signal).
//!
//! In the OS sandbox (`confine`) the whole group is confined, the wrapper included: it may
//! write in the workspace and in `<dir>` (its log, pid and exit files, and `<dir>/tmp`, the
//! command's `TMPDIR`, which the wrapper removes when the command ends).
use crate::confine::{Grant, Limits, Sandbox};
use crate::terminal::KEPT_ENV;
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// The wrapper: `$1` the command, `$2` the log, `$3` the exit file, `$4` the pid file, `$5`
/// the command's private temp dir (empty without the sandbox).
const WRAPPER: &str = r#"echo $$ > "$4"
trap ':' TERM INT
sh -c "$1" >>"$2" 2>&1 </dev/null
c=$?
[ -n "$5" ] && rm -rf -- "$5"
printf '%s' "$c" > "$3.tmp" && mv "$3.tmp" "$3""#;

/// The files of one background command.
#[derive(Clone, Debug)]
pub struct ProcessFiles {
    pub dir: PathBuf,
}

impl ProcessFiles {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("log")
    }

    fn exit(&self) -> PathBuf {
        self.dir.join("exit")
    }

    fn pid(&self) -> PathBuf {
        self.dir.join("pid")
    }

    fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    /// The command's exit code, once the wrapper recorded it.
    pub fn exit_code(&self) -> Option<i64> {
        std::fs::read_to_string(self.exit())
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// The pid the wrapper wrote about itself.
    pub fn written_pid(&self) -> Option<i64> {
        std::fs::read_to_string(self.pid())
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// The last `max_bytes` of the log, as text (cut to a character boundary).
    pub fn tail(&self, max_bytes: u64) -> String {
        let Ok(mut f) = std::fs::File::open(self.log()) else {
            return String::new();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let from = len.saturating_sub(max_bytes);
        if f.seek(SeekFrom::Start(from)).is_err() {
            return String::new();
        }
        let mut buf = Vec::new();
        if f.take(max_bytes).read_to_end(&mut buf).is_err() {
            return String::new();
        }
        let text = String::from_utf8_lossy(&buf).into_owned();
        if from > 0 {
            // The first character may be cut: start at the next line, or the next character.
            let start = text.find('\n').map(|i| i + 1).unwrap_or(0);
            return text[start..].to_owned();
        }
        text
    }

    /// The log's size in bytes.
    pub fn log_bytes(&self) -> u64 {
        std::fs::metadata(self.log()).map(|m| m.len()).unwrap_or(0)
    }

    /// Keeps the log within `max_bytes`: past it, the log is cut to its last half with a line
    /// saying how much was dropped. The command appends (`>>`), so what it writes after the
    /// cut lands after the kept part; what it writes during the cut itself may be lost.
    pub fn bound_log(&self, max_bytes: u64) -> std::io::Result<bool> {
        let len = self.log_bytes();
        if len <= max_bytes {
            return Ok(false);
        }
        let keep = max_bytes / 2;
        let kept = self.tail(keep);
        let mut f = std::fs::OpenOptions::new().write(true).open(self.log())?;
        f.set_len(0)?;
        let dropped = len - kept.len() as u64;
        write!(
            f,
            "[... {dropped} earlier bytes of output dropped ...]\n{kept}"
        )?;
        Ok(true)
    }
}

/// A started wrapper: the child (to wait on while this process is its parent), its pid and
/// that pid's start time.
pub struct Started {
    pub child: tokio::process::Child,
    pub pid: i64,
    pub pid_start: Option<i64>,
}

/// Starts `command` in `workspace` under the wrapper, in a new process group, with only the
/// variables a command needs (the gateway's holds keys), confined by `sandbox`. `files.dir`
/// must exist.
pub fn start(
    command: &str,
    workspace: &Path,
    hidden: Option<&Path>,
    files: &ProcessFiles,
    sandbox: &Sandbox,
) -> std::io::Result<Started> {
    let tmp = if sandbox.is_off() {
        None
    } else {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(files.tmp())?;
        Some(files.tmp())
    };
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(WRAPPER)
        .arg("turnkey-background")
        .arg(command)
        .arg(files.log())
        .arg(files.exit())
        .arg(files.pid())
        .arg(tmp.clone().unwrap_or_default())
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .env_clear();
    for key in KEPT_ENV {
        if let Some(value) = std::env::var_os(key) {
            cmd.env(key, value);
        }
    }
    if let Some(tmp) = &tmp {
        let prepared = sandbox
            .prepare(&Grant {
                writable: &[workspace, &files.dir],
                hidden,
                limits: Limits::BACKGROUND,
            })
            .map_err(std::io::Error::other)?;
        cmd.env("TMPDIR", tmp);
        prepared.apply_to(&mut cmd);
    }
    let child = cmd.spawn()?;
    let pid = child
        .id()
        .map(i64::from)
        .ok_or_else(|| std::io::Error::other("the wrapper exited before its pid was read"))?;
    Ok(Started {
        child,
        pid,
        pid_start: start_time(pid),
    })
}

/// This boot of the machine: a pid and its start time mean nothing across a reboot.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22).
pub fn start_time(pid: i64) -> Option<i64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Whether `pid` is alive (not a zombie) and is the process that started at `pid_start`.
pub fn alive(pid: i64, pid_start: Option<i64>) -> bool {
    let Some(fields) = stat_fields(pid) else {
        return false;
    };
    let running = !matches!(fields.first().map(String::as_str), Some("Z") | Some("X"));
    let same = match pid_start {
        Some(s) => fields.get(19).and_then(|f| f.parse::<i64>().ok()) == Some(s),
        None => true,
    };
    running && same
}

/// The fields of `/proc/<pid>/stat` after the command name (the state first).
fn stat_fields(pid: i64) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Ends the group of the wrapper `pid`: SIGTERM, then SIGKILL to what is left once the
/// wrapper ended, or after `grace`. Answers whether anything was signalled.
pub async fn kill_group(pid: i64, pid_start: Option<i64>, grace: Duration) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if !alive(pid, pid_start) {
        return false;
    }
    let group = Pid::from_raw(raw);
    match killpg(group, Signal::SIGTERM) {
        Ok(()) => {}
        Err(Errno::ESRCH) => return false,
        Err(e) => {
            tracing::warn!(pid, error = %e, "signalling a background process group");
            return false;
        }
    }
    // Once the wrapper has recorded the exit and ended (a zombie counts as ended), whatever
    // else is left in its group goes at once.
    let until = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < until && alive(pid, pid_start) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match killpg(group, Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::warn!(pid, error = %e, "killing a background process group"),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(command: &str) -> (tempfile::TempDir, ProcessFiles, Started) {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = ProcessFiles::new(dir.path().join("p"));
        std::fs::create_dir_all(&files.dir).expect("dir");
        let started = start(command, dir.path(), None, &files, &Sandbox::off()).expect("start");
        (dir, files, started)
    }

    #[tokio::test]
    async fn r1_5_the_wrapper_records_the_exit_code_and_the_output() {
        let (_d, files, mut s) = run("echo out; echo err >&2; exit 3").await;
        assert!(s.pid_start.is_some());
        s.child.wait().await.expect("wait");
        assert_eq!(files.exit_code(), Some(3));
        assert_eq!(files.written_pid(), Some(s.pid));
        let tail = files.tail(1024);
        assert!(tail.contains("out") && tail.contains("err"), "{tail}");
        assert!(!alive(s.pid, s.pid_start));
    }

    #[tokio::test]
    async fn r1_5_a_killed_group_still_records_an_exit() {
        let (_d, files, mut s) = run("sleep 30").await;
        // The pid file shows the wrapper is past its first line (and its trap).
        for _ in 0..100 {
            if files.written_pid().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(alive(s.pid, s.pid_start));
        assert!(
            !alive(s.pid, s.pid_start.map(|t| t + 1)),
            "another start time"
        );
        assert!(kill_group(s.pid, s.pid_start, Duration::from_secs(5)).await);
        s.child.wait().await.expect("wait");
        assert_eq!(files.exit_code(), Some(143), "128 + SIGTERM");
    }

    #[test]
    fn r1_5_the_log_is_bounded_and_keeps_its_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = ProcessFiles::new(dir.path());
        let lines: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(files.log(), &lines).expect("write");
        assert!(files.bound_log(2000).expect("bound"));
        let text = std::fs::read_to_string(files.log()).expect("read");
        assert!(text.len() <= 2000, "{}", text.len());
        assert!(text.starts_with("[... "), "{text}");
        assert!(text.ends_with("line 999\n"), "{text}");
        assert!(!files.bound_log(2000).expect("bound again"));
        let tail = files.tail(20);
        assert!(
            tail.ends_with("line 999\n") && !tail.starts_with("ine"),
            "{tail}"
        );
    }
}

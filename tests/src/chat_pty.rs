//! `turnkey chat` on a pseudo-terminal, as a person would use it: `expectrl` spawns the real
//! binary on a pty (so Ctrl-C is a real SIGINT from the line discipline and Ctrl-D a real end
//! of input), waits for text with a bound, and keeps everything the client printed so a test
//! can count what was shown.
use crate::harness::turnkey_binary;
use expectrl::process::unix::WaitStatus;
use expectrl::session::OsSession;
use expectrl::{ControlCode, Eof, Expect};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// How long one `expect` waits by default.
pub const EXPECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Environment that must not reach the client under test.
const SCRUBBED_ENV: &[&str] = &[
    "TURNKEY_TOKEN",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// The `turnkey chat` command with `args`, run in `dir`, with a clean environment.
pub fn chat_command(args: &[&str], dir: &Path) -> Command {
    let binary = turnkey_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(binary);
    cmd.arg("chat").args(args).current_dir(dir);
    for key in SCRUBBED_ENV {
        cmd.env_remove(key);
    }
    cmd.env("NO_PROXY", "127.0.0.1,localhost")
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "warn");
    cmd
}

/// One `turnkey chat` process on a pty.
pub struct ChatPty {
    session: OsSession,
    /// Everything read so far, in order.
    seen: String,
}

impl ChatPty {
    /// Spawns `cmd` (see [`chat_command`]) on a new pty.
    pub fn spawn(cmd: Command) -> Self {
        let mut session =
            OsSession::spawn(cmd).unwrap_or_else(|e| panic!("cannot spawn turnkey chat: {e}"));
        session.set_expect_timeout(Some(EXPECT_TIMEOUT));
        Self {
            session,
            seen: String::new(),
        }
    }

    /// Waits (at most `EXPECT_TIMEOUT`) for `needle`; returns the output before it.
    pub fn expect(&mut self, needle: &str) -> String {
        self.expect_within(needle, EXPECT_TIMEOUT)
    }

    pub fn expect_within(&mut self, needle: &str, timeout: Duration) -> String {
        self.session.set_expect_timeout(Some(timeout));
        let found = self.session.expect(needle);
        self.session.set_expect_timeout(Some(EXPECT_TIMEOUT));
        match found {
            Ok(captures) => {
                let before = String::from_utf8_lossy(captures.before()).into_owned();
                self.seen.push_str(&before);
                self.seen.push_str(needle);
                before
            }
            Err(e) => {
                let rest = self.drain();
                panic!(
                    "turnkey chat: no {needle:?} ({e}); output so far:\n{}{rest}\n--- end of output",
                    self.seen
                )
            }
        }
    }

    /// Reads what is there now without waiting for anything in particular.
    fn drain(&mut self) -> String {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let deadline = Instant::now() + Duration::from_millis(500);
        while Instant::now() < deadline {
            match self.session.try_read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Types a line and presses Enter.
    pub fn send_line(&mut self, line: &str) {
        self.session
            .send_line(line)
            .unwrap_or_else(|e| panic!("cannot type {line:?}: {e}"));
    }

    /// Ctrl-C: the terminal sends SIGINT to the client.
    pub fn ctrl_c(&mut self) {
        self.session
            .send(ControlCode::EndOfText)
            .unwrap_or_else(|e| panic!("cannot send Ctrl-C: {e}"));
    }

    /// Ctrl-D at the start of a line: the end of input.
    pub fn ctrl_d(&mut self) {
        self.session
            .send(ControlCode::EndOfTransmission)
            .unwrap_or_else(|e| panic!("cannot send Ctrl-D: {e}"));
    }

    /// Reads to the end of output, then waits (bounded) for the exit code.
    pub fn exit_code(&mut self, timeout: Duration) -> i32 {
        self.session.set_expect_timeout(Some(timeout));
        match self.session.expect(Eof) {
            Ok(captures) => self
                .seen
                .push_str(&String::from_utf8_lossy(captures.as_bytes())),
            Err(e) => panic!(
                "turnkey chat did not end within {timeout:?} ({e}); output:\n{}",
                self.seen
            ),
        }
        let deadline = Instant::now() + timeout;
        loop {
            match self.session.get_process().status() {
                Ok(WaitStatus::Exited(_, code)) => return code,
                Ok(WaitStatus::Signaled(_, signal, _)) => {
                    panic!(
                        "turnkey chat was killed by {signal:?}; output:\n{}",
                        self.seen
                    )
                }
                Ok(_) | Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => panic!(
                    "turnkey chat did not exit: {other:?}; output:\n{}",
                    self.seen
                ),
            }
        }
    }

    /// Everything the client printed so far (the terminal's echo of typed lines included).
    pub fn output(&self) -> &str {
        &self.seen
    }

    /// How often `needle` was printed so far.
    pub fn count(&self, needle: &str) -> usize {
        self.seen.matches(needle).count()
    }
}

impl Drop for ChatPty {
    fn drop(&mut self) {
        if self.session.get_process().is_alive().unwrap_or(false) {
            // Best effort: a client left running by a failed test must not outlive it.
            if let Err(e) = self.session.get_process_mut().exit(true) {
                eprintln!("cannot stop turnkey chat: {e}");
            }
        }
        if std::thread::panicking() {
            eprintln!("--- turnkey chat output ---\n{}", self.seen);
        }
    }
}

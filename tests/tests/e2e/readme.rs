//! The README's shell blocks run as written (its commands are what a new user types first).
//! Every ```sh block runs in order, in bash with `set -euo pipefail`, in the directory of a
//! real `turnkey serve` on SQLite that generated its own operator token (`data/operator.token`),
//! against a scripted provider. Variables carry from block to block, as in one terminal. The
//! only change made to a command is the address: `localhost:8080` becomes the test server's.
//! `curl` fails on any HTTP error (a `.curlrc` with `fail-with-body` in a private `HOME`), so a
//! command the server refuses (a 415 for a missing content type, a 404 for an undefined id)
//! fails the test. A block the test cannot run offline says why in an HTML comment right above
//! it (`<!-- not run by tests: … -->`); one that follows a stream until Ctrl-C says so
//! (`<!-- run by tests until Ctrl-C -->`) and is stopped with SIGINT once it printed events.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use turnkey_tests::{ScriptedProvider, Turnkey, TurnkeyOptions};

const SKIP: &str = "<!-- not run by tests:";
const UNTIL_CTRL_C: &str = "<!-- run by tests until Ctrl-C -->";
/// How long one block may take; the service answers a scripted turn in well under that.
const BLOCK_BOUND: Duration = Duration::from_secs(60);

#[derive(Debug, PartialEq)]
enum How {
    Run,
    UntilCtrlC,
    Skip(String),
}

#[derive(Debug)]
struct Block {
    line: usize,
    how: How,
    code: String,
}

/// The README's ```sh blocks, each with what the comment line above it says.
fn shell_blocks(readme: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut previous = "";
    let mut lines = readme.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let fence = line.trim_start();
        if fence.starts_with("```") {
            let indent = &line[..line.len() - fence.len()];
            let lang = fence.trim_start_matches('`').trim();
            let mut code = String::new();
            for (_, body) in lines.by_ref() {
                if body.trim_start().starts_with("```") {
                    break;
                }
                code.push_str(body.strip_prefix(indent).unwrap_or(body));
                code.push('\n');
            }
            if lang == "sh" || lang == "bash" || lang == "shell" {
                let how = if let Some(why) = previous.trim().strip_prefix(SKIP) {
                    How::Skip(why.trim_end_matches("-->").trim().to_owned())
                } else if previous.trim() == UNTIL_CTRL_C {
                    How::UntilCtrlC
                } else {
                    How::Run
                };
                blocks.push(Block {
                    line: i + 1,
                    how,
                    code,
                });
            }
        }
        if !line.trim().is_empty() {
            previous = line;
        }
    }
    blocks
}

fn missing_tools() -> Vec<&'static str> {
    ["bash", "curl", "jq"]
        .into_iter()
        .filter(|t| {
            std::process::Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .stdout(Stdio::null())
                .status()
                .map_or(true, |s| !s.success())
        })
        .collect()
}

/// Runs `code` in bash in `dir` with the variables of the blocks before it (`vars`, kept with
/// `set -a`), and saves the variables it leaves for the next.
fn command(dir: &Path, home: &Path, vars: &Path, code: &str) -> tokio::process::Command {
    let script = format!(
        "set -euo pipefail\nset -a\n. {vars}\n{code}\nexport -p > {vars}\n",
        vars = vars.display()
    );
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("HOME", home)
        .env("CURL_HOME", home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r1_every_shell_block_of_the_readme_runs_as_written() {
    let missing = missing_tools();
    if !missing.is_empty() {
        assert!(
            !turnkey_tests::require::any_required(),
            "the README's commands need {missing:?}"
        );
        println!("skipped: the README's commands need {missing:?}");
        return;
    }
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&readme).unwrap();
    let blocks = shell_blocks(&readme);
    assert!(
        blocks.iter().filter(|b| b.how == How::Run).count() >= 3,
        "the README has runnable shell blocks: {blocks:?}"
    );
    for b in &blocks {
        if let How::Skip(why) = &b.how {
            assert!(
                !why.is_empty(),
                "README line {}: say why it is not run",
                b.line
            );
        }
    }

    let provider = ScriptedProvider::start();
    let tk = Turnkey::start(TurnkeyOptions::new(&provider).generated_token()).await;
    let address = tk.url.trim_start_matches("http://").to_owned();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join(".curlrc"), "fail-with-body\n").unwrap();
    let vars = home.path().join("vars.sh");
    std::fs::write(&vars, "").unwrap();

    let mut ran = 0;
    for b in &blocks {
        let code = b
            .code
            .replace("localhost:8080", &address)
            .replace("127.0.0.1:8080", &address);
        let mut child = match b.how {
            How::Skip(_) => continue,
            How::Run | How::UntilCtrlC => command(tk.dir.path(), home.path(), &vars, &code)
                .spawn()
                .unwrap(),
        };
        let mut stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let read = async {
            let (a, b) = tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
            a.and(b)
        };
        match b.how {
            How::Run => {
                let status = tokio::time::timeout(BLOCK_BOUND, async {
                    read.await.unwrap();
                    child.wait().await.unwrap()
                })
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "README line {}: still running after {BLOCK_BOUND:?}",
                        b.line
                    )
                });
                assert!(
                    status.success(),
                    "README line {} failed ({status}):\n{code}\nstdout:\n{}\nstderr:\n{}",
                    b.line,
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&err)
                );
            }
            How::UntilCtrlC => {
                // It follows until stopped: let it print, then press Ctrl-C.
                let pid = nix::unistd::Pid::from_raw(-(child.id().unwrap() as i32));
                let stop = async {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
                };
                let (_, read) = tokio::join!(stop, read);
                read.unwrap();
                child.wait().await.unwrap();
                let out = String::from_utf8_lossy(&out);
                assert!(
                    out.contains("event: ") && out.contains("data: "),
                    "README line {}: nothing followed:\n{out}\nstderr:\n{}",
                    b.line,
                    String::from_utf8_lossy(&err)
                );
            }
            How::Skip(_) => unreachable!(),
        }
        ran += 1;
    }
    println!("ran {ran} shell blocks of the README");
    assert!(
        provider.asked().iter().any(|t| t == "hello"),
        "the first conversation reached the model"
    );
}

#[test]
fn r1_readme_blocks_are_found_with_what_the_line_above_says() {
    let md = "text\n\n```sh\necho one\n```\n\n<!-- not run by tests: needs docker -->\n```sh\n\
              docker run x\n```\n<!-- run by tests until Ctrl-C -->\n```sh\ncurl -N x\n```\n\
              - item:\n  ```sh\n  echo indented\n  ```\n```toml\n[a]\n```\n";
    let blocks = shell_blocks(md);
    let hows: Vec<&How> = blocks.iter().map(|b| &b.how).collect();
    assert_eq!(
        hows,
        [
            &How::Run,
            &How::Skip("needs docker".into()),
            &How::UntilCtrlC,
            &How::Run
        ]
    );
    assert_eq!(blocks[3].code, "echo indented\n");
}

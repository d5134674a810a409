//! Real headless Chromium for the web UI tests, driven over WebDriver (fantoccini) through a
//! `chromedriver` this module starts on a free loopback port and kills when the test ends.
//! Without Chromium or chromedriver the tests print "skipping: …", unless
//! `TURNKEY_REQUIRE_BROWSER=1` (CI, see `.ci/run`), which makes them fail instead.
use crate::wait::within;
use fantoccini::{Client, ClientBuilder, Locator};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long chromedriver may take to answer `/status`.
const DRIVER_START: Duration = Duration::from_secs(20);
/// How long a wait for something on the page may take by default.
pub const PAGE_WAIT: Duration = Duration::from_secs(30);

/// Desktop and phone viewports the tests use.
pub const DESKTOP: (u32, u32) = (1280, 860);
pub const PHONE: (u32, u32) = (390, 844);

fn required() -> bool {
    crate::require::flag("TURNKEY_REQUIRE_BROWSER")
}

fn executable(env: &str, default: &str) -> Option<PathBuf> {
    let path = std::env::var_os(env).map_or_else(|| PathBuf::from(default), PathBuf::from);
    path.is_file().then_some(path)
}

/// A chromedriver process and one browser session on it.
pub struct Browser {
    pub client: Client,
    driver: Child,
    /// The browser's profile; removed with the browser.
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A headless Chromium at `DESKTOP` size, or `None` (after a one-line reason) when Chromium
    /// or chromedriver is missing and `TURNKEY_REQUIRE_BROWSER` is not `1`.
    pub async fn start_or_skip(test: &str) -> Option<Self> {
        let chromium = executable("TURNKEY_CHROMIUM", "/usr/bin/chromium");
        let driver = executable("TURNKEY_CHROMEDRIVER", "/usr/bin/chromedriver");
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            let why = "Chromium or chromedriver is not installed (apt-get install chromium \
                       chromium-driver, or set TURNKEY_CHROMIUM / TURNKEY_CHROMEDRIVER)";
            assert!(!required(), "TURNKEY_REQUIRE_BROWSER=1 but {why}");
            println!("skipping: {test}: {why} (set TURNKEY_REQUIRE_BROWSER=1 to fail instead)");
            return None;
        };
        Some(Self::start(&chromium, &driver).await)
    }

    async fn start(chromium: &Path, driver_bin: &Path) -> Self {
        let mut last_error = String::new();
        // A free port can be taken between finding and using it: a few attempts.
        for _ in 0..3 {
            let port = free_port();
            let mut driver = spawn_driver(driver_bin, port);
            match wait_for_driver(port, &mut driver).await {
                Ok(()) => {
                    let profile = tempfile::Builder::new()
                        .prefix("turnkey-chromium-")
                        .tempdir()
                        .unwrap_or_else(|e| panic!("cannot create a browser profile dir: {e}"));
                    match connect(port, chromium, profile.path()).await {
                        Ok(client) => {
                            return Self {
                                client,
                                driver,
                                _profile: profile,
                            }
                        }
                        Err(e) => last_error = e,
                    }
                }
                Err(e) => last_error = e,
            }
            stop_driver(&mut driver);
        }
        panic!("cannot start headless Chromium through chromedriver: {last_error}");
    }

    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("goto {url}: {e}"));
    }

    pub async fn resize(&self, (width, height): (u32, u32)) {
        self.client
            .set_window_size(width, height)
            .await
            .unwrap_or_else(|e| panic!("resize to {width}x{height}: {e}"));
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// Polls `script` until it returns something other than `null`/`false`, within `timeout`.
    pub async fn wait_js(&self, what: &str, timeout: Duration, script: &str) -> Value {
        let found = within(timeout, || async {
            let v = self.js(script, vec![]).await;
            (!(v.is_null() || v == Value::Bool(false))).then_some(v)
        })
        .await;
        match found {
            Some(v) => v,
            None => {
                self.screenshot(&format!("timeout-{}", slug(what))).await;
                panic!("timed out after {timeout:?} waiting for {what}");
            }
        }
    }

    /// Waits until an element matching `css` is visible, and returns its text.
    pub async fn wait_visible(&self, css: &str, timeout: Duration) -> String {
        let script = format!(
            "const e = document.querySelector({css:?}); \
             return e && e.offsetParent !== null ? e.textContent : null;",
            css = css
        );
        match self
            .wait_js(&format!("visible {css}"), timeout, &script)
            .await
        {
            Value::String(s) => s,
            other => other.to_string(),
        }
    }

    /// The text of the first element matching `css`, or `None`.
    pub async fn text(&self, css: &str) -> Option<String> {
        let v = self
            .js(
                "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
                vec![json!(css)],
            )
            .await;
        v.as_str().map(str::to_owned)
    }

    pub async fn count(&self, css: &str) -> u64 {
        self.js(
            "return document.querySelectorAll(arguments[0]).length;",
            vec![json!(css)],
        )
        .await
        .as_u64()
        .unwrap_or(0)
    }

    pub async fn click(&self, css: &str) {
        let el = self
            .client
            .wait()
            .at_most(PAGE_WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"));
        el.click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// Replaces the value of the input `css` with `text` by typing it.
    pub async fn type_into(&self, css: &str, text: &str) {
        let el = self
            .client
            .wait()
            .at_most(PAGE_WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no element {css}: {e}"));
        el.clear()
            .await
            .unwrap_or_else(|e| panic!("clear {css}: {e}"));
        el.send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// Saves a PNG of the viewport as `target/screenshots/NAME.png` and returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self
            .client
            .screenshot()
            .await
            .unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let path = dir.join(format!("{}.png", slug(name)));
        std::fs::write(&path, png)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path
    }

    /// Ends the browser session and chromedriver.
    pub async fn close(mut self) {
        if let Err(e) = self.client.clone().close().await {
            eprintln!("closing the browser session: {e}");
        }
        stop_driver(&mut self.driver);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver and the Chromium it started share its process group.
        stop_driver(&mut self.driver);
    }
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// `target/screenshots`, beside the test executable's `target/<profile>`.
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            // target/<profile>/deps/<test>
            Some(exe.parent()?.parent()?.parent()?.to_path_buf())
        })
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("screenshots")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

fn spawn_driver(bin: &Path, port: u16) -> Child {
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .arg("--log-level=SEVERE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group, so that killing the group also ends the Chromium it starts.
        .process_group(0);
    for key in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        cmd.env_remove(key);
    }
    cmd.spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()))
}

fn stop_driver(driver: &mut Child) {
    if matches!(driver.try_wait(), Ok(None)) {
        if let Err(e) = killpg(Pid::from_raw(driver.id() as i32), Signal::SIGKILL) {
            eprintln!("stopping chromedriver: {e}");
        }
    }
    if let Err(e) = driver.wait() {
        eprintln!("waiting for chromedriver: {e}");
    }
}

async fn wait_for_driver(port: u16, driver: &mut Child) -> Result<(), String> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .map_err(|e| e.to_string())?;
    // `Some(Err)`: the driver exited, no use waiting; `Some(Ok)`: it is ready.
    let http = &http;
    let outcome = within(DRIVER_START, || {
        let exited = driver.try_wait();
        async move {
            if let Ok(Some(status)) = exited {
                return Some(Err(format!("chromedriver exited at start: {status}")));
            }
            let r = http
                .get(format!("http://127.0.0.1:{port}/status"))
                .send()
                .await
                .ok()
                .filter(|r| r.status().is_success())?;
            let body: Value = r.json().await.unwrap_or(Value::Null);
            (body["value"]["ready"] == Value::Bool(true)).then_some(Ok(()))
        }
    })
    .await;
    outcome.unwrap_or_else(|| {
        Err(format!(
            "chromedriver did not answer within {DRIVER_START:?}"
        ))
    })
}

async fn connect(port: u16, chromium: &Path, profile: &Path) -> Result<Client, String> {
    let (w, h) = DESKTOP;
    let mut caps = serde_json::Map::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless=new",
                // Tests run as root in CI, where Chromium's sandbox cannot start.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-proxy-server",
                format!("--window-size={w},{h}"),
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .map_err(|e| format!("new WebDriver session: {e}"))
}

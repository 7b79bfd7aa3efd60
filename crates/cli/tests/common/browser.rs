//! Headless Chromium driven through the Debian `chromedriver` (WebDriver, fantoccini over plain HTTP) for
//! the browser UI tests: navigation and input helpers, screenshots into `target/ui-artifacts/`, the
//! browser console's SEVERE entries, axe-core accessibility violations and first-contentful-paint time.
//!
//! Without `/usr/bin/chromedriver` a test skips with a printed reason, except under `CI`, where it fails:
//! `scripts/setup.sh` installs `chromium chromium-driver fonts-dejavu-core` and fetches axe-core.

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::elements::Element;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// The axe-core release `scripts/fetch-axe.sh` fetches (keep the two in step).
pub const AXE_VERSION: &str = "4.11.4";

/// One chromedriver child and one browser session. Dropping it ends the session (which quits
/// Chromium) and kills the chromedriver child by its pid.
pub struct Browser {
    client: Client,
    driver: Child,
    port: u16,
    session: String,
    /// The browser profile (`--user-data-dir`) and chromedriver's log; removed after the driver exits.
    dir: tempfile::TempDir,
    /// From spawning chromedriver to an open session.
    pub startup: Duration,
}

impl std::ops::Deref for Browser {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// `$MASLENS_HOME` as the scripts compute it (`~/.cache/maslens` by default).
pub fn maslens_home() -> PathBuf {
    match std::env::var_os("MASLENS_HOME") {
        Some(h) if !h.is_empty() => PathBuf::from(h),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| ".".into()))
            .join(".cache/maslens"),
    }
}

/// Where `scripts/fetch-axe.sh` puts axe-core.
pub fn axe_path() -> PathBuf {
    maslens_home()
        .join("vendor")
        .join(format!("axe-core-{AXE_VERSION}"))
        .join("axe.min.js")
}

/// The workspace target directory (`target/`, or `$CARGO_TARGET_DIR`): cargo sets
/// `CARGO_TARGET_TMPDIR` to `<target>/tmp` for integration tests.
pub fn target_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().map(PathBuf::from).unwrap_or(tmp)
}

/// `target/ui-artifacts/` (created).
pub fn artifacts_dir() -> PathBuf {
    let d = target_dir().join("ui-artifacts");
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("create {}: {e}", d.display()));
    d
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}

/// A minimal blocking HTTP/1.1 exchange with chromedriver (readiness polling and the session's
/// teardown in `Drop`, where nothing async can run). Returns the status code and body.
fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> std::io::Result<(u16, String)> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    // chromedriver keeps the connection open despite `Connection: close`: read the head, then exactly
    // Content-Length bytes.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let end = buf.len().min(head_end + len);
    Ok((
        code,
        String::from_utf8_lossy(&buf[head_end..end]).into_owned(),
    ))
}

/// chromedriver's vendor endpoint for the browser log (`goog:loggingPrefs`), which the W3C protocol
/// does not have: `POST /session/{id}/{path}` with `{"type": "browser"}`.
#[derive(Debug)]
struct BrowserLog {
    path: &'static str,
}

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/{}",
            session_id.unwrap_or(""),
            self.path
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(r#"{"type":"browser"}"#.to_string()),
        )
    }
}

impl Browser {
    /// Start chromedriver and a headless Chromium session. `None` (after printing why) when
    /// `/usr/bin/chromedriver` is missing; under `CI` that panics instead, since CI must never skip.
    pub async fn start() -> Option<Browser> {
        if !std::path::Path::new(CHROMEDRIVER).exists() {
            let why = format!(
                "{CHROMEDRIVER} is missing (install `chromium chromium-driver fonts-dejavu-core`, \
                 as scripts/setup.sh does)"
            );
            if ci() {
                panic!("browser test cannot run under CI: {why}");
            }
            eprintln!("SKIPPED browser test: {why}");
            return None;
        }
        let t0 = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("maslens-browser-")
            .tempdir()
            .expect("tempdir");
        let profile = dir.path().join("profile");
        let log = dir.path().join("chromedriver.log");
        let log_file = std::fs::File::create(&log).expect("chromedriver log file");
        let port = free_port();
        let mut driver = Command::new(CHROMEDRIVER)
            .args([
                format!("--port={port}"),
                "--allowed-ips=127.0.0.1".into(),
                "--log-level=WARNING".into(),
            ])
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("chromedriver log file"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {CHROMEDRIVER}: {e}"));
        let driver_log = || std::fs::read_to_string(&log).unwrap_or_default();
        // Ready: GET /status answers {"value": {"ready": true, ...}}.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(st)) = driver.try_wait() {
                panic!(
                    "chromedriver exited ({st}) before it was ready:\n{}",
                    driver_log()
                );
            }
            if let Ok((200, body)) = http(port, "GET", "/status", None) {
                let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                if v["value"]["ready"] == json!(true) {
                    break;
                }
            }
            if Instant::now() > deadline {
                let _ = driver.kill();
                let _ = driver.wait();
                panic!(
                    "chromedriver on port {port} not ready after 10 s:\n{}",
                    driver_log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-quic",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--disable-extensions",
                    "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
            "goog:loggingPrefs": { "browser": "ALL" },
            "pageLoadStrategy": "normal",
            "timeouts": { "pageLoad": 20000, "script": 30000, "implicit": 0 },
        });
        let caps = match caps {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await;
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                let _ = driver.kill();
                let _ = driver.wait();
                panic!(
                    "no browser session ({CHROMIUM} via {CHROMEDRIVER}): {e}\n{}",
                    driver_log()
                );
            }
        };
        let session = client
            .session_id()
            .await
            .expect("session id")
            .expect("a session id");
        Some(Browser {
            client,
            driver,
            port,
            session,
            dir,
            startup: t0.elapsed(),
        })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("goto {url}: {e}"));
    }

    pub async fn find(&self, css: &str) -> Element {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("find `{css}`: {e}"))
    }

    /// The rendered text of the first element matching `css`.
    pub async fn text(&self, css: &str) -> String {
        self.find(css)
            .await
            .text()
            .await
            .unwrap_or_else(|e| panic!("text of `{css}`: {e}"))
    }

    pub async fn click(&self, css: &str) {
        self.find(css)
            .await
            .click()
            .await
            .unwrap_or_else(|e| panic!("click `{css}`: {e}"));
    }

    /// Wait until an element matching `css` exists (polling), at most `timeout`.
    pub async fn wait_for(&self, css: &str, timeout: Duration) -> Element {
        self.client
            .wait()
            .at_most(timeout)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no `{css}` within {timeout:?}: {e}"))
    }

    /// Run `js` as a function body in the page (`return` gives the value). WebDriver's Execute Script
    /// is not subject to the page's CSP.
    pub async fn eval_js(&self, js: &str) -> Value {
        self.client
            .execute(js, vec![])
            .await
            .unwrap_or_else(|e| panic!("execute `{js}`: {e}"))
    }

    /// Press a key (or type a sequence of characters) on whatever has focus, as a user would: through
    /// WebDriver actions, so focus does not move. Named keys: Enter, Escape, Tab, Backspace, Space,
    /// ArrowUp/Down/Left/Right, Home, End, PageUp, PageDown, Delete; anything else is typed char by char
    /// ("j", "gd", "/").
    pub async fn press_key(&self, key: &str) {
        let named: Option<char> = match key {
            "Enter" => Some('\u{e007}'),
            "Escape" => Some('\u{e00c}'),
            "Tab" => Some('\u{e004}'),
            "Backspace" => Some('\u{e003}'),
            "Space" => Some('\u{e00d}'),
            "PageUp" => Some('\u{e00e}'),
            "PageDown" => Some('\u{e00f}'),
            "End" => Some('\u{e010}'),
            "Home" => Some('\u{e011}'),
            "ArrowLeft" => Some('\u{e012}'),
            "ArrowUp" => Some('\u{e013}'),
            "ArrowRight" => Some('\u{e014}'),
            "ArrowDown" => Some('\u{e015}'),
            "Delete" => Some('\u{e017}'),
            _ => None,
        };
        let chars: Vec<char> = named
            .map(|c| vec![c])
            .unwrap_or_else(|| key.chars().collect());
        let mut actions = KeyActions::new("keyboard".to_string());
        for c in chars {
            actions = actions
                .then(KeyAction::Down { value: c })
                .then(KeyAction::Up { value: c });
        }
        self.client
            .perform_actions(actions)
            .await
            .unwrap_or_else(|e| panic!("press `{key}`: {e}"));
    }

    /// Save a PNG of the viewport to `target/ui-artifacts/<name>.png` and return its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self
            .client
            .screenshot()
            .await
            .unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
        let path = artifacts_dir().join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }

    /// The browser console's SEVERE entries since the last call (chromedriver hands each entry out
    /// once), as `source: message`. Panics when chromedriver serves neither log endpoint.
    pub async fn console_errors(&self) -> Vec<String> {
        self.try_console_errors()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Browser::console_errors`], with an error instead of a panic when the log cannot be read.
    pub async fn try_console_errors(&self) -> Result<Vec<String>, String> {
        let mut failures = Vec::new();
        for path in ["se/log", "log"] {
            match self.client.issue_cmd(BrowserLog { path }).await {
                Ok(Value::Array(entries)) => {
                    return Ok(entries
                        .iter()
                        .filter(|e| e["level"] == "SEVERE")
                        .map(|e| {
                            format!(
                                "{}: {}",
                                e["source"].as_str().unwrap_or("?"),
                                e["message"].as_str().unwrap_or("")
                            )
                        })
                        .collect());
                }
                Ok(other) => failures.push(format!("/session/{{id}}/{path}: not a list: {other}")),
                Err(e) => failures.push(format!("/session/{{id}}/{path}: {e}")),
            }
        }
        Err(format!(
            "chromedriver serves no browser log endpoint: {}",
            failures.join("; ")
        ))
    }

    /// axe-core's WCAG 2.0 A/AA and 2.1 AA violations on the current page, one `rule-id: selector
    /// (help)` line per offending node. axe-core is injected through WebDriver (page CSP does not
    /// apply) from the file `scripts/fetch-axe.sh` fetched.
    pub async fn axe_violations(&self) -> Vec<String> {
        let loaded = self.eval_js("return typeof window.axe === 'object' && !!window.axe.run;");
        if loaded.await != json!(true) {
            let path = axe_path();
            let src = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                panic!(
                    "axe-core {AXE_VERSION} not found at {} ({e}): run scripts/fetch-axe.sh \
                     (scripts/setup.sh does)",
                    path.display()
                )
            });
            self.client
                .execute(&src, vec![])
                .await
                .unwrap_or_else(|e| panic!("inject axe-core: {e}"));
            let ok = self.eval_js("return typeof window.axe === 'object' && !!window.axe.run;");
            assert_eq!(ok.await, json!(true), "axe-core did not define window.axe");
        }
        let res = self
            .client
            .execute_async(
                r#"const done = arguments[arguments.length - 1];
                axe.run(document, {
                    runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21aa'] },
                    resultTypes: ['violations'],
                }).then(r => done({ violations: r.violations.map(v => ({
                    id: v.id, help: v.help,
                    targets: v.nodes.map(n => n.target.join(' ')),
                })) }), e => done({ error: String(e) }));"#,
                vec![],
            )
            .await
            .unwrap_or_else(|e| panic!("axe.run: {e}"));
        if let Some(err) = res.get("error") {
            panic!("axe.run failed: {err}");
        }
        let mut out = Vec::new();
        for v in res["violations"].as_array().expect("axe violations list") {
            let id = v["id"].as_str().unwrap_or("?");
            let help = v["help"].as_str().unwrap_or("");
            for t in v["targets"].as_array().into_iter().flatten() {
                out.push(format!("{id}: {} ({help})", t.as_str().unwrap_or("?")));
            }
        }
        out
    }

    /// First-contentful-paint of the current page in ms (`performance.getEntriesByType('paint')`),
    /// waiting up to 2 s for the entry; `None` when the page never painted content.
    pub async fn paint_ms(&self) -> Option<f64> {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let v = self
                .eval_js(
                    "const e = performance.getEntriesByType('paint')\
                     .find(e => e.name === 'first-contentful-paint'); return e ? e.startTime : null;",
                )
                .await;
            if let Some(ms) = v.as_f64() {
                return Some(ms);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session makes chromedriver quit Chromium; then stop chromedriver (only this child).
        let _ = http(
            self.port,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

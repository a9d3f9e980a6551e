//! A small W3C WebDriver client over reqwest, driving Debian's headless Chromium through
//! `chromedriver` (no extra crate: the protocol is a handful of JSON calls).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// `chromedriver` and `chromium`, or `None` after a loud SKIP line when they are missing and
/// `AUTOFACTURA_REQUIRE_BROWSER` is not set (CI sets it, so there a missing browser fails).
pub fn browser_paths() -> Option<(PathBuf, PathBuf)> {
    let driver = PathBuf::from(
        std::env::var("AUTOFACTURA_CHROMEDRIVER")
            .unwrap_or_else(|_| "/usr/bin/chromedriver".into()),
    );
    let chromium = PathBuf::from(
        std::env::var("AUTOFACTURA_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
    );
    if driver.exists() && chromium.exists() {
        return Some((driver, chromium));
    }
    if std::env::var_os("AUTOFACTURA_REQUIRE_BROWSER").is_some() {
        panic!(
            "AUTOFACTURA_REQUIRE_BROWSER is set but {} or {} is missing",
            driver.display(),
            chromium.display()
        );
    }
    eprintln!(
        "\n*** SKIP browser test: {} or {} is missing (apt-get install chromium chromium-driver) ***\n",
        driver.display(),
        chromium.display()
    );
    None
}

/// Where screenshots are kept: `target/screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("screenshots");
    std::fs::create_dir_all(&dir).expect("create target/screenshots");
    dir
}

pub struct Driver {
    child: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

/// An element, with how it was found: a live page may replace it between the find and the
/// use (the admin's refresh swaps regions nobody is using), and an element found by a locator
/// is then found again.
#[derive(Debug, Clone)]
pub struct Element {
    id: String,
    locator: Option<(&'static str, String)>,
}

impl Driver {
    /// Starts chromedriver on a free port and a fresh headless Chromium session.
    pub async fn start(driver: &Path, chromium: &Path) -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        // Up to 30 s: a loaded machine may take seconds to start it.
        let mut ready = false;
        for _ in 0..300 {
            if let Ok(r) = http.get(format!("{base}/status")).send().await
                && r.status().is_success()
            {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ready, "chromedriver did not come up on {base}");
        let profile = tempfile::tempdir().expect("profile dir");
        let caps = json!({
            "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                // The admin asks before fiscal actions; the test answers yes.
                "unhandledPromptBehavior": "accept",
                "goog:chromeOptions": {
                    "binary": chromium.display().to_string(),
                    "args": [
                        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync",
                        "--disable-dev-shm-usage", "--window-size=1280,900",
                        format!("--user-data-dir={}", profile.path().display()),
                    ]
                }
            }}
        });
        let r: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("session json");
        let session = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {r}"))
            .to_owned();
        let d = Driver {
            child,
            base,
            session,
            http,
            _profile: profile,
        };
        // Finding an element waits for it a little, as a person would.
        d.call(
            reqwest::Method::POST,
            "/timeouts",
            Some(json!({ "implicit": 5000, "pageLoad": 30000 })),
        )
        .await;
        d
    }

    /// Polls (every 100 ms, up to 15 s) until the current URL satisfies `ok`; the URL.
    pub async fn wait_url(&self, ok: impl Fn(&str) -> bool) -> String {
        let mut url = self.url().await;
        for _ in 0..150 {
            if ok(&url) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            url = self.url().await;
        }
        url
    }

    /// Polls (every 100 ms, up to 15 s) until the page text contains `needle`; the text.
    pub async fn wait_text(&self, needle: &str) -> String {
        let mut text = self.page_text().await;
        for _ in 0..150 {
            if text.contains(needle) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            text = self.page_text().await;
        }
        text
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let r = self.answer(method, path, body.as_ref()).await;
        if let Some(err) = r["error"].as_str() {
            panic!("WebDriver {path}: {err}: {}", r["message"]);
        }
        r
    }

    /// The `value` of WebDriver's answer to `path` of this session, error or not.
    async fn answer(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut req = self.http.request(method, &url);
        if let Some(b) = body {
            req = req.json(b);
        }
        let mut r: Value = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"))
            .json()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        r["value"].take()
    }

    /// `call` on element `e` (`/element/{id}{rest}`); a stale reference is found again by its
    /// locator and the call repeated (the page may be replaced again meanwhile), and an
    /// element not interactable yet (a page still laid out, a region being replaced) is tried
    /// again for up to 10 s, as a person would wait for it.
    async fn on(
        &self,
        method: reqwest::Method,
        e: &Element,
        rest: &str,
        body: Option<Value>,
    ) -> Value {
        let mut id = e.id.clone();
        let mut last = String::new();
        for _ in 0..100 {
            let path = format!("/element/{id}{rest}");
            let r = self.answer(method.clone(), &path, body.as_ref()).await;
            let err = match r["error"].as_str() {
                None => return r,
                Some(err @ ("stale element reference" | "element not interactable")) => err,
                Some(err) => panic!("WebDriver {path}: {err}: {}", r["message"]),
            };
            last = format!("{err}: {}", r["message"]);
            tokio::time::sleep(Duration::from_millis(100)).await;
            match &e.locator {
                Some((using, value)) => id = self.find_one(using, value).await.id,
                None if err == "stale element reference" => {
                    panic!("WebDriver {path}: {last}")
                }
                None => {}
            }
        }
        panic!("WebDriver element{rest}: {e:?} for 10 s: {last}");
    }

    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    pub async fn url(&self) -> String {
        self.call(reqwest::Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub async fn find(&self, css: &str) -> Element {
        self.find_one("css selector", css).await
    }

    /// The first element found by the WebDriver locator strategy `using`.
    async fn find_one(&self, using: &'static str, value: &str) -> Element {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({ "using": using, "value": value })),
            )
            .await;
        Element {
            id: v[ELEMENT].as_str().expect("element id").to_owned(),
            locator: Some((using, value.to_owned())),
        }
    }

    /// Elements matching `css` (possibly none).
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        self.call(
            reqwest::Method::POST,
            "/elements",
            Some(json!({ "using": "css selector", "value": css })),
        )
        .await
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| {
                    e[ELEMENT].as_str().map(|s| Element {
                        id: s.to_owned(),
                        locator: None,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
    }

    /// The first link whose text contains `text`.
    pub async fn link(&self, text: &str) -> Element {
        self.find_one("partial link text", text).await
    }

    pub async fn click(&self, e: &Element) {
        self.on(reqwest::Method::POST, e, "/click", Some(json!({})))
            .await;
    }

    pub async fn type_into(&self, e: &Element, text: &str) {
        self.on(
            reqwest::Method::POST,
            e,
            "/value",
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// Empties a text field.
    pub async fn clear(&self, e: &Element) {
        self.on(reqwest::Method::POST, e, "/clear", Some(json!({})))
            .await;
    }

    /// An element's attribute (or property, as WebDriver reads it), e.g. a link's `href`.
    pub async fn attribute(&self, e: &Element, name: &str) -> Option<String> {
        self.on(reqwest::Method::GET, e, &format!("/attribute/{name}"), None)
            .await
            .as_str()
            .map(str::to_owned)
    }

    pub async fn text(&self, e: &Element) -> String {
        self.on(reqwest::Method::GET, e, "/text", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The visible text of the whole page, read in one script call so a page that is being
    /// replaced (after a click or a form post) cannot leave a stale element in between.
    pub async fn page_text(&self) -> String {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({
                "script": "return document.body ? document.body.innerText : '';",
                "args": []
            })),
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// Runs `js` (a function body; `return` gives the value) in the page; its value.
    pub async fn script(&self, js: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": js, "args": [] })),
        )
        .await
    }

    pub async fn set_window(&self, width: u32, height: u32) {
        self.call(
            reqwest::Method::POST,
            "/window/rect",
            Some(json!({ "width": width, "height": height })),
        )
        .await;
    }

    /// Saves a PNG of the viewport as `target/screenshots/{name}.png`; its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let b64 = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().expect("base64"))
            .expect("png");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let path = screenshot_dir().join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }

    /// Reloads until the page text contains `needle`, up to `tries` reloads one second apart.
    pub async fn reload_until(&self, needle: &str, tries: u32) -> bool {
        for _ in 0..tries {
            if self.page_text().await.contains(needle) {
                return true;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            self.call(reqwest::Method::POST, "/refresh", Some(json!({})))
                .await;
        }
        self.page_text().await.contains(needle)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // A failed test must not leave Chromium behind: end the session (plain HTTP, as Drop
        // cannot await), then stop chromedriver.
        use std::io::{Read, Write};
        if let Some(addr) = self.base.strip_prefix("http://")
            && let Ok(mut s) = std::net::TcpStream::connect(addr)
        {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                s,
                "DELETE /session/{} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                self.session
            );
            let _ = s.read_to_end(&mut Vec::new());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

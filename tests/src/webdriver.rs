//! A minimal W3C WebDriver client over `reqwest`, driving Debian's headless Chromium through
//! `chromedriver`: enough for the browser tests (navigate, find, click, type, run scripts,
//! screenshots). The browser is real; only the client is small.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A browser session, with its chromedriver process and the Chromium it starts (the whole
/// process group is killed on drop, so no browser outlives its test).
#[derive(Debug)]
pub struct Browser {
    http: reqwest::Client,
    base: String,
    driver: Child,
    _profile: tempfile::TempDir,
}

/// A found element.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    /// Starts chromedriver and a headless Chromium with a phone-sized window.
    pub async fn launch(width: u32, height: u32) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting chromedriver (apt-get install chromium chromium-driver)")?;
        let profile = tempfile::tempdir()?;
        let http = reqwest::Client::new();
        let driver_url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = http.get(format!("{driver_url}/status")).send().await
                && r.status().is_success()
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("chromedriver did not start");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage",
                    format!("--window-size={width},{height}"),
                    format!("--user-data-dir={}", profile.path().display()),
                ],
                // Headless windows cannot be narrower than 500 px; device metrics can.
                "mobileEmulation": {"deviceMetrics": {"width": width, "height": height, "pixelRatio": 2.0, "touch": true}},
            },
            "timeouts": {"implicit": 10000, "script": 15000, "pageLoad": 20000},
        }}});
        let r: Value = http
            .post(format!("{driver_url}/session"))
            .json(&caps)
            .send()
            .await?
            .json()
            .await?;
        let id = r["value"]["sessionId"]
            .as_str()
            .with_context(|| format!("no session: {r}"))?
            .to_owned();
        Ok(Self {
            http,
            base: format!("{driver_url}/session/{id}"),
            driver,
            _profile: profile,
        })
    }

    async fn cmd(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let v: Value = req.send().await?.json().await?;
        if let Some(err) = v["value"].get("error") {
            bail!("webdriver {path}: {err}: {}", v["value"]["message"]);
        }
        Ok(v["value"].clone())
    }

    /// Navigates and waits for the load.
    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.cmd(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await
            .map(|_| ())
    }

    /// The current URL.
    pub async fn url(&self) -> anyhow::Result<String> {
        Ok(self
            .cmd(reqwest::Method::GET, "/url", None)
            .await?
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// Finds an element by CSS selector (waiting up to the implicit timeout).
    pub async fn find(&self, css: &str) -> anyhow::Result<Element> {
        let v = self
            .cmd(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await?;
        Ok(Element(
            v[ELEMENT_KEY].as_str().context("element id")?.to_owned(),
        ))
    }

    /// Clicks an element.
    pub async fn click(&self, e: &Element) -> anyhow::Result<()> {
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{}/click", e.0),
            Some(json!({})),
        )
        .await
        .map(|_| ())
    }

    /// Types text into an element.
    pub async fn type_text(&self, e: &Element, text: &str) -> anyhow::Result<()> {
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{}/value", e.0),
            Some(json!({"text": text})),
        )
        .await
        .map(|_| ())
    }

    /// Clears an input.
    pub async fn clear(&self, e: &Element) -> anyhow::Result<()> {
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{}/clear", e.0),
            Some(json!({})),
        )
        .await
        .map(|_| ())
    }

    /// An element's visible text.
    pub async fn text(&self, e: &Element) -> anyhow::Result<String> {
        Ok(self
            .cmd(
                reqwest::Method::GET,
                &format!("/element/{}/text", e.0),
                None,
            )
            .await?
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// A one-finger touch drag on `e` from `(x, y0)` to `(x, y1)` (element-relative offsets
    /// from its centre) in `steps` moves: W3C pointer actions with `pointerType: touch`, which
    /// Chromium delivers as real `touchstart`/`touchmove`/`touchend` events.
    pub async fn touch_drag(
        &self,
        e: &Element,
        x: i64,
        y0: i64,
        y1: i64,
        steps: i64,
    ) -> anyhow::Result<()> {
        let origin = json!({"element-6066-11e4-a52e-4f735466cecf": e.0});
        let mut seq = vec![
            json!({"type": "pointerMove", "duration": 0, "origin": origin, "x": x, "y": y0}),
            json!({"type": "pointerDown", "button": 0}),
        ];
        for i in 1..=steps {
            let y = y0 + (y1 - y0) * i / steps;
            seq.push(
                json!({"type": "pointerMove", "duration": 16, "origin": origin, "x": x, "y": y}),
            );
        }
        seq.push(json!({"type": "pointerUp", "button": 0}));
        self.cmd(
            reqwest::Method::POST,
            "/actions",
            Some(json!({"actions": [{"type": "pointer", "id": "finger",
                "parameters": {"pointerType": "touch"}, "actions": seq}]})),
        )
        .await
        .map(|_| ())
    }

    /// Runs an asynchronous script (it calls `arguments[arguments.length - 1]` with its result;
    /// the driver's script timeout, 30 s by default, bounds it) and returns that result.
    pub async fn eval_async(&self, script: &str, args: Value) -> anyhow::Result<Value> {
        self.cmd(
            reqwest::Method::POST,
            "/execute/async",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Runs a script and returns its value.
    pub async fn eval(&self, script: &str, args: Value) -> anyhow::Result<Value> {
        self.cmd(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Waits until `predicate` (a JS expression over `document`) is truthy, observing DOM
    /// mutations rather than polling on a timer; fails after `timeout_ms`. A navigation in the
    /// middle ends one observation, and the next one starts on the new page.
    pub async fn wait_for(&self, predicate: &str, timeout_ms: u64) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let mut last_err = None;
        while Instant::now() < deadline {
            let slice = deadline
                .saturating_duration_since(Instant::now())
                .as_millis()
                .min(3000);
            let script = format!(
                "const done = arguments[arguments.length - 1];
                 const check = () => {{ try {{ return !!({predicate}); }} catch (e) {{ return false; }} }};
                 if (check()) return done(true);
                 const obs = new MutationObserver(() => {{ if (check()) {{ obs.disconnect(); done(true); }} }});
                 obs.observe(document, {{subtree: true, childList: true, characterData: true, attributes: true}});
                 setTimeout(() => {{ obs.disconnect(); done(check()); }}, {slice});"
            );
            match self
                .cmd(
                    reqwest::Method::POST,
                    "/execute/async",
                    Some(json!({"script": script, "args": []})),
                )
                .await
            {
                Ok(Value::Bool(true)) => return Ok(()),
                Ok(_) => {}
                Err(e) => last_err = Some(e),
            }
        }
        bail!("timed out waiting for: {predicate} (last error: {last_err:?})")
    }

    /// Sends a Chrome DevTools Protocol command through chromedriver
    /// (`POST /session/{id}/goog/cdp/execute`) and returns its result: for what WebDriver has
    /// no verb for, such as `Emulation.setDeviceMetricsOverride` to change the viewport the
    /// page sees (as an on-screen keyboard does) without a new window.
    pub async fn cdp(&self, cmd: &str, params: Value) -> anyhow::Result<Value> {
        self.cmd(
            reqwest::Method::POST,
            "/goog/cdp/execute",
            Some(json!({"cmd": cmd, "params": params})),
        )
        .await
    }

    /// Sets the viewport the page lays out in to `width`×`height` CSS pixels (a phone's, with
    /// touch, when `mobile`), as the page sees it: `resize` events fire and the visual viewport
    /// follows. A phone's keyboard opening is this with a smaller height (the layout Chrome
    /// gives pages that ask for `interactive-widget=resizes-content`).
    pub async fn set_viewport(&self, width: u32, height: u32, mobile: bool) -> anyhow::Result<()> {
        self.cdp(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": if mobile { 2.0 } else { 1.0 },
                   "mobile": mobile, "screenWidth": width, "screenHeight": height}),
        )
        .await?;
        self.cdp(
            "Emulation.setTouchEmulationEnabled",
            json!({"enabled": mobile, "maxTouchPoints": if mobile { 5 } else { 1 }}),
        )
        .await
        .map(|_| ())
    }

    /// Saves a PNG screenshot.
    pub async fn screenshot(&self, path: &std::path::Path) -> anyhow::Result<()> {
        use base64::Engine;
        let v = self.cmd(reqwest::Method::GET, "/screenshot", None).await?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().context("screenshot data")?)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png)?;
        Ok(())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Chromium runs in chromedriver's process group; killing only chromedriver would
        // orphan it.
        if let Some(pgid) = rustix::process::Pid::from_raw(self.driver.id() as i32) {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Where browser tests write screenshots (`tests/artifacts/`).
pub fn artifacts_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("artifacts")
}

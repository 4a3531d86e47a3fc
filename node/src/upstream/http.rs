//! The Streamable HTTP upstream client (spec "HTTP transport"): JSON-RPC POSTed to the
//! server's URL, answered as JSON or as an event stream that may carry progress and other
//! notifications before the answer.
//!
//! Both protocol eras: `auto` asks the stateless 2026-07-28 `server/discover` first and falls
//! back to the legacy `initialize` session (with `mcp-session-id` affinity and recovery of an
//! expired session by one re-initialize). The bearer credential is re-read on every attempt,
//! so a re-saved token takes effect at once; a 401 retries once when storage now holds a
//! different token than the one rejected, and otherwise reports that authorization is needed.
//! HTTPS needs a TLS-enabled build of the HTTP client; this build speaks plain HTTP (loopback,
//! `tailscale serve`, a local gateway) and says so when given an `https` URL.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::client::{ClientEvent, ProgressSink, RpcCore, UpstreamError, initialize_params};
use crate::mcp::protocol as p;
use tuic_proto::mcp as H;

/// Longest SSE event accepted from an upstream.
const MAX_EVENT: usize = 32 * 1024 * 1024;

/// The credential side of an HTTP upstream.
pub trait Auth: Send + Sync {
    /// The bearer for the next attempt, re-read from storage: `Ok(None)` without auth, `Err`
    /// when the stored credential may not be sent to this URL (nothing is sent then). An
    /// expired OAuth token is refreshed first.
    fn bearer(&self) -> BoxFuture<'_, Result<Option<String>, UpstreamError>>;
    /// After a 401 that rejected `rejected`: a different bearer to retry with once (a
    /// generation written meanwhile, or a refreshed one), or `None` when there is none.
    fn recover<'a>(
        &'a self,
        rejected: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<String>, UpstreamError>>;
}

/// Resolves credentials for one HTTP upstream.
pub type BearerSource = Arc<dyn Auth>;

/// No credential at all.
pub struct NoAuth;

impl Auth for NoAuth {
    fn bearer(&self) -> BoxFuture<'_, Result<Option<String>, UpstreamError>> {
        Box::pin(async { Ok(None) })
    }
    fn recover<'a>(
        &'a self,
        _rejected: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<String>, UpstreamError>> {
        Box::pin(async { Ok(None) })
    }
}

/// Which protocol era the connection speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era {
    /// Not connected yet.
    Unknown,
    /// `initialize` session at this revision.
    Legacy(String),
    /// Stateless 2026-07-28.
    Modern,
}

/// Which era to try (`transport.protocol`: `auto`, `legacy` or `modern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EraChoice {
    /// Modern first, legacy on refusal.
    Auto,
    /// Only `initialize`.
    Legacy,
    /// Only `server/discover`.
    Modern,
}

/// One HTTP upstream.
pub struct HttpClient {
    core: Arc<RpcCore>,
    http: reqwest::Client,
    url: String,
    bearer: BearerSource,
    session: Mutex<Option<String>>,
    /// Serializes re-initializing after the server forgot the session.
    reinit: tokio::sync::Mutex<()>,
    era: Mutex<Era>,
    choice: EraChoice,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("url", &self.url)
            .field("era", &self.era)
            .finish_non_exhaustive()
    }
}

type Answer = Result<Value, UpstreamError>;

/// One POST's outcome.
enum Posted {
    /// The answer (matched by id through the core).
    Answer(Answer),
    /// A notification was accepted.
    Accepted,
    /// 401 with this challenge.
    Unauthorized(String),
    /// 404 or 400 on a session request: the session expired (the spec says 404; the
    /// reference servers answer 400 for an id they do not know, e.g. after a restart). The
    /// HTTP status and an excerpt of the body, for the error when a new session does not help.
    SessionGone(String),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl HttpClient {
    /// A client for `url` (no request is sent yet).
    pub fn new(
        upstream: &str,
        url: &str,
        choice: EraChoice,
        bearer: BearerSource,
        events: tokio::sync::mpsc::Sender<ClientEvent>,
    ) -> Result<Self, UpstreamError> {
        if url.to_ascii_lowercase().starts_with("https://") {
            return Err(UpstreamError::Transport(
                "https upstreams need a TLS-enabled build; this node speaks plain http (put a local TLS-terminating proxy in front, or use http on loopback/tailnet)".into(),
            ));
        }
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| UpstreamError::Transport(format!("building the HTTP client: {e}")))?;
        Ok(Self {
            core: Arc::new(RpcCore::new(upstream, events)),
            http,
            url: url.to_owned(),
            bearer,
            session: Mutex::new(None),
            reinit: tokio::sync::Mutex::new(()),
            era: Mutex::new(Era::Unknown),
            choice,
        })
    }

    /// Opens the connection: `server/discover` (modern) or `initialize` + `initialized`
    /// (legacy), as `choice` allows. Returns the revision in use.
    pub async fn connect(&self, timeout: Duration) -> Result<String, UpstreamError> {
        if self.choice != EraChoice::Legacy {
            *lock(&self.era) = Era::Modern;
            match self
                .request("server/discover", json!({}), timeout, None)
                .await
            {
                Ok(r) => {
                    let modern = r
                        .get("supportedVersions")
                        .and_then(Value::as_array)
                        .is_some_and(|v| v.iter().any(|x| x == p::MODERN));
                    if modern {
                        return Ok(p::MODERN.into());
                    }
                    if self.choice == EraChoice::Modern {
                        return Err(UpstreamError::Protocol(
                            "server/discover does not list 2026-07-28".into(),
                        ));
                    }
                }
                Err(
                    e @ (UpstreamError::NeedsAuth { .. }
                    | UpstreamError::Origin(_)
                    | UpstreamError::AuthFailed(_)),
                ) => {
                    return Err(e);
                }
                Err(e) if self.choice == EraChoice::Modern => return Err(e),
                Err(e) => {
                    tracing::debug!(source = "upstream", upstream = %self.core.upstream, error = %e, "server/discover refused; trying initialize");
                }
            }
        }
        self.initialize(timeout).await
    }

    async fn initialize(&self, timeout: Duration) -> Result<String, UpstreamError> {
        *lock(&self.era) = Era::Unknown;
        lock(&self.session).take();
        let r = self
            .request(
                "initialize",
                initialize_params(p::LEGACY_DEFAULT),
                timeout,
                None,
            )
            .await?;
        let version = r
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or(p::LEGACY_DEFAULT)
            .to_owned();
        *lock(&self.era) = Era::Legacy(version.clone());
        self.notify("notifications/initialized").await;
        Ok(version)
    }

    async fn notify(&self, method: &str) {
        let msg = json!({"jsonrpc": "2.0", "method": method});
        let bearer = self.bearer.bearer().await.ok().flatten();
        let _ = self
            .builder(method, None, bearer.as_deref())
            .body(msg.to_string())
            .send()
            .await;
    }

    fn builder(
        &self,
        method: &str,
        params: Option<&Value>,
        bearer: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let mut b = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        match &*lock(&self.era) {
            Era::Modern => {
                b = b
                    .header(H::VERSION_HEADER, p::MODERN)
                    .header(H::METHOD_HEADER, method);
                if let Some(n) = params
                    .and_then(Value::as_object)
                    .and_then(|m| p::call_name(method, m))
                {
                    b = b.header(H::NAME_HEADER, n);
                }
            }
            Era::Legacy(v) => b = b.header(H::VERSION_HEADER, v.as_str()),
            Era::Unknown => {}
        }
        if let Some(s) = &*lock(&self.session) {
            b = b.header(H::SESSION_HEADER, s.as_str());
        }
        if let Some(t) = bearer {
            b = b.bearer_auth(t);
        }
        b
    }

    /// One request with a deadline over the whole exchange.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        progress: Option<(Value, ProgressSink)>,
    ) -> Result<Value, UpstreamError> {
        let (id, rx, mut msg) = self.core.start(method, params, progress);
        let _forget = self.core.finish_on_drop(id);
        if *lock(&self.era) == Era::Modern {
            let meta = &mut msg["params"]["_meta"];
            if !meta.is_object() {
                *meta = json!({});
            }
            meta[p::META_VERSION] = json!(p::MODERN);
            meta[p::META_CLIENT_INFO] =
                json!({"name": "tuicommander-proxy", "version": env!("CARGO_PKG_VERSION")});
            meta[p::META_CLIENT_CAPS] = json!({});
        }
        let r = tokio::time::timeout(timeout, self.exchange(method, &msg, rx)).await;
        self.core.finish(id);
        match r {
            Ok(r) => r,
            Err(_) => Err(UpstreamError::Timeout(timeout.as_millis() as u64)),
        }
    }

    async fn exchange(
        &self,
        method: &str,
        msg: &Value,
        mut rx: tokio::sync::oneshot::Receiver<Answer>,
    ) -> Result<Value, UpstreamError> {
        let mut retried_auth = false;
        let mut reinitialized = false;
        loop {
            // Re-read per attempt: a completed re-authorization counts at once.
            let bearer = self.bearer.bearer().await?;
            let sent = lock(&self.session).clone();
            match self.post(method, msg, bearer.as_deref(), &mut rx).await? {
                Posted::Answer(a) => return a,
                Posted::Accepted => return Ok(Value::Null),
                Posted::Unauthorized(www) => {
                    // Once: storage holds a different generation than the one just rejected
                    // (retried as it is), or the rejected OAuth token refreshes; otherwise
                    // authorization is needed.
                    if !retried_auth {
                        retried_auth = true;
                        if self.bearer.recover(bearer.as_deref()).await?.is_some() {
                            continue;
                        }
                    }
                    return Err(UpstreamError::NeedsAuth {
                        www_authenticate: www,
                    });
                }
                Posted::SessionGone(why) if !reinitialized => {
                    reinitialized = true;
                    // One new session for all the requests that found the old one gone:
                    // whoever comes second retries on the session the first one made.
                    let _one = self.reinit.lock().await;
                    if *lock(&self.session) == sent {
                        tracing::info!(source = "upstream", upstream = %self.core.upstream, answer = %why, "upstream session unknown to the server; initializing again");
                        self.reinitialize().await?;
                    }
                }
                Posted::SessionGone(why) => {
                    return Err(UpstreamError::Closed(format!(
                        "the upstream refused its new session too ({why})"
                    )));
                }
            }
        }
    }

    async fn reinitialize(&self) -> Result<(), UpstreamError> {
        let bearer = self.bearer.bearer().await?;
        let (id, mut rx, msg) =
            self.core
                .start("initialize", initialize_params(p::LEGACY_DEFAULT), None);
        lock(&self.session).take();
        let era = std::mem::replace(&mut *lock(&self.era), Era::Unknown);
        let r = self
            .post("initialize", &msg, bearer.as_deref(), &mut rx)
            .await;
        self.core.finish(id);
        *lock(&self.era) = era;
        match r? {
            Posted::Answer(a) => {
                a?;
                self.notify("notifications/initialized").await;
                Ok(())
            }
            _ => Err(UpstreamError::Closed(
                "the upstream refused a new session".into(),
            )),
        }
    }

    /// POSTs `msg` and feeds whatever comes back (JSON, or an event stream up to the answer)
    /// to the core, which resolves `rx`.
    async fn post(
        &self,
        method: &str,
        msg: &Value,
        bearer: Option<&str>,
        rx: &mut tokio::sync::oneshot::Receiver<Answer>,
    ) -> Result<Posted, UpstreamError> {
        use tokio::sync::oneshot::error::TryRecvError;
        let answered = |rx: &mut tokio::sync::oneshot::Receiver<Answer>| match rx.try_recv() {
            Ok(a) => Some(a),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Closed) => Some(Err(UpstreamError::Closed(
                "the request was abandoned".into(),
            ))),
        };
        let had_session = lock(&self.session).is_some();
        let resp = self
            .builder(method, msg.get("params"), bearer)
            .body(msg.to_string())
            .send()
            .await
            .map_err(|e| UpstreamError::Transport(format!("POST {}: {}", self.url, short(&e))))?;
        let status = resp.status();
        if status == reqwest::StatusCode::UNAUTHORIZED {
            let www = resp
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            return Ok(Posted::Unauthorized(www));
        }
        if had_session
            && method != "initialize"
            && (status == reqwest::StatusCode::NOT_FOUND
                || status == reqwest::StatusCode::BAD_REQUEST)
        {
            let body = resp.text().await.unwrap_or_default();
            return Ok(Posted::SessionGone(format!(
                "HTTP {status} from {}: {}",
                self.url,
                excerpt(&body)
            )));
        }
        if let Some(s) = resp
            .headers()
            .get(H::SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            *lock(&self.session) = Some(s.to_owned());
        }
        let is_sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if is_sse {
            let mut dec = tuic_proto::sse::SseDecoder::new(MAX_EVENT);
            let mut body = resp.bytes_stream();
            loop {
                let Some(chunk) = body.next().await else {
                    return Err(UpstreamError::Protocol(format!(
                        "the event stream of {method} ended without an answer"
                    )));
                };
                let chunk = chunk.map_err(|e| {
                    UpstreamError::Transport(format!("reading {}: {}", self.url, short(&e)))
                })?;
                dec.feed(&chunk)
                    .map_err(|e| UpstreamError::Protocol(format!("event stream: {e}")))?;
                while let Some(ev) = dec.poll_event() {
                    if ev.data.trim().is_empty() {
                        continue;
                    }
                    match serde_json::from_str::<Value>(&ev.data) {
                        Ok(v) => self.feed(v, bearer).await,
                        Err(_) => {
                            return Err(UpstreamError::Protocol(format!(
                                "an event that is not JSON: {}",
                                excerpt(&ev.data)
                            )));
                        }
                    }
                }
                // Answered mid-stream: stop reading (the server ends the stream anyway).
                if let Some(a) = answered(rx) {
                    return Ok(Posted::Answer(a));
                }
            }
        }
        let bytes = resp.bytes().await.map_err(|e| {
            UpstreamError::Transport(format!("reading {}: {}", self.url, short(&e)))
        })?;
        if status == reqwest::StatusCode::ACCEPTED && msg.get("id").is_none() {
            return Ok(Posted::Accepted);
        }
        let parsed: Value = serde_json::from_slice(&bytes).map_err(|_| {
            if status.is_success() {
                UpstreamError::Protocol(format!(
                    "HTTP {status} with a body that is not JSON: {}",
                    excerpt(&String::from_utf8_lossy(&bytes))
                ))
            } else {
                UpstreamError::Transport(format!(
                    "HTTP {status}: {}",
                    excerpt(&String::from_utf8_lossy(&bytes))
                ))
            }
        })?;
        match parsed {
            Value::Array(items) => {
                for v in items {
                    self.feed(v, bearer).await;
                }
            }
            v => self.feed(v, bearer).await,
        }
        match answered(rx) {
            Some(a) => Ok(Posted::Answer(a)),
            None if status.is_success() => Err(UpstreamError::Protocol(format!(
                "HTTP {status} without an answer to {method}"
            ))),
            None => Err(UpstreamError::Transport(format!(
                "HTTP {status} from {}",
                self.url
            ))),
        }
    }

    /// One message from the upstream; a request it made of us is answered with a POST.
    async fn feed(&self, v: Value, bearer: Option<&str>) {
        if let Some(reply) = self.core.incoming(v) {
            let _ = self
                .builder("", None, bearer)
                .body(reply.to_string())
                .send()
                .await;
        }
    }

    /// Ends a legacy session (`DELETE`), best effort.
    pub async fn shutdown(&self) {
        let sid = lock(&self.session).take();
        if let Some(sid) = sid {
            let _ = tokio::time::timeout(
                Duration::from_secs(2),
                self.http
                    .delete(&self.url)
                    .header(H::SESSION_HEADER, sid)
                    .send(),
            )
            .await;
        }
    }

    /// The revision in use.
    pub fn protocol(&self) -> String {
        match &*lock(&self.era) {
            Era::Modern => p::MODERN.into(),
            Era::Legacy(v) => v.clone(),
            Era::Unknown => String::new(),
        }
    }
}

fn short(e: &reqwest::Error) -> String {
    // reqwest's Display names the URL; the source chain says why (refused, reset, ...).
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        s = format!("{s}: {x}");
        src = x.source();
    }
    s
}

fn excerpt(s: &str) -> String {
    s.chars().take(200).collect()
}

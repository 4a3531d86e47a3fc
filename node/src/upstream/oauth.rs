//! OAuth 2.1 for HTTP upstreams (spec "OAuth 2.1 Upstream Authentication").
//!
//! - **Discovery**: the 401 challenge's `resource_metadata` (else the RFC 9728 well-known
//!   paths) gives the protected-resource metadata, whose first authorization server is
//!   resolved through RFC 8414 (`oauth-authorization-server`, falling back to
//!   `openid-configuration`). An issuer mismatch is logged, not refused; an authorization
//!   server on another host is reported as `cross_domain_as` for the consent step.
//! - **Registration**: RFC 7591 dynamic client registration when the server offers it and
//!   the config names no `client_id` — one public client per flow, since the loopback
//!   redirect's port is the flow's own.
//! - **Flow**: PKCE S256 and the opaque state from the `oauth2` crate; the pending flow is
//!   recorded in a map keyed by state *before* the upstream says `authorizing`; each flow owns
//!   its verifier, state and loopback callback server on `127.0.0.1:0`, so flows share
//!   nothing and are never serialized. The callback server lives for the flow's timeout plus
//!   a grace period (a late redirect gets a page naming why) and closes 2 s after a served
//!   success. A sweep drops expired flows and rolls their upstream back to `needs_auth`;
//!   cancel does the same at once.
//! - **Tokens**: exchanged and refreshed through the `oauth2` crate, stored in the vault in
//!   one write with the MCP origin they were authorized for; the origin is checked before
//!   every request and before every refresh. A refresh runs under a per-upstream semaphore:
//!   concurrent requests that find an expired token, or a 401, wait for one refresh; a 401
//!   carries the rejected token, so a generation written meanwhile is retried as it is.
//!
//! No token, code, verifier or client secret is ever logged or put in an answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use oauth2::basic::BasicClient;
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, RefreshToken, RequestTokenError, Scope, TokenResponse, TokenUrl,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::client::UpstreamError;
use super::config::origin_of;
use crate::state::Node;

/// A successful callback's server closes this long after its page was served.
const CLOSE_AFTER_SUCCESS: Duration = Duration::from_secs(2);
/// Budget of one discovery, registration or token request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest metadata document accepted.
const MAX_DOC: usize = 256 * 1024;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now_ms() -> u64 {
    crate::logs::now_ms()
}

/// A stored upstream credential: a static bearer token or an OAuth token set, with the MCP
/// origin it may be sent to. One vault entry, written in one write.
#[derive(Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Credential {
    /// `bearer` or `oauth2`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The MCP origin this secret was saved for; absent on entries saved before binding.
    #[serde(default)]
    pub origin: Option<String>,
    /// The bearer (static token or OAuth access token).
    pub token: String,
    /// OAuth: the refresh token, if one was issued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// OAuth: when the access token expires (ms since the epoch); `None` = no known expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// OAuth: where refreshes go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint: Option<String>,
    /// OAuth: the client the tokens were issued to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// OAuth: its secret, when the registration issued one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// OAuth: `client_secret_post`, `client_secret_basic` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth_method: Option<String>,
    /// OAuth: the RFC 8707 resource the tokens were requested for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// OAuth: the authorization server's issuer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// OAuth: the scopes granted (or requested).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets: a Debug print may end up in a log.
        f.debug_struct("Credential")
            .field("kind", &self.kind)
            .field("origin", &self.origin)
            .field("expires_at_ms", &self.expires_at_ms)
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl Credential {
    /// A static bearer token bound to `origin`.
    pub fn bearer(origin: Option<String>, token: String) -> Self {
        Self {
            kind: "bearer".into(),
            origin,
            token,
            refresh_token: None,
            expires_at_ms: None,
            token_endpoint: None,
            client_id: None,
            client_secret: None,
            token_endpoint_auth_method: None,
            resource: None,
            issuer: None,
            scopes: Vec::new(),
        }
    }

    fn is_oauth(&self) -> bool {
        self.kind == "oauth2"
    }

    /// Expired, or within `margin_ms` of expiring. No known expiry is never expired.
    fn expired(&self, margin_ms: u64) -> bool {
        self.expires_at_ms
            .is_some_and(|t| t <= now_ms().saturating_add(margin_ms))
    }
}

/// The vault key of an upstream's credential.
pub fn vault_key(id: &str) -> String {
    format!("mcp_upstream:{id}")
}

/// Why an authorization could not start or finish. The message is for a person.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OAuthError {
    /// No such upstream, or not an HTTP one.
    #[error("{0}")]
    NotFound(String),
    /// The request cannot be served as asked.
    #[error("{0}")]
    Invalid(String),
    /// Discovery, registration or the token endpoint failed.
    #[error("{0}")]
    Server(String),
}

/// What [`OAuth::start`] hands the consent step.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Started {
    /// The upstream.
    pub upstream: String,
    /// Open this in a browser.
    pub authorize_url: String,
    /// The authorization server's origin, to show before consent.
    pub authorization_server: String,
    /// The authorization server is on another host than the MCP server.
    pub cross_domain_as: bool,
    /// The client was registered dynamically for this flow.
    pub registered: bool,
    /// The loopback callback the browser will be redirected to.
    pub redirect_uri: String,
    /// When the flow is dropped if no callback arrives.
    pub expires_at_ms: u64,
    /// `authorizing`.
    pub state: &'static str,
}

/// One pending authorization.
struct Flow {
    state: String,
    upstream_id: String,
    upstream_name: String,
    origin: String,
    verifier: String,
    redirect_uri: String,
    authorization_endpoint: String,
    token_endpoint: String,
    client_id: String,
    client_secret: Option<String>,
    auth_method: String,
    resource: String,
    issuer: String,
    scopes: Vec<String>,
    expires_at_ms: u64,
    /// Ends the flow's callback server.
    server: CancellationToken,
}

/// How a flow ended, kept for the callback server's grace period so a late redirect gets a
/// page naming the reason.
#[derive(Debug, Clone)]
struct Finished {
    reason: &'static str,
    until_ms: u64,
}

/// Discovered endpoints of one upstream.
#[derive(Debug, Clone)]
struct Endpoints {
    authorization_endpoint: String,
    token_endpoint: String,
    registration_endpoint: Option<String>,
    issuer: String,
    resource: String,
    scopes: Vec<String>,
    token_auth_methods: Vec<String>,
}

/// The node's OAuth state: pending flows, recently finished ones, refresh semaphores and
/// the last authorization error per upstream.
#[derive(Default)]
pub struct OAuth {
    flows: Mutex<HashMap<String, Arc<Flow>>>,
    finished: Mutex<HashMap<String, Finished>>,
    refresh: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
    errors: Mutex<HashMap<String, String>>,
    /// Counters for the status: refreshes done, by upstream id.
    refreshes: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("pending", &lock(&self.flows).len())
            .finish_non_exhaustive()
    }
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        // Following redirects from an authorization server is an SSRF door.
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .build()
        .unwrap_or_default()
}

fn short(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        s = format!("{s}: {x}");
        src = x.source();
    }
    s
}

/// The parameters of a `WWW-Authenticate: Bearer k=v, k="v"` challenge (keys lowercased).
pub fn parse_challenge(header: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let rest = header.trim();
    let rest = match rest.split_once(char::is_whitespace) {
        Some((scheme, r)) if scheme.eq_ignore_ascii_case("bearer") => r,
        _ if rest.eq_ignore_ascii_case("bearer") => "",
        _ => rest,
    };
    let b = rest.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i] == b',' || b[i].is_ascii_whitespace()) {
            i += 1;
        }
        let ks = i;
        while i < b.len() && b[i] != b'=' && b[i] != b',' {
            i += 1;
        }
        let key = rest[ks..i].trim().to_ascii_lowercase();
        if i >= b.len() || b[i] != b'=' {
            continue;
        }
        i += 1;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut val = String::new();
        if i < b.len() && b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                val.push(b[i] as char);
                i += 1;
            }
            i += 1;
        } else {
            let vs = i;
            while i < b.len() && b[i] != b',' {
                i += 1;
            }
            val = rest[vs..i].trim().to_owned();
        }
        if !key.is_empty() {
            out.insert(key, val);
        }
    }
    out
}

/// `{origin}/.well-known/{name}{path}` (RFC 8414 §3.1 / RFC 9728 §3.1 path insertion).
fn well_known(url: &str, name: &str) -> Option<String> {
    let origin = origin_of(url)?;
    let after = url.split_once("://")?.1;
    let path = after
        .find('/')
        .map(|i| &after[i..])
        .unwrap_or("")
        .split(['?', '#'])
        .next()
        .unwrap_or("")
        .trim_end_matches('/');
    Some(format!("{origin}/.well-known/{name}{path}"))
}

fn host_of(origin: &str) -> &str {
    let hp = origin.split_once("://").map(|x| x.1).unwrap_or(origin);
    match hp.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|c| c.is_ascii_digit()) => h,
        _ => hp,
    }
}

async fn get_json(http: &reqwest::Client, url: &str) -> Result<Option<Value>, String> {
    let r = http
        .get(url)
        .header("accept", "application/json")
        .send()
        .await
        .map_err(|e| format!("GET {url}: {}", short(&e)))?;
    if r.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    if !r.status().is_success() {
        return Err(format!("GET {url}: HTTP {}", r.status()));
    }
    let bytes = r
        .bytes()
        .await
        .map_err(|e| format!("GET {url}: {}", short(&e)))?;
    if bytes.len() > MAX_DOC {
        return Err(format!("GET {url}: the document is over {MAX_DOC} bytes"));
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| format!("GET {url}: not JSON ({e})"))
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Protected-resource and authorization-server discovery for the MCP endpoint `url`.
async fn discover(
    http: &reqwest::Client,
    url: &str,
    challenge: Option<&str>,
    auth: Option<&Value>,
) -> Result<Endpoints, OAuthError> {
    let origin =
        origin_of(url).ok_or_else(|| OAuthError::Invalid(format!("{url} is not an http URL")))?;
    // The challenge: from the 401 the supervisor saw, else an unauthenticated probe.
    let challenge = match challenge {
        Some(c) if !c.is_empty() => Some(c.to_owned()),
        _ => {
            let probe = http
                .post(url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(
                    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": super::client::initialize_params(crate::mcp::protocol::LEGACY_DEFAULT)})
                    .to_string(),
                )
                .send()
                .await
                .map_err(|e| OAuthError::Server(format!("probing {url}: {}", short(&e))))?;
            probe
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        }
    };
    let params = challenge
        .as_deref()
        .map(parse_challenge)
        .unwrap_or_default();
    let cfg = |k: &str| {
        auth.and_then(|a| a.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let cfg_scopes: Vec<String> = auth.map(|a| strings(a, "scopes")).unwrap_or_default();

    // RFC 9728: the challenge's URL, else the well-known paths (path-inserted, then root).
    let mut prm = None;
    let mut tried = Vec::new();
    let mut candidates = Vec::new();
    if let Some(u) = params.get("resource_metadata") {
        candidates.push(u.clone());
    }
    if let Some(u) = well_known(url, "oauth-protected-resource") {
        candidates.push(u);
    }
    candidates.push(format!("{origin}/.well-known/oauth-protected-resource"));
    candidates.dedup();
    for c in &candidates {
        match get_json(http, c).await {
            Ok(Some(v)) => {
                prm = Some(v);
                break;
            }
            Ok(None) => tried.push(format!("{c}: 404")),
            Err(e) => tried.push(e),
        }
    }
    let (issuer_url, resource, prm_scopes) = match &prm {
        Some(p) => {
            let resource = p
                .get("resource")
                .and_then(Value::as_str)
                .unwrap_or(url)
                .to_owned();
            if origin_of(&resource).as_deref() != Some(origin.as_str()) {
                return Err(OAuthError::Server(format!(
                    "the protected-resource metadata names resource {resource}, not this upstream's origin {origin}; refusing (a mix-up)"
                )));
            }
            let servers = strings(p, "authorization_servers");
            let Some(first) = servers.into_iter().next() else {
                return Err(OAuthError::Server(
                    "the protected-resource metadata lists no authorization_servers".into(),
                ));
            };
            (first, resource, strings(p, "scopes_supported"))
        }
        None => {
            // No RFC 9728 document: the configured endpoints, else the MCP origin itself
            // as the authorization server (the 2025-03-26 fallback).
            if let (Some(a), Some(t)) = (cfg("authorization_endpoint"), cfg("token_endpoint")) {
                return Ok(Endpoints {
                    authorization_endpoint: a,
                    token_endpoint: t,
                    registration_endpoint: cfg("registration_endpoint"),
                    issuer: origin.clone(),
                    resource: url.to_owned(),
                    scopes: cfg_scopes,
                    token_auth_methods: Vec::new(),
                });
            }
            tracing::info!(source = "upstream", tried = %tried.join("; "), "no protected-resource metadata; trying the MCP origin as the authorization server");
            (origin.clone(), url.to_owned(), Vec::new())
        }
    };

    // RFC 8414, then OpenID Connect discovery.
    let mut meta = None;
    let mut as_tried = Vec::new();
    let mut as_candidates = Vec::new();
    if let Some(u) = well_known(&issuer_url, "oauth-authorization-server") {
        as_candidates.push(u);
    }
    if let Some(u) = well_known(&issuer_url, "openid-configuration") {
        as_candidates.push(u);
    }
    as_candidates.push(format!(
        "{}/.well-known/openid-configuration",
        issuer_url.trim_end_matches('/')
    ));
    as_candidates.dedup();
    for c in &as_candidates {
        match get_json(http, c).await {
            Ok(Some(v)) => {
                meta = Some(v);
                break;
            }
            Ok(None) => as_tried.push(format!("{c}: 404")),
            Err(e) => as_tried.push(e),
        }
    }
    let Some(meta) = meta else {
        return Err(OAuthError::Server(format!(
            "authorization server {issuer_url}: no metadata ({})",
            as_tried.join("; ")
        )));
    };
    let issuer = meta
        .get("issuer")
        .and_then(Value::as_str)
        .unwrap_or(&issuer_url)
        .to_owned();
    if issuer.trim_end_matches('/') != issuer_url.trim_end_matches('/') {
        // RFC 8414 §3.3 says refuse; gateways and hosted tenants break that rule routinely,
        // so the spec logs and lets the person decide at consent.
        tracing::warn!(source = "upstream", issuer = %issuer, discovered_at = %issuer_url, "authorization server issuer does not match its discovery URL; continuing");
    }
    let methods = strings(&meta, "code_challenge_methods_supported");
    if !methods.iter().any(|m| m == "S256") {
        return Err(OAuthError::Server(format!(
            "authorization server {issuer}: code_challenge_methods_supported does not list S256 (PKCE is required)"
        )));
    }
    let endpoint =
        |k: &str| cfg(k).or_else(|| meta.get(k).and_then(Value::as_str).map(str::to_owned));
    let authorization_endpoint = endpoint("authorization_endpoint").ok_or_else(|| {
        OAuthError::Server(format!(
            "authorization server {issuer}: no authorization_endpoint"
        ))
    })?;
    let token_endpoint = endpoint("token_endpoint").ok_or_else(|| {
        OAuthError::Server(format!("authorization server {issuer}: no token_endpoint"))
    })?;
    let scopes = if !cfg_scopes.is_empty() {
        cfg_scopes
    } else if let Some(s) = params.get("scope") {
        s.split_whitespace().map(str::to_owned).collect()
    } else {
        prm_scopes
    };
    Ok(Endpoints {
        authorization_endpoint,
        token_endpoint,
        registration_endpoint: meta
            .get("registration_endpoint")
            .and_then(Value::as_str)
            .map(str::to_owned),
        issuer,
        resource,
        scopes,
        token_auth_methods: strings(&meta, "token_endpoint_auth_methods_supported"),
    })
}

/// RFC 7591: a public client for `redirect_uri`. Returns (client_id, secret, auth method).
async fn register(
    http: &reqwest::Client,
    endpoint: &str,
    redirect_uri: &str,
    scopes: &[String],
    methods: &[String],
) -> Result<(String, Option<String>, String), OAuthError> {
    // A public client with PKCE, unless the server only takes secrets.
    let method = if methods.is_empty() || methods.iter().any(|m| m == "none") {
        "none"
    } else if methods.iter().any(|m| m == "client_secret_post") {
        "client_secret_post"
    } else {
        "client_secret_basic"
    };
    let mut body = json!({
        "client_name": "tuicommander",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
    });
    if !scopes.is_empty() {
        body["scope"] = json!(scopes.join(" "));
    }
    let r = http.post(endpoint).json(&body).send().await.map_err(|e| {
        OAuthError::Server(format!("registering a client at {endpoint}: {}", short(&e)))
    })?;
    let status = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        return Err(OAuthError::Server(format!(
            "client registration at {endpoint}: HTTP {status} {} {}",
            v.get("error").and_then(Value::as_str).unwrap_or(""),
            v.get("error_description")
                .and_then(Value::as_str)
                .unwrap_or("")
        )));
    }
    let id = v.get("client_id").and_then(Value::as_str).ok_or_else(|| {
        OAuthError::Server(format!("client registration at {endpoint}: no client_id"))
    })?;
    let secret = v
        .get("client_secret")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let method = v
        .get("token_endpoint_auth_method")
        .and_then(Value::as_str)
        .unwrap_or(method)
        .to_owned();
    Ok((id.to_owned(), secret, method))
}

fn token_error<RE: std::error::Error + 'static>(
    what: &str,
    endpoint: &str,
    e: RequestTokenError<RE, oauth2::basic::BasicErrorResponse>,
) -> (bool, String) {
    match e {
        RequestTokenError::ServerResponse(r) => {
            let mut m = format!("{what} at {endpoint} refused: {}", r.error());
            if let Some(d) = r.error_description() {
                m.push_str(&format!(" ({d})"));
            }
            (true, m)
        }
        RequestTokenError::Request(e) => {
            let mut s = e.to_string();
            let mut src = e.source();
            while let Some(x) = src {
                s = format!("{s}: {x}");
                src = x.source();
            }
            (false, format!("{what} at {endpoint}: {s}"))
        }
        RequestTokenError::Parse(e, _) => (
            false,
            format!("{what} at {endpoint}: unreadable answer ({e})"),
        ),
        RequestTokenError::Other(s) => (false, format!("{what} at {endpoint}: {s}")),
    }
}

fn auth_type(method: &str) -> AuthType {
    if method == "client_secret_basic" {
        AuthType::BasicAuth
    } else {
        AuthType::RequestBody
    }
}

impl OAuth {
    /// The last authorization error of upstream `id`.
    pub fn error(&self, id: &str) -> Option<String> {
        lock(&self.errors).get(id).cloned()
    }

    fn set_error(&self, id: &str, e: &str) {
        lock(&self.errors).insert(id.to_owned(), e.to_owned());
    }

    /// The pending flow of upstream `id`, as the status shows it.
    pub fn pending(&self, id: &str) -> Option<Value> {
        lock(&self.flows)
            .values()
            .filter(|f| f.upstream_id == id)
            .max_by_key(|f| f.expires_at_ms)
            .map(|f| {
                json!({"expires_at_ms": f.expires_at_ms, "authorization_server": origin_of(&f.authorization_endpoint),
                    "redirect_uri": f.redirect_uri})
            })
    }

    /// Refreshes done for upstream `id` since the node started.
    pub fn refresh_count(&self, id: &str) -> u64 {
        lock(&self.refreshes).get(id).copied().unwrap_or(0)
    }

    fn semaphore(&self, id: &str) -> Arc<tokio::sync::Semaphore> {
        lock(&self.refresh)
            .entry(id.to_owned())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(1)))
            .clone()
    }

    fn finish(&self, state: &str, _upstream: &str, reason: &'static str, grace_ms: u64) {
        lock(&self.finished).insert(
            state.to_owned(),
            Finished {
                reason,
                until_ms: now_ms() + grace_ms,
            },
        );
    }

    /// Drops the flows past their deadline; returns the upstream ids whose flow expired.
    pub fn sweep(&self, grace_ms: u64) -> Vec<String> {
        let now = now_ms();
        let expired: Vec<Arc<Flow>> = {
            let mut flows = lock(&self.flows);
            let gone: Vec<String> = flows
                .iter()
                .filter(|(_, f)| f.expires_at_ms <= now)
                .map(|(k, _)| k.clone())
                .collect();
            gone.iter().filter_map(|k| flows.remove(k)).collect()
        };
        lock(&self.finished).retain(|_, f| f.until_ms > now);
        let mut ids = Vec::new();
        for f in expired {
            tracing::info!(source = "upstream", upstream = %f.upstream_name, "OAuth authorization expired without a callback");
            self.finish(&f.state, &f.upstream_name, "expired", grace_ms);
            self.set_error(
                &f.upstream_id,
                "the authorization expired before the browser came back; start it again",
            );
            ids.push(f.upstream_id.clone());
        }
        ids
    }

    /// Drops every pending flow of upstream `id`; returns how many.
    pub fn cancel(&self, id: &str, grace_ms: u64) -> usize {
        let gone: Vec<Arc<Flow>> = {
            let mut flows = lock(&self.flows);
            let keys: Vec<String> = flows
                .iter()
                .filter(|(_, f)| f.upstream_id == id)
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter().filter_map(|k| flows.remove(k)).collect()
        };
        for f in &gone {
            self.finish(&f.state, &f.upstream_name, "cancelled", grace_ms);
        }
        gone.len()
    }

    /// Starts an authorization for an HTTP upstream: discovery, registration, PKCE, the
    /// loopback callback server, the pending flow. Returns what the consent step shows.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        self: &Arc<Self>,
        node: &Arc<Node>,
        id: &str,
        name: &str,
        url: &str,
        auth: Option<&Value>,
        challenge: Option<&str>,
    ) -> Result<Started, OAuthError> {
        let tun = node.config().tuning.clone();
        let http = http_client();
        let origin = origin_of(url)
            .ok_or_else(|| OAuthError::Invalid(format!("{url} is not an http URL")))?;
        let ep = match discover(&http, url, challenge, auth).await {
            Ok(ep) => ep,
            Err(e) => {
                self.set_error(id, &e.to_string());
                return Err(e);
            }
        };
        // The loopback callback, on a port of the OS's choosing, owned by this flow alone.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| OAuthError::Server(format!("binding the loopback callback: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| OAuthError::Server(format!("loopback callback: {e}")))?
            .port();
        let redirect_uri = format!("http://127.0.0.1:{port}/callback");
        let configured = auth
            .and_then(|a| a.get("client_id"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let (client_id, client_secret, method, registered) = match (
            configured,
            &ep.registration_endpoint,
        ) {
            (Some(cid), _) => (cid, None, "none".to_owned(), false),
            (None, Some(reg)) => {
                let (cid, secret, m) = register(
                    &http,
                    reg,
                    &redirect_uri,
                    &ep.scopes,
                    &ep.token_auth_methods,
                )
                .await
                .inspect_err(|e| self.set_error(id, &e.to_string()))?;
                (cid, secret, m, true)
            }
            (None, None) => {
                let e = OAuthError::Server(format!(
                    "authorization server {} offers no dynamic client registration; set auth.client_id for upstream {name}",
                    ep.issuer
                ));
                self.set_error(id, &e.to_string());
                return Err(e);
            }
        };
        let bad_url =
            |e: url::ParseError| OAuthError::Server(format!("an endpoint is not a URL: {e}"));
        let client = BasicClient::new(ClientId::new(client_id.clone()))
            .set_auth_uri(AuthUrl::new(ep.authorization_endpoint.clone()).map_err(bad_url)?)
            .set_token_uri(TokenUrl::new(ep.token_endpoint.clone()).map_err(bad_url)?)
            .set_redirect_uri(RedirectUrl::new(redirect_uri.clone()).map_err(bad_url)?);
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut req = client
            .authorize_url(CsrfToken::new_random)
            .set_pkce_challenge(challenge)
            .add_extra_param("resource", ep.resource.clone());
        for s in &ep.scopes {
            req = req.add_scope(Scope::new(s.clone()));
        }
        let (authorize_url, state) = req.url();
        let as_origin = origin_of(&ep.authorization_endpoint).unwrap_or_else(|| ep.issuer.clone());
        let cross_domain_as = host_of(&as_origin) != host_of(&origin);
        let expires_at_ms = now_ms() + tun.upstream_oauth_flow_timeout_ms;
        let flow = Arc::new(Flow {
            state: state.secret().clone(),
            upstream_id: id.to_owned(),
            upstream_name: name.to_owned(),
            origin,
            verifier: verifier.secret().clone(),
            redirect_uri: redirect_uri.clone(),
            authorization_endpoint: ep.authorization_endpoint.clone(),
            token_endpoint: ep.token_endpoint.clone(),
            client_id,
            client_secret,
            auth_method: method,
            resource: ep.resource.clone(),
            issuer: ep.issuer.clone(),
            scopes: ep.scopes.clone(),
            expires_at_ms,
            server: node.shutdown.child_token(),
        });
        // Recorded before anyone is told "authorizing".
        lock(&self.flows).insert(flow.state.clone(), flow.clone());
        lock(&self.errors).remove(id);
        let lifetime = Duration::from_millis(
            tun.upstream_oauth_flow_timeout_ms + tun.upstream_oauth_callback_grace_ms,
        );
        spawn_callback_server(node, listener, flow.clone(), lifetime);
        tracing::info!(source = "upstream", upstream = %name, authorization_server = %as_origin, cross_domain_as, registered, "OAuth authorization started");
        Ok(Started {
            upstream: name.to_owned(),
            authorize_url: authorize_url.to_string(),
            authorization_server: as_origin,
            cross_domain_as,
            registered,
            redirect_uri,
            expires_at_ms,
            state: "authorizing",
        })
    }

    /// Exchanges a callback's code for tokens. The flow has been taken out of the map.
    async fn exchange(&self, flow: &Flow, code: String) -> Result<Credential, String> {
        let http = http_client();
        let bad = |e: url::ParseError| format!("an endpoint is not a URL: {e}");
        let mut client = BasicClient::new(ClientId::new(flow.client_id.clone()))
            .set_token_uri(TokenUrl::new(flow.token_endpoint.clone()).map_err(bad)?)
            .set_redirect_uri(RedirectUrl::new(flow.redirect_uri.clone()).map_err(bad)?)
            .set_auth_type(auth_type(&flow.auth_method));
        if let Some(s) = &flow.client_secret {
            client = client.set_client_secret(ClientSecret::new(s.clone()));
        }
        let tok = client
            .exchange_code(AuthorizationCode::new(code))
            .set_pkce_verifier(PkceCodeVerifier::new(flow.verifier.clone()))
            .add_extra_param("resource", flow.resource.clone())
            .request_async(&http)
            .await
            .map_err(|e| token_error("the code exchange", &flow.token_endpoint, e).1)?;
        Ok(Credential {
            kind: "oauth2".into(),
            origin: Some(flow.origin.clone()),
            token: tok.access_token().secret().clone(),
            refresh_token: tok.refresh_token().map(|r| r.secret().clone()),
            expires_at_ms: tok.expires_in().map(|d| now_ms() + d.as_millis() as u64),
            token_endpoint: Some(flow.token_endpoint.clone()),
            client_id: Some(flow.client_id.clone()),
            client_secret: flow.client_secret.clone(),
            token_endpoint_auth_method: Some(flow.auth_method.clone()),
            resource: Some(flow.resource.clone()),
            issuer: Some(flow.issuer.clone()),
            scopes: tok
                .scopes()
                .map(|s| s.iter().map(|x| x.to_string()).collect())
                .unwrap_or_else(|| flow.scopes.clone()),
        })
    }
}

/// Refreshes `cur` at its token endpoint. `Err((refused, message))`: `refused` when the
/// authorization server said no (a new authorization is needed), else it was unreachable.
async fn refresh(cur: &Credential) -> Result<Credential, (bool, String)> {
    let Some(rt) = &cur.refresh_token else {
        return Err((
            true,
            "the access token expired and no refresh token was issued; authorize again".into(),
        ));
    };
    let (Some(endpoint), Some(client_id)) = (&cur.token_endpoint, &cur.client_id) else {
        return Err((
            true,
            "the stored token set names no token endpoint; authorize again".into(),
        ));
    };
    let http = http_client();
    let url =
        TokenUrl::new(endpoint.clone()).map_err(|e| (true, format!("token endpoint: {e}")))?;
    let mut client = BasicClient::new(ClientId::new(client_id.clone()))
        .set_token_uri(url)
        .set_auth_type(auth_type(
            cur.token_endpoint_auth_method.as_deref().unwrap_or("none"),
        ));
    if let Some(s) = &cur.client_secret {
        client = client.set_client_secret(ClientSecret::new(s.clone()));
    }
    let rt = RefreshToken::new(rt.clone());
    let mut req = client.exchange_refresh_token(&rt);
    if let Some(r) = &cur.resource {
        req = req.add_extra_param("resource", r.clone());
    }
    let tok = req
        .request_async(&http)
        .await
        .map_err(|e| token_error("the token refresh", endpoint, e))?;
    let mut next = cur.clone();
    next.token = tok.access_token().secret().clone();
    if let Some(r) = tok.refresh_token() {
        next.refresh_token = Some(r.secret().clone());
    }
    next.expires_at_ms = tok.expires_in().map(|d| now_ms() + d.as_millis() as u64);
    Ok(next)
}

/// The credential resolver of one HTTP upstream: re-reads storage on every attempt, checks
/// the origin binding before every request and refresh, refreshes an expired OAuth token
/// and recovers from a 401, one refresh at a time per upstream.
pub struct Resolver {
    pub(crate) creds: Arc<Mutex<HashMap<String, Credential>>>,
    pub(crate) oauth: Arc<OAuth>,
    pub(crate) node: Weak<Node>,
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) origin: Option<String>,
    /// The definition declares auth (`bearer` or `oauth2`).
    pub(crate) declared: bool,
}

impl Resolver {
    fn current(&self) -> Result<Option<Credential>, UpstreamError> {
        let Some(c) = lock(&self.creds).get(&self.id).cloned() else {
            return Ok(None);
        };
        if !self.declared && !c.is_oauth() {
            return Ok(None);
        }
        match (&c.origin, &self.origin) {
            (Some(bound), Some(now)) if bound == now => Ok(Some(c)),
            (Some(bound), now) => Err(UpstreamError::Origin(format!(
                "the credential of upstream {} is bound to {bound}, not {}; nothing was sent (save the token again or authorize for the new URL)",
                self.name,
                now.as_deref().unwrap_or("this URL")
            ))),
            (None, _) => Err(UpstreamError::Origin(format!(
                "the credential of upstream {} was saved without an origin binding; save it again",
                self.name
            ))),
        }
    }

    fn margin(&self) -> u64 {
        self.node
            .upgrade()
            .map(|n| n.config().tuning.upstream_oauth_refresh_margin_ms)
            .unwrap_or(60_000)
    }

    /// Under the semaphore: the credential to use now, refreshing unless storage already
    /// holds a generation other than `rejected` that has not expired.
    async fn refreshed(&self, rejected: Option<&str>) -> Result<Option<String>, UpstreamError> {
        let sem = self.oauth.semaphore(&self.id);
        let _permit = sem
            .acquire()
            .await
            .map_err(|_| UpstreamError::Closed("shutting down".into()))?;
        let Some(cur) = self.current()? else {
            return Ok(None);
        };
        let margin = self.margin();
        let fresh = !cur.expired(margin);
        match rejected {
            Some(r) if cur.token != r && fresh => return Ok(Some(cur.token)),
            None if fresh => return Ok(Some(cur.token)),
            _ => {}
        }
        if !cur.is_oauth() {
            // A static bearer cannot be refreshed: the rejected one stays rejected.
            return Ok(None);
        }
        match refresh(&cur).await {
            Ok(next) => {
                let token = next.token.clone();
                if let Some(node) = self.node.upgrade() {
                    let (key, raw) = (
                        vault_key(&self.id),
                        serde_json::to_string(&next).unwrap_or_default(),
                    );
                    let stored =
                        tokio::task::spawn_blocking(move || node.vault.set(&key, &raw)).await;
                    if !matches!(stored, Ok(Ok(()))) {
                        tracing::warn!(source = "upstream", upstream = %self.name, "the refreshed token could not be stored in the vault; it is used until the node restarts");
                    }
                }
                lock(&self.creds).insert(self.id.clone(), next);
                *lock(&self.oauth.refreshes)
                    .entry(self.id.clone())
                    .or_default() += 1;
                lock(&self.oauth.errors).remove(&self.id);
                tracing::info!(source = "upstream", upstream = %self.name, "OAuth access token refreshed");
                Ok(Some(token))
            }
            Err((refused, msg)) => {
                tracing::warn!(source = "upstream", upstream = %self.name, error = %msg, "OAuth refresh failed");
                self.oauth.set_error(&self.id, &msg);
                if refused {
                    Err(UpstreamError::AuthFailed(msg))
                } else {
                    Err(UpstreamError::Transport(msg))
                }
            }
        }
    }
}

impl super::http::Auth for Resolver {
    fn bearer(&self) -> BoxFuture<'_, Result<Option<String>, UpstreamError>> {
        Box::pin(async move {
            let Some(c) = self.current()? else {
                return Ok(None);
            };
            if c.is_oauth() && c.expired(self.margin()) {
                return self.refreshed(None).await;
            }
            Ok(Some(c.token))
        })
    }

    fn recover<'a>(
        &'a self,
        rejected: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<String>, UpstreamError>> {
        Box::pin(async move {
            let now = self.refreshed(rejected).await?;
            Ok(now.filter(|n| Some(n.as_str()) != rejected))
        })
    }
}

#[derive(serde::Deserialize)]
struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

fn page(status: u16, title: &str, body: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let html = format!(
        "<!doctype html><meta charset=utf-8><title>tuic: {t}</title><h1>{t}</h1><p>{b}</p>",
        t = esc(title),
        b = esc(body)
    );
    (
        axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::BAD_REQUEST),
        [
            ("content-type", "text/html; charset=utf-8"),
            ("cache-control", "no-store"),
            ("referrer-policy", "no-referrer"),
        ],
        html,
    )
        .into_response()
}

/// The loopback callback server of one flow: serves `GET /callback` until `lifetime` is
/// over (the flow's timeout plus the grace period), or 2 s after a served success.
fn spawn_callback_server(
    node: &Arc<Node>,
    listener: tokio::net::TcpListener,
    flow: Arc<Flow>,
    lifetime: Duration,
) {
    let stop = flow.server.clone();
    let n = node.clone();
    let f = flow.clone();
    let app = axum::Router::new().route(
        "/callback",
        axum::routing::get(move |q: axum::extract::Query<CallbackQuery>| {
            let (n, f) = (n.clone(), f.clone());
            async move { callback(&n, &f, q.0).await }
        }),
    );
    let stop2 = stop.clone();
    node.tasks.spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
            tokio::select! {
                _ = stop2.cancelled() => {}
                _ = tokio::time::sleep(lifetime) => {}
            }
        });
        let _ = serve.await;
        tracing::debug!(source = "upstream", upstream = %flow.upstream_name, "OAuth callback server closed");
    });
}

async fn callback(
    node: &Arc<Node>,
    flow: &Arc<Flow>,
    q: CallbackQuery,
) -> axum::response::Response {
    let up = node.upstreams.clone();
    let oauth = up.oauth().clone();
    let grace = node.config().tuning.upstream_oauth_callback_grace_ms;
    let Some(state) = q.state.filter(|s| !s.is_empty()) else {
        return page(
            400,
            "Authorization failed",
            "The callback carries no state; nothing was changed.",
        );
    };
    if state != flow.state {
        // Not this flow's: the pending flow is left exactly as it was.
        tracing::warn!(source = "upstream", upstream = %flow.upstream_name, "OAuth callback with an unknown state refused");
        return page(
            400,
            "Authorization failed",
            "The callback's state does not match the pending authorization; nothing was changed. Start the authorization again from tuic if this persists.",
        );
    }
    let taken = lock(&oauth.flows).remove(&state);
    let Some(flow) = taken else {
        let why = lock(&oauth.finished).get(&state).cloned();
        let msg = match why.as_ref().map(|f| f.reason) {
            Some("cancelled") => format!(
                "The authorization of upstream {} was cancelled; nothing was changed. Start it again from tuic (tuic mcp auth {}).",
                flow.upstream_name, flow.upstream_name
            ),
            Some("expired") => format!(
                "The authorization of upstream {} expired before the browser came back; nothing was changed. Start it again (tuic mcp auth {}).",
                flow.upstream_name, flow.upstream_name
            ),
            Some("completed") => format!(
                "Upstream {} is already authorized by this request.",
                flow.upstream_name
            ),
            _ => "This authorization request is no longer pending; nothing was changed.".to_owned(),
        };
        return page(410, "Authorization no longer pending", &msg);
    };
    if let Some(err) = q.error {
        let msg = format!(
            "the authorization server answered {err}{}",
            q.error_description
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        );
        oauth.finish(&state, &flow.upstream_name, "failed", grace);
        oauth.set_error(&flow.upstream_id, &msg);
        up.oauth_ended(&flow.upstream_id, false);
        return page(
            400,
            "Authorization refused",
            &format!("Upstream {}: {msg}.", flow.upstream_name),
        );
    }
    let Some(code) = q.code.filter(|c| !c.is_empty()) else {
        oauth.finish(&state, &flow.upstream_name, "failed", grace);
        oauth.set_error(&flow.upstream_id, "the callback carried no code");
        up.oauth_ended(&flow.upstream_id, false);
        return page(400, "Authorization failed", "The callback carries no code.");
    };
    match oauth.exchange(&flow, code).await {
        Ok(cred) => {
            let stored = up.store_oauth(node, &flow.upstream_id, cred).await;
            oauth.finish(&state, &flow.upstream_name, "completed", grace);
            let stop = flow.server.clone();
            tokio::spawn(async move {
                tokio::time::sleep(CLOSE_AFTER_SUCCESS).await;
                stop.cancel();
            });
            match stored {
                Ok(()) => {
                    tracing::info!(source = "upstream", upstream = %flow.upstream_name, "OAuth authorization completed");
                    up.oauth_ended(&flow.upstream_id, true);
                    page(
                        200,
                        "Authorized",
                        &format!(
                            "Upstream {} is authorized. You can close this tab.",
                            flow.upstream_name
                        ),
                    )
                }
                Err(e) => {
                    oauth.set_error(&flow.upstream_id, &e);
                    up.oauth_ended(&flow.upstream_id, false);
                    page(500, "Authorization failed", &e)
                }
            }
        }
        Err(e) => {
            tracing::warn!(source = "upstream", upstream = %flow.upstream_name, error = %e, "OAuth code exchange failed");
            oauth.finish(&state, &flow.upstream_name, "failed", grace);
            oauth.set_error(&flow.upstream_id, &e);
            up.oauth_ended(&flow.upstream_id, false);
            page(
                502,
                "Authorization failed",
                &format!("Upstream {}: {e}", flow.upstream_name),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_quoted_and_bare_values() {
        let p = parse_challenge(
            r#"Bearer error="invalid_token", error_description="The token expired", resource_metadata="http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp", scope=read"#,
        );
        assert_eq!(p["error"], "invalid_token");
        assert_eq!(p["error_description"], "The token expired");
        assert_eq!(
            p["resource_metadata"],
            "http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(p["scope"], "read");
        assert!(parse_challenge("Bearer").is_empty());
        assert!(parse_challenge("").is_empty());
    }

    #[test]
    fn well_known_urls_insert_the_path() {
        assert_eq!(
            well_known("http://h:1/mcp", "oauth-protected-resource").as_deref(),
            Some("http://h:1/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            well_known("http://h:1/", "oauth-authorization-server").as_deref(),
            Some("http://h:1/.well-known/oauth-authorization-server")
        );
        assert_eq!(
            well_known("https://idp.test/tenant/x?y", "openid-configuration").as_deref(),
            Some("https://idp.test/.well-known/openid-configuration/tenant/x")
        );
        assert_eq!(host_of("http://127.0.0.1:9000"), "127.0.0.1");
    }

    #[test]
    fn credentials_never_print_their_secrets() {
        let mut c = Credential::bearer(Some("http://h".into()), "s3cret-access".into());
        c.refresh_token = Some("s3cret-refresh".into());
        c.client_secret = Some("s3cret-client".into());
        let d = format!("{c:?}");
        assert!(!d.contains("s3cret"), "{d}");
    }

    #[test]
    fn expiry_uses_the_margin_and_no_expiry_never_expires() {
        let mut c = Credential::bearer(None, "t".into());
        assert!(!c.expired(60_000));
        c.expires_at_ms = Some(now_ms() + 30_000);
        assert!(c.expired(60_000));
        assert!(!c.expired(0));
    }
}

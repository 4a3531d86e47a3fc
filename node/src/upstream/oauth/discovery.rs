//! Discovery and registration: the protected-resource and authorization-server metadata
//! (RFC 9728, RFC 8414, OpenID), RFC 7591 dynamic client registration, and the HTTP client
//! and error wording every token request shares.

use std::collections::HashMap;

use oauth2::{AuthType, RequestTokenError};
use serde_json::{Value, json};

use super::{MAX_DOC, OAuthError, REQUEST_TIMEOUT};
use crate::upstream::config::origin_of;

/// Discovered endpoints of one upstream.
#[derive(Debug, Clone)]
pub(super) struct Endpoints {
    pub(super) authorization_endpoint: String,
    pub(super) token_endpoint: String,
    pub(super) registration_endpoint: Option<String>,
    pub(super) issuer: String,
    pub(super) resource: String,
    pub(super) scopes: Vec<String>,
    pub(super) token_auth_methods: Vec<String>,
}

pub(super) fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        // Following redirects from an authorization server is an SSRF door.
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .build()
        .unwrap_or_default()
}

pub(super) fn short(e: &reqwest::Error) -> String {
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
pub(super) fn well_known(url: &str, name: &str) -> Option<String> {
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

pub(super) fn host_of(origin: &str) -> &str {
    let hp = origin.split_once("://").map(|x| x.1).unwrap_or(origin);
    match hp.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|c| c.is_ascii_digit()) => h,
        _ => hp,
    }
}

pub(super) async fn get_json(http: &reqwest::Client, url: &str) -> Result<Option<Value>, String> {
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

pub(super) fn strings(v: &Value, key: &str) -> Vec<String> {
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
pub(super) async fn discover(
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
                        "params": crate::upstream::client::initialize_params(crate::mcp::protocol::LEGACY_DEFAULT)})
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
pub(super) async fn register(
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

pub(super) fn token_error<RE: std::error::Error + 'static>(
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

pub(super) fn auth_type(method: &str) -> AuthType {
    if method == "client_secret_basic" {
        AuthType::BasicAuth
    } else {
        AuthType::RequestBody
    }
}

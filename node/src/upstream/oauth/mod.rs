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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oauth2::basic::BasicClient;
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, Scope, TokenResponse, TokenUrl,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::config::origin_of;

mod credential;
mod discovery;
mod resolver;

pub use credential::{Credential, vault_key};
pub use discovery::parse_challenge;
#[cfg(test)]
use discovery::well_known;
use discovery::{auth_type, discover, host_of, http_client, register, token_error};
pub use resolver::Resolver;

/// A successful callback's server closes this long after its page was served.
const CLOSE_AFTER_SUCCESS: Duration = Duration::from_secs(2);
/// Budget of one discovery, registration or token request.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Largest metadata document accepted.
pub(super) const MAX_DOC: usize = 256 * 1024;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now_ms() -> u64 {
    crate::logs::now_ms()
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
pub struct Flow {
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
    /// loopback callback listener, the pending flow. Returns what the consent step shows and
    /// the listener for the HTTP layer to serve.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        self: &Arc<Self>,
        env: &crate::upstream::UpstreamEnv,
        id: &str,
        name: &str,
        url: &str,
        auth: Option<&Value>,
        challenge: Option<&str>,
    ) -> Result<(Started, CallbackServer), OAuthError> {
        let tun = env.tuning();
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
            server: env.shutdown.child_token(),
        });
        // Recorded before anyone is told "authorizing".
        lock(&self.flows).insert(flow.state.clone(), flow.clone());
        lock(&self.errors).remove(id);
        let lifetime = Duration::from_millis(
            tun.upstream_oauth_flow_timeout_ms + tun.upstream_oauth_callback_grace_ms,
        );
        tracing::info!(source = "upstream", upstream = %name, authorization_server = %as_origin, cross_domain_as, registered, "OAuth authorization started");
        let server = CallbackServer {
            listener,
            flow: flow.clone(),
            lifetime,
        };
        Ok((
            Started {
                upstream: name.to_owned(),
                authorize_url: authorize_url.to_string(),
                authorization_server: as_origin,
                cross_domain_as,
                registered,
                redirect_uri,
                expires_at_ms,
                state: "authorizing",
            },
            server,
        ))
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

/// The answer of the callback server: a status, a title and a sentence for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The HTTP status.
    pub status: u16,
    /// The heading.
    pub title: &'static str,
    /// The sentence under it.
    pub body: String,
}

impl Page {
    fn new(status: u16, title: &'static str, body: &str) -> Self {
        Self {
            status,
            title,
            body: body.to_owned(),
        }
    }
}

/// A flow's loopback callback listener, bound and recorded, for the HTTP layer to serve
/// (`routes::oauth_callback`) until `lifetime` is over or the flow's server token is
/// cancelled (2 s after a served success).
pub struct CallbackServer {
    /// The bound `127.0.0.1:0` listener.
    pub listener: tokio::net::TcpListener,
    /// The flow it serves.
    pub flow: Arc<Flow>,
    /// The flow's timeout plus the grace period.
    pub lifetime: Duration,
}

impl std::fmt::Debug for CallbackServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackServer")
            .field("upstream", &self.flow.upstream_name)
            .finish_non_exhaustive()
    }
}

impl Flow {
    /// The upstream being authorized.
    pub fn upstream_name(&self) -> &str {
        &self.upstream_name
    }

    /// Cancelled when the flow's callback server must close.
    pub fn server(&self) -> &CancellationToken {
        &self.server
    }
}

/// The redirect's query: a code and the state, or the authorization server's error.
#[derive(Debug, Default, serde::Deserialize)]
pub struct CallbackQuery {
    pub code: Option<String>,
    pub state: Option<String>,
    pub error: Option<String>,
    pub error_description: Option<String>,
}

/// Serves one redirect of the browser to flow `flow`'s callback: exchanges the code and
/// stores the token set, or says why nothing was changed. The page to show.
pub(crate) async fn callback(
    up: &Arc<super::Upstreams>,
    flow: &Arc<Flow>,
    q: CallbackQuery,
) -> Page {
    let oauth = up.oauth().clone();
    let grace = up.env.tuning().upstream_oauth_callback_grace_ms;
    let Some(state) = q.state.filter(|s| !s.is_empty()) else {
        return Page::new(
            400,
            "Authorization failed",
            "The callback carries no state; nothing was changed.",
        );
    };
    if state != flow.state {
        // Not this flow's: the pending flow is left exactly as it was.
        tracing::warn!(source = "upstream", upstream = %flow.upstream_name, "OAuth callback with an unknown state refused");
        return Page::new(
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
        return Page::new(410, "Authorization no longer pending", &msg);
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
        return Page::new(
            400,
            "Authorization refused",
            &format!("Upstream {}: {msg}.", flow.upstream_name),
        );
    }
    let Some(code) = q.code.filter(|c| !c.is_empty()) else {
        oauth.finish(&state, &flow.upstream_name, "failed", grace);
        oauth.set_error(&flow.upstream_id, "the callback carried no code");
        up.oauth_ended(&flow.upstream_id, false);
        return Page::new(400, "Authorization failed", "The callback carries no code.");
    };
    match oauth.exchange(&flow, code).await {
        Ok(cred) => {
            let stored = up.store_oauth(&flow.upstream_id, cred).await;
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
                    Page::new(
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
                    Page::new(500, "Authorization failed", &e)
                }
            }
        }
        Err(e) => {
            tracing::warn!(source = "upstream", upstream = %flow.upstream_name, error = %e, "OAuth code exchange failed");
            oauth.finish(&state, &flow.upstream_name, "failed", grace);
            oauth.set_error(&flow.upstream_id, &e);
            up.oauth_ended(&flow.upstream_id, false);
            Page::new(
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

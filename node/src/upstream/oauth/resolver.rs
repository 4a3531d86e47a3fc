//! The credential resolver of one HTTP upstream and the token refresh it drives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use oauth2::basic::BasicClient;
use oauth2::{ClientId, ClientSecret, RefreshToken, TokenResponse, TokenUrl};

use super::discovery::{auth_type, http_client, token_error};
use super::{Credential, OAuth, lock, now_ms, vault_key};
use crate::upstream::client::UpstreamError;

/// Refreshes `cur` at its token endpoint. `Err((refused, message))`: `refused` when the
/// authorization server said no (a new authorization is needed), else it was unreachable.
pub(super) async fn refresh(cur: &Credential) -> Result<Credential, (bool, String)> {
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
    pub(crate) env: crate::upstream::UpstreamEnv,
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
        self.env.tuning().upstream_oauth_refresh_margin_ms
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
                {
                    let (vault, key, raw) = (
                        self.env.vault.clone(),
                        vault_key(&self.id),
                        serde_json::to_string(&next).unwrap_or_default(),
                    );
                    let stored = tokio::task::spawn_blocking(move || vault.set(&key, &raw)).await;
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

impl crate::upstream::http::Auth for Resolver {
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

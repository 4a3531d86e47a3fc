//! The stored upstream credential: a static bearer token or an OAuth token set bound to the
//! MCP origin it was authorized for, and its vault key.

use super::now_ms;

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

    pub(super) fn is_oauth(&self) -> bool {
        self.kind == "oauth2"
    }

    /// Expired, or within `margin_ms` of expiring. No known expiry is never expired.
    pub(super) fn expired(&self, margin_ms: u64) -> bool {
        self.expires_at_ms
            .is_some_and(|t| t <= now_ms().saturating_add(margin_ms))
    }
}

/// The vault key of an upstream's credential.
pub fn vault_key(id: &str) -> String {
    format!("mcp_upstream:{id}")
}

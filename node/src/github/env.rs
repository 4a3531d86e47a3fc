//! What the GitHub service uses of the node, handed to it by the composition root
//! (`state.rs`): a reader of its settings (the `github` section of `config.json`, read afresh
//! on every call so a config save applies at once), the vault its token lives in, and the
//! registered repositories a route's `path` must lie in. It holds no node.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::repos::Repos;
use crate::vault::Vault;

/// The vault entry holding the GitHub token (`PUT /repo/github-token`, IPC only).
pub const TOKEN_NAME: &str = "github_token";

/// The public API's base URL.
pub const DEFAULT_API_BASE: &str = "https://api.github.com";

/// The service's settings: `config.json` → `github: {api_base?, gh_fallback?, timeout_ms?,
/// log_tail_bytes?}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The REST API base (`https://api.github.com`; GitHub Enterprise:
    /// `https://HOST/api/v3`). No trailing slash.
    pub api_base: String,
    /// Whether `gh auth token --hostname HOST` is asked when the vault has no token (true).
    pub gh_fallback: bool,
    /// Deadline of one API request, redirects included (15 s).
    pub timeout: Duration,
    /// Bytes of a failing step's log kept, its end (64 KiB).
    pub log_tail_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            api_base: DEFAULT_API_BASE.into(),
            gh_fallback: true,
            timeout: Duration::from_secs(15),
            log_tail_bytes: 64 * 1024,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct Keys {
    api_base: Option<String>,
    gh_fallback: Option<bool>,
    timeout_ms: Option<u64>,
    log_tail_bytes: Option<usize>,
}

impl Settings {
    /// The settings in the config's unknown keys (`github`); a malformed section is the
    /// defaults, with one warning.
    pub fn from_keys(keys: &serde_json::Map<String, Value>) -> Self {
        let mut s = Self::default();
        let Some(v) = keys.get("github") else {
            return s;
        };
        let k = match serde_json::from_value::<Keys>(v.clone()) {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!(source = "github", error = %e, "ignoring a malformed github config section");
                return s;
            }
        };
        if let Some(b) = k
            .api_base
            .map(|b| b.trim().trim_end_matches('/').to_owned())
            && !b.is_empty()
        {
            s.api_base = b;
        }
        if let Some(g) = k.gh_fallback {
            s.gh_fallback = g;
        }
        if let Some(ms) = k.timeout_ms {
            s.timeout = Duration::from_millis(ms.clamp(100, 120_000));
        }
        if let Some(b) = k.log_tail_bytes {
            s.log_tail_bytes = b.clamp(1024, 1024 * 1024);
        }
        s
    }

    /// The host `gh auth token --hostname` is asked about: `github.com` for the public API,
    /// the API base's host for GitHub Enterprise.
    pub fn gh_hostname(&self) -> Option<String> {
        let u = url::Url::parse(&self.api_base).ok()?;
        let host = u.host_str()?;
        Some(if host == "api.github.com" {
            "github.com".into()
        } else {
            host.to_owned()
        })
    }
}

/// Reads the current settings.
pub type SettingsSource = Arc<dyn Fn() -> Settings + Send + Sync>;

/// The GitHub service's environment. Cloning shares everything.
#[derive(Clone)]
pub struct GithubEnv {
    /// The current settings.
    pub settings: SettingsSource,
    /// Where the token is kept ([`TOKEN_NAME`]).
    pub vault: Arc<Vault>,
    /// The registered repositories: a route's `path` must be one of them or inside one.
    pub repos: Arc<Repos>,
}

impl std::fmt::Debug for GithubEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubEnv")
            .field("settings", &(self.settings)())
            .finish_non_exhaustive()
    }
}

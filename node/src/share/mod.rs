//! Scoped share links: a token that opens one session's view, read-only (screen and history)
//! or answer-only (those, plus answering the question the session shows), until it expires or
//! is revoked.
//!
//! A link is stored in the store's `share_links` table by the sha256 of its token (the token
//! itself is shown once, to its creator). [`scope_allows`] is the one rule of what a link may
//! reach: the request boundary applies it before any handler runs, so every other route
//! refuses a share token. Each live link carries a cancellation token, fired by revocation,
//! and its expiry: a viewer's stream ends at whichever comes first.
//!
//! It deliberately does not authenticate anything but share tokens, and holds no node: the
//! composition root gives it the store and the shutdown token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use http::Method;
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::store::Store;

#[cfg(test)]
mod tests;

/// Links: link id → JSON [`Link`].
const SHARE_LINKS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("share_links");

/// Longest life of a link (7 days): a share is for a moment, not a standing credential.
pub const MAX_TTL_MS: u64 = 7 * 86_400_000;

/// Links kept at once (1,000); past it creating one is refused until some expire or are
/// revoked.
pub const MAX_LINKS: usize = 1_000;

/// Revoked and expired links stay listed this long (1 day), then go.
const KEEP_ENDED_MS: u64 = 86_400_000;

/// What a link lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The session's screen, stream and history.
    ReadOnly,
    /// Those, plus answering the question the session shows (`POST /sessions/{id}/answer`).
    Answer,
}

/// A stored link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Public id (listing, revocation, the audit's `share:<id>`).
    pub id: String,
    /// sha256 hex of the token.
    pub token_hash: String,
    /// The session's PTY id.
    pub session_id: String,
    /// Its other addresses (alias, `tuic_session`), accepted in paths too.
    pub aliases: Vec<String>,
    /// What it allows.
    pub scope: Scope,
    /// Who made it (the audit's `who`).
    pub created_by: String,
    /// When, unix ms.
    pub created_ms: u64,
    /// Expiry, unix ms.
    pub expires_ms: u64,
    /// When it was revoked, unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_ms: Option<u64>,
}

/// Why a share token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No link has this token.
    #[error("unknown share token")]
    Unknown,
    /// The link expired.
    #[error("this share link expired")]
    Expired,
    /// The link was revoked.
    #[error("this share link was revoked")]
    Revoked,
    /// The route is outside the link's scope.
    #[error("a share link opens only its session's view{0}")]
    Scope(&'static str),
}

impl Refusal {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unknown => "share_invalid",
            Self::Expired => "share_expired",
            Self::Revoked => "share_revoked",
            Self::Scope(_) => "share_scope",
        }
    }
}

/// A checked share token on a request: the boundary puts it in the request's extensions.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The link's id.
    pub link: String,
    /// The session it opens.
    pub session_id: String,
    /// Its scope.
    pub scope: Scope,
    /// Fired when the link is revoked: its streams end.
    pub ended: CancellationToken,
    /// Expiry, unix ms: its streams end then too.
    pub expires_ms: u64,
}

impl Grant {
    /// Resolves when the link is revoked or expires (whichever is first).
    pub async fn ended(&self) {
        let left = self.expires_ms.saturating_sub(crate::logs::now_ms());
        tokio::select! {
            _ = self.ended.cancelled() => {}
            _ = tokio::time::sleep(std::time::Duration::from_millis(left)) => {}
        }
    }
}

/// A viewer listed on a link while its stream is open.
#[derive(Debug, Clone, Serialize)]
pub struct Viewer {
    /// Client address.
    pub address: String,
    /// Since, unix ms.
    pub since_ms: u64,
}

/// What the share service uses of the node.
#[derive(Debug, Clone)]
pub struct ShareEnv {
    /// The store holding `share_links`.
    pub store: Arc<Store>,
    /// Shutdown: every link's streams end with it.
    pub shutdown: CancellationToken,
}

#[derive(Debug)]
struct Live {
    link: Link,
    ended: CancellationToken,
    viewers: HashMap<u64, Viewer>,
}

/// The share service.
#[derive(Debug)]
pub struct Shares {
    env: ShareEnv,
    links: Mutex<HashMap<String, Live>>,
    next_viewer: std::sync::atomic::AtomicU64,
}

/// Keeps a viewer listed until dropped.
#[derive(Debug)]
pub struct ViewerGuard {
    shares: Arc<Shares>,
    link: String,
    id: u64,
}

impl Drop for ViewerGuard {
    fn drop(&mut self) {
        if let Some(l) = self.shares.lock().get_mut(&self.link) {
            l.viewers.remove(&self.id);
        }
    }
}

/// sha256 hex of a token.
fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

impl Shares {
    /// Opens the table and loads the links (blocking; before serving).
    pub fn open(env: ShareEnv) -> anyhow::Result<Self> {
        let tx = env.store.database().begin_write()?;
        tx.open_table(SHARE_LINKS)?;
        tx.commit()?;
        let tx = env.store.database().begin_read()?;
        let t = tx.open_table(SHARE_LINKS)?;
        let mut links = HashMap::new();
        for row in t.iter()? {
            let (_, v) = row?;
            match serde_json::from_slice::<Link>(v.value()) {
                Ok(link) => {
                    let ended = env.shutdown.child_token();
                    if link.revoked_ms.is_some() {
                        ended.cancel();
                    }
                    links.insert(
                        link.id.clone(),
                        Live {
                            link,
                            ended,
                            viewers: HashMap::new(),
                        },
                    );
                }
                Err(e) => tracing::warn!(error = %e, "skipping an unreadable share link"),
            }
        }
        Ok(Self {
            env,
            links: Mutex::new(links),
            next_viewer: 0.into(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates a link to session `session_id` (with its other `aliases`) for `ttl_ms`; the
    /// link and its token (shown once). Blocking (a store commit, before the caller answers).
    pub fn create(
        &self,
        session_id: &str,
        aliases: Vec<String>,
        scope: Scope,
        ttl_ms: u64,
        created_by: &str,
        now_ms: u64,
    ) -> anyhow::Result<(Link, String)> {
        self.prune(now_ms)?;
        if self.lock().len() >= MAX_LINKS {
            anyhow::bail!("too many share links ({MAX_LINKS}); revoke some first");
        }
        let token = format!("shr_{}", crate::vault::random_token());
        let token_hash = hash(&token);
        let link = Link {
            id: token_hash[..16].to_owned(),
            token_hash,
            session_id: session_id.to_owned(),
            aliases,
            scope,
            created_by: created_by.to_owned(),
            created_ms: now_ms,
            expires_ms: now_ms + ttl_ms.min(MAX_TTL_MS),
            revoked_ms: None,
        };
        self.put(&link)?;
        let ended = self.env.shutdown.child_token();
        self.lock().insert(
            link.id.clone(),
            Live {
                link: link.clone(),
                ended,
                viewers: HashMap::new(),
            },
        );
        Ok((link, token))
    }

    fn put(&self, link: &Link) -> anyhow::Result<()> {
        let tx = self.env.store.database().begin_write()?;
        tx.open_table(SHARE_LINKS)?
            .insert(link.id.as_str(), serde_json::to_vec(link)?.as_slice())?;
        tx.commit().context("storing a share link")?;
        Ok(())
    }

    /// Drops links that ended more than a day ago.
    fn prune(&self, now_ms: u64) -> anyhow::Result<()> {
        let gone: Vec<String> = self
            .lock()
            .values()
            .filter(|l| {
                let ended = l.link.revoked_ms.unwrap_or(l.link.expires_ms);
                ended.saturating_add(KEEP_ENDED_MS) < now_ms
            })
            .map(|l| l.link.id.clone())
            .collect();
        if gone.is_empty() {
            return Ok(());
        }
        let tx = self.env.store.database().begin_write()?;
        {
            let mut t = tx.open_table(SHARE_LINKS)?;
            for id in &gone {
                t.remove(id.as_str())?;
            }
        }
        tx.commit()?;
        let mut links = self.lock();
        for id in gone {
            links.remove(&id);
        }
        Ok(())
    }

    /// Checks a token at `now_ms`.
    pub fn check(&self, token: &str, now_ms: u64) -> Result<Grant, Refusal> {
        let h = hash(token);
        let links = self.lock();
        let l = links
            .values()
            .find(|l| crate::auth::secret_eq(&l.link.token_hash, &h))
            .ok_or(Refusal::Unknown)?;
        if l.link.revoked_ms.is_some() {
            return Err(Refusal::Revoked);
        }
        if l.link.expires_ms <= now_ms {
            return Err(Refusal::Expired);
        }
        Ok(Grant {
            link: l.link.id.clone(),
            session_id: l.link.session_id.clone(),
            scope: l.link.scope,
            ended: l.ended.clone(),
            expires_ms: l.link.expires_ms,
        })
    }

    /// Whether `address` names the link's session.
    pub fn names_session(&self, link: &str, address: &str) -> bool {
        self.lock().get(link).is_some_and(|l| {
            l.link.session_id == address || l.link.aliases.iter().any(|a| a == address)
        })
    }

    /// Revokes link `id` (its viewers' streams end at once); the link. Blocking.
    pub fn revoke(&self, id: &str, now_ms: u64) -> anyhow::Result<Option<Link>> {
        let link = {
            let mut links = self.lock();
            let Some(l) = links.get_mut(id) else {
                return Ok(None);
            };
            if l.link.revoked_ms.is_none() {
                l.link.revoked_ms = Some(now_ms);
            }
            l.ended.cancel();
            l.link.clone()
        };
        self.put(&link)?;
        Ok(Some(link))
    }

    /// Every link (optionally only session `session`'s), newest first, with live viewers.
    pub fn list(&self, session: Option<&str>) -> Vec<(Link, Vec<Viewer>)> {
        let mut v: Vec<_> = self
            .lock()
            .values()
            .filter(|l| {
                session
                    .is_none_or(|s| l.link.session_id == s || l.link.aliases.iter().any(|a| a == s))
            })
            .map(|l| (l.link.clone(), l.viewers.values().cloned().collect()))
            .collect();
        v.sort_by_key(|l| std::cmp::Reverse(l.0.created_ms));
        v
    }

    /// Lists a viewer on link `link` until the guard drops.
    pub fn join(self: &Arc<Self>, link: &str, address: String, now_ms: u64) -> ViewerGuard {
        let id = self
            .next_viewer
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(l) = self.lock().get_mut(link) {
            l.viewers.insert(
                id,
                Viewer {
                    address,
                    since_ms: now_ms,
                },
            );
        }
        ViewerGuard {
            shares: self.clone(),
            link: link.to_owned(),
            id,
        }
    }
}

/// The one rule of what a share link reaches: for a link of `scope` on a session (whose
/// addresses `names_session` recognises), may `method path` run? Only the session's view
/// routes (its row, output, raw ring, terminal reads, stream) and `GET /share/info`;
/// answer-only links also `POST /sessions/{id}/answer`. Everything else is refused.
pub fn scope_allows(
    scope: Scope,
    method: &Method,
    path: &str,
    names_session: impl Fn(&str) -> bool,
) -> Result<(), Refusal> {
    if method == Method::GET && path == "/share/info" {
        return Ok(());
    }
    let Some(rest) = path.strip_prefix("/sessions/") else {
        return Err(Refusal::Scope(""));
    };
    let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let id = percent_encoding::percent_decode_str(id).decode_utf8_lossy();
    if !names_session(&id) {
        return Err(Refusal::Scope(", not another session"));
    }
    let view = matches!(
        tail,
        "" | "output"
            | "raw-ring"
            | "stream"
            | "terminal/scroll-info"
            | "terminal/lines"
            | "terminal/snapshot"
    );
    if method == Method::GET && view {
        return Ok(());
    }
    if scope == Scope::Answer && method == Method::POST && tail == "answer" {
        return Ok(());
    }
    Err(Refusal::Scope(match scope {
        Scope::ReadOnly => " (read-only)",
        Scope::Answer => " and answers its questions",
    }))
}

/// Parses a duration such as `90s`, `15m`, `1h`, `2d` (a bare number is seconds) into ms.
pub fn parse_ttl(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().ok()?;
    let mult = match unit {
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(mult).filter(|ms| *ms > 0)
}

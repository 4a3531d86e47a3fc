//! Reviews (issue 43): comments on an agent's changes, gathered into one review that is stored
//! (redb, survives reload and restart) with its state, and sent to the agent as one message.
//!
//! Delivery is chosen by what the session is ([`Reviews::delivery_for`]): an ACP connection
//! gets a prompt, a PTY session whose identity is registered for agent mail gets mail, any
//! other PTY gets a bracketed paste with terminal escapes neutralised ([`neutralise`]).
//! Landing a branch (ff / squash / rebase-then-merge) is in [`land`].
//!
//! The service holds no node: it gets a [`ReviewEnv`] from the composition root.

pub mod land;

use std::sync::Arc;

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::store::Store;

/// Reviews by id (JSON).
const REVIEWS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("reviews");

/// Comments per review at most.
pub const MAX_COMMENTS: usize = 500;
/// Bytes of one comment at most.
pub const MAX_COMMENT_BYTES: usize = 8 * 1024;
/// Reviews kept per session at most (oldest sent ones go first).
pub const MAX_REVIEWS_PER_SESSION: usize = 50;

/// Agent mail as reviews use it (installed by the composition root; mail sits above).
pub trait Mailer: Send + Sync {
    /// Whether `identity` is registered for agent mail.
    fn registered(&self, identity: &str) -> bool;
    /// Sends `text` to `identity`; the message id.
    fn send(&self, identity: &str, text: String) -> Result<String, String>;
}

/// What the review service uses.
#[derive(Clone)]
pub struct ReviewEnv {
    /// The store holding the `reviews` table.
    pub store: Arc<Store>,
    /// PTY sessions (bracketed-paste delivery).
    pub sessions: Arc<crate::session::Registry>,
    /// ACP connections (prompt delivery).
    pub acp: Arc<crate::acp::Acp>,
    /// Agent mail.
    pub mail: Arc<dyn Mailer>,
    /// Landings are audited here.
    pub audit: Arc<crate::audit::Audit>,
}

impl std::fmt::Debug for ReviewEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReviewEnv").finish_non_exhaustive()
    }
}

/// One comment on a line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Comment {
    /// File (repository-relative).
    pub file: String,
    /// Line number.
    pub line: u64,
    /// `new` (default) or `old` side.
    #[serde(default = "new_side")]
    pub side: String,
    /// The comment.
    pub text: String,
    /// The commented line's text, for context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
}

fn new_side() -> String {
    "new".into()
}

/// A stored review.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Review {
    /// Id.
    pub id: String,
    /// The session (or ACP connection) it is for.
    pub session: String,
    /// The checkout reviewed.
    #[serde(default)]
    pub path: String,
    /// `draft`, `sent`, `failed`.
    pub state: String,
    /// An overall note.
    #[serde(default)]
    pub summary: String,
    /// Comments in the order made.
    pub comments: Vec<Comment>,
    /// Created, unix ms.
    pub created_ms: u64,
    /// Last change, unix ms.
    pub updated_ms: u64,
    /// How it went out: `acp`, `mail`, `pty`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_via: Option<String>,
    /// Mail message id, when mailed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// Why sending failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Why a review call failed.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// No such review or session.
    #[error("{0}")]
    NotFound(String),
    /// Already sent.
    #[error("{0}")]
    Conflict(String),
    /// Delivery failed.
    #[error("{0}")]
    Delivery(String),
    /// The store failed.
    #[error("{0}")]
    Store(String),
}

impl ReviewError {
    /// Stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Invalid(_) => "bad_request",
            Self::NotFound(_) => "not_found",
            Self::Conflict(_) => "already_sent",
            Self::Delivery(_) => "delivery_failed",
            Self::Store(_) => "store_error",
        }
    }

    /// HTTP status.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Invalid(_) => 400,
            Self::NotFound(_) => 404,
            Self::Conflict(_) => 409,
            Self::Delivery(_) => 502,
            Self::Store(_) => 500,
        }
    }
}

fn store_err(e: impl std::fmt::Display) -> ReviewError {
    ReviewError::Store(e.to_string())
}

/// Makes text safe to type into a terminal: ESC, other C0 controls (but newline and tab) and
/// C1 controls become visible symbols, so no escape or control sequence (a title change, a
/// bracketed-paste end marker, a cursor move) reaches the PTY.
pub fn neutralise(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            '\x1b' => '\u{241b}',
            '\r' => '\n',
            c if (c as u32) < 0x20 => char::from_u32(0x2400 + c as u32).unwrap_or('?'),
            '\x7f' => '\u{2421}',
            c if (0x80..0xa0).contains(&(c as u32)) => '\u{fffd}',
            c => c,
        })
        .collect()
}

/// The one message a review becomes: every comment with its `file:line`.
pub fn render(r: &Review) -> String {
    let mut s = format!(
        "Review of your changes ({} comment{}):\n",
        r.comments.len(),
        if r.comments.len() == 1 { "" } else { "s" }
    );
    if !r.summary.trim().is_empty() {
        s.push_str(r.summary.trim());
        s.push('\n');
    }
    for c in &r.comments {
        let side = if c.side == "old" { " (old)" } else { "" };
        s.push_str(&format!("- {}:{}{side}: {}", c.file, c.line, c.text.trim()));
        if let Some(x) = c.excerpt.as_deref().filter(|x| !x.trim().is_empty()) {
            s.push_str(&format!("  [line: {}]", x.trim()));
        }
        s.push('\n');
    }
    s
}

fn check_comment(c: &Comment) -> Result<(), ReviewError> {
    if c.file.is_empty() || c.file.starts_with('/') || c.file.contains('\0') {
        return Err(ReviewError::Invalid(
            "comment file must be a repository-relative path".into(),
        ));
    }
    if c.line == 0 {
        return Err(ReviewError::Invalid("comment line starts at 1".into()));
    }
    if c.side != "new" && c.side != "old" {
        return Err(ReviewError::Invalid("comment side is new or old".into()));
    }
    if c.text.trim().is_empty() {
        return Err(ReviewError::Invalid("comment text is empty".into()));
    }
    if c.text.len() > MAX_COMMENT_BYTES
        || c.excerpt
            .as_ref()
            .is_some_and(|x| x.len() > MAX_COMMENT_BYTES)
    {
        return Err(ReviewError::Invalid(format!(
            "a comment is at most {MAX_COMMENT_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Creates the `reviews` table (before the service is built).
pub fn create_tables(store: &Store) -> anyhow::Result<()> {
    let tx = store.database().begin_write()?;
    tx.open_table(REVIEWS)?;
    tx.commit()?;
    Ok(())
}

/// The review service.
#[derive(Debug)]
pub struct Reviews {
    env: ReviewEnv,
}

impl Reviews {
    /// The service over the table [`create_tables`] made.
    pub fn new(env: ReviewEnv) -> Self {
        Self { env }
    }

    /// The environment.
    pub fn env(&self) -> &ReviewEnv {
        &self.env
    }

    fn put(&self, r: &Review) -> Result<(), ReviewError> {
        let json = serde_json::to_vec(r).map_err(store_err)?;
        let tx = self.env.store.database().begin_write().map_err(store_err)?;
        {
            let mut t = tx.open_table(REVIEWS).map_err(store_err)?;
            t.insert(r.id.as_str(), json.as_slice())
                .map_err(store_err)?;
        }
        tx.commit().map_err(store_err)
    }

    /// One review.
    pub fn get(&self, id: &str) -> Result<Review, ReviewError> {
        let tx = self.env.store.database().begin_read().map_err(store_err)?;
        let t = tx.open_table(REVIEWS).map_err(store_err)?;
        let v = t
            .get(id)
            .map_err(store_err)?
            .ok_or_else(|| ReviewError::NotFound(format!("no review {id}")))?;
        serde_json::from_slice(v.value()).map_err(store_err)
    }

    /// The reviews of a session, oldest first.
    pub fn list(&self, session: &str) -> Result<Vec<Review>, ReviewError> {
        let tx = self.env.store.database().begin_read().map_err(store_err)?;
        let t = tx.open_table(REVIEWS).map_err(store_err)?;
        let mut v: Vec<Review> = Vec::new();
        for e in t.iter().map_err(store_err)? {
            let (_, val) = e.map_err(store_err)?;
            if let Ok(r) = serde_json::from_slice::<Review>(val.value())
                && r.session == session
            {
                v.push(r);
            }
        }
        v.sort_by_key(|r| (r.created_ms, r.id.clone()));
        Ok(v)
    }

    /// A new draft review (comments may be empty).
    pub fn create(
        &self,
        session: &str,
        path: &str,
        summary: String,
        comments: Vec<Comment>,
        now_ms: u64,
    ) -> Result<Review, ReviewError> {
        if comments.len() > MAX_COMMENTS {
            return Err(ReviewError::Invalid(format!(
                "a review has at most {MAX_COMMENTS} comments"
            )));
        }
        for c in &comments {
            check_comment(c)?;
        }
        let existing = self.list(session)?;
        if existing.len() >= MAX_REVIEWS_PER_SESSION
            && let Some(old) = existing.iter().find(|r| r.state != "draft")
        {
            self.remove(&old.id)?;
        }
        let r = Review {
            id: uuid::Uuid::new_v4().to_string(),
            session: session.to_owned(),
            path: path.to_owned(),
            state: "draft".into(),
            summary,
            comments,
            created_ms: now_ms,
            updated_ms: now_ms,
            delivered_via: None,
            message_id: None,
            error: None,
        };
        self.put(&r)?;
        Ok(r)
    }

    fn remove(&self, id: &str) -> Result<(), ReviewError> {
        let tx = self.env.store.database().begin_write().map_err(store_err)?;
        {
            let mut t = tx.open_table(REVIEWS).map_err(store_err)?;
            t.remove(id).map_err(store_err)?;
        }
        tx.commit().map_err(store_err)
    }

    /// Adds a comment to a draft.
    pub fn comment(&self, id: &str, c: Comment, now_ms: u64) -> Result<Review, ReviewError> {
        check_comment(&c)?;
        let mut r = self.get(id)?;
        if r.state == "sent" {
            return Err(ReviewError::Conflict(format!(
                "review {id} was already sent; start a new one"
            )));
        }
        if r.comments.len() >= MAX_COMMENTS {
            return Err(ReviewError::Invalid(format!(
                "a review has at most {MAX_COMMENTS} comments"
            )));
        }
        r.comments.push(c);
        r.updated_ms = now_ms;
        self.put(&r)?;
        Ok(r)
    }

    /// How a review for `session` would go out: `acp`, `mail` or `pty`; `None` when the
    /// session is neither a live PTY nor an ACP connection.
    pub fn delivery_for(&self, session: &str) -> Option<&'static str> {
        if self.env.acp.get(session).is_ok() {
            return Some("acp");
        }
        let s = self.env.sessions.live(session)?;
        if self.env.mail.registered(&s.tuic_session) {
            Some("mail")
        } else {
            Some("pty")
        }
    }

    /// Sends a draft (or a failed one again) as one message; the review records how.
    pub fn send(&self, id: &str, now_ms: u64) -> Result<Review, ReviewError> {
        let mut r = self.get(id)?;
        if r.state == "sent" {
            return Err(ReviewError::Conflict(format!(
                "review {id} was already sent"
            )));
        }
        if r.comments.is_empty() && r.summary.trim().is_empty() {
            return Err(ReviewError::Invalid("the review has no comments".into()));
        }
        let text = render(&r);
        let via = self.delivery_for(&r.session).ok_or_else(|| {
            ReviewError::NotFound(format!(
                "session {} is not live (no PTY, no ACP connection)",
                r.session
            ))
        })?;
        let outcome = match via {
            "acp" => self
                .env
                .acp
                .get(&r.session)
                .map_err(|e| e.to_string())
                .and_then(|c| {
                    c.prompt(vec![serde_json::json!({"type": "text", "text": text})])
                        .map_err(|e| e.to_string())
                })
                .map(|_| None),
            "mail" => {
                let tuic = self
                    .env
                    .sessions
                    .live(&r.session)
                    .map(|s| s.tuic_session.clone())
                    .unwrap_or_default();
                self.env.mail.send(&tuic, text).map(Some)
            }
            _ => match self.env.sessions.live(&r.session) {
                Some(s) => {
                    let mut bytes = b"\x1b[200~".to_vec();
                    bytes.extend_from_slice(neutralise(&text).trim_end().as_bytes());
                    bytes.extend_from_slice(b"\x1b[201~\r");
                    s.write(&bytes, &self.env.sessions.capture)
                        .map(|()| None)
                        .map_err(|e| e.to_string())
                }
                None => Err(format!("session {} exited", r.session)),
            },
        };
        r.updated_ms = now_ms;
        match outcome {
            Ok(mid) => {
                r.state = "sent".into();
                r.delivered_via = Some(via.into());
                r.message_id = mid;
                r.error = None;
                self.put(&r)?;
                Ok(r)
            }
            Err(e) => {
                r.state = "failed".into();
                r.error = Some(e.clone());
                self.put(&r)?;
                Err(ReviewError::Delivery(format!(
                    "sending review {id} by {via} failed: {e}"
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests;

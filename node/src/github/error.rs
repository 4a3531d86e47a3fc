//! Why a GitHub call gave no answer: the error, its code, HTTP status and JSON shape.

use serde_json::{Value, json};

/// Why a GitHub call gave no answer. Every variant names the problem in its message.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GithubError {
    /// No token, the API out of reach, or the token refused (401): `github_unavailable`.
    #[error("{reason}")]
    Unavailable {
        /// Why, and the way out.
        reason: String,
        /// GitHub's status, when it answered.
        github_status: Option<u16>,
    },
    /// The rate limit is spent until `reset_at` (Unix seconds).
    #[error("{message}")]
    RateLimited {
        /// When GitHub resets the limit (Unix seconds).
        reset_at: u64,
        /// Human message naming the reset time.
        message: String,
    },
    /// GitHub answered 404: the repository (or issue) does not exist, or is private and the
    /// token cannot see it.
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed or names no GitHub repository.
    #[error("{0}")]
    BadRequest(String),
    /// A check URL's head is not the head the caller named.
    #[error("{0}")]
    HeadMismatch(String),
    /// Any other refusal or failure GitHub answered with.
    #[error("{message}")]
    Upstream {
        /// GitHub's status.
        status: u16,
        /// Its message.
        message: String,
    },
}

impl GithubError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unavailable { .. } => "github_unavailable",
            Self::RateLimited { .. } => "github_rate_limited",
            Self::NotFound(_) => "github_not_found",
            Self::BadRequest(_) => "bad_request",
            Self::HeadMismatch(_) => "head_mismatch",
            Self::Upstream { .. } => "github_error",
        }
    }

    /// The HTTP status the routes answer with. A GitHub 404 is answered 502, never 404: a
    /// 404 would read as "this route does not exist".
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Unavailable { .. } => 503,
            Self::RateLimited { .. } => 429,
            Self::NotFound(_) | Self::Upstream { .. } => 502,
            Self::BadRequest(_) => 400,
            Self::HeadMismatch(_) => 409,
        }
    }

    /// The JSON body: `{code, error}` plus `reason` (unavailable), `reset_at` and
    /// `reset_at_iso` (rate limited), `github_status` when GitHub answered.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"code": self.code(), "error": self.to_string()});
        match self {
            Self::Unavailable {
                reason,
                github_status,
            } => {
                v["reason"] = json!(reason);
                if let Some(s) = github_status {
                    v["github_status"] = json!(s);
                }
            }
            Self::RateLimited { reset_at, .. } => {
                v["reset_at"] = json!(reset_at);
                v["reset_at_iso"] = json!(iso(*reset_at));
                v["github_status"] = json!(403);
            }
            Self::NotFound(_) => v["github_status"] = json!(404),
            Self::Upstream { status, .. } => v["github_status"] = json!(status),
            _ => {}
        }
        v
    }

    pub(super) fn unavailable(reason: impl Into<String>) -> Self {
        Self::Unavailable {
            reason: reason.into(),
            github_status: None,
        }
    }
}

pub(super) fn iso(unix: u64) -> String {
    chrono::DateTime::from_timestamp(unix as i64, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

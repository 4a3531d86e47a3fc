//! The share-link hook: share links to sessions of other hosts, for a process that holds
//! connections to them (the hub).
//!
//! A link to another host's session is that host's own link: its owner mints the token,
//! stores it, checks it on every request and cuts its viewers when it is revoked or expires
//! (`crate::share`). The relay only names it — its token, id and session carry the
//! connection as a prefix (`<connection>/<owner's token>`) — and carries its requests. The
//! node's share routes consult [`ShareRelay`] for addresses and ids with such a prefix, and
//! the request boundary hands a request whose share token has one to [`ShareRelay::serve`]
//! whole: such a request never reaches one of this node's routes, and is never authenticated
//! here (the owner does that).
//!
//! Deliberately absent: any store of the relay's own. The relay keeps no token, so revoking a
//! link on its owner ends it everywhere, and a relay that restarts loses nothing.

use axum::extract::Request;
use axum::response::Response;
use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::ext::RouteFuture;

/// What a link to another host's session is made with (`POST /shares` on the owner).
#[derive(Debug, Clone, Serialize)]
pub struct NewShare {
    /// The owner's address of the session (the part after `<connection>/`).
    pub session: String,
    /// `read_only` or `answer`.
    pub scope: crate::share::Scope,
    /// The lifetime as the caller gave it (`1h`), already checked here.
    pub ttl: String,
}

/// Share links on other hosts.
pub trait ShareRelay: Send + Sync + std::fmt::Debug {
    /// Whether `connection` names a host this relay reaches (so `<connection>/<rest>` is an
    /// address on it rather than an unknown local name).
    fn knows(&self, connection: &str) -> bool;

    /// Creates a link on the host behind `connection`, as `user`: the owner's answer (`id`,
    /// `session_id`, `scope`, `expires_ms`, `token`) with `id`, `session_id` and `token`
    /// prefixed by `<connection>/`. The owner's refusal keeps its status and code.
    fn create<'a>(
        &'a self,
        connection: &'a str,
        share: NewShare,
        user: &'a str,
    ) -> RouteFuture<'a, Result<Value, ApiError>>;

    /// Every reachable host's links (of session `session`, a `<connection>/<id>` address,
    /// when given), rows as the owner lists them with `id` and `session_id` prefixed and
    /// `host` set. A host that is down or refuses is left out.
    fn list<'a>(&'a self, session: Option<&'a str>) -> RouteFuture<'a, Vec<Value>>;

    /// Revokes link `<connection>/<id>` on its owner, as `user`: the owner's answer (its
    /// viewers are cut there, and so through this relay).
    fn revoke<'a>(
        &'a self,
        connection: &'a str,
        id: &'a str,
        user: &'a str,
    ) -> RouteFuture<'a, Result<Value, ApiError>>;

    /// Serves a request whose `?share=` token is `<connection>/<owner's token>`: relays it to
    /// the owner with the owner's token in place of it and no credential of this process, so
    /// the owner applies the link's scope. The request carries the boundary's `Actor`.
    fn serve(&self, req: Request) -> RouteFuture<'static, Response>;
}

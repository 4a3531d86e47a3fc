//! `GET /audit` (a page of the audit log, newest first, filtered by kind, session and time)
//! and the helpers the other route groups use to record an act before they answer.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::{Extension, Json};

use crate::audit::{Actor, Event, Page};
use crate::error::ApiError;
use crate::state::Node;

/// The caller the boundary established (`local` when a request did not come through it).
pub(crate) fn actor(ext: Option<Extension<Actor>>) -> Actor {
    ext.map_or_else(Actor::local, |Extension(a)| a)
}

/// Records `ev`, committed before this returns; a store failure is logged, never fatal to the
/// act (the act already happened).
pub(crate) async fn record(node: &Arc<Node>, ev: Event) {
    let audit = node.audit.clone();
    let _ = tokio::task::spawn_blocking(move || audit.record_or_warn(ev)).await;
}

/// `GET /audit?kind=&session=&since_ms=&until_ms=&before=&limit=`.
pub(super) async fn list(
    State(node): State<Arc<Node>>,
    q: Result<Query<crate::audit::Query>, QueryRejection>,
) -> Result<Json<Page>, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let audit = node.audit.clone();
    super::blocking(move || {
        audit
            .page(&q)
            .map_err(|e| ApiError::internal(format!("reading the audit log: {e:#}")))
    })
    .await
    .map(Json)
}

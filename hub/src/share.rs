//! Share links to sessions of the hub's nodes (`tuic_node::ext::ShareRelay`).
//!
//! The owning node makes, stores, checks and revokes the link: the hub asks it to make one
//! (`POST /shares` with the hub's token and its user), names it by the connection
//! (`<connection>/<id>`, token `<connection>/<owner's token>`), and relays a viewer's requests
//! and stream with the owner's token in place of the viewer's and no credential of its own, so
//! the owner's boundary applies the link's scope, lists the viewer, cuts it on revocation and
//! audits every use. The hub refuses on its own, before asking, any route outside a share
//! page's (`GET /share/info` and the link's host's `/sessions/...` routes), and keeps the
//! viewer's stream read-only too (`proxy::proxy_ws`).
//!
//! It deliberately stores nothing: no token, no link. The hub's `GET /shares` reads every
//! node's links when asked, and a revocation on the node ends the link everywhere.

use std::sync::Arc;

use axum::Json;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tuic_node::ext::audit::{Actor, Event, FORWARDED_USER_HEADER};
use tuic_node::ext::{ApiError, NewShare, RouteFuture, ShareRelay};

use crate::connections::{Conn, describe};
use crate::federation::Federation;

/// Longest wait for a node's answer on the owner's share routes.
const NODE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The hub's share relay, installed on its node by [`Federation::new`].
#[derive(Debug)]
pub struct HubShares(pub Arc<Federation>);

/// `<connection>/<value>`.
fn prefixed(connection: &str, v: &Value) -> Value {
    match v.as_str() {
        Some(s) => json!(format!("{connection}/{s}")),
        None => Value::Null,
    }
}

/// The owner's link row (or answer) as the hub names it.
fn rename(connection: &str, mut v: Value, keys: &[&str]) -> Value {
    for k in keys {
        if v.get(*k).is_some() {
            v[*k] = prefixed(connection, &v[*k]);
        }
    }
    if let Some(o) = v.as_object_mut() {
        o.insert("host".into(), json!(connection));
    }
    v
}

/// A code the owner answered, as one of the stable codes of its share routes (any other is
/// `owner_refused`).
fn owner_code(code: &str) -> &'static str {
    const KNOWN: [&str; 10] = [
        "not_found",
        "invalid_ttl",
        "conflict",
        "bad_request",
        "unauthorized",
        "forbidden",
        "share_invalid",
        "share_expired",
        "share_revoked",
        "share_scope",
    ];
    KNOWN
        .into_iter()
        .find(|k| *k == code)
        .unwrap_or("owner_refused")
}

impl HubShares {
    /// The connection, when it is up: else 404 (unknown) or 503 (down), naming it.
    fn conn_up(&self, connection: &str) -> Result<Arc<Conn>, ApiError> {
        let conn = self
            .0
            .get(connection)
            .ok_or_else(|| ApiError::not_found(format!("unknown connection {connection}")))?;
        if !conn.snapshot().up {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "owner_unavailable",
                format!("connection {connection} is unavailable: not connected"),
            ));
        }
        Ok(conn)
    }

    /// Sends one call to the owner's share routes with the hub's token and `user`; its JSON
    /// answer, or its refusal (status and code kept, the connection named).
    async fn call(
        &self,
        conn: &Conn,
        req: reqwest::RequestBuilder,
        user: &str,
    ) -> Result<Value, ApiError> {
        let mut req = req
            .header(header::COOKIE, conn.cookie())
            .timeout(NODE_TIMEOUT);
        if let Ok(u) = HeaderValue::from_str(user) {
            req = req.header(FORWARDED_USER_HEADER, u);
        }
        let r = req.send().await.map_err(|e| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "owner_unavailable",
                format!("connection {} is unavailable: {}", conn.id, describe(&e)),
            )
        })?;
        let status = r.status();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(v);
        }
        Err(ApiError::new(
            StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY),
            owner_code(v["code"].as_str().unwrap_or_default()),
            format!(
                "{}: {}",
                conn.id,
                v["error"].as_str().unwrap_or("the node refused")
            ),
        ))
    }
}

impl ShareRelay for HubShares {
    fn knows(&self, connection: &str) -> bool {
        self.0.get(connection).is_some()
    }

    fn create<'a>(
        &'a self,
        connection: &'a str,
        share: NewShare,
        user: &'a str,
    ) -> RouteFuture<'a, Result<Value, ApiError>> {
        Box::pin(async move {
            let conn = self.conn_up(connection)?;
            let req = self
                .0
                .http
                .post(format!("{}/shares", conn.url))
                .json(&share);
            let v = self.call(&conn, req, user).await?;
            Ok(rename(connection, v, &["id", "session_id", "token"]))
        })
    }

    fn list<'a>(&'a self, session: Option<&'a str>) -> RouteFuture<'a, Vec<Value>> {
        Box::pin(async move {
            // A hub address names its host; a plain id is a session of the hub itself.
            let (only, sid) = match session.map(|s| s.split_once('/')) {
                None => (None, None),
                Some(Some((c, sid))) => (Some(c), Some(sid)),
                Some(None) => return Vec::new(),
            };
            let conns: Vec<Arc<Conn>> = self
                .0
                .all()
                .into_iter()
                .filter(|c| only.is_none_or(|o| o == c.id) && c.snapshot().up)
                .collect();
            let asks = conns.iter().map(|c| {
                let mut req = self.0.http.get(format!("{}/shares", c.url));
                if let Some(s) = sid {
                    req = req.query(&[("session", s)]);
                }
                async move { (c, self.call(c, req, "hub").await) }
            });
            let mut rows = Vec::new();
            for (c, answer) in futures::future::join_all(asks).await {
                match answer {
                    Ok(v) => rows.extend(
                        v["shares"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|l| rename(&c.id, l.clone(), &["id", "session_id"])),
                    ),
                    Err(e) => tracing::debug!(conn = %c.id, error = %e, "share links unreadable"),
                }
            }
            rows
        })
    }

    fn revoke<'a>(
        &'a self,
        connection: &'a str,
        id: &'a str,
        user: &'a str,
    ) -> RouteFuture<'a, Result<Value, ApiError>> {
        Box::pin(async move {
            let conn = self.conn_up(connection)?;
            let enc = percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC);
            let req = self.0.http.delete(format!("{}/shares/{enc}", conn.url));
            let v = self.call(&conn, req, user).await?;
            Ok(rename(connection, v, &["id"]))
        })
    }

    fn serve(&self, req: Request) -> RouteFuture<'static, Response> {
        let fed = self.0.clone();
        Box::pin(async move { serve(fed, req).await })
    }
}

/// The query pairs of `req`, with the share token replaced by `owner_token`.
fn owner_query(req: &Request, owner_token: &str) -> String {
    let pairs: Vec<(String, String)> = req
        .uri()
        .query()
        .and_then(|q| {
            axum::extract::Query::<Vec<(String, String)>>::try_from_uri(
                &format!("/?{q}").parse().ok()?,
            )
            .ok()
        })
        .map(|axum::extract::Query(p)| p)
        .unwrap_or_default();
    let mut url = reqwest::Url::parse("http://owner/").expect("a fixed URL parses");
    {
        let mut q = url.query_pairs_mut();
        for (k, v) in &pairs {
            q.append_pair(k, if k == "share" { owner_token } else { v });
        }
    }
    url.query().unwrap_or_default().to_owned()
}

/// A share token of `connection`, refused here (a route outside a share page's): 403
/// `share_scope`, audited in the hub's log.
async fn refuse(fed: &Federation, actor: Option<Actor>, route: &str, connection: &str) -> Response {
    let actor = actor.unwrap_or(Actor {
        who: "anonymous".into(),
        via: "tcp".into(),
        address: None,
    });
    let ev = Event::new("share_refused", &actor)
        .with("code", "share_scope")
        .with("route", route)
        .with("connection", connection);
    let node = fed.node.clone();
    let _ = tokio::task::spawn_blocking(move || node.audit.record_or_warn(ev)).await;
    ApiError::new(
        StatusCode::FORBIDDEN,
        "share_scope",
        "a share link opens only its session's view",
    )
    .into_response()
}

/// Relays one request of a share viewer whose token is `<connection>/<owner's token>`.
async fn serve(fed: Arc<Federation>, req: Request) -> Response {
    let token = req
        .uri()
        .query()
        .and_then(|q| {
            axum::extract::Query::<Vec<(String, String)>>::try_from_uri(
                &format!("/?{q}").parse().ok()?,
            )
            .ok()
        })
        .and_then(|axum::extract::Query(p)| p.into_iter().find(|(k, _)| k == "share"))
        .map(|(_, v)| v)
        .unwrap_or_default();
    let Some((connection, owner_token)) = token.split_once('/') else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "share_invalid",
            "unknown share token",
        )
        .into_response();
    };
    let Some(conn) = fed.get(connection) else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "share_invalid",
            "unknown share token",
        )
        .into_response();
    };
    let path = req.uri().path().to_owned();
    // The owner's session id and the route's rest; `/share/info` has none.
    let target = if path == "/share/info" {
        None
    } else {
        let owned = crate::proxy::session_target(&path).and_then(|(address, rest)| {
            match tuic_proto::peer::parse_address(&address) {
                Ok(tuic_proto::peer::Address::Remote {
                    connection: c,
                    peer,
                }) if c == connection => Some((peer.to_owned(), rest.to_owned())),
                _ => None,
            }
        });
        match owned {
            Some(t) => Some(t),
            None => {
                let actor = req.extensions().get::<Actor>().cloned();
                return refuse(&fed, actor, &path, connection).await;
            }
        }
    };
    if !conn.snapshot().up {
        return crate::proxy::unavailable(&conn.id, "not connected");
    }
    let query = owner_query(&req, owner_token);
    let is_ws = req
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"websocket"));
    match target {
        Some((sid, rest)) if is_ws => {
            crate::proxy::proxy_ws(conn, req, &sid, &rest, None, Some(query)).await
        }
        Some((sid, rest)) => {
            let url = crate::proxy::target_url(&conn, &sid, &rest, Some(&query));
            crate::proxy::relay_http(&fed, conn, req, url, crate::proxy::Via::Share).await
        }
        None => {
            let url = format!("{}/share/info?{query}", conn.url);
            let id = conn.id.clone();
            let resp =
                crate::proxy::relay_http(&fed, conn, req, url, crate::proxy::Via::Share).await;
            if !resp.status().is_success() {
                return resp;
            }
            // The page opens the session by the hub's address of it.
            match resp.into_body().collect().await {
                Ok(b) => {
                    let v: Value = serde_json::from_slice(&b.to_bytes()).unwrap_or(Value::Null);
                    Json(rename(&id, v, &["link", "session_id"])).into_response()
                }
                Err(e) => ApiError::internal(e.to_string()).into_response(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_gets_its_own_token_and_the_rest_of_the_query_unchanged() {
        let req = Request::builder()
            .uri("/sessions/nodeb%2F7/stream?format=text&share=nodeb%2Fshr_ab&mode=screen")
            .body(axum::body::Body::empty())
            .unwrap();
        assert_eq!(
            owner_query(&req, "shr_ab"),
            "format=text&share=shr_ab&mode=screen"
        );
    }

    #[test]
    fn an_owners_answer_is_named_by_its_host() {
        let v = rename(
            "nodeb",
            json!({"id": "ab", "session_id": "7", "token": "shr_x", "scope": "read_only"}),
            &["id", "session_id", "token"],
        );
        assert_eq!(
            v,
            json!({"id": "nodeb/ab", "session_id": "nodeb/7", "token": "nodeb/shr_x",
                   "scope": "read_only", "host": "nodeb"})
        );
        assert_eq!(owner_code("share_revoked"), "share_revoked");
        assert_eq!(owner_code("something new"), "owner_refused");
    }
}

//! The loopback OAuth callback server of one authorization flow (`GET /callback` on
//! `127.0.0.1:0`): it serves the redirect of the browser to [`oauth::callback`] and renders
//! the answer as a small HTML page. Started by `POST /mcp/upstreams/{name}/oauth/start`
//! once the flow is recorded.

use std::sync::Arc;

use axum::Router;
use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::state::Node;
use crate::upstream::oauth::{self, CallbackQuery, CallbackServer, Page};

fn page(p: &Page) -> Response {
    let (status, title, body) = (p.status, p.title, p.body.as_str());
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let html = format!(
        "<!doctype html><meta charset=utf-8><title>tuic: {t}</title><h1>{t}</h1><p>{b}</p>",
        t = esc(title),
        b = esc(body)
    );
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        [
            ("content-type", "text/html; charset=utf-8"),
            ("cache-control", "no-store"),
            ("referrer-policy", "no-referrer"),
        ],
        html,
    )
        .into_response()
}

/// The loopback callback server of one flow: serves `GET /callback` until `lifetime` is
/// over (the flow's timeout plus the grace period), or 2 s after a served success.
pub(super) fn spawn(node: &Arc<Node>, server: CallbackServer) {
    let CallbackServer {
        listener,
        flow,
        lifetime,
    } = server;
    let stop = flow.server().clone();
    let n = node.clone();
    let f = flow.clone();
    let app = Router::new().route(
        "/callback",
        get(move |Query(q): Query<CallbackQuery>| {
            let (n, f) = (n.clone(), f.clone());
            async move {
                let p = oauth::callback(&n.upstreams, &f, q).await;
                if p.status == 200 {
                    // The grant is audited by upstream name; tokens never are.
                    let who = crate::audit::Actor {
                        who: "browser".into(),
                        via: "oauth-callback".into(),
                        address: None,
                    };
                    super::audit::record(
                        &n,
                        crate::audit::Event::new("oauth_granted", &who)
                            .with("upstream", f.upstream_name()),
                    )
                    .await;
                }
                page(&p)
            }
        }),
    );
    let stop2 = stop.clone();
    node.tasks.spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
            tokio::select! {
                _ = stop2.cancelled() => {}
                _ = tokio::time::sleep(lifetime) => {}
            }
        });
        let _ = serve.await;
        tracing::debug!(source = "upstream", upstream = %flow.upstream_name(), "OAuth callback server closed");
    });
}

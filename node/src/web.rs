//! The browser and phone UI: static files from `web/`, embedded at build time.
//!
//! No bundler and no network at build time: plain HTML, CSS and ES modules.

use std::sync::Arc;

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::state::Node;

const LOGIN_HTML: &str = include_str!("../../web/login.html");
const APP_HTML: &str = include_str!("../../web/index.html");

fn html(body: &'static str) -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

/// Routes of the UI pages.
pub fn routes() -> Router<Arc<Node>> {
    Router::new()
        .route("/mobile/login", get(|| async { html(LOGIN_HTML) }))
        .route("/", get(|| async { html(APP_HTML) }))
        .route("/mobile", get(|| async { html(APP_HTML) }))
        .route("/mobile/{*rest}", get(|| async { html(APP_HTML) }))
}

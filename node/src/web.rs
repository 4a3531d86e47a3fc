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
const APP_JS: &str = include_str!("../../web/assets/app.js");
const ANSI_JS: &str = include_str!("../../web/assets/ansi.js");
const SCREEN_JS: &str = include_str!("../../web/assets/screen.js");
const APP_CSS: &str = include_str!("../../web/assets/app.css");

fn html(body: &'static str) -> impl IntoResponse {
    asset("text/html; charset=utf-8", body)
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [(CONTENT_TYPE, content_type), (CACHE_CONTROL, "no-cache")],
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
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/assets/ansi.js",
            get(|| async { asset("text/javascript; charset=utf-8", ANSI_JS) }),
        )
        .route(
            "/assets/screen.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCREEN_JS) }),
        )
        .route(
            "/assets/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
}

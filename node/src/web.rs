//! The browser and phone UI: static files from `web/`, embedded at build time.
//!
//! No bundler and no network at build time: plain HTML, CSS and ES modules. One table lists
//! every embedded file; one handler serves them all with a content type, `Cache-Control:
//! no-cache` and a strong `ETag` (a digest of the bytes), answering `304 Not Modified` to a
//! matching `If-None-Match`, so a page revalidates cheaply and never runs a stale module.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::state::Node;

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every embedded file: name under `web/`, content type, bytes.
const FILES: &[(&str, &str, &str)] = &[
    ("login.html", HTML, include_str!("../../web/login.html")),
    ("index.html", HTML, include_str!("../../web/index.html")),
    ("share.html", HTML, include_str!("../../web/share.html")),
    (
        "assets/entry.js",
        JS,
        include_str!("../../web/assets/entry.js"),
    ),
    (
        "assets/secret-form.js",
        JS,
        include_str!("../../web/assets/secret-form.js"),
    ),
    (
        "assets/secret-consent.js",
        JS,
        include_str!("../../web/assets/secret-consent.js"),
    ),
    (
        "assets/share.js",
        JS,
        include_str!("../../web/assets/share.js"),
    ),
    (
        "assets/trust.js",
        JS,
        include_str!("../../web/assets/trust.js"),
    ),
    ("assets/app.js", JS, include_str!("../../web/assets/app.js")),
    (
        "assets/changes.js",
        JS,
        include_str!("../../web/assets/changes.js"),
    ),
    (
        "assets/tabview.js",
        JS,
        include_str!("../../web/assets/tabview.js"),
    ),
    ("assets/acp.js", JS, include_str!("../../web/assets/acp.js")),
    (
        "assets/markdown.js",
        JS,
        include_str!("../../web/assets/markdown.js"),
    ),
    (
        "assets/upload.js",
        JS,
        include_str!("../../web/assets/upload.js"),
    ),
    ("assets/dom.js", JS, include_str!("../../web/assets/dom.js")),
    ("assets/api.js", JS, include_str!("../../web/assets/api.js")),
    (
        "assets/state.js",
        JS,
        include_str!("../../web/assets/state.js"),
    ),
    (
        "assets/list.js",
        JS,
        include_str!("../../web/assets/list.js"),
    ),
    (
        "assets/events.js",
        JS,
        include_str!("../../web/assets/events.js"),
    ),
    (
        "assets/view.js",
        JS,
        include_str!("../../web/assets/view.js"),
    ),
    (
        "assets/input.js",
        JS,
        include_str!("../../web/assets/input.js"),
    ),
    (
        "assets/suspend.js",
        JS,
        include_str!("../../web/assets/suspend.js"),
    ),
    (
        "assets/notices.js",
        JS,
        include_str!("../../web/assets/notices.js"),
    ),
    (
        "assets/screen.js",
        JS,
        include_str!("../../web/assets/screen.js"),
    ),
    (
        "assets/upstreams.js",
        JS,
        include_str!("../../web/assets/upstreams.js"),
    ),
    (
        "assets/ansi.js",
        JS,
        include_str!("../../web/assets/ansi.js"),
    ),
    (
        "assets/push.js",
        JS,
        include_str!("../../web/assets/push.js"),
    ),
    ("sw.js", JS, include_str!("../../web/sw.js")),
    (
        "assets/app.css",
        CSS,
        include_str!("../../web/assets/app.css"),
    ),
];

struct File {
    content_type: &'static str,
    body: &'static str,
    etag: HeaderValue,
}

fn files() -> &'static HashMap<&'static str, File> {
    static FILES_BY_NAME: OnceLock<HashMap<&'static str, File>> = OnceLock::new();
    FILES_BY_NAME.get_or_init(|| {
        FILES
            .iter()
            .map(|&(name, content_type, body)| {
                let digest = Sha256::digest(body.as_bytes());
                let etag = format!("\"{}\"", hex::encode(&digest[..12]));
                let etag = HeaderValue::from_str(&etag).expect("hex is a valid header");
                (
                    name,
                    File {
                        content_type,
                        body,
                        etag,
                    },
                )
            })
            .collect()
    })
}

/// Whether `If-None-Match` names `etag` (or is `*`).
fn matches(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    headers
        .get_all(IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/"))
        .any(|t| t == "*" || t.as_bytes() == etag.as_bytes())
}

/// Serves the embedded file `name`.
fn serve(name: &str, headers: &HeaderMap) -> Response {
    let Some(f) = files().get(name) else {
        return ApiError::not_found(format!("no asset {name}")).into_response();
    };
    let common = [
        (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (ETAG, f.etag.clone()),
    ];
    if matches(headers, &f.etag) {
        return (StatusCode::NOT_MODIFIED, common).into_response();
    }
    (
        common,
        [(CONTENT_TYPE, HeaderValue::from_static(f.content_type))],
        f.body,
    )
        .into_response()
}

/// Where the login page carries [`PLAIN_HTTP_NOTICE`].
const NOTICE_MARK: &str = "<!--plain-http-notice-->";

/// Shown on the login page when the password would cross a network in the clear.
pub(crate) const PLAIN_HTTP_NOTICE: &str = r#"<p class="notice" id="plain-http" role="note">This connection is not encrypted: the password and the login cookie cross the network in plain HTTP. Use the node through HTTPS (e.g. <code>tailscale serve</code>) or Tailscale.</p>"#;

/// `GET /mobile/login`: the page, with a notice when the request came over plain HTTP from an
/// address that is neither loopback nor Tailscale (`guard::plain_http_exposed`). That variant
/// is never cached: the same URL answers differently per network path.
async fn login_page(
    transport: Option<axum::Extension<crate::guard::Transport>>,
    h: HeaderMap,
) -> Response {
    let exposed =
        transport.is_some_and(|axum::Extension(t)| crate::guard::plain_http_exposed(t, &h));
    if !exposed {
        return serve("login.html", &h);
    }
    let body = files()["login.html"]
        .body
        .replace(NOTICE_MARK, PLAIN_HTTP_NOTICE);
    (
        [
            (CACHE_CONTROL, HeaderValue::from_static("no-store")),
            (CONTENT_TYPE, HeaderValue::from_static(HTML)),
        ],
        body,
    )
        .into_response()
}

/// Routes of the UI pages and assets.
pub(crate) fn routes() -> Router<Arc<Node>> {
    let page = |name: &'static str| move |h: HeaderMap| async move { serve(name, &h) };
    Router::new()
        .route("/mobile/login", get(login_page))
        .route("/", get(page("index.html")))
        .route("/index.html", get(page("index.html")))
        .route("/share.html", get(page("share.html")))
        .route("/mobile", get(page("index.html")))
        .route("/mobile/{*rest}", get(page("index.html")))
        // The service worker at the root, so its scope is the whole app.
        .route("/sw.js", get(page("sw.js")))
        .route(
            "/assets/{*file}",
            get(|Path(file): Path<String>, h: HeaderMap| async move {
                serve(&format!("assets/{file}"), &h)
            }),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_and_asset_a_file_references_is_embedded() {
        // A module missing from the table would stop the whole page from starting.
        let f = files();
        for &(name, _, body) in FILES {
            for part in body.split("\"/assets/").skip(1) {
                let Some(end) = part.find('"') else { continue };
                let path = format!("assets/{}", &part[..end]);
                assert!(f.contains_key(path.as_str()), "{name} references {path}");
            }
        }
    }

    #[test]
    fn every_file_has_a_distinct_strong_etag_and_if_none_match_is_parsed() {
        let f = files();
        assert_eq!(f.len(), FILES.len());
        let mut tags: Vec<_> = f.values().map(|x| x.etag.clone()).collect();
        tags.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        tags.dedup();
        assert_eq!(tags.len(), FILES.len());
        let tag = f["assets/screen.js"].etag.clone();
        let mut h = HeaderMap::new();
        assert!(!matches(&h, &tag));
        h.insert(
            IF_NONE_MATCH,
            HeaderValue::from_str(&format!("\"x\", W/{}", tag.to_str().unwrap())).unwrap(),
        );
        assert!(matches(&h, &tag));
        h.insert(IF_NONE_MATCH, HeaderValue::from_static("\"other\""));
        assert!(!matches(&h, &tag));
    }
}

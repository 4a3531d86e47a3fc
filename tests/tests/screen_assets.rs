//! The embedded web files through the real `tuic-node`: one mechanism for every page and
//! asset, with strong ETags and `304 Not Modified` on revalidation.

use http_body_util::Full;
use hyper::Request;
use hyper::body::Bytes;
use tuic_tests::term::Node;

async fn get(node: &Node, path: &str, inm: Option<&str>) -> tuic_tests::Reply {
    let mut b = Request::get(path).header("host", "localhost");
    if let Some(t) = inm {
        b = b.header("if-none-match", t);
    }
    tuic_tests::ipc_request(&node.socket, b.body(Full::new(Bytes::new())).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn pages_and_assets_carry_etags_and_revalidate_with_304() {
    let node = Node::start(None).await.unwrap();
    let mut tags = Vec::new();
    for (path, ct, needle) in [
        ("/", "text/html", "/assets/entry.js"),
        ("/mobile", "text/html", "/assets/entry.js"),
        ("/mobile/s/x", "text/html", "/assets/entry.js"),
        ("/mobile/login", "text/html", "password"),
        ("/assets/app.js", "text/javascript", "SessionView"),
        ("/assets/view.js", "text/javascript", "ScreenClient"),
        (
            "/assets/screen.js",
            "text/javascript",
            "export class ScreenClient",
        ),
        ("/assets/ansi.js", "text/javascript", "AnsiRenderer"),
        ("/assets/app.css", "text/css", ".screen"),
        ("/index.html", "text/html", "/assets/entry.js"),
        ("/assets/entry.js", "text/javascript", "/assets/app.js"),
        ("/share.html", "text/html", "/assets/share.js"),
    ] {
        let r = get(&node, path, None).await;
        assert_eq!(r.status, 200, "{path}");
        let h = |n: &str| r.headers.get(n).unwrap().to_str().unwrap().to_owned();
        assert!(
            h("content-type").starts_with(ct),
            "{path}: {}",
            h("content-type")
        );
        assert_eq!(h("cache-control"), "no-cache", "{path}");
        assert!(
            String::from_utf8_lossy(&r.body).contains(needle),
            "{path} lacks {needle}"
        );
        let tag = h("etag");
        assert!(
            tag.starts_with('"') && tag.ends_with('"') && tag.len() > 10,
            "{tag}"
        );
        // Revalidation: the same tag is a 304 with no body; another tag is a full answer.
        let again = get(&node, path, Some(&tag)).await;
        assert_eq!(again.status, 304, "{path}");
        assert!(again.body.is_empty());
        assert_eq!(again.headers["etag"].to_str().unwrap(), tag);
        let weak = get(&node, path, Some(&format!("\"stale\", W/{tag}"))).await;
        assert_eq!(weak.status, 304, "{path}: a weak comparison matches too");
        assert_eq!(get(&node, path, Some("\"stale\"")).await.status, 200);
        tags.push(tag);
    }
    // Pages that are the same file share the tag; different files differ.
    assert_eq!(tags[0], tags[1]);
    assert_ne!(tags[0], tags[3]);
    assert_ne!(tags[4], tags[5]);
    // Every module the page imports is served.
    for m in [
        "dom", "api", "state", "list", "events", "view", "input", "notices", "screen", "ansi",
    ] {
        let r = get(&node, &format!("/assets/{m}.js"), None).await;
        assert_eq!(r.status, 200, "{m}.js");
    }
    let missing = get(&node, "/assets/nope.js", None).await;
    assert_eq!(missing.status, 404);
}

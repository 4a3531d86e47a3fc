//! The GitHub/CI routes the removed `repo` actions point at answer 503 `github_unavailable`
//! with a reason — never 404 — on a node without a GitHub client.

use serde_json::json;
use tuic_tests::{NodeProc, config_dir, ipc};

#[tokio::test]
async fn github_routes_answer_503_github_unavailable_never_404() {
    let d = config_dir(json!({}));
    let node = NodeProc::start(
        "tuic-node",
        &["--config-dir", d.path().to_str().unwrap()],
        &[],
    )
    .unwrap();
    for (method, uri) in [
        ("GET", "/repo/prs?path=/tmp"),
        ("GET", "/repo/issues?path=/tmp"),
        ("POST", "/repo/issues/close"),
        ("POST", "/repo/issues/reopen"),
        ("GET", "/repo/ci-failure-logs?path=/tmp&branch=main"),
    ] {
        let body = (method == "POST").then(|| json!({"path": "/tmp", "number": 1}));
        let r = ipc(&node.socket, method, uri, body).await.unwrap();
        assert_eq!(r.status, 503, "{method} {uri}");
        let v = r.json();
        assert_eq!(v["code"], "github_unavailable", "{uri}: {v}");
        assert!(
            v["reason"].as_str().is_some_and(|s| s.contains("GitHub")),
            "{v}"
        );
    }
}

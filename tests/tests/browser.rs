//! Browser tests: Debian's headless Chromium, phone-sized, against a real node over TCP.

use serde_json::json;
use tuic_tests::webdriver::{Browser, artifacts_dir};
use tuic_tests::{NodeProc, run_with_stdin};

const PASSWORD: &str = "phone pass";

fn remote_node() -> (tempfile::TempDir, NodeProc) {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("config.json"),
        json!({"secret_store": "file"}).to_string(),
    )
    .unwrap();
    let dir = d.path().to_str().unwrap().to_owned();
    let (code, _, err) = run_with_stdin(
        "tuic-node",
        &["set-password", "--config-dir", &dir],
        PASSWORD,
    )
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let node = NodeProc::start(
        "tuic-node",
        &[
            "--config-dir",
            &dir,
            "--remote-access",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
        ],
        &[],
    )
    .unwrap();
    (d, node)
}

#[tokio::test]
async fn login_wrong_then_right_password_lands_on_mobile() {
    let (_d, node) = remote_node();
    let base = format!("http://{}", node.tcp.unwrap());
    let b = Browser::launch(390, 844).await.unwrap();
    b.goto(&format!("{base}/mobile")).await.unwrap();
    assert!(
        b.url()
            .await
            .unwrap()
            .contains("/mobile/login?next=%2Fmobile"),
        "{}",
        b.url().await.unwrap()
    );
    let pw = b.find("#password").await.unwrap();
    b.type_text(&pw, "wrong").await.unwrap();
    b.click(&b.find("button[type=submit]").await.unwrap())
        .await
        .unwrap();
    b.wait_for("document.getElementById('error') && document.getElementById('error').textContent.includes('Wrong')", 10_000)
        .await
        .unwrap();
    b.screenshot(&artifacts_dir().join("login-error-phone.png"))
        .await
        .unwrap();
    let pw = b.find("#password").await.unwrap();
    b.clear(&pw).await.unwrap();
    b.type_text(&pw, PASSWORD).await.unwrap();
    b.click(&b.find("button[type=submit]").await.unwrap())
        .await
        .unwrap();
    b.wait_for(
        "location.pathname === '/mobile' && document.getElementById('sessions')",
        10_000,
    )
    .await
    .unwrap();
    b.wait_for(
        "document.getElementById('empty') && !document.getElementById('empty').hidden",
        10_000,
    )
    .await
    .unwrap();
    b.screenshot(&artifacts_dir().join("sessions-empty-phone.png"))
        .await
        .unwrap();
    // The page is usable at phone width: nothing overflows horizontally.
    let overflow = b
        .eval(
            "return document.documentElement.scrollWidth > window.innerWidth",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(overflow, json!(false));
}

//! End-to-end tests of registered repositories and the root-gated file routes against the
//! real `tuic-node`: traversal gate, symlink escapes, and `/fs/upload-copy`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{Full, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use tuic_tests::{NodeProc, config_dir, ipc, run_with_stdin};

fn start(d: &Path, extra: &[&str]) -> NodeProc {
    let mut args = vec!["--config-dir", d.to_str().unwrap()];
    args.extend_from_slice(extra);
    NodeProc::start("tuic-node", &args, &[]).unwrap()
}

async fn register(node: &NodeProc, root: &Path) -> Value {
    let r = ipc(&node.socket, "POST", "/repos", Some(json!({"path": root})))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// Every path under `root` with its content digest, for before/after comparisons.
fn tree(root: &Path) -> Vec<(String, u64, Vec<u8>)> {
    fn walk(base: &Path, p: &Path, out: &mut Vec<(String, u64, Vec<u8>)>) {
        let mut entries: Vec<_> = std::fs::read_dir(p).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let rel = path
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                out.push((rel, 0, Vec::new()));
                walk(base, &path, out);
            } else {
                let data = std::fs::read(&path).unwrap_or_default();
                out.push((rel, meta.len(), data));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out
}

fn tar_of(dir: &Path, name: &str) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    b.append_dir_all(name, dir).unwrap();
    b.into_inner().unwrap()
}

async fn upload(node: &NodeProc, root: &Path, dest: &str, body: Vec<u8>) -> tuic_tests::Reply {
    let uri = format!("/fs/upload-copy?root={}&dest={dest}", root.display());
    let req = hyper::Request::post(uri)
        .header("host", "localhost")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    tuic_tests::ipc_request(&node.socket, req).await.unwrap()
}

#[tokio::test]
async fn repositories_register_idempotently_and_gate_reads() {
    let d = config_dir(json!({}));
    let node = start(d.path(), &[]);
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    std::fs::write(root.join("a.txt"), "inside").unwrap();
    let first = register(&node, &root).await;
    assert_eq!(first["created"], json!(true));
    assert_eq!(first["repo"]["kind"], json!("shell"));
    let again = register(&node, &root).await;
    assert_eq!(again["created"], json!(false));
    let bad = ipc(
        &node.socket,
        "POST",
        "/repos",
        Some(json!({"path": "relative/x"})),
    )
    .await
    .unwrap();
    assert_eq!(bad.status, 400);
    let list = ipc(&node.socket, "GET", "/repos", None)
        .await
        .unwrap()
        .json();
    assert_eq!(list["repos"].as_array().unwrap().len(), 1);

    let ok = ipc(
        &node.socket,
        "GET",
        &format!("/fs/read-external?path={}/a.txt", root.display()),
        None,
    )
    .await
    .unwrap();
    assert_eq!(ok.status, 200);
    assert_eq!(ok.json()["content"], json!("inside"));
    for evil in [
        format!("{}/../../etc/passwd", root.display()),
        "/etc/passwd".into(),
        "etc/passwd".into(),
    ] {
        let r = ipc(
            &node.socket,
            "GET",
            &format!("/fs/read-external?path={evil}"),
            None,
        )
        .await
        .unwrap();
        assert_eq!(r.status, 403, "{evil}");
    }
    let w = ipc(
        &node.socket,
        "POST",
        "/fs/write-external",
        Some(json!({"path": "/tmp/tuic-escape", "content": "x"})),
    )
    .await
    .unwrap();
    assert_eq!(w.status, 403);
    assert!(!Path::new("/tmp/tuic-escape").exists());
}

#[tokio::test]
async fn markdown_image_refuses_symlink_escapes() {
    let d = config_dir(json!({}));
    let node = start(d.path(), &[]);
    let repo = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    std::fs::write(root.join("pic.png"), b"\x89PNG fake").unwrap();
    std::fs::write(outside.path().join("secret.png"), b"secret").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.png"), root.join("link.png")).unwrap();
    register(&node, &root).await;
    let ok = ipc(
        &node.socket,
        "GET",
        &format!(
            "/fs/markdown-image?repoPath={}&file=pic.png",
            root.display()
        ),
        None,
    )
    .await
    .unwrap();
    assert_eq!(ok.status, 200);
    assert_eq!(ok.headers["content-type"], "image/png");
    let esc = ipc(
        &node.socket,
        "GET",
        &format!(
            "/fs/markdown-image?repoPath={}&file=link.png",
            root.display()
        ),
        None,
    )
    .await
    .unwrap();
    assert_eq!(esc.status, 403);
    let dots = ipc(
        &node.socket,
        "GET",
        &format!(
            "/fs/markdown-image?repoPath={}&file=../x.png",
            root.display()
        ),
        None,
    )
    .await
    .unwrap();
    assert!(dots.status == 403 || dots.status == 404, "{}", dots.status);
}

#[tokio::test]
async fn upload_copy_publishes_byte_identical_tree_and_refuses_a_second_copy() {
    let d = config_dir(json!({}));
    let node = start(d.path(), &[]);
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    std::fs::create_dir(root.join("incoming")).unwrap();
    register(&node, &root).await;

    let src = tempfile::tempdir().unwrap();
    for i in 0..200 {
        let sub = src.path().join(format!("d{}", i % 7));
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("f{i}.bin")), vec![(i % 251) as u8; 4096]).unwrap();
    }
    std::fs::write(
        src.path().join("big.bin"),
        (0..3_000_000u32)
            .map(|i| (i % 253) as u8)
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let body = tar_of(src.path(), "tree");
    let r = upload(&node, &root, "incoming", body.clone()).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["name"], json!("tree"));
    assert_eq!(tree(&root.join("incoming/tree")), tree(src.path()));
    assert!(!root.join(".tuic-staging").exists());

    let before = tree(&root);
    let again = upload(&node, &root, "incoming", body).await;
    assert_eq!(again.status, 409);
    assert_eq!(tree(&root), before);
}

#[tokio::test]
async fn hostile_upload_gets_4xx_and_leaves_root_unchanged() {
    let d = config_dir(json!({}));
    let node = start(d.path(), &[]);
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    std::fs::write(root.join("keep"), "k").unwrap();
    register(&node, &root).await;
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_path("x/link").unwrap();
    h.set_link_name("/etc/passwd").unwrap();
    h.set_size(0);
    h.set_cksum();
    b.append(&h, &b""[..]).unwrap();
    let before = tree(&root);
    let r = upload(&node, &root, "", b.into_inner().unwrap()).await;
    assert_eq!(r.status, 400);
    assert!(String::from_utf8_lossy(&r.body).contains("symbolic link"));
    assert_eq!(tree(&root), before);
    // Unregistered root and escaping dest.
    let other = tempfile::tempdir().unwrap();
    assert_eq!(
        upload(&node, other.path(), "", vec![0; 512]).await.status,
        403
    );
    assert_eq!(
        upload(&node, &root, "../..", vec![0; 512]).await.status,
        400
    );
}

#[tokio::test]
async fn upload_copy_over_tcp_needs_cookie_or_basic_never_query_token() {
    let d = config_dir(json!({}));
    let (code, _, _) = run_with_stdin(
        "tuic-node",
        &["set-password", "--config-dir", d.path().to_str().unwrap()],
        "pw\n",
    )
    .unwrap();
    assert_eq!(code, 0);
    let node = start(
        d.path(),
        &["--remote-access", "--port", "0", "--bind", "127.0.0.1"],
    );
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    register(&node, &root).await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("f"), "data").unwrap();
    let body = tar_of(src.path(), "viaTcp");
    let (_, token, _) = run_with_stdin(
        "tuic-node",
        &["token", "--config-dir", d.path().to_str().unwrap()],
        "",
    )
    .unwrap();
    let url = format!(
        "http://{}/fs/upload-copy?root={}",
        node.tcp.unwrap(),
        root.display()
    );
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{url}&token={}", token.trim()))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = http
        .post(&url)
        .basic_auth("admin", Some("pw"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(std::fs::read(root.join("viaTcp/f")).unwrap(), b"data");
}

#[tokio::test]
async fn killing_the_node_mid_upload_leaves_no_staging_after_restart() {
    let d = config_dir(json!({}));
    let mut node = start(d.path(), &[]);
    let repo = tempfile::tempdir().unwrap();
    let root: PathBuf = repo.path().canonicalize().unwrap();
    register(&node, &root).await;
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("f"), vec![1u8; 1 << 20]).unwrap();
    let body = tar_of(src.path(), "half");
    // Send the first half, then hold the stream open.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
    tx.send(Ok(Frame::data(Bytes::copy_from_slice(
        &body[..body.len() / 2],
    ))))
    .await
    .unwrap();
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let uri = format!("/fs/upload-copy?root={}", root.display());
    let req = hyper::Request::post(uri)
        .header("host", "localhost")
        .body(StreamBody::new(stream))
        .unwrap();
    let sock = node.socket.clone();
    let pending = tokio::spawn(async move {
        let s = tokio::net::UnixStream::connect(sock).await.unwrap();
        let (mut send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s))
                .await
                .unwrap();
        tokio::spawn(conn);
        send.send_request(req).await
    });
    // Wait (bounded) until the node has staged part of the upload.
    let deadline = Instant::now() + Duration::from_secs(10);
    let staging = root.join(".tuic-staging");
    while !std::fs::read_dir(&staging)
        .map(|mut r| r.next().is_some())
        .unwrap_or(false)
    {
        assert!(Instant::now() < deadline, "upload never staged");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    node.child.kill().unwrap();
    node.child.wait().unwrap();
    drop(tx);
    let _ = pending.await;
    assert!(
        staging.exists(),
        "killed mid-upload: staging still there before restart"
    );
    let node2 = start(d.path(), &[]);
    assert!(!staging.exists(), "restart swept the staging dir");
    assert!(!root.join("half").exists());
    assert_eq!(
        ipc(&node2.socket, "GET", "/health", None)
            .await
            .unwrap()
            .status,
        200
    );
}

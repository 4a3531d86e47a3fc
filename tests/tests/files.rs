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

/// Sorted names in `dir`: the "outside" of the symlink tests is checked on disk with it.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A registered repository holding `etclink -> <outside>`, `dangling -> <outside>/new`,
/// `inlink -> sub` and `a.txt`, `sub/in.txt`; `<outside>` (a temp dir standing in for `/etc`)
/// holds `secret`.
struct LinkBed {
    _repo: tempfile::TempDir,
    _out: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

fn link_bed() -> LinkBed {
    let repo = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    let outside = out.path().canonicalize().unwrap();
    std::fs::write(outside.join("secret"), "top secret").unwrap();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/in.txt"), "inside").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("etclink")).unwrap();
    std::os::unix::fs::symlink(outside.join("new"), root.join("dangling")).unwrap();
    std::os::unix::fs::symlink("sub", root.join("inlink")).unwrap();
    LinkBed {
        _repo: repo,
        _out: out,
        root,
        outside,
    }
}

/// Asserts a 403 `outside_root` refusal that carries none of the outside file's content.
fn refused(r: &tuic_tests::Reply, what: &str) {
    assert_eq!(
        r.status,
        403,
        "{what}: {}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json()["code"], json!("outside_root"), "{what}");
    assert!(
        !String::from_utf8_lossy(&r.body).contains("top secret"),
        "{what}"
    );
}

#[tokio::test]
async fn symlinks_out_of_a_root_are_refused_by_every_file_route() {
    let d = config_dir(json!({}));
    let node = start(d.path(), &[]);
    let b = link_bed();
    let (root, outside) = (&b.root, &b.outside);
    register(&node, root).await;
    let r = root.display();
    let get = |uri: String| {
        let sock = node.socket.clone();
        async move { ipc(&sock, "GET", &uri, None).await.unwrap() }
    };
    let post = |uri: &'static str, body: Value| {
        let sock = node.socket.clone();
        async move { ipc(&sock, "POST", uri, Some(body)).await.unwrap() }
    };

    // Reads through the link: all three read routes.
    refused(
        &get(format!("/fs/read-external?path={r}/etclink/secret")).await,
        "read-external",
    );
    refused(
        &get(format!("/fs/read-editor-external?path={r}/etclink/secret")).await,
        "read-editor-external",
    );
    refused(
        &get(format!("/fs/read-editor?repoPath={r}&file=etclink/secret")).await,
        "read-editor",
    );
    // Writes through the link and through a dangling link pointing out; copy and move, both
    // directions.
    for (uri, body, what) in [
        (
            "/fs/write-external",
            json!({"path": format!("{r}/etclink/x"), "content": "pwned"}),
            "write-external through a link",
        ),
        (
            "/fs/write-external",
            json!({"path": format!("{r}/dangling"), "content": "pwned"}),
            "write-external through a dangling link",
        ),
        (
            "/fs/copy-abs",
            json!({"src": format!("{r}/etclink/secret"), "dest": format!("{r}/stolen")}),
            "copy-abs out→in",
        ),
        (
            "/fs/copy-abs",
            json!({"src": format!("{r}/a.txt"), "dest": format!("{r}/etclink/a.txt")}),
            "copy-abs in→out",
        ),
        (
            "/fs/move-abs",
            json!({"src": format!("{r}/etclink/secret"), "dest": format!("{r}/stolen")}),
            "move-abs out→in",
        ),
        (
            "/fs/move-abs",
            json!({"src": format!("{r}/a.txt"), "dest": format!("{r}/etclink/a.txt")}),
            "move-abs in→out",
        ),
    ] {
        refused(&post(uri, body).await, what);
    }
    let src = tempfile::tempdir().unwrap();
    std::fs::write(src.path().join("dropped"), "d").unwrap();
    refused(
        &post(
            "/fs/transfer",
            json!({"paths": [src.path().join("dropped")], "destDir": format!("{r}/etclink")}),
        )
        .await,
        "transfer into a link out",
    );
    // Upload destination: a link out, named relative to the root or as an absolute path.
    let body = {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("f"), "up").unwrap();
        tar_of(t.path(), "up")
    };
    refused(
        &upload(&node, root, "etclink", body.clone()).await,
        "upload-copy dest",
    );
    let uri = format!("/fs/upload-copy?path={r}/etclink");
    let req = hyper::Request::post(uri)
        .header("host", "localhost")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let abs = tuic_tests::ipc_request(&node.socket, req).await.unwrap();
    refused(&abs, "upload-copy path");

    // Nothing was written outside, nothing was taken from it, nothing landed in the root.
    assert_eq!(names(outside), vec!["secret"]);
    assert_eq!(
        std::fs::read_to_string(outside.join("secret")).unwrap(),
        "top secret"
    );
    assert!(!root.join("stolen").exists());
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "a");
    assert!(!root.join(".tuic-staging").exists());
}

#[tokio::test]
async fn symlinks_that_stay_inside_a_root_keep_working() {
    let d = config_dir(json!({}));
    let node = start(d.path(), &[]);
    let b = link_bed();
    let root = &b.root;
    register(&node, root).await;
    let r = root.display();
    let sock = &node.socket;
    for uri in [
        format!("/fs/read-external?path={r}/inlink/in.txt"),
        format!("/fs/read-editor-external?path={r}/inlink/in.txt"),
        format!("/fs/read-editor?repoPath={r}&file=inlink/in.txt"),
    ] {
        let ok = ipc(sock, "GET", &uri, None).await.unwrap();
        assert_eq!(
            ok.status,
            200,
            "{uri}: {}",
            String::from_utf8_lossy(&ok.body)
        );
        assert_eq!(ok.json()["content"], json!("inside"), "{uri}");
        assert_eq!(ok.json()["size"], json!(6), "{uri}");
    }
    let w = ipc(
        sock,
        "POST",
        "/fs/write-external",
        Some(json!({"path": format!("{r}/inlink/w.txt"), "content": "written"})),
    )
    .await
    .unwrap();
    assert_eq!(w.status, 200);
    assert_eq!(
        std::fs::read_to_string(root.join("sub/w.txt")).unwrap(),
        "written"
    );
    let c = ipc(
        sock,
        "POST",
        "/fs/copy-abs",
        Some(json!({"src": format!("{r}/inlink/in.txt"), "dest": format!("{r}/inlink/copy.txt")})),
    )
    .await
    .unwrap();
    assert_eq!(c.status, 200, "{}", String::from_utf8_lossy(&c.body));
    assert_eq!(
        std::fs::read_to_string(root.join("sub/copy.txt")).unwrap(),
        "inside"
    );
    let m = ipc(
        sock,
        "POST",
        "/fs/move-abs",
        Some(json!({"src": format!("{r}/inlink/copy.txt"), "dest": format!("{r}/moved.txt")})),
    )
    .await
    .unwrap();
    assert_eq!(m.status, 200, "{}", String::from_utf8_lossy(&m.body));
    assert!(!root.join("sub/copy.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("moved.txt")).unwrap(),
        "inside"
    );
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("f"), "up").unwrap();
    let up = upload(&node, root, "inlink", tar_of(t.path(), "up")).await;
    assert_eq!(up.status, 200, "{}", String::from_utf8_lossy(&up.body));
    assert_eq!(std::fs::read(root.join("sub/up/f")).unwrap(), b"up");
}

#[tokio::test]
async fn copy_abs_and_move_abs_copy_trees_and_never_replace() {
    let d = config_dir(json!({}));
    let node = start(d.path(), &[]);
    let b = link_bed();
    let root = &b.root;
    register(&node, root).await;
    let r = root.display();
    let sock = &node.socket;
    std::fs::create_dir_all(root.join("tree/deep")).unwrap();
    std::fs::write(root.join("tree/deep/f.bin"), vec![7u8; 4096]).unwrap();
    std::os::unix::fs::symlink("deep/f.bin", root.join("tree/rel-link")).unwrap();
    // A link out inside a copied tree is recreated as a link, its target never read.
    std::os::unix::fs::symlink(b.outside.join("secret"), root.join("tree/out-link")).unwrap();
    let c = ipc(
        sock,
        "POST",
        "/fs/copy-abs",
        Some(json!({"src": format!("{r}/tree"), "dest": format!("{r}/tree2")})),
    )
    .await
    .unwrap();
    assert_eq!(c.status, 200, "{}", String::from_utf8_lossy(&c.body));
    assert_eq!(tree(&root.join("tree2")), tree(&root.join("tree")));
    assert_eq!(
        std::fs::read_link(root.join("tree2/out-link")).unwrap(),
        b.outside.join("secret")
    );
    assert_eq!(
        std::fs::read_link(root.join("tree2/rel-link")).unwrap(),
        Path::new("deep/f.bin")
    );
    // An existing destination: 409 for both, nothing changed.
    let before = tree(root);
    for route in ["/fs/copy-abs", "/fs/move-abs"] {
        let e = ipc(
            sock,
            "POST",
            route,
            Some(json!({"src": format!("{r}/a.txt"), "dest": format!("{r}/tree2")})),
        )
        .await
        .unwrap();
        assert_eq!(
            e.status,
            409,
            "{route}: {}",
            String::from_utf8_lossy(&e.body)
        );
    }
    assert_eq!(tree(root), before);
    // The lexical gate still answers first.
    for route in ["/fs/copy-abs", "/fs/move-abs"] {
        let e = ipc(
            sock,
            "POST",
            route,
            Some(json!({"src": format!("{r}/a.txt"), "dest": format!("{r}/../escaped")})),
        )
        .await
        .unwrap();
        assert_eq!(e.status, 403, "{route}");
    }
    let m = ipc(
        sock,
        "POST",
        "/fs/move-abs",
        Some(json!({"src": format!("{r}/tree2"), "dest": format!("{r}/sub/tree3")})),
    )
    .await
    .unwrap();
    assert_eq!(m.status, 200, "{}", String::from_utf8_lossy(&m.body));
    assert!(!root.join("tree2").exists());
    assert_eq!(tree(&root.join("sub/tree3")), tree(&root.join("tree")));
}

#[tokio::test]
async fn editor_reads_are_capped_and_gated() {
    let d = config_dir(json!({}));
    let node = start(d.path(), &[]);
    let b = link_bed();
    let root = &b.root;
    register(&node, root).await;
    let r = root.display();
    let sock = &node.socket;
    let ok = ipc(
        sock,
        "GET",
        &format!("/fs/read-editor?repoPath={r}&file=sub/in.txt"),
        None,
    )
    .await
    .unwrap();
    assert_eq!(ok.status, 200);
    assert_eq!(ok.json()["content"], json!("inside"));
    for (uri, status) in [
        (format!("/fs/read-editor?repoPath={r}&file=../x"), 403),
        (format!("/fs/read-editor?repoPath={r}&file=sub"), 400),
        (format!("/fs/read-editor?repoPath={r}&file=none.txt"), 404),
        (
            "/fs/read-editor-external?path=/etc/hostname".to_owned(),
            403,
        ),
        (format!("/fs/read-editor-external?path={r}/sub"), 400),
        (format!("/fs/read-editor-external?path={r}/none"), 404),
    ] {
        let e = ipc(sock, "GET", &uri, None).await.unwrap();
        assert_eq!(
            e.status,
            status,
            "{uri}: {}",
            String::from_utf8_lossy(&e.body)
        );
    }
    // The standard cap (10 MB) applies to read-external; the editor route over IPC (loopback)
    // takes the large one.
    std::fs::write(root.join("big"), vec![b'x'; 10 * 1024 * 1024 + 1]).unwrap();
    let big = ipc(
        sock,
        "GET",
        &format!("/fs/read-external?path={r}/big"),
        None,
    )
    .await
    .unwrap();
    assert_eq!(big.status, 413);
    let big = ipc(
        sock,
        "GET",
        &format!("/fs/read-editor-external?path={r}/big"),
        None,
    )
    .await
    .unwrap();
    assert_eq!(big.status, 200);
    assert_eq!(big.json()["size"], json!(10 * 1024 * 1024 + 1));
}

#[tokio::test]
async fn resolve_markdown_link_answers_only_beneath_roots() {
    let d = config_dir(json!({}));
    let node = start(d.path(), &[]);
    let b = link_bed();
    let (root, outside) = (&b.root, &b.outside);
    std::fs::create_dir(root.join("docs")).unwrap();
    std::fs::write(root.join("docs/guide.md"), "# g").unwrap();
    std::fs::write(root.join("README.md"), "# readme").unwrap();
    register(&node, root).await;
    let r = root.display();
    let resolve = |base: String, link: String| {
        let sock = node.socket.clone();
        async move {
            ipc(
                &sock,
                "POST",
                "/fs/resolve-markdown-link",
                Some(json!({"basePath": base, "link": link})),
            )
            .await
            .unwrap()
        }
    };
    let up = resolve(format!("{r}/docs/guide.md"), "../README.md#top".into()).await;
    assert_eq!(up.status, 200, "{}", String::from_utf8_lossy(&up.body));
    let v = up.json();
    assert_eq!(v["exists"], json!(true));
    assert_eq!(v["is_dir"], json!(false));
    assert_eq!(v["size"], json!(8));
    assert_eq!(v["path"], json!(format!("{r}/docs/../README.md")));
    let dir = resolve(format!("{r}/docs"), "guide.md".into()).await.json();
    assert_eq!(dir["exists"], json!(true), "{dir}");
    let missing = resolve(format!("{r}/docs/guide.md"), "nope.md".into())
        .await
        .json();
    assert_eq!(missing["exists"], json!(false));
    assert!(missing.get("size").is_none());
    let inlink = resolve(format!("{r}/README.md"), "inlink/in.txt".into())
        .await
        .json();
    assert_eq!(inlink["size"], json!(6), "{inlink}");

    // Outside every root: refused alike whether the target exists or not, no metadata.
    let existing = resolve(
        format!("{r}/README.md"),
        outside.join("secret").display().to_string(),
    )
    .await;
    let absent = resolve(
        format!("{r}/README.md"),
        outside.join("absent").display().to_string(),
    )
    .await;
    for (what, reply) in [
        ("absolute target outside", &existing),
        ("absent target outside", &absent),
        (
            "through a link out",
            &resolve(format!("{r}/README.md"), "etclink/secret".into()).await,
        ),
        (
            "climbing out",
            &resolve(
                format!("{r}/docs/guide.md"),
                "../../../../../../etc/hostname".into(),
            )
            .await,
        ),
        (
            "base outside",
            &resolve(outside.join("x.md").display().to_string(), "secret".into()).await,
        ),
        (
            "base through a link out",
            &resolve(format!("{r}/etclink/x.md"), "secret".into()).await,
        ),
    ] {
        assert_eq!(
            reply.status,
            403,
            "{what}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        let v = reply.json();
        assert!(
            v.get("exists").is_none() && v.get("size").is_none(),
            "{what}: {v}"
        );
    }
    assert_eq!(existing.json()["code"], absent.json()["code"]);
    let unc = resolve(format!("{r}/README.md"), "//server/share/x".into()).await;
    assert_eq!(unc.status, 400);
}

/// A node with remote access on loopback and a password: TCP callers authenticate with Basic;
/// a request carrying `x-forwarded-for` is a remote caller (the `tailscale serve` relay case).
fn remote_bed() -> (tempfile::TempDir, NodeProc) {
    let d = config_dir(json!({}));
    tuic_tests::set_password(d.path(), "pw");
    let node = tuic_tests::remote_node(d.path());
    (d, node)
}

/// `GET`/`POST` over TCP with Basic auth; `remote` adds `x-forwarded-for`.
async fn tcp(
    node: &NodeProc,
    method: reqwest::Method,
    uri: &str,
    body: Option<Value>,
    remote: bool,
) -> (u16, Value, usize) {
    let mut r = reqwest::Client::new()
        .request(method, format!("http://{}{uri}", node.tcp.unwrap()))
        .basic_auth("admin", Some("pw"));
    if remote {
        r = r.header("x-forwarded-for", "203.0.113.9");
    }
    if let Some(b) = body {
        r = r.json(&b);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, v, bytes.len())
}

#[tokio::test]
async fn remote_callers_get_the_10_mb_cap_on_both_editor_reads() {
    let (_d, node) = remote_bed();
    let b = link_bed();
    let root = &b.root;
    register(&node, root).await;
    let r = root.display();
    // 11 MB: over the remote cap, under the loopback one; 9 MB: under both.
    std::fs::write(root.join("big"), vec![b'x'; 11 * 1024 * 1024]).unwrap();
    std::fs::write(root.join("nine"), vec![b'y'; 9 * 1024 * 1024]).unwrap();
    let before = tree(root);
    let get = reqwest::Method::GET;
    for uri in [
        format!("/fs/read-editor-external?path={r}/big"),
        format!("/fs/read-editor?repoPath={r}&file=big"),
    ] {
        let (status, v, len) = tcp(&node, get.clone(), &uri, None, true).await;
        assert_eq!(status, 413, "remote {uri}: {v}");
        assert_eq!(v["code"], json!("too_large"), "{uri}");
        // The refusal carries none of the file.
        assert!(len < 4096, "{uri}: {len} bytes answered");
        // The same read from this machine takes the large cap.
        let (status, v, _) = tcp(&node, get.clone(), &uri, None, false).await;
        assert_eq!(status, 200, "loopback {uri}");
        assert_eq!(v["size"], json!(11 * 1024 * 1024));
    }
    for uri in [
        format!("/fs/read-editor-external?path={r}/nine"),
        format!("/fs/read-editor?repoPath={r}&file=nine"),
    ] {
        let (status, v, _) = tcp(&node, get.clone(), &uri, None, true).await;
        assert_eq!(status, 200, "remote {uri}");
        assert_eq!(v["size"], json!(9 * 1024 * 1024));
    }
    // The remote router keeps the traversal gate and the symlink refusal on both routes.
    for (uri, code) in [
        (format!("/fs/read-editor?repoPath={r}&file=../x"), 403),
        (
            format!("/fs/read-editor?repoPath={r}&file=etclink/secret"),
            403,
        ),
        (format!("/fs/read-editor-external?path={r}/../x"), 403),
        (
            format!("/fs/read-editor-external?path={r}/etclink/secret"),
            403,
        ),
        ("/fs/read-editor-external?path=etc/hostname".into(), 403),
        ("/fs/read-editor-external?path=/etc/hostname".into(), 403),
    ] {
        let (status, v, _) = tcp(&node, get.clone(), &uri, None, true).await;
        assert_eq!(status, code, "{uri}: {v}");
        assert!(!v.to_string().contains("top secret"), "{uri}");
    }
    // Reads write nothing.
    assert_eq!(tree(root), before);
    assert_eq!(names(&b.outside), vec!["secret"]);
}

#[tokio::test]
async fn transfer_copies_and_moves_into_a_root_and_gates_both_ends() {
    let (_d, node) = remote_bed();
    let b = link_bed();
    let (root, outside) = (&b.root, &b.outside);
    register(&node, root).await;
    let r = root.display();
    let sock = &node.socket;
    let drop_dir = tempfile::tempdir().unwrap();
    let src = drop_dir.path().canonicalize().unwrap();
    std::fs::write(src.join("one.txt"), "one").unwrap();
    std::fs::create_dir_all(src.join("folder/deep")).unwrap();
    std::fs::write(src.join("folder/deep/f"), "deep").unwrap();

    // A loopback caller copies from anywhere (a Finder drop) into a directory of a root.
    let c = ipc(
        sock,
        "POST",
        "/fs/transfer",
        Some(json!({"paths": [src.join("one.txt"), src.join("folder")], "destDir": format!("{r}/sub")})),
    )
    .await
    .unwrap();
    assert_eq!(c.status, 200, "{}", String::from_utf8_lossy(&c.body));
    assert_eq!(
        c.json()["paths"],
        json!([format!("{r}/sub/one.txt"), format!("{r}/sub/folder")])
    );
    assert_eq!(
        std::fs::read_to_string(root.join("sub/one.txt")).unwrap(),
        "one"
    );
    assert_eq!(tree(&root.join("sub/folder")), tree(&src.join("folder")));
    assert!(src.join("one.txt").exists(), "copy keeps the source");
    // The same name again: 409, never replaced.
    std::fs::write(src.join("one.txt"), "changed").unwrap();
    let again = ipc(
        sock,
        "POST",
        "/fs/transfer",
        Some(json!({"paths": [src.join("one.txt")], "destDir": format!("{r}/sub")})),
    )
    .await
    .unwrap();
    assert_eq!(again.status, 409);
    assert_eq!(
        std::fs::read_to_string(root.join("sub/one.txt")).unwrap(),
        "one"
    );
    // Move: the source is gone afterwards.
    let m = ipc(
        sock,
        "POST",
        "/fs/transfer",
        Some(json!({"paths": [src.join("one.txt")], "destDir": r.to_string(), "mode": "move"})),
    )
    .await
    .unwrap();
    assert_eq!(m.status, 200, "{}", String::from_utf8_lossy(&m.body));
    assert!(!src.join("one.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("one.txt")).unwrap(),
        "changed"
    );

    // Refusals, each before anything is written.
    std::fs::write(src.join("two.txt"), "two").unwrap();
    let before = tree(root);
    let two = src.join("two.txt").display().to_string();
    for (body, status, what) in [
        (
            json!({"paths": [two], "destDir": format!("{r}/../escaped")}),
            403,
            "destDir with ..",
        ),
        (
            json!({"paths": [two], "destDir": "relative/dir"}),
            403,
            "relative destDir",
        ),
        (
            json!({"paths": [two], "destDir": format!("{r}/sub\u{0}x")}),
            403,
            "NUL in destDir",
        ),
        (
            json!({"paths": [two], "destDir": outside}),
            403,
            "destDir outside every root",
        ),
        (
            json!({"paths": [two], "destDir": format!("{r}/etclink")}),
            403,
            "destDir through a link out",
        ),
        (
            json!({"paths": [format!("{}/../two.txt", src.join("folder").display())], "destDir": r.to_string()}),
            403,
            "source with ..",
        ),
        (
            json!({"paths": ["two.txt"], "destDir": r.to_string()}),
            403,
            "relative source",
        ),
        (
            json!({"paths": [two], "destDir": r.to_string(), "mode": "link"}),
            400,
            "unknown mode",
        ),
        (
            json!({"paths": [two], "dest_dir": r.to_string()}),
            422,
            "snake_case field",
        ),
    ] {
        let e = ipc(sock, "POST", "/fs/transfer", Some(body)).await.unwrap();
        assert_eq!(
            e.status,
            status,
            "{what}: {}",
            String::from_utf8_lossy(&e.body)
        );
    }
    assert_eq!(tree(root), before);
    assert_eq!(names(outside), vec!["secret"]);

    // A remote caller's sources must lie in roots and are read beneath them.
    let post = reqwest::Method::POST;
    for (paths, what) in [
        (json!([two]), "a source outside every root"),
        (
            json!([outside.join("secret")]),
            "a source in the stand-in /etc",
        ),
        (
            json!([format!("{r}/etclink/secret")]),
            "a source through a link out",
        ),
    ] {
        let (status, v, _) = tcp(
            &node,
            post.clone(),
            "/fs/transfer",
            Some(json!({"paths": paths, "destDir": format!("{r}/sub")})),
            true,
        )
        .await;
        assert_eq!(status, 403, "remote, {what}: {v}");
    }
    assert_eq!(tree(root), before);
    assert!(src.join("two.txt").exists());
    let (status, v, _) = tcp(
        &node,
        post.clone(),
        "/fs/transfer",
        Some(
            json!({"paths": [format!("{r}/a.txt")], "destDir": format!("{r}/sub"), "mode": "move"}),
        ),
        true,
    )
    .await;
    assert_eq!(status, 200, "remote, a source inside: {v}");
    assert!(!root.join("a.txt").exists());
    assert_eq!(
        std::fs::read_to_string(root.join("sub/a.txt")).unwrap(),
        "a"
    );
}

#[tokio::test]
async fn copy_move_and_link_resolution_refuse_lexical_escapes_remotely_too() {
    let (_d, node) = remote_bed();
    let b = link_bed();
    let (root, outside) = (&b.root, &b.outside);
    register(&node, root).await;
    let r = root.display();
    let before = tree(root);
    let post = reqwest::Method::POST;
    for route in ["/fs/copy-abs", "/fs/move-abs"] {
        for (src, dest, what) in [
            (format!("{r}/../x"), format!("{r}/y"), "src with .."),
            (
                format!("{r}/a.txt"),
                format!("{r}/sub/../../y"),
                "dest with ..",
            ),
            ("a.txt".to_owned(), format!("{r}/y"), "relative src"),
            (format!("{r}/a.txt"), "y".to_owned(), "relative dest"),
            (format!("{r}/a.txt\u{0}"), format!("{r}/y"), "NUL in src"),
            (
                outside.join("secret").display().to_string(),
                format!("{r}/y"),
                "src outside",
            ),
            (
                format!("{r}/a.txt"),
                outside.join("y").display().to_string(),
                "dest outside",
            ),
            (
                format!("{r}/etclink/secret"),
                format!("{r}/y"),
                "src through a link out",
            ),
            (
                format!("{r}/a.txt"),
                format!("{r}/etclink/y"),
                "dest through a link out",
            ),
        ] {
            for remote in [false, true] {
                let (status, v, _) = tcp(
                    &node,
                    post.clone(),
                    route,
                    Some(json!({"src": src, "dest": dest})),
                    remote,
                )
                .await;
                assert_eq!(status, 403, "{route} {what} (remote {remote}): {v}");
                assert!(!v.to_string().contains("top secret"));
            }
        }
    }
    // A dangling link out as the destination is an existing name: 409, never followed.
    for route in ["/fs/copy-abs", "/fs/move-abs"] {
        let (status, v, _) = tcp(
            &node,
            post.clone(),
            route,
            Some(json!({"src": format!("{r}/a.txt"), "dest": format!("{r}/dangling")})),
            true,
        )
        .await;
        assert_eq!(status, 409, "{route} onto a dangling link: {v}");
    }
    for (base, link, what, code) in [
        (
            "docs/x.md".to_owned(),
            "a.txt".to_owned(),
            "relative basePath",
            400,
        ),
        (
            format!("{r}/../x.md"),
            "a.txt".to_owned(),
            "basePath with ..",
            403,
        ),
        (
            format!("{r}/x.md"),
            "../../../etc/hostname".to_owned(),
            "link climbing out",
            403,
        ),
        (
            format!("{r}/x.md"),
            "etclink/secret".to_owned(),
            "link through a link out",
            403,
        ),
    ] {
        for remote in [false, true] {
            let (status, v, _) = tcp(
                &node,
                post.clone(),
                "/fs/resolve-markdown-link",
                Some(json!({"basePath": base, "link": link})),
                remote,
            )
            .await;
            assert_eq!(status, code, "{what} (remote {remote}): {v}");
            assert!(
                v.get("exists").is_none() && v.get("size").is_none(),
                "{what}: {v}"
            );
        }
    }
    assert_eq!(tree(root), before);
    assert_eq!(names(outside), vec!["secret"]);
}

//! Benchmark workload `upload-copy`: a tree of many small files plus a few large ones, streamed
//! as a tar into a registered repository through `POST /fs/upload-copy` over the IPC socket,
//! against the floor `tar -cf - | tar -xf -` on the same disk in the same run.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;
use serde_json::json;

use crate::{NodeProc, ipc};

/// Sizes of the generated tree.
#[derive(Debug, Clone, Copy)]
pub struct TreeSpec {
    /// Number of small files.
    pub small_files: usize,
    /// Size of each small file.
    pub small_size: usize,
    /// Number of large files.
    pub large_files: usize,
    /// Size of each large file.
    pub large_size: usize,
}

impl TreeSpec {
    /// The tree: 2,000 × 4 KiB plus five 50 MiB files.
    pub const FULL: Self = Self {
        small_files: 2000,
        small_size: 4096,
        large_files: 5,
        large_size: 50 << 20,
    };

    /// Total file bytes.
    pub fn bytes(&self) -> u64 {
        (self.small_files * self.small_size + self.large_files * self.large_size) as u64
    }

    /// Total files.
    pub fn files(&self) -> usize {
        self.small_files + self.large_files
    }
}

/// Writes the tree under `dir/tree`.
pub fn make_tree(dir: &Path, spec: TreeSpec) -> anyhow::Result<()> {
    let root = dir.join("tree");
    for i in 0..spec.small_files {
        let sub = root.join(format!("d{:02}", i % 40));
        std::fs::create_dir_all(&sub)?;
        let data: Vec<u8> = (0..spec.small_size)
            .map(|j| ((i * 31 + j) % 251) as u8)
            .collect();
        std::fs::write(sub.join(format!("f{i:05}.bin")), data)?;
    }
    for i in 0..spec.large_files {
        let data: Vec<u8> = (0..spec.large_size)
            .map(|j| ((i * 7 + j / 4096) % 253) as u8)
            .collect();
        std::fs::write(root.join(format!("large{i}.bin")), data)?;
    }
    Ok(())
}

/// Streams `src/tree` as a tar into `root` through the node; returns seconds.
pub async fn upload_tree(node: &NodeProc, src: &Path, root: &Path) -> anyhow::Result<f64> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(32);
    let tree = src.join("tree");
    let started = Instant::now();
    let producer = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        struct ChanWriter(tokio::sync::mpsc::Sender<Result<Frame<Bytes>, std::io::Error>>);
        impl std::io::Write for ChanWriter {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0
                    .blocking_send(Ok(Frame::data(Bytes::copy_from_slice(b))))
                    .map_err(|_| std::io::Error::other("receiver gone"))?;
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let w = std::io::BufWriter::with_capacity(256 * 1024, ChanWriter(tx));
        let mut b = tar::Builder::new(w);
        b.append_dir_all("tree", &tree)?;
        b.into_inner()?;
        Ok(())
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let uri = format!("/fs/upload-copy?root={}", root.display());
    let req = hyper::Request::post(uri)
        .header("host", "localhost")
        .body(StreamBody::new(stream))?;
    let s = tokio::net::UnixStream::connect(&node.socket).await?;
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s)).await?;
    tokio::spawn(conn);
    let resp = send.send_request(req).await?;
    let status = resp.status();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await?
        .to_bytes();
    producer.await??;
    if !status.is_success() {
        bail!("upload failed: {status} {}", String::from_utf8_lossy(&body));
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Runs the workload and prints figures.
pub async fn run(spec: TreeSpec) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    make_tree(work.path(), spec)?;
    let floor = tar_floor(work.path())?;
    let cfg = tempfile::tempdir()?;
    std::fs::write(
        cfg.path().join("config.json"),
        json!({"secret_store": "file"}).to_string(),
    )?;
    let node = NodeProc::start(
        "tuic-node",
        &["--config-dir", cfg.path().to_str().unwrap_or_default()],
        &[],
    )?;
    let root = work.path().join("repo");
    std::fs::create_dir(&root)?;
    let root = root.canonicalize()?;
    let r = ipc(&node.socket, "POST", "/repos", Some(json!({"path": root}))).await?;
    if r.status != 200 {
        bail!("registering the repository: {}", r.status);
    }
    let secs = upload_tree(&node, work.path(), &root).await?;
    report("upload-copy (IPC, same machine)", spec, floor, secs);
    Ok(())
}

/// Runs the cross-host variant: the tree lives on the hub's machine and `tuic cp` sends it
/// through the hub to a node in another network namespace (veth link); the floor is
/// `tar | tar` on the same disk in the same run. Needs root and iproute2.
pub async fn run_netns(spec: TreeSpec) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    make_tree(work.path(), spec)?;
    let floor = tar_floor(work.path())?;
    let net = crate::netns::Net::star(1)?;
    let node_dir = crate::config_dir(json!({}));
    let nd = node_dir.path().to_str().unwrap_or_default().to_owned();
    let (code, _, err) = crate::run_with_stdin(
        "tuic-node",
        &["set-password", "--config-dir", &nd],
        "bench pw",
    )?;
    if code != 0 {
        bail!("set-password: {err}");
    }
    let node = NodeProc::start_in(
        Some(net.node(0)),
        "tuic-node",
        &["--config-dir", &nd, "--remote-access", "--port", "9876"],
        &[],
    )?;
    let (_, token, _) = crate::run_with_stdin("tuic-node", &["token", "--config-dir", &nd], "")?;
    let hub_dir = crate::config_dir(json!({}));
    let hd = hub_dir.path().to_str().unwrap_or_default().to_owned();
    let hub = NodeProc::start_in(Some(net.hub()), "tuic-hub", &["--config-dir", &hd], &[])?;
    let url = format!("http://{}:9876", net.node_addr(0));
    crate::run_with_stdin(
        "tuic-hub",
        &[
            "connect",
            "--config-dir",
            &hd,
            "--id",
            "boxb",
            "--url",
            &url,
            "--token-stdin",
        ],
        token.trim(),
    )?;
    let deadline = Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let c = ipc(&hub.socket, "GET", "/hub/connections", None)
            .await?
            .json();
        if c["connections"][0]["up"] == json!(true) {
            break;
        }
        if Instant::now() > deadline {
            bail!("hub never connected: {c}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let root = work.path().join("repo");
    std::fs::create_dir(&root)?;
    let root = root.canonicalize()?;
    if ipc(&node.socket, "POST", "/repos", Some(json!({"path": root})))
        .await?
        .status
        != 200
    {
        bail!("registering the repository failed");
    }
    let t = Instant::now();
    let out = std::process::Command::new(crate::bin("tuic"))
        .args([
            "cp",
            work.path().join("tree").to_str().unwrap_or_default(),
            &format!("boxb:{}", root.display()),
        ])
        .env("TUIC_SOCKET", &hub.socket)
        .output()?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("tuic cp failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    report(
        "upload-copy-netns (tuic cp via hub, veth)",
        spec,
        floor,
        secs,
    );
    let (files, bytes) = same_tree(&work.path().join("tree"), &root.join("tree"))?;
    println!("  verified byte-identical: {files} files, {bytes} bytes");
    let again = std::process::Command::new(crate::bin("tuic"))
        .args([
            "cp",
            work.path().join("tree").to_str().unwrap_or_default(),
            &format!("boxb:{}", root.display()),
        ])
        .env("TUIC_SOCKET", &hub.socket)
        .output()?;
    let err = String::from_utf8_lossy(&again.stderr);
    if again.status.success() || !err.contains("409") {
        bail!("a second copy of the same name must be refused with 409: {err}");
    }
    same_tree(&work.path().join("tree"), &root.join("tree"))?;
    println!("  second copy refused (409), destination unchanged");
    Ok(())
}

/// Compares two trees file by file; returns (files, bytes) or the first difference.
fn same_tree(a: &Path, b: &Path) -> anyhow::Result<(u64, u64)> {
    let (mut files, mut bytes) = (0, 0);
    for e in std::fs::read_dir(a)? {
        let e = e?;
        let (pa, pb) = (e.path(), b.join(e.file_name()));
        if e.file_type()?.is_dir() {
            let (f, n) = same_tree(&pa, &pb)?;
            files += f;
            bytes += n;
        } else {
            let x = std::fs::read(&pa)?;
            let y = std::fs::read(&pb).with_context(|| format!("{} missing", pb.display()))?;
            if x != y {
                bail!("{} differs", pb.display());
            }
            files += 1;
            bytes += x.len() as u64;
        }
    }
    if std::fs::read_dir(b)?.count() != std::fs::read_dir(a)?.count() {
        bail!("{} has entries the source lacks", b.display());
    }
    Ok((files, bytes))
}

fn tar_floor(dir: &Path) -> anyhow::Result<f64> {
    let dst = dir.join("floor");
    std::fs::create_dir(&dst)?;
    let t = Instant::now();
    let st = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -cf - -C '{}' tree | tar -xf - -C '{}'",
            dir.display(),
            dst.display()
        ))
        .status()
        .context("running tar | tar")?;
    if !st.success() {
        bail!("tar | tar failed");
    }
    Ok(t.elapsed().as_secs_f64())
}

fn report(what: &str, spec: TreeSpec, floor: f64, secs: f64) {
    let mb = spec.bytes() as f64 / 1e6;
    println!("{what}: {} files, {mb:.1} MB", spec.files());
    println!(
        "  tar|tar floor : {floor:.3} s  {:.1} MB/s  {:.0} files/s",
        mb / floor,
        spec.files() as f64 / floor
    );
    println!(
        "  tuic          : {secs:.3} s  {:.1} MB/s  {:.0} files/s",
        mb / secs,
        spec.files() as f64 / secs
    );
    println!("  ratio (tuic / floor throughput): {:.2}", floor / secs);
}

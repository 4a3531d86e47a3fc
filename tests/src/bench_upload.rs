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
    // Floor: tar piped into tar on the same disk.
    let floor_dst = work.path().join("floor");
    std::fs::create_dir(&floor_dst)?;
    let t = Instant::now();
    let st = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -cf - -C '{}' tree | tar -xf - -C '{}'",
            work.path().display(),
            floor_dst.display()
        ))
        .status()
        .context("running tar | tar")?;
    if !st.success() {
        bail!("tar | tar failed");
    }
    let floor = t.elapsed().as_secs_f64();

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
    let mb = spec.bytes() as f64 / 1e6;
    println!("upload-copy: {} files, {:.1} MB", spec.files(), mb);
    println!(
        "  tar|tar floor : {floor:.3} s  {:.1} MB/s  {:.0} files/s",
        mb / floor,
        spec.files() as f64 / floor
    );
    println!(
        "  tuic upload   : {secs:.3} s  {:.1} MB/s  {:.0} files/s",
        mb / secs,
        spec.files() as f64 / secs
    );
    println!("  ratio (tuic / floor throughput): {:.2}", floor / secs);
    Ok(())
}

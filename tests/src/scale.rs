//! A hub and N nodes as processes on loopback, for the hub's scale: the descriptor-budget test
//! (`tests/tests/hub_fd_budget.rs`) and `bench fed-scale`.
//!
//! One template config dir is made once (password, token, QUIC certificate) and copied for
//! every node, so N nodes cost N process starts and nothing else: they share the token and the
//! certificate, which the hub pins per connection anyway. The hub's connections are written
//! straight into its config dir with the hub's own `connections::connect`, no process each.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

use crate::bed::PASSWORD;
use crate::{NodeProc, ipc, run_with_stdin};

/// N nodes on loopback made from one template, and the hub's config dir beside them.
#[derive(Debug)]
pub struct ScaleBed {
    root: tempfile::TempDir,
    /// The token every node accepts (the template's).
    pub token: String,
    /// The QUIC certificate every node presents (`sha256:…`), when its listener ran.
    pub fingerprint: Option<String>,
    /// The nodes, `n0`, `n1`, … on the hub.
    pub nodes: Vec<NodeProc>,
    holders: bool,
}

/// Node processes started at once while a bed comes up.
const STARTS_AT_ONCE: usize = 4;

impl ScaleBed {
    /// `n` nodes with remote access on loopback; `holders`: their sessions in holders (off:
    /// `TUIC_NO_HOLDERS`, a session is a PTY of the node itself).
    pub async fn start(n: usize, holders: bool) -> anyhow::Result<Self> {
        let root = tempfile::tempdir()?;
        let tpl = root.path().join("template");
        std::fs::create_dir(&tpl)?;
        std::fs::write(
            tpl.join("config.json"),
            json!({"secret_store": "file"}).to_string(),
        )?;
        let t = tpl.to_str().context("utf-8 dir")?;
        let (code, _, err) =
            run_with_stdin("tuic-node", &["set-password", "--config-dir", t], PASSWORD)?;
        ensure!(code == 0, "set-password: {err}");
        // One start makes the QUIC certificate every copy presents.
        let mut first = start_node(&tpl, holders)?;
        let health = ipc(&first.socket, "GET", "/health", None).await?.json();
        let fingerprint = health["quic"]["fingerprint"].as_str().map(str::to_owned);
        let (code, token, err) = run_with_stdin("tuic-node", &["token", "--config-dir", t], "")?;
        ensure!(code == 0, "token: {err}");
        first.terminate()?;
        drop(first);
        let dirs: Vec<PathBuf> = (0..n)
            .map(|i| {
                let d = root.path().join(format!("n{i}"));
                copy_dir(&tpl, &d)?;
                anyhow::Ok(d)
            })
            .collect::<anyhow::Result<_>>()?;
        let nodes = start_all(&dirs, holders)?;
        Ok(Self {
            root,
            token: token.trim().to_owned(),
            fingerprint,
            nodes,
            holders,
        })
    }

    /// The connection id of node `i` on the hub.
    pub fn id(i: usize) -> String {
        format!("n{i}")
    }

    /// The hub's config dir (file secret store, IPC only), made on first use.
    pub fn hub_dir(&self) -> anyhow::Result<PathBuf> {
        let d = self.root.path().join("hub");
        if !d.exists() {
            std::fs::create_dir(&d)?;
            std::fs::write(
                d.join("config.json"),
                json!({"secret_store": "file"}).to_string(),
            )?;
        }
        Ok(d)
    }

    /// Saves every node as a connection of the hub whose config dir is `hub_dir` (the
    /// certificate pinned, as `tuic-hub connect` would). A running hub needs
    /// `POST /hub/reload` to apply them.
    pub fn connect_all(&self, hub_dir: &Path) -> anyhow::Result<()> {
        let file = tuic_node::config::ConfigFile::new(hub_dir.join("config.json"));
        let vault = tuic_node::vault::Vault::open(hub_dir, hub_dir.join("secrets.json"), false);
        for (i, node) in self.nodes.iter().enumerate() {
            let addr = node.tcp.context("the node serves no TCP")?;
            tuic_hub::connections::connect(
                &file,
                &vault,
                tuic_hub::connections::ConnectionConfig {
                    id: Self::id(i),
                    url: format!("http://{addr}"),
                    transport: None,
                    quic_fingerprint: self.fingerprint.clone(),
                },
                &self.token,
            )?;
        }
        Ok(())
    }

    /// `tuic-hub` on `hub_dir` (IPC only), ready.
    pub fn start_hub(&self, hub_dir: &Path) -> anyhow::Result<NodeProc> {
        let d = hub_dir.to_str().context("utf-8 dir")?;
        NodeProc::start("tuic-hub", &["--config-dir", d], &self.env())
    }

    /// Starts node `i` again on its config dir and port (after a kill).
    pub fn restart_node(&mut self, i: usize) -> anyhow::Result<()> {
        let port = self.nodes[i].tcp.context("no TCP")?.port().to_string();
        let dir = self.root.path().join(Self::id(i));
        let d = dir.to_str().context("utf-8 dir")?;
        let p = NodeProc::start(
            "tuic-node",
            &[
                "--config-dir",
                d,
                "--remote-access",
                "--port",
                &port,
                "--bind",
                "127.0.0.1",
            ],
            &self.env(),
        )?;
        self.nodes[i] = p;
        Ok(())
    }

    fn env(&self) -> Vec<(&'static str, &'static str)> {
        if self.holders {
            vec![]
        } else {
            vec![("TUIC_NO_HOLDERS", "1")]
        }
    }

    /// `per_node` idle sessions (`sleep`) on every node, a few nodes at a time.
    pub async fn fill(&self, per_node: usize) -> anyhow::Result<()> {
        for chunk in self.nodes.chunks(8) {
            let mut creates = Vec::new();
            for node in chunk {
                for _ in 0..per_node {
                    creates.push(create_idle(&node.socket));
                }
            }
            for r in futures::future::join_all(creates).await {
                r?;
            }
        }
        Ok(())
    }
}

/// One idle session on the node at `socket`; its id.
pub async fn create_idle(socket: &Path) -> anyhow::Result<String> {
    let r = ipc(
        socket,
        "POST",
        "/sessions",
        Some(
            json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp",
            "args": ["-c", "exec sleep 100000"]}),
        ),
    )
    .await?;
    ensure!(r.status == 200, "create: {} {:?}", r.status, r.body);
    r.json()["session_id"]
        .as_str()
        .map(str::to_owned)
        .context("no session_id")
}

fn start_node(dir: &Path, holders: bool) -> anyhow::Result<NodeProc> {
    let d = dir.to_str().context("utf-8 dir")?;
    let env: &[(&str, &str)] = if holders {
        &[]
    } else {
        &[("TUIC_NO_HOLDERS", "1")]
    };
    NodeProc::start(
        "tuic-node",
        &[
            "--config-dir",
            d,
            "--remote-access",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
        ],
        env,
    )
}

/// Starts a node on each of `dirs`, [`STARTS_AT_ONCE`] at a time; in `dirs`' order.
fn start_all(dirs: &[PathBuf], holders: bool) -> anyhow::Result<Vec<NodeProc>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<anyhow::Result<NodeProc>>>> =
        dirs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..STARTS_AT_ONCE {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(d) = dirs.get(i) else { break };
                    *slots[i].lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(start_node(d, holders));
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .context("a node was not started")?
        })
        .collect()
}

/// Copies the regular files and folders of `from` into `to` (sockets and the like are a
/// running process's, not the config's).
fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let t = e.file_type()?;
        let dest = to.join(e.file_name());
        if t.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else if t.is_file() {
            std::fs::copy(e.path(), &dest)?;
        }
    }
    Ok(())
}

/// The hub's `/hub/connections` answer: its rows and its `fds`.
pub async fn hub_connections(hub: &NodeProc) -> anyhow::Result<(Vec<Value>, Value)> {
    let r = ipc(&hub.socket, "GET", "/hub/connections", None).await?;
    if r.status != 200 {
        bail!("GET /hub/connections: {}", r.status);
    }
    let v = r.json();
    Ok((
        v["connections"].as_array().cloned().unwrap_or_default(),
        v["fds"].clone(),
    ))
}

/// Polls the hub (every `every`) until every connection's session and mail links are up, or
/// `limit`; each connection's first instant seen fully up, measured from `t0`, in seconds.
pub async fn wait_all_up(
    hub: &NodeProc,
    n: usize,
    t0: Instant,
    every: Duration,
    limit: Duration,
) -> anyhow::Result<Vec<f64>> {
    let mut first: std::collections::HashMap<String, f64> = Default::default();
    loop {
        let (rows, _) = hub_connections(hub).await?;
        let at = t0.elapsed().as_secs_f64();
        for r in &rows {
            if r["up"] == true && r["peer_link_up"] == true {
                let id = r["id"].as_str().unwrap_or_default().to_owned();
                first.entry(id).or_insert(at);
            }
        }
        if first.len() >= n {
            let mut v: Vec<f64> = first.into_values().collect();
            v.sort_by(f64::total_cmp);
            return Ok(v);
        }
        if t0.elapsed() > limit {
            bail!("{} of {n} connections up after {limit:?}", first.len());
        }
        tokio::time::sleep(every).await;
    }
}

/// Descriptors process `pid` holds open (`/proc/<pid>/fd`).
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

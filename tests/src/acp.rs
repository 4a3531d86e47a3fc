//! The ACP test bed: a node whose config names the SDK test agent (`clients/acp_test_agent.py`,
//! official Python `agent-client-protocol`), a registered repository for its cwd, and a reader
//! of a connection's journal stream.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::term::Ws;
use crate::{NodeProc, clients_dir, config_dir, ipc, sdk_clients};

/// How long a test waits for one frame.
pub const FRAME_WAIT: Duration = Duration::from_secs(60);

/// A node with the test agent configured as `test` and one registered repository.
pub struct Bed {
    /// The config dir (kept for restarts).
    pub dir: tempfile::TempDir,
    /// The registered repository (canonical), holding `notes.txt`.
    pub repo: PathBuf,
    /// Holds the repository.
    pub _repo_dir: tempfile::TempDir,
    /// The node.
    pub node: NodeProc,
}

/// The config keys naming the test agent, plus `acp` tuning.
pub fn agent_config(acp: Value) -> Value {
    let py = sdk_clients().python;
    json!({
        "acp_agents": [{
            "name": "test",
            "command": py,
            "args": [clients_dir().join("acp_test_agent.py").display().to_string()],
        }],
        "acp": acp,
    })
}

/// The flood agent (`clients/acp_flood_agent.py`: the ACP handshake by hand, then a prompt
/// "flood N" answered with N pre-serialized one-character chunks written at once) as an
/// `acp_agents` entry named `flood`.
pub fn flood_agent() -> Value {
    json!({
        "name": "flood",
        "command": sdk_clients().python,
        "args": [clients_dir().join("acp_flood_agent.py").display().to_string()],
    })
}

/// [`agent_config`] with the [`flood_agent`] configured beside the test agent.
pub fn agent_config_with_flood(acp: Value) -> Value {
    let mut cfg = agent_config(acp);
    if let Some(list) = cfg["acp_agents"].as_array_mut() {
        list.push(flood_agent());
    }
    cfg
}

impl Bed {
    /// A node (IPC only) with the test agent and a repository.
    pub async fn start(acp: Value) -> Self {
        let dir = config_dir(agent_config(acp));
        let node = start_node(dir.path(), false);
        Self::with(dir, node).await
    }

    /// A bed on an existing config dir and node.
    pub async fn with(dir: tempfile::TempDir, node: NodeProc) -> Self {
        let repo_dir = tempfile::tempdir().unwrap();
        let repo = std::fs::canonicalize(repo_dir.path()).unwrap().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join("notes.txt"), "hello notes").unwrap();
        let r = ipc(
            &node.socket,
            "POST",
            "/repos",
            Some(json!({"path": repo.display().to_string()})),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        Self {
            dir,
            repo,
            _repo_dir: repo_dir,
            node,
        }
    }

    /// `METHOD path` over the IPC socket: (status, JSON).
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let r = ipc(&self.node.socket, method, path, body).await.unwrap();
        (r.status, r.json())
    }

    /// Launches the test agent in the repository; returns the connection id.
    pub async fn launch(&self) -> String {
        self.launch_agent("test").await
    }

    /// Launches the configured agent `agent` in the repository; returns the connection id.
    pub async fn launch_agent(&self, agent: &str) -> String {
        let (s, v) = self
            .call(
                "POST",
                "/acp/connections",
                Some(json!({"agent": agent, "cwd": self.repo.display().to_string()})),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        v["id"].as_str().unwrap().to_owned()
    }

    /// Sends a text prompt; returns the turn number.
    pub async fn prompt(&self, id: &str, text: &str) -> u64 {
        let (s, v) = self
            .call(
                "POST",
                &format!("/acp/connections/{id}/prompt"),
                Some(json!({"content": [{"type": "text", "text": text}]})),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        v["turn"].as_u64().unwrap()
    }

    /// Opens the connection's stream after `after`.
    pub async fn stream(&self, id: &str, after: u64) -> anyhow::Result<Ws> {
        stream_at(&self.node.socket, id, after).await
    }
}

/// Starts `tuic-node` on `dir` (remote access on loopback when `tcp`).
pub fn start_node(dir: &Path, tcp: bool) -> NodeProc {
    let d = dir.to_str().unwrap();
    let mut args = vec!["--config-dir", d];
    if tcp {
        args.extend(["--remote-access", "--port", "0", "--bind", "127.0.0.1"]);
    }
    NodeProc::start("tuic-node", &args, &[]).expect("node starts")
}

/// Opens `WS /acp/connections/{id}/stream?after=` on a socket.
pub async fn stream_at(socket: &Path, id: &str, after: u64) -> anyhow::Result<Ws> {
    let s = tokio::net::UnixStream::connect(socket).await?;
    let url = format!("ws://localhost/acp/connections/{id}/stream?after={after}");
    Ok(tokio_tungstenite::client_async(url, s).await?.0)
}

/// The next JSON message of a stream (`None` when it closed).
pub async fn next<S>(ws: &mut S) -> anyhow::Result<Option<Value>>
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let m = tokio::time::timeout(FRAME_WAIT, ws.next())
            .await
            .context("no frame in time")?;
        match m {
            None | Some(Ok(Message::Close(_))) => return Ok(None),
            Some(Ok(Message::Text(t))) => return Ok(Some(serde_json::from_str(&t)?)),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
        }
    }
}

/// Frames up to and including the first that satisfies `f`.
pub async fn until<S>(ws: &mut S, f: impl Fn(&Value) -> bool) -> anyhow::Result<Vec<Value>>
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let mut out = Vec::new();
    loop {
        let v = next(ws)
            .await?
            .with_context(|| format!("stream closed; got {out:?}"))?;
        let done = f(&v);
        out.push(v);
        if done {
            return Ok(out);
        }
    }
}

/// Whether `v` is a frame of `kind`.
pub fn is(v: &Value, kind: &str) -> bool {
    v["type"] == kind
}

/// The agent's message text in `frames` (chunks joined).
pub fn said(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| is(f, "update") && f["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|f| f["update"]["content"]["text"].as_str())
        .collect()
}

/// The folder whose `node_modules/.bin` holds the published agents (`codex-acp`,
/// `claude-code-acp`), installed once from npm by `clients/setup.sh`. Blocking.
pub fn published_agents_dir() -> PathBuf {
    let out = std::process::Command::new("bash")
        .arg(clients_dir().join("setup.sh"))
        .output()
        .expect("running tests/clients/setup.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    PathBuf::from(
        text.lines()
            .find_map(|l| l.strip_prefix("ACPDIR="))
            .expect("ACPDIR in setup.sh's output"),
    )
}

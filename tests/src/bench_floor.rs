//! The bare floor of cross-host mail: the same namespaces and veths as [`crate::fed::FedBed`],
//! the same shape (node B's namespace → a relay in the hub's namespace → node C's namespace
//! and back, as many clients as the bench has senders, each with one message in flight), none
//! of tuic's layers: plain TCP with `TCP_NODELAY`, 256-byte messages, a relay that only copies
//! bytes and an echo that answers each message — with `sync`, after writing it to a file and
//! `fdatasync`ing it (one sync per message, no grouping: a floor the mail path can beat by
//! grouping its commits).
//!
//! The three roles are this binary's hidden subcommands (`floor-echo`, `floor-relay`,
//! `floor-client`), started with `ip netns exec` by [`relay_round_trips`] (test
//! `bench_floor.rs` runs a short one in CI, so the floor keeps measuring what it says).

use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::netns::Net;

/// Size of one floor message (a small mail frame).
const MSG: usize = 256;
/// Ports the floor's echo and relay listen on (inside their own namespaces).
const ECHO_PORT: u16 = 7411;
const RELAY_PORT: u16 = 7412;

/// Runs a floor role from the bench's command line: `floor-echo ADDR [SYNC_FILE]`,
/// `floor-relay LISTEN TARGET`, `floor-client TARGET ROUND_TRIPS CLIENTS`. Echo and relay
/// print `ready` once listening and serve until killed; the client prints `rate <per second>`.
pub async fn role(args: &[String]) -> anyhow::Result<()> {
    let arg = |i: usize| {
        args.get(i)
            .with_context(|| format!("floor role: argument {i}"))
    };
    match args.first().map(String::as_str) {
        Some("floor-echo") => {
            let sync = match args.get(2) {
                Some(p) => Some(Arc::new(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .truncate(true)
                        .write(true)
                        .open(p)?,
                )),
                None => None,
            };
            let listener = TcpListener::bind(arg(1)?).await?;
            println!("ready");
            loop {
                let (mut s, _) = listener.accept().await?;
                s.set_nodelay(true)?;
                let sync = sync.clone();
                tokio::spawn(async move {
                    let mut b = [0u8; MSG];
                    while s.read_exact(&mut b).await.is_ok() {
                        if let Some(f) = &sync
                            && (f.write_at(&b, 0).is_err() || f.sync_data().is_err())
                        {
                            return;
                        }
                        if s.write_all(&b).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
        Some("floor-relay") => {
            let listener = TcpListener::bind(arg(1)?).await?;
            let target = arg(2)?.clone();
            println!("ready");
            loop {
                let (mut s, _) = listener.accept().await?;
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(mut up) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let _ = (s.set_nodelay(true), up.set_nodelay(true));
                    let _ = tokio::io::copy_bidirectional(&mut s, &mut up).await;
                });
            }
        }
        Some("floor-client") => {
            let target = arg(1)?.clone();
            let (n, clients): (usize, usize) = (arg(2)?.parse()?, arg(3)?.parse()?);
            let start = Instant::now();
            let mut tasks = Vec::new();
            for _ in 0..clients {
                let target = target.clone();
                tasks.push(tokio::spawn(async move {
                    let mut s = TcpStream::connect(&target).await?;
                    s.set_nodelay(true)?;
                    let (mut out, mut back) = ([7u8; MSG], [0u8; MSG]);
                    for i in 0..n as u64 {
                        out[..8].copy_from_slice(&i.to_le_bytes());
                        s.write_all(&out).await?;
                        s.read_exact(&mut back).await?;
                        anyhow::ensure!(back == out, "round trip {i} came back altered");
                    }
                    anyhow::Ok(())
                }));
            }
            for t in tasks {
                t.await??;
            }
            let secs = start.elapsed().as_secs_f64();
            println!("rate {}", (n * clients) as f64 / secs);
            Ok(())
        }
        other => bail!("not a floor role: {other:?}"),
    }
}

/// A floor role running in a namespace, killed on drop.
struct Role(Child);

impl Role {
    /// Starts `args` in namespace `ns`; with `ready`, waits for its `ready` line.
    fn start(
        ns: &str,
        args: &[&str],
        ready: bool,
    ) -> anyhow::Result<(Self, BufReader<std::process::ChildStdout>)> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(crate::bin("bench"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("ip netns exec (a floor role)")?;
        let mut out = BufReader::new(child.stdout.take().context("stdout")?);
        let role = Self(child);
        if ready {
            let mut line = String::new();
            out.read_line(&mut line)?;
            if line.trim() != "ready" {
                bail!("floor role {args:?} did not start: {line:?}");
            }
        }
        Ok((role, out))
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Round trips per second from `clients` clients in node 0's namespace, each sending `n`
/// messages one at a time through a relay in the hub's namespace to an echo in node 1's
/// namespace; with `sync_file`, the echo `fdatasync`s each message to that file first.
pub fn relay_round_trips(
    net: &Net,
    n: usize,
    clients: usize,
    sync_file: Option<&Path>,
) -> anyhow::Result<f64> {
    let echo_at = format!("{}:{ECHO_PORT}", net.node_addr(1));
    let relay_at = format!("{}:{RELAY_PORT}", net.hub_addr(0));
    let mut echo_args = vec!["floor-echo", echo_at.as_str()];
    let sync = sync_file.map(|p| p.to_string_lossy().into_owned());
    if let Some(p) = &sync {
        echo_args.push(p);
    }
    let _echo = Role::start(net.node(1), &echo_args, true)?;
    let _relay = Role::start(net.hub(), &["floor-relay", &relay_at, &echo_at], true)?;
    let (n, clients) = (n.to_string(), clients.to_string());
    let (mut client, mut out) = Role::start(
        net.node(0),
        &["floor-client", &relay_at, &n, &clients],
        false,
    )?;
    let mut line = String::new();
    out.read_line(&mut line)?;
    let status = client.0.wait()?;
    if !status.success() {
        bail!("floor client failed: {status}");
    }
    line.trim()
        .strip_prefix("rate ")
        .with_context(|| format!("floor client said {line:?}"))?
        .parse()
        .context("floor rate")
}

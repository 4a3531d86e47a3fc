//! `bench attach-keystroke [N]`: single-key round trips through `tuic attach` running in a real
//! PTY (key → outer PTY → tuic → node → `cat` → node → tuic → outer PTY), against the same
//! session's raw WebSocket (the ttyd-like reference: key → WebSocket → node → `cat` → back)
//! and a bare PTY round trip, each directly on node B's socket and through the hub, in one
//! run. Node B and the hub run in network namespaces.

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::SinkExt;
use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::fed::FedBed;
use crate::percentile;
use crate::term::read_until;

const T: Duration = Duration::from_secs(60);

/// Reads until `marker`; bounded by the PTY's own EOF.
fn read_marker(r: &mut dyn Read, marker: &[u8]) -> anyhow::Result<()> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(marker.len()).any(|w| w == marker) {
        let n = r.read(&mut buf)?;
        if n == 0 {
            bail!("eof before {:?}", String::from_utf8_lossy(marker));
        }
        got.extend_from_slice(&buf[..n]);
        if got.len() > 1 << 20 {
            got.drain(..got.len() - 64);
        }
    }
    Ok(())
}

/// `n` round trips through `tuic attach <address>` against `socket`, in an outer PTY.
/// `sentinel` must not be on the session's screen yet; the keys are `a`..`g`, which no escape
/// sequence of the paint contains.
fn attach_round_trips(
    socket: &Path,
    address: &str,
    n: usize,
    sentinel: u8,
) -> anyhow::Result<Vec<f64>> {
    let pair = native_pty_system().openpty(PtySize {
        rows: 24,
        cols: 80,
        pixel_width: 0,
        pixel_height: 0,
    })?;
    let mut cmd = CommandBuilder::new(crate::bin("tuic"));
    cmd.env_remove("TUIC_SOCKET");
    cmd.env("TUIC_SOCKET", socket);
    cmd.args(["attach", address]);
    let mut child = pair.slave.spawn_command(cmd)?;
    drop(pair.slave);
    let mut r = pair.master.try_clone_reader()?;
    let mut w = pair.master.take_writer()?;
    // The painted screen holds the inner READY; the sentinel's echo comes after all of it.
    read_marker(&mut r, b"READY")?;
    w.write_all(&[sentinel])?;
    read_marker(&mut r, &[sentinel])?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let key = [b'a' + (i % 7) as u8];
        let t0 = Instant::now();
        w.write_all(&key)?;
        read_marker(&mut r, &key)?;
        out.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    // Detach: the session stays for the next client.
    w.write_all(b"\x02d")?;
    let deadline = Instant::now() + T;
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("tuic attach did not detach");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(pair.master);
    Ok(out)
}

async fn ws_round_trips(socket: &Path, address: &str, n: usize) -> anyhow::Result<Vec<f64>> {
    let mut ws = crate::bench_fed::ws_at(socket, address, "?binary=1&from_byte=0").await?;
    read_until(&mut ws, b"READY", T).await?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let key = [b'a' + (i % 26) as u8];
        let t0 = Instant::now();
        ws.send(Message::Binary(key.to_vec().into())).await?;
        read_until(&mut ws, &key, T).await?;
        out.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(out)
}

/// A bare PTY running `cat`: the machine's floor for one key round trip (also the floor of
/// `bench keystroke-latency`).
pub fn bare_round_trips(n: usize) -> anyhow::Result<Vec<f64>> {
    let pair = native_pty_system().openpty(PtySize::default())?;
    let mut cmd = CommandBuilder::new("/bin/sh");
    cmd.args(["-c", "stty raw -echo; printf READY; exec cat"]);
    let mut child = pair.slave.spawn_command(cmd)?;
    drop(pair.slave);
    let mut r = pair.master.try_clone_reader()?;
    let mut w = pair.master.take_writer()?;
    read_marker(&mut r, b"READY")?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let key = [b'a' + (i % 26) as u8];
        let t0 = Instant::now();
        w.write_all(&key)?;
        read_marker(&mut r, &key)?;
        out.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let _ = child.kill();
    Ok(out)
}

/// Runs the workload and prints p50/p99 per path and the added latency of attach.
pub async fn keystroke(n: usize) -> anyhow::Result<()> {
    let bed = FedBed::start(1).await?;
    let node_sock = bed.nodes[0].proc().socket.clone();
    let r = crate::ipc(
        &node_sock,
        "POST",
        "/sessions",
        Some(
            json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp",
                    "args": ["-c", "stty raw -echo; printf READY; exec cat"]}),
        ),
    )
    .await?;
    let id = r.json()["session_id"]
        .as_str()
        .context("session_id")?
        .to_owned();
    let remote = format!("{}/{id}", bed.nodes[0].id);
    bed.wait_listed(&remote, T).await?;
    println!(
        "attach-keystroke round trips={n} (key -> [outer PTY -> tuic attach ->] [hub ->] node B -> cat -> back)"
    );
    let mut bare = tokio::task::spawn_blocking(move || bare_round_trips(n)).await??;
    let mut rows = Vec::new();
    for (name, socket, address, sentinel) in [
        ("direct", node_sock.clone(), id.clone(), b'z'),
        (
            "through the hub",
            bed.hub.socket.clone(),
            remote.clone(),
            b'y',
        ),
    ] {
        let mut ws = ws_round_trips(&socket, &address, n).await?;
        let (s, a) = (socket.clone(), address.clone());
        let mut att =
            tokio::task::spawn_blocking(move || attach_round_trips(&s, &a, n, sentinel)).await??;
        let w = (percentile(&mut ws, 0.5), percentile(&mut ws, 0.99));
        let t = (percentile(&mut att, 0.5), percentile(&mut att, 0.99));
        println!(
            "  {name:<16} raw WebSocket  p50 {:.3} ms  p99 {:.3} ms",
            w.0, w.1
        );
        println!(
            "  {name:<16} tuic attach    p50 {:.3} ms  p99 {:.3} ms",
            t.0, t.1
        );
        rows.push((w, t));
    }
    let b = (percentile(&mut bare, 0.5), percentile(&mut bare, 0.99));
    println!(
        "  bare pty (one PTY hop)          p50 {:.3} ms  p99 {:.3} ms",
        b.0, b.1
    );
    let (dw, dt) = rows[0];
    let (hw, ht) = rows[1];
    println!(
        "  attach adds at p50: locally {:+.3} ms over the raw WebSocket (of which the outer PTY hop is ~{:.3} ms); through the hub {:+.3} ms; the hub adds {:+.3} ms to attach vs {:+.3} ms to the raw WebSocket",
        dt.0 - dw.0,
        b.0,
        ht.0 - hw.0,
        ht.0 - dt.0,
        hw.0 - dw.0
    );
    Ok(())
}

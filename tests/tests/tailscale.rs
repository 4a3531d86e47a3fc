//! Tailscale detection against a stand-in tailscaled: a Unix-socket HTTP server answering
//! `GET /localapi/v0/status` with the daemon's JSON shape (no tailscaled runs on CI machines).
//! The real `tuic-node` probes it every 200 ms here; the Host guard follows each change
//! (late start, rename, mute daemon, stop) without a restart.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tuic_tests::{NodeProc, config_dir, ipc, run_with_stdin};

const PASSWORD: &str = "tailnet pass";

#[derive(Clone, Debug)]
enum Daemon {
    Running(&'static str),
    Stopped,
    Mute,
}

fn status_json(backend: &str, dns_name: &str) -> Value {
    let t = "2026-12-02T10:00:00Z";
    json!({
        "Version": "1.80.0",
        "BackendState": backend,
        "AuthURL": "",
        "TailscaleIPs": ["100.101.102.103"],
        "Self": {
            "ID": "n1", "PublicKey": "nodekey:abc", "HostName": "box", "DNSName": dns_name,
            "OS": "linux", "UserID": 1, "TailscaleIPs": ["100.101.102.103"], "Addrs": null,
            "CurAddr": "", "Relay": "fra", "RxBytes": 0, "TxBytes": 0, "Created": t,
            "LastWrite": t, "LastSeen": t, "LastHandshake": t, "Online": true,
            "ExitNode": false, "ExitNodeOption": false, "Active": false, "PeerAPIURL": null,
            "InNetworkMap": true, "InMagicSock": false, "InEngine": false
        },
        "Health": null,
        "CurrentTailnet": {"Name": "t", "MagicDNSSuffix": "tail1.ts.net", "MagicDNSEnabled": true},
        "CertDomains": null,
        "Peer": null,
        "User": null
    })
}

/// Serves the status route from `mode` until dropped; the socket file goes with it.
struct FakeTailscaled {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl FakeTailscaled {
    fn start(path: &Path, mode: Arc<Mutex<Daemon>>) -> Self {
        let listener = tokio::net::UnixListener::bind(path).unwrap();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let mode = mode.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<_>| {
                        let mode = mode.lock().unwrap().clone();
                        async move {
                            assert_eq!(req.uri().path(), "/localapi/v0/status");
                            let body = match mode {
                                Daemon::Running(name) => status_json("Running", name),
                                Daemon::Stopped => status_json("Stopped", ""),
                                Daemon::Mute => std::future::pending().await,
                            };
                            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(
                                body.to_string(),
                            ))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self {
            path: path.to_owned(),
            task,
        }
    }
}

impl Drop for FakeTailscaled {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Status of `GET /config` with `Host: host` and valid credentials (403 = Host refused).
async fn status_with_host(base: &str, host: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{base}/config"))
        .header("host", host)
        .basic_auth("admin", Some(PASSWORD))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Polls `GET /tailscale` until its `state` is `want`; returns the body.
async fn await_state(node: &NodeProc, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = ipc(&node.socket, "GET", "/tailscale", None)
            .await
            .unwrap()
            .json();
        if v["state"] == want {
            return v;
        }
        assert!(Instant::now() < deadline, "state never became {want}: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn host_guard_follows_tailscale_detection_without_restart() {
    let sock_dir = tempfile::tempdir().unwrap();
    let sock = sock_dir.path().join("tailscaled.sock");
    let d = config_dir(json!({
        "tailscale": {"enabled": true, "socket": sock.to_str().unwrap()},
        "tuning": {"tailscale_refresh_ms": 200, "tailscale_probe_ms": 300}
    }));
    let (code, _, err) = run_with_stdin(
        "tuic-node",
        &["set-password", "--config-dir", d.path().to_str().unwrap()],
        &format!("{PASSWORD}\n"),
    )
    .unwrap();
    assert_eq!(code, 0, "{err}");
    let node = NodeProc::start(
        "tuic-node",
        &[
            "--config-dir",
            d.path().to_str().unwrap(),
            "--remote-access",
            "--port",
            "0",
            "--bind",
            "127.0.0.1",
        ],
        &[],
    )
    .unwrap();
    let base = format!("http://{}", node.tcp.unwrap());

    // No daemon yet: absent, and the tailnet name is foreign.
    assert_eq!(await_state(&node, "absent").await["state"], "absent");
    assert_eq!(status_with_host(&base, "box.tail1.ts.net").await, 403);

    // tailscaled starts late: the name becomes trusted without a restart.
    let mode = Arc::new(Mutex::new(Daemon::Running("box.tail1.ts.net.")));
    let fake = FakeTailscaled::start(&sock, mode.clone());
    let v = await_state(&node, "ready").await;
    assert_eq!(v["dns_name"], "box.tail1.ts.net");
    assert_eq!(status_with_host(&base, "box.tail1.ts.net").await, 200);
    assert_eq!(status_with_host(&base, "BOX.tail1.ts.net:443").await, 200);

    // Rename: the old name is refused, the new one accepted.
    *mode.lock().unwrap() = Daemon::Running("renamed.tail1.ts.net.");
    let deadline = Instant::now() + Duration::from_secs(10);
    while ipc(&node.socket, "GET", "/tailscale", None)
        .await
        .unwrap()
        .json()["dns_name"]
        != "renamed.tail1.ts.net"
    {
        assert!(Instant::now() < deadline, "rename never detected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status_with_host(&base, "renamed.tail1.ts.net").await, 200);
    assert_eq!(status_with_host(&base, "box.tail1.ts.net").await, 403);

    // A daemon that stops answering: unavailable within the probe budget, name not trusted.
    *mode.lock().unwrap() = Daemon::Mute;
    let v = await_state(&node, "unavailable").await;
    assert!(v["reason"].as_str().unwrap().contains("300 ms"), "{v}");
    assert_eq!(status_with_host(&base, "renamed.tail1.ts.net").await, 403);

    // Logged out / stopped daemon, then gone entirely.
    *mode.lock().unwrap() = Daemon::Stopped;
    let v = await_state(&node, "stopped").await;
    assert_eq!(v["backend_state"], "Stopped");
    drop(fake);
    await_state(&node, "absent").await;
    assert_eq!(status_with_host(&base, "renamed.tail1.ts.net").await, 403);
    // Ordinary hosts were never affected.
    assert_eq!(status_with_host(&base, "127.0.0.1").await, 200);
}

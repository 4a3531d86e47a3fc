//! A hub short of file descriptors (issue 46's acceptance): run with a soft
//! `RLIMIT_NOFILE` of 256 and 100 nodes on loopback, it refuses the links it has no room for
//! with a logged reason, keeps the links it has, its IPC socket answers `/health` and
//! `tuic ls` throughout, and it never meets `EMFILE`. Given room again, the refused links come
//! up.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Resource, Rlimit, prlimit};
use serde_json::Value;
use tuic_tests::ipc;
use tuic_tests::scale::{ScaleBed, hub_connections};

const NODES: usize = 100;
const LIMIT: u64 = 256;

/// Sets process `pid`'s soft descriptor limit (its hard one, ours, stays: the limit can be
/// given back without privileges).
fn set_soft_limit(pid: u32, soft: u64) {
    let pid = Pid::from_raw(pid as i32).expect("pid");
    let hard = rustix::process::getrlimit(Resource::Nofile).maximum;
    prlimit(
        Some(pid),
        Resource::Nofile,
        Rlimit {
            current: Some(soft),
            maximum: hard,
        },
    )
    .expect("prlimit");
}

/// `/health` over the hub's IPC socket and `tuic ls` against it, over and over until `stop`:
/// each must answer within its bound. Returns how many rounds passed.
async fn probe(socket: std::path::PathBuf, stop: Arc<AtomicBool>, rounds: Arc<AtomicUsize>) {
    while !stop.load(Ordering::Relaxed) {
        let health =
            tokio::time::timeout(Duration::from_secs(5), ipc(&socket, "GET", "/health", None))
                .await
                .expect("/health answers within 5 s")
                .expect("/health answers");
        assert_eq!(health.status, 200, "{:?}", health.body);
        let s = socket.clone();
        let ls = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::task::spawn_blocking(move || {
                std::process::Command::new(tuic_tests::bin("tuic"))
                    .arg("ls")
                    .env("TUIC_SOCKET", &s)
                    .env_remove("TUIC_APP_INSTANCE")
                    .stdin(std::process::Stdio::null())
                    .output()
                    .expect("running tuic ls")
            }),
        )
        .await
        .expect("tuic ls answers within 10 s")
        .unwrap();
        let out = String::from_utf8_lossy(&ls.stdout);
        assert!(
            ls.status.success() && out.contains("HOST"),
            "tuic ls failed: {out} {}",
            String::from_utf8_lossy(&ls.stderr)
        );
        rounds.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn refused(row: &Value) -> bool {
    row["last_error"].as_str().is_some_and(|e| {
        e.starts_with("refusing a new session link") && e.contains("file descriptors in use")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_short_of_descriptors_refuses_new_links_with_a_reason_and_keeps_answering() {
    let bed = ScaleBed::start(NODES, false).await.unwrap();
    let hub_dir = bed.hub_dir().unwrap();
    let hub = bed.start_hub(&hub_dir).unwrap();
    assert!(
        hub.log_text().contains("open-file limit"),
        "the limit is logged at start"
    );
    // Lowered after the start, where the hub raised it: a limit read at each admission.
    set_soft_limit(hub.pid(), LIMIT);
    bed.connect_all(&hub_dir).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let prober = tokio::spawn(probe(hub.socket.clone(), stop.clone(), rounds.clone()));
    let r = ipc(&hub.socket, "POST", "/hub/reload", None).await.unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);

    // Until the links settle: no connection comes up for 3 s, some are refused. A link once
    // up must stay up all along.
    let start = Instant::now();
    let mut ever_up: HashSet<String> = HashSet::new();
    let mut last_change = Instant::now();
    let (rows, fds) = loop {
        let (rows, fds) = hub_connections(&hub).await.unwrap();
        assert_eq!(rows.len(), NODES);
        for r in &rows {
            let id = r["id"].as_str().unwrap().to_owned();
            let up = r["up"] == true;
            if ever_up.contains(&id) {
                assert!(up, "{id} was up and went down under the budget: {r}");
            } else if up {
                ever_up.insert(id);
                last_change = Instant::now();
            }
        }
        let refusals = rows.iter().filter(|r| refused(r)).count();
        if refusals > 0 && last_change.elapsed() > Duration::from_secs(3) {
            break (rows, fds);
        }
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "links never settled: {} up, {refusals} refused",
            ever_up.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let up = rows.iter().filter(|r| r["up"] == true).count();
    let refused_rows: Vec<&Value> = rows.iter().filter(|r| refused(r)).collect();
    assert!(up >= 10, "the hub uses the room it has: {up} up");
    assert_eq!(
        up + refused_rows.len(),
        NODES,
        "every connection is up or refused for want of descriptors: {rows:?}"
    );
    assert_eq!(fds["limit"], LIMIT, "{fds}");
    assert_eq!(fds["reserve"], LIMIT / 8, "{fds}");
    assert!(fds["used"].as_u64().unwrap() < LIMIT, "{fds}");
    assert!(fds["refused_total"].as_u64().unwrap() > 0, "{fds}");
    let metrics = ipc(&hub.socket, "GET", "/metrics", None).await.unwrap();
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    assert!(
        text.lines()
            .any(|l| l == format!("tuic_open_fds_limit {LIMIT}")),
        "{text}"
    );
    let health = ipc(&hub.socket, "GET", "/health", None)
        .await
        .unwrap()
        .json();
    assert_eq!(health["fds"]["limit"], LIMIT, "{health}");

    // `tuic ls` names the reason on each refused host's line.
    let ls = std::process::Command::new(tuic_tests::bin("tuic"))
        .arg("ls")
        .env("TUIC_SOCKET", &hub.socket)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&ls.stdout);
    assert!(
        out.lines()
            .any(|l| l.contains(": offline (refusing a new session link: ")),
        "{out}"
    );

    // Room again: the refused links come up, the others never went down.
    set_soft_limit(hub.pid(), 4096);
    let back = Instant::now();
    loop {
        let (rows, _) = hub_connections(&hub).await.unwrap();
        let down: Vec<&Value> = rows.iter().filter(|r| r["up"] != true).collect();
        for r in &rows {
            if ever_up.contains(r["id"].as_str().unwrap()) {
                assert_eq!(r["up"], true, "{r}");
            }
        }
        if down.is_empty() {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(20),
            "{} links still down with room again: {:?}",
            down.len(),
            down.first()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    prober.await.expect("the IPC socket answered throughout");
    let rounds = rounds.load(Ordering::Relaxed);
    assert!(rounds >= 5, "{rounds} probe rounds");

    let log = hub.log_text();
    assert!(
        log.contains("refusing a new session link"),
        "the refusal is logged with its reason"
    );
    // Logged once per connection per run of refusals, not once per retry.
    let mut per_conn: HashMap<&str, usize> = HashMap::new();
    for l in log
        .lines()
        .filter(|l| l.contains("refusing a new session link"))
    {
        if let Some(id) = l.split_whitespace().find_map(|w| w.strip_prefix("conn=")) {
            *per_conn.entry(id).or_default() += 1;
        }
    }
    assert!(
        per_conn.values().all(|&n| n <= 2),
        "refusals logged per retry: {per_conn:?}"
    );
    for bad in ["Too many open files", "os error 24", "EMFILE"] {
        assert!(
            !log.contains(bad),
            "the hub met EMFILE: {}",
            log.lines().find(|l| l.contains(bad)).unwrap_or_default()
        );
    }
    println!(
        "{up} of {NODES} links up under {LIMIT} descriptors, {} refused; {rounds} probe rounds of /health + tuic ls; all up {:.1} s after the limit was raised",
        refused_rows.len(),
        back.elapsed().as_secs_f64()
    );
}

//! ACP across hosts: a hub and a node in network namespaces. Launched on the node through the
//! hub (`?host=`), listed on the hub with its host, streamed, prompted and answered through the
//! hub; the answer reaches the agent on the node.

use serde_json::json;
use tuic_tests::acp::{agent_config, is, said, stream_at, until};
use tuic_tests::fed::FedBed;
use tuic_tests::ipc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_agent_is_launched_streamed_and_answered_through_the_hub() {
    let bed = FedBed::start_with(1, agent_config(json!({})))
        .await
        .unwrap();
    let node = bed.nodes[0].proc();
    let repo_dir = tempfile::tempdir().unwrap();
    let repo = std::fs::canonicalize(repo_dir.path()).unwrap();
    std::fs::write(repo.join("notes.txt"), "remote notes").unwrap();
    let r = ipc(
        &node.socket,
        "POST",
        "/repos",
        Some(json!({"path": repo.display().to_string()})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    let host = bed.nodes[0].id.clone();
    let hub = &bed.hub.socket;
    let call = |m: &'static str, p: String, b: Option<serde_json::Value>| async move {
        let r = ipc(hub, m, &p, b).await.unwrap();
        (r.status, r.json())
    };
    let (s, v) = call(
        "POST",
        "/acp/connections?host=nowhere".into(),
        Some(json!({"agent": "test", "cwd": repo.display().to_string()})),
    )
    .await;
    assert_eq!(s, 404, "{v}");
    let (s, v) = call(
        "POST",
        format!("/acp/connections?host={host}"),
        Some(json!({"agent": "test", "cwd": repo.display().to_string()})),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let address = v["id"].as_str().unwrap().to_owned();
    assert!(address.starts_with(&format!("{host}/")), "{v}");
    assert_eq!(v["host"], host.as_str());
    let enc = address.replace('/', "%2F");
    let mut ws = stream_at(hub, &enc, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    let (s, rows) = call("GET", "/acp/connections".into(), None).await;
    assert_eq!(s, 200);
    assert_eq!(rows[0]["id"], address.as_str(), "{rows}");
    assert_eq!(rows[0]["host"], host.as_str());
    let (s, v) = call(
        "POST",
        format!("/acp/connections/{enc}/prompt"),
        Some(json!({"content": [{"type": "text", "text": "hello"}]})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let turn = until(&mut ws, |f| is(f, "permission")).await.unwrap();
    let rid = turn.last().unwrap()["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (s, snap) = call("GET", format!("/acp/connections/{enc}"), None).await;
    assert_eq!(s, 200);
    assert_eq!(snap["state"], "needs_you", "{snap}");
    assert_eq!(snap["id"], address.as_str());
    let path = format!("/acp/connections/{enc}/interactions/{rid}");
    let (s, v) = call(
        "POST",
        path.clone(),
        Some(json!({"option_id": "allow", "by": "hub-page"})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = call("POST", path, Some(json!({"option_id": "reject"}))).await;
    assert_eq!(
        (s, v["code"].as_str()),
        (409, Some("already_answered")),
        "{v}"
    );
    let rest = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(said(&rest), "chose:allow");
    assert_eq!(
        std::fs::read_to_string(repo.join("out.txt")).unwrap(),
        "agent wrote: remote notes"
    );

    // The CLI launches on the node through the hub (`tuic acp new -H`) and lists it.
    let sandbox = tempfile::tempdir().unwrap();
    let tuic = |args: &[&str]| {
        let mut c =
            tuic_tests::bridge::clean_command(&tuic_tests::bridge::bin("tuic"), sandbox.path());
        c.args(args)
            .env("TUIC_SOCKET", hub)
            .stdin(std::process::Stdio::null());
        c.output().unwrap()
    };
    let cwd = repo.display().to_string();
    let out = tuic(&["acp", "new", "-H", &host, "--agent", "test", "--cwd", &cwd]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let launched = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(launched.starts_with(&format!("{host}/")), "{launched}");
    let out = tuic(&["acp", "ls"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&launched));
}

//! Stories and workflow runs through a hub: a hub and a node in their own network namespaces;
//! `POST /stories/action` (and the workflow routes) with `host` are answered by that node's
//! story service, unknown and down connections are named, and relaying never raises a
//! caller's authority (an IPC caller of the hub is `local_api` on the node, not `human`).

use std::time::Duration;

use serde_json::{Value, json};
use tuic_tests::fed::FedBed;
use tuic_tests::ipc;

async fn hub_post(bed: &FedBed, path: &str, body: Value) -> (u16, Value) {
    let r = ipc(&bed.hub.socket, "POST", path, Some(body))
        .await
        .unwrap();
    (r.status, r.json())
}

#[tokio::test]
async fn a_hub_routes_story_and_workflow_actions_to_the_owning_node_without_raising_authority() {
    let mut bed = FedBed::start(1).await.unwrap();
    let node = bed.nodes[0].proc();
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path().canonicalize().unwrap();
    let project = root.to_str().unwrap().to_owned();
    let r = ipc(
        &node.socket,
        "POST",
        "/repos",
        Some(json!({"path": project})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    // Created through the hub, stored on the node.
    let (st, v) = hub_post(
        &bed,
        "/stories/action",
        json!({"host": "nodeb", "project_path": project,
               "input": {"action": "create", "title": "Remote story", "acceptance_criteria": ["ok"]}}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["host"], "nodeb");
    let id = v["story"]["id"].as_str().unwrap().to_owned();
    assert_eq!(v["story"]["created_by"]["kind"], "local_api", "{v}");
    let r = ipc(
        &node.socket,
        "POST",
        "/stories/action",
        Some(json!({"project_path": project, "input": {"action": "list"}})),
    )
    .await
    .unwrap();
    let local: Vec<Value> = r.json()["stories"].as_array().unwrap().clone();
    assert_eq!(local.len(), 1);
    assert_eq!(local[0]["id"], id);
    let (st, v) = hub_post(
        &bed,
        "/stories/action",
        json!({"host": "nodeb", "project_path": project, "input": {"action": "list"}}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["stories"][0]["id"], id);
    // The node's own errors come back unchanged (the hub does not know this project).
    let (st, v) = hub_post(
        &bed,
        "/stories/action",
        json!({"host": "nodeb", "project_path": project,
               "input": {"action": "update", "id": id, "expected_revision": 7, "title": "x"}}),
    )
    .await;
    assert_eq!(st, 409, "{v}");
    assert_eq!(v["host"], "nodeb");
    let (st, v) = hub_post(
        &bed,
        "/stories/action",
        json!({"host": "local", "project_path": project, "input": {"action": "list"}}),
    )
    .await;
    assert!(st >= 400, "the hub itself has no such project: {v}");
    assert_eq!(v["host"], "local");

    // Publishing a definition needs a human: the hub's IPC caller is local_api on the node,
    // although the hub's own token would be human there. Nothing is published.
    let def = json!({"action": "publish", "definition_id": "d", "name": "D",
        "steps": [{"id": "s", "agent": {"command": "true"}, "prompt": "p"}]});
    let (st, v) = hub_post(
        &bed,
        "/workflows/definition/action",
        json!({"host": "nodeb", "project_path": project, "input": def}),
    )
    .await;
    assert_eq!(st, 403, "{v}");
    assert!(v["error"].as_str().unwrap().contains("local_api"), "{v}");
    let (st, v) = hub_post(
        &bed,
        "/workflows/definition/action",
        json!({"host": "nodeb", "project_path": project, "input": {"action": "list"}}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["definitions"].as_array().map(Vec::len), Some(0), "{v}");
    let (st, v) = hub_post(
        &bed,
        "/workflows/run/action",
        json!({"host": "nodeb", "project_path": project, "input": {"action": "list"}}),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["host"], "nodeb");

    // Bad hosts are named; nothing reaches a node.
    let (st, v) = hub_post(
        &bed,
        "/stories/action",
        json!({"host": "nowhere", "project_path": project, "input": {"action": "list"}}),
    )
    .await;
    assert_eq!(st, 404, "{v}");
    assert!(v["error"].as_str().unwrap().contains("nowhere"), "{v}");
    let (st, v) = hub_post(
        &bed,
        "/stories/action",
        json!({"host": 7, "project_path": project, "input": {"action": "list"}}),
    )
    .await;
    assert_eq!(st, 400, "{v}");

    // `tuic story --host` over the hub's socket takes the same route.
    let tuic = |args: &[&str]| {
        std::process::Command::new(tuic_tests::bin("tuic"))
            .arg("story")
            .args(args)
            .env("TUIC_SOCKET", &bed.hub.socket)
            .output()
            .unwrap()
    };
    let out = tuic(&[
        r#"{"action":"list"}"#,
        "--host",
        "nodeb",
        "--project",
        &project,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["host"].as_str(), v["stories"][0]["id"].as_str()),
        (Some("nodeb"), Some(id.as_str()))
    );
    let out = tuic(&[
        r#"{"action":"list"}"#,
        "--host",
        "nodeb",
        "--project",
        "relative/dir",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("absolute path"));
    let out = tuic(&[
        r#"{"action":"list"}"#,
        "--host",
        "nowhere",
        "--project",
        &project,
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("404"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The owner down: 503 naming the connection.
    bed.nodes[0].kill9();
    bed.wait_up("nodeb", false, Duration::from_secs(20))
        .await
        .unwrap();
    let (st, v) = hub_post(
        &bed,
        "/stories/action",
        json!({"host": "nodeb", "project_path": project, "input": {"action": "list"}}),
    )
    .await;
    assert_eq!(st, 503, "{v}");
    assert!(v["error"].as_str().unwrap().contains("nodeb"), "{v}");
}

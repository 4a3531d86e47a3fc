//! The extension hooks (`crate::ext`) on a real node, its router called in-process: what an extension
//! installs is what `GET /sessions`, MCP `session` and `repo` serve. The extensions here are
//! test clients of the API (fixed rows, recorded calls); the hub's are tested end to end in
//! `tests/tests/hub*.rs` and `federation_mail.rs`.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use serde_json::Map;

use crate::ext::*;
use crate::guard::Transport;
use crate::logs::LogRing;
use crate::paths::{LocationEnv, Paths};
use crate::state::{Node, RunOverrides};

fn open_node() -> (tempfile::TempDir, Arc<Node>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        json!({"secret_store": "file"}).to_string(),
    )
    .unwrap();
    let paths = Paths::resolve(Some(dir.path()), None, &LocationEnv::default()).unwrap();
    let node = Node::open(
        "tuic-node",
        paths,
        RunOverrides::default(),
        LogRing::default(),
    )
    .unwrap();
    (dir, node)
}

async fn ipc(node: &Arc<Node>, req: Request<Body>) -> (StatusCode, Value) {
    let mut req = req;
    req.extensions_mut().insert(Transport::Ipc);
    let r = crate::routes::router(node.clone())
        .oneshot(req)
        .await
        .unwrap();
    let status = r.status();
    let bytes = r.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// `tools/call` over IPC: `(is_error, the tool's JSON answer)`.
async fn tool(node: &Arc<Node>, name: &str, args: Value) -> (bool, Value) {
    let msg = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
                     "params":{"name":name,"arguments":args}});
    let req = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Body::from(msg.to_string()))
        .unwrap();
    let (status, body) = ipc(node, req).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let text = body["result"]["content"][0]["text"].as_str().unwrap();
    (
        body["result"]["isError"] == true,
        serde_json::from_str(text).unwrap(),
    )
}

fn remote_row(conn: &str, sid: &str) -> RemoteRow {
    RemoteRow {
        connection_id: conn.into(),
        row: json!({"session_id": sid, "cwd": "/w", "state": "done", "tuic_session": "t1"})
            .as_object()
            .cloned()
            .unwrap(),
    }
}

/// An extension with one other host, `nb`, holding one session `s1`; it records what it was
/// asked.
#[derive(Debug, Default)]
struct OneHost {
    sessions: Mutex<Vec<(String, String)>>,
    repos: Mutex<Vec<(String, String, String)>>,
}

impl SessionSource for OneHost {
    fn rows(&self) -> Vec<RemoteRow> {
        vec![remote_row("nb", "s1")]
    }
}

impl HostRouter for OneHost {
    fn session<'a>(&'a self, call: SessionCall<'a>) -> RouteFuture<'a, Result<Routed, ToolError>> {
        self.sessions
            .lock()
            .unwrap()
            .push((call.action.to_owned(), call.address.to_owned()));
        let answer = match call.address.strip_prefix("local/") {
            Some(sid) => {
                let mut a = call.args.clone();
                a.insert("session_id".into(), json!(sid));
                Ok(Routed::Local(a))
            }
            None => Ok(Routed::Answered(json!({"routed": call.address}))),
        };
        Box::pin(std::future::ready(answer))
    }

    fn repo<'a>(&'a self, call: RepoCall<'a>) -> RouteFuture<'a, Result<Value, GitError>> {
        self.repos.lock().unwrap().push((
            call.host.to_owned(),
            call.path.to_owned(),
            call.action.to_owned(),
        ));
        Box::pin(std::future::ready(Err(GitError::Remote {
            connection: call.host.to_owned(),
            code: "unknown_repository",
            message: format!("{}: not registered", call.host),
            status: 404,
        })))
    }

    fn connections(&self) -> Vec<Value> {
        vec![json!({"id": "nb", "up": true})]
    }
}

#[tokio::test]
async fn get_sessions_and_mcp_list_both_list_the_extensions_rows_after_the_nodes_own() {
    let (_dir, node) = open_node();
    // A plain node lists only its own (none here).
    let (s, rows) = ipc(
        &node,
        Request::get("/sessions").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!((s, rows), (StatusCode::OK, json!([])));
    let (err, l) = tool(&node, "session", json!({"action": "list"})).await;
    assert!(!err, "{l}");
    assert_eq!(l["count"], 0, "{l}");

    node.ext.set_session_source(Arc::new(OneHost::default()));
    let want = json!({"session_id": "s1", "cwd": "/w", "state": "done", "tuic_session": "t1",
                      "is_remote": true, "connection_id": "nb", "address": "nb/s1"});
    let (s, rows) = ipc(
        &node,
        Request::get("/sessions").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(rows, json!([want]));
    let (err, l) = tool(&node, "session", json!({"action": "list"})).await;
    assert!(!err, "{l}");
    assert_eq!(l["count"], 1, "{l}");
    assert_eq!(l["sessions"], json!([want]), "{l}");
}

#[tokio::test]
async fn session_calls_to_an_address_go_to_the_router_and_plain_ids_never_do() {
    let (_dir, node) = open_node();
    // No router: an address is served here, and names no session.
    let (err, e) = tool(
        &node,
        "session",
        json!({"action": "output", "session_id": "nb/s1"}),
    )
    .await;
    assert!(err, "{e}");
    assert_eq!(e["code"], "unknown_session", "{e}");
    let (err, e) = tool(&node, "remote", json!({"action": "list"})).await;
    assert!(err, "{e}");
    assert_eq!(e["code"], "not_a_hub", "{e}");

    let ext = Arc::new(OneHost::default());
    node.ext.set_router(ext.clone());
    let (err, v) = tool(
        &node,
        "session",
        json!({"action": "output", "session_id": "nb/s1"}),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v, json!({"routed": "nb/s1"}));
    // `local/<id>` comes back rewritten and is served here (no such session).
    let (err, e) = tool(
        &node,
        "session",
        json!({"action": "status", "session_id": "local/nope"}),
    )
    .await;
    assert!(err, "{e}");
    assert_eq!(e["code"], "unknown_session", "{e}");
    assert!(e["error"].as_str().unwrap().contains("nope"), "{e}");
    // An id without `/` never reaches the router.
    let (err, _) = tool(
        &node,
        "session",
        json!({"action": "status", "session_id": "plain"}),
    )
    .await;
    assert!(err);
    assert_eq!(
        *ext.sessions.lock().unwrap(),
        [
            ("output".to_owned(), "nb/s1".to_owned()),
            ("status".to_owned(), "local/nope".to_owned())
        ]
    );
    let (err, v) = tool(&node, "remote", json!({"action": "list"})).await;
    assert!(!err, "{v}");
    assert_eq!(v, json!({"connections": [{"id": "nb", "up": true}]}));
}

#[tokio::test]
async fn a_host_colon_path_repository_goes_to_the_router_by_mcp_and_rest() {
    let (_dir, node) = open_node();
    // No router: such a path is not absolute here.
    let (err, e) = tool(
        &node,
        "repo",
        json!({"action": "worktree_list", "path": "nb:/r"}),
    )
    .await;
    assert!(err, "{e}");
    assert_eq!(e["code"], "invalid_path", "{e}");

    let ext = Arc::new(OneHost::default());
    node.ext.set_router(ext.clone());
    let (err, e) = tool(
        &node,
        "repo",
        json!({"action": "worktree_list", "path": "nb:/r"}),
    )
    .await;
    assert!(err, "{e}");
    assert_eq!(e["code"], "unknown_repository", "{e}");
    let (s, e) = ipc(
        &node,
        Request::get("/repo/info?path=nb%3A%2Fr")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{e}");
    assert_eq!(
        *ext.repos.lock().unwrap(),
        [
            ("nb".to_owned(), "/r".to_owned(), "worktree_list".to_owned()),
            ("nb".to_owned(), "/r".to_owned(), "info".to_owned())
        ]
    );
}

#[test]
fn a_remote_row_serializes_flat_with_its_address_and_overrides_the_owners_claims() {
    let mut row = remote_row("nb", "s1");
    row.row.insert("is_remote".into(), json!(false));
    row.row.insert("address".into(), json!("x"));
    assert_eq!(row.address(), "nb/s1");
    assert_eq!(
        row.to_value(),
        json!({"session_id": "s1", "cwd": "/w", "state": "done", "tuic_session": "t1",
               "is_remote": true, "connection_id": "nb", "address": "nb/s1"})
    );
    // One object, no repeated key, in the compact text too.
    let text = serde_json::to_string(&row).unwrap();
    assert_eq!(text.matches("\"address\"").count(), 1, "{text}");
}

/// A tool source with one tool, `ext.echo`, answering its arguments back.
#[derive(Debug)]
struct Echo;

impl ToolSource for Echo {
    fn generation(&self) -> u64 {
        1
    }
    fn listings(&self) -> Vec<Value> {
        vec![json!({"name": "ext.echo", "description": "echo", "inputSchema": {"type": "object"}})]
    }
    fn owns(&self, name: &str) -> bool {
        name.starts_with("ext.")
    }
    fn schema(&self, name: &str) -> Result<Value, ToolError> {
        match name {
            "ext.echo" => Ok(self.listings().remove(0)),
            _ => Err(ToolError::new("unknown_tool", format!("no tool {name}"))),
        }
    }
    fn call<'a>(
        &'a self,
        _: &'a Arc<Node>,
        _: &'a CallCtx,
        _: &'a str,
        args: Map<String, Value>,
    ) -> futures::future::BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            Ok(json!({"content": [{"type": "text", "text": Value::Object(args).to_string()}]}))
        })
    }
}

#[tokio::test]
async fn an_extensions_tools_are_listed_after_the_native_ones_and_called_through_the_registry() {
    let (_dir, node) = open_node();
    node.ext.add_tools(Arc::new(Echo));
    let msg = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"});
    let req = Request::post("/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Body::from(msg.to_string()))
        .unwrap();
    let (_, body) = ipc(&node, req).await;
    let names: Vec<&str> = body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    // The extension's tools follow the native ones; the meta-tools close the full list.
    let ext = names
        .iter()
        .position(|n| *n == "ext.echo")
        .expect("ext.echo listed");
    assert_eq!(
        names[ext + 1..],
        ["search_tools", "get_tool_schema", "call_tool"],
        "{names:?}"
    );
    assert_eq!(names[ext - 1], "secret", "{names:?}");
    assert!(names.contains(&"session"), "{names:?}");
    let (err, v) = tool(&node, "ext.echo", json!({"x": 1})).await;
    assert!(!err, "{v}");
    assert_eq!(v, json!({"x": 1}));
}

//! The upstream MCP proxy end to end: a real `tuic-node` proxies real MCP servers — the
//! official Python SDK's `MCPServer` over stdio and over Streamable HTTP, the npm registry's
//! `@modelcontextprotocol/server-everything` over stdio, and a hand-written stdio server that
//! misbehaves on purpose — and an agent built on the official Python SDK client lists and
//! calls their tools through tuic.

mod mcp_support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use mcp_support::{NodeProc, call, get, text, wait_status};
use serde_json::{Value, json};
use tuic_tests::bed::{free_port, npm_everything};

fn clients() -> PathBuf {
    tuic_tests::clients_dir()
}

/// The SDK server over Streamable HTTP on `port`, killed on drop; returns once it accepts.
async fn http_upstream(python: &str, port: u16) -> tokio::process::Child {
    let child = tokio::process::Command::new(python)
        .arg(clients().join("upstream_server.py"))
        .arg("http")
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the HTTP upstream did not listen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child
}

async fn start(config: Value, upstreams: Value) -> NodeProc {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("mcp-upstreams.json"),
        serde_json::to_vec_pretty(&upstreams).unwrap(),
    )
    .unwrap();
    NodeProc::start_in(dir, config).await
}

async fn put(node: &NodeProc, path: &str, body: &Value) -> (u16, Value) {
    let r = node
        .connect()
        .await
        .send(
            "PUT",
            path,
            &[("content-type", "application/json")],
            body.to_string(),
        )
        .await;
    (r.status, r.json())
}

fn upstream<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == name)
        .unwrap_or_else(|| panic!("no upstream {name} in {}", status["upstreams"]))
}

fn is(status: &Value, name: &str, want: &str) -> bool {
    // Before the file is loaded the list is empty: not yet, rather than an error.
    status["upstreams"]
        .as_array()
        .and_then(|a| a.iter().find(|u| u["name"] == name))
        .is_some_and(|u| u["status"] == want)
}

async fn tool_names(node: &NodeProc) -> Vec<String> {
    let r = node
        .connect()
        .await
        .rpc(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            &[],
        )
        .await
        .json();
    r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn stdio(python: &str, script: &str, args: &[&str]) -> Value {
    let mut a = vec![clients().join(script).display().to_string()];
    a.extend(args.iter().map(|s| (*s).to_owned()));
    json!({"type": "stdio", "command": python, "args": a})
}

fn pid_alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')))
}

#[tokio::test]
async fn official_sdk_and_npm_upstreams_are_aggregated_filtered_and_passed_through() {
    let tuic_tests::SdkClients { python, .. } = tuic_tests::sdk_clients();
    let everything = npm_everything();
    let port = free_port();
    let _http = http_upstream(&python, port).await;
    let upstreams = json!({"servers": [
        {"id": "py-1", "name": "py", "transport": stdio(&python, "upstream_server.py", &["stdio"]),
         "tool_filter": {"deny": ["get_secret", "crash", "hang"]}},
        {"id": "remote-1", "name": "remote",
         "transport": {"type": "http", "url": format!("http://127.0.0.1:{port}/mcp")},
         "tool_filter": {"allow": ["add", "echo"]}},
        {"id": "every-1", "name": "every",
         "transport": {"type": "stdio", "command": "node", "args": [everything.display().to_string(), "stdio"]},
         "tool_filter": {"allow": ["echo", "get-sum"]}},
        {"id": "raw-1", "name": "raw", "transport": stdio(&python, "upstream_raw.py", &["ok"])},
    ]});
    let node = start(json!({}), upstreams).await;
    let st = wait_status(
        &node,
        "every upstream ready",
        Duration::from_secs(90),
        |s| {
            ["py", "remote", "every", "raw"]
                .iter()
                .all(|n| is(s, n, "ready"))
        },
    )
    .await;
    assert!(upstream(&st, "remote")["protocol"].is_string(), "{st}");
    assert_eq!(upstream(&st, "every")["tools"], 2, "allow filter: {st}");

    // Listing: namespaced, filtered at listing.
    let names = tool_names(&node).await;
    for want in [
        "session",
        "py__echo",
        "py__add",
        "py__progress_steps",
        "remote__add",
        "every__echo",
        "every__get-sum",
        "raw__rich",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
    }
    for hidden in [
        "py__get_secret",
        "py__crash",
        "remote__get_secret",
        "every__get-env",
    ] {
        assert!(
            !names.iter().any(|n| n == hidden),
            "{hidden} listed: {names:?}"
        );
    }

    // An agent on the official Python SDK lists and calls them through tuic.
    let url = node.tcp_forward().await;
    let calls = json!([
        ["py__echo", {"text": "hello"}],
        ["remote__add", {"a": 2, "b": 40}],
        ["every__get-sum", {"a": 1, "b": 2}],
        ["py__progress_steps", {"steps": 3}],
        ["py__get_secret", {}],
        ["call_tool", {"name": "remote__get_secret", "arguments": {}}],
    ]);
    let out = tokio::process::Command::new(&python)
        .arg(clients().join("upstream_agent.py"))
        .arg(&url)
        .arg(calls.to_string())
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "agent: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    let agent_tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        agent_tools.contains(&"remote__add") && !agent_tools.contains(&"py__get_secret"),
        "{report}"
    );
    let c = &report["calls"];
    assert_eq!(c[0]["text"], "echo: hello", "{report}");
    assert_eq!(
        c[1]["structured"],
        json!({"sum": 42}),
        "structuredContent passes: {report}"
    );
    assert!(
        c[2]["text"].as_str().unwrap().contains('3'),
        "npm server answered: {report}"
    );
    assert_eq!(c[3]["text"], "done 3", "{report}");
    assert_eq!(
        c[3]["progress"].as_array().map(Vec::len),
        Some(3),
        "progress relayed: {report}"
    );
    // Filters at dispatch, direct and through call_tool.
    assert_eq!(c[4]["is_error"], true, "{report}");
    assert!(
        c[4]["text"].as_str().unwrap().contains("tool_filtered"),
        "{report}"
    );
    assert_eq!(c[5]["is_error"], true, "{report}");
    assert!(
        c[5]["text"].as_str().unwrap().contains("tool_filtered"),
        "{report}"
    );

    // The CallToolResult passes through byte for byte, extension fields included.
    let r = call(&node, "raw__rich", json!({})).await;
    assert_eq!(
        r["result"],
        json!({
            "content": [{"type": "text", "text": "rich result", "annotations": {"priority": 0.5}}],
            "structuredContent": {"answer": 42, "nested": {"list": [1, 2, 3]}},
            "isError": true,
            "_meta": {"example.com/trace": "abc"},
            "x-extension": {"kept": true},
        }),
        "{r}"
    );

    // search_tools ranks with BM25 over names, descriptions and parameter names.
    let r = call(
        &node,
        "search_tools",
        json!({"query": "add two numbers sum", "limit": 5}),
    )
    .await;
    let hits: Value = serde_json::from_str(&text(&r)).unwrap();
    let first = hits["tools"][0]["name"].as_str().unwrap();
    assert!(first == "py__add" || first == "remote__add", "{hits}");
    let r = call(&node, "get_tool_schema", json!({"name": "remote__add"})).await;
    let schema: Value = serde_json::from_str(&text(&r)).unwrap();
    assert!(
        schema["inputSchema"]["properties"]["a"].is_object(),
        "{schema}"
    );
    let r = call(&node, "get_tool_schema", json!({"name": "py__get_secret"})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");

    // PUT /mcp/upstreams: a bad save changes nothing; a good one restarts only what changed.
    let before = get(&node, "/mcp/upstreams").await;
    let mut bad = before.clone();
    bad["servers"][0]["name"] = json!("Not Valid");
    let (code, body) = put(
        &node,
        "/mcp/upstreams",
        &json!({"base": before, "config": bad}),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("servers[0].name"),
        "{body}"
    );
    assert_eq!(get(&node, "/mcp/upstreams").await, before);
    let st = get(&node, "/mcp/status").await;
    let (py_pid, every_pid) = (
        upstream(&st, "py")["pid"].clone(),
        upstream(&st, "every")["pid"].clone(),
    );
    let mut edited = before.clone();
    edited["servers"][0]["tool_filter"] = json!({"deny": ["crash", "hang"]});
    let (code, body) = put(
        &node,
        "/mcp/upstreams",
        &json!({"base": before, "config": edited}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let st = wait_status(&node, "py restarted", Duration::from_secs(60), |s| {
        is(s, "py", "ready") && upstream(s, "py")["pid"] != py_pid
    })
    .await;
    assert_eq!(
        upstream(&st, "every")["pid"],
        every_pid,
        "an unchanged upstream keeps running"
    );
    assert!(
        tool_names(&node)
            .await
            .iter()
            .any(|n| n == "py__get_secret")
    );
    assert_eq!(
        text(&call(&node, "py__get_secret", json!({})).await),
        "the secret"
    );

    // The children die with the node.
    let pids: Vec<u64> = ["py", "every", "raw"]
        .iter()
        .map(|n| upstream(&st, n)["pid"].as_u64().unwrap())
        .collect();
    let mut node = node;
    let pid = node.child.id().unwrap() as i32;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    tokio::time::timeout(Duration::from_secs(30), node.child.wait())
        .await
        .unwrap()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| pid_alive(*p)) {
        assert!(
            Instant::now() < deadline,
            "upstream children outlived the node: {pids:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn faulty_upstreams_are_isolated_and_the_breaker_opens_and_recovers() {
    let tuic_tests::SdkClients { python, .. } = tuic_tests::sdk_clients();
    let port = free_port();
    let http = http_upstream(&python, port).await;
    let upstreams = json!({"servers": [
        {"id": "good", "name": "good", "transport": stdio(&python, "upstream_server.py", &["stdio"]), "timeout_secs": 5},
        {"id": "garbage", "name": "garbage", "transport": stdio(&python, "upstream_raw.py", &["garbage"])},
        {"id": "flood", "name": "flood", "transport": stdio(&python, "upstream_raw.py", &["flood"])},
        {"id": "remote", "name": "remote",
         "transport": {"type": "http", "url": format!("http://127.0.0.1:{port}/mcp")}},
    ]});
    // The connect timeout bounds a Python SDK server's start (interpreter + SDK import +
    // initialize) and every health check. 3 s was exceeded on a loaded 2-core machine: `good`
    // then never became ready (each retry starts a fresh, equally slow interpreter) or a
    // timed-out health check overwrote the "exited" error the crash step waits for. 10 s keeps
    // the garbage upstream's breaker (3 timed-out connects) well inside the wait below.
    // `timeout_secs: 5` leaves a loaded machine room for `echo` while `hang` runs out.
    let tuning = json!({"tuning": {
        "upstream_health_interval_ms": 300,
        "upstream_backoff_base_ms": 200,
        "upstream_backoff_max_ms": 800,
        "upstream_connect_timeout_ms": 10_000,
    }});
    let node = start(tuning, upstreams).await;
    let st = wait_status(
        &node,
        "good, flood and remote ready; garbage's breaker open",
        Duration::from_secs(150),
        |s| {
            ["good", "flood", "remote"]
                .iter()
                .all(|n| is(s, n, "ready"))
                && (is(s, "garbage", "circuit_open") || is(s, "garbage", "failed"))
        },
    )
    .await;
    let g = upstream(&st, "garbage");
    assert!(
        g["last_error"].as_str().unwrap().contains("not JSON-RPC"),
        "{g}"
    );
    assert!(
        !tool_names(&node)
            .await
            .iter()
            .any(|n| n.starts_with("garbage__"))
    );
    // Upstream health in `/metrics`: the garbage one down with its failures counted.
    let m = tuic_tests::ipc(&node.socket, "GET", "/metrics", None)
        .await
        .unwrap();
    assert_eq!(m.status, 200);
    let m = String::from_utf8_lossy(&m.body).into_owned();
    let sample = |name: &str| -> f64 {
        m.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing:\n{m}"))
    };
    assert_eq!(sample("tuic_upstream_up{upstream=\"good\"}"), 1.0);
    assert_eq!(sample("tuic_upstream_up{upstream=\"garbage\"}"), 0.0);
    assert!(sample("tuic_upstream_failures{upstream=\"garbage\"}") >= 1.0);
    assert!(sample("tuic_upstream_tools{upstream=\"good\"}") >= 1.0);

    // The flood does not stop its own tools, nor anyone else's.
    assert_eq!(
        text(&call(&node, "flood__ping_me", json!({})).await),
        "pong"
    );
    assert_eq!(
        text(&call(&node, "good__echo", json!({"text": "x"})).await),
        "echo: x"
    );

    // A hang times out as a tool error while other calls go on.
    let hang = call(&node, "good__hang", json!({}));
    let echo = call(&node, "good__echo", json!({"text": "meanwhile"}));
    let (h, e) = tokio::join!(hang, echo);
    assert_eq!(text(&e), "echo: meanwhile");
    assert_eq!(h["result"]["isError"], true, "{h}");
    assert!(text(&h).contains("upstream_timeout"), "{h}");

    // A crash: the call fails, the status names it, the upstream comes back.
    let r = call(&node, "good__crash", json!({}));
    let r = r.await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let st = wait_status(
        &node,
        "good reconnected after the crash",
        Duration::from_secs(60),
        |s| {
            is(s, "good", "ready")
                && upstream(s, "good")["last_error"]
                    .as_str()
                    .is_some_and(|e| e.contains("exited"))
        },
    )
    .await;
    assert!(
        upstream(&st, "good")["last_error"]
            .as_str()
            .unwrap()
            .contains("exit status: 3"),
        "{st}"
    );
    assert_eq!(
        text(&call(&node, "good__echo", json!({"text": "back"})).await),
        "echo: back"
    );

    // The HTTP upstream goes away: health checks fail, the breaker opens, its tools leave
    // the list, the status names the error; it comes back on the same port and recovers.
    drop(http);
    let st = wait_status(
        &node,
        "remote's breaker open",
        Duration::from_secs(60),
        |s| is(s, "remote", "circuit_open") || is(s, "remote", "failed"),
    )
    .await;
    assert!(upstream(&st, "remote")["last_error"].is_string(), "{st}");
    assert!(
        !tool_names(&node)
            .await
            .iter()
            .any(|n| n.starts_with("remote__"))
    );
    let r = call(&node, "remote__add", json!({"a": 1, "b": 1})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(text(&r).contains("upstream_unavailable"), "{r}");
    assert_eq!(
        text(&call(&node, "good__echo", json!({"text": "still"})).await),
        "echo: still"
    );
    let _http = http_upstream(&python, port).await;
    wait_status(&node, "remote recovered", Duration::from_secs(60), |s| {
        is(s, "remote", "ready")
    })
    .await;
    let r = call(&node, "remote__add", json!({"a": 1, "b": 1})).await;
    assert_eq!(r["result"]["structuredContent"], json!({"sum": 2}), "{r}");
}

async fn list_bytes(node: &NodeProc) -> (usize, usize) {
    let r = node
        .connect()
        .await
        .rpc(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            &[],
        )
        .await
        .json();
    let tools = &r["result"]["tools"];
    (tools.as_array().unwrap().len(), tools.to_string().len())
}

/// Spec "Lazy Tool Discovery": at 190 tools the full list costs every turn ~150 KB, the
/// collapsed surface a few KB that do not grow with the upstreams. Measured here, not assumed.
#[tokio::test]
async fn collapsed_surface_stays_flat_while_the_full_list_grows_with_upstream_tools() {
    let tuic_tests::SdkClients { python, .. } = tuic_tests::sdk_clients();
    let many = json!({"servers": [
        {"id": "many", "name": "many", "transport": stdio(&python, "upstream_raw.py", &["many", "180"])},
    ]});
    let node = start(json!({}), many).await;
    wait_status(&node, "many ready", Duration::from_secs(60), |s| {
        is(s, "many", "ready")
    })
    .await;
    let (count, full) = list_bytes(&node).await;
    let bare = start(json!({}), json!({"servers": []})).await;
    let (native, _) = list_bytes(&bare).await;
    assert_eq!(count, native + 180, "{native} native + 180 upstream tools");
    // Collapse through the config save; the surface shrinks to the meta-tools and progress.
    let base = get(&node, "/config").await;
    let mut edited = base.clone();
    edited["collapse_tools"] = json!(true);
    let (code, body) = put(&node, "/config", &json!({"base": base, "config": edited})).await;
    assert_eq!(code, 200, "{body}");
    let (count, collapsed) = list_bytes(&node).await;
    assert_eq!(
        count, 4,
        "search_tools, get_tool_schema, call_tool, progress"
    );
    let empty = start(json!({"collapse_tools": true}), json!({"servers": []})).await;
    let (_, collapsed_without) = list_bytes(&empty).await;
    println!("surface at 190 tools: full {full} bytes, collapsed {collapsed} bytes");
    assert_eq!(
        collapsed, collapsed_without,
        "the collapsed surface does not grow with upstreams"
    );
    assert!(collapsed <= 3_000, "collapsed budget: {collapsed} bytes");
    assert!(
        full >= 40 * collapsed,
        "full {full} vs collapsed {collapsed}"
    );
    // Everything stays reachable through the meta-tools, ranked by BM25.
    let r = call(
        &node,
        "search_tools",
        json!({"query": "kubernetes pod", "limit": 3}),
    )
    .await;
    let hits: Value = serde_json::from_str(&text(&r)).unwrap();
    let top = hits["tools"][0]["name"].as_str().unwrap();
    assert!(
        top.starts_with("many__kubernetes_") && top.contains("pod"),
        "{hits}"
    );
    let r = call(
        &node,
        "call_tool",
        json!({"name": "many__github_list_issue_0", "arguments": {}}),
    )
    .await;
    assert_eq!(text(&r), "pong", "{r}");
}

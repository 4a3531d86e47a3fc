//! The tool surface through the router: filters at listing and dispatch, the config and
//! debug tools, the remote rights table, loopback-only actions and removed-action routes,
//! and identity binding (voice, toast).

use super::*;

#[tokio::test]
async fn filters_apply_at_listing_and_dispatch_and_catalogue_keeps_disabled() {
    let f = fixture(json!({}));
    let a = rpc(
        &f.node,
        json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}),
        &[],
    )
    .await;
    let names: Vec<_> = a.body["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "session",
            "agent",
            "task",
            "remote",
            "repo",
            "story",
            "automations",
            "workflow_run",
            "workflow_report",
            "workflow_launch",
            "workflow_story_create",
            "progress",
            "ui",
            "plugin_dev_guide",
            "voice",
            "secret",
            "search_tools",
            "get_tool_schema",
            "call_tool"
        ]
    );
    let a = rpc(&f.node, call("debug", json!({"action":"logs"})), &[]).await;
    assert_eq!(tool_json(&a)["code"], "disabled");
    let a = rpc(
        &f.node,
        call(
            "call_tool",
            json!({"name":"config","arguments":{"action":"get"}}),
        ),
        &[],
    )
    .await;
    assert_eq!(a.body["result"]["isError"], true);
    let mut r = Request::get("/mcp/status").body(Body::empty()).unwrap();
    r.extensions_mut().insert(Transport::Ipc);
    let s = send(&f.node, r).await;
    let cat = s.body["native_tools"].as_array().unwrap();
    assert_eq!(cat.len(), 18);
    let debug = cat.iter().find(|t| t["name"] == "debug").unwrap();
    assert_eq!(debug["enabled"], false);
    assert!(
        cat.iter()
            .all(|t| t["summary"].as_str().unwrap().chars().count() <= 70)
    );
    let mut r = Request::get("/mcp/instructions")
        .body(Body::empty())
        .unwrap();
    r.extensions_mut().insert(Transport::Ipc);
    let resp = crate::routes::router(f.node.clone())
        .oneshot(r)
        .await
        .unwrap();
    let text = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(text.len() <= crate::mcp::instructions::CLASSIC_BUDGET);
}

#[tokio::test]
async fn enabled_config_and_debug_tools_work_with_redaction() {
    let f = fixture(
        json!({"disabled_native_tools": [], "services": {"auth": {"password_hash": "$2b$secret"}}}),
    );
    let a = rpc(&f.node, call("config", json!({"action":"get"})), &[]).await;
    let cfg = tool_json(&a);
    assert_eq!(cfg["services"]["auth"]["password_hash_exists"], true);
    assert!(!a.body.to_string().contains("$2b$secret"));
    let mut edited = cfg.clone();
    edited["collapse_tools"] = json!(true);
    let a = rpc(
        &f.node,
        call(
            "config",
            json!({"action":"save","base":cfg,"config":edited}),
        ),
        &[],
    )
    .await;
    assert_eq!(a.body["result"]["isError"], false, "{}", a.body);
    assert!(f.node.config().collapse_tools);
    // Remote callers cannot save.
    let mut r = Request::post("/mcp")
        .header("accept", "application/json")
        .body(Body::from(
            call("config", json!({"action":"save","base":{},"config":{}})).to_string(),
        ))
        .unwrap();
    r.extensions_mut().insert(Transport::Tcp {
        peer: "127.0.0.1:5".parse().unwrap(),
    });
    let mut r2 = r;
    r2.headers_mut()
        .insert("host", "localhost".parse().unwrap());
    // Over TCP the boundary wants credentials; the loopback rule is tested on the tool below.
    assert_eq!(send(&f.node, r2).await.status, StatusCode::UNAUTHORIZED);
    let a = rpc(&f.node, call("debug", json!({"action":"help"})), &[]).await;
    assert!(tool_json(&a)["help"].as_str().unwrap().contains("logs"));
}

/// The remote rights table (`mcp::rights`) names every action of every native tool exactly
/// once, and dispatch obeys it: each action is called from a remote caller through the real
/// registry (direct and through `call_tool`), refused with `loopback_only` naming the rule
/// exactly when the table says so. A new action without an entry fails here.
#[tokio::test]
async fn remote_rights_table_covers_every_action_and_dispatch_obeys_it() {
    use crate::mcp::rights::{REMOTE_RIGHTS, Right, remote_right};
    use std::collections::BTreeSet;
    // Every native tool enabled (config is disabled by default), so each one is dispatched.
    let f = fixture(json!({"progress_tracking": true, "disabled_native_tools": []}));
    let remote = crate::mcp::registry::CallCtx::default();
    let reg = &f.node.mcp.registry;
    let mut actions = BTreeSet::new();
    for t in crate::mcp::tools::NATIVE {
        if t.actions.is_empty() {
            actions.insert((t.name, ""));
        }
        for a in t.actions {
            actions.insert((t.name, *a));
        }
    }
    let table: BTreeSet<_> = REMOTE_RIGHTS.iter().map(|(t, a, _)| (*t, *a)).collect();
    assert_eq!(table.len(), REMOTE_RIGHTS.len(), "a pair is listed twice");
    let missing: Vec<_> = actions.difference(&table).collect();
    assert!(
        missing.is_empty(),
        "actions without a remote right: {missing:?}"
    );
    let stale: Vec<_> = table.difference(&actions).collect();
    assert!(stale.is_empty(), "table entries for no action: {stale:?}");
    // An unlisted pair fails closed.
    assert!(matches!(remote_right("session", "teleport"), Right::Local(r) if r.id == "unlisted"));

    for (tool, action, right) in REMOTE_RIGHTS {
        let mut args = serde_json::Map::new();
        if !action.is_empty() {
            args.insert("action".into(), json!(action));
        }
        let direct = reg.call(&f.node, &remote, tool, args.clone());
        let direct = tokio::time::timeout(std::time::Duration::from_secs(20), direct)
            .await
            .unwrap_or_else(|_| panic!("{tool} {action} did not answer"))
            .unwrap()
            .0;
        let meta = reg.call(
            &f.node,
            &remote,
            "call_tool",
            json!({"name": tool, "arguments": args})
                .as_object()
                .unwrap()
                .clone(),
        );
        let meta = tokio::time::timeout(std::time::Duration::from_secs(20), meta)
            .await
            .unwrap_or_else(|_| panic!("{tool} {action} did not answer via call_tool"))
            .unwrap()
            .0;
        for (how, answer) in [("direct", direct), ("call_tool", meta)] {
            match right {
                Right::Local(rule) => {
                    let e = answer
                        .err()
                        .unwrap_or_else(|| panic!("{how}: remote {tool} {action} ran"));
                    assert_eq!(e.code, "loopback_only", "{how}: {tool} {action}: {e:?}");
                    assert!(
                        e.message
                            .starts_with(&format!("loopback-only: {} (", rule.id)),
                        "{how}: {tool} {action}: {}",
                        e.message
                    );
                    assert_eq!(e.extra["rule"], rule.id);
                }
                Right::Open => {
                    if let Err(e) = answer {
                        assert_ne!(e.code, "loopback_only", "{how}: {tool} {action}: {e:?}");
                    }
                }
            }
        }
    }
}

#[tokio::test]
async fn loopback_only_actions_refuse_remote_callers_and_removed_actions_name_routes() {
    let f = fixture(json!({}));
    let remote = crate::mcp::registry::CallCtx::default();
    let local = crate::mcp::registry::CallCtx {
        loopback: true,
        ..Default::default()
    };
    let reg = &f.node.mcp.registry;
    for (tool, action) in [
        ("session", "create"),
        ("session", "submit"),
        ("session", "input"),
        ("session", "kill"),
        ("session", "close"),
        ("session", "pause"),
        ("session", "resume"),
        ("agent", "register"),
        ("agent", "list_peers"),
        ("agent", "send"),
        ("agent", "inbox"),
    ] {
        // A cwd that does not exist: a local create fails validation instead of spawning.
        let args = json!({"action": action, "cwd": "/definitely/not/here"})
            .as_object()
            .unwrap()
            .clone();
        let e = reg
            .call(&f.node, &remote, tool, args.clone())
            .await
            .unwrap()
            .0
            .unwrap_err();
        assert_eq!(e.code, "loopback_only", "{tool} {action}");
        // Locally the action runs (agent list_peers succeeds) or fails for another reason.
        if let Err(e) = reg.call(&f.node, &local, tool, args).await.unwrap().0 {
            assert_ne!(e.code, "loopback_only", "{tool} {action}");
        }
    }
    // Read-only session actions stay open to remote callers.
    let v = reg
        .call(
            &f.node,
            &remote,
            "session",
            json!({"action":"list"}).as_object().unwrap().clone(),
        )
        .await
        .unwrap()
        .0
        .unwrap()
        .into_value();
    assert_eq!(v["count"], 0);
    // Identity-scoped agent actions say the next step when there is no protocol session.
    let e = reg
        .call(
            &f.node,
            &local,
            "agent",
            json!({"action":"inbox"}).as_object().unwrap().clone(),
        )
        .await
        .unwrap()
        .0
        .unwrap_err();
    assert_eq!(e.code, "no_protocol_session");
    assert!(e.message.contains("initialize"));
    for (tool, action, route) in [
        ("agent", "detect", "GET /agents"),
        ("agent", "stats", "GET /stats"),
        ("agent", "metrics", "GET /metrics"),
        ("session", "process_stats", "GET /process/stats"),
        ("repo", "prs", "GET /repo/prs"),
        ("repo", "issues", "GET /repo/issues"),
        ("repo", "close_issue", "POST /repo/issues/close"),
        ("repo", "reopen_issue", "POST /repo/issues/reopen"),
        ("repo", "ci_logs", "GET /repo/ci-failure-logs"),
    ] {
        let e = reg
            .call(
                &f.node,
                &local,
                tool,
                json!({"action":action}).as_object().unwrap().clone(),
            )
            .await
            .unwrap()
            .0
            .unwrap_err();
        assert_eq!(e.code, "removed");
        assert_eq!(e.extra["replacement"], route);
    }
}

/// `x-tuic-session` is a terminal's proof only from this host: a remote caller asserting a
/// live identity is not joined to it (issue 40, finding 1).
#[tokio::test]
async fn a_remote_callers_x_tuic_session_binds_nothing() {
    let f = fixture(json!({}));
    let tuic = "550e8400-e29b-41d4-a716-446655440a02";
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let owner = rpc(&f.node, init.clone(), &[("x-tuic-session", tuic)])
        .await
        .session
        .unwrap();
    // The transport's handler itself, past the request boundary (an authenticated remote).
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("accept", "application/json".parse().unwrap());
    headers.insert("x-tuic-session", tuic.parse().unwrap());
    let r = crate::mcp::transport::post(
        axum::extract::State(f.node.clone()),
        Some(axum::Extension(Transport::Tcp {
            peer: std::net::SocketAddr::from(([192, 0, 2, 7], 50_000)),
        })),
        headers,
        Ok(init.to_string().into()),
    )
    .await;
    let sid = r
        .headers()
        .get("mcp-session-id")
        .expect("a session")
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        f.node.mcp.sessions.owners(tuic).unwrap().sessions,
        vec![owner],
        "the remote caller did not join"
    );
    assert_eq!(
        f.node.mcp.sessions.with(&sid, |s| s.tuic_session.is_none()),
        Some(true)
    );
}

#[tokio::test]
async fn identity_binding_voice_and_toast() {
    let f = fixture(json!({}));
    let tuic = "550e8400-e29b-41d4-a716-446655440a01";
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code","version":"1"}}});
    let a = rpc(&f.node, init.clone(), &[("x-tuic-session", tuic)]).await;
    let s1 = a.session.unwrap();
    let b = rpc(&f.node, init, &[("x-tuic-session", tuic)]).await;
    let s2 = b.session.unwrap();
    let owners = f.node.mcp.sessions.owners(tuic).unwrap();
    assert_eq!(
        owners.sessions,
        vec![s1.clone(), s2.clone()],
        "second bridge joins as sibling"
    );
    let recs = f.node.logs.query(Some("mcp_initialize"), None, 10);
    // The ring is fed by the process's tracing layer, absent in unit tests: the log shape is
    // checked end-to-end instead.
    let _ = recs;
    // voice: bound → available:false with a reason; unbound → refused.
    let a = rpc(
        &f.node,
        call("voice", json!({"action":"status"})),
        &[("mcp-session-id", &s1)],
    )
    .await;
    let v = tool_json(&a);
    assert_eq!(v["available"], false);
    assert!(v["reason"].as_str().unwrap().contains("headless"));
    let a = rpc(&f.node, call("voice", json!({"action":"status"})), &[]).await;
    assert_eq!(tool_json(&a)["code"], "not_bound");
    // toast: dual-emitted on the bus with the resolved sound. This caller's identity owns no
    // PTY, so the toast names no origin session (a guessed id would focus somebody else's
    // terminal) and no origin repository (it registered no project and has no cwd).
    let mut rx = f.node.bus.subscribe();
    let a = rpc(
        &f.node,
        call(
            "ui",
            json!({"action":"toast","message":"hi","level":"warn","sound":true}),
        ),
        &[("mcp-session-id", &s2)],
    )
    .await;
    assert_eq!(tool_json(&a)["sound"], "warning");
    let ev = rx.recv().await.unwrap();
    assert_eq!(ev.event.name(), "mcp-toast");
    let p = ev.event.payload();
    assert_eq!(p["sound"], "warning");
    assert!(p.get("origin_session_id").is_none(), "{p}");
    assert!(p.get("origin_repo_path").is_none(), "{p}");
    let a = rpc(
        &f.node,
        call(
            "ui",
            json!({"action":"toast","message":"hi","sound":"kazoo"}),
        ),
        &[],
    )
    .await;
    assert_eq!(a.body["result"]["isError"], true);
}

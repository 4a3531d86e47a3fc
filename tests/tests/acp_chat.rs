//! End-to-end: an ACP connection's identity in agent mail and MCP, through the real `tuic-node`
//! binary and the Python SDK test agent (`tests/clients/acp_test_agent.py`).
//!
//! `POST /acp/chat/open` registers a terminal-less peer; the agent subscribes to `tuic://inbox`
//! over the MCP server tuic offered it and is told of new mail (`delivery_path`
//! `acp_inbox_resource`). The agent's MCP calls act as the connection's identity, over stdio
//! (`tuic-bridge`) and over HTTP when it advertises `mcpCapabilities.http`. An MCP client
//! answers a held permission request (`session action=answer`); a second answer is refused
//! naming who answered.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::acp::{Bed, agent_config, is, said, start_node, until};
use tuic_tests::agent::Agent;
use tuic_tests::bed::PASSWORD;
use tuic_tests::{config_dir, set_password};

/// Frames until the agent has said `text` (the chunks so far joined end with it).
async fn until_said(ws: &mut tuic_tests::term::Ws, text: &str) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        let batch = until(ws, |f| is(f, "update") || is(f, "turn_end"))
            .await
            .unwrap();
        seen.extend(batch);
        if said(&seen).ends_with(text) {
            return seen;
        }
        assert!(
            !is(seen.last().unwrap(), "turn_end"),
            "the turn ended before {text:?}: {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_peer_has_no_terminal_and_reads_its_mail_through_the_inbox_resource() {
    let bed = Bed::start(json!({})).await;
    let (s, row) = bed
        .call(
            "POST",
            "/acp/chat/open",
            Some(json!({"agent": "test", "name": "chat-one"})),
        )
        .await;
    assert_eq!(s, 201, "{row}");
    assert_eq!(row["chat"], true, "{row}");
    // The cwd defaults to the registered repository.
    assert_eq!(row["cwd"], bed.repo.display().to_string(), "{row}");
    let id = row["id"].as_str().unwrap().to_owned();
    let me = row["tuic_session"].as_str().unwrap().to_owned();
    assert_eq!((me.len(), me.matches('-').count()), (36, 4), "{row}");

    // It is a peer in agent mail at once, named, and owns no PTY.
    let (mut sender, _) = Agent::new(&bed.node.socket, "mail-sender").await;
    let peers = sender.ok(json!({"action": "list_peers"})).await;
    let peer = peers["peers"]
        .as_array()
        .unwrap_or_else(|| panic!("{peers}"))
        .iter()
        .find(|p| p["tuic_session"] == me.as_str())
        .unwrap_or_else(|| panic!("the chat is not a peer: {peers}"))
        .clone();
    assert_eq!(peer["name"], "chat-one", "{peer}");
    assert!(peer.get("session_id").is_none(), "no terminal: {peer}");
    let (_, sessions) = bed.call("GET", "/sessions", None).await;
    assert_eq!(sessions.as_array().unwrap().len(), 0, "{sessions}");

    // Nobody subscribed yet: the mail waits in the inbox.
    let early = sender.send(&me, "before the subscription").await;
    assert_eq!(early["delivery_path"], "inbox_only", "{early}");

    let mut ws = bed.stream(&id, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    bed.prompt(&id, "inbox").await;
    until_said(&mut ws, "subscribed").await;
    let sent = sender.send(&me, "hello chat").await;
    assert_eq!(sent["delivered"], true, "{sent}");
    assert_eq!(sent["delivery_path"], "acp_inbox_resource", "{sent}");
    let turn = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert!(said(&turn).ends_with("inbox:hello chat"), "{turn:?}");

    // The agent's client has gone: later mail is inbox-only again (its stream closes a
    // moment after the turn ends, hence the deadline: a frame's wait, as long as a loaded
    // machine may take to end the agent's MCP client).
    let deadline = Instant::now() + tuic_tests::acp::FRAME_WAIT;
    loop {
        let later = sender.send(&me, "after the subscription").await;
        if later["delivery_path"] == "inbox_only" {
            break;
        }
        assert!(Instant::now() < deadline, "{later}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_open_refuses_an_unknown_agent_an_executable_and_a_missing_repository() {
    let bed = Bed::start(json!({})).await;
    let (s, v) = bed
        .call("POST", "/acp/chat/open", Some(json!({"agent": "nope"})))
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("test"), "{v}");
    // Without an agent it asks for `ego`, which this config does not set.
    let (s, v) = bed.call("POST", "/acp/chat/open", Some(json!({}))).await;
    assert_eq!(s, 400, "{v}");
    assert!(v["error"].as_str().unwrap().contains("ego"), "{v}");
    let (s, v) = bed
        .call(
            "POST",
            "/acp/chat/open",
            Some(json!({"agent": "test", "command": "/bin/sh"})),
        )
        .await;
    assert_eq!(s, 422, "{v}");
    assert!(v["error"].as_str().unwrap().contains("command"), "{v}");
    let (s, v) = bed.call("GET", "/acp/connections", None).await;
    assert_eq!((s, v.as_array().unwrap().len()), (200, 0), "{v}");

    let dir = config_dir(agent_config(json!({})));
    let node = start_node(dir.path(), false);
    let r = tuic_tests::ipc(
        &node.socket,
        "POST",
        "/acp/chat/open",
        Some(json!({"agent": "test"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.json()["error"].as_str().unwrap().contains("POST /repos"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_s_mcp_calls_act_as_the_connection_over_stdio() {
    let bed = Bed::start(json!({})).await;
    let id = bed.launch().await;
    let (_, row) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    let me = row["tuic_session"].as_str().unwrap().to_owned();
    let mut ws = bed.stream(&id, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    bed.prompt(&id, "whoami").await;
    let turn = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(said(&turn), format!("whoami:stdio:{me}"), "{turn:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_advertising_http_gets_tuic_over_http_as_the_connection() {
    let mut cfg = agent_config(json!({}));
    cfg["acp_agents"][0]["env"] = json!({"ACP_TEST_HTTP": "1"});
    let dir = config_dir(cfg);
    set_password(dir.path(), PASSWORD);
    let node = start_node(dir.path(), true);
    let bed = Bed::with(dir, node).await;
    let id = bed.launch().await;
    let (_, row) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    let me = row["tuic_session"].as_str().unwrap().to_owned();
    let mut ws = bed.stream(&id, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    bed.prompt(&id, "whoami").await;
    let turn = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(said(&turn), format!("whoami:http:{me}"), "{turn:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_answers_a_permission_request_and_a_second_answer_names_it() {
    let bed = Bed::start(json!({})).await;
    let id = bed.launch().await;
    let mut ws = bed.stream(&id, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    bed.prompt(&id, "ask").await;
    let turn = until(&mut ws, |f| is(f, "permission")).await.unwrap();
    let rid = turn.last().unwrap()["request_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let (mut mcp, who) = Agent::new(&bed.node.socket, "answerer").await;
    // Refusals first: an unknown connection, an option the request does not offer.
    let (err, v) = mcp
        .tool(
            "session",
            json!({"action": "answer", "session_id": "no-such", "request_id": rid, "option_id": "allow"}),
        )
        .await;
    assert!(err, "{v}");
    assert!(v.to_string().contains("unknown_connection"), "{v}");
    let (err, v) = mcp
        .tool(
            "session",
            json!({"action": "answer", "session_id": id, "request_id": rid, "option_id": "maybe"}),
        )
        .await;
    assert!(err, "{v}");
    assert!(v.to_string().contains("maybe"), "{v}");

    let (err, v) = mcp
        .tool(
            "session",
            json!({"action": "answer", "session_id": id, "request_id": rid, "option_id": "reject"}),
        )
        .await;
    assert!(!err, "{v}");
    assert_eq!(v["option_id"], "reject", "{v}");
    assert_eq!(v["by"], format!("mcp:{who}"), "{v}");
    let turn = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(said(&turn), "chose:reject", "{turn:?}");

    // A second answer, from MCP or from the phone's route, names the first answerer.
    let (err, v) = mcp
        .tool(
            "session",
            json!({"action": "answer", "session_id": id, "request_id": rid, "option_id": "allow"}),
        )
        .await;
    assert!(err, "{v}");
    let text = v.to_string();
    assert!(text.contains("already_answered"), "{v}");
    assert!(text.contains(&format!("mcp:{who}")), "{v}");
    let (s, v) = bed
        .call(
            "POST",
            &format!("/acp/connections/{id}/interactions/{rid}"),
            Some(json!({"option_id": "allow"})),
        )
        .await;
    assert_eq!(s, 409, "{v}");
    assert!(v["error"].as_str().unwrap().contains(&format!("mcp:{who}")));
}

/// The chat's peer row in `list_peers`, if any.
async fn peer_row(sender: &mut Agent, me: &str) -> Option<Value> {
    let peers = sender.ok(json!({"action": "list_peers"})).await;
    peers["peers"]
        .as_array()
        .unwrap_or_else(|| panic!("{peers}"))
        .iter()
        .find(|p| p["tuic_session"] == me)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_chat_retires_its_peer_in_agent_mail() {
    let bed = Bed::start(json!({})).await;
    let (s, row) = bed
        .call(
            "POST",
            "/acp/chat/open",
            Some(json!({"agent": "test", "name": "chat-gone"})),
        )
        .await;
    assert_eq!(s, 201, "{row}");
    let id = row["id"].as_str().unwrap().to_owned();
    let me = row["tuic_session"].as_str().unwrap().to_owned();
    let (mut sender, _) = Agent::new(&bed.node.socket, "mail-sender").await;
    assert!(peer_row(&mut sender, &me).await.is_some());
    let sent = sender.send(&me, "before the delete").await;
    assert_eq!(sent["delivered"], true, "{sent}");

    let (s, v) = bed
        .call("DELETE", &format!("/acp/connections/{id}"), None)
        .await;
    assert_eq!(s, 200, "{v}");
    // Gone from the peers, by identity and by name, and mail to it is refused.
    assert_eq!(peer_row(&mut sender, &me).await, None);
    for to in [me.as_str(), "chat-gone"] {
        let (err, v) = sender
            .call(json!({"action": "send", "to": to, "message": "after the delete"}))
            .await;
        assert!(err, "{v}");
        assert!(v.to_string().contains("unknown_recipient"), "{v}");
    }
    assert!(
        bed.node
            .log_text()
            .contains("retired a peer whose ACP chat was deleted")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_registers_its_chats_again_and_a_reconnected_chat_reads_its_mail() {
    let mut bed = Bed::start(json!({})).await;
    let (s, row) = bed
        .call(
            "POST",
            "/acp/chat/open",
            Some(json!({"agent": "test", "name": "chat-kept"})),
        )
        .await;
    assert_eq!(s, 201, "{row}");
    let id = row["id"].as_str().unwrap().to_owned();
    let me = row["tuic_session"].as_str().unwrap().to_owned();
    let mut ws = bed.stream(&id, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    drop(ws);

    bed.node.terminate().unwrap();
    bed.node = start_node(bed.dir.path(), false);
    let (_, snap) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    assert_eq!(
        (&snap["state"], &snap["chat"], &snap["tuic_session"]),
        (&json!("ended"), &json!(true), &json!(me)),
        "{snap}"
    );
    // Still a peer (the connection exists), named as before and with no terminal; mail to it
    // queues while it is ended.
    let (mut sender, _) = Agent::new(&bed.node.socket, "mail-sender").await;
    let peer = peer_row(&mut sender, &me)
        .await
        .expect("the restored chat is a peer");
    assert_eq!(peer["name"], "chat-kept", "{peer}");
    assert!(peer.get("session_id").is_none(), "no terminal: {peer}");
    let queued = sender.send("chat-kept", "while ended").await;
    assert_eq!(
        (&queued["delivered"], &queued["delivery_path"]),
        (&json!(true), &json!("inbox_only")),
        "{queued}"
    );

    // Reconnected, the agent reads its mail through `tuic://inbox` as the same identity.
    let (s, v) = bed
        .call("POST", &format!("/acp/connections/{id}/reconnect"), None)
        .await;
    assert_eq!(s, 200, "{v}");
    let last = snap["last_seq"].as_u64().unwrap();
    let mut ws = bed.stream(&id, last).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    bed.prompt(&id, "inbox").await;
    until_said(&mut ws, "subscribed").await;
    let sent = sender.send(&me, "after the restart").await;
    assert_eq!(sent["delivery_path"], "acp_inbox_resource", "{sent}");
    let turn = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert!(said(&turn).ends_with("inbox:after the restart"), "{turn:?}");
}

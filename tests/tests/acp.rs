//! End-to-end: ACP connections through the real `tuic-node` binary, driving an agent written
//! with the official Python ACP SDK (`tests/clients/acp_test_agent.py`). A turn streams
//! chunks, a thought, a plan, a tool call with a diff and a permission request with three
//! options; the answer reaches the agent; files are read and written only beneath the cwd; the
//! journal resumes without gaps, stays within its bound, and survives a restart; refusals
//! carry stable codes. Over the IPC socket and over authenticated TCP.

use std::time::Duration;

use serde_json::{Value, json};
use tuic_tests::acp::{Bed, agent_config, agent_config_with_flood, is, said, start_node, until};
use tuic_tests::progress::Events;
use tuic_tests::{config_dir, set_password};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_streams_and_the_phone_s_answer_reaches_the_agent() {
    let bed = Bed::start(json!({})).await;
    let mut events = Events::subscribe(&bed.node.socket, "acp-notice").await;
    let id = bed.launch().await;
    let mut ws = bed.stream(&id, 0).await.unwrap();
    let start = until(&mut ws, |f| is(f, "ready") || is(f, "agent_error"))
        .await
        .unwrap();
    assert!(is(&start[0], "started"), "{start:?}");
    let ready = start.last().unwrap();
    assert!(is(ready, "ready"), "{start:?}");
    assert_eq!(ready["load_session"], true);
    assert!(
        events
            .next_matching("acp-notice", Duration::from_secs(30), |v| v["kind"]
                == "ready"
                && v["connection_id"] == id.as_str())
            .await
            .is_some()
    );

    assert_eq!(bed.prompt(&id, "hello").await, 1);
    let turn = until(&mut ws, |f| is(f, "permission")).await.unwrap();
    assert!(is(&turn[0], "prompt"), "{turn:?}");
    assert_eq!(said(&turn), "Hello from the test agent.");
    let kinds: Vec<&str> = turn
        .iter()
        .filter(|f| is(f, "update"))
        .filter_map(|f| f["update"]["sessionUpdate"].as_str())
        .collect();
    for k in [
        "agent_thought_chunk",
        "plan",
        "tool_call",
        "tool_call_update",
    ] {
        assert!(kinds.contains(&k), "{k} missing in {kinds:?}");
    }
    let diff = turn
        .iter()
        .find(|f| f["update"]["sessionUpdate"] == "tool_call_update")
        .unwrap();
    assert_eq!(diff["update"]["content"][0]["type"], "diff", "{diff}");
    assert_eq!(diff["update"]["content"][0]["newText"], "new line\n");
    let perm = turn.last().unwrap();
    let rid = perm["request_id"].as_str().unwrap().to_owned();
    let options: Vec<&str> = perm["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["option_id"].as_str().unwrap())
        .collect();
    assert_eq!(options, ["allow", "always", "reject"]);
    let notice = events
        .next_matching("acp-notice", Duration::from_secs(30), |v| {
            v["kind"] == "interaction_pending"
        })
        .await
        .unwrap();
    assert_eq!(notice["request_id"], rid.as_str());
    assert_eq!(notice["sequence"], perm["seq"]);
    // The snapshot and the list show the held request; "needs you" is the state.
    let (_, snap) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    assert_eq!(snap["state"], "needs_you", "{snap}");
    assert_eq!(snap["interactions"][0]["request_id"], rid.as_str());
    assert_eq!(snap["plan"].as_array().unwrap().len(), 3);
    let (_, rows) = bed.call("GET", "/acp/connections", None).await;
    assert_eq!(rows[0]["pending"], 1, "{rows}");

    // An option the agent did not offer is bad input; the first real answer wins; a second
    // gets 409 naming who answered.
    let path = format!("/acp/connections/{id}/interactions/{rid}");
    let (s, v) = bed
        .call("POST", &path, Some(json!({"option_id": "sudo"})))
        .await;
    assert_eq!((s, v["code"].as_str()), (400, Some("bad_request")), "{v}");
    let (s, v) = bed
        .call(
            "POST",
            &path,
            Some(json!({"option_id": "always", "by": "phone"})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["state"], "answered");
    let (s, v) = bed
        .call("POST", &path, Some(json!({"option_id": "reject"})))
        .await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["code"], "already_answered");
    assert!(v["error"].as_str().unwrap().contains("phone"), "{v}");

    let rest = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(said(&rest), "chose:always", "{rest:?}");
    assert!(
        rest.iter().any(|f| is(f, "permission_outcome")
            && f["option_id"] == "always"
            && f["by"] == "phone")
    );
    let caps: Vec<(&str, bool)> = rest
        .iter()
        .filter(|f| is(f, "capability"))
        .map(|f| (f["method"].as_str().unwrap(), f["ok"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        caps,
        [("fs/read_text_file", true), ("fs/write_text_file", true)]
    );
    assert_eq!(rest.last().unwrap()["stop_reason"], "end_turn");
    assert_eq!(
        std::fs::read_to_string(bed.repo.join("out.txt")).unwrap(),
        "agent wrote: hello notes"
    );
    let (_, inter) = bed
        .call("GET", &format!("/acp/connections/{id}/interactions"), None)
        .await;
    assert_eq!(inter[0]["state"], "answered", "{inter}");
    let (_, snap) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    assert_eq!(snap["state"], "settled", "{snap}");

    // Resuming from any cursor gives exactly the frames after it: no gap, no repeat (runs of
    // text chunks arrive coalesced into one frame carrying the run's last sequence).
    let live: Vec<Value> = start.iter().chain(&turn).chain(&rest).cloned().collect();
    let seqs: Vec<u64> = live.iter().map(|f| f["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(*seqs.last().unwrap(), snap["last_seq"].as_u64().unwrap());
    let mut replay = bed.stream(&id, 0).await.unwrap();
    let full = until(&mut replay, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(said(&full), said(&live));
    let at = full.len() / 2;
    let mid = full[at]["seq"].as_u64().unwrap();
    let mut again = bed.stream(&id, mid).await.unwrap();
    let tail = until(&mut again, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(tail, full[at + 1..].to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_carry_stable_codes() {
    let bed = Bed::start(json!({})).await;
    let cwd = bed.repo.display().to_string();
    // Unknown connection: 404 on every route that names one; the stream refuses before upgrade.
    let nobody = "00000000-0000-0000-0000-000000000000";
    for (m, p, b) in [
        ("GET", format!("/acp/connections/{nobody}"), None),
        ("DELETE", format!("/acp/connections/{nobody}"), None),
        ("POST", format!("/acp/connections/{nobody}/reconnect"), None),
        (
            "POST",
            format!("/acp/connections/{nobody}/prompt"),
            Some(json!({"content": [{"type": "text", "text": "x"}]})),
        ),
        ("POST", format!("/acp/connections/{nobody}/cancel"), None),
        (
            "GET",
            format!("/acp/connections/{nobody}/interactions"),
            None,
        ),
        (
            "POST",
            format!("/acp/connections/{nobody}/interactions/p1"),
            Some(json!({"option_id": "a"})),
        ),
        ("GET", format!("/acp/connections/{nobody}/stream"), None),
    ] {
        let (s, v) = bed.call(m, &p, b).await;
        assert_eq!(
            (s, v["code"].as_str()),
            (404, Some("unknown_connection")),
            "{m} {p}: {v}"
        );
    }
    // An agent that is not configured: 400 naming the configured ones.
    let (s, v) = bed
        .call(
            "POST",
            "/acp/connections",
            Some(json!({"agent": "claude", "cwd": cwd})),
        )
        .await;
    assert_eq!((s, v["code"].as_str()), (400, Some("unknown_agent")), "{v}");
    assert!(v["error"].as_str().unwrap().contains("\"test\""), "{v}");
    // An executable in the body is refused, never run.
    for extra in ["command", "executable", "args", "env"] {
        let mut body = json!({"agent": "test", "cwd": cwd});
        body[extra] = json!("/bin/sh");
        let (s, v) = bed.call("POST", "/acp/connections", Some(body)).await;
        assert_eq!(
            (s, v["code"].as_str()),
            (422, Some("bad_request")),
            "{extra}: {v}"
        );
        assert!(v["error"].as_str().unwrap().contains(extra), "{v}");
    }
    // A cwd outside every registered repository.
    let (s, v) = bed
        .call(
            "POST",
            "/acp/connections",
            Some(json!({"agent": "test", "cwd": "/tmp"})),
        )
        .await;
    assert_eq!((s, v["code"].as_str()), (403, Some("outside_root")), "{v}");
    let (_, rows) = bed.call("GET", "/acp/connections", None).await;
    assert_eq!(rows, json!([]), "nothing was launched");

    let id = bed.launch().await;
    let mut ws = bed.stream(&id, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    // Content that is not a prompt block; an empty prompt.
    for content in [json!([{"type": "audio_file", "path": "/x"}]), json!([])] {
        let (s, v) = bed
            .call(
                "POST",
                &format!("/acp/connections/{id}/prompt"),
                Some(json!({"content": content})),
            )
            .await;
        assert_eq!((s, v["code"].as_str()), (400, Some("bad_request")), "{v}");
    }
    // An unknown request id; a prompt while a turn runs.
    let (s, v) = bed
        .call(
            "POST",
            &format!("/acp/connections/{id}/interactions/p9-9"),
            Some(json!({"option_id": "allow"})),
        )
        .await;
    assert_eq!(
        (s, v["code"].as_str()),
        (404, Some("unknown_request")),
        "{v}"
    );
    bed.prompt(&id, "ask").await;
    until(&mut ws, |f| is(f, "permission")).await.unwrap();
    let (s, v) = bed
        .call(
            "POST",
            &format!("/acp/connections/{id}/prompt"),
            Some(json!({"content": [{"type": "text", "text": "again"}]})),
        )
        .await;
    assert_eq!((s, v["code"].as_str()), (409, Some("busy")), "{v}");
    // Cancel settles the held request as cancelled; the agent hears `cancelled`.
    let (s, _) = bed
        .call("POST", &format!("/acp/connections/{id}/cancel"), None)
        .await;
    assert_eq!(s, 200);
    let rest = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert!(
        rest.iter().any(|f| is(f, "permission_outcome")
            && f["by"] == "cancel"
            && f["option_id"].is_null()),
        "{rest:?}"
    );
    assert_eq!(said(&rest), "chose:cancelled");
    // Delete forgets it.
    let (s, _) = bed
        .call("DELETE", &format!("/acp/connections/{id}"), None)
        .await;
    assert_eq!(s, 200);
    let (s, _) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    assert_eq!(s, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_requests_outside_the_cwd_are_refused_and_nothing_is_touched() {
    let bed = Bed::start(json!({})).await;
    let outside = bed.repo.parent().unwrap().to_path_buf();
    std::fs::write(outside.join("secret.txt"), "TOPSECRET").unwrap();
    std::os::unix::fs::symlink(&outside, bed.repo.join("link-out")).unwrap();
    let id = bed.launch().await;
    let mut ws = bed.stream(&id, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    bed.prompt(&id, "escape").await;
    let turn = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(said(&turn), "refused:5/5", "{turn:?}");
    let caps: Vec<&Value> = turn.iter().filter(|f| is(f, "capability")).collect();
    assert_eq!(caps.len(), 5);
    assert!(
        caps.iter()
            .all(|c| c["ok"] == false && c["error"].is_string())
    );
    assert!(!outside.join("planted.txt").exists());
    assert!(!turn.iter().any(|f| f.to_string().contains("TOPSECRET")));
    assert!(bed.node.log_text().contains("agent request refused"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_exits_mid_turn_settles_the_turn_and_the_journal_survives_a_restart() {
    let mut bed = Bed::start(json!({})).await;
    let id = bed.launch().await;
    let mut ws = bed.stream(&id, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    bed.prompt(&id, "exit").await;
    let turn = until(&mut ws, |f| is(f, "exit")).await.unwrap();
    let end = turn
        .iter()
        .find(|f| is(f, "turn_end"))
        .expect("turn settled");
    assert_eq!(end["stop_reason"], "agent_exit", "{turn:?}");
    assert_eq!(end["error"], "exited");
    assert_eq!(turn.last().unwrap()["code"], 3);
    assert_eq!(said(&turn), "about to exit");
    let (_, snap) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    assert_eq!(snap["state"], "ended");
    let last = snap["last_seq"].as_u64().unwrap();

    // A restarted node lists it as ended with its history; reconnect loads the session.
    bed.node.terminate().unwrap();
    bed.node = start_node(bed.dir.path(), false);
    let (_, snap) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    assert_eq!(snap["state"], "ended", "{snap}");
    assert_eq!(snap["last_seq"].as_u64().unwrap(), last);
    let mut ws = bed.stream(&id, 0).await.unwrap();
    let history = until(&mut ws, |f| f["seq"].as_u64() == Some(last))
        .await
        .unwrap();
    assert_eq!(said(&history), "about to exit");
    let (s, v) = bed
        .call("POST", &format!("/acp/connections/{id}/reconnect"), None)
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["generation"], 2);
    let back = until(&mut ws, |f| is(f, "ready")).await.unwrap();
    assert_eq!(back.last().unwrap()["loaded"], true, "{back:?}");
    bed.prompt(&id, "still here").await;
    let turn = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(said(&turn), "echo:still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_stays_within_the_bound_and_a_malformed_line_is_survived() {
    const BOUND: u64 = 256 * 1024;
    let dir = config_dir(agent_config_with_flood(json!({"journal_max_bytes": BOUND})));
    let node = start_node(dir.path(), false);
    let bed = Bed::with(dir, node).await;
    let id = bed.launch().await;
    let mut ws = bed.stream(&id, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    bed.prompt(&id, "garbage").await;
    let turn = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(said(&turn), "survived");
    assert!(bed.node.log_text().contains("not JSON"));

    // The flood comes from the flood agent: 100,000 chunks written as fast as it can (the
    // SDK agent serializes each for ~0.6 ms, a minute or more on a loaded machine, which is
    // the agent's time, not the journal's). A slow reader: the stream is opened after the
    // turn, so it reads a backlog.
    let id = bed.launch_agent("flood").await;
    let mut ws = bed.stream(&id, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    drop(ws);
    let mut events = Events::subscribe(&bed.node.socket, "acp-notice").await;
    let turn_no = bed.prompt(&id, "flood 100000").await;
    events
        .next_matching("acp-notice", Duration::from_secs(300), |v| {
            v["kind"] == "settled" && v["connection_id"] == id.as_str()
        })
        .await
        .expect("the flood turn settles");
    let (_, snap) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    assert!(snap["journal_bytes"].as_u64().unwrap() <= BOUND, "{snap}");
    let first = snap["first_seq"].as_u64().unwrap();
    let last = snap["last_seq"].as_u64().unwrap();
    assert!(last > 100_000 && first > 1, "{first}..{last}");
    // A cursor the journal dropped is refused before the upgrade.
    let (s, v) = bed
        .call(
            "GET",
            &format!("/acp/connections/{id}/stream?after=1"),
            None,
        )
        .await;
    assert_eq!(
        (s, v["code"].as_str()),
        (404, Some("cursor_dropped")),
        "{v}"
    );
    let mut ws = bed.stream(&id, first - 1).await.unwrap();
    let frames = until(&mut ws, |f| is(f, "turn_end") && f["turn"] == turn_no)
        .await
        .unwrap();
    assert!(
        (frames.len() as u64) < last - first,
        "coalesced: {} messages for {} frames",
        frames.len(),
        last - first + 1
    );
    let text = said(&frames);
    assert!(
        !text.is_empty() && text.chars().all(|c| c == 'x'),
        "only the flood's chunks: {text:.80}"
    );
    assert_eq!(frames.last().unwrap()["seq"].as_u64().unwrap(), last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_permission_request_times_out_as_cancelled() {
    let bed = Bed::start(json!({"permission_timeout_ms": 300})).await;
    let id = bed.launch().await;
    let mut ws = bed.stream(&id, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    bed.prompt(&id, "ask").await;
    let turn = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert!(
        turn.iter()
            .any(|f| is(f, "permission_outcome") && f["by"] == "timeout")
    );
    assert_eq!(said(&turn), "chose:cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_authenticated_tcp_the_same_routes_work() {
    let dir = config_dir(agent_config(json!({})));
    set_password(dir.path(), "pw");
    let node = start_node(dir.path(), true);
    let tcp = node.tcp.expect("tcp listener");
    let bed = Bed::with(dir, node).await;
    let http = reqwest::Client::new();
    let base = format!("http://{tcp}");
    let r = http
        .post(format!("{base}/acp/connections"))
        .json(&json!({"agent": "test", "cwd": bed.repo.display().to_string()}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "no credentials, no launch");
    let r = http
        .post(format!("{base}/acp/connections"))
        .basic_auth("admin", Some("pw"))
        .json(&json!({"agent": "test", "cwd": bed.repo.display().to_string()}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = format!("ws://{tcp}/acp/connections/{id}/stream?after=0")
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("authorization", "Basic YWRtaW46cHc=".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    let r = http
        .post(format!("{base}/acp/connections/{id}/prompt"))
        .basic_auth("admin", Some("pw"))
        .json(&json!({"content": [{"type": "text", "text": "ask"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let perm = until(&mut ws, |f| is(f, "permission")).await.unwrap();
    let rid = perm.last().unwrap()["request_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = http
        .post(format!("{base}/acp/connections/{id}/interactions/{rid}"))
        .basic_auth("admin", Some("pw"))
        .json(&json!({"option_id": "allow"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let rest = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(said(&rest), "chose:allow");
    assert!(
        rest.iter()
            .any(|f| is(f, "permission_outcome") && f["by"] == "tcp")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_launches_lists_attaches_and_answers() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    use tuic_tests::bridge::{bin, clean_command};
    let bed = Bed::start(json!({})).await;
    let sandbox = tempfile::tempdir().unwrap();
    let socket = bed.node.socket.display().to_string();
    let tuic = |args: &[&str]| {
        let mut c = clean_command(&bin("tuic"), sandbox.path());
        c.args(args)
            .env("TUIC_SOCKET", &socket)
            .stdin(Stdio::null());
        c.output().unwrap()
    };
    let repo = bed.repo.display().to_string();
    let out = tuic(&["acp", "new", "--agent", "test", "--cwd", &repo]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let out = tuic(&["acp", "new", "--agent", "nope", "--cwd", &repo]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("configured agents"));

    // attach: a line-mode chat; a number answers the permission request.
    let mut child = clean_command(&bin("tuic"), sandbox.path())
        .args(["acp", "attach", &id])
        .env("TUIC_SOCKET", &socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let wait_for = |needle: &str| {
        let mut seen = Vec::new();
        loop {
            let l = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("{needle:?} not printed; got {seen:?}"));
            if l.contains(needle) {
                return;
            }
            seen.push(l);
        }
    };
    wait_for("[ready]");
    writeln!(stdin, "ask").unwrap();
    wait_for("3) Reject");
    let out = tuic(&["acp", "ls"]);
    let ls = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(ls.contains(&id) && ls.contains("needs_you"), "{ls}");
    writeln!(stdin, "2").unwrap();
    wait_for("chose:always");
    wait_for("[turn 1 ended: end_turn]");
    // answer from another terminal while attached.
    writeln!(stdin, "ask").unwrap();
    wait_for("3) Reject");
    let out = tuic(&["acp", "answer", &id, "reject"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("chose:reject");
    wait_for("[turn 2 ended: end_turn]");
    let out = tuic(&["acp", "answer", &id, "1"]);
    assert_eq!(out.status.code(), Some(1), "nothing pending");
    writeln!(stdin, "/quit").unwrap();
    assert!(child.wait().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_runs_as_a_tuic_session_and_tuic_is_the_agent_s_mcp_server() {
    let bed = Bed::start(json!({})).await;
    let id = bed.launch().await;
    let mut ws = bed.stream(&id, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    bed.prompt(&id, "run").await;
    let turn = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(said(&turn), "term:4:tuic-terminal-ok", "{turn:?}");
    let cap = turn
        .iter()
        .find(|f| is(f, "capability") && f["method"] == "terminal/create")
        .expect("terminal/create journaled");
    assert_eq!(cap["ok"], true, "{cap}");
    let sid = cap["session_id"].as_str().unwrap();
    // The command ran as a tuic PTY session: its output answers on the session routes.
    let (s, out) = bed
        .call("GET", &format!("/sessions/{sid}/output?format=text"), None)
        .await;
    assert_eq!(s, 200, "{out}");
    assert!(
        out["data"].as_str().unwrap().contains("tuic-terminal-ok"),
        "{out}"
    );

    // tuic offered itself as the agent's MCP server (tuic-bridge over stdio): one tool call.
    bed.prompt(&id, "tools").await;
    let turn = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    assert_eq!(said(&turn), "mcp:tuic:False", "{turn:?}");
}

//! End-to-end tests of notifications against the real `tuic-node`: a question on a real PTY
//! reaches a local HTTP receiver as a Web Push message that a third-party implementation
//! (PyPI `http_ece` + `cryptography`) decrypts and whose VAPID signature it verifies; answering
//! it from the notification types into the PTY and clears it on every channel; ntfy and the
//! signed webhook see the same lifecycle; floods are coalesced, quiet hours suppress, a
//! failing receiver is retried, a hanging one never blocks; bad input is refused.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::receiver::{Hit, Receiver, Reply};
use tuic_tests::{NodeProc, config_dir, ipc, sdk_clients};

fn start(d: &Path) -> NodeProc {
    NodeProc::start("tuic-node", &["--config-dir", d.to_str().unwrap()], &[]).unwrap()
}

/// A git repository `demo-repo` on branch `feature-x` (real `git`).
fn repo(parent: &Path) -> std::path::PathBuf {
    let r = parent.join("demo-repo");
    std::fs::create_dir_all(&r).unwrap();
    let ok = std::process::Command::new("git")
        .args(["init", "-q", "-b", "feature-x"])
        .current_dir(&r)
        .status()
        .unwrap();
    assert!(ok.success());
    r
}

/// A session running `script` in `cwd`; returns (id, alias).
async fn session(node: &NodeProc, script: &str, cwd: &Path) -> (String, String) {
    let r = ipc(
        &node.socket,
        "POST",
        "/sessions",
        Some(json!({"shell": "sh", "args": ["-c", script], "cwd": cwd.display().to_string()})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let id = v["session_id"].as_str().unwrap().to_owned();
    // The alias is assigned right after creation.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let s = ipc(&node.socket, "GET", &format!("/sessions/{id}"), None)
            .await
            .unwrap()
            .json();
        if let Some(a) = s["alias"].as_str().or(v["alias"].as_str()) {
            return (id, a.to_owned());
        }
        assert!(Instant::now() < deadline, "no alias: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Answers notification `id` with `choice` through the node's REST route.
async fn answer(node: &NodeProc, id: u64, choice: u64) -> tuic_tests::Reply {
    ipc(
        &node.socket,
        "POST",
        &format!("/notifications/{id}/answer"),
        Some(json!({ "choice": choice })),
    )
    .await
    .unwrap()
}

/// Subscribes the Web Push `endpoint` with the receiver's `keys` (`p256dh`, `auth`).
async fn subscribe(node: &NodeProc, endpoint: &str, keys: &Value) -> tuic_tests::Reply {
    ipc(
        &node.socket,
        "POST",
        "/notifications/subscriptions",
        Some(
            json!({"endpoint": endpoint, "keys": {"p256dh": keys["p256dh"], "auth": keys["auth"]}}),
        ),
    )
    .await
    .unwrap()
}

async fn notifications(node: &NodeProc) -> Vec<Value> {
    let v = ipc(&node.socket, "GET", "/notifications", None)
        .await
        .unwrap()
        .json();
    v["notifications"].as_array().cloned().unwrap_or_default()
}

/// Polls `/notifications` until `pred` holds for one record; returns it.
async fn until_record(node: &NodeProc, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let list = notifications(node).await;
        if let Some(r) = list.iter().find(|r| pred(r)) {
            return r.clone();
        }
        assert!(Instant::now() < deadline, "{what}: {list:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_file(path: &Path, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = std::fs::read_to_string(path).unwrap_or_default();
        if got.contains(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} has {got:?}, not {want:?}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn python(args: &[&str], stdin: Option<Value>) -> Value {
    let py = sdk_clients().python;
    let script = tuic_tests::clients_dir().join("webpush_check.py");
    let mut cmd = std::process::Command::new(py);
    cmd.arg(script).args(args);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        let mut i = child.stdin.take().unwrap();
        if let Some(v) = stdin {
            i.write_all(v.to_string().as_bytes()).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Decrypts one push request with the subscription's private half (third-party code).
fn decrypt(keys: &Value, hit: &Hit, aud: &str) -> (Value, Value) {
    use base64::Engine as _;
    let v = python(
        &["decrypt"],
        Some(json!({
            "private": keys["private"], "auth": keys["auth"],
            "body_b64": base64::engine::general_purpose::STANDARD.encode(&hit.body),
            "authorization": hit.header("authorization"), "aud": aud,
        })),
    );
    let plain: Value = serde_json::from_str(v["plaintext"].as_str().unwrap()).unwrap();
    (plain, v["vapid"].clone())
}

const QUESTION: &str = "Overwrite notes.txt? (y/n)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_reaches_web_push_decrypted_by_http_ece_and_clears_when_answered() {
    let keys = python(&["keys"], None);
    let mut rx = Receiver::start().await;
    let d = config_dir(json!({"notifications": {
        "web_push": {"subject": "mailto:ops@example.net"},
        "clear_grace_ms": 300,
    }}));
    let node = start(d.path());
    let endpoint = rx.url("/push/device-1");
    let r = subscribe(&node, &endpoint, &keys).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let vapid = ipc(&node.socket, "GET", "/notifications/vapid", None)
        .await
        .unwrap()
        .json();

    let work = tempfile::tempdir().unwrap();
    let cwd = repo(work.path());
    let out = work.path().join("answer.txt");
    let script = format!(
        "printf '{QUESTION} '; read a; echo \"answer=$a\" > {}; sleep 60",
        out.display()
    );
    let (sid, alias) = session(&node, &script, &cwd).await;

    // Shown: one encrypted POST that http_ece decrypts, signed with the node's VAPID key.
    let hit = rx.next("/push/device-1", Duration::from_secs(15)).await;
    assert_eq!(hit.method, "POST");
    assert_eq!(hit.header("content-encoding"), "aes128gcm");
    assert_eq!(hit.header("urgency"), "high");
    assert!(hit.header("ttl").parse::<u64>().unwrap() > 0);
    let (msg, jwt) = decrypt(&keys, &hit, &format!("http://{}", rx.addr));
    assert_eq!(jwt["ok"], true, "{jwt}");
    assert_eq!(jwt["k"], vapid["public_key"]);
    assert_eq!(jwt["claims"]["sub"], "mailto:ops@example.net");
    let exp = jwt["claims"]["exp"].as_u64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(exp > now && exp <= now + 24 * 3600, "exp {exp}");
    let host = ipc(&node.socket, "GET", "/health", None)
        .await
        .unwrap()
        .json()["host_name"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(msg["op"], "show");
    assert_eq!(msg["title"], format!("{alias} needs input"));
    assert_eq!(
        msg["body"],
        format!("{host} · demo-repo@feature-x · {alias}\n{QUESTION}")
    );
    assert_eq!(msg["tag"], format!("tuic-{sid}"));
    assert_eq!(msg["url"], format!("/#/s/{alias}"));
    assert_eq!(
        msg["actions"],
        json!([{"action": "1", "title": "Yes"}, {"action": "2", "title": "No"}])
    );
    let id = msg["id"].as_u64().unwrap();

    // Listed with its delivery state.
    let rec = until_record(&node, "web push delivered", |r| {
        r["id"] == id && r["deliveries"]["web_push"]["state"] == "sent"
    })
    .await;
    assert_eq!(rec["state"], "pending");
    assert_eq!(rec["kind"], "question");
    assert_eq!(rec["session"], alias.as_str());
    assert_eq!(rec["repo"], "demo-repo");
    assert_eq!(rec["branch"], "feature-x");
    assert_eq!(rec["text"], QUESTION);

    // Answered from the notification's action: the bytes reach the PTY.
    let r = answer(&node, id, 1).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    wait_file(&out, "answer=y").await;

    // Then cleared on the channel: a "clear" message for the same id and tag.
    let hit = rx.next("/push/device-1", Duration::from_secs(15)).await;
    let (msg, jwt) = decrypt(&keys, &hit, &format!("http://{}", rx.addr));
    assert_eq!(jwt["ok"], true);
    assert_eq!(
        msg,
        json!({"op": "clear", "id": id, "tag": format!("tuic-{sid}")})
    );
    let rec = until_record(&node, "cleared", |r| r["id"] == id && r["cleared"] == true).await;
    assert_eq!(rec["state"], "cleared");

    // Once: nothing else was pushed for it, and a second answer is refused.
    let more = rx.drain(Duration::from_millis(800)).await;
    assert!(more.is_empty(), "{more:?}");
    let r = answer(&node, id, 1).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["code"], "already_answered");
}

/// Checks `X-Tuic-Signature` with Python's own `hmac` (not our code).
fn webhook_signature_ok(key: &str, hit: &Hit) -> bool {
    let check = "import hmac, hashlib, sys\n\
                 key, ts, sig = sys.argv[1:4]\n\
                 body = sys.stdin.buffer.read()\n\
                 want = 'sha256=' + hmac.new(key.encode(), ts.encode() + b'.' + body, hashlib.sha256).hexdigest()\n\
                 print(hmac.compare_digest(want, sig))";
    let mut child = std::process::Command::new("python3")
        .args([
            "-c",
            check,
            key,
            &hit.header("x-tuic-timestamp"),
            &hit.header("x-tuic-signature"),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&hit.body).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "True"
}

fn hook_json(hit: &Hit) -> Value {
    serde_json::from_slice(&hit.body).unwrap()
}

/// Webhook requests about sessions `sid` (by the record's `session_id`).
fn about<'a>(hits: &'a [Hit], sid: &str) -> Vec<&'a Hit> {
    hits.iter()
        .filter(|h| hook_json(h)["notification"]["session_id"] == sid)
        .collect()
}

/// How long a keystroke takes to reach a program on a PTY: the program creates a file named
/// after each line it reads.
async fn keystroke_ms(node: &NodeProc, sid: &str, dir: &Path, token: &str) -> u128 {
    let t = Instant::now();
    let r = ipc(
        &node.socket,
        "POST",
        &format!("/sessions/{sid}/input"),
        Some(json!({"input": format!("{token}\n")})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let f = dir.join(token);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f.exists() {
        assert!(Instant::now() < deadline, "keystroke {token} never arrived");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    t.elapsed().as_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ntfy_and_webhook_see_show_clear_flood_quiet_retry_and_a_hang_that_blocks_nothing() {
    let mut ntfy = Receiver::start().await;
    let mut hook = Receiver::start().await;
    let d = config_dir(json!({"notifications": {
        "coalesce_ms": 3000,
        "clear_grace_ms": 200,
        "public_url": "https://box.example.net:9876",
        "ntfy": {"url": ntfy.url("/ntfy/tuic-alerts"), "tags": ["robot"]},
        "webhook": {"url": hook.url("/hook")},
        "delivery": {"attempts": 3, "backoff_ms": 100, "timeout_ms": 400},
    }}));
    let node = start(d.path());
    let key = ipc(&node.socket, "GET", "/notifications/webhook-key", None)
        .await
        .unwrap()
        .json()["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let host = ipc(&node.socket, "GET", "/health", None)
        .await
        .unwrap()
        .json()["host_name"]
        .as_str()
        .unwrap()
        .to_owned();
    let work = tempfile::tempdir().unwrap();
    let cwd = repo(work.path());

    // A question: ntfy gets its documented headers; the webhook answers 500 once, is retried,
    // and is delivered once, signed.
    hook.script.lock().unwrap().push_back(Reply::Status(500));
    let (sid, alias) = session(
        &node,
        &format!("printf '{QUESTION} '; read a; sleep 60"),
        &cwd,
    )
    .await;
    let n = ntfy
        .next("/ntfy/tuic-alerts", Duration::from_secs(15))
        .await;
    assert_eq!(n.method, "POST");
    assert_eq!(n.header("x-title"), format!("{alias} needs input"));
    assert_eq!(n.header("x-priority"), "4");
    assert_eq!(n.header("x-tags"), "robot,question");
    let seq = n.header("x-sequence-id");
    assert!(seq.starts_with("tuic-"), "{seq}");
    let click = format!("https://box.example.net:9876/#/s/{alias}");
    assert_eq!(n.header("x-click"), click);
    // Two choices: ntfy `http` actions that answer (their tokens: see
    // `ntfy_action_buttons_answer_once_with_a_token_scoped_to_their_question`).
    let actions = n.header("x-actions");
    assert!(
        actions.starts_with("http, Yes, https://box.example.net:9876/notifications/answer/")
            && actions.contains("/1, method=POST, clear=true; http, No, "),
        "{actions}"
    );
    assert_eq!(
        String::from_utf8_lossy(&n.body),
        format!("{host} · demo-repo@feature-x · {alias}\n{QUESTION}")
    );
    let first = hook.next("/hook", Duration::from_secs(5)).await;
    let second = hook.next("/hook", Duration::from_secs(5)).await;
    assert_eq!(first.body, second.body, "a retry sends the same event");
    assert!(
        webhook_signature_ok(&key, &second),
        "signature does not verify"
    );
    assert!(!webhook_signature_ok("wrong key", &second));
    let ev = hook_json(&second);
    assert_eq!(ev["event"], "notification");
    assert_eq!(ev["notification"]["text"], QUESTION);
    assert_eq!(ev["notification"]["session"], alias.as_str());
    assert_eq!(ev["notification"]["host"], host.as_str());
    assert_eq!(ev["notification"]["url"], click);
    assert_eq!(
        ev["notification"]["choices"],
        json!([{"label": "Yes"}, {"label": "No"}])
    );
    let id = ev["notification"]["id"].as_u64().unwrap();
    assert_eq!(seq, format!("tuic-{id}"));
    let rec = until_record(&node, "webhook delivered on the 2nd attempt", |r| {
        r["id"] == id && r["deliveries"]["webhook"]["state"] == "sent"
    })
    .await;
    assert_eq!(rec["deliveries"]["webhook"]["attempts"], 2);
    assert_eq!(rec["deliveries"]["ntfy"]["state"], "sent");

    // Answered (choice 2 types `n`): cleared on both.
    let r = answer(&node, id, 2).await;
    assert_eq!(r.status, 200);
    let c = ntfy
        .next("/ntfy/tuic-alerts", Duration::from_secs(10))
        .await;
    assert_eq!(
        (c.method.as_str(), c.path.as_str()),
        ("PUT", format!("/ntfy/tuic-alerts/tuic-{id}/clear").as_str())
    );
    let c = hook.next("/hook", Duration::from_secs(10)).await;
    assert!(webhook_signature_ok(&key, &c));
    assert_eq!(hook_json(&c)["event"], "cleared");
    assert_eq!(hook_json(&c)["notification"]["id"], id);

    // A flood: eight questions in under three seconds on one session (as fast as the PTY
    // monitor tells them apart; the 100-in-a-second case is the core's unit test) → one
    // notification now, one more when the interval ends carrying the count of the rest.
    let flood = "for i in $(seq 1 8); do printf '\\nstep %s: continue? (y/n) ' $i; sleep 0.35; done; sleep 60";
    let (fsid, _) = session(&node, flood, &cwd).await;
    let hits = hook.drain(Duration::from_millis(5500)).await;
    let shown: Vec<Value> = about(&hits, &fsid)
        .into_iter()
        .map(hook_json)
        .filter(|e| e["event"] == "notification")
        .collect();
    assert_eq!(
        shown.len(),
        2,
        "{shown:#?} {:#?}",
        notifications(&node)
            .await
            .into_iter()
            .filter(|r| r["session_id"] == fsid.as_str())
            .collect::<Vec<_>>()
    );
    assert_eq!(shown[0]["notification"]["count"], 1);
    let recs: Vec<Value> = notifications(&node)
        .await
        .into_iter()
        .filter(|r| r["session_id"] == fsid.as_str())
        .collect();
    assert!(recs.len() >= 3, "the monitor saw {} questions", recs.len());
    assert_eq!(
        shown[1]["notification"]["count"],
        recs.len() as u64 - 1,
        "{recs:#?}"
    );
    assert_eq!(
        recs.iter().filter(|r| r["state"] == "coalesced").count(),
        recs.len() - 2,
        "all but the two sent are coalesced"
    );

    // Quiet hours (the hour around now, UTC): recorded as suppressed, nothing sent.
    let cfg = ipc(&node.socket, "GET", "/config", None)
        .await
        .unwrap()
        .json();
    let mut next = cfg.clone();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let hm = |t: u64| format!("{:02}:{:02}", (t / 3600) % 24, (t / 60) % 60);
    next["notifications"]["quiet_hours"] = json!({"from": hm(now - 3600), "to": hm(now + 3600)});
    let r = ipc(
        &node.socket,
        "PUT",
        "/config",
        Some(json!({"base": cfg, "config": next})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let (qsid, _) = session(
        &node,
        &format!("printf '{QUESTION} '; read a; sleep 60"),
        &cwd,
    )
    .await;
    let rec = until_record(&node, "suppressed", |r| r["session_id"] == qsid.as_str()).await;
    assert_eq!(rec["state"], "suppressed");
    let hits = hook.drain(Duration::from_millis(800)).await;
    assert!(about(&hits, &qsid).is_empty());
    let late = ntfy.drain(Duration::from_millis(10)).await;
    assert!(
        late.iter()
            .all(|h| !String::from_utf8_lossy(&h.body).contains(&qsid))
    );
    let r = ipc(
        &node.socket,
        "PUT",
        "/config",
        Some(json!({"base": next, "config": cfg})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);

    // A webhook that hangs: bounded by the deadline, retried, recorded as failed; ntfy and a
    // session's keystrokes are not slowed meanwhile.
    let keys_dir = tempfile::tempdir().unwrap();
    let (ksid, _) = session(
        &node,
        &format!(
            "cd {}; while read l; do touch \"$l\"; done",
            keys_dir.path().display()
        ),
        &cwd,
    )
    .await;
    let mut before = Vec::new();
    for i in 0..5 {
        before.push(keystroke_ms(&node, &ksid, keys_dir.path(), &format!("a{i}")).await);
    }
    hook.script
        .lock()
        .unwrap()
        .extend([Reply::Hang, Reply::Hang, Reply::Hang]);
    let (hsid, _) = session(
        &node,
        &format!("printf '{QUESTION} '; read a; sleep 60"),
        &cwd,
    )
    .await;
    let _ = hook.next("/hook", Duration::from_secs(15)).await; // the first hanging attempt
    let mut during = Vec::new();
    for i in 0..5 {
        during.push(keystroke_ms(&node, &ksid, keys_dir.path(), &format!("b{i}")).await);
    }
    before.sort();
    during.sort();
    let (b, w) = (before[2], during[2]);
    assert!(
        w <= b + 100,
        "keystroke median {w} ms while the webhook hangs vs {b} ms before"
    );
    let rec = until_record(&node, "the hanging webhook recorded as failed", |r| {
        r["session_id"] == hsid.as_str() && r["deliveries"]["webhook"]["state"] == "failed"
    })
    .await;
    assert_eq!(rec["deliveries"]["webhook"]["attempts"], 3);
    assert_eq!(rec["deliveries"]["webhook"]["error"], "timed out");
    assert_eq!(rec["deliveries"]["ntfy"]["state"], "sent");
    let _ = alias;
    let _ = sid;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_channels_subscriptions_and_endpoints_are_refused() {
    let keys = python(&["keys"], None);
    let d = config_dir(json!({}));
    tuic_tests::set_password(d.path(), "pw-notify-1");
    let node = tuic_tests::remote_node(d.path());

    // A channel URL that is not http(s) is refused at config time, naming the URL.
    let cfg = ipc(&node.socket, "GET", "/config", None)
        .await
        .unwrap()
        .json();
    for bad in ["ftp://ntfy.example.net/topic", "file:///etc/passwd"] {
        let mut next = cfg.clone();
        next["notifications"]["ntfy"] = json!({"url": bad});
        let r = ipc(
            &node.socket,
            "PUT",
            "/config",
            Some(json!({"base": cfg, "config": next})),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 400, "{bad}");
        let e = r.json();
        assert!(e["error"].as_str().unwrap().contains(bad), "{e}");
    }
    let mut next = cfg.clone();
    next["notifications"]["webhook"] = json!({"url": "gopher://x"});
    let r = ipc(
        &node.socket,
        "PUT",
        "/config",
        Some(json!({"base": cfg, "config": next})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 400);

    // Malformed subscriptions.
    let good = json!({"p256dh": keys["p256dh"], "auth": keys["auth"]});
    let cases = [
        (
            json!({"endpoint": "not a url", "keys": good}),
            "bad_subscription",
        ),
        (
            json!({"endpoint": "ftp://push.example.net/x", "keys": good}),
            "bad_subscription",
        ),
        (
            json!({"endpoint": "https://push.example.net/x", "keys": {"p256dh": "AAAA", "auth": keys["auth"]}}),
            "bad_subscription",
        ),
        (
            json!({"endpoint": "https://push.example.net/x", "keys": {"p256dh": keys["p256dh"], "auth": "AAAA"}}),
            "bad_subscription",
        ),
    ];
    for (body, code) in cases {
        let r = ipc(
            &node.socket,
            "POST",
            "/notifications/subscriptions",
            Some(body.clone()),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.json()["code"], code, "{body}");
    }
    // A body without keys is refused by the JSON shape check.
    let r = ipc(
        &node.socket,
        "POST",
        "/notifications/subscriptions",
        Some(json!({"endpoint": "https://x"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 422);

    // A remote (TCP) client may not point the push sender at loopback or private addresses.
    let tcp = node.tcp.expect("tcp listener");
    let http = reqwest::Client::new();
    for endpoint in [
        "http://127.0.0.1:9/push",
        "https://10.0.0.8/push",
        "https://[::1]/push",
        "https://localhost/push",
    ] {
        let r = http
            .post(format!("http://{tcp}/notifications/subscriptions"))
            .basic_auth("admin", Some("pw-notify-1"))
            .json(&json!({"endpoint": endpoint, "keys": good}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{endpoint}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["code"], "endpoint_refused", "{v}");
    }
    // Nor read the webhook key or set the ntfy token.
    let r = http
        .get(format!("http://{tcp}/notifications/webhook-key"))
        .basic_auth("admin", Some("pw-notify-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // Refused ones were not stored.
    let subs = ipc(&node.socket, "GET", "/notifications/subscriptions", None)
        .await
        .unwrap()
        .json();
    assert_eq!(subs["subscriptions"], json!([]));
    // A bad answer.
    let r = answer(&node, 999, 1).await;
    assert_eq!(r.status, 404);
    let t = ipc(&node.socket, "POST", "/notifications/test", None)
        .await
        .unwrap()
        .json();
    let id = t["notification"]["id"].as_u64().unwrap();
    let r = answer(&node, id, 1).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["code"], "bad_choice");
}

/// The real web app in headless Chromium: its service worker registers on load, the settings
/// panel asks permission (and gets as far as the browser's push service, which headless
/// Chromium here cannot reach), and the node's own push messages — captured at the local
/// receiver and decrypted with `http_ece` — are delivered to the worker through the DevTools
/// protocol (`ServiceWorker.deliverPushMessage`): it shows the notification with the title,
/// body, tag and actions, the notification's answer link types into the PTY, and the "clear"
/// message closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_worker_shows_answers_and_closes_the_notification() {
    use tuic_tests::webdriver::Browser;
    const PW: &str = "pw-notify-2";
    let keys = python(&["keys"], None);
    let mut rx = Receiver::start().await;
    let d = config_dir(json!({"notifications": {"clear_grace_ms": 300}}));
    tuic_tests::set_password(d.path(), PW);
    let node = tuic_tests::remote_node(d.path());
    let base = format!("http://{}", node.tcp.unwrap());
    let r = subscribe(&node, &rx.url("/push/d"), &keys).await;
    assert_eq!(r.status, 200);

    let b = Browser::launch(390, 844).await.unwrap();
    tuic_tests::bed::login_via(
        &b,
        &format!("{base}/mobile/login?next=%2Fmobile"),
        PW,
        "location.pathname === '/mobile'",
    )
    .await;
    // Registered on load without asking anything.
    let scope = b
        .eval_async("const done = arguments[arguments.length - 1]; navigator.serviceWorker.ready.then(r => done(r.scope));", json!([]))
        .await
        .unwrap();
    assert_eq!(scope, format!("{base}/"));
    assert_eq!(
        b.eval("return Notification.permission", json!([]))
            .await
            .unwrap(),
        "default"
    );

    // Permission is asked from the settings panel; the subscription goes as far as the
    // browser's push service (unreachable from headless Chromium here).
    b.cdp(
        "Browser.grantPermissions",
        json!({"origin": base, "permissions": ["notifications"]}),
    )
    .await
    .unwrap();
    b.click(&b.find("#notify-toggle").await.unwrap())
        .await
        .unwrap();
    b.click(&b.find("#notify-enable").await.unwrap())
        .await
        .unwrap();
    let done =
        "/refused|on for this device/.test(document.getElementById('notify-status').textContent)";
    let waited = b.wait_for(done, 20_000).await;
    let status = b
        .eval(
            "return document.getElementById('notify-status').textContent",
            json!([]),
        )
        .await
        .unwrap();
    assert!(waited.is_ok(), "settings say {status}");
    assert_eq!(
        b.eval("return Notification.permission", json!([]))
            .await
            .unwrap(),
        "granted"
    );
    assert!(
        status.as_str().unwrap().contains("push service refused")
            || status.as_str().unwrap().contains("on for this device"),
        "{status}"
    );

    // The node pushes a question; its decrypted bytes go to the worker.
    let work = tempfile::tempdir().unwrap();
    let cwd = repo(work.path());
    let out = work.path().join("answer.txt");
    let (sid, alias) = session(
        &node,
        &format!(
            "printf '{QUESTION} '; read a; echo \"answer=$a\" > {}; sleep 60",
            out.display()
        ),
        &cwd,
    )
    .await;
    let hit = rx.next("/push/d", Duration::from_secs(15)).await;
    let (msg, _) = decrypt(&keys, &hit, &format!("http://{}", rx.addr));
    let deliver = |data: String| {
        let b = &b;
        let base = base.clone();
        async move {
            // Registration ids are small integers in a fresh profile, but which one is the
            // page's depends on how its registrations went (one interrupted by a navigation
            // under load is dropped and the next takes a new id). DevTools accepts any numeric
            // id and drops a push for an id that does not exist, so the message goes to each of
            // the first ids: only the existing registration receives it.
            b.cdp("ServiceWorker.enable", json!({})).await.unwrap();
            let mut errors = Vec::new();
            for id in 0..16 {
                let r = b
                    .cdp(
                        "ServiceWorker.deliverPushMessage",
                        json!({"origin": base, "registrationId": id.to_string(), "data": data}),
                    )
                    .await;
                if let Err(e) = r {
                    errors.push(format!("{e:#}"));
                }
            }
            assert!(
                errors.len() < 16,
                "no registration took the push: {errors:?}"
            );
        }
    };
    deliver(msg.to_string()).await;
    let shown = worker_notifications(&b, 1).await;
    let n = &shown[0];
    let host = ipc(&node.socket, "GET", "/health", None)
        .await
        .unwrap()
        .json()["host_name"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(n["title"], format!("{alias} needs input"));
    assert_eq!(
        n["body"],
        format!("{host} · demo-repo@feature-x · {alias}\n{QUESTION}")
    );
    assert_eq!(n["tag"], format!("tuic-{sid}"));
    assert_eq!(
        n["actions"],
        json!([{"action": "1", "title": "Yes"}, {"action": "2", "title": "No"}])
    );
    assert_eq!(n["data"]["url"], format!("/#/s/{alias}"));

    // The action's answer: the worker's request, from the notification's own data, with the
    // page's login cookie.
    let status = b
        .eval_async(
            "const done = arguments[arguments.length - 1];
             fetch(arguments[0].answer, {method: 'POST', credentials: 'same-origin',
               headers: {'content-type': 'application/json'}, body: JSON.stringify({choice: Number(arguments[1])})})
               .then(r => done(r.status));",
            json!([n["data"], n["actions"][0]["action"]]),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    wait_file(&out, "answer=y").await;

    // The "clear" message closes it.
    let hit = rx.next("/push/d", Duration::from_secs(15)).await;
    let (msg, _) = decrypt(&keys, &hit, &format!("http://{}", rx.addr));
    assert_eq!(msg["op"], "clear");
    deliver(msg.to_string()).await;
    let shown = worker_notifications(&b, 0).await;
    assert_eq!(shown, json!([]));
}

/// The service worker's shown notifications once there are `count` of them. The platform
/// has no event for "a worker showed a notification", so each WebDriver call watches for at
/// most 2 s (well inside the driver's script timeout, however loaded the machine) and the
/// calls repeat until a 60 s deadline.
async fn worker_notifications(b: &tuic_tests::webdriver::Browser, count: usize) -> Value {
    const WATCH: &str = "const done = arguments[arguments.length - 1];
        (async () => {
          const reg = await navigator.serviceWorker.getRegistration('/');
          let ns = [];
          for (let i = 0; i < 40; i++) {
            ns = await reg.getNotifications();
            if (ns.length === arguments[0]) break;
            await new Promise(r => setTimeout(r, 50));
          }
          done(ns.map(n => ({title: n.title, body: n.body, tag: n.tag,
            actions: n.actions.map(a => ({action: a.action, title: a.title})), data: n.data})));
        })();";
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last = Value::Null;
    while std::time::Instant::now() < deadline {
        last = b.eval_async(WATCH, json!([count])).await.unwrap();
        if last.as_array().map_or(0, Vec::len) == count {
            return last;
        }
    }
    panic!("the worker's notifications never matched: {last}");
}

/// Replaces the node's `notifications` settings over its IPC socket (three-way `PUT /config`).
async fn set_notifications(node: &NodeProc, n: Value) {
    let base = ipc(&node.socket, "GET", "/config", None)
        .await
        .unwrap()
        .json();
    let mut config = base.clone();
    config["notifications"] = n;
    let r = ipc(
        &node.socket,
        "PUT",
        "/config",
        Some(json!({"base": base, "config": config})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// The next ntfy publish (a POST to the topic itself; clears are PUTs below it).
async fn next_publish(rx: &mut Receiver, topic: &str) -> Hit {
    loop {
        let h = rx.next(topic, Duration::from_secs(15)).await;
        if h.method == "POST" && h.path == topic {
            return h;
        }
    }
}

/// `X-Actions` split into actions and their comma-separated fields.
fn actions(h: &Hit) -> Vec<Vec<String>> {
    h.header("x-actions")
        .split("; ")
        .map(|a| a.split(", ").map(str::to_owned).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ntfy_action_buttons_answer_once_with_a_token_scoped_to_their_question() {
    let mut ntfy = Receiver::start().await;
    let d = config_dir(json!({}));
    tuic_tests::set_password(d.path(), "pw-ntfy-actions");
    let node = tuic_tests::remote_node(d.path());
    let base = format!("http://{}", node.tcp.unwrap());
    set_notifications(
        &node,
        json!({"coalesce_ms": 0, "clear_grace_ms": 200, "public_url": base,
               "ntfy": {"url": ntfy.url("/ntfy/t")}}),
    )
    .await;
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("answers.txt");
    let (sid, _) = session(
        &node,
        &format!(
            "printf '{QUESTION} '; read a; echo \"a=$a\" >> {o}; printf 'Delete the cache? (y/n) '; read b; echo \"b=$b\" >> {o}; sleep 60",
            o = out.display()
        ),
        work.path(),
    )
    .await;

    // ntfy's documented header format: `http, <label>, <url>, method=POST, clear=true`, one
    // per choice, separated by `;`.
    let first = next_publish(&mut ntfy, "/ntfy/t").await;
    let a1 = actions(&first);
    assert_eq!(a1.len(), 2, "{a1:?}");
    for (a, label, choice) in [(&a1[0], "Yes", 1), (&a1[1], "No", 2)] {
        assert_eq!(a[0], "http");
        assert_eq!(a[1], label);
        assert!(
            a[2].starts_with(&format!("{base}/notifications/answer/")),
            "{a:?}"
        );
        assert!(a[2].ends_with(&format!("/{choice}")), "{a:?}");
        assert_eq!(a[3..], ["method=POST", "clear=true"]);
    }
    let yes1 = a1[0][2].clone();
    let token1 = yes1.rsplit('/').nth(1).unwrap().to_owned();
    assert_eq!(token1.len(), 64, "32 random bytes");

    // The action's POST answers without any login: the bytes reach the PTY.
    let http = reqwest::Client::new();
    let r = http.post(&yes1).send().await.unwrap();
    assert_eq!(r.status(), 200);
    wait_file(&out, "a=y").await;
    // Single use: the same button again is refused.
    let r = http.post(&yes1).send().await.unwrap();
    assert_eq!(r.status(), 410);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["code"], "answer_link_spent");

    // The next question has its own token; the first one answers nothing of it.
    let second = next_publish(&mut ntfy, "/ntfy/t").await;
    let a2 = actions(&second);
    let no2 = a2[1][2].clone();
    assert!(!no2.contains(&token1));
    let r = http
        .post(format!("{base}/notifications/answer/{token1}/2"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 410, "another question's token is refused");
    // A choice it does not offer is refused and spends nothing.
    let bad = no2.replace("/2", "/9");
    let r = http.post(&bad).send().await.unwrap();
    assert_eq!(r.status(), 400);
    // The token is no login: with it as a bearer, nothing else opens.
    let token2 = no2.rsplit('/').nth(1).unwrap().to_owned();
    let r = http
        .get(format!("{base}/notifications"))
        .bearer_auth(&token2)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // A guessed token is refused like a spent one.
    let r = http
        .post(format!("{base}/notifications/answer/{}/1", "0".repeat(64)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 410);
    let r = http.post(&no2).send().await.unwrap();
    assert_eq!(r.status(), 200);
    wait_file(&out, "b=n").await;
    assert!(
        std::fs::read_to_string(&out)
            .unwrap()
            .ends_with("a=y\nb=n\n")
    );

    // Both answers are in the audit, with the session.
    let audit = ipc(
        &node.socket,
        "GET",
        "/audit?kind=notification_answered",
        None,
    )
    .await
    .unwrap()
    .json();
    let rows: Vec<&Value> = audit["entries"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    assert_eq!(rows.len(), 2, "{audit}");
    assert!(rows.iter().all(|r| r.to_string().contains(&sid)), "{audit}");
    assert!(
        !audit.to_string().contains(&token1),
        "no token in the audit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_phone_settings_set_quiet_hours_and_mutes_and_send_a_test() {
    use tuic_tests::webdriver::Browser;
    const PW: &str = "pw-notify-settings";
    let mut hook = Receiver::start().await;
    let d = config_dir(json!({"notifications": {"webhook": {"url": hook.url("/hook")}}}));
    tuic_tests::set_password(d.path(), PW);
    let node = tuic_tests::remote_node(d.path());
    let base = format!("http://{}", node.tcp.unwrap());
    let b = Browser::launch(390, 844).await.unwrap();
    tuic_tests::bed::login_via(
        &b,
        &format!("{base}/mobile/login?next=%2Fmobile"),
        PW,
        "location.pathname === '/mobile'",
    )
    .await;
    b.click(&b.find("#notify-toggle").await.unwrap())
        .await
        .unwrap();
    // Quiet hours that do not cover now (UTC, the browser's zone here), so the test goes out.
    let hour = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 3600)
        % 24;
    let (from, to) = (
        format!("{:02}:00", (hour + 2) % 24),
        format!("{:02}:30", (hour + 3) % 24),
    );
    b.eval(
        "document.getElementById('notify-quiet-from').value = arguments[0];
         document.getElementById('notify-quiet-to').value = arguments[1];",
        json!([from, to]),
    )
    .await
    .unwrap();
    for (kind, name) in [("session", "ro-9"), ("host", "otherbox")] {
        b.eval(
            "document.getElementById('notify-mute-kind').value = arguments[0];
             document.getElementById('notify-mute-name').value = arguments[1];",
            json!([kind, name]),
        )
        .await
        .unwrap();
        b.click(&b.find("#notify-mute-add").await.unwrap())
            .await
            .unwrap();
    }
    // Everything fits the phone's width.
    let wide = b
        .eval(
            "return document.getElementById('notify-panel').scrollWidth <= window.innerWidth",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(wide, true);
    b.click(&b.find("#notify-save").await.unwrap())
        .await
        .unwrap();
    b.wait_for(
        "document.getElementById('notify-status').textContent === 'Settings saved.'",
        10_000,
    )
    .await
    .unwrap();
    let c = ipc(&node.socket, "GET", "/config", None)
        .await
        .unwrap()
        .json();
    let n = &c["notifications"];
    assert_eq!(n["quiet_hours"]["from"], from);
    assert_eq!(n["quiet_hours"]["to"], to);
    assert!(n["quiet_hours"]["timezone"].is_string(), "{n}");
    assert_eq!(n["muted_sessions"], json!(["ro-9"]));
    assert_eq!(n["muted_hosts"], json!(["otherbox"]));
    assert_eq!(
        n["webhook"]["url"],
        hook.url("/hook"),
        "other settings kept"
    );

    // Unmuting from the list and saving again.
    b.click(
        &b.find("button[aria-label='Unmute host otherbox']")
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    b.click(&b.find("#notify-save").await.unwrap())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let c = ipc(&node.socket, "GET", "/config", None)
            .await
            .unwrap()
            .json();
        if c["notifications"]["muted_hosts"] == json!([]) {
            assert_eq!(c["notifications"]["muted_sessions"], json!(["ro-9"]));
            break;
        }
        assert!(Instant::now() < deadline, "{c}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The test button sends a test notification.
    b.click(&b.find("#notify-test").await.unwrap())
        .await
        .unwrap();
    let hit = hook.next("/hook", Duration::from_secs(15)).await;
    let ev: Value = serde_json::from_slice(&hit.body).unwrap();
    assert_eq!(ev["notification"]["kind"], "test");
    b.wait_for(
        "document.getElementById('notify-status').textContent.startsWith('Test sent')",
        10_000,
    )
    .await
    .unwrap();
}

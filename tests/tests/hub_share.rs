//! Issue 47 on a hub, in network namespaces (real `tuic-hub` and `tuic-node` over veth links;
//! the test reaches the hub's TCP listener through a `Door`): a share link to a session on a
//! node, made on the hub (HTTP and `tuic share -H`), opened on the hub's address in headless
//! Chromium at phone size — the live screen relayed through the hub, typing and every other
//! route refused, revocation cutting the relayed viewer within 1 s, every use in the node's
//! audit and in the hub's merged one with the host's name — and the hub's trust page, whose
//! entries carry their host (`[nodeb]`, `[local]`) and whose node links (made with the hub
//! page's Share button) revoke with a tap.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tuic_tests::bed::{PASSWORD, ipc_ok, login};
use tuic_tests::fed::FedBed;
use tuic_tests::ipc;
use tuic_tests::netns::Door;
use tuic_tests::webdriver::{Browser, artifacts_dir};

/// Waits (bounded) until `GET /audit?query` on `socket` holds an entry satisfying `want`.
async fn await_entry(socket: &Path, query: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = ipc_ok(socket, "GET", &format!("/audit?limit=1000&{query}"), None).await;
        if let Some(e) = v["entries"].as_array().unwrap().iter().find(|e| want(e)) {
            return e.clone();
        }
        assert!(Instant::now() < deadline, "no such entry ({query}): {v:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A hub (password, remote access) with one node, a shell on the node listed on the hub, and
/// a door to the hub's TCP listener: the bed, the door, the hub's base URL through it and the
/// session's hub address.
async fn bed_with_shell() -> (FedBed, Door, String, String) {
    let bed = FedBed::start_with_hub(1, json!({}), json!({}), Some(PASSWORD))
        .await
        .unwrap();
    let hub_port = bed.hub.tcp.expect("hub TCP").port();
    let door = Door::open(bed.net.hub(), ([127, 0, 0, 1], hub_port).into()).unwrap();
    let base = format!("http://{}", door.addr);
    let sid = bed
        .create_on_node(
            0,
            json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "cwd": "/tmp"}),
        )
        .await
        .unwrap();
    let address = format!("nodeb/{sid}");
    bed.wait_listed(&address, Duration::from_secs(20))
        .await
        .unwrap();
    (bed, door, base, address)
}

#[tokio::test]
async fn a_nodes_session_shared_on_the_hub_is_viewed_read_only_through_it_and_revoked_at_once() {
    let (bed, _door, base, address) = bed_with_shell().await;
    let hub = &bed.hub.socket;
    let node = &bed.nodes[0].proc().socket;
    let sid = address.strip_prefix("nodeb/").unwrap().to_owned();
    let enc = address.replace('/', "%2F");

    // Made on the hub: the node mints it, the hub names it by the host, the link is the hub's.
    let made = ipc_ok(
        hub,
        "POST",
        "/shares",
        Some(json!({"session": address, "ttl": "10m"})),
    )
    .await;
    let id = made["id"].as_str().unwrap().to_owned();
    let token = made["token"].as_str().unwrap().to_owned();
    assert!(id.starts_with("nodeb/"), "{made}");
    assert!(token.starts_with("nodeb/shr_"), "{made}");
    assert_eq!(made["session_id"], address);
    assert_eq!(made["scope"], "read_only");
    let hub_addr = bed.hub.tcp.unwrap().to_string();
    assert_eq!(
        made["url"].as_str().unwrap(),
        format!("http://{hub_addr}/share.html#{token}")
    );
    let path = made["path"].as_str().unwrap().to_owned();
    // The node holds it, made by the hub's user.
    let own = ipc_ok(node, "GET", "/shares", None).await;
    let row = own["shares"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| format!("nodeb/{}", l["id"].as_str().unwrap()) == id)
        .expect("the node holds the link")
        .clone();
    assert_eq!(row["created_by"], "hub:local");
    assert_eq!(row["session_id"], sid);
    // The hub lists it under the host's name.
    let listed = ipc_ok(hub, "GET", &format!("/shares?session={enc}"), None).await;
    assert_eq!(listed["shares"][0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed["shares"][0]["host"], "nodeb");
    // Bad input refused before (or by) the owner: a bad ttl, an unknown session on the node.
    for (body, status) in [
        (json!({"session": address, "ttl": "soon"}), 400),
        (json!({"session": "nodeb/no-such-session"}), 404),
        (json!({"session": "nowhere/1"}), 404),
    ] {
        let r = ipc(hub, "POST", "/shares", Some(body.clone()))
            .await
            .unwrap();
        assert_eq!(
            r.status,
            status,
            "{body}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }

    // `tuic share -H` on the hub prints a link on the hub's address too.
    let sandbox = tempfile::tempdir().unwrap();
    let out = tuic_tests::bridge::tuic(
        sandbox.path(),
        &["share", "-H", "nodeb", &sid, "--answer", "--ttl", "5m"],
        &[("TUIC_SOCKET", hub.to_str().unwrap())],
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.starts_with(&format!("http://{hub_addr}/share.html#nodeb/shr_")),
        "{printed}"
    );
    // That answer-only link reaches the answer route (no question shows: the node's 409) and
    // nothing that writes.
    let answer_tok = printed
        .trim()
        .split_once('#')
        .unwrap()
        .1
        .replace('/', "%2F");
    let http = reqwest::Client::new();
    for (route, body, want) in [
        ("answer", json!({"answer": "y"}), 409),
        ("write", json!({"data": "x"}), 403),
        ("input", json!({"data": "x"}), 403),
    ] {
        let r = http
            .post(format!("{base}/sessions/{enc}/{route}?share={answer_tok}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), want, "{route}");
    }
    let out = tuic_tests::bridge::tuic(
        sandbox.path(),
        &["share", "--list", "-H", "nodeb"],
        &[("TUIC_SOCKET", hub.to_str().unwrap())],
    );
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{lines}");
    assert_eq!(lines.lines().count(), 2, "{lines}");
    assert!(lines.lines().all(|l| l.starts_with("nodeb/")), "{lines}");

    // Every other route refuses the token, on the hub (before asking) or on the owner.
    let tok = token.replace('/', "%2F");
    let call = |m: &str, p: &str| {
        let sep = if p.contains('?') { '&' } else { '?' };
        http.request(m.parse().unwrap(), format!("{base}{p}{sep}share={tok}"))
            .header("content-type", "application/json")
            .body(r#"{"data":"x"}"#)
            .send()
    };
    let table = [
        ("GET", "/share/info".to_owned(), 200),
        ("GET", format!("/sessions/{enc}"), 200),
        ("GET", format!("/sessions/{enc}/output?format=text"), 200),
        ("POST", format!("/sessions/{enc}/write"), 403),
        ("POST", format!("/sessions/{enc}/input"), 403),
        ("POST", format!("/sessions/{enc}/answer"), 403),
        ("POST", format!("/sessions/{enc}/resize"), 403),
        ("DELETE", format!("/sessions/{enc}"), 403),
        (
            "GET",
            "/sessions/nodeb%2Fsomething-else/output".to_owned(),
            403,
        ),
        ("GET", "/sessions/local%2F1/output".to_owned(), 403),
        ("GET", "/sessions".to_owned(), 403),
        ("GET", "/config".to_owned(), 403),
        ("POST", "/mcp".to_owned(), 403),
        ("GET", "/fs/read-external?path=/etc/passwd".to_owned(), 403),
        ("GET", "/audit".to_owned(), 403),
        ("GET", "/shares".to_owned(), 403),
        ("GET", "/hub/connections".to_owned(), 403),
        ("GET", "/events".to_owned(), 403),
    ];
    for (m, p, want) in &table {
        let r = call(m, p).await.unwrap();
        assert_eq!(r.status().as_u16(), *want, "{m} {p}");
        if *want == 403 {
            assert_eq!(
                r.json::<Value>().await.unwrap()["code"],
                "share_scope",
                "{m} {p}"
            );
        }
    }
    let info: Value = call("GET", "/share/info")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["session_id"], address);
    assert_eq!(info["scope"], "read_only");
    assert_eq!(info["link"], id.as_str());
    // A forged token of a known host is the owner's to refuse; of an unknown one, the hub's.
    for forged in ["nodeb%2Fshr_forged", "nowhere%2Fshr_forged"] {
        let r = http
            .get(format!("{base}/sessions/{enc}/output?share={forged}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{forged}");
        assert_eq!(r.json::<Value>().await.unwrap()["code"], "share_invalid");
    }

    // The phone opens the link on the hub's address and sees the live screen.
    let b = Browser::launch(390, 844).await.unwrap();
    b.goto(&format!("{base}{path}")).await.unwrap();
    b.wait_for(
        "document.getElementById('state').textContent === 'live'",
        15_000,
    )
    .await
    .unwrap();
    ipc_ok(
        hub,
        "POST",
        &format!("/sessions/{enc}/write"),
        Some(json!({"data": "echo relayed-to-the-phone-$((600+13))\n"})),
    )
    .await;
    b.wait_for(
        "document.getElementById('screen').textContent.includes('relayed-to-the-phone-613')",
        15_000,
    )
    .await
    .unwrap();
    b.screenshot(&artifacts_dir().join("hub-share-read-only-phone.png"))
        .await
        .unwrap();
    // From the page, with its own token: typing and every other route are refused.
    let codes = b
        .eval_async(
            "const [sid, done] = arguments; const tok = encodeURIComponent(location.hash.slice(1));
             const tries = [['POST', `/sessions/${sid}/write`], ['POST', `/sessions/${sid}/input`],
               ['GET', '/sessions'], ['GET', '/config'], ['POST', '/mcp'], ['GET', '/fs/read-external?path=/etc/passwd']];
             Promise.all(tries.map(([m, p]) => fetch(`${p}${p.includes('?') ? '&' : '?'}share=${tok}`,
               {method: m, headers: {'content-type': 'application/json'}, body: m === 'GET' ? undefined : '{\"data\":\"x\"}'})
               .then(r => r.status))).then(done);",
            json!([enc]),
        )
        .await
        .unwrap();
    assert_eq!(codes, json!([403, 403, 403, 403, 403, 403]));
    let overflow = b
        .eval(
            "return document.documentElement.scrollWidth > window.innerWidth",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(overflow, json!(false));

    // A second viewer, on the relayed stream itself, types: none of it reaches the PTY.
    let ws_base = base.replacen("http", "ws", 1);
    let (mut ws, _) = tokio_tungstenite::connect_async(format!(
        "{ws_base}/sessions/{enc}/stream?format=text&share={tok}"
    ))
    .await
    .unwrap();
    let hello = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(hello.to_text().unwrap().contains("hello"), "{hello:?}");
    ws.send(Message::Text("echo viewer-typed-$((1600+18))\n".into()))
        .await
        .unwrap();
    ws.send(Message::Binary(
        b"echo viewer-binary-$((2700+18))\n".to_vec().into(),
    ))
    .await
    .unwrap();
    let (mut screen_ws, _) = tokio_tungstenite::connect_async(format!(
        "{ws_base}/sessions/{enc}/stream?mode=screen&share={tok}"
    ))
    .await
    .unwrap();
    screen_ws
        .send(Message::Text(
            json!({"type": "input", "data": "echo viewer-screen-$((3100+41))\n"})
                .to_string()
                .into(),
        ))
        .await
        .unwrap();
    ipc_ok(
        hub,
        "POST",
        &format!("/sessions/{enc}/write"),
        Some(json!({"data": "echo owner-typed-$((1400+14))\n"})),
    )
    .await;
    tuic_tests::bed::await_output(hub, &address, "owner-typed-1414").await;
    let text = ipc_ok(
        node,
        "GET",
        &format!("/sessions/{sid}/output?format=text"),
        None,
    )
    .await["data"]
        .as_str()
        .unwrap()
        .to_owned();
    for typed in ["viewer-typed", "viewer-binary", "viewer-screen"] {
        assert!(!text.contains(typed), "{typed} reached the PTY: {text}");
    }
    // The owner lists the three relayed viewers on the link.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = ipc_ok(hub, "GET", &format!("/shares?session={enc}"), None).await;
        let l = v["shares"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["id"] == id.as_str())
            .unwrap()
            .clone();
        if l["viewers"].as_array().unwrap().len() == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "viewers never listed: {l}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Revoked on the hub: the owner cuts its viewers, and the hub's relay with them.
    let t0 = Instant::now();
    let revoked = ipc_ok(
        hub,
        "DELETE",
        &format!("/shares/{}", id.replace('/', "%2F")),
        None,
    )
    .await;
    assert_eq!(revoked["id"], id.as_str());
    let cut = tokio::time::timeout(Duration::from_secs(1), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    assert!(cut.is_ok(), "the relayed viewer was not cut within 1 s");
    let cut_after = t0.elapsed();
    println!("revocation through the hub cut the relayed viewer in {cut_after:?}");
    b.wait_for(
        "document.getElementById('state').dataset.ended === '1'",
        1_500,
    )
    .await
    .unwrap();
    println!(
        "the phone page showed the link ended after {:?}",
        t0.elapsed()
    );
    let r = call("GET", &format!("/sessions/{enc}/output"))
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "share_revoked");

    // Audited on the node, and in the hub's merged log under the host's name.
    let link = id.strip_prefix("nodeb/").unwrap().to_owned();
    let who = format!("share:{link}");
    let created = await_entry(node, "kind=share_created", |e| {
        e["detail"]["link"] == link.as_str()
    })
    .await;
    assert_eq!(created["who"], "hub:local");
    assert_eq!(created["via"], "hub");
    let attach = await_entry(hub, "host=nodeb&kind=attach", |e| e["who"] == who.as_str()).await;
    assert_eq!(attach["detail"]["mode"], "read_only");
    assert_eq!(attach["session"], sid);
    assert_eq!(attach["host"], "nodeb");
    await_entry(hub, "host=nodeb&kind=detach", |e| e["who"] == who.as_str()).await;
    let gone = await_entry(hub, "host=nodeb&kind=share_revoked", |e| {
        e["detail"]["link"] == link.as_str()
    })
    .await;
    assert_eq!(gone["who"], "hub:local");
    // Refusals: the owner's (a route in the session's view but out of scope) and the hub's
    // own (any other route), neither with the token.
    // (The hub asks for the owner's id percent-encoded: `pty%2D…`.)
    let write = format!("/sessions/{}/write", sid.replace('-', "%2D"));
    let owners = await_entry(hub, "host=nodeb&kind=share_refused", |e| {
        e["detail"]["route"] == write.as_str()
    })
    .await;
    assert_eq!(owners["detail"]["code"], "share_scope");
    let hubs = await_entry(hub, "host=local&kind=share_refused", |e| {
        e["detail"]["route"] == "/config"
    })
    .await;
    assert_eq!(hubs["detail"]["connection"], "nodeb");
    let all = ipc_ok(hub, "GET", "/audit?limit=1000", None).await;
    let secret = token.strip_prefix("nodeb/").unwrap();
    assert!(
        !all.to_string().contains(secret),
        "a token reached the audit"
    );
}

#[tokio::test]
async fn the_hub_trust_page_marks_each_entry_with_its_host_and_revokes_a_nodes_link() {
    let (bed, _door, base, address) = bed_with_shell().await;
    let hub = &bed.hub.socket;
    let enc = address.replace('/', "%2F");
    // Node entries (an input and a link through the hub) beside the hub's own (its connect).
    ipc_ok(
        hub,
        "POST",
        &format!("/sessions/{enc}/write"),
        Some(json!({"data": "echo trust-page\n"})),
    )
    .await;
    await_entry(hub, "host=local&kind=hub_connected", |_| true).await;

    // The hub page's Share button on the node's session: a link on the hub's address.
    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    b.goto(&format!("{base}/mobile#/s/{enc}")).await.unwrap();
    b.wait_for(
        "!document.getElementById('share').closest('[hidden]')",
        15_000,
    )
    .await
    .unwrap();
    b.click(&b.find("#share").await.unwrap()).await.unwrap();
    let hub_addr = bed.hub.tcp.unwrap().to_string();
    b.wait_for(
        &format!(
            "document.getElementById('banner').textContent.includes('http://{hub_addr}/share.html#nodeb/shr_')"
        ),
        10_000,
    )
    .await
    .unwrap();
    let listed = ipc_ok(hub, "GET", &format!("/shares?session={enc}"), None).await;
    let id = listed["shares"][0]["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("nodeb/"), "{listed}");
    await_entry(hub, "host=nodeb&kind=share_created", |_| true).await;

    b.goto(&format!("{base}/mobile#/trust")).await.unwrap();
    b.wait_for(
        "document.querySelector('#audit li[data-host=nodeb][data-kind=share_created]') \
         && document.querySelector('#audit li[data-host=local][data-kind=hub_connected]')",
        15_000,
    )
    .await
    .unwrap();
    b.screenshot(&artifacts_dir().join("hub-trust-page-phone.png"))
        .await
        .unwrap();
    // Every entry names its host in its text: `[nodeb]` for the node's, `[local]` for the
    // hub's own.
    let marks = b
        .eval(
            "return [...document.querySelectorAll('#audit li')].map(li =>
               [li.dataset.host, li.querySelector('.audit-host')?.textContent ?? '', li.dataset.kind]);",
            json!([]),
        )
        .await
        .unwrap();
    let marks = marks.as_array().unwrap();
    assert!(marks.len() >= 3, "{marks:?}");
    for m in marks {
        let host = m[0].as_str().unwrap();
        assert!(host == "nodeb" || host == "local", "{m}");
        assert_eq!(m[1].as_str().unwrap(), format!("[{host}] "), "{m}");
    }
    for (host, kind) in [
        ("nodeb", "input"),
        ("nodeb", "share_created"),
        ("local", "hub_connected"),
    ] {
        assert!(
            marks.iter().any(|m| m[0] == host && m[2] == kind),
            "no [{host}] {kind}: {marks:?}"
        );
    }
    let overflow = b
        .eval(
            "return document.documentElement.scrollWidth > window.innerWidth",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(overflow, json!(false));

    // The node's link is listed under its host and revoked with a tap, on the node.
    let row = format!("#shares li[data-id='{id}']");
    b.wait_for(
        &format!("(document.querySelector(\"{row}\")?.textContent ?? '').startsWith('[nodeb] ')"),
        10_000,
    )
    .await
    .unwrap();
    b.click(&b.find(&format!("{row} button.revoke")).await.unwrap())
        .await
        .unwrap();
    b.wait_for(
        "document.querySelector('#audit li[data-host=nodeb][data-kind=share_revoked]') !== null",
        10_000,
    )
    .await
    .unwrap();
    let own = ipc_ok(&bed.nodes[0].proc().socket, "GET", "/shares", None).await;
    assert_eq!(own["shares"][0]["state"], "revoked", "{own}");
}

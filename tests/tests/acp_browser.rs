//! Browser test of the ACP chat view: Debian's headless Chromium at phone size against a real
//! node over authenticated TCP, driving the Python SDK test agent. The streamed turn, the
//! plan, the diff and the permission card show; a reload mid-turn resumes with every frame
//! once; tapping an option reaches the agent (it says which `optionId` it received).

use serde_json::json;
use tuic_tests::acp::{Bed, agent_config, start_node};
use tuic_tests::bed::{PASSWORD, login_via};
use tuic_tests::webdriver::{Browser, artifacts_dir};
use tuic_tests::{config_dir, set_password};

async fn login(b: &Browser, base: &str) {
    login_via(
        b,
        &format!("{base}/mobile"),
        PASSWORD,
        "location.pathname === '/mobile' && !!document.getElementById('sessions')",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_phone_chat_shows_the_turn_and_a_tapped_option_reaches_the_agent() {
    let dir = config_dir(agent_config(json!({})));
    set_password(dir.path(), PASSWORD);
    let node = start_node(dir.path(), true);
    let base = format!("http://{}", node.tcp.unwrap());
    let bed = Bed::with(dir, node).await;
    let id = bed.launch().await;

    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    // The list shows the connection beside the (empty) PTY sessions.
    b.wait_for(
        &format!("!!document.querySelector('#acp-sessions a[data-acp=\"{id}\"]')"),
        15_000,
    )
    .await
    .unwrap();
    b.goto(&format!("{base}/mobile#/acp/{id}")).await.unwrap();
    b.wait_for(
        "[...document.querySelectorAll('#acp-log .note')].some(n => n.textContent === 'Ready')",
        30_000,
    )
    .await
    .unwrap();
    let line = b.find("#acp-line").await.unwrap();
    b.type_text(&line, "hello").await.unwrap();
    b.click(&b.find("#acp-send").await.unwrap()).await.unwrap();
    b.wait_for(
        "document.querySelectorAll('.card.permission button').length === 3",
        30_000,
    )
    .await
    .unwrap();
    b.screenshot(&artifacts_dir().join("acp-chat-permission-phone.png"))
        .await
        .unwrap();
    let check = r#"
        const bubbles = [...document.querySelectorAll('#acp-log .bubble.agent')].map(b => b.textContent);
        const btns = [...document.querySelectorAll('.card.permission button')].map(b => b.getBoundingClientRect());
        const gaps = btns.slice(1).map((r, i) => Math.max(r.left - btns[i].right, r.top - btns[i].bottom));
        return {
            bubbles,
            user: [...document.querySelectorAll('#acp-log .bubble.user')].map(b => b.textContent),
            plan: document.querySelectorAll('#acp-plan li').length,
            adds: [...document.querySelectorAll('pre.diff .add')].map(d => d.textContent),
            dels: [...document.querySelectorAll('pre.diff .del')].map(d => d.textContent),
            thoughts: document.querySelectorAll('details.thought').length,
            heights: btns.map(r => r.height),
            widths: btns.map(r => r.width),
            gaps,
            labels: [...document.querySelectorAll('.card.permission button')].map(b => b.textContent),
            cursor: Number(document.getElementById('acp-log').dataset.cursor),
            overflow: document.documentElement.scrollWidth > window.innerWidth,
        };
    "#;
    let seen = b.eval(check, json!([])).await.unwrap();
    assert_eq!(
        seen["bubbles"],
        json!(["Hello from the test agent."]),
        "{seen}"
    );
    assert_eq!(seen["user"], json!(["hello"]), "{seen}");
    assert_eq!(seen["plan"], 3, "{seen}");
    assert_eq!(seen["adds"], json!(["+ new line"]), "{seen}");
    assert_eq!(seen["dels"], json!(["- old line"]), "{seen}");
    assert_eq!(seen["thoughts"], 1, "{seen}");
    assert_eq!(
        seen["labels"],
        json!(["Allow once", "Always allow", "Reject"])
    );
    for h in seen["heights"].as_array().unwrap() {
        assert!(h.as_f64().unwrap() >= 44.0, "{seen}");
    }
    for g in seen["gaps"].as_array().unwrap() {
        assert!(g.as_f64().unwrap() >= 8.0, "buttons apart: {seen}");
    }
    assert_eq!(seen["overflow"], false);

    // A reload mid-turn (the request still held) shows the same frames once, none missing.
    b.goto(&format!("{base}/mobile")).await.unwrap();
    b.goto(&format!("{base}/mobile#/acp/{id}")).await.unwrap();
    b.wait_for(
        "document.querySelectorAll('.card.permission button').length === 3",
        30_000,
    )
    .await
    .unwrap();
    let again = b.eval(check, json!([])).await.unwrap();
    for k in [
        "bubbles", "user", "plan", "adds", "dels", "thoughts", "labels", "cursor",
    ] {
        assert_eq!(again[k], seen[k], "{k} after reload: {again}");
    }
    let (_, snap) = bed
        .call("GET", &format!("/acp/connections/{id}"), None)
        .await;
    assert_eq!(
        again["cursor"].as_u64(),
        snap["last_seq"].as_u64(),
        "{snap}"
    );

    // Tapping "Always allow" reaches the agent: it says which optionId it received.
    let always = b
        .find(".card.permission button[data-option=\"always\"]")
        .await
        .unwrap();
    b.click(&always).await.unwrap();
    b.wait_for(
        "[...document.querySelectorAll('#acp-log .bubble.agent')].some(b => b.textContent === 'chose:always')",
        30_000,
    )
    .await
    .unwrap();
    b.wait_for(
        "!!document.querySelector('.card.permission.settled')",
        10_000,
    )
    .await
    .unwrap();
    b.screenshot(&artifacts_dir().join("acp-chat-answered-phone.png"))
        .await
        .unwrap();
    let (_, inter) = bed
        .call("GET", &format!("/acp/connections/{id}/interactions"), None)
        .await;
    assert_eq!(inter[0]["option_id"], "always", "{inter}");
    assert_eq!(inter[0]["by"], "phone", "{inter}");
}

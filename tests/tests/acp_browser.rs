//! Browser test of the ACP chat view: Debian's headless Chromium at phone size against a real
//! node over authenticated TCP, driving the Python SDK test agent. The streamed turn, the
//! plan, the diff and the permission card show; a reload mid-turn resumes with every frame
//! once; tapping an option reaches the agent (it says which `optionId` it received). The
//! session list is one list: ACP connections beside PTY sessions, "needs you" first. Agent
//! messages render as markdown, and HTML in them shows as text.

use serde_json::{Value, json};
use tuic_tests::acp::{Bed, agent_config, is, start_node, until};
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
        &format!("!!document.querySelector('#sessions a[data-acp=\"{id}\"]')"),
        15_000,
    )
    .await
    .unwrap();
    b.goto(&format!("{base}/mobile#/acp/{id}")).await.unwrap();
    // The agent starts (a Python SDK process): as long as a stream frame may take.
    b.wait_for(
        "[...document.querySelectorAll('#acp-log .note')].some(n => n.textContent === 'Ready')",
        60_000,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_list_puts_needs_you_first_and_messages_render_as_safe_markdown() {
    let dir = config_dir(agent_config(json!({})));
    set_password(dir.path(), PASSWORD);
    let node = start_node(dir.path(), true);
    let base = format!("http://{}", node.tcp.unwrap());
    let bed = Bed::with(dir, node).await;
    let pty = tuic_tests::bed::create_shell(&bed.node).await;
    let quiet = bed.launch().await;
    let asking = bed.launch().await;
    let mut ws = bed.stream(&asking, 0).await.unwrap();
    until(&mut ws, |f| is(f, "ready")).await.unwrap();
    bed.prompt(&asking, "ask").await;
    until(&mut ws, |f| is(f, "permission")).await.unwrap();

    let b = Browser::launch(390, 844).await.unwrap();
    login(&b, &base).await;
    // One list: the PTY and both connections; the one holding a permission request is first.
    b.wait_for(
        &format!(
            "(() => {{ const a = [...document.querySelectorAll('#sessions li a')]; \
             return a.length === 3 && a[0].dataset.acp === '{asking}'; }})()"
        ),
        20_000,
    )
    .await
    .unwrap();
    let rows = b
        .eval(
            "return [...document.querySelectorAll('#sessions li a')].map(a => ({acp: a.dataset.acp ?? null, session: a.dataset.session ?? null, badge: a.querySelector('.badge').textContent}));",
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(rows[0]["badge"], "needs you (1)", "{rows}");
    let rest: Vec<&Value> = rows.as_array().unwrap()[1..].iter().collect();
    assert!(rest.iter().any(|r| r["session"] == pty.as_str()), "{rows}");
    assert!(rest.iter().any(|r| r["acp"] == quiet.as_str()), "{rows}");
    b.screenshot(&artifacts_dir().join("acp-one-list-phone.png"))
        .await
        .unwrap();

    b.goto(&format!("{base}/mobile#/acp/{quiet}"))
        .await
        .unwrap();
    // The agent starts (a Python SDK process): as long as a stream frame may take.
    b.wait_for(
        "[...document.querySelectorAll('#acp-log .note')].some(n => n.textContent === 'Ready')",
        60_000,
    )
    .await
    .unwrap();
    bed.prompt(&quiet, "markdown").await;
    b.wait_for(
        "[...document.querySelectorAll('#acp-log .note')].some(n => n.textContent.startsWith('Turn ended'))",
        30_000,
    )
    .await
    .unwrap();
    let seen = b
        .eval(
            r#"
            const m = document.querySelector('#acp-log .bubble.agent');
            return {
                heading: m.querySelector('h4')?.textContent,
                strong: m.querySelector('strong')?.textContent,
                inline: m.querySelector('p code')?.textContent,
                items: [...m.querySelectorAll('ul li')].map(l => l.textContent),
                code: m.querySelector('pre.code code')?.textContent,
                lang: m.querySelector('pre.code code')?.dataset.lang,
                links: [...m.querySelectorAll('a')].map(a => a.getAttribute('href')),
                scripts: m.querySelectorAll('script').length,
                imgs: m.querySelectorAll('img').length,
                bold_in_code: m.querySelectorAll('pre b').length,
                text: m.textContent,
                pwned: window.__pwned ?? null,
            };
            "#,
            json!([]),
        )
        .await
        .unwrap();
    assert_eq!(seen["heading"], "Result", "{seen}");
    assert_eq!(seen["strong"], "build", "{seen}");
    assert_eq!(seen["inline"], "cargo test", "{seen}");
    assert_eq!(
        seen["items"],
        json!(["first item", "second item"]),
        "{seen}"
    );
    assert_eq!(
        seen["code"], "fn main() { println!(\"<b>hi</b>\"); }",
        "{seen}"
    );
    assert_eq!(seen["lang"], "rust", "{seen}");
    assert_eq!(seen["links"], json!(["https://example.com/docs"]), "{seen}");
    assert_eq!(
        (&seen["scripts"], &seen["imgs"], &seen["bold_in_code"]),
        (&json!(0), &json!(0), &json!(0)),
        "{seen}"
    );
    let text = seen["text"].as_str().unwrap();
    assert!(
        text.contains("<script>window.__pwned = 1</script>"),
        "{seen}"
    );
    assert!(text.contains("[bad](javascript:alert(1))"), "{seen}");
    assert_eq!(seen["pwned"], Value::Null, "{seen}");
    b.screenshot(&artifacts_dir().join("acp-markdown-phone.png"))
        .await
        .unwrap();
}

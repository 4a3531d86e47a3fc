//! Agent identity binding on a real `tuic-node` (issue 40, finding 1): an identity another
//! protocol session or a live terminal holds is never taken by announcing it — not by
//! `register tuic_session=`, not by `replaces=`, not by acting as it in `send`/`inbox`/`wait` —
//! while a sibling bridge in the same terminal still joins and a stale owner is still reclaimed
//! by the caller its terminal's `x-tuic-session` binds.

mod agent_mail_support;
mod mcp_support;

use agent_mail_support::{Client, Stream, get_json, post_json, script};
use mcp_support::NodeProc;
use serde_json::{Value, json};

/// The spec's refusal (spec: "identity binding").
const REFUSAL: &str = "already registered to another active MCP session";

/// Calls `agent` expecting the takeover refusal; returns the error.
async fn refused(c: &mut Client, args: Value) -> Value {
    let (err, e) = c.tool("agent", args.clone()).await;
    assert!(err, "{args} was not refused: {e}");
    assert_eq!(e["code"], "identity_in_use", "{args}: {e}");
    assert!(
        e["error"].as_str().unwrap().contains(REFUSAL),
        "{args}: {e}"
    );
    e
}

/// A fresh identity, as a terminal's `$TUIC_SESSION` would be.
fn random_uuid() -> String {
    let h = format!("{:032x}", rand::random::<u128>());
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn bodies(page: &Value, key: &str) -> Vec<String> {
    page[key]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m.get("kind").is_none())
        .map(|m| m["message"].as_str().unwrap().to_owned())
        .collect()
}

/// WARN records of refused claims by `claimant` on `identity`.
async fn refusal_warnings(node: &NodeProc, claimant: &str, identity: &str) -> usize {
    let logs = get_json(node, "/logs?source=mcp&level=warn&limit=1000").await;
    logs.as_array()
        .or_else(|| logs["records"].as_array())
        .unwrap_or_else(|| panic!("no log records: {logs}"))
        .iter()
        .filter(|r| {
            r["message"]
                .as_str()
                .is_some_and(|m| m.contains("refused an identity claim"))
                && r["fields"]["claimant_session"] == claimant
                && r["fields"]["identity"] == identity
        })
        .count()
}

#[tokio::test]
async fn the_takeover_sequence_is_refused_at_every_step_and_the_victims_mail_stays() {
    let node = NodeProc::start(json!({})).await;
    let mut victim = Client::new(&node).await;
    let tv = victim
        .agent(json!({"action":"register","name":"victim"}))
        .await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    let _stream = Stream::open(&node, &victim.sid).await;
    let mut sender = Client::new(&node).await;
    sender
        .agent(json!({"action":"register","name":"sender"}))
        .await;
    for i in 0..2 {
        sender
            .agent(json!({"action":"send","to":tv,"message":format!("secret {i}")}))
            .await;
    }
    // A second client with no x-tuic-session finds the victim's uuid in list_peers...
    let mut attacker = Client::new(&node).await;
    let peers = attacker.agent(json!({"action":"list_peers"})).await;
    assert!(peers.to_string().contains(&tv), "{peers}");
    // ...and every step of the takeover is refused with the spec's message.
    let e = refused(
        &mut attacker,
        json!({"action":"register","name":"pwned","tuic_session":tv}),
    )
    .await;
    assert_eq!(e["held_by"], "live_owner", "{e}");
    refused(&mut attacker, json!({"action":"inbox","tuic_session":tv})).await;
    refused(
        &mut attacker,
        json!({"action":"wait","tuic_session":tv,"timeout_ms":0}),
    )
    .await;
    refused(
        &mut attacker,
        json!({"action":"send","from":tv,"to":"sender","message":"as the victim"}),
    )
    .await;
    // Not bound to anything, the attacker's own inbox is no one's.
    let (err, e) = attacker.tool("agent", json!({"action":"inbox"})).await;
    assert!(err, "{e}");
    assert_eq!(e["code"], "not_registered", "{e}");
    // With an identity of its own: no jump onto the victim's, and no `replaces=` of it.
    let ta = attacker
        .agent(json!({"action":"register","name":"attacker"}))
        .await["tuic_session"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(ta, tv);
    refused(
        &mut attacker,
        json!({"action":"register","tuic_session":tv}),
    )
    .await;
    refused(&mut attacker, json!({"action":"register","replaces":tv})).await;
    refused(&mut attacker, json!({"action":"inbox","tuic_session":tv})).await;
    let mut fresh = Client::new(&node).await;
    refused(&mut fresh, json!({"action":"register","replaces":tv})).await;
    // Nor onto a terminal's identity (the `superseded_identity` repair path).
    let dir = tempfile::tempdir().unwrap();
    let shell = script(dir.path(), "idle-shell", "read -r _ignored");
    let pty = post_json(
        &node,
        "/sessions",
        json!({"shell": shell, "cwd": dir.path().display().to_string()}),
    )
    .await;
    let tt = pty["tuic_session"].as_str().unwrap().to_owned();
    let e = refused(
        &mut attacker,
        json!({"action":"register","tuic_session":tt}),
    )
    .await;
    assert_eq!(e["held_by"], "terminal", "{e}");
    refused(&mut fresh, json!({"action":"register","tuic_session":tt})).await;

    // The victim's identity is untouched: its name, and its mail still unread.
    let peers = sender.agent(json!({"action":"list_peers"})).await;
    let me = peers["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["tuic_session"] == tv.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("victim gone: {peers}"));
    assert_eq!(me["name"], "victim");
    let page = victim.agent(json!({"action":"inbox"})).await;
    assert_eq!(bodies(&page, "messages"), ["secret 0", "secret 1"]);
    // The attacker's own identity sends as itself.
    let r = attacker
        .agent(json!({"action":"send","to":"sender","message":"hello","from":ta}))
        .await;
    assert_eq!(r["delivered"], true, "{r}");
    let got = sender.agent(json!({"action":"inbox"})).await;
    assert_eq!(got["messages"][0]["from"], ta.as_str(), "{got}");

    // Six refusals of one claimant on the victim: one WARN.
    assert_eq!(refusal_warnings(&node, &attacker.sid, &tv).await, 1);
    assert_eq!(refusal_warnings(&node, &fresh.sid, &tv).await, 1);
    assert_eq!(refusal_warnings(&node, &attacker.sid, &tt).await, 1);
}

#[tokio::test]
async fn a_sibling_bridge_joins_and_only_its_terminals_header_reclaims_a_stale_owner() {
    // No grace: an owner without a GET /mcp stream is stale at once (no sleeping for it).
    let node = NodeProc::start(json!({"tuning": {"mcp_identity_grace_ms": 0}})).await;
    let mut sender = Client::new(&node).await;
    sender.agent(json!({"action":"register"})).await;

    // A live owner (it holds its stream) and a second bridge asserting the same identity.
    let t = random_uuid();
    let mut owner = Client::new_as(&node, &t).await;
    let _stream = Stream::open(&node, &owner.sid).await;
    let mut sibling = Client::new_as(&node, &t).await;
    let r = sibling
        .agent(json!({"action":"register","name":"codex"}))
        .await;
    assert_eq!(r["tuic_session"], t.as_str(), "the sibling joined: {r}");
    sender
        .agent(json!({"action":"send","to":t,"message":"for both"}))
        .await;
    let page = sibling.agent(json!({"action":"inbox","since":0})).await;
    assert_eq!(bodies(&page, "messages"), ["for both"]);
    let page = owner.agent(json!({"action":"inbox","since":0})).await;
    assert_eq!(bodies(&page, "messages"), ["for both"]);
    let mut headerless = Client::new(&node).await;
    refused(
        &mut headerless,
        json!({"action":"register","tuic_session":t}),
    )
    .await;

    // A stale owner (no stream, idle past the zero grace).
    let u = random_uuid();
    let mut stale = Client::new_as(&node, &u).await;
    stale.agent(json!({"action":"register","name":"old"})).await;
    sender
        .agent(json!({"action":"send","to":u,"message":"kept"}))
        .await;
    // Announcing it is refused even so: reclaiming is for the header-bound caller.
    let e = refused(
        &mut headerless,
        json!({"action":"register","tuic_session":u}),
    )
    .await;
    assert_eq!(e["held_by"], "stale_owner", "{e}");
    // The bridge in its terminal reclaims it, with the mail.
    let mut back = Client::new_as(&node, &u).await;
    let r = back.agent(json!({"action":"register"})).await;
    assert_eq!(r["tuic_session"], u.as_str(), "{r}");
    assert_eq!(r["name"], "old", "{r}");
    let page = back.agent(json!({"action":"inbox"})).await;
    assert_eq!(bodies(&page, "messages"), ["kept"]);
    let logs = get_json(&node, "/logs?source=mcp&limit=1000").await;
    assert!(
        logs.to_string()
            .contains("reclaimed a stale identity binding"),
        "the reclaim is logged: {logs}"
    );
    // The stale session lost its binding: it acts as nobody now.
    let (err, e) = stale.tool("agent", json!({"action":"inbox"})).await;
    assert!(err, "{e}");
    assert_eq!(e["code"], "not_registered", "{e}");
}

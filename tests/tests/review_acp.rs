//! A review for an ACP connection (issue 43) goes out as one ACP prompt: the official Python
//! SDK test agent (`tests/clients/acp_test_agent.py`) receives it as a turn and echoes it, so
//! the test asserts what the agent received. The connection's checkout is a real Git
//! repository with an uncommitted change the Changes view lists.

use serde_json::json;
use tuic_tests::acp::{Bed, is, said, until};
use tuic_tests::bed::git;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_for_an_acp_connection_arrives_as_one_prompt() {
    let bed = Bed::start(json!({})).await;
    git(&bed.repo, &["init", "-q", "-b", "main"]);
    std::fs::write(bed.repo.join("notes.txt"), "one\ntwo\nthree\n").unwrap();
    git(&bed.repo, &["add", "-A"]);
    git(&bed.repo, &["commit", "-qm", "base"]);
    std::fs::write(bed.repo.join("notes.txt"), "one\nTWO\nthree\nfour\n").unwrap();

    let id = bed.launch().await;
    let mut ws = bed.stream(&id, 0).await.unwrap();
    let start = until(&mut ws, |f| is(f, "ready") || is(f, "agent_error"))
        .await
        .unwrap();
    assert!(is(start.last().unwrap(), "ready"), "{start:?}");

    // Changes of the connection's checkout; the delivery shown before sending is ACP.
    let (st, ch) = bed
        .call("GET", &format!("/sessions/{id}/changes"), None)
        .await;
    assert_eq!(st, 200, "{ch}");
    assert_eq!(ch["delivery"], "acp", "{ch}");
    assert_eq!(ch["uncommitted"][0]["path"], "notes.txt", "{ch}");

    let (st, r) = bed
        .call(
            "POST",
            &format!("/sessions/{id}/reviews"),
            Some(json!({"comments": [
                {"file": "notes.txt", "line": 2, "text": "why upper case?"},
                {"file": "notes.txt", "line": 4, "text": "drop this line"}]})),
        )
        .await;
    assert_eq!(st, 200, "{r}");
    let rid = r["id"].as_str().unwrap().to_owned();
    let (st, sent) = bed
        .call("POST", &format!("/sessions/{id}/reviews/{rid}/send"), None)
        .await;
    assert_eq!(st, 200, "{sent}");
    assert_eq!(sent["delivered_via"], "acp", "{sent}");
    assert_eq!(sent["state"], "sent");

    // One turn: its prompt is the review, and the agent echoes exactly what it received.
    let turn = until(&mut ws, |f| is(f, "turn_end")).await.unwrap();
    let prompts: Vec<_> = turn.iter().filter(|f| is(f, "prompt")).collect();
    assert_eq!(prompts.len(), 1, "{turn:?}");
    let got = said(&turn);
    let echoed = got.strip_prefix("echo:").expect("the agent's echo");
    assert!(
        echoed.starts_with("Review of your changes (2 comments):"),
        "{got}"
    );
    assert!(echoed.contains("notes.txt:2: why upper case?"), "{got}");
    assert!(echoed.contains("notes.txt:4: drop this line"), "{got}");

    // Sent once: a second send is refused; the stored review says how it went out.
    let (st, again) = bed
        .call("POST", &format!("/sessions/{id}/reviews/{rid}/send"), None)
        .await;
    assert_eq!(st, 409, "{again}");
    let (st, listed) = bed
        .call("GET", &format!("/sessions/{id}/reviews"), None)
        .await;
    assert_eq!(st, 200, "{listed}");
    assert_eq!(listed["reviews"][0]["delivered_via"], "acp", "{listed}");
}

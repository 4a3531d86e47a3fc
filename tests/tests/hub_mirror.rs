//! The hub's session mirror follows a node by deltas: creating, renaming and closing sessions
//! on a node shows on the hub's `GET /sessions`, and the hub reads the whole list only once per
//! connected period (`full_refreshes` in `GET /hub/connections`), not once per event.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tuic_tests::fed::FedBed;
use tuic_tests::ipc;

const LIMIT: Duration = Duration::from_secs(20);

/// Polls the hub's list (bounded) until `pred` holds for it.
async fn wait_hub(bed: &FedBed, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + LIMIT;
    loop {
        let rows = bed.hub_sessions().await.unwrap();
        if pred(&rows) {
            return rows;
        }
        assert!(Instant::now() < deadline, "{what}: {rows:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn conn_row(c: &[Value]) -> Value {
    c.iter().find(|c| c["id"] == "nodeb").cloned().unwrap()
}

#[tokio::test]
async fn hub_mirror_applies_created_renamed_closed_as_deltas() {
    let bed = FedBed::start(1).await.unwrap();
    let node = bed.nodes[0].proc();
    let before = conn_row(&bed.connections().await.unwrap());
    assert_eq!(before["full_refreshes"], json!(1), "{before}");

    let shell = json!({"rows": 24, "cols": 80, "shell": "/bin/sh"});
    let a = bed.create_on_node(0, shell.clone()).await.unwrap();
    let b = bed.create_on_node(0, shell).await.unwrap();
    let (addr_a, addr_b) = (format!("nodeb/{a}"), format!("nodeb/{b}"));
    let row = bed.wait_listed(&addr_a, LIMIT).await.unwrap();
    // The added row is the node's own row (alias included), not a stub from the event.
    assert!(
        row["alias"].as_str().is_some_and(|s| !s.is_empty()),
        "{row}"
    );
    bed.wait_listed(&addr_b, LIMIT).await.unwrap();

    let r = ipc(
        &node.socket,
        "PUT",
        &format!("/sessions/{a}/name"),
        Some(json!({"name": "mirror-renamed"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    wait_hub(&bed, "rename never mirrored", |rows| {
        rows.iter()
            .any(|r| r["address"] == json!(addr_a) && r["display_name"] == "mirror-renamed")
    })
    .await;

    let r = ipc(&node.socket, "DELETE", &format!("/sessions/{b}"), None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let rows = wait_hub(&bed, "closed session still listed", |rows| {
        !rows.iter().any(|r| r["address"] == json!(addr_b))
    })
    .await;
    assert!(
        rows.iter().any(|r| r["address"] == json!(addr_a)),
        "{rows:?}"
    );

    // The hub's list equals the node's own list.
    let node_rows = ipc(&node.socket, "GET", "/sessions", None)
        .await
        .unwrap()
        .json();
    let ids = |v: Vec<&Value>| {
        let mut v: Vec<String> = v
            .iter()
            .map(|r| r["session_id"].as_str().unwrap().to_owned())
            .collect();
        v.sort();
        v
    };
    let hub_ids = ids(rows
        .iter()
        .filter(|r| r["connection_id"] == "nodeb")
        .collect());
    assert_eq!(hub_ids, ids(node_rows.as_array().unwrap().iter().collect()));

    // Many events (created, alias, renamed, closed, exit...), one whole-list read: the one at
    // connect. Rows were read one at a time.
    let after = conn_row(&bed.connections().await.unwrap());
    assert_eq!(after["full_refreshes"], json!(1), "{after}");
    assert!(after["row_fetches"].as_u64().unwrap() >= 2, "{after}");

    // The node's single-row route answers 404 for a closed session.
    let r = ipc(&node.socket, "GET", &format!("/sessions/{b}"), None)
        .await
        .unwrap();
    assert_eq!(r.status, 404);
    let r = ipc(&node.socket, "GET", &format!("/sessions/{a}"), None)
        .await
        .unwrap();
    assert_eq!(r.json()["display_name"], "mirror-renamed");
}

/// A question pending on a node's session is on the hub's mirrored row too (the row is the
/// node's own, refreshed when its state changes), so a page on the hub shows its answers.
#[tokio::test]
async fn hub_mirror_carries_a_pending_question() {
    let bed = FedBed::start(1).await.unwrap();
    let a = bed
        .create_on_node(
            0,
            json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "args": ["-c",
                "printf '\\n Do you want to proceed?\\n  1. Yes\\n  2. No\\n'; read a"]}),
        )
        .await
        .unwrap();
    let addr = format!("nodeb/{a}");
    let rows = wait_hub(&bed, "the question never reached the hub's row", |rows| {
        rows.iter().any(|r| {
            r["address"] == json!(addr) && r["question"]["options"] == json!(["Yes", "No"])
        })
    })
    .await;
    let row = rows.iter().find(|r| r["address"] == json!(addr)).unwrap();
    assert_eq!(row["question"]["text"], "Do you want to proceed?", "{row}");
}

/// `GET /sessions` on the hub with `If-None-Match` and paging (issue 46, item 4).
async fn hub_list(bed: &FedBed, query: &str, etag: Option<&str>) -> tuic_tests::Reply {
    let mut b = hyper::Request::builder()
        .method("GET")
        .uri(format!("/sessions{query}"))
        .header("host", "localhost");
    if let Some(t) = etag {
        b = b.header("if-none-match", t);
    }
    let req = b
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    tuic_tests::ipc_request(&bed.hub.socket, req).await.unwrap()
}

fn header(r: &tuic_tests::Reply, name: &str) -> Option<String> {
    r.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[tokio::test]
async fn the_hub_list_answers_304_while_unchanged_and_pages_by_cursor_across_hosts() {
    let bed = FedBed::start(1).await.unwrap();
    let shell =
        json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "args": ["-c", "exec sleep 60"]});
    for _ in 0..3 {
        bed.create_on_node(0, shell.clone()).await.unwrap();
        ipc(&bed.hub.socket, "POST", "/sessions", Some(shell.clone()))
            .await
            .unwrap();
    }
    let all = wait_hub(&bed, "six rows on the hub", |r| r.len() == 6).await;
    // A whole list carries its tag; asking again with it costs no body while nothing changed.
    // (A row whose state settles between the two reads changes the tag: read again, bounded.)
    let mut tries = 0;
    let (full, etag) = loop {
        tries += 1;
        let full = hub_list(&bed, "", None).await;
        assert_eq!(full.status, 200);
        let etag = header(&full, "etag").expect("an ETag");
        assert_eq!(header(&full, "cache-control").as_deref(), Some("no-cache"));
        let same = hub_list(&bed, "", Some(&etag)).await;
        if same.status == 304 || tries == 5 {
            assert_eq!(
                (same.status, same.body.len()),
                (304, 0),
                "after {tries} tries"
            );
            assert_eq!(header(&same, "etag").as_deref(), Some(etag.as_str()));
            break (full, etag);
        }
    };
    // Pages of two, local rows first, then nodeb's, follow each other by cursor.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let q = match &cursor {
            None => "?limit=2".to_owned(),
            Some(c) => format!("?limit=2&cursor={}", c.replace('/', "%2F")),
        };
        let r = hub_list(&bed, &q, None).await;
        assert_eq!(r.status, 200, "{q}: {}", String::from_utf8_lossy(&r.body));
        let rows: Vec<Value> = serde_json::from_slice(&r.body).unwrap();
        assert!(rows.len() <= 2);
        paged.extend(rows);
        cursor = header(&r, "x-next-cursor");
        if cursor.is_none() {
            break;
        }
    }
    let ids = |rows: &[Value]| -> Vec<String> {
        rows.iter()
            .map(|r| {
                r["address"]
                    .as_str()
                    .or(r["session_id"].as_str())
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(ids(&paged), ids(&all));
    assert!(paged[5]["is_remote"] == json!(true) && paged[0].get("is_remote").is_none());
    // A change on the other host changes the tag: the old one gets the whole new list.
    let rows: Vec<Value> = serde_json::from_slice(&full.body).unwrap();
    bed.create_on_node(0, shell.clone()).await.unwrap();
    wait_hub(&bed, "the seventh row", |r| r.len() == 7).await;
    let changed = hub_list(&bed, "", Some(&etag)).await;
    assert_eq!(changed.status, 200);
    assert_ne!(header(&changed, "etag").as_deref(), Some(etag.as_str()));
    let now: Vec<Value> = serde_json::from_slice(&changed.body).unwrap();
    assert_eq!(now.len(), rows.len() + 1);
    // Refusals: a bad limit, a cursor whose row has gone, an unknown parameter.
    for (q, status) in [
        ("?limit=0", 400),
        ("?limit=10001", 400),
        ("?limit=x", 400),
        ("?cursor=no-such-row", 410),
        ("?page=2", 400),
    ] {
        let r = hub_list(&bed, q, None).await;
        assert_eq!(
            r.status,
            status,
            "{q}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let gone = hub_list(&bed, "?cursor=no-such-row", None).await;
    assert_eq!(gone.json()["code"], "cursor_gone");
    assert!(gone.json()["error"].as_str().unwrap().contains("refetch"));
}

/// Polls `GET /sessions?since=REV` on the hub (bounded) until `pred` holds for the delta.
async fn wait_delta(bed: &FedBed, since: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        let r = hub_list(bed, &format!("?since={since}"), None).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let d = r.json();
        if pred(&d) {
            return d;
        }
        assert!(Instant::now() < deadline, "{what}: {d}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn addresses(rows: &Value) -> Vec<String> {
    rows.as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["address"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn the_hub_change_feed_names_added_changed_and_removed_rows_and_an_unknown_revision_is_gone()
{
    let bed = FedBed::start(1).await.unwrap();
    let shell =
        json!({"rows": 24, "cols": 80, "shell": "/bin/sh", "args": ["-c", "exec sleep 60"]});
    let keep = bed.create_on_node(0, shell.clone()).await.unwrap();
    bed.wait_listed(&format!("nodeb/{keep}"), LIMIT)
        .await
        .unwrap();
    let first = hub_list(&bed, "", None).await;
    let r0 = header(&first, "x-revision").expect("x-revision");
    assert!(header(&first, "etag").unwrap().contains(&r0));

    // A new row on the node: the delta carries it (and only what changed), with the next
    // revision.
    let a = bed.create_on_node(0, shell.clone()).await.unwrap();
    let addr = format!("nodeb/{a}");
    let d = wait_delta(&bed, &r0, "the new row never in the feed", |d| {
        addresses(&d["added"]).contains(&addr)
    })
    .await;
    assert!(
        !addresses(&d["added"]).contains(&format!("nodeb/{keep}")),
        "{d}"
    );
    assert!(d["removed"].as_array().unwrap().is_empty(), "{d}");
    let r1 = d["revision"].as_str().unwrap().to_owned();
    assert_ne!(r1, r0);

    // A rename is a change of that row.
    let node = bed.nodes[0].proc();
    let r = ipc(
        &node.socket,
        "PUT",
        &format!("/sessions/{a}/name"),
        Some(json!({"name": "fed-renamed"})),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    let d = wait_delta(&bed, &r1, "the rename never in the feed", |d| {
        d["changed"]
            .as_array()
            .unwrap()
            .iter()
            .chain(d["added"].as_array().unwrap())
            .any(|r| r["address"] == json!(addr) && r["display_name"] == "fed-renamed")
    })
    .await;
    let r2 = d["revision"].as_str().unwrap().to_owned();

    // A closed row is removed, by address.
    let r = ipc(&node.socket, "DELETE", &format!("/sessions/{a}"), None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let d = wait_delta(&bed, &r2, "the closed row never removed", |d| {
        d["removed"].as_array().unwrap().contains(&json!(addr))
    })
    .await;
    assert!(!addresses(&d["added"]).contains(&addr), "{d}");
    // Nothing new since the revision now: an empty delta.
    let now = d["revision"].as_str().unwrap().to_owned();
    let d = hub_list(&bed, &format!("?since={now}"), None).await.json();
    if d["revision"] == json!(now) {
        assert!(d["added"].as_array().unwrap().is_empty(), "{d}");
        assert!(d["removed"].as_array().unwrap().is_empty(), "{d}");
    }

    // A revision from another process (or older than the kept window) is gone: refetch.
    let mut parts: Vec<&str> = r0.split('.').collect();
    parts[0] = "1";
    for bad in [
        parts.join("."),
        "garbage".to_owned(),
        "0.0.999999999".to_owned(),
    ] {
        let r = hub_list(&bed, &format!("?since={bad}"), None).await;
        assert_eq!(r.status, 410, "{bad}: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["code"], "cursor_gone");
        assert!(r.json()["error"].as_str().unwrap().contains("refetch"));
    }
    // A change feed takes no paging.
    let r = hub_list(&bed, &format!("?since={r0}&limit=2"), None).await;
    assert_eq!(r.status, 400);
}

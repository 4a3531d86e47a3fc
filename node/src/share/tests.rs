use super::*;

fn shares(dir: &std::path::Path) -> Arc<Shares> {
    let store = Arc::new(Store::open(&dir.join("state.redb")).unwrap());
    Arc::new(
        Shares::open(ShareEnv {
            store,
            shutdown: CancellationToken::new(),
        })
        .unwrap(),
    )
}

#[tokio::test]
async fn a_token_checks_until_revoked_or_expired() {
    let d = tempfile::tempdir().unwrap();
    let s = shares(d.path());
    let (link, token) = s
        .create(
            "pty-1",
            vec!["tu-1".into()],
            Scope::ReadOnly,
            1_000,
            "local",
            10,
        )
        .unwrap();
    assert!(!token.contains(&link.token_hash));
    let g = s.check(&token, 500).unwrap();
    assert_eq!((g.session_id.as_str(), g.scope), ("pty-1", Scope::ReadOnly));
    assert_eq!(s.check("shr_wrong", 500).unwrap_err(), Refusal::Unknown);
    assert_eq!(s.check(&token, 1_010).unwrap_err(), Refusal::Expired);
    assert!(s.names_session(&link.id, "tu-1"));
    assert!(!s.names_session(&link.id, "tu-2"));
    let viewer = s.join(&link.id, "10.0.0.1".into(), 20);
    assert_eq!(s.list(Some("tu-1"))[0].1.len(), 1);
    drop(viewer);
    assert!(s.list(Some("pty-1"))[0].1.is_empty());
    s.revoke(&link.id, 600).unwrap().unwrap();
    assert!(g.ended.is_cancelled(), "revocation ends the link's streams");
    assert_eq!(s.check(&token, 700).unwrap_err(), Refusal::Revoked);
    // Links survive a restart, revoked ones stay revoked.
    drop(s);
    let again = shares(d.path());
    assert_eq!(again.check(&token, 700).unwrap_err(), Refusal::Revoked);
}

#[tokio::test]
async fn expiry_ends_the_streams() {
    let d = tempfile::tempdir().unwrap();
    let s = shares(d.path());
    let now = crate::logs::now_ms();
    let (_, token) = s
        .create("pty-1", vec![], Scope::Answer, 200, "local", now)
        .unwrap();
    let g = s.check(&token, now).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), g.ended())
        .await
        .expect("the link's end fires at expiry");
    assert!(crate::logs::now_ms() >= now + 200);
}

#[test]
fn the_scope_table() {
    use Scope::*;
    let ours = |id: &str| id == "pty-1" || id == "tu-1";
    let get = Method::GET;
    let post = Method::POST;
    let put = Method::PUT;
    let delete = Method::DELETE;
    let table: &[(Scope, &Method, &str, bool)] = &[
        (ReadOnly, &get, "/share/info", true),
        (ReadOnly, &get, "/sessions/pty-1", true),
        (ReadOnly, &get, "/sessions/tu-1/output", true),
        (ReadOnly, &get, "/sessions/pty-1/raw-ring", true),
        (ReadOnly, &get, "/sessions/pty-1/stream", true),
        (ReadOnly, &get, "/sessions/pty-1/terminal/lines", true),
        (ReadOnly, &get, "/sessions/pty-1/terminal/scroll-info", true),
        (ReadOnly, &get, "/sessions/pty-1/terminal/snapshot", true),
        (ReadOnly, &post, "/sessions/pty-1/write", false),
        (ReadOnly, &post, "/sessions/pty-1/input", false),
        (ReadOnly, &post, "/sessions/pty-1/submit", false),
        (ReadOnly, &post, "/sessions/pty-1/resize", false),
        (ReadOnly, &post, "/sessions/pty-1/answer", false),
        (
            ReadOnly,
            &post,
            "/sessions/pty-1/terminal/scroll-to-offset",
            false,
        ),
        (ReadOnly, &put, "/sessions/pty-1/name", false),
        (ReadOnly, &delete, "/sessions/pty-1", false),
        (ReadOnly, &get, "/sessions/pty-2/output", false),
        (ReadOnly, &get, "/sessions/pty-2/stream", false),
        (ReadOnly, &get, "/sessions", false),
        (ReadOnly, &post, "/sessions", false),
        (ReadOnly, &get, "/events", false),
        (ReadOnly, &get, "/config", false),
        (ReadOnly, &put, "/config", false),
        (ReadOnly, &post, "/mcp", false),
        (ReadOnly, &get, "/mcp/peer", false),
        (ReadOnly, &get, "/fs/read-external", false),
        (ReadOnly, &post, "/fs/upload-copy", false),
        (ReadOnly, &get, "/audit", false),
        (ReadOnly, &get, "/shares", false),
        (ReadOnly, &post, "/shares", false),
        (ReadOnly, &get, "/secrets", false),
        (ReadOnly, &post, "/secrets/form", false),
        (ReadOnly, &get, "/logs", false),
        (ReadOnly, &get, "/auth/sessions", false),
        (ReadOnly, &post, "/remote/update", false),
        (Answer, &post, "/sessions/pty-1/answer", true),
        (Answer, &post, "/sessions/tu-1/answer", true),
        (Answer, &get, "/sessions/pty-1/stream", true),
        (Answer, &post, "/sessions/pty-2/answer", false),
        (Answer, &post, "/sessions/pty-1/write", false),
        (Answer, &post, "/sessions/pty-1/input", false),
        (Answer, &get, "/sessions", false),
        (Answer, &post, "/mcp", false),
        (Answer, &get, "/config", false),
    ];
    for (scope, method, path, allowed) in table {
        assert_eq!(
            scope_allows(*scope, method, path, ours).is_ok(),
            *allowed,
            "{scope:?} {method} {path}"
        );
    }
}

#[test]
fn ttl_parsing() {
    assert_eq!(parse_ttl("1h"), Some(3_600_000));
    assert_eq!(parse_ttl("90"), Some(90_000));
    assert_eq!(parse_ttl("15m"), Some(900_000));
    assert_eq!(parse_ttl("2d"), Some(172_800_000));
    assert_eq!(parse_ttl("0s"), None);
    assert_eq!(parse_ttl("1y"), None);
    assert_eq!(parse_ttl(""), None);
}

use super::*;

fn secrets(dir: &std::path::Path) -> Secrets {
    Secrets::open(SecretsEnv {
        vault: Arc::new(Vault::open(dir, dir.join("secrets.json"), false)),
        store: Arc::new(Store::open(&dir.join("state.redb")).unwrap()),
        bus: Arc::new(Bus::default()),
        redactions: Arc::default(),
    })
    .unwrap()
}

#[test]
fn names_are_environment_variable_names() {
    for ok in ["TOKEN", "_x", "GITHUB_TOKEN_2", &"A".repeat(64)] {
        assert!(check_name(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        "../etc/passwd",
        "a/b",
        "a.b",
        "1TOKEN",
        "TOK EN",
        "tok\0en",
        "ÄTOKEN",
        &"A".repeat(65),
    ] {
        assert_eq!(check_name(bad).unwrap_err().code(), "invalid_name", "{bad}");
    }
}

#[test]
fn masking_is_by_value_and_counts() {
    assert_eq!(
        mask(b"a hunter2 b hunter2", "hunter2"),
        ("a [REDACTED] b [REDACTED]".into(), 2)
    );
    assert_eq!(mask(b"nothing", "hunter2"), ("nothing".into(), 0));
    // A value cut at the end of captured output is masked too.
    assert_eq!(mask(b"x hunte", "hunter2"), ("x [REDACTED]".into(), 1));
}

#[test]
fn a_form_stores_once_and_a_run_sees_the_value_but_never_returns_it() {
    let d = tempfile::tempdir().unwrap();
    let s = secrets(d.path());
    let mut events = s.env.bus.subscribe();
    let form = s.request("TOKEN", "deploy", "agent:x", 1_000).unwrap();
    assert!(s.form_open(1_000));
    assert!(events.try_recv().is_ok(), "the request is announced");
    assert_eq!(
        s.request("TOKEN", "again", "agent:x", 1_001).unwrap().nonce,
        form.nonce
    );
    assert_eq!(
        s.submit("forged", Zeroizing::new("v".into()), 1_002)
            .unwrap_err()
            .code(),
        "bad_nonce"
    );
    assert_eq!(
        s.submit(
            &form.nonce,
            Zeroizing::new("x".repeat(MAX_VALUE_BYTES + 1)),
            1_002
        )
        .unwrap_err()
        .code(),
        "secret_too_large"
    );
    let value = "s3cr3t-value-0123456789";
    assert_eq!(
        s.submit(&form.nonce, Zeroizing::new(value.into()), 1_003)
            .unwrap(),
        "TOKEN"
    );
    assert!(!s.form_open(1_004));
    assert_eq!(
        s.submit(&form.nonce, Zeroizing::new(value.into()), 1_004)
            .unwrap_err()
            .code(),
        "bad_nonce",
        "a nonce answers once"
    );
    let argv: Vec<String> = [
        "sh",
        "-c",
        "printf %s \"$TOKEN\" | sha256sum; echo \"$TOKEN\"",
    ]
    .map(String::from)
    .to_vec();
    let out = s
        .run("TOKEN", &argv, None, Duration::from_secs(10))
        .unwrap();
    let want = hex::encode(Sha256::digest(value.as_bytes()));
    assert!(out.stdout.contains(&want), "{out:?}");
    assert!(!out.stdout.contains(value));
    assert_eq!(out.masked, 1);
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(
        s.list()
            .unwrap()
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>(),
        ["TOKEN"]
    );
    assert!(s.remove("TOKEN").unwrap());
    assert_eq!(
        s.run("TOKEN", &argv, None, Duration::from_secs(10))
            .unwrap_err()
            .code(),
        "secret_missing"
    );
}

#[test]
fn forms_expire() {
    let d = tempfile::tempdir().unwrap();
    let s = secrets(d.path());
    let f = s.request("A", "", "x", 0).unwrap();
    assert!(!s.form_open(FORM_TTL_MS));
    assert_eq!(
        s.submit(&f.nonce, Zeroizing::new("v".into()), FORM_TTL_MS)
            .unwrap_err()
            .code(),
        "bad_nonce"
    );
}

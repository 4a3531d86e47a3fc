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

#[test]
fn a_consent_template_matches_only_its_exact_name_argv_and_directory() {
    let d = tempfile::tempdir().unwrap();
    let s = secrets(d.path());
    let argv: Vec<String> = ["sh", "-c", "echo $T"].map(String::from).to_vec();
    assert!(!s.consented("T", &argv, Some("/tmp")).unwrap());
    let req = s
        .request_consent("T", &argv, Some("/tmp"), "agent:x", 1)
        .unwrap();
    // A repeated request points at the open one.
    assert_eq!(
        s.request_consent("T", &argv, Some("/tmp"), "agent:x", 2)
            .unwrap()
            .nonce,
        req.nonce
    );
    assert!(matches!(
        s.answer_consent("forged", true, "local", 3),
        Err(SecretError::BadNonce)
    ));
    let (_, t) = s.answer_consent(&req.nonce, true, "local", 3).unwrap();
    let t = t.unwrap();
    assert!(s.consented("T", &argv, Some("/tmp")).unwrap());
    // Answered once.
    assert!(s.answer_consent(&req.nonce, true, "local", 4).is_err());
    // Each part must match exactly.
    let mut longer = argv.clone();
    longer.push("x".into());
    assert!(!s.consented("T", &longer, Some("/tmp")).unwrap());
    assert!(!s.consented("T", &argv[..2], Some("/tmp")).unwrap());
    assert!(!s.consented("T", &argv, Some("/tmp/")).unwrap());
    assert!(!s.consented("T", &argv, None).unwrap());
    assert!(!s.consented("U", &argv, Some("/tmp")).unwrap());
    // A refused request stores nothing; a forgotten template stops matching.
    let other = s.request_consent("T", &longer, None, "agent:x", 5).unwrap();
    let (_, none) = s.answer_consent(&other.nonce, false, "local", 6).unwrap();
    assert!(none.is_none());
    assert!(!s.consented("T", &longer, None).unwrap());
    assert!(s.forget(&t.id).unwrap());
    assert!(!s.consented("T", &argv, Some("/tmp")).unwrap());
    // Bad input.
    assert!(s.allow("../x", &argv, None, "local", 7).is_err());
    assert!(s.allow("T", &[], None, "local", 7).is_err());
}

#[test]
fn a_stored_value_is_published_for_redaction_and_withdrawn_on_remove() {
    let d = tempfile::tempdir().unwrap();
    let red = Arc::new(crate::session::valuemask::Redactions::default());
    let open = || {
        Secrets::open(SecretsEnv {
            vault: Arc::new(Vault::open(d.path(), d.path().join("secrets.json"), false)),
            store: Arc::new(Store::open(&d.path().join("state.redb")).unwrap()),
            bus: Arc::new(Bus::default()),
            redactions: red.clone(),
        })
        .unwrap()
    };
    let s = open();
    s.store("TOKEN", "value-to-hide-123", 1).unwrap();
    let mut out = b"a value-to-hide-123 b".to_vec();
    red.mask_complete(&mut out);
    assert_eq!(out, b"a ***************** b".to_vec());
    drop(s);
    // A fresh service over the same vault publishes it again.
    red.remove("TOKEN");
    let s = open();
    let mut out = b"value-to-hide-123".to_vec();
    red.mask_complete(&mut out);
    assert_eq!(out, vec![b'*'; 17]);
    s.remove("TOKEN").unwrap();
    let mut out = b"value-to-hide-123".to_vec();
    red.mask_complete(&mut out);
    assert_eq!(out, b"value-to-hide-123".to_vec());
}

//! The review service's pure parts: neutralising terminal escapes, the one message a review
//! becomes. Delivery and landing are tested end to end (`tests/tests/review.rs`) and on real
//! repositories (`land` tests below).

use super::*;

#[test]
fn escapes_and_controls_are_neutralised() {
    let evil = "fix\x1b]0;pwned\x07 this\x1b[201~\rrm -rf /\u{9b}2J\x7f";
    let n = neutralise(evil);
    assert!(!n.contains('\x1b'));
    assert!(!n.contains('\x07'));
    assert!(!n.contains('\r'));
    assert!(!n.contains('\x7f'));
    assert!(!n.contains('\u{9b}'));
    assert!(n.contains("fix\u{241b}]0;pwned"), "{n}");
    assert!(n.contains("\nrm -rf /"), "{n}");
    assert_eq!(neutralise("a\tb\nc"), "a\tb\nc");
}

#[test]
fn one_message_names_every_position() {
    let r = Review {
        id: "r".into(),
        session: "s".into(),
        path: "/p".into(),
        state: "draft".into(),
        summary: "Two things.".into(),
        comments: vec![
            Comment {
                file: "src/a.rs".into(),
                line: 3,
                side: "new".into(),
                text: "rename this".into(),
                excerpt: Some("let x = 1;".into()),
            },
            Comment {
                file: "b.txt".into(),
                line: 7,
                side: "old".into(),
                text: "why removed?".into(),
                excerpt: None,
            },
        ],
        created_ms: 0,
        updated_ms: 0,
        delivered_via: None,
        message_id: None,
        error: None,
    };
    let m = render(&r);
    assert!(m.contains("src/a.rs:3: rename this"), "{m}");
    assert!(m.contains("b.txt:7 (old): why removed?"), "{m}");
    assert!(m.contains("Two things."));
    assert!(m.starts_with("Review of your changes (2 comments)"));
}

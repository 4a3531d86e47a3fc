//! `tuic-bridge install` with the real binary: one revision per distinct build, old ones kept.

use std::path::Path;
use std::process::Command;

use tuic_tests::bridge::{bin, clean_command};

fn install(sandbox: &Path, exe: &Path, cfg: &Path) -> String {
    let out = clean_command(exe, sandbox)
        .arg("install")
        .arg("--config-dir")
        .arg(cfg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn install_twice_publishes_one_revision_and_a_new_build_a_second() {
    let sandbox = tempfile::tempdir().unwrap();
    let cfg = sandbox.path().join("cfg");
    let a = sandbox.path().join("a");
    std::fs::create_dir_all(&a).unwrap();
    let exe_a = a.join("tuic-bridge");
    std::fs::copy(bin("tuic-bridge"), &exe_a).unwrap();

    let first = install(sandbox.path(), &exe_a, &cfg);
    let again = install(sandbox.path(), &exe_a, &cfg);
    assert_eq!(first, again);
    assert!(
        first.starts_with(cfg.join("mcp-bridge").to_str().unwrap()),
        "{first}"
    );
    assert_eq!(
        std::fs::read_dir(cfg.join("mcp-bridge")).unwrap().count(),
        1
    );
    let before = std::fs::read(&first).unwrap();

    // A different build: trailing bytes change the hash and leave an ELF runnable.
    let b = sandbox.path().join("b");
    std::fs::create_dir_all(&b).unwrap();
    let exe_b = b.join("tuic-bridge");
    let mut bytes = std::fs::read(&exe_a).unwrap();
    bytes.extend_from_slice(b"another build");
    std::fs::write(&exe_b, bytes).unwrap();
    std::fs::set_permissions(&exe_b, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let second = install(sandbox.path(), &exe_b, &cfg);
    assert_ne!(first, second);
    assert_eq!(
        std::fs::read_dir(cfg.join("mcp-bridge")).unwrap().count(),
        2
    );
    assert_eq!(
        std::fs::read(&first).unwrap(),
        before,
        "the old revision is intact"
    );

    for published in [&first, &second] {
        let out = Command::new(published).arg("--version").output().unwrap();
        assert!(out.status.success(), "{published} runs");
    }
}

#[test]
fn install_points_claude_configs_at_the_published_bridge() {
    let sandbox = tempfile::tempdir().unwrap();
    let cfg = sandbox.path().join("cfg");
    let home = sandbox.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let claude = home.join(".claude.json");
    std::fs::write(
        &claude,
        r#"{"mcpServers":{"tuic":{"command":"/src/tuic/target/debug/tuic-bridge","args":[]},
            "other":{"command":"/usr/bin/other-server"}}}"#,
    )
    .unwrap();
    let published = install(sandbox.path(), &bin("tuic-bridge"), &cfg);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&claude).unwrap()).unwrap();
    assert_eq!(doc["mcpServers"]["tuic"]["command"], published.as_str());
    assert_eq!(
        doc["mcpServers"]["other"]["command"],
        "/usr/bin/other-server"
    );
}

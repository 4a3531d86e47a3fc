//! Running a node as a service of the machine: the systemd user unit (launchd agent on
//! macOS) that `install-service` writes and enables, consistent backups of the store while
//! the node runs, restores while it is stopped, and the primary instance's repair of agent
//! MCP configs at start (the spec's installed-bridge lifetime, done by the adjacent
//! `tuic-bridge install --if-needed`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use sha2::Digest;

use crate::paths::Paths;
use crate::store::Store;

/// The systemd user unit template (`deploy/systemd/tuic.service`); `@NAME@`, `@DESCRIPTION@`
/// and `@EXEC@` are filled in.
const SYSTEMD_TEMPLATE: &str = include_str!("../../../deploy/systemd/tuic.service");
/// The launchd agent template (`deploy/launchd/tuic.plist`); `@LABEL@`, `@PROGRAM_ARGS@` and
/// `@LOG@` are filled in.
const LAUNCHD_TEMPLATE: &str = include_str!("../../../deploy/launchd/tuic.plist");

/// Where a unit goes and whether to enable it.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// The unit directory (default: `~/.config/systemd/user`, `~/Library/LaunchAgents`).
    pub unit_dir: Option<PathBuf>,
    /// Write the unit only.
    pub no_enable: bool,
}

/// What `install-service` did.
#[derive(Debug)]
pub struct Installed {
    /// The unit file written.
    pub unit: PathBuf,
    /// Whether enabling and starting it succeeded.
    pub enabled: bool,
    /// What to tell the user: how to see logs, or why enabling failed and what to run.
    pub notes: Vec<String>,
}

fn quote_systemd(arg: &str) -> String {
    if !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-=:@+,".contains(c))
    {
        arg.to_owned()
    } else {
        format!(
            "\"{}\"",
            arg.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('%', "%%")
        )
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The unit file text for `name` running `exec` (program, then arguments).
pub fn systemd_unit(name: &str, exec: &[String]) -> String {
    let description = if name.contains("hub") {
        "tuic hub (a node that also federates the other machines)"
    } else {
        "tuic node (terminals, files and agent mail for this machine)"
    };
    SYSTEMD_TEMPLATE
        .replace("@NAME@", name)
        .replace("@DESCRIPTION@", description)
        .replace(
            "@EXEC@",
            &exec
                .iter()
                .map(|a| quote_systemd(a))
                .collect::<Vec<_>>()
                .join(" "),
        )
}

/// The launchd agent text for `name` running `exec`.
pub fn launchd_plist(name: &str, exec: &[String], log: &Path) -> String {
    let args: String = exec
        .iter()
        .map(|a| format!("    <string>{}</string>\n", xml_escape(a)))
        .collect();
    LAUNCHD_TEMPLATE
        .replace("@LABEL@", &format!("dev.tuic.{name}"))
        .replace("@PROGRAM_ARGS@", args.trim_end_matches('\n'))
        .replace("@LOG@", &xml_escape(&log.to_string_lossy()))
}

fn run(cmd: &mut Command) -> Result<(), String> {
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{:?} failed ({}): {}",
            cmd,
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("{cmd:?}: {e}")),
    }
}

/// Writes the service unit for the binary `name` serving `paths` and enables it.
pub fn install(name: &str, paths: &Paths, opts: &InstallOptions) -> anyhow::Result<Installed> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
    let mut exec = vec![exe.to_string_lossy().into_owned(), "serve".into()];
    exec.push("--config-dir".into());
    exec.push(paths.config_dir.to_string_lossy().into_owned());
    if let Some(i) = paths.instance.id() {
        exec.push("--instance".into());
        exec.push(i.to_owned());
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let macos = cfg!(target_os = "macos");
    let dir = match (&opts.unit_dir, &home) {
        (Some(d), _) => d.clone(),
        (None, Some(h)) if macos => h.join("Library/LaunchAgents"),
        (None, Some(h)) => h.join(".config/systemd/user"),
        (None, None) => bail!("HOME is not set; pass --unit-dir"),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let unit_name = match paths.instance.id() {
        Some(i) => format!("{name}@{i}"),
        None => name.to_owned(),
    };
    let (unit, text) = if macos {
        let log = paths.config_dir.join(format!("{name}.log"));
        (
            dir.join(format!("dev.tuic.{unit_name}.plist")),
            launchd_plist(&unit_name, &exec, &log),
        )
    } else {
        (
            dir.join(format!("{unit_name}.service")),
            systemd_unit(&unit_name, &exec),
        )
    };
    crate::config::write_file_atomic(&unit, text.as_bytes(), 0o644)
        .with_context(|| format!("writing {}", unit.display()))?;
    let mut notes = Vec::new();
    let mut enabled = false;
    if opts.no_enable {
        notes.push(if macos {
            format!("enable it with: launchctl load -w {}", unit.display())
        } else {
            format!("enable it with: systemctl --user daemon-reload && systemctl --user enable --now {unit_name}")
        });
    } else {
        let r = if macos {
            run(Command::new("launchctl").arg("load").arg("-w").arg(&unit))
        } else {
            run(Command::new("systemctl").args(["--user", "daemon-reload"])).and_then(|()| {
                run(Command::new("systemctl").args(["--user", "enable", "--now", &unit_name]))
            })
        };
        match r {
            Ok(()) => enabled = true,
            Err(e) => notes.push(format!(
                "the unit is written but enabling it failed: {e}; run it yourself once a user service manager runs (e.g. `loginctl enable-linger $USER`, then `systemctl --user enable --now {unit_name}`)"
            )),
        }
    }
    notes.push(if macos {
        format!(
            "logs: tail -f {}",
            paths.config_dir.join(format!("{name}.log")).display()
        )
    } else {
        format!("logs: journalctl --user -u {unit_name} -f")
    });
    Ok(Installed {
        unit,
        enabled,
        notes,
    })
}

/// What a backup wrote.
#[derive(Debug, serde::Serialize)]
pub struct Backup {
    /// The file written.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Its SHA-256 (hex).
    pub sha256: String,
}

fn sha256_hex(path: &Path) -> anyhow::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(hex::encode(h.finalize()))
}

/// Copies the store at `src` (held open by this process as `store`) to `dest` while no write
/// can commit: a write transaction is held for the copy and then aborted, so the copy is
/// exactly the last committed state. The copy goes to a temp file beside `dest` and is renamed
/// into place; an existing `dest` is refused.
pub fn backup_store(store: &Store, src: &Path, dest: &Path) -> anyhow::Result<Backup> {
    if dest.exists() {
        bail!("{} exists; choose a new file", dest.display());
    }
    let parent = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = parent.join(format!(
        ".{}.tuic-tmp-{}",
        dest.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let tx = store
        .database()
        .begin_write()
        .context("pausing writes for the copy")?;
    let copied = std::fs::copy(src, &tmp)
        .with_context(|| format!("copying {} to {}", src.display(), tmp.display()));
    tx.abort().context("resuming writes")?;
    let bytes = copied?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dest).with_context(|| format!("publishing {}", dest.display()))?;
    Ok(Backup {
        path: dest.to_path_buf(),
        bytes,
        sha256: sha256_hex(dest)?,
    })
}

/// Backs up a stopped node's store (this process opens it).
pub fn backup_offline(paths: &Paths, dest: &Path) -> anyhow::Result<Backup> {
    let src = paths.store_file();
    if !src.exists() {
        bail!("no store at {} (the node never ran here)", src.display());
    }
    let store = Store::open(&src)?;
    backup_store(&store, &src, dest)
}

/// Replaces a stopped node's store with `backup` after checking that it opens as a tuic
/// store; the replaced file is kept as `state.redb.before-restore-<unix secs>`.
pub fn restore(paths: &Paths, backup: &Path) -> anyhow::Result<(PathBuf, Option<PathBuf>)> {
    let dest = paths.store_file();
    let tmp = paths
        .config_dir
        .join(format!("state.redb.restore-tmp-{}", std::process::id()));
    std::fs::copy(backup, &tmp)
        .with_context(|| format!("reading the backup {}", backup.display()))?;
    if let Err(e) = Store::open(&tmp) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.context(format!("{} is not a tuic store", backup.display())));
    }
    let kept = if dest.exists() {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let kept = paths
            .config_dir
            .join(format!("state.redb.before-restore-{secs}"));
        std::fs::rename(&dest, &kept)?;
        Some(kept)
    } else {
        None
    };
    std::fs::rename(&tmp, &dest)?;
    Ok((dest, kept))
}

/// The primary instance's repair of agent MCP configs at start: runs the `tuic-bridge` beside
/// this binary with `install --if-needed` (it publishes and repoints only when an eligible
/// integration needs it) on a thread of its own, and logs what it said. Named instances and a
/// missing adjacent bridge do nothing.
pub fn repair_bridge_at_start(paths: &Paths) {
    // The primary instance is the default one in the default config dir: a node started with
    // another `--config-dir` (a test, a second setup) must not repoint the user's agents at
    // a copy under a directory that may not outlive it.
    let env = crate::paths::LocationEnv::from_process();
    let default_dir = tuic_proto::endpoint::base_config_dir(
        None,
        None,
        env.xdg_config_home.as_deref(),
        env.home.as_deref(),
    )
    .map(|(d, _)| d);
    if paths.instance.id().is_some()
        || default_dir.as_deref() != Some(paths.config_dir.as_path())
        || std::env::var_os("TUIC_NO_BRIDGE_REPAIR").is_some()
    {
        return;
    }
    let Some(bridge) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("tuic-bridge")))
        .filter(|b| b.is_file())
    else {
        tracing::debug!("no adjacent tuic-bridge: agent MCP configs are not repaired");
        return;
    };
    let config_dir = paths.config_dir.clone();
    let spawned = std::thread::Builder::new()
        .name("bridge-repair".into())
        .spawn(move || {
            let out = Command::new(&bridge)
                .args(["install", "--if-needed", "--config-dir"])
                .arg(&config_dir)
                .env_remove("TUIC_SOCKET")
                .output();
            match out {
                Ok(o) => {
                    for line in String::from_utf8_lossy(&o.stderr).lines() {
                        tracing::info!(target: "bridge_repair", "{line}");
                    }
                    if !o.status.success() {
                        tracing::warn!(target: "bridge_repair", status = %o.status, "tuic-bridge install --if-needed failed; agent configs unchanged");
                    }
                }
                Err(e) => {
                    tracing::warn!(target: "bridge_repair", "running {}: {e}", bridge.display())
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("bridge repair thread: {e}");
    }
}

/// Prints `installed` for the user.
pub fn print_installed(i: &Installed) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "wrote {}{}",
        i.unit.display(),
        if i.enabled {
            " (enabled and started)"
        } else {
            ""
        }
    );
    for n in &i.notes {
        let _ = writeln!(err, "{n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_quote_their_arguments() {
        let u = systemd_unit(
            "tuic-node",
            &[
                "/usr/bin/tuic-node".into(),
                "serve".into(),
                "--config-dir".into(),
                "/home/a b/%x".into(),
            ],
        );
        assert!(
            u.contains("ExecStart=/usr/bin/tuic-node serve --config-dir \"/home/a b/%%x\""),
            "{u}"
        );
        assert!(u.contains("Description=tuic node"));
        let p = launchd_plist(
            "tuic-hub",
            &["/x/tuic-hub".into(), "a<b".into()],
            Path::new("/l.log"),
        );
        assert!(p.contains("<string>dev.tuic.tuic-hub</string>"), "{p}");
        assert!(p.contains("<string>a&lt;b</string>"), "{p}");
    }
}

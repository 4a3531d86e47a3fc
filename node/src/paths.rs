//! Where this node keeps its files: config dir resolution and the instance's IPC socket.
//!
//! This is the one place that reads the environment for locations (`TUIC_CONFIG_DIR`,
//! `XDG_CONFIG_HOME`, `HOME`, `TMPDIR`, `TUIC_SOCKET`, `TUIC_APP_INSTANCE`); the naming rules
//! themselves are the pure [`tuic_proto::endpoint`] functions.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tuic_proto::endpoint::{self, AppInstance, EndpointInputs};

/// Resolved locations of this node.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The instance this process serves.
    pub instance: AppInstance,
    /// Holds `config.json`, `state.redb`, the secrets file and (default instance) the socket.
    pub config_dir: PathBuf,
    /// The IPC socket path.
    pub socket: PathBuf,
}

/// Environment values that location resolution reads, gathered in one place.
#[derive(Debug, Clone, Default)]
pub struct LocationEnv {
    /// `TUIC_CONFIG_DIR`.
    pub tuic_config_dir: Option<PathBuf>,
    /// `XDG_CONFIG_HOME`.
    pub xdg_config_home: Option<PathBuf>,
    /// `HOME`.
    pub home: Option<PathBuf>,
    /// `TMPDIR`.
    pub tmpdir: Option<PathBuf>,
    /// `TUIC_SOCKET`.
    pub socket: Option<PathBuf>,
    /// `TUIC_APP_INSTANCE`.
    pub instance: Option<String>,
}

impl LocationEnv {
    /// Reads the process environment (empty values count as unset).
    pub fn from_process() -> Self {
        fn var(name: &str) -> Option<String> {
            std::env::var(name).ok().filter(|v| !v.is_empty())
        }
        Self {
            tuic_config_dir: var("TUIC_CONFIG_DIR").map(PathBuf::from),
            xdg_config_home: var("XDG_CONFIG_HOME").map(PathBuf::from),
            home: var("HOME").map(PathBuf::from),
            tmpdir: var("TMPDIR").map(PathBuf::from),
            socket: var("TUIC_SOCKET").map(PathBuf::from),
            instance: var("TUIC_APP_INSTANCE"),
        }
    }
}

impl Paths {
    /// Resolves the config dir (`--config-dir`, else `TUIC_CONFIG_DIR`, else
    /// `$XDG_CONFIG_HOME/tuicommander`, else `~/.config/tuicommander`) and the socket.
    pub fn resolve(
        config_dir_flag: Option<&Path>,
        instance_flag: Option<&str>,
        env: &LocationEnv,
    ) -> anyhow::Result<Self> {
        let Some((base, explicit)) = endpoint::base_config_dir(
            config_dir_flag,
            env.tuic_config_dir.as_deref(),
            env.xdg_config_home.as_deref(),
            env.home.as_deref(),
        ) else {
            bail!("cannot find a config dir: set --config-dir, TUIC_CONFIG_DIR or HOME");
        };
        let base = absolute(&base)?;
        let instance = AppInstance::from_id(instance_flag.or(env.instance.as_deref()));
        let temp_dir = env.tmpdir.clone().unwrap_or_else(|| PathBuf::from("/tmp"));
        let ep = endpoint::resolve(&EndpointInputs {
            instance: &instance,
            base_config_dir: &base,
            config_dir_explicit: explicit,
            temp_dir: &temp_dir,
            uid: rustix::process::getuid().as_raw(),
            socket_override: env.socket.as_deref(),
        });
        Ok(Self {
            instance,
            config_dir: ep.config_dir,
            socket: ep.socket,
        })
    }

    /// Creates the config dir (mode 0700) if needed.
    pub fn ensure_dir(&self) -> anyhow::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.config_dir)
            .with_context(|| format!("creating config dir {}", self.config_dir.display()))
    }

    /// Takes group and other access off the config dir and the entries tuic keeps in it
    /// (owner bits stay: 0644 becomes 0600, 0755 becomes 0700), so files an earlier version
    /// or a hand edit left readable (the store was created 0644) are this user's alone. Only
    /// tuic's own names are touched — a config dir pointed at a shared directory keeps its
    /// other files as they are. Symlinks are not followed. Best effort: an entry that cannot
    /// be changed is logged and skipped.
    pub fn narrow_modes(&self) {
        narrow_tree(&self.config_dir, NARROW_DEPTH);
        for name in OWN_ENTRIES {
            narrow_tree(&self.config_dir.join(name), 0);
        }
    }

    /// `config.json`.
    pub fn config_file(&self) -> PathBuf {
        self.config_dir.join("config.json")
    }
    /// `state.redb`.
    pub fn store_file(&self) -> PathBuf {
        self.config_dir.join("state.redb")
    }
    /// The lock a running node holds for its whole life.
    pub fn node_lock_file(&self) -> PathBuf {
        self.config_dir.join("node.lock")
    }
    /// The 0600 secrets file used when no OS keyring answers.
    pub fn secrets_file(&self) -> PathBuf {
        self.config_dir.join("secrets.json")
    }
    /// `mcp-upstreams.json`: the upstream MCP servers this node proxies.
    pub fn upstreams_file(&self) -> PathBuf {
        self.config_dir.join("mcp-upstreams.json")
    }
}

/// Expands a leading `~` or `~/` of a user-supplied path (command, argument, cwd) to `$HOME`.
pub fn expand_tilde(s: &str) -> String {
    expand_tilde_with(s, std::env::var_os("HOME").map(PathBuf::from).as_deref())
}

/// [`expand_tilde`] with the home dir given; `~user` forms and inner tildes stay as they are.
pub fn expand_tilde_with(s: &str, home: Option<&Path>) -> String {
    let Some(home) = home else {
        return s.to_owned();
    };
    if s == "~" {
        return home.display().to_string();
    }
    match s.strip_prefix("~/") {
        Some(rest) => home.join(rest).display().to_string(),
        None => s.to_owned(),
    }
}

fn absolute(p: &Path) -> anyhow::Result<PathBuf> {
    if p.is_absolute() {
        Ok(p.to_path_buf())
    } else {
        Ok(std::env::current_dir()
            .context("reading the current dir")?
            .join(p))
    }
}

/// How deep [`Paths::narrow_modes`] descends into tuic's own directories.
const NARROW_DEPTH: usize = 4;

/// The entries tuic creates in a config dir (files, and directories it owns whole).
const OWN_ENTRIES: &[&str] = &[
    "config.json",
    "config.json.lock",
    "state.redb",
    "secrets.json",
    "secrets.key",
    "node.lock",
    "mcp.sock",
    "mcp-upstreams.json",
    "mcp-upstreams.json.lock",
    "activity.json",
    "quic-cert.der",
    "quic-key.der",
    "holders",
    "captures",
    "mcp-bridge",
];

fn narrow_tree(path: &Path, depth: usize) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    // Files and directories only. A socket's mode is its creator's statement, and the holder
    // adoption reads it as evidence (a socket open to everyone is not one this node made):
    // narrowing it here would turn a foreign socket into one that looks like ours.
    if !(meta.is_file() || meta.is_dir()) {
        return;
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        let narrowed = mode & !0o077;
        match std::fs::set_permissions(path, std::fs::Permissions::from_mode(narrowed)) {
            Ok(()) => {
                tracing::info!(path = %path.display(), from = format!("{mode:o}"), to = format!("{narrowed:o}"), "narrowed a config-dir entry to this user")
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "could not narrow a config-dir entry's mode")
            }
        }
    }
    if meta.is_dir()
        && depth < NARROW_DEPTH
        && let Ok(entries) = std::fs::read_dir(path)
    {
        for e in entries.flatten() {
            narrow_tree(&e.path(), depth + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tilde_expansion() {
        let h = Some(std::path::Path::new("/home/u"));
        assert_eq!(super::expand_tilde_with("~", h), "/home/u");
        assert_eq!(super::expand_tilde_with("~/bin/x", h), "/home/u/bin/x");
        assert_eq!(super::expand_tilde_with("~other/x", h), "~other/x");
        assert_eq!(super::expand_tilde_with("/a/~/b", h), "/a/~/b");
        assert_eq!(super::expand_tilde_with("~/x", None), "~/x");
    }

    use super::*;

    #[test]
    fn precedence_flag_env_xdg_home() {
        let mut env = LocationEnv {
            home: Some("/h".into()),
            ..Default::default()
        };
        assert_eq!(
            Paths::resolve(None, None, &env).unwrap().config_dir,
            Path::new("/h/.config/tuicommander")
        );
        env.xdg_config_home = Some("/x".into());
        assert_eq!(
            Paths::resolve(None, None, &env).unwrap().config_dir,
            Path::new("/x/tuicommander")
        );
        env.tuic_config_dir = Some("/t".into());
        let p = Paths::resolve(None, None, &env).unwrap();
        assert_eq!(p.config_dir, Path::new("/t"));
        assert_eq!(p.socket, Path::new("/t/mcp.sock"));
        let p = Paths::resolve(Some(Path::new("/f")), None, &env).unwrap();
        assert_eq!(p.config_dir, Path::new("/f"));
    }

    #[test]
    fn named_instance_from_env_or_flag() {
        let env = LocationEnv {
            home: Some("/h".into()),
            instance: Some("envinst".into()),
            ..Default::default()
        };
        let p = Paths::resolve(None, None, &env).unwrap();
        assert_eq!(
            p.config_dir,
            Path::new("/h/.config/tuicommander/instances/envinst")
        );
        assert!(p.socket.starts_with("/tmp"));
        let q = Paths::resolve(None, Some("flag"), &env).unwrap();
        assert_eq!(
            q.config_dir,
            Path::new("/h/.config/tuicommander/instances/flag")
        );
        assert_ne!(p.socket, q.socket);
    }
}

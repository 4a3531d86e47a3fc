//! Instance and endpoint naming: where a node's config lives and where its IPC socket is.
//!
//! A pure function of (instance, config dir, temp dir, uid). The socket-owning adapters
//! (node listener, bridge, CLI) read the environment themselves and pass the values in.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Name of the IPC socket of the default instance, inside its config dir.
pub const DEFAULT_SOCKET_NAME: &str = "mcp.sock";

/// Which tuic instance a process belongs to.
///
/// Named instances exist so several nodes can run side by side for one user (tests, a
/// second profile); each has its own config dir and socket, and discovery never crosses
/// from one instance to another.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum AppInstance {
    /// The user's main instance.
    #[default]
    Default,
    /// A named instance; the id is any non-empty string.
    Named(String),
}

impl AppInstance {
    /// Builds an instance from an optional id; an empty id means the default instance.
    pub fn from_id(id: Option<&str>) -> Self {
        match id {
            Some(s) if !s.is_empty() => Self::Named(s.to_owned()),
            _ => Self::Default,
        }
    }

    /// The instance id, if named.
    pub fn id(&self) -> Option<&str> {
        match self {
            Self::Default => None,
            Self::Named(s) => Some(s),
        }
    }
}

/// Inputs to endpoint resolution, gathered by the caller from flags and environment.
#[derive(Debug, Clone)]
pub struct EndpointInputs<'a> {
    /// The instance selected by `--instance` or `TUIC_APP_INSTANCE`.
    pub instance: &'a AppInstance,
    /// The base config dir (`--config-dir`, `TUIC_CONFIG_DIR`, XDG, home).
    pub base_config_dir: &'a Path,
    /// Whether the config dir was given explicitly (then a named instance uses it as is).
    pub config_dir_explicit: bool,
    /// `${TMPDIR:-/tmp}`.
    pub temp_dir: &'a Path,
    /// The caller's uid, so two users' instances never share a socket name.
    pub uid: u32,
    /// `TUIC_SOCKET`, which wins when set.
    pub socket_override: Option<&'a Path>,
}

/// Resolved locations of one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The instance's config dir.
    pub config_dir: PathBuf,
    /// The instance's IPC socket.
    pub socket: PathBuf,
}

/// Resolves config dir and socket path for an instance.
///
/// The default instance listens at `<config_dir>/mcp.sock`. A named instance gets
/// `<config_dir>/instances/<id>` (unless the config dir was explicit) and a short socket in the
/// temp dir, `tuic-<uid>-<8 hex of sha256(id)>.sock`, because Unix socket paths are limited to
/// about 104 bytes on some systems.
pub fn resolve(inputs: &EndpointInputs<'_>) -> Endpoint {
    let config_dir = match (inputs.instance, inputs.config_dir_explicit) {
        (AppInstance::Named(id), false) => inputs.base_config_dir.join("instances").join(id),
        _ => inputs.base_config_dir.to_path_buf(),
    };
    let socket = if let Some(s) = inputs.socket_override {
        s.to_path_buf()
    } else {
        match inputs.instance {
            AppInstance::Default => config_dir.join(DEFAULT_SOCKET_NAME),
            AppInstance::Named(id) => inputs.temp_dir.join(named_socket_file(inputs.uid, id)),
        }
    };
    Endpoint { config_dir, socket }
}

/// The base config dir and whether it was explicit: `--config-dir`, else `TUIC_CONFIG_DIR`
/// (both explicit), else `$XDG_CONFIG_HOME/tuicommander`, else `~/.config/tuicommander`.
/// `None` when none of them is known. Callers pass the values they read; empty counts as unset.
pub fn base_config_dir(
    flag: Option<&Path>,
    tuic_config_dir: Option<&Path>,
    xdg_config_home: Option<&Path>,
    home: Option<&Path>,
) -> Option<(PathBuf, bool)> {
    fn set(p: Option<&Path>) -> Option<&Path> {
        p.filter(|p| !p.as_os_str().is_empty())
    }
    if let Some(d) = set(flag).or(set(tuic_config_dir)) {
        Some((d.to_path_buf(), true))
    } else if let Some(x) = set(xdg_config_home) {
        Some((x.join("tuicommander"), false))
    } else {
        set(home).map(|h| (h.join(".config").join("tuicommander"), false))
    }
}

/// Where a client looks for an instance's socket, most specific first.
///
/// `TUIC_SOCKET` alone when set. Otherwise the instance's own socket and, for a named
/// instance, the same file name in `/tmp` (a node started with another `TMPDIR`). Every
/// candidate carries the selected instance's name, so discovery never falls through to
/// another instance, the default one included.
pub fn socket_candidates(inputs: &EndpointInputs<'_>) -> Vec<PathBuf> {
    let primary = resolve(inputs).socket;
    if inputs.socket_override.is_some() {
        return vec![primary];
    }
    let mut out = vec![primary];
    if let AppInstance::Named(id) = inputs.instance {
        let fallback = Path::new("/tmp").join(named_socket_file(inputs.uid, id));
        if !out.contains(&fallback) {
            out.push(fallback);
        }
    }
    out
}

/// The file name of a named instance's socket.
pub fn named_socket_file(uid: u32, id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    format!("tuic-{uid}-{}.sock", &hex::encode(digest)[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(instance: &'a AppInstance, explicit: bool) -> EndpointInputs<'a> {
        EndpointInputs {
            instance,
            base_config_dir: Path::new("/home/u/.config/tuicommander"),
            config_dir_explicit: explicit,
            temp_dir: Path::new("/tmp"),
            uid: 1000,
            socket_override: None,
        }
    }

    #[test]
    fn default_instance_uses_config_dir_socket() {
        let e = resolve(&inputs(&AppInstance::Default, false));
        assert_eq!(e.socket, Path::new("/home/u/.config/tuicommander/mcp.sock"));
        assert_eq!(e.config_dir, Path::new("/home/u/.config/tuicommander"));
    }

    #[test]
    fn named_instance_gets_short_temp_socket_and_own_dir() {
        let inst = AppInstance::Named("work".into());
        let e = resolve(&inputs(&inst, false));
        let name = e.socket.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(
            name.starts_with("tuic-1000-") && name.ends_with(".sock"),
            "{name}"
        );
        assert_eq!(name.len(), "tuic-1000-".len() + 8 + ".sock".len());
        assert_eq!(
            e.config_dir,
            Path::new("/home/u/.config/tuicommander/instances/work")
        );
        // Deterministic, and different instances never collide on these inputs.
        assert_eq!(e, resolve(&inputs(&inst, false)));
        let other = AppInstance::Named("play".into());
        assert_ne!(e.socket, resolve(&inputs(&other, false)).socket);
    }

    #[test]
    fn explicit_config_dir_is_used_as_is_for_named_instance() {
        let inst = AppInstance::Named("work".into());
        let e = resolve(&inputs(&inst, true));
        assert_eq!(e.config_dir, Path::new("/home/u/.config/tuicommander"));
    }

    #[test]
    fn socket_override_wins() {
        let mut i = inputs(&AppInstance::Default, false);
        i.socket_override = Some(Path::new("/run/x.sock"));
        assert_eq!(resolve(&i).socket, Path::new("/run/x.sock"));
    }

    #[test]
    fn base_config_dir_precedence() {
        let p = |s: &'static str| Some(Path::new(s));
        assert_eq!(base_config_dir(None, None, None, None), None);
        assert_eq!(
            base_config_dir(None, None, None, p("/h")),
            Some(("/h/.config/tuicommander".into(), false))
        );
        assert_eq!(
            base_config_dir(None, None, p("/x"), p("/h")),
            Some(("/x/tuicommander".into(), false))
        );
        assert_eq!(
            base_config_dir(None, p("/t"), p("/x"), p("/h")),
            Some(("/t".into(), true))
        );
        assert_eq!(
            base_config_dir(p("/f"), p("/t"), p("/x"), p("/h")),
            Some(("/f".into(), true))
        );
        assert_eq!(
            base_config_dir(None, p(""), None, p("/h")),
            Some(("/h/.config/tuicommander".into(), false))
        );
    }

    #[test]
    fn candidates_never_cross_instances() {
        let a = AppInstance::Named("a".into());
        let mut i = inputs(&a, false);
        i.temp_dir = Path::new("/run/user/1000");
        let c = socket_candidates(&i);
        let name = named_socket_file(1000, "a");
        assert_eq!(
            c,
            vec![
                Path::new("/run/user/1000").join(&name),
                Path::new("/tmp").join(&name)
            ]
        );
        let b = socket_candidates(&inputs(&AppInstance::Named("b".into()), false));
        assert!(b.iter().all(|p| !c.contains(p)));
        let d = socket_candidates(&inputs(&AppInstance::Default, false));
        assert_eq!(d, vec![Path::new("/home/u/.config/tuicommander/mcp.sock")]);
        assert!(d.iter().all(|p| !c.contains(p)));
        let mut o = inputs(&a, false);
        o.socket_override = Some(Path::new("/x.sock"));
        assert_eq!(socket_candidates(&o), vec![Path::new("/x.sock")]);
    }

    #[test]
    fn empty_instance_id_is_default() {
        assert_eq!(AppInstance::from_id(Some("")), AppInstance::Default);
        assert_eq!(AppInstance::from_id(None), AppInstance::Default);
    }
}

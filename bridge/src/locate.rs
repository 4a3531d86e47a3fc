//! Which socket a local client talks to: `TUIC_SOCKET`, else the selected instance's socket.
//!
//! Reads the environment once (the binaries call [`LocateEnv::from_process`]) and applies the
//! pure naming rules of [`tuic_proto::endpoint`]; the rules are not restated here.

use std::path::{Path, PathBuf};

use tuic_proto::endpoint::{self, AppInstance, EndpointInputs};

/// The environment values that socket discovery reads.
#[derive(Debug, Clone, Default)]
pub struct LocateEnv {
    /// `TUIC_SOCKET`: an explicit socket, which wins over everything.
    pub socket: Option<PathBuf>,
    /// `TUIC_APP_INSTANCE`.
    pub instance: Option<String>,
    /// `TUIC_CONFIG_DIR`.
    pub tuic_config_dir: Option<PathBuf>,
    /// `XDG_CONFIG_HOME`.
    pub xdg_config_home: Option<PathBuf>,
    /// `HOME`.
    pub home: Option<PathBuf>,
    /// `TMPDIR`.
    pub tmpdir: Option<PathBuf>,
}

impl LocateEnv {
    /// Reads the process environment; empty values count as unset.
    pub fn from_process() -> Self {
        fn var(name: &str) -> Option<String> {
            std::env::var(name).ok().filter(|v| !v.is_empty())
        }
        Self {
            socket: var("TUIC_SOCKET").map(PathBuf::from),
            instance: var("TUIC_APP_INSTANCE"),
            tuic_config_dir: var("TUIC_CONFIG_DIR").map(PathBuf::from),
            xdg_config_home: var("XDG_CONFIG_HOME").map(PathBuf::from),
            home: var("HOME").map(PathBuf::from),
            tmpdir: var("TMPDIR").map(PathBuf::from),
        }
    }
}

/// The socket a client will use and how it was chosen, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The selected instance.
    pub instance: AppInstance,
    /// The socket to dial: the first candidate that exists, else the instance's own path.
    pub socket: PathBuf,
    /// Whether `TUIC_SOCKET` chose it.
    pub from_env: bool,
    /// The instance's config dir.
    pub config_dir: PathBuf,
}

impl Target {
    /// Describes the instance for messages: `default instance` or `instance "a"`.
    pub fn instance_label(&self) -> String {
        match self.instance.id() {
            None => "default instance".into(),
            Some(id) => format!("instance {id:?}"),
        }
    }
}

/// Resolves the socket from `--instance`, `--config-dir` and the environment.
///
/// `exists` is asked about each candidate (the real file system in the binaries), so the
/// choice stays testable; the first existing candidate wins, else the instance's own path.
pub fn locate(
    instance_flag: Option<&str>,
    config_dir_flag: Option<&Path>,
    env: &LocateEnv,
    uid: u32,
    exists: impl Fn(&Path) -> bool,
) -> Target {
    let instance = AppInstance::from_id(instance_flag.or(env.instance.as_deref()));
    let (base, explicit) = endpoint::base_config_dir(
        config_dir_flag,
        env.tuic_config_dir.as_deref(),
        env.xdg_config_home.as_deref(),
        env.home.as_deref(),
    )
    // With no HOME at all, the default instance has no socket to find; this path will simply
    // not exist and the caller reports "not running" naming it.
    .unwrap_or_else(|| (PathBuf::from(".config/tuicommander"), false));
    let base = if base.is_relative() {
        std::env::current_dir()
            .map(|d| d.join(&base))
            .unwrap_or(base)
    } else {
        base
    };
    let temp_dir = env.tmpdir.clone().unwrap_or_else(|| PathBuf::from("/tmp"));
    let inputs = EndpointInputs {
        instance: &instance,
        base_config_dir: &base,
        config_dir_explicit: explicit,
        temp_dir: &temp_dir,
        uid,
        socket_override: env.socket.as_deref(),
    };
    let config_dir = endpoint::resolve(&inputs).config_dir;
    let candidates = endpoint::socket_candidates(&inputs);
    let socket = candidates
        .iter()
        .find(|p| exists(p))
        .unwrap_or(&candidates[0])
        .clone();
    Target {
        instance,
        socket,
        from_env: env.socket.is_some(),
        config_dir,
    }
}

/// [`locate`] against the real file system and the process's uid.
pub fn locate_from_process(instance_flag: Option<&str>, config_dir_flag: Option<&Path>) -> Target {
    locate(
        instance_flag,
        config_dir_flag,
        &LocateEnv::from_process(),
        rustix::process::getuid().as_raw(),
        |p| std::fs::symlink_metadata(p).is_ok(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> LocateEnv {
        LocateEnv {
            home: Some("/h".into()),
            tmpdir: Some("/t".into()),
            ..Default::default()
        }
    }

    #[test]
    fn default_instance_socket_in_config_dir() {
        let t = locate(None, None, &env(), 7, |_| false);
        assert_eq!(t.socket, Path::new("/h/.config/tuicommander/mcp.sock"));
        assert!(!t.from_env);
    }

    #[test]
    fn tuic_socket_wins_over_instance() {
        let mut e = env();
        e.socket = Some("/s.sock".into());
        let t = locate(Some("a"), None, &e, 7, |_| false);
        assert_eq!(t.socket, Path::new("/s.sock"));
        assert!(t.from_env);
    }

    #[test]
    fn flag_beats_env_instance_and_never_falls_back_to_default() {
        let mut e = env();
        e.instance = Some("b".into());
        let default_sock = Path::new("/h/.config/tuicommander/mcp.sock");
        // Even when only the default instance's socket exists, instance a stays on its own.
        let t = locate(Some("a"), None, &e, 7, |p| p == default_sock);
        assert_eq!(
            t.socket,
            Path::new("/t").join(endpoint::named_socket_file(7, "a"))
        );
        let t = locate(None, None, &e, 7, |p| p == default_sock);
        assert_eq!(
            t.socket,
            Path::new("/t").join(endpoint::named_socket_file(7, "b"))
        );
    }

    #[test]
    fn named_instance_found_in_tmp_fallback() {
        let name = endpoint::named_socket_file(7, "a");
        let in_tmp = Path::new("/tmp").join(&name);
        let t = locate(Some("a"), None, &env(), 7, |p| p == in_tmp);
        assert_eq!(t.socket, in_tmp);
    }
}

//! The secret store: the OS keyring when a Secret Service answers, otherwise a 0600 file.
//!
//! Holds the node's connection token and, later, relay tokens, push keys and hub connection
//! tokens. Entries are namespaced by config dir so two instances never read each other's
//! secrets. The password's bcrypt hash is not here: the spec keeps it in `config.json`.
//!
//! The keyring crate drives D-Bus through an async runtime of its own, so every keyring call
//! runs on a short-lived dedicated thread; callers may be on or off a tokio worker.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use sha2::{Digest, Sha256};

/// The keyring service name.
const KEYRING_SERVICE: &str = "tuicommander";

/// Where secrets live.
#[derive(Debug)]
pub struct Vault {
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    /// OS keyring; `scope` is a digest of the config dir, prefixed to every entry.
    Keyring { scope: String },
    /// JSON map in a 0600 file; the mutex serializes this process's read-modify-writes.
    File { path: PathBuf, guard: Mutex<()> },
}

impl Vault {
    /// Opens the store. With `allow_keyring`, probes the Secret Service once and falls back to
    /// the file (logging one warning) when it does not answer.
    pub fn open(config_dir: &Path, secrets_file: PathBuf, allow_keyring: bool) -> Self {
        if allow_keyring {
            let scope =
                hex::encode(&Sha256::digest(config_dir.as_os_str().as_encoded_bytes())[..8]);
            let probe_user = format!("{scope}/probe");
            let answered = on_keyring_thread(move || {
                let entry = keyring::Entry::new(KEYRING_SERVICE, &probe_user)?;
                match entry.get_password() {
                    Ok(_) | Err(keyring::Error::NoEntry) => Ok(()),
                    Err(e) => Err(e),
                }
            });
            match answered {
                Ok(()) => {
                    tracing::info!(backend = "keyring", "secret store ready");
                    return Self {
                        backend: Backend::Keyring { scope },
                    };
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    file = %secrets_file.display(),
                    "no OS keyring answered; secrets go to a 0600 file"
                ),
            }
        }
        Self {
            backend: Backend::File {
                path: secrets_file,
                guard: Mutex::new(()),
            },
        }
    }

    /// Which backend is in use (`keyring` or `file`).
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Keyring { .. } => "keyring",
            Backend::File { .. } => "file",
        }
    }

    /// Reads a secret.
    pub fn get(&self, name: &str) -> anyhow::Result<Option<String>> {
        match &self.backend {
            Backend::Keyring { scope } => {
                let user = format!("{scope}/{name}");
                on_keyring_thread(move || {
                    match keyring::Entry::new(KEYRING_SERVICE, &user)?.get_password() {
                        Ok(s) => Ok(Some(s)),
                        Err(keyring::Error::NoEntry) => Ok(None),
                        Err(e) => Err(e),
                    }
                })
                .context("reading from the OS keyring")
            }
            Backend::File { path, guard } => {
                let _g = guard.lock().unwrap_or_else(|p| p.into_inner());
                Ok(read_file(path)?.remove(name))
            }
        }
    }

    /// Writes a secret.
    pub fn set(&self, name: &str, value: &str) -> anyhow::Result<()> {
        match &self.backend {
            Backend::Keyring { scope } => {
                let user = format!("{scope}/{name}");
                let value = value.to_owned();
                on_keyring_thread(move || {
                    keyring::Entry::new(KEYRING_SERVICE, &user)?.set_password(&value)
                })
                .context("writing to the OS keyring")
            }
            Backend::File { path, guard } => {
                let _g = guard.lock().unwrap_or_else(|p| p.into_inner());
                let mut map = read_file(path)?;
                map.insert(name.to_owned(), value.to_owned());
                write_file(path, &map)
            }
        }
    }

    /// Removes a secret; whether there was one.
    pub fn remove(&self, name: &str) -> anyhow::Result<bool> {
        match &self.backend {
            Backend::Keyring { scope } => {
                let user = format!("{scope}/{name}");
                on_keyring_thread(move || {
                    match keyring::Entry::new(KEYRING_SERVICE, &user)?.delete_credential() {
                        Ok(()) => Ok(true),
                        Err(keyring::Error::NoEntry) => Ok(false),
                        Err(e) => Err(e),
                    }
                })
                .context("removing from the OS keyring")
            }
            Backend::File { path, guard } => {
                let _g = guard.lock().unwrap_or_else(|p| p.into_inner());
                let mut map = read_file(path)?;
                let had = map.remove(name).is_some();
                if had {
                    write_file(path, &map)?;
                }
                Ok(had)
            }
        }
    }

    /// Returns the secret `name`, creating it with `make` the first time.
    pub fn get_or_create(
        &self,
        name: &str,
        make: impl FnOnce() -> String,
    ) -> anyhow::Result<String> {
        if let Some(v) = self.get(name)? {
            return Ok(v);
        }
        let v = make();
        self.set(name, &v)?;
        Ok(v)
    }
}

fn on_keyring_thread<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, keyring::Error> + Send + 'static,
) -> Result<T, keyring::Error> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| keyring::Error::PlatformFailure(Box::new(e)))?;
        let _enter = rt.enter();
        f()
    })
    .join()
    .unwrap_or_else(|_| {
        Err(keyring::Error::Invalid(
            "keyring".into(),
            "the keyring thread panicked".into(),
        ))
    })
}

fn read_file(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    match std::fs::read(path) {
        Ok(b) => serde_json::from_slice(&b).with_context(|| format!("parsing {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn write_file(path: &Path, map: &BTreeMap<String, String>) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(&serde_json::to_vec_pretty(map)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("publishing {}", path.display()))
}

/// A fresh random token: 32 bytes, hex.
pub fn random_token() -> String {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn file_backend_roundtrip_and_mode() {
        let d = tempfile::tempdir().unwrap();
        let v = Vault::open(d.path(), d.path().join("secrets.json"), false);
        assert_eq!(v.backend_name(), "file");
        assert_eq!(v.get("a").unwrap(), None);
        let t = v.get_or_create("a", random_token).unwrap();
        assert_eq!(v.get_or_create("a", || "other".into()).unwrap(), t);
        let mode = std::fs::metadata(d.path().join("secrets.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

//! The secret store: the OS keyring when a Secret Service answers, otherwise an encrypted file.
//!
//! The file fallback (`secrets.json`, 0600) holds one AES-256-GCM envelope of the whole map;
//! its key is 32 random bytes in a separate 0600 key file beside it (`secrets.key`). A file
//! that fails authentication (tampered, truncated, or a foreign key) is refused with an error
//! naming both files, never read as empty. A plaintext map left by an older version is
//! encrypted in place on its first read. Threat model (docs/security.md): the envelope keeps
//! values out of anything that copies, greps or prints the secrets file alone (backups,
//! sync, an agent's `cat`); it does not protect against a process of the same user that
//! reads both files, which the OS keyring is for.
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

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use anyhow::Context;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

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
    /// An encrypted JSON map in a 0600 file, its key in `key` (0600); the mutex serializes
    /// this process's read-modify-writes.
    File {
        path: PathBuf,
        key: PathBuf,
        guard: Mutex<()>,
    },
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
                    "no OS keyring answered; secrets go to an encrypted 0600 file"
                ),
            }
        }
        Self {
            backend: Backend::File {
                key: key_file(&secrets_file),
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
            Backend::File { path, key, guard } => {
                let _g = guard.lock().unwrap_or_else(|p| p.into_inner());
                Ok(read_file(path, key)?
                    .remove(name)
                    .map(|v| String::clone(&v)))
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
            Backend::File { path, key, guard } => {
                let _g = guard.lock().unwrap_or_else(|p| p.into_inner());
                let mut map = read_file(path, key)?;
                map.insert(name.to_owned(), Zeroizing::new(value.to_owned()));
                write_file(path, key, &map)
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
            Backend::File { path, key, guard } => {
                let _g = guard.lock().unwrap_or_else(|p| p.into_inner());
                let mut map = read_file(path, key)?;
                let had = map.remove(name).is_some();
                if had {
                    write_file(path, key, &map)?;
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

/// The decrypted map; values zeroized when dropped.
type Map = BTreeMap<String, Zeroizing<String>>;

/// The envelope's format tag, also its additional authenticated data: a file of another
/// format (or a downgrade of this tag) fails authentication.
const FORMAT: &str = "tuic-vault-v1/aes-256-gcm";

/// The encrypted file's shape.
#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope {
    format: String,
    /// 12 random bytes, hex; fresh for every write.
    nonce: String,
    /// AES-256-GCM of the JSON map (tag appended), hex.
    ciphertext: String,
}

/// The key file beside a secrets file (`secrets.json` → `secrets.key`).
pub fn key_file(secrets_file: &Path) -> PathBuf {
    secrets_file.with_extension("key")
}

fn cipher(key_path: &Path, create: bool) -> anyhow::Result<Aes256Gcm> {
    let hex_key = match std::fs::read_to_string(key_path) {
        Ok(s) => Zeroizing::new(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            let k = Zeroizing::new(random_token());
            write_private(key_path, k.as_bytes())?;
            k
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "reading the secret store's key {} (without it the encrypted store cannot be read)",
                    key_path.display()
                )
            });
        }
    };
    let raw = Zeroizing::new(
        hex::decode(hex_key.trim())
            .ok()
            .filter(|k| k.len() == 32)
            .with_context(|| format!("the key file {} is not 32 hex bytes", key_path.display()))?,
    );
    Aes256Gcm::new_from_slice(&raw).map_err(|_| anyhow::anyhow!("bad key length"))
}

fn read_file(path: &Path, key: &Path) -> anyhow::Result<Map> {
    let bytes = match std::fs::read(path) {
        Ok(b) => Zeroizing::new(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    if let Ok(env) = serde_json::from_slice::<Envelope>(&bytes) {
        let refused = || {
            anyhow::anyhow!(
                "the secret store {} failed its integrity check (tampered, truncated, or not \
                 encrypted with the key {}); refusing to read it — restore it from a backup or \
                 remove both files and store the secrets again",
                path.display(),
                key.display()
            )
        };
        if env.format != FORMAT {
            return Err(refused());
        }
        let nonce = hex::decode(&env.nonce).ok().filter(|n| n.len() == 12);
        let ct = hex::decode(&env.ciphertext).ok();
        let (Some(nonce), Some(ct)) = (nonce, ct) else {
            return Err(refused());
        };
        let plain = Zeroizing::new(
            cipher(key, false)?
                .decrypt(
                    Nonce::from_slice(&nonce),
                    Payload {
                        msg: &ct,
                        aad: FORMAT.as_bytes(),
                    },
                )
                .map_err(|_| refused())?,
        );
        return serde_json::from_slice(&plain).map_err(|_| refused());
    }
    // A plaintext map from before encryption: encrypted in place now.
    let map: Map = serde_json::from_slice(&bytes).with_context(|| {
        format!(
            "{} is neither an encrypted store nor a plaintext map",
            path.display()
        )
    })?;
    write_file(path, key, &map)?;
    tracing::info!(file = %path.display(), entries = map.len(), "plaintext secret store encrypted");
    Ok(map)
}

fn write_file(path: &Path, key: &Path, map: &Map) -> anyhow::Result<()> {
    use rand::RngCore;
    let plain = Zeroizing::new(serde_json::to_vec(map)?);
    let mut nonce = [0u8; 12];
    rand::rng().fill_bytes(&mut nonce);
    let ct = cipher(key, true)?
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: &plain,
                aad: FORMAT.as_bytes(),
            },
        )
        .map_err(|_| anyhow::anyhow!("encrypting the secret store"))?;
    let env = Envelope {
        format: FORMAT.to_owned(),
        nonce: hex::encode(nonce),
        ciphertext: hex::encode(ct),
    };
    write_private(path, &serde_json::to_vec_pretty(&env)?)
}

/// Writes `bytes` to `path` atomically (a temp file renamed over it), mode 0600.
fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)?;
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
        let key_mode = std::fs::metadata(d.path().join("secrets.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(key_mode & 0o777, 0o600);
    }

    #[test]
    fn the_file_holds_no_plaintext_value_and_a_tampered_file_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("secrets.json");
        let v = Vault::open(d.path(), file.clone(), false);
        v.set("secret/TOKEN", "hunter2-very-secret-value").unwrap();
        v.set("other", "second-value-xyz").unwrap();
        let raw = std::fs::read_to_string(&file).unwrap();
        assert!(!raw.contains("hunter2-very-secret-value"), "{raw}");
        assert!(!raw.contains("second-value-xyz"));
        assert!(!raw.contains("TOKEN"), "names are inside the envelope too");
        assert_eq!(
            v.get("secret/TOKEN").unwrap().as_deref(),
            Some("hunter2-very-secret-value")
        );
        // A fresh handle (a restart) reads the same.
        let again = Vault::open(d.path(), file.clone(), false);
        assert_eq!(
            again.get("other").unwrap().as_deref(),
            Some("second-value-xyz")
        );

        // One flipped ciphertext byte: refused with a clear error, never read as empty.
        let mut env: serde_json::Value = serde_json::from_str(&raw).unwrap();
        let ct = env["ciphertext"].as_str().unwrap().to_owned();
        let flipped = format!(
            "{}{}",
            if ct.starts_with('0') { "1" } else { "0" },
            &ct[1..]
        );
        env["ciphertext"] = serde_json::json!(flipped);
        std::fs::write(&file, env.to_string()).unwrap();
        let e = format!("{:#}", again.get("other").unwrap_err());
        assert!(e.contains("failed its integrity check"), "{e}");
        assert!(e.contains("secrets.key"), "{e}");
        // A write over a tampered file is refused too (it would lose every other entry).
        assert!(again.set("x", "y").is_err());

        // Another key: refused the same way.
        std::fs::write(&file, &raw).unwrap();
        assert!(again.get("other").unwrap().is_some());
        std::fs::write(d.path().join("secrets.key"), random_token()).unwrap();
        let e = format!("{:#}", again.get("other").unwrap_err());
        assert!(e.contains("failed its integrity check"), "{e}");

        // A missing key with an encrypted file: refused, naming the key file.
        std::fs::remove_file(d.path().join("secrets.key")).unwrap();
        let e = format!("{:#}", again.get("other").unwrap_err());
        assert!(e.contains("secrets.key"), "{e}");
    }

    #[test]
    fn a_plaintext_file_is_encrypted_on_first_read() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("secrets.json");
        std::fs::write(
            &file,
            serde_json::json!({"node_token": "plain-old-token-123", "secret/A": "plain-a-value"})
                .to_string(),
        )
        .unwrap();
        let v = Vault::open(d.path(), file.clone(), false);
        assert_eq!(
            v.get("node_token").unwrap().as_deref(),
            Some("plain-old-token-123")
        );
        let raw = std::fs::read_to_string(&file).unwrap();
        assert!(!raw.contains("plain-old-token-123"), "{raw}");
        assert!(!raw.contains("plain-a-value"), "{raw}");
        assert!(raw.contains(FORMAT));
        assert_eq!(v.get("secret/A").unwrap().as_deref(), Some("plain-a-value"));
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

//! The spec's secret tool ("Secret form security boundary"): an agent asks for a credential
//! by name (`request`), a person types it into a form whose capability is a one-time nonce
//! (`/index.html#/secret-form?nonce=…`, or `tuic secret` with no echo), the value goes to the
//! vault, and the agent can only `run` a command with it in the environment — its output
//! captured from pipes, capped, and masked of the value before anything serializes it — or
//! `remove` it. No action reads a value.
//!
//! Values live in the vault (keyring, else the encrypted file) under `secret/<name>`, and in
//! memory only in `Zeroizing` buffers for the moment of a store or a run. The names (never
//! the values) are indexed in the store's `secret_names` table so a person can list them.
//! While a form is open, [`Secrets::form_open`] is the pre-call gate the MCP layer consults.
//!
//! It deliberately never logs, audits or returns a value, and holds no node: the composition
//! root gives it the vault, the store and the bus.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use redb::{ReadableTable, TableDefinition};
use serde::Serialize;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::events::Bus;
use crate::store::Store;
use crate::vault::Vault;

pub mod consent;
#[cfg(test)]
mod tests;

/// Secret names: name → JSON [`SecretInfo`].
const SECRET_NAMES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("secret_names");

/// Largest secret value (64 KiB): credentials are short; a larger "secret" is a file.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;

/// Longest a form stays open (10 min).
pub const FORM_TTL_MS: u64 = 600_000;

/// Forms open at once (32): each is a person's attention.
pub const MAX_FORMS: usize = 32;

/// Output kept of a run, per stream (64 KiB).
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// Longest run (60 s; `timeout_ms` may shorten it, up to 290 s under the request deadline).
pub const DEFAULT_RUN_MS: u64 = 60_000;

/// What replaces the value in a run's output.
pub const MASK: &str = "[REDACTED]";

/// Why a secret operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The name is not an environment variable name.
    #[error(
        "secret names are environment variable names: a letter or _, then letters, digits or _, at most 64 (got {0:?})"
    )]
    InvalidName(String),
    /// The value is too long.
    #[error("a secret value is at most {MAX_VALUE_BYTES} bytes (got {0})")]
    TooLarge(usize),
    /// The value is empty.
    #[error("the secret value is empty")]
    Empty,
    /// No open form has this nonce.
    #[error("no open secret form has this nonce (forged, already answered or expired)")]
    BadNonce,
    /// Too many forms are open.
    #[error("{MAX_FORMS} secret forms are already open; answer or let some expire")]
    TooManyForms,
    /// No template of the person's allows this exact run (`consent`).
    #[error(
        "the person has not approved this exact run (secret {name}, this argv, this directory); they were asked — call run again once they approved"
    )]
    ConsentRequired {
        /// The secret.
        name: String,
        /// When the person's request expires, unix ms.
        expires_ms: u64,
    },
    /// No secret of that name is stored.
    #[error("no secret named {0} is stored; ask the person with secret action=request")]
    Missing(String),
    /// The command is malformed.
    #[error("{0}")]
    BadCommand(String),
    /// The store, the vault or the process failed.
    #[error("{0}")]
    Internal(String),
}

impl SecretError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidName(_) => "invalid_name",
            Self::TooLarge(_) => "secret_too_large",
            Self::Empty => "secret_empty",
            Self::BadNonce => "bad_nonce",
            Self::TooManyForms => "too_many_forms",
            Self::Missing(_) => "secret_missing",
            Self::ConsentRequired { .. } => "consent_required",
            Self::BadCommand(_) => "invalid_command",
            Self::Internal(_) => "internal",
        }
    }
}

fn internal(e: anyhow::Error) -> SecretError {
    SecretError::Internal(format!("{e:#}"))
}

/// A stored secret's public facts.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SecretInfo {
    /// The name (the environment variable a run sets).
    pub name: String,
    /// When it was stored, unix ms.
    pub stored_ms: u64,
}

/// An open form.
#[derive(Debug, Clone, Serialize)]
pub struct Form {
    /// The capability: whoever holds it may answer this form once.
    pub nonce: String,
    /// The secret asked for.
    pub name: String,
    /// Why, in the agent's words.
    pub reason: String,
    /// Who asked (the audit's `who`).
    pub requested_by: String,
    /// Opened, unix ms.
    pub created_ms: u64,
    /// Expires, unix ms.
    pub expires_ms: u64,
}

impl Form {
    /// The browser entry of this form.
    pub fn path(&self) -> String {
        format!("/index.html#/secret-form?nonce={}", self.nonce)
    }
}

/// A run's answer: output with every occurrence of the value masked.
#[derive(Debug, Clone, Serialize)]
pub struct RunOutput {
    /// The exit code (absent when killed by a signal or the deadline).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Standard output, masked, at most [`MAX_OUTPUT_BYTES`].
    pub stdout: String,
    /// Standard error, masked, at most [`MAX_OUTPUT_BYTES`].
    pub stderr: String,
    /// Output was cut at the cap.
    pub truncated: bool,
    /// The run hit its deadline and was killed.
    pub timed_out: bool,
    /// How many occurrences of the value were masked.
    pub masked: usize,
}

/// What the secret service uses of the node.
#[derive(Debug, Clone)]
pub struct SecretsEnv {
    /// Where values live.
    pub vault: Arc<Vault>,
    /// Where names are indexed.
    pub store: Arc<Store>,
    /// Where form requests are announced to the person's UIs.
    pub bus: Arc<Bus>,
    /// The values masked out of terminal output (`session::valuemask`): this service adds
    /// each stored value and drops removed ones, so an agent that prints a value by another
    /// path than `run` (a `cat` of a file holding it) never puts it on a screen.
    pub redactions: Arc<crate::session::valuemask::Redactions>,
}

/// The secret service.
#[derive(Debug)]
pub struct Secrets {
    env: SecretsEnv,
    /// Open forms by sha256(nonce).
    forms: Mutex<HashMap<String, Form>>,
    /// Runs waiting for the person's consent (`consent`), by sha256(nonce).
    consents: Mutex<consent::Pending>,
}

/// Checks a secret name: an environment variable name, so it also carries no path.
pub fn check_name(name: &str) -> Result<(), SecretError> {
    let mut chars = name.chars();
    let ok = name.len() <= 64
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(SecretError::InvalidName(name.chars().take(80).collect()))
    }
}

fn vault_key(name: &str) -> String {
    format!("secret/{name}")
}

fn nonce_key(nonce: &str) -> String {
    hex::encode(Sha256::digest(nonce.as_bytes()))
}

impl Secrets {
    /// Opens the names table (blocking; before serving).
    pub fn open(env: SecretsEnv) -> anyhow::Result<Self> {
        let tx = env.store.database().begin_write()?;
        tx.open_table(SECRET_NAMES)?;
        tx.open_table(consent::SECRET_CONSENTS)?;
        tx.commit()?;
        let s = Self {
            env,
            forms: Mutex::new(HashMap::new()),
            consents: Mutex::new(HashMap::new()),
        };
        // Publish the stored values for redaction; an unreadable vault entry is skipped (its
        // run fails with the vault's error instead).
        for info in s.list().map_err(|e| anyhow::anyhow!("{e}"))? {
            match s.env.vault.get(&vault_key(&info.name)) {
                Ok(Some(v)) => s.env.redactions.set(&info.name, &Zeroizing::new(v)),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(name = %info.name, error = %format!("{e:#}"), "secret not readable for redaction")
                }
            }
        }
        Ok(s)
    }

    fn forms(&self) -> std::sync::MutexGuard<'_, HashMap<String, Form>> {
        self.forms.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops expired forms (telling the UIs).
    fn expire(&self, now_ms: u64) {
        let gone: Vec<Form> = {
            let mut f = self.forms();
            let keys: Vec<String> = f
                .iter()
                .filter(|(_, v)| v.expires_ms <= now_ms)
                .map(|(k, _)| k.clone())
                .collect();
            keys.iter().filter_map(|k| f.remove(k)).collect()
        };
        for f in gone {
            self.env
                .bus
                .publish(tuic_proto::events::Event::SecretResolved {
                    name: f.name,
                    stored: false,
                });
        }
    }

    /// The pre-call gate: whether a secret form is open now.
    pub fn form_open(&self, now_ms: u64) -> bool {
        self.forms().values().any(|f| f.expires_ms > now_ms)
    }

    /// Opens a form asking the person for secret `name`, announced on the bus.
    pub fn request(
        &self,
        name: &str,
        reason: &str,
        requested_by: &str,
        now_ms: u64,
    ) -> Result<Form, SecretError> {
        check_name(name)?;
        self.expire(now_ms);
        let reason: String = reason.chars().take(500).collect();
        let form = {
            let mut forms = self.forms();
            if let Some(f) = forms.values().find(|f| f.name == name) {
                // One form per name: a repeated request points at the open one.
                f.clone()
            } else {
                if forms.len() >= MAX_FORMS {
                    return Err(SecretError::TooManyForms);
                }
                let f = Form {
                    nonce: crate::vault::random_token(),
                    name: name.to_owned(),
                    reason,
                    requested_by: requested_by.to_owned(),
                    created_ms: now_ms,
                    expires_ms: now_ms + FORM_TTL_MS,
                };
                forms.insert(nonce_key(&f.nonce), f.clone());
                f
            }
        };
        self.env
            .bus
            .publish(tuic_proto::events::Event::SecretRequested {
                name: form.name.clone(),
                reason: form.reason.clone(),
                form_path: form.path(),
            });
        Ok(form)
    }

    /// The open forms (for the person's UIs and `tuic secret`).
    pub fn open_forms(&self, now_ms: u64) -> Vec<Form> {
        self.expire(now_ms);
        let mut v: Vec<Form> = self.forms().values().cloned().collect();
        v.sort_by_key(|f| f.created_ms);
        v
    }

    /// The form a nonce opens (its name and reason), without answering it.
    pub fn form(&self, nonce: &str, now_ms: u64) -> Result<Form, SecretError> {
        self.expire(now_ms);
        self.forms()
            .get(&nonce_key(nonce))
            .cloned()
            .ok_or(SecretError::BadNonce)
    }

    /// Answers the form `nonce` with `value`: stored in the vault, the form closed. The
    /// secret's name. Blocking (vault, store).
    pub fn submit(
        &self,
        nonce: &str,
        value: Zeroizing<String>,
        now_ms: u64,
    ) -> Result<String, SecretError> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(SecretError::TooLarge(value.len()));
        }
        if value.is_empty() {
            return Err(SecretError::Empty);
        }
        self.expire(now_ms);
        let form = self
            .forms()
            .remove(&nonce_key(nonce))
            .ok_or(SecretError::BadNonce)?;
        let stored = self.store(&form.name, &value, now_ms);
        if stored.is_err() {
            // The person may try again with the same form.
            self.forms().insert(nonce_key(nonce), form.clone());
        } else {
            self.env
                .bus
                .publish(tuic_proto::events::Event::SecretResolved {
                    name: form.name.clone(),
                    stored: true,
                });
        }
        stored.map(|()| form.name)
    }

    /// Stores `value` as secret `name` (a person's own `tuic secret set`). Blocking.
    pub fn store(&self, name: &str, value: &str, now_ms: u64) -> Result<(), SecretError> {
        check_name(name)?;
        if value.len() > MAX_VALUE_BYTES {
            return Err(SecretError::TooLarge(value.len()));
        }
        if value.is_empty() {
            return Err(SecretError::Empty);
        }
        self.env
            .vault
            .set(&vault_key(name), value)
            .map_err(internal)?;
        self.env.redactions.set(name, value);
        let info = SecretInfo {
            name: name.to_owned(),
            stored_ms: now_ms,
        };
        let put = || -> anyhow::Result<()> {
            let tx = self.env.store.database().begin_write()?;
            tx.open_table(SECRET_NAMES)?
                .insert(name, serde_json::to_vec(&info)?.as_slice())?;
            tx.commit()?;
            Ok(())
        };
        put().map_err(internal)
    }

    /// The stored secrets' names. Blocking.
    pub fn list(&self) -> Result<Vec<SecretInfo>, SecretError> {
        let read = || -> anyhow::Result<Vec<SecretInfo>> {
            let tx = self.env.store.database().begin_read()?;
            let t = tx.open_table(SECRET_NAMES)?;
            let mut out = Vec::new();
            for row in t.iter()? {
                let (_, v) = row?;
                out.push(serde_json::from_slice(v.value())?);
            }
            Ok(out)
        };
        read().map_err(internal)
    }

    /// Removes secret `name`; whether it existed. Blocking.
    pub fn remove(&self, name: &str) -> Result<bool, SecretError> {
        check_name(name)?;
        let had = self.env.vault.remove(&vault_key(name)).map_err(internal)?;
        self.env.redactions.remove(name);
        let dropped = || -> anyhow::Result<bool> {
            let tx = self.env.store.database().begin_write()?;
            let had = tx.open_table(SECRET_NAMES)?.remove(name)?.is_some();
            tx.commit()?;
            Ok(had)
        };
        Ok(dropped().map_err(internal)? || had)
    }

    /// Runs `argv` (in `cwd` when given) with secret `name` in its environment under that
    /// name; stdin is empty, stdout and stderr are captured from pipes, capped and masked of
    /// the value before they leave this function. Blocking (waits for the process).
    pub fn run(
        &self,
        name: &str,
        argv: &[String],
        cwd: Option<&str>,
        timeout: Duration,
    ) -> Result<RunOutput, SecretError> {
        check_name(name)?;
        let Some((program, args)) = argv.split_first() else {
            return Err(SecretError::BadCommand("command is empty".into()));
        };
        let value = Zeroizing::new(
            self.env
                .vault
                .get(&vault_key(name))
                .map_err(internal)?
                .ok_or_else(|| SecretError::Missing(name.to_owned()))?,
        );
        let mut cmd = std::process::Command::new(program);
        cmd.args(args)
            .env(name, value.as_str())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        if let Some(d) = cwd {
            cmd.current_dir(d);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| SecretError::BadCommand(format!("cannot start {program:?}: {e}")))?;
        let out = child
            .stdout
            .take()
            .context("stdout pipe")
            .map_err(internal)?;
        let err = child
            .stderr
            .take()
            .context("stderr pipe")
            .map_err(internal)?;
        let read_out = std::thread::spawn(move || read_capped(out));
        let read_err = std::thread::spawn(move || read_capped(err));
        let deadline = std::time::Instant::now() + timeout;
        let mut timed_out = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if std::time::Instant::now() >= deadline => {
                    let _ = child.kill();
                    timed_out = true;
                    break child.wait().ok();
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(SecretError::Internal(e.to_string())),
            }
        };
        let (stdout, t1) = read_out.join().unwrap_or_default();
        let (stderr, t2) = read_err.join().unwrap_or_default();
        let (stdout, m1) = mask(&stdout, &value);
        let (stderr, m2) = mask(&stderr, &value);
        Ok(RunOutput {
            exit_code: status.and_then(|s| s.code()),
            stdout,
            stderr,
            truncated: t1 || t2,
            timed_out,
            masked: m1 + m2,
        })
    }
}

/// Reads a pipe to its end, keeping at most [`MAX_OUTPUT_BYTES`] (the rest is drained so the
/// child never blocks on a full pipe). The kept bytes, zeroized when dropped, and whether
/// any were cut.
fn read_capped(mut r: impl Read) -> (Zeroizing<Vec<u8>>, bool) {
    let mut kept = Zeroizing::new(Vec::new());
    let mut buf = Zeroizing::new([0u8; 8192]);
    let mut cut = false;
    loop {
        match r.read(&mut buf[..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                cut |= n > room;
            }
        }
    }
    (kept, cut)
}

/// The output as text with every occurrence of `value` replaced by [`MASK`] — matched on the
/// raw bytes before decoding, so no decoding can split it — and how many there were.
pub fn mask(out: &[u8], value: &str) -> (String, usize) {
    let v = value.as_bytes();
    if v.is_empty() {
        return (String::from_utf8_lossy(out).into_owned(), 0);
    }
    let mut masked = Zeroizing::new(Vec::with_capacity(out.len()));
    let mut n = 0;
    let mut i = 0;
    while i < out.len() {
        if out[i..].starts_with(v) {
            masked.extend_from_slice(MASK.as_bytes());
            i += v.len();
            n += 1;
        } else {
            masked.push(out[i]);
            i += 1;
        }
    }
    // A value cut at the output cap leaves a prefix at the very end: mask that too.
    let tail = (1..v.len())
        .rev()
        .find(|k| masked.len() >= *k && masked.ends_with(&v[..*k]));
    if let Some(k) = tail.filter(|k| *k >= 4) {
        let keep = masked.len() - k;
        masked.truncate(keep);
        masked.extend_from_slice(MASK.as_bytes());
        n += 1;
    }
    (String::from_utf8_lossy(&masked).into_owned(), n)
}

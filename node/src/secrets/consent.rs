//! Consent templates (the spec: "Consent templates match exact argv, names and directory"):
//! a `secret run` goes ahead only when the person approved that exact run — the secret's
//! name, the whole argv and the working directory, compared byte for byte. A run with no
//! matching template opens a consent request (a one-time nonce, like the secret form, at
//! `/index.html#/secret-consent?nonce=…`, or `tuic secret approve`); approving it stores the
//! template, and the agent's next identical run proceeds. Templates are listed and deleted
//! by the person (phone, `tuic secret`).
//!
//! It deliberately never widens a template (no prefix, glob or "any directory") and never
//! holds a value.

use std::collections::HashMap;

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::{SecretError, Secrets, internal, nonce_key};

/// Templates: id → JSON [`Template`].
pub(super) const SECRET_CONSENTS: TableDefinition<'_, &str, &[u8]> =
    TableDefinition::new("secret_consents");

/// Templates kept at once (1,000): each is a person's decision; past it approving is refused
/// until some are deleted.
pub const MAX_TEMPLATES: usize = 1_000;

/// Longest argv a template holds (64 arguments of at most 4 KiB together): a consent is read
/// by a person on a phone.
pub const MAX_ARGV_BYTES: usize = 4096;

/// One approved run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Template {
    /// Public id (listing, deletion).
    pub id: String,
    /// The secret it may use.
    pub name: String,
    /// The exact argv.
    pub argv: Vec<String>,
    /// The exact working directory (absent: the run gives none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Who approved it (the audit's `who`).
    pub approved_by: String,
    /// When, unix ms.
    pub created_ms: u64,
}

impl Template {
    /// Whether this template allows running `argv` in `cwd` with secret `name`.
    pub fn matches(&self, name: &str, argv: &[String], cwd: Option<&str>) -> bool {
        self.name == name && self.argv == argv && self.cwd.as_deref() == cwd
    }
}

/// A run waiting for the person's consent.
#[derive(Debug, Clone, Serialize)]
pub struct ConsentRequest {
    /// The capability: whoever holds it may answer this request once.
    pub nonce: String,
    /// The secret.
    pub name: String,
    /// The exact argv.
    pub argv: Vec<String>,
    /// The exact working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Who asked.
    pub requested_by: String,
    /// Opened, unix ms.
    pub created_ms: u64,
    /// Expires, unix ms.
    pub expires_ms: u64,
}

impl ConsentRequest {
    /// The browser entry of this request.
    pub fn path(&self) -> String {
        format!("/index.html#/secret-consent?nonce={}", self.nonce)
    }
}

/// Pending consent requests by sha256(nonce).
pub(super) type Pending = HashMap<String, ConsentRequest>;

fn check_argv(argv: &[String]) -> Result<(), SecretError> {
    if argv.is_empty() {
        return Err(SecretError::BadCommand("command is empty".into()));
    }
    if argv.iter().map(String::len).sum::<usize>() > MAX_ARGV_BYTES || argv.len() > 64 {
        return Err(SecretError::BadCommand(format!(
            "a command is at most 64 arguments of {MAX_ARGV_BYTES} bytes together"
        )));
    }
    Ok(())
}

impl Secrets {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.consents.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The approved templates. Blocking.
    pub fn templates(&self) -> Result<Vec<Template>, SecretError> {
        let read = || -> anyhow::Result<Vec<Template>> {
            let tx = self.env.store.database().begin_read()?;
            let t = tx.open_table(SECRET_CONSENTS)?;
            let mut out = Vec::new();
            for row in t.iter()? {
                let (_, v) = row?;
                out.push(serde_json::from_slice(v.value())?);
            }
            Ok(out)
        };
        let mut v = read().map_err(internal)?;
        v.sort_by_key(|t: &Template| t.created_ms);
        Ok(v)
    }

    /// Whether a template allows this exact run. Blocking.
    pub fn consented(
        &self,
        name: &str,
        argv: &[String],
        cwd: Option<&str>,
    ) -> Result<bool, SecretError> {
        Ok(self.templates()?.iter().any(|t| t.matches(name, argv, cwd)))
    }

    /// Stores a template for this exact run (the person's own `tuic secret allow`, or an
    /// approved request). Blocking.
    pub fn allow(
        &self,
        name: &str,
        argv: &[String],
        cwd: Option<&str>,
        approved_by: &str,
        now_ms: u64,
    ) -> Result<Template, SecretError> {
        super::check_name(name)?;
        check_argv(argv)?;
        let existing = self.templates()?;
        if let Some(t) = existing.iter().find(|t| t.matches(name, argv, cwd)) {
            return Ok(t.clone());
        }
        if existing.len() >= MAX_TEMPLATES {
            return Err(SecretError::BadCommand(format!(
                "{MAX_TEMPLATES} consent templates are stored; delete some first"
            )));
        }
        let t = Template {
            id: crate::vault::random_token()[..16].to_owned(),
            name: name.to_owned(),
            argv: argv.to_vec(),
            cwd: cwd.map(str::to_owned),
            approved_by: approved_by.to_owned(),
            created_ms: now_ms,
        };
        let put = || -> anyhow::Result<()> {
            let tx = self.env.store.database().begin_write()?;
            tx.open_table(SECRET_CONSENTS)?
                .insert(t.id.as_str(), serde_json::to_vec(&t)?.as_slice())?;
            tx.commit()?;
            Ok(())
        };
        put().map_err(internal)?;
        Ok(t)
    }

    /// Deletes template `id`; whether it existed. Blocking.
    pub fn forget(&self, id: &str) -> Result<bool, SecretError> {
        let delete = || -> anyhow::Result<bool> {
            let tx = self.env.store.database().begin_write()?;
            let had = tx.open_table(SECRET_CONSENTS)?.remove(id)?.is_some();
            tx.commit()?;
            Ok(had)
        };
        delete().map_err(internal)
    }

    /// Opens (or points at the open) consent request for this exact run, announced on the bus.
    pub fn request_consent(
        &self,
        name: &str,
        argv: &[String],
        cwd: Option<&str>,
        requested_by: &str,
        now_ms: u64,
    ) -> Result<ConsentRequest, SecretError> {
        super::check_name(name)?;
        check_argv(argv)?;
        let req = {
            let mut p = self.pending();
            p.retain(|_, r| r.expires_ms > now_ms);
            if let Some(r) = p
                .values()
                .find(|r| r.name == name && r.argv == argv && r.cwd.as_deref() == cwd)
            {
                r.clone()
            } else {
                if p.len() >= super::MAX_FORMS {
                    return Err(SecretError::TooManyForms);
                }
                let r = ConsentRequest {
                    nonce: crate::vault::random_token(),
                    name: name.to_owned(),
                    argv: argv.to_vec(),
                    cwd: cwd.map(str::to_owned),
                    requested_by: requested_by.to_owned(),
                    created_ms: now_ms,
                    expires_ms: now_ms + super::FORM_TTL_MS,
                };
                p.insert(nonce_key(&r.nonce), r.clone());
                r
            }
        };
        self.env
            .bus
            .publish(tuic_proto::events::Event::SecretRequested {
                name: req.name.clone(),
                reason: format!("run {}", shown(&req.argv)),
                form_path: req.path(),
            });
        Ok(req)
    }

    /// The open consent requests (for the person's UIs).
    pub fn consent_requests(&self, now_ms: u64) -> Vec<ConsentRequest> {
        let mut p = self.pending();
        p.retain(|_, r| r.expires_ms > now_ms);
        let mut v: Vec<ConsentRequest> = p.values().cloned().collect();
        v.sort_by_key(|r| r.created_ms);
        v
    }

    /// The request a nonce opens, without answering it.
    pub fn consent_request(&self, nonce: &str, now_ms: u64) -> Result<ConsentRequest, SecretError> {
        self.pending()
            .get(&nonce_key(nonce))
            .filter(|r| r.expires_ms > now_ms)
            .cloned()
            .ok_or(SecretError::BadNonce)
    }

    /// Answers consent request `nonce`: approved, its template is stored (and returned);
    /// refused, the request closes. Blocking.
    pub fn answer_consent(
        &self,
        nonce: &str,
        allow: bool,
        approved_by: &str,
        now_ms: u64,
    ) -> Result<(ConsentRequest, Option<Template>), SecretError> {
        let req = self
            .pending()
            .remove(&nonce_key(nonce))
            .filter(|r| r.expires_ms > now_ms)
            .ok_or(SecretError::BadNonce)?;
        let t = if allow {
            Some(self.allow(
                &req.name,
                &req.argv,
                req.cwd.as_deref(),
                approved_by,
                now_ms,
            )?)
        } else {
            None
        };
        self.env
            .bus
            .publish(tuic_proto::events::Event::SecretResolved {
                name: req.name.clone(),
                stored: allow,
            });
        Ok((req, t))
    }
}

/// An argv as a person reads it (each argument quoted when it needs to be).
pub fn shown(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

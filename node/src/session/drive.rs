//! Driving a session: the one `input` and `submit` service that both adapters call (MCP
//! `session action=input|submit` and `POST /sessions/{id}/input|submit`), with its typed error.
//!
//! The requests are read from the shared argument object (the REST body *is* the MCP
//! arguments), so both adapters refuse bad input with the same words. Each adapter maps
//! [`DriveError`] on its own: MCP into a tool error with [`DriveError::code`] and
//! [`DriveError::fields`], REST into a status and the same JSON object. This module knows
//! neither adapter.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value, json};

use super::capture::Capture;
use super::input;
use super::registry::Registry;
use super::submit::{self, Receipt, Refusal};
use super::{Session, SessionError};
use crate::args;

/// Why driving a session failed. Every variant says whether anything reached the PTY: only
/// [`DriveError::Pty`] may follow a partial write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriveError {
    /// The arguments were refused before anything was written.
    #[error("{0}")]
    Invalid(String),
    /// No live or tombstoned session has that address.
    #[error("unknown session {0}; session action=list shows the live ones")]
    Unknown(String),
    /// The session has exited; nothing was written.
    #[error("session {id} has exited{}", code.map(|c| format!(" (exit code {c})")).unwrap_or_default())]
    Exited {
        /// Session id.
        id: String,
        /// Exit code, when known.
        code: Option<i32>,
        /// Said explicitly by `submit` (its refusals are always safe to retry).
        retry_safe: bool,
    },
    /// A submission was refused before its first byte (not idle, half-typed, claimed).
    #[error("session {id} is not ready for a submission: {reason}; nothing was written")]
    Busy {
        /// Session id.
        id: String,
        /// Why, in words.
        reason: String,
        /// The session's turn epoch when it was refused.
        turn_epoch: u64,
    },
    /// The PTY refused a write.
    #[error("{message}")]
    Pty {
        /// Session id.
        id: String,
        /// The PTY's error.
        message: String,
    },
}

impl DriveError {
    /// The stable code (the MCP error code; REST bodies carry the same).
    pub fn code(&self) -> &'static str {
        match self {
            DriveError::Invalid(_) => "invalid_arguments",
            DriveError::Unknown(_) => "unknown_session",
            DriveError::Exited { .. } => "session_exited",
            DriveError::Busy { .. } => "busy",
            DriveError::Pty { .. } => "pty_error",
        }
    }

    /// The structured fields beside `error` and `code`, in their contract order.
    pub fn fields(&self) -> Map<String, Value> {
        let mut m = Map::new();
        match self {
            DriveError::Invalid(_) => {}
            DriveError::Unknown(r) => {
                m.insert("session_id".into(), json!(r));
            }
            DriveError::Exited {
                id,
                code,
                retry_safe,
            } => {
                m.insert("session_id".into(), json!(id));
                if let Some(c) = code {
                    m.insert("exit_code".into(), json!(c));
                }
                if *retry_safe {
                    m.insert("retry_safe".into(), json!(true));
                }
            }
            DriveError::Busy {
                id,
                reason,
                turn_epoch,
            } => {
                m.insert("session_id".into(), json!(id));
                m.insert("reason".into(), json!(reason));
                m.insert("retry_safe".into(), json!(true));
                m.insert("turn_epoch".into(), json!(turn_epoch));
            }
            DriveError::Pty { id, .. } => {
                m.insert("session_id".into(), json!(id));
            }
        }
        m
    }

    /// The exit of `s` as an error (its code read now).
    pub fn exited(s: &Session) -> Self {
        DriveError::Exited {
            id: s.id.clone(),
            code: s.exit().and_then(|e| e.code),
            retry_safe: false,
        }
    }

    fn from_session(s: &Session, e: SessionError) -> Self {
        match e {
            SessionError::Exited { .. } => Self::exited(s),
            SessionError::Io(message) => DriveError::Pty {
                id: s.id.clone(),
                message,
            },
            // Writes never resize; kept total for the day one does.
            SessionError::Size(e) => DriveError::Pty {
                id: s.id.clone(),
                message: e.to_string(),
            },
        }
    }
}

/// `input`: text and/or one special key, framed for the agent in the foreground.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRequest {
    /// Text to type (may be empty when a key is given).
    pub text: String,
    /// A special key after the text.
    pub key: Option<&'static [u8]>,
    /// `pty_description`: absent keeps, `Some(None)` clears, `Some(Some(d))` replaces.
    pub description: Option<Option<String>>,
}

/// `submit`: one command to a confirmed-idle session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitRequest {
    /// The command (never empty when written).
    pub text: String,
    /// How long to wait for an acknowledgement (already clamped).
    pub timeout: Duration,
    /// `pty_description`, as in [`InputRequest`].
    pub description: Option<Option<String>>,
}

/// `input`'s fields, typed (`crate::args`).
#[derive(Debug, Deserialize)]
struct InputArgs {
    #[serde(default, deserialize_with = "args::string")]
    input: Option<String>,
    #[serde(default, deserialize_with = "args::string")]
    special_key: Option<String>,
    #[serde(default, deserialize_with = "description")]
    pty_description: Option<Option<String>>,
}

/// `submit`'s fields, typed (`crate::args`).
#[derive(Debug, Deserialize)]
struct SubmitArgs {
    #[serde(default, deserialize_with = "args::string")]
    input: Option<String>,
    #[serde(default, deserialize_with = "args::uint")]
    timeout_ms: Option<u64>,
    #[serde(default, deserialize_with = "description")]
    pty_description: Option<Option<String>>,
}

/// `pty_description`: absent keeps the current one (the field's default), a string replaces
/// it, null or "" clears it.
fn description<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Ok(Some(None)),
        Value::String(d) if d.chars().count() <= 256 && !d.chars().any(char::is_control) => {
            Ok(Some(Some(d)))
        }
        _ => Err(serde::de::Error::custom(
            "must be null or one line of at most 256 characters",
        )),
    }
}

fn read<T: serde::de::DeserializeOwned>(args: &Map<String, Value>) -> Result<T, DriveError> {
    args::parse(args).map_err(|e| DriveError::Invalid(e.0))
}

impl InputRequest {
    /// Reads `input`, `special_key` and `pty_description` from the arguments.
    pub fn from_args(args: &Map<String, Value>) -> Result<Self, DriveError> {
        let a: InputArgs = read(args)?;
        let text = a.input.unwrap_or_default();
        let key = match a.special_key {
            None => None,
            Some(k) => Some(
                input::special_key(&k)
                    .ok_or_else(|| DriveError::Invalid(format!("unknown special_key {k}")))?,
            ),
        };
        if text.is_empty() && key.is_none() {
            return Err(DriveError::Invalid(
                "input or special_key is required".into(),
            ));
        }
        Ok(Self {
            text,
            key,
            description: a.pty_description,
        })
    }
}

impl SubmitRequest {
    /// Reads `input`, `timeout_ms` (clamped to the spec's range) and `pty_description`.
    pub fn from_args(args: &Map<String, Value>) -> Result<Self, DriveError> {
        let a: SubmitArgs = read(args)?;
        let text = a.input.ok_or_else(|| {
            DriveError::Invalid("input is required: the command to submit".into())
        })?;
        Ok(Self {
            text,
            timeout: submit::ack_timeout(a.timeout_ms),
            description: a.pty_description,
        })
    }
}

impl Registry {
    /// The running session an address names, for a write: an exited one (still in its
    /// tombstone period) is [`DriveError::Exited`], an unknown one [`DriveError::Unknown`].
    pub fn drivable(&self, r: &str) -> Result<Arc<Session>, DriveError> {
        match self.resolve(r) {
            Some(s) if s.exit().is_none() => Ok(s),
            Some(s) => Err(DriveError::exited(&s)),
            None => Err(DriveError::Unknown(r.to_owned())),
        }
    }
}

impl Session {
    /// `input`: a raw write that proves the write only, never a submission. Blocking (the
    /// write plan holds the writer lock across its scheduling gaps): call off the async workers.
    pub fn input(&self, req: &InputRequest, capture: &Capture) -> Result<(), DriveError> {
        // Refreshes the agent detection the framing depends on.
        let _ = self.row();
        let plan = input::input_plan(&req.text, req.key, self.agent());
        self.write_parts(&plan, capture, || {})
            .map_err(|(_, e)| DriveError::from_session(self, e))?;
        Ok(())
    }

    /// `submit`: the atomic submission and its receipt (`submit::submit`). The write runs on
    /// the blocking pool; the acknowledgement is awaited on the session's output events.
    pub async fn submit(
        self: &Arc<Self>,
        req: &SubmitRequest,
        capture: &Arc<Capture>,
    ) -> Result<Receipt, DriveError> {
        match submit::submit(self, &req.text, req.timeout, capture).await {
            Ok(r) => Ok(r),
            Err(Refusal::EmptyInput) => Err(DriveError::Invalid("input must not be empty".into())),
            Err(Refusal::Exited(_)) => Err(DriveError::Exited {
                id: self.id.clone(),
                code: self.exit().and_then(|e| e.code),
                retry_safe: true,
            }),
            Err(Refusal::Busy { reason, .. }) => Err(DriveError::Busy {
                id: self.id.clone(),
                reason,
                turn_epoch: self.turn_epoch(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    /// Bad arguments are refused with the words both adapters answer.
    #[test]
    fn requests_refuse_bad_arguments_by_name() {
        let cases = [
            (json!({}), "input or special_key is required"),
            (json!({"input": 3}), "input must be a string"),
            (json!({"special_key": "f13"}), "unknown special_key f13"),
            (
                json!({"input": "x", "pty_description": "two\nlines"}),
                "pty_description must be null or one line of at most 256 characters",
            ),
        ];
        for (a, want) in cases {
            assert_eq!(
                InputRequest::from_args(&args(a.clone())),
                Err(DriveError::Invalid(want.into())),
                "{a}"
            );
        }
        assert_eq!(
            SubmitRequest::from_args(&args(json!({}))),
            Err(DriveError::Invalid(
                "input is required: the command to submit".into()
            ))
        );
        assert_eq!(
            SubmitRequest::from_args(&args(json!({"input": "ls", "timeout_ms": -1}))),
            Err(DriveError::Invalid(
                "timeout_ms must be a non-negative integer".into()
            ))
        );
        let ok = SubmitRequest::from_args(&args(
            json!({"input": "ls", "timeout_ms": 1, "pty_description": null}),
        ))
        .unwrap();
        assert_eq!(ok.timeout, Duration::from_millis(250));
        assert_eq!(ok.description, Some(None));
    }

    /// Codes and fields are the contract's, in order.
    #[test]
    fn errors_carry_their_codes_and_fields() {
        let busy = DriveError::Busy {
            id: "p1".into(),
            reason: "busy: output is still arriving".into(),
            turn_epoch: 4,
        };
        assert_eq!(busy.code(), "busy");
        assert_eq!(
            Value::Object(busy.fields()),
            json!({"session_id": "p1", "reason": "busy: output is still arriving", "retry_safe": true, "turn_epoch": 4})
        );
        let gone = DriveError::Exited {
            id: "p1".into(),
            code: Some(2),
            retry_safe: false,
        };
        assert_eq!(gone.to_string(), "session p1 has exited (exit code 2)");
        assert_eq!(
            Value::Object(gone.fields()),
            json!({"session_id": "p1", "exit_code": 2})
        );
        assert_eq!(
            DriveError::Unknown("tu-9".into()).to_string(),
            "unknown session tu-9; session action=list shows the live ones"
        );
    }
}

//! Tailscale detection: asks tailscaled's local API for this machine's state every
//! `tuning.tailscale_refresh_ms` (30 s) within `tuning.tailscale_probe_ms` (500 ms).
//!
//! The Host guard reads the detected DNS name from [`crate::guard::HostTrust`] on every
//! request, so a late tailscaled start, a rename or a stop changes trust without a restart.
//! A probe that times out or fails publishes `unavailable` and the next cycle tries again; a
//! machine without tailscaled is `absent`, which is a normal state, not an error.
//!
//! The service ([`Tailscale`]) holds its [`TailscaleEnv`] (bus, tasks, shutdown, the settings
//! read from the current config, the Host guard's trust), built by the composition root.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Serialize;
use tailscale_localapi::{BackendState, LocalApi};
use tracing::info;
use tuic_proto::events::Event;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::events::Bus;
use crate::guard::HostTrust;

/// Where tailscaled listens on Linux.
pub(crate) const DEFAULT_SOCKET: &str = "/var/run/tailscale/tailscaled.sock";

/// What the last detection found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Detected {
    /// Detection is off (`tailscale.enabled: false`).
    Disabled,
    /// No tailscaled socket on this machine.
    Absent,
    /// tailscaled answers but is not running (logged out, stopped, starting).
    Stopped {
        /// tailscaled's backend state.
        backend_state: String,
    },
    /// Running: this is the machine's name on the tailnet.
    Ready {
        /// DNS name, lowercase, without the trailing dot.
        dns_name: String,
    },
    /// The probe failed or ran past its budget; retried next cycle.
    Unavailable {
        /// Why (never contains secrets).
        reason: String,
    },
}

impl Detected {
    /// The state's name as published.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::Absent => "absent",
            Self::Stopped { .. } => "stopped",
            Self::Ready { .. } => "ready",
            Self::Unavailable { .. } => "unavailable",
        }
    }

    /// The name the Host guard may trust.
    pub fn dns_name(&self) -> Option<&str> {
        match self {
            Self::Ready { dns_name } => Some(dns_name),
            _ => None,
        }
    }
}

/// Detection's settings, read from the current config at each cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `tailscale.enabled`.
    pub enabled: bool,
    /// `tailscale.socket`, else [`DEFAULT_SOCKET`].
    pub socket: PathBuf,
    /// One probe's budget (`tuning.tailscale_probe_ms`).
    pub probe: Duration,
    /// The time between probes (`tuning.tailscale_refresh_ms`).
    pub refresh: Duration,
}

impl Settings {
    /// The settings of `config`.
    pub fn of(config: &crate::config::Config) -> Self {
        Self {
            enabled: config.tailscale.enabled,
            socket: config
                .tailscale
                .socket
                .clone()
                .map_or_else(|| PathBuf::from(DEFAULT_SOCKET), PathBuf::from),
            probe: Duration::from_millis(config.tuning.tailscale_probe_ms.max(1)),
            refresh: Duration::from_millis(config.tuning.tailscale_refresh_ms.max(50)),
        }
    }
}

/// What detection uses of the node. Cloning shares everything.
#[derive(Clone)]
pub struct TailscaleEnv {
    /// `tailscale-status` goes here.
    pub bus: Arc<Bus>,
    /// Owner of the detection loop.
    pub tasks: TaskTracker,
    /// Ends the loop.
    pub shutdown: CancellationToken,
    /// The settings in force now.
    pub settings: Arc<dyn Fn() -> Settings + Send + Sync>,
    /// The Host guard's trust; detection sets its `tailscale_detected`.
    pub host_trust: Arc<RwLock<HostTrust>>,
}

/// Tailscale detection: what it found last, and its environment.
pub struct Tailscale {
    detected: RwLock<Detected>,
    env: TailscaleEnv,
}

impl std::fmt::Debug for Tailscale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tailscale")
            .field("detected", &self.current())
            .finish_non_exhaustive()
    }
}

/// One detection within `budget`.
pub(crate) async fn probe(socket: PathBuf, budget: Duration) -> Detected {
    if !socket.exists() {
        return Detected::Absent;
    }
    let api = LocalApi::new_with_socket_path(&socket);
    match tokio::time::timeout(budget, api.status()).await {
        Err(_) => Detected::Unavailable {
            reason: format!("no answer within {} ms", budget.as_millis()),
        },
        Ok(Err(e)) => Detected::Unavailable {
            reason: e.to_string(),
        },
        Ok(Ok(status)) => {
            let name = status
                .self_status
                .dnsname
                .trim_end_matches('.')
                .to_ascii_lowercase();
            match status.backend_state {
                BackendState::Running if !name.is_empty() => Detected::Ready { dns_name: name },
                other => Detected::Stopped {
                    backend_state: format!("{other:?}"),
                },
            }
        }
    }
}

impl Tailscale {
    /// Nothing detected yet (`absent`).
    pub fn new(env: TailscaleEnv) -> Self {
        Self {
            detected: RwLock::new(Detected::Absent),
            env,
        }
    }

    /// What the last detection found.
    pub fn current(&self) -> Detected {
        self.detected
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Runs one detection now and applies it: the Host guard's trust, `GET /tailscale`, and a
    /// `tailscale-status` event when the state changed.
    pub(crate) async fn refresh(&self) {
        let settings = (self.env.settings)();
        let detected = if settings.enabled {
            probe(settings.socket, settings.probe).await
        } else {
            Detected::Disabled
        };
        let changed = {
            let mut current = self.detected.write().unwrap_or_else(|p| p.into_inner());
            let changed = *current != detected;
            *current = detected.clone();
            changed
        };
        self.env
            .host_trust
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .tailscale_detected = detected.dns_name().map(str::to_owned);
        if changed {
            info!(source = "tailscale", state = detected.name(), dns_name = ?detected.dns_name(), "tailscale state changed");
            self.env.bus.publish(Event::TailscaleStatus {
                state: detected.name().to_owned(),
                dns_name: detected.dns_name().map(str::to_owned),
            });
        }
    }

    /// The detection loop, until shutdown.
    pub(crate) fn spawn(self: &Arc<Self>) {
        let t = self.clone();
        self.env.tasks.spawn(async move {
            loop {
                t.refresh().await;
                let every = (t.env.settings)().refresh;
                tokio::select! {
                    _ = t.env.shutdown.cancelled() => break,
                    _ = tokio::time::sleep(every) => {}
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_socket_is_absent() {
        let d = probe(
            PathBuf::from("/nonexistent/tailscaled.sock"),
            Duration::from_millis(500),
        )
        .await;
        assert_eq!(d, Detected::Absent);
    }

    #[tokio::test]
    async fn a_mute_daemon_is_unavailable_within_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ts.sock");
        // Accepts connections and never answers.
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let _hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                held.push(s);
            }
        });
        let started = std::time::Instant::now();
        let d = probe(path, Duration::from_millis(200)).await;
        assert!(matches!(d, Detected::Unavailable { .. }), "{d:?}");
        assert!(started.elapsed() < Duration::from_millis(1_000));
    }
}

//! The node's own TLS certificate for QUIC peer links: self-signed, generated at first start
//! (`rcgen`), kept in the config dir (`quic-cert.der`, `quic-key.der` with mode 0600) and reused
//! across restarts. A hub pins its SHA-256 fingerprint (trust on first use), so no CA is
//! involved; the fingerprint is published in `GET /health` while remote access is on.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use sha2::{Digest, Sha256};

/// ALPN protocol of the peer link over QUIC.
pub const ALPN: &[u8] = b"tuic-peer/1";

/// The certificate file in the config dir.
pub const CERT_FILE: &str = "quic-cert.der";
/// The private key file in the config dir (0600).
pub const KEY_FILE: &str = "quic-key.der";

/// The node's certificate and key (DER).
#[derive(Clone)]
pub struct NodeCert {
    /// The certificate.
    pub cert: Vec<u8>,
    /// The PKCS#8 private key.
    pub key: Vec<u8>,
    /// `sha256:<hex>` of the certificate.
    pub fingerprint: String,
}

impl std::fmt::Debug for NodeCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCert")
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

impl NodeCert {
    /// The secret behind the QUIC listener's stateless-reset tokens, derived from the private
    /// key so it survives restarts: a restarted node answers packets of a connection its
    /// previous process held with a valid stateless reset, and the hub's side of that link
    /// ends at once instead of after the liveness deadline.
    pub fn reset_secret(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"tuic quic stateless reset v1\0");
        h.update(&self.key);
        h.finalize().into()
    }
}

/// `sha256:<lowercase hex>` of a DER certificate.
pub fn fingerprint(der: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(der)))
}

fn paths(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join(CERT_FILE), dir.join(KEY_FILE))
}

/// Loads the node's certificate from `dir`, generating and storing one when there is none.
/// A half-present or unreadable pair is an error (never silently replaced: hubs pinned it).
pub fn load_or_create(dir: &Path) -> anyhow::Result<NodeCert> {
    let (cert_path, key_path) = paths(dir);
    match (cert_path.exists(), key_path.exists()) {
        (true, true) => {
            let cert = std::fs::read(&cert_path)
                .with_context(|| format!("reading {}", cert_path.display()))?;
            let key = std::fs::read(&key_path)
                .with_context(|| format!("reading {}", key_path.display()))?;
            anyhow::ensure!(
                !cert.is_empty() && !key.is_empty(),
                "the QUIC certificate or key file in {} is empty; remove both to generate a new pair (hubs will then refuse the changed fingerprint until re-connected)",
                dir.display()
            );
            Ok(NodeCert {
                fingerprint: fingerprint(&cert),
                cert,
                key,
            })
        }
        (false, false) => {
            let generated = rcgen::generate_simple_self_signed(vec!["tuic-node".to_owned()])
                .context("generating the QUIC certificate")?;
            let cert = generated.cert.der().to_vec();
            let key = generated.key_pair.serialize_der();
            write_file(&key_path, &key, 0o600)?;
            // Public, but the config dir is this user's alone: every file in it is 0600.
            write_file(&cert_path, &cert, 0o600)?;
            tracing::info!(fingerprint = %fingerprint(&cert), "generated the node's QUIC certificate");
            Ok(NodeCert {
                fingerprint: fingerprint(&cert),
                cert,
                key,
            })
        }
        _ => anyhow::bail!(
            "only one of {CERT_FILE} and {KEY_FILE} exists in {}; restore the other or remove both",
            dir.display()
        ),
    }
}

/// Writes `bytes` to `path` atomically, created with `mode`.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The rustls crypto provider of both ends: ring, as the workspace pins it (rustls 0.23.48
/// deprecates ring's provider for lacking post-quantum key exchange; aws-lc-rs would bring a
/// C/cmake build the workspace avoids).
#[allow(deprecated)]
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls server config of the node's QUIC listener (ring provider, TLS 1.3, ALPN
/// [`ALPN`]).
pub fn server_config(cert: &NodeCert) -> anyhow::Result<rustls::ServerConfig> {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("TLS 1.3 with the ring provider")?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.cert.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key.clone())),
        )
        .context("the node's QUIC certificate")?;
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    Ok(cfg)
}

/// The client's check of a node's certificate: exactly the pinned fingerprint (no CA, no name
/// check: the node's certificate is self-signed); records what was presented.
#[derive(Debug)]
pub struct PinnedVerifier {
    want: String,
    seen: std::sync::Mutex<Option<String>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl PinnedVerifier {
    /// The fingerprint the server presented, once it did.
    pub fn presented(&self) -> Option<String> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let fp = fingerprint(end_entity);
        let ok = fp == self.want;
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(fp);
        if ok {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "certificate fingerprint mismatch".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The rustls client config of a hub dialing a node pinned to `pin` (`sha256:<hex>`), with its
/// verifier (to read what the node presented after a failed handshake).
pub fn client_config(pin: &str) -> anyhow::Result<(rustls::ClientConfig, Arc<PinnedVerifier>)> {
    let provider = provider();
    let verifier = Arc::new(PinnedVerifier {
        want: pin.to_owned(),
        seen: std::sync::Mutex::new(None),
        provider: provider.clone(),
    });
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("TLS 1.3 with the ring provider")?
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    cfg.alpn_protocols = vec![ALPN.to_vec()];
    Ok((cfg, verifier))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_once_then_reused_across_restarts() {
        let d = tempfile::tempdir().unwrap();
        let first = load_or_create(d.path()).unwrap();
        assert!(first.fingerprint.starts_with("sha256:"));
        assert_eq!(first.fingerprint.len(), "sha256:".len() + 64);
        let again = load_or_create(d.path()).unwrap();
        assert_eq!(first.fingerprint, again.fingerprint);
        assert_eq!(first.key, again.key);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        server_config(&again).unwrap();
        // The stateless-reset secret survives the restart too, and is not the key itself.
        assert_eq!(first.reset_secret(), again.reset_secret());
        assert_ne!(
            &first.reset_secret()[..],
            &first.key[..32.min(first.key.len())]
        );
    }

    #[test]
    fn a_half_pair_is_refused_not_replaced() {
        let d = tempfile::tempdir().unwrap();
        load_or_create(d.path()).unwrap();
        std::fs::remove_file(d.path().join(KEY_FILE)).unwrap();
        let e = load_or_create(d.path()).unwrap_err().to_string();
        assert!(e.contains("only one of"), "{e}");
        assert!(d.path().join(CERT_FILE).exists());
        assert!(!d.path().join(KEY_FILE).exists());
    }

    #[test]
    fn a_broken_key_is_a_clear_error() {
        let d = tempfile::tempdir().unwrap();
        let c = load_or_create(d.path()).unwrap();
        let broken = NodeCert {
            key: vec![1, 2, 3],
            ..c
        };
        assert!(server_config(&broken).is_err());
    }
}

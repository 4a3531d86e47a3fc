//! The request boundary's pure rules: which Host authorities and Origins a TCP request may
//! carry, and whether a caller counts as loopback.
//!
//! The middleware in [`crate::server::boundary`] applies them in order: Host, then Origin,
//! then authentication. Everything here is a function of its inputs (the interface address
//! list is refreshed by the caller), so each rule has its own table test.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use http::HeaderMap;
use http::header::{HOST, ORIGIN};

/// How a request reached the node; inserted into every request's extensions by the listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// The IPC socket (0600, this user only).
    Ipc,
    /// The TCP listener; `peer` is the remote address.
    Tcp { peer: SocketAddr },
}

/// What the Host guard trusts besides loopback and private literals.
#[derive(Debug, Clone, Default)]
pub struct HostTrust {
    /// This machine's interface addresses.
    pub interface_ips: Vec<IpAddr>,
    /// The configured Tailscale DNS name (`tailscale.hostname`), lowercase, without trailing dot.
    pub tailscale_name: Option<String>,
    /// The name Tailscale detection found (see [`crate::tailscale`]), refreshed every cycle.
    pub tailscale_detected: Option<String>,
}

/// Why the boundary refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No Host header.
    #[error("missing Host header")]
    MissingHost,
    /// More than one Host header.
    #[error("duplicate Host header")]
    DuplicateHost,
    /// A Host this node does not answer for.
    #[error("foreign Host")]
    ForeignHost,
    /// `Origin: null` or an unparsable origin.
    #[error("opaque Origin")]
    OpaqueOrigin,
    /// A cross-site Origin.
    #[error("foreign Origin")]
    ForeignOrigin,
}

/// Splits an authority into host (lowercase, IPv6 brackets removed) and the raw authority.
fn authority_host(authority: &str) -> Option<String> {
    let a = authority.trim();
    if a.is_empty() || a.contains(['/', '@', ' ', '?', '#']) {
        return None;
    }
    let host = if let Some(rest) = a.strip_prefix('[') {
        let (h, tail) = rest.split_once(']')?;
        if !(tail.is_empty() || tail.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        h
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) if is_port(p) => h,
            Some(_) => return None,
            None => a,
        }
    };
    if host.is_empty() {
        return None;
    }
    Some(host.trim_end_matches('.').to_ascii_lowercase())
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

/// Loopback or private-network address literal (RFC 1918, CGNAT/Tailscale, ULA, link-local).
pub fn is_private_or_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_private() || v4.is_link_local() || in_cgnat(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private_or_loopback(IpAddr::V4(v4));
            }
            v6.is_loopback() || is_ula(v6) || is_v6_link_local(v6)
        }
    }
}

fn in_cgnat(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    o[0] == 100 && (o[1] & 0xc0) == 64
}
fn is_ula(ip: Ipv6Addr) -> bool {
    (ip.segments()[0] & 0xfe00) == 0xfc00
}
fn is_v6_link_local(ip: Ipv6Addr) -> bool {
    (ip.segments()[0] & 0xffc0) == 0xfe80
}

/// The Host guard: exactly one Host naming this node. Returns the validated authority.
pub fn check_host<'a>(headers: &'a HeaderMap, trust: &HostTrust) -> Result<&'a str, Refusal> {
    let mut it = headers.get_all(HOST).iter();
    let first = it.next().ok_or(Refusal::MissingHost)?;
    if it.next().is_some() {
        return Err(Refusal::DuplicateHost);
    }
    let authority = first.to_str().map_err(|_| Refusal::ForeignHost)?;
    let host = authority_host(authority).ok_or(Refusal::ForeignHost)?;
    let trusted = if host == "localhost" {
        true
    } else if let Ok(ip) = host.parse::<IpAddr>() {
        is_private_or_loopback(ip) || trust.interface_ips.contains(&ip)
    } else {
        [&trust.tailscale_name, &trust.tailscale_detected]
            .into_iter()
            .any(|t| t.as_deref().is_some_and(|t| t == host))
    };
    if trusted {
        Ok(authority)
    } else {
        Err(Refusal::ForeignHost)
    }
}

/// The Origin guard for TCP: absent, an exact allowed origin, or the HTTP(S) origin of the
/// validated Host. Returns the origin to echo in CORS headers, if any.
pub fn check_origin<'a>(
    headers: &'a HeaderMap,
    validated_host: &str,
    allowed: &[String],
) -> Result<Option<&'a str>, Refusal> {
    let Some(raw) = headers.get(ORIGIN) else {
        return Ok(None);
    };
    let origin = raw.to_str().map_err(|_| Refusal::OpaqueOrigin)?.trim();
    let Some((scheme, authority)) = origin.split_once("://") else {
        return Err(Refusal::OpaqueOrigin);
    };
    if authority_host(authority).is_none() {
        return Err(Refusal::OpaqueOrigin);
    }
    if allowed.iter().any(|a| a.trim_end_matches('/') == origin) {
        return Ok(Some(origin));
    }
    let same_host = authority.eq_ignore_ascii_case(validated_host);
    if same_host && (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        Ok(Some(origin))
    } else {
        Err(Refusal::ForeignOrigin)
    }
}

/// The Origin rule on the IPC socket's `/mcp`: a present Origin must be allowed or name
/// localhost / a loopback address.
pub fn check_ipc_origin(headers: &HeaderMap, allowed: &[String]) -> Result<(), Refusal> {
    let Some(raw) = headers.get(ORIGIN) else {
        return Ok(());
    };
    let origin = raw.to_str().map_err(|_| Refusal::OpaqueOrigin)?.trim();
    if allowed.iter().any(|a| a.trim_end_matches('/') == origin) {
        return Ok(());
    }
    let (scheme, authority) = origin.split_once("://").ok_or(Refusal::OpaqueOrigin)?;
    let host = authority_host(authority).ok_or(Refusal::OpaqueOrigin)?;
    let local = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if local && (scheme == "http" || scheme == "https") {
        Ok(())
    } else {
        Err(Refusal::ForeignOrigin)
    }
}

/// Headers that mark a request as relayed by a proxy (then a 127.0.0.1 peer is not local).
const PROXY_HEADERS: &[&str] = &["forwarded", "x-forwarded-for", "tailscale-user-login"];

/// Whether the caller is loopback: the IPC socket, or TCP from 127.0.0.0/8 or ::1 without
/// proxy headers (`tailscale serve` relays from 127.0.0.1 and is remote).
pub fn is_loopback_caller(transport: Transport, headers: &HeaderMap) -> bool {
    match transport {
        Transport::Ipc => true,
        Transport::Tcp { peer } => {
            let ip = match peer.ip() {
                IpAddr::V6(v6) => v6
                    .to_ipv4_mapped()
                    .map(IpAddr::V4)
                    .unwrap_or(IpAddr::V6(v6)),
                ip => ip,
            };
            ip.is_loopback() && !PROXY_HEADERS.iter().any(|h| headers.contains_key(*h))
        }
    }
}

/// Whether `ip` is a Tailscale address (100.64.0.0/10 or fd7a:115c:a1e0::/48): its traffic
/// rides Tailscale's encrypted tunnel, so plain HTTP to it does not expose credentials.
pub fn is_tailscale_ip(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            o[0] == 100 && (o[1] & 0xc0) == 64
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            s[0] == 0xfd7a && s[1] == 0x115c && s[2] == 0xa1e0
        }
    }
}

/// An IPv4-mapped IPv6 address as its IPv4 form.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        ip => ip,
    }
}

/// Whether the request reached the proxy in front of the node over HTTPS: TCP from loopback
/// (only a proxy on this machine, such as `tailscale serve`, is trusted to say so) with
/// `X-Forwarded-Proto: https` or `Forwarded: proto=https`. The node's TCP listener itself
/// speaks plain HTTP, so there is no direct case.
pub fn arrived_over_https(transport: Transport, headers: &HeaderMap) -> bool {
    let Transport::Tcp { peer } = transport else {
        return false;
    };
    if !canonical(peer.ip()).is_loopback() {
        return false;
    }
    let value = |name: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase)
            .collect::<Vec<_>>()
    };
    let xfp = value("x-forwarded-proto")
        .iter()
        .any(|v| v.split(',').next().is_some_and(|p| p.trim() == "https"));
    let fwd = value("forwarded").iter().any(|v| {
        v.split(',').next().is_some_and(|first| {
            first
                .split(';')
                .any(|kv| kv.trim().trim_matches('"') == "proto=https")
        })
    });
    xfp || fwd
}

/// Whether credentials sent on this request cross a network in the clear: TCP, not relayed
/// over HTTPS by a local proxy, from an address that is neither loopback nor Tailscale.
pub fn plain_http_exposed(transport: Transport, headers: &HeaderMap) -> bool {
    let Transport::Tcp { peer } = transport else {
        return false;
    };
    let ip = canonical(peer.ip());
    !ip.is_loopback() && !is_tailscale_ip(ip) && !arrived_over_https(transport, headers)
}

/// This machine's interface addresses (errors give an empty list: only literals then pass).
pub fn interface_ips() -> Vec<IpAddr> {
    if_addrs::get_if_addrs()
        .map(|v| v.into_iter().map(|i| i.ip()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn hosts(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HOST, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn trust() -> HostTrust {
        HostTrust {
            interface_ips: vec!["203.0.113.7".parse().unwrap()],
            tailscale_name: Some("box.tail1.ts.net".into()),
            tailscale_detected: None,
        }
    }

    #[test]
    fn detected_tailscale_name_is_trusted_beside_the_configured_one() {
        let t = HostTrust {
            tailscale_detected: Some("laptop.tail9.ts.net".into()),
            ..trust()
        };
        for h in [
            "laptop.tail9.ts.net",
            "box.tail1.ts.net",
            "laptop.tail9.ts.net.:443",
        ] {
            assert!(check_host(&hosts(&[h]), &t).is_ok(), "{h}");
        }
        let plain = HostTrust {
            tailscale_name: None,
            ..t.clone()
        };
        assert_eq!(
            check_host(&hosts(&["box.tail1.ts.net"]), &plain),
            Err(Refusal::ForeignHost)
        );
    }

    #[test]
    fn host_guard_table() {
        let ok = [
            "localhost",
            "localhost:9876",
            "LOCALHOST:1",
            "127.0.0.1:9876",
            "127.8.9.1",
            "[::1]:9876",
            "[::1]",
            "10.1.2.3:80",
            "192.168.1.5",
            "172.16.0.1",
            "100.101.102.103:9876",
            "[fd7a:115c:a1e0::1]:9876",
            "203.0.113.7:9876",
            "box.tail1.ts.net",
            "box.tail1.ts.net.:443",
        ];
        for h in ok {
            assert!(
                check_host(&hosts(&[h]), &trust()).is_ok(),
                "{h} should pass"
            );
        }
        let foreign = [
            "evil.example",
            "evil.example:9876",
            "8.8.8.8",
            "203.0.113.8",
            "localhost.evil.example",
            "box.tail1.ts.net.evil",
            "user@localhost",
            "localhost:99999999",
            "[::1",
            "",
        ];
        for h in foreign {
            assert_eq!(
                check_host(&hosts(&[h]), &trust()),
                Err(Refusal::ForeignHost),
                "{h}"
            );
        }
        assert_eq!(check_host(&hosts(&[]), &trust()), Err(Refusal::MissingHost));
        assert_eq!(
            check_host(&hosts(&["localhost", "localhost"]), &trust()),
            Err(Refusal::DuplicateHost)
        );
    }

    fn origin(o: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ORIGIN, HeaderValue::from_str(o).unwrap());
        h
    }

    #[test]
    fn origin_guard_table() {
        let allowed = vec!["http://tauri.localhost".to_owned()];
        let host = "localhost:9876";
        assert_eq!(check_origin(&HeaderMap::new(), host, &allowed), Ok(None));
        assert!(check_origin(&origin("http://localhost:9876"), host, &allowed).is_ok());
        assert!(check_origin(&origin("https://localhost:9876"), host, &allowed).is_ok());
        assert!(check_origin(&origin("http://tauri.localhost"), host, &allowed).is_ok());
        assert_eq!(
            check_origin(&origin("http://evil.example"), host, &allowed),
            Err(Refusal::ForeignOrigin)
        );
        assert_eq!(
            check_origin(&origin("http://localhost:9877"), host, &allowed),
            Err(Refusal::ForeignOrigin)
        );
        assert_eq!(
            check_origin(&origin("ftp://localhost:9876"), host, &allowed),
            Err(Refusal::ForeignOrigin)
        );
        assert_eq!(
            check_origin(&origin("null"), host, &allowed),
            Err(Refusal::OpaqueOrigin)
        );
        assert_eq!(
            check_origin(&origin("file://"), host, &allowed),
            Err(Refusal::OpaqueOrigin)
        );
    }

    #[test]
    fn ipc_origin_rule() {
        assert!(check_ipc_origin(&HeaderMap::new(), &[]).is_ok());
        assert!(check_ipc_origin(&origin("http://localhost:5173"), &[]).is_ok());
        assert!(check_ipc_origin(&origin("http://127.0.0.1"), &[]).is_ok());
        assert_eq!(
            check_ipc_origin(&origin("http://evil.example"), &[]),
            Err(Refusal::ForeignOrigin)
        );
        assert_eq!(
            check_ipc_origin(&origin("null"), &[]),
            Err(Refusal::OpaqueOrigin)
        );
    }

    #[test]
    fn loopback_caller_rules() {
        let lo = Transport::Tcp {
            peer: "127.0.0.1:5000".parse().unwrap(),
        };
        let lan = Transport::Tcp {
            peer: "192.168.1.9:5000".parse().unwrap(),
        };
        let mapped = Transport::Tcp {
            peer: "[::ffff:127.0.0.1]:5000".parse().unwrap(),
        };
        assert!(is_loopback_caller(Transport::Ipc, &HeaderMap::new()));
        assert!(is_loopback_caller(lo, &HeaderMap::new()));
        assert!(is_loopback_caller(mapped, &HeaderMap::new()));
        assert!(!is_loopback_caller(lan, &HeaderMap::new()));
        for h in PROXY_HEADERS {
            let mut hm = HeaderMap::new();
            hm.insert(*h, HeaderValue::from_static("x"));
            assert!(!is_loopback_caller(lo, &hm), "{h}");
        }
    }

    #[test]
    fn https_by_proxy_and_plain_http_exposure() {
        let lo = Transport::Tcp {
            peer: "127.0.0.1:5000".parse().unwrap(),
        };
        let lan = Transport::Tcp {
            peer: "192.168.1.9:5000".parse().unwrap(),
        };
        let ts = Transport::Tcp {
            peer: "100.101.102.103:5000".parse().unwrap(),
        };
        let mut https = HeaderMap::new();
        https.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        let mut fwd = HeaderMap::new();
        fwd.insert(
            "forwarded",
            HeaderValue::from_static("for=100.1.2.3;proto=https"),
        );
        let none = HeaderMap::new();
        assert!(arrived_over_https(lo, &https));
        assert!(arrived_over_https(lo, &fwd));
        assert!(!arrived_over_https(lo, &none));
        assert!(
            !arrived_over_https(lan, &https),
            "only a local proxy is trusted"
        );
        assert!(!arrived_over_https(Transport::Ipc, &https));
        assert!(plain_http_exposed(lan, &none));
        assert!(plain_http_exposed(lan, &https));
        assert!(!plain_http_exposed(lo, &none));
        assert!(!plain_http_exposed(ts, &none));
        assert!(!plain_http_exposed(Transport::Ipc, &none));
        assert!(is_tailscale_ip("fd7a:115c:a1e0::1".parse().unwrap()));
        assert!(!is_tailscale_ip("100.128.0.1".parse().unwrap()));
    }
}

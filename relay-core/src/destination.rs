//! Where the relay may send a push: the rules a push destination passes before the relay
//! stores it (`POST /api/v1/push/subscribe`) and again before it opens a connection to it.
//!
//! A Web Push endpoint is a URL chosen by the account that subscribes, so without rules any
//! account could make the relay open connections into its own network (loopback admin ports,
//! cloud metadata at 169.254.169.254, private services). The rules, in [`PushDestinations`]:
//!
//! * **Scheme**: `https://` only (`http://` only with [`PushDestinations::allow_http`], a
//!   relay's test mode).
//! * **Host syntax** ([`parse_endpoint`]): a DNS name (LDH labels, at most 253 bytes, one
//!   trailing dot dropped, lowercased), a canonical dotted-quad IPv4 address, or a bracketed
//!   IPv6 address without a zone. A host whose last label is numeric but which is not a
//!   canonical dotted quad (`127.1`, `0x7f000001`, `2130706433`, `0177.0.0.1`, `127.0.0.01`)
//!   is refused: resolvers and URL parsers read such forms as IPv4 addresses in different
//!   ways, so the relay will not guess which address it names. Userinfo (`user@`),
//!   percent-encoding and non-ASCII hosts are refused.
//! * **Local names**: `localhost`, `*.localhost`, `*.local`, `*.home.arpa`, `*.internal`
//!   and `*.invalid` (names that resolve on the relay's own machine or network, if at all).
//! * **Addresses** ([`check_ip`]): only globally routable unicast addresses. Refused:
//!   unspecified, loopback, private (RFC 1918), shared (100.64/10), link-local (169.254/16,
//!   fe80::/10), unique-local (fc00::/7), site-local (fec0::/10), multicast, broadcast,
//!   benchmarking, documentation and reserved ranges, and every IPv6 form that embeds an IPv4
//!   address (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`,
//!   6to4 `2002::/16`, Teredo `2001::/32`), whatever IPv4 address they carry.
//! * **Allowlist** ([`PushDestinations::allowed_hosts`], optional): when set, the host must
//!   be one of its names or end with `.` + one of its `*.`-prefixed suffixes.
//!
//! **Where each check lives.** This module is pure (no DNS, no sockets). relay-core applies
//! it at subscription: syntax, scheme, local names, literal addresses and the allowlist, and,
//! for a host given by name, the addresses **the shell** resolved for that name and attached
//! to the request ([`crate::HttpRequest::resolved`]); a name without a resolution is refused
//! (fail-closed), so a shell that does not resolve cannot store a name it never checked. At
//! send time the shell's transport (`relay_push::HttpsTransport`) applies the same policy
//! again, because DNS can change: it resolves the name once, refuses the push unless every
//! address passes, and connects to exactly the addresses it checked (no second resolution).
//! [`PushDestinations::allow_private`] (a relay's test mode, or `--push-allow-private` for a
//! lab) turns the address and local-name rules off.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use wire::ErrorCode;

/// Longest DNS name, in bytes (RFC 1035).
pub const MAX_HOST_NAME_BYTES: usize = 253;
/// Longest DNS label, in bytes (RFC 1035).
pub const MAX_LABEL_BYTES: usize = 63;

/// Name suffixes that never name a public push service (RFC 6761, RFC 8375, mDNS, and the
/// `internal` TLD reserved for private use); a host equal to one (without the dot) or ending
/// with one is refused.
pub const LOCAL_NAME_SUFFIXES: &[&str] = &[
    ".localhost",
    ".local",
    ".home.arpa",
    ".internal",
    ".invalid",
];

/// The policy for push destinations; [`Default`] is production's (https, public addresses
/// only, any public host).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushDestinations {
    /// Also accept `http://` endpoints (a relay's test mode: push-service stand-ins).
    pub allow_http: bool,
    /// Accept any address and local names (a relay's test mode, or a lab whose push service
    /// runs on a private network). Syntax, scheme and allowlist rules still apply.
    pub allow_private: bool,
    /// When not empty, the only push-service hosts: exact names (`fcm.googleapis.com`) or
    /// `*.`-prefixed suffixes (`*.push.services.mozilla.com`), lower case.
    pub allowed_hosts: Vec<String>,
}

impl PushDestinations {
    /// The test-mode policy: `http://` and any address.
    pub fn permissive() -> Self {
        Self {
            allow_http: true,
            allow_private: true,
            allowed_hosts: Vec::new(),
        }
    }

    /// Whether a host given by name must come with its resolved addresses (every address rule
    /// is on).
    pub fn requires_resolution(&self) -> bool {
        !self.allow_private
    }

    /// Parses `url` and checks everything that needs no DNS: scheme, host syntax, local names,
    /// a literal address, the allowlist.
    pub fn check_url(&self, url: &str) -> Result<Destination, DestinationError> {
        let dest = parse_endpoint(url)?;
        if !dest.https && !self.allow_http {
            return Err(DestinationError::Scheme);
        }
        self.check_host(&dest.host)?;
        Ok(dest)
    }

    /// The rules on a parsed host that need no DNS: local names, a literal address, the
    /// allowlist.
    pub fn check_host(&self, host: &Host) -> Result<(), DestinationError> {
        match host {
            Host::Ip(ip) => {
                if !self.allowed_hosts.is_empty() {
                    return Err(DestinationError::NotAllowed);
                }
                self.check_ip(*ip)
            }
            Host::Name(name) => {
                if !self.allow_private && is_local_name(name) {
                    return Err(DestinationError::LocalName);
                }
                if !self.allowed_hosts.is_empty()
                    && !self.allowed_hosts.iter().any(|p| host_matches(p, name))
                {
                    return Err(DestinationError::NotAllowed);
                }
                Ok(())
            }
        }
    }

    /// The address rule: `ip` must be public (unless [`allow_private`](Self::allow_private)).
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), DestinationError> {
        if self.allow_private {
            return Ok(());
        }
        check_ip(ip)
    }

    /// Every address a name resolved to must pass [`check_ip`](Self::check_ip); no address
    /// at all is [`DestinationError::Unresolvable`].
    pub fn check_resolved(&self, addrs: &[IpAddr]) -> Result<(), DestinationError> {
        if addrs.is_empty() {
            return Err(DestinationError::Unresolvable);
        }
        addrs.iter().try_for_each(|ip| self.check_ip(*ip))
    }
}

/// Whether `name` matches the allowlist entry `pattern` (`host` or `*.suffix`).
fn host_matches(pattern: &str, name: &str) -> bool {
    let pattern = pattern.trim_end_matches('.').to_ascii_lowercase();
    match pattern.strip_prefix("*.") {
        Some(suffix) => name
            .strip_suffix(suffix)
            .is_some_and(|head| head.ends_with('.') && head.len() > 1),
        None => name == pattern,
    }
}

/// Whether `name` (lower case, no trailing dot) is a local name.
pub fn is_local_name(name: &str) -> bool {
    name == "localhost"
        || LOCAL_NAME_SUFFIXES
            .iter()
            .any(|s| name.ends_with(s) || name == &s[1..])
}

/// A push destination's host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A DNS name, lower case, without a trailing dot.
    Name(String),
    /// A literal address (IPv6 given in brackets).
    Ip(IpAddr),
}

/// A parsed push endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// `https://` (else `http://`).
    pub https: bool,
    /// The host.
    pub host: Host,
    /// The port (443 / 80 when the URL gives none).
    pub port: u16,
}

/// Why a push destination is refused. Messages never repeat the endpoint (it is a
/// capability).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    /// Not a URL the relay can use.
    #[error("the endpoint is not a valid URL: {0}")]
    Malformed(&'static str),
    /// Not `https://`.
    #[error("the endpoint must be an https:// URL")]
    Scheme,
    /// A numeric host that is not a canonical dotted-quad IPv4 address.
    #[error("the endpoint's host is a non-canonical numeric address")]
    NonCanonicalNumeric,
    /// `localhost` and other local names.
    #[error("the endpoint's host is a local name")]
    LocalName,
    /// The address is not a public unicast address.
    #[error("the endpoint's address is {0}, not a public address")]
    NotPublic(AddressKind),
    /// The host is not on the operator's allowlist.
    #[error("the endpoint's host is not an allowed push service")]
    NotAllowed,
    /// The name resolved to no address.
    #[error("the endpoint's host name does not resolve")]
    Unresolvable,
}

impl DestinationError {
    /// The stable error code: `PUSH_ENDPOINT_UNRESOLVABLE` for a name without addresses,
    /// `INVALID_FIELD` for a URL that does not parse, `PUSH_ENDPOINT_FORBIDDEN` otherwise.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Malformed(_) => ErrorCode::INVALID_FIELD, // probe: refused by the caller
            Self::Unresolvable => ErrorCode::PUSH_ENDPOINT_UNRESOLVABLE, // probe: refused by the caller
            _ => ErrorCode::PUSH_ENDPOINT_FORBIDDEN, // probe: refused by the caller
        }
    }
}

/// What kind of non-public address was refused (for messages and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressKind {
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918, `100.64.0.0/10`.
    Private,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// `fc00::/7`, `fec0::/10`.
    UniqueLocal,
    /// `224.0.0.0/4`, `255.255.255.255`, `ff00::/8`.
    Multicast,
    /// An IPv6 address embedding an IPv4 one (mapped, compatible, NAT64, 6to4, Teredo).
    Embedded,
    /// Documentation, benchmarking, protocol-assignment and reserved ranges.
    Reserved,
}

impl std::fmt::Display for AddressKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Unspecified => "unspecified",
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::LinkLocal => "link-local",
            Self::UniqueLocal => "unique-local",
            Self::Multicast => "multicast or broadcast",
            Self::Embedded => "an IPv6 form of an IPv4 address",
            Self::Reserved => "reserved",
        })
    }
}

/// `Ok` when `ip` is a public unicast address (see the module doc).
pub fn check_ip(ip: IpAddr) -> Result<(), DestinationError> {
    match classify(ip) {
        None => Ok(()),
        Some(kind) => Err(DestinationError::NotPublic(kind)),
    }
}

/// `None` for a public unicast address, else what it is.
pub fn classify(ip: IpAddr) -> Option<AddressKind> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Reserved IPv4 /24s: IETF protocol assignments (192.0.0.0/24), the three documentation
/// networks (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24) and the 6to4 relay anycast
/// (192.88.99.0/24).
const RESERVED_V4_24: [[u8; 3]; 5] = [
    [192, 0, 0],
    [192, 0, 2],
    [198, 51, 100],
    [203, 0, 113],
    [192, 88, 99],
];

fn classify_v4(ip: Ipv4Addr) -> Option<AddressKind> {
    let [a, b, c, _] = ip.octets();
    let kind = if a == 0 {
        AddressKind::Unspecified
    } else if ip.is_loopback() {
        AddressKind::Loopback
    } else if ip.is_private() || (a == 100 && (64..128).contains(&b)) {
        AddressKind::Private
    } else if ip.is_link_local() {
        AddressKind::LinkLocal
    } else if ip.is_multicast() || ip.is_broadcast() {
        AddressKind::Multicast
    } else if RESERVED_V4_24.contains(&[a, b, c])
        || (a == 198 && (b & 0xfe) == 18) // benchmarking, 198.18.0.0/15
        || a >= 240
    {
        AddressKind::Reserved
    } else {
        return None;
    };
    Some(kind)
}

/// IPv6 forms that carry an IPv4 address: IPv4-mapped `::ffff:0:0/96` and IPv4-compatible
/// `::/96`, IPv4-translated `::ffff:0:0:0/96`, NAT64 `64:ff9b::/32`, 6to4 `2002::/16` and
/// Teredo `2001::/32`.
fn embeds_ipv4(s: &[u16; 8]) -> bool {
    let mapped_or_compatible = s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0);
    let translated = s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0;
    let nat64 = s[0] == 0x0064 && s[1] == 0xff9b;
    let six_to_four = s[0] == 0x2002;
    let teredo = s[0] == 0x2001 && s[1] == 0;
    mapped_or_compatible || translated || nat64 || six_to_four || teredo
}

/// Classifies an IPv6 address; anything outside `2000::/3` (global unicast) is reserved.
fn classify_v6(ip: Ipv6Addr) -> Option<AddressKind> {
    let s = ip.segments();
    let kind = if ip.is_unspecified() {
        AddressKind::Unspecified
    } else if ip.is_loopback() {
        AddressKind::Loopback
    } else if ip.is_multicast() {
        AddressKind::Multicast
    } else if (s[0] & 0xffc0) == 0xfe80 {
        AddressKind::LinkLocal
    } else if (s[0] & 0xfe00) == 0xfc00 || (s[0] & 0xffc0) == 0xfec0 {
        AddressKind::UniqueLocal
    } else if embeds_ipv4(&s) {
        AddressKind::Embedded
    } else if (s[0] == 0x2001 && s[1] == 0x0db8) // documentation
        || (s[0] == 0x0100 && s[1..4] == [0; 3]) // discard-only
        || (s[0] == 0x2001 && s[1] < 0x0200) // IETF protocol assignments
        || (s[0] & 0xe000) != 0x2000
    {
        AddressKind::Reserved
    } else {
        return None;
    };
    Some(kind)
}

/// Parses a push endpoint URL: `http[s]://host[:port][/path][?query]` (see the module doc for
/// the host rules). Checks nothing but syntax and the numeric-host rule.
pub fn parse_endpoint(url: &str) -> Result<Destination, DestinationError> {
    let (https, rest) = if let Some(rest) = strip_prefix_ignore_case(url, "https://") {
        (true, rest)
    } else if let Some(rest) = strip_prefix_ignore_case(url, "http://") {
        (false, rest)
    } else {
        return Err(DestinationError::Malformed(
            "the endpoint must be an https:// URL",
        ));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(DestinationError::Malformed("userinfo is not allowed"));
    }
    let default_port = if https { 443 } else { 80 };
    let (host, port) = split_host_port(authority)?;
    let port = match port {
        None => default_port,
        Some(p) => parse_port(p)?,
    };
    Ok(Destination {
        https,
        host: parse_host(host)?,
        port,
    })
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), DestinationError> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest
            .split_once(']')
            .ok_or(DestinationError::Malformed("unclosed IPv6 bracket"))?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or(DestinationError::Malformed("text after the IPv6 address"))?,
            ),
        };
        return Ok((authority.get(..inside.len() + 2).unwrap_or(authority), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Ok((host, Some(port))),
        None => Ok((authority, None)),
    }
}

fn parse_port(port: &str) -> Result<u16, DestinationError> {
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(DestinationError::Malformed("the port is not a number"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(DestinationError::Malformed("the port is out of range")),
    }
}

/// Parses a URL host (`name`, `a.b.c.d`, `[v6]`) by the rules of the module doc.
pub fn parse_host(host: &str) -> Result<Host, DestinationError> {
    if host.is_empty() {
        return Err(DestinationError::Malformed("no host"));
    }
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        if inner.contains('%') {
            return Err(DestinationError::Malformed(
                "IPv6 zone identifiers are not allowed",
            ));
        }
        return inner
            .parse::<Ipv6Addr>()
            .map(|ip| Host::Ip(IpAddr::V6(ip)))
            .map_err(|_| DestinationError::Malformed("not an IPv6 address"));
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    {
        return Err(DestinationError::Malformed(
            "the host has characters a DNS name cannot have",
        ));
    }
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let last = name.rsplit('.').next().unwrap_or("");
    if looks_numeric(last) {
        return canonical_ipv4(&name)
            .map(|ip| Host::Ip(IpAddr::V4(ip)))
            .ok_or(DestinationError::NonCanonicalNumeric);
    }
    if name.is_empty() || name.len() > MAX_HOST_NAME_BYTES {
        return Err(DestinationError::Malformed(
            "the host name is empty or too long",
        ));
    }
    for label in name.split('.') {
        if label.is_empty()
            || label.len() > MAX_LABEL_BYTES
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(DestinationError::Malformed(
                "the host name has an invalid label",
            ));
        }
    }
    Ok(Host::Name(name))
}

/// Whether a label would be read as a number by an IPv4 parser (decimal, octal or `0x` hex).
fn looks_numeric(label: &str) -> bool {
    let hex = label
        .strip_prefix("0x")
        .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    hex || (!label.is_empty() && label.bytes().all(|b| b.is_ascii_digit()))
}

/// `a.b.c.d` with four decimal labels in 0..=255 and no leading zeros, else `None`.
fn canonical_ipv4(text: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut labels = text.split('.');
    for octet in &mut octets {
        let label = labels.next()?;
        let canonical = !label.is_empty()
            && label.len() <= 3
            && label.bytes().all(|b| b.is_ascii_digit())
            && (label == "0" || !label.starts_with('0'));
        if !canonical {
            return None;
        }
        *octet = label.parse().ok()?;
    }
    labels.next().is_none().then_some(Ipv4Addr::from(octets))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> DestinationError {
        PushDestinations::default().check_url(url).expect_err(url)
    }

    #[test]
    fn every_local_and_non_canonical_form_is_refused_without_dns() {
        for url in [
            "https://127.0.0.1/x",
            "https://localhost/x",
            "https://LOCALHOST./x",
            "https://push.localhost/x",
            "https://[::1]/x",
            "https://[::ffff:127.0.0.1]/x",
            "https://[::ffff:7f00:1]/x",
            "https://[::127.0.0.1]/x",
            "https://127.1/x",
            "https://0x7f000001/x",
            "https://2130706433/x",
            "https://0177.0.0.1/x",
            "https://127.0.0.01/x",
            "https://0.0.0.0/x",
            "https://0/x",
            "https://[::]/x",
            "https://10.1.2.3/x",
            "https://172.16.0.1/x",
            "https://192.168.1.1/x",
            "https://169.254.169.254/latest/meta-data",
            "https://100.64.0.1/x",
            "https://[fe80::1]/x",
            "https://[fd00::1]/x",
            "https://[fec0::1]/x",
            "https://[ff02::1]/x",
            "https://224.0.0.1/x",
            "https://255.255.255.255/x",
            "https://[64:ff9b::a9fe:a9fe]/x",
            "https://[2002:7f00:1::]/x",
            "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/x",
            "https://192.0.2.1/x",
            "https://[2001:db8::1]/x",
            "https://printer.local/x",
            "https://metadata.google.internal/x",
        ] {
            let e = refused(url);
            assert_eq!(e.code(), ErrorCode::PUSH_ENDPOINT_FORBIDDEN, "{url}: {e}");
        }
    }

    #[test]
    fn public_hosts_pass_and_names_need_a_resolution() {
        let p = PushDestinations::default();
        let d = p
            .check_url("https://fcm.googleapis.com/fcm/send/abc")
            .unwrap();
        assert_eq!(d.host, Host::Name("fcm.googleapis.com".into()));
        assert_eq!(d.port, 443);
        assert!(p.requires_resolution());
        let d = p.check_url("https://8.8.8.8:8443/x").unwrap();
        assert_eq!(d.host, Host::Ip("8.8.8.8".parse().unwrap()));
        assert_eq!(d.port, 8443);
        assert!(p.check_url("https://[2606:4700::1111]/x").is_ok());
        assert_eq!(
            p.check_resolved(&[]).unwrap_err(),
            DestinationError::Unresolvable
        );
        assert!(p.check_resolved(&["8.8.8.8".parse().unwrap()]).is_ok());
        assert!(
            p.check_resolved(&["8.8.8.8".parse().unwrap(), "10.0.0.1".parse().unwrap()])
                .is_err(),
            "one private address refuses the name"
        );
    }

    #[test]
    fn scheme_and_syntax() {
        assert_eq!(refused("http://push.example/x"), DestinationError::Scheme);
        assert_eq!(
            refused("ftp://push.example/x").code(),
            ErrorCode::INVALID_FIELD
        );
        for url in [
            "https://user@push.example/x",
            "https:///x",
            "https://push.example:0/x",
            "https://push.example:99999/x",
            "https://push%2eexample/x",
            "https://[::1%25eth0]/x",
            "https://push..example/x",
            "https://-push.example/x",
            "https://pü.example/x",
        ] {
            assert_eq!(refused(url).code(), ErrorCode::INVALID_FIELD, "{url}");
        }
        let permissive = PushDestinations::permissive();
        assert!(permissive.check_url("http://127.0.0.1:9000/x").is_ok());
        assert!(permissive.check_url("http://localhost/x").is_ok());
        assert_eq!(
            permissive.check_url("http://127.1/x").unwrap_err(),
            DestinationError::NonCanonicalNumeric,
            "syntax rules hold in test mode too"
        );
    }

    #[test]
    fn allowlist() {
        let p = PushDestinations {
            allowed_hosts: vec!["fcm.googleapis.com".into(), "*.push.apple.com".into()],
            ..PushDestinations::default()
        };
        assert!(p.check_url("https://fcm.googleapis.com/x").is_ok());
        assert!(p.check_url("https://web.push.apple.com/x").is_ok());
        assert_eq!(
            p.check_url("https://push.apple.com/x").unwrap_err(),
            DestinationError::NotAllowed
        );
        assert_eq!(
            p.check_url("https://evilpush.apple.com.example/x")
                .unwrap_err(),
            DestinationError::NotAllowed
        );
        assert_eq!(
            p.check_url("https://8.8.8.8/x").unwrap_err(),
            DestinationError::NotAllowed
        );
    }
}

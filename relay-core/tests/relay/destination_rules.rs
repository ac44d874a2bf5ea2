//! `relay_core::destination` rule by rule, on both sides of each edge: what kind of address
//! each refused range is (an IPv6 form of an IPv4 address outside `2000::/3` is refused as
//! reserved anyway, so only the kind tells the embedded rule worked), the public neighbours of
//! every refused range, ports and labels at their length limits, the allowlist's suffix match,
//! and the exact error of each malformed form.

use std::net::IpAddr;

use relay_core::destination::{
    AddressKind, DestinationError, Host, LOCAL_NAME_SUFFIXES, MAX_HOST_NAME_BYTES, MAX_LABEL_BYTES,
    PushDestinations, classify, is_local_name, parse_endpoint, parse_host,
};
use wire::ErrorCode;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn kind(s: &str) -> Option<AddressKind> {
    classify(ip(s))
}

#[test]
fn each_refused_ipv4_range_has_its_kind_and_its_public_neighbours_pass() {
    use AddressKind::*;
    for (addr, expected) in [
        ("0.1.2.3", Some(Unspecified)),
        ("127.0.0.1", Some(Loopback)),
        ("10.0.0.1", Some(Private)),
        ("100.64.0.0", Some(Private)),
        ("100.127.255.255", Some(Private)),
        ("100.63.255.255", None),
        ("100.128.0.0", None),
        ("8.100.0.1", None),
        ("169.254.169.254", Some(LinkLocal)),
        ("224.0.0.1", Some(Multicast)),
        ("239.255.255.255", Some(Multicast)),
        ("255.255.255.255", Some(Multicast)),
        ("192.0.0.8", Some(Reserved)),
        ("192.0.2.1", Some(Reserved)),
        ("198.51.100.7", Some(Reserved)),
        ("203.0.113.9", Some(Reserved)),
        ("192.88.99.1", Some(Reserved)),
        ("198.18.0.0", Some(Reserved)),
        ("198.19.255.255", Some(Reserved)),
        ("198.17.255.255", None),
        ("198.20.0.0", None),
        ("198.1.2.3", None),
        ("8.18.0.1", None),
        ("8.19.0.1", None),
        ("198.236.0.1", None),
        ("240.0.0.1", Some(Reserved)),
        ("8.8.8.8", None),
        ("93.184.216.34", None),
    ] {
        assert_eq!(kind(addr), expected, "{addr}");
    }
}

#[test]
fn each_refused_ipv6_range_has_its_kind_and_its_public_neighbours_pass() {
    use AddressKind::*;
    for (addr, expected) in [
        ("::", Some(Unspecified)),
        ("::1", Some(Loopback)),
        ("ff02::1", Some(Multicast)),
        ("fe80::1", Some(LinkLocal)),
        ("febf::1", Some(LinkLocal)),
        ("fe7f::1", Some(Reserved)),
        ("fc00::1", Some(UniqueLocal)),
        ("fd12::1", Some(UniqueLocal)),
        ("fec0::1", Some(UniqueLocal)),
        ("feff::1", Some(UniqueLocal)),
        ("fe00::1", Some(Reserved)),
        // IPv4-mapped, IPv4-compatible, IPv4-translated, NAT64: all outside 2000::/3, so only
        // the kind shows the embedded rule matched them.
        ("::ffff:8.8.8.8", Some(Embedded)),
        ("::8.8.8.8", Some(Embedded)),
        ("::ffff:0:808:808", Some(Embedded)),
        ("64:ff9b::808:808", Some(Embedded)),
        ("::1:0:0:0", Some(Reserved)),
        ("::ffff:1:808:808", Some(Reserved)),
        ("0:0:0:1:ffff:0:808:808", Some(Reserved)),
        ("0:0:0:0:1:ffff:808:808", Some(Reserved)),
        ("64:ff9c::808:808", Some(Reserved)),
        ("65:ff9b::808:808", Some(Reserved)),
        // 6to4 and Teredo, inside 2000::/3.
        ("2002:808:808::1", Some(Embedded)),
        ("2001:0:4136:e378::1", Some(Embedded)),
        ("2001:db8::1", Some(Reserved)),
        ("2001:1::1", Some(Reserved)),
        ("2001:1ff:ffff::1", Some(Reserved)),
        ("100::1", Some(Reserved)),
        ("4000::1", Some(Reserved)),
        // Public neighbours.
        ("2001:200::1", None),
        ("2001:4860:4860::8888", None),
        ("2606:4700::1111", None),
        ("2606:db8::1", None),
        ("2606:ff9b::1", None),
        ("2001:ff9b::1", None),
        ("2a00::1", None),
        ("2003::1", None),
        ("3fff:ffff::1", None),
    ] {
        assert_eq!(kind(addr), expected, "{addr}");
    }
}

#[test]
fn address_kinds_and_errors_read_as_documented() {
    use AddressKind::*;
    for (k, text) in [
        (Unspecified, "unspecified"),
        (Loopback, "loopback"),
        (Private, "private"),
        (LinkLocal, "link-local"),
        (UniqueLocal, "unique-local"),
        (Multicast, "multicast or broadcast"),
        (Embedded, "an IPv6 form of an IPv4 address"),
        (Reserved, "reserved"),
    ] {
        assert_eq!(k.to_string(), text);
        assert_eq!(
            DestinationError::NotPublic(k).to_string(),
            format!("the endpoint's address is {text}, not a public address")
        );
        assert_eq!(
            DestinationError::NotPublic(k).code(),
            ErrorCode::PUSH_ENDPOINT_FORBIDDEN
        );
    }
    for (e, code) in [
        (DestinationError::Malformed("x"), ErrorCode::INVALID_FIELD),
        (
            DestinationError::Unresolvable,
            ErrorCode::PUSH_ENDPOINT_UNRESOLVABLE,
        ),
        (DestinationError::Scheme, ErrorCode::PUSH_ENDPOINT_FORBIDDEN),
        (
            DestinationError::NonCanonicalNumeric,
            ErrorCode::PUSH_ENDPOINT_FORBIDDEN,
        ),
        (
            DestinationError::LocalName,
            ErrorCode::PUSH_ENDPOINT_FORBIDDEN,
        ),
        (
            DestinationError::NotAllowed,
            ErrorCode::PUSH_ENDPOINT_FORBIDDEN,
        ),
    ] {
        assert_eq!(e.code(), code, "{e:?}");
    }
}

#[test]
fn the_two_policies_and_when_a_name_needs_a_resolution() {
    let strict = PushDestinations::default();
    assert!(!strict.allow_http && !strict.allow_private && strict.allowed_hosts.is_empty());
    assert!(strict.requires_resolution());
    let test_mode = PushDestinations::permissive();
    assert!(test_mode.allow_http && test_mode.allow_private && test_mode.allowed_hosts.is_empty());
    assert!(!test_mode.requires_resolution());
    // Test mode: any address, local names, http; strict: none of them.
    for url in [
        "http://10.0.0.1/x",
        "http://printer.local/x",
        "https://[fe80::1]:8443/x",
    ] {
        assert!(test_mode.check_url(url).is_ok(), "{url}");
        assert!(strict.check_url(url).is_err(), "{url}");
    }
    assert_eq!(
        strict.check_url("http://8.8.8.8/x").unwrap_err(),
        DestinationError::Scheme
    );
    assert_eq!(
        strict.check_ip(ip("10.0.0.1")).unwrap_err(),
        DestinationError::NotPublic(AddressKind::Private)
    );
    assert!(test_mode.check_ip(ip("10.0.0.1")).is_ok());
    assert!(test_mode.check_resolved(&[ip("127.0.0.1")]).is_ok());
    assert_eq!(
        test_mode.check_resolved(&[]).unwrap_err(),
        DestinationError::Unresolvable
    );
    assert_eq!(
        strict
            .check_resolved(&[ip("8.8.8.8"), ip("::ffff:8.8.8.8")])
            .unwrap_err(),
        DestinationError::NotPublic(AddressKind::Embedded)
    );
}

#[test]
fn local_names_bare_or_as_a_suffix() {
    for name in [
        "localhost",
        "a.localhost",
        "local",
        "printer.local",
        "home.arpa",
    ] {
        assert!(is_local_name(name), "{name}");
    }
    for suffix in LOCAL_NAME_SUFFIXES {
        let bare = &suffix[1..];
        assert!(is_local_name(bare), "{bare}");
        assert!(is_local_name(&format!("x{suffix}")), "x{suffix}");
        // A label that only ends with the same letters is another name.
        assert!(!is_local_name(&format!("x{bare}")), "x{bare}");
    }
    for name in [
        "localhost.example",
        "local.example",
        "push.example",
        "mylocalhost",
    ] {
        assert!(!is_local_name(name), "{name}");
    }
    let strict = PushDestinations::default();
    assert_eq!(
        strict.check_url("https://Push.LOCALHOST./x").unwrap_err(),
        DestinationError::LocalName
    );
    assert!(strict.check_url("https://localhost.example/x").is_ok());
}

#[test]
fn the_allowlist_matches_exact_names_and_whole_label_suffixes() {
    let p = PushDestinations {
        allowed_hosts: vec!["FCM.googleapis.com.".into(), "*.push.apple.com".into()],
        ..PushDestinations::default()
    };
    for ok in [
        "https://fcm.googleapis.com/x",
        "https://a.push.apple.com/x",
        "https://a.b.push.apple.com/x",
    ] {
        assert!(p.check_url(ok).is_ok(), "{ok}");
    }
    for refused in [
        "https://push.apple.com/x",
        "https://evilpush.apple.com/x",
        "https://x.fcm.googleapis.com/x",
        "https://googleapis.com/x",
        "https://[2606:4700::1111]/x",
    ] {
        assert_eq!(
            p.check_url(refused).unwrap_err(),
            DestinationError::NotAllowed,
            "{refused}"
        );
    }
    // A hand-built host whose part before the suffix is only the dot (no URL parses to it).
    assert_eq!(
        p.check_host(&Host::Name(".push.apple.com".into()))
            .unwrap_err(),
        DestinationError::NotAllowed
    );
    // Local names are refused before the allowlist is read, unless the policy allows them.
    let lab = PushDestinations {
        allowed_hosts: vec!["*.local".into()],
        allow_private: true,
        ..PushDestinations::default()
    };
    assert!(lab.check_url("https://push.local/x").is_ok());
    assert_eq!(
        lab.check_url("https://push.example/x").unwrap_err(),
        DestinationError::NotAllowed
    );
    let strict_lab = PushDestinations {
        allow_private: false,
        ..lab
    };
    assert_eq!(
        strict_lab.check_url("https://push.local/x").unwrap_err(),
        DestinationError::LocalName
    );
}

#[test]
fn ports_from_1_to_65535_with_at_most_five_digits() {
    let port = |url: &str| parse_endpoint(url).map(|d| d.port);
    assert_eq!(port("https://h.example/x"), Ok(443));
    assert_eq!(port("http://h.example/x"), Ok(80));
    assert_eq!(port("HTTPS://h.example:1/x"), Ok(1));
    assert_eq!(port("https://h.example:65535/x"), Ok(65535));
    assert_eq!(port("https://h.example:00443/x"), Ok(443));
    assert_eq!(port("https://h.example:8443?q"), Ok(8443));
    let not_a_number = Err(DestinationError::Malformed("the port is not a number"));
    let out_of_range = Err(DestinationError::Malformed("the port is out of range"));
    for url in [
        "https://h.example:/x",
        "https://h.example:000443/x",
        "https://h.example:+443/x",
        "https://h.example:12a/x",
        "https://h.example:-1/x",
    ] {
        assert_eq!(port(url), not_a_number, "{url}");
    }
    assert_eq!(port("https://h.example:0/x"), out_of_range);
    assert_eq!(port("https://h.example:65536/x"), out_of_range);
    assert_eq!(port("https://h.example:99999/x"), out_of_range);
}

#[test]
fn bracketed_ipv6_hosts_with_and_without_a_port() {
    for (url, host, port) in [
        ("https://[2606:4700::1111]/x", "2606:4700::1111", 443),
        ("https://[2606:4700::1111]:8443/x", "2606:4700::1111", 8443),
        ("https://[2a00::1]:9/x", "2a00::1", 9),
        ("http://[::1]:80", "::1", 80),
    ] {
        let d = parse_endpoint(url).unwrap();
        assert_eq!((d.host, d.port), (Host::Ip(ip(host)), port), "{url}");
    }
    assert_eq!(
        parse_endpoint("https://[2a00::1/x").unwrap_err(),
        DestinationError::Malformed("unclosed IPv6 bracket")
    );
    assert_eq!(
        parse_endpoint("https://[2a00::1]x/y").unwrap_err(),
        DestinationError::Malformed("text after the IPv6 address")
    );
    assert_eq!(
        parse_endpoint("https://[2a00::zz]/y").unwrap_err(),
        DestinationError::Malformed("not an IPv6 address")
    );
}

#[test]
fn host_names_labels_and_their_length_limits() {
    let label = |n: usize| "a".repeat(n);
    // Letters, digits, `-` inside a label, `_`; lower-cased; one trailing dot dropped.
    for (host, name) in [
        ("Push-1.Example.", "push-1.example"),
        ("a_b.example", "a_b.example"),
        ("x", "x"),
    ] {
        assert_eq!(parse_host(host), Ok(Host::Name(name.into())), "{host}");
    }
    let long_label = format!("{}.example", label(MAX_LABEL_BYTES));
    assert_eq!(parse_host(&long_label), Ok(Host::Name(long_label.clone())));
    let invalid_label = Err(DestinationError::Malformed(
        "the host name has an invalid label",
    ));
    for host in [
        format!("{}.example", label(MAX_LABEL_BYTES + 1)),
        "push-.example".to_owned(),
        "-push.example".to_owned(),
        "push..example".to_owned(),
        ".push.example".to_owned(),
    ] {
        assert_eq!(parse_host(&host), invalid_label, "{host}");
    }
    // 253 bytes in labels of 63 is the longest name; one more byte is too long.
    let longest = format!(
        "{}.{}.{}.{}",
        label(63),
        label(63),
        label(63),
        label(MAX_HOST_NAME_BYTES - 3 * 64)
    );
    assert_eq!(longest.len(), MAX_HOST_NAME_BYTES);
    assert_eq!(parse_host(&longest), Ok(Host::Name(longest.clone())));
    let too_long = format!("{longest}a");
    let empty_or_long = Err(DestinationError::Malformed(
        "the host name is empty or too long",
    ));
    assert_eq!(parse_host(&too_long), empty_or_long);
    assert_eq!(parse_host("."), empty_or_long);
    assert_eq!(parse_host(""), Err(DestinationError::Malformed("no host")));
    let bad_chars = Err(DestinationError::Malformed(
        "the host has characters a DNS name cannot have",
    ));
    for host in ["a b", "a+b", "a*b", "p\u{fc}.example", "a%2eb", "a:b"] {
        assert_eq!(parse_host(host), bad_chars, "{host}");
    }
}

#[test]
fn numeric_hosts_are_canonical_dotted_quads_or_refused() {
    for (host, addr) in [
        ("8.8.8.8", "8.8.8.8"),
        ("0.0.0.0", "0.0.0.0"),
        ("10.0.0.255", "10.0.0.255"),
        ("1.2.3.4.", "1.2.3.4"),
    ] {
        assert_eq!(parse_host(host), Ok(Host::Ip(ip(addr))), "{host}");
    }
    for host in [
        "8.8.8.08",
        "127.0.0.01",
        "0177.0.0.1",
        "1234.0.0.1",
        "256.0.0.1",
        "1.2.3",
        "1.2.3.4.5",
        "1..3.4",
        "127.1",
        "2130706433",
        "0x7f000001",
        "0x7f.0.0.1",
        "a.0x1f",
        "push.0x",
        "push.8",
    ] {
        assert_eq!(
            parse_host(host),
            Err(DestinationError::NonCanonicalNumeric),
            "{host}"
        );
    }
    // A last label that is not a number (hex needs `0x` then hex digits only).
    for host in ["push.8a", "push.0xg1", "8.8.8.x"] {
        assert!(matches!(parse_host(host), Ok(Host::Name(_))), "{host}");
    }
}

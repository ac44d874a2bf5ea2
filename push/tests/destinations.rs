//! The production transport never connects to the relay's own network: every form of a
//! loopback address is refused before a connection is opened (a listener on 127.0.0.1 counts
//! the connections: TLS ClientHellos would arrive there), names are resolved once and checked,
//! and the connection goes to the address that was checked. No traffic leaves 127.0.0.1: the
//! non-loopback forms are checked without sending, and test resolvers only answer loopback.
#![allow(clippy::unwrap_used, reason = "test code")]

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use relay_push::{HttpsTransport, PushTransport as _, TransportError};

/// A TCP listener on 127.0.0.1 that counts the connections it accepts (and answers plain HTTP
/// 201 to whatever arrives, for the one test that must reach it).
async fn counting_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = socket
                    .write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    (port, count)
}

fn post(url: &str) -> http::Request<Bytes> {
    http::Request::post(url)
        .header("ttl", "60")
        .body(Bytes::from_static(b"x"))
        .unwrap()
}

/// Every way of writing "this machine" in a push endpoint, on the port of a live listener.
const LOOPBACK_FORMS: &[&str] = &[
    "127.0.0.1",
    "localhost",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "127.1",
    "0x7f000001",
    "2130706433",
    "0177.0.0.1",
    "0.0.0.0",
    "[::]",
];

#[tokio::test]
async fn no_form_of_a_loopback_address_is_ever_connected_to() {
    let (port, connections) = counting_listener().await;
    let transport = HttpsTransport::new().unwrap();
    for host in LOOPBACK_FORMS {
        for scheme in ["https", "http"] {
            let url = format!("{scheme}://{host}:{port}/wpush/v2/x");
            let result = transport.send(post(&url)).await;
            assert!(
                matches!(
                    result,
                    Err(TransportError::Refused(_) | TransportError::SchemeNotAllowed)
                ),
                "{url}: {result:?}"
            );
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "connections reached the listener"
    );
}

#[tokio::test]
async fn names_are_resolved_once_checked_and_pinned() {
    use relay_core::destination::PushDestinations;
    use relay_push::dns::StaticResolver;
    let (port, connections) = counting_listener().await;
    let loopback: IpAddr = "127.0.0.1".parse().unwrap();
    let resolver = Arc::new(
        StaticResolver::new()
            .with("push.test", &[loopback])
            .with("rebound.example.net", &[loopback])
            .with(
                "mixed.example.net",
                &[loopback, "127.0.0.2".parse().unwrap()],
            ),
    );
    // Production policy: a name that resolves to loopback (DNS rebinding: it may have
    // resolved elsewhere when the subscription was checked) is refused, nothing sent.
    let strict = HttpsTransport::new()
        .unwrap()
        .with_resolver(resolver.clone())
        .unwrap();
    for name in [
        "rebound.example.net",
        "mixed.example.net",
        "unknown.example.net",
    ] {
        let result = strict.send(post(&format!("https://{name}:{port}/w"))).await;
        assert!(
            matches!(result, Err(TransportError::Refused(_))),
            "{name}: {result:?}"
        );
    }
    assert_eq!(connections.load(Ordering::SeqCst), 0);
    // A lab's policy (any address, http allowed): the name reaches the address the test
    // resolver gave it, which the system resolver does not know, so the connection went to
    // the checked address and nothing looked the name up again.
    let lab = HttpsTransport::new()
        .unwrap()
        .with_resolver(resolver)
        .unwrap()
        .with_destinations(PushDestinations::permissive())
        .unwrap();
    let response = lab
        .send(post(&format!("http://push.test:{port}/w")))
        .await
        .unwrap();
    assert_eq!(response.status, 201);
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

/// The forms outside loopback are refused by the same check, without sending anything (so
/// this test cannot send traffic beyond 127.0.0.1 even if the check were wrong: it is asked
/// for a verdict only).
#[test]
fn private_and_metadata_addresses_are_refused_by_the_same_policy() {
    use relay_core::destination::{PushDestinations, parse_host};
    let policy = PushDestinations::default();
    for host in [
        "10.0.0.1",
        "10.255.255.255",
        "172.16.5.4",
        "192.168.0.1",
        "192.168.255.254",
        "169.254.169.254",
        "[fd00::1]",
        "[fe80::1]",
        "[::ffff:10.0.0.1]",
        "[::ffff:169.254.169.254]",
        "[64:ff9b::a9fe:a9fe]",
        "100.64.0.1",
        "224.0.0.251",
        "metadata.google.internal",
    ] {
        let verdict = parse_host(host).and_then(|h| policy.check_host(&h));
        assert!(verdict.is_err(), "{host} passed");
    }
}

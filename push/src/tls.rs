//! The production transport: hyper's pooled client over rustls.
//!
//! * **TLS**: rustls with the `ring` crypto provider and the Mozilla root set compiled in
//!   (`webpki-roots`), so the relay needs no system certificate store and behaves the same in
//!   a scratch container. `ring` rather than rustls' default `aws-lc-rs`: it is already in
//!   the workspace's lockfile and builds in seconds, where `aws-lc-sys` needs a C/CMake build
//!   of a minute or more on CI's two cores; both are maintained and constant-time for what we
//!   use (ECDHE, AES-GCM, ChaCha20-Poly1305, ECDSA/RSA verification).
//! * **HTTP**: HTTP/2 and HTTP/1.1 negotiated by ALPN (APNs requires HTTP/2; FCM and the
//!   browsers' push services speak both); connections are pooled per host and HTTP/2 ones
//!   multiplexed.
//! * `http://` URIs are refused unless [`HttpsTransport::allowing_http`] (a relay's test mode:
//!   stand-ins and the conformance push probe on loopback).
//! * **Destinations** ([`relay_core::destination`]): before any connection, the URI's host must
//!   pass the transport's [`PushDestinations`] policy — no loopback, private, link-local,
//!   unique-local, multicast or otherwise non-public address, no non-canonical numeric host,
//!   no local name, and (when set) only allowlisted hosts. A literal address is checked as it
//!   is; a name is resolved **once** by the connector's [`CheckedResolver`], every address is
//!   checked, and the connection goes to one of exactly those addresses (no second lookup).
//!   A refused destination is [`TransportError::Refused`], and nothing is sent anywhere.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, LengthLimitError, Limited};
use hyper_rustls::{ConfigBuilderExt as _, HttpsConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use relay_core::destination::PushDestinations;

use crate::dns::{CheckedResolver, DestinationRefused, Resolve, SystemResolver};
use crate::transport::{
    MAX_PUSH_RESPONSE_BYTES, PushRequest, PushResponse, PushTransport, TransportError,
};

/// TCP connect timeout (the worker's request timeout bounds the whole exchange).
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Idle pooled connections are closed after this.
pub const POOL_IDLE_TIMEOUT_MS: u64 = 90_000;
/// Idle pooled connections kept per host.
pub const POOL_MAX_IDLE_PER_HOST: usize = 8;

/// Why the TLS client could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("setting up TLS: {0}")]
pub struct TlsSetupError(String);

/// HTTPS (and, in test mode, HTTP) to push services that pass its destination policy.
/// Cheap to clone.
#[derive(Clone)]
pub struct HttpsTransport {
    client: Client<HttpsConnector<HttpConnector<CheckedResolver>>, Full<Bytes>>,
    policy: Arc<PushDestinations>,
    resolver: Arc<dyn Resolve>,
}

impl std::fmt::Debug for HttpsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsTransport")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl HttpsTransport {
    /// A client that speaks HTTPS only, to public addresses only, resolving names with the
    /// operating system's resolver.
    pub fn new() -> Result<Self, TlsSetupError> {
        Self::build(PushDestinations::default(), Arc::new(SystemResolver))
    }

    fn build(policy: PushDestinations, resolver: Arc<dyn Resolve>) -> Result<Self, TlsSetupError> {
        let policy = Arc::new(policy);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSetupError(e.to_string()))?
            .with_webpki_roots()
            .with_no_client_auth();
        let checked = CheckedResolver::new(Arc::clone(&resolver), Arc::clone(&policy));
        let mut tcp = HttpConnector::new_with_resolver(checked);
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(Duration::from_millis(CONNECT_TIMEOUT_MS)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(tcp);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_millis(POOL_IDLE_TIMEOUT_MS))
            .pool_max_idle_per_host(POOL_MAX_IDLE_PER_HOST)
            .build(connector);
        Ok(Self {
            client,
            policy,
            resolver,
        })
    }

    /// The same transport under `policy` (e.g. an operator's allowlist, or private addresses
    /// for a lab): rebuilt, with an empty connection pool.
    pub fn with_destinations(self, policy: PushDestinations) -> Result<Self, TlsSetupError> {
        Self::build(policy, self.resolver)
    }

    /// The same transport resolving names with `resolver` (tests: a [`crate::dns::StaticResolver`]).
    pub fn with_resolver(self, resolver: Arc<dyn Resolve>) -> Result<Self, TlsSetupError> {
        Self::build((*self.policy).clone(), resolver)
    }

    /// Also sends to `http://` URIs and to any address: **test mode only** (stand-ins and the
    /// conformance probe on loopback).
    pub fn allowing_http(self) -> Self {
        let resolver = Arc::clone(&self.resolver);
        Self::build(PushDestinations::permissive(), resolver).unwrap_or(self)
    }

    /// The destination policy.
    pub fn destinations(&self) -> &PushDestinations {
        &self.policy
    }

    /// The resolver (the relay shell checks subscriptions with the same one).
    pub fn resolver(&self) -> Arc<dyn Resolve> {
        Arc::clone(&self.resolver)
    }

    /// The checks that need no DNS: scheme, host syntax, literal address, local names,
    /// allowlist.
    fn check_uri(&self, uri: &http::Uri) -> Result<(), TransportError> {
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") if self.policy.allow_http => {}
            _ => return Err(TransportError::SchemeNotAllowed),
        }
        let host = uri.host().ok_or(TransportError::SchemeNotAllowed)?;
        let refused =
            |e: relay_core::destination::DestinationError| TransportError::Refused(e.to_string());
        let host = relay_core::destination::parse_host(host).map_err(refused)?;
        // A literal address bypasses the connector's resolver: it is checked here, and
        // connected to as it is. A name is checked by the resolver, address by address.
        self.policy.check_host(&host).map_err(refused)
    }
}

impl PushTransport for HttpsTransport {
    async fn send(&self, request: PushRequest) -> Result<PushResponse, TransportError> {
        self.check_uri(request.uri())?;
        let response = self
            .client
            .request(request.map(Full::new))
            .await
            .map_err(|e| {
                // hyper-util's errors name no URL; keep only the error kinds.
                if let Some(refused) = find_source::<DestinationRefused>(&e) {
                    TransportError::Refused(refused.0.to_string())
                } else if e.is_connect() {
                    TransportError::Connect(error_chain(&e))
                } else {
                    TransportError::Exchange(error_chain(&e))
                }
            })?;
        let (parts, body) = response.into_parts();
        let body = Limited::new(body, MAX_PUSH_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<LengthLimitError>() {
                    TransportError::Exchange("response body too large".into())
                } else {
                    TransportError::Exchange("reading the response body failed".into())
                }
            })?
            .to_bytes();
        Ok(PushResponse {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// The first error of type `E` in `error`'s source chain.
fn find_source<'a, E: std::error::Error + 'static>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a E> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        current = e.source();
    }
    None
}

/// The error and its sources, joined (none of them carries the URI).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refuses_plain_http_unless_allowed_and_reaches_a_loopback_server() {
        let t = HttpsTransport::new().unwrap();
        let req = http::Request::post("http://127.0.0.1:9/x")
            .body(Bytes::new())
            .unwrap();
        assert_eq!(
            t.send(req).await.unwrap_err(),
            TransportError::SchemeNotAllowed
        );

        // A one-shot HTTP/1.1 server on loopback answers 201.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\nretry-after: 3\r\n\r\nok")
                .await
                .unwrap();
            String::from_utf8_lossy(&got).into_owned()
        });
        let t = t.allowing_http();
        let req = http::Request::post(format!("http://{addr}/w/1"))
            .header("TTL", "60")
            .body(Bytes::from_static(b"x"))
            .unwrap();
        let resp = t.send(req).await.unwrap();
        assert_eq!(resp.status, 201);
        assert_eq!(resp.body, "ok");
        assert_eq!(resp.headers["retry-after"], "3");
        let head = server.await.unwrap();
        assert!(head.starts_with("POST /w/1 HTTP/1.1\r\n"), "{head}");
        assert!(head.to_ascii_lowercase().contains("ttl: 60"), "{head}");
    }

    #[tokio::test]
    async fn an_unreachable_service_is_a_connect_error() {
        let t = HttpsTransport::new().unwrap().allowing_http();
        // Bind then drop: nothing listens on that port now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let req = http::Request::post(format!("http://127.0.0.1:{port}/"))
            .body(Bytes::new())
            .unwrap();
        assert!(matches!(t.send(req).await, Err(TransportError::Connect(_))));
    }
}

//! Name resolution for push destinations, and the check that pins a connection to the
//! addresses that were checked.
//!
//! [`Resolve`] is the one way this crate (and the relay shell, for the check at subscription)
//! turns a host name into addresses: [`SystemResolver`] asks the operating system
//! (`getaddrinfo`, through tokio), [`StaticResolver`] answers from a table (tests, which must
//! never reach the real network). [`CheckedResolver`] is what [`crate::HttpsTransport`]'s
//! TCP connector resolves with: it resolves a name **once**, refuses it unless every address
//! passes the [`PushDestinations`] policy, and hands exactly those addresses to the
//! connector, which connects to one of them — there is no second lookup between the check
//! and the connection (DNS rebinding cannot slip another address in).

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::dns::Name;
use relay_core::destination::{DestinationError, PushDestinations};

/// How long resolving one name may take, in ms.
pub const RESOLVE_TIMEOUT_MS: u64 = 5_000;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Resolves host names to addresses.
pub trait Resolve: std::fmt::Debug + Send + Sync + 'static {
    /// Every address of `host` (a DNS name, without brackets or port).
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>>;
}

/// The operating system's resolver (`getaddrinfo`, on tokio's blocking pool).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host, 0)).await?;
            let mut out: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
            out.dedup();
            Ok(out)
        })
    }
}

/// A fixed table of names (tests): a name not in it does not resolve.
#[derive(Debug, Clone, Default)]
pub struct StaticResolver(BTreeMap<String, Vec<IpAddr>>);

impl StaticResolver {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// `host` resolves to `addrs`.
    #[must_use]
    pub fn with(mut self, host: &str, addrs: &[IpAddr]) -> Self {
        self.0.insert(host.to_ascii_lowercase(), addrs.to_vec());
        self
    }
}

impl Resolve for StaticResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        let found = self
            .0
            .get(&host.trim_end_matches('.').to_ascii_lowercase())
            .cloned();
        Box::pin(async move {
            found.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such name"))
        })
    }
}

/// Resolves `host` with `resolver` within [`RESOLVE_TIMEOUT_MS`]; a failure or timeout is an
/// empty list.
pub async fn resolve_within(resolver: &dyn Resolve, host: &str) -> Vec<IpAddr> {
    let lookup = resolver.resolve(host);
    match tokio::time::timeout(Duration::from_millis(RESOLVE_TIMEOUT_MS), lookup).await {
        Ok(Ok(addrs)) => addrs,
        Ok(Err(_)) | Err(_) => Vec::new(),
    }
}

/// The connection to a push destination was refused by the destination policy (see
/// [`relay_core::destination`]); carried through the HTTP client's error chain so the
/// transport can tell it from a network failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("push destination refused: {0}")]
pub struct DestinationRefused(pub DestinationError);

/// The TCP connector's resolver in [`crate::HttpsTransport`]: resolves once, checks every
/// address, returns exactly the checked addresses.
#[derive(Clone)]
pub struct CheckedResolver {
    resolver: Arc<dyn Resolve>,
    policy: Arc<PushDestinations>,
}

impl std::fmt::Debug for CheckedResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckedResolver")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl CheckedResolver {
    /// Resolves with `resolver` under `policy`.
    pub fn new(resolver: Arc<dyn Resolve>, policy: Arc<PushDestinations>) -> Self {
        Self { resolver, policy }
    }
}

impl tower_service::Service<Name> for CheckedResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = DestinationRefused;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let resolver = Arc::clone(&self.resolver);
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let addrs = resolve_within(&*resolver, name.as_str()).await;
            policy.check_resolved(&addrs).map_err(DestinationRefused)?;
            // The port is set by the connector from the URI.
            Ok(addrs
                .into_iter()
                .map(|ip| SocketAddr::new(ip, 0))
                .collect::<Vec<_>>()
                .into_iter())
        })
    }
}

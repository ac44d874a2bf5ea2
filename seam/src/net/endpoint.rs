//! Where a relay lives: parsed once at the edge, carried as a type.

use std::{fmt, str::FromStr};

use http::uri::{Authority, Scheme, Uri};

/// Port used when a base URL names none.
const DEFAULT_HTTP_PORT: u16 = 80;

/// The base address of an HTTP service (`http://host:port`), without TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    authority: Authority,
}

/// Why a base URL was rejected.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// Not a URI at all.
    #[error("invalid base URL: {0}")]
    Invalid(#[from] http::uri::InvalidUri),
    /// A scheme other than `http` (TLS is not supported by these shells).
    #[error("unsupported scheme {0:?}: only http:// is supported")]
    UnsupportedScheme(String),
    /// No `host[:port]` part.
    #[error("base URL has no host")]
    MissingHost,
    /// A path other than `/` (the API paths are absolute).
    #[error("base URL must not have a path, got {0:?}")]
    UnexpectedPath(String),
}

impl Endpoint {
    /// Parses `http://host[:port]` (a trailing `/` is accepted) or a bare `host[:port]`.
    pub fn parse(base: &str) -> Result<Self, EndpointError> {
        let uri: Uri = base.parse()?;
        if let Some(scheme) = uri.scheme()
            && *scheme != Scheme::HTTP
        {
            return Err(EndpointError::UnsupportedScheme(scheme.to_string()));
        }
        let path = uri.path();
        if uri.scheme().is_some() && !(path.is_empty() || path == "/") {
            return Err(EndpointError::UnexpectedPath(path.to_owned()));
        }
        let authority = uri.authority().ok_or(EndpointError::MissingHost)?.clone();
        if authority.host().is_empty() {
            return Err(EndpointError::MissingHost);
        }
        Ok(Self { authority })
    }

    /// Host name or IP literal (an IPv6 literal without its brackets).
    pub fn host(&self) -> &str {
        let host = self.authority.host();
        host.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
    }

    /// Port (80 when the base URL names none).
    pub fn port(&self) -> u16 {
        self.authority.port_u16().unwrap_or(DEFAULT_HTTP_PORT)
    }

    /// `host[:port]`, as sent in the `Host` header.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The `ws://` URL of `path_and_query` on this endpoint.
    pub fn ws_url(&self, path_and_query: &str) -> String {
        format!("ws://{}{path_and_query}", self.authority)
    }
}

impl FromStr for Endpoint {
    type Err = EndpointError;

    fn from_str(base: &str) -> Result<Self, Self::Err> {
        Self::parse(base)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.authority)
    }
}

impl From<std::net::SocketAddr> for Endpoint {
    fn from(addr: std::net::SocketAddr) -> Self {
        // A socket address always renders as a valid authority.
        let authority = Authority::try_from(addr.to_string().as_str())
            .unwrap_or_else(|_| unreachable!("socket address {addr} is a valid authority"));
        Self { authority }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_base_urls() {
        let e = Endpoint::parse("http://server:8080").unwrap();
        assert_eq!((e.host(), e.port()), ("server", 8080));
        assert_eq!(e.to_string(), "http://server:8080");
        assert_eq!(e.ws_url("/ws?x=1"), "ws://server:8080/ws?x=1");
        let e = Endpoint::parse("http://relay/").unwrap();
        assert_eq!((e.host(), e.port()), ("relay", 80));
        let e = Endpoint::parse("127.0.0.1:9").unwrap();
        assert_eq!((e.host(), e.port()), ("127.0.0.1", 9));
        let e = Endpoint::from("[::1]:7".parse::<std::net::SocketAddr>().unwrap());
        assert_eq!((e.host(), e.port()), ("::1", 7));
    }

    #[test]
    fn rejects_what_it_cannot_serve() {
        assert!(matches!(
            Endpoint::parse("https://x"),
            Err(EndpointError::UnsupportedScheme(_))
        ));
        assert!(matches!(
            Endpoint::parse("http://x/api"),
            Err(EndpointError::UnexpectedPath(_))
        ));
        assert!(Endpoint::parse("/just/a/path").is_err());
    }
}

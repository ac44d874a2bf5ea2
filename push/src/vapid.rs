//! The VAPID key (RFC 8292): the relay's P-256 key pair that signs every Web Push request.
//!
//! * **Public key**: served by `GET /api/v1/push/vapid-key` as base64url of the 65-byte
//!   uncompressed point ([`VapidKey::public_key_b64url`]); browsers take it as the
//!   `applicationServerKey` of `pushManager.subscribe` and bind the subscription to it, so it
//!   must never change for a deployment (a new key orphans every Web Push subscription).
//! * **Key file**: [`VapidKey::load_or_create`] (the relay's data directory, first start) or
//!   [`VapidKey::load`] (`--vapid-key FILE`). Written as PKCS#8 PEM through a 0600 temporary
//!   file and a rename; read as PKCS#8 PEM, SEC1 PEM (`openssl ecparam -genkey`) or the bare
//!   base64url 32-byte private key other Web Push tools print. A file readable or writable by
//!   group or others is refused (`chmod 600`), like the relay's JWT key file.
//! * **JWT**: [`VapidSigner`] signs `{"aud": <push service origin>, "exp", "sub"}` with ES256,
//!   one token per origin, cached until [`VAPID_JWT_REFRESH_MARGIN_S`] before it expires.
//!   `now` is an argument: nothing here reads a clock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::SecretKey;
use p256::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _, LineEnding};
use private_files::{PrivateFileError, read_private, write_private};
use rand_core::CryptoRng;
use serde::Serialize;
use wire::UnixMs;
use zeroize::Zeroizing;

use crate::ece::{b64url, b64url_decode, random_secret, uncompressed};

/// Lifetime of a VAPID JWT (RFC 8292 §2: `exp` no more than 24 hours after the request).
pub const VAPID_JWT_LIFETIME_S: u64 = 12 * 3600;
/// A cached JWT is replaced when it has less than this left.
pub const VAPID_JWT_REFRESH_MARGIN_S: u64 = 3600;
/// Push service origins whose JWT is cached; past it the entry nearest expiry is dropped.
pub const MAX_VAPID_CACHED_ORIGINS: usize = 256;

/// Why a VAPID key file could not be read or written. Messages name files, never key material.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// The file could not be read or written, or is open to group or others.
    #[error(transparent)]
    File(#[from] PrivateFileError),
    /// The file holds no P-256 private key in a format we read.
    #[error(
        "{} does not hold a P-256 private key (PKCS#8 or SEC1 PEM, or base64url of 32 bytes)",
        path.display()
    )]
    Malformed {
        /// The file.
        path: PathBuf,
    },
}

/// The relay's VAPID key pair. `Debug` shows the public key only.
#[derive(Clone)]
pub struct VapidKey {
    secret: SecretKey,
    public: [u8; 65],
    public_b64: String,
}

impl std::fmt::Debug for VapidKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VapidKey")
            .field("public", &self.public_b64)
            .finish_non_exhaustive()
    }
}

impl PartialEq for VapidKey {
    fn eq(&self, other: &Self) -> bool {
        self.public == other.public
    }
}

impl Eq for VapidKey {}

impl VapidKey {
    /// A new key from `rng` (the relay passes a CSPRNG seeded from the OS).
    pub fn generate(rng: &mut impl CryptoRng) -> Self {
        Self::from_secret(random_secret(rng))
    }

    fn from_secret(secret: SecretKey) -> Self {
        let public = uncompressed(&secret.public_key());
        Self {
            public_b64: b64url(&public),
            public,
            secret,
        }
    }

    /// Parses a private key: PKCS#8 PEM, SEC1 PEM, or base64url (or hex) of the 32-byte scalar.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if text.starts_with("-----BEGIN PRIVATE KEY-----") {
            return SecretKey::from_pkcs8_pem(text).ok().map(Self::from_secret);
        }
        if text.starts_with("-----BEGIN EC PRIVATE KEY-----") {
            return SecretKey::from_sec1_pem(text).ok().map(Self::from_secret);
        }
        let raw = Zeroizing::new(b64url_decode(text)?);
        if raw.len() != 32 {
            return None;
        }
        SecretKey::from_slice(&raw).ok().map(Self::from_secret)
    }

    /// The private key as PKCS#8 PEM (what [`load_or_create`](Self::load_or_create) writes).
    pub fn to_pem(&self) -> Zeroizing<String> {
        // Encoding a valid P-256 key cannot fail; an empty string would be refused on load.
        self.secret
            .to_pkcs8_pem(LineEnding::LF)
            .unwrap_or_else(|_| Zeroizing::new(String::new()))
    }

    /// The 65-byte uncompressed public point (`0x04 ‖ x ‖ y`).
    pub fn public_key(&self) -> [u8; 65] {
        self.public
    }

    /// The public key as browsers take it for `applicationServerKey`: base64url, no padding.
    pub fn public_key_b64url(&self) -> &str {
        &self.public_b64
    }

    fn encoding_key(&self) -> Option<EncodingKey> {
        let der = self.secret.to_pkcs8_der().ok()?;
        Some(EncodingKey::from_ec_der(der.as_bytes()))
    }

    /// Reads the key file at `path` (`--vapid-key FILE`); refuses one open to group or others.
    pub fn load(path: &Path) -> Result<Self, KeyFileError> {
        let text = read_private(path)?;
        Self::parse(&text).ok_or_else(|| KeyFileError::Malformed {
            path: path.to_owned(),
        })
    }

    /// The key in `path`, or a new one from `rng` written there (mode 0600) when the file does
    /// not exist. Returns the key and whether it was created.
    pub fn load_or_create(
        path: &Path,
        rng: &mut impl CryptoRng,
    ) -> Result<(Self, bool), KeyFileError> {
        if path.exists() {
            return Self::load(path).map(|k| (k, false));
        }
        let key = Self::generate(rng);
        write_private(path, key.to_pem().as_bytes())?;
        Ok((key, true))
    }
}

/// The `sub` claim: a contact for the push service operator (`mailto:` or `https:` URL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VapidSubject(String);

/// Why a VAPID subject was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the VAPID subject must be `mailto:<address>` or an `https://` URL")]
pub struct BadSubject;

impl VapidSubject {
    /// Accepts `mailto:someone@example.org` or `https://example.org/contact`.
    pub fn parse(subject: &str) -> Result<Self, BadSubject> {
        let s = subject.trim();
        let printable = s.bytes().all(|b| b.is_ascii_graphic());
        let ok = match (s.strip_prefix("mailto:"), s.strip_prefix("https://")) {
            (Some(addr), _) => addr
                .split_once('@')
                .is_some_and(|(l, d)| !l.is_empty() && !d.is_empty() && !d.contains('@')),
            (None, Some(rest)) => !rest.is_empty() && !rest.starts_with('/'),
            (None, None) => false,
        };
        if ok && printable {
            Ok(Self(s.to_owned()))
        } else {
            Err(BadSubject)
        }
    }

    /// The subject as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The origin (RFC 6454 serialisation) of a push resource URL: `scheme://host[:port]`,
/// lower-cased, the scheme's default port omitted. `None` without a scheme or host.
pub fn origin_of(uri: &http::Uri) -> Option<String> {
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let authority = uri.authority()?;
    let host = authority.host().to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    let default_port = match scheme.as_str() {
        "https" => Some(443),
        "http" => Some(80),
        _ => None,
    };
    Some(match authority.port_u16() {
        Some(port) if Some(port) != default_port => format!("{scheme}://{host}:{port}"),
        _ => format!("{scheme}://{host}"),
    })
}

#[derive(Serialize)]
struct Claims<'a> {
    aud: &'a str,
    exp: u64,
    sub: &'a str,
}

/// Why no VAPID token could be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("signing the VAPID JWT failed")]
pub struct SignError;

/// Signs VAPID JWTs, one per push service origin, cached until near expiry.
pub struct VapidSigner {
    key: VapidKey,
    encoding: EncodingKey,
    subject: VapidSubject,
    cache: BTreeMap<String, (Zeroizing<String>, u64)>,
}

impl std::fmt::Debug for VapidSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VapidSigner")
            .field("key", &self.key)
            .field("cached_origins", &self.cache.len())
            .finish_non_exhaustive()
    }
}

impl VapidSigner {
    /// A signer for `key` with contact `subject`.
    pub fn new(key: VapidKey, subject: VapidSubject) -> Result<Self, SignError> {
        let encoding = key.encoding_key().ok_or(SignError)?;
        Ok(Self {
            key,
            encoding,
            subject,
            cache: BTreeMap::new(),
        })
    }

    /// The key.
    pub fn key(&self) -> &VapidKey {
        &self.key
    }

    /// The `Authorization` header value for a request to `origin` at `now`:
    /// `vapid t=<JWT>, k=<public key>` (RFC 8292 §3).
    pub fn authorization(&mut self, origin: &str, now: UnixMs) -> Result<String, SignError> {
        let now_s = now.get() / 1000;
        let fresh = self
            .cache
            .get(origin)
            .filter(|(_, exp)| now_s + VAPID_JWT_REFRESH_MARGIN_S < *exp);
        let token = match fresh {
            Some((token, _)) => token.clone(),
            None => {
                let exp = now_s + VAPID_JWT_LIFETIME_S;
                let claims = Claims {
                    aud: origin,
                    exp,
                    sub: self.subject.as_str(),
                };
                let token = Zeroizing::new(
                    jsonwebtoken::encode(&Header::new(Algorithm::ES256), &claims, &self.encoding)
                        .map_err(|_| SignError)?,
                );
                self.remember(origin, token.clone(), exp, now_s);
                token
            }
        };
        Ok(format!("vapid t={}, k={}", *token, self.key.public_b64))
    }

    fn remember(&mut self, origin: &str, token: Zeroizing<String>, exp: u64, now_s: u64) {
        if !self.cache.contains_key(origin) && self.cache.len() >= MAX_VAPID_CACHED_ORIGINS {
            self.cache
                .retain(|_, (_, e)| now_s + VAPID_JWT_REFRESH_MARGIN_S < *e);
            if self.cache.len() >= MAX_VAPID_CACHED_ORIGINS
                && let Some(oldest) = self
                    .cache
                    .iter()
                    .min_by_key(|(_, (_, e))| *e)
                    .map(|(o, _)| o.clone())
            {
                self.cache.remove(&oldest);
            }
        }
        self.cache.insert(origin.to_owned(), (token, exp));
    }

    /// Origins with a cached token (for tests and stats).
    pub fn cached_origins(&self) -> usize {
        self.cache.len()
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use p256::ecdsa::signature::Verifier as _;
    use p256::ecdsa::{Signature, VerifyingKey};
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng as _;

    use super::*;

    fn key(seed: u64) -> VapidKey {
        VapidKey::generate(&mut ChaCha20Rng::seed_from_u64(seed))
    }

    /// Checks a compact ES256 JWT with p256 directly (not through jsonwebtoken).
    fn verify(jwt: &str, public: &[u8; 65]) -> serde_json::Value {
        let (signing_input, sig) = jwt.rsplit_once('.').unwrap();
        let sig = Signature::from_slice(&b64url_decode(sig).unwrap()).unwrap();
        VerifyingKey::from_sec1_bytes(public)
            .unwrap()
            .verify(signing_input.as_bytes(), &sig)
            .unwrap();
        let (h, c) = signing_input.split_once('.').unwrap();
        let header: serde_json::Value = serde_json::from_slice(&b64url_decode(h).unwrap()).unwrap();
        assert_eq!(header["alg"], "ES256");
        serde_json::from_slice(&b64url_decode(c).unwrap()).unwrap()
    }

    #[test]
    fn public_key_is_an_uncompressed_p256_point_in_base64url() {
        let k = key(1);
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(k.public_key_b64url())
            .unwrap();
        assert_eq!(raw.len(), 65);
        assert_eq!(raw[0], 4);
        assert!(p256::PublicKey::from_sec1_bytes(&raw).is_ok());
        assert!(!k.public_key_b64url().contains(['=', '+', '/']));
        assert!(!format!("{k:?}").contains("BEGIN"));
        assert_ne!(key(1).public_key(), key(2).public_key());
        assert_eq!(key(1), key(1));
    }

    #[test]
    fn parses_every_supported_file_format() {
        let k = key(3);
        assert_eq!(VapidKey::parse(&k.to_pem()).unwrap(), k);
        let raw = k.secret.to_bytes();
        assert_eq!(VapidKey::parse(&b64url(&raw)).unwrap(), k);
        let sec1 = k.secret.to_sec1_pem(LineEnding::LF).unwrap();
        assert_eq!(VapidKey::parse(&sec1).unwrap(), k);
        assert!(VapidKey::parse("not a key").is_none());
        assert!(
            VapidKey::parse(&b64url(&[0u8; 32])).is_none(),
            "zero scalar"
        );
        assert!(VapidKey::parse(&b64url(&[1u8; 31])).is_none());
    }

    #[cfg(unix)]
    #[test]
    fn key_file_created_0600_stable_and_refused_when_open() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vapid.pem");
        let mut rng = ChaCha20Rng::seed_from_u64(4);
        let (k1, created) = VapidKey::load_or_create(&path, &mut rng).unwrap();
        assert!(created);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (k2, created) = VapidKey::load_or_create(&path, &mut rng).unwrap();
        assert!(!created);
        assert_eq!(k1, k2);
        assert_eq!(VapidKey::load(&path).unwrap(), k1);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = VapidKey::load_or_create(&path, &mut rng).unwrap_err();
        assert!(
            matches!(
                e,
                KeyFileError::File(PrivateFileError::TooOpen { mode: 0o640, .. })
            ),
            "{e}"
        );
        assert!(e.to_string().contains("chmod 600"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, "garbage").unwrap();
        let e = VapidKey::load(&path).unwrap_err();
        assert!(matches!(e, KeyFileError::Malformed { .. }), "{e}");
        assert!(!e.to_string().contains("garbage"));
    }

    #[test]
    fn subjects() {
        assert!(VapidSubject::parse("mailto:ops@example.org").is_ok());
        assert!(VapidSubject::parse("https://example.org/contact").is_ok());
        for bad in [
            "",
            "ops@example.org",
            "mailto:",
            "mailto:nobody",
            "http://example.org",
            "https://",
            "mailto:a b@c",
        ] {
            assert_eq!(VapidSubject::parse(bad), Err(BadSubject), "{bad:?}");
        }
    }

    #[test]
    fn origins() {
        let o = |s: &str| origin_of(&s.parse().unwrap());
        assert_eq!(
            o("https://FCM.googleapis.com/fcm/send/abc").as_deref(),
            Some("https://fcm.googleapis.com")
        );
        assert_eq!(
            o("https://push.example:443/x").as_deref(),
            Some("https://push.example")
        );
        assert_eq!(
            o("https://push.example:8443/x").as_deref(),
            Some("https://push.example:8443")
        );
        assert_eq!(
            o("http://127.0.0.1:9000/w/1").as_deref(),
            Some("http://127.0.0.1:9000")
        );
        assert_eq!(o("/relative"), None);
    }

    #[test]
    fn jwt_has_audience_expiry_subject_and_verifies_with_the_served_key() {
        let k = key(5);
        let public = k.public_key();
        let mut signer =
            VapidSigner::new(k, VapidSubject::parse("mailto:ops@example.org").unwrap()).unwrap();
        let now = UnixMs(1_767_225_600_123);
        let header = signer.authorization("https://push.example", now).unwrap();
        let (t, rest) = header
            .strip_prefix("vapid t=")
            .unwrap()
            .split_once(", k=")
            .unwrap();
        assert_eq!(rest, b64url(&public));
        let claims = verify(t, &public);
        assert_eq!(claims["aud"], "https://push.example");
        assert_eq!(claims["sub"], "mailto:ops@example.org");
        let exp = claims["exp"].as_u64().unwrap();
        assert_eq!(exp, 1_767_225_600 + VAPID_JWT_LIFETIME_S);
        assert!(exp - now.get() / 1000 <= 24 * 3600);

        // Cached per origin until near expiry; another origin gets its own token.
        let later = UnixMs(now.get() + 3_600_000);
        assert_eq!(
            signer.authorization("https://push.example", later).unwrap(),
            header
        );
        let other = signer
            .authorization("https://other.example", later)
            .unwrap();
        assert_ne!(other, header);
        assert_eq!(signer.cached_origins(), 2);
        let near_expiry =
            UnixMs(now.get() + (VAPID_JWT_LIFETIME_S - VAPID_JWT_REFRESH_MARGIN_S) * 1000);
        let renewed = signer
            .authorization("https://push.example", near_expiry)
            .unwrap();
        assert_ne!(renewed, header);
        let t2 = renewed
            .strip_prefix("vapid t=")
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        let exp2 = verify(t2, &public)["exp"].as_u64().unwrap();
        assert_eq!(exp2, near_expiry.get() / 1000 + VAPID_JWT_LIFETIME_S);
    }

    #[test]
    fn cache_is_bounded() {
        let mut signer =
            VapidSigner::new(key(6), VapidSubject::parse("mailto:a@b.c").unwrap()).unwrap();
        let now = UnixMs(1_767_225_600_000);
        for i in 0..MAX_VAPID_CACHED_ORIGINS + 10 {
            signer
                .authorization(&format!("https://p{i}.example"), now)
                .unwrap();
        }
        assert_eq!(signer.cached_origins(), MAX_VAPID_CACHED_ORIGINS);
    }
}

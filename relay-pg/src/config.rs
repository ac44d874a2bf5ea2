//! Connection settings: a `DATABASE_URL`-style URL, the password from the URL, the environment or
//! a file, and the schema the relay's tables live in. The password never appears in `Debug`,
//! `Display`, errors or logs.

use std::{fmt, path::Path, str::FromStr, time::Duration};

use tokio_postgres::config::{Host, SslMode};

use crate::PgError;

/// Environment variable holding the connection URL (the usual name).
pub const URL_ENV: &str = "DATABASE_URL";
/// Environment variable naming a file whose content is the password (a mounted secret).
pub const PASSWORD_FILE_ENV: &str = "RELAY_POSTGRES_PASSWORD_FILE";
/// Environment variable holding the password itself (libpq's name).
pub const PASSWORD_ENV: &str = "PGPASSWORD";
/// Schema of the relay's tables unless [`PgConfig::with_schema`] says otherwise.
pub const DEFAULT_SCHEMA: &str = "relay";
/// Longest schema name PostgreSQL keeps (NAMEDATALEN - 1).
pub const MAX_SCHEMA_NAME_BYTES: usize = 63;
/// Largest password file read (anything longer is not a password).
pub const MAX_PASSWORD_FILE_BYTES: u64 = 4096;
/// Time allowed to establish one connection (TCP + startup + authentication), unless the URL
/// sets `connect_timeout`.
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;
/// Client-side TCP keepalive: idle time before the first probe, on every connection.
pub const CLIENT_KEEPALIVE_IDLE_MS: u64 = 5_000;
/// `application_name` of the relay's sessions (visible in `pg_stat_activity`).
pub const APPLICATION_NAME: &str = "securechat-relay";

/// Where and how to connect, and in which schema the relay's tables live.
///
/// ```
/// # use relay_pg::PgConfig;
/// let config = PgConfig::from_url("postgresql://relay:s3cret@db.internal:5432/chat")?
///     .with_schema("relay")?;
/// assert!(!format!("{config:?} {config}").contains("s3cret"));
/// # Ok::<(), relay_pg::PgError>(())
/// ```
#[derive(Clone)]
pub struct PgConfig {
    pub(crate) driver: tokio_postgres::Config,
    pub(crate) schema: String,
}

impl PgConfig {
    /// Parses a URL (`postgresql://user[:password]@host[:port]/dbname?param=value`, a Unix socket
    /// as `host=/run/postgresql`) or libpq `key=value` pairs. TLS is not built in: `sslmode=require`
    /// is refused (use a Unix socket, loopback, or a TLS tunnel such as stunnel or a sidecar).
    pub fn from_url(url: &str) -> Result<Self, PgError> {
        let mut driver = tokio_postgres::Config::from_str(url).map_err(|e| {
            PgError::Config(format!(
                "the connection URL does not parse ({}); the URL is not repeated here because it may hold a password",
                safe_parse_cause(&e)
            ))
        })?;
        if driver.get_ssl_mode() == SslMode::Require {
            return Err(PgError::Config(
                "sslmode=require: TLS is not built into this relay yet; connect over a Unix socket, loopback or a TLS tunnel".into(),
            ));
        }
        if driver.get_hosts().is_empty() {
            return Err(PgError::Config("the URL names no host".into()));
        }
        if driver.get_connect_timeout().is_none() {
            driver.connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS));
        }
        driver.keepalives(true);
        driver.keepalives_idle(Duration::from_millis(CLIENT_KEEPALIVE_IDLE_MS));
        if driver.get_application_name().is_none() {
            driver.application_name(APPLICATION_NAME);
        }
        Ok(Self {
            driver,
            schema: DEFAULT_SCHEMA.into(),
        })
    }

    /// Reads [`URL_ENV`] (required), then the password from the file named by
    /// [`PASSWORD_FILE_ENV`] or else from [`PASSWORD_ENV`] when either is set.
    pub fn from_env() -> Result<Self, PgError> {
        let url = std::env::var(URL_ENV)
            .map_err(|_| PgError::Config(format!("{URL_ENV} is not set (or not UTF-8)")))?;
        let config = Self::from_url(&url)?;
        if let Some(file) = std::env::var_os(PASSWORD_FILE_ENV) {
            return config.with_password_file(Path::new(&file));
        }
        match std::env::var(PASSWORD_ENV) {
            Ok(password) => Ok(config.with_password(password)),
            Err(_) => Ok(config),
        }
    }

    /// Uses `password` (replacing one given in the URL).
    #[must_use]
    pub fn with_password(mut self, password: impl AsRef<[u8]>) -> Self {
        self.driver.password(password.as_ref());
        self
    }

    /// Uses the content of `path` as the password (one trailing newline is dropped), e.g. a
    /// mounted secret. The error names the file, never its content.
    pub fn with_password_file(self, path: &Path) -> Result<Self, PgError> {
        let unreadable =
            |what: String| PgError::Config(format!("password file {}: {what}", path.display()));
        let len = std::fs::metadata(path)
            .map_err(|e| unreadable(e.kind().to_string()))?
            .len();
        if len > MAX_PASSWORD_FILE_BYTES {
            return Err(unreadable(format!(
                "{len} bytes, more than {MAX_PASSWORD_FILE_BYTES}"
            )));
        }
        let mut password = std::fs::read(path).map_err(|e| unreadable(e.kind().to_string()))?;
        if password.last() == Some(&b'\n') {
            password.pop();
            if password.last() == Some(&b'\r') {
                password.pop();
            }
        }
        Ok(self.with_password(password))
    }

    /// Keeps the relay's tables in `schema` (created on first start; default [`DEFAULT_SCHEMA`]).
    /// Each schema is an independent relay deployment with its own leadership. The name must be
    /// 1 to [`MAX_SCHEMA_NAME_BYTES`] of `[a-z0-9_]`, not starting with a digit nor `pg_`.
    pub fn with_schema(mut self, schema: &str) -> Result<Self, PgError> {
        let valid = !schema.is_empty()
            && schema.len() <= MAX_SCHEMA_NAME_BYTES
            && !schema.starts_with(|c: char| c.is_ascii_digit())
            && !schema.starts_with("pg_")
            && schema
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(PgError::Config(format!(
                "invalid schema name {schema:?}: 1-{MAX_SCHEMA_NAME_BYTES} of [a-z0-9_], not starting with a digit or pg_"
            )));
        }
        self.schema = schema.into();
        Ok(self)
    }

    /// The schema of the relay's tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Whether a password is configured (from the URL, a file or the environment).
    pub fn has_password(&self) -> bool {
        self.driver.get_password().is_some()
    }

    /// The driver settings with `options` (`-c name=value` session settings) appended.
    pub(crate) fn driver_with_options(&self, options: &[(&str, String)]) -> tokio_postgres::Config {
        let mut driver = self.driver.clone();
        let mut all = driver.get_options().unwrap_or_default().to_owned();
        for (name, value) in options {
            if !all.is_empty() {
                all.push(' ');
            }
            all.push_str(&format!("-c {name}={value}"));
        }
        driver.options(all);
        driver
    }
}

/// The parse error's cause only when it cannot quote the URL (the driver's "unexpected
/// character" cause quotes one character, which may be part of the password).
fn safe_parse_cause(e: &tokio_postgres::Error) -> String {
    let cause = std::error::Error::source(e).map(ToString::to_string);
    match cause {
        Some(c)
            if c.starts_with("invalid value for option")
                || c.starts_with("unknown option")
                || c == "unexpected EOF"
                || c.starts_with("unterminated") =>
        {
            c
        }
        _ => "malformed".into(),
    }
}

/// `user@host:port/dbname schema=…` — everything but the password.
impl fmt::Display for PgConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(user) = self.driver.get_user() {
            write!(f, "{user}@")?;
        }
        let ports = self.driver.get_ports();
        for (i, host) in self.driver.get_hosts().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match host {
                Host::Tcp(name) => f.write_str(name)?,
                Host::Unix(path) => write!(f, "{}", path.display())?,
            }
            if let Some(port) = ports.get(i).or(ports.first()) {
                write!(f, ":{port}")?;
            }
        }
        if let Some(db) = self.driver.get_dbname() {
            write!(f, "/{db}")?;
        }
        write!(f, " schema={}", self.schema)
    }
}

impl fmt::Debug for PgConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConfig")
            .field("target", &self.to_string())
            .field(
                "password",
                &if self.has_password() {
                    "<redacted>"
                } else {
                    "<none>"
                },
            )
            .finish()
    }
}

//! Helpers of the tests that need PostgreSQL: the test database's URL (or a printed skip), one
//! fresh schema per test (dropped at the end), and a raw admin connection.
//!
//! `RELAY_TEST_POSTGRES_URL` names the database (start a throwaway cluster with
//! `eval "$(relay-pg/scripts/pg-test-cluster.sh start /tmp/relay-pg-test)"`). Without it each
//! test prints why it is skipped, to the real stderr (not captured by the test harness), and
//! passes; with `RELAY_TEST_POSTGRES_REQUIRED=1` (CI) it fails instead.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::Write,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicU32, Ordering},
    },
};

use relay_pg::PgConfig;

/// The database URL of the tests.
pub const URL_ENV: &str = "RELAY_TEST_POSTGRES_URL";
/// Set to 1 (CI does) to fail, not skip, when [`URL_ENV`] is missing.
pub const REQUIRED_ENV: &str = "RELAY_TEST_POSTGRES_REQUIRED";

/// The test database URL, or `None` after printing why the calling test is skipped.
pub fn url() -> Option<String> {
    if let Ok(url) = std::env::var(URL_ENV)
        && !url.is_empty()
    {
        return Some(url);
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("a relay-pg test")
        .to_owned();
    assert!(
        std::env::var(REQUIRED_ENV).as_deref() != Ok("1"),
        "{test}: {URL_ENV} is not set but {REQUIRED_ENV}=1"
    );
    // Straight to the process's stderr: libtest captures `eprintln!` of passing tests.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {URL_ENV} is not set; start a throwaway cluster with \
         `eval \"$(relay-pg/scripts/pg-test-cluster.sh start /tmp/relay-pg-test)\"`"
    );
    None
}

/// A schema of its own for one test; dropped (with everything in it) when this is dropped.
#[derive(Debug)]
pub struct TestDb {
    pub url: String,
    pub schema: String,
    pub config: PgConfig,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl TestDb {
    /// A fresh schema name on the test database, or `None` (skip printed).
    pub fn new() -> Option<Self> {
        let url = url()?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let test = std::thread::current()
            .name()
            .unwrap_or("t")
            .rsplit("::")
            .next()
            .unwrap_or("t")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(30)
            .collect::<String>()
            .to_ascii_lowercase();
        let schema = format!("t{}_{n}_{test}", std::process::id());
        let config = PgConfig::from_url(&url)
            .expect("test URL")
            .with_schema(&schema)
            .expect("schema name");
        let db = Self {
            url,
            schema,
            config,
        };
        db.admin()
            .exec(&format!("DROP SCHEMA IF EXISTS {} CASCADE", db.schema));
        Some(db)
    }

    /// A raw connection whose search_path is this schema.
    pub fn admin(&self) -> Admin {
        Admin::connect(&self.url, &self.schema)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return; // keep the schema for a post-mortem
        }
        self.admin()
            .exec(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
    }
}

/// A blocking raw connection for the tests' own SQL (simple protocol, text results).
pub struct Admin {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl Admin {
    fn connect(url: &str, schema: &str) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .expect("admin connection");
            tokio::spawn(connection);
            client
                .batch_execute(&format!("SET search_path TO {schema}"))
                .await
                .unwrap();
            client
        });
        Self { runtime, client }
    }

    /// Runs statements, panicking on error.
    pub fn exec(&self, sql: &str) {
        self.runtime
            .block_on(self.client.batch_execute(sql))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Runs statements, returning the error's SQLSTATE if any.
    pub fn try_exec(&self, sql: &str) -> Result<(), String> {
        self.runtime
            .block_on(self.client.batch_execute(sql))
            .map_err(|e| e.code().map(|c| c.code().to_owned()).unwrap_or_default())
    }

    /// The rows of a query, as text (NULL as `None`).
    pub fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        let messages = self
            .runtime
            .block_on(self.client.simple_query(sql))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        messages
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_owned))
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    }

    /// The first column of the first row, parsed as an integer.
    pub fn int(&self, sql: &str) -> i64 {
        self.rows(sql)[0][0]
            .as_deref()
            .expect("NULL")
            .parse()
            .expect("an integer")
    }
}

/// Installs, once per test binary, a global subscriber that keeps every log line at every
/// level (the crate logs from its own thread, which a thread-local subscriber would miss).
pub fn capture_logs() {
    logs();
}

/// Everything logged in this test binary so far (see [`capture_logs`]).
pub fn logged() -> String {
    String::from_utf8_lossy(&logs().lock().unwrap()).into_owned()
}

fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buffer);
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .init();
        buffer
    })
    .clone()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

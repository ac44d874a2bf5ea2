//! `relay`: the SecureChat relay server on real sockets.
//!
//! ```text
//! relay --data ./relay-data                      # durable: ./relay-data/relay.sqlite3 + blobs/
//! relay --memory --listen 127.0.0.1:9000         # ephemeral
//! RELAY_PAYMENT_WEBHOOK_SECRET=… relay --data d  # accept signed payment webhooks
//! relay --memory --test-mode --pow-difficulty 1  # conformance runs (NEVER in production)
//! DATABASE_URL=postgresql://relay@db/chat RELAY_POSTGRES_PASSWORD_FILE=/run/secrets/pg \
//!   relay --secrets-dir /etc/relay/secrets       # PostgreSQL: run two, one is active
//! relay --data d --vapid-subject mailto:ops@example.org          # + Web Push (key: d/vapid.pem)
//! relay --data d --fcm-credentials fcm.json                      # + FCM (Android)
//! relay --data d --apns-key AuthKey.p8 --apns-key-id K --apns-team-id T --apns-topic org.app
//! ```
//!
//! Push (README "Push delivery"): each kind is enabled by its credentials; a kind without them
//! is skipped, with one warning at startup. Every key file must be mode 0600 (refused
//! otherwise).
//!
//! PostgreSQL (README "Two relays on one PostgreSQL database"): every relay pointed at the same
//! database and schema campaigns; one is active, the others stand by (`/readyz` 503
//! `NOT_LEADER`) and take over when it dies. A relay that loses its leadership closes every
//! socket at once and stands by again. The JWT signing key (and VAPID key) are files in
//! `--secrets-dir`, which every relay of the database must share (copy the directory), so that
//! tokens survive a failover. The database records their fingerprints: a relay whose keys
//! differ refuses to lead and exits non-zero, saying how to fix it (`--rotate-jwt-key` /
//! `--rotate-vapid-key` record a new key on purpose).
//!
//! Stops gracefully on Ctrl-C or SIGTERM: GOAWAY `server_shutdown` to every socket, in-flight
//! requests finish; every acknowledgement was sent after its commit, so nothing is lost. On
//! PostgreSQL the active relay then resigns: a standby takes over at once.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use relay_core::{
    Config, FsBlobStore, MemoryBlobStore, Relay,
    config::WebhookSecret,
    store::{MemoryStore, SqliteStore},
};
use relay_pg::{CampaignOptions, KeyClaim, KeyFingerprint, KeyKind, PgConfig};
use relay_push::{
    ApnsConfig, FcmConfig, HttpsTransport, ServiceAccount, VapidKey, VapidSubject, WebPushConfig,
    WorkerConfig,
};
use relay_server::{
    PushDelivery, RelayServer,
    postgres::{BlobOpener, PgLeadership},
    secrets,
};
use seam::net::Tokio;
use tracing::{info, warn};

/// File name of the SQLite store inside `--data`.
const STORE_FILE: &str = "relay.sqlite3";
/// Directory of media blobs inside `--data`.
const BLOB_DIR: &str = "blobs";
/// File name of the VAPID key inside `--data` or `--secrets-dir` (next to `jwt-signing.key`).
const VAPID_KEY_FILE: &str = "vapid.pem";

/// The SecureChat relay: HTTP JSON API under /api/v1 and WebSocket frames on /ws, in the
/// reference clients' wire format.
#[derive(Parser)]
#[command(name = "relay", version)]
struct Args {
    /// Address to listen on (loopback by default; use 0.0.0.0:PORT to serve other machines).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// Directory of the durable store (created on first run): DIR/relay.sqlite3 and DIR/blobs/,
    /// with the JWT signing key DIR/jwt-signing.key. One of --data, --memory, --postgres (or
    /// DATABASE_URL) is required.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["memory", "postgres"])]
    data: Option<PathBuf>,

    /// Keep everything in memory (lost when the process stops).
    #[arg(long, conflicts_with = "postgres")]
    memory: bool,

    /// Store everything in this PostgreSQL database (`postgresql://USER@HOST:PORT/DB` or libpq
    /// `key=value` pairs). Without --data, --memory or --postgres, the DATABASE_URL environment
    /// variable is used. Prefer a URL without the password (command lines are visible to every
    /// local user): the password comes from the file named by RELAY_POSTGRES_PASSWORD_FILE, or
    /// from PGPASSWORD. It is never logged. Many relays may use one database: one is active, the
    /// others stand by and take over when it dies (`/readyz` tells which). Needs --secrets-dir.
    #[arg(long, value_name = "URL", help_heading = "PostgreSQL")]
    postgres: Option<String>,

    /// The schema of the relay's tables (created on first start). Each schema is one
    /// deployment with its own leadership.
    #[arg(long, value_name = "NAME", default_value = relay_pg::DEFAULT_SCHEMA, help_heading = "PostgreSQL")]
    pg_schema: String,

    /// Directory of the secrets every relay of the database shares: DIR/jwt-signing.key (and
    /// DIR/vapid.pem with --vapid-subject), created mode 0600 on first start. Copy the same
    /// files to every relay of the database, or tokens issued by one are refused by the next
    /// after a failover.
    #[arg(long, value_name = "DIR", help_heading = "PostgreSQL")]
    secrets_dir: Option<PathBuf>,

    /// Directory of media parts on PostgreSQL (every relay of the database must see the same
    /// one, e.g. a shared volume). Without it media parts are kept in memory and lost at a
    /// failover or restart.
    #[arg(long, value_name = "DIR", help_heading = "PostgreSQL")]
    blob_dir: Option<PathBuf>,

    /// Proof-of-work difficulty for registration, in leading zero hex digits (0 disables).
    #[arg(long, default_value_t = relay_core::limits::POW_DIFFICULTY)]
    pow_difficulty: u32,

    /// Lifetime of login tokens (JWT), in seconds.
    #[arg(long, default_value_t = relay_core::limits::JWT_TTL_MS / 1000)]
    jwt_ttl_secs: u64,

    /// Shared secret of the payment processor's webhook signatures (HMAC-SHA256). Never
    /// logged. Without one, every webhook is refused.
    #[arg(long, env = "RELAY_PAYMENT_WEBHOOK_SECRET", hide_env_values = true)]
    payment_webhook_secret: Option<String>,

    /// Base URL of the payment processor's hosted invoice page; an order's payment_url is
    /// BASE/{order_id}.
    #[arg(long, value_name = "URL")]
    payment_page_base: Option<String>,

    /// File listing the vanity aliases for sale, one per line (`#` comments and blank lines
    /// ignored). Default: the built-in catalog.
    #[arg(long, value_name = "FILE")]
    vanity_catalog: Option<PathBuf>,

    /// Enables Web Push: the VAPID `sub` contact the push services may use to reach the
    /// operator, `mailto:ADDRESS` or an `https://` URL. The VAPID key is DIR/vapid.pem (created
    /// mode 0600 on first start) or --vapid-key; its public half is served at
    /// GET /api/v1/push/vapid-key. Without it browser subscriptions get no pushes.
    #[arg(
        long,
        value_name = "mailto:…|https://…",
        env = "RELAY_VAPID_SUBJECT",
        help_heading = "Push"
    )]
    vapid_subject: Option<String>,

    /// The VAPID private key (P-256; PKCS#8 or SEC1 PEM, or base64url of the 32-byte scalar),
    /// instead of DIR/vapid.pem (--data or --secrets-dir). Must be mode 0600. Needs --vapid-subject.
    #[arg(
        long,
        value_name = "FILE",
        env = "RELAY_VAPID_KEY",
        requires = "vapid_subject",
        help_heading = "Push"
    )]
    vapid_key: Option<PathBuf>,

    /// Enables FCM (Android): the Firebase service-account key file (JSON, mode 0600).
    #[arg(
        long,
        value_name = "FILE",
        env = "RELAY_FCM_CREDENTIALS",
        help_heading = "Push"
    )]
    fcm_credentials: Option<PathBuf>,

    /// FCM API base URL (default `https://fcm.googleapis.com`).
    #[arg(
        long,
        value_name = "URL",
        env = "RELAY_FCM_ENDPOINT",
        requires = "fcm_credentials",
        help_heading = "Push"
    )]
    fcm_endpoint: Option<String>,

    /// OAuth token URL of the FCM service account (default: the key file's `token_uri`).
    #[arg(
        long,
        value_name = "URL",
        env = "RELAY_FCM_TOKEN_URL",
        requires = "fcm_credentials",
        help_heading = "Push"
    )]
    fcm_token_url: Option<String>,

    /// Enables APNs (iOS): the `.p8` token signing key from Apple (mode 0600). Needs
    /// --apns-key-id, --apns-team-id and --apns-topic.
    #[arg(
        long,
        value_name = "FILE",
        env = "RELAY_APNS_KEY",
        requires_all = ["apns_key_id", "apns_team_id", "apns_topic"],
        help_heading = "Push"
    )]
    apns_key: Option<PathBuf>,

    /// The APNs key's id (10 characters, Apple developer account).
    #[arg(
        long,
        value_name = "ID",
        env = "RELAY_APNS_KEY_ID",
        requires = "apns_key",
        help_heading = "Push"
    )]
    apns_key_id: Option<String>,

    /// The Apple developer team id.
    #[arg(
        long,
        value_name = "ID",
        env = "RELAY_APNS_TEAM_ID",
        requires = "apns_key",
        help_heading = "Push"
    )]
    apns_team_id: Option<String>,

    /// The iOS app's bundle id (`apns-topic`).
    #[arg(
        long,
        value_name = "BUNDLE_ID",
        env = "RELAY_APNS_TOPIC",
        requires = "apns_key",
        help_heading = "Push"
    )]
    apns_topic: Option<String>,

    /// APNs base URL (default `https://api.push.apple.com`; development builds of the
    /// app: `https://api.sandbox.push.apple.com`).
    #[arg(
        long,
        value_name = "URL",
        env = "RELAY_APNS_ENDPOINT",
        requires = "apns_key",
        help_heading = "Push"
    )]
    apns_endpoint: Option<String>,

    /// Writes a new JWT signing key to DIR/jwt-signing.key (--data or --secrets-dir) before
    /// starting: every token signed with the old key is refused from then on (users log in
    /// again). See README "Secrets". On PostgreSQL, this relay records the new key in the
    /// database when it leads (relays still on the old key then refuse to lead): copy the new
    /// file to every relay.
    #[arg(long)]
    rotate_jwt_key: bool,

    /// Writes a new VAPID key to DIR/vapid.pem (--data or --secrets-dir) before starting; with
    /// --vapid-key FILE, FILE (which you replaced) is taken as the new key. Browsers subscribed
    /// under the old key get no pushes until the app subscribes again. On PostgreSQL, this relay
    /// records the new key in the database when it leads (relays still on the old key then
    /// refuse to lead): copy the new key to every relay.
    #[arg(long, requires = "vapid_subject", help_heading = "Push")]
    rotate_vapid_key: bool,

    /// Seed of the relay's RNG (ids, tokens); default: drawn from the operating system.
    #[arg(long)]
    seed: Option<u64>,

    /// Test mode (never in production): serves the unauthenticated
    /// `POST /api/v1/test/advance-clock {"ms": N}` -> `{"now_ms": …}`, which moves the relay's
    /// clock forward (expiring holds, orders, tokens, offline messages) for conformance runs
    /// (`conformance --relay URL --clock-hook`); also accepts `http://` Web Push subscriptions
    /// and push service URLs (`conformance --push-probe URL`).
    #[arg(long)]
    test_mode: bool,

    /// `msg` frames one account may send per minute (more get an error frame RATE_LIMITED).
    #[arg(long, value_name = "N", default_value_t = relay_core::limits::MAX_MSGS_PER_MIN_PER_USER)]
    msgs_per_min_per_user: u32,

    /// Frames of any kind, malformed ones included, one account's connection may send per
    /// minute once its burst is used up; past it the socket is closed (1008).
    #[arg(long, value_name = "N", default_value_t = relay_core::limits::MAX_FRAMES_PER_MIN_PER_CONN)]
    frames_per_min_per_conn: u32,

    /// Frames a connection may send at once before the per-minute rate applies.
    #[arg(long, value_name = "N", default_value_t = relay_core::limits::MAX_FRAME_BURST_PER_CONN)]
    frame_burst_per_conn: u32,

    /// Each request's headers must arrive within this many milliseconds of the connection
    /// opening or of the previous response (slow-header and silent connections are closed; a
    /// WebSocket authenticates in its upgrade request, so this bounds that too).
    #[arg(long, value_name = "MS", default_value_t = seam::net::HEADER_READ_TIMEOUT_MS)]
    header_read_timeout_ms: u64,

    /// Open connections in total (HTTP and WebSocket); new ones past it are closed at once.
    #[arg(long, value_name = "N", default_value_t = seam::net::MAX_CONNECTIONS)]
    max_connections: usize,

    /// Open connections from one IP address; new ones past it are closed at once.
    #[arg(long, value_name = "N", default_value_t = seam::net::MAX_CONNECTIONS_PER_ADDR)]
    max_connections_per_addr: usize,

    /// Longest one write to a WebSocket may take; a client that does not read for this long is
    /// disconnected (what it had not acknowledged stays queued for its next sync).
    #[arg(long, value_name = "MS", default_value_t = seam::net::WRITE_DEADLINE_MS)]
    write_deadline_ms: u64,

    /// Bytes of frames waiting to be written to one WebSocket; a client whose queue would
    /// pass this is disconnected (nothing acknowledged is lost: it re-syncs).
    #[arg(long, value_name = "BYTES", default_value_t = seam::net::OUTBOUND_QUEUE_BYTES)]
    outbound_queue_bytes: usize,

    /// A request body must start arriving within this many milliseconds of its headers; every
    /// byte received adds 1/--body-min-bytes-per-s seconds. Past it: 408 BODY_TIMEOUT and the
    /// connection is closed (slow-body clients).
    #[arg(long, value_name = "MS", default_value_t = seam::net::BODY_READ_TIMEOUT_MS)]
    body_read_timeout_ms: u64,

    /// The minimum average rate of a request body, in bytes per second (see
    /// --body-read-timeout-ms).
    #[arg(long, value_name = "BYTES", default_value_t = seam::net::BODY_MIN_BYTES_PER_S)]
    body_min_bytes_per_s: u64,

    /// Bytes of undelivered messages the relay holds in memory over all recipients; past it
    /// new messages get the error frame RELAY_QUEUE_FULL (nothing acknowledged is dropped).
    #[arg(long, value_name = "BYTES", default_value_t = relay_core::limits::MAX_OFFLINE_QUEUE_BYTES_TOTAL)]
    max_queued_bytes: u64,

    /// Undelivered messages one recipient may have queued over all its conversations; past it:
    /// error frame RECIPIENT_QUEUE_FULL to the sender.
    #[arg(long, value_name = "N", default_value_t = relay_core::limits::MAX_OFFLINE_QUEUE_PER_RECIPIENT)]
    max_queued_msgs_per_recipient: usize,

    /// Bytes one recipient may have queued over all its conversations; past it: error frame
    /// RECIPIENT_QUEUE_FULL to the sender.
    #[arg(long, value_name = "BYTES", default_value_t = relay_core::limits::MAX_OFFLINE_QUEUE_BYTES_PER_RECIPIENT)]
    max_queued_bytes_per_recipient: u64,

    /// Bytes one sender may have queued for one recipient (its share of the recipient's
    /// queue); past it: error frame QUEUE_FULL.
    #[arg(long, value_name = "BYTES", default_value_t = relay_core::limits::MAX_OFFLINE_QUEUE_BYTES_PER_CONVERSATION)]
    max_queued_bytes_per_conversation: u64,

    /// Bytes one sender may have queued over all its recipients; past it: error frame
    /// SENDER_QUEUE_FULL.
    #[arg(long, value_name = "BYTES", default_value_t = relay_core::limits::MAX_OFFLINE_QUEUE_BYTES_PER_SENDER)]
    max_queued_bytes_per_sender: u64,

    /// Web Push services the relay may deliver to (repeatable): a host (`fcm.googleapis.com`)
    /// or a `*.`-prefixed suffix (`*.push.services.mozilla.com`). Without it any public host
    /// is allowed. The hosts of --fcm-endpoint, the FCM token URL and --apns-endpoint are
    /// added. Subscriptions to other hosts get 400 PUSH_ENDPOINT_FORBIDDEN.
    #[arg(long, value_name = "HOST", help_heading = "Push")]
    push_allow_host: Vec<String>,

    /// Lets push go to private, loopback and link-local addresses and local names (a lab
    /// whose push service runs on a private network). Never on a relay that serves the
    /// internet: any account could then make the relay connect into its own network.
    /// --test-mode implies it.
    #[arg(long, help_heading = "Push")]
    push_allow_private: bool,

    /// Log filter (tracing EnvFilter syntax), e.g. `info`, `relay_core=debug,info`. At no
    /// level are payloads, tokens, tickets or client addresses logged: the WebSocket and HTTP
    /// libraries, which would print frames at TRACE, never log below INFO.
    #[arg(long, default_value = "info")]
    log: String,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let subscriber = relay_server::logging::subscriber(
        &args.log,
        std::io::stdout,
        relay_server::logging::stdout_color(),
    )
    .context("invalid --log filter")?;
    // Also forwards the `log` records of libraries that use it (tungstenite) through the filter.
    tracing_subscriber::util::SubscriberInitExt::try_init(subscriber)
        .context("installing the logger")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run(args))
}

/// Where the relay keeps its state.
enum StoreChoice {
    Memory,
    Sqlite(PathBuf),
    Postgres(Box<PgConfig>),
}

/// The store from the flags (or DATABASE_URL when no store flag is given).
fn store_choice(args: &Args) -> Result<StoreChoice> {
    if args.memory {
        return Ok(StoreChoice::Memory);
    }
    if let Some(dir) = &args.data {
        return Ok(StoreChoice::Sqlite(dir.clone()));
    }
    let url = match &args.postgres {
        Some(url) => url.clone(),
        None => match std::env::var(relay_pg::URL_ENV) {
            Ok(url) if !url.is_empty() => url,
            _ => bail!(
                "a store is required: --data DIR, --memory, or --postgres URL (or {})",
                relay_pg::URL_ENV
            ),
        },
    };
    // The URL is never repeated in errors or logs: it may hold a password.
    let mut database = PgConfig::from_url(&url)?.with_schema(&args.pg_schema)?;
    if let Some(file) = std::env::var_os(relay_pg::PASSWORD_FILE_ENV) {
        database = database.with_password_file(Path::new(&file))?;
    } else if let Ok(password) = std::env::var(relay_pg::PASSWORD_ENV) {
        database = database.with_password(password);
    }
    Ok(StoreChoice::Postgres(Box::new(database)))
}

/// The directory of the key files: --data, or --secrets-dir on PostgreSQL.
fn secrets_dir(args: &Args, store: &StoreChoice) -> Result<Option<PathBuf>> {
    match store {
        StoreChoice::Memory => {
            if args.secrets_dir.is_some() || args.blob_dir.is_some() {
                bail!("--secrets-dir and --blob-dir are for --postgres");
            }
            if args.rotate_jwt_key || args.rotate_vapid_key {
                bail!("--rotate-jwt-key and --rotate-vapid-key need --data DIR or --postgres");
            }
            Ok(None)
        }
        StoreChoice::Sqlite(dir) => {
            if args.secrets_dir.is_some() || args.blob_dir.is_some() {
                bail!(
                    "--secrets-dir and --blob-dir are for --postgres (with --data the keys are in DIR)"
                );
            }
            Ok(Some(dir.clone()))
        }
        StoreChoice::Postgres(_) => match &args.secrets_dir {
            Some(dir) => Ok(Some(dir.clone())),
            None => bail!(
                "--postgres needs --secrets-dir DIR: the JWT signing key every relay of the database \
                 shares (created in DIR on first start; copy DIR to the other relays)"
            ),
        },
    }
}

async fn run(args: Args) -> Result<()> {
    let mut config = config(&args)?;
    let seed = match args.seed {
        Some(seed) => seed,
        None => os_seed()?,
    };
    let store = store_choice(&args)?;
    let secrets = secrets_dir(&args, &store)?;
    if let Some(dir) = &secrets {
        secrets::create_private_dir(dir)?;
    }
    let (push, vapid_fingerprint) = push_delivery(&args, secrets.as_deref())?;
    // The subscription check and the transport share one destination policy.
    push.configure(&mut config);
    let mut server = match store {
        StoreChoice::Memory => {
            warn!("--memory: nothing survives a restart");
            // A fresh random key per process (a seed-derived one could be recomputed).
            let mut key = [0u8; 32];
            getrandom::fill(&mut key)
                .map_err(|e| anyhow::anyhow!("reading OS randomness for the JWT key: {e}"))?;
            config.jwt_signing_key = Some(relay_core::JwtSigningKey(key));
            RelayServer::in_memory(config, seed, MemoryStore::new(), MemoryBlobStore::new())
        }
        StoreChoice::Sqlite(dir) => {
            let store_path = dir.join(STORE_FILE);
            let blob_dir = dir.join(BLOB_DIR);
            // An older version kept the key in the store: moved to the key file once.
            let legacy = if store_path.exists() && !dir.join(secrets::JWT_KEY_FILE).exists() {
                let mut store = SqliteStore::open(&store_path)
                    .with_context(|| format!("opening {}", store_path.display()))?;
                relay_core::legacy_jwt_signing_key(&mut store)
                    .context("reading the JWT key an older version kept in the store")?
            } else {
                None
            };
            config.jwt_signing_key = Some(jwt_key(&args, &dir, legacy)?);
            info!(store = %store_path.display(), "durable store");
            RelayServer::new(move || {
                let store = SqliteStore::open(&store_path)?;
                let blobs = FsBlobStore::open(&blob_dir)
                    .map_err(|e| relay_core::store::StoreError::Backend(e.to_string()))?;
                Relay::with_blobs(config.clone(), Box::new(store), Box::new(blobs), seed)
            })
        }
        StoreChoice::Postgres(database) => {
            let dir = secrets.as_deref().context("no secrets directory")?;
            let existed = dir.join(secrets::JWT_KEY_FILE).exists();
            let jwt = jwt_key(&args, dir, None)?;
            let jwt_fingerprint = secrets::jwt_key_fingerprint(&jwt);
            config.jwt_signing_key = Some(jwt);
            if !existed {
                warn!(
                    file = %dir.join(secrets::JWT_KEY_FILE).display(),
                    "new JWT signing key: copy it to every relay of this database, or tokens \
                     issued here are refused after a failover"
                );
            }
            let blobs: BlobOpener = match &args.blob_dir {
                Some(blob_dir) => {
                    let blob_dir = blob_dir.clone();
                    std::sync::Arc::new(move || {
                        let blobs = FsBlobStore::open(&blob_dir)
                            .map_err(|e| relay_core::store::StoreError::Backend(e.to_string()))?;
                        Ok(Box::new(blobs) as Box<dyn relay_core::BlobStore>)
                    })
                }
                None => {
                    warn!(
                        "--postgres without --blob-dir: media parts are kept in this process's \
                         memory and lost at a failover or restart"
                    );
                    let blobs = MemoryBlobStore::new();
                    std::sync::Arc::new(move || {
                        Ok(Box::new(blobs.clone()) as Box<dyn relay_core::BlobStore>)
                    })
                }
            };
            // Checked against (or recorded as) the database's when this relay leads.
            let claim = |fingerprint, rotate| {
                if rotate {
                    KeyClaim::replacing(fingerprint)
                } else {
                    KeyClaim::new(fingerprint)
                }
            };
            let mut keys =
                BTreeMap::from([(KeyKind::Jwt, claim(jwt_fingerprint, args.rotate_jwt_key))]);
            if let Some(fingerprint) = vapid_fingerprint {
                keys.insert(KeyKind::Vapid, claim(fingerprint, args.rotate_vapid_key));
            }
            info!(
                jwt = %jwt_fingerprint,
                vapid = %vapid_fingerprint.map_or_else(|| "none (no Web Push)".to_owned(), |f| f.to_string()),
                "key fingerprints (every relay of the database must show the same)"
            );
            let options = CampaignOptions {
                holder: format!("relay pid {} listen {}", std::process::id(), args.listen),
                keys,
                ..CampaignOptions::default()
            };
            info!(database = %database, "PostgreSQL store: standing by until this relay leads");
            RelayServer::campaigning(PgLeadership::new(*database, options, config, seed, blobs))
        }
    };
    server = server.with_push(push);
    server = server.with_limits(seam::net::ServeLimits {
        header_read_timeout_ms: args.header_read_timeout_ms,
        max_connections: args.max_connections,
        max_connections_per_addr: args.max_connections_per_addr,
        write_deadline_ms: args.write_deadline_ms,
        outbound_queue_bytes: args.outbound_queue_bytes,
        body_read_timeout_ms: args.body_read_timeout_ms,
        body_min_bytes_per_s: args.body_min_bytes_per_s,
    });
    if args.test_mode {
        warn!("--test-mode: anyone can move this relay's clock; never use it in production");
        server = server.with_test_mode();
    }
    info!(listen = %args.listen, "starting relay");
    server
        .run::<Tokio>(args.listen, shutdown_signal())
        .await
        .with_context(|| format!("serving on {}", args.listen))
}

/// The JWT signing key of the key directory `dir` (rotated first with --rotate-jwt-key).
fn jwt_key(
    args: &Args,
    dir: &Path,
    legacy: Option<relay_core::JwtSigningKey>,
) -> Result<relay_core::JwtSigningKey> {
    let key = secrets::load_or_create_jwt_key(dir, legacy, args.rotate_jwt_key)?;
    if args.rotate_jwt_key {
        warn!("--rotate-jwt-key: a new JWT signing key; every earlier token is now refused");
    }
    Ok(key)
}

/// Push delivery from the flags: each kind with credentials is enabled (the worker warns
/// once about each kind without). TLS to the push services; `http://` only in test mode.
/// Also returns the VAPID key's fingerprint when Web Push is enabled.
fn push_delivery(
    args: &Args,
    key_dir: Option<&Path>,
) -> Result<(PushDelivery, Option<KeyFingerprint>)> {
    let test_mode = args.test_mode;
    let mut vapid_fingerprint = None;
    let web_push = match &args.vapid_subject {
        None => None,
        Some(subject) => {
            let subject = VapidSubject::parse(subject).context("--vapid-subject")?;
            let key = vapid_key(args, key_dir)?;
            vapid_fingerprint = Some(secrets::vapid_key_fingerprint(&key));
            info!("push: Web Push enabled (public key at GET /api/v1/push/vapid-key)");
            Some(WebPushConfig {
                allow_http: test_mode,
                ..WebPushConfig::new(key, subject)
            })
        }
    };
    let fcm = match &args.fcm_credentials {
        None => None,
        Some(path) => {
            let account = ServiceAccount::load(path)
                .with_context(|| format!("--fcm-credentials {}", path.display()))?;
            let mut fcm = FcmConfig::new(account);
            if let Some(url) = &args.fcm_endpoint {
                fcm.endpoint = url.clone();
            }
            if let Some(url) = &args.fcm_token_url {
                fcm.token_url = url.clone();
            }
            fcm.endpoint = push_service_url("--fcm-endpoint", &fcm.endpoint, test_mode)?;
            fcm.token_url = push_service_url(
                "the FCM token URL (--fcm-token-url or the key file's token_uri)",
                &fcm.token_url,
                test_mode,
            )?;
            info!(project = fcm.account.project_id(), "push: FCM enabled");
            Some(fcm)
        }
    };
    let apns = match &args.apns_key {
        None => None,
        Some(path) => {
            let field = |v: &Option<String>| v.clone().unwrap_or_default();
            let mut apns = ApnsConfig::load(
                path,
                &field(&args.apns_key_id),
                &field(&args.apns_team_id),
                &field(&args.apns_topic),
            )
            .with_context(|| format!("--apns-key {}", path.display()))?;
            if let Some(url) = &args.apns_endpoint {
                apns = apns.with_endpoint(url);
            }
            let endpoint = push_service_url("--apns-endpoint", &apns.endpoint, test_mode)?;
            apns = apns.with_endpoint(&endpoint);
            info!(topic = %apns.topic, "push: APNs enabled");
            Some(apns)
        }
    };
    let transport = HttpsTransport::new()
        .context("setting up TLS for push delivery")?
        .with_destinations(push_destinations(args, fcm.as_ref(), apns.as_ref())?)
        .context("setting up TLS for push delivery")?;
    if transport.destinations().allow_private && !test_mode {
        warn!(
            "--push-allow-private: pushes may go to private and loopback addresses; never on a \
             relay that serves the internet"
        );
    }
    let config = WorkerConfig {
        web_push,
        fcm,
        apns,
        ..WorkerConfig::default()
    };
    Ok((
        PushDelivery::over_https(config, transport, os_bytes()?),
        vapid_fingerprint,
    ))
}

/// The VAPID key: `--vapid-key FILE`, else DIR/vapid.pem (`--data` or `--secrets-dir`; created
/// on first start, replaced with `--rotate-vapid-key`), else (with `--memory`) a key for this
/// process only.
fn vapid_key(args: &Args, key_dir: Option<&Path>) -> Result<VapidKey> {
    if let Some(path) = &args.vapid_key {
        let key = VapidKey::load(path).context("--vapid-key")?;
        info!(file = %path.display(), "push: VAPID key loaded");
        if args.rotate_vapid_key {
            warn!(
                file = %path.display(),
                "--rotate-vapid-key: this file is taken as the new VAPID key; browsers subscribed \
                 under the old key get no pushes until they subscribe again"
            );
        }
        return Ok(key);
    }
    let mut rng = ChaCha20Rng::from_seed(os_bytes()?);
    match key_dir {
        Some(dir) if args.rotate_vapid_key => {
            let path = dir.join(VAPID_KEY_FILE);
            let key = secrets::rotate_vapid_key(&path, &mut rng)?;
            warn!(
                file = %path.display(),
                "--rotate-vapid-key: a new VAPID key (mode 0600); browsers subscribed under the \
                 old key get no pushes until they subscribe again"
            );
            Ok(key)
        }
        Some(dir) => {
            let path = dir.join(VAPID_KEY_FILE);
            let (key, created) =
                VapidKey::load_or_create(&path, &mut rng).context("the VAPID key file")?;
            if created {
                info!(file = %path.display(), "push: new VAPID key written (mode 0600); back it up with the data: browsers subscribed under it");
            } else {
                info!(file = %path.display(), "push: VAPID key loaded");
            }
            Ok(key)
        }
        None => {
            warn!(
                "--memory without --vapid-key: a VAPID key for this process only; browser \
                 subscriptions made under it get no pushes after a restart"
            );
            Ok(VapidKey::generate(&mut rng))
        }
    }
}

/// The push destination policy from the flags: test mode accepts `http://` and any address
/// (stand-ins); otherwise `https://` to public addresses, `--push-allow-private` for a lab,
/// and `--push-allow-host` (plus the configured FCM and APNs hosts) as an allowlist.
fn push_destinations(
    args: &Args,
    fcm: Option<&FcmConfig>,
    apns: Option<&ApnsConfig>,
) -> Result<relay_core::destination::PushDestinations> {
    use relay_core::destination::PushDestinations;
    if args.test_mode {
        return Ok(PushDestinations::permissive());
    }
    let mut allowed_hosts: Vec<String> = Vec::new();
    for host in &args.push_allow_host {
        let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
        let name = host.strip_prefix("*.").unwrap_or(&host);
        match relay_core::destination::parse_host(name) {
            Ok(relay_core::destination::Host::Name(_)) => allowed_hosts.push(host),
            _ => bail!("--push-allow-host {host}: expected a host name or *.suffix"),
        }
    }
    if !allowed_hosts.is_empty() {
        let configured = fcm
            .into_iter()
            .flat_map(|f| [f.endpoint.as_str(), f.token_url.as_str()])
            .chain(apns.map(|a| a.endpoint.as_str()));
        for url in configured {
            if let Some(host) = url
                .parse::<http::Uri>()
                .ok()
                .and_then(|u| u.host().map(str::to_ascii_lowercase))
            {
                allowed_hosts.push(host);
            }
        }
    }
    Ok(PushDestinations {
        allow_http: false,
        allow_private: args.push_allow_private,
        allowed_hosts,
    })
}

/// `url` without a trailing `/`, refused unless `https://` with a host (`http://` too in test
/// mode, for stand-ins).
fn push_service_url(what: &str, url: &str, test_mode: bool) -> Result<String> {
    let uri: http::Uri = url.parse().with_context(|| format!("{what}: not a URL"))?;
    let scheme_ok = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => test_mode,
        _ => false,
    };
    if !scheme_ok || uri.host().is_none_or(str::is_empty) {
        bail!(
            "{what} must be an https:// URL{}",
            if test_mode {
                " (or http:// in test mode)"
            } else {
                ""
            }
        );
    }
    Ok(url.trim_end_matches('/').to_owned())
}

fn config(args: &Args) -> Result<Config> {
    let mut config = Config {
        pow_difficulty: args.pow_difficulty,
        jwt_ttl_ms: args.jwt_ttl_secs.saturating_mul(1000),
        msgs_per_min_per_user: args.msgs_per_min_per_user,
        frames_per_min_per_conn: args.frames_per_min_per_conn,
        frame_burst_per_conn: args.frame_burst_per_conn,
        max_offline_queue_bytes_total: args.max_queued_bytes,
        max_offline_queue_per_recipient: args.max_queued_msgs_per_recipient,
        max_offline_queue_bytes_per_recipient: args.max_queued_bytes_per_recipient,
        max_offline_queue_bytes_per_conversation: args.max_queued_bytes_per_conversation,
        max_offline_queue_bytes_per_sender: args.max_queued_bytes_per_sender,
        ..Config::default()
    };
    if args.pow_difficulty > relay_core::limits::MAX_POW_DIFFICULTY {
        bail!(
            "--pow-difficulty must be at most {}",
            relay_core::limits::MAX_POW_DIFFICULTY
        );
    }
    match &args.payment_webhook_secret {
        Some(secret) if !secret.is_empty() => {
            config.payment_webhook_secret = WebhookSecret(secret.as_bytes().to_vec());
        }
        _ => warn!("no payment webhook secret: every payment webhook will be refused"),
    }
    if let Some(base) = &args.payment_page_base {
        config.payment_page_base = base.trim_end_matches('/').to_owned();
    }
    if let Some(path) = &args.vanity_catalog {
        config.vanity_catalog = read_catalog(path)?;
        info!(
            aliases = config.vanity_catalog.len(),
            "vanity catalog loaded"
        );
    }
    Ok(config)
}

fn read_catalog(path: &Path) -> Result<Vec<wire::AliasId>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the vanity catalog {}", path.display()))?;
    text.lines()
        .map(str::trim)
        .enumerate()
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .map(|(n, line)| {
            wire::AliasId::parse_alias(line)
                .with_context(|| format!("{}:{}: invalid alias {line:?}", path.display(), n + 1))
        })
        .collect()
}

/// The default seed: the binary reads OS randomness (the library never does this: the
/// simulator passes its own seed).
fn os_seed() -> Result<u64> {
    getrandom::u64().map_err(|e| anyhow::anyhow!("reading OS randomness for the seed: {e}"))
}

/// 32 bytes of OS randomness (the push worker's CSPRNG seed, a new VAPID key).
fn os_bytes() -> Result<[u8; 32]> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("reading OS randomness: {e}"))?;
    Ok(bytes)
}

/// Ctrl-C or (on Unix) SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        biased;
        () = ctrl_c => info!("Ctrl-C received"),
        () = term => info!("SIGTERM received"),
    }
}

//! `relay`: the SecureChat relay server on real sockets.
//!
//! ```text
//! relay --data ./relay-data                      # durable: ./relay-data/relay.sqlite3 + blobs/
//! relay --memory --listen 127.0.0.1:9000         # ephemeral
//! RELAY_PAYMENT_WEBHOOK_SECRET=… relay --data d  # accept signed payment webhooks
//! relay --memory --test-mode --pow-difficulty 1  # conformance runs (NEVER in production)
//! relay --data d --vapid-subject mailto:ops@example.org          # + Web Push (key: d/vapid.pem)
//! relay --data d --fcm-credentials fcm.json                      # + FCM (Android)
//! relay --data d --apns-key AuthKey.p8 --apns-key-id K --apns-team-id T --apns-topic org.app
//! ```
//!
//! Push (README "Push delivery"): each kind is enabled by its credentials; a kind without them
//! is skipped, with one warning at startup. Every key file must be mode 0600 (refused
//! otherwise).
//!
//! Stops gracefully on Ctrl-C or SIGTERM: GOAWAY `server_shutdown` to every socket, in-flight
//! requests finish; every acknowledgement was sent after its commit, so nothing is lost.

use std::{
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
use relay_push::{
    ApnsConfig, FcmConfig, HttpsTransport, ServiceAccount, VapidKey, VapidSubject, WebPushConfig,
    WorkerConfig,
};
use sim::{
    net::Tokio,
    server::{PushDelivery, RelayServer, secrets},
};
use tracing::{info, warn};

/// File name of the SQLite store inside `--data`.
const STORE_FILE: &str = "relay.sqlite3";
/// Directory of media blobs inside `--data`.
const BLOB_DIR: &str = "blobs";
/// File name of the VAPID key inside `--data` (next to `jwt-signing.key`).
const VAPID_KEY_FILE: &str = "vapid.pem";

/// The SecureChat relay: HTTP JSON API under /api/v1 and WebSocket frames on /ws, in the
/// reference clients' wire format.
#[derive(Parser)]
#[command(name = "relay", version)]
struct Args {
    /// Address to listen on (loopback by default; use 0.0.0.0:PORT to serve other machines).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// Directory of the durable store (created on first run): DIR/relay.sqlite3 and DIR/blobs/.
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "memory",
        conflicts_with = "memory"
    )]
    data: Option<PathBuf>,

    /// Keep everything in memory (lost when the process stops).
    #[arg(long)]
    memory: bool,

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
    /// instead of DIR/vapid.pem. Must be mode 0600. Needs --vapid-subject.
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

    /// Writes a new JWT signing key to DIR/jwt-signing.key before starting: every token signed
    /// with the old key is refused from then on (users log in again). See README "Secrets".
    #[arg(long, requires = "data")]
    rotate_jwt_key: bool,

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
    #[arg(long, value_name = "MS", default_value_t = sim::net::HEADER_READ_TIMEOUT_MS)]
    header_read_timeout_ms: u64,

    /// Open connections in total (HTTP and WebSocket); new ones past it are closed at once.
    #[arg(long, value_name = "N", default_value_t = sim::net::MAX_CONNECTIONS)]
    max_connections: usize,

    /// Open connections from one IP address; new ones past it are closed at once.
    #[arg(long, value_name = "N", default_value_t = sim::net::MAX_CONNECTIONS_PER_ADDR)]
    max_connections_per_addr: usize,

    /// Longest one write to a WebSocket may take; a client that does not read for this long is
    /// disconnected (what it had not acknowledged stays queued for its next sync).
    #[arg(long, value_name = "MS", default_value_t = sim::net::WRITE_DEADLINE_MS)]
    write_deadline_ms: u64,

    /// Bytes of frames waiting to be written to one WebSocket; a client whose queue would
    /// pass this is disconnected (nothing acknowledged is lost: it re-syncs).
    #[arg(long, value_name = "BYTES", default_value_t = sim::net::OUTBOUND_QUEUE_BYTES)]
    outbound_queue_bytes: usize,

    /// Log filter (tracing EnvFilter syntax), e.g. `info`, `relay_core=debug,info`. At no
    /// level are payloads, tokens, tickets or client addresses logged: the WebSocket and HTTP
    /// libraries, which would print frames at TRACE, never log below INFO.
    #[arg(long, default_value = "info")]
    log: String,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let subscriber = sim::server::logging::subscriber(&args.log, std::io::stdout)
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

async fn run(args: Args) -> Result<()> {
    let mut config = config(&args)?;
    let seed = match args.seed {
        Some(seed) => seed,
        None => os_seed()?,
    };
    if let Some(dir) = &args.data {
        secrets::create_private_dir(dir)?;
    }
    let push = push_delivery(&args)?;
    push.configure(&mut config);
    if args.test_mode {
        // The conformance push probe is an `http://` service (never in production).
        config.allow_http_push_endpoints = true;
    }
    let mut server = match (&args.data, args.memory) {
        (_, true) => {
            warn!("--memory: nothing survives a restart");
            // A fresh random key per process (a seed-derived one could be recomputed).
            let mut key = [0u8; 32];
            getrandom::fill(&mut key)
                .map_err(|e| anyhow::anyhow!("reading OS randomness for the JWT key: {e}"))?;
            config.jwt_signing_key = Some(relay_core::JwtSigningKey(key));
            RelayServer::in_memory(config, seed, MemoryStore::new(), MemoryBlobStore::new())
        }
        (Some(dir), false) => {
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
            let key = secrets::load_or_create_jwt_key(dir, legacy, args.rotate_jwt_key)?;
            if args.rotate_jwt_key {
                warn!(
                    "--rotate-jwt-key: a new JWT signing key; every earlier token is now refused"
                );
            }
            config.jwt_signing_key = Some(key);
            info!(store = %store_path.display(), "durable store");
            RelayServer::new(move || {
                let store = SqliteStore::open(&store_path)?;
                let blobs = FsBlobStore::open(&blob_dir)
                    .map_err(|e| relay_core::store::StoreError::Backend(e.to_string()))?;
                Relay::with_blobs(config.clone(), Box::new(store), Box::new(blobs), seed)
            })
        }
        (None, false) => bail!("either --data DIR or --memory is required"),
    };
    server = server.with_push(push);
    server = server.with_limits(sim::net::ServeLimits {
        header_read_timeout_ms: args.header_read_timeout_ms,
        max_connections: args.max_connections,
        max_connections_per_addr: args.max_connections_per_addr,
        write_deadline_ms: args.write_deadline_ms,
        outbound_queue_bytes: args.outbound_queue_bytes,
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

/// Push delivery from the flags: each kind with credentials is enabled (the worker warns
/// once about each kind without). TLS to the push services; `http://` only in test mode.
fn push_delivery(args: &Args) -> Result<PushDelivery> {
    let test_mode = args.test_mode;
    let web_push = match &args.vapid_subject {
        None => None,
        Some(subject) => {
            let subject = VapidSubject::parse(subject).context("--vapid-subject")?;
            let key = vapid_key(args)?;
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
    let transport = HttpsTransport::new().context("setting up TLS for push delivery")?;
    let transport = if test_mode {
        transport.allowing_http()
    } else {
        transport
    };
    let config = WorkerConfig {
        web_push,
        fcm,
        apns,
        ..WorkerConfig::default()
    };
    Ok(PushDelivery::over_https(config, transport, os_bytes()?))
}

/// The VAPID key: `--vapid-key FILE`, else DIR/vapid.pem (created on first start), else (with
/// `--memory`) a key for this process only.
fn vapid_key(args: &Args) -> Result<VapidKey> {
    if let Some(path) = &args.vapid_key {
        let key = VapidKey::load(path).context("--vapid-key")?;
        info!(file = %path.display(), "push: VAPID key loaded");
        return Ok(key);
    }
    let mut rng = ChaCha20Rng::from_seed(os_bytes()?);
    match &args.data {
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

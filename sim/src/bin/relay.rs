//! `relay`: the SecureChat relay server on real sockets.
//!
//! ```text
//! relay --data ./relay-data                      # durable: ./relay-data/relay.sqlite3 + blobs/
//! relay --memory --listen 127.0.0.1:9000         # ephemeral
//! RELAY_PAYMENT_WEBHOOK_SECRET=… relay --data d  # accept signed payment webhooks
//! relay --memory --test-mode --pow-difficulty 1  # conformance runs (NEVER in production)
//! ```
//!
//! Stops gracefully on Ctrl-C or SIGTERM: GOAWAY `server_shutdown` to every socket, in-flight
//! requests finish; every acknowledgement was sent after its commit, so nothing is lost.

use std::{net::SocketAddr, path::PathBuf};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use relay_core::{
    Config, FsBlobStore, MemoryBlobStore, Relay,
    config::WebhookSecret,
    store::{MemoryStore, SqliteStore},
};
use sim::{
    net::{Endpoint, Tokio},
    server::{RelayServer, secrets},
};
use tracing::{info, warn};

/// File name of the SQLite store inside `--data`.
const STORE_FILE: &str = "relay.sqlite3";
/// Directory of media blobs inside `--data`.
const BLOB_DIR: &str = "blobs";

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

    /// Push gateway (http://host:port) to which pushes are POSTed unencrypted — for the
    /// push-service stand-in; real Web Push / FCM / APNs delivery is not implemented.
    #[arg(long, value_name = "URL")]
    push_gateway: Option<Endpoint>,

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
    /// (`conformance --relay URL --clock-hook`).
    #[arg(long)]
    test_mode: bool,

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
            secrets::create_private_dir(dir)?;
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
    if let Some(gateway) = args.push_gateway.clone() {
        server = server.with_push_gateway(gateway);
    }
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

fn config(args: &Args) -> Result<Config> {
    let mut config = Config {
        pow_difficulty: args.pow_difficulty,
        jwt_ttl_ms: args.jwt_ttl_secs.saturating_mul(1000),
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

fn read_catalog(path: &PathBuf) -> Result<Vec<wire::AliasId>> {
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

/// The default seed: the binary's one read of OS randomness (the library never does this:
/// the simulator passes its own seed).
fn os_seed() -> Result<u64> {
    getrandom::u64().map_err(|e| anyhow::anyhow!("reading OS randomness for the seed: {e}"))
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

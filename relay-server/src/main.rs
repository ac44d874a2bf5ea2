//! `relay`: the SecureChat relay server on real sockets.
//!
//! ```text
//! relay --data ./relay-data                      # durable: ./relay-data/relay.sqlite3 + blobs/
//! relay --memory --listen 127.0.0.1:9000         # ephemeral
//! RELAY_PAYMENT_WEBHOOK_SECRET_FILE=/etc/relay/pay.secret relay --data d   # signed webhooks
//! relay --config /etc/relay/relay.toml           # settings from a file (flags and RELAY_* win)
//! relay --config /etc/relay/relay.toml --check-config   # print and check, secrets redacted
//! relay --data d --metrics-listen 127.0.0.1:9464 --log-format json
//! relay backup --data d --out /backups/relay.sqlite3    # while the relay runs
//! relay restore --from /backups/relay.sqlite3 --data d2
//! relay --memory --test-mode --pow-difficulty 1  # conformance runs (NEVER in production)
//! DATABASE_URL=postgresql://relay@db/chat RELAY_POSTGRES_PASSWORD_FILE=/run/secrets/pg \
//!   relay --secrets-dir /etc/relay/secrets       # PostgreSQL: run two, one is active
//! relay --postgres URL --secrets-dir S --shards 12 --cluster-node n1 --listen 10.0.0.1:8080
//!                                                # a cluster node: N of them share the shards
//! relay --data d --vapid-subject mailto:ops@example.org          # + Web Push (key: d/vapid.pem)
//! relay --data d --fcm-credentials fcm.json                      # + FCM (Android)
//! relay --data d --apns-key AuthKey.p8 --apns-key-id K --apns-team-id T --apns-topic org.app
//! ```
//!
//! Configuration (`cli`): every flag also from its `RELAY_*` variable and from the TOML file
//! of `--config`, in that order of precedence; `--help` groups them by heading.
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
//! A cluster (README "Running a cluster"): with `--cluster-node NAME` every relay of the
//! database and schema is active for a share of its `--shards`; the nodes prove themselves
//! to each other with `--secrets-dir`'s `cluster.key` (its fingerprint is checked like the
//! other keys'), pass requests and WebSockets on to the node serving their shard, and send
//! each other what crosses between shards.
//!
//! Stops gracefully on Ctrl-C or SIGTERM (the drain): no new connections, the inputs already
//! received committed and answered, GOAWAY `server_shutdown` and close 1001 to every socket,
//! exit within `--drain-deadline-ms`; every acknowledgement was sent after its commit, so
//! nothing is lost. On PostgreSQL the active relay then resigns: a standby takes over at once.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
};

use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use relay_core::{
    Config, FsBlobStore, MemoryBlobStore, Relay,
    config::WebhookSecret,
    store::{MemoryStore, SqliteStore, WriteGroup},
};
use relay_pg::{CampaignOptions, JoinOptions, KeyClaim, KeyFingerprint, KeyKind, PgConfig};
use relay_push::VapidSubject;
use relay_server::{
    CommitMode, ReadMode, RelayServer,
    logging::LogFormat,
    metrics::Metrics,
    peers::ClusterKey,
    postgres::{BlobOpener, PgLeadership, PgMembership},
    secrets,
};

mod cli;
mod ops;
mod push_setup;

/// jemalloc, configured when it is built (`.cargo/config.toml`: background purging, dirty pages
/// returned after 1 s): with glibc's allocator the process kept the high-water mark of a flood
/// (~4 MB per attacking account, ~400 MB after 100 accounts' backlogs were delivered) although
/// the relay held ~11 MB; with it RSS follows what the relay holds. `MALLOC_CONF` overrides the
/// settings at run time.
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use cli::{Args, Command, LogFormatArg};
use push_setup::{push_delivery, push_service_url};
use seam::net::{Network, Tokio};
use tracing::{info, warn};

/// File name of the SQLite store inside `--data`.
const STORE_FILE: &str = "relay.sqlite3";
/// Directory of media blobs inside `--data`.
const BLOB_DIR: &str = "blobs";

fn main() -> ExitCode {
    match run_main() {
        Ok(code) => code,
        Err(error) => {
            // One line, with its causes: what went wrong and what to do about it.
            eprintln!("relay: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_main() -> Result<ExitCode> {
    let parsed = cli::parse()?;
    match parsed.cli.command {
        Some(Command::Backup { data, out }) => return ops::backup(&data, &out),
        Some(Command::Restore { from, data }) => return ops::restore(&from, &data),
        None => {}
    }
    let args = parsed.cli.args;
    if args.check_config {
        print!("{}", parsed.origin.render());
        check(&args)?;
        println!("\n# configuration OK: the relay would start with it");
        return Ok(ExitCode::SUCCESS);
    }
    let format = match args.log_format {
        LogFormatArg::Text => LogFormat::Text {
            color: relay_server::logging::stdout_color(),
        },
        LogFormatArg::Json => LogFormat::Json,
    };
    let subscriber =
        relay_server::logging::subscriber_with_format(&args.log, std::io::stdout, format)
            .context("invalid --log filter")?;
    // Also forwards the `log` records of libraries that use it (tungstenite) through the filter.
    tracing_subscriber::util::SubscriberInitExt::try_init(subscriber)
        .context("installing the logger")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run(args))?;
    Ok(ExitCode::SUCCESS)
}

/// `--check-config`: every check a start makes before it touches the store or a key file.
fn check(args: &Args) -> Result<()> {
    config(args)?;
    let store = store_choice(args)?;
    secrets_dir(args, &store)?;
    metrics_addr(args)?;
    if let Some(url) = &args.fcm_endpoint {
        push_service_url("--fcm-endpoint", url, args.test_mode)?;
    }
    if let Some(url) = &args.apns_endpoint {
        push_service_url("--apns-endpoint", url, args.test_mode)?;
    }
    if let Some(subject) = &args.vapid_subject {
        VapidSubject::parse(subject).context("--vapid-subject")?;
    }
    Ok(())
}

/// `--metrics-listen`, refused on the public port, and anywhere but loopback without
/// `--metrics-public`.
fn metrics_addr(args: &Args) -> Result<Option<SocketAddr>> {
    let Some(addr) = args.metrics_listen else {
        return Ok(None);
    };
    if !addr.ip().is_loopback() && !args.metrics_public {
        bail!(
            "--metrics-listen {addr} is not a loopback address: the metrics show how many use              the relay and how; serve them on 127.0.0.1 or [::1], or pass --metrics-public              (RELAY_METRICS_PUBLIC=true) when only your scraper reaches that address"
        );
    }
    let overlaps = addr.port() == args.listen.port()
        && (addr.ip() == args.listen.ip()
            || addr.ip().is_unspecified()
            || args.listen.ip().is_unspecified());
    if overlaps && addr.port() != 0 {
        bail!(
            "--metrics-listen {addr} is the public port (--listen {}): give the metrics a port of \
             their own, on a private address",
            args.listen
        );
    }
    Ok(Some(addr))
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
/// `--shards` above 1 on PostgreSQL is a cluster's (`--cluster-node`), which needs PostgreSQL.
fn check_shards(args: &Args, store: &StoreChoice) -> Result<()> {
    let postgres = matches!(store, StoreChoice::Postgres(_));
    if args.shards > 1 && postgres && args.cluster_node.is_none() {
        bail!(
            "--shards {} with --postgres: a relay that campaigns on PostgreSQL runs one shard \
             (sharding with --memory or --data, or a cluster with --cluster-node NAME)",
            args.shards
        );
    }
    if args.cluster_node.is_some() && !postgres {
        bail!("--cluster-node needs a PostgreSQL store (--postgres URL, or DATABASE_URL)");
    }
    Ok(())
}

/// `--trusted-proxy`: the load balancers whose `X-Forwarded-For` names the client.
fn with_proxies(server: RelayServer, args: &Args) -> RelayServer {
    if args.trusted_proxies.is_empty() {
        return server;
    }
    info!(proxies = ?args.trusted_proxies, "X-Forwarded-For is believed from these addresses");
    server.with_trusted_proxies(args.trusted_proxies.iter().copied().collect())
}

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
    check_shards(&args, &store)?;
    let secrets = secrets_dir(&args, &store)?;
    let metrics_addr = metrics_addr(&args)?;
    // Bind before anything is created: a relay started on a busy port leaves no key, data
    // directory or database schema behind.
    let (listener, metrics_listener) = bind(args.listen, metrics_addr).await?;
    if let Some(dir) = &secrets {
        secrets::create_private_dir(dir)?;
    }
    let metrics = metrics_addr.map(|_| Metrics::new());
    let (push, vapid_fingerprint) = push_delivery(&args, secrets.as_deref())?;
    // The subscription check and the transport share one destination policy.
    push.configure(&mut config);
    let (commit_mode, read_mode) = store_modes(&args, &store);
    // Media parts of a relay without a blob directory go to a spool directory of this
    // process's (removed when it exits), never its memory.
    let spool = media_spool(&args, &store)?;
    let spool_dir = spool.as_ref().map(|d| d.path().to_path_buf());
    warn_if_share_below_a_recipient(&config, args.shards);
    let mut server = match store {
        StoreChoice::Memory => {
            memory_server(config, seed, metrics.clone(), spool_dir, args.shards)?
        }
        StoreChoice::Sqlite(dir) => sqlite_server(&args, config, &dir, seed, metrics.clone())?,
        StoreChoice::Postgres(database) => postgres_server(
            &args,
            config,
            *database,
            secrets.as_deref(),
            vapid_fingerprint,
            seed,
            metrics.as_ref(),
            spool_dir,
        )?,
    };
    server = server
        .with_push(push)
        .with_commit_mode(commit_mode)
        .with_read_mode(read_mode);
    server = with_proxies(server.with_limits(serve_limits(&args)?), &args);
    if args.core_threads {
        server = server.with_core_threads();
    }
    if args.test_mode {
        warn!("--test-mode: anyone can move this relay's clock; never use it in production");
        server = server.with_test_mode();
    }
    server = server.with_drain_deadline(args.drain_deadline_ms);
    if let (Some(addr), Some(listener), Some(metrics)) = (metrics_addr, metrics_listener, metrics) {
        server = with_metrics_listener(server, addr, listener, metrics);
    }
    info!(listen = %args.listen, "starting relay");
    server
        .serve::<Tokio>(listener, shutdown_signal())
        .await
        .with_context(|| format!("serving on {}", args.listen))
}

/// How `store` commits and reads: a durable store's commit waits on the disk or the database,
/// so it is pipelined on a thread of its own (the core task handles the next batch meanwhile);
/// reads of SQLite wait on the disk and of PostgreSQL on a round trip, so they run on threads of
/// their own and the core task never waits for one. The memory store's commits and reads cost
/// less than a hand-off would.
fn store_modes(args: &Args, store: &StoreChoice) -> (CommitMode, ReadMode) {
    let commit_mode = match store {
        StoreChoice::Memory => CommitMode::Inline,
        StoreChoice::Sqlite(_) | StoreChoice::Postgres(_) => CommitMode::Thread,
    };
    let read_mode = match store {
        StoreChoice::Sqlite(_) | StoreChoice::Postgres(_) if args.read_threads > 0 => {
            ReadMode::Threads(args.read_threads)
        }
        _ => ReadMode::Core,
    };
    (commit_mode, read_mode)
}

/// The public listener on `listen` and, with `--metrics-listen`, the metrics listener.
async fn bind(
    listen: SocketAddr,
    metrics: Option<SocketAddr>,
) -> Result<(
    <Tokio as Network>::Listener,
    Option<<Tokio as Network>::Listener>,
)> {
    let listener = Tokio::bind(listen)
        .await
        .with_context(|| format!("--listen {listen}"))?;
    let metrics = match metrics {
        Some(addr) => Some(
            Tokio::bind(addr)
                .await
                .with_context(|| format!("--metrics-listen {addr}"))?,
        ),
        None => None,
    };
    Ok((listener, metrics))
}

/// The spool directory of a relay that keeps no blob directory (`--memory`, or `--postgres`
/// without `--blob-dir`): a fresh private directory (0700) under `--spool-dir` (else the
/// system's temporary directory), removed when the process exits. Media parts then cost disk,
/// never the process's memory. `None` when the relay has a blob directory.
fn media_spool(args: &Args, store: &StoreChoice) -> Result<Option<tempfile::TempDir>> {
    let needed = match store {
        StoreChoice::Memory => true,
        StoreChoice::Postgres(_) => args.blob_dir.is_none(),
        StoreChoice::Sqlite(_) => false,
    };
    if !needed {
        return Ok(None);
    }
    let parent = args.spool_dir.clone().unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::Builder::new()
        .prefix("relay-media-spool-")
        .tempdir_in(&parent)
        .with_context(|| format!("creating the media spool in {}", parent.display()))?;
    info!(dir = %dir.path().display(), "media parts are spooled here (removed at exit)");
    Ok(Some(dir))
}

/// The blob store of a spool directory (see [`media_spool`]); memory only when there is none
/// (never for the binary: `media_spool` makes one whenever the store has no blob directory).
fn spool_blobs(
    spool: Option<&Path>,
) -> Result<Box<dyn relay_core::BlobStore>, relay_core::store::StoreError> {
    match spool {
        Some(dir) => FsBlobStore::open(dir)
            .map(|b| Box::new(b) as Box<dyn relay_core::BlobStore>)
            .map_err(|e| relay_core::store::StoreError::Backend(e.to_string())),
        None => Ok(Box::new(MemoryBlobStore::new())),
    }
}

/// Warns when a shard's share of the relay's total of queued bytes is below what one recipient
/// may have queued: each shard decides at most its share.
fn warn_if_share_below_a_recipient(config: &Config, shards: u16) {
    let share = relay_core::handoff::total_share(config.max_offline_queue_bytes_total, shards);
    if shards > 1 && share < config.max_offline_queue_bytes_per_recipient {
        warn!(
            shards,
            share,
            per_recipient = config.max_offline_queue_bytes_per_recipient,
            "each shard decides at most its share of --max-queued-bytes: one shard's share is \
             below what one recipient may have queued, so a recipient may be refused \
             RELAY_QUEUE_FULL before its own bound"
        );
    }
}

/// `--memory`: a relay on a memory store with media parts in a spool directory, with a JWT
/// signing key of its own drawn from the OS (nothing survives a restart).
fn memory_server(
    mut config: Config,
    seed: u64,
    metrics: Option<Metrics>,
    spool: Option<PathBuf>,
    shards: u16,
) -> Result<RelayServer> {
    warn!("--memory: nothing survives a restart");
    // A fresh random key per process (a seed-derived one could be recomputed).
    let mut key = [0u8; 32];
    getrandom::fill(&mut key)
        .map_err(|e| anyhow::anyhow!("reading OS randomness for the JWT key: {e}"))?;
    config.jwt_signing_key = Some(relay_core::JwtSigningKey(key));
    let store = MemoryStore::new();
    Ok(RelayServer::sharded(shards, move |place| {
        let config = Config {
            shard: place,
            ..config.clone()
        };
        Relay::with_blobs(
            config,
            metered(metrics.as_ref(), store.clone()),
            spool_blobs(spool.as_deref())?,
            seed,
        )
    }))
}

/// `--data DIR`: a relay on DIR's SQLite store and blob directory, with DIR's JWT signing key
/// (moved once into its key file from the store, where an older version kept it).
fn sqlite_server(
    args: &Args,
    mut config: Config,
    dir: &Path,
    seed: u64,
    metrics: Option<Metrics>,
) -> Result<RelayServer> {
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
    config.jwt_signing_key = Some(jwt_key(args, dir, legacy)?);
    info!(store = %store_path.display(), shards = args.shards, "durable store");
    // The cores commit to the one file together (group commit).
    let group = WriteGroup::default();
    if let Some(metrics) = &metrics {
        metrics.attach_write_group(group.clone());
    }
    Ok(RelayServer::sharded(args.shards, move |place| {
        let store = SqliteStore::open_in_group(&store_path, group.clone())?;
        let blobs = FsBlobStore::open(&blob_dir)
            .map_err(|e| relay_core::store::StoreError::Backend(e.to_string()))?;
        let store = metered(metrics.as_ref(), store);
        let config = Config {
            shard: place,
            ..config.clone()
        };
        Relay::with_blobs(config, store, Box::new(blobs), seed)
    }))
}

/// `--postgres`: a relay that campaigns on the database, with the JWT signing key of the
/// secrets directory `dir`; its keys' fingerprints (the VAPID key's too, with Web Push) are
/// claimed when it leads (see [`key_claims`]).
#[allow(
    clippy::too_many_arguments,
    reason = "what run() resolved before the store (keys, spool, metrics), each used once here"
)]
fn postgres_server(
    args: &Args,
    mut config: Config,
    database: PgConfig,
    dir: Option<&Path>,
    vapid_fingerprint: Option<KeyFingerprint>,
    seed: u64,
    metrics: Option<&Metrics>,
    spool: Option<PathBuf>,
) -> Result<RelayServer> {
    let dir = dir.context("no secrets directory")?;
    let existed = dir.join(secrets::JWT_KEY_FILE).exists();
    let jwt = jwt_key(args, dir, None)?;
    let jwt_fingerprint = secrets::jwt_key_fingerprint(&jwt);
    config.jwt_signing_key = Some(jwt);
    if !existed {
        warn!(
            file = %dir.join(secrets::JWT_KEY_FILE).display(),
            "new JWT signing key: copy it to every relay of this database, or tokens \
             issued here are refused after a failover"
        );
    }
    let blobs = blob_opener(args, spool);
    let keys = key_claims(args, jwt_fingerprint, vapid_fingerprint);
    info!(
        jwt = %jwt_fingerprint,
        vapid = %vapid_fingerprint.map_or_else(|| "none (no Web Push)".to_owned(), |f| f.to_string()),
        "key fingerprints (every relay of the database must show the same)"
    );
    if let Some(node) = &args.cluster_node {
        return cluster_node(
            args,
            node,
            (database, dir, keys),
            (config, seed, blobs),
            metrics,
        );
    }
    let options = CampaignOptions {
        holder: format!("relay pid {} listen {}", std::process::id(), args.listen),
        keys,
        ..CampaignOptions::default()
    };
    info!(database = %database, "PostgreSQL store: standing by until this relay leads");
    let leadership = PgLeadership::new(database, options, config, seed, blobs);
    Ok(RelayServer::campaigning(match metrics {
        Some(metrics) => leadership.with_metrics(metrics.clone()),
        None => leadership,
    }))
}

/// `--cluster-node NAME`: node NAME of the cluster on `database`, with the keys `keys` claims
/// and the cluster key of the secrets directory `dir` (claimed with them when it joins).
fn cluster_node(
    args: &Args,
    node: &str,
    (database, dir, mut keys): (PgConfig, &Path, BTreeMap<KeyKind, KeyClaim>),
    (config, seed, blobs): (Config, u64, BlobOpener),
    metrics: Option<&Metrics>,
) -> Result<RelayServer> {
    let address = cluster_address(args)?;
    let existed = dir.join(secrets::CLUSTER_KEY_FILE).exists();
    let (key, fingerprint) = secrets::load_or_create_cluster_key(dir)?;
    if !existed {
        warn!(
            file = %dir.join(secrets::CLUSTER_KEY_FILE).display(),
            "new cluster key: copy it to every node of this cluster, or the others refuse \
             this node when it joins"
        );
    }
    keys.insert(KeyKind::Cluster, KeyClaim::new(fingerprint));
    let options = JoinOptions {
        address: address.clone(),
        keys,
        ..JoinOptions::new(node, args.shards)
    };
    options.validate()?;
    info!(node, %address, shards = args.shards, cluster_key = %fingerprint, database = %database, "cluster node: joining");
    let membership = PgMembership::new(database, options, config, seed, blobs);
    let membership = match metrics {
        Some(metrics) => membership.with_metrics(metrics.clone()),
        None => membership,
    };
    Ok(RelayServer::clustered(membership).with_cluster_key(ClusterKey::new(*key)))
}

/// The address the other nodes reach this one at: `--cluster-address`, else `--listen` when
/// it names an address (not 0.0.0.0 or ::).
fn cluster_address(args: &Args) -> Result<String> {
    match &args.cluster_address {
        Some(address) => {
            seam::net::Endpoint::parse(&format!("http://{address}"))
                .with_context(|| format!("--cluster-address {address} is not HOST:PORT"))?;
            Ok(address.clone())
        }
        None if args.listen.ip().is_unspecified() => bail!(
            "--listen {} names no address the other nodes can reach: give --cluster-address \
             HOST:PORT",
            args.listen
        ),
        None => Ok(args.listen.to_string()),
    }
}

/// Where a PostgreSQL relay keeps media parts: `--blob-dir`, else this process's spool
/// directory (lost at a failover or restart, and said so).
fn blob_opener(args: &Args, spool: Option<PathBuf>) -> BlobOpener {
    match &args.blob_dir {
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
                "--postgres without --blob-dir: media parts are spooled to a directory of \
                 this process's and lost at a failover or restart"
            );
            std::sync::Arc::new(move || spool_blobs(spool.as_deref()))
        }
    }
}

/// The keys a PostgreSQL relay claims: the JWT signing key's fingerprint, and the VAPID key's
/// when Web Push is on; each replacing the database's with its `--rotate-*-key` flag.
/// Checked against (or recorded as) the database's when this relay leads.
fn key_claims(
    args: &Args,
    jwt_fingerprint: KeyFingerprint,
    vapid_fingerprint: Option<KeyFingerprint>,
) -> BTreeMap<KeyKind, KeyClaim> {
    let claim = |fingerprint, rotate| {
        if rotate {
            KeyClaim::replacing(fingerprint)
        } else {
            KeyClaim::new(fingerprint)
        }
    };
    let mut keys = BTreeMap::from([(KeyKind::Jwt, claim(jwt_fingerprint, args.rotate_jwt_key))]);
    if let Some(fingerprint) = vapid_fingerprint {
        keys.insert(KeyKind::Vapid, claim(fingerprint, args.rotate_vapid_key));
    }
    keys
}

/// The connection limits from the flags.
fn serve_limits(args: &Args) -> Result<seam::net::ServeLimits> {
    Ok(seam::net::ServeLimits {
        header_read_timeout_ms: args.header_read_timeout_ms,
        max_connections: args.max_connections,
        max_connections_per_addr: args.max_connections_per_addr,
        prefixes: seam::net::NetworkPrefixes::new(args.ipv4_prefix, args.ipv6_prefix)?,
        write_deadline_ms: args.write_deadline_ms,
        ws_ping_interval_ms: args.ws_ping_interval_ms,
        outbound_queue_bytes: args.outbound_queue_bytes,
        body_read_timeout_ms: args.body_read_timeout_ms,
        body_min_bytes_per_s: args.body_min_bytes_per_s,
    })
}

/// Has `server` count into `metrics` and serves them on `listener` (bound to
/// `--metrics-listen` `addr`) on a task of their own.
fn with_metrics_listener(
    server: RelayServer,
    addr: SocketAddr,
    listener: <Tokio as Network>::Listener,
    metrics: Metrics,
) -> RelayServer {
    info!(%addr, path = relay_server::metrics::METRICS_PATH, "metrics listening");
    let server = server.with_metrics(metrics.clone());
    tokio::spawn(async move {
        let served = relay_server::metrics::serve_metrics::<Tokio>(
            listener,
            metrics,
            std::future::pending(),
        );
        if let Err(error) = served.await {
            warn!(%error, "the metrics listener failed");
        }
    });
    server
}

/// `store`, timed and counted when metrics are on.
fn metered(
    metrics: Option<&Metrics>,
    store: impl relay_core::store::Store + 'static,
) -> Box<dyn relay_core::store::Store> {
    match metrics {
        Some(metrics) => Box::new(metrics.meter(store)),
        None => Box::new(store),
    }
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
        tombstone_cache_bytes: args.tombstone_cache_bytes,
        queue_cache_bytes: args.queue_cache_bytes,
        account_cache_bytes: args.account_cache_bytes,
        conversation_cache_bytes: args.conversation_cache_bytes,
        contact_cache_bytes: args.contact_cache_bytes,
        ..Config::default()
    };
    if args.pow_difficulty > relay_core::limits::MAX_POW_DIFFICULTY {
        bail!(
            "--pow-difficulty must be at most {}",
            relay_core::limits::MAX_POW_DIFFICULTY
        );
    }
    let secret = match (
        &args.payment_webhook_secret,
        &args.payment_webhook_secret_file,
    ) {
        (_, Some(file)) => {
            let text = private_files::read_private(file)
                .with_context(|| format!("--payment-webhook-secret-file {}", file.display()))?;
            let secret = text.trim();
            if secret.is_empty() {
                bail!(
                    "--payment-webhook-secret-file {}: the file is empty (put the secret in it)",
                    file.display()
                );
            }
            Some(secret.as_bytes().to_vec())
        }
        (Some(secret), None) if !secret.is_empty() => Some(secret.as_bytes().to_vec()),
        _ => None,
    };
    match secret {
        Some(secret) => config.payment_webhook_secret = WebhookSecret(secret),
        None => warn!("no payment webhook secret: every payment webhook will be refused"),
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
pub(crate) fn os_bytes() -> Result<[u8; 32]> {
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

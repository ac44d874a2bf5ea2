//! The `relay` binary's command line: every flag, its environment variable and its heading;
//! the optional configuration file; `--check-config`.
//!
//! * **Three sources**, in this order of precedence: a flag, its environment variable
//!   (`RELAY_` + the flag's name in capitals, `--max-queued-bytes` → `RELAY_MAX_QUEUED_BYTES`;
//!   `--help` shows each), a key of the TOML file named by `--config FILE` (the flag's name
//!   without the dashes: `max-queued-bytes = 1073741824`), then the built-in default. A
//!   file key whose flag conflicts with one given as a flag or in the environment is left out
//!   (`--memory` on the command line wins over `data = …` in the file).
//! * **The file is checked like the command line**: an unknown key, a value of the wrong type
//!   or one the flag refuses is an error naming the file, the line or the key, and the fix.
//!   Secrets are never values in it (`payment-webhook-secret-file`, not the secret).
//! * **`--check-config`** prints the effective configuration as TOML (each value with where it
//!   came from; secrets redacted), checks it as a start would, and exits.
//!
//! The flags stay in one `clap` struct (its doc comments are each flag's `--help` text), so
//! that one definition gives `--help`, the environment variables and the configuration file's
//! keys; how the three sources are layered and reported is `layers`.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

mod layers;

pub(crate) use layers::parse;
#[cfg(test)]
use layers::{Parsed, parse_from, redact_database_url};

/// Help headings, in the order `--help` shows them.
const LISTEN: &str = "Listen";
const STORE: &str = "Store";
const CLUSTER: &str = "Cluster and load balancer";
const SECRETS: &str = "Secrets";
const PUSH: &str = "Push";
const PAYMENTS: &str = "Payments";
const LIMITS: &str = "Limits";
const OPERATIONS: &str = "Logs, metrics and configuration";
const TEST_ONLY: &str = "Test only (never in production)";

/// Keys a configuration file may not hold, and what to use instead.
const NOT_IN_FILE: &[(&str, &str)] = &[
    (
        "payment-webhook-secret",
        "a secret is never a value in the configuration file: name a file holding it with \
         payment-webhook-secret-file (mode 0600), or set RELAY_PAYMENT_WEBHOOK_SECRET",
    ),
    ("config", "the configuration file cannot name another one"),
    (
        "check-config",
        "a command, not a setting: pass --check-config",
    ),
];

/// Flags whose values are secrets: `--check-config` never prints them.
const SECRET_FLAGS: &[&str] = &["payment-webhook-secret"];

/// The SecureChat relay: HTTP JSON API under /api/v1 and WebSocket frames on /ws, in the
/// reference clients' wire format.
///
/// Every flag can also be set from the environment variable its help names, or from the
/// TOML file given with --config (keys: the flag names without the dashes). A flag beats
/// its variable, which beats the file. Secrets come from files or the environment, never
/// from the command line in production (other local users can read it).
#[derive(Parser, Debug)]
#[command(
    name = "relay",
    version,
    args_conflicts_with_subcommands = true,
    after_help = "Backups: `relay backup --data DIR --out FILE` (while the relay runs) and \
                  `relay restore --from FILE --data DIR`; see `relay backup --help`."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    #[command(flatten)]
    pub(crate) args: Args,
}

/// What else the binary does besides serving.
#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Copies the SQLite store of a data directory to a new file, while a relay may be running
    /// on it (SQLite's online backup API): the copy holds every message acknowledged before
    /// the backup began. Keys (DIR/jwt-signing.key, DIR/vapid.pem) and media parts
    /// (DIR/blobs/) are not in it: copy them separately.
    Backup {
        /// The relay's data directory (its --data).
        #[arg(long, value_name = "DIR", env = "RELAY_DATA")]
        data: PathBuf,
        /// The backup file to write (mode 0600); must not exist yet.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Restores a backup into a data directory that has no store yet (created mode 0700 if
    /// missing), then start the relay with --data DIR. Copy the key files back beside it
    /// first, or the relay makes new ones (users log in again; browsers subscribe again).
    Restore {
        /// The backup file (`relay backup --out`).
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
        /// The data directory to restore into.
        #[arg(long, value_name = "DIR", env = "RELAY_DATA")]
        data: PathBuf,
    },
}

/// How log lines are written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogFormatArg {
    /// Lines for people (coloured on a terminal unless NO_COLOR is set).
    Text,
    /// One JSON object per line: timestamp, level, target, message, fields, span.
    Json,
}

/// The serving flags.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    // ------------------------------------------------------------------ listen
    /// Address of the public API and WebSocket (loopback by default; 0.0.0.0:PORT to serve
    /// other machines).
    #[arg(long, env = "RELAY_LISTEN", default_value = "127.0.0.1:8080", help_heading = LISTEN)]
    pub(crate) listen: SocketAddr,

    /// On SIGTERM or Ctrl-C the relay stops accepting, commits the inputs it received, sends
    /// every socket GOAWAY and closes it with 1001 (going away), and exits once everything
    /// closed, or after this many milliseconds at most.
    #[arg(long, value_name = "MS", env = "RELAY_DRAIN_DEADLINE_MS",
          default_value_t = relay_server::DRAIN_DEADLINE_MS, help_heading = LISTEN)]
    pub(crate) drain_deadline_ms: u64,

    // ------------------------------------------------------------------ store
    /// Directory of the durable store (created on first run): DIR/relay.sqlite3 and DIR/blobs/,
    /// with the key files DIR/jwt-signing.key (and DIR/vapid.pem). One of --data, --memory,
    /// --postgres (or DATABASE_URL) is required.
    #[arg(long, value_name = "DIR", env = "RELAY_DATA", conflicts_with_all = ["memory", "postgres"],
          help_heading = STORE)]
    pub(crate) data: Option<PathBuf>,

    /// Keep everything in memory (lost when the process stops).
    #[arg(long, env = "RELAY_MEMORY", value_parser = clap::builder::BoolishValueParser::new(),
          conflicts_with = "postgres", help_heading = STORE)]
    pub(crate) memory: bool,

    /// Store everything in this PostgreSQL database (`postgresql://USER@HOST:PORT/DB` or libpq
    /// `key=value` pairs). Without --data, --memory or --postgres, the DATABASE_URL environment
    /// variable is used. Keep the password out of the URL: it comes from the file named by
    /// RELAY_POSTGRES_PASSWORD_FILE, or from PGPASSWORD; it is never logged. Many relays may
    /// use one database: one is active, the others stand by and take over when it dies
    /// (`/readyz` tells which). Needs --secrets-dir.
    #[arg(long, value_name = "URL", env = "RELAY_POSTGRES", hide_env_values = true,
          help_heading = STORE)]
    pub(crate) postgres: Option<String>,

    /// The schema of the relay's tables on PostgreSQL (created on first start). Each schema is
    /// one deployment with its own leadership.
    #[arg(long, value_name = "NAME", env = "RELAY_PG_SCHEMA", default_value = relay_pg::DEFAULT_SCHEMA,
          help_heading = STORE)]
    pub(crate) pg_schema: String,

    /// Directory of media parts on PostgreSQL (every relay of the database must see the same
    /// one, e.g. a shared volume). Without it media parts are spooled to a directory of this
    /// process's (see --spool-dir) and lost at a failover or restart.
    #[arg(long, value_name = "DIR", env = "RELAY_BLOB_DIR", help_heading = STORE)]
    pub(crate) blob_dir: Option<PathBuf>,

    /// Where a relay without a blob directory (--memory, or --postgres without --blob-dir)
    /// spools media parts: a private directory is made in DIR and removed at exit (default:
    /// the system's temporary directory). Media parts never stay in the relay's memory.
    #[arg(long, value_name = "DIR", env = "RELAY_SPOOL_DIR", help_heading = STORE)]
    pub(crate) spool_dir: Option<PathBuf>,

    /// Threads that read what the relay does not hold in memory (an account, a conversation,
    /// a queue, a sender's message ids) for a frame that needs it, so that no read ever holds
    /// up the task that serves everyone: the frame waits for its read, everyone else goes on.
    /// With --data and --postgres (each thread a read-only connection or a database session of
    /// its own, opened at its first read); 0 reads on that task instead (--memory always does).
    #[arg(long, value_name = "N", env = "RELAY_READ_THREADS",
          default_value_t = relay_server::READ_THREADS, help_heading = STORE)]
    pub(crate) read_threads: usize,

    /// Shards of the relay: its accounts are spread over N relay cores (see --core-threads) over the one
    /// store, each the only owner of its shard's state, with what crosses between shards
    /// handed over exactly once (ARCHITECTURE "Running N active relays"). 1 is an unsharded
    /// relay. With --memory and --data, and a cluster's (--cluster-node: the count is the
    /// cluster's, the same on every node); a --postgres relay that is no cluster node runs one.
    #[arg(long, value_name = "N", env = "RELAY_SHARDS", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=1024), help_heading = STORE)]
    pub(crate) shards: u16,

    /// Runs each relay core on a thread of its own with its sockets (thread per core): a
    /// frame read from a socket, its handling and the frames it causes for sockets of the same
    /// shard cross no thread; commits and reads stay on their own threads. `false` runs the
    /// cores as tasks on the shared runtime. A --postgres relay's core is a task either way.
    #[arg(long, value_name = "BOOL", env = "RELAY_CORE_THREADS", default_value_t = true,
          action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new(), help_heading = STORE)]
    pub(crate) core_threads: bool,

    // ------------------------------------------------------------------ cluster
    /// Runs this relay as node NAME of a cluster on the --postgres database and schema
    /// (README "Running a cluster"): the cluster's --shards are spread over its live nodes,
    /// each shard served by one node at a time and moved when a node joins, leaves or dies;
    /// a request or a WebSocket for a shard another node serves is passed on to it, so clients
    /// may reach any node. Every node needs the same --shards and the same
    /// --secrets-dir DIR/cluster.key (created on first start). NAME is unique in the cluster.
    #[arg(long, value_name = "NAME", env = "RELAY_CLUSTER_NODE",
          help_heading = CLUSTER)]
    pub(crate) cluster_node: Option<String>,

    /// The address the other nodes reach this one at (HOST:PORT on the nodes' private
    /// network). Default: --listen, unless it is an unspecified address (0.0.0.0, ::).
    #[arg(long, value_name = "HOST:PORT", env = "RELAY_CLUSTER_ADDRESS",
          requires = "cluster_node", help_heading = CLUSTER)]
    pub(crate) cluster_address: Option<String>,

    /// A load balancer in front of this relay (its IP address; repeat the flag, or separate
    /// them with commas in the variable): for a request or a WebSocket from it, the last
    /// X-Forwarded-For entry is the client's address, which the per-address bounds count
    /// (HAProxy: `option forwardfor`); its own connections are not held to
    /// --max-connections-per-addr. Never an address clients connect from: they could claim
    /// any address.
    #[arg(long = "trusted-proxy", value_name = "IP", env = "RELAY_TRUSTED_PROXY",
          value_delimiter = ',', help_heading = CLUSTER)]
    pub(crate) trusted_proxies: Vec<std::net::IpAddr>,

    // ------------------------------------------------------------------ secrets
    /// Directory of the key files every relay of a PostgreSQL database shares:
    /// DIR/jwt-signing.key (and DIR/vapid.pem with --vapid-subject), created mode 0600 on first
    /// start. Copy the same files to every relay of the database, or tokens issued by one are
    /// refused by the next after a failover. (With --data the keys live in the data
    /// directory.)
    #[arg(long, value_name = "DIR", env = "RELAY_SECRETS_DIR", help_heading = SECRETS)]
    pub(crate) secrets_dir: Option<PathBuf>,

    /// Writes a new JWT signing key to DIR/jwt-signing.key (--data or --secrets-dir) before
    /// starting: every token signed with the old key is refused from then on (users log in
    /// again). On PostgreSQL, this relay records the new key in the database when it leads
    /// (relays still on the old key then refuse to lead): copy the new file to every relay.
    #[arg(long, env = "RELAY_ROTATE_JWT_KEY", value_parser = clap::builder::BoolishValueParser::new(),
          help_heading = SECRETS)]
    pub(crate) rotate_jwt_key: bool,

    // ------------------------------------------------------------------ push
    /// Enables Web Push: the VAPID `sub` contact the push services may use to reach the
    /// operator, `mailto:ADDRESS` or an `https://` URL. The VAPID key is DIR/vapid.pem (created
    /// mode 0600 on first start) or --vapid-key; its public half is served at
    /// GET /api/v1/push/vapid-key. Without it browser subscriptions get no pushes.
    #[arg(long, value_name = "mailto:…|https://…", env = "RELAY_VAPID_SUBJECT", help_heading = PUSH)]
    pub(crate) vapid_subject: Option<String>,

    /// The VAPID private key (P-256; PKCS#8 or SEC1 PEM, or base64url of the 32-byte scalar),
    /// instead of DIR/vapid.pem (--data or --secrets-dir). Must be mode 0600. Needs
    /// --vapid-subject.
    #[arg(long, value_name = "FILE", env = "RELAY_VAPID_KEY", requires = "vapid_subject",
          help_heading = PUSH)]
    pub(crate) vapid_key: Option<PathBuf>,

    /// Writes a new VAPID key to DIR/vapid.pem (--data or --secrets-dir) before starting; with
    /// --vapid-key FILE, FILE (which you replaced) is taken as the new key. Browsers subscribed
    /// under the old key get no pushes until the app subscribes again. On PostgreSQL, this
    /// relay records the new key in the database when it leads: copy it to every relay.
    #[arg(long, env = "RELAY_ROTATE_VAPID_KEY", value_parser = clap::builder::BoolishValueParser::new(),
          requires = "vapid_subject", help_heading = PUSH)]
    pub(crate) rotate_vapid_key: bool,

    /// Enables FCM (Android): the Firebase service-account key file (JSON, mode 0600).
    #[arg(long, value_name = "FILE", env = "RELAY_FCM_CREDENTIALS", help_heading = PUSH)]
    pub(crate) fcm_credentials: Option<PathBuf>,

    /// FCM API base URL (default `https://fcm.googleapis.com`).
    #[arg(long, value_name = "URL", env = "RELAY_FCM_ENDPOINT", requires = "fcm_credentials",
          help_heading = PUSH)]
    pub(crate) fcm_endpoint: Option<String>,

    /// OAuth token URL of the FCM service account (default: the key file's `token_uri`).
    #[arg(long, value_name = "URL", env = "RELAY_FCM_TOKEN_URL", requires = "fcm_credentials",
          help_heading = PUSH)]
    pub(crate) fcm_token_url: Option<String>,

    /// Enables APNs (iOS): the `.p8` token signing key from Apple (mode 0600). Needs
    /// --apns-key-id, --apns-team-id and --apns-topic.
    #[arg(long, value_name = "FILE", env = "RELAY_APNS_KEY",
          requires_all = ["apns_key_id", "apns_team_id", "apns_topic"], help_heading = PUSH)]
    pub(crate) apns_key: Option<PathBuf>,

    /// The APNs key's id (10 characters, Apple developer account).
    #[arg(long, value_name = "ID", env = "RELAY_APNS_KEY_ID", requires = "apns_key",
          help_heading = PUSH)]
    pub(crate) apns_key_id: Option<String>,

    /// The Apple developer team id.
    #[arg(long, value_name = "ID", env = "RELAY_APNS_TEAM_ID", requires = "apns_key",
          help_heading = PUSH)]
    pub(crate) apns_team_id: Option<String>,

    /// The iOS app's bundle id (`apns-topic`).
    #[arg(long, value_name = "BUNDLE_ID", env = "RELAY_APNS_TOPIC", requires = "apns_key",
          help_heading = PUSH)]
    pub(crate) apns_topic: Option<String>,

    /// APNs base URL (default `https://api.push.apple.com`; development builds of the
    /// app: `https://api.sandbox.push.apple.com`).
    #[arg(long, value_name = "URL", env = "RELAY_APNS_ENDPOINT", requires = "apns_key",
          help_heading = PUSH)]
    pub(crate) apns_endpoint: Option<String>,

    /// Web Push services the relay may deliver to (repeatable; in the environment, separated
    /// by commas): a host (`fcm.googleapis.com`) or a `*.`-prefixed suffix
    /// (`*.push.services.mozilla.com`). Without it any public host is allowed. The hosts of
    /// --fcm-endpoint, the FCM token URL and --apns-endpoint are added. Subscriptions to other
    /// hosts get 400 PUSH_ENDPOINT_FORBIDDEN.
    #[arg(long, value_name = "HOST", env = "RELAY_PUSH_ALLOW_HOST", value_delimiter = ',',
          help_heading = PUSH)]
    pub(crate) push_allow_host: Vec<String>,

    /// Lets push go to private, loopback and link-local addresses and local names (a lab
    /// whose push service runs on a private network). Never on a relay that serves the
    /// internet: any account could then make the relay connect into its own network.
    /// --test-mode implies it.
    #[arg(long, env = "RELAY_PUSH_ALLOW_PRIVATE", value_parser = clap::builder::BoolishValueParser::new(),
          help_heading = PUSH)]
    pub(crate) push_allow_private: bool,

    // ------------------------------------------------------------------ payments
    /// Shared secret of the payment processor's webhook signatures (HMAC-SHA256). Set it in
    /// the environment or with --payment-webhook-secret-file: a command line is visible to
    /// every local user. Never logged. Without one, every webhook is refused.
    #[arg(long, env = "RELAY_PAYMENT_WEBHOOK_SECRET", hide_env_values = true,
          conflicts_with = "payment_webhook_secret_file", help_heading = PAYMENTS)]
    pub(crate) payment_webhook_secret: Option<String>,

    /// A file holding the payment webhook secret (mode 0600; surrounding whitespace ignored).
    #[arg(long, value_name = "FILE", env = "RELAY_PAYMENT_WEBHOOK_SECRET_FILE",
          help_heading = PAYMENTS)]
    pub(crate) payment_webhook_secret_file: Option<PathBuf>,

    /// Base URL of the payment processor's hosted invoice page; an order's payment_url is
    /// BASE/{order_id}.
    #[arg(long, value_name = "URL", env = "RELAY_PAYMENT_PAGE_BASE", help_heading = PAYMENTS)]
    pub(crate) payment_page_base: Option<String>,

    /// File listing the vanity aliases for sale, one per line (`#` comments and blank lines
    /// ignored). Default: the built-in catalog.
    #[arg(long, value_name = "FILE", env = "RELAY_VANITY_CATALOG", help_heading = PAYMENTS)]
    pub(crate) vanity_catalog: Option<PathBuf>,

    // ------------------------------------------------------------------ limits
    /// Proof-of-work difficulty for registration, in leading zero hex digits (0 disables).
    #[arg(long, value_name = "N", env = "RELAY_POW_DIFFICULTY",
          default_value_t = relay_core::limits::POW_DIFFICULTY, help_heading = LIMITS)]
    pub(crate) pow_difficulty: u32,

    /// Lifetime of login tokens (JWT), in seconds.
    #[arg(long, value_name = "SECONDS", env = "RELAY_JWT_TTL_SECS",
          default_value_t = relay_core::limits::JWT_TTL_MS / 1000, help_heading = LIMITS)]
    pub(crate) jwt_ttl_secs: u64,

    /// `msg` frames one account may send per minute (more get an error frame RATE_LIMITED).
    #[arg(long, value_name = "N", env = "RELAY_MSGS_PER_MIN_PER_USER",
          default_value_t = relay_core::limits::MAX_MSGS_PER_MIN_PER_USER, help_heading = LIMITS)]
    pub(crate) msgs_per_min_per_user: u32,

    /// Frames of any kind, malformed ones included, one account's connection may send per
    /// minute once its burst is used up; past it the socket is closed (1008).
    #[arg(long, value_name = "N", env = "RELAY_FRAMES_PER_MIN_PER_CONN",
          default_value_t = relay_core::limits::MAX_FRAMES_PER_MIN_PER_CONN, help_heading = LIMITS)]
    pub(crate) frames_per_min_per_conn: u32,

    /// Frames a connection may send at once before the per-minute rate applies.
    #[arg(long, value_name = "N", env = "RELAY_FRAME_BURST_PER_CONN",
          default_value_t = relay_core::limits::MAX_FRAME_BURST_PER_CONN, help_heading = LIMITS)]
    pub(crate) frame_burst_per_conn: u32,

    /// Each request's headers must arrive within this many milliseconds of the connection
    /// opening or of the previous response (slow-header and silent connections are closed; a
    /// WebSocket authenticates in its upgrade request, so this bounds that too).
    #[arg(long, value_name = "MS", env = "RELAY_HEADER_READ_TIMEOUT_MS",
          default_value_t = seam::net::HEADER_READ_TIMEOUT_MS, help_heading = LIMITS)]
    pub(crate) header_read_timeout_ms: u64,

    /// Open connections in total (HTTP and WebSocket); new ones past it are closed at once.
    #[arg(long, value_name = "N", env = "RELAY_MAX_CONNECTIONS",
          default_value_t = seam::net::MAX_CONNECTIONS, help_heading = LIMITS)]
    pub(crate) max_connections: usize,

    /// Open connections from one IP address; new ones past it are closed at once.
    #[arg(long, value_name = "N", env = "RELAY_MAX_CONNECTIONS_PER_ADDR",
          default_value_t = seam::net::MAX_CONNECTIONS_PER_ADDR, help_heading = LIMITS)]
    pub(crate) max_connections_per_addr: usize,

    /// Leading bits of a client's IPv4 address that name its network, the key of every
    /// per-address bound (connections, registrations, proof-of-work challenges,
    /// unauthenticated requests, user lookups): 32 = each address alone, 24 = a /24 is one
    /// client.
    #[arg(long, value_name = "BITS", env = "RELAY_IPV4_PREFIX",
          default_value_t = seam::net::IPV4_PREFIX,
          value_parser = clap::value_parser!(u8).range(8..=32), help_heading = LIMITS)]
    pub(crate) ipv4_prefix: u8,

    /// Leading bits of a client's IPv6 address that name its network (see --ipv4-prefix): 64
    /// by default, as one host or site is given a /64 and may use any address in it.
    #[arg(long, value_name = "BITS", env = "RELAY_IPV6_PREFIX",
          default_value_t = seam::net::IPV6_PREFIX,
          value_parser = clap::value_parser!(u8).range(16..=128), help_heading = LIMITS)]
    pub(crate) ipv6_prefix: u8,

    /// Longest one write to a WebSocket may take; a client that does not read for this long is
    /// disconnected (what it had not acknowledged stays queued for its next sync).
    #[arg(long, value_name = "MS", env = "RELAY_WRITE_DEADLINE_MS",
          default_value_t = seam::net::WRITE_DEADLINE_MS, help_heading = LIMITS)]
    pub(crate) write_deadline_ms: u64,

    /// How often the relay pings every WebSocket of its own accord (whatever the client
    /// sends): keeps NAT bindings open and finds dead peers; a client that answers no ping and
    /// sends nothing within --write-deadline-ms is disconnected.
    #[arg(long, value_name = "MS", env = "RELAY_WS_PING_INTERVAL_MS",
          default_value_t = seam::net::WS_PING_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(1_000..=3_600_000), help_heading = LIMITS)]
    pub(crate) ws_ping_interval_ms: u64,

    /// Bytes of frames waiting to be written to one WebSocket; a client whose queue would
    /// pass this is disconnected (nothing acknowledged is lost: it re-syncs).
    #[arg(long, value_name = "BYTES", env = "RELAY_OUTBOUND_QUEUE_BYTES",
          default_value_t = seam::net::OUTBOUND_QUEUE_BYTES, help_heading = LIMITS)]
    pub(crate) outbound_queue_bytes: usize,

    /// A request body must start arriving within this many milliseconds of its headers; every
    /// byte received adds 1/--body-min-bytes-per-s seconds. Past it: 408 BODY_TIMEOUT and the
    /// connection is closed (slow-body clients).
    #[arg(long, value_name = "MS", env = "RELAY_BODY_READ_TIMEOUT_MS",
          default_value_t = seam::net::BODY_READ_TIMEOUT_MS, help_heading = LIMITS)]
    pub(crate) body_read_timeout_ms: u64,

    /// The minimum average rate of a request body, in bytes per second (see
    /// --body-read-timeout-ms).
    #[arg(long, value_name = "BYTES", env = "RELAY_BODY_MIN_BYTES_PER_S",
          default_value_t = seam::net::BODY_MIN_BYTES_PER_S, help_heading = LIMITS)]
    pub(crate) body_min_bytes_per_s: u64,

    /// Bytes of undelivered messages the relay holds in memory over all recipients; past it
    /// new messages get the error frame RELAY_QUEUE_FULL (nothing acknowledged is dropped).
    /// With --shards N each shard decides at most BYTES / N of it.
    #[arg(long, value_name = "BYTES", env = "RELAY_MAX_QUEUED_BYTES",
          default_value_t = relay_core::limits::MAX_OFFLINE_QUEUE_BYTES_TOTAL, help_heading = LIMITS)]
    pub(crate) max_queued_bytes: u64,

    /// Undelivered messages one recipient may have queued over all its conversations; past it:
    /// error frame RECIPIENT_QUEUE_FULL to the sender.
    #[arg(long, value_name = "N", env = "RELAY_MAX_QUEUED_MSGS_PER_RECIPIENT",
          default_value_t = relay_core::limits::MAX_OFFLINE_QUEUE_PER_RECIPIENT, help_heading = LIMITS)]
    pub(crate) max_queued_msgs_per_recipient: usize,

    /// Bytes one recipient may have queued over all its conversations; past it: error frame
    /// RECIPIENT_QUEUE_FULL to the sender.
    #[arg(long, value_name = "BYTES", env = "RELAY_MAX_QUEUED_BYTES_PER_RECIPIENT",
          default_value_t = relay_core::limits::MAX_OFFLINE_QUEUE_BYTES_PER_RECIPIENT,
          help_heading = LIMITS)]
    pub(crate) max_queued_bytes_per_recipient: u64,

    /// Bytes one sender may have queued for one recipient (its share of the recipient's
    /// queue); past it: error frame QUEUE_FULL.
    #[arg(long, value_name = "BYTES", env = "RELAY_MAX_QUEUED_BYTES_PER_CONVERSATION",
          default_value_t = relay_core::limits::MAX_OFFLINE_QUEUE_BYTES_PER_CONVERSATION,
          help_heading = LIMITS)]
    pub(crate) max_queued_bytes_per_conversation: u64,

    /// Bytes one sender may have queued over all its recipients; past it: error frame
    /// SENDER_QUEUE_FULL.
    #[arg(long, value_name = "BYTES", env = "RELAY_MAX_QUEUED_BYTES_PER_SENDER",
          default_value_t = relay_core::limits::MAX_OFFLINE_QUEUE_BYTES_PER_SENDER,
          help_heading = LIMITS)]
    pub(crate) max_queued_bytes_per_sender: u64,

    /// Estimated memory for the message-id tombstones (which answer a re-sent message with
    /// its first ack) held in memory: whole sets of recently active conversations; the others
    /// are read from the store at their next message. A conversation whose set outweighs an
    /// eighth of it is read one id at a time instead. Bigger: fewer reads; smaller: less memory.
    #[arg(long, value_name = "BYTES", env = "RELAY_TOMBSTONE_CACHE_BYTES",
          default_value_t = relay_core::limits::TOMBSTONE_CACHE_BYTES, help_heading = LIMITS)]
    pub(crate) tombstone_cache_bytes: usize,

    /// Estimated memory for undelivered messages held in memory: whole queues (one recipient,
    /// one conversation) recently used; the others stay in the store and are read when their
    /// recipient syncs or they are next written. Synced recipients' queues are held beyond it.
    #[arg(long, value_name = "BYTES", env = "RELAY_QUEUE_CACHE_BYTES",
          default_value_t = relay_core::limits::QUEUE_CACHE_BYTES, help_heading = LIMITS)]
    pub(crate) queue_cache_bytes: usize,

    /// Estimated memory for accounts held in memory (each with its alias and keys): the
    /// recently used ones; the others stay in the store and are read when next needed (a
    /// login, a token's check, a message to them). Bigger: fewer reads; smaller: less memory.
    #[arg(long, value_name = "BYTES", env = "RELAY_ACCOUNT_CACHE_BYTES",
          default_value_t = relay_core::limits::ACCOUNT_CACHE_BYTES, help_heading = LIMITS)]
    pub(crate) account_cache_bytes: usize,

    /// Estimated memory for conversations (members and seq counters) held in memory: the
    /// recently used ones; the others stay in the store and are read when next needed (a
    /// message or a receipt in them).
    #[arg(long, value_name = "BYTES", env = "RELAY_CONVERSATION_CACHE_BYTES",
          default_value_t = relay_core::limits::CONVERSATION_CACHE_BYTES, help_heading = LIMITS)]
    pub(crate) conversation_cache_bytes: usize,

    /// Estimated memory for users' contact lists (their friendships) held in memory: the
    /// recently used ones; the others stay in the store and are read when next needed (a
    /// friends list, a friend request, a call, a sync).
    #[arg(long, value_name = "BYTES", env = "RELAY_CONTACT_CACHE_BYTES",
          default_value_t = relay_core::limits::CONTACT_CACHE_BYTES, help_heading = LIMITS)]
    pub(crate) contact_cache_bytes: usize,

    // ------------------------------------------------------------------ operations
    /// Log filter (tracing EnvFilter syntax), e.g. `info`, `relay_core=debug,info`. At no
    /// level are payloads, tokens, tickets or client addresses logged: the WebSocket and HTTP
    /// libraries, which would print frames at TRACE, never log below INFO.
    #[arg(long, value_name = "FILTER", env = "RELAY_LOG", default_value = "info",
          help_heading = OPERATIONS)]
    pub(crate) log: String,

    /// Log line format: `text`, or `json` (one object per line: timestamp, level, target,
    /// message, the event's fields, span).
    #[arg(long, value_enum, env = "RELAY_LOG_FORMAT", default_value = "text",
          help_heading = OPERATIONS)]
    pub(crate) log_format: LogFormatArg,

    /// Serves Prometheus metrics (OpenMetrics text) at http://ADDR/metrics, on a listener of
    /// their own; off by default, never on --listen. Keep it on a private address.
    #[arg(long, value_name = "ADDR", env = "RELAY_METRICS_LISTEN", help_heading = OPERATIONS)]
    pub(crate) metrics_listen: Option<SocketAddr>,

    /// Lets --metrics-listen take an address other than loopback (0.0.0.0, a private
    /// network's): the metrics show how many use the relay and how, so without this flag they
    /// are refused anywhere but 127.0.0.1 or ::1. For a container whose metrics port only the
    /// scraper reaches, or a private monitoring network.
    #[arg(long, env = "RELAY_METRICS_PUBLIC", value_parser = clap::builder::BoolishValueParser::new(),
          help_heading = OPERATIONS)]
    pub(crate) metrics_public: bool,

    /// A TOML file of settings: keys are the flag names without the dashes
    /// (`listen = "0.0.0.0:8080"`, `max-queued-bytes = 1073741824`, `memory = true`,
    /// `push-allow-host = ["a", "b"]`). Flags and environment variables override it; unknown
    /// keys are refused.
    #[arg(long, value_name = "FILE", env = "RELAY_CONFIG", help_heading = OPERATIONS)]
    pub(crate) config: Option<PathBuf>,

    /// Prints the effective configuration (TOML, each value's source, secrets redacted),
    /// checks it as a start would, and exits (0: it would start).
    #[arg(long, help_heading = OPERATIONS)]
    pub(crate) check_config: bool,

    // ------------------------------------------------------------------ test only
    /// Serves the unauthenticated `POST /api/v1/test/advance-clock {"ms": N}` -> `{"now_ms": …}`,
    /// which moves the relay's clock forward (expiring holds, orders, tokens, offline
    /// messages) for conformance runs (`conformance --relay URL --clock-hook`); also accepts
    /// `http://` Web Push subscriptions and push service URLs (`conformance --push-probe URL`).
    #[arg(long, env = "RELAY_TEST_MODE", value_parser = clap::builder::BoolishValueParser::new(),
          help_heading = TEST_ONLY)]
    pub(crate) test_mode: bool,

    /// Seed of the relay's RNG (ids, tokens: predictable from it); only with --test-mode.
    /// Default: drawn from the operating system.
    #[arg(long, value_name = "N", env = "RELAY_SEED", requires = "test_mode", help_heading = TEST_ONLY)]
    pub(crate) seed: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(args: &[&str]) -> Result<Parsed> {
        let mut argv = vec![OsString::from("relay")];
        argv.extend(args.iter().map(OsString::from));
        parse_from(argv)
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut f, text.as_bytes()).expect("write");
        f
    }

    #[test]
    fn every_flag_has_its_environment_variable_and_a_heading() {
        let command = Cli::command();
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if matches!(long, "help" | "version" | "check-config") {
                continue;
            }
            let expected = format!("RELAY_{}", long.replace('-', "_").to_uppercase());
            assert_eq!(
                arg.get_env().map(|e| e.to_string_lossy().into_owned()),
                Some(expected),
                "--{long}"
            );
            assert!(arg.get_help_heading().is_some(), "--{long} has no heading");
        }
    }

    #[test]
    fn a_file_sets_what_neither_flag_nor_environment_sets() {
        let f = file(
            "pow-difficulty = 3\nmax-queued-bytes = 1000\nmemory = true\n\
             push-allow-host = [\"a.example\", \"*.b.example\"]\nlog-format = \"json\"\n",
        );
        let path = f.path().to_str().expect("utf-8");
        let parsed = parse_args(&["--config", path, "--pow-difficulty", "1"]).expect("parsed");
        let args = &parsed.cli.args;
        assert_eq!(args.pow_difficulty, 1, "the flag beats the file");
        assert_eq!(args.max_queued_bytes, 1000);
        assert!(args.memory);
        assert_eq!(args.push_allow_host, ["a.example", "*.b.example"]);
        assert_eq!(args.log_format, LogFormatArg::Json);
        let text = parsed.origin.render();
        assert!(text.contains("pow-difficulty = 1  # flag"), "{text}");
        assert!(text.contains("max-queued-bytes = 1000  # file"), "{text}");
        assert!(
            text.contains("listen = \"127.0.0.1:8080\"  # default"),
            "{text}"
        );
    }

    #[test]
    fn a_flag_that_conflicts_with_a_file_key_wins() {
        let f = file("data = \"/var/lib/relay\"\n");
        let path = f.path().to_str().expect("utf-8");
        let parsed = parse_args(&["--config", path, "--memory"]).expect("parsed");
        assert!(parsed.cli.args.memory);
        assert_eq!(parsed.cli.args.data, None);
    }

    #[test]
    fn bad_files_are_refused_with_the_file_and_the_key() {
        for (text, expected) in [
            ("listn = \"x\"\n", "unknown key `listn`"),
            ("pow-difficulty = \"lots\"\n", "key `pow-difficulty`"),
            ("memory = 1\n", "key `memory`: a switch"),
            (
                "payment-webhook-secret = \"s\"\n",
                "payment-webhook-secret-file",
            ),
            ("listen = [\"a\"]\n", "takes one value"),
            ("listen = \n", ":1:"),
        ] {
            let f = file(text);
            let path = f.path().to_str().expect("utf-8");
            let error = parse_args(&["--config", path]).expect_err(text).to_string();
            assert!(error.contains(path), "{text}: {error}");
            assert!(error.contains(expected), "{text}: {error}");
            assert_eq!(error.lines().count(), 1, "{error}");
        }
    }

    #[test]
    fn the_seed_needs_test_mode() {
        let command = Cli::command();
        let refused = command
            .clone()
            .try_get_matches_from(["relay", "--memory", "--seed", "1"])
            .expect_err("refused");
        assert_eq!(
            refused.kind(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
        command
            .try_get_matches_from(["relay", "--memory", "--seed", "1", "--test-mode"])
            .expect("accepted in test mode");
    }

    #[test]
    fn passwords_are_redacted_from_database_urls() {
        assert_eq!(
            redact_database_url(
                "postgresql://relay:hunter2@db:5432/chat?sslmode=disable&password=x"
            ),
            "postgresql://relay:***@db:5432/chat?sslmode=disable&password=***"
        );
        assert_eq!(
            redact_database_url("postgresql://relay@db/chat"),
            "postgresql://relay@db/chat"
        );
        assert_eq!(
            redact_database_url("host=db user=relay password=hunter2"),
            "host=db user=relay password=***"
        );
    }
}

//! A relay for black-box tests: our relay in **test mode** with a configuration a test suite
//! can drive from outside (the conformance suite's embedded default).
//!
//! * low proof-of-work difficulty ([`TEST_POW_DIFFICULTY`]), so registrations are cheap but PoW
//!   is still checked;
//! * a known payment webhook secret ([`TEST_WEBHOOK_SECRET`]): the suite acts as the payment
//!   processor;
//! * TURN configured (`turn:turn.test.invalid:3478`, a known secret), so `mode=relay` answers;
//! * registrations per address per hour raised to [`TEST_REGISTRATIONS_PER_HOUR_PER_ADDR`]
//!   (many accounts from one address); every other limit at the production default (so rate
//!   limits such as 120 messages per user per minute can be checked);
//! * Web Push delivery ([`TestRelayOptions::web_push`], on by default): a VAPID key derived
//!   from the seed ([`TestRelayOptions::vapid_key`], served at `GET /api/v1/push/vapid-key`),
//!   subject [`TEST_VAPID_SUBJECT`], `http://` subscription endpoints accepted and delivered
//!   to over the server's own network (stand-ins on loopback or turmoil), JWTs signed with the
//!   wrapped clock (never the test-mode offset); no FCM or APNs credentials;
//! * memory store and memory blob store;
//! * test mode: `POST /api/v1/test/advance-clock` ([`super::ADVANCE_CLOCK_PATH`]) moves the clock.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use seam::net::Tokio;
//! use relay_server::embedded::{TestRelayOptions, start_test_relay};
//!
//! let relay = start_test_relay::<Tokio>(TestRelayOptions::default()).await?;
//! println!("{} (webhook secret: {} bytes)", relay.base_url, relay.payment_secret.len());
//! relay.stop().await;
//! # Ok(()) }
//! ```
//!
//! Under turmoil, run [`test_relay_server`] inside the relay host with
//! [`TestClock::Sim`].

use std::{fmt, io, net::SocketAddr, sync::Arc};

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use relay_core::{Config, MemoryBlobStore, TurnSecret, config::WebhookSecret, store::MemoryStore};
use relay_push::{VapidKey, VapidSubject, WebPushConfig, WorkerConfig};
use sha2::{Digest as _, Sha256};
use tokio::{sync::oneshot, task::JoinHandle};

use super::{ADVANCE_CLOCK_PATH, PushDelivery, RelayServer};
#[cfg(feature = "turmoil")]
use seam::clock::SimClock;
use seam::clock::{Clock, SystemClock};
use seam::net::Network;

/// The payment webhook secret of a test relay (unless the options change it).
pub const TEST_WEBHOOK_SECRET: &[u8] = b"conformance-embedded-webhook-secret";
/// PoW difficulty of a test relay, in hex nibbles: cheap but not zero.
pub const TEST_POW_DIFFICULTY: u32 = 1;
/// Registrations per client address per hour of a test relay (production: 10).
pub const TEST_REGISTRATIONS_PER_HOUR_PER_ADDR: u32 = 1_000_000;
/// Seed of a test relay's RNG.
pub const TEST_SEED: u64 = 0x00c0_ffee;
/// The TURN URL a test relay offers.
pub const TEST_TURN_URL: &str = "turn:turn.test.invalid:3478";
/// The TURN shared secret of a test relay.
pub const TEST_TURN_SECRET: &str = "conformance-turn-secret";
/// The VAPID `sub` of a test relay's Web Push JWTs.
pub const TEST_VAPID_SUBJECT: &str = "mailto:conformance@test.invalid";

/// 32 bytes for `tag` from the relay's seed (the VAPID key, the push worker's RNG).
fn derive_seed(seed: u64, tag: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"securechat-test-relay/");
    h.update(tag.as_bytes());
    h.update(seed.to_le_bytes());
    h.finalize().into()
}

/// Which clock the test relay's offset clock wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TestClock {
    /// The operating system's clock (loopback).
    #[default]
    System,
    /// turmoil's simulated time ([`SimClock`]); inside a turmoil host (feature `turmoil`).
    #[cfg(feature = "turmoil")]
    Sim,
}

/// How to start a test relay; [`Default`] is the conformance suite's configuration.
#[derive(Clone, PartialEq, Eq)]
pub struct TestRelayOptions {
    /// Where to listen (default `127.0.0.1:0`).
    pub listen: SocketAddr,
    /// Seed of the relay's RNG.
    pub seed: u64,
    /// PoW difficulty in hex nibbles.
    pub pow_difficulty: u32,
    /// The payment webhook's HMAC secret.
    pub payment_webhook_secret: Vec<u8>,
    /// Registrations per client address per hour.
    pub registrations_per_hour_per_addr: u32,
    /// New messages per user per minute (default: the production 120).
    pub msgs_per_min_per_user: u32,
    /// The clock under the test clock.
    pub clock: TestClock,
    /// Delivers Web Push (see the module doc); off: no push delivery, and the VAPID route
    /// serves the placeholder.
    pub web_push: bool,
    /// Relay cores, one per shard ([`RelayServer::sharded`]; default 1).
    pub shards: u16,
    /// Each core on a thread of its own with its sockets
    /// ([`RelayServer::with_core_threads`]; tokio networks only; default off).
    pub core_threads: bool,
}

impl fmt::Debug for TestRelayOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestRelayOptions")
            .field("listen", &self.listen)
            .field("seed", &self.seed)
            .field("pow_difficulty", &self.pow_difficulty)
            .field(
                "registrations_per_hour_per_addr",
                &self.registrations_per_hour_per_addr,
            )
            .field("msgs_per_min_per_user", &self.msgs_per_min_per_user)
            .field("clock", &self.clock)
            .field("web_push", &self.web_push)
            .field("shards", &self.shards)
            .field("core_threads", &self.core_threads)
            .finish_non_exhaustive()
    }
}

impl Default for TestRelayOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            seed: TEST_SEED,
            pow_difficulty: TEST_POW_DIFFICULTY,
            payment_webhook_secret: TEST_WEBHOOK_SECRET.to_vec(),
            registrations_per_hour_per_addr: TEST_REGISTRATIONS_PER_HOUR_PER_ADDR,
            msgs_per_min_per_user: Config::default().msgs_per_min_per_user,
            clock: TestClock::System,
            web_push: true,
            shards: 1,
            core_threads: false,
        }
    }
}

impl TestRelayOptions {
    /// The relay configuration these options describe.
    pub fn config(&self) -> Config {
        let mut config = Config {
            pow_difficulty: self.pow_difficulty,
            registrations_per_hour_per_addr: self.registrations_per_hour_per_addr,
            msgs_per_min_per_user: self.msgs_per_min_per_user,
            payment_webhook_secret: WebhookSecret(self.payment_webhook_secret.clone()),
            turn_urls: vec![TEST_TURN_URL.to_owned()],
            turn_secret: Some(TurnSecret(TEST_TURN_SECRET.to_owned())),
            ..Config::default()
        };
        if let Some(push) = self.push_delivery() {
            push.configure(&mut config);
        }
        config
    }

    /// The relay's VAPID key: derived from [`seed`](Self::seed) (a test relay's only; a real
    /// relay's comes from the operating system's randomness).
    pub fn vapid_key(&self) -> VapidKey {
        VapidKey::generate(&mut ChaCha20Rng::from_seed(derive_seed(self.seed, "vapid")))
    }

    /// The push delivery these options describe (`None` without [`web_push`](Self::web_push)).
    pub fn push_delivery(&self) -> Option<PushDelivery> {
        if !self.web_push {
            return None;
        }
        let subject = VapidSubject::parse(TEST_VAPID_SUBJECT).expect("a valid mailto: subject");
        let web = WebPushConfig {
            allow_http: true,
            ..WebPushConfig::new(self.vapid_key(), subject)
        };
        let config = WorkerConfig {
            web_push: Some(web),
            ..WorkerConfig::default()
        };
        Some(PushDelivery::over_network(
            config,
            derive_seed(self.seed, "push-worker"),
        ))
    }
}

/// The test relay's server (memory stores, test mode), ready to `run` or `serve` on any network.
pub fn test_relay_server(options: &TestRelayOptions) -> RelayServer {
    test_relay_server_with(options, options.config())
}

/// [`test_relay_server`] with `config` instead of [`TestRelayOptions::config`] (e.g. that
/// config with one field changed: a limit, or a bug planted for a harness's detection test).
pub fn test_relay_server_with(options: &TestRelayOptions, config: Config) -> RelayServer {
    let clock: Arc<dyn Clock> = match options.clock {
        TestClock::System => Arc::new(SystemClock),
        #[cfg(feature = "turmoil")]
        TestClock::Sim => Arc::new(SimClock::default()),
    };
    let mut server = RelayServer::in_memory_sharded(
        options.shards,
        config,
        options.seed,
        MemoryStore::new(),
        MemoryBlobStore::new(),
    )
    .with_test_mode();
    if let Some(push) = options.push_delivery() {
        server = server.with_push(push);
    }
    if options.core_threads {
        server = server.with_core_threads();
    }
    server.clock = clock;
    server
}

/// A running test relay; dropping it stops the server (without waiting).
#[derive(Debug)]
pub struct TestRelay {
    /// `http://<addr>` of the relay.
    pub base_url: String,
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The payment webhook secret it verifies signatures with.
    pub payment_secret: Vec<u8>,
    /// The test clock route it serves ([`ADVANCE_CLOCK_PATH`]).
    pub clock_path: &'static str,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl TestRelay {
    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for TestRelay {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds `options.listen` on network `N` and serves a test relay on a spawned task.
pub async fn start_test_relay<N: Network>(options: TestRelayOptions) -> io::Result<TestRelay> {
    let config = options.config();
    start_test_relay_with::<N>(options, config).await
}

/// [`start_test_relay`] with `config` instead of [`TestRelayOptions::config`] (see
/// [`test_relay_server_with`]).
pub async fn start_test_relay_with<N: Network>(
    options: TestRelayOptions,
    config: Config,
) -> io::Result<TestRelay> {
    let listener = N::bind(options.listen).await?;
    let addr = axum::serve::Listener::local_addr(&listener)?;
    let server = test_relay_server_with(&options, config);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve::<N>(listener, async move {
        let _ = stopped.await;
    }));
    Ok(TestRelay {
        base_url: format!("http://{addr}"),
        addr,
        payment_secret: options.payment_webhook_secret,
        clock_path: ADVANCE_CLOCK_PATH,
        stop: Some(stop),
        task: Some(task),
    })
}

//! **Jepsen mode**: a seeded scenario on real sockets (127.0.0.1) against a relay process the
//! harness starts from a command template (`simulate --relay-cmd 'CMD … {listen} … {data}'`),
//! or against a relay someone else runs (`--relay-url URL`, no process faults then).
//!
//! ```text
//!  client-core apps (real tokio, seeded) ──► fault proxy (fault-proxy crate) ──► relay process
//!        ▲ events → history (JSON)              toxics in phases                  kill -9 + restart
//!        └─ oracles over what the clients saw                                     SIGSTOP / SIGCONT
//! ```
//!
//! * **Setup** (no faults): `clients` accounts register, befriend in a ring (client `i` and
//!   `i+1`), learn their conversations, connect.
//! * **Traffic window** (`window_ms`): every client sends to a random friend every 0.2-1.2 s;
//!   the fault plan, drawn from the seed, runs meanwhile: proxy phases (toxics from the
//!   conformance vocabulary, [`fault_proxy::Plan`]: every connection through the proxy is cut
//!   when a phase starts and new ones get the phase's toxics), `kill -9` of the relay and a
//!   restart on the **same data directory**, `SIGSTOP` … `SIGCONT`.
//! * **Heal**: no toxics, the relay running; every acknowledged message must arrive within
//!   [`JEPSEN_LIVENESS_MS`].
//! * **Commerce** (when the relay shares the harness's payment secret): every client buys a
//!   vanity alias from a pool one smaller than the clients (they compete), paid through the payment-processor
//!   stand-in with duplicated and forged webhook copies, abandoned, or "paid" by a forger
//!   (see `commerce`).
//! * **Oracles** over what the clients saw ([`JEPSEN_ORACLES`], and [`COMMERCE_ORACLES`]):
//!   exactly-once delivery, liveness after healing, seq order and gaps, receipts,
//!   non-participant; paid orders confirmed and bindable, unpaid and forged ones never, one
//!   owner per alias. Those that need the relay's internals are reported as not applicable
//!   ([`NOT_APPLICABLE`]).
//!
//! **Not bit-deterministic**, and says so: the seed fixes the scenario, the fault plan and the
//! proxy's per-connection draws, but real scheduling and timing differ from run to run. Every
//! report prints the seed and the plan and can write the full history (JSON) so a failure can
//! be studied.
//!
//! The relay command must serve the HTTP/WebSocket API on `{listen}` and keep its durable
//! store in `{data}` (kill -9 and restart must lose nothing acknowledged). PoW should be off or
//! cheap (`--pow-difficulty 0`). The payment webhook secret is `{payment_secret}` in the
//! command and `RELAY_PAYMENT_WEBHOOK_SECRET` in the process's environment. Push, media and
//! channel trades are not exercised in this mode yet.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use client_core::machine::Event;
use client_core::store::{ClientStore as _, MessageStatus};
use fault_proxy::{FaultProxy, Plan};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde::Serialize;
use serde_json::{Value, json};

use crate::violation::Violation;

mod commerce;
use client::{Client, ClientOptions, EventKind, SharedStore};
pub use commerce::{JEPSEN_COMMERCE_MS, JepsenOrder, Paid};
use seam::clock::{Clock as _, SystemClock};
use seam::net::{Endpoint, Tokio};

/// After healing, every acknowledged message must arrive within this long.
pub const JEPSEN_LIVENESS_MS: u64 = 30_000;
/// The relay must accept connections within this long of its start.
pub const RELAY_START_MS: u64 = 30_000;
/// Setup (registration, friendships) must finish within this long.
pub const JEPSEN_SETUP_MS: u64 = 60_000;
/// Toxics the proxy phases draw from by default: the conformance vocabulary minus those that
/// kill a socket silently (`timeout`, `half_open`: a client notices only after 60 s of
/// silence, longer than a short run) or that cut every connection after a few KiB
/// (`limit_data`, which starves a WebSocket).
pub const DEFAULT_TOXICS: [&str; 5] = ["latency", "bandwidth", "slicer", "reset_peer", "hold"];
/// The oracles this mode runs.
pub const JEPSEN_ORACLES: [&str; 7] = [
    "delivered-exactly-once",
    "liveness",
    "seq-order",
    "seq-gap-free",
    "receipts",
    "non-participant",
    "setup",
];
/// The commerce oracles (run when the relay shares the harness's payment secret).
pub const COMMERCE_ORACLES: [&str; 3] = ["order-confirmed", "forged-refused", "alias-unique"];
/// Oracles of the turmoil simulator that need the relay's internals or stand-ins this mode
/// does not run.
pub const NOT_APPLICABLE: [&str; 11] = [
    "fail-stop (needs the relay's commit history)",
    "store-intact (needs the relay's store)",
    "seq-unique (needs the relay's committed rows)",
    "canary-store (needs the relay's store)",
    "canary-logs (needs the relay's logs)",
    "resources (needs the relay's memory)",
    "receipts-clear (needs the relay's queue)",
    "push (no push stand-ins in this mode)",
    "payment-applied-once / holds-released / channel-single-owner (need the relay's rows; channel trades and quota buys are not run in this mode)",
    "authz / bad-input / stuck-client (no raw clients in this mode)",
    "probes / media (not run in this mode)",
];

/// The relay under test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayTarget {
    /// Started by the harness from a command template with `{listen}` (e.g. `127.0.0.1:40123`)
    /// and `{data}` (a fresh directory kept across restarts); run through `sh -c`.
    Command(String),
    /// Already running at this base URL (`http://127.0.0.1:8080`); no process faults.
    Url(String),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct JepsenConfig {
    /// Seed of the scenario, the plan, the proxy and the clients.
    pub seed: u64,
    /// The relay.
    pub target: RelayTarget,
    /// Accounts (one app each).
    pub clients: usize,
    /// Length of the traffic window.
    pub window_ms: u64,
    /// Toxics the proxy phases may use (names of [`fault_proxy::Toxic::named`]); empty: no
    /// proxy faults.
    pub toxics: Vec<String>,
    /// Kill and pause the relay process (only with [`RelayTarget::Command`]).
    pub process_faults: bool,
    /// The payment webhook secret the relay takes: commerce runs only with one. For a
    /// [`RelayTarget::Command`] it defaults to a throwaway secret the harness passes to the
    /// process; for a [`RelayTarget::Url`] it must be that relay's (none by default).
    pub payment_secret: Option<String>,
}

impl JepsenConfig {
    /// Defaults: 4 clients, a 20 s window, [`DEFAULT_TOXICS`], process faults on, commerce on
    /// for a relay the harness starts.
    pub fn new(seed: u64, target: RelayTarget) -> Self {
        Self {
            seed,
            payment_secret: matches!(target, RelayTarget::Command(_))
                .then(|| commerce::run_secret(seed)),
            target,
            clients: 4,
            window_ms: 20_000,
            toxics: DEFAULT_TOXICS.iter().map(|s| (*s).to_owned()).collect(),
            process_faults: true,
        }
    }
}

/// One fault of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum JepsenFault {
    /// Every connection through the proxy is cut; new ones get these toxics (comma list).
    ProxyPhase {
        /// Toxic names.
        toxics: String,
    },
    /// The proxy forwards without faults again (connections cut once more).
    ProxyClear,
    /// `kill -9` the relay, restart it on the same data directory after `restart_after_ms`.
    Kill {
        /// Downtime.
        restart_after_ms: u64,
    },
    /// `SIGSTOP` the relay, `SIGCONT` after `for_ms`.
    Pause {
        /// Pause length.
        for_ms: u64,
    },
}

/// A fault at a time (ms after traffic starts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JepsenEvent {
    /// When.
    pub at_ms: u64,
    /// What.
    #[serde(flatten)]
    pub fault: JepsenFault,
}

/// The plan of a run, drawn from the seed.
pub fn draw_plan(config: &JepsenConfig) -> Vec<JepsenEvent> {
    let mut rng = ChaCha20Rng::seed_from_u64(config.seed ^ 0x6a65_7073_656e);
    let process = config.process_faults && matches!(config.target, RelayTarget::Command(_));
    let mut out = Vec::new();
    let mut t = 1_000 + rng.next_u64() % 2_000;
    while t + 2_000 < config.window_ms {
        let roll = rng.next_u32() % 4;
        let step = match roll {
            0 | 1 if !config.toxics.is_empty() => {
                let mut names: Vec<&str> = config
                    .toxics
                    .iter()
                    .filter(|_| rng.next_u32().is_multiple_of(2))
                    .map(String::as_str)
                    .collect();
                if names.is_empty() {
                    names.push(&config.toxics[rng.next_u32() as usize % config.toxics.len()]);
                }
                let len = 1_500 + rng.next_u64() % 3_000;
                out.push(JepsenEvent {
                    at_ms: t,
                    fault: JepsenFault::ProxyPhase {
                        toxics: names.join(","),
                    },
                });
                out.push(JepsenEvent {
                    at_ms: t + len,
                    fault: JepsenFault::ProxyClear,
                });
                len
            }
            2 if process => {
                let down = 300 + rng.next_u64() % 1_500;
                out.push(JepsenEvent {
                    at_ms: t,
                    fault: JepsenFault::Kill {
                        restart_after_ms: down,
                    },
                });
                down
            }
            3 if process => {
                let pause = 500 + rng.next_u64() % 2_500;
                out.push(JepsenEvent {
                    at_ms: t,
                    fault: JepsenFault::Pause { for_ms: pause },
                });
                pause
            }
            _ => 0,
        };
        t += step + 1_000 + rng.next_u64() % 2_500;
    }
    out
}

/// One line of the history.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryEntry {
    /// Ms since the run started.
    pub t_ms: u64,
    /// The client, if a client's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<usize>,
    /// What happened.
    pub what: Value,
}

/// The outcome of one Jepsen-mode run.
#[derive(Debug, Clone, Serialize)]
pub struct JepsenReport {
    /// The seed.
    pub seed: u64,
    /// `--relay-cmd` or `--relay-url`, as given.
    pub target: String,
    /// The plan that ran.
    pub plan: Vec<JepsenEvent>,
    /// Oracles run.
    pub oracles: Vec<&'static str>,
    /// Oracles not applicable in this mode, with why.
    pub not_applicable: Vec<&'static str>,
    /// Violations found.
    pub violations: Vec<String>,
    /// Messages acknowledged to their senders.
    pub acked: usize,
    /// Messages received by their recipients.
    pub received: usize,
    /// Relay process restarts (kill -9).
    pub restarts: u32,
    /// Orders placed (empty when commerce did not run).
    pub orders: Vec<JepsenOrder>,
    /// Every event, in order.
    pub history: Vec<HistoryEntry>,
}

impl JepsenReport {
    /// The report as pretty JSON (the history file).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// Shared history, stamped in ms since the run started.
#[derive(Clone)]
struct History {
    start: u64,
    entries: Arc<Mutex<Vec<HistoryEntry>>>,
}

impl History {
    fn new() -> Self {
        Self {
            start: SystemClock.now().get(),
            entries: Arc::default(),
        }
    }
    fn now(&self) -> u64 {
        SystemClock.now().get().saturating_sub(self.start)
    }
    fn push(&self, client: Option<usize>, what: Value) {
        let entry = HistoryEntry {
            t_ms: self.now(),
            client,
            what,
        };
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(entry);
    }
    fn take(&self) -> Vec<HistoryEntry> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A relay process the harness owns.
struct RelayProcess {
    template: String,
    payment_secret: Option<String>,
    listen: SocketAddr,
    data: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
    restarts: u32,
}

impl RelayProcess {
    fn spawn(&mut self) -> anyhow::Result<()> {
        let cmd = self
            .template
            .replace("{listen}", &self.listen.to_string())
            .replace("{data}", &self.data.display().to_string())
            .replace(
                "{payment_secret}",
                self.payment_secret.as_deref().unwrap_or_default(),
            );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        // `exec`: the child is the relay itself, so kill -9 and SIGSTOP reach it.
        let mut command = Command::new("sh");
        if let Some(secret) = &self.payment_secret {
            command.env("RELAY_PAYMENT_WEBHOOK_SECRET", secret);
        }
        let child = command
            .arg("-c")
            .arg(format!("exec {cmd}"))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    fn signal(&self, sig: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .args([sig, &child.id().to_string()])
                .status();
            if let Err(e) = status {
                tracing::warn!(%e, sig, "could not signal the relay");
            }
        }
    }

    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Child::kill is SIGKILL on Unix.
            drop(child.kill());
            drop(child.wait());
        }
        self.paused = false;
    }

    fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        if self.paused {
            self.signal("-CONT");
        }
        self.kill9();
    }
}

async fn wait_listening(addr: SocketAddr, relay: &mut Option<RelayProcess>) -> anyhow::Result<()> {
    for _ in 0..RELAY_START_MS / 20 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if let Some(r) = relay.as_mut()
            && let Some(status) = r.exited()
        {
            let log = std::fs::read_to_string(&r.log).unwrap_or_default();
            anyhow::bail!("the relay exited ({status}):\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::bail!("the relay did not accept connections on {addr} within {RELAY_START_MS} ms")
}

fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?)
}

fn toxics_plan(names: &str) -> Plan {
    Plan::parse(names).unwrap_or_else(|_| Plan::none())
}

/// The proxy, restarted on the same port for each phase.
struct Proxy {
    listen: SocketAddr,
    upstream: SocketAddr,
    seed: u64,
    phase: u64,
    running: Option<FaultProxy>,
}

impl Proxy {
    async fn set(&mut self, plan: Plan) -> anyhow::Result<()> {
        // Dropping the running proxy cuts every connection through it.
        self.running = None;
        self.phase += 1;
        let seed = self.seed.wrapping_mul(1_000).wrapping_add(self.phase);
        for _ in 0..100 {
            match FaultProxy::start(self.listen, self.upstream, plan.clone(), seed).await {
                Ok(p) => {
                    self.running = Some(p);
                    return Ok(());
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        anyhow::bail!("cannot re-bind the fault proxy on {}", self.listen)
    }
}

/// One app.
struct App {
    client: Client<Tokio>,
    store: SharedStore,
    alias: String,
}

/// Runs one seed; an error is a harness failure (the relay did not start), not a violation.
pub fn run(config: &JepsenConfig) -> anyhow::Result<JepsenReport> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run_async(config))
}

#[allow(
    clippy::too_many_lines,
    reason = "the run's phases in order; each step is a call"
)]
async fn run_async(config: &JepsenConfig) -> anyhow::Result<JepsenReport> {
    let history = History::new();
    let plan = draw_plan(config);
    let tmp = tempfile::tempdir()?;
    let (upstream, mut relay, target) = match &config.target {
        RelayTarget::Command(template) => {
            let listen = free_port()?;
            let data = tmp.path().join("data");
            std::fs::create_dir_all(&data)?;
            let mut process = RelayProcess {
                template: template.clone(),
                payment_secret: config.payment_secret.clone(),
                listen,
                data,
                log: tmp.path().join("relay.log"),
                child: None,
                paused: false,
                restarts: 0,
            };
            process.spawn()?;
            (listen, Some(process), format!("--relay-cmd {template}"))
        }
        RelayTarget::Url(url) => {
            let endpoint = Endpoint::parse(url).map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
            let addr: SocketAddr = tokio::net::lookup_host((endpoint.host(), endpoint.port()))
                .await?
                .next()
                .ok_or_else(|| anyhow::anyhow!("{url}: no address"))?;
            (addr, None, format!("--relay-url {url}"))
        }
    };
    wait_listening(upstream, &mut relay).await?;
    history.push(
        None,
        json!({"relay": "listening", "at": upstream.to_string()}),
    );
    let mut proxy = Proxy {
        listen: free_port()?,
        upstream,
        seed: config.seed,
        phase: 0,
        running: None,
    };
    proxy.set(Plan::none()).await?;
    let endpoint = Endpoint::parse(&format!("http://{}", proxy.listen))
        .map_err(|e| anyhow::anyhow!("proxy endpoint: {e}"))?;

    // Setup, without faults.
    let mut violations = Vec::new();
    let apps = match tokio::time::timeout(
        Duration::from_millis(JEPSEN_SETUP_MS),
        setup(config, &endpoint, &history),
    )
    .await
    {
        Ok(Ok(apps)) => apps,
        Ok(Err(e)) => {
            violations.push(Violation::new("setup", e.to_string()).to_string());
            Vec::new()
        }
        Err(_) => {
            violations.push(
                Violation::new("setup", format!("not done within {JEPSEN_SETUP_MS} ms"))
                    .to_string(),
            );
            Vec::new()
        }
    };
    let n = apps.len();
    let convs: BTreeMap<(usize, usize), String> = if n == 0 {
        BTreeMap::new()
    } else {
        ring_convs(&apps).await
    };
    let commerce = match (&config.payment_secret, apps.first()) {
        (Some(secret), Some(first)) => {
            let started =
                commerce::Commerce::start(secret.as_bytes(), &endpoint, &first.client, n).await;
            match started {
                Ok(c) => {
                    history.push(None, json!({"commerce": {"pool": c.pool()}}));
                    Some(Arc::new(c))
                }
                Err(e) => {
                    violations.push(Violation::new("setup", format!("commerce: {e}")).to_string());
                    None
                }
            }
        }
        _ => None,
    };
    let apps = Arc::new(apps);

    // Traffic and faults.
    let traffic_start = history.now();
    history.push(None, json!({"phase": "traffic"}));
    let mut senders = Vec::new();
    let (seed, window) = (config.seed, config.window_ms);
    for i in 0..apps.len() {
        {
            let (apps, convs, history) = (Arc::clone(&apps), convs.clone(), history.clone());
            senders.push(tokio::spawn(async move {
                traffic(i, &apps, &convs, &history, seed, window).await;
            }));
        }
        if let Some(commerce) = &commerce {
            let (commerce, apps, history) =
                (Arc::clone(commerce), Arc::clone(&apps), history.clone());
            senders.push(tokio::spawn(async move {
                let mut rng = ChaCha20Rng::from_seed(derive(seed, 3_000 + i as u64));
                let at = rng.next_u64() % (window * 3 / 4).max(1);
                tokio::time::sleep(Duration::from_millis(at)).await;
                commerce.buy(i, &apps[i].client, &mut rng, &history).await;
            }));
        }
    }
    for event in &plan {
        let due = traffic_start + event.at_ms;
        let now = history.now();
        tokio::time::sleep(Duration::from_millis(due.saturating_sub(now))).await;
        history.push(None, json!({"fault": event.fault}));
        match &event.fault {
            JepsenFault::ProxyPhase { toxics } => proxy.set(toxics_plan(toxics)).await?,
            JepsenFault::ProxyClear => proxy.set(Plan::none()).await?,
            JepsenFault::Kill { restart_after_ms } => {
                if let Some(r) = relay.as_mut() {
                    r.kill9();
                    tokio::time::sleep(Duration::from_millis(*restart_after_ms)).await;
                    r.spawn()?;
                    r.restarts += 1;
                    history.push(None, json!({"relay": "restarted"}));
                }
                wait_listening(upstream, &mut relay).await?;
            }
            JepsenFault::Pause { for_ms } => {
                if let Some(r) = relay.as_mut() {
                    r.signal("-STOP");
                    r.paused = true;
                    tokio::time::sleep(Duration::from_millis(*for_ms)).await;
                    r.signal("-CONT");
                    r.paused = false;
                    history.push(None, json!({"relay": "continued"}));
                }
            }
        }
    }
    for s in senders {
        drop(s.await);
    }

    // Heal: no toxics, the relay up; then wait for delivery.
    proxy.set(Plan::none()).await?;
    wait_listening(upstream, &mut relay).await?;
    history.push(None, json!({"phase": "healed"}));
    let heal = history.now();
    let deadline = heal + JEPSEN_LIVENESS_MS;
    loop {
        // Quiet when every acked message was received and every received one acked: a
        // message the relay committed before a kill reaches its recipient while its sender
        // still waits for the ack of its resend (the dedup answers it).
        let (acked, received) = tally(&apps, &convs);
        if acked.keys().eq(received.keys()) || history.now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A little longer: a duplicate would show up now.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    if let Some(commerce) = &commerce {
        commerce.check(&apps, &history, &mut violations).await;
    }
    history.push(None, json!({"phase": "end"}));

    let entries = history.take();
    let (acked, received) = tally(&apps, &convs);
    check(&apps, &convs, &entries, &mut violations);
    let mut oracles = JEPSEN_ORACLES.to_vec();
    let mut not_applicable = NOT_APPLICABLE.to_vec();
    if commerce.is_some() {
        oracles.extend(COMMERCE_ORACLES);
    } else {
        not_applicable.push(
            "order-confirmed / forged-refused / alias-unique (no payment secret shared with the relay: commerce not run)",
        );
    }
    for app in apps.iter() {
        app.client.shutdown().await;
    }
    violations.sort();
    violations.dedup();
    Ok(JepsenReport {
        seed: config.seed,
        target,
        plan,
        oracles,
        not_applicable,
        violations,
        acked: acked.len(),
        received: received.len(),
        restarts: relay.as_ref().map_or(0, |r| r.restarts),
        orders: commerce.as_ref().map(|c| c.orders()).unwrap_or_default(),
        history: entries,
    })
}

fn derive(seed: u64, tag: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[..8].copy_from_slice(&seed.to_le_bytes());
    out[8..16].copy_from_slice(&tag.to_le_bytes());
    out[16..24].copy_from_slice(b"jepsen!!");
    out
}

async fn setup(
    config: &JepsenConfig,
    endpoint: &Endpoint,
    history: &History,
) -> anyhow::Result<Vec<App>> {
    let mut apps = Vec::new();
    for i in 0..config.clients {
        let store = SharedStore::new();
        let options = ClientOptions::new(
            endpoint.clone(),
            Arc::new(SystemClock),
            derive(config.seed, i as u64),
        );
        let client = Client::<Tokio>::start(store.clone(), options)?;
        let h = history.clone();
        client.on(EventKind::Any, move |event| {
            if let Some(what) = describe(event) {
                h.push(Some(i), what);
            }
        });
        let mut rng = ChaCha20Rng::from_seed(derive(config.seed, 1_000 + i as u64));
        let mnemonic = client_core::keys::new_mnemonic(&mut rng);
        let mut registered = false;
        for _ in 0..20 {
            if client
                .register_account(mnemonic.expose(), &format!("j{i}"))
                .await
                .is_ok()
            {
                registered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        anyhow::ensure!(registered, "client {i} could not register");
        let alias = client
            .alias_id()
            .await?
            .ok_or_else(|| anyhow::anyhow!("client {i} has no alias"))?;
        history.push(Some(i), json!({"registered": alias}));
        drop(client.connect().await);
        apps.push(App {
            client,
            store,
            alias,
        });
    }
    let n = apps.len();
    if n < 2 {
        return Ok(apps);
    }
    for i in 0..n {
        let j = (i + 1) % n;
        if n == 2 && i == 1 {
            break;
        }
        apps[i]
            .client
            .contacts()
            .send_friend_request(&apps[j].alias)
            .await?;
    }
    for app in &apps {
        for _ in 0..50 {
            let friends = app.client.contacts().sync_friends().await?;
            let mut pending = 0;
            for f in &friends {
                if f.status != wire::http::FriendStatus::Accepted {
                    pending += 1;
                    drop(
                        app.client
                            .contacts()
                            .accept_friend_request(&f.friendship_id.0.to_string())
                            .await,
                    );
                }
            }
            if pending == 0 {
                break;
            }
        }
    }
    Ok(apps)
}

/// `(i, i+1 mod n)` -> conversation id, as client `i` learned it.
async fn ring_convs(apps: &[App]) -> BTreeMap<(usize, usize), String> {
    let n = apps.len();
    let mut out = BTreeMap::new();
    for _ in 0..50 {
        for (i, app) in apps.iter().enumerate() {
            let Ok(friends) = app.client.contacts().sync_friends().await else {
                continue;
            };
            for j in [(i + 1) % n, (i + n - 1) % n] {
                if j == i {
                    continue;
                }
                if let Some(c) = friends
                    .iter()
                    .find(|f| f.alias_id.as_str() == apps[j].alias)
                    .and_then(|f| f.conversation_id.as_ref())
                {
                    out.insert((i.min(j), i.max(j)), c.as_str().to_owned());
                }
            }
        }
        let want = if n == 2 { 1 } else { n };
        if out.len() >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    out
}

async fn traffic(
    me: usize,
    apps: &[App],
    convs: &BTreeMap<(usize, usize), String>,
    history: &History,
    seed: u64,
    window_ms: u64,
) {
    let mut rng = ChaCha20Rng::from_seed(derive(seed, 2_000 + me as u64));
    let mine: Vec<(usize, &String)> = convs
        .iter()
        .filter(|((a, b), _)| *a == me || *b == me)
        .map(|((a, b), c)| (if *a == me { *b } else { *a }, c))
        .collect();
    if mine.is_empty() {
        return;
    }
    let end = history.now() + window_ms;
    let mut k = 0u32;
    while history.now() < end {
        tokio::time::sleep(Duration::from_millis(200 + rng.next_u64() % 1_000)).await;
        let (peer, conv) = mine[rng.next_u32() as usize % mine.len()];
        let text = format!("j{me}->j{peer} #{k}");
        k += 1;
        match apps[me]
            .client
            .send_message(conv, &apps[peer].alias, &text, None)
            .await
        {
            Ok(id) => history.push(Some(me), json!({"send": id, "conv": conv, "to": peer})),
            Err(e) => history.push(Some(me), json!({"send_refused": e.to_string()})),
        }
    }
}

fn describe(event: &Event) -> Option<Value> {
    Some(match event {
        Event::Message(m) => json!({
            "message": m.id, "conv": m.conversation_id, "seq": m.seq,
            "from": m.from_alias_id, "is_me": m.is_me,
        }),
        Event::StatusChange { id, status } => {
            json!({"status": id, "to": format!("{status:?}").to_lowercase()})
        }
        Event::NetworkState(state) => json!({"network": format!("{state:?}")}),
        Event::SecurityViolation(s) => json!({"security_violation": format!("{s:?}")}),
        Event::Goaway(g) => json!({"goaway": g}),
        Event::AuthFailed(f) => json!({"auth_failed": format!("{f:?}")}),
        Event::Authenticated { .. } => json!({"authenticated": true}),
        _ => return None,
    })
}

/// Acked messages (id -> sender) from the senders' stores, and received ones (id -> receiver)
/// from the recipients' stores.
fn tally(
    apps: &[App],
    convs: &BTreeMap<(usize, usize), String>,
) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let mut acked = BTreeMap::new();
    let mut received = BTreeMap::new();
    for (i, app) in apps.iter().enumerate() {
        let snapshot = app.store.snapshot();
        for conv in convs.values() {
            for m in snapshot.get_history(conv, None, None).unwrap_or_default() {
                if m.is_me && m.seq.is_some() {
                    acked.insert(m.id, i);
                } else if !m.is_me {
                    received.insert(m.id, i);
                }
            }
        }
    }
    (acked, received)
}

/// The client-visible oracles over the history and the client stores.
fn check(
    apps: &[App],
    convs: &BTreeMap<(usize, usize), String>,
    history: &[HistoryEntry],
    out: &mut Vec<String>,
) {
    let v = |o: &'static str, d: String| Violation::new(o, d).to_string();
    let members: BTreeMap<&str, (usize, usize)> =
        convs.iter().map(|(k, c)| (c.as_str(), *k)).collect();
    let (acked, received_store) = tally(apps, convs);
    // message events: (client, id) -> count; per (client, conv) seq order.
    let mut seen: BTreeMap<(usize, String), u32> = BTreeMap::new();
    let mut last_seq: BTreeMap<(usize, String), u64> = BTreeMap::new();
    let mut seqs: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut got: BTreeSet<(usize, String)> = BTreeSet::new();
    for e in history {
        let Some(c) = e.client else { continue };
        if let Some(id) = e.what.get("message").and_then(Value::as_str) {
            if e.what["is_me"] == true {
                continue;
            }
            let conv = e.what["conv"].as_str().unwrap_or_default().to_owned();
            let seq = e.what["seq"].as_u64();
            *seen.entry((c, id.to_owned())).or_default() += 1;
            got.insert((c, id.to_owned()));
            match members.get(conv.as_str()) {
                Some(&(a, b)) if a == c || b == c => {
                    let peer = if a == c { b } else { a };
                    let from = e.what["from"].as_str();
                    if from.is_some_and(|f| f != apps[peer].alias) {
                        out.push(v(
                            "non-participant",
                            format!("j{c} got {id} in {conv} from {from:?}, not its peer j{peer}"),
                        ));
                    }
                }
                _ => out.push(v(
                    "non-participant",
                    format!("j{c} got {id} in {conv}, a conversation it is not in"),
                )),
            }
            if let Some(seq) = seq {
                seqs.entry(conv.clone()).or_default().insert(seq);
                let key = (c, conv.clone());
                if let Some(prev) = last_seq.get(&key)
                    && seq <= *prev
                {
                    out.push(v(
                        "seq-order",
                        format!("j{c} got seq {seq} after seq {prev} in {conv}"),
                    ));
                }
                last_seq.insert(key, seq);
            }
        }
    }
    for ((c, id), n) in &seen {
        if *n > 1 {
            out.push(v(
                "delivered-exactly-once",
                format!("j{c} saw message {id} {n} times"),
            ));
        }
    }
    let mut missing = Vec::new();
    for (id, sender) in &acked {
        if !received_store.contains_key(id) {
            missing.push(format!("{id} (from j{sender})"));
        }
    }
    if !missing.is_empty() {
        out.push(v(
            "liveness",
            format!(
                "{} acknowledged message(s) not delivered within {JEPSEN_LIVENESS_MS} ms of healing; first: {}",
                missing.len(),
                missing[0]
            ),
        ));
    }
    // Gaps: per conversation, sender seqs (acked) and recipient seqs together are 1..=max.
    for (i, app) in apps.iter().enumerate() {
        let snapshot = app.store.snapshot();
        for conv in convs.values() {
            for m in snapshot.get_history(conv, None, None).unwrap_or_default() {
                if let (true, Some(seq)) = (m.is_me, m.seq) {
                    seqs.entry(conv.clone()).or_default().insert(seq);
                }
            }
        }
        let _ = i;
    }
    for (conv, set) in &seqs {
        let max = set.iter().max().copied().unwrap_or(0);
        if set.len() as u64 != max {
            let gaps: Vec<u64> = (1..=max).filter(|s| !set.contains(s)).take(5).collect();
            out.push(v(
                "seq-gap-free",
                format!("{conv}: seqs up to {max} seen, missing {gaps:?}"),
            ));
        }
    }
    // Receipts: delivered/read only for messages the recipient's app received.
    for e in history {
        let Some(c) = e.client else { continue };
        let (Some(id), Some(to)) = (
            e.what.get("status").and_then(Value::as_str),
            e.what.get("to").and_then(Value::as_str),
        ) else {
            continue;
        };
        let status_is = |s: MessageStatus| format!("{s:?}").to_lowercase() == to;
        if (status_is(MessageStatus::Delivered) || status_is(MessageStatus::Read))
            && let Some(r) = received_store.get(id)
            && !got.contains(&(*r, id.to_owned()))
        {
            out.push(v(
                "receipts",
                format!("j{c}'s {id} marked {to} but its recipient's app never got it"),
            ));
        }
        if (status_is(MessageStatus::Delivered) || status_is(MessageStatus::Read))
            && !received_store.contains_key(id)
        {
            out.push(v(
                "receipts",
                format!("j{c}'s {id} marked {to} but no recipient has it"),
            ));
        }
    }
}

/// Writes `report` as JSON to `path`.
pub fn write_history(report: &JepsenReport, path: &Path) -> std::io::Result<()> {
    std::fs::write(path, report.to_json())
}

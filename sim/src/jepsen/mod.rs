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
//! * **Traffic window** (`window_ms`): every client sends to a random friend every 0.2-1.2 s
//!   and, after one send in three, marks a conversation read up to a message it received
//!   (not always the newest); the fault plan, drawn from the seed, runs meanwhile: proxy phases (toxics from the
//!   conformance vocabulary, [`fault_proxy::Plan`]: every connection through the proxy is cut
//!   when a phase starts and new ones get the phase's toxics), `kill -9` of the relay and a
//!   restart on the **same data directory**, `SIGSTOP` … `SIGCONT`.
//! * **Heal**: no toxics, the relay running; every acknowledged message must arrive within
//!   [`JEPSEN_LIVENESS_MS`].
//! * **Commerce** (when the relay shares the harness's payment secret): every client buys a
//!   vanity alias from a pool one smaller than the clients (they compete), paid through the
//!   payment-processor stand-in with duplicated and forged webhook copies, abandoned, or
//!   "paid" by a forger (see `vanity_orders`).
//! * **Probes** after healing, on a calm network (`probes`): two strangers
//!   made by hand over raw sockets (a non-member of the ring, a rejected requester) try a
//!   `msg`, forged receipts and a retract, judged by what the relay did (`authz`); and the
//!   receipt-kept probe (a `delivered` sent while its sender was offline reaches it when it
//!   comes back: a SHOULD, reported in [`JepsenReport::should`], not a failure).
//! * **Oracles** over what the clients saw ([`JEPSEN_ORACLES`], and [`COMMERCE_ORACLES`]):
//!   at the wire, before the clients' own dedup (a [`client::WireTap`] per app,
//!   [`crate::oracles::wire`]): `duplicate-delivery`, `seq-reused`, `ack-lost`, `receipts`
//!   (a `delivered` only after the recipient's socket had the message, a `read` only up to what
//!   the reader marked); over what
//!   the apps showed: exactly-once delivery, liveness after healing, seq order, receipts,
//!   non-participant (the simulator's own oracles, [`crate::oracles::delivery`] and
//!   [`crate::oracles::receipts`], over the history and the client stores); a refusal the
//!   scenario gives no reason for (`unexpected-answer`, quoting the body); paid orders
//!   confirmed and bindable, unpaid and forged ones never, one owner per alias. Those that
//!   need the relay's internals, or rest on our relay's own choices, are reported as not
//!   applicable ([`NOT_APPLICABLE`]).
//! * **Verdict** ([`Verdict`]): `pass`, `fail`, or `setup` when the scenario did not happen
//!   (an account, a friendship or the commerce could not be set up: nothing is judged; or too
//!   little traffic: fewer than [`MIN_ACKED_PER_CONVERSATION`] acks in a conversation, no order
//!   placed, and no oracle broke). Every report carries its denominators ([`Counts`]) and
//!   every route's requests and refusals with the first body ([`RouteCount`]).
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

//!
//! Modules: `plan` (the fault plan), `probes` (the strangers and the receipt-kept probe), `process` (the relay process, in a process group of its
//! own, and the fault proxy), `apps` (the clients, their traffic and the history) with
//! [`crate::wiretap`] (the clients' taps: routes, refusals, frames), `verdict` (the client-visible oracles),
//! `vanity_orders` (the vanity-alias order flow and its oracles).

mod apps;
mod plan;
mod probes;
mod process;
mod vanity_orders;
mod verdict;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde::Serialize;
use serde_json::json;

use self::apps::{App, History, ring_convs, setup, tally, traffic};
use self::probes::{Forged, ProbeReport};
use self::process::{Proxy, RelayProcess, start_relay, wait_listening};
use self::vanity_orders::VanityOrders;
use crate::violation::{Oracle, Violation};
use crate::wiretap::WireLog;
use seam::net::Endpoint;

pub use self::apps::HistoryEntry;
pub use self::plan::{DEFAULT_TOXICS, JepsenEvent, JepsenFault, draw_plan};
pub use self::probes::{FORGED_SEQ, PROBE_WAIT_MS};
pub use self::vanity_orders::{JEPSEN_COMMERCE_MS, JepsenOrder, Paid};
pub use crate::wiretap::RouteCount;

/// After healing, every acknowledged message must arrive within this long.
pub const JEPSEN_LIVENESS_MS: u64 = 30_000;
/// The relay must accept connections within this long of its start.
pub const RELAY_START_MS: u64 = 30_000;
/// Setup (registration, friendships) must finish within this long.
pub const JEPSEN_SETUP_MS: u64 = 60_000;
/// A conversation with fewer messages acknowledged than this (both directions together) did
/// not see the traffic the oracles need: the run's verdict is `setup`.
pub const MIN_ACKED_PER_CONVERSATION: usize = 2;
/// The oracles this mode runs.
pub const JEPSEN_ORACLES: [Oracle; 11] = [
    Oracle::DuplicateDelivery,
    Oracle::SeqReused,
    Oracle::AckLost,
    Oracle::DeliveredExactlyOnce,
    Oracle::Liveness,
    Oracle::SeqOrder,
    Oracle::Receipts,
    Oracle::NonParticipant,
    Oracle::UnexpectedAnswer,
    Oracle::Authz,
    Oracle::Setup,
];
/// Oracles of what the documents recommend: their findings are reported apart
/// ([`JepsenReport::should`]) and do not fail a run.
pub const JEPSEN_SHOULD: [Oracle; 1] = [Oracle::ReceiptKept];
/// The commerce oracles (run when the relay shares the harness's payment secret).
pub const COMMERCE_ORACLES: [Oracle; 3] = [
    Oracle::OrderConfirmed,
    Oracle::ForgedRefused,
    Oracle::AliasUnique,
];
/// Oracles of the turmoil simulator that need the relay's internals or stand-ins this mode
/// does not run.
pub const NOT_APPLICABLE: [&str; 12] = [
    "seq-gap-free (gap-free seqs from 1 are our relay's choice; the documents ask for increasing seqs only)",
    "fail-stop (needs the relay's commit history)",
    "store-intact (needs the relay's store)",
    "seq-unique (needs the relay's committed rows)",
    "canary-store (needs the relay's store)",
    "canary-logs (needs the relay's logs)",
    "resources (needs the relay's memory)",
    "receipts-clear (needs the relay's queue)",
    "push (no push stand-ins in this mode)",
    "payment-applied-once / holds-released / channel-single-owner (need the relay's rows; channel trades and quota buys are not run in this mode)",
    "bad-input / stuck-client (the strangers of this mode send well-formed frames and keep reading)",
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
                .then(|| vanity_orders::run_secret(seed)),
            target,
            clients: 4,
            window_ms: 20_000,
            toxics: DEFAULT_TOXICS.iter().map(|s| (*s).to_owned()).collect(),
            process_faults: true,
        }
    }
}

/// Why a run could not be carried out: a failure of the harness or of the relay process,
/// not a violation (violations are in the [`JepsenReport`]).
#[derive(Debug, thiserror::Error)]
pub enum JepsenError {
    /// A file, directory, port or process of the harness.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The relay process exited while the harness waited for it to listen.
    #[error(
        "the relay command exited ({status}) before accepting connections on {listen}; check --relay-cmd (it must start a relay listening on {{listen}}; `exec` is optional). Its last output:\n{log}"
    )]
    RelayExited {
        /// Its exit status.
        status: String,
        /// Where it should have listened.
        listen: SocketAddr,
        /// The end of its log.
        log: String,
    },
    /// The relay did not accept connections within [`RELAY_START_MS`].
    #[error(
        "the relay did not accept connections on {addr} within {RELAY_START_MS} ms: does --relay-cmd make it listen on {{listen}}?"
    )]
    RelayNotListening {
        /// Where it should listen.
        addr: SocketAddr,
    },
    /// The command template has no `{listen}`.
    #[error(
        "--relay-cmd has no {{listen}}: the harness picks a free port and puts `127.0.0.1:PORT` where {{listen}} is (e.g. --relay-cmd './relay --addr {{listen}} --db {{data}}/db')"
    )]
    NoListen,
    /// The fault proxy could not bind its port again for a new phase.
    #[error("cannot re-bind the fault proxy on {addr}")]
    ProxyBind {
        /// The proxy's address.
        addr: SocketAddr,
    },
    /// `--relay-url` is not a relay's base URL.
    #[error("{url}: {why}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
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
    /// `pass`, `fail` (a violation), or `setup` (the scenario did not happen: no friendship,
    /// too few messages acknowledged, no order placed; the other oracles judged nothing).
    pub verdict: Verdict,
    /// Violations found.
    pub violations: Vec<String>,
    /// Findings against what the documents recommend ([`JEPSEN_SHOULD`]): reported, not a
    /// failure.
    pub should: Vec<String>,
    /// Messages acknowledged to their senders.
    pub acked: usize,
    /// Messages received by their recipients.
    pub received: usize,
    /// Relay process restarts (kill -9).
    pub restarts: u32,
    /// What the run did and saw: the denominators of its verdict.
    pub counts: Counts,
    /// Every route the clients used: requests, and refusals by status with the first body.
    pub routes: BTreeMap<String, RouteCount>,
    /// Frames the clients' sockets received, by type.
    pub frames: BTreeMap<String, u64>,
    /// Orders placed (empty when commerce did not run).
    pub orders: Vec<JepsenOrder>,
    /// Every event, in order.
    pub history: Vec<HistoryEntry>,
}

/// The verdict of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every oracle held, over a scenario that happened.
    Pass,
    /// An oracle found a violation.
    Fail,
    /// The scenario did not happen (see the `setup` violations): nothing was judged.
    Setup,
}

/// The denominators of a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    /// Clients registered.
    pub accounts: usize,
    /// Friendships that became conversations.
    pub conversations: usize,
    /// Conversations the ring needs.
    pub conversations_wanted: usize,
    /// Messages the apps sent.
    pub sent: usize,
    /// `ack` frames the senders' sockets received.
    pub acks_seen: usize,
    /// `msg` frames the recipients' sockets received.
    pub msgs_seen: usize,
    /// Receipts (`delivered`, `read`) the senders' sockets received.
    pub receipts_seen: u64,
    /// Orders placed (commerce).
    pub orders: usize,
    /// Orders paid genuinely.
    pub orders_paid: usize,
    /// Kills (kill -9 + restart) that happened.
    pub kills: u32,
    /// Pauses (SIGSTOP … SIGCONT) that happened.
    pub pauses: u32,
    /// Proxy phases run.
    pub proxy_phases: u32,
    /// The strangers' attempts judged (after healing).
    pub stranger_attempts: u32,
    /// Receipt-kept probes judged (after healing).
    pub receipt_probes: u32,
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} accounts, {} of {} conversations, {} sent, {} ack frames, {} msg frames, {} receipts, {} orders ({} paid), {} kills, {} pauses, {} proxy phases, {} stranger attempts, {} receipt probes",
            self.accounts,
            self.conversations,
            self.conversations_wanted,
            self.sent,
            self.acks_seen,
            self.msgs_seen,
            self.receipts_seen,
            self.orders,
            self.orders_paid,
            self.kills,
            self.pauses,
            self.proxy_phases,
            self.stranger_attempts,
            self.receipt_probes
        )
    }
}

impl JepsenReport {
    /// The report as pretty JSON (the history file).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// Runs one seed; an error is a harness failure (the relay did not start), not a violation.
pub fn run(config: &JepsenConfig) -> Result<JepsenReport, JepsenError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(run_async(config))
}

/// The relay of a run and the proxy in front of it.
struct Relay {
    /// Where the relay listens.
    upstream: SocketAddr,
    /// The process, if the harness owns it.
    process: Option<RelayProcess>,
    proxy: Proxy,
}

async fn run_async(config: &JepsenConfig) -> Result<JepsenReport, JepsenError> {
    let history = History::new();
    let wire = WireLog::default();
    let plan = draw_plan(config);
    let tmp = tempfile::tempdir()?;
    let (upstream, mut process, target) = start_relay(config, tmp.path()).await?;
    wait_listening(upstream, &mut process).await?;
    history.push(
        None,
        json!({"relay": "listening", "at": upstream.to_string()}),
    );
    let proxy = Proxy::start(upstream, config.seed).await?;
    let endpoint = proxy.endpoint();
    let mut relay = Relay {
        upstream,
        process,
        proxy,
    };
    let mut violations = Vec::new();
    let apps = setup_apps(config, &endpoint, &history, &wire, &mut violations).await;
    let convs = if apps.is_empty() {
        BTreeMap::new()
    } else {
        ring_convs(&apps).await
    };
    let wanted = ring_size(apps.len());
    if !apps.is_empty() && convs.len() < wanted {
        violations.push(setup_violation(
            &format!(
                "only {} of the {wanted} friendships of the ring became conversations",
                convs.len()
            ),
            &wire,
        ));
    }
    let orders = if violations.is_empty() {
        start_orders(config, &endpoint, &apps, &history, &mut violations).await
    } else {
        None
    };
    // Preconditions of the traffic: without them nothing is judged.
    let setup_failed = !violations.is_empty();
    let apps = Arc::new(apps);
    let traffic_start = history.now();
    history.push(None, json!({"phase": "traffic"}));
    let senders = spawn_clients(config, &apps, &convs, (&history, &wire), orders.as_ref());
    let mut counts = Counts {
        accounts: apps.len(),
        conversations: convs.len(),
        conversations_wanted: wanted,
        ..Counts::default()
    };
    run_plan(&plan, traffic_start, &history, &mut relay, &mut counts).await?;
    for s in senders {
        drop(s.await);
    }
    heal(&mut relay, &history, &apps, &convs).await?;
    if let Some(orders) = &orders {
        orders.check(&apps, &history, &mut violations).await;
    }
    let mut probed = ProbeReport::default();
    let forged = if setup_failed {
        Forged::default()
    } else {
        history.push(None, json!({"phase": "probes"}));
        let forged =
            probes::strangers(&endpoint, config.seed, &apps, &convs, &history, &mut probed).await;
        probes::receipt_kept(&apps, &convs, &history, &mut probed).await;
        forged
    };
    history.push(None, json!({"phase": "end"}));
    let entries = history.take();
    let (acked, received) = tally(&apps, &convs);
    let conv_of = verdict::sent_in(&entries);
    let seen = wire.seen(&conv_of);
    counts.sent = conv_of.len();
    counts.acks_seen = seen.acks.len();
    counts.msgs_seen = seen.msgs.len();
    counts.receipts_seen = wire.receipts();
    counts.stranger_attempts = probed.stranger_attempts;
    counts.receipt_probes = probed.receipt_probes;
    forged.judge(&seen, &mut probed.must);
    // Denominators of the traffic: too few and the oracles judged too little.
    let mut thin = Vec::new();
    if let Some(o) = &orders {
        let placed = o.orders();
        counts.orders = placed.len();
        counts.orders_paid = placed
            .iter()
            .filter(|o| matches!(o.paid, Paid::Genuine { .. }))
            .count();
        if placed.is_empty() {
            thin.push(setup_violation(
                &format!(
                    "commerce ran but no order was placed (every purchase of {:?} refused)",
                    o.pool()
                ),
                &wire,
            ));
        }
    }
    if !convs.is_empty() {
        short_conversations(&convs, &seen, &wire, &mut thin);
    }
    for why in &probed.not_run {
        thin.push(setup_violation(why, &wire));
    }
    if !setup_failed {
        violations.extend(probed.must.iter().map(ToString::to_string));
        verdict::check(&apps, &convs, &entries, &seen, &mut violations);
        verdict::unexpected_refusals(&wire.routes(), &mut violations);
    }
    // A scenario that happened and broke an oracle fails; one that did not happen is `setup`.
    let broken = violations.iter().any(|v| !v.starts_with("[setup]"));
    violations.extend(thin);
    for app in apps.iter() {
        app.client.shutdown().await;
    }
    // The cause first: a seq reused or an ack lost before the order violations it causes.
    crate::violation::causes_first(&mut violations);
    let (oracles, not_applicable) = oracle_lists(orders.is_some());
    let verdict = if setup_failed {
        Verdict::Setup
    } else if broken {
        Verdict::Fail
    } else if violations.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Setup
    };
    Ok(JepsenReport {
        seed: config.seed,
        target,
        plan,
        oracles,
        not_applicable,
        verdict,
        violations,
        should: probed.should.iter().map(ToString::to_string).collect(),
        acked: acked.len(),
        received: received.len(),
        restarts: relay.process.as_ref().map_or(0, |r| r.restarts),
        counts,
        routes: wire.routes(),
        frames: wire.frames(),
        orders: orders.as_ref().map(|c| c.orders()).unwrap_or_default(),
        history: entries,
    })
}

/// Setup without faults, within [`JEPSEN_SETUP_MS`]; a failure is a `setup` violation (and
/// no apps).
async fn setup_apps(
    config: &JepsenConfig,
    endpoint: &Endpoint,
    history: &History,
    wire: &WireLog,
    violations: &mut Vec<String>,
) -> Vec<App> {
    let setup = setup(config, endpoint, history, wire);
    match tokio::time::timeout(Duration::from_millis(JEPSEN_SETUP_MS), setup).await {
        Ok(Ok(apps)) => apps,
        Ok(Err(e)) => {
            violations.push(setup_violation(&e.to_string(), wire));
            Vec::new()
        }
        Err(_) => {
            violations.push(setup_violation(
                &format!("not done within {JEPSEN_SETUP_MS} ms"),
                wire,
            ));
            Vec::new()
        }
    }
}

/// Conversations the ring of `n` clients needs (`i` and `i+1`).
fn ring_size(n: usize) -> usize {
    match n {
        0 | 1 => 0,
        2 => 1,
        n => n,
    }
}

/// A `setup` violation: what did not happen, and the refusals that explain it.
fn setup_violation(what: &str, wire: &WireLog) -> String {
    let refusals = wire.refusal_lines();
    let why = if refusals.is_empty() {
        String::new()
    } else {
        format!("; refusals the clients got: {}", refusals.join(" | "))
    };
    Violation::new(Oracle::Setup, format!("{what}{why}")).to_string()
}

/// A `setup` violation for each conversation with fewer than [`MIN_ACKED_PER_CONVERSATION`]
/// messages acknowledged (the oracles would judge nothing there).
fn short_conversations(
    convs: &BTreeMap<(usize, usize), String>,
    seen: &crate::oracles::wire::WireSeen,
    wire: &WireLog,
    violations: &mut Vec<String>,
) {
    for (&(a, b), conv) in convs {
        let acked = seen.acks.iter().filter(|x| &x.conv == conv).count();
        if acked < MIN_ACKED_PER_CONVERSATION {
            violations.push(setup_violation(
                &format!(
                    "conversation {conv} (c{a}, c{b}): {acked} message(s) acknowledged, fewer than the {MIN_ACKED_PER_CONVERSATION} the oracles need"
                ),
                wire,
            ));
        }
    }
}

/// The vanity-alias order flow, when the relay shares the harness's payment secret and
/// setup gave apps; a failure to start it is a `setup` violation.
async fn start_orders(
    config: &JepsenConfig,
    endpoint: &Endpoint,
    apps: &[App],
    history: &History,
    violations: &mut Vec<String>,
) -> Option<Arc<VanityOrders>> {
    let (Some(secret), Some(first)) = (&config.payment_secret, apps.first()) else {
        return None;
    };
    match VanityOrders::start(secret.as_bytes(), endpoint, &first.client, apps.len()).await {
        Ok(c) => {
            history.push(None, json!({"commerce": {"pool": c.pool()}}));
            Some(Arc::new(c))
        }
        Err(e) => {
            violations.push(Violation::new(Oracle::Setup, format!("commerce: {e}")).to_string());
            None
        }
    }
}

/// Each client's traffic, and (with the order flow) its purchase at a time drawn from the
/// seed in the first three quarters of the window.
fn spawn_clients(
    config: &JepsenConfig,
    apps: &Arc<Vec<App>>,
    convs: &BTreeMap<(usize, usize), String>,
    (history, wire): (&History, &WireLog),
    orders: Option<&Arc<VanityOrders>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    let (seed, window) = (config.seed, config.window_ms);
    for i in 0..apps.len() {
        let (apps_i, convs, history_i) = (Arc::clone(apps), convs.clone(), history.clone());
        let wire_i = wire.clone();
        tasks.push(tokio::spawn(async move {
            traffic(i, &apps_i, &convs, (&history_i, &wire_i), seed, window).await;
        }));
        if let Some(orders) = orders {
            let (orders, apps, history) = (Arc::clone(orders), Arc::clone(apps), history.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = ChaCha20Rng::from_seed(derive(seed, 3_000 + i as u64));
                let at = rng.next_u64() % (window * 3 / 4).max(1);
                tokio::time::sleep(Duration::from_millis(at)).await;
                orders.buy(i, &apps[i].client, &mut rng, &history).await;
            }));
        }
    }
    tasks
}

/// Carries out the fault plan, each fault at its time after `traffic_start`.
async fn run_plan(
    plan: &[JepsenEvent],
    traffic_start: u64,
    history: &History,
    relay: &mut Relay,
    counts: &mut Counts,
) -> Result<(), JepsenError> {
    for event in plan {
        let due = traffic_start + event.at_ms;
        let now = history.now();
        tokio::time::sleep(Duration::from_millis(due.saturating_sub(now))).await;
        history.push(None, json!({"fault": event.fault}));
        match &event.fault {
            JepsenFault::ProxyPhase { toxics } => {
                relay.proxy.set_toxics(Some(toxics)).await?;
                counts.proxy_phases += 1;
            }
            JepsenFault::ProxyClear => relay.proxy.set_toxics(None).await?,
            JepsenFault::Kill { restart_after_ms } => {
                if let Some(r) = relay.process.as_mut() {
                    r.kill_and_restart(*restart_after_ms).await?;
                    counts.kills += 1;
                    history.push(None, json!({"relay": "restarted"}));
                }
                wait_listening(relay.upstream, &mut relay.process).await?;
            }
            JepsenFault::Pause { for_ms } => {
                if let Some(r) = relay.process.as_mut()
                    && r.pause(*for_ms).await
                {
                    counts.pauses += 1;
                    history.push(None, json!({"relay": "continued"}));
                }
            }
        }
    }
    Ok(())
}

/// Heals (no toxics, the relay up), then waits for delivery: until every acked message was
/// received and every received one acked, or [`JEPSEN_LIVENESS_MS`] passed; then a little
/// longer, so that a duplicate would show up.
async fn heal(
    relay: &mut Relay,
    history: &History,
    apps: &[App],
    convs: &BTreeMap<(usize, usize), String>,
) -> Result<(), JepsenError> {
    relay.proxy.set_toxics(None).await?;
    wait_listening(relay.upstream, &mut relay.process).await?;
    history.push(None, json!({"phase": "healed"}));
    let deadline = history.now() + JEPSEN_LIVENESS_MS;
    loop {
        // Quiet when every acked message was received and every received one acked: a
        // message the relay committed before a kill reaches its recipient while its sender
        // still waits for the ack of its resend (the dedup answers it).
        let (acked, received) = tally(apps, convs);
        if acked.keys().eq(received.keys()) || history.now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    Ok(())
}

/// The oracles run and those not applicable (commerce's among them when it did not run).
fn oracle_lists(commerce: bool) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut oracles: Vec<&'static str> = JEPSEN_ORACLES.map(Oracle::name).to_vec();
    oracles.extend(JEPSEN_SHOULD.map(Oracle::name));
    let mut not_applicable = NOT_APPLICABLE.to_vec();
    if commerce {
        oracles.extend(COMMERCE_ORACLES.map(Oracle::name));
    } else {
        not_applicable.push(
            "order-confirmed / forged-refused / alias-unique (no payment secret shared with the relay: commerce not run)",
        );
    }
    (oracles, not_applicable)
}

/// The seed of stream `tag` of a run.
fn derive(seed: u64, tag: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[..8].copy_from_slice(&seed.to_le_bytes());
    out[8..16].copy_from_slice(&tag.to_le_bytes());
    out[16..24].copy_from_slice(b"jepsen!!");
    out
}

/// Writes `report` as JSON to `path`.
pub fn write_history(report: &JepsenReport, path: &Path) -> std::io::Result<()> {
    std::fs::write(path, report.to_json())
}

//! One simulation run: build the turmoil world, step it, apply the fault plan, heal, check.
//!
//! ```text
//! setup (no faults)  : register, friend requests, accepts, sessions      ─┐ gated on every
//! traffic (window)   : scripted actions + the fault plan                   │ client's setup
//! liveness (bound)   : every link repaired, every host up; must converge   │
//!   bound - 40 s     : the relay's clock jumps 31 min (every unpaid order   │
//!                      expires), then the commerce audit ([`super::commerce`])─┘
//! oracles            : over the trace, the client stores, the relay store, the stand-ins
//!                      and the logs
//! ```
//!
//! Hosts: `relay`, `c0`..`cN-1` (scripted clients), `pay` (the payment processor stand-in on
//! [`PAY_PORT`] and a forger on [`FORGER_PORT`]), `audit` (an account that audits commerce).
//! The relay reads an [`OffsetClock`] the runner keeps (clock-jump faults; it survives relay
//! restarts).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use client_core::store::ClientStore as _;
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use relay_core::store::MemoryStore as RelayStore;
use relay_core::{Config, MemoryBlobStore};

use super::commerce::{self, CommerceWorld, Payments};
use super::faults::{FaultAction, FaultKind, FaultPlan, FaultSelection, PAY, RELAY};
use super::oracles::{self, Violation};
use super::scenario::{ActionKind, Scenario};
use super::trace::{self, Device, Record, Trace};
use crate::client::{Client, ClientOptions, EventKind, SharedStore};
use crate::clock::{OffsetClock, SimClock};
use crate::net::{Endpoint, Turmoil};
use crate::server::RelayServer;
use crate::standins::PaymentProcessor;

/// Port of the relay host.
pub const RELAY_PORT: u16 = 8080;
/// Traffic window (faults happen inside it).
pub const TRAFFIC_WINDOW_MS: u64 = 120_000;
/// After healing, everything must converge within this much simulated time.
pub const LIVENESS_BOUND_MS: u64 = 120_000;
/// Setup (registration, friendships) must finish within this much simulated time.
pub const SETUP_BOUND_MS: u64 = 120_000;
/// Simulated time per turmoil step.
const TICK_MS: u64 = 2;
/// Pause between retries of a failed setup call.
const RETRY_MS: u64 = 500;
/// Port of the payment processor stand-in on the `pay` host.
pub const PAY_PORT: u16 = 9090;
/// Port of the forger (wrong secret) on the `pay` host.
pub const FORGER_PORT: u16 = 9091;
/// Host name of the commerce auditor.
pub const AUDIT: &str = "audit";
/// The webhook secret the relay and the processor share.
const WEBHOOK_SECRET: &[u8] = b"sim-webhook-secret";

/// What to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The seed: scenario, fault plan, turmoil and every client RNG derive from it.
    pub seed: u64,
    /// Client hosts.
    pub clients: usize,
    /// Which fault kinds may be used.
    pub faults: FaultSelection,
    /// Capture every log event (DEBUG and above) for the canary oracle.
    pub capture_logs: bool,
    /// Bind confirmed vanity orders (the buyer's alias changes). Off in CI until client-core
    /// follows a friend's new alias: today it parks every later message from that friend
    /// (`sim/tests/simulate.rs`, ignored test `bind_keeps_friend_messages_flowing`).
    pub bind_vanity: bool,
}

impl RunConfig {
    /// Defaults: 4 clients, swarm faults, logs captured.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            clients: 4,
            faults: FaultSelection::Swarm,
            capture_logs: true,
            bind_vanity: true,
        }
    }
}

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// The scenario summary line.
    pub scenario: String,
    /// The fault plan as printed.
    pub plan: FaultPlan,
    /// Application-level trace lines.
    pub trace: Vec<String>,
    /// SHA-256 of the trace.
    pub trace_hash: String,
    /// Every oracle violation.
    pub violations: Vec<Violation>,
    /// Simulated time of the run.
    pub simulated: Duration,
}

/// State shared between the runner and the scripted hosts (single-threaded: turmoil runs every
/// host on the runner's thread).
#[derive(Debug, Default)]
pub(super) struct World {
    pub(super) aliases: BTreeMap<usize, String>,
    pub(super) requested: BTreeSet<usize>,
    pub(super) accepted: BTreeSet<usize>,
    pub(super) ready: BTreeSet<usize>,
    /// Conversation of each pair, as learned by its members.
    pub(super) convs: BTreeMap<usize, String>,
    /// Simulated ms at which traffic starts.
    pub(super) traffic_start_ms: Option<u64>,
    /// Next action index per client (survives client crashes).
    pub(super) next_action: BTreeMap<usize, usize>,
    /// Host incarnations (seed derivation across restarts).
    pub(super) incarnations: BTreeMap<usize, u64>,
    /// Second-device stores.
    pub(super) second_stores: Vec<(Device, SharedStore)>,
    /// Every alias each client had, oldest first (a bind retires the previous one).
    pub(super) alias_history: BTreeMap<usize, Vec<String>>,
    /// Orders, listings, binds and the audit.
    pub(super) commerce: CommerceWorld,
}

type Shared = Rc<RefCell<World>>;

pub(super) fn sim_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(super) async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

fn derive_seed(seed: u64, tag: u64, n: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[..8].copy_from_slice(&seed.to_le_bytes());
    out[8..16].copy_from_slice(&tag.to_le_bytes());
    out[16..24].copy_from_slice(&n.to_le_bytes());
    out
}

/// Runs one seed.
pub fn run(config: &RunConfig) -> RunReport {
    let logs = LogCapture::default();
    let run = || run_inner(config, &logs);
    let mut report = if config.capture_logs {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .without_time()
            .with_writer(logs.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, run)
    } else {
        run()
    };
    if config.capture_logs {
        let text = logs.text();
        oracles::logs_free_of_canaries(&text, &report.canaries, &mut report.report.violations);
    }
    report.report
}

struct Inner {
    report: RunReport,
    canaries: Vec<String>,
}

fn run_inner(config: &RunConfig, _logs: &LogCapture) -> Inner {
    let mut rng = ChaCha20Rng::seed_from_u64(config.seed);
    let scenario = Rc::new(Scenario::draw(
        &mut rng,
        config.seed,
        config.clients,
        TRAFFIC_WINDOW_MS,
    ));
    let plan = FaultPlan::draw(&mut rng, &config.faults, config.clients, TRAFFIC_WINDOW_MS);
    let trace = Trace::default();
    let world: Shared = Rc::default();
    let mut violations = Vec::new();

    let mut sim = turmoil::Builder::new()
        .rng_seed(config.seed)
        .min_message_latency(Duration::from_millis(plan.latency_ms.0))
        .max_message_latency(Duration::from_millis(plan.latency_ms.1))
        .tick_duration(Duration::from_millis(TICK_MS))
        .simulation_duration(Duration::from_secs(3_600))
        .build();

    // The relay: its store and blobs outlive crashes.
    let relay_store = RelayStore::new();
    let blobs = MemoryBlobStore::new();
    let relay_config = relay_config();
    let relay_seed = rng.next_u64();
    let relay_clock = OffsetClock::new(Arc::new(SimClock::default()));
    {
        let store = relay_store.clone();
        let clock = relay_clock.clone();
        sim.host(RELAY, move || {
            let server = RelayServer::in_memory(
                relay_config.clone(),
                relay_seed,
                store.clone(),
                blobs.clone(),
            )
            .with_clock(clock.clone());
            async move {
                server
                    .run::<Turmoil>(
                        SocketAddr::from((Ipv4Addr::UNSPECIFIED, RELAY_PORT)),
                        std::future::pending(),
                    )
                    .await?;
                Ok(())
            }
        });
    }

    // The payment processor and a forger (wrong secret), on the `pay` host.
    let payments = Payments {
        processor: PaymentProcessor::new(WEBHOOK_SECRET, endpoint()),
        forger: PaymentProcessor::new(b"forger-guess".as_slice(), endpoint()),
        faults: plan.webhook,
        enabled: plan.kinds.contains(&FaultKind::Webhook),
    };
    {
        let processor = payments.processor.clone();
        let forger = payments.forger.clone();
        sim.host(PAY, move || {
            let processor = processor.clone();
            let forger = forger.clone();
            async move {
                let genuine = processor.run::<Turmoil>(
                    SocketAddr::from((Ipv4Addr::UNSPECIFIED, PAY_PORT)),
                    std::future::pending(),
                );
                let forged = forger.run::<Turmoil>(
                    SocketAddr::from((Ipv4Addr::UNSPECIFIED, FORGER_PORT)),
                    std::future::pending(),
                );
                let (a, b) = tokio::join!(genuine, forged);
                a?;
                b?;
                Ok(())
            }
        });
    }

    let stores: Vec<SharedStore> = (0..config.clients).map(|_| SharedStore::new()).collect();
    let audit_store = SharedStore::new();
    let auditor_mnemonic = client_core::keys::new_mnemonic(&mut rng)
        .expose()
        .to_owned();
    let host_ctx = |me: usize, store: &SharedStore| {
        Rc::new(HostCtx {
            me,
            seed: config.seed,
            scenario: Rc::clone(&scenario),
            world: Rc::clone(&world),
            trace: trace.clone(),
            store: store.clone(),
            payments: payments.clone(),
            bind_vanity: config.bind_vanity,
        })
    };
    {
        let ctx = host_ctx(config.clients, &audit_store);
        let mnemonic = auditor_mnemonic;
        sim.host(AUDIT, move || {
            let ctx = Rc::clone(&ctx);
            let mnemonic = mnemonic.clone();
            async move {
                auditor_host(ctx, &mnemonic).await;
                Ok(())
            }
        });
    }
    for (i, store) in stores.iter().enumerate() {
        let ctx = host_ctx(i, store);
        sim.host(scenario.accounts[i].host.as_str(), move || {
            let ctx = Rc::clone(&ctx);
            async move {
                client_host(ctx).await;
                Ok(())
            }
        });
    }

    // Step: setup, traffic with faults, heal, liveness.
    let mut next_fault = 0;
    let mut healed = false;
    let mut down: BTreeSet<String> = BTreeSet::new();
    let mut final_jump = false;
    let end_ms;
    loop {
        if let Err(e) = sim.step() {
            violations.push(Violation::new("host-error", e.to_string()));
            end_ms = sim_ms_of(&sim);
            break;
        }
        let now = sim_ms_of(&sim);
        let start = world.borrow().traffic_start_ms;
        let Some(start) = start else {
            if world.borrow().ready.len() == config.clients {
                world.borrow_mut().traffic_start_ms = Some(now);
                trace.push(Record::Note {
                    t_ms: now,
                    text: "setup done: traffic starts".into(),
                });
            } else if now > SETUP_BOUND_MS {
                violations.push(Violation::new(
                    "setup",
                    format!("setup not done within {SETUP_BOUND_MS} ms"),
                ));
                end_ms = now;
                break;
            }
            continue;
        };
        while let Some(fault) = plan.events.get(next_fault)
            && start + fault.at_ms <= now
        {
            apply(&mut sim, &fault.action, &mut down, &relay_clock);
            trace.push(Record::Note {
                t_ms: now,
                text: format!("fault: {}", fault.action),
            });
            next_fault += 1;
        }
        if !healed && now >= start + TRAFFIC_WINDOW_MS {
            heal(&mut sim, &plan, config.clients, &mut down);
            healed = true;
            trace.push(Record::Note {
                t_ms: now,
                text: "healed: liveness phase".into(),
            });
        }
        let end = start + TRAFFIC_WINDOW_MS + LIVENESS_BOUND_MS;
        if !final_jump && now + commerce::FINAL_JUMP_BEFORE_END_MS >= end {
            final_jump = true;
            let late = commerce::in_flight_orders(&payments.processor);
            trace.push(Record::Note {
                t_ms: now,
                text: format!(
                    "final relay clock jump +{} s; orders with webhooks in flight: {late:?}",
                    commerce::FINAL_JUMP_MS / 1_000
                ),
            });
            world.borrow_mut().commerce.audit.late_at_final_jump = late;
            relay_clock.advance(commerce::FINAL_JUMP_MS);
        }
        if now >= end {
            end_ms = now;
            break;
        }
    }
    trace.push(Record::Note {
        t_ms: end_ms,
        text: "end".into(),
    });

    let traffic_start = world.borrow().traffic_start_ms;
    let records = trace.records();
    let second = world.borrow().second_stores.clone();
    let convs = world.borrow().convs.clone();
    let aliases = world.borrow().alias_history.clone();
    let input = oracles::Input {
        scenario: &scenario,
        records: &records,
        stores: &stores,
        second_stores: &second,
        convs: &convs,
        aliases: &aliases,
        relay_store: &relay_store,
    };
    oracles::check_all(&input, &mut violations);
    if !violations.iter().any(|v| v.oracle == "setup") {
        let jumps: Vec<u64> = traffic_start
            .map(|s| plan.clock_jumps().map(|j| s + j).collect())
            .unwrap_or_default();
        let w = world.borrow();
        let commerce_input = oracles::CommerceInput {
            world: &w.commerce,
            alias_history: &w.alias_history,
            records: &records,
            processor: &payments.processor,
            forger: &payments.forger,
            relay_store: &relay_store,
            jumps_ms: &jumps,
            free_quota: relay_config_quota(),
        };
        oracles::check_commerce(&commerce_input, &mut violations);
    }
    let lines = trace::lines(&records);
    let trace_hash = trace::hash(&lines);
    Inner {
        report: RunReport {
            seed: config.seed,
            scenario: scenario.to_string(),
            plan,
            trace: lines,
            trace_hash,
            violations,
            simulated: Duration::from_millis(end_ms),
        },
        canaries: scenario.canaries.clone(),
    }
}

fn sim_ms_of(sim: &turmoil::Sim<'_>) -> u64 {
    u64::try_from(sim.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn relay_config() -> Config {
    Config {
        pow_difficulty: 1,
        registrations_per_hour_per_addr: 1_000,
        msgs_per_min_per_user: 10_000,
        payment_webhook_secret: relay_core::config::WebhookSecret(WEBHOOK_SECRET.to_vec()),
        payment_page_base: format!("http://{PAY}:{PAY_PORT}/invoice"),
        ..Config::default()
    }
}

fn relay_config_quota() -> u32 {
    relay_config().free_channel_quota
}

fn apply(
    sim: &mut turmoil::Sim<'_>,
    action: &FaultAction,
    down: &mut BTreeSet<String>,
    relay_clock: &OffsetClock,
) {
    match action {
        FaultAction::Partition(a, b) => sim.partition(a.as_str(), b.as_str()),
        FaultAction::Repair(a, b) => sim.repair(a.as_str(), b.as_str()),
        FaultAction::PartitionOneway(a, b) => sim.partition_oneway(a.as_str(), b.as_str()),
        FaultAction::RepairOneway(a, b) => sim.repair_oneway(a.as_str(), b.as_str()),
        FaultAction::Hold(a, b) => sim.hold(a.as_str(), b.as_str()),
        FaultAction::Release(a, b) => sim.release(a.as_str(), b.as_str()),
        FaultAction::MaxLatency(ms) => sim.set_max_message_latency(Duration::from_millis(*ms)),
        FaultAction::Crash(h) => {
            if down.insert(h.clone()) {
                sim.crash(h.as_str());
            }
        }
        FaultAction::Restart(h) => {
            if down.remove(h) {
                sim.bounce(h.as_str());
            }
        }
        FaultAction::ClockJump(ms) => {
            relay_clock.advance(*ms);
        }
    }
}

/// Repairs every link, releases every hold, restarts every crashed host, resets latency.
fn heal(sim: &mut turmoil::Sim<'_>, plan: &FaultPlan, clients: usize, down: &mut BTreeSet<String>) {
    for i in 0..clients {
        let c = format!("c{i}");
        sim.repair(c.as_str(), RELAY);
        sim.release(c.as_str(), RELAY);
    }
    sim.repair(PAY, RELAY);
    sim.set_max_message_latency(Duration::from_millis(plan.latency_ms.1));
    for h in std::mem::take(down) {
        sim.bounce(h.as_str());
    }
}

/// What a client host's script needs.
pub(super) struct HostCtx {
    pub(super) me: usize,
    pub(super) seed: u64,
    pub(super) scenario: Rc<Scenario>,
    pub(super) world: Shared,
    pub(super) trace: Trace,
    pub(super) store: SharedStore,
    pub(super) payments: Payments,
    pub(super) bind_vanity: bool,
}

fn endpoint() -> Endpoint {
    Endpoint::parse(&format!("http://{RELAY}:{RELAY_PORT}"))
        .unwrap_or_else(|_| unreachable!("a static, valid base URL"))
}

fn start_client(
    ctx: &HostCtx,
    who: Device,
    store: SharedStore,
    incarnation: u64,
) -> Result<Client<Turmoil>, crate::client::ClientError> {
    let tag = (who.client as u64) << 8 | u64::from(who.device);
    let options = ClientOptions::new(
        endpoint(),
        Arc::new(SimClock::default()),
        derive_seed(ctx.seed, tag, incarnation),
    );
    let client = Client::<Turmoil>::start(store, options)?;
    let trace = ctx.trace.clone();
    client.on(EventKind::Any, move |event| {
        trace.push(Record::Event {
            t_ms: sim_ms(),
            who,
            event: event.clone(),
        });
    });
    Ok(client)
}

pub(super) fn note(ctx: &HostCtx, text: String) {
    ctx.trace.push(Record::Note {
        t_ms: sim_ms(),
        text,
    });
}

/// Registers (fresh store) or restores (restarted host), retrying until the relay answers.
async fn authenticate(client: &Client<Turmoil>, mnemonic: &str, nickname: &str, fresh: bool) {
    loop {
        let done = if fresh {
            client.register_account(mnemonic, nickname).await.is_ok()
        } else {
            client.restore_session().await.is_ok()
        };
        if done {
            return;
        }
        sleep_ms(RETRY_MS).await;
    }
}

/// The script of one client host; runs again from the top after a crash.
async fn client_host(ctx: Rc<HostCtx>) {
    let me = ctx.me;
    let incarnation = {
        let mut w = ctx.world.borrow_mut();
        let n = w.incarnations.entry(me).or_insert(0);
        *n += 1;
        *n
    };
    let who = Device {
        client: me,
        device: 0,
    };
    let Ok(client) = start_client(&ctx, who, ctx.store.clone(), incarnation) else {
        note(&ctx, format!("{who} could not start"));
        return;
    };
    let account = &ctx.scenario.accounts[me];
    let fresh = ctx.store.load_identity().ok().flatten().is_none();
    authenticate(&client, &account.mnemonic, &account.nickname, fresh).await;
    if let Ok(Some(alias)) = client.alias_id().await {
        // A restarted host may still hold the alias a bind retired: the world keeps the
        // newest one.
        let mut w = ctx.world.borrow_mut();
        if let std::collections::btree_map::Entry::Vacant(e) = w.aliases.entry(me) {
            e.insert(alias.clone());
            w.alias_history.insert(me, vec![alias]);
        }
    }
    drop(client.connect().await);
    if !ctx.world.borrow().ready.contains(&me) {
        setup(&ctx, &client).await;
    }
    let audit_at = audit_times(&ctx).await.0;
    let script = async {
        traffic(&ctx, &client).await;
        std::future::pending::<()>().await;
    };
    tokio::join!(script, commerce::bind_loop(&ctx, &client, audit_at));
}

/// `(audit, probes)` in simulated ms, once traffic started.
async fn audit_times(ctx: &HostCtx) -> (u64, u64) {
    wait_until(ctx, |w| w.traffic_start_ms.is_some()).await;
    let end =
        ctx.world.borrow().traffic_start_ms.unwrap_or(0) + TRAFFIC_WINDOW_MS + LIVENESS_BOUND_MS;
    (
        end - commerce::AUDIT_BEFORE_END_MS,
        end - commerce::PROBE_BEFORE_END_MS,
    )
}

/// The commerce auditor: registers its own account, then audits at the end.
async fn auditor_host(ctx: Rc<HostCtx>, mnemonic: &str) {
    let who = Device {
        client: ctx.me,
        device: 0,
    };
    let Ok(client) = start_client(&ctx, who, ctx.store.clone(), 1) else {
        return;
    };
    authenticate(&client, mnemonic, "auditor", true).await;
    let (audit_at, probe_at) = audit_times(&ctx).await;
    commerce::audit(&ctx, &client, audit_at, probe_at).await;
    std::future::pending::<()>().await;
}

async fn wait_until(ctx: &HostCtx, f: impl Fn(&World) -> bool) {
    while !f(&ctx.world.borrow()) {
        sleep_ms(100).await;
    }
}

/// Friend requests, accepts and sessions; idempotent (a crash cannot happen during setup, but
/// a relay answer can be lost, so every step is retried until its effect is visible).
async fn setup(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    let n = ctx.scenario.accounts.len();
    wait_until(ctx, |w| w.aliases.len() == n).await;
    let aliases = ctx.world.borrow().aliases.clone();
    for (_, pair) in ctx.scenario.pairs_of(me).filter(|(_, p)| p.a == me) {
        let to = &aliases[&pair.b];
        while client.contacts().send_friend_request(to).await.is_err() {
            sleep_ms(RETRY_MS).await;
        }
    }
    ctx.world.borrow_mut().requested.insert(me);
    wait_until(ctx, |w| w.requested.len() == n).await;
    let incoming: BTreeSet<String> = ctx
        .scenario
        .pairs_of(me)
        .filter(|(_, p)| p.b == me)
        .map(|(_, p)| aliases[&p.a].clone())
        .collect();
    loop {
        let Ok(friends) = client.contacts().sync_friends().await else {
            sleep_ms(RETRY_MS).await;
            continue;
        };
        let mut pending = 0;
        for f in &friends {
            if incoming.contains(f.alias_id.as_str())
                && f.status != wire::http::FriendStatus::Accepted
            {
                pending += 1;
                drop(
                    client
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
    ctx.world.borrow_mut().accepted.insert(me);
    wait_until(ctx, |w| w.accepted.len() == n).await;
    loop {
        if let Ok(friends) = client.contacts().sync_friends().await {
            let mut all = true;
            for (index, pair) in ctx.scenario.pairs_of(me) {
                let peer = &aliases[&pair.peer(me)];
                let conv = friends
                    .iter()
                    .find(|f| f.alias_id.as_str() == peer)
                    .and_then(|f| f.conversation_id.as_ref());
                match conv {
                    Some(c) => {
                        ctx.world
                            .borrow_mut()
                            .convs
                            .insert(index, c.as_str().to_owned());
                    }
                    None => all = false,
                }
            }
            if all {
                break;
            }
        }
        sleep_ms(RETRY_MS).await;
    }
    ctx.world.borrow_mut().ready.insert(me);
}

/// Runs this client's scripted actions at their times; actions due while the host was down
/// are skipped.
async fn traffic(ctx: &HostCtx, client: &Client<Turmoil>) {
    let me = ctx.me;
    wait_until(ctx, |w| w.traffic_start_ms.is_some()).await;
    let start = ctx.world.borrow().traffic_start_ms.unwrap_or(0);
    let actions: Vec<(usize, _)> = ctx
        .scenario
        .actions
        .iter()
        .enumerate()
        .filter(|(_, a)| a.client == me)
        .map(|(i, a)| (i, a.clone()))
        .collect();
    for (index, action) in actions {
        if ctx
            .world
            .borrow()
            .next_action
            .get(&me)
            .is_some_and(|n| index < *n)
        {
            continue;
        }
        let due = start + action.at_ms;
        let now = sim_ms();
        if due + 1_000 < now {
            note(ctx, format!("c{me} skipped action {index} (host was down)"));
            ctx.world.borrow_mut().next_action.insert(me, index + 1);
            continue;
        }
        sleep_ms(due.saturating_sub(now)).await;
        perform(ctx, client, &action.kind).await;
        ctx.world.borrow_mut().next_action.insert(me, index + 1);
    }
}

async fn perform(ctx: &HostCtx, client: &Client<Turmoil>, kind: &ActionKind) {
    let me = ctx.me;
    let who = Device {
        client: me,
        device: 0,
    };
    let target = |pair: usize| {
        let w = ctx.world.borrow();
        let peer = ctx.scenario.pairs[pair].peer(me);
        (
            w.convs.get(&pair).cloned().unwrap_or_default(),
            w.aliases.get(&peer).cloned().unwrap_or_default(),
        )
    };
    match kind {
        ActionKind::Send { pair, text } => {
            let (conv, peer) = target(*pair);
            match client.send_message(&conv, &peer, text, None).await {
                Ok(id) => ctx.trace.push(Record::Sent {
                    t_ms: sim_ms(),
                    who,
                    id,
                    conv,
                }),
                Err(e) => note(ctx, format!("{who} send refused: {e}")),
            }
        }
        ActionKind::Read { pair } => {
            let (conv, peer) = target(*pair);
            let history = client
                .get_history(&conv, None, None)
                .await
                .unwrap_or_default();
            let Some(seq) = history
                .iter()
                .filter(|m| !m.is_me)
                .filter_map(|m| m.seq)
                .max()
            else {
                return;
            };
            match client.mark_as_read(&conv, seq, &peer).await {
                Ok(()) => ctx.trace.push(Record::ReadMarked {
                    t_ms: sim_ms(),
                    who,
                    conv,
                    seq,
                }),
                Err(e) => note(ctx, format!("{who} read refused: {e}")),
            }
        }
        ActionKind::Typing { pair } => {
            let (conv, peer) = target(*pair);
            drop(client.send_typing(&conv, &peer).await);
        }
        ActionKind::Retract { pair } => {
            let (conv, peer) = target(*pair);
            let history = client
                .get_history(&conv, None, None)
                .await
                .unwrap_or_default();
            let Some(m) = history
                .iter()
                .rev()
                .find(|m| m.is_me && m.seq.is_some() && m.msg_type.is_none())
            else {
                return;
            };
            match client.retract_message(&m.id, &peer, &conv).await {
                Ok(()) => note(ctx, format!("{who} retracted {}", m.id)),
                Err(e) => note(ctx, format!("{who} retract refused: {e}")),
            }
        }
        ActionKind::SecondDevice { stay_ms } => second_device(ctx, client, *stay_ms).await,
        ActionKind::BuyAlias { alias, pay } => commerce::buy_alias(ctx, client, alias, *pay).await,
        ActionKind::CreateChannel { price_usdt } => {
            commerce::create_channel(ctx, client, *price_usdt).await;
        }
        ActionKind::BuyChannel { slot, pay } => {
            commerce::buy_channel(ctx, client, *slot, *pay).await;
        }
        ActionKind::BuyQuota { pay } => commerce::buy_quota(ctx, client, *pay).await,
    }
}

/// Another device logs into the same account (GOAWAY to the first), stays, leaves; then the
/// first device takes the session back.
async fn second_device(ctx: &HostCtx, client: &Client<Turmoil>, stay_ms: u64) {
    let me = ctx.me;
    let who = Device {
        client: me,
        device: 1,
    };
    let store = SharedStore::new();
    let incarnation = {
        let mut w = ctx.world.borrow_mut();
        w.second_stores.push((who, store.clone()));
        w.second_stores.len() as u64
    };
    let Ok(second) = start_client(ctx, who, store, incarnation) else {
        return;
    };
    let account = &ctx.scenario.accounts[me];
    let login = async {
        authenticate(&second, &account.mnemonic, &account.nickname, true).await;
        drop(second.connect().await);
        drop(second.contacts().sync_friends().await);
    };
    // The login may not finish (relay down, partition): give up when the stay ends.
    tokio::select! {
        biased;
        () = login => sleep_ms(stay_ms).await,
        () = sleep_ms(stay_ms) => {}
    }
    second.shutdown().await;
    note(ctx, format!("{who} left"));
    drop(client.connect().await);
}

/// A `MakeWriter` collecting every formatted log line in memory.
#[derive(Debug, Clone, Default)]
pub(super) struct LogCapture {
    buf: Arc<std::sync::Mutex<Vec<u8>>>,
}

impl LogCapture {
    fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .buf
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = Self;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

//! The drill host `t0`: raw clients (no client library) with accounts of their own that drive
//! the relay to the places the honest traffic never goes, each with an exact expectation.
//! Which drills run is part of the replay ([`Drill::of_class`] by default; see
//! [`crate::class`]); they run one after the other once traffic started.
//!
//! | drill | classes | what it does | oracle |
//! |---|---|---|---|
//! | `tokenless` | all | every route the documents mark JWT, asked with no token at all, and the WebSocket upgrade with neither token nor ticket; a ticket presented as an auth challenge and a challenge as a ticket | `authz` (a 2xx, a token or a 101), `tokenless` (a 4xx other than 401) |
//! | `values` | all | requests of the right shape whose values are wrong, on every family of routes (registration, the WebSocket upgrade, calls, contacts, vanity, media, channels, the signed webhook, `msg`) | `values`: the documented status and code (see `values`) |
//! | `lookups` | all | `GET users/{alias}` of every account that exists (honest clients', strangers', the drill's own, every alias a bind gave) and of aliases that do not | `lookup`: the owner's nickname and keys, 404 for the rest |
//! | `tokens` | days | a token presented within its lifetime and after it, across the world's idle stretches | `expiry`: 2xx within, 401 `TOKEN_EXPIRED` after |
//! | `ages` | days | messages queued at known times to a recipient that stays away across the idle stretches, then syncs | `expiry`: what outlived its TTL on the relay's clock never arrives, the rest arrives once |
//! | `heavy-author` | heavy | hundreds of messages of one author, the relay power-cycled, then old ids re-sent, an old message retracted by its author and by the other member | `dedup`: a re-sent id gets its first seq and no second delivery; `authz`: only the author retracts |
//! | `many-queues` | heavy | eight accounts, every pair befriended, each queueing messages for every other while all are away (56 queues); the relay power-cycled; half come back, the rest after the relay's clock passed the TTL | `dedup`: each of the first half gets its messages once, with their seqs; `expiry`: the rest get none of them (and the store oracle, none is left stored) |
//! | `unreadable` | heavy | `storage/estimate` and a call signal, each over one failing read of the store (the queue, the callee's account), then again | `reads`: 503 / an error frame `STORAGE_UNAVAILABLE` or the right answer, never both; asked again, the right answer (the estimate counts exactly what was acknowledged) |
//! | `push-off` | heavy | an account registers an FCM token, turns push off, the relay is power-cycled, then a friend messages it (never connected) | `push-off`: no push reaches the token |
//! | `credentials` | heavy | an auth challenge and a WebSocket ticket issued before a power cycle and first used after it; then used again | `credentials`: accepted once after the restart; `authz`: refused the second time |
//! | `lifetimes` | all | a WebSocket ticket and an auth challenge each presented just inside its lifetime and another just past it (30 s, 2 min, on the relay's clock) | `credentials`: taken inside, refused past |
//! | `budgets` | limits | each request budget (lookups, friend requests, every other authenticated route, public routes) used up, then the relay's clock moved by one token's refill | `limit-exact`: exactly the burst, then 429 `RATE_LIMITED`, then exactly one more |
//! | `message-rate` | limits | the per-user message limit filled, the relay power-cycled within the window, then the window passed | `limit-exact`: the next message refused after the restart too, allowed once the window (from its first message) passed |
//! | `queues` | limits | each offline-queue bound filled (per conversation in messages and bytes, per recipient, per sender) | `limit-exact`: exactly at the bound the documented code and no ack; after the recipient drains, accepted again |
//! | `push-policy` | limits | Web Push endpoints a production relay must refuse (private, loopback, link-local, shared, IPv4-embedding IPv6, numeric forms, local names, names it cannot resolve, `http://`) and a public one it must take | `push-policy`: 400 with the documented code, 2xx for the public one |
//! | `windows` | limits | the relay's fixed windows at their constants: media upload inits a minute, then unfinished uploads; auth challenges used up, then a new minute; a burst of typing notices, then of call signals on one connection | `limit-exact`: exactly the allowance, then 429 `RATE_LIMITED` / 403 `QUOTA_EXCEEDED`; the peer hears exactly the typing allowance and the call-signal allowance, the caller one `RATE_LIMITED` error frame per excess signal |
//! | `spent-full` | limits | one account's WebSocket tickets redeemed until its spent credentials reach the bound per account, then another account's ticket, then the clock moved past their lifetime | `limit-exact`: 429 once full, never more remembered than the bound (the store's rows), the other account not refused, upgrades again once they expired |
//!
//! A drill's step that a fault disturbed (the relay powered off or replaced, its clock moved
//! by a fault, a store fault of the plan or a failed store read, a request unanswered or answered 5xx) is not judged; every drill counts what it
//! judged (the world's `DrillLog`), and a drill that judged nothing on a run without relay faults is a
//! `drills` violation: it did not happen.
//!
//! Modules: `peer` (accounts, sockets and messages by hand), `routes` (`tokenless`,
//! `lookups`), `values`, `days` (`tokens`, `ages`), `heavy` (`heavy-author`, `credentials`,
//! `many-queues`), `reads` (`unreadable`), `push_off`, `limits`
//! (`budgets`, `message-rate`, `queues`), `windows` (`windows`, `spent-full`), `push_policy`.

mod days;
mod heavy;
mod limits;
mod peer;
mod push_off;
mod push_policy;
mod reads;
mod routes;
mod values;
mod windows;

use std::collections::BTreeMap;
use std::rc::Rc;

pub use crate::class::Drill;
use crate::time::{sim_ms, sleep_ms};
use crate::violation::{Oracle, Violation};
use crate::world::{HostCtx, RunnerRequest, World, note, wait_until};

pub(crate) use self::peer::DrillAccount;

/// Host name of the drill host.
pub const DRILL_HOST: &str = "t0";

/// What one drill run tells the log.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    judged: u64,
    unjudged: u64,
    findings: Vec<Violation>,
}

impl Outcome {
    /// One check judged, breached when `breach` is `Some` (the oracle and what happened).
    pub(crate) fn check(&mut self, breach: Option<Violation>) {
        self.judged += 1;
        self.findings.extend(breach);
    }

    /// One check judged that failed (`oracle`, `detail`) unless `ok`.
    pub(crate) fn expect(&mut self, ok: bool, oracle: Oracle, detail: impl FnOnce() -> String) {
        self.check((!ok).then(|| Violation::new(oracle, detail())));
    }

    /// A step a fault disturbed: nothing judged.
    pub(crate) fn skip(&mut self) {
        self.unjudged += 1;
    }

    /// Adds `other`'s counts and findings.
    pub(crate) fn merge(&mut self, other: Self) {
        self.judged += other.judged;
        self.unjudged += other.unjudged;
        self.findings.extend(other.findings);
    }
}

/// How the relay stood when a step began, to tell afterwards whether a fault came between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Calm {
    power_offs: usize,
    jumps: usize,
    relay: String,
    store_faults: u64,
    failed_reads: u64,
    crossings_faulted: u64,
    /// Shard moves between cluster nodes (a shard's new core refuses what needs the other
    /// shards' levels until it has them).
    shard_moves: u64,
}

impl Calm {
    /// The relay's state now.
    pub(crate) fn now(ctx: &HostCtx) -> Self {
        let w = ctx.world.borrow();
        Self {
            power_offs: w.relay_off_ms.len(),
            jumps: w.relay_jumps.len(),
            relay: w.active_relay(),
            store_faults: w.store_faults,
            failed_reads: w.store_failed_reads,
            crossings_faulted: w.crossings_faulted(),
            shard_moves: w.shard_moves(),
        }
    }

    /// Whether the relay's clock moved only as simulated time does since `self` (no jump).
    pub(crate) fn clock_held(&self, ctx: &HostCtx) -> bool {
        self.clock_held_but(ctx, 0)
    }

    /// Whether the relay's clock jumped since `self` only the `own_jumps` times the drill
    /// asked for.
    pub(crate) fn clock_held_but(&self, ctx: &HostCtx, own_jumps: usize) -> bool {
        Self::now(ctx).jumps == self.jumps + own_jumps
    }

    /// Whether nothing happened to the relay since `self` (no power-off, takeover, store
    /// fault of the plan, failed store read, crossing between its cores lost, repeated or
    /// delayed, shard moved between cluster nodes, or clock jump) but the clock jumps the drill itself asked for
    /// (`own_jumps`).
    pub(crate) fn held(&self, ctx: &HostCtx, own_jumps: usize) -> bool {
        self.held_but_reads(ctx, own_jumps, 0)
    }

    /// [`held`](Self::held), but for at most `own_reads` failed store reads (those the drill
    /// itself asked for).
    pub(crate) fn held_but_reads(&self, ctx: &HostCtx, own_jumps: usize, own_reads: u64) -> bool {
        let now = Self::now(ctx);
        now.power_offs == self.power_offs
            && now.relay == self.relay
            && now.store_faults == self.store_faults
            && now.failed_reads <= self.failed_reads + own_reads
            && now.crossings_faulted == self.crossings_faulted
            && now.shard_moves == self.shard_moves
            && now.jumps == self.jumps + own_jumps
    }
}

/// What every drill is given.
pub(crate) struct Drills<'a> {
    pub(crate) ctx: &'a HostCtx,
    /// The relay's configuration in this run (the drills know its limits).
    pub(crate) config: &'a relay_core::Config,
    /// The drill's accounts, registered on first use.
    accounts: BTreeMap<u64, DrillAccount>,
}

impl Drills<'_> {
    /// Drill account `n` (registered, or logged in again after a restart of the drill host).
    pub(crate) async fn account(&mut self, n: u64) -> DrillAccount {
        if let Some(a) = self.accounts.get(&n) {
            return a.clone();
        }
        let a = DrillAccount::register(self.ctx.seed, n).await;
        self.accounts.insert(n, a.clone());
        a
    }

    /// Asks the runner to power-cycle the relay and waits until it serves again; `false` when
    /// it did not come back within the bound, or the traffic window is over (after healing
    /// the relay is left alone: the liveness oracles hold it to a healthy network).
    pub(crate) async fn power_cycle(&self, down_ms: u64) -> bool {
        if self.healed() {
            return false;
        }
        let before = self.ctx.world.borrow().relay_off_ms.len();
        self.ctx
            .world
            .borrow_mut()
            .runner_requests
            .push_back(RunnerRequest::PowerCycleRelay { down_ms });
        wait_until(self.ctx, |w: &World| w.relay_off_ms.len() > before).await;
        peer::relay_answers(down_ms + 20_000).await
    }

    /// Whether the traffic window is over (the faults healed).
    pub(crate) fn healed(&self) -> bool {
        self.ctx.world.borrow().heal_ms.is_some()
    }

    /// Asks the runner to move the relay's clock `ms` forward, and waits for it; `false` (and
    /// nothing moved) once the traffic window is over.
    pub(crate) async fn jump(&self, ms: u64) -> bool {
        if self.healed() {
            return false;
        }
        let before = self.ctx.world.borrow().relay_jumps.len();
        self.ctx
            .world
            .borrow_mut()
            .runner_requests
            .push_back(RunnerRequest::JumpRelayClock { ms });
        wait_until(self.ctx, |w: &World| w.relay_jumps.len() > before).await;
        true
    }

    /// Asks the runner to fail the store's next read of `table`; whether it was armed
    /// (`false`: the traffic window is over, or failing reads of the plan are pending).
    pub(crate) async fn fail_reads(&self, table: relay_core::store::Table) -> bool {
        if self.healed() {
            return false;
        }
        let before = {
            let mut w = self.ctx.world.borrow_mut();
            w.runner_requests
                .push_back(RunnerRequest::FailRead { table });
            w.drill_reads_armed
        };
        wait_until(self.ctx, |w: &World| w.runner_requests.is_empty()).await;
        self.ctx.world.borrow().drill_reads_armed > before
    }

    /// The relay's clock elapsed since simulated time `from`.
    pub(crate) fn relay_since(&self, from: u64) -> u64 {
        self.ctx.world.borrow().relay_elapsed(from, sim_ms())
    }
}

/// The script of the drill host: waits for traffic, then runs `drills` in order, but for
/// `tokens`, `lifetimes` and `lookups` (which mostly wait: for the clock's stretches, for
/// lifetimes to run out, for the binds to settle), which run beside the others.
pub(crate) async fn drill_host(ctx: Rc<HostCtx>, drills: Vec<Drill>, config: relay_core::Config) {
    wait_until(&ctx, |w| w.traffic_start_ms.is_some()).await;
    // Let the honest clients' first traffic settle (a drill's exact counts are its own).
    sleep_ms(2_000).await;
    let (beside, in_order): (Vec<Drill>, Vec<Drill>) = drills
        .into_iter()
        .partition(|d| matches!(d, Drill::Tokens | Drill::Lookups | Drill::Lifetimes));
    let run = |list: Vec<Drill>| {
        let ctx = Rc::clone(&ctx);
        let config = config.clone();
        async move {
            let mut d = Drills {
                ctx: &ctx,
                config: &config,
                accounts: BTreeMap::new(),
            };
            for drill in list {
                run_one(&mut d, drill).await;
            }
        }
    };
    let mut tracks = vec![run(in_order)];
    tracks.extend(beside.into_iter().map(|d| run(vec![d])));
    futures_util::future::join_all(tracks).await;
}

/// Runs one drill and logs what it did.
async fn run_one(d: &mut Drills<'_>, drill: Drill) {
    let ctx = d.ctx;
    note(ctx, format!("{DRILL_HOST} drill {drill} starts"));
    let outcome = match drill {
        Drill::Tokenless => routes::tokenless(d).await,
        Drill::Lookups => routes::lookups(d).await,
        Drill::Tokens => days::tokens(d).await,
        Drill::Ages => days::ages(d).await,
        Drill::HeavyAuthor => heavy::heavy_author(d).await,
        Drill::Credentials => heavy::credentials(d).await,
        Drill::Budgets => limits::budgets(d).await,
        Drill::MessageRate => limits::message_rate(d).await,
        Drill::Queues => limits::queues(d).await,
        Drill::PushPolicy => push_policy::push_policy(d).await,
        Drill::SpentFull => windows::spent_full(d).await,
        Drill::Windows => windows::windows(d).await,
        Drill::ManyQueues => heavy::many_queues(d).await,
        Drill::Lifetimes => heavy::lifetimes(d).await,
        Drill::Values => values::values(d).await,
        Drill::Unreadable => reads::unreadable(d).await,
        Drill::PushOff => push_off::push_off(d).await,
    };
    note(
        ctx,
        format!(
            "{DRILL_HOST} drill {drill} done: {} judged, {} unjudged, {} found",
            outcome.judged,
            outcome.unjudged,
            outcome.findings.len()
        ),
    );
    let mut w = ctx.world.borrow_mut();
    *w.drills.judged.entry(drill).or_default() += outcome.judged;
    *w.drills.unjudged.entry(drill).or_default() += outcome.unjudged;
    w.drills.findings.extend(outcome.findings);
    w.drills.finished.push(drill);
}

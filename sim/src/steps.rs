//! A world of named users whose steps you write: each user is the project's async client
//! (`client::Client`) on its own simulated host, registered against a relay host, and runs
//! your async Rust against the client API, concurrently with the others; faults happen at
//! the moments you choose. Everything is seeded by one number: the same world gives the same
//! trace (every client event of every user and every note, with its simulated time), and the
//! same hash. [`StepsRun::check_all`] fails with every user's error and the command that
//! runs the test again.
//!
//! ```no_run
//! use sim::steps::{StepFault, Steps};
//!
//! let run = Steps::new(5)
//!     .user("alice", |alice| async move {
//!         let conv = alice.befriend("bob").await;
//!         let bob = alice.alias_of("bob").await;
//!         alice.client().send_message(&conv, &bob, "hello", None).await.map_err(|e| e.to_string())?;
//!         Ok(())
//!     })
//!     .user("bob", |bob| async move {
//!         bob.befriend("alice").await;
//!         bob.wait_for(|event| event.contains("hello")).await;
//!         Ok(())
//!     })
//!     .fault_at(300, StepFault::Hold("alice".into(), "relay".into()))
//!     .fault_at(1_300, StepFault::Release("alice".into(), "relay".into()))
//!     .run();
//! run.check_all();
//! ```
//!
//! The relay, on host `relay`, runs the test relay's configuration of `relay_server::embedded`
//! (proof of work at its lowest, test mode) on the simulated clock (which a fault can jump
//! forward), over `relay_core`'s memory store or SQLite ([`StepsRelay`]), which outlive its
//! power-offs. Not here (yet): a failover pair under the users' steps, and the main sweep's
//! oracles that need a drawn scenario (they judge [`crate::harness`] worlds).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use client::{Client, ClientEvent, ClientOptions, EventKind, SharedStore};
use client_core::store::MessageStatus;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use relay_core::store::{MemoryStore, SqliteStore};
use relay_core::{MemoryBlobStore, Relay};
use relay_server::embedded::{TestClock, TestRelayOptions};
use relay_server::{CommitMode, ReadMode, RelayServer};
use seam::clock::{OffsetClock, SimClock};
use seam::net::{Endpoint, Turmoil};

use crate::bounds::{RELAY, RELAY_PORT};
use crate::seeds::{TAG_STEPS, derive_seed, derive_u64};
use crate::time::{SkewClock, sim_ms, sleep_ms};
use crate::violation::{Oracle, Violation};

/// How often a step that waits (for another user, a friendship, an event) looks again.
const POLL_MS: u64 = 50;
/// The simulated time a world may take before it is stopped as stuck.
const LIMIT_S: u64 = 600;

/// A fault at a chosen moment (simulated ms from the start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepFault {
    /// Both directions between two hosts (a user's name, or `relay`) drop segments.
    Partition(String, String),
    /// Ends a partition.
    Repair(String, String),
    /// Segments between two hosts are queued, not lost.
    Hold(String, String),
    /// Delivers the held segments.
    Release(String, String),
    /// The relay host powers off (its store stays).
    PowerOffRelay,
    /// The relay host starts again, on its store.
    PowerOnRelay,
    /// The relay's next `n` commits fail (fail-stop, then a rebuild from the store); memory
    /// relay only.
    FailCommits(u32),
    /// The relay's next `n` keyed store reads fail; memory relay only.
    FailReads(u32),
    /// From now on every keyed read of the relay's store waits this many ms (0: fast again);
    /// the relay serves everyone else meanwhile.
    SlowReads(u64),
    /// From now on every commit of the relay waits this many ms before it is applied (0: fast
    /// again); the relay goes on with the next batch meanwhile.
    SlowCommits(u64),
    /// The relay's clock jumps this many ms forward (an NTP step: tokens, holds and messages
    /// may expire); the users' clocks do not move.
    RelayClockJump(u64),
}

/// What the relay host's faults reach: its memory store and the waits of its reads and
/// commits.
#[derive(Debug, Clone)]
struct RelayKnobs {
    store: MemoryStore,
    clock: OffsetClock,
    read_ms: Arc<AtomicU64>,
    commit_ms: Arc<AtomicU64>,
}

/// The relay under the users' steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepsRelay {
    /// `relay_core`'s memory store (it outlives a power-off; takes storage faults).
    #[default]
    Memory,
    /// SQLite on a temporary file, reopened at every start.
    Sqlite,
}

/// What a user's steps return: `Err` fails the run with the message.
pub type StepResult = Result<(), String>;

type StepsFn = Box<dyn FnOnce(User) -> Pin<Box<dyn Future<Output = StepResult>>>>;

/// What the users' apps showed, for the oracles: each message id with every user whose app
/// showed it, and each message whose sender's app showed it delivered or read.
#[derive(Debug, Default)]
struct Observed {
    shown: BTreeMap<String, Vec<String>>,
    receipted: BTreeMap<String, String>,
}

impl Observed {
    /// Records `event` of user `name`'s app.
    fn record(&mut self, name: &str, event: &ClientEvent) {
        match event {
            ClientEvent::Message(m) => {
                self.shown
                    .entry(m.id.clone())
                    .or_default()
                    .push(name.to_owned());
            }
            ClientEvent::StatusChange {
                id,
                status: MessageStatus::Delivered | MessageStatus::Read,
            } => {
                self.receipted.insert(id.clone(), name.to_owned());
            }
            _ => {}
        }
    }

    /// The main sweep's app-level oracles that hold for any steps: no app shows a message
    /// twice (`delivered-exactly-once`), and no sender sees a message delivered or read that
    /// no other app showed (`receipts`: a receipt the relay made up).
    fn violations(&self) -> Vec<Violation> {
        let mut out = Vec::new();
        for (id, users) in &self.shown {
            let mut seen = users.clone();
            seen.sort();
            seen.dedup();
            if seen.len() != users.len() {
                out.push(Violation::new(
                    Oracle::DeliveredExactlyOnce,
                    format!("message {id} shown more than once: {users:?}"),
                ));
            }
        }
        for (id, sender) in &self.receipted {
            let shown_elsewhere = self
                .shown
                .get(id)
                .is_some_and(|users| users.iter().any(|u| u != sender));
            if !shown_elsewhere {
                out.push(Violation::new(
                    Oracle::Receipts,
                    format!("{sender} saw message {id} delivered, but no other app showed it"),
                ));
            }
        }
        out
    }
}

/// What the users of a world share: the trace and who registered under which alias.
#[derive(Debug, Default)]
struct Shared {
    trace: Vec<String>,
    aliases: BTreeMap<String, String>,
    /// Users whose steps returned.
    finished: usize,
}

/// A world of named users and their steps, described before it runs.
pub struct Steps {
    seed: u64,
    relay: StepsRelay,
    users: Vec<(String, StepsFn)>,
    faults: Vec<(u64, StepFault)>,
}

impl fmt::Debug for Steps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let users: Vec<&str> = self.users.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Steps")
            .field("seed", &self.seed)
            .field("relay", &self.relay)
            .field("users", &users)
            .field("faults", &self.faults)
            .finish()
    }
}

impl Steps {
    /// An empty world of `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            relay: StepsRelay::Memory,
            users: Vec::new(),
            faults: Vec::new(),
        }
    }

    /// A user named `name` (also its host's name) running `steps` once registered.
    #[must_use]
    pub fn user<F, Fut>(mut self, name: &str, steps: F) -> Self
    where
        F: FnOnce(User) -> Fut + 'static,
        Fut: Future<Output = StepResult> + 'static,
    {
        assert!(name != RELAY, "`{RELAY}` is the relay's host");
        self.users
            .push((name.to_owned(), Box::new(move |u| Box::pin(steps(u)))));
        self
    }

    /// The relay's store (memory by default).
    #[must_use]
    pub fn relay(mut self, relay: StepsRelay) -> Self {
        self.relay = relay;
        self
    }

    /// A fault `at_ms` simulated ms after the start.
    #[must_use]
    pub fn fault_at(mut self, at_ms: u64, fault: StepFault) -> Self {
        self.faults.push((at_ms, fault));
        self
    }

    /// Runs the world until every user's steps ended (or failed); see [`StepsRun`].
    pub fn run(self) -> StepsRun {
        let shared = Rc::new(RefCell::new(Shared::default()));
        let observed: Arc<Mutex<Observed>> = Arc::default();
        let mut sim = turmoil::Builder::new()
            .rng_seed(self.seed)
            .tick_duration(Duration::from_millis(4))
            .simulation_duration(Duration::from_secs(LIMIT_S))
            .build();
        let knobs = RelayKnobs::new();
        let sqlite_dir = match self.relay {
            StepsRelay::Memory => None,
            StepsRelay::Sqlite => Some(tempfile::tempdir().expect("a temporary directory")),
        };
        add_relay(
            &mut sim,
            derive_u64(self.seed, TAG_STEPS, 0),
            &knobs,
            sqlite_dir.as_ref().map(|d| d.path().join("relay.sqlite3")),
        );
        let users = self.users.len();
        for (index, (name, steps)) in self.users.into_iter().enumerate() {
            let user = UserSetup {
                name: name.clone(),
                seed: self.seed,
                index: index as u64 + 1,
                shared: Rc::clone(&shared),
                observed: Arc::clone(&observed),
            };
            sim.client(name.as_str(), async move {
                let user = user.start().await?;
                let online = Online {
                    _client: user.client.clone(),
                    pending: Arc::clone(&user.pending),
                    shared: Rc::clone(&user.shared),
                };
                steps(user).await?;
                online.until_all_finished(users).await;
                Ok(())
            });
        }
        let mut faults = self.faults;
        faults.sort_by_key(|(at, _)| *at);
        assert!(
            self.relay == StepsRelay::Memory
                || !faults
                    .iter()
                    .any(|(_, f)| matches!(f, StepFault::FailCommits(_) | StepFault::FailReads(_))),
            "storage faults need the memory relay"
        );
        let failure = drive(&mut sim, &faults, &knobs);
        let mut trace = std::mem::take(&mut shared.borrow_mut().trace);
        // Each user's lines reach the trace when its steps next wait: ordered by time here.
        trace.sort_by_key(|line| {
            line.split_whitespace()
                .next()
                .and_then(|ms| ms.parse::<u64>().ok())
                .unwrap_or(u64::MAX)
        });
        let hash = crate::trace::hash(&trace);
        let violations = lock(&observed).violations();
        StepsRun {
            seed: self.seed,
            trace,
            hash,
            failure,
            violations,
        }
    }
}

impl RelayKnobs {
    fn new() -> Self {
        Self {
            store: MemoryStore::new(),
            clock: OffsetClock::new(Arc::new(SimClock::default())),
            read_ms: Arc::default(),
            commit_ms: Arc::default(),
        }
    }
}

/// The relay host: the test relay's configuration and test mode on the simulated clock, over
/// the knobs' memory store or the SQLite file `sqlite`, both outliving every power-off; its
/// reads and commits on tasks of the host's runtime (deterministic), each after the knobs'
/// wait.
fn add_relay(sim: &mut turmoil::Sim<'_>, seed: u64, knobs: &RelayKnobs, sqlite: Option<PathBuf>) {
    let options = TestRelayOptions {
        listen: SocketAddr::from((Ipv4Addr::UNSPECIFIED, RELAY_PORT)),
        seed,
        clock: TestClock::Sim,
        ..TestRelayOptions::default()
    };
    let (store, blobs) = (knobs.store.clone(), MemoryBlobStore::new());
    let (read_ms, commit_ms) = (Arc::clone(&knobs.read_ms), Arc::clone(&knobs.commit_ms));
    let clock = knobs.clock.clone();
    sim.host(RELAY, move || {
        let (config, store, blobs, sqlite) = (
            options.config(),
            store.clone(),
            blobs.clone(),
            sqlite.clone(),
        );
        let listen = options.listen;
        let (read_ms, commit_ms) = (Arc::clone(&read_ms), Arc::clone(&commit_ms));
        let clock = clock.clone();
        async move {
            let server = match sqlite {
                None => RelayServer::in_memory(config, seed, store, blobs),
                Some(path) => RelayServer::new(move || {
                    let store = SqliteStore::open(&path)?;
                    Relay::with_blobs(
                        config.clone(),
                        Box::new(store),
                        Box::new(blobs.clone()),
                        seed,
                    )
                }),
            };
            server
                .with_test_mode()
                .with_clock(clock)
                .with_read_mode(ReadMode::Task {
                    delay: Some(Arc::new(move || read_ms.load(Ordering::Relaxed))),
                })
                .with_commit_mode(CommitMode::Task {
                    delay: Some(Arc::new(move |_| commit_ms.load(Ordering::Relaxed))),
                })
                .run::<Turmoil>(listen, std::future::pending())
                .await?;
            Ok(())
        }
    });
}

/// Steps `sim` to its end, applying each fault at its moment; the error that ended it early.
fn drive(
    sim: &mut turmoil::Sim<'_>,
    faults: &[(u64, StepFault)],
    knobs: &RelayKnobs,
) -> Option<String> {
    let mut next = 0;
    loop {
        let now = u64::try_from(sim.elapsed().as_millis()).unwrap_or(u64::MAX);
        while let Some((_, fault)) = faults.get(next).filter(|(at, _)| *at <= now) {
            match fault {
                StepFault::Partition(a, b) => sim.partition(a.as_str(), b.as_str()),
                StepFault::Repair(a, b) => sim.repair(a.as_str(), b.as_str()),
                StepFault::Hold(a, b) => sim.hold(a.as_str(), b.as_str()),
                StepFault::Release(a, b) => sim.release(a.as_str(), b.as_str()),
                StepFault::PowerOffRelay => sim.crash(RELAY),
                StepFault::PowerOnRelay => sim.bounce(RELAY),
                StepFault::FailCommits(n) => knobs.store.fail_commits(*n),
                StepFault::FailReads(n) => knobs.store.fail_reads(*n),
                StepFault::SlowReads(ms) => knobs.read_ms.store(*ms, Ordering::Relaxed),
                StepFault::SlowCommits(ms) => knobs.commit_ms.store(*ms, Ordering::Relaxed),
                StepFault::RelayClockJump(ms) => {
                    knobs.clock.advance(*ms);
                }
            }
            next += 1;
        }
        match sim.step() {
            Ok(true) => return None,
            Ok(false) => {}
            Err(e) => return Some(e.to_string()),
        }
    }
}

/// A user's client kept online after its steps returned, as an app stays open: until every
/// user's steps returned (its receipts, resends and acknowledgements still flow meanwhile).
struct Online {
    _client: Client<Turmoil>,
    pending: Arc<Mutex<Vec<String>>>,
    shared: Rc<RefCell<Shared>>,
}

impl Online {
    async fn until_all_finished(self, users: usize) {
        self.shared.borrow_mut().finished += 1;
        loop {
            let lines = std::mem::take(&mut *lock(&self.pending));
            let all_finished = {
                let mut shared = self.shared.borrow_mut();
                shared.trace.extend(lines);
                shared.finished >= users
            };
            if all_finished {
                return;
            }
            sleep_ms(POLL_MS).await;
        }
    }
}

/// What a user's host starts with.
struct UserSetup {
    name: String,
    seed: u64,
    index: u64,
    shared: Rc<RefCell<Shared>>,
    observed: Arc<Mutex<Observed>>,
}

impl UserSetup {
    /// Starts the user's client, every event into the trace, and registers its account
    /// (retrying until the relay answers).
    async fn start(self) -> Result<User, String> {
        let endpoint = Endpoint::parse(&format!("http://{RELAY}:{RELAY_PORT}"))
            .map_err(|e| format!("the relay's address: {e}"))?;
        let options = ClientOptions::new(
            endpoint,
            Arc::new(SkewClock::default()),
            derive_seed(self.seed, TAG_STEPS, self.index),
        );
        let client = Client::<Turmoil>::start(SharedStore::new(), options)
            .map_err(|e| format!("{}: starting the client: {e}", self.name))?;
        let events = Arc::new(Mutex::new(Vec::new()));
        let (name, seen) = (self.name.clone(), Arc::clone(&events));
        let trace = Rc::clone(&self.shared);
        let pending: Arc<Mutex<Vec<String>>> = Arc::default();
        let queued = Arc::clone(&pending);
        let observed = Arc::clone(&self.observed);
        client.on(EventKind::Any, move |event| {
            lock(&observed).record(&name, event);
            let line = format!("{:>8} {name}: {event:?}", sim_ms());
            lock(&seen).push(line.clone());
            lock(&queued).push(line);
        });
        let mut rng = ChaCha20Rng::from_seed(derive_seed(self.seed, TAG_STEPS, self.index << 32));
        let mnemonic = client_core::keys::new_mnemonic(&mut rng)
            .expose()
            .to_owned();
        let alias = loop {
            match client.register_account(&mnemonic, &self.name).await {
                Ok(alias) => break alias,
                Err(_) => sleep_ms(POLL_MS).await,
            }
        };
        while client.connect().await.is_err() {
            sleep_ms(POLL_MS).await;
        }
        let user = User {
            name: self.name,
            alias,
            client,
            shared: trace,
            events,
            pending,
        };
        user.flush();
        user.note(format!("registered as {}", user.alias));
        user.shared
            .borrow_mut()
            .aliases
            .insert(user.name.clone(), user.alias.clone());
        Ok(user)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One named user: its registered client and what the world shares. The client stays online
/// after the user's steps return, until every user's steps returned (as an app stays open).
pub struct User {
    name: String,
    alias: String,
    client: Client<Turmoil>,
    shared: Rc<RefCell<Shared>>,
    /// Every event line of this user's client so far.
    events: Arc<Mutex<Vec<String>>>,
    /// Event lines not yet in the trace (the client's callback cannot reach the `Rc`).
    pending: Arc<Mutex<Vec<String>>>,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("alias", &self.alias)
            .finish_non_exhaustive()
    }
}

impl User {
    /// The user's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The user's alias id on the relay.
    pub fn alias(&self) -> &str {
        &self.alias
    }

    /// The user's client: every call of the project's async client API.
    pub fn client(&self) -> &Client<Turmoil> {
        &self.client
    }

    /// Moves this user's new event lines into the trace.
    fn flush(&self) {
        let lines = std::mem::take(&mut *lock(&self.pending));
        self.shared.borrow_mut().trace.extend(lines);
    }

    /// A line of your own in the trace (it counts in the hash).
    pub fn note(&self, text: impl Into<String>) {
        self.flush();
        let line = format!("{:>8} {}: {}", sim_ms(), self.name, text.into());
        self.shared.borrow_mut().trace.push(line);
    }

    /// Sleeps `ms` of simulated time.
    pub async fn sleep_ms(&self, ms: u64) {
        sleep_ms(ms).await;
        self.flush();
    }

    /// The alias of user `name`, once it registered.
    pub async fn alias_of(&self, name: &str) -> String {
        loop {
            if let Some(alias) = self.shared.borrow().aliases.get(name) {
                return alias.clone();
            }
            self.sleep_ms(POLL_MS).await;
        }
    }

    /// Waits until an event of this user's client (its `Debug` line) satisfies `pred`; returns
    /// that line.
    pub async fn wait_for(&self, pred: impl Fn(&str) -> bool) -> String {
        loop {
            if let Some(line) = lock(&self.events).iter().find(|l| pred(l)) {
                return line.clone();
            }
            self.sleep_ms(POLL_MS).await;
        }
    }

    /// Makes this user and `other` friends (both call it: the one whose name sorts first asks,
    /// the other accepts); returns their conversation's id.
    pub async fn befriend(&self, other: &str) -> String {
        let peer = self.alias_of(other).await;
        if self.name.as_str() < other {
            while self
                .client
                .contacts()
                .send_friend_request(&peer)
                .await
                .is_err()
            {
                self.sleep_ms(POLL_MS).await;
            }
        }
        loop {
            if let Ok(friends) = self.client.contacts().sync_friends().await
                && let Some(f) = friends.iter().find(|f| f.alias_id.as_str() == peer)
            {
                if let Some(conv) = &f.conversation_id {
                    let conv = conv.as_str().to_owned();
                    self.note(format!("friends with {other} in {conv}"));
                    return conv;
                }
                if self.name.as_str() > other {
                    let id = f.friendship_id.0.to_string();
                    drop(self.client.contacts().accept_friend_request(&id).await);
                }
            }
            self.sleep_ms(POLL_MS).await;
        }
    }
}

impl Drop for User {
    /// The events since the last step that waited go into the trace too.
    fn drop(&mut self) {
        self.flush();
    }
}

/// A finished world of steps.
#[derive(Debug, Clone)]
pub struct StepsRun {
    seed: u64,
    trace: Vec<String>,
    hash: String,
    failure: Option<String>,
    violations: Vec<Violation>,
}

impl StepsRun {
    /// Every client event of every user and every note, in order, with its simulated ms.
    pub fn trace(&self) -> &[String] {
        &self.trace
    }

    /// SHA-256 of the trace: the same world gives the same hash.
    pub fn trace_hash(&self) -> &str {
        &self.hash
    }

    /// Why the run ended early: a user's steps failed (or the world got stuck past its time
    /// limit).
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// What the oracles that hold for any steps found (see [`StepsRun::check_all`]).
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Every user's steps ended without an error, and the main sweep's app-level oracles that
    /// hold whatever the steps do found nothing: no app showed a message twice
    /// (`delivered-exactly-once`), no sender saw a message delivered or read that no other app
    /// showed (`receipts`). Otherwise panics with what failed, the end of the trace, and the
    /// command that runs this test again (same seed, same run).
    pub fn check_all(&self) -> &Self {
        let mut failures: Vec<String> = self.violations.iter().map(ToString::to_string).collect();
        failures.extend(self.failure.clone());
        if !failures.is_empty() {
            let failure = failures.join("\n");
            let test = std::thread::current()
                .name()
                .unwrap_or("<this test>")
                .to_owned();
            // Cargo sets the package's name in the environment of the tests it runs.
            let package = std::env::var("CARGO_PKG_NAME")
                .map(|p| format!(" -p {p}"))
                .unwrap_or_default();
            let tail = self.trace.len().saturating_sub(20);
            panic!(
                "simulation steps failed (seed {}): {failure}\nlast trace lines:\n{}\nreplay: cargo test{package} -- --exact {test}",
                self.seed,
                self.trace[tail..].join("\n")
            );
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_shown_twice_and_a_receipt_nobody_saw_are_violations() {
        let mut observed = Observed::default();
        observed
            .shown
            .insert("m1".into(), vec!["bob".into(), "bob".into()]);
        observed.shown.insert("m2".into(), vec!["alice".into()]);
        observed.receipted.insert("m2".into(), "alice".into());
        observed.shown.insert("m3".into(), vec!["bob".into()]);
        observed.receipted.insert("m3".into(), "alice".into());
        let oracles: Vec<Oracle> = observed.violations().iter().map(|v| v.oracle).collect();
        assert_eq!(oracles, [Oracle::DeliveredExactlyOnce, Oracle::Receipts]);
    }
}

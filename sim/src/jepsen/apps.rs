//! The clients of a Jepsen-mode run and the history they write: `clients` apps (our async
//! `Client` on real tokio, seeded) register, befriend in a ring (client `i` and `i+1`),
//! learn their conversations and send to a random friend every 0.2-1.2 s, now and then
//! marking a conversation read up to a message it received (not always the newest, as a
//! person reading on a phone does); every app event
//! that matters to the oracles goes to the [`History`], stamped in ms since the run started.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use client_core::machine::Event;
use client_core::store::ClientStore as _;
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng as _, SeedableRng as _};
use serde::Serialize;
use serde_json::{Value, json};

use super::{JepsenConfig, derive};
use crate::wiretap::WireLog;
use client::{Client, ClientError, ClientOptions, EventKind, SharedStore};
use seam::clock::{Clock as _, SystemClock};
use seam::net::{Endpoint, Tokio};

/// Attempts of a registration.
const REGISTER_ATTEMPTS: u32 = 20;
/// Pause between registration attempts.
const REGISTER_RETRY_MS: u64 = 250;
/// Rounds of friends-list syncs (accepting requests, learning conversations).
const SYNC_ROUNDS: u32 = 50;
/// Pause between rounds of learning the conversations.
const SYNC_RETRY_MS: u64 = 200;

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

/// Shared history, stamped in ms since the run started.
#[derive(Clone)]
pub(super) struct History {
    start: u64,
    entries: Arc<Mutex<Vec<HistoryEntry>>>,
}

impl History {
    pub(super) fn new() -> Self {
        Self {
            start: SystemClock.now().get(),
            entries: Arc::default(),
        }
    }

    /// Ms since the run started.
    pub(super) fn now(&self) -> u64 {
        SystemClock.now().get().saturating_sub(self.start)
    }

    /// Appends an entry (`client`: whose, if a client's).
    pub(super) fn push(&self, client: Option<usize>, what: Value) {
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

    /// Every entry so far.
    pub(super) fn take(&self) -> Vec<HistoryEntry> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// One app.
pub(super) struct App {
    pub(super) client: Client<Tokio>,
    pub(super) store: SharedStore,
    pub(super) alias: String,
}

/// Why setup failed (reported as a `setup` violation).
#[derive(Debug, thiserror::Error)]
pub(super) enum SetupError {
    /// A client call failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The relay refused every registration attempt.
    #[error("client {0} could not register in {1} attempts; the last: {2}")]
    Register(usize, u32, ClientError),
    /// The relay gave no alias.
    #[error("client {0} has no alias")]
    NoAlias(usize),
}

/// Registers `config.clients` apps and makes friends of neighbours in the ring.
pub(super) async fn setup(
    config: &JepsenConfig,
    endpoint: &Endpoint,
    history: &History,
    wire: &WireLog,
) -> Result<Vec<App>, SetupError> {
    let mut apps = Vec::new();
    for i in 0..config.clients {
        apps.push(register(config.seed, i, endpoint, history, wire).await?);
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
        accept_all(app).await?;
    }
    Ok(apps)
}

/// Starts app `i` (its events go to the history), registers its account, connects.
async fn register(
    seed: u64,
    i: usize,
    endpoint: &Endpoint,
    history: &History,
    wire: &WireLog,
) -> Result<App, SetupError> {
    let store = SharedStore::new();
    let options = ClientOptions::new(
        endpoint.clone(),
        Arc::new(SystemClock),
        derive(seed, i as u64),
    )
    .with_tap(wire.tap(i));
    let client = Client::<Tokio>::start(store.clone(), options)?;
    let h = history.clone();
    client.on(EventKind::Any, move |event| {
        if let Some(what) = describe(event) {
            h.push(Some(i), what);
        }
    });
    let mut rng = ChaCha20Rng::from_seed(derive(seed, 1_000 + i as u64));
    let mnemonic = client_core::keys::new_mnemonic(&mut rng);
    let mut last = None;
    for _ in 0..REGISTER_ATTEMPTS {
        match client
            .register_account(mnemonic.expose(), &format!("j{i}"))
            .await
        {
            Ok(_) => {
                last = None;
                break;
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(REGISTER_RETRY_MS)).await;
    }
    if let Some(e) = last {
        return Err(SetupError::Register(i, REGISTER_ATTEMPTS, e));
    }
    let alias = client.alias_id().await?.ok_or(SetupError::NoAlias(i))?;
    history.push(Some(i), json!({"registered": alias}));
    drop(client.connect().await);
    Ok(App {
        client,
        store,
        alias,
    })
}

/// Accepts every friend request `app` received and has not answered, until none is left (at
/// most [`SYNC_ROUNDS`] rounds).
async fn accept_all(app: &App) -> Result<(), SetupError> {
    for _ in 0..SYNC_ROUNDS {
        let friends = app.client.contacts().sync_friends().await?;
        let mut pending = 0;
        for f in &friends {
            let waiting = f.status == wire::http::FriendStatus::Pending
                && f.direction == wire::http::FriendDirection::Received;
            if waiting {
                pending += 1;
                // A refusal is counted by the tap and reported with the setup verdict.
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
    Ok(())
}

/// `(i, i+1 mod n)` -> conversation id, as client `i` learned it.
pub(super) async fn ring_convs(apps: &[App]) -> BTreeMap<(usize, usize), String> {
    let n = apps.len();
    let mut out = BTreeMap::new();
    for _ in 0..SYNC_ROUNDS {
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
        tokio::time::sleep(Duration::from_millis(SYNC_RETRY_MS)).await;
    }
    out
}

/// Client `me` sends to a random friend every 0.2-1.2 s for `window_ms`; after one send in
/// [`READ_EVERY`] it marks a conversation read ([`read_some`]).
pub(super) async fn traffic(
    me: usize,
    apps: &[App],
    convs: &BTreeMap<(usize, usize), String>,
    (history, wire): (&History, &WireLog),
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
        if rng.next_u32().is_multiple_of(READ_EVERY) {
            let (peer, conv) = mine[rng.next_u32() as usize % mine.len()];
            read_some(
                me,
                &apps[me],
                conv,
                &apps[peer].alias,
                &mut rng,
                (history, wire),
            )
            .await;
        }
    }
}

/// One send in this many is followed by a read mark.
const READ_EVERY: u32 = 3;

/// App `me` marks `conv` read up to one of the messages it received there, drawn from the
/// seed (the newest or an older one: the reader has not always scrolled to the end); the
/// mark goes to the history and to the wire log before the app sends it.
async fn read_some(
    me: usize,
    app: &App,
    conv: &str,
    to: &str,
    rng: &mut ChaCha20Rng,
    (history, wire): (&History, &WireLog),
) {
    let seqs: Vec<u64> = app
        .store
        .snapshot()
        .get_history(conv, None, None)
        .unwrap_or_default()
        .iter()
        .filter(|m| !m.is_me)
        .filter_map(|m| m.seq)
        .collect();
    if seqs.is_empty() {
        return;
    }
    let seq = seqs[rng.next_u32() as usize % seqs.len()];
    history.push(Some(me), json!({"read": conv, "seq": seq}));
    wire.marked_read(me, conv, seq);
    if let Err(e) = app.client.mark_as_read(conv, seq, to).await {
        history.push(Some(me), json!({"read_refused": e.to_string()}));
    }
}

/// The history entry of an app event, if the oracles or a reader need it.
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
pub(super) fn tally(
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

//! The scenario drawn from a seed: accounts, friendships and a timed script of app actions,
//! sized by a [`Scale`].
//!
//! Like the fault plan, a scenario is **explicit data** (serde): a replay file holds it, and
//! the shrinker removes actions, bursts, clients and strangers from it.
//!
//! New behaviour is a new [`ActionKind`]. Messaging: sends (each carrying a canary), reads,
//! typing, retracts, second-device logins, media (encrypted upload, then an `[img]` message),
//! offline spells, and **bursts** (many messages at once, so that a recipient who is offline
//! meanwhile comes back to a large backlog: a hub with many friends who all burst while it is
//! away is the sync-replay workload). Commerce: vanity purchases (a small pool of catalog
//! aliases, so buyers race, sometimes in bursts a few ms apart), channel creation and listing,
//! channel buys (racing buyers of the same listing), quota buys, each paid through the payment
//! stand-in (or abandoned, or only "paid" by a forger). **Strangers** are raw clients (no
//! client library) some honest clients send friend requests to; they reject them, and the
//! fault plan makes them abusive, dishonest or slow.

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;

use rand_chacha::ChaCha20Rng;
use rand_core::Rng as _;
use serde::{Deserialize, Serialize};

use crate::bounds::{LARGE_SETUP_BOUND_MS, SETUP_BOUND_MS};

/// How big a world a seed draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Scale {
    /// 3-5 clients, small backlogs (CI; about a second per seed).
    #[default]
    Small,
    /// 6-24 clients; a hub with up to 20 friends bursting up to 150 messages each while it is
    /// offline (backlogs of up to 3,000 queued messages for one recipient).
    Medium,
    /// 40-200 clients; hubs with up to 40 friends bursting up to 300 messages each (up to
    /// 12,000 queued messages for one recipient).
    Large,
}

impl Scale {
    /// CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Small => "small",
            Self::Medium => "medium",
            Self::Large => "large",
        }
    }

    fn clients(self) -> RangeInclusive<usize> {
        match self {
            Self::Small => 3..=5,
            Self::Medium => 6..=24,
            Self::Large => 40..=200,
        }
    }

    /// Client apps per turmoil host: turmoil links every pair of hosts and scans every link
    /// for every host on every step (O(hosts³) per step), so large worlds pack several
    /// accounts onto one host (one network location; a host crash takes all of them down).
    fn clients_per_host(self, clients: usize) -> usize {
        match self {
            Self::Small | Self::Medium => 1,
            Self::Large => clients.div_ceil(MAX_CLIENT_HOSTS),
        }
    }

    fn strangers(self) -> RangeInclusive<usize> {
        match self {
            Self::Small => 1..=1,
            Self::Medium => 1..=2,
            Self::Large => 2..=4,
        }
    }

    /// `(friends of a hub, messages per friend's burst)`.
    fn hub(self) -> (RangeInclusive<usize>, RangeInclusive<u32>) {
        match self {
            Self::Small => (2..=3, 5..=20),
            Self::Medium => (4..=20, 20..=150),
            Self::Large => (10..=40, 50..=300),
        }
    }

    fn hubs(self, rng: &mut ChaCha20Rng) -> usize {
        match self {
            Self::Small => usize::from(rng.next_u32().is_multiple_of(2)),
            Self::Medium => {
                usize::from(!rng.next_u32().is_multiple_of(4))
                    + usize::from(rng.next_u32().is_multiple_of(4))
            }
            Self::Large => 1 + rng.next_u32() as usize % 3,
        }
    }

    /// Sockets a raw host opens in a storm.
    pub fn storm_sockets(self, rng: &mut ChaCha20Rng) -> u32 {
        pick(
            rng,
            match self {
                Self::Small => 8..=24,
                Self::Medium => 20..=80,
                Self::Large => 60..=250,
            },
        )
    }

    /// Malformed frames in a flood.
    pub fn flood_frames(self, rng: &mut ChaCha20Rng) -> u32 {
        pick(
            rng,
            match self {
                Self::Small => 50..=200,
                Self::Medium => 200..=1_000,
                Self::Large => 500..=3_000,
            },
        )
    }

    /// Setup (registration, friendships) must finish within this much simulated time.
    pub fn setup_bound_ms(self) -> u64 {
        match self {
            Self::Small | Self::Medium => SETUP_BOUND_MS,
            Self::Large => LARGE_SETUP_BOUND_MS,
        }
    }
}

impl FromStr for Scale {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "small" => Ok(Self::Small),
            "medium" => Ok(Self::Medium),
            "large" => Ok(Self::Large),
            _ => Err(format!("unknown scale {s:?} (small, medium, large)")),
        }
    }
}

impl fmt::Display for Scale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Most client hosts at the large scale: turmoil links every pair of hosts and scans every
/// link for every host on every step, so larger worlds put several accounts on one host.
pub const MAX_CLIENT_HOSTS: usize = 32;

fn pick<T>(rng: &mut ChaCha20Rng, range: RangeInclusive<T>) -> T
where
    T: Copy + TryFrom<u64> + Into<u64>,
{
    let (lo, hi) = ((*range.start()).into(), (*range.end()).into());
    let v = lo + rng.next_u64() % (hi - lo + 1);
    T::try_from(v).unwrap_or(*range.start())
}

fn pick_usize(rng: &mut ChaCha20Rng, range: RangeInclusive<usize>) -> usize {
    let (lo, hi) = (*range.start(), *range.end());
    lo + rng.next_u32() as usize % (hi - lo + 1)
}

/// One account on one client host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    /// Host name (`c0`, `c1`, ...).
    pub host: String,
    /// Nickname.
    pub nickname: String,
    /// The 12-word mnemonic (simulated; never a real user's).
    pub mnemonic: String,
}

/// A raw client (no client library): registers over HTTP, rejects friend requests, and does
/// what the fault plan tells it (flood, dishonest requests, stop reading, storm).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stranger {
    /// Host name (`x0`, `x1`, ...).
    pub host: String,
    /// The mnemonic its keys derive from.
    pub mnemonic: String,
}

/// A planned friendship; `a` sends the request, `b` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Pair {
    /// Requester (client index).
    pub a: usize,
    /// Accepter (client index).
    pub b: usize,
}

impl Pair {
    /// The other side of `me`.
    pub fn peer(self, me: usize) -> usize {
        if self.a == me { self.b } else { self.a }
    }
    /// Whether `me` is in the pair.
    pub fn has(self, me: usize) -> bool {
        self.a == me || self.b == me
    }
}

/// An honest client's friend request that a stranger rejects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Rejection {
    /// The requester (client index).
    pub client: usize,
    /// The stranger (index) who rejects it.
    pub stranger: usize,
}

/// What a client does at a scripted moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum ActionKind {
    /// Sends a text carrying a canary (plaintext that must never reach the relay).
    Send {
        /// Pair index.
        pair: usize,
        /// Message text.
        text: String,
    },
    /// Sends `count` messages at once (the first carries `canary`).
    Burst {
        /// Pair index.
        pair: usize,
        /// How many.
        count: u32,
        /// Planted in the first message.
        canary: String,
    },
    /// Disconnects (the app goes to the background), stays away, reconnects.
    Offline {
        /// How long.
        stay_ms: u64,
    },
    /// Uploads `bytes` of encrypted media and sends an `[img]` message referring to it.
    Media {
        /// Pair index.
        pair: usize,
        /// Size of the image.
        bytes: u32,
    },
    /// Marks the conversation read up to the highest received seq.
    Read {
        /// Pair index.
        pair: usize,
    },
    /// Typing notice.
    Typing {
        /// Pair index.
        pair: usize,
    },
    /// Retracts the newest own acknowledged message of the conversation.
    Retract {
        /// Pair index.
        pair: usize,
    },
    /// A second device logs into the same account for a while (GOAWAY to the first), then the
    /// first device takes the session back.
    SecondDevice {
        /// How long the second device stays.
        stay_ms: u64,
    },
    /// Buys a vanity alias (then, once confirmed, binds it).
    BuyAlias {
        /// Catalog alias.
        alias: String,
        /// How the order gets paid.
        pay: Pay,
    },
    /// Creates a channel and lists it for sale.
    CreateChannel {
        /// Listing price in whole USDT.
        price_usdt: u64,
    },
    /// Buys the `slot`-th listed channel (in listing order, modulo the count) not owned by
    /// this client.
    BuyChannel {
        /// Which listing.
        slot: usize,
        /// How the order gets paid.
        pay: Pay,
    },
    /// Buys one channel-creation seat (5 USDT).
    BuyQuota {
        /// How the order gets paid.
        pay: Pay,
    },
}

/// How an order is paid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "how")]
pub enum Pay {
    /// Paid through the stand-in; the webhook plan is drawn from `roll` and the fault plan.
    Paid {
        /// Per-payment randomness.
        roll: u64,
    },
    /// Never paid (the hold must be released once it expires); with the `webhook` fault a
    /// forger may still send it a forged webhook (`roll` decides).
    Abandoned {
        /// Per-order randomness.
        roll: u64,
    },
}

impl Pay {
    fn draw(rng: &mut ChaCha20Rng) -> Self {
        let roll = rng.next_u64();
        if rng.next_u32() % 100 < 75 {
            Self::Paid { roll }
        } else {
            Self::Abandoned { roll }
        }
    }
}

impl ActionKind {
    /// Whether this is a commerce action.
    pub fn is_commerce(&self) -> bool {
        matches!(
            self,
            Self::BuyAlias { .. }
                | Self::CreateChannel { .. }
                | Self::BuyChannel { .. }
                | Self::BuyQuota { .. }
        )
    }

    /// The pair this action acts on, if any.
    pub fn pair(&self) -> Option<usize> {
        match self {
            Self::Send { pair, .. }
            | Self::Burst { pair, .. }
            | Self::Media { pair, .. }
            | Self::Read { pair }
            | Self::Typing { pair }
            | Self::Retract { pair } => Some(*pair),
            _ => None,
        }
    }

    fn pair_mut(&mut self) -> Option<&mut usize> {
        match self {
            Self::Send { pair, .. }
            | Self::Burst { pair, .. }
            | Self::Media { pair, .. }
            | Self::Read { pair }
            | Self::Typing { pair }
            | Self::Retract { pair } => Some(pair),
            _ => None,
        }
    }
}

/// A scripted action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Action {
    /// Offset from the start of traffic.
    pub at_ms: u64,
    /// Client index.
    pub client: usize,
    /// What.
    pub kind: ActionKind,
}

/// The whole scenario of one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scenario {
    /// The scale it was drawn at.
    pub scale: Scale,
    /// Accounts by client index.
    pub accounts: Vec<Account>,
    /// Raw clients by index.
    pub strangers: Vec<Stranger>,
    /// Friendships (each is one conversation).
    pub pairs: Vec<Pair>,
    /// Friend requests to strangers, rejected.
    pub rejections: Vec<Rejection>,
    /// Clients that register a push token (the relay pushes to the push stand-in).
    pub push_clients: Vec<usize>,
    /// Actions in time order.
    pub actions: Vec<Action>,
    /// The catalog aliases buyers compete for.
    pub alias_pool: Vec<String>,
}

/// What [`Scenario::draw`] is told.
#[derive(Debug, Clone, Copy)]
pub struct DrawParams {
    /// The seed (canaries name it).
    pub seed: u64,
    /// How big.
    pub scale: Scale,
    /// Client count (`None`: drawn from the scale's range).
    pub clients: Option<usize>,
    /// Traffic window.
    pub window_ms: u64,
}

impl Scenario {
    /// Draws a scenario.
    pub fn draw(rng: &mut ChaCha20Rng, p: DrawParams) -> Self {
        let scale = p.scale;
        let clients = p
            .clients
            .unwrap_or_else(|| pick_usize(rng, scale.clients()))
            .max(2);
        let mnemonic = |rng: &mut ChaCha20Rng| {
            client_core::keys::new_mnemonic(&mut *rng)
                .expose()
                .to_owned()
        };
        let per_host = scale.clients_per_host(clients);
        let accounts = (0..clients)
            .map(|i| Account {
                host: if per_host == 1 {
                    format!("c{i}")
                } else {
                    format!("h{}", i / per_host)
                },
                nickname: format!("user{i}"),
                mnemonic: mnemonic(rng),
            })
            .collect();
        let strangers: Vec<Stranger> = (0..pick_usize(rng, scale.strangers()))
            .map(|i| Stranger {
                host: format!("x{i}"),
                mnemonic: mnemonic(rng),
            })
            .collect();
        let mut pairs = draw_pairs(rng, scale, clients);
        let mut actions = Vec::new();
        draw_hubs(rng, p, clients, &mut pairs, &mut actions);
        draw_traffic(rng, p, clients, &pairs, &mut actions);
        let mut rejections = Vec::new();
        for client in 0..clients {
            if !strangers.is_empty() && rng.next_u32().is_multiple_of(3) {
                let stranger = rng.next_u32() as usize % strangers.len();
                rejections.push(Rejection { client, stranger });
            }
        }
        let push_clients = (0..clients)
            .filter(|_| rng.next_u32().is_multiple_of(2))
            .collect();
        let alias_pool = draw_commerce(rng, clients, p.window_ms, &mut actions);
        actions.sort_by_key(|a| a.at_ms);
        Self {
            scale,
            accounts,
            strangers,
            pairs,
            rejections,
            push_clients,
            actions,
            alias_pool,
        }
    }

    /// Fits the drawn scenario to its run's class: bursts within the class's cap, no push
    /// targets where the class's push policy refuses the stand-ins (see [`crate::class`]).
    pub fn fit_class(&mut self, class: crate::class::Class) {
        if let Some(cap) = class.burst_cap() {
            for a in &mut self.actions {
                if let ActionKind::Burst { count, .. } = &mut a.kind {
                    *count = (*count).min(cap);
                }
            }
        }
        if !class.honest_push() {
            self.push_clients.clear();
        }
    }

    /// Pair indexes `me` belongs to.
    pub fn pairs_of(&self, me: usize) -> impl Iterator<Item = (usize, Pair)> + '_ {
        self.pairs
            .iter()
            .copied()
            .enumerate()
            .filter(move |(_, p)| p.has(me))
    }

    /// Canary strings planted in message texts.
    pub fn canaries(&self) -> Vec<String> {
        self.actions
            .iter()
            .filter_map(|a| match &a.kind {
                ActionKind::Send { text, .. } => text.split(": ").nth(1).map(str::to_owned),
                ActionKind::Burst { canary, .. } => Some(canary.clone()),
                _ => None,
            })
            .collect()
    }

    /// Most messages queued for one recipient by the script (bursts and sends while nobody
    /// reads), for the summary line.
    pub fn largest_backlog(&self) -> u64 {
        let mut per: std::collections::BTreeMap<usize, u64> = std::collections::BTreeMap::new();
        for a in &self.actions {
            if let ActionKind::Burst { pair, count, .. } = &a.kind {
                let to = self.pairs[*pair].peer(a.client);
                *per.entry(to).or_default() += u64::from(*count);
            }
        }
        per.values().copied().max().unwrap_or(0)
    }

    /// Distinct client host names, in client order.
    pub fn client_hosts(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for a in &self.accounts {
            if !out.contains(&a.host) {
                out.push(a.host.clone());
            }
        }
        out
    }

    /// The clients on `host`.
    pub fn clients_on(&self, host: &str) -> Vec<usize> {
        (0..self.accounts.len())
            .filter(|i| self.accounts[*i].host == host)
            .collect()
    }

    /// This scenario without client `gone`: its pairs, actions and rejections are dropped and
    /// higher clients renumbered (hosts keep their names). Returns which hosts still exist,
    /// for the plan (a host left without clients is gone).
    pub fn without_client(&self, gone: usize) -> (Self, impl Fn(&str) -> Option<String> + use<>) {
        let shift = move |i: usize| if i > gone { i - 1 } else { i };
        let mut out = self.clone();
        out.accounts.remove(gone);
        let mut pair_map = Vec::new();
        let mut pairs = Vec::new();
        for p in &self.pairs {
            if p.has(gone) {
                pair_map.push(None);
            } else {
                pair_map.push(Some(pairs.len()));
                pairs.push(Pair {
                    a: shift(p.a),
                    b: shift(p.b),
                });
            }
        }
        out.pairs = pairs;
        out.actions = self
            .actions
            .iter()
            .filter(|a| a.client != gone)
            .filter_map(|a| {
                let mut a = a.clone();
                if let Some(pair) = a.kind.pair_mut() {
                    *pair = pair_map[*pair]?;
                }
                a.client = shift(a.client);
                Some(a)
            })
            .collect();
        out.rejections = self
            .rejections
            .iter()
            .filter(|r| r.client != gone)
            .map(|r| Rejection {
                client: shift(r.client),
                stranger: r.stranger,
            })
            .collect();
        out.push_clients = self
            .push_clients
            .iter()
            .filter(|c| **c != gone)
            .map(|c| shift(*c))
            .collect();
        let hosts = out.client_hosts();
        let rename = move |h: &str| -> Option<String> {
            let is_client_host = h.starts_with('c') || h.starts_with('h');
            (!is_client_host || hosts.iter().any(|x| x == h)).then(|| h.to_owned())
        };
        (out, rename)
    }

    /// This scenario without stranger `gone` (renumbered like [`Self::without_client`]).
    pub fn without_stranger(&self, gone: usize) -> (Self, impl Fn(&str) -> Option<String> + use<>) {
        let shift = move |i: usize| if i > gone { i - 1 } else { i };
        let mut out = self.clone();
        out.strangers.remove(gone);
        for (i, s) in out.strangers.iter_mut().enumerate() {
            s.host = format!("x{i}");
        }
        out.rejections = self
            .rejections
            .iter()
            .filter(|r| r.stranger != gone)
            .map(|r| Rejection {
                client: r.client,
                stranger: shift(r.stranger),
            })
            .collect();
        let rename = move |h: &str| -> Option<String> {
            match h.strip_prefix('x').and_then(|n| n.parse::<usize>().ok()) {
                Some(i) if i == gone => None,
                Some(i) => Some(format!("x{}", shift(i))),
                None => Some(h.to_owned()),
            }
        };
        (out, rename)
    }
}

/// Friendships: dense among few clients, a few friends each among many.
fn draw_pairs(rng: &mut ChaCha20Rng, scale: Scale, clients: usize) -> Vec<Pair> {
    let mut pairs = std::collections::BTreeSet::new();
    if scale == Scale::Small {
        for a in 0..clients {
            for b in a + 1..clients {
                if rng.next_u32() % 10 < 6 {
                    pairs.insert(Pair { a, b });
                }
            }
        }
    } else {
        for a in 0..clients {
            for _ in 0..1 + rng.next_u32() % 3 {
                let b = rng.next_u32() as usize % clients;
                if a != b {
                    pairs.insert(Pair {
                        a: a.min(b),
                        b: a.max(b),
                    });
                }
            }
        }
    }
    if pairs.is_empty() && clients >= 2 {
        pairs.insert(Pair { a: 0, b: 1 });
    }
    pairs.into_iter().collect()
}

fn pair_index(pairs: &mut Vec<Pair>, a: usize, b: usize) -> usize {
    let p = Pair {
        a: a.min(b),
        b: a.max(b),
    };
    if let Some(i) = pairs.iter().position(|q| *q == p) {
        i
    } else {
        pairs.push(p);
        pairs.len() - 1
    }
}

/// Hubs: a client with many friends goes offline while every friend bursts to it, then
/// comes back to the whole backlog.
fn draw_hubs(
    rng: &mut ChaCha20Rng,
    p: DrawParams,
    clients: usize,
    pairs: &mut Vec<Pair>,
    actions: &mut Vec<Action>,
) {
    let hubs = p.scale.hubs(rng).min(clients);
    let (friends_range, burst_range) = p.scale.hub();
    for h in 0..hubs {
        let hub = rng.next_u32() as usize % clients;
        let friends = pick_usize(rng, friends_range.clone()).min(clients - 1);
        let away_at = p.window_ms / 10 + rng.next_u64() % (p.window_ms / 4).max(1);
        let stay_ms = 30_000 + rng.next_u64() % 30_000;
        actions.push(Action {
            at_ms: away_at,
            client: hub,
            kind: ActionKind::Offline { stay_ms },
        });
        let mut chosen = std::collections::BTreeSet::new();
        while chosen.len() < friends {
            let f = rng.next_u32() as usize % clients;
            if f != hub {
                chosen.insert(f);
            }
        }
        for f in chosen {
            let pair = pair_index(pairs, hub, f);
            let count: u32 = pick(rng, burst_range.clone());
            let at_ms = away_at + 2_000 + rng.next_u64() % stay_ms.saturating_sub(12_000).max(1);
            actions.push(Action {
                at_ms,
                client: f,
                kind: ActionKind::Burst {
                    pair,
                    count,
                    canary: format!("CANARY{}xh{h}x{f}x{:016x}", p.seed, rng.next_u64()),
                },
            });
        }
    }
}

/// Everyday traffic on the friendships.
fn draw_traffic(
    rng: &mut ChaCha20Rng,
    p: DrawParams,
    clients: usize,
    pairs: &[Pair],
    actions: &mut Vec<Action>,
) {
    if pairs.is_empty() {
        return;
    }
    let count = 8 * clients + rng.next_u32() as usize % (8 * clients);
    for k in 0..count {
        let at_ms = rng.next_u64() % p.window_ms;
        let pair_index = rng.next_u32() as usize % pairs.len();
        let pair = pairs[pair_index];
        let client = if rng.next_u32().is_multiple_of(2) {
            pair.a
        } else {
            pair.b
        };
        let roll = rng.next_u32() % 100;
        let kind = match roll {
            0..55 => {
                let canary = format!("CANARY{}x{k}x{:016x}", p.seed, rng.next_u64());
                ActionKind::Send {
                    pair: pair_index,
                    text: format!("message {k}: {canary}"),
                }
            }
            55..58 => ActionKind::Burst {
                pair: pair_index,
                count: 2 + rng.next_u32() % 10,
                canary: format!("CANARY{}xb{k}x{:016x}", p.seed, rng.next_u64()),
            },
            58..60 => ActionKind::Media {
                pair: pair_index,
                bytes: 1 + rng.next_u32() % 4_000,
            },
            60..72 => ActionKind::Read { pair: pair_index },
            72..84 => ActionKind::Typing { pair: pair_index },
            84..93 => ActionKind::Retract { pair: pair_index },
            93..96 => ActionKind::Offline {
                stay_ms: 2_000 + rng.next_u64() % 20_000,
            },
            _ => ActionKind::SecondDevice {
                stay_ms: 2_000 + rng.next_u64() % 20_000,
            },
        };
        actions.push(Action {
            at_ms,
            client,
            kind,
        });
    }
}

/// Commerce actions; returns the alias pool.
fn draw_commerce(
    rng: &mut ChaCha20Rng,
    clients: usize,
    window_ms: u64,
    actions: &mut Vec<Action>,
) -> Vec<String> {
    let catalog = relay_core::pricing::default_catalog();
    let mut alias_pool = Vec::new();
    while alias_pool.len() < 3 && !catalog.is_empty() {
        let a = catalog[rng.next_u32() as usize % catalog.len()].to_string();
        if !alias_pool.contains(&a) {
            alias_pool.push(a);
        }
    }
    if clients == 0 || alias_pool.is_empty() {
        return alias_pool;
    }
    let client = |rng: &mut ChaCha20Rng| rng.next_u32() as usize % clients;
    // Listings early, so buyers find them.
    for _ in 0..1 + rng.next_u32() % 2 {
        actions.push(Action {
            at_ms: rng.next_u64() % (window_ms / 4).max(1),
            client: client(rng),
            kind: ActionKind::CreateChannel {
                price_usdt: 1 + rng.next_u64() % 500,
            },
        });
    }
    // Commerce stays a handful per run at every scale (its audit is per order).
    let buyers = clients.min(6);
    let count = buyers + rng.next_u32() as usize % (2 * buyers);
    for _ in 0..count {
        let at_ms = window_ms / 8 + rng.next_u64() % (window_ms - window_ms / 8).max(1);
        let roll = rng.next_u32() % 100;
        // A burst: several clients act on the same target within a few ms.
        let racers = if rng.next_u32().is_multiple_of(3) {
            2 + rng.next_u32() as usize % buyers.max(2).saturating_sub(1).max(1)
        } else {
            1
        };
        let alias = alias_pool[rng.next_u32() as usize % alias_pool.len()].clone();
        let slot = rng.next_u32() as usize;
        let first = client(rng);
        for r in 0..racers.min(clients) {
            let kind = match roll {
                0..45 => ActionKind::BuyAlias {
                    alias: alias.clone(),
                    pay: Pay::draw(rng),
                },
                45..75 => ActionKind::BuyChannel {
                    slot,
                    pay: Pay::draw(rng),
                },
                75..92 => ActionKind::BuyQuota {
                    pay: Pay::draw(rng),
                },
                _ => ActionKind::CreateChannel {
                    price_usdt: 1 + rng.next_u64() % 500,
                },
            };
            actions.push(Action {
                at_ms: (at_ms + rng.next_u64() % 20).min(window_ms - 1),
                client: (first + r) % clients,
                kind,
            });
        }
    }
    alias_pool
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count =
            |pred: fn(&ActionKind) -> bool| self.actions.iter().filter(|a| pred(&a.kind)).count();
        let sends = count(|k| matches!(k, ActionKind::Send { .. }));
        let burst_msgs: u64 = self
            .actions
            .iter()
            .map(|a| match a.kind {
                ActionKind::Burst { count, .. } => u64::from(count),
                _ => 0,
            })
            .sum();
        let second = count(|k| matches!(k, ActionKind::SecondDevice { .. }));
        let offline = count(|k| matches!(k, ActionKind::Offline { .. }));
        let media = count(|k| matches!(k, ActionKind::Media { .. }));
        let commerce = count(ActionKind::is_commerce);
        let pairs = if self.pairs.len() <= 12 {
            let p: Vec<String> = self
                .pairs
                .iter()
                .map(|p| format!("c{}-c{}", p.a, p.b))
                .collect();
            format!("[{}]", p.join(" "))
        } else {
            format!("{} friendships", self.pairs.len())
        };
        write!(
            f,
            "scenario ({}): {} accounts, {} strangers ({} rejected requests), {pairs}, {} actions ({sends} sends, {burst_msgs} burst messages, largest backlog {}, {offline} offline spells, {media} media, {second} second-device logins, {commerce} commerce; aliases [{}])",
            self.scale,
            self.accounts.len(),
            self.strangers.len(),
            self.rejections.len(),
            self.actions.len(),
            self.largest_backlog(),
            self.alias_pool.join(" ")
        )
    }
}

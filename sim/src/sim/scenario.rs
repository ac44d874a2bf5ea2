//! The scenario drawn from a seed: accounts, friendships and a timed script of app actions.
//!
//! New behaviour is a new [`ActionKind`]. Commerce: vanity purchases (a small pool of
//! catalog aliases, so buyers race, sometimes in bursts a few ms apart), channel creation and
//! listing, channel buys (racing buyers of the same listing), quota buys. Each order is paid
//! through the payment stand-in (or abandoned, or only "paid" by a forger); the webhook's
//! faults come from the fault plan, drawn per payment from the action's `pay_roll`.

use std::fmt;

use rand_chacha::ChaCha20Rng;
use rand_core::Rng as _;

/// One account on one client host.
#[derive(Debug, Clone)]
pub struct Account {
    /// Host name (`c0`, `c1`, ...).
    pub host: String,
    /// Nickname.
    pub nickname: String,
    /// The 12-word mnemonic.
    pub mnemonic: String,
}

/// A planned friendship; `a` sends the request, `b` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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

/// What a client does at a scripted moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionKind {
    /// Sends a text carrying a canary (plaintext that must never reach the relay).
    Send {
        /// Pair index.
        pair: usize,
        /// Message text.
        text: String,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

/// A scripted action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// Offset from the start of traffic.
    pub at_ms: u64,
    /// Client index.
    pub client: usize,
    /// What.
    pub kind: ActionKind,
}

/// The whole scenario of one run.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Accounts by client index.
    pub accounts: Vec<Account>,
    /// Friendships (each is one conversation).
    pub pairs: Vec<Pair>,
    /// Actions in time order.
    pub actions: Vec<Action>,
    /// Canary strings planted in message texts.
    pub canaries: Vec<String>,
    /// The catalog aliases buyers compete for.
    pub alias_pool: Vec<String>,
}

impl Scenario {
    /// Draws a scenario for `clients` clients over a traffic window of `window_ms`.
    pub fn draw(rng: &mut ChaCha20Rng, seed: u64, clients: usize, window_ms: u64) -> Self {
        let accounts = (0..clients)
            .map(|i| Account {
                host: format!("c{i}"),
                nickname: format!("user{i}"),
                mnemonic: client_core::keys::new_mnemonic(&mut *rng)
                    .expose()
                    .to_owned(),
            })
            .collect();
        let mut pairs = Vec::new();
        for a in 0..clients {
            for b in a + 1..clients {
                if rng.next_u32() % 10 < 6 {
                    pairs.push(Pair { a, b });
                }
            }
        }
        if pairs.is_empty() && clients >= 2 {
            pairs.push(Pair { a: 0, b: 1 });
        }
        let mut actions = Vec::new();
        let mut canaries = Vec::new();
        if !pairs.is_empty() {
            let count = 8 * clients + rng.next_u32() as usize % (8 * clients);
            for k in 0..count {
                let at_ms = rng.next_u64() % window_ms;
                let pair_index = rng.next_u32() as usize % pairs.len();
                let pair = pairs[pair_index];
                let client = if rng.next_u32().is_multiple_of(2) {
                    pair.a
                } else {
                    pair.b
                };
                let roll = rng.next_u32() % 100;
                let kind = match roll {
                    0..60 => {
                        let canary = format!("CANARY{seed}x{k}x{:016x}", rng.next_u64());
                        canaries.push(canary.clone());
                        ActionKind::Send {
                            pair: pair_index,
                            text: format!("message {k}: {canary}"),
                        }
                    }
                    60..75 => ActionKind::Read { pair: pair_index },
                    75..87 => ActionKind::Typing { pair: pair_index },
                    87..96 => ActionKind::Retract { pair: pair_index },
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
        let alias_pool = draw_commerce(rng, clients, window_ms, &mut actions);
        actions.sort_by_key(|a| a.at_ms);
        Self {
            accounts,
            pairs,
            actions,
            canaries,
            alias_pool,
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
    let count = clients + rng.next_u32() as usize % (2 * clients);
    for _ in 0..count {
        let at_ms = window_ms / 8 + rng.next_u64() % (window_ms - window_ms / 8).max(1);
        let roll = rng.next_u32() % 100;
        // A burst: several clients act on the same target within a few ms.
        let racers = if rng.next_u32().is_multiple_of(3) {
            2 + rng.next_u32() as usize % clients.max(2).saturating_sub(1).max(1)
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
        let pairs: Vec<String> = self
            .pairs
            .iter()
            .map(|p| format!("c{}-c{}", p.a, p.b))
            .collect();
        let sends = self
            .actions
            .iter()
            .filter(|a| matches!(a.kind, ActionKind::Send { .. }))
            .count();
        let second = self
            .actions
            .iter()
            .filter(|a| matches!(a.kind, ActionKind::SecondDevice { .. }))
            .count();
        let commerce = self.actions.iter().filter(|a| a.kind.is_commerce()).count();
        write!(
            f,
            "scenario: {} accounts, friendships [{}], {} actions ({sends} sends, {second} second-device logins, {commerce} commerce; aliases [{}])",
            self.accounts.len(),
            pairs.join(" "),
            self.actions.len(),
            self.alias_pool.join(" ")
        )
    }
}

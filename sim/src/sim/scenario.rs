//! The scenario drawn from a seed: accounts, friendships and a timed script of app actions.
//!
//! New behaviour is a new [`ActionKind`] (commerce — alias purchases, channel trades and quota
//! buys paid through the payment stand-in — lands that way once its stand-in is wired in).

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
        actions.sort_by_key(|a| a.at_ms);
        Self {
            accounts,
            pairs,
            actions,
            canaries,
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
        write!(
            f,
            "scenario: {} accounts, friendships [{}], {} actions ({sends} sends, {second} second-device logins)",
            self.accounts.len(),
            pairs.join(" "),
            self.actions.len()
        )
    }
}

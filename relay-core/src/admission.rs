//! Admission to registration and sign-in, in memory only: the proof-of-work challenges the
//! relay issued (a restart forgets them; clients ask again) and the rate limits in front of
//! them. The rules that use them are in `auth`.

use std::collections::{BTreeMap, BTreeSet};

use wire::{AliasId, OrderId, UnixMs, UserUuid};

use crate::config::Config;
use crate::limits::{
    AUTH_CHALLENGES_PER_MIN_PER_USER, HOUR_MS, MAX_PENDING_POW_CHALLENGES, MINUTE_MS,
    POW_CHALLENGES_PER_MIN_PER_ADDR, VANITY_REHOLD_COOLDOWN_MS,
};
use crate::ratelimit::RateLimiter;

/// A bounded map whose entries expire; when full, the entry expiring first is evicted.
#[derive(Debug)]
pub(crate) struct Expiring<K: Ord + Clone, V> {
    entries: BTreeMap<K, (V, UnixMs)>,
    order: BTreeSet<(UnixMs, K)>,
    capacity: usize,
}

impl<K: Ord + Clone, V> Expiring<K, V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: BTreeMap::new(),
            order: BTreeSet::new(),
            capacity,
        }
    }

    pub(crate) fn insert(&mut self, key: K, value: V, expires: UnixMs) {
        while self.entries.len() >= self.capacity {
            let Some((_, k)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&k);
        }
        if let Some((_, old)) = self.entries.insert(key.clone(), (value, expires)) {
            self.order.remove(&(old, key.clone()));
        }
        self.order.insert((expires, key));
    }

    pub(crate) fn get(&self, key: &K, now: UnixMs) -> Option<&V> {
        self.entries
            .get(key)
            .filter(|(_, exp)| now < *exp)
            .map(|(v, _)| v)
    }

    pub(crate) fn contains(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    pub(crate) fn remove(&mut self, key: &K) {
        if let Some((_, exp)) = self.entries.remove(key) {
            self.order.remove(&(exp, key.clone()));
        }
    }

    pub(crate) fn sweep(&mut self, now: UnixMs) {
        while let Some((exp, _)) = self.order.first() {
            if *exp > now {
                break;
            }
            if let Some((_, k)) = self.order.pop_first() {
                self.entries.remove(&k);
            }
        }
    }

    pub(crate) fn next_expiry(&self) -> Option<UnixMs> {
        self.order.first().map(|(e, _)| *e)
    }
}

/// Who holds which unpaid vanity alias, in memory only: the network each hold was asked from
/// (the order rows name the buying account, never an address), and the holders (accounts;
/// networks for reserves) that may not hold an alias again yet after their hold lapsed.
#[derive(Debug, Default)]
pub(crate) struct VanityHolders {
    /// Pending vanity order → the client network it was asked from.
    network_of: BTreeMap<OrderId, String>,
    /// (alias, holder: `a:` + account or `n:` + network) → until when it may not hold the
    /// alias again.
    cooldown: BTreeMap<(AliasId, String), UnixMs>,
}

/// The cooldown key of an account.
fn account_key(user: &UserUuid) -> String {
    format!("a:{user}")
}

/// The cooldown key of a network.
fn network_key(network: &str) -> String {
    format!("n:{network}")
}

impl VanityHolders {
    /// Notes that `order` was asked from `network`.
    pub(crate) fn held(&mut self, order: OrderId, network: String) {
        self.network_of.insert(order, network);
    }

    /// The unpaid holds asked from `network` (each removed when it lapses or is paid).
    pub(crate) fn of_network<'s>(
        &'s self,
        network: &'s str,
    ) -> impl Iterator<Item = &'s OrderId> + 's {
        self.network_of
            .iter()
            .filter(move |(_, n)| n.as_str() == network)
            .map(|(o, _)| o)
    }

    /// `order`'s hold of `alias` lapsed unpaid at `now`: its holder (the buying account, or
    /// for a reserve the network it was asked from) may not hold `alias` again until
    /// `now + VANITY_REHOLD_COOLDOWN_MS`. Another account of the same network may: people
    /// behind one address are not each other's holders.
    pub(crate) fn lapsed(
        &mut self,
        order: &OrderId,
        alias: &AliasId,
        buyer: Option<&UserUuid>,
        now: UnixMs,
    ) {
        let until = now.plus_ms(VANITY_REHOLD_COOLDOWN_MS);
        let network = self.network_of.remove(order);
        let holder = match (buyer, network) {
            (Some(user), _) => account_key(user),
            (None, Some(network)) => network_key(&network),
            (None, None) => return,
        };
        self.cooldown.insert((alias.clone(), holder), until);
    }

    /// `order` no longer holds unpaid (paid, or gone): forgets its network.
    pub(crate) fn settled(&mut self, order: &OrderId) {
        self.network_of.remove(order);
    }

    /// Until when the holder (`buyer`, or for a reserve `network`) may not hold `alias`
    /// again, if it may not at `now`.
    pub(crate) fn cooling(
        &self,
        alias: &AliasId,
        buyer: Option<&UserUuid>,
        network: &str,
        now: UnixMs,
    ) -> Option<UnixMs> {
        let holder = buyer.map_or_else(|| network_key(network), account_key);
        self.cooldown
            .get(&(alias.clone(), holder))
            .copied()
            .filter(|until| now < *until)
    }

    /// Forgets the cooldowns that are over.
    pub(crate) fn sweep(&mut self, now: UnixMs) {
        self.cooldown.retain(|_, until| now < *until);
    }
}

/// What registration and sign-in are admitted by, kept in memory only: the proof-of-work
/// challenges issued (bounded, by client address) and the rate limits on asking for a
/// challenge, on registering (per address) and on asking for an auth challenge (per account).
#[derive(Debug)]
pub(crate) struct Admission {
    /// challenge string -> client address.
    pub(crate) pow: Expiring<String, String>,
    /// client address -> its outstanding challenges (oldest first).
    pub(crate) pow_by_addr: BTreeMap<String, Vec<String>>,
    pub(crate) pow_rate: RateLimiter<String>,
    pub(crate) register_rate: RateLimiter<String>,
    pub(crate) auth_rate: RateLimiter<UserUuid>,
    /// The networks of unpaid vanity holds and who may not hold an alias again yet.
    pub(crate) vanity: VanityHolders,
}

impl Admission {
    pub(crate) fn new(config: &Config) -> Self {
        Self {
            pow: Expiring::new(MAX_PENDING_POW_CHALLENGES),
            pow_by_addr: BTreeMap::new(),
            pow_rate: RateLimiter::new(POW_CHALLENGES_PER_MIN_PER_ADDR, MINUTE_MS),
            register_rate: RateLimiter::new(config.registrations_per_hour_per_addr, HOUR_MS),
            auth_rate: RateLimiter::new(AUTH_CHALLENGES_PER_MIN_PER_USER, MINUTE_MS),
            vanity: VanityHolders::default(),
        }
    }

    pub(crate) fn sweep(&mut self, now: UnixMs) {
        self.pow.sweep(now);
        let pow = &self.pow;
        self.pow_by_addr.retain(|_, list| {
            list.retain(|c| pow.contains(c));
            !list.is_empty()
        });
        self.pow_rate.sweep(now.get());
        self.register_rate.sweep(now.get());
        self.auth_rate.sweep(now.get());
        self.vanity.sweep(now);
    }

    pub(crate) fn next_expiry(&self) -> Option<UnixMs> {
        self.pow.next_expiry()
    }
}

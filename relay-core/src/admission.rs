//! Admission to registration and sign-in, in memory only: the proof-of-work challenges the
//! relay issued (a restart forgets them; clients ask again) and the rate limits in front of
//! them. The rules that use them are in `auth`.

use std::collections::{BTreeMap, BTreeSet};

use wire::{UnixMs, UserUuid};

use crate::config::Config;
use crate::limits::{
    AUTH_CHALLENGES_PER_MIN_PER_USER, HOUR_MS, MAX_PENDING_POW_CHALLENGES, MINUTE_MS,
    POW_CHALLENGES_PER_MIN_PER_ADDR,
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
}

impl Admission {
    pub(crate) fn new(config: &Config) -> Self {
        Self {
            pow: Expiring::new(MAX_PENDING_POW_CHALLENGES),
            pow_by_addr: BTreeMap::new(),
            pow_rate: RateLimiter::new(POW_CHALLENGES_PER_MIN_PER_ADDR, MINUTE_MS),
            register_rate: RateLimiter::new(config.registrations_per_hour_per_addr, HOUR_MS),
            auth_rate: RateLimiter::new(AUTH_CHALLENGES_PER_MIN_PER_USER, MINUTE_MS),
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
    }

    pub(crate) fn next_expiry(&self) -> Option<UnixMs> {
        self.pow.next_expiry()
    }
}

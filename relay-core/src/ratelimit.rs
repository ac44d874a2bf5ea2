//! Fixed-window rate limiting on the injected clock.

use std::collections::BTreeMap;

use crate::limits::RATE_LIMITER_SWEEP_AT;

/// Allows at most `max` events per key per `window_ms` (fixed windows aligned to the first
/// event of the window). Memory is bounded by sweeping expired windows when the table grows.
#[derive(Debug, Clone)]
pub(crate) struct RateLimiter<K: Ord> {
    max: u32,
    window_ms: u64,
    windows: BTreeMap<K, (u64, u32)>,
}

impl<K: Ord + Clone> RateLimiter<K> {
    pub(crate) fn new(max: u32, window_ms: u64) -> Self {
        Self {
            max,
            window_ms,
            windows: BTreeMap::new(),
        }
    }

    /// Whether one more event for `key` is allowed now, without recording it.
    pub(crate) fn check(&self, now: u64, key: &K) -> bool {
        match self.windows.get(key) {
            Some(&(start, count)) if now < start.saturating_add(self.window_ms) => count < self.max,
            _ => self.max > 0,
        }
    }

    /// Records one event for `key`.
    pub(crate) fn record(&mut self, now: u64, key: &K) {
        if self.windows.len() >= RATE_LIMITER_SWEEP_AT {
            self.sweep(now);
        }
        let w = self.window_ms;
        // `get_mut` first: the key is cloned only for a new window entry, not on every event.
        let e = match self.windows.get_mut(key) {
            Some(e) => e,
            None => self.windows.entry(key.clone()).or_insert((now, 0)),
        };
        if now >= e.0.saturating_add(w) {
            *e = (now, 0);
        }
        e.1 = e.1.saturating_add(1);
    }

    /// Checks and records in one step; returns whether the event is allowed.
    pub(crate) fn allow(&mut self, now: u64, key: &K) -> bool {
        let ok = self.check(now, key);
        if ok {
            self.record(now, key);
        }
        ok
    }

    pub(crate) fn sweep(&mut self, now: u64) {
        let w = self.window_ms;
        self.windows
            .retain(|_, (start, _)| now < start.saturating_add(w));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_resets() {
        let mut r = RateLimiter::new(2, 1000);
        assert!(r.allow(0, &1));
        assert!(r.allow(10, &1));
        assert!(!r.allow(999, &1));
        assert!(r.allow(999, &2));
        assert!(r.allow(1000, &1));
    }
}

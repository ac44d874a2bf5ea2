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

    /// Takes back one event recorded for `key` in its current window (an event of a window
    /// that has ended counts for nothing any more).
    pub(crate) fn unrecord(&mut self, now: u64, key: &K) {
        if let Some((start, count)) = self.windows.get_mut(key)
            && now < start.saturating_add(self.window_ms)
        {
            *count = count.saturating_sub(1);
        }
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

impl<K: Ord + Clone> RateLimiter<K> {
    /// Restores `key`'s window: `count` events in the window that started at `start` (a
    /// relay rebuilding its limits from its store).
    pub(crate) fn restore(&mut self, key: K, start: u64, count: u32) {
        self.windows.insert(key, (start, count));
    }

    /// Milliseconds until `key` may have one more event (0 when it may now).
    pub(crate) fn retry_after_ms(&self, now: u64, key: &K) -> u64 {
        match self.windows.get(key) {
            Some(&(start, count)) if count >= self.max => {
                start.saturating_add(self.window_ms).saturating_sub(now)
            }
            _ => 0,
        }
    }
}

/// A token bucket per key on the injected clock: `burst` tokens, refilled at `per_window`
/// tokens per `window_ms` (exactly: fractions of a token are kept). Keys whose bucket is full
/// hold no entry (a full bucket is the default), so memory is what recently active keys use.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket<K: Ord> {
    /// Units added per ms (one token is `token_units` units).
    per_ms: u64,
    /// Units of one token: the window, in ms.
    token_units: u64,
    /// Capacity in units.
    capacity: u64,
    buckets: BTreeMap<K, Bucket>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    units: u64,
    at_ms: u64,
}

impl<K: Ord + Clone> TokenBucket<K> {
    /// `burst` tokens refilled at `per_min` tokens per minute.
    pub(crate) fn new(per_min: u32, burst: u32) -> Self {
        Self::with_window(burst, per_min, crate::limits::MINUTE_MS)
    }

    /// The bucket of a [`crate::limits::Budget`].
    pub(crate) fn budget(b: crate::limits::Budget) -> Self {
        Self::with_window(b.burst, b.per_window, b.window_ms)
    }

    fn with_window(burst: u32, per_window: u32, window_ms: u64) -> Self {
        let token_units = window_ms.max(1);
        Self {
            per_ms: u64::from(per_window),
            token_units,
            capacity: u64::from(burst).saturating_mul(token_units),
            buckets: BTreeMap::new(),
        }
    }

    fn refilled(&self, b: Bucket, now: u64) -> u64 {
        let elapsed = now.saturating_sub(b.at_ms);
        b.units
            .saturating_add(elapsed.saturating_mul(self.per_ms))
            .min(self.capacity)
    }

    /// Milliseconds until `key` has a token again (0 when it has one now).
    pub(crate) fn retry_after_ms(&self, now: u64, key: &K) -> u64 {
        let units = match self.buckets.get(key) {
            Some(b) => self.refilled(*b, now),
            None => self.capacity,
        };
        if units >= self.token_units {
            return 0;
        }
        if self.per_ms == 0 {
            return u64::MAX;
        }
        (self.token_units - units).div_ceil(self.per_ms)
    }

    /// Takes one token for `key`; `false` (nothing taken) when its bucket is empty.
    pub(crate) fn take(&mut self, now: u64, key: &K) -> bool {
        let token = self.token_units;
        if self.capacity < token {
            return false;
        }
        let units = match self.buckets.get(key) {
            Some(b) => self.refilled(*b, now),
            None => self.capacity,
        };
        if units < token {
            if let Some(b) = self.buckets.get_mut(key) {
                *b = Bucket {
                    units,
                    at_ms: now.max(b.at_ms),
                };
            }
            return false;
        }
        let bucket = Bucket {
            units: units - token,
            at_ms: now,
        };
        match self.buckets.get_mut(key) {
            Some(b) => {
                b.units = bucket.units;
                b.at_ms = b.at_ms.max(now);
            }
            None => {
                if self.buckets.len() >= RATE_LIMITER_SWEEP_AT {
                    self.sweep(now);
                }
                self.buckets.insert(key.clone(), bucket);
            }
        }
        true
    }

    /// Gives one token back to `key` (never above the capacity).
    pub(crate) fn refund(&mut self, key: &K) {
        if let Some(b) = self.buckets.get_mut(key) {
            b.units = b.units.saturating_add(self.token_units).min(self.capacity);
        }
    }

    /// Forgets every bucket that has refilled completely.
    pub(crate) fn sweep(&mut self, now: u64) {
        let (per_ms, capacity) = (self.per_ms, self.capacity);
        self.buckets.retain(|_, b| {
            let elapsed = now.saturating_sub(b.at_ms);
            b.units.saturating_add(elapsed.saturating_mul(per_ms)) < capacity
        });
    }

    /// Keys with a bucket that is not full.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_its_burst_then_refills_at_its_rate() {
        let mut b = TokenBucket::new(600, 3);
        assert!(b.take(0, &1));
        assert!(b.take(0, &1));
        assert!(b.take(0, &1));
        assert!(!b.take(0, &1), "burst used up");
        assert!(b.take(0, &2), "per key");
        assert!(!b.take(99, &1), "600/min is one token per 100 ms");
        assert!(b.take(100, &1));
        assert!(!b.take(100, &1));
        b.refund(&1);
        assert!(b.take(100, &1), "a refunded token");
        // Fractions are kept: 3 × 50 ms is one and a half tokens.
        assert!(!b.take(150, &1));
        assert!(b.take(200, &1));
        // A long pause refills to the burst, never above.
        for _ in 0..3 {
            assert!(b.take(1_000_000, &1));
        }
        assert!(!b.take(1_000_000, &1));
        b.sweep(10_000_000);
        assert_eq!(b.len(), 0, "full buckets are forgotten");
    }

    #[test]
    fn an_hourly_budget_refills_by_the_hour_and_says_when() {
        let mut b = TokenBucket::budget(crate::limits::Budget {
            burst: 2,
            per_window: 60,
            window_ms: crate::limits::HOUR_MS,
        });
        assert!(b.take(0, &1));
        assert!(b.take(0, &1));
        assert!(!b.take(0, &1));
        assert_eq!(b.retry_after_ms(0, &1), 60_000, "60 per hour: one a minute");
        assert_eq!(b.retry_after_ms(0, &2), 0);
        assert!(!b.take(59_999, &1));
        assert_eq!(b.retry_after_ms(59_999, &1), 1);
        assert!(b.take(60_000, &1));
    }

    #[test]
    fn a_zero_rate_bucket_never_refills() {
        let mut b = TokenBucket::new(0, 1);
        assert!(b.take(0, &1));
        assert!(!b.take(u64::MAX, &1));
        let mut none = TokenBucket::new(600, 0);
        assert!(!none.take(0, &1));
    }

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

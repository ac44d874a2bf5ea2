//! Wall-clock time for the shells: the one seam through which `now` enters the cores.
//!
//! The cores take `now` as a [`UnixMs`] argument and never read a clock. The shells get it from
//! a [`Clock`]:
//!
//! * [`SystemClock`] reads the operating system's clock — the **only** place in the workspace
//!   allowed to call `SystemTime::now` (production: the `relay` binary, loopback tests).
//! * [`SimClock`] is a fixed epoch base plus the simulated time elapsed since the turmoil
//!   simulation started ([`turmoil::sim_elapsed`]). turmoil advances that time step by step
//!   and drives every host's tokio timers with it, so a `tokio::time::sleep` inside a
//!   simulated host and a `SimClock` reading agree, on every host, and across a host's crash
//!   and restart (a restarted host gets a fresh tokio runtime whose own `Instant`s start over,
//!   which is why the sim's global elapsed time is used rather than `tokio::time::Instant`).
//!
//! * [`OffsetClock`] wraps any clock with an offset that only grows: the relay's **test mode**
//!   (`POST /api/v1/test/advance-clock`, never in production) moves "now" forward with it.
//!
//! Deadlines from a core's `poll_timeout` are absolute [`UnixMs`]; [`sleep_until`] maps one to
//! a `tokio::time::sleep` of the remaining duration, which both networks honour (real time on
//! tokio, virtual time under turmoil).

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};
use std::time::Duration;

use wire::UnixMs;

/// The longest single sleep [`sleep_until`] arms; a later deadline is re-armed when it ends
/// (keeps far-away deadlines, like a 7-day tombstone expiry, from depending on timer range).
pub const MAX_SLEEP_MS: u64 = 60 * 60 * 1000;

/// A source of the current time as epoch milliseconds.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> UnixMs;
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(
        clippy::disallowed_methods,
        reason = "the one place the shells read the wall clock; the cores get `now` from here"
    )]
    fn now(&self) -> UnixMs {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        UnixMs(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
    }
}

#[cfg(feature = "turmoil")]
/// Simulated time: `base` plus the time elapsed since the turmoil simulation started.
///
/// Outside a running simulation (no turmoil context) it reads `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimClock {
    base: UnixMs,
}

/// The default epoch base of simulated time: 2026-01-01T00:00:00Z.
pub const SIM_EPOCH_BASE: UnixMs = UnixMs(1_767_225_600_000);

#[cfg(feature = "turmoil")]
impl SimClock {
    /// Simulated time starting at `base` when the simulation starts.
    pub fn new(base: UnixMs) -> Self {
        Self { base }
    }
}

#[cfg(feature = "turmoil")]
impl Default for SimClock {
    fn default() -> Self {
        Self::new(SIM_EPOCH_BASE)
    }
}

#[cfg(feature = "turmoil")]
impl Clock for SimClock {
    fn now(&self) -> UnixMs {
        let elapsed = turmoil::sim_elapsed().unwrap_or_default();
        self.base
            .plus_ms(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
    }
}

/// Any clock plus an offset that only grows (the test-mode clock hook).
///
/// Clones share the offset: keep one to [`advance`](Self::advance) the clock the server reads.
#[derive(Debug, Clone)]
pub struct OffsetClock {
    inner: Arc<dyn Clock>,
    offset_ms: Arc<AtomicU64>,
}

impl OffsetClock {
    /// `inner` with a zero offset.
    pub fn new(inner: Arc<dyn Clock>) -> Self {
        Self {
            inner,
            offset_ms: Arc::default(),
        }
    }

    /// Moves this clock (and every clone) forward by `ms` (saturating); returns the new now.
    pub fn advance(&self, ms: u64) -> UnixMs {
        let _ = self
            .offset_ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| {
                Some(o.saturating_add(ms))
            });
        self.now()
    }

    /// The offset added so far, in ms.
    pub fn offset_ms(&self) -> u64 {
        self.offset_ms.load(Ordering::SeqCst)
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> UnixMs {
        self.inner.now().plus_ms(self.offset_ms())
    }
}

/// How long to sleep from `now` until `deadline`: at least 1 ms (so a deadline that is already
/// due, but that the core did not clear, cannot spin the loop), at most [`MAX_SLEEP_MS`].
pub fn duration_until(now: UnixMs, deadline: UnixMs) -> Duration {
    Duration::from_millis(deadline.since(now).clamp(1, MAX_SLEEP_MS))
}

/// A tokio sleep that ends at `deadline` as read on `clock` (or after [`MAX_SLEEP_MS`]; the
/// caller re-reads `poll_timeout` and re-arms either way). `None` sleeps [`MAX_SLEEP_MS`].
pub fn sleep_until(clock: &dyn Clock, deadline: Option<UnixMs>) -> tokio::time::Sleep {
    let now = clock.now();
    let wait = deadline.map_or(Duration::from_millis(MAX_SLEEP_MS), |d| {
        duration_until(now, d)
    });
    tokio::time::sleep(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_clamped() {
        assert_eq!(
            duration_until(UnixMs(100), UnixMs(50)),
            Duration::from_millis(1)
        );
        assert_eq!(
            duration_until(UnixMs(100), UnixMs(350)),
            Duration::from_millis(250)
        );
        assert_eq!(
            duration_until(UnixMs(0), UnixMs(u64::MAX)),
            Duration::from_millis(MAX_SLEEP_MS)
        );
    }

    #[test]
    fn sim_clock_outside_a_sim_reads_its_base() {
        assert_eq!(SimClock::new(UnixMs(7)).now(), UnixMs(7));
    }

    #[test]
    fn offset_clock_only_moves_forward_and_clones_share_it() {
        let clock = OffsetClock::new(Arc::new(SimClock::new(UnixMs(1_000))));
        let other = clock.clone();
        assert_eq!(clock.now(), UnixMs(1_000));
        assert_eq!(clock.advance(500), UnixMs(1_500));
        assert_eq!(other.now(), UnixMs(1_500));
        assert_eq!(other.advance(0), UnixMs(1_500));
        assert_eq!(clock.offset_ms(), 500);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now() > UnixMs(1_577_836_800_000));
    }
}

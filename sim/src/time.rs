//! Simulated time as the hosts of a run read it: turmoil's elapsed time in ms, sleeps, and the
//! clients' skewed clocks. A leaf of the crate.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use seam::clock::{Clock, SimClock};
use wire::UnixMs;

/// Simulated ms since the run started (0 outside a simulation).
pub(crate) fn sim_ms() -> u64 {
    turmoil::sim_elapsed().map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Sleeps `ms` of simulated time.
pub(crate) async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// A client's clock: simulated time plus a skew the runner sets (clock-skew faults).
#[derive(Debug, Clone, Default)]
pub struct SkewClock {
    skew_ms: Arc<AtomicI64>,
}

impl SkewClock {
    /// Sets the skew (negative: behind).
    pub fn set(&self, skew_ms: i64) {
        self.skew_ms.store(skew_ms, Ordering::SeqCst);
    }
    /// Moves the clock `ms` forward (time passing over an idle stretch, for every app at
    /// once: the skew between two clocks stays).
    pub fn advance(&self, ms: u64) {
        self.skew_ms
            .fetch_add(i64::try_from(ms).unwrap_or(i64::MAX), Ordering::SeqCst);
    }
    /// The current skew.
    pub fn get(&self) -> i64 {
        self.skew_ms.load(Ordering::SeqCst)
    }
}

impl Clock for SkewClock {
    fn now(&self) -> UnixMs {
        let base = i64::try_from(SimClock::default().now().0).unwrap_or(i64::MAX);
        UnixMs(u64::try_from(base.saturating_add(self.get()).max(0)).unwrap_or(0))
    }
}

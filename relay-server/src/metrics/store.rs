//! Timing the store: [`MeteredStore`] around the relay's store, and the one clock the server
//! reads for itself ([`Stopwatch`], for metrics only).

use relay_core::store::{Batch, Snapshot, Store, StoreError};

use super::{Metrics, StoreOp};

/// A [`Store`] whose commits and loads are timed and counted in [`Metrics`].
#[derive(Debug)]
pub struct MeteredStore<S> {
    pub(super) inner: S,
    pub(super) metrics: Metrics,
}

impl<S: Store> Store for MeteredStore<S> {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        let watch = Stopwatch::start();
        let result = self.inner.load();
        match &result {
            Ok(_) => self.metrics.f.load_duration.observe(watch.seconds()),
            Err(e) => self.metrics.store_error(StoreOp::Load, e),
        }
        result
    }

    fn commit(&mut self, batch: Batch) -> Result<(), StoreError> {
        let rows = batch.len();
        let watch = Stopwatch::start();
        let result = self.inner.commit(batch);
        match &result {
            Ok(()) => {
                self.metrics.f.commit_duration.observe(watch.seconds());
                self.metrics.f.commit_rows.observe(rows as f64);
            }
            Err(e) => self.metrics.store_error(StoreOp::Commit, e),
        }
        result
    }
}

/// Elapsed real time, for metrics only: the one place the server reads the monotonic clock
/// for itself (never to decide anything; the relay's time comes from its [`seam::clock`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopwatch(std::time::Instant);

impl Stopwatch {
    #[allow(
        clippy::disallowed_methods,
        reason = "metrics only: a duration to export, never an input of the relay"
    )]
    pub(crate) fn start() -> Self {
        Self(std::time::Instant::now())
    }

    pub(crate) fn seconds(self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

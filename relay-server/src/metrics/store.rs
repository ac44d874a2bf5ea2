//! Timing the store: [`MeteredStore`] around the relay's store, and the one clock the server
//! reads for itself ([`Stopwatch`], for metrics only).

use relay_core::store::{Batch, Expiries, Rows, Snapshot, Store, StoreError, StoreRead, Table};

use super::{Metrics, StoreOp};

/// A [`Store`] whose commits, loads and keyed reads are timed and counted in [`Metrics`].
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

    fn load_eager(&mut self) -> Result<Snapshot, StoreError> {
        let watch = Stopwatch::start();
        let result = self.inner.load_eager();
        match &result {
            Ok(_) => self.metrics.f.load_duration.observe(watch.seconds()),
            Err(e) => self.metrics.store_error(StoreOp::Load, e),
        }
        result
    }

    fn reader(&mut self) -> Result<Box<dyn StoreRead>, StoreError> {
        let inner = self.inner.reader();
        if let Err(e) = &inner {
            self.metrics.store_error(StoreOp::Read, e);
        }
        Ok(Box::new(MeteredReader {
            inner: inner?,
            metrics: self.metrics.clone(),
        }))
    }

    fn commit(&mut self, batch: &Batch) -> Result<(), StoreError> {
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

/// A [`StoreRead`] whose reads are timed and counted in [`Metrics`].
#[derive(Debug)]
struct MeteredReader {
    inner: Box<dyn StoreRead>,
    metrics: Metrics,
}

impl MeteredReader {
    fn timed<T>(
        &mut self,
        read: impl FnOnce(&mut dyn StoreRead) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let watch = Stopwatch::start();
        let result = read(&mut *self.inner);
        match &result {
            Ok(_) => self.metrics.f.read_duration.observe(watch.seconds()),
            Err(e) => self.metrics.store_error(StoreOp::Read, e),
        }
        result
    }
}

impl StoreRead for MeteredReader {
    fn connect(&mut self) -> Result<(), StoreError> {
        let result = self.inner.connect();
        if let Err(e) = &result {
            self.metrics.store_error(StoreOp::Read, e);
        }
        result
    }
    fn get(&mut self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.timed(|r| r.get(table, key))
    }
    fn scan_prefix(&mut self, table: Table, prefix: &str) -> Result<Rows, StoreError> {
        self.timed(|r| r.scan_prefix(table, prefix))
    }
    fn scan_prefix_max(
        &mut self,
        table: Table,
        prefix: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        self.timed(|r| r.scan_prefix_max(table, prefix, max))
    }
    fn scan_prefixes(&mut self, table: Table, prefixes: &[String]) -> Result<Rows, StoreError> {
        self.timed(|r| r.scan_prefixes(table, prefixes))
    }
    fn scan_range(
        &mut self,
        table: Table,
        start: &str,
        end: &str,
        max: usize,
    ) -> Result<Rows, StoreError> {
        self.timed(|r| r.scan_range(table, start, end, max))
    }
    fn scan_page(
        &mut self,
        table: Table,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Rows, StoreError> {
        self.timed(|r| r.scan_page(table, after, limit))
    }
    fn latest_expiries(&mut self, table: Table, window: u64) -> Result<Expiries, StoreError> {
        self.timed(|r| r.latest_expiries(table, window))
    }
    fn next_expiry(&mut self, table: Table, after: u64) -> Result<Option<u64>, StoreError> {
        self.timed(|r| r.next_expiry(table, after))
    }
    fn expired(
        &mut self,
        table: Table,
        up_to: u64,
        after: Option<(u64, &str)>,
        limit: usize,
    ) -> Result<Expiries, StoreError> {
        self.timed(|r| r.expired(table, up_to, after, limit))
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

//! The log scan of a run: every formatted log line (DEBUG and above) passes through
//! [`LogScan`], which keeps only the lines holding a canary prefix, for the `canary-logs`
//! oracle; and [`SimTime`] stamps the lines of a run printed to stderr with simulated ms.

use std::sync::{Arc, Mutex, PoisonError};

use super::RunConfig;
use crate::time::sim_ms;

/// Runs `go` under the run's log subscriber: with [`RunConfig::log`], every event passing
/// its filter goes to stderr stamped with simulated ms; else, with
/// [`RunConfig::capture_logs`], everything at DEBUG but turmoil's own per-step spans (a span
/// per host per step, formatted: they cost more than the rest of the run's logging) goes
/// through `scan`; else nothing is formatted at all.
pub(super) fn with_logs<T>(config: &RunConfig, scan: &LogScan, go: impl FnOnce() -> T) -> T {
    if let Some(filter) = &config.log {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_ansi(false)
            .with_timer(SimTime)
            .with_writer(std::io::stderr)
            .finish();
        tracing::subscriber::with_default(subscriber, go)
    } else if config.capture_logs {
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(LOG_FILTER))
            .with_ansi(false)
            .without_time()
            .with_writer(scan.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, go)
    } else {
        go()
    }
}

/// A `MakeWriter` that scans every formatted log line for planted plaintext: lines holding
/// the canary prefix are kept (the rest is dropped at once, so the capture costs no memory).
#[derive(Debug, Clone, Default)]
pub(super) struct LogScan {
    suspects: Arc<Mutex<Vec<String>>>,
}

/// Log lines stamped with simulated ms (as the trace is).
struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        write!(w, "{:>8}", sim_ms())
    }
}

/// What the canary scan hears: DEBUG and above from every crate but the simulator framework.
const LOG_FILTER: &str = "debug,turmoil=warn";

/// Every canary starts with this.
const CANARY_PREFIX: &[u8] = b"CANARY";

impl LogScan {
    pub(super) fn suspects(&self) -> String {
        self.suspects
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .join("\n")
    }
}

impl std::io::Write for LogScan {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if data
            .windows(CANARY_PREFIX.len())
            .any(|w| w == CANARY_PREFIX)
        {
            self.suspects
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(String::from_utf8_lossy(data).into_owned());
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogScan {
    type Writer = Self;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

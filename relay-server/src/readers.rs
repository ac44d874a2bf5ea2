//! The readers: run the reads the relay asks for ahead of a parked frame, off the core task
//! (relay-core's `Relay::read_ahead`), and hand their results back.
//!
//! ```text
//!   core task ── poll_read ──► Readers::submit ──► [requests] ──► reader threads (one StoreRead each)
//!       ▲                                                              │ ReadRequest::run
//!       └── handle_read ◄── Readers::next ◄── [results] ◄──────────────┘
//! ```
//!
//! A read may take a whole tombstone page or a database round trip; on its own thread it
//! holds up only the frame that waits for it (and that connection's frames behind it), never
//! the core task. How many reads run at once is the number of threads ([`ReadMode::Threads`]);
//! how many wait is bounded by relay-core (one per parked connection, and parked frames are
//! bounded per connection and in all).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use relay_core::Relay;
use relay_core::prefetch::{ReadDone, ReadRequest};
use relay_core::store::{Store, StoreRead};
use tokio::sync::mpsc;
use tracing::{error, warn};

/// Reader threads of a relay over a durable store, by default (`--read-threads`): a slow read
/// (a large page, a database round trip) runs beside the reads of three other connections.
pub const READ_THREADS: usize = 4;

/// Before each read of [`ReadMode::Task`]: how long to wait first, in ms. The simulator's
/// slow-read fault (drawn per read, so reads finish out of order).
pub type ReadDelay = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Where the relay's reads of rows not in memory run.
#[derive(Clone, Default)]
pub enum ReadMode {
    /// On the core task, as a frame needs them (the relay does not read ahead). For stores
    /// whose reads cost next to nothing (memory).
    #[default]
    Core,
    /// On this many OS threads, each with a reader of its own (a SQLite connection, a
    /// PostgreSQL session): the core task never waits for a read.
    Threads(usize),
    /// On tasks of the server's runtime, one per read after `delay` (deterministic under a
    /// simulated runtime: the simulator).
    Task {
        /// Waits before each read (simulated slow reads).
        delay: Option<ReadDelay>,
    },
}

impl std::fmt::Debug for ReadMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Core => f.write_str("Core"),
            Self::Threads(n) => f.debug_tuple("Threads").field(n).finish(),
            Self::Task { delay } => f
                .debug_struct("Task")
                .field("delay", &delay.is_some())
                .finish(),
        }
    }
}

/// The core's end of the readers.
pub(crate) struct Readers {
    how: How,
    /// Reads submitted and not yet reported.
    in_flight: usize,
    /// Reads that could not be handed to a reader, reported failed by [`Readers::next`].
    refused: std::collections::VecDeque<ReadDone>,
}

enum How {
    /// The relay reads on the core task: nothing is ever submitted.
    Core,
    Threads {
        requests: std::sync::mpsc::Sender<ReadRequest>,
        done: mpsc::UnboundedReceiver<ReadDone>,
    },
    Task {
        reader: Arc<Mutex<Box<dyn StoreRead>>>,
        delay: Option<ReadDelay>,
        tx: mpsc::UnboundedSender<ReadDone>,
        done: mpsc::UnboundedReceiver<ReadDone>,
    },
}

impl Readers {
    /// Readers of `mode` over `store` (before it goes to the committer); unless the mode is
    /// [`ReadMode::Core`], `relay` reads ahead from now on. A store that gives no reader
    /// leaves the relay reading on the core task (said at WARN).
    pub(crate) fn start(mode: &ReadMode, store: &mut dyn Store, relay: &mut Relay) -> Self {
        let how = match mode {
            ReadMode::Core => How::Core,
            ReadMode::Threads(n) => match threads(*n, store) {
                Ok(how) => how,
                Err(e) => {
                    warn!(error = %e, "no reader for the read threads: the relay reads on its core task");
                    How::Core
                }
            },
            ReadMode::Task { delay } => match store.reader() {
                Ok(reader) => {
                    let (tx, done) = mpsc::unbounded_channel();
                    How::Task {
                        reader: Arc::new(Mutex::new(reader)),
                        delay: delay.clone(),
                        tx,
                        done,
                    }
                }
                Err(e) => {
                    warn!(error = %e, "no reader for the read tasks: the relay reads on its core task");
                    How::Core
                }
            },
        };
        if !matches!(how, How::Core) {
            relay.read_ahead();
        }
        Self {
            how,
            in_flight: 0,
            refused: std::collections::VecDeque::new(),
        }
    }

    /// Reads submitted and not yet reported.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Hands `request` to a reader. Without one (the threads are gone) the read is reported
    /// failed: its frame is refused with `STORAGE_UNAVAILABLE`.
    pub(crate) fn submit(&mut self, request: ReadRequest) {
        self.in_flight += 1;
        match &mut self.how {
            How::Core => {
                error!("a read was asked of a relay that reads on its core task");
                self.refused.push_back(failed(&request, "no reader"));
            }
            How::Threads { requests, .. } => {
                if let Err(std::sync::mpsc::SendError(request)) = requests.send(request) {
                    error!("the read threads are gone: the read fails");
                    self.refused
                        .push_back(failed(&request, "the read threads are gone"));
                }
            }
            How::Task {
                reader, delay, tx, ..
            } => {
                let reader = Arc::clone(reader);
                let delay = delay.as_ref().map_or(0, |d| d());
                let tx = tx.clone();
                tokio::spawn(async move {
                    if delay > 0 {
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                    }
                    let done = {
                        let mut reader = reader.lock().unwrap_or_else(PoisonError::into_inner);
                        request.run(&mut **reader)
                    };
                    let _ = tx.send(done);
                });
            }
        }
    }

    /// The next read done. Pends while none is in flight.
    pub(crate) async fn next(&mut self) -> ReadDone {
        if let Some(done) = self.refused.pop_front() {
            self.in_flight = self.in_flight.saturating_sub(1);
            return done;
        }
        let done = match &mut self.how {
            How::Core => None,
            How::Threads { done, .. } | How::Task { done, .. } => done.recv().await,
        };
        match done {
            Some(done) => {
                self.in_flight = self.in_flight.saturating_sub(1);
                done
            }
            None => std::future::pending().await,
        }
    }
}

/// A read that could not be run.
fn failed(request: &ReadRequest, why: &str) -> ReadDone {
    ReadDone {
        id: request.id,
        result: Err(relay_core::store::StoreError::Backend(why.into())),
    }
}

/// `n` reader threads over readers of `store`, sharing one queue of requests.
fn threads(n: usize, store: &mut dyn Store) -> Result<How, relay_core::store::StoreError> {
    let (requests, rx) = std::sync::mpsc::channel::<ReadRequest>();
    let (tx, done) = mpsc::unbounded_channel();
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..n.max(1) {
        let mut reader = store.reader()?;
        let (rx, tx) = (Arc::clone(&rx), tx.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("relay-read-{i}"))
            .spawn(move || {
                // Connect before the first frame needs a read (a failure is retried then).
                if let Err(e) = reader.connect() {
                    warn!(error = %e, "a read thread's reader could not connect yet");
                }
                loop {
                    let next = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    // The core let go of the readers: nothing more to read.
                    let Ok(request) = next else { return };
                    if tx.send(request.run(&mut *reader)).is_err() {
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            return Err(relay_core::store::StoreError::Backend(format!(
                "cannot start a read thread: {e}"
            )));
        }
    }
    Ok(How::Threads { requests, done })
}

//! The committer: applies the relay's sealed batches to the store, one after the other in seal
//! order, while the core task goes on with the next batch (relay-core's pipelined commits,
//! see `Relay`'s doc).
//!
//! ```text
//!   core task ── seal_batch ──► Committer::submit ──► [requests, PIPELINE_DEPTH] ──► commit loop
//!       ▲                                                                             │ Store::commit
//!       └── handle_committed ◄── Committer::next ◄── [completions, PIPELINE_DEPTH] ◄──┘
//! ```
//!
//! Rules the loop keeps, whatever runs it ([`CommitMode`]):
//! * batches are applied in the order they were submitted; whatever is queued when the loop
//!   gets to it is applied in **one** store transaction (the batches' mutations in order), so a
//!   slow store sees fewer, larger commits;
//! * after a commit fails, no later batch is applied: each is reported failed without touching
//!   the store (it was built on the failed one), and so is everything submitted once the
//!   [`Committer`] is dropped;
//! * every submitted batch is reported exactly once, in order.
//!
//! The core keeps at most [`PIPELINE_DEPTH`] batches in flight, so neither channel can fill.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use relay_core::handoff::ShardId;
use relay_core::store::{Batch, Store, StoreError};
use relay_core::{BatchId, SealedBatch};
use tokio::sync::mpsc;
use tracing::{error, warn};

/// Batches the core keeps in flight at most: sealed and handed to the committer, their commit
/// not yet reported. While that many wait, the core reads no input (inputs queue up in front of
/// it, up to `INPUT_QUEUE_CAPACITY`, and become the next, larger batch). Four lets the core
/// handle a batch while one commits and a few more queue, which the committer then applies as
/// one transaction; more would only hold more acknowledgements back.
pub const PIPELINE_DEPTH: usize = 4;

/// Before each commit of [`CommitMode::Task`]: how long the core of the given shard waits
/// first, in ms (0: none). The simulator's slow-commit faults (one aimed at one shard too).
pub type CommitDelay = Arc<dyn Fn(ShardId) -> u64 + Send + Sync>;

/// Where a server's commits run.
#[derive(Clone, Default)]
pub enum CommitMode {
    /// On the core task, as each batch is sealed: nothing is pipelined. For stores whose
    /// commit costs next to nothing (memory).
    #[default]
    Inline,
    /// On an OS thread of its own, so a blocking commit (SQLite's `fsync`, PostgreSQL's round
    /// trip) never holds a runtime worker and the core handles the next batch meanwhile.
    Thread,
    /// On a task of the server's runtime: the same pipeline, deterministic under a simulated
    /// runtime (the simulator); `delay` is asked before each commit.
    Task {
        /// Waits before a commit (simulated slow commits).
        delay: Option<CommitDelay>,
    },
}

impl CommitMode {
    /// Whether the core seals each batch as soon as it is handled. Inline, that is the only
    /// way. On a task (the simulator) it puts several small batches in flight behind a slow or
    /// failing commit, the deepest pipeline. On a thread (production) the core instead keeps
    /// the open batch growing while a commit runs and seals it when the committer has nothing
    /// in flight or it holds `MAX_BATCH_INPUTS` inputs: the fewest, largest transactions,
    /// one running while the next fills.
    pub(crate) fn seals_eagerly(&self) -> bool {
        !matches!(self, Self::Thread)
    }
}

impl std::fmt::Debug for CommitMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Inline => f.write_str("Inline"),
            Self::Thread => f.write_str("Thread"),
            Self::Task { delay } => f
                .debug_struct("Task")
                .field("delay", &delay.is_some())
                .finish(),
        }
    }
}

/// A batch to apply.
struct Request {
    id: BatchId,
    mutations: Batch,
}

/// The commit of one batch, reported in submission order.
#[derive(Debug)]
pub(crate) struct Completion {
    pub(crate) id: BatchId,
    pub(crate) result: Result<(), StoreError>,
    /// The batch's emptied buffers, for the core to reuse ([`relay_core::Relay::recycle_batch`]).
    pub(crate) spare: Option<Batch>,
}

impl Completion {
    /// A report for a batch whose buffers did not come back.
    fn lost(id: BatchId, result: Result<(), StoreError>) -> Self {
        Self {
            id,
            result,
            spare: None,
        }
    }
}

/// The core's end of a commit loop (or the store itself, inline).
pub(crate) struct Committer {
    how: How,
    /// Batches submitted and not yet reported, oldest first.
    in_flight: VecDeque<BatchId>,
    /// Set when the core lets go (dropped): the loop applies nothing more.
    stop: Arc<AtomicBool>,
}

enum How {
    Inline {
        store: Box<dyn Store>,
        /// A commit failed: refuse every later batch.
        failed: bool,
        done: VecDeque<Completion>,
    },
    Thread {
        requests: std::sync::mpsc::SyncSender<Request>,
        done: mpsc::Receiver<Completion>,
        /// The store, shared with the thread: the core commits itself at light load.
        shared: Arc<Mutex<Shared>>,
        /// Reports of the commits the core made itself.
        ready: VecDeque<Completion>,
    },
    Task {
        requests: mpsc::Sender<Request>,
        done: mpsc::Receiver<Completion>,
    },
}

impl Committer {
    /// Starts a committer of `mode` that owns `store`, the store of shard `shard`'s core. When
    /// its thread cannot be spawned, the store is lost with the closure: every batch is then
    /// reported failed (fail-stop), and the rebuild opens the store again and retries.
    pub(crate) fn start(mode: &CommitMode, store: Box<dyn Store>, shard: ShardId) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let how = match mode {
            CommitMode::Inline => How::Inline {
                store,
                failed: false,
                done: VecDeque::new(),
            },
            CommitMode::Thread => {
                let (requests, rx) = std::sync::mpsc::sync_channel(PIPELINE_DEPTH);
                let (tx, done) = mpsc::channel(PIPELINE_DEPTH);
                let stopped = Arc::clone(&stop);
                let shared = Arc::new(Mutex::new(Shared {
                    store,
                    failed: false,
                }));
                let theirs = Arc::clone(&shared);
                let spawned = std::thread::Builder::new()
                    .name("relay-commit".into())
                    .spawn(move || thread_loop(&theirs, &rx, &tx, &stopped));
                if let Err(e) = spawned {
                    error!(error = %e, "cannot start the commit thread: every commit fails");
                }
                How::Thread {
                    requests,
                    done,
                    shared,
                    ready: VecDeque::new(),
                }
            }
            CommitMode::Task { delay } => {
                let (requests, rx) = mpsc::channel(PIPELINE_DEPTH);
                let (tx, done) = mpsc::channel(PIPELINE_DEPTH);
                let stopped = Arc::clone(&stop);
                let delay = delay.clone().map(|d| (d, shard));
                tokio::spawn(task_loop(store, rx, tx, stopped, delay));
                How::Task { requests, done }
            }
        };
        Self {
            how,
            in_flight: VecDeque::with_capacity(PIPELINE_DEPTH),
            stop,
        }
    }

    /// Batches submitted and not yet reported.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether another batch may be submitted ([`PIPELINE_DEPTH`]).
    pub(crate) fn has_room(&self) -> bool {
        self.in_flight.len() < PIPELINE_DEPTH
    }

    /// Hands `batch` to the loop (inline: applies it now). The caller keeps within
    /// [`PIPELINE_DEPTH`], so the request queue (as deep) always has room; a loop that is
    /// gone reports the batch failed. `quiet`: the load is light (the caller saw no input
    /// arrive during the last commit and none waits now), so when nothing is in flight either,
    /// a commit thread's batch is applied here and now: there is nothing to overlap it with,
    /// and the hand-off would only add two wake-ups. Returns whether it was.
    pub(crate) fn submit(&mut self, batch: SealedBatch, quiet: bool) -> bool {
        debug_assert!(self.has_room(), "pipeline over its depth");
        let SealedBatch { id, mutations } = batch;
        let nothing_in_flight = self.in_flight.is_empty();
        self.in_flight.push_back(id);
        let request = Request { id, mutations };
        let mut here = false;
        let sent = match &mut self.how {
            How::Inline {
                store,
                failed,
                done,
            } => {
                done.extend(commit_group(
                    &mut **store,
                    failed,
                    None,
                    std::iter::once(request),
                ));
                true
            }
            How::Thread { shared, ready, .. } if quiet && nothing_in_flight => {
                // The thread is idle (nothing in flight): the lock is free.
                let mut shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
                let Shared { store, failed } = &mut *shared;
                ready.extend(commit_group(
                    &mut **store,
                    failed,
                    None,
                    std::iter::once(request),
                ));
                here = true;
                true
            }
            How::Thread { requests, .. } => requests.try_send(request).is_ok(),
            How::Task { requests, .. } => requests.try_send(request).is_ok(),
        };
        if !sent {
            error!(%id, "the commit loop is gone: the batch is not stored");
        }
        here
    }

    /// The next report, in submission order; pends while none is in flight.
    pub(crate) async fn next(&mut self) -> Completion {
        let Some(&id) = self.in_flight.front() else {
            return std::future::pending().await;
        };
        let completion = match &mut self.how {
            How::Inline { done, .. } => done.pop_front(),
            How::Thread { ready, done, .. } => match ready.pop_front() {
                Some(c) => Some(c),
                None => done.recv().await,
            },
            How::Task { done, .. } => done.recv().await,
        };
        self.in_flight.pop_front();
        match completion {
            Some(c) if c.id == id => c,
            Some(c) => {
                error!(expected = %id, got = %c.id, "commit reported out of order");
                Completion::lost(
                    id,
                    Err(StoreError::Backend("commit reported out of order".into())),
                )
            }
            // The loop ended (it could not start, or panicked): nothing more is stored.
            None => Completion::lost(
                id,
                Err(StoreError::Backend("the commit loop stopped".into())),
            ),
        }
    }

    /// The next report if it is already there (always, inline).
    pub(crate) fn try_next(&mut self) -> Option<Completion> {
        let &id = self.in_flight.front()?;
        let completion = match &mut self.how {
            How::Inline { done, .. } => done.pop_front(),
            How::Thread { ready, .. } if !ready.is_empty() => ready.pop_front(),
            How::Thread { done, .. } | How::Task { done, .. } => match done.try_recv() {
                Ok(c) => Some(c),
                Err(mpsc::error::TryRecvError::Empty) => return None,
                Err(mpsc::error::TryRecvError::Disconnected) => None,
            },
        };
        self.in_flight.pop_front();
        Some(match completion {
            Some(c) if c.id == id => c,
            _ => Completion::lost(
                id,
                Err(StoreError::Backend("the commit loop stopped".into())),
            ),
        })
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A commit thread's store and whether a commit failed, shared with the core, which commits
/// itself only while the thread has nothing in flight.
struct Shared {
    store: Box<dyn Store>,
    failed: bool,
}

/// The commit loop on its own thread: until the core's end is gone.
fn thread_loop(
    shared: &Mutex<Shared>,
    requests: &std::sync::mpsc::Receiver<Request>,
    done: &mpsc::Sender<Completion>,
    stop: &AtomicBool,
) {
    while let Ok(first) = requests.recv() {
        let mut group = vec![first];
        group.extend(requests.try_iter().take(PIPELINE_DEPTH));
        let completions = {
            // Released before the reports go: the core commits itself only once every
            // report is in, so it never waits for this lock.
            let mut shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
            let Shared { store, failed } = &mut *shared;
            commit_group(&mut **store, failed, Some(stop), group)
        };
        for completion in completions {
            if done.blocking_send(completion).is_err() {
                return;
            }
        }
    }
}

/// The commit loop as a task of the server's runtime.
async fn task_loop(
    mut store: Box<dyn Store>,
    mut requests: mpsc::Receiver<Request>,
    done: mpsc::Sender<Completion>,
    stop: Arc<AtomicBool>,
    delay: Option<(CommitDelay, ShardId)>,
) {
    let mut failed = false;
    while let Some(first) = requests.recv().await {
        let mut group = vec![first];
        while group.len() < PIPELINE_DEPTH {
            match requests.try_recv() {
                Ok(r) => group.push(r),
                Err(_) => break,
            }
        }
        // A slow commit: what arrives meanwhile queues for the next one.
        let wait_ms = delay.as_ref().map_or(0, |(d, shard)| d(*shard));
        if wait_ms > 0 {
            tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        }
        for completion in commit_group(&mut *store, &mut failed, Some(&*stop), group) {
            if done.send(completion).await.is_err() {
                return;
            }
        }
    }
}

/// Applies `group` (consecutive batches) in one transaction, unless an earlier commit failed
/// or the core let go (`stop`); one report per batch, each with its batch's buffers to reuse.
/// The later batches' mutations are appended to the first's, which is committed.
fn commit_group(
    store: &mut dyn Store,
    failed: &mut bool,
    stop: Option<&AtomicBool>,
    group: impl IntoIterator<Item = Request, IntoIter: ExactSizeIterator>,
) -> Vec<Completion> {
    if stop.is_some_and(|stop| stop.load(Ordering::Relaxed)) {
        *failed = true;
    }
    let mut requests = group.into_iter();
    let n = requests.len();
    let Some(Request {
        id: first,
        mutations: mut all,
    }) = requests.next()
    else {
        return Vec::new();
    };
    let mut rest = Vec::with_capacity(n - 1);
    for mut request in requests {
        all.append(&mut request.mutations);
        rest.push(request);
    }
    let results = apply(store, failed, &all, n);
    let spares = std::iter::once((first, all)).chain(rest.into_iter().map(|r| (r.id, r.mutations)));
    spares
        .zip(results)
        .map(|((id, mut spare), result)| {
            spare.clear();
            Completion {
                id,
                result,
                spare: Some(spare),
            }
        })
        .collect()
}

/// Applies `mutations` (those of `batches` batches) in one transaction: `batches` results,
/// all `Ok` or all `Err`. Nothing is applied once a commit failed.
fn apply(
    store: &mut dyn Store,
    failed: &mut bool,
    mutations: &Batch,
    batches: usize,
) -> Vec<Result<(), StoreError>> {
    let result = if *failed {
        Err(StoreError::Backend(
            "an earlier commit failed: batches built on it are not applied".into(),
        ))
    } else if mutations.is_empty() {
        Ok(())
    } else {
        store.commit(mutations)
    };
    match result {
        Ok(()) => (0..batches).map(|_| Ok(())).collect(),
        Err(e) => {
            if !*failed {
                warn!(error = %e, batches, "commit failed: it and every later batch fail");
            }
            *failed = true;
            let first = Err(e);
            std::iter::once(first)
                .chain((1..batches).map(|_| {
                    Err(StoreError::Backend(
                        "committed in one transaction with a batch that failed".into(),
                    ))
                }))
                .collect()
        }
    }
}

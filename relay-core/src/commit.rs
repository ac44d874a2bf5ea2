//! The commit pipeline: what the relay's inputs staged, on its way to the store. It owns the
//! store the relay commits through itself (until a shell takes it), the open batch (the group
//! of inputs committed together), the sealed batches whose commit the shell has not reported
//! yet, and the first batch that is not durable once a commit failed.
//!
//! [`Pipeline`] decides what is committed when and in which order; it never releases an output
//! or touches the working state itself: each step hands back what [`crate::Relay`] must
//! release, unpin or drop (its rules are in the `Relay` type's doc: group commit, pipelined
//! commits, fail-stop).

use std::collections::{BTreeMap, VecDeque};

use crate::shell::{ConnId, Output};
use crate::state::Pins;
use crate::store::{Batch, Spares, Store, StoreError};

/// [`Relay::commit_batch`](crate::Relay::commit_batch) failed: nothing of the batch was stored
/// or released, and the relay stopped (fail-stop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchFailed;

impl std::fmt::Display for BatchFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the batch's commit failed: nothing of it was stored, the relay stopped")
    }
}

impl std::error::Error for BatchFailed {}

/// An input's commit failed: nothing it staged was released, and the relay stopped
/// (fail-stop). Inside a batch the input never fails on its own; the batch does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InputFailed;

/// Identifies a sealed batch ([`Relay::seal_batch`](crate::Relay::seal_batch)); ids increase
/// in seal order, which is the order the batches must be committed and reported in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchId(u64);

impl BatchId {
    /// The id as a number (for logs and metrics).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for BatchId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "batch {}", self.0)
    }
}

/// A batch handed out by [`Relay::seal_batch`](crate::Relay::seal_batch) for the shell to
/// commit.
#[derive(Debug)]
pub struct SealedBatch {
    /// Which batch: its commit is reported with
    /// [`Relay::handle_committed`](crate::Relay::handle_committed).
    pub id: BatchId,
    /// Its mutations, to apply in one store transaction after every earlier sealed batch's
    /// (possibly empty: the batch's outputs still wait for the batches before it).
    pub mutations: Batch,
}

/// The inputs of a group commit: their mutations and outputs, in input order.
#[derive(Debug, Default)]
pub(crate) struct Group {
    mutations: Batch,
    outputs: Vec<Output>,
    /// What the batch wrote of the caches over the store: kept in memory until it is durable.
    pinned: Pins,
}

/// What a batch releases once it is durable (or, for a batch that needed no commit, at once).
#[derive(Debug)]
pub(crate) struct Release {
    /// Its outputs, in input order.
    pub(crate) outputs: Vec<Output>,
    /// The cache entries it wrote, to unpin.
    pub(crate) pinned: Pins,
    /// Media blobs its mutations stop naming, to delete.
    pub(crate) blob_garbage: Vec<(wire::UploadId, Option<u32>)>,
}

/// A sealed batch waiting for its commit: what it releases when the commit is reported.
#[derive(Debug)]
struct InFlight {
    id: BatchId,
    release: Release,
}

/// What sealing the open batch came to ([`Pipeline::seal`]).
#[derive(Debug)]
pub(crate) enum Sealed {
    /// No batch was open.
    Nothing,
    /// The batch changed nothing and none is in flight before it: release it now.
    Now(Release),
    /// The shell commits this, then reports it.
    Batch(SealedBatch),
}

/// What a commit report came to ([`Pipeline::report`]).
#[derive(Debug)]
pub(crate) enum Reported {
    /// The batch is durable: release it.
    Durable(Release),
    /// The commit failed, or the report came out of seal order: fail stop with `first` as the
    /// first batch that is not durable. `outputs`: what the batch would have released (gone).
    Failed {
        first: BatchId,
        outputs: Vec<Output>,
    },
}

/// The commit pipeline (see the module doc).
#[derive(Debug)]
pub(crate) struct Pipeline {
    /// The store the relay commits through itself; `None` once a shell took it.
    store: Option<Box<dyn Store>>,
    /// The open batch (from `begin`, or always once the store was taken).
    group: Option<Group>,
    /// Sealed batches whose commit has not been reported yet, oldest first.
    in_flight: VecDeque<InFlight>,
    /// The id the next sealed batch gets.
    next_batch: u64,
    /// The first batch that did not commit (a failed commit, or the open batch when the relay
    /// failed for another reason): it and every later batch are not durable.
    failed_at: Option<BatchId>,
    /// Emptied batches kept for the next groups: their buffers' capacity is reused, so a
    /// steady stream of batches allocates none.
    spares: Spares,
    /// How many outputs for each connection the open batch and the batches in flight hold
    /// (a frame that may go before its input's commit must not pass them), when `counts_held`.
    held: BTreeMap<ConnId, usize>,
    /// Whether `held` is kept: only a relay of several shards releases frames early.
    counts_held: bool,
}

impl Pipeline {
    /// A pipeline that commits through `store` itself until a shell takes it; `counts_held`:
    /// it counts the outputs it holds per connection ([`Pipeline::holds`]).
    pub(crate) fn new(store: Box<dyn Store>, counts_held: bool) -> Self {
        Self {
            store: Some(store),
            group: None,
            in_flight: VecDeque::new(),
            next_batch: 0,
            failed_at: None,
            spares: Spares::default(),
            held: BTreeMap::new(),
            counts_held,
        }
    }

    /// Whether the open batch or a batch in flight holds an output for `conn` (never, unless
    /// the pipeline counts them).
    pub(crate) fn holds(&self, conn: ConnId) -> bool {
        self.held.contains_key(&conn)
    }

    /// Counts `outputs` as held (`true`) or let go.
    fn count_held(&mut self, outputs: &[Output], held: bool) {
        if !self.counts_held {
            return;
        }
        for conn in outputs.iter().filter_map(Output::conn) {
            if held {
                *self.held.entry(conn).or_default() += 1;
            } else if let Some(n) = self.held.get_mut(&conn) {
                *n -= 1;
                if *n == 0 {
                    self.held.remove(&conn);
                }
            }
        }
    }

    /// Opens a batch unless one is open.
    pub(crate) fn begin(&mut self) {
        if self.group.is_none() {
            self.group = Some(self.new_group());
        }
    }

    /// An empty group, on a spare batch if there is one.
    fn new_group(&mut self) -> Group {
        Group {
            mutations: self.spares.take(),
            ..Group::default()
        }
    }

    /// Whether a batch is open.
    pub(crate) fn in_batch(&self) -> bool {
        self.group.is_some()
    }

    /// Whether commits are pipelined: the store was taken, or batches are in flight.
    pub(crate) fn pipelined(&self) -> bool {
        self.store.is_none() || !self.in_flight.is_empty()
    }

    /// How many sealed batches wait for their commit report.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Hands the store out (`None` when it was taken before).
    pub(crate) fn take_store(&mut self) -> Option<Box<dyn Store>> {
        self.store.take()
    }

    /// Keeps a committed batch's buffers for a later group.
    pub(crate) fn recycle(&mut self, batch: Batch) {
        self.spares.give(batch);
    }

    /// Commits a sealed batch's `mutations` through the relay's own store; an error if commits
    /// were `pipelined` before it was sealed (the shell commits them then).
    pub(crate) fn commit_here(
        &mut self,
        mutations: &Batch,
        pipelined: bool,
    ) -> Result<(), StoreError> {
        match &mut self.store {
            Some(store) if !pipelined => {
                if mutations.is_empty() {
                    Ok(())
                } else {
                    store.commit(mutations)
                }
            }
            _ => Err(StoreError::Backend(
                "commit_batch called while commits are pipelined".into(),
            )),
        }
    }

    /// Opens a batch if commits are pipelined and none is open: an input's outputs must then
    /// wait behind the batches in flight (and a relay without its store commits nothing itself).
    #[inline]
    pub(crate) fn open_if_pipelined(&mut self) {
        if self.group.is_none() && self.pipelined() {
            self.group = Some(self.new_group());
        }
    }

    /// Moves one input's `mutations` and `outputs` into the open batch; the batch's pins, for
    /// the cache entries the input wrote. `None` (nothing moved) when no batch is open.
    pub(crate) fn join(
        &mut self,
        mutations: &mut Batch,
        outputs: &mut Vec<Output>,
    ) -> Option<&mut Pins> {
        self.group.as_ref()?;
        self.count_held(outputs, true);
        let group = self.group.as_mut()?;
        group.mutations.append(mutations);
        group.outputs.append(outputs);
        Some(&mut group.pinned)
    }

    /// Commits one input's `mutations` through the relay's own store (no batch open).
    pub(crate) fn commit_input(&mut self, mutations: &Batch) -> Result<(), StoreError> {
        if mutations.is_empty() {
            return Ok(());
        }
        match &mut self.store {
            Some(store) => store.commit(mutations),
            None => Err(StoreError::Backend("the relay has no store".into())),
        }
    }

    /// Closes the open batch (opening the next at once once the store was taken).
    /// `blob_garbage`: the media blobs the batch stops naming, taken only if the batch goes in
    /// flight.
    pub(crate) fn seal(&mut self, blob_garbage: &mut Vec<(wire::UploadId, Option<u32>)>) -> Sealed {
        let Some(group) = self.group.take() else {
            return Sealed::Nothing;
        };
        if self.store.is_none() {
            self.group = Some(self.new_group());
        }
        if group.mutations.is_empty() && self.in_flight.is_empty() {
            self.count_held(&group.outputs, false);
            return Sealed::Now(Release {
                outputs: group.outputs,
                pinned: group.pinned,
                blob_garbage: Vec::new(),
            });
        }
        let id = BatchId(self.next_batch);
        self.next_batch += 1;
        self.in_flight.push_back(InFlight {
            id,
            release: Release {
                outputs: group.outputs,
                pinned: group.pinned,
                blob_garbage: std::mem::take(blob_garbage),
            },
        });
        Sealed::Batch(SealedBatch {
            id,
            mutations: group.mutations,
        })
    }

    /// The shell reports the commit of sealed batch `id` (reports come in seal order).
    pub(crate) fn report(&mut self, id: BatchId, committed: bool) -> Reported {
        let in_order = self.in_flight.front().is_some_and(|b| b.id == id);
        debug_assert!(in_order, "{id} reported out of seal order");
        if !in_order {
            let first = self.in_flight.front().map_or(id, |b| b.id.min(id));
            return Reported::Failed {
                first,
                outputs: Vec::new(),
            };
        }
        let batch = self.in_flight.pop_front();
        if let Some(batch) = &batch {
            self.count_held(&batch.release.outputs, false);
        }
        match batch {
            Some(batch) if committed => Reported::Durable(batch.release),
            Some(batch) => Reported::Failed {
                first: id,
                outputs: batch.release.outputs,
            },
            None => Reported::Failed {
                first: id,
                outputs: Vec::new(),
            },
        }
    }

    /// After fail-stop: whether batch `id`, whose commit `committed`, is durable (it was
    /// sealed before the first batch that is not).
    pub(crate) fn durable_after_failure(&self, id: BatchId, committed: bool) -> bool {
        committed && self.failed_at.is_some_and(|first| id < first)
    }

    /// The id the next sealed batch would get: the first not durable when an input's own
    /// commit fails.
    pub(crate) fn next_id(&self) -> BatchId {
        BatchId(self.next_batch)
    }

    /// Fail-stop with `first` as the first batch that is not durable: the open batch and every
    /// batch in flight are dropped.
    pub(crate) fn fail_stop_at(&mut self, first: BatchId) {
        self.failed_at = Some(self.failed_at.map_or(first, |f| f.min(first)));
        self.drop_all();
    }

    /// Drops the open batch and every batch in flight.
    pub(crate) fn drop_all(&mut self) {
        self.group = None;
        self.in_flight.clear();
        self.held.clear();
    }

    /// Drops the open batch (a relay that failed seals nothing).
    pub(crate) fn drop_open(&mut self) {
        if let Some(group) = self.group.take() {
            self.count_held(&group.outputs, false);
        }
    }
}

//! The relay's side of the commit pipeline ([`crate::commit::Pipeline`]): group commit,
//! pipelined commits (sealed batches and their reports), the end of every input (its commit,
//! or its place in the open batch) and fail-stop. The rules are in [`Relay`]'s doc.

use super::*;

impl Relay {
    // ------------------------------------------------------------------ group commit

    /// Starts a group commit (see [the type's doc](Relay#group-commit)): the inputs handled from
    /// now on are committed together by [`commit_batch`](Relay::commit_batch) (or handed out by
    /// [`seal_batch`](Relay::seal_batch)). A no-op when a batch is already open or the relay
    /// failed.
    pub fn begin_batch(&mut self) {
        if !self.failed {
            self.commits.begin();
        }
    }

    /// Commits every input handled since [`begin_batch`](Relay::begin_batch) in one store
    /// transaction, then releases their outputs in input order. `Err`: nothing of the batch
    /// was stored or released; the relay failed stop (every socket is closed, see
    /// [`is_failed`](Relay::is_failed)), and every provisional answer of the batch must become
    /// [`storage_unavailable_response`]. Without an open batch: `Ok(())`, or `Err` if the
    /// relay has failed.
    ///
    /// Only for a relay that still has its store and no batch in flight: a shell that
    /// pipelines commits uses [`seal_batch`](Relay::seal_batch) and
    /// [`handle_committed`](Relay::handle_committed) instead (calling this then fails stop).
    pub fn commit_batch(&mut self) -> Result<(), BatchFailed> {
        let pipelined = self.commits.pipelined();
        debug_assert!(!pipelined, "commit_batch on a pipelined relay");
        let Some(sealed) = self.seal_batch()? else {
            return Ok(());
        };
        let committed = self.commits.commit_here(&sealed.mutations, pipelined);
        self.recycle_batch(sealed.mutations);
        self.handle_committed(sealed.id, &committed)
    }

    /// Gives back a sealed batch's mutations once the shell committed them, so that a later
    /// batch reuses their buffers instead of allocating its own (optional: a batch not given
    /// back is simply dropped).
    pub fn recycle_batch(&mut self, batch: crate::store::Batch) {
        self.commits.recycle(batch);
    }

    /// Whether a batch is open ([`begin_batch`](Relay::begin_batch) without its
    /// [`commit_batch`](Relay::commit_batch) or [`seal_batch`](Relay::seal_batch); always,
    /// once the store was taken, until the relay fails).
    pub fn in_batch(&self) -> bool {
        self.commits.in_batch()
    }

    // ------------------------------------------------------------------ pipelined commits

    /// Hands the store to the shell, for a committer of its own (see
    /// [the type's doc](Relay#pipelined-commits)). From then on the relay commits nothing
    /// itself: a batch is always open, every input joins it, and the shell seals it with
    /// [`seal_batch`](Relay::seal_batch), commits its mutations in seal order and reports each
    /// commit with [`handle_committed`](Relay::handle_committed). `None` when it was taken
    /// before.
    pub fn take_store(&mut self) -> Option<Box<dyn Store>> {
        let store = self.commits.take_store();
        self.begin_batch();
        store
    }

    /// Closes the open batch and hands its mutations out for the shell to commit, after every
    /// batch sealed before it. Its outputs (and the shell's answers to its inputs) wait until
    /// [`handle_committed`](Relay::handle_committed) reports that this commit and every earlier
    /// one succeeded; meanwhile the relay goes on handling inputs on top of its state.
    ///
    /// `Ok(None)`: nothing to commit or wait for — no batch was open, or it changed nothing
    /// and no batch is in flight before it, so its outputs are released now. `Err`: the relay
    /// failed (before or during the batch); nothing of the batch is stored or released, and
    /// its provisional answers become [`storage_unavailable_response`]. Once the store was
    /// taken, a new batch opens at once.
    pub fn seal_batch(&mut self) -> Result<Option<SealedBatch>, BatchFailed> {
        if self.failed {
            self.commits.drop_open();
            return Err(BatchFailed);
        }
        // The batch's level reports, one per owner for all its inputs, join it last.
        if self.commits.in_batch() && self.stage_falls() && self.commit_staged().is_err() {
            return Err(BatchFailed);
        }
        match self.commits.seal(self.state.blob_garbage()) {
            Sealed::Nothing => Ok(None),
            Sealed::Now(release) => {
                self.outputs.extend(release.outputs);
                self.state.unpin(release.pinned);
                self.cx().collect_blobs();
                Ok(None)
            }
            Sealed::Batch(sealed) => Ok(Some(sealed)),
        }
    }

    /// The shell reports the commit of sealed batch `id`; reports come in seal order.
    ///
    /// `Ok(())`: the batch is durable. Its outputs are released (after those of every earlier
    /// batch) and the shell may send its provisional answers. `Err`: the batch is not durable;
    /// its answers become [`storage_unavailable_response`]. A failed commit fails stop:
    /// nothing of this batch or of any batch sealed after it is released, every socket is
    /// closed, and the shell must not apply the later batches either (they were built on
    /// this one) — it reports each of them, and each gets `Err`.
    ///
    /// After the relay failed for another reason, a batch sealed before the failure whose
    /// commit succeeds still gets `Ok(())` (its answers are true) although its frames were
    /// dropped with the sockets. A report out of order is a shell bug: the relay fails stop.
    pub fn handle_committed(
        &mut self,
        id: BatchId,
        result: &Result<(), StoreError>,
    ) -> Result<(), BatchFailed> {
        if self.failed {
            return if self.commits.durable_after_failure(id, result.is_ok()) {
                Ok(())
            } else {
                Err(BatchFailed)
            };
        }
        match self.commits.report(id, result.is_ok()) {
            Reported::Durable(release) => {
                self.outputs.extend(release.outputs);
                self.state.unpin(release.pinned);
                self.evict();
                self.state.blob_garbage().extend(release.blob_garbage);
                self.cx().collect_blobs();
                Ok(())
            }
            Reported::Failed { first, outputs } => {
                if planted!(self.config, AckWithoutCommit) {
                    // PLANTED BUG (test-only): the outputs (acks) leave although nothing was stored.
                    self.outputs.extend(outputs);
                }
                self.fail_stop_at(first);
                Err(BatchFailed)
            }
        }
    }

    /// How many sealed batches wait for their commit report.
    pub fn batches_in_flight(&self) -> usize {
        self.commits.in_flight()
    }

    // ------------------------------------------------------------------ internals

    /// Commits the input's mutations, then releases its outputs; inside a batch, hands both to
    /// the batch instead. On failure: fail-stop. Every input ends with it (inputs in other
    /// modules too, e.g. `handle_push_gone`).
    pub(crate) fn finish(&mut self) -> Result<(), InputFailed> {
        self.finish_staged().map_err(|_discarded| InputFailed)
    }

    /// [`finish`](Self::finish), returning on failure the outputs it discarded.
    pub(super) fn finish_staged(&mut self) -> Result<(), Vec<Output>> {
        // Reads ahead of the rows this input wrote are stale now.
        self.prefetch.written(self.state.batch());
        self.stats.reads_inline = self.reader.reads();
        // The owners of the streams whose queues fell are told after this commit; inside a
        // batch, once for all its inputs when it is sealed (`seal_batch`).
        if !self.commits.in_batch() {
            self.stage_falls();
        }
        self.release_handed_early();
        let finished = self.commit_staged();
        // Tombstone sets and queues read by this input may be evicted now (those it wrote are
        // pinned until their commit is reported, when they are unpinned and evicted if need be).
        self.evict();
        finished
    }

    /// Releases at once the frames of this input that deliver messages handed over by their
    /// conversation's owner shard (seq at or below their stream's applied mark): the owner's
    /// commit made them durable before it handed them over, and its outbox row hands them
    /// over again should this shard lose their apply, as it does when an acknowledgement is
    /// lost. So a message between two shards waits for one commit before its recipient sees
    /// it, as one within a shard does; the acknowledgement of the apply still waits for the
    /// apply's commit. A connection's frames keep their order: none goes early past a frame
    /// for its connection that waits for a commit (held in a batch, or staged before it).
    fn release_handed_early(&mut self) {
        let delivers = |o: &Output| {
            matches!(
                o,
                Output::Send {
                    frame: ServerFrame::Msg(_),
                    ..
                }
            )
        };
        if self.config.shard.map().shards() < 2
            || !self.commits.in_batch()
            || !self.staged.iter().any(delivers)
        {
            return;
        }
        let mut waiting = std::collections::BTreeSet::new();
        let staged = std::mem::take(&mut self.staged);
        for o in staged {
            match o.conn() {
                Some(conn)
                    if !waiting.contains(&conn)
                        && !self.commits.holds(conn)
                        && self.handed_over(&o, conn) =>
                {
                    self.outputs.push_back(o);
                }
                Some(conn) => {
                    waiting.insert(conn);
                    self.staged.push(o);
                }
                None => self.staged.push(o),
            }
        }
    }

    /// Whether `o` delivers to `conn` a message its conversation's owner shard handed over.
    fn handed_over(&self, o: &Output, conn: ConnId) -> bool {
        let Output::Send {
            frame: ServerFrame::Msg(m),
            ..
        } = o
        else {
            return false;
        };
        let Some(c) = self.sessions.get(conn) else {
            return false;
        };
        let stream = crate::handoff::Stream {
            recipient: c.user.clone(),
            conv: m.conv_id.clone(),
        };
        m.seq <= self.state.handoffs().applied(&stream)
    }

    /// Stages a level report for each owner of a stream whose queue fell since the last
    /// ones (`crate::handoff::levels`); `false` when none fell.
    fn stage_falls(&mut self) -> bool {
        let reports = self.state.take_falls();
        let any = !reports.is_empty();
        for levels in reports {
            self.staged
                .push(Output::Cross(crate::handoff::Crossing::Levels(levels)));
        }
        any
    }

    /// Evicts what the caches hold beyond their bounds; reads ahead of an evicted queue tail
    /// are stale (they may have run before the tail's commit).
    fn evict(&mut self) {
        self.state.evict();
        for prefix in self.state.take_forgotten_tails() {
            self.prefetch.forgotten(Table::Messages, &prefix);
        }
    }

    /// Commits the input's mutations or hands them to the open batch ([`Relay::finish`]).
    fn commit_staged(&mut self) -> Result<(), Vec<Output>> {
        let poisoned = std::mem::take(&mut self.state.poisoned());
        if !self.failed {
            self.commits.open_if_pipelined();
        }
        if !poisoned
            && let Some(pinned) = self.commits.join(self.state.mutations(), &mut self.staged)
        {
            self.state.move_written(pinned);
            self.state.mutations().reset();
            return Ok(());
        }
        let committed = if poisoned {
            Err(StoreError::Backend("a record failed to serialise".into()))
        } else {
            self.commits.commit_input(self.state.batch())
        };
        self.state.mutations().reset();
        match committed {
            Ok(()) => {
                self.outputs.extend(self.staged.drain(..));
                self.state.unpin_written();
                Ok(())
            }
            Err(_) => {
                if planted!(self.config, AckWithoutCommit) {
                    // PLANTED BUG (test-only): the outputs (acks) leave although nothing was stored.
                    self.outputs.extend(self.staged.drain(..));
                }
                let discarded = std::mem::take(&mut self.staged);
                self.fail_stop_at(self.commits.next_id());
                Err(discarded)
            }
        }
    }

    /// Fail-stop with `first` as the first batch that is not durable.
    fn fail_stop_at(&mut self, first: BatchId) {
        self.commits.fail_stop_at(first);
        self.fail_stop();
    }

    /// A commit failed: drop whatever was staged, held for a batch or waiting for a commit in
    /// flight, close every socket and refuse everything from now on.
    fn fail_stop(&mut self) {
        self.staged.clear();
        self.commits.drop_all();
        self.failed = true;
        // Requests and upgrades waiting for reads are refused as a failed commit refuses.
        for (w, work) in self.prefetch.take_requests() {
            let (code, words) = (
                ErrorCode::STORAGE_UNAVAILABLE,
                "the relay's store failed; nothing was changed, retry later",
            );
            probes::refusal(code.as_str());
            self.refuse_work(w, &work, code, words);
        }
        self.refuse_all_held();
        for conn in self.sessions.close_all() {
            self.outputs.push_back(Output::Close {
                conn,
                reason: CloseReason::StorageFailure,
            });
        }
    }
}

//! Group commit for the SQLite stores of one process that write to one database (the cores of a
//! sharded relay, each with its store and its write connection).
//!
//! SQLite takes one writer at a time, and each of its transactions ends with an `fsync` of the
//! WAL. When every core committed alone, two cores committing at once paid two `fsync`s one
//! after the other. In a [`WriteGroup`] a store that commits while another one writes hands its
//! batch over and waits; the store writing finishes, and the next store to go writes every
//! batch handed over meanwhile in **one** transaction, so the cores' commits share one `fsync`:
//!
//! ```text
//!   core 0:  commit(a) ── writes [a] ──────── fsync ── Ok ── commit(c) ── writes [b, c] ── fsync ── Ok
//!   core 1:     commit(b) ── hands b over, waits ─────────────────────────────────────────────── Ok
//! ```
//!
//! What a store that commits can rely on is unchanged: its batch is durable when `commit`
//! returns `Ok`, and none of it is visible when it returns `Err`. A transaction of several
//! stores' batches that fails is rolled back, and each of its batches is then written in a
//! transaction of its own: a batch fails only for a fault of its own or of the database, never
//! for another core's. The shards' rows are disjoint (each shard writes only its own), so the
//! order of the batches within one transaction does not matter; they are written in the order
//! they were handed over anyway, the writer's own last.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::store::{Batch, StoreError};

/// The stores of this process that commit to one database, writing together: a commit that
/// comes while another store writes is handed over, and the next writer writes every batch
/// handed over meanwhile in one transaction (a batch fails only for itself). Cloning it gives
/// another handle on the same group; a store opened without one is in a group of its own.
#[derive(Debug, Clone, Default)]
pub struct WriteGroup(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when a writer is done (its results are in, and the group may write again).
    written: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Whether a store writes for the group now.
    writing: bool,
    /// Batches handed over and not yet taken by a writer, oldest first.
    handed: Vec<Handed>,
    /// The next ticket of a handed batch.
    next: u64,
    /// Results of handed batches written, by ticket, until their stores take them.
    results: BTreeMap<u64, Result<(), StoreError>>,
    /// Writes for commits (a writer's turn: one transaction, unless it failed with several
    /// batches) and the batches they held (for [`WriteGroup::written`]).
    writes: u64,
    batches: u64,
}

/// A batch handed to the group's next writer: a copy (its store's buffers are reused as soon as
/// its `commit` returns).
#[derive(Debug)]
struct Handed {
    ticket: u64,
    batch: Batch,
}

impl WriteGroup {
    /// Commits `batch` with the group: written by this store, together with every batch handed
    /// over while the group's last writer wrote, or handed to the store writing now. `write`
    /// writes batches in one transaction on this store's connection; it is called only when no
    /// other store of the group writes.
    pub(super) fn commit(
        &self,
        batch: &Batch,
        mut write: impl FnMut(&[&Batch]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let mut state = self.lock();
        let mut ticket = None;
        while state.writing {
            let mine = *ticket.get_or_insert_with(|| {
                let mine = state.next;
                state.next += 1;
                state.handed.push(Handed {
                    ticket: mine,
                    batch: batch.clone(),
                });
                mine
            });
            state = self.wait(state);
            if let Some(result) = state.results.remove(&mine) {
                return result;
            }
        }
        // Nobody writes: this store writes for the group, its own batch among the others (a
        // batch it handed over and no writer took is still in `handed`).
        state.writing = true;
        let handed = std::mem::take(&mut state.handed);
        drop(state);
        let mut writer = Writer {
            group: self,
            tickets: handed.iter().map(|h| h.ticket).collect(),
            results: Vec::new(),
            batches: 0,
        };
        let own = ticket.is_none().then_some(batch);
        let all: Vec<&Batch> = handed.iter().map(|h| &h.batch).chain(own).collect();
        let mut results: Vec<_> = match write(&all) {
            Ok(()) => all.iter().map(|_| Ok(())).collect(),
            Err(e) if all.len() == 1 => vec![Err(e)],
            // Rolled back: each batch alone, so that it fails only for itself.
            Err(_) => all.iter().map(|b| write(&[*b])).collect(),
        };
        let own = own.and_then(|_| results.pop());
        writer.results = results;
        writer.batches = all.len();
        drop(writer);
        let lost = || Err(StoreError::Backend("a group commit lost its result".into()));
        match ticket {
            Some(mine) => self.lock().results.remove(&mine).unwrap_or_else(lost),
            None => own.unwrap_or_else(lost),
        }
    }

    /// Runs `f` as the group's only writer (a schema migration), once no other store writes.
    pub(super) fn alone<R>(&self, f: impl FnOnce() -> R) -> R {
        let mut state = self.lock();
        while state.writing {
            state = self.wait(state);
        }
        state.writing = true;
        drop(state);
        let _writer = Writer {
            group: self,
            tickets: Vec::new(),
            results: Vec::new(),
            batches: 0,
        };
        f()
    }

    /// Batches handed over and waiting for a writer.
    pub fn waiting(&self) -> usize {
        self.lock().handed.len()
    }

    /// Writes the group's stores made for commits, and the batches they held: more batches
    /// than writes is commits that shared a transaction and its `fsync`.
    pub fn written(&self) -> (u64, u64) {
        let state = self.lock();
        (state.writes, state.batches)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.0
            .written
            .wait(state)
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The group's writer while it writes: when dropped, the results of the handed batches it took
/// go to their stores and the group may write again. A writer dropped before it has their
/// results (its write panicked) fails them.
struct Writer<'a> {
    group: &'a WriteGroup,
    /// The tickets of the handed batches it took, in order.
    tickets: Vec<u64>,
    /// Their results, in the same order.
    results: Vec<Result<(), StoreError>>,
    /// Batches written (the writer's own included): 0 for a migration.
    batches: usize,
}

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        let mut state = self.group.lock();
        let mut results = std::mem::take(&mut self.results).into_iter();
        for ticket in std::mem::take(&mut self.tickets) {
            let result = results.next().unwrap_or_else(|| {
                Err(StoreError::Backend(
                    "the store writing this batch for its group stopped".into(),
                ))
            });
            state.results.insert(ticket, result);
        }
        if self.batches > 0 {
            state.writes += 1;
            state.batches += self.batches as u64;
        }
        state.writing = false;
        drop(state);
        self.group.0.written.notify_all();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};

    use super::WriteGroup;
    use crate::store::{Batch, StoreError, Table};

    /// A batch of one row, `key`.
    fn batch(key: &str) -> Batch {
        let mut b = Batch::new();
        b.put(Table::Accounts, key, b"v");
        b
    }

    /// The keys of the batches of each write, in the order written.
    type Log = Arc<Mutex<Vec<Vec<String>>>>;

    fn keys(batches: &[&Batch]) -> Vec<String> {
        batches
            .iter()
            .flat_map(|b| b.iter().filter_map(|m| m.key().map(str::to_owned)))
            .collect()
    }

    /// A write that logs its batches and fails when one of them is `bad`.
    fn logging(log: &Log) -> impl FnMut(&[&Batch]) -> Result<(), StoreError> + use<> {
        let log = Arc::clone(log);
        move |batches| {
            let keys = keys(batches);
            let bad = keys.iter().any(|k| k == "bad");
            log.lock().unwrap().push(keys);
            if bad {
                Err(StoreError::Backend("bad batch".into()))
            } else {
                Ok(())
            }
        }
    }

    /// Store `a` commits with a write that waits for `release`; `others` commit meanwhile
    /// (each with `write`), and `a` is released once they all wait. Returns `a`'s result and
    /// theirs, in the order of `others`.
    fn behind_a_slow_write(
        group: &WriteGroup,
        log: &Log,
        others: &[&str],
        write: impl Fn(&Log) -> Box<dyn FnMut(&[&Batch]) -> Result<(), StoreError> + Send>,
    ) -> Vec<std::thread::Result<Result<(), StoreError>>> {
        let (started, is_started) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        std::thread::scope(|scope| {
            let first = {
                let mut write = write(log);
                scope.spawn(move || {
                    group.commit(&batch("a"), |b| {
                        started.send(()).unwrap();
                        released.recv().unwrap();
                        write(b)
                    })
                })
            };
            is_started.recv().unwrap();
            let mut handles = vec![first];
            for (n, key) in others.iter().enumerate() {
                let mut write = write(log);
                handles.push(scope.spawn(move || group.commit(&batch(key), |b| write(b))));
                while group.waiting() < n + 1 {
                    std::thread::yield_now();
                }
            }
            release.send(()).unwrap();
            handles.into_iter().map(|h| h.join()).collect()
        })
    }

    /// Commits that come while a store writes are written by the next writer, in one write.
    #[test]
    fn batches_handed_over_while_a_store_writes_are_written_together() {
        let group = WriteGroup::default();
        let log = Log::default();
        let results = behind_a_slow_write(&group, &log, &["b", "c"], |log| Box::new(logging(log)));
        assert!(results.into_iter().all(|r| r.unwrap().is_ok()));
        assert_eq!(*log.lock().unwrap(), [vec!["a"], vec!["b", "c"]]);
        assert_eq!(group.written(), (2, 3), "3 batches in 2 writes");
        assert_eq!(group.waiting(), 0);
    }

    /// A write of several batches that fails is made again batch by batch: only the batch at
    /// fault fails.
    #[test]
    fn a_failed_group_write_fails_only_the_batch_at_fault() {
        let group = WriteGroup::default();
        let log = Log::default();
        let results =
            behind_a_slow_write(&group, &log, &["bad", "c"], |log| Box::new(logging(log)));
        let results: Vec<bool> = results.into_iter().map(|r| r.unwrap().is_ok()).collect();
        assert_eq!(results, [true, false, true]);
        assert_eq!(
            *log.lock().unwrap(),
            [vec!["a"], vec!["bad", "c"], vec!["bad"], vec!["c"]]
        );
    }

    /// A store whose write panics fails the batches it took for the group, and the group
    /// writes again after it.
    #[test]
    fn a_writer_that_panics_fails_what_it_took_and_frees_the_group() {
        let group = WriteGroup::default();
        let log = Log::default();
        let results = behind_a_slow_write(&group, &log, &["b", "c"], |log| {
            let mut write = logging(log);
            Box::new(move |batches| {
                assert!(batches.len() < 2, "a write of two batches panics");
                write(batches)
            })
        });
        let mut results = results.into_iter();
        assert!(results.next().unwrap().unwrap().is_ok(), "a wrote alone");
        // One of b and c wrote both and panicked; the other got an error.
        let (panicked, failed): (Vec<_>, Vec<_>) = results.partition(Result::is_err);
        assert_eq!((panicked.len(), failed.len()), (1, 1));
        let failed = failed.into_iter().next().unwrap().unwrap();
        assert!(
            matches!(&failed, Err(StoreError::Backend(m)) if m.contains("stopped")),
            "{failed:?}"
        );
        let log = Log::default();
        assert!(group.commit(&batch("d"), logging(&log)).is_ok());
        assert_eq!(*log.lock().unwrap(), [vec!["d"]]);
    }
}

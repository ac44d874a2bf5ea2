//! Cores on threads of their own (thread per core): each core of a server that runs them so
//! gets a current-thread tokio runtime on a thread named after its shard; the core task runs
//! there, and so do its sockets' tasks (their connections move there after the upgrade,
//! `ws`), so that a frame read from a socket, the core's handling of it and the frames it
//! writes to sockets of the same core cross no thread. Commits and reads ahead stay on the
//! committer's and readers' threads.

use std::future::Future;
use std::io;

use relay_core::handoff::ShardMap;
use tokio::runtime::{Builder, Handle, Runtime};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::error;

use super::{Cores, Input};

/// The runtime of one core's thread, built before the core is, so that its sockets can be
/// sent there from the start ([`CoreThread::home`]).
pub(crate) struct CoreThread {
    shard: usize,
    runtime: Runtime,
}

impl CoreThread {
    /// The runtime for the core of `shard` (not running yet).
    pub(crate) fn new(shard: usize) -> io::Result<Self> {
        let runtime = Builder::new_current_thread()
            .enable_all()
            .thread_name(format!("relay-core-{shard}"))
            .build()?;
        Ok(Self { shard, runtime })
    }

    /// The inputs of the cores of `map` (`senders`, in shard order), and with `threads` a
    /// thread for each, in the same order, which the inputs name as its core's home.
    pub(crate) fn for_cores(
        threads: bool,
        map: ShardMap,
        senders: Vec<mpsc::Sender<Input>>,
    ) -> io::Result<(Cores, std::vec::IntoIter<Self>)> {
        if !threads {
            return Ok((Cores::new(map, senders), Vec::new().into_iter()));
        }
        let threads = (0..senders.len())
            .map(Self::new)
            .collect::<io::Result<Vec<_>>>()?;
        let homes = threads.iter().map(Self::home).collect();
        Ok((
            Cores::new(map, senders).with_homes(homes),
            threads.into_iter(),
        ))
    }

    /// Runs the core `make` builds on `thread` ([`CoreThread::run`]), or as a task on the
    /// caller's runtime without one; `make` is told which (`true`: on a thread of its own).
    pub(crate) fn spawn<C, F>(thread: Option<Self>, make: C) -> io::Result<JoinHandle<()>>
    where
        C: FnOnce(bool) -> F + Send + 'static,
        F: Future + Send + 'static,
    {
        match thread {
            Some(thread) => thread.run(move || make(true)),
            None => Ok(tokio::spawn(async move {
                make(false).await;
            })),
        }
    }

    /// Where the core's tasks are spawned.
    pub(crate) fn home(&self) -> Handle {
        self.runtime.handle().clone()
    }

    /// Builds the core on its runtime (`make`, which may spawn tasks there) and runs it on a
    /// thread of its own until it returns; the task returned (on the caller's runtime)
    /// ends with it.
    pub(crate) fn run<C, F>(self, make: C) -> io::Result<JoinHandle<()>>
    where
        C: FnOnce() -> F + Send + 'static,
        F: Future,
    {
        let Self { shard, runtime } = self;
        let (done, ended) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("relay-core-{shard}"))
            .spawn(move || {
                let core = {
                    let _entered = runtime.enter();
                    make()
                };
                drop(runtime.block_on(core));
                // Socket tasks still lingering on this runtime end with it.
                let _ = done.send(());
            })?;
        Ok(tokio::spawn(async move {
            if ended.await.is_err() {
                error!(shard, "a relay core thread ended abnormally");
            }
        }))
    }
}
